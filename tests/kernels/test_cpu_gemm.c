/* The CPU GEMM (kernels/cpu/gemm.c) against a double-precision reference, for every kernel
 * set this CPU can run (generic, avx2, avx512, avx512_bf16), every weight dtype (f32, bf16,
 * f16), shapes on both sides of every tile and block edge, strided rows, bias or none,
 * accumulate or not, 1 and 2 threads (the same bits: the order of each sum does not depend on
 * the thread count). f32 compute is exact to f32 rounding on the widened weights; bf16 compute
 * is checked against the reference on bf16-rounded inputs (what it promises) and against f32.
 * Weights packed once (the table's linear_pack, linear_packed) give the bits of the same
 * weights as stored. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "test.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) /* uniform in [-1, 1) */
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float round_to(enum weft_dtype d, float v)
{
    if (d == WEFT_DTYPE_BF16)
        return weft_bf16_to_f32(weft_f32_to_bf16(v));
    if (d == WEFT_DTYPE_F16)
        return weft_f16_to_f32(weft_f32_to_f16(v));
    return v;
}

/* w as stored in dtype (and its exact f32 values in wf). */
static void *make_w(enum weft_dtype d, int64_t n, int64_t k, float *wf)
{
    void *w = malloc((size_t)(n * k) * 4 + 4);
    CHECK(w);
    for (int64_t i = 0; i < n * k; i++) {
        float v = round_to(d, frand());
        wf[i] = v;
        if (d == WEFT_DTYPE_F32)
            ((float *)w)[i] = v;
        else if (d == WEFT_DTYPE_BF16)
            ((uint16_t *)w)[i] = weft_f32_to_bf16(v);
        else
            ((uint16_t *)w)[i] = weft_f32_to_f16(v);
    }
    return w;
}

struct shape {
    int64_t m, n, k;
};

static double max_rel(const float *y, int64_t ldy, const double *ref, int64_t m, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double d = fabs((double)y[i * ldy + j] - ref[i * n + j]);
            num = d > num ? d : num;
            den = fabs(ref[i * n + j]) > den ? fabs(ref[i * n + j]) : den;
        }
    return num / (den + 1e-30);
}

/* One product on ctx; returns the error against the reference (inputs rounded to bf16 first
 * when bf16r). */
static double one(struct weft_kctx *c, const struct shape *s, enum weft_dtype d, bool bias_on,
                  bool acc, bool bf16r, float *y_out)
{
    const int64_t ldx = s->k + 3, ldy = s->n + 5;
    float *x = malloc((size_t)(s->m * ldx) * 4 + 4), *wf = malloc((size_t)(s->n * s->k) * 4 + 4);
    float *b = malloc((size_t)s->n * 4 + 4), *y = malloc((size_t)(s->m * ldy) * 4 + 4);
    double *ref = malloc((size_t)(s->m * s->n) * sizeof(double) + 8);
    CHECK(x && wf && b && y && ref);
    for (int64_t i = 0; i < s->m * ldx; i++)
        x[i] = frand();
    void *w = make_w(d, s->n, s->k, wf);
    for (int64_t j = 0; j < s->n; j++)
        b[j] = frand();
    for (int64_t i = 0; i < s->m * ldy; i++)
        y[i] = frand();
    for (int64_t i = 0; i < s->m; i++)
        for (int64_t j = 0; j < s->n; j++) {
            double r = acc ? y[i * ldy + j] : 0.0;
            r += bias_on ? b[j] : 0.0;
            for (int64_t kk = 0; kk < s->k; kk++) {
                float xv = x[i * ldx + kk], wv = wf[j * s->k + kk];
                if (bf16r)
                    xv = round_to(WEFT_DTYPE_BF16, xv), wv = round_to(WEFT_DTYPE_BF16, wv);
                r += (double)xv * wv;
            }
            ref[i * s->n + j] = r;
        }
    const float guard = y[s->n]; /* the first column past n: never written */
    cpu_gemm(c, x, ldx, w, d, bias_on ? b : NULL, y, ldy, s->m, s->n, s->k, acc);
    CHECK(y[s->n] == guard);
    double e = max_rel(y, ldy, ref, s->m, s->n);
    if (y_out)
        for (int64_t i = 0; i < s->m; i++)
            memcpy(y_out + i * s->n, y + i * ldy, (size_t)s->n * 4);
    free(x), free(wf), free(b), free(y), free(ref), free(w);
    return e;
}

