/* The OpenAI images API, as the servers of open models serve it (SGLang-Diffusion, vLLM-Omni,
 * LocalAI, stable-diffusion.cpp): POST /v1/images/generations and GET /v1/models.
 *
 * A generation is a weft job like any other (it is in /v1/jobs, journaled, retried, cancelled
 * the same way); the request waits for it, as OpenAI's does, and is answered with the images
 * inline (b64_json) or as URLs of /v1/jobs/{id}/images/{i}. Errors have OpenAI's shape,
 * {"error": {"message", "type", "param", "code"}}, so that OpenAI clients show the cause.
 *
 * Request fields: OpenAI's model, prompt, n, size ("WxH" or "auto"), response_format
 * (b64_json, url), output_format (png, jpeg, webp), output_compression (0..100), and quality,
 * style, background ("auto", "opaque"), moderation and user (accepted; weft makes opaque
 * images of the size asked, whatever the quality); weft's own seed (-1 or absent: random),
 * steps (or num_inference_steps), guidance (or guidance_scale), and Diffusers' negative_prompt
 * and true_cfg_scale (true classifier-free guidance: FluxPipeline's neg + s (pred - neg)). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/base64.h"
#include "common/json.h"
#include "common/log.h"
#include "common/utf8.h"
#include "coordinator/internal.h"
#include "coordinator/prompt.h"

void weft_api_openai_finish(struct weft_coord *c, struct weft_watch *w, struct job *j);
void weft_api_openai_timeout(struct weft_coord *c, struct weft_watch *w, struct job *j);

/* The id /v1/models lists: the model folder's name. */
static void model_id(const struct weft_job_model *m, char *out, size_t len)
{
    const char *dir = m->dir;
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    size_t start = n;
    while (start > 0 && dir[start - 1] != '/')
        start--;
    snprintf(out, len, "%.*s", (int)(n - start), dir + start);
}

/* {"error": {"message", "type", "param", "code"}} with status code. */
static void oa_error(struct weft_api_response *resp, int code, const char *msg, const char *param,
                     const char *err_code)
{
    char safe[WEFT_API_ERROR_TEXT];
    weft_api_error_text(msg, safe);
    cJSON *o = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "message", safe);
    cJSON_AddStringToObject(e, "type", code >= 500 ? "server_error" : "invalid_request_error");
    if (param)
        cJSON_AddStringToObject(e, "param", param);
    else
        cJSON_AddNullToObject(e, "param");
    if (err_code)
        cJSON_AddStringToObject(e, "code", err_code);
    else
        cJSON_AddNullToObject(e, "code");
    weft_api_respond_json(resp, code, o);
}

void weft_api_openai_reshape(struct weft_api_response *resp)
{
    char msg[480] = "refused";
    cJSON *e = resp->body ? cJSON_ParseWithLength(resp->body, resp->len) : NULL;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "error");
    if (cJSON_IsString(m))
        snprintf(msg, sizeof(msg), "%s", m->valuestring);
    cJSON_Delete(e);
    oa_error(resp, resp->code, msg, NULL, NULL);
}

