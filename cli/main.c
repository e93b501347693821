/* weft: entry point, common options and subcommand dispatch. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/alloc.h"
#include "common/log.h"
#include "kernels/kernels.h"
#include "model/job.h"

extern char **environ;

struct command {
    const char *name;
    int (*run)(struct weft_cli *cli);
    const char *summary;
};

static const struct command commands[] = {
    {"inspect", weft_cmd_inspect, "show a checkpoint: class, config, parameters, tensor table"},
    {"generate", weft_cmd_generate, "run a pipeline on this machine: write a PNG (or latents)"},
    {"tokenize", weft_cmd_tokenize, "the token ids a model's tokenizers make of a prompt"},
    {"run", weft_cmd_run, "a coordinator, N workers and one job on this machine; writes PNGs"},
    {"worker", weft_cmd_worker, "join a coordinator as one device and run what it assigns"},
    {"plan", weft_cmd_plan, "show how a parallel layout splits a model (loads nothing)"},
    {"serve", weft_cmd_serve, "serve the job API (HTTP + JSON) until SIGINT/SIGTERM"},
    {"submit", weft_cmd_submit, "submit a job to a server, follow it, download its PNGs"},
    {"status", weft_cmd_status, "show a job, or the cluster and its queue"},
    {"cancel", weft_cmd_cancel, "cancel a job (queued: removed; running: next step)"},
    {"bench", weft_cmd_bench, "benchmarks: `weft bench --help`"},
};
#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *out, const char *prog)
{
    fprintf(out,
            "usage: %s [common options] <command> [options]\n"
            "\n"
            "Distributed inference for diffusion transformers.\n"
            "\n"
            "commands:\n",
            prog);
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out,
            "\n"
            "common options (before or after the command):\n"
            "  --config=FILE, -c FILE INI configuration (default: $WEFT_CONFIG, else\n"
            "                         $XDG_CONFIG_HOME/weft/weft.ini, else /etc/weft/weft.ini,\n"
            "                         the first that exists; none is fine)\n"
            "  --SECTION.KEY=VALUE    override one configuration key\n"
            "  --dump-config          print the effective configuration and exit\n"
            "  --dump-config --defaults   print the default configuration (the example file)\n"
            "  --help, -h             this help; `%s <command> --help` for a command\n"
            "  --version, -V          print the version\n"
            "\n"
            "Configuration precedence: default < INI < WEFT_<SECTION>_<KEY> < --section.key=value.\n",
            prog);
}

const char *weft_cli_default_model(void)
{
    struct stat sb;
    return stat(WEFT_SOURCE_MODEL "/model_index.json", &sb) == 0 ? WEFT_SOURCE_MODEL
                                                                 : WEFT_INSTALLED_MODEL;
}

/* The last argument that named an option but had no value after it (the command line's end),
 * for weft_cli_unexpected's message. */
static const char *no_value;

const char *weft_cli_opt_value(int argc, char **argv, int *i, const char *name)
{
    size_t n = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, n) != 0)
        return NULL;
    if (a[n] == '=')
        return a + n + 1;
    if (a[n] == '\0' && *i + 1 < argc && argv[*i + 1]) {
        (*i)++;
        return argv[*i];
    }
    if (a[n] == '\0')
        no_value = a;
    return NULL;
}

void weft_cli_unexpected(const char *sub, const char *extra, const char *cmd, const char *arg)
{
    if (arg == no_value)
        WEFT_LOG_ERROR(sub, "%s needs a value (see `%s --help`)", arg, cmd);
    else
        WEFT_LOG_ERROR(sub, "unexpected argument '%s'%s%s (see `%s --help`)", arg,
                       extra[0] ? " " : "", extra, cmd);
}

int weft_cli_parse_int(const char *opt, const char *v, long long lo, long long hi,
                       long long *out)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        WEFT_LOG_ERROR("cli", "%s '%s': expected an integer in [%lld, %lld]", opt, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

int weft_cli_int_opts(int argc, char **argv, int *i, size_t n, const char *const *names,
                      const long long *lo, const long long *hi, long long *const *fields)
{
    for (size_t k = 0; k < n; k++) {
        const char *v = weft_cli_opt_value(argc, argv, i, names[k]);
        if (v)
            return weft_cli_parse_int(names[k], v, lo[k], hi[k], fields[k]) == 0 ? 1 : -1;
    }
    return 0;
}

int weft_cli_wait_line(const char *path, pid_t *pid_p, double timeout_s,
                       const volatile sig_atomic_t *stop, char *out, size_t len)
{
    for (int tick = 0; tick < (int)(timeout_s * 20) && !(stop && *stop); tick++) {
        FILE *f = fopen(path, "r");
        if (f) {
            const char *got = fgets(out, (int)len, f);
            (void)fclose(f); /* read only */
            if (got && strchr(out, '\n')) {
                out[strcspn(out, "\r\n")] = '\0';
                return 0;
            }
        }
        if (waitpid(*pid_p, NULL, WNOHANG) == *pid_p) {
            *pid_p = -1;
            return -1;
        }
        usleep(50000);
    }
    return -2;
}

int weft_cli_parse_seed(const char *opt, const char *v, unsigned long long *out)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end || strspn(v, "0123456789") != strlen(v)) {
        WEFT_LOG_ERROR("cli", "%s '%s': expected an integer in [0, 18446744073709551615]", opt, v);
        return -1;
    }
    *out = x;
    return 0;
}

