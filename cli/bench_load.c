/* weft bench load: sharded loading (each rank reads only its byte ranges) against
 * full-then-shard (load the whole model, keep the local slices), on a synthetic FLUX.1-width
 * checkpoint; load time and peak RSS of every rank, each rank a fresh process run alone. */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/synth.h"
#include "cli/child.h"
#include "cli/cli.h"
#include "cli/progress.h"
#include "common/log.h"
#include "model/plan.h"
#include "worker/flux.h"

static void help(FILE *out)
{
    fprintf(out,
        "usage: weft bench load [--tp LIST] [--double N] [--single N] [--repeats N] [--model DIR]\n"
        "                       [--json]\n"
        "\n"
        "Load time and peak resident memory per rank, sharded load vs full-then-shard, on a\n"
        "synthetic FLUX.1-width checkpoint (24 heads x 128 = 3072; default 4 double + 6 single\n"
        "blocks, about 4.4 GB of bf16) written to a temporary folder (or --model DIR). Every\n"
        "(degree, mode, rank) is a separate process run alone, so peak RSS is that rank's.\n"
        "Weights are held in f32 (twice the bf16 bytes). Default --tp 1,2,4; --repeats N\n"
        "(default 3) runs each and reports the median load time and the largest peak RSS.\n");
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

/* One rank's load in a child, repeats times: the median load time (first-touch costs vary a
 * lot here) and the largest peak RSS. Returns nonzero when a run failed. */
static int measure_rank(const char *self, const char *model, int tp, int rank, int mode,
                        int repeats, double *load_p, double *peak_p)
{
    char t[16], rk[16], out[4096];
    snprintf(t, sizeof(t), "%d", tp);
    snprintf(rk, sizeof(rk), "%d", rank);
    char *argv[] = {(char *)self,  "bench", "load-run", "--model", (char *)model, "--tp", t,
                    "--rank",      rk,      "--mode",   mode ? "full" : "sharded", NULL};
    double loads[15] = {0}, peak = 0;
    int rc = 0;
    for (int rep = 0; rep < repeats; rep++) {
        long rss = 0;
        rc |= weft_child_run(argv, NULL, out, sizeof(out), &rss) != 0;
        cJSON *j = cJSON_Parse(out);
        const cJSON *ls = j ? cJSON_GetObjectItem(j, "load_s") : NULL;
        loads[rep] = ls ? ls->valuedouble : -1;
        cJSON_Delete(j);
        peak = (double)rss * 1024.0 > peak ? (double)rss * 1024.0 : peak;
    }
    *load_p = weft_median(loads, repeats);
    *peak_p = peak;
    return rc;
}

int weft_bench_load(struct weft_cli *cli)
{
    int tps[8] = {1, 2, 4}, n_tp = 3, json = 0, repeats = 3;
    long long dbl = 4, sgl = 6;
    const char *model = NULL;
    for (int i = 1; i < cli->argc; i++) {
        const char *v;
        if (weft_cli_is_help(cli->argv[i])) {
            help(stdout);
            return 0;
        } else if (!strcmp(cli->argv[i], "--json")) {
            json = 1;
        } else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--model"))) {
            model = v;
        } else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--repeats"))) {
            long long x;
            if (weft_cli_parse_int("--repeats", v, 1, 15, &x) != 0)
                return 2;
            repeats = (int)x;
        } else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--double"))) {
            if (weft_cli_parse_int("--double", v, 0, 256, &dbl) != 0)
                return 2;
        } else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--single"))) {
            if (weft_cli_parse_int("--single", v, 0, 256, &sgl) != 0)
                return 2;
        } else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--tp"))) {
            if ((n_tp = weft_cli_parse_int_list("--tp", v, 1, 64, tps, 8)) < 0)
                return 2;
        } else {
            WEFT_LOG_ERROR("bench", "unexpected argument '%s' (see `weft bench load --help`)",
                           cli->argv[i]);
            return 2;
        }
    }
    char dir[] = "/tmp/weft_bench_load_XXXXXX";
    if (!model) {
        if (!mkdtemp(dir))
            return 1;
        struct weft_flux_config c;
        weft_synth_flux_config(&c, 24, 128, dbl, sgl);
        WEFT_LOG_INFO("bench", "writing a synthetic 3072-wide %lld+%lld-block bf16 checkpoint "
                               "to %s", dbl, sgl, dir);
        if (weft_synth_flux_write(dir, &c, WEFT_DTYPE_BF16, 1) != WEFT_OK)
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
    double bpe = 4.0 / 2.0; /* f32 in memory per bf16 byte on disk */
    double planned = (double)lay->planned_bytes * bpe, repl = (double)lay->replicated_bytes * bpe;
    weft_tp_layout_destroy(lay);
    weft_ckpt_close(ck);
    char self[4096];
    if (weft_self_path(self, sizeof(self)) != 0)
        return 1;
    const double gib = 1024.0 * 1024.0 * 1024.0;
    if (!json)
        printf("%4s %-15s %4s %9s %14s %16s\n", "tp", "mode", "rank", "load s", "peak RSS GiB",
               "bound GiB");
    cJSON *rows = cJSON_CreateArray();
    double best[8][2] = {{0}};
    for (int k = 0; k < n_tp; k++) {
        for (int mode = 0; mode < 2; mode++) {
            if (tps[k] == 1 && mode == 1)
                continue; /* nothing to shard */
            for (int r = 0; r < tps[k]; r++) {
                double load, peak;
                int rc = measure_rank(self, model, tps[k], r, mode, repeats, &load, &peak);
                double bound = (planned / tps[k] + repl) * 1.1 + 256.0 * 1024 * 1024;
                if (rc != 0)
                    WEFT_LOG_ERROR("bench", "tp %d rank %d (%s) failed", tps[k], r,
                                   mode ? "full" : "sharded");
                if (load > best[k][mode])
                    best[k][mode] = load;
                if (json) {
                    cJSON *e = cJSON_CreateObject();
                    cJSON_AddNumberToObject(e, "tp", tps[k]);
                    cJSON_AddStringToObject(e, "mode", mode ? "full_then_shard" : "sharded");
                    cJSON_AddNumberToObject(e, "rank", r);
                    cJSON_AddNumberToObject(e, "load_s", load);
                    cJSON_AddNumberToObject(e, "peak_rss_bytes", peak);
                    cJSON_AddNumberToObject(e, "rss_bound_bytes", bound);
                    cJSON_AddItemToArray(rows, e);
                } else {
                    printf("%4d %-15s %4d %9.2f %14.2f %16.2f%s\n", tps[k],
                           mode ? "full-then-shard" : "sharded", r, load, peak / gib,
                           mode ? 0.0 : bound / gib,
                           !mode && peak > bound ? "  over bound" : "");
                }
            }
        }
    }
    if (json) {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddNumberToObject(root, "planned_f32_bytes", planned);
        cJSON_AddNumberToObject(root, "replicated_f32_bytes", repl);
        cJSON_AddItemToObject(root, "rows", rows);
        char *s = cJSON_Print(root);
        printf("%s\n", s ? s : "{}");
        cJSON_free(s);
        cJSON_Delete(root);
    } else {
        cJSON_Delete(rows);
        printf("planned %.2f GiB, replicated %.2f GiB (f32 in memory); bound = (planned / tp + "
               "replicated) x 1.1 + 256 MiB\n", planned / gib, repl / gib);
        for (int k = 0; k < n_tp; k++)
            if (tps[k] > 1 && best[k][0] > 0)
                printf("tp %d: slowest rank sharded %.2f s, full-then-shard %.2f s: %.1fx\n",
                       tps[k], best[k][0], best[k][1], best[k][1] / best[k][0]);
    }
    if (model == dir)
        weft_remove_tree(dir);
    return 0;
}
