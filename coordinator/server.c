/* The API socket: TCP or unix listener, connections with keep-alive and pipelining, header,
 * request and idle timeouts, back-pressure on slow readers, lingering close after an error.
 *
 * Slots ([api] max_connections) go to the clients that use them: when every one is taken, a
 * newcomer takes the place of the connection that has waited longest for a request (idle,
 * or with its head trickling in: a slow client), and is refused (503) only when every
 * connection has a request in progress. A flood of slow heads from one address therefore
 * delays well-behaved clients by at most one round trip instead of locking them out. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/files.h"
#include "coordinator/internal.h"

#define OUT_HIGH (4u << 20) /* stop reading while this much is queued for the client */
#define OUT_LOW (1u << 20)  /* and read again below this */
#define LINGER_MS 2000      /* read and drop what a refused client still sends, this long */

struct conn {
    union {
        uv_tcp_t tcp;
        uv_pipe_t pipe;
        uv_stream_t stream;
        uv_handle_t handle;
    } h;
    uv_timer_t timer;
    uv_shutdown_t shutdown;
    struct weft_coord *coord;
    struct weft_http_parser *parser;
    struct conn *prev, *next;
    int open_handles;
    size_t out_bytes;      /* queued for the client, not yet written */
    uint64_t wait_t0;      /* loop time it began waiting for its next request (accepted, or
                            * the previous one complete) */
    uint64_t request_t0;   /* loop time of the current request's first byte (0: none) */
    uint64_t write_t0;     /* loop time the client's queue became non-empty */
    bool in_body;          /* the current request's head is complete */
    bool close_after;      /* close once the queue is written */
    bool closing, draining, read_stopped, eof, linger_set;
    bool uncounted;        /* not in n_conns: refused, or evicted for a newcomer */
    bool skip_message;     /* the request was refused at its headers: do not handle it */
    bool close_after_watch; /* close once the waiting answer is written */
    char *pending;         /* bytes read but not parsed yet (back-pressure) */
    size_t pending_len;
    struct weft_watch *watch; /* the answer waits on a job (api.c): nothing more is parsed */
    bool streaming;        /* the answer is a chunked stream in progress */
    const struct weft_http_request *req; /* the request being answered (CORS), or NULL */
};

struct wreq {
    uv_write_t req;
    struct conn *c;
    char *head, *body;
    size_t len;
};

static void conn_close(struct conn *c);
static void conn_process(struct conn *c, const char *data, size_t len);
static void timer_arm(struct conn *c);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);

/* ---------------------------------------------------------------------------------------- */
/* Writing                                                                                   */

static void after_shutdown(uv_shutdown_t *req, int status)
{
    struct conn *c = req->data;
    if (status != 0 || c->eof) {
        conn_close(c);
        return;
    }
    /* lingering close: drop what the client still sends until it closes or the timer ends,
     * so that it reads our answer instead of a reset */
    c->draining = true;
    if (c->read_stopped) {
        c->read_stopped = false;
        uv_read_start(&c->h.stream, on_alloc, on_read);
    }
    timer_arm(c);
}

static void begin_close(struct conn *c)
{
    if (c->closing || c->draining)
        return;
    c->shutdown.data = c;
    if (c->h.handle.type != UV_TCP || uv_shutdown(&c->shutdown, &c->h.stream, after_shutdown))
        conn_close(c);
    else
        c->draining = true; /* until after_shutdown: nothing more is parsed */
}

static void after_write(uv_write_t *req, int status)
{
    struct wreq *w = (struct wreq *)req;
    struct conn *c = w->c;
    c->out_bytes -= w->len;
    weft_free(w->head);
    weft_free(w->body);
    weft_free(w);
    if (c->closing)
        return;
    if (status != 0) {
        conn_close(c);
        return;
    }
    if (c->out_bytes == 0)
        c->write_t0 = 0;
    if (c->out_bytes == 0 && c->close_after) {
        begin_close(c);
        return;
    }
    if (c->pending && c->out_bytes < OUT_LOW) {
        char *p = c->pending;
        size_t n = c->pending_len;
        c->pending = NULL;
        c->pending_len = 0;
        conn_process(c, p, n);
        weft_free(p);
    }
    timer_arm(c);
}

