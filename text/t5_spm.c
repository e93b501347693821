/* T5's tokenizer as transformers' T5TokenizerFast runs it (T5Tokenizer of transformers 5, the
 * tokenizers library's pipeline):
 *
 *   special tokens (pad, eos, unk, <extra_id_N>, additional ones; never normalised) split out
 *   -> the model's precompiled character map, as the Precompiled normaliser applies it
 *   -> WhitespaceSplit (Unicode White_Space) -> Metaspace: "▁" before every word
 *   -> the unigram model's best segmentation of each word (libsentencepiece, given the model
 *      with an identity normaliser: the text is normalised already).
 * The extra ids follow the model's pieces in reverse order (<extra_id_0> is the last id), as
 * transformers numbers them. Decoding is Metaspace's ("▁" -> " ", the first word's space
 * dropped). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/num.h"
#include "text/internal.h"
#include "text/spm_model.h"
#include "text/spm_shim.h"
#include "text/unicode.h"

#define MAX_EXTRA 1000
#define META "\xE2\x96\x81" /* U+2581, SentencePiece's space */

struct weft_t5_spm {
    struct weft_spm *spm;
    uint8_t *model;           /* the file's bytes (pieces point into them) */
    struct weft_spm_model pm;
    struct weft_charsmap cm;
    int32_t n_pieces, n_extra;
    char **piece;             /* [n_pieces + n_extra], NUL-terminated copies */
    struct weft_special *special;
    int n_special;
    int32_t eos, pad, unk;
};

static int32_t piece_id(const struct weft_t5_spm *t, const char *s)
{
    size_t n = strlen(s);
    for (int32_t i = 0; i < t->n_pieces + t->n_extra; i++)
        if (strlen(t->piece[i]) == n && memcmp(t->piece[i], s, n) == 0)
            return i;
    return -1;
}

static weft_status_t add_special(struct weft_t5_spm *t, const char *text, const char *origin,
                                 const char *key, int32_t *id_p, struct weft_error *err)
{
    int32_t id = piece_id(t, text);
    if (id < 0)
        return weft_error_refuse(err, WEFT_ERR_FORMAT, "%s: %s \"%.40s\" is not a piece of "
                                 "spiece.model nor an extra id", origin, key, text);
    if (id_p)
        *id_p = id;
    for (int k = 0; k < t->n_special; k++)
        if (t->special[k].id == id)
            return WEFT_OK;
    t->special[t->n_special++] = (struct weft_special){t->piece[id], strlen(t->piece[id]), id,
                                                       false};
    return WEFT_OK;
}

static weft_status_t pieces_init(struct weft_t5_spm *t, const cJSON *config, const char *origin,
                                 struct weft_error *err)
{
    const cJSON *ex = cJSON_GetObjectItemCaseSensitive(config, "extra_ids");
    t->n_extra = 100; /* T5Tokenizer's default */
    int64_t n_extra = t->n_extra;
    if (ex && (!cJSON_IsNumber(ex) || !weft_double_int(ex->valuedouble, 0, MAX_EXTRA, &n_extra)))
        return weft_error_refuse(err, WEFT_ERR_FORMAT, "%s: extra_ids must be an integer in "
                                 "0..%d", origin, MAX_EXTRA);
    t->n_extra = (int32_t)n_extra;
    t->n_pieces = t->pm.n;
    const size_t n = (size_t)t->n_pieces + (size_t)t->n_extra;
    t->piece = weft_calloc(n, sizeof(*t->piece));
    const cJSON *add = cJSON_GetObjectItemCaseSensitive(config, "additional_special_tokens");
    size_t n_add = cJSON_IsArray(add) ? (size_t)cJSON_GetArraySize(add) : 0;
    t->special = weft_calloc(3 + (size_t)t->n_extra + n_add, sizeof(*t->special));
    if (!t->piece || !t->special)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < t->n_pieces; i++) {
        const struct weft_spm_piece *p = &t->pm.pieces[i];
        if (memchr(p->text, '\0', p->len))
            return weft_error_refuse(err, WEFT_ERR_FORMAT, "%s: piece %d holds a NUL", origin,
                                     i);
        if (!(t->piece[i] = weft_malloc(p->len + 1)))
            return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
        memcpy(t->piece[i], p->text, p->len);
        t->piece[i][p->len] = '\0';
    }
    for (int32_t i = 0; i < t->n_extra; i++) {
        char s[32];
        snprintf(s, sizeof(s), "<extra_id_%d>", t->n_extra - 1 - i);
        if (!(t->piece[t->n_pieces + i] = weft_malloc(strlen(s) + 1)))
            return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
        memcpy(t->piece[t->n_pieces + i], s, strlen(s) + 1);
    }
    return WEFT_OK;
}

