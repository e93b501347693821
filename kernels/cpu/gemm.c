/* The CPU GEMM driver (see gemm.h): the ISA chosen from cpuid, BLIS-style blocking, the work
 * split over the backend's threads by columns, or by rows when the columns are too few.
 *
 * Split by columns: for each block of up to CPU_GEMM_MSHARED rows and each block of k, x is
 * packed once into MR-row panels shared by every thread (each packs a share of the rows), then
 * each thread packs its own columns' weights into NR-wide panels, a block of NC columns at a
 * time, and runs the micro-kernel over every tile of them. Packing x per thread and per column
 * block instead cost a fifth of a bf16 GEMM's time (x is rounded to bf16 pairs as it is
 * packed). Split by rows: each thread packs the weights it needs and its own rows' x. */
#include "kernels/cpu/gemm.h"

#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "kernels/cpu/cpu.h"

const char *cpu_isa_name(enum cpu_isa isa)
{
    static const char *const names[CPU_ISA_COUNT] = {"generic", "avx2", "avx512",
                                                      "avx512_bf16"};
    return (unsigned)isa < CPU_ISA_COUNT ? names[isa] : "?";
}

#if defined(__x86_64__) || defined(__i386__)
/* F16C (CPUID leaf 1, ECX bit 29): clang's __builtin_cpu_supports does not know its name. */
static bool has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
#endif

enum cpu_isa cpu_isa_detect(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && has_f16c() &&
        __builtin_cpu_supports("fma"))
        return __builtin_cpu_supports("avx512bf16") ? CPU_ISA_AVX512_BF16 : CPU_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c())
        return CPU_ISA_AVX2;
#endif
    return CPU_ISA_GENERIC;
}

bool cpu_gemm_kernels_get(enum cpu_isa isa, bool bf16, struct cpu_gemm_kernels *out)
{
    if (bf16) {
#if defined(__x86_64__)
        if (isa == CPU_ISA_AVX512_BF16) {
            cpu_gemm_avx512_bf16(out);
            return true;
        }
#endif
        return false;
    }
    switch (isa) {
#if defined(__x86_64__)
    case CPU_ISA_AVX512_BF16:
    case CPU_ISA_AVX512: cpu_gemm_avx512(out); return true;
    case CPU_ISA_AVX2: cpu_gemm_avx2(out); return true;
#endif
    default: cpu_gemm_generic(out); return true;
    }
}

/* Bytes of a packed panel of rows x kc (bf16 pairs pad k to even). */
static size_t panel_bytes(const struct cpu_gemm_kernels *kr, int64_t rows, int64_t kc)
{
    const int64_t steps = kr->bf16 ? (kc + 1) / 2 * 2 : kc;
    return (size_t)(rows * steps) * kr->elem;
}

/* Bytes of one panel of a packed bf16 weight: NR columns x k rounded up to pairs. */
static size_t wpanel_bytes(const struct cpu_gemm_kernels *kr, int64_t k)
{
    return (size_t)((k + 1) / 2 * 2 * kr->nr) * sizeof(uint16_t);
}

size_t cpu_gemm_scratch_bytes(const struct cpu_gemm_kernels *kr, int64_t nc)
{
    const int64_t mc = (kr->mc + kr->mr - 1) / kr->mr * kr->mr;
    const int64_t ncp = (nc + kr->nr - 1) / kr->nr * kr->nr;
    return panel_bytes(kr, mc, kr->kc) + panel_bytes(kr, ncp, kr->kc) + 128;
}

struct gemm_job {
    const struct cpu_gemm_kernels *kr;
    const float *x;
    int64_t ldx;
    const void *w;
    enum weft_dtype wdt;
    const float *b;
    float *y;
    int64_t ldy, m, n, k;
    int accumulate;
    int64_t ldw;     /* w's row stride: k for [n][k] weights, the row length for [k][n] */
    bool kmajor;     /* w is [k][n] */
    bool split_rows; /* units are MR-row groups (else NR-column groups) */
    void *const *scratch;
    const char *wpack; /* w packed once (linear_pack; NULL: w as stored, packed per call) */
    size_t wpanel;     /* bytes of one of its panels */
};

