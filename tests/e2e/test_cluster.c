/* The running system on real processes: `weft run` in every layout gives the image of one
 * device (pixels within one level), and dp 2 over 5 prompts the images of one replica;
 * `weft serve --runner cluster` with `weft worker`s: a SIGKILLed worker fails its job with a reason naming it, the coordinator keeps serving, plans
 * again when a worker comes back and the next job completes; a worker with the wrong secret is
 * refused. One case per process: test_cluster WEFT_BINARY CASE. Every wait is bounded. */
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
#include "png_diff.h"

extern char **environ;

static const char *weft_bin;
static char tmp[256];
static pid_t children[16];
static int n_children;

static void kill_all(void)
{
    for (int i = 0; i < n_children; i++)
        if (children[i] > 0)
            kill(children[i], SIGKILL);
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "test_cluster: watchdog: the case did not finish in time\n";
    kill_all();
    (void)!write(2, msg, sizeof(msg) - 1);
    _exit(1);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Start weft with args and an extra environment entry; its stderr goes to log when not NULL. */
static pid_t run_weft(const char *const *args, const char *env_extra, const char *log)
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
    children[n_children++] = pid;
    return pid;
}

static int wait_pid(pid_t pid)
{
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    for (int i = 0; i < n_children; i++)
        if (children[i] == pid)
            children[i] = 0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The one-device reference: `weft generate`, 256x256, 3 steps, red-fox, seed 7. */
static void one_device(char *ref, size_t len)
{
    snprintf(ref, len, "%s/ref.png", tmp);
    const char *gen[] = {"generate", "--height", "256", "--width", "256", "--steps", "3",
                         "--prompt-embeds", "red-fox", "--seed", "7", "--out", ref, NULL};
    CHECK_EQ(wait_pid(run_weft(gen, NULL, NULL)), 0);
}

/* `weft run` of the reference's job with opts (NULL-ended) and more prompts after red-fox;
 * image `check` (-1: the only one) against ref, within one level. */
static void run_vs_ref(const char *ref, const char *out, const char *const *opts,
                       const char *const *more, int check)
{
    const char *args[40] = {"run", "--height", "256", "--width", "256", "--steps", "3",
                            "--prompt", "red-fox", "--seed", "7", "--out", out};
    int n = 13;
    char label[160] = "";
    for (; *opts && n < 30; opts++) {
        args[n++] = *opts;
        snprintf(label + strlen(label), sizeof(label) - strlen(label), " %s", *opts);
    }
    for (; more && *more && n < 38; more++)
        args[n++] = *more;
    args[n] = NULL;
    CHECK_EQ(wait_pid(run_weft(args, NULL, NULL)), 0);
    char img[600];
    const char *dot = strrchr(out, '.');
    if (check >= 0)
        snprintf(img, sizeof(img), "%.*s-%d.png", (int)(dot - out), out, check);
    else
        snprintf(img, sizeof(img), "%s", out);
    int d = png_max_diff(ref, img);
    printf("weft run%s: max pixel difference to one device %d\n", label, d);
    CHECK(d <= 1);
}

/* Every layout's image against `weft generate` on one device, same seed and prompt. */
static int case_layouts(void)
{
    char ref[512], out[512];
    one_device(ref, sizeof(ref));
    static const char *const layouts[][5] = {
        {"--np", "1", NULL}, {"--tp", "2", NULL}, {"--ulysses", "2", NULL},
        {"--ring", "2", NULL}, {"--tp", "2", "--ulysses", "2", NULL},
        {"--ring", "2", "--ulysses", "2", NULL}, {"--tp", "2", "--ring", "2", NULL},
    };
    for (size_t l = 0; l < sizeof(layouts) / sizeof(layouts[0]); l++) {
        snprintf(out, sizeof(out), "%s/run%zu.png", tmp, l);
        run_vs_ref(ref, out, layouts[l], NULL, -1);
    }
    /* data parallelism: 5 prompts over 2 replicas (3 + 2, as split_between_processes) against
     * the same batch on one replica, image by image; image 0 is the one-device image */
    static const char *const batch[] = {"red-fox", "lighthouse", "city-night", "lighthouse",
                                        "red-fox"};
    for (int dp = 1; dp <= 2; dp++) {
        const char *args[40] = {"run", "--dp", dp == 1 ? "1" : "2", "--height", "256", "--width",
                                "256", "--steps", "3", "--seed", "7", "--out"};
        int n = 12;
        snprintf(out, sizeof(out), "%s/dp%d.png", tmp, dp);
        args[n++] = out;
        for (int i = 0; i < 5; i++) {
            args[n++] = "--prompt";
            args[n++] = batch[i];
        }
        args[n] = NULL;
        CHECK_EQ(wait_pid(run_weft(args, NULL, NULL)), 0);
    }
    for (int i = 0; i < 5; i++) {
        char one[512];
        snprintf(one, sizeof(one), "%s/dp1-%d.png", tmp, i);
        snprintf(out, sizeof(out), "%s/dp2-%d.png", tmp, i);
        int d = png_max_diff(one, out);
        printf("weft run --dp 2, 5 prompts: image %d (%s) max difference to one replica %d\n", i,
               batch[i], d);
        CHECK(d <= 1);
    }
    CHECK(png_max_diff(ref, out) > 8); /* the images differ from each other: not one image 5 times */
    snprintf(out, sizeof(out), "%s/dp2-0.png", tmp);
    CHECK(png_max_diff(ref, out) <= 1);
    return 0;
}

static const char *secret_env = "WEFT_CLUSTER_SECRET=test-secret-1";

/* Read host:port written by the server into path. */
static void wait_file(const char *path, char *out, size_t len)
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

static pid_t start_server_with(char *api, char *workers, const char *ranks,
                               const char *const *extra)
{
    char pf[512], wf[512], j[600], o[600], w[64];
    snprintf(pf, sizeof(pf), "%s/api", tmp);
    snprintf(wf, sizeof(wf), "%s/workers", tmp);
    snprintf(j, sizeof(j), "--api.journal_dir=%s/journal", tmp);
    snprintf(o, sizeof(o), "--api.output_dir=%s/out", tmp);
    snprintf(w, sizeof(w), "--parallel.tp_degree=%s", ranks);
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

static pid_t start_server(char *api, char *workers, const char *ranks)
{
    return start_server_with(api, workers, ranks, NULL);
}

static pid_t start_worker(const char *workers, const char *env, const char *log)
{
    const char *args[] = {"worker", "--coordinator", workers, "--kernels.threads=1", NULL};
    return run_weft(args, env, log);
}

static struct weft_client *client(const char *api)
{
    struct weft_client_opts o = {.address = api, .timeout_ms = 20000};
    struct weft_client *c;
    CHECK_OK(weft_client_connect(&o, &c));
    return c;
}

static bool cluster_ready(struct weft_client *c)
{
    char *text;
    CHECK_OK(weft_client_cluster(c, &text));
    cJSON *j = cJSON_Parse(text);
    bool ready = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "ready"));
    cJSON_Delete(j);
    weft_client_free(text);
    return ready;
}

