/* The runner: what executes jobs for the coordinator. The seam between the coordinator, which
 * holds no math, and what runs the images: threads of this process with the worker's pipeline
 * (worker/local_runner.h) or remote workers over UCX (coordinator/cluster/).
 *
 * The coordinator's event loop (libuv, one thread) owns every piece of job state: the table, the
 * queue, the journal, the API. A runner executes the work somewhere else and tells the loop what
 * happened through a sink: weft_runner_post() hands an event to the coordinator, which queues
 * it, wakes its loop and applies the events in order, on the loop thread.
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
 * (model/job.h): image 0 equals `weft generate --seed S`, and the images do not depend on how
 * many devices or replicas computed them. The runner writes image i as a PNG to
 * "<out_dir>/<i>.png" (atomically: weft_files_write) before it posts WEFT_RUNNER_EV_IMAGE. */
#ifndef WEFT_CONTROL_RUNNER_H
#define WEFT_CONTROL_RUNNER_H

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sbuf.h"
#include "common/status.h"
#include "model/model.h"

/* A job as the coordinator hands it to a runner, checked (weft_job_check) against the model and
 * the runner's layout. Everything is borrowed for the duration of start(): a runner copies what
 * it keeps. */
struct weft_runner_job {
    uint64_t key;        /* events name the job by this */
    const char *id;      /* the job's API id, for log lines and the PNGs */
    int n_prompts;
    /* true classifier-free guidance: the prompt arrays hold n_prompts + n_negatives entries, the
     * last n_negatives (0 or n_prompts) the negative prompts of the first ones, in order; used
     * when true_cfg_scale > 1 (FluxPipeline's neg + s (pred - neg)) */
    int n_negatives;
    double true_cfg_scale;
    const char *const *prompt_paths; /* [n_prompts] safetensors files, each with prompt_embeds
                                        [1, T, joint_attention_dim] and pooled_prompt_embeds
                                        [1, pooled_projection_dim]; NULL for a text prompt */
    const char *const *prompt_names; /* [n_prompts] names for the PNGs ("" for inline ones) */
    const char *const *prompt_texts; /* [n_prompts] the text of a text prompt (the runner's
                                        devices encode it), NULL for embeddings */
    int64_t max_sequence_length;     /* T5 tokens of each text prompt */
    int64_t height, width; /* pixels */
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
                                reason; a peer-lost class status when devices were lost or
                                stopped advancing it (the coordinator may run it again) */
    WEFT_RUNNER_EV_CAPACITY, /* runner: capacity() or unavailable() changed; job ignored */
};

struct weft_runner_event {
    enum weft_runner_event_kind kind;
    uint64_t job; /* weft_runner_job.key */
    weft_status_t status;
    int image, n_images;
    int step, steps;
    int width, height;
    double seconds;
    char stage[24];   /* "load", "denoise", "decode", "encode", "png" ... */
    char reason[320]; /* FINISHED with an error: one line, the exact cause */
};

/* One submission, as a planner counts the work it brings. */
#define WEFT_RUNNER_ARRIVALS 16 /* the submissions a demand carries, at most */
struct weft_runner_arrival {
    double at; /* submitted, seconds since the epoch */
    int64_t height, width, steps, images;
    bool cfg; /* true CFG: two passes a step */
};

/* What waits in the coordinator's queue, for a runner that plans its layout per job ([parallel]
 * mode = auto): the first queued job's shape, and how much waits in all. */
struct weft_runner_demand {
    int64_t height, width, steps; /* the first queued job's */
    int64_t text_tokens;          /* its prompts' longest (0: unknown) */
    bool cfg;                     /* it runs true CFG (two passes a step) */
    int64_t images;               /* its images */
    int64_t queued_images;        /* every queued job's images, its own included */
    int queued_jobs;
    /* the last submissions (at most WEFT_RUNNER_ARRIVALS), oldest first (queued, running or
     * ended), and the time now: a planner serving a stream plans for what the stream keeps
     * running, not only what waits */
    const struct weft_runner_arrival *arrivals;
    int n_arrivals;
    double now;
};

struct weft_runner;

