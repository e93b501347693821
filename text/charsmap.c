/* SentencePiece's precompiled character map, applied as the tokenizers library's Precompiled
 * normaliser does (spm_model.h). The trie is darts-clone's double array: each unit holds a
 * label, an offset to its children, and whether a leaf (a value: an offset into the
 * replacements) hangs below. Every index is checked: a model file is input. */
#include <string.h>

#include "common/alloc.h"
#include "text/internal.h"
#include "text/spm_model.h"
#include "text/unicode.h"

weft_status_t weft_charsmap_init(struct weft_charsmap *cm, const uint8_t *blob, size_t len,
                                 const char *origin, struct weft_error *err)
{
    *cm = (struct weft_charsmap){0};
    if (!blob || len == 0)
        return WEFT_OK;
    uint32_t trie;
    if (len < 4)
        return weft_error_refuse(err, WEFT_ERR_FORMAT, "%s: precompiled_charsmap is cut short",
                                 origin);
    trie = (uint32_t)blob[0] | (uint32_t)blob[1] << 8 | (uint32_t)blob[2] << 16 |
           (uint32_t)blob[3] << 24;
    if (trie % 4 || trie > len - 4 || trie == 0)
        return weft_error_refuse(err, WEFT_ERR_FORMAT, "%s: precompiled_charsmap's trie size "
                                 "%u does not fit its %zu bytes", origin, trie, len);
    cm->n_units = trie / 4;
    cm->own = weft_malloc(trie);
    if (!cm->own)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < cm->n_units; i++) { /* little-endian on disk, whatever the host */
        const uint8_t *u = blob + 4 + 4 * i;
        cm->own[i] = (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 |
                     (uint32_t)u[3] << 24;
    }
    cm->units = cm->own;
    cm->normalized = (const char *)blob + 4 + trie;
    cm->normalized_len = len - 4 - trie;
    return WEFT_OK;
}

void weft_charsmap_cleanup(struct weft_charsmap *cm)
{
    weft_free(cm->own);
    *cm = (struct weft_charsmap){0};
}

static uint32_t unit_offset(uint32_t u)
{
    return (u >> 10) << ((u & (1u << 9)) >> 6);
}

/* The value of the first (shortest) key that is a prefix of key[0..n), or -1. */
static int64_t first_prefix(const struct weft_charsmap *cm, const uint8_t *key, size_t n)
{
    if (cm->n_units == 0)
        return -1;
    size_t pos = unit_offset(cm->units[0]);
    for (size_t i = 0; i < n; i++) {
        if (key[i] == 0)
            break;
        pos ^= key[i];
        if (pos >= cm->n_units)
            return -1;
        uint32_t u = cm->units[pos];
        if ((u & ((1u << 31) | 0xFF)) != key[i])
            return -1;
        pos ^= unit_offset(u);
        if (pos >= cm->n_units)
            return -1;
        if ((u >> 8) & 1)
            return (int64_t)(cm->units[pos] & ((1u << 31) - 1));
    }
    return -1;
}

/* The replacement of chunk, or NULL (its length in *len_p). */
static const char *transform(const struct weft_charsmap *cm, const char *chunk, size_t n,
                             size_t *len_p)
{
    int64_t v = first_prefix(cm, (const uint8_t *)chunk, n);
    if (v < 0 || (size_t)v >= cm->normalized_len)
        return NULL;
    const char *s = cm->normalized + v;
    const char *nul = memchr(s, '\0', cm->normalized_len - (size_t)v);
    *len_p = nul ? (size_t)(nul - s) : cm->normalized_len - (size_t)v;
    return s;
}

static weft_status_t grapheme(const struct weft_charsmap *cm, const char *g, size_t n,
                              struct weft_str *out)
{
    size_t rl;
    const char *r;
    if (n < 6 && (r = transform(cm, g, n, &rl)))
        return weft_str_add(out, r, rl);
    weft_status_t st = WEFT_OK;
    for (size_t pos = 0; pos < n && st == WEFT_OK;) {
        size_t from = pos;
        (void)weft_text_next(g, n, &pos);
        r = transform(cm, g + from, pos - from, &rl);
        st = r ? weft_str_add(out, r, rl) : weft_str_add(out, g + from, pos - from);
    }
    return st;
}

weft_status_t weft_charsmap_apply(const struct weft_charsmap *cm, const char *s, size_t n,
                                  struct weft_str *out)
{
    weft_status_t st = weft_str_add(out, "", 0);
    if (cm->n_units == 0)
        return st == WEFT_OK ? weft_str_add(out, s, n) : st;
    size_t start = 0, pos = 0;
    int32_t state = 0, prev = -1;
    while (pos < n && st == WEFT_OK) {
        size_t at = pos;
        int32_t cp = weft_text_next(s, n, &pos);
        if (prev >= 0 && weft_text_grapheme_break(prev, cp, &state)) {
            st = grapheme(cm, s + start, at - start, out);
            start = at;
        }
        prev = cp;
    }
    if (st == WEFT_OK && start < n)
        st = grapheme(cm, s + start, n - start, out);
    return st;
}
