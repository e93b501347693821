/* weft submit: send a job to `weft serve`, follow it, download its images. */
#include <errno.h>
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "model/job.h"
#include "cli/progress.h"
#include "client/weft.h"
#include "common/alloc.h"
#include "common/files.h"
#include "common/log.h"

#define MAX_PROMPTS 4096

static void help(FILE *out)
{
    fprintf(out,
        "usage: weft submit [--prompt TEXT]... [--prompt-embeds NAME|FILE]...\n"
        "                   [--negative-prompt TEXT | --negative-prompt-embeds NAME]\n"
        "                   [--true-cfg-scale S]\n"
        "                   [--max-sequence-length N] [--height N] [--width N] [--steps N]\n"
        "                   [--guidance G] [--seed S] [-n|--count N] [-o|--out DIR] [--no-wait]\n"
        "                   [--progress auto|bar|plain|none] [--timeout SECONDS]\n"
        "                   [--server ADDR] [--token TOKEN]\n"
        "\n"
        "Submit one job to a `weft serve` (one prompt, or a batch with several), follow\n"
        "its progress as the server pushes it (GET /v1/jobs/{id}/events), and save its PNGs:\n"
        "with --out DIR as DIR/<i>.png, else as ./<job id>-<i>.png; image i belongs to prompt\n"
        "i / count. DIR is created (and checked writable) before the job is submitted. Exit\n"
        "status: 0 when the job is done, 1 when it failed, was cancelled or could not be\n"
        "submitted, 2 on bad usage.\n"
        "\n"
        "  --prompt TEXT       a prompt, encoded by the served model's text encoders (a model\n"
        "                      without them takes only the name of one of its precomputed\n"
        "                      prompts); repeat for a batch\n"
        "  --prompt-embeds NAME|FILE  precomputed embeddings instead: a name of the served\n"
        "                      model's prompts/ folder, or a local safetensors file\n"
        "                      (prompt_embeds, pooled_prompt_embeds) sent inline; repeatable.\n"
        "                      With no prompt at all: the server's first precomputed prompt\n"
        "  --negative-prompt TEXT, --negative-prompt-embeds NAME  true classifier-free\n"
        "                      guidance: what every prompt is steered away from, with\n"
        "  --true-cfg-scale S  above 1 (server default 1: off), as FluxPipeline's\n"
        "  --max-sequence-length N  T5 tokens of each text prompt, 1..512 (default: the model's)\n"
        "  --height, --width N image size in pixels, multiples of 16 (default: the model's)\n"
        "  --steps N           denoising steps (server default 28)\n"
        "  --guidance G        embedded guidance scale (server default 3.5)\n"
        "  --seed S            noise seed; -1 or none: the server draws one (printed); image i\n"
        "                      uses the seed's noise at i\n"
        "  -n, --count N       images per prompt (default 1)\n"
        "  -o, --out DIR       where the PNGs go, as DIR/<i>.png (created if missing)\n"
        "  --no-wait           print the job id and exit once the job is accepted\n"
        "  --progress MODE     auto (a bar on a terminal, else a line every few seconds), bar,\n"
        "                      plain or none\n"
        "  --timeout SECONDS   give up waiting after this long (default 86400); the job goes on\n"
        "  --server ADDR       host:port or unix:/path (default [api] listen)\n"
        "  --token TOKEN       bearer token (default [api] token, or WEFT_API_TOKEN)\n");
}

struct submit_opts {
    const char *server, *token, *out;
    const char *prompts[MAX_PROMPTS];
    bool embeds[MAX_PROMPTS]; /* --prompt-embeds (else --prompt: text) */
    int n_prompts;
    long long height, width, steps, count, timeout_s, max_sequence_length;
    double guidance, true_cfg_scale;
    const char *negative; /* --negative-prompt TEXT or --negative-prompt-embeds NAME */
    bool negative_embeds;
    unsigned long long seed;
    bool seed_random;
    bool no_wait;
    int progress; /* enum weft_progress_mode */
};

