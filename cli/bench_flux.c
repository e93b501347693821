/* weft bench flux: FLUX forward time of weft and of Diffusers on torch, same checkpoint, same
 * machine, same device, same threads, same dtype, in one run, with the environment as the
 * machine sets it.
 * Both sides stay loaded in their processes and take turns, one forward each per round; each
 * side's peak RSS is its process's, from the kernel when it exits. */
#include <cJSON.h>
#include <errno.h>
#include <signal.h>
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
#include "worker/flux.h"
#include "worker/noise.h"
#include "worker/denoise.h"

struct flux_bench_opts {
    long long tokens, text, heads, head_dim, dbl, sgl;
    const char *python, *model;
    const char *device;       /* --device as given */
    struct weft_device where; /* what it names (auto: a GPU when there is one) */
    bool no_torch, dev;
    int version;           /* --model-class: 1 flux, 2 flux2 */
    enum weft_dtype dtype; /* the checkpoint's, and the compute dtype of both sides */
    struct weft_bench b;
};

static void help(FILE *out)
{
    fprintf(out,
        "usage: weft bench flux [--model-class flux|flux2|qwenimage] [--dtype f32|bf16]\n"
        "                       [--device DEV]\n"
        "                       [--dev] [--tokens N]\n"
        "                       [--text N] [--heads N] [--head-dim N] [--double N] [--single N]\n"
        "                       [--python PATH | --no-torch] [--rounds N] [--warmup N]\n"
        "                       [--quick] [--json]\n"
        "\n"
        "Forward-pass time and peak RSS of a FLUX-shaped transformer with random weights written\n"
        "to a temporary folder in --dtype (default f32), in weft and in Diffusers on torch\n"
        "(PyPI torch + diffusers, run with --python, default python3; skipped when it cannot\n"
        "import them), both computing in that dtype (weft: [model] dtype), on the same\n"
        "threads ([kernels] threads, default all cores). Each side is one process that loads\n"
        "the model once; a round is one forward of each in turn. ms per block is the step's\n"
        "time over its blocks.\n"
        "\n"
        "  default  8 heads x 128 = 1024 wide, 4 double + 8 single blocks, 1024 image + 128\n"
        "           text tokens\n"
        "  --dev    FLUX.1-dev's width: 24 heads x 128 = 3072, 2 double + 2 single blocks,\n"
        "           4096 image + 512 text tokens (a 1024x1024 image); with flux2, FLUX.2-dev's:\n"
        "           48 heads x 128 = 6144, 1 double + 1 single block\n"
        "  --model-class flux|flux2|qwenimage\n"
        "           FluxTransformer2DModel (default), Flux2Transformer2DModel (in 128\n"
        "           channels, text 15360 wide, MLP 3x with SwiGLU, no biases, shared\n"
        "           modulation, 4 RoPE axes) or QwenImageTransformer2DModel (double blocks\n"
        "           only, text 3584 wide; --dev: Qwen-Image's width, 24 x 128, 2 blocks)\n"
        "  --quick  2 heads x 32, 1 + 1 blocks, 64 + 16 tokens\n"
        "  --device DEV\n"
        "           cpu (default), cuda:N or auto (a GPU when there is one): weft's kernels on\n"
        "           that device and torch on the same one (its CPU for cpu and cpu-devmem); a\n"
        "           GPU that is not there is an error\n\n");
    weft_bench_opt_help(out);
}

static int opt_ll(struct weft_cli *cli, int *i, const char *name, long long *out)
{
    const char *v = weft_cli_opt_value(cli->argc, cli->argv, i, name);
    if (!v)
        return 0;
    return weft_cli_parse_int(name, v, 1, 1000000, out) == 0 ? 1 : -1;
}

