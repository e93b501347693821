/* Progress pushed: GET /v1/jobs/{id}/events as Server-Sent Events (the WHATWG HTML standard's
 * text/event-stream), and the watches that connections waiting on a job hold.
 *
 * A stream opens with a "state" event (the job as GET /v1/jobs/{id} shows it), then sends
 * "progress" at every step (step i of n, images done, fraction, elapsed and ETA in seconds),
 * "image" when an image is written (its index and URL), "state" again at every change of
 * state, and "end" (the final job) when the job is done, failed or cancelled, after which the
 * stream ends and the connection stays open for the next request. A comment line goes out when
 * nothing was said for [api] events_keepalive_ms. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/log.h"
#include "coordinator/internal.h"

void weft_api_openai_finish(struct weft_coord *c, struct weft_watch *w, struct job *j);
void weft_api_openai_timeout(struct weft_coord *c, struct weft_watch *w, struct job *j);

void weft_api_watch_take(struct weft_coord *c, struct weft_watch *w, struct conn *conn)
{
    w->conn = conn;
    w->prev = NULL;
    w->next = c->watches;
    if (c->watches)
        c->watches->prev = w;
    c->watches = w;
    w->last_ms = weft_server_now(c);
}

static void unlink_watch(struct weft_coord *c, struct weft_watch *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        c->watches = w->next;
    if (w->next)
        w->next->prev = w->prev;
    w->prev = w->next = NULL;
}

void weft_api_watch_drop(struct weft_coord *c, struct weft_watch *w)
{
    unlink_watch(c, w);
    weft_free(w);
}

static bool terminal(const struct job *j)
{
    return j->state >= JOB_DONE;
}

/* The job will not move while this process lives: shut down with it queued again. */
static bool parked(const struct weft_coord *c, const struct job *j)
{
    return c->stopping && j->state == JOB_QUEUED;
}

/* "id: N\nevent: NAME\ndata: JSON\n\n" (json deleted). */
static void sse_event(struct weft_sbuf *b, struct weft_watch *w, const char *event, cJSON *data)
{
    char *text = data ? cJSON_PrintUnformatted(data) : NULL;
    cJSON_Delete(data);
    if (!text) {
        weft_sbuf_puts(b, ": out of memory for an event\n\n");
        return;
    }
    weft_sbuf_printf(b, "id: %llu\nevent: %s\ndata: %s\n\n",
                     (unsigned long long)++w->event_id, event, text);
    cJSON_free(text);
}

static cJSON *progress_json(struct weft_coord *c, const struct job *j)
{
    cJSON *full = weft_api_job_json(c, j);
    cJSON *p = cJSON_DetachItemFromObjectCaseSensitive(full, "progress");
    cJSON_Delete(full);
    if (!p)
        return NULL;
    cJSON_AddStringToObject(p, "id", j->id);
    cJSON_AddStringToObject(p, "state", weft_coord_state_name(j->state));
    return p;
}

static cJSON *image_json(const struct job *j, int i)
{
    cJSON *o = cJSON_CreateObject();
    char url[96];
    snprintf(url, sizeof(url), "/v1/jobs/%s/images/%d", j->id, i);
    cJSON_AddNumberToObject(o, "index", i);
    int64_t prompt = i / j->spec.count; /* image i belongs to prompt i / count */
    cJSON_AddNumberToObject(o, "prompt", (double)prompt);
    cJSON_AddNumberToObject(o, "width", j->images[i].width);
    cJSON_AddNumberToObject(o, "height", j->images[i].height);
    cJSON_AddStringToObject(o, "url", url);
    return o;
}

/* What the stream of w has not said about j yet, into b; true when the stream ends. */
static bool stream_update(struct weft_coord *c, struct weft_watch *w, struct job *j, int image,
                          struct weft_sbuf *b)
{
    if (image >= 0 && image < j->n_images && j->images[image].done)
        sse_event(b, w, "image", image_json(j, image));
    if ((int)j->state != w->last_state && !terminal(j)) { /* the end says the last one */
        w->last_state = (int)j->state;
        sse_event(b, w, "state", weft_api_job_json(c, j));
    } else if (terminal(j)) {
        w->last_state = (int)j->state;
    } else if (j->step != w->last_step || j->images_done != w->last_images) {
        sse_event(b, w, "progress", progress_json(c, j));
    }
    w->last_step = j->step;
    w->last_images = j->images_done;
    if (terminal(j) || parked(c, j)) {
        sse_event(b, w, "end", weft_api_job_json(c, j));
        return true;
    }
    return false;
}

