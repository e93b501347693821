/* The transformers beside FLUX.1 — FLUX.2 (Flux2Transformer2DModel, tests/golden/make_flux2.py)
 * and Qwen-Image (QwenImageTransformer2DModel, tests/golden/make_qwen.py) — against Diffusers'
 * own outputs, and every parallel layout against one device. The first argument names the
 * family (flux2 | qwenimage); its data are tests/data/FAMILY/.
 *
 *   test_dit FAMILY forward                one process: f32 within 1e-4 relative L2 of Diffusers (guidance
 *                                  on and off, an uneven grid); a bf16 checkpoint in f32 within
 *                                  1e-4, in bf16 within 1e-2 of Diffusers in bf16; Flux2Pipeline's
 *                                  4-step loop (its sigmas exactly, its latents within 1e-4); one
 *                                  corrupted weight of the fused single-block projection fails
 *   test_dit FAMILY RING ULYSSES TP [CFG] ring x ulysses x tp processes: the forward pass on an even and an
 *                                  uneven shape, and the 4-step loop, within 1e-5 of one device
 *                                  and 1e-4 of Diffusers
 *                                  (the anything modes where the lengths do not divide; the plain
 *                                  ones refuse them), bf16 within 1e-2 of one device; with tp, the
 *                                  fused layers sharded as plain colwise are refused by name
 *   test_dit FAMILY pp B0,..,Bn    a layer pipeline (device_map's split): rank r holds units
 *                                  [B_r, B_r+1); the output equals one device bit for bit
 *   test_dit flux2 pipeline        a Flux2Pipeline folder through the image pipeline
 *                                  (worker/runtime.h) from its prompt embeddings: the final
 *                                  latents within 1e-4 of Flux2Pipeline's, the 8-bit image (its
 *                                  batch-norm denormalisation, AutoencoderKLFlux2's decoder)
 *                                  within one level; a FLUX.1 embeddings file is refused */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "st_write.h"
#include "golden.h"
#include "integration/launch.h"
#include "model/mesh.h"
#include "model/model.h"
#include "model/plan.h"
#include "model/registry.h"
#include "worker/denoise.h"
#include "worker/flux.h"
#include "worker/par_transport.h"
#include "worker/runtime.h"
#include "worker/vae.h"

/* What differs between the families: the third golden (FLUX.2: a model without guidance;
 * Qwen-Image: a prompt with padding masked out), the loops (FLUX.2's Flux2Pipeline), the weight
 * to corrupt, whether there are fused layers to shard wrongly. */
static const struct family {
    const char *name;
    const char *extra_model, *extra_golden;
    bool loops, fused; /* loops: Flux2Pipeline's (else QwenImagePipeline's) */
    const char *corrupt;
} families[] = {
    {"flux2", "tiny-nog", "fwd_tiny-nog_8x6_t5", true, true,
     "single_transformer_blocks.1.attn.to_qkv_mlp_proj.weight"},
    {"qwenimage", "tiny-g", "fwd_tiny-g_15x13_t9_mask", false, false,
     "transformer_blocks.1.attn.to_k.weight"},
};
static const struct family *fam;
static char G16[128], G15[128], GEXTRA[128], GBF[128], L16[128], L15[128], LBF[128];

static void golden_names(void)
{
    snprintf(G16, sizeof(G16), "tests/data/%s/golden/fwd_tiny-g_16x16_t8.safetensors", fam->name);
    snprintf(G15, sizeof(G15), "tests/data/%s/golden/fwd_tiny-g_15x13_t7.safetensors", fam->name);
    snprintf(GEXTRA, sizeof(GEXTRA), "tests/data/%s/golden/%s.safetensors", fam->name,
             fam->extra_golden);
    snprintf(GBF, sizeof(GBF), "tests/data/%s/golden/fwd_tiny-bf16_15x13_t7.safetensors",
             fam->name);
    snprintf(L16, sizeof(L16), "tests/data/%s/golden/loop_tiny-g_16x16_t8.safetensors", fam->name);
    snprintf(L15, sizeof(L15), "tests/data/%s/golden/loop_tiny-g_15x13_t7%s.safetensors", fam->name,
             fam->loops ? "" : "_cfg");
    snprintf(LBF, sizeof(LBF), "tests/data/%s/golden/loop_tiny-bf16_15x13_t7_bf16.safetensors",
             fam->name);
}

static struct weft_mesh mesh;
/* CFG parallelism (mesh.cfg 2): this rank's half, and the comm whose cfg group joins the two */
static const struct weft_par_comm *cfg_comm;
static int cfg_half;
static int bounds[17], n_stages;

static void model_path(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/tests/data/%s/%s", getenv("WEFT_SOURCE_ROOT"), fam->name, name);
}

/* The forward pass of m on a golden file's inputs (no pooled embedding: neither model has one;
 * Qwen-Image's goldens give the token grid, whose position ids weft_flux_ids makes as its
 * pipeline does, and a text mask: the masked tokens are left out, the others keep their
 * positions). The output in *out_p; returns the rel L2 against ref, or against the golden
 * `expect` when ref is NULL; -1 with the status in *st_p when the pass is refused. */