/* The micro-kernel over a B panel of kc steps and the steps it counts: the kernel set's on its
 * own panels and on a packed weight's in bf16 compute (the same pairs), the pairs kernel on a
 * packed weight's in f32 compute. */
static cpu_ukr_fn ukr_of(const struct gemm_job *g, int64_t kc, int64_t *steps_p)
{
    if (g->wpack && !g->kr->bf16) {
        *steps_p = kc;
        return g->kr->ukr_wpairs;
    }
    *steps_p = g->kr->bf16 ? (kc + 1) / 2 : kc;
    return g->kr->ukr;
}

/* The B panel of the columns from j for the k block at pc: the slice of the packed weight, or
 * the scratch's panel jr / nr. */
static const char *b_panel_at(const struct gemm_job *g, const char *pb, size_t b_panel,
                              int64_t j, int64_t jr, int64_t pc)
{
    if (g->wpack)
        return g->wpack + (size_t)(j / g->kr->nr) * g->wpanel +
               (size_t)(pc * g->kr->nr) * sizeof(uint16_t);
    return pb + (size_t)(jr / g->kr->nr) * b_panel;
}

/* One thread's rectangle: rows [m0, m1) x columns [n0, n1). */
static void gemm_rect(const struct gemm_job *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                      void *scratch)
{
    const struct cpu_gemm_kernels *kr = g->kr;
    const int64_t mr = kr->mr, nr = kr->nr, kc_max = kr->kc, mc_max = kr->mc;
    char *pa = (char *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    char *pb = pa + (panel_bytes(kr, (mc_max + mr - 1) / mr * mr, kc_max) + 63) / 64 * 64;
    const size_t wsz = weft_dtype_size(g->wdt);
    for (int64_t jc = n0; jc < n1; jc += CPU_GEMM_NC) {
        const int64_t nc = n1 - jc < CPU_GEMM_NC ? n1 - jc : CPU_GEMM_NC;
        for (int64_t pc = 0; pc < g->k; pc += kc_max) {
            const int64_t kc = g->k - pc < kc_max ? g->k - pc : kc_max;
            const size_t b_panel = panel_bytes(kr, nr, kc), a_panel = panel_bytes(kr, mr, kc);
            int64_t steps;
            const cpu_ukr_fn ukr = ukr_of(g, kc, &steps);
            for (int64_t jr = 0; jr < nc && !g->wpack; jr += nr) {
                const int cols = (int)(nc - jr < nr ? nc - jr : nr);
                char *dst = pb + (size_t)(jr / nr) * b_panel;
                if (g->kmajor)
                    kr->pack_bk((const char *)g->w + (size_t)(pc * g->ldw + jc + jr) * wsz,
                                g->wdt, g->ldw, cols, kc, dst);
                else
                    kr->pack_b((const char *)g->w + (size_t)((jc + jr) * g->ldw + pc) * wsz,
                               g->wdt, g->ldw, cols, kc, dst);
            }
            const int mode = g->accumulate || pc > 0;
            for (int64_t ic = m0; ic < m1; ic += mc_max) {
                const int64_t mc = m1 - ic < mc_max ? m1 - ic : mc_max;
                for (int64_t ir = 0; ir < mc; ir += mr) {
                    const int rows = (int)(mc - ir < mr ? mc - ir : mr);
                    kr->pack_a(g->x + (ic + ir) * g->ldx + pc, g->ldx, rows, kc,
                               pa + (size_t)(ir / mr) * a_panel);
                }
                for (int64_t jr = 0; jr < nc; jr += nr) {
                    const int cols = (int)(nc - jr < nr ? nc - jr : nr);
                    const float *bias = pc == 0 && g->b ? g->b + jc + jr : NULL;
                    const char *bp = b_panel_at(g, pb, b_panel, jc + jr, jr, pc);
                    for (int64_t ir = 0; ir < mc; ir += mr) {
                        const int rows = (int)(mc - ir < mr ? mc - ir : mr);
                        ukr(steps, pa + (size_t)(ir / mr) * a_panel, bp,
                            g->y + (ic + ir) * g->ldy + jc + jr, g->ldy, rows, cols, mode, bias);
                    }
                }
            }
        }
    }
}

static void gemm_range(void *arg, int64_t begin, int64_t end, int thread)
{
    const struct gemm_job *g = arg;
    if (g->split_rows) {
        const int64_t m0 = begin * g->kr->mr, m1 = end * g->kr->mr < g->m ? end * g->kr->mr
                                                                           : g->m;
        gemm_rect(g, m0, m1, 0, g->n, g->scratch[thread]);
    } else {
        const int64_t n0 = begin * g->kr->nr, n1 = end * g->kr->nr < g->n ? end * g->kr->nr
                                                                           : g->n;
        gemm_rect(g, 0, g->m, n0, n1, g->scratch[thread]);
    }
}

struct rowdot_job {
    const struct cpu_gemm_kernels *kr;
    const float *x;
    int64_t ldx;
    const void *w;
    enum weft_dtype wdt;
    const float *b;
    float *y;
    int64_t ldy, m, k;
    int mode;
};

static void rowdot_range(void *arg, int64_t begin, int64_t end, int thread)
{
    (void)thread;
    const struct rowdot_job *r = arg;
    const size_t wsz = weft_dtype_size(r->wdt);
    r->kr->rowdot(r->x, r->ldx, (const char *)r->w + (size_t)(begin * r->k) * wsz, r->wdt,
                  r->k, r->b ? r->b + begin : NULL, r->y + begin, r->ldy, r->m, end - begin,
                  r->k, r->mode);
}

size_t cpu_gemm_xpack_bytes(const struct cpu_gemm_kernels *kr)
{
    const int64_t mr = kr->mr;
    const int64_t rows = (CPU_GEMM_MSHARED + mr - 1) / mr * mr; /* whole panels */
    return panel_bytes(kr, rows, kr->kc) + 64;
}

/* The column split's phases over one row block and a run of k blocks [kb0, kb1): x's panels
 * by rows (every k block of the run, kb_stride bytes apart), then tiles by columns, each
 * thread over all of the run's k blocks. A few dozen rows fit every k block in one run: two
 * jobs per product instead of two per k block. */
struct shared_job {
    const struct gemm_job *g;
    char *xpack;
    int64_t m0, rows, kb0, kb1, panels;
    size_t kb_stride;
};

static int64_t kc_of(const struct gemm_job *g, int64_t pc)
{
    return g->k - pc < g->kr->kc ? g->k - pc : g->kr->kc;
}

static void xpack_range(void *arg, int64_t begin, int64_t end, int thread)
{
    (void)thread;
    const struct shared_job *s = arg;
    const struct cpu_gemm_kernels *kr = s->g->kr;
    for (int64_t u = begin; u < end; u++) {
        const int64_t kb = s->kb0 + u / s->panels, p = u % s->panels, pc = kb * kr->kc;
        const int64_t kc = kc_of(s->g, pc), r0 = p * kr->mr;
        const int rows = (int)(s->rows - r0 < kr->mr ? s->rows - r0 : kr->mr);
        kr->pack_a(s->g->x + (s->m0 + r0) * s->g->ldx + pc, s->g->ldx, rows, kc,
                   s->xpack + (size_t)(kb - s->kb0) * s->kb_stride +
                       (size_t)p * panel_bytes(kr, kr->mr, kc));
    }
}

static void tiles_range(void *arg, int64_t begin, int64_t end, int thread)
{
    const struct shared_job *s = arg;
    const struct gemm_job *g = s->g;
    const struct cpu_gemm_kernels *kr = g->kr;
    const int64_t mr = kr->mr, nr = kr->nr;
    const int64_t n0 = begin * nr, n1 = end * nr < g->n ? end * nr : g->n;
    char *pb = (char *)(((uintptr_t)g->scratch[thread] + 63) & ~(uintptr_t)63);
    const size_t wsz = weft_dtype_size(g->wdt);
    for (int64_t jc = n0; jc < n1; jc += CPU_GEMM_NC) {
        const int64_t nc = n1 - jc < CPU_GEMM_NC ? n1 - jc : CPU_GEMM_NC;
        for (int64_t kb = s->kb0; kb < s->kb1; kb++) {
            const int64_t pc = kb * kr->kc, kc = kc_of(g, pc);
            const char *xpack = s->xpack + (size_t)(kb - s->kb0) * s->kb_stride;
            const size_t b_panel = panel_bytes(kr, nr, kc), a_panel = panel_bytes(kr, mr, kc);
            int64_t steps;
            const cpu_ukr_fn ukr = ukr_of(g, kc, &steps);
            const int mode = g->accumulate || pc > 0;
            for (int64_t jr = 0; jr < nc && !g->wpack; jr += nr) {
                const int cols = (int)(nc - jr < nr ? nc - jr : nr);
                char *dst = pb + (size_t)(jr / nr) * b_panel;
                if (g->kmajor)
                    kr->pack_bk((const char *)g->w + (size_t)(pc * g->ldw + jc + jr) * wsz,
                                g->wdt, g->ldw, cols, kc, dst);
                else
                    kr->pack_b((const char *)g->w + (size_t)((jc + jr) * g->ldw + pc) * wsz,
                               g->wdt, g->ldw, cols, kc, dst);
            }
            /* rows in blocks of mc: a block's x panels stay in L2 across the column panels */
            for (int64_t ic = 0; ic < s->rows; ic += kr->mc) {
                const int64_t mc = s->rows - ic < kr->mc ? s->rows - ic : kr->mc;
                for (int64_t jr = 0; jr < nc; jr += nr) {
                    const int cols = (int)(nc - jr < nr ? nc - jr : nr);
                    const float *bias = pc == 0 && g->b ? g->b + jc + jr : NULL;
                    const char *bp = b_panel_at(g, pb, b_panel, jc + jr, jr, pc);
                    for (int64_t ir = 0; ir < mc; ir += mr) {
                        const int rows = (int)(mc - ir < mr ? mc - ir : mr);
                        ukr(steps, xpack + (size_t)((ic + ir) / mr) * a_panel, bp,
                            g->y + (s->m0 + ic + ir) * g->ldy + jc + jr, g->ldy, rows, cols,
                            mode, bias);
                    }
                }
            }
        }
    }
}

static void gemm_columns(struct weft_kctx *ctx, const struct gemm_job *g)
{
    const struct cpu_gemm_kernels *kr = g->kr;
    const int64_t col_units = (g->n + kr->nr - 1) / kr->nr;
    const int64_t kblocks = (g->k + kr->kc - 1) / kr->kc;
    char *xpack = (char *)(((uintptr_t)ctx->gemm_xpack + 63) & ~(uintptr_t)63);
    for (int64_t m0 = 0; m0 < g->m; m0 += CPU_GEMM_MSHARED) {
        const int64_t rows = g->m - m0 < CPU_GEMM_MSHARED ? g->m - m0 : CPU_GEMM_MSHARED;
        const int64_t panels = (rows + kr->mr - 1) / kr->mr;
        const size_t kb_stride = (size_t)panels * panel_bytes(kr, kr->mr, kr->kc);
        /* k blocks per run: as many as the shared buffer holds (at least one: its size) */
        const int64_t per = (int64_t)((ctx->gemm_xpack_bytes - 64) / kb_stride);
        for (int64_t kb0 = 0; kb0 < kblocks; kb0 += per) {
            struct shared_job s = {g, xpack, m0, rows, kb0,
                                   kb0 + per < kblocks ? kb0 + per : kblocks, panels, kb_stride};
            cpu_parallel(ctx, panels * (s.kb1 - s.kb0), 1, xpack_range, &s);
            cpu_parallel(ctx, col_units, 1, tiles_range, &s);
        }
    }
}

static void gemm_blocked(struct weft_kctx *ctx, struct gemm_job *g)
{
    const struct cpu_gemm_kernels *kr = g->kr;
    const int64_t col_units = (g->n + kr->nr - 1) / kr->nr;
    const int64_t row_units = (g->m + kr->mr - 1) / kr->mr;
    /* columns give each thread its own weights to pack; rows when they are too few */
    g->split_rows = col_units < 4 * (int64_t)ctx->threads && row_units > col_units;
    if (g->split_rows)
        cpu_parallel(ctx, row_units, (kr->mc + kr->mr - 1) / kr->mr, gemm_range, g);
    else
        gemm_columns(ctx, g);
}

void cpu_gemm_kn(struct weft_kctx *ctx, const float *x, int64_t ldx, const void *w,
                 enum weft_dtype wdt, int64_t ldw, const float *b, float *y, int64_t ldy,
                 int64_t m, int64_t n, int64_t k, int accumulate)
{
    if (m <= 0 || n <= 0 || k <= 0)
        return;
    const struct cpu_gemm_kernels *kr = ctx->compute_bf16 ? &ctx->gemm_bf16 : &ctx->gemm_f32;
    struct gemm_job g = {kr, x, ldx, w, wdt, b, y, ldy, m, n, k, accumulate, ldw, true, false,
                         ctx->gemm_scratch, NULL, 0};
    gemm_blocked(ctx, &g);
}

/* No products: the bias, or nothing. */
static void bias_only(const float *b, float *y, int64_t ldy, int64_t m, int64_t n,
                      int accumulate)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
            y[i * ldy + j] = (accumulate ? y[i * ldy + j] : 0.0f) + (b ? b[j] : 0.0f);
}

