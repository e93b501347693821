/* Faults on the running system (real processes, loopback): a flood of connections to the
 * worker port, a worker that stops advancing its job, a worker stopped past the coordinator's
 * patience and resumed. Nothing crashes, nothing hangs, every accepted job ends. One case per
 * process: test_fault WEFT_BINARY CASE. Every wait is bounded. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "harness.h"

/* n TCP connections to host:port (non-blocking connects), held open; some send a garbage
 * frame, some half a frame, some nothing. Returns how many were opened. */
static int flood(const char *hostport, int *fds, int n)
{
    char host[64];
    const char *colon = strrchr(hostport, ':');
    CHECK(colon && (size_t)(colon - hostport) < sizeof(host));
    snprintf(host, sizeof(host), "%.*s", (int)(colon - hostport), hostport);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    CHECK(inet_pton(AF_INET, host, &sa.sin_addr) == 1);
    int opened = 0;
    for (int i = 0; i < n; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fds[i] < 0)
            break;
        if (connect(fds[i], (struct sockaddr *)&sa, sizeof(sa)) != 0) {
            close(fds[i]);
            fds[i] = -1;
            continue;
        }
        opened++;
        static const char garbage[] = "\x10\x00\x00\x00{\"weft\": 1, \"hel";
        if (i % 3 == 1)
            (void)!write(fds[i], garbage, sizeof(garbage) - 1);
        else if (i % 3 == 2)
            (void)!write(fds[i], "\xff\xff\xff\x7f", 4); /* a frame far over the limit */
    }
    return opened;
}

static void close_all(int *fds, int n)
{
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

/* Hundreds of unauthenticated connections to the worker port while a job runs (the
 * coordinator aborted in libuv past 256): the job completes, the coordinator keeps serving,
 * refuses and counts what is over its bootstrap pool, and a worker still joins afterwards. */
static int case_flood(void)
{
    struct cluster k;
    const char *extra[] = {"--parallel.dp_degree=2", "--api.max_attempts=3", NULL};
    cluster_up(&k, "1", extra, 2);
    char id[WEFT_CLIENT_ID_MAX];
    submit(k.c, 256, 20, id);
    wait_running(k.c, id);
    static int fds[3][300];
    int opened = 0;
    for (int round = 0; round < 3; round++) /* more than the 256 slots the old code had */
        opened += flood(k.workers, fds[round], 300);
    printf("%d connections opened to the worker port during the job\n", opened);
    CHECK(opened >= 600);
    struct weft_job_status st = {0};
    CHECK_OK(weft_client_wait(k.c, id, 120000, NULL, NULL, &st));
    CHECK(st.state == WEFT_JOB_DONE);
    weft_job_status_cleanup(&st);
    /* one more job during the flood, and the cluster's view */
    submit(k.c, 128, 2, id);
    CHECK_OK(weft_client_wait(k.c, id, 60000, NULL, NULL, &st));
    CHECK(st.state == WEFT_JOB_DONE);
    weft_job_status_cleanup(&st);
    char *text;
    CHECK_OK(weft_client_cluster(k.c, &text));
    cJSON *j = cJSON_Parse(text);
    const cJSON *refused = cJSON_GetObjectItemCaseSensitive(j, "connections_refused");
    printf("coordinator alive; connections refused: %.0f\n",
           cJSON_IsNumber(refused) ? refused->valuedouble : -1);
    CHECK(cJSON_IsNumber(refused) && refused->valuedouble >= 300);
    cJSON_Delete(j);
    weft_client_free(text);
    for (int round = 0; round < 3; round++)
        close_all(fds[round], 300);
    /* a worker lost and a new one after the flood: planned in, a job completes on dp 2 */
    kill(k.w[1], SIGKILL);
    (void)wait_pid(k.w[1]);
    k.w[1] = 0;
    char wlog[512];
    snprintf(wlog, sizeof(wlog), "%s/w9.log", tmp);
    k.w[k.n++] = start_worker(k.workers, secret_env, wlog);
    double t0 = now_ms();
    bool two = false;
    for (int i = 0; i < 400 && !two; i++) {
        CHECK_OK(weft_client_cluster(k.c, &text));
        j = cJSON_Parse(text);
        const cJSON *dp = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(j, "mesh"), "dp");
        two = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "ready")) &&
              cJSON_IsNumber(dp) && dp->valuedouble == 2;
        cJSON_Delete(j);
        weft_client_free(text);
        if (!two)
            sleep_ms(50);
    }
    printf("a new worker joined after the flood: mesh dp 2 ready after %.0f ms\n",
           now_ms() - t0);
    CHECK(two);
    submit(k.c, 128, 2, id);
    CHECK_OK(weft_client_wait(k.c, id, 60000, NULL, NULL, &st));
    CHECK(st.state == WEFT_JOB_DONE);
    weft_job_status_cleanup(&st);
    cluster_down(&k);
    return 0;
}

