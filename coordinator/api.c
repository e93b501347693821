/* The job API: routes, authentication, and the JSON (or PNG, or Prometheus) answers.
 *
 *   POST   /v1/jobs                   submit (job.h has the body) -> 202 {"id", ...}
 *   GET    /v1/jobs[?state=S]         list ids and states
 *   GET    /v1/jobs/{id}              state, progress, timings, images
 *   GET    /v1/jobs/{id}/images/{i}   image i (PNG)
 *   DELETE /v1/jobs/{id}              cancel
 *   GET    /v1/cluster                the runner's view: workers, mesh, device map
 *   GET    /v1/jobs/{id}/events       progress pushed (Server-Sent Events; events.c)
 *   POST   /v1/images/generations     the OpenAI images API, synchronous (openai.c)
 *   GET    /v1/models                 what the server runs, OpenAI's list (openai.c)
 *   GET    /metrics                   Prometheus text
 *   GET    /healthz                   liveness: {"ok": true}; 503 while shutting down (no token)
 *   GET    /readyz                    readiness: 503 with the reason until jobs can run (no token)
 *   GET    /openapi.json              the OpenAPI 3.1 document of all of this (no token)
 *   GET    /                          the web page (no token; it asks for one)
 *   OPTIONS any of them               204 with Allow (and CORS when [api] cors_origins allows)
 * Errors are {"error": "<one line naming the cause>"} with a 4xx or 5xx status, always UTF-8
 * and bounded whatever the request held; while shutting down every other request gets 503. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/files.h"
#include "common/sha256.h"
#include "common/utf8.h"
#include "coordinator/internal.h"

#define MAX_IMAGE_BYTES (1u << 30)
#define ERROR_TEXT_MAX 480 /* bytes of an error's text, escapes included, before "..." */

/* ---------------------------------------------------------------------------------------- */
/* Pure parts (also driven by the fuzz target)                                              */

bool weft_api_auth_ok(const char *token, const char *authorization)
{
    size_t n = strlen(token);
    if (n == 0)
        return true;
    if (!authorization || strncasecmp(authorization, "Bearer ", 7) != 0)
        return false;
    const char *given = authorization + 7;
    while (*given == ' ')
        given++;
    size_t m = strlen(given);
    while (m && (given[m - 1] == ' ' || given[m - 1] == '\t'))
        m--;
    /* time depends on the token's length only, never on where the bytes differ */
    unsigned char diff = (unsigned char)(m != n);
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)((i < m ? (unsigned char)given[i] : 0) ^ (unsigned char)token[i]);
    return diff == 0;
}

/* Compare the next path segment of *p with seg and step over it. */
static bool segment(const char **p, const char *seg)
{
    size_t n = strlen(seg);
    if (strncmp(*p, seg, n) != 0 || ((*p)[n] != '/' && (*p)[n] != '\0'))
        return false;
    *p += n;
    return true;
}

bool weft_api_match(const char *target, struct weft_api_route *route)
{
    char path[256];
    size_t n = strcspn(target, "?#");
    if (n >= sizeof(path))
        return false;
    memcpy(path, target, n);
    path[n] = '\0';
    while (n > 1 && path[n - 1] == '/')
        path[--n] = '\0';
    *route = (struct weft_api_route){.image = -1};
    if (strcmp(path, "/metrics") == 0) {
        route->kind = WEFT_ROUTE_METRICS;
        return true;
    }
    if (strcmp(path, "/healthz") == 0) {
        route->kind = WEFT_ROUTE_HEALTH;
        return true;
    }
    static const struct {
        const char *path;
        enum weft_api_route_kind kind;
    } fixed[] = {
        {"/", WEFT_ROUTE_PAGE},          {"/index.html", WEFT_ROUTE_PAGE},
        {"/openapi.json", WEFT_ROUTE_OPENAPI}, {"/readyz", WEFT_ROUTE_READY},
        {"/v1/models", WEFT_ROUTE_MODELS}, {"/v1/images/generations", WEFT_ROUTE_OPENAI},
    };
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
        if (strcmp(path, fixed[i].path) == 0) {
            route->kind = fixed[i].kind;
            return true;
        }
    }
    if (strcmp(path, "/v1/cluster") == 0) {
        route->kind = WEFT_ROUTE_CLUSTER;
        return true;
    }
    const char *p = path;
    if (!segment(&p, "/v1") || !segment(&p, "/jobs"))
        return false;
    if (*p == '\0') {
        route->kind = WEFT_ROUTE_JOBS;
        return true;
    }
    p++; /* '/' */
    size_t id_len = strcspn(p, "/");
    if (id_len == 0 || id_len > WEFT_JOB_ID_LEN)
        return false;
    memcpy(route->id, p, id_len);
    route->id[id_len] = '\0';
    p += id_len;
    if (*p == '\0') {
        route->kind = WEFT_ROUTE_JOB;
        return true;
    }
    if (strcmp(p, "/events") == 0) {
        route->kind = WEFT_ROUTE_JOB_EVENTS;
        return true;
    }
    if (!segment(&p, "/images") || *p != '/')
        return false;
    p++;
    if (strlen(p) < 1 || strlen(p) > 6 || strspn(p, "0123456789") != strlen(p) ||
        (p[0] == '0' && p[1]))
        return false;
    route->kind = WEFT_ROUTE_JOB_IMAGE;
    route->image = atoi(p);
    return true;
}