/* Queue head + body (both owned) for the client. */
static void conn_write(struct conn *c, char *head, size_t head_len, char *body, size_t body_len)
{
    struct wreq *w = weft_calloc(1, sizeof(*w));
    if (!w || c->closing) {
        weft_free(head);
        weft_free(body);
        weft_free(w);
        if (!c->closing)
            conn_close(c);
        return;
    }
    w->c = c;
    w->head = head;
    w->body = body;
    w->len = head_len + body_len;
    uv_buf_t bufs[2] = {uv_buf_init(head, (unsigned)head_len),
                        uv_buf_init(body, (unsigned)body_len)};
    if (c->out_bytes == 0)
        c->write_t0 = uv_now(&c->coord->loop);
    c->out_bytes += w->len;
    int rc = uv_write(&w->req, &c->h.stream, bufs, body_len ? 2 : 1, after_write);
    if (rc != 0) {
        c->out_bytes -= w->len;
        weft_free(head);
        weft_free(body);
        weft_free(w);
        conn_close(c);
    }
}

static void respond(struct conn *c, struct weft_api_response *r, bool head_only)
{
    struct weft_coord *co = c->coord;
    if (r->code >= 100 && r->code < 600)
        co->m.http[r->code]++;
    if (r->close || co->stopping)
        c->close_after = true;
    if (c->req)
        weft_api_decorate(co, c->req, r);
    struct weft_sbuf h;
    weft_sbuf_init(&h);
    char length[48];
    if (r->stream)
        snprintf(length, sizeof(length), "Transfer-Encoding: chunked\r\n");
    else if (r->code == 204 || r->code == 304)
        length[0] = '\0';
    else
        snprintf(length, sizeof(length), "Content-Length: %zu\r\n", r->len);
    weft_sbuf_printf(&h,
                     "HTTP/1.1 %d %s\r\n"
                     "Content-Type: %s\r\n"
                     "%s"
                     "Cache-Control: no-store\r\n"
                     "%s%s\r\n",
                     r->code, weft_http_reason(r->code),
                     r->content_type ? r->content_type : "application/json", length, r->headers,
                     c->close_after ? "Connection: close\r\n" : "");
    if (r->stream && r->len && !head_only) /* the first chunk */
        weft_sbuf_printf(&h, "%zx\r\n%.*s\r\n", r->len, (int)r->len, r->body);
    if (!weft_sbuf_ok(&h)) {
        weft_sbuf_cleanup(&h);
        weft_free(r->body);
        r->body = NULL;
        conn_close(c);
        return;
    }
    size_t head_len;
    char *head = weft_sbuf_take(&h, &head_len);
    char *body = r->body;
    r->body = NULL;
    if (head_only || r->stream) {
        weft_free(body);
        body = NULL;
    }
    conn_write(c, head, head_len, body, body ? r->len : 0);
}

static void respond_error(struct conn *c, int code, const char *msg, bool close)
{
    struct weft_api_response r = {0};
    weft_api_error(&r, code, msg);
    r.close = close;
    respond(c, &r, false);
}

/* The watch of c ended (api.c freed it): parse what waited, or close as asked. */
static void watch_ended(struct conn *c)
{
    c->watch = NULL;
    c->streaming = false;
    if (c->close_after_watch)
        c->close_after = true;
    if (c->out_bytes == 0 && c->close_after) {
        begin_close(c);
        return;
    }
    if (c->pending && c->out_bytes < OUT_LOW) {
        char *p = c->pending;
        size_t n = c->pending_len;
        c->pending = NULL;
        c->pending_len = 0;
        conn_process(c, p, n);
        weft_free(p);
    }
    if (!c->closing && c->read_stopped && !c->pending && !c->draining) {
        c->read_stopped = false;
        uv_read_start(&c->h.stream, on_alloc, on_read);
    }
    timer_arm(c);
}

void weft_server_conn_respond(struct conn *c, struct weft_api_response *r)
{
    c->watch = NULL; /* the caller frees it */
    if (c->closing) {
        weft_free(r->body);
        r->body = NULL;
        return;
    }
    respond(c, r, false);
    watch_ended(c);
}

