/* weft run: everything at once on this machine: a coordinator, N workers, one job, the PNGs,
 * then everything stopped. */
#include <errno.h>
#include <stdbool.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/child.h"
#include "cli/cli.h"
#include "cli/progress.h"
#include "client/weft.h"
#include "common/alloc.h"
#include "common/files.h"
#include "common/log.h"
#include "control/boot.h"
#include "model/job.h"


#define MAX_RANKS 64
#define MAX_PROMPTS 64

static void help(FILE *out)
{
    fprintf(out,
        "usage: weft run [--np N] [--tp N] [--ulysses N] [--ring N] [--cfg 1|2] [--dp N]\n"
        "                [--model DIR]\n"
        "                [--prompt TEXT]... [--prompt-embeds NAME]... [--max-sequence-length N]\n"
        "                [--negative-prompt TEXT | --negative-prompt-embeds NAME]\n"
        "                [--true-cfg-scale S] [--height N] [--width N] [--steps N]\n"
        "                [--guidance G] [--seed S] [-n|--count N] [-o|--out FILE.png|DIR] [-v]\n"
        "                [--progress auto|bar|plain|none]\n"
        "                [--device-map balanced|auto --np N [--max-memory 0:SIZE,1:SIZE,cpu:SIZE]]\n"
        "\n"
        "Start a coordinator and N local `weft worker` processes (one per device; CPU devices\n"
        "here), submit one job, show its progress, write the PNG(s), stop everything (each\n"
        "worker's peak resident memory is printed as it exits), exit 0.\n"
        "The mesh is dp x cfg x ring x ulysses x tp = N (--np alone: that many data-parallel\n"
        "replicas); with --parallel.groups=\"ulysses 2 + dp 2\" ([parallel] groups) N is the\n"
        "groups' workers and the job runs on the group its size wants. Defaults: the embedded\n"
        "models/flux-tiny (a tiny FLUX.1 pipeline trained to draw simple shapes), the\n"
        "model's size (its VAE's sample_size up to 1024: 128 for flux-tiny, 1024 for\n"
        "FLUX.1), 28 steps; [parallel], [kernels] and [transport] apply.\n"
        "\n"
        "  --np N              workers (default: the product of the degrees, else 1)\n"
        "  --device-map S      place the pipeline over each replica's devices ([device_map]\n"
        "                      strategy): --np N workers make dp replicas of N/dp devices;\n"
        "                      the transformer is split by blocks where one device is too\n"
        "                      small; --max-memory bounds each device (and cpu: host memory)\n"
        "  --tp/--ulysses/--ring/--dp N  parallel degrees\n"
        "  --cfg 2             CFG parallelism: with true CFG, the prompt's and the negative\n"
        "                      prompt's passes on the two halves of each replica at once\n"
        "  --prompt TEXT       a prompt, encoded by the model's text encoders once per replica\n"
        "                      (on its first rank, or where --device-map places them; a\n"
        "                      model without them takes only the name of one of its\n"
        "                      precomputed prompts); repeat for a batch (split across the\n"
        "                      dp replicas)\n"
        "  --prompt-embeds NAME  precomputed embeddings of the model's prompts/ folder instead\n"
        "  --negative-prompt TEXT, --negative-prompt-embeds NAME  what true classifier-free\n"
        "                      guidance steers every prompt away from, with\n"
        "  --true-cfg-scale S  above 1 (default 1: off): two transformer passes a step,\n"
        "                      neg + S (pred - neg), as FluxPipeline's true_cfg_scale\n"
        "  --max-sequence-length N  T5 tokens of each text prompt, 1..512 (default: the\n"
        "                      model's tokenizer_2 model_max_length up to 512; flux-tiny 48)\n"
        "  -o, --out PATH      PATH ending in .png: that file (several images: PATH-<i>.png);\n"
        "                      any other PATH is a folder: PATH/<i>.png (created, and checked\n"
        "                      writable, before anything starts). Default weft.png\n"
        "  -n, --count N       images per prompt (default 1)\n"
        "  --progress MODE     auto (a bar on a terminal, else a line every few seconds), bar,\n"
        "                      plain or none\n"
        "  -v, --verbose       show the coordinator's and workers' logs (default: warnings)\n"
        "  SIGINT or SIGTERM stops the coordinator and the workers (they also stop if weft run\n"
        "  dies) and removes the temporary folder ($TMPDIR, else /tmp); exit status 130/143\n"
        "  other options as `weft submit`; --config and --section.key=value reach every\n"
        "  process started\n");
}

