/* weft bench serve: a mixed stream of small and large jobs through a served cluster, the
 * coordinator planning each job's layout ([parallel] mode = auto) against fixed layouts of the
 * same workers. Each side is a fresh `weft serve --runner cluster` with N `weft worker`
 * processes on this host (loopback); the stream is the same for every side: jobs submitted
 * over HTTP at a fixed spacing, every K-th one large. Per side and round: completed jobs per
 * minute (jobs over the time from the first submission to the last completion) and the p50
 * and p99 latency (submission to completion, the coordinator's own timestamps), the small
 * and the large jobs' p50 apart. The sides take turns within each round. */
#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/stats.h"
#include "cli/child.h"
#include "cli/cli.h"
#include "cli/progress.h"
#include "client/weft.h"
#include "common/alloc.h"
#include "common/log.h"

#define MAX_SIDES 8
#define MAX_JOBS 256
#define MAX_WORKERS_BENCH 16

struct side {
    char name[48];
    char args[4][128]; /* serve options ("" unused) */
};

struct serve_bench {
    long long workers, small, large, steps, jobs, every, interval_ms;
    char model[4096], prompt[256], prompt_name[128];
    struct side sides[MAX_SIDES];
    int n_sides, n_auto; /* the first n_auto sides are auto's */
    struct weft_bench b;
};

static void help(FILE *out)
{
    fprintf(out,
        "usage: weft bench serve [--workers N] [--jobs N] [--large-every K]\n"
        "                        [--small SIDE] [--large SIDE] [--steps N] [--interval-ms MS]\n"
        "                        [--fixed LAYOUT[,LAYOUT...]] [--goal latency|throughput]\n"
        "                        [--model DIR]\n"
        "                        [--prompt TEXT | --prompt-embeds NAME]\n"
        "                        [--rounds N] [--quick] [--json]\n"
        "\n"
        "A mixed stream of jobs through a served cluster of --workers local CPU workers\n"
        "(default 4, one kernel thread each), [parallel] mode = auto (the coordinator plans\n"
        "each job's layout from its queue) against fixed layouts of the same workers, side\n"
        "by side, the sides in turns within each round. The stream: --jobs jobs (default 16)\n"
        "submitted --interval-ms apart (default 400), every --large-every-th one (default\n"
        "4, the first included) --large pixels square (default 1024), the others --small\n"
        "(default the model's size), --steps steps each (default 4), one image each, text\n"
        "prompt --prompt (or --prompt-embeds: one of the model's precomputed prompts).\n"
        "Per side: completed jobs per minute (the jobs over the time from the first\n"
        "submission to the last completion) and the p50 / p99 latency from submission\n"
        "to completion (the coordinator's timestamps), small and large p50 apart.\n"
        "--fixed: the fixed layouts, each dpA, ulyssesB, ringC, tpD or a product like\n"
        "dp2xulysses2 (default dp4,ulysses4,dp2xulysses2 for 4 workers, dpN,ulyssesN\n"
        "otherwise: every degree times dp must equal --workers), or groups of replicas\n"
        "joined by '+' ([parallel] groups: ulysses2+dp2 is one replica of Ulysses 2 beside\n"
        "two single-device ones; the groups' devices add up to --workers). --model: default the\n"
        "embedded model. --goal throughput: a second auto side with [parallel] goal =\n"
        "throughput beside the first (goal latency).\n\n");
    weft_bench_opt_help(out);
}

/* One layout of --fixed, "dp2xulysses2", [s, end): its degrees into groups ("dp 2 x ulysses
 * 2") and options (NULL: not wanted), its devices into *devices; 0, or -1. */
