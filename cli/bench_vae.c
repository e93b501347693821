/* weft bench vae: what decoding costs, on an AutoencoderKL with FLUX.1's exact config and random
 * weights (written to a temporary folder):
 *
 *   convs     conv2d im2col + weft's GEMM vs the direct kernel, on every conv shape of one
 *             decode, weighted by how often it runs;
 *   decode    decode time and peak RSS at --size, in one piece and in --tile tiles;
 *   pipeline  the staged pipeline (each component freed after its stage) vs every component
 *             resident, peak RSS, on a FLUX-shaped transformer + that VAE at --pipe-size.
 *
 * Every memory figure comes from its own child process (getrusage(RUSAGE_SELF).ru_maxrss at its
 * end), so no configuration inherits another's pages. Figures go to bench/README.md. */
#include <cJSON.h>
#include <errno.h>
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "bench/stats.h"
#include "bench/synth.h"
#include "cli/child.h"
#include "cli/cli.h"
#include "cli/progress.h"
#include "common/alloc.h"
#include "common/log.h"
#include "model/safetensors.h"
#include "worker/noise.h"
#include "model/model.h"
#include "worker/runtime.h"
#include "worker/vae.h"

struct vae_bench_opts {
    long long size, tile, pipe_size, steps, text;
    const char *only, *mode, *dir;
    int keep;
    struct weft_bench b;
};

static void help(FILE *out)
{
    fprintf(out,
        "usage: weft bench vae [--only convs|decode|pipeline] [--size PX] [--tile PX]\n"
        "                      [--pipe-size PX] [--steps N] [--rounds N] [--warmup N]\n"
        "                      [--quick] [--json]\n"
        "\n"
        "VAE decode costs on an AutoencoderKL with FLUX.1's config (block_out_channels 128,\n"
        "256, 512, 512; 2 layers per block; 16 latent channels) and random f32 weights:\n"
        "conv2d im2col+GEMM vs direct on every conv shape of a --size decode (default 1024),\n"
        "decode time and peak RSS in one piece and in --tile pixel tiles (default 512), and\n"
        "the staged pipeline vs all components resident (a 1024-wide FLUX-shaped transformer,\n"
        "4 double + 8 single blocks, at --pipe-size, default 512, --steps 1). Each memory\n"
        "figure is one child process's ru_maxrss. Rounds: convs, one call of every shape with\n"
        "each kernel in turn (one process kept loaded);\n"
        "decode and pipeline, one process per mode in turn. --quick: --size 64 --tile 32\n"
        "--pipe-size 64 and a 2 x 32, 1 + 1-block transformer.\n\n");
    weft_bench_opt_help(out);
}

static int opt_ll(struct weft_cli *cli, int *i, const char *name, long long lo, long long *out)
{
    const char *v = weft_cli_opt_value(cli->argc, cli->argv, i, name);
    if (!v)
        return 0;
    return weft_cli_parse_int(name, v, lo, 16384, out) == 0 ? 1 : -1;
}

