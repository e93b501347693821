/* The CPU backend with device-like memory (kernels.h, weft_kernels_cpu_devmem_create): what a
 * GPU worker's code must get right, checked on every CI run without a GPU.
 *
 * A buffer is two things: a handle, the address model code holds, in a reservation of address
 * space that is never accessible (PROT_NONE), so that a direct host access faults; and the
 * memory behind it, which the ops reach after translating each pointer argument. Translation
 * checks the extent the op will touch against the buffer it falls in, so a host pointer, a
 * freed buffer or an overrun is a recorded error, as an illegal address is on a GPU. Handles are
 * never reused: a freed buffer stays inaccessible. Downloads land in host memory only at sync;
 * until then the host memory holds NaNs (0xff bytes), so code that reads a download before it
 * synchronises reads garbage here too. The kernels are the CPU backend's own, called on the
 * translated pointers: results are bit for bit the plain backend's. */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "kernels/cpu/cpu.h"

/* Address space for every handle of the process: reserved once, never accessible, never
 * reused. 256 GiB of handles is far more than a test or a small worker allocates. */
#define RESERVE_BYTES (256ull << 30)

static pthread_once_t reserve_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t reserve_mu = PTHREAD_MUTEX_INITIALIZER;
static char *reserve_base; /* NULL: the reservation failed */
static size_t reserve_next;
static struct sigaction prev_segv;

struct region {
    char *handle; /* what model code holds */
    size_t bytes; /* as allocated */
    char *real;   /* the memory behind it (weft_big_alloc) */
};

struct pending {
    void *host;
    void *copy; /* the bytes as they were when download was called */
    size_t bytes;
};

struct cpu_devmem {
    struct region *r; /* sorted by handle (handles only grow) */
    size_t n, cap;
    struct pending *p; /* downloads waiting for sync, in order */
    size_t np, pcap;
    weft_status_t status; /* the first error; sticky, as a GPU context's */
};

/* ---------------------------------------------------------------------------------------- */
/* The reservation, and a readable message when host code touches it                         */

static void put_str(const char *s)
{
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = write(STDERR_FILENO, s, n);
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

/* async-signal-safe: write() and plain stores only */
static void on_segv(int sig, siginfo_t *si, void *uctx)
{
    (void)uctx;
    const char *a = si->si_addr;
    if (reserve_base && a >= reserve_base && a < reserve_base + RESERVE_BYTES) {
        char hex[2 + 16 + 1] = "0x";
        uintptr_t v = (uintptr_t)a;
        for (int i = 0; i < 16; i++)
            hex[2 + i] = "0123456789abcdef"[(v >> (60 - 4 * i)) & 15];
        hex[18] = '\0';
        put_str("weft cpu-devmem: host code read or wrote device memory directly at ");
        put_str(hex);
        put_str(" (a buffer of a backend that is not host-visible is reached through upload, "
                "download and the kernels only)\n");
    }
    /* the previous disposition (the default: a core dump) takes the re-executed access */
    (void)sigaction(sig, &prev_segv, NULL);
}

static void reserve_init(void)
{
    void *p = mmap(NULL, RESERVE_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) {
        WEFT_LOG_ERROR("kernels", "cpu-devmem: cannot reserve %llu GiB of address space for "
                       "device handles", RESERVE_BYTES >> 30);
        return;
    }
    reserve_base = p;
    /* only where nobody else handles SIGSEGV (a sanitizer reports the access itself) */
    struct sigaction cur;
    if (sigaction(SIGSEGV, NULL, &cur) == 0 && !(cur.sa_flags & SA_SIGINFO) &&
        cur.sa_handler == SIG_DFL) {
        struct sigaction sa = {0};
        sa.sa_sigaction = on_segv;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        prev_segv = cur;
        (void)sigaction(SIGSEGV, &sa, NULL);
    }
}

/* A fresh, never used handle range of bytes (whole pages, one page of gap after). */
static char *reserve_take(size_t bytes)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t span = ((bytes ? bytes : 1) + page - 1) / page * page + page;
    pthread_mutex_lock(&reserve_mu);
    char *h = NULL;
    if (reserve_base && span <= RESERVE_BYTES - reserve_next) {
        h = reserve_base + reserve_next;
        reserve_next += span;
    }
    pthread_mutex_unlock(&reserve_mu);
    return h;
}

