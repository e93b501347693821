/* Context-parallel attention (see cp_attention.h). */
#include "worker/cp_attention.h"

#include <string.h>

#include "common/alloc.h"
#include "common/log.h"

struct weft_cp_attn {
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    const struct weft_par_comm *comm;
    struct weft_cp_layout cp;
    int U, R, u, r, c;
    int64_t heads, d;
    int64_t *rows;     /* [W] rows of each context-parallel rank */
    int64_t *h0, *hn;  /* [U] Ulysses head split */
    int64_t *grp_rows; /* [R] rows of the Ulysses group at each ring index */
    int64_t *grp_off;  /* [U] row offset of member u' in my Ulysses group's sequence */
    size_t *scount, *rcount, *gcount; /* [max(U, R)] */
    size_t bytes;
    void *base;
    float *send, *recv, *qg, *kg, *vg, *og, *kall, *vall, *slot[2], *otmp, *lse, *lse_tmp;
};

weft_status_t weft_cp_attn_create(const struct weft_kernels *K, struct weft_kctx *kc,
                                  const struct weft_par_comm *comm,
                                  const struct weft_cp_layout *cp, int ring_rank,
                                  int ulysses_rank, int64_t heads, int64_t d,
                                  const int64_t *rows, struct weft_cp_attn **attn_p)
{
    struct weft_cp_attn *a = weft_calloc(1, sizeof(*a));
    if (!a)
        return WEFT_ERR_NOMEM;
    a->K = K, a->kc = kc, a->comm = comm, a->cp = *cp;
    a->U = cp->ulysses, a->R = cp->ring, a->u = ulysses_rank, a->r = ring_rank;
    a->c = ring_rank * a->U + ulysses_rank;
    a->heads = heads, a->d = d;
    const int W = a->U * a->R, N = a->U > a->R ? a->U : a->R;
    a->rows = weft_calloc((size_t)W, sizeof(*a->rows));
    a->h0 = weft_calloc((size_t)a->U, sizeof(*a->h0));
    a->hn = weft_calloc((size_t)a->U, sizeof(*a->hn));
    a->grp_rows = weft_calloc((size_t)a->R, sizeof(*a->grp_rows));
    a->grp_off = weft_calloc((size_t)a->U, sizeof(*a->grp_off));
    a->scount = weft_calloc((size_t)N, sizeof(size_t));
    a->rcount = weft_calloc((size_t)N, sizeof(size_t));
    a->gcount = weft_calloc((size_t)N, sizeof(size_t));
    if (!a->rows || !a->h0 || !a->hn || !a->grp_rows || !a->grp_off || !a->scount ||
        !a->rcount || !a->gcount) {
        weft_cp_attn_destroy(a);
        return WEFT_ERR_NOMEM;
    }
    memcpy(a->rows, rows, (size_t)W * sizeof(*rows));
    for (int i = 0; i < a->U; i++)
        weft_cp_chunk(heads, a->U, i, &a->h0[i], &a->hn[i]);
    for (int rr = 0; rr < a->R; rr++) {
        for (int i = 0; i < a->U; i++) {
            if (rr == a->r)
                a->grp_off[i] = a->grp_rows[rr];
            a->grp_rows[rr] += rows[rr * a->U + i];
        }
    }
    int64_t sizes[WEFT_CP_ATTN_BUFFERS];
    a->bytes = weft_cp_attn_sizes(cp, ring_rank, ulysses_rank, heads, d, rows, sizes);
    float **ptrs[] = {&a->send, &a->recv, &a->qg,      &a->kg,   &a->vg,
                      &a->og,   &a->kall, &a->vall,    &a->slot[0], &a->slot[1],
                      &a->otmp, &a->lse,  &a->lse_tmp};
    _Static_assert(WEFT_CP_ATTN_BUFFERS == sizeof(ptrs) / sizeof(ptrs[0]), "sizes");
    weft_status_t st = K->buf_alloc(kc, a->bytes, &a->base);
    if (st != WEFT_OK) {
        a->base = NULL;
        weft_cp_attn_destroy(a);
        return st;
    }
    float *p = a->base;
    for (size_t i = 0; i < WEFT_CP_ATTN_BUFFERS; i++) {
        *ptrs[i] = sizes[i] ? p : NULL;
        p += ((size_t)sizes[i] + 15) / 16 * 16;
    }
    *attn_p = a;
    return WEFT_OK;
}

