/* Rendezvous: every rank registers its UCX worker address and liveness port with a server,
 * which answers every rank with the whole table once all have registered.
 *
 * The server is poll-driven (weft_rdv_server_progress, weft_rdv_server_fd) so an event loop
 * such as the coordinator's can host it; tests and `weft bench comm` host it in the launcher.
 *
 * Wire format, little-endian. Registration: magic "WFRV", version, rank, size, liveness port,
 * address length (u32 each), then the address. Table: magic, version, size, payload length,
 * then per rank: address family (4 or 6), liveness port, 16 bytes of IP (u32 and bytes), the
 * address length and the address. Everything is bounds-checked on both sides. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "transport/internal.h"

#define RDV_MAGIC 0x56524657u /* "WFRV" */
#define RDV_VERSION 1u
#define RDV_HELLO 24
#define RDV_TABLE_HDR 16
#define RDV_ENTRY 28
#define RDV_ADDR_MAX 65536u
#define RDV_SIZE_MAX 65536

/* The port of an IPv4 or IPv6 address: both keep it at the same offset. */
static uint16_t sock_port(const struct sockaddr_storage *ss)
{
    _Static_assert(offsetof(struct sockaddr_in, sin_port) ==
                       offsetof(struct sockaddr_in6, sin6_port), "port offsets differ");
    uint16_t p;
    memcpy(&p, (const char *)ss + offsetof(struct sockaddr_in, sin_port), sizeof(p));
    return ntohs(p);
}

/* ---- server ---------------------------------------------------------------------------- */

struct rdv_conn {
    int fd;
    uint8_t hdr[RDV_HELLO];
    size_t got; /* bytes of header and address received */
    uint8_t *addr;
    uint32_t addr_len;
    uint32_t sport;
    int rank; /* registered rank, or -1 */
    struct sockaddr_storage from;
    size_t sent; /* bytes of the table sent */
};

struct weft_rdv_server {
    int lfd;
    uint16_t port;
    int size;
    struct rdv_conn *conns;
    int cap;
    int *by_rank; /* connection index of each registered rank, or -1 */
    int registered;
    int answered;
    uint8_t *table;
    size_t table_len;
    struct pollfd *pfd;
};

static void conn_drop(struct weft_rdv_server *srv, struct rdv_conn *c)
{
    if (c->rank >= 0 && srv->by_rank[c->rank] == (int)(c - srv->conns)) {
        srv->by_rank[c->rank] = -1;
        srv->registered--;
    }
    close(c->fd);
    weft_free(c->addr);
    *c = (struct rdv_conn){.fd = -1, .rank = -1};
}