void weft_server_conn_chunk(struct conn *c, const char *data, size_t len, bool end)
{
    if (end)
        c->watch = NULL; /* the caller frees it */
    if (c->closing)
        return;
    if (!c->streaming) {
        watch_ended(c);
        return;
    }
    struct weft_sbuf b;
    weft_sbuf_init(&b);
    if (len)
        weft_sbuf_printf(&b, "%zx\r\n%.*s\r\n", len, (int)len, data);
    if (end)
        weft_sbuf_puts(&b, "0\r\n\r\n");
    if (!weft_sbuf_ok(&b)) {
        weft_sbuf_cleanup(&b);
        conn_close(c);
        return;
    }
    size_t n;
    char *out = weft_sbuf_take(&b, &n);
    if (c->out_bytes + n > OUT_HIGH) { /* a stream nobody reads: let it go */
        weft_free(out);
        conn_close(c);
        return;
    }
    conn_write(c, out, n, NULL, 0);
    if (end)
        watch_ended(c);
    else
        timer_arm(c);
}

uint64_t weft_server_now(const struct weft_coord *co)
{
    return uv_now((uv_loop_t *)&co->loop);
}

/* ---------------------------------------------------------------------------------------- */
/* Reading and parsing                                                                       */

static void stash(struct conn *c, const char *data, size_t len)
{
    char *p = weft_malloc(len);
    if (!p) {
        conn_close(c);
        return;
    }
    memcpy(p, data, len);
    c->pending = p;
    c->pending_len = len;
    if (!c->read_stopped) {
        uv_read_stop(&c->h.stream);
        c->read_stopped = true;
    }
}

static void on_headers(struct conn *c, const struct weft_http_request *req)
{
    struct weft_api_response r = {0};
    if (!weft_api_precheck(c->coord, req, &r)) {
        r.close = r.close || req->has_body || !req->keep_alive; /* its body is not read */
        c->skip_message = true;
        c->req = req;
        respond(c, &r, req->method == WEFT_HTTP_HEAD);
        c->req = NULL;
        return;
    }
    if (req->expect_continue && req->has_body && req->http_minor >= 1) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        char *h = weft_malloc(sizeof(cont) - 1);
        if (!h) {
            conn_close(c);
            return;
        }
        memcpy(h, cont, sizeof(cont) - 1);
        conn_write(c, h, sizeof(cont) - 1, NULL, 0);
    }
}

static void on_message(struct conn *c, const struct weft_http_request *req)
{
    if (c->skip_message) { /* answered at its headers */
        c->skip_message = false;
        return;
    }
    struct weft_api_response r = {0};
    double t0 = uv_hrtime() * 1e-9;
    weft_api_handle(c->coord, req, &r);
    if (!req->keep_alive)
        r.close = true;
    struct weft_watch *w = r.watch;
    r.watch = NULL;
    if (w && c->closing) {
        weft_free(w);
        w = NULL;
    }
    if (w) { /* the answer waits on a job */
        c->watch = w;
        weft_api_watch_take(c->coord, w, c);
        if (r.close)
            c->close_after_watch = true;
    }
    weft_api_access_log(c->coord, req, &r, r.stream ? 0 : r.len, uv_hrtime() * 1e-9 - t0);
    if (w && !r.stream) {
        weft_free(r.body);
        timer_arm(c);
        return;
    }
    c->streaming = w != NULL;
    c->req = req;
    bool close = r.close;
    if (w)
        r.close = false; /* after the stream's end */
    respond(c, &r, req->method == WEFT_HTTP_HEAD);
    c->req = NULL;
    (void)close;
}