struct run_opts {
    const char *model, *out;
    const char *prompts[MAX_PROMPTS];
    bool embeds[MAX_PROMPTS]; /* --prompt-embeds (else --prompt: text) */
    int n_prompts;
    long long np, tp, uly, ring, cfg, dp, height, width, steps, count, max_sequence_length;
    double guidance, true_cfg_scale;
    const char *negative; /* --negative-prompt TEXT or --negative-prompt-embeds NAME */
    bool negative_embeds;
    unsigned long long seed;
    bool verbose;
    int progress; /* enum weft_progress_mode */
    const char *device_map, *max_memory;
};

static int parse(struct weft_cli *cli, struct run_opts *o)
{
    /* sides 0: the server's, the model's defaults (model/model.h) */
    *o = (struct run_opts){.out = "weft.png", .steps = 28, .count = 1, .guidance = 3.5};
    static const char *const names[] = {"--np",    "--tp",     "--ulysses", "--ring",
                                        "--dp",    "--cfg",    "--height",  "--width",
                                        "--steps", "--count"};
    long long *fields[] = {&o->np,    &o->tp,     &o->uly,   &o->ring,  &o->dp,
                           &o->cfg,   &o->height, &o->width, &o->steps, &o->count};
    static const long long hi[] = {MAX_RANKS,          MAX_RANKS,          MAX_RANKS,
                                   MAX_RANKS,          MAX_RANKS,          2,
                                   WEFT_JOB_MAX_SIDE,  WEFT_JOB_MAX_SIDE,  WEFT_JOB_MAX_SIDE,
                                   WEFT_JOB_MAX_SIDE};
    for (int i = 1; i < cli->argc; i++) {
        char **argv = cli->argv;
        const char *v;
        bool embeds = false;
        if (weft_cli_is_help(argv[i])) {
            help(stdout);
            return 1;
        }
        int hit = 0;
        for (size_t k = 0; k < sizeof(names) / sizeof(names[0]) && !hit; k++) {
            if ((v = weft_cli_opt_value(cli->argc, argv, &i, names[k]))) {
                hit = 1;
                if (weft_cli_parse_int(names[k], v, 1, hi[k], fields[k]))
                    return -1;
            }
        }
        if (hit)
            continue;
        if (strcmp(argv[i], "-v") == 0 || strcmp(argv[i], "--verbose") == 0) {
            o->verbose = true;
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "-n"))) {
            if (weft_cli_parse_int("-n", v, 1, WEFT_JOB_MAX_IMAGES, &o->count))
                return -1;
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--progress"))) {
            if ((o->progress = weft_progress_mode_parse(v)) < 0) {
                WEFT_LOG_ERROR("run", "--progress '%s': expected auto, bar, plain or none", v);
                return -1;
            }
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--device-map"))) {
            o->device_map = v;
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--max-memory"))) {
            o->max_memory = v;
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--model"))) {
            o->model = v;
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--out")) ||
                   (v = weft_cli_opt_value(cli->argc, argv, &i, "-o"))) {
            o->out = v;
        } else if ((embeds = (v = weft_cli_opt_value(cli->argc, argv, &i,
                                                     "--prompt-embeds")) != NULL) ||
                   (v = weft_cli_opt_value(cli->argc, argv, &i, "--prompt"))) {
            if (o->n_prompts == MAX_PROMPTS) {
                WEFT_LOG_ERROR("run", "more than %d prompts", MAX_PROMPTS);
                return -1;
            }
            o->embeds[o->n_prompts] = embeds;
            o->prompts[o->n_prompts++] = v;
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--max-sequence-length"))) {
            if (weft_cli_parse_int("--max-sequence-length", v, 1, WEFT_MODEL_MAX_SEQUENCE_LENGTH,
                                   &o->max_sequence_length))
                return -1;
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--seed"))) {
            if (weft_cli_parse_seed("--seed", v, &o->seed))
                return -1;
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--guidance"))) {
            if (weft_cli_parse_guidance("--guidance", v, &o->guidance))
                return -1;
        } else if ((embeds = (v = weft_cli_opt_value(cli->argc, argv, &i,
                                                     "--negative-prompt-embeds")) != NULL) ||
                   (v = weft_cli_opt_value(cli->argc, argv, &i, "--negative-prompt"))) {
            o->negative = v;
            o->negative_embeds = embeds;
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--true-cfg-scale"))) {
            if (weft_cli_parse_guidance("--true-cfg-scale", v, &o->true_cfg_scale))
                return -1;
        } else {
            weft_cli_unexpected("run", "", "weft run", argv[i]);
            return -1;
        }
    }
    const struct weft_conf_parallel *p = &cli->conf.parallel;
    const bool devmap = o->device_map ? strcmp(o->device_map, "none") != 0
                                      : cli->conf.device_map.strategy != 0;
    if (p->groups[0]) { /* the groups give the workers; the coordinator checks the rest */
        struct weft_layout base, g[WEFT_LAYOUT_GROUPS_MAX];
        int n = 0;
        struct weft_error err = WEFT_ERROR_INIT;
        weft_layout_from_conf(&cli->conf, 0, &base);
        if (weft_layout_parse_groups(p->groups, &base, g, &n, &err) != WEFT_OK) {
            WEFT_LOG_ERROR("run", "%s", weft_error_text(&err));
            return -1;
        }
        const int workers = weft_layout_groups_devices(g, n);
        if (workers > MAX_RANKS) {
            WEFT_LOG_ERROR("run", "[parallel] groups (\"%s\") takes %d workers; weft run "
                           "starts at most %d", p->groups, workers, MAX_RANKS);
            return -1;
        }
        if (o->tp || o->uly || o->ring || o->cfg || o->dp || devmap ||
            (o->np && o->np != workers)) {
            WEFT_LOG_ERROR("run", "[parallel] groups (\"%s\") sets the layouts and takes %d "
                           "workers: no --tp, --ulysses, --ring, --cfg, --dp or --device-map "
                           "beside it, and --np %d or none", p->groups, workers, workers);
            return -1;
        }
        o->np = workers;
        o->tp = o->uly = o->ring = o->cfg = o->dp = 1;
        return 0;
    }
    if (devmap) {
        /* a replica is np / dp devices; the degrees other than dp stay 1 (checked by serve) */
        o->dp = o->dp ? o->dp : p->dp_degree;
        if (!o->np || o->np % o->dp) {
            WEFT_LOG_ERROR("run", "--device-map needs --np N, a multiple of the dp degree %lld "
                                  "(N / dp devices per replica)", o->dp);
            return -1;
        }
        o->tp = o->tp ? o->tp : p->tp_degree, o->uly = o->uly ? o->uly : p->ulysses_degree;
        o->ring = o->ring ? o->ring : p->ring_degree;
        o->cfg = o->cfg ? o->cfg : p->cfg_degree;
        return 0;
    }
    long long tp = o->tp ? o->tp : p->tp_degree, uly = o->uly ? o->uly : p->ulysses_degree;
    long long ring = o->ring ? o->ring : p->ring_degree, cfg = o->cfg ? o->cfg : p->cfg_degree;
    long long per = cfg * tp * uly * ring;
    long long dp = o->dp ? o->dp : o->np ? o->np / per : p->dp_degree;
    if (!o->np)
        o->np = dp * per;
    if (o->np != dp * per || o->np > MAX_RANKS) {
        WEFT_LOG_ERROR("run", "--np %lld is not dp %lld x cfg %lld x ring %lld x ulysses %lld x "
                       "tp %lld", o->np, dp, cfg, ring, uly, tp);
        return -1;
    }
    o->tp = tp, o->uly = uly, o->ring = ring, o->cfg = cfg, o->dp = dp;
    return 0;
}

