/* weft bench plan: what `weft plan --auto` predicts, against what the workers do. A
 * FLUX.1-shaped pipeline (random weights, FLUX.1's VAE) runs one image through `weft run` in
 * several layouts of one-core devices; each worker's peak resident memory (weft run reports it
 * from wait4) is set against the planner's memory of the fullest device of that layout
 * (model/autoplan.h: weights as held, the activation formulas the workers reserve with), and
 * the measured denoising step time (the coordinator's job timings) against the planner's
 * predicted step time, the device's rate calibrated on the one-device layout of the same round.
 * The layouts take turns within each round. */
#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/stats.h"
#include "bench/synth.h"
#include "cli/child.h"
#include "cli/cli.h"
#include "common/alloc.h"
#include "common/log.h"
#include "model/autoplan.h"
#include "model/model.h"

#define TOLERANCE 0.15 /* issue's bound: predicted within 15 % of measured */

struct layout {
    const char *name;
    int ring, ulysses, tp, pp; /* pp > 1: device_map over pp devices */
    const char *args[6];
};

static const struct layout layouts[] = { /* the first is the calibration */
    {"one device", 1, 1, 1, 1, {"--np", "1", NULL}},
    {"tp 2", 1, 1, 2, 1, {"--tp", "2", NULL}},
    {"ulysses 2", 1, 2, 1, 1, {"--ulysses", "2", NULL}},
    {"ring 2", 2, 1, 1, 1, {"--ring", "2", NULL}},
    {"device_map 2", 1, 1, 1, 2, {"--device-map", "balanced", "--np", "2", NULL}},
};
#define N_LAYOUTS (int)(sizeof(layouts) / sizeof(layouts[0]))

struct plan_bench {
    long long height, width, dbl, sgl, heads, head_dim, steps, text;
    bool time; /* the --time preset */
    enum weft_dtype dtype;
    struct weft_bench b;
};

static void help(FILE *out)
{
    fprintf(out,
        "usage: weft bench plan [--time] [--dtype f32|bf16] [--height N] [--width N]\n"
        "                       [--heads N] [--head-dim N] [--double N] [--single N]\n"
        "                       [--steps N] [--rounds N] [--quick] [--json]\n"
        "\n"
        "What `weft plan --auto` predicts for a layout against what its workers do, one\n"
        "device being one core (--kernels.threads=1): the memory of the fullest device\n"
        "against the peak resident memory of the layout's workers, and the time of one\n"
        "denoising step against the job's measured denoise time over its steps. A\n"
        "FLUX.1-shaped pipeline (random weights in --dtype, default bf16, FLUX.1's VAE)\n"
        "written to a temporary folder runs one image through `weft run` on one device,\n"
        "tp 2, ulysses 2, ring 2 and device_map over 2, in turns. The device's rate is\n"
        "calibrated on the one-device layout of the same round (its predicted time equals\n"
        "its measured one); the others are predicted with the planner's figures for no\n"
        "link (10 GB/s, 30 us a collective), and both rankings are printed.\n"
        "Default: FLUX.1's width (24 heads x 128), 1 double + 2 single blocks, 512 x 512,\n"
        "1 step, 512 text tokens: the memory check, bound 15 %%; the memory difference\n"
        "includes what the prediction leaves out (the process itself: libraries, UCX,\n"
        "kernel threads; the VAE's convolution workspace). --time: the step-time preset, 8\n"
        "heads x 64, 2 double + 4 single blocks, 256 x 256, 4 steps, 64 text tokens.\n"
        "--quick: a narrow transformer, 64 x 64.\n\n");
    weft_bench_opt_help(out);
}

