/* weft generate: the staged pipeline on one device, from prompt embeddings to a PNG (or to the
 * final latents as safetensors). */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/progress.h"
#include "common/alloc.h"
#include "common/log.h"
#include "common/tensor.h"
#include "common/files.h"
#include "model/checkpoint.h"
#include "model/job.h"
#include "model/safetensors.h"
#include "model/scheduler.h"
#include "worker/png.h"
#include "worker/runtime.h"

static void help(FILE *out)
{
    fprintf(out,
        "usage: weft generate [--model DIR] [--prompt TEXT | --prompt-embeds FILE|NAME]\n"
        "                     [--negative-prompt TEXT | --negative-prompt-embeds FILE|NAME]\n"
        "                     [--true-cfg-scale S]\n"
        "                     [--max-sequence-length N] [--height N] [--width N] [--steps N]\n"
        "                     [--guidance G] [--seed S] [--latents FILE] [--vae-tiling]\n"
        "                     [--vae-tile PX] [--device DEV] --out FILE.png|FILE.safetensors\n"
        "\n"
        "Run a FLUX.1, FLUX.2 or Qwen-Image pipeline on this machine (one device), stage by\n"
        "stage: encode the prompt with the text encoders (FLUX.1: CLIP, T5; FLUX.2 and\n"
        "Qwen-Image take prompt embeddings), denoise with the transformer, decode with the\n"
        "VAE. Each stage loads its component and frees it when done. A .png output is the\n"
        "decoded image with the generation parameters in text chunks; a .safetensors output is\n"
        "the final packed latents (tensor \"latents\" [1, tokens, channels]) and needs no VAE.\n"
        "\n"
        "  --model DIR          Diffusers pipeline folder (FluxPipeline, Flux2Pipeline or\n"
        "                       QwenImagePipeline: transformer/, vae/, scheduler/, and\n"
        "                       tokenizer/, text_encoder/, tokenizer_2/, text_encoder_2/ to\n"
        "                       encode text) or a transformer folder (latents only); default\n"
        "                       [model] path, else the embedded models/flux-tiny (a tiny\n"
        "                       FLUX.1 pipeline trained to draw simple shapes: 128x128)\n"
        "  --prompt TEXT        the prompt, encoded as FluxPipeline encodes it (CLIP's pooled\n"
        "                       output, T5's embeddings). A model without text encoders takes\n"
        "                       only the name of one of its precomputed prompts (DIR/prompts)\n"
        "  --negative-prompt TEXT, --negative-prompt-embeds F  what true classifier-free\n"
        "                       guidance steers away from, taken as the prompt is; with\n"
        "  --true-cfg-scale S   above 1 (default 1: off), two transformer passes a step,\n"
        "                       combined as FluxPipeline's true_cfg_scale does:\n"
        "                       neg + S (pred - neg), then (Qwen-Image) each token rescaled\n"
        "                       to the prediction's norm; S needs a negative prompt\n"
        "  --max-sequence-length N  T5 tokens of the prompt, 1..512 (default: the model's\n"
        "                       tokenizer_2 model_max_length up to 512; FLUX.1: 512, schnell\n"
        "                       uses 256; the embedded model: 48)\n"
        "  --prompt-embeds F    precomputed embeddings instead of text: safetensors with\n"
        "                       prompt_embeds [1, T, joint_dim] and (FLUX.1) pooled_prompt_embeds\n"
        "                       [1, pooled_dim] or (Qwen-Image, optional) prompt_embeds_mask\n"
        "                       [1, T]; a bare NAME means DIR/prompts/NAME.safetensors;\n"
        "                       with neither option: the first file of DIR/prompts\n"
        "  --height, --width N  image size in pixels, multiples of 16 (default: the VAE's\n"
        "                       sample_size up to 1024; FLUX.1: 1024, the embedded model: 128)\n"
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
        "  --device DEV         cpu, cuda:N or auto (default [worker] device, cpu); a GPU\n"
        "                       that is not there is an error\n"
        "  --out FILE           output .png or .safetensors\n");
}

