/* Job requests: strict JSON validation (unknown and duplicate fields refused, integers exact,
 * \u0000 refused), prompt embeddings checked against the model, and the journal form. */
#include "coordinator/job.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/base64.h"
#include "common/json.h"
#include "common/log.h"
#include "common/utf8.h"
#include "model/checkpoint.h"
#include "model/flux.h"
#include "model/safetensors.h"

#define MAX_SAFE_INT 9007199254740992.0 /* 2^53: larger JSON numbers are not exact doubles */

static int64_t model_tokens(const struct weft_job_model *m, const char *name);

static weft_status_t errf(char *err, size_t len, weft_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static weft_status_t errf(char *err, size_t len, weft_status_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): a false positive on glibc */
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return st;
}

/* A configured limit, or the hard bound when none (0) or a larger one is given. */
static int64_t limit(int64_t configured, int64_t hard)
{
    return configured > 0 && configured < hard ? configured : hard;
}

/* ---------------------------------------------------------------------------------------- */
/* The model                                                                                 */

/* A prompt name: 1..63 of [A-Za-z0-9._-], not starting with '.' (so never a path). */
static bool name_ok(const char *s, size_t n)
{
    if (n == 0 || n >= WEFT_JOB_NAME_MAX || s[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

/* The tokens of one prompts/ file, or why it does not fit the model. */
static weft_status_t scan_one(const struct weft_job_model *m, const char *path, int64_t *tokens_p,
                              struct weft_error *err)
{
    struct weft_st_file *f;
    weft_status_t st = weft_st_open(path, &f, err);
    if (st != WEFT_OK)
        return st;
    st = weft_model_check_prompt(m->desc, f, path, tokens_p, err);
    weft_st_close(f);
    return st;
}

static weft_status_t names_grow(struct weft_job_model *m, size_t *cap)
{
    if (m->n_names < *cap)
        return WEFT_OK;
    size_t ncap = *cap ? *cap * 2 : 16;
    void *p = weft_realloc(m->names, ncap * sizeof(*m->names));
    if (p)
        m->names = p;
    void *t = p ? weft_realloc(m->name_tokens, ncap * sizeof(*m->name_tokens)) : NULL;
    if (!p || !t)
        return WEFT_ERR_NOMEM;
    m->name_tokens = t;
    *cap = ncap;
    return WEFT_OK;
}

static weft_status_t scan_prompts(struct weft_job_model *m)
{
    DIR *d = opendir(m->prompts_dir);
    if (!d) {
        char why[8];
        if (weft_model_text_missing(m->desc, why, sizeof(why)))
            WEFT_LOG_WARN("api", "%s: %s; jobs can use inline prompt embeddings only",
                          m->prompts_dir, strerror(errno));
        else /* a model that encodes text needs no precomputed prompts */
            WEFT_LOG_DEBUG("api", "%s: %s; no precomputed prompts", m->prompts_dir,
                           strerror(errno));
        return WEFT_OK;
    }
    size_t cap = 0;
    struct dirent *e;
    weft_status_t st = WEFT_OK;
    while ((e = readdir(d)) && st == WEFT_OK) {
        size_t n = strlen(e->d_name);
        if (n <= 12 || strcmp(e->d_name + n - 12, ".safetensors") != 0 ||
            !name_ok(e->d_name, n - 12))
            continue;
        char path[WEFT_CONF_PATH + 400];
        snprintf(path, sizeof(path), "%s/%s", m->prompts_dir, e->d_name);
        struct weft_error why = WEFT_ERROR_INIT;
        int64_t tokens = 0;
        if (scan_one(m, path, &tokens, &why) != WEFT_OK) {
            WEFT_LOG_WARN("api", "%s; left out of the prompts", weft_error_text(&why));
            continue;
        }
        if ((st = names_grow(m, &cap)) != WEFT_OK)
            break;
        snprintf(m->names[m->n_names], WEFT_JOB_NAME_MAX, "%.*s", (int)(n - 12), e->d_name);
        m->name_tokens[m->n_names++] = tokens;
    }
    closedir(d);
    /* sort names and their tokens together */
    for (size_t i = 1; i < m->n_names; i++)
        for (size_t k = i; k > 0 && name_cmp(m->names[k - 1], m->names[k]) > 0; k--) {
            char tmp[WEFT_JOB_NAME_MAX];
            memcpy(tmp, m->names[k], sizeof(tmp));
            memcpy(m->names[k], m->names[k - 1], sizeof(tmp));
            memcpy(m->names[k - 1], tmp, sizeof(tmp));
            int64_t t = m->name_tokens[k];
            m->name_tokens[k] = m->name_tokens[k - 1];
            m->name_tokens[k - 1] = t;
        }
    return st;
}

weft_status_t weft_job_model_load(const char *dir, struct weft_job_model **model_p,
                                  struct weft_error *err)
{
    struct weft_job_model *m = weft_calloc(1, sizeof(*m));
    if (!m)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    snprintf(m->dir, sizeof(m->dir), "%s", dir);
    weft_status_t st = weft_model_open(dir, &m->desc, err);
    if (st == WEFT_OK) {
        m->prompts_dir = m->desc->prompts_dir;
        if ((st = scan_prompts(m)) != WEFT_OK)
            weft_error_refuse(err, st, "out of memory");
    }
    if (st != WEFT_OK) {
        weft_job_model_destroy(m);
        return st;
    }
    *model_p = m;
    return WEFT_OK;
}

void weft_job_model_destroy(struct weft_job_model *model)
{
    if (!model)
        return;
    weft_model_close(model->desc);
    weft_free(model->names);
    weft_free(model->name_tokens);
    weft_free(model);
}

int64_t weft_job_model_prompt_tokens(const struct weft_job_model *m, const char *name)
{
    return model_tokens(m, name);
}

/* The tokens of a prompts/ name, -1 when there is no such name. */
static int64_t model_tokens(const struct weft_job_model *m, const char *name)
{
    const char(*hit)[WEFT_JOB_NAME_MAX] =
        m->n_names ? bsearch(name, m->names, m->n_names, sizeof(*m->names), name_cmp) : NULL;
    return hit ? m->name_tokens[hit - m->names] : -1;
}

/* ---------------------------------------------------------------------------------------- */
/* Strict JSON helpers                                                                       */

/* Every member of obj is one of known[], and none appears twice. */
static weft_status_t check_fields(const cJSON *obj, const char *where, const char *const *known,
                                  size_t n_known, char *err, size_t len)
{
    for (const cJSON *c = obj->child; c; c = c->next) {
        bool found = false;
        for (size_t k = 0; k < n_known && !found; k++)
            found = strcmp(c->string, known[k]) == 0;
        if (!found)
            return errf(err, len, WEFT_ERR_INVALID, "%sunknown field \"%.64s\"", where,
                        c->string);
        for (const cJSON *d = c->next; d; d = d->next)
            if (strcmp(c->string, d->string) == 0)
                return errf(err, len, WEFT_ERR_INVALID, "%sfield \"%.64s\" given twice", where,
                            c->string);
    }
    return WEFT_OK;
}

static weft_status_t get_int(const cJSON *obj, const char *key, int64_t def, int64_t lo,
                             int64_t hi, const char *limit, int64_t *out, char *err, size_t len)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) {
        *out = def;
        return WEFT_OK;
    }
    double d = v->valuedouble;
    if (!cJSON_IsNumber(v) || !isfinite(d) || d != floor(d) || fabs(d) > MAX_SAFE_INT)
        return errf(err, len, WEFT_ERR_INVALID, "\"%s\" must be an integer", key);
    if (d < (double)lo || d > (double)hi)
        return errf(err, len, WEFT_ERR_RANGE, "\"%s\": %.0f is outside %lld..%lld%s", key, d,
                    (long long)lo, (long long)hi, limit);
    *out = (int64_t)d;
    return WEFT_OK;
}

/* A seed: an integer 0..2^53, a decimal string up to 2^64 - 1, or -1 (either way) or absent for
 * one drawn at submission (*random_p). */
static weft_status_t get_seed(const cJSON *obj, uint64_t *out, bool *random_p, char *err,
                              size_t len)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, "seed");
    *random_p = false;
    if (!v || cJSON_IsNull(v) || (cJSON_IsNumber(v) && v->valuedouble == -1.0) ||
        (cJSON_IsString(v) && strcmp(v->valuestring, "-1") == 0)) {
        *out = 0;
        *random_p = true;
        return WEFT_OK;
    }
    if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (!isfinite(d) || d != floor(d) || d < 0 || d > MAX_SAFE_INT)
            return errf(err, len, WEFT_ERR_INVALID,
                        "\"seed\" must be an integer in 0..2^53 (larger ones as a decimal "
                        "string), or -1 for a random one");
        *out = (uint64_t)d;
        return WEFT_OK;
    }
    const char *s = cJSON_IsString(v) ? v->valuestring : NULL;
    if (!s || !*s || strlen(s) > 20 || strspn(s, "0123456789") != strlen(s))
        return errf(err, len, WEFT_ERR_INVALID,
                    "\"seed\" must be a non-negative integer or a decimal string");
    errno = 0;
    char *end;
    unsigned long long x = strtoull(s, &end, 10);
    if (errno || *end)
        return errf(err, len, WEFT_ERR_RANGE, "\"seed\": %s does not fit in 64 bits", s);
    *out = x;
    return WEFT_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Requests                                                                                  */

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

