/* weft-api-load: a load test of the job API (not a test: it prints figures for bench/README.md).
 *
 * Submits --jobs tiny jobs from --clients threads (each its own keep-alive connection, in a
 * bounded loop), waits for all of them, and checks that none was lost or duplicated: the server's
 * job list holds exactly the ids the submissions got back, each done with its image. Reports the
 * submit latency (p50, p99, max) and the accept and completion throughput.
 *
 * With --spawn it starts the server itself: `weft serve` with the local runner, or with
 * --cluster N `weft serve --runner cluster` and N `weft worker` processes (a fresh cluster secret
 * in their environment, a dp or tp mesh of N ranks), and waits until GET /v1/cluster says ready.
 * Whatever it started is stopped at the end, also when something failed: SIGTERM to the server
 * (which tells its workers to exit), every exit status checked, SIGKILL after a bounded grace.
 *
 *   weft-api-load --spawn build/weft [--cluster N [--mesh dp|tp]] [--jobs 200] [--clients 1]
 *                 [--no-journal]
 *   weft-api-load --server 127.0.0.1:8642 [--token T] ...   (a server with nothing else to do) */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>

#include "client/weft.h"

#define MAX_JOBS 100000
#define MAX_WORKERS 16
#define SERVE_GRACE_S 30.0  /* SIGTERM to the server, then SIGKILL */
#define WORKER_GRACE_S 15.0 /* after the server is gone, for its workers to exit by themselves */
#define READY_TIMEOUT_S 120.0

extern char **environ;

struct load {
    const char *server, *token;
    int jobs, clients, size, steps;
    double timeout_s; /* for every job to finish */
    char (*ids)[WEFT_CLIENT_ID_MAX];
    double *latency; /* seconds, per job */
    int failed;
    pthread_mutex_t mu;
};

struct worker {
    struct load *l;
    int first, n;
};

/* What --spawn started. A pid of 0 is a process not started or already reaped. */
struct procs {
    const char *weft;
    bool journal;
    int cluster; /* workers; 0: the local runner */
    const char *mesh;
    pid_t serve, workers[MAX_WORKERS];
    char dir[64], addr[512], worker_addr[512];
    char **env; /* the children's: ours with a fresh WEFT_CLUSTER_SECRET (cluster only) */
};

/* The server, for the signal handler: a SIGINT/SIGTERM to this program is forwarded to it, and
 * the normal path (its answers fail, then everything is stopped and reaped) does the rest. */
static volatile pid_t g_serve;
static volatile sig_atomic_t g_forwarded; /* stop() must not send a second SIGTERM (see there) */
static volatile sig_atomic_t g_interrupted;

static void on_signal(int sig)
{
    (void)sig;
    g_interrupted = 1;
    if (g_serve > 0 && !g_forwarded) {
        g_forwarded = 1;
        kill(g_serve, SIGTERM);
    }
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static void loadavg(char *out, size_t len)
{
    snprintf(out, len, "?");
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f)
        return;
    if (fgets(out, (int)len, f))
        out[strcspn(out, "\n")] = '\0';
    (void)fclose(f);
}