/* ---------------------------------------------------------------------------------------- */
/* Buffers and pointer translation                                                           */

static weft_status_t record(struct weft_kctx *c, weft_status_t st)
{
    if (c->devmem->status == WEFT_OK)
        c->devmem->status = st;
    return st;
}

/* The region holding address p, or NULL. */
static struct region *find(const struct cpu_devmem *dm, const void *p)
{
    const char *a = p;
    size_t lo = 0, hi = dm->n;
    while (lo < hi) { /* first region whose handle is above a */
        size_t mid = (lo + hi) / 2;
        if (dm->r[mid].handle <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    struct region *r = &dm->r[lo - 1];
    return a < r->handle + (r->bytes ? r->bytes : 1) ? r : NULL;
}

/* Whether [p, p + bytes) overlaps any buffer (a device pointer given as host memory). */
static bool any_overlap(const struct cpu_devmem *dm, const void *p, size_t bytes)
{
    const char *a = p;
    for (size_t i = 0; i < dm->n; i++)
        if (a < dm->r[i].handle + dm->r[i].bytes && dm->r[i].handle < a + bytes)
            return true;
    return false;
}

/* One op's pointer checks: each argument translated, the first fault logged and recorded. */
struct call {
    struct weft_kctx *c;
    const char *op;
    bool bad;
};

static void fault(struct call *k, const char *arg, const void *p, int64_t bytes, const char *why)
{
    if (!k->bad && k->c->devmem->status == WEFT_OK)
        WEFT_LOG_ERROR("kernels", "cpu-devmem: %s: argument %s (%p, %lld bytes) %s", k->op, arg,
                       p, (long long)bytes, why);
    record(k->c, WEFT_ERR_INTERNAL);
    k->bad = true;
}

/* The memory behind device pointer p, which the op reads or writes for bytes (<= 0: it touches
 * nothing, any pointer is fine). NULL p is allowed where the op takes an optional argument. */
static void *at(struct call *k, const void *p, int64_t bytes, const char *arg, bool optional)
{
    if (!p) {
        if (!optional && bytes > 0)
            fault(k, arg, p, bytes, "is NULL");
        return NULL;
    }
    const struct region *r = find(k->c->devmem, p);
    if (!r) {
        if (bytes > 0)
            fault(k, arg, p, bytes, "is not in a buffer of this backend (host memory, or a "
                  "freed buffer?)");
        return (void *)p;
    }
    const size_t off = (size_t)((const char *)p - r->handle);
    if (bytes > 0 && (size_t)bytes > r->bytes - off)
        fault(k, arg, p, bytes, "runs past the end of its buffer");
    return r->real + off;
}

/* Bytes an op touches in rows x cols elements of size esz with row stride ld. */
static int64_t span(int64_t rows, int64_t ld, int64_t cols, size_t esz)
{
    return rows <= 0 || cols <= 0 ? 0 : ((rows - 1) * ld + cols) * (int64_t)esz;
}

/* An op runs only when every pointer checked out and the context has no error yet. */
static bool go(const struct call *k)
{
    return !k->bad && k->c->devmem->status == WEFT_OK;
}

static weft_status_t buf_alloc(struct weft_kctx *c, size_t bytes, void **ptr_p)
{
    struct cpu_devmem *dm = c->devmem;
    if (dm->n == dm->cap) {
        size_t cap = dm->cap ? 2 * dm->cap : 64;
        struct region *nr = weft_realloc(dm->r, cap * sizeof(*nr));
        if (!nr)
            return WEFT_ERR_NOMEM;
        dm->r = nr;
        dm->cap = cap;
    }
    char *h = reserve_take(bytes);
    char *real = weft_big_alloc(bytes ? bytes : 1);
    if (!h || !real) {
        weft_big_free(real, bytes ? bytes : 1);
        return WEFT_ERR_NOMEM;
    }
    /* handles only grow, within one process-wide reservation: appending keeps the order */
    size_t i = dm->n;
    while (i > 0 && dm->r[i - 1].handle > h) {
        dm->r[i] = dm->r[i - 1];
        i--;
    }
    dm->r[i] = (struct region){h, bytes, real};
    dm->n++;
    *ptr_p = h;
    return WEFT_OK;
}

static void buf_free(struct weft_kctx *c, void *ptr, size_t bytes)
{
    struct cpu_devmem *dm = c->devmem;
    if (!ptr)
        return;
    struct region *r = find(dm, ptr);
    if (!r || r->handle != ptr || r->bytes != bytes) {
        WEFT_LOG_ERROR("kernels", "cpu-devmem: buf_free(%p, %zu): %s", ptr, bytes,
                       !r || r->handle != ptr ? "not a buffer of this backend"
                                              : "not the size it was allocated with");
        record(c, WEFT_ERR_INTERNAL);
        return;
    }
    weft_big_free(r->real, r->bytes ? r->bytes : 1);
    const size_t i = (size_t)(r - dm->r);
    memmove(&dm->r[i], &dm->r[i + 1], (dm->n - i - 1) * sizeof(*dm->r));
    dm->n--;
}

/* Host memory a download has not yet filled. */
static bool pending_overlap(const struct cpu_devmem *dm, const void *host, size_t bytes)
{
    const char *a = host;
    for (size_t i = 0; i < dm->np; i++) {
        const char *h = dm->p[i].host;
        if (a < h + dm->p[i].bytes && h < a + bytes)
            return true;
    }
    return false;
}

static void upload(struct weft_kctx *c, void *dst, const void *host, size_t bytes)
{
    struct call k = {c, "upload", false};
    void *d = at(&k, dst, (int64_t)bytes, "dst", false);
    if (host && any_overlap(c->devmem, host, bytes))
        fault(&k, "host", host, (int64_t)bytes, "is device memory, not host memory");
    else if (!host && bytes)
        fault(&k, "host", host, (int64_t)bytes, "is NULL");
    else if (pending_overlap(c->devmem, host, bytes))
        fault(&k, "host", host, (int64_t)bytes,
              "is host memory a download has not filled yet (sync first)");
    if (go(&k) && bytes)
        memcpy(d, host, bytes);
}

static void download(struct weft_kctx *c, void *host, const void *src, size_t bytes)
{
    struct call k = {c, "download", false};
    const void *s = at(&k, src, (int64_t)bytes, "src", false);
    if (host && any_overlap(c->devmem, host, bytes))
        fault(&k, "host", host, (int64_t)bytes, "is device memory, not host memory");
    else if (!host && bytes)
        fault(&k, "host", host, (int64_t)bytes, "is NULL");
    if (!go(&k) || !bytes)
        return;
    struct cpu_devmem *dm = c->devmem;
    if (dm->np == dm->pcap) {
        size_t cap = dm->pcap ? 2 * dm->pcap : 16;
        struct pending *np = weft_realloc(dm->p, cap * sizeof(*np));
        if (!np) {
            record(c, WEFT_ERR_NOMEM);
            return;
        }
        dm->p = np;
        dm->pcap = cap;
    }
    void *copy = weft_malloc(bytes);
    if (!copy) {
        WEFT_LOG_ERROR("kernels", "cpu-devmem: download: out of memory for %zu bytes", bytes);
        record(c, WEFT_ERR_NOMEM);
        return;
    }
    memcpy(copy, s, bytes);
    memset(host, 0xff, bytes); /* NaN until sync */
    dm->p[dm->np++] = (struct pending){host, copy, bytes};
}

static weft_status_t sync_all(struct weft_kctx *c)
{
    struct cpu_devmem *dm = c->devmem;
    for (size_t i = 0; i < dm->np; i++) {
        memcpy(dm->p[i].host, dm->p[i].copy, dm->p[i].bytes);
        weft_free(dm->p[i].copy);
    }
    dm->np = 0;
    return dm->status;
}

static weft_status_t status(struct weft_kctx *c)
{
    return c->devmem->status;
}

void cpu_devmem_destroy(struct weft_kctx *c)
{
    struct cpu_devmem *dm = c->devmem;
    if (!dm)
        return;
    for (size_t i = 0; i < dm->np; i++)
        weft_free(dm->p[i].copy);
    if (dm->n)
        WEFT_LOG_DEBUG("kernels", "cpu-devmem: %zu buffers still allocated at destroy", dm->n);
    for (size_t i = 0; i < dm->n; i++)
        weft_big_free(dm->r[i].real, dm->r[i].bytes ? dm->r[i].bytes : 1);
    weft_free(dm->p);
    weft_free(dm->r);
    weft_free(dm);
    c->devmem = NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* The ops: translate, then the CPU backend's own                                            */

#define F 4 /* sizeof(float) */

static void copy_rows(struct weft_kctx *c, float *dst, int64_t ld_dst, const float *src,
                      int64_t ld_src, int64_t rows, int64_t cols)
{
    struct call k = {c, "copy_rows", false};
    float *d = at(&k, dst, span(rows, ld_dst, cols, F), "dst", false);
    const float *s = at(&k, src, span(rows, ld_src, cols, F), "src", false);
    if (go(&k))
        cpu_host_kernels.copy_rows(c, d, ld_dst, s, ld_src, rows, cols);
}

static void fill(struct weft_kctx *c, float *dst, float value, int64_t n)
{
    struct call k = {c, "fill", false};
    float *d = at(&k, dst, n * F, "dst", false);
    if (go(&k))
        cpu_host_kernels.fill(c, d, value, n);
}

static void describe(const struct weft_kctx *c, char *buf, size_t len)
{
    char inner[200];
    weft_kernels_cpu_describe(c, inner, sizeof(inner));
    snprintf(buf, len, "cpu-devmem (device-like memory, checked), %s", inner);
}

static void linear(struct weft_kctx *c, const float *x, int64_t ldx, const void *w,
                   enum weft_dtype wdt, const float *b, float *y, int64_t ldy, int64_t m,
                   int64_t n, int64_t kk, int accumulate)
{
    struct call k = {c, "linear", false};
    const float *X = at(&k, x, span(m, ldx, kk, F), "x", false);
    const void *W = at(&k, w, m > 0 ? n * kk * (int64_t)weft_dtype_size(wdt) : 0, "w", false);
    const float *B = at(&k, b, m > 0 ? n * F : 0, "b", true);
    float *Y = at(&k, y, span(m, ldy, n, F), "y", false);
    if (go(&k))
        cpu_host_kernels.linear(c, X, ldx, W, wdt, B, Y, ldy, m, n, kk, accumulate);
}

static void linear_pack(struct weft_kctx *c, const void *w, enum weft_dtype wdt, void *packed,
                        int64_t n, int64_t kk)
{
    struct call k = {c, "linear_pack", false};
    const void *W = at(&k, w, n * kk * (int64_t)weft_dtype_size(wdt), "w", false);
    void *P = at(&k, packed, (int64_t)cpu_linear_pack_bytes(c, wdt, n, kk), "packed", false);
    if (go(&k))
        cpu_host_kernels.linear_pack(c, W, wdt, P, n, kk);
}

static void linear_packed(struct weft_kctx *c, const float *x, int64_t ldx, const void *packed,
                          const float *b, float *y, int64_t ldy, int64_t m, int64_t n,
                          int64_t kk, int accumulate)
{
    struct call k = {c, "linear_packed", false};
    const float *X = at(&k, x, span(m, ldx, kk, F), "x", false);
    const int64_t pb = (int64_t)cpu_linear_pack_bytes(c, WEFT_DTYPE_BF16, n, kk);
    const void *P = at(&k, packed, m > 0 ? pb : 0, "packed", false);
    const float *B = at(&k, b, m > 0 ? n * F : 0, "b", true);
    float *Y = at(&k, y, span(m, ldy, n, F), "y", false);
    if (go(&k))
        cpu_host_kernels.linear_packed(c, X, ldx, P, B, Y, ldy, m, n, kk, accumulate);
}

static void layernorm(struct weft_kctx *c, const float *x, int64_t ldx, float *y, int64_t ldy,
                      int64_t rows, int64_t d, float eps)
{
    struct call k = {c, "layernorm", false};
    const float *X = at(&k, x, span(rows, ldx, d, F), "x", false);
    float *Y = at(&k, y, span(rows, ldy, d, F), "y", false);
    if (go(&k))
        cpu_host_kernels.layernorm(c, X, ldx, Y, ldy, rows, d, eps);
}

static void rmsnorm(struct weft_kctx *c, float *x, int64_t ld, const float *w, int64_t rows,
                    int64_t heads, int64_t d, float eps)
{
    struct call k = {c, "rmsnorm", false};
    float *X = at(&k, x, span(rows, ld, heads * d, F), "x", false);
    const float *W = at(&k, w, rows > 0 ? d * F : 0, "w", false);
    if (go(&k))
        cpu_host_kernels.rmsnorm(c, X, ld, W, rows, heads, d, eps);
}

static void rope(struct weft_kctx *c, float *x, int64_t ld, const float *cs, const float *sn,
                 int64_t rows, int64_t heads, int64_t d)
{
    struct call k = {c, "rope", false};
    float *X = at(&k, x, span(rows, ld, heads * d, F), "x", false);
    const float *C = at(&k, cs, span(rows, d, d, F), "cos", false);
    const float *S = at(&k, sn, span(rows, d, d, F), "sin", false);
    if (go(&k))
        cpu_host_kernels.rope(c, X, ld, C, S, rows, heads, d);
}

static void attention(struct weft_kctx *c, const float *q, int64_t ldq, const float *kx,
                      int64_t ldk, const float *v, int64_t ldv, float *out, int64_t ldo,
                      float *lse, int64_t sq, int64_t sk, int64_t heads, int64_t d, float scale)
{
    struct call k = {c, "attention", false};
    const int64_t w = heads * d, kv = sq > 0 ? sk : 0;
    const float *Q = at(&k, q, span(sq, ldq, w, F), "q", false);
    const float *K = at(&k, kx, span(kv, ldk, w, F), "k", false);
    const float *V = at(&k, v, span(kv, ldv, w, F), "v", false);
    float *O = at(&k, out, span(sq, ldo, w, F), "out", false);
    float *L = at(&k, lse, sq * heads * F, "lse", true);
    if (go(&k))
        cpu_host_kernels.attention(c, Q, ldq, K, ldk, V, ldv, O, ldo, L, sq, sk, heads, d,
                                   scale);
}

static void attention_masked(struct weft_kctx *c, const float *q, int64_t ldq, const float *kx,
                             int64_t ldk, const float *v, int64_t ldv, float *out, int64_t ldo,
                             int64_t sq, int64_t sk, int64_t heads, int64_t d, float scale,
                             const float *bias, int causal)
{
    struct call k = {c, "attention_masked", false};
    const int64_t w = heads * d, kv = sq > 0 ? sk : 0;
    const float *Q = at(&k, q, span(sq, ldq, w, F), "q", false);
    const float *K = at(&k, kx, span(kv, ldk, w, F), "k", false);
    const float *V = at(&k, v, span(kv, ldv, w, F), "v", false);
    float *O = at(&k, out, span(sq, ldo, w, F), "out", false);
    const float *Bi = at(&k, bias, heads * sq * kv * F, "bias", true);
    if (go(&k))
        cpu_host_kernels.attention_masked(c, Q, ldq, K, ldk, V, ldv, O, ldo, sq, sk, heads, d,
                                          scale, Bi, causal);
}

static void attn_merge(struct weft_kctx *c, float *out, int64_t ldo, float *lse,
                       const float *out_i, int64_t ldi, const float *lse_i, int64_t rows,
                       int64_t heads, int64_t d)
{
    struct call k = {c, "attn_merge", false};
    float *O = at(&k, out, span(rows, ldo, heads * d, F), "out", false);
    float *L = at(&k, lse, rows * heads * F, "lse", false);
    const float *Oi = at(&k, out_i, span(rows, ldi, heads * d, F), "out_i", false);
    const float *Li = at(&k, lse_i, rows * heads * F, "lse_i", false);
    if (go(&k))
        cpu_host_kernels.attn_merge(c, O, ldo, L, Oi, ldi, Li, rows, heads, d);
}

static void gelu_tanh(struct weft_kctx *c, const float *x, int64_t ldx, float *y, int64_t ldy,
                      int64_t rows, int64_t n)
{
    struct call k = {c, "gelu_tanh", false};
    const float *X = at(&k, x, span(rows, ldx, n, F), "x", false);
    float *Y = at(&k, y, span(rows, ldy, n, F), "y", false);
    if (go(&k))
        cpu_host_kernels.gelu_tanh(c, X, ldx, Y, ldy, rows, n);
}

static void silu(struct weft_kctx *c, const float *x, float *y, int64_t n)
{
    struct call k = {c, "silu", false};
    const float *X = at(&k, x, n * F, "x", false);
    float *Y = at(&k, y, n * F, "y", false);
    if (go(&k))
        cpu_host_kernels.silu(c, X, Y, n);
}

static void quick_gelu(struct weft_kctx *c, const float *x, int64_t ldx, float *y, int64_t ldy,
                       int64_t rows, int64_t n)
{
    struct call k = {c, "quick_gelu", false};
    const float *X = at(&k, x, span(rows, ldx, n, F), "x", false);
    float *Y = at(&k, y, span(rows, ldy, n, F), "y", false);
    if (go(&k))
        cpu_host_kernels.quick_gelu(c, X, ldx, Y, ldy, rows, n);
}

static void mul(struct weft_kctx *c, float *y, int64_t ldy, const float *x, int64_t ldx,
                int64_t rows, int64_t n)
{
    struct call k = {c, "mul", false};
    float *Y = at(&k, y, span(rows, ldy, n, F), "y", false);
    const float *X = at(&k, x, span(rows, ldx, n, F), "x", false);
    if (go(&k))
        cpu_host_kernels.mul(c, Y, ldy, X, ldx, rows, n);
}

static void swiglu(struct weft_kctx *c, const float *x, int64_t ldx, float *y, int64_t ldy,
                   int64_t rows, int64_t n)
{
    struct call k = {c, "swiglu", false};
    const float *X = at(&k, x, span(rows, ldx, 2 * n, F), "x", false);
    float *Y = at(&k, y, span(rows, ldy, n, F), "y", false);
    if (go(&k))
        cpu_host_kernels.swiglu(c, X, ldx, Y, ldy, rows, n);
}

static void scale_shift(struct weft_kctx *c, const float *x, int64_t ldx, const float *w,
                        const float *b, float *y, int64_t ldy, int64_t rows, int64_t d)
{
    struct call k = {c, "scale_shift", false};
    const float *X = at(&k, x, span(rows, ldx, d, F), "x", false);
    const float *W = at(&k, w, rows > 0 ? d * F : 0, "w", false);
    const float *B = at(&k, b, rows > 0 ? d * F : 0, "b", true);
    float *Y = at(&k, y, span(rows, ldy, d, F), "y", false);
    if (go(&k))
        cpu_host_kernels.scale_shift(c, X, ldx, W, B, Y, ldy, rows, d);
}

static void modulate(struct weft_kctx *c, const float *x, int64_t ldx, const float *shift,
                     const float *scale, float *y, int64_t ldy, int64_t rows, int64_t d)
{
    struct call k = {c, "modulate", false};
    const float *X = at(&k, x, span(rows, ldx, d, F), "x", false);
    const float *Sh = at(&k, shift, rows > 0 ? d * F : 0, "shift", false);
    const float *Sc = at(&k, scale, rows > 0 ? d * F : 0, "scale", false);
    float *Y = at(&k, y, span(rows, ldy, d, F), "y", false);
    if (go(&k))
        cpu_host_kernels.modulate(c, X, ldx, Sh, Sc, Y, ldy, rows, d);
}

static void gated_add(struct weft_kctx *c, float *x, int64_t ldx, const float *gate,
                      const float *y, int64_t ldy, int64_t rows, int64_t d)
{
    struct call k = {c, "gated_add", false};
    float *X = at(&k, x, span(rows, ldx, d, F), "x", false);
    const float *G = at(&k, gate, rows > 0 ? d * F : 0, "gate", true);
    const float *Y = at(&k, y, span(rows, ldy, d, F), "y", false);
    if (go(&k))
        cpu_host_kernels.gated_add(c, X, ldx, G, Y, ldy, rows, d);
}

static void timestep_embed(struct weft_kctx *c, const float *t, int64_t n, float *out,
                           int64_t dim, float scale)
{
    struct call k = {c, "timestep_embed", false};
    const float *T = at(&k, t, n * F, "t", false);
    float *O = at(&k, out, span(n, dim, dim, F), "out", false);
    if (go(&k))
        cpu_host_kernels.timestep_embed(c, T, n, O, dim, scale);
}

static void conv2d_pack(struct weft_kctx *c, const void *w, enum weft_dtype wdt, void *packed,
                        int64_t cout, int64_t cin, int64_t kk)
{
    struct call k = {c, "conv2d_pack", false};
    const int64_t bytes = cout * cin * kk * kk * (int64_t)weft_dtype_size(wdt);
    const void *W = at(&k, w, bytes, "w", false);
    void *P = at(&k, packed, bytes, "packed", false);
    if (go(&k))
        cpu_host_kernels.conv2d_pack(c, W, wdt, P, cout, cin, kk);
}

static void conv2d(struct weft_kctx *c, const float *x, const void *wt, enum weft_dtype wdt,
                   const float *b, float *y, int64_t h, int64_t w, int64_t cin, int64_t cout,
                   int64_t kk, int accumulate, void *ws)
{
    struct call k = {c, "conv2d", false};
    const int64_t px = h * w;
    const size_t wsb = cpu_host_kernels.conv2d_workspace(c, h, w, cin, cout, kk);
    const float *X = at(&k, x, px * cin * F, "x", false);
    const void *W = at(&k, wt, px > 0 ? cout * cin * kk * kk * (int64_t)weft_dtype_size(wdt) : 0,
                       "w", false);
    const float *B = at(&k, b, px > 0 ? cout * F : 0, "b", true);
    float *Y = at(&k, y, px * cout * F, "y", false);
    void *WS = at(&k, ws, (int64_t)wsb, "ws", wsb == 0);
    if (go(&k))
        cpu_host_kernels.conv2d(c, X, W, wdt, B, Y, h, w, cin, cout, kk, accumulate, WS);
}

static void groupnorm(struct weft_kctx *c, const float *x, float *y, const float *gamma,
                      const float *beta, int64_t n, int64_t ch, int64_t groups, float eps,
                      int silu_)
{
    struct call k = {c, "groupnorm", false};
    const float *X = at(&k, x, n * ch * F, "x", false);
    float *Y = at(&k, y, n * ch * F, "y", false);
    const float *G = at(&k, gamma, n > 0 ? ch * F : 0, "gamma", false);
    const float *Bt = at(&k, beta, n > 0 ? ch * F : 0, "beta", false);
    if (go(&k))
        cpu_host_kernels.groupnorm(c, X, Y, G, Bt, n, ch, groups, eps, silu_);
}

static void upsample2x(struct weft_kctx *c, const float *x, float *y, int64_t h, int64_t w,
                       int64_t ch)
{
    struct call k = {c, "upsample2x", false};
    const float *X = at(&k, x, h * w * ch * F, "x", false);
    float *Y = at(&k, y, 4 * h * w * ch * F, "y", false);
    if (go(&k))
        cpu_host_kernels.upsample2x(c, X, Y, h, w, ch);
}

static const struct weft_kernels devmem_kernels = {
    .name = "cpu-devmem",
    .host_visible = 0,
    .destroy = weft_kernels_cpu_destroy,
    .buf_alloc = buf_alloc,
    .buf_free = buf_free,
    .upload = upload,
    .download = download,
    .copy_rows = copy_rows,
    .fill = fill,
    .sync = sync_all,
    .status = status,
    .set_compute = weft_kernels_cpu_set_compute,
    .describe = describe,
    .linear = linear,
    .linear_pack_bytes = cpu_linear_pack_bytes,
    .linear_pack = linear_pack,
    .linear_packed = linear_packed,
    .layernorm = layernorm,
    .rmsnorm = rmsnorm,
    .rope = rope,
    .attention = attention,
    .attention_masked = attention_masked,
    .attn_merge = attn_merge,
    .gelu_tanh = gelu_tanh,
    .silu = silu,
    .quick_gelu = quick_gelu,
    .mul = mul,
    .swiglu = swiglu,
    .scale_shift = scale_shift,
    .modulate = modulate,
    .gated_add = gated_add,
    .timestep_embed = timestep_embed,
    .conv2d_pack = conv2d_pack,
    .conv2d_workspace = cpu_conv2d_workspace,
    .conv2d = conv2d,
    .groupnorm = groupnorm,
    .upsample2x = upsample2x,
};

weft_status_t weft_kernels_cpu_devmem_create(int threads, const struct weft_kernels **ops_p,
                                             struct weft_kctx **ctx_p)
{
    pthread_once(&reserve_once, reserve_init);
    if (!reserve_base)
        return WEFT_ERR_NOMEM;
    const struct weft_kernels *plain;
    struct weft_kctx *c;
    weft_status_t st = weft_kernels_cpu_create(threads, &plain, &c);
    if (st != WEFT_OK)
        return st;
    if (!(c->devmem = weft_calloc(1, sizeof(*c->devmem)))) {
        weft_kernels_cpu_destroy(c);
        return WEFT_ERR_NOMEM;
    }
    *ops_p = &devmem_kernels;
    *ctx_p = c;
    return WEFT_OK;
}

int weft_kernels_is_cpu(const struct weft_kernels *ops)
{
    return ops == &cpu_host_kernels || ops == &devmem_kernels;
}