static weft_status_t specials_init(struct weft_t5_spm *t, const cJSON *config,
                                   const char *origin, struct weft_error *err)
{
    static const struct {
        const char *key, *def;
    } named[] = {{"pad_token", "<pad>"}, {"eos_token", "</s>"}, {"unk_token", "<unk>"}};
    int32_t *ids[] = {&t->pad, &t->eos, &t->unk};
    weft_status_t st = WEFT_OK;
    for (int k = 0; k < 3 && st == WEFT_OK; k++) {
        const char *s = weft_tok_config_token(config, named[k].key);
        st = add_special(t, s ? s : named[k].def, origin, named[k].key, ids[k], err);
    }
    for (int32_t i = 0; i < t->n_extra && st == WEFT_OK; i++)
        st = add_special(t, t->piece[t->n_pieces + i], origin, "extra id", NULL, err);
    const cJSON *add = cJSON_GetObjectItemCaseSensitive(config, "additional_special_tokens");
    const cJSON *e;
    cJSON_ArrayForEach(e, add)
    {
        const char *s = cJSON_IsObject(e) ? weft_tok_config_token(e, "content")
                                          : (cJSON_IsString(e) ? e->valuestring : NULL);
        if (st == WEFT_OK && s)
            st = add_special(t, s, origin, "additional_special_tokens", NULL, err);
    }
    return st;
}

weft_status_t weft_t5_spm_load(const void *model, size_t model_len, const cJSON *config,
                               const char *origin, struct weft_t5_spm **t5_p,
                               struct weft_error *err)
{
    struct weft_t5_spm *t = weft_calloc(1, sizeof(*t));
    if (!t || !(t->model = weft_malloc(model_len + 1))) {
        weft_free(t);
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    }
    memcpy(t->model, model, model_len);
    weft_status_t st = weft_spm_model_parse(t->model, model_len, origin, &t->pm, err);
    if (st == WEFT_OK)
        st = weft_charsmap_init(&t->cm, t->pm.charsmap, t->pm.charsmap_len, origin, err);
    if (st == WEFT_OK) {
        char msg[256] = "";
        int rc = weft_spm_load(t->pm.identity, t->pm.identity_len, &t->spm, msg, sizeof(msg));
        if (rc != 0)
            st = rc < 0 ? weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory")
                        : weft_error_refuse(err, WEFT_ERR_FORMAT, "%s: sentencepiece refused "
                                            "the model: %s", origin, msg);
        else if (weft_spm_size(t->spm) != t->pm.n)
            st = weft_error_refuse(err, WEFT_ERR_FORMAT, "%s: sentencepiece reads %d pieces, "
                                   "the file holds %d", origin, weft_spm_size(t->spm), t->pm.n);
    }
    if (st == WEFT_OK)
        st = pieces_init(t, config, origin, err);
    if (st == WEFT_OK)
        st = specials_init(t, config, origin, err);
    if (st != WEFT_OK) {
        weft_t5_spm_free(t);
        return st;
    }
    *t5_p = t;
    return WEFT_OK;
}

void weft_t5_spm_free(struct weft_t5_spm *t5)
{
    if (!t5)
        return;
    if (t5->piece)
        for (int32_t i = 0; i < t5->n_pieces + t5->n_extra; i++)
            weft_free(t5->piece[i]);
    weft_free((void *)t5->piece);
    weft_free(t5->special);
    weft_spm_free(t5->spm);
    weft_charsmap_cleanup(&t5->cm);
    weft_spm_model_cleanup(&t5->pm);
    weft_free(t5->model);
    weft_free(t5);
}

int32_t weft_t5_spm_vocab_size(const struct weft_t5_spm *t5)
{
    return t5->n_pieces + t5->n_extra;
}

