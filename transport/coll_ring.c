/* Ring collectives: all-reduce (reduce-scatter then all-gather), reduce-scatter, all-gather(v).
 *
 * The vector is cut into n blocks and every block into chunks of chunk_bytes; chunk c of every
 * block travels the ring as one "lane". Up to pipeline_depth lanes are in flight, so while one
 * chunk is reduced the next ones are already moving. At reduce-scatter step s a rank receives
 * block (rank - s - 2) from its left, adds its own part and passes it right; after n - 1 steps
 * it holds the sum of its own block, which the all-gather steps pass around the ring.
 *
 * Exactness: partial sums travel as f32 (the first step sends the raw input, which is exact),
 * and the owner rounds once when it adds the last term, so bf16/f16 results equal the f32 sum
 * of all inputs rounded once. The terms of block b are added in the order b+1, b+2, ..., b:
 * the order comm.h promises and the direct algorithm (coll_direct.c) reproduces bit for bit.
 *
 * Partial sums wait in two scratch slots per lane, used in turn: a lane receives step s into
 * slot s % 2 only once the send of step s - 1 from that slot has completed. With one slot per
 * lane every rank could wait for its right neighbour to free a slot, all around the ring. */
#include <string.h>

#include "common/log.h"
#include "transport/internal.h"

void weft_comm_block(size_t count, int n, int r, size_t *off_p, size_t *len_p)
{
    /* whole 64-byte lines of f32 per block, so chunks start on cache lines */
    size_t per = (count + (size_t)n - 1) / (size_t)n;
    per = (per + 15) & ~(size_t)15;
    size_t off = (size_t)r * per < count ? (size_t)r * per : count;
    *off_p = off;
    *len_p = count - off < per ? count - off : per;
}

static int mod(int a, int n)
{
    return ((a % n) + n) % n;
}

static size_t chunk_len(const struct weft_tp_op *op, int b, size_t c)
{
    const size_t *len = op->comm->len;
    size_t beg = c * op->chunk;
    if (beg >= len[b])
        return 0;
    return len[b] - beg < op->chunk ? len[b] - beg : op->chunk;
}

/* Input of block b, chunk c: the whole vector for reductions, only the own block for
 * all-gather. */
static const char *in_ptr(const struct weft_tp_op *op, int b, size_t c)
{
    size_t e = c * op->chunk + (op->nrs ? op->comm->off[b] : 0);
    return op->in + e * op->esize;
}

static char *out_ptr(const struct weft_tp_op *op, int b, size_t c)
{
    size_t e = c * op->chunk + (op->rs_own_out ? 0 : op->comm->off[b]);
    return op->out + e * op->esize;
}

static uint32_t sub(const struct weft_tp_op *op, size_t c, int s)
{
    return (uint32_t)((c * (size_t)op->steps + (size_t)s) & TAG_SUB_MASK);
}

static weft_status_t lane_start(struct weft_tp_op *op, struct weft_tp_stream *st, size_t c)
{
    struct weft_comm *comm = op->comm;
    int me = comm->rank, right = mod(me + 1, comm->size);
    st->c = c;
    st->s = 0;
    st->posted = false;
    st->live = true;
    if (op->nrs) {
        int b = mod(me - 1, comm->size);
        size_t n = chunk_len(op, b, c);
        return n ? weft_tp_op_fifo_send(op, right, sub(op, c, 0), in_ptr(op, b, c),
                                        n * op->esize, NULL)
                 : WEFT_OK;
    }
    size_t n = chunk_len(op, me, c);
    if (!n)
        return WEFT_OK;
    if (!op->in_place)
        memcpy(out_ptr(op, me, c), in_ptr(op, me, c), n * op->esize);
    return weft_tp_op_fifo_send(op, right, sub(op, c, 0), out_ptr(op, me, c), n * op->esize,
                                NULL);
}

/* Where step s lands: a slot for reduce-scatter (the raw first step of 16-bit data in its
 * upper half, see weft_tp_sum_first), the output for all-gather. */
static char *recv_ptr(const struct weft_tp_op *op, struct weft_tp_stream *st, int b, size_t n)
{
    int s = st->s;
    if (s >= op->nrs)
        return out_ptr(op, b, st->c);
    char *slot = st->slot[s & 1];
    return s == 0 && op->esize == 2 ? slot + n * 2 : slot;
}

static size_t recv_bytes(const struct weft_tp_op *op, int s, size_t n)
{
    return n * (s == 0 || s >= op->nrs ? op->esize : sizeof(float));
}

