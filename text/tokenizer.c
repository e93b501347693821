/* The tokenizer facade (tokenizer.h): files, special tokens around the ids, truncation and
 * padding as FluxPipeline asks for them. */
#include "text/tokenizer.h"

#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/files.h"
#include "common/utf8.h"
#include "model/checkpoint.h"
#include "text/internal.h"
#include "text/unicode.h"

#define FILE_MAX (64u << 20) /* vocab.json, merges.txt, spiece.model: CLIP-L's and T5's are ~1 MB */
#define CONFIG_MAX (4u << 20)

struct weft_tokenizer {
    enum weft_tokenizer_kind kind;
    struct weft_clip_bpe *clip;
    struct weft_t5_spm *t5;
    int64_t model_max_length;
    int32_t bos, eos, pad;
    bool clean_up; /* clean_up_tokenization_spaces (T5 only: transformers ignores it for BPE) */
};

int weft_tokenizer_kind_of(const char *class_name)
{
    if (!class_name)
        return -1;
    if (strcmp(class_name, "CLIPTokenizer") == 0 || strcmp(class_name, "CLIPTokenizerFast") == 0)
        return WEFT_TOKENIZER_CLIP;
    if (strcmp(class_name, "T5Tokenizer") == 0 || strcmp(class_name, "T5TokenizerFast") == 0)
        return WEFT_TOKENIZER_T5;
    return -1;
}

weft_status_t weft_tokenizer_open_mem(enum weft_tokenizer_kind kind, const void *a, size_t a_len,
                                      const void *b, size_t b_len, const char *config,
                                      size_t config_len, struct weft_tokenizer **tok_p,
                                      struct weft_error *err)
{
    const char *origin = kind == WEFT_TOKENIZER_CLIP ? "tokenizer" : "tokenizer_2";
    cJSON *cfg = NULL;
    if (config && !(cfg = cJSON_ParseWithLength(config, config_len)))
        return weft_error_refuse(err, WEFT_ERR_FORMAT, "%s/tokenizer_config.json: not JSON",
                                 origin);
    struct weft_tokenizer *t = weft_calloc(1, sizeof(*t));
    if (!t) {
        cJSON_Delete(cfg);
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    }
    weft_status_t st = WEFT_OK;
    {
        t->kind = kind;
        char where[48];
        snprintf(where, sizeof(where), "%s/tokenizer_config.json", origin);
        st = weft_tokenizer_max_length(cfg, kind == WEFT_TOKENIZER_CLIP, where,
                                       &t->model_max_length, err);
        t->clean_up = kind == WEFT_TOKENIZER_T5 &&
                      cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
                          cfg, "clean_up_tokenization_spaces"));
    }
    if (st == WEFT_OK && kind == WEFT_TOKENIZER_CLIP) {
        size_t vl = a_len, ml = b_len;
        if (!weft_utf8_valid(a, vl, NULL) || !weft_utf8_valid(b, ml, NULL))
            st = weft_error_refuse(err, WEFT_ERR_FORMAT, "%s: vocab.json or merges.txt is not "
                                   "UTF-8", origin);
        else
            st = weft_clip_bpe_load(a, vl, b, ml, cfg, origin, &t->clip, err);
        if (st == WEFT_OK)
            weft_clip_bpe_ids(t->clip, &t->bos, &t->eos, &t->pad);
    } else if (st == WEFT_OK) {
        st = weft_t5_spm_load(a, a_len, cfg, origin, &t->t5, err);
        if (st == WEFT_OK) {
            t->bos = -1;
            weft_t5_spm_ids(t->t5, &t->eos, &t->pad);
        }
    }
    cJSON_Delete(cfg);
    if (st != WEFT_OK) {
        weft_tokenizer_close(t);
        return st;
    }
    *tok_p = t;
    return WEFT_OK;
}

static weft_status_t read_file(const char *dir, const char *name, bool optional, size_t max,
                               char **data_p, size_t *len_p, struct weft_error *err)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    weft_status_t st = weft_files_read(path, max, data_p, len_p);
    if (st == WEFT_ERR_NOT_FOUND && optional) {
        *data_p = NULL;
        *len_p = 0;
        return WEFT_OK;
    }
    if (st == WEFT_ERR_NOT_FOUND)
        return weft_error_refuse(err, st, "%s: not found", path);
    if (st == WEFT_ERR_RANGE)
        return weft_error_refuse(err, WEFT_ERR_FORMAT, "%s: larger than %zu bytes", path, max);
    return st == WEFT_OK ? st : weft_error_refuse(err, st, "%s: cannot be read", path);
}

weft_status_t weft_tokenizer_open(const char *dir, enum weft_tokenizer_kind kind,
                                  struct weft_tokenizer **tok_p, struct weft_error *err)
{
    char *a = NULL, *b = NULL, *cfg = NULL;
    size_t al = 0, bl = 0, cl = 0;
    const bool clip = kind == WEFT_TOKENIZER_CLIP;
    weft_status_t st = read_file(dir, clip ? "vocab.json" : "spiece.model", false, FILE_MAX, &a,
                                 &al, err);
    if (st == WEFT_OK && clip)
        st = read_file(dir, "merges.txt", false, FILE_MAX, &b, &bl, err);
    if (st == WEFT_OK)
        st = read_file(dir, "tokenizer_config.json", true, CONFIG_MAX, &cfg, &cl, err);
    if (st == WEFT_OK) {
        st = weft_tokenizer_open_mem(kind, a, al, b, bl, cfg, cl, tok_p, err);
        if (st != WEFT_OK) /* the file names in the cause are relative to the pipeline */
            weft_error_prefix(err, "%s", dir);
    }
    weft_free(a);
    weft_free(b);
    weft_free(cfg);
    return st;
}

