/* The cluster tests' harness: weft processes started and reaped (every one killed if the
 * case fails or its watchdog fires), a coordinator with workers on ephemeral loopback ports,
 * the API client, and bounded waits. Included by one test program per suite; each case runs in
 * its own process. */
#ifndef WEFT_TESTS_E2E_HARNESS_H
#define WEFT_TESTS_E2E_HARNESS_H

#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>

#include "client/weft.h"
#include "test.h"

extern char **environ;

static const char *weft_bin;
static char tmp[256];
static pid_t children[64];
static int n_children;

static inline void kill_all(void)
{
    for (int i = 0; i < n_children; i++)
        if (children[i] > 0)
            kill(children[i], SIGKILL);
}

static inline void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "test_cluster: watchdog: the case did not finish in time\n";
    kill_all();
    (void)!write(2, msg, sizeof(msg) - 1);
    _exit(1);
}

static inline void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static inline double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Start weft with args and an extra environment entry; its stderr goes to log when not NULL. */
static inline pid_t run_weft(const char *const *args, const char *env_extra, const char *log)
{
    char *argv[40];
    int n = 0;
    argv[n++] = (char *)weft_bin;
    for (; *args && n < 38; args++)
        argv[n++] = (char *)*args;
    argv[n] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (log)
        posix_spawn_file_actions_addopen(&fa, 2, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    char *env[512];
    int k = 0;
    for (char **e = environ; *e && k < 510; e++)
        env[k++] = *e;
    if (env_extra)
        env[k++] = (char *)env_extra;
    env[k] = NULL;
    pid_t pid;
    CHECK(posix_spawn(&pid, weft_bin, &fa, NULL, argv, env) == 0);
    posix_spawn_file_actions_destroy(&fa);
    int slot = 0; /* a reaped child's slot, else a new one */
    while (slot < n_children && children[slot] > 0)
        slot++;
    CHECK(slot < (int)(sizeof(children) / sizeof(children[0])));
    children[slot] = pid;
    n_children += slot == n_children;
    return pid;
}

static inline int wait_pid(pid_t pid)
{
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    for (int i = 0; i < n_children; i++)
        if (children[i] == pid)
            children[i] = 0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The first line of a file (a log), or "" when there is none. */
static inline void read_text(const char *path, char *out, size_t len)
{
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    size_t n = fread(out, 1, len - 1, f);
    out[n] = '\0';
    fclose(f);
}

static const char *secret_env = "WEFT_CLUSTER_SECRET=test-secret-1";

/* Read host:port written by the server into path. */
static inline void wait_file(const char *path, char *out, size_t len)
{
    for (int i = 0; i < 600; i++) {
        FILE *f = fopen(path, "r");
        if (f) {
            char *got = fgets(out, (int)len, f);
            fclose(f);
            if (got && strchr(out, '\n')) {
                out[strcspn(out, "\n")] = '\0';
                return;
            }
        }
        sleep_ms(50);
    }
    CHECK(!"the server did not write its port file");
}

static inline pid_t start_server_with(char *api, char *workers, const char *ranks,
                               const char *const *extra)
{
    char pf[512], wf[512], j[600], o[600], w[64];
    snprintf(pf, sizeof(pf), "%s/api", tmp);
    snprintf(wf, sizeof(wf), "%s/workers", tmp);
    snprintf(j, sizeof(j), "--api.journal_dir=%s/journal", tmp);
    snprintf(o, sizeof(o), "--api.output_dir=%s/out", tmp);
    snprintf(w, sizeof(w), "--parallel.tp_degree=%s", ranks);
    unlink(pf), unlink(wf); /* a server before this one's (the files name its ports) */
    char log[512];
    snprintf(log, sizeof(log), "%s/serve.log", tmp);
    const char *args[32] = {"serve", "--runner", "cluster", "--listen", "127.0.0.1:0",
                            "--port-file", pf, "--worker-port-file", wf,
                            "--cluster.listen=127.0.0.1:0", "--cluster.worker_timeout_ms=3000",
                            "--cluster.heartbeat_ms=200", "--api.max_attempts=1", j, o, w};
    for (int n = 16; extra && *extra && n < 31; extra++)
        args[n++] = *extra;
    pid_t pid = run_weft(args, secret_env, log);
    wait_file(pf, api, 300);
    wait_file(wf, workers, 300);
    return pid;
}

static inline pid_t start_server(char *api, char *workers, const char *ranks)
{
    return start_server_with(api, workers, ranks, NULL);
}

static inline pid_t start_worker(const char *workers, const char *env, const char *log)
{
    const char *args[] = {"worker", "--coordinator", workers, "--kernels.threads=1", NULL};
    return run_weft(args, env, log);
}

static inline struct weft_client *client(const char *api)
{
    struct weft_client_opts o = {.address = api, .timeout_ms = 20000};
    struct weft_client *c;
    CHECK_OK(weft_client_connect(&o, &c));
    return c;
}

static inline bool cluster_ready(struct weft_client *c)
{
    char *text;
    CHECK_OK(weft_client_cluster(c, &text));
    cJSON *j = cJSON_Parse(text);
    bool ready = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "ready"));
    cJSON_Delete(j);
    weft_client_free(text);
    return ready;
}

