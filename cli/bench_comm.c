/* weft bench comm: weft's collectives on N local processes, side by side in one run with the
 * same operation through Open MPI (default and with its malloc tuned) and a single-core memcpy
 * of the same size, the physical limit on one host. nccl-tests style table or JSON. */
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/stats.h"
#include "cli/child.h"
#include "cli/cli.h"
#include "worker/par_transport.h"
#include "cli/progress.h"
#include "common/alloc.h"
#include "common/log.h"
#include "transport/comm.h"

extern char **environ;

#define MAX_SIZES 32
#define RANK_TIMEOUT_S 300

enum bench_op { BOP_ALLREDUCE, BOP_ALLGATHER, BOP_ALLTOALL };
static const char *const bop_names[] = {"allreduce", "allgather", "alltoall"};

/* Every figure of one run, per size. */
enum column { COL_WEFT, COL_WEFT_UCX, COL_MPI, COL_MPI_TUNED, COL_MEMCPY, COL_COUNT };

struct params {
    enum bench_op op;
    int np;
    size_t bytes[MAX_SIZES];
    int nsizes;
    int iters[MAX_SIZES];
    struct weft_bench b; /* rounds, --json, --quick */
    bool no_mpi, bind;
    bool ucx_side; /* the weft-ucx column: weft with [transport] shm off */
    bool private_bufs; /* --private: the weft column on private buffers too (staged copies) */
    const char *mpi_helper;
    struct weft_transport_opts opts;
    char tls[WEFT_CONF_STR];
    /* microseconds per call, [size][column], by round (warm-up rounds are not kept) */
    struct weft_bench_series us[MAX_SIZES][COL_COUNT];
};

static void help(FILE *out)
{
    fprintf(out,
        "usage: weft bench comm --op allreduce|allgather|alltoall --np N --bytes LIST [--json]\n"
        "                       [--rounds N] [--warmup N] [--quick] [--iters N] [--no-mpi]\n"
        "                       [--no-bind] [--private] [--mpi-helper PATH]\n"
        "\n"
        "Runs the collective on N forked weft processes (f32, out of place), once as\n"
        "configured (buffers from weft_big_alloc_shared, which the shared-memory path reads\n"
        "in place; where the ranks cannot read each other's memory by CMA, only up to\n"
        "[transport] shm_max, and private huge pages above) and once with [transport] shm\n"
        "off (weft-ucx: UCX moves every byte, from private huge-page buffers; --private: the\n"
        "first on such buffers too, which the shared-memory path reads by CMA from 256 KiB\n"
        "and copies into its staging buffer below), then the same through Open MPI\n"
        "(mpirun --oversubscribe -np N, default and with MALLOC_MMAP_MAX_=0\n"
        "MALLOC_TRIM_THRESHOLD_=16GiB), then a one-core memcpy of the same\n"
        "size, in turn in every round. LIST: sizes such as 1MiB,16MiB,64MiB (the\n"
        "per-rank buffer: the input of all-reduce, the output of all-gather, the send buffer of\n"
        "all-to-all). busbw as nccl-tests: algbw x 2(n-1)/n for all-reduce, x (n-1)/n else.\n"
        "Weft rank r runs on core r mod cores (--no-bind: where the scheduler puts it).\n"
        "[transport] options apply to weft (--transport.chunk_bytes=1MiB ...). --quick: 2\n"
        "calls per size.\n\n");
    weft_bench_opt_help(out);
}

/* ---- the weft side: N forked ranks ----------------------------------------------------- */

static weft_status_t run_op(struct weft_comm *c, enum bench_op op, const float *s, float *r,
                            size_t bytes, int n)
{
    if (op == BOP_ALLREDUCE)
        return weft_comm_allreduce(c, s, r, bytes / 4, WEFT_DTYPE_F32);
    if (op == BOP_ALLGATHER)
        return weft_comm_allgather(c, s, r, bytes / 4 / (size_t)n, WEFT_DTYPE_F32);
    return weft_comm_alltoall(c, s, r, bytes / 4 / (size_t)n, WEFT_DTYPE_F32);
}

