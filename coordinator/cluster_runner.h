/* The cluster runner: workers join the coordinator (authenticated bootstrap on the [cluster]
 * port, then a UCX control link), the runner plans the mesh (dp x ring x ulysses x tp from
 * [parallel]) once enough have joined, hands each its assignment (a place in the mesh, the
 * data-plane rendezvous, what to load) and runs jobs: a job's images are split across the
 * data-parallel replicas like Accelerate's split_between_processes, each replica's decoding
 * rank sends the PNGs back. A lost worker, or a job no worker advances, stops the jobs it was
 * in (the coordinator may run them again) and the mesh is planned again from the workers left.
 *
 * Everything runs on the coordinator's libuv loop: the worker port, the control links (their
 * UCX worker's event fd under a uv_poll), the rendezvous, heartbeat timers. It is a separate
 * library from the coordinator proper and holds no math: it never links the forward pass. Its
 * files are in coordinator/cluster/. */
#ifndef WEFT_COORDINATOR_CLUSTER_RUNNER_H
#define WEFT_COORDINATOR_CLUSTER_RUNNER_H

#include <uv.h>

#include "common/error.h"
#include "common/status.h"
#include "conf/conf.h"
#include "control/runner.h"
#include "model/model.h"

struct weft_cluster_runner_opts {
    const struct weft_conf *conf;   /* [cluster], [parallel], [transport], [tp_plan] ... */
    const struct weft_model *model; /* the model served (the coordinator's; outlives us) */
    const char *model_dir;          /* the pipeline folder every worker loads */
    const char *secret;
    const char *port_file;          /* when set, the bound worker port is written there */
};

/* Refuses (err says why) a layout the model cannot run: the workers would refuse it. */
weft_status_t weft_cluster_runner_create(const struct weft_cluster_runner_opts *opts,
                                         uv_loop_t *loop, struct weft_runner_sink *sink,
                                         struct weft_runner **runner_p, struct weft_error *err);

#endif
