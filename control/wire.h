/* The byte codec of the control messages: little-endian fixed-size integers and IEEE-754
 * doubles, and length-prefixed strings and byte runs. 64-bit integers are carried exactly.
 *
 * A writer grows one buffer; an allocation failure makes it fail for good and every later put
 * does nothing (the encoder checks once, at the end: nothing is dropped silently). A reader
 * never reads past its buffer: the first short read or bad value marks it failed with the
 * field's name, later gets return zeros, and the decoder reports that first cause. */
#ifndef WEFT_CONTROL_WIRE_H
#define WEFT_CONTROL_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct weft_wire_w {
    uint8_t *buf;
    size_t len, cap;
    bool failed;
};

void weft_wire_w_init(struct weft_wire_w *w);
void weft_wire_w_cleanup(struct weft_wire_w *w);
void weft_wire_put_u8(struct weft_wire_w *w, uint8_t v);
void weft_wire_put_u32(struct weft_wire_w *w, uint32_t v);
void weft_wire_put_u64(struct weft_wire_w *w, uint64_t v);
void weft_wire_put_i64(struct weft_wire_w *w, int64_t v);
void weft_wire_put_f64(struct weft_wire_w *w, double v);
/* u32 length, then the bytes (no NUL). */
void weft_wire_put_str(struct weft_wire_w *w, const char *s);
void weft_wire_put_bytes(struct weft_wire_w *w, const void *data, size_t len);

struct weft_wire_r {
    const uint8_t *p;
    size_t len, off;
    const char *failed; /* the first field that could not be read, NULL while fine */
};

void weft_wire_r_init(struct weft_wire_r *r, const void *data, size_t len);
uint8_t weft_wire_get_u8(struct weft_wire_r *r, const char *field);
uint32_t weft_wire_get_u32(struct weft_wire_r *r, const char *field);
uint64_t weft_wire_get_u64(struct weft_wire_r *r, const char *field);
int64_t weft_wire_get_i64(struct weft_wire_r *r, const char *field);
double weft_wire_get_f64(struct weft_wire_r *r, const char *field);
bool weft_wire_get_bool(struct weft_wire_r *r, const char *field);
/* A string into out[cap] (NUL-terminated): fails when it is cap bytes or longer, holds a NUL,
 * or is not UTF-8. */
void weft_wire_get_str(struct weft_wire_r *r, const char *field, char *out, size_t cap);
/* The same into a new buffer (weft_free) of the string's size: fails when it is longer than
 * max bytes (or memory runs out). NULL on failure. */
char *weft_wire_get_str_alloc(struct weft_wire_r *r, const char *field, size_t max);
/* The bytes left, without copying. */
const void *weft_wire_rest(const struct weft_wire_r *r, size_t *len_p);

#endif
