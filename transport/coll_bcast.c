/* Broadcast (a binomial tree for one chunk, a pipelined chain for more) and barrier
 * (dissemination: ceil(log2 n) rounds of empty messages). */
#include "common/log.h"
#include "transport/internal.h"

static int mod(int a, int n)
{
    return ((a % n) + n) % n;
}

/* ---- binomial tree: receive from the parent, then send to the children ---- */

static int tree_parent_mask(int vr, int n)
{
    int mask = 1;
    while (mask < n) {
        if (vr & mask)
            return mask;
        mask <<= 1;
    }
    return mask; /* the root: above every child */
}

static weft_status_t tree_progress(struct weft_tp_op *op, int *moved)
{
    struct weft_comm *c = op->comm;
    int n = c->size, vr = mod(c->rank - op->root, n);
    size_t bytes = op->count * op->esize;
    if (op->phase == 0) {
        weft_status_t st = weft_tp_recv_test(c, &c->rreq[0], bytes);
        if (st != WEFT_OK)
            return st;
        for (int m = tree_parent_mask(vr, n) >> 1; m > 0; m >>= 1) {
            if (vr + m >= n)
                continue;
            st = weft_tp_op_fifo_send(op, mod(vr + m + op->root, n), 0, op->out, bytes, NULL);
            if (st != WEFT_OK)
                return st;
        }
        op->phase = 1;
        *moved = 1;
    }
    return weft_tp_op_fifo_reap(op, moved);
}

/* ---- chain: root -> root+1 -> ..., chunk by chunk, depth chunks in flight ---- */

static weft_status_t chain_progress(struct weft_tp_op *op, int *moved)
{
    struct weft_comm *c = op->comm;
    int n = c->size, vr = mod(c->rank - op->root, n);
    int prev = mod(c->rank - 1, n), next = mod(c->rank + 1, n);
    size_t total = op->count, nchunks = (total + op->chunk - 1) / op->chunk;
    size_t es = op->esize;
    if (vr != 0) {
        for (;;) {
            while (op->posted < nchunks && op->posted - op->done < (size_t)c->depth) {
                size_t q = op->posted, m = total - q * op->chunk < op->chunk
                                               ? total - q * op->chunk : op->chunk;
                weft_status_t st = weft_tp_recv(c, weft_tp_op_tag(op, prev, q & TAG_SUB_MASK),
                                                op->out + q * op->chunk * es, m * es, NULL,
                                                &c->st[q % (size_t)c->depth].recv);
                if (st != WEFT_OK)
                    return st;
                op->posted++;
                *moved = 1;
            }
            if (op->done == op->posted)
                break;
            size_t q = op->done, m = total - q * op->chunk < op->chunk ? total - q * op->chunk
                                                                        : op->chunk;
            weft_status_t st =
                weft_tp_recv_test(c, &c->st[q % (size_t)c->depth].recv, m * es);
            if (st == WEFT_INPROGRESS)
                break;
            if (st != WEFT_OK)
                return st;
            if (vr < n - 1) {
                st = weft_tp_op_fifo_send(op, next, q & TAG_SUB_MASK,
                                          op->out + q * op->chunk * es, m * es, NULL);
                if (st != WEFT_OK)
                    return st;
            }
            op->done++;
            *moved = 1;
        }
        if (op->done < nchunks)
            return WEFT_INPROGRESS;
    }
    return weft_tp_op_fifo_reap(op, moved);
}