struct gen_opts {
    const char *model, *prompt, *text, *latents, *out, *device;
    const char *neg_prompt, *neg_text; /* --negative-prompt-embeds, --negative-prompt */
    long long height, width, steps, vae_tile, max_sequence_length;
    double guidance, true_cfg_scale;
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
    else if ((v = weft_cli_opt_value(cli->argc, argv, i, "--device")))
        o->device = v;
    else if ((v = weft_cli_opt_value(cli->argc, argv, i, "--prompt-embeds")))
        o->prompt = v;
    else if ((v = weft_cli_opt_value(cli->argc, argv, i, "--negative-prompt-embeds")))
        o->neg_prompt = v;
    else if ((v = weft_cli_opt_value(cli->argc, argv, i, "--negative-prompt")))
        o->neg_text = v;
    else if ((v = weft_cli_opt_value(cli->argc, argv, i, "--true-cfg-scale")))
        return weft_cli_parse_guidance("--true-cfg-scale", v, &o->true_cfg_scale);
    else if ((v = weft_cli_opt_value(cli->argc, argv, i, "--prompt")))
        o->text = v;
    else if ((v = weft_cli_opt_value(cli->argc, argv, i, "--max-sequence-length")))
        return weft_cli_parse_int("--max-sequence-length", v, 1, WEFT_MODEL_MAX_SEQUENCE_LENGTH,
                                  &o->max_sequence_length);
    else if ((v = weft_cli_opt_value(cli->argc, argv, i, "--latents")))
        o->latents = v;
    else if ((v = weft_cli_opt_value(cli->argc, argv, i, "--out")))
        o->out = v;
    else if ((v = weft_cli_opt_value(cli->argc, argv, i, "--height")))
        return weft_cli_parse_int("--height", v, 1, WEFT_JOB_MAX_SIDE, &o->height);
    else if ((v = weft_cli_opt_value(cli->argc, argv, i, "--width")))
        return weft_cli_parse_int("--width", v, 1, WEFT_JOB_MAX_SIDE, &o->width);
    else if ((v = weft_cli_opt_value(cli->argc, argv, i, "--steps")))
        return weft_cli_parse_int("--steps", v, 1, WEFT_SCHED_MAX_STEPS, &o->steps);
    else if ((v = weft_cli_opt_value(cli->argc, argv, i, "--vae-tile")))
        return weft_cli_parse_int("--vae-tile", v, 8, 16384, &o->vae_tile);
    else if (strcmp(argv[*i], "--vae-tiling") == 0)
        o->vae_tiling = 1;
    else if ((v = weft_cli_opt_value(cli->argc, argv, i, "--seed")))
        return weft_cli_parse_seed("--seed", v, &o->seed);
    else if ((v = weft_cli_opt_value(cli->argc, argv, i, "--guidance")))
        return weft_cli_parse_guidance("--guidance", v, &o->guidance);
    else
        return 1;
    return 0;
}

static int parse_args(struct weft_cli *cli, struct gen_opts *o)
{
    /* sides and max_sequence_length 0: the model's defaults (model.h), set once it is open */
    *o = (struct gen_opts){.steps = 28, .guidance = 3.5, .true_cfg_scale = 1.0};
    for (int i = 1; i < cli->argc; i++) {
        if (weft_cli_is_help(cli->argv[i])) {
            help(stdout);
            return 1;
        }
        int rc = parse_opt(cli, &i, o);
        if (rc < 0)
            return -1;
        if (rc > 0) {
            weft_cli_unexpected("generate", "", "weft generate", cli->argv[i]);
            return -1;
        }
    }
    if (!o->out) {
        WEFT_LOG_ERROR("generate", "--out FILE is required (see `weft generate --help`)");
        return -1;
    }
    if (o->text && o->prompt) {
        WEFT_LOG_ERROR("generate", "give --prompt TEXT or --prompt-embeds FILE|NAME, not both");
        return -1;
    }
    if (o->neg_text && o->neg_prompt) {
        WEFT_LOG_ERROR("generate", "give --negative-prompt TEXT or --negative-prompt-embeds "
                                   "FILE|NAME, not both");
        return -1;
    }
    o->png = weft_cli_ends_with(o->out, ".png");
    if (!o->png && !weft_cli_ends_with(o->out, ".safetensors")) {
        WEFT_LOG_ERROR("generate", "--out %s: the output is a .png image or .safetensors latents",
                       o->out);
        return -1;
    }
    if (weft_cli_out_file_ready("generate", o->out) != 0)
        return -1;
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
        if (weft_cli_ends_with(e->d_name, ".safetensors") && (!best[0] || strcmp(e->d_name, best) < 0))
            snprintf(best, sizeof(best), "%s", e->d_name);
    }
    if (d)
        closedir(d);
    if (!best[0]) {
        WEFT_LOG_ERROR("generate", "no prompt: give --prompt TEXT (or --prompt-embeds FILE; "
                                   "%s holds no precomputed prompt to default to)", pdir);
        return WEFT_ERR_NOT_FOUND;
    }
    snprintf(path, len, "%s/%s", pdir, best);
    return WEFT_OK;
}

