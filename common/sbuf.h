/* A growable byte buffer for text built in pieces (HTTP responses, JSON, Prometheus metrics).
 *
 * Appends never fail loudly: an allocation failure sets a sticky flag, later appends do nothing,
 * and the owner checks weft_sbuf_ok() once at the end. */
#ifndef WEFT_COMMON_SBUF_H
#define WEFT_COMMON_SBUF_H

#include <stdbool.h>
#include <stddef.h>

struct weft_sbuf {
    char *data; /* NUL-terminated when len > 0 */
    size_t len, cap;
    bool failed;
};

void weft_sbuf_init(struct weft_sbuf *b);
void weft_sbuf_cleanup(struct weft_sbuf *b);
void weft_sbuf_append(struct weft_sbuf *b, const void *data, size_t len);
void weft_sbuf_puts(struct weft_sbuf *b, const char *s);
void weft_sbuf_printf(struct weft_sbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline bool weft_sbuf_ok(const struct weft_sbuf *b)
{
    return !b->failed;
}
/* Hand the bytes over (caller frees with weft_free); the buffer is empty after. */
char *weft_sbuf_take(struct weft_sbuf *b, size_t *len_p);

#endif
