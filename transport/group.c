/* Process groups: membership, tag space, per-call layout arrays and the registered scratch. */
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "transport/internal.h"

#define FIFO_INITIAL 64

/* The group and its arrays (what creation allocates before anything can use them). */
static void comm_arrays_free(struct weft_comm *c)
{
    weft_free(c->ranks);
    weft_free(c->eps);
    weft_free(c->off);
    weft_free(c->rreq);
    weft_free(c->st);
    weft_free(c->op.fifo);
    weft_free(c);
}

weft_status_t weft_tp_comm_new(struct weft_transport *tp, int n, const int *ranks, uint32_t id,
                               struct weft_comm **comm_p)
{
    int me = -1;
    for (int i = 0; i < n; i++) {
        if (ranks[i] < 0 || ranks[i] >= tp->size) {
            WEFT_LOG_ERROR("transport", "group %u: rank %d is not in the world of %d", id,
                           ranks[i], tp->size);
            return WEFT_ERR_INVALID;
        }
        for (int j = 0; j < i; j++) {
            if (ranks[j] == ranks[i]) {
                WEFT_LOG_ERROR("transport", "group %u: rank %d listed twice", id, ranks[i]);
                return WEFT_ERR_INVALID;
            }
        }
        if (ranks[i] == tp->rank)
            me = i;
    }
    if (me < 0) {
        WEFT_LOG_ERROR("transport", "group %u: this rank (%d) is not a member", id, tp->rank);
        return WEFT_ERR_INVALID;
    }
    for (struct weft_comm *g = tp->groups; g; g = g->next) {
        if (g->id == id) {
            WEFT_LOG_ERROR("transport", "group id %u is already used by another group of this "
                           "rank", id);
            return WEFT_ERR_BUSY;
        }
    }
    struct weft_comm *c = weft_calloc(1, sizeof(*c));
    if (!c)
        return WEFT_ERR_NOMEM;
    size_t un = (size_t)n;
    c->tp = tp;
    c->id = id;
    c->rank = me;
    c->size = n;
    c->depth = tp->opts.pipeline_depth;
    c->ranks = weft_malloc(un * sizeof(int));
    c->eps = weft_malloc(un * sizeof(ucp_ep_h));
    c->off = weft_calloc(4 * un, sizeof(size_t));
    c->rreq = weft_calloc(un, sizeof(void *));
    c->st = weft_calloc((size_t)c->depth, sizeof(*c->st));
    c->op.fifo = weft_malloc(FIFO_INITIAL * sizeof(void *));
    if (!c->ranks || !c->eps || !c->off || !c->rreq || !c->st || !c->op.fifo) {
        comm_arrays_free(c);
        return WEFT_ERR_NOMEM;
    }
    c->len = c->off + un;
    c->soff = c->off + 2 * un;
    c->slen = c->off + 3 * un;
    c->op.fifo_cap = FIFO_INITIAL;
    c->op.comm = c;
    for (int i = 0; i < n; i++) {
        c->ranks[i] = ranks[i];
        c->eps[i] = tp->eps[ranks[i]];
        if (tp->peer[ranks[i]] == PEER_LOST)
            c->failed = WEFT_ERR_PEER_LOST;
    }
    weft_status_t revoked = weft_tp_revoke_apply(tp);
    if (revoked != WEFT_OK)
        c->failed = revoked; /* born failed, like every group of a revoked world */
    c->next = tp->groups;
    tp->groups = c;
    *comm_p = c;
    return WEFT_OK;
}

weft_status_t weft_comm_create(struct weft_transport *tp, int n, const int *ranks, uint32_t id,
                               struct weft_comm **comm_p)
{
    if (!tp || !ranks || n < 1 || n > tp->size || id == 0 || id > TAG_GROUP_MAX) {
        WEFT_LOG_ERROR("transport", "group %u of %d ranks: the id must be 1..%u and the size "
                       "1..%d", id, n, TAG_GROUP_MAX, tp ? tp->size : 0);
        return WEFT_ERR_INVALID;
    }
    struct weft_comm *c;
    weft_status_t st = weft_tp_comm_new(tp, n, ranks, id, &c);
    if (st != WEFT_OK)
        return st;
    st = weft_tp_shm_setup(c);
    if (st != WEFT_OK) {
        weft_tp_comm_free(c);
        return st;
    }
    *comm_p = c;
    return WEFT_OK;
}