static int parse(struct weft_cli *cli, struct vae_bench_opts *o)
{
    *o = (struct vae_bench_opts){-1, -1, -1, 1, 128, NULL, NULL, NULL, 0, {0}};
    weft_bench_init(&o->b, "weft bench vae");
    static const char *const names[] = {"--size", "--tile", "--pipe-size", "--steps", "--keep"};
    long long keep = 0;
    long long *fields[] = {&o->size, &o->tile, &o->pipe_size, &o->steps, &keep};
    static const long long lows[] = {64, 0, 64, 1, 0};
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
        if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--only")))
            o->only = v;
        else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--mode")))
            o->mode = v;
        else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--dir")))
            o->dir = v;
        else {
            for (size_t k = 0; k < sizeof(names) / sizeof(names[0]) && !hit; k++)
                if ((hit = opt_ll(cli, &i, names[k], lows[k], fields[k])) < 0)
                    return -1;
            if (!hit) {
                weft_cli_unexpected("bench", "", "weft bench vae", cli->argv[i]);
                return -1;
            }
        }
    }
    o->keep = keep != 0;
    static const long long full[] = {1024, 512, 512}, quick[] = {64, 32, 64};
    for (int k = 0; k < 3; k++)
        if (*fields[k] < 0)
            *fields[k] = o->b.quick ? quick[k] : full[k];
    if (o->size % 16 || o->pipe_size % 16 || o->tile % 8) {
        WEFT_LOG_ERROR("bench", "--size and --pipe-size must be multiples of 16, --tile of 8");
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* A FLUX.1-config AutoencoderKL with random weights                                         */


/* ---------------------------------------------------------------------------------------- */
/* Child runs                                                                                */

static long peak_kib(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1;
}

struct conv_shape {
    int64_t h, w, cin, cout, k, count;
};

static void add_shape(struct conv_shape *s, int *n, int64_t h, int64_t w, int64_t cin,
                      int64_t cout, int64_t k)
{
    for (int i = 0; i < *n; i++)
        if (s[i].h == h && s[i].w == w && s[i].cin == cin && s[i].cout == cout && s[i].k == k) {
            s[i].count++;
            return;
        }
    s[(*n)++] = (struct conv_shape){h, w, cin, cout, k, 1};
}

/* Every conv of one decode of a size x size image, following the decoder's structure. */
static int decode_convs(const struct weft_vae_config *c, int64_t size, struct conv_shape *s)
{
    int n = 0;
    int64_t h = size / c->scale;
    const int64_t deep = c->block_out_channels[c->n_blocks - 1];
    add_shape(s, &n, h, h, c->latent_channels, deep, 3);
    for (int i = 0; i < 4; i++)
        add_shape(s, &n, h, h, deep, deep, 3); /* mid resnets */
    for (int b = 0; b < c->n_blocks; b++) {
        const int64_t in = weft_vae_up_in_channels(c, b), out = weft_vae_up_out_channels(c, b);
        for (int64_t j = 0; j < c->layers_per_block + 1; j++) {
            add_shape(s, &n, h, h, j == 0 ? in : out, out, 3);
            add_shape(s, &n, h, h, out, out, 3);
            if (j == 0 && in != out)
                add_shape(s, &n, h, h, in, out, 1);
        }
        if (b < c->n_blocks - 1) {
            h *= 2;
            add_shape(s, &n, h, h, out, out, 3);
        }
    }
    add_shape(s, &n, h, h, c->block_out_channels[0], c->out_channels, 3);
    return n;
}

static int run_convs(const struct vae_bench_opts *o, const struct weft_kernels *K,
                     struct weft_kctx *kc)
{
    struct weft_vae_config c;
    weft_synth_vae_config(&c);
    struct conv_shape s[64];
    int n = decode_convs(&c, o->size, s);
    size_t max_x = 0, max_y = 0, max_w = 0, max_ws = 0;
    for (int i = 0; i < n; i++) {
        size_t x = (size_t)(s[i].h * s[i].w * s[i].cin), y = (size_t)(s[i].h * s[i].w * s[i].cout);
        size_t w = (size_t)(s[i].cin * s[i].cout * s[i].k * s[i].k);
        size_t ws = K->conv2d_workspace(kc, s[i].h, s[i].w, s[i].cin, s[i].cout, s[i].k);
        max_x = x > max_x ? x : max_x, max_y = y > max_y ? y : max_y;
        max_w = w > max_w ? w : max_w, max_ws = ws > max_ws ? ws : max_ws;
    }
    float *x = weft_big_alloc(max_x * 4), *y = weft_big_alloc(max_y * 4);
    float *w = weft_big_alloc(max_w * 4), *b = weft_big_alloc((size_t)4096 * 4);
    void *ws = weft_big_alloc(max_ws + 64);
    if (!x || !y || !w || !b || !ws)
        return 1;
    weft_noise_normal(1, 0, (int64_t)max_x, x);
    weft_noise_normal(2, 0, (int64_t)max_w, w);
    memset(y, 0, max_y * 4);
    /* one line: ready, then one call per request line "gemm I" or "direct I" */
    printf("{\"ready\": true, \"shapes\": [");
    for (int i = 0; i < n; i++)
        printf("%s{\"h\": %lld, \"cin\": %lld, \"cout\": %lld, \"k\": %lld, \"count\": %lld}",
               i ? ", " : "", (long long)s[i].h, (long long)s[i].cin, (long long)s[i].cout,
               (long long)s[i].k, (long long)s[i].count);
    printf("]}\n");
    (void)fflush(stdout);
    char line[64], algo[16];
    int i;
    while (fgets(line, sizeof(line), stdin) && sscanf(line, "%15s %d", algo, &i) == 2 && i >= 0 &&
           i < n) {
        bool direct = strcmp(algo, "direct") == 0;
        weft_kernels_cpu_set_conv_algo(kc, direct ? WEFT_CONV_DIRECT : WEFT_CONV_GEMM);
        double t = weft_now();
        K->conv2d(kc, x, w, WEFT_DTYPE_F32, b, y, s[i].h, s[i].w, s[i].cin, s[i].cout, s[i].k, 0,
                  ws);
        printf("{\"ms\": %.3f}\n", (weft_now() - t) * 1e3);
        (void)fflush(stdout);
    }
    weft_big_free(x, max_x * 4), weft_big_free(y, max_y * 4), weft_big_free(w, max_w * 4);
    weft_big_free(b, (size_t)4096 * 4), weft_big_free(ws, max_ws + 64);
    return 0;
}

static int run_decode(const struct vae_bench_opts *o, const struct weft_kernels *K,
                      struct weft_kctx *kc)
{
    struct weft_vae_opts vo = {K, kc};
    struct weft_vae *v;
    double t0 = weft_now();
    if (weft_vae_load(o->dir, &vo, &v, NULL) != WEFT_OK)
        return 1;
    double load_s = weft_now() - t0;
    long after_load = peak_kib();
    const struct weft_vae_config *c = weft_vae_get_config(v);
    const int64_t lh = o->size / c->scale, n_lat = lh * lh * c->latent_channels;
    float *lat = weft_malloc((size_t)n_lat * 4);
    float *img = weft_malloc((size_t)(o->size * o->size * 3) * 4);
    if (!lat || !img)
        return 1;
    weft_noise_normal(5, 0, n_lat, lat);
    struct weft_vae_tiling t;
    weft_vae_tiling_latent(c, o->tile / c->scale, &t);
    const struct weft_vae_tiling *tp = o->tile ? &t : NULL;
    size_t host = 0, dev = weft_vae_activation_bytes(v, lh, lh, tp, &host);
    t0 = weft_now();
    weft_status_t st = weft_vae_decode(v, lat, lh, lh, tp, img, NULL);
    double dec_s = weft_now() - t0;
    if (st == WEFT_OK)
        printf("{\"load_s\": %.3f, \"decode_s\": %.3f, \"weights\": %zu, \"reserved\": %zu, "
               "\"host\": %zu, \"rss_after_load_kib\": %ld, \"peak_kib\": %ld}\n", load_s,
               dec_s, weft_vae_weight_bytes(v), dev, host, after_load, peak_kib());
    weft_free(lat);
    weft_free(img);
    weft_vae_destroy(v);
    return st != WEFT_OK;
}

static int run_pipeline(const struct vae_bench_opts *o, const struct weft_kernels *K,
                        struct weft_kctx *kc)
{
    const struct weft_rt_opts ro = {K, kc, o->keep == 0};
    struct weft_runtime *rt = NULL;
    struct weft_rt_assign *a = weft_malloc(sizeof(*a));
    struct weft_error err = WEFT_ERROR_INIT;
    struct weft_prompt_embeds pe = {0};
    weft_status_t st = a ? weft_runtime_create(&ro, &rt) : WEFT_ERR_NOMEM;
    if (st == WEFT_OK) {
        weft_rt_assign_single(o->dir, a);
        st = weft_runtime_assign(rt, a, NULL, &err);
    }
    char prompt[2100];
    snprintf(prompt, sizeof(prompt), "%s/prompts/bench.safetensors", o->dir);
    if (st == WEFT_OK)
        st = weft_model_prompt_read(weft_runtime_model(rt), prompt, &pe, &err);
    const struct weft_rt_image img = {
        .prompt_embeds = pe.embeds, .s_txt = pe.tokens, .pooled = pe.pooled,
        .height = o->pipe_size, .width = o->pipe_size, .steps = (int)o->steps,
        .guidance = 3.5f, .seed = 1, .decode = true, .png_prompt_index = -1,
    };
    struct weft_rt_result r = {0};
    if (st == WEFT_OK)
        st = weft_runtime_image(rt, &img, NULL, NULL, NULL, &r, &err);
    if (st == WEFT_OK) {
        const struct weft_model *m = weft_runtime_model(rt);
        uint64_t tb, vb;
        weft_runtime_bytes(rt, &tb, &vb);
        printf("{\"peak_kib\": %ld, \"denoise_s\": %.3f, \"decode_s\": %.3f, \"components\": "
               "[{\"name\": \"transformer\", \"weight_bytes\": %llu, \"file_bytes\": %llu}, "
               "{\"name\": \"vae\", \"weight_bytes\": %llu, \"file_bytes\": %llu}]}\n",
               peak_kib(), r.denoise_s, r.decode_s + r.png_s, (unsigned long long)tb,
               (unsigned long long)m->transformer_file_bytes, (unsigned long long)vb,
               (unsigned long long)m->vae_file_bytes);
    } else {
        WEFT_LOG_ERROR("bench", "%s", weft_error_text(&err));
    }
    weft_rt_result_cleanup(&r);
    weft_prompt_embeds_cleanup(&pe);
    weft_runtime_destroy(rt);
    weft_free(a);
    return st != WEFT_OK;
}

int weft_bench_vae_run(struct weft_cli *cli)
{
    struct vae_bench_opts o;
    if (parse(cli, &o) || !o.mode)
        return 2;
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    if (weft_kernels_cpu_create((int)cli->conf.kernels.threads, &K, &kc) != WEFT_OK)
        return 1;
    int rc = 2;
    if (strcmp(o.mode, "convs") == 0)
        rc = run_convs(&o, K, kc);
    else if (strcmp(o.mode, "decode") == 0 && o.dir)
        rc = run_decode(&o, K, kc);
    else if (strcmp(o.mode, "pipeline") == 0 && o.dir)
        rc = run_pipeline(&o, K, kc);
    else if (strcmp(o.mode, "write-vae") == 0 && o.dir) /* for profiling by hand */
        rc = weft_synth_vae_write(o.dir, WEFT_DTYPE_F32) != WEFT_OK;
    weft_kernels_cpu_destroy(kc);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* The orchestrator                                                                          */

#define CHILD_TIMEOUT_S 3600.0
#define MAX_SHAPES 64

struct child {
    char self[4096], threads[64], size[32], tile[32], pipe_size[32], steps[32], quick[16];
    char out[1 << 16];
};

static void child_argv(struct child *ch, char **argv, const char *mode, const char *dir,
                       const char *extra_name, const char *extra_value)
{
    char *base[] = {ch->self, ch->threads, "bench", "vae-run", "--mode", (char *)mode,
                    "--size", ch->size, "--tile", ch->tile, "--pipe-size", ch->pipe_size,
                    "--steps", ch->steps, ch->quick};
    int n = 0;
    for (size_t k = 0; k < sizeof(base) / sizeof(base[0]); k++)
        if (base[k][0])
            argv[n++] = base[k];
    if (dir) {
        argv[n++] = "--dir";
        argv[n++] = (char *)dir;
    }
    if (extra_name) {
        argv[n++] = (char *)extra_name;
        argv[n++] = (char *)extra_value;
    }
    argv[n] = NULL;
}

/* A one-shot child (its own process: its peak RSS is its own); its JSON line or NULL. */
static cJSON *child_run(struct child *ch, const char *mode, const char *dir,
                        const char *extra_name, const char *extra_value)
{
    char *argv[24];
    child_argv(ch, argv, mode, dir, extra_name, extra_value);
    int rc = weft_child_run(argv, NULL, ch->out, sizeof(ch->out), NULL);
    cJSON *j = rc == 0 ? cJSON_Parse(ch->out) : NULL;
    if (!j)
        WEFT_LOG_ERROR("bench", "vae-run --mode %s %s %s failed (status %d)", mode,
                       extra_name ? extra_name : "", extra_value ? extra_value : "", rc);
    return j;
}

static double num(const cJSON *j, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1.0;
}

static void print_json(cJSON *j)
{
    char *text = cJSON_Print(j);
    printf("%s\n", text ? text : "{}");
    cJSON_free(text);
}

/* ---- convs: one process kept loaded, every shape with both kernels in turn -------------- */

enum { CONV_GEMM, CONV_DIRECT, CONV_KINDS };
static const char *const conv_keys[] = {"gemm", "direct"};

struct convs {
    int n;
    cJSON *shapes; /* as the child listed them: h, cin, cout, k, count */
    struct weft_bench_series ms[MAX_SHAPES][CONV_KINDS];
    struct weft_bench_series total_s[CONV_KINDS]; /* the decode's convs, weighted by count */
};

static int convs_start(struct child *ch, struct weft_child *kid, struct convs *cv)
{
    char *argv[24];
    child_argv(ch, argv, "convs", NULL, NULL, NULL);
    if (weft_child_start_duplex(argv, NULL, kid) != 0)
        return -1;
    cJSON *j = weft_child_ask_json(kid, NULL, CHILD_TIMEOUT_S);
    const bool alive = j && cJSON_IsArray(cJSON_GetObjectItem(j, "shapes"));
    if (alive)
        cv->shapes = cJSON_DetachItemFromObject(j, "shapes");
    cJSON_Delete(j);
    if (!alive) {
        kill(kid->pid, SIGKILL);
        (void)weft_child_finish(kid, NULL, 0, NULL);
        return -1;
    }
    cv->n = cJSON_GetArraySize(cv->shapes);
    cv->n = cv->n > MAX_SHAPES ? MAX_SHAPES : cv->n;
    return 0;
}

/* One round: per shape im2col + GEMM, then direct. */
static int convs_round(struct weft_child *kid, struct convs *cv, int round)
{
    double tot[CONV_KINDS] = {0, 0};
    for (int i = 0; i < cv->n; i++) {
        double count = num(cJSON_GetArrayItem(cv->shapes, i), "count");
        for (int kind = 0; kind < CONV_KINDS; kind++) {
            char req[32];
            snprintf(req, sizeof(req), "%s %d", kind == CONV_DIRECT ? "direct" : "gemm", i);
            cJSON *j = weft_child_ask_json(kid, req, CHILD_TIMEOUT_S);
            double ms = j ? num(j, "ms") : -1;
            cJSON_Delete(j);
            if (ms < 0)
                return -1;
            weft_bench_series_set(&cv->ms[i][kind], round, ms);
            tot[kind] += ms * count;
        }
    }
    for (int kind = 0; kind < CONV_KINDS; kind++)
        weft_bench_series_set(&cv->total_s[kind], round, tot[kind] / 1e3);
    return 0;
}

static int measure_convs(struct child *ch, struct weft_bench *b, struct convs *cv)
{
    struct weft_child kid;
    if (convs_start(ch, &kid, cv) != 0)
        return -1;
    int rc = 0;
    for (int r = -b->warmup; r < b->rounds && rc == 0; r++) {
        weft_bench_round_note(b, r);
        rc = convs_round(&kid, cv, r);
    }
    if (rc)
        kill(kid.pid, SIGKILL);
    (void)weft_child_finish(&kid, NULL, 0, NULL);
    return rc;
}

static void print_convs(const struct convs *cv, long long size)
{
    printf("conv2d on every conv of a %lldx%lld FLUX.1 VAE decode (ms per call):\n", size, size);
    printf("%10s %12s %2s %5s %-26s %-26s %-22s %s\n", "pixels", "cin->cout", "k", "runs",
           "im2col + gemm", "direct", "direct / gemm", "verdict");
    char f[CONV_KINDS][96], r[96];
    for (int i = 0; i < cv->n; i++) {
        const cJSON *e = cJSON_GetArrayItem(cv->shapes, i);
        char io[32], px[32];
        snprintf(io, sizeof(io), "%.0f->%.0f", num(e, "cin"), num(e, "cout"));
        snprintf(px, sizeof(px), "%.0fx%.0f", num(e, "h"), num(e, "h"));
        for (int kind = 0; kind < CONV_KINDS; kind++)
            weft_bench_fmt(&cv->ms[i][kind], 1.0, 1, f[kind], sizeof(f[kind]));
        struct weft_bench_cmp c;
        weft_bench_compare(&cv->ms[i][CONV_DIRECT], &cv->ms[i][CONV_GEMM], &c);
        printf("%10s %12s %2.0f %5.0f %-26s %-26s %-22s %s\n", px, io, num(e, "k"),
               num(e, "count"), f[0], f[1], weft_bench_fmt_cmp(&c, 2, r, sizeof(r)),
               weft_bench_verdict_str(&c, "gemm faster", "direct faster"));
    }
    for (int kind = 0; kind < CONV_KINDS; kind++)
        weft_bench_fmt(&cv->total_s[kind], 1.0, 2, f[kind], sizeof(f[kind]));
    printf("%10s %12s %2s %5s %-26s %-26s (s, each shape x runs)\n", "all convs", "", "", "",
           f[0], f[1]);
    struct weft_bench_cmp c;
    weft_bench_compare(&cv->total_s[CONV_DIRECT], &cv->total_s[CONV_GEMM], &c);
    printf("all convs, direct / im2col + gemm (paired): %s, %s\n\n",
           weft_bench_fmt_cmp(&c, 2, r, sizeof(r)),
           weft_bench_verdict_str(&c, "gemm faster", "direct faster"));
}

static cJSON *convs_json(const struct convs *cv)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(o, "shapes");
    for (int i = 0; i < cv->n; i++) {
        cJSON *e = cJSON_Duplicate(cJSON_GetArrayItem(cv->shapes, i), 1);
        for (int kind = 0; kind < CONV_KINDS; kind++)
            cJSON_AddItemToObject(e, conv_keys[kind], weft_bench_json_fig(&cv->ms[i][kind], 1));
        struct weft_bench_cmp c;
        weft_bench_compare(&cv->ms[i][CONV_DIRECT], &cv->ms[i][CONV_GEMM], &c);
        cJSON_AddItemToObject(e, "direct_over_gemm",
                              weft_bench_json_cmp(&c, "gemm faster", "direct faster"));
        cJSON_AddItemToArray(arr, e);
    }
    cJSON *tot = cJSON_AddObjectToObject(o, "total_s");
    for (int kind = 0; kind < CONV_KINDS; kind++)
        cJSON_AddItemToObject(tot, conv_keys[kind], weft_bench_json_fig(&cv->total_s[kind], 1));
    struct weft_bench_cmp c;
    weft_bench_compare(&cv->total_s[CONV_DIRECT], &cv->total_s[CONV_GEMM], &c);
    cJSON_AddItemToObject(o, "direct_over_gemm",
                          weft_bench_json_cmp(&c, "gemm faster", "direct faster"));
    return o;
}

/* ---- decode and pipeline: one process per mode, the two modes in turn ------------------- */

/* Two modes of one part, each figure a series per mode. */
struct pair {
    struct weft_bench_series fig[2][4];
    double fixed[2][3];  /* figures that do not vary: the last round's */
    cJSON *components;   /* pipeline: the resident child's list */
    bool ok;
};

static int measure_decode(struct child *ch, struct weft_bench *b, const char *dir,
                          long long tile, struct pair *d)
{
    for (int r = -b->warmup; r < b->rounds; r++) {
        weft_bench_round_note(b, r);
        for (int t = 0; t < 2; t++) { /* one piece, tiled */
            char tl[32];
            snprintf(tl, sizeof(tl), "%lld", t ? tile : 0LL);
            cJSON *j = child_run(ch, "decode", dir, "--tile", tl);
            if (!j)
                return -1;
            weft_bench_series_set(&d->fig[t][0], r, num(j, "decode_s"));
            weft_bench_series_set(&d->fig[t][1], r, num(j, "peak_kib") / 1024);
            d->fixed[t][0] = num(j, "weights") / 1048576;
            d->fixed[t][1] = num(j, "reserved") / 1048576;
            d->fixed[t][2] = num(j, "rss_after_load_kib") / 1024;
            cJSON_Delete(j);
        }
    }
    d->ok = true;
    return 0;
}

static void print_decode(const struct pair *d, long long size, long long tile)
{
    printf("decode %lldx%lld (latents %lldx%lld), one process per mode and round:\n", size, size,
           size / 8, size / 8);
    printf("%-22s %-26s %11s %12s %12s %-26s\n", "mode", "decode s", "weights MB",
           "reserved MB", "RSS load MB", "peak RSS MB");
    char f1[96], f2[96];
    for (int t = 0; t < 2; t++) {
        char mode[64];
        snprintf(mode, sizeof(mode), t ? "tiled, %lld px tiles" : "one piece", tile);
        printf("%-22s %-26s %11.0f %12.0f %12.0f %-26s\n", mode,
               weft_bench_fmt(&d->fig[t][0], 1.0, 2, f1, sizeof(f1)), d->fixed[t][0],
               d->fixed[t][1], d->fixed[t][2], weft_bench_fmt(&d->fig[t][1], 1.0, 0, f2,
                                                              sizeof(f2)));
    }
    struct weft_bench_cmp c, m;
    weft_bench_compare(&d->fig[1][0], &d->fig[0][0], &c);
    weft_bench_compare(&d->fig[1][1], &d->fig[0][1], &m);
    printf("tiled / one piece (paired): decode %s, %s; peak RSS %s, %s\n\n",
           weft_bench_fmt_cmp(&c, 2, f1, sizeof(f1)),
           weft_bench_verdict_str(&c, "one piece faster", "tiled faster"),
           weft_bench_fmt_cmp(&m, 2, f2, sizeof(f2)),
           weft_bench_verdict_str(&m, "one piece smaller", "tiled smaller"));
}

static cJSON *decode_json(const struct pair *d, long long tile)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *rows = cJSON_AddArrayToObject(o, "rows");
    for (int t = 0; t < 2; t++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "mode", t ? "tiled" : "one_piece");
        cJSON_AddNumberToObject(e, "tile_px", t ? (double)tile : 0);
        cJSON_AddItemToObject(e, "decode_s", weft_bench_json_fig(&d->fig[t][0], 1));
        cJSON_AddItemToObject(e, "peak_rss_mb", weft_bench_json_fig(&d->fig[t][1], 1));
        cJSON_AddNumberToObject(e, "weights_mb", d->fixed[t][0]);
        cJSON_AddNumberToObject(e, "reserved_mb", d->fixed[t][1]);
        cJSON_AddNumberToObject(e, "rss_after_load_mb", d->fixed[t][2]);
        cJSON_AddItemToArray(rows, e);
    }
    struct weft_bench_cmp c;
    weft_bench_compare(&d->fig[1][0], &d->fig[0][0], &c);
    cJSON_AddItemToObject(o, "tiled_over_one_piece_decode",
                          weft_bench_json_cmp(&c, "one piece faster", "tiled faster"));
    weft_bench_compare(&d->fig[1][1], &d->fig[0][1], &c);
    cJSON_AddItemToObject(o, "tiled_over_one_piece_peak_rss",
                          weft_bench_json_cmp(&c, "one piece smaller", "tiled smaller"));
    return o;
}

