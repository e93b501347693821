/* transport: UCX process groups, point-to-point messages and weft's own collectives.
 *
 * One struct weft_transport per process holds the UCX context and worker, an endpoint to every
 * rank of the world (connected by worker address, so UCX uses shared memory and CMA on one
 * host) and a liveness socket to every rank. A rendezvous (struct weft_rdv_server) hands every
 * rank the table of addresses. Process groups (struct weft_comm) are the world or any list of
 * world ranks; each has its own tag space, sequence numbers and registered scratch memory.
 *
 * Every call that waits has a deadline (opts.timeout_ms from its start). A peer that dies makes
 * the waiting call return WEFT_ERR_PEER_LOST, a silent one WEFT_ERR_TIMEOUT (both in the "peer
 * lost" range of weft_status_t); the group is then failed for good and returns that status to
 * every later call. The UCX requests of a failed call are abandoned, not waited for: if the
 * peer was only silent and comes back, UCX may still read that call's send buffers (and fill
 * a receive it had matched) until the transport is destroyed or revoked. A world that must not go on (its process was told to
 * reset, or was frozen) is revoked: weft_transport_revoke below. Knows nothing about models.
 *
 * Threading: a world and its groups are driven by one thread at a time (the "owning thread":
 * UCX runs in single-thread mode); only weft_transport_revoke may be called from other threads.
 * A world created with opts.freeze_ms runs a watchdog thread of its own.
 *
 * Buffers are host memory. A later issue adds CUDA device buffers: UCX moves them itself when
 * its build has CUDA transports (weft_transport_has_cuda()), otherwise they are staged through
 * the group's registered scratch, which is then allocated pinned. */
#ifndef WEFT_TRANSPORT_COMM_H
#define WEFT_TRANSPORT_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct weft_transport;
struct weft_comm;
struct weft_comm_req;
struct weft_rdv_server;

/* Order matches the allreduce_algo choices of [transport] in conf/. */
enum weft_comm_algo {
    WEFT_COMM_ALGO_AUTO,
    WEFT_COMM_ALGO_RING,
    WEFT_COMM_ALGO_DIRECT,
    WEFT_COMM_ALGO_COUNT
};

/* The [transport] settings; the caller fills every field (from struct weft_conf_transport). */
struct weft_transport_opts {
    const char *tls;             /* UCX_TLS value; NULL or "" leaves UCX's choice */
    size_t chunk_bytes;          /* pipelining unit of ring and chain collectives */
    int pipeline_depth;          /* chunks in flight per collective */
    enum weft_comm_algo allreduce_algo;
    size_t allreduce_direct_max; /* auto: direct all-reduce up to this many bytes */
    int timeout_ms;              /* deadline of every wait */
    int spin_us;                 /* poll this long before sleeping on the event descriptor;
                                    -1: 50 if this host has a core per local rank, else 0 */
    bool shm;                    /* groups whose ranks all run on this host move their
                                    collectives through shared memory (transport/shm.c) */
    size_t shm_max;              /* ... those of at most this many bytes per rank (0: all)
                                    where the group cannot read private buffers by CMA */
    int freeze_ms;               /* a process found not to have run for longer than this
                                    (stopped, paused) revokes its world; 0: off, else >= 20.
                                    Below the time after which peers give up on a silent rank
                                    (the worker uses [cluster] worker_timeout_ms / 2) */
};

/* ---- Rendezvous ------------------------------------------------------------------------- */

/* Listen on host:port (port 0: ephemeral) for size ranks. A failure is logged and recorded in
 * err (its text reaches the coordinator's API). */
weft_status_t weft_rdv_server_create(const char *host, uint16_t port, int size,
                                     struct weft_rdv_server **srv_p, struct weft_error *err);
void weft_rdv_server_destroy(struct weft_rdv_server *srv);
uint16_t weft_rdv_server_port(const struct weft_rdv_server *srv);
/* The descriptor to watch for readability (an event loop calls progress when it is). */
int weft_rdv_server_fd(const struct weft_rdv_server *srv);
/* Accept, read and answer for at most timeout_ms (0: only what is ready now). WEFT_OK once
 * every rank has been sent the table, WEFT_INPROGRESS before. A malformed or duplicate
 * registration is logged and its connection dropped; the others are not disturbed. */