void cpu_gemm(struct weft_kctx *ctx, const float *x, int64_t ldx, const void *w,
              enum weft_dtype wdt, const float *b, float *y, int64_t ldy, int64_t m, int64_t n,
              int64_t k, int accumulate)
{
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0) {
        bias_only(b, y, ldy, m, n, accumulate);
        return;
    }
    if (m <= CPU_GEMM_ROWDOT_MAX) {
        struct rowdot_job r = {&ctx->gemm_f32, x, ldx, w, wdt, b, y, ldy, m, k, accumulate};
        cpu_parallel(ctx, n, 16, rowdot_range, &r);
        return;
    }
    const struct cpu_gemm_kernels *kr = ctx->compute_bf16 ? &ctx->gemm_bf16 : &ctx->gemm_f32;
    struct gemm_job g = {kr, x, ldx, w, wdt, b, y, ldy, m, n, k, accumulate, k, false, false,
                         ctx->gemm_scratch, NULL, 0};
    gemm_blocked(ctx, &g);
}

size_t cpu_gemm_wpack_bytes(const struct weft_kctx *ctx, enum weft_dtype wdt, int64_t n,
                            int64_t k)
{
    const struct cpu_gemm_kernels *kr = &ctx->gemm_f32;
    if (wdt != WEFT_DTYPE_BF16 || !kr->pack_wpairs || !kr->ukr_wpairs || n <= 0 || k <= 0)
        return 0;
    return (size_t)((n + kr->nr - 1) / kr->nr) * wpanel_bytes(kr, k);
}