static int measure_pipeline(struct child *ch, struct weft_bench *b, const char *dir,
                            struct pair *p)
{
    for (int r = -b->warmup; r < b->rounds; r++) {
        weft_bench_round_note(b, r);
        for (int keep = 0; keep < 2; keep++) { /* staged, resident */
            cJSON *j = child_run(ch, "pipeline", dir, "--keep", keep ? "1" : "0");
            if (!j)
                return -1;
            weft_bench_series_set(&p->fig[keep][0], r, num(j, "peak_kib") / 1024);
            weft_bench_series_set(&p->fig[keep][1], r, num(j, "denoise_s"));
            weft_bench_series_set(&p->fig[keep][2], r, num(j, "decode_s"));
            if (keep) {
                cJSON_Delete(p->components);
                p->components = cJSON_DetachItemFromObject(j, "components");
            }
            cJSON_Delete(j);
        }
    }
    p->ok = true;
    return 0;
}

static const char *const pipe_keys[] = {"peak_rss_mb", "denoise_s", "decode_s"};
static const char *const pipe_words[] = {"peak RSS", "denoise", "decode"};

static void print_pipeline(const struct pair *p, long long size, long long steps, bool quick)
{
    printf("pipeline %lldx%lld, %lld step(s): FLUX-shaped transformer (%s, bf16 on disk) + the "
           "VAE, one process per mode and round:\n", size, size, steps,
           quick ? "2 x 32, 1 + 1 blocks" : "8 x 128, 4 + 8 blocks");
    printf("%-32s %-26s %-26s %-26s\n", "mode", "peak RSS MB", "denoise s", "decode s");
    char f[3][96];
    for (int keep = 0; keep < 2; keep++) {
        for (int k = 0; k < 3; k++)
            weft_bench_fmt(&p->fig[keep][k], 1.0, k ? 2 : 0, f[k], sizeof(f[k]));
        printf("%-32s %-26s %-26s %-26s\n",
               keep ? "resident (all components kept)" : "staged (freed after each stage)",
               f[0], f[1], f[2]);
    }
    printf("resident / staged (paired):");
    for (int k = 0; k < 3; k++) {
        struct weft_bench_cmp c;
        weft_bench_compare(&p->fig[1][k], &p->fig[0][k], &c);
        printf("%s %s %s, %s", k ? ";" : "", pipe_words[k],
               weft_bench_fmt_cmp(&c, 2, f[0], sizeof(f[0])),
               weft_bench_verdict_str(&c, k ? "staged faster" : "staged smaller",
                                      k ? "resident faster" : "resident smaller"));
    }
    printf("\n");
    for (const cJSON *c = p->components ? p->components->child : NULL; c; c = c->next)
        printf("  component %-14s %8.0f MB loaded (%0.f MB on disk)\n",
               cJSON_GetObjectItem(c, "name")->valuestring, num(c, "weight_bytes") / 1048576,
               num(c, "file_bytes") / 1048576);
}

