/* weft generate: the staged pipeline on one device, from prompt embeddings to a PNG (or to the
 * final latents as safetensors). */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/progress.h"
#include "common/alloc.h"
#include "common/log.h"
#include "common/tensor.h"
#include "model/checkpoint.h"
#include "model/safetensors.h"
#include "model/scheduler.h"
#include "worker/pipeline.h"
#include "worker/png.h"

static void help(FILE *out)
{
    fprintf(out,
        "usage: weft generate [--model DIR] [--prompt-embeds FILE|NAME] [--height N] [--width N]\n"
        "                     [--steps N] [--guidance G] [--seed S] [--latents FILE]\n"
        "                     [--vae-tiling] [--vae-tile PX] --out FILE.png|FILE.safetensors\n"
        "\n"
        "Run a FLUX.1 pipeline on this machine (one CPU device), stage by stage: read the\n"
        "prompt embeddings, denoise with the transformer, decode with the VAE. Each stage\n"
        "loads its component and frees it when done. A .png output is the decoded image with\n"
        "the generation parameters in text chunks; a .safetensors output is the final packed\n"
        "latents (tensor \"latents\" [1, tokens, channels]) and needs no VAE.\n"
        "\n"
        "  --model DIR          Diffusers pipeline folder (transformer/, vae/, scheduler/) or a\n"
        "                       transformer folder (latents only); default [model] path, else\n"
        "                       the embedded models/flux-tiny (random weights: noise images)\n"
        "  --prompt-embeds F    safetensors with prompt_embeds [1, T, joint_dim] and\n"
        "                       pooled_prompt_embeds [1, pooled_dim]; a bare NAME means\n"
        "                       DIR/prompts/NAME.safetensors; default: the first in DIR/prompts\n"
        "  --height, --width N  image size in pixels, multiples of 16 (default 1024)\n"
        "  --steps N            denoising steps (default 28)\n"
        "  --guidance G         embedded guidance scale (default 3.5; guidance-distilled models)\n"
        "  --seed S             initial noise seed (default 0); the same seed gives the same\n"
        "                       noise on any device count or layout\n"
        "  --latents FILE       initial packed latents instead of noise (tensor \"latents\" or\n"
        "                       \"latents_init\")\n"
        "  --vae-tiling         decode in overlapping tiles as Diffusers' vae.enable_tiling()\n"
        "                       (tiles of the VAE's sample_size pixels): bounded memory for\n"
        "                       large images; blended seams differ slightly from one piece\n"
        "  --vae-tile PX        the same with tiles of PX pixels (a multiple of 8)\n"
        "  --out FILE           output .png or .safetensors\n");
}

struct gen_opts {
    const char *model, *prompt, *latents, *out;
    long long height, width, steps, vae_tile;
    double guidance;
    unsigned long long seed;
    int vae_tiling;
    int png;
};

/* One option at argv[*i] (advancing past its value); -1 on a bad value, 1 when unknown. */
static int parse_opt(struct weft_cli *cli, int *i, struct gen_opts *o)
{
    const char *v;
    char **argv = cli->argv;
    if ((v = weft_cli_opt_value(cli->argc, argv, i, "--model")))
        o->model = v;
    else if ((v = weft_cli_opt_value(cli->argc, argv, i, "--prompt-embeds")))
        o->prompt = v;
    else if ((v = weft_cli_opt_value(cli->argc, argv, i, "--latents")))
        o->latents = v;
    else if ((v = weft_cli_opt_value(cli->argc, argv, i, "--out")))
        o->out = v;
    else if ((v = weft_cli_opt_value(cli->argc, argv, i, "--height")))
        return weft_cli_parse_int("--height", v, 16, 16384, &o->height);
    else if ((v = weft_cli_opt_value(cli->argc, argv, i, "--width")))
        return weft_cli_parse_int("--width", v, 16, 16384, &o->width);
    else if ((v = weft_cli_opt_value(cli->argc, argv, i, "--steps")))
        return weft_cli_parse_int("--steps", v, 1, WEFT_SCHED_MAX_STEPS, &o->steps);
    else if ((v = weft_cli_opt_value(cli->argc, argv, i, "--vae-tile")))
        return weft_cli_parse_int("--vae-tile", v, 8, 16384, &o->vae_tile);
    else if (strcmp(argv[*i], "--vae-tiling") == 0)
        o->vae_tiling = 1;
    else if ((v = weft_cli_opt_value(cli->argc, argv, i, "--seed"))) {
        char *end;
        errno = 0;
        o->seed = strtoull(v, &end, 10);
        if (errno || end == v || *end || v[0] == '-') {
            WEFT_LOG_ERROR("generate", "--seed '%s': expected a non-negative integer", v);
            return -1;
        }
    } else if ((v = weft_cli_opt_value(cli->argc, argv, i, "--guidance"))) {
        char *end;
        o->guidance = strtod(v, &end);
        if (end == v || *end || !(o->guidance >= 0 && o->guidance <= 1000)) {
            WEFT_LOG_ERROR("generate", "--guidance '%s': expected a number in [0, 1000]", v);
            return -1;
        }
    } else {
        return 1;
    }
    return 0;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n > m && strcmp(s + n - m, suffix) == 0;
}

