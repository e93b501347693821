/* Control-plane links (link.h): a UCX worker with active messages, one endpoint per remote
 * process shared by the links to it, frames validated on receipt, per-link failure and
 * heartbeats.
 *
 * Endpoints: UCX 1.13 pairs the endpoints two workers create to each other by creation order
 * (ucp_ep_match: the k-th endpoint A makes to B is wired to the k-th one B makes to A), so with
 * an endpoint per link, two links between the same processes could end up on each other's
 * connection and closing one would break the other (tests/integration/test_link.c twin did, one
 * run in five). So a host keeps one endpoint per remote worker address (struct peer): a link's
 * two directions are our endpoint to the peer and the peer's endpoint to us, UCX pairs the two,
 * and a link closes with a goodbye frame, never by closing the endpoint. An endpoint is closed
 * when it fails (every link on it goes down: they share the process) or with the host.
 *
 * UCX's callbacks (active message, send/receive/flush completion, endpoint error) only record
 * what happened; everything that calls the user, creates or closes an endpoint runs afterwards in
 * links_step(), outside ucp_worker_progress(). So a user callback may send, connect or close
 * freely, and no memory goes away under UCX: a link or peer is freed only once no UCX request
 * points at it (refs).
 *
 * Order: UCX delivers the active messages of one endpoint in the order they were sent (one AM
 * lane; checked by the sequence number in every frame). A large message arrives as a rendezvous
 * announcement whose data is fetched afterwards; later messages wait behind it in the link's
 * receive queue, so the user sees them in order.
 *
 * The descriptor handed out is an epoll set of UCX's event descriptor, a timerfd (heartbeats,
 * close deadlines) and an eventfd we write when work is left for the next progress (a send
 * made outside progress, or a progress that stopped before UCX was idle). */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "transport/internal.h"
#include "transport/link.h"

#define AM_ID 1 /* UCX sizes its handler table by the largest id */
#define HDR_LEN 40
#define MAGIC 0x4b4c4657u /* "WFLK" little endian */
#define VERSION 1
#define FLAG_CONNECTOR 0x1u
#define ADDR_MAX 65536           /* a hello's worker address */
#define RX_BIG ((size_t)1 << 20) /* buffers from here on are huge-page mappings */
#define CLOSE_WAIT_MS 1000       /* a closing link's wire-up, host_destroy's goodbyes */
#define TIMEOUT_DEFAULT_MS 10000
#define TIMEOUT_MIN_MS 20
#define TICK_IDLE_MS 1000 /* timer period with heartbeats off: close deadlines */
#define PROGRESS_MAX 64   /* ucp_worker_progress calls per round */
#define ROUNDS_MAX 16     /* progress/deliver rounds per call before yielding */
#define JUNK_LOG_MAX 10   /* unattributable frames logged one by one */

enum frame_kind { KIND_HELLO = 1, KIND_MSG, KIND_BEAT, KIND_BYE, KIND_END };
enum ep_state { EP_WIRING, EP_UP, EP_DOWN };
enum fd_tag { FD_UCX, FD_TIMER, FD_KICK };

struct frame {
    uint8_t kind, flags;
    uint16_t type;
    uint32_t seq;
    uint64_t conn_host;
    uint32_t conn_id;
    uint64_t len;
};

/* A frame from weft_link_send to UCX's completion; the header and payload live here. */
struct tx {
    struct tx *next, *prev;
    struct weft_link *link;
    size_t len;
    uint32_t flags; /* UCX send flags */
    uint8_t hdr[HDR_LEN];
    unsigned char data[];
};

/* A received message waiting for its turn (and, for rendezvous, its data). */
struct rx {
    struct rx *next;
    struct weft_link *link;
    uint16_t type;
    size_t len;
    const void *data;
    void *desc; /* UCX's eager data, held until delivered */
    void *buf;  /* rendezvous target or copy */
    void *req;  /* rendezvous receive in flight */
    bool big;   /* buf is a huge-page mapping */
    bool bye;   /* the peer's goodbye: the link goes down when it is reached */
    bool ready;
};

/* A remote worker and our endpoint to it. */
struct peer {
    struct weft_link_host *host;
    struct peer *next;
    void *addr; /* its worker address: the key */
    size_t addr_len;
    ucp_ep_h ep; /* NULL once closed */
    enum ep_state state;
    weft_status_t failure;
    unsigned refs; /* links attached and UCX requests pointing here */
    void *close_req;    /* our endpoint close while UCX runs it */
    bool close_dropped; /* given back to UCX unfinished (teardown): its callback must not free */
};

struct weft_link {
    struct weft_link_host *host;
    struct weft_link *next;
    struct peer *peer;  /* NULL until an accepted link is attached */
    uint64_t conn_host; /* the connection's name: the connecting host and its serial */
    uint32_t conn_id;
    bool connector;
    bool down;
    weft_status_t why;
    bool accepting; /* accepted: attach and accept callback still to come */
    bool down_told;
    bool closed;
    bool got_bye;  /* frames after the peer's goodbye are ignored */
    bool bye_sent; /* ours is queued or gone */
    bool warned_no_cb;
    void *peer_addr; /* accepted: the hello's address until attached */
    size_t peer_addr_len;
    weft_link_msg_cb on_msg;
    weft_link_down_cb on_down;
    void *arg;
    uint32_t tx_seq, rx_seq;
    struct tx *q_head, *q_tail; /* not yet given to UCX (the endpoint is wiring up) */
    struct tx *inflight;        /* given to UCX, not completed */
    size_t tx_bytes;            /* payload queued or in flight */
    unsigned refs;              /* UCX requests whose callbacks point here */
    uint64_t flush_issued, flush_done;
    struct rx *rx_head, *rx_tail;
    int64_t last_rx_ns, last_tx_ns, close_by_ns;
};

struct weft_link_host {
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_address_t *addr;
    size_t addr_len;
    int ucx_fd, epfd, timer_fd, kick_fd;
    bool kicked;
    bool busy; /* inside progress: callbacks may be running */
    bool destroying;
    uint64_t id;
    uint32_t next_conn;
    weft_link_accept_cb on_accept;
    void *arg;
    int timeout_ms;
    int64_t tick_ns, next_tick_ns;
    unsigned long junk;
    struct weft_link *links;
    struct peer *peers;
};

