/* weft bench load: sharded loading (each rank reads only its byte ranges) against
 * full-then-shard (load the whole model, keep the local slices), on a synthetic FLUX.1-width
 * checkpoint; load time and peak RSS of every rank, each rank a fresh process run alone. */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/stats.h"
#include "bench/synth.h"
#include "cli/child.h"
#include "cli/cli.h"
#include "cli/progress.h"
#include "common/alloc.h"
#include "common/log.h"
#include "model/plan.h"
#include "worker/flux.h"

static void help(FILE *out)
{
    fprintf(out,
        "usage: weft bench load [--tp LIST] [--double N] [--single N] [--dev]\n"
        "                       [--model-class flux|flux2] [--model DIR]\n"
        "                       [--rounds N] [--warmup N] [--quick] [--json]\n"
        "\n"
        "Load time and peak resident memory per rank, sharded load vs full-then-shard, on a\n"
        "synthetic FLUX.1-width checkpoint (24 heads x 128 = 3072; default 4 double + 6 single\n"
        "blocks, about 4.4 GB of bf16) written to a temporary folder (or --model DIR). Every\n"
        "(degree, mode, rank) is a separate process run alone, so peak RSS is that rank's.\n"
        "Weights are held as stored (bf16 matrices; vectors in f32). Default --tp 1,2,4\n"
        "(--quick: 1,2 on a 2 x 32, 1 + 1-block checkpoint). A round loads every (degree, mode,\n"
        "rank) once, in turn; the slowest rank of a round is the degree's load time in it.\n"
        "\n"
        "  --dev  FLUX.1-dev's size: 19 double + 38 single blocks, 23.8 GB of bf16 with its\n"
        "         tensor names, in 10 GB shards with Diffusers' index, written sparse (the\n"
        "         values read as zeros; nothing here looks at them)\n"
        "  --model-class flux2\n"
        "         a Flux2Transformer2DModel instead (48 heads x 128 = 6144); with --dev\n"
        "         FLUX.2-dev's 8 double + 48 single blocks, 64.4 GB of bf16\n"
        "A (degree, mode) whose bound exceeds the memory available is not loaded: its line says\n"
        "so, with the bound.\n\n");
    weft_bench_opt_help(out);
}

static weft_status_t never(void *group, float *buf, size_t count)
{
    (void)group, (void)buf, (void)count;
    return WEFT_ERR_INTERNAL; /* loading never communicates */
}

/* One rank's load in this process: prints {"load_s": x}. */
int weft_bench_load_run(struct weft_cli *cli)
{
    const char *model = NULL, *mode = "sharded";
    int tp = 1, rank = 0;
    for (int i = 1; i < cli->argc; i++) {
        const char *v;
        if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--model")))
            model = v;
        else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--mode")))
            mode = v;
        else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--tp")))
            tp = atoi(v);
        else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--rank")))
            rank = atoi(v);
    }
    if (!model || tp < 1 || rank < 0 || rank >= tp)
        return 2;
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    if (weft_kernels_cpu_create(1, &K, &kc) != WEFT_OK)
        return 1;
    double t0 = weft_now();
    struct weft_ckpt *ck;
    struct weft_tp_layout *lay = NULL;
    struct weft_model_info info;
    struct weft_tp_plan plan;
    if (weft_ckpt_open(model, &ck, NULL) != WEFT_OK ||
        weft_model_info_get(ck, &info, NULL) != WEFT_OK)
        return 1;
    weft_tp_plan_builtin(info.class_name, &plan);
    if (weft_tp_resolve(&plan, ck, &info, tp, tp, &lay, NULL) != WEFT_OK)
        return 1;
    weft_ckpt_close(ck); /* the plan needs headers only; the load opens its own */
    const struct weft_par_comm comm = {.allreduce = never};
    struct weft_flux_opts o = {.kernels = K, .kctx = kc, .tp_rank = rank, .tp_size = tp,
                               .tp_layout = lay, .tp_full_then_shard = !strcmp(mode, "full"),
                               .comm = &comm};
    struct weft_flux *m;
    weft_status_t st = weft_flux_load(model, &o, &m, NULL);
    double load_s = weft_now() - t0;
    if (st == WEFT_OK)
        printf("{\"load_s\": %.3f, \"weight_bytes\": %zu}\n", load_s, weft_flux_weight_bytes(m));
    weft_flux_destroy(m);
    weft_tp_layout_destroy(lay);
    weft_kernels_cpu_destroy(kc);
    return st == WEFT_OK ? 0 : 1;
}

/* ---------------------------------------------------------------------------------------- */
/* The orchestrator                                                                          */

