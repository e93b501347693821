/* The collective in flight on a group: start, the sends nobody waits for one by one, abort,
 * finish. */
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "transport/internal.h"

weft_status_t weft_tp_check_dtype(const char *name, enum weft_dtype dtype, bool reduce)
{
    if ((unsigned)dtype >= WEFT_DTYPE_COUNT ||
        (reduce && dtype != WEFT_DTYPE_F32 && dtype != WEFT_DTYPE_BF16 &&
         dtype != WEFT_DTYPE_F16)) {
        WEFT_LOG_ERROR("transport", "%s: element type %s is not supported%s", name,
                       weft_dtype_name(dtype), reduce ? " (sums take f32, bf16, f16)" : "");
        return WEFT_ERR_UNSUPPORTED;
    }
    return WEFT_OK;
}

weft_status_t weft_tp_op_begin(struct weft_comm *comm, const char *name, enum weft_dtype dtype,
                               weft_tp_op_cb progress, struct weft_tp_op **op_p)
{
    if (!comm) {
        WEFT_LOG_ERROR("transport", "%s: no group", name);
        return WEFT_ERR_INVALID;
    }
    weft_tp_revoke_apply(comm->tp);
    if (comm->failed != WEFT_OK)
        return comm->failed;
    if (comm->busy) {
        WEFT_LOG_ERROR("transport", "group %u: %s while another collective is in flight on it",
                       comm->id, name);
        return WEFT_ERR_BUSY;
    }
    struct weft_tp_op *op = &comm->op;
    void **fifo = op->fifo;
    size_t cap = op->fifo_cap;
    memset(op, 0, sizeof(*op));
    op->fifo = fifo;
    op->fifo_cap = cap;
    op->comm = comm;
    op->name = name;
    op->progress = progress;
    op->seq = comm->seq++ & TAG_SEQ_MASK;
    op->dtype = dtype;
    op->esize = weft_dtype_size(dtype);
    op->req = (struct weft_comm_req){.kind = REQ_COLL, .comm = comm, .status = WEFT_INPROGRESS,
                                     .deadline_ns = weft_tp_deadline(comm->tp)};
    *op_p = op;
    return WEFT_OK;
}

weft_status_t weft_tp_op_launch(struct weft_tp_op *op, weft_status_t status,
                                struct weft_comm_req **req_p)
{
    struct weft_comm *comm = op->comm;
    if (status != WEFT_OK && status != WEFT_INPROGRESS) {
        weft_tp_op_abort(op);
        if (WEFT_STATUS_IS_PEER_LOST(status) && comm->failed == WEFT_OK)
            comm->failed = status;
        return status;
    }
    comm->busy = true;
    op->req.status = status;
    if (status == WEFT_INPROGRESS) {
        op->active = true;
        op->next_active = comm->tp->active;
        comm->tp->active = op;
    }
    *req_p = &op->req;
    return WEFT_OK;
}

void weft_tp_op_abort(struct weft_tp_op *op)
{
    struct weft_comm *c = op->comm;
    weft_tp_shm_abort(op);
    for (size_t i = 0; i < op->fifo_len; i++)
        weft_tp_abandon(c, &op->fifo[(op->fifo_head + i) % op->fifo_cap], false);
    op->fifo_len = 0;
    for (int i = 0; i < c->size; i++)
        weft_tp_abandon(c, &c->rreq[i], true);
    for (int i = 0; i < c->depth; i++) {
        weft_tp_abandon(c, &c->st[i].recv, true);
        weft_tp_abandon(c, &c->st[i].send[0], false);
        weft_tp_abandon(c, &c->st[i].send[1], false);
        c->st[i].live = false;
    }
}

void weft_tp_op_finish(struct weft_tp_op *op, weft_status_t status)
{
    if (status != WEFT_OK)
        weft_tp_op_abort(op);
    if (op->active) {
        struct weft_tp_op **pp = &op->comm->tp->active;
        while (*pp && *pp != op)
            pp = &(*pp)->next_active;
        if (*pp)
            *pp = op->next_active;
        op->active = false;
    }
    op->req.status = status;
}

uint64_t weft_tp_op_tag(const struct weft_tp_op *op, int src, uint32_t sub)
{
    return weft_tp_tag(op->comm->id, op->seq, src, sub);
}

weft_status_t weft_tp_op_fifo_send(struct weft_tp_op *op, int peer, uint32_t sub,
                                   const void *buf, size_t bytes, ucp_mem_h memh)
{
    struct weft_comm *c = op->comm;
    void *r = NULL;
    weft_status_t st = weft_tp_send(c, peer, weft_tp_op_tag(op, c->rank, sub), buf, bytes, memh,
                                    &r);
    if (st != WEFT_OK || !r)
        return st;
    if (op->fifo_len == op->fifo_cap) {
        /* grows to the steady state of the first large collectives, then never again */
        size_t cap = op->fifo_cap ? op->fifo_cap * 2 : 64;
        void **f = weft_malloc(cap * sizeof(void *));
        if (!f) {
            weft_tp_abandon(c, &r, false);
            return WEFT_ERR_NOMEM;
        }
        for (size_t i = 0; i < op->fifo_len; i++)
            f[i] = op->fifo[(op->fifo_head + i) % op->fifo_cap];
        weft_free(op->fifo);
        op->fifo = f;
        op->fifo_cap = cap;
        op->fifo_head = 0;
    }
    op->fifo[(op->fifo_head + op->fifo_len) % op->fifo_cap] = r;
    op->fifo_len++;
    return WEFT_OK;
}

weft_status_t weft_tp_op_fifo_reap(struct weft_tp_op *op, int *moved)
{
    while (op->fifo_len) {
        void **r = &op->fifo[op->fifo_head];
        weft_status_t st = weft_tp_send_test(op->comm, r);
        if (st == WEFT_INPROGRESS)
            return st;
        op->fifo_head = (op->fifo_head + 1) % op->fifo_cap;
        op->fifo_len--;
        *moved = 1;
        if (st != WEFT_OK)
            return st;
    }
    return WEFT_OK;
}
