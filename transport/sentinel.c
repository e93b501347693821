/* Liveness: one TCP connection between every two ranks, read during every wait.
 *
 * Why sockets and not UCX's own error handling: UCX 1.13 reports a dead peer only on endpoints
 * created with UCP_ERR_HANDLING_MODE_PEER, and in that mode it refuses shared memory, so bulk
 * data would go over TCP at 1-3 GB/s instead of 11-15 GB/s over sysv+CMA (measured, see
 * reference/environment.md). So the endpoints use UCP_ERR_HANDLING_MODE_NONE and death is
 * seen here instead: the kernel closes a killed process's sockets at once, so its peers read
 * EOF within a poll, whatever UCX is doing. A rank that leaves normally first writes 'B'
 * (goodbye), so its EOF is not a death; one that abandons its world (weft_transport_revoke,
 * revoke.c) writes 'R' and shuts the socket down, and is lost at once. A hung (stopped, deadlocked) peer keeps its sockets
 * open; the deadline of the wait catches it. A socket per pair is O(N) descriptors per rank,
 * fine for the tens of ranks of one job; past that a socket to the coordinator, which watches
 * every worker, would replace the mesh. */
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "transport/internal.h"

#define SENTINEL_MAGIC 0x4e534657u /* "WFSN" */
#define GOODBYE 'B'
#define REVOKED 'R'

weft_status_t weft_tp_io_full(int fd, void *buf, size_t len, bool write, int64_t deadline)
{
    char *p = buf;
    while (len) {
        ssize_t n = write ? send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT)
                          : recv(fd, p, len, MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0)
            return WEFT_ERR_IO; /* the other side closed */
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return WEFT_ERR_IO;
        int64_t left = deadline - weft_tp_now_ns();
        if (left <= 0)
            return WEFT_ERR_TIMEOUT;
        struct pollfd pfd = {.fd = fd, .events = write ? POLLOUT : POLLIN};
        int ms = left / 1000000 + 1 > 1000 ? 1000 : (int)(left / 1000000 + 1);
        if (poll(&pfd, 1, ms) < 0 && errno != EINTR)
            return WEFT_ERR_IO;
    }
    return WEFT_OK;
}

weft_status_t weft_tp_sentinel_listen(int rdv_fd, int backlog, int *lfd_p, uint16_t *port_p)
{
    /* Listen on the address this host reached the rendezvous from: loopback in tests, the
     * cluster interface on a cluster. */
    struct sockaddr_storage ss = {0};
    socklen_t len = sizeof(ss);
    if (getsockname(rdv_fd, (struct sockaddr *)&ss, &len) != 0)
        goto err_errno;
    if (ss.ss_family == AF_INET)
        ((struct sockaddr_in *)&ss)->sin_port = 0;
    else
        ((struct sockaddr_in6 *)&ss)->sin6_port = 0;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        goto err_errno;
    if (bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, backlog) != 0)
        goto err_close;
    len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        goto err_close;
    *port_p = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                            : ((struct sockaddr_in6 *)&ss)->sin6_port);
    *lfd_p = fd;
    return WEFT_OK;

err_close:;
    int e = errno;
    close(fd);
    errno = e;
err_errno:
    WEFT_LOG_ERROR("transport", "liveness listener: %s", strerror(errno));
    return WEFT_ERR_IO;
}

weft_status_t weft_tp_connect(const struct sockaddr *sa, socklen_t len, int64_t deadline,
                              int *fd_p)
{
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return WEFT_ERR_IO;
    if (connect(fd, sa, len) != 0 && errno != EINPROGRESS)
        goto err_close;
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        int64_t left = deadline - weft_tp_now_ns();
        if (left <= 0) {
            errno = ETIMEDOUT;
            goto err_close;
        }
        int n = poll(&pfd, 1, left / 1000000 + 1 > 1000 ? 1000 : (int)(left / 1000000 + 1));
        if (n > 0)
            break;
        if (n < 0 && errno != EINTR)
            goto err_close;
    }
    int err = 0;
    socklen_t elen = sizeof(err);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0 || err) {
        errno = err ? err : errno;
        goto err_close;
    }
    *fd_p = fd;
    return WEFT_OK;

err_close:;
    int e = errno;
    close(fd);
    errno = e;
    return WEFT_ERR_IO;
}

static weft_status_t connect_one(const struct weft_tp_peer_info *peer, int me, int64_t deadline,
                                 int *fd_p)
{
    int fd;
    if (weft_tp_connect((const struct sockaddr *)&peer->sentinel, peer->sentinel_len, deadline,
                        &fd) != WEFT_OK)
        return WEFT_ERR_IO;
    uint8_t hello[8];
    weft_tp_put_u32(hello, SENTINEL_MAGIC);
    weft_tp_put_u32(hello + 4, (uint32_t)me);
    if (weft_tp_io_full(fd, hello, sizeof(hello), true, deadline) != WEFT_OK) {
        close(fd);
        return WEFT_ERR_IO;
    }
    *fd_p = fd;
    return WEFT_OK;
}