/* One (degree, mode): tp ranks, each its own process, run one after the other. */
struct side {
    int tp, full;
    bool skip; /* its bound exceeds the memory available */
    struct weft_bench_series *load, *rss; /* per rank: seconds, bytes */
    struct weft_bench_series slowest;     /* the slowest rank's load of each round */
};

/* One rank's load in a child: its load time and peak RSS (NaN when it failed). */
static int measure_rank(const char *self, const char *model, int tp, int rank, int full,
                        double *load_p, double *peak_p)
{
    char t[16], rk[16], out[4096];
    snprintf(t, sizeof(t), "%d", tp);
    snprintf(rk, sizeof(rk), "%d", rank);
    char *argv[] = {(char *)self,  "bench", "load-run", "--model", (char *)model, "--tp", t,
                    "--rank",      rk,      "--mode",   full ? "full" : "sharded", NULL};
    long rss = 0;
    int rc = weft_child_run(argv, NULL, out, sizeof(out), &rss) != 0;
    cJSON *j = cJSON_Parse(out);
    const cJSON *ls = j ? cJSON_GetObjectItem(j, "load_s") : NULL;
    rc |= !ls || !cJSON_IsNumber(ls);
    *load_p = rc || !ls ? NAN : ls->valuedouble;
    *peak_p = rc ? NAN : (double)rss * 1024.0;
    cJSON_Delete(j);
    if (rc)
        WEFT_LOG_ERROR("bench", "tp %d rank %d (%s) failed", tp, rank, full ? "full" : "sharded");
    return rc;
}

/* Every side once (a round): for each degree, sharded then full-then-shard. */
static int run_round(struct side *sd, int n, const char *self, const char *model, int round)
{
    int rc = 0;
    for (int k = 0; k < n; k++) {
        if (sd[k].skip)
            continue;
        double slowest = 0;
        for (int r = 0; r < sd[k].tp; r++) {
            double load, peak;
            rc |= measure_rank(self, model, sd[k].tp, r, sd[k].full, &load, &peak);
            weft_bench_series_set(&sd[k].load[r], round, load);
            weft_bench_series_set(&sd[k].rss[r], round, peak);
            slowest = isnan(load) || isnan(slowest) ? NAN : load > slowest ? load : slowest;
        }
        weft_bench_series_set(&sd[k].slowest, round, slowest);
    }
    return rc;
}

/* A rank's weights (its share of the planned bytes and every replicated one, as held) with
 * 10 % and 256 MiB for the process; full-then-shard also holds the whole file at once. */
static double rss_bound(double planned, double repl, int tp, int full)
{
    return (planned / tp + repl + (full ? planned + repl : 0)) * 1.1 + 256.0 * 1024 * 1024;
}

/* MemAvailable from /proc/meminfo, in bytes (0: unknown). */
static double mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    double kib = 0;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "MemAvailable: %lf kB", &kib) == 1)
            break;
    if (f)
        (void)fclose(f); /* read only */
    return kib * 1024.0;
}

static void report_json(const struct weft_bench *b, const struct side *sd, int n, double planned,
                        double repl)
{
    cJSON *root = weft_bench_json_context(b);
    cJSON *cfg = cJSON_AddObjectToObject(root, "config");
    cJSON_AddNumberToObject(cfg, "planned_bytes", planned);
    cJSON_AddNumberToObject(cfg, "replicated_bytes", repl);
    cJSON_AddNumberToObject(cfg, "mem_available_bytes", mem_available());
    cJSON *rows = cJSON_AddArrayToObject(root, "rows");
    cJSON *deg = cJSON_AddArrayToObject(root, "degrees");
    for (int k = 0; k < n; k++) {
        for (int r = 0; r < sd[k].tp; r++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "tp", sd[k].tp);
            cJSON_AddStringToObject(e, "mode", sd[k].full ? "full_then_shard" : "sharded");
            cJSON_AddNumberToObject(e, "rank", r);
            cJSON_AddItemToObject(e, "load_s", weft_bench_json_fig(&sd[k].load[r], 1.0));
            cJSON_AddItemToObject(e, "peak_rss_bytes", weft_bench_json_fig(&sd[k].rss[r], 1.0));
            cJSON_AddNumberToObject(e, "rss_bound_bytes", rss_bound(planned, repl, sd[k].tp, sd[k].full));
            cJSON_AddBoolToObject(e, "measured", !sd[k].skip);
            cJSON_AddItemToArray(rows, e);
        }
        if (!sd[k].full || sd[k].skip || sd[k - 1].skip)
            continue;
        /* the sharded side of the same degree precedes this one */
        struct weft_bench_cmp c;
        weft_bench_compare(&sd[k].slowest, &sd[k - 1].slowest, &c);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "tp", sd[k].tp);
        cJSON_AddItemToObject(e, "sharded_slowest_s", weft_bench_json_fig(&sd[k - 1].slowest, 1));
        cJSON_AddItemToObject(e, "full_slowest_s", weft_bench_json_fig(&sd[k].slowest, 1));
        cJSON_AddItemToObject(e, "full_over_sharded",
                              weft_bench_json_cmp(&c, "sharded faster", "full faster"));
        cJSON_AddItemToArray(deg, e);
    }
    weft_bench_json_print(root);
}