void weft_cp_attn_destroy(struct weft_cp_attn *a)
{
    if (!a)
        return;
    if (a->base)
        a->K->buf_free(a->kc, a->base, a->bytes);
    weft_free(a->rows), weft_free(a->h0), weft_free(a->hn), weft_free(a->grp_rows);
    weft_free(a->grp_off), weft_free(a->scount), weft_free(a->rcount), weft_free(a->gcount);
    weft_free(a);
}

size_t weft_cp_attn_bytes(const struct weft_cp_attn *a)
{
    return a->bytes;
}

/* Ulysses, forward: every rank sends each peer its rows for the peer's heads; I end up with my
 * heads for the whole group's rows, in member (sequence) order, in qg/kg/vg. */
static weft_status_t ulysses_scatter(struct weft_cp_attn *a, const float *q, const float *k,
                                     const float *v, int64_t ld)
{
    const struct weft_kernels *K = a->K;
    const int64_t S = a->rows[a->c], d = a->d, hme = a->hn[a->u];
    const float *src[3] = {q, k, v};
    float *dst[3] = {a->qg, a->kg, a->vg};
    size_t off = 0;
    for (int i = 0; i < a->U; i++) {
        const int64_t w = a->hn[i] * d;
        for (int t = 0; t < 3; t++)
            K->copy_rows(a->kc, a->send + off + (size_t)(t * S * w), w, src[t] + a->h0[i] * d, ld,
                         S, w);
        a->scount[i] = (size_t)(3 * S * w);
        a->rcount[i] = (size_t)(3 * a->rows[a->r * a->U + i] * hme * d);
        off += a->scount[i];
    }
    weft_status_t st = K->sync(a->kc);
    if (st == WEFT_OK)
        st = a->comm->alltoallv(a->comm->ulysses, a->send, a->scount, a->recv, a->rcount);
    if (st != WEFT_OK)
        return st;
    off = 0;
    for (int i = 0; i < a->U; i++) {
        const int64_t n = a->rows[a->r * a->U + i], w = hme * d;
        for (int t = 0; t < 3; t++)
            K->copy_rows(a->kc, dst[t] + a->grp_off[i] * w, w, a->recv + off + (size_t)(t * n * w),
                         w, n, w);
        off += a->rcount[i];
    }
    return WEFT_OK;
}

/* Ulysses, back: each peer's rows of my heads return to it; I get my rows for every head. */
static weft_status_t ulysses_gather(struct weft_cp_attn *a, float *out, int64_t ldo)
{
    const struct weft_kernels *K = a->K;
    const int64_t S = a->rows[a->c], d = a->d, hme = a->hn[a->u];
    for (int i = 0; i < a->U; i++) {
        a->scount[i] = (size_t)(a->rows[a->r * a->U + i] * hme * d);
        a->rcount[i] = (size_t)(S * a->hn[i] * d);
    }
    weft_status_t st = K->sync(a->kc);
    if (st == WEFT_OK) /* og's member blocks are already contiguous and in order */
        st = a->comm->alltoallv(a->comm->ulysses, a->og, a->scount, a->recv, a->rcount);
    if (st != WEFT_OK)
        return st;
    size_t off = 0;
    for (int i = 0; i < a->U; i++) {
        const int64_t w = a->hn[i] * d;
        K->copy_rows(a->kc, out + a->h0[i] * d, ldo, a->recv + off, w, S, w);
        off += a->rcount[i];
    }
    return WEFT_OK;
}

/* Ring by all-gather: every ring member's K and V, then one attention over all of them. */
static weft_status_t ring_gather(struct weft_cp_attn *a, const float *q, const float *k,
                                 const float *v, int64_t ldg, float *o, int64_t ldo,
                                 float scale)
{
    const struct weft_kernels *K = a->K;
    const int64_t Sg = a->grp_rows[a->r], d = a->d, h = a->hn[a->u], w = h * d;
    if (k != a->kg) { /* pack strided K/V (no Ulysses step before) */
        K->copy_rows(a->kc, a->kg, w, k, ldg, Sg, w);
        K->copy_rows(a->kc, a->vg, w, v, ldg, Sg, w);
    }
    int64_t total = 0;
    for (int rr = 0; rr < a->R; rr++) {
        a->gcount[rr] = (size_t)(a->grp_rows[rr] * w);
        total += a->grp_rows[rr];
    }
    weft_status_t st = K->sync(a->kc);
    if (st == WEFT_OK)
        st = a->comm->allgatherv(a->comm->ring, a->kg, a->kall, a->gcount);
    if (st == WEFT_OK)
        st = a->comm->allgatherv(a->comm->ring, a->vg, a->vall, a->gcount);
    if (st != WEFT_OK)
        return st;
    K->attention(a->kc, q, ldg, a->kall, w, a->vall, w, o, ldo, NULL, Sg, total, h, d, scale);
    return WEFT_OK;
}

