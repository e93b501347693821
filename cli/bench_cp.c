/* weft bench cp: the seed's context-parallel table on this machine. Every mode on N processes
 * (one thread each) against one process (one thread), for a square and a non-divisible image,
 * with ms per step, peak memory per rank and the share of the step spent in collectives; every
 * row once per round, the speed-up from each round's pair of baseline and mode. */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/stats.h"
#include "bench/synth.h"
#include "cli/child.h"
#include "cli/cli.h"
#include "cli/progress.h"
#include "common/log.h"
#include "model/mesh.h"
#include "model/plan.h"
#include "transport/comm.h"
#include "worker/denoise.h"
#include "worker/noise.h"
#include "worker/par_transport.h"

#define HEADS 8
#define HEAD_DIM 64

static void help(FILE *out)
{
    fprintf(out,
        "usage: weft bench cp [--np LIST] [--steps N] [--cfg] [--rounds N] [--warmup N]\n"
        "                     [--quick] [--json]\n"
        "\n"
        "Context parallelism on this machine: a FLUX-shaped model scaled to a few CPU cores\n"
        "(8 heads x 64 = 512 wide, 2 double + 4 single blocks, random f32 weights) denoising a\n"
        "square image (32x32 tokens, 64 text tokens) and a non-divisible one (31x33, 63), in\n"
        "every mode (ulysses, ring all-gather, ring p2p, unified, and their anything forms) on\n"
        "N processes of one thread each, against one process of one thread. Default --np 2,4,\n"
        "--steps 3 (after one warm-up step in every process). A round runs every row once,\n"
        "in table order; a mode that refuses a shape is not run again. --quick: 2 heads x 16,\n"
        "1 + 1 blocks, 8x8 + 8 and 7x9 + 7 tokens, --np 2, 1 step.\n"
        "--cfg: every row a true-CFG job (a negative prompt, true_cfg_scale 3: two passes a\n"
        "step), and CFG parallelism's rows besides: cfg 2 (the two passes on two processes\n"
        "at once), cfg 2 x ulysses and cfg 2 x ring (each half context-parallel) on 4.\n\n");
    weft_bench_opt_help(out);
}

struct run_params {
    const char *model, *rdv;
    int np, rank, ring, ulysses, anything, p2p, steps;
    int gh, gw, text;
    int cfg, halves; /* true CFG on; CFG-parallel halves (1 or 2) */
};
#define RUN_ARGS 12

static void child_args(const struct run_params *p, char *buf, size_t len, char **argv,
                       const char *self)
{
    snprintf(buf, len, "%d\n%d\n%d\n%d\n%d\n%d\n%d\n%d\n%d\n%d\n%d\n%d", p->np, p->rank,
             p->ring, p->ulysses, p->anything, p->p2p, p->steps, p->gh, p->gw, p->text, p->cfg,
             p->halves);
    int k = 0;
    argv[k++] = (char *)self;
    argv[k++] = "--kernels.threads=1";
    argv[k++] = "bench";
    argv[k++] = "cp-run";
    argv[k++] = (char *)p->model;
    argv[k++] = (char *)(p->rdv ? p->rdv : "-");
    char *s = buf;
    for (int i = 0; i < RUN_ARGS; i++) {
        argv[k++] = s ? s : (char *)"";
        if (s && (s = strchr(s, '\n')))
            *s++ = '\0';
    }
    argv[k] = NULL;
}

struct step_clock {
    double last, total;
    int counted;
};

static weft_status_t on_step(void *arg, int step, int steps, const float *lat, int64_t n)
{
    (void)steps, (void)lat, (void)n;
    struct step_clock *sc = arg;
    double now = weft_now();
    if (step >= 1) { /* step 0 is the warm-up */
        sc->total += now - sc->last;
        sc->counted++;
    }
    sc->last = now;
    return WEFT_OK;
}

