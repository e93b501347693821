/* CFG parallelism on real processes: the 4-step loop with true CFG (a negative prompt,
 * true_cfg_scale 3) on a dp 1 x cfg 2 x ring x ulysses x tp mesh against one device running
 * both passes (<= 1e-5, f32), on an even shape (16x16 image tokens, 8 text) and an uneven one
 * (15x13, 7; the anything modes where context parallelism needs them). Each half runs one pass
 * a step: its cfg group all-gathers exactly once a step, and its context-parallel and
 * tensor-parallel groups carry the calls of one pass, not two. Without true CFG both halves
 * run the prompt's pass (the one-device loop without CFG) and the cfg group is silent.
 * usage: test_flux_cfg RING ULYSSES TP */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "golden.h"
#include "integration/launch.h"
#include "model/mesh.h"
#include "model/plan.h"
#include "worker/denoise.h"
#include "worker/noise.h"
#include "worker/par_transport.h"

#define STEPS 4

static char model_dir[1024];
static struct weft_mesh mesh;

static struct weft_flux *load(const struct weft_mesh_coord *me, const struct weft_par_comm *comm,
                              struct weft_tp_layout *lay, bool anything,
                              const struct weft_kernels *K, struct weft_kctx *kc)
{
    struct weft_flux_opts o = {.kernels = K, .kctx = kc};
    if (me) {
        o.tp_rank = me->tp, o.tp_size = mesh.tp, o.tp_layout = lay;
        o.cp = (struct weft_cp_layout){mesh.ring, mesh.ulysses, anything, WEFT_RING_ALLGATHER};
        o.ring_rank = me->ring, o.ulysses_rank = me->ulysses;
        o.comm = comm;
    }
    struct weft_flux *m;
    CHECK_OK(weft_flux_load(model_dir, &o, &m, TERR));
    return m;
}

/* STEPS steps from seed 1234's noise on the golden's prompt; the negative prompt is the same
 * embeddings scaled by -0.5 (cfg true). comm NULL: one rank runs both passes. */
static float *loop(struct weft_flux *m, const char *golden_rel, int64_t gh, int64_t gw, bool cfg,
                   const struct weft_par_comm *comm, int half)
{
    struct golden g;
    golden_open(&g, golden_rel);
    int64_t npe, npo;
    float *pe = golden_need(&g, "prompt_embeds", &npe);
    float *pooled = golden_need(&g, "pooled_prompt_embeds", &npo);
    float *ne = malloc((size_t)npe * sizeof(float)), *no = malloc((size_t)npo * sizeof(float));
    float *lat = malloc((size_t)(gh * gw * 64) * sizeof(float));
    CHECK(ne && no && lat);
    for (int64_t i = 0; i < npe; i++)
        ne[i] = -0.5f * pe[i];
    for (int64_t i = 0; i < npo; i++)
        no[i] = -0.5f * pooled[i];
    weft_noise_normal(1234, 0, gh * gw * 64, lat);
    struct weft_sched_config sc;
    weft_sched_config_flux_default(&sc);
    static struct weft_schedule sched;
    CHECK_OK(weft_sched_plan(&sc, STEPS, gh * gw, &sched, TERR));
    struct weft_denoise_params p = {.grid_h = gh, .grid_w = gw, .prompt_embeds = pe,
                                    .s_txt = npe / 32, .pooled = pooled, .guidance = 3.5f,
                                    .neg_prompt_embeds = cfg ? ne : NULL,
                                    .neg_pooled = cfg ? no : NULL, .true_cfg_scale = 3.0f,
                                    .cfg_comm = comm, .cfg_half = half, .schedule = &sched};
    CHECK_OK(weft_denoise(m, &p, lat, TERR));
    free(pe), free(pooled), free(ne), free(no);
    golden_close(&g);
    return lat;
}

static long calls(const struct weft_par_stats *s, enum weft_mesh_group g)
{
    long n = 0;
    for (int op = 0; op < WEFT_PAR_OP_COUNT; op++)
        n += s->calls[g][op];
    return n;
}

static const struct {
    const char *loop;
    int64_t gh, gw, s_img, s_txt;
} shapes[] = {
    {"tests/data/flux1/golden/loop_tiny-g_16x16_t8.safetensors", 16, 16, 256, 8},
    {"tests/data/flux1/golden/loop_tiny-g_15x13_t7.safetensors", 15, 13, 195, 7},
};