static int parse_degrees(const char *s, const char *end, char *groups, size_t len,
                         struct side *out, int *n_args, long long *devices)
{
    long long product = 1;
    const char *p = s;
    while (p < end) {
        static const char *const keys[] = {"dp", "ulysses", "ring", "tp"};
        size_t k = 0, kl = 0;
        for (; k < 4; k++)
            if (strncmp(p, keys[k], (kl = strlen(keys[k]))) == 0)
                break;
        char *stop;
        const long long v = k < 4 ? strtoll(p + kl, &stop, 10) : 0;
        if (k == 4 || v < 1 || v > 64 || stop == p + kl || stop > end || *n_args >= 4)
            return -1;
        if (out)
            snprintf(out->args[(*n_args)++], sizeof(out->args[0]), "--parallel.%s_degree=%lld",
                     keys[k], v);
        const size_t at = strlen(groups);
        snprintf(groups + at, len - at, "%s%s %lld", p == s ? "" : " x ", keys[k], v);
        product *= v;
        p = stop;
        if (p < end && *p == 'x')
            p++;
        else if (p < end)
            return -1;
    }
    *devices = product;
    return p == s ? -1 : 0;
}

/* "dp2xulysses2", or groups of replicas "ulysses2+dp2" ([parallel] groups), into serve
 * options; 0, or -1 (logged). */
static int parse_layout(const char *s, long long workers, struct side *out)
{
    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "fixed %s", s);
    char groups[sizeof(out->args[0]) - 20] = "";
    long long total = 0;
    int n_args = 0;
    const bool split = strchr(s, '+') != NULL;
    for (const char *p = s;;) {
        const char *end = strchr(p, '+');
        end = end ? end : p + strlen(p);
        long long devices = 0;
        if (split && groups[0]) {
            const size_t at = strlen(groups);
            snprintf(groups + at, sizeof(groups) - at, " + ");
        }
        if (parse_degrees(p, end, groups, sizeof(groups), split ? NULL : out, &n_args,
                          &devices) != 0) {
            WEFT_LOG_ERROR("bench", "--fixed '%s': expected degrees like dp2xulysses2, or "
                           "groups like ulysses2+dp2", s);
            return -1;
        }
        total += devices;
        if (!*end)
            break;
        p = end + 1;
    }
    if (total != workers) {
        WEFT_LOG_ERROR("bench", "--fixed '%s': its degrees make %lld devices, not --workers %lld",
                       s, total, workers);
        return -1;
    }
    if (split && strlen(groups) + 1 >= sizeof(groups)) {
        WEFT_LOG_ERROR("bench", "--fixed '%s': more groups than a serve option holds (%zu "
                       "characters)", s, sizeof(groups) - 1);
        return -1;
    }
    if (split)
        snprintf(out->args[0], sizeof(out->args[0]), "--parallel.groups=%s", groups);
    return 0;
}

