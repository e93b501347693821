/* Test launcher: forks real processes that join one world through a rendezvous on 127.0.0.1
 * (ephemeral port), runs a function in each, and kills them all if any outlives the limit. */
#ifndef WEFT_TESTS_INTEGRATION_LAUNCH_H
#define WEFT_TESTS_INTEGRATION_LAUNCH_H

#include "transport/comm.h"

/* Runs in each rank after the transport is up; returns the rank's exit code (0 = pass). */
typedef int (*launch_rank_cb)(struct weft_transport *tp, void *arg);

/* Transport options: the [transport] defaults of conf/, then WEFT_TRANSPORT_* from the
 * environment (so a run can be tuned without rebuilding). */
void launch_opts(struct weft_transport_opts *opts);

/* Runs fn in np processes. Every rank must exit 0 within timeout_s, except killed_rank (-1:
 * none), which must die of SIGKILL (the launcher sends it once every other rank has exited, in
 * case it only stopped itself). Returns 0 on success, 1 (with the reason printed) else. */
int launch_run(int np, const struct weft_transport_opts *opts, launch_rank_cb fn, void *arg,
               int timeout_s, int killed_rank);

#endif
