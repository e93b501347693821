/* Every op of a backend against the CPU reference, in the spirit of ggml's test-backend-ops:
 * random shapes (odd sizes, padded row strides, one row, long rows), every weight dtype, f32 and
 * reduced-precision compute, each case run on the plain CPU backend (host memory) and on the
 * backend under test (through upload and download), outputs compared whole, the gaps between
 * strided rows included (an op must not write outside its columns).
 *
 * usage: test_backend_ops cpu-devmem|cuda [cases per op]
 *   cpu-devmem: the CPU's devmem variant must match bit for bit (the same kernels, every
 *               pointer checked);
 *   cuda:       cuda:0 within per-op, per-dtype tolerances; exits 77 (skipped) without a GPU.
 * The seed is fixed (WEFT_TEST_SEED overrides it); a failure prints the op, the shape and the
 * error. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "kernels/kernels.h"
#include "test.h"

/* ---- random numbers ------------------------------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t next_u64(void)
{
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return rng_state;
}

static float frand(float lo, float hi) /* uniform in [lo, hi) */
{
    return lo + (hi - lo) * (float)((double)(next_u64() >> 11) / 9007199254740992.0);
}

static int64_t pick(const int64_t *v, size_t n)
{
    return v[next_u64() % n];
}
#define PICK(...) pick((const int64_t[]){__VA_ARGS__}, sizeof((int64_t[]){__VA_ARGS__}) / 8)

static float *rnd(int64_t n, float lo, float hi)
{
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        p[i] = frand(lo, hi);
    return p;
}

/* ---- the two sides ------------------------------------------------------------------------- */

/* A backend and the buffers one case allocated on it. */
struct side {
    const char *label;
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    void *buf[16];
    size_t bytes[16];
    int n;
};

/* A copy of host memory on the side's backend. */
static void *put(struct side *s, const void *host, size_t bytes)
{
    CHECK(s->n < 16);
    void *d;
    CHECK_OK(s->K->buf_alloc(s->kc, bytes ? bytes : 4, &d));
    if (host && bytes) /* NULL: room only (zeroed) */
        s->K->upload(s->kc, d, host, bytes);
    s->buf[s->n] = d, s->bytes[s->n] = bytes ? bytes : 4, s->n++;
    return d;
}

/* An optional one (NULL stays NULL). */
static void *put_opt(struct side *s, const void *host, size_t bytes)
{
    return host ? put(s, host, bytes) : NULL;
}

static void get(struct side *s, void *host, const void *dev, size_t bytes)
{
    s->K->download(s->kc, host, dev, bytes);
}

/* The case is over: sync (the downloads land), check the status, free. */
static void done(struct side *s, const char *op)
{
    weft_status_t st = s->K->sync(s->kc);
    if (st != WEFT_OK) {
        fprintf(stderr, "%s on %s: the backend reports %s: %s\n", op, s->label,
                weft_status_str(st), test_logged);
        exit(1);
    }
    for (int i = 0; i < s->n; i++)
        s->K->buf_free(s->kc, s->buf[i], s->bytes[i]);
    s->n = 0;
}

/* ---- comparison ---------------------------------------------------------------------------- */

static int exact;        /* cpu-devmem: bit for bit */
static int cases = 24;   /* per op */
static int any_failed;

struct tally {
    int n;
    double worst;
};

/* Relative L2 error of got against want (n floats), NaN and Inf placement included; 0 when
 * identical. */
static double rel_err(const float *want, const float *got, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const int fw = isfinite(want[i]), fg = isfinite(got[i]);
        if (fw != fg || (!fw && memcmp(&want[i], &got[i], 4) != 0 &&
                         !(isnan(want[i]) && isnan(got[i]))))
            return INFINITY;
        if (!fw)
            continue;
        const double d = (double)want[i] - got[i];
        num += d * d;
        den += (double)want[i] * want[i];
    }
    return num == 0 ? 0 : sqrt(num / (den > 0 ? den : 1e-30));
}

static void compare(struct tally *t, const char *op, const char *shape, const char *what,
                    const float *want, const float *got, size_t n, double tol)
{
    t->n++;
    if (exact) {
        if (memcmp(want, got, n * sizeof(float)) != 0) {
            size_t i = 0;
            while (i < n && memcmp(&want[i], &got[i], 4) == 0)
                i++;
            fprintf(stderr, "FAIL %s %s %s: not bit for bit the CPU's (element %zu: %.9g vs "
                    "%.9g)\n", op, shape, what, i, (double)want[i], (double)got[i]);
            any_failed = 1;
        }
        return;
    }
    const double e = rel_err(want, got, n);
    t->worst = e > t->worst ? e : t->worst;
    if (!(e <= tol)) {
        fprintf(stderr, "FAIL %s %s %s: relative L2 error %.3g above %.1g\n", op, shape, what, e,
                tol);
        any_failed = 1;
    }
}

