/* weft-api-load: a load test of the job API (not a test: it prints figures for bench/README.md).
 *
 * Submits --jobs tiny jobs from --clients threads (each its own keep-alive connection, in a
 * bounded loop), waits for all of them, and checks that none was lost or duplicated: the server's
 * job list holds exactly the ids the submissions got back, each done with its image. Reports the
 * submit latency (p50, p99, max) and the accept and completion throughput.
 *
 *   weft-api-load --spawn build/weft [--jobs 200] [--clients 1] [--no-journal]
 *   weft-api-load --server 127.0.0.1:8642 [--token T] ...   (a server with nothing else to do) */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client/weft.h"

#define MAX_JOBS 100000

struct load {
    const char *server, *token;
    int jobs, clients, size, steps;
    char (*ids)[WEFT_CLIENT_ID_MAX];
    double *latency; /* seconds, per job */
    int failed;
    pthread_mutex_t mu;
};

struct worker {
    struct load *l;
    int first, n;
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
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

/* Wait (bounded) for every job to finish; returns the number done. */
static int wait_all(struct load *l, double deadline_s)
{
    struct weft_client_opts o = {.address = l->server, .token = l->token, .timeout_ms = 60000};
    struct weft_client *c;
    if (weft_client_connect(&o, &c) != WEFT_OK)
        return -1;
    int done = 0;
    double end = now() + deadline_s;
    struct weft_job_status st = {0};
    for (int i = 0; i < l->jobs && now() < end; i++) {
        if (!l->ids[i][0])
            continue;
        if (weft_client_wait(c, l->ids[i], (int)((end - now()) * 1000) + 1, NULL, NULL, &st) !=
            WEFT_OK) {
            fprintf(stderr, "job %s: %s\n", l->ids[i], weft_client_error(c));
            break;
        }
        done += st.state == WEFT_JOB_DONE && st.n_images == 1;
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

static pid_t spawn(const char *weft, bool journal, char *addr, size_t len, char *dir)
{
    snprintf(dir, 64, "/tmp/weft-api-load-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    char port[128], jd[128], od[128], log[128];
    snprintf(port, sizeof(port), "%s/port", dir);
    snprintf(jd, sizeof(jd), "--api.journal_dir=%s", journal ? dir : "");
    snprintf(od, sizeof(od), "--api.output_dir=%s/jobs", dir);
    snprintf(log, sizeof(log), "%s/serve.log", dir);
    pid_t pid = fork();
    if (pid == 0) {
        FILE *f = freopen(log, "w", stderr);
        (void)f;
        execl(weft, weft, "serve", "--listen=127.0.0.1:0", "--port-file", port, jd, od,
              "--api.max_queue=1000000", "--api.keep_jobs=1000000", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; pid > 0 && i < 600; i++) {
        FILE *f = fopen(port, "r");
        if (f) {
            bool ok = fgets(addr, (int)len, f) != NULL;
            (void)fclose(f);
            if (ok) {
                addr[strcspn(addr, "\n")] = '\0';
                return pid;
            }
        }
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
    }
    if (pid > 0)
        kill(pid, SIGKILL);
    return -1;
}

static void usage(void)
{
    fprintf(stderr, "usage: weft-api-load (--spawn WEFT_BINARY [--no-journal] | --server ADDR "
                    "[--token T])\n                     [--jobs N] [--clients N] [--size PX] "
                    "[--steps N]\n");
}

int main(int argc, char **argv)
{
    static struct load l = {.jobs = 200, .clients = 1, .size = 32, .steps = 1};
    const char *spawn_bin = NULL;
    bool journal = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!a)
            break;
        if (strcmp(a, "--spawn") == 0 && v)
            spawn_bin = argv[++i];
        else if (strcmp(a, "--server") == 0 && v)
            l.server = argv[++i];
        else if (strcmp(a, "--token") == 0 && v)
            l.token = argv[++i];
        else if (strcmp(a, "--jobs") == 0 && v)
            l.jobs = atoi(argv[++i]);
        else if (strcmp(a, "--clients") == 0 && v)
            l.clients = atoi(argv[++i]);
        else if (strcmp(a, "--size") == 0 && v)
            l.size = atoi(argv[++i]);
        else if (strcmp(a, "--steps") == 0 && v)
            l.steps = atoi(argv[++i]);
        else if (strcmp(a, "--no-journal") == 0)
            journal = false;
        else {
            usage();
            return 2;
        }
    }
    if ((!spawn_bin == !l.server) || l.jobs < 1 || l.jobs > MAX_JOBS || l.clients < 1 ||
        l.clients > 64 || l.clients > l.jobs) {
        usage();
        return 2;
    }
    static char addr[512], dir[64] = "";
    pid_t pid = -1;
    if (spawn_bin) {
        if ((pid = spawn(spawn_bin, journal, addr, sizeof(addr), dir)) < 0) {
            fprintf(stderr, "weft-api-load: cannot start %s serve\n", spawn_bin);
            return 1;
        }
        l.server = addr;
    }
    l.ids = calloc((size_t)l.jobs, sizeof(*l.ids));
    l.latency = calloc((size_t)l.jobs, sizeof(double));
    if (!l.ids || !l.latency)
        return 1;
    pthread_mutex_init(&l.mu, NULL);
    struct worker w[64];
    pthread_t th[64];
    double t0 = now();
    for (int k = 0; k < l.clients; k++) {
        int per = l.jobs / l.clients, extra = l.jobs % l.clients;
        w[k] = (struct worker){&l, k * per + (k < extra ? k : extra), per + (k < extra)};
        if (pthread_create(&th[k], NULL, submitter, &w[k]) != 0)
            return 1;
    }
    for (int k = 0; k < l.clients; k++)
        pthread_join(th[k], NULL);
    double t_sub = now() - t0;
    int done = wait_all(&l, 3600);
    double t_all = now() - t0;
    int rc = check_list(&l);
    qsort(l.latency, (size_t)l.jobs, sizeof(double), cmp_double);
    printf("%d jobs (%dx%d, %d step%s), %d client%s, journal %s\n", l.jobs, l.size, l.size,
           l.steps, l.steps == 1 ? "" : "s", l.clients, l.clients == 1 ? "" : "s",
           spawn_bin ? (journal ? "on (fsync per accepted job)" : "off") : "(server's)");
    printf("submit latency: p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
           l.latency[l.jobs / 2] * 1e3, l.latency[(int)(l.jobs * 0.99)] * 1e3,
           l.latency[l.jobs - 1] * 1e3);
    printf("accepted %d in %.2f s (%.0f jobs/s); all %d done in %.2f s (%.1f jobs/s); "
           "failed submissions %d\n", l.jobs - l.failed, t_sub, (l.jobs - l.failed) / t_sub,
           done, t_all, done / t_all, l.failed);
    if (done != l.jobs - l.failed || l.failed)
        rc = 1;
    if (pid > 0) {
        kill(pid, SIGTERM);
        int status = 0;
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "weft serve exited with status %d (log in %s)\n", status, dir);
            rc = 1;
        } else {
            char cmd[128];
            snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
            if (system(cmd) != 0)
                fprintf(stderr, "could not remove %s\n", dir);
        }
    }
    printf("%s\n", rc == 0 ? "none lost, none duplicated" : "FAILED");
    free(l.ids);
    free(l.latency);
    return rc;
}
