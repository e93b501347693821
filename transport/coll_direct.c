/* Direct collectives: every rank talks to every other at once. All-to-all(v), and the
 * one-step all-reduce for small messages (latency, not bandwidth, rules there).
 *
 * In-place all-to-all goes in rounds of pairwise exchanges (round k pairs rank r with
 * k - r mod n, a pairing both sides agree on), each chunk copied to a scratch slot before the
 * peer's chunk lands in its place. */
#include <string.h>

#include "common/log.h"
#include "transport/internal.h"

static int mod(int a, int n)
{
    return ((a % n) + n) % n;
}

/* ---- all-reduce, direct: gather every input, then sum in the ring order ---- */

static char *peer_input(const struct weft_tp_op *op, int r)
{
    struct weft_comm *c = op->comm;
    if (r == c->rank)
        return (char *)op->in;
    int idx = r < c->rank ? r : r - 1;
    return c->scratch + (size_t)idx * op->count * op->esize;
}

/* The f32 accumulator follows the peers' inputs, on a cache line. */
static size_t acc_offset(const struct weft_tp_op *op)
{
    size_t in = (size_t)(op->comm->size - 1) * op->count * op->esize;
    return (in + 63) & ~(size_t)63;
}

weft_status_t weft_tp_direct_allreduce_setup(struct weft_tp_op *op)
{
    struct weft_comm *c = op->comm;
    int n = c->size;
    size_t bytes = op->count * op->esize;
    weft_status_t st = weft_tp_scratch_need(c, acc_offset(op) + op->count * sizeof(float));
    if (st != WEFT_OK)
        return st;
    for (int r = 0; r < n; r++) {
        if (r == c->rank)
            continue;
        st = weft_tp_recv(c, weft_tp_op_tag(op, r, 0), peer_input(op, r), bytes, c->scratch_memh,
                          &c->rreq[r]);
        if (st != WEFT_OK)
            return st;
    }
    for (int k = 1; k < n; k++) {
        st = weft_tp_op_fifo_send(op, mod(c->rank + k, n), 0, op->in, bytes, NULL);
        if (st != WEFT_OK)
            return st;
    }
    return WEFT_INPROGRESS;
}

weft_status_t weft_tp_direct_allreduce_progress(struct weft_tp_op *op, int *moved)
{
    struct weft_comm *c = op->comm;
    int n = c->size;
    size_t bytes = op->count * op->esize;
    for (int r = 0; r < n; r++) {
        if (r == c->rank || !c->rreq[r])
            continue;
        weft_status_t st = weft_tp_recv_test(c, &c->rreq[r], bytes);
        if (st != WEFT_OK)
            return st;
        *moved = 1;
    }
    /* in place, the output is our input: every peer must have it before it is overwritten */
    weft_status_t st = weft_tp_op_fifo_reap(op, moved);
    if (st != WEFT_OK)
        return st;
    float *acc = (float *)(c->scratch + acc_offset(op));
    for (int b = 0; b < n; b++) {
        size_t off = c->off[b], len = c->len[b];
        if (!len)
            continue;
        weft_tp_sum_load(acc, peer_input(op, mod(b + 1, n)) + off * op->esize, len, op->dtype);
        for (int k = 2; k <= n; k++)
            weft_tp_sum_acc(acc, peer_input(op, mod(b + k, n)) + off * op->esize, len,
                            op->dtype);
        weft_tp_sum_store(op->out + off * op->esize, acc, len, op->dtype);
    }
    *moved = 1;
    return WEFT_OK;
}

/* ---- all-to-all(v) ---- */

static weft_status_t a2a_progress(struct weft_tp_op *op, int *moved)
{
    struct weft_comm *c = op->comm;
    for (int r = 0; r < c->size; r++) {
        if (!c->rreq[r])
            continue;
        weft_status_t st = weft_tp_recv_test(c, &c->rreq[r], c->len[r] * op->esize);
        if (st != WEFT_OK)
            return st;
        *moved = 1;
    }
    return weft_tp_op_fifo_reap(op, moved);
}

