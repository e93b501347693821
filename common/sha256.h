/* SHA-256 and HMAC-SHA256 (FIPS 180-4, RFC 2104), for the cluster's challenge-response: a
 * worker proves it knows the cluster secret without sending it. */
#ifndef WEFT_COMMON_SHA256_H
#define WEFT_COMMON_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define WEFT_SHA256_LEN 32

struct weft_sha256 {
    uint32_t h[8];
    uint64_t bytes;
    uint8_t buf[64];
    size_t fill;
};

void weft_sha256_init(struct weft_sha256 *s);
void weft_sha256_update(struct weft_sha256 *s, const void *data, size_t len);
void weft_sha256_final(struct weft_sha256 *s, uint8_t out[WEFT_SHA256_LEN]);
void weft_sha256(const void *data, size_t len, uint8_t out[WEFT_SHA256_LEN]);
void weft_hmac_sha256(const void *key, size_t key_len, const void *msg, size_t msg_len,
                      uint8_t out[WEFT_SHA256_LEN]);
/* Compare n bytes in time independent of where they differ; 0 when equal. */
int weft_ct_compare(const void *a, const void *b, size_t n);

#endif
