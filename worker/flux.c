/* FLUX.1, FLUX.2 and Qwen-Image forward passes, in Diffusers' exact order of operations
 * (FluxTransformer2DModel, Flux2Transformer2DModel, QwenImageTransformer2DModel). Rows of the
 * joint sequence are [text tokens, image tokens] as in Diffusers' cat(encoder, hidden). Where
 * FLUX.2 or Qwen-Image differ (model/flux.h) the functions below say so; everything else, the
 * parallel layouts included, is shared. */
#include "worker/flux.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/tensor.h"
#include "model/checkpoint.h"
#include "model/plan.h"
#include "worker/cp_attention.h"

struct linear {
    void *w; /* [out, in], this rank's shard, in the checkpoint's dtype */
    enum weft_dtype wdt;
    float *b; /* [out] */
    int64_t out, in; /* local */
    enum weft_tp_style style;
};

struct double_block {
    struct linear l[WEFT_FLUX_DOUBLE_COUNT];
    float *qk_norm[WEFT_FLUX_QK_NORM_COUNT];
};

struct single_block {
    struct linear l[WEFT_FLUX_SINGLE_COUNT];
    float *qk_norm[2];
};

/* Activations for one (batch, s_img, s_txt) reservation: s_img and s_txt are this rank's chunk
 * (the whole sequence without context parallelism), starting at img0 and txt0. */
struct acts {
    int64_t batch, s_img, s_txt;
    int64_t full_img, full_txt, img0, txt0;
    struct weft_cp_attn *cpa; /* NULL without context parallelism */
    float *out_local;         /* [B, s_img, out_channels] before the gather */
    size_t *gather_counts;    /* [W] */
    size_t bytes;
    void *base;
    float *h;        /* [B, S, D] hidden states, text rows first */
    float *xn;       /* [B, S, D] modulated norm output */
    float *q, *k, *v; /* [B, S] rows of stride ldqkv: this rank's heads */
    int64_t ldqkv;    /* Dl in their own buffers; Dl + mlpl inside cat's MLP columns */
    float *cat;      /* [B, S, Dl + mlpl]: attention output | MLP hidden */
    float *tmp;      /* [B, S, D] projection output before gating */
    float *cos, *sin; /* [S, head_dim] */
    float *in_hidden, *in_encoder, *out; /* staging of inputs and output */
    float *temb;     /* [B, D] */
    float *act;      /* [B, D] silu(temb) */
    float *vec;      /* [B, D] scratch */
    float *proj;     /* [B, 256] timestep / guidance projection */
    float *mod;      /* [B, 6D] */
    float *modc;     /* [B, 6D] */
    float *scalars;  /* [4B]: timestep and guidance x 1000, pooled staging follows */
    float *mods;     /* [B, 3D] FLUX.2: the single blocks' shared shift, scale, gate */
    /* host memory for what the host computes (RoPE cos and sin [2, S, head_dim], then the
     * timestep and guidance values [2B]) before its upload, on a backend that is not
     * host-visible */
    float *host;
    size_t host_floats;
};

struct weft_flux {
    struct weft_flux_config cfg;
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    int tp_rank, tp_size;
    int64_t heads_l, dim_l, mlp_l; /* this rank's heads, their width, its MLP features */
    struct weft_cp_layout cp;
    int cp_size, cp_rank; /* ring x ulysses, and this rank's chunk */
    int ring_rank, ulysses_rank;
    const struct weft_par_comm *comm;
    struct weft_flux_stage stage; /* .on: a pipeline stage holding units [first, last) */
    weft_status_t comm_status; /* first collective failure, reported after the block */
    enum weft_dtype dtype; /* the dtype it runs in (opts) */
    void *weights;
    size_t arena_bytes;  /* the weights' allocation: each tensor 64-byte aligned */
    size_t weight_bytes; /* the parameters' own bytes, in their held dtypes */
    struct linear top[WEFT_FLUX_TOP_COUNT];
    float *txt_norm; /* Qwen-Image: the RMSNorm weight of the text input [joint_attention_dim] */
    struct double_block *dbl;
    struct single_block *sgl;
    struct acts a;
};

/* ---------------------------------------------------------------------------------------- */
/* Loading                                                                                   */

struct binding {
    char name[112];
    void *dst;
    enum weft_dtype dtype; /* held as: weight matrices as stored, vectors in f32 */
    int ndim;
    int64_t shape[2]; /* full, as in the checkpoint */
    int64_t local[2]; /* this rank's shard */
    const struct weft_tp_shard *shard; /* NULL: replicated */
    bool skip; /* another pipeline stage's: checked in the checkpoint, not read */
};

struct binder {
    struct binding *b;
    size_t n, cap;
    char *next; /* arena cursor */
    size_t bytes;       /* arena bytes */
    size_t param_bytes; /* the same without alignment */
    const struct weft_ckpt *ck;
    const struct weft_tp_layout *layout;
    int tp_size, tp_rank;
    const struct weft_flux_config *cfg;
    const struct weft_flux_stage *stage; /* NULL: every unit */
};

/* The dtype a parameter is held in: a weight matrix as the checkpoint stores it, vectors f32. */
static enum weft_dtype held_dtype(const struct weft_ckpt *ck, const char *name, int ndim)
{
    return ndim == 2 ? weft_ckpt_weight_dtype(ck, name) : WEFT_DTYPE_F32;
}

static weft_status_t bind(struct binder *bd, const char *prefix, const char *name,
                          const char *suffix, int ndim, int64_t d0, int64_t d1, void **dst)
{
    if (bd->n == bd->cap) {
        size_t cap = bd->cap ? bd->cap * 2 : 256;
        struct binding *nb = weft_realloc(bd->b, cap * sizeof(*nb));
        if (!nb)
            return WEFT_ERR_NOMEM;
        bd->b = nb;
        bd->cap = cap;
    }
    struct binding *b = &bd->b[bd->n++];
    snprintf(b->name, sizeof(b->name), "%s%s%s", prefix, name, suffix);
    b->ndim = ndim;
    b->shape[0] = b->local[0] = d0;
    b->shape[1] = b->local[1] = d1;
    b->shard = weft_tp_find(bd->layout, b->name);
    b->skip = false;
    if (bd->stage) {
        int u = weft_flux_param_unit(bd->cfg, b->name);
        b->skip = u < bd->stage->unit_first || u >= bd->stage->unit_last;
    }
    if (b->skip) {
        b->dst = NULL;
        return WEFT_OK;
    }
    if (b->shard && b->shard->dim >= 0) {
        struct weft_range r[WEFT_MAX_BLOCKS];
        weft_tp_ranges(b->shard, bd->tp_size, bd->tp_rank, r, &b->local[b->shard->dim]);
    }
    b->dtype = held_dtype(bd->ck, b->name, ndim);
    const int64_t n = ndim == 2 ? b->local[0] * b->local[1] : b->local[0];
    const size_t bytes = ((size_t)n * weft_dtype_size(b->dtype) + 63) / 64 * 64;
    bd->bytes += bytes;
    bd->param_bytes += (size_t)n * weft_dtype_size(b->dtype);
    if (bd->next) { /* second pass: assign arena space */
        b->dst = bd->next;
        *dst = bd->next;
        bd->next += bytes;
    }
    return WEFT_OK;
}

