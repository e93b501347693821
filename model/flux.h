/* FLUX.1 (FluxTransformer2DModel), FLUX.2 (Flux2Transformer2DModel) and Qwen-Image
 * (QwenImageTransformer2DModel) description: the typed config, shared by the coordinator (to
 * plan and validate before anything loads) and the worker (to execute). The three share their
 * dataflow (double-stream blocks on [text; image] tokens, then single-stream blocks, AdaLN
 * modulation from the time embedding, RoPE over n axes) and differ in the parts the tables below
 * name per version: FLUX.2 has no biases, no pooled text embedding, modulation shared by all
 * blocks of a kind (three top-level Linears), a SwiGLU feed-forward (one fused gate|value
 * projection) and single blocks whose Q, K, V and MLP input are one fused Linear; Qwen-Image is
 * FLUX.1's double blocks under its own names, without single blocks or a pooled embedding. */
#ifndef WEFT_MODEL_FLUX_H
#define WEFT_MODEL_FLUX_H

#include <cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

#define WEFT_FLUX_CLASS "FluxTransformer2DModel"
#define WEFT_FLUX2_CLASS "Flux2Transformer2DModel"
#define WEFT_QWEN_CLASS "QwenImageTransformer2DModel"
#define WEFT_FLUX_MAX_AXES 4

struct weft_flux_config {
    /* 1: FluxTransformer2DModel, 2: Flux2Transformer2DModel, 3: QwenImageTransformer2DModel
     * (FLUX.1's double blocks with their own names, no single blocks, an RMSNorm on the text
     * input, no guidance or pooled embedding, Timesteps scaled by 1000, RoPE angles in f32;
     * out_channels is proj_out's width, patch^2 x the config's) */
    int version;
    int64_t patch_size;
    int64_t in_channels;
    int64_t out_channels;
    int64_t num_layers;
    int64_t num_single_layers;
    int64_t attention_head_dim;
    int64_t num_attention_heads;
    int64_t joint_attention_dim;
    int64_t pooled_projection_dim; /* FLUX.1 only (0 for the others) */
    bool guidance_embeds;
    int64_t time_proj_dim; /* sinusoidal width: 256 (FLUX.1), timestep_guidance_channels */
    double rope_theta;     /* 10000 (FLUX.1), rope_theta (FLUX.2, 2000 by default) */
    float eps;             /* every norm's: 1e-6 (FLUX.1), eps (FLUX.2) */
    int n_axes;
    int64_t axes_dims_rope[WEFT_FLUX_MAX_AXES];
    /* derived */
    int64_t inner_dim;      /* heads x head_dim */
    int64_t mlp_hidden_dim; /* 4 x inner_dim (FLUX.1), int(inner_dim x mlp_ratio) (FLUX.2) */
};

/* Parse config.json with Diffusers' class defaults for absent keys (the class from
 * _class_name: FLUX.2's or Qwen-Image's defaults for theirs, FLUX.1's otherwise); origin names
 * the file in err (the file's fault: recorded, or logged at ERROR with NULL err). Checks types,
 * bounds and consistency (axes sum to head_dim, each axis even). */
weft_status_t weft_flux_config_parse(const cJSON *config, const char *origin,
                                     struct weft_flux_config *out, struct weft_error *err);

/* The parameter inventory, as tables of Linear layers and norm weights named exactly like the
 * checkpoint keys. The worker binds its weights through these same tables, the planner and the
 * tensor-parallel plan check checkpoints against them: one definition of the model's shape. */

/* Where a layer sits in the dataflow under tensor parallelism, which fixes the styles it can
 * take: FULL layers see replicated inputs and must give replicated outputs (replicate or
 * rowwise_split_input); SPLIT_OUT layers feed per-rank heads or MLP features (colwise or
 * packed_colwise); SPLIT_IN layers consume them (rowwise or packed_rowwise). */
enum weft_tp_role {
    WEFT_TP_ROLE_FULL,
    WEFT_TP_ROLE_SPLIT_OUT,
    WEFT_TP_ROLE_SPLIT_IN,
};

struct weft_flux_linear_desc {
    const char *name; /* full key prefix for top-level layers, block-relative for blocks */
    int64_t out, in;  /* weight [out, in], bias [out] */
    bool present;     /* guidance layers exist only with guidance_embeds, and so on */
    enum weft_tp_role role;
    bool bias; /* a bias [out] follows the weight (every FLUX.1 and Qwen-Image Linear, no FLUX.2
                * one) */
    /* A fused layer: its sharded dimension is these blocks, each split across the ranks, so
     * under tensor parallelism only the packed style with exactly these blocks is right (0: a
     * plain layer). */
    int n_blocks;
    int64_t blocks[5];
};

