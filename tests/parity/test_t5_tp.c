/* T5EncoderModel tensor-parallel on real processes (weft's transport over loopback): at tp = NP
 * the output equals one device's within 1e-6 relative L2 in f32 (measured 2e-7) and 1e-2 with
 * bf16 weights and products (SPEC: bf16 paths <= 1e-2), is the same bytes on every rank, and
 * each rank holds
 * only its slices (weft_t5_held_bytes_tp, what a worker reports in ASSIGNED). A degree that
 * does not divide the heads is refused naming them. Then the runtime (weft_runtime_encode) on
 * the tiny text pipeline over a tp mesh of NP ranks: the embeddings of one device on every rank
 * within 1e-6 (T5 tensor-parallel at tp 2; at tp 4 its 2 heads do not divide, the first rank
 * runs it whole: the same bits), each rank's text bytes, a repeated prompt from the first rank's cache, and at tp 2 a
 * rank whose T5 cannot load: every rank fails the prompt, none waits forever, the first says
 * a peer failed, and the next prompt works.
 * usage: test_t5_tp NP */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "golden.h"
#include "integration/launch.h"
#include "model/checkpoint.h"
#include "model/plan.h"
#include "test.h"
#include "common/alloc.h"
#include "model/model.h"
#include "worker/par_transport.h"
#include "worker/runtime.h"
#include "worker/text_encoder.h"

static char root[1024];
static const struct weft_par_comm *comm_ops;

/* One forward of the encoder in dir at degree T (1: whole), on ids; the output [n, d_model]
 * and the bytes the rank held. */
static float *forward(const char *dir, enum weft_dtype dtype, int rank, int T,
                      const int32_t *ids, int64_t n, size_t *bytes_p, uint64_t *planned_p)
{
    char path[1200];
    snprintf(path, sizeof(path), "%s/tests/data/text/encoders/%s", root, dir);
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    CHECK_OK(weft_kernels_cpu_create(1, &K, &kc));
    (void)K->set_compute(kc, dtype); /* bf16 products where the CPU has them */
    struct weft_text_opts o = {.kernels = K, .kctx = kc, .dtype = dtype};
    struct weft_tp_layout *lay = NULL;
    struct weft_ckpt *ck;
    CHECK_OK(weft_ckpt_open(path, &ck, TERR));
    struct weft_t5_config cfg;
    CHECK_OK(weft_t5_config_parse(weft_ckpt_config(ck), path, &cfg, TERR));
    if (T > 1) {
        CHECK(weft_t5_tp_fits(&cfg, T));
        CHECK_OK(weft_t5_tp_resolve(&cfg, ck, T, &lay, TERR));
        CHECK_EQ(lay->n_modules, 7 * (int)cfg.num_layers);
        CHECK_EQ(lay->allreduce_per_pass, 2 * (int)cfg.num_layers);
        o.tp_rank = rank;
        o.tp_size = T;
        o.tp_layout = lay;
        o.comm = comm_ops;
    }
    struct weft_t5 *m;
    CHECK_OK(weft_t5_load(path, &o, &m, TERR));
    *bytes_p = weft_t5_weight_bytes(m);
    /* what the worker reports before loading is what it then holds */
    CHECK_EQ((uint64_t)*bytes_p, weft_t5_held_bytes_tp(&cfg, ck, T));
    if (planned_p)
        *planned_p = lay ? lay->planned_bytes : 0;
    const int64_t D = weft_t5_get_config(m)->d_model;
    float *out = malloc((size_t)(n * D) * sizeof(float));
    CHECK_OK(weft_t5_forward(m, ids, n, out, TERR));
    weft_t5_destroy(m);
    weft_tp_layout_destroy(lay);
    weft_ckpt_close(ck);
    weft_kernels_cpu_destroy(kc);
    return out;
}

/* Rank 0's output to every rank, compared with this rank's bytes. */
static void check_same_everywhere(const float *out, int64_t count)
{
    float *r0 = malloc((size_t)count * sizeof(float));
    memcpy(r0, out, (size_t)count * sizeof(float));
    CHECK_OK(comm_ops->bcast(comm_ops->tp, r0, (size_t)count, 0));
    CHECK(memcmp(r0, out, (size_t)count * sizeof(float)) == 0);
    free(r0);
}

