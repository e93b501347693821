/* Revocation and freeze detection: how a world is abandoned for good, from any thread, so that
 * this process's UCX never again copies to or from a peer's memory.
 *
 * Why: our endpoints have no UCX error handling (sentinel.c), so UCX 1.13 aborts the process
 * when a CMA copy fails (cma_ep.c logs process_vm_readv's failure at FATAL level). A copy
 * fails with EFAULT when the peer process is alive but has freed the buffer the copy reads:
 * either side of a world that outlived a silent (stopped) member does that. Measured with
 * tests/integration/test_comm_freeze before this file: a rank resumed after its peers had
 * given up on it, destroyed their world and freed their buffers aborted in every round,
 * reading a survivor's freed buffer; a survivor still in the collective aborted reading the
 * buffer the resumed rank freed.
 *
 * CMA copies run only inside ucp_worker_progress (the scopy transports queue them and copy
 * one segment per progress call), so a world that never progresses again never copies again.
 * Every UCX call of a world goes through weft_tp_ucx_enter/leave (a flag in_ucx and the
 * revoked status, seq_cst, Dekker-style: either the owner sees the revocation before its
 * call, or the revoker sees in_ucx and waits for the call to end).
 *
 * Freeze: a stopped process (SIGSTOP, a paused VM, a suspended host) that resumes must not
 * carry on: its peers may have abandoned it meanwhile. alive_ns is when the process was last
 * seen running, refreshed before every UCX call and by a watchdog thread every freeze_ms / 4
 * (so an idle world or one whose owner computes for long is not mistaken for a frozen one).
 * Whoever runs first after a gap of more than freeze_ms (the owner before its next UCX call,
 * or the watchdog) revokes the world. The clock is CLOCK_BOOTTIME: monotonic, and unlike
 * CLOCK_MONOTONIC it also counts a suspended host.
 *
 * What is left: a stop that lands inside a ucp_worker_progress call resumes inside it, and
 * the rest of that one call runs (at most one CMA segment per scopy transport, UCX's TX_QUOTA
 * is 1). Nothing can stop it (a SIGCONT handler runs before the call resumes, but it can only
 * set a flag the call does not read, and a paused VM sends no signal), so UCX's log filter
 * (transport.c) turns that copy's EFAULT into a failed copy instead of an abort when
 * weft_tp_cma_fault_expected() says so.
 *
 * Destruction of a revoked world neither flushes nor progresses: ucp_worker_destroy releases
 * the endpoints on its own (UCX 1.13 refuses UCP_EP_CLOSE_FLAG_FORCE without UCX error
 * handling). But UCX cannot drop a CMA copy it queued for a receive it had matched (requests
 * cannot be cancelled once matched, scopy's flush has no cancel), and ucp_worker_destroy
 * asserts (ucs_assert_always) that no copy is queued: a revoked world with such a receive
 * keeps its worker (transport.c, worker_keep). Sends queue no copy here, as UCX's rendezvous
 * for host memory has the receiver read (get); UCX_RNDV_SCHEME=put_zcopy would change that. */
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "transport/internal.h"

#define REVOKED 'R' /* on a liveness socket: this rank abandoned the world */
/* A UCX call takes microseconds; a revoker waits at most this long for the one running. */
#define IDLE_WAIT_MS 1000

/* The world this thread is inside a UCX call of (for the log filter). */
static _Thread_local struct weft_transport *in_ucx_of;

int64_t weft_tp_boot_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

weft_status_t weft_tp_revoke_init(struct weft_transport *tp)
{
    atomic_init(&tp->revoked, 0);
    atomic_init(&tp->in_ucx, 0);
    atomic_init(&tp->alive_ns, weft_tp_boot_ns());
    tp->watch_fd = -1;
    tp->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (tp->wake_fd < 0) {
        WEFT_LOG_ERROR("transport", "eventfd: %s", strerror(errno));
        return WEFT_ERR_IO;
    }
    if (pthread_mutex_init(&tp->sock_lock, NULL) != 0) {
        close(tp->wake_fd);
        tp->wake_fd = -1;
        return WEFT_ERR_NOMEM;
    }
    return WEFT_OK;
}