/* One rank: argv = model rdv np rank ring ulysses anything p2p steps gh gw text cfg halves */
int weft_bench_cp_run(struct weft_cli *cli)
{
    if (cli->argc != 3 + RUN_ARGS)
        return 2;
    struct run_params p = {cli->argv[1], cli->argv[2]};
    int *f[RUN_ARGS] = {&p.np, &p.rank, &p.ring, &p.ulysses, &p.anything, &p.p2p, &p.steps,
                        &p.gh, &p.gw, &p.text, &p.cfg, &p.halves};
    for (int i = 0; i < RUN_ARGS; i++)
        *f[i] = atoi(cli->argv[3 + i]);
    struct weft_transport *tp = NULL;
    struct weft_par_transport *pt = NULL;
    struct weft_mesh mesh = {1, p.ring, p.ulysses, 1, 1, p.halves};
    struct weft_mesh_coord me = {0};
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    if (weft_kernels_cpu_create((int)cli->conf.kernels.threads, &K, &kc) != WEFT_OK)
        return 1;
    struct weft_flux_opts o = {.kernels = K, .kctx = kc};
    if (p.np > 1) {
        struct weft_transport_opts to;
        weft_transport_opts_from_conf(&cli->conf.transport, &to);
        if (weft_transport_create(&to, p.rank, p.np, p.rdv, &tp, NULL) != WEFT_OK ||
            weft_par_transport_create(tp, &mesh, 0, &pt, NULL) != WEFT_OK)
            return 1;
        weft_mesh_coord(&mesh, p.rank, &me);
        o.cp = (struct weft_cp_layout){p.ring, p.ulysses, p.anything != 0,
                                       p.p2p ? WEFT_RING_P2P : WEFT_RING_ALLGATHER};
        o.ring_rank = me.ring, o.ulysses_rank = me.ulysses;
        o.comm = weft_par_transport_comm(pt);
    }
    struct weft_flux *m;
    if (weft_flux_load(p.model, &o, &m, NULL) != WEFT_OK)
        return 1;
    const struct weft_flux_config *c = weft_flux_get_config(m);
    int64_t s_img = (int64_t)p.gh * p.gw, n = s_img * c->in_channels;
    float *lat = malloc((size_t)n * 4), *pe = malloc((size_t)(p.text * c->joint_attention_dim) * 4);
    float *pooled = malloc((size_t)c->pooled_projection_dim * 4);
    float *ne = malloc((size_t)(p.text * c->joint_attention_dim) * 4);
    float *no = malloc((size_t)c->pooled_projection_dim * 4);
    weft_noise_normal(1, 0, n, lat);
    weft_noise_normal(2, 0, p.text * c->joint_attention_dim, pe);
    weft_noise_normal(3, 0, c->pooled_projection_dim, pooled);
    weft_noise_normal(4, 0, p.text * c->joint_attention_dim, ne);
    weft_noise_normal(5, 0, c->pooled_projection_dim, no);
    struct weft_sched_config sc;
    weft_sched_config_flux_default(&sc);
    static struct weft_schedule sched;
    struct weft_error err = WEFT_ERROR_INIT;
    weft_sched_plan(&sc, p.steps + 1, s_img, &sched, &err);
    struct step_clock clk = {weft_now(), 0, 0};
    struct weft_denoise_params dp = {.grid_h = p.gh, .grid_w = p.gw, .prompt_embeds = pe,
                                     .s_txt = p.text, .pooled = pooled, .guidance = 3.5f,
                                     .neg_prompt_embeds = p.cfg ? ne : NULL,
                                     .neg_pooled = p.cfg ? no : NULL, .true_cfg_scale = 3.0f,
                                     .cfg_comm = p.halves > 1 ? o.comm : NULL,
                                     .cfg_half = me.cfg, .schedule = &sched,
                                     .on_step = on_step, .cb_arg = &clk};
    weft_status_t st = weft_flux_reserve(m, 1, s_img, p.text, &err);
    if (st == WEFT_OK) {
        if (pt)
            weft_par_transport_reset_stats(pt);
        clk.last = weft_now();
        st = weft_denoise(m, &dp, lat, &err);
    }
    if (st == WEFT_OK) {
        double comm = 0, bytes = 0;
        if (pt) {
            struct weft_par_stats ps;
            weft_par_transport_stats(pt, &ps);
            for (int k = 0; k < WEFT_MESH_GROUP_COUNT; k++)
                for (int op = 0; op < WEFT_PAR_OP_COUNT; op++)
                    comm += ps.seconds[k][op], bytes += ps.bytes[k][op];
        }
        int steps = p.steps + 1;
        printf("{\"ms_per_step\": %.3f, \"comm_ms_per_step\": %.3f, \"bytes_per_step\": %.0f}\n",
               clk.total / clk.counted * 1e3, comm / steps * 1e3, bytes / steps);
    } else {
        printf("{\"refused\": \"%s\"}\n", weft_error_text(&err));
    }
    free(lat), free(pe), free(pooled), free(ne), free(no);
    weft_flux_destroy(m);
    weft_par_transport_destroy(pt);
    weft_transport_destroy(tp);
    weft_kernels_cpu_destroy(kc);
    return 0;
}