static int parse_args(struct weft_cli *cli, struct gen_opts *o)
{
    *o = (struct gen_opts){.height = 1024, .width = 1024, .steps = 28, .guidance = 3.5};
    for (int i = 1; i < cli->argc; i++) {
        if (weft_cli_is_help(cli->argv[i])) {
            help(stdout);
            return 1;
        }
        int rc = parse_opt(cli, &i, o);
        if (rc < 0)
            return -1;
        if (rc > 0) {
            WEFT_LOG_ERROR("generate", "unexpected argument '%s' (see `weft generate --help`)",
                           cli->argv[i]);
            return -1;
        }
    }
    if (!o->out) {
        WEFT_LOG_ERROR("generate", "--out FILE is required (see `weft generate --help`)");
        return -1;
    }
    o->png = ends_with(o->out, ".png");
    if (!o->png && !ends_with(o->out, ".safetensors")) {
        WEFT_LOG_ERROR("generate", "--out %s: the output is a .png image or .safetensors latents",
                       o->out);
        return -1;
    }
    if (o->height % 16 || o->width % 16) {
        WEFT_LOG_ERROR("generate", "--height %lld x --width %lld: both must be multiples of 16 "
                                   "(8x VAE downsampling, then 2x2 packing)", o->height,
                       o->width);
        return -1;
    }
    if (o->vae_tile % 8) {
        WEFT_LOG_ERROR("generate", "--vae-tile %lld: a tile is a whole number of latents, a "
                                   "multiple of 8 pixels", o->vae_tile);
        return -1;
    }
    return 0;
}

/* The folder prompts/ lives in: the pipeline folder (or the transformer folder itself). */
static weft_status_t resolve_prompt(const char *dir, const char *arg, char *path, size_t len)
{
    if (arg && (strchr(arg, '/') || strstr(arg, ".safetensors"))) {
        snprintf(path, len, "%s", arg);
        return WEFT_OK;
    }
    if (arg) {
        snprintf(path, len, "%s/prompts/%s.safetensors", dir, arg);
        return WEFT_OK;
    }
    char pdir[2048];
    snprintf(pdir, sizeof(pdir), "%s/prompts", dir);
    DIR *d = opendir(pdir);
    char best[256] = "";
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (ends_with(e->d_name, ".safetensors") && (!best[0] || strcmp(e->d_name, best) < 0))
            snprintf(best, sizeof(best), "%s", e->d_name);
    }
    if (d)
        closedir(d);
    if (!best[0]) {
        WEFT_LOG_ERROR("generate", "no --prompt-embeds given and %s has no *.safetensors", pdir);
        return WEFT_ERR_NOT_FOUND;
    }
    snprintf(path, len, "%s/%s", pdir, best);
    return WEFT_OK;
}