static int parse(struct weft_cli *cli, struct serve_bench *o)
{
    *o = (struct serve_bench){4, 0, 1024, 4, 16, 4, 400, "", "a red circle on a blue background",
                              ""};
    weft_bench_init(&o->b, "weft bench serve");
    const char *fixed = NULL, *goal = "latency", *v;
    static const char *const names[] = {"--workers", "--small", "--large", "--steps",
                                        "--jobs", "--large-every", "--interval-ms"};
    static const long long lo[] = {2, 16, 16, 1, 1, 1, 0},
                           hi[] = {MAX_WORKERS_BENCH, 4096, 4096, 100, MAX_JOBS, MAX_JOBS, 60000};
    long long *fields[] = {&o->workers, &o->small, &o->large, &o->steps,
                           &o->jobs,    &o->every, &o->interval_ms};
    for (int i = 1; i < cli->argc; i++) {
        if (weft_cli_is_help(cli->argv[i])) {
            help(stdout);
            return 1;
        }
        int hit = weft_bench_opt(&o->b, cli->argc, cli->argv, &i);
        if (hit < 0)
            return -1;
        if (hit)
            continue;
        if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--fixed"))) {
            fixed = v;
            continue;
        }
        if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--goal"))) {
            if (strcmp(v, "latency") != 0 && strcmp(v, "throughput") != 0) {
                WEFT_LOG_ERROR("bench", "--goal '%s': expected latency or throughput", v);
                return -1;
            }
            goal = v;
            continue;
        }
        if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--model"))) {
            snprintf(o->model, sizeof(o->model), "%s", v);
            continue;
        }
        if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--prompt"))) {
            snprintf(o->prompt, sizeof(o->prompt), "%s", v);
            continue;
        }
        if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--prompt-embeds"))) {
            snprintf(o->prompt_name, sizeof(o->prompt_name), "%s", v);
            continue;
        }
        hit = weft_cli_int_opts(cli->argc, cli->argv, &i, sizeof(names) / sizeof(names[0]), names,
                                lo, hi, fields);
        if (hit < 0)
            return -1;
        if (!hit) {
            weft_cli_unexpected("bench", "", "weft bench serve", cli->argv[i]);
            return -1;
        }
    }
    if (o->b.quick) {
        o->jobs = o->jobs < 4 ? o->jobs : 4;
        o->large = 256;
        o->steps = 2;
        o->interval_ms = 100;
    }
    if (o->large % 16 || (o->small && o->small % 16)) {
        WEFT_LOG_ERROR("bench", "--small and --large must be multiples of 16");
        return -1;
    }
    struct side *s = &o->sides[o->n_sides++];
    memset(s, 0, sizeof(*s));
    snprintf(s->name, sizeof(s->name), "auto");
    snprintf(s->args[0], sizeof(s->args[0]), "--parallel.mode=auto");
    if (strcmp(goal, "throughput") == 0) { /* beside latency's, the first side's */
        s = &o->sides[o->n_sides++];
        memset(s, 0, sizeof(*s));
        snprintf(s->name, sizeof(s->name), "auto (throughput)");
        snprintf(s->args[0], sizeof(s->args[0]), "--parallel.mode=auto");
        snprintf(s->args[1], sizeof(s->args[1]), "--parallel.goal=throughput");
    }
    o->n_auto = o->n_sides;
    char list[256];
    if (fixed)
        snprintf(list, sizeof(list), "%s", fixed);
    else if (o->workers == 4)
        snprintf(list, sizeof(list), "dp4,ulysses4,dp2xulysses2");
    else
        snprintf(list, sizeof(list), "dp%lld,ulysses%lld", o->workers, o->workers);
    char *save = NULL;
    for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (o->n_sides == MAX_SIDES) {
            WEFT_LOG_ERROR("bench", "--fixed: at most %d layouts", MAX_SIDES - 1);
            return -1;
        }
        if (parse_layout(t, o->workers, &o->sides[o->n_sides]) != 0)
            return -1;
        o->n_sides++;
    }
    return 0;
}

