/* The weft job API client: blocking HTTP/1.1 over one keep-alive socket, llhttp for the
 * answers, poll(2) for every deadline. */
#include "client/weft.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <llhttp.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/utf8.h"

#define MAX_ANSWER (1ull << 31) /* the largest answer body accepted (images included) */
#define DEFAULT_TIMEOUT_MS 30000

struct weft_client {
    char address[1024];
    char host[256], port[16];
    char unix_path[108];
    bool is_unix;
    char auth[600];  /* "Authorization: Bearer ...\r\n" or "" */
    int timeout_ms;
    int fd;
    int http_status;
    char error[768];
};

/* The answer being read. */
struct answer {
    llhttp_t ll;
    llhttp_settings_t settings;
    int status;
    bool complete;
    bool keep_alive;
    char *body;
    size_t len, cap;
    bool too_big;
    /* a streamed answer: a 200's body goes to sink as it arrives instead of into body; sink
     * returns non-zero to stop reading */
    int (*sink)(void *arg, const char *data, size_t n);
    void *sink_arg;
    bool stopped;
};

static void set_error(struct weft_client *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void set_error(struct weft_client *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): a false positive on glibc */
    vsnprintf(c->error, sizeof(c->error), fmt, ap);
    va_end(ap);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void weft_client_free(void *p)
{
    weft_free(p);
}

const char *weft_client_error(const struct weft_client *c)
{
    return c->error;
}

int weft_client_http_status(const struct weft_client *c)
{
    return c->http_status;
}

const char *weft_client_state_name(enum weft_job_state s)
{
    static const char *const names[] = {"queued", "running", "done", "failed", "cancelled"};
    return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "unknown";
}

/* ---------------------------------------------------------------------------------------- */
/* Connection                                                                                */

static void disconnect(struct weft_client *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

/* Wait for fd to be ready for events before deadline (ms, monotonic). */
static weft_status_t wait_fd(struct weft_client *c, short events, int64_t deadline,
                             const char *what)
{
    for (;;) {
        int64_t left = deadline - now_ms();
        if (left <= 0) {
            set_error(c, "%s: no answer from %s within %d ms", what, c->address, c->timeout_ms);
            return WEFT_ERR_TIMEOUT;
        }
        struct pollfd p = {.fd = c->fd, .events = events};
        int n = poll(&p, 1, (int)(left > 1000000 ? 1000000 : left));
        if (n > 0)
            return WEFT_OK;
        if (n < 0 && errno != EINTR) {
            set_error(c, "%s: poll: %s", what, strerror(errno));
            return WEFT_ERR_IO;
        }
    }
}

static weft_status_t connect_fd(struct weft_client *c, int fd, const struct sockaddr *sa,
                                socklen_t len, int64_t deadline)
{
    c->fd = fd;
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        set_error(c, "socket: %s", strerror(errno));
        return WEFT_ERR_IO;
    }
    if (connect(fd, sa, len) != 0) {
        if (errno != EINPROGRESS && errno != EAGAIN) {
            set_error(c, "cannot connect to %s: %s", c->address, strerror(errno));
            return errno == ECONNREFUSED || errno == ENOENT ? WEFT_ERR_UNREACHABLE
                                                            : WEFT_ERR_IO;
        }
        weft_status_t st = wait_fd(c, POLLOUT, deadline, "connect");
        if (st != WEFT_OK)
            return st;
        int err = 0;
        socklen_t elen = sizeof(err);
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0 || err != 0) {
            set_error(c, "cannot connect to %s: %s", c->address, strerror(err ? err : errno));
            return WEFT_ERR_UNREACHABLE;
        }
    }
    return WEFT_OK;
}

static weft_status_t open_connection(struct weft_client *c)
{
    int64_t deadline = now_ms() + c->timeout_ms;
    weft_status_t st;
    if (c->is_unix) {
        struct sockaddr_un sun = {.sun_family = AF_UNIX};
        snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", c->unix_path);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            set_error(c, "socket: %s", strerror(errno));
            return WEFT_ERR_IO;
        }
        st = connect_fd(c, fd, (struct sockaddr *)&sun, sizeof(sun), deadline);
        if (st != WEFT_OK)
            disconnect(c);
        return st;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(c->host, c->port, &hints, &res);
    if (rc != 0) {
        set_error(c, "%s: cannot resolve '%s': %s", c->address, c->host, gai_strerror(rc));
        return WEFT_ERR_UNREACHABLE;
    }
    st = WEFT_ERR_UNREACHABLE;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0)
            continue;
        st = connect_fd(c, fd, a->ai_addr, a->ai_addrlen, deadline);
        if (st == WEFT_OK) {
            int one = 1;
            (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            break;
        }
        disconnect(c);
    }
    freeaddrinfo(res);
    return st;
}

