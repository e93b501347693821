/* Context-parallel attention alone, on real processes, with what the model tests cannot reach:
 * head counts that do not divide by the Ulysses degree (5 heads) and arbitrary, very uneven
 * sequence lengths per rank (several ranks short, one with a single row). Each rank's output
 * rows must equal single-process attention over the whole sequence (1e-5 relative).
 * usage: test_cp_attention RING ULYSSES ag|p2p */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "golden.h"
#include "integration/launch.h"
#include "model/mesh.h"
#include "worker/cp_attention.h"
#include "worker/noise.h"
#include "worker/par_transport.h"

#define HEADS 5
#define HD 16

static struct weft_mesh mesh;
static enum weft_ring_rotation rotation;

static int run_case(struct weft_transport *tp, const int64_t *rows, const char *label)
{
    const int W = mesh.ring * mesh.ulysses, rank = weft_transport_rank(tp);
    struct weft_mesh_coord me;
    weft_mesh_coord(&mesh, rank, &me);
    struct weft_par_transport *pt;
    CHECK_OK(weft_par_transport_create(tp, &mesh, 0, &pt, TERR));
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    test_kernels_create(1, &K, &kc);
    weft_par_transport_set_device(pt, K, kc);
    int64_t total = 0, first = 0;
    for (int c = 0; c < W; c++) {
        if (c == me.cp)
            first = total;
        total += rows[c];
    }
    const int64_t w = HEADS * HD, n = rows[me.cp];
    /* the whole sequence's q, k, v, the same on every rank */
    const size_t all = (size_t)(total * w), n_out = (size_t)(n * (w + 3)) + 1;
    float *q = malloc(all * 4), *k = malloc(all * 4), *v = malloc(all * 4);
    float *ref = malloc(all * 4), *out = calloc(n_out, 4);
    weft_noise_normal(1, 0, total * w, q);
    weft_noise_normal(2, 0, total * w, k);
    weft_noise_normal(3, 0, total * w, v);
    float *dq = test_dev_copy(K, kc, q, all), *dk = test_dev_copy(K, kc, k, all);
    float *dv = test_dev_copy(K, kc, v, all), *dref = test_dev_copy(K, kc, ref, all);
    float *dout = test_dev_copy(K, kc, out, n_out);
    const float scale = 1.0f / sqrtf((float)HD);
    K->attention(kc, dq, w, dk, w, dv, w, dref, w, NULL, total, total, HEADS, HD, scale);
    struct weft_cp_layout cp = {mesh.ring, mesh.ulysses, true, rotation};
    struct weft_cp_attn *a;
    CHECK_OK(weft_cp_attn_create(K, kc, weft_par_transport_comm(pt), &cp, me.ring, me.ulysses,
                                 HEADS, HD, rows, &a));
    /* this rank's rows, strided inputs and output as the model uses them */
    CHECK_OK(weft_cp_attn_run(a, dq + first * w, dk + first * w, dv + first * w, w, dout, w + 3,
                              scale));
    K->download(kc, ref, dref, all * 4);
    K->download(kc, out, dout, n_out * 4);
    CHECK_OK(K->sync(kc));
    double num = 0, den = 0;
    for (int64_t r = 0; r < n; r++)
        for (int64_t j = 0; j < w; j++) {
            double d = (double)out[r * (w + 3) + j] - ref[(first + r) * w + j];
            num += d * d;
            den += (double)ref[(first + r) * w + j] * ref[(first + r) * w + j];
        }
    double err = n ? sqrt(num / den) : 0;
    if (rank == 0 || err > 1e-5)
        printf("ring %d x ulysses %d %s, %s: rank %d (%lld rows) rel L2 %.3g\n", mesh.ring,
               mesh.ulysses, rotation == WEFT_RING_P2P ? "p2p" : "ag", label, rank,
               (long long)n, err);
    CHECK(err <= 1e-5);
    weft_cp_attn_destroy(a);
    free(q), free(k), free(v), free(ref), free(out);
    K->buf_free(kc, dq, all * 4 + 1), K->buf_free(kc, dk, all * 4 + 1);
    K->buf_free(kc, dv, all * 4 + 1), K->buf_free(kc, dref, all * 4 + 1);
    K->buf_free(kc, dout, n_out * 4 + 1);
    CHECK_OK(K->status(kc));
    K->destroy(kc);
    weft_par_transport_destroy(pt);
    return 0;
}

static int rank_main(struct weft_transport *tp, void *arg)
{
    (void)arg;
    test_quiet();
    const int W = mesh.ring * mesh.ulysses;
    int64_t rows[8];
    for (int c = 0; c < W; c++) /* tensor_split of 4W+1: only rank 0 long, the rest short */
        rows[c] = c == 0 ? 5 : 4;
    run_case(tp, rows, "one long rank, the rest short");
    for (int c = 0; c < W; c++) /* arbitrary: 9, 1, 17, 3 ... */
        rows[c] = (int64_t[]){9, 1, 17, 3}[c % 4] + c / 4;
    run_case(tp, rows, "arbitrary lengths incl. a single row");
    return 0;
}

int main(int argc, char **argv)
{
    CHECK(argc == 4);
    mesh = (struct weft_mesh){1, atoi(argv[1]), atoi(argv[2]), 1};
    rotation = strcmp(argv[3], "p2p") == 0 ? WEFT_RING_P2P : WEFT_RING_ALLGATHER;
    struct weft_transport_opts opts;
    launch_opts(&opts);
    return launch_run(weft_mesh_size(&mesh), &opts, rank_main, NULL, 120, -1);
}