/* Returns 0, 1 (help printed) or -1. */
static int parse(struct weft_cli *cli, struct flux_bench_opts *o)
{
    *o = (struct flux_bench_opts){-1, -1, -1, -1, -1, -1, "python3", NULL, "cpu", {0}, false,
                                  false, 1, WEFT_DTYPE_F32, {0}};
    weft_bench_init(&o->b, "weft bench flux");
    static const char *const names[] = {"--tokens", "--text",   "--heads", "--head-dim",
                                        "--double", "--single"};
    long long *fields[] = {&o->tokens, &o->text, &o->heads, &o->head_dim, &o->dbl, &o->sgl};
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
        if (strcmp(cli->argv[i], "--no-torch") == 0 || strcmp(cli->argv[i], "--dev") == 0) {
            *(cli->argv[i][2] == 'n' ? &o->no_torch : &o->dev) = true;
            continue;
        }
        const char *v;
        if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--dtype"))) {
            if (weft_bench_dtype_arg(v, &o->dtype) != 0)
                return -1;
            continue;
        }
        if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--model-class"))) {
            o->version = strcmp(v, "flux") == 0        ? 1
                         : strcmp(v, "flux2") == 0     ? 2
                         : strcmp(v, "qwenimage") == 0 ? 3
                                                       : 0;
            if (!o->version) {
                WEFT_LOG_ERROR("bench", "--model-class: '%s' is none of flux, flux2, qwenimage",
                               v);
                return -1;
            }
            continue;
        }
        if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--device"))) {
            o->device = v;
            continue;
        }
        if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--python"))) {
            o->python = v;
            continue;
        }
        if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--model"))) {
            o->model = v;
            continue;
        }
        for (size_t k = 0; k < sizeof(names) / sizeof(names[0]) && !hit; k++)
            if ((hit = opt_ll(cli, &i, names[k], fields[k])) < 0)
                return -1;
        if (!hit) {
            weft_cli_unexpected("bench", "", "weft bench flux", cli->argv[i]);
            return -1;
        }
    }
    char why[300];
    if (weft_device_parse(o->device, -1, &o->where, why, sizeof(why)) != WEFT_OK) {
        WEFT_LOG_ERROR("bench", "--device: %s", why);
        return -1;
    }
    static const long long full[] = {1024, 128, 8, 128, 4, 8}, quick[] = {64, 16, 2, 32, 1, 1};
    static const long long dev[] = {4096, 512, 24, 128, 2, 2}, dev2[] = {4096, 512, 48, 128, 1, 1};
    static const long long dev3[] = {4096, 512, 24, 128, 2, 0};
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
        if (*fields[k] < 0)
            *fields[k] = o->b.quick ? quick[k]
                         : o->dev   ? (o->version == 2 ? dev2[k] : o->version == 3 ? dev3[k] : dev[k])
                                    : full[k];
    if (o->version == 3) /* Qwen-Image has double blocks only */
        o->sgl = 0;
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* One side: a process that loads the model once, then times one forward per "run" line     */

static void print_error(const char *what)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "error", what);
    char *t = cJSON_PrintUnformatted(j);
    printf("%s\n", t ? t : "{\"error\": \"?\"}");
    (void)fflush(stdout);
    cJSON_free(t);
    cJSON_Delete(j);
}

