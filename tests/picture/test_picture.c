/* The embedded default model draws what it is asked. Prompts it never trained on (combinations
 * of shape colour, shape, place and background held out of its training set:
 * tests/data/picture/prompts.json, written by tests/golden/train_default_model.py) are rendered
 * at the model's defaults and judged by measurement:
 *   - at each named place (a square the largest shape fits in, jitter included), the pixels
 *     that differ from the background colour are the shape; there must be enough of them, and
 *     the mean colour of the half of them farthest from the background (the shape's core; its
 *     edges blend with the background) must be nearest (in RGB, among the eight named colours)
 *     the shape's;
 *   - each image corner that no shape's square touches must be nearest the background colour.
 * The bars (MIN_RIGHT, MIN_BACKGROUND) hold from `weft generate` and from a served cluster in
 * each of four layouts (tp 2, ulysses 2, ring 2, dp 2), where every image must also be within
 * one level per pixel of `weft generate`'s; and `weft run` itself in each layout makes the
 * first prompt's image within one level of generate's.
 *
 * The validation case renders 160 more held-out prompts (tests/data/picture/validation.json,
 * none of them the test's; seeds 5000 + i) with weft generate and holds them to their own bar:
 * the set to choose between trained models on, leaving the test's 40 for the verdict.
 * WEFT_PICTURE_MODEL=DIR judges another model folder than models/flux-tiny (a candidate).
 *
 * usage: test_picture /path/to/build/weft all|validation */
#include "e2e/harness.h"
#include "e2e/png_diff.h"
#include "picture/judge.h"

#define SEED0 1000            /* the test's prompt i is rendered at seed SEED0 + i */
#define VALIDATION_SEED0 5000 /* the validation set's */

static char model[1200];

/* The target: 90 % of the pictures right. The model measured 37 of 40 (all 32 one-shape prompts,
 * 5 of the 8 two-shape ones; the background right in all 40; the misses two-shape prompts where
 * one shape takes the other's colour or one near it, or a small shape is not drawn), so the test
 * holds it to the target itself, one picture of margin for other CPUs' kernels (their images
 * differ from these by at most a level). Its history: the first run's EMA scored 32 at step 3000
 * of 6000 and 35 at 6000, 4000 more steps left it at 35 (the validation set 136, then 141), 2500
 * more with two-shape scenes as 55 % of each batch made it 37 (145); the model before it, with 2
 * double-stream blocks instead of 4, 33; an undertrained checkpoint of an earlier model, whose
 * text encoder could not tell the colours' roles apart, 2. */
#define MIN_RIGHT 36      /* of 40: pictures wholly right (the target) */
#define MIN_BACKGROUND 36 /* of 40: the background right */

/* The validation set's bars, from the same measurement (VALIDATION_MEASURED), a margin of 5. */
#define VALIDATION_N 160
#define VALIDATION_MEASURED "145 of 160 (120 of the 120 one-shape prompts, 25 of 40 two-shape)"
#define MIN_VALIDATION_RIGHT 140
#define MIN_VALIDATION_BACKGROUND 150

/* Judge every picture of the loaded set (path i = fmt with i): how many are right and how many
 * have the right background. */
static void judge_count(const char *what, const char *fmt, int *right, int *bg_right)
{
    int pass = 0, background = 0;
    for (int i = 0; i < n_wants; i++) {
        char path[600], why[200] = "";
        snprintf(path, sizeof(path), fmt, tmp, i);
        struct weft_png_image im;
        CHECK_OK(weft_png_read(path, &im, TERR));
        const int v = judge_why(&im, &wants[i], why, sizeof(why));
        weft_png_image_cleanup(&im);
        pass += v == JUDGE_OK;
        background += v != JUDGE_BACKGROUND;
        if (v != JUDGE_OK)
            printf("%s: prompt %d \"%s\": %s\n", what, i, wants[i].prompt, why);
    }
    printf("%s: %d of %d pictures show what was asked; the background right in %d\n", what,
           pass, n_wants, background);
    *right = pass;
    *bg_right = background;
}

/* The test's 40 against its bars. */
static void judge_all(const char *what, const char *fmt)
{
    int right, background;
    judge_count(what, fmt, &right, &background);
    CHECK(n_wants == 40 && right >= MIN_RIGHT && background >= MIN_BACKGROUND);
}

static void generate_all(int seed0)
{
    for (int i = 0; i < n_wants; i++) {
        char out[600], seed[24];
        snprintf(out, sizeof(out), "%s/gen-%d.png", tmp, i);
        snprintf(seed, sizeof(seed), "%d", seed0 + i);
        const char *args[] = {"generate", "--model", model,  "--prompt", wants[i].prompt,
                              "--seed",   seed,      "--out", out,       NULL};
        CHECK_EQ(wait_pid(run_weft(args, NULL, NULL)), 0);
    }
}

