/* The tensor descriptor: dtype, shape, device and who owns the bytes.
 *
 * Row-major, contiguous. A tensor either owns its memory (heap, big/hugepage, device) or is a
 * view of someone else's. Model code keeps tensors in structs reserved at load time and reuses
 * them; nothing here allocates unless asked. */
#ifndef WEFT_COMMON_TENSOR_H
#define WEFT_COMMON_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_TENSOR_MAX_DIMS 6

/* Where a backend computes (kernels/kernels.h opens one): the CPU, a CUDA device, or the CPU
 * with device-like memory (the CPU backend's devmem variant: tests of the device-memory
 * discipline without a GPU). */
enum weft_device_kind {
    WEFT_DEVICE_CPU,
    WEFT_DEVICE_CUDA,
    WEFT_DEVICE_CPU_DEVMEM,
    WEFT_DEVICE_KIND_COUNT
};

struct weft_device {
    enum weft_device_kind kind;
    int index; /* CUDA: the device ordinal */
};

enum weft_tensor_owner {
    WEFT_TENSOR_VIEW, /* borrowed bytes */
    WEFT_TENSOR_HEAP, /* weft_malloc */
    WEFT_TENSOR_BIG,  /* weft_big_alloc */
};

struct weft_tensor {
    enum weft_dtype dtype;
    int ndim;
    int64_t shape[WEFT_TENSOR_MAX_DIMS];
    struct weft_device device;
    void *data;
    size_t capacity; /* bytes reserved at data (>= nbytes) */
    enum weft_tensor_owner owner;
};

int64_t weft_tensor_numel(const struct weft_tensor *t);
size_t weft_tensor_nbytes(const struct weft_tensor *t);
/* A view of data with the given shape (CPU device). */
void weft_tensor_view_init(struct weft_tensor *t, enum weft_dtype dtype, int ndim,
                           const int64_t *shape, void *data);
/* Allocate a zeroed CPU tensor; big buffers (>= 1 MiB) use huge pages. */
weft_status_t weft_tensor_alloc(struct weft_tensor *t, enum weft_dtype dtype, int ndim,
                                const int64_t *shape);
/* Change the shape within the reserved capacity (no allocation). */
weft_status_t weft_tensor_reshape(struct weft_tensor *t, int ndim, const int64_t *shape);
void weft_tensor_cleanup(struct weft_tensor *t);
/* "[1, 4096, 3072]" into buf. */
const char *weft_shape_str(int ndim, const int64_t *shape, char *buf, size_t len);
/* Product of dims with overflow check; -1 when it does not fit in int64. */
int64_t weft_shape_numel(int ndim, const int64_t *shape);

#ifdef __cplusplus
}
#endif

#endif
