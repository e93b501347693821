/* CLIPTextModel and T5EncoderModel forward passes (see text_encoder.h), in transformers' order
 * of operations: CLIP pre-norm layers (LN, q/k/v, causal attention scaled by 1/sqrt(head_dim),
 * out_proj, residual; LN, fc1, quick_gelu, fc2, residual), the final LN, the pooled row; T5
 * (RMS norm, q/k/v, attention with the relative position bias and no scaling, o, residual;
 * RMS norm, gelu_new(wi_0 x) * wi_1 x, wo, residual), the final RMS norm. */
#include "worker/text_encoder.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/tensor.h"
#include "model/checkpoint.h"
#include "model/plan.h"

/* ---------------------------------------------------------------------------------------- */
/* Weights                                                                                   */

struct lin {
    void *w; /* [out, in] local, as stored, or packed by the backend (linear_pack) */
    enum weft_dtype wdt;
    bool packed;
    float *b; /* [out] or NULL */
    int64_t out, in;
};

/* The parameters of one model, bound by name: device ones in one arena, host ones (the token
 * embedding, T5's relative position table) in host memory. */
struct weights {
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    size_t n;
    struct weft_text_param *params;
    void **ptr;               /* [n]: device or host */
    enum weft_dtype *dtype;   /* [n]: as held */
    bool *packed;             /* [n]: a matrix held in the backend's linear_pack layout */
    int64_t (*local)[2];      /* [n]: this rank's shape */
    void *arena;
    size_t arena_bytes, param_bytes;
    void **host;              /* [n]: host allocations (weft_big_alloc) */
    size_t *host_bytes;
};

static void weights_cleanup(struct weights *w)
{
    if (w->arena)
        w->K->buf_free(w->kc, w->arena, w->arena_bytes);
    for (size_t i = 0; w->host && i < w->n; i++)
        weft_big_free(w->host[i], w->host_bytes[i]);
    weft_free(w->params);
    weft_free((void *)w->ptr);
    weft_free(w->dtype);
    weft_free(w->packed);
    weft_free(w->local);
    weft_free((void *)w->host);
    weft_free(w->host_bytes);
    memset(w, 0, sizeof(*w));
}

static int64_t numel2(const int64_t *s, int ndim)
{
    return ndim == 2 ? s[0] * s[1] : s[0];
}

/* Checks the checkpoint against the inventory both ways: every parameter there with its
 * shape, nothing else but the ignorable tensors. */
static weft_status_t check_inventory(const struct weft_ckpt *ck, const struct weights *w,
                                     const char *cls, struct weft_error *err)
{
    for (size_t i = 0; i < w->n; i++) {
        const struct weft_text_param *p = &w->params[i];
        const struct weft_ckpt_tensor *t = weft_ckpt_find(ck, p->name);
        if (!t)
            return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "text",
                                            "%s: missing tensor '%s' (required by the config)",
                                            weft_ckpt_dir(ck), p->name);
        if (t->info->ndim != p->ndim || t->info->shape[0] != p->shape[0] ||
            (p->ndim == 2 && t->info->shape[1] != p->shape[1])) {
            char got[128], want[128];
            return weft_error_refuse_or_log(
                err, WEFT_ERR_FORMAT, "text", "%s: tensor '%s' has shape %s but the config "
                "implies %s", weft_ckpt_dir(ck), p->name,
                weft_shape_str(t->info->ndim, t->info->shape, got, sizeof(got)),
                weft_shape_str(p->ndim, p->shape, want, sizeof(want)));
        }
        if (!weft_dtype_is_float((enum weft_dtype)t->info->dtype))
            return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "text",
                                            "%s: tensor '%s' is %s; a float dtype expected",
                                            weft_ckpt_dir(ck), p->name, t->info->dtype_name);
    }
    for (size_t i = 0; i < weft_ckpt_count(ck); i++) {
        const char *name = weft_ckpt_at(ck, i)->info->name;
        size_t k = 0;
        while (k < w->n && strcmp(w->params[k].name, name) != 0)
            k++;
        if (k == w->n && !weft_text_param_ignorable(name))
            return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "text",
                                            "%s: unexpected tensor '%s': not a parameter of %s "
                                            "with this config", weft_ckpt_dir(ck), name, cls);
    }
    return WEFT_OK;
}