static void sleep_s(double s)
{
    if (s <= 0)
        return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

struct cluster_procs {
    pid_t server, workers[MAX_WORKERS_BENCH];
    int n;
};

static pid_t spawn(char *const argv[], const char *log)
{
    const pid_t pid = fork();
    if (pid == 0) {
        FILE *f = freopen(log, "a", stdout);
        if (f)
            (void)dup2(fileno(stdout), 2);
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

static void stop_all(struct cluster_procs *p)
{
    if (p->server > 0) {
        kill(p->server, SIGTERM);
        (void)waitpid(p->server, NULL, 0); /* it tells the workers to leave */
    }
    for (int i = 0; i < p->n; i++)
        if (p->workers[i] > 0) {
            for (int t = 0; t < 200 && waitpid(p->workers[i], NULL, WNOHANG) == 0; t++)
                sleep_s(0.05);
            kill(p->workers[i], SIGKILL);
            (void)waitpid(p->workers[i], NULL, 0);
        }
    memset(p, 0, sizeof(*p));
}

struct side_result {
    double jobs_per_min, p50, p99, small_p50, large_p50;
    int switches;
};

/* The job's record: its state, timestamps and layout; 0 when done, 1 still going, -1 failed. */
static int job_record(struct weft_client *c, const char *id, double *sub, double *fin,
                      char *layout, size_t len)
{
    char path[96], *body = NULL;
    int code = 0;
    size_t blen;
    snprintf(path, sizeof(path), "/v1/jobs/%s", id);
    if (weft_client_request(c, "GET", path, NULL, 0, &code, &body, &blen) != WEFT_OK ||
        code != 200) {
        weft_client_free(body);
        return 1; /* a busy server: ask again */
    }
    cJSON *j = cJSON_Parse(body);
    weft_client_free(body);
    const cJSON *state = cJSON_GetObjectItemCaseSensitive(j, "state");
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "submitted_at");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, "finished_at");
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(j, "layout");
    int rc = 1;
    if (cJSON_IsString(state) && strcmp(state->valuestring, "done") == 0 && cJSON_IsNumber(s) &&
        cJSON_IsNumber(f)) {
        *sub = s->valuedouble, *fin = f->valuedouble;
        snprintf(layout, len, "%s", cJSON_IsString(l) ? l->valuestring : "?");
        rc = 0;
    } else if (cJSON_IsString(state) && (strcmp(state->valuestring, "failed") == 0 ||
                                         strcmp(state->valuestring, "cancelled") == 0)) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
        WEFT_LOG_ERROR("bench", "job %s %s: %s", id, state->valuestring,
                       cJSON_IsString(e) ? e->valuestring : "");
        rc = -1;
    }
    cJSON_Delete(j);
    return rc;
}

static bool cluster_ready(struct weft_client *c)
{
    char *text = NULL;
    if (weft_client_cluster(c, &text) != WEFT_OK)
        return false;
    cJSON *j = cJSON_Parse(text);
    weft_client_free(text);
    const bool ready = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "ready"));
    cJSON_Delete(j);
    return ready;
}

