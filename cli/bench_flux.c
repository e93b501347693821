/* weft bench flux: FLUX forward time of weft and of Diffusers on torch, same checkpoint, same
 * machine, same threads, in one run; weft is run with OPENBLAS_CORETYPE as the environment has
 * it and unset (OpenBLAS picks its kernel from it at load, so each is a separate process). */
#include <cblas.h>
#include <cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    long long tokens, text, heads, head_dim, dbl, sgl, repeats;
    const char *python, *model, *device, *dtype;
    int json;
};

static void help(FILE *out)
{
    fprintf(out,
        "usage: weft bench flux [--json] [--tokens N] [--text N] [--heads N] [--head-dim N]\n"
        "                       [--double N] [--single N] [--repeats N] [--python PATH]\n"
        "                       [--device DEV] [--dtype f32|bf16]\n"
        "\n"
        "Forward-pass time of a FLUX-shaped transformer (default: 8 heads x 128 = 1024 wide,\n"
        "4 double + 8 single blocks, 1024 image + 128 text tokens, random bf16 weights written\n"
        "to a temporary folder) in weft and in Diffusers on torch (PyPI torch + diffusers,\n"
        "run with --python, default python3; skipped when it cannot import them), same\n"
        "threads ([kernels] threads, default all cores). weft runs twice: with\n"
        "OPENBLAS_CORETYPE as set and with it unset.\n"
        "\n"
        "--device cuda:N runs both on that GPU (torch on the same device; weft's CUDA backend\n"
        "is compiled, not yet measured); --dtype bf16 runs the model in bf16 with bf16\n"
        "products (torch_dtype=bfloat16), f32 (default) as the checkpoint is widened.\n"
        "FLUX.1-dev-shaped: --heads 24 --tokens 4096 --text 512 --double 2 --single 4.\n");
}

static int opt_ll(struct weft_cli *cli, int *i, const char *name, long long *out)
{
    const char *v = weft_cli_opt_value(cli->argc, cli->argv, i, name);
    if (!v)
        return 0;
    return weft_cli_parse_int(name, v, 1, 1000000, out) == 0 ? 1 : -1;
}