struct weft_runner_ops {
    const char *name; /* "local", "cluster" */
    /* Take the job (non-blocking). WEFT_OK: events will follow. An error: nothing happened, no
     * event will come, and err says why (the coordinator fails the job with it). */
    weft_status_t (*start)(struct weft_runner *r, const struct weft_runner_job *job,
                           struct weft_error *err);
    /* Ask a started job to stop at its next step boundary (non-blocking). Its FINISHED event
     * follows, WEFT_ERR_CANCELLED, or WEFT_OK if it completed first. Unknown keys are ignored. */
    void (*cancel)(struct weft_runner *r, uint64_t job);
    /* How many jobs it can run at once now (0: none yet, e.g. no worker has joined). The
     * coordinator never has more than this many started and unfinished. */
    int (*capacity)(struct weft_runner *r);
    /* Why it cannot run jobs until something changes (a worker refused its assignment, the
     * model did not load): one line, or NULL when it can, or is only waiting (for workers to
     * join, for a load to end). The coordinator fails the queued jobs with it and refuses new
     * ones while it holds. */
    const char *(*unavailable)(struct weft_runner *r);
    /* The layout jobs run on (the mesh of [parallel], or one device): the coordinator checks
     * every job against it at submission. */
    void (*layout)(struct weft_runner *r, struct weft_layout *out);
    /* The layout the job start() accepted last runs on, where the runner's replicas differ
     * ([parallel] groups); NULL op: layout(). */
    void (*started_layout)(struct weft_runner *r, struct weft_layout *out);
    /* Where its replicas differ: the layouts a job may be started on, each of which it must
     * fit (the coordinator checks it against every one at submission), into out[0, max), and
     * their count (0: none but layout()). NULL op: layout() alone. */
    int (*check_layouts)(struct weft_runner *r, struct weft_layout *out, int max);
    /* The cluster for GET /v1/cluster: a new object the caller deletes, NULL when out of
     * memory. Keys: "runner" (name), "ready" (bool), "workers": [{"id", "host", "device",
     * "state", ...}], "mesh": {"dp", "ring", "ulysses", "tp"}, "device_map": {component:
     * device}, and anything else the runner knows (model, memory). */
    cJSON *(*describe)(struct weft_runner *r);
    /* Append Prometheus text (with # HELP / # TYPE lines) for what it measures; collectives
     * as weft_collective_seconds_total, weft_collective_bytes_total and
     * weft_collective_calls_total with labels group and op. May append nothing. */
    void (*metrics)(struct weft_runner *r, struct weft_sbuf *out);
    /* The queue changed (non-blocking; NULL for a runner whose layout is fixed): the
     * coordinator calls it with what waits before it starts the first queued job, and again
     * as the queue moves. A runner may answer by changing its layout; while it does, its
     * capacity() holds the jobs back (a CAPACITY event follows), and layout() names the new
     * layout once jobs may start on it. */
    void (*demand)(struct weft_runner *r, const struct weft_runner_demand *d);
    /* Why jobs run on layout() now: one line (a planner's reasons), or NULL where the
     * configuration fixed it. NULL op: the same as returning NULL. */
    const char *(*layout_reason)(struct weft_runner *r);
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

/* Where runners post events: the coordinator's, valid from the runner's creation until its
 * destroy() returns. post copies ev; STEP and STAGE events may be dropped when memory runs out;
 * IMAGE, FINISHED and CAPACITY are never dropped (the call retries until it can queue them). */
struct weft_runner_sink {
    void (*post)(struct weft_runner_sink *sink, const struct weft_runner_event *ev);
};

static inline void weft_runner_post(struct weft_runner_sink *sink,
                                    const struct weft_runner_event *ev)
{
    sink->post(sink, ev);
}

/* The encoded-prompt cache's metrics, the same from every runner: hits and misses summed over
 * the ranks that encode text, and (has_bytes) the bytes it holds. */
static inline void weft_prompt_cache_metrics(struct weft_sbuf *out, uint64_t hits,
                                             uint64_t misses, uint64_t bytes, bool has_bytes)
{
    weft_sbuf_printf(out,
                     "# HELP weft_prompt_cache_hits_total Text prompts whose embeddings came "
                     "from the cache of the rank that encodes text.\n"
                     "# TYPE weft_prompt_cache_hits_total counter\n"
                     "weft_prompt_cache_hits_total %llu\n"
                     "# HELP weft_prompt_cache_misses_total Text prompts the text encoders ran "
                     "for.\n"
                     "# TYPE weft_prompt_cache_misses_total counter\n"
                     "weft_prompt_cache_misses_total %llu\n",
                     (unsigned long long)hits, (unsigned long long)misses);
    if (has_bytes)
        weft_sbuf_printf(out,
                         "# HELP weft_prompt_cache_bytes Bytes of encoded prompts the cache "
                         "holds ([model] prompt_cache bounds it).\n"
                         "# TYPE weft_prompt_cache_bytes gauge\nweft_prompt_cache_bytes %llu\n",
                         (unsigned long long)bytes);
}

#endif
