/* Base64 encoding and strict decoding (see base64.h). */
#include "common/base64.h"

#include <stdbool.h>
#include <stdint.h>

#include "common/alloc.h"

static const char alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *weft_base64_encode(const void *data, size_t len)
{
    if (len > (SIZE_MAX - 8) / 4 * 3)
        return NULL;
    const unsigned char *p = data;
    char *out = weft_malloc((len + 2) / 3 * 4 + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t w = (uint32_t)p[i] << 16;
        if (i + 1 < len)
            w |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < len)
            w |= p[i + 2];
        *o++ = alphabet[w >> 18 & 63];
        *o++ = alphabet[w >> 12 & 63];
        *o++ = i + 1 < len ? alphabet[w >> 6 & 63] : '=';
        *o++ = i + 2 < len ? alphabet[w & 63] : '=';
    }
    *o = '\0';
    return out;
}

static int value_of(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

weft_status_t weft_base64_decode(const char *text, size_t len, void **data_p, size_t *len_p)
{
    if (len % 4)
        return WEFT_ERR_FORMAT;
    size_t pad = 0;
    if (len && text[len - 1] == '=')
        pad = text[len - 2] == '=' ? 2 : 1;
    size_t out_len = len / 4 * 3 - pad;
    unsigned char *out = weft_malloc(out_len + 1);
    if (!out)
        return WEFT_ERR_NOMEM;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 4) {
        int v[4];
        bool last = i + 4 == len;
        for (int k = 0; k < 4; k++) {
            unsigned char c = (unsigned char)text[i + k];
            bool pad_ok = last && c == '=' && (size_t)k >= 4 - pad;
            v[k] = pad_ok ? 0 : value_of(c);
            if (v[k] < 0) {
                weft_free(out);
                return WEFT_ERR_FORMAT;
            }
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 |
                     (uint32_t)v[3];
        const unsigned char b[3] = {(unsigned char)(w >> 16), (unsigned char)(w >> 8),
                                    (unsigned char)w};
        size_t n = last ? 3 - pad : 3;
        for (size_t k = 0; k < n; k++)
            out[o++] = b[k];
    }
    out[o] = '\0';
    *data_p = out;
    *len_p = out_len;
    return WEFT_OK;
}