/* 1: help shown, 0: ok, -1: usage error (logged). */
static int parse_args(struct weft_cli *cli, struct submit_opts *o)
{
    *o = (struct submit_opts){.server = cli->conf.api.listen, .token = cli->conf.api.token,
                              .out = NULL, .timeout_s = 86400, .seed_random = true};
    for (int i = 1; i < cli->argc; i++) {
        const char *v;
        char **argv = cli->argv;
        int bad = 0;
        if (weft_cli_is_help(argv[i])) {
            help(stdout);
            return 1;
        }
        bool embeds = (v = weft_cli_opt_value(cli->argc, argv, &i, "--prompt-embeds")) != NULL;
        if (embeds || (v = weft_cli_opt_value(cli->argc, argv, &i, "--prompt"))) {
            if (o->n_prompts == MAX_PROMPTS) {
                WEFT_LOG_ERROR("submit", "more than %d prompts", MAX_PROMPTS);
                return -1;
            }
            o->embeds[o->n_prompts] = embeds;
            o->prompts[o->n_prompts++] = v;
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--max-sequence-length"))) {
            bad = weft_cli_parse_int("--max-sequence-length", v, 1, WEFT_MODEL_MAX_SEQUENCE_LENGTH,
                                     &o->max_sequence_length);
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--height"))) {
            bad = weft_cli_parse_int("--height", v, 1, WEFT_JOB_MAX_SIDE, &o->height);
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--width"))) {
            bad = weft_cli_parse_int("--width", v, 1, WEFT_JOB_MAX_SIDE, &o->width);
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--steps"))) {
            bad = weft_cli_parse_int("--steps", v, 1, WEFT_JOB_MAX_STEPS, &o->steps);
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--count")) ||
                   (v = weft_cli_opt_value(cli->argc, argv, &i, "-n"))) {
            bad = weft_cli_parse_int("--count", v, 1, WEFT_JOB_MAX_IMAGES, &o->count);
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--timeout"))) {
            bad = weft_cli_parse_int("--timeout", v, 1, 10000000, &o->timeout_s);
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--seed"))) {
            o->seed_random = strcmp(v, "-1") == 0;
            bad = o->seed_random ? 0 : weft_cli_parse_seed("--seed", v, &o->seed);
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--progress"))) {
            o->progress = weft_progress_mode_parse(v);
            if (o->progress < 0) {
                WEFT_LOG_ERROR("submit", "--progress '%s': expected auto, bar, plain or none", v);
                return -1;
            }
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--guidance"))) {
            bad = weft_cli_parse_guidance("--guidance", v, &o->guidance);
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--true-cfg-scale"))) {
            bad = weft_cli_parse_guidance("--true-cfg-scale", v, &o->true_cfg_scale);
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--negative-prompt-embeds"))) {
            o->negative = v, o->negative_embeds = true;
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--negative-prompt"))) {
            o->negative = v, o->negative_embeds = false;
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--out")) ||
                   (v = weft_cli_opt_value(cli->argc, argv, &i, "-o"))) {
            o->out = v;
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--server"))) {
            o->server = v;
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--token"))) {
            o->token = v;
        } else if (strcmp(argv[i], "--no-wait") == 0) {
            o->no_wait = true;
        } else {
            weft_cli_unexpected("submit", "", "weft submit", argv[i]);
            return -1;
        }
        if (bad)
            return -1;
    }
    return 0;
}

static bool is_file(const char *p)
{
    size_t n = strlen(p);
    return strchr(p, '/') || (n > 12 && strcmp(p + n - 12, ".safetensors") == 0);
}

