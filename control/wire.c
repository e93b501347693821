/* The control messages' byte codec (see wire.h). */
#include "control/wire.h"

#include <string.h>

#include "common/alloc.h"
#include "common/utf8.h"

void weft_wire_w_init(struct weft_wire_w *w)
{
    *w = (struct weft_wire_w){0};
}

void weft_wire_w_cleanup(struct weft_wire_w *w)
{
    weft_free(w->buf);
    *w = (struct weft_wire_w){0};
}

static uint8_t *room(struct weft_wire_w *w, size_t n)
{
    if (w->failed)
        return NULL;
    if (n > SIZE_MAX / 2 - w->len) {
        w->failed = true;
        return NULL;
    }
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->len + n)
            cap *= 2;
        uint8_t *nb = weft_realloc(w->buf, cap);
        if (!nb) {
            w->failed = true;
            return NULL;
        }
        w->buf = nb;
        w->cap = cap;
    }
    uint8_t *p = w->buf + w->len;
    w->len += n;
    return p;
}

static void put_le(struct weft_wire_w *w, uint64_t v, int bytes)
{
    uint8_t *p = room(w, (size_t)bytes);
    for (int i = 0; p && i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

void weft_wire_put_u8(struct weft_wire_w *w, uint8_t v)
{
    put_le(w, v, 1);
}

void weft_wire_put_u32(struct weft_wire_w *w, uint32_t v)
{
    put_le(w, v, 4);
}

void weft_wire_put_u64(struct weft_wire_w *w, uint64_t v)
{
    put_le(w, v, 8);
}

void weft_wire_put_i64(struct weft_wire_w *w, int64_t v)
{
    put_le(w, (uint64_t)v, 8);
}

void weft_wire_put_f64(struct weft_wire_w *w, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof(bits));
    put_le(w, bits, 8);
}

void weft_wire_put_bytes(struct weft_wire_w *w, const void *data, size_t len)
{
    uint8_t *p = len ? room(w, len) : NULL;
    if (p)
        memcpy(p, data, len);
}

void weft_wire_put_str(struct weft_wire_w *w, const char *s)
{
    size_t n = strlen(s);
    if (n > UINT32_MAX) {
        w->failed = true;
        return;
    }
    weft_wire_put_u32(w, (uint32_t)n);
    weft_wire_put_bytes(w, s, n);
}

void weft_wire_r_init(struct weft_wire_r *r, const void *data, size_t len)
{
    *r = (struct weft_wire_r){data, len, 0, NULL};
}

static const uint8_t *take(struct weft_wire_r *r, size_t n, const char *field)
{
    if (r->failed)
        return NULL;
    if (n > r->len - r->off) {
        r->failed = field;
        return NULL;
    }
    const uint8_t *p = r->p + r->off;
    r->off += n;
    return p;
}

static uint64_t get_le(struct weft_wire_r *r, int bytes, const char *field)
{
    const uint8_t *p = take(r, (size_t)bytes, field);
    uint64_t v = 0;
    for (int i = 0; p && i < bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

uint8_t weft_wire_get_u8(struct weft_wire_r *r, const char *field)
{
    return (uint8_t)get_le(r, 1, field);
}

uint32_t weft_wire_get_u32(struct weft_wire_r *r, const char *field)
{
    return (uint32_t)get_le(r, 4, field);
}

uint64_t weft_wire_get_u64(struct weft_wire_r *r, const char *field)
{
    return get_le(r, 8, field);
}

int64_t weft_wire_get_i64(struct weft_wire_r *r, const char *field)
{
    return (int64_t)get_le(r, 8, field);
}

double weft_wire_get_f64(struct weft_wire_r *r, const char *field)
{
    uint64_t bits = get_le(r, 8, field);
    double v;
    memcpy(&v, &bits, sizeof(v));
    return v;
}

bool weft_wire_get_bool(struct weft_wire_r *r, const char *field)
{
    uint8_t v = weft_wire_get_u8(r, field);
    if (v > 1 && !r->failed)
        r->failed = field;
    return v == 1;
}

void weft_wire_get_str(struct weft_wire_r *r, const char *field, char *out, size_t cap)
{
    out[0] = '\0';
    uint32_t n = weft_wire_get_u32(r, field);
    if (r->failed)
        return;
    if (n >= cap) {
        r->failed = field;
        return;
    }
    const uint8_t *p = take(r, n, field);
    if (!p)
        return;
    if (memchr(p, 0, n) || !weft_utf8_valid((const char *)p, n, NULL)) {
        r->failed = field;
        return;
    }
    memcpy(out, p, n);
    out[n] = '\0';
}

char *weft_wire_get_str_alloc(struct weft_wire_r *r, const char *field, size_t max)
{
    uint32_t n = weft_wire_get_u32(r, field);
    if (r->failed)
        return NULL;
    if (n > max) {
        r->failed = field;
        return NULL;
    }
    const uint8_t *p = take(r, n, field);
    if (!p)
        return NULL;
    char *out = weft_malloc((size_t)n + 1);
    if (!out || memchr(p, 0, n) || !weft_utf8_valid((const char *)p, n, NULL)) {
        weft_free(out);
        r->failed = field;
        return NULL;
    }
    memcpy(out, p, n);
    out[n] = '\0';
    return out;
}

const void *weft_wire_rest(const struct weft_wire_r *r, size_t *len_p)
{
    *len_p = r->len - r->off;
    return r->p + r->off;
}
