/* Test launcher: forks real processes that join one world through a rendezvous on 127.0.0.1
 * (ephemeral port), runs a function in each, and kills them all if any outlives the limit. */
#ifndef WEFT_TESTS_INTEGRATION_LAUNCH_H
#define WEFT_TESTS_INTEGRATION_LAUNCH_H

#include <sys/types.h>

#include "transport/comm.h"

#define LAUNCH_MAX 64

/* Runs in each rank after the transport is up; returns the rank's exit code (0 = pass). */
typedef int (*launch_rank_cb)(struct weft_transport *tp, void *arg);
/* Runs in each rank instead of the above when the rank creates and destroys its transport
 * itself (rendezvous: "host:port"); returns the exit code. */
typedef int (*launch_child_cb)(int rank, int np, const char *rendezvous, void *arg);

/* Transport options: the [transport] defaults of conf/, then WEFT_TRANSPORT_* from the
 * environment (so a run can be tuned without rebuilding). */
void launch_opts(struct weft_transport_opts *opts);

/* Runs fn in np processes. Every rank must exit 0 within timeout_s, except killed_rank (-1:
 * none), which must die of SIGKILL (the launcher sends it once every other rank has exited, in
 * case it only stopped itself). Returns 0 on success, 77 (skipped) when every rank exited 77
 * (a GPU run on a machine without one), 1 (with the reason printed) else. */
int launch_run(int np, const struct weft_transport_opts *opts, launch_rank_cb fn, void *arg,
               int timeout_s, int killed_rank);

/* The same in steps, for a test that signals its ranks while they run. */
struct launch {
    struct weft_rdv_server *srv;
    int np;
    pid_t pids[LAUNCH_MAX];
    int status[LAUNCH_MAX]; /* wait status once exited, else -1 */
    int left;               /* ranks not yet exited */
    weft_status_t rdv;      /* WEFT_OK once every rank has the table */
};
/* Forks np ranks running fn (each exits with what fn returns). 0, or 1 with the reason. */
int launch_start(struct launch *l, int np, launch_child_cb fn, void *arg);
/* Serves the rendezvous and reaps exited ranks for about ms milliseconds. */
void launch_poll(struct launch *l, int ms);
/* Waits until every rank has exited or timeout_s passed (the rest are killed), then checks
 * the exit statuses as launch_run does. */
int launch_finish(struct launch *l, int timeout_s, int killed_rank);

#endif
