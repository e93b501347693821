/* What a job asks for: the request body of POST /v1/jobs parsed (strict JSON: unknown and
 * duplicate fields refused, integers exact), its prompts resolved against the model served, and
 * its journal form. The rules of the job itself (sizes, steps, prompts against the model and
 * the layout) are model/job.h's weft_job_check, applied by the coordinator at submission.
 *
 * Request (every field optional but the prompts; unknown fields are refused by name):
 *   {"prompt": P | [P, ...]} or {"prompts": [P, ...]}
 *                                             P: text, encoded by the model's text encoders (a
 *                                             model without them takes only the name of one of
 *                                             its precomputed prompts: the one meaning text has
 *                                             there), or an embeddings object E
 *   or {"prompt_embeds": E | [E, ...]}        E: "name" (a file of the model's prompts/ folder),
 *                                             {"name": "name"}, or {"safetensors": "<base64 of
 *                                             a safetensors file with prompt_embeds [1, T, joint]
 *                                             and pooled_prompt_embeds [1, pooled]>"}
 *   "max_sequence_length": T5 tokens of each text prompt (512; 1..512)
 *   "height", "width": pixels (1024)          "steps": denoising steps (28)
 *   "guidance": embedded guidance scale (3.5) "seed": integer, decimal string, or -1
 *                                             (or absent): drawn at random and recorded
 *   "count": images per prompt (1)
 * Pure functions: no I/O but the model description read once at start. */
#ifndef WEFT_COORDINATOR_JOB_H
#define WEFT_COORDINATOR_JOB_H

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "common/status.h"
#include "model/job.h"
#include "model/model.h"

#define WEFT_JOB_NAME_MAX 64

/* What the coordinator knows of the model it serves (no weights): its description and the
 * usable prompts/ entries with their token counts, sorted by name. */
struct weft_job_model {
    char dir[WEFT_CONF_PATH];
    const char *prompts_dir; /* desc->prompts_dir */
    struct weft_model *desc;
    size_t n_names;
    char (*names)[WEFT_JOB_NAME_MAX];
    int64_t *name_tokens; /* [n_names] */
};

/* Open the model (model/model.h: refused when weft cannot run it, err says why) and scan
 * prompts/ (entries whose tensors do not fit the model are left out with a warning). */
weft_status_t weft_job_model_load(const char *dir, struct weft_job_model **model_p,
                                  struct weft_error *err);
void weft_job_model_destroy(struct weft_job_model *model);
/* The text tokens of a prompts/ entry, -1 when there is no such name. */
int64_t weft_job_model_prompt_tokens(const struct weft_job_model *model, const char *name);

struct weft_job_prompt {
    char name[WEFT_JOB_NAME_MAX]; /* a prompts/ entry; "" for an inline one or text */
    char *text;                   /* a text prompt (owned, UTF-8, may be ""); NULL otherwise */
    int64_t tokens;               /* T of its prompt_embeds (text: max_sequence_length) */
    void *data;                   /* inline: the decoded safetensors (owned), until stored */
    size_t len;
};

struct weft_job_spec {
    int n_prompts;
    /* [n_prompts + n_negatives]: the prompts, then (true classifier-free guidance) the negative
     * prompt of each, in order; n_negatives is 0 or n_prompts */
    struct weft_job_prompt *prompts;
    int n_negatives;
    double true_cfg_scale; /* FluxPipeline's: on above 1 (needs negatives); 1 without */
    int64_t height, width, steps, count;
    double guidance;
    uint64_t seed;
    bool seed_random; /* seed -1 or absent: the coordinator draws one at submission */
    int64_t max_sequence_length; /* of its text prompts */
};

/* Parse a request body. On failure err names the field and the cause (the request's fault:
 * the API answers 400 with it) and nothing is logged above DEBUG; spec is written only on
 * success. WEFT_ERR_NOMEM is the server's fault. Numbers are checked against the hard bounds
 * of model/job.h and lim; the rest of the job's rules come at submission. */
weft_status_t weft_job_spec_parse(const char *body, size_t len, const struct weft_job_limits *lim,
                                  const struct weft_job_model *model, struct weft_job_spec *spec,
                                  char *err, size_t err_len);
void weft_job_spec_cleanup(struct weft_job_spec *spec);
int64_t weft_job_spec_images(const struct weft_job_spec *spec);
/* The job's description for weft_job_check (tokens: an array of n_prompts + n_negatives). */
void weft_job_spec_desc(const struct weft_job_spec *spec, int64_t *tokens,
                        struct weft_job_desc *desc);

/* Journal form: inline prompts become {"file": i, "tokens": T} (stored as
 * prompt-<i>.safetensors in the job's folder), text prompts {"text": "...", "tokens": T}; the
 * negatives follow the prompts in "prompts" ("negatives": their count). NULL when out of
 * memory. */
cJSON *weft_job_spec_to_json(const struct weft_job_spec *spec);
/* Back from the journal form; the same bounds are checked (a journal is input too). */
weft_status_t weft_job_spec_from_json(const cJSON *json, const struct weft_job_model *model,
                                      struct weft_job_spec *spec, char *err, size_t err_len);

/* A text prompt (p->text, tokens max_sequence_length) when the model encodes text; on a model
 * that cannot, the name of one of its precomputed prompts (the one meaning text has there);
 * else err says why (what the model lacks, and its names), as where ("prompt"): the request's
 * fault (a 400); embeds_field: the request has a "prompt_embeds" field to point to. p is written
 * only on success. */
weft_status_t weft_job_prompt_from_text(const struct weft_job_model *model, const char *text,
                                        int64_t max_sequence_length, const char *where,
                                        bool embeds_field, struct weft_job_prompt *p, char *err,
                                        size_t err_len);

/* How deep a request body's arrays and objects may nest (the API's deepest is 2). */
#define WEFT_JOB_JSON_DEPTH 32

#endif