static cJSON *pipeline_json(const struct pair *p)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *rows = cJSON_AddArrayToObject(o, "rows");
    for (int keep = 0; keep < 2; keep++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "mode", keep ? "resident" : "staged");
        for (int k = 0; k < 3; k++)
            cJSON_AddItemToObject(e, pipe_keys[k], weft_bench_json_fig(&p->fig[keep][k], 1));
        cJSON_AddItemToArray(rows, e);
    }
    for (int k = 0; k < 3; k++) {
        struct weft_bench_cmp c;
        char key[64];
        weft_bench_compare(&p->fig[1][k], &p->fig[0][k], &c);
        snprintf(key, sizeof(key), "resident_over_staged_%s", pipe_keys[k]);
        cJSON_AddItemToObject(o, key, weft_bench_json_cmp(&c, k ? "staged faster"
                                                                : "staged smaller",
                                                          k ? "resident faster"
                                                            : "resident smaller"));
    }
    cJSON_AddItemToObject(o, "components", p->components ? cJSON_Duplicate(p->components, 1)
                                                         : cJSON_CreateNull());
    return o;
}

/* ---- the three parts --------------------------------------------------------------------- */

struct vae_results {
    struct convs convs;
    struct pair decode, pipeline;
    bool did[3];
};

static int run_parts(struct child *ch, struct vae_bench_opts *o, const char *dir,
                     struct vae_results *res)
{
    int rc = 0;
    char sub[128];
    if ((res->did[0] = !o->only || strcmp(o->only, "convs") == 0))
        rc |= measure_convs(ch, &o->b, &res->convs) != 0;
    snprintf(sub, sizeof(sub), "%s/vae", dir);
    if ((res->did[1] = !o->only || strcmp(o->only, "decode") == 0))
        rc |= weft_synth_vae_write(sub, WEFT_DTYPE_F32) != WEFT_OK || measure_decode(ch, &o->b, sub, o->tile,
                                                          &res->decode) != 0;
    if ((res->did[2] = !o->only || strcmp(o->only, "pipeline") == 0)) {
        WEFT_LOG_INFO("bench", "writing a synthetic pipeline to %s", dir);
        struct weft_flux_config fc;
        if (o->b.quick)
            weft_synth_flux_config(&fc, 2, 32, 1, 1);
        else
            weft_synth_flux_config(&fc, 8, 128, 4, 8);
        rc |= weft_synth_pipeline_write(dir, &fc, WEFT_DTYPE_BF16, WEFT_DTYPE_F32, o->text) !=
                  WEFT_OK ||
              measure_pipeline(ch, &o->b, dir, &res->pipeline) != 0;
    }
    return rc;
}