static void report_table(const struct weft_bench *b, const struct side *sd, int n,
                         double planned, double repl)
{
    const double gib = 1024.0 * 1024.0 * 1024.0;
    char f1[96], f2[96], f3[96];
    weft_bench_print_context(b, stdout);
    printf("%4s %-15s %4s %-30s %-30s %9s\n", "tp", "mode", "rank", "load s", "peak RSS GiB",
           "bound GiB");
    for (int k = 0; k < n; k++) {
        double bound = rss_bound(planned, repl, sd[k].tp, sd[k].full);
        if (sd[k].skip) {
            printf("%4d %-15s  all not measured: bound %.2f GiB, %.2f GiB available here\n",
                   sd[k].tp, sd[k].full ? "full-then-shard" : "sharded", bound / gib,
                   mem_available() / gib);
            continue;
        }
        for (int r = 0; r < sd[k].tp; r++) {
            struct weft_bench_stats st;
            weft_bench_stats_of(&sd[k].rss[r], &st);
            char bs[32];
            snprintf(bs, sizeof(bs), "%.2f", bound / gib);
            printf("%4d %-15s %4d %-30s %-30s %9s%s\n", sd[k].tp,
                   sd[k].full ? "full-then-shard" : "sharded", r,
                   weft_bench_fmt(&sd[k].load[r], 1.0, 2, f1, sizeof(f1)),
                   weft_bench_fmt(&sd[k].rss[r], 1.0 / gib, 2, f2, sizeof(f2)), bs,
                   st.n && st.max > bound ? "  over bound" : "");
        }
    }
    printf("planned %.2f GiB, replicated %.2f GiB (as held); bound = (planned / tp + replicated "
           "[+ planned + replicated for full-then-shard]) x 1.1 + 256 MiB\n\nslowest rank of "
           "each round:\n", planned / gib, repl / gib);
    printf("%4s %-26s %-26s %-26s %s\n", "tp", "sharded s", "full-then-shard s",
           "full / sharded (paired)", "verdict");
    for (int k = 0; k < n; k++) {
        if (!sd[k].full || sd[k].skip || sd[k - 1].skip)
            continue;
        struct weft_bench_cmp c;
        weft_bench_compare(&sd[k].slowest, &sd[k - 1].slowest, &c);
        printf("%4d %-26s %-26s %-26s %s\n", sd[k].tp,
               weft_bench_fmt(&sd[k - 1].slowest, 1.0, 2, f1, sizeof(f1)),
               weft_bench_fmt(&sd[k].slowest, 1.0, 2, f2, sizeof(f2)),
               weft_bench_fmt_cmp(&c, 2, f3, sizeof(f3)),
               weft_bench_verdict_str(&c, "sharded faster", "full faster"));
    }
}

/* The sides: every degree sharded, and full-then-shard after it from tp 2 (nothing to shard at
 * tp 1). Returns their number, or -1. */
static int sides_create(const int *tps, int n_tp, struct side *sd)
{
    int n = 0;
    for (int k = 0; k < n_tp; k++) {
        for (int full = 0; full < 2; full++) {
            if (tps[k] == 1 && full)
                continue;
            sd[n] = (struct side){.tp = tps[k], .full = full};
            sd[n].load = weft_calloc((size_t)tps[k], sizeof(*sd[n].load));
            sd[n].rss = weft_calloc((size_t)tps[k], sizeof(*sd[n].rss));
            if (!sd[n].load || !sd[n].rss)
                return -1;
            n++;
        }
    }
    return n;
}