/* Buffer sizes of one call: what each rank sends and receives. */
static void op_sizes(enum bench_op op, size_t bytes, int n, size_t *send_p, size_t *recv_p)
{
    size_t per = bytes / 4 / (size_t)n * 4;
    *send_p = op == BOP_ALLREDUCE ? bytes / 4 * 4 : op == BOP_ALLGATHER ? per : per * (size_t)n;
    *recv_p = op == BOP_ALLREDUCE ? bytes / 4 * 4 : per * (size_t)n;
}

static int rank_sizes(struct weft_transport *tp, const struct params *p, int out)
{
    struct weft_comm *w = weft_transport_world(tp);
    int n = p->np, me = weft_transport_rank(tp);
    for (int k = 0; k < p->nsizes; k++) {
        size_t sb, rb;
        op_sizes(p->op, p->bytes[k], n, &sb, &rb);
        /* the shared-memory path reads shareable buffers in place (at every size where the
         * group may use CMA, else up to [transport] shm_max); UCX (weft-ucx, and calls above
         * shm_max without CMA) is at its best on private huge pages (its CMA copies pin every
         * page) */
        bool priv = p->private_bufs || !weft_comm_shm_fits(w, p->bytes[k]);
        float *s = priv ? weft_big_alloc(sb) : weft_big_alloc_shared(sb);
        float *r = priv ? weft_big_alloc(rb) : weft_big_alloc_shared(rb);
        if (!s || !r)
            return 1;
        for (size_t i = 0; i < sb / 4; i++)
            s[i] = (float)(i % 1000);
        memset(r, 0, rb);
        weft_status_t st = WEFT_OK;
        for (int i = 0; i < 2 && st == WEFT_OK; i++)
            st = run_op(w, p->op, s, r, p->bytes[k], n);
        if (st == WEFT_OK)
            st = weft_comm_barrier(w);
        double t0 = weft_now();
        for (int i = 0; i < p->iters[k] && st == WEFT_OK; i++)
            st = run_op(w, p->op, s, r, p->bytes[k], n);
        double mine = (weft_now() - t0) / p->iters[k], all[64];
        if (st == WEFT_OK)
            st = weft_comm_allgather(w, &mine, all, 1, WEFT_DTYPE_F64);
        if (st != WEFT_OK) {
            WEFT_LOG_ERROR("bench", "rank %d: %s", me, weft_status_str(st));
            return 1;
        }
        double slowest = 0;
        for (int i = 0; i < n; i++)
            slowest = all[i] > slowest ? all[i] : slowest;
        if (me == 0)
            dprintf(out, "%zu %.3f\n", p->bytes[k], slowest * 1e6);
        weft_big_free(s, sb);
        weft_big_free(r, rb);
    }
    return 0;
}

static void rank_main(int rank, const struct params *p, const char *where, int out)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (p->bind) {
        /* rank r on core r mod cores, as mpirun binds by default: two ranks left on one core
         * by the scheduler halve the bandwidth for the whole run */
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(rank % (int)sysconf(_SC_NPROCESSORS_ONLN), &set);
        if (sched_setaffinity(0, sizeof(set), &set) != 0)
            WEFT_LOG_WARN("bench", "rank %d: cannot bind to a core: %s", rank, strerror(errno));
    }
    weft_log_set_rank(rank);
    struct weft_transport *tp;
    struct weft_transport_opts o = p->opts;
    o.shm = o.shm && !p->ucx_side;
    if (weft_transport_create(&o, rank, p->np, where, &tp, NULL) != WEFT_OK)
        _exit(1);
    int rc = rank_sizes(tp, p, out);
    weft_transport_destroy(tp);
    _exit(rc);
}