/* A vector parameter (f32). */
static weft_status_t bind_f32(struct binder *bd, const char *prefix, const char *name,
                              const char *suffix, int64_t d0, float **dst)
{
    void *p = NULL;
    weft_status_t st = bind(bd, prefix, name, suffix, 1, d0, 0, &p);
    if (st == WEFT_OK && p)
        *dst = p;
    return st;
}

static weft_status_t bind_linear(struct binder *bd, const char *prefix,
                                 const struct weft_flux_linear_desc *desc, struct linear *l)
{
    l->out = desc->out;
    l->in = desc->in;
    l->style = WEFT_TP_REPLICATE;
    l->b = NULL;
    if (!desc->present)
        return WEFT_OK;
    weft_status_t st = bind(bd, prefix, desc->name, ".weight", 2, desc->out, desc->in, &l->w);
    if (st != WEFT_OK)
        return st;
    const struct binding *w = &bd->b[bd->n - 1];
    l->out = w->local[0];
    l->in = w->local[1];
    l->wdt = w->dtype;
    l->style = w->shard ? w->shard->style : WEFT_TP_REPLICATE;
    return desc->bias ? bind_f32(bd, prefix, desc->name, ".bias", desc->out, &l->b) : WEFT_OK;
}

struct bind_walk {
    struct weft_flux *m;
    struct binder *bd;
};

static struct linear *linear_of(struct weft_flux *m, enum weft_flux_part part, int64_t block,
                                int index)
{
    return part == WEFT_FLUX_PART_TOP      ? &m->top[index]
           : part == WEFT_FLUX_PART_DOUBLE ? &m->dbl[block].l[index]
                                           : &m->sgl[block].l[index];
}

static weft_status_t bind_linear_visit(void *arg, enum weft_flux_part part, int64_t block,
                                       int index, const char *prefix,
                                       const struct weft_flux_linear_desc *desc)
{
    struct bind_walk *w = arg;
    return bind_linear(w->bd, prefix, desc, linear_of(w->m, part, block, index));
}

static weft_status_t bind_norm_visit(void *arg, enum weft_flux_part part, int64_t block,
                                     int index, const char *prefix, const char *name,
                                     int64_t dim)
{
    struct bind_walk *w = arg;
    float **dst = part == WEFT_FLUX_PART_TOP      ? &w->m->txt_norm
                  : part == WEFT_FLUX_PART_DOUBLE ? &w->m->dbl[block].qk_norm[index]
                                                  : &w->m->sgl[block].qk_norm[index];
    return bind_f32(w->bd, prefix, name, ".weight", dim, dst);
}

/* Walks the model structure; the first pass (bd->next NULL) counts, the second assigns. */
static weft_status_t bind_all(struct weft_flux *m, struct binder *bd)
{
    static const struct weft_flux_visitor v = {bind_linear_visit, bind_norm_visit};
    struct bind_walk w = {m, bd};
    return weft_flux_walk(&m->cfg, &v, &w);
}

struct staging {
    void *p;
    size_t bytes;
};

static void *staging_get(struct staging *sg, size_t bytes)
{
    if (bytes > sg->bytes) {
        weft_big_free(sg->p, sg->bytes);
        sg->p = weft_big_alloc(bytes);
        sg->bytes = sg->p ? bytes : 0;
    }
    return sg->p;
}

/* Keep the ranges of full (shape [d0, d1], elements of esz bytes) along dim, concatenated, in
 * dst. */
static void slice_copy(const char *full, size_t esz, const int64_t *shape, int ndim, int dim,
                       int n, const struct weft_range *r, char *dst)
{
    int64_t d1 = ndim > 1 ? shape[1] : 1;
    if (dim == 0) {
        for (int k = 0; k < n; k++) {
            size_t len = (size_t)((r[k].end - r[k].begin) * d1) * esz;
            memcpy(dst, full + (size_t)(r[k].begin * d1) * esz, len);
            dst += len;
        }
        return;
    }
    for (int64_t i = 0; i < shape[0]; i++)
        for (int k = 0; k < n; k++) {
            size_t len = (size_t)(r[k].end - r[k].begin) * esz;
            memcpy(dst, full + (size_t)(i * d1 + r[k].begin) * esz, len);
            dst += len;
        }
}

/* One binding, from the checkpoint: whole (replicated), or this rank's byte ranges only; or,
 * with a full copy of the model already in memory (full-then-shard), sliced from it. */
static weft_status_t read_one(struct weft_flux *m, const struct weft_ckpt_tensor *t,
                              const struct binding *b, const char *full, struct staging *sg,
                              struct weft_error *err)
{
    const bool sharded = b->shard && b->shard->dim >= 0;
    const size_t esz = weft_dtype_size(b->dtype);
    const size_t local = (size_t)(b->local[0] * (b->ndim == 2 ? b->local[1] : 1));
    void *dst = b->dst;
    if (!m->K->host_visible && !(dst = staging_get(sg, local * esz)))
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    weft_status_t st = WEFT_OK;
    struct weft_range r[WEFT_MAX_BLOCKS];
    int64_t len;
    int n = sharded ? weft_tp_ranges(b->shard, m->tp_size, m->tp_rank, r, &len) : 0;
    if (full && sharded)
        slice_copy(full, esz, b->shape, b->ndim, b->shard->dim, n, r, dst);
    else if (full)
        memcpy(dst, full, local * esz);
    else if (sharded)
        st = weft_st_read_ranges(t->file, t->info, b->shard->dim, (size_t)n, r, dst, b->dtype,
                                 err);
    else
        st = weft_st_read(t->file, t->info, dst, b->dtype, err);
    if (st == WEFT_OK && dst != b->dst)
        m->K->upload(m->kc, b->dst, dst, local * esz);
    return st;
}

/* Full-then-shard (Diffusers' enable_parallelism path): every tensor whole into one host
 * arena first, the model as a single device would hold it; the caller then keeps its slices. */
static weft_status_t read_full_model(struct weft_ckpt *ck, const struct binder *bd,
                                     char **arena_p, size_t *bytes_p, size_t *offsets,
                                     struct weft_error *err)
{
    size_t total = 0;
    for (size_t i = 0; i < bd->n; i++) {
        offsets[i] = total;
        total += (size_t)(bd->b[i].shape[0] * (bd->b[i].ndim == 2 ? bd->b[i].shape[1] : 1)) *
                 weft_dtype_size(bd->b[i].dtype);
    }
    char *arena = weft_big_alloc(total);
    if (!arena)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    weft_status_t st = WEFT_OK;
    for (size_t i = 0; i < bd->n && st == WEFT_OK; i++) {
        const struct weft_ckpt_tensor *t = weft_ckpt_find(ck, bd->b[i].name);
        st = t ? weft_st_read(t->file, t->info, arena + offsets[i], bd->b[i].dtype, err)
               : WEFT_OK; /* missing tensors are reported by the caller's pass */
    }
    if (st != WEFT_OK) {
        weft_big_free(arena, total);
        return st;
    }
    *arena_p = arena;
    *bytes_p = total;
    return WEFT_OK;
}