/* ---- wire format ------------------------------------------------------------------------ */

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    put16(p, (uint16_t)v);
    put16(p + 2, (uint16_t)(v >> 16));
}

static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)get16(p) | (uint32_t)get16(p + 2) << 16;
}

static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static void frame_encode(uint8_t *h, const struct frame *f)
{
    memset(h, 0, HDR_LEN);
    put32(h, MAGIC);
    h[4] = VERSION;
    h[5] = f->kind;
    h[6] = f->flags;
    put16(h + 8, f->type);
    put32(h + 12, f->seq);
    put64(h + 16, f->conn_host);
    put32(h + 24, f->conn_id);
    put64(h + 32, f->len);
}

/* NULL when the header names a connection; else why it does not. */
static const char *frame_decode(const void *header, size_t n, struct frame *f)
{
    const uint8_t *h = header;
    if (n != HDR_LEN)
        return "wrong header size";
    if (get32(h) != MAGIC)
        return "bad magic";
    if (h[4] != VERSION)
        return "unknown version";
    f->kind = h[5];
    f->flags = h[6];
    f->type = get16(h + 8);
    f->seq = get32(h + 12);
    f->conn_host = get64(h + 16);
    f->conn_id = get32(h + 24);
    f->len = get64(h + 32);
    if (h[7] || get16(h + 10) || get32(h + 28))
        return "reserved bytes set";
    return NULL;
}

/* ---- small helpers ---------------------------------------------------------------------- */

static void kick(struct weft_link_host *h)
{
    if (h->kicked)
        return;
    uint64_t one = 1;
    if (write(h->kick_fd, &one, sizeof(one)) == (ssize_t)sizeof(one))
        h->kicked = true;
}

static void link_log_down(const struct weft_link *l, weft_status_t why, const char *cause)
{
    if (l->closed || l->got_bye || l->host->destroying)
        return; /* expected: nobody needs to hear about it */
    if (why == WEFT_ERR_PROTOCOL)
        WEFT_LOG_ERROR("link", "link %016llx:%u: malformed frame from the peer (%s): closed",
                       (unsigned long long)l->conn_host, l->conn_id, cause);
    else
        WEFT_LOG_WARN("link", "link %016llx:%u down: %s (%s)", (unsigned long long)l->conn_host,
                      l->conn_id, weft_status_str(why), cause);
}

static void tx_free(struct tx *t)
{
    t->link->tx_bytes -= t->len;
    if (t->len >= RX_BIG)
        weft_big_free(t, sizeof(*t) + t->len);
    else
        weft_free(t);
}

static void queue_drop(struct weft_link *l)
{
    while (l->q_head) {
        struct tx *t = l->q_head;
        l->q_head = t->next;
        tx_free(t);
    }
    l->q_tail = NULL;
}

static void rx_free(struct weft_link_host *h, struct rx *r)
{
    if (r->desc)
        ucp_am_data_release(h->worker, r->desc);
    if (r->buf) {
        if (r->big)
            weft_big_free(r->buf, r->len);
        else
            weft_free(r->buf);
    }
    weft_free(r);
}

/* Drop the messages not delivered; rendezvous receives in flight stay (their callbacks own
 * them) and are freed with the link. */
static void rx_discard(struct weft_link *l)
{
    struct rx **pp = &l->rx_head, *last = NULL;
    while (*pp) {
        struct rx *r = *pp;
        if (r->req) {
            last = r;
            pp = &r->next;
            continue;
        }
        *pp = r->next;
        rx_free(l->host, r);
    }
    l->rx_tail = last;
}

/* The link is down for good (first cause wins). May run inside UCX's callbacks: it touches only
 * our own memory; the rest happens in links_step(). */
static void link_set_down(struct weft_link *l, weft_status_t why)
{
    if (l->down)
        return;
    l->down = true;
    l->why = why;
    queue_drop(l);
}

static void link_fail(struct weft_link *l, weft_status_t why, const char *cause)
{
    if (!l->down)
        link_log_down(l, why, cause);
    link_set_down(l, why);
}

/* UCX 1.13's tcp transport reports every broken connection as "Endpoint timeout", whether the
 * peer died at once or went away, so that is the peer lost; silence is our heartbeat's business
 * (WEFT_ERR_TIMEOUT). */
static weft_status_t ucs_why(ucs_status_t s)
{
    weft_status_t why = weft_tp_ucs_status(s);
    return why == WEFT_ERR_TIMEOUT || why == WEFT_ERR_IO || why == WEFT_ERR_CANCELLED
               ? WEFT_ERR_PEER_LOST
               : why;
}

/* A UCX failure on one of the link's requests. */
static void link_fail_ucs(struct weft_link *l, const char *what, ucs_status_t s)
{
    char cause[128];
    snprintf(cause, sizeof(cause), "%s: UCX: %s", what, ucs_status_string(s));
    link_fail(l, ucs_why(s), cause);
}

/* The remote process is gone or silent: every link to it goes down (they share its fate), and
 * the endpoint is closed by peers_step(). */
static void peer_fail(struct peer *p, weft_status_t why, const char *cause)
{
    if (p->state == EP_DOWN)
        return;
    p->state = EP_DOWN;
    p->failure = why;
    for (struct weft_link *l = p->host->links; l; l = l->next)
        if (l->peer == p)
            link_fail(l, why, cause);
}

static void peer_fail_ucs(struct peer *p, const char *what, ucs_status_t s)
{
    char cause[128];
    snprintf(cause, sizeof(cause), "%s: UCX: %s", what, ucs_status_string(s));
    peer_fail(p, ucs_why(s), cause);
}

/* ---- UCX callbacks ------------------------------------------------------------------------ */

static void ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t s)
{
    (void)ep;
    peer_fail_ucs(arg, "endpoint failed", s);
}