static int read_file(const char *path, void **data_p, size_t *len_p)
{
    FILE *f = weft_files_fopen_regular(path);
    if (!f) {
        WEFT_LOG_ERROR("submit", "%s: %s", path, weft_files_open_error(errno));
        return -1;
    }
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        n = ftell(f);
    char *buf = n >= 0 && fseek(f, 0, SEEK_SET) == 0 ? weft_malloc((size_t)n + 1) : NULL;
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        WEFT_LOG_ERROR("submit", "%s: cannot read", path);
        weft_free(buf);
        (void)fclose(f);
        return -1;
    }
    (void)fclose(f);
    *data_p = buf;
    *len_p = (size_t)n;
    return 0;
}

struct wait_ui {
    struct weft_progress bar;
    int last_state, last_queue;
};

static int on_progress(void *arg, const struct weft_job_status *st)
{
    struct wait_ui *ui = arg;
    if (st->state == WEFT_JOB_QUEUED && (ui->last_state != (int)st->state ||
                                         ui->last_queue != st->queue_position)) {
        char note[64];
        snprintf(note, sizeof(note), "queued (%d ahead)", st->queue_position);
        weft_progress_note(&ui->bar, note);
    }
    ui->last_state = (int)st->state;
    ui->last_queue = st->queue_position;
    if (st->state == WEFT_JOB_RUNNING && st->images_total > 0 && st->steps > 0) {
        int total = st->images_total * st->steps;
        weft_progress_update_eta(&ui->bar, (int)(st->fraction * total + 0.5), total, st->elapsed,
                                 st->eta);
    }
    return 0;
}

/* The folder the images go to exists (created) and takes files: checked before any work. */
int weft_cli_out_dir_ready(const char *cmd, const char *dir)
{
    struct stat sb;
    char path[4096];
    snprintf(path, sizeof(path), "%s", dir);
    for (char *p = path + 1; *p; p++) { /* mkdir -p */
        if (*p != '/')
            continue;
        *p = '\0';
        if (stat(path, &sb) != 0 && mkdir(path, 0777) != 0 && errno != EEXIST)
            break;
        *p = '/';
    }
    if (stat(dir, &sb) != 0 && mkdir(dir, 0777) != 0) {
        WEFT_LOG_ERROR(cmd, "--out %s: cannot create the folder: %s", dir, strerror(errno));
        return -1;
    }
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        WEFT_LOG_ERROR(cmd, "--out %s: not a folder", dir);
        return -1;
    }
    if (access(dir, W_OK | X_OK) != 0) {
        WEFT_LOG_ERROR(cmd, "--out %s: cannot write there: %s", dir, strerror(errno));
        return -1;
    }
    return 0;
}

int weft_cli_out_file_ready(const char *cmd, const char *path)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof(dir), ".");
    else if (slash == dir)
        dir[1] = '\0'; /* "/x.png": the root */
    else
        *slash = '\0';
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        WEFT_LOG_ERROR(cmd, "--out %s: %s is not a folder", path, dir);
        return -1;
    }
    if (access(dir, W_OK | X_OK) != 0) {
        WEFT_LOG_ERROR(cmd, "--out %s: cannot write in %s: %s", path, dir, strerror(errno));
        return -1;
    }
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        WEFT_LOG_ERROR(cmd, "--out %s: there and not a file", path);
        return -1;
    }
    return 0;
}

static int download(struct weft_client *c, const struct weft_job_status *st, const char *dir)
{
    for (size_t i = 0; i < st->n_images; i++) {
        char path[4096];
        if (dir)
            snprintf(path, sizeof(path), "%s/%d.png", dir, st->images[i].index);
        else
            snprintf(path, sizeof(path), "%s-%d.png", st->id, st->images[i].index);
        if (weft_client_image_save(c, st->id, st->images[i].index, path) != WEFT_OK) {
            WEFT_LOG_ERROR("submit", "%s", weft_client_error(c));
            return -1;
        }
        printf("%s\t(prompt %d, %dx%d)\n", path, st->images[i].prompt, st->images[i].width,
               st->images[i].height);
    }
    return 0;
}