/* Step s of lane st has arrived: add and pass on. */
static weft_status_t lane_step(struct weft_tp_op *op, struct weft_tp_stream *st, int b, size_t n)
{
    struct weft_comm *comm = op->comm;
    int s = st->s, right = mod(comm->rank + 1, comm->size);
    size_t c = st->c;
    if (!n)
        return WEFT_OK; /* nothing travels for an empty chunk, on either side */
    if (s >= op->nrs) { /* all-gather: forward what came, except at the last step */
        if (s - op->nrs < op->nag - 1)
            return weft_tp_op_fifo_send(op, right, sub(op, c, s + 1), out_ptr(op, b, c),
                                        n * op->esize, NULL);
        return WEFT_OK;
    }
    const char *x = in_ptr(op, b, c);
    char *slot = st->slot[s & 1];
    if (s < op->nrs - 1) {
        if (s == 0)
            weft_tp_sum_first(slot, x, n, op->dtype);
        else
            weft_tp_sum_acc((float *)slot, x, n, op->dtype);
        return weft_tp_send(comm, right, weft_tp_op_tag(op, comm->rank, sub(op, c, s + 1)), slot,
                            n * sizeof(float), comm->scratch_memh, &st->send[s & 1]);
    }
    /* the last term of our own block: round once into the output */
    bool raw = s == 0;
    const char *acc = raw ? recv_ptr(op, st, b, n) : slot;
    weft_tp_sum_final(out_ptr(op, b, c), acc, raw && op->esize == 2, x, n, op->dtype);
    if (op->nag)
        return weft_tp_op_fifo_send(op, right, sub(op, c, s + 1), out_ptr(op, b, c),
                                    n * op->esize, NULL);
    return WEFT_OK;
}

static weft_status_t lane_advance(struct weft_tp_op *op, struct weft_tp_stream *st, int *moved)
{
    struct weft_comm *comm = op->comm;
    int me = comm->rank, left = mod(me - 1, comm->size);
    while (st->s < op->steps) {
        int s = st->s;
        int b = s < op->nrs ? mod(me - s - 2, comm->size) : mod(me - (s - op->nrs) - 1, comm->size);
        size_t n = chunk_len(op, b, st->c);
        if (!st->posted && n) {
            if (s < op->nrs) { /* the slot must be free: its last send done */
                weft_status_t t = weft_tp_send_test(comm, &st->send[s & 1]);
                if (t != WEFT_OK)
                    return t;
            }
            weft_status_t t = weft_tp_recv(comm, weft_tp_op_tag(op, left, sub(op, st->c, s)),
                                           recv_ptr(op, st, b, n), recv_bytes(op, s, n),
                                           s < op->nrs ? comm->scratch_memh : NULL, &st->recv);
            if (t != WEFT_OK)
                return t;
            *moved = 1;
        }
        st->posted = true;
        if (n) {
            weft_status_t t = weft_tp_recv_test(comm, &st->recv, recv_bytes(op, s, n));
            if (t != WEFT_OK)
                return t;
        }
        weft_status_t t = lane_step(op, st, b, n);
        if (t != WEFT_OK)
            return t;
        st->s++;
        st->posted = false;
        *moved = 1;
    }
    for (int p = 0; p < 2; p++) {
        weft_status_t t = weft_tp_send_test(comm, &st->send[p]);
        if (t != WEFT_OK)
            return t;
    }
    st->live = false;
    op->retired++;
    *moved = 1;
    return WEFT_OK;
}

weft_status_t weft_tp_ring_progress(struct weft_tp_op *op, int *moved)
{
    struct weft_comm *comm = op->comm;
    for (int i = 0; i < comm->depth; i++) {
        struct weft_tp_stream *st = &comm->st[i];
        if (!st->live) {
            if (op->next_stream == op->nstreams)
                continue;
            weft_status_t t = lane_start(op, st, op->next_stream++);
            if (t != WEFT_OK)
                return t;
            *moved = 1;
        }
        weft_status_t t = lane_advance(op, st, moved);
        if (t == WEFT_INPROGRESS)
            continue;
        if (t != WEFT_OK)
            return t;
        if (!st->live && op->next_stream < op->nstreams)
            i--; /* start the next lane in this slot pair at once */
    }
    weft_status_t t = weft_tp_op_fifo_reap(op, moved);
    if (t != WEFT_OK)
        return t;
    return op->retired == op->nstreams ? WEFT_OK : WEFT_INPROGRESS;
}