static void *submitter(void *arg)
{
    struct worker *w = arg;
    struct load *l = w->l;
    struct weft_client_opts o = {.address = l->server, .token = l->token, .timeout_ms = 60000};
    struct weft_client *c;
    if (weft_client_connect(&o, &c) != WEFT_OK) {
        pthread_mutex_lock(&l->mu);
        l->failed += w->n;
        pthread_mutex_unlock(&l->mu);
        return NULL;
    }
    static const char *const names[] = {"red-fox", "lighthouse", "city-night"};
    for (int i = w->first; i < w->first + w->n; i++) {
        struct weft_prompt p = {.name = names[i % 3]};
        struct weft_job_request r = {.prompts = &p, .n_prompts = 1, .height = l->size,
                                     .width = l->size, .steps = l->steps, .seed = (uint64_t)i};
        double t0 = now();
        weft_status_t st = weft_client_submit(c, &r, l->ids[i]);
        l->latency[i] = now() - t0;
        if (st != WEFT_OK) {
            fprintf(stderr, "submit %d: %s\n", i, weft_client_error(c));
            l->ids[i][0] = '\0';
            pthread_mutex_lock(&l->mu);
            l->failed++;
            pthread_mutex_unlock(&l->mu);
        }
    }
    weft_client_close(c);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

/* Wait (bounded) for every job to finish; returns the number done with their one image. */
static int wait_all(struct load *l, double deadline_s)
{
    struct weft_client_opts o = {.address = l->server, .token = l->token, .timeout_ms = 60000};
    struct weft_client *c;
    if (weft_client_connect(&o, &c) != WEFT_OK)
        return -1;
    int done = 0;
    double end = now() + deadline_s;
    struct weft_job_status st = {0};
    for (int i = 0; i < l->jobs; i++) {
        if (!l->ids[i][0])
            continue;
        if (now() >= end) {
            fprintf(stderr, "job %s and later: not waited for (--timeout)\n", l->ids[i]);
            break;
        }
        if (weft_client_wait(c, l->ids[i], (int)((end - now()) * 1000) + 1, NULL, NULL, &st) !=
            WEFT_OK) {
            fprintf(stderr, "job %s: %s\n", l->ids[i], weft_client_error(c));
            break;
        }
        if (st.state == WEFT_JOB_DONE && st.n_images == 1)
            done++;
        else
            fprintf(stderr, "job %s: %s with %zu image(s)%s%s\n", l->ids[i],
                    weft_client_state_name(st.state), st.n_images, st.error[0] ? ": " : "",
                    st.error);
    }
    weft_job_status_cleanup(&st);
    weft_client_close(c);
    return done;
}

/* The server lists exactly our ids, once each. */
static int check_list(struct load *l)
{
    struct weft_client_opts o = {.address = l->server, .token = l->token, .timeout_ms = 60000};
    struct weft_client *c;
    if (weft_client_connect(&o, &c) != WEFT_OK)
        return -1;
    int code, bad = 0;
    char *list = NULL;
    if (weft_client_request(c, "GET", "/v1/jobs", NULL, 0, &code, &list, NULL) != WEFT_OK ||
        code != 200) {
        fprintf(stderr, "GET /v1/jobs: %s\n", weft_client_error(c));
        weft_client_free(list);
        weft_client_close(c);
        return -1;
    }
    int listed = count(list, "\"id\"");
    for (int i = 0; i < l->jobs; i++)
        if (l->ids[i][0] && count(list, l->ids[i]) != 1)
            bad++;
    weft_client_free(list);
    weft_client_close(c);
    printf("server lists %d jobs; %d of ours missing or repeated\n", listed, bad);
    return bad == 0 && listed == l->jobs - l->failed ? 0 : 1;
}

/* Start argv with stderr (and stdout) to log. The child dies with this program (PDEATHSIG) and
 * has its own process group, so a terminal's ^C reaches only us (we forward it to the server). */
static pid_t start(char *const argv[], const char *log, char **env)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0 || setpgid(0, 0) != 0 ||
            prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
            _exit(127);
        execve(argv[0], argv, env);
        _exit(127);
    }
    if (pid < 0)
        fprintf(stderr, "weft-api-load: fork: %s\n", strerror(errno));
    return pid < 0 ? 0 : pid;
}

static void describe(int status, char *out, size_t len)
{
    if (WIFEXITED(status))
        snprintf(out, len, "exited with status %d%s", WEXITSTATUS(status),
                 WEXITSTATUS(status) == 127 ? " (could not start)" : "");
    else if (WIFSIGNALED(status))
        snprintf(out, len, "was killed by signal %d", WTERMSIG(status));
    else
        snprintf(out, len, "ended with wait status 0x%x", (unsigned)status);
}