weft_status_t weft_job_prompt_from_text(const struct weft_job_model *m, const char *text,
                                        int64_t max_sequence_length, const char *where,
                                        bool embeds_field, struct weft_job_prompt *p, char *err,
                                        size_t err_len)
{
    char why[400];
    const char *missing = weft_model_text_missing(m->desc, why, sizeof(why));
    const size_t n = strlen(text);
    if (!missing) {
        if (n > WEFT_JOB_MAX_TEXT_BYTES)
            return errf(err, err_len, WEFT_ERR_RANGE, "%s: %zu bytes of text; at most %d",
                        where, n, WEFT_JOB_MAX_TEXT_BYTES);
        char *t = weft_strdup(text);
        if (!t)
            return WEFT_ERR_NOMEM;
        *p = (struct weft_job_prompt){.text = t, .tokens = max_sequence_length};
        return WEFT_OK;
    }
    int64_t tokens = n < WEFT_JOB_NAME_MAX && name_ok(text, n) ? model_tokens(m, text) : -1;
    if (tokens > 0) {
        *p = (struct weft_job_prompt){.tokens = tokens};
        snprintf(p->name, sizeof(p->name), "%s", text);
        return WEFT_OK;
    }
    char names[300];
    names_list(m, names, sizeof(names));
    if (m->n_names == 0)
        return errf(err, err_len, WEFT_ERR_UNSUPPORTED,
                    "%s: %s; and it has no precomputed prompts (its prompts/ folder is empty)",
                    where, missing);
    return errf(err, err_len, WEFT_ERR_UNSUPPORTED,
                "%s: %s; a prompt for it is the name of one of its precomputed prompts (%s)%s",
                where, missing, names,
                embeds_field ? ", or embeddings in \"prompt_embeds\"" : "");
}

