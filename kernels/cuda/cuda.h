/* CUDA device discovery, for the rest of kernels/ (device.c): callers see only weft status
 * codes (cudaError_t stops here). The backend itself is reached through the kernel table
 * (kernels.h, weft_kernels_cuda_create).
 *
 * Any error from cudaGetDeviceCount means "no GPU": on machines without a driver it returns
 * cudaErrorInsufficientDriver (35), not cudaErrorNoDevice. */
#ifndef WEFT_KERNELS_CUDA_CUDA_H
#define WEFT_KERNELS_CUDA_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct weft_cuda_device_info {
    int index;
    char name[256];
    size_t total_mem;
    int cc_major, cc_minor;
    int sm_count;
    uint64_t peers; /* bit j: cudaDeviceCanAccessPeer(index, j) */
};

/* Number of usable devices; WEFT_ERR_NO_DEVICE (logged at debug level) when there are none,
 * with the runtime's reason in why (may be NULL). */
weft_status_t weft_cuda_device_count(int *count_p, char *why, size_t why_len);
weft_status_t weft_cuda_device_info(int index, struct weft_cuda_device_info *info_p);
/* Open cuBLASLt as a backend does when it starts (blaslt.h: it is not linked), with no GPU
 * needed: WEFT_OK when the library and every function the backend calls are there, else the
 * reason in why. */
weft_status_t weft_cuda_blaslt_probe(char *why, size_t why_len);

#ifdef __cplusplus
}
#endif

#endif
