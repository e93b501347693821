/* Text to image against FluxPipeline called with the same prompt string, on the tiny pipeline
 * with both text encoders (tests/data/text/pipeline, tests/golden/make_text_pipeline.py):
 *  - the tokenizers' ids equal the pipeline's tokenizer calls (CLIP at 77, T5 at each
 *    max_sequence_length), truncated prompts included;
 *  - weft_runtime_encode equals encode_prompt (prompt_embeds, pooled_prompt_embeds) within
 *    1e-4 relative L2 (f32 compute on the BF16 encoders), staged and resident alike;
 *  - the whole pipeline from the text: the final latents within 1e-4, the image within one
 *    8-bit level;
 *  - the prompt cache: a repeated prompt is a hit with the same bytes, another
 *    max_sequence_length is a miss, a cache of 0 bytes keeps nothing;
 *  - the refusals: text on a model without encoders names what is missing; an out-of-range
 *    max_sequence_length; invalid UTF-8;
 *  - the embedded default model (models/flux-tiny, trained) at its defaults (128x128, 48 T5
 *    tokens, 28 steps, no guidance embedding) from the golden's initial latents: FluxPipeline's
 *    final latents within 1e-4 and its image within one level
 *    (tests/data/picture/golden.safetensors, tests/golden/train_default_model.py). */
#include <cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "common/alloc.h"
#include "common/files.h"
#include "golden.h"
#include "model/model.h"
#include "text/tokenizer.h"
#include "worker/runtime.h"

static const struct weft_kernels *K;
static struct weft_kctx *kc;
static char root[2048], dir[2200];
static cJSON *prompts;

static const char *prompt_text(int i, int64_t *msl)
{
    const cJSON *p = cJSON_GetArrayItem(prompts, i);
    *msl = (int64_t)cJSON_GetObjectItem(p, "max_sequence_length")->valuedouble;
    return cJSON_GetObjectItem(p, "prompt")->valuestring;
}

static struct weft_runtime *runtime(bool staged, uint64_t cache, const char *model)
{
    const struct weft_rt_opts opts = {K, kc, staged, cache};
    struct weft_runtime *rt;
    CHECK_OK(weft_runtime_create(&opts, &rt));
    static struct weft_rt_assign a;
    weft_rt_assign_single(model, &a);
    CHECK_OK(weft_runtime_assign(rt, &a, NULL, TERR));
    return rt;
}

static void ids_equal(const char *what, const struct weft_tokens *t, struct golden *g,
                      const char *name)
{
    const struct weft_st_tensor *x = weft_st_find(g->f, name);
    CHECK(x && x->numel == t->len);
    int64_t *want = malloc((size_t)x->numel * 8);
    CHECK_OK(weft_st_read(g->f, x, want, WEFT_DTYPE_I64, TERR));
    for (int64_t i = 0; i < t->len; i++)
        if (want[i] != t->ids[i]) {
            fprintf(stderr, "%s: id %lld is %d, the pipeline's tokenizer gives %lld\n", what,
                    (long long)i, t->ids[i], (long long)want[i]);
            exit(1);
        }
    free(want);
}