/* Reap pid within grace_s, else SIGKILL it. Returns 0 when it exited 0. */
static int reap(pid_t *pid, double grace_s, const char *what)
{
    if (*pid <= 0)
        return 0;
    int status = 0;
    pid_t got = 0;
    for (double end = now() + grace_s; (got = waitpid(*pid, &status, WNOHANG)) == 0 && now() < end;)
        nap_ms(20);
    int rc = 0;
    if (got == 0) {
        fprintf(stderr, "%s (pid %d) still running after %.0f s: SIGKILL\n", what, (int)*pid,
                grace_s);
        kill(*pid, SIGKILL);
        (void)waitpid(*pid, &status, 0);
        rc = 1;
    } else if (got < 0) {
        fprintf(stderr, "%s (pid %d): waitpid: %s\n", what, (int)*pid, strerror(errno));
        rc = 1;
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        char how[64];
        describe(status, how, sizeof(how));
        fprintf(stderr, "%s (pid %d) %s\n", what, (int)*pid, how);
        rc = 1;
    }
    *pid = 0;
    return rc;
}

/* Whether any child has exited (it is reaped and reported: a failure). */
static bool any_exited(struct procs *p)
{
    bool gone = false;
    pid_t *all[MAX_WORKERS + 1] = {&p->serve};
    for (int i = 0; i < p->cluster; i++)
        all[i + 1] = &p->workers[i];
    for (int i = 0; i <= p->cluster; i++) {
        int status;
        if (*all[i] > 0 && waitpid(*all[i], &status, WNOHANG) == *all[i]) {
            char what[32] = "weft serve", how[64];
            if (i)
                snprintf(what, sizeof(what), "weft worker %d", i - 1);
            describe(status, how, sizeof(how));
            fprintf(stderr, "%s (pid %d) %s before the load began\n", what, (int)*all[i], how);
            if (i == 0)
                g_serve = 0;
            *all[i] = 0;
            gone = true;
        }
    }
    return gone;
}

/* Read "host:port" from a file the server writes once it listens. */
static int wait_file(struct procs *p, const char *path, char *out, size_t len)
{
    for (double end = now() + 60; now() < end; nap_ms(50)) {
        FILE *f = fopen(path, "r");
        if (f) {
            bool ok = fgets(out, (int)len, f) != NULL && strchr(out, '\n');
            (void)fclose(f);
            if (ok) {
                out[strcspn(out, "\n")] = '\0';
                return 0;
            }
        }
        if (any_exited(p))
            return -1;
    }
    fprintf(stderr, "weft serve did not write %s within 60 s\n", path);
    return -1;
}

/* Ours plus WEFT_CLUSTER_SECRET=<64 hex digits of /dev/urandom>, never on a command line. */
static char **cluster_env(void)
{
    static char var[100];
    unsigned char raw[32];
    FILE *f = fopen("/dev/urandom", "rb");
    bool ok = f && fread(raw, 1, sizeof(raw), f) == sizeof(raw);
    if (f)
        (void)fclose(f);
    if (!ok)
        return NULL;
    int n = snprintf(var, sizeof(var), "WEFT_CLUSTER_SECRET=");
    for (size_t i = 0; i < sizeof(raw); i++)
        n += snprintf(var + n, sizeof(var) - (size_t)n, "%02x", raw[i]);
    size_t k = 0, count_env = 0;
    while (environ[count_env])
        count_env++;
    char **env = calloc(count_env + 2, sizeof(*env));
    if (!env)
        return NULL;
    for (size_t i = 0; i < count_env; i++)
        if (strncmp(environ[i], "WEFT_CLUSTER_SECRET=", 20) != 0)
            env[k++] = environ[i];
    env[k] = var;
    return env;
}

static int json_int(const cJSON *o, const char *key)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(x) ? x->valueint : -1;
}

