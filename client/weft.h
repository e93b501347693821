/* weft.h — the C client of the weft job API, for embedding job submission in other programs.
 *
 * Blocking calls with timeouts over one keep-alive HTTP/1.1 connection (TCP "host:port" or a
 * unix socket "unix:/path") to `weft serve`. Every call returns a weft_status_t; on failure
 * weft_client_error() gives a one-line message naming the cause (the server's own
 * {"error": ...} text when it refused the request). A client is not thread-safe: use one per
 * thread. Link: libweft_client + libcjson (the installed weft.pc says so).
 *
 *   struct weft_client *c;
 *   struct weft_client_opts o = {.address = "127.0.0.1:8642", .token = NULL};
 *   weft_client_connect(&o, &c);
 *   struct weft_prompt p = {.text = "a photo of a red fox in the snow"};
 *   struct weft_job_request r = {.prompts = &p, .n_prompts = 1, .height = 512, .width = 512};
 *   char id[WEFT_CLIENT_ID_MAX];
 *   weft_client_submit(c, &r, id);
 *   struct weft_job_status st;
 *   weft_client_wait(c, id, 600000, NULL, NULL, &st);
 *   weft_client_image_save(c, id, 0, "fox.png");
 *   weft_job_status_cleanup(&st);
 *   weft_client_close(c);
 */
#ifndef WEFT_CLIENT_WEFT_H
#define WEFT_CLIENT_WEFT_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_CLIENT_ID_MAX 32

struct weft_client;

struct weft_client_opts {
    const char *address; /* "host:port" (a name or an address) or "unix:/path" */
    const char *token;   /* bearer token; NULL or "" for none */
    int timeout_ms;      /* per request: connect, send, answer; 0 = 30000 */
};

weft_status_t weft_client_connect(const struct weft_client_opts *opts,
                                  struct weft_client **client_p);
void weft_client_close(struct weft_client *c);
/* The last failure's message ("" after a success). Valid until the next call. */
const char *weft_client_error(const struct weft_client *c);
/* The HTTP status of the last answer (0 when none came). */
int weft_client_http_status(const struct weft_client *c);

/* A prompt, one of: text (UTF-8), encoded by the served model's text encoders (a model without
 * them takes only the name of one of its precomputed prompts as text); the name of a file of
 * the model's prompts/ folder (precomputed embeddings); or a safetensors image (prompt_embeds
 * [1, T, joint], pooled_prompt_embeds [1, pooled]) sent inline. The first of text,
 * safetensors and name that is set is sent. */
struct weft_prompt {
    const char *name;
    const void *safetensors;
    size_t safetensors_len;
    const char *text;
};

struct weft_job_request {
    const struct weft_prompt *prompts;
    size_t n_prompts;
    int64_t height, width; /* 0: the server's default (the model's: 1024 for FLUX.1) */
    int64_t steps;         /* 0: 28 */
    int64_t count;         /* images per prompt; 0: 1 */
    double guidance;       /* 0: 3.5 (for exactly 0, use weft_client_submit_json) */
    uint64_t seed;
    int seed_random;       /* non-zero: the server draws the seed (seed -1); seed is ignored */
    int64_t max_sequence_length; /* T5 tokens of each text prompt; 0: the model's (512 FLUX.1) */
    /* true classifier-free guidance (FluxPipeline's negative_prompt, true_cfg_scale): with a
     * negative prompt (for every prompt; NULL: none) and a scale above 1, two transformer
     * passes a step combined as neg + s (pred - neg); 0: the server's default, 1 (off) */
    const struct weft_prompt *negative_prompt;
    double true_cfg_scale;
};

/* Submit; id gets the job's id. */
weft_status_t weft_client_submit(struct weft_client *c, const struct weft_job_request *req,
                                 char id[WEFT_CLIENT_ID_MAX]);