static weft_status_t a2a_setup(struct weft_tp_op *op)
{
    struct weft_comm *c = op->comm;
    int n = c->size, me = c->rank;
    size_t es = op->esize;
    for (int r = 0; r < n; r++) {
        if (r == me || !c->len[r])
            continue;
        weft_status_t st = weft_tp_recv(c, weft_tp_op_tag(op, r, 0), op->out + c->off[r] * es,
                                        c->len[r] * es, NULL, &c->rreq[r]);
        if (st != WEFT_OK)
            return st;
    }
    /* start with the next rank, so not every rank sends to rank 0 first */
    for (int k = 1; k < n; k++) {
        int r = mod(me + k, n);
        if (!c->slen[r])
            continue;
        weft_status_t st = weft_tp_op_fifo_send(op, r, 0, op->in + c->soff[r] * es,
                                                c->slen[r] * es, NULL);
        if (st != WEFT_OK)
            return st;
    }
    if (c->len[me])
        memcpy(op->out + c->off[me] * es, op->in + c->soff[me] * es, c->len[me] * es);
    return WEFT_INPROGRESS;
}

/* In place: round op->phase exchanges the block of peer k - rank, chunk by chunk through the
 * scratch slots (one per lane). */
static weft_status_t a2a_inplace_progress(struct weft_tp_op *op, int *moved)
{
    struct weft_comm *c = op->comm;
    int n = c->size, me = c->rank;
    size_t es = op->esize;
    while (op->phase < n) {
        int j = mod(op->phase - me, n);
        size_t nchunks = j == me ? 0 : (c->len[j] + op->chunk - 1) / op->chunk;
        char *base = op->out + c->off[j] * es;
        for (int i = 0; i < c->depth; i++) {
            struct weft_tp_stream *st = &c->st[i];
            if (st->live) {
                size_t m = c->len[j] - st->c * op->chunk < op->chunk
                               ? c->len[j] - st->c * op->chunk : op->chunk;
                weft_status_t t = weft_tp_recv_test(c, &st->recv, m * es);
                if (t == WEFT_OK)
                    t = weft_tp_send_test(c, &st->send[0]);
                if (t == WEFT_INPROGRESS)
                    continue;
                if (t != WEFT_OK)
                    return t;
                st->live = false;
                op->done++;
                *moved = 1;
            }
            if (op->posted == nchunks)
                continue;
            size_t q = op->posted++;
            size_t m = c->len[j] - q * op->chunk < op->chunk ? c->len[j] - q * op->chunk
                                                              : op->chunk;
            char *dst = base + q * op->chunk * es;
            memcpy(st->slot[0], dst, m * es);
            uint32_t sub = (uint32_t)(q & TAG_SUB_MASK);
            weft_status_t t = weft_tp_send(c, j, weft_tp_op_tag(op, me, sub), st->slot[0], m * es,
                                           c->scratch_memh, &st->send[0]);
            if (t == WEFT_OK)
                t = weft_tp_recv(c, weft_tp_op_tag(op, j, sub), dst, m * es, NULL, &st->recv);
            if (t != WEFT_OK)
                return t;
            st->c = q;
            st->live = true;
            *moved = 1;
            i--; /* test it at once: a small message may already be done */
        }
        if (op->done < nchunks)
            return WEFT_INPROGRESS;
        op->phase++;
        op->posted = op->done = 0;
    }
    return WEFT_OK;
}

