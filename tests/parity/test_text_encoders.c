/* CLIPTextModel and T5EncoderModel against transformers' own outputs on tiny random-weight
 * encoders (tests/golden/make_text_encoders.py): F32 weights within 1e-4 relative L2 of the
 * F32 model, BF16 weights within 1e-2 of transformers' BF16 run (with f32 products and, where
 * the CPU has them, bf16 products). Also: the same with CLIP's keys under "text_model." (how
 * transformers 4 saved CLIP-L), the pooled row's two rules, ids outside the vocabulary
 * refused, a checkpoint with a tensor missing refused by name. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "common/alloc.h"
#include "golden.h"
#include "model/checkpoint.h"
#include "test.h"
#include "worker/text_encoder.h"

static const struct weft_kernels *K;
static struct weft_kctx *kc;
static char root[2048];

static int32_t *ids_of(struct golden *g, int64_t *n_p)
{
    const struct weft_st_tensor *t = weft_st_find(g->f, "input_ids");
    CHECK(t && t->dtype == WEFT_DTYPE_I64);
    int64_t *raw = malloc((size_t)t->numel * 8);
    CHECK_OK(weft_st_read(g->f, t, raw, WEFT_DTYPE_I64, TERR));
    int32_t *ids = malloc((size_t)t->numel * 4);
    for (int64_t i = 0; i < t->numel; i++)
        ids[i] = (int32_t)raw[i];
    free(raw);
    *n_p = t->numel;
    return ids;
}

static void check_close(const char *what, const float *got, const float *want, int64_t n,
                        double tol)
{
    double e = rel_l2(got, want, n);
    printf("%s: rel L2 %.3g (bound %.0e)\n", what, e, tol);
    if (!(e <= tol)) {
        fprintf(stderr, "%s: %.3g > %.0e\n", what, e, tol);
        exit(1);
    }
}

static void clip_case(const char *dir, const char *gold, double tol, enum weft_dtype dtype)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/tests/data/text/%s", root, dir);
    struct weft_text_opts o = {.kernels = K, .kctx = kc, .dtype = dtype};
    struct weft_clip_text *m;
    CHECK_OK(weft_clip_text_load(path, &o, &m, TERR));
    struct golden g;
    snprintf(path, sizeof(path), "tests/data/text/golden/%s.safetensors", gold);
    golden_open(&g, path);
    int64_t n;
    int32_t *ids = ids_of(&g, &n);
    float *want_h = golden_need(&g, "last_hidden_state", NULL);
    float *want_p = golden_need(&g, "pooler_output", NULL);
    const int64_t D = weft_clip_text_get_config(m)->hidden_size;
    float *h = malloc((size_t)(n * D) * 4), *p = malloc((size_t)D * 4);
    CHECK_OK(weft_clip_text_forward(m, ids, n, h, p, TERR));
    char what[160];
    snprintf(what, sizeof(what), "%s %s last_hidden_state", gold, weft_dtype_name(dtype));
    check_close(what, h, want_h, n * D, tol);
    snprintf(what, sizeof(what), "%s %s pooler_output", gold, weft_dtype_name(dtype));
    check_close(what, p, want_p, D, tol);
    /* the pooled row is a row of the output */
    bool found = false;
    for (int64_t r = 0; r < n && !found; r++)
        found = memcmp(h + r * D, p, (size_t)D * 4) == 0;
    CHECK(found);
    /* a second, shorter call reuses the activations */
    CHECK_OK(weft_clip_text_forward(m, ids, n < 5 ? n : 5, NULL, p, TERR));
    ids[0] = 1000;
    CHECK_FAILS(weft_clip_text_forward(m, ids, n, h, p, TERR), WEFT_ERR_RANGE,
                "token 0 is id 1000, outside the vocabulary of 1000");
    CHECK_FAILS(weft_clip_text_forward(m, ids, 78, h, p, TERR), WEFT_ERR_RANGE,
                "78 tokens; 1..77 allowed");
    free(ids), free(want_h), free(want_p), free(h), free(p);
    golden_close(&g);
    weft_clip_text_destroy(m);
}

static void t5_case(const char *dir, const char *gold, double tol, enum weft_dtype dtype)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/tests/data/text/%s", root, dir);
    struct weft_text_opts o = {.kernels = K, .kctx = kc, .dtype = dtype};
    struct weft_t5 *m;
    CHECK_OK(weft_t5_load(path, &o, &m, TERR));
    struct golden g;
    snprintf(path, sizeof(path), "tests/data/text/golden/%s.safetensors", gold);
    golden_open(&g, path);
    int64_t n;
    int32_t *ids = ids_of(&g, &n);
    float *want = golden_need(&g, "last_hidden_state", NULL);
    const int64_t D = weft_t5_get_config(m)->d_model;
    float *out = malloc((size_t)(n * D) * 4);
    CHECK_OK(weft_t5_forward(m, ids, n, out, TERR));
    char what[160];
    snprintf(what, sizeof(what), "%s %s last_hidden_state", gold, weft_dtype_name(dtype));
    check_close(what, out, want, n * D, tol);
    /* again (the bias table and activations kept) */
    CHECK_OK(weft_t5_forward(m, ids, n, out, TERR));
    check_close(what, out, want, n * D, tol);
    ids[n - 1] = -1;
    CHECK_FAILS(weft_t5_forward(m, ids, n, out, TERR), WEFT_ERR_RANGE, "outside the vocabulary");
    free(ids), free(want), free(out);
    golden_close(&g);
    weft_t5_destroy(m);
}