static void report(const char *label, const char *op, const struct tally *t, double tol)
{
    if (exact)
        printf("%-10s %-15s %3d cases, bit for bit\n", label, op, t->n);
    else
        printf("%-10s %-15s %3d cases, worst relative L2 error %.2g (tolerance %.0e)\n", label,
               op, t->n, t->worst, tol);
}

/* The comparison itself must be able to fail. */
static void self_test(void)
{
    float a[64], b[64];
    for (int i = 0; i < 64; i++)
        a[i] = b[i] = (float)i - 20.0f;
    CHECK(rel_err(a, b, 64) == 0);
    b[7] *= 1.001f;
    CHECK(rel_err(a, b, 64) > 1e-5);
    b[7] = a[7];
    b[9] = NAN;
    CHECK(isinf(rel_err(a, b, 64)));
}

/* ---- the ops ------------------------------------------------------------------------------- */

static struct side ref, dut; /* the CPU reference, the device under test */
static enum weft_dtype compute = WEFT_DTYPE_F32;
static int same_compute; /* both sides compute products in the same dtype */

static void set_both(enum weft_dtype dt)
{
    compute = dt;
    const int r = ref.K->set_compute(ref.kc, dt) == WEFT_OK;
    const int d = dut.K->set_compute(dut.kc, dt) == WEFT_OK;
    same_compute = r == d && (r || dt == WEFT_DTYPE_F32);
    if (!r)
        (void)ref.K->set_compute(ref.kc, WEFT_DTYPE_F32);
    if (!d)
        (void)dut.K->set_compute(dut.kc, WEFT_DTYPE_F32);
}

/* Tolerance of an op whose products follow the compute dtype. */
static double prod_tol(void)
{
    return same_compute ? 2e-5 : 1.5e-2;
}

static void *as_dtype(const float *w, int64_t n, enum weft_dtype dt)
{
    void *p = malloc((size_t)(n > 0 ? n : 1) * weft_dtype_size(dt));
    weft_dtype_convert(p, dt, w, WEFT_DTYPE_F32, (size_t)n);
    return p;
}

static void run_linear(struct side *s, const float *x, int64_t ldx, const void *w,
                       enum weft_dtype wdt, const float *b, const float *y0, int64_t ldy,
                       int64_t m, int64_t n, int64_t k, int acc, float *y_out)
{
    const size_t ny = (size_t)(m * ldy), esz = weft_dtype_size(wdt);
    float *X = put(s, x, (size_t)(m * ldx) * 4);
    void *W = put(s, w, (size_t)(n * k) * esz);
    float *B = put_opt(s, b, (size_t)n * 4), *Y = put(s, y0, ny * 4);
    s->K->linear(s->kc, X, ldx, W, wdt, B, Y, ldy, m, n, k, acc);
    get(s, y_out, Y, ny * 4);
    done(s, "linear");
}

static void test_linear(void)
{
    static const enum weft_dtype wdts[] = {WEFT_DTYPE_F32, WEFT_DTYPE_BF16, WEFT_DTYPE_F16};
    struct tally t = {0};
    for (int c = 0; c < cases + 2; c++) {
        int64_t m = PICK(1, 2, 7, 33, 130), n = PICK(1, 3, 64, 257), k = PICK(1, 5, 16, 67, 256);
        if (c == cases) /* one large product */
            m = 300, n = 640, k = 1024;
        if (c == cases + 1) /* one long row */
            m = 1, n = 3072, k = 3072;
        const int64_t ldx = k + PICK(0, 0, 3), ldy = n + PICK(0, 0, 5);
        const enum weft_dtype wdt = wdts[next_u64() % 3];
        const int bias = (int)(next_u64() % 2), acc = (int)(next_u64() % 2);
        float *x = rnd(m * ldx, -1, 1), *wf = rnd(n * k, -0.5f, 0.5f), *b = rnd(n, -1, 1);
        float *y0 = rnd(m * ldy, -1, 1);
        void *w = as_dtype(wf, n * k, wdt);
        float *want = malloc((size_t)(m * ldy) * 4), *got = malloc((size_t)(m * ldy) * 4);
        run_linear(&ref, x, ldx, w, wdt, bias ? b : NULL, y0, ldy, m, n, k, acc, want);
        run_linear(&dut, x, ldx, w, wdt, bias ? b : NULL, y0, ldy, m, n, k, acc, got);
        char shape[128];
        snprintf(shape, sizeof(shape), "[%lld x %lld] . [%lld x %lld]^T %s%s%s (ld %lld, %lld), "
                 "%s compute", (long long)m, (long long)k, (long long)n, (long long)k,
                 weft_dtype_name(wdt), bias ? " +b" : "", acc ? " +=" : "", (long long)ldx,
                 (long long)ldy, weft_dtype_name(compute));
        compare(&t, "linear", shape, "y", want, got, (size_t)(m * ldy), prod_tol());
        free(x), free(wf), free(b), free(y0), free(w), free(want), free(got);
    }
    char name[32];
    snprintf(name, sizeof(name), "linear/%s", weft_dtype_name(compute));
    report(dut.label, name, &t, prod_tol());
}

