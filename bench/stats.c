/* Rounds, medians, spreads, paired ratios and the load average for every benchmark (stats.h). */
#include "bench/stats.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void weft_bench_init(struct weft_bench *b, const char *name)
{
    *b = (struct weft_bench){.name = name, .rounds = WEFT_BENCH_MIN_ROUNDS, .warmup = 1};
    for (int k = 0; k < 3; k++)
        b->load_before[k] = b->load_after[k] = -1;
}

/* "--name=value" or "--name value": the value, *i moved past it; NULL when argv[*i] is not
 * --name. A missing value is "" (rejected by the parser). */
static const char *opt_value(int argc, char **argv, int *i, const char *name)
{
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0)
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n] != '\0')
        return NULL;
    if (*i + 1 >= argc)
        return "";
    return argv[++*i];
}

static int parse_count(const char *opt, const char *v, int lo, int hi, int *out)
{
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        WEFT_LOG_ERROR("bench", "%s '%s': expected a whole number from %d to %d", opt, v, lo, hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

int weft_bench_opt(struct weft_bench *b, int argc, char **argv, int *i)
{
    const char *v;
    if (strcmp(argv[*i], "--quick") == 0) {
        b->quick = true;
        return 1;
    }
    if (strcmp(argv[*i], "--json") == 0) {
        b->json = true;
        return 1;
    }
    if ((v = opt_value(argc, argv, i, "--rounds"))) {
        b->rounds_set = true;
        return parse_count("--rounds", v, 1, WEFT_BENCH_MAX_ROUNDS, &b->rounds) ? -1 : 1;
    }
    if ((v = opt_value(argc, argv, i, "--warmup")))
        return parse_count("--warmup", v, 0, WEFT_BENCH_MAX_ROUNDS, &b->warmup) ? -1 : 1;
    if (opt_value(argc, argv, i, "--repeats")) {
        WEFT_LOG_ERROR("bench", "--repeats is now --rounds (at least %d, interleaved)",
                       WEFT_BENCH_MIN_ROUNDS);
        return -1;
    }
    return 0;
}

int weft_bench_dtype_arg(const char *v, enum weft_dtype *out)
{
    if (strcmp(v, "f32") != 0 && strcmp(v, "bf16") != 0) {
        WEFT_LOG_ERROR("bench", "--dtype is f32 or bf16, not '%s'", v);
        return -1;
    }
    *out = v[0] == 'b' ? WEFT_DTYPE_BF16 : WEFT_DTYPE_F32;
    return 0;
}

void weft_bench_opt_help(FILE *out)
{
    fprintf(out,
        "Sampling (every bench): --rounds N (default %d, at least %d) rounds after --warmup N\n"
        "(default 1) discarded ones; each round runs every side once, in turn, so the sides\n"
        "share the machine's moments. Figures: median [min-max] of the rounds (and the\n"
        "interquartile range from %d rounds); a ratio is the median [min-max] of the rounds'\n"
        "paired ratios, \"no difference\" when the two sides' ranges overlap. The load average\n"
        "before and after is printed. --quick: tiny sizes and %d rounds (tests only; no verdict\n"
        "below %d rounds). --json: the same as one JSON document (bench/README.md).\n",
        WEFT_BENCH_MIN_ROUNDS, WEFT_BENCH_MIN_ROUNDS, WEFT_BENCH_IQR_ROUNDS,
        WEFT_BENCH_QUICK_ROUNDS, WEFT_BENCH_MIN_ROUNDS);
}

void weft_bench_loadavg(double out[3])
{
    out[0] = out[1] = out[2] = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f)
        return;
    double l[3];
    if (fscanf(f, "%lf %lf %lf", &l[0], &l[1], &l[2]) == 3)
        memcpy(out, l, sizeof(l));
    (void)fclose(f); /* read only */
}

int weft_bench_begin(struct weft_bench *b)
{
    if (b->quick && !b->rounds_set)
        b->rounds = WEFT_BENCH_QUICK_ROUNDS;
    if (!b->quick && b->rounds < WEFT_BENCH_MIN_ROUNDS) {
        WEFT_LOG_ERROR("bench", "--rounds %d: at least %d (fewer only with --quick, for tests)",
                       b->rounds, WEFT_BENCH_MIN_ROUNDS);
        return -1;
    }
    time_t t = time(NULL);
    struct tm tm;
    if (!gmtime_r(&t, &tm) || !strftime(b->date, sizeof(b->date), "%Y-%m-%d %H:%M:%S UTC", &tm))
        snprintf(b->date, sizeof(b->date), "?");
    weft_bench_loadavg(b->load_before);
    b->t0 = now_s();
    return 0;
}

void weft_bench_round_note(struct weft_bench *b, int round)
{
    if (round >= 0) {
        double l[3];
        weft_bench_loadavg(l);
        weft_bench_series_set(&b->load1, b->load1.n, l[0] >= 0 ? l[0] : NAN);
    }
    if (round < 0)
        fprintf(stderr, "%s: warm-up round %d of %d\n", b->name,
                round + b->warmup + 1, b->warmup);
    else
        fprintf(stderr, "%s: round %d of %d\n", b->name, round + 1, b->rounds);
}

void weft_bench_end(struct weft_bench *b)
{
    weft_bench_loadavg(b->load_after);
    b->seconds = now_s() - b->t0;
}

void weft_bench_print_context(const struct weft_bench *b, FILE *out)
{
    fprintf(out, "# %s, %s, %d round%s after %d warm-up, sides interleaved%s\n",
            b->name, b->date, b->rounds, b->rounds == 1 ? "" : "s", b->warmup,
            b->quick ? " (--quick: tiny sizes, not figures to quote)" : "");
    char l1[96];
    fprintf(out, "# load average before %.2f %.2f %.2f, after %.2f %.2f %.2f; 1-minute load as "
            "the rounds began %s; %.0f s\n", b->load_before[0], b->load_before[1],
            b->load_before[2], b->load_after[0], b->load_after[1], b->load_after[2],
            weft_bench_fmt(&b->load1, 1.0, 2, l1, sizeof(l1)), b->seconds);
    fprintf(out, "# figures: median [min-max]%s of the rounds; ratios: of each round's pair\n",
            b->rounds >= WEFT_BENCH_IQR_ROUNDS ? " IQR q1-q3" : "");
}

static cJSON *load_json(const double l[3])
{
    cJSON *a = cJSON_CreateArray();
    for (int k = 0; k < 3; k++)
        cJSON_AddItemToArray(a, l[k] >= 0 ? cJSON_CreateNumber(l[k]) : cJSON_CreateNull());
    return a;
}

cJSON *weft_bench_json_context(const struct weft_bench *b)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "bench", b->name);
    cJSON_AddStringToObject(j, "date", b->date);
    cJSON_AddNumberToObject(j, "rounds", b->rounds);
    cJSON_AddNumberToObject(j, "warmup", b->warmup);
    cJSON_AddBoolToObject(j, "quick", b->quick);
    cJSON_AddItemToObject(j, "load_before", load_json(b->load_before));
    cJSON_AddItemToObject(j, "load_after", load_json(b->load_after));
    cJSON_AddItemToObject(j, "load_1min_rounds", weft_bench_json_fig(&b->load1, 1.0));
    cJSON_AddNumberToObject(j, "seconds", b->seconds);
    return j;
}