static double fwd(struct weft_flux *m, const char *golden_rel, const char *expect,
                  const float *ref, float **out_p, weft_status_t *st_p)
{
    const struct weft_flux_config *c = weft_flux_get_config(m);
    struct golden g;
    golden_open(&g, golden_rel);
    int64_t nh, ne, n_out;
    struct weft_flux_inputs in = {.batch = 1};
    float *hidden = golden_need(&g, "hidden_states", &nh);
    float *enc = golden_need(&g, "encoder_hidden_states", &ne);
    float *t = golden_need(&g, "timestep", NULL), *guid = golden_get(&g, "guidance", NULL);
    float *img_ids = golden_get(&g, "img_ids", NULL), *txt_ids = golden_get(&g, "txt_ids", NULL);
    float *grid = golden_get(&g, "grid", NULL), *mask = golden_get(&g, "encoder_hidden_states_mask", NULL);
    float *want = golden_need(&g, expect, &n_out);
    CHECK(golden_get(&g, "pooled_projections", NULL) == NULL);
    in.s_img = nh / c->in_channels, in.s_txt = ne / c->joint_attention_dim;
    if (!img_ids) {
        CHECK(grid && (int64_t)grid[0] * (int64_t)grid[1] == in.s_img);
        img_ids = malloc((size_t)(in.s_img * c->n_axes) * sizeof(float));
        txt_ids = malloc((size_t)(in.s_txt * c->n_axes + 1) * sizeof(float));
        CHECK(img_ids && txt_ids);
        weft_flux_ids(c, (int64_t)grid[0], (int64_t)grid[1], in.s_txt, img_ids, txt_ids);
    }
    int64_t kept = 0;
    for (int64_t l = 0; mask && l < in.s_txt; l++) { /* the mask's tokens, in place */
        if (mask[l] == 0.0f)
            continue;
        memmove(enc + kept * c->joint_attention_dim, enc + l * c->joint_attention_dim,
                (size_t)c->joint_attention_dim * sizeof(float));
        memmove(txt_ids + kept * c->n_axes, txt_ids + l * c->n_axes,
                (size_t)c->n_axes * sizeof(float));
        kept++;
    }
    if (mask)
        in.s_txt = kept;
    in.hidden = hidden, in.encoder = enc, in.timestep = t, in.guidance = guid;
    in.img_ids = img_ids, in.txt_ids = txt_ids;
    float *out = malloc((size_t)n_out * sizeof(float));
    CHECK(out);
    *st_p = weft_flux_forward(m, &in, out);
    double err = *st_p == WEFT_OK ? rel_l2(out, ref ? ref : want, n_out) : -1;
    *out_p = out;
    free(hidden), free(enc), free(t), free(guid), free(img_ids), free(txt_ids), free(want);
    free(grid), free(mask);
    golden_close(&g);
    return err;
}

/* The pipeline's 4-step loop from the golden's initial latents (FLUX.2: Flux2Pipeline, mu by
 * compute_empirical_mu; Qwen-Image: QwenImagePipeline with its scheduler's shift_terminal, and
 * true CFG when the golden has negative embeddings): the schedule against the pipeline's
 * sigmas, the final latents against its last step's (returned; the latents in *out_p). */
static double loop(struct weft_flux *m, const char *golden_rel, int64_t gh, int64_t gw,
                   float **out_p)
{
    struct golden g;
    golden_open(&g, golden_rel);
    int64_t npe, nlat, nsig;
    float *pe = golden_need(&g, "prompt_embeds", &npe);
    float *lat = golden_need(&g, "latents_init", &nlat);
    float *want = golden_get(&g, "latents_final", NULL);
    if (!want)
        want = golden_need(&g, "latents_step_3", NULL);
    float *sig = golden_need(&g, "sigmas", &nsig);
    float *gs = golden_get(&g, "guidance_scale", NULL);
    float *ne = golden_get(&g, "negative_prompt_embeds", NULL);
    float *cfg = golden_get(&g, "true_cfg_scale", NULL);
    struct weft_sched_config sc;
    weft_sched_config_flux_default(&sc);
    if (fam->loops) {
        sc.mu_rule = WEFT_MU_EMPIRICAL;
    } else { /* make_qwen.py's SCHED_CFG */
        sc.shift = 1.0, sc.max_shift = 0.9, sc.max_image_seq_len = 8192;
        sc.shift_terminal = 0.02;
    }
    static struct weft_schedule sched;
    CHECK_OK(weft_sched_plan(&sc, 4, gh * gw, &sched, TERR));
    CHECK_EQ(nsig, 5);
    for (int i = 0; i < 5; i++)
        CHECK(sched.sigmas[i] == sig[i]);
    const struct weft_flux_config *c = weft_flux_get_config(m);
    struct weft_denoise_params p = {.grid_h = gh, .grid_w = gw, .prompt_embeds = pe,
                                    .s_txt = npe / c->joint_attention_dim,
                                    .guidance = gs ? gs[0] : 0.0f, .neg_prompt_embeds = ne,
                                    .true_cfg_scale = cfg ? cfg[0] : 1.0f, .schedule = &sched,
                                    .cfg_comm = cfg_comm, .cfg_half = cfg_half};
    CHECK_OK(weft_denoise(m, &p, lat, TERR));
    const double e = rel_l2(lat, want, nlat);
    *out_p = lat;
    free(pe), free(want), free(sig), free(gs), free(ne), free(cfg);
    golden_close(&g);
    return e;
}

