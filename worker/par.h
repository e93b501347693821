/* The collectives model code needs, as a table of callbacks on opaque groups, so a forward
 * pass never touches the transport (STYLE: a model file never calls UCX). The worker fills it
 * from transport/ (worker/par_transport.c); every count is in floats, every call returns
 * WEFT_OK or the transport's status (a peer-lost status fails the forward pass). */
#ifndef WEFT_WORKER_PAR_H
#define WEFT_WORKER_PAR_H

#include <stddef.h>

#include "common/status.h"

struct weft_par_comm {
    /* Sum count floats in place over group (tensor parallelism). */
    weft_status_t (*allreduce)(void *group, float *buf, size_t count);
    /* Block j of send (send_counts[j] floats) to group rank j; recv gets recv_counts[j] from
     * rank j; blocks packed in rank order (Ulysses). */
    weft_status_t (*alltoallv)(void *group, const float *send, const size_t *send_counts,
                               float *recv, const size_t *recv_counts);
    /* recv = every rank's send (counts[j] floats from rank j) in rank order. */
    weft_status_t (*allgatherv)(void *group, const float *send, float *recv,
                                const size_t *counts);
    /* Post a send of send_n floats to rank `to` and a receive of recv_n floats from rank
     * `from`; exchange_wait completes both (ring attention's rotation). */
    weft_status_t (*exchange_start)(void *group, const float *send, size_t send_n, int to,
                                    float *recv, size_t recv_n, int from, void **handle_p);
    weft_status_t (*exchange_wait)(void *group, void *handle);
    /* Blocking point-to-point: count floats to / from group rank `peer` (a layer pipeline's
     * hand-over between stages). */
    weft_status_t (*send)(void *group, const float *buf, size_t count, int peer);
    weft_status_t (*recv)(void *group, float *buf, size_t count, int peer);
    /* buf of group rank root to every rank's buf. */
    weft_status_t (*bcast)(void *group, float *buf, size_t count, int root);
    /* allgatherv on host memory whatever the backend (the denoising loop's own buffers: CFG
     * parallelism's exchange of the halves' predictions). In place as the transport's. */
    weft_status_t (*host_allgatherv)(void *group, const float *send, float *recv,
                                     const size_t *counts);

    void *tp;      /* tensor-parallel group */
    void *ulysses; /* Ulysses group: contiguous context-parallel ranks */
    void *ring;    /* ring group: strided context-parallel ranks */
    void *cp;      /* every context-parallel rank of the replica, flattened order */
    void *replica; /* every rank of the replica (agreeing on cancellation at step ends) */
    void *pipe;    /* the pipeline stages of the replica, in stage order (device_map) */
    void *cfg;     /* this rank and its peer in the other CFG half (CFG parallelism) */
};

#endif