/* One weft round: fork the ranks, host their rendezvous, read rank 0's figures. */
static int run_weft(struct params *p, int round, bool ucx)
{
    p->ucx_side = ucx;
    const int col = ucx ? COL_WEFT_UCX : COL_WEFT;
    struct weft_rdv_server *srv;
    if (weft_rdv_server_create("127.0.0.1", 0, p->np, &srv, NULL) != WEFT_OK)
        return 1;
    char where[64];
    snprintf(where, sizeof(where), "127.0.0.1:%u", (unsigned)weft_rdv_server_port(srv));
    int fds[2];
    if (pipe(fds) != 0) {
        weft_rdv_server_destroy(srv);
        return 1;
    }
    (void)fflush(stdout); /* not twice in the children */
    pid_t pids[64];
    int started = 0;
    for (; started < p->np; started++) {
        pids[started] = fork();
        if (pids[started] < 0)
            break;
        if (pids[started] == 0) {
            close(fds[0]);
            close(weft_rdv_server_fd(srv));
            rank_main(started, p, where, fds[1]);
        }
    }
    close(fds[1]);
    weft_status_t st = WEFT_INPROGRESS;
    double deadline = weft_now() + RANK_TIMEOUT_S;
    while (started == p->np && st == WEFT_INPROGRESS && weft_now() < deadline)
        st = weft_rdv_server_progress(srv, 100);
    weft_rdv_server_destroy(srv);
    FILE *f = fdopen(fds[0], "r");
    int got = 0;
    size_t b;
    double us;
    while (f && got < p->nsizes && fscanf(f, "%zu %lf", &b, &us) == 2)
        weft_bench_series_set(&p->us[got++][col], round, us);
    if (f)
        (void)fclose(f); /* a read-only pipe: nothing to lose */
    else
        close(fds[0]);
    int fail = got != p->nsizes;
    for (int r = 0; r < started; r++) {
        int ws;
        if (fail)
            kill(pids[r], SIGKILL);
        while (waitpid(pids[r], &ws, 0) < 0 && errno == EINTR)
            ;
        fail |= !WIFEXITED(ws) || WEXITSTATUS(ws) != 0;
    }
    if (fail)
        WEFT_LOG_ERROR("bench", "the weft ranks failed (%d of %d sizes measured)", got,
                       p->nsizes);
    return fail;
}

/* ---- the MPI side and memcpy -------------------------------------------------------------- */

static int run_mpi(struct params *p, int round, bool tuned)
{
    /* one mpirun per size, so every size gets its own iteration count */
    for (int k = 0; k < p->nsizes; k++) {
        char cmd[4096];
        snprintf(cmd, sizeof(cmd),
                 "mpirun --allow-run-as-root --oversubscribe -np %d %s '%s' %s %d %zu 2>&1",
                 p->np,
                 tuned ? "-x MALLOC_MMAP_MAX_=0 -x MALLOC_TRIM_THRESHOLD_=17179869184" : "",
                 p->mpi_helper, bop_names[p->op], p->iters[k], p->bytes[k]);
        FILE *f = popen(cmd, "r");
        if (!f)
            return 1;
        char line[512];
        size_t b;
        double us = -1;
        while (fgets(line, sizeof(line), f))
            if (sscanf(line, "%zu %lf", &b, &us) == 2 && b == p->bytes[k])
                break;
        while (fgets(line, sizeof(line), f))
            ;
        int rc = pclose(f);
        if (rc != 0 || us <= 0) {
            WEFT_LOG_ERROR("bench", "Open MPI run failed: %s", cmd);
            return 1;
        }
        weft_bench_series_set(&p->us[k][tuned ? COL_MPI_TUNED : COL_MPI], round, us);
    }
    return 0;
}