weft_status_t weft_rdv_server_create(const char *host, uint16_t port, int size,
                                     struct weft_rdv_server **srv_p, struct weft_error *err)
{
    if (size < 1 || size > RDV_SIZE_MAX)
        return weft_error_set(err, WEFT_ERR_RANGE, "transport",
                              "rendezvous: %d ranks is out of range [1, %d]", size, RDV_SIZE_MAX);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    char ps[8];
    snprintf(ps, sizeof(ps), "%u", (unsigned)port);
    int rc = getaddrinfo(host, ps, &hints, &ai);
    if (rc != 0)
        return weft_error_set(err, WEFT_ERR_UNREACHABLE, "transport",
                              "rendezvous: cannot resolve '%s': %s", host, gai_strerror(rc));
    struct weft_rdv_server *srv = weft_calloc(1, sizeof(*srv));
    if (!srv)
        goto err_ai;
    srv->size = size;
    srv->cap = 2 * size + 16;
    srv->conns = weft_calloc((size_t)srv->cap, sizeof(*srv->conns));
    srv->by_rank = weft_malloc((size_t)size * sizeof(int));
    srv->pfd = weft_calloc((size_t)srv->cap + 1, sizeof(*srv->pfd));
    if (!srv->conns || !srv->by_rank || !srv->pfd)
        goto err_srv;
    for (int i = 0; i < srv->cap; i++)
        srv->conns[i] = (struct rdv_conn){.fd = -1, .rank = -1};
    for (int i = 0; i < size; i++)
        srv->by_rank[i] = -1;
    srv->lfd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (srv->lfd < 0)
        goto err_errno;
    int one = 1;
    (void)setsockopt(srv->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(srv->lfd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(srv->lfd, srv->cap) != 0)
        goto err_errno;
    struct sockaddr_storage ss = {0};
    socklen_t len = sizeof(ss);
    if (getsockname(srv->lfd, (struct sockaddr *)&ss, &len) != 0)
        goto err_errno;
    srv->port = sock_port(&ss);
    freeaddrinfo(ai);
    *srv_p = srv;
    return WEFT_OK;

err_errno:
    weft_error_set(err, WEFT_ERR_IO, "transport", "rendezvous: listen on %s:%u: %s", host,
                   (unsigned)port, strerror(errno));
    if (srv->lfd >= 0)
        close(srv->lfd);
    weft_free(srv->conns);
    weft_free(srv->by_rank);
    weft_free(srv->pfd);
    weft_free(srv);
    freeaddrinfo(ai);
    return WEFT_ERR_IO;
err_srv:
    weft_free(srv->conns);
    weft_free(srv->by_rank);
    weft_free(srv->pfd);
    weft_free(srv);
err_ai:
    freeaddrinfo(ai);
    return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
}

void weft_rdv_server_destroy(struct weft_rdv_server *srv)
{
    if (!srv)
        return;
    for (int i = 0; i < srv->cap; i++)
        if (srv->conns[i].fd >= 0)
            conn_drop(srv, &srv->conns[i]);
    close(srv->lfd);
    weft_free(srv->conns);
    weft_free(srv->by_rank);
    weft_free(srv->pfd);
    weft_free(srv->table);
    weft_free(srv);
}

uint16_t weft_rdv_server_port(const struct weft_rdv_server *srv)
{
    return srv->port;
}

int weft_rdv_server_fd(const struct weft_rdv_server *srv)
{
    return srv->lfd;
}

static void accept_all(struct weft_rdv_server *srv)
{
    for (;;) {
        struct sockaddr_storage from;
        socklen_t len = sizeof(from);
        int fd = accept4(srv->lfd, (struct sockaddr *)&from, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        int slot = -1;
        for (int i = 0; i < srv->cap && slot < 0; i++)
            if (srv->conns[i].fd < 0)
                slot = i;
        if (slot < 0) {
            WEFT_LOG_WARN("rendezvous", "too many connections; one refused");
            close(fd);
            continue;
        }
        srv->conns[slot] = (struct rdv_conn){.fd = fd, .rank = -1, .from = from};
    }
}

/* The header of a registration is complete: check it. Returns false to drop the connection. */
static bool hello_check(struct weft_rdv_server *srv, struct rdv_conn *c)
{
    uint32_t magic = weft_tp_get_u32(c->hdr), version = weft_tp_get_u32(c->hdr + 4);
    uint32_t rank = weft_tp_get_u32(c->hdr + 8), size = weft_tp_get_u32(c->hdr + 12);
    c->sport = weft_tp_get_u32(c->hdr + 16);
    c->addr_len = weft_tp_get_u32(c->hdr + 20);
    if (magic != RDV_MAGIC || version != RDV_VERSION) {
        WEFT_LOG_WARN("rendezvous", "dropped a connection that is not a weft rank "
                      "(magic %08x, version %u)", magic, version);
        return false;
    }
    if (size != (uint32_t)srv->size || rank >= size || c->sport == 0 || c->sport > 65535 ||
        c->addr_len == 0 || c->addr_len > RDV_ADDR_MAX) {
        WEFT_LOG_WARN("rendezvous", "dropped a bad registration: rank %u of %u (expected %d "
                      "ranks), port %u, address of %u bytes", rank, size, srv->size, c->sport,
                      c->addr_len);
        return false;
    }
    if (srv->by_rank[rank] >= 0) {
        WEFT_LOG_WARN("rendezvous", "dropped a second registration of rank %u", rank);
        return false;
    }
    c->addr = weft_malloc(c->addr_len);
    if (!c->addr)
        return false;
    c->rank = (int)rank; /* registered once the address is in */
    return true;
}

static void conn_read(struct weft_rdv_server *srv, struct rdv_conn *c)
{
    for (;;) {
        size_t want, have = c->got;
        uint8_t *dst;
        if (have < RDV_HELLO) {
            dst = c->hdr + have;
            want = RDV_HELLO - have;
        } else if (c->addr && have < RDV_HELLO + c->addr_len) {
            dst = c->addr + (have - RDV_HELLO);
            want = RDV_HELLO + c->addr_len - have;
        } else {
            /* registered: anything more (or EOF) before the table is sent means it left */
            char x;
            ssize_t n = recv(c->fd, &x, 1, MSG_DONTWAIT);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ||
                n > 0)
                conn_drop(srv, c);
            return;
        }
        ssize_t n = recv(c->fd, dst, want, MSG_DONTWAIT);
        if (n <= 0) {
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
                return;
            conn_drop(srv, c);
            return;
        }
        c->got += (size_t)n;
        if (c->got == RDV_HELLO && !hello_check(srv, c)) {
            conn_drop(srv, c);
            return;
        }
        if (c->addr && c->got == RDV_HELLO + c->addr_len) {
            srv->by_rank[c->rank] = (int)(c - srv->conns);
            srv->registered++;
        }
    }
}

static weft_status_t table_build(struct weft_rdv_server *srv)
{
    size_t len = RDV_TABLE_HDR;
    for (int r = 0; r < srv->size; r++)
        len += RDV_ENTRY + srv->conns[srv->by_rank[r]].addr_len;
    uint8_t *t = weft_malloc(len);
    if (!t)
        return WEFT_ERR_NOMEM;
    weft_tp_put_u32(t, RDV_MAGIC);
    weft_tp_put_u32(t + 4, RDV_VERSION);
    weft_tp_put_u32(t + 8, (uint32_t)srv->size);
    weft_tp_put_u32(t + 12, (uint32_t)(len - RDV_TABLE_HDR));
    uint8_t *p = t + RDV_TABLE_HDR;
    for (int r = 0; r < srv->size; r++) {
        const struct rdv_conn *c = &srv->conns[srv->by_rank[r]];
        memset(p, 0, RDV_ENTRY);
        if (c->from.ss_family == AF_INET6) {
            weft_tp_put_u32(p, 6);
            memcpy(p + 8, &((const struct sockaddr_in6 *)&c->from)->sin6_addr, 16);
        } else {
            weft_tp_put_u32(p, 4);
            memcpy(p + 8, &((const struct sockaddr_in *)&c->from)->sin_addr, 4);
        }
        weft_tp_put_u32(p + 4, c->sport);
        weft_tp_put_u32(p + 24, c->addr_len);
        memcpy(p + RDV_ENTRY, c->addr, c->addr_len);
        p += RDV_ENTRY + c->addr_len;
    }
    srv->table = t;
    srv->table_len = len;
    return WEFT_OK;
}

static void conn_write(struct weft_rdv_server *srv, struct rdv_conn *c)
{
    while (c->sent < srv->table_len) {
        ssize_t n = send(c->fd, srv->table + c->sent, srv->table_len - c->sent,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return;
        if (n <= 0) {
            WEFT_LOG_WARN("rendezvous", "rank %d left before it got the table", c->rank);
            break; /* it will not come back for it: count it as answered */
        }
        c->sent += (size_t)n;
    }
    close(c->fd);
    c->fd = -1;
    weft_free(c->addr);
    c->addr = NULL;
    srv->answered++;
}

weft_status_t weft_rdv_server_progress(struct weft_rdv_server *srv, int timeout_ms)
{
    int64_t deadline = weft_tp_now_ns() + (int64_t)timeout_ms * 1000000;
    for (;;) {
        if (srv->answered == srv->size)
            return WEFT_OK;
        int n = 0;
        srv->pfd[n++] = (struct pollfd){.fd = srv->table ? -1 : srv->lfd, .events = POLLIN};
        for (int i = 0; i < srv->cap; i++) {
            struct rdv_conn *c = &srv->conns[i];
            short ev = srv->table && c->rank >= 0 ? POLLOUT : POLLIN;
            srv->pfd[n++] = (struct pollfd){.fd = c->fd, .events = ev};
        }
        int64_t left = deadline - weft_tp_now_ns();
        int ms = left <= 0 ? 0 : (int)(left / 1000000 + 1);
        if (poll(srv->pfd, (nfds_t)n, ms) < 0 && errno != EINTR) {
            WEFT_LOG_ERROR("rendezvous", "poll: %s", strerror(errno));
            return WEFT_ERR_IO;
        }
        if (srv->pfd[0].revents)
            accept_all(srv);
        for (int i = 0; i < srv->cap; i++) {
            struct rdv_conn *c = &srv->conns[i];
            if (c->fd < 0 || !srv->pfd[1 + i].revents || srv->pfd[1 + i].fd != c->fd)
                continue;
            if (srv->table && c->rank >= 0)
                conn_write(srv, c);
            else
                conn_read(srv, c);
        }
        if (!srv->table && srv->registered == srv->size) {
            weft_status_t st = table_build(srv);
            if (st != WEFT_OK)
                return st;
            /* registrations are complete: close what is not one of them */
            for (int i = 0; i < srv->cap; i++)
                if (srv->conns[i].fd >= 0 && srv->conns[i].rank < 0)
                    conn_drop(srv, &srv->conns[i]);
            continue;
        }
        if (weft_tp_now_ns() >= deadline)
            return srv->answered == srv->size ? WEFT_OK : WEFT_INPROGRESS;
    }
}

/* ---- client ---------------------------------------------------------------------------- */

static weft_status_t split_host_port(const char *where, char *host, size_t len, char **port_p)
{
    const char *colon = strrchr(where, ':');
    if (!colon || colon == where || !colon[1])
        return WEFT_ERR_INVALID;
    const char *h = where;
    size_t hl = (size_t)(colon - where);
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    if (hl >= len)
        return WEFT_ERR_INVALID;
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port_p = (char *)colon + 1;
    return WEFT_OK;
}

weft_status_t weft_tp_rdv_connect(const char *where, int64_t deadline, int *fd_p,
                                  struct weft_error *err)
{
    char host[256], *port;
    if (!where || split_host_port(where, host, sizeof(host), &port) != WEFT_OK)
        return weft_error_set(err, WEFT_ERR_INVALID, "transport",
                              "rendezvous address '%s' is not host:port", where ? where : "(null)");
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *ai = NULL;
    int rc = getaddrinfo(host, port, &hints, &ai);
    if (rc != 0)
        return weft_error_set(err, WEFT_ERR_UNREACHABLE, "transport",
                              "rendezvous: cannot resolve '%s': %s", where, gai_strerror(rc));
    /* The server may not listen yet: retry until the deadline. */
    int e;
    for (;;) {
        int fd;
        if (weft_tp_connect(ai->ai_addr, ai->ai_addrlen, deadline, &fd) == WEFT_OK) {
            freeaddrinfo(ai);
            *fd_p = fd;
            return WEFT_OK;
        }
        e = errno;
        if (e != ECONNREFUSED || weft_tp_now_ns() > deadline)
            break;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    freeaddrinfo(ai);
    return weft_error_set(err, WEFT_ERR_UNREACHABLE, "transport",
                          "rendezvous: cannot connect to %s: %s", where, strerror(e));
}

void weft_tp_table_free(struct weft_tp_table *table)
{
    weft_free(table->peers);
    weft_free(table->blob);
    table->peers = NULL;
    table->blob = NULL;
}

static weft_status_t table_parse(struct weft_tp_table *t, const uint8_t *p, size_t len)
{
    const uint8_t *end = p + len;
    for (int r = 0; r < t->size; r++) {
        if ((size_t)(end - p) < RDV_ENTRY)
            return WEFT_ERR_FORMAT;
        uint32_t fam = weft_tp_get_u32(p), port = weft_tp_get_u32(p + 4), alen = weft_tp_get_u32(p + 24);
        if ((fam != 4 && fam != 6) || port == 0 || port > 65535 || alen == 0 ||
            alen > RDV_ADDR_MAX || (size_t)(end - p) - RDV_ENTRY < alen)
            return WEFT_ERR_FORMAT;
        struct weft_tp_peer_info *e = &t->peers[r];
        memset(&e->sentinel, 0, sizeof(e->sentinel));
        if (fam == 4) {
            struct sockaddr_in *in = (struct sockaddr_in *)&e->sentinel;
            in->sin_family = AF_INET;
            in->sin_port = htons((uint16_t)port);
            memcpy(&in->sin_addr, p + 8, 4);
            e->sentinel_len = sizeof(*in);
        } else {
            struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&e->sentinel;
            in6->sin6_family = AF_INET6;
            in6->sin6_port = htons((uint16_t)port);
            memcpy(&in6->sin6_addr, p + 8, 16);
            e->sentinel_len = sizeof(*in6);
        }
        e->addr = p + RDV_ENTRY;
        e->addr_len = alen;
        p += RDV_ENTRY + alen;
    }
    return p == end ? WEFT_OK : WEFT_ERR_FORMAT;
}

weft_status_t weft_tp_rdv_exchange(int fd, int rank, int size, uint16_t sentinel_port,
                                   const void *addr, size_t addr_len, int64_t deadline,
                                   struct weft_tp_table *table_p, struct weft_error *err)
{
    if (addr_len == 0 || addr_len > RDV_ADDR_MAX || size < 1 || size > RDV_SIZE_MAX)
        return weft_error_set(err, WEFT_ERR_RANGE, "transport",
                              "rendezvous: address of %zu bytes or %d ranks out of range",
                              addr_len, size);
    uint8_t hello[RDV_HELLO];
    weft_tp_put_u32(hello, RDV_MAGIC);
    weft_tp_put_u32(hello + 4, RDV_VERSION);
    weft_tp_put_u32(hello + 8, (uint32_t)rank);
    weft_tp_put_u32(hello + 12, (uint32_t)size);
    weft_tp_put_u32(hello + 16, sentinel_port);
    weft_tp_put_u32(hello + 20, (uint32_t)addr_len);
    weft_status_t st = weft_tp_io_full(fd, hello, sizeof(hello), true, deadline);
    if (st == WEFT_OK)
        st = weft_tp_io_full(fd, (void *)addr, addr_len, true, deadline);
    uint8_t hdr[RDV_TABLE_HDR];
    if (st == WEFT_OK)
        st = weft_tp_io_full(fd, hdr, sizeof(hdr), false, deadline);
    if (st != WEFT_OK)
        return weft_error_set(err, st, "transport", "rendezvous: %s",
                              st == WEFT_ERR_TIMEOUT
                                  ? "no table before the deadline (are all ranks started?)"
                                  : "the server closed the connection (registration refused?)");
    uint32_t plen = weft_tp_get_u32(hdr + 12);
    if (weft_tp_get_u32(hdr) != RDV_MAGIC || weft_tp_get_u32(hdr + 4) != RDV_VERSION ||
        weft_tp_get_u32(hdr + 8) != (uint32_t)size ||
        plen > (uint64_t)size * (RDV_ENTRY + RDV_ADDR_MAX))
        return weft_error_set(err, WEFT_ERR_FORMAT, "transport",
                              "rendezvous: malformed table header");
    struct weft_tp_table t = {.size = size};
    t.blob = weft_malloc(plen ? plen : 1);
    t.peers = weft_calloc((size_t)size, sizeof(*t.peers));
    if (!t.blob || !t.peers) {
        weft_tp_table_free(&t);
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    }
    st = weft_tp_io_full(fd, t.blob, plen, false, deadline);
    if (st == WEFT_OK) {
        st = table_parse(&t, t.blob, plen);
        if (st != WEFT_OK)
            weft_error_set(err, st, "transport", "rendezvous: malformed table");
    } else {
        weft_error_set(err, st, "transport", "rendezvous: the table was cut short");
    }
    if (st != WEFT_OK) {
        weft_tp_table_free(&t);
        return st;
    }
    *table_p = t;
    return WEFT_OK;
}