weft_status_t weft_rdv_server_progress(struct weft_rdv_server *srv, int timeout_ms);

/* ---- Transport (one per process) --------------------------------------------------------- */

/* Join the world as rank of size through the rendezvous at "host:port". Collective: every
 * rank must call it; returns when every endpoint is connected. A failure is logged where it
 * is met and err gets its cause (a worker reports it to the coordinator): the options' and
 * the rendezvous' own text, the status of a later step. */
weft_status_t weft_transport_create(const struct weft_transport_opts *opts, int rank, int size,
                                    const char *rendezvous, struct weft_transport **tp_p,
                                    struct weft_error *err);
/* Destroys the groups left, flushes what this rank sent and tells the peers it leaves. */
void weft_transport_destroy(struct weft_transport *tp);
int weft_transport_rank(const struct weft_transport *tp);
int weft_transport_size(const struct weft_transport *tp);
/* The group of every rank (id 0); owned by the transport. */
struct weft_comm *weft_transport_world(struct weft_transport *tp);
/* Whether UCX can move CUDA memory itself (false on Debian's UCX). */
int weft_transport_has_cuda(const struct weft_transport *tp);
/* Progress UCX and every operation in flight once, without waiting. WEFT_OK, or the status
 * the world was revoked with. */
weft_status_t weft_transport_progress(struct weft_transport *tp);

/* ---- Revocation -------------------------------------------------------------------------- */

/* Abandon the world for good: this process takes no further part in it (its coordinator said
 * reset, its control link was lost). why: the status every wait, collective and group of the
 * world returns from now on; one outside the peer-lost range is taken as WEFT_ERR_PEER_LOST.
 *
 * Threading: any thread may call it, any number of times (the first status stays), while the
 * owning thread computes, runs a collective or sleeps in a wait; not from a signal handler, and
 * it must have returned before weft_transport_destroy starts. It returns at once, or as soon as
 * the UCX call the owning thread is inside (microseconds) has returned.
 *
 * On return:
 *  - no UCX call of the world runs and none will start (the world never progresses again), so
 *    this process's UCX never again copies from or to a peer's memory or the buffers handed to
 *    the world's operations, in flight or not: the caller may free them;
 *  - every peer reads this rank as lost at once (its liveness socket is shut down): a peer
 *    still in a collective with it fails that collective with WEFT_ERR_PEER_LOST, and a copy
 *    from memory this process frees afterwards fails there instead of aborting it;
 *  - a wait or collective on the owning thread returns why within a millisecond or so (a
 *    sleeping wait is woken); later calls on the world and its groups (weft_comm_status too)
 *    return it at once, and a group created afterwards is born failed with it.
 * Then destroy the world as usual: weft_transport_destroy neither flushes nor progresses a
 * revoked world; the endpoints go with the UCX worker, without a word to the peers. (When UCX
 * was still filling a receive at the revocation, it may hold a copy it cannot drop without
 * running it: that worker is then left in place, unused, until the process exits, about 5 MiB
 * and 15 descriptors, with a warning.)
 *
 * Freeze: with opts.freeze_ms, the world revokes itself (WEFT_ERR_TIMEOUT, one error line
 * "this process was frozen for N ms") as soon as the process runs again after not running for
 * longer than that (SIGSTOP, a paused VM or host), before its UCX progresses again: its peers
 * may have given up on it and freed what its operations in flight would copy. */
void weft_transport_revoke(struct weft_transport *tp, weft_status_t why);

/* ---- Process groups ---------------------------------------------------------------------- */

/* A group of n world ranks (ranks[i] becomes group rank i; the caller must be one of them).
 * id (1..65535) names the group's tag space: every member passes the same id, and the groups
 * one process belongs to have different ids (groups with no common member may share one).
 * Collective over the members, as MPI_Comm_create is: they agree whether the group's
 * collectives go through shared memory (two small all-gathers), so every member creates its
 * groups in an order the others' agree with, and a member that never comes fails the creation
 * with "timed out" after opts.timeout_ms (a dead one with "peer lost"). A group of a failed or
 * revoked world is born failed, without a message. */