/* Accept one peer with a lower rank; a connection that does not introduce itself properly is
 * dropped (and counted as nothing). */
static void accept_one(struct weft_transport *tp, int lfd, int64_t deadline)
{
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return;
    uint8_t hello[8];
    if (weft_tp_io_full(fd, hello, sizeof(hello), false, deadline) == WEFT_OK &&
        weft_tp_get_u32(hello) == SENTINEL_MAGIC) {
        uint32_t r = weft_tp_get_u32(hello + 4);
        if (r < (uint32_t)tp->rank && tp->sock[r] < 0) {
            tp->sock[r] = fd;
            return;
        }
    }
    WEFT_LOG_WARN("transport", "liveness listener: dropped a connection that did not introduce "
                  "itself as a lower rank");
    close(fd);
}

weft_status_t weft_tp_sentinel_mesh(struct weft_transport *tp, int lfd,
                                    const struct weft_tp_table *table, int64_t deadline)
{
    /* Higher ranks: connect (their listeners exist: each listens before it registers). */
    for (int r = tp->rank + 1; r < tp->size; r++) {
        if (connect_one(&table->peers[r], tp->rank, deadline, &tp->sock[r]) != WEFT_OK) {
            WEFT_LOG_ERROR("transport", "liveness connection to rank %d: %s", r,
                           strerror(errno));
            return WEFT_ERR_UNREACHABLE;
        }
    }
    /* Lower ranks: accept. */
    int have = 0;
    while (have < tp->rank) {
        int64_t left = deadline - weft_tp_now_ns();
        if (left <= 0) {
            WEFT_LOG_ERROR("transport", "liveness connections: %d of %d lower ranks connected "
                           "before the deadline", have, tp->rank);
            return WEFT_ERR_TIMEOUT;
        }
        struct pollfd pfd = {.fd = lfd, .events = POLLIN};
        int n = poll(&pfd, 1, left / 1000000 + 1 > 1000 ? 1000 : (int)(left / 1000000 + 1));
        if (n > 0)
            accept_one(tp, lfd, deadline);
        have = 0;
        for (int r = 0; r < tp->rank; r++)
            have += tp->sock[r] >= 0;
    }
    for (int r = 0; r < tp->size; r++) {
        tp->pfd[1 + r].fd = tp->sock[r];
        tp->pfd[1 + r].events = POLLIN;
    }
    return WEFT_OK;
}

/* Under sock_lock: weft_transport_revoke may be shutting the sockets down on another thread. */
static void sock_close(struct weft_transport *tp, int r)
{
    pthread_mutex_lock(&tp->sock_lock);
    close(tp->sock[r]);
    tp->sock[r] = -1;
    pthread_mutex_unlock(&tp->sock_lock);
    tp->pfd[1 + r].fd = -1;
}

/* Returns 1 when the peer is newly lost. */
static int sentinel_closed(struct weft_transport *tp, int r, bool revoked)
{
    sock_close(tp, r);
    if (tp->peer[r] != PEER_UP)
        return 0;
    tp->peer[r] = PEER_LOST;
    if (revoked)
        WEFT_LOG_ERROR("transport", "rank %d lost: it abandoned the world (revoked)", r);
    else
        WEFT_LOG_ERROR("transport", "rank %d lost: its liveness socket closed without a goodbye "
                       "(the process died)", r);
    return 1;
}

int weft_tp_sentinel_check(struct weft_transport *tp)
{
    int n = poll(tp->pfd + 1, (nfds_t)tp->size, 0), lost = 0;
    if (n <= 0)
        return 0;
    for (int r = 0; r < tp->size; r++) {
        struct pollfd *p = &tp->pfd[1 + r];
        if (p->fd < 0 || !p->revents)
            continue;
        char buf[64];
        ssize_t k = recv(p->fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (k > 0 && memchr(buf, REVOKED, (size_t)k)) {
            lost += sentinel_closed(tp, r, true);
            continue;
        }
        if (k > 0) {
            if (memchr(buf, GOODBYE, (size_t)k) && tp->peer[r] == PEER_UP)
                tp->peer[r] = PEER_DEPARTED;
            continue;
        }
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            continue;
        lost += sentinel_closed(tp, r, false);
    }
    return lost;
}

void weft_tp_sentinel_close(struct weft_transport *tp)
{
    /* A revoked world said 'R' already: no goodbye, the peers must count us lost. */
    bool bye = atomic_load(&tp->revoked) == WEFT_OK;
    for (int r = 0; r < tp->size; r++) {
        if (tp->sock[r] < 0)
            continue;
        char b = GOODBYE;
        ssize_t n = bye ? send(tp->sock[r], &b, 1, MSG_NOSIGNAL | MSG_DONTWAIT) : 0;
        (void)n; /* a peer already gone needs no goodbye */
        sock_close(tp, r);
    }
}