static void conn_process(struct conn *c, const char *data, size_t len)
{
    bool again = false; /* after the headers, a body-less request completes with no input */
    while ((len > 0 || again) && !c->closing && !c->close_after && !c->draining) {
        again = false;
        if (c->watch) { /* the answer in progress waits on a job: the rest waits for it */
            if (len > 0)
                stash(c, data, len);
            return;
        }
        if (c->out_bytes >= OUT_HIGH) {
            stash(c, data, len);
            return;
        }
        size_t used = 0;
        enum weft_http_event ev = weft_http_parser_feed(c->parser, data, len, &used);
        data += used;
        len -= used;
        if (!c->request_t0 && (weft_http_parser_busy(c->parser) || ev != WEFT_HTTP_NEED_MORE))
            c->request_t0 = uv_now(&c->coord->loop);
        switch (ev) {
        case WEFT_HTTP_NEED_MORE:
            break;
        case WEFT_HTTP_HEADERS:
            c->in_body = true;
            on_headers(c, weft_http_parser_request(c->parser));
            again = true;
            break;
        case WEFT_HTTP_MESSAGE:
            on_message(c, weft_http_parser_request(c->parser));
            weft_http_parser_next(c->parser);
            c->request_t0 = 0;
            c->in_body = false;
            c->wait_t0 = uv_now(&c->coord->loop);
            break;
        case WEFT_HTTP_BAD: {
            const char *why;
            int code = weft_http_parser_error(c->parser, &why);
            WEFT_LOG_DEBUG("api", "bad request (%d): %s", code, why);
            respond_error(c, code, why, true);
            return;
        }
        }
    }
    if (c->read_stopped && !c->pending && !c->closing && !c->draining) {
        c->read_stopped = false;
        uv_read_start(&c->h.stream, on_alloc, on_read);
    }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    struct conn *c = h->data;
    /* one buffer for every connection: each read is parsed before the next one */
    *buf = uv_buf_init(c->coord->read_buf, sizeof(c->coord->read_buf));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    struct conn *c = s->data;
    if (c->closing)
        return;
    if (n < 0) {
        c->eof = true;
        if (c->draining || c->out_bytes == 0) {
            if (!c->draining && weft_http_parser_eof(c->parser) == WEFT_HTTP_BAD &&
                n == UV_EOF) {
                /* a request cut short by a half-close: answer, then close */
                const char *why;
                int code = weft_http_parser_error(c->parser, &why); /* before why is read */
                respond_error(c, code, why, true);
                return;
            }
            conn_close(c);
        } else {
            c->close_after = true; /* finish writing what was asked, then close */
            uv_read_stop(s);
            c->read_stopped = true;
        }
        return;
    }
    if (n == 0)
        return;
    if (c->draining)
        return; /* dropped */
    conn_process(c, buf->base, (size_t)n);
    timer_arm(c);
}

/* ---------------------------------------------------------------------------------------- */
/* Timers                                                                                    */

/* The request head is overdue: [api] header_timeout_ms, the shorter bound of a head, passed. */
static bool head_late(const struct conn *c, uint64_t now)
{
    const struct weft_conf_api *api = &c->coord->api;
    return c->request_t0 && !c->in_body && api->header_timeout_ms < api->request_timeout_ms &&
           now >= c->request_t0 + (uint64_t)api->header_timeout_ms;
}

static void on_timer(uv_timer_t *t)
{
    struct conn *c = t->data;
    struct weft_coord *co = c->coord;
    if (c->closing)
        return;
    if (c->draining || c->out_bytes > 0 || !c->request_t0 || c->watch) {
        if (!c->draining && c->out_bytes > 0)
            co->m.timeouts++; /* the client does not read its answers */
        conn_close(c);
        return;
    }
    co->m.timeouts++;
    if (head_late(c, uv_now(&co->loop))) {
        WEFT_LOG_DEBUG("api", "request head not complete within %lld ms: 408",
                       (long long)co->api.header_timeout_ms);
        respond_error(c, 408, "request head not received in time ([api] header_timeout_ms)",
                      true);
        return;
    }
    WEFT_LOG_DEBUG("api", "request not complete within %lld ms: 408",
                   (long long)co->api.request_timeout_ms);
    respond_error(c, 408, "request not received in time ([api] request_timeout_ms)", true);
}

