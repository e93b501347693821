/* The worker port (see internal.h): connections on the heap, a bounded pending pool with a
 * per-address cap and a deadline, the authenticated bootstrap (control/boot.h), the control
 * link's first message, and losing a worker. Nothing unauthenticated can take more than its
 * share of the pending pool, hold it past the deadline, or reach a worker slot. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/files.h"
#include "common/log.h"
#include "common/num.h"
#include "common/sha256.h"
#include "coordinator/cluster/internal.h"

/* ---------------------------------------------------------------------------------------- */
/* Connections                                                                               */

static void pending_remove(struct cluster_runner *r, struct conn *c)
{
    for (struct conn **pp = &r->pending; *pp; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            c->next = NULL;
            r->n_pending--;
            return;
        }
    }
}

static void on_conn_closed(uv_handle_t *h)
{
    struct conn *c = h->data;
    struct worker *w = c->w;
    if (w) { /* the slot of a lost worker is free once its connection is gone */
        cJSON_Delete(w->hello);
        w->hello = NULL;
        w->conn = NULL;
        w->state = W_FREE;
    }
    weft_free(c->rbuf);
    weft_free(c);
}

void weft_cr_conn_close(struct conn *c)
{
    if (!c || c->closing)
        return;
    c->closing = true;
    if (!c->w)
        pending_remove(c->r, c);
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static void write_done(uv_write_t *req, int status)
{
    (void)status;
    weft_free(req->data);
    weft_free(req);
}

/* A frame: u32 length, the text (weft_free'd here). */
static int frame_write(struct conn *c, char *text)
{
    if (!text)
        return -1;
    size_t n = strlen(text);
    uint8_t *buf = weft_malloc(n + 4);
    uv_write_t *req = weft_malloc(sizeof(*req));
    if (!buf || !req) {
        weft_free(text);
        weft_free(buf);
        weft_free(req);
        return -1;
    }
    for (int i = 0; i < 4; i++)
        buf[i] = (uint8_t)(n >> (8 * i));
    /* a length-prefixed frame: no terminating NUL goes on the wire */
    memcpy(buf + 4, text, n); /* NOLINT(bugprone-not-null-terminated-result) */
    weft_free(text);
    req->data = buf;
    uv_buf_t b = uv_buf_init((char *)buf, (unsigned)(n + 4));
    if (uv_write(req, (uv_stream_t *)&c->tcp, &b, 1, write_done) != 0) {
        weft_free(buf);
        weft_free(req);
        return -1;
    }
    return 0;
}

static void refuse(struct conn *c, const char *why)
{
    WEFT_LOG_WARN("cluster", "refused a worker connection from %s: %s", c->peer, why);
    struct weft_boot_accept a = {.accepted = false};
    snprintf(a.error, sizeof(a.error), "%s", why);
    (void)frame_write(c, weft_boot_accept_encode(&a));
    weft_cr_conn_close(c);
}

static struct worker *free_slot(struct cluster_runner *r)
{
    for (int i = 0; i < MAX_WORKERS; i++)
        if (r->w[i].state == W_FREE)
            return &r->w[i];
    return NULL;
}

/* The worker's hello: its proof, then a slot, an id, our proof and our link address. */
static void on_hello(struct conn *c, const cJSON *json)
{
    struct cluster_runner *r = c->r;
    struct weft_boot_hello h;
    struct weft_error err = WEFT_ERROR_INIT;
    if (weft_boot_hello_decode(json, &h, &err) != WEFT_OK) {
        refuse(c, weft_error_text(&err));
        return;
    }
    char want[WEFT_BOOT_HEX];
    weft_boot_proof(r->secret, "worker", c->challenge, want);
    const void *mine;
    size_t mlen;
    struct worker *w = NULL;
    if (!weft_boot_proof_ok(h.response, want))
        refuse(c, "wrong cluster secret");
    else if (weft_link_host_address(r->host, &mine, &mlen) != WEFT_OK)
        refuse(c, "the coordinator has no control-link address");
    else if (!(w = free_slot(r)))
        refuse(c, "the coordinator has no room for another worker");
    if (!w) {
        weft_boot_hello_cleanup(&h);
        return;
    }
    pending_remove(r, c);
    const cJSON *host = cJSON_GetObjectItemCaseSensitive(h.inventory, "host");
    const cJSON *pid = cJSON_GetObjectItemCaseSensitive(h.inventory, "pid");
    *w = (struct worker){.r = r, .state = W_AUTHED, .conn = c, .rank = -1, .group = -1,
                         .last_heard = weft_cr_now()};
    snprintf(w->host, sizeof(w->host), "%s", cJSON_IsString(host) ? host->valuestring : "?");
    w->pid = cJSON_IsNumber(pid) ? (long)weft_double_int_or(pid->valuedouble, 0, INT32_MAX, 0) : 0;
    w->hello = h.inventory;
    h.inventory = NULL;
    snprintf(w->id, sizeof(w->id), "w%d", r->next_id++);
    c->w = w;
    weft_boot_hello_cleanup(&h); /* its link address is not needed: the worker connects */
    struct weft_boot_accept a = {.accepted = true, .link = (void *)mine, .link_len = mlen};
    snprintf(a.id, sizeof(a.id), "%s", w->id);
    weft_boot_proof(r->secret, "coordinator", h.challenge, a.response);
    if (frame_write(c, weft_boot_accept_encode(&a)) != 0)
        weft_cr_worker_lost(w, "cannot answer its bootstrap");
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct conn *c = h->data;
    (void)suggested;
    if (c->rcap - c->rlen < 4096) {
        size_t cap = c->rcap ? c->rcap * 2 : 8192;
        uint8_t *nb = cap <= (size_t)2 * (WEFT_BOOT_MAX + 8) ? weft_realloc(c->rbuf, cap) : NULL;
        if (nb) {
            c->rbuf = nb;
            c->rcap = cap;
        }
    }
    *buf = uv_buf_init((char *)c->rbuf + c->rlen, (unsigned)(c->rcap - c->rlen));
}

/* After the bootstrap the connection carries nothing: any byte, or its end, is the worker's. */
static void after_boot_read(struct conn *c, ssize_t n)
{
    if (c->w->state == W_GONE)
        return;
    weft_cr_worker_lost(c->w, n == UV_EOF ? "its process ended (bootstrap connection closed)"
                              : n < 0     ? uv_strerror((int)n)
                                          : "sent data on its bootstrap connection after joining");
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    (void)buf;
    struct conn *c = s->data;
    if (c->closing)
        return;
    if (c->w) {
        if (n != 0)
            after_boot_read(c, n);
        return;
    }
    if (n < 0) {
        weft_cr_conn_close(c); /* a client gone during its bootstrap */
        return;
    }
    c->rlen += (size_t)n;
    if (c->rlen < 4)
        return;
    size_t len = (size_t)c->rbuf[0] | (size_t)c->rbuf[1] << 8 | (size_t)c->rbuf[2] << 16 |
                 (size_t)c->rbuf[3] << 24;
    if (len == 0 || len > WEFT_BOOT_MAX) {
        refuse(c, "oversized bootstrap frame");
        return;
    }
    if (c->rlen < 4 + len) {
        if (c->rcap - c->rlen == 0)
            refuse(c, "bootstrap frame too large");
        return;
    }
    if (c->rlen > 4 + len) {
        refuse(c, "data after the hello");
        return;
    }
    cJSON *json;
    struct weft_error err = WEFT_ERROR_INIT;
    if (weft_boot_parse(c->rbuf + 4, len, &json, &err) != WEFT_OK) {
        refuse(c, weft_error_text(&err));
        return;
    }
    c->rlen = 0;
    on_hello(c, json);
    cJSON_Delete(json);
}

static int pending_from(const struct cluster_runner *r, const char *peer)
{
    int n = 0;
    for (const struct conn *c = r->pending; c; c = c->next)
        n += strcmp(c->peer, peer) == 0;
    return n;
}

static void peer_name(struct conn *c)
{
    struct sockaddr_storage sa;
    int len = sizeof(sa);
    snprintf(c->peer, sizeof(c->peer), "?");
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&sa, &len) != 0)
        return;
    if (sa.ss_family == AF_INET)
        uv_ip4_name((const struct sockaddr_in *)&sa, c->peer, sizeof(c->peer));
    else if (sa.ss_family == AF_INET6)
        uv_ip6_name((const struct sockaddr_in6 *)&sa, c->peer, sizeof(c->peer));
}

