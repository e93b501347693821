/* JSON text as RFC 8259 writes it, checked before a lenient parser (cJSON) reads it: what cJSON
 * would take but the RFC forbids (raw control characters in strings, leading zeros, "5.",
 * whitespace other than space, tab, LF and CR, a byte-order mark, data after the value), what
 * a C string cannot carry (a NUL byte, a \u0000 escape), integers a double holds only
 * approximately (beyond 2^53: a seed would silently change) and nesting past a limit, each
 * refused with its byte offset. */
#ifndef WEFT_COMMON_JSON_H
#define WEFT_COMMON_JSON_H

#include <stdbool.h>
#include <stddef.h>

/* True when s[0..len) is one JSON value (surrounded by whitespace at most) within the rules
 * above, nested at most max_depth arrays and objects deep; else false, with why (one line
 * naming the cause and the byte) filled. The text must be UTF-8 already (weft_utf8_valid). */
bool weft_json_strict(const char *s, size_t len, int max_depth, char *why, size_t why_len);

#endif