static void send_done(void *req, ucs_status_t s, void *user_data)
{
    struct tx *t = user_data;
    struct weft_link *l = t->link;
    ucp_request_free(req);
    if (t->prev)
        t->prev->next = t->next;
    else
        l->inflight = t->next;
    if (t->next)
        t->next->prev = t->prev;
    l->refs--;
    if (s != UCS_OK)
        link_fail_ucs(l, "send", s);
    tx_free(t);
}

static void wired_done(void *req, ucs_status_t s, void *user_data)
{
    struct peer *p = user_data;
    ucp_request_free(req);
    p->refs--;
    if (s != UCS_OK)
        peer_fail_ucs(p, "connecting", s);
    else if (p->state == EP_WIRING)
        p->state = EP_UP;
}

static void flushed(void *req, ucs_status_t s, void *user_data)
{
    struct weft_link *l = user_data;
    ucp_request_free(req);
    l->refs--;
    l->flush_done++;
    if (s != UCS_OK)
        link_fail_ucs(l, "flush", s);
}

static void closed_done(void *req, ucs_status_t s, void *user_data)
{
    (void)s;
    struct peer *p = user_data;
    if (!p->close_dropped)
        ucp_request_free(req);
    p->close_req = NULL;
    p->refs--;
}

static void recv_done(void *req, ucs_status_t s, size_t length, void *user_data)
{
    struct rx *r = user_data;
    struct weft_link *l = r->link;
    ucp_request_free(req);
    r->req = NULL;
    l->refs--;
    if (s != UCS_OK) {
        link_fail_ucs(l, "receiving a large message", s);
    } else if (length != r->len) {
        link_fail(l, WEFT_ERR_PROTOCOL, "large message of the wrong size");
    } else {
        r->ready = true;
        l->last_rx_ns = weft_tp_now_ns();
    }
}

/* ---- endpoints ---------------------------------------------------------------------------- */

/* The endpoint to the worker at addr: the one we have, or a new one. A new one starts its
 * wire-up with a flush, as UCX 1.13 may fail a send made before wire-up finished
 * (openucx/ucx#6872, reference/environment.md); frames queue in their links until then. */
static weft_status_t peer_get(struct weft_link_host *h, const void *addr, size_t len,
                              struct peer **p_p)
{
    struct peer **pp = &h->peers;
    for (; *pp; pp = &(*pp)->next) {
        struct peer *p = *pp;
        if (p->state != EP_DOWN && p->addr_len == len && memcmp(p->addr, addr, len) == 0) {
            *p_p = p;
            return WEFT_OK;
        }
    }
    struct peer *p = weft_calloc(1, sizeof(*p));
    if (!p || !(p->addr = weft_malloc(len))) {
        weft_free(p);
        WEFT_LOG_ERROR("link", "no memory for an endpoint");
        return WEFT_ERR_NOMEM;
    }
    memcpy(p->addr, addr, len);
    p->addr_len = len;
    p->host = h;
    ucp_ep_params_t ep = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address = addr,
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = ep_err_cb, .arg = p},
    };
    ucs_status_t s = ucp_ep_create(h->worker, &ep, &p->ep);
    if (s != UCS_OK) {
        WEFT_LOG_ERROR("link", "endpoint to the peer: UCX: %s", ucs_status_string(s));
        weft_free(p->addr);
        weft_free(p);
        weft_status_t st = weft_tp_ucs_status(s);
        return st < 0 ? st : WEFT_ERR_INTERNAL;
    }
    *pp = p;
    ucp_request_param_t fp = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send = wired_done,
        .user_data = p,
    };
    ucs_status_ptr_t q = ucp_ep_flush_nbx(p->ep, &fp);
    if (UCS_PTR_IS_ERR(q)) {
        WEFT_LOG_ERROR("link", "endpoint to the peer: flush: UCX: %s",
                       ucs_status_string(UCS_PTR_STATUS(q)));
        p->state = EP_DOWN;
        p->failure = ucs_why(UCS_PTR_STATUS(q));
    } else if (q) {
        p->refs++;
    } else {
        p->state = EP_UP;
    }
    *p_p = p;
    return WEFT_OK;
}

static void link_attach(struct weft_link *l, struct peer *p)
{
    l->peer = p;
    p->refs++;
    if (p->state == EP_DOWN)
        link_fail(l, p->failure, "connecting");
}

/* Force: drop what is in flight (the peer failed, or the host goes and waited enough). */
static void peer_close(struct peer *p, bool force)
{
    if (!p->ep)
        return;
    ucp_request_param_t cp = {
        .op_attr_mask =
            UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS,
        .flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0,
        .cb.send = closed_done,
        .user_data = p,
    };
    ucs_status_ptr_t q = ucp_ep_close_nbx(p->ep, &cp);
    p->ep = NULL;
    if (p->state != EP_DOWN) { /* no link may attach to it any more */
        p->state = EP_DOWN;
        p->failure = WEFT_ERR_PEER_LOST;
    }
    if (q && !UCS_PTR_IS_ERR(q)) {
        p->refs++;
        p->close_req = q;
    }
}

/* Close the endpoints that failed (outside UCX's callbacks, as UCX asks). */
static unsigned peers_step(struct weft_link_host *h)
{
    unsigned n = 0;
    for (struct peer *p = h->peers; p; p = p->next) {
        if (p->state == EP_DOWN && p->ep) {
            peer_close(p, true);
            n++;
        }
    }
    return n;
}

/* ---- receiving ---------------------------------------------------------------------------- */

static struct weft_link *link_find(struct weft_link_host *h, const struct frame *f)
{
    bool connector = !(f->flags & FLAG_CONNECTOR); /* our role on the link */
    for (struct weft_link *l = h->links; l; l = l->next)
        if (l->conn_id == f->conn_id && l->conn_host == f->conn_host && l->connector == connector)
            return l;
    return NULL;
}

static struct weft_link *link_new(struct weft_link_host *h, bool connector, uint64_t conn_host,
                                  uint32_t conn_id)
{
    struct weft_link *l = weft_calloc(1, sizeof(*l));
    if (!l)
        return NULL;
    l->host = h;
    l->connector = connector;
    l->conn_host = conn_host;
    l->conn_id = conn_id;
    l->last_rx_ns = l->last_tx_ns = weft_tp_now_ns();
    struct weft_link **pp = &h->links;
    while (*pp)
        pp = &(*pp)->next;
    *pp = l;
    return l;
}