enum weft_flux_top {
    WEFT_FLUX_X_EMBEDDER,
    WEFT_FLUX_CONTEXT_EMBEDDER,
    WEFT_FLUX_TIME_LIN1,
    WEFT_FLUX_TIME_LIN2,
    WEFT_FLUX_GUIDANCE_LIN1,
    WEFT_FLUX_GUIDANCE_LIN2,
    WEFT_FLUX_TEXT_LIN1,
    WEFT_FLUX_TEXT_LIN2,
    WEFT_FLUX_MOD_IMG,    /* FLUX.2: double_stream_modulation_img.linear [6D, D] */
    WEFT_FLUX_MOD_TXT,    /* FLUX.2: double_stream_modulation_txt.linear [6D, D] */
    WEFT_FLUX_MOD_SINGLE, /* FLUX.2: single_stream_modulation.linear [3D, D] */
    WEFT_FLUX_NORM_OUT,
    WEFT_FLUX_PROJ_OUT,
    WEFT_FLUX_TOP_COUNT
};

/* transformer_blocks.{i}.<name> (FLUX.2: no NORM1 pair; FF_IN is the fused gate|value
 * projection [2 mlp, D]) */
enum weft_flux_double {
    WEFT_FLUX_D_NORM1,
    WEFT_FLUX_D_NORM1_CONTEXT,
    WEFT_FLUX_D_TO_Q,
    WEFT_FLUX_D_TO_K,
    WEFT_FLUX_D_TO_V,
    WEFT_FLUX_D_TO_OUT,
    WEFT_FLUX_D_ADD_Q,
    WEFT_FLUX_D_ADD_K,
    WEFT_FLUX_D_ADD_V,
    WEFT_FLUX_D_TO_ADD_OUT,
    WEFT_FLUX_D_FF_IN,
    WEFT_FLUX_D_FF_OUT,
    WEFT_FLUX_D_FF_CONTEXT_IN,
    WEFT_FLUX_D_FF_CONTEXT_OUT,
    WEFT_FLUX_DOUBLE_COUNT
};

/* single_transformer_blocks.{i}.<name>: FLUX.1 has NORM, TO_Q/K/V, PROJ_MLP and PROJ_OUT;
 * FLUX.2 QKV_MLP (attn.to_qkv_mlp_proj [3D + 2 mlp, D]: Q | K | V | gate | value) and PROJ_OUT
 * (attn.to_out) */
enum weft_flux_single {
    WEFT_FLUX_S_NORM,
    WEFT_FLUX_S_TO_Q,
    WEFT_FLUX_S_TO_K,
    WEFT_FLUX_S_TO_V,
    WEFT_FLUX_S_PROJ_MLP,
    WEFT_FLUX_S_QKV_MLP,
    WEFT_FLUX_S_PROJ_OUT,
    WEFT_FLUX_SINGLE_COUNT
};

/* RMSNorm weights [head_dim]: double blocks have all four, single blocks the first two. */
enum weft_flux_qk_norm {
    WEFT_FLUX_NORM_Q,
    WEFT_FLUX_NORM_K,
    WEFT_FLUX_NORM_ADDED_Q,
    WEFT_FLUX_NORM_ADDED_K,
    WEFT_FLUX_QK_NORM_COUNT
};

void weft_flux_top_linears(const struct weft_flux_config *c,
                           struct weft_flux_linear_desc out[WEFT_FLUX_TOP_COUNT]);
void weft_flux_double_linears(const struct weft_flux_config *c,
                              struct weft_flux_linear_desc out[WEFT_FLUX_DOUBLE_COUNT]);
void weft_flux_single_linears(const struct weft_flux_config *c,
                              struct weft_flux_linear_desc out[WEFT_FLUX_SINGLE_COUNT]);
/* "attn.norm_q" ... (block-relative; ".weight" follows) */
const char *weft_flux_qk_norm_name(enum weft_flux_qk_norm which);

/* The model's structure in checkpoint order, for whoever needs every layer: the top-level
 * Linears, then each double block's Linears and four q/k norms, then each single block's
 * Linears and two norms. prefix is "" or "transformer_blocks.3." etc.; part and block say where
 * (block -1 for top-level), index is the layer's enum value. A callback's error stops the walk
 * and is returned. Absent layers (desc->present false) are visited too. */