/* --latents: tensor "latents" or "latents_init" with exactly numel elements (caller frees). */
static weft_status_t read_latents(const char *path, int64_t numel, float **out)
{
    struct weft_st_file *f;
    weft_status_t st = weft_st_open(path, &f);
    if (st != WEFT_OK)
        return st;
    const struct weft_st_tensor *t = weft_st_find(f, "latents");
    if (!t)
        t = weft_st_find(f, "latents_init");
    if (!t || t->numel != numel) {
        WEFT_LOG_ERROR("generate", "%s: needs a tensor \"latents\" or \"latents_init\" of %lld "
                                   "elements (tokens x in_channels for this image size)", path,
                       (long long)numel);
        st = WEFT_ERR_FORMAT;
    }
    float *p = st == WEFT_OK ? weft_malloc((size_t)numel * sizeof(float) + 4) : NULL;
    if (st == WEFT_OK && !p)
        st = WEFT_ERR_NOMEM;
    if (st == WEFT_OK && (st = weft_st_read(f, t, p, WEFT_DTYPE_F32)) == WEFT_OK)
        *out = p;
    else
        weft_free(p);
    weft_st_close(f);
    return st;
}

struct step_ui {
    struct weft_progress bar;
};

static weft_status_t on_step(void *arg, int step, int steps, const float *latents, int64_t n)
{
    (void)latents, (void)n;
    weft_progress_update(&((struct step_ui *)arg)->bar, step + 1, steps);
    return WEFT_OK;
}

/* The generation parameters, as text: safetensors metadata or PNG text chunks. */
struct params_text {
    char seed[32], steps[32], guid[32], size[64], layout[96], prompt[256];
};

static void params_text(const struct gen_opts *o, const char *prompt_path, int threads,
                        struct params_text *t)
{
    snprintf(t->seed, sizeof(t->seed), "%llu", o->seed);
    snprintf(t->steps, sizeof(t->steps), "%lld", o->steps);
    snprintf(t->guid, sizeof(t->guid), "%g", o->guidance);
    snprintf(t->size, sizeof(t->size), "%lldx%lld", o->width, o->height);
    snprintf(t->layout, sizeof(t->layout), "single device: cpu, %d threads (dp 1, tp 1, "
                                           "ring 1, ulysses 1)", threads);
    const char *base = strrchr(prompt_path, '/');
    base = base ? base + 1 : prompt_path;
    snprintf(t->prompt, sizeof(t->prompt), "%s", base);
    if (ends_with(t->prompt, ".safetensors"))
        t->prompt[strlen(t->prompt) - strlen(".safetensors")] = '\0';
}

static weft_status_t write_output(const struct gen_opts *o, const char *model,
                                  const struct params_text *t,
                                  const struct weft_pipeline_result *r)
{
    const char *seed = o->latents ? "none (--latents)" : t->seed;
    if (o->png) {
        char software[64];
        snprintf(software, sizeof(software), "weft %s", WEFT_VERSION);
        const struct weft_png_text text[] = {
            {"Software", software},     {"weft.prompt", t->prompt}, {"weft.seed", seed},
            {"weft.steps", t->steps},   {"weft.guidance", t->guid}, {"weft.model", model},
            {"weft.layout", t->layout}, {"weft.size", t->size},
        };
        return weft_png_write(o->out, r->rgb, r->width, r->height,
                              sizeof(text) / sizeof(text[0]), text);
    }
    const struct weft_st_meta meta[] = {
        {"weft_model", model},      {"weft_seed", seed},        {"weft_steps", t->steps},
        {"weft_guidance", t->guid}, {"weft_size", t->size},     {"weft_prompt", t->prompt},
        {"weft_layout", t->layout}, {"weft_version", WEFT_VERSION},
    };
    int64_t shape[3] = {1, r->tokens, r->channels};
    struct weft_st_out out = {"latents", WEFT_DTYPE_F32, 3, shape, r->latents};
    return weft_st_write(o->out, 1, &out, sizeof(meta) / sizeof(meta[0]), meta);
}