/* A frame we cannot attribute to a link: nothing to close, so only say so (rate-limited). */
static void junk(struct weft_link_host *h, const char *why)
{
    if (h->junk++ < JUNK_LOG_MAX || h->junk % 1000 == 0)
        WEFT_LOG_WARN("link", "dropped a frame that names no link of ours (%s; %lu so far)", why,
                      h->junk);
}

static void hello(struct weft_link_host *h, const struct frame *f, const void *data, size_t length,
                  bool rndv)
{
    if (!(f->flags & FLAG_CONNECTOR) || f->seq != 0 || rndv || f->len != length || length == 0 ||
        length > ADDR_MAX) {
        junk(h, "malformed hello");
        return;
    }
    struct weft_link *l = link_new(h, false, f->conn_host, f->conn_id);
    if (!l || !(l->peer_addr = weft_malloc(length))) {
        WEFT_LOG_ERROR("link", "out of memory accepting a link");
        if (l)
            l->closed = true; /* freed by the next sweep */
        return;
    }
    memcpy(l->peer_addr, data, length);
    l->peer_addr_len = length;
    l->accepting = true;
    l->rx_seq = 1;
}

/* What is wrong with a frame on a known link, or NULL. */
static const char *frame_check(const struct weft_link *l, const struct frame *f, size_t length)
{
    if (f->kind == KIND_HELLO)
        return "second hello";
    if (f->kind >= KIND_END || f->kind == 0)
        return "unknown kind";
    if (f->flags & ~FLAG_CONNECTOR)
        return "unknown flags";
    if (f->seq != l->rx_seq)
        return "out of sequence";
    if (f->len != length)
        return "length differs from the payload";
    if (f->len > WEFT_LINK_MSG_MAX)
        return "message too large";
    if (f->kind != KIND_MSG && f->len)
        return "control frame with a payload";
    return NULL;
}

static void rx_append(struct weft_link *l, struct rx *r)
{
    r->link = l;
    if (l->rx_tail)
        l->rx_tail->next = r;
    else
        l->rx_head = r;
    l->rx_tail = r;
}

/* Start fetching a rendezvous message into a buffer of our own. */
static void rx_rndv(struct weft_link *l, struct rx *r, void *desc)
{
    struct weft_link_host *h = l->host;
    r->big = r->len >= RX_BIG;
    r->buf = r->big ? weft_big_alloc(r->len) : weft_malloc(r->len);
    if (!r->buf) {
        link_fail(l, WEFT_ERR_NOMEM, "no memory for a large message");
        return;
    }
    r->data = r->buf;
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.recv_am = recv_done,
        .user_data = r,
    };
    ucs_status_ptr_t q = ucp_am_recv_data_nbx(h->worker, desc, r->buf, r->len, &p);
    if (UCS_PTR_IS_ERR(q)) {
        link_fail_ucs(l, "receiving a large message", UCS_PTR_STATUS(q));
    } else if (q) {
        r->req = q;
        l->refs++;
    } else {
        r->ready = true;
    }
}

static ucs_status_t am_cb(void *arg, const void *header, size_t header_length, void *data,
                          size_t length, const ucp_am_recv_param_t *param)
{
    struct weft_link_host *h = arg;
    bool rndv = param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV;
    struct frame f;
    const char *bad = frame_decode(header, header_length, &f);
    if (bad) {
        junk(h, bad);
        return UCS_OK;
    }
    struct weft_link *l = link_find(h, &f);
    if (!l) {
        if (f.kind == KIND_HELLO)
            hello(h, &f, data, length, rndv);
        else /* mostly late frames of a link we closed: normal */
            WEFT_LOG_DEBUG("link", "dropped a frame of no link of ours (%016llx:%u)",
                           (unsigned long long)f.conn_host, f.conn_id);
        return UCS_OK;
    }
    if (l->closed || l->down || l->got_bye)
        return UCS_OK;
    if ((bad = frame_check(l, &f, length))) {
        link_fail(l, WEFT_ERR_PROTOCOL, bad);
        return UCS_OK;
    }
    l->rx_seq++;
    l->last_rx_ns = weft_tp_now_ns();
    if (f.kind == KIND_BEAT)
        return UCS_OK;
    struct rx *r = weft_calloc(1, sizeof(*r));
    if (!r) {
        link_fail(l, WEFT_ERR_NOMEM, "no memory for a message");
        return UCS_OK;
    }
    r->type = f.type;
    r->len = length;
    r->bye = l->got_bye = f.kind == KIND_BYE; /* in its place: messages before it come first */
    rx_append(l, r);
    if (rndv) {
        rx_rndv(l, r, data);
        return UCS_OK;
    }
    r->ready = true;
    if (!length)
        return UCS_OK;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA) {
        r->desc = data;
        r->data = data;
        return UCS_INPROGRESS;
    }
    if (!(r->buf = weft_malloc(length))) {
        link_fail(l, WEFT_ERR_NOMEM, "no memory for a message");
        return UCS_OK;
    }
    memcpy(r->buf, data, length);
    r->data = r->buf;
    return UCS_OK;
}

/* ---- sending ------------------------------------------------------------------------------ */

static void tx_post(struct tx *t)
{
    struct weft_link *l = t->link;
    ucp_request_param_t p = {
        .op_attr_mask =
            UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS,
        .flags = t->flags,
        .cb.send = send_done,
        .user_data = t,
    };
    l->last_tx_ns = weft_tp_now_ns();
    ucs_status_ptr_t q = ucp_am_send_nbx(l->peer->ep, AM_ID, t->hdr, HDR_LEN, t->data, t->len, &p);
    if (q == NULL) {
        tx_free(t);
    } else if (UCS_PTR_IS_ERR(q)) {
        link_fail_ucs(l, "send", UCS_PTR_STATUS(q));
        tx_free(t);
    } else {
        t->prev = NULL;
        t->next = l->inflight;
        if (l->inflight)
            l->inflight->prev = t;
        l->inflight = t;
        l->refs++;
    }
}