int weft_bench_flux_run(struct weft_cli *cli)
{
    struct flux_bench_opts o;
    if (parse(cli, &o) || !o.model)
        return 2;
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    char why[300];
    if (weft_kernels_create(&o.where, (int)cli->conf.kernels.threads, &K, &kc, why,
                            sizeof(why)) != WEFT_OK) {
        print_error(why);
        return 1;
    }
    const enum weft_dtype dt = (enum weft_dtype)cli->conf.model.dtype; /* --model.dtype */
    (void)K->set_compute(kc, dt); /* f32 products where the device has no bf16 ones (described) */
    double t0 = weft_now();
    struct weft_flux_opts fo = {K, kc, dt};
    struct weft_flux *m;
    struct weft_error err = WEFT_ERROR_INIT;
    if (weft_flux_load(o.model, &fo, &m, &err) != WEFT_OK) {
        print_error(weft_error_text(&err));
        K->destroy(kc);
        return 1;
    }
    double load_s = weft_now() - t0;
    const struct weft_flux_config *c = weft_flux_get_config(m);
    int64_t w = 1;
    while ((w + 1) * (w + 1) <= o.tokens)
        w++;
    float *hidden = weft_malloc((size_t)(o.tokens * c->in_channels) * 4);
    float *enc = weft_malloc((size_t)(o.text * c->joint_attention_dim) * 4);
    float *pooled = weft_malloc((size_t)c->pooled_projection_dim * 4 + 4);
    float *ids = weft_calloc((size_t)(o.tokens + w) * (size_t)c->n_axes, 4);
    float *tids = weft_calloc((size_t)o.text * (size_t)c->n_axes, 4);
    float *out = weft_malloc((size_t)(o.tokens * c->out_channels) * 4);
    if (!hidden || !enc || !pooled || !ids || !tids || !out)
        return 1;
    weft_noise_normal(1, 0, o.tokens * c->in_channels, hidden);
    weft_noise_normal(2, 0, o.text * c->joint_attention_dim, enc);
    weft_noise_normal(3, 0, c->pooled_projection_dim, pooled);
    weft_flux_ids(c, (o.tokens + w - 1) / w, w, o.text, ids, tids); /* as its pipeline */
    float t = 0.5f, g = 3.5f;
    struct weft_flux_inputs in = {1, o.tokens, o.text, hidden, enc, pooled, &t,
                                  c->guidance_embeds ? &g : NULL, ids, tids};
    char what[256];
    K->describe(kc, what, sizeof(what));
    cJSON *ready = cJSON_CreateObject();
    cJSON_AddBoolToObject(ready, "ready", true);
    cJSON_AddNumberToObject(ready, "load_s", load_s);
    /* a GPU has no kernel threads (0): torch then launches its kernels from one CPU thread */
    cJSON_AddNumberToObject(ready, "threads",
                            weft_kernels_is_cpu(K) ? weft_kernels_cpu_threads(kc) : 0);
    cJSON_AddStringToObject(ready, "about", what);
    char *rl = cJSON_PrintUnformatted(ready);
    printf("%s\n", rl ? rl : "{}");
    cJSON_free(rl);
    cJSON_Delete(ready);
    (void)fflush(stdout);
    int rc = 0;
    char line[64];
    while (rc == 0 && fgets(line, sizeof(line), stdin) && strncmp(line, "run", 3) == 0) {
        double s = weft_now();
        weft_status_t fst = weft_flux_forward(m, &in, out);
        if (fst != WEFT_OK) { /* the cause is in the log */
            print_error(weft_status_str(fst));
            rc = 1;
            break;
        }
        printf("{\"ms\": %.3f}\n", (weft_now() - s) * 1e3);
        (void)fflush(stdout);
    }
    weft_free(hidden), weft_free(enc), weft_free(pooled), weft_free(ids), weft_free(tids);
    weft_free(out);
    weft_flux_destroy(m);
    K->destroy(kc);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* The orchestrator                                                                          */

#define N_SIDES 2 /* weft, torch */
#define READY_TIMEOUT_S 1800.0
#define RUN_TIMEOUT_S 1800.0

struct side {
    const char *impl;
    char about[256]; /* what it runs on: weft's GEMM line, torch's versions */
    struct weft_child ch;
    bool alive;
    int threads;
    double load_s;
    long maxrss_kib;
    struct weft_bench_series ms;
};

/* Start a side and wait for its "ready" line (the model loaded). */
static void side_start(struct side *sd, char *const argv[], char **env)
{
    if (weft_child_start_duplex(argv, env, &sd->ch) != 0)
        return;
    cJSON *j = weft_child_ask_json(&sd->ch, NULL, READY_TIMEOUT_S);
    if (j && cJSON_IsTrue(cJSON_GetObjectItem(j, "ready"))) {
        sd->alive = true;
        const cJSON *ab = cJSON_GetObjectItem(j, "about"), *th = cJSON_GetObjectItem(j,
                                                                                 "threads");
        if (cJSON_IsString(ab))
            snprintf(sd->about, sizeof(sd->about), "%s", ab->valuestring);
        sd->threads = cJSON_IsNumber(th) ? th->valueint : 0;
        const cJSON *ls = cJSON_GetObjectItem(j, "load_s");
        sd->load_s = cJSON_IsNumber(ls) ? ls->valuedouble : -1;
    } else {
        kill(sd->ch.pid, SIGKILL);
    }
    cJSON_Delete(j);
}

/* One forward of a side; a side that fails is stopped and has no samples from then on. */
static void side_round(struct side *sd, int round)
{
    if (!sd->alive)
        return;
    weft_child_settle(); /* the side before it has gone idle */
    cJSON *j = weft_child_ask_json(&sd->ch, "run", RUN_TIMEOUT_S);
    const cJSON *ms = j ? cJSON_GetObjectItem(j, "ms") : NULL;
    if (ms && cJSON_IsNumber(ms)) {
        weft_bench_series_set(&sd->ms, round, ms->valuedouble);
    } else {
        WEFT_LOG_ERROR("bench", "%s: the forward pass failed", sd->impl);
        kill(sd->ch.pid, SIGKILL);
        sd->alive = false;
    }
    cJSON_Delete(j);
}

static void report_json(const struct flux_bench_opts *o, const struct side *sd, int threads)
{
    cJSON *root = weft_bench_json_context(&o->b);
    cJSON *cfg = cJSON_AddObjectToObject(root, "config");
    cJSON_AddNumberToObject(cfg, "heads", (double)o->heads);
    cJSON_AddNumberToObject(cfg, "head_dim", (double)o->head_dim);
    cJSON_AddNumberToObject(cfg, "double", (double)o->dbl);
    cJSON_AddNumberToObject(cfg, "single", (double)o->sgl);
    cJSON_AddNumberToObject(cfg, "image_tokens", (double)o->tokens);
    cJSON_AddNumberToObject(cfg, "text_tokens", (double)o->text);
    cJSON_AddStringToObject(cfg, "dtype", weft_dtype_name(o->dtype));
    char device[32];
    weft_device_name(&o->where, device, sizeof(device));
    cJSON_AddStringToObject(cfg, "device", device);
    cJSON_AddNumberToObject(cfg, "threads", threads);
    const char *env = getenv("OPENBLAS_CORETYPE");
    cJSON_AddStringToObject(cfg, "openblas_coretype_env", env ? env : "unset");
    cJSON *rows = cJSON_AddArrayToObject(root, "rows");
    const double blocks = (double)(o->dbl + o->sgl);
    for (int i = 0; i < N_SIDES; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "impl", sd[i].impl);
        cJSON_AddStringToObject(e, "about", sd[i].about);
        cJSON_AddItemToObject(e, "ms", weft_bench_json_fig(&sd[i].ms, 1.0));
        cJSON_AddItemToObject(e, "ms_per_block", weft_bench_json_fig(&sd[i].ms, 1.0 / blocks));
        cJSON_AddNumberToObject(e, "load_s", sd[i].load_s);
        cJSON_AddNumberToObject(e, "peak_rss_bytes", (double)sd[i].maxrss_kib * 1024.0);
        struct weft_bench_cmp c;
        weft_bench_compare(&sd[i].ms, &sd[1].ms, &c);
        cJSON_AddItemToObject(e, "ratio_vs_torch",
                              i == 0 && sd[1].ms.n ? weft_bench_json_cmp(&c, "torch faster",
                                                                         "weft faster")
                                                   : cJSON_CreateNull());
        cJSON_AddItemToArray(rows, e);
    }
    weft_bench_json_print(root);
}