/* comm->off/len hold the blocks; in, out, count, in_place are set. */
weft_status_t weft_tp_ring_setup(struct weft_tp_op *op, bool rs, bool ag)
{
    struct weft_comm *comm = op->comm;
    const struct weft_transport_opts *o = &comm->tp->opts;
    int n = comm->size;
    op->nrs = rs ? n - 1 : 0;
    op->nag = ag ? n - 1 : 0;
    op->steps = op->nrs + op->nag;
    op->chunk = o->chunk_bytes / op->esize;
    size_t longest = 0;
    for (int b = 0; b < n; b++)
        if (comm->len[b] > longest)
            longest = comm->len[b];
    op->nstreams = (longest + op->chunk - 1) / op->chunk;
    if (rs) {
        weft_status_t st = weft_tp_scratch_need(comm, 0);
        if (st != WEFT_OK)
            return st;
        size_t slot = 2 * o->chunk_bytes; /* a chunk of 16-bit data widened to f32 */
        for (int i = 0; i < comm->depth; i++) {
            comm->st[i].slot[0] = comm->scratch + (2 * (size_t)i) * slot;
            comm->st[i].slot[1] = comm->scratch + (2 * (size_t)i + 1) * slot;
        }
    }
    for (int i = 0; i < comm->depth; i++)
        comm->st[i].live = false;
    return WEFT_INPROGRESS;
}

/* ---- the public calls ---- */

static weft_status_t local_reduce(struct weft_tp_op *op)
{
    /* one rank: the sum is the input, rounded once (exact for every type) */
    if (!op->in_place)
        memcpy(op->out, op->in, op->count * op->esize);
    return WEFT_OK;
}

weft_status_t weft_comm_allreduce_start(struct weft_comm *comm, const void *sendbuf,
                                        void *recvbuf, size_t count, enum weft_dtype dtype,
                                        struct weft_comm_req **req_p)
{
    struct weft_tp_op *op;
    weft_status_t st = weft_tp_check_dtype("allreduce", dtype, true);
    if (st == WEFT_OK && count && (!sendbuf || !recvbuf)) {
        WEFT_LOG_ERROR("transport", "allreduce: no buffer");
        st = WEFT_ERR_INVALID;
    }
    if (st == WEFT_OK)
        st = weft_tp_op_begin(comm, "allreduce", dtype, weft_tp_ring_progress, &op);
    if (st != WEFT_OK)
        return st;
    op->in = sendbuf;
    op->out = recvbuf;
    op->count = count;
    op->in_place = sendbuf == recvbuf;
    int n = comm->size;
    if (n == 1 || count == 0)
        return weft_tp_op_launch(op, n == 1 ? local_reduce(op) : WEFT_OK, req_p);
    const struct weft_transport_opts *o = &comm->tp->opts;
    size_t bytes = count * op->esize;
    size_t direct_need = (size_t)(n - 1) * bytes + 64 + count * sizeof(float);
    bool fits = direct_need <= 4 * (size_t)o->pipeline_depth * o->chunk_bytes;
    bool direct = fits && (o->allreduce_algo == WEFT_COMM_ALGO_DIRECT ||
                           (o->allreduce_algo == WEFT_COMM_ALGO_AUTO &&
                            bytes <= o->allreduce_direct_max));
    for (int b = 0; b < n; b++)
        weft_comm_block(count, n, b, &comm->off[b], &comm->len[b]);
    if (weft_comm_shm_fits(comm, bytes))
        return weft_tp_op_launch(op, weft_tp_shm_start(op, WEFT_SHM_ALLREDUCE), req_p);
    if (direct) {
        op->progress = weft_tp_direct_allreduce_progress;
        return weft_tp_op_launch(op, weft_tp_direct_allreduce_setup(op), req_p);
    }
    return weft_tp_op_launch(op, weft_tp_ring_setup(op, true, true), req_p);
}

weft_status_t weft_comm_reduce_scatter_start(struct weft_comm *comm, const void *sendbuf,
                                             void *recvbuf, size_t count, enum weft_dtype dtype,
                                             struct weft_comm_req **req_p)
{
    struct weft_tp_op *op;
    weft_status_t st = weft_tp_check_dtype("reduce_scatter", dtype, true);
    if (st == WEFT_OK && count && (!sendbuf || !recvbuf)) {
        WEFT_LOG_ERROR("transport", "reduce_scatter: no buffer");
        st = WEFT_ERR_INVALID;
    }
    if (st == WEFT_OK)
        st = weft_tp_op_begin(comm, "reduce_scatter", dtype, weft_tp_ring_progress, &op);
    if (st != WEFT_OK)
        return st;
    int n = comm->size;
    op->in = sendbuf;
    op->out = recvbuf;
    op->count = count;
    op->in_place = count && (const char *)sendbuf + (size_t)comm->rank * count * op->esize ==
                                (const char *)recvbuf;
    op->rs_own_out = true;
    if (n == 1 || count == 0) {
        if (n == 1 && !op->in_place)
            memcpy(op->out, op->in, count * op->esize);
        return weft_tp_op_launch(op, WEFT_OK, req_p);
    }
    for (int b = 0; b < n; b++) {
        comm->off[b] = (size_t)b * count;
        comm->len[b] = count;
    }
    return weft_tp_op_launch(op, weft_tp_ring_setup(op, true, false), req_p);
}