static weft_status_t read_weights(struct weft_flux *m, struct weft_ckpt *ck,
                                  const struct binder *bd, int full_then_shard,
                                  struct weft_error *err)
{
    /* every parameter there with its shape, none extra: the model layer's check, on the files
     * this rank reads (they may have changed since the coordinator checked them) */
    weft_status_t st = weft_flux_check_params(&m->cfg, ck, err);
    if (st != WEFT_OK)
        return st;
    struct staging sg = {0};
    char *full = NULL;
    size_t full_bytes = 0, *offsets = NULL;
    if (full_then_shard) {
        offsets = weft_malloc((bd->n + 1) * sizeof(*offsets));
        st = offsets ? read_full_model(ck, bd, &full, &full_bytes, offsets, err)
                     : weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < bd->n && st == WEFT_OK; i++) {
        const struct binding *b = &bd->b[i];
        const struct weft_ckpt_tensor *t = weft_ckpt_find(ck, b->name);
        if (!t) /* checked above: the binder and the parameter list are one walk */
            st = weft_error_refuse(err, WEFT_ERR_FORMAT, "%s: missing tensor '%s'",
                                   weft_ckpt_dir(ck), b->name);
        else if (!b->skip)
            st = read_one(m, t, b, full ? full + offsets[i] : NULL, &sg, err);
    }
    weft_big_free(sg.p, sg.bytes);
    weft_big_free(full, full_bytes);
    weft_free(offsets);
    return st;
}

/* The parallel context of opts (context parallelism, its ranks, the collectives) on m. */
static weft_status_t set_context(struct weft_flux *m, const struct weft_flux_opts *opts,
                                 struct weft_error *err)
{
    struct weft_cp_layout cp = opts->cp;
    cp.ring = cp.ring > 1 ? cp.ring : 1;
    cp.ulysses = cp.ulysses > 1 ? cp.ulysses : 1;
    const int size = cp.ring * cp.ulysses;
    const int ring_rank = size > 1 ? opts->ring_rank : 0;
    const int ulysses_rank = size > 1 ? opts->ulysses_rank : 0;
    if (size > 1 && (!opts->comm || ring_rank < 0 || ring_rank >= cp.ring || ulysses_rank < 0 ||
                     ulysses_rank >= cp.ulysses))
        return weft_error_set(err, WEFT_ERR_INVALID, "flux",
                              "context parallelism (ring %d x ulysses %d) needs ranks within "
                              "the degrees and collectives",
                              cp.ring, cp.ulysses);
    m->comm = opts->comm;
    m->cp = cp;
    m->cp_size = size;
    m->ring_rank = ring_rank;
    m->ulysses_rank = ulysses_rank;
    m->cp_rank = ring_rank * cp.ulysses + ulysses_rank;
    return WEFT_OK;
}

weft_status_t weft_flux_load(const char *dir, const struct weft_flux_opts *opts,
                             struct weft_flux **model_p, struct weft_error *err)
{
    struct weft_ckpt *ck;
    weft_status_t st = weft_ckpt_open(dir, &ck, err);
    if (st != WEFT_OK)
        return st;
    struct binder bd = {0};
    struct weft_flux *m = weft_calloc(1, sizeof(*m));
    if (!m) {
        st = WEFT_ERR_NOMEM;
        goto out;
    }
    m->K = opts->kernels;
    m->dtype = opts->dtype;
    m->kc = opts->kctx;
    m->tp_size = opts->tp_size > 1 ? opts->tp_size : 1;
    m->tp_rank = m->tp_size > 1 ? opts->tp_rank : 0;
    if (m->tp_size > 1 && (!opts->tp_layout || !opts->comm ||
                           opts->tp_layout->degree != m->tp_size || m->tp_rank < 0 ||
                           m->tp_rank >= m->tp_size)) {
        st = weft_error_set(err, WEFT_ERR_INVALID, "flux",
                            "tensor parallelism needs a layout resolved for degree %d, a rank "
                            "below it and collectives",
                            m->tp_size);
        goto out;
    }
    if ((st = set_context(m, opts, err)) != WEFT_OK)
        goto out;
    m->stage = opts->stage;
    if (m->stage.on && (m->tp_size > 1 || m->cp_size > 1 || !m->comm)) {
        st = weft_error_set(err, WEFT_ERR_INVALID, "flux",
                            "a pipeline stage (device_map) cannot be combined with tensor or "
                            "context parallelism, and needs collectives");
        goto out;
    }
    bd.layout = m->tp_size > 1 ? opts->tp_layout : NULL;
    bd.tp_size = m->tp_size;
    bd.tp_rank = m->tp_rank;
    bd.cfg = &m->cfg;
    bd.stage = m->stage.on ? &m->stage : NULL;
    bd.ck = ck;
    if (strcmp(weft_ckpt_class(ck), WEFT_FLUX_CLASS) != 0 &&
        strcmp(weft_ckpt_class(ck), WEFT_FLUX2_CLASS) != 0 &&
        strcmp(weft_ckpt_class(ck), WEFT_QWEN_CLASS) != 0) {
        st = weft_error_refuse_or_log(err, WEFT_ERR_UNSUPPORTED, "flux",
                                      "%s: class '%s' is none of %s, %s and %s", dir,
                                      weft_ckpt_class(ck), WEFT_FLUX_CLASS, WEFT_FLUX2_CLASS,
                                      WEFT_QWEN_CLASS);
        goto out;
    }
    char origin[1100];
    snprintf(origin, sizeof(origin), "%s/config.json", dir);
    if ((st = weft_flux_config_parse(weft_ckpt_config(ck), origin, &m->cfg, err)) != WEFT_OK)
        goto out;
    if (m->cfg.attention_head_dim > 512) {
        st = weft_error_refuse_or_log(err, WEFT_ERR_UNSUPPORTED, "flux",
                                      "%s: attention_head_dim %lld is above this backend's limit "
                                      "of 512",
                                      origin, (long long)m->cfg.attention_head_dim);
        goto out;
    }
    if (bd.layout && (st = weft_flux_tp_check(&m->cfg, bd.layout, err)) != WEFT_OK)
        goto out;
    if (m->stage.on) {
        const struct weft_flux_stage *g = &m->stage;
        const int n = weft_flux_unit_count(&m->cfg);
        const bool any = g->unit_first < g->unit_last;
        const bool chained = !any || ((g->unit_first == 0) == (g->prev < 0) &&
                                      (g->unit_last == n) == (g->next < 0));
        if (g->unit_first < 0 || g->unit_last > n || g->unit_first > g->unit_last ||
            g->root < 0 || !chained) {
            st = weft_error_set(err, WEFT_ERR_INVALID, "flux",
                                "pipeline stage: units [%d, %d) of %d with prev %d, next %d, "
                                "root %d do not chain",
                                g->unit_first, g->unit_last, n, g->prev, g->next, g->root);
            goto out;
        }
    }
    m->heads_l = m->cfg.num_attention_heads / m->tp_size;
    m->dim_l = m->heads_l * m->cfg.attention_head_dim;
    m->mlp_l = m->cfg.mlp_hidden_dim / m->tp_size;
    m->dbl = weft_calloc((size_t)m->cfg.num_layers + 1, sizeof(*m->dbl));
    m->sgl = weft_calloc((size_t)m->cfg.num_single_layers + 1, sizeof(*m->sgl));
    if (!m->dbl || !m->sgl) {
        st = WEFT_ERR_NOMEM;
        goto out;
    }
    if ((st = bind_all(m, &bd)) != WEFT_OK) /* count */
        goto out;
    m->arena_bytes = bd.bytes;
    m->weight_bytes = bd.param_bytes;
    if (m->arena_bytes &&
        (st = m->K->buf_alloc(m->kc, m->arena_bytes, &m->weights)) != WEFT_OK) {
        weft_error_set(err, st, "flux", "%s: cannot allocate %zu bytes of weights", dir,
                       m->arena_bytes);
        goto out;
    }
    bd.n = 0;
    bd.bytes = 0;
    bd.next = m->weights;
    if ((st = bind_all(m, &bd)) != WEFT_OK) /* assign */
        goto out;
    st = read_weights(m, ck, &bd, opts->tp_full_then_shard && !m->stage.on, err);
out:
    weft_free(bd.b);
    weft_ckpt_close(ck);
    if (st != WEFT_OK) {
        if (st == WEFT_ERR_NOMEM) /* the binder's tables (a cause given above stays) */
            weft_error_refuse(err, st, "out of memory");
        weft_flux_destroy(m);
        return st;
    }
    *model_p = m;
    return WEFT_OK;
}

