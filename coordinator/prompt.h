/* Prompt resolution: how the text of a prompt (the OpenAI endpoint's "prompt", and any client
 * that sends words) becomes the conditioning a job runs with.
 *
 * The seam for text encoders. weft has none yet, so today a text resolves only when it is the
 * name of one of the model's precomputed prompts (its prompts/ folder: prompt_embeds and
 * pooled_prompt_embeds made offline); any other text is refused with a message that says the
 * model has no text encoder and lists the names it has. When the text encoders land (CLIP and
 * T5 on the workers: the coordinator holds no math), the model description says it has them
 * (weft_prompt_has_text_encoder), weft_prompt_resolve returns a prompt that carries the text,
 * the runner encodes it, and every caller of this function (the OpenAI endpoint, POST
 * /v1/jobs with a text prompt) takes text without a change. */
#ifndef WEFT_COORDINATOR_PROMPT_H
#define WEFT_COORDINATOR_PROMPT_H

#include <stdbool.h>
#include <stddef.h>

#include "common/status.h"
#include "coordinator/job.h"

/* Whether the served model can encode text (false in this version of weft). */
bool weft_prompt_has_text_encoder(const struct weft_job_model *model);

/* Resolve text into p. On failure err says why (the request's fault: a 400), naming the field
 * as where ("prompt"); p is written only on success. */
weft_status_t weft_prompt_resolve(const struct weft_job_model *model, const char *text,
                                  const char *where, struct weft_job_prompt *p, char *err,
                                  size_t err_len);

#endif
