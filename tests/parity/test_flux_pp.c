/* A layer pipeline (device_map's split of the transformer by blocks) on real processes: each
 * rank holds a contiguous range of FLUX.1's units (model/flux.h: embedders, each block, the
 * output layers), hands the hidden states and time embedding to the next, and the output stage
 * sends the output to every rank. The forward pass and the 4-step loop equal the single device
 * bit for bit (the same kernels on the same rows), each rank holds exactly its units' weights,
 * and a range that does not chain is refused.
 * usage: test_flux_pp B0,B1,..,Bn  (n ranks; rank r holds units [B_r, B_r+1), possibly none) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "common/alloc.h"
#include "golden_loop.h"
#include "integration/launch.h"
#include "model/devmap.h"
#include "model/flux.h"
#include "worker/denoise.h"
#include "worker/par_transport.h"

#define FWD_GOLDEN "tests/data/flux1/golden/fwd_tiny-g_15x13_t7.safetensors"
#define LOOP_GOLDEN "tests/data/flux1/golden/loop_tiny-g_16x16_t8.safetensors"

static char model_dir[1024];
static int bounds[17], n_ranks;
static const struct weft_par_comm *comm_ops;

static struct weft_flux_stage stage_of(int rank)
{
    struct weft_flux_stage s = {.on = true, .unit_first = bounds[rank],
                                .unit_last = bounds[rank + 1], .prev = -1, .next = -1, .root = -1};
    for (int r = 0; r < n_ranks; r++) {
        bool any = bounds[r] < bounds[r + 1];
        if (any && r < rank)
            s.prev = r;
        if (any && r > rank && s.next < 0)
            s.next = r;
        if (any)
            s.root = r; /* the last rank with units holds the output layers */
    }
    if (s.unit_first == s.unit_last)
        s.prev = s.next = -1;
    return s;
}

static struct weft_flux *load(const struct weft_flux_stage *stage, const struct weft_kernels *K,
                              struct weft_kctx *kc, weft_status_t *st)
{
    struct weft_flux_opts o = {.kernels = K, .kctx = kc, .comm = comm_ops};
    if (stage)
        o.stage = *stage;
    struct weft_flux *m = NULL;
    *st = weft_flux_load(model_dir, &o, &m, TERR);
    return m;
}

static float *forward(struct weft_flux *m, struct golden *g, int64_t *n_out)
{
    int64_t nh, ne;
    struct weft_flux_inputs in = {.batch = 1};
    in.hidden = golden_need(g, "hidden_states", &nh);
    in.encoder = golden_need(g, "encoder_hidden_states", &ne);
    in.pooled = golden_need(g, "pooled_projections", NULL);
    in.timestep = golden_need(g, "timestep", NULL);
    in.guidance = golden_need(g, "guidance", NULL);
    in.img_ids = golden_need(g, "img_ids", NULL);
    in.txt_ids = golden_need(g, "txt_ids", NULL);
    in.s_img = nh / 64, in.s_txt = ne / 32;
    *n_out = nh;
    float *out = malloc((size_t)nh * sizeof(float));
    CHECK(out);
    CHECK_OK(weft_flux_forward(m, &in, out));
    free((void *)in.hidden), free((void *)in.encoder), free((void *)in.pooled);
    free((void *)in.timestep), free((void *)in.guidance), free((void *)in.img_ids);
    free((void *)in.txt_ids);
    return out;
}

