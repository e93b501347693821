/* weft-api-load: a load test of the job API (not a test: it prints figures for bench/README.md).
 *
 * Submits --jobs tiny jobs from --clients threads (each its own keep-alive connection, in a
 * bounded loop), waits for all of them, and checks that none was lost or duplicated: the server's
 * job list holds exactly the ids the submissions got back, each done with its image. Reports the
 * submit latency (p50, p99, max) and the accept and completion throughput.
 *
 * Rounds (bench/stats.h): a warm-up round, then --rounds N (at least 5 unless --quick); in each
 * round every side of --sides (local, dpN, tpN; "/nojournal" turns the journal off) is started,
 * loaded and stopped in turn, so the sides share the machine's moments. Each figure is printed as
 * its median [min-max] over the rounds, throughput ratios against the first side from the paired
 * rounds, with the load average before and after (--json: the same as one document).
 *
 * With --spawn it starts the server itself: `weft serve` with the local runner, or with
 * --cluster N `weft serve --runner cluster` and N `weft worker` processes (a fresh cluster secret
 * in their environment, a dp or tp mesh of N ranks), and waits until GET /v1/cluster says ready.
 * Whatever it started is stopped at the end, also when something failed: SIGTERM to the server
 * (which tells its workers to exit), every exit status checked, SIGKILL after a bounded grace.
 *
 *   weft-api-load --spawn build/weft [--sides local,dp2,tp2 | --cluster N [--mesh dp|tp]]
 *                 [--jobs 200] [--clients 1] [--no-journal] [--rounds N] [--quick] [--json]
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

#include "bench/stats.h"
#include "client/weft.h"

#define MAX_JOBS 100000
#define MAX_WORKERS 16
#define SERVE_GRACE_S 30.0  /* SIGTERM to the server, then SIGKILL */
#define WORKER_GRACE_S 15.0 /* after the server is gone, for its workers to exit by themselves */
#define READY_TIMEOUT_S 120.0
#define MAX_SIDES 8

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

/* The server lists exactly our ids, once each: every page of GET /v1/jobs (its "jobs" array,
 * "next" the id to continue after). */
static int check_list(struct load *l)
{
    struct weft_client_opts o = {.address = l->server, .token = l->token, .timeout_ms = 60000};
    struct weft_client *c;
    if (weft_client_connect(&o, &c) != WEFT_OK)
        return -1;
    int *seen = calloc((size_t)l->jobs + 1, sizeof(*seen));
    int listed = 0, bad = 0, rc = 0;
    char target[160] = "/v1/jobs?limit=1000";
    for (int page = 0; seen && page < 10000; page++) {
        int code;
        char *list = NULL;
        if (weft_client_request(c, "GET", target, NULL, 0, &code, &list, NULL) != WEFT_OK ||
            code != 200) {
            fprintf(stderr, "GET %s: %s\n", target, weft_client_error(c));
            weft_client_free(list);
            rc = -1;
            break;
        }
        cJSON *j = cJSON_Parse(list);
        weft_client_free(list);
        const cJSON *jobs = cJSON_GetObjectItemCaseSensitive(j, "jobs"), *e;
        cJSON_ArrayForEach(e, jobs)
        {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
            listed++;
            for (int i = 0; cJSON_IsString(id) && i < l->jobs; i++)
                if (l->ids[i][0] && strcmp(l->ids[i], id->valuestring) == 0)
                    seen[i]++;
        }
        const cJSON *next = cJSON_GetObjectItemCaseSensitive(j, "next");
        const bool more = cJSON_IsString(next);
        if (more)
            snprintf(target, sizeof(target), "/v1/jobs?limit=1000&after=%s", next->valuestring);
        cJSON_Delete(j);
        if (!more)
            break;
    }
    for (int i = 0; seen && rc == 0 && i < l->jobs; i++)
        bad += l->ids[i][0] && seen[i] != 1;
    free(seen);
    weft_client_close(c);
    if (rc != 0 || !seen)
        return -1;
    fprintf(stderr, "server lists %d jobs; %d of ours missing or repeated\n", listed, bad);
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
            fprintf(stderr, "cluster ready in %.1f s: %d workers, mesh dp %d x tp %d\n",
                    now() - t0, nw, dp, tp);
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
            "usage: weft-api-load (--spawn WEFT_BINARY [--sides LIST | --cluster N [--mesh dp|tp]]"
            " [--no-journal]\n"
            "                      | --server ADDR [--token T])\n"
            "                     [--jobs N] [--clients N] [--size PX] [--steps N] "
            "[--timeout S]\n"
            "                     [--rounds N] [--warmup N] [--quick] [--json]\n"
            "LIST: sides separated by commas, each local, dpN or tpN (N workers), optionally\n"
            "followed by /nojournal; every side once per round, in turn.\n");
}