/* One side: a fresh cluster, the stream, its figures; 0 or -1 (logged). */
static int run_side(const struct serve_bench *o, const char *self, const char *dir,
                    const struct side *sd, struct side_result *res)
{
    char api_file[4200], wk_file[4200], journal[4200], outd[4200], log[4200], workers[64];
    snprintf(api_file, sizeof(api_file), "%s/api", dir);
    snprintf(wk_file, sizeof(wk_file), "%s/workers", dir);
    snprintf(journal, sizeof(journal), "--api.journal_dir=%s/journal", dir);
    snprintf(outd, sizeof(outd), "--api.output_dir=%s/out", dir);
    snprintf(log, sizeof(log), "%s/serve.log", dir);
    snprintf(workers, sizeof(workers), "--cluster.workers=%lld", o->workers);
    char journal_dir[4200];
    snprintf(journal_dir, sizeof(journal_dir), "%s/journal", dir);
    weft_remove_tree(journal_dir); /* every side starts with an empty queue */
    unlink(api_file), unlink(wk_file);
    char model[4200] = "";
    if (o->model[0])
        snprintf(model, sizeof(model), "--model.path=%s", o->model);
    char *argv[24] = {(char *)self, "serve", "--runner", "cluster", "--listen", "127.0.0.1:0",
                      "--port-file", api_file, "--worker-port-file", wk_file,
                      "--cluster.listen=127.0.0.1:0", "--api.max_queue=1000", journal, outd,
                      workers};
    int n = 15;
    if (model[0])
        argv[n++] = model;
    for (int i = 0; i < 4 && sd->args[i][0]; i++)
        argv[n++] = (char *)sd->args[i];
    argv[n] = NULL;
    struct cluster_procs p = {0};
    p.server = spawn(argv, log);
    char api[300], wport[300];
    if (p.server < 0 || weft_cli_wait_line(api_file, &p.server, 60, NULL, api, sizeof(api)) ||
        weft_cli_wait_line(wk_file, &p.server, 60, NULL, wport, sizeof(wport))) {
        WEFT_LOG_ERROR("bench", "%s: the server did not start (its log: %s)", sd->name, log);
        stop_all(&p);
        return -1;
    }
    for (int i = 0; i < o->workers; i++) {
        char wlog[4200];
        snprintf(wlog, sizeof(wlog), "%s/w%d.log", dir, i);
        char *wargv[] = {(char *)self, "worker", "--coordinator", wport, "--kernels.threads=1",
                         NULL};
        p.workers[p.n++] = spawn(wargv, wlog);
    }
    struct weft_client_opts co = {.address = api, .timeout_ms = 60000};
    struct weft_client *c = NULL;
    int rc = weft_client_connect(&co, &c) == WEFT_OK ? 0 : -1;
    for (int i = 0; rc == 0 && i < 1200 && !cluster_ready(c); i++)
        sleep_s(0.05);
    if (rc == 0 && !cluster_ready(c)) {
        WEFT_LOG_ERROR("bench", "%s: the cluster was not ready within 60 s (%s)", sd->name, log);
        rc = -1;
    }
    static char ids[MAX_JOBS][WEFT_CLIENT_ID_MAX];
    bool large[MAX_JOBS] = {false};
    const double t0 = weft_now();
    for (int j = 0; rc == 0 && j < o->jobs; j++) {
        sleep_s(t0 + (double)j * (double)o->interval_ms / 1e3 - weft_now());
        large[j] = j % o->every == 0;
        const int64_t side = large[j] ? o->large : o->small;
        struct weft_prompt pr = {.text = o->prompt_name[0] ? NULL : o->prompt,
                                 .name = o->prompt_name[0] ? o->prompt_name : NULL};
        struct weft_job_request req = {.prompts = &pr, .n_prompts = 1, .height = side,
                                       .width = side, .steps = o->steps, .count = 1,
                                       .guidance = 3.5, .seed = (uint64_t)j + 1};
        if (weft_client_submit(c, &req, ids[j]) != WEFT_OK) {
            WEFT_LOG_ERROR("bench", "%s: job %d not accepted: %s", sd->name, j,
                           weft_client_error(c));
            rc = -1;
        }
    }
    double lat[MAX_JOBS], small_lat[MAX_JOBS], large_lat[MAX_JOBS], first = INFINITY, last = 0;
    int n_small = 0, n_large = 0;
    char prev[96] = "";
    res->switches = 0;
    for (int j = 0; rc == 0 && j < o->jobs; j++) {
        double s = 0, f = 0;
        char lay[96];
        int st = 1;
        for (int t = 0; t < 36000 && (st = job_record(c, ids[j], &s, &f, lay, sizeof(lay))) > 0;
             t++)
            sleep_s(0.02);
        if (st != 0) {
            if (st > 0)
                WEFT_LOG_ERROR("bench", "%s: job %d did not finish within 12 minutes", sd->name,
                               j);
            rc = -1;
            break;
        }
        lat[j] = f - s;
        first = s < first ? s : first;
        last = f > last ? f : last;
        if (large[j])
            large_lat[n_large++] = f - s;
        else
            small_lat[n_small++] = f - s;
        res->switches += prev[0] && strcmp(prev, lay) != 0;
        snprintf(prev, sizeof(prev), "%s", lay);
        WEFT_LOG_DEBUG("bench", "%s: job %d (%s) %.3f s on %s", sd->name, j,
                       large[j] ? "large" : "small", f - s, lay);
    }
    weft_client_close(c);
    stop_all(&p);
    if (rc != 0)
        return -1;
    res->jobs_per_min = (double)o->jobs / (last - first) * 60.0;
    res->p50 = weft_bench_quantile(lat, (int)o->jobs, 0.5);
    res->p99 = weft_bench_quantile(lat, (int)o->jobs, 0.99);
    res->small_p50 = weft_bench_quantile(small_lat, n_small, 0.5);
    res->large_p50 = weft_bench_quantile(large_lat, n_large, 0.5);
    return 0;
}