/* One host parameter: the embedding as stored (f32, bf16 or f16), anything else as f32. */
static weft_status_t read_host(struct weights *w, const struct weft_ckpt *ck, size_t i,
                               bool keep_dtype, struct weft_error *err)
{
    const struct weft_text_param *p = &w->params[i];
    const struct weft_ckpt_tensor *t = weft_ckpt_find(ck, p->name);
    enum weft_dtype d = keep_dtype ? (enum weft_dtype)t->info->dtype : WEFT_DTYPE_F32;
    if (d != WEFT_DTYPE_BF16 && d != WEFT_DTYPE_F16)
        d = WEFT_DTYPE_F32;
    const size_t bytes = (size_t)numel2(p->shape, p->ndim) * weft_dtype_size(d);
    if (!(w->host[i] = weft_big_alloc(bytes)))
        return weft_error_set(err, WEFT_ERR_NOMEM, "text", "%s: cannot allocate %zu bytes for "
                              "'%s'", weft_ckpt_dir(ck), bytes, p->name);
    w->host_bytes[i] = bytes;
    w->ptr[i] = w->host[i];
    w->dtype[i] = d;
    w->local[i][0] = p->shape[0];
    w->local[i][1] = p->shape[1];
    w->param_bytes += bytes;
    return weft_st_read(t->file, t->info, w->host[i], d, err);
}

/* Every parameter: those flagged in host[] to host memory, the others into one device arena,
 * each in its held dtype and, under a layout, as this rank's shard (read as byte ranges). */
static weft_status_t weights_load(struct weights *w, const struct weft_ckpt *ck,
                                  const bool *on_host, const struct weft_tp_layout *layout,
                                  int tp_rank, struct weft_error *err)
{
    const int T = layout ? layout->degree : 1;
    w->ptr = weft_calloc(w->n, sizeof(*w->ptr));
    w->dtype = weft_calloc(w->n, sizeof(*w->dtype));
    w->packed = weft_calloc(w->n, sizeof(*w->packed));
    w->local = weft_calloc(w->n, sizeof(*w->local));
    w->host = weft_calloc(w->n, sizeof(*w->host));
    w->host_bytes = weft_calloc(w->n, sizeof(*w->host_bytes));
    size_t *off = weft_calloc(w->n + 1, sizeof(*off));
    if (!w->ptr || !w->dtype || !w->packed || !w->local || !w->host || !w->host_bytes || !off) {
        weft_free(off);
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    }
    weft_status_t st = WEFT_OK;
    size_t pack_src_bytes = 0; /* a device buffer for a weight as stored, before packing */
    for (size_t i = 0; i < w->n && st == WEFT_OK; i++) {
        if (on_host[i]) {
            st = read_host(w, ck, i, w->params[i].ndim == 2 && i == 0, err);
            continue;
        }
        const struct weft_text_param *p = &w->params[i];
        w->local[i][0] = p->shape[0];
        w->local[i][1] = p->shape[1];
        const struct weft_tp_shard *sh = layout ? weft_tp_find(layout, p->name) : NULL;
        if (sh && sh->dim >= 0) {
            struct weft_range r[WEFT_MAX_BLOCKS];
            weft_tp_ranges(sh, T, tp_rank, r, &w->local[i][sh->dim]);
        }
        w->dtype[i] = p->ndim == 2 ? weft_ckpt_weight_dtype(ck, p->name) : WEFT_DTYPE_F32;
        const size_t stored =
            (size_t)numel2(w->local[i], p->ndim) * weft_dtype_size(w->dtype[i]);
        size_t bytes = stored;
        /* the device matrices are the linears' weights: packed once where the backend can */
        const size_t packed = p->ndim == 2 && w->K->linear_pack_bytes
                                  ? w->K->linear_pack_bytes(w->kc, w->dtype[i], w->local[i][0],
                                                            w->local[i][1])
                                  : 0;
        if (packed) {
            w->packed[i] = true;
            bytes = packed;
            if (!w->K->host_visible && bytes > pack_src_bytes)
                pack_src_bytes = bytes; /* at least the weight as stored: bounds the staging */
        }
        off[i] = w->arena_bytes;
        w->arena_bytes += (bytes + 63) / 64 * 64;
        /* as stored, as the plans count them (packing pads a matrix to whole panels: nothing
         * at these models' widths, which are multiples of 32) */
        w->param_bytes += stored;
    }
    if (st == WEFT_OK && w->arena_bytes &&
        (st = w->K->buf_alloc(w->kc, w->arena_bytes, &w->arena)) != WEFT_OK)
        weft_error_set(err, st, "text", "%s: cannot allocate %zu bytes of weights",
                       weft_ckpt_dir(ck), w->arena_bytes);
    void *pack_src = NULL; /* a packed weight's source on the device (not host visible) */
    if (st == WEFT_OK && pack_src_bytes &&
        (st = w->K->buf_alloc(w->kc, pack_src_bytes, &pack_src)) != WEFT_OK)
        weft_error_set(err, st, "text", "%s: cannot allocate %zu bytes to pack weights",
                       weft_ckpt_dir(ck), pack_src_bytes);
    void *stage = NULL;
    size_t stage_bytes = 0;
    for (size_t i = 0; i < w->n && st == WEFT_OK; i++) {
        if (on_host[i])
            continue;
        const struct weft_text_param *p = &w->params[i];
        const struct weft_ckpt_tensor *t = weft_ckpt_find(ck, p->name);
        const size_t bytes = (size_t)numel2(w->local[i], p->ndim) * weft_dtype_size(w->dtype[i]);
        w->ptr[i] = (char *)w->arena + off[i];
        void *dst = w->ptr[i];
        if (!w->K->host_visible || w->packed[i]) { /* read to the host first */
            if (bytes > stage_bytes) {
                weft_big_free(stage, stage_bytes);
                stage = weft_big_alloc(bytes);
                stage_bytes = stage ? bytes : 0;
            }
            if (!(dst = stage)) {
                st = weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
                break;
            }
        }
        const struct weft_tp_shard *sh = layout ? weft_tp_find(layout, p->name) : NULL;
        if (sh && sh->dim >= 0) {
            struct weft_range r[WEFT_MAX_BLOCKS];
            int64_t len;
            int nr = weft_tp_ranges(sh, T, tp_rank, r, &len);
            st = weft_st_read_ranges(t->file, t->info, sh->dim, (size_t)nr, r, dst, w->dtype[i],
                                     err);
        } else {
            st = weft_st_read(t->file, t->info, dst, w->dtype[i], err);
        }
        if (st == WEFT_OK && w->packed[i]) {
            /* host memory is the backend's where it is host visible */
            const void *src = dst;
            if (pack_src) {
                w->K->upload(w->kc, pack_src, dst, bytes);
                src = pack_src;
            }
            w->K->linear_pack(w->kc, src, w->dtype[i], w->ptr[i], w->local[i][0],
                              w->local[i][1]);
        } else if (st == WEFT_OK && dst != w->ptr[i]) {
            w->K->upload(w->kc, w->ptr[i], dst, bytes);
        }
    }
    if (pack_src) {
        if (st == WEFT_OK)
            st = w->K->sync(w->kc); /* the packing read pack_src */
        w->K->buf_free(w->kc, pack_src, pack_src_bytes);
    }
    weft_big_free(stage, stage_bytes);
    weft_free(off);
    return st;
}