weft_status_t weft_comm_bcast_start(struct weft_comm *comm, void *buf, size_t count,
                                    enum weft_dtype dtype, int root,
                                    struct weft_comm_req **req_p)
{
    struct weft_tp_op *op;
    if (!comm) {
        WEFT_LOG_ERROR("transport", "bcast: no group");
        return WEFT_ERR_INVALID;
    }
    weft_status_t st = weft_tp_check_dtype("bcast", dtype, false);
    if (st == WEFT_OK && (root < 0 || root >= comm->size || (count && !buf))) {
        WEFT_LOG_ERROR("transport", "bcast: bad root %d or no buffer", root);
        st = WEFT_ERR_INVALID;
    }
    if (st == WEFT_OK)
        st = weft_tp_op_begin(comm, "bcast", dtype, tree_progress, &op);
    if (st != WEFT_OK)
        return st;
    int n = comm->size;
    op->out = buf;
    op->count = count;
    op->root = root;
    if (n == 1 || count == 0)
        return weft_tp_op_launch(op, WEFT_OK, req_p);
    if (weft_comm_shm_fits(comm, count * op->esize))
        return weft_tp_op_launch(op, weft_tp_shm_start(op, WEFT_SHM_BCAST), req_p);
    size_t bytes = count * op->esize;
    const struct weft_transport_opts *o = &comm->tp->opts;
    if (bytes > o->chunk_bytes) {
        op->progress = chain_progress;
        op->chunk = o->chunk_bytes / op->esize;
        if (comm->rank == root) {
            size_t nchunks = (count + op->chunk - 1) / op->chunk;
            for (size_t q = 0; q < nchunks && st == WEFT_OK; q++) {
                size_t m = count - q * op->chunk < op->chunk ? count - q * op->chunk : op->chunk;
                st = weft_tp_op_fifo_send(op, mod(root + 1, n), q & TAG_SUB_MASK,
                                          op->out + q * op->chunk * op->esize, m * op->esize,
                                          NULL);
            }
        }
        return weft_tp_op_launch(op, st == WEFT_OK ? WEFT_INPROGRESS : st, req_p);
    }
    int vr = mod(comm->rank - root, n);
    if (vr != 0) {
        int parent = mod(vr - tree_parent_mask(vr, n) + root, n);
        st = weft_tp_recv(comm, weft_tp_op_tag(op, parent, 0), buf, bytes, NULL, &comm->rreq[0]);
    }
    return weft_tp_op_launch(op, st == WEFT_OK ? WEFT_INPROGRESS : st, req_p);
}

weft_status_t weft_comm_bcast(struct weft_comm *comm, void *buf, size_t count,
                              enum weft_dtype dtype, int root)
{
    struct weft_comm_req *r;
    weft_status_t st = weft_comm_bcast_start(comm, buf, count, dtype, root, &r);
    return st == WEFT_OK ? weft_comm_wait(&r) : st;
}

/* ---- barrier ---- */

static char barrier_byte;

static weft_status_t barrier_post(struct weft_tp_op *op)
{
    struct weft_comm *c = op->comm;
    int d = 1 << op->phase, n = c->size;
    weft_status_t st = weft_tp_recv(c, weft_tp_op_tag(op, mod(c->rank - d, n), (uint32_t)op->phase),
                                    &barrier_byte, 0, NULL, &c->rreq[0]);
    if (st != WEFT_OK)
        return st;
    return weft_tp_op_fifo_send(op, mod(c->rank + d, n), (uint32_t)op->phase, &barrier_byte, 0,
                                NULL);
}

static weft_status_t barrier_progress(struct weft_tp_op *op, int *moved)
{
    struct weft_comm *c = op->comm;
    while ((1 << op->phase) < c->size) {
        weft_status_t st = weft_tp_recv_test(c, &c->rreq[0], 0);
        if (st != WEFT_OK)
            return st;
        op->phase++;
        *moved = 1;
        if ((1 << op->phase) < c->size) {
            st = barrier_post(op);
            if (st != WEFT_OK)
                return st;
        }
    }
    return weft_tp_op_fifo_reap(op, moved);
}

weft_status_t weft_comm_barrier_start(struct weft_comm *comm, struct weft_comm_req **req_p)
{
    struct weft_tp_op *op;
    weft_status_t st = weft_tp_op_begin(comm, "barrier", WEFT_DTYPE_U8, barrier_progress, &op);
    if (st != WEFT_OK)
        return st;
    if (comm->size == 1)
        return weft_tp_op_launch(op, WEFT_OK, req_p);
    if (weft_comm_shm_fits(comm, 0))
        return weft_tp_op_launch(op, weft_tp_shm_start(op, WEFT_SHM_BARRIER), req_p);
    st = barrier_post(op);
    return weft_tp_op_launch(op, st == WEFT_OK ? WEFT_INPROGRESS : st, req_p);
}

weft_status_t weft_comm_barrier(struct weft_comm *comm)
{
    struct weft_comm_req *r;
    weft_status_t st = weft_comm_barrier_start(comm, &r);
    return st == WEFT_OK ? weft_comm_wait(&r) : st;
}