/* Poll GET /v1/cluster until it says ready with the mesh asked for. */
static int wait_ready(struct procs *p)
{
    struct weft_client_opts o = {.address = p->addr, .timeout_ms = 10000};
    struct weft_client *c;
    if (weft_client_connect(&o, &c) != WEFT_OK)
        return -1;
    int rc = -1;
    double t0 = now();
    while (rc < 0 && now() - t0 < READY_TIMEOUT_S && !any_exited(p)) {
        char *json = NULL;
        if (weft_client_cluster(c, &json) != WEFT_OK) {
            fprintf(stderr, "GET /v1/cluster: %s\n", weft_client_error(c));
            break;
        }
        cJSON *j = cJSON_Parse(json), *mesh = cJSON_GetObjectItem(j, "mesh");
        const cJSON *err = cJSON_GetObjectItemCaseSensitive(j, "error");
        weft_client_free(json);
        if (cJSON_IsString(err)) { /* a plan that failed is not retried: no use waiting */
            fprintf(stderr, "the cluster cannot plan its mesh: %s\n", err->valuestring);
            rc = 1;
        } else if (cJSON_IsTrue(cJSON_GetObjectItem(j, "ready"))) {
            int dp = json_int(mesh, "dp"), tp = json_int(mesh, "tp");
            int nw = cJSON_GetArraySize(cJSON_GetObjectItem(j, "workers"));
            bool want_dp = strcmp(p->mesh, "dp") == 0;
            printf("cluster ready in %.1f s: %d workers, mesh dp %d x tp %d\n", now() - t0, nw,
                   dp, tp);
            rc = nw == p->cluster && dp == (want_dp ? p->cluster : 1) &&
                         tp == (want_dp ? 1 : p->cluster)
                     ? 0
                     : 1;
            if (rc)
                fprintf(stderr, "not the mesh asked for (%s %d)\n", p->mesh, p->cluster);
        }
        cJSON_Delete(j);
        if (rc < 0)
            nap_ms(100);
    }
    if (rc < 0)
        fprintf(stderr, "the cluster was not ready within %.0f s\n", READY_TIMEOUT_S);
    weft_client_close(c);
    return rc == 0 ? 0 : -1;
}

/* Start the server (and the cluster's workers) and wait until it can run jobs. */
static int spawn(struct procs *p)
{
    snprintf(p->dir, sizeof(p->dir), "/tmp/weft-api-load-XXXXXX");
    if (!mkdtemp(p->dir)) {
        p->dir[0] = '\0';
        return -1;
    }
    char port[128], wport[128], jd[128], od[128], log[128], workers[64], degree[64];
    snprintf(port, sizeof(port), "%s/port", p->dir);
    snprintf(wport, sizeof(wport), "%s/worker-port", p->dir);
    snprintf(jd, sizeof(jd), "--api.journal_dir=%s", p->journal ? p->dir : "none");
    snprintf(od, sizeof(od), "--api.output_dir=%s/jobs", p->dir);
    snprintf(log, sizeof(log), "%s/serve.log", p->dir);
    snprintf(workers, sizeof(workers), "--cluster.workers=%d", p->cluster);
    snprintf(degree, sizeof(degree), "--parallel.%s_degree=%d", p->mesh, p->cluster);
    char *argv[] = {(char *)p->weft, "serve", "--listen=127.0.0.1:0", "--port-file", port, jd,
                    od, "--api.max_queue=1000000", "--api.keep_jobs=1000000",
                    /* cluster only: */ "--runner", "cluster", "--worker-port-file", wport,
                    "--cluster.listen=127.0.0.1:0", workers, degree, NULL};
    if (!p->cluster)
        argv[9] = NULL;
    else if (!(p->env = cluster_env()))
        return -1;
    g_serve = p->serve = start(argv, log, p->env ? p->env : environ);
    if (!p->serve || wait_file(p, port, p->addr, sizeof(p->addr)))
        return -1;
    if (!p->cluster)
        return 0;
    if (wait_file(p, wport, p->worker_addr, sizeof(p->worker_addr)))
        return -1;
    for (int i = 0; i < p->cluster; i++) {
        char *wargv[] = {(char *)p->weft, "worker", "--coordinator", p->worker_addr,
                         "--kernels.threads=1", NULL};
        snprintf(log, sizeof(log), "%s/worker-%d.log", p->dir, i);
        if (!(p->workers[i] = start(wargv, log, p->env)))
            return -1;
    }
    return wait_ready(p);
}

