/* The per-process transport: UCX context and worker, bootstrap through the rendezvous,
 * endpoints to every rank, orderly shutdown. */
#include <errno.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucs/debug/log_def.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "transport/internal.h"

/* Shutdown waits at most this long for our last messages to leave. */
#define CLOSE_WAIT_MS 2000
/* The watchdog checks every freeze_ms / 4; a few ms of scheduling delay must not count. */
#define FREEZE_MIN_MS 20

/* UCX 1.13 aborts the process when a CMA copy fails (cma_ep.c: "process_vm_readv(pid=...)
 * returned -1: ..." at FATAL level) on an endpoint without UCX error handling, which ours are on
 * purpose (see sentinel.c). That abort is the log handler's doing: the transport itself returns
 * an I/O error for the copy. This filter, called before UCX's default handler, stops that
 * message in two cases, so the process carries on with a failed copy:
 *  - ESRCH, the peer process is gone: the liveness socket has already reported (or soon
 *    reports) the death, which fails the collective with WEFT_ERR_PEER_LOST;
 *  - EFAULT, the peer is alive but the buffer is gone, when weft_tp_cma_fault_expected() says
 *    the world is revoked, this process was just frozen, or a peer is lost or leaving: a peer
 *    that abandoned the world freed its buffers, or ours resumed a copy from a peer that had
 *    given up on us (revoke.c). Any other EFAULT is a bug and still aborts. */
/* Set while a transport that abandoned requests (to a lost peer) destroys its worker: UCX then
 * warns once per request ("was not returned to mpool", "unexpected tag-receive descriptor was
 * not matched"), which says nothing the failure did not already say. */
static int quiet_abandoned;

static ucs_log_func_rc_t ucx_log_filter(const char *file, unsigned line, const char *function,
                                        ucs_log_level_t level,
                                        const ucs_log_component_config_t *comp_conf,
                                        const char *message, va_list ap)
{
    (void)line, (void)function, (void)comp_conf;
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    if (quiet_abandoned && level == UCS_LOG_LEVEL_WARN &&
        (strcmp(base, "mpool.c") == 0 || strcmp(base, "tag_match.c") == 0))
        return UCS_LOG_FUNC_RC_STOP;
    if (level != UCS_LOG_LEVEL_FATAL || strcmp(base, "cma_ep.c") != 0)
        return UCS_LOG_FUNC_RC_CONTINUE;
    char text[512];
    va_list aq;
    va_copy(aq, ap);
    int n = vsnprintf(text, sizeof(text), message, aq); /* NOLINT(clang-analyzer-valist.Uninitialized) */
    va_end(aq);
    if (n < 0)
        return UCS_LOG_FUNC_RC_CONTINUE;
    if (strstr(text, strerror(ESRCH))) {
        WEFT_LOG_DEBUG("transport", "UCX: %s (the peer process is gone)", text);
        return UCS_LOG_FUNC_RC_STOP;
    }
    if (strstr(text, strerror(EFAULT)) && weft_tp_cma_fault_expected()) {
        WEFT_LOG_WARN("transport", "UCX: %s (a buffer of an abandoned world): the copy fails",
                      text);
        return UCS_LOG_FUNC_RC_STOP;
    }
    return UCS_LOG_FUNC_RC_CONTINUE;
}