/* Start argv (NULL-terminated) with the common options appended: the children's logs at
 * warnings unless verbose, then --config and the overrides as given, so that the user's
 * --log.level wins. */
static pid_t spawn(const struct weft_cli *cli, bool verbose, char *const argv[], char **env)
{
    enum { MAX_OVER = 48 };
    if (cli->n_overrides > MAX_OVER) {
        WEFT_LOG_ERROR("run", "more than %d --section.key=value options", MAX_OVER);
        return -1;
    }
    char *all[MAX_OVER + 48], config[4200], *over[MAX_OVER];
    int n = 0, n_over = 0, err = 0;
    for (; argv[n] && n < 40; n++)
        all[n] = argv[n];
    if (!verbose)
        all[n++] = "--log.level=warn";
    if (cli->config) {
        snprintf(config, sizeof(config), "--config=%s", cli->config);
        all[n++] = config;
    }
    for (int i = 0; i < cli->n_overrides && !err; i++) {
        size_t len = strlen(cli->overrides[i]) + 3;
        if (!(over[n_over] = weft_malloc(len)))
            err = ENOMEM;
        else
            snprintf(over[n_over], len, "--%s", cli->overrides[i]), all[n++] = over[n_over++];
    }
    all[n] = NULL;
    pid_t pid = -1;
    pid_t parent = getpid();
    if (!err && (pid = fork()) < 0)
        err = errno;
    if (!err && pid == 0) {
        /* the child goes when weft run goes, however it goes (SIGKILL included) */
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent)
            _exit(127);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        execve(argv[0], all, env);
        _exit(127);
    }
    for (int i = 0; i < n_over; i++)
        weft_free(over[i]);
    if (err) {
        WEFT_LOG_ERROR("run", "cannot start %s: %s", argv[0], strerror(err));
        return -1;
    }
    return pid;
}

