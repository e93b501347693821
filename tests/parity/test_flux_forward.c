/* FLUX.1 forward pass against Diffusers' own outputs (tests/golden/make_flux.py): f32 within
 * 1e-4 relative L2; a bf16 checkpoint within 1e-4 of Diffusers in f32 on the same weights
 * (f32 compute) and within 1e-2 of Diffusers in bf16 (the model in bf16, bf16 products where
 * the CPU has them, f32 products otherwise: both must pass); and a checkpoint with one
 * corrupted weight must fail the same check. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "golden.h"
#include "worker/flux.h"

static const struct weft_kernels *K;
static struct weft_kctx *kc;

/* Run the forward of model_dir on the golden inputs; return rel L2 against `expect`. */
static double run_case_in(const char *model_dir, const char *golden_rel, const char *expect,
                          enum weft_dtype dtype)
{
    struct weft_flux_opts opts = {K, kc, dtype};
    struct weft_flux *m;
    CHECK_OK(weft_flux_load(model_dir, &opts, &m, TERR));
    const struct weft_flux_config *c = weft_flux_get_config(m);
    struct golden g;
    golden_open(&g, golden_rel);
    int64_t n_hidden, n_enc, n_out;
    struct weft_flux_inputs in = {0};
    float *hidden = golden_need(&g, "hidden_states", &n_hidden);
    float *enc = golden_need(&g, "encoder_hidden_states", &n_enc);
    float *pooled = golden_need(&g, "pooled_projections", NULL);
    float *t = golden_need(&g, "timestep", NULL);
    float *guid = golden_get(&g, "guidance", NULL);
    float *img_ids = golden_need(&g, "img_ids", NULL);
    float *txt_ids = golden_need(&g, "txt_ids", NULL);
    float *want = golden_need(&g, expect, &n_out);
    in.batch = 1;
    in.s_img = n_hidden / c->in_channels;
    in.s_txt = n_enc / c->joint_attention_dim;
    in.hidden = hidden, in.encoder = enc, in.pooled = pooled, in.timestep = t;
    in.guidance = guid, in.img_ids = img_ids, in.txt_ids = txt_ids;
    float *out = malloc((size_t)n_out * sizeof(float));
    CHECK_OK(weft_flux_forward(m, &in, out));
    double err = rel_l2(out, want, n_out);
    /* a second call on the same reservation gives the same answer */
    float *again = malloc((size_t)n_out * sizeof(float));
    CHECK_OK(weft_flux_forward(m, &in, again));
    CHECK(memcmp(out, again, (size_t)n_out * sizeof(float)) == 0);
    char what[200];
    K->describe(kc, what, sizeof(what));
    printf("%-10s %-36s %-11s model %-4s, %s: rel L2 %.3g\n", strrchr(model_dir, '/') + 1,
           golden_rel + 24, expect, weft_dtype_name(dtype), strstr(what, "compute") - 5, err);
    free(hidden), free(enc), free(pooled), free(t), free(guid), free(img_ids), free(txt_ids);
    free(want), free(out), free(again);
    golden_close(&g);
    weft_flux_destroy(m);
    return err;
}

static double run_case(const char *model_dir, const char *golden_rel, const char *expect)
{
    return run_case_in(model_dir, golden_rel, expect, WEFT_DTYPE_F32);
}

static void model_path(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/tests/data/flux1/%s", getenv("WEFT_SOURCE_ROOT"), name);
}

/* Copy tiny-g to a temporary folder and flip one weight of one tensor. */
static void corrupt_copy(const char *src, char *dst_dir, const char *tensor)
{
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "cp -r '%s/.' '%s/'", src, dst_dir);
    CHECK(system(cmd) == 0);
    char file[2048];
    snprintf(file, sizeof(file), "%s/diffusion_pytorch_model.safetensors", dst_dir);
    struct weft_st_file *f;
    CHECK_OK(weft_st_open(file, &f, TERR));
    const struct weft_st_tensor *t = weft_st_find(f, tensor);
    CHECK(t && t->dtype == WEFT_DTYPE_F32);
    uint64_t off = t->offset + 4 * 5; /* element 5 */
    weft_st_close(f);
    FILE *fp = fopen(file, "r+b");
    CHECK(fp && fseek(fp, (long)off, SEEK_SET) == 0);
    float v = 0.5f;
    CHECK(fwrite(&v, 4, 1, fp) == 1 && fclose(fp) == 0);
}

int main(void)
{
    test_kernels_create(0, &K, &kc);
    char g[1024], nog[1024], bf[1024];
    model_path(g, sizeof(g), "tiny-g");
    model_path(nog, sizeof(nog), "tiny-nog");
    model_path(bf, sizeof(bf), "tiny-bf16");
    const double tol = 1e-4;
    CHECK(run_case(g, "tests/data/flux1/golden/fwd_tiny-g_16x16_t8.safetensors", "output") <= tol);
    CHECK(run_case(g, "tests/data/flux1/golden/fwd_tiny-g_15x13_t7.safetensors", "output") <= tol);
    CHECK(run_case(nog, "tests/data/flux1/golden/fwd_tiny-nog_16x16_t8.safetensors", "output") <=
          tol);
    /* bf16 weights, f32 compute, against Diffusers' upcast run */
    CHECK(run_case(bf, "tests/data/flux1/golden/fwd_tiny-bf16_15x13_t7.safetensors", "output") <=
          tol);
    /* the model in bf16 against Diffusers in bf16: with the CPU's bf16 products, then f32 ones */
    const char *bf_golden = "tests/data/flux1/golden/fwd_tiny-bf16_15x13_t7.safetensors";
    for (int bf_products = 1; bf_products >= 0; bf_products--) {
        if (K->set_compute(kc, bf_products ? WEFT_DTYPE_BF16 : WEFT_DTYPE_F32) != WEFT_OK)
            continue; /* no avx512_bf16 here */
        CHECK(run_case_in(bf, bf_golden, "output_bf16", WEFT_DTYPE_BF16) <= 1e-2);
    }
    /* and not by accident: the f32 model is far from Diffusers' bf16 run */
    CHECK(run_case(bf, bf_golden, "output_bf16") > 1e-2);

    /* The check must be able to fail: one corrupted weight in a single block's projection. */
    char dir[] = "/tmp/weft_parity_corrupt_XXXXXX";
    CHECK(mkdtemp(dir));
    corrupt_copy(g, dir, "single_transformer_blocks.0.attn.to_k.weight");
    double err = run_case(dir, "tests/data/flux1/golden/fwd_tiny-g_16x16_t8.safetensors", "output");
    printf("one corrupted weight: rel L2 %.3g (must exceed %.0e)\n", err, tol);
    CHECK(err > tol);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    K->destroy(kc);
    return 0;
}
