/* Progress and waiting: UCX, the liveness sockets and every collective in flight, with a
 * deadline on each wait.
 *
 * Waits spin for opts.spin_us and then sleep in poll() on the UCX worker's event descriptor
 * together with the liveness sockets. Tests and small jobs run more processes than cores; a
 * waiter that only spins takes the core from the peer it waits for. */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "transport/internal.h"

/* Liveness sockets are read at least this often while spinning (each read is a syscall). */
#define SENTINEL_PERIOD_NS 1000000
/* Upper bound of one sleep, so a deadline is never overslept by much. */
#define SLEEP_MAX_MS 100
/* UCX progress calls per pass, so one busy stream cannot hold the caller forever. */
#define PROGRESS_MAX 256

int64_t weft_tp_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t weft_tp_deadline(const struct weft_transport *tp)
{
    return weft_tp_now_ns() + (int64_t)tp->opts.timeout_ms * 1000000;
}

void weft_tp_comm_fail(struct weft_comm *comm, weft_status_t status)
{
    if (comm->failed == WEFT_OK)
        comm->failed = status;
    struct weft_tp_op *op = &comm->op;
    if (op->active)
        weft_tp_op_finish(op, comm->failed);
}

void weft_tp_lost_apply(struct weft_transport *tp)
{
    for (struct weft_comm *g = tp->groups; g; g = g->next) {
        for (int i = 0; i < g->size; i++) {
            if (tp->peer[g->ranks[i]] == PEER_LOST) {
                weft_tp_comm_fail(g, WEFT_ERR_PEER_LOST);
                break;
            }
        }
    }
}

/* The only place a world's UCX progresses (apart from the flushes of its creation and
 * destruction): it stops between two calls once the world is revoked or the process was found
 * frozen (revoke.c). */
static unsigned drain(struct weft_transport *tp)
{
    if (!weft_tp_ucx_enter(tp))
        return 0;
    unsigned events = 0;
    int64_t last = atomic_load_explicit(&tp->alive_ns, memory_order_relaxed);
    for (int i = 0; i < PROGRESS_MAX; i++) {
        unsigned n = ucp_worker_progress(tp->worker);
        if (!weft_tp_ucx_again(tp, &last)) {
            events++;
            break;
        }
        if (!n)
            break;
        events += n;
    }
    weft_tp_ucx_leave(tp);
    return events;
}

static unsigned ops_progress(struct weft_transport *tp, int64_t now);

/* A dead peer's last messages may already sit in shared memory (it wrote them before it
 * died, and its sockets close after its memory is gone): they are delivered, and the
 * collectives they complete succeed, before the groups of the dead are failed. */
unsigned weft_tp_progress(struct weft_transport *tp)
{
    if (tp->revoke_applied)
        return 0;
    unsigned events = drain(tp);
    /* Revoked: the groups fail here and nothing else runs, the liveness sockets included (they
     * are shut down: every peer would read as lost). */
    if (weft_tp_revoke_apply(tp) != WEFT_OK)
        return events + 1;
    if (tp->n_zombies)
        weft_tp_zombies_reap(tp);
    int64_t now = weft_tp_now_ns();
    events += ops_progress(tp, now);
    if (now >= tp->next_sentinel_ns) {
        tp->next_sentinel_ns = now + SENTINEL_PERIOD_NS;
        if (weft_tp_sentinel_check(tp)) {
            events += drain(tp) + 1;
            events += ops_progress(tp, now);
            weft_tp_lost_apply(tp);
        }
    }
    return events;
}

static unsigned ops_progress(struct weft_transport *tp, int64_t now)
{
    unsigned events = 0;
    struct weft_tp_op *next;
    for (struct weft_tp_op *op = tp->active; op; op = next) {
        next = op->next_active;
        int moved = 0;
        weft_status_t st = op->progress(op, &moved);
        if (st == WEFT_INPROGRESS && now > op->req.deadline_ns) {
            struct weft_comm *c = op->comm;
            WEFT_LOG_ERROR("transport", "group %u: %s (collective %u) timed out after %d ms: a "
                           "peer is silent", c->id, op->name, op->seq, tp->opts.timeout_ms);
            weft_tp_comm_fail(c, WEFT_ERR_TIMEOUT);
            events++;
            continue;
        }
        if (st != WEFT_INPROGRESS) {
            if (WEFT_STATUS_IS_PEER_LOST(st))
                weft_tp_comm_fail(op->comm, st);
            else
                weft_tp_op_finish(op, st);
        }
        events += (unsigned)moved + (st != WEFT_INPROGRESS);
    }
    return events;
}

weft_status_t weft_transport_progress(struct weft_transport *tp)
{
    weft_tp_progress(tp);
    return weft_tp_revoke_apply(tp);
}

/* A revocation writes wake_fd, which is in the set: the sleep ends at once. */
void weft_tp_sleep(struct weft_transport *tp, int64_t deadline)
{
    if (weft_tp_shm_sleep(tp, deadline))
        return;
    if (!weft_tp_ucx_enter(tp))
        return;
    ucs_status_t s = ucp_worker_arm(tp->worker);
    weft_tp_ucx_leave(tp);
    if (s == UCS_ERR_BUSY)
        return; /* events arrived meanwhile: go and progress them */
    int64_t left = deadline - weft_tp_now_ns();
    if (left <= 0)
        return;
    int ms = left / 1000000 + 1 > SLEEP_MAX_MS ? SLEEP_MAX_MS : (int)(left / 1000000 + 1);
    /* Each pass tells the freeze detection this process runs, also where no watchdog does
     * (destruction): a sleep must not look like a freeze. */
    if (tp->freeze_armed && ms > tp->opts.freeze_ms / 4)
        ms = tp->opts.freeze_ms / 4;
    /* An arm failure other than BUSY leaves no usable descriptor: nap on the sockets alone so
     * the wait still ends at its deadline. */
    tp->pfd[0].events = s == UCS_OK ? POLLIN : 0;
    int n = poll(tp->pfd, (nfds_t)tp->npfd, s == UCS_OK ? ms : 1);
    if (n > 0) {
        for (int i = 1; i < tp->npfd; i++) {
            if (tp->pfd[i].revents) {
                tp->next_sentinel_ns = 0; /* read them in the next pass */
                break;
            }
        }
    } else if (n < 0 && errno != EINTR) {
        WEFT_LOG_WARN("transport", "poll: %s", strerror(errno));
    }
}
