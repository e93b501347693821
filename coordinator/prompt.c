/* Prompt resolution (prompt.h): text for a model with text encoders, a precomputed prompt's
 * name for one without. */
#include "coordinator/prompt.h"

bool weft_prompt_has_text_encoder(const struct weft_job_model *model)
{
    char why[8];
    return weft_model_text_missing(model->desc, why, sizeof(why)) == NULL;
}

weft_status_t weft_prompt_resolve(const struct weft_job_model *model, const char *text,
                                  int64_t max_sequence_length, const char *where,
                                  struct weft_job_prompt *p, char *err, size_t err_len)
{
    return weft_job_prompt_from_text(model, text, max_sequence_length, where, false, p, err,
                                     err_len);
}
