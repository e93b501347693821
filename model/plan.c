/* Tensor-parallel plans: built-in plans, INI overrides, resolution and validation. */
#include "model/plan.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/error.h"

static const char *const style_names[WEFT_TP_STYLE_COUNT] = {
    "replicate", "colwise", "rowwise", "rowwise_split_input", "packed_colwise",
    "packed_rowwise"};

const char *weft_tp_style_name(enum weft_tp_style style)
{
    return (unsigned)style < WEFT_TP_STYLE_COUNT ? style_names[style] : "?";
}

/* ---------------------------------------------------------------------------------------- */
/* Built-in plans (Diffusers' _tp_plan, verbatim)                                            */

struct builtin_rule {
    const char *key;
    enum weft_tp_style style;
    int n_blocks;
    int64_t blocks[2];
};

#define ATTN_RULES                                                                           \
    {"transformer_blocks.*.attn.to_q", WEFT_TP_COLWISE, 0, {0}},                             \
        {"transformer_blocks.*.attn.to_k", WEFT_TP_COLWISE, 0, {0}},                         \
        {"transformer_blocks.*.attn.to_v", WEFT_TP_COLWISE, 0, {0}},                         \
        {"transformer_blocks.*.attn.to_out.0", WEFT_TP_ROWWISE, 0, {0}},                     \
        {"transformer_blocks.*.attn.add_q_proj", WEFT_TP_COLWISE, 0, {0}},                   \
        {"transformer_blocks.*.attn.add_k_proj", WEFT_TP_COLWISE, 0, {0}},                   \
        {"transformer_blocks.*.attn.add_v_proj", WEFT_TP_COLWISE, 0, {0}},                   \
        {"transformer_blocks.*.attn.to_add_out", WEFT_TP_ROWWISE, 0, {0}}

static const struct builtin_rule flux1_plan[] = {
    ATTN_RULES,
    {"transformer_blocks.*.ff.net.0.proj", WEFT_TP_COLWISE, 0, {0}},
    {"transformer_blocks.*.ff.net.2", WEFT_TP_ROWWISE, 0, {0}},
    {"transformer_blocks.*.ff_context.net.0.proj", WEFT_TP_COLWISE, 0, {0}},
    {"transformer_blocks.*.ff_context.net.2", WEFT_TP_ROWWISE, 0, {0}},
    {"single_transformer_blocks.*.attn.to_q", WEFT_TP_COLWISE, 0, {0}},
    {"single_transformer_blocks.*.attn.to_k", WEFT_TP_COLWISE, 0, {0}},
    {"single_transformer_blocks.*.attn.to_v", WEFT_TP_COLWISE, 0, {0}},
    {"single_transformer_blocks.*.proj_mlp", WEFT_TP_COLWISE, 0, {0}},
    {"single_transformer_blocks.*.proj_out", WEFT_TP_PACKED_ROWWISE, 0, {0}},
};

static const struct builtin_rule flux2_plan[] = {
    ATTN_RULES,
    {"transformer_blocks.*.ff.linear_in", WEFT_TP_PACKED_COLWISE, 2, {1, 1}},
    {"transformer_blocks.*.ff.linear_out", WEFT_TP_ROWWISE, 0, {0}},
    {"transformer_blocks.*.ff_context.linear_in", WEFT_TP_PACKED_COLWISE, 2, {1, 1}},
    {"transformer_blocks.*.ff_context.linear_out", WEFT_TP_ROWWISE, 0, {0}},
    {"single_transformer_blocks.*.attn.to_qkv_mlp_proj", WEFT_TP_PACKED_COLWISE, 0, {0}},
    {"single_transformer_blocks.*.attn.to_out", WEFT_TP_PACKED_ROWWISE, 0, {0}},
};

static const struct builtin_rule qwen_plan[] = {
    ATTN_RULES,
    {"transformer_blocks.*.img_mlp.net.0.proj", WEFT_TP_COLWISE, 0, {0}},
    {"transformer_blocks.*.img_mlp.net.2", WEFT_TP_ROWWISE, 0, {0}},
    {"transformer_blocks.*.txt_mlp.net.0.proj", WEFT_TP_COLWISE, 0, {0}},
    {"transformer_blocks.*.txt_mlp.net.2", WEFT_TP_ROWWISE, 0, {0}},
};