/* A connection beyond the pool or its address's share is accepted and closed at once (the
 * client learns it at once); a summary of those refusals is logged once a second. */
static void on_connection(uv_stream_t *server, int status)
{
    struct cluster_runner *r = server->data;
    if (status < 0 || r->closed)
        return;
    struct conn *c = weft_calloc(1, sizeof(*c));
    if (!c) { /* left in libuv's hands: accepted on a later tick */
        r->accept_stalled = true;
        return;
    }
    r->accept_stalled = false;
    c->r = r;
    uv_tcp_init(r->loop, &c->tcp);
    c->tcp.data = c;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
        c->closing = true;
        uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
        return;
    }
    peer_name(c);
    if (r->n_pending >= MAX_PENDING || pending_from(r, c->peer) >= MAX_PENDING_PER_ADDR) {
        r->refused++;
        c->closing = true;
        uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
        return;
    }
    c->next = r->pending;
    r->pending = c;
    r->n_pending++;
    c->since = weft_cr_now();
    struct weft_boot_challenge ch;
    if (weft_boot_new_challenge(ch.challenge) != WEFT_OK ||
        frame_write(c, weft_boot_challenge_encode(&ch)) != 0 ||
        uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) {
        weft_cr_conn_close(c);
        return;
    }
    memcpy(c->challenge, ch.challenge, sizeof(c->challenge));
}