static void report(const struct vae_bench_opts *o, const struct vae_results *res)
{
    if (!o->b.json) {
        weft_bench_print_context(&o->b, stdout);
        if (res->did[0] && res->convs.n)
            print_convs(&res->convs, o->size);
        if (res->did[1] && res->decode.ok)
            print_decode(&res->decode, o->size, o->tile);
        if (res->did[2] && res->pipeline.ok)
            print_pipeline(&res->pipeline, o->pipe_size, o->steps, o->b.quick);
        return;
    }
    cJSON *root = weft_bench_json_context(&o->b);
    cJSON *cfg = cJSON_AddObjectToObject(root, "config");
    cJSON_AddNumberToObject(cfg, "size", (double)o->size);
    cJSON_AddNumberToObject(cfg, "tile", (double)o->tile);
    cJSON_AddNumberToObject(cfg, "pipe_size", (double)o->pipe_size);
    cJSON_AddNumberToObject(cfg, "steps", (double)o->steps);
    if (res->did[0] && res->convs.n)
        cJSON_AddItemToObject(root, "convs", convs_json(&res->convs));
    if (res->did[1] && res->decode.ok)
        cJSON_AddItemToObject(root, "decode", decode_json(&res->decode, o->tile));
    if (res->did[2] && res->pipeline.ok)
        cJSON_AddItemToObject(root, "pipeline", pipeline_json(&res->pipeline));
    print_json(root);
    cJSON_Delete(root);
}

