/* Tensor parallelism on real processes: FLUX.1 forward and the full denoising loop at
 * tp = 2, 3, 4 equal the single-device result within 1e-5 (and Diffusers' within 1e-4), the
 * full-then-shard load gives the same bits as the sharded load, the bf16 path (the model in
 * bf16, bf16 products) within 1e-2 of one device on that path, and wrong plans (the packed
 * single-block proj_out treated as plain rowwise; styles swapped) refused with the module named.
 * usage: test_flux_tp NP */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "golden_loop.h"
#include "integration/launch.h"
#include "model/plan.h"
#include "worker/denoise.h"
#include "worker/par_transport.h"

#define FWD_GOLDEN "tests/data/flux1/golden/fwd_tiny-g_15x13_t7.safetensors"
#define LOOP_GOLDEN "tests/data/flux1/golden/loop_tiny-g_16x16_t8.safetensors"

static char model_dir[1024];

static const struct weft_par_comm *comm_ops;
static struct weft_par_transport *comm_pt; /* its buffers: the backend of the current load */
static enum weft_dtype model_dtype = WEFT_DTYPE_F32; /* the bf16 pass: the model and products */

struct inputs {
    struct golden g;
    struct weft_flux_inputs in;
    float *want;
    int64_t n_out;
};

static void inputs_load(struct inputs *x)
{
    golden_open(&x->g, FWD_GOLDEN);
    int64_t nh, ne;
    struct weft_flux_inputs *in = &x->in;
    memset(in, 0, sizeof(*in));
    in->hidden = golden_need(&x->g, "hidden_states", &nh);
    in->encoder = golden_need(&x->g, "encoder_hidden_states", &ne);
    in->pooled = golden_need(&x->g, "pooled_projections", NULL);
    in->timestep = golden_need(&x->g, "timestep", NULL);
    in->guidance = golden_need(&x->g, "guidance", NULL);
    in->img_ids = golden_need(&x->g, "img_ids", NULL);
    in->txt_ids = golden_need(&x->g, "txt_ids", NULL);
    in->batch = 1;
    in->s_img = nh / 64;
    in->s_txt = ne / 32;
    x->want = golden_need(&x->g, "output", &x->n_out);
}

static void inputs_free(struct inputs *x)
{
    free((void *)x->in.hidden), free((void *)x->in.encoder), free((void *)x->in.pooled);
    free((void *)x->in.timestep), free((void *)x->in.guidance), free((void *)x->in.img_ids);
    free((void *)x->in.txt_ids), free(x->want);
    golden_close(&x->g);
}

/* A model loaded with a plan (NULL: one device), with what it holds on to. */
struct loaded {
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    struct weft_tp_layout *lay;
    struct weft_ckpt *ck;
    struct weft_flux *m; /* NULL when the load failed */
};

static weft_status_t load(struct weft_comm *comm, const struct weft_tp_plan *plan, int full_first,
                          struct loaded *l)
{
    *l = (struct loaded){0};
    test_kernels_create(1, &l->K, &l->kc);
    (void)l->K->set_compute(l->kc, model_dtype); /* bf16 products where the CPU has them */
    weft_par_transport_set_device(comm_pt, l->K, l->kc);
    struct weft_flux_opts o = {.kernels = l->K, .kctx = l->kc, .dtype = model_dtype};
    if (plan) {
        struct weft_model_info info;
        CHECK_OK(weft_ckpt_open(model_dir, &l->ck, TERR));
        CHECK_OK(weft_model_info_get(l->ck, &info, TERR));
        int T = weft_comm_size(comm);
        CHECK_OK(weft_tp_resolve(plan, l->ck, &info, T, T, &l->lay, TERR));
        o.tp_rank = weft_comm_rank(comm);
        o.tp_size = T;
        o.tp_layout = l->lay;
        o.tp_full_then_shard = full_first;
        o.comm = comm_ops;
    }
    return weft_flux_load(model_dir, &o, &l->m, TERR);
}

static void unload(struct loaded *l)
{
    weft_flux_destroy(l->m);
    weft_tp_layout_destroy(l->lay);
    weft_ckpt_close(l->ck);
    l->K->destroy(l->kc);
}

/* Load with a plan (NULL: single device), forward, return the output. */
static float *forward(struct weft_comm *comm, const struct weft_tp_plan *plan, int full_first,
                      const struct inputs *x, weft_status_t *load_st)
{
    struct loaded l;
    *load_st = load(comm, plan, full_first, &l);
    float *out = NULL;
    if (*load_st == WEFT_OK) {
        out = malloc((size_t)x->n_out * sizeof(float));
        CHECK_OK(weft_flux_forward(l.m, &x->in, out));
    }
    unload(&l);
    return out;
}

static double loop(struct weft_comm *comm, const struct weft_tp_plan *plan, float **final_p)
{
    struct loaded l;
    CHECK_OK(load(comm, plan, 0, &l));
    double err;
    *final_p = golden_loop16(l.m, LOOP_GOLDEN, &err);
    unload(&l);
    return err;
}