void weft_cr_boot_tick(struct cluster_runner *r, double now)
{
    if (r->accept_stalled && !r->closed && r->server)
        on_connection((uv_stream_t *)r->server, 0);
    const double limit = (double)r->conf->cluster.worker_timeout_ms / 1e3;
    struct conn *next;
    for (struct conn *c = r->pending; c; c = next) {
        next = c->next;
        if (now - c->since > limit) {
            WEFT_LOG_WARN("cluster", "a connection from %s did not finish its bootstrap in "
                                     "%.1f s: closed", c->peer, limit);
            weft_cr_conn_close(c);
        }
    }
    for (int i = 0; i < MAX_WORKERS; i++) {
        struct worker *w = &r->w[i];
        if (w->state == W_AUTHED && now - w->last_heard > limit)
            weft_cr_worker_lost(w, "did not open its control link in time");
    }
    if (r->refused > r->refused_logged && now >= r->refused_log_at) {
        WEFT_LOG_WARN("cluster", "%llu connections to the worker port refused so far (more than "
                                 "%d joining at once, or %d from one address)",
                      (unsigned long long)r->refused, MAX_PENDING, MAX_PENDING_PER_ADDR);
        r->refused_logged = r->refused;
        r->refused_log_at = now + 1.0;
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Control links                                                                             */

static void on_down(struct weft_link *link, weft_status_t why, void *arg)
{
    (void)link;
    struct worker *w = arg;
    char reason[96];
    snprintf(reason, sizeof(reason), "control link down (%s)", weft_status_str(why));
    w->link = NULL; /* the link is gone */
    weft_cr_worker_lost(w, reason);
}

/* A link's first message names its worker. */
static void on_first_msg(struct weft_link *link, uint16_t type, const void *data, size_t len,
                         void *arg)
{
    struct cluster_runner *r = arg;
    union weft_msg m;
    struct weft_error err = WEFT_ERROR_INIT;
    if (type != WEFT_MSG_HELLO || weft_msg_decode(type, data, len, &m, &err) != WEFT_OK) {
        WEFT_LOG_WARN("cluster", "a control link opened without a valid hello (%s): closed",
                      err.status ? weft_error_text(&err) : weft_msg_name(type));
        weft_link_close(link);
        return;
    }
    struct worker *w = NULL;
    for (int i = 0; i < MAX_WORKERS && !w; i++)
        if (r->w[i].state == W_AUTHED && strcmp(r->w[i].id, m.hello.id) == 0)
            w = &r->w[i];
    if (!w) {
        WEFT_LOG_WARN("cluster", "a control link named no authenticated worker: closed");
        weft_link_close(link);
        return;
    }
    w->link = link;
    w->state = W_JOINED;
    w->last_heard = weft_cr_now();
    weft_link_set_callbacks(link, weft_cr_on_msg, on_down, w);
    if (r->closed) { /* shutting down: this one stops too (weft_cr_shutdown waits for it) */
        weft_cr_leave(w);
        return;
    }
    WEFT_LOG_INFO("cluster", "worker %s joined (%s, pid %ld)", w->id, w->host, w->pid);
    r->plan_error[0] = '\0'; /* the workers changed: plan again */
    weft_cr_plan_maybe(r);
}

void weft_cr_on_accept(struct weft_link_host *host, struct weft_link *link, void *arg)
{
    (void)host;
    weft_link_set_callbacks(link, on_first_msg, NULL, arg);
}

void weft_cr_worker_lost(struct worker *w, const char *why)
{
    struct cluster_runner *r = w->r;
    if (w->state == W_FREE || w->state == W_GONE)
        return;
    if (w->state == W_LEAVING) { /* told to stop: its link's end is the answer, not a loss */
        if (w->link)
            weft_link_close(w->link);
        w->link = NULL;
        w->state = W_GONE;
        weft_cr_conn_close(w->conn);
        return;
    }
    const bool was_joined = w->state == W_JOINED, in_mesh = w->rank >= 0;
    if (was_joined) {
        WEFT_LOG_WARN("cluster", "worker %s (%s, pid %ld) lost: %s", w->id, w->host, w->pid, why);
        r->workers_lost++;
    }
    if (w->link) {
        weft_link_close(w->link);
        w->link = NULL;
    }
    w->state = W_GONE; /* no longer counted; freed when its connection has closed */
    if (in_mesh) {
        /* the mesh is planned again: every running job stops (and runs again if the
         * coordinator's attempts allow) */
        weft_cr_jobs_interrupt(r, w, WEFT_ERR_PEER_LOST, why);
        w->rank = -1;
        weft_cr_plan_reset(r);
    }
    weft_cr_conn_close(w->conn);
    if (was_joined)
        r->plan_error[0] = '\0'; /* the workers changed: plan again */
    weft_cr_plan_maybe(r);
}

/* ---------------------------------------------------------------------------------------- */

static void on_server_closed(uv_handle_t *h)
{
    weft_free(h);
}

static void server_close(struct cluster_runner *r)
{
    if (r->server)
        uv_close((uv_handle_t *)r->server, on_server_closed);
    r->server = NULL;
}

weft_status_t weft_cr_listen(struct cluster_runner *r, const char *listen, const char *port_file,
                             struct weft_error *err)
{
    const char *colon = strrchr(listen, ':');
    if (!colon || colon == listen || (size_t)(colon - listen) >= sizeof(r->listen_host))
        return weft_error_refuse(err, WEFT_ERR_CONFIG,
                                 "[cluster] listen = '%s': expected host:port", listen);
    snprintf(r->listen_host, sizeof(r->listen_host), "%.*s", (int)(colon - listen), listen);
    char *end;
    long port = strtol(colon + 1, &end, 10);
    struct sockaddr_storage sa;
    if (*end || port < 0 || port > 65535 ||
        (uv_ip4_addr(r->listen_host, (int)port, (struct sockaddr_in *)&sa) != 0 &&
         uv_ip6_addr(r->listen_host, (int)port, (struct sockaddr_in6 *)&sa) != 0))
        return weft_error_refuse(err, WEFT_ERR_CONFIG,
                                 "[cluster] listen = '%s': not a numeric address and port",
                                 listen);
    if (!(r->server = weft_calloc(1, sizeof(*r->server))))
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    uv_tcp_init(r->loop, r->server);
    r->server->data = r;
    int rc = uv_tcp_bind(r->server, (const struct sockaddr *)&sa, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)r->server, 128, on_connection);
    if (rc != 0) {
        server_close(r);
        return weft_error_refuse(err, WEFT_ERR_IO, "cannot listen for workers on %s: %s",
                                 listen, uv_strerror(rc));
    }
    struct sockaddr_storage bound;
    int blen = sizeof(bound);
    uv_tcp_getsockname(r->server, (struct sockaddr *)&bound, &blen);
    int bport = ntohs(((struct sockaddr_in *)&bound)->sin_port);
    WEFT_LOG_INFO("cluster", "waiting for workers on %s:%d", r->listen_host, bport);
    if (port_file) {
        char text[300];
        int n = snprintf(text, sizeof(text), "%s:%d\n", r->listen_host, bport);
        weft_status_t st = weft_files_save(port_file, text, (size_t)n, err);
        if (st != WEFT_OK) {
            server_close(r);
            return st;
        }
    }
    return WEFT_OK;
}

void weft_cr_boot_close(struct cluster_runner *r)
{
    while (r->pending)
        weft_cr_conn_close(r->pending);
    for (int i = 0; i < MAX_WORKERS; i++)
        weft_cr_conn_close(r->w[i].conn);
    server_close(r);
}