static void submit(struct weft_client *c, int size, int steps, char *id)
{
    struct weft_prompt p = {.name = "red-fox"};
    struct weft_job_request req = {.prompts = &p, .n_prompts = 1, .height = size, .width = size,
                                   .steps = steps, .count = 1, .guidance = 3.5, .seed = 1};
    CHECK_OK(weft_client_submit(c, &req, id));
}

/* Until the cluster says ready (bounded). */
static void wait_ready(struct weft_client *c)
{
    for (int i = 0; i < 600 && !cluster_ready(c); i++)
        sleep_ms(50);
    CHECK(cluster_ready(c));
}

/* A coordinator (tensor-parallel degree `ranks`, extra options) and n workers (logs in
 * tmp/w<i>.log), ready, with a client. */
struct cluster {
    char api[300], workers[300];
    pid_t server, w[4];
    int n;
    struct weft_client *c;
};

static void cluster_up(struct cluster *k, const char *ranks, const char *const *extra, int n)
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
static void cluster_down(struct cluster *k)
{
    weft_client_close(k->c);
    kill(k->server, SIGTERM);
    CHECK_EQ(wait_pid(k->server), 0);
    for (int i = 0; i < k->n; i++)
        if (k->w[i] > 0)
            CHECK_EQ(wait_pid(k->w[i]), 0); /* told to exit by the coordinator */
}