/* weft's own: transformers' T5 has no _tp_plan. Megatron's split of a T5 layer: each rank its
 * heads (q, k, v by rows, o by columns) and its share of d_ff (wi_0, wi_1 by rows, wo by
 * columns), two all-reduces a layer. */
static const struct builtin_rule t5_plan[] = {
    {"encoder.block.*.layer.0.SelfAttention.q", WEFT_TP_COLWISE, 0, {0}},
    {"encoder.block.*.layer.0.SelfAttention.k", WEFT_TP_COLWISE, 0, {0}},
    {"encoder.block.*.layer.0.SelfAttention.v", WEFT_TP_COLWISE, 0, {0}},
    {"encoder.block.*.layer.0.SelfAttention.o", WEFT_TP_ROWWISE, 0, {0}},
    {"encoder.block.*.layer.1.DenseReluDense.wi_0", WEFT_TP_COLWISE, 0, {0}},
    {"encoder.block.*.layer.1.DenseReluDense.wi_1", WEFT_TP_COLWISE, 0, {0}},
    {"encoder.block.*.layer.1.DenseReluDense.wo", WEFT_TP_ROWWISE, 0, {0}},
};

bool weft_tp_plan_builtin(const char *class_name, struct weft_tp_plan *plan)
{
    static const struct {
        const char *cls;
        const struct builtin_rule *rules;
        int n;
    } plans[] = {
        {"FluxTransformer2DModel", flux1_plan, sizeof(flux1_plan) / sizeof(flux1_plan[0])},
        {"Flux2Transformer2DModel", flux2_plan, sizeof(flux2_plan) / sizeof(flux2_plan[0])},
        {"QwenImageTransformer2DModel", qwen_plan, sizeof(qwen_plan) / sizeof(qwen_plan[0])},
        {"T5EncoderModel", t5_plan, sizeof(t5_plan) / sizeof(t5_plan[0])},
    };
    plan->n = 0;
    for (size_t i = 0; i < sizeof(plans) / sizeof(plans[0]); i++) {
        if (plans[i].n == 0 || strcmp(class_name, plans[i].cls) != 0)
            continue;
        for (int k = 0; k < plans[i].n; k++) {
            struct weft_tp_rule *r = &plan->rules[plan->n++];
            memset(r, 0, sizeof(*r));
            snprintf(r->key, sizeof(r->key), "%s", plans[i].rules[k].key);
            r->style = plans[i].rules[k].style;
            r->n_blocks = plans[i].rules[k].n_blocks;
            for (int b = 0; b < r->n_blocks; b++)
                r->blocks[b] = plans[i].rules[k].blocks[b];
            snprintf(r->origin, sizeof(r->origin), "the built-in %s plan", class_name);
        }
        return true;
    }
    return false;
}