static void run_memcpy(struct params *p, int round)
{
    for (int k = 0; k < p->nsizes; k++) {
        size_t b = p->bytes[k];
        char *s = weft_big_alloc(b), *d = weft_big_alloc(b);
        if (!s || !d) {
            weft_bench_series_set(&p->us[k][COL_MEMCPY], round, NAN);
            continue;
        }
        memset(s, 1, b);
        memset(d, 0, b);
        memcpy(d, s, b);
        int iters = p->iters[k] * 2;
        double t0 = weft_now();
        for (int i = 0; i < iters; i++) {
            s[i % b] = (char)i; /* a use of the copy, so it is not elided */
            memcpy(d, s, b);
        }
        weft_bench_series_set(&p->us[k][COL_MEMCPY], round, (weft_now() - t0) / iters * 1e6);
        weft_big_free(s, b);
        weft_big_free(d, b);
    }
}

/* ---- report ------------------------------------------------------------------------------- */

static double busbw(const struct params *p, size_t bytes, double us)
{
    if (!(us > 0))
        return NAN;
    double alg = (double)bytes / (us * 1e3), n = p->np;
    return p->op == BOP_ALLREDUCE ? alg * 2 * (n - 1) / n : alg * (n - 1) / n;
}

/* The rounds' bandwidths (GB/s) of a column: bus bandwidth, or the copy rate of memcpy. */
static void gbs_series(const struct params *p, int k, int col, struct weft_bench_series *out)
{
    memset(out, 0, sizeof(*out));
    const struct weft_bench_series *us = &p->us[k][col];
    for (int r = 0; r < us->n; r++) {
        double v = us->v[r];
        weft_bench_series_set(out, r,
                              col == COL_MEMCPY ? (v > 0 ? (double)p->bytes[k] / (v * 1e3) : NAN)
                                                : busbw(p, p->bytes[k], v));
    }
}

static void env_describe(const struct params *p, char *buf, size_t len)
{
    char thp[64] = "?";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f) {
        if (!fgets(thp, sizeof(thp), f))
            thp[0] = '\0';
        (void)fclose(f);
        thp[strcspn(thp, "\n")] = '\0';
    }
    char ucx[256] = "";
    for (char **e = environ; *e; e++)
        if (strncmp(*e, "UCX_", 4) == 0 && strlen(ucx) + strlen(*e) + 2 < sizeof(ucx))
            strcat(strcat(ucx, *ucx ? " " : ""), *e);
    const bool cma = weft_transport_cma_allowed();
    snprintf(buf, len,
             "[transport] tls = '%s' (empty: UCX's choice), chunk_bytes = %zu, "
             "pipeline_depth = %d, spin_us = %d (-1: auto), shm = %s, shm_max = %zu (0: every "
             "size); CMA between this host's processes: %s; UCX environment: %s; THP: %s (weft "
             "buffers and memcpy use MADV_HUGEPAGE)",
             p->tls, p->opts.chunk_bytes, p->opts.pipeline_depth, p->opts.spin_us,
             p->opts.shm ? "true" : "false", p->opts.shm_max,
             cma ? "allowed (shared memory at every size)"
                 : "forbidden (shared memory up to shm_max, private buffers staged)",
             *ucx ? ucx : "none", thp);
}

static const char *const col_names[] = {"weft", "weft-ucx", "mpi", "mpi-tuned", "memcpy"};
static const char *const col_keys[] = {"weft", "weft_ucx", "mpi", "mpi_tuned", "memcpy"};
static const char *const col_wins[] = {"", "weft-ucx faster", "mpi faster", "mpi-tuned faster",
                                       "memcpy faster"};

/* Columns this run has. */
static bool col_on(const struct params *p, int col)
{
    if (col == COL_MPI || col == COL_MPI_TUNED)
        return !p->no_mpi;
    return col != COL_WEFT_UCX || p->opts.shm;
}