static size_t find(const struct weights *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The index of a parameter by name (it exists: the inventory made it). */
static size_t find(const struct weights *w, const char *fmt, ...)
{
    char name[128];
    va_list ap;
    va_start(ap, fmt);
    /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): a false positive on glibc */
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->params[i].name, name) == 0)
            return i;
    return 0; /* not reached */
}

static struct lin lin_of(const struct weights *w, size_t wi, size_t bi)
{
    return (struct lin){w->ptr[wi], w->dtype[wi], w->packed[wi],
                        bi ? (float *)w->ptr[bi] : NULL, w->local[wi][0], w->local[wi][1]};
}

static void lin_run(const struct weft_kernels *K, struct weft_kctx *kc, const struct lin *l,
                    const float *x, int64_t ldx, float *y, int64_t ldy, int64_t rows,
                    int accumulate)
{
    if (l->packed)
        K->linear_packed(kc, x, ldx, l->w, l->b, y, ldy, rows, l->out, l->in, accumulate);
    else
        K->linear(kc, x, ldx, l->w, l->wdt, l->b, y, ldy, rows, l->out, l->in, accumulate);
}

/* Rows of a host embedding table (f32, bf16 or f16) as f32. */
static void gather(const void *table, enum weft_dtype d, int64_t dim, const int32_t *ids,
                   int64_t n, float *out)
{
    const size_t esz = weft_dtype_size(d);
    for (int64_t i = 0; i < n; i++)
        weft_dtype_convert(out + i * dim, WEFT_DTYPE_F32,
                           (const char *)table + (size_t)ids[i] * (size_t)dim * esz, d,
                           (size_t)dim);
}

static weft_status_t check_ids(const int32_t *ids, int64_t n, int64_t vocab, int64_t max_n,
                               const char *what, struct weft_error *err)
{
    if (n < 1 || n > max_n)
        return weft_error_refuse(err, WEFT_ERR_RANGE, "%s: %lld tokens; 1..%lld allowed", what,
                                 (long long)n, (long long)max_n);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            return weft_error_refuse(err, WEFT_ERR_RANGE, "%s: token %lld is id %d, outside the "
                                     "vocabulary of %lld (a tokenizer that does not match its "
                                     "encoder?)", what, (long long)i, ids[i], (long long)vocab);
    return WEFT_OK;
}

/* Device activations, grown to the longest sequence and kept. */
struct acts {
    void *base;
    size_t bytes;
    int64_t cap; /* rows */
};