static struct weft_flux *load(const char *name, const struct weft_flux_opts *base,
                              enum weft_dtype dtype, weft_status_t *st)
{
    char dir[1024];
    model_path(dir, sizeof(dir), name);
    struct weft_flux_opts o = *base;
    o.dtype = dtype;
    struct weft_flux *m = NULL;
    *st = weft_flux_load(dir, &o, &m, TERR);
    return m;
}

static double one_case(const struct weft_flux_opts *o, const char *name, const char *golden_rel,
                       const char *expect, enum weft_dtype dtype)
{
    weft_status_t st;
    struct weft_flux *m = load(name, o, dtype, &st);
    CHECK_OK(st);
    CHECK(weft_flux_get_config(m)->version == (strcmp(fam->name, "flux2") == 0 ? 2 : 3));
    float *out, *again;
    double e = fwd(m, golden_rel, expect, NULL, &out, &st);
    CHECK_OK(st);
    /* a second pass on the same reservation gives the same bits */
    CHECK(fwd(m, golden_rel, expect, out, &again, &st) == 0.0);
    char what[200];
    o->kernels->describe(o->kctx, what, sizeof(what));
    printf("%-9s %-36s %-11s model %-4s, %s: rel L2 %.3g\n", name, strrchr(golden_rel, '/') + 1, expect,
           weft_dtype_name(dtype), strstr(what, "compute") - 5, e);
    free(out), free(again);
    weft_flux_destroy(m);
    return e;
}

/* Copy a model folder and overwrite element 5 of one f32 tensor. */
static void corrupt_copy(const char *name, char *dst_dir, const char *tensor)
{
    char src[1024], cmd[4096], file[2048];
    model_path(src, sizeof(src), name);
    snprintf(cmd, sizeof(cmd), "cp -r '%s/.' '%s/'", src, dst_dir);
    CHECK(system(cmd) == 0);
    snprintf(file, sizeof(file), "%s/diffusion_pytorch_model.safetensors", dst_dir);
    struct weft_st_file *f;
    CHECK_OK(weft_st_open(file, &f, TERR));
    const struct weft_st_tensor *t = weft_st_find(f, tensor);
    CHECK(t && t->dtype == WEFT_DTYPE_F32);
    uint64_t off = t->offset + (uint64_t)4 * 5;
    weft_st_close(f);
    FILE *fp = fopen(file, "r+b");
    CHECK(fp && fseek(fp, (long)off, SEEK_SET) == 0);
    float v = 0.5f;
    CHECK(fwrite(&v, 4, 1, fp) == 1 && fclose(fp) == 0);
}