/* ---------------------------------------------------------------------------------------- */

struct result {
    int ok;
    double ms, comm_ms, rss_mib;
    char refused[256];
};

/* Launch np ranks (np 1: no transport), collect rank 0's figures and the largest peak RSS. */
static int run_mode(struct run_params p, const char *self, struct result *res)
{
    struct weft_rdv_server *srv = NULL;
    char where[64] = "-";
    if (p.np > 1) {
        if (weft_rdv_server_create("127.0.0.1", 0, p.np, &srv, NULL) != WEFT_OK)
            return -1;
        snprintf(where, sizeof(where), "127.0.0.1:%u", (unsigned)weft_rdv_server_port(srv));
    }
    p.rdv = where;
    struct weft_child ranks[16];
    for (int r = 0; r < p.np; r++) {
        p.rank = r;
        char buf[256], *argv[20];
        child_args(&p, buf, sizeof(buf), argv, self);
        if (weft_child_start(argv, NULL, &ranks[r]) != 0)
            return -1;
    }
    double deadline = weft_now() + 600;
    while (srv && weft_rdv_server_progress(srv, 100) == WEFT_INPROGRESS && weft_now() < deadline)
        ;
    weft_rdv_server_destroy(srv);
    memset(res, 0, sizeof(*res));
    for (int r = 0; r < p.np; r++) {
        char out[4096];
        long rss_kib = 0;
        (void)weft_child_finish(&ranks[r], out, sizeof(out), &rss_kib);
        double rss = (double)rss_kib / 1024.0;
        res->rss_mib = rss > res->rss_mib ? rss : res->rss_mib;
        if (r != 0)
            continue;
        cJSON *j = cJSON_Parse(out);
        if (j && cJSON_GetObjectItem(j, "ms_per_step")) {
            res->ok = 1;
            res->ms = cJSON_GetObjectItem(j, "ms_per_step")->valuedouble;
            res->comm_ms = cJSON_GetObjectItem(j, "comm_ms_per_step")->valuedouble;
        } else if (j && cJSON_GetObjectItem(j, "refused")) {
            snprintf(res->refused, sizeof(res->refused), "%s",
                     cJSON_GetObjectItem(j, "refused")->valuestring);
        }
        cJSON_Delete(j);
    }
    return 0;
}

/* One row of the table: a mode on np processes for a shape, or the one-process baseline. */
struct row {
    int shape, mode; /* mode -1: one process */
    struct run_params p;
    bool refused;
    char why[256];
    struct weft_bench_series ms, comm_share, rss_mib;
};

