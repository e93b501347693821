/* weft bench gemm: the CPU GEMMs side by side on FLUX.1's linear shapes, in one run.
 *
 * Sides (each y[m][n] = x[m][k] . w[n][k]^T, w as a checkpoint stores a Linear's weight):
 *   f32 weights   weft's GEMM (kernels/cpu/gemm.c), OpenBLAS cblas_sgemm, BLIS cblas_sgemm,
 *                 oneDNN dnnl_sgemm
 *   bf16 weights  weft with f32 products (w widened as it is packed), weft with bf16 products
 *                 (x rounded as it is packed, vdpbf16ps), oneDNN's bf16 matmul (x already bf16,
 *                 as in a bf16 pipeline; w as stored, and w reordered once into oneDNN's own
 *                 layout), OpenBLAS cblas_sbgemm where the library has it
 *
 * OpenBLAS and BLIS both define cblas_sgemm, so each is dlopen()ed with RTLD_LOCAL; oneDNN is
 * linked (libdnnl-dev) when the build found it. Every library gets the same thread count (its
 * own call: openblas_set_num_threads, bli_thread_set_num_threads, omp_set_num_threads for
 * oneDNN's OpenMP runtime); each dispatches from its own CPU detection, with the environment as
 * the machine sets it. Within a round every side runs once per shape, in turn, with a pause
 * between sides so a library's spinning threads cannot steal the next one's cores. Each side's
 * result is checked against weft f32 once (relative L2) so a wrongly called library cannot post
 * a figure. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/stats.h"
#include "common/alloc.h"
#include "common/dtype.h"
#include "common/log.h"
#include "kernels/kernels.h"

#if WEFT_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

enum side {
    S_WEFT_F32,
    S_OPENBLAS_F32,
    S_BLIS_F32,
    S_DNNL_F32,
    S_WEFT_BF16W,
    S_WEFT_BF16,
    S_DNNL_BF16,
    S_DNNL_BF16_PACKED,
    S_OPENBLAS_SBGEMM,
    N_SIDES
};

static const char *const side_name[N_SIDES] = {
    "weft f32",          "OpenBLAS sgemm",        "BLIS sgemm",
    "oneDNN sgemm",      "weft bf16 w, f32 prod", "weft bf16 w, bf16 prod",
    "oneDNN bf16",       "oneDNN bf16 prepacked", "OpenBLAS sbgemm",
};
static const bool side_bf16[N_SIDES] = {false, false, false, false, true, true, true, true, true};

struct shape {
    char name[48];
    int64_t m, n, k;
};

/* cblas_sgemm's and cblas_sbgemm's prototypes (CblasRowMajor 101, NoTrans 111, Trans 112) */
typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                         const float *, int, float, float *, int);
typedef void (*sbgemm_fn)(int, int, int, int, int, int, float, const uint16_t *, int,
                          const uint16_t *, int, float, float *, int);

struct blas {
    void *lib;
    sgemm_fn sgemm;
    sbgemm_fn sbgemm;
    char about[128];
};

struct run {
    int threads;
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    struct blas openblas, blis;
    bool have[N_SIDES];
    char about[N_SIDES][160];
};

