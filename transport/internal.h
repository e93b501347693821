/* transport internals shared by its files (symbols weft_tp_*); nothing outside transport/
 * includes this header, so UCX types stop here. */
#ifndef WEFT_TRANSPORT_INTERNAL_H
#define WEFT_TRANSPORT_INTERNAL_H

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <ucp/api/ucp.h>

#include "transport/comm.h"

/* 64-bit UCX tags. A receive always matches the whole tag, so a message can only meet the
 * receive of the same group, the same collective, the same sender and the same step:
 *
 *   63..48 group id   47 point-to-point   46..28 sequence   27..16 sender (group rank)
 *   15..0  step/chunk ("sub")
 *
 * Point-to-point messages put the user's 32-bit tag in sequence (high 16 bits) and sub. The
 * collective sequence number wraps after 2^19 collectives on one group and the sub index after
 * 65536 messages between two ranks in one collective; neither can alias a message still in
 * flight, as a collective finishes before the next starts and a pipeline keeps only a few
 * chunks in flight. */
#define TAG_GROUP_SHIFT 48
#define TAG_P2P_BIT ((uint64_t)1 << 47)
#define TAG_SEQ_SHIFT 28
#define TAG_SEQ_MASK 0x7ffffu
#define TAG_SRC_SHIFT 16
#define TAG_SRC_LIMIT 4096 /* largest group */
#define TAG_SUB_MASK 0xffffu
#define TAG_GROUP_MAX 0xffffu

/* Little-endian u32 in the bootstrap and liveness wire formats. */
static inline void weft_tp_put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline uint32_t weft_tp_get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t weft_tp_tag(uint32_t gid, uint32_t seq, int src, uint32_t sub)
{
    return ((uint64_t)gid << TAG_GROUP_SHIFT) | ((uint64_t)(seq & TAG_SEQ_MASK) << TAG_SEQ_SHIFT) |
           ((uint64_t)(unsigned)src << TAG_SRC_SHIFT) | (sub & TAG_SUB_MASK);
}

static inline uint64_t weft_tp_tag_p2p(uint32_t gid, uint32_t user, int src)
{
    return weft_tp_tag(gid, user >> 16, src, user & TAG_SUB_MASK) | TAG_P2P_BIT;
}

enum weft_tp_peer {
    PEER_UP,
    PEER_DEPARTED, /* said goodbye: finished normally */
    PEER_LOST,     /* its liveness socket closed without a goodbye */
};

enum weft_tp_req_kind {
    REQ_SEND,
    REQ_RECV,
    REQ_COLL,
};

struct weft_comm_req {
    enum weft_tp_req_kind kind;
    struct weft_comm *comm;
    weft_status_t status; /* WEFT_INPROGRESS while it runs */
    int64_t deadline_ns;
    void *ucp;            /* point-to-point: the UCX request, NULL once complete */
    int peer;             /* point-to-point: group rank */
    size_t bytes;
    struct weft_comm_req *next_free;
};

/* One pipeline lane of the ring and chain collectives: a chunk index that travels the ring,
 * one receive posted at a time and two scratch slots used in turn (receive into one while the
 * other is still being sent: with one slot the ring could wait on itself). */
struct weft_tp_stream {
    size_t c;
    int s;          /* next receive step */
    bool live;
    bool posted;    /* the receive of step s is posted */
    void *recv;
    void *send[2];
    char *slot[2];
};

struct weft_tp_op;
typedef weft_status_t (*weft_tp_op_cb)(struct weft_tp_op *op, int *moved);