static void tp_case(const char *dir, enum weft_dtype dtype, double tol, int rank, int T)
{
    /* a prompt's worth of ids below the vocabulary (600), lengths past the exact buckets */
    const int64_t lens[] = {77, 9};
    for (size_t c = 0; c < sizeof(lens) / sizeof(lens[0]); c++) {
        const int64_t n = lens[c];
        int32_t ids[77];
        for (int64_t i = 0; i < n; i++)
            ids[i] = (int32_t)((i * 37 + 11) % 599);
        ids[n - 1] = 1; /* </s> */
        size_t b1, bt;
        uint64_t planned;
        float *one = forward(dir, dtype, rank, 1, ids, n, &b1, NULL);
        float *tp = forward(dir, dtype, rank, T, ids, n, &bt, &planned);
        const int64_t count = n * 64; /* d_model of both tiny encoders */
        const double e = rel_l2(tp, one, count);
        if (rank == 0)
            printf("%s %s, %lld tokens, tp=%d: vs one device %.3g (bound %.0e); T5 bytes per "
                   "rank %zu at tp 1, %zu at tp %d\n", dir, weft_dtype_name(dtype),
                   (long long)n, T, e, tol, b1, bt, T);
        CHECK(e <= tol);
        /* each rank holds its slice of the planned matrices and the rest whole */
        CHECK(planned > 0 && planned % (uint64_t)T == 0);
        CHECK_EQ((uint64_t)bt, (uint64_t)b1 - planned + planned / (uint64_t)T);
        check_same_everywhere(tp, count);
        free(one);
        free(tp);
    }
}

static const char *const prompt = "a photo of a red fox sitting in the snow, highly detailed";

/* A copy of the tiny pipeline whose T5 final norm is I16 in its header: the model opens, T5's
 * load is refused. Components other than text_encoder_2 are links. */
static void broken_t5_copy(const char *model, char *out, size_t len)
{
    snprintf(out, len, "/tmp/weft_test_t5_tp_%d", (int)getpid());
    char cmd[4096];
    snprintf(cmd, sizeof(cmd),
             "rm -rf %s && mkdir -p %s/text_encoder_2 && cp %s/model_index.json %s/ && "
             "for c in scheduler text_encoder transformer vae tokenizer tokenizer_2; do "
             "ln -s $(readlink -f %s/$c) %s/$c; done && cp %s/text_encoder_2/* %s/text_encoder_2/",
             out, out, model, out, model, out, model, out);
    CHECK(system(cmd) == 0);
    char path[1200];
    snprintf(path, sizeof(path), "%s/text_encoder_2/model.safetensors", out);
    FILE *f = fopen(path, "r+b");
    CHECK(f);
    char head[65536];
    const size_t n = fread(head, 1, sizeof(head) - 1, f);
    head[n] = '\0';
    const char *key = "\"encoder.final_layer_norm.weight\":{\"dtype\":\"BF16\"";
    char *at = strstr(head + 8, key);
    CHECK(at);
    at += strlen(key) - 6;
    CHECK(fseek(f, at - head, SEEK_SET) == 0 && fwrite("\"I16\" ", 1, 6, f) == 6);
    CHECK(fclose(f) == 0);
}

static struct weft_runtime *runtime_on(const struct weft_kernels *K, struct weft_kctx *kc,
                                       const char *model, int rank, int T,
                                       struct weft_transport *world)
{
    const struct weft_rt_opts opts = {K, kc, false, 1 << 20};
    struct weft_runtime *rt;
    CHECK_OK(weft_runtime_create(&opts, &rt));
    static struct weft_rt_assign a;
    weft_rt_assign_single(model, &a);
    a.layout.mesh = (struct weft_mesh){1, 1, 1, T, 1};
    a.mesh_rank = rank;
    a.decode = rank == 0;
    CHECK_OK(weft_runtime_assign(rt, &a, world, TERR));
    return rt;
}