static void encode_cases(bool staged)
{
    struct weft_runtime *rt = runtime(staged, 1 << 20, dir);
    const struct weft_model *m = weft_runtime_model(rt);
    CHECK(!weft_model_text_missing(m, (char[8]){0}, 8));
    CHECK(m->clip.held_bytes > 0 && m->t5.held_bytes > 0);
    CHECK_EQ(weft_runtime_text_bytes(rt), m->clip.held_bytes + m->t5.held_bytes);
    struct weft_tokenizer *tc, *tt;
    CHECK_OK(weft_tokenizer_open(m->clip.tokenizer_dir, WEFT_TOKENIZER_CLIP, &tc, TERR));
    CHECK_OK(weft_tokenizer_open(m->t5.tokenizer_dir, WEFT_TOKENIZER_T5, &tt, TERR));
    for (int i = 0; i < cJSON_GetArraySize(prompts); i++) {
        int64_t msl;
        const char *text = prompt_text(i, &msl);
        char path[64];
        snprintf(path, sizeof(path), "tests/data/text/pipeline_golden/encode_%d.safetensors", i);
        struct golden g;
        golden_open(&g, path);
        struct weft_tokens t;
        CHECK_OK(weft_tokenizer_encode(tc, text, strlen(text), 77, "prompt", &t, TERR));
        ids_equal("CLIP", &t, &g, "clip_input_ids");
        weft_tokens_cleanup(&t);
        CHECK_OK(weft_tokenizer_encode(tt, text, strlen(text), msl, "prompt", &t, TERR));
        ids_equal("T5", &t, &g, "t5_input_ids");
        weft_tokens_cleanup(&t);
        struct weft_prompt_embeds pe;
        CHECK_OK(weft_runtime_encode(rt, text, msl, &pe, TERR));
        CHECK_EQ(pe.tokens, msl);
        int64_t ne, np;
        float *we = golden_need(&g, "prompt_embeds", &ne), *wp = golden_need(&g,
                                                                            "pooled_prompt_embeds",
                                                                            &np);
        CHECK_EQ(ne, msl * m->flux.joint_attention_dim);
        double e1 = rel_l2(pe.embeds, we, ne), e2 = rel_l2(pe.pooled, wp, np);
        printf("%s encode_%d (max_sequence_length %lld): prompt_embeds rel L2 %.3g, pooled "
               "%.3g\n", staged ? "staged" : "resident", i, (long long)msl, e1, e2);
        CHECK(e1 <= 1e-4 && e2 <= 1e-4);
        free(we), free(wp);
        weft_prompt_embeds_cleanup(&pe);
        golden_close(&g);
    }
    /* the cache: every prompt above was a miss; again, each is a hit with the same bytes */
    struct weft_rt_text_stats s0, s1;
    weft_runtime_text_stats(rt, &s0);
    CHECK_EQ(s0.misses, (uint64_t)cJSON_GetArraySize(prompts));
    CHECK_EQ(s0.hits, 0);
    CHECK_EQ(s0.entries, (uint64_t)cJSON_GetArraySize(prompts));
    int64_t msl;
    const char *text = prompt_text(0, &msl);
    struct weft_prompt_embeds a, b, c;
    CHECK_OK(weft_runtime_encode(rt, text, msl, &a, TERR));
    CHECK_OK(weft_runtime_encode(rt, text, msl + 1, &c, TERR)); /* another length: a miss */
    weft_runtime_text_stats(rt, &s1);
    CHECK_EQ(s1.hits, 1);
    CHECK_EQ(s1.misses, s0.misses + 1);
    CHECK_EQ(c.tokens, msl + 1);
    /* T5 without an attention mask: the padding changes every row, not only the new one */
    CHECK(memcmp(a.embeds, c.embeds, (size_t)(msl * 32) * 4) != 0);
    /* the same encode without the cache */
    struct weft_runtime *nc = runtime(staged, 0, dir);
    CHECK_OK(weft_runtime_encode(nc, text, msl, &b, TERR));
    CHECK(memcmp(a.embeds, b.embeds, (size_t)(msl * 32) * 4) == 0);
    CHECK(memcmp(a.pooled, b.pooled, 32 * 4) == 0);
    weft_runtime_text_stats(nc, &s1);
    CHECK_EQ(s1.entries, 0);
    CHECK_EQ(s1.misses, 1);
    weft_prompt_embeds_cleanup(&a), weft_prompt_embeds_cleanup(&b), weft_prompt_embeds_cleanup(&c);
    /* refusals */
    CHECK_FAILS(weft_runtime_encode(rt, "a cat", 513, &a, TERR), WEFT_ERR_RANGE,
                "max_sequence_length 513: 1..512");
    CHECK_FAILS(weft_runtime_encode(rt, "caf\xe9", 64, &a, TERR), WEFT_ERR_INVALID,
                "prompt: not valid UTF-8 (byte 3)");
    weft_tokenizer_close(tc);
    weft_tokenizer_close(tt);
    weft_runtime_destroy(nc);
    weft_runtime_destroy(rt);
}

static void pipeline(bool staged, struct weft_rt_result *r)
{
    struct weft_runtime *rt = runtime(staged, 1 << 20, dir);
    int64_t msl;
    const char *text = prompt_text(0, &msl);
    struct weft_prompt_embeds pe;
    CHECK_OK(weft_runtime_encode(rt, text, msl, &pe, TERR));
    struct golden g;
    golden_open(&g, "tests/data/text/pipeline_golden/pipeline_0.safetensors");
    int64_t n;
    float *init = golden_need(&g, "latents_init", &n);
    const struct weft_rt_image img = {
        .prompt_embeds = pe.embeds, .s_txt = pe.tokens, .pooled = pe.pooled, .height = 32,
        .width = 48, .steps = 3, .guidance = 3.5f, .latents_init = init, .decode = true,
        .keep_latents = true, .keep_rgb = true, .png_prompt = text, .png_prompt_index = -1,
    };
    CHECK_OK(weft_runtime_image(rt, &img, NULL, NULL, NULL, r, TERR));
    CHECK_EQ(r->tokens * r->channels, n);
    free(init);
    golden_close(&g);
    weft_prompt_embeds_cleanup(&pe);
    weft_runtime_destroy(rt);
}