/* Until job id has run a step (bounded). */
static void wait_running(struct weft_client *c, const char *id)
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

/* tp 2 on two workers; one SIGKILLed mid-job. */
static int case_kill(void)
{
    struct cluster k;
    cluster_up(&k, "2", NULL, 2);
    struct weft_client *c = k.c;
    char id[WEFT_CLIENT_ID_MAX];
    submit(c, 512, 100, id); /* long enough to be killed in the middle */
    wait_running(c, id);
    double t0 = now_ms();
    const pid_t killed = k.w[1];
    kill(killed, SIGKILL);
    (void)wait_pid(killed);
    k.w[1] = 0;
    struct weft_job_status st = {0};
    CHECK_OK(weft_client_wait(c, id, 60000, NULL, NULL, &st));
    printf("worker killed at step %d: job %s after %.0f ms, \"%s\"\n", st.step,
           weft_client_state_name(st.state), now_ms() - t0, st.error);
    CHECK(st.state == WEFT_JOB_FAILED);
    char named[32];
    snprintf(named, sizeof(named), "pid %d)", (int)killed);
    CHECK(strstr(st.error, named) && strstr(st.error, "lost"));
    weft_job_status_cleanup(&st);
    /* still serving; a replacement worker joins, the mesh is planned again, a job completes */
    CHECK(!cluster_ready(c));
    char wlog[512];
    snprintf(wlog, sizeof(wlog), "%s/w2.log", tmp);
    k.w[k.n++] = start_worker(k.workers, secret_env, wlog);
    wait_ready(c);
    submit(c, 256, 2, id);
    CHECK_OK(weft_client_wait(c, id, 120000, NULL, NULL, &st));
    printf("after a new worker joined: job %s\n", weft_client_state_name(st.state));
    CHECK(st.state == WEFT_JOB_DONE && st.n_images == 1);
    weft_job_status_cleanup(&st);
    /* the workers' all-reduces of tensor parallelism are in the metrics */
    int code;
    char *metrics;
    size_t mlen;
    CHECK_OK(weft_client_request(c, "GET", "/metrics", NULL, 0, &code, &metrics, &mlen));
    CHECK_EQ(code, 200);
    const char *calls =
        strstr(metrics, "weft_collective_calls_total{group=\"tp\",op=\"allreduce\"} ");
    CHECK(calls);
    double n_calls = strtod(strchr(calls, '}') + 2, NULL);
    printf("metrics: %.0f tensor-parallel all-reduces\n", n_calls);
    CHECK(n_calls >= 2 * 2 * 2); /* 2 steps x (at least 2 per block) x 2 ranks */
    weft_client_free(metrics);
    cluster_down(&k);
    return 0;
}

/* device_map: weft run with the transformer split by blocks over two workers (auto; balanced
 * with host memory) and with 2 replicas of 2 devices, each image against one device; the map
 * the API returns; device_map with tensor parallelism refused before anything loads. */