/* Read "host:port" from a file another process writes; wait for it up to timeout_s. When the
 * process exits first it is reaped here and *pid_p becomes -1 (nothing left to stop). */
static volatile sig_atomic_t run_signal;

static int wait_file(const char *path, pid_t *pid_p, double timeout_s, char *out, size_t len)
{
    const int rc = weft_cli_wait_line(path, pid_p, timeout_s, &run_signal, out, len);
    if (rc == -1)
        WEFT_LOG_ERROR("run", "the coordinator exited before it listened (its error is above)");
    else if (rc != 0)
        WEFT_LOG_ERROR("run", "the coordinator did not listen within %.0f s", timeout_s);
    return rc == 0 ? 0 : -1;
}

/* What a signal to weft run stops: its children (async-signal-safe: kill only). */
static pid_t run_children[MAX_RANKS + 1];
static volatile sig_atomic_t run_n_children;

static void on_run_signal(int sig)
{
    run_signal = sig;
    for (int i = 0; i < run_n_children; i++)
        if (run_children[i] > 0)
            kill(run_children[i], SIGTERM);
}

static void track_child(pid_t pid)
{
    if (pid > 0 && run_n_children < MAX_RANKS + 1) {
        run_children[run_n_children] = pid;
        run_n_children = run_n_children + 1;
    }
}

/* SIGTERM, wait up to grace_s, then SIGKILL; its peak resident memory in KiB (-1 unknown). */
static long stop_child(pid_t pid, double grace_s)
{
    if (pid <= 0)
        return -1;
    kill(pid, SIGTERM);
    struct rusage ru;
    for (int tick = 0; tick < (int)(grace_s * 20); tick++) { /* 50 ms each */
        int status;
        if (wait4(pid, &status, WNOHANG, &ru) == pid)
            return ru.ru_maxrss;
        usleep(50000);
    }
    kill(pid, SIGKILL);
    return wait4(pid, NULL, 0, &ru) == pid ? ru.ru_maxrss : -1;
}

struct bar {
    struct weft_progress p;
};

static int on_progress(void *arg, const struct weft_job_status *st)
{
    struct bar *b = arg;
    if (run_signal)
        return 1;
    if (st->state == WEFT_JOB_RUNNING && st->images_total > 0 && st->steps > 0) {
        int total = st->images_total * st->steps;
        weft_progress_update_eta(&b->p, (int)(st->fraction * total + 0.5), total, st->elapsed,
                                 st->eta);
    }
    return 0;
}

/* Where image i of n goes: --out FILE.png (FILE-<i>.png for several), else --out DIR/<i>.png. */
static void out_path(const char *out, size_t n, int i, char *path, size_t len)
{
    const char *dot = strrchr(out, '.');
    bool file = dot && strcmp(dot, ".png") == 0;
    if (!file)
        snprintf(path, len, "%s/%d.png", out, i);
    else if (n == 1)
        snprintf(path, len, "%s", out);
    else
        snprintf(path, len, "%.*s-%d.png", (int)(dot - out), out, i);
}