weft_status_t weft_client_connect(const struct weft_client_opts *opts,
                                  struct weft_client **client_p)
{
    if (!opts || !opts->address || !opts->address[0])
        return WEFT_ERR_INVALID;
    struct weft_client *c = weft_calloc(1, sizeof(*c));
    if (!c)
        return WEFT_ERR_NOMEM;
    c->fd = -1;
    c->timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : DEFAULT_TIMEOUT_MS;
    snprintf(c->address, sizeof(c->address), "%s", opts->address);
    weft_status_t st = WEFT_ERR_INVALID;
    if (opts->token && opts->token[0]) {
        if (strlen(opts->token) > 512 || strpbrk(opts->token, "\r\n")) {
            set_error(c, "the token must be one line of at most 512 bytes");
            goto err;
        }
        snprintf(c->auth, sizeof(c->auth), "Authorization: Bearer %s\r\n", opts->token);
    }
    if (strncmp(opts->address, "unix:", 5) == 0) {
        const char *path = opts->address + 5;
        if (!path[0] || strlen(path) >= sizeof(c->unix_path)) {
            set_error(c, "%s: the socket path must be 1..%zu bytes", opts->address,
                      sizeof(c->unix_path) - 1);
            goto err;
        }
        c->is_unix = true;
        snprintf(c->unix_path, sizeof(c->unix_path), "%s", path);
    } else {
        const char *colon = strrchr(opts->address, ':');
        const char *h = opts->address;
        size_t hn = colon ? (size_t)(colon - h) : 0;
        if (hn >= 2 && h[0] == '[' && h[hn - 1] == ']') {
            h++;
            hn -= 2;
        }
        if (!colon || hn == 0 || hn >= sizeof(c->host) || !colon[1] ||
            strlen(colon + 1) >= sizeof(c->port) ||
            strspn(colon + 1, "0123456789") != strlen(colon + 1)) {
            set_error(c, "'%s': expected host:port or unix:/path", opts->address);
            goto err;
        }
        memcpy(c->host, h, hn);
        c->host[hn] = '\0';
        snprintf(c->port, sizeof(c->port), "%s", colon + 1);
    }
    if ((st = open_connection(c)) != WEFT_OK)
        goto err;
    *client_p = c;
    return WEFT_OK;
err:
    /* the message would be lost with the client: log it, once */
    WEFT_LOG_ERROR("client", "%s", c->error);
    weft_client_close(c);
    return st;
}

void weft_client_close(struct weft_client *c)
{
    if (!c)
        return;
    disconnect(c);
    weft_free(c);
}

/* ---------------------------------------------------------------------------------------- */
/* One exchange                                                                              */

static int on_status(llhttp_t *ll, const char *at, size_t n)
{
    (void)at, (void)n;
    struct answer *a = ll->data;
    a->status = ll->status_code;
    return 0;
}

static int on_body(llhttp_t *ll, const char *at, size_t n)
{
    struct answer *a = ll->data;
    if (a->sink && a->status == 200) {
        if (a->sink(a->sink_arg, at, n) != 0) {
            a->stopped = true;
            return HPE_USER;
        }
        return 0;
    }
    if (n > MAX_ANSWER - a->len) {
        a->too_big = true;
        return HPE_USER;
    }
    if (a->len + n + 1 > a->cap) {
        size_t cap = a->cap ? a->cap : 4096;
        while (cap < a->len + n + 1)
            cap *= 2;
        char *b = weft_realloc(a->body, cap);
        if (!b)
            return HPE_USER;
        a->body = b;
        a->cap = cap;
    }
    memcpy(a->body + a->len, at, n);
    a->len += n;
    a->body[a->len] = '\0';
    return 0;
}

static int on_headers_complete(llhttp_t *ll)
{
    struct answer *a = ll->data;
    a->status = ll->status_code;
    if (a->status == 100) /* an interim answer: the real one follows */
        return 0;
    /* a body of known length: reserve it once */
    if ((ll->flags & F_CONTENT_LENGTH) && ll->content_length < MAX_ANSWER && !a->body &&
        !(a->sink && a->status == 200)) {
        a->body = weft_malloc((size_t)ll->content_length + 1);
        if (a->body) {
            a->cap = (size_t)ll->content_length + 1;
            a->body[0] = '\0';
        }
    }
    return 0;
}

static int on_message_complete(llhttp_t *ll)
{
    struct answer *a = ll->data;
    if (ll->status_code == 100) {
        a->status = 0;
        return 0;
    }
    a->complete = true;
    a->keep_alive = llhttp_should_keep_alive(ll) != 0;
    return HPE_PAUSED;
}