/* The collective in flight on a group (at most one). */
struct weft_tp_op {
    struct weft_comm_req req; /* handed to the caller */
    struct weft_comm *comm;
    const char *name;
    weft_tp_op_cb progress;
    uint32_t seq;
    enum weft_dtype dtype;
    size_t esize;
    const char *in;
    char *out;
    size_t count;
    int root;
    bool in_place;
    int phase;
    /* sends nobody waits for individually, reaped in order */
    void **fifo;
    size_t fifo_cap, fifo_head, fifo_len;
    /* ring / chain pipeline */
    int nrs, nag, steps; /* reduce-scatter steps, all-gather steps, their sum */
    size_t chunk;        /* elements per chunk */
    size_t nstreams, next_stream, retired;
    size_t posted, done; /* chain and pairwise: chunks posted and completed */
    bool rs_own_out;     /* reduce-scatter: out holds only this rank's block */
    struct weft_tp_op *next_active;
    bool active;
};

struct weft_comm {
    struct weft_transport *tp;
    uint32_t id;
    int rank, size;
    int *ranks;     /* world rank of each group rank */
    ucp_ep_h *eps;  /* endpoint of each group rank */
    uint32_t seq;
    weft_status_t failed;
    /* registered scratch: ring slots, direct all-reduce inputs, in-place staging */
    char *scratch;
    size_t scratch_bytes;
    ucp_mem_h scratch_memh;
    /* per-call layouts in elements: blocks, send side, receive side */
    size_t *off, *len, *soff, *slen;
    void **rreq; /* a receive per group rank (direct algorithms) */
    struct weft_tp_stream *st;
    int depth;
    struct weft_tp_op op;
    bool busy; /* op handed out and not yet released */
    /* the shared-memory path (shm.c): decided when the group is created */
    enum { SHM_UNKNOWN, SHM_SETUP, SHM_ON, SHM_OFF } shm_state;
    struct weft_tp_shm *shm;
    struct weft_comm *next;
};

/* Scratch of a failed group: UCX may still hold sends from it, so it is unmapped only after
 * the worker is destroyed. */
struct weft_tp_grave {
    char *p;
    size_t len;
    ucp_mem_h memh;
    struct weft_tp_grave *next;
};

struct weft_transport {
    struct weft_transport_opts opts;
    char tls[256];
    int rank, size;
    ucp_context_h ctx;
    ucp_worker_h worker;
    int efd;
    int has_cuda;
    ucp_ep_h *eps;
    int *sock;                 /* liveness socket per world rank, -1 for self or closed; changed
                                  under sock_lock once the world exists (revoke reads it) */
    pthread_mutex_t sock_lock;
    enum weft_tp_peer *peer;
    struct pollfd *pfd;        /* [0] the worker's event fd, [1 + r] the liveness socket of
                                  rank r, [1 + size] wake_fd */
    int npfd;
    /* revocation and freeze detection (revoke.c); the atomics are shared with other threads */
    atomic_int revoked;        /* 0, or the peer-lost status the world was revoked with */
    atomic_int in_ucx;         /* the owning thread is inside a UCX call of this world */
    atomic_llong alive_ns;     /* CLOCK_BOOTTIME when this process was last seen running */
    bool revoke_applied;       /* the owning thread has failed the groups */
    bool freeze_armed;         /* gaps count: from the end of create to the end of destroy */
    int wake_fd;               /* eventfd, readable once revoked (wakes a sleeping wait) */
    int watch_fd;              /* eventfd that stops the freeze watchdog */
    pthread_t watch;
    bool watching;
    int64_t next_sentinel_ns;
    struct weft_comm *world;
    struct weft_comm *groups;
    struct weft_tp_op *active;
    struct weft_comm_req *free_reqs;
    void **req_blocks;
    size_t n_req_blocks;
    struct weft_tp_grave *graveyard;
    /* Abandoned receives UCX was still running (a matched rendezvous: its copy may be queued
     * in UCX), held until UCX reports them done. */
    void **zombies;
    size_t n_zombies, cap_zombies;
    bool zombie_lost; /* one could not be recorded (no memory): count it as running forever */
};

/* ---- time ---- */
int64_t weft_tp_now_ns(void);
int64_t weft_tp_deadline(const struct weft_transport *tp);