/* E: "name", {"name": "name"} or {"safetensors": "<base64>"}; where names it in errors. */
static weft_status_t parse_embeds(const cJSON *v, const char *where, int i,
                                  const struct weft_job_model *m, struct weft_job_prompt *p,
                                  char *err, size_t len)
{
    const char *name = NULL;
    if (cJSON_IsString(v)) {
        name = v->valuestring;
    } else if (cJSON_IsObject(v)) {
        static const char *const known[] = {"name", "safetensors"};
        weft_status_t st = check_fields(v, where, known, 2, err, len);
        if (st != WEFT_OK)
            return st;
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(v, "name");
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(v, "safetensors");
        if ((n != NULL) == (s != NULL))
            return errf(err, len, WEFT_ERR_INVALID, "%sgive one of \"name\" or \"safetensors\"",
                        where);
        if (n && !cJSON_IsString(n))
            return errf(err, len, WEFT_ERR_INVALID, "%s\"name\" must be a string", where);
        if (n)
            name = n->valuestring;
        if (s) {
            if (!cJSON_IsString(s))
                return errf(err, len, WEFT_ERR_INVALID,
                            "%s\"safetensors\" must be a base64 string", where);
            void *data;
            size_t n_data;
            st = weft_base64_decode(s->valuestring, strlen(s->valuestring), &data, &n_data);
            if (st == WEFT_ERR_NOMEM)
                return st;
            if (st != WEFT_OK)
                return errf(err, len, WEFT_ERR_INVALID,
                            "%s\"safetensors\" is not base64 (RFC 4648, padded)", where);
            char what[40];
            snprintf(what, sizeof(what), "prompts[%d]", i);
            struct weft_error why = WEFT_ERROR_INIT;
            struct weft_st_file *f = NULL;
            st = weft_st_open_memory(what, data, n_data, &f, &why);
            if (st == WEFT_OK)
                st = weft_model_check_prompt(m->desc, f, what, &p->tokens, &why);
            if (st == WEFT_OK)
                st = weft_model_check_prompt_values(f, what, &why);
            weft_st_close(f);
            if (st != WEFT_OK) {
                weft_free(data);
                return st == WEFT_ERR_NOMEM
                           ? st
                           : errf(err, len, WEFT_ERR_INVALID, "%s", weft_error_text(&why));
            }
            p->name[0] = '\0';
            p->data = data;
            p->len = n_data;
            return WEFT_OK;
        }
    } else {
        return errf(err, len, WEFT_ERR_INVALID,
                    "%sprecomputed embeddings are a name or an object {\"name\"} or "
                    "{\"safetensors\"}", where);
    }
    if (!name_ok(name, strlen(name)))
        return errf(err, len, WEFT_ERR_INVALID,
                    "%sprompt name \"%.64s\" is not a name (letters, digits, '.', '_', '-')",
                    where, name);
    if ((p->tokens = model_tokens(m, name)) < 0)
        return errf(err, len, WEFT_ERR_NOT_FOUND,
                    "%sunknown prompt \"%s\" (not in %s)", where, name, m->prompts_dir);
    snprintf(p->name, sizeof(p->name), "%s", name);
    return WEFT_OK;
}