/* "colwise", "packed_rowwise", "packed_colwise(1, 1)", "none" */
static weft_status_t parse_style(const char *text, const char *origin, const char *key,
                                 struct weft_tp_rule *r, bool *remove_p, struct weft_error *err)
{
    char name[64];
    size_t n = strcspn(text, "( \t");
    if (n >= sizeof(name))
        n = sizeof(name) - 1;
    memcpy(name, text, n);
    name[n] = '\0';
    *remove_p = strcmp(name, "none") == 0;
    if (*remove_p)
        return WEFT_OK;
    int s;
    for (s = 1; s < WEFT_TP_STYLE_COUNT; s++)
        if (strcmp(name, style_names[s]) == 0)
            break;
    if (s == WEFT_TP_STYLE_COUNT)
        return weft_error_refuse_or_log(
            err, WEFT_ERR_CONFIG, "plan",
            "%s: '%s' = '%s': unknown style (colwise, rowwise, "
            "rowwise_split_input, packed_colwise(...), packed_rowwise(...), "
            "none)",
            origin, key, text);
    r->style = (enum weft_tp_style)s;
    r->n_blocks = 0;
    const char *p = text + n;
    while (isspace((unsigned char)*p))
        p++;
    if (*p == '\0')
        return WEFT_OK;
    bool packed = s == WEFT_TP_PACKED_COLWISE || s == WEFT_TP_PACKED_ROWWISE;
    if (*p != '(' || !packed)
        return weft_error_refuse_or_log(err, WEFT_ERR_CONFIG, "plan",
                                        "%s: '%s' = '%s': only packed styles take (blocks)", origin,
                                        key, text);
    p++;
    while (r->n_blocks < WEFT_MAX_BLOCKS) {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 1)
            return weft_error_refuse_or_log(err, WEFT_ERR_CONFIG, "plan",
                                            "%s: '%s' = '%s': blocks must be positive integers",
                                            origin, key, text);
        r->blocks[r->n_blocks++] = v;
        p = end;
        while (isspace((unsigned char)*p))
            p++;
        if (*p == ',') {
            p++;
            continue;
        }
        if (*p == ')' && p[1] == '\0')
            return WEFT_OK;
        break;
    }
    return weft_error_refuse_or_log(err, WEFT_ERR_CONFIG, "plan",
                                    "%s: '%s' = '%s': expected (a, b, ...) with at most %d blocks",
                                    origin, key, text, WEFT_MAX_BLOCKS);
}