static void blas_open(struct blas *b, const char *const *names, int threads, bool openblas)
{
    memset(b, 0, sizeof(*b));
    for (int i = 0; names[i] && !b->lib; i++)
        b->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!b->lib) {
        snprintf(b->about, sizeof(b->about), "not found (%s)", names[0]);
        return;
    }
    b->sgemm = (sgemm_fn)(uintptr_t)dlsym(b->lib, "cblas_sgemm");
    if (openblas) {
        b->sbgemm = (sbgemm_fn)(uintptr_t)dlsym(b->lib, "cblas_sbgemm");
        void (*set)(int) = (void (*)(int))(uintptr_t)dlsym(b->lib, "openblas_set_num_threads");
        char *(*core)(void) = (char *(*)(void))(uintptr_t)dlsym(b->lib, "openblas_get_corename");
        char *(*cfg)(void) = (char *(*)(void))(uintptr_t)dlsym(b->lib, "openblas_get_config");
        if (set)
            set(threads);
        snprintf(b->about, sizeof(b->about), "%s, core %s%s", cfg ? cfg() : "OpenBLAS",
                 core ? core() : "?", b->sbgemm ? "" : "; no sbgemm in this build");
    } else {
        void (*set)(int) = (void (*)(int))(uintptr_t)dlsym(b->lib, "bli_thread_set_num_threads");
        int (*arch_id)(void) = (int (*)(void))(uintptr_t)dlsym(b->lib, "bli_arch_query_id");
        const char *(*arch)(int) =
            (const char *(*)(int))(uintptr_t)dlsym(b->lib, "bli_arch_string");
        const char *(*ver)(void) =
            (const char *(*)(void))(uintptr_t)dlsym(b->lib, "bli_info_get_version_str");
        if (set)
            set(threads);
        snprintf(b->about, sizeof(b->about), "BLIS %s, %s kernels", ver ? ver() : "?",
                 arch && arch_id ? arch(arch_id()) : "?");
    }
}

/* ---------------------------------------------------------------------------------------- */
/* oneDNN                                                                                    */

#if WEFT_HAVE_DNNL
struct dnnl_side {
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    dnnl_primitive_t prim;
    dnnl_memory_t src, wei, dst;
    void *packed; /* the prepacked weights (NULL: as stored) */
    size_t packed_bytes;
};

static bool dnnl_ok(dnnl_status_t s, const char *what)
{
    if (s != dnnl_success)
        WEFT_LOG_ERROR("bench", "oneDNN %s: status %d", what, (int)s);
    return s == dnnl_success;
}

/* A bf16 x bf16 -> f32 matmul for this shape; prepack: weights in oneDNN's chosen layout,
 * reordered once from [n][k]. */
static bool dnnl_side_make(struct dnnl_side *d, dnnl_engine_t eng, dnnl_stream_t stream,
                           const struct shape *s, uint16_t *xb, uint16_t *wb, float *y,
                           bool prepack)
{
    memset(d, 0, sizeof(*d));
    d->eng = eng, d->stream = stream;
    dnnl_memory_desc_t src_md, wei_md, wei_plain, dst_md;
    dnnl_dims_t sd = {s->m, s->k}, wd = {s->k, s->n}, dd = {s->m, s->n};
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd;
    if (!dnnl_ok(dnnl_memory_desc_init_by_tag(&src_md, 2, sd, dnnl_bf16, dnnl_ab), "src") ||
        !dnnl_ok(dnnl_memory_desc_init_by_tag(&wei_plain, 2, wd, dnnl_bf16, dnnl_ba), "wei") ||
        !dnnl_ok(dnnl_memory_desc_init_by_tag(&wei_md, 2, wd, dnnl_bf16,
                                              prepack ? dnnl_format_tag_any : dnnl_ba), "wei") ||
        !dnnl_ok(dnnl_memory_desc_init_by_tag(&dst_md, 2, dd, dnnl_f32, dnnl_ab), "dst") ||
        !dnnl_ok(dnnl_matmul_desc_init(&md, &src_md, &wei_md, NULL, &dst_md), "matmul") ||
        !dnnl_ok(dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL), "primitive desc"))
        return false;
    const dnnl_memory_desc_t *want = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    bool ok = dnnl_ok(dnnl_primitive_create(&d->prim, pd), "primitive") &&
              dnnl_ok(dnnl_memory_create(&d->src, &src_md, eng, xb), "memory") &&
              dnnl_ok(dnnl_memory_create(&d->dst, &dst_md, eng, y), "memory");
    if (ok && prepack) {
        d->packed_bytes = dnnl_memory_desc_get_size(want);
        d->packed = weft_big_alloc(d->packed_bytes);
        dnnl_memory_t plain;
        dnnl_primitive_desc_t rpd;
        dnnl_primitive_t reorder;
        ok = d->packed && dnnl_ok(dnnl_memory_create(&plain, &wei_plain, eng, wb), "memory") &&
             dnnl_ok(dnnl_memory_create(&d->wei, want, eng, d->packed), "memory") &&
             dnnl_ok(dnnl_reorder_primitive_desc_create(&rpd, &wei_plain, eng, want, eng, NULL),
                     "reorder") &&
             dnnl_ok(dnnl_primitive_create(&reorder, rpd), "reorder");
        if (ok) {
            dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, plain}, {DNNL_ARG_TO, d->wei}};
            ok = dnnl_ok(dnnl_primitive_execute(reorder, stream, 2, a), "reorder") &&
                 dnnl_ok(dnnl_stream_wait(stream), "wait");
            dnnl_primitive_destroy(reorder);
            dnnl_primitive_desc_destroy(rpd);
            dnnl_memory_destroy(plain);
        }
    } else if (ok) {
        ok = dnnl_ok(dnnl_memory_create(&d->wei, &wei_plain, eng, wb), "memory");
    }
    dnnl_primitive_desc_destroy(pd);
    return ok;
}

