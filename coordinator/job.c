/* Job requests: strict JSON validation (unknown and duplicate fields refused, integers bounded
 * to 2^53), prompt embeddings checked against the model, and the journal form. */
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
#include "common/log.h"
#include "common/utf8.h"
#include "model/checkpoint.h"
#include "model/flux.h"
#include "model/safetensors.h"

#define MAX_SAFE_INT 9007199254740992.0 /* 2^53: larger JSON numbers are not exact doubles */

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

/* ---------------------------------------------------------------------------------------- */
/* base64                                                                                    */

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

weft_status_t weft_base64_decode(const char *text, size_t len, void **data_p, size_t *len_p)
{
    if (len % 4)
        return WEFT_ERR_FORMAT;
    size_t pad = 0;
    if (len && text[len - 1] == '=')
        pad = len >= 2 && text[len - 2] == '=' ? 2 : 1;
    size_t out_len = len / 4 * 3 - pad;
    unsigned char *out = weft_malloc(out_len + 1);
    if (!out)
        return WEFT_ERR_NOMEM;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 4) {
        int v[4];
        bool last = i + 4 == len;
        for (int k = 0; k < 4; k++) {
            unsigned char c = (unsigned char)text[i + k];
            bool pad_ok = last && c == '=' && (size_t)k >= 4 - pad;
            v[k] = pad_ok ? 0 : b64_value(c);
            if (v[k] < 0) {
                weft_free(out);
                return WEFT_ERR_FORMAT;
            }
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 |
                     (uint32_t)v[3];
        unsigned char b[3] = {(unsigned char)(w >> 16), (unsigned char)(w >> 8),
                              (unsigned char)w};
        size_t n = last ? 3 - pad : 3;
        for (size_t k = 0; k < n; k++)
            out[o++] = b[k];
    }
    *data_p = out;
    *len_p = out_len;
    return WEFT_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* The model                                                                                 */

/* prompt_embeds [1, T, joint] (T in 1..WEFT_JOB_MAX_TEXT_TOKENS) and pooled_prompt_embeds with
 * pooled elements ([1, pooled] or [pooled]), as float tensors. */
static weft_status_t check_prompt_file(const struct weft_job_model *m, struct weft_st_file *f,
                                       const char *what, char *err, size_t len)
{
    const struct weft_st_tensor *pe = weft_st_find(f, "prompt_embeds");
    const struct weft_st_tensor *po = weft_st_find(f, "pooled_prompt_embeds");
    if (!pe || !po)
        return errf(err, len, WEFT_ERR_FORMAT,
                    "%s: needs tensors prompt_embeds and pooled_prompt_embeds", what);
    for (int k = 0; k < 2; k++) {
        const struct weft_st_tensor *t = k ? po : pe;
        if (t->dtype != WEFT_DTYPE_F32 && t->dtype != WEFT_DTYPE_BF16 &&
            t->dtype != WEFT_DTYPE_F16)
            return errf(err, len, WEFT_ERR_FORMAT, "%s: %s is %s; F32, BF16 or F16 expected",
                        what, t->name, t->dtype_name);
    }
    if (pe->ndim != 3 || pe->shape[0] != 1 || pe->shape[2] != m->joint_dim || pe->shape[1] < 1 ||
        pe->shape[1] > WEFT_JOB_MAX_TEXT_TOKENS)
        return errf(err, len, WEFT_ERR_FORMAT,
                    "%s: prompt_embeds must be [1, T, %lld] with T in 1..%d (the model's "
                    "joint_attention_dim)", what, (long long)m->joint_dim,
                    WEFT_JOB_MAX_TEXT_TOKENS);
    if (po->numel != m->pooled_dim || po->ndim > 2 || (po->ndim == 2 && po->shape[0] != 1))
        return errf(err, len, WEFT_ERR_FORMAT,
                    "%s: pooled_prompt_embeds must be [1, %lld] (the model's "
                    "pooled_projection_dim)", what, (long long)m->pooled_dim);
    return WEFT_OK;
}

weft_status_t weft_job_model_check_prompt(const struct weft_job_model *model, const char *what,
                                          const void *data, size_t len, char *err,
                                          size_t err_len)
{
    struct weft_st_file *f;
    weft_log_clear_last_error();
    weft_status_t st = weft_st_open_memory(what, data, len, &f);
    if (st == WEFT_ERR_NOMEM)
        return st;
    if (st != WEFT_OK)
        return errf(err, err_len, WEFT_ERR_FORMAT, "%s", weft_log_last_error());
    st = check_prompt_file(model, f, what, err, err_len);
    weft_st_close(f);
    return st;
}

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

static weft_status_t scan_prompts(struct weft_job_model *m)
{
    DIR *d = opendir(m->prompts_dir);
    if (!d) {
        WEFT_LOG_WARN("api", "%s: %s; jobs can use inline prompt embeddings only",
                      m->prompts_dir, strerror(errno));
        return WEFT_OK;
    }
    size_t cap = 0;
    struct dirent *e;
    weft_status_t st = WEFT_OK;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n <= 12 || strcmp(e->d_name + n - 12, ".safetensors") != 0 ||
            !name_ok(e->d_name, n - 12))
            continue;
        char path[2400], err[512];
        snprintf(path, sizeof(path), "%s/%s", m->prompts_dir, e->d_name);
        struct weft_st_file *f;
        if (weft_st_open(path, &f) != WEFT_OK) {
            WEFT_LOG_WARN("api", "%s: left out of the prompts (unreadable)", path);
            continue;
        }
        weft_status_t ok = check_prompt_file(m, f, path, err, sizeof(err));
        weft_st_close(f);
        if (ok != WEFT_OK) {
            WEFT_LOG_WARN("api", "%s; left out of the prompts", err);
            continue;
        }
        if (m->n_names == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            void *p = weft_realloc(m->names, ncap * sizeof(*m->names));
            if (!p) {
                st = WEFT_ERR_NOMEM;
                break;
            }
            m->names = p;
            cap = ncap;
        }
        snprintf(m->names[m->n_names++], WEFT_JOB_NAME_MAX, "%.*s", (int)(n - 12), e->d_name);
    }
    closedir(d);
    if (m->n_names)
        qsort(m->names, m->n_names, sizeof(*m->names), name_cmp);
    return st;
}

