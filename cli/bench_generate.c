/* weft bench generate: one whole image, prompt embeddings to PNG, by `weft generate` and by
 * Diffusers' FluxPipeline on torch, from the same pipeline folder (a FLUX.1-dev-shaped
 * transformer with few blocks, FLUX.1's VAE, random weights), the same size, steps, dtype and
 * threads; each side a fresh process per round, so its wall time includes loading and its peak
 * RSS is its own. The sides take turns within each round. */
#include <cJSON.h>
#include <errno.h>
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
#include "kernels/kernels.h"

struct gen_bench {
    long long height, width, steps, heads, dbl, sgl, text;
    enum weft_dtype dtype;
    const char *python;
    bool no_torch;
    struct weft_bench b;
};

static void help(FILE *out)
{
    fprintf(out,
        "usage: weft bench generate [--dtype f32|bf16] [--height N] [--width N] [--steps N]\n"
        "                           [--double N] [--single N] [--python PATH | --no-torch]\n"
        "                           [--rounds N] [--warmup N] [--quick] [--json]\n"
        "\n"
        "Wall time and peak RSS of one whole image (prompt embeddings to PNG) by `weft generate`\n"
        "and by Diffusers' FluxPipeline on torch (--python, default python3), from one pipeline\n"
        "folder written to a temporary folder: a FLUX.1-dev-shaped transformer (24 heads x 128,\n"
        "default 2 double + 2 single blocks) in --dtype (default bf16), FLUX.1's VAE in the same\n"
        "dtype, random weights, 512 text tokens. Default 1024 x 1024, 4 steps, seed 0; both\n"
        "compute in --dtype on [kernels] threads. Each side is a fresh process per round (its\n"
        "load included); the sides take turns. --quick: a tiny transformer, 64 x 64, 2 steps.\n\n");
    weft_bench_opt_help(out);
}

static int parse(struct weft_cli *cli, struct gen_bench *o)
{
    *o = (struct gen_bench){-1, -1, -1, 24, -1, -1, 512, WEFT_DTYPE_BF16, "python3", false, {0}};
    weft_bench_init(&o->b, "weft bench generate");
    static const char *const names[] = {"--height", "--width", "--steps", "--double",
                                        "--single"};
    long long *fields[] = {&o->height, &o->width, &o->steps, &o->dbl, &o->sgl};
    static const long long lo[] = {16, 16, 1, 0, 0}, hi[] = {4096, 4096, 100, 64, 64};
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
        if (strcmp(cli->argv[i], "--no-torch") == 0) {
            o->no_torch = true;
        } else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--python"))) {
            o->python = v;
        } else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--dtype"))) {
            if (weft_bench_dtype_arg(v, &o->dtype) != 0)
                return -1;
        } else {
            hit = weft_cli_int_opts(cli->argc, cli->argv, &i, sizeof(names) / sizeof(names[0]),
                                    names, lo, hi, fields);
            if (hit < 0)
                return -1;
            if (!hit) {
                weft_cli_unexpected("bench", "", "weft bench generate", cli->argv[i]);
                return -1;
            }
        }
    }
    static const long long full[] = {1024, 1024, 4, 2, 2}, quick[] = {64, 64, 2, 1, 1};
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
        if (*fields[k] < 0)
            *fields[k] = o->b.quick ? quick[k] : full[k];
    if (o->b.quick)
        o->heads = 2, o->text = 16;
    if (o->height % 16 || o->width % 16) {
        WEFT_LOG_ERROR("bench", "--height and --width must be multiples of 16");
        return -1;
    }
    return 0;
}

struct side {
    const char *impl;
    bool failed;
    struct weft_bench_series wall, rss;
};

/* One run of a side: its wall time and peak RSS into the round's samples. */
static void side_run(struct side *sd, char *const argv[], int round)
{
    if (sd->failed)
        return;
    weft_child_settle();
    char out[4096];
    long rss = 0;
    const double t0 = weft_now();
    const int rc = weft_child_run(argv, NULL, out, sizeof(out), &rss);
    const double wall = weft_now() - t0;
    if (rc != 0) {
        WEFT_LOG_ERROR("bench", "%s exited %d: %.300s", sd->impl, rc, out);
        sd->failed = true;
        return;
    }
    weft_bench_series_set(&sd->wall, round, wall);
    weft_bench_series_set(&sd->rss, round, (double)rss * 1024.0);
}