static const char *allowed(enum weft_api_route_kind kind)
{
    switch (kind) {
    case WEFT_ROUTE_JOBS:
        return "GET, HEAD, POST, OPTIONS";
    case WEFT_ROUTE_JOB:
        return "GET, HEAD, DELETE, OPTIONS";
    case WEFT_ROUTE_OPENAI:
        return "POST, OPTIONS";
    default:
        return "GET, HEAD, OPTIONS";
    }
}

static bool method_ok(enum weft_api_route_kind kind, enum weft_http_method m)
{
    if (m == WEFT_HTTP_OPTIONS)
        return true;
    if (kind == WEFT_ROUTE_OPENAI)
        return m == WEFT_HTTP_POST;
    if (m == WEFT_HTTP_GET || m == WEFT_HTTP_HEAD)
        return true;
    return (kind == WEFT_ROUTE_JOBS && m == WEFT_HTTP_POST) ||
           (kind == WEFT_ROUTE_JOB && m == WEFT_HTTP_DELETE);
}

/* Routes anyone may read: probes, the page (it asks for the token), the API's description;
 * and every preflight (browsers send OPTIONS without credentials). */
static bool public_route(const struct weft_http_request *req)
{
    struct weft_api_route r;
    if (!weft_api_match(req->target, &r))
        return false;
    return req->method == WEFT_HTTP_OPTIONS || r.kind == WEFT_ROUTE_HEALTH ||
           r.kind == WEFT_ROUTE_READY || r.kind == WEFT_ROUTE_PAGE ||
           r.kind == WEFT_ROUTE_OPENAPI;
}

/* ---------------------------------------------------------------------------------------- */
/* Responses                                                                                 */

/* msg as text a JSON string can carry: a byte that is not part of valid UTF-8 is written as
 * \xNN, and past ERROR_TEXT_MAX bytes the text is cut at a character and ends in "...".
 * Errors echo what a request held (a job id from the path, a field name); cJSON copies bytes
 * as they are, so raw ones would make the body invalid UTF-8, and a long one unbounded. */
void weft_api_error_text(const char *msg, char *out)
{
    size_t len = strlen(msg), i = 0, o = 0;
    while (i < len) {
        size_t bad = 0;
        size_t good = weft_utf8_valid(msg + i, len - i, &bad) ? len - i : bad;
        bool cut = good > ERROR_TEXT_MAX - o;
        if (cut) {
            good = ERROR_TEXT_MAX - o;
            while (good > 0 && ((unsigned char)msg[i + good] & 0xc0) == 0x80)
                good--; /* not inside a character */
        }
        memcpy(out + o, msg + i, good);
        o += good;
        i += good;
        if (cut || (i < len && ERROR_TEXT_MAX - o < 4)) {
            memcpy(out + o, "...", 4);
            return;
        }
        if (i < len) {
            snprintf(out + o, 5, "\\x%02x", (unsigned char)msg[i]);
            o += 4;
            i++;
        }
    }
    out[o] = '\0';
}

#define error_text weft_api_error_text

void weft_api_error(struct weft_api_response *resp, int code, const char *msg)
{
    resp->code = code;
    resp->content_type = "application/json";
    weft_free(resp->body);
    resp->body = NULL;
    resp->len = 0;
    char safe[ERROR_TEXT_MAX + 4];
    error_text(msg, safe);
    cJSON *j = cJSON_CreateObject();
    char *text = NULL;
    if (j && cJSON_AddStringToObject(j, "error", safe))
        text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!text) {
        static const char oom[] = "{\"error\":\"out of memory\"}";
        resp->code = 500;
        resp->body = weft_strdup(oom);
        resp->len = resp->body ? sizeof(oom) - 1 : 0;
        return;
    }
    /* cJSON allocates with malloc: hand over a weft_malloc'd copy */
    resp->len = strlen(text);
    resp->body = weft_malloc(resp->len + 1);
    if (resp->body)
        memcpy(resp->body, text, resp->len + 1);
    else
        resp->len = 0;
    cJSON_free(text);
}

/* Take a JSON value as the answer (json is deleted). */
void weft_api_respond_json(struct weft_api_response *resp, int code, cJSON *json)
{
    char *text = json ? cJSON_PrintUnformatted(json) : NULL;
    cJSON_Delete(json);
    if (!text) {
        weft_api_error(resp, 500, "out of memory");
        return;
    }
    size_t n = strlen(text);
    char *body = weft_malloc(n + 2);
    if (!body) {
        cJSON_free(text);
        weft_api_error(resp, 500, "out of memory");
        return;
    }
    memcpy(body, text, n);
    body[n] = '\n';
    body[n + 1] = '\0';
    cJSON_free(text);
    weft_free(resp->body);
    resp->code = code;
    resp->content_type = "application/json";
    resp->body = body;
    resp->len = n + 1;
}