int weft_bench_vae(struct weft_cli *cli)
{
    static struct vae_bench_opts o;
    int rc = parse(cli, &o);
    if (rc)
        return rc > 0 ? 0 : 2;
    if (weft_bench_begin(&o.b) != 0)
        return 2;
    static struct child ch;
    if (weft_self_path(ch.self, sizeof(ch.self)) != 0)
        return 1;
    snprintf(ch.threads, sizeof(ch.threads), "--kernels.threads=%lld",
             (long long)cli->conf.kernels.threads);
    snprintf(ch.size, sizeof(ch.size), "%lld", o.size);
    snprintf(ch.tile, sizeof(ch.tile), "%lld", o.tile);
    snprintf(ch.pipe_size, sizeof(ch.pipe_size), "%lld", o.pipe_size);
    snprintf(ch.steps, sizeof(ch.steps), "%lld", o.steps);
    snprintf(ch.quick, sizeof(ch.quick), "%s", o.b.quick ? "--quick" : "");
    char dir[] = "/tmp/weft_bench_vae_XXXXXX";
    if (!mkdtemp(dir)) {
        WEFT_LOG_ERROR("bench", "cannot create a temporary folder: %s", strerror(errno));
        return 1;
    }
    static struct vae_results res;
    rc = run_parts(&ch, &o, dir, &res);
    weft_bench_end(&o.b);
    report(&o, &res);
    cJSON_Delete(res.convs.shapes);
    cJSON_Delete(res.pipeline.components);
    weft_remove_tree(dir);
    return rc;
}
