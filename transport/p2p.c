/* Tagged messages: the UCX send/receive wrappers every collective uses, and the public
 * non-blocking point-to-point calls with their request pool. */
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "transport/internal.h"

#define REQ_BLOCK 64

static void param_init(ucp_request_param_t *p, ucp_mem_h memh)
{
    memset(p, 0, sizeof(*p));
    p->op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    p->datatype = ucp_dt_make_contig(1);
    /* Saying "host" spares UCX a memory-type lookup per call; a device buffer will say cuda. */
    p->memory_type = UCS_MEMORY_TYPE_HOST;
    if (memh) {
        p->op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        p->memh = memh;
    }
}

/* A message that fails: without UCX error handling (sentinel.c) the only
 * failures left are the transport's own (a CMA copy from a process that has died, a reset TCP
 * connection), so they mean the peer is lost; the liveness socket usually says so a moment
 * later (a dying process loses its memory before its sockets). */
static weft_status_t request_status(struct weft_comm *comm, const char *what, ucs_status_t s)
{
    switch (s) {
    case UCS_ERR_MESSAGE_TRUNCATED:
        WEFT_LOG_ERROR("transport", "group %u: %s: the message is longer than the buffer",
                       comm->id, what);
        return WEFT_ERR_PROTOCOL;
    case UCS_ERR_CANCELED:
        return WEFT_ERR_CANCELLED;
    case UCS_ERR_NO_MEMORY:
        WEFT_LOG_ERROR("transport", "group %u: %s: UCX is out of memory", comm->id, what);
        return WEFT_ERR_NOMEM;
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_UNSUPPORTED:
        WEFT_LOG_ERROR("transport", "group %u: %s: UCX refuses it: %s", comm->id, what,
                       ucs_status_string(s));
        return weft_tp_ucs_status(s);
    default:
        WEFT_LOG_ERROR("transport", "group %u: %s failed (%s): peer lost", comm->id, what,
                       ucs_status_string(s));
        return WEFT_ERR_PEER_LOST;
    }
}

weft_status_t weft_tp_send(struct weft_comm *comm, int peer, uint64_t tag, const void *buf,
                           size_t bytes, ucp_mem_h memh, void **req_p)
{
    struct weft_transport *tp = comm->tp;
    if (!weft_tp_ucx_enter(tp))
        return (weft_status_t)atomic_load(&tp->revoked);
    ucp_request_param_t param;
    param_init(&param, memh);
    ucs_status_ptr_t r = ucp_tag_send_nbx(comm->eps[peer], buf, bytes, tag, &param);
    weft_tp_ucx_leave(tp);
    if (UCS_PTR_IS_ERR(r))
        return request_status(comm, "send", UCS_PTR_STATUS(r));
    *req_p = r;
    return WEFT_OK;
}

static weft_status_t recv_check(struct weft_comm *comm, size_t got, size_t bytes)
{
    if (got == bytes)
        return WEFT_OK;
    WEFT_LOG_ERROR("transport", "group %u: received %zu bytes where %zu were expected", comm->id,
                   got, bytes);
    return WEFT_ERR_PROTOCOL;
}

weft_status_t weft_tp_recv(struct weft_comm *comm, uint64_t tag, void *buf, size_t bytes,
                           ucp_mem_h memh, void **req_p)
{
    struct weft_transport *tp = comm->tp;
    if (!weft_tp_ucx_enter(tp))
        return (weft_status_t)atomic_load(&tp->revoked);
    ucp_request_param_t param;
    param_init(&param, memh);
    /* Always a request, so its length can be checked: UCX 1.13 leaves recv_info unset when a
     * receive completes at once from the unexpected queue. */
    param.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    ucs_status_ptr_t r = ucp_tag_recv_nbx(tp->worker, buf, bytes, tag, UINT64_MAX, &param);
    weft_tp_ucx_leave(tp);
    if (UCS_PTR_IS_ERR(r))
        return request_status(comm, "receive", UCS_PTR_STATUS(r));
    *req_p = r;
    return WEFT_OK;
}

weft_status_t weft_tp_send_test(struct weft_comm *comm, void **req_p)
{
    if (!*req_p)
        return WEFT_OK;
    ucs_status_t s = ucp_request_check_status(*req_p);
    if (s == UCS_INPROGRESS)
        return WEFT_INPROGRESS;
    ucp_request_free(*req_p);
    *req_p = NULL;
    return s == UCS_OK ? WEFT_OK : request_status(comm, "send", s);
}

weft_status_t weft_tp_recv_test(struct weft_comm *comm, void **req_p, size_t bytes)
{
    if (!*req_p)
        return WEFT_OK;
    ucp_tag_recv_info_t info = {0};
    ucs_status_t s = ucp_tag_recv_request_test(*req_p, &info);
    if (s == UCS_INPROGRESS)
        return WEFT_INPROGRESS;
    ucp_request_free(*req_p);
    *req_p = NULL;
    if (s != UCS_OK)
        return request_status(comm, "receive", s);
    return recv_check(comm, info.length, bytes);
}

