/* Every benchmark runs tiny (--quick) and reports as bench/README.md documents: the --json
 * document's context (date, rounds, warm-up, load average before and after), every figure an
 * object {median, min, max, q1, q3, n, samples} with one sample per round, ratios with a verdict
 * (never a winner from 2 rounds), the warm-up round before the rounds, and fewer than 5 rounds
 * refused without --quick. The figures themselves are not checked: timings belong in bench/.
 * usage: test_bench WEFT_BINARY WEFT_API_LOAD_BINARY */
#include <cJSON.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"

extern char **environ;

static char out_path[256], err_path[256];

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    CHECK(f);
    char *buf = calloc(1, 1 << 22);
    CHECK(buf);
    size_t got = fread(buf, 1, (1 << 22) - 1, f);
    buf[got] = '\0';
    (void)fclose(f);
    return buf;
}

/* Run argv (NULL-terminated); stdout and stderr land in files. Returns the exit status. */
static int run(char *const *argv, char **out_p, char **err_p)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    CHECK(posix_spawn(&pid, argv[0], &fa, NULL, argv, environ) == 0);
    posix_spawn_file_actions_destroy(&fa);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    *out_p = slurp(out_path);
    *err_p = slurp(err_path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

struct found {
    int figures, ratios, verdicts_few;
};

/* Every object with "samples" is a figure of the documented form, with at most rounds samples;
 * every one with "verdict" is a ratio. */
static void walk(const cJSON *j, int rounds, struct found *f)
{
    if (cJSON_IsObject(j) && cJSON_GetObjectItemCaseSensitive(j, "samples")) {
        static const char *const keys[] = {"median", "min", "max", "q1", "q3"};
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(j, "n");
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "samples");
        CHECK(cJSON_IsNumber(n) && cJSON_IsArray(s));
        CHECK(cJSON_GetArraySize(s) <= rounds && n->valueint <= cJSON_GetArraySize(s));
        for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, keys[k]);
            CHECK(v && (cJSON_IsNumber(v) || (cJSON_IsNull(v) && n->valueint == 0)));
        }
        if (n->valueint > 0) {
            double lo = cJSON_GetObjectItemCaseSensitive(j, "min")->valuedouble;
            double med = cJSON_GetObjectItemCaseSensitive(j, "median")->valuedouble;
            double hi = cJSON_GetObjectItemCaseSensitive(j, "max")->valuedouble;
            CHECK(lo <= med && med <= hi);
        }
        f->figures++;
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "verdict");
        if (v) {
            CHECK(cJSON_IsString(v));
            f->ratios++;
            /* 2 rounds: never a winner */
            CHECK(!strcmp(v->valuestring, "too few rounds"));
            f->verdicts_few++;
        }
        return;
    }
    /* the context's load_1min_rounds has a sample per round of every part of a bench */
    for (const cJSON *c = j ? j->child : NULL; c; c = c->next)
        if (!c->string || strcmp(c->string, "load_1min_rounds") != 0)
            walk(c, rounds, f);
}

/* A bench's --quick --json run: exit 0, the context, figures (and ratios when want_ratios),
 * the warm-up round reported before round 1 on stderr. */
static cJSON *bench_json(char *const *argv, const char *name, bool want_ratios)
{
    char *out, *err;
    int rc = run(argv, &out, &err);
    if (rc != 0)
        fprintf(stderr, "%s exited %d:\n%s\n", name, rc, err);
    CHECK_EQ(rc, 0);
    cJSON *j = cJSON_Parse(out);
    if (!j)
        fprintf(stderr, "%s: not JSON:\n%.2000s\n", name, out);
    CHECK(j);
    CHECK(!strcmp(cJSON_GetObjectItemCaseSensitive(j, "bench")->valuestring, name));
    CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "date")));
    CHECK_EQ(cJSON_GetObjectItemCaseSensitive(j, "rounds")->valueint, 2);
    CHECK_EQ(cJSON_GetObjectItemCaseSensitive(j, "warmup")->valueint, 1);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "quick")));
    for (int k = 0; k < 2; k++) {
        const cJSON *l = cJSON_GetObjectItemCaseSensitive(j, k ? "load_after" : "load_before");
        CHECK(cJSON_GetArraySize(l) == 3 && cJSON_IsNumber(cJSON_GetArrayItem(l, 0)));
    }
    const cJSON *l1 = cJSON_GetObjectItemCaseSensitive(j, "load_1min_rounds");
    CHECK(l1 && cJSON_GetObjectItemCaseSensitive(l1, "n")->valueint >= 2);
    struct found f = {0};
    walk(j, 2, &f);
    if (f.figures == 0 || (want_ratios && f.ratios == 0))
        fprintf(stderr, "%s: %d figures, %d ratios in\n%.2000s\n", name, f.figures, f.ratios, out);
    CHECK(f.figures > 0);
    CHECK(!want_ratios || f.ratios > 0);
    const char *warm = strstr(err, "warm-up round 1 of 1"), *r1 = strstr(err, "round 1 of 2");
    const char *r2 = strstr(err, "round 2 of 2");
    CHECK(warm && r1 && r2 && warm < r1 && r1 < r2);
    printf("%s: %d figures, %d ratios\n", name, f.figures, f.ratios);
    free(out);
    free(err);
    return j;
}