/* Give UCX the frames queued during wire-up; returns how many. */
static unsigned queue_post(struct weft_link *l)
{
    unsigned n = 0;
    while (l->q_head && l->peer && l->peer->state == EP_UP) {
        struct tx *t = l->q_head;
        l->q_head = t->next;
        if (!l->q_head)
            l->q_tail = NULL;
        tx_post(t);
        n++;
    }
    return n;
}

static weft_status_t frame_send(struct weft_link *l, uint8_t kind, uint16_t type, const void *data,
                                size_t len)
{
    size_t size = sizeof(struct tx) + len;
    struct tx *t = len >= RX_BIG ? weft_big_alloc(size) : weft_malloc(size);
    if (!t) {
        WEFT_LOG_ERROR("link", "no memory to queue a message of %zu bytes", len);
        return WEFT_ERR_NOMEM;
    }
    t->link = l;
    t->len = len;
    t->flags = kind == KIND_HELLO ? UCP_AM_SEND_FLAG_EAGER : 0; /* a receiver refuses others */
    t->next = t->prev = NULL;
    struct frame f = {
        .kind = kind,
        .flags = l->connector ? FLAG_CONNECTOR : 0,
        .type = type,
        .seq = l->tx_seq++,
        .conn_host = l->conn_host,
        .conn_id = l->conn_id,
        .len = len,
    };
    frame_encode(t->hdr, &f);
    if (len)
        memcpy(t->data, data, len);
    l->tx_bytes += len;
    if (l->q_tail)
        l->q_tail->next = t;
    else
        l->q_head = t;
    l->q_tail = t;
    queue_post(l);
    return WEFT_OK;
}

/* Tell the peer we are done with the link (once; not when it told us, or cannot hear). */
static void say_bye(struct weft_link *l)
{
    if (l->bye_sent || l->got_bye || !l->peer || l->peer->state == EP_DOWN)
        return;
    l->bye_sent = true;
    (void)frame_send(l, KIND_BYE, 0, NULL, 0); /* out of memory: the peer times out instead */
}

/* ---- the progress engine ------------------------------------------------------------------ */

static void link_free(struct weft_link *l)
{
    queue_drop(l);
    while (l->inflight) { /* only after the worker is gone */
        struct tx *t = l->inflight;
        l->inflight = t->next;
        tx_free(t);
    }
    while (l->rx_head) {
        struct rx *r = l->rx_head;
        l->rx_head = r->next;
        rx_free(l->host, r);
    }
    if (l->peer)
        l->peer->refs--;
    weft_free(l->peer_addr);
    weft_free(l);
}

static void peer_free(struct peer *p)
{
    weft_free(p->addr);
    weft_free(p);
}

/* Free the closed links nobody refers to any more, then the closed endpoints. A healthy
 * endpoint without links stays: a later link to the same process reuses it. */
static void sweep(struct weft_link_host *h)
{
    struct weft_link **pp = &h->links;
    while (*pp) {
        struct weft_link *l = *pp;
        if (l->closed && !l->accepting && !l->q_head && !l->refs) {
            *pp = l->next;
            link_free(l);
        } else {
            pp = &l->next;
        }
    }
    struct peer **qq = &h->peers;
    while (*qq) {
        struct peer *p = *qq;
        if (!p->ep && !p->refs) {
            *qq = p->next;
            peer_free(p);
        } else {
            qq = &p->next;
        }
    }
}

/* A closed link: its frames (the goodbye last) go once the endpoint is up; after the close
 * deadline, or when the endpoint failed, they are dropped. */
static unsigned close_step(struct weft_link *l, int64_t now)
{
    rx_discard(l);
    if (!l->q_head)
        return 0;
    if (l->peer && l->peer->state == EP_WIRING && now < l->close_by_ns)
        return 0;
    unsigned n = queue_post(l);
    if (l->q_head) {
        queue_drop(l);
        n++;
    }
    return n;
}

static void link_close_begin(struct weft_link *l)
{
    l->closed = true;
    l->on_msg = NULL;
    l->on_down = NULL;
    l->close_by_ns = weft_tp_now_ns() + (int64_t)CLOSE_WAIT_MS * 1000000;
    say_bye(l);
}

/* The accept side of a hello: attach to the endpoint to its worker, then tell the user. */
static unsigned accept_step(struct weft_link *l)
{
    struct weft_link_host *h = l->host;
    struct peer *p;
    l->accepting = false;
    weft_status_t st = peer_get(h, l->peer_addr, l->peer_addr_len, &p);
    weft_free(l->peer_addr);
    l->peer_addr = NULL;
    if (st != WEFT_OK) {
        l->closed = true; /* the user never saw it; the peer times out */
        return 1;
    }
    link_attach(l, p);
    WEFT_LOG_DEBUG("link", "link %016llx:%u accepted", (unsigned long long)l->conn_host,
                   l->conn_id);
    if (!h->on_accept || h->destroying)
        link_close_begin(l);
    else
        h->on_accept(h, l, h->arg);
    return 1;
}

static unsigned deliver(struct weft_link *l)
{
    unsigned n = 0;
    while (!l->closed && !l->down_told && l->rx_head && l->rx_head->ready) {
        struct rx *r = l->rx_head;
        l->rx_head = r->next;
        if (!l->rx_head)
            l->rx_tail = NULL;
        if (r->bye) {
            WEFT_LOG_DEBUG("link", "link %016llx:%u: the peer closed it",
                           (unsigned long long)l->conn_host, l->conn_id);
            link_set_down(l, WEFT_ERR_PEER_LOST);
            rx_free(l->host, r);
            return n + 1;
        }
        if (l->on_msg) {
            l->on_msg(l, r->type, r->data, r->len, l->arg);
        } else if (!l->warned_no_cb) {
            WEFT_LOG_WARN("link", "link %016llx:%u: message dropped: no message callback set",
                          (unsigned long long)l->conn_host, l->conn_id);
            l->warned_no_cb = true;
        }
        rx_free(l->host, r);
        n++;
    }
    return n;
}