/* P of "prompt"/"prompts": text (or, on a model without text encoders, a precomputed
 * prompt's name), or an embeddings object. */
static weft_status_t parse_prompt(const cJSON *v, const char *key, int i, bool many,
                                  const struct weft_job_model *m, int64_t msl,
                                  struct weft_job_prompt *p, char *err, size_t len)
{
    char where[48];
    if (many)
        snprintf(where, sizeof(where), "\"%s\"[%d]", key, i);
    else
        snprintf(where, sizeof(where), "\"%s\"", key);
    const bool embeds = strcmp(key, "prompt_embeds") == 0;
    if (cJSON_IsString(v) && !embeds)
        return weft_job_prompt_from_text(m, v->valuestring, msl, where, true, p, err, len);
    if (!embeds && !cJSON_IsString(v) && !cJSON_IsObject(v))
        return errf(err, len, WEFT_ERR_INVALID,
                    "%s: a prompt is text, or precomputed embeddings {\"name\"} or "
                    "{\"safetensors\"}", where);
    char w[56];
    snprintf(w, sizeof(w), "%s: ", where);
    return parse_embeds(v, w, i, m, p, err, len);
}

static weft_status_t parse_prompts(const cJSON *root, const struct weft_job_limits *lim,
                                   const struct weft_job_model *m, struct weft_job_spec *spec,
                                   char *err, size_t len)
{
    static const char *const keys[] = {"prompt", "prompts", "prompt_embeds"};
    const cJSON *given = NULL;
    const char *key = NULL;
    for (int k = 0; k < 3; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, keys[k]);
        if (v && given)
            return errf(err, len, WEFT_ERR_INVALID,
                        "give one of \"prompt\", \"prompts\" or \"prompt_embeds\"");
        if (v)
            given = v, key = keys[k];
    }
    if (!given)
        return errf(err, len, WEFT_ERR_INVALID,
                    "give one of \"prompt\", \"prompts\" or \"prompt_embeds\"");
    const bool many = cJSON_IsArray(given);
    if (strcmp(key, "prompts") == 0 && !many)
        return errf(err, len, WEFT_ERR_INVALID, "\"prompts\" must be an array");
    int n = 1;
    if (many) {
        int size = cJSON_GetArraySize(given);
        const int64_t max = limit(lim->max_prompts, WEFT_JOB_MAX_PROMPTS);
        if (size < 1 || size > max)
            return errf(err, len, WEFT_ERR_RANGE,
                        "\"%s\" has %d entries; 1..%lld allowed ([api] max_prompts)", key, size,
                        (long long)max);
        n = size;
    }
    /* room for a negative prompt each (parse_negatives) */
    spec->prompts = weft_calloc(2 * (size_t)n, sizeof(*spec->prompts));
    if (!spec->prompts)
        return WEFT_ERR_NOMEM;
    spec->n_prompts = n;
    const cJSON *v = many ? given->child : given;
    for (int i = 0; i < n; i++, v = v->next) {
        weft_status_t st = parse_prompt(v, key, i, many, m, spec->max_sequence_length,
                                        &spec->prompts[i], err, len);
        if (st != WEFT_OK)
            return st;
    }
    return WEFT_OK;
}