static weft_status_t acts_reserve(const struct weft_kernels *K, struct weft_kctx *kc,
                                  struct acts *a, int64_t n, size_t per_row, size_t fixed,
                                  struct weft_error *err)
{
    if (n <= a->cap && a->base)
        return WEFT_OK;
    if (a->base)
        K->buf_free(kc, a->base, a->bytes);
    a->base = NULL;
    a->cap = 0;
    const size_t bytes = (size_t)n * per_row + fixed;
    weft_status_t st = K->buf_alloc(kc, bytes, &a->base);
    if (st != WEFT_OK)
        return weft_error_set(err, st, "text", "cannot allocate %zu bytes of activations for %lld "
                              "tokens", bytes, (long long)n);
    a->bytes = bytes;
    a->cap = n;
    return WEFT_OK;
}

static void acts_free(const struct weft_kernels *K, struct weft_kctx *kc, struct acts *a)
{
    if (a->base)
        K->buf_free(kc, a->base, a->bytes);
    memset(a, 0, sizeof(*a));
}

/* ---------------------------------------------------------------------------------------- */
/* CLIPTextModel                                                                             */

struct clip_layer {
    float *ln1_w, *ln1_b, *ln2_w, *ln2_b;
    struct lin q, k, v, o, fc1, fc2;
};

struct weft_clip_text {
    struct weft_clip_text_config cfg;
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    enum weft_dtype dtype;
    struct weights w;
    size_t tok, pos; /* host tables */
    struct clip_layer *layers;
    float *lnf_w, *lnf_b;
    struct acts a;
    float *host; /* [max_position_embeddings, D] staging of the embeddings */
};

static void clip_bind(struct weft_clip_text *m, const char *pfx)
{
    const struct weights *w = &m->w;
    m->tok = find(w, "%sembeddings.token_embedding.weight", pfx);
    m->pos = find(w, "%sembeddings.position_embedding.weight", pfx);
    for (int l = 0; l < m->cfg.num_hidden_layers; l++) {
        struct clip_layer *L = &m->layers[l];
        const char *e = "encoder.layers";
        L->ln1_w = w->ptr[find(w, "%s%s.%d.layer_norm1.weight", pfx, e, l)];
        L->ln1_b = w->ptr[find(w, "%s%s.%d.layer_norm1.bias", pfx, e, l)];
        L->ln2_w = w->ptr[find(w, "%s%s.%d.layer_norm2.weight", pfx, e, l)];
        L->ln2_b = w->ptr[find(w, "%s%s.%d.layer_norm2.bias", pfx, e, l)];
        struct lin *lins[] = {&L->q, &L->k, &L->v, &L->o};
        static const char *const names[] = {"q_proj", "k_proj", "v_proj", "out_proj"};
        for (int k = 0; k < 4; k++)
            *lins[k] = lin_of(w, find(w, "%s%s.%d.self_attn.%s.weight", pfx, e, l, names[k]),
                              find(w, "%s%s.%d.self_attn.%s.bias", pfx, e, l, names[k]));
        L->fc1 = lin_of(w, find(w, "%s%s.%d.mlp.fc1.weight", pfx, e, l),
                        find(w, "%s%s.%d.mlp.fc1.bias", pfx, e, l));
        L->fc2 = lin_of(w, find(w, "%s%s.%d.mlp.fc2.weight", pfx, e, l),
                        find(w, "%s%s.%d.mlp.fc2.bias", pfx, e, l));
    }
    m->lnf_w = w->ptr[find(w, "%sfinal_layer_norm.weight", pfx)];
    m->lnf_b = w->ptr[find(w, "%sfinal_layer_norm.bias", pfx)];
}

/* The checkpoint's config and inventory, the host flags (the two embedding tables). */
static weft_status_t open_inventory(const char *dir, const char *cls, struct weft_ckpt **ck_p,
                                    struct weft_error *err)
{
    weft_status_t st = weft_ckpt_open(dir, ck_p, err);
    if (st == WEFT_OK && strcmp(weft_ckpt_class(*ck_p), cls) != 0) {
        st = weft_error_refuse_or_log(err, WEFT_ERR_UNSUPPORTED, "text",
                                      "%s/config.json: the class is '%s'; %s expected", dir,
                                      weft_ckpt_class(*ck_p), cls);
        weft_ckpt_close(*ck_p);
    }
    return st;
}