static void scratch_release(struct weft_comm *c)
{
    if (!c->scratch)
        return;
    struct weft_transport *tp = c->tp;
    if (c->failed != WEFT_OK) {
        struct weft_tp_grave *g = weft_malloc(sizeof(*g));
        if (g) {
            *g = (struct weft_tp_grave){c->scratch, c->scratch_bytes, c->scratch_memh,
                                        tp->graveyard};
            tp->graveyard = g;
        }
        /* no memory for the record: leave the scratch mapped rather than risk UCX reading it */
    } else {
        if (c->scratch_memh)
            ucp_mem_unmap(tp->ctx, c->scratch_memh);
        weft_big_free(c->scratch, c->scratch_bytes);
    }
    c->scratch = NULL;
    c->scratch_memh = NULL;
    c->scratch_bytes = 0;
}

void weft_tp_graveyard_free(struct weft_transport *tp, bool memory_only)
{
    if (memory_only) {
        for (struct weft_tp_grave *g = tp->graveyard; g; g = g->next) {
            weft_big_free(g->p, g->len);
            g->p = NULL;
            g->len = 0;
        }
        return;
    }
    while (tp->graveyard) {
        struct weft_tp_grave *g = tp->graveyard;
        tp->graveyard = g->next;
        if (g->memh)
            ucp_mem_unmap(tp->ctx, g->memh);
        weft_big_free(g->p, g->len);
        weft_free(g);
    }
}

void weft_tp_comm_free(struct weft_comm *c)
{
    struct weft_transport *tp = c->tp;
    if (c->op.active) {
        if (c->failed == WEFT_OK)
            c->failed = WEFT_ERR_CANCELLED;
        weft_tp_op_finish(&c->op, WEFT_ERR_CANCELLED);
    }
    for (struct weft_comm **pp = &tp->groups; *pp; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    scratch_release(c);
    weft_tp_shm_free(c);
    comm_arrays_free(c);
}

void weft_comm_destroy(struct weft_comm *comm)
{
    if (!comm)
        return;
    if (comm == comm->tp->world) {
        WEFT_LOG_WARN("transport", "the world group is destroyed with its transport");
        return;
    }
    weft_tp_comm_free(comm);
}

int weft_comm_rank(const struct weft_comm *comm)
{
    return comm->rank;
}

int weft_comm_size(const struct weft_comm *comm)
{
    return comm->size;
}

weft_status_t weft_comm_status(const struct weft_comm *comm)
{
    if (comm->failed != WEFT_OK)
        return comm->failed;
    /* a revocation counts before a progress has applied it */
    return (weft_status_t)atomic_load(&comm->tp->revoked);
}

/* Scratch is mapped once per group, at its first collective that needs it, with huge pages
 * (a first touch of a 4 KiB page costs ~14 us here) and registered with UCX once. Its size is
 * fixed by the options: the ring's slots (two f32 slots per lane) bound everything else. */
weft_status_t weft_tp_scratch_need(struct weft_comm *c, size_t bytes)
{
    if (c->scratch)
        return bytes <= c->scratch_bytes ? WEFT_OK : WEFT_ERR_RANGE;
    const struct weft_transport_opts *o = &c->tp->opts;
    size_t size = 4 * (size_t)o->pipeline_depth * o->chunk_bytes;
    if (bytes > size)
        return WEFT_ERR_RANGE;
    char *p = weft_big_alloc(size);
    if (!p) {
        WEFT_LOG_ERROR("transport", "group %u: no memory for %zu bytes of scratch", c->id, size);
        return WEFT_ERR_NOMEM;
    }
    ucp_mem_map_params_t mp = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
        .address = p,
        .length = size,
    };
    ucs_status_t s = ucp_mem_map(c->tp->ctx, &mp, &c->scratch_memh);
    if (s != UCS_OK) {
        WEFT_LOG_ERROR("transport", "group %u: registering %zu bytes of scratch: %s", c->id, size,
                       ucs_status_string(s));
        weft_big_free(p, size);
        c->scratch_memh = NULL;
        return weft_tp_ucs_status(s);
    }
    c->scratch = p;
    c->scratch_bytes = size;
    return WEFT_OK;
}