#define respond_json weft_api_respond_json

/* Shutting down: every request but /healthz is answered 503 (the server keeps accepting
 * during the grace so that health checks see it going; server.c closes after each answer). */
static bool draining(const struct weft_coord *c, const struct weft_api_route *route)
{
    return c->stopping && route->kind != WEFT_ROUTE_HEALTH && route->kind != WEFT_ROUTE_READY;
}

static bool precheck(struct weft_coord *c, const struct weft_http_request *req,
                     struct weft_api_response *resp)
{
    if (!public_route(req) && !weft_api_auth_ok(c->api.token, req->authorization)) {
        weft_api_error(resp, 401, req->authorization ? "wrong bearer token"
                                                     : "missing Authorization: Bearer <token>");
        snprintf(resp->headers, sizeof(resp->headers),
                 "WWW-Authenticate: Bearer realm=\"weft\"\r\n");
        return false;
    }
    struct weft_api_route route;
    if (!weft_api_match(req->target, &route)) {
        weft_api_error(resp, 404, "no such resource");
        return false;
    }
    if (!method_ok(route.kind, req->method)) {
        char msg[96];
        snprintf(msg, sizeof(msg), "method %s not allowed here (allowed: %s)",
                 req->method_name ? req->method_name : "?", allowed(route.kind));
        weft_api_error(resp, 405, msg);
        snprintf(resp->headers, sizeof(resp->headers), "Allow: %s\r\n", allowed(route.kind));
        return false;
    }
    if (req->method == WEFT_HTTP_POST && req->content_type &&
        strncasecmp(req->content_type, "application/json", 16) != 0) {
        weft_api_error(resp, 415, "the request body must be application/json");
        return false;
    }
    if (draining(c, &route)) {
        weft_api_error(resp, 503, "the coordinator is shutting down");
        return false;
    }
    return true;
}

bool weft_api_precheck(struct weft_coord *c, const struct weft_http_request *req,
                       struct weft_api_response *resp)
{
    if (precheck(c, req, resp))
        return true;
    struct weft_api_route route;
    if (weft_api_match(req->target, &route) && route.kind == WEFT_ROUTE_OPENAI)
        weft_api_openai_reshape(resp); /* OpenAI clients read their own error shape */
    return false;
}

/* ---------------------------------------------------------------------------------------- */
/* Jobs                                                                                      */

#define job_json weft_api_job_json

static double unix_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