/* ---- figures ------------------------------------------------------------------------------ */

void weft_bench_series_set(struct weft_bench_series *s, int round, double v)
{
    if (round < 0 || round >= WEFT_BENCH_MAX_ROUNDS)
        return;
    for (int k = s->n; k < round; k++)
        s->v[k] = NAN;
    s->v[round] = v;
    if (round >= s->n)
        s->n = round + 1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The p-quantile of sorted x[0..n), linear between order statistics. */
static double quantile(const double *x, int n, double p)
{
    double h = (n - 1) * p;
    int lo = (int)floor(h);
    if (lo >= n - 1)
        return x[n - 1];
    return x[lo] + (h - lo) * (x[lo + 1] - x[lo]);
}

double weft_bench_quantile(double *x, int n, double p)
{
    if (n <= 0)
        return NAN;
    qsort(x, (size_t)n, sizeof(*x), cmp_double);
    return quantile(x, n, p);
}

int weft_bench_stats_of(const struct weft_bench_series *s, struct weft_bench_stats *st)
{
    double x[WEFT_BENCH_MAX_ROUNDS];
    int n = 0;
    for (int k = 0; k < s->n && k < WEFT_BENCH_MAX_ROUNDS; k++)
        if (!isnan(s->v[k]))
            x[n++] = s->v[k];
    *st = (struct weft_bench_stats){n, NAN, NAN, NAN, NAN, NAN};
    if (n == 0)
        return 0;
    qsort(x, (size_t)n, sizeof(*x), cmp_double);
    st->median = quantile(x, n, 0.5);
    st->min = x[0];
    st->max = x[n - 1];
    st->q1 = quantile(x, n, 0.25);
    st->q3 = quantile(x, n, 0.75);
    return n;
}

void weft_bench_compare(const struct weft_bench_series *a, const struct weft_bench_series *b,
                        struct weft_bench_cmp *c)
{
    memset(c, 0, sizeof(*c));
    double amin = INFINITY, amax = -INFINITY, bmin = INFINITY, bmax = -INFINITY;
    int n = a->n < b->n ? a->n : b->n;
    for (int k = 0; k < n; k++) {
        double x = a->v[k], y = b->v[k];
        if (isnan(x) || isnan(y) || y == 0) {
            weft_bench_series_set(&c->ratio, k, NAN);
            continue;
        }
        weft_bench_series_set(&c->ratio, k, x / y);
        amin = fmin(amin, x), amax = fmax(amax, x);
        bmin = fmin(bmin, y), bmax = fmax(bmax, y);
    }
    int pairs = weft_bench_stats_of(&c->ratio, &c->r);
    bool overlap = amin <= bmax && bmin <= amax;
    bool holds_one = c->r.min <= 1.0 && 1.0 <= c->r.max;
    if (pairs < WEFT_BENCH_MIN_ROUNDS)
        c->verdict = WEFT_BENCH_FEW;
    else if (overlap || holds_one)
        c->verdict = WEFT_BENCH_SAME;
    else
        c->verdict = c->r.min > 1.0 ? WEFT_BENCH_HIGHER : WEFT_BENCH_LOWER;
}

const char *weft_bench_verdict_str(const struct weft_bench_cmp *c, const char *higher,
                                   const char *lower)
{
    switch (c->verdict) {
    case WEFT_BENCH_HIGHER:
        return higher;
    case WEFT_BENCH_LOWER:
        return lower;
    case WEFT_BENCH_SAME:
        return "no difference";
    default:
        return "too few rounds";
    }
}

static char *fmt_stats(const struct weft_bench_stats *st, double scale, int decimals, char *buf,
                       size_t len)
{
    int d = decimals;
    if (st->n == 0)
        snprintf(buf, len, "-");
    else if (st->n == 1)
        snprintf(buf, len, "%.*f (1 round)", d, st->median * scale);
    else if (st->n < WEFT_BENCH_IQR_ROUNDS)
        snprintf(buf, len, "%.*f [%.*f-%.*f]", d, st->median * scale, d, st->min * scale, d,
                 st->max * scale);
    else
        snprintf(buf, len, "%.*f [%.*f-%.*f] IQR %.*f-%.*f", d, st->median * scale, d,
                 st->min * scale, d, st->max * scale, d, st->q1 * scale, d, st->q3 * scale);
    return buf;
}

char *weft_bench_fmt(const struct weft_bench_series *s, double scale, int decimals, char *buf,
                     size_t len)
{
    struct weft_bench_stats st;
    weft_bench_stats_of(s, &st);
    return fmt_stats(&st, scale, decimals, buf, len);
}

char *weft_bench_fmt_cmp(const struct weft_bench_cmp *c, int decimals, char *buf, size_t len)
{
    return fmt_stats(&c->r, 1.0, decimals, buf, len);
}

static void add_num(cJSON *o, const char *key, double v)
{
    cJSON_AddItemToObject(o, key, isnan(v) ? cJSON_CreateNull() : cJSON_CreateNumber(v));
}

cJSON *weft_bench_json_fig(const struct weft_bench_series *s, double scale)
{
    struct weft_bench_stats st;
    weft_bench_stats_of(s, &st);
    cJSON *o = cJSON_CreateObject();
    add_num(o, "median", st.median * scale);
    add_num(o, "min", st.min * scale);
    add_num(o, "max", st.max * scale);
    add_num(o, "q1", st.q1 * scale);
    add_num(o, "q3", st.q3 * scale);
    cJSON_AddNumberToObject(o, "n", st.n);
    cJSON *a = cJSON_AddArrayToObject(o, "samples");
    for (int k = 0; k < s->n; k++)
        cJSON_AddItemToArray(a, isnan(s->v[k]) ? cJSON_CreateNull()
                                               : cJSON_CreateNumber(s->v[k] * scale));
    return o;
}

cJSON *weft_bench_json_cmp(const struct weft_bench_cmp *c, const char *higher, const char *lower)
{
    cJSON *o = weft_bench_json_fig(&c->ratio, 1.0);
    cJSON_AddStringToObject(o, "verdict", weft_bench_verdict_str(c, higher, lower));
    return o;
}

void weft_bench_json_print(cJSON *root)
{
    char *text = cJSON_Print(root);
    printf("%s\n", text ? text : "{}");
    cJSON_free(text);
    cJSON_Delete(root);
}
