/* The CPU GEMM: y[m, n] (+)= x[m, k] . w[n, k]^T + b, x and y f32, w in its stored dtype (f32,
 * bf16, f16), as a Linear layer and an im2col convolution need it. One driver (gemm.c: cache
 * blocking, packing, threads on the backend's pool) over micro-kernels chosen once from what
 * the CPU can do (cpuid through the compiler's cpu-features: never its model name):
 *
 *   avx512_bf16  12 x 32 tiles; "bf16" compute takes x and w rounded to bf16 (round to nearest
 *                even) and accumulates their products in f32 (vdpbf16ps)
 *   avx512       12 x 32 tiles of f32 FMAs; w widened to f32 as it is packed (exact for bf16 and
 *                f16 weights)
 *   avx2         6 x 16 tiles of f32 FMAs (ymm)
 *   generic      4 x 8 tiles in plain C
 *
 * Weights are never converted in memory: they are read as stored, a panel at a time, into
 * per-thread buffers reserved with the backend. With few rows (a modulation on one token) the
 * product is a set of dot products over the weight rows as stored, which reads every weight
 * once. Accumulation is always f32, in a fixed order per output element (independent of the
 * thread count). */
#ifndef WEFT_KERNELS_CPU_GEMM_H
#define WEFT_KERNELS_CPU_GEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"

enum cpu_isa {
    CPU_ISA_GENERIC,
    CPU_ISA_AVX2,
    CPU_ISA_AVX512,
    CPU_ISA_AVX512_BF16,
    CPU_ISA_COUNT
};

const char *cpu_isa_name(enum cpu_isa isa);
/* The best kernels this CPU (and OS) supports. */
enum cpu_isa cpu_isa_detect(void);

/* Packed panels: A as [k][MR] (f32) or [k/2][MR][2] (bf16 pairs), B as [k][NR] or
 * [k/2][NR][2]; a tile's rows or columns beyond the edge are zero. */

/* c[mr x nr] (ldc) = (mode & 1 ? c : 0) + a . b (+ bias[0, nr) when bias): kc steps (f32) or kc
 * pairs (bf16). */
typedef void (*cpu_ukr_fn)(int64_t kc, const void *a, const void *b, float *c, int64_t ldc,
                           int mr, int nr, int mode, const float *bias);
/* rows x kc of x (row stride ldx) into an A panel (mr rows used, MR wide). */
typedef void (*cpu_pack_a_fn)(const float *x, int64_t ldx, int rows, int64_t kc, void *out);
/* cols x kc of w rows (dtype, row stride ldw) into a B panel (NR wide): w is [n][k] (a Linear
 * weight), or for pack_bk [k][n] (k rows of ldw: a convolution's panel). */
typedef void (*cpu_pack_b_fn)(const void *w, enum weft_dtype dtype, int64_t ldw, int cols,
                              int64_t kc, void *out);
/* y[rows, n) (ldy) = mode-or-zero + x . w^T (+ b): few rows, w read once as stored. */
typedef void (*cpu_rowdot_fn)(const float *x, int64_t ldx, const void *w, enum weft_dtype dtype,
                              int64_t ldw, const float *b, float *y, int64_t ldy, int64_t rows,
                              int64_t n, int64_t k, int mode);

/* A bf16 weight [n, k] packed once (linear_pack): panels [p0, p1) of NR columns, each the
 * whole k as pairs, [ceil(k/2)][NR][2] (the bf16 kernels' B panel for kc = k; a k block at an
 * even offset is a slice of it), columns past n and the second half of an odd k's last pair
 * zero. */
typedef void (*cpu_pack_w_fn)(const uint16_t *w, int64_t n, int64_t k, int64_t p0, int64_t p1,
                              void *out);

struct cpu_gemm_kernels {
    enum cpu_isa isa;
    bool bf16;      /* compute in bf16 pairs (x and w rounded), accumulate in f32 */
    int mr, nr;     /* tile */
    int64_t kc, mc; /* cache blocks: kc (in k steps), mc rows of A per packed block */
    size_t elem;    /* bytes of one packed element per k step (4: f32; 2: bf16) */
    cpu_ukr_fn ukr;
    cpu_pack_a_fn pack_a;
    cpu_pack_b_fn pack_b, pack_bk;
    cpu_rowdot_fn rowdot;
    /* Packed weights (NULL: this ISA has none): the packer, and for f32 compute the
     * micro-kernel on a panel of bf16 pairs (kc steps; the same products in the same order as
     * ukr on pack_b's panel). bf16 compute runs its ukr on them as they are. */
    cpu_pack_w_fn pack_wpairs;
    cpu_ukr_fn ukr_wpairs;
};

/* The kernels of isa for f32 compute (bf16 false) or bf16 compute; false when that pair does
 * not exist (bf16 compute needs avx512_bf16). */
bool cpu_gemm_kernels_get(enum cpu_isa isa, bool bf16, struct cpu_gemm_kernels *out);

/* The ISA files' tables. */
void cpu_gemm_generic(struct cpu_gemm_kernels *k);
void cpu_gemm_avx2(struct cpu_gemm_kernels *k);
void cpu_gemm_avx512(struct cpu_gemm_kernels *k);
void cpu_gemm_avx512_bf16(struct cpu_gemm_kernels *k);

/* Per-thread packing buffers of a kernel set: bytes for A (mc x kc) and one B panel column
 * block of nc columns. */
size_t cpu_gemm_scratch_bytes(const struct cpu_gemm_kernels *k, int64_t nc);

/* The largest column block a thread packs at once. */
#define CPU_GEMM_NC 1024
/* Rows of x packed at once for all threads (the column split's shared panels). */
#define CPU_GEMM_MSHARED 4096
/* At most this many rows go through the dot-product path. */
#define CPU_GEMM_ROWDOT_MAX 6

#endif