struct cp_opts {
    int nps[4], n_np, steps;
    bool cfg; /* --cfg */
    struct weft_bench b;
};

static const struct {
    const char *name;
    int gh, gw, text;
} shapes[2][2] = {{{"32x32 (1024+64)", 32, 32, 64}, {"31x33 (1023+63)", 31, 33, 63}},
                  {{"8x8 (64+8)", 8, 8, 8}, {"7x9 (63+7)", 7, 9, 7}}}; /* [quick] */

/* cfg: CFG parallelism's rows (--cfg), two halves of np / 2 ranks, context-parallel by the
 * mode's kind when np / 2 > 1 (none: np 2 only); anything where a shape needs it */
static const struct {
    const char *name;
    int ring_only, uly_only, unified, anything, p2p, cfg;
} modes[] = {
    {"ulysses", 0, 1, 0, 0, 0, 0},          {"ring all-gather", 1, 0, 0, 0, 0, 0},
    {"ring p2p", 1, 0, 0, 0, 1, 0},         {"unified 2-D", 0, 0, 1, 0, 0, 0},
    {"ulysses_anything", 0, 1, 0, 1, 0, 0}, {"ring_anything ag", 1, 0, 0, 1, 0, 0},
    {"ring_anything p2p", 1, 0, 0, 1, 1, 0}, {"unified anything", 0, 0, 1, 1, 0, 0},
    {"cfg 2", 0, 0, 0, 0, 0, 1},            {"cfg 2 x ulysses", 0, 1, 0, 1, 0, 1},
    {"cfg 2 x ring", 1, 0, 0, 1, 0, 1},
};
#define N_MODES (int)(sizeof(modes) / sizeof(modes[0]))
#define MAX_ROWS (2 * (1 + 4 * N_MODES))

/* Every row in table order: per shape the baseline, then every mode at every --np. */
static int rows_plan(const struct cp_opts *o, const char *dir, struct row *rows)
{
    int n = 0;
    for (int s = 0; s < 2; s++) {
        const int q = o->b.quick;
        struct run_params base = {.model = dir, .np = 1, .ring = 1, .ulysses = 1,
                                  .steps = o->steps, .gh = shapes[q][s].gh,
                                  .gw = shapes[q][s].gw, .text = shapes[q][s].text,
                                  .cfg = o->cfg, .halves = 1};
        rows[n++] = (struct row){.shape = s, .mode = -1, .p = base};
        for (int k = 0; k < o->n_np; k++) {
            for (int md = 0; md < N_MODES; md++) {
                struct run_params p = base;
                p.np = o->nps[k];
                if (modes[md].cfg) {
                    const int half = o->nps[k] / 2, plain = !modes[md].ring_only &&
                                                            !modes[md].uly_only;
                    if (!o->cfg || o->nps[k] % 2 || (plain ? half != 1 : half < 2))
                        continue;
                    p.halves = 2;
                    p.ring = modes[md].ring_only ? half : 1;
                    p.ulysses = modes[md].uly_only ? half : 1;
                    p.anything = half > 1 && (p.gh * p.gw % half || p.text % half);
                    rows[n++] = (struct row){.shape = s, .mode = md, .p = p};
                    continue;
                }
                if (modes[md].unified) {
                    if (o->nps[k] != 4)
                        continue;
                    p.ring = 2, p.ulysses = 2;
                } else if (modes[md].ring_only) {
                    p.ring = o->nps[k];
                } else {
                    p.ulysses = o->nps[k];
                }
                p.anything = modes[md].anything, p.p2p = modes[md].p2p;
                rows[n++] = (struct row){.shape = s, .mode = md, .p = p};
            }
        }
    }
    return n;
}

