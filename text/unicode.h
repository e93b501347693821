/* The Unicode a tokenizer needs, from Debian's utf8proc (its tables, Unicode 15.0): decoding,
 * general categories, NFC, lower case, White_Space, extended grapheme clusters. No table of
 * our own: what Unicode says comes from the library. */
#ifndef WEFT_TEXT_UNICODE_H
#define WEFT_TEXT_UNICODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

/* Text a tokenizer takes: valid UTF-8 (common/utf8.h's rules) without NUL. err says where it
 * is not, as the input's fault ("prompt: not valid UTF-8 at byte 3"); what names the text. */
weft_status_t weft_text_check(const char *s, size_t len, const char *what,
                              struct weft_error *err);

/* The code point at s[*pos] (valid UTF-8 assumed: checked first); *pos moves past it. */
int32_t weft_text_next(const char *s, size_t len, size_t *pos);
/* Appends the UTF-8 of cp to out (at least 4 bytes free); returns the bytes written. */
size_t weft_text_put(int32_t cp, char *out);

/* Letter (L*), number (N*) */
bool weft_text_is_letter(int32_t cp);
bool weft_text_is_number(int32_t cp);
/* Unicode's White_Space property (Zs, Zl, Zp, U+0009..U+000D, U+0085): what Oniguruma's \s
 * and Rust's char::is_whitespace take, so what transformers' tokenizers split on. */
bool weft_text_is_space(int32_t cp);
/* Rust's char::to_lowercase (what the tokenizers library's Lowercase applies): the simple
 * mapping, but U+0130 becomes "i" U+0307 (the one unconditional multi-code-point lower case of
 * SpecialCasing.txt). Writes 1 or 2 code points to out, returns how many. */
int weft_text_lower(int32_t cp, int32_t out[2]);

/* NFC of s[0..len) into a new buffer (weft_free, NUL-terminated), its length in *out_len. */
weft_status_t weft_text_nfc(const char *s, size_t len, char **out_p, size_t *out_len,
                            struct weft_error *err);

/* Extended grapheme clusters: whether there is a boundary between a and b; state starts at 0
 * for each text. */
bool weft_text_grapheme_break(int32_t a, int32_t b, int32_t *state);

#endif