weft_status_t weft_job_model_load(const char *dir, struct weft_job_model **model_p)
{
    struct weft_job_model *m = weft_calloc(1, sizeof(*m));
    if (!m)
        return WEFT_ERR_NOMEM;
    snprintf(m->dir, sizeof(m->dir), "%s", dir);
    enum weft_path_kind kind = weft_path_kind(dir);
    weft_status_t st;
    if (kind == WEFT_PATH_PIPELINE) {
        snprintf(m->transformer, sizeof(m->transformer), "%s/transformer", dir);
    } else if (kind == WEFT_PATH_MODEL) {
        snprintf(m->transformer, sizeof(m->transformer), "%s", dir);
    } else {
        WEFT_LOG_ERROR("api", "%s: not a pipeline folder (model_index.json) or a model folder "
                              "(config.json)", dir);
        st = WEFT_ERR_NOT_FOUND;
        goto err_free;
    }
    snprintf(m->prompts_dir, sizeof(m->prompts_dir), "%s/prompts", dir);
    char path[1200];
    snprintf(path, sizeof(path), "%s/config.json", m->transformer);
    cJSON *json;
    if ((st = weft_json_read_file(path, 1 << 20, &json)) != WEFT_OK)
        goto err_free;
    struct weft_flux_config c;
    st = weft_flux_config_parse(json, path, &c);
    cJSON_Delete(json);
    if (st != WEFT_OK)
        goto err_free;
    m->joint_dim = c.joint_attention_dim;
    m->pooled_dim = c.pooled_projection_dim;
    m->in_channels = c.in_channels;
    if ((st = scan_prompts(m)) != WEFT_OK)
        goto err_free;
    *model_p = m;
    return WEFT_OK;
err_free:
    weft_job_model_destroy(m);
    return st;
}

void weft_job_model_destroy(struct weft_job_model *model)
{
    if (!model)
        return;
    weft_free(model->names);
    weft_free(model);
}

static bool model_has(const struct weft_job_model *m, const char *name)
{
    return m->n_names &&
           bsearch(name, m->names, m->n_names, sizeof(*m->names), name_cmp) != NULL;
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

static weft_status_t get_seed(const cJSON *obj, uint64_t *out, char *err, size_t len)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, "seed");
    if (!v) {
        *out = 0;
        return WEFT_OK;
    }
    if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (!isfinite(d) || d != floor(d) || d < 0 || d > MAX_SAFE_INT)
            return errf(err, len, WEFT_ERR_INVALID,
                        "\"seed\" must be an integer in 0..2^53 (larger ones as a decimal "
                        "string)");
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