weft_status_t weft_clip_text_load(const char *dir, const struct weft_text_opts *opts,
                                  struct weft_clip_text **model_p, struct weft_error *err)
{
    struct weft_ckpt *ck;
    weft_status_t st = open_inventory(dir, WEFT_CLIP_TEXT_CLASS, &ck, err);
    if (st != WEFT_OK)
        return st;
    struct weft_clip_text *m = weft_calloc(1, sizeof(*m));
    bool *on_host = NULL;
    if (!m) {
        st = weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
        goto out;
    }
    m->K = m->w.K = opts->kernels;
    m->kc = m->w.kc = opts->kctx;
    m->dtype = opts->dtype;
    char origin[1100];
    snprintf(origin, sizeof(origin), "%s/config.json", dir);
    if ((st = weft_clip_text_config_parse(weft_ckpt_config(ck), origin, &m->cfg, err)) != WEFT_OK)
        goto out;
    const char *pfx = weft_clip_text_prefix(ck);
    m->w.n = weft_clip_text_params(&m->cfg, pfx, NULL);
    m->w.params = weft_calloc(m->w.n, sizeof(*m->w.params));
    m->layers = weft_calloc((size_t)m->cfg.num_hidden_layers, sizeof(*m->layers));
    on_host = weft_calloc(m->w.n, sizeof(*on_host));
    m->host = weft_malloc((size_t)(m->cfg.max_position_embeddings * m->cfg.hidden_size) *
                          sizeof(float));
    if (!m->w.params || !m->layers || !on_host || !m->host) {
        st = weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
        goto out;
    }
    weft_clip_text_params(&m->cfg, pfx, m->w.params);
    on_host[0] = on_host[1] = true; /* token and position embeddings, first in the inventory */
    if ((st = check_inventory(ck, &m->w, WEFT_CLIP_TEXT_CLASS, err)) == WEFT_OK &&
        (st = weights_load(&m->w, ck, on_host, NULL, 0, err)) == WEFT_OK)
        clip_bind(m, pfx);
out:
    weft_free(on_host);
    weft_ckpt_close(ck);
    if (st != WEFT_OK) {
        weft_clip_text_destroy(m);
        return st;
    }
    *model_p = m;
    return WEFT_OK;
}

void weft_clip_text_release(struct weft_clip_text *m)
{
    if (m)
        acts_free(m->K, m->kc, &m->a);
}

void weft_clip_text_destroy(struct weft_clip_text *m)
{
    if (!m)
        return;
    weft_clip_text_release(m);
    weights_cleanup(&m->w);
    weft_free(m->layers);
    weft_free(m->host);
    weft_free(m);
}

const struct weft_clip_text_config *weft_clip_text_get_config(const struct weft_clip_text *m)
{
    return &m->cfg;
}

size_t weft_clip_text_weight_bytes(const struct weft_clip_text *m)
{
    return m->w.param_bytes;
}

/* transformers' pooled row: the highest id's (eos_token_id 2, CLIP-L's legacy config), else the
 * first eos_token_id's (0 when there is none), first occurrence on ties as torch.argmax. */
static int64_t clip_pooled_row(const struct weft_clip_text_config *c, const int32_t *ids,
                               int64_t n)
{
    int64_t at = 0;
    for (int64_t i = 1; c->eos_token_id == 2 && i < n; i++)
        if (ids[i] > ids[at])
            at = i;
    if (c->eos_token_id != 2)
        for (int64_t i = n - 1; i >= 0; i--)
            if (ids[i] == c->eos_token_id)
                at = i;
    return at;
}