static void acts_release(struct weft_flux *m);

weft_status_t weft_flux_rebind(struct weft_flux *m, const struct weft_flux_opts *opts,
                               struct weft_error *err)
{
    const int tp_size = opts->tp_size > 1 ? opts->tp_size : 1;
    const int tp_rank = tp_size > 1 ? opts->tp_rank : 0;
    if (tp_size != m->tp_size || tp_rank != m->tp_rank || m->stage.on || opts->stage.on ||
        (tp_size > 1 && !opts->comm))
        return weft_error_set(err, WEFT_ERR_INVALID, "flux",
                              "the loaded shard (tp rank %d of %d%s) cannot serve tp rank %d "
                              "of %d%s", m->tp_rank, m->tp_size,
                              m->stage.on ? ", a pipeline stage" : "", tp_rank, tp_size,
                              opts->stage.on ? ", a pipeline stage" : "");
    weft_status_t st = set_context(m, opts, err);
    if (st == WEFT_OK)
        acts_release(m); /* sized for the old split; the next pass reserves again */
    return st;
}

static void acts_release(struct weft_flux *m)
{
    if (m->a.base)
        m->K->buf_free(m->kc, m->a.base, m->a.bytes);
    weft_cp_attn_destroy(m->a.cpa);
    weft_free(m->a.gather_counts);
    weft_free(m->a.host);
    memset(&m->a, 0, sizeof(m->a));
}

void weft_flux_destroy(struct weft_flux *m)
{
    if (!m)
        return;
    acts_release(m);
    if (m->weights)
        m->K->buf_free(m->kc, m->weights, m->arena_bytes);
    weft_free(m->dbl);
    weft_free(m->sgl);
    weft_free(m);
}

const struct weft_flux_config *weft_flux_get_config(const struct weft_flux *m)
{
    return &m->cfg;
}

enum weft_dtype weft_flux_dtype(const struct weft_flux *m)
{
    return m->dtype;
}

size_t weft_flux_weight_bytes(const struct weft_flux *m)
{
    return m->weight_bytes;
}

/* ---------------------------------------------------------------------------------------- */
/* Activations                                                                               */

/* Context-parallel attention for this layout of chunk lengths. */
static weft_status_t reserve_cp(struct weft_flux *m, int64_t s_img, int64_t s_txt,
                                struct weft_error *err)
{
    struct acts *a = &m->a;
    const int W = m->cp_size;
    int64_t *rows = weft_calloc((size_t)W, sizeof(*rows));
    a->gather_counts = weft_calloc((size_t)W, sizeof(size_t));
    if (!rows || !a->gather_counts) {
        weft_free(rows);
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    }
    for (int c = 0; c < W; c++) {
        int64_t b, ni, nt;
        weft_cp_chunk(s_img, W, c, &b, &ni);
        weft_cp_chunk(s_txt, W, c, &b, &nt);
        rows[c] = ni + nt;
    }
    weft_status_t st = weft_cp_attn_create(m->K, m->kc, m->comm, &m->cp, m->ring_rank,
                                           m->ulysses_rank, m->heads_l,
                                           m->cfg.attention_head_dim, rows, &a->cpa);
    weft_free(rows);
    if (st != WEFT_OK) /* logged where it failed */
        weft_error_refuse(err, st,
                          "context-parallel attention for %lld image and %lld text "
                          "tokens: %s",
                          (long long)s_img, (long long)s_txt, weft_status_str(st));
    return st;
}

