/* How every benchmark samples and reports (`weft bench <what>`, bench/api_load.c): rounds after a
 * warm-up, the sides a bench compares interleaved within each round (A B A B ..., never all A
 * then all B), each figure as its median with the spread of its rounds, ratios from the paired
 * rounds, "no difference" when the sides' ranges overlap, and the load average before and after.
 *
 * A bench:
 *
 *     struct weft_bench b;
 *     weft_bench_init(&b, "weft bench cp");      its options: --rounds --warmup --quick --json
 *     for (i = 1; i < argc; i++) if (weft_bench_opt(&b, argc, argv, &i)) ...
 *     weft_bench_begin(&b);                      checks the options, date and load before
 *     for (r = -b.warmup; r < b.rounds; r++) {   rounds below 0 are the warm-up
 *         weft_bench_round_note(&b, r);
 *         a = side_a(); b = side_b();            every side once per round
 *         if (r >= 0) weft_bench_series_set(&A, r, a), weft_bench_series_set(&B, r, b);
 *     }
 *     weft_bench_end(&b);                        load after
 *     weft_bench_compare(&A, &B, &cmp);          the ratio A/B of each round
 *
 * then weft_bench_fmt / weft_bench_fmt_cmp / weft_bench_verdict for the table and
 * weft_bench_json_* for --json (the schema is in bench/README.md). Not thread-safe; option
 * errors are logged (WEFT_LOG_ERROR), tables are the caller's. */
#ifndef WEFT_BENCH_STATS_H
#define WEFT_BENCH_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <cJSON.h>

#include "common/dtype.h"

#define WEFT_BENCH_MIN_ROUNDS 5  /* without --quick; also the fewest pairs for a verdict */
#define WEFT_BENCH_MAX_ROUNDS 64
#define WEFT_BENCH_IQR_ROUNDS 8  /* the interquartile range is printed from this many rounds */
#define WEFT_BENCH_QUICK_ROUNDS 2

/* One figure's samples in round order. NaN: no sample in that round (the side failed). */
struct weft_bench_series {
    int n; /* rounds recorded: the highest round set + 1 */
    double v[WEFT_BENCH_MAX_ROUNDS];
};

/* Order statistics of a series' samples (NaNs left out). Quartiles interpolate linearly
 * between order statistics (numpy's default); the median is the usual one. */
struct weft_bench_stats {
    int n; /* samples */
    double median, min, max, q1, q3;
};

enum weft_bench_verdict {
    WEFT_BENCH_SAME,   /* "no difference": the ranges overlap or the ratios' range holds 1.0 */
    WEFT_BENCH_HIGHER, /* a above b in every round, and a's lowest above b's highest */
    WEFT_BENCH_LOWER,  /* the other way */
    WEFT_BENCH_FEW,    /* fewer than WEFT_BENCH_MIN_ROUNDS paired rounds: no verdict */
};

/* a against b, round by round. */
struct weft_bench_cmp {
    struct weft_bench_series ratio; /* a / b in each round where both have a sample */
    struct weft_bench_stats r;      /* of ratio */
    enum weft_bench_verdict verdict;
};

/* One run of a bench: its sampling options and what was measured around it. */
struct weft_bench {
    const char *name; /* the program: "weft bench cp" */
    int rounds, warmup;
    bool quick, json;
    bool rounds_set; /* --rounds given (else the default: 5, or 2 with --quick) */
    char date[40];   /* UTC, at weft_bench_begin */
    double load_before[3], load_after[3]; /* /proc/loadavg: 1, 5, 15 minutes; -1: unknown */
    struct weft_bench_series load1; /* the 1-minute load average as each round began */
    double t0, seconds; /* wall time from begin to end */
};

void weft_bench_init(struct weft_bench *b, const char *name);
/* argv[*i] when it is one of the common options (--rounds N, --warmup N, --quick, --json;
 * "--opt=value" or "--opt value", *i moved past the value): 1. Not one: 0. A bad value: -1,
 * logged. */