/* A bf16 weight packed once on the side (when its backend packs it: NULL, or 0 bytes, keeps
 * it as stored) and the product on it. Returns whether it packed. */
static bool run_linear_packed(struct side *s, const float *x, int64_t ldx, const uint16_t *w,
                              const float *b, const float *y0, int64_t ldy, int64_t m, int64_t n,
                              int64_t k, int acc, float *y_out)
{
    const size_t pb = s->K->linear_pack_bytes
                          ? s->K->linear_pack_bytes(s->kc, WEFT_DTYPE_BF16, n, k)
                          : 0;
    if (!pb)
        return false;
    const size_t ny = (size_t)(m * ldy);
    float *X = put(s, x, (size_t)(m * ldx) * 4);
    void *W = put(s, w, (size_t)(n * k) * 2), *P = put(s, NULL, pb);
    float *B = put_opt(s, b, (size_t)n * 4), *Y = put(s, y0, ny * 4);
    s->K->linear_pack(s->kc, W, WEFT_DTYPE_BF16, P, n, k);
    s->K->linear_packed(s->kc, X, ldx, P, B, Y, ldy, m, n, k, acc);
    get(s, y_out, Y, ny * 4);
    done(s, "linear_packed");
    return true;
}

/* Packed weights on the device under test against the reference's linear on the weights as
 * stored (the same bits above a few rows) where the device packs them. */
static void test_linear_packed(void)
{
    struct tally t = {0};
    for (int c = 0; c < cases; c++) {
        const int64_t m = PICK(1, 7, 33, 77), n = PICK(1, 3, 64, 257), k = PICK(1, 5, 67, 768);
        const int64_t ldx = k + PICK(0, 3), ldy = n + PICK(0, 5);
        const int bias = (int)(next_u64() % 2), acc = (int)(next_u64() % 2);
        float *x = rnd(m * ldx, -1, 1), *wf = rnd(n * k, -0.5f, 0.5f), *b = rnd(n, -1, 1);
        float *y0 = rnd(m * ldy, -1, 1);
        uint16_t *w = as_dtype(wf, n * k, WEFT_DTYPE_BF16);
        float *want = malloc((size_t)(m * ldy) * 4), *got = malloc((size_t)(m * ldy) * 4);
        run_linear(&ref, x, ldx, w, WEFT_DTYPE_BF16, bias ? b : NULL, y0, ldy, m, n, k, acc,
                   want);
        if (run_linear_packed(&dut, x, ldx, w, bias ? b : NULL, y0, ldy, m, n, k, acc, got)) {
            char shape[128];
            snprintf(shape, sizeof(shape), "[%lld x %lld] . packed [%lld x %lld]^T%s%s, %s "
                     "compute", (long long)m, (long long)k, (long long)n, (long long)k,
                     bias ? " +b" : "", acc ? " +=" : "", weft_dtype_name(compute));
            /* few rows: f32 products summed in another order than linear's */
            const int saved = exact;
            exact = exact && m > 6;
            compare(&t, "linear_packed", shape, "y", want, got, (size_t)(m * ldy),
                    exact ? 0 : 2e-5);
            exact = saved;
        }
        free(x), free(wf), free(b), free(y0), free(w), free(want), free(got);
    }
    if (t.n) {
        printf("%-10s linear_packed/%s %3d cases, %sworst relative L2 error %.2g (tolerance "
               "2e-05)\n", dut.label, weft_dtype_name(compute), t.n,
               exact ? "bit for bit above 6 rows, else " : "", t.worst);
    } else {
        printf("%s: linear_packed: no packed weights on this backend\n", dut.label);
    }
}