static void whole(void)
{
    struct weft_rt_result staged, resident;
    pipeline(true, &staged);
    pipeline(false, &resident);
    CHECK(memcmp(staged.latents, resident.latents,
                 (size_t)(staged.tokens * staged.channels) * sizeof(float)) == 0);
    struct golden g;
    golden_open(&g, "tests/data/text/pipeline_golden/pipeline_0.safetensors");
    int64_t n;
    float *want = golden_need(&g, "latents_final", &n);
    const struct weft_st_tensor *u8t = weft_st_find(g.f, "image_u8");
    CHECK(u8t && u8t->numel == 32 * 48 * 3);
    uint8_t want_u8[32 * 48 * 3];
    CHECK_OK(weft_st_read(g.f, u8t, want_u8, WEFT_DTYPE_U8, TERR));
    const double e = rel_l2(staged.latents, want, n);
    int worst = 0;
    for (int i = 0; i < 32 * 48 * 3; i++) {
        int d = abs((int)staged.rgb[i] - (int)want_u8[i]);
        worst = d > worst ? d : worst;
    }
    printf("text to image, 32x48, 3 steps: latents_final rel L2 %.3g, worst 8-bit difference "
           "%d\n", e, worst);
    CHECK(e <= 1e-4);
    CHECK(worst <= 1);
    free(want);
    golden_close(&g);
    weft_rt_result_cleanup(&staged);
    weft_rt_result_cleanup(&resident);
}

static void default_model(void)
{
    char model[2300];
    snprintf(model, sizeof(model), "%s/models/flux-tiny", root);
    struct weft_runtime *rt = runtime(true, 0, model);
    const struct weft_model *m = weft_runtime_model(rt);
    CHECK(m->default_side == 128 && m->default_text_tokens == 48);
    struct golden g;
    golden_open(&g, "tests/data/picture/golden.safetensors");
    const char *text = NULL;
    for (size_t i = 0; i < weft_st_meta_count(g.f); i++)
        if (strcmp(weft_st_meta_at(g.f, i)->key, "prompt") == 0)
            text = weft_st_meta_at(g.f, i)->value;
    CHECK(text);
    struct weft_prompt_embeds pe;
    CHECK_OK(weft_runtime_encode(rt, text, m->default_text_tokens, &pe, TERR));
    int64_t n;
    float *init = golden_need(&g, "latents_init", &n);
    float *want = golden_need(&g, "latents_final", &n);
    const struct weft_rt_image img = {
        .prompt_embeds = pe.embeds, .s_txt = pe.tokens, .pooled = pe.pooled,
        .height = m->default_side, .width = m->default_side, .steps = 28, .guidance = 3.5f,
        .latents_init = init, .decode = true, .keep_latents = true, .keep_rgb = true,
        .png_prompt = text, .png_prompt_index = -1,
    };
    struct weft_rt_result r;
    CHECK_OK(weft_runtime_image(rt, &img, NULL, NULL, NULL, &r, TERR));
    CHECK_EQ(r.tokens * r.channels, n);
    const struct weft_st_tensor *u8t = weft_st_find(g.f, "image_u8");
    CHECK(u8t && u8t->numel == 128 * 128 * 3);
    static uint8_t want_u8[128 * 128 * 3];
    CHECK_OK(weft_st_read(g.f, u8t, want_u8, WEFT_DTYPE_U8, TERR));
    int worst = 0;
    for (int i = 0; i < 128 * 128 * 3; i++) {
        int d = abs((int)r.rgb[i] - (int)want_u8[i]);
        worst = d > worst ? d : worst;
    }
    const double e = rel_l2(r.latents, want, n);
    printf("the embedded default model, \"%s\", 128x128, 28 steps: latents_final rel L2 %.3g, "
           "worst 8-bit difference %d\n", text, e, worst);
    CHECK(e <= 1e-4);
    CHECK(worst <= 1);
    free(init);
    free(want);
    golden_close(&g);
    weft_prompt_embeds_cleanup(&pe);
    weft_rt_result_cleanup(&r);
    weft_runtime_destroy(rt);
}

/* The random-weight test pipeline has no text encoders: text is refused, naming them. */
static void no_encoders(void)
{
    char model[2200];
    snprintf(model, sizeof(model), "%s/tests/data/random/flux-tiny", root);
    struct weft_runtime *rt = runtime(false, 0, model);
    struct weft_prompt_embeds pe;
    CHECK_FAILS(weft_runtime_encode(rt, "a cat", 64, &pe, TERR), WEFT_ERR_UNSUPPORTED,
                "flux-tiny cannot encode text", "text_encoder (CLIPTextModel)",
                "text_encoder_2 (T5EncoderModel)");
    weft_runtime_destroy(rt);
}

int main(void)
{
    test_quiet();
    snprintf(root, sizeof(root), "%s", getenv("WEFT_SOURCE_ROOT"));
    snprintf(dir, sizeof(dir), "%s/tests/data/text/pipeline", root);
    char path[2300], *buf;
    size_t len;
    snprintf(path, sizeof(path), "%s/tests/data/text/pipeline_golden/prompts.json", root);
    CHECK(weft_files_read(path, 1 << 20, &buf, &len) == WEFT_OK);
    CHECK((prompts = cJSON_ParseWithLength(buf, len)));
    weft_free(buf);
    test_kernels_create(0, &K, &kc);
    encode_cases(true);
    encode_cases(false);
    whole();
    default_model();
    no_encoders();
    cJSON_Delete(prompts);
    K->destroy(kc);
    printf("text pipeline: ok\n");
    return 0;
}
