/* Context parallelism on real processes: FLUX.1 forward and the full loop in every mode
 * (Ulysses, ring by all-gather or by passing K/V, unified 2-D) and with tensor parallelism,
 * against the single-device result (<= 1e-5) and Diffusers' (<= 1e-4), on an even shape
 * (16x16 image tokens, 8 text) and an uneven one (15x13, 7). Plain modes must refuse the
 * uneven shape with an error naming the length, the degree and the flag; the anything modes
 * run it. The same seed gives the same final latents as one device.
 * usage: test_flux_cp RING ULYSSES TP ag|p2p */
#include <math.h>
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

static char model_dir[1024];
static struct weft_mesh mesh;
static enum weft_ring_rotation rotation;

struct rank_ctx {
    struct weft_mesh_coord me;
    const struct weft_par_comm *comm;
    struct weft_tp_layout *lay;
};

/* Load tiny-g on one device (par NULL) or with this rank's layout. */
static struct weft_flux *load(const struct rank_ctx *rc, int anything,
                              const struct weft_kernels *K, struct weft_kctx *kc)
{
    struct weft_flux_opts o = {.kernels = K, .kctx = kc};
    if (rc) {
        o.tp_rank = rc->me.tp, o.tp_size = mesh.tp, o.tp_layout = rc->lay;
        o.cp = (struct weft_cp_layout){mesh.ring, mesh.ulysses, anything != 0, rotation};
        o.ring_rank = rc->me.ring, o.ulysses_rank = rc->me.ulysses;
        o.comm = rc->comm;
    }
    struct weft_flux *m;
    CHECK_OK(weft_flux_load(model_dir, &o, &m, TERR));
    return m;
}

/* Forward on a golden file; returns rel L2 vs `ref` (or vs Diffusers when ref is NULL) and
 * the output in *out_p. On a refused layout returns -1 with the status in *st_p. */
static double fwd(struct weft_flux *m, const char *golden_rel, const float *ref, float **out_p,
                  weft_status_t *st_p)
{
    struct golden g;
    golden_open(&g, golden_rel);
    int64_t nh, ne, n_out;
    struct weft_flux_inputs in = {0};
    float *hidden = golden_need(&g, "hidden_states", &nh);
    float *enc = golden_need(&g, "encoder_hidden_states", &ne);
    float *pooled = golden_need(&g, "pooled_projections", NULL);
    float *t = golden_need(&g, "timestep", NULL), *guid = golden_need(&g, "guidance", NULL);
    float *img_ids = golden_need(&g, "img_ids", NULL), *txt_ids = golden_need(&g, "txt_ids", NULL);
    float *want = golden_need(&g, "output", &n_out);
    in.batch = 1, in.s_img = nh / 64, in.s_txt = ne / 32;
    in.hidden = hidden, in.encoder = enc, in.pooled = pooled, in.timestep = t;
    in.guidance = guid, in.img_ids = img_ids, in.txt_ids = txt_ids;
    float *out = malloc((size_t)n_out * sizeof(float));
    *st_p = weft_flux_forward(m, &in, out);
    double err = -1;
    if (*st_p == WEFT_OK)
        err = rel_l2(out, ref ? ref : want, n_out);
    *out_p = out;
    free(hidden), free(enc), free(pooled), free(t), free(guid), free(img_ids), free(txt_ids);
    free(want);
    golden_close(&g);
    return err;
}

/* 4 steps from the seed's noise (or the golden latents_init when golden_rel is given). */
static float *loop(struct weft_flux *m, const char *golden_rel, int64_t gh, int64_t gw)
{
    struct golden g;
    golden_open(&g, golden_rel);
    int64_t npe;
    float *pe = golden_need(&g, "prompt_embeds", &npe);
    float *pooled = golden_need(&g, "pooled_prompt_embeds", NULL);
    float *lat = malloc((size_t)(gh * gw * 64) * sizeof(float));
    weft_noise_normal(1234, 0, gh * gw * 64, lat); /* the same seed on every layout */
    struct weft_sched_config sc;
    weft_sched_config_flux_default(&sc);
    static struct weft_schedule sched;
    CHECK_OK(weft_sched_plan(&sc, 4, gh * gw, &sched, TERR));
    struct weft_denoise_params p = {.grid_h = gh, .grid_w = gw, .prompt_embeds = pe,
                                    .s_txt = npe / 32, .pooled = pooled, .guidance = 3.5f,
                                    .schedule = &sched};
    CHECK_OK(weft_denoise(m, &p, lat, TERR));
    free(pe), free(pooled);
    golden_close(&g);
    return lat;
}

