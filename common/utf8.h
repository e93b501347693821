/* UTF-8 validation (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF). */
#ifndef WEFT_COMMON_UTF8_H
#define WEFT_COMMON_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* True when s[0..len) is valid UTF-8; on failure *bad_at_p (if not NULL) gets the byte offset. */
bool weft_utf8_valid(const char *s, size_t len, size_t *bad_at_p);

#endif