/* One configuration of the server, and its figures over the rounds. */
struct side {
    struct weft_bench_series p50_ms, p99_ms, max_ms, accepted, completed;
    const char *mesh;
    int cluster; /* workers; 0: the local runner */
    bool journal;
    char name[32];
};

enum { FIG_P50, FIG_P99, FIG_MAX, FIG_ACCEPTED, FIG_COMPLETED, FIG_COUNT };

static struct weft_bench_series *side_fig(struct side *sd, int k)
{
    struct weft_bench_series *f[] = {&sd->p50_ms, &sd->p99_ms, &sd->max_ms, &sd->accepted,
                                     &sd->completed};
    return f[k];
}

/* "local", "dp2", "tp4", each optionally "/nojournal". */
static int side_parse(const char *spec, bool journal, struct side *sd)
{
    char name[32];
    snprintf(name, sizeof(name), "%s", spec);
    char *slash = strchr(name, '/');
    *sd = (struct side){.mesh = "dp", .journal = journal};
    if (slash) {
        if (strcmp(slash, "/nojournal") != 0)
            return -1;
        sd->journal = false;
        *slash = '\0';
    }
    if (strcmp(name, "local") != 0) {
        char *end = NULL;
        if (strncmp(name, "dp", 2) != 0 && strncmp(name, "tp", 2) != 0)
            return -1;
        long n = strtol(name + 2, &end, 10);
        if (!end || *end || n < 1 || n > MAX_WORKERS)
            return -1;
        sd->mesh = name[0] == 'd' ? "dp" : "tp";
        sd->cluster = (int)n;
    }
    snprintf(sd->name, sizeof(sd->name), "%s", spec);
    return 0;
}

struct args {
    const char *weft, *sides, *mesh;
    int cluster;
    bool journal, jobs_set;
    struct weft_bench b;
};

static int parse(int argc, char **argv, struct load *l, struct args *a)
{
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int hit = weft_bench_opt(&a->b, argc, argv, &i);
        if (hit < 0)
            return -1;
        if (hit)
            continue;
        if (strcmp(o, "--spawn") == 0 && v)
            a->weft = argv[++i];
        else if (strcmp(o, "--sides") == 0 && v)
            a->sides = argv[++i];
        else if (strcmp(o, "--cluster") == 0 && v)
            a->cluster = atoi(argv[++i]);
        else if (strcmp(o, "--mesh") == 0 && v)
            a->mesh = argv[++i];
        else if (strcmp(o, "--server") == 0 && v)
            l->server = argv[++i];
        else if (strcmp(o, "--token") == 0 && v)
            l->token = argv[++i];
        else if (strcmp(o, "--jobs") == 0 && v)
            l->jobs = atoi(argv[++i]), a->jobs_set = true;
        else if (strcmp(o, "--clients") == 0 && v)
            l->clients = atoi(argv[++i]);
        else if (strcmp(o, "--size") == 0 && v)
            l->size = atoi(argv[++i]);
        else if (strcmp(o, "--steps") == 0 && v)
            l->steps = atoi(argv[++i]);
        else if (strcmp(o, "--timeout") == 0 && v)
            l->timeout_s = atof(argv[++i]);
        else if (strcmp(o, "--no-journal") == 0)
            a->journal = false;
        else
            return -1;
    }
    if (a->b.quick && !a->jobs_set)
        l->jobs = 10;
    bool mesh_ok = strcmp(a->mesh, "dp") == 0 || strcmp(a->mesh, "tp") == 0;
    if ((!a->weft == !l->server) || l->jobs < 1 || l->jobs > MAX_JOBS || l->clients < 1 ||
        l->clients > 64 || l->clients > l->jobs || a->cluster < 0 ||
        a->cluster > MAX_WORKERS || (a->cluster && !a->weft) || (a->sides && !a->weft) ||
        !mesh_ok || l->timeout_s <= 0)
        return -1;
    return 0;
}