struct layout {
    const char *name, *tp, *flag; /* flag: the [parallel] option besides tp (NULL: none) */
    const char *run[3];           /* the same for weft run */
};

static void served(const struct layout *l)
{
    const char *extra[] = {"--model", model, l->flag, NULL};
    struct cluster k;
    cluster_up(&k, l->tp, extra, 2);
    char ids[MAX_PROMPTS][WEFT_CLIENT_ID_MAX];
    for (int i = 0; i < n_wants; i++) { /* the model's defaults: size, steps, T5 length */
        struct weft_prompt p = {.text = wants[i].prompt};
        struct weft_job_request req = {.prompts = &p, .n_prompts = 1, .seed = SEED0 + i};
        CHECK_OK(weft_client_submit(k.c, &req, ids[i]));
    }
    int worst = 0;
    for (int i = 0; i < n_wants; i++) {
        struct weft_job_status st = {0};
        CHECK_OK(weft_client_wait(k.c, ids[i], 300000, NULL, NULL, &st));
        if (st.state != WEFT_JOB_DONE)
            fprintf(stderr, "%s: job %d: %s\n", l->name, i, st.error);
        CHECK(st.state == WEFT_JOB_DONE && st.n_images == 1);
        weft_job_status_cleanup(&st);
        char out[600], ref[600];
        snprintf(out, sizeof(out), "%s/%s-%d.png", tmp, l->name, i);
        snprintf(ref, sizeof(ref), "%s/gen-%d.png", tmp, i);
        CHECK_OK(weft_client_image_save(k.c, ids[i], 0, out));
        const int d = png_max_diff(ref, out);
        worst = d > worst ? d : worst;
    }
    cluster_down(&k);
    printf("%s: largest pixel difference to weft generate over %d images: %d\n", l->name,
           n_wants, worst);
    CHECK(worst <= 1);
    char fmt[64];
    snprintf(fmt, sizeof(fmt), "%%s/%s-%%d.png", l->name);
    judge_all(l->name, fmt);
}

static void run_once(const struct layout *l)
{
    char out[600], ref[600], seed[24];
    snprintf(out, sizeof(out), "%s/run-%s.png", tmp, l->name);
    snprintf(ref, sizeof(ref), "%s/gen-0.png", tmp);
    snprintf(seed, sizeof(seed), "%d", SEED0);
    const char *args[] = {"run",  "--model",    model, "--prompt", wants[0].prompt, "--seed",
                          seed,   "--progress", "none", "--out",   out,             l->run[0],
                          l->run[1], NULL};
    CHECK_EQ(wait_pid(run_weft(args, NULL, NULL)), 0);
    const int d = png_max_diff(ref, out);
    printf("weft run %s %s: max pixel difference to weft generate %d\n", l->run[0], l->run[1], d);
    CHECK(d <= 1);
}

/* The model (WEFT_PICTURE_MODEL, else models/flux-tiny), a prompt set of tests/data/picture,
 * every prompt i rendered by weft generate at seed seed0 + i into gen-i.png. */
static void generate_set(const char *set, int seed0)
{
    const char *m = getenv("WEFT_PICTURE_MODEL");
    if (m && *m)
        snprintf(model, sizeof(model), "%s", m);
    else
        snprintf(model, sizeof(model), "%s/models/flux-tiny", getenv("WEFT_SOURCE_ROOT"));
    printf("model: %s\n", model);
    load_prompts(set);
    const double t0 = now_ms();
    generate_all(seed0);
    printf("weft generate: %d prompts in %.1f s\n", n_wants, (now_ms() - t0) / 1000.0);
}

static int case_all(void)
{
    generate_set("prompts.json", SEED0);
    judge_all("weft generate", "%s/gen-%d.png");
    static const struct layout layouts[] = {
        {"tp2", "2", NULL, {"--tp", "2"}},
        {"ulysses2", "1", "--parallel.ulysses_degree=2", {"--ulysses", "2"}},
        {"ring2", "1", "--parallel.ring_degree=2", {"--ring", "2"}},
        {"dp2", "1", "--parallel.dp_degree=2", {"--dp", "2"}},
    };
    for (size_t l = 0; l < sizeof(layouts) / sizeof(layouts[0]); l++) {
        const double t = now_ms();
        served(&layouts[l]);
        run_once(&layouts[l]);
        printf("%s: %.1f s\n", layouts[l].name, (now_ms() - t) / 1000.0);
    }
    return 0;
}

static int case_validation(void)
{
    generate_set("validation.json", VALIDATION_SEED0);
    int right, background;
    judge_count("validation", "%s/gen-%d.png", &right, &background);
    printf("the committed model measured %s\n", VALIDATION_MEASURED);
    CHECK(n_wants == VALIDATION_N && right >= MIN_VALIDATION_RIGHT &&
          background >= MIN_VALIDATION_BACKGROUND);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct harness_case cases[] = {{"all", case_all},
                                                {"validation", case_validation}};
    return harness_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 1500);
}