weft_status_t weft_clip_text_forward(struct weft_clip_text *m, const int32_t *ids, int64_t n,
                                     float *hidden, float *pooled, struct weft_error *err)
{
    const struct weft_clip_text_config *c = &m->cfg;
    weft_status_t st = check_ids(ids, n, c->vocab_size, c->max_position_embeddings, "CLIP", err);
    const int64_t D = c->hidden_size, F = c->intermediate_size, H = c->num_attention_heads;
    if (st == WEFT_OK)
        st = acts_reserve(m->K, m->kc, &m->a, n, (size_t)(6 * D + F) * sizeof(float), 0, err);
    if (st != WEFT_OK)
        return st;
    const struct weft_kernels *K = m->K;
    struct weft_kctx *kc = m->kc;
    float *h = m->a.base, *x = h + n * D, *q = x + n * D, *k = q + n * D, *v = k + n * D;
    float *att = v + n * D, *f = att + n * D; /* f [n, F] */
    /* inputs_embeds + position_embeds, on the host */
    gather(m->w.ptr[m->tok], m->w.dtype[m->tok], D, ids, n, m->host);
    const float *posw = m->w.ptr[m->pos];
    for (int64_t i = 0; i < n * D; i++)
        m->host[i] = weft_dtype_round(m->dtype, m->host[i] + posw[i]);
    K->upload(kc, h, m->host, (size_t)(n * D) * sizeof(float));
    const float eps = (float)c->layer_norm_eps, scale = 1.0f / sqrtf((float)c->head_dim);
    for (int64_t l = 0; l < c->num_hidden_layers; l++) {
        const struct clip_layer *L = &m->layers[l];
        K->layernorm(kc, h, D, x, D, n, D, eps);
        K->scale_shift(kc, x, D, L->ln1_w, L->ln1_b, x, D, n, D);
        lin_run(K, kc, &L->q, x, D, q, D, n, 0);
        lin_run(K, kc, &L->k, x, D, k, D, n, 0);
        lin_run(K, kc, &L->v, x, D, v, D, n, 0);
        K->attention_masked(kc, q, D, k, D, v, D, att, D, n, n, H, c->head_dim, scale, NULL, 1);
        lin_run(K, kc, &L->o, att, D, h, D, n, 1);
        K->layernorm(kc, h, D, x, D, n, D, eps);
        K->scale_shift(kc, x, D, L->ln2_w, L->ln2_b, x, D, n, D);
        lin_run(K, kc, &L->fc1, x, D, f, F, n, 0);
        K->quick_gelu(kc, f, F, f, F, n, F);
        lin_run(K, kc, &L->fc2, f, F, h, D, n, 1);
    }
    K->layernorm(kc, h, D, x, D, n, D, eps);
    K->scale_shift(kc, x, D, m->lnf_w, m->lnf_b, x, D, n, D);
    const int64_t row = clip_pooled_row(c, ids, n);
    K->download(kc, pooled, x + row * D, (size_t)D * sizeof(float));
    if (hidden)
        K->download(kc, hidden, x, (size_t)(n * D) * sizeof(float));
    if ((st = K->sync(kc)) != WEFT_OK)
        return weft_error_set(err, st, "text", "CLIP's forward pass failed on the %s backend",
                              K->name);
    weft_dtype_round_n(m->dtype, pooled, (size_t)D);
    if (hidden)
        weft_dtype_round_n(m->dtype, hidden, (size_t)(n * D));
    return WEFT_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* T5EncoderModel                                                                            */

struct t5_layer {
    float *ln0, *ln1;
    struct lin q, k, v, o, wi0, wi1, wo;
};

struct weft_t5 {
    struct weft_t5_config cfg;
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    enum weft_dtype dtype;
    int tp_rank, tp_size;
    int64_t heads_l, inner_l, ff_l; /* this rank's */
    const struct weft_par_comm *comm;
    struct weights w;
    size_t emb, rel; /* host tables */
    struct t5_layer *layers;
    float *lnf;
    struct acts a;
    float *host;      /* [n, D] staging (embeddings in, the output out) */
    size_t host_n;
    float *bias_host; /* [heads_l, n, n] */
    int64_t bias_n;
    weft_status_t comm_status;
};

static void t5_bind(struct weft_t5 *m)
{
    const struct weights *w = &m->w;
    m->emb = 0;
    m->rel = find(w, "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight");
    for (int l = 0; l < m->cfg.num_layers; l++) {
        struct t5_layer *L = &m->layers[l];
        const char *b = "encoder.block";
        L->ln0 = w->ptr[find(w, "%s.%d.layer.0.layer_norm.weight", b, l)];
        L->ln1 = w->ptr[find(w, "%s.%d.layer.1.layer_norm.weight", b, l)];
        L->q = lin_of(w, find(w, "%s.%d.layer.0.SelfAttention.q.weight", b, l), 0);
        L->k = lin_of(w, find(w, "%s.%d.layer.0.SelfAttention.k.weight", b, l), 0);
        L->v = lin_of(w, find(w, "%s.%d.layer.0.SelfAttention.v.weight", b, l), 0);
        L->o = lin_of(w, find(w, "%s.%d.layer.0.SelfAttention.o.weight", b, l), 0);
        L->wi0 = lin_of(w, find(w, "%s.%d.layer.1.DenseReluDense.wi_0.weight", b, l), 0);
        L->wi1 = lin_of(w, find(w, "%s.%d.layer.1.DenseReluDense.wi_1.weight", b, l), 0);
        L->wo = lin_of(w, find(w, "%s.%d.layer.1.DenseReluDense.wo.weight", b, l), 0);
    }
    m->lnf = w->ptr[find(w, "encoder.final_layer_norm.weight")];
}

static weft_status_t t5_check_opts(struct weft_t5 *m, const struct weft_text_opts *o,
                                   struct weft_error *err)
{
    m->tp_size = o->tp_size > 1 ? o->tp_size : 1;
    m->tp_rank = m->tp_size > 1 ? o->tp_rank : 0;
    m->comm = o->comm;
    if (m->tp_size > 1 && (!o->tp_layout || o->tp_layout->degree != m->tp_size || !m->comm ||
                           m->tp_rank < 0 || m->tp_rank >= m->tp_size))
        return weft_error_set(err, WEFT_ERR_INVALID, "text",
                              "T5 tensor parallelism needs a layout resolved for degree %d, a "
                              "rank below it and collectives", m->tp_size);
    if (m->cfg.num_heads % m->tp_size || m->cfg.d_ff % m->tp_size)
        return weft_error_refuse(err, WEFT_ERR_CONFIG, "T5: tp_degree %d does not divide "
                                 "num_heads %lld and d_ff %lld", m->tp_size,
                                 (long long)m->cfg.num_heads, (long long)m->cfg.d_ff);
    m->heads_l = m->cfg.num_heads / m->tp_size;
    m->inner_l = m->heads_l * m->cfg.d_kv;
    m->ff_l = m->cfg.d_ff / m->tp_size;
    return WEFT_OK;
}

weft_status_t weft_t5_load(const char *dir, const struct weft_text_opts *opts,
                           struct weft_t5 **model_p, struct weft_error *err)
{
    struct weft_ckpt *ck;
    weft_status_t st = open_inventory(dir, WEFT_T5_ENCODER_CLASS, &ck, err);
    if (st != WEFT_OK)
        return st;
    struct weft_t5 *m = weft_calloc(1, sizeof(*m));
    bool *on_host = NULL;
    if (!m) {
        st = weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
        goto out;
    }
    m->K = m->w.K = opts->kernels;
    m->kc = m->w.kc = opts->kctx;
    m->dtype = opts->dtype;
    char origin[1100];
    snprintf(origin, sizeof(origin), "%s/config.json", dir);
    if ((st = weft_t5_config_parse(weft_ckpt_config(ck), origin, &m->cfg, err)) != WEFT_OK ||
        (st = t5_check_opts(m, opts, err)) != WEFT_OK)
        goto out;
    const char *emb = weft_t5_embedding_key(ck);
    m->w.n = weft_t5_params(&m->cfg, emb, NULL);
    m->w.params = weft_calloc(m->w.n, sizeof(*m->w.params));
    m->layers = weft_calloc((size_t)m->cfg.num_layers, sizeof(*m->layers));
    on_host = weft_calloc(m->w.n, sizeof(*on_host));
    if (!m->w.params || !m->layers || !on_host) {
        st = weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
        goto out;
    }
    weft_t5_params(&m->cfg, emb, m->w.params);
    on_host[0] = true; /* the embedding */
    on_host[find(&m->w, "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight")] =
        true;
    if ((st = check_inventory(ck, &m->w, WEFT_T5_ENCODER_CLASS, err)) == WEFT_OK &&
        (st = weights_load(&m->w, ck, on_host, m->tp_size > 1 ? opts->tp_layout : NULL,
                           m->tp_rank, err)) == WEFT_OK)
        t5_bind(m);
out:
    weft_free(on_host);
    weft_ckpt_close(ck);
    if (st != WEFT_OK) {
        weft_t5_destroy(m);
        return st;
    }
    *model_p = m;
    return WEFT_OK;
}

void weft_t5_release(struct weft_t5 *m)
{
    if (!m)
        return;
    acts_free(m->K, m->kc, &m->a);
    weft_big_free(m->host, m->host_n * sizeof(float));
    weft_big_free(m->bias_host, (size_t)(m->heads_l * m->bias_n * m->bias_n) * sizeof(float));
    m->host = m->bias_host = NULL;
    m->host_n = 0;
    m->bias_n = 0;
}

void weft_t5_destroy(struct weft_t5 *m)
{
    if (!m)
        return;
    weft_t5_release(m);
    weights_cleanup(&m->w);
    weft_free(m->layers);
    weft_free(m);
}

const struct weft_t5_config *weft_t5_get_config(const struct weft_t5 *m)
{
    return &m->cfg;
}

size_t weft_t5_weight_bytes(const struct weft_t5 *m)
{
    return m->w.param_bytes;
}

/* This rank's heads of the position bias, bias[h][i][j] = table[bucket(j - i)][h0 + h], for n
 * tokens (made once per length and kept). */
static weft_status_t t5_bias(struct weft_t5 *m, int64_t n, struct weft_error *err)
{
    if (m->bias_n == n)
        return WEFT_OK;
    const int64_t H = m->heads_l, h0 = (int64_t)m->tp_rank * H, NB = m->cfg.num_buckets;
    weft_big_free(m->bias_host, (size_t)(H * m->bias_n * m->bias_n) * sizeof(float));
    m->bias_n = 0;
    if (!(m->bias_host = weft_big_alloc((size_t)(H * n * n) * sizeof(float))))
        return weft_error_set(err, WEFT_ERR_NOMEM, "text", "out of memory for T5's position "
                              "bias of %lld tokens", (long long)n);
    m->bias_n = n;
    const float *table = m->w.ptr[m->rel]; /* [buckets, heads] f32 */
    for (int64_t d = -(n - 1); d <= n - 1; d++) {
        const int64_t b = weft_t5_bucket(d, NB, m->cfg.max_distance);
        for (int64_t h = 0; h < H; h++) {
            const float v = weft_dtype_round(m->dtype, table[b * m->cfg.num_heads + h0 + h]);
            float *p = m->bias_host + h * n * n;
            for (int64_t i = d < 0 ? -d : 0; i < n && i + d < n; i++)
                p[i * n + i + d] = v;
        }
    }
    return WEFT_OK;
}

/* A rowwise projection's partial sum over the tensor-parallel group, then the residual. */
static void t5_rowwise(struct weft_t5 *m, const struct lin *l, const float *x, int64_t ldx,
                       float *h, float *tmp, int64_t n)
{
    const struct weft_kernels *K = m->K;
    const int64_t D = m->cfg.d_model;
    if (m->tp_size == 1) {
        lin_run(K, m->kc, l, x, ldx, h, D, n, 1);
        return;
    }
    lin_run(K, m->kc, l, x, ldx, tmp, D, n, 0);
    if (m->comm_status == WEFT_OK) {
        weft_status_t st = K->sync(m->kc);
        if (st == WEFT_OK)
            st = m->comm->allreduce(m->comm->tp, tmp, (size_t)(n * D));
        m->comm_status = st;
    }
    K->gated_add(m->kc, h, D, NULL, tmp, D, n, D);
}

weft_status_t weft_t5_forward(struct weft_t5 *m, const int32_t *ids, int64_t n, float *out,
                              struct weft_error *err)
{
    const struct weft_t5_config *c = &m->cfg;
    const int64_t D = c->d_model, I = m->inner_l, F = m->ff_l, H = m->heads_l;
    weft_status_t st = check_ids(ids, n, c->vocab_size, 4096, "T5", err);
    if (st == WEFT_OK)
        st = acts_reserve(m->K, m->kc, &m->a, n,
                          (size_t)(3 * D + 4 * I + 2 * F + H * n) * sizeof(float), 0, err);
    if (st == WEFT_OK && (size_t)(n * D) > m->host_n) {
        weft_big_free(m->host, m->host_n * sizeof(float));
        m->host_n = 0;
        if (!(m->host = weft_big_alloc((size_t)(n * D) * sizeof(float))))
            st = weft_error_set(err, WEFT_ERR_NOMEM, "text", "out of memory for %lld tokens",
                                (long long)n);
        else
            m->host_n = (size_t)(n * D);
    }
    if (st == WEFT_OK)
        st = t5_bias(m, n, err);
    if (st != WEFT_OK)
        return st;
    const struct weft_kernels *K = m->K;
    struct weft_kctx *kc = m->kc;
    /* the bias lives at the end of the activations: its size is n^2, not per row */
    float *h = m->a.base, *x = h + n * D, *tmp = x + n * D, *q = tmp + n * D, *k = q + n * I;
    float *v = k + n * I, *att = v + n * I, *g = att + n * I, *u = g + n * F, *bias = u + n * F;
    gather(m->w.ptr[m->emb], m->w.dtype[m->emb], D, ids, n, m->host);
    weft_dtype_round_n(m->dtype, m->host, (size_t)(n * D));
    K->upload(kc, h, m->host, (size_t)(n * D) * sizeof(float));
    K->upload(kc, bias, m->bias_host, (size_t)(H * n * n) * sizeof(float));
    const float eps = (float)c->layer_norm_epsilon;
    m->comm_status = WEFT_OK;
    for (int64_t l = 0; l < c->num_layers; l++) {
        const struct t5_layer *L = &m->layers[l];
        K->copy_rows(kc, x, D, h, D, n, D);
        K->rmsnorm(kc, x, D, L->ln0, n, 1, D, eps);
        lin_run(K, kc, &L->q, x, D, q, I, n, 0);
        lin_run(K, kc, &L->k, x, D, k, I, n, 0);
        lin_run(K, kc, &L->v, x, D, v, I, n, 0);
        K->attention_masked(kc, q, I, k, I, v, I, att, I, n, n, H, c->d_kv, 1.0f, bias, 0);
        t5_rowwise(m, &L->o, att, I, h, tmp, n);
        K->copy_rows(kc, x, D, h, D, n, D);
        K->rmsnorm(kc, x, D, L->ln1, n, 1, D, eps);
        lin_run(K, kc, &L->wi0, x, D, g, F, n, 0);
        K->gelu_tanh(kc, g, F, g, F, n, F);
        lin_run(K, kc, &L->wi1, x, D, u, F, n, 0);
        K->mul(kc, g, F, u, F, n, F);
        t5_rowwise(m, &L->wo, g, F, h, tmp, n);
    }
    K->rmsnorm(kc, h, D, m->lnf, n, 1, D, eps);
    K->download(kc, out, h, (size_t)(n * D) * sizeof(float));
    if ((st = K->sync(kc)) != WEFT_OK)
        return weft_error_set(err, st, "text", "T5's forward pass failed on the %s backend",
                              K->name);
    if (m->comm_status != WEFT_OK)
        return weft_error_refuse(err, m->comm_status, "T5's tensor-parallel all-reduce: %s",
                                 weft_status_str(m->comm_status));
    weft_dtype_round_n(m->dtype, out, (size_t)(n * D));
    return WEFT_OK;
}
