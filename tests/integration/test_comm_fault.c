/* A rank dies (SIGKILL) or goes silent (SIGSTOP) in the middle of a 64 MiB all-reduce (or
 * all-to-all): every survivor must return a "peer lost" status within the deadline, the group
 * must refuse further work with it, and nobody may hang or crash (the launcher kills and fails
 * a hung rank).
 *
 * usage: test_comm_fault kill|stop NP [shared|ucx|a2a|resume]
 *   The ranks share one host: the group takes the shared-memory path, on private buffers (read
 *   by CMA where the host allows it, else copied into the staging buffer), on shareable ones
 *   (shared: read in place, the all-reduce's sums written into every output), or UCX (ucx:
 *   [transport] shm off); a2a: an all-to-all of private buffers, which the peers read by CMA
 *   where the host allows it (checked). resume (stop 2): shareable buffers; the survivor stops
 *   the victim from outside while both are summing (so it stops inside the call, not between
 *   two tests of it), times out, fills its buffer and lets the victim run on: whatever the
 *   victim still writes into the survivor's output must not reach the buffer the survivor
 *   holds after its call failed. */
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "launch.h"
#include "test.h"

#define COUNT ((size_t)16 << 20) /* 64 MiB of f32 */

struct args {
    bool stop;   /* SIGSTOP instead of SIGKILL */
    bool resume; /* the survivor stops the victim, and resumes it once its own call failed */
    bool shared;
    bool a2a;
    bool cma; /* the host lets the ranks read each other by CMA */
    int victim;
    int timeout_ms;
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The collective under test on x (y: all-to-all's output). */
static weft_status_t start(const struct args *a, struct weft_comm *c, float *x, float *y,
                           struct weft_comm_req **req)
{
    int n = weft_comm_size(c);
    return a->a2a ? weft_comm_alltoall_start(c, x, y, COUNT / (size_t)n, WEFT_DTYPE_F32, req)
                  : weft_comm_allreduce_start(c, x, x, COUNT, WEFT_DTYPE_F32, req);
}

static weft_status_t run(const struct args *a, struct weft_comm *c, float *x, float *y)
{
    struct weft_comm_req *req = NULL;
    weft_status_t st = start(a, c, x, y, &req);
    return st == WEFT_OK ? weft_comm_wait(&req) : st;
}

static int rank_fn(struct weft_transport *tp, void *arg)
{
    const struct args *a = arg;
    weft_log_set_level(WEFT_LOG_LEVEL_ERROR);
    test_quiet(); /* the losses are logged as errors: expected here */
    struct weft_comm *world = weft_transport_world(tp);
    int me = weft_transport_rank(tp);
    CHECK(!a->a2a || weft_comm_uses_cma(world) == a->cma);
    float *x = a->shared ? weft_big_alloc_shared(COUNT * sizeof(float))
                         : weft_big_alloc(COUNT * sizeof(float));
    const int n = weft_transport_size(tp);
    float *y = a->a2a ? weft_big_alloc(COUNT * sizeof(float)) : NULL;
    CHECK(x && (y || !a->a2a));
    for (size_t i = 0; i < COUNT; i++)
        x[i] = a->a2a ? (float)me : 1.0f;
    /* one healthy round first: everyone is connected and warm */
    CHECK_OK(run(a, world, x, y));
    if (a->a2a)
        CHECK(y[0] == 0.0f && y[COUNT / (size_t)n * (size_t)n - 1] == (float)(n - 1));
    else
        CHECK(x[0] == (float)weft_transport_size(tp) && x[COUNT - 1] == x[0]);
    pid_t pids[16], mine = getpid();
    CHECK_OK(weft_comm_allgather(world, &mine, pids, sizeof(mine), WEFT_DTYPE_U8));
    const pid_t victim_pid = pids[a->victim];
    CHECK_OK(weft_comm_barrier(world));

    if (me == a->victim && a->resume) { /* stopped from outside, inside the call */
        weft_status_t vst = run(a, world, x, y);
        fprintf(stderr, "rank %d (resumed): allreduce returned '%s'\n", me, weft_status_str(vst));
        for (;;)
            pause();
    }
    if (me == a->victim) {
        struct weft_comm_req *req;
        CHECK_OK(start(a, world, x, y, &req));
        double t0 = now_ms();
        while (now_ms() - t0 < 3.0) /* a few ms into it: data is moving */
            CHECK(weft_comm_test(&req) == WEFT_INPROGRESS);
        raise(a->stop ? SIGSTOP : SIGKILL);
        /* SIGSTOP: the launcher kills us once the survivors are done */
        for (;;)
            pause();
    }

    double t0 = now_ms();
    weft_status_t st;
    if (a->resume) {
        struct weft_comm_req *req;
        CHECK_OK(start(a, world, x, y, &req));
        while (now_ms() - t0 < 2.0) /* both ranks summing */
            CHECK(weft_comm_test(&req) == WEFT_INPROGRESS);
        CHECK(kill(victim_pid, SIGSTOP) == 0);
        st = weft_comm_wait(&req);
    } else {
        st = run(a, world, x, y);
    }
    double dt = now_ms() - t0;
    fprintf(stderr, "rank %d: %s returned '%s' after %.1f ms\n", me,
            a->a2a ? "alltoall" : "allreduce", weft_status_str(st), dt);
    CHECK(WEFT_STATUS_IS_PEER_LOST(st));
    if (a->stop) {
        CHECK_EQ(st, WEFT_ERR_TIMEOUT);
        CHECK(dt >= a->timeout_ms * 0.9 && dt < a->timeout_ms + 1000);
    } else {
        /* seen through the liveness sockets, long before the deadline */
        CHECK_EQ(st, WEFT_ERR_PEER_LOST);
        CHECK(dt < a->timeout_ms / 2.0);
    }
    if (a->resume) {
        /* the buffer the survivor holds now is its own: the victim writes on when it resumes
         * (the rest of its step), then finds itself frozen */
        for (size_t i = 0; i < COUNT; i++)
            x[i] = 7.0f;
        CHECK(kill(victim_pid, SIGCONT) == 0);
        struct timespec pause_ts = {0, 300000000L};
        nanosleep(&pause_ts, NULL);
        size_t changed = 0;
        for (size_t i = 0; i < COUNT; i++)
            changed += x[i] != 7.0f;
        fprintf(stderr, "rank %d: %zu of %zu floats changed after the victim resumed\n", me,
                changed, COUNT);
        CHECK(changed == 0);
    }
    /* the group refuses further work with the same status, at once */
    CHECK_EQ(weft_comm_status(world), st);
    t0 = now_ms();
    CHECK_EQ(weft_comm_barrier(world), st);
    CHECK_EQ(weft_comm_allreduce(world, x, x, 4, WEFT_DTYPE_F32), st);
    CHECK(now_ms() - t0 < 100);
    /* a group without the victim still works */
    int others[16], k = 0;
    for (int r = 0; r < n; r++)
        if (r != a->victim)
            others[k++] = r;
    struct weft_comm *rest;
    CHECK_OK(weft_comm_create(tp, k, others, 9, &rest));
    for (size_t i = 0; i < 1024; i++)
        x[i] = 2.0f;
    CHECK_OK(weft_comm_allreduce(rest, x, x, 1024, WEFT_DTYPE_F32));
    CHECK(x[0] == 2.0f * (float)k && x[1023] == x[0]);
    weft_comm_destroy(rest);
    weft_big_free(x, COUNT * sizeof(float));
    weft_big_free(y, y ? COUNT * sizeof(float) : 0);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4 || (strcmp(argv[1], "kill") != 0 && strcmp(argv[1], "stop") != 0)) {
        fprintf(stderr, "usage: %s kill|stop NP [shared|ucx|a2a|resume]\n", argv[0]);
        return 2;
    }
    int np = atoi(argv[2]);
    CHECK(np >= 2 && np <= 16);
    struct args a = {.stop = strcmp(argv[1], "stop") == 0, .victim = np > 2 ? 2 : 1};
    struct weft_transport_opts opts;
    launch_opts(&opts);
    a.resume = argc == 4 && strcmp(argv[3], "resume") == 0;
    CHECK(!a.resume || (a.stop && np == 2));
    a.shared = argc == 4 && (strcmp(argv[3], "shared") == 0 || a.resume);
    a.a2a = argc == 4 && strcmp(argv[3], "a2a") == 0;
    a.cma = weft_transport_cma_allowed();
    if (argc == 4 && strcmp(argv[3], "ucx") == 0)
        opts.shm = false;
    else
        opts.shm_max = 0; /* the 64 MiB call on shared memory too */
    /* a SIGKILL must be seen well before this; a silent peer is caught by it */
    opts.timeout_ms = a.stop ? 1500 : 8000;
    a.timeout_ms = opts.timeout_ms;
    return launch_run(np, &opts, rank_fn, &a, 60, a.victim);
}