static void dnnl_side_run(struct dnnl_side *d)
{
    dnnl_exec_arg_t a[3] = {{DNNL_ARG_SRC, d->src}, {DNNL_ARG_WEIGHTS, d->wei},
                            {DNNL_ARG_DST, d->dst}};
    (void)dnnl_primitive_execute(d->prim, d->stream, 3, a);
    (void)dnnl_stream_wait(d->stream);
}

static void dnnl_side_free(struct dnnl_side *d)
{
    if (d->prim)
        dnnl_primitive_destroy(d->prim);
    if (d->src)
        dnnl_memory_destroy(d->src);
    if (d->wei)
        dnnl_memory_destroy(d->wei);
    if (d->dst)
        dnnl_memory_destroy(d->dst);
    weft_big_free(d->packed, d->packed_bytes);
}

static const char *dnnl_isa_name(dnnl_cpu_isa_t isa)
{
    switch (isa) {
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_sse41: return "sse41";
    default: return "other";
    }
}
#endif

/* ---------------------------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double rel_l2(const float *a, const float *b, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = (double)a[i] - b[i];
        num += d * d, den += (double)b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

/* Buffers of one shape. */
struct bufs {
    float *x, *w, *y, *ref;
    uint16_t *xb, *wb;
    size_t nx, nw, ny;
#if WEFT_HAVE_DNNL
    struct dnnl_side dn, dn_packed;
    bool dn_ok, dn_packed_ok;
#endif
};

static void fill(float *p, size_t n, uint64_t seed, float scale)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        p[i] = ((float)(s >> 40) / 16777216.0f * 2.0f - 1.0f) * scale;
    }
}

static void one(struct run *r, struct bufs *b, const struct shape *s, enum side side)
{
    const int m = (int)s->m, n = (int)s->n, k = (int)s->k;
    switch (side) {
    case S_WEFT_F32:
    case S_WEFT_BF16W:
    case S_WEFT_BF16:
        (void)r->K->set_compute(r->kc, side == S_WEFT_BF16 ? WEFT_DTYPE_BF16 : WEFT_DTYPE_F32);
        r->K->linear(r->kc, b->x, k, side == S_WEFT_F32 ? (const void *)b->w : b->wb,
                     side == S_WEFT_F32 ? WEFT_DTYPE_F32 : WEFT_DTYPE_BF16, NULL, b->y, n, m, n, k,
                     0);
        break;
    case S_OPENBLAS_F32:
        r->openblas.sgemm(101, 111, 112, m, n, k, 1.0f, b->x, k, b->w, k, 0.0f, b->y, n);
        break;
    case S_BLIS_F32:
        r->blis.sgemm(101, 111, 112, m, n, k, 1.0f, b->x, k, b->w, k, 0.0f, b->y, n);
        break;
    case S_OPENBLAS_SBGEMM:
        r->openblas.sbgemm(101, 111, 112, m, n, k, 1.0f, b->xb, k, b->wb, k, 0.0f, b->y, n);
        break;
#if WEFT_HAVE_DNNL
    case S_DNNL_F32:
        (void)dnnl_sgemm('N', 'T', m, n, k, 1.0f, b->x, k, b->w, k, 0.0f, b->y, n);
        break;
    case S_DNNL_BF16:
        dnnl_side_run(&b->dn);
        break;
    case S_DNNL_BF16_PACKED:
        dnnl_side_run(&b->dn_packed);
        break;
#else
    case S_DNNL_F32:
    case S_DNNL_BF16:
    case S_DNNL_BF16_PACKED:
        break;
#endif
    case N_SIDES: break;
    }
}