static inline void submit(struct weft_client *c, int size, int steps, char *id)
{
    struct weft_prompt p = {.name = "red-fox"};
    struct weft_job_request req = {.prompts = &p, .n_prompts = 1, .height = size, .width = size,
                                   .steps = steps, .count = 1, .guidance = 3.5, .seed = 1};
    CHECK_OK(weft_client_submit(c, &req, id));
}

/* Until the cluster says ready (bounded). */
static inline void wait_ready(struct weft_client *c)
{
    for (int i = 0; i < 600 && !cluster_ready(c); i++)
        sleep_ms(50);
    CHECK(cluster_ready(c));
}

/* A coordinator (tensor-parallel degree `ranks`, extra options) and n workers (logs in
 * tmp/w<i>.log), ready, with a client. */
struct cluster {
    char api[300], workers[300];
    pid_t server, w[8];
    int n;
    struct weft_client *c;
};

static inline void cluster_up(struct cluster *k, const char *ranks, const char *const *extra,
                              int n)
{
    k->server = start_server_with(k->api, k->workers, ranks, extra);
    k->n = n;
    for (int i = 0; i < n; i++) {
        char wlog[512];
        snprintf(wlog, sizeof(wlog), "%s/w%d.log", tmp, i);
        k->w[i] = start_worker(k->workers, secret_env, wlog);
    }
    k->c = client(k->api);
    wait_ready(k->c);
}

/* SIGTERM the coordinator: it, and every worker not already gone (w[i] = 0), exit 0. */
static inline void cluster_down(struct cluster *k)
{
    weft_client_close(k->c);
    kill(k->server, SIGTERM);
    CHECK_EQ(wait_pid(k->server), 0);
    for (int i = 0; i < k->n; i++)
        if (k->w[i] > 0)
            CHECK_EQ(wait_pid(k->w[i]), 0); /* told to exit by the coordinator */
}

/* Until job id has run a step (bounded). */
static inline void wait_running(struct weft_client *c, const char *id)
{
    struct weft_job_status st = {0};
    for (int i = 0; i < 1500; i++) {
        weft_job_status_cleanup(&st);
        CHECK_OK(weft_client_status(c, id, &st));
        if (st.state == WEFT_JOB_RUNNING && st.step >= 1)
            break;
        sleep_ms(20);
    }
    CHECK(st.state == WEFT_JOB_RUNNING);
    weft_job_status_cleanup(&st);
}

/* Until job id runs (bounded), whatever its step. */
static inline void wait_started(struct weft_client *c, const char *id)
{
    struct weft_job_status st = {0};
    for (int i = 0; i < 3000; i++) {
        weft_job_status_cleanup(&st);
        CHECK_OK(weft_client_status(c, id, &st));
        if (st.state != WEFT_JOB_QUEUED)
            break;
        sleep_ms(10);
    }
    CHECK(st.state == WEFT_JOB_RUNNING);
    weft_job_status_cleanup(&st);
}

/* The harness's main: test BINARY CASE, the case chosen by name, a watchdog, a temporary
 * folder removed on success. */
struct harness_case {
    const char *name;
    int (*run)(void);
};

static inline int harness_main(int argc, char **argv, const struct harness_case *cases,
                               size_t n, unsigned watchdog_s)
{
    CHECK(argc == 3);
    weft_bin = argv[1];
    signal(SIGALRM, on_alarm);
    alarm(watchdog_s);
    atexit(kill_all);
    snprintf(tmp, sizeof(tmp), "/tmp/weft_test_cluster_XXXXXX");
    CHECK(mkdtemp(tmp));
    int rc = 2;
    for (size_t i = 0; i < n; i++)
        if (strcmp(argv[2], cases[i].name) == 0)
            rc = cases[i].run();
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
    if (rc == 0 && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    return rc;
}

#endif