weft_status_t weft_flux_reserve(struct weft_flux *m, int64_t batch, int64_t s_img, int64_t s_txt,
                                struct weft_error *err)
{
    struct acts *a = &m->a;
    if (a->base && batch <= a->batch && s_img == a->full_img && s_txt == a->full_txt)
        return WEFT_OK;
    const struct weft_flux_config *c = &m->cfg;
    if (m->cp_size > 1) {
        /* the flags' own consistency is the planner's check; here: can the lengths split? */
        weft_status_t st =
            weft_cp_check(&m->cp, m->cp.anything && m->cp.ulysses > 1,
                          m->cp.anything && m->cp.ring > 1, s_txt, s_img, m->heads_l, err);
        if (st != WEFT_OK)
            return st;
    }
    int64_t img0, ni, txt0, nt;
    weft_cp_chunk(s_img, m->cp_size, m->cp_rank, &img0, &ni);
    weft_cp_chunk(s_txt, m->cp_size, m->cp_rank, &txt0, &nt);
    const int64_t B = batch, S = ni + nt, Dl = m->dim_l;
    const int64_t hd = c->attention_head_dim;
    int64_t sizes[WEFT_FLUX_ACT_BUFFERS];
    const size_t total = weft_flux_act_sizes(c, m->tp_size, m->cp_size > 1, B, ni, nt, s_img,
                                             sizes) / sizeof(float);
    float **ptrs[] = {&a->h,   &a->xn,  &a->q,    &a->k,          &a->v,
                      &a->cat, &a->tmp, &a->cos,  &a->sin,        &a->in_hidden,
                      &a->in_encoder, &a->out, &a->temb, &a->act, &a->vec,
                      &a->proj, &a->mod, &a->modc, &a->scalars, &a->out_local,
                      &a->mods};
    _Static_assert(WEFT_FLUX_ACT_BUFFERS == sizeof(ptrs) / sizeof(ptrs[0]),
                   "sizes and pointers");
    const bool shared = sizes[2] == 0; /* FLUX.1: Q, K and V inside cat */
    acts_release(m);
    void *base;
    weft_status_t st = m->K->buf_alloc(m->kc, total * sizeof(float), &base);
    if (st != WEFT_OK)
        return weft_error_set(err, st, "flux",
                              "cannot reserve %zu bytes of activations for batch %lld, %lld "
                              "image and %lld text tokens",
                              total * sizeof(float), (long long)batch, (long long)ni,
                              (long long)nt);
    a->base = base;
    a->bytes = total * sizeof(float);
    float *p = base;
    for (size_t i = 0; i < WEFT_FLUX_ACT_BUFFERS; i++) {
        *ptrs[i] = p;
        p += ((size_t)sizes[i] + 15) / 16 * 16;
    }
    a->ldqkv = Dl;
    if (shared) {
        a->q = a->cat + Dl, a->k = a->cat + 2 * Dl, a->v = a->cat + 3 * Dl;
        a->ldqkv = Dl + m->mlp_l;
    } else if (c->version == 2) { /* rows Q | K | V | gate | value */
        a->k = a->q + Dl, a->v = a->q + 2 * Dl;
        a->ldqkv = 3 * Dl + 2 * m->mlp_l;
    }
    if (!m->K->host_visible) {
        a->host_floats = (size_t)(2 * B + 2 * S * hd);
        if (!(a->host = weft_malloc(a->host_floats * sizeof(float)))) {
            acts_release(m);
            return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
        }
    }
    a->batch = batch;
    a->s_img = ni, a->s_txt = nt, a->img0 = img0, a->txt0 = txt0;
    a->full_img = s_img, a->full_txt = s_txt;
    if (m->cp_size == 1)
        a->out_local = a->out;
    else if ((st = reserve_cp(m, s_img, s_txt, err)) != WEFT_OK)
        acts_release(m);
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* Forward                                                                                   */

/* A Linear layer as its tensor-parallel style wants it: plain (replicated or colwise: local
 * output columns), or a partial product summed across the group with the bias added once
 * after (rowwise: the input is this rank's columns; rowwise_split_input: the input is
 * replicated and this rank takes its slice). The sum needs y contiguous (ldy == out). */
static void lin(struct weft_flux *m, const struct linear *l, const float *x, int64_t ldx,
                float *y, int64_t ldy, int64_t rows)
{
    const struct weft_kernels *K = m->K;
    bool partial = l->style == WEFT_TP_ROWWISE || l->style == WEFT_TP_PACKED_ROWWISE ||
                   l->style == WEFT_TP_ROWWISE_SPLIT_INPUT;
    if (m->tp_size == 1 || !partial) {
        K->linear(m->kc, x, ldx, l->w, l->wdt, l->b, y, ldy, rows, l->out, l->in, 0);
        return;
    }
    if (l->style == WEFT_TP_ROWWISE_SPLIT_INPUT)
        x += (int64_t)m->tp_rank * l->in;
    K->linear(m->kc, x, ldx, l->w, l->wdt, NULL, y, ldy, rows, l->out, l->in, 0);
    if (m->comm_status == WEFT_OK) {
        weft_status_t st = K->sync(m->kc);
        if (st == WEFT_OK)
            st = m->comm->allreduce(m->comm->tp, y, (size_t)(rows * l->out));
        m->comm_status = st;
    }
    if (l->b)
        K->gated_add(m->kc, y, ldy, NULL, l->b, 0, rows, l->out);
}

/* RoPE tables for this rank's joint ids [txt chunk; img chunk]: per axis, angles in f64
 * (Qwen-Image: in f32, as its rope_params makes them), cos/sin stored in f32. */
static void rope_tables(struct weft_flux *m, const struct weft_flux_inputs *in)
{
    const struct weft_flux_config *c = &m->cfg;
    const struct acts *a = &m->a;
    const int64_t S = a->s_txt + a->s_img, hd = c->attention_head_dim;
    const bool direct = m->K->host_visible;
    float *hcos = direct ? a->cos : a->host, *hsin = direct ? a->sin : a->host + S * hd;
    /* the inverse frequency of each pair of each axis, once (head_dim <= 512: load's check);
     * Qwen-Image's rope_params makes them, and the angles, in f32 */
    const bool f32 = c->version == 3;
    double inv[256];
    for (int ax = 0, k = 0; ax < c->n_axes; ax++) {
        const int64_t dim = c->axes_dims_rope[ax];
        for (int64_t j = 0; j < dim / 2; j++, k++)
            inv[k] = f32 ? (double)(float)(1.0 / (double)powf((float)c->rope_theta,
                                                              (float)(2 * j) / (float)dim))
                         : 1.0 / pow(c->rope_theta, (double)(2 * j) / (double)dim);
    }
    for (int64_t r = 0; r < S; r++) {
        const float *ids = r < a->s_txt ? in->txt_ids + (a->txt0 + r) * c->n_axes
                                        : in->img_ids + (a->img0 + r - a->s_txt) * c->n_axes;
        int64_t off = 0;
        for (int ax = 0; ax < c->n_axes; ax++) {
            int64_t dim = c->axes_dims_rope[ax];
            for (int64_t j = 0; j < dim / 2; j++) {
                const double f = inv[off / 2 + j];
                const double ang = f32 ? (double)(ids[ax] * (float)f) : (double)ids[ax] * f;
                float cv = (float)cos(ang), sv = (float)sin(ang);
                hcos[r * hd + off + 2 * j] = hcos[r * hd + off + 2 * j + 1] = cv;
                hsin[r * hd + off + 2 * j] = hsin[r * hd + off + 2 * j + 1] = sv;
            }
            off += dim;
        }
    }
    if (!direct) {
        m->K->upload(m->kc, a->cos, hcos, (size_t)(S * hd) * sizeof(float));
        m->K->upload(m->kc, a->sin, hsin, (size_t)(S * hd) * sizeof(float));
    }
}

/* The output to the caller, in the model's dtype (held as f32). */
static weft_status_t output(struct weft_flux *m, float *out, size_t n)
{
    m->K->download(m->kc, out, m->a.out, n * sizeof(float));
    weft_status_t st = m->K->sync(m->kc);
    if (st == WEFT_OK)
        weft_dtype_round_n(m->dtype, out, n);
    return st;
}

/* temb = timestep_embedder(proj(t)) [+ guidance_embedder(proj(g))] + text_embedder(pooled)
 * (FLUX.2: no text_embedder), then act = silu(temb), the input of every modulation; FLUX.2
 * computes its three shared modulations here once: mod (image) and modc (text) for the double
 * blocks, mods for the single blocks. */
static void time_text_embed(struct weft_flux *m, const struct weft_flux_inputs *in)
{
    struct acts *a = &m->a;
    const struct weft_flux_config *c = &m->cfg;
    const int64_t B = in->batch, D = c->inner_dim, P = c->time_proj_dim;
    const struct weft_kernels *K = m->K;
    const bool direct = K->host_visible, v1 = c->version == 1, v3 = c->version == 3;
    const int64_t S = a->s_txt + a->s_img, hd = c->attention_head_dim;
    float *tval = direct ? a->scalars : a->host + 2 * S * hd, *gval = tval + B;
    float *pooled = a->scalars + 4 * B;
    for (int64_t b = 0; b < B; b++) {
        /* timestep.to(dtype) * 1000 and guidance.to(dtype) * 1000, the product in dtype too */
        const enum weft_dtype d = m->dtype;
        tval[b] = v3 ? weft_dtype_round(d, in->timestep[b]) /* Timesteps scales it itself */
                     : weft_dtype_round(d, weft_dtype_round(d, in->timestep[b]) * 1000.0f);
        gval[b] = in->guidance
                      ? weft_dtype_round(d, weft_dtype_round(d, in->guidance[b]) * 1000.0f)
                      : 0.0f;
    }
    if (!direct)
        K->upload(m->kc, a->scalars, tval, (size_t)(2 * B) * sizeof(float));
    K->timestep_embed(m->kc, a->scalars, B, a->proj, P, v3 ? 1000.0f : 1.0f);
    lin(m, &m->top[WEFT_FLUX_TIME_LIN1], a->proj, P, a->vec, D, B);
    K->silu(m->kc, a->vec, a->vec, B * D);
    lin(m, &m->top[WEFT_FLUX_TIME_LIN2], a->vec, D, a->temb, D, B);
    if (c->guidance_embeds) {
        K->timestep_embed(m->kc, a->scalars + B, B, a->proj, P, 1.0f);
        lin(m, &m->top[WEFT_FLUX_GUIDANCE_LIN1], a->proj, P, a->vec, D, B);
        K->silu(m->kc, a->vec, a->vec, B * D);
        lin(m, &m->top[WEFT_FLUX_GUIDANCE_LIN2], a->vec, D, a->act, D, B);
        K->gated_add(m->kc, a->temb, D, NULL, a->act, D, B, D);
    }
    if (v1) {
        K->upload(m->kc, pooled, in->pooled, (size_t)(B * c->pooled_projection_dim) * 4);
        lin(m, &m->top[WEFT_FLUX_TEXT_LIN1], pooled, c->pooled_projection_dim, a->vec, D, B);
        K->silu(m->kc, a->vec, a->vec, B * D);
        lin(m, &m->top[WEFT_FLUX_TEXT_LIN2], a->vec, D, a->act, D, B);
        K->gated_add(m->kc, a->temb, D, NULL, a->act, D, B, D);
    }
    K->silu(m->kc, a->temb, a->act, B * D); /* every AdaLN takes silu(temb) */
    if (c->version == 2) {
        lin(m, &m->top[WEFT_FLUX_MOD_IMG], a->act, D, a->mod, 6 * D, B);
        lin(m, &m->top[WEFT_FLUX_MOD_TXT], a->act, D, a->modc, 6 * D, B);
        lin(m, &m->top[WEFT_FLUX_MOD_SINGLE], a->act, D, a->mods, 3 * D, B);
    }
}

/* Q, K, V of rows [r0, r0+n) of every batch element: rmsnorm with the given norm weights. */
static void qkv(struct weft_flux *m, const struct linear *lq, const struct linear *lk,
                const struct linear *lv, const float *nq, const float *nk, int64_t r0,
                int64_t n)
{
    struct acts *a = &m->a;
    const int64_t S = a->s_img + a->s_txt, D = m->cfg.inner_dim, hd = m->cfg.attention_head_dim;
    const int64_t H = m->heads_l, Dl = m->dim_l, ld = a->ldqkv;
    for (int64_t b = 0; b < a->batch; b++) {
        const float *x = a->xn + (b * S + r0) * D;
        int64_t o = (b * S + r0) * ld;
        lin(m, lq, x, D, a->q + o, ld, n);
        lin(m, lk, x, D, a->k + o, ld, n);
        lin(m, lv, x, D, a->v + o, ld, n);
        m->K->rmsnorm(m->kc, a->q + o, ld, nq, n, H, hd, m->cfg.eps);
        m->K->rmsnorm(m->kc, a->k + o, ld, nk, n, H, hd, m->cfg.eps);
    }
    (void)Dl;
}

/* RoPE on all of Q and K, then attention per batch element into cat[:, :, 0:Dl]; across the
 * context-parallel ranks when there are several. */
static void attend(struct weft_flux *m)
{
    struct acts *a = &m->a;
    const int64_t S = a->s_img + a->s_txt, Dl = m->dim_l, hd = m->cfg.attention_head_dim;
    const int64_t H = m->heads_l, ldc = Dl + m->mlp_l, ld = a->ldqkv;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int64_t b = 0; b < a->batch; b++) {
        float *q = a->q + b * S * ld, *k = a->k + b * S * ld, *v = a->v + b * S * ld;
        m->K->rope(m->kc, q, ld, a->cos, a->sin, S, H, hd);
        m->K->rope(m->kc, k, ld, a->cos, a->sin, S, H, hd);
        if (!a->cpa) {
            m->K->attention(m->kc, q, ld, k, ld, v, ld, a->cat + b * S * ldc, ldc, NULL, S, S, H,
                            hd, scale);
            continue;
        }
        if (m->comm_status == WEFT_OK)
            m->comm_status = weft_cp_attn_run(a->cpa, q, k, v, ld, a->cat + b * S * ldc, ldc,
                                              scale);
    }
}