static int rank_main(struct weft_transport *transport, void *arg)
{
    (void)arg;
    test_quiet();
    struct weft_comm *comm = weft_transport_world(transport);
    const int rank = weft_comm_rank(comm);
    struct weft_mesh mesh = {1, 1, 1, 1, n_ranks};
    struct weft_par_transport *pt;
    CHECK_OK(weft_par_transport_create(transport, &mesh, 0, &pt, TERR));
    comm_ops = weft_par_transport_comm(pt);
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    test_kernels_create(1, &K, &kc);
    weft_par_transport_set_device(pt, K, kc);
    weft_status_t st;

    /* one device */
    struct weft_flux *one = load(NULL, K, kc, &st);
    CHECK_OK(st);
    struct golden g;
    golden_open(&g, FWD_GOLDEN);
    int64_t n_out;
    float *want = forward(one, &g, &n_out);
    double e1;
    float *loop_one = golden_loop16(one, LOOP_GOLDEN, &e1);
    const size_t full_bytes = weft_flux_weight_bytes(one);
    const struct weft_flux_config cfg = *weft_flux_get_config(one);
    weft_flux_destroy(one);

    /* this rank's stage */
    struct weft_flux_stage s = stage_of(rank);
    struct weft_flux *m = load(&s, K, kc, &st);
    CHECK_OK(st);
    struct weft_devmap_unit *units;
    struct weft_devmap_component comps[WEFT_DEVMAP_PIPELINE_MAX];
    int n_comps;
    CHECK_OK(weft_devmap_flux_pipeline(&cfg, NULL, NULL, NULL, NULL, &units, comps, &n_comps,
                                       TERR));
    uint64_t mine = 0, all = 0;
    for (int u = 0; u < comps[0].n_units; u++) {
        all += units[u].bytes;
        mine += u >= s.unit_first && u < s.unit_last ? units[u].bytes : 0;
    }
    weft_free(units);
    printf("rank %d: units [%d, %d), prev %d, next %d, output on %d: %zu of %zu weight bytes\n",
           rank, s.unit_first, s.unit_last, s.prev, s.next, s.root, weft_flux_weight_bytes(m),
           full_bytes);
    CHECK_EQ(all, (uint64_t)full_bytes);
    CHECK_EQ((uint64_t)weft_flux_weight_bytes(m), mine);

    int64_t n2;
    float *got = forward(m, &g, &n2);
    CHECK_EQ(n2, n_out);
    CHECK(memcmp(got, want, (size_t)n_out * sizeof(float)) == 0);
    double e2;
    float *loop_pp = golden_loop16(m, LOOP_GOLDEN, &e2);
    CHECK(memcmp(loop_pp, loop_one, 256 * 64 * sizeof(float)) == 0);
    if (rank == 0)
        printf("pipeline of %d: forward and 4-step loop equal one device bit for bit (loop vs "
               "Diffusers %.3g)\n", n_ranks, e2);
    CHECK(e2 <= 1e-4);
    weft_flux_destroy(m);

    /* a stage that does not chain: the output layers with a next stage */
    struct weft_flux_stage bad = {.on = true, .unit_first = 0,
                                  .unit_last = weft_flux_unit_count(&cfg), .prev = -1, .next = 0,
                                  .root = 0};
    weft_error_clear(TERR);
    CHECK(load(&bad, K, kc, &st) == NULL && st == WEFT_ERR_INVALID && test_err.status == st);
    CHECK_TEXT_HAS("a stage that does not chain", weft_error_text(TERR), "do not chain");

    free(want), free(got), free(loop_one), free(loop_pp);
    golden_close(&g);
    K->destroy(kc);
    weft_par_transport_destroy(pt);
    return 0;
}

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    char *save = NULL, list[256];
    snprintf(list, sizeof(list), "%s", argv[1]);
    int n = 0;
    for (char *t = strtok_r(list, ",", &save); t && n < 17; t = strtok_r(NULL, ",", &save))
        bounds[n++] = atoi(t);
    n_ranks = n - 1;
    CHECK(n_ranks >= 1 && n_ranks <= 16);
    snprintf(model_dir, sizeof(model_dir), "%s/tests/data/flux1/tiny-g",
             getenv("WEFT_SOURCE_ROOT"));
    struct weft_transport_opts opts;
    launch_opts(&opts);
    return launch_run(n_ranks, &opts, rank_main, NULL, 240, -1);
}