static int case_devmap(void)
{
    char ref[512], out[512];
    one_device(ref, sizeof(ref));
    static const char *const runs[][9] = {
        {"--np", "2", "--device-map", "auto", "--max-memory", "0:12MiB,1:12MiB", NULL},
        {"--np", "2", "--device-map", "balanced", "--max-memory", "0:8MiB,1:8MiB,cpu:1GiB", NULL},
        {"--np", "2", "--device-map", "balanced", NULL},
        {"--np", "4", "--dp", "2", "--device-map", "auto", "--max-memory", "0:12MiB,1:12MiB",
         NULL},
    };
    static const char *const more[] = {"--prompt", "lighthouse", "--prompt", "city-night", NULL};
    for (size_t l = 0; l < sizeof(runs) / sizeof(runs[0]); l++) {
        snprintf(out, sizeof(out), "%s/dm%zu.png", tmp, l);
        /* two replicas: three prompts, image 0 is red-fox */
        run_vs_ref(ref, out, runs[l], l == 3 ? more : NULL, l == 3 ? 0 : -1);
    }

    /* the map through the API */
    struct cluster kl;
    const char *extra[] = {"--device_map.strategy=auto", "--device_map.max_memory=0:12MiB",
                           "--cluster.workers=2", NULL};
    cluster_up(&kl, "1", extra, 2);
    struct weft_client *c = kl.c;
    char *text;
    CHECK_OK(weft_client_cluster(c, &text));
    cJSON *j = cJSON_Parse(text);
    CHECK(j);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(j, "device_map");
    const cJSON *emb = cJSON_GetObjectItemCaseSensitive(map, "transformer.embedders");
    const cJSON *out_l = cJSON_GetObjectItemCaseSensitive(map, "transformer.output");
    const cJSON *vae = cJSON_GetObjectItemCaseSensitive(map, "vae");
    CHECK(cJSON_IsString(emb) && cJSON_IsString(out_l) && cJSON_IsString(vae));
    printf("device_map from the API: embedders on %s, output layers on %s, vae on %s\n",
           emb->valuestring, out_l->valuestring, vae->valuestring);
    CHECK(strncmp(emb->valuestring, "device 0 (", 10) == 0);
    CHECK(strncmp(out_l->valuestring, "device 1 (", 10) == 0);
    CHECK(strncmp(vae->valuestring, "device 1 (", 10) == 0);
    /* each worker holds its part of the transformer only */
    double bytes[2] = {0};
    int k = 0;
    const cJSON *w;
    cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(j, "workers"))
    {
        const cJSON *tb = cJSON_GetObjectItemCaseSensitive(w, "transformer_bytes");
        CHECK(cJSON_IsNumber(tb) && k < 2);
        bytes[k++] = tb->valuedouble;
    }
    CHECK_EQ(k, 2);
    printf("transformer bytes per worker: %.0f + %.0f\n", bytes[0], bytes[1]);
    CHECK(bytes[0] > 0 && bytes[1] > 0 && bytes[0] <= 12.0 * 1048576);
    cJSON_Delete(j);
    weft_client_free(text);
    char id[WEFT_CLIENT_ID_MAX];
    submit(c, 256, 2, id);
    struct weft_job_status st = {0};
    CHECK_OK(weft_client_wait(c, id, 120000, NULL, NULL, &st));
    CHECK(st.state == WEFT_JOB_DONE && st.n_images == 1);
    weft_job_status_cleanup(&st);
    cluster_down(&kl);

    /* with tensor parallelism: refused at start, naming both */
    char log[512];
    snprintf(log, sizeof(log), "%s/refused.log", tmp);
    const char *tp[] = {"serve", "--runner", "cluster", "--listen", "127.0.0.1:0",
                        "--cluster.listen=127.0.0.1:0", "--parallel.tp_degree=2",
                        "--device_map.strategy=balanced", "--cluster.workers=2", NULL};
    CHECK(wait_pid(run_weft(tp, secret_env, log)) != 0);
    FILE *f = fopen(log, "r");
    char msg[4096] = "";
    CHECK(f);
    size_t n = fread(msg, 1, sizeof(msg) - 1, f);
    msg[n] = '\0';
    fclose(f);
    printf("device_map with tp 2: %s", msg);
    CHECK(strstr(msg, "cannot be combined with tensor parallelism"));
    return 0;
}

/* The coordinator SIGKILLed with a job running and one queued, then restarted on the same
 * ports and journal: the workers (never restarted) join it again and both jobs complete. */
static int case_restart(void)
{
    struct cluster k;
    const char *retry[] = {"--api.max_attempts=3", NULL};
    cluster_up(&k, "2", retry, 2);
    char id1[WEFT_CLIENT_ID_MAX], id2[WEFT_CLIENT_ID_MAX];
    submit(k.c, 512, 30, id1);
    submit(k.c, 256, 2, id2);
    wait_running(k.c, id1);
    weft_client_close(k.c);
    kill(k.server, SIGKILL);
    (void)wait_pid(k.server);
    /* the same worker port (workers know only it) and journal; a new API port is fine */
    char listen[340], pf[512];
    snprintf(listen, sizeof(listen), "--cluster.listen=%s", k.workers);
    snprintf(pf, sizeof(pf), "%s/api", tmp);
    unlink(pf);
    const char *again[] = {"--api.max_attempts=3", listen, NULL};
    double t0 = now_ms();
    k.server = start_server_with(k.api, k.workers, "2", again);
    k.c = client(k.api);
    wait_ready(k.c);
    printf("coordinator restarted: the workers joined it again after %.0f ms\n", now_ms() - t0);
    const char *ids[2] = {id1, id2};
    for (int i = 0; i < 2; i++) {
        struct weft_job_status st = {0};
        CHECK_OK(weft_client_wait(k.c, ids[i], 120000, NULL, NULL, &st));
        printf("job %s after the restart: %s\n", ids[i], weft_client_state_name(st.state));
        CHECK(st.state == WEFT_JOB_DONE && st.n_images == 1);
        weft_job_status_cleanup(&st);
    }
    cluster_down(&k);
    return 0;
}