/* The sides: --sides, else the one --cluster/--mesh/--no-journal (or --server) describe. */
static int sides_make(const struct args *a, struct side *sd)
{
    if (!a->sides) {
        sd[0] = (struct side){.cluster = a->cluster, .mesh = a->mesh, .journal = a->journal};
        if (!a->weft)
            snprintf(sd[0].name, sizeof(sd[0].name), "server");
        else if (a->cluster)
            snprintf(sd[0].name, sizeof(sd[0].name), "%s%d%s", a->mesh, a->cluster,
                     a->journal ? "" : "/nojournal");
        else
            snprintf(sd[0].name, sizeof(sd[0].name), "local%s", a->journal ? "" : "/nojournal");
        return 1;
    }
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", a->sides);
    int n = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (n == MAX_SIDES || side_parse(t, a->journal, &sd[n]) != 0) {
            fprintf(stderr, "weft-api-load: --sides: '%s' is not local, dpN or tpN "
                            "(/nojournal), or more than %d sides\n", t, MAX_SIDES);
            return -1;
        }
        n++;
    }
    return n;
}

/* Submit from the client threads, wait for all, check; the run's figures. */
static int run(struct load *l, double fig[FIG_COUNT])
{
    struct worker w[64];
    pthread_t th[64];
    int started = 0, rc = 0;
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
    rc |= check_list(l) != 0;
    qsort(l->latency, (size_t)l->jobs, sizeof(double), cmp_double);
    fig[FIG_P50] = l->latency[l->jobs / 2] * 1e3;
    fig[FIG_P99] = l->latency[(int)(l->jobs * 0.99)] * 1e3;
    fig[FIG_MAX] = l->latency[l->jobs - 1] * 1e3;
    fig[FIG_ACCEPTED] = (l->jobs - l->failed) / t_sub;
    fig[FIG_COMPLETED] = done / t_all;
    fprintf(stderr, "submit p50 %.2f ms, p99 %.2f ms, max %.2f ms; accepted %d in %.2f s; "
                    "%d done in %.2f s; failed submissions %d\n",
            fig[FIG_P50], fig[FIG_P99], fig[FIG_MAX], l->jobs - l->failed, t_sub, done, t_all,
            l->failed);
    if (done != l->jobs - l->failed || l->failed)
        rc = 1;
    return rc;
}

/* One side once: start what it needs (with --spawn), load it, stop it. */
static int run_side(struct load *l, const char *weft, struct side *sd, int round)
{
    static struct procs p;
    p = (struct procs){.weft = weft, .journal = sd->journal, .cluster = sd->cluster,
                       .mesh = sd->mesh};
    g_forwarded = 0;
    memset(l->ids, 0, (size_t)l->jobs * sizeof(*l->ids));
    memset(l->latency, 0, (size_t)l->jobs * sizeof(double));
    l->failed = 0;
    int rc = 1;
    if (weft) {
        if (spawn(&p)) {
            fprintf(stderr, "weft-api-load: cannot start %s serve%s\n", weft,
                    p.cluster ? " and its workers" : "");
            goto out;
        }
        l->server = p.addr;
    }
    double fig[FIG_COUNT];
    rc = run(l, fig);
    for (int k = 0; k < FIG_COUNT && rc == 0; k++)
        weft_bench_series_set(side_fig(sd, k), round, fig[k]);
out:
    if (weft && stop(&p, rc == 0))
        rc = 1;
    return rc;
}

static const char *const fig_keys[] = {"submit_p50_ms", "submit_p99_ms", "submit_max_ms",
                                       "accepted_per_s", "completed_per_s"};

static void report_json(const struct weft_bench *b, const struct load *l, struct side *sd,
                        int n)
{
    cJSON *root = weft_bench_json_context(b);
    cJSON *cfg = cJSON_AddObjectToObject(root, "config");
    cJSON_AddNumberToObject(cfg, "jobs", l->jobs);
    cJSON_AddNumberToObject(cfg, "clients", l->clients);
    cJSON_AddNumberToObject(cfg, "size", l->size);
    cJSON_AddNumberToObject(cfg, "steps", l->steps);
    cJSON *rows = cJSON_AddArrayToObject(root, "rows");
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "side", sd[i].name);
        cJSON_AddBoolToObject(e, "journal", sd[i].journal);
        for (int k = 0; k < FIG_COUNT; k++)
            cJSON_AddItemToObject(e, fig_keys[k], weft_bench_json_fig(side_fig(&sd[i], k), 1));
        for (int k = FIG_ACCEPTED; k <= FIG_COMPLETED && i > 0; k++) {
            struct weft_bench_cmp c;
            char key[64];
            weft_bench_compare(side_fig(&sd[i], k), side_fig(&sd[0], k), &c);
            snprintf(key, sizeof(key), "%s_over_first", fig_keys[k]);
            cJSON_AddItemToObject(e, key, weft_bench_json_cmp(&c, "higher", "lower"));
        }
        cJSON_AddItemToArray(rows, e);
    }
    char *text = cJSON_Print(root);
    printf("%s\n", text ? text : "{}");
    cJSON_free(text);
    cJSON_Delete(root);
}