cJSON *weft_api_job_json(struct weft_coord *c, const struct job *j)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "state", weft_coord_state_name(j->state));
    if (j->state == JOB_QUEUED)
        cJSON_AddNumberToObject(o, "queue_position", (double)weft_coord_queue_position(c, j));
    if (j->state == JOB_RUNNING && j->cancel_requested)
        cJSON_AddBoolToObject(o, "cancelling", 1);
    if (j->state == JOB_FAILED) {
        char reason[ERROR_TEXT_MAX + 4];
        error_text(j->reason, reason); /* it may quote a path or a worker's message */
        cJSON_AddStringToObject(o, "error", reason);
    }
    cJSON_AddNumberToObject(o, "attempts", j->attempts);
    cJSON_AddNumberToObject(o, "submitted_at", j->submitted_at);
    if (j->started_at > 0)
        cJSON_AddNumberToObject(o, "started_at", j->started_at);
    if (j->finished_at > 0)
        cJSON_AddNumberToObject(o, "finished_at", j->finished_at);

    /* progress: steps done over every image */
    int64_t done = 0, total = (int64_t)j->n_images * j->spec.steps;
    for (int i = 0; i < j->n_images; i++)
        done += j->images[i].done ? j->spec.steps : j->image_steps[i];
    cJSON *p = cJSON_AddObjectToObject(o, "progress");
    cJSON_AddNumberToObject(p, "step", j->step);
    cJSON_AddNumberToObject(p, "steps", (double)j->spec.steps);
    cJSON_AddNumberToObject(p, "images_done", j->images_done);
    cJSON_AddNumberToObject(p, "images", j->n_images);
    double fraction = j->state == JOB_DONE ? 1.0 : total ? (double)done / (double)total : 0.0;
    cJSON_AddNumberToObject(p, "fraction", fraction);
    if (j->state == JOB_RUNNING && j->started_at > 0) {
        double elapsed = unix_seconds() - j->started_at;
        cJSON_AddNumberToObject(p, "elapsed", elapsed);
        if (fraction > 0)
            cJSON_AddNumberToObject(p, "eta", elapsed * (1 - fraction) / fraction);
    }

    if (j->layout[0])
        cJSON_AddStringToObject(o, "layout", j->layout);
    if (j->layout_reason[0])
        cJSON_AddStringToObject(o, "layout_reason", j->layout_reason);
    cJSON *t = cJSON_AddObjectToObject(o, "timings");
    if (j->submitted_at > 0 && j->started_at > 0)
        cJSON_AddNumberToObject(t, "queued", j->started_at - j->submitted_at);
    for (int i = 0; i < j->n_stages; i++)
        cJSON_AddNumberToObject(t, j->stages[i].name, j->stages[i].seconds);
    if (j->started_at > 0 && j->finished_at > 0)
        cJSON_AddNumberToObject(t, "run", j->finished_at - j->started_at);

    cJSON *r = cJSON_AddObjectToObject(o, "request");
    cJSON *ps = cJSON_AddArrayToObject(r, "prompts");
    cJSON *kinds = cJSON_AddArrayToObject(r, "prompt_types");
    cJSON *negs = j->spec.n_negatives ? cJSON_AddArrayToObject(r, "negative_prompts") : NULL;
    for (int i = 0; i < j->spec.n_prompts + j->spec.n_negatives; i++) {
        const struct weft_job_prompt *jp = &j->spec.prompts[i];
        const char *what = jp->text ? jp->text : jp->name[0] ? jp->name : "(inline)";
        if (i >= j->spec.n_prompts) { /* the negatives, after the prompts */
            cJSON_AddItemToArray(negs, cJSON_CreateString(what));
            continue;
        }
        cJSON_AddItemToArray(ps, cJSON_CreateString(what));
        cJSON_AddItemToArray(kinds, cJSON_CreateString(jp->text      ? "text"
                                                       : jp->name[0] ? "name"
                                                                    : "inline"));
    }
    if (j->spec.n_negatives || j->spec.true_cfg_scale != 1.0)
        cJSON_AddNumberToObject(r, "true_cfg_scale", j->spec.true_cfg_scale);
    cJSON_AddNumberToObject(r, "max_sequence_length", (double)j->spec.max_sequence_length);
    cJSON_AddNumberToObject(r, "height", (double)j->spec.height);
    cJSON_AddNumberToObject(r, "width", (double)j->spec.width);
    cJSON_AddNumberToObject(r, "steps", (double)j->spec.steps);
    cJSON_AddNumberToObject(r, "guidance", j->spec.guidance);
    char seed[24];
    snprintf(seed, sizeof(seed), "%llu", (unsigned long long)j->spec.seed);
    cJSON_AddStringToObject(r, "seed", seed);
    cJSON_AddNumberToObject(r, "count", (double)j->spec.count);

    cJSON *imgs = cJSON_AddArrayToObject(o, "images");
    for (int i = 0; i < j->n_images; i++) {
        if (!j->images[i].done)
            continue;
        cJSON *im = cJSON_CreateObject();
        char url[96];
        snprintf(url, sizeof(url), "/v1/jobs/%s/images/%d", j->id, i);
        cJSON_AddNumberToObject(im, "index", i);
        int64_t prompt = i / j->spec.count;
        cJSON_AddNumberToObject(im, "prompt", (double)prompt);
        cJSON_AddNumberToObject(im, "width", j->images[i].width);
        cJSON_AddNumberToObject(im, "height", j->images[i].height);
        cJSON_AddStringToObject(im, "url", url);
        cJSON_AddItemToArray(imgs, im);
    }
    return o; /* NULL members on out of memory make the print fail: answered as 500 */
}

/* Idempotency-Key (IETF draft httpapi-idempotency-key-header): a retried submission with the
 * same key and the same request gets the job the first one made; the same key with another
 * request is a 422. Returns 1 with *job_p (a replay), 0 to go on (hash filled when keyed), or
 * -1 with resp filled. */
int weft_api_idempotent(struct weft_coord *c, const struct weft_http_request *req,
                        const char *route, uint8_t hash[32], struct job **job_p,
                        struct weft_api_response *resp)
{
    const char *key = req->idempotency_key;
    if (!key)
        return 0;
    size_t n = strlen(key);
    bool ok = n >= 1 && n <= WEFT_IDEM_KEY_MAX;
    for (size_t i = 0; ok && i < n; i++)
        ok = key[i] >= 0x20 && key[i] < 0x7f;
    if (!ok) {
        weft_api_error(resp, 400, "Idempotency-Key must be 1..128 printable ASCII characters");
        return -1;
    }
    struct weft_sha256 h;
    weft_sha256_init(&h);
    weft_sha256_update(&h, route, strlen(route) + 1);
    if (req->body)
        weft_sha256_update(&h, req->body, req->body_len);
    weft_sha256_final(&h, hash);
    struct job *j = weft_coord_job_by_idem(c, key);
    if (!j)
        return 0;
    if (memcmp(j->idem_hash, hash, 32) != 0) {
        char msg[200];
        snprintf(msg, sizeof(msg), "Idempotency-Key was used for another request (job %s)",
                 j->id);
        weft_api_error(resp, 422, msg);
        return -1;
    }
    *job_p = j;
    return 1;
}