/* dp 2 on two workers, one SIGKILLed mid-job: the job runs again on the replica left (the
 * mesh planned again as dp 1) and completes with every image. */
static int case_rerun(void)
{
    struct cluster k;
    const char *extra[] = {"--parallel.dp_degree=2", "--api.max_attempts=3", NULL};
    cluster_up(&k, "1", extra, 2);
    struct weft_prompt p[2] = {{.name = "red-fox"}, {.name = "lighthouse"}};
    struct weft_job_request req = {.prompts = p, .n_prompts = 2, .height = 256, .width = 256,
                                   .steps = 40, .count = 1, .guidance = 3.5, .seed = 3};
    char id[WEFT_CLIENT_ID_MAX];
    CHECK_OK(weft_client_submit(k.c, &req, id));
    wait_running(k.c, id);
    kill(k.w[1], SIGKILL);
    (void)wait_pid(k.w[1]);
    k.w[1] = 0;
    struct weft_job_status st = {0};
    CHECK_OK(weft_client_wait(k.c, id, 120000, NULL, NULL, &st));
    printf("a replica's worker killed mid-job: job %s with %zu images\n",
           weft_client_state_name(st.state), st.n_images);
    CHECK(st.state == WEFT_JOB_DONE && st.n_images == 2);
    weft_job_status_cleanup(&st);
    char *text;
    CHECK_OK(weft_client_cluster(k.c, &text));
    cJSON *j = cJSON_Parse(text);
    const cJSON *lost = cJSON_GetObjectItemCaseSensitive(j, "workers_lost");
    CHECK(cJSON_IsNumber(lost) && lost->valuedouble == 1);
    cJSON_Delete(j);
    weft_client_free(text);
    cluster_down(&k);
    return 0;
}

/* dp 2: two one-image jobs run side by side, one per replica (capacity is the free replicas). */
static int case_concurrent(void)
{
    struct cluster k;
    const char *extra[] = {"--parallel.dp_degree=2", NULL};
    cluster_up(&k, "1", extra, 2);
    char a[WEFT_CLIENT_ID_MAX], b[WEFT_CLIENT_ID_MAX];
    submit(k.c, 256, 30, a);
    submit(k.c, 256, 30, b);
    bool both = false;
    struct weft_job_status sa = {0}, sb = {0};
    for (int i = 0; i < 600 && !both; i++) {
        weft_job_status_cleanup(&sa), weft_job_status_cleanup(&sb);
        CHECK_OK(weft_client_status(k.c, a, &sa));
        CHECK_OK(weft_client_status(k.c, b, &sb));
        both = sa.state == WEFT_JOB_RUNNING && sb.state == WEFT_JOB_RUNNING;
        if (sa.state == WEFT_JOB_DONE || sb.state == WEFT_JOB_DONE)
            break;
        sleep_ms(10);
    }
    printf("two one-image jobs on dp 2: %s\n",
           both ? "running at the same time" : "one after the other");
    CHECK(both);
    for (int i = 0; i < 2; i++) {
        weft_job_status_cleanup(&sa);
        CHECK_OK(weft_client_wait(k.c, i ? b : a, 120000, NULL, NULL, &sa));
        CHECK(sa.state == WEFT_JOB_DONE && sa.n_images == 1);
    }
    weft_job_status_cleanup(&sa), weft_job_status_cleanup(&sb);
    cluster_down(&k);
    return 0;
}

/* A worker stopped (SIGSTOP: alive to the kernel, silent to us) with a job running, then the
 * coordinator told to stop: it gives the job up after a bounded wait, closes the silent
 * peer's endpoint and exits 0, the job kept in the journal. */