/* --prompt on a model that cannot encode text: the name of a precomputed prompt, the one
 * meaning text has there (as the job API takes it); else why the text cannot be encoded. An
 * empty path means: encode o->text. */
static weft_status_t text_or_embeds(const char *dir, const char *text, const char *embeds,
                                    const char *what, char *path, size_t len,
                                    struct weft_error *err)
{
    if (!text)
        return resolve_prompt(dir, embeds, path, len);
    struct weft_model *m;
    weft_status_t st = weft_model_open(dir, &m, err);
    if (st != WEFT_OK)
        return st;
    char why[400];
    const char *missing = weft_model_text_missing(m, why, sizeof(why));
    weft_model_close(m);
    if (!missing)
        return WEFT_OK;
    const size_t n = strlen(text);
    bool name = n > 0 && n < 64 && text[0] != '.' &&
                strspn(text, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                             "0123456789._-") == n;
    if (name) {
        snprintf(path, len, "%s/prompts/%s.safetensors", dir, text);
        const int fd = weft_files_open_regular(path);
        if (fd >= 0) {
            close(fd);
            return WEFT_OK;
        }
    }
    path[0] = '\0';
    return weft_error_refuse(err, WEFT_ERR_UNSUPPORTED, "--%s: %s; give precomputed "
                             "embeddings with --%s-embeds FILE|NAME", what, missing, what);
}

/* --latents: tensor "latents" or "latents_init" with exactly numel elements (caller frees). */
static weft_status_t read_latents(const char *path, int64_t numel, float **out,
                                  struct weft_error *err)
{
    struct weft_st_file *f;
    weft_status_t st = weft_st_open(path, &f, err);
    if (st != WEFT_OK)
        return st;
    const struct weft_st_tensor *t = weft_st_find(f, "latents");
    if (!t)
        t = weft_st_find(f, "latents_init");
    if (!t || t->numel != numel)
        st = weft_error_refuse(err, WEFT_ERR_FORMAT,
                               "%s: needs a tensor \"latents\" or \"latents_init\" of %lld "
                               "elements (tokens x in_channels for this image size)", path,
                               (long long)numel);
    float *p = st == WEFT_OK ? weft_malloc((size_t)numel * sizeof(float) + 4) : NULL;
    if (st == WEFT_OK && !p)
        st = weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    if (st == WEFT_OK && (st = weft_st_read(f, t, p, WEFT_DTYPE_F32, err)) == WEFT_OK)
        *out = p;
    else
        weft_free(p);
    weft_st_close(f);
    return st;
}

struct step_ui {
    struct weft_progress bar;
};

static void on_step(void *arg, int step, int steps, double seconds)
{
    (void)seconds;
    weft_progress_update(&((struct step_ui *)arg)->bar, step, steps);
}

/* The prompt's name for the image's text: the file's name without .safetensors. */
static void prompt_name(const char *prompt_path, char *out, size_t len)
{
    const char *base = strrchr(prompt_path, '/');
    snprintf(out, len, "%s", base ? base + 1 : prompt_path);
    if (weft_cli_ends_with(out, ".safetensors"))
        out[strlen(out) - strlen(".safetensors")] = '\0';
}

