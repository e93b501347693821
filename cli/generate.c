/* weft generate: the denoising loop on one device, from prompt embeddings to final latents. */
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
#include "worker/denoise.h"
#include "worker/noise.h"

static void help(FILE *out)
{
    fprintf(out,
        "usage: weft generate [--model DIR] [--prompt-embeds FILE|NAME] [--height N] [--width N]\n"
        "                     [--steps N] [--guidance G] [--seed S] [--latents FILE] --out FILE\n"
        "\n"
        "Run the FLUX.1 denoising loop on this machine (one CPU device) and write the final\n"
        "packed latents as safetensors (tensor \"latents\" [1, tokens, channels]).\n"
        "\n"
        "  --model DIR          Diffusers pipeline folder (transformer/ + scheduler/) or a\n"
        "                       transformer folder; default [model] path, else the embedded\n"
        "                       models/flux-tiny (random weights)\n"
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
        "  --out FILE           output .safetensors\n");
}

struct gen_opts {
    const char *model, *prompt, *latents, *out;
    long long height, width, steps;
    double guidance;
    unsigned long long seed;
};

static int parse_num(const char *opt, const char *v, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        WEFT_LOG_ERROR("generate", "%s '%s': expected an integer in [%lld, %lld]", opt, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

static int parse_args(struct weft_cli *cli, struct gen_opts *o)
{
    *o = (struct gen_opts){.height = 1024, .width = 1024, .steps = 28, .guidance = 3.5};
    for (int i = 1; i < cli->argc; i++) {
        const char *v;
        char **argv = cli->argv;
        if (weft_cli_is_help(argv[i])) {
            help(stdout);
            return 1;
        }
        if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--model")))
            o->model = v;
        else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--prompt-embeds")))
            o->prompt = v;
        else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--latents")))
            o->latents = v;
        else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--out")))
            o->out = v;
        else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--height"))) {
            if (parse_num("--height", v, 16, 16384, &o->height))
                return -1;
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--width"))) {
            if (parse_num("--width", v, 16, 16384, &o->width))
                return -1;
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--steps"))) {
            if (parse_num("--steps", v, 1, WEFT_SCHED_MAX_STEPS, &o->steps))
                return -1;
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--seed"))) {
            char *end;
            errno = 0;
            o->seed = strtoull(v, &end, 10);
            if (errno || end == v || *end || v[0] == '-') {
                WEFT_LOG_ERROR("generate", "--seed '%s': expected a non-negative integer", v);
                return -1;
            }
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--guidance"))) {
            char *end;
            o->guidance = strtod(v, &end);
            if (end == v || *end || !(o->guidance >= 0 && o->guidance <= 1000)) {
                WEFT_LOG_ERROR("generate", "--guidance '%s': expected a number in [0, 1000]", v);
                return -1;
            }
        } else {
            WEFT_LOG_ERROR("generate", "unexpected argument '%s' (see `weft generate --help`)",
                           argv[i]);
            return -1;
        }
    }
    if (!o->out) {
        WEFT_LOG_ERROR("generate", "--out FILE is required (see `weft generate --help`)");
        return -1;
    }
    if (o->height % 16 || o->width % 16) {
        WEFT_LOG_ERROR("generate", "--height %lld x --width %lld: both must be multiples of 16 "
                                   "(8x VAE downsampling, then 2x2 packing)", o->height,
                       o->width);
        return -1;
    }
    return 0;
}

/* Pipeline folder: transformer/ and scheduler/; model folder: itself and the default schedule. */
static weft_status_t resolve_model(const char *dir, char *transformer, size_t len,
                                   struct weft_sched_config *sched)
{
    weft_sched_config_flux_default(sched);
    enum weft_path_kind kind = weft_path_kind(dir);
    if (kind == WEFT_PATH_MODEL) {
        snprintf(transformer, len, "%s", dir);
        return WEFT_OK;
    }
    if (kind != WEFT_PATH_PIPELINE) {
        WEFT_LOG_ERROR("generate", "%s: not a pipeline folder (model_index.json) or a model "
                                   "folder (config.json)", dir);
        return WEFT_ERR_NOT_FOUND;
    }
    snprintf(transformer, len, "%s/transformer", dir);
    char path[2048];
    snprintf(path, sizeof(path), "%s/scheduler/scheduler_config.json", dir);
    cJSON *json;
    FILE *probe = fopen(path, "r");
    if (!probe)
        return WEFT_OK; /* no scheduler component: FLUX.1-dev's settings */
    fclose(probe);
    weft_status_t st = weft_json_read_file(path, 1 << 20, &json);
    if (st != WEFT_OK)
        return st;
    st = weft_sched_config_parse(json, path, sched);
    cJSON_Delete(json);
    return st;
}

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
        size_t n = strlen(e->d_name);
        if (n > 12 && strcmp(e->d_name + n - 12, ".safetensors") == 0 &&
            (!best[0] || strcmp(e->d_name, best) < 0))
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

/* Read tensor `name` of `file` with exactly `numel` elements as f32 (caller frees). */
static weft_status_t read_exact(struct weft_st_file *f, const char *name, int64_t numel,
                                const char *what, float **out)
{
    const struct weft_st_tensor *t = weft_st_find(f, name);
    if (!t) {
        WEFT_LOG_ERROR("generate", "%s: no tensor '%s'", weft_st_path(f), name);
        return WEFT_ERR_FORMAT;
    }
    if (numel >= 0 && t->numel != numel) {
        char sh[128];
        WEFT_LOG_ERROR("generate", "%s: '%s' has shape %s: %lld elements, but %s needs %lld",
                       weft_st_path(f), name, weft_shape_str(t->ndim, t->shape, sh, sizeof(sh)),
                       (long long)t->numel, what, (long long)numel);
        return WEFT_ERR_FORMAT;
    }
    float *p = weft_malloc((size_t)t->numel * sizeof(float) + 4);
    if (!p)
        return WEFT_ERR_NOMEM;
    weft_status_t st = weft_st_read(f, t, p, WEFT_DTYPE_F32);
    if (st != WEFT_OK) {
        weft_free(p);
        return st;
    }
    *out = p;
    return WEFT_OK;
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

static weft_status_t write_latents(const struct gen_opts *o, const char *model, int64_t s_img,
                                   int64_t ch, const float *latents)
{
    char seed[32], steps[32], guid[32], size[64];
    snprintf(seed, sizeof(seed), "%llu", o->seed);
    snprintf(steps, sizeof(steps), "%lld", o->steps);
    snprintf(guid, sizeof(guid), "%g", o->guidance);
    snprintf(size, sizeof(size), "%lldx%lld", o->width, o->height);
    const struct weft_st_meta meta[] = {
        {"weft_model", model}, {"weft_seed", o->latents ? "none (--latents)" : seed},
        {"weft_steps", steps}, {"weft_guidance", guid},
        {"weft_size", size},   {"weft_version", WEFT_VERSION},
    };
    int64_t shape[3] = {1, s_img, ch};
    struct weft_st_out t = {"latents", WEFT_DTYPE_F32, 3, shape, latents};
    return weft_st_write(o->out, 1, &t, sizeof(meta) / sizeof(meta[0]), meta);
}

int weft_cmd_generate(struct weft_cli *cli)
{
    struct gen_opts o;
    int rc = parse_args(cli, &o);
    if (rc)
        return rc > 0 ? 0 : 2;
    const char *dir = o.model ? o.model : cli->conf.model.path[0] ? cli->conf.model.path
                                                                  : WEFT_DEFAULT_MODEL;
    size_t n_out = strlen(o.out);
    if (n_out < 12 || strcmp(o.out + n_out - 12, ".safetensors") != 0) {
        WEFT_LOG_ERROR("generate", "--out %s: only .safetensors output for now", o.out);
        return 2;
    }
    char tdir[2048], prompt[2300];
    struct weft_sched_config sc;
    static struct weft_schedule sched;
    const struct weft_kernels *K = NULL;
    struct weft_kctx *kc = NULL;
    struct weft_flux *m = NULL;
    struct weft_st_file *pf = NULL;
    float *pe = NULL, *pooled = NULL, *latents = NULL;
    weft_status_t st;
    if ((st = resolve_model(dir, tdir, sizeof(tdir), &sc)) ||
        (st = resolve_prompt(dir, o.prompt, prompt, sizeof(prompt))) ||
        (st = weft_st_open(prompt, &pf)))
        goto out;
    if ((st = weft_kernels_cpu_create((int)cli->conf.kernels.threads, &K, &kc)))
        goto out;
    struct weft_flux_opts fo = {K, kc};
    if ((st = weft_flux_load(tdir, &fo, &m)))
        goto out;
    const struct weft_flux_config *c = weft_flux_get_config(m);
    const struct weft_st_tensor *pet = weft_st_find(pf, "prompt_embeds");
    if (!pet || pet->ndim != 3 || pet->shape[0] != 1 || pet->shape[2] != c->joint_attention_dim) {
        WEFT_LOG_ERROR("generate", "%s: needs prompt_embeds [1, T, %lld] (the model's "
                                   "joint_attention_dim)", prompt,
                       (long long)c->joint_attention_dim);
        st = WEFT_ERR_FORMAT;
        goto out;
    }
    int64_t s_txt = pet->shape[1], gh = o.height / 16, gw = o.width / 16, s_img = gh * gw;
    int64_t n = s_img * c->in_channels;
    if ((st = read_exact(pf, "prompt_embeds", -1, "", &pe)) ||
        (st = read_exact(pf, "pooled_prompt_embeds", c->pooled_projection_dim,
                         "pooled_projection_dim", &pooled)))
        goto out;
    if (o.latents) {
        struct weft_st_file *lf;
        if ((st = weft_st_open(o.latents, &lf)))
            goto out;
        const char *name = weft_st_find(lf, "latents") ? "latents" : "latents_init";
        st = read_exact(lf, name, n, "the image size", &latents);
        weft_st_close(lf);
        if (st)
            goto out;
    } else {
        if (!(latents = weft_malloc((size_t)n * sizeof(float)))) {
            st = WEFT_ERR_NOMEM;
            goto out;
        }
        weft_noise_normal(o.seed, 0, n, latents);
    }
    if ((st = weft_sched_plan(&sc, (int)o.steps, s_img, &sched)))
        goto out;
    struct step_ui ui;
    weft_progress_begin(&ui.bar, "denoise");
    struct weft_denoise_params p = {
        .grid_h = gh, .grid_w = gw, .prompt_embeds = pe, .s_txt = s_txt, .pooled = pooled,
        .guidance = (float)o.guidance, .schedule = &sched, .on_step = on_step, .cb_arg = &ui,
    };
    st = weft_denoise(m, &p, latents);
    weft_progress_end(&ui.bar);
    if (st == WEFT_OK)
        st = write_latents(&o, dir, s_img, c->in_channels, latents);
    if (st == WEFT_OK)
        WEFT_LOG_INFO("generate", "wrote %s (%lldx%lld, %lld steps, %.2f s)", o.out, o.width,
                      o.height, o.steps, weft_now() - ui.bar.start);
out:
    weft_free(pe), weft_free(pooled), weft_free(latents);
    weft_st_close(pf);
    weft_flux_destroy(m);
    weft_kernels_cpu_destroy(kc);
    return st == WEFT_OK ? 0 : 1;
}
