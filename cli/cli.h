/* The weft command line: one binary, one function per subcommand. */
#ifndef WEFT_CLI_CLI_H
#define WEFT_CLI_CLI_H

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

#include "conf/conf.h"

/* What every subcommand receives: the loaded configuration and its own arguments (options
 * common to all commands, such as --config and --section.key=value, already removed). */
struct weft_cli {
    const char *prog;
    struct weft_conf conf;
    int argc;
    char **argv; /* argv[0] is the subcommand name */
    /* the common options as given, for commands that start other weft processes */
    const char *config;            /* --config FILE, or NULL */
    int n_overrides;
    const char *const *overrides; /* "section.key=value", in order */
};

int weft_cmd_inspect(struct weft_cli *cli);
int weft_cmd_generate(struct weft_cli *cli);
int weft_cmd_tokenize(struct weft_cli *cli);
int weft_cmd_bench(struct weft_cli *cli);
int weft_cmd_plan(struct weft_cli *cli);
/* weft plan --auto (cli/plan_auto.c), and its lines of weft plan's help */
int weft_cmd_plan_auto(struct weft_cli *cli, const char *default_dir);
void weft_plan_auto_help(FILE *out);
void weft_plan_auto_help_text(FILE *out);
int weft_cmd_worker(struct weft_cli *cli);
int weft_cmd_run(struct weft_cli *cli);
int weft_cmd_serve(struct weft_cli *cli);
int weft_cmd_submit(struct weft_cli *cli);
int weft_cmd_status(struct weft_cli *cli);
int weft_cmd_cancel(struct weft_cli *cli);
int weft_bench_flux(struct weft_cli *cli);
int weft_bench_flux_run(struct weft_cli *cli);
int weft_bench_load(struct weft_cli *cli);
int weft_bench_load_run(struct weft_cli *cli);
int weft_bench_cp(struct weft_cli *cli);
int weft_bench_cp_run(struct weft_cli *cli);
int weft_bench_comm(struct weft_cli *cli);
int weft_bench_vae(struct weft_cli *cli);
int weft_bench_gemm(struct weft_cli *cli);
int weft_bench_generate(struct weft_cli *cli);
int weft_bench_plan(struct weft_cli *cli);
int weft_bench_serve(struct weft_cli *cli);
int weft_bench_vae_run(struct weft_cli *cli);
int weft_bench_text(struct weft_cli *cli);
int weft_bench_text_run(struct weft_cli *cli);

/* The embedded default model: the source tree's models/flux-tiny while it is there (a build
 * folder), else the installed copy (share/weft/models/flux-tiny). */
const char *weft_cli_default_model(void);
#define WEFT_DEFAULT_MODEL weft_cli_default_model()

/* Option helpers: "--name=value" or "--name value". Return the value or NULL. */
const char *weft_cli_opt_value(int argc, char **argv, int *i, const char *name);
bool weft_cli_is_help(const char *arg);
/* s is longer than suffix and ends with it ("x.png", not ".png"). */
bool weft_cli_ends_with(const char *s, const char *suffix);
/* The error for an argument a command does not take: "ARG needs a value" when it named an
 * option at the command line's end (weft_cli_opt_value saw it), else "unexpected argument
 * 'ARG' EXTRA"; both point at `CMD --help`. sub: the log's subsystem. */
void weft_cli_unexpected(const char *sub, const char *extra, const char *cmd, const char *arg);
/* --out DIR of submit and run: created if missing, a writable folder; else -1 (logged). */
int weft_cli_out_dir_ready(const char *cmd, const char *dir);
/* --out FILE of generate and run: its folder exists and takes files, and FILE is not something
 * else already (a folder); else -1 (logged). Checked before any work. */
int weft_cli_out_file_ready(const char *cmd, const char *path);
/* v as a whole integer in [lo, hi] into *out; else -1 with an error naming opt and v. */
int weft_cli_parse_int(const char *opt, const char *v, long long lo, long long hi,
                       long long *out);
/* argv[*i] as one of the n integer options names[k] (weft_cli_opt_value's forms, *i moved past
 * a separate value), a whole number in [lo[k], hi[k]] into *fields[k]: 1 taken, 0 none of
 * them, -1 a bad value (logged). */
int weft_cli_int_opts(int argc, char **argv, int *i, size_t n, const char *const *names,
                      const long long *lo, const long long *hi, long long *const *fields);
/* The first line of a file process *pid_p writes (a port file) into out, looked for every 50 ms
 * for up to timeout_s or until *stop is non-zero (stop may be NULL): 0 found; -1 the process
 * exited first (reaped here, *pid_p set to -1); -2 not within the time. Logs nothing. */
int weft_cli_wait_line(const char *path, pid_t *pid_p, double timeout_s,
                       const volatile sig_atomic_t *stop, char *out, size_t len);
/* A seed: a decimal integer in [0, 2^64 - 1]; else -1 with an error. */
int weft_cli_parse_seed(const char *opt, const char *v, unsigned long long *out);
/* A guidance scale: a finite number in [0, 1000]; else -1 with an error. */
int weft_cli_parse_guidance(const char *opt, const char *v, double *out);
/* "2,4,8": 1 to max integers in [lo, hi]; their count, or -1 with an error. */
int weft_cli_parse_int_list(const char *opt, const char *v, long long lo, long long hi, int *out,
                            int max);

#endif