/* Once the messages before it are delivered: the down event, and a goodbye when we are the
 * side that gave up (malformed frame, silence), so the peer does not wait for its timeout. */
static unsigned report_down(struct weft_link *l)
{
    if (l->down_told || (l->rx_head && l->rx_head->ready))
        return 0;
    l->down_told = true;
    rx_discard(l);
    say_bye(l);
    if (l->on_down)
        l->on_down(l, l->why, l->arg);
    return 1;
}

static void heartbeat(struct weft_link *l, int64_t now)
{
    struct weft_link_host *h = l->host;
    if (now - l->last_rx_ns > (int64_t)h->timeout_ms * 1000000) {
        /* the process is silent, not just this link: drop its endpoint, so what is in flight
         * to it is abandoned now and a revived process finds its links gone */
        char cause[64];
        snprintf(cause, sizeof(cause), "no frame from the peer for %d ms", h->timeout_ms);
        peer_fail(l->peer, WEFT_ERR_TIMEOUT, cause);
    } else if (l->peer && l->peer->state == EP_UP && now - l->last_tx_ns >= h->tick_ns / 2) {
        (void)frame_send(l, KIND_BEAT, 0, NULL, 0); /* out of memory: logged; silence follows */
    }
}

/* Everything that is not UCX's own work; returns how much it did. Without callbacks (inside a
 * flush) accepts, messages and down events wait for the next progress. */
static unsigned links_step(struct weft_link_host *h, bool callbacks)
{
    unsigned n = 0;
    int64_t now = weft_tp_now_ns();
    bool tick = now + h->tick_ns / 8 >= h->next_tick_ns; /* the timerfd may fire a hair early */
    if (tick)
        h->next_tick_ns = now + h->tick_ns;
    /* Links created by callbacks join the tail (this pass sees them); closed links stay in the
     * list until sweep(). */
    for (struct weft_link *l = h->links; l; l = l->next) {
        if (l->accepting && callbacks)
            n += accept_step(l);
        if (l->accepting)
            continue;
        if (l->closed) {
            n += close_step(l, now);
            continue;
        }
        if (l->q_head)
            n += queue_post(l);
        if (callbacks)
            n += deliver(l);
        if (callbacks && !l->closed && l->down)
            n += report_down(l);
        if (!l->closed && !l->down && tick && h->timeout_ms)
            heartbeat(l, now);
    }
    return n + peers_step(h);
}

static unsigned ucx_progress(struct weft_link_host *h)
{
    unsigned n = 0;
    for (int i = 0; i < PROGRESS_MAX; i++) {
        unsigned k = ucp_worker_progress(h->worker);
        if (!k)
            break;
        n += k;
    }
    return n;
}

/* Clear the timer and the kick (UCX's descriptor is cleared by ucp_worker_arm). */
static void fds_drain(struct weft_link_host *h)
{
    struct epoll_event ev[3];
    int n = epoll_wait(h->epfd, ev, 3, 0);
    for (int i = 0; i < n; i++) {
        uint64_t v;
        if (ev[i].data.u32 == FD_TIMER && read(h->timer_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
            WEFT_LOG_WARN("link", "timerfd: %s", strerror(errno));
        if (ev[i].data.u32 == FD_KICK) {
            if (read(h->kick_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
                WEFT_LOG_WARN("link", "eventfd: %s", strerror(errno));
            h->kicked = false;
        }
    }
}

/* Run until UCX is idle and armed (its descriptor then fires on the next event); false when
 * work is left after ROUNDS_MAX rounds. */
static bool pump_rounds(struct weft_link_host *h, bool callbacks)
{
    for (int round = 0; round < ROUNDS_MAX; round++) {
        unsigned n = ucx_progress(h);
        n += links_step(h, callbacks);
        if (n)
            continue;
        ucs_status_t s = ucp_worker_arm(h->worker);
        if (s == UCS_OK)
            return true;
        if (s != UCS_ERR_BUSY) {
            /* no usable descriptor: the timer still wakes the caller every tick */
            WEFT_LOG_WARN("link", "UCX worker arm: %s", ucs_status_string(s));
            return true;
        }
    }
    return false;
}

static void pump(struct weft_link_host *h)
{
    fds_drain(h);
    if (!pump_rounds(h, true))
        kick(h); /* the rest in the next call, so one busy peer cannot hold the loop */
}

/* ---- public API --------------------------------------------------------------------------- */

static weft_status_t timer_set(struct weft_link_host *h)
{
    int ms = h->timeout_ms ? h->timeout_ms / 4 : TICK_IDLE_MS;
    h->tick_ns = (int64_t)ms * 1000000;
    h->next_tick_ns = weft_tp_now_ns() + h->tick_ns;
    struct itimerspec its = {
        .it_interval = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000},
        .it_value = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000},
    };
    if (timerfd_settime(h->timer_fd, 0, &its, NULL) != 0) {
        WEFT_LOG_ERROR("link", "timerfd_settime: %s", strerror(errno));
        return WEFT_ERR_IO;
    }
    return WEFT_OK;
}

static weft_status_t ucx_open(struct weft_link_host *h, const char *tls)
{
    struct weft_tp_ucx_params p = {
        .subsys = "link",
        .name = "weft-link",
        .tls_key = "tls",
        .tls = tls,
        .features = UCP_FEATURE_AM,
    };
    struct weft_tp_ucx u;
    weft_status_t st = weft_tp_ucx_open(&p, &u);
    if (st != WEFT_OK)
        return st;
    h->ctx = u.ctx;
    h->worker = u.worker;
    h->ucx_fd = u.efd;
    const char *what = "worker address";
    ucs_status_t s;
    if ((s = ucp_worker_get_address(h->worker, &h->addr, &h->addr_len)) != UCS_OK) {
        h->addr = NULL;
        goto err;
    }
    ucp_am_handler_param_t ap = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                      UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG,
        .id = AM_ID,
        .flags = UCP_AM_FLAG_WHOLE_MSG | UCP_AM_FLAG_PERSISTENT_DATA,
        .cb = am_cb,
        .arg = h,
    };
    what = "active message handler";
    if ((s = ucp_worker_set_am_recv_handler(h->worker, &ap)) != UCS_OK)
        goto err;
    return WEFT_OK;

err:
    WEFT_LOG_ERROR("link", "UCX %s: %s", what, ucs_status_string(s));
    return weft_tp_ucs_status(s);
}

static weft_status_t fds_open(struct weft_link_host *h)
{
    h->epfd = epoll_create1(EPOLL_CLOEXEC);
    h->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    h->kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (h->epfd < 0 || h->timer_fd < 0 || h->kick_fd < 0)
        goto err;
    int fds[] = {[FD_UCX] = h->ucx_fd, [FD_TIMER] = h->timer_fd, [FD_KICK] = h->kick_fd};
    for (uint32_t i = 0; i < 3; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = i};
        if (epoll_ctl(h->epfd, EPOLL_CTL_ADD, fds[i], &ev) != 0)
            goto err;
    }
    return WEFT_OK;

err:
    WEFT_LOG_ERROR("link", "event descriptors: %s", strerror(errno));
    return WEFT_ERR_IO;
}