/* x += gate * ff(LN(x) * (1 + scale) + shift), for rows [r0, r0+n) of each batch element. The
 * feed-forward is gelu_tanh between its two Linears (FLUX.1), or SwiGLU of the fused gate|value
 * projection, made in the Q | K | V | gate | value buffer's last columns (FLUX.2). */
static void mlp_residual(struct weft_flux *m, const struct linear *l_in,
                         const struct linear *l_out, const float *mod, int64_t r0, int64_t n)
{
    struct acts *a = &m->a;
    const int64_t S = a->s_img + a->s_txt, D = m->cfg.inner_dim, mlp = m->mlp_l;
    const int64_t ldc = m->dim_l + mlp, ld = a->ldqkv;
    const struct weft_kernels *K = m->K;
    const bool v1 = m->cfg.version != 2; /* gelu_tanh: FLUX.1 and Qwen-Image */
    for (int64_t b = 0; b < a->batch; b++) {
        const float *md = mod + b * 6 * D; /* shift_mlp, scale_mlp, gate_mlp at 3D, 4D, 5D */
        float *x = a->h + (b * S + r0) * D, *xn = a->xn + (b * S + r0) * D;
        float *hid = a->cat + (b * S + r0) * ldc + m->dim_l, *y = a->tmp + (b * S + r0) * D;
        K->layernorm(m->kc, x, D, xn, D, n, D, m->cfg.eps);
        K->modulate(m->kc, xn, D, md + 3 * D, md + 4 * D, xn, D, n, D);
        if (v1) {
            lin(m, l_in, xn, D, hid, ldc, n);
            K->gelu_tanh(m->kc, hid, ldc, hid, ldc, n, mlp);
        } else {
            float *gv = a->q + (b * S + r0) * ld + 3 * m->dim_l;
            lin(m, l_in, xn, D, gv, ld, n);
            K->swiglu(m->kc, gv, ld, hid, ldc, n, mlp);
        }
        lin(m, l_out, hid, ldc, y, D, n);
        K->gated_add(m->kc, x, D, md + 5 * D, y, D, n, D);
    }
}

