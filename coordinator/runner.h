/* The runner: what executes jobs for the coordinator.
 *
 * The coordinator's event loop (libuv, one thread) owns every piece of job state: the table, the
 * queue, the journal, the API. A runner executes the work somewhere else — threads of this
 * process (coordinator/local_runner.c) or remote workers over UCX (the distributed runner) — and
 * tells the loop what happened through a sink: weft_runner_post() copies an event into a queue
 * and wakes the loop (uv_async); the coordinator applies the events in order, on the loop thread.
 *
 * Threading contract:
 *   - Every op below is called on the loop thread and must not block (start and cancel only
 *     hand work over; a model load or a step happens elsewhere). destroy() is the exception: it
 *     is called after the loop has stopped and may wait for the runner's threads.
 *   - weft_runner_post() may be called from any thread, the loop thread included.
 *   - A job that start() accepted gets exactly one WEFT_RUNNER_EV_FINISHED, its last event; a
 *     job that start() refused gets no event at all (as libuv: "the callback never fires on
 *     error").
 *
 * Jobs and images: a job has n_prompts prompts and count images per prompt; image i (0-based)
 * belongs to prompt i / count and takes elements [i * n, (i + 1) * n) of the seed's noise stream
 * (n = elements of one image's packed latents), as Diffusers' batched latents come from one
 * generator: image 0 equals `weft generate --seed S`, and the images do not depend on how many
 * devices or replicas computed them. The runner writes image i as a PNG to
 * "<out_dir>/<i>.png" (weft_runner_file_write() does it atomically) before it posts
 * WEFT_RUNNER_EV_IMAGE for it. */
#ifndef WEFT_COORDINATOR_RUNNER_H
#define WEFT_COORDINATOR_RUNNER_H

#include <cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "coordinator/sbuf.h"

/* A job as the coordinator hands it to a runner. Everything is borrowed for the duration of
 * start(): a runner copies what it keeps. */
struct weft_runner_job {
    uint64_t key;        /* events name the job by this */
    const char *id;      /* the job's API id, for log lines */
    int n_prompts;
    const char *const *prompt_paths; /* [n_prompts] safetensors files, each with prompt_embeds
                                        [1, T, joint_attention_dim] and pooled_prompt_embeds
                                        [1, pooled_projection_dim]; already validated */
    int64_t height, width; /* pixels, multiples of 16 */
    int64_t steps;
    int64_t count;         /* images per prompt */
    double guidance;
    uint64_t seed;
    const char *out_dir;   /* exists; images go to out_dir/<i>.png */
};

enum weft_runner_event_kind {
    WEFT_RUNNER_EV_STAGE,    /* job: a stage of it ended (stage, seconds); stages of the same
                                name add up in the job's timings */
    WEFT_RUNNER_EV_STEP,     /* job: a denoising step ended for images [image, image +
                                n_images): step of steps (1-based), seconds it took */
    WEFT_RUNNER_EV_IMAGE,    /* job: image written to out_dir/<image>.png (width x height) */
    WEFT_RUNNER_EV_FINISHED, /* job: its last event. status WEFT_OK (every image written),
                                WEFT_ERR_CANCELLED (after cancel() or stop()), or an error with
                                reason */
    WEFT_RUNNER_EV_CAPACITY, /* runner: capacity() changed (workers joined or left); job
                                ignored */
};

struct weft_runner_event {
    enum weft_runner_event_kind kind;
    uint64_t job; /* weft_runner_job.key */
    weft_status_t status;
    int image, n_images;
    int step, steps;
    int width, height;
    double seconds;
    char stage[24];   /* "load", "denoise", "decode", "encode", ... */
    char reason[256]; /* FINISHED with an error: one line, the exact cause */
};

struct weft_runner;

struct weft_runner_ops {
    const char *name; /* "local", "cluster" */
    /* Take the job (non-blocking). WEFT_OK: events will follow. An error: nothing happened and
     * no event will come (the coordinator fails the job with the logged reason). */
    weft_status_t (*start)(struct weft_runner *r, const struct weft_runner_job *job);
    /* Ask a started job to stop at its next step boundary (non-blocking). Its FINISHED event
     * follows, WEFT_ERR_CANCELLED, or WEFT_OK if it completed first. Unknown keys are ignored. */
    void (*cancel)(struct weft_runner *r, uint64_t job);
    /* How many jobs it can run at once now (0: none yet, e.g. no worker has joined). The
     * coordinator never has more than this many started and unfinished. */
    int (*capacity)(struct weft_runner *r);
    /* The cluster for GET /v1/cluster: a new object the caller deletes, NULL when out of
     * memory. Keys: "runner" (name), "ready" (bool), "workers": [{"id", "host", "device",
     * "state", ...}], "mesh": {"dp", "ring", "ulysses", "tp"}, "device_map": {component:
     * device}, and anything else the runner knows (model, memory). */
    cJSON *(*describe)(struct weft_runner *r);
    /* Append Prometheus text (with # HELP / # TYPE lines) for what it measures; collectives
     * as weft_collective_seconds_total, weft_collective_bytes_total and
     * weft_collective_calls_total with labels group and op. May append nothing. */
    void (*metrics)(struct weft_runner *r, struct weft_sbuf *out);
    /* Shutting down: stop every started job at its next step boundary (non-blocking); each
     * still gets its FINISHED event. start() is not called after this. */
    void (*stop)(struct weft_runner *r);
    /* Free everything; may wait for threads. Called after the loop stopped; no event may be
     * posted after it returns. NULL-safe through weft_runner_destroy(). */
    void (*destroy)(struct weft_runner *r);
};

/* Implementations embed this as their first member. */
struct weft_runner {
    const struct weft_runner_ops *ops;
};

static inline void weft_runner_destroy(struct weft_runner *r)
{
    if (r)
        r->ops->destroy(r);
}

/* Where runners post events: owned by the coordinator, valid from the runner's creation until
 * its destroy() returns. */
struct weft_runner_sink;

/* Copy ev into the coordinator's queue and wake its loop. Any thread. STEP and STAGE events
 * may be dropped when memory runs out; IMAGE, FINISHED and CAPACITY are never dropped (the
 * call retries until it can queue them). */
void weft_runner_post(struct weft_runner_sink *sink, const struct weft_runner_event *ev);

/* Write len bytes to path atomically (a temporary file beside it, fsync, rename): a reader
 * never sees a partial image. Logs the cause on failure. Any thread. */
weft_status_t weft_runner_file_write(const char *path, const void *data, size_t len);

#endif