static weft_status_t parse_prompt(const cJSON *v, int i, const struct weft_job_model *m,
                                  struct weft_job_prompt *p, char *err, size_t len)
{
    char where[48];
    snprintf(where, sizeof(where), "\"prompts\"[%d]: ", i);
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
            char what[40], why[400];
            snprintf(what, sizeof(what), "prompts[%d]", i);
            st = weft_job_model_check_prompt(m, what, data, n_data, why, sizeof(why));
            if (st != WEFT_OK) {
                weft_free(data);
                return st == WEFT_ERR_NOMEM ? st
                                            : errf(err, len, WEFT_ERR_INVALID, "%s", why);
            }
            p->name[0] = '\0';
            p->data = data;
            p->len = n_data;
            return WEFT_OK;
        }
    } else {
        return errf(err, len, WEFT_ERR_INVALID,
                    "%sa prompt is a name or an object {\"name\"} or {\"safetensors\"}", where);
    }
    if (!name_ok(name, strlen(name)))
        return errf(err, len, WEFT_ERR_INVALID,
                    "%sprompt name \"%.64s\" is not a name (letters, digits, '.', '_', '-')",
                    where, name);
    if (!model_has(m, name))
        return errf(err, len, WEFT_ERR_NOT_FOUND,
                    "%sunknown prompt \"%s\" (not in %s)", where, name, m->prompts_dir);
    snprintf(p->name, sizeof(p->name), "%s", name);
    return WEFT_OK;
}

static weft_status_t parse_prompts(const cJSON *root, const struct weft_job_limits *lim,
                                   const struct weft_job_model *m, struct weft_job_spec *spec,
                                   char *err, size_t len)
{
    const cJSON *one = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    const cJSON *many = cJSON_GetObjectItemCaseSensitive(root, "prompts");
    if ((one != NULL) == (many != NULL))
        return errf(err, len, WEFT_ERR_INVALID, "give one of \"prompt\" or \"prompts\"");
    int n = 1;
    if (many) {
        if (!cJSON_IsArray(many))
            return errf(err, len, WEFT_ERR_INVALID, "\"prompts\" must be an array");
        int size = cJSON_GetArraySize(many);
        if (size < 1 || size > lim->max_prompts)
            return errf(err, len, WEFT_ERR_RANGE,
                        "\"prompts\" has %d entries; 1..%lld allowed ([api] max_prompts)", size,
                        (long long)lim->max_prompts);
        n = size;
    }
    spec->prompts = weft_calloc((size_t)n, sizeof(*spec->prompts));
    if (!spec->prompts)
        return WEFT_ERR_NOMEM;
    spec->n_prompts = n;
    const cJSON *v = many ? many->child : one;
    for (int i = 0; i < n; i++, v = v->next) {
        weft_status_t st = parse_prompt(v, i, m, &spec->prompts[i], err, len);
        if (st != WEFT_OK)
            return st;
    }
    return WEFT_OK;
}

static weft_status_t check_sizes(const struct weft_job_spec *s, const struct weft_job_limits *lim,
                                 char *err, size_t len)
{
    if (s->height % 16 || s->width % 16)
        return errf(err, len, WEFT_ERR_INVALID,
                    "\"height\" %lld x \"width\" %lld: both must be multiples of 16",
                    (long long)s->height, (long long)s->width);
    if (s->height * s->width > lim->max_pixels)
        return errf(err, len, WEFT_ERR_RANGE,
                    "%lld x %lld is %lld pixels, over the limit %lld ([api] max_pixels)",
                    (long long)s->width, (long long)s->height,
                    (long long)s->height * (long long)s->width, (long long)lim->max_pixels);
    int64_t images = weft_job_spec_images(s);
    if (images > lim->max_images)
        return errf(err, len, WEFT_ERR_RANGE,
                    "%d prompts x count %lld is %lld images, over the limit %lld ([api] "
                    "max_images)", s->n_prompts, (long long)s->count, (long long)images,
                    (long long)lim->max_images);
    return WEFT_OK;
}