void weft_api_models(struct weft_coord *c, struct weft_api_response *resp)
{
    char id[256];
    model_id(c->model, id, sizeof(id));
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddItemToArray(data, m);
    cJSON_AddStringToObject(m, "id", id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", floor(c->started_at));
    cJSON_AddStringToObject(m, "owned_by", "weft");
    cJSON *x = cJSON_AddObjectToObject(m, "weft");
    cJSON_AddStringToObject(x, "class", c->model->desc->pipeline_class);
    cJSON_AddBoolToObject(x, "text_encoder", weft_prompt_has_text_encoder(c->model));
    /* what a request that does not say gets (model/model.h) */
    cJSON_AddNumberToObject(x, "default_size", (double)c->model->desc->default_side);
    cJSON_AddNumberToObject(x, "max_sequence_length",
                            (double)c->model->desc->default_text_tokens);
    cJSON *names = cJSON_AddArrayToObject(x, "prompts");
    for (size_t i = 0; names && i < c->model->n_names; i++)
        cJSON_AddItemToArray(names, cJSON_CreateString(c->model->names[i]));
    weft_api_respond_json(resp, 200, o);
}

/* ---------------------------------------------------------------------------------------- */
/* The request                                                                               */

struct oa_request {
    struct weft_job_spec spec;
    struct weft_openai_opts opts;
};

struct oa_fail {
    int code;
    char msg[480];
    char param_buf[72]; /* a copy: the request's JSON is gone when the answer is made */
    const char *param, *err_code;
};

static bool fail(struct oa_fail *f, int code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static bool fail(struct oa_fail *f, int code, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): a false positive on glibc */
    vsnprintf(f->msg, sizeof(f->msg), fmt, ap);
    va_end(ap);
    f->code = code;
    f->param = NULL;
    if (param) {
        snprintf(f->param_buf, sizeof(f->param_buf), "%s", param);
        f->param = f->param_buf;
    }
    return false;
}

static bool is_one_of(const char *v, const char *const *choices)
{
    for (; *choices; choices++)
        if (strcmp(v, *choices) == 0)
            return true;
    return false;
}

/* An integer field within [lo, hi] (absent: *out unchanged). */
static bool get_int(const cJSON *root, const char *key, int64_t lo, int64_t hi, int64_t *out,
                    struct oa_fail *f)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v))
        return true;
    double d = v->valuedouble;
    if (!cJSON_IsNumber(v) || !isfinite(d) || d != floor(d) || d < (double)lo ||
        d > (double)hi)
        return fail(f, 400, key, "'%s' must be an integer in %lld..%lld", key, (long long)lo,
                    (long long)hi);
    *out = (int64_t)d;
    return true;
}

static bool get_str(const cJSON *root, const char *key, const char **out, struct oa_fail *f)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v))
        return true;
    if (!cJSON_IsString(v))
        return fail(f, 400, key, "'%s' must be a string", key);
    *out = v->valuestring;
    return true;
}

static bool check_known(const cJSON *root, struct oa_fail *f)
{
    static const char *const known[] = {
        "model", "prompt", "n", "size", "response_format", "output_format",
        "output_compression", "quality", "style", "background", "moderation", "user", "seed",
        "steps", "num_inference_steps", "guidance", "guidance_scale", "negative_prompt",
        "true_cfg_scale", "stream", "partial_images", "max_sequence_length", NULL};
    for (const cJSON *m = root->child; m; m = m->next) {
        if (!is_one_of(m->string, known))
            return fail(f, 400, m->string, "unknown field '%.64s'", m->string);
        for (const cJSON *d = m->next; d; d = d->next)
            if (strcmp(m->string, d->string) == 0)
                return fail(f, 400, m->string, "field '%.64s' given twice", m->string);
    }
    return true;
}

static bool parse_size(const char *size, struct weft_job_spec *s, struct oa_fail *f)
{
    if (strcmp(size, "auto") == 0)
        return true;
    /* digits only, no sign, space or leading zero (sscanf's %u would take " +064") */
    unsigned w = 0, h = 0;
    const char *x = strchr(size, 'x');
    const size_t nw = x ? (size_t)(x - size) : 0, nh = x ? strlen(x + 1) : 0;
    const bool digits = x && nw >= 1 && nw <= 5 && nh >= 1 && nh <= 5 && size[0] != '0' &&
                        x[1] != '0' && strspn(size, "0123456789") == nw &&
                        strspn(x + 1, "0123456789") == nh;
    if (!digits || sscanf(size, "%5ux%5u", &w, &h) != 2 || w > WEFT_JOB_MAX_SIDE ||
        h > WEFT_JOB_MAX_SIDE)
        return fail(f, 400, "size", "'size' must be WIDTHxHEIGHT (e.g. 1024x1024) or auto");
    s->width = w;
    s->height = h;
    return true;
}