static weft_status_t a2a_begin(struct weft_comm *comm, const char *name, const void *sendbuf,
                               const size_t *sendcounts, void *recvbuf,
                               const size_t *recvcounts, size_t count, enum weft_dtype dtype,
                               struct weft_comm_req **req_p)
{
    struct weft_tp_op *op;
    weft_status_t st = weft_tp_check_dtype(name, dtype, false);
    if (st == WEFT_OK)
        st = weft_tp_op_begin(comm, name, dtype, a2a_progress, &op);
    if (st != WEFT_OK)
        return st;
    int n = comm->size, me = comm->rank;
    size_t stot = 0, rtot = 0;
    bool symmetric = true;
    for (int r = 0; r < n; r++) {
        comm->soff[r] = stot;
        comm->slen[r] = sendcounts ? sendcounts[r] : count;
        comm->off[r] = rtot;
        comm->len[r] = recvcounts ? recvcounts[r] : count;
        stot += comm->slen[r];
        rtot += comm->len[r];
        symmetric = symmetric && comm->slen[r] == comm->len[r];
    }
    op->in = sendbuf;
    op->out = recvbuf;
    op->in_place = sendbuf == recvbuf && stot;
    if ((stot && !sendbuf) || (rtot && !recvbuf) || comm->slen[me] != comm->len[me] ||
        (op->in_place && !symmetric)) {
        WEFT_LOG_ERROR("transport", "%s: bad arguments (a buffer missing, %zu elements to self "
                       "but %zu from self, or in place with send counts unlike receive counts)",
                       name, comm->slen[me], comm->len[me]);
        return weft_tp_op_launch(op, WEFT_ERR_INVALID, req_p);
    }
    if (weft_comm_shm_fits(comm, sendcounts ? SIZE_MAX : stot * op->esize))
        return weft_tp_op_launch(op, weft_tp_shm_start(op, WEFT_SHM_ALLTOALL), req_p);
    if (!op->in_place)
        return weft_tp_op_launch(op, a2a_setup(op), req_p);
    st = weft_tp_scratch_need(comm, 0);
    if (st != WEFT_OK)
        return weft_tp_op_launch(op, st, req_p);
    op->progress = a2a_inplace_progress;
    op->chunk = comm->tp->opts.chunk_bytes / op->esize;
    size_t slot = 2 * comm->tp->opts.chunk_bytes;
    for (int i = 0; i < comm->depth; i++) {
        comm->st[i].slot[0] = comm->scratch + (size_t)i * slot;
        comm->st[i].live = false;
    }
    return weft_tp_op_launch(op, WEFT_INPROGRESS, req_p);
}

weft_status_t weft_comm_alltoall_start(struct weft_comm *comm, const void *sendbuf,
                                       void *recvbuf, size_t count, enum weft_dtype dtype,
                                       struct weft_comm_req **req_p)
{
    return a2a_begin(comm, "alltoall", sendbuf, NULL, recvbuf, NULL, count, dtype, req_p);
}

weft_status_t weft_comm_alltoallv_start(struct weft_comm *comm, const void *sendbuf,
                                        const size_t *sendcounts, void *recvbuf,
                                        const size_t *recvcounts, enum weft_dtype dtype,
                                        struct weft_comm_req **req_p)
{
    if (!sendcounts || !recvcounts) {
        WEFT_LOG_ERROR("transport", "alltoallv: no counts");
        return WEFT_ERR_INVALID;
    }
    return a2a_begin(comm, "alltoallv", sendbuf, sendcounts, recvbuf, recvcounts, 0, dtype,
                     req_p);
}

weft_status_t weft_comm_alltoall(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                 size_t count, enum weft_dtype dtype)
{
    struct weft_comm_req *r;
    weft_status_t st = weft_comm_alltoall_start(comm, sendbuf, recvbuf, count, dtype, &r);
    return st == WEFT_OK ? weft_comm_wait(&r) : st;
}

weft_status_t weft_comm_alltoallv(struct weft_comm *comm, const void *sendbuf,
                                  const size_t *sendcounts, void *recvbuf,
                                  const size_t *recvcounts, enum weft_dtype dtype)
{
    struct weft_comm_req *r;
    weft_status_t st =
        weft_comm_alltoallv_start(comm, sendbuf, sendcounts, recvbuf, recvcounts, dtype, &r);
    return st == WEFT_OK ? weft_comm_wait(&r) : st;
}