weft_status_t weft_tp_plan_apply_conf(struct weft_tp_plan *plan, const struct weft_conf_map *map,
                                      struct weft_error *err)
{
    for (int i = 0; i < map->n; i++) {
        const struct weft_conf_entry *e = &map->e[i];
        struct weft_tp_rule r = {0};
        bool remove;
        weft_status_t st = parse_style(e->value, e->origin, e->key, &r, &remove, err);
        if (st != WEFT_OK)
            return st;
        snprintf(r.key, sizeof(r.key), "%s", e->key);
        snprintf(r.origin, sizeof(r.origin), "%s", e->origin);
        int k;
        for (k = 0; k < plan->n && strcmp(plan->rules[k].key, e->key) != 0; k++)
            ;
        if (remove) {
            if (k < plan->n)
                plan->rules[k] = plan->rules[--plan->n];
            continue;
        }
        if (k == plan->n) {
            if (plan->n == WEFT_TP_MAX_RULES)
                return weft_error_refuse_or_log(err, WEFT_ERR_CONFIG, "plan",
                                                "%s: more than %d plan entries", e->origin,
                                                WEFT_TP_MAX_RULES);
            plan->n++;
        }
        plan->rules[k] = r;
    }
    return WEFT_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Resolution                                                                                */

struct resolver {
    const struct weft_tp_plan *plan;
    const struct weft_ckpt *ck;
    const struct weft_model_info *info;
    int degree;
    struct weft_tp_layout *lay;
    size_t cap;
    const struct weft_tp_rule **owner; /* per checkpoint tensor: the rule that planned it */
    struct weft_error *err;
};

/* Index of tensor name in the checkpoint (name order), or -1. */
static long ck_index(const struct weft_ckpt *ck, const char *name)
{
    const struct weft_ckpt_tensor *t = weft_ckpt_find(ck, name);
    if (!t)
        return -1;
    return (long)(t - weft_ckpt_at(ck, 0));
}

/* Absolute block sizes along dim for rule r on a module of that full size. */
static weft_status_t block_sizes(struct resolver *rs, const struct weft_tp_rule *r,
                                 const char *module, int dim, int64_t full, int *n_p,
                                 int64_t *sizes)
{
    bool packed = r->style == WEFT_TP_PACKED_COLWISE || r->style == WEFT_TP_PACKED_ROWWISE;
    if (!packed) {
        *n_p = 1;
        sizes[0] = full;
        return WEFT_OK;
    }
    if (r->n_blocks > 0) { /* proportions */
        int64_t sum = 0;
        for (int b = 0; b < r->n_blocks; b++)
            sum += r->blocks[b];
        if (full % sum != 0)
            return weft_error_refuse_or_log(
                rs->err, WEFT_ERR_CONFIG, "plan",
                "%s: %s: cannot split %lld into proportional blocks: their sum "
                "%lld does not divide it",
                r->origin, module, (long long)full, (long long)sum);
        for (int b = 0; b < r->n_blocks; b++)
            sizes[b] = r->blocks[b] * (full / sum);
        *n_p = r->n_blocks;
        return WEFT_OK;
    }
    for (int k = 0; k < rs->info->n_packed; k++) {
        const struct weft_packed_blocks *pb = &rs->info->packed[k];
        if (strcmp(pb->module, r->key) != 0 || pb->dim != dim)
            continue;
        int64_t sum = 0;
        for (int b = 0; b < pb->n; b++)
            sum += sizes[b] = pb->sizes[b];
        if (sum != full)
            return weft_error_refuse_or_log(
                rs->err, WEFT_ERR_FORMAT, "plan",
                "%s: %s: the model's packed blocks sum to %lld but the tensor "
                "has %lld along dim %d",
                r->origin, module, (long long)sum, (long long)full, dim);
        *n_p = pb->n;
        return WEFT_OK;
    }
    return weft_error_refuse_or_log(rs->err, WEFT_ERR_CONFIG, "plan",
                                    "%s: %s: %s gives no blocks and %s records none for it; write "
                                    "%s(a, b, ...)",
                                    r->origin, module, style_names[r->style],
                                    rs->info->class_name[0] ? rs->info->class_name : "the model",
                                    style_names[r->style]);
}

static weft_status_t add_shard(struct resolver *rs, const struct weft_tp_rule *r,
                               const struct weft_ckpt_tensor *t, int dim, int n_blocks,
                               const int64_t *sizes)
{
    struct weft_tp_layout *lay = rs->lay;
    if (lay->n == rs->cap) {
        size_t cap = rs->cap ? rs->cap * 2 : 64;
        struct weft_tp_shard *ns = weft_realloc(lay->shards, cap * sizeof(*ns));
        if (!ns)
            return weft_error_refuse(rs->err, WEFT_ERR_NOMEM, "out of memory");
        lay->shards = ns;
        rs->cap = cap;
    }
    struct weft_tp_shard *s = &lay->shards[lay->n++];
    memset(s, 0, sizeof(*s));
    snprintf(s->name, sizeof(s->name), "%s", t->info->name);
    s->style = r->style;
    s->dim = dim;
    s->n_blocks = n_blocks;
    for (int b = 0; b < n_blocks; b++)
        s->blocks[b] = sizes[b];
    s->ndim = t->info->ndim;
    s->shape[0] = t->info->shape[0];
    s->shape[1] = t->info->ndim > 1 ? t->info->shape[1] : 0;
    if (dim >= 0) {
        for (int b = 0; b < n_blocks; b++) {
            if (sizes[b] % rs->degree != 0) {
                if (n_blocks > 1)
                    return weft_error_refuse_or_log(
                        rs->err, WEFT_ERR_CONFIG, "plan",
                        "%s: packed block %d of size %lld is not divisible by tp_degree %d",
                        t->info->name, b, (long long)sizes[b], rs->degree);
                return weft_error_refuse_or_log(
                    rs->err, WEFT_ERR_CONFIG, "plan",
                    "%s: cannot %s-shard %lld %s across tp_degree %d: not divisible", t->info->name,
                    dim == 0 ? "colwise" : "rowwise", (long long)sizes[b],
                    dim == 0 ? "output rows" : "input columns", rs->degree);
            }
        }
    }
    long idx = ck_index(rs->ck, t->info->name);
    if (rs->owner[idx])
        return weft_error_refuse_or_log(rs->err, WEFT_ERR_CONFIG, "plan",
                                        "%s: planned twice (by '%s' and '%s')", t->info->name,
                                        rs->owner[idx]->key, r->key);
    rs->owner[idx] = r;
    return WEFT_OK;
}

/* One module instance: "<module>.weight" (and ".bias"). */
static weft_status_t resolve_module(struct resolver *rs, const struct weft_tp_rule *r,
                                    const char *module)
{
    char name[256];
    snprintf(name, sizeof(name), "%s.weight", module);
    const struct weft_ckpt_tensor *w = weft_ckpt_find(rs->ck, name);
    if (!w || w->info->ndim != 2)
        return weft_error_refuse_or_log(rs->err, WEFT_ERR_CONFIG, "plan",
                                        "%s: '%s' names %s, not a Linear layer (no 2-d %s)",
                                        r->origin, r->key, module, name);
    if (w->info->dtype != WEFT_DTYPE_F32 && w->info->dtype != WEFT_DTYPE_BF16 &&
        w->info->dtype != WEFT_DTYPE_F16)
        return weft_error_refuse_or_log(
            rs->err, WEFT_ERR_UNSUPPORTED, "plan",
            "%s: %s weights (%s) look quantized; tensor parallelism needs "
            "unquantized f32/bf16/f16 weights",
            module, name, w->info->dtype_name);
    bool col = r->style == WEFT_TP_COLWISE || r->style == WEFT_TP_PACKED_COLWISE;
    int dim = col ? 0 : 1;
    int n_blocks = 0;
    int64_t sizes[WEFT_MAX_BLOCKS];
    weft_status_t st = block_sizes(rs, r, name, dim, w->info->shape[dim], &n_blocks, sizes);
    if (st == WEFT_OK)
        st = add_shard(rs, r, w, dim, n_blocks, sizes);
    if (st != WEFT_OK)
        return st;
    rs->lay->n_modules++;
    rs->lay->allreduce_per_pass += !col;
    snprintf(name, sizeof(name), "%s.bias", module);
    const struct weft_ckpt_tensor *b = weft_ckpt_find(rs->ck, name);
    if (!b)
        return WEFT_OK;
    if (b->info->ndim != 1 || b->info->shape[0] != w->info->shape[0])
        return weft_error_refuse_or_log(rs->err, WEFT_ERR_FORMAT, "plan",
                                        "%s: shape does not match %s.weight's %lld rows", name,
                                        module, (long long)w->info->shape[0]);
    /* colwise biases follow the rows; rowwise biases are replicated and added once */
    return add_shard(rs, r, b, col ? 0 : -1, n_blocks, sizes);
}

static weft_status_t resolve_rule(struct resolver *rs, const struct weft_tp_rule *r)
{
    const char *star = strchr(r->key, '*');
    if (star && strchr(star + 1, '*'))
        return weft_error_refuse_or_log(rs->err, WEFT_ERR_CONFIG, "plan",
                                        "%s: '%s': '*' may appear once in a plan key", r->origin,
                                        r->key);
    if (!star)
        return resolve_module(rs, r, r->key);
    size_t plen = (size_t)(star - r->key);
    const char *suffix = star + 1;
    if (plen == 0 || r->key[plen - 1] != '.' || *suffix != '.')
        return weft_error_refuse_or_log(rs->err, WEFT_ERR_CONFIG, "plan",
                                        "%s: '%s': '*' must stand for a whole block index, as in "
                                        "'blocks.*.attn.to_q'",
                                        r->origin, r->key);
    /* The prefix must name a list of numbered blocks: find every index it has. */
    long max_index = -1;
    for (size_t i = 0; i < weft_ckpt_count(rs->ck); i++) {
        const char *n = weft_ckpt_at(rs->ck, i)->info->name;
        if (strncmp(n, r->key, plen) != 0 || !isdigit((unsigned char)n[plen]))
            continue;
        char *end;
        long idx = strtol(n + plen, &end, 10);
        if (*end == '.' && idx > max_index)
            max_index = idx;
    }
    if (max_index < 0)
        return weft_error_refuse_or_log(
            rs->err, WEFT_ERR_CONFIG, "plan",
            "%s: '%s': '%.*s' does not name a list of numbered blocks in the "
            "checkpoint",
            r->origin, r->key, (int)plen, r->key);
    for (long i = 0; i <= max_index; i++) {
        char module[256];
        snprintf(module, sizeof(module), "%.*s%ld%s", (int)plen, r->key, i, suffix);
        weft_status_t st = resolve_module(rs, r, module);
        if (st != WEFT_OK)
            return st;
    }
    return WEFT_OK;
}

weft_status_t weft_tp_resolve(const struct weft_tp_plan *plan, const struct weft_ckpt *ck,
                              const struct weft_model_info *info, int degree, int ranks_available,
                              struct weft_tp_layout **layout_p, struct weft_error *err)
{
    if (degree < 1)
        return weft_error_refuse_or_log(err, WEFT_ERR_CONFIG, "plan",
                                        "tp_degree %d: must be at least 1", degree);
    if (degree > ranks_available)
        return weft_error_refuse_or_log(err, WEFT_ERR_CONFIG, "plan",
                                        "tp_degree %d exceeds the %d ranks available", degree,
                                        ranks_available);
    if (degree > 1 && cJSON_GetObjectItemCaseSensitive(weft_ckpt_config(ck), "quantization_config"))
        return weft_error_refuse_or_log(
            err, WEFT_ERR_UNSUPPORTED, "plan",
            "%s/config.json has a quantization_config: quantized weights are "
            "packed in a layout tensor parallelism cannot shard; use the "
            "unquantized checkpoint",
            weft_ckpt_dir(ck));
    if (info->heads > 0 && info->heads % degree != 0)
        return weft_error_refuse_or_log(
            err, WEFT_ERR_CONFIG, "plan",
            "tp_degree %d does not divide num_attention_heads %lld of %s", degree,
            (long long)info->heads, weft_ckpt_dir(ck));
    struct weft_tp_layout *lay = weft_calloc(1, sizeof(*lay));
    struct resolver rs = {plan, ck, info, degree, lay, 0, NULL, err};
    rs.owner = weft_calloc(weft_ckpt_count(ck) + 1, sizeof(const struct weft_tp_rule *));
    weft_status_t st = lay && rs.owner ? WEFT_OK : WEFT_ERR_NOMEM;
    if (st != WEFT_OK)
        weft_error_refuse(err, st, "out of memory");
    if (lay)
        lay->degree = degree;
    for (int i = 0; i < plan->n && st == WEFT_OK; i++)
        st = resolve_rule(&rs, &plan->rules[i]);
    for (size_t i = 0; st == WEFT_OK && i < weft_ckpt_count(ck); i++) {
        const struct weft_st_tensor *t = weft_ckpt_at(ck, i)->info;
        /* what a worker holds: weight matrices as stored, vectors in f32 */
        const uint64_t held = weft_ckpt_held_bytes(ck, t->name, t->ndim, t->numel);
        if (rs.owner[i])
            lay->planned_bytes += held;
        else
            lay->replicated_bytes += held;
    }
    weft_free(rs.owner);
    if (st != WEFT_OK) {
        weft_tp_layout_destroy(lay);
        return st;
    }
    *layout_p = lay;
    return WEFT_OK;
}

void weft_tp_layout_destroy(struct weft_tp_layout *lay)
{
    if (!lay)
        return;
    weft_free(lay->shards);
    weft_free(lay);
}

const struct weft_tp_shard *weft_tp_find(const struct weft_tp_layout *lay, const char *name)
{
    for (size_t i = 0; lay && i < lay->n; i++)
        if (strcmp(lay->shards[i].name, name) == 0)
            return &lay->shards[i];
    return NULL;
}

int weft_tp_ranges(const struct weft_tp_shard *s, int degree, int rank,
                   struct weft_range *ranges, int64_t *local_p)
{
    int64_t off = 0, local = 0;
    for (int b = 0; b < s->n_blocks; b++) {
        int64_t part = s->blocks[b] / degree;
        ranges[b].begin = off + rank * part;
        ranges[b].end = off + (rank + 1) * part;
        off += s->blocks[b];
        local += part;
    }
    *local_p = local;
    return s->n_blocks;
}
