/* Test helper: write safetensors files (valid ones from a tensor list, or raw header text for
 * the corpus of broken files). Header padded with spaces to a multiple of 8, like the writer. */
#ifndef WEFT_TESTS_ST_WRITE_H
#define WEFT_TESTS_ST_WRITE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct st_spec {
    const char *name;
    const char *dtype;
    int ndim;
    int64_t shape[8];
    const void *data;
    size_t nbytes;
};

/* Raw: 8-byte little-endian length (len_override when nonzero) + header + data. */
static inline int st_write_raw(const char *path, const char *header, uint64_t len_override,
                               const void *data, size_t data_len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t hl = strlen(header);
    uint64_t n = len_override ? len_override : hl;
    uint8_t le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)(n >> (8 * i));
    int ok = fwrite(le, 1, 8, f) == 8 && fwrite(header, 1, hl, f) == hl &&
             (data_len == 0 || fwrite(data, 1, data_len, f) == data_len);
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

static inline int st_write(const char *path, const struct st_spec *t, size_t n,
                           const char *meta_json)
{
    size_t cap = 4096 + n * 512, len = 0, data_len = 0;
    char *h = malloc(cap);
    len += (size_t)snprintf(h + len, cap - len, "{");
    if (meta_json)
        len += (size_t)snprintf(h + len, cap - len, "\"__metadata__\":%s%s", meta_json,
                                n ? "," : "");
    for (size_t i = 0; i < n; i++) {
        len += (size_t)snprintf(h + len, cap - len, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[",
                                i ? "," : "", t[i].name, t[i].dtype);
        for (int d = 0; d < t[i].ndim; d++)
            len += (size_t)snprintf(h + len, cap - len, "%s%lld", d ? "," : "",
                                    (long long)t[i].shape[d]);
        len += (size_t)snprintf(h + len, cap - len, "],\"data_offsets\":[%zu,%zu]}", data_len,
                                data_len + t[i].nbytes);
        data_len += t[i].nbytes;
    }
    len += (size_t)snprintf(h + len, cap - len, "}");
    while (len % 8)
        h[len++] = ' ';
    h[len] = '\0';
    char *data = malloc(data_len + 1);
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i].nbytes)
            memcpy(data + off, t[i].data, t[i].nbytes);
        off += t[i].nbytes;
    }
    int rc = st_write_raw(path, h, 0, data, data_len);
    free(h);
    free(data);
    return rc;
}

#endif