static int submit_and_fetch(const struct run_opts *o, const char *api)
{
    struct weft_client_opts co = {.address = api, .timeout_ms = 60000};
    struct weft_client *c;
    if (weft_client_connect(&co, &c) != WEFT_OK)
        return 1;
    struct weft_prompt prompts[MAX_PROMPTS];
    void *blobs[MAX_PROMPTS] = {0};
    char first[256];
    int rc = 1, n_prompts = o->n_prompts;
    if (n_prompts == 0) {
        if (weft_client_default_prompt(c, first, sizeof(first)) != WEFT_OK) {
            WEFT_LOG_ERROR("run", "no --prompt given: %s", weft_client_error(c));
            goto out;
        }
        prompts[0] = (struct weft_prompt){.name = first};
        n_prompts = 1;
    }
    for (int i = 0; i < o->n_prompts; i++) {
        if (!o->embeds[i]) {
            prompts[i] = (struct weft_prompt){.text = o->prompts[i]};
            continue;
        }
        prompts[i] = (struct weft_prompt){.name = o->prompts[i]};
        if (strchr(o->prompts[i], '/') || strstr(o->prompts[i], ".safetensors")) {
            FILE *f = weft_files_fopen_regular(o->prompts[i]);
            long n = -1;
            if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
                (blobs[i] = weft_malloc((size_t)n)) && fread(blobs[i], 1, (size_t)n, f) == (size_t)n) {
                prompts[i] = (struct weft_prompt){.safetensors = blobs[i], .safetensors_len = (size_t)n};
            } else {
                WEFT_LOG_ERROR("run", "%s: cannot read", o->prompts[i]);
                if (f)
                    (void)fclose(f);
                goto out;
            }
            (void)fclose(f);
        }
    }
    const struct weft_prompt negative = {.name = o->negative_embeds ? o->negative : NULL,
                                         .text = o->negative_embeds ? NULL : o->negative};
    struct weft_job_request req = {.prompts = prompts,
                                   .n_prompts = (size_t)n_prompts,
                                   .height = o->height, .width = o->width, .steps = o->steps,
                                   .count = o->count, .guidance = o->guidance, .seed = o->seed,
                                   .max_sequence_length = o->max_sequence_length,
                                   .negative_prompt = o->negative ? &negative : NULL,
                                   .true_cfg_scale = o->true_cfg_scale};
    char id[WEFT_CLIENT_ID_MAX];
    if (weft_client_submit(c, &req, id) != WEFT_OK) {
        WEFT_LOG_ERROR("run", "submit: %s", weft_client_error(c));
        goto out;
    }
    struct bar b;
    weft_progress_begin_mode(&b.p, "generate", (enum weft_progress_mode)o->progress);
    struct weft_job_status st = {0};
    weft_status_t ws = weft_client_follow(c, id, 86400 * 1000, on_progress, &b, &st);
    weft_progress_end(&b.p);
    if (run_signal) {
        weft_job_status_cleanup(&st);
        goto out;
    }
    if (ws != WEFT_OK || st.state != WEFT_JOB_DONE) {
        WEFT_LOG_ERROR("run", "job %s %s: %s", id, weft_client_state_name(st.state),
                       st.error[0] ? st.error : weft_client_error(c));
        weft_job_status_cleanup(&st);
        goto out;
    }
    rc = 0;
    for (size_t i = 0; i < st.n_images && rc == 0; i++) {
        char path[2048];
        out_path(o->out, st.n_images, st.images[i].index, path, sizeof(path));
        if (weft_client_image_save(c, id, st.images[i].index, path) != WEFT_OK) {
            WEFT_LOG_ERROR("run", "%s: %s", path, weft_client_error(c));
            rc = 1;
        } else {
            WEFT_LOG_INFO("run", "wrote %s (%dx%d)", path, st.images[i].width,
                          st.images[i].height);
        }
    }
    weft_job_status_cleanup(&st);
out:
    for (int i = 0; i < o->n_prompts; i++)
        weft_free(blobs[i]);
    weft_client_close(c);
    return rc;
}

