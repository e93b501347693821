/* Fuzz target: the safetensors header parser and the reads it allows. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/log.h"
#include "model/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void quiet(enum weft_log_level l, const char *s, const char *m, void *a)
{
    (void)l, (void)s, (void)m, (void)a;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    weft_log_set_sink(quiet, NULL);
    struct weft_st_file *f;
    if (weft_st_open_memory("fuzz", data, size, &f, NULL) != WEFT_OK)
        return 0;
    /* Whatever validated must be readable within the image, whole and sliced. */
    for (size_t i = 0; i < weft_st_count(f); i++) {
        const struct weft_st_tensor *t = weft_st_at(f, i);
        if (t->dtype != WEFT_DTYPE_F32 && t->dtype != WEFT_DTYPE_BF16 &&
            t->dtype != WEFT_DTYPE_F16)
            continue;
        float *buf = malloc((size_t)t->numel * sizeof(float) + 1);
        if (!buf)
            break;
        weft_st_read(f, t, buf, WEFT_DTYPE_F32, NULL);
        if (t->ndim >= 2 && t->shape[1] > 0) {
            struct weft_range r = {t->shape[1] / 2, t->shape[1]};
            weft_st_read_ranges(f, t, 1, 1, &r, buf, WEFT_DTYPE_BF16, NULL);
        }
        free(buf);
    }
    weft_st_close(f);
    return 0;
}
