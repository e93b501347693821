/* SentencePiece's model file (a ModelProto in protobuf's wire format), read by weft itself for
 * what libsentencepiece's public API does not give: each piece's type, and the normaliser's
 * precompiled character map. Also writes the same model with an identity normaliser, so that
 * libsentencepiece segments text weft has normalised already (as transformers does). */
#ifndef WEFT_TEXT_SPM_MODEL_H
#define WEFT_TEXT_SPM_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

struct weft_spm_piece {
    const char *text; /* into the model's bytes (not NUL-terminated) */
    size_t len;
    int type;         /* enum weft_spm_type (NORMAL when absent) */
};

struct weft_spm_model {
    struct weft_spm_piece *pieces; /* [n] (weft_free) */
    int32_t n;
    const uint8_t *charsmap;       /* into the model's bytes; NULL when none */
    size_t charsmap_len;
    uint8_t *identity;             /* the model with an identity normaliser (weft_free) */
    size_t identity_len;
};

/* Parse a model's bytes (borrowed: pieces and charsmap point into them). err names origin. */
weft_status_t weft_spm_model_parse(const void *bytes, size_t len, const char *origin,
                                   struct weft_spm_model *out, struct weft_error *err);
void weft_spm_model_cleanup(struct weft_spm_model *m);

/* The precompiled character map (a double-array trie of UTF-8 keys, the replacements after it),
 * applied as the tokenizers library's Precompiled normaliser applies it: per extended grapheme
 * cluster of fewer than 6 bytes, the first (shortest) key that starts it replaces the whole
 * cluster; otherwise per code point, the first key that starts the code point replaces it. */
struct weft_charsmap {
    const uint32_t *units; /* unaligned-safe copies are made: see charsmap.c */
    uint32_t *own;
    size_t n_units;
    const char *normalized;
    size_t normalized_len;
};
weft_status_t weft_charsmap_init(struct weft_charsmap *cm, const uint8_t *blob, size_t len,
                                 const char *origin, struct weft_error *err);
void weft_charsmap_cleanup(struct weft_charsmap *cm);
/* Normalise checked text s[0..n) onto out (struct weft_str of internal.h). */
struct weft_str;
weft_status_t weft_charsmap_apply(const struct weft_charsmap *cm, const char *s, size_t n,
                                  struct weft_str *out);

#endif
