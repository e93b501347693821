/* Growing arrays, the string map, special-token search, lossy UTF-8 and the config helpers
 * the tokenizers share (internal.h). */
#include <string.h>

#include "common/alloc.h"
#include "text/internal.h"

weft_status_t weft_ids_push(struct weft_ids *ids, int32_t id)
{
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 64;
        int32_t *v = weft_realloc(ids->v, cap * sizeof(*v));
        if (!v)
            return WEFT_ERR_NOMEM;
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return WEFT_OK;
}

void weft_ids_cleanup(struct weft_ids *ids)
{
    weft_free(ids->v);
    *ids = (struct weft_ids){0};
}

weft_status_t weft_str_add(struct weft_str *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = weft_realloc(b->s, cap);
        if (!p)
            return WEFT_ERR_NOMEM;
        b->s = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
    return WEFT_OK;
}

void weft_str_cleanup(struct weft_str *b)
{
    weft_free(b->s);
    *b = (struct weft_str){0};
}

/* ---------------------------------------------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h ^ (h >> 29);
}

weft_status_t weft_strmap_init(struct weft_strmap *m, size_t expect)
{
    size_t cap = 16;
    while (cap < expect * 2)
        cap *= 2;
    *m = (struct weft_strmap){0};
    m->keys = weft_calloc(cap, sizeof(*m->keys));
    m->lens = weft_calloc(cap, sizeof(*m->lens));
    m->vals = weft_calloc(cap, sizeof(*m->vals));
    if (!m->keys || !m->lens || !m->vals) {
        weft_strmap_cleanup(m);
        return WEFT_ERR_NOMEM;
    }
    m->cap = cap;
    return WEFT_OK;
}

static weft_status_t strmap_grow(struct weft_strmap *m)
{
    struct weft_strmap g;
    if (weft_strmap_init(&g, m->cap) != WEFT_OK)
        return WEFT_ERR_NOMEM;
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i]) {
            bool added;
            (void)weft_strmap_put(&g, m->keys[i], m->lens[i], m->vals[i], &added);
        }
    weft_strmap_cleanup(m);
    *m = g;
    return WEFT_OK;
}

weft_status_t weft_strmap_put(struct weft_strmap *m, const char *key, size_t len, int32_t val,
                              bool *added_p)
{
    if ((m->n + 1) * 2 > m->cap && strmap_grow(m) != WEFT_OK)
        return WEFT_ERR_NOMEM;
    size_t mask = m->cap - 1, i = (size_t)hash_bytes(key, len) & mask;
    while (m->keys[i]) {
        if (m->lens[i] == len && memcmp(m->keys[i], key, len) == 0) {
            *added_p = false;
            return WEFT_OK;
        }
        i = (i + 1) & mask;
    }
    m->keys[i] = key;
    m->lens[i] = (uint32_t)len;
    m->vals[i] = val;
    m->n++;
    *added_p = true;
    return WEFT_OK;
}

int32_t weft_strmap_get(const struct weft_strmap *m, const char *key, size_t len)
{
    if (!m->cap)
        return -1;
    size_t mask = m->cap - 1, i = (size_t)hash_bytes(key, len) & mask;
    while (m->keys[i]) {
        if (m->lens[i] == len && memcmp(m->keys[i], key, len) == 0)
            return m->vals[i];
        i = (i + 1) & mask;
    }
    return -1;
}

void weft_strmap_cleanup(struct weft_strmap *m)
{
    weft_free((void *)m->keys);
    weft_free(m->lens);
    weft_free(m->vals);
    *m = (struct weft_strmap){0};
}

/* ---------------------------------------------------------------------------------------- */

int weft_special_find(const struct weft_special *set, int n, bool norm, const char *s, size_t len,
                      size_t from, size_t *at_p)
{
    for (size_t i = from; i < len; i++) {
        int best = -1;
        for (int k = 0; k < n; k++) {
            const struct weft_special *sp = &set[k];
            if (sp->normalized != norm || sp->len == 0 || sp->len > len - i ||
                s[i] != sp->text[0] || memcmp(s + i, sp->text, sp->len) != 0)
                continue;
            if (best < 0 || sp->len > set[best].len)
                best = k;
        }
        if (best >= 0) {
            *at_p = i;
            return best;
        }
    }
    return -1;
}

/* ---------------------------------------------------------------------------------------- */

/* The length of a well-formed sequence at s (0 when ill-formed), and in *prefix the length of
 * its maximal well-formed prefix (at least 1) when it is not: Unicode's "maximal subpart". */
static size_t utf8_seq(const unsigned char *s, size_t n, size_t *prefix)
{
    unsigned char c = s[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        lo = c == 0xE0 ? 0xA0 : 0x80;
        hi = c == 0xED ? 0x9F : 0xBF;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        lo = c == 0xF0 ? 0x90 : 0x80;
        hi = c == 0xF4 ? 0x8F : 0xBF;
    } else {
        *prefix = 1;
        return 0;
    }
    size_t i = 1;
    for (; i <= need; i++) {
        if (i >= n || s[i] < lo || s[i] > hi) {
            *prefix = i;
            return 0;
        }
        lo = 0x80, hi = 0xBF;
    }
    return need + 1;
}

weft_status_t weft_str_add_lossy(struct weft_str *b, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t prefix = 1, k = utf8_seq(u + i, n - i, &prefix);
        weft_status_t st = k ? weft_str_add(b, s + i, k) : weft_str_add(b, "\xEF\xBF\xBD", 3);
        if (st != WEFT_OK)
            return st;
        i += k ? k : prefix;
    }
    return weft_str_add(b, "", 0);
}

/* ---------------------------------------------------------------------------------------- */

const char *weft_tok_config_token(const cJSON *config, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(config, key);
    if (cJSON_IsObject(v))
        v = cJSON_GetObjectItemCaseSensitive(v, "content");
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

bool weft_tok_config_normalized(const cJSON *config, const char *content, bool def)
{
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(config, "added_tokens_decoder");
    const cJSON *e;
    cJSON_ArrayForEach(e, dec)
    {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
        const cJSON *nz = cJSON_GetObjectItemCaseSensitive(e, "normalized");
        if (cJSON_IsString(c) && strcmp(c->valuestring, content) == 0 && cJSON_IsBool(nz))
            return cJSON_IsTrue(nz);
    }
    return def;
}