/* Stop everything started: SIGTERM to the server, which tells its workers to exit; every exit
 * status checked; SIGKILL after a bounded grace. The folder is removed when all went well. */
static int stop(struct procs *p, bool ok)
{
    int rc = 0;
    if (p->serve > 0) {
        /* Once: a second signal would stop running jobs at once, and one that arrives after
         * the server's loop has closed its signal handles kills it (status: SIGTERM). */
        sigset_t block, old;
        sigemptyset(&block);
        sigaddset(&block, SIGINT);
        sigaddset(&block, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &block, &old);
        if (!g_forwarded) {
            g_forwarded = 1;
            kill(p->serve, SIGTERM);
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        rc |= reap(&p->serve, SERVE_GRACE_S, "weft serve");
        g_serve = 0;
    }
    double end = now() + WORKER_GRACE_S;
    for (int i = 0; i < p->cluster; i++) {
        char what[64];
        snprintf(what, sizeof(what), "weft worker %d", i);
        double left = end - now();
        rc |= reap(&p->workers[i], left > 0 ? left : 0, what);
    }
    if (p->dir[0] && ok && rc == 0) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", p->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", p->dir);
    } else if (p->dir[0]) {
        fprintf(stderr, "logs kept in %s\n", p->dir);
    }
    free(p->env);
    return rc;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: weft-api-load (--spawn WEFT_BINARY [--cluster N [--mesh dp|tp]] "
            "[--no-journal]\n"
            "                      | --server ADDR [--token T])\n"
            "                     [--jobs N] [--clients N] [--size PX] [--steps N] "
            "[--timeout S]\n");
}

static int parse(int argc, char **argv, struct load *l, struct procs *p)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--spawn") == 0 && v)
            p->weft = argv[++i];
        else if (strcmp(a, "--cluster") == 0 && v)
            p->cluster = atoi(argv[++i]);
        else if (strcmp(a, "--mesh") == 0 && v)
            p->mesh = argv[++i];
        else if (strcmp(a, "--server") == 0 && v)
            l->server = argv[++i];
        else if (strcmp(a, "--token") == 0 && v)
            l->token = argv[++i];
        else if (strcmp(a, "--jobs") == 0 && v)
            l->jobs = atoi(argv[++i]);
        else if (strcmp(a, "--clients") == 0 && v)
            l->clients = atoi(argv[++i]);
        else if (strcmp(a, "--size") == 0 && v)
            l->size = atoi(argv[++i]);
        else if (strcmp(a, "--steps") == 0 && v)
            l->steps = atoi(argv[++i]);
        else if (strcmp(a, "--timeout") == 0 && v)
            l->timeout_s = atof(argv[++i]);
        else if (strcmp(a, "--no-journal") == 0)
            p->journal = false;
        else
            return -1;
    }
    bool mesh_ok = strcmp(p->mesh, "dp") == 0 || strcmp(p->mesh, "tp") == 0;
    if ((!p->weft == !l->server) || l->jobs < 1 || l->jobs > MAX_JOBS || l->clients < 1 ||
        l->clients > 64 || l->clients > l->jobs || p->cluster < 0 ||
        p->cluster > MAX_WORKERS || (p->cluster && !p->weft) || !mesh_ok || l->timeout_s <= 0)
        return -1;
    return 0;
}

