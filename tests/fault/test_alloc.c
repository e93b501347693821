/* Failed allocations, SQLite-style: a whole one-device run (the model described and loaded,
 * the prompt read, a 64x64 image denoised, decoded and encoded, everything freed) is repeated
 * with its n-th allocation failing: for every n up to the run's count only that one, and for
 * every fifth n that one and every later one (the staged run, which loads in another order,
 * every thirteenth n): each run ends in a clean error or succeeds, never crashes, and (under
 * ASan) leaks nothing. cJSON's allocations go through weft's allocator here, so the
 * model's JSON files fail too. The denoising loop itself allocates nothing. */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "model/model.h"
#include "test.h"
#include "worker/runtime.h"

static long step_allocs[2];

static void on_step(void *arg, int step, int steps, double seconds)
{
    (void)arg, (void)seconds;
    if (step == 1)
        step_allocs[0] = weft_alloc_count();
    if (step == steps)
        step_allocs[1] = weft_alloc_count();
}

static weft_status_t one_run(const char *dir, const char *prompt, bool staged)
{
    const struct weft_kernels *K = NULL;
    struct weft_kctx *kc = NULL;
    struct weft_runtime *rt = NULL;
    struct weft_rt_assign *a = weft_malloc(sizeof(*a));
    struct weft_error err = WEFT_ERROR_INIT;
    struct weft_prompt_embeds pe = {0};
    struct weft_rt_result res = {0};
    weft_status_t st = a ? weft_kernels_cpu_create(1, &K, &kc) : WEFT_ERR_NOMEM;
    const struct weft_rt_opts ro = {K, kc, staged};
    if (st == WEFT_OK)
        st = weft_runtime_create(&ro, &rt);
    if (st == WEFT_OK) {
        weft_rt_assign_single(dir, a);
        st = weft_runtime_assign(rt, a, NULL, &err);
    }
    if (st == WEFT_OK)
        st = weft_model_prompt_read(weft_runtime_model(rt), prompt, &pe, &err);
    if (st == WEFT_OK) {
        const struct weft_rt_image img = {
            .prompt_embeds = pe.embeds, .s_txt = pe.tokens, .pooled = pe.pooled,
            .height = 64, .width = 64, .steps = 3, .guidance = 3.5f, .seed = 5,
            .decode = true, .png_prompt = "red-fox", .png_prompt_index = -1,
        };
        st = weft_runtime_image(rt, &img, on_step, NULL, NULL, &res, &err);
    }
    if (st == WEFT_OK)
        CHECK(res.png && res.png_len > 8);
    else
        CHECK(err.status != WEFT_OK || st == WEFT_ERR_NOMEM); /* a cause is given */
    weft_rt_result_cleanup(&res);
    weft_prompt_embeds_cleanup(&pe);
    weft_runtime_destroy(rt);
    weft_kernels_cpu_destroy(kc);
    weft_free(a);
    return st;
}

static void *hook_malloc(size_t n)
{
    return weft_malloc(n);
}

static void hook_free(void *p)
{
    weft_free(p);
}

int main(void)
{
    test_quiet();
    cJSON_Hooks hooks = {hook_malloc, hook_free};
    cJSON_InitHooks(&hooks);
    char dir[1024], prompt[1100];
    snprintf(dir, sizeof(dir), "%s/tests/data/random/flux-tiny", getenv("WEFT_SOURCE_ROOT"));
    snprintf(prompt, sizeof(prompt), "%s/prompts/red-fox.safetensors", dir);
    for (int staged = 0; staged < 2; staged++) {
        long before = weft_alloc_count();
        CHECK_OK(one_run(dir, prompt, staged));
        const long total = weft_alloc_count() - before;
        printf("%s run: %ld allocations; %ld during the denoising steps\n",
               staged ? "staged" : "resident", total, step_allocs[1] - step_allocs[0]);
        CHECK(total > 50);
        CHECK_EQ(step_allocs[1] - step_allocs[0], 0); /* nothing allocated in the loop */
        long failed = 0, passed = 0;
        const long stride = staged ? 13 : 1;
        for (long n = 1; n <= total + 1; n += stride) {
            for (int sticky = 0; sticky < 2; sticky++) {
                if (sticky && (staged || n % 5))
                    continue;
                weft_alloc_fail_after(n, sticky);
                weft_status_t st = one_run(dir, prompt, staged);
                weft_alloc_fail_after(0, 0);
                if (st == WEFT_OK)
                    passed++;
                else
                    failed++;
                CHECK(st == WEFT_OK || st < 0);
            }
        }
        printf("  %ld runs with a failed allocation ended in an error, %ld succeeded (the "
               "failure fell on a path that can do without)\n", failed, passed);
        CHECK(failed >= total / stride); /* each n's allocation is needed */
        /* and the clean run still works after all that */
        CHECK_OK(one_run(dir, prompt, staged));
    }
    printf("ok\n");
    return 0;
}