int weft_bench_opt(struct weft_bench *b, int argc, char **argv, int *i);
/* The value of --dtype for the benches that compare one: f32 or bf16 into *out, 0; else -1,
 * logged. */
int weft_bench_dtype_arg(const char *v, enum weft_dtype *out);
/* The help text of the common options, for a bench's --help. */
void weft_bench_opt_help(FILE *out);
/* Checks the options (at least WEFT_BENCH_MIN_ROUNDS rounds without --quick), records the date
 * and the load average. Returns 0, or -1 (logged). */
int weft_bench_begin(struct weft_bench *b);
/* "weft bench cp: round 3 of 5" (or "warm-up round 1 of 1") on stderr; a round (not a
 * warm-up) also records the 1-minute load average in load1. */
void weft_bench_round_note(struct weft_bench *b, int round);
/* Records the load average after the run and the wall time. */
void weft_bench_end(struct weft_bench *b);

/* The system's load averages (1, 5, 15 minutes); -1 each when unknown. */
void weft_bench_loadavg(double out[3]);

/* "# weft bench cp, 2025-01-01 10:00:00 UTC, 5 rounds after 1 warm-up, sides interleaved\n# load
 * average before 0.58 0.44 0.73, after 1.92 1.10 0.85 ...": the lines above a table. */
void weft_bench_print_context(const struct weft_bench *b, FILE *out);
/* {"bench", "date", "rounds", "warmup", "quick", "load_before", "load_after", "load_1min_rounds"
 * (a figure: the 1-minute load average as each round began), "seconds"}: the
 * root of a bench's --json document, to which it adds its own "config" and "rows". */
cJSON *weft_bench_json_context(const struct weft_bench *b);

/* Sets round's sample (rounds skipped before it become NaN); round outside [0, MAX): ignored. */
void weft_bench_series_set(struct weft_bench_series *s, int round, double v);
/* Its statistics; returns the number of samples (0: *st is all NaN). */
int weft_bench_stats_of(const struct weft_bench_series *s, struct weft_bench_stats *st);
/* a / b round by round and the verdict. Rounds where either lacks a sample, or b is 0, are
 * left out. */
void weft_bench_compare(const struct weft_bench_series *a, const struct weft_bench_series *b,
                        struct weft_bench_cmp *c);
/* Words for the verdict: higher or lower (what a above or below b means, "faster", ...), "no
 * difference" or "too few rounds". */
const char *weft_bench_verdict_str(const struct weft_bench_cmp *c, const char *higher,
                                   const char *lower);

/* "439.3 [436.4-445.3]", from 8 rounds "439.3 [436.4-445.3] IQR 437.0-441.2", one sample
 * "439.3 (1 round)", none "-"; scale multiplies every value (units). Returns buf. */
char *weft_bench_fmt(const struct weft_bench_series *s, double scale, int decimals, char *buf,
                     size_t len);
/* The paired ratios' "1.86 [1.80-1.90]" (same forms). Returns buf. */
char *weft_bench_fmt_cmp(const struct weft_bench_cmp *c, int decimals, char *buf, size_t len);

/* {"median", "min", "max", "q1", "q3", "n", "samples": [...]} of s x scale; a missing sample
 * is null in samples, and with no sample at all the statistics are null. */
cJSON *weft_bench_json_fig(const struct weft_bench_series *s, double scale);
/* The ratios' figure with "verdict": weft_bench_verdict_str(c, higher, lower). */
cJSON *weft_bench_json_cmp(const struct weft_bench_cmp *c, const char *higher, const char *lower);
/* The p-quantile (0..1) of x[0..n), linear between order statistics as the figures' are; x is
 * sorted in place. NAN when n is 0. */
double weft_bench_quantile(double *x, int n, double p);
/* The --json document root on stdout ("{}" when it cannot be printed), then freed. */
void weft_bench_json_print(cJSON *root);

#endif