static const struct {
    const char *fwd, *loop;
    int64_t gh, gw, s_img, s_txt;
} shapes[] = {
    {"tests/data/flux1/golden/fwd_tiny-g_16x16_t8.safetensors",
     "tests/data/flux1/golden/loop_tiny-g_16x16_t8.safetensors", 16, 16, 256, 8},
    {"tests/data/flux1/golden/fwd_tiny-g_15x13_t7.safetensors",
     "tests/data/flux1/golden/loop_tiny-g_15x13_t7.safetensors", 15, 13, 195, 7},
};

static int rank_main(struct weft_transport *transport, void *arg)
{
    (void)arg;
    test_quiet();
    struct rank_ctx rc = {0};
    int rank = weft_transport_rank(transport);
    weft_mesh_coord(&mesh, rank, &rc.me);
    struct weft_par_transport *pt;
    CHECK_OK(weft_par_transport_create(transport, &mesh, 0, &pt, TERR));
    rc.comm = weft_par_transport_comm(pt);
    struct weft_ckpt *ck;
    struct weft_model_info info;
    struct weft_tp_plan plan;
    CHECK_OK(weft_ckpt_open(model_dir, &ck, TERR));
    CHECK_OK(weft_model_info_get(ck, &info, TERR));
    CHECK(weft_tp_plan_builtin(info.class_name, &plan));
    CHECK_OK(weft_tp_resolve(&plan, ck, &info, mesh.tp, mesh.tp, &rc.lay, TERR));
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    test_kernels_create(1, &K, &kc);
    weft_par_transport_set_device(pt, K, kc);
    const int W = mesh.ring * mesh.ulysses;
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        struct weft_flux *one = load(NULL, 0, K, kc);
        weft_status_t st;
        float *ref, *ref_loop;
        fwd(one, shapes[s].fwd, NULL, &ref, &st);
        CHECK_OK(st);
        ref_loop = loop(one, shapes[s].loop, shapes[s].gh, shapes[s].gw);
        weft_flux_destroy(one);
        bool divides = shapes[s].s_img % W == 0 && shapes[s].s_txt % W == 0;
        for (int anything = 0; anything <= 1; anything++) {
            struct weft_flux *m = load(&rc, anything, K, kc);
            float *out;
            test_logged[0] = '\0'; /* the forward pass has no err: it logs its refusal */
            double e = fwd(m, shapes[s].fwd, ref, &out, &st);
            if (!anything && !divides) {
                /* plain modes refuse, naming the length, the degree and the flag */
                CHECK(st == WEFT_ERR_CONFIG);
                char deg[32];
                snprintf(deg, sizeof(deg), "degree %d", W);
                CHECK_TEXT_HAS("a plain layout", test_logged, deg, "_anything = true",
                               "does not divide");
                if (rank == 0)
                    printf("ring %d x ulysses %d x tp %d %s, %lldx%lld: refused: %s\n",
                           mesh.ring, mesh.ulysses, mesh.tp, anything ? "anything" : "plain",
                           (long long)shapes[s].gh, (long long)shapes[s].gw,
                           test_logged);
                free(out);
                weft_flux_destroy(m);
                continue;
            }
            CHECK_OK(st);
            free(out);
            double eg = fwd(m, shapes[s].fwd, NULL, &out, &st);
            float *lat = loop(m, shapes[s].loop, shapes[s].gh, shapes[s].gw);
            double el = rel_l2(lat, ref_loop, shapes[s].gh * shapes[s].gw * 64);
            if (rank == 0)
                printf("ring %d x ulysses %d x tp %d %s %s, %lldx%lld t%lld: forward vs one "
                       "device %.3g, vs Diffusers %.3g; seeded 4-step loop vs one device %.3g\n",
                       mesh.ring, mesh.ulysses, mesh.tp, rotation == WEFT_RING_P2P ? "p2p" : "ag",
                       anything ? "anything" : "plain", (long long)shapes[s].gh,
                       (long long)shapes[s].gw, (long long)shapes[s].s_txt, e, eg, el);
            CHECK(e <= 1e-5);
            CHECK(eg <= 1e-4);
            CHECK(el <= 1e-5);
            free(out), free(lat);
            weft_flux_destroy(m);
        }
        free(ref), free(ref_loop);
    }
    K->destroy(kc);
    weft_tp_layout_destroy(rc.lay);
    weft_ckpt_close(ck);
    weft_par_transport_destroy(pt);
    return 0;
}

int main(int argc, char **argv)
{
    CHECK(argc == 5);
    mesh = (struct weft_mesh){1, atoi(argv[1]), atoi(argv[2]), atoi(argv[3])};
    rotation = strcmp(argv[4], "p2p") == 0 ? WEFT_RING_P2P : WEFT_RING_ALLGATHER;
    snprintf(model_dir, sizeof(model_dir), "%s/tests/data/flux1/tiny-g",
             getenv("WEFT_SOURCE_ROOT"));
    struct weft_transport_opts opts;
    launch_opts(&opts);
    return launch_run(weft_mesh_size(&mesh), &opts, rank_main, NULL, 240, -1);
}