static void runtime_case(struct weft_transport *transport, int rank, int T)
{
    char model[1200];
    snprintf(model, sizeof(model), "%s/tests/data/text/pipeline", root);
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    CHECK_OK(weft_kernels_cpu_create(1, &K, &kc));
    struct weft_runtime *one = runtime_on(K, kc, model, 0, 1, NULL);
    struct weft_prompt_embeds want, got, again;
    CHECK_OK(weft_runtime_encode(one, prompt, 64, &want, TERR));
    const struct weft_model *m = weft_runtime_model(one);
    const int64_t ne = 64 * m->flux.joint_attention_dim, np = m->flux.pooled_projection_dim;
    const uint64_t clip = m->clip.held_bytes;
    struct weft_ckpt *ck;
    CHECK_OK(weft_ckpt_open(m->t5.encoder_dir, &ck, TERR));
    const bool fits = weft_t5_tp_fits(&m->t5_cfg, T);
    const uint64_t t5 = weft_t5_held_bytes_tp(&m->t5_cfg, ck, fits ? T : 1);
    weft_ckpt_close(ck);

    struct weft_runtime *rt = runtime_on(K, kc, model, rank, T, transport);
    const uint64_t bytes = weft_runtime_text_bytes(rt);
    CHECK_EQ(bytes, rank == 0 ? clip + t5 : fits ? t5 : 0);
    CHECK_OK(weft_runtime_encode(rt, prompt, 64, &got, TERR));
    const double e = rel_l2(got.embeds, want.embeds, ne);
    if (rank == 0)
        printf("runtime at tp %d (T5 %s): prompt embeddings vs one device %.3g, text bytes on "
               "rank 0 %llu\n", T, fits ? "tensor-parallel" : "whole on rank 0", e,
               (unsigned long long)bytes);
    CHECK(e <= 1e-6);
    /* T5 whole on the first rank is one device's pass, bit for bit (and CLIP always is) */
    CHECK(fits || memcmp(got.embeds, want.embeds, (size_t)ne * sizeof(float)) == 0);
    CHECK(memcmp(got.pooled, want.pooled, (size_t)np * sizeof(float)) == 0);
    /* the same prompt again: from the first rank's cache, the same bytes everywhere */
    CHECK_OK(weft_runtime_encode(rt, prompt, 64, &again, TERR));
    CHECK(memcmp(again.embeds, got.embeds, (size_t)ne * sizeof(float)) == 0);
    struct weft_rt_text_stats ts;
    weft_runtime_text_stats(rt, &ts);
    CHECK(rank == 0 ? ts.hits == 1 && ts.misses == 1 : ts.hits == 0 && ts.misses == 0);
    weft_prompt_embeds_cleanup(&got);
    weft_prompt_embeds_cleanup(&again);
    weft_runtime_destroy(rt);

    if (fits && T == 2) { /* rank 1's T5 cannot load */
        char broken[256];
        if (rank == 1)
            broken_t5_copy(model, broken, sizeof(broken));
        rt = runtime_on(K, kc, rank == 1 ? broken : model, rank, T, transport);
        weft_error_clear(TERR);
        const weft_status_t st = weft_runtime_encode(rt, "a lighthouse", 64, &got, TERR);
        CHECK(st != WEFT_OK);
        if (rank == 0)
            CHECK_TEXT_HAS("the first rank's error", weft_error_text(TERR),
                           "1 of T5's 2 tensor-parallel ranks failed");
        else
            CHECK_TEXT_HAS("the failing rank's error", weft_error_text(TERR),
                           "encoder.final_layer_norm.weight", "I16");
        if (rank == 0)
            printf("runtime at tp 2, rank 1's T5 broken: %s\n", weft_error_text(TERR));
        /* the group is still in step: the next prompt fails the same way, without a wait */
        weft_error_clear(TERR);
        CHECK(weft_runtime_encode(rt, prompt, 64, &got, TERR) == st);
        weft_runtime_destroy(rt);
        if (rank == 1) {
            char cmd[400];
            snprintf(cmd, sizeof(cmd), "rm -rf %s", broken);
            CHECK(system(cmd) == 0);
        }
    }
    weft_prompt_embeds_cleanup(&want);
    weft_runtime_destroy(one);
    weft_kernels_cpu_destroy(kc);
}

static int rank_main(struct weft_transport *transport, void *arg)
{
    (void)arg;
    test_quiet();
    struct weft_comm *comm = weft_transport_world(transport);
    const int rank = weft_comm_rank(comm), T = weft_comm_size(comm);
    struct weft_mesh mesh = {1, 1, 1, T};
    struct weft_par_transport *pt;
    CHECK_OK(weft_par_transport_create(transport, &mesh, 0, &pt, TERR));
    comm_ops = weft_par_transport_comm(pt);
    tp_case("t5-tiny", WEFT_DTYPE_F32, 1e-6, rank, T); /* measured 1.5e-7 to 1.9e-7 */
    tp_case("t5-tiny-bf16", WEFT_DTYPE_BF16, 1e-2, rank, T);

    /* 4 heads: degree 3 does not fit; resolving it is refused naming the sizes */
    char path[1200];
    snprintf(path, sizeof(path), "%s/tests/data/text/encoders/t5-tiny", root);
    struct weft_ckpt *ck;
    CHECK_OK(weft_ckpt_open(path, &ck, TERR));
    struct weft_t5_config cfg;
    CHECK_OK(weft_t5_config_parse(weft_ckpt_config(ck), path, &cfg, TERR));
    struct weft_tp_layout *lay = NULL;
    CHECK(!weft_t5_tp_fits(&cfg, 3));
    weft_error_clear(TERR);
    CHECK_FAILS(weft_t5_tp_resolve(&cfg, ck, 3, &lay, TERR), WEFT_ERR_CONFIG, "tp_degree 3",
                "num_heads 4");
    CHECK_EQ(weft_t5_held_bytes_tp(&cfg, ck, 3), weft_t5_held_bytes(&cfg, ck));
    weft_ckpt_close(ck);
    weft_par_transport_destroy(pt); /* one set of groups over the world at a time */
    runtime_case(transport, rank, T);
    return 0;
}

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    const int np = atoi(argv[1]);
    snprintf(root, sizeof(root), "%s", getenv("WEFT_SOURCE_ROOT"));
    struct weft_transport_opts opts;
    launch_opts(&opts);
    return launch_run(np, &opts, rank_main, NULL, 240, -1);
}