static weft_status_t parse_numbers(const cJSON *root, const struct weft_job_limits *lim,
                                   struct weft_job_spec *s, char *err, size_t len)
{
    weft_status_t st;
    if ((st = get_int(root, "height", 1024, 16, 1 << 20, "", &s->height, err, len)) ||
        (st = get_int(root, "width", 1024, 16, 1 << 20, "", &s->width, err, len)) ||
        (st = get_int(root, "steps", 28, 1, lim->max_steps, " ([api] max_steps)", &s->steps,
                      err, len)) ||
        (st = get_int(root, "count", 1, 1, lim->max_images, " ([api] max_images)", &s->count,
                      err, len)) ||
        (st = get_seed(root, &s->seed, err, len)))
        return st;
    s->guidance = 3.5;
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(root, "guidance");
    if (g) {
        if (!cJSON_IsNumber(g) || !isfinite(g->valuedouble) || g->valuedouble < 0 ||
            g->valuedouble > 1000)
            return errf(err, len, WEFT_ERR_INVALID, "\"guidance\" must be a number in 0..1000");
        s->guidance = g->valuedouble;
    }
    return check_sizes(s, lim, err, len);
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
    static const char *const known[] = {"prompt", "prompts", "height", "width", "steps",
                                        "guidance", "seed", "count"};
    if ((st = check_fields(root, "", known, sizeof(known) / sizeof(known[0]), err, err_len)) ||
        (st = parse_prompts(root, lim, model, &s, err, err_len)) ||
        (st = parse_numbers(root, lim, &s, err, err_len)))
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
    for (int i = 0; spec->prompts && i < spec->n_prompts; i++)
        weft_free(spec->prompts[i].data);
    weft_free(spec->prompts);
    *spec = (struct weft_job_spec){0};
}

int64_t weft_job_spec_images(const struct weft_job_spec *spec)
{
    return (int64_t)spec->n_prompts * spec->count;
}

/* ---------------------------------------------------------------------------------------- */
/* Journal form                                                                              */

cJSON *weft_job_spec_to_json(const struct weft_job_spec *spec)
{
    cJSON *j = cJSON_CreateObject();
    cJSON *ps = cJSON_AddArrayToObject(j, "prompts");
    if (!ps)
        goto err;
    for (int i = 0; i < spec->n_prompts; i++) {
        cJSON *p = cJSON_CreateObject();
        if (!p)
            goto err;
        cJSON_AddItemToArray(ps, p);
        if (spec->prompts[i].name[0] ? !cJSON_AddStringToObject(p, "name", spec->prompts[i].name)
                                     : !cJSON_AddNumberToObject(p, "file", i))
            goto err;
    }
    char seed[24];
    snprintf(seed, sizeof(seed), "%llu", (unsigned long long)spec->seed);
    if (!cJSON_AddNumberToObject(j, "height", (double)spec->height) ||
        !cJSON_AddNumberToObject(j, "width", (double)spec->width) ||
        !cJSON_AddNumberToObject(j, "steps", (double)spec->steps) ||
        !cJSON_AddNumberToObject(j, "count", (double)spec->count) ||
        !cJSON_AddNumberToObject(j, "guidance", spec->guidance) ||
        !cJSON_AddStringToObject(j, "seed", seed))
        goto err;
    return j;
err:
    cJSON_Delete(j);
    return NULL;
}

weft_status_t weft_job_spec_from_json(const cJSON *json, struct weft_job_spec *spec, char *err,
                                      size_t err_len)
{
    struct weft_job_spec s = {0};
    weft_status_t st = WEFT_ERR_FORMAT;
    const cJSON *ps = cJSON_GetObjectItemCaseSensitive(json, "prompts");
    int n = cJSON_IsArray(ps) ? cJSON_GetArraySize(ps) : 0;
    if (n < 1 || n > 65536) {
        errf(err, err_len, st, "\"prompts\" missing or out of bounds");
        goto out;
    }
    if (!(s.prompts = weft_calloc((size_t)n, sizeof(*s.prompts)))) {
        st = WEFT_ERR_NOMEM;
        goto out;
    }
    s.n_prompts = n;
    int i = 0;
    for (const cJSON *p = ps->child; p; p = p->next, i++) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(p, "name");
        const cJSON *file = cJSON_GetObjectItemCaseSensitive(p, "file");
        if (cJSON_IsString(name) && name_ok(name->valuestring, strlen(name->valuestring))) {
            snprintf(s.prompts[i].name, sizeof(s.prompts[i].name), "%s", name->valuestring);
        } else if (!cJSON_IsNumber(file) || file->valuedouble != i) {
            errf(err, err_len, st, "prompt %d is neither a name nor this job's file", i);
            goto out;
        }
    }
    /* the bounds of the API's fields, without the configurable limits (which may have changed
     * since the job was accepted: an accepted job stays accepted) */
    static const struct weft_job_limits wide = {65536, 1 << 30, 1ll << 40, 1000};
    if ((st = parse_numbers(json, &wide, &s, err, err_len)) != WEFT_OK) {
        st = st == WEFT_ERR_NOMEM ? st : WEFT_ERR_FORMAT;
        goto out;
    }
    *spec = s;
    s = (struct weft_job_spec){0};
out:
    weft_job_spec_cleanup(&s);
    return st;
}