static bool side_ready(const struct run *r, const struct bufs *b, enum side side)
{
    if (!r->have[side])
        return false;
#if WEFT_HAVE_DNNL
    if (side == S_DNNL_BF16)
        return b->dn_ok;
    if (side == S_DNNL_BF16_PACKED)
        return b->dn_packed_ok;
#else
    (void)b;
#endif
    return true;
}

static void help(FILE *out)
{
    fprintf(out,
            "usage: weft bench gemm [--threads N] [--shapes M,N,K[:M,N,K...]] [--m M]\n"
            "                       [--rounds N] [--warmup N] [--quick] [--json]\n"
            "\n"
            "The CPU GEMMs side by side on FLUX.1-dev's linear shapes (y = x . w^T, w [n][k]\n"
            "as a checkpoint stores it): weft's own GEMM (f32 weights; bf16 weights with f32\n"
            "products and with bf16 products), OpenBLAS and BLIS sgemm, oneDNN's sgemm and bf16\n"
            "matmul (weights as stored and prepacked), OpenBLAS sbgemm where it exists. Every side\n"
            "on the same thread count, each dispatching from its own CPU detection; the sides\n"
            "take turns within each round. GFLOP/s as median [min-max] over the rounds.\n"
            "\n"
            "  --threads N   threads for every library (default: every core this process may\n"
            "                run on)\n"
            "  --m M         rows (tokens) for the default shapes (default 4608: a 1024x1024\n"
            "                image's 4096 + 512 text tokens)\n"
            "  --shapes S    M,N,K triples separated by ':' instead of the default shapes\n"
            "  (--quick: two small shapes, for a smoke test)\n");
    weft_bench_opt_help(out);
}