static void double_block(struct weft_flux *m, const struct double_block *blk)
{
    struct acts *a = &m->a;
    const struct weft_kernels *K = m->K;
    const int64_t B = a->batch, St = a->s_txt, Si = a->s_img, S = St + Si;
    const int64_t D = m->cfg.inner_dim, ldc = m->dim_l + m->mlp_l;
    /* shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp: the block's own (FLUX.1),
     * or the shared ones time_text_embed made (FLUX.2) */
    if (m->cfg.version != 2) {
        lin(m, &blk->l[WEFT_FLUX_D_NORM1], a->act, D, a->mod, 6 * D, B);
        lin(m, &blk->l[WEFT_FLUX_D_NORM1_CONTEXT], a->act, D, a->modc, 6 * D, B);
    }
    for (int64_t b = 0; b < B; b++) {
        const float *mi = a->mod + b * 6 * D, *mt = a->modc + b * 6 * D;
        float *h = a->h + b * S * D, *xn = a->xn + b * S * D;
        K->layernorm(m->kc, h, D, xn, D, S, D, m->cfg.eps);
        K->modulate(m->kc, xn, D, mt, mt + D, xn, D, St, D);
        K->modulate(m->kc, xn + St * D, D, mi, mi + D, xn + St * D, D, Si, D);
    }
    qkv(m, &blk->l[WEFT_FLUX_D_ADD_Q], &blk->l[WEFT_FLUX_D_ADD_K], &blk->l[WEFT_FLUX_D_ADD_V],
        blk->qk_norm[WEFT_FLUX_NORM_ADDED_Q], blk->qk_norm[WEFT_FLUX_NORM_ADDED_K], 0, St);
    qkv(m, &blk->l[WEFT_FLUX_D_TO_Q], &blk->l[WEFT_FLUX_D_TO_K], &blk->l[WEFT_FLUX_D_TO_V],
        blk->qk_norm[WEFT_FLUX_NORM_Q], blk->qk_norm[WEFT_FLUX_NORM_K], St, Si);
    attend(m);
    for (int64_t b = 0; b < B; b++) {
        const float *mi = a->mod + b * 6 * D, *mt = a->modc + b * 6 * D;
        float *c = a->cat + b * S * ldc, *y = a->tmp + b * S * D, *h = a->h + b * S * D;
        lin(m, &blk->l[WEFT_FLUX_D_TO_ADD_OUT], c, ldc, y, D, St);
        lin(m, &blk->l[WEFT_FLUX_D_TO_OUT], c + St * ldc, ldc, y + St * D, D, Si);
        K->gated_add(m->kc, h, D, mt + 2 * D, y, D, St, D);
        K->gated_add(m->kc, h + St * D, D, mi + 2 * D, y + St * D, D, Si, D);
    }
    mlp_residual(m, &blk->l[WEFT_FLUX_D_FF_IN], &blk->l[WEFT_FLUX_D_FF_OUT], a->mod, St, Si);
    mlp_residual(m, &blk->l[WEFT_FLUX_D_FF_CONTEXT_IN], &blk->l[WEFT_FLUX_D_FF_CONTEXT_OUT],
                 a->modc, 0, St);
}

static void single_block(struct weft_flux *m, const struct single_block *blk)
{
    struct acts *a = &m->a;
    const struct weft_kernels *K = m->K;
    const int64_t B = a->batch, S = a->s_txt + a->s_img, D = m->cfg.inner_dim;
    const int64_t mlp = m->mlp_l, ldc = m->dim_l + mlp, ld = a->ldqkv;
    const bool v1 = m->cfg.version != 2;
    /* shift, scale, gate: the block's own (FLUX.1) or the shared ones (FLUX.2) */
    const float *mod = v1 ? a->mod : a->mods;
    if (v1)
        lin(m, &blk->l[WEFT_FLUX_S_NORM], a->act, D, a->mod, 3 * D, B);
    for (int64_t b = 0; b < B; b++) {
        const float *md = mod + b * 3 * D;
        float *h = a->h + b * S * D, *xn = a->xn + b * S * D;
        K->layernorm(m->kc, h, D, xn, D, S, D, m->cfg.eps);
        K->modulate(m->kc, xn, D, md, md + D, xn, D, S, D);
    }
    if (v1) {
        qkv(m, &blk->l[WEFT_FLUX_S_TO_Q], &blk->l[WEFT_FLUX_S_TO_K], &blk->l[WEFT_FLUX_S_TO_V],
            blk->qk_norm[WEFT_FLUX_NORM_Q], blk->qk_norm[WEFT_FLUX_NORM_K], 0, S);
    } else { /* one Linear makes Q | K | V | gate | value */
        const int64_t hd = m->cfg.attention_head_dim;
        for (int64_t b = 0; b < B; b++) {
            float *q = a->q + b * S * ld;
            lin(m, &blk->l[WEFT_FLUX_S_QKV_MLP], a->xn + b * S * D, D, q, ld, S);
            K->rmsnorm(m->kc, q, ld, blk->qk_norm[WEFT_FLUX_NORM_Q], S, m->heads_l, hd,
                       m->cfg.eps);
            K->rmsnorm(m->kc, a->k + b * S * ld, ld, blk->qk_norm[WEFT_FLUX_NORM_K], S,
                       m->heads_l, hd, m->cfg.eps);
        }
    }
    attend(m);
    /* the MLP branch after attention (FLUX.1: its hidden states take the columns Q, K, V
     * held) */
    for (int64_t b = 0; b < B; b++) {
        const float *md = mod + b * 3 * D;
        float *hid = a->cat + b * S * ldc + m->dim_l;
        if (v1) {
            lin(m, &blk->l[WEFT_FLUX_S_PROJ_MLP], a->xn + b * S * D, D, hid, ldc, S);
            K->gelu_tanh(m->kc, hid, ldc, hid, ldc, S, mlp);
        } else {
            K->swiglu(m->kc, a->q + b * S * ld + 3 * m->dim_l, ld, hid, ldc, S, mlp);
        }
        lin(m, &blk->l[WEFT_FLUX_S_PROJ_OUT], a->cat + b * S * ldc, ldc, a->tmp + b * S * D, D,
            S);
        K->gated_add(m->kc, a->h + b * S * D, D, md + 2 * D, a->tmp + b * S * D, D, S, D);
    }
}

static weft_status_t check_inputs(const struct weft_flux *m, const struct weft_flux_inputs *in)
{
    const bool pooled = m->cfg.version == 1; /* FLUX.2 has no pooled text embedding */
    if (in->batch < 1 || in->s_img < 1 || in->s_txt < 0 || !in->hidden || (pooled && !in->pooled) ||
        !in->timestep || !in->img_ids || (in->s_txt > 0 && (!in->encoder || !in->txt_ids))) {
        WEFT_LOG_ERROR("flux", "forward: missing input or empty batch");
        return WEFT_ERR_INVALID;
    }
    if (m->cfg.guidance_embeds && !in->guidance) {
        WEFT_LOG_ERROR("flux", "forward: this model has guidance_embeds and needs a guidance "
                               "value");
        return WEFT_ERR_INVALID;
    }
    return WEFT_OK;
}