/* One round: every row once, in table order. A mode that refused a shape is not run again. */
static void run_round(struct row *rows, int n, const char *self, int round)
{
    for (int i = 0; i < n; i++) {
        struct row *w = &rows[i];
        if (w->refused)
            continue;
        struct result r = {0};
        if (run_mode(w->p, self, &r) != 0 || !r.ok) {
            w->refused = true;
            snprintf(w->why, sizeof(w->why), "%s", r.refused[0] ? r.refused : "failed to run");
            continue;
        }
        weft_bench_series_set(&w->ms, round, r.ms);
        weft_bench_series_set(&w->comm_share, round, r.comm_ms / r.ms);
        weft_bench_series_set(&w->rss_mib, round, r.rss_mib);
    }
}

/* The baseline row of w's shape. */
static const struct row *baseline(const struct row *rows, const struct row *w)
{
    while (rows->shape != w->shape || rows->mode != -1)
        rows++;
    return rows;
}

static const char *row_name(const struct row *w)
{
    return w->mode < 0 ? "one process" : modes[w->mode].name;
}

/* Modes against each other, from the paired rounds: each anything mode against its plain form
 * (what the generality costs), ring p2p against all-gather (what the memory saving costs). */
static const struct {
    int a, b;
    const char *higher, *lower;
} mode_pairs[] = {
    {4, 0, "anything slower", "anything faster"}, {5, 1, "anything slower", "anything faster"},
    {6, 2, "anything slower", "anything faster"}, {7, 3, "anything slower", "anything faster"},
    {2, 1, "p2p slower", "p2p faster"},           {6, 5, "p2p slower", "p2p faster"},
    {8, 4, "cfg slower", "cfg faster"},           {9, 4, "cfg slower", "cfg faster"},
};
#define N_PAIRS (int)(sizeof(mode_pairs) / sizeof(mode_pairs[0]))

static const struct row *find_row(const struct row *rows, int n, int shape, int mode, int np)
{
    for (int i = 0; i < n; i++)
        if (rows[i].shape == shape && rows[i].mode == mode && rows[i].p.np == np &&
            !rows[i].refused)
            return &rows[i];
    return NULL;
}

/* Calls f for every pair both of whose rows ran, with its ratio a / b. */
static void for_pairs(const struct cp_opts *o, const struct row *rows, int n,
                      void (*f)(void *arg, int pair, const struct row *a,
                                const struct weft_bench_cmp *c),
                      void *arg)
{
    for (int s = 0; s < 2; s++) {
        for (int k = 0; k < o->n_np; k++) {
            for (int q = 0; q < N_PAIRS; q++) {
                const struct row *a = find_row(rows, n, s, mode_pairs[q].a, o->nps[k]);
                const struct row *b = find_row(rows, n, s, mode_pairs[q].b, o->nps[k]);
                if (!a || !b)
                    continue;
                struct weft_bench_cmp c;
                weft_bench_compare(&a->ms, &b->ms, &c);
                f(arg, q, a, &c);
            }
        }
    }
}

struct pair_out {
    const struct cp_opts *o;
    cJSON *arr; /* --json: the pairs go here; else they are printed */
};

static void pair_json(void *arg, int q, const struct row *a, const struct weft_bench_cmp *c)
{
    const struct cp_opts *o = ((struct pair_out *)arg)->o;
    cJSON *arr = ((struct pair_out *)arg)->arr;
    char what[96];
    snprintf(what, sizeof(what), "%s / %s", modes[mode_pairs[q].a].name,
             modes[mode_pairs[q].b].name);
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "pair", what);
    cJSON_AddStringToObject(e, "shape", shapes[o->b.quick][a->shape].name);
    cJSON_AddNumberToObject(e, "np", a->p.np);
    cJSON_AddItemToObject(e, "ms_ratio",
                          weft_bench_json_cmp(c, mode_pairs[q].higher, mode_pairs[q].lower));
    cJSON_AddItemToArray(arr, e);
}