int weft_cmd_run(struct weft_cli *cli)
{
    struct run_opts o;
    int prc = parse(cli, &o);
    if (prc)
        return prc > 0 ? 0 : 2;
    char self[4096], secret[65], secret_var[100];
    if (weft_self_path(self, sizeof(self)) != 0 || weft_boot_new_challenge(secret) != WEFT_OK)
        return 1;
    const char *dot = strrchr(o.out, '.');
    if (dot && strcmp(dot, ".png") == 0 ? weft_cli_out_file_ready("run", o.out) != 0
                                         : weft_cli_out_dir_ready("run", o.out) != 0)
        return 1;
    snprintf(secret_var, sizeof(secret_var), "WEFT_CLUSTER_SECRET=%s", secret);
    /* the children's environment: ours with this run's secret (never on a command line) */
    char **env = weft_env_edit("WEFT_CLUSTER_SECRET=", secret_var);
    const char *tmp = getenv("TMPDIR");
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/weft_run_XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    struct sigaction sa = {.sa_handler = on_run_signal}, old_int, old_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    if (!env || !mkdtemp(dir)) {
        WEFT_LOG_ERROR("run", "cannot create a temporary folder: %s", strerror(errno));
        weft_free(env);
        return 1;
    }
    const char *model = o.model ? o.model
                                : cli->conf.model.path[0] ? cli->conf.model.path
                                                          : WEFT_DEFAULT_MODEL;
    char a_port[1100], w_port[1100], journal[1100], outdir[1100];
    snprintf(a_port, sizeof(a_port), "%s/api", dir);
    snprintf(w_port, sizeof(w_port), "%s/workers", dir);
    snprintf(journal, sizeof(journal), "--api.journal_dir=%s/journal", dir);
    snprintf(outdir, sizeof(outdir), "--api.output_dir=%s/out", dir);
    char tp[48], uly[48], ring[48], cfg[48], dp[48], threads[48], workers[48];
    snprintf(tp, sizeof(tp), "--parallel.tp_degree=%lld", o.tp);
    snprintf(uly, sizeof(uly), "--parallel.ulysses_degree=%lld", o.uly);
    snprintf(ring, sizeof(ring), "--parallel.ring_degree=%lld", o.ring);
    snprintf(cfg, sizeof(cfg), "--parallel.cfg_degree=%lld", o.cfg);
    snprintf(dp, sizeof(dp), "--parallel.dp_degree=%lld", o.dp);
    snprintf(workers, sizeof(workers), "--cluster.workers=%lld", o.np);
    /* a thread count given here is every worker's; without one the coordinator gives each
     * worker its share of the host's cores (coordinator/cluster/plan.c) */
    snprintf(threads, sizeof(threads), "--kernels.threads=%lld",
             (long long)cli->conf.kernels.threads);
    static const char *const strategies[] = {"none", "balanced", "auto"};
    const int si = cli->conf.device_map.strategy;
    char dm[64], mm[1100];
    snprintf(dm, sizeof(dm), "--device_map.strategy=%s",
             o.device_map ? o.device_map : strategies[si >= 0 && si < 3 ? si : 0]);
    snprintf(mm, sizeof(mm), "--device_map.max_memory=%s",
             o.max_memory ? o.max_memory : cli->conf.device_map.max_memory);
    char *cargv[] = {self, "serve", "--runner", "cluster", "--model", (char *)model,
                     "--listen", "127.0.0.1:0", "--port-file", a_port, "--worker-port-file",
                     w_port, "--cluster.listen=127.0.0.1:0", journal, outdir, tp, uly, ring, cfg,
                     dp, workers, dm, mm, NULL};
    pid_t coord = spawn(cli, o.verbose, cargv, env), pids[MAX_RANKS] = {0};
    track_child(coord);
    int rc = 1;
    char api[300], wport[300];
    if (coord < 0 || wait_file(a_port, &coord, 60, api, sizeof(api)) ||
        wait_file(w_port, &coord, 60, wport, sizeof(wport)))
        goto out;
    for (long long i = 0; i < o.np; i++) {
        char *wargv[] = {self, "worker", "--coordinator", wport,
                         cli->conf.kernels.threads ? threads : NULL, NULL};
        if (run_signal || (pids[i] = spawn(cli, o.verbose, wargv, env)) < 0)
            goto out;
        track_child(pids[i]);
    }
    if (cli->conf.parallel.groups[0])
        WEFT_LOG_INFO("run", "%lld worker(s): groups %s, %s", o.np, cli->conf.parallel.groups,
                      model);
    else if (o.device_map || cli->conf.device_map.strategy)
        WEFT_LOG_INFO("run", "%lld worker(s): dp %lld replicas of %lld device_map devices, %s",
                      o.np, o.dp, o.np / o.dp, model);
    else
        WEFT_LOG_INFO("run", "%lld worker(s): dp %lld x cfg %lld x ring %lld x ulysses %lld x "
                      "tp %lld, %s", o.np, o.dp, o.cfg, o.ring, o.uly, o.tp, model);
    rc = run_signal ? 1 : submit_and_fetch(&o, api);
out:
    (void)stop_child(coord, 30); /* it tells its workers to exit */
    for (long long i = 0; i < o.np; i++) {
        const long kib = stop_child(pids[i], 10);
        if (kib > 0) /* what a worker of this layout holds (weft plan --auto predicts it) */
            WEFT_LOG_INFO("run", "worker %lld: peak resident memory %.1f MiB", i,
                          (double)kib / 1024.0);
    }
    weft_remove_tree(dir);
    weft_free(env);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (run_signal) {
        WEFT_LOG_ERROR("run", "%s: stopped the coordinator and its workers",
                       strsignal(run_signal));
        return 128 + run_signal;
    }
    return rc;
}