static int parse(struct weft_cli *cli, struct plan_bench *o)
{
    *o = (struct plan_bench){-1, -1, -1, -1, -1, -1, -1, -1, false, WEFT_DTYPE_BF16, {0}};
    weft_bench_init(&o->b, "weft bench plan");
    static const char *const names[] = {"--height", "--width",    "--double", "--single",
                                        "--heads",  "--head-dim", "--steps"};
    static const long long lo[] = {16, 16, 0, 0, 1, 8, 1}, hi[] = {4096, 4096, 64, 64, 64, 256, 50};
    long long *fields[] = {&o->height, &o->width, &o->dbl,  &o->sgl,
                           &o->heads,  &o->head_dim, &o->steps};
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
        const char *v;
        if (strcmp(cli->argv[i], "--time") == 0) {
            o->time = true;
            continue;
        }
        if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--dtype"))) {
            if (weft_bench_dtype_arg(v, &o->dtype) != 0)
                return -1;
            continue;
        }
        hit = weft_cli_int_opts(cli->argc, cli->argv, &i, sizeof(names) / sizeof(names[0]), names,
                                lo, hi, fields);
        if (hit < 0)
            return -1;
        if (!hit) {
            weft_cli_unexpected("bench", "", "weft bench plan", cli->argv[i]);
            return -1;
        }
    }
    static const long long full[] = {512, 512, 1, 2, 24, 128, 1},
                           timed[] = {256, 256, 2, 4, 8, 64, 4},
                           quick[] = {64, 64, 1, 1, 4, 32, 2};
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
        if (*fields[k] < 0)
            *fields[k] = o->b.quick ? quick[k] : o->time ? timed[k] : full[k];
    o->text = o->b.quick || o->time ? 64 : 512;
    if (o->height % 16 || o->width % 16) {
        WEFT_LOG_ERROR("bench", "--height and --width must be multiples of 16");
        return -1;
    }
    return 0;
}

/* One `weft run` of layout l: the largest peak any of its workers reported, bytes, and the
 * seconds of one denoising step (the job's denoise time over its steps); -1 when it failed. */
static double run_one(const char *self, const char *dir, const struct plan_bench *o, int l,
                      double *step)
{
    char cmd[8192];
    int n = snprintf(cmd, sizeof(cmd), "exec '%s' run --model '%s' --prompt-embeds bench "
                     "--height %lld --width %lld --steps %lld --progress none -v "
                     "--kernels.threads=1 --out '%s/out.png'", self, dir, o->height, o->width,
                     o->steps, dir);
    for (int i = 0; layouts[l].args[i] && n < (int)sizeof(cmd) - 64; i++)
        n += snprintf(cmd + n, sizeof(cmd) - (size_t)n, " %s", layouts[l].args[i]);
    snprintf(cmd + n, sizeof(cmd) - (size_t)n, " 2>&1");
    char *const argv[] = {"/bin/sh", "-c", cmd, NULL};
    static char out[1 << 16];
    if (weft_child_run(argv, NULL, out, sizeof(out), NULL) != 0) {
        WEFT_LOG_ERROR("bench", "%s: weft run failed: %.400s", layouts[l].name, out);
        return -1;
    }
    double peak = -1;
    for (const char *p = out; (p = strstr(p, "peak resident memory ")); p++) {
        const double mib = strtod(p + 21, NULL);
        peak = mib * 1048576.0 > peak ? mib * 1048576.0 : peak;
    }
    const char *d = strstr(out, " (denoise ");
    *step = d ? strtod(d + 10, NULL) / (double)o->steps : -1;
    if (peak < 0 || *step <= 0) {
        WEFT_LOG_ERROR("bench", "%s: weft run reported no %s", layouts[l].name,
                       peak < 0 ? "worker's peak memory" : "denoise time");
        return -1;
    }
    return peak;
}

struct results {
    struct weft_autoplan_candidate pred[N_LAYOUTS]; /* predicted at 1 GFLOP/s */
    struct weft_bench_series meas[N_LAYOUTS], step[N_LAYOUTS], ptime[N_LAYOUTS];
};

/* The planner's candidates for two devices (and one), found by layout: 0, or -1 (logged). */
static int predict(const struct weft_autoplan_model *am, const struct weft_autoplan_job *job,
                   struct results *res)
{
    struct weft_autoplan_devices dev = {.n = 2, .nodes = 1, .memory = 1ull << 50,
                                        .link = WEFT_LINK_NONE, .flops = 1e9};
    struct weft_autoplan_candidate cands[2][16];
    const int nc[2] = {weft_autoplan_rank(am, &dev, job, 1, cands[0], 16),
                       weft_autoplan_rank(am, &dev, job, 2, cands[1], 16)};
    for (int l = 0; l < N_LAYOUTS; l++) {
        const struct layout *y = &layouts[l];
        const int k = y->pp * y->ring * y->ulysses * y->tp;
        int i = 0;
        while (i < nc[k - 1] && (cands[k - 1][i].device_map != (y->pp > 1) ||
                                 cands[k - 1][i].ring != y->ring ||
                                 cands[k - 1][i].ulysses != y->ulysses ||
                                 cands[k - 1][i].tp != y->tp))
            i++;
        if (i == nc[k - 1]) {
            WEFT_LOG_ERROR("bench", "%s: the planner has no such layout for this model",
                           y->name);
            return -1;
        }
        res->pred[l] = cands[k - 1][i];
    }
    return 0;
}