static weft_status_t send_all(struct weft_client *c, const char *p, size_t len, int64_t deadline)
{
    while (len) {
        ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            weft_status_t st = wait_fd(c, POLLOUT, deadline, "send");
            if (st != WEFT_OK)
                return st;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            set_error(c, "send to %s: %s", c->address, strerror(errno));
            return WEFT_ERR_PEER_LOST;
        }
        p += n;
        len -= (size_t)n;
    }
    return WEFT_OK;
}

/* Read one answer into a. *got_any_p: some bytes of it arrived (a retry would not be safe). */
static weft_status_t read_answer(struct weft_client *c, struct answer *a, int64_t deadline,
                                 bool *got_any_p)
{
    char buf[65536];
    /* a stream has no end to wait for within one timeout: what bounds it is silence (the
     * server's keep-alives come well within timeout_ms) and its caller's own deadline */
    int64_t idle = a->sink ? now_ms() + c->timeout_ms : deadline;
    if (a->sink)
        deadline = INT64_MAX;
    while (!a->complete) {
        ssize_t n = recv(c->fd, buf, sizeof(buf), 0);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            weft_status_t st = wait_fd(c, POLLIN, idle < deadline ? idle : deadline, "answer");
            if (st != WEFT_OK)
                return st;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            set_error(c, "receive from %s: %s", c->address, strerror(errno));
            return WEFT_ERR_PEER_LOST;
        }
        if (n == 0) {
            if (*got_any_p && llhttp_finish(&a->ll) == HPE_OK && a->complete)
                break;
            set_error(c, "%s closed the connection %s", c->address,
                      *got_any_p ? "in the middle of an answer" : "without answering");
            return WEFT_ERR_PEER_LOST;
        }
        *got_any_p = true;
        if (a->sink)
            idle = now_ms() + c->timeout_ms;
        llhttp_errno_t err = llhttp_execute(&a->ll, buf, (size_t)n);
        if (err == HPE_PAUSED)
            break; /* complete; anything after it would be an answer nobody asked for */
        if (err == HPE_USER && a->stopped) {
            set_error(c, "stopped by its caller");
            return WEFT_ERR_CANCELLED;
        }
        if (err != HPE_OK) {
            set_error(c, "malformed answer from %s: %s", c->address,
                      a->too_big ? "body too large" : llhttp_errno_name(err));
            return WEFT_ERR_PROTOCOL;
        }
    }
    return WEFT_OK;
}

/* A reused connection the server closed while idle reads as readable (EOF) before we send. */
static bool connection_stale(struct weft_client *c)
{
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    return poll(&p, 1, 0) != 0;
}