static const struct shape shapes[] = {
    {1, 1, 1},    {1, 33, 70},   {3, 65, 300},  {6, 17, 16},   {7, 32, 15},  {11, 31, 1},
    {12, 32, 256}, {13, 33, 257}, {25, 100, 513}, {97, 70, 64}, {40, 1100, 33}, {200, 9, 40},
};

static void run_isa(enum cpu_isa isa, bool bf16)
{
    struct cpu_gemm_kernels kr;
    if (!cpu_gemm_kernels_get(isa, bf16, &kr))
        return;
    for (int threads = 1; threads <= 2; threads++) {
        const struct weft_kernels *K;
        struct weft_kctx *c;
        CHECK_OK(weft_kernels_cpu_create(threads, &K, &c));
        c->gemm_f32 = bf16 ? c->gemm_f32 : kr; /* the kernel set under test */
        c->gemm_bf16 = bf16 ? kr : c->gemm_bf16;
        c->compute_bf16 = bf16;
        double worst = 0;
        for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
            for (int d = 0; d < 3; d++) {
                const enum weft_dtype dt = (enum weft_dtype[]){WEFT_DTYPE_F32, WEFT_DTYPE_BF16,
                                                               WEFT_DTYPE_F16}[d];
                for (int mode = 0; mode < 3; mode++) {
                    const bool bias = mode != 1, acc = mode == 2;
                    /* bf16 compute: its own promise (rounded inputs), and the f32 result */
                    const bool rowdot = shapes[si].m <= CPU_GEMM_ROWDOT_MAX;
                    double e = one(c, &shapes[si], dt, bias, acc, bf16 && !rowdot, NULL);
                    const double tol = 4e-6 * sqrt((double)shapes[si].k + 1);
                    if (!(e <= tol)) {
                        fprintf(stderr, "%s%s %d threads, %lldx%lldx%lld, w %s, mode %d: "
                                "error %.3g > %.3g\n", cpu_isa_name(isa), bf16 ? " bf16" : "",
                                threads, (long long)shapes[si].m, (long long)shapes[si].n,
                                (long long)shapes[si].k, weft_dtype_name(dt), mode, e, tol);
                        exit(1);
                    }
                    worst = e > worst ? e : worst;
                    if (bf16 && !rowdot) /* against f32 math: bf16's own error, bounded */
                        CHECK(one(c, &shapes[si], dt, bias, acc, false, NULL) <= 2e-2);
                }
            }
        }
        printf("%-12s %-4s %d thread(s): worst relative error %.2g\n", cpu_isa_name(isa),
               bf16 ? "bf16" : "f32", threads, worst);
        weft_kernels_cpu_destroy(c);
    }
}

/* A [k][n] weight (a convolution's panel) gives the bits of the same weight as [n][k]. */
static void test_kmajor(void)
{
    const struct shape s[] = {{37, 64, 27}, {200, 40, 300}, {5, 3, 9}};
    const struct weft_kernels *K;
    struct weft_kctx *c;
    CHECK_OK(weft_kernels_cpu_create(2, &K, &c));
    for (int i = 0; i < 3; i++) {
        for (int bf = 0; bf < 2; bf++) {
            if (bf && weft_kernels_cpu_set_compute(c, WEFT_DTYPE_BF16) != WEFT_OK)
                continue;
            const int64_t m = s[i].m, n = s[i].n, k = s[i].k, ldw = n + 3;
            float *x = malloc((size_t)(m * k) * 4), *wf = malloc((size_t)(n * k) * 4);
            uint16_t *wn = malloc((size_t)(n * k) * 2), *wk = malloc((size_t)(k * ldw) * 2);
            float *y1 = malloc((size_t)(m * n) * 4), *y2 = malloc((size_t)(m * n) * 4);
            CHECK(x && wf && wn && wk && y1 && y2);
            for (int64_t t = 0; t < m * k; t++)
                x[t] = frand();
            for (int64_t j = 0; j < n; j++)
                for (int64_t kk = 0; kk < k; kk++) {
                    const uint16_t v = weft_f32_to_bf16(frand());
                    wn[j * k + kk] = v;
                    wk[kk * ldw + j] = v;
                }
            cpu_gemm(c, x, k, wn, WEFT_DTYPE_BF16, NULL, y1, n, m, n, k, 0);
            cpu_gemm_kn(c, x, k, wk, WEFT_DTYPE_BF16, ldw, NULL, y2, n, m, n, k, 0);
            if (m > CPU_GEMM_ROWDOT_MAX) /* the same packed panels, the same bits */
                CHECK(memcmp(y1, y2, (size_t)(m * n) * 4) == 0);
            else { /* rows against panels: f32 math vs the compute dtype's (bf16 rounds x) */
                const float tol = bf ? 2e-2f : 1e-4f;
                for (int64_t t = 0; t < m * n; t++)
                    CHECK(fabsf(y1[t] - y2[t]) <= tol * (1 + fabsf(y1[t])));
            }
            free(x), free(wf), free(wn), free(wk), free(y1), free(y2);
            weft_kernels_cpu_set_compute(c, WEFT_DTYPE_F32);
        }
    }
    weft_kernels_cpu_destroy(c);
}