/* A copy of p (its text or inline bytes duplicated). */
static weft_status_t prompt_copy(const struct weft_job_prompt *p, struct weft_job_prompt *out)
{
    *out = *p;
    out->text = NULL, out->data = NULL;
    if (p->text && !(out->text = weft_strdup(p->text)))
        return WEFT_ERR_NOMEM;
    if (p->data) {
        if (!(out->data = weft_malloc(p->len))) {
            weft_free(out->text);
            out->text = NULL;
            return WEFT_ERR_NOMEM;
        }
        memcpy(out->data, p->data, p->len);
    }
    return WEFT_OK;
}

/* True CFG (FluxPipeline's negative_prompt and true_cfg_scale): "negative_prompt" for every
 * prompt or "negative_prompts" one per prompt, each taken as a prompt is, into
 * spec->prompts[n_prompts..]; "true_cfg_scale" above 1 needs them. */
static weft_status_t parse_negatives(const cJSON *root, const struct weft_job_model *m,
                                     struct weft_job_spec *s, char *err, size_t len)
{
    const cJSON *one = cJSON_GetObjectItemCaseSensitive(root, "negative_prompt");
    const cJSON *many = cJSON_GetObjectItemCaseSensitive(root, "negative_prompts");
    const cJSON *scale = cJSON_GetObjectItemCaseSensitive(root, "true_cfg_scale");
    s->true_cfg_scale = 1.0;
    if (scale && (!cJSON_IsNumber(scale) || !weft_job_scale_ok(scale->valuedouble)))
        return errf(err, len, WEFT_ERR_INVALID, "\"true_cfg_scale\" must be a number in 0..1000");
    if (scale)
        s->true_cfg_scale = scale->valuedouble;
    if (one && many)
        return errf(err, len, WEFT_ERR_INVALID,
                    "give one of \"negative_prompt\" or \"negative_prompts\"");
    if (!one && !many) {
        if (s->true_cfg_scale > 1.0)
            return errf(err, len, WEFT_ERR_INVALID,
                        "\"true_cfg_scale\" above 1 needs \"negative_prompt\" or "
                        "\"negative_prompts\" (true classifier-free guidance steers away from "
                        "it)");
        return WEFT_OK;
    }
    if (many && (!cJSON_IsArray(many) || cJSON_GetArraySize(many) != s->n_prompts))
        return errf(err, len, WEFT_ERR_INVALID,
                    "\"negative_prompts\" must be an array of %d (one per prompt)", s->n_prompts);
    const cJSON *v = many ? many->child : one;
    weft_status_t st = WEFT_OK;
    for (int i = 0; i < s->n_prompts && st == WEFT_OK; i++) {
        struct weft_job_prompt *p = &s->prompts[s->n_prompts + i];
        if (many || i == 0)
            st = parse_prompt(v, many ? "negative_prompts" : "negative_prompt", i, many != NULL,
                              m, s->max_sequence_length, p, err, len);
        else
            st = prompt_copy(&s->prompts[s->n_prompts], p);
        s->n_negatives = st == WEFT_OK ? i + 1 : i;
        v = many ? v->next : v;
    }
    if (st == WEFT_OK)
        s->n_negatives = s->n_prompts;
    return st;
}