/* ---- UCX setup and status codes (ucx.c): the one place both worlds and links make a UCX
 * context and worker ---- */
struct weft_tp_ucx_params {
    const char *subsys;    /* log subsystem of the messages */
    const char *name;      /* the UCX context's name */
    const char *tls_key;   /* the setting a refused tls is reported as */
    const char *tls;       /* UCX_TLS value; NULL or "" leaves UCX's choice */
    uint64_t features;     /* UCP_FEATURE_*; wakeup is always added */
    size_t estimated_eps;  /* 0: no estimate */
};
struct weft_tp_ucx {
    ucp_context_h ctx;
    ucp_worker_h worker; /* single-thread mode */
    int efd;             /* the worker's event descriptor (ucp_worker_arm, then poll) */
};
/* Reads UCX's configuration (UCX_* from the environment, tls over UCX_TLS), creates the
 * context and worker and gets the event descriptor; logs the failure (and undoes what it
 * made). The caller destroys the worker, then cleans the context up. */
weft_status_t weft_tp_ucx_open(const struct weft_tp_ucx_params *p, struct weft_tp_ucx *ucx_p);
weft_status_t weft_tp_ucs_status(ucs_status_t s);

/* ---- rendezvous client (rendezvous.c) ---- */
struct weft_tp_peer_info {
    struct sockaddr_storage sentinel; /* where its liveness listener is */
    socklen_t sentinel_len;
    const void *addr;                 /* UCX worker address */
    size_t addr_len;
};
struct weft_tp_table {
    int size;
    struct weft_tp_peer_info *peers;
    void *blob;
};
/* The client side of the rendezvous, for weft_transport_create: causes go to err (logged). */
weft_status_t weft_tp_rdv_connect(const char *where, int64_t deadline, int *fd_p,
                                  struct weft_error *err);
weft_status_t weft_tp_rdv_exchange(int fd, int rank, int size, uint16_t sentinel_port,
                                   const void *addr, size_t addr_len, int64_t deadline,
                                   struct weft_tp_table *table_p, struct weft_error *err);
void weft_tp_table_free(struct weft_tp_table *table);
/* A non-blocking TCP connection, established before deadline (errno says why not). */
weft_status_t weft_tp_connect(const struct sockaddr *sa, socklen_t len, int64_t deadline,
                              int *fd_p);
/* Blocking-style I/O on a non-blocking socket, bounded by deadline. */
weft_status_t weft_tp_io_full(int fd, void *buf, size_t len, bool write, int64_t deadline);

/* ---- liveness sockets (sentinel.c) ---- */
weft_status_t weft_tp_sentinel_listen(int rdv_fd, int backlog, int *lfd_p, uint16_t *port_p);
weft_status_t weft_tp_sentinel_mesh(struct weft_transport *tp, int lfd,
                                    const struct weft_tp_table *table, int64_t deadline);
/* Read what the liveness sockets say (no wait); marks peers departed or lost (logged) and
 * returns how many were newly lost. Their groups are failed by the caller. */
int weft_tp_sentinel_check(struct weft_transport *tp);
void weft_tp_sentinel_close(struct weft_transport *tp);

/* ---- groups (group.c) ---- */
weft_status_t weft_tp_comm_new(struct weft_transport *tp, int n, const int *ranks, uint32_t id,
                               struct weft_comm **comm_p);
void weft_tp_comm_free(struct weft_comm *comm);
/* memory_only: the worker is left in place (transport.c): free the memory, keep the records
 * and their registrations (the worker's keeper takes them). */
void weft_tp_graveyard_free(struct weft_transport *tp, bool memory_only);

/* ---- revocation and freeze detection (revoke.c) ---- */
weft_status_t weft_tp_revoke_init(struct weft_transport *tp);
void weft_tp_revoke_cleanup(struct weft_transport *tp);
/* Start and stop the thread that revokes the world when this process was frozen (only with
 * opts.freeze_ms). */
