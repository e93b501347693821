/* A model as every layer knows it before a weight is read: the folder, the classes its
 * model_index.json and config files name, the typed configs of its components, and the
 * consistency rules between them. The coordinator opens it once at start (a model it cannot
 * run is refused before any worker joins), the CLI before anything loads, the worker before it
 * loads its shards: one function decides, with one set of rules.
 *
 * Folders: a Diffusers pipeline folder (model_index.json; transformer/, and vae/ and
 * scheduler/ when model_index.json names them), or a transformer folder alone (config.json and
 * weights; latents only, FLUX.1-dev's scheduler). */
#ifndef WEFT_MODEL_MODEL_H
#define WEFT_MODEL_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "conf/conf.h"
#include "model/cp.h"
#include "model/flux.h"
#include "model/mesh.h"
#include "model/registry.h"
#include "model/safetensors.h"
#include "model/scheduler.h"
#include "model/text_encoder.h"
#include "model/vae.h"

#define WEFT_FLUX_PIPELINE_CLASS "FluxPipeline"
#define WEFT_FLUX2_PIPELINE_CLASS "Flux2Pipeline"
#define WEFT_QWEN_PIPELINE_CLASS "QwenImagePipeline"
#define WEFT_MODEL_MAX_TEXT_TOKENS 4096 /* tokens of one prompt's embeddings */
#define WEFT_MODEL_MAX_SEQUENCE_LENGTH 512 /* T5 tokens of a text prompt (FluxPipeline's limit) */

/* One text encoder with its tokenizer: FluxPipeline's tokenizer + text_encoder (CLIP: the pooled
 * embedding) and tokenizer_2 + text_encoder_2 (T5: the token embeddings). */
struct weft_model_text {
    bool tokenizer, encoder; /* present in model_index.json (and their files there) */
    char tokenizer_dir[WEFT_CONF_PATH + 16];
    char encoder_dir[WEFT_CONF_PATH + 16];
    char tokenizer_class[48]; /* model_index.json's class of the tokenizer */
    uint64_t file_bytes, held_bytes; /* the encoder's checkpoint, and as held */
};

struct weft_model {
    char dir[WEFT_CONF_PATH];
    bool pipeline;                       /* a pipeline folder (else a transformer alone) */
    char pipeline_class[64];             /* model_index.json's _class_name ("" alone) */
    char transformer_dir[WEFT_CONF_PATH + 16];
    char vae_dir[WEFT_CONF_PATH + 16];   /* "" without a VAE */
    char prompts_dir[WEFT_CONF_PATH + 16];
    struct weft_flux_config flux;
    struct weft_model_info info;         /* heads and packed blocks, for tensor parallelism */
    bool has_vae;
    struct weft_vae_config vae;
    /* text: CLIP (tokenizer/, text_encoder/) and T5 (tokenizer_2/, text_encoder_2/); a pipeline
     * encodes text when all four are there (weft_model_text_missing) */
    struct weft_model_text clip, t5;
    struct weft_clip_text_config clip_cfg; /* valid when clip.encoder */
    struct weft_t5_config t5_cfg;          /* valid when t5.encoder */
    struct weft_sched_config sched;
    /* derived: the latent grid. Pixels per latent along an edge (the VAE's, or FluxPipeline's
     * default 8 without one), and the unit every side is a multiple of: latents are packed
     * 2 x 2 into tokens. */
    int64_t vae_scale, side_unit;
    uint64_t transformer_file_bytes, vae_file_bytes;
    /* what a worker holds: the transformer's weights, the VAE decoder's (weft_ckpt_held_bytes) */
    uint64_t transformer_held_bytes, vae_held_bytes;
    /* what a job that does not say takes: the image side (the VAE config's sample_size, the
     * size it was made for, when that is a multiple of side_unit up to 1024; else FluxPipeline's
     * 1024) and the T5 length of a text prompt (tokenizer_2's model_max_length up to
     * WEFT_MODEL_MAX_SEQUENCE_LENGTH; FluxPipeline's 512 without tokenizer_2). FLUX.1's folders
     * give FluxPipeline's own defaults. */
    int64_t default_side, default_text_tokens;
};

/* Open dir and check everything that needs no weight: the pipeline class and every component
 * class (model_index.json against each component's config.json), the configs themselves,
 * the transformer's channels against the VAE's latent channels. err names the file and the
 * rule. */
weft_status_t weft_model_open(const char *dir, struct weft_model **model_p,
                              struct weft_error *err);
void weft_model_close(struct weft_model *model);

/* Whether the model can encode text prompts: NULL when it can, else one line saying what is
 * missing ("flux-tiny has no text encoders: model_index.json names no tokenizer, text_encoder,
 * tokenizer_2 or text_encoder_2"), written into buf. */