static weft_status_t parse_numbers(const cJSON *root, const struct weft_job_limits *lim,
                                   const struct weft_job_model *model, struct weft_job_spec *s,
                                   char *err, size_t len)
{
    weft_status_t st;
    const int64_t max_steps = limit(lim->max_steps, WEFT_JOB_MAX_STEPS);
    const int64_t max_images = limit(lim->max_images, WEFT_JOB_MAX_IMAGES);
    /* what the request does not say: the model's defaults (model/model.h) */
    const struct weft_model *d = model ? model->desc : NULL;
    const int64_t side = d ? d->default_side : 1024;
    const int64_t text = d ? d->default_text_tokens : WEFT_MODEL_MAX_SEQUENCE_LENGTH;
    if ((st = get_int(root, "height", side, 1, WEFT_JOB_MAX_SIDE, "", &s->height, err, len)) ||
        (st = get_int(root, "width", side, 1, WEFT_JOB_MAX_SIDE, "", &s->width, err, len)) ||
        (st = get_int(root, "steps", 28, 1, max_steps, " ([api] max_steps)", &s->steps, err,
                      len)) ||
        (st = get_int(root, "count", 1, 1, max_images, " ([api] max_images)", &s->count, err,
                      len)) ||
        (st = get_int(root, "max_sequence_length", text, 1, WEFT_MODEL_MAX_SEQUENCE_LENGTH, "",
                      &s->max_sequence_length, err, len)) ||
        (st = get_seed(root, &s->seed, &s->seed_random, err, len)))
        return st;
    s->guidance = 3.5;
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(root, "guidance");
    if (g) {
        if (!cJSON_IsNumber(g) || !weft_job_scale_ok(g->valuedouble))
            return errf(err, len, WEFT_ERR_INVALID, "\"guidance\" must be a number in 0..1000");
        s->guidance = g->valuedouble;
    }
    return WEFT_OK;
}

weft_status_t weft_job_spec_parse(const char *body, size_t len, const struct weft_job_limits *lim,
                                  const struct weft_job_model *model, struct weft_job_spec *spec,
                                  char *err, size_t err_len)
{
    size_t bad_at;
    if (!body || len == 0)
        return errf(err, err_len, WEFT_ERR_INVALID, "empty request body: a JSON object expected");
    if (!weft_utf8_valid(body, len, &bad_at))
        return errf(err, err_len, WEFT_ERR_INVALID, "request body is not UTF-8 (byte %zu)",
                    bad_at);
    char why[160];
    if (!weft_json_strict(body, len, WEFT_JOB_JSON_DEPTH, why, sizeof(why)))
        return errf(err, err_len, WEFT_ERR_INVALID, "malformed JSON: %s", why);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (!root) {
        size_t at = end && end >= body ? (size_t)(end - body) : 0;
        const char *ep = cJSON_GetErrorPtr();
        if (ep && ep >= body && ep <= body + len)
            at = (size_t)(ep - body);
        return errf(err, err_len, WEFT_ERR_INVALID, "malformed JSON near byte %zu", at);
    }
    weft_status_t st = WEFT_ERR_INVALID;
    struct weft_job_spec s = {0};
    while (end && end < body + len && strchr(" \t\r\n", *end))
        end++;
    if (end && end < body + len && *end) {
        errf(err, err_len, st, "trailing data after the JSON object at byte %zu",
             (size_t)(end - body));
        goto out;
    }
    if (!cJSON_IsObject(root)) {
        errf(err, err_len, st, "the request body must be a JSON object");
        goto out;
    }
    static const char *const known[] = {"prompt", "prompts", "prompt_embeds", "height", "width",
                                        "steps", "guidance", "seed", "count",
                                        "max_sequence_length", "negative_prompt",
                                        "negative_prompts", "true_cfg_scale"};
    if ((st = check_fields(root, "", known, sizeof(known) / sizeof(known[0]), err, err_len)) ||
        (st = parse_numbers(root, lim, model, &s, err, err_len)) ||
        (st = parse_prompts(root, lim, model, &s, err, err_len)) ||
        (st = parse_negatives(root, model, &s, err, err_len)))
        goto out;
    *spec = s;
    s = (struct weft_job_spec){0};
out:
    weft_job_spec_cleanup(&s);
    cJSON_Delete(root);
    if (st != WEFT_OK && st != WEFT_ERR_NOMEM)
        WEFT_LOG_DEBUG("api", "job refused: %s", err);
    return st;
}

