/* weft tokenize: the token ids and pieces a model's tokenizers make of a prompt, exactly as the
 * pipeline feeds them to its text encoders (padded and truncated): the tool a user debugs a
 * prompt with. */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "common/alloc.h"
#include "common/log.h"
#include "model/model.h"
#include "text/tokenizer.h"

static void help(FILE *out)
{
    fprintf(out,
            "usage: weft tokenize [--model DIR] --prompt TEXT [--max-sequence-length N] [--json]\n"
            "\n"
            "Tokenize TEXT with the pipeline's tokenizers as FluxPipeline calls them before its\n"
            "text encoders: tokenizer/ (CLIPTokenizer: padded and truncated to its\n"
            "model_max_length, 77 for CLIP-L) and tokenizer_2/ (T5TokenizerFast: </s> at the end,\n"
            "padded and truncated to max_sequence_length). Prints each tokenizer's ids and\n"
            "pieces, how many ids the text makes before truncation and what truncation dropped.\n"
            "\n"
            "  --model DIR              pipeline folder (default [model] path, else the embedded\n"
            "                           model, which has no tokenizers)\n"
            "  --prompt TEXT            the prompt (UTF-8)\n"
            "  --max-sequence-length N  T5's length, 1..512 (default 512)\n"
            "  --json                   {\"tokenizers\": [{\"folder\", \"class\", \"max_length\",\n"
            "                           \"ids\", \"pieces\", \"used\", \"untruncated\",\n"
            "                           \"truncated\", \"dropped\"}, ...]}\n");
}

static cJSON *one_json(const char *folder, const char *cls, const struct weft_tokenizer *tok,
                       const struct weft_tokens *t)
{
    cJSON *o = cJSON_CreateObject(), *ids = cJSON_AddArrayToObject(o, "ids");
    cJSON *pieces = cJSON_AddArrayToObject(o, "pieces");
    if (!o || !ids || !pieces)
        goto err;
    for (int64_t i = 0; i < t->len; i++) {
        cJSON *id = cJSON_CreateNumber(t->ids[i]);
        cJSON *p = cJSON_CreateString(weft_tokenizer_piece(tok, t->ids[i]));
        if (!id || !p) {
            cJSON_Delete(id);
            cJSON_Delete(p);
            goto err;
        }
        cJSON_AddItemToArray(ids, id);
        cJSON_AddItemToArray(pieces, p);
    }
    if (!cJSON_AddStringToObject(o, "folder", folder) || !cJSON_AddStringToObject(o, "class", cls) ||
        !cJSON_AddNumberToObject(o, "max_length", (double)t->len) ||
        !cJSON_AddNumberToObject(o, "used", (double)t->used) ||
        !cJSON_AddNumberToObject(o, "untruncated", (double)t->untruncated) ||
        !cJSON_AddBoolToObject(o, "truncated", t->truncated) ||
        !(t->dropped ? cJSON_AddStringToObject(o, "dropped", t->dropped)
                     : cJSON_AddNullToObject(o, "dropped")))
        goto err;
    return o;
err:
    cJSON_Delete(o);
    return NULL;
}

static void print_text(const char *folder, const char *cls, const struct weft_tokenizer *tok,
                       const struct weft_tokens *t)
{
    printf("%s (%s): %lld ids, %lld before the padding; the text makes %lld%s\n", folder, cls,
           (long long)t->len, (long long)t->used, (long long)t->untruncated,
           t->truncated ? " (truncated)" : "");
    if (t->truncated)
        printf("  dropped: %s\n", t->dropped ? t->dropped : "");
    printf("  ids:");
    for (int64_t i = 0; i < t->len; i++)
        printf(" %d", t->ids[i]);
    printf("\n  pieces:");
    for (int64_t i = 0; i < t->used; i++)
        printf(" %s", weft_tokenizer_piece(tok, t->ids[i]));
    if (t->used < t->len)
        printf(" ... (%lld x %s)", (long long)(t->len - t->used),
               weft_tokenizer_piece(tok, t->ids[t->used]));
    printf("\n");
}