static void report_json(const struct params *p, const char *env)
{
    cJSON *root = weft_bench_json_context(&p->b);
    cJSON *cfg = cJSON_AddObjectToObject(root, "config");
    cJSON_AddStringToObject(cfg, "op", bop_names[p->op]);
    cJSON_AddNumberToObject(cfg, "np", p->np);
    cJSON_AddStringToObject(cfg, "environment", env);
    cJSON *rows = cJSON_AddArrayToObject(root, "rows");
    for (int k = 0; k < p->nsizes; k++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "bytes", (double)p->bytes[k]);
        cJSON_AddNumberToObject(e, "iters", p->iters[k]);
        struct weft_bench_series g[COL_COUNT];
        for (int col = 0; col < COL_COUNT; col++) {
            if (!col_on(p, col))
                continue;
            char key[64];
            gbs_series(p, k, col, &g[col]);
            if (col != COL_MEMCPY) {
                snprintf(key, sizeof(key), "%s_us", col_keys[col]);
                cJSON_AddItemToObject(e, key, weft_bench_json_fig(&p->us[k][col], 1.0));
            }
            snprintf(key, sizeof(key), "%s_%s", col_keys[col],
                     col == COL_MEMCPY ? "gbs" : "busbw");
            cJSON_AddItemToObject(e, key, weft_bench_json_fig(&g[col], 1.0));
            if (col == COL_WEFT)
                continue;
            struct weft_bench_cmp c;
            weft_bench_compare(&g[COL_WEFT], &g[col], &c);
            snprintf(key, sizeof(key), "weft_over_%s", col_keys[col]);
            cJSON_AddItemToObject(e, key, weft_bench_json_cmp(&c, "weft faster", col_wins[col]));
        }
        cJSON_AddItemToArray(rows, e);
    }
    weft_bench_json_print(root);
}

static void report_table(const struct params *p, const char *env)
{
    weft_bench_print_context(&p->b, stdout);
    printf("# %s, %d processes, f32; %s\n", bop_names[p->op], p->np, env);
    printf("# busbw as nccl-tests; memcpy: bytes copied per second on one core\n");
    printf("%12s %-10s %-30s %-30s %-26s %s\n", "bytes", "side", "us / call",
           "busbw GB/s (memcpy: GB/s)", "weft / side (paired)", "verdict");
    for (int k = 0; k < p->nsizes; k++) {
        struct weft_bench_series g[COL_COUNT];
        for (int col = 0; col < COL_COUNT; col++) {
            if (!col_on(p, col))
                continue;
            char f1[96] = "", f2[96], f3[96] = "";
            const char *verdict = "";
            gbs_series(p, k, col, &g[col]);
            if (col != COL_MEMCPY)
                weft_bench_fmt(&p->us[k][col], 1.0, 1, f1, sizeof(f1));
            weft_bench_fmt(&g[col], 1.0, 2, f2, sizeof(f2));
            if (col != COL_WEFT) {
                struct weft_bench_cmp c;
                weft_bench_compare(&g[COL_WEFT], &g[col], &c);
                weft_bench_fmt_cmp(&c, 2, f3, sizeof(f3));
                verdict = weft_bench_verdict_str(&c, "weft faster", col_wins[col]);
            }
            printf("%12zu %-10s %-30s %-30s %-26s %s\n", p->bytes[k], col_names[col], f1, f2,
                   f3, verdict);
        }
    }
}

static void report(const struct params *p)
{
    char env[1024];
    env_describe(p, env, sizeof(env));
    if (p->b.json)
        report_json(p, env);
    else
        report_table(p, env);
}

/* ---- options ------------------------------------------------------------------------------ */

static int parse_sizes(struct params *p, const char *list)
{
    char buf[1024];
    snprintf(buf, sizeof(buf), "%s", list);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        uint64_t b;
        if (p->nsizes == MAX_SIZES || weft_conf_parse_size(t, &b) != WEFT_OK || b < 4 ||
            b > ((uint64_t)1 << 34)) {
            WEFT_LOG_ERROR("bench", "--bytes: '%s' is not a size from 4 B to 16 GiB", t);
            return -1;
        }
        p->bytes[p->nsizes++] = (size_t)b;
    }
    return p->nsizes ? 0 : -1;
}