weft_status_t weft_tp_watch_start(struct weft_transport *tp);
void weft_tp_watch_stop(struct weft_transport *tp);
/* Every UCX call of the world that can move data (progress, arm, send, receive, flush, close)
 * runs between these, on the owning thread, never nested. enter is false once the world is
 * revoked, or when it finds this process was frozen (it revokes the world then); there is
 * nothing to leave then. */
bool weft_tp_ucx_enter(struct weft_transport *tp);
void weft_tp_ucx_leave(struct weft_transport *tp);
/* Between two UCX calls inside one enter/leave (leave follows either way): false when the
 * world was revoked meanwhile, or the call that just returned was frozen (the world is then
 * revoked here). *last_ns: CLOCK_BOOTTIME of the previous call, updated. */
bool weft_tp_ucx_again(struct weft_transport *tp, int64_t *last_ns);
int64_t weft_tp_boot_ns(void);
/* The owning thread's side of a revocation: fail every group (once). The revocation status,
 * or WEFT_OK while the world is not revoked. */
weft_status_t weft_tp_revoke_apply(struct weft_transport *tp);
/* For UCX's log filter: a CMA copy that found no memory at its address is expected in the
 * world this thread is in UCX for (revoked, frozen, or a peer lost or leaving). */
bool weft_tp_cma_fault_expected(void);
/* The same for a copy of world tp's (the shared-memory path's own CMA reads) among the n world
 * ranks in ranks (a group's members; NULL: the whole world): a member lost or leaving, not any
 * rank of the world. */
bool weft_tp_cma_fault_expected_in(struct weft_transport *tp, const int *ranks, int n);

/* ---- progress and waits (wait.c) ---- */
/* One pass: UCX, liveness when due, every collective in flight. Returns events seen. */
unsigned weft_tp_progress(struct weft_transport *tp);
/* Fail every group with a lost member. */
void weft_tp_lost_apply(struct weft_transport *tp);
/* Fail a group for good: abort its collective, remember status. */
void weft_tp_comm_fail(struct weft_comm *comm, weft_status_t status);
/* Sleep until UCX or a liveness socket has news, or until deadline. */
void weft_tp_sleep(struct weft_transport *tp, int64_t deadline);

/* ---- UCX messages (p2p.c) ---- */
weft_status_t weft_tp_send(struct weft_comm *comm, int peer, uint64_t tag, const void *buf,
                           size_t bytes, ucp_mem_h memh, void **req_p);
weft_status_t weft_tp_recv(struct weft_comm *comm, uint64_t tag, void *buf, size_t bytes,
                           ucp_mem_h memh, void **req_p);
/* WEFT_OK once done (the request is released and *req_p set NULL), WEFT_INPROGRESS, or the
 * failure (logged, request released). A receive must have brought exactly bytes. */
weft_status_t weft_tp_send_test(struct weft_comm *comm, void **req_p);
weft_status_t weft_tp_recv_test(struct weft_comm *comm, void **req_p, size_t bytes);
/* Give a request back to UCX without waiting (a receive is cancelled first; one UCX was
 * already filling becomes a zombie). */
void weft_tp_abandon(struct weft_comm *comm, void **req_p, bool recv);
void weft_tp_reqs_free(struct weft_transport *tp);
/* Release the zombies UCX has finished (no progress); returns how many still run. */
size_t weft_tp_zombies_reap(struct weft_transport *tp);
/* Release every zombie (before the worker is destroyed) and the list. */
void weft_tp_zombies_free(struct weft_transport *tp);

/* ---- collectives (op.c) ---- */
weft_status_t weft_tp_op_begin(struct weft_comm *comm, const char *name, enum weft_dtype dtype,
                               weft_tp_op_cb progress, struct weft_tp_op **op_p);
/* Put the op on the active list (or finish it at once when status is not INPROGRESS). */
weft_status_t weft_tp_op_launch(struct weft_tp_op *op, weft_status_t status,
                                struct weft_comm_req **req_p);