void weft_tp_revoke_cleanup(struct weft_transport *tp)
{
    if (tp->wake_fd < 0)
        return; /* never initialised */
    pthread_mutex_destroy(&tp->sock_lock);
    close(tp->wake_fd);
    tp->wake_fd = -1;
}

/* Shut every liveness socket down (the descriptors stay, the owner closes them): each peer
 * reads 'R' then EOF at once and fails its groups with us, and stops expecting a goodbye. A
 * peer still in a collective with us learns it before we free anything. */
static void peers_tell(struct weft_transport *tp)
{
    pthread_mutex_lock(&tp->sock_lock);
    for (int r = 0; r < tp->size; r++) {
        if (tp->sock[r] < 0)
            continue;
        char b = REVOKED;
        ssize_t n = send(tp->sock[r], &b, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)n; /* a full or broken socket: the EOF that follows says enough */
        (void)shutdown(tp->sock[r], SHUT_RDWR);
    }
    pthread_mutex_unlock(&tp->sock_lock);
}

/* True for the caller that revoked the world (exactly one). */
static bool revoke_mark(struct weft_transport *tp, weft_status_t why)
{
    int none = 0;
    if (!atomic_compare_exchange_strong(&tp->revoked, &none, (int)why))
        return false;
    peers_tell(tp);
    uint64_t one = 1;
    ssize_t n = write(tp->wake_fd, &one, sizeof(one));
    (void)n; /* cannot fail short of a full counter, which is readable anyway */
    return true;
}

/* Until the owner's UCX call in flight (if any) has returned. */
static void ucx_idle_wait(struct weft_transport *tp)
{
    if (in_ucx_of == tp)
        return; /* the owner itself, from inside UCX (the log filter): nothing to wait for */
    int64_t deadline = weft_tp_now_ns() + (int64_t)IDLE_WAIT_MS * 1000000;
    while (atomic_load(&tp->in_ucx)) {
        if (weft_tp_now_ns() > deadline) {
            WEFT_LOG_WARN("transport", "revoke: a UCX call of the world is still running after "
                          "%d ms; returning without it", IDLE_WAIT_MS);
            return;
        }
        sched_yield();
    }
}

void weft_transport_revoke(struct weft_transport *tp, weft_status_t why)
{
    if (!tp)
        return;
    if (!WEFT_STATUS_IS_PEER_LOST(why))
        why = WEFT_ERR_PEER_LOST;
    if (revoke_mark(tp, why))
        WEFT_LOG_INFO("transport", "rank %d: data-plane world revoked (%s)", tp->rank,
                      weft_status_str(why));
    ucx_idle_wait(tp);
}

/* The process did not run for gap_ns: revoke the world (the first to notice says so; seen:
 * who noticed, for the debug line). */
static void frozen(struct weft_transport *tp, int64_t gap_ns, const char *seen)
{
    if (!revoke_mark(tp, WEFT_ERR_TIMEOUT))
        return;
    WEFT_LOG_ERROR("transport", "this process was frozen for %lld ms: its data-plane world is "
                   "abandoned", (long long)(gap_ns / 1000000));
    WEFT_LOG_DEBUG("transport", "the freeze was seen %s", seen);
}

/* Whether the process has not run for more than freeze_ms up to now (and was then frozen). */
static bool freeze_check(struct weft_transport *tp, int64_t now, const char *seen)
{
    int64_t gap = now - atomic_load_explicit(&tp->alive_ns, memory_order_relaxed);
    if (gap <= (int64_t)tp->opts.freeze_ms * 1000000)
        return false;
    frozen(tp, gap, seen);
    return true;
}

bool weft_tp_ucx_enter(struct weft_transport *tp)
{
    if (tp->freeze_armed) {
        int64_t now = weft_tp_boot_ns();
        if (freeze_check(tp, now, "before a UCX call"))
            return false;
        atomic_store_explicit(&tp->alive_ns, now, memory_order_relaxed);
    }
    atomic_store(&tp->in_ucx, 1);
    if (atomic_load(&tp->revoked)) {
        atomic_store(&tp->in_ucx, 0);
        return false;
    }
    in_ucx_of = tp;
    return true;
}

void weft_tp_ucx_leave(struct weft_transport *tp)
{
    in_ucx_of = NULL;
    atomic_store(&tp->in_ucx, 0);
}