static void pair_print(void *arg, int q, const struct row *a, const struct weft_bench_cmp *c)
{
    const struct cp_opts *o = ((struct pair_out *)arg)->o;
    char what[96], r[96];
    snprintf(what, sizeof(what), "%s / %s", modes[mode_pairs[q].a].name,
             modes[mode_pairs[q].b].name);
    printf("%-38s %-16s %3d %-22s %s\n", what, shapes[o->b.quick][a->shape].name, a->p.np,
           weft_bench_fmt_cmp(c, 3, r, sizeof(r)),
           weft_bench_verdict_str(c, mode_pairs[q].higher, mode_pairs[q].lower));
}

static void report_json(const struct cp_opts *o, const struct row *rows, int n)
{
    cJSON *root = weft_bench_json_context(&o->b);
    cJSON *cfg = cJSON_AddObjectToObject(root, "config");
    cJSON_AddNumberToObject(cfg, "heads", o->b.quick ? 2 : HEADS);
    cJSON_AddNumberToObject(cfg, "head_dim", o->b.quick ? 16 : HEAD_DIM);
    cJSON_AddNumberToObject(cfg, "steps", o->steps);
    cJSON_AddBoolToObject(cfg, "true_cfg", o->cfg);
    cJSON *arr = cJSON_AddArrayToObject(root, "rows");
    for (int i = 0; i < n; i++) {
        const struct row *w = &rows[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "mode", row_name(w));
        cJSON_AddStringToObject(e, "shape", shapes[o->b.quick][w->shape].name);
        cJSON_AddNumberToObject(e, "np", w->p.np);
        if (w->refused) {
            cJSON_AddStringToObject(e, "fails", w->why);
        } else {
            struct weft_bench_cmp c;
            weft_bench_compare(&baseline(rows, w)->ms, &w->ms, &c);
            cJSON_AddItemToObject(e, "ms_per_step", weft_bench_json_fig(&w->ms, 1.0));
            cJSON_AddItemToObject(e, "speedup", w->mode < 0 ? cJSON_CreateNull()
                                                            : weft_bench_json_cmp(&c, "faster",
                                                                                  "slower"));
            cJSON_AddItemToObject(e, "comm_share", weft_bench_json_fig(&w->comm_share, 1.0));
            cJSON_AddItemToObject(e, "peak_rss_mib", weft_bench_json_fig(&w->rss_mib, 1.0));
        }
        cJSON_AddItemToArray(arr, e);
    }
    struct pair_out po = {o, cJSON_AddArrayToObject(root, "pairs")};
    for_pairs(o, rows, n, pair_json, &po);
    weft_bench_json_print(root);
}

static void report_table(const struct cp_opts *o, const struct row *rows, int n)
{
    weft_bench_print_context(&o->b, stdout);
    printf("# FLUX-shaped: %d heads x %d, %s blocks, f32, 1 thread per process, %d step(s) after "
           "1 warm-up step%s; speed-up: one process / this, paired by round\n",
           o->b.quick ? 2 : HEADS, o->b.quick ? 16 : HEAD_DIM,
           o->b.quick ? "1 double + 1 single" : "2 double + 4 single", o->steps,
           o->cfg ? ", true CFG (two passes a step)" : "");
    printf("%-18s %-16s %3s %-26s %-22s %-14s %8s %7s\n", "mode", "shape", "np", "ms / step",
           "speed-up", "verdict", "RSS MiB", "comm %");
    for (int i = 0; i < n; i++) {
        const struct row *w = &rows[i];
        const char *shape = shapes[o->b.quick][w->shape].name;
        if (w->refused) {
            printf("%-18s %-16s %3d fails (%.70s)\n", row_name(w), shape, w->p.np, w->why);
            continue;
        }
        char f1[96], f2[96] = "1.00";
        const char *verdict = "-";
        if (w->mode >= 0) {
            struct weft_bench_cmp c;
            weft_bench_compare(&baseline(rows, w)->ms, &w->ms, &c);
            weft_bench_fmt_cmp(&c, 2, f2, sizeof(f2));
            verdict = weft_bench_verdict_str(&c, "faster", "slower");
        }
        struct weft_bench_stats rss, share;
        weft_bench_stats_of(&w->rss_mib, &rss);
        weft_bench_stats_of(&w->comm_share, &share);
        char pct[16] = "-";
        if (w->mode >= 0)
            snprintf(pct, sizeof(pct), "%.0f%%", 100.0 * share.median);
        printf("%-18s %-16s %3d %-26s %-22s %-14s %8.0f %7s\n", row_name(w), shape, w->p.np,
               weft_bench_fmt(&w->ms, 1.0, 1, f1, sizeof(f1)), f2, verdict, rss.median, pct);
    }
    printf("\nmodes against each other (ms / step, paired by round):\n%-38s %-16s %3s %-22s %s\n",
           "pair", "shape", "np", "ratio", "verdict");
    struct pair_out po = {o, NULL};
    for_pairs(o, rows, n, pair_print, &po);
}