const char *weft_model_text_missing(const struct weft_model *model, char *buf, size_t len);

/* The layout a job runs on: the mesh (dp x pp x ring x ulysses x tp) and its options. */
struct weft_layout {
    struct weft_mesh mesh;
    bool ulysses_anything, ring_anything;
    enum weft_ring_rotation rotation;
    bool device_map; /* pp stages placed by [device_map] */
};

/* The one-device layout. */
void weft_layout_single(struct weft_layout *out);
/* The layout of [parallel] (and [device_map] with devices_per_replica devices; 0 without). */
void weft_layout_from_conf(const struct weft_conf *conf, int devices_per_replica,
                           struct weft_layout *out);
/* [parallel] groups: layouts joined by '+', each one's degrees as "name N" joined by 'x' (dp,
 * cfg, ring, ulysses, tp; those not named are 1), e.g. "ulysses 2 + dp 2": one replica of
 * Ulysses 2 beside two single-device replicas. Each group's anything flags are base's where it
 * has the degree they relax; its rotation is base's. out gets at most WEFT_LAYOUT_GROUPS_MAX
 * groups, *n_p their count; a one-line reason in err otherwise (a group of more than
 * WEFT_LAYOUT_GROUP_DEVICES_MAX devices too). The degrees are not checked against a model
 * (weft_model_check_layout). */
#define WEFT_LAYOUT_GROUPS_MAX 8             /* groups in [parallel] groups */
#define WEFT_LAYOUT_GROUP_DEVICES_MAX 65536 /* a group's dp x cfg x ring x ulysses x tp */
weft_status_t weft_layout_parse_groups(const char *text, const struct weft_layout *base,
                                       struct weft_layout out[WEFT_LAYOUT_GROUPS_MAX], int *n_p,
                                       struct weft_error *err);
/* The devices groups g[0, n) take: each one's replicas times its devices per replica. */
int weft_layout_groups_devices(const struct weft_layout *g, int n);
/* Devices one replica of l takes: its device_map stages, or cfg x ring x ulysses x tp. */
int weft_layout_replica_devices(const struct weft_layout *l);
/* "dp 2 x ring 1 x ulysses 2 x tp 1" or "dp 1 x 2 device_map stages". */
void weft_layout_name(const struct weft_layout *l, char *buf, size_t len);

/* Can this model run on this layout at all (independently of any job)? Degrees are at least 1,
 * the anything flags have the degree they relax, device_map combines with neither tensor nor
 * context parallelism, tensor parallelism has a plan (the class's, with tp_plan's overrides)
 * that resolves against the checkpoint (degree divides the heads, every packed block,
 * every planned module is a Linear of the checkpoint), the heads per tensor-parallel rank cover
 * the Ulysses degree. Reads checkpoint headers, never a weight. */
weft_status_t weft_model_check_layout(const struct weft_model *model,
                                      const struct weft_layout *layout,
                                      const struct weft_conf_map *tp_plan,
                                      struct weft_error *err);

/* A prompt's embeddings as the model takes them: prompt_embeds [1, T, joint_attention_dim]
 * with T in 1..WEFT_MODEL_MAX_TEXT_TOKENS and, for FLUX.1, pooled_prompt_embeds
 * [1, pooled_projection_dim] ([pooled] accepted; FLUX.2 and Qwen-Image take none and refuse
 * one), float dtypes; Qwen-Image's optional prompt_embeds_mask [1, T] must be ones then zeros
 * (padding), and the prompt is its unmasked tokens. *tokens_p gets the tokens the model takes.
 * what names the file in err. */
weft_status_t weft_model_check_prompt(const struct weft_model *model, struct weft_st_file *file,
                                      const char *what, int64_t *tokens_p,
                                      struct weft_error *err);

/* The values of a prompt's embeddings (weft_model_check_prompt passed): every one finite, or
 * refused naming the tensor and the element (a job with NaN in its text would run to its first
 * step and fail there). Reads the tensors whole, as floats. */
weft_status_t weft_model_check_prompt_values(struct weft_st_file *file, const char *what,
                                             struct weft_error *err);
/* A prompt's embeddings read from a safetensors file (checked as above), as f32. */
struct weft_prompt_embeds {
    float *embeds; /* [tokens, joint_attention_dim] (weft_free) */
    float *pooled; /* [pooled_projection_dim] (weft_free) */
    int64_t tokens;
};
weft_status_t weft_model_prompt_read(const struct weft_model *model, const char *path,
                                     struct weft_prompt_embeds *out, struct weft_error *err);
void weft_prompt_embeds_cleanup(struct weft_prompt_embeds *p);

#endif