static void stream_send(struct weft_coord *c, struct weft_watch *w, struct weft_sbuf *b,
                        bool end)
{
    struct conn *conn = w->conn;
    w->last_ms = weft_server_now(c);
    if (!weft_sbuf_ok(b)) {
        weft_sbuf_cleanup(b);
        weft_sbuf_init(b);
        weft_sbuf_puts(b, ": out of memory\n\n");
    }
    if (end) {
        unlink_watch(c, w);
        weft_server_conn_chunk(conn, b->data, b->len, true);
        weft_free(w);
    } else {
        weft_server_conn_chunk(conn, b->data, b->len, false); /* w may be gone after it */
    }
    weft_sbuf_cleanup(b);
}

void weft_api_events(struct weft_coord *c, const struct weft_http_request *req, struct job *j,
                     struct weft_api_response *resp)
{
    if (req->method == WEFT_HTTP_HEAD && j->state < JOB_DONE) { /* a stream: no length yet */
        resp->code = 200;
        resp->content_type = "text/event-stream";
        return;
    }
    struct weft_watch *w = weft_calloc(1, sizeof(*w));
    struct weft_sbuf b;
    weft_sbuf_init(&b);
    if (!w) {
        weft_api_error(resp, 500, "out of memory");
        return;
    }
    *w = (struct weft_watch){.kind = WEFT_WATCH_EVENTS, .key = j->key, .last_state = -1,
                             .last_step = -1, .last_images = -1};
    weft_sbuf_puts(&b, "retry: 2000\n\n");
    bool end = stream_update(c, w, j, -1, &b);
    if (!weft_sbuf_ok(&b)) {
        weft_sbuf_cleanup(&b);
        weft_free(w);
        weft_api_error(resp, 500, "out of memory");
        return;
    }
    resp->code = 200;
    resp->content_type = "text/event-stream";
    snprintf(resp->headers, sizeof(resp->headers), "X-Accel-Buffering: no\r\n");
    resp->body = weft_sbuf_take(&b, &resp->len);
    if (end) { /* all said: a whole answer, no stream */
        weft_free(w);
        return;
    }
    resp->watch = w;
    resp->stream = true;
}

void weft_api_job_changed(struct weft_coord *c, struct job *j, int image)
{
    struct weft_watch *next;
    for (struct weft_watch *w = c->watches; w; w = next) {
        next = w->next;
        if (w->key != j->key)
            continue;
        if (w->kind == WEFT_WATCH_OPENAI) {
            if (terminal(j) || parked(c, j))
                weft_api_openai_finish(c, w, j);
            continue;
        }
        struct weft_sbuf b;
        weft_sbuf_init(&b);
        bool end = stream_update(c, w, j, image, &b);
        if (b.len || end)
            stream_send(c, w, &b, end);
        else
            weft_sbuf_cleanup(&b);
    }
}

void weft_api_watch_tick(struct weft_coord *c)
{
    uint64_t now = weft_server_now(c);
    struct weft_watch *next;
    for (struct weft_watch *w = c->watches; w; w = next) {
        next = w->next;
        struct job *j = weft_coord_job_by_key(c, w->key);
        if (w->kind == WEFT_WATCH_OPENAI) {
            if (now >= w->deadline_ms)
                weft_api_openai_timeout(c, w, j);
            continue;
        }
        if (!j) { /* evicted meanwhile ([api] keep_jobs): nothing more will come */
            struct weft_sbuf b;
            weft_sbuf_init(&b);
            weft_sbuf_puts(&b, ": the job is no longer kept\n\n");
            stream_send(c, w, &b, true);
            continue;
        }
        if (now - w->last_ms >= (uint64_t)c->api.events_keepalive_ms) {
            struct weft_sbuf b;
            weft_sbuf_init(&b);
            weft_sbuf_puts(&b, ": keep-alive\n\n");
            stream_send(c, w, &b, false);
        }
    }
}
