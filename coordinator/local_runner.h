/* The local runner: executes jobs in this process, on this machine's CPU, with the
 * single-device pipeline of worker/ (one job at a time; the CPU kernels use every core).
 *
 * It is a separate library (weft_local_runner) so that the coordinator itself never links the
 * forward pass (STYLE.md); `weft serve` links both. */
#ifndef WEFT_COORDINATOR_LOCAL_RUNNER_H
#define WEFT_COORDINATOR_LOCAL_RUNNER_H

#include "common/status.h"
#include "coordinator/runner.h"

struct weft_local_runner_opts {
    const char *model_dir; /* pipeline folder (transformer/, scheduler/, vae/) or model folder */
    int threads;           /* CPU kernel threads; 0: every core */
};

/* Starts its thread, which loads the model; jobs started before the load ends wait for it (a
 * load failure fails them with its reason). */
weft_status_t weft_local_runner_create(const struct weft_local_runner_opts *opts,
                                       struct weft_runner_sink *sink,
                                       struct weft_runner **runner_p);

#endif