static int parse(struct weft_cli *cli, struct params *p)
{
    const char *v;
    int iters = 0;
    weft_bench_init(&p->b, "weft bench comm");
    p->np = 2;
    p->bind = true;
    p->mpi_helper = WEFT_BENCH_MPI;
    for (int i = 1; i < cli->argc; i++) {
        int hit = weft_bench_opt(&p->b, cli->argc, cli->argv, &i);
        if (hit < 0)
            return -1;
        if (hit)
            continue;
        if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--op"))) {
            int k = 0;
            while (k < 3 && strcmp(v, bop_names[k]) != 0)
                k++;
            if (k == 3) {
                WEFT_LOG_ERROR("bench", "--op %s: expected allreduce, allgather or alltoall", v);
                return -1;
            }
            p->op = (enum bench_op)k;
        } else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--np"))) {
            long long x;
            if (weft_cli_parse_int("--np", v, 1, 64, &x) != 0)
                return -1;
            p->np = (int)x;
        } else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--bytes"))) {
            if (parse_sizes(p, v) != 0)
                return -1;
        } else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--iters"))) {
            long long x;
            if (weft_cli_parse_int("--iters", v, 1, 1000000, &x) != 0)
                return -1;
            iters = (int)x;
        } else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--mpi-helper"))) {
            p->mpi_helper = v;
        } else if (strcmp(cli->argv[i], "--no-mpi") == 0) {
            p->no_mpi = true;
        } else if (strcmp(cli->argv[i], "--private") == 0) {
            p->private_bufs = true;
        } else if (strcmp(cli->argv[i], "--no-bind") == 0) {
            p->bind = false;
        } else {
            WEFT_LOG_ERROR("bench", "unknown option '%s' (see `weft bench comm --help`)",
                           cli->argv[i]);
            return -1;
        }
    }
    if (p->np < 1 || p->np > 64 || !p->nsizes) {
        WEFT_LOG_ERROR("bench", "need --bytes and --np 1..64");
        return -1;
    }
    if (weft_bench_begin(&p->b) != 0)
        return -1;
    if (!p->no_mpi && !p->mpi_helper[0]) {
        WEFT_LOG_ERROR("bench", "no Open MPI helper was built (mpicc missing): use --no-mpi");
        return -1;
    }
    for (int k = 0; k < p->nsizes; k++) {
        /* about a quarter of a second per size at 2 GB/s, 3 calls at least */
        size_t want = (size_t)5e8 / (p->bytes[k] + 4096);
        p->iters[k] = iters > 0      ? iters
                      : p->b.quick   ? 2
                      : want < 3     ? 3
                      : want > 1000  ? 1000
                                     : (int)want;
    }
    snprintf(p->tls, sizeof(p->tls), "%s", cli->conf.transport.tls);
    weft_transport_opts_from_conf(&cli->conf.transport, &p->opts);
    p->opts.tls = p->tls;
    return 0;
}

int weft_bench_comm(struct weft_cli *cli)
{
    for (int i = 1; i < cli->argc; i++) {
        if (weft_cli_is_help(cli->argv[i])) {
            help(stdout);
            return 0;
        }
    }
    struct params *p = weft_calloc(1, sizeof(*p));
    if (!p)
        return 1;
    int rc = parse(cli, p);
    for (int r = rc == 0 ? -p->b.warmup : 0; rc == 0 && r < p->b.rounds; r++) {
        weft_bench_round_note(&p->b, r); /* weft, weft-ucx, mpi, mpi tuned, memcpy; ... */
        rc = run_weft(p, r, false);
        if (rc == 0 && p->opts.shm)
            rc = run_weft(p, r, true);
        if (rc == 0 && !p->no_mpi)
            rc = run_mpi(p, r, false) || run_mpi(p, r, true);
        if (rc == 0)
            run_memcpy(p, r);
    }
    if (rc == 0) {
        weft_bench_end(&p->b);
        report(p);
    }
    weft_free(p);
    return rc < 0 ? 2 : rc;
}