static void report_table(const struct flux_bench_opts *o, const struct side *sd, int threads)
{
    weft_bench_print_context(&o->b, stdout);
    const char *env = getenv("OPENBLAS_CORETYPE");
    char device[32];
    weft_device_name(&o->where, device, sizeof(device));
    printf("FLUX forward in %s on %s: %lld heads x %lld, %lld double + %lld single blocks, "
           "%lld image + %lld text tokens, %d threads (OPENBLAS_CORETYPE %s)\n",
           weft_dtype_name(o->dtype), device, o->heads, o->head_dim, o->dbl, o->sgl, o->tokens,
           o->text, threads, env ? env : "unset");
    printf("%-16s %-30s %-28s %-10s %-24s %s\n", "impl", "ms / step", "ms / block", "peak RSS",
           "vs torch (paired)", "verdict");
    const double blocks = (double)(o->dbl + o->sgl);
    for (int i = 0; i < N_SIDES; i++) {
        char f[96] = "n/a", pb[96] = "n/a", r[64] = "-", rss[32] = "-";
        const char *verdict = "";
        struct weft_bench_cmp c;
        weft_bench_compare(&sd[i].ms, &sd[1].ms, &c);
        if (sd[i].ms.n) {
            weft_bench_fmt(&sd[i].ms, 1.0, 1, f, sizeof(f));
            weft_bench_fmt(&sd[i].ms, 1.0 / blocks, 1, pb, sizeof(pb));
        }
        if (sd[i].maxrss_kib > 0)
            snprintf(rss, sizeof(rss), "%.2f GB", (double)sd[i].maxrss_kib * 1024.0 / 1e9);
        if (i == 0 && sd[i].ms.n && sd[1].ms.n) {
            weft_bench_fmt_cmp(&c, 2, r, sizeof(r));
            verdict = weft_bench_verdict_str(&c, "torch faster", "weft faster");
        }
        printf("%-16s %-30s %-28s %-10s %-24s %s\n", sd[i].impl, f, pb, rss, r, verdict);
    }
    for (int i = 0; i < N_SIDES; i++)
        if (sd[i].about[0])
            printf("(%s: %s)\n", sd[i].impl, sd[i].about);
    if (!sd[1].alive && !o->no_torch)
        printf("(no torch row: %s could not run Diffusers)\n", o->python);
}