static void report(const struct gen_bench *o, const struct side *sd, int threads)
{
    if (o->b.json) {
        cJSON *root = weft_bench_json_context(&o->b);
        cJSON *cfg = cJSON_AddObjectToObject(root, "config");
        cJSON_AddNumberToObject(cfg, "height", (double)o->height);
        cJSON_AddNumberToObject(cfg, "width", (double)o->width);
        cJSON_AddNumberToObject(cfg, "steps", (double)o->steps);
        cJSON_AddNumberToObject(cfg, "heads", (double)o->heads);
        cJSON_AddNumberToObject(cfg, "double", (double)o->dbl);
        cJSON_AddNumberToObject(cfg, "single", (double)o->sgl);
        cJSON_AddNumberToObject(cfg, "text_tokens", (double)o->text);
        cJSON_AddStringToObject(cfg, "dtype", weft_dtype_name(o->dtype));
        cJSON_AddNumberToObject(cfg, "threads", threads);
        cJSON *rows = cJSON_AddArrayToObject(root, "rows");
        for (int i = 0; i < 2; i++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "impl", sd[i].impl);
            cJSON_AddItemToObject(e, "wall_s", weft_bench_json_fig(&sd[i].wall, 1.0));
            cJSON_AddItemToObject(e, "peak_rss_bytes", weft_bench_json_fig(&sd[i].rss, 1.0));
            struct weft_bench_cmp c;
            weft_bench_compare(&sd[i].wall, &sd[1].wall, &c);
            cJSON_AddItemToObject(e, "ratio_vs_torch",
                                  i == 0 && sd[1].wall.n
                                      ? weft_bench_json_cmp(&c, "torch faster", "weft faster")
                                      : cJSON_CreateNull());
            cJSON_AddItemToArray(rows, e);
        }
        weft_bench_json_print(root);
        return;
    }
    weft_bench_print_context(&o->b, stdout);
    printf("one %lldx%lld image, %lld steps, %s: transformer %lld heads x %d, %lld double + "
           "%lld single blocks, FLUX.1's VAE, %lld text tokens, %d threads\n",
           o->height, o->width, o->steps, weft_dtype_name(o->dtype), o->heads,
           o->b.quick ? 32 : 128, o->dbl, o->sgl, o->text, threads);
    printf("%-16s %-30s %-30s %-24s %s\n", "impl", "wall s", "peak RSS GB", "vs torch (paired)",
           "verdict");
    for (int i = 0; i < 2; i++) {
        char w[96] = "n/a", r[96] = "n/a", c[64] = "-";
        const char *verdict = "";
        if (sd[i].wall.n) {
            weft_bench_fmt(&sd[i].wall, 1.0, 2, w, sizeof(w));
            weft_bench_fmt(&sd[i].rss, 1e-9, 2, r, sizeof(r));
        }
        struct weft_bench_cmp cmp;
        weft_bench_compare(&sd[i].wall, &sd[1].wall, &cmp);
        if (i == 0 && sd[0].wall.n && sd[1].wall.n) {
            weft_bench_fmt_cmp(&cmp, 2, c, sizeof(c));
            verdict = weft_bench_verdict_str(&cmp, "torch faster", "weft faster");
        }
        printf("%-16s %-30s %-30s %-24s %s\n", sd[i].impl, w, r, c, verdict);
    }
}

int weft_bench_generate(struct weft_cli *cli)
{
    static struct gen_bench o;
    int rc = parse(cli, &o);
    if (rc)
        return rc > 0 ? 0 : 2;
    if (weft_bench_begin(&o.b) != 0)
        return 2;
    char dir[] = "/tmp/weft_bench_generate_XXXXXX", self[4096];
    if (!mkdtemp(dir) || weft_self_path(self, sizeof(self)) != 0) {
        WEFT_LOG_ERROR("bench", "cannot create a temporary folder: %s", strerror(errno));
        return 1;
    }
    struct weft_flux_config fc;
    weft_synth_flux_config(&fc, o.heads, o.b.quick ? 32 : 128, o.dbl, o.sgl);
    WEFT_LOG_INFO("bench", "writing a %s pipeline (%lldx%d, %lld+%lld blocks, FLUX.1's VAE) to %s",
                  weft_dtype_name(o.dtype), o.heads, o.b.quick ? 32 : 128, o.dbl, o.sgl, dir);
    if (weft_synth_pipeline_write(dir, &fc, o.dtype, o.dtype, o.text) != WEFT_OK) {
        weft_remove_tree(dir);
        return 1;
    }
    const int threads = cli->conf.kernels.threads > 0 ? (int)cli->conf.kernels.threads
                                                      : weft_kernels_cpu_usable_cores();
    char thr[48], dts[48], h[24], w[24], st[24], tstr[16], wout[2100], tout[2100], script[2048];
    snprintf(thr, sizeof(thr), "--kernels.threads=%d", threads);
    snprintf(dts, sizeof(dts), "--model.dtype=%s", weft_dtype_name(o.dtype));
    snprintf(h, sizeof(h), "%lld", o.height);
    snprintf(w, sizeof(w), "%lld", o.width);
    snprintf(st, sizeof(st), "%lld", o.steps);
    snprintf(tstr, sizeof(tstr), "%d", threads);
    snprintf(wout, sizeof(wout), "%s/weft.png", dir);
    snprintf(tout, sizeof(tout), "%s/torch.png", dir);
    snprintf(script, sizeof(script), "%s/bench/generate_torch.py", WEFT_SOURCE_ROOT);
    char *wargv[] = {self, thr, dts, "generate", "--model", dir, "--prompt-embeds", "bench",
                     "--height", h, "--width", w, "--steps", st, "--out", wout, NULL};
    char *pargv[] = {(char *)o.python, script, "--model", dir, "--height", h, "--width", w,
                     "--steps", st, "--threads", tstr, "--dtype",
                     (char *)weft_dtype_name(o.dtype), "--out", tout, NULL};
    static struct side sd[2] = {{.impl = "weft generate"}, {.impl = "diffusers+torch"}};
    sd[1].failed = o.no_torch;
    for (int r = -o.b.warmup; r < o.b.rounds; r++) { /* weft, torch, weft, torch, ... */
        weft_bench_round_note(&o.b, r);
        side_run(&sd[0], wargv, r);
        side_run(&sd[1], pargv, r);
    }
    weft_bench_end(&o.b);
    if (!o.no_torch && !sd[1].wall.n)
        WEFT_LOG_WARN("bench", "%s could not run Diffusers: no torch row", o.python);
    report(&o, sd, threads);
    weft_remove_tree(dir);
    return sd[0].wall.n == o.b.rounds ? 0 : 1;
}