/* The final latents as safetensors, with the image's metadata vocabulary (worker/png.h). */
static weft_status_t write_latents(const struct gen_opts *o, const char *model,
                                   const char *prompt, const char *negative,
                                   const struct weft_rt_result *r, struct weft_error *err)
{
    const struct weft_png_meta meta = {
        .prompt = prompt, .model = model, .layout = "dp 1 x ring 1 x ulysses 1 x tp 1",
        .has_seed = !o->latents, .seed = o->seed, .steps = o->steps, .guidance = o->guidance,
        .width = o->width, .height = o->height, .image = -1, .prompt_index = -1,
        .negative_prompt = negative, .true_cfg_scale = o->true_cfg_scale,
    };
    struct weft_png_meta_store store;
    struct weft_png_text text[WEFT_PNG_META_MAX];
    size_t n = weft_png_meta_text(&meta, &store, text);
    struct weft_st_meta st_meta[WEFT_PNG_META_MAX];
    for (size_t i = 0; i < n; i++)
        st_meta[i] = (struct weft_st_meta){text[i].key, text[i].value};
    int64_t shape[3] = {1, r->tokens, r->channels};
    struct weft_st_out out = {"latents", WEFT_DTYPE_F32, 3, shape, r->latents};
    return weft_st_write(o->out, 1, &out, n, st_meta, err);
}

/* --vae-tiling / --vae-tile into t; NULL when decoding in one piece. */
static const struct weft_vae_tiling *tiling_of(const struct gen_opts *o,
                                               const struct weft_model *m,
                                               struct weft_vae_tiling *t)
{
    if (!m->has_vae || (!o->vae_tiling && !o->vae_tile))
        return NULL;
    if (o->vae_tile)
        weft_vae_tiling_latent(&m->vae, o->vae_tile / m->vae.scale, t);
    else
        weft_vae_tiling_default(&m->vae, t);
    return t;
}

static void log_components(const struct weft_runtime *rt)
{
    const struct weft_model *m = weft_runtime_model(rt);
    uint64_t tb, vb;
    weft_runtime_bytes(rt, &tb, &vb);
    WEFT_LOG_DEBUG("generate", "transformer (%s): %.1f MB on disk, %.1f MB loaded, stage "
                               "denoise", WEFT_FLUX_CLASS, (double)m->transformer_file_bytes / 1e6,
                   (double)tb / 1e6);
    if (m->has_vae)
        WEFT_LOG_DEBUG("generate", "vae (%s): %.1f MB on disk, %.1f MB loaded, stage decode",
                       WEFT_VAE_CLASS, (double)m->vae_file_bytes / 1e6, (double)vb / 1e6);
}