/* Steps, guidance and seed, under weft's names or the Diffusers' ones the other servers use. */
static bool parse_weft_fields(const cJSON *root, const struct weft_conf_api *api,
                              struct weft_job_spec *s, struct oa_fail *f)
{
    const int64_t max_steps = api->max_steps;
    if (cJSON_HasObjectItem(root, "steps") && cJSON_HasObjectItem(root, "num_inference_steps"))
        return fail(f, 400, "steps", "give one of 'steps' or 'num_inference_steps'");
    if (!get_int(root, "steps", 1, max_steps, &s->steps, f) ||
        !get_int(root, "num_inference_steps", 1, max_steps, &s->steps, f))
        return false;
    const char *gk = cJSON_HasObjectItem(root, "guidance") ? "guidance" : "guidance_scale";
    if (cJSON_HasObjectItem(root, "guidance") && cJSON_HasObjectItem(root, "guidance_scale"))
        return fail(f, 400, "guidance", "give one of 'guidance' or 'guidance_scale'");
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(root, gk);
    if (g && !cJSON_IsNull(g)) {
        if (!cJSON_IsNumber(g) || !isfinite(g->valuedouble) || g->valuedouble < 0 ||
            g->valuedouble > WEFT_JOB_MAX_GUIDANCE)
            return fail(f, 400, gk, "'%s' must be a number in 0..1000", gk);
        s->guidance = g->valuedouble;
    }
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(root, "seed");
    s->seed_random = true;
    if (seed && !cJSON_IsNull(seed) && !(cJSON_IsNumber(seed) && seed->valuedouble == -1)) {
        double d = seed->valuedouble;
        if (!cJSON_IsNumber(seed) || !isfinite(d) || d != floor(d) || d < 0 ||
            d > 9007199254740992.0)
            return fail(f, 400, "seed", "'seed' must be an integer in 0..2^53, or -1 for a "
                                        "random one");
        s->seed = (uint64_t)d;
        s->seed_random = false;
    }
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(root, "true_cfg_scale");
    s->true_cfg_scale = 1.0;
    if (cfg && !cJSON_IsNull(cfg)) {
        if (!cJSON_IsNumber(cfg) || !isfinite(cfg->valuedouble) || cfg->valuedouble < 0 ||
            cfg->valuedouble > WEFT_JOB_MAX_GUIDANCE)
            return fail(f, 400, "true_cfg_scale", "'true_cfg_scale' must be a number in 0..1000");
        s->true_cfg_scale = cfg->valuedouble;
    }
    return true;
}

/* A prompt (or negative prompt) as the job API takes text: into spec->prompts[i]. */
static bool prompt_into(const struct weft_job_model *m, const char *text, const char *key,
                        int i, struct weft_job_spec *spec, struct oa_fail *f)
{
    char err[480], where[32];
    snprintf(where, sizeof(where), "\"%s\"", key);
    weft_status_t st = weft_prompt_resolve(m, text, spec->max_sequence_length, where,
                                           &spec->prompts[i], err, sizeof(err));
    if (st == WEFT_ERR_NOMEM)
        return fail(f, 500, NULL, "out of memory");
    if (st != WEFT_OK)
        return fail(f, 400, key, "%s", err);
    return true;
}

/* The OpenAI fields that choose the answer: format, encoding, compression. */
static bool parse_output(const cJSON *root, const struct weft_conf_api *api,
                         struct oa_request *r, struct oa_fail *f)
{
    const char *rf = "b64_json", *of = "png", *bg = "auto";
    static const char *const rfs[] = {"b64_json", "url", NULL};
    static const char *const bgs[] = {"auto", "opaque", NULL};
    if (!get_str(root, "response_format", &rf, f) || !get_str(root, "output_format", &of, f) ||
        !get_str(root, "background", &bg, f))
        return false;
    if (!is_one_of(rf, rfs))
        return fail(f, 400, "response_format", "'response_format' must be b64_json or url");
    int fmt = weft_image_format_parse(of);
    if (fmt < 0 || strcmp(of, "jpg") == 0)
        return fail(f, 400, "output_format", "'output_format' must be png, jpeg or webp");
    if (!is_one_of(bg, bgs))
        return fail(f, 400, "background", "'background' must be auto or opaque: weft's images "
                                          "have no alpha channel");
    int64_t compression = -1;
    if (!get_int(root, "output_compression", 0, 100, &compression, f))
        return false;
    const cJSON *stream = cJSON_GetObjectItemCaseSensitive(root, "stream");
    if (cJSON_IsTrue(stream))
        return fail(f, 400, "stream", "'stream' is not supported: follow the job's progress "
                                      "with GET /v1/jobs/{id}/events");
    r->opts.b64 = strcmp(rf, "b64_json") == 0;
    r->opts.format = (enum weft_image_format)fmt;
    /* OpenAI's compression 0..100 is how much to compress: quality is the rest */
    r->opts.quality = compression >= 0 ? (int)(100 - compression) : (int)api->image_quality;
    if (r->opts.quality < 1)
        r->opts.quality = 1;
    static const char *const strs[] = {"quality", "style", "moderation", "user", NULL};
    for (int i = 0; strs[i]; i++) {
        const char *ignored = NULL;
        if (!get_str(root, strs[i], &ignored, f))
            return false;
    }
    return true;
}