static int case_stopped(void)
{
    struct cluster k;
    const char *extra[] = {"--api.shutdown_grace_ms=300", NULL};
    cluster_up(&k, "1", extra, 1);
    char id[WEFT_CLIENT_ID_MAX];
    submit(k.c, 512, 100, id);
    wait_running(k.c, id);
    weft_client_close(k.c);
    kill(k.w[0], SIGSTOP);
    double t0 = now_ms();
    kill(k.server, SIGTERM);
    int rc = wait_pid(k.server);
    printf("coordinator stopped with a silent worker: exit %d after %.0f ms\n", rc,
           now_ms() - t0);
    CHECK_EQ(rc, 0);
    CHECK(now_ms() - t0 < 8000);
    kill(k.w[0], SIGKILL);
    (void)wait_pid(k.w[0]);
    return 0;
}

/* tp 2: a running job cancelled through the API stops at a step boundary on both workers
 * (state cancelled), and the next job runs on the same mesh. */
static int case_cancel(void)
{
    struct cluster k;
    cluster_up(&k, "2", NULL, 2);
    char id[WEFT_CLIENT_ID_MAX];
    submit(k.c, 512, 100, id);
    wait_running(k.c, id);
    double t0 = now_ms();
    CHECK_OK(weft_client_cancel(k.c, id));
    struct weft_job_status st = {0};
    CHECK_OK(weft_client_wait(k.c, id, 30000, NULL, NULL, &st));
    printf("cancelled at step %d of 100: %s after %.0f ms\n", st.step,
           weft_client_state_name(st.state), now_ms() - t0);
    CHECK(st.state == WEFT_JOB_CANCELLED && st.step < 100);
    weft_job_status_cleanup(&st);
    submit(k.c, 256, 2, id);
    CHECK_OK(weft_client_wait(k.c, id, 60000, NULL, NULL, &st));
    CHECK(st.state == WEFT_JOB_DONE && st.n_images == 1);
    weft_job_status_cleanup(&st);
    cluster_down(&k);
    return 0;
}

static int case_secret(void)
{
    char api[300], workers[300], wlog[512];
    pid_t server = start_server(api, workers, "1");
    snprintf(wlog, sizeof(wlog), "%s/bad.log", tmp);
    pid_t bad = start_worker(workers, "WEFT_CLUSTER_SECRET=not-the-secret", wlog);
    CHECK(wait_pid(bad) != 0);
    FILE *f = fopen(wlog, "r");
    char text[8192] = "";
    CHECK(f);
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    text[n] = '\0';
    fclose(f);
    printf("a worker with the wrong secret: %s", strstr(text, "refused") ? strstr(text, "refused")
                                                                        : text);
    CHECK(strstr(text, "wrong cluster secret"));
    /* and a good one still joins */
    pid_t good = start_worker(workers, secret_env, NULL);
    struct weft_client *c = client(api);
    wait_ready(c);
    weft_client_close(c);
    kill(server, SIGTERM);
    CHECK_EQ(wait_pid(server), 0);
    CHECK_EQ(wait_pid(good), 0);
    return 0;
}

int main(int argc, char **argv)
{
    CHECK(argc == 3);
    weft_bin = argv[1];
    signal(SIGALRM, on_alarm);
    alarm(240);
    atexit(kill_all);
    snprintf(tmp, sizeof(tmp), "/tmp/weft_test_cluster_XXXXXX");
    CHECK(mkdtemp(tmp));
    int rc = strcmp(argv[2], "layouts") == 0 ? case_layouts()
             : strcmp(argv[2], "kill") == 0  ? case_kill()
             : strcmp(argv[2], "secret") == 0 ? case_secret()
             : strcmp(argv[2], "devmap") == 0 ? case_devmap()
             : strcmp(argv[2], "restart") == 0 ? case_restart()
             : strcmp(argv[2], "rerun") == 0 ? case_rerun()
             : strcmp(argv[2], "concurrent") == 0 ? case_concurrent()
             : strcmp(argv[2], "stopped") == 0 ? case_stopped()
             : strcmp(argv[2], "cancel") == 0 ? case_cancel()
                                              : 2;
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
    if (rc == 0 && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    return rc;
}