static weft_status_t allgather_begin(struct weft_comm *comm, const char *name,
                                     const void *sendbuf, void *recvbuf, const size_t *counts,
                                     size_t count, enum weft_dtype dtype,
                                     struct weft_comm_req **req_p)
{
    struct weft_tp_op *op;
    weft_status_t st = weft_tp_check_dtype(name, dtype, false);
    if (st == WEFT_OK)
        st = weft_tp_op_begin(comm, name, dtype, weft_tp_ring_progress, &op);
    if (st != WEFT_OK)
        return st;
    int n = comm->size;
    size_t total = 0;
    for (int b = 0; b < n; b++) {
        comm->off[b] = total;
        comm->len[b] = counts ? counts[b] : count;
        total += comm->len[b];
    }
    if (total && !recvbuf) {
        WEFT_LOG_ERROR("transport", "%s: no buffer", name);
        return weft_tp_op_launch(op, WEFT_ERR_INVALID, req_p);
    }
    op->in = sendbuf;
    op->out = recvbuf;
    op->count = total;
    size_t mine = comm->len[comm->rank];
    op->in_place = (const char *)sendbuf == (const char *)recvbuf + comm->off[comm->rank] * op->esize;
    if (mine && !sendbuf) {
        WEFT_LOG_ERROR("transport", "%s: no send buffer", name);
        return weft_tp_op_launch(op, WEFT_ERR_INVALID, req_p);
    }
    if (n == 1 || total == 0) {
        if (mine && !op->in_place)
            memcpy(op->out, op->in, mine * op->esize);
        return weft_tp_op_launch(op, WEFT_OK, req_p);
    }
    if (weft_comm_shm_fits(comm, total * op->esize))
        return weft_tp_op_launch(op, weft_tp_shm_start(op, WEFT_SHM_ALLGATHER), req_p);
    return weft_tp_op_launch(op, weft_tp_ring_setup(op, false, true), req_p);
}

weft_status_t weft_comm_allgather_start(struct weft_comm *comm, const void *sendbuf,
                                        void *recvbuf, size_t count, enum weft_dtype dtype,
                                        struct weft_comm_req **req_p)
{
    return allgather_begin(comm, "allgather", sendbuf, recvbuf, NULL, count, dtype, req_p);
}

weft_status_t weft_comm_allgatherv_start(struct weft_comm *comm, const void *sendbuf,
                                         void *recvbuf, const size_t *counts,
                                         enum weft_dtype dtype, struct weft_comm_req **req_p)
{
    if (!counts) {
        WEFT_LOG_ERROR("transport", "allgatherv: no counts");
        return WEFT_ERR_INVALID;
    }
    return allgather_begin(comm, "allgatherv", sendbuf, recvbuf, counts, 0, dtype, req_p);
}

weft_status_t weft_comm_allreduce(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                  size_t count, enum weft_dtype dtype)
{
    struct weft_comm_req *r;
    weft_status_t st = weft_comm_allreduce_start(comm, sendbuf, recvbuf, count, dtype, &r);
    return st == WEFT_OK ? weft_comm_wait(&r) : st;
}

weft_status_t weft_comm_reduce_scatter(struct weft_comm *comm, const void *sendbuf,
                                       void *recvbuf, size_t count, enum weft_dtype dtype)
{
    struct weft_comm_req *r;
    weft_status_t st = weft_comm_reduce_scatter_start(comm, sendbuf, recvbuf, count, dtype, &r);
    return st == WEFT_OK ? weft_comm_wait(&r) : st;
}

weft_status_t weft_comm_allgather(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                  size_t count, enum weft_dtype dtype)
{
    struct weft_comm_req *r;
    weft_status_t st = weft_comm_allgather_start(comm, sendbuf, recvbuf, count, dtype, &r);
    return st == WEFT_OK ? weft_comm_wait(&r) : st;
}

weft_status_t weft_comm_allgatherv(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                   const size_t *counts, enum weft_dtype dtype)
{
    struct weft_comm_req *r;
    weft_status_t st = weft_comm_allgatherv_start(comm, sendbuf, recvbuf, counts, dtype, &r);
    return st == WEFT_OK ? weft_comm_wait(&r) : st;
}
