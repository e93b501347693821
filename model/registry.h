/* What the planner needs to know about a model class before anything loads: its head count
 * (tensor parallelism shards heads) and the absolute block sizes of its packed (fused) layers,
 * as Diffusers records them on the modules (`_tp_packed_col_blocks` / `_tp_packed_row_blocks`).
 * Classes: FLUX.1, FLUX.2, Qwen-Image. */
#ifndef WEFT_MODEL_REGISTRY_H
#define WEFT_MODEL_REGISTRY_H

#include <stdint.h>

#include "common/error.h"
#include "model/checkpoint.h"

#define WEFT_MAX_PACKED 4
#define WEFT_MAX_BLOCKS 8

struct weft_packed_blocks {
    const char *module; /* a plan glob, e.g. "single_transformer_blocks.*.proj_out" */
    int dim;            /* 0: output rows (colwise), 1: input columns (rowwise) */
    int n;
    int64_t sizes[WEFT_MAX_BLOCKS];
};

struct weft_model_info {
    const char *class_name;
    int64_t heads;
    int64_t head_dim;
    int n_packed;
    struct weft_packed_blocks packed[WEFT_MAX_PACKED];
};

/* From the checkpoint's config.json; an unknown class gets heads = 0 (plans for it come from
 * the INI and can only be checked for divisibility). */
weft_status_t weft_model_info_get(const struct weft_ckpt *ck, struct weft_model_info *info_p,
                                  struct weft_error *err);

#endif