static int forward_main(void)
{
    test_quiet(); /* log lines are kept in test_logged (WEFT_TEST_VERBOSE prints them) */
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    test_kernels_create(0, &K, &kc);
    const struct weft_flux_opts o = {.kernels = K, .kctx = kc};
    const double tol = 1e-4;
    CHECK(one_case(&o, "tiny-g", G16, "output", WEFT_DTYPE_F32) <= tol);
    CHECK(one_case(&o, "tiny-g", G15, "output", WEFT_DTYPE_F32) <= tol);
    CHECK(one_case(&o, fam->extra_model, GEXTRA, "output", WEFT_DTYPE_F32) <= tol);
    CHECK(one_case(&o, "tiny-bf16", GBF, "output", WEFT_DTYPE_F32) <= tol);
    for (int bf_products = 1; bf_products >= 0; bf_products--) {
        if (K->set_compute(kc, bf_products ? WEFT_DTYPE_BF16 : WEFT_DTYPE_F32) != WEFT_OK)
            continue; /* no bf16 products on this CPU */
        CHECK(one_case(&o, "tiny-bf16", GBF, "output_bf16", WEFT_DTYPE_BF16) <= 1e-2);
    }
    /* and not by accident: the f32 pass is far from Diffusers' bf16 one */
    CHECK(one_case(&o, "tiny-bf16", GBF, "output_bf16", WEFT_DTYPE_F32) > 1e-2);

    /* Flux2Pipeline's loop: its sigmas exactly, its final latents within 1e-4 */
    weft_status_t st;
    struct weft_flux *m;
    {
        m = load("tiny-g", &o, WEFT_DTYPE_F32, &st);
        CHECK_OK(st);
        float *lat;
        double el = loop(m, L16, 16, 16, &lat);
        free(lat);
        double el2 = loop(m, L15, 15, 13, &lat);
        free(lat);
        printf("%s 4-step loop: 16x16 t8 rel L2 %.3g, 15x13 t7%s %.3g\n",
               fam->loops ? "Flux2Pipeline" : "QwenImagePipeline", el,
               fam->loops ? "" : " with true CFG 4", el2);
        CHECK(el <= tol && el2 <= tol);
        weft_flux_destroy(m);
    }
    /* the pipeline in bf16 against Diffusers' in bf16: with the CPU's bf16 products, then f32 */
    for (int bf_products = 1; bf_products >= 0; bf_products--) {
        if (K->set_compute(kc, bf_products ? WEFT_DTYPE_BF16 : WEFT_DTYPE_F32) != WEFT_OK)
            continue;
        m = load("tiny-bf16", &o, WEFT_DTYPE_BF16, &st);
        CHECK_OK(st);
        float *lat;
        const double eb = loop(m, LBF, 15, 13, &lat);
        printf("%s 4-step loop in bf16 (%s products), 15x13 t7: rel L2 %.3g\n",
               fam->loops ? "Flux2Pipeline" : "QwenImagePipeline", bf_products ? "bf16" : "f32",
               eb);
        CHECK(eb <= 1e-2);
        free(lat);
        if (!fam->loops) {
            /* With true CFG 4 the two passes' bf16 differences add up in 4 pred - 3 neg: a
             * measurement, printed, not held to the 1e-2 bar (1.1e-2 when written) */
            char cfg_bf[160];
            snprintf(cfg_bf, sizeof(cfg_bf),
                     "tests/data/qwenimage/golden/loop_tiny-bf16_15x13_t7_cfg_bf16.safetensors");
            const double ec = loop(m, cfg_bf, 15, 13, &lat);
            printf("QwenImagePipeline 4-step loop in bf16 with true CFG 4: rel L2 %.3g (measured, "
                   "not held to 1e-2)\n", ec);
            CHECK(ec < 0.05); /* a broken combination gives O(1) */
            free(lat);
        }
        weft_flux_destroy(m);
    }
    K->set_compute(kc, WEFT_DTYPE_F32);

    /* a guided model (FLUX.2's) without a guidance value is refused */
    if (fam->loops) {
    m = load("tiny-g", &o, WEFT_DTYPE_F32, &st);
    CHECK_OK(st);
    float x[16 * 4] = {0}, y[16 * 4], t = 0.5f, ids[4 * 4] = {0};
    struct weft_flux_inputs in = {.batch = 1, .s_img = 4, .s_txt = 0, .hidden = x,
                                  .timestep = &t, .img_ids = ids};
    test_logged[0] = '\0';
    CHECK(weft_flux_forward(m, &in, y) == WEFT_ERR_INVALID);
    CHECK_TEXT_HAS("no guidance", test_logged, "guidance");
    weft_flux_destroy(m);
    }

    /* the check must be able to fail: one weight of the fused Q | K | V | gate | value Linear */
    char dir[] = "/tmp/weft_flux2_corrupt_XXXXXX";
    CHECK(mkdtemp(dir));
    corrupt_copy("tiny-g", dir, fam->corrupt);
    struct weft_flux_opts oc = o;
    struct weft_flux *bad;
    CHECK_OK(weft_flux_load(dir, &oc, &bad, TERR));
    float *out;
    double e = fwd(bad, G16, "output", NULL, &out, &st);
    CHECK_OK(st);
    printf("one corrupted weight: rel L2 %.3g (must exceed %.0e)\n", e, tol);
    CHECK(e > tol);
    free(out);
    weft_flux_destroy(bad);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    K->destroy(kc);
    return 0;
}

struct rank_ctx {
    struct weft_mesh_coord me;
    const struct weft_par_comm *comm;
};

/* This rank's layout of tiny-g or tiny-bf16 with the built-in plan, with one rule's style
 * replaced when `key` is given. */
static struct weft_tp_layout *layout(const char *name, const char *key, enum weft_tp_style style)
{
    char dir[1024];
    model_path(dir, sizeof(dir), name);
    struct weft_ckpt *ck;
    struct weft_model_info info;
    struct weft_tp_plan plan;
    CHECK_OK(weft_ckpt_open(dir, &ck, TERR));
    CHECK_OK(weft_model_info_get(ck, &info, TERR));
    CHECK(weft_tp_plan_builtin(info.class_name, &plan));
    for (int i = 0; key && i < plan.n; i++)
        if (strcmp(plan.rules[i].key, key) == 0)
            plan.rules[i].style = style, plan.rules[i].n_blocks = 0;
    struct weft_tp_layout *lay;
    CHECK_OK(weft_tp_resolve(&plan, ck, &info, mesh.tp, mesh.tp, &lay, TERR));
    weft_ckpt_close(ck);
    return lay;
}

static struct weft_flux_opts mesh_opts(const struct rank_ctx *rc, const struct weft_kernels *K,
                                       struct weft_kctx *kc, const struct weft_tp_layout *lay,
                                       bool anything)
{
    struct weft_flux_opts o = {.kernels = K, .kctx = kc, .comm = rc->comm};
    o.tp_rank = rc->me.tp, o.tp_size = mesh.tp, o.tp_layout = lay;
    o.cp = (struct weft_cp_layout){mesh.ring, mesh.ulysses, anything, WEFT_RING_P2P};
    o.ring_rank = rc->me.ring, o.ulysses_rank = rc->me.ulysses;
    return o;
}

static const struct {
    const char *golden, *loop;
    int64_t gh, gw, s_txt;
} shapes[] = {{G16, L16, 16, 16, 8}, {G15, L15, 15, 13, 7}};

