/* worker/par.h callbacks over transport/comm.h groups. Group ids are the mesh dimension: groups
 * of one dimension partition the world, so no process is in two groups of the same id. */
#include "worker/par_transport.h"

#include <time.h>

#include "common/alloc.h"
#include "common/log.h"

/* Host memory a staged collective moves device buffers through; grown to the largest message
 * on first use, then reused (no allocation once the shapes are known). */
struct stage {
    float *p;
    size_t floats;
};

/* What the opaque group pointers of struct weft_par_comm point to. */
struct par_group {
    struct weft_par_transport *pt;
    struct weft_comm *comm;
    struct weft_comm_req *xfer[2]; /* one ring exchange in flight at a time */
    struct stage send, recv;       /* staged collectives: host copies of the device buffers */
    float *xfer_dst;               /* a staged exchange: where its receive goes at the wait */
    size_t xfer_n;
    double seconds[WEFT_PAR_OP_COUNT], bytes[WEFT_PAR_OP_COUNT];
    long calls[WEFT_PAR_OP_COUNT];
};

const char *weft_par_op_name(enum weft_par_op op)
{
    static const char *const names[WEFT_PAR_OP_COUNT] = {"allreduce", "alltoall", "allgather",
                                                         "p2p", "bcast"};
    return (unsigned)op < WEFT_PAR_OP_COUNT ? names[op] : "?";
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static weft_status_t account(struct par_group *g, enum weft_par_op op, double t0, size_t bytes,
                             weft_status_t st)
{
    g->seconds[op] += now_s() - t0;
    g->bytes[op] += (double)bytes;
    g->calls[op]++;
    return st;
}

struct weft_par_transport {
    struct weft_par_comm ops;
    struct par_group groups[WEFT_MESH_GROUP_COUNT];
    const struct weft_kernels *K; /* whose buffers the callbacks get (NULL: host memory) */
    struct weft_kctx *kc;
};

/* ---- staging: device buffers through host memory -----------------------------------------
 * The transport moves host memory (Debian's UCX has no CUDA transports): a collective on a
 * backend that is not host-visible downloads what it sends, synchronises the backend's stream,
 * runs on the host copies and uploads what it received. The sync comes before the transport
 * touches a staging buffer, so an upload still queued from the last collective has read it. */

static bool staged(const struct par_group *g)
{
    return g->pt->K && !g->pt->K->host_visible;
}

static float *stage_get(struct stage *s, size_t floats)
{
    if (floats > s->floats) {
        weft_big_free(s->p, s->floats * sizeof(float));
        /* shareable: the shared-memory collectives read it in place */
        s->p = weft_big_alloc_shared(floats * sizeof(float));
        s->floats = s->p ? floats : 0;
    }
    return s->p;
}

/* Host copies of n_send floats from the device (send may be NULL) and room for n_recv. */
static weft_status_t stage_in(struct par_group *g, const float *send, size_t n_send,
                              size_t n_recv, float **hs_p, float **hr_p)
{
    const struct weft_kernels *K = g->pt->K;
    float *hs = stage_get(&g->send, n_send), *hr = stage_get(&g->recv, n_recv);
    if ((n_send && !hs) || (n_recv && !hr)) {
        WEFT_LOG_ERROR("worker", "out of memory for %zu floats of collective staging",
                       n_send + n_recv);
        return WEFT_ERR_NOMEM;
    }
    if (send && n_send)
        K->download(g->pt->kc, hs, send, n_send * sizeof(float));
    weft_status_t st = K->sync(g->pt->kc);
    if (st == WEFT_OK) {
        *hs_p = hs;
        *hr_p = hr;
    }
    return st;
}

static weft_status_t stage_out(struct par_group *g, weft_status_t st, float *dst,
                               const float *host, size_t n)
{
    if (st == WEFT_OK && n)
        g->pt->K->upload(g->pt->kc, dst, host, n * sizeof(float));
    return st;
}

static size_t sum_counts(const struct par_group *g, const size_t *counts)
{
    size_t n = 0;
    for (int i = 0; i < weft_comm_size(g->comm); i++)
        n += counts[i];
    return n;
}

static weft_status_t allreduce(void *g, float *buf, size_t count)
{
    struct par_group *pg = g;
    double t0 = now_s();
    weft_status_t st;
    float *hs, *hr;
    if (!staged(pg))
        st = weft_comm_allreduce(pg->comm, buf, buf, count, WEFT_DTYPE_F32);
    else if ((st = stage_in(pg, buf, count, 0, &hs, &hr)) == WEFT_OK)
        st = stage_out(pg, weft_comm_allreduce(pg->comm, hs, hs, count, WEFT_DTYPE_F32), buf, hs,
                       count);
    return account(pg, WEFT_PAR_ALLREDUCE, t0, count * sizeof(float), st);
}

static weft_status_t alltoallv(void *g, const float *send, const size_t *send_counts,
                               float *recv, const size_t *recv_counts)
{
    struct par_group *pg = g;
    size_t n = 0;
    for (int i = 0; i < weft_comm_size(pg->comm); i++)
        n += i == weft_comm_rank(pg->comm) ? 0 : send_counts[i];
    double t0 = now_s();
    weft_status_t st;
    float *hs, *hr;
    const size_t ns = sum_counts(pg, send_counts), nr = sum_counts(pg, recv_counts);
    if (!staged(pg))
        st = weft_comm_alltoallv(pg->comm, send, send_counts, recv, recv_counts, WEFT_DTYPE_F32);
    else if ((st = stage_in(pg, send, ns, nr, &hs, &hr)) == WEFT_OK)
        st = stage_out(pg,
                       weft_comm_alltoallv(pg->comm, hs, send_counts, hr, recv_counts,
                                           WEFT_DTYPE_F32),
                       recv, hr, nr);
    return account(pg, WEFT_PAR_ALLTOALL, t0, n * sizeof(float), st);
}

static weft_status_t allgatherv(void *g, const float *send, float *recv, const size_t *counts)
{
    struct par_group *pg = g;
    double t0 = now_s();
    const size_t mine = counts[weft_comm_rank(pg->comm)], total = sum_counts(pg, counts);
    weft_status_t st;
    float *hs, *hr;
    if (!staged(pg))
        st = weft_comm_allgatherv(pg->comm, send, recv, counts, WEFT_DTYPE_F32);
    else if ((st = stage_in(pg, send, mine, total, &hs, &hr)) == WEFT_OK)
        st = stage_out(pg, weft_comm_allgatherv(pg->comm, hs, hr, counts, WEFT_DTYPE_F32), recv,
                       hr, total);
    return account(pg, WEFT_PAR_ALLGATHER, t0, mine * sizeof(float), st);
}

static weft_status_t host_allgatherv(void *g, const float *send, float *recv,
                                     const size_t *counts)
{
    struct par_group *pg = g;
    double t0 = now_s();
    return account(pg, WEFT_PAR_ALLGATHER, t0,
                   counts[weft_comm_rank(pg->comm)] * sizeof(float),
                   weft_comm_allgatherv(pg->comm, send, recv, counts, WEFT_DTYPE_F32));
}

static weft_status_t exchange_start(void *g, const float *send, size_t send_n, int to,
                                    float *recv, size_t recv_n, int from, void **handle_p)
{
    struct par_group *pg = g;
    pg->bytes[WEFT_PAR_P2P] += (double)(send_n * sizeof(float));
    pg->xfer_dst = NULL;
    if (staged(pg)) { /* the receive is uploaded at the wait */
        float *hs, *hr;
        weft_status_t st = stage_in(pg, send, send_n, recv_n, &hs, &hr);
        if (st != WEFT_OK)
            return st;
        pg->xfer_dst = recv, pg->xfer_n = recv_n;
        send = hs, recv = hr;
    }
    weft_status_t st =
        weft_comm_irecv(pg->comm, from, 0, recv, recv_n * sizeof(float), &pg->xfer[0]);
    if (st != WEFT_OK)
        return st;
    st = weft_comm_isend(pg->comm, to, 0, send, send_n * sizeof(float), &pg->xfer[1]);
    if (st != WEFT_OK) {
        (void)weft_comm_wait(&pg->xfer[0]);
        return st;
    }
    *handle_p = pg->xfer;
    return WEFT_OK;
}

/* Only the wait counts as communication time: the transfer overlaps the attention. */
static weft_status_t exchange_wait(void *g, void *handle)
{
    struct par_group *pg = g;
    double t0 = now_s();
    weft_status_t st = weft_comm_waitall(2, handle);
    if (pg->xfer_dst)
        st = stage_out(pg, st, pg->xfer_dst, pg->recv.p, pg->xfer_n);
    pg->xfer_dst = NULL;
    return account(pg, WEFT_PAR_P2P, t0, 0, st);
}

/* A stage's hand-over: the sender's time is the send's completion, the receiver's the wait for
 * the previous stage (pipeline imbalance included). */
static weft_status_t p2p_send(void *g, const float *buf, size_t count, int peer)
{
    struct par_group *pg = g;
    double t0 = now_s();
    struct weft_comm_req *req = NULL;
    float *hs, *hr;
    weft_status_t st = staged(pg) ? stage_in(pg, buf, count, 0, &hs, &hr) : WEFT_OK;
    if (st == WEFT_OK)
        st = weft_comm_isend(pg->comm, peer, 1, staged(pg) ? hs : buf, count * sizeof(float),
                             &req);
    if (st == WEFT_OK)
        st = weft_comm_wait(&req);
    return account(pg, WEFT_PAR_P2P, t0, count * sizeof(float), st);
}

static weft_status_t p2p_recv(void *g, float *buf, size_t count, int peer)
{
    struct par_group *pg = g;
    double t0 = now_s();
    struct weft_comm_req *req = NULL;
    float *hs, *hr = buf;
    weft_status_t st = staged(pg) ? stage_in(pg, NULL, 0, count, &hs, &hr) : WEFT_OK;
    if (st == WEFT_OK)
        st = weft_comm_irecv(pg->comm, peer, 1, hr, count * sizeof(float), &req);
    if (st == WEFT_OK)
        st = weft_comm_wait(&req);
    if (staged(pg))
        st = stage_out(pg, st, buf, hr, count);
    return account(pg, WEFT_PAR_P2P, t0, 0, st);
}

static weft_status_t bcast(void *g, float *buf, size_t count, int root)
{
    struct par_group *pg = g;
    double t0 = now_s();
    const bool me = weft_comm_rank(pg->comm) == root;
    weft_status_t st;
    float *hs, *hr;
    if (!staged(pg))
        st = weft_comm_bcast(pg->comm, buf, count, WEFT_DTYPE_F32, root);
    else if ((st = stage_in(pg, me ? buf : NULL, count, 0, &hs, &hr)) == WEFT_OK)
        st = stage_out(pg, weft_comm_bcast(pg->comm, hs, count, WEFT_DTYPE_F32, root), buf, hs,
                       me ? 0 : count);
    return account(pg, WEFT_PAR_BCAST, t0, me ? count * sizeof(float) : 0, st);
}

void weft_par_transport_set_device(struct weft_par_transport *pt, const struct weft_kernels *K,
                                   struct weft_kctx *kc)
{
    pt->K = K;
    pt->kc = kc;
}

weft_status_t weft_par_transport_host_allreduce(struct weft_par_transport *pt,
                                                enum weft_mesh_group group, float *buf,
                                                size_t count)
{
    struct par_group *pg = &pt->groups[group];
    double t0 = now_s();
    return account(pg, WEFT_PAR_ALLREDUCE, t0, count * sizeof(float),
                   weft_comm_allreduce(pg->comm, buf, buf, count, WEFT_DTYPE_F32));
}

void weft_transport_opts_from_conf(const struct weft_conf_transport *t,
                                   struct weft_transport_opts *opts)
{
    *opts = (struct weft_transport_opts){
        .tls = t->tls,
        .chunk_bytes = t->chunk_bytes,
        .pipeline_depth = (int)t->pipeline_depth,
        .allreduce_algo = (enum weft_comm_algo)t->allreduce_algo,
        .allreduce_direct_max = t->allreduce_direct_max,
        .timeout_ms = (int)t->timeout_ms,
        .spin_us = (int)t->spin_us,
        .shm = t->shm,
        .shm_max = t->shm_max,
        /* [cluster] worker_timeout_ms / 2 in a worker, which holds the whole configuration
         * (this function sees [transport] only): off for benches and tools */
        .freeze_ms = 0,
    };
}

weft_status_t weft_par_transport_create(struct weft_transport *tp, const struct weft_mesh *mesh,
                                        int world_base, struct weft_par_transport **pt_p,
                                        struct weft_error *err)
{
    int rank = weft_transport_rank(tp) - world_base, n = weft_mesh_size(mesh);
    if (rank < 0 || rank >= n || world_base + n > weft_transport_size(tp))
        return weft_error_set(err, WEFT_ERR_INVALID, "worker",
                              "world rank %d is not in the mesh of %d ranks at %d",
                              weft_transport_rank(tp), n, world_base);
    struct weft_par_transport *pt = weft_calloc(1, sizeof(*pt));
    int *ranks = weft_calloc((size_t)n, sizeof(int));
    weft_status_t st = pt && ranks ? WEFT_OK : WEFT_ERR_NOMEM;
    if (st != WEFT_OK)
        weft_error_refuse(err, st, "out of memory");
    for (int k = 0; k < WEFT_MESH_GROUP_COUNT && st == WEFT_OK; k++) {
        pt->groups[k].pt = pt;
        int index = 0;
        int size = weft_mesh_group(mesh, rank, (enum weft_mesh_group)k, ranks, &index);
        for (int i = 0; i < size; i++)
            ranks[i] += world_base;
        st = weft_comm_create(tp, size, ranks, (uint32_t)(k + 1), &pt->groups[k].comm);
        if (st != WEFT_OK) /* the transport logged why */
            weft_error_refuse(err, st, "the %s group of world rank %d: %s",
                              weft_mesh_group_name((enum weft_mesh_group)k),
                              weft_transport_rank(tp), weft_status_str(st));
    }
    weft_free(ranks);
    if (st != WEFT_OK) {
        weft_par_transport_destroy(pt);
        return st;
    }
    pt->ops = (struct weft_par_comm){
        .allreduce = allreduce,
        .alltoallv = alltoallv,
        .allgatherv = allgatherv,
        .exchange_start = exchange_start,
        .exchange_wait = exchange_wait,
        .send = p2p_send,
        .recv = p2p_recv,
        .bcast = bcast,
        .host_allgatherv = host_allgatherv,
        .tp = &pt->groups[WEFT_MESH_TP],
        .ulysses = &pt->groups[WEFT_MESH_ULYSSES],
        .ring = &pt->groups[WEFT_MESH_RING],
        .cp = &pt->groups[WEFT_MESH_CP],
        .replica = &pt->groups[WEFT_MESH_REPLICA],
        .pipe = &pt->groups[WEFT_MESH_PIPE],
        .cfg = &pt->groups[WEFT_MESH_CFG],
    };
    *pt_p = pt;
    return WEFT_OK;
}

void weft_par_transport_destroy(struct weft_par_transport *pt)
{
    if (!pt)
        return;
    for (int k = 0; k < WEFT_MESH_GROUP_COUNT; k++) {
        struct par_group *g = &pt->groups[k];
        weft_comm_destroy(g->comm);
        weft_big_free(g->send.p, g->send.floats * sizeof(float));
        weft_big_free(g->recv.p, g->recv.floats * sizeof(float));
    }
    weft_free(pt);
}

const struct weft_par_comm *weft_par_transport_comm(const struct weft_par_transport *pt)
{
    return &pt->ops;
}

void weft_par_transport_stats(const struct weft_par_transport *pt, struct weft_par_stats *out)
{
    for (int k = 0; k < WEFT_MESH_GROUP_COUNT; k++) {
        for (int o = 0; o < WEFT_PAR_OP_COUNT; o++) {
            out->seconds[k][o] = pt->groups[k].seconds[o];
            out->bytes[k][o] = pt->groups[k].bytes[o];
            out->calls[k][o] = pt->groups[k].calls[o];
        }
    }
}

void weft_par_transport_reset_stats(struct weft_par_transport *pt)
{
    for (int k = 0; k < WEFT_MESH_GROUP_COUNT; k++)
        for (int op = 0; op < WEFT_PAR_OP_COUNT; op++)
            pt->groups[k].seconds[op] = pt->groups[k].bytes[op] = 0, pt->groups[k].calls[op] = 0;
}