static int parse(struct weft_cli *cli, struct weft_bench *b, int *tps, int *n_tp, long long *dbl,
                 long long *sgl, const char **model, bool *dev, int *version)
{
    for (int i = 1; i < cli->argc; i++) {
        const char *v;
        int hit = weft_bench_opt(b, cli->argc, cli->argv, &i);
        if (hit < 0)
            return -1;
        if (hit)
            continue;
        if (weft_cli_is_help(cli->argv[i])) {
            help(stdout);
            return 1;
        } else if (strcmp(cli->argv[i], "--dev") == 0) {
            *dev = true;
        } else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--model-class"))) {
            if (strcmp(v, "flux") != 0 && strcmp(v, "flux2") != 0) {
                WEFT_LOG_ERROR("bench", "--model-class: '%s' is neither flux nor flux2", v);
                return -1;
            }
            *version = v[4] == '2' ? 2 : 1;
        } else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--model"))) {
            *model = v;
        } else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--double"))) {
            if (weft_cli_parse_int("--double", v, 0, 256, dbl) != 0)
                return -1;
        } else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--single"))) {
            if (weft_cli_parse_int("--single", v, 0, 256, sgl) != 0)
                return -1;
        } else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--tp"))) {
            if ((*n_tp = weft_cli_parse_int_list("--tp", v, 1, 64, tps, 8)) < 0)
                return -1;
        } else {
            weft_cli_unexpected("bench", "", "weft bench load", cli->argv[i]);
            return -1;
        }
    }
    return 0;
}

int weft_bench_load(struct weft_cli *cli)
{
    int tps[8] = {1, 2, 4}, n_tp = 0;
    long long dbl = -1, sgl = -1;
    const char *model = NULL;
    bool dev = false;
    int version = 1;
    struct weft_bench b;
    weft_bench_init(&b, "weft bench load");
    int prc = parse(cli, &b, tps, &n_tp, &dbl, &sgl, &model, &dev, &version);
    if (prc)
        return prc > 0 ? 0 : 2;
    if (weft_bench_begin(&b) != 0)
        return 2;
    if (n_tp == 0) /* the default degrees */
        n_tp = b.quick ? 2 : 3;
    char dir[] = "/tmp/weft_bench_load_XXXXXX";
    if (!model) {
        if (!mkdtemp(dir))
            return 1;
        struct weft_flux_config c;
        /* --quick: a tiny checkpoint of the same structure */
        if (version == 2) /* FLUX.2-dev: 8 + 48 blocks */
            weft_synth_flux2_config(&c, b.quick ? 2 : 48, b.quick ? 32 : 128,
                                    dbl >= 0 ? dbl : b.quick ? 1 : dev ? 8 : 2,
                                    sgl >= 0 ? sgl : b.quick ? 1 : dev ? 48 : 4);
        else
            weft_synth_flux_config(&c, b.quick ? 2 : 24, b.quick ? 32 : 128,
                                   dbl >= 0 ? dbl : b.quick ? 1 : dev ? 19 : 4,
                                   sgl >= 0 ? sgl : b.quick ? 1 : dev ? 38 : 6);
        WEFT_LOG_INFO("bench", "writing a synthetic %lld-wide %lld+%lld-block bf16 checkpoint "
                               "to %s%s", (long long)c.num_attention_heads * c.attention_head_dim,
                      (long long)c.num_layers, (long long)c.num_single_layers, dir,
                      dev ? " (sparse, 10 GB shards)" : "");
        if ((dev ? weft_synth_flux_write_sharded(dir, &c, WEFT_DTYPE_BF16, 10000000000ull, true, 1)
                 : weft_synth_flux_write(dir, &c, WEFT_DTYPE_BF16, 1)) != WEFT_OK)
            return 1;
        model = dir;
    }
    /* planned / replicated bytes, in f32 as held in memory */
    struct weft_ckpt *ck;
    struct weft_model_info info;
    struct weft_tp_plan plan;
    struct weft_tp_layout *lay;
    if (weft_ckpt_open(model, &ck, NULL) != WEFT_OK ||
        weft_model_info_get(ck, &info, NULL) != WEFT_OK ||
        !weft_tp_plan_builtin(info.class_name, &plan) ||
        weft_tp_resolve(&plan, ck, &info, 1, 1, &lay, NULL) != WEFT_OK)
        return 1;
    const double planned = (double)lay->planned_bytes, repl = (double)lay->replicated_bytes;
    weft_tp_layout_destroy(lay);
    weft_ckpt_close(ck);
    char self[4096];
    if (weft_self_path(self, sizeof(self)) != 0)
        return 1;
    struct side sd[16] = {{0}};
    int n = sides_create(tps, n_tp, sd), rc = n < 0;
    const double avail = mem_available();
    for (int k = 0; k < n; k++)
        sd[k].skip = avail > 0 && rss_bound(planned, repl, sd[k].tp, sd[k].full) > avail;
    for (int r = -b.warmup; r < b.rounds && !rc; r++) {
        weft_bench_round_note(&b, r);
        rc = run_round(sd, n, self, model, r);
    }
    weft_bench_end(&b);
    if (!rc && b.json)
        report_json(&b, sd, n, planned, repl);
    else if (!rc)
        report_table(&b, sd, n, planned, repl);
    for (int k = 0; k < 16; k++)
        weft_free(sd[k].load), weft_free(sd[k].rss);
    if (model == dir)
        weft_remove_tree(dir);
    return rc;
}