int main(int argc, char **argv)
{
    struct weft_bench bench;
    weft_bench_init(&bench, "weft bench gemm");
    struct run r = {0};
    int64_t m_rows = 4608;
    const char *shapes_arg = NULL;
    for (int i = 1; i < argc; i++) {
        const int c = weft_bench_opt(&bench, argc, argv, &i);
        if (c < 0)
            return 2;
        if (c > 0)
            continue;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            help(stdout);
            return 0;
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            r.threads = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--m") == 0 && i + 1 < argc) {
            m_rows = atoll(argv[++i]);
        } else if (strcmp(argv[i], "--shapes") == 0 && i + 1 < argc) {
            shapes_arg = argv[++i];
        } else {
            fprintf(stderr, "weft bench gemm: unknown option '%s' (see --help)\n", argv[i]);
            return 2;
        }
    }
    if (r.threads < 0 || r.threads > 1024 || m_rows < 1 || m_rows > 1 << 20) {
        fprintf(stderr, "weft bench gemm: --threads 0..1024, --m 1..1048576\n");
        return 2;
    }
    struct shape shapes[16];
    int n_shapes = 0;
    if (shapes_arg) {
        const char *p = shapes_arg;
        while (*p && n_shapes < 16) {
            long long m, n, k;
            int used = 0;
            if (sscanf(p, "%lld,%lld,%lld%n", &m, &n, &k, &used) != 3 || m < 1 || n < 1 ||
                k < 1 || m * n > (1ll << 31) || m * k > (1ll << 31) || n * k > (1ll << 31)) {
                fprintf(stderr, "weft bench gemm: --shapes wants M,N,K[:M,N,K...] (each "
                                "matrix under 2^31 elements), not '%s'\n", p);
                return 2;
            }
            shapes[n_shapes] = (struct shape){"", m, n, k};
            snprintf(shapes[n_shapes].name, sizeof(shapes[n_shapes].name), "%lldx%lldx%lld",
                     m, n, k);
            n_shapes++;
            p += used;
            if (*p == ':')
                p++;
        }
    } else if (bench.quick) { /* the same kinds of shape, small */
        const struct shape d[] = {{"quick 256->384", 96, 384, 256}, {"quick 1 row", 1, 500, 300}};
        for (; n_shapes < 2; n_shapes++)
            shapes[n_shapes] = d[n_shapes];
    } else {
        const struct shape d[] = {{"attn qkv/out 3072->3072", m_rows, 3072, 3072},
                                  {"mlp up 3072->12288", m_rows, 12288, 3072},
                                  {"mlp down 12288->3072", m_rows, 3072, 12288},
                                  {"modulation, 1 row 3072->18432", 1, 18432, 3072}};
        for (; n_shapes < 4; n_shapes++)
            shapes[n_shapes] = d[n_shapes];
    }
    if (weft_bench_begin(&bench) != 0)
        return 2;

    if (weft_kernels_cpu_create(r.threads, &r.K, &r.kc) != WEFT_OK)
        return 1;
    r.threads = weft_kernels_cpu_threads(r.kc);
    static const char *const ob[] = {"libopenblas.so.0", "libopenblas.so", NULL};
    static const char *const bl[] = {"libblis.so.4", "libblis.so", NULL};
    blas_open(&r.openblas, ob, r.threads, true);
    blas_open(&r.blis, bl, r.threads, false);
    r.have[S_WEFT_F32] = r.have[S_WEFT_BF16W] = true;
    r.have[S_WEFT_BF16] = r.K->set_compute(r.kc, WEFT_DTYPE_BF16) == WEFT_OK;
    (void)r.K->set_compute(r.kc, WEFT_DTYPE_F32);
    r.have[S_OPENBLAS_F32] = r.openblas.sgemm != NULL;
    r.have[S_OPENBLAS_SBGEMM] = r.openblas.sbgemm != NULL;
    r.have[S_BLIS_F32] = r.blis.sgemm != NULL;
    char what[256];
    r.K->describe(r.kc, what, sizeof(what));
    snprintf(r.about[S_WEFT_F32], sizeof(r.about[0]), "%s", what);
    snprintf(r.about[S_OPENBLAS_F32], sizeof(r.about[0]), "%s", r.openblas.about);
    snprintf(r.about[S_BLIS_F32], sizeof(r.about[0]), "%s", r.blis.about);
#if WEFT_HAVE_DNNL
    dnnl_engine_t eng = NULL;
    dnnl_stream_t stream = NULL;
    void (*omp_set)(int) = (void (*)(int))(uintptr_t)dlsym(RTLD_DEFAULT, "omp_set_num_threads");
    if (omp_set)
        omp_set(r.threads);
    const dnnl_version_t *v = dnnl_version();
    const bool dn = dnnl_ok(dnnl_engine_create(&eng, dnnl_cpu, 0), "engine") &&
                    dnnl_ok(dnnl_stream_create(&stream, eng, dnnl_stream_default_flags), "stream");
    r.have[S_DNNL_F32] = r.have[S_DNNL_BF16] = r.have[S_DNNL_BF16_PACKED] = dn;
    snprintf(r.about[S_DNNL_F32], sizeof(r.about[0]), "oneDNN %d.%d.%d, %s (its cpuid), OpenMP "
             "threads %s", v->major, v->minor, v->patch,
             dnnl_isa_name(dnnl_get_effective_cpu_isa()), omp_set ? "set" : "as the runtime's");
#else
    snprintf(r.about[S_DNNL_F32], sizeof(r.about[0]), "not built (no libdnnl-dev)");