int weft_bench_flux(struct weft_cli *cli)
{
    static struct flux_bench_opts o;
    int rc = parse(cli, &o);
    if (rc)
        return rc > 0 ? 0 : 2;
    if (weft_bench_begin(&o.b) != 0)
        return 2;
    char dir[] = "/tmp/weft_bench_flux_XXXXXX";
    if (!mkdtemp(dir)) {
        WEFT_LOG_ERROR("bench", "cannot create a temporary folder: %s", strerror(errno));
        return 1;
    }
    struct weft_flux_config c;
    if (o.version == 3)
        weft_synth_qwen_config(&c, o.heads, o.head_dim, o.dbl);
    else if (o.version == 2)
        weft_synth_flux2_config(&c, o.heads, o.head_dim, o.dbl, o.sgl);
    else
        weft_synth_flux_config(&c, o.heads, o.head_dim, o.dbl, o.sgl);
    WEFT_LOG_INFO("bench", "writing a synthetic %lldx%lld, %lld+%lld-block %s checkpoint to %s",
                  o.heads, o.head_dim, o.dbl, o.sgl, weft_dtype_name(o.dtype), dir);
    char self[4096];
    if (weft_synth_flux_write(dir, &c, o.dtype, 1) != WEFT_OK ||
        weft_self_path(self, sizeof(self)) != 0) {
        weft_remove_tree(dir);
        return 1;
    }
    char tok[32], txt[32], thr[64], dts[32], tstr[16], script[2048], wdev[32], tdev[32];
    snprintf(tok, sizeof(tok), "%lld", o.tokens);
    snprintf(txt, sizeof(txt), "%lld", o.text);
    snprintf(thr, sizeof(thr), "--kernels.threads=%lld", (long long)cli->conf.kernels.threads);
    snprintf(dts, sizeof(dts), "--model.dtype=%s", weft_dtype_name(o.dtype));
    /* the device as parsed (auto resolved here, once), and torch's name for it: cuda:N is the
     * same in both; the CPU backends (cpu, cpu-devmem) are torch's CPU */
    weft_device_name(&o.where, wdev, sizeof(wdev));
    snprintf(tdev, sizeof(tdev), "%s", o.where.kind == WEFT_DEVICE_CUDA ? wdev : "cpu");
    static struct side sd[N_SIDES] = {{.impl = "weft"}, {.impl = "diffusers+torch"}};
    char *argv[] = {self, thr, dts, "bench", "flux-run", "--model", dir, "--tokens", tok,
                    "--text", txt, "--device", wdev, NULL};
    side_start(&sd[0], argv, NULL); /* the environment as the machine sets it */
    if (!sd[0].alive) { /* its reason (a GPU that is not there, say) is on stderr already */
        WEFT_LOG_ERROR("bench", "weft did not start on %s: no rounds run", wdev);
        weft_remove_tree(dir);
        return 1;
    }
    int threads = sd[0].threads;
    snprintf(script, sizeof(script), "%s/bench/flux_torch.py", WEFT_SOURCE_ROOT);
    snprintf(tstr, sizeof(tstr), "%d", threads > 0 ? threads : 1);
    char *pargv[] = {(char *)o.python, script, "--model", dir, "--tokens", tok, "--text", txt,
                     "--threads", tstr, "--dtype", (char *)weft_dtype_name(o.dtype),
                     "--device", tdev, "--class",
                     o.version == 3 ? "qwenimage" : o.version == 2 ? "flux2" : "flux", NULL};
    if (!o.no_torch)
        side_start(&sd[1], pargv, NULL);
    if (!o.no_torch && !sd[1].alive)
        WEFT_LOG_WARN("bench", "%s could not run Diffusers (torch/diffusers missing?): no torch "
                               "row", o.python);
    for (int r = -o.b.warmup; r < o.b.rounds; r++) { /* weft, torch, weft, torch, ... */
        weft_bench_round_note(&o.b, r);
        for (int i = 0; i < N_SIDES; i++)
            side_round(&sd[i], r);
    }
    weft_bench_end(&o.b);
    for (int i = 0; i < N_SIDES; i++)
        if (sd[i].ch.pid > 0)
            (void)weft_child_finish(&sd[i].ch, NULL, 0, &sd[i].maxrss_kib);
    if (o.b.json)
        report_json(&o, sd, threads);
    else
        report_table(&o, sd, threads);
    weft_remove_tree(dir);
    return sd[0].ms.n == o.b.rounds ? 0 : 1;
}