static weft_status_t exchange(struct weft_client *c, const char *method, const char *path,
                              const char *body, size_t body_len, struct answer *a)
{
    int (*sink)(void *, const char *, size_t) = a->sink;
    void *sink_arg = a->sink_arg;
    bool idempotent = strcmp(method, "POST") != 0;
    weft_status_t st = WEFT_OK;
    for (int attempt = 0; attempt < 2; attempt++) {
        bool reused = c->fd >= 0;
        if (reused && connection_stale(c)) {
            disconnect(c);
            reused = false;
        }
        if (c->fd < 0 && (st = open_connection(c)) != WEFT_OK)
            return st;
        int64_t deadline = now_ms() + c->timeout_ms;
        char head[2048], length[64] = "";
        if (body)
            snprintf(length, sizeof(length),
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n", body_len);
        char host[300]; /* RFC 9110 7.2: the port too; an IPv6 address in brackets */
        if (c->is_unix)
            snprintf(host, sizeof(host), "localhost");
        else
            snprintf(host, sizeof(host), "%s%s%s:%s", strchr(c->host, ':') ? "[" : "", c->host,
                     strchr(c->host, ':') ? "]" : "", c->port);
        int hn = snprintf(head, sizeof(head),
                          "%s %s HTTP/1.1\r\nHost: %s\r\n%sAccept: application/json, image/png, "
                          "text/event-stream\r\n%s\r\n",
                          method, path, host, c->auth, length);
        if (hn < 0 || (size_t)hn >= sizeof(head)) {
            set_error(c, "request line too long");
            return WEFT_ERR_INVALID;
        }
        *a = (struct answer){.sink = sink, .sink_arg = sink_arg};
        llhttp_settings_init(&a->settings);
        a->settings.on_status = on_status;
        a->settings.on_headers_complete = on_headers_complete;
        a->settings.on_body = on_body;
        a->settings.on_message_complete = on_message_complete;
        llhttp_init(&a->ll, HTTP_RESPONSE, &a->settings);
        a->ll.data = a;
        bool got_any = false;
        st = send_all(c, head, (size_t)hn, deadline);
        if (st == WEFT_OK && body)
            st = send_all(c, body, body_len, deadline);
        /* even when sending failed, the server may have answered (and closed): read it */
        weft_status_t rst = read_answer(c, a, deadline, &got_any);
        if (rst == WEFT_OK && a->complete) {
            if (!a->keep_alive)
                disconnect(c);
            c->http_status = a->status;
            return WEFT_OK;
        }
        if (st == WEFT_OK)
            st = rst;
        disconnect(c);
        weft_free(a->body);
        a->body = NULL;
        if (!(reused && !got_any && idempotent && st == WEFT_ERR_PEER_LOST))
            break;
    }
    return st;
}

weft_status_t weft_client_request(struct weft_client *c, const char *method, const char *path,
                                  const char *body, size_t body_len, int *http_status_p,
                                  char **answer_p, size_t *answer_len_p)
{
    c->error[0] = '\0';
    c->http_status = 0;
    struct answer a = {0};
    weft_status_t st = exchange(c, method, path, body, body_len, &a);
    if (st != WEFT_OK)
        return st;
    if (!a.body) {
        a.body = weft_malloc(1);
        if (!a.body) {
            set_error(c, "out of memory");
            return WEFT_ERR_NOMEM;
        }
        a.body[0] = '\0';
    }
    *http_status_p = a.status;
    if (answer_p)
        *answer_p = a.body;
    else
        weft_free(a.body);
    if (answer_len_p)
        *answer_len_p = a.len;
    return WEFT_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* The API                                                                                   */

static weft_status_t status_of(int code)
{
    switch (code) {
    case 400:
    case 405:
    case 411:
    case 415:
        return WEFT_ERR_INVALID;
    case 401:
    case 403:
        return WEFT_ERR_AUTH;
    case 404:
    case 410:
        return WEFT_ERR_NOT_FOUND;
    case 408:
        return WEFT_ERR_TIMEOUT;
    case 409:
        return WEFT_ERR_BUSY;
    case 413:
    case 414:
    case 431:
        return WEFT_ERR_RANGE;
    case 503:
        return WEFT_ERR_BUSY;
    default:
        return WEFT_ERR_PROTOCOL;
    }
}

/* A JSON answer expected with status want (or any 2xx when want is 0): parsed into *json_p. */
static weft_status_t call_json(struct weft_client *c, const char *method, const char *path,
                               const char *body, int want, cJSON **json_p)
{
    int code;
    char *text;
    size_t len;
    weft_status_t st = weft_client_request(c, method, path, body, body ? strlen(body) : 0, &code,
                                           &text, &len);
    if (st != WEFT_OK)
        return st;
    cJSON *json = weft_utf8_valid(text, len, NULL) ? cJSON_ParseWithLength(text, len) : NULL;
    bool ok = want ? code == want : code >= 200 && code < 300;
    if (!ok) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(json, "error");
        set_error(c, "%s %s: %d %s", method, path, code,
                  cJSON_IsString(e) ? e->valuestring : "(no error text)");
        st = status_of(code);
    } else if (!json) {
        set_error(c, "%s %s: the answer is not JSON", method, path);
        st = WEFT_ERR_PROTOCOL;
    }
    weft_free(text);
    if (st != WEFT_OK) {
        cJSON_Delete(json);
        return st;
    }
    *json_p = json;
    return WEFT_OK;
}

static bool id_ok(const char *id)
{
    size_t n = strlen(id);
    return n > 0 && n < WEFT_CLIENT_ID_MAX && strspn(id, "0123456789abcdef") == n;
}

weft_status_t weft_client_submit_json(struct weft_client *c, const char *json,
                                      char id[WEFT_CLIENT_ID_MAX])
{
    cJSON *ans;
    weft_status_t st = call_json(c, "POST", "/v1/jobs", json, 202, &ans);
    if (st != WEFT_OK)
        return st;
    const cJSON *jid = cJSON_GetObjectItemCaseSensitive(ans, "id");
    if (!cJSON_IsString(jid) || !id_ok(jid->valuestring)) {
        set_error(c, "POST /v1/jobs: the answer has no job id");
        cJSON_Delete(ans);
        return WEFT_ERR_PROTOCOL;
    }
    snprintf(id, WEFT_CLIENT_ID_MAX, "%s", jid->valuestring);
    cJSON_Delete(ans);
    return WEFT_OK;
}

static char *base64(const void *data, size_t len)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (len > (SIZE_MAX - 8) / 4 * 3)
        return NULL;
    const unsigned char *p = data;
    char *out = weft_malloc((len + 2) / 3 * 4 + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t w = (uint32_t)p[i] << 16;
        if (i + 1 < len)
            w |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < len)
            w |= p[i + 2];
        *o++ = tab[w >> 18 & 63];
        *o++ = tab[w >> 12 & 63];
        *o++ = i + 1 < len ? tab[w >> 6 & 63] : '=';
        *o++ = i + 2 < len ? tab[w & 63] : '=';
    }
    *o = '\0';
    return out;
}