static void handle_submit(struct weft_coord *c, const struct weft_http_request *req,
                          struct weft_api_response *resp)
{
    uint8_t hash[32];
    struct job *j = NULL;
    int idem = weft_api_idempotent(c, req, "/v1/jobs", hash, &j, resp);
    if (idem < 0)
        return;
    if (idem > 0) { /* a retry: the first answer again */
        snprintf(resp->headers, sizeof(resp->headers),
                 "Location: /v1/jobs/%s\r\nIdempotent-Replayed: true\r\n", j->id);
        respond_json(resp, 202, job_json(c, j));
        return;
    }
    struct weft_job_limits lim = {c->api.max_prompts, c->api.max_images, c->api.max_pixels,
                                  c->api.max_steps};
    struct weft_job_spec spec;
    char err[512];
    weft_status_t st = weft_job_spec_parse(req->body, req->body_len, &lim, c->model, &spec, err,
                                           sizeof(err));
    if (st == WEFT_ERR_NOMEM) {
        weft_api_error(resp, 500, "out of memory");
        return;
    }
    if (st != WEFT_OK) {
        c->m.refused++;
        weft_api_error(resp, 400, err);
        return;
    }
    int code;
    st = weft_coord_job_submit(c, &spec, req->idempotency_key, hash, &j, &code, err,
                               sizeof(err));
    weft_job_spec_cleanup(&spec);
    if (st != WEFT_OK) {
        c->m.refused++;
        weft_api_error(resp, code, err);
        if (code == 503)
            snprintf(resp->headers, sizeof(resp->headers), "Retry-After: 1\r\n");
        return;
    }
    snprintf(resp->headers, sizeof(resp->headers), "Location: /v1/jobs/%s\r\n", j->id);
    respond_json(resp, 202, job_json(c, j));
}

static int hex_digit(char x)
{
    return x >= '0' && x <= '9' ? x - '0'
           : x >= 'a' && x <= 'f' ? x - 'a' + 10
           : x >= 'A' && x <= 'F' ? x - 'A' + 10
                                  : -1;
}

/* v[0..n) percent-decoded into out (RFC 3986 section 2.1; '%' not followed by two hex digits,
 * and a decoded NUL, are kept as written), cut to len - 1 bytes. */
static void percent_decode(const char *v, size_t n, char *out, size_t len)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 1 < len; i++) {
        const int hi = v[i] == '%' && i + 2 < n ? hex_digit(v[i + 1]) : -1;
        const int lo = hi >= 0 ? hex_digit(v[i + 2]) : -1;
        if (lo >= 0 && (hi | lo) != 0) {
            out[o++] = (char)(hi * 16 + lo);
            i += 2;
        } else {
            out[o++] = v[i];
        }
    }
    out[o] = '\0';
}

/* The value of query parameter name in target ("" when given empty; percent-decoded), false
 * when absent. */
bool weft_api_query(const char *target, const char *name, char *out, size_t len)
{
    const char *q = strchr(target, '?');
    size_t n = strlen(name);
    while (q && *q) {
        q++;
        size_t seg = strcspn(q, "&#");
        if (seg > n && strncmp(q, name, n) == 0 && q[n] == '=') {
            percent_decode(q + n + 1, seg - n - 1, out, len);
            return true;
        }
        if (seg == n && strncmp(q, name, n) == 0) {
            out[0] = '\0';
            return true;
        }
        q += seg;
        if (*q == '#')
            break;
    }
    return false;
}

/* GET /v1/jobs[?state=S][&limit=N][&after=ID][&order=asc|desc]: jobs in submission order (or
 * newest first), each as GET /v1/jobs/{id} shows it; "next" is the id to pass as after for the
 * next page (null on the last). after may name a job that is gone: its id tells its place. */
static void handle_list(struct weft_coord *c, const char *target,
                        struct weft_api_response *resp)
{
    char v[64];
    int want = -1;
    if (weft_api_query(target, "state", v, sizeof(v))) {
        for (int s = 0; s < JOB_STATE_COUNT; s++)
            if (strcmp(v, weft_coord_state_name((enum job_state)s)) == 0)
                want = s;
        if (want < 0) {
            weft_api_error(resp, 400, "state must be queued, running, done, failed or "
                                      "cancelled");
            return;
        }
    }
    long limit = 100;
    if (weft_api_query(target, "limit", v, sizeof(v))) {
        char *end;
        limit = strtol(v, &end, 10);
        if (!v[0] || *end || limit < 1 || limit > 1000) {
            weft_api_error(resp, 400, "limit must be an integer in 1..1000");
            return;
        }
    }
    bool desc = false;
    if (weft_api_query(target, "order", v, sizeof(v))) {
        if (strcmp(v, "asc") != 0 && strcmp(v, "desc") != 0) {
            weft_api_error(resp, 400, "order must be asc or desc");
            return;
        }
        desc = strcmp(v, "desc") == 0;
    }
    uint64_t after = desc ? UINT64_MAX : 0;
    if (weft_api_query(target, "after", v, sizeof(v))) {
        if (strlen(v) != WEFT_JOB_ID_LEN || strspn(v, "0123456789abcdef") != WEFT_JOB_ID_LEN) {
            weft_api_error(resp, 400, "after must be a job id (16 hex digits)");
            return;
        }
        char hex[9];
        memcpy(hex, v, 8);
        hex[8] = '\0';
        after = strtoull(hex, NULL, 16);
    }
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(o, "jobs");
    const struct job *last = NULL;
    long n = 0;
    bool more = false;
    for (size_t k = 0; arr && k < c->n_jobs; k++) {
        const struct job *j = c->jobs[desc ? c->n_jobs - 1 - k : k];
        if ((desc ? j->key >= after : j->key <= after) ||
            (want >= 0 && (int)j->state != want))
            continue;
        if (n == limit) {
            more = true;
            break;
        }
        cJSON_AddItemToArray(arr, job_json(c, j));
        last = j;
        n++;
    }
    if (more && last)
        cJSON_AddStringToObject(o, "next", last->id);
    else
        cJSON_AddNullToObject(o, "next");
    respond_json(resp, 200, o);
}