/* The same bits on 1 and 2 threads, and rows split vs columns split. */
static void test_threads(void)
{
    const struct shape s[] = {{300, 64, 200}, {50, 4000, 100}};
    for (int i = 0; i < 2; i++) {
        const size_t bytes = (size_t)(s[i].m * s[i].n) * 4;
        float *y1 = malloc(bytes), *y2 = malloc(bytes);
        CHECK(y1 && y2);
        const struct weft_kernels *K;
        struct weft_kctx *c1, *c2;
        CHECK_OK(weft_kernels_cpu_create(1, &K, &c1));
        CHECK_OK(weft_kernels_cpu_create(2, &K, &c2));
        uint64_t seed = rng;
        (void)one(c1, &s[i], WEFT_DTYPE_BF16, true, false, false, y1);
        rng = seed;
        (void)one(c2, &s[i], WEFT_DTYPE_BF16, true, false, false, y2);
        CHECK(memcmp(y1, y2, (size_t)(s[i].m * s[i].n) * 4) == 0);
        weft_kernels_cpu_destroy(c1);
        weft_kernels_cpu_destroy(c2);
        free(y1), free(y2);
    }
}

/* A bf16 weight packed once through the table gives linear's bits on the weight as stored
 * (few rows: f32 products both, summed in another order), in either compute dtype whichever
 * it was packed under, on 1 and 2 threads; packing writes only its bytes; f32 and f16 weights
 * are not packed, nor anything without AVX-512. */