weft_status_t weft_link_host_create(const char *tls, weft_link_accept_cb on_accept, void *arg,
                                    struct weft_link_host **host_p)
{
    struct weft_link_host *h = weft_calloc(1, sizeof(*h));
    if (!h)
        return WEFT_ERR_NOMEM;
    h->ucx_fd = h->epfd = h->timer_fd = h->kick_fd = -1;
    h->on_accept = on_accept;
    h->arg = arg;
    h->timeout_ms = TIMEOUT_DEFAULT_MS;
    /* Names connections, not a secret: a clash needs two hosts drawing the same 64 bits. */
    if (getrandom(&h->id, sizeof(h->id), 0) != (ssize_t)sizeof(h->id))
        h->id = (uint64_t)weft_tp_now_ns() ^ ((uint64_t)getpid() << 32);
    weft_status_t st = ucx_open(h, tls);
    if (st == WEFT_OK)
        st = fds_open(h);
    if (st == WEFT_OK)
        st = timer_set(h);
    if (st != WEFT_OK) {
        weft_link_host_destroy(h);
        return st;
    }
    pump(h); /* arm the descriptor */
    *host_p = h;
    return WEFT_OK;
}

/* Bounded: what has not left by the deadline is dropped with the worker. */
static void host_drain(struct weft_link_host *h)
{
    int64_t deadline = weft_tp_now_ns() + (int64_t)CLOSE_WAIT_MS * 1000000;
    for (struct weft_link *l = h->links; l; l = l->next)
        if (!l->closed)
            link_close_begin(l);
    bool closing = false;
    for (;;) {
        pump(h);
        sweep(h);
        if (!h->links && !closing) {
            /* every goodbye left: close the endpoints, politely while they work */
            for (struct peer *p = h->peers; p; p = p->next)
                peer_close(p, p->state != EP_UP);
            closing = true;
            continue;
        }
        int64_t left = deadline - weft_tp_now_ns();
        if (!h->peers || left <= 0)
            break;
        struct pollfd pfd = {.fd = h->epfd, .events = POLLIN};
        (void)poll(&pfd, 1, left / 1000000 + 1 > 50 ? 50 : (int)(left / 1000000 + 1));
    }
    for (struct peer *p = h->peers; p; p = p->next)
        peer_close(p, true);
    for (int i = 0; i < 100 && (h->links || h->peers); i++) {
        ucx_progress(h);
        sweep(h);
    }
    /* A polite close a live but silent peer never answers (a stopped process) is still UCX's
     * to run; UCX destroys its endpoint with the worker and insists we have released the
     * request by then. Release it; its callback, if UCX still calls it, only counts. */
    for (struct peer *p = h->peers; p; p = p->next) {
        if (p->close_req) {
            p->close_dropped = true;
            ucp_request_free(p->close_req);
        }
    }
}