/* The prompt's embeddings: the text encoded (the stage "encode"), or read from the file. */
static weft_status_t prompt_embeds(const struct gen_opts *o, const char *text,
                                   const char *prompt_path, struct weft_runtime *rt,
                                   struct weft_prompt_embeds *pe, struct weft_error *err)
{
    if (prompt_path[0])
        return weft_model_prompt_read(weft_runtime_model(rt), prompt_path, pe, err);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    weft_status_t st = weft_runtime_encode(rt, text, o->max_sequence_length, pe, err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (st == WEFT_OK)
        WEFT_LOG_INFO("generate", "encoded the %s: %lld T5 tokens (%.2f s)",
                      text == o->text ? "prompt" : "negative prompt", (long long)pe->tokens,
                      (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
    return st;
}

static weft_status_t run(const struct gen_opts *o, const char *dir, const char *prompt_path,
                         const char *neg_path, struct weft_runtime *rt, struct weft_error *err)
{
    const struct weft_model *m = weft_runtime_model(rt);
    struct weft_prompt_embeds pe = {0}, npe = {0};
    float *init = NULL;
    weft_status_t st = prompt_embeds(o, o->text, prompt_path, rt, &pe, err);
    /* true CFG as FluxPipeline: on with a negative prompt and true_cfg_scale > 1 */
    const bool has_neg = o->neg_text || o->neg_prompt;
    const bool cfg = has_neg && o->true_cfg_scale > 1.0;
    if (has_neg && !cfg)
        WEFT_LOG_INFO("generate", "the negative prompt is not used: true CFG needs "
                                  "--true-cfg-scale above 1 (it is %g)", o->true_cfg_scale);
    if (st == WEFT_OK && cfg)
        st = prompt_embeds(o, o->neg_text, neg_path, rt, &npe, err);
    if (st == WEFT_OK && o->latents)
        st = read_latents(o->latents, weft_job_latent_elems(m, o->height, o->width), &init, err);
    char name[256], neg_name[256];
    if (prompt_path[0])
        prompt_name(prompt_path, name, sizeof(name));
    if (neg_path[0])
        prompt_name(neg_path, neg_name, sizeof(neg_name));
    struct weft_vae_tiling tiling;
    struct step_ui ui;
    const struct weft_rt_image img = {
        .prompt_embeds = pe.embeds, .s_txt = pe.tokens, .pooled = pe.pooled,
        .height = o->height, .width = o->width, .steps = (int)o->steps,
        .guidance = (float)o->guidance, .seed = o->seed, .latents_init = init,
        .neg_prompt_embeds = cfg ? npe.embeds : NULL, .neg_pooled = cfg ? npe.pooled : NULL,
        .true_cfg_scale = (float)o->true_cfg_scale,
        .png_negative_prompt = !cfg ? NULL : neg_path[0] ? neg_name : o->neg_text,
        .tiling = tiling_of(o, m, &tiling), .decode = o->png != 0, .keep_latents = !o->png,
        .png_prompt = prompt_path[0] ? name : o->text, .png_model = dir,
        .png_prompt_index = -1,
    };
    struct weft_rt_result r = {0};
    if (st == WEFT_OK) {
        weft_progress_begin(&ui.bar, "denoise");
        st = weft_runtime_image(rt, &img, on_step, NULL, &ui, &r, err);
        weft_progress_end(&ui.bar);
    }
    weft_free(init);
    weft_prompt_embeds_cleanup(&pe);
    weft_prompt_embeds_cleanup(&npe);
    if (st == WEFT_OK)
        st = o->png ? weft_files_save(o->out, r.png, r.png_len, err)
                    : write_latents(o, dir, prompt_path[0] ? name : o->text,
                                    img.png_negative_prompt, &r, err);
    if (st == WEFT_OK)
        WEFT_LOG_INFO("generate", "wrote %s (%lldx%lld, %lld steps; denoise %.2f s, decode "
                                  "%.2f s)", o->out, o->width, o->height, o->steps, r.denoise_s,
                      r.decode_s);
    weft_rt_result_cleanup(&r);
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
    char prompt[2300], neg[2300] = "";
    const struct weft_kernels *K = NULL;
    struct weft_kctx *kc = NULL;
    struct weft_runtime *rt = NULL;
    struct weft_rt_assign *a = weft_malloc(sizeof(*a));
    struct weft_error err = WEFT_ERROR_INIT;
    weft_status_t st = a ? WEFT_OK : WEFT_ERR_NOMEM;
    struct weft_device dev;
    char why[300];
    if (st == WEFT_OK) { /* the device first: a GPU that is not there fails at once */
        st = weft_device_parse(o.device ? o.device : cli->conf.worker.device, -1, &dev, why,
                               sizeof(why));
        if (st == WEFT_OK)
            st = weft_kernels_create(&dev, (int)cli->conf.kernels.threads, &K, &kc, why,
                                     sizeof(why));
        if (st != WEFT_OK)
            WEFT_LOG_ERROR("generate", "%s", why);
    }
    prompt[0] = '\0';
    if (st == WEFT_OK &&
        (st = text_or_embeds(dir, o.text, o.prompt, "prompt", prompt, sizeof(prompt), &err)) ==
            WEFT_OK &&
        (o.neg_text || o.neg_prompt))
        st = text_or_embeds(dir, o.neg_text, o.neg_prompt, "negative-prompt", neg, sizeof(neg),
                            &err);
    if (st == WEFT_OK) {
        /* one job: each stage frees its part (nothing to cache) */
        const struct weft_rt_opts ro = {K, kc, true, 0};
        st = weft_runtime_create(&ro, &rt);
    }
    if (st == WEFT_OK) {
        weft_rt_assign_single(dir, a);
        a->decode = o.png != 0;
        a->compute = (enum weft_dtype)cli->conf.model.dtype;
        st = weft_runtime_assign(rt, a, NULL, &err);
    }
    if (st == WEFT_OK) {
        const struct weft_model *m = weft_runtime_model(rt);
        o.height = o.height ? o.height : m->default_side;
        o.width = o.width ? o.width : m->default_side;
        if (!o.max_sequence_length)
            o.max_sequence_length = m->default_text_tokens;
        log_components(rt);
        st = run(&o, dir, prompt, neg, rt, &err);
    }
    if (st != WEFT_OK)
        weft_error_log(&err, "generate");
    weft_free(a);
    weft_runtime_destroy(rt);
    if (K)
        K->destroy(kc);
    return st == WEFT_OK ? 0 : 1;
}