/* Elementwise and normalization ops: in f32 whatever the compute dtype. */
static void test_rows_ops(void)
{
    struct tally tl = {0}, tr = {0}, tp = {0}, tg = {0}, tm = {0}, tga = {0}, ts = {0}, tc = {0},
                 tf = {0}, tt = {0}, tq = {0}, tmu = {0}, tss = {0}, tsw = {0};
    const double tol = 1e-5;
    for (int c = 0; c < cases; c++) {
        const int64_t rows = c == 0 ? 1 : PICK(1, 3, 64, 129), d = PICK(1, 7, 64, 3072, 5000);
        const int64_t ldx = d + PICK(0, 3), ldy = d + PICK(0, 5);
        const size_t nx = (size_t)(rows * ldx), ny = (size_t)(rows * ldy);
        float *x = rnd((int64_t)nx, -3, 3), *y0 = rnd((int64_t)ny, -1, 1);
        float *v1 = rnd(d, -1, 1), *v2 = rnd(d, -1, 1);
        float *want = malloc(ny * 4 > nx * 4 ? ny * 4 : nx * 4);
        float *got = malloc(ny * 4 > nx * 4 ? ny * 4 : nx * 4);
        char shape[96];
        snprintf(shape, sizeof(shape), "[%lld x %lld] (ld %lld, %lld)", (long long)rows,
                 (long long)d, (long long)ldx, (long long)ldy);
        struct side *both[2] = {&ref, &dut};
        float *outs[2] = {want, got};
        for (int op = 0; op < 10; op++) {
            size_t n_out = ny;
            for (int i = 0; i < 2; i++) {
                struct side *s = both[i];
                float *X = put(s, x, nx * 4), *Y = put(s, y0, ny * 4);
                float *A = put(s, v1, (size_t)d * 4), *B = put(s, v2, (size_t)d * 4);
                float *out = Y;
                switch (op) {
                case 0: s->K->layernorm(s->kc, X, ldx, Y, ldy, rows, d, 1e-6f); break;
                case 1: s->K->gelu_tanh(s->kc, X, ldx, Y, ldy, rows, d); break;
                case 2: s->K->modulate(s->kc, X, ldx, A, B, Y, ldy, rows, d); break;
                case 3: /* gated, and a bias broadcast over rows (ldy 0) */
                    s->K->gated_add(s->kc, X, ldx, A, Y, ldy, rows, d);
                    s->K->gated_add(s->kc, X, ldx, NULL, B, 0, rows, d);
                    out = X, n_out = nx;
                    break;
                case 4: s->K->copy_rows(s->kc, Y, ldy, X, ldx, rows, d); break;
                case 5: s->K->silu(s->kc, X, Y, rows * d); break;
                case 6: s->K->quick_gelu(s->kc, X, ldx, Y, ldy, rows, d); break;
                case 7: s->K->mul(s->kc, Y, ldy, X, ldx, rows, d); break;
                case 8: /* with a bias in place (y = x), without one into y */
                    if (c % 2) {
                        s->K->scale_shift(s->kc, X, ldx, A, B, X, ldx, rows, d);
                        out = X, n_out = nx;
                    } else {
                        s->K->scale_shift(s->kc, X, ldx, A, NULL, Y, ldy, rows, d);
                    }
                    break;
                case 9: s->K->swiglu(s->kc, X, ldx, Y, ldy, rows, d / 2); break;
                }
                get(s, outs[i], out, n_out * 4);
                done(s, "rows op");
            }
            static const char *const names[] = {"layernorm", "gelu_tanh", "modulate",
                                                "gated_add", "copy_rows", "silu",
                                                "quick_gelu", "mul",      "scale_shift",
                                                "swiglu"};
            struct tally *ts_[] = {&tl, &tg, &tm, &tga, &tc, &ts, &tq, &tmu, &tss, &tsw};
            compare(ts_[op], names[op], shape, "out", want, got, n_out, tol);
        }
        free(x), free(y0), free(v1), free(v2), free(want), free(got);
    }
    /* per-head ops: rmsnorm, rope; fill; timestep_embed */
    for (int c = 0; c < cases; c++) {
        const int64_t rows = PICK(1, 9, 40), heads = PICK(1, 3, 24), d = PICK(2, 16, 64, 128);
        const int64_t ld = heads * d + PICK(0, 0, 6);
        const size_t nx = (size_t)(rows * ld);
        float *x = rnd((int64_t)nx, -2, 2), *w = rnd(d, 0.5f, 1.5f);
        float *cs = rnd(rows * d, -1, 1), *sn = rnd(rows * d, -1, 1);
        float *want = malloc(nx * 4), *got = malloc(nx * 4);
        char shape[96];
        snprintf(shape, sizeof(shape), "[%lld x %lld heads x %lld] (ld %lld)", (long long)rows,
                 (long long)heads, (long long)d, (long long)ld);
        for (int op = 0; op < 2; op++) {
            struct side *both[2] = {&ref, &dut};
            float *outs[2] = {want, got};
            for (int i = 0; i < 2; i++) {
                struct side *s = both[i];
                float *X = put(s, x, nx * 4);
                if (op == 0) {
                    float *W = put(s, w, (size_t)d * 4);
                    s->K->rmsnorm(s->kc, X, ld, W, rows, heads, d, 1e-6f);
                } else {
                    float *C = put(s, cs, (size_t)(rows * d) * 4);
                    float *S = put(s, sn, (size_t)(rows * d) * 4);
                    s->K->rope(s->kc, X, ld, C, S, rows, heads, d);
                }
                get(s, outs[i], X, nx * 4);
                done(s, "head op");
            }
            compare(op ? &tp : &tr, op ? "rope" : "rmsnorm", shape, "x", want, got, nx, tol);
        }
        free(x), free(w), free(cs), free(sn), free(want), free(got);
    }
    for (int c = 0; c < 4; c++) {
        const int64_t n = PICK(1, 3, 1000003), b = PICK(1, 2, 3), dim = PICK(256, 7, 64);
        float *t = rnd(b, 0, 1000), *want = malloc((size_t)(n + b * dim) * 4);
        float *got = malloc((size_t)(n + b * dim) * 4), *zero = calloc((size_t)(n + b * dim), 4);
        struct side *both[2] = {&ref, &dut};
        float *outs[2] = {want, got};
        for (int i = 0; i < 2; i++) {
            struct side *s = both[i];
            float *F = put(s, zero, (size_t)n * 4), *T = put(s, t, (size_t)b * 4);
            float *O = put(s, zero, (size_t)(b * dim) * 4);
            s->K->fill(s->kc, F, -2.5f, n);
            s->K->timestep_embed(s->kc, T, b, O, dim, c % 2 ? 1000.0f : 1.0f);
            get(s, outs[i], F, (size_t)n * 4);
            get(s, outs[i] + n, O, (size_t)(b * dim) * 4);
            done(s, "fill, timestep_embed");
        }
        char shape[64];
        snprintf(shape, sizeof(shape), "fill %lld, %lld timesteps x %lld", (long long)n,
                 (long long)b, (long long)dim);
        compare(&tf, "fill", shape, "dst", want, got, (size_t)n, 0);
        compare(&tt, "timestep_embed", shape, "out", want + n, got + n, (size_t)(b * dim), tol);
        free(t), free(want), free(got), free(zero);
    }
    report(dut.label, "layernorm", &tl, tol), report(dut.label, "rmsnorm", &tr, tol);
    report(dut.label, "rope", &tp, tol), report(dut.label, "gelu_tanh", &tg, tol);
    report(dut.label, "silu", &ts, tol), report(dut.label, "modulate", &tm, tol);
    report(dut.label, "gated_add", &tga, tol), report(dut.label, "copy_rows", &tc, tol);
    report(dut.label, "fill", &tf, 0), report(dut.label, "timestep_embed", &tt, tol);
    report(dut.label, "quick_gelu", &tq, tol), report(dut.label, "mul", &tmu, tol);
    report(dut.label, "scale_shift", &tss, tol), report(dut.label, "swiglu", &tsw, tol);
}