static int mesh_rank(struct weft_transport *transport, void *arg)
{
    (void)arg;
    test_quiet();
    struct rank_ctx rc = {0};
    const int rank = weft_transport_rank(transport);
    weft_mesh_coord(&mesh, rank, &rc.me);
    struct weft_par_transport *pt;
    CHECK_OK(weft_par_transport_create(transport, &mesh, 0, &pt, TERR));
    rc.comm = weft_par_transport_comm(pt);
    if (mesh.cfg == 2) /* the loops' true CFG (Qwen-Image's _cfg golden) runs on the halves */
        cfg_comm = rc.comm, cfg_half = rc.me.cfg;
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    test_kernels_create(1, &K, &kc);
    weft_par_transport_set_device(pt, K, kc);
    const struct weft_flux_opts single = {.kernels = K, .kctx = kc};
    struct weft_tp_layout *lay = layout("tiny-g", NULL, WEFT_TP_REPLICATE);
    const int W = mesh.ring * mesh.ulysses;
    weft_status_t st;
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        struct weft_flux *one = load("tiny-g", &single, WEFT_DTYPE_F32, &st);
        CHECK_OK(st);
        float *ref, *out, *out2, *ref_loop, *lat;
        const int64_t s_img = shapes[s].gh * shapes[s].gw;
        fwd(one, shapes[s].golden, "output", NULL, &ref, &st);
        CHECK_OK(st);
        (void)loop(one, shapes[s].loop, shapes[s].gh, shapes[s].gw, &ref_loop);
        weft_flux_destroy(one);
        const bool divides = s_img % W == 0 && shapes[s].s_txt % W == 0;
        for (int anything = 0; anything <= 1; anything++) {
            struct weft_flux_opts o = mesh_opts(&rc, K, kc, lay, anything);
            struct weft_flux *m = load("tiny-g", &o, WEFT_DTYPE_F32, &st);
            CHECK_OK(st);
            test_logged[0] = '\0';
            double e = fwd(m, shapes[s].golden, "output", ref, &out, &st);
            if (!anything && !divides) {
                CHECK(st == WEFT_ERR_CONFIG);
                CHECK_TEXT_HAS("a plain layout", test_logged, "does not divide");
                free(out);
                weft_flux_destroy(m);
                continue;
            }
            CHECK_OK(st);
            double eg = fwd(m, shapes[s].golden, "output", NULL, &out2, &st);
            CHECK_OK(st);
            const double elg = loop(m, shapes[s].loop, shapes[s].gh, shapes[s].gw, &lat);
            const double el = rel_l2(lat, ref_loop, s_img * 16);
            char loops[128];
            snprintf(loops, sizeof(loops), "; 4-step loop vs one device %.3g, vs %s %.3g", el,
                     fam->loops ? "Flux2Pipeline" : "QwenImagePipeline", elg);
            if (rank == 0)
                printf("cfg %d x ring %d x ulysses %d x tp %d %s, %lld image + %lld text tokens: "
                       "forward vs one device %.3g, vs Diffusers %.3g%s\n",
                       mesh.cfg, mesh.ring, mesh.ulysses, mesh.tp, anything ? "anything" : "plain",
                       (long long)s_img, (long long)shapes[s].s_txt, e, eg, loops);
            CHECK(e <= 1e-5);
            CHECK(eg <= 1e-4);
            CHECK(el <= 1e-5);
            CHECK(elg <= 1e-4);
            free(out), free(out2), free(lat);
            weft_flux_destroy(m);
        }
        free(ref), free(ref_loop);
    }
    /* bf16: the model and its products in bf16, against one device on the same path */
    {
        struct weft_tp_layout *lbf = layout("tiny-bf16", NULL, WEFT_TP_REPLICATE);
        struct weft_flux *one = load("tiny-bf16", &single, WEFT_DTYPE_BF16, &st);
        CHECK_OK(st);
        float *ref, *out;
        fwd(one, GBF, "output_bf16", NULL, &ref, &st);
        CHECK_OK(st);
        weft_flux_destroy(one);
        struct weft_flux_opts o = mesh_opts(&rc, K, kc, lbf, true);
        struct weft_flux *m = load("tiny-bf16", &o, WEFT_DTYPE_BF16, &st);
        CHECK_OK(st);
        double e = fwd(m, GBF, "output_bf16", ref, &out, &st);
        CHECK_OK(st);
        if (rank == 0)
            printf("ring %d x ulysses %d x tp %d in bf16: vs one device %.3g\n", mesh.ring,
                   mesh.ulysses, mesh.tp, e);
        CHECK(e <= 1e-2);
        free(ref), free(out);
        weft_flux_destroy(m);
        weft_tp_layout_destroy(lbf);
    }
    /* the fused layers sharded as plain layers: refused at load, naming the layer */
    static const struct {
        const char *key, *module;
    } fused[] = {
        {"single_transformer_blocks.*.attn.to_qkv_mlp_proj",
         "single_transformer_blocks.0.attn.to_qkv_mlp_proj"},
        {"transformer_blocks.*.ff.linear_in", "transformer_blocks.0.ff.linear_in"},
        {"single_transformer_blocks.*.attn.to_out", "single_transformer_blocks.0.attn.to_out"},
    };
    for (size_t i = 0; fam->fused && mesh.tp > 1 && i < sizeof(fused) / sizeof(fused[0]); i++) {
        const enum weft_tp_style plain = i == 2 ? WEFT_TP_ROWWISE : WEFT_TP_COLWISE;
        struct weft_tp_layout *wrong = layout("tiny-g", fused[i].key, plain);
        struct weft_flux_opts o = mesh_opts(&rc, K, kc, wrong, true);
        weft_error_clear(TERR);
        CHECK(load("tiny-g", &o, WEFT_DTYPE_F32, &st) == NULL && st == WEFT_ERR_CONFIG);
        CHECK_TEXT_HAS("a fused layer as a plain one", weft_error_text(TERR), fused[i].module,
                       i == 2 ? "packed_rowwise" : "packed_colwise");
        if (rank == 0)
            printf("refused: %s\n", weft_error_text(TERR));
        weft_tp_layout_destroy(wrong);
    }
    K->destroy(kc);
    weft_tp_layout_destroy(lay);
    weft_par_transport_destroy(pt);
    return 0;
}