#define N_FIGS 5
static const char *const fig_names[N_FIGS] = {"jobs_per_minute", "p50_seconds", "p99_seconds",
                                              "small_p50_seconds", "large_p50_seconds"};

/* Auto side x against each fixed side, ratios of the paired rounds. */
static void compare_fixed(const struct serve_bench *o, struct weft_bench_series (*figs)[N_FIGS],
                          int x)
{
    printf("\n%s against each fixed layout, ratios of the paired rounds:\n", o->sides[x].name);
    for (int s = o->n_auto; s < o->n_sides; s++) {
        struct weft_bench_cmp t, p50, p99;
        weft_bench_compare(&figs[x][0], &figs[s][0], &t);
        weft_bench_compare(&figs[x][1], &figs[s][1], &p50);
        weft_bench_compare(&figs[x][2], &figs[s][2], &p99);
        char a[64], b[64], c[64];
        printf("  vs %-18s jobs/min %s (%s), p50 %s (%s), p99 %s (%s)\n", o->sides[s].name,
               weft_bench_fmt_cmp(&t, 2, a, sizeof(a)),
               weft_bench_verdict_str(&t, "auto more", "auto fewer"),
               weft_bench_fmt_cmp(&p50, 2, b, sizeof(b)),
               weft_bench_verdict_str(&p50, "auto slower", "auto faster"),
               weft_bench_fmt_cmp(&p99, 2, c, sizeof(c)),
               weft_bench_verdict_str(&p99, "auto slower", "auto faster"));
    }
}

static void report(const struct serve_bench *o, struct weft_bench_series (*figs)[N_FIGS])
{
    cJSON *root = o->b.json ? weft_bench_json_context(&o->b) : NULL;
    if (root) {
        cJSON *cfg = cJSON_AddObjectToObject(root, "config");
        cJSON_AddNumberToObject(cfg, "workers", (double)o->workers);
        cJSON_AddNumberToObject(cfg, "jobs", (double)o->jobs);
        cJSON_AddNumberToObject(cfg, "large_every", (double)o->every);
        cJSON_AddNumberToObject(cfg, "small", (double)o->small);
        cJSON_AddNumberToObject(cfg, "large", (double)o->large);
        cJSON_AddNumberToObject(cfg, "steps", (double)o->steps);
        cJSON_AddNumberToObject(cfg, "interval_ms", (double)o->interval_ms);
        cJSON *rows = cJSON_AddArrayToObject(root, "rows");
        for (int s = 0; s < o->n_sides; s++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "side", o->sides[s].name);
            for (int k = 0; k < N_FIGS; k++)
                cJSON_AddItemToObject(e, fig_names[k], weft_bench_json_fig(&figs[s][k], 1));
            /* a fixed side against each auto side: auto_* the first's (goal latency),
             * auto_goal_throughput_* the second's (--goal throughput) */
            static const char *const keys[2][3] = {
                {"auto_throughput_ratio", "auto_p50_ratio", "auto_p99_ratio"},
                {"auto_goal_throughput_throughput_ratio", "auto_goal_throughput_p50_ratio",
                 "auto_goal_throughput_p99_ratio"}};
            for (int a = 0; a < o->n_auto && s >= o->n_auto; a++) {
                struct weft_bench_cmp cmp;
                weft_bench_compare(&figs[a][0], &figs[s][0], &cmp);
                cJSON_AddItemToObject(e, keys[a][0],
                                      weft_bench_json_cmp(&cmp, "auto more", "auto fewer"));
                weft_bench_compare(&figs[a][1], &figs[s][1], &cmp);
                cJSON_AddItemToObject(e, keys[a][1],
                                      weft_bench_json_cmp(&cmp, "auto slower", "auto faster"));
                weft_bench_compare(&figs[a][2], &figs[s][2], &cmp);
                cJSON_AddItemToObject(e, keys[a][2],
                                      weft_bench_json_cmp(&cmp, "auto slower", "auto faster"));
            }
            cJSON_AddItemToArray(rows, e);
        }
        weft_bench_json_print(root);
        return;
    }
    weft_bench_print_context(&o->b, stdout);
    char small[48];
    if (o->small)
        snprintf(small, sizeof(small), "%lldx%lld", o->small, o->small);
    else
        snprintf(small, sizeof(small), "the model's size");
    printf("%lld workers (one kernel thread each), %lld jobs %lld ms apart, one in %lld (the "
           "first included) %lldx%lld, the others %s, %lld steps, one image each; p99 of %lld "
           "jobs\n", o->workers, o->jobs, o->interval_ms, o->every, o->large, o->large, small,
           o->steps, o->jobs);
    printf("%-22s %-22s %-22s %-22s %-22s %s\n", "side", "jobs/min", "p50 s", "p99 s",
           "small p50 s", "large p50 s");
    for (int s = 0; s < o->n_sides; s++) {
        char f[N_FIGS][64];
        for (int k = 0; k < N_FIGS; k++)
            weft_bench_fmt(&figs[s][k], 1, k == 0 ? 1 : 2, f[k], sizeof(f[k]));
        printf("%-22s %-22s %-22s %-22s %-22s %s\n", o->sides[s].name, f[0], f[1], f[2], f[3],
               f[4]);
    }
    for (int a = 0; a < o->n_auto; a++)
        compare_fixed(o, figs, a);
}

