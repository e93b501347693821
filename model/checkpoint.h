/* Diffusers folders: a model component (config.json + one or sharded safetensors files) and a
 * pipeline (model_index.json + one subfolder per component).
 *
 * Names are exactly the checkpoint keys. A sharded checkpoint's index is checked against its
 * shards both ways: every mapped tensor is in its shard, every tensor in a shard is mapped there.
 * Non-safetensors weights (.bin) are refused with a clear error. */
#ifndef WEFT_MODEL_CHECKPOINT_H
#define WEFT_MODEL_CHECKPOINT_H

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "model/safetensors.h"

struct weft_ckpt_tensor {
    const struct weft_st_tensor *info; /* info->name is the checkpoint key */
    struct weft_st_file *file;
};

struct weft_ckpt;

/* Open a model folder (config.json + weights: Diffusers' diffusion_pytorch_model.safetensors or
 * transformers' model.safetensors, single or sharded with an index). Causes go to err as weft_st_open's do (a folder
 * that is missing or malformed is recorded, or logged at ERROR with NULL err). */
weft_status_t weft_ckpt_open(const char *dir, struct weft_ckpt **ck_p, struct weft_error *err);
void weft_ckpt_close(struct weft_ckpt *ck);

const char *weft_ckpt_dir(const struct weft_ckpt *ck);
/* config.json's "_class_name" (Diffusers), else its "architectures"[0] (transformers); "" when
 * neither. */
const char *weft_ckpt_class(const struct weft_ckpt *ck);
const cJSON *weft_ckpt_config(const struct weft_ckpt *ck);
bool weft_ckpt_sharded(const struct weft_ckpt *ck);
size_t weft_ckpt_file_count(const struct weft_ckpt *ck);
struct weft_st_file *weft_ckpt_file_at(const struct weft_ckpt *ck, size_t i);
/* Tensors in name order. */
size_t weft_ckpt_count(const struct weft_ckpt *ck);
const struct weft_ckpt_tensor *weft_ckpt_at(const struct weft_ckpt *ck, size_t i);
const struct weft_ckpt_tensor *weft_ckpt_find(const struct weft_ckpt *ck, const char *name);
/* The dtype a weight matrix (a linear's or a convolution's) is held in: as the checkpoint
 * stores it where the kernels read that dtype (f32, bf16, f16), f32 otherwise or when the
 * tensor is absent. Vectors (biases, norm weights) are held in f32 whatever the file says. */
enum weft_dtype weft_ckpt_weight_dtype(const struct weft_ckpt *ck, const char *name);
/* Bytes a parameter of numel elements is held in (ndim 2 and up: a weight matrix). */
uint64_t weft_ckpt_held_bytes(const struct weft_ckpt *ck, const char *name, int ndim,
                              int64_t numel);

struct weft_pipe_component {
    const char *name;       /* "transformer", "vae", ... */
    const char *library;    /* "diffusers", "transformers", or NULL when the entry is null */
    const char *class_name; /* NULL when the entry is null */
};

struct weft_pipe;

/* Open a pipeline folder (model_index.json). Components are not opened. */
weft_status_t weft_pipe_open(const char *dir, struct weft_pipe **pipe_p, struct weft_error *err);
void weft_pipe_close(struct weft_pipe *pipe);
const char *weft_pipe_dir(const struct weft_pipe *pipe);
const char *weft_pipe_class(const struct weft_pipe *pipe);
size_t weft_pipe_count(const struct weft_pipe *pipe);
const struct weft_pipe_component *weft_pipe_at(const struct weft_pipe *pipe, size_t i);
const struct weft_pipe_component *weft_pipe_find(const struct weft_pipe *pipe, const char *name);

/* Read a small JSON file (at most max_bytes), check UTF-8, parse. err names the file. */
weft_status_t weft_json_read_file(const char *path, size_t max_bytes, cJSON **json_p,
                                  struct weft_error *err);

/* Kind of a path: a safetensors file, a model folder (config.json), a pipeline folder
 * (model_index.json), or none of these. */
enum weft_path_kind {
    WEFT_PATH_NONE,
    WEFT_PATH_SAFETENSORS,
    WEFT_PATH_MODEL,
    WEFT_PATH_PIPELINE,
};
enum weft_path_kind weft_path_kind(const char *path);

#endif