int weft_api_image_bytes(struct weft_coord *c, const struct job *j, int i,
                         enum weft_image_format fmt, int quality, char **data_p, size_t *len_p,
                         char *msg, size_t msg_len)
{
    if (i < 0 || i >= j->n_images) {
        snprintf(msg, msg_len, "job %s has images 0..%d", j->id, j->n_images - 1);
        return 404;
    }
    if (!j->images[i].done) {
        snprintf(msg, msg_len, "%s", j->state == JOB_RUNNING || j->state == JOB_QUEUED
                                         ? "image not ready yet"
                                         : "the job ended without this image");
        return 404;
    }
    char dir[2200], path[2400], conv[2400];
    weft_coord_job_dir(c, j, dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/%d.png", dir, i);
    if (fmt != WEFT_IMAGE_PNG) { /* converted once from the PNG, then kept beside it */
        snprintf(conv, sizeof(conv), "%s/%d-q%d.%s", dir, i, quality,
                 weft_image_format_name(fmt));
        if (weft_files_read(conv, MAX_IMAGE_BYTES, data_p, len_p) == WEFT_OK)
            return 200;
    }
    char *png;
    size_t png_len;
    weft_status_t st = weft_files_read(path, MAX_IMAGE_BYTES, &png, &png_len);
    if (st != WEFT_OK) {
        snprintf(msg, msg_len, "%s", st == WEFT_ERR_NOT_FOUND
                                         ? "the image file is gone from the output folder"
                                         : "cannot read the image file");
        return st == WEFT_ERR_NOT_FOUND ? 410 : 500;
    }
    if (fmt == WEFT_IMAGE_PNG) {
        *data_p = png;
        *len_p = png_len;
        return 200;
    }
    void *out;
    size_t out_len;
    struct weft_error err = WEFT_ERROR_INIT;
    st = weft_image_convert(png, png_len, fmt, quality, &out, &out_len, &err);
    weft_free(png);
    if (st != WEFT_OK) {
        WEFT_LOG_ERROR("api", "%s: to %s: %s", path, weft_image_format_name(fmt),
                       weft_error_text(&err));
        snprintf(msg, msg_len, "cannot convert the image to %s: %s",
                 weft_image_format_name(fmt), weft_error_text(&err));
        return 500;
    }
    if (weft_files_write(conv, out, out_len) != WEFT_OK) /* logged; served all the same */
        WEFT_LOG_WARN("api", "%s: not kept; the next request converts again", conv);
    *data_p = out;
    *len_p = out_len;
    return 200;
}

/* ?format=png|jpeg|webp and ?quality=1..100 of an image request; false with resp filled. */
static bool image_format(struct weft_coord *c, const char *target, enum weft_image_format *fmt,
                         int *quality, struct weft_api_response *resp)
{
    char v[32];
    *fmt = WEFT_IMAGE_PNG;
    *quality = (int)c->api.image_quality;
    if (weft_api_query(target, "format", v, sizeof(v))) {
        int f = weft_image_format_parse(v);
        if (f < 0) {
            weft_api_error(resp, 400, "format must be png, jpeg or webp");
            return false;
        }
        *fmt = (enum weft_image_format)f;
    }
    if (weft_api_query(target, "quality", v, sizeof(v))) {
        char *end;
        long q = strtol(v, &end, 10);
        if (!v[0] || *end || q < 1 || q > 100) {
            weft_api_error(resp, 400, "quality must be an integer in 1..100");
            return false;
        }
        *quality = (int)q;
    }
    return true;
}

static void handle_image(struct weft_coord *c, struct job *j, int i, const char *target,
                         struct weft_api_response *resp)
{
    enum weft_image_format fmt;
    int quality;
    if (!image_format(c, target, &fmt, &quality, resp))
        return;
    char msg[200];
    char *data;
    size_t len;
    int code = weft_api_image_bytes(c, j, i, fmt, quality, &data, &len, msg, sizeof(msg));
    if (code != 200) {
        weft_api_error(resp, code, msg);
        return;
    }
    resp->code = 200;
    resp->content_type = weft_image_format_mime(fmt);
    resp->body = data;
    resp->len = len;
}

static void handle_ready(struct weft_coord *c, struct weft_api_response *resp)
{
    const char *why = NULL;
    char buf[400];
    if (c->stopping) {
        why = "shutting down";
    } else if (!c->runner) {
        why = "starting";
    } else if ((why = c->runner->ops->unavailable(c->runner))) {
        snprintf(buf, sizeof(buf), "the %s runner cannot run jobs: %s", c->runner->ops->name,
                 why);
        why = buf;
    } else if (c->runner->ops->capacity(c->runner) <= 0) {
        snprintf(buf, sizeof(buf), "the %s runner is not ready: %s", c->runner->ops->name,
                 strcmp(c->runner->ops->name, "cluster") == 0
                     ? "waiting for its workers to join and load the model (GET /v1/cluster)"
                     : "loading the model");
        why = buf;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "ready", why == NULL);
    if (why)
        cJSON_AddStringToObject(o, "reason", why);
    if (why)
        snprintf(resp->headers, sizeof(resp->headers), "Retry-After: 1\r\n");
    respond_json(resp, why ? 503 : 200, o);
}

/* Access-Control-* for an allowed Origin ([api] cors_origins: a list, or "*"). */
static bool origin_allowed(const struct weft_coord *c, const char *origin)
{
    const char *list = c->api.cors_origins;
    size_t n = strlen(origin);
    while (*list) {
        while (*list == ' ' || *list == ',')
            list++;
        size_t k = strcspn(list, ", ");
        if (k && ((k == 1 && list[0] == '*') || (k == n && strncmp(list, origin, n) == 0)))
            return true;
        list += k;
    }
    return false;
}

void weft_api_decorate(struct weft_coord *c, const struct weft_http_request *req,
                       struct weft_api_response *resp)
{
    if (!req->origin || !c->api.cors_origins[0] || !origin_allowed(c, req->origin))
        return;
    size_t n = strlen(resp->headers);
    int w = snprintf(resp->headers + n, sizeof(resp->headers) - n,
                     "Access-Control-Allow-Origin: %.200s\r\nVary: Origin\r\n"
                     "Access-Control-Expose-Headers: Location, Retry-After, "
                     "Idempotent-Replayed\r\n",
                     req->origin);
    if (w < 0 || (size_t)w >= sizeof(resp->headers) - n)
        resp->headers[n] = '\0'; /* no room: no CORS rather than half a header */
    if (req->method == WEFT_HTTP_OPTIONS) {
        n = strlen(resp->headers);
        w = snprintf(resp->headers + n, sizeof(resp->headers) - n,
                     "Access-Control-Allow-Methods: GET, HEAD, POST, DELETE, OPTIONS\r\n"
                     "Access-Control-Allow-Headers: Authorization, Content-Type, "
                     "Idempotency-Key, Last-Event-ID\r\nAccess-Control-Max-Age: 600\r\n");
        if (w < 0 || (size_t)w >= sizeof(resp->headers) - n)
            resp->headers[n] = '\0';
    }
}

void weft_api_access_log(struct weft_coord *c, const struct weft_http_request *req,
                         const struct weft_api_response *resp, size_t bytes, double seconds)
{
    if (!c->api.access_log || WEFT_LOG_LEVEL_INFO > weft_log_level_current)
        return;
    char path[ERROR_TEXT_MAX + 4];
    weft_api_error_text(req->target, path); /* bounded, valid UTF-8 */
    for (char *p = path; *p; p++)
        if (*p == ' ' || *p == '"')
            *p = '_';
    struct weft_api_route route;
    const char *job = weft_api_match(req->target, &route) && route.id[0] ? route.id : "-";
    if (strcmp(job, "-") == 0 && resp->headers[0]) {
        const char *loc = strstr(resp->headers, "Location: /v1/jobs/");
        static char id[WEFT_JOB_ID_LEN + 1];
        if (loc && sscanf(loc, "Location: /v1/jobs/%16[0-9a-f]", id) == 1)
            job = id;
    }
    WEFT_LOG_INFO("access", "%s %s %d %zu %.1fms job=%s%s", req->method_name, path,
                  resp->watch && !resp->stream ? 0 : resp->code, bytes, seconds * 1e3, job,
                  resp->watch ? (resp->stream ? " (stream)" : " (waits for the job)") : "");
}

static void handle_cluster(struct weft_coord *c, struct weft_api_response *resp)
{
    cJSON *o = c->runner ? c->runner->ops->describe(c->runner) : cJSON_CreateObject();
    if (!o) {
        weft_api_error(resp, 500, "out of memory");
        return;
    }
    cJSON *co = cJSON_AddObjectToObject(o, "coordinator");
    cJSON_AddStringToObject(co, "version", WEFT_VERSION);
    cJSON_AddStringToObject(co, "listen", c->address);
    cJSON_AddStringToObject(co, "model", c->model->dir);
    cJSON_AddNumberToObject(co, "capacity",
                            c->runner ? c->runner->ops->capacity(c->runner) : 0);
    cJSON_AddNumberToObject(co, "running", c->running);
    cJSON_AddNumberToObject(co, "queued", (double)c->queue.n);
    cJSON_AddBoolToObject(co, "stopping", c->stopping);
    uint64_t by_state[JOB_STATE_COUNT] = {0};
    for (size_t i = 0; i < c->n_jobs; i++)
        by_state[c->jobs[i]->state]++;
    cJSON *counts = cJSON_AddObjectToObject(co, "jobs"); /* all of them, not a page */
    for (int s = 0; s < JOB_STATE_COUNT; s++)
        cJSON_AddNumberToObject(counts, weft_coord_state_name((enum job_state)s),
                                (double)by_state[s]);
    cJSON *names = cJSON_AddArrayToObject(co, "prompts");
    for (size_t i = 0; names && i < c->model->n_names; i++)
        cJSON_AddItemToArray(names, cJSON_CreateString(c->model->names[i]));
    respond_json(resp, 200, o);
}

static void handle_metrics(struct weft_coord *c, struct weft_api_response *resp)
{
    struct weft_sbuf b;
    weft_sbuf_init(&b);
    weft_coord_metrics_write(c, &b);
    if (!weft_sbuf_ok(&b)) {
        weft_sbuf_cleanup(&b);
        weft_api_error(resp, 500, "out of memory");
        return;
    }
    resp->code = 200;
    resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
    resp->body = weft_sbuf_take(&b, &resp->len);
}

static void handle_health(struct weft_coord *c, struct weft_api_response *resp)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "ok", !c->stopping);
    if (c->stopping)
        cJSON_AddStringToObject(o, "status", "shutting down");
    respond_json(resp, c->stopping ? 503 : 200, o);
}