/* A send that never completes (its peer is gone) stays with UCX, which releases it when the
 * worker is destroyed; no callback refers to our memory. A receive UCX has matched cannot be
 * cancelled: its copy (a CMA read from the peer, queued in UCX until a progress call runs it)
 * goes on. UCX 1.13 aborts when a worker is destroyed with such a copy queued (scopy_ep.c's
 * cleanup asserts its queue empty), so the request is kept to tell whether one may be
 * (transport.c's destroy). With UCX's default rendezvous for host memory the receiver copies;
 * an abandoned send queues nothing here. */
void weft_tp_abandon(struct weft_comm *comm, void **req_p, bool recv)
{
    if (!*req_p)
        return;
    struct weft_transport *tp = comm->tp;
    if (recv) {
        ucp_request_cancel(tp->worker, *req_p);
        if (ucp_request_check_status(*req_p) == UCS_INPROGRESS) {
            if (tp->n_zombies == tp->cap_zombies) {
                size_t cap = tp->cap_zombies ? tp->cap_zombies * 2 : 16;
                void **z = weft_realloc(tp->zombies, cap * sizeof(void *));
                if (z) {
                    tp->zombies = z;
                    tp->cap_zombies = cap;
                }
            }
            if (tp->n_zombies < tp->cap_zombies) {
                tp->zombies[tp->n_zombies++] = *req_p;
                *req_p = NULL;
                return;
            }
            tp->zombie_lost = true;
        }
    }
    ucp_request_free(*req_p);
    *req_p = NULL;
}

size_t weft_tp_zombies_reap(struct weft_transport *tp)
{
    size_t k = 0;
    for (size_t i = 0; i < tp->n_zombies; i++) {
        if (ucp_request_check_status(tp->zombies[i]) == UCS_INPROGRESS)
            tp->zombies[k++] = tp->zombies[i];
        else
            ucp_request_free(tp->zombies[i]);
    }
    tp->n_zombies = k;
    return k + tp->zombie_lost;
}

void weft_tp_zombies_free(struct weft_transport *tp)
{
    for (size_t i = 0; i < tp->n_zombies; i++)
        ucp_request_free(tp->zombies[i]);
    weft_free(tp->zombies);
    tp->zombies = NULL;
    tp->n_zombies = tp->cap_zombies = 0;
}

/* ---- request pool: no allocation per message once warm ---- */

static struct weft_comm_req *req_get(struct weft_transport *tp)
{
    if (!tp->free_reqs) {
        void **blocks = weft_realloc(tp->req_blocks, (tp->n_req_blocks + 1) * sizeof(void *));
        if (!blocks)
            return NULL;
        tp->req_blocks = blocks;
        struct weft_comm_req *b = weft_calloc(REQ_BLOCK, sizeof(*b));
        if (!b)
            return NULL;
        blocks[tp->n_req_blocks++] = b;
        for (int i = 0; i < REQ_BLOCK; i++) {
            b[i].next_free = tp->free_reqs;
            tp->free_reqs = &b[i];
        }
    }
    struct weft_comm_req *r = tp->free_reqs;
    tp->free_reqs = r->next_free;
    return r;
}

void weft_tp_reqs_free(struct weft_transport *tp)
{
    for (size_t i = 0; i < tp->n_req_blocks; i++)
        weft_free(tp->req_blocks[i]);
    weft_free(tp->req_blocks);
    tp->req_blocks = NULL;
    tp->n_req_blocks = 0;
    tp->free_reqs = NULL;
}

static weft_status_t p2p_start(struct weft_comm *comm, enum weft_tp_req_kind kind, int peer,
                               uint32_t tag, void *buf, size_t bytes,
                               struct weft_comm_req **req_p)
{
    if (!comm || peer < 0 || peer >= comm->size || (!buf && bytes)) {
        WEFT_LOG_ERROR("transport", "%s: bad arguments (peer %d)",
                       kind == REQ_SEND ? "isend" : "irecv", peer);
        return WEFT_ERR_INVALID;
    }
    struct weft_transport *tp = comm->tp;
    weft_tp_revoke_apply(tp);
    if (comm->failed != WEFT_OK)
        return comm->failed;
    struct weft_comm_req *r = req_get(tp);
    if (!r)
        return WEFT_ERR_NOMEM;
    weft_status_t st;
    void *ucp = NULL;
    if (kind == REQ_SEND)
        st = weft_tp_send(comm, peer, weft_tp_tag_p2p(comm->id, tag, comm->rank), buf, bytes,
                          NULL, &ucp);
    else
        st = weft_tp_recv(comm, weft_tp_tag_p2p(comm->id, tag, peer), buf, bytes, NULL, &ucp);
    if (st != WEFT_OK) {
        r->next_free = tp->free_reqs;
        tp->free_reqs = r;
        return st;
    }
    *r = (struct weft_comm_req){.kind = kind, .comm = comm, .status = WEFT_INPROGRESS,
                                .deadline_ns = weft_tp_deadline(tp), .ucp = ucp, .peer = peer,
                                .bytes = bytes};
    *req_p = r;
    return WEFT_OK;
}