weft_status_t weft_comm_create(struct weft_transport *tp, int n, const int *ranks, uint32_t id,
                               struct weft_comm **comm_p);
void weft_comm_destroy(struct weft_comm *comm);
int weft_comm_rank(const struct weft_comm *comm);
int weft_comm_size(const struct weft_comm *comm);
/* WEFT_OK, or the peer-lost status the group failed with. */
weft_status_t weft_comm_status(const struct weft_comm *comm);
/* Whether the group's collectives go through shared memory ([transport] shm, every member on
 * this host): decided by all members when the group was created. A
 * buffer from weft_big_alloc_shared (common/alloc.h) is then read by the peers in place, any
 * other is copied once into a shareable staging buffer. */
bool weft_comm_uses_shm(const struct weft_comm *comm);
/* Whether it reads its members' large private buffers in place by CMA (process_vm_readv)
 * rather than through a staging copy: every member could read every other's memory when the
 * group was created. */
bool weft_comm_uses_cma(const struct weft_comm *comm);
/* Whether its last shared-memory call was an all-reduce in which the owner of each block wrote
 * its sum straight into every member's output (one phase instead of two): every member's
 * output was a buffer from weft_big_alloc_shared. */
bool weft_comm_shm_pushed(const struct weft_comm *comm);
/* Whether processes of this host may read each other's memory by CMA, as the groups' set-up
 * finds it (a forked child reads this process). Allows any process of this user to read this
 * one (PR_SET_PTRACER_ANY, what every rank of a shared-memory group does) before it asks. */
bool weft_transport_cma_allowed(void);
/* Whether a collective of bytes per rank takes the shared-memory path: the group uses it, and
 * either reads its members' large private buffers by CMA (every size then) or bytes is within
 * [transport] shm_max (0: every size). SIZE_MAX: sizes that differ between the members
 * (all-to-all with counts), which without CMA take it only with shm_max 0. */
bool weft_comm_shm_fits(const struct weft_comm *comm, size_t bytes);

/* ---- Point-to-point ---------------------------------------------------------------------- */

/* Non-blocking tagged messages between group ranks. A receive must be given the exact size
 * the sender sent (else WEFT_ERR_PROTOCOL). The buffer belongs to the operation until it
 * completes. The request is the caller's until weft_comm_test/wait* report it complete. */
weft_status_t weft_comm_isend(struct weft_comm *comm, int peer, uint32_t tag, const void *buf,
                              size_t bytes, struct weft_comm_req **req_p);
weft_status_t weft_comm_irecv(struct weft_comm *comm, int peer, uint32_t tag, void *buf,
                              size_t bytes, struct weft_comm_req **req_p);

/* Progress; WEFT_INPROGRESS while *req runs, else its final status, with *req released and set
 * to NULL. A NULL *req is WEFT_OK. */
weft_status_t weft_comm_test(struct weft_comm_req **req);
/* Wait for every non-NULL reqs[i] (each until its own deadline) and release it; returns
 * WEFT_OK or the first failure. Collectives and messages may be mixed. */
weft_status_t weft_comm_waitall(int n, struct weft_comm_req **reqs);
weft_status_t weft_comm_wait(struct weft_comm_req **req);

/* ---- Collectives ------------------------------------------------------------------------- */
/* Every member calls the same collectives on a group in the same order. Counts are elements.
 * One collective at a time per group (a second start is WEFT_ERR_BUSY); collectives on
 * different groups may be in flight together. The _start forms return a request for
 * weft_comm_wait*; the plain forms wait for it.
 *
 * Sums (all-reduce, reduce-scatter) are computed in f32 and rounded once to the element type.
 * Element i is summed in ring order: starting at the rank after the owner of i's block and
 * ending with the owner, x[o+1] + x[o+2] + ... + x[o+n] (ranks mod n), where the owner is the
 * rank r whose weft_comm_block() range holds i (for reduce-scatter, the rank that receives the
 * block). Every algorithm produces these exact bits. */