/* The hidden states and the time embedding (FLUX.2: and the shared modulations), handed from
 * stage to stage. */
static weft_status_t stage_io(struct weft_flux *m, bool receive)
{
    const struct acts *a = &m->a;
    const size_t nh = (size_t)(a->batch * (a->s_txt + a->s_img) * m->cfg.inner_dim);
    const size_t nt = (size_t)(a->batch * m->cfg.inner_dim);
    const int peer = receive ? m->stage.prev : m->stage.next;
    struct {
        float *p;
        size_t n;
    } part[] = {{a->h, nh}, {a->act, nt}, {a->mod, 6 * nt}, {a->modc, 6 * nt}, {a->mods, 3 * nt}};
    const int n_parts = m->cfg.version == 2 ? 5 : 2;
    weft_status_t st = m->K->sync(m->kc);
    for (int i = 0; i < n_parts && st == WEFT_OK; i++)
        st = receive ? m->comm->recv(m->comm->pipe, part[i].p, part[i].n, peer)
                     : m->comm->send(m->comm->pipe, part[i].p, part[i].n, peer);
    return st;
}

static bool has_unit(const struct weft_flux *m, int unit)
{
    return !m->stage.on || (unit >= m->stage.unit_first && unit < m->stage.unit_last);
}

weft_status_t weft_flux_forward(struct weft_flux *m, const struct weft_flux_inputs *in,
                                float *out)
{
    weft_status_t st = check_inputs(m, in);
    if (st != WEFT_OK)
        return st;
    if ((st = weft_flux_reserve(m, in->batch, in->s_img, in->s_txt, NULL)) != WEFT_OK)
        return st;
    struct acts *a = &m->a;
    const struct weft_flux_config *c = &m->cfg;
    const struct weft_kernels *K = m->K;
    /* this rank's chunk of the text and image tokens (all of them without context parallelism) */
    const int64_t B = in->batch, St = a->s_txt, Si = a->s_img, S = St + Si, D = c->inner_dim;
    const int64_t L = c->num_layers, n_units = weft_flux_unit_count(c);
    const bool staged = m->stage.on, any = !staged || m->stage.unit_first < m->stage.unit_last;
    a->batch = B; /* a larger reservation serves smaller batches */
    m->comm_status = WEFT_OK;

    if (has_unit(m, 0)) {
        for (int64_t b = 0; b < B; b++) {
            K->upload(m->kc, a->in_hidden + b * Si * c->in_channels,
                      in->hidden + (b * in->s_img + a->img0) * c->in_channels,
                      (size_t)(Si * c->in_channels) * 4);
            if (St)
                K->upload(m->kc, a->in_encoder + b * St * c->joint_attention_dim,
                          in->encoder + (b * in->s_txt + a->txt0) * c->joint_attention_dim,
                          (size_t)(St * c->joint_attention_dim) * 4);
        }
        for (int64_t b = 0; St && c->version == 3 && b < B; b++) /* Qwen-Image's txt_norm */
            K->rmsnorm(m->kc, a->in_encoder + b * St * c->joint_attention_dim,
                       c->joint_attention_dim, m->txt_norm, St, 1, c->joint_attention_dim,
                       c->eps);
        for (int64_t b = 0; b < B; b++) {
            lin(m, &m->top[WEFT_FLUX_X_EMBEDDER], a->in_hidden + b * Si * c->in_channels,
                c->in_channels, a->h + (b * S + St) * D, D, Si);
            if (St)
                lin(m, &m->top[WEFT_FLUX_CONTEXT_EMBEDDER],
                    a->in_encoder + b * St * c->joint_attention_dim, c->joint_attention_dim,
                    a->h + b * S * D, D, St);
        }
        time_text_embed(m, in);
    } else if (any && (st = stage_io(m, true)) != WEFT_OK) {
        return st;
    }
    if (any)
        rope_tables(m, in);
    for (int64_t i = 0; i < L; i++) {
        if (!has_unit(m, (int)(1 + i)))
            continue;
        double_block(m, &m->dbl[i]);
        if ((st = K->status(m->kc)) != WEFT_OK || (st = m->comm_status) != WEFT_OK)
            return st;
    }
    for (int64_t i = 0; i < c->num_single_layers; i++) {
        if (!has_unit(m, (int)(1 + L + i)))
            continue;
        single_block(m, &m->sgl[i]);
        if ((st = K->status(m->kc)) != WEFT_OK || (st = m->comm_status) != WEFT_OK)
            return st;
    }
    if (!has_unit(m, (int)n_units - 1)) {
        /* pass the state on, then take the output from the stage that has the output layers */
        if (any && (st = stage_io(m, false)) != WEFT_OK)
            return st;
        const size_t n = (size_t)(B * in->s_img * c->out_channels);
        if ((st = m->comm->bcast(m->comm->pipe, a->out, n, m->stage.root)) != WEFT_OK)
            return st;
        return output(m, out, n);
    }
    /* norm_out: scale first, then shift */
    lin(m, &m->top[WEFT_FLUX_NORM_OUT], a->act, D, a->mod, 2 * D, B);
    for (int64_t b = 0; b < B; b++) {
        const float *md = a->mod + b * 2 * D;
        float *img = a->h + (b * S + St) * D, *xn = a->xn + b * Si * D;
        K->layernorm(m->kc, img, D, xn, D, Si, D, c->eps);
        K->modulate(m->kc, xn, D, md + D, md, xn, D, Si, D);
        lin(m, &m->top[WEFT_FLUX_PROJ_OUT], xn, D, a->out_local + b * Si * c->out_channels,
            c->out_channels, Si);
    }
    /* Context parallelism: every rank gathers every chunk of the output, in sequence order. */
    for (int64_t b = 0; b < B && m->cp_size > 1 && st == WEFT_OK; b++) {
        for (int r = 0; r < m->cp_size; r++) {
            int64_t b0, n;
            weft_cp_chunk(in->s_img, m->cp_size, r, &b0, &n);
            a->gather_counts[r] = (size_t)(n * c->out_channels);
        }
        if ((st = K->sync(m->kc)) == WEFT_OK && (st = m->comm_status) == WEFT_OK)
            st = m->comm->allgatherv(m->comm->cp, a->out_local + b * Si * c->out_channels,
                                     a->out + b * in->s_img * c->out_channels,
                                     a->gather_counts);
    }
    /* A pipeline: the output stage sends the output to every stage. */
    if (staged && st == WEFT_OK && (st = K->sync(m->kc)) == WEFT_OK)
        st = m->comm->bcast(m->comm->pipe, a->out, (size_t)(B * in->s_img * c->out_channels),
                            m->stage.root);
    if (st != WEFT_OK || (st = m->comm_status) != WEFT_OK)
        return st;
    return output(m, out, (size_t)(B * in->s_img * c->out_channels));
}