static int parse(struct weft_cli *cli, struct cp_opts *o)
{
    *o = (struct cp_opts){.nps = {2, 4}, .steps = -1};
    weft_bench_init(&o->b, "weft bench cp");
    for (int i = 1; i < cli->argc; i++) {
        const char *v;
        int hit = weft_bench_opt(&o->b, cli->argc, cli->argv, &i);
        if (hit < 0)
            return -1;
        if (hit)
            continue;
        if (weft_cli_is_help(cli->argv[i])) {
            help(stdout);
            return 1;
        } else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--steps"))) {
            long long x;
            if (weft_cli_parse_int("--steps", v, 1, 1000, &x) != 0)
                return -1;
            o->steps = (int)x;
        } else if (strcmp(cli->argv[i], "--cfg") == 0) {
            o->cfg = true;
        } else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--np"))) {
            if ((o->n_np = weft_cli_parse_int_list("--np", v, 2, 16, o->nps, 4)) < 0)
                return -1;
        } else {
            weft_cli_unexpected("bench", "", "weft bench cp", cli->argv[i]);
            return -1;
        }
    }
    if (weft_bench_begin(&o->b) != 0)
        return -1;
    if (o->n_np == 0) /* the defaults: --np 2,4 --steps 3; --quick: --np 2 --steps 1 */
        o->n_np = o->b.quick ? 1 : 2;
    if (o->steps < 0)
        o->steps = o->b.quick ? 1 : 3;
    return 0;
}

int weft_bench_cp(struct weft_cli *cli)
{
    static struct cp_opts o;
    int rc = parse(cli, &o);
    if (rc)
        return rc > 0 ? 0 : 2;
    char dir[] = "/tmp/weft_bench_cp_XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    struct weft_flux_config c;
    if (o.b.quick)
        weft_synth_flux_config(&c, 2, 16, 1, 1);
    else
        weft_synth_flux_config(&c, HEADS, HEAD_DIM, 2, 4);
    c.joint_attention_dim = o.b.quick ? 32 : 256;
    c.pooled_projection_dim = o.b.quick ? 32 : 256;
    char self[4096];
    if (weft_synth_flux_write(dir, &c, WEFT_DTYPE_F32, 1) != WEFT_OK ||
        weft_self_path(self, sizeof(self)) != 0) {
        weft_remove_tree(dir);
        return 1;
    }
    static struct row rows[MAX_ROWS];
    int n = rows_plan(&o, dir, rows);
    for (int r = -o.b.warmup; r < o.b.rounds; r++) {
        weft_bench_round_note(&o.b, r);
        run_round(rows, n, self, r);
    }
    weft_bench_end(&o.b);
    if (o.b.json)
        report_json(&o, rows, n);
    else
        report_table(&o, rows, n);
    weft_remove_tree(dir);
    return rows[0].refused ? 1 : 0;
}