#endif

    static struct weft_bench_series gf[16][N_SIDES];
    double err[16][N_SIDES];
    for (int si = 0; si < n_shapes; si++)
        for (int d = 0; d < N_SIDES; d++)
            err[si][d] = NAN;
    struct bufs *b = weft_calloc((size_t)n_shapes, sizeof(*b));
    if (!b)
        return 1;
    for (int si = 0; si < n_shapes; si++) {
        const struct shape *s = &shapes[si];
        b[si].nx = (size_t)(s->m * s->k), b[si].nw = (size_t)(s->n * s->k);
        b[si].ny = (size_t)(s->m * s->n);
        b[si].x = weft_big_alloc(b[si].nx * 4), b[si].w = weft_big_alloc(b[si].nw * 4);
        b[si].y = weft_big_alloc(b[si].ny * 4), b[si].ref = weft_big_alloc(b[si].ny * 4);
        b[si].xb = weft_big_alloc(b[si].nx * 2), b[si].wb = weft_big_alloc(b[si].nw * 2);
        if (!b[si].x || !b[si].w || !b[si].y || !b[si].ref || !b[si].xb || !b[si].wb) {
            fprintf(stderr, "weft bench gemm: out of memory for %s\n", s->name);
            return 1;
        }
        fill(b[si].x, b[si].nx, 1 + (uint64_t)si, 1.0f);
        fill(b[si].w, b[si].nw, 100 + (uint64_t)si, 1.0f / sqrtf((float)s->k));
        for (size_t i = 0; i < b[si].nw; i++) /* the same weights in both dtypes */
            b[si].w[i] = weft_bf16_to_f32(b[si].wb[i] = weft_f32_to_bf16(b[si].w[i]));
        for (size_t i = 0; i < b[si].nx; i++)
            b[si].xb[i] = weft_f32_to_bf16(b[si].x[i]);
#if WEFT_HAVE_DNNL
        if (dn) {
            b[si].dn_ok = dnnl_side_make(&b[si].dn, eng, stream, s, b[si].xb, b[si].wb, b[si].y,
                                         false);
            b[si].dn_packed_ok = dnnl_side_make(&b[si].dn_packed, eng, stream, s, b[si].xb,
                                                b[si].wb, b[si].y, true);
        }
#endif
        one(&r, &b[si], s, S_WEFT_F32);
        memcpy(b[si].ref, b[si].y, b[si].ny * 4);
    }

    for (int round = -bench.warmup; round < bench.rounds; round++) {
        weft_bench_round_note(&bench, round);
        for (int si = 0; si < n_shapes; si++) {
            const struct shape *s = &shapes[si];
            const double flops = 2.0 * (double)s->m * (double)s->n * (double)s->k;
            for (int d = 0; d < N_SIDES; d++) {
                if (!side_ready(&r, &b[si], (enum side)d))
                    continue;
                usleep(20000); /* the previous side's threads go idle */
                const double t0 = now_s();
                one(&r, &b[si], s, (enum side)d);
                const double t = now_s() - t0;
                if (round >= 0)
                    weft_bench_series_set(&gf[si][d], round, flops / t / 1e9);
                if (isnan(err[si][d]))
                    err[si][d] = rel_l2(b[si].y, b[si].ref, (int64_t)b[si].ny);
            }
        }
    }
    weft_bench_end(&bench);
    if (!bench.json) { /* the table's head: the context is complete (load after) only now */
        weft_bench_print_context(&bench, stdout);
        printf("# %d threads for every library\n", r.threads);
        printf("# weft:     %s\n# OpenBLAS: %s\n# BLIS:     %s\n# oneDNN:   %s\n",
               r.about[S_WEFT_F32], r.about[S_OPENBLAS_F32], r.about[S_BLIS_F32],
               r.about[S_DNNL_F32]);
    }

    cJSON *root = bench.json ? weft_bench_json_context(&bench) : NULL;
    cJSON *rows = root ? cJSON_AddArrayToObject(root, "rows") : NULL;
    if (root) {
        cJSON *cfg = cJSON_AddObjectToObject(root, "config");
        cJSON_AddNumberToObject(cfg, "threads", r.threads);
        cJSON_AddStringToObject(cfg, "weft", r.about[S_WEFT_F32]);
        cJSON_AddStringToObject(cfg, "openblas", r.about[S_OPENBLAS_F32]);
        cJSON_AddStringToObject(cfg, "blis", r.about[S_BLIS_F32]);
        cJSON_AddStringToObject(cfg, "onednn", r.about[S_DNNL_F32]);
    }
    for (int si = 0; si < n_shapes; si++) {
        const struct shape *s = &shapes[si];
        if (!bench.json)
            printf("\n%s (m %lld, n %lld, k %lld)\n  %-24s %-32s %-22s %s\n", s->name,
                   (long long)s->m, (long long)s->n, (long long)s->k, "side", "GFLOP/s",
                   "vs weft (same weights)", "rel L2 vs weft f32");
        for (int d = 0; d < N_SIDES; d++) {
            if (!side_ready(&r, &b[si], (enum side)d)) {
                if (!bench.json)
                    printf("  %-24s not available\n", side_name[d]);
                continue;
            }
            /* the weft side to compare with: f32 for f32 weights, bf16 products for bf16 */
            const int base = side_bf16[d] ? (r.have[S_WEFT_BF16] ? S_WEFT_BF16 : S_WEFT_BF16W)
                                          : S_WEFT_F32;
            struct weft_bench_cmp cmp;
            weft_bench_compare(&gf[si][d], &gf[si][base], &cmp);
            char f[96], ratio[64], c[96];
            weft_bench_fmt(&gf[si][d], 1.0, 1, f, sizeof(f));
            if (d == base)
                snprintf(c, sizeof(c), "-");
            else
                snprintf(c, sizeof(c), "%s %s", weft_bench_fmt_cmp(&cmp, 2, ratio, sizeof(ratio)),
                         weft_bench_verdict_str(&cmp, "faster", "slower"));
            if (!bench.json) {
                printf("  %-24s %-32s %-22s %.2g\n", side_name[d], f, c, err[si][d]);
                continue;
            }
            cJSON *row = cJSON_CreateObject();
            cJSON_AddStringToObject(row, "shape", s->name);
            cJSON_AddNumberToObject(row, "m", (double)s->m);
            cJSON_AddNumberToObject(row, "n", (double)s->n);
            cJSON_AddNumberToObject(row, "k", (double)s->k);
            cJSON_AddStringToObject(row, "side", side_name[d]);
            cJSON_AddItemToObject(row, "gflops", weft_bench_json_fig(&gf[si][d], 1.0));
            if (d != base) {
                cJSON_AddStringToObject(row, "against", side_name[base]);
                cJSON_AddItemToObject(row, "ratio", weft_bench_json_cmp(&cmp, "faster", "slower"));
            }
            cJSON_AddNumberToObject(row, "rel_l2_vs_weft_f32", err[si][d]);
            cJSON_AddItemToArray(rows, row);
        }
    }
    if (root) {
        char *text = cJSON_Print(root);
        printf("%s\n", text);
        free(text);
        cJSON_Delete(root);
    }
    for (int si = 0; si < n_shapes; si++) {
#if WEFT_HAVE_DNNL
        dnnl_side_free(&b[si].dn); /* zeroed when never made */
        dnnl_side_free(&b[si].dn_packed);
#endif
        weft_big_free(b[si].x, b[si].nx * 4), weft_big_free(b[si].w, b[si].nw * 4);
        weft_big_free(b[si].y, b[si].ny * 4), weft_big_free(b[si].ref, b[si].ny * 4);
        weft_big_free(b[si].xb, b[si].nx * 2), weft_big_free(b[si].wb, b[si].nw * 2);
    }
    weft_free(b);
#if WEFT_HAVE_DNNL
    if (stream)
        dnnl_stream_destroy(stream);
    if (eng)
        dnnl_engine_destroy(eng);
#endif
    weft_kernels_cpu_destroy(r.kc);
    return 0;
}
