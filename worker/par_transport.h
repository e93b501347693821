/* The model's collectives (worker/par.h) over weft's transport: one process group per mesh
 * dimension this rank belongs to. */
#ifndef WEFT_WORKER_PAR_TRANSPORT_H
#define WEFT_WORKER_PAR_TRANSPORT_H

#include "common/error.h"
#include "conf/conf.h"
#include "kernels/kernels.h"
#include "model/mesh.h"
#include "transport/comm.h"
#include "worker/par.h"

struct weft_par_transport;

/* The transport's options from [transport] (opts->tls points into t). */
void weft_transport_opts_from_conf(const struct weft_conf_transport *t,
                                   struct weft_transport_opts *opts);

/* Groups of rank `rank` of the mesh over tp's world (the world rank of mesh rank i is
 * world_base + i, so several meshes can share one world). Local: no messages. err gets the
 * cause (a group the transport could not create: its status; the transport logged why). */
weft_status_t weft_par_transport_create(struct weft_transport *tp, const struct weft_mesh *mesh,
                                        int world_base, struct weft_par_transport **pt_p,
                                        struct weft_error *err);
void weft_par_transport_destroy(struct weft_par_transport *pt);
const struct weft_par_comm *weft_par_transport_comm(const struct weft_par_transport *pt);
/* The buffers the callbacks get are this backend's (NULL K: host memory, the default). On a
 * backend that is not host-visible every collective stages them through host memory: download
 * what it sends, sync the backend, move the host copies, upload what it received. The staging
 * buffers grow to the largest message once and are kept. */
void weft_par_transport_set_device(struct weft_par_transport *pt, const struct weft_kernels *K,
                                   struct weft_kctx *kc);
/* Sum count floats of host memory in place over one of this rank's groups: an agreement
 * between ranks (the replica's stop flag), never a device buffer. */
weft_status_t weft_par_transport_host_allreduce(struct weft_par_transport *pt,
                                                enum weft_mesh_group group, float *buf,
                                                size_t count);

/* The kinds of collective the model calls. */
enum weft_par_op { WEFT_PAR_ALLREDUCE, WEFT_PAR_ALLTOALL, WEFT_PAR_ALLGATHER, WEFT_PAR_P2P,
                   WEFT_PAR_BCAST, WEFT_PAR_OP_COUNT };
/* "allreduce", "alltoall", "allgather", "p2p", "bcast" */
const char *weft_par_op_name(enum weft_par_op op);

/* Time spent in (and bytes sent by) each mesh group's collectives, per kind, since creation or
 * the last reset: what the model waited for, load imbalance included. A ring exchange counts
 * its wait only (the transfer overlaps the attention). */
struct weft_par_stats {
    double seconds[WEFT_MESH_GROUP_COUNT][WEFT_PAR_OP_COUNT];
    double bytes[WEFT_MESH_GROUP_COUNT][WEFT_PAR_OP_COUNT];
    long calls[WEFT_MESH_GROUP_COUNT][WEFT_PAR_OP_COUNT];
};
void weft_par_transport_stats(const struct weft_par_transport *pt, struct weft_par_stats *out);
void weft_par_transport_reset_stats(struct weft_par_transport *pt);

#endif
