/* Growable byte buffer with a sticky failure flag. */
#include "common/sbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"

void weft_sbuf_init(struct weft_sbuf *b)
{
    *b = (struct weft_sbuf){0};
}

void weft_sbuf_cleanup(struct weft_sbuf *b)
{
    weft_free(b->data);
    *b = (struct weft_sbuf){0};
}

static bool reserve(struct weft_sbuf *b, size_t extra)
{
    if (b->failed)
        return false;
    if (extra >= ~(size_t)0 / 4 - b->len) {
        b->failed = true;
        return false;
    }
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    char *p = weft_realloc(b->data, cap);
    if (!p) {
        b->failed = true;
        return false;
    }
    b->data = p;
    b->cap = cap;
    return true;
}

void weft_sbuf_append(struct weft_sbuf *b, const void *data, size_t len)
{
    if (!reserve(b, len))
        return;
    if (len)
        memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
}

void weft_sbuf_puts(struct weft_sbuf *b, const char *s)
{
    weft_sbuf_append(b, s, strlen(s));
}

void weft_sbuf_printf(struct weft_sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char small[256];
    /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): a false positive on glibc */
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = true;
        return;
    }
    if ((size_t)n < sizeof(small)) {
        weft_sbuf_append(b, small, (size_t)n);
        return;
    }
    if (!reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): a false positive on glibc */
    (void)vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

char *weft_sbuf_take(struct weft_sbuf *b, size_t *len_p)
{
    char *p = b->data;
    *len_p = b->len;
    *b = (struct weft_sbuf){0};
    return p;
}