struct wpack_job {
    const struct cpu_gemm_kernels *kr;
    const uint16_t *w;
    int64_t n, k;
    void *out;
};

static void wpack_range(void *arg, int64_t begin, int64_t end, int thread)
{
    (void)thread;
    const struct wpack_job *j = arg;
    j->kr->pack_wpairs(j->w, j->n, j->k, begin, end, j->out);
}

void cpu_gemm_wpack(struct weft_kctx *ctx, const void *w, int64_t n, int64_t k, void *out)
{
    struct wpack_job j = {&ctx->gemm_f32, w, n, k, out};
    cpu_parallel(ctx, (n + j.kr->nr - 1) / j.kr->nr, 1, wpack_range, &j);
}

void cpu_gemm_packed(struct weft_kctx *ctx, const float *x, int64_t ldx, const void *wpack,
                     const float *b, float *y, int64_t ldy, int64_t m, int64_t n, int64_t k,
                     int accumulate)
{
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0) {
        bias_only(b, y, ldy, m, n, accumulate);
        return;
    }
    /* few rows in f32 products, as cpu_gemm's dot products compute them */
    const struct cpu_gemm_kernels *kr =
        ctx->compute_bf16 && m > CPU_GEMM_ROWDOT_MAX ? &ctx->gemm_bf16 : &ctx->gemm_f32;
    struct gemm_job g = {kr, x, ldx, NULL, WEFT_DTYPE_BF16, b, y, ldy, m, n, k, accumulate, k,
                         false, false, ctx->gemm_scratch, wpack,
                         wpanel_bytes(&ctx->gemm_f32, k)};
    gemm_blocked(ctx, &g);
}