/* Submit a request body as is (JSON text). */
weft_status_t weft_client_submit_json(struct weft_client *c, const char *json,
                                      char id[WEFT_CLIENT_ID_MAX]);

enum weft_job_state {
    WEFT_JOB_QUEUED,
    WEFT_JOB_RUNNING,
    WEFT_JOB_DONE,
    WEFT_JOB_FAILED,
    WEFT_JOB_CANCELLED,
};

struct weft_job_image {
    int index;  /* image i of the job */
    int prompt; /* the prompt it belongs to */
    int width, height;
};

struct weft_job_status {
    char id[WEFT_CLIENT_ID_MAX];
    enum weft_job_state state;
    int queue_position; /* queued: jobs ahead */
    int attempts;       /* runs started (a run cut short by a lost worker is started again) */
    int step, steps;    /* the latest step of the image being denoised */
    int images_done, images_total;
    double fraction;    /* 0..1 over every step of every image */
    double elapsed;     /* running: seconds since it started (-1: unknown) */
    double eta;         /* running: seconds the server expects it still needs (-1: unknown) */
    char seed[24];      /* the seed it runs with (drawn by the server for seed -1) */
    char error[512];    /* failed: the reason */
    size_t n_images;
    struct weft_job_image *images; /* images ready, in index order */
};

const char *weft_client_state_name(enum weft_job_state s);

/* Fill st (cleanup with weft_job_status_cleanup, also after a failure). */
weft_status_t weft_client_status(struct weft_client *c, const char *id,
                                 struct weft_job_status *st);
void weft_job_status_cleanup(struct weft_job_status *st);

/* Called on every change of progress while waiting; non-zero stops the wait (WEFT_ERR_CANCELLED;
 * the job goes on). */
typedef int (*weft_client_progress_cb)(void *arg, const struct weft_job_status *st);

/* Poll until the job is done, failed or cancelled, or timeout_ms passes (WEFT_ERR_TIMEOUT);
 * st holds the last status either way. A failed or cancelled job is not an error of the call:
 * look at st->state. */
weft_status_t weft_client_wait(struct weft_client *c, const char *id, int timeout_ms,
                               weft_client_progress_cb cb, void *arg,
                               struct weft_job_status *st);

/* The same as weft_client_wait, but the server pushes the progress (GET /v1/jobs/{id}/events,
 * Server-Sent Events) instead of being polled: cb runs at every step, image and change of state
 * as it happens. Falls back to polling when the server has no event stream. */
weft_status_t weft_client_follow(struct weft_client *c, const char *id, int timeout_ms,
                                 weft_client_progress_cb cb, void *arg,
                                 struct weft_job_status *st);

/* Image i of a job as PNG bytes (free with weft_client_free). */
weft_status_t weft_client_image(struct weft_client *c, const char *id, int i, void **png_p,
                                size_t *len_p);
/* Image i written to path (atomically: a temporary file beside it, then renamed). */
weft_status_t weft_client_image_save(struct weft_client *c, const char *id, int i,
                                     const char *path);
/* Cancel: a queued job is removed, a running one stops at its next step. */
weft_status_t weft_client_cancel(struct weft_client *c, const char *id);
/* The name of the served model's first prompt (its prompts/ folder), for a job that names
 * none. */
weft_status_t weft_client_default_prompt(struct weft_client *c, char *name, size_t len);
/* GET /v1/cluster as JSON text (free with weft_client_free). */
weft_status_t weft_client_cluster(struct weft_client *c, char **json_p);

/* Any request: method, path, optional body (JSON); the answer's status and body (NUL-ended,
 * free with weft_client_free). Errors only for transport failures: a 4xx is an answer. */
weft_status_t weft_client_request(struct weft_client *c, const char *method, const char *path,
                                  const char *body, size_t body_len, int *http_status_p,
                                  char **answer_p, size_t *answer_len_p);
void weft_client_free(void *p);

#ifdef __cplusplus
}
#endif

#endif