static void report_table(const struct weft_bench *b, const struct load *l, struct side *sd,
                         int n)
{
    weft_bench_print_context(b, stdout);
    printf("# %d jobs (%dx%d, %d step%s) per side and round, %d client%s; none lost, none "
           "duplicated in any round\n", l->jobs, l->size, l->size, l->steps,
           l->steps == 1 ? "" : "s", l->clients, l->clients == 1 ? "" : "s");
    printf("%-16s %-7s %-22s %-22s %-24s %-22s %-20s %s\n", "side", "journal", "submit p50 ms",
           "submit p99 ms", "accepted jobs/s", "completed jobs/s", "completed / first",
           "verdict");
    for (int i = 0; i < n; i++) {
        char f[FIG_COUNT][96], r[96] = "-", words[2][64];
        for (int k = 0; k < FIG_COUNT; k++)
            weft_bench_fmt(side_fig(&sd[i], k), 1.0, k < FIG_ACCEPTED ? 2 : 0, f[k],
                           sizeof(f[k]));
        const char *verdict = "";
        if (i > 0) {
            struct weft_bench_cmp c;
            weft_bench_compare(&sd[i].completed, &sd[0].completed, &c);
            weft_bench_fmt_cmp(&c, 2, r, sizeof(r));
            snprintf(words[0], sizeof(words[0]), "%s completes more", sd[i].name);
            snprintf(words[1], sizeof(words[1]), "%s completes more", sd[0].name);
            verdict = weft_bench_verdict_str(&c, words[0], words[1]);
        }
        printf("%-16s %-7s %-22s %-22s %-24s %-22s %-20s %s\n", sd[i].name,
               sd[i].journal ? "on" : "off", f[FIG_P50], f[FIG_P99], f[FIG_ACCEPTED],
               f[FIG_COMPLETED], r, verdict);
    }
}

int main(int argc, char **argv)
{
    static struct load l = {.jobs = 200, .clients = 1, .size = 32, .steps = 1, .timeout_s = 3600};
    static struct args a = {.mesh = "dp", .journal = true};
    weft_bench_init(&a.b, "weft-api-load");
    static struct side sd[MAX_SIDES];
    int n = 0;
    if (parse(argc, argv, &l, &a) || (n = sides_make(&a, sd)) <= 0) {
        usage();
        return 2;
    }
    if (weft_bench_begin(&a.b) != 0)
        return 2;
    l.ids = calloc((size_t)l.jobs, sizeof(*l.ids));
    l.latency = calloc((size_t)l.jobs, sizeof(double));
    if (!l.ids || !l.latency) {
        fprintf(stderr, "weft-api-load: out of memory\n");
        return 1;
    }
    pthread_mutex_init(&l.mu, NULL);
    if (a.weft) {
        struct sigaction sa = {.sa_handler = on_signal};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
    }
    int rc = 0;
    for (int r = -a.b.warmup; r < a.b.rounds && rc == 0 && !g_interrupted; r++) {
        weft_bench_round_note(&a.b, r);
        for (int i = 0; i < n && rc == 0; i++) { /* every side in turn */
            fprintf(stderr, "side %s\n", sd[i].name);
            rc = run_side(&l, a.weft, &sd[i], r);
        }
    }
    weft_bench_end(&a.b);
    if (rc == 0 && a.b.json)
        report_json(&a.b, &l, sd, n);
    else if (rc == 0)
        report_table(&a.b, &l, sd, n);
    else
        fprintf(stderr, "%s\n", g_interrupted ? "INTERRUPTED" : "FAILED");
    free(l.ids);
    free(l.latency);
    return rc;
}