bool weft_tp_ucx_again(struct weft_transport *tp, int64_t *last_ns)
{
    if (atomic_load_explicit(&tp->revoked, memory_order_relaxed))
        return false;
    if (!tp->freeze_armed)
        return true;
    int64_t now = weft_tp_boot_ns();
    if (now - *last_ns > (int64_t)tp->opts.freeze_ms * 1000000) {
        /* the stop landed inside the call that just returned */
        frozen(tp, now - *last_ns, "after the UCX progress call it landed in");
        return false;
    }
    *last_ns = now;
    atomic_store_explicit(&tp->alive_ns, now, memory_order_relaxed);
    return true;
}

weft_status_t weft_tp_revoke_apply(struct weft_transport *tp)
{
    weft_status_t why = (weft_status_t)atomic_load(&tp->revoked);
    if (why == WEFT_OK || tp->revoke_applied)
        return why;
    tp->revoke_applied = true;
    /* Local bookkeeping only: aborting an operation cancels its receives and releases its
     * requests, which touches no peer. */
    for (struct weft_comm *g = tp->groups; g; g = g->next)
        weft_tp_comm_fail(g, why);
    return why;
}

bool weft_tp_cma_fault_expected(void)
{
    struct weft_transport *tp = in_ucx_of;
    return tp && weft_tp_cma_fault_expected_in(tp, NULL, 0);
}

bool weft_tp_cma_fault_expected_in(struct weft_transport *tp, const int *ranks, int n)
{
    if (atomic_load(&tp->revoked))
        return true;
    if (tp->freeze_armed && weft_tp_boot_ns() - atomic_load(&tp->alive_ns) >
                                (int64_t)tp->opts.freeze_ms * 1000000)
        return true; /* the copy resumed after a freeze nobody has noticed yet */
    if (!ranks)
        n = tp->size;
    for (int i = 0; i < n; i++) {
        int r = ranks ? ranks[i] : i;
        if (r == tp->rank)
            continue;
        if (tp->peer[r] != PEER_UP)
            return true;
        /* A peer that abandons the world shuts its liveness socket down before it frees
         * anything: a copy that faults on its memory finds the socket readable already. */
        struct pollfd p = {.fd = tp->pfd[1 + r].fd, .events = POLLIN};
        if (poll(&p, 1, 0) > 0)
            return true;
    }
    return false;
}

/* ---- the watchdog ------------------------------------------------------------------------ */

static void *watch_main(void *arg)
{
    struct weft_transport *tp = arg;
    int period = tp->opts.freeze_ms / 4 > 1 ? tp->opts.freeze_ms / 4 : 1;
    struct pollfd p = {.fd = tp->watch_fd, .events = POLLIN};
    while (!atomic_load(&tp->revoked)) {
        int n = poll(&p, 1, period);
        if (n > 0)
            break; /* stop */
        int64_t now = weft_tp_boot_ns();
        if (freeze_check(tp, now, "by the watchdog"))
            break;
        atomic_store_explicit(&tp->alive_ns, now, memory_order_relaxed);
    }
    return NULL;
}

weft_status_t weft_tp_watch_start(struct weft_transport *tp)
{
    atomic_store(&tp->alive_ns, weft_tp_boot_ns());
    tp->freeze_armed = tp->opts.freeze_ms > 0;
    if (!tp->freeze_armed)
        return WEFT_OK;
    tp->watch_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (tp->watch_fd < 0) {
        WEFT_LOG_ERROR("transport", "eventfd: %s", strerror(errno));
        return WEFT_ERR_IO;
    }
    int e = pthread_create(&tp->watch, NULL, watch_main, tp);
    if (e != 0) {
        WEFT_LOG_ERROR("transport", "freeze watchdog thread: %s", strerror(e));
        close(tp->watch_fd);
        tp->watch_fd = -1;
        return WEFT_ERR_NOMEM;
    }
    tp->watching = true;
    return WEFT_OK;
}

void weft_tp_watch_stop(struct weft_transport *tp)
{
    if (tp->watching) {
        uint64_t one = 1;
        ssize_t n = write(tp->watch_fd, &one, sizeof(one));
        (void)n;
        pthread_join(tp->watch, NULL);
        tp->watching = false;
    }
    if (tp->watch_fd >= 0)
        close(tp->watch_fd);
    tp->watch_fd = -1;
}