static void run_attention(struct side *s, const float *q, int64_t ldq, const float *k,
                          int64_t ldk, const float *v, int64_t ldv, const float *o0, int64_t ldo,
                          int with_lse, int64_t sq, int64_t sk, int64_t h, int64_t d, float *o,
                          float *lse)
{
    float *Q = put(s, q, (size_t)(sq * ldq) * 4);
    float *Kx = put(s, k, (size_t)(sk * ldk) * 4), *V = put(s, v, (size_t)(sk * ldv) * 4);
    float *O = put(s, o0, (size_t)(sq * ldo) * 4);
    float *L = with_lse ? put(s, o0, (size_t)(sq * h) * 4) : NULL;
    s->K->attention(s->kc, Q, ldq, Kx, ldk, V, ldv, O, ldo, L, sq, sk, h, d,
                    1.0f / sqrtf((float)d));
    get(s, o, O, (size_t)(sq * ldo) * 4);
    if (L)
        get(s, lse, L, (size_t)(sq * h) * 4);
    done(s, "attention");
}

static void test_attention(void)
{
    struct tally t = {0}, tl = {0};
    /* f32 on the device under test; with bf16 compute the CPU may round its products */
    const double tol = compute == WEFT_DTYPE_F32 ? 2e-5 : 1.5e-2;
    for (int c = 0; c < cases + 2; c++) {
        int64_t sq = PICK(1, 7, 65, 200), sk = PICK(1, 31, 33, 300), h = PICK(1, 3);
        int64_t d = PICK(8, 16, 64, 128, 200, 512);
        if (c == cases) /* long rows of keys */
            sq = 64, sk = 2100, h = 2, d = 128;
        if (c == cases + 1) /* no keys: zeros and -inf */
            sk = 0;
        if (d == 512) /* the VAE's one head of 512 channels: keep it small on the CPU */
            sq = sq > 65 ? 65 : sq, sk = sk > 300 ? 300 : sk, h = 1;
        const int64_t ldq = h * d + PICK(0, 4), ldk = h * d + PICK(0, 2), ldv = h * d;
        const int64_t ldo = h * d + PICK(0, 3);
        const int with_lse = c % 2 == 0 || sk == 0;
        float *q = rnd(sq * ldq, -2, 2), *k = rnd(sk * ldk, -2, 2), *v = rnd(sk * ldv, -1, 1);
        float *o0 = rnd(sq * ldo > sq * h ? sq * ldo : sq * h, -1, 1);
        float *want = malloc((size_t)(sq * ldo) * 4), *got = malloc((size_t)(sq * ldo) * 4);
        float *lw = malloc((size_t)(sq * h) * 4), *lg = malloc((size_t)(sq * h) * 4);
        run_attention(&ref, q, ldq, k, ldk, v, ldv, o0, ldo, with_lse, sq, sk, h, d, want, lw);
        run_attention(&dut, q, ldq, k, ldk, v, ldv, o0, ldo, with_lse, sq, sk, h, d, got, lg);
        char shape[128];
        snprintf(shape, sizeof(shape), "q %lld, k %lld, %lld heads x %lld (ld %lld %lld %lld "
                 "%lld), %s compute", (long long)sq, (long long)sk, (long long)h, (long long)d,
                 (long long)ldq, (long long)ldk, (long long)ldv, (long long)ldo,
                 weft_dtype_name(compute));
        compare(&t, "attention", shape, "out", want, got, (size_t)(sq * ldo), tol);
        if (with_lse)
            compare(&tl, "attention", shape, "lse", lw, lg, (size_t)(sq * h), tol);
        free(q), free(k), free(v), free(o0), free(want), free(got), free(lw), free(lg);
    }
    char name[32];
    snprintf(name, sizeof(name), "attention/%s", weft_dtype_name(compute));
    report(dut.label, name, &t, tol);
    report(dut.label, "  its lse", &tl, tol);
}