void weft_job_spec_cleanup(struct weft_job_spec *spec)
{
    for (int i = 0; spec->prompts && i < spec->n_prompts + spec->n_negatives; i++) {
        weft_free(spec->prompts[i].data);
        weft_free(spec->prompts[i].text);
    }
    weft_free(spec->prompts);
    *spec = (struct weft_job_spec){0};
}

int64_t weft_job_spec_images(const struct weft_job_spec *spec)
{
    return (int64_t)spec->n_prompts * spec->count;
}

void weft_job_spec_desc(const struct weft_job_spec *spec, int64_t *tokens,
                        struct weft_job_desc *desc)
{
    for (int i = 0; i < spec->n_prompts + spec->n_negatives; i++)
        tokens[i] = spec->prompts[i].tokens;
    *desc = (struct weft_job_desc){
        .height = spec->height, .width = spec->width, .steps = spec->steps,
        .guidance = spec->guidance, .seed = spec->seed, .count = spec->count,
        .n_prompts = spec->n_prompts, .prompt_tokens = tokens, .decode = true,
        .true_cfg_scale = spec->true_cfg_scale,
        .negative_tokens = spec->n_negatives ? tokens + spec->n_prompts : NULL,
    };
}

/* ---------------------------------------------------------------------------------------- */
/* Journal form                                                                              */

cJSON *weft_job_spec_to_json(const struct weft_job_spec *spec)
{
    cJSON *j = cJSON_CreateObject();
    cJSON *ps = cJSON_AddArrayToObject(j, "prompts");
    if (!ps)
        goto err;
    for (int i = 0; i < spec->n_prompts + spec->n_negatives; i++) {
        cJSON *p = cJSON_CreateObject();
        if (!p)
            goto err;
        cJSON_AddItemToArray(ps, p);
        const struct weft_job_prompt *jp = &spec->prompts[i];
        if (jp->text ? !cJSON_AddStringToObject(p, "text", jp->text)
            : jp->name[0] ? !cJSON_AddStringToObject(p, "name", jp->name)
                          : !cJSON_AddNumberToObject(p, "file", i))
            goto err;
        if (!cJSON_AddNumberToObject(p, "tokens", (double)spec->prompts[i].tokens))
            goto err;
    }
    char seed[24];
    snprintf(seed, sizeof(seed), "%llu", (unsigned long long)spec->seed);
    if (!cJSON_AddNumberToObject(j, "height", (double)spec->height) ||
        !cJSON_AddNumberToObject(j, "width", (double)spec->width) ||
        !cJSON_AddNumberToObject(j, "steps", (double)spec->steps) ||
        !cJSON_AddNumberToObject(j, "count", (double)spec->count) ||
        !cJSON_AddNumberToObject(j, "guidance", spec->guidance) ||
        !cJSON_AddNumberToObject(j, "max_sequence_length", (double)spec->max_sequence_length) ||
        !cJSON_AddStringToObject(j, "seed", seed) ||
        (spec->n_negatives && !cJSON_AddNumberToObject(j, "negatives", spec->n_negatives)) ||
        (spec->true_cfg_scale != 1.0 &&
         !cJSON_AddNumberToObject(j, "true_cfg_scale", spec->true_cfg_scale)))
        goto err;
    return j;
err:
    cJSON_Delete(j);
    return NULL;
}

