/* The job API: routes, authentication, and the JSON (or PNG, or Prometheus) answers.
 *
 *   POST   /v1/jobs                   submit (job.h has the body) -> 202 {"id", ...}
 *   GET    /v1/jobs[?state=S]         list ids and states
 *   GET    /v1/jobs/{id}              state, progress, timings, images
 *   GET    /v1/jobs/{id}/images/{i}   image i (PNG)
 *   DELETE /v1/jobs/{id}              cancel
 *   GET    /v1/cluster                the runner's view: workers, mesh, device map
 *   GET    /metrics                   Prometheus text
 *   GET    /healthz                   {"ok": true}; 503 {"ok": false, ...} while shutting down
 * Errors are {"error": "<one line naming the cause>"} with a 4xx or 5xx status, always UTF-8
 * and bounded whatever the request held; while shutting down every other request gets 503. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/files.h"
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
        return "GET, HEAD, POST";
    case WEFT_ROUTE_JOB:
        return "GET, HEAD, DELETE";
    default:
        return "GET, HEAD";
    }
}

static bool method_ok(enum weft_api_route_kind kind, enum weft_http_method m)
{
    if (m == WEFT_HTTP_GET || m == WEFT_HTTP_HEAD)
        return true;
    return (kind == WEFT_ROUTE_JOBS && m == WEFT_HTTP_POST) ||
           (kind == WEFT_ROUTE_JOB && m == WEFT_HTTP_DELETE);
}

/* ---------------------------------------------------------------------------------------- */
/* Responses                                                                                 */

/* msg as text a JSON string can carry: a byte that is not part of valid UTF-8 is written as
 * \xNN, and past ERROR_TEXT_MAX bytes the text is cut at a character and ends in "...".
 * Errors echo what a request held (a job id from the path, a field name); cJSON copies bytes
 * as they are, so raw ones would make the body invalid UTF-8, and a long one unbounded. */
static void error_text(const char *msg, char out[ERROR_TEXT_MAX + 4])
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
static void respond_json(struct weft_api_response *resp, int code, cJSON *json)
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

/* Shutting down: every request but /healthz is answered 503 (the server keeps accepting
 * during the grace so that health checks see it going; server.c closes after each answer). */
static bool draining(const struct weft_coord *c, const struct weft_api_route *route)
{
    return c->stopping && route->kind != WEFT_ROUTE_HEALTH;
}