static void run_attention_masked(struct side *s, const float *q, int64_t ldq, const float *k,
                                 int64_t ldk, const float *v, const float *o0, int64_t ldo,
                                 const float *bias, int causal, int64_t sq, int64_t sk,
                                 int64_t h, int64_t d, float *o)
{
    float *Q = put(s, q, (size_t)(sq * ldq) * 4);
    float *Kx = put(s, k, (size_t)(sk * ldk) * 4), *V = put(s, v, (size_t)(sk * h * d) * 4);
    float *O = put(s, o0, (size_t)(sq * ldo) * 4);
    float *B = put_opt(s, bias, (size_t)(h * sq * sk) * 4);
    s->K->attention_masked(s->kc, Q, ldq, Kx, ldk, V, h * d, O, ldo, sq, sk, h, d,
                           1.0f / sqrtf((float)d), B, causal);
    get(s, o, O, (size_t)(sq * ldo) * 4);
    done(s, "attention_masked");
}

/* The text encoders' attention: T5's bias, CLIP's causal mask, or both; always f32. */
static void test_attention_masked(void)
{
    struct tally t = {0};
    const double tol = 2e-5;
    for (int c = 0; c < cases; c++) {
        const int causal = c % 3 != 1, with_bias = c % 3 != 0;
        int64_t sq = PICK(1, 7, 77, 130), sk = causal ? sq : PICK(1, 31, 77, 300);
        const int64_t h = PICK(1, 4), d = PICK(8, 32, 64, 128);
        const int64_t ldq = h * d + PICK(0, 4), ldk = h * d + PICK(0, 2);
        const int64_t ldo = h * d + PICK(0, 3);
        float *q = rnd(sq * ldq, -2, 2), *k = rnd(sk * ldk, -2, 2), *v = rnd(sk * h * d, -1, 1);
        float *o0 = rnd(sq * ldo, -1, 1), *bias = with_bias ? rnd(h * sq * sk, -3, 3) : NULL;
        float *want = malloc((size_t)(sq * ldo) * 4), *got = malloc((size_t)(sq * ldo) * 4);
        run_attention_masked(&ref, q, ldq, k, ldk, v, o0, ldo, bias, causal, sq, sk, h, d, want);
        run_attention_masked(&dut, q, ldq, k, ldk, v, o0, ldo, bias, causal, sq, sk, h, d, got);
        char shape[128];
        snprintf(shape, sizeof(shape), "q %lld, k %lld, %lld heads x %lld (ld %lld %lld %lld)%s%s",
                 (long long)sq, (long long)sk, (long long)h, (long long)d, (long long)ldq,
                 (long long)ldk, (long long)ldo, with_bias ? " +bias" : "",
                 causal ? " causal" : "");
        compare(&t, "attention_masked", shape, "out", want, got, (size_t)(sq * ldo), tol);
        free(q), free(k), free(v), free(o0), free(bias), free(want), free(got);
    }
    report(dut.label, "attention_masked", &t, tol);
}

static void test_attn_merge(void)
{
    struct tally t = {0};
    for (int c = 0; c < cases; c++) {
        const int64_t rows = PICK(1, 17, 100), h = PICK(1, 4), d = PICK(16, 64, 72);
        const int64_t ldo = h * d + PICK(0, 3), ldi = h * d + PICK(0, 1);
        float *o = rnd(rows * ldo, -1, 1), *oi = rnd(rows * ldi, -1, 1);
        float *l = rnd(rows * h, -5, 5), *li = rnd(rows * h, -5, 5);
        for (int64_t i = 0; i < rows * h; i++) { /* rows with no keys yet, on either side */
            if (next_u64() % 7 == 0)
                l[i] = -INFINITY;
            else if (next_u64() % 7 == 0)
                li[i] = -INFINITY;
        }
        const size_t n = (size_t)(rows * ldo + rows * h);
        float *want = malloc(n * 4), *got = malloc(n * 4);
        struct side *both[2] = {&ref, &dut};
        float *outs[2] = {want, got};
        for (int i = 0; i < 2; i++) {
            struct side *s = both[i];
            float *O = put(s, o, (size_t)(rows * ldo) * 4), *L = put(s, l, (size_t)(rows * h) * 4);
            float *Oi = put(s, oi, (size_t)(rows * ldi) * 4);
            float *Li = put(s, li, (size_t)(rows * h) * 4);
            s->K->attn_merge(s->kc, O, ldo, L, Oi, ldi, Li, rows, h, d);
            get(s, outs[i], O, (size_t)(rows * ldo) * 4);
            get(s, outs[i] + rows * ldo, L, (size_t)(rows * h) * 4);
            done(s, "attn_merge");
        }
        char shape[64];
        snprintf(shape, sizeof(shape), "[%lld x %lld heads x %lld]", (long long)rows,
                 (long long)h, (long long)d);
        compare(&t, "attn_merge", shape, "out and lse", want, got, n, 1e-5);
        free(o), free(oi), free(l), free(li), free(want), free(got);
    }
    report(dut.label, "attn_merge", &t, 1e-5);
}