void weft_tokenizer_close(struct weft_tokenizer *tok)
{
    if (!tok)
        return;
    weft_clip_bpe_free(tok->clip);
    weft_t5_spm_free(tok->t5);
    weft_free(tok);
}

enum weft_tokenizer_kind weft_tokenizer_kind(const struct weft_tokenizer *tok)
{
    return tok->kind;
}

int64_t weft_tokenizer_model_max_length(const struct weft_tokenizer *tok)
{
    return tok->model_max_length;
}

int32_t weft_tokenizer_vocab_size(const struct weft_tokenizer *tok)
{
    return tok->clip ? weft_clip_bpe_vocab_size(tok->clip) : weft_t5_spm_vocab_size(tok->t5);
}

int32_t weft_tokenizer_pad_id(const struct weft_tokenizer *tok)
{
    return tok->pad;
}

int32_t weft_tokenizer_eos_id(const struct weft_tokenizer *tok)
{
    return tok->eos;
}

const char *weft_tokenizer_piece(const struct weft_tokenizer *tok, int32_t id)
{
    return tok->clip ? weft_clip_bpe_piece(tok->clip, id) : weft_t5_spm_piece(tok->t5, id);
}

/* transformers' clean_up_tokenization: each replacement over the whole text, in this order. */
static weft_status_t clean_up(struct weft_str *s)
{
    static const char *const rep[][2] = {{" .", "."},     {" ?", "?"},     {" !", "!"},
                                         {" ,", ","},     {" ' ", "'"},    {" n't", "n't"},
                                         {" 'm", "'m"},   {" 's", "'s"},   {" 've", "'ve"},
                                         {" 're", "'re"}};
    for (size_t r = 0; r < sizeof(rep) / sizeof(rep[0]); r++) {
        const size_t fl = strlen(rep[r][0]), tl = strlen(rep[r][1]);
        struct weft_str o = {0};
        weft_status_t st = weft_str_add(&o, "", 0);
        for (size_t i = 0; i < s->n && st == WEFT_OK;) {
            bool hit = s->n - i >= fl && memcmp(s->s + i, rep[r][0], fl) == 0;
            st = hit ? weft_str_add(&o, rep[r][1], tl) : weft_str_add(&o, s->s + i, 1);
            i += hit ? fl : 1;
        }
        if (st != WEFT_OK) {
            weft_str_cleanup(&o);
            return st;
        }
        weft_str_cleanup(s);
        *s = o;
    }
    return WEFT_OK;
}

weft_status_t weft_tokenizer_decode(const struct weft_tokenizer *tok, const int32_t *ids,
                                    int64_t n, char **text_p, struct weft_error *err)
{
    struct weft_str s = {0};
    weft_status_t st = tok->clip ? weft_clip_bpe_decode(tok->clip, ids, n, &s, err)
                                 : weft_t5_spm_decode(tok->t5, ids, n, &s, err);
    if (st == WEFT_OK && !s.s && (st = weft_str_add(&s, "", 0)) != WEFT_OK)
        st = weft_error_refuse(err, st, "out of memory");
    if (st == WEFT_OK && tok->clean_up && (st = clean_up(&s)) != WEFT_OK)
        st = weft_error_refuse(err, st, "out of memory");
    if (st != WEFT_OK) {
        weft_str_cleanup(&s);
        return st;
    }
    *text_p = s.s;
    return WEFT_OK;
}

weft_status_t weft_tokenizer_encode(const struct weft_tokenizer *tok, const char *text,
                                    size_t len, int64_t max_len, const char *what,
                                    struct weft_tokens *out, struct weft_error *err)
{
    const int64_t specials = tok->clip ? 2 : 1;
    if (max_len < specials || max_len > WEFT_TOKENIZER_MAX_LEN)
        return weft_error_refuse(err, WEFT_ERR_RANGE, "%s: %lld tokens asked; %lld..%d allowed",
                                 what, (long long)max_len, (long long)specials,
                                 WEFT_TOKENIZER_MAX_LEN);
    weft_status_t st = weft_text_check(text, len, what, err);
    if (st != WEFT_OK)
        return st;
    struct weft_ids raw = {0};
    st = tok->clip ? weft_clip_bpe_encode(tok->clip, text, len, &raw, err)
                   : weft_t5_spm_encode(tok->t5, text, len, &raw, err);
    struct weft_tokens t = {0};
    if (st == WEFT_OK && !(t.ids = weft_malloc((size_t)max_len * sizeof(*t.ids))))
        st = weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    if (st == WEFT_OK && t.ids) {
        const int64_t keep = (int64_t)raw.n < max_len - specials ? (int64_t)raw.n
                                                                 : max_len - specials;
        int64_t o = 0;
        if (tok->clip)
            t.ids[o++] = tok->bos;
        for (int64_t i = 0; i < keep; i++)
            t.ids[o++] = raw.v[i];
        t.ids[o++] = tok->eos;
        t.used = o;
        while (o < max_len)
            t.ids[o++] = tok->pad;
        t.len = max_len;
        t.untruncated = (int64_t)raw.n + specials;
        t.truncated = t.untruncated > max_len;
        if (t.truncated)
            st = weft_tokenizer_decode(tok, raw.v + keep, (int64_t)raw.n - keep, &t.dropped, err);
    }
    weft_ids_cleanup(&raw);
    if (st != WEFT_OK) {
        weft_tokens_cleanup(&t);
        return st;
    }
    *out = t;
    return WEFT_OK;
}

void weft_tokens_cleanup(struct weft_tokens *t)
{
    weft_free(t->ids);
    weft_free(t->dropped);
    *t = (struct weft_tokens){0};
}