int weft_bench_serve(struct weft_cli *cli)
{
    static struct serve_bench o;
    int rc = parse(cli, &o);
    if (rc)
        return rc > 0 ? 0 : 2;
    if (weft_bench_begin(&o.b) != 0)
        return 2;
    char dir[] = "/tmp/weft_bench_serve_XXXXXX", self[4096];
    if (!getenv("WEFT_CLUSTER_SECRET")) { /* the sides' servers and workers share one */
        char secret[40];
        snprintf(secret, sizeof(secret), "bench-%ld-%ld", (long)getpid(), (long)time(NULL));
        setenv("WEFT_CLUSTER_SECRET", secret, 1);
    }
    if (!mkdtemp(dir) || weft_self_path(self, sizeof(self)) != 0) {
        WEFT_LOG_ERROR("bench", "cannot create a temporary folder: %s", strerror(errno));
        return 1;
    }
    static struct weft_bench_series figs[MAX_SIDES][N_FIGS];
    bool failed = false;
    for (int r = -o.b.warmup; r < o.b.rounds && !failed; r++) {
        weft_bench_round_note(&o.b, r);
        for (int s = 0; s < o.n_sides && !failed; s++) {
            struct side_result res;
            if (run_side(&o, self, dir, &o.sides[s], &res) != 0) {
                failed = true;
                break;
            }
            WEFT_LOG_INFO("bench", "%s: %.1f jobs/min, p50 %.2f s, p99 %.2f s (%d layout "
                          "change%s between consecutive jobs)", o.sides[s].name,
                          res.jobs_per_min, res.p50, res.p99, res.switches,
                          res.switches == 1 ? "" : "s");
            const double v[N_FIGS] = {res.jobs_per_min, res.p50, res.p99, res.small_p50,
                                      res.large_p50};
            for (int k = 0; k < N_FIGS && r >= 0; k++)
                weft_bench_series_set(&figs[s][k], r, v[k]);
        }
    }
    weft_bench_end(&o.b);
    if (failed) {
        WEFT_LOG_ERROR("bench", "logs kept in %s", dir);
        return 1;
    }
    weft_remove_tree(dir);
    report(&o, figs);
    return 0;
}