static int pp_rank(struct weft_transport *transport, void *arg)
{
    (void)arg;
    test_quiet();
    const int rank = weft_transport_rank(transport);
    struct weft_mesh pm = {1, 1, 1, 1, n_stages};
    struct weft_par_transport *pt;
    CHECK_OK(weft_par_transport_create(transport, &pm, 0, &pt, TERR));
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    test_kernels_create(1, &K, &kc);
    weft_par_transport_set_device(pt, K, kc);
    struct weft_flux_opts o = {.kernels = K, .kctx = kc, .comm = weft_par_transport_comm(pt)};
    weft_status_t st;
    struct weft_flux *one = load("tiny-g", &o, WEFT_DTYPE_F32, &st);
    CHECK_OK(st);
    float *want, *got;
    const double eg = fwd(one, G15, "output", NULL, &want, &st);
    CHECK_OK(st);
    const size_t full = weft_flux_weight_bytes(one);
    weft_flux_destroy(one);
    o.stage = (struct weft_flux_stage){.on = true, .unit_first = bounds[rank],
                                       .unit_last = bounds[rank + 1], .prev = -1, .next = -1,
                                       .root = -1};
    for (int r = 0; r < n_stages; r++) {
        const bool any = bounds[r] < bounds[r + 1];
        if (any && r < rank)
            o.stage.prev = r;
        if (any && r > rank && o.stage.next < 0)
            o.stage.next = r;
        if (any)
            o.stage.root = r;
    }
    if (bounds[rank] == bounds[rank + 1])
        o.stage.prev = o.stage.next = -1;
    struct weft_flux *m = load("tiny-g", &o, WEFT_DTYPE_F32, &st);
    CHECK_OK(st);
    CHECK(weft_flux_weight_bytes(m) < full || n_stages == 1);
    const double e = fwd(m, G15, "output", want, &got, &st);
    CHECK_OK(st);
    CHECK(e == 0.0); /* every element equal */
    if (rank == 0)
        printf("pipeline of %d stages: the output equals one device bit for bit (vs Diffusers "
               "%.3g); rank 0 holds %zu of %zu weight bytes\n",
               n_stages, eg, weft_flux_weight_bytes(m), full);
    free(want), free(got);
    weft_flux_destroy(m);
    K->destroy(kc);
    weft_par_transport_destroy(pt);
    return 0;
}

/* The family's pipeline folder in a runtime on this backend (staged). */
static struct weft_runtime *folder_runtime(const struct weft_kernels *K, struct weft_kctx *kc,
                                           char *dir, size_t len)
{
    model_path(dir, len, "pipeline");
    const struct weft_rt_opts opts = {K, kc, true};
    struct weft_runtime *rt;
    CHECK_OK(weft_runtime_create(&opts, &rt));
    static struct weft_rt_assign a;
    weft_rt_assign_single(dir, &a);
    CHECK_OK(weft_runtime_assign(rt, &a, NULL, TERR));
    return rt;
}

/* The largest difference in 8-bit levels between rgb and the golden's image_u8 (n values),
 * and how many differ. */
static int64_t image_levels(struct golden *g, const uint8_t *rgb, int64_t n, int64_t *differ)
{
    const struct weft_st_tensor *u8t = weft_st_find(g->f, "image_u8");
    CHECK(u8t && u8t->numel == n);
    uint8_t *want = malloc((size_t)n);
    CHECK(want);
    CHECK_OK(weft_st_read(g->f, u8t, want, WEFT_DTYPE_U8, TERR));
    int64_t worst = 0;
    *differ = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t d = llabs((long long)rgb[i] - (long long)want[i]);
        *differ += d != 0;
        worst = d > worst ? d : worst;
    }
    free(want);
    return worst;
}

/* The family's pipeline VAE alone against Diffusers' decode (golden latents and image in
 * NCHW; the frame axis dropped for Qwen-Image's). */
