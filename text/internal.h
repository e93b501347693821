/* What the tokenizer facade (tokenizer.c) and the two tokenizers share inside text/. */
#ifndef WEFT_TEXT_INTERNAL_H
#define WEFT_TEXT_INTERNAL_H

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "text/tokenizer.h"

/* A growing array of token ids. */
struct weft_ids {
    int32_t *v;
    size_t n, cap;
};
weft_status_t weft_ids_push(struct weft_ids *ids, int32_t id);
void weft_ids_cleanup(struct weft_ids *ids);

/* A growing byte string (always NUL-terminated once anything was appended). */
struct weft_str {
    char *s;
    size_t n, cap;
};
weft_status_t weft_str_add(struct weft_str *b, const char *s, size_t n);
void weft_str_cleanup(struct weft_str *b);

/* A map from byte strings to int32 (open addressing; the strings are borrowed). */
struct weft_strmap {
    const char **keys;
    uint32_t *lens;
    int32_t *vals;
    size_t cap, n;
};
weft_status_t weft_strmap_init(struct weft_strmap *m, size_t expect);
/* Inserts; false when the key was there already (the value is not changed). */
weft_status_t weft_strmap_put(struct weft_strmap *m, const char *key, size_t len, int32_t val,
                              bool *added_p);
/* -1 when absent. */
int32_t weft_strmap_get(const struct weft_strmap *m, const char *key, size_t len);
void weft_strmap_cleanup(struct weft_strmap *m);

/* Special tokens matched in the text before anything else (the tokenizers library's added
 * vocabulary): leftmost, and the longest there. */
struct weft_special {
    const char *text;
    size_t len;
    int32_t id;
    bool normalized; /* matched in the normalised text (else in the raw text) */
};
/* The first special of set[] at or after s[from..len) (matching normalized == norm): its index
 * and position, or -1. */
int weft_special_find(const struct weft_special *set, int n, bool norm, const char *s, size_t len,
                      size_t from, size_t *at_p);

/* Rust's String::from_utf8_lossy: every maximal ill-formed subsequence becomes U+FFFD. */
weft_status_t weft_str_add_lossy(struct weft_str *b, const char *s, size_t n);

/* tokenizer_config.json: a special token given as a string or as {"content": ...}; NULL when
 * absent. */
const char *weft_tok_config_token(const cJSON *config, const char *key);
/* Whether added_tokens_decoder marks this token "normalized" (def when it says nothing). */
bool weft_tok_config_normalized(const cJSON *config, const char *content, bool def);

/* CLIP's BPE (clip_bpe.c). */
struct weft_clip_bpe;
weft_status_t weft_clip_bpe_load(const char *vocab_json, size_t vocab_len, const char *merges,
                                 size_t merges_len, const cJSON *config, const char *origin,
                                 struct weft_clip_bpe **bpe_p, struct weft_error *err);
void weft_clip_bpe_free(struct weft_clip_bpe *bpe);
/* The ids of checked text, without the start and end tokens. */
weft_status_t weft_clip_bpe_encode(const struct weft_clip_bpe *bpe, const char *text, size_t len,
                                   struct weft_ids *out, struct weft_error *err);
weft_status_t weft_clip_bpe_decode(const struct weft_clip_bpe *bpe, const int32_t *ids,
                                   int64_t n, struct weft_str *out, struct weft_error *err);
int32_t weft_clip_bpe_vocab_size(const struct weft_clip_bpe *bpe);
const char *weft_clip_bpe_piece(const struct weft_clip_bpe *bpe, int32_t id);
void weft_clip_bpe_ids(const struct weft_clip_bpe *bpe, int32_t *bos, int32_t *eos,
                       int32_t *pad);

/* T5's SentencePiece unigram (t5_spm.c). */
struct weft_t5_spm;
weft_status_t weft_t5_spm_load(const void *model, size_t model_len, const cJSON *config,
                               const char *origin, struct weft_t5_spm **t5_p,
                               struct weft_error *err);
void weft_t5_spm_free(struct weft_t5_spm *t5);
/* The ids of checked text, without the final </s>. */
weft_status_t weft_t5_spm_encode(const struct weft_t5_spm *t5, const char *text, size_t len,
                                 struct weft_ids *out, struct weft_error *err);
weft_status_t weft_t5_spm_decode(const struct weft_t5_spm *t5, const int32_t *ids, int64_t n,
                                 struct weft_str *out, struct weft_error *err);
int32_t weft_t5_spm_vocab_size(const struct weft_t5_spm *t5);
const char *weft_t5_spm_piece(const struct weft_t5_spm *t5, int32_t id);
void weft_t5_spm_ids(const struct weft_t5_spm *t5, int32_t *eos, int32_t *pad);

#endif
