/* A worker's executor: it holds what the coordinator assigned (a place in a mesh, the model's
 * shards for that place, the VAE where this rank decodes) and runs images on command. It
 * decides nothing: the assignment says which model, which layout and which rank decodes; a job
 * says what to draw. Every rank of a replica runs the same images in the same order; the
 * collectives keep them in step, and the decoding rank agrees cancellation with the others at
 * each step end. */
#ifndef WEFT_WORKER_RUNTIME_H
#define WEFT_WORKER_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "conf/conf.h"
#include "kernels/kernels.h"
#include "model/cp.h"
#include "model/mesh.h"
#include "transport/comm.h"
#include "worker/flux.h"
#include "worker/par_transport.h"

struct weft_runtime;

struct weft_rt_assign {
    char model[WEFT_CONF_PATH]; /* pipeline folder (transformer/, scheduler/, vae/) */
    struct weft_mesh mesh;      /* dp x ring x ulysses x tp */
    int mesh_rank;              /* this worker's place; world rank = world_base + mesh_rank */
    int world_base;
    struct weft_cp_layout cp;   /* degrees repeat mesh.ring/ulysses; anything, rotation */
    int tp_full_then_shard;
    struct weft_conf_map tp_plan; /* [tp_plan] overrides of the model's plan */
    int decode;                 /* this rank loads the VAE and returns the images */
    /* device_map: this rank's stage of the transformer's layer pipeline (mesh.pp stages;
     * ranks in the pipe group), .on false otherwise */
    struct weft_flux_stage stage;
};

weft_status_t weft_runtime_create(const struct weft_kernels *K, struct weft_kctx *kc,
                                  struct weft_runtime **rt_p);
void weft_runtime_destroy(struct weft_runtime *rt);

/* Take an assignment over the data-plane world (NULL when the mesh has one rank): build the
 * process groups, load this rank's shards of the transformer, the VAE when decoding. Collective
 * over the replica only through the transport's groups; loading reads nothing others read. */
weft_status_t weft_runtime_assign(struct weft_runtime *rt, const struct weft_rt_assign *a,
                                  struct weft_transport *world);
/* Drop the assignment (models, groups); the world is the caller's. */
void weft_runtime_unassign(struct weft_runtime *rt);
/* What the assignment loaded, for the inventory and device map: bytes of transformer shards
 * and of the VAE (0 when this rank does not decode). */
void weft_runtime_bytes(const struct weft_runtime *rt, uint64_t *transformer_p, uint64_t *vae_p);

/* The collectives' time, bytes and calls per group and kind since the assignment (zeros when
 * the mesh has one rank or nothing is assigned). */
void weft_runtime_comm_stats(const struct weft_runtime *rt, struct weft_par_stats *out);

struct weft_rt_image {
    const float *prompt_embeds; /* [1, s_txt, joint_attention_dim] */
    int64_t s_txt;
    const float *pooled;        /* [1, pooled_projection_dim] */
    int64_t height, width;      /* pixels, multiples of 16 */
    int steps;
    float guidance;
    uint64_t seed;
    int64_t noise_index; /* image i of a job takes elements [i n, (i+1) n) of the seed's noise */
    const char *png_prompt, *png_model; /* tEXt values in the PNG (decoding rank) */
};

/* Called on the decoding rank after each step (seconds: the step's time). */
typedef void (*weft_rt_step_cb)(void *arg, int step, int steps, double seconds);
/* Polled on the decoding rank at each step end: nonzero asks the replica to stop there. */
typedef int (*weft_rt_cancel_cb)(void *arg);

struct weft_rt_result {
    void *png; /* the encoded image on the decoding rank (free()), NULL elsewhere */
    size_t png_len;
    double denoise_s, decode_s;
};

/* One image. WEFT_ERR_CANCELLED when the replica agreed to stop; a peer-lost status when a
 * collective failed (the world is unusable then: unassign). */
weft_status_t weft_runtime_image(struct weft_runtime *rt, const struct weft_rt_image *img,
                                 weft_rt_step_cb on_step, weft_rt_cancel_cb cancelled, void *arg,
                                 struct weft_rt_result *out);

#endif
