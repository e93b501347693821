/* The coordinator: one libuv event loop that owns the job API socket, the job table and queue,
 * the journal, timers and signals, and hands jobs to a runner (control/runner.h).
 *
 *   weft_coord_create()      model description, journal replay, the loop
 *   weft_coord_sink()        where the runner will post its events
 *   weft_coord_listen()      bind the API socket ([api] listen)
 *   weft_coord_run_take()    serve until SIGINT/SIGTERM, then stop cleanly (exit status 0)
 *   weft_coord_destroy()
 *
 * On SIGINT/SIGTERM it stops accepting, lets running jobs finish for [api] shutdown_grace_ms,
 * then stops them at a step boundary; jobs not finished stay in the journal and run again after
 * a restart. A second signal stops them at once. */
#ifndef WEFT_COORDINATOR_COORDINATOR_H
#define WEFT_COORDINATOR_COORDINATOR_H

#include <uv.h>

#include "common/status.h"
#include "conf/conf.h"
#include "common/error.h"
#include "control/runner.h"
#include "model/model.h"

struct weft_coord;

struct weft_coord_opts {
    const struct weft_conf_api *api;
    const char *model_dir; /* the pipeline or model folder served */
};

/* Opens the model (refused, with err saying why, when weft cannot run it) and replays the
 * journal. */
weft_status_t weft_coord_create(const struct weft_coord_opts *opts, struct weft_coord **coord_p,
                                struct weft_error *err);
void weft_coord_destroy(struct weft_coord *coord);

struct weft_runner_sink *weft_coord_sink(struct weft_coord *coord);
/* The model served, as the description layer knows it (for the runner). */
const struct weft_model *weft_coord_model(const struct weft_coord *coord);
/* The event loop, for a runner that lives on it (the cluster runner: worker port, control
 * links, heartbeats). */
uv_loop_t *weft_coord_loop(struct weft_coord *coord);

/* Bind and listen on [api] listen. The address actually bound (port 0 resolved) is then
 * weft_coord_address(); when port_file is set it is also written there (atomically, with a
 * newline), for scripts and tests that start the server on an ephemeral port. */
weft_status_t weft_coord_listen(struct weft_coord *coord, const char *port_file);
const char *weft_coord_address(const struct weft_coord *coord);

/* Serve with runner (ownership taken: destroyed before this returns, whatever happens) until
 * a signal ends it. */
weft_status_t weft_coord_run_take(struct weft_coord *coord, struct weft_runner *runner);

#endif