static bool parse_request(const struct weft_job_model *m, const struct weft_conf_api *api,
                          const cJSON *root, struct oa_request *r, struct oa_fail *f)
{
    if (!cJSON_IsObject(root))
        return fail(f, 400, NULL, "the request body must be a JSON object");
    if (!check_known(root, f))
        return false;
    const char *model = NULL, *prompt = NULL;
    if (!get_str(root, "model", &model, f) || !get_str(root, "prompt", &prompt, f))
        return false;
    char id[256];
    model_id(m, id, sizeof(id));
    if (model && model[0] && strcmp(model, id) != 0) {
        f->err_code = "model_not_found";
        return fail(f, 404, "model", "the model '%.100s' is not served here (GET /v1/models: "
                                     "%s)", model, id);
    }
    if (!prompt)
        return fail(f, 400, "prompt", "'prompt' is required");
    if (!prompt[0]) /* OpenAI's API refuses it too; POST /v1/jobs runs Diffusers' "" */
        return fail(f, 400, "prompt", "'prompt' is empty (POST /v1/jobs takes an empty prompt)");
    /* size "auto" or absent, no max_sequence_length: the model's defaults (model/model.h) */
    const struct weft_model *d = m->desc;
    r->spec = (struct weft_job_spec){.height = d ? d->default_side : 1024,
                                     .width = d ? d->default_side : 1024, .steps = 28,
                                     .count = 1, .guidance = 3.5,
                                     .max_sequence_length =
                                         d ? d->default_text_tokens
                                           : WEFT_MODEL_MAX_SEQUENCE_LENGTH};
    const char *size = "auto";
    if (!get_int(root, "max_sequence_length", 1, WEFT_MODEL_MAX_SEQUENCE_LENGTH,
                 &r->spec.max_sequence_length, f) ||
        !get_int(root, "n", 1, api->max_images, &r->spec.count, f) ||
        !get_str(root, "size", &size, f) || !parse_size(size, &r->spec, f) ||
        !parse_weft_fields(root, api, &r->spec, f) || !parse_output(root, api, r, f))
        return false;
    /* the prompt, and (true CFG, Diffusers' negative_prompt) its negative after it */
    const char *negative = NULL;
    if (!get_str(root, "negative_prompt", &negative, f))
        return false;
    if (!negative && r->spec.true_cfg_scale > 1.0)
        return fail(f, 400, "true_cfg_scale", "'true_cfg_scale' above 1 needs a "
                    "'negative_prompt' (true classifier-free guidance steers away from it)");
    r->spec.prompts = weft_calloc(2, sizeof(*r->spec.prompts));
    if (!r->spec.prompts)
        return fail(f, 500, NULL, "out of memory");
    if (!prompt_into(m, prompt, "prompt", 0, &r->spec, f))
        return false;
    r->spec.n_prompts = 1;
    if (negative && !prompt_into(m, negative, "negative_prompt", 1, &r->spec, f))
        return false;
    r->spec.n_negatives = negative ? 1 : 0;
    return true;
}

/* The request body into r, or f filled. */
static void parse_body(const struct weft_job_model *m, const struct weft_conf_api *api,
                       const char *body, size_t len, struct oa_request *r, struct oa_fail *f)
{
    cJSON *root = NULL;
    size_t bad;
    char why[160];
    if (!body || !len)
        fail(f, 400, NULL, "empty request body: a JSON object expected");
    else if (!weft_utf8_valid(body, len, &bad))
        fail(f, 400, NULL, "request body is not UTF-8 (byte %zu)", bad);
    else if (!weft_json_strict(body, len, WEFT_JOB_JSON_DEPTH, why, sizeof(why)))
        fail(f, 400, NULL, "malformed JSON: %s", why);
    else if (!(root = cJSON_ParseWithLength(body, len)))
        fail(f, 400, NULL, "malformed JSON");
    else
        (void)parse_request(m, api, root, r, f);
    cJSON_Delete(root);
    if (f->code)
        weft_job_spec_cleanup(&r->spec);
}