static void handle_asset(struct weft_api_response *resp, const char *type, const char *data,
                         size_t len)
{
    char *body = weft_malloc(len + 1);
    if (!body) {
        weft_api_error(resp, 500, "out of memory");
        return;
    }
    memcpy(body, data, len);
    body[len] = '\0';
    resp->code = 200;
    resp->content_type = type;
    resp->body = body;
    resp->len = len;
}

static void handle_job(struct weft_coord *c, const struct weft_http_request *req, struct job *j,
                       struct weft_api_response *resp)
{
    if (req->method != WEFT_HTTP_DELETE) {
        respond_json(resp, 200, job_json(c, j));
        return;
    }
    int code = weft_coord_job_cancel(c, j);
    if (code == 409) {
        char msg[96];
        snprintf(msg, sizeof(msg), "job %s is already %s", j->id, weft_coord_state_name(j->state));
        weft_api_error(resp, 409, msg);
        return;
    }
    respond_json(resp, code, job_json(c, j));
}

void weft_api_handle(struct weft_coord *c, const struct weft_http_request *req,
                     struct weft_api_response *resp)
{
    struct weft_api_route route;
    if ((!public_route(req) && !weft_api_auth_ok(c->api.token, req->authorization)) ||
        !weft_api_match(req->target, &route) || !method_ok(route.kind, req->method) ||
        draining(c, &route)) {
        weft_api_precheck(c, req, resp); /* answers the refusal */
        return;
    }
    if (req->method == WEFT_HTTP_OPTIONS) {
        resp->code = 204;
        snprintf(resp->headers, sizeof(resp->headers), "Allow: %s\r\n", allowed(route.kind));
        return;
    }
    struct job *j = NULL;
    if (route.kind == WEFT_ROUTE_JOB || route.kind == WEFT_ROUTE_JOB_IMAGE ||
        route.kind == WEFT_ROUTE_JOB_EVENTS) {
        j = weft_coord_job_find(c, route.id);
        if (!j) {
            char msg[80];
            snprintf(msg, sizeof(msg), "no job %s", route.id);
            weft_api_error(resp, 404, msg);
            return;
        }
    }
    switch (route.kind) {
    case WEFT_ROUTE_HEALTH:
        handle_health(c, resp);
        return;
    case WEFT_ROUTE_READY:
        handle_ready(c, resp);
        return;
    case WEFT_ROUTE_PAGE:
        handle_asset(resp, "text/html; charset=utf-8", weft_asset_page, weft_asset_page_len);
        /* the page fetches from this server only, and nothing can frame it */
        snprintf(resp->headers, sizeof(resp->headers),
                 "Content-Security-Policy: default-src 'none'; connect-src 'self'; "
                 "img-src 'self' blob: data:; style-src 'unsafe-inline'; "
                 "script-src 'unsafe-inline'; frame-ancestors 'none'\r\n"
                 "X-Content-Type-Options: nosniff\r\n");
        return;
    case WEFT_ROUTE_OPENAPI:
        handle_asset(resp, "application/json", weft_asset_openapi, weft_asset_openapi_len);
        return;
    case WEFT_ROUTE_MODELS:
        weft_api_models(c, resp);
        return;
    case WEFT_ROUTE_OPENAI:
        weft_api_openai_generate(c, req, resp);
        return;
    case WEFT_ROUTE_JOB_EVENTS:
        weft_api_events(c, req, j, resp);
        return;
    case WEFT_ROUTE_JOBS:
        if (req->method == WEFT_HTTP_POST)
            handle_submit(c, req, resp);
        else
            handle_list(c, req->target, resp);
        return;
    case WEFT_ROUTE_JOB:
        handle_job(c, req, j, resp);
        return;
    case WEFT_ROUTE_JOB_IMAGE:
        handle_image(c, j, route.image, req->target, resp);
        return;
    case WEFT_ROUTE_CLUSTER:
        handle_cluster(c, resp);
        return;
    case WEFT_ROUTE_METRICS:
        handle_metrics(c, resp);
        return;
    }
}