static void timer_arm(struct conn *c)
{
    if (c->closing)
        return;
    struct weft_coord *co = c->coord;
    uint64_t now = uv_now(&co->loop), deadline = UINT64_MAX;
    if (c->watch && !c->draining) {
        /* waiting on a job has no deadline here (api.c keeps the watch's); a client that
         * does not read what is written still has request_timeout_ms */
        if (c->out_bytes && c->write_t0)
            uv_timer_start(&c->timer, on_timer,
                           c->write_t0 + (uint64_t)co->api.request_timeout_ms > now
                               ? c->write_t0 + (uint64_t)co->api.request_timeout_ms - now
                               : 0,
                           0);
        else
            uv_timer_stop(&c->timer);
        return;
    }
    if (c->draining) {
        if (c->linger_set)
            return;
        c->linger_set = true;
        deadline = now + LINGER_MS;
    } else if (c->request_t0 || c->out_bytes) {
        if (c->request_t0)
            deadline = c->request_t0 + (uint64_t)co->api.request_timeout_ms;
        if (c->request_t0 && !c->in_body &&
            c->request_t0 + (uint64_t)co->api.header_timeout_ms < deadline)
            deadline = c->request_t0 + (uint64_t)co->api.header_timeout_ms;
        if (c->out_bytes && c->write_t0 &&
            c->write_t0 + (uint64_t)co->api.request_timeout_ms < deadline)
            deadline = c->write_t0 + (uint64_t)co->api.request_timeout_ms;
    } else {
        deadline = now + (uint64_t)co->api.idle_timeout_ms;
    }
    uv_timer_start(&c->timer, on_timer, deadline > now ? deadline - now : 0, 0);
}

/* ---------------------------------------------------------------------------------------- */
/* Connections                                                                               */

static void on_conn_closed(uv_handle_t *h)
{
    struct conn *c = h->data;
    if (--c->open_handles > 0)
        return;
    weft_http_parser_destroy(c->parser);
    weft_free(c->pending);
    weft_free(c);
}

static void conn_close(struct conn *c)
{
    if (c->closing)
        return;
    c->closing = true;
    struct weft_coord *co = c->coord;
    if (c->watch) {
        weft_api_watch_drop(co, c->watch);
        c->watch = NULL;
    }
    if (c->prev)
        c->prev->next = c->next;
    else
        co->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    if (!c->uncounted)
        co->n_conns--;
    uv_close((uv_handle_t *)&c->timer, on_conn_closed);
    uv_close(&c->h.handle, on_conn_closed);
}

void weft_server_close_conns(struct weft_coord *co, bool idle_only)
{
    struct conn *c = co->conns;
    while (c) {
        struct conn *next = c->next;
        bool idle = !c->request_t0 && c->out_bytes == 0 && !c->watch;
        if (!idle_only && c->out_bytes > 0 && c->close_after && !c->watch && !c->closing)
            ; /* a last answer on its way (a 503 at shutdown): it closes once written, within
               * request_timeout_ms */
        else if (!idle_only || idle)
            conn_close(c);
        else
            c->close_after = true; /* after the answer in progress */
        c = next;
    }
}

static void on_dropped(uv_handle_t *h)
{
    struct weft_coord *co = h->data;
    co->drop_busy = false;
}

/* Out of memory for a connection: take it off the backlog and close it (libuv stops accepting
 * until a pending connection is taken). */
static void drop_connection(struct weft_coord *co, uv_stream_t *server)
{
    WEFT_LOG_WARN("api", "out of memory for a new connection: dropped");
    if (co->drop_busy)
        return;
    int rc = co->is_unix ? uv_pipe_init(&co->loop, &co->drop.pipe, 0)
                         : uv_tcp_init(&co->loop, &co->drop.tcp);
    if (rc != 0)
        return;
    co->drop_busy = true;
    co->drop.handle.data = co;
    (void)uv_accept(server, &co->drop.stream);
    uv_close(&co->drop.handle, on_dropped);
}

/* Every slot is taken: free the one of the connection that has waited longest for a request
 * (nothing owed to it: no answer queued, no body being read). Its place is given up at once;
 * a head in progress is told why (408) on the way out. False when every connection has a
 * request in progress. */
static bool evict_one(struct weft_coord *co)
{
    struct conn *victim = NULL;
    for (struct conn *c = co->conns; c; c = c->next) {
        if (c->closing || c->draining || c->uncounted || c->close_after || c->in_body ||
            c->out_bytes || c->pending || c->watch)
            continue;
        if (!victim || c->wait_t0 <= victim->wait_t0) /* the list is newest first */
            victim = c;
    }
    if (!victim)
        return false;
    victim->uncounted = true;
    co->n_conns--;
    co->m.connections_evicted++;
    if (!victim->request_t0) {
        conn_close(victim); /* idle: as the idle timeout would */
        return true;
    }
    co->m.timeouts++;
    WEFT_LOG_DEBUG("api", "connection in its request head for %llu ms evicted for a new one",
                   (unsigned long long)(uv_now(&co->loop) - victim->wait_t0));
    respond_error(victim, 408, "request head too slow: the connection was closed for a new one "
                               "([api] max_connections)", true);
    return true;
}