static void test_packed(enum cpu_isa have)
{
    const struct shape s[] = {{77, 768, 768}, {13, 33, 257}, {7, 1, 3},    {25, 100, 513},
                              {97, 70, 1025}, {200, 9, 40},  {3, 65, 300}, {1, 33, 70},
                              {6, 31, 1},     {40, 1100, 33}, {12, 32, 256}};
    for (int threads = 1; threads <= 2; threads++) {
        const struct weft_kernels *K;
        struct weft_kctx *c;
        CHECK_OK(weft_kernels_cpu_create(threads, &K, &c));
        CHECK(K->linear_pack_bytes(c, WEFT_DTYPE_F32, 64, 64) == 0);
        CHECK(K->linear_pack_bytes(c, WEFT_DTYPE_F16, 64, 64) == 0);
        if (have < CPU_ISA_AVX512) {
            CHECK(K->linear_pack_bytes(c, WEFT_DTYPE_BF16, 64, 64) == 0);
            weft_kernels_cpu_destroy(c);
            continue;
        }
        for (size_t i = 0; i < sizeof(s) / sizeof(s[0]); i++) {
            const int64_t m = s[i].m, n = s[i].n, k = s[i].k, ldx = k + 3, ldy = n + 5;
            const size_t pb = K->linear_pack_bytes(c, WEFT_DTYPE_BF16, n, k);
            /* NR-column panels of k rounded up to pairs */
            CHECK(pb == (size_t)((n + 31) / 32 * 32 * ((k + 1) / 2 * 2)) * 2);
            float *x = malloc((size_t)(m * ldx) * 4), *b = malloc((size_t)n * 4);
            float *y0 = malloc((size_t)(m * ldy) * 4), *y1 = malloc((size_t)(m * ldy) * 4);
            float *y2 = malloc((size_t)(m * ldy) * 4);
            uint16_t *w = malloc((size_t)(n * k) * 2);
            void *packed;
            CHECK(x && b && y0 && y1 && y2 && w);
            CHECK_OK(K->buf_alloc(c, pb + 64, &packed));
            memset((char *)packed + pb, 0x5a, 64);
            for (int64_t t = 0; t < m * ldx; t++)
                x[t] = frand();
            for (int64_t t = 0; t < n * k; t++)
                w[t] = weft_f32_to_bf16(frand());
            for (int64_t j = 0; j < n; j++)
                b[j] = frand();
            for (int64_t t = 0; t < m * ldy; t++)
                y0[t] = frand();
            const bool bf_first = i % 2 == 1; /* packed under either compute dtype */
            (void)weft_kernels_cpu_set_compute(c, bf_first ? WEFT_DTYPE_BF16 : WEFT_DTYPE_F32);
            K->linear_pack(c, w, WEFT_DTYPE_BF16, packed, n, k);
            for (int t = 0; t < 64; t++)
                CHECK(((unsigned char *)packed)[pb + t] == 0x5a);
            for (int bf = 0; bf < 2; bf++) {
                if (bf && weft_kernels_cpu_set_compute(c, WEFT_DTYPE_BF16) != WEFT_OK)
                    continue;
                if (!bf)
                    (void)weft_kernels_cpu_set_compute(c, WEFT_DTYPE_F32);
                for (int mode = 0; mode < 3; mode++) {
                    const bool bias = mode != 1, acc = mode == 2;
                    memcpy(y1, y0, (size_t)(m * ldy) * 4);
                    memcpy(y2, y0, (size_t)(m * ldy) * 4);
                    K->linear(c, x, ldx, w, WEFT_DTYPE_BF16, bias ? b : NULL, y1, ldy, m, n, k,
                              acc);
                    K->linear_packed(c, x, ldx, packed, bias ? b : NULL, y2, ldy, m, n, k, acc);
                    if (m > CPU_GEMM_ROWDOT_MAX) {
                        if (memcmp(y1, y2, (size_t)(m * ldy) * 4) != 0) {
                            fprintf(stderr, "packed %lldx%lldx%lld %s compute, mode %d, %d "
                                    "threads: not the bits of the weight as stored\n",
                                    (long long)m, (long long)n, (long long)k,
                                    bf ? "bf16" : "f32", mode, threads);
                            exit(1);
                        }
                    } else {
                        const float tol = 2e-6f * sqrtf((float)k + 1);
                        for (int64_t t = 0; t < m * ldy; t++)
                            CHECK(fabsf(y1[t] - y2[t]) <= tol * (1 + fabsf(y1[t])));
                        for (int64_t r = 0; r < m; r++) /* the gaps between rows untouched */
                            for (int64_t j = n; j < ldy; j++)
                                CHECK(y2[r * ldy + j] == y0[r * ldy + j]);
                    }
                }
            }
            K->buf_free(c, packed, pb + 64);
            free(x), free(b), free(y0), free(y1), free(y2), free(w);
        }
        weft_kernels_cpu_destroy(c);
    }
    printf("packed bf16 weights: the bits of the weights as stored\n");
}

int main(void)
{
    const enum cpu_isa have = cpu_isa_detect();
    printf("this CPU: %s\n", cpu_isa_name(have));
    for (int isa = CPU_ISA_GENERIC; isa <= (int)have; isa++) {
        run_isa((enum cpu_isa)isa, false);
        run_isa((enum cpu_isa)isa, true);
    }
    test_threads();
    test_kmajor();
    test_packed(have);
    /* the table's own entry and the compute switch */
    const struct weft_kernels *K;
    struct weft_kctx *c;
    CHECK_OK(weft_kernels_cpu_create(0, &K, &c));
    CHECK(weft_kernels_cpu_set_compute(c, WEFT_DTYPE_F16) == WEFT_ERR_UNSUPPORTED);
    weft_status_t st = weft_kernels_cpu_set_compute(c, WEFT_DTYPE_BF16);
    CHECK(st == (have == CPU_ISA_AVX512_BF16 ? WEFT_OK : WEFT_ERR_UNSUPPORTED));
    char what[200];
    weft_kernels_cpu_describe(c, what, sizeof(what));
    printf("%s\n", what);
    CHECK(strstr(what, cpu_isa_name(have)));
    weft_kernels_cpu_destroy(c);
    printf("ok\n");
    return 0;
}