bool weft_api_precheck(struct weft_coord *c, const struct weft_http_request *req,
                       struct weft_api_response *resp)
{
    if (!weft_api_auth_ok(c->api.token, req->authorization)) {
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

/* ---------------------------------------------------------------------------------------- */
/* Jobs                                                                                      */

static cJSON *job_json(struct weft_coord *c, const struct job *j)
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
    cJSON_AddNumberToObject(p, "fraction",
                            j->state == JOB_DONE ? 1.0 : total ? (double)done / (double)total
                                                               : 0.0);

    cJSON *t = cJSON_AddObjectToObject(o, "timings");
    if (j->submitted_at > 0 && j->started_at > 0)
        cJSON_AddNumberToObject(t, "queued", j->started_at - j->submitted_at);
    for (int i = 0; i < j->n_stages; i++)
        cJSON_AddNumberToObject(t, j->stages[i].name, j->stages[i].seconds);
    if (j->started_at > 0 && j->finished_at > 0)
        cJSON_AddNumberToObject(t, "run", j->finished_at - j->started_at);

    cJSON *r = cJSON_AddObjectToObject(o, "request");
    cJSON *ps = cJSON_AddArrayToObject(r, "prompts");
    for (int i = 0; i < j->spec.n_prompts; i++)
        cJSON_AddItemToArray(ps, cJSON_CreateString(j->spec.prompts[i].name[0]
                                                         ? j->spec.prompts[i].name
                                                         : "(inline)"));
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

static void handle_submit(struct weft_coord *c, const struct weft_http_request *req,
                          struct weft_api_response *resp)
{
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
    struct job *j;
    int code;
    st = weft_coord_job_submit(c, &spec, &j, &code, err, sizeof(err));
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

static void handle_list(struct weft_coord *c, const char *target,
                        struct weft_api_response *resp)
{
    const char *q = strstr(target, "?state=");
    if (!q)
        q = strstr(target, "&state=");
    int want = -1;
    if (q) {
        q += 7;
        size_t n = strcspn(q, "&#");
        for (int s = 0; s < JOB_STATE_COUNT; s++)
            if (strlen(weft_coord_state_name((enum job_state)s)) == n &&
                strncmp(q, weft_coord_state_name((enum job_state)s), n) == 0)
                want = s;
        if (want < 0) {
            weft_api_error(resp, 400, "state must be queued, running, done, failed or "
                                      "cancelled");
            return;
        }
    }
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(o, "jobs");
    for (size_t i = 0; arr && i < c->n_jobs; i++) {
        const struct job *j = c->jobs[i];
        if (want >= 0 && (int)j->state != want)
            continue;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "id", j->id);
        cJSON_AddStringToObject(e, "state", weft_coord_state_name(j->state));
        cJSON_AddItemToArray(arr, e);
    }
    respond_json(resp, 200, o);
}

static void handle_image(struct weft_coord *c, struct job *j, int i,
                         struct weft_api_response *resp)
{
    if (i < 0 || i >= j->n_images) {
        char msg[96];
        snprintf(msg, sizeof(msg), "job %s has images 0..%d", j->id, j->n_images - 1);
        weft_api_error(resp, 404, msg);
        return;
    }
    if (!j->images[i].done) {
        weft_api_error(resp, 404, j->state == JOB_RUNNING || j->state == JOB_QUEUED
                                      ? "image not ready yet"
                                      : "the job ended without this image");
        return;
    }
    char dir[2200], path[2400];
    weft_coord_job_dir(c, j, dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/%d.png", dir, i);
    char *data;
    size_t len;
    weft_status_t st = weft_files_read(path, MAX_IMAGE_BYTES, &data, &len);
    if (st != WEFT_OK) {
        weft_api_error(resp, st == WEFT_ERR_NOT_FOUND ? 410 : 500,
                       st == WEFT_ERR_NOT_FOUND ? "the image file is gone from the output folder"
                                                : "cannot read the image file");
        return;
    }
    resp->code = 200;
    resp->content_type = "image/png";
    resp->body = data;
    resp->len = len;
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

void weft_api_handle(struct weft_coord *c, const struct weft_http_request *req,
                     struct weft_api_response *resp)
{
    struct weft_api_route route;
    if (!weft_api_auth_ok(c->api.token, req->authorization) ||
        !weft_api_match(req->target, &route) || !method_ok(route.kind, req->method) ||
        draining(c, &route)) {
        weft_api_precheck(c, req, resp); /* answers the refusal */
        return;
    }
    struct job *j = NULL;
    if (route.kind == WEFT_ROUTE_JOB || route.kind == WEFT_ROUTE_JOB_IMAGE) {
        j = weft_coord_job_find(c, route.id);
        if (!j) {
            char msg[80];
            snprintf(msg, sizeof(msg), "no job %s", route.id);
            weft_api_error(resp, 404, msg);
            return;
        }
    }
    switch (route.kind) {
    case WEFT_ROUTE_HEALTH: {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddBoolToObject(o, "ok", !c->stopping);
        if (c->stopping)
            cJSON_AddStringToObject(o, "status", "shutting down");
        respond_json(resp, c->stopping ? 503 : 200, o);
        return;
    }
    case WEFT_ROUTE_JOBS:
        if (req->method == WEFT_HTTP_POST)
            handle_submit(c, req, resp);
        else
            handle_list(c, req->target, resp);
        return;
    case WEFT_ROUTE_JOB:
        if (req->method == WEFT_HTTP_DELETE) {
            int code = weft_coord_job_cancel(c, j);
            if (code == 409) {
                char msg[96];
                snprintf(msg, sizeof(msg), "job %s is already %s", j->id,
                         weft_coord_state_name(j->state));
                weft_api_error(resp, 409, msg);
                return;
            }
            respond_json(resp, code, job_json(c, j));
            return;
        }
        respond_json(resp, 200, job_json(c, j));
        return;
    case WEFT_ROUTE_JOB_IMAGE:
        handle_image(c, j, route.image, resp);
        return;
    case WEFT_ROUTE_CLUSTER:
        handle_cluster(c, resp);
        return;
    case WEFT_ROUTE_METRICS:
        handle_metrics(c, resp);
        return;
    }
}