static void check_bench(char *const *argv, const char *name, bool want_ratios)
{
    cJSON_Delete(bench_json(argv, name, want_ratios));
}

/* weft bench plan: every layout's predicted and measured memory and step time, the two
 * rankings a permutation each, the calibration layout's prediction its own measurement. */
static void check_plan(char *const *argv)
{
    cJSON *j = bench_json(argv, "weft bench plan", false);
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(j, "rows"), *e;
    CHECK_EQ(cJSON_GetArraySize(rows), 5);
    int seen_p = 0, seen_m = 0;
    cJSON_ArrayForEach(e, rows)
    {
        const cJSON *ps = cJSON_GetObjectItemCaseSensitive(e, "predicted_step_seconds");
        const cJSON *ms = cJSON_GetObjectItemCaseSensitive(e, "measured_step_seconds");
        const double pm = cJSON_GetObjectItemCaseSensitive(ps, "median")->valuedouble;
        const double mm = cJSON_GetObjectItemCaseSensitive(ms, "median")->valuedouble;
        CHECK(pm > 0 && mm > 0);
        if (e == rows->child) /* one device: the calibration */
            CHECK(fabs(pm - mm) <= 1e-9 + 1e-6 * mm);
        const int pr = cJSON_GetObjectItemCaseSensitive(e, "predicted_rank")->valueint;
        const int mr = cJSON_GetObjectItemCaseSensitive(e, "measured_rank")->valueint;
        CHECK(pr >= 1 && pr <= 5 && mr >= 1 && mr <= 5);
        seen_p |= 1 << pr, seen_m |= 1 << mr;
    }
    CHECK(seen_p == 0x3e && seen_m == 0x3e);
    CHECK(cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(j, "rankings_agree")));
    cJSON_Delete(j);
}

/* weft bench serve --goal throughput: the two auto sides first, each fixed side set against
 * both. */
static void check_serve(char *const *argv)
{
    cJSON *j = bench_json(argv, "weft bench serve", true);
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(j, "rows"), *e;
    int n = 0, against_both = 0;
    cJSON_ArrayForEach(e, rows)
    {
        const char *side = cJSON_GetObjectItemCaseSensitive(e, "side")->valuestring;
        if (n == 0)
            CHECK(strcmp(side, "auto") == 0);
        if (n == 1)
            CHECK(strcmp(side, "auto (throughput)") == 0);
        against_both += n >= 2 && cJSON_GetObjectItemCaseSensitive(e, "auto_p50_ratio") &&
                        cJSON_GetObjectItemCaseSensitive(e, "auto_goal_throughput_p50_ratio");
        n++;
    }
    CHECK(n >= 3 && against_both == n - 2);
    cJSON_Delete(j);
}

/* weft bench text: T5 per rank at tp 1 and 2, each tp 2 rank holding less than tp 1 (its
 * slices), both together more (the replicated parts twice); a bad --dtype is one line. */
static void check_text_per_rank(char *const *argv)
{
    char *out, *err;
    CHECK_EQ(run(argv, &out, &err), 0);
    cJSON *j = cJSON_Parse(out);
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(j, "t5_per_rank");
    CHECK(cJSON_GetArraySize(pr) == 3);
    double held[3];
    for (int i = 0; i < 3; i++) {
        const cJSON *e = cJSON_GetArrayItem(pr, i);
        CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "ok")));
        CHECK(cJSON_GetObjectItemCaseSensitive(e, "peak_rss_bytes")->valuedouble > 0);
        held[i] = cJSON_GetObjectItemCaseSensitive(e, "weight_bytes")->valuedouble;
    }
    printf("weft bench text: T5 weights per rank %.0f at tp 1, %.0f and %.0f at tp 2\n", held[0],
           held[1], held[2]);
    CHECK(held[1] == held[2] && held[1] < held[0] && held[1] + held[2] > held[0]);
    cJSON_Delete(j);
    free(out), free(err);
    char *bad[] = {argv[0], "bench", "text", "--dtype", "f16", NULL};
    CHECK_EQ(run(bad, &out, &err), 2);
    CHECK(strstr(err, "--dtype is f32 or bf16, not 'f16'"));
    free(out), free(err);
}