static void on_connection(uv_stream_t *server, int status)
{
    struct weft_coord *co = server->data;
    if (status != 0) {
        WEFT_LOG_WARN("api", "accept: %s", uv_strerror(status));
        return;
    }
    struct conn *c = weft_calloc(1, sizeof(*c));
    if (!c) {
        drop_connection(co, server);
        return;
    }
    if (co->is_unix)
        (void)uv_pipe_init(&co->loop, &c->h.pipe, 0); /* no allocation: cannot fail */
    else
        (void)uv_tcp_init(&co->loop, &c->h.tcp);
    (void)uv_timer_init(&co->loop, &c->timer);
    c->coord = co;
    c->h.handle.data = c;
    c->timer.data = c;
    c->open_handles = 2;
    c->next = co->conns;
    if (co->conns)
        co->conns->prev = c;
    co->conns = c;
    c->uncounted = true; /* not counted in n_conns until it is served */
    if (uv_accept(server, &c->h.stream) != 0) {
        conn_close(c);
        return;
    }
    co->m.connections_total++;
    c->wait_t0 = uv_now(&co->loop);
    struct weft_http_limits lim = {.max_header = co->api.max_header, .max_headers = 100,
                                   .max_body = co->api.max_body};
    if (weft_http_parser_create(&lim, &c->parser) != WEFT_OK) {
        co->m.connections_refused++;
        respond_error(c, 503, "out of memory for a new connection", true);
        return;
    }
    if (co->n_conns >= co->api.max_connections && !evict_one(co)) {
        co->m.connections_refused++;
        respond_error(c, 503, "too many connections, each with a request in progress "
                              "([api] max_connections)", true);
        return;
    }
    c->uncounted = false;
    co->n_conns++;
    if (!co->is_unix)
        (void)uv_tcp_nodelay(&c->h.tcp, 1);
    uv_read_start(&c->h.stream, on_alloc, on_read);
    timer_arm(c);
}

/* ---------------------------------------------------------------------------------------- */
/* Listening                                                                                 */

static bool is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a);
    }
    return false;
}

/* "host:port", "[v6]:port" or "localhost:port" into sa. */
static weft_status_t parse_tcp(const char *text, struct sockaddr_storage *sa)
{
    char host[256];
    const char *colon = strrchr(text, ':');
    if (!colon || colon == text || (size_t)(colon - text) >= sizeof(host))
        return WEFT_ERR_CONFIG;
    const char *h = text;
    size_t hn = (size_t)(colon - text);
    if (h[0] == '[' && hn >= 2 && h[hn - 1] == ']') {
        h++;
        hn -= 2;
    }
    memcpy(host, h, hn);
    host[hn] = '\0';
    char *end;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (errno || end == colon + 1 || *end || port < 0 || port > 65535)
        return WEFT_ERR_CONFIG;
    if (strcmp(host, "localhost") == 0)
        snprintf(host, sizeof(host), "127.0.0.1");
    if (uv_ip4_addr(host, (int)port, (struct sockaddr_in *)sa) == 0)
        return WEFT_OK;
    if (uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)sa) == 0)
        return WEFT_OK;
    return WEFT_ERR_CONFIG;
}

weft_status_t weft_server_check_address(const char *listen)
{
    struct sockaddr_un sun;
    struct sockaddr_storage sa;
    if (strncmp(listen, "unix:", 5) == 0) {
        size_t n = strlen(listen + 5);
        if (n > 0 && n < sizeof(sun.sun_path))
            return WEFT_OK;
        WEFT_LOG_ERROR("api", "[api] listen = %s: the socket path must be 1..%zu bytes", listen,
                       sizeof(sun.sun_path) - 1);
        return WEFT_ERR_CONFIG;
    }
    if (parse_tcp(listen, &sa) == WEFT_OK)
        return WEFT_OK;
    WEFT_LOG_ERROR("api", "[api] listen = '%s': expected host:port with a numeric IPv4 or "
                          "[IPv6] address (or localhost), or unix:/path", listen);
    return WEFT_ERR_CONFIG;
}