static int submit_and_wait(struct weft_client *c, const struct submit_opts *o,
                           struct weft_prompt *prompts, int n)
{
    const struct weft_prompt negative = {.name = o->negative_embeds ? o->negative : NULL,
                                         .text = o->negative_embeds ? NULL : o->negative};
    struct weft_job_request req = {
        .prompts = prompts, .n_prompts = (size_t)n, .height = o->height, .width = o->width,
        .steps = o->steps, .count = o->count, .guidance = o->guidance, .seed = o->seed,
        .seed_random = o->seed_random, .max_sequence_length = o->max_sequence_length,
        .negative_prompt = o->negative ? &negative : NULL, .true_cfg_scale = o->true_cfg_scale,
    };
    char id[WEFT_CLIENT_ID_MAX];
    if (weft_client_submit(c, &req, id) != WEFT_OK) {
        WEFT_LOG_ERROR("submit", "%s", weft_client_error(c));
        return 1;
    }
    printf("job %s\n", id);
    (void)fflush(stdout);
    if (o->no_wait)
        return 0;
    struct wait_ui ui = {.last_state = -1, .last_queue = -1};
    weft_progress_begin_mode(&ui.bar, id, (enum weft_progress_mode)o->progress);
    struct weft_job_status st = {0};
    int timeout_ms = (int)(o->timeout_s > 2000000 ? 2000000000 : o->timeout_s * 1000);
    weft_status_t s = weft_client_follow(c, id, timeout_ms, on_progress, &ui, &st);
    weft_progress_end(&ui.bar);
    int rc = 1;
    if (s != WEFT_OK)
        WEFT_LOG_ERROR("submit", "%s", weft_client_error(c));
    else if (st.state == WEFT_JOB_FAILED)
        WEFT_LOG_ERROR("submit", "job %s failed: %s", id, st.error);
    else if (st.state == WEFT_JOB_CANCELLED)
        WEFT_LOG_ERROR("submit", "job %s was cancelled", id);
    else
        rc = download(c, &st, o->out) == 0 ? 0 : 1;
    if (rc == 0 && o->seed_random)
        WEFT_LOG_INFO("submit", "seed %s (drawn by the server)", st.seed);
    weft_job_status_cleanup(&st);
    return rc;
}

int weft_cmd_submit(struct weft_cli *cli)
{
    static struct submit_opts o; /* large: the prompt list */
    int rc = parse_args(cli, &o);
    if (rc)
        return rc > 0 ? 0 : 2;
    if (o.out && !o.no_wait && weft_cli_out_dir_ready("submit", o.out) != 0)
        return 1;
    struct weft_client_opts co = {.address = o.server, .token = o.token, .timeout_ms = 60000};
    struct weft_client *c;
    if (weft_client_connect(&co, &c) != WEFT_OK)
        return 1; /* logged */
    int n = o.n_prompts ? o.n_prompts : 1;
    struct weft_prompt *prompts = weft_calloc((size_t)n, sizeof(*prompts));
    char first[64];
    rc = prompts ? 0 : 1;
    if (rc == 0 && o.n_prompts == 0) {
        rc = weft_client_default_prompt(c, first, sizeof(first)) != WEFT_OK ? 1 : 0;
        if (rc)
            WEFT_LOG_ERROR("submit", "no --prompt given: %s", weft_client_error(c));
        prompts[0].name = first;
    }
    for (int i = 0; rc == 0 && i < o.n_prompts; i++) {
        if (!o.embeds[i]) {
            prompts[i].text = o.prompts[i];
            continue;
        }
        if (!is_file(o.prompts[i])) {
            prompts[i].name = o.prompts[i];
            continue;
        }
        void *data;
        size_t len;
        if (read_file(o.prompts[i], &data, &len) != 0)
            rc = 1;
        else
            prompts[i] = (struct weft_prompt){.safetensors = data, .safetensors_len = len};
    }
    if (rc == 0)
        rc = submit_and_wait(c, &o, prompts, n);
    for (int i = 0; prompts && i < n; i++)
        weft_free((void *)prompts[i].safetensors);
    weft_free(prompts);
    weft_client_close(c);
    return rc;
}
