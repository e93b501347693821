/* cuBLASLt opened at run time (see blaslt.h). */
#include "kernels/cuda/blaslt.h"
#include "kernels/cuda/cuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#define STR2(x) #x
#define STR(x) STR2(x)

struct cuda_lt_table cuda_lt;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static weft_status_t outcome = WEFT_ERR_UNSUPPORTED;
static char reason[256];

static void open_once(void)
{
    const char *name = "libcublasLt.so." STR(CUBLAS_VER_MAJOR);
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(reason, sizeof(reason), "cannot open %s, which the CUDA backend needs: %s",
                 name, dlerror());
        return;
    }
    struct cuda_lt_table t;
#define CUDA_LT_RESOLVE(f)                                                                     \
    t.f = reinterpret_cast<decltype(t.f)>(dlsym(h, #f));                                      \
    if (!t.f) {                                                                                \
        snprintf(reason, sizeof(reason), "%s has no %s (a cuBLASLt older than the toolkit's "  \
                 "%d.%d headers?)", name, #f, CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR);             \
        dlclose(h);                                                                            \
        return;                                                                                \
    }
    CUDA_LT_FUNCS(CUDA_LT_RESOLVE)
#undef CUDA_LT_RESOLVE
    cuda_lt = t;
    outcome = WEFT_OK;
}

extern "C" weft_status_t cuda_lt_open(char *why, size_t len)
{
    (void)pthread_once(&once, open_once);
    if (outcome != WEFT_OK && why)
        snprintf(why, len, "%s", reason);
    return outcome;
}

extern "C" weft_status_t weft_cuda_blaslt_probe(char *why, size_t why_len)
{
    return cuda_lt_open(why, why_len);
}
