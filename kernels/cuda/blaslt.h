/* cuBLASLt, opened at run time when a CUDA backend starts (dlopen), not linked: linked, its
 * library (540 MB) and its zeroed data weigh on every weft process, the CPU-only ones
 * included: weft --version peaked at 218 MB resident with it linked (84 MB of it cuBLASLt's
 * zero-initialised data, 62 MB its pages). Every call goes through cuda_lt, typed by the
 * header's own declarations. */
#ifndef WEFT_KERNELS_CUDA_BLASLT_H
#define WEFT_KERNELS_CUDA_BLASLT_H

#include <cublasLt.h>
#include <stddef.h>

#include "common/status.h"

#define CUDA_LT_FUNCS(X)                                                                       \
    X(cublasLtCreate)                                                                          \
    X(cublasLtDestroy)                                                                         \
    X(cublasLtGetVersion)                                                                      \
    X(cublasLtGetStatusString)                                                                 \
    X(cublasLtMatmul)                                                                          \
    X(cublasLtMatmulDescCreate)                                                                \
    X(cublasLtMatmulDescDestroy)                                                               \
    X(cublasLtMatmulDescSetAttribute)                                                          \
    X(cublasLtMatrixLayoutCreate)                                                              \
    X(cublasLtMatrixLayoutDestroy)                                                             \
    X(cublasLtMatmulPreferenceCreate)                                                          \
    X(cublasLtMatmulPreferenceDestroy)                                                         \
    X(cublasLtMatmulPreferenceSetAttribute)                                                    \
    X(cublasLtMatmulAlgoGetHeuristic)

struct cuda_lt_table {
#define CUDA_LT_FIELD(f) decltype(&::f) f;
    CUDA_LT_FUNCS(CUDA_LT_FIELD)
#undef CUDA_LT_FIELD
};

extern struct cuda_lt_table cuda_lt;

/* Open libcublasLt.so.<major of the toolkit built against> and resolve every function, once
 * per process (later calls return the first outcome); the reason in why when it fails. */
extern "C" weft_status_t cuda_lt_open(char *why, size_t len);

#endif
