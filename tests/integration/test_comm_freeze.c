/* Revocation (weft_transport_revoke) and freeze detection (opts.freeze_ms), with real processes.
 *
 * freeze NP ROUNDS: NP ranks run 16 MiB all-reduces in a loop. The harness SIGSTOPs the last
 * rank (the victim) in the middle of one, then tells the others over a pipe to give up on it,
 * as a coordinator's reset would: a second thread in each calls weft_transport_revoke, their
 * all-reduce must return at once, they destroy the world (which must not wait for the stopped
 * peer) and free their buffers, then reuse the memory and stay alive. Then the victim gets
 * SIGCONT after more than its freeze_ms: it must notice the freeze (one log line), abandon its
 * all-reduce with a peer-lost status (WEFT_ERR_TIMEOUT, or WEFT_ERR_PEER_LOST when it read the
 * survivors' revocation on its liveness sockets first) and never copy from the survivors' freed
 * memory (before revocation existed it aborted in UCX, process_vm_readv "Bad address", in
 * every round). Every process
 * must exit by itself with status 0. Odd rounds make the victim compute between all-reduces,
 * so the stop also lands outside the transport (the watchdog's case).
 *
 * wake: two ranks. Rank 0 waits in an all-reduce rank 1 never joins; a second thread revokes
 * the world: the all-reduce must return within a bounded time, every later call at once.
 * Rank 1, waiting for a message from rank 0, must see rank 0 lost long before its deadline.
 * First both stay idle for several freeze periods: an idle world is not a frozen one.
 *
 * usage: test_comm_freeze freeze NP ROUNDS | wake */
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "launch.h"
#include "test.h"

#define COUNT ((size_t)4 << 20) /* 16 MiB of f32 */
#define FREEZE_MS 250
#define TIMEOUT_MS 5000
#define STOP_MS 700         /* how long the victim stays stopped */
#define REVOKE_WAKE_MS 200  /* a revoked collective returns within this (2 shared cores) */
#define DESTROY_MAX_MS 500  /* a revoked world's destruction: no flush (that waits 2 s) */