weft_status_t weft_comm_isend(struct weft_comm *comm, int peer, uint32_t tag, const void *buf,
                              size_t bytes, struct weft_comm_req **req_p)
{
    return p2p_start(comm, REQ_SEND, peer, tag, (void *)buf, bytes, req_p);
}

weft_status_t weft_comm_irecv(struct weft_comm *comm, int peer, uint32_t tag, void *buf,
                              size_t bytes, struct weft_comm_req **req_p)
{
    return p2p_start(comm, REQ_RECV, peer, tag, buf, bytes, req_p);
}

/* The status of a point-to-point request now (no progress): INPROGRESS or final. A timeout
 * fails the request only: an unanswered message does not break the group's collectives. */
static weft_status_t p2p_check(struct weft_comm_req *r, int64_t now)
{
    struct weft_comm *comm = r->comm;
    bool recv = r->kind == REQ_RECV;
    weft_status_t st = recv ? weft_tp_recv_test(comm, &r->ucp, r->bytes)
                            : weft_tp_send_test(comm, &r->ucp);
    if (st != WEFT_INPROGRESS)
        return st;
    if (comm->failed != WEFT_OK || comm->tp->peer[comm->ranks[r->peer]] == PEER_LOST) {
        weft_tp_abandon(comm, &r->ucp, recv);
        return comm->failed != WEFT_OK ? comm->failed : WEFT_ERR_PEER_LOST;
    }
    if (now > r->deadline_ns) {
        WEFT_LOG_ERROR("transport", "group %u: %s of %zu bytes with rank %d (tag) timed out "
                       "after %d ms", comm->id, recv ? "receive" : "send", r->bytes,
                       comm->ranks[r->peer], comm->tp->opts.timeout_ms);
        weft_tp_abandon(comm, &r->ucp, recv);
        return WEFT_ERR_TIMEOUT;
    }
    return WEFT_INPROGRESS;
}

static void req_release(struct weft_comm_req *r)
{
    if (r->kind == REQ_COLL) {
        r->comm->busy = false;
        return;
    }
    struct weft_transport *tp = r->comm->tp;
    r->next_free = tp->free_reqs;
    tp->free_reqs = r;
}

/* Final status of r, or INPROGRESS. A collective's status is set by its progress function. */
static weft_status_t req_check(struct weft_comm_req *r, int64_t now)
{
    if (r->kind == REQ_COLL)
        return r->status;
    return p2p_check(r, now);
}

weft_status_t weft_comm_test(struct weft_comm_req **req)
{
    if (!*req)
        return WEFT_OK;
    struct weft_comm_req *r = *req;
    weft_tp_progress(r->comm->tp);
    weft_status_t st = req_check(r, weft_tp_now_ns());
    if (st == WEFT_INPROGRESS)
        return st;
    req_release(r);
    *req = NULL;
    return st;
}

weft_status_t weft_comm_waitall(int n, struct weft_comm_req **reqs)
{
    struct weft_transport *tp = NULL;
    for (int i = 0; i < n && !tp; i++)
        if (reqs[i])
            tp = reqs[i]->comm->tp;
    if (!tp)
        return WEFT_OK;
    weft_status_t first = WEFT_OK;
    int64_t spin_ns = (int64_t)tp->opts.spin_us * 1000;
    int64_t spin_until = weft_tp_now_ns() + spin_ns;
    for (;;) {
        unsigned events = weft_tp_progress(tp);
        int64_t now = weft_tp_now_ns();
        int64_t deadline = INT64_MAX;
        int pending = 0;
        for (int i = 0; i < n; i++) {
            if (!reqs[i])
                continue;
            weft_status_t st = req_check(reqs[i], now);
            if (st == WEFT_INPROGRESS) {
                pending++;
                if (reqs[i]->deadline_ns < deadline)
                    deadline = reqs[i]->deadline_ns;
                continue;
            }
            if (first == WEFT_OK)
                first = st;
            req_release(reqs[i]);
            reqs[i] = NULL;
        }
        if (!pending)
            return first;
        if (events) {
            spin_until = now + spin_ns;
            continue;
        }
        if (now < spin_until)
            continue;
        weft_tp_sleep(tp, deadline);
    }
}

weft_status_t weft_comm_wait(struct weft_comm_req **req)
{
    return weft_comm_waitall(1, req);
}