static weft_status_t ucx_open(struct weft_transport *tp)
{
    static int filter_installed;
    if (!filter_installed) {
        ucs_log_push_handler(ucx_log_filter);
        filter_installed = 1;
    }
    struct weft_tp_ucx_params p = {
        .subsys = "transport",
        .name = "weft",
        .tls_key = "[transport] tls",
        .tls = tp->tls,
        .features = UCP_FEATURE_TAG,
        .estimated_eps = (size_t)tp->size,
    };
    struct weft_tp_ucx u;
    weft_status_t st = weft_tp_ucx_open(&p, &u);
    if (st != WEFT_OK)
        return st;
    tp->ctx = u.ctx;
    tp->worker = u.worker;
    tp->efd = u.efd;
    ucp_context_attr_t attr = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
    if (ucp_context_query(tp->ctx, &attr) == UCS_OK)
        tp->has_cuda = (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
    tp->pfd[0] = (struct pollfd){.fd = tp->efd, .events = POLLIN};
    return WEFT_OK;
}

/* Wait for UCX flush/close requests (NULL entries are done); false at the deadline. */
static bool ucx_reqs_wait(struct weft_transport *tp, void **reqs, int n, int64_t deadline)
{
    for (;;) {
        int pending = 0;
        for (int i = 0; i < n; i++) {
            if (!reqs[i])
                continue;
            if (ucp_request_check_status(reqs[i]) == UCS_INPROGRESS) {
                pending++;
                continue;
            }
            ucp_request_free(reqs[i]);
            reqs[i] = NULL;
        }
        if (!pending)
            return true;
        if (weft_tp_now_ns() > deadline || !weft_tp_ucx_enter(tp))
            return false;
        unsigned events = ucp_worker_progress(tp->worker);
        weft_tp_ucx_leave(tp);
        if (!events)
            weft_tp_sleep(tp, deadline);
    }
}

static weft_status_t eps_connect(struct weft_transport *tp, const struct weft_tp_table *table,
                                 int64_t deadline, struct weft_error *err)
{
    void **flush = weft_calloc((size_t)tp->size, sizeof(void *));
    if (!flush)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    weft_status_t st = WEFT_OK;
    for (int r = 0; r < tp->size && st == WEFT_OK; r++) {
        /* By worker address and with no UCX error handling: the only way UCX 1.13 uses shared
         * memory and CMA (see sentinel.c for how death is detected instead). */
        ucp_ep_params_t ep = {
            .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
            .address = table->peers[r].addr,
            .err_mode = UCP_ERR_HANDLING_MODE_NONE,
        };
        ucs_status_t s = ucp_ep_create(tp->worker, &ep, &tp->eps[r]);
        if (s != UCS_OK) {
            tp->eps[r] = NULL;
            st = weft_error_set(err, weft_tp_ucs_status(s), "transport", "endpoint to rank %d: %s",
                                r, ucs_status_string(s));
            break;
        }
        /* Flush before the first send: a send right after creation can hit a shared-memory
         * lane that is not wired up yet (openucx/ucx#6872, "Invalid am_short length"). */
        ucp_request_param_t fp = {0};
        ucs_status_ptr_t f = ucp_ep_flush_nbx(tp->eps[r], &fp);
        if (UCS_PTR_IS_ERR(f)) {
            st = weft_error_set(err, weft_tp_ucs_status(UCS_PTR_STATUS(f)), "transport",
                                "endpoint to rank %d: flush: %s", r,
                                ucs_status_string(UCS_PTR_STATUS(f)));
            break;
        }
        flush[r] = f;
    }
    if (st == WEFT_OK && !ucx_reqs_wait(tp, flush, tp->size, deadline))
        st = weft_error_set(err, WEFT_ERR_TIMEOUT, "transport",
                            "endpoints: wire-up not finished before the deadline");
    for (int r = 0; r < tp->size; r++)
        if (flush[r])
            ucp_request_free(flush[r]);
    weft_free(flush);
    return st;
}

static bool same_host(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return false;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                  &((const struct sockaddr_in6 *)b)->sin6_addr, 16) == 0;
}

/* CPUs in a list such as "0-3,8,10-11"; 0 when it does not parse. */
static int cpu_list_count(const char *s)
{
    int n = 0;
    while (*s && *s != '\n') {
        char *end;
        const long lo = strtol(s, &end, 10), hi = *end == '-' ? strtol(end + 1, &end, 10) : lo;
        if (end == s || hi < lo || hi - lo > 65536)
            return 0;
        n += (int)(hi - lo + 1);
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',' && *end != '\n')
            return 0;
    }
    return n;
}

/* The cores of this host the job may use: its cgroup's cpuset (v2, then v1), else the online
 * CPUs. A rank bound to fewer (taskset, a launcher's binding) shares these with the others. */