static int rank_main(struct weft_transport *transport, void *arg)
{
    (void)arg;
    test_quiet();
    const int rank = weft_transport_rank(transport);
    struct weft_mesh_coord me;
    weft_mesh_coord(&mesh, rank, &me);
    struct weft_par_transport *pt;
    CHECK_OK(weft_par_transport_create(transport, &mesh, 0, &pt, TERR));
    const struct weft_par_comm *comm = weft_par_transport_comm(pt);
    struct weft_ckpt *ck;
    struct weft_model_info info;
    struct weft_tp_plan plan;
    struct weft_tp_layout *lay;
    CHECK_OK(weft_ckpt_open(model_dir, &ck, TERR));
    CHECK_OK(weft_model_info_get(ck, &info, TERR));
    CHECK(weft_tp_plan_builtin(info.class_name, &plan));
    CHECK_OK(weft_tp_resolve(&plan, ck, &info, mesh.tp, mesh.tp, &lay, TERR));
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    test_kernels_create(1, &K, &kc);
    weft_par_transport_set_device(pt, K, kc);
    const int W = mesh.ring * mesh.ulysses;
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        const int64_t gh = shapes[s].gh, gw = shapes[s].gw, n = gh * gw * 64;
        const bool anything = W > 1 && (shapes[s].s_img % W || shapes[s].s_txt % W);
        struct weft_flux *one = load(NULL, NULL, NULL, false, K, kc);
        float *ref_cfg = loop(one, shapes[s].loop, gh, gw, true, NULL, 0);
        float *ref_off = loop(one, shapes[s].loop, gh, gw, false, NULL, 0);
        weft_flux_destroy(one);
        struct weft_flux *m = load(&me, comm, lay, anything, K, kc);
        /* a pass of this layout without CFG: what one pass costs each group */
        weft_par_transport_reset_stats(pt);
        float *off = loop(m, shapes[s].loop, gh, gw, false, comm, me.cfg);
        struct weft_par_stats st_off, st_cfg;
        weft_par_transport_stats(pt, &st_off);
        weft_par_transport_reset_stats(pt);
        float *lat = loop(m, shapes[s].loop, gh, gw, true, comm, me.cfg);
        weft_par_transport_stats(pt, &st_cfg);
        const double e = rel_l2(lat, ref_cfg, n), e_off = rel_l2(off, ref_off, n);
        const double apart = rel_l2(ref_cfg, ref_off, n);
        if (rank == 0 || rank == weft_mesh_size(&mesh) - 1)
            printf("rank %d (cfg half %d) of cfg 2 x ring %d x ulysses %d x tp %d%s, %lldx%lld "
                   "t%lld: true CFG loop vs one device %.3g (CFG's effect %.3g); without CFG "
                   "%.3g; cfg group calls %ld / %ld, tp %ld / %ld, cp %ld / %ld (with / "
                   "without)\n", rank, me.cfg, mesh.ring, mesh.ulysses, mesh.tp,
                   anything ? " anything" : "", (long long)gh, (long long)gw,
                   (long long)shapes[s].s_txt, e, apart, e_off, calls(&st_cfg, WEFT_MESH_CFG),
                   calls(&st_off, WEFT_MESH_CFG), calls(&st_cfg, WEFT_MESH_TP),
                   calls(&st_off, WEFT_MESH_TP), calls(&st_cfg, WEFT_MESH_CP) +
                   calls(&st_cfg, WEFT_MESH_ULYSSES) + calls(&st_cfg, WEFT_MESH_RING),
                   calls(&st_off, WEFT_MESH_CP) + calls(&st_off, WEFT_MESH_ULYSSES) +
                   calls(&st_off, WEFT_MESH_RING));
        CHECK(e <= 1e-5);
        CHECK(e_off <= 1e-5);
        CHECK(apart > 1e-2); /* the guidance changed the result: the halves' exchange counts */
        CHECK(calls(&st_cfg, WEFT_MESH_CFG) == STEPS);
        CHECK(calls(&st_off, WEFT_MESH_CFG) == 0);
        /* one pass a step on each half: the model's own collectives as without CFG */
        for (int g = WEFT_MESH_TP; g <= WEFT_MESH_CP; g++)
            CHECK(calls(&st_cfg, (enum weft_mesh_group)g) ==
                  calls(&st_off, (enum weft_mesh_group)g));
        free(ref_cfg), free(ref_off), free(off), free(lat);
        weft_flux_destroy(m);
    }
    K->destroy(kc);
    weft_tp_layout_destroy(lay);
    weft_ckpt_close(ck);
    weft_par_transport_destroy(pt);
    return 0;
}

int main(int argc, char **argv)
{
    CHECK(argc == 4);
    mesh = (struct weft_mesh){1, atoi(argv[1]), atoi(argv[2]), atoi(argv[3]), 1, 2};
    snprintf(model_dir, sizeof(model_dir), "%s/tests/data/flux1/tiny-g",
             getenv("WEFT_SOURCE_ROOT"));
    struct weft_transport_opts opts;
    launch_opts(&opts);
    return launch_run(weft_mesh_size(&mesh), &opts, rank_main, NULL, 240, -1);
}