int main(int argc, char **argv)
{
    CHECK(argc == 3);
    char *weft = argv[1], *api = argv[2];
    snprintf(out_path, sizeof(out_path), "/tmp/weft_test_bench_%d.out", (int)getpid());
    snprintf(err_path, sizeof(err_path), "/tmp/weft_test_bench_%d.err", (int)getpid());

    char *flux[] = {weft, "bench", "flux", "--quick", "--no-torch", "--json", NULL};
    check_bench(flux, "weft bench flux", false); /* no torch: no ratio */
    char *cp[] = {weft, "bench", "cp", "--quick", "--json", NULL};
    check_bench(cp, "weft bench cp", true);
    char *load[] = {weft, "bench", "load", "--quick", "--json", NULL};
    check_bench(load, "weft bench load", true);
    char *comm[] = {weft, "bench", "comm", "--quick", "--json", "--no-mpi", "--op", "allreduce",
                    "--np", "2", "--bytes", "64KiB", NULL};
    check_bench(comm, "weft bench comm", true);
    char *vae[] = {weft, "bench", "vae", "--quick", "--json", NULL};
    check_bench(vae, "weft bench vae", true);
    char *gen[] = {weft, "bench", "generate", "--quick", "--no-torch", "--json", NULL};
    check_bench(gen, "weft bench generate", false);
    char *plan[] = {weft, "bench", "plan", "--quick", "--json", NULL};
    check_plan(plan);
    char *text[] = {weft, "bench", "text", "--quick", "--no-torch", "--json", NULL};
    check_bench(text, "weft bench text", false);
    check_text_per_rank(text);
    /* Under ASan, LeakSanitizer (GCC 12's) cannot check this one: at exit it walks the
     * dynamic TLS of the dlopen()ed libraries' threads, finds a bogus block there and crashes
     * ("Tracer caught signal 11"). Leaks stay checked for weft's own GEMM by the kernels suite. */
    const char *asan = getenv("ASAN_OPTIONS");
    char *saved = asan ? strdup(asan) : NULL, opts[1024];
    if (saved) {
        snprintf(opts, sizeof(opts), "%s:detect_leaks=0", saved);
        setenv("ASAN_OPTIONS", opts, 1);
    }
    char *gemm[] = {weft, "bench", "gemm", "--quick", "--json", NULL};
    check_bench(gemm, "weft bench gemm", true);
    if (saved)
        setenv("ASAN_OPTIONS", saved, 1);
    free(saved);
    char *serve[] = {weft,    "bench", "serve",      "--quick", "--json", "--prompt-embeds",
                     "red-fox", "--goal", "throughput", NULL};
    check_serve(serve);
    char *api_load[] = {api, "--spawn", weft, "--sides", "local,tp2", "--quick", "--json", NULL};
    check_bench(api_load, "weft-api-load", true);

    /* fewer than 5 rounds only with --quick; the old --repeats names its successor */
    char *out, *err;
    char *three[] = {weft, "bench", "cp", "--rounds", "3", NULL};
    CHECK_EQ(run(three, &out, &err), 2);
    CHECK(strstr(err, "at least 5"));
    free(out), free(err);
    char *old[] = {weft, "bench", "load", "--repeats", "3", NULL};
    CHECK_EQ(run(old, &out, &err), 2);
    CHECK(strstr(err, "--rounds"));
    free(out), free(err);
    /* the table form carries the context too; --cfg: true-CFG rows, CFG parallelism's among
     * them, paired with ulysses_anything */
    char *table[] = {weft, "bench", "cp", "--quick", "--cfg", NULL};
    CHECK_EQ(run(table, &out, &err), 0);
    CHECK(strstr(out, "load average before") && strstr(out, "median [min-max]"));
    CHECK(strstr(out, "one process") && strstr(out, "too few rounds"));
    CHECK(strstr(out, "true CFG (two passes a step)") && strstr(out, "\ncfg 2 ") &&
          strstr(out, "cfg 2 / ulysses_anything"));
    free(out), free(err);
    unlink(out_path);
    unlink(err_path);
    return 0;
}