struct args {
    struct weft_transport_opts opts;
    int victim;
    bool compute;           /* the victim computes between all-reduces */
    int up[2];              /* ranks -> harness: one byte per event */
    int cmd[LAUNCH_MAX][2]; /* harness -> rank: 'R' revoke, 'Q' quit */
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- freeze --------------------------------------------------------------------------- */

struct revoker {
    struct weft_transport *tp;
    int fd;
    _Atomic double at_ms; /* when revoke returned */
};

static void *revoker_main(void *arg)
{
    struct revoker *rv = arg;
    char c = 0;
    struct pollfd p = {.fd = rv->fd, .events = POLLIN};
    if (poll(&p, 1, 20000) == 1 && read(rv->fd, &c, 1) == 1 && c == 'R') {
        weft_transport_revoke(rv->tp, WEFT_ERR_PEER_LOST);
        atomic_store(&rv->at_ms, now_ms());
    }
    return NULL;
}

/* The victim's log: the freeze must be reported exactly once (the watchdog thread may say it). */
static atomic_int freeze_lines;

static void victim_sink(enum weft_log_level level, const char *subsys, const char *msg, void *arg)
{
    (void)level, (void)subsys, (void)arg;
    if (strstr(msg, "this process was frozen for") && strstr(msg, "world is abandoned"))
        atomic_fetch_add(&freeze_lines, 1);
    if (getenv("WEFT_TEST_VERBOSE"))
        fprintf(stderr, "%s\n", msg);
}

static void busy_ms(double ms)
{
    double t0 = now_ms();
    volatile unsigned x = 0;
    while (now_ms() - t0 < ms)
        x++;
}

/* Runs the protocol to the end whatever happens (so the harness sees aborts, not hangs), and
 * reports what was wrong in its exit code. */
static int freeze_child(int rank, int np, const char *where, void *arg)
{
    struct args *a = arg;
    weft_log_set_level(getenv("WEFT_TEST_VERBOSE") ? WEFT_LOG_LEVEL_DEBUG : WEFT_LOG_LEVEL_ERROR);
    test_quiet(); /* the freeze and the losses are logged as errors: expected */
    bool victim = rank == a->victim;
    if (victim)
        weft_log_set_sink(victim_sink, NULL);
    struct weft_transport *tp;
    CHECK_OK(weft_transport_create(&a->opts, rank, np, where, &tp, TERR));
    struct weft_comm *world = weft_transport_world(tp);
    struct revoker rv = {.tp = tp, .fd = a->cmd[rank][0]};
    pthread_t th;
    if (!victim)
        CHECK(pthread_create(&th, NULL, revoker_main, &rv) == 0);
    float *x = weft_big_alloc(COUNT * sizeof(float));
    CHECK(x);
    for (size_t i = 0; i < COUNT; i++)
        x[i] = 1.0f;
    CHECK_OK(weft_comm_allreduce(world, x, x, COUNT, WEFT_DTYPE_F32));
    CHECK(x[0] == (float)np && x[COUNT - 1] == x[0]);
    char b = 'U';
    CHECK(write(a->up[1], &b, 1) == 1);
    weft_status_t st;
    long n = 0;
    while ((st = weft_comm_allreduce(world, x, x, COUNT, WEFT_DTYPE_F32)) == WEFT_OK) {
        n++;
        if (victim && a->compute)
            busy_ms(15);
    }
    double ret = now_ms();
    int bad = 0;
    if (!victim) {
        CHECK(pthread_join(th, NULL) == 0);
        double wake = ret - atomic_load(&rv.at_ms);
        if (st != WEFT_ERR_PEER_LOST || wake > REVOKE_WAKE_MS) {
            fprintf(stderr, "rank %d: all-reduce returned '%s' %.1f ms after the revocation "
                    "(want 'peer lost' within %d ms)\n", rank, weft_status_str(st), wake,
                    REVOKE_WAKE_MS);
            bad = 1;
        }
    } else if (st != WEFT_ERR_TIMEOUT && st != WEFT_ERR_PEER_LOST) {
        fprintf(stderr, "rank %d (victim): all-reduce returned '%s' after the freeze (want "
                "'timed out' or 'peer lost')\n", rank, weft_status_str(st));
        bad = 1;
    }
    if (weft_comm_status(world) != st) {
        fprintf(stderr, "rank %d: the group's status is not the all-reduce's\n", rank);
        bad = 1;
    }
    double t0 = now_ms();
    weft_transport_destroy(tp);
    double dt = now_ms() - t0;
    if (dt > DESTROY_MAX_MS) {
        fprintf(stderr, "rank %d: destroying the revoked world took %.0f ms\n", rank, dt);
        bad = 1;
    }
    weft_big_free(x, COUNT * sizeof(float));
    if (victim && atomic_load(&freeze_lines) != 1) {
        fprintf(stderr, "rank %d (victim): the freeze was reported %d times (want once)\n", rank,
                atomic_load(&freeze_lines));
        bad = 1;
    }
    if (victim) {
        fprintf(stderr, "rank %d (victim): %ld all-reduces, then '%s'\n", rank, n,
                weft_status_str(st));
        return bad;
    }
    /* Give the freed range to something else (a resumed victim copying from it would read
     * garbage or fault), tell the harness, and stay alive until it says so. */
    size_t half = COUNT * sizeof(float) / 2;
    char *y = mmap(NULL, half, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(y != MAP_FAILED);
    memset(y, 0x5a, half);
    b = 'D';
    CHECK(write(a->up[1], &b, 1) == 1);
    struct pollfd p = {.fd = a->cmd[rank][0], .events = POLLIN};
    CHECK(poll(&p, 1, 20000) == 1);
    munmap(y, half);
    return bad;
}

/* Reads n bytes equal to want (any byte when want is 0) from the ranks within ms. */
static bool wait_up(struct launch *l, int fd, int n, char want, int ms)
{
    double end = now_ms() + ms;
    while (n > 0 && now_ms() < end) {
        launch_poll(l, 1);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        char b;
        if (poll(&p, 1, 1) == 1 && read(fd, &b, 1) == 1 && (!want || b == want))
            n--;
    }
    return n == 0;
}

static int freeze_round(struct args *a, int np, int round)
{
    a->compute = round % 2 == 1;
    for (int r = 0; r < np; r++)
        CHECK(pipe(a->cmd[r]) == 0);
    CHECK(pipe(a->up) == 0);
    struct launch l;
    CHECK(launch_start(&l, np, freeze_child, a) == 0);
    int rc = 0;
    pid_t v = l.pids[a->victim];
    if (!wait_up(&l, a->up[0], np, 'U', 20000)) {
        fprintf(stderr, "round %d: the ranks did not start\n", round);
        rc = 1;
    }
    usleep((useconds_t)(1000 + (round * 7919) % 25000)); /* land anywhere in an all-reduce */
    double t0 = now_ms();
    kill(v, SIGSTOP);
    int ws;
    CHECK(waitpid(v, &ws, WUNTRACED) == v && WIFSTOPPED(ws));
    for (int r = 0; r < np; r++)
        if (r != a->victim)
            CHECK(write(a->cmd[r][1], "R", 1) == 1);
    if (!rc && !wait_up(&l, a->up[0], np - 1, 'D', 10000)) {
        fprintf(stderr, "round %d: the survivors did not give up on the victim\n", round);
        rc = 1;
    }
    while (now_ms() - t0 < STOP_MS)
        launch_poll(&l, 5);
    kill(v, SIGCONT);
    while (l.status[a->victim] == -1 && now_ms() - t0 < STOP_MS + 10000)
        launch_poll(&l, 2);
    for (int r = 0; r < np; r++)
        if (r != a->victim)
            CHECK(write(a->cmd[r][1], "Q", 1) == 1);
    rc |= launch_finish(&l, 20, -1);
    for (int r = 0; r < np; r++) {
        close(a->cmd[r][0]);
        close(a->cmd[r][1]);
    }
    close(a->up[0]);
    close(a->up[1]);
    fprintf(stderr, "round %d (%s): %s\n", round, a->compute ? "victim computes" : "all-reduce "
            "loop", rc ? "FAIL" : "ok");
    return rc;
}

/* ---- wake ------------------------------------------------------------------------------ */

struct waker {
    struct weft_transport *tp;
    double before_ms, after_ms;
};

static void *waker_main(void *arg)
{
    struct waker *w = arg;
    usleep(300000); /* the owner is asleep in poll() by now */
    w->before_ms = now_ms();
    weft_transport_revoke(w->tp, WEFT_ERR_PEER_LOST);
    w->after_ms = now_ms();
    return NULL;
}

static int wake_rank(struct weft_transport *tp, void *arg)
{
    (void)arg;
    weft_log_set_level(WEFT_LOG_LEVEL_ERROR);
    test_quiet();
    struct weft_comm *world = weft_transport_world(tp);
    int me = weft_transport_rank(tp);
    float x[1024];
    for (int i = 0; i < 1024; i++)
        x[i] = 1.0f;
    /* idle for several freeze periods: the watchdog keeps the world alive */
    usleep(6 * 100 * 1000);
    CHECK_OK(weft_comm_allreduce(world, x, x, 1024, WEFT_DTYPE_F32));
    CHECK(x[0] == 2.0f);
    if (me == 1) {
        /* rank 0 never sends this: its revocation must end the wait, not the deadline */
        struct weft_comm_req *req;
        double t0 = now_ms();
        CHECK_OK(weft_comm_irecv(world, 0, 77, x, sizeof(float), &req));
        CHECK_EQ(weft_comm_wait(&req), WEFT_ERR_PEER_LOST);
        double dt = now_ms() - t0;
        fprintf(stderr, "rank 1: rank 0 seen lost after %.1f ms\n", dt);
        CHECK(dt < 1500); /* the deadline is 5 s */
        return 0;
    }
    struct waker w = {.tp = tp};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, waker_main, &w) == 0);
    weft_status_t st = weft_comm_allreduce(world, x, x, 1024, WEFT_DTYPE_F32);
    double ret = now_ms();
    CHECK(pthread_join(th, NULL) == 0);
    fprintf(stderr, "rank 0: revoke took %.3f ms; the all-reduce returned '%s' %.3f ms after "
            "it was called\n", w.after_ms - w.before_ms, weft_status_str(st),
            ret - w.before_ms);
    CHECK_EQ(st, WEFT_ERR_PEER_LOST);
    CHECK(w.after_ms - w.before_ms < 50);
    CHECK(ret - w.before_ms < REVOKE_WAKE_MS);
    /* every later call fails at once with the first status, a second revocation changes
     * nothing, a new group is born failed */
    weft_transport_revoke(tp, WEFT_ERR_TIMEOUT);
    double t0 = now_ms();
    CHECK_EQ(weft_comm_status(world), WEFT_ERR_PEER_LOST);
    CHECK_EQ(weft_comm_allreduce(world, x, x, 1024, WEFT_DTYPE_F32), WEFT_ERR_PEER_LOST);
    CHECK_EQ(weft_comm_barrier(world), WEFT_ERR_PEER_LOST);
    struct weft_comm_req *req;
    CHECK_EQ(weft_comm_isend(world, 1, 5, x, 4, &req), WEFT_ERR_PEER_LOST);
    CHECK_EQ(weft_transport_progress(tp), WEFT_ERR_PEER_LOST);
    int one = 0;
    struct weft_comm *self;
    CHECK_OK(weft_comm_create(tp, 1, &one, 3, &self));
    CHECK_EQ(weft_comm_status(self), WEFT_ERR_PEER_LOST);
    CHECK_EQ(weft_comm_barrier(self), WEFT_ERR_PEER_LOST);
    weft_comm_destroy(self);
    CHECK(now_ms() - t0 < 50);
    return 0; /* the launcher destroys the world: it must not flush (checked by its time) */
}

int main(int argc, char **argv)
{
    struct args a = {0};
    launch_opts(&a.opts);
    a.opts.timeout_ms = TIMEOUT_MS;
    if (argc == 2 && strcmp(argv[1], "wake") == 0) {
        a.opts.freeze_ms = 100;
        double t0 = now_ms();
        int rc = launch_run(2, &a.opts, wake_rank, NULL, 30, -1);
        fprintf(stderr, "wake: %.0f ms\n", now_ms() - t0);
        return rc;
    }
    if (argc != 4 || strcmp(argv[1], "freeze") != 0) {
        fprintf(stderr, "usage: %s freeze NP ROUNDS | wake\n", argv[0]);
        return 2;
    }
    int np = atoi(argv[2]), rounds = atoi(argv[3]);
    CHECK(np >= 2 && np <= 4 && rounds >= 1 && rounds <= 20);
    a.opts.freeze_ms = FREEZE_MS;
    a.victim = np - 1;
    int fails = 0;
    for (int i = 0; i < rounds; i++)
        fails += freeze_round(&a, np, i);
    fprintf(stderr, "%d of %d rounds failed\n", fails, rounds);
    return fails ? 1 : 0;
}