/* The coordinator's count of stalled jobs. */
static double jobs_stalled(struct weft_client *c)
{
    char *text;
    CHECK_OK(weft_client_cluster(c, &text));
    cJSON *j = cJSON_Parse(text);
    const cJSON *stalled = cJSON_GetObjectItemCaseSensitive(j, "jobs_stalled");
    CHECK(cJSON_IsNumber(stalled));
    const double n = stalled->valuedouble;
    cJSON_Delete(j);
    weft_client_free(text);
    return n;
}

/* A job no worker advances (its worker stopped, but not for long enough to be lost: the
 * coordinator's patience for workers is long here) is taken back at its progress deadline and
 * runs again once the worker is back. The deadline is the longer of stall_timeout_ms and 10
 * steps (a step under ASan can take 0.3 s), so the worker stays stopped until the coordinator
 * says it took the job back (bounded). */
static int case_stall(void)
{
    struct cluster k;
    const char *extra[] = {"--cluster.stall_timeout_ms=600", "--api.max_attempts=3",
                           "--cluster.worker_timeout_ms=60000", NULL};
    cluster_up(&k, "1", extra, 1);
    char id[WEFT_CLIENT_ID_MAX];
    submit(k.c, 128, 30, id);
    wait_running(k.c, id);
    kill(k.w[0], SIGSTOP);
    const double t0 = now_ms();
    while (jobs_stalled(k.c) < 1 && now_ms() - t0 < 30000)
        sleep_ms(50);
    const double stopped_ms = now_ms() - t0;
    kill(k.w[0], SIGCONT);
    CHECK(jobs_stalled(k.c) >= 1);
    struct weft_job_status st = {0};
    CHECK_OK(weft_client_wait(k.c, id, 60000, NULL, NULL, &st));
    printf("a job whose worker stopped (stall deadline 0.6 s): taken back after %.1f s, %s "
           "after %d runs\n", stopped_ms / 1e3, weft_client_state_name(st.state), st.attempts);
    CHECK(st.state == WEFT_JOB_DONE && st.attempts >= 2);
    weft_job_status_cleanup(&st);
    cluster_down(&k);
    return 0;
}

/* tp 2: a worker SIGSTOPped mid-job past worker_timeout_ms, then resumed, five times. The
 * resumed worker abandons its old world without touching its peer's memory (it aborted in
 * UCX, or made its healthy peer abort, in 2 of 5 trials before), rejoins, and the job runs
 * again to the end; no process dies by a signal. */
static int case_resume(void)
{
    struct cluster k;
    const char *extra[] = {"--cluster.worker_timeout_ms=1500", "--api.max_attempts=3", NULL};
    cluster_up(&k, "2", extra, 2);
    for (int trial = 0; trial < 5; trial++) {
        char id[WEFT_CLIENT_ID_MAX];
        submit(k.c, 128, 20, id); /* the job cannot end while a tp rank is stopped */
        wait_running(k.c, id);
        const pid_t victim = k.w[trial % 2];
        kill(victim, SIGSTOP);
        sleep_ms(2500); /* past worker_timeout_ms: the coordinator drops it, resets its peer */
        kill(victim, SIGCONT);
        struct weft_job_status st = {0};
        CHECK_OK(weft_client_wait(k.c, id, 120000, NULL, NULL, &st));
        for (int i = 0; i < k.n; i++) {
            int status;
            CHECK(waitpid(k.w[i], &status, WNOHANG) == 0); /* every worker alive */
        }
        printf("trial %d: worker %d stopped 2.5 s and resumed: job %s after %d runs\n", trial,
               trial % 2, weft_client_state_name(st.state), st.attempts);
        CHECK(st.state == WEFT_JOB_DONE && st.n_images == 1 && st.attempts >= 2);
        weft_job_status_cleanup(&st);
        wait_ready(k.c);
    }
    cluster_down(&k);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct harness_case cases[] = {
        {"flood", case_flood},
        {"stall", case_stall},
        {"resume", case_resume},
    };
    return harness_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 280);
}
