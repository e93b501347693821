/* Base64 (RFC 4648, standard alphabet, padded): the one codec of the API's inline prompt
 * embeddings, the clients that send them and the control protocol's bootstrap addresses. */
#ifndef WEFT_COMMON_BASE64_H
#define WEFT_COMMON_BASE64_H

#include <stddef.h>

#include "common/status.h"

/* The encoding of len bytes as a new NUL-terminated string (weft_free); NULL when out of
 * memory or when len is too large to encode. */
char *weft_base64_encode(const void *data, size_t len);
/* Strict decoding of text[0, len): length a multiple of 4, padding only at the end, no other
 * byte than the alphabet. The bytes go to a new buffer (weft_free; one spare byte, so a NUL can
 * follow them). WEFT_ERR_FORMAT when text is not base64, WEFT_ERR_NOMEM. */
weft_status_t weft_base64_decode(const char *text, size_t len, void **data_p, size_t *len_p);

#endif