/* A prompt as the job API takes it: text, {"safetensors"} or {"name"}; NULL without memory. */
static cJSON *prompt_json(const struct weft_prompt *p)
{
    if (p->text)
        return cJSON_CreateString(p->text);
    cJSON *item = cJSON_CreateObject();
    if (!item)
        return NULL;
    if (p->safetensors) {
        char *b = base64(p->safetensors, p->safetensors_len);
        if (!b || !cJSON_AddStringToObject(item, "safetensors", b)) {
            cJSON_Delete(item);
            item = NULL;
        }
        weft_free(b);
    } else if (!cJSON_AddStringToObject(item, "name", p->name ? p->name : "")) {
        /* precomputed embeddings by name: the object, never mistaken for text */
        cJSON_Delete(item);
        item = NULL;
    }
    return item;
}

static cJSON *request_json(const struct weft_job_request *req)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *ps = cJSON_AddArrayToObject(o, "prompts");
    if (!ps)
        goto err;
    for (size_t i = 0; i < req->n_prompts; i++) {
        cJSON *item = prompt_json(&req->prompts[i]);
        if (!item)
            goto err;
        cJSON_AddItemToArray(ps, item);
    }
    if (req->negative_prompt) { /* true CFG: one negative prompt for every prompt */
        cJSON *item = prompt_json(req->negative_prompt);
        if (!item)
            goto err;
        cJSON_AddItemToObject(o, "negative_prompt", item);
    }
    char seed[24];
    snprintf(seed, sizeof(seed), "%llu", (unsigned long long)req->seed);
    if (req->seed_random)
        snprintf(seed, sizeof(seed), "-1");
    if ((req->height && !cJSON_AddNumberToObject(o, "height", (double)req->height)) ||
        (req->width && !cJSON_AddNumberToObject(o, "width", (double)req->width)) ||
        (req->steps && !cJSON_AddNumberToObject(o, "steps", (double)req->steps)) ||
        (req->count && !cJSON_AddNumberToObject(o, "count", (double)req->count)) ||
        (req->guidance > 0 && !cJSON_AddNumberToObject(o, "guidance", req->guidance)) ||
        (req->max_sequence_length &&
         !cJSON_AddNumberToObject(o, "max_sequence_length", (double)req->max_sequence_length)) ||
        (req->true_cfg_scale > 0 &&
         !cJSON_AddNumberToObject(o, "true_cfg_scale", req->true_cfg_scale)) ||
        !cJSON_AddStringToObject(o, "seed", seed))
        goto err;
    return o;
err:
    cJSON_Delete(o);
    return NULL;
}

weft_status_t weft_client_submit(struct weft_client *c, const struct weft_job_request *req,
                                 char id[WEFT_CLIENT_ID_MAX])
{
    c->error[0] = '\0';
    cJSON *o = request_json(req);
    char *text = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!text) {
        set_error(c, "out of memory building the request");
        return WEFT_ERR_NOMEM;
    }
    weft_status_t st = weft_client_submit_json(c, text, id);
    cJSON_free(text);
    return st;
}

static int json_int(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) && fabs(v->valuedouble) < 2e9 ? (int)v->valuedouble : 0;
}

