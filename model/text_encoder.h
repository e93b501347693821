/* The text encoders of a FLUX.1 pipeline as transformers saves them (text_encoder/:
 * CLIPTextModel, text_encoder_2/: T5EncoderModel): typed configs and parameter inventories,
 * shared by the coordinator (sizes for placement, checks before anything loads) and the worker
 * (which binds the weights by these names).
 *
 * Supported: CLIP's text transformer with quick_gelu (CLIP-L, what FLUX.1 ships), learned
 * positions, pre-norm layers, the final layer norm; T5 v1.1's encoder (gated-gelu feed-forward
 * with gelu_new, RMS layer norms, relative position buckets in the first layer's attention,
 * unscaled attention). Checkpoint keys with or without CLIP's "text_model." prefix (transformers
 * 4 and 5 write them differently), T5's embedding as shared.weight and/or
 * encoder.embed_tokens.weight (tied). */
#ifndef WEFT_MODEL_TEXT_ENCODER_H
#define WEFT_MODEL_TEXT_ENCODER_H

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define WEFT_CLIP_TEXT_CLASS "CLIPTextModel"
#define WEFT_T5_ENCODER_CLASS "T5EncoderModel"
#define WEFT_TEXT_MAX_LAYERS 256
#define WEFT_TEXT_MAX_WIDTH 65536

struct weft_clip_text_config {
    int64_t vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads;
    int64_t max_position_embeddings;
    int64_t eos_token_id; /* 2 (the value of CLIP-L's config): the pooled token is the
                           * highest id's; else the first eos_token_id's (transformers' rule) */
    double layer_norm_eps;
    int64_t head_dim;     /* derived */
};

struct weft_t5_config {
    int64_t vocab_size, d_model, d_kv, d_ff, num_layers, num_heads;
    int64_t num_buckets, max_distance; /* relative_attention_num_buckets / _max_distance */
    double layer_norm_epsilon;
    int64_t inner;        /* derived: num_heads x d_kv */
};

/* Parse config.json (transformers' defaults for absent keys; what weft does not run is refused
 * naming the key). origin names the file in err. */
weft_status_t weft_clip_text_config_parse(const cJSON *config, const char *origin,
                                          struct weft_clip_text_config *out,
                                          struct weft_error *err);
weft_status_t weft_t5_config_parse(const cJSON *config, const char *origin,
                                   struct weft_t5_config *out, struct weft_error *err);

#define WEFT_TOKENIZER_MAX_LEN 4096 /* tokens of one encoded prompt, at most */

/* A tokenizer_config.json's model_max_length (config may be NULL: no file): the default when
 * absent or null (77 for CLIP's tokenizer, 512 for T5's, as transformers' checkpoints declare),
 * transformers' "no limit" (1e30) capped at WEFT_TOKENIZER_MAX_LEN; anything but a positive
 * number is refused naming origin. */
weft_status_t weft_tokenizer_max_length(const cJSON *config, bool clip, const char *origin,
                                        int64_t *out, struct weft_error *err);

/* One parameter: its checkpoint key, shape, and the layer it belongs to (-1: the model's own). */
struct weft_text_param {
    char name[112];
    int ndim;
    int64_t shape[2];
    int layer;
};

/* Every parameter in a fixed order (fill params, or count with NULL). prefix is the checkpoint's
 * key prefix ("text_model." or "" for CLIP; T5 has none: embedding names the key the
 * embedding is read from, "shared.weight" or "encoder.embed_tokens.weight"). */
size_t weft_clip_text_params(const struct weft_clip_text_config *c, const char *prefix,
                             struct weft_text_param *params);
size_t weft_t5_params(const struct weft_t5_config *c, const char *embedding,
                      struct weft_text_param *params);

struct weft_ckpt;
/* The prefix ("text_model." or "") of a CLIPTextModel checkpoint, by its final layer norm. */
const char *weft_clip_text_prefix(const struct weft_ckpt *ck);
/* The key T5's embedding is read from (shared.weight, else encoder.embed_tokens.weight). */
const char *weft_t5_embedding_key(const struct weft_ckpt *ck);
/* Whether a checkpoint tensor nobody binds is one to ignore: CLIP's position_ids buffer, T5's
 * tied copy of the embedding. */
bool weft_text_param_ignorable(const char *name);

/* Bytes held, weights in ck's dtypes (weft_ckpt_held_bytes); the embeddings of both models
 * are held as stored too (rows gathered on the host). */
uint64_t weft_clip_text_held_bytes(const struct weft_clip_text_config *c,
                                   const struct weft_ckpt *ck);
uint64_t weft_t5_held_bytes(const struct weft_t5_config *c, const struct weft_ckpt *ck);

/* T5 over a replica's tp ranks (weft's built-in T5EncoderModel plan, model/plan.c): whether the
 * degree fits (it divides num_heads and d_ff: otherwise the replica's first rank runs T5
 * whole), the plan resolved against ck, and the bytes one rank then holds (its slices of the
 * planned matrices, the rest whole; tp 1: weft_t5_held_bytes). */
bool weft_t5_tp_fits(const struct weft_t5_config *c, int tp);
struct weft_tp_layout;
weft_status_t weft_t5_tp_resolve(const struct weft_t5_config *c, const struct weft_ckpt *ck,
                                 int tp, struct weft_tp_layout **layout_p,
                                 struct weft_error *err);
uint64_t weft_t5_held_bytes_tp(const struct weft_t5_config *c, const struct weft_ckpt *ck,
                               int tp);

/* T5's bidirectional relative position bucket of (key - query) distance rel, as transformers
 * computes it (f32 logarithm and truncation, as torch does). */
int64_t weft_t5_bucket(int64_t rel, int64_t num_buckets, int64_t max_distance);

#endif