static int host_cores(void)
{
    static const char *const files[] = {"/sys/fs/cgroup/cpuset.cpus.effective",
                                        "/sys/fs/cgroup/cpuset/cpuset.effective_cpus"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        FILE *f = fopen(files[i], "r"); /* /proc and /sys report no size: stdio */
        char text[1024] = "";
        if (!f)
            continue;
        const bool got = fgets(text, sizeof(text), f) != NULL;
        (void)fclose(f);
        const int n = got ? cpu_list_count(text) : 0;
        if (n > 0)
            return n;
    }
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* spin_us = -1: poll before sleeping only when every rank on this host can have a core.
 * Measured on 2 cores: a 4 KiB all-reduce takes 0.9 us polling against 12.5 us sleeping at
 * once with 2 ranks, but with 4 ranks polling doubles the time of every size. Ranks that
 * reached the rendezvous from the same address count as this host's. The cores are the
 * host's (host_cores) or this rank's affinity, the larger: a rank bound to one core of a
 * two-core host beside one other rank may poll. */
static void spin_choose(struct weft_transport *tp, const struct weft_tp_table *table)
{
    int local = 0;
    for (int r = 0; r < tp->size; r++)
        local += same_host(&table->peers[r].sentinel, &table->peers[tp->rank].sentinel);
    cpu_set_t set;
    const int mine = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
    const int host = host_cores(), cores = host > mine ? host : mine;
    tp->opts.spin_us = local <= cores ? 50 : 0;
    WEFT_LOG_DEBUG("transport", "%d ranks on this host, %d cores (%d for this rank): waits "
                   "poll for %d us", local, cores, mine, tp->opts.spin_us);
}

/* A step below that logged its own cause: err gets the step and the status. */
static weft_status_t step_failed(struct weft_error *err, weft_status_t st, const char *what)
{
    return weft_error_refuse(err, st, "%s: %s", what, weft_status_str(st));
}

static weft_status_t bootstrap(struct weft_transport *tp, const char *rendezvous,
                               int64_t deadline, struct weft_error *err)
{
    int fd = -1, lfd = -1;
    uint16_t port;
    ucp_address_t *addr = NULL;
    size_t addr_len = 0;
    struct weft_tp_table table = {0};
    weft_status_t st = weft_tp_rdv_connect(rendezvous, deadline, &fd, err);
    if (st != WEFT_OK)
        return st;
    st = weft_tp_sentinel_listen(fd, tp->size, &lfd, &port);
    if (st != WEFT_OK) {
        step_failed(err, st, "the liveness socket");
        goto out;
    }
    ucs_status_t s = ucp_worker_get_address(tp->worker, &addr, &addr_len);
    if (s != UCS_OK) {
        st = weft_error_set(err, weft_tp_ucs_status(s), "transport", "UCX worker address: %s",
                            ucs_status_string(s));
        goto out;
    }
    st = weft_tp_rdv_exchange(fd, tp->rank, tp->size, port, addr, addr_len, deadline, &table,
                              err);
    ucp_worker_release_address(tp->worker, addr);
    if (st != WEFT_OK)
        goto out;
    if (tp->opts.spin_us < 0)
        spin_choose(tp, &table);
    close(fd);
    fd = -1;
    st = weft_tp_sentinel_mesh(tp, lfd, &table, deadline);
    if (st != WEFT_OK)
        step_failed(err, st, "the liveness mesh");
    else
        st = eps_connect(tp, &table, deadline, err);
out:
    weft_tp_table_free(&table);
    if (lfd >= 0)
        close(lfd);
    if (fd >= 0)
        close(fd);
    return st;
}

static weft_status_t opts_check(const struct weft_transport_opts *o, int rank, int size,
                                struct weft_error *err)
{
    if (!o || size < 1 || size > TAG_SRC_LIMIT || rank < 0 || rank >= size)
        return weft_error_set(err, WEFT_ERR_INVALID, "transport",
                              "rank %d of %d: out of range (at most %d ranks)", rank, size,
                              TAG_SRC_LIMIT);
    if (o->chunk_bytes < 4096 || o->pipeline_depth < 1 || o->pipeline_depth > 64 ||
        o->timeout_ms < 1 || o->spin_us < -1 || (unsigned)o->allreduce_algo >= WEFT_COMM_ALGO_COUNT ||
        (o->freeze_ms != 0 && o->freeze_ms < FREEZE_MIN_MS) ||
        (o->tls && strlen(o->tls) >= 256))
        return weft_error_set(err, WEFT_ERR_INVALID, "transport",
                              "transport options out of range (chunk_bytes %zu, pipeline_depth "
                              "%d, timeout_ms %d, freeze_ms %d: 0 or at least %d)",
                              o->chunk_bytes, o->pipeline_depth, o->timeout_ms, o->freeze_ms,
                              FREEZE_MIN_MS);
    return WEFT_OK;
}

weft_status_t weft_transport_create(const struct weft_transport_opts *opts, int rank, int size,
                                    const char *rendezvous, struct weft_transport **tp_p,
                                    struct weft_error *err)
{
    weft_status_t st = opts_check(opts, rank, size, err);
    if (st != WEFT_OK)
        return st;
    int64_t deadline = weft_tp_now_ns() + (int64_t)opts->timeout_ms * 1000000;
    struct weft_transport *tp = weft_calloc(1, sizeof(*tp));
    if (!tp)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    tp->opts = *opts;
    if (opts->tls)
        strcpy(tp->tls, opts->tls);
    tp->opts.tls = tp->tls;
    tp->rank = rank;
    tp->size = size;
    tp->efd = -1;
    tp->wake_fd = tp->watch_fd = -1;
    tp->eps = weft_calloc((size_t)size, sizeof(ucp_ep_h));
    tp->sock = weft_malloc((size_t)size * sizeof(int));
    tp->peer = weft_calloc((size_t)size, sizeof(*tp->peer));
    tp->pfd = weft_calloc((size_t)size + 2, sizeof(*tp->pfd));
    if (!tp->eps || !tp->sock || !tp->peer || !tp->pfd) {
        st = WEFT_ERR_NOMEM;
        goto err_tp;
    }
    for (int r = 0; r < size; r++) {
        tp->sock[r] = -1;
        tp->pfd[1 + r].fd = -1;
    }
    st = weft_tp_revoke_init(tp);
    if (st != WEFT_OK) {
        step_failed(err, st, "the transport's revocation channel");
        goto err_tp;
    }
    tp->npfd = size + 2;
    tp->pfd[1 + size] = (struct pollfd){.fd = tp->wake_fd, .events = POLLIN};
    st = ucx_open(tp);
    if (st != WEFT_OK) {
        step_failed(err, st, "UCX");
        goto err_tp;
    }
    st = bootstrap(tp, rendezvous, deadline, err);
    if (st != WEFT_OK)
        goto err_tp;
    int *all = weft_malloc((size_t)size * sizeof(int));
    if (!all) {
        st = WEFT_ERR_NOMEM;
        goto err_tp;
    }
    for (int r = 0; r < size; r++)
        all[r] = r;
    st = weft_tp_comm_new(tp, size, all, 0, &tp->world);
    weft_free(all);
    if (st == WEFT_OK)
        st = weft_tp_shm_setup(tp->world);
    if (st == WEFT_OK)
        st = weft_tp_watch_start(tp);
    if (st != WEFT_OK) {
        step_failed(err, st, "the world group");
        goto err_tp;
    }
    WEFT_LOG_DEBUG("transport", "rank %d of %d connected (UCX moves CUDA memory: %s)", rank,
                   size, tp->has_cuda ? "yes" : "no");
    *tp_p = tp;
    return WEFT_OK;

err_tp:
    if (st == WEFT_ERR_NOMEM)
        weft_error_refuse(err, st, "out of memory");
    weft_transport_destroy(tp);
    return st;
}

/* Let our last messages reach live peers, say goodbye, then close. A revoked world does none
 * of it (a flush or a polite close progresses UCX, which may copy from a peer's memory): it
 * closes its liveness sockets and leaves its endpoints to the worker's destruction, which
 * releases them without progress and without a word to the peers (ucp_worker_destroy; UCX
 * 1.13 refuses UCP_EP_CLOSE_FLAG_FORCE without UCX error handling). */
static void eps_close(struct weft_transport *tp)
{
    if (atomic_load(&tp->revoked)) {
        weft_tp_sentinel_close(tp);
        return;
    }
    int64_t deadline = weft_tp_now_ns() + (int64_t)CLOSE_WAIT_MS * 1000000;
    void **reqs = weft_calloc((size_t)tp->size, sizeof(void *));
    if (reqs && weft_tp_ucx_enter(tp)) {
        for (int r = 0; r < tp->size; r++) {
            if (!tp->eps[r] || tp->peer[r] == PEER_LOST)
                continue;
            ucp_request_param_t fp = {0};
            ucs_status_ptr_t f = ucp_ep_flush_nbx(tp->eps[r], &fp);
            reqs[r] = UCS_PTR_IS_ERR(f) ? NULL : f;
        }
        weft_tp_ucx_leave(tp);
        if (!ucx_reqs_wait(tp, reqs, tp->size, deadline))
            WEFT_LOG_WARN("transport", "shutdown: messages to some peers not delivered");
    }
    weft_tp_sentinel_close(tp);
    if (reqs) {
        bool closing = weft_tp_ucx_enter(tp); /* not when frozen meanwhile */
        for (int r = 0; r < tp->size; r++) {
            if (reqs[r])
                ucp_request_free(reqs[r]);
            reqs[r] = NULL;
            if (!closing || !tp->eps[r] || tp->peer[r] == PEER_LOST)
                continue; /* the worker's destruction releases it */
            ucp_request_param_t cp = {0};
            ucs_status_ptr_t c = ucp_ep_close_nbx(tp->eps[r], &cp);
            tp->eps[r] = NULL;
            reqs[r] = UCS_PTR_IS_ERR(c) ? NULL : c;
        }
        if (closing)
            weft_tp_ucx_leave(tp);
        (void)ucx_reqs_wait(tp, reqs, tp->size, deadline);
        weft_free(reqs);
    }
}

/* A revoked world whose UCX may still hold a queued copy (a receive it was filling when the
 * world was revoked): UCX cannot drop the copy without running it (no progress may run it now:
 * it would write into buffers the caller may have freed) and aborts when the worker is destroyed
 * with it queued. So the worker and its context stay, never called again, until the process
 * exits: some MiB of UCX's memory and a few descriptors, once per revocation that hit a
 * transfer. Our memory (scratch included) is freed: nothing will copy into it. */
struct kept_worker {
    ucp_context_h ctx;
    ucp_worker_h worker;
    void **zombies;              /* its requests still running */
    struct weft_tp_grave *graves; /* registrations of freed scratch */
    struct kept_worker *next;
};

/* Every worker left in place, for the process's lifetime (and reachable: leak checkers). */
static struct kept_worker *kept_workers;
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;

static void worker_keep(struct weft_transport *tp)
{
    WEFT_LOG_WARN("transport", "rank %d: %zu receive(s) were still copying when the world was "
                  "revoked: its UCX worker is left in place, unused, rather than destroyed "
                  "(UCX 1.13 cannot cancel a queued copy)", tp->rank, tp->n_zombies);
    weft_tp_graveyard_free(tp, true);
    struct kept_worker *k = weft_malloc(sizeof(*k));
    if (k) {
        *k = (struct kept_worker){tp->ctx, tp->worker, tp->zombies, tp->graveyard, NULL};
        pthread_mutex_lock(&kept_lock);
        k->next = kept_workers;
        kept_workers = k;
        pthread_mutex_unlock(&kept_lock);
    } else {
        weft_free(tp->zombies); /* no record: the worker stays all the same */
        while (tp->graveyard) {
            struct weft_tp_grave *g = tp->graveyard;
            tp->graveyard = g->next;
            weft_free(g);
        }
    }
    tp->zombies = NULL;
    tp->n_zombies = tp->cap_zombies = 0;
    tp->graveyard = NULL;
    tp->worker = NULL;
    tp->ctx = NULL;
}

void weft_transport_destroy(struct weft_transport *tp)
{
    if (!tp)
        return;
    weft_tp_watch_stop(tp);
    weft_tp_revoke_apply(tp); /* a revoked world's groups fail: their scratch is kept */
    bool abandoned = tp->graveyard != NULL || atomic_load(&tp->revoked);
    for (struct weft_comm *g = tp->groups; g; g = g->next)
        abandoned = abandoned || g->failed != WEFT_OK;
    while (tp->groups)
        weft_tp_comm_free(tp->groups);
    tp->world = NULL;
    if (tp->worker) {
        if (tp->eps && tp->peer && tp->sock && tp->pfd)
            eps_close(tp);
        if (atomic_load(&tp->revoked) && weft_tp_zombies_reap(tp) > 0) {
            worker_keep(tp); /* takes the worker, the context and the graveyard */
        } else {
            weft_tp_zombies_free(tp);
            quiet_abandoned = abandoned || tp->graveyard != NULL;
            ucp_worker_destroy(tp->worker);
            quiet_abandoned = 0;
        }
    }
    weft_tp_graveyard_free(tp, false);
    if (tp->ctx)
        ucp_cleanup(tp->ctx);
    if (tp->sock)
        for (int r = 0; r < tp->size; r++)
            if (tp->sock[r] >= 0)
                close(tp->sock[r]);
    weft_tp_reqs_free(tp);
    weft_free(tp->eps);
    weft_free(tp->sock);
    weft_free(tp->peer);
    weft_free(tp->pfd);
    weft_tp_revoke_cleanup(tp);
    weft_free(tp);
}

int weft_transport_rank(const struct weft_transport *tp)
{
    return tp->rank;
}

int weft_transport_size(const struct weft_transport *tp)
{
    return tp->size;
}

struct weft_comm *weft_transport_world(struct weft_transport *tp)
{
    return tp->world;
}

int weft_transport_has_cuda(const struct weft_transport *tp)
{
    return tp->has_cuda;
}