/* clip-tiny with every key under "text_model." (transformers 4's layout, FLUX.1's files) and
 * CLIP's position_ids buffer: the same outputs. */
static void clip_prefixed(void)
{
    char src[4096], dir[] = "/tmp/weft-clip-XXXXXX", path[4200];
    snprintf(src, sizeof(src), "%s/tests/data/text/encoders/clip-tiny/model.safetensors", root);
    CHECK(mkdtemp(dir));
    struct weft_st_file *f;
    CHECK_OK(weft_st_open(src, &f, TERR));
    const size_t n = weft_st_count(f);
    struct weft_st_out *out = calloc(n + 1, sizeof(*out));
    char (*names)[128] = calloc(n + 1, 128);
    void **data = calloc(n + 1, sizeof(void *));
    for (size_t i = 0; i < n; i++) {
        const struct weft_st_tensor *t = weft_st_at(f, i);
        data[i] = malloc((size_t)t->numel * 4);
        CHECK_OK(weft_st_read(f, t, data[i], WEFT_DTYPE_F32, TERR));
        snprintf(names[i], 128, "text_model.%s", t->name);
        out[i] = (struct weft_st_out){names[i], WEFT_DTYPE_F32, t->ndim, t->shape, data[i]};
    }
    int64_t pos_shape[2] = {1, 77};
    int64_t pos[77];
    for (int i = 0; i < 77; i++)
        pos[i] = i;
    out[n] = (struct weft_st_out){"text_model.embeddings.position_ids", WEFT_DTYPE_I64, 2,
                                  pos_shape, pos};
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    CHECK_OK(weft_st_write(path, n + 1, out, 0, NULL, TERR));
    char cfg[4096], dst[4200];
    snprintf(cfg, sizeof(cfg), "cp %s/tests/data/text/encoders/clip-tiny/config.json %s/", root,
             dir);
    CHECK(system(cfg) == 0);
    struct weft_text_opts o = {.kernels = K, .kctx = kc, .dtype = WEFT_DTYPE_F32};
    struct weft_clip_text *m;
    CHECK_OK(weft_clip_text_load(dir, &o, &m, TERR));
    struct golden g;
    golden_open(&g, "tests/data/text/golden/clip-tiny_77.safetensors");
    int64_t ni;
    int32_t *ids = ids_of(&g, &ni);
    float *want = golden_need(&g, "pooler_output", NULL), p[64];
    CHECK_OK(weft_clip_text_forward(m, ids, ni, NULL, p, TERR));
    check_close("clip-tiny with text_model. keys: pooler_output", p, want, 64, 1e-4);
    weft_clip_text_destroy(m);
    /* one tensor short: refused by name */
    out[3] = out[n];
    CHECK_OK(weft_st_write(path, n, out, 0, NULL, TERR));
    CHECK_FAILS(weft_clip_text_load(dir, &o, &m, TERR), WEFT_ERR_FORMAT, "missing tensor",
                "text_model.");
    snprintf(dst, sizeof(dst), "rm -rf %s", dir);
    CHECK(system(dst) == 0);
    for (size_t i = 0; i < n; i++)
        free(data[i]);
    free(data), free(names), free(out), free(ids), free(want);
    golden_close(&g);
    weft_st_close(f);
}

int main(void)
{
    test_quiet();
    snprintf(root, sizeof(root), "%s", getenv("WEFT_SOURCE_ROOT"));
    test_kernels_create(2, &K, &kc);
    clip_case("encoders/clip-tiny", "clip-tiny_77", 1e-4, WEFT_DTYPE_F32);
    clip_case("encoders/clip-tiny", "clip-tiny_20", 1e-4, WEFT_DTYPE_F32);
    clip_case("encoders/clip-tiny-eos", "clip-tiny-eos_77", 1e-4, WEFT_DTYPE_F32);
    clip_case("encoders/clip-tiny-eos", "clip-tiny-eos_20", 1e-4, WEFT_DTYPE_F32);
    clip_case("encoders/clip-tiny-bf16", "clip-tiny-bf16_77", 1e-2, WEFT_DTYPE_BF16);
    t5_case("encoders/t5-tiny", "t5-tiny_77", 1e-4, WEFT_DTYPE_F32);
    t5_case("encoders/t5-tiny", "t5-tiny_300", 1e-4, WEFT_DTYPE_F32);
    t5_case("encoders/t5-tiny", "t5-tiny_8", 1e-4, WEFT_DTYPE_F32);
    t5_case("encoders/t5-tiny-bf16", "t5-tiny-bf16_77", 1e-2, WEFT_DTYPE_BF16);
    t5_case("encoders/t5-tiny-bf16", "t5-tiny-bf16_300", 1e-2, WEFT_DTYPE_BF16);
    if (K->set_compute(kc, WEFT_DTYPE_BF16) == WEFT_OK) { /* bf16 products too */
        clip_case("encoders/clip-tiny-bf16", "clip-tiny-bf16_77", 1e-2, WEFT_DTYPE_BF16);
        t5_case("encoders/t5-tiny-bf16", "t5-tiny-bf16_300", 1e-2, WEFT_DTYPE_BF16);
        K->set_compute(kc, WEFT_DTYPE_F32);
    }
    clip_prefixed();
    K->destroy(kc);
    printf("text encoders: ok\n");
    return 0;
}