void weft_tp_op_finish(struct weft_tp_op *op, weft_status_t status);
/* Cancel every UCX request the op holds. */
void weft_tp_op_abort(struct weft_tp_op *op);
uint64_t weft_tp_op_tag(const struct weft_tp_op *op, int src, uint32_t sub);
/* A send nobody waits for by itself: reaped in order by weft_tp_op_fifo_reap. */
weft_status_t weft_tp_op_fifo_send(struct weft_tp_op *op, int peer, uint32_t sub,
                                   const void *buf, size_t bytes, ucp_mem_h memh);
/* WEFT_OK when every such send is done, WEFT_INPROGRESS, or a failure. */
weft_status_t weft_tp_op_fifo_reap(struct weft_tp_op *op, int *moved);
weft_status_t weft_tp_scratch_need(struct weft_comm *comm, size_t bytes);
weft_status_t weft_tp_check_dtype(const char *name, enum weft_dtype dtype, bool reduce);

/* ---- reductions (reduce.c): sums in f32, element order fixed by the caller ---- */
/* acc (f32, n) = raw (dtype, the same memory, n) + x (dtype). */
void weft_tp_sum_first(void *acc, const void *x, size_t n, enum weft_dtype dtype);
/* acc (f32) += x (dtype). */
void weft_tp_sum_acc(float *acc, const void *x, size_t n, enum weft_dtype dtype);
/* out (dtype) = round(acc + x); acc is f32, or raw dtype when raw is set. out may be x. */
void weft_tp_sum_final(void *out, const void *acc, bool raw, const void *x, size_t n,
                       enum weft_dtype dtype);
/* acc (f32) = x (dtype). */
void weft_tp_sum_load(float *acc, const void *x, size_t n, enum weft_dtype dtype);
/* out (dtype) = round(acc). */
void weft_tp_sum_store(void *out, const float *acc, size_t n, enum weft_dtype dtype);

/* ---- collective engines ---- */
/* Ring reduce-scatter and/or all-gather over the blocks comm->off/len (coll_ring.c). */
weft_status_t weft_tp_ring_progress(struct weft_tp_op *op, int *moved);
weft_status_t weft_tp_ring_setup(struct weft_tp_op *op, bool rs, bool ag);
weft_status_t weft_tp_direct_allreduce_progress(struct weft_tp_op *op, int *moved);
weft_status_t weft_tp_direct_allreduce_setup(struct weft_tp_op *op);

/* ---- shared-memory collectives (shm.c) ---- */
/* At the group's creation, decide with every member whether it takes the shared-memory path
 * (two exchanges over UCX); a failure of them is the group's (peer lost). */
weft_status_t weft_tp_shm_setup(struct weft_comm *comm);
/* Start the op on the shared-memory path; the layouts are set as for the UCX engines
 * (comm->off/len, and soff/slen for all-to-all). WEFT_INPROGRESS, or a failure. */
enum weft_tp_shm_kind {
    WEFT_SHM_BARRIER,
    WEFT_SHM_ALLREDUCE,
    WEFT_SHM_ALLGATHER,
    WEFT_SHM_ALLTOALL,
    WEFT_SHM_BCAST,
};
weft_status_t weft_tp_shm_start(struct weft_tp_op *op, enum weft_tp_shm_kind kind);
/* The op failed on this rank (weft_tp_op_abort): where it is a shared-memory all-reduce whose
 * peers may be writing into this rank's output, that output is moved out of their reach. */
void weft_tp_shm_abort(struct weft_tp_op *op);
/* Sleep on the doorbell when the collectives in flight are all shared-memory ones (at most a
 * millisecond); false when there is UCX work to sleep on instead. */
bool weft_tp_shm_sleep(struct weft_transport *tp, int64_t deadline);
void weft_tp_shm_free(struct weft_comm *comm);

#endif