static weft_status_t parse_status(struct weft_client *c, const cJSON *o,
                                  struct weft_job_status *st)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "id");
    const cJSON *state = cJSON_GetObjectItemCaseSensitive(o, "state");
    if (!cJSON_IsString(id) || !cJSON_IsString(state)) {
        set_error(c, "job status without id or state");
        return WEFT_ERR_PROTOCOL;
    }
    snprintf(st->id, sizeof(st->id), "%s", id->valuestring);
    int s;
    for (s = 0; s <= WEFT_JOB_CANCELLED; s++)
        if (strcmp(state->valuestring, weft_client_state_name((enum weft_job_state)s)) == 0)
            break;
    if (s > WEFT_JOB_CANCELLED) {
        set_error(c, "unknown job state '%s'", state->valuestring);
        return WEFT_ERR_PROTOCOL;
    }
    st->state = (enum weft_job_state)s;
    st->queue_position = json_int(o, "queue_position");
    st->attempts = json_int(o, "attempts");
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(o, "error");
    if (cJSON_IsString(err))
        snprintf(st->error, sizeof(st->error), "%s", err->valuestring);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "progress");
    st->step = json_int(p, "step");
    st->steps = json_int(p, "steps");
    st->images_done = json_int(p, "images_done");
    st->images_total = json_int(p, "images");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(p, "fraction");
    st->fraction = cJSON_IsNumber(f) ? f->valuedouble : 0;
    const cJSON *el = cJSON_GetObjectItemCaseSensitive(p, "elapsed");
    const cJSON *eta = cJSON_GetObjectItemCaseSensitive(p, "eta");
    st->elapsed = cJSON_IsNumber(el) ? el->valuedouble : -1;
    st->eta = cJSON_IsNumber(eta) ? eta->valuedouble : -1;
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(o, "request");
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(req, "seed");
    if (cJSON_IsString(seed))
        snprintf(st->seed, sizeof(st->seed), "%s", seed->valuestring);
    const cJSON *imgs = cJSON_GetObjectItemCaseSensitive(o, "images");
    int n = cJSON_IsArray(imgs) ? cJSON_GetArraySize(imgs) : 0;
    if (n > 0) {
        st->images = weft_calloc((size_t)n, sizeof(*st->images));
        if (!st->images) {
            set_error(c, "out of memory");
            return WEFT_ERR_NOMEM;
        }
    }
    for (const cJSON *im = imgs ? imgs->child : NULL; im && st->n_images < (size_t)n;
         im = im->next) {
        struct weft_job_image *d = &st->images[st->n_images++];
        d->index = json_int(im, "index");
        d->prompt = json_int(im, "prompt");
        d->width = json_int(im, "width");
        d->height = json_int(im, "height");
    }
    return WEFT_OK;
}

void weft_job_status_cleanup(struct weft_job_status *st)
{
    weft_free(st->images);
    memset(st, 0, sizeof(*st));
}

weft_status_t weft_client_status(struct weft_client *c, const char *id,
                                 struct weft_job_status *st)
{
    weft_job_status_cleanup(st);
    if (!id_ok(id)) {
        set_error(c, "'%s' is not a job id", id);
        return WEFT_ERR_INVALID;
    }
    char path[96];
    snprintf(path, sizeof(path), "/v1/jobs/%s", id);
    cJSON *o;
    weft_status_t s = call_json(c, "GET", path, NULL, 200, &o);
    if (s != WEFT_OK)
        return s;
    s = parse_status(c, o, st);
    cJSON_Delete(o);
    return s;
}

