/* Prompt resolution (prompt.h): the model's precomputed prompts today, text encoders later. */
#include "coordinator/prompt.h"

#include <stdio.h>
#include <string.h>

bool weft_prompt_has_text_encoder(const struct weft_job_model *model)
{
    (void)model; /* no text encoder is implemented yet, whatever the folder holds */
    return false;
}

/* "a, b, c" (cut to len, ending in ", ..." when it does not fit). */
static void names_list(const struct weft_job_model *m, char *out, size_t len)
{
    size_t o = 0;
    out[0] = '\0';
    for (size_t i = 0; i < m->n_names; i++) {
        size_t n = strlen(m->names[i]);
        if (o + n + 8 >= len) {
            snprintf(out + o, len - o, ", ...");
            return;
        }
        o += (size_t)snprintf(out + o, len - o, "%s%s", i ? ", " : "", m->names[i]);
    }
}

weft_status_t weft_prompt_resolve(const struct weft_job_model *model, const char *text,
                                  const char *where, struct weft_job_prompt *p, char *err,
                                  size_t err_len)
{
    size_t n = strlen(text);
    int64_t tokens = n < WEFT_JOB_NAME_MAX ? weft_job_model_prompt_tokens(model, text) : -1;
    if (tokens > 0) {
        *p = (struct weft_job_prompt){.tokens = tokens};
        snprintf(p->name, sizeof(p->name), "%s", text);
        return WEFT_OK;
    }
    char names[300];
    names_list(model, names, sizeof(names));
    if (model->n_names == 0)
        snprintf(err, err_len, "\"%s\": this model has no text encoder (weft cannot encode text "
                 "yet) and no precomputed prompts (its prompts/ folder is empty)", where);
    else
        snprintf(err, err_len, "\"%s\": this model has no text encoder (weft cannot encode text "
                 "yet); a prompt must be the name of one of its precomputed prompts: %s", where,
                 names);
    return WEFT_ERR_INVALID;
}