int weft_cli_parse_guidance(const char *opt, const char *v, double *out)
{
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || !isfinite(x) || x < 0 || x > WEFT_JOB_MAX_GUIDANCE) {
        WEFT_LOG_ERROR("cli", "%s '%s': expected a number in [0, %g]", opt, v,
                       WEFT_JOB_MAX_GUIDANCE);
        return -1;
    }
    *out = x;
    return 0;
}

int weft_cli_parse_int_list(const char *opt, const char *v, long long lo, long long hi, int *out,
                            int max)
{
    char item[32];
    int n = 0;
    for (const char *p = v;; p++) {
        size_t len = strcspn(p, ",");
        long long x;
        snprintf(item, sizeof(item), "%.*s", (int)(len < sizeof(item) ? len : sizeof(item) - 1), p);
        if (n == max || len >= sizeof(item) || weft_cli_parse_int(opt, item, lo, hi, &x) != 0) {
            if (n == max)
                WEFT_LOG_ERROR("cli", "%s '%s': at most %d values", opt, v, max);
            return -1;
        }
        out[n++] = (int)x;
        p += len;
        if (!*p)
            return n;
    }
}

bool weft_cli_ends_with(const char *s, const char *suffix)
{
    const size_t n = strlen(s), m = strlen(suffix);
    return n > m && strcmp(s + n - m, suffix) == 0;
}

bool weft_cli_is_help(const char *arg)
{
    return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0;
}

/* A --section.key=value override: "--" then a dotted name before any '='. */
static bool is_override(const char *arg)
{
    if (strncmp(arg, "--", 2) != 0)
        return false;
    const char *dot = strchr(arg + 2, '.'), *eq = strchr(arg + 2, '=');
    return dot && eq && dot < eq;
}

int main(int argc, char **argv)
{
    const char *prog = "weft";
    weft_log_set_style(WEFT_LOG_STYLE_SHORT);

    const char *config = NULL;
    bool dump = false, defaults = false;
    const char **overrides = weft_calloc((size_t)argc + 1, sizeof(*overrides));
    char **rest = weft_calloc((size_t)argc + 1, sizeof(*rest));
    if (!overrides || !rest) {
        fprintf(stderr, "weft: out of memory\n");
        return 1;
    }
    int n_over = 0, n_rest = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (!argv[i])
            break;
        if ((v = weft_cli_opt_value(argc, argv, &i, "--config")) ||
            (v = weft_cli_opt_value(argc, argv, &i, "-c")))
            config = v;
        else if (is_override(argv[i]))
            overrides[n_over++] = argv[i] + 2;
        else if (strcmp(argv[i], "--dump-config") == 0)
            dump = true;
        else if (strcmp(argv[i], "--defaults") == 0 && n_rest == 0)
            defaults = true;
        else
            rest[n_rest++] = argv[i];
    }

    int rc = 2;
    if (defaults && dump) {
        weft_conf_write_example(stdout);
        rc = 0;
        goto out;
    }
    struct weft_cli cli = {.prog = prog, .argc = n_rest, .argv = rest, .config = config,
                           .n_overrides = n_over, .overrides = overrides};
    if (weft_conf_load(&cli.conf, config, environ, n_over, overrides) != WEFT_OK)
        goto out; /* the error is logged with its file:line */
    weft_log_set_level((enum weft_log_level)cli.conf.log.level);
    weft_log_set_format((enum weft_log_format)cli.conf.log.format);
    if (dump) {
        weft_conf_dump(&cli.conf, stdout);
        rc = 0;
        goto out;
    }
    if (n_rest == 0) {
        usage(stderr, prog);
        goto out;
    }
    if (weft_cli_is_help(rest[0])) {
        usage(stdout, prog);
        rc = 0;
        goto out;
    }
    if (strcmp(rest[0], "--version") == 0 || strcmp(rest[0], "-V") == 0) {
        printf("weft %s\n", WEFT_VERSION);
        /* what the CPU backend runs here with this configuration */
        const struct weft_kernels *K;
        struct weft_kctx *kc;
        if (weft_kernels_cpu_create((int)cli.conf.kernels.threads, &K, &kc) == WEFT_OK) {
            char what[256];
            (void)K->set_compute(kc, (enum weft_dtype)cli.conf.model.dtype);
            K->describe(kc, what, sizeof(what));
            printf("cpu backend: %s\n", what);
            weft_kernels_cpu_destroy(kc);
        }
        /* and the GPUs this process could compute on */
        const struct weft_device cuda0 = {WEFT_DEVICE_CUDA, 0};
        char why[300];
        const int n_gpu = weft_gpu_count();
        if (n_gpu == 0) {
            if (weft_kernels_create(&cuda0, 0, &K, &kc, why, sizeof(why)) == WEFT_OK)
                K->destroy(kc); /* not reached without a GPU: why says what is missing */
            printf("cuda backend: %s\n", why);
        }
        for (int g = 0; g < n_gpu; g++) {
            struct weft_gpu_info info;
            if (weft_gpu_info(g, &info) == WEFT_OK)
                printf("cuda:%d: %s, %.1f GiB, %d SMs, sm_%d%d\n", g, info.name,
                       (double)info.memory / (double)(1ull << 30), info.sm_count, info.cc_major,
                       info.cc_minor);
        }
        rc = 0;
        goto out;
    }
    for (size_t i = 0; i < N_COMMANDS; i++) {
        if (strcmp(rest[0], commands[i].name) == 0) {
            rc = commands[i].run(&cli);
            goto out;
        }
    }
    WEFT_LOG_ERROR("cli", "unknown command '%s' (try `%s --help`)", rest[0], prog);
out:
    weft_free(overrides);
    weft_free(rest);
    return rc;
}