const char *weft_t5_spm_piece(const struct weft_t5_spm *t5, int32_t id)
{
    return id >= 0 && id < t5->n_pieces + t5->n_extra ? t5->piece[id] : "";
}

void weft_t5_spm_ids(const struct weft_t5_spm *t5, int32_t *eos, int32_t *pad)
{
    *eos = t5->eos, *pad = t5->pad;
}

/* ---------------------------------------------------------------------------------------- */

static weft_status_t encode_word(const struct weft_t5_spm *t, const char *w, size_t n,
                                 struct weft_str *buf, struct weft_ids *out,
                                 struct weft_error *err)
{
    buf->n = 0;
    weft_status_t st = weft_str_add(buf, META, 3);
    if (st == WEFT_OK)
        st = weft_str_add(buf, w, n);
    if (st != WEFT_OK)
        return weft_error_refuse(err, st, "out of memory");
    int32_t *ids = NULL;
    size_t k = 0;
    char msg[256] = "";
    int rc = weft_spm_encode(t->spm, buf->s, buf->n, &ids, &k, msg, sizeof(msg));
    if (rc != 0)
        return rc < 0 ? weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory")
                      : weft_error_refuse(err, WEFT_ERR_INVALID, "sentencepiece: %s", msg);
    for (size_t i = 0; i < k && st == WEFT_OK; i++)
        st = weft_ids_push(out, ids[i]);
    free(ids); /* NOLINT(cppcoreguidelines-no-malloc): the shim's malloc() */
    return st == WEFT_OK ? st : weft_error_refuse(err, st, "out of memory");
}

/* Normalised, split on white space, each word segmented. */
static weft_status_t encode_segment(const struct weft_t5_spm *t, const char *s, size_t n,
                                    struct weft_ids *out, struct weft_error *err)
{
    struct weft_str norm = {0}, buf = {0};
    weft_status_t st = weft_charsmap_apply(&t->cm, s, n, &norm);
    if (st != WEFT_OK)
        st = weft_error_refuse(err, st, "out of memory");
    size_t pos = 0, word = 0;
    bool in_word = false;
    while (st == WEFT_OK && pos <= norm.n) {
        size_t at = pos;
        bool space = pos == norm.n || weft_text_is_space(weft_text_next(norm.s, norm.n, &pos));
        if (space && in_word)
            st = encode_word(t, norm.s + word, at - word, &buf, out, err);
        if (!space && !in_word)
            word = at;
        in_word = !space;
        if (at == norm.n)
            break;
    }
    weft_str_cleanup(&norm);
    weft_str_cleanup(&buf);
    return st;
}

weft_status_t weft_t5_spm_encode(const struct weft_t5_spm *t5, const char *text, size_t len,
                                 struct weft_ids *out, struct weft_error *err)
{
    weft_status_t st = WEFT_OK;
    size_t pos = 0;
    while (st == WEFT_OK && pos < len) {
        size_t at = len;
        int k = weft_special_find(t5->special, t5->n_special, false, text, len, pos, &at);
        if (at > pos)
            st = encode_segment(t5, text + pos, at - pos, out, err);
        if (st == WEFT_OK && k >= 0 && (st = weft_ids_push(out, t5->special[k].id)) != WEFT_OK)
            st = weft_error_refuse(err, st, "out of memory");
        pos = k >= 0 ? at + t5->special[k].len : len;
    }
    return st;
}

weft_status_t weft_t5_spm_decode(const struct weft_t5_spm *t5, const int32_t *ids, int64_t n,
                                 struct weft_str *out, struct weft_error *err)
{
    weft_status_t st = weft_str_add(out, "", 0);
    for (int64_t i = 0; i < n && st == WEFT_OK; i++) {
        const char *p = weft_t5_spm_piece(t5, ids[i]);
        size_t l = strlen(p);
        for (size_t k = 0; k < l && st == WEFT_OK;) {
            bool meta = l - k >= 3 && memcmp(p + k, META, 3) == 0;
            if (meta && !(i == 0 && k == 0))
                st = weft_str_add(out, " ", 1);
            else if (!meta)
                st = weft_str_add(out, p + k, 1);
            k += meta ? 3 : 1;
        }
    }
    return st == WEFT_OK ? st : weft_error_refuse(err, st, "out of memory");
}