/* The rounds, the layouts in turns: 0, or -1 when a run failed (logged). */
static int measure(const char *self, const char *dir, struct plan_bench *o, struct results *res)
{
    struct weft_autoplan_candidate *pred = res->pred;
    for (int r = -o->b.warmup; r < o->b.rounds; r++) {
        weft_bench_round_note(&o->b, r);
        double t[N_LAYOUTS] = {0};
        for (int l = 0; l < N_LAYOUTS; l++) {
            const double m = run_one(self, dir, o, l, &t[l]);
            if (m < 0)
                return -1;
            if (r >= 0) {
                weft_bench_series_set(&res->meas[l], r, m);
                weft_bench_series_set(&res->step[l], r, t[l]);
            }
        }
        /* the device's rate from this round's one-device step (the candidates were predicted
         * at 1 GFLOP/s: compute scales by the ratio; the collectives' time does not) */
        for (int l = 0; l < N_LAYOUTS && r >= 0; l++) {
            const double rate = pred[0].time.compute / t[0];
            const struct weft_autoplan_time *pt = &pred[l].time;
            weft_bench_series_set(&res->ptime[l], r,
                                  pt->compute / rate + (pt->total - pt->compute));
        }
    }
    return 0;
}

static void report(const struct plan_bench *po, struct results *res)
{
    const struct plan_bench o = *po;
    struct weft_autoplan_candidate *pred = res->pred;
    struct weft_bench_series *meas = res->meas, *step = res->step, *ptime = res->ptime;
    int missed = 0;
    /* rankings: by the medians of the predicted and the measured step times */
    double pmed[N_LAYOUTS], mmed[N_LAYOUTS];
    int prank[N_LAYOUTS], mrank[N_LAYOUTS], agree = 1;
    for (int l = 0; l < N_LAYOUTS; l++) {
        struct weft_bench_stats s;
        weft_bench_stats_of(&ptime[l], &s);
        pmed[l] = s.median;
        weft_bench_stats_of(&step[l], &s);
        mmed[l] = s.median;
    }
    for (int l = 0; l < N_LAYOUTS; l++) {
        prank[l] = mrank[l] = 1;
        for (int k = 0; k < N_LAYOUTS; k++) {
            prank[l] += pmed[k] < pmed[l] || (pmed[k] == pmed[l] && k < l);
            mrank[l] += mmed[k] < mmed[l] || (mmed[k] == mmed[l] && k < l);
        }
        agree &= prank[l] == mrank[l];
    }
    cJSON *root = o.b.json ? weft_bench_json_context(&o.b) : NULL;
    cJSON *rows = root ? cJSON_AddArrayToObject(root, "rows") : NULL;
    if (!root) {
        weft_bench_print_context(&o.b, stdout);
        printf("one %lldx%lld image, %lld step(s), %s weights, transformer %lld heads x %lld, "
               "%lld double + %lld single blocks, FLUX.1's VAE, %lld text tokens; a device is "
               "one core\n", o.height, o.width, o.steps, weft_dtype_name(o.dtype), o.heads,
               o.head_dim, o.dbl, o.sgl, o.text);
        printf("%-13s %-40s %-24s %-10s %s\n", "layout", "predicted MiB (weights+act+ws)",
               "measured peak MiB", "diff", "within 15 %");
    }
    for (int l = 0; l < N_LAYOUTS; l++) {
        struct weft_bench_stats s;
        weft_bench_stats_of(&meas[l], &s);
        const struct weft_autoplan_memory *pm = &pred[l].peak;
        const double p = (double)(pm->weights + pm->activations + pm->workspace);
        const double diff = (s.median - p) / s.median;
        const bool ok = fabs(diff) <= TOLERANCE;
        missed += !ok;
        if (root) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "layout", layouts[l].name);
            cJSON_AddNumberToObject(e, "predicted_bytes", p);
            cJSON_AddNumberToObject(e, "predicted_weights", (double)pm->weights);
            cJSON_AddNumberToObject(e, "predicted_activations", (double)pm->activations);
            cJSON_AddNumberToObject(e, "predicted_workspace", (double)pm->workspace);
            cJSON_AddItemToObject(e, "measured_peak_rss_bytes", weft_bench_json_fig(&meas[l], 1));
            cJSON_AddNumberToObject(e, "difference", diff);
            cJSON_AddBoolToObject(e, "within_15_percent", ok);
            cJSON_AddItemToObject(e, "predicted_step_seconds", weft_bench_json_fig(&ptime[l], 1));
            cJSON_AddNumberToObject(e, "predicted_communication_seconds",
                                    pred[l].time.total - pred[l].time.compute);
            cJSON_AddItemToObject(e, "measured_step_seconds", weft_bench_json_fig(&step[l], 1));
            cJSON_AddNumberToObject(e, "predicted_rank", prank[l]);
            cJSON_AddNumberToObject(e, "measured_rank", mrank[l]);
            cJSON_AddItemToArray(rows, e);
        } else {
            char pw[64], mm[96];
            snprintf(pw, sizeof(pw), "%.1f (%.1f + %.1f + %.1f)", p / 1048576.0,
                     (double)pm->weights / 1048576.0, (double)pm->activations / 1048576.0,
                     (double)pm->workspace / 1048576.0);
            weft_bench_fmt(&meas[l], 1.0 / 1048576.0, 1, mm, sizeof(mm));
            printf("%-13s %-40s %-24s %+8.1f %% %s\n", layouts[l].name, pw, mm, diff * 100,
                   ok ? "yes" : "NO");
        }
    }
    if (root) {
        cJSON_AddBoolToObject(root, "rankings_agree", agree);
        weft_bench_json_print(root);
        return;
    }
    if (missed)
        printf("%d layout(s) outside the 15 %% bound\n", missed);
    printf("\n%-13s %-30s %-26s %-9s %s\n", "layout", "predicted ms/step (comm)",
           "measured ms/step", "diff", "rank predicted / measured");
    for (int l = 0; l < N_LAYOUTS; l++) {
        char pt[64], mt[96];
        snprintf(pt, sizeof(pt), "%.1f (%.2f)%s", pmed[l] * 1e3,
                 (pred[l].time.total - pred[l].time.compute) * 1e3, l ? "" : " calibration");
        weft_bench_fmt(&step[l], 1e3, 1, mt, sizeof(mt));
        printf("%-13s %-30s %-26s %+7.1f %% %d / %d\n", layouts[l].name, pt, mt,
               (mmed[l] - pmed[l]) / mmed[l] * 100, prank[l], mrank[l]);
    }
    printf("rankings %s\n", agree ? "agree" : "differ");
}

