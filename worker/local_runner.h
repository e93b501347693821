/* The local runner: executes the coordinator's jobs in this process, on this machine's CPU (or
 * one GPU, [worker] device), with the worker's image pipeline (worker/runtime.h) on one device,
 * one job at a time (the CPU kernels use every core). It implements control/runner.h, so the coordinator runs it
 * without linking any math: `weft serve --runner local` links both. */
#ifndef WEFT_WORKER_LOCAL_RUNNER_H
#define WEFT_WORKER_LOCAL_RUNNER_H

#include "common/status.h"
#include "control/runner.h"
#include "kernels/kernels.h"

struct weft_local_runner_opts {
    const char *model_dir; /* pipeline folder (transformer/, scheduler/, vae/) */
    int threads;           /* CPU kernel threads; 0: every core */
    int compute;           /* [model] dtype: enum weft_dtype */
    struct weft_device device; /* [worker] device (zeroed: the CPU) */
    uint64_t prompt_cache; /* [model] prompt_cache: bytes of encoded text prompts kept */
};

/* Starts its thread, which loads the model; jobs started before the load ends wait for it (a
 * load failure fails them with its reason, and unavailable() reports it). */
weft_status_t weft_local_runner_create(const struct weft_local_runner_opts *opts,
                                       struct weft_runner_sink *sink,
                                       struct weft_runner **runner_p);

#endif