static void run_conv(struct side *s, const float *x, const void *w, enum weft_dtype wdt,
                     const float *b, const float *y0, int64_t h, int64_t wd, int64_t cin,
                     int64_t cout, int64_t k, int acc, float *y_out)
{
    const size_t esz = weft_dtype_size(wdt), nw = (size_t)(cout * cin * k * k) * esz;
    float *X = put(s, x, (size_t)(h * wd * cin) * 4), *Y = put(s, y0, (size_t)(h * wd * cout) * 4);
    void *W = put(s, w, nw), *P = put(s, NULL, nw);
    float *B = put_opt(s, b, (size_t)cout * 4);
    const size_t wsb = s->K->conv2d_workspace(s->kc, h, wd, cin, cout, k);
    void *ws = wsb ? put(s, NULL, wsb) : NULL;
    s->K->conv2d_pack(s->kc, W, wdt, P, cout, cin, k);
    s->K->conv2d(s->kc, X, P, wdt, B, Y, h, wd, cin, cout, k, acc, ws);
    get(s, y_out, Y, (size_t)(h * wd * cout) * 4);
    done(s, "conv2d");
}

static void test_image_ops(void)
{
    static const enum weft_dtype wdts[] = {WEFT_DTYPE_F32, WEFT_DTYPE_BF16, WEFT_DTYPE_F16};
    struct tally tc = {0}, tg = {0}, tu = {0};
    for (int c = 0; c < cases; c++) {
        const int64_t hw = PICK(0, 1, 2), h = (int64_t[]){1, 5, 16}[hw], wd = (int64_t[]){1, 7, 9}[hw];
        const int64_t cin = PICK(1, 3, 32, 130), cout = PICK(1, 4, 64, 65), k = PICK(1, 3);
        const enum weft_dtype wdt = wdts[next_u64() % 3];
        const int bias = (int)(next_u64() % 2), acc = (int)(next_u64() % 2);
        float *x = rnd(h * wd * cin, -1, 1), *wf = rnd(cout * cin * k * k, -0.3f, 0.3f);
        float *b = rnd(cout, -1, 1), *y0 = rnd(h * wd * cout, -1, 1);
        void *w = as_dtype(wf, cout * cin * k * k, wdt);
        const size_t ny = (size_t)(h * wd * cout);
        float *want = malloc(ny * 4), *got = malloc(ny * 4);
        run_conv(&ref, x, w, wdt, bias ? b : NULL, y0, h, wd, cin, cout, k, acc, want);
        run_conv(&dut, x, w, wdt, bias ? b : NULL, y0, h, wd, cin, cout, k, acc, got);
        char shape[128];
        snprintf(shape, sizeof(shape), "%lldx%lld x %lld -> %lld, %lldx%lld %s%s%s, %s compute",
                 (long long)h, (long long)wd, (long long)cin, (long long)cout, (long long)k,
                 (long long)k, weft_dtype_name(wdt), bias ? " +b" : "", acc ? " +=" : "",
                 weft_dtype_name(compute));
        compare(&tc, "conv2d", shape, "y", want, got, ny, prod_tol());
        free(x), free(wf), free(b), free(y0), free(w), free(want), free(got);
    }
    for (int c = 0; c < cases; c++) {
        const int64_t n = PICK(1, 37, 1000, 4096), groups = PICK(1, 8, 32);
        const int64_t ch = groups * PICK(1, 2, 4, 16), silu = (int64_t)(next_u64() % 2);
        const int in_place = (int)(next_u64() % 2);
        float *x = rnd(n * ch, -4, 6), *g = rnd(ch, 0.5f, 1.5f), *b = rnd(ch, -1, 1);
        float *y0 = rnd(n * ch, -1, 1);
        float *want = malloc((size_t)(n * ch) * 4), *got = malloc((size_t)(n * ch) * 4);
        struct side *both[2] = {&ref, &dut};
        float *outs[2] = {want, got};
        for (int i = 0; i < 2; i++) {
            struct side *s = both[i];
            float *X = put(s, x, (size_t)(n * ch) * 4), *Y = in_place ? X : put(s, y0, (size_t)(n * ch) * 4);
            float *G = put(s, g, (size_t)ch * 4), *B = put(s, b, (size_t)ch * 4);
            s->K->groupnorm(s->kc, X, Y, G, B, n, ch, groups, 1e-6f, (int)silu);
            get(s, outs[i], Y, (size_t)(n * ch) * 4);
            done(s, "groupnorm");
        }
        char shape[96];
        snprintf(shape, sizeof(shape), "%lld px x %lld ch, %lld groups%s%s", (long long)n,
                 (long long)ch, (long long)groups, silu ? " +silu" : "",
                 in_place ? " in place" : "");
        compare(&tg, "groupnorm", shape, "y", want, got, (size_t)(n * ch), 1e-5);
        free(x), free(g), free(b), free(y0), free(want), free(got);
    }
    for (int c = 0; c < 6; c++) {
        const int64_t h = PICK(1, 3, 17), wd = PICK(1, 4, 9), ch = PICK(1, 3, 128);
        float *x = rnd(h * wd * ch, -1, 1), *zero = calloc((size_t)(4 * h * wd * ch), 4);
        float *want = malloc((size_t)(4 * h * wd * ch) * 4), *got = malloc((size_t)(4 * h * wd * ch) * 4);
        struct side *both[2] = {&ref, &dut};
        float *outs[2] = {want, got};
        for (int i = 0; i < 2; i++) {
            struct side *s = both[i];
            float *X = put(s, x, (size_t)(h * wd * ch) * 4);
            float *Y = put(s, zero, (size_t)(4 * h * wd * ch) * 4);
            s->K->upsample2x(s->kc, X, Y, h, wd, ch);
            get(s, outs[i], Y, (size_t)(4 * h * wd * ch) * 4);
            done(s, "upsample2x");
        }
        char shape[64];
        snprintf(shape, sizeof(shape), "%lldx%lld x %lld", (long long)h, (long long)wd,
                 (long long)ch);
        compare(&tu, "upsample2x", shape, "y", want, got, (size_t)(4 * h * wd * ch), 0);
        free(x), free(zero), free(want), free(got);
    }
    char name[32];
    snprintf(name, sizeof(name), "conv2d/%s", weft_dtype_name(compute));
    report(dut.label, name, &tc, prod_tol());
    report(dut.label, "groupnorm", &tg, 1e-5), report(dut.label, "upsample2x", &tu, 0);
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "cpu-devmem") != 0 && strcmp(argv[1], "cuda") != 0)) {
        fprintf(stderr, "usage: test_backend_ops cpu-devmem|cuda [cases per op]\n");
        return 2;
    }
    if (argc > 2)
        cases = atoi(argv[2]) > 0 ? atoi(argv[2]) : cases;
    const char *seed = getenv("WEFT_TEST_SEED");
    if (seed && *seed)
        rng_state = strtoull(seed, NULL, 0) | 1;
    test_quiet();
    self_test();
    CHECK_OK(weft_kernels_cpu_create(2, &ref.K, &ref.kc));
    ref.label = "cpu";
    char why[300];
    if (strcmp(argv[1], "cuda") == 0) {
        const struct weft_device dev = {WEFT_DEVICE_CUDA, 0};
        weft_status_t st = weft_kernels_create(&dev, 0, &dut.K, &dut.kc, why, sizeof(why));
        if (st == WEFT_ERR_NO_DEVICE || st == WEFT_ERR_UNSUPPORTED) {
            printf("skipped: %s\n", why);
            ref.K->destroy(ref.kc);
            return TEST_SKIP;
        }
        CHECK_OK(st);
        dut.label = "cuda:0";
    } else {
        CHECK_OK(weft_kernels_cpu_devmem_create(2, &dut.K, &dut.kc));
        dut.label = "cpu-devmem";
        exact = 1;
    }
    char what[300];
    dut.K->describe(dut.kc, what, sizeof(what));
    printf("%s: %s\nagainst: ", dut.label, what);
    ref.K->describe(ref.kc, what, sizeof(what));
    printf("%s\nseed 0x%llx, %d cases per op\n", what, (unsigned long long)rng_state, cases);

    static const enum weft_dtype computes[] = {WEFT_DTYPE_F32, WEFT_DTYPE_BF16};
    for (size_t i = 0; i < sizeof(computes) / sizeof(computes[0]); i++) {
        set_both(computes[i]);
        if (compute != WEFT_DTYPE_F32 && dut.K->set_compute(dut.kc, compute) != WEFT_OK)
            continue; /* no such path on the device under test */
        test_linear();
        test_linear_packed();
        test_attention();
        test_image_ops();
    }
    set_both(WEFT_DTYPE_F32);
    test_rows_ops();
    test_attention_masked();
    test_attn_merge();
    dut.K->destroy(dut.kc);
    ref.K->destroy(ref.kc);
    if (any_failed) {
        fprintf(stderr, "some ops differ from the CPU reference (above)\n");
        return 1;
    }
    return 0;
}