enum weft_flux_part { WEFT_FLUX_PART_TOP, WEFT_FLUX_PART_DOUBLE, WEFT_FLUX_PART_SINGLE };
struct weft_flux_visitor {
    weft_status_t (*linear)(void *arg, enum weft_flux_part part, int64_t block, int index,
                            const char *prefix, const struct weft_flux_linear_desc *desc);
    /* may be NULL: norm weights [attention_head_dim] named prefix + name + ".weight" */
    weft_status_t (*norm)(void *arg, enum weft_flux_part part, int64_t block, int index,
                          const char *prefix, const char *name, int64_t dim);
};
weft_status_t weft_flux_walk(const struct weft_flux_config *c,
                             const struct weft_flux_visitor *v, void *arg);

struct weft_tp_layout;
/* The plan's styles against FLUX's dataflow (see enum weft_tp_role): an error names the first
 * module whose style cannot work, and what it must be. */
weft_status_t weft_flux_tp_check(const struct weft_flux_config *c,
                                 const struct weft_tp_layout *layout, struct weft_error *err);

/* Every parameter: full checkpoint key and shape. */
struct weft_param {
    char name[112];
    int ndim;
    int64_t shape[2];
};
/* The class name config.json carries for this version. */
const char *weft_flux_class(const struct weft_flux_config *c);

/* Number of parameters for this config, and fill params (may be NULL to count). */
size_t weft_flux_params(const struct weft_flux_config *c, struct weft_param *params);
/* Bytes the whole transformer is held in, its weights in ck's dtypes (weft_ckpt_held_bytes;
 * NULL: f32). */
struct weft_ckpt;
/* The checkpoint against the config's parameters (weft_flux_params): each one there with its
 * shape, and no tensor that is none of them; else refused naming the first that is not (the
 * planner and the coordinator see what the workers would refuse to load). */
weft_status_t weft_flux_check_params(const struct weft_flux_config *c, const struct weft_ckpt *ck,
                                     struct weft_error *err);
uint64_t weft_flux_held_bytes(const struct weft_flux_config *c, const struct weft_ckpt *ck);

/* The transformer's units for a layer pipeline (device_map), in execution order:
 *   0                       "embedders": x_embedder, context_embedder, time_text_embed
 *                           (FLUX.2: time_guidance_embed and the three modulation Linears)
 *   1 + i                   "transformer_blocks.i"
 *   1 + num_layers + i      "single_transformer_blocks.i"
 *   count - 1               "output": norm_out, proj_out
 * Between units the state is the hidden states [B, S_txt + S_img, inner_dim] and the time
 * embedding [B, inner_dim] (FLUX.2: with the modulation vectors [B, 6 + 6 + 3 inner_dim]). */
int weft_flux_unit_count(const struct weft_flux_config *c);

/* The activations one rank reserves for its forward passes (worker/flux.c), one formula for
 * the worker and the planner: floats per buffer, in the order h, xn, q, k, v, cat, tmp, cos,
 * sin, in_hidden, in_encoder, out, temb, act, vec, proj, mod, modc, scalars, out_local, mods
 * (FLUX.2: q is one buffer of rows Q | K | V | gate | value, k and v are empty; mods holds the
 * single blocks' shared modulation). The
 * rank holds 1/tp of the heads and MLP features; ni + nt are its tokens (its chunk under
 * context parallelism, cp true), s_img the image's in all. Returns the bytes, each buffer
 * rounded up to 16 floats (64 bytes) as reserved. */
#define WEFT_FLUX_ACT_BUFFERS 21
#define WEFT_FLUX_TIME_PROJ_DIM 256 /* FLUX.1's */
size_t weft_flux_act_sizes(const struct weft_flux_config *c, int tp, bool cp, int64_t batch,
                           int64_t ni, int64_t nt, int64_t s_img,
                           int64_t sizes[WEFT_FLUX_ACT_BUFFERS]);
/* Floating-point operations of one forward pass over s_img image and s_txt text tokens, batch
 * 1: every Linear (2 x rows x in x out, rows the tokens of its stream, 1 for the modulation and
 * embedding layers) and the joint attention (4 x S^2 x inner a block). Elementwise work (norms,
 * RoPE, softmax, activations) is not counted. Under tensor and context parallelism a rank does
 * 1/(tp x cp) of it. */
double weft_flux_flops(const struct weft_flux_config *c, int64_t s_img, int64_t s_txt);
/* The unit a parameter (checkpoint key) belongs to; -1 for a name of no unit. */
int weft_flux_param_unit(const struct weft_flux_config *c, const char *name);
void weft_flux_unit_name(const struct weft_flux_config *c, int unit, char *buf, size_t len);

#endif