void weft_link_host_destroy(struct weft_link_host *h)
{
    if (!h)
        return;
    if (h->busy) {
        WEFT_LOG_ERROR("link", "weft_link_host_destroy called from a link callback: ignored");
        return;
    }
    h->destroying = true;
    h->on_accept = NULL;
    if (h->worker) {
        host_drain(h);
        for (struct weft_link *l = h->links; l; l = l->next) {
            l->accepting = false;
            rx_discard(l); /* held UCX data goes back before UCX */
        }
        if (h->addr)
            ucp_worker_release_address(h->worker, h->addr);
        ucp_worker_destroy(h->worker);
    }
    while (h->links) {
        struct weft_link *l = h->links;
        h->links = l->next;
        link_free(l);
    }
    while (h->peers) {
        struct peer *p = h->peers;
        h->peers = p->next;
        peer_free(p);
    }
    if (h->ctx)
        ucp_cleanup(h->ctx);
    int fds[] = {h->epfd, h->timer_fd, h->kick_fd};
    for (int i = 0; i < 3; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    weft_free(h);
}

weft_status_t weft_link_host_set_timeout(struct weft_link_host *h, int timeout_ms)
{
    if (timeout_ms != 0 && timeout_ms < TIMEOUT_MIN_MS) {
        WEFT_LOG_ERROR("link", "link timeout %d ms: must be 0 (off) or at least %d ms", timeout_ms,
                       TIMEOUT_MIN_MS);
        return WEFT_ERR_INVALID;
    }
    h->timeout_ms = timeout_ms;
    int64_t now = weft_tp_now_ns();
    for (struct weft_link *l = h->links; l; l = l->next)
        l->last_rx_ns = now; /* a new clock starts now */
    return timer_set(h);
}

weft_status_t weft_link_host_address(struct weft_link_host *h, const void **addr_p, size_t *len_p)
{
    *addr_p = h->addr;
    *len_p = h->addr_len;
    return WEFT_OK;
}

int weft_link_host_fd(struct weft_link_host *h)
{
    return h->epfd;
}

static weft_status_t not_in_callback(const struct weft_link_host *h, const char *what)
{
    if (!h->busy)
        return WEFT_OK;
    WEFT_LOG_ERROR("link", "%s called from a link callback", what);
    return WEFT_ERR_BUSY;
}

weft_status_t weft_link_host_progress(struct weft_link_host *h)
{
    weft_status_t st = not_in_callback(h, "weft_link_host_progress");
    if (st != WEFT_OK)
        return st;
    h->busy = true;
    pump(h);
    h->busy = false;
    sweep(h);
    return WEFT_OK;
}

weft_status_t weft_link_host_wait(struct weft_link_host *h, int timeout_ms)
{
    weft_status_t st = not_in_callback(h, "weft_link_host_wait");
    if (st != WEFT_OK)
        return st;
    struct pollfd pfd = {.fd = h->epfd, .events = POLLIN};
    if (poll(&pfd, 1, timeout_ms < 0 ? 0 : timeout_ms) < 0 && errno != EINTR)
        WEFT_LOG_WARN("link", "poll: %s", strerror(errno));
    return weft_link_host_progress(h);
}

weft_status_t weft_link_connect(struct weft_link_host *h, const void *peer_addr, size_t len,
                                weft_link_msg_cb on_msg, weft_link_down_cb on_down, void *arg,
                                struct weft_link **link_p)
{
    if (!peer_addr || len == 0 || len > ADDR_MAX) {
        WEFT_LOG_ERROR("link", "connect: a peer address of %zu bytes (1 to %d)", len, ADDR_MAX);
        return WEFT_ERR_INVALID;
    }
    struct peer *p;
    weft_status_t st = peer_get(h, peer_addr, len, &p);
    if (st != WEFT_OK)
        return st;
    if (!h->next_conn)
        h->next_conn = 1;
    struct weft_link *l = link_new(h, true, h->id, h->next_conn++);
    if (!l)
        return WEFT_ERR_NOMEM; /* the endpoint stays for a later try */
    link_attach(l, p);
    st = frame_send(l, KIND_HELLO, 0, h->addr, h->addr_len);
    if (st != WEFT_OK) {
        l->closed = true;
        if (!h->busy)
            sweep(h);
        return st;
    }
    l->on_msg = on_msg;
    l->on_down = on_down;
    l->arg = arg;
    if (!h->busy)
        kick(h);
    *link_p = l;
    return WEFT_OK;
}

void weft_link_set_callbacks(struct weft_link *l, weft_link_msg_cb on_msg,
                             weft_link_down_cb on_down, void *arg)
{
    if (l->closed)
        return;
    l->on_msg = on_msg;
    l->on_down = on_down;
    l->arg = arg;
}

weft_status_t weft_link_send(struct weft_link *l, uint16_t type, const void *data, size_t len)
{
    if (l->down)
        return l->why;
    if (len > WEFT_LINK_MSG_MAX) {
        WEFT_LOG_ERROR("link", "send: a message of %zu bytes (at most %zu)", len,
                       WEFT_LINK_MSG_MAX);
        return WEFT_ERR_RANGE;
    }
    if (len && !data) {
        WEFT_LOG_ERROR("link", "send: no data for a message of %zu bytes", len);
        return WEFT_ERR_INVALID;
    }
    if (l->tx_bytes + len > WEFT_LINK_QUEUE_MAX) {
        WEFT_LOG_WARN("link", "link %016llx:%u: %zu bytes wait to leave: send refused",
                      (unsigned long long)l->conn_host, l->conn_id, l->tx_bytes);
        return WEFT_ERR_BUSY;
    }
    weft_status_t st = frame_send(l, KIND_MSG, type, data, len);
    if (st == WEFT_OK && !l->host->busy)
        kick(l->host);
    return st;
}

/* Start a UCX flush once every frame is with UCX; true once the one started has ended. */
static bool flush_step(struct weft_link *l, uint64_t *target)
{
    if (*target)
        return l->flush_done >= *target;
    if (l->peer->state != EP_UP || l->q_head)
        return false;
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send = flushed,
        .user_data = l,
    };
    *target = ++l->flush_issued;
    ucs_status_ptr_t q = ucp_ep_flush_nbx(l->peer->ep, &p);
    if (UCS_PTR_IS_ERR(q))
        link_fail_ucs(l, "flush", UCS_PTR_STATUS(q));
    else if (q)
        l->refs++;
    else
        l->flush_done++;
    return l->flush_done >= *target;
}

/* Progress without user callbacks, so it is safe inside one; what arrives meanwhile is
 * delivered by the next progress, which the kick at the end asks for. */
weft_status_t weft_link_flush(struct weft_link *l, int timeout_ms)
{
    struct weft_link_host *h = l->host;
    int64_t deadline = weft_tp_now_ns() + (int64_t)(timeout_ms < 0 ? 0 : timeout_ms) * 1000000;
    uint64_t target = 0;
    weft_status_t st;
    for (;;) {
        if (l->down) {
            st = l->why;
            break;
        }
        if (flush_step(l, &target)) {
            st = WEFT_OK;
            break;
        }
        int64_t left = deadline - weft_tp_now_ns();
        if (left <= 0) {
            st = WEFT_ERR_TIMEOUT;
            break;
        }
        if (!pump_rounds(h, false))
            continue;
        /* UCX is armed: sleep on it and the timer (not on the kick, which may stay set) */
        struct pollfd pfd[2] = {{.fd = h->ucx_fd, .events = POLLIN},
                                {.fd = h->timer_fd, .events = POLLIN}};
        int ms = left / 1000000 + 1 > 100 ? 100 : (int)(left / 1000000 + 1);
        uint64_t v;
        if (poll(pfd, 2, ms) > 0 && pfd[1].revents && read(h->timer_fd, &v, sizeof(v)) < 0 &&
            errno != EAGAIN)
            WEFT_LOG_WARN("link", "timerfd: %s", strerror(errno));
    }
    kick(h);
    return st;
}

weft_status_t weft_link_status(const struct weft_link *l)
{
    return l->down ? l->why : WEFT_OK;
}

void weft_link_close(struct weft_link *l)
{
    if (!l || l->closed)
        return;
    struct weft_link_host *h = l->host;
    link_close_begin(l);
    if (!h->busy) {
        close_step(l, weft_tp_now_ns());
        sweep(h);
        kick(h);
    }
}