/* The all-reduce block of rank r (of n) in a vector of count elements. */
void weft_comm_block(size_t count, int n, int r, size_t *off_p, size_t *len_p);

weft_status_t weft_comm_barrier(struct weft_comm *comm);
weft_status_t weft_comm_barrier_start(struct weft_comm *comm, struct weft_comm_req **req_p);

/* buf on root is sent to every rank's buf. */
weft_status_t weft_comm_bcast(struct weft_comm *comm, void *buf, size_t count,
                              enum weft_dtype dtype, int root);
weft_status_t weft_comm_bcast_start(struct weft_comm *comm, void *buf, size_t count,
                                    enum weft_dtype dtype, int root,
                                    struct weft_comm_req **req_p);

/* recvbuf[r * count ...] = sendbuf of rank r. In place: sendbuf == recvbuf + rank * count. */
weft_status_t weft_comm_allgather(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                  size_t count, enum weft_dtype dtype);
weft_status_t weft_comm_allgather_start(struct weft_comm *comm, const void *sendbuf,
                                        void *recvbuf, size_t count, enum weft_dtype dtype,
                                        struct weft_comm_req **req_p);

/* Rank r contributes counts[r] elements (any may be 0); recvbuf holds them one after the other
 * in rank order. In place: sendbuf == recvbuf + (counts[0] + ... + counts[rank - 1]). */
weft_status_t weft_comm_allgatherv(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                   const size_t *counts, enum weft_dtype dtype);
weft_status_t weft_comm_allgatherv_start(struct weft_comm *comm, const void *sendbuf,
                                         void *recvbuf, const size_t *counts,
                                         enum weft_dtype dtype, struct weft_comm_req **req_p);

/* sendbuf holds size * count elements; rank r receives the sum of block r. In place:
 * recvbuf == sendbuf + rank * count. */
weft_status_t weft_comm_reduce_scatter(struct weft_comm *comm, const void *sendbuf,
                                       void *recvbuf, size_t count, enum weft_dtype dtype);
weft_status_t weft_comm_reduce_scatter_start(struct weft_comm *comm, const void *sendbuf,
                                             void *recvbuf, size_t count, enum weft_dtype dtype,
                                             struct weft_comm_req **req_p);

/* Sum over the group. In place: sendbuf == recvbuf. */
weft_status_t weft_comm_allreduce(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                  size_t count, enum weft_dtype dtype);
weft_status_t weft_comm_allreduce_start(struct weft_comm *comm, const void *sendbuf,
                                        void *recvbuf, size_t count, enum weft_dtype dtype,
                                        struct weft_comm_req **req_p);

/* Block j of sendbuf (count elements) goes to rank j, which stores it as its block rank.
 * In place: sendbuf == recvbuf. */
weft_status_t weft_comm_alltoall(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                 size_t count, enum weft_dtype dtype);
weft_status_t weft_comm_alltoall_start(struct weft_comm *comm, const void *sendbuf,
                                       void *recvbuf, size_t count, enum weft_dtype dtype,
                                       struct weft_comm_req **req_p);

/* sendcounts[j] elements go to rank j, recvcounts[j] come from it; blocks are packed in rank
 * order on both sides, any count may be 0. In place (sendbuf == recvbuf) needs sendcounts[j]
 * == recvcounts[j] for every j. */
weft_status_t weft_comm_alltoallv(struct weft_comm *comm, const void *sendbuf,
                                  const size_t *sendcounts, void *recvbuf,
                                  const size_t *recvcounts, enum weft_dtype dtype);
weft_status_t weft_comm_alltoallv_start(struct weft_comm *comm, const void *sendbuf,
                                        const size_t *sendcounts, void *recvbuf,
                                        const size_t *recvcounts, enum weft_dtype dtype,
                                        struct weft_comm_req **req_p);

#ifdef __cplusplus
}
#endif

#endif
