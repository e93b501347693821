/* Tensor-parallel plans: glob keys -> styles, resolved against a checkpoint's parameter names
 * and validated before a single weight byte is read.
 *
 * A key has at most one '*'; the part before it must name a list of numbered blocks in the
 * checkpoint ("transformer_blocks." + index), the part after is the module path inside each
 * block. A key without '*' names a module of the model itself. Every module a key reaches is a
 * Linear layer: "<module>.weight" [out, in] and, when present, "<module>.bias" [out].
 *
 * Styles (rank r of T):
 *   colwise              weight and bias rows [r*out/T, (r+1)*out/T)
 *   rowwise              weight columns [r*in/T, ...); bias replicated, added once after the sum
 *   rowwise_split_input  as rowwise, but the input arrives replicated and is sliced locally
 *   packed_colwise(b..)  each packed block of the rows sharded on its own; the local shard is
 *                        the concatenation of each block's rank-r slice
 *   packed_rowwise(b..)  the same on the columns
 * Packed blocks are proportions given in the plan, or absolute sizes the model records
 * (model/registry.h) when the plan gives none. Everything not in the plan is replicated. */
#ifndef WEFT_MODEL_PLAN_H
#define WEFT_MODEL_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "conf/conf.h"
#include "model/checkpoint.h"
#include "model/registry.h"
#include "model/safetensors.h"

enum weft_tp_style {
    WEFT_TP_REPLICATE,
    WEFT_TP_COLWISE,
    WEFT_TP_ROWWISE,
    WEFT_TP_ROWWISE_SPLIT_INPUT,
    WEFT_TP_PACKED_COLWISE,
    WEFT_TP_PACKED_ROWWISE,
    WEFT_TP_STYLE_COUNT
};

const char *weft_tp_style_name(enum weft_tp_style style);

struct weft_tp_rule {
    char key[128];
    enum weft_tp_style style;
    int n_blocks; /* proportions given in the plan; 0 for plain styles or model-given blocks */
    int64_t blocks[WEFT_MAX_BLOCKS];
    char origin[160]; /* where the rule came from, for errors */
};

#define WEFT_TP_MAX_RULES 64

struct weft_tp_plan {
    int n;
    struct weft_tp_rule rules[WEFT_TP_MAX_RULES];
};

/* The model class's built-in plan (Diffusers' _tp_plan); false when the class has none. */
bool weft_tp_plan_builtin(const char *class_name, struct weft_tp_plan *plan_p);
/* Apply [tp_plan] entries on top of plan: same key replaces, new key adds, "none" removes.
 * Errors name the entry's origin (file:line or option); they are the configuration's, recorded
 * in err (or logged at ERROR with NULL err), as are weft_tp_resolve's. */
weft_status_t weft_tp_plan_apply_conf(struct weft_tp_plan *plan, const struct weft_conf_map *map,
                                      struct weft_error *err);

/* How one parameter is split. dim -1: replicated. */
struct weft_tp_shard {
    char name[128]; /* the checkpoint key (a copy: the layout outlives the checkpoint) */
    enum weft_tp_style style;
    int dim;
    int n_blocks;
    int64_t blocks[WEFT_MAX_BLOCKS]; /* absolute sizes along dim, summing to the full size */
    int ndim;
    int64_t shape[2]; /* full shape */
};

struct weft_tp_layout {
    int degree;
    size_t n; /* planned parameters (weights and biases of planned modules) */
    struct weft_tp_shard *shards;
    int n_modules;          /* planned Linear modules */
    int allreduce_per_pass; /* rowwise-style modules: one all-reduce each per forward */
    uint64_t planned_bytes, replicated_bytes; /* full sizes as held (weft_ckpt_held_bytes) */
};

/* Resolve and validate plan against ck for degree: degree >= 1 and <= ranks_available,
 * degree divides the head count, every key matches modules that exist and are Linear layers,
 * every sharded dimension (each packed block) divides by degree. Nothing is read but headers.
 * Every failure is one error naming the module, the size and the degree. */
weft_status_t weft_tp_resolve(const struct weft_tp_plan *plan, const struct weft_ckpt *ck,
                              const struct weft_model_info *info, int degree,
                              int ranks_available, struct weft_tp_layout **layout_p,
                              struct weft_error *err);
void weft_tp_layout_destroy(struct weft_tp_layout *layout);
const struct weft_tp_shard *weft_tp_find(const struct weft_tp_layout *layout, const char *name);

/* Rank r's index ranges along shard->dim (one per block), into ranges (WEFT_MAX_BLOCKS);
 * returns their number and the local size along dim in *local_p. */
int weft_tp_ranges(const struct weft_tp_shard *shard, int degree, int rank,
                   struct weft_range *ranges, int64_t *local_p);

#endif