static int rank_main(struct weft_transport *transport, void *arg)
{
    (void)arg;
    test_quiet();
    struct weft_comm *comm = weft_transport_world(transport);
    struct weft_mesh mesh = {1, 1, 1, weft_comm_size(comm)};
    struct weft_par_transport *pt;
    CHECK_OK(weft_par_transport_create(transport, &mesh, 0, &pt, TERR));
    comm_ops = weft_par_transport_comm(pt);
    comm_pt = pt;
    int rank = weft_comm_rank(comm), T = weft_comm_size(comm);
    struct inputs x;
    inputs_load(&x);
    weft_status_t st;
    float *single = forward(comm, NULL, 0, &x, &st);
    struct weft_tp_plan plan;
    CHECK(weft_tp_plan_builtin(WEFT_FLUX_CLASS, &plan));
    float *tp = forward(comm, &plan, 0, &x, &st);
    CHECK_OK(st);
    float *tp_full = forward(comm, &plan, 1, &x, &st);
    double e_single = rel_l2(tp, single, x.n_out), e_golden = rel_l2(tp, x.want, x.n_out);
    if (rank == 0)
        printf("tp=%d forward: vs single device %.3g, vs Diffusers %.3g\n", T, e_single,
               e_golden);
    CHECK(e_single <= 1e-5);
    CHECK(e_golden <= 1e-4);
    CHECK(memcmp(tp, tp_full, (size_t)x.n_out * sizeof(float)) == 0);

    /* A packed layer treated as plain would mix its blocks in every rank's slice (and give a
     * wrong answer): refused at load, naming the layer and its blocks. */
    struct weft_tp_plan wrong = plan;
    for (int i = 0; i < wrong.n; i++)
        if (strcmp(wrong.rules[i].key, "single_transformer_blocks.*.proj_out") == 0)
            wrong.rules[i].style = WEFT_TP_ROWWISE;
    weft_error_clear(TERR);
    float *bad = forward(comm, &wrong, 0, &x, &st);
    CHECK(st == WEFT_ERR_CONFIG && bad == NULL && test_err.status == st);
    CHECK_TEXT_HAS("the plain-rowwise plan", weft_error_text(TERR),
                   "single_transformer_blocks.0.proj_out", "packed_rowwise");

    /* Styles swapped on one projection: refused by the dataflow check, naming the module. */
    struct weft_tp_plan swapped = plan;
    for (int i = 0; i < swapped.n; i++)
        if (strcmp(swapped.rules[i].key, "transformer_blocks.*.attn.to_q") == 0)
            swapped.rules[i].style = WEFT_TP_ROWWISE;
    weft_error_clear(TERR);
    float *none = forward(comm, &swapped, 0, &x, &st);
    CHECK(st == WEFT_ERR_CONFIG && none == NULL && test_err.status == st);
    CHECK_TEXT_HAS("the swapped plan", weft_error_text(TERR), "transformer_blocks.0.attn.to_q",
                   "colwise");

    float *l_single, *l_tp;
    double el_single = loop(comm, NULL, &l_single);
    double el_tp = loop(comm, &plan, &l_tp);
    double e_loop = rel_l2(l_tp, l_single, 256 * 64);
    if (rank == 0)
        printf("tp=%d 4-step loop: vs single device %.3g, vs Diffusers %.3g (single device %.3g)\n",
               T, e_loop, el_tp, el_single);
    CHECK(e_loop <= 1e-5);
    CHECK(el_tp <= 1e-4);

    /* The bf16 path (the model in bf16, bf16 products): tp against one device within the
     * bf16 tolerance (SPEC: 1e-2). Not 1e-5: a rowwise split sums its partial products in
     * another order, and a last-bit difference that flips one activation's bf16 rounding
     * spreads through the layers after it (with f32 products the same pass gives ~5e-8). */
    model_dtype = WEFT_DTYPE_BF16;
    float *single_bf = forward(comm, NULL, 0, &x, &st);
    float *tp_bf = forward(comm, &plan, 0, &x, &st);
    const double e_bf = rel_l2(tp_bf, single_bf, x.n_out);
    float *lb_single, *lb_tp;
    (void)loop(comm, NULL, &lb_single);
    (void)loop(comm, &plan, &lb_tp);
    const double el_bf = rel_l2(lb_tp, lb_single, 256 * 64);
    if (rank == 0)
        printf("tp=%d in bf16: forward vs single device %.3g, 4-step loop %.3g\n", T, e_bf, el_bf);
    CHECK(e_bf <= 1e-2);
    CHECK(el_bf <= 1e-2);
    model_dtype = WEFT_DTYPE_F32;
    free(single_bf), free(tp_bf), free(lb_single), free(lb_tp);
    free(single), free(tp), free(tp_full), free(bad), free(l_single), free(l_tp);
    inputs_free(&x);
    weft_par_transport_destroy(pt);
    return 0;
}

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    int np = atoi(argv[1]);
    snprintf(model_dir, sizeof(model_dir), "%s/tests/data/flux1/tiny-g",
             getenv("WEFT_SOURCE_ROOT"));
    struct weft_transport_opts opts;
    launch_opts(&opts);
    return launch_run(np, &opts, rank_main, NULL, 240, -1);
}