int weft_bench_plan(struct weft_cli *cli)
{
    static struct plan_bench o;
    int rc = parse(cli, &o);
    if (rc)
        return rc > 0 ? 0 : 2;
    if (weft_bench_begin(&o.b) != 0)
        return 2;
    char dir[] = "/tmp/weft_bench_plan_XXXXXX", self[4096];
    if (!mkdtemp(dir) || weft_self_path(self, sizeof(self)) != 0) {
        WEFT_LOG_ERROR("bench", "cannot create a temporary folder: %s", strerror(errno));
        return 1;
    }
    struct weft_flux_config fc;
    weft_synth_flux_config(&fc, o.heads, o.head_dim, o.dbl, o.sgl);
    WEFT_LOG_INFO("bench", "writing a %s pipeline (%lldx%lld, %lld+%lld blocks, FLUX.1's VAE) "
                  "to %s", weft_dtype_name(o.dtype), o.heads, o.head_dim, o.dbl, o.sgl, dir);
    struct weft_error err = WEFT_ERROR_INIT;
    struct weft_model *model = NULL;
    struct weft_autoplan_model am = {0};
    if (weft_synth_pipeline_write(dir, &fc, o.dtype, o.dtype, o.text) != WEFT_OK ||
        weft_model_open(dir, &model, &err) != WEFT_OK ||
        weft_autoplan_model_open(model, &am, &err) != WEFT_OK) {
        weft_error_log(&err, "bench");
        weft_model_close(model);
        weft_remove_tree(dir);
        return 1;
    }
    const struct weft_autoplan_job job = {o.height, o.width, o.steps, 1, o.text, false,
                                          WEFT_GOAL_LATENCY};
    static struct results res;
    const bool failed = predict(&am, &job, &res) != 0 || measure(self, dir, &o, &res) != 0;
    weft_bench_end(&o.b);
    weft_autoplan_model_cleanup(&am);
    weft_model_close(model);
    weft_remove_tree(dir);
    if (failed)
        return 1;
    report(&o, &res);
    return 0;
}