static double vae_alone(const struct weft_kernels *K, struct weft_kctx *kc, const char *dir,
                        int64_t lh, int64_t lw)
{
    char vdir[1100], rel[160];
    snprintf(vdir, sizeof(vdir), "%s/vae", dir);
    snprintf(rel, sizeof(rel), "tests/data/%s/golden/vae_decode_%lldx%lld.safetensors", fam->name,
             (long long)lh, (long long)lw);
    const struct weft_vae_opts vo = {K, kc};
    struct weft_vae *vae;
    CHECK_OK(weft_vae_load(vdir, &vo, &vae, TERR));
    const struct weft_vae_config *c = weft_vae_get_config(vae);
    struct golden gv;
    golden_open(&gv, rel);
    int64_t nz, nx;
    float *z = golden_need(&gv, "latents", &nz), *x = golden_need(&gv, "image", &nx);
    const int64_t L = c->latent_channels, px = lh * lw, opx = px * c->scale * c->scale;
    CHECK_EQ(nz, L * px);
    CHECK_EQ(nx, c->out_channels * opx);
    float *zh = malloc((size_t)nz * sizeof(float)), *xw = malloc((size_t)nx * sizeof(float));
    float *xh = malloc((size_t)nx * sizeof(float));
    CHECK(zh && xw && xh);
    for (int64_t ch = 0; ch < L; ch++) /* NCHW to the pixels-as-rows layout */
        for (int64_t i = 0; i < px; i++)
            zh[i * L + ch] = z[ch * px + i];
    CHECK_OK(weft_vae_decode(vae, zh, lh, lw, NULL, xw, TERR));
    for (int64_t ch = 0; ch < c->out_channels; ch++)
        for (int64_t i = 0; i < opx; i++)
            xh[ch * opx + i] = xw[i * c->out_channels + ch];
    const double e = rel_l2(xh, x, nx);
    printf("%s decode %lldx%lld latents: rel L2 %.3g\n",
           c->version == 3 ? WEFT_VAE3_CLASS : WEFT_VAE2_CLASS, (long long)lh, (long long)lw, e);
    free(z), free(x), free(zh), free(xw), free(xh);
    golden_close(&gv);
    weft_vae_destroy(vae);
    return e;
}

/* A QwenImagePipeline folder through the image pipeline: the prompt file's mask trims the
 * prompt to its 7 tokens, the negative prompt steers true CFG 4, the final latents are within
 * 1e-4 of QwenImagePipeline's and the 8-bit image (AutoencoderKLQwenImage on one frame) within
 * one level; the VAE alone within 1e-4 of Diffusers' decode; a mask with a hole is refused
 * naming the tokens. */
static int qwen_pipeline_main(void)
{
    test_quiet();
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    test_kernels_create(0, &K, &kc);
    char dir[1024], pos[1100], neg[1100];
    struct weft_runtime *rt = folder_runtime(K, kc, dir, sizeof(dir));
    snprintf(pos, sizeof(pos), "%s/prompts/cat.safetensors", dir);
    snprintf(neg, sizeof(neg), "%s/prompts/blurry.safetensors", dir);
    struct weft_error err = WEFT_ERROR_INIT;
    const struct weft_model *m = weft_runtime_model(rt);
    CHECK(strcmp(m->pipeline_class, WEFT_QWEN_PIPELINE_CLASS) == 0 && m->has_vae);
    CHECK(m->flux.version == 3 && m->vae.version == 3 && m->side_unit == 16);
    CHECK(m->sched.shift_terminal == 0.02);
    struct weft_prompt_embeds pe, ne;
    CHECK_OK(weft_model_prompt_read(m, pos, &pe, &err));
    CHECK_OK(weft_model_prompt_read(m, neg, &ne, &err));
    CHECK_EQ(pe.tokens, 7); /* 9, of which the mask keeps 7 */
    CHECK_EQ(ne.tokens, 7);
    struct golden g;
    golden_open(&g, "tests/data/qwenimage/golden/pipeline_cat_128x96_cfg.safetensors");
    int64_t n, nw;
    float *init = golden_need(&g, "latents_init", &n);
    float *want = golden_need(&g, "latents_final", &nw);
    struct weft_rt_image img = {
        .prompt_embeds = pe.embeds, .s_txt = pe.tokens, .pooled = pe.pooled, .height = 128,
        .width = 96, .steps = 4, .neg_prompt_embeds = ne.embeds, .neg_pooled = ne.pooled,
        .true_cfg_scale = 4.0f, .latents_init = init, .decode = true, .keep_latents = true,
        .keep_rgb = true, .png_prompt_index = -1,
    };
    struct weft_rt_result r;
    CHECK_OK(weft_runtime_image(rt, &img, NULL, NULL, NULL, &r, &err));
    CHECK_EQ(r.tokens * r.channels, nw);
    const double e = rel_l2(r.latents, want, nw);
    const int64_t n_px = (int64_t)128 * 96 * 3;
    int64_t differ;
    const int64_t worst = image_levels(&g, r.rgb, n_px, &differ);
    printf("QwenImagePipeline cat (masked to 7 tokens) 128x96, true CFG 4, 4 steps: "
           "latents_final rel L2 %.3g; %lld of %lld 8-bit values differ from Diffusers' image "
           "(max %lld level)\n", e, (long long)differ, (long long)n_px, (long long)worst);
    CHECK(e <= 1e-4);
    CHECK(worst <= 1);
    weft_rt_result_cleanup(&r);
    CHECK(vae_alone(K, kc, dir, 7, 5) <= 1e-4); /* the VAE alone against Diffusers' decode */
    /* a mask with a hole: refused, naming the tokens */
    char holed[] = "/tmp/weft_qwen_mask_XXXXXX";
    const int fd = mkstemp(holed);
    CHECK(fd >= 0);
    close(fd);
    const float emb[3 * 24] = {0}, mask[3] = {1.0f, 0.0f, 1.0f};
    const struct st_spec ts[] = {{"prompt_embeds", "F32", 3, {1, 3, 24}, emb, sizeof(emb)},
                                 {"prompt_embeds_mask", "F32", 2, {1, 3}, mask, sizeof(mask)}};
    CHECK(st_write(holed, ts, 2, NULL) == 0);
    struct weft_prompt_embeds bad;
    CHECK_FAILS(weft_model_prompt_read(m, holed, &bad, TERR), WEFT_ERR_UNSUPPORTED,
                "masked token (1) before a kept one (2)");
    unlink(holed);
    free(init), free(want);
    golden_close(&g);
    weft_prompt_embeds_cleanup(&pe);
    weft_prompt_embeds_cleanup(&ne);
    weft_runtime_destroy(rt);
    K->destroy(kc);
    return 0;
}