/* Make room for a socket at path without removing anything that is not ours to remove: a
 * socket nobody listens on (connect() refused: its server died) is replaced; a live one, or a
 * file that is not a socket, is an error naming the path. */
static weft_status_t clear_stale_socket(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0) {
        if (errno == ENOENT)
            return WEFT_OK;
        WEFT_LOG_ERROR("api", "unix:%s: %s", path, strerror(errno));
        return WEFT_ERR_IO;
    }
    if (!S_ISSOCK(sb.st_mode)) {
        WEFT_LOG_ERROR("api", "unix:%s: the path exists and is not a socket (not replacing it)",
                       path);
        return WEFT_ERR_BUSY;
    }
    /* non-blocking: a live server with a full backlog answers EAGAIN instead of stalling us */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        WEFT_LOG_ERROR("api", "unix:%s: socket: %s", path, strerror(errno));
        return WEFT_ERR_IO;
    }
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
    int rc = connect(fd, (struct sockaddr *)&sun, sizeof(sun));
    int err = rc == 0 ? 0 : errno;
    close(fd);
    if (rc == 0 || err == EAGAIN || err == EINPROGRESS) {
        WEFT_LOG_ERROR("api", "%s: another server is listening there", path);
        return WEFT_ERR_BUSY;
    }
    if (err == ENOENT)
        return WEFT_OK; /* gone meanwhile */
    if (err != ECONNREFUSED) {
        WEFT_LOG_ERROR("api", "unix:%s: cannot tell whether a server listens there: %s", path,
                       strerror(err));
        return WEFT_ERR_IO;
    }
    if (unlink(path) != 0 && errno != ENOENT) {
        WEFT_LOG_ERROR("api", "unix:%s: cannot remove the stale socket: %s", path,
                       strerror(errno));
        return WEFT_ERR_IO;
    }
    WEFT_LOG_INFO("api", "unix:%s: replaced a stale socket (nobody listened there)", path);
    return WEFT_OK;
}

static weft_status_t listen_unix(struct weft_coord *co, const char *path)
{
    struct sockaddr_un probe;
    if (strlen(path) >= sizeof(probe.sun_path) || !path[0]) {
        WEFT_LOG_ERROR("api", "[api] listen = unix:%s: the path must be 1..%zu bytes", path,
                       sizeof(probe.sun_path) - 1);
        return WEFT_ERR_CONFIG;
    }
    snprintf(co->unix_path, sizeof(co->unix_path), "%s", path);
    int rc = uv_pipe_init(&co->loop, &co->listener.pipe, 0);
    if (rc != 0) {
        WEFT_LOG_ERROR("api", "unix socket: %s", uv_strerror(rc));
        return WEFT_ERR_INTERNAL;
    }
    co->listening = true;
    co->is_unix = true;
    weft_status_t st = clear_stale_socket(path);
    if (st != WEFT_OK)
        return st;
    /* bound here, not by uv_pipe_bind: libuv unlinks the path of a socket it bound when the
     * handle closes, whatever file is there by then (unlink_own_socket checks it first) */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        WEFT_LOG_ERROR("api", "unix:%s: socket: %s", path, strerror(errno));
        return WEFT_ERR_IO;
    }
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
    mode_t old = umask(0077); /* the socket is the owner's only */
    rc = bind(fd, (struct sockaddr *)&sun, sizeof(sun)) == 0 ? 0 : -errno;
    umask(old);
    struct stat sb;
    if (rc == 0 && lstat(path, &sb) == 0) { /* ours from here on: removed at exit */
        co->unix_bound = true;
        co->unix_dev = sb.st_dev;
        co->unix_ino = sb.st_ino;
    }
    if (rc != 0) {
        WEFT_LOG_ERROR("api", "unix:%s: cannot bind: %s", path, strerror(-rc));
        close(fd);
        return rc == -EADDRINUSE ? WEFT_ERR_BUSY : WEFT_ERR_IO;
    }
    rc = uv_pipe_open(&co->listener.pipe, fd); /* the handle owns fd from here */
    if (rc != 0)
        close(fd);
    if (rc == 0)
        rc = uv_listen(&co->listener.stream, 128, on_connection);
    if (rc != 0) {
        WEFT_LOG_ERROR("api", "unix:%s: cannot listen: %s", path, uv_strerror(rc));
        return WEFT_ERR_IO;
    }
    snprintf(co->address, sizeof(co->address), "unix:%s", path);
    return WEFT_OK;
}