int weft_api_openai_parse(const struct weft_job_model *m, const struct weft_conf_api *api,
                          const char *body, size_t len, struct weft_job_spec *spec, char *err,
                          size_t err_len)
{
    struct oa_request r = {0};
    struct oa_fail f = {0};
    parse_body(m, api, body, len, &r, &f);
    if (f.code) {
        snprintf(err, err_len, "%s", f.msg);
        return f.code;
    }
    *spec = r.spec;
    return 200;
}

/* ---------------------------------------------------------------------------------------- */
/* The answer                                                                                */

/* {"created", "data": [{"b64_json"} | {"url"}], ...} for a job that is done. */
static void answer_done(struct weft_coord *c, const struct weft_openai_opts *o,
                        const struct job *j, struct weft_api_response *resp)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "created", floor(j->finished_at));
    cJSON *data = cJSON_AddArrayToObject(root, "data");
    for (int i = 0; data && i < j->n_images; i++) {
        cJSON *item = cJSON_CreateObject();
        cJSON_AddItemToArray(data, item);
        if (!o->b64) {
            char url[700];
            snprintf(url, sizeof(url), "%s/v1/jobs/%s/images/%d%s%s", o->base_url, j->id, i,
                     o->format == WEFT_IMAGE_PNG ? "" : "?format=",
                     o->format == WEFT_IMAGE_PNG ? "" : weft_image_format_name(o->format));
            cJSON_AddStringToObject(item, "url", url);
            continue;
        }
        char *bytes, msg[200];
        size_t len;
        int code = weft_api_image_bytes(c, j, i, o->format, o->quality, &bytes, &len, msg,
                                        sizeof(msg));
        if (code != 200) {
            cJSON_Delete(root);
            oa_error(resp, code == 404 ? 500 : code, msg, NULL, NULL);
            return;
        }
        char *b64 = weft_base64_encode(bytes, len);
        weft_free(bytes);
        if (!b64 || !cJSON_AddStringToObject(item, "b64_json", b64)) {
            weft_free(b64);
            cJSON_Delete(root);
            oa_error(resp, 500, "out of memory", NULL, NULL);
            return;
        }
        weft_free(b64);
    }
    char size[48], seed[24];
    snprintf(size, sizeof(size), "%lldx%lld", (long long)j->spec.width,
             (long long)j->spec.height);
    snprintf(seed, sizeof(seed), "%llu", (unsigned long long)j->spec.seed);
    cJSON_AddStringToObject(root, "output_format", weft_image_format_name(o->format));
    cJSON_AddStringToObject(root, "size", size);
    cJSON_AddStringToObject(root, "background", "opaque");
    cJSON *x = cJSON_AddObjectToObject(root, "weft");
    cJSON_AddStringToObject(x, "job", j->id);
    cJSON_AddStringToObject(x, "seed", seed);
    cJSON_AddNumberToObject(x, "steps", (double)j->spec.steps);
    cJSON_AddNumberToObject(x, "guidance", j->spec.guidance);
    snprintf(resp->headers, sizeof(resp->headers), "X-Weft-Job: %s\r\n", j->id);
    weft_api_respond_json(resp, 200, root);
}

/* The answer to a generation whose job j ended (or will not run in this process). */
static void answer(struct weft_coord *c, const struct weft_openai_opts *o, const struct job *j,
                   struct weft_api_response *resp)
{
    char msg[400];
    switch (j->state) {
    case JOB_DONE:
        answer_done(c, o, j, resp);
        return;
    case JOB_FAILED:
        snprintf(msg, sizeof(msg), "job %s failed: %s", j->id, j->reason);
        oa_error(resp, 500, msg, NULL, "job_failed");
        return;
    case JOB_CANCELLED:
        snprintf(msg, sizeof(msg), "job %s was cancelled", j->id);
        oa_error(resp, 409, msg, NULL, "job_cancelled");
        return;
    default:
        snprintf(msg, sizeof(msg), "the server is shutting down; job %s stays queued and runs "
                 "after a restart (GET /v1/jobs/%s)", j->id, j->id);
        oa_error(resp, 503, msg, NULL, "shutting_down");
        snprintf(resp->headers, sizeof(resp->headers), "Retry-After: 5\r\nX-Weft-Job: %s\r\n",
                 j->id);
        return;
    }
}

