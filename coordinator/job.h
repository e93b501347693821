/* What a job asks for: the request body of POST /v1/jobs, validated against the limits of [api]
 * and the model being served, and its journal form.
 *
 * Request (every field optional but the prompts; unknown fields are refused by name):
 *   {"prompt": P} or {"prompts": [P, ...]}   P: "name" (a file of the model's prompts/ folder),
 *                                             {"name": "name"}, or {"safetensors": "<base64 of
 *                                             a safetensors file with prompt_embeds [1, T, joint]
 *                                             and pooled_prompt_embeds [1, pooled]>"}
 *   "height", "width": pixels, multiples of 16 (1024)     "steps": denoising steps (28)
 *   "guidance": embedded guidance scale (3.5)             "seed": integer or decimal string (0)
 *   "count": images per prompt (1)
 * Pure functions: no I/O but the model description read once at start. */
#ifndef WEFT_COORDINATOR_JOB_H
#define WEFT_COORDINATOR_JOB_H

#include <cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

#define WEFT_JOB_NAME_MAX 64
#define WEFT_JOB_MAX_TEXT_TOKENS 4096

/* What the coordinator knows of the model it serves (no weights). */
struct weft_job_model {
    char dir[1024];         /* the pipeline or model folder */
    char transformer[1100]; /* its transformer folder */
    char prompts_dir[1100]; /* dir/prompts */
    int64_t joint_dim;      /* joint_attention_dim */
    int64_t pooled_dim;     /* pooled_projection_dim */
    int64_t in_channels;
    size_t n_names;         /* usable prompts/ entries, sorted */
    char (*names)[WEFT_JOB_NAME_MAX];
};

/* Read the transformer's config.json and scan prompts/ (entries whose tensors do not fit the
 * model are left out with a warning). */
weft_status_t weft_job_model_load(const char *dir, struct weft_job_model **model_p);
void weft_job_model_destroy(struct weft_job_model *model);
/* Check a safetensors image held in memory as a prompt for this model; on failure err gets
 * the reason. */
weft_status_t weft_job_model_check_prompt(const struct weft_job_model *model, const char *what,
                                          const void *data, size_t len, char *err,
                                          size_t err_len);

struct weft_job_limits {
    int64_t max_prompts, max_images, max_pixels, max_steps;
};

struct weft_job_prompt {
    char name[WEFT_JOB_NAME_MAX]; /* a prompts/ entry; "" for an inline one */
    void *data;                   /* inline: the decoded safetensors (owned), until stored */
    size_t len;
};

struct weft_job_spec {
    int n_prompts;
    struct weft_job_prompt *prompts;
    int64_t height, width, steps, count;
    double guidance;
    uint64_t seed;
};

/* Parse and validate a request body. On failure err names the field and the cause (the
 * request's fault: the API answers 400 with it) and nothing is logged above DEBUG; spec is
 * written only on success. WEFT_ERR_NOMEM is the server's fault. */
weft_status_t weft_job_spec_parse(const char *body, size_t len, const struct weft_job_limits *lim,
                                  const struct weft_job_model *model, struct weft_job_spec *spec,
                                  char *err, size_t err_len);
void weft_job_spec_cleanup(struct weft_job_spec *spec);
int64_t weft_job_spec_images(const struct weft_job_spec *spec);

/* Journal form: inline prompts become {"file": i} (stored as prompt-<i>.safetensors in the job's
 * folder). NULL when out of memory. */
cJSON *weft_job_spec_to_json(const struct weft_job_spec *spec);
/* Back from the journal form; the same bounds are checked (a journal is input too). */
weft_status_t weft_job_spec_from_json(const cJSON *json, struct weft_job_spec *spec, char *err,
                                      size_t err_len);

/* Strict base64 (RFC 4648 standard alphabet, padding required): decoded bytes in a new buffer
 * (caller frees with weft_free). WEFT_ERR_FORMAT when not base64. */
weft_status_t weft_base64_decode(const char *text, size_t len, void **data_p, size_t *len_p);

#endif
