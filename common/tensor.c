/* Tensor descriptor helpers. */
#include "common/tensor.h"

#include <stdio.h>
#include <string.h>

#include "common/alloc.h"

#define BIG_THRESHOLD ((size_t)1 << 20)

int64_t weft_shape_numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || __builtin_mul_overflow(n, shape[i], &n))
            return -1;
    }
    return n;
}

int64_t weft_tensor_numel(const struct weft_tensor *t)
{
    return weft_shape_numel(t->ndim, t->shape);
}

size_t weft_tensor_nbytes(const struct weft_tensor *t)
{
    return (size_t)weft_tensor_numel(t) * weft_dtype_size(t->dtype);
}

void weft_tensor_view_init(struct weft_tensor *t, enum weft_dtype dtype, int ndim,
                           const int64_t *shape, void *data)
{
    memset(t, 0, sizeof(*t));
    t->dtype = dtype;
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof(*shape));
    t->device.kind = WEFT_DEVICE_CPU;
    t->data = data;
    t->capacity = weft_tensor_nbytes(t);
    t->owner = WEFT_TENSOR_VIEW;
}

weft_status_t weft_tensor_alloc(struct weft_tensor *t, enum weft_dtype dtype, int ndim,
                                const int64_t *shape)
{
    if (ndim < 0 || ndim > WEFT_TENSOR_MAX_DIMS || weft_shape_numel(ndim, shape) < 0)
        return WEFT_ERR_INVALID;
    struct weft_tensor n;
    weft_tensor_view_init(&n, dtype, ndim, shape, NULL);
    size_t bytes = weft_tensor_nbytes(&n);
    if (bytes >= BIG_THRESHOLD) {
        n.data = weft_big_alloc(bytes);
        n.owner = WEFT_TENSOR_BIG;
    } else {
        n.data = weft_calloc(1, bytes);
        n.owner = WEFT_TENSOR_HEAP;
    }
    if (!n.data)
        return WEFT_ERR_NOMEM;
    n.capacity = bytes;
    *t = n;
    return WEFT_OK;
}

weft_status_t weft_tensor_reshape(struct weft_tensor *t, int ndim, const int64_t *shape)
{
    int64_t numel = weft_shape_numel(ndim, shape);
    if (ndim < 0 || ndim > WEFT_TENSOR_MAX_DIMS || numel < 0 ||
        (size_t)numel * weft_dtype_size(t->dtype) > t->capacity)
        return WEFT_ERR_RANGE;
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof(*shape));
    return WEFT_OK;
}

void weft_tensor_cleanup(struct weft_tensor *t)
{
    if (!t)
        return;
    if (t->owner == WEFT_TENSOR_HEAP)
        weft_free(t->data);
    else if (t->owner == WEFT_TENSOR_BIG)
        weft_big_free(t->data, t->capacity);
    memset(t, 0, sizeof(*t));
}

const char *weft_shape_str(int ndim, const int64_t *shape, char *buf, size_t len)
{
    size_t off = 0;
    int n = snprintf(buf, len, "[");
    off = n > 0 ? (size_t)n : 0;
    for (int i = 0; i < ndim && off < len; i++) {
        n = snprintf(buf + off, len - off, i ? ", %lld" : "%lld", (long long)shape[i]);
        off += n > 0 ? (size_t)n : 0;
    }
    if (off < len)
        snprintf(buf + off, len - off, "]");
    return buf;
}