static weft_status_t listen_tcp(struct weft_coord *co, const char *text)
{
    struct sockaddr_storage sa;
    if (parse_tcp(text, &sa) != WEFT_OK) {
        WEFT_LOG_ERROR("api", "[api] listen = '%s': expected host:port with a numeric IPv4 or "
                              "[IPv6] address (or localhost), or unix:/path", text);
        return WEFT_ERR_CONFIG;
    }
    int rc = uv_tcp_init(&co->loop, &co->listener.tcp);
    if (rc != 0) {
        WEFT_LOG_ERROR("api", "tcp socket: %s", uv_strerror(rc));
        return WEFT_ERR_INTERNAL;
    }
    co->listening = true;
    rc = uv_tcp_bind(&co->listener.tcp, (const struct sockaddr *)&sa, 0);
    if (rc == 0)
        rc = uv_listen(&co->listener.stream, 128, on_connection);
    if (rc != 0) {
        WEFT_LOG_ERROR("api", "%s: cannot listen: %s", text, uv_strerror(rc));
        return rc == UV_EADDRINUSE ? WEFT_ERR_BUSY : WEFT_ERR_IO;
    }
    struct sockaddr_storage bound;
    int len = sizeof(bound);
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (uv_tcp_getsockname(&co->listener.tcp, (struct sockaddr *)&bound, &len) == 0) {
        if (bound.ss_family == AF_INET6) {
            uv_ip6_name((struct sockaddr_in6 *)&bound, ip, sizeof(ip));
            port = ntohs(((struct sockaddr_in6 *)&bound)->sin6_port);
            snprintf(co->address, sizeof(co->address), "[%s]:%d", ip, port);
        } else {
            uv_ip4_name((struct sockaddr_in *)&bound, ip, sizeof(ip));
            port = ntohs(((struct sockaddr_in *)&bound)->sin_port);
            snprintf(co->address, sizeof(co->address), "%s:%d", ip, port);
        }
    }
    if (!is_loopback((const struct sockaddr *)&sa))
        WEFT_LOG_WARN("api", "listening on %s, beyond this machine%s", co->address,
                      co->api.token[0] ? ""
                                       : " and without a token: anyone who can reach it can "
                                         "submit jobs (set [api] token)");
    return WEFT_OK;
}

weft_status_t weft_server_listen(struct weft_coord *co)
{
    const char *l = co->api.listen;
    weft_status_t st = strncmp(l, "unix:", 5) == 0 ? listen_unix(co, l + 5) : listen_tcp(co, l);
    co->listener.handle.data = co; /* once initialised (listening), destroy closes it */
    if (st != WEFT_OK)
        return st;
    WEFT_LOG_INFO("api", "listening on %s", co->address);
    return WEFT_OK;
}

weft_status_t weft_coord_listen(struct weft_coord *co, const char *port_file)
{
    weft_status_t st = weft_server_listen(co);
    if (st != WEFT_OK || !port_file)
        return st;
    char line[1200];
    int n = snprintf(line, sizeof(line), "%s\n", co->address);
    return weft_files_write(port_file, line, (size_t)n);
}

const char *weft_coord_address(const struct weft_coord *co)
{
    return co->address;
}

static void on_listener_closed(uv_handle_t *h)
{
    (void)h;
}

/* Remove the socket file this process bound, if it is still the same file: another server
 * may have replaced it since. */
static void unlink_own_socket(struct weft_coord *co)
{
    if (!co->unix_bound)
        return;
    co->unix_bound = false;
    struct stat sb;
    if (lstat(co->unix_path, &sb) != 0 || !S_ISSOCK(sb.st_mode) || sb.st_dev != co->unix_dev ||
        sb.st_ino != co->unix_ino) {
        WEFT_LOG_INFO("api", "unix:%s: no longer the socket this server bound: left in place",
                      co->unix_path);
        return;
    }
    (void)unlink(co->unix_path);
}

void weft_server_close_listener(struct weft_coord *co)
{
    if (co->listening) {
        co->listening = false;
        if (!uv_is_closing(&co->listener.handle))
            uv_close(&co->listener.handle, on_listener_closed);
    }
    unlink_own_socket(co);
}