/* Submit from the client threads, wait for all, check; prints the figures. */
static int run(struct load *l, const char *runner, const char *journal)
{
    struct worker w[64];
    pthread_t th[64];
    int started = 0, rc = 0;
    char load0[128], load1[128];
    loadavg(load0, sizeof(load0));
    double t0 = now();
    for (int k = 0; k < l->clients; k++) {
        int per = l->jobs / l->clients, extra = l->jobs % l->clients;
        w[k] = (struct worker){l, k * per + (k < extra ? k : extra), per + (k < extra)};
        if (pthread_create(&th[k], NULL, submitter, &w[k]) != 0) {
            fprintf(stderr, "weft-api-load: cannot start client thread %d\n", k);
            pthread_mutex_lock(&l->mu); /* the jobs not handed out count as failed */
            l->failed += l->jobs - w[k].first;
            pthread_mutex_unlock(&l->mu);
            rc = 1;
            break;
        }
        started++;
    }
    for (int k = 0; k < started; k++)
        pthread_join(th[k], NULL);
    double t_sub = now() - t0;
    int done = wait_all(l, l->timeout_s);
    double t_all = now() - t0;
    loadavg(load1, sizeof(load1));
    rc |= check_list(l) != 0;
    qsort(l->latency, (size_t)l->jobs, sizeof(double), cmp_double);
    printf("%d jobs (%dx%d, %d step%s), %d client%s, %s, journal %s\n", l->jobs, l->size,
           l->size, l->steps, l->steps == 1 ? "" : "s", l->clients, l->clients == 1 ? "" : "s",
           runner, journal);
    printf("submit latency: p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
           l->latency[l->jobs / 2] * 1e3, l->latency[(int)(l->jobs * 0.99)] * 1e3,
           l->latency[l->jobs - 1] * 1e3);
    printf("accepted %d in %.2f s (%.0f jobs/s); all %d done in %.2f s (%.1f jobs/s); "
           "failed submissions %d\n",
           l->jobs - l->failed, t_sub, (l->jobs - l->failed) / t_sub, done, t_all,
           done / t_all, l->failed);
    printf("load average at start: %s; at end: %s\n", load0, load1);
    if (done != l->jobs - l->failed || l->failed)
        rc = 1;
    return rc;
}

int main(int argc, char **argv)
{
    static struct load l = {.jobs = 200, .clients = 1, .size = 32, .steps = 1, .timeout_s = 3600};
    static struct procs p = {.journal = true, .mesh = "dp"};
    if (parse(argc, argv, &l, &p)) {
        usage();
        return 2;
    }
    l.ids = calloc((size_t)l.jobs, sizeof(*l.ids));
    l.latency = calloc((size_t)l.jobs, sizeof(double));
    if (!l.ids || !l.latency) {
        fprintf(stderr, "weft-api-load: out of memory\n");
        return 1;
    }
    pthread_mutex_init(&l.mu, NULL);
    char runner[64] = "server's runner";
    int rc = 1;
    if (p.weft) {
        struct sigaction sa = {.sa_handler = on_signal};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        if (p.cluster)
            snprintf(runner, sizeof(runner), "cluster runner (%s %d)", p.mesh, p.cluster);
        else
            snprintf(runner, sizeof(runner), "local runner");
        if (spawn(&p)) {
            fprintf(stderr, "weft-api-load: cannot start %s serve%s\n", p.weft,
                    p.cluster ? " and its workers" : "");
            goto out;
        }
        l.server = p.addr;
    }
    rc = run(&l, runner,
             !p.weft ? "(server's)" : p.journal ? "on (fsync per accepted job)" : "off");
out:
    if (p.weft && stop(&p, rc == 0))
        rc = 1;
    if (rc == 0)
        printf("none lost, none duplicated%s\n", p.weft ? ", everything stopped cleanly" : "");
    else
        printf("%s\n", g_interrupted ? "INTERRUPTED" : "FAILED");
    free(l.ids);
    free(l.latency);
    return rc;
}