static void log_components(const struct weft_pipeline *p)
{
    for (size_t i = 0; i < weft_pipeline_component_count(p); i++) {
        const struct weft_pipeline_component *c = weft_pipeline_component_at(p, i);
        WEFT_LOG_DEBUG("generate", "component %s (%s): %.1f MB on disk, %.1f MB loaded, on "
                                   "cpu:%d, stage %s", c->name, c->class_name,
                       (double)c->file_bytes / 1e6, (double)c->weight_bytes / 1e6,
                       c->device.index, weft_pipe_stage_name(c->stage));
    }
}

/* --vae-tiling / --vae-tile into t; NULL when decoding in one piece. */
static const struct weft_vae_tiling *tiling_of(const struct gen_opts *o,
                                               const struct weft_pipeline *p,
                                               struct weft_vae_tiling *t)
{
    const struct weft_vae_config *vc = weft_pipeline_vae_config(p);
    if (!vc || (!o->vae_tiling && !o->vae_tile))
        return NULL;
    if (o->vae_tile)
        weft_vae_tiling_latent(vc, o->vae_tile / vc->scale, t);
    else
        weft_vae_tiling_default(vc, t);
    return t;
}

static weft_status_t run(const struct gen_opts *o, const char *dir, const char *prompt,
                         int threads, struct weft_pipeline *p)
{
    const struct weft_flux_config *fc = weft_pipeline_flux_config(p);
    const int64_t tokens = (o->height / 16) * (o->width / 16);
    float *init = NULL;
    weft_status_t st = WEFT_OK;
    if (o->latents && (st = read_latents(o->latents, tokens * fc->in_channels, &init)))
        return st;
    struct weft_vae_tiling tiling;
    struct step_ui ui;
    struct weft_pipeline_job job = {
        .prompt_embeds = prompt, .height = o->height, .width = o->width,
        .steps = (int)o->steps, .guidance = (float)o->guidance, .seed = o->seed,
        .latents_init = init, .decode = o->png != 0, .tiling = tiling_of(o, p, &tiling),
        .on_step = on_step, .cb_arg = &ui,
    };
    struct weft_pipeline_result r;
    weft_progress_begin(&ui.bar, "denoise");
    st = weft_pipeline_run(p, &job, &r);
    weft_progress_end(&ui.bar);
    weft_free(init);
    if (st != WEFT_OK)
        return st;
    struct params_text t;
    params_text(o, prompt, threads, &t);
    if ((st = write_output(o, dir, &t, &r)) == WEFT_OK)
        WEFT_LOG_INFO("generate", "wrote %s (%lldx%lld, %lld steps; denoise %.2f s, decode "
                                  "%.2f s)", o->out, o->width, o->height, o->steps,
                      r.seconds[WEFT_STAGE_DENOISE], r.seconds[WEFT_STAGE_DECODE]);
    weft_pipeline_result_cleanup(&r);
    return st;
}

int weft_cmd_generate(struct weft_cli *cli)
{
    struct gen_opts o;
    int rc = parse_args(cli, &o);
    if (rc)
        return rc > 0 ? 0 : 2;
    const char *dir = o.model ? o.model : cli->conf.model.path[0] ? cli->conf.model.path
                                                                  : WEFT_DEFAULT_MODEL;
    char prompt[2300];
    const struct weft_kernels *K = NULL;
    struct weft_kctx *kc = NULL;
    struct weft_pipeline *p = NULL;
    weft_status_t st;
    if ((st = resolve_prompt(dir, o.prompt, prompt, sizeof(prompt))) ||
        (st = weft_kernels_cpu_create((int)cli->conf.kernels.threads, &K, &kc)))
        goto out;
    struct weft_pipeline_opts po = {K, kc, false};
    if ((st = weft_pipeline_open(dir, &po, &p)))
        goto out;
    log_components(p);
    if (o.png && !weft_pipeline_has_vae(p)) {
        WEFT_LOG_ERROR("generate", "%s has no vae/: a .png needs a pipeline folder (or write "
                                   ".safetensors latents)", dir);
        st = WEFT_ERR_INVALID;
        goto out;
    }
    st = run(&o, dir, prompt, weft_kernels_cpu_threads(kc), p);
out:
    weft_pipeline_close(p);
    weft_kernels_cpu_destroy(kc);
    return st == WEFT_OK ? 0 : 1;
}