weft_status_t weft_client_wait(struct weft_client *c, const char *id, int timeout_ms,
                               weft_client_progress_cb cb, void *arg,
                               struct weft_job_status *st)
{
    int64_t deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    int poll_ms = 20;
    int last_step = -1, last_images = -1, last_state = -1, last_queue = -1;
    for (;;) {
        weft_status_t s = weft_client_status(c, id, st);
        if (s != WEFT_OK)
            return s;
        bool changed = st->step != last_step || st->images_done != last_images ||
                       (int)st->state != last_state || st->queue_position != last_queue;
        if (cb && changed && cb(arg, st) != 0) {
            set_error(c, "wait for job %s stopped by its caller", id);
            return WEFT_ERR_CANCELLED;
        }
        if (st->state == WEFT_JOB_DONE || st->state == WEFT_JOB_FAILED ||
            st->state == WEFT_JOB_CANCELLED)
            return WEFT_OK;
        last_step = st->step;
        last_images = st->images_done;
        last_state = (int)st->state;
        last_queue = st->queue_position;
        int64_t left = deadline - now_ms();
        if (left <= 0) {
            set_error(c, "job %s is still %s after %d ms", id, weft_client_state_name(st->state),
                      timeout_ms);
            return WEFT_ERR_TIMEOUT;
        }
        /* quick while it moves, slower while it waits */
        poll_ms = changed ? 20 : poll_ms * 2 > 250 ? 250 : poll_ms * 2;
        int64_t nap = poll_ms < left ? poll_ms : left;
        struct timespec ts = {nap / 1000, (long)(nap % 1000) * 1000000};
        nanosleep(&ts, NULL);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Following a job's event stream                                                           */

#define SSE_MAX_EVENT (4u << 20)

struct follow {
    struct weft_client *c;
    struct weft_job_status *st;
    weft_client_progress_cb cb;
    void *arg;
    char *buf; /* the event being read: lines up to a blank one */
    size_t len, cap;
    bool ended, failed, stopped;
    int64_t deadline;
};

/* "progress": the numbers of a running job, without the rest of its description. */
static void apply_progress(struct weft_job_status *st, const cJSON *p)
{
    st->step = json_int(p, "step");
    st->steps = json_int(p, "steps");
    st->images_done = json_int(p, "images_done");
    st->images_total = json_int(p, "images");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(p, "fraction");
    const cJSON *el = cJSON_GetObjectItemCaseSensitive(p, "elapsed");
    const cJSON *eta = cJSON_GetObjectItemCaseSensitive(p, "eta");
    st->fraction = cJSON_IsNumber(f) ? f->valuedouble : st->fraction;
    st->elapsed = cJSON_IsNumber(el) ? el->valuedouble : -1;
    st->eta = cJSON_IsNumber(eta) ? eta->valuedouble : -1;
    st->state = WEFT_JOB_RUNNING;
}

/* One event: "event: NAME" and "data: ..." lines (others ignored). */
static void follow_event(struct follow *f, char *ev)
{
    char name[32] = "message";
    const char *data = NULL;
    for (char *line = ev, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        if (strncmp(line, "event:", 6) == 0)
            snprintf(name, sizeof(name), "%s", line + 6 + (line[6] == ' '));
        else if (strncmp(line, "data:", 5) == 0)
            data = line + 5 + (line[5] == ' ');
    }
    if (!data)
        return; /* a comment (keep-alive) or "retry:" */
    cJSON *o = cJSON_Parse(data);
    if (!o)
        return;
    bool changed = true;
    if (strcmp(name, "progress") == 0) {
        apply_progress(f->st, o);
    } else if (strcmp(name, "state") == 0 || strcmp(name, "end") == 0) {
        weft_job_status_cleanup(f->st);
        if (parse_status(f->c, o, f->st) != WEFT_OK)
            f->failed = true;
        f->ended = strcmp(name, "end") == 0;
    } else {
        changed = false; /* "image": the end lists them all */
    }
    cJSON_Delete(o);
    if (changed && f->cb && !f->failed && f->cb(f->arg, f->st) != 0)
        f->stopped = true;
}

static int follow_sink(void *arg, const char *data, size_t n)
{
    struct follow *f = arg;
    for (size_t i = 0; i < n; i++) {
        if (f->len + 2 > f->cap) {
            size_t cap = f->cap ? f->cap * 2 : 4096;
            char *b = cap <= SSE_MAX_EVENT ? weft_realloc(f->buf, cap) : NULL;
            if (!b) {
                f->failed = true;
                return 1;
            }
            f->buf = b;
            f->cap = cap;
        }
        char ch = data[i];
        if (ch == '\r')
            continue;
        f->buf[f->len++] = ch;
        if (ch == '\n' && f->len >= 2 && f->buf[f->len - 2] == '\n') { /* a blank line */
            f->buf[f->len] = '\0';
            follow_event(f, f->buf);
            f->len = 0;
            if (f->failed || f->stopped)
                return 1; /* after the end, the stream's own end follows: read it */
        }
    }
    return now_ms() > f->deadline;
}

weft_status_t weft_client_follow(struct weft_client *c, const char *id, int timeout_ms,
                                 weft_client_progress_cb cb, void *arg,
                                 struct weft_job_status *st)
{
    weft_job_status_cleanup(st);
    if (!id_ok(id)) {
        set_error(c, "'%s' is not a job id", id);
        return WEFT_ERR_INVALID;
    }
    char path[96];
    snprintf(path, sizeof(path), "/v1/jobs/%s/events", id);
    struct follow f = {.c = c, .st = st, .cb = cb, .arg = arg,
                       .deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 0)};
    c->error[0] = '\0';
    struct answer a = {.sink = follow_sink, .sink_arg = &f};
    weft_status_t s = exchange(c, "GET", path, NULL, 0, &a);
    int code = a.status;
    if (s == WEFT_OK && code != 200 && code != 0 && !f.ended) {
        cJSON *e = a.body ? cJSON_ParseWithLength(a.body, a.len) : NULL;
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(e, "error");
        bool no_job = cJSON_IsString(msg) && strncmp(msg->valuestring, "no job", 6) == 0;
        set_error(c, "GET %s: %d %s", path, code,
                  cJSON_IsString(msg) ? msg->valuestring : "(no error text)");
        cJSON_Delete(e);
        weft_free(a.body);
        weft_free(f.buf);
        if (code == 404 && !no_job) /* a server without event streams: poll it */
            return weft_client_wait(c, id, timeout_ms, cb, arg, st);
        return status_of(code);
    }
    weft_free(a.body);
    weft_free(f.buf);
    if (f.stopped) { /* the answer was cut short: this connection cannot carry another */
        disconnect(c);
        set_error(c, "wait for job %s stopped by its caller", id);
        return WEFT_ERR_CANCELLED;
    }
    if (f.failed) {
        disconnect(c);
        if (!c->error[0])
            set_error(c, "GET %s: an event the client cannot read", path);
        return WEFT_ERR_PROTOCOL;
    }
    if (f.ended)
        return WEFT_OK;
    disconnect(c);
    if (s == WEFT_OK || s == WEFT_ERR_CANCELLED) { /* ended without an end, or the deadline */
        if (now_ms() >= f.deadline) {
            set_error(c, "job %s is still %s after %d ms", id, weft_client_state_name(st->state),
                      timeout_ms);
            return WEFT_ERR_TIMEOUT;
        }
        set_error(c, "the event stream of job %s ended before the job did", id);
        return WEFT_ERR_PEER_LOST;
    }
    return s;
}

weft_status_t weft_client_image(struct weft_client *c, const char *id, int i, void **png_p,
                                size_t *len_p)
{
    if (!id_ok(id) || i < 0) {
        set_error(c, "bad job id or image index");
        return WEFT_ERR_INVALID;
    }
    char path[128];
    snprintf(path, sizeof(path), "/v1/jobs/%s/images/%d", id, i);
    int code;
    char *body;
    size_t len;
    weft_status_t st = weft_client_request(c, "GET", path, NULL, 0, &code, &body, &len);
    if (st != WEFT_OK)
        return st;
    if (code != 200) {
        cJSON *json = cJSON_ParseWithLength(body, len);
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(json, "error");
        set_error(c, "GET %s: %d %s", path, code,
                  cJSON_IsString(e) ? e->valuestring : "(no error text)");
        cJSON_Delete(json);
        weft_free(body);
        return status_of(code);
    }
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (len < 8 || memcmp(body, sig, 8) != 0) {
        set_error(c, "GET %s: the answer is not a PNG", path);
        weft_free(body);
        return WEFT_ERR_PROTOCOL;
    }
    *png_p = body;
    *len_p = len;
    return WEFT_OK;
}

weft_status_t weft_client_image_save(struct weft_client *c, const char *id, int i,
                                     const char *path)
{
    void *png = NULL;
    size_t len = 0;
    weft_status_t st = weft_client_image(c, id, i, &png, &len);
    if (st != WEFT_OK)
        return st;
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.part", path);
    FILE *f = fopen(tmp, "wb");
    bool ok = f && fwrite(png, 1, len, f) == len;
    if (f && fclose(f) != 0)
        ok = false;
    if (ok && rename(tmp, path) != 0)
        ok = false;
    if (!ok) {
        set_error(c, "%s: cannot write: %s", path, strerror(errno));
        (void)remove(tmp);
        st = WEFT_ERR_IO;
    }
    weft_free(png);
    return st;
}

weft_status_t weft_client_cancel(struct weft_client *c, const char *id)
{
    if (!id_ok(id)) {
        set_error(c, "'%s' is not a job id", id);
        return WEFT_ERR_INVALID;
    }
    char path[96];
    snprintf(path, sizeof(path), "/v1/jobs/%s", id);
    cJSON *o;
    weft_status_t st = call_json(c, "DELETE", path, NULL, 0, &o);
    cJSON_Delete(st == WEFT_OK ? o : NULL);
    return st;
}

weft_status_t weft_client_default_prompt(struct weft_client *c, char *name, size_t len)
{
    cJSON *o;
    weft_status_t st = call_json(c, "GET", "/v1/cluster", NULL, 200, &o);
    if (st != WEFT_OK)
        return st;
    const cJSON *co = cJSON_GetObjectItemCaseSensitive(o, "coordinator");
    const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(co, "prompts"), 0);
    if (cJSON_IsString(first) && strlen(first->valuestring) < len) {
        snprintf(name, len, "%s", first->valuestring);
    } else {
        set_error(c, "the server's model has no prompts/ folder to take a default from");
        st = WEFT_ERR_NOT_FOUND;
    }
    cJSON_Delete(o);
    return st;
}

weft_status_t weft_client_cluster(struct weft_client *c, char **json_p)
{
    cJSON *o;
    weft_status_t st = call_json(c, "GET", "/v1/cluster", NULL, 200, &o);
    if (st != WEFT_OK)
        return st;
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    char *copy = text ? weft_strdup(text) : NULL;
    cJSON_free(text);
    if (!copy) {
        set_error(c, "out of memory");
        return WEFT_ERR_NOMEM;
    }
    *json_p = copy;
    return WEFT_OK;
}