/* Ring by passing K/V: attend to the chunk held while the next one travels, merge by LSE. Only
 * two chunks are resident: the one held and the one arriving. */
static weft_status_t ring_p2p(struct weft_cp_attn *a, const float *q, const float *k,
                              const float *v, int64_t ldg, float *o, int64_t ldo, float scale)
{
    const struct weft_kernels *K = a->K;
    const int64_t Sg = a->grp_rows[a->r], d = a->d, h = a->hn[a->u], w = h * d;
    const int R = a->R, next = (a->r + 1) % R, prev = (a->r + R - 1) % R;
    float *hold = a->slot[0], *incoming = a->slot[1];
    int64_t hold_rows = Sg;
    K->copy_rows(a->kc, hold, w, k, ldg, Sg, w);
    K->copy_rows(a->kc, hold + Sg * w, w, v, ldg, Sg, w);
    weft_status_t st = K->sync(a->kc);
    for (int s = 0; s < R && st == WEFT_OK; s++) {
        void *xfer = NULL;
        const int64_t in_rows = a->grp_rows[(a->r + R - s - 1) % R];
        if (s < R - 1)
            st = a->comm->exchange_start(a->comm->ring, hold, (size_t)(2 * hold_rows * w), next,
                                         incoming, (size_t)(2 * in_rows * w), prev, &xfer);
        if (st != WEFT_OK)
            break;
        if (s == 0) {
            K->attention(a->kc, q, ldg, hold, w, hold + hold_rows * w, w, o, ldo, a->lse, Sg,
                         hold_rows, h, d, scale);
        } else {
            K->attention(a->kc, q, ldg, hold, w, hold + hold_rows * w, w, a->otmp, w,
                         a->lse_tmp, Sg, hold_rows, h, d, scale);
            K->attn_merge(a->kc, o, ldo, a->lse, a->otmp, w, a->lse_tmp, Sg, h, d);
        }
        if (s < R - 1) {
            st = K->sync(a->kc);
            weft_status_t wst = a->comm->exchange_wait(a->comm->ring, xfer);
            st = st != WEFT_OK ? st : wst;
            float *t = hold;
            hold = incoming;
            incoming = t;
            hold_rows = in_rows;
        }
    }
    return st;
}

weft_status_t weft_cp_attn_run(struct weft_cp_attn *a, const float *q, const float *k,
                               const float *v, int64_t ld, float *out, int64_t ldo, float scale)
{
    weft_status_t st = WEFT_OK;
    const float *Q = q, *Kx = k, *Vx = v;
    int64_t ldg = ld;
    if (a->U > 1) {
        if ((st = ulysses_scatter(a, q, k, v, ld)) != WEFT_OK)
            return st;
        Q = a->qg, Kx = a->kg, Vx = a->vg, ldg = a->hn[a->u] * a->d;
    }
    float *O = a->U > 1 ? a->og : out;
    const int64_t ldO = a->U > 1 ? a->hn[a->u] * a->d : ldo;
    const int64_t Sg = a->grp_rows[a->r];
    if (a->R == 1)
        a->K->attention(a->kc, Q, ldg, Kx, ldg, Vx, ldg, O, ldO, NULL, Sg, Sg, a->hn[a->u], a->d,
                        scale);
    else if (a->cp.rotation == WEFT_RING_ALLGATHER)
        st = ring_gather(a, Q, Kx, Vx, ldg, O, ldO, scale);
    else
        st = ring_p2p(a, Q, Kx, Vx, ldg, O, ldO, scale);
    if (st == WEFT_OK && a->U > 1)
        st = ulysses_gather(a, out, ldo);
    if (st == WEFT_OK)
        st = a->K->status(a->kc);
    return st;
}