static int parse(struct weft_cli *cli, struct flux_bench_opts *o)
{
    *o = (struct flux_bench_opts){1024, 128, 8, 128, 4, 8, 5, "python3", NULL, "cpu", "f32", 0};
    static const char *const names[] = {"--tokens", "--text",   "--heads",  "--head-dim",
                                        "--double", "--single", "--repeats"};
    long long *fields[] = {&o->tokens, &o->text, &o->heads, &o->head_dim,
                           &o->dbl,    &o->sgl,  &o->repeats};
    for (int i = 1; i < cli->argc; i++) {
        if (weft_cli_is_help(cli->argv[i])) {
            help(stdout);
            return 1;
        }
        if (strcmp(cli->argv[i], "--json") == 0) {
            o->json = 1;
            continue;
        }
        const char *v;
        if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--python"))) {
            o->python = v;
            continue;
        }
        if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--model"))) {
            o->model = v;
            continue;
        }
        if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--device"))) {
            o->device = v;
            continue;
        }
        if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--dtype"))) {
            if (strcmp(v, "f32") != 0 && strcmp(v, "bf16") != 0) {
                WEFT_LOG_ERROR("bench", "--dtype %s: expected f32 or bf16", v);
                return -1;
            }
            o->dtype = v;
            continue;
        }
        int hit = 0;
        for (size_t k = 0; k < sizeof(names) / sizeof(names[0]) && !hit; k++)
            if ((hit = opt_ll(cli, &i, names[k], fields[k])) < 0)
                return -1;
        if (!hit) {
            WEFT_LOG_ERROR("bench", "unexpected argument '%s' (see `weft bench flux --help`)",
                           cli->argv[i]);
            return -1;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* The timed run (a child process)                                                           */

int weft_bench_flux_run(struct weft_cli *cli)
{
    struct flux_bench_opts o;
    if (parse(cli, &o) || !o.model)
        return 2;
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    struct weft_device dev;
    char why[300];
    if (weft_device_parse(o.device, -1, &dev, why, sizeof(why)) != WEFT_OK ||
        weft_kernels_create(&dev, (int)cli->conf.kernels.threads, &K, &kc, why, sizeof(why)) !=
            WEFT_OK) {
        WEFT_LOG_ERROR("bench", "%s", why);
        return 1;
    }
    const enum weft_dtype dt = strcmp(o.dtype, "bf16") == 0 ? WEFT_DTYPE_BF16 : WEFT_DTYPE_F32;
    if (K->set_compute(kc, dt) != WEFT_OK)
        WEFT_LOG_WARN("bench", "%s products are not available on %s: f32 products",
                      weft_dtype_name(dt), o.device);
    double t0 = weft_now();
    struct weft_flux_opts fo = {K, kc, dt};
    struct weft_flux *m;
    if (weft_flux_load(o.model, &fo, &m, NULL) != WEFT_OK)
        return 1;
    double load_s = weft_now() - t0;
    const struct weft_flux_config *c = weft_flux_get_config(m);
    int64_t w = 1;
    while ((w + 1) * (w + 1) <= o.tokens)
        w++;
    float *hidden = weft_malloc((size_t)(o.tokens * c->in_channels) * 4);
    float *enc = weft_malloc((size_t)(o.text * c->joint_attention_dim) * 4);
    float *pooled = weft_malloc((size_t)c->pooled_projection_dim * 4);
    float *ids = weft_calloc((size_t)(o.tokens + w) * 3, 4);
    float *tids = weft_calloc((size_t)o.text * 3, 4);
    float *out = weft_malloc((size_t)(o.tokens * c->out_channels) * 4);
    double *ms = weft_calloc((size_t)o.repeats, sizeof(double));
    if (!hidden || !enc || !pooled || !ids || !tids || !out || !ms)
        return 1;
    weft_noise_normal(1, 0, o.tokens * c->in_channels, hidden);
    weft_noise_normal(2, 0, o.text * c->joint_attention_dim, enc);
    weft_noise_normal(3, 0, c->pooled_projection_dim, pooled);
    weft_flux_image_ids((o.tokens + w - 1) / w, w, 3, ids);
    float t = 0.5f, g = 3.5f;
    struct weft_flux_inputs in = {1, o.tokens, o.text, hidden, enc, pooled, &t, &g, ids, tids};
    int rc = 0;
    for (long long i = -1; i < o.repeats && rc == 0; i++) { /* one warm-up */
        double s = weft_now();
        rc = weft_flux_forward(m, &in, out) != WEFT_OK;
        if (i >= 0)
            ms[i] = (weft_now() - s) * 1e3;
    }
    if (rc == 0) {
        char what[300];
        K->describe(kc, what, sizeof(what));
        printf("{\"ms\": [");
        for (long long i = 0; i < o.repeats; i++)
            printf("%s%.3f", i ? ", " : "", ms[i]);
        printf("], \"load_s\": %.3f, \"threads\": %d, \"coretype\": \"%s\", \"backend\": "
               "\"%s\"}\n",
               load_s, weft_kernels_is_cpu(K) ? weft_kernels_cpu_threads(kc) : 0,
               weft_kernels_is_cpu(K) ? openblas_get_corename() : K->name, what);
    }
    weft_free(hidden), weft_free(enc), weft_free(pooled), weft_free(ids), weft_free(tids);
    weft_free(out), weft_free(ms);
    weft_flux_destroy(m);
    K->destroy(kc);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* The orchestrator                                                                          */

struct row {
    char impl[32], coretype[64];
    double ms;
    int ok;
};

static void parse_row(const char *out, struct row *r)
{
    cJSON *j = cJSON_Parse(out);
    cJSON *ms = j ? cJSON_GetObjectItem(j, "ms") : NULL;
    int n = ms ? cJSON_GetArraySize(ms) : 0;
    if (n > 0) {
        double v[64];
        int k = 0;
        for (cJSON *e = ms->child; e && k < 64; e = e->next)
            v[k++] = e->valuedouble;
        r->ms = weft_median(v, k);
        r->ok = 1;
        cJSON *ct = cJSON_GetObjectItem(j, "coretype");
        if (cJSON_IsString(ct))
            snprintf(r->coretype, sizeof(r->coretype), "%s", ct->valuestring);
    }
    cJSON_Delete(j);
}

int weft_bench_flux(struct weft_cli *cli)
{
    struct flux_bench_opts o;
    int rc = parse(cli, &o);
    if (rc)
        return rc > 0 ? 0 : 2;
    char dir[] = "/tmp/weft_bench_flux_XXXXXX";
    if (!mkdtemp(dir)) {
        WEFT_LOG_ERROR("bench", "cannot create a temporary folder: %s", strerror(errno));
        return 1;
    }
    struct weft_flux_config c;
    weft_synth_flux_config(&c, o.heads, o.head_dim, o.dbl, o.sgl);
    WEFT_LOG_INFO("bench", "writing a synthetic %lldx%lld, %lld+%lld-block checkpoint to %s",
                  o.heads, o.head_dim, o.dbl, o.sgl, dir);
    if (weft_synth_flux_write(dir, &c, WEFT_DTYPE_BF16, 1) != WEFT_OK)
        return 1;
    char self[4096];
    if (weft_self_path(self, sizeof(self)) != 0)
        return 1;
    char tok[32], txt[32], rep[32], thr[64], dev[80], dty[16];
    snprintf(dev, sizeof(dev), "%s", o.device);
    snprintf(dty, sizeof(dty), "%s", o.dtype);
    const bool gpu = strncmp(o.device, "cuda", 4) == 0 || strcmp(o.device, "auto") == 0;
    snprintf(tok, sizeof(tok), "%lld", o.tokens);
    snprintf(txt, sizeof(txt), "%lld", o.text);
    snprintf(rep, sizeof(rep), "%lld", o.repeats);
    snprintf(thr, sizeof(thr), "--kernels.threads=%lld", (long long)cli->conf.kernels.threads);
    static char out[1 << 16];
    struct row rows[3] = {{"weft", "", 0, 0}, {"weft", "", 0, 0}, {"diffusers+torch", "-", 0, 0}};
    int threads = 0;
    for (int v = 0; v < (gpu ? 1 : 2); v++) { /* OpenBLAS is not used on a GPU */
        char **env = weft_env_edit(v ? "OPENBLAS_CORETYPE=" : NULL, NULL);
        char *argv[] = {self, thr, "bench", "flux-run", "--model", dir, "--tokens", tok,
                        "--text", txt, "--repeats", rep, "--device", dev, "--dtype", dty, NULL};
        if (weft_child_run(argv, env, out, sizeof(out), NULL) == 0)
            parse_row(out, &rows[v]);
        cJSON *j = cJSON_Parse(out);
        if (j && cJSON_GetObjectItem(j, "threads"))
            threads = cJSON_GetObjectItem(j, "threads")->valueint;
        cJSON_Delete(j);
        weft_free(env);
    }
    char script[2048], tstr[16];
    snprintf(script, sizeof(script), "%s/bench/flux_torch.py", WEFT_SOURCE_ROOT);
    snprintf(tstr, sizeof(tstr), "%d", threads > 0 ? threads : 1);
    char tdev[80];
    snprintf(tdev, sizeof(tdev), "%s", gpu ? (strcmp(o.device, "auto") == 0 ? "cuda" : o.device)
                                           : "cpu");
    char *pargv[] = {(char *)o.python, script, "--model", dir, "--tokens", tok, "--text", txt,
                     "--threads", tstr, "--repeats", rep, "--device", tdev, "--dtype", dty,
                     NULL};
    if (weft_child_run(pargv, NULL, out, sizeof(out), NULL) == 0)
        parse_row(out, &rows[2]);
    else
        WEFT_LOG_WARN("bench", "%s could not run Diffusers (torch/diffusers missing?): no torch "
                               "column", o.python);
    double torch_ms = rows[2].ok ? rows[2].ms : 0;
    const double blocks = (double)(o.dbl + o.sgl);
    /* on a GPU one weft run (OpenBLAS is not in it): rows 0 and 2 */
    const int shown[3] = {1, !gpu, 1};
    if (o.json) {
        printf("{\"config\": {\"heads\": %lld, \"head_dim\": %lld, \"double\": %lld, "
               "\"single\": %lld, \"image_tokens\": %lld, \"text_tokens\": %lld, "
               "\"threads\": %d, \"device\": \"%s\", \"dtype\": \"%s\"},\n \"rows\": [",
               o.heads, o.head_dim, o.dbl, o.sgl, o.tokens, o.text, threads, o.device, o.dtype);
        for (int i = 0, first = 1; i < 3; i++) {
            if (!shown[i])
                continue;
            printf("%s\n  {\"impl\": \"%s\", \"openblas_core\": \"%s\", \"ms\": %.2f, "
                   "\"ms_per_block\": %.3f, \"ratio_vs_torch\": %.3f}",
                   first ? "" : ",", rows[i].impl, rows[i].coretype, rows[i].ok ? rows[i].ms : -1,
                   rows[i].ok ? rows[i].ms / blocks : -1,
                   rows[i].ok && torch_ms > 0 ? rows[i].ms / torch_ms : -1);
            first = 0;
        }
        printf("]}\n");
    } else {
        printf("FLUX forward: %lld heads x %lld, %lld double + %lld single blocks, %lld image + "
               "%lld text tokens, %s on %s, %d threads\n",
               o.heads, o.head_dim, o.dbl, o.sgl, o.tokens, o.text, o.dtype, o.device, threads);
        printf("%-18s %-22s %12s %12s %16s\n", "impl", gpu ? "backend" : "OpenBLAS core",
               "ms/forward", "ms/block", "ratio vs torch");
        for (int i = 0; i < 3; i++) {
            if (!shown[i])
                continue;
            if (!rows[i].ok) {
                printf("%-18s %-22s %12s %12s %16s\n", rows[i].impl, rows[i].coretype, "n/a",
                       "", "");
                continue;
            }
            printf("%-18s %-22s %12.1f %12.2f %16.2f\n", rows[i].impl,
                   i < 2 ? rows[i].coretype : gpu ? "(torch)" : "(torch: own BLAS)", rows[i].ms,
                   rows[i].ms / blocks, torch_ms > 0 ? rows[i].ms / torch_ms : 0);
        }
        if (!gpu)
            printf("(weft row 1: OPENBLAS_CORETYPE as set; row 2: unset)\n");
    }
    weft_remove_tree(dir);
    return rows[0].ok ? 0 : 1;
}
