/* Prompt resolution: how the text of a prompt (the OpenAI endpoint's "prompt", a job's "prompt")
 * becomes the conditioning a job runs with.
 *
 * On a model with text encoders (FluxPipeline's tokenizer, text_encoder, tokenizer_2 and
 * text_encoder_2), text is text: the job carries it and the rank that encodes text turns it
 * into embeddings (the coordinator holds no math). On a model without them, a text resolves
 * only when it is the name of one of the model's precomputed prompts (its prompts/ folder),
 * the one meaning text has there; any other text is refused with a message naming what the
 * model lacks and listing the names it has. */
#ifndef WEFT_COORDINATOR_PROMPT_H
#define WEFT_COORDINATOR_PROMPT_H

#include <stdbool.h>
#include <stddef.h>

#include "common/status.h"
#include "coordinator/job.h"

/* Whether the served model encodes text. */
bool weft_prompt_has_text_encoder(const struct weft_job_model *model);

/* Resolve text into p (weft_job_prompt_from_text). On failure err says why (the request's
 * fault: a 400), naming the field as where ("prompt"); p is written only on success. */
weft_status_t weft_prompt_resolve(const struct weft_job_model *model, const char *text,
                                  int64_t max_sequence_length, const char *where,
                                  struct weft_job_prompt *p, char *err, size_t err_len);

#endif