static int pipeline_main(void)
{
    test_quiet();
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    test_kernels_create(0, &K, &kc);
    char dir[1024], prompt[1100];
    struct weft_runtime *rt = folder_runtime(K, kc, dir, sizeof(dir));
    snprintf(prompt, sizeof(prompt), "%s/prompts/cat.safetensors", dir);
    struct weft_error err = WEFT_ERROR_INIT;
    const struct weft_model *m = weft_runtime_model(rt);
    CHECK(strcmp(m->pipeline_class, WEFT_FLUX2_PIPELINE_CLASS) == 0 && m->has_vae);
    CHECK(m->flux.version == 2 && m->vae.version == 2 && m->side_unit == 8);
    CHECK(m->sched.mu_rule == WEFT_MU_EMPIRICAL);
    char why[300];
    CHECK_TEXT_HAS("no text encoder", weft_model_text_missing(m, why, sizeof(why)),
                   "not native", "prompt_embeds");
    struct weft_prompt_embeds pe;
    CHECK_OK(weft_model_prompt_read(m, prompt, &pe, &err));
    CHECK_EQ(pe.tokens, 12);
    /* a FLUX.1 embeddings file (with a pooled embedding) is refused by name */
    char fluxp[1100];
    snprintf(fluxp, sizeof(fluxp), "%s/tests/data/random/flux-tiny/prompts/red-fox.safetensors",
             getenv("WEFT_SOURCE_ROOT"));
    struct weft_prompt_embeds bad;
    CHECK_FAILS(weft_model_prompt_read(m, fluxp, &bad, TERR), WEFT_ERR_FORMAT,
                "pooled_prompt_embeds");
    struct golden g;
    golden_open(&g, "tests/data/flux2/golden/pipeline_cat_96x80.safetensors");
    int64_t n, nw;
    float *init = golden_need(&g, "latents_init", &n);
    float *want = golden_need(&g, "latents_final", &nw);
    const struct weft_rt_image img = {
        .prompt_embeds = pe.embeds, .s_txt = pe.tokens, .pooled = pe.pooled, .height = 96,
        .width = 80, .steps = 4, .guidance = 4.0f, .latents_init = init, .decode = true,
        .keep_latents = true, .keep_rgb = true, .png_prompt_index = -1,
    };
    struct weft_rt_result r;
    CHECK_OK(weft_runtime_image(rt, &img, NULL, NULL, NULL, &r, &err));
    CHECK_EQ(r.tokens * r.channels, nw);
    const int64_t n_px = (int64_t)96 * 80 * 3;
    int64_t differ;
    const int64_t worst = image_levels(&g, r.rgb, n_px, &differ);
    const double e = rel_l2(r.latents, want, nw);
    printf("Flux2Pipeline cat 96x80, 4 steps: latents_final rel L2 %.3g; %lld of %lld 8-bit "
           "values differ from Diffusers' image (max %lld level)\n",
           e, (long long)differ, (long long)n_px, (long long)worst);
    CHECK(e <= 1e-4);
    CHECK(worst <= 1);
    CHECK(vae_alone(K, kc, dir, 7, 5) <= 1e-4); /* the VAE alone against Diffusers' decode */
    free(init), free(want);
    golden_close(&g);
    weft_rt_result_cleanup(&r);
    weft_prompt_embeds_cleanup(&pe);
    weft_runtime_destroy(rt);
    K->destroy(kc);
    return 0;
}

int main(int argc, char **argv)
{
    CHECK(argc >= 3);
    for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++)
        if (strcmp(argv[1], families[i].name) == 0)
            fam = &families[i];
    CHECK(fam);
    golden_names();
    argc--, argv++;
    if (strcmp(argv[1], "forward") == 0)
        return forward_main();
    if (strcmp(argv[1], "pipeline") == 0)
        return fam->loops ? pipeline_main() : qwen_pipeline_main();
    struct weft_transport_opts opts;
    launch_opts(&opts);
    if (strcmp(argv[1], "pp") == 0) {
        CHECK(argc == 3);
        char list[256], *save = NULL;
        snprintf(list, sizeof(list), "%s", argv[2]);
        int n = 0;
        for (char *t = strtok_r(list, ",", &save); t && n < 17; t = strtok_r(NULL, ",", &save))
            bounds[n++] = atoi(t);
        n_stages = n - 1;
        CHECK(n_stages >= 1 && n_stages <= 16);
        return launch_run(n_stages, &opts, pp_rank, NULL, 240, -1);
    }
    CHECK(argc == 4 || argc == 5);
    mesh = (struct weft_mesh){1, atoi(argv[1]), atoi(argv[2]), atoi(argv[3]), 1,
                              argc == 5 ? atoi(argv[4]) : 1};
    return launch_run(weft_mesh_size(&mesh), &opts, mesh_rank, NULL, 240, -1);
}