weft_status_t weft_job_spec_from_json(const cJSON *json, const struct weft_job_model *model,
                                      struct weft_job_spec *spec, char *err, size_t err_len)
{
    struct weft_job_spec s = {0};
    weft_status_t st = WEFT_ERR_FORMAT;
    const cJSON *ps = cJSON_GetObjectItemCaseSensitive(json, "prompts");
    const cJSON *neg = cJSON_GetObjectItemCaseSensitive(json, "negatives");
    const cJSON *scale = cJSON_GetObjectItemCaseSensitive(json, "true_cfg_scale");
    int n = cJSON_IsArray(ps) ? cJSON_GetArraySize(ps) : 0;
    const int n_neg = !neg ? 0
                      : cJSON_IsNumber(neg) && neg->valuedouble >= 0 &&
                              neg->valuedouble <= WEFT_JOB_MAX_PROMPTS
                          ? (int)neg->valuedouble
                          : -1;
    /* the negatives (one per prompt, or none) follow the prompts */
    if (n < 1 || n > 2 * WEFT_JOB_MAX_PROMPTS || n_neg < 0 ||
        (n_neg != 0 && 2 * n_neg != n) || (n_neg == 0 && n > WEFT_JOB_MAX_PROMPTS)) {
        errf(err, err_len, st, "\"prompts\" or \"negatives\" missing or out of bounds");
        goto out;
    }
    if (scale && (!cJSON_IsNumber(scale) || !weft_job_scale_ok(scale->valuedouble))) {
        errf(err, err_len, st, "\"true_cfg_scale\" out of bounds");
        goto out;
    }
    if (!(s.prompts = weft_calloc((size_t)n, sizeof(*s.prompts)))) {
        st = WEFT_ERR_NOMEM;
        goto out;
    }
    s.n_prompts = n - n_neg;
    s.n_negatives = n_neg;
    s.true_cfg_scale = scale ? scale->valuedouble : 1.0;
    /* the bounds of the API's fields, without the configurable limits (which may have changed
     * since the job was accepted: an accepted job stays accepted) */
    static const struct weft_job_limits wide = {0, 0, 0, 0};
    if ((st = parse_numbers(json, &wide, model, &s, err, err_len)) != WEFT_OK) {
        st = st == WEFT_ERR_NOMEM ? st : WEFT_ERR_FORMAT;
        goto out;
    }
    st = WEFT_ERR_FORMAT;
    int i = 0;
    for (const cJSON *p = ps->child; p; p = p->next, i++) {
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (cJSON_IsString(text)) {
            char where[32];
            snprintf(where, sizeof(where), "prompt %d", i);
            weft_status_t ts = weft_job_prompt_from_text(model, text->valuestring,
                                                         s.max_sequence_length, where, false,
                                                         &s.prompts[i], err, err_len);
            if (ts != WEFT_OK) {
                st = ts == WEFT_ERR_NOMEM ? ts : WEFT_ERR_FORMAT;
                goto out;
            }
            continue;
        }
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(p, "name");
        const cJSON *file = cJSON_GetObjectItemCaseSensitive(p, "file");
        const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(p, "tokens");
        struct weft_job_prompt *jp = &s.prompts[i];
        if (cJSON_IsString(name) && name_ok(name->valuestring, strlen(name->valuestring))) {
            snprintf(jp->name, sizeof(jp->name), "%s", name->valuestring);
            if ((jp->tokens = model_tokens(model, jp->name)) < 0) {
                errf(err, err_len, st, "prompt %d: \"%s\" is no longer in %s", i, jp->name,
                     model->prompts_dir);
                goto out;
            }
        } else if (cJSON_IsNumber(file) && file->valuedouble == i && cJSON_IsNumber(tokens) &&
                   tokens->valuedouble >= 1 && tokens->valuedouble <= WEFT_JOB_MAX_TEXT_TOKENS) {
            jp->tokens = (int64_t)tokens->valuedouble;
        } else {
            errf(err, err_len, st, "prompt %d is neither a name nor this job's file", i);
            goto out;
        }
    }
    st = WEFT_OK;
    *spec = s;
    s = (struct weft_job_spec){0};
out:
    weft_job_spec_cleanup(&s);
    return st;
}