/* Every tokenizer the folder has, in FluxPipeline's order. */
static weft_status_t run(const struct weft_model *m, const char *text, long long msl, bool json,
                         struct weft_error *err)
{
    const struct weft_model_text *c[2] = {&m->clip, &m->t5};
    const char *folder[2] = {"tokenizer", "tokenizer_2"};
    cJSON *root = json ? cJSON_CreateObject() : NULL, *arr = NULL;
    if (json && !(arr = cJSON_AddArrayToObject(root, "tokenizers"))) {
        cJSON_Delete(root);
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    }
    weft_status_t st = WEFT_OK;
    int n = 0;
    for (int k = 0; k < 2 && st == WEFT_OK; k++) {
        if (!c[k]->tokenizer)
            continue;
        n++;
        struct weft_tokenizer *tok;
        if ((st = weft_tokenizer_open(c[k]->tokenizer_dir, k ? WEFT_TOKENIZER_T5
                                                             : WEFT_TOKENIZER_CLIP, &tok, err)))
            break;
        struct weft_tokens t;
        const int64_t len = k ? msl : weft_tokenizer_model_max_length(tok);
        st = weft_tokenizer_encode(tok, text, strlen(text), len, "--prompt", &t, err);
        if (st == WEFT_OK && json) {
            cJSON *o = one_json(folder[k], c[k]->tokenizer_class, tok, &t);
            if (o)
                cJSON_AddItemToArray(arr, o);
            else
                st = weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
        } else if (st == WEFT_OK) {
            print_text(folder[k], c[k]->tokenizer_class, tok, &t);
        }
        if (st == WEFT_OK)
            weft_tokens_cleanup(&t);
        weft_tokenizer_close(tok);
    }
    if (st == WEFT_OK && n == 0) {
        char why[400];
        st = weft_error_refuse(err, WEFT_ERR_UNSUPPORTED, "%s",
                               weft_model_text_missing(m, why, sizeof(why)));
    }
    if (st == WEFT_OK && json) {
        char *s = cJSON_PrintUnformatted(root);
        if (s)
            printf("%s\n", s);
        else
            st = weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
        free(s); /* NOLINT(cppcoreguidelines-no-malloc): cJSON's allocation */
    }
    cJSON_Delete(root);
    return st;
}

int weft_cmd_tokenize(struct weft_cli *cli)
{
    const char *model = NULL, *text = NULL, *v;
    long long msl = WEFT_MODEL_MAX_SEQUENCE_LENGTH;
    bool json = false;
    for (int i = 1; i < cli->argc; i++) {
        if (weft_cli_is_help(cli->argv[i])) {
            help(stdout);
            return 0;
        }
        if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--model"))) {
            model = v;
        } else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--prompt"))) {
            text = v;
        } else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--max-sequence-length"))) {
            if (weft_cli_parse_int("--max-sequence-length", v, 1, WEFT_MODEL_MAX_SEQUENCE_LENGTH,
                                   &msl) != 0)
                return 2;
        } else if (strcmp(cli->argv[i], "--json") == 0) {
            json = true;
        } else {
            weft_cli_unexpected("tokenize", "", "weft tokenize", cli->argv[i]);
            return 2;
        }
    }
    if (!text) {
        WEFT_LOG_ERROR("tokenize", "--prompt TEXT is required (see `weft tokenize --help`)");
        return 2;
    }
    const char *dir = model ? model : cli->conf.model.path[0] ? cli->conf.model.path
                                                              : WEFT_DEFAULT_MODEL;
    struct weft_error err = WEFT_ERROR_INIT;
    struct weft_model *m = NULL;
    weft_status_t st = weft_model_open(dir, &m, &err);
    if (st == WEFT_OK)
        st = run(m, text, msl, json, &err);
    weft_model_close(m);
    if (st != WEFT_OK)
        weft_error_log(&err, "tokenize");
    return st == WEFT_OK ? 0 : 1;
}