/* answer(), and on a retry with the same Idempotency-Key the header that says so, as
 * POST /v1/jobs sends it. */
static void answer_job(struct weft_coord *c, const struct weft_openai_opts *o,
                       const struct job *j, struct weft_api_response *resp)
{
    answer(c, o, j, resp);
    const size_t n = strlen(resp->headers);
    if (o->replayed && n < sizeof(resp->headers))
        snprintf(resp->headers + n, sizeof(resp->headers) - n, "Idempotent-Replayed: true\r\n");
}

void weft_api_openai_finish(struct weft_coord *c, struct weft_watch *w, struct job *j)
{
    struct weft_api_response resp = {0};
    answer_job(c, &w->oa, j, &resp);
    if (c->api.access_log)
        WEFT_LOG_INFO("access", "POST /v1/images/generations %d %zu job=%s (answered)",
                      resp.code, resp.len, j->id);
    struct conn *conn = w->conn;
    weft_server_conn_respond(conn, &resp);
    weft_api_watch_drop(c, w);
}

void weft_api_openai_timeout(struct weft_coord *c, struct weft_watch *w, struct job *j)
{
    struct weft_api_response resp = {0};
    char msg[300];
    snprintf(msg, sizeof(msg), "the job did not finish within [api] sync_timeout_ms; it goes on: "
             "GET /v1/jobs/%s", j ? j->id : "?");
    oa_error(&resp, 504, msg, NULL, "timeout");
    struct conn *conn = w->conn;
    weft_server_conn_respond(conn, &resp);
    weft_api_watch_drop(c, w);
}

static void wait_for(struct weft_coord *c, const struct weft_http_request *req,
                     const struct oa_request *r, struct job *j, struct weft_api_response *resp)
{
    if (j->state >= JOB_DONE) {
        answer_job(c, &r->opts, j, resp);
        return;
    }
    struct weft_watch *w = weft_calloc(1, sizeof(*w));
    if (!w) {
        oa_error(resp, 500, "out of memory", NULL, NULL);
        return;
    }
    *w = (struct weft_watch){.kind = WEFT_WATCH_OPENAI, .key = j->key, .oa = r->opts};
    w->deadline_ms = weft_server_now(c) + (uint64_t)c->api.sync_timeout_ms;
    (void)req;
    resp->watch = w;
}

/* The address the client used, for URLs in the answer: "http://<Host>". */
static void base_url(const struct weft_coord *c, const struct weft_http_request *req, char *out,
                     size_t len)
{
    const char *host = req->host && req->host[0] ? req->host : c->address;
    bool ok = strncmp(host, "unix:", 5) != 0 && strlen(host) < 250 &&
              strcspn(host, " \t\"<>\\") == strlen(host);
    snprintf(out, len, "%s%s", ok ? "http://" : "", ok ? host : "");
}

void weft_api_openai_generate(struct weft_coord *c, const struct weft_http_request *req,
                              struct weft_api_response *resp)
{
    struct oa_request r = {0};
    base_url(c, req, r.opts.base_url, sizeof(r.opts.base_url));
    uint8_t hash[32];
    struct job *j = NULL;
    int idem = weft_api_idempotent(c, req, "/v1/images/generations", hash, &j, resp);
    struct oa_fail f = {0};
    if (idem < 0) {
        weft_api_openai_reshape(resp);
        return;
    }
    parse_body(c->model, &c->api, req->body, req->body_len, &r, &f);
    if (idem > 0) {
        weft_job_spec_cleanup(&r.spec); /* a replay: the first job answers */
        r.opts.replayed = true;
    }
    if (f.code) {
        weft_job_spec_cleanup(&r.spec);
        c->m.refused++;
        oa_error(resp, f.code, f.msg, f.param, f.err_code);
        return;
    }
    if (idem == 0) {
        char err[512];
        int code;
        weft_status_t st = weft_coord_job_submit(c, &r.spec, req->idempotency_key, hash, &j,
                                                 &code, err, sizeof(err));
        weft_job_spec_cleanup(&r.spec);
        if (st != WEFT_OK) {
            c->m.refused++;
            oa_error(resp, code, err, NULL, NULL);
            if (code == 503)
                snprintf(resp->headers, sizeof(resp->headers), "Retry-After: 1\r\n");
            return;
        }
    }
    wait_for(c, req, &r, j, resp);
}
