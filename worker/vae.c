/* AutoencoderKL decoder, in Diffusers' order of operations (vae.py Decoder, UNetMidBlock2D,
 * UpDecoderBlock2D, ResnetBlock2D, Upsample2D, AttnProcessor2_0), NHWC. */
#include "worker/vae.h"
#include "worker/vae_qwen.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/tensor.h"
#include "model/checkpoint.h"

#define VAE_EPS 1e-6f   /* resnet_eps and the attention group norm's eps in the Decoder */
#define ATTN_D_MAX 512  /* the mid-block attention is one head of all channels */

struct conv {
    void *w; /* packed by the backend from [cout, cin, k, k], in wdt */
    enum weft_dtype wdt;
    float *b; /* [cout] */
    int64_t cout, cin, k;
};

struct gnorm {
    float *w, *b; /* [c] */
    int64_t c;
};

struct lin {
    void *w; /* [out, in], in wdt */
    enum weft_dtype wdt;
    float *b; /* [out] */
    int64_t out, in;
};

struct resnet {
    struct gnorm norm1, norm2;
    struct conv conv1, conv2, shortcut;
    bool has_shortcut;
};

struct attn {
    struct gnorm norm;
    struct lin q, k, v, out;
};

struct up_block {
    struct resnet *res; /* layers_per_block + 1 */
    bool has_up;
    struct conv up;
};

/* What one reservation holds; a request fits when every field is within. */
struct plan {
    int64_t lat_floats;  /* input latents of one decode (a tile when tiled) */
    int64_t buf_floats;  /* each of the three activation buffers */
    size_t ws_bytes;     /* conv workspace */
    int64_t host_floats; /* tiled: latent tile staging + two rows of decoded tiles */
};

struct weft_vae {
    struct weft_vae_config cfg;
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    void *weights;
    size_t arena_bytes;  /* the weights' allocation: each tensor 64-byte aligned */
    size_t weight_bytes; /* the parameters' own bytes, in their held dtypes */
    bool has_post_quant, has_attn;
    struct conv post_quant, conv_in, conv_out;
    struct resnet mid0, mid1;
    struct attn attn;
    struct up_block up[WEFT_VAE_MAX_BLOCKS];
    struct resnet *res_store;
    struct gnorm norm_out;
    /* AutoencoderKLFlux2: bn's running mean and sqrt(running_var + eps), host [4 L], for
     * Flux2Pipeline's prologue */
    float *bn_mean, *bn_std;
    struct weft_vae_qwen *qwen; /* AutoencoderKLQwenImage: its own decoder (worker/vae_qwen.h) */
    /* activations */
    struct plan have;
    void *act;
    size_t act_bytes;
    float *lat, *buf[3];
    void *ws;
    float *host;
};

void weft_vae_tiling_latent(const struct weft_vae_config *c, int64_t tile_latent,
                            struct weft_vae_tiling *t)
{
    *t = (struct weft_vae_tiling){true, tile_latent, tile_latent * c->scale, 0.25};
}

void weft_vae_tiling_default(const struct weft_vae_config *c, struct weft_vae_tiling *t)
{
    weft_vae_tiling_latent(c, c->sample_size / c->scale, t);
    t->tile_sample = c->sample_size;
}

/* ---------------------------------------------------------------------------------------- */
/* Loading                                                                                   */

struct binding {
    const struct weft_vae_param *p;
    void *dst;
    enum weft_dtype dt; /* held in: a weight matrix as stored, vectors f32 */
    bool conv;          /* repacked by the backend */
};

struct binder {
    const struct weft_vae_param *inv; /* the inventory */
    size_t n_inv;
    const struct weft_ckpt *ck;
    struct binding *b;
    size_t n, cap;
    char *next;         /* arena cursor (second pass) */
    size_t bytes;       /* arena bytes */
    size_t param_bytes; /* the same without alignment */
    bool bn;            /* AutoencoderKLFlux2: its batch norm's statistics (read apart) */
    struct weft_error *err;
};

static const struct weft_vae_param *inv_find(const struct weft_vae_param *inv, size_t n,
                                             const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(inv[i].name, name) == 0)
            return &inv[i];
    return NULL;
}

static int64_t param_numel(const struct weft_vae_param *p)
{
    int64_t n = 1;
    for (int d = 0; d < p->ndim; d++)
        n *= p->shape[d];
    return n;
}

/* A parameter: matrix (a conv's or a linear's weight) held as stored, otherwise f32. */
static weft_status_t bind(struct binder *bd, const char *prefix, const char *name,
                          const char *suffix, bool conv, bool matrix, void **dst,
                          enum weft_dtype *dt)
{
    char full[128];
    snprintf(full, sizeof(full), "%s%s%s", prefix, name, suffix);
    const struct weft_vae_param *p = inv_find(bd->inv, bd->n_inv, full);
    if (!p || p->part != WEFT_VAE_DECODER)
        return weft_error_set(bd->err, WEFT_ERR_INTERNAL, "vae",
                              "internal: decoder parameter '%s' is not in the inventory", full);
    if (bd->n == bd->cap) {
        size_t cap = bd->cap ? bd->cap * 2 : 256;
        struct binding *nb = weft_realloc(bd->b, cap * sizeof(*nb));
        if (!nb)
            return WEFT_ERR_NOMEM;
        bd->b = nb;
        bd->cap = cap;
    }
    struct binding *b = &bd->b[bd->n++];
    const enum weft_dtype held = matrix ? weft_ckpt_weight_dtype(bd->ck, full) : WEFT_DTYPE_F32;
    *b = (struct binding){p, NULL, held, conv};
    if (dt)
        *dt = held;
    const size_t bytes = ((size_t)param_numel(p) * weft_dtype_size(held) + 63) / 64 * 64;
    bd->bytes += bytes; /* 64-byte aligned tensors */
    bd->param_bytes += (size_t)param_numel(p) * weft_dtype_size(held);
    if (bd->next) {
        b->dst = bd->next;
        *dst = bd->next;
        bd->next += bytes;
    }
    return WEFT_OK;
}

/* A vector parameter (f32). */
static weft_status_t bind_vec(struct binder *bd, const char *prefix, const char *name,
                              const char *suffix, float **dst)
{
    void *p = NULL;
    weft_status_t st = bind(bd, prefix, name, suffix, false, false, &p, NULL);
    if (p)
        *dst = p;
    return st;
}

static weft_status_t bind_conv(struct binder *bd, const char *prefix, const char *name,
                               int64_t cout, int64_t cin, int64_t k, struct conv *c)
{
    *c = (struct conv){c->w, c->wdt, c->b, cout, cin, k};
    weft_status_t st = bind(bd, prefix, name, ".weight", true, true, &c->w, &c->wdt);
    return st != WEFT_OK ? st : bind_vec(bd, prefix, name, ".bias", &c->b);
}

static weft_status_t bind_norm(struct binder *bd, const char *prefix, const char *name,
                               int64_t ch, struct gnorm *g)
{
    g->c = ch;
    weft_status_t st = bind_vec(bd, prefix, name, ".weight", &g->w);
    return st != WEFT_OK ? st : bind_vec(bd, prefix, name, ".bias", &g->b);
}

static weft_status_t bind_lin(struct binder *bd, const char *prefix, const char *name,
                              int64_t ch, struct lin *l)
{
    l->out = l->in = ch;
    weft_status_t st = bind(bd, prefix, name, ".weight", false, true, &l->w, &l->wdt);
    return st != WEFT_OK ? st : bind_vec(bd, prefix, name, ".bias", &l->b);
}

static weft_status_t bind_resnet(struct binder *bd, const char *prefix, int64_t cin,
                                 int64_t cout, struct resnet *r)
{
    weft_status_t st;
    r->has_shortcut = cin != cout;
    if ((st = bind_norm(bd, prefix, "norm1", cin, &r->norm1)) ||
        (st = bind_conv(bd, prefix, "conv1", cout, cin, 3, &r->conv1)) ||
        (st = bind_norm(bd, prefix, "norm2", cout, &r->norm2)) ||
        (st = bind_conv(bd, prefix, "conv2", cout, cout, 3, &r->conv2)))
        return st;
    return r->has_shortcut ? bind_conv(bd, prefix, "conv_shortcut", cout, cin, 1, &r->shortcut)
                           : WEFT_OK;
}

static weft_status_t bind_mid(struct weft_vae *v, struct binder *bd)
{
    const int64_t ch = v->cfg.block_out_channels[v->cfg.n_blocks - 1];
    const char *ap = "decoder.mid_block.attentions.0.";
    weft_status_t st = bind_resnet(bd, "decoder.mid_block.resnets.0.", ch, ch, &v->mid0);
    if (st == WEFT_OK && v->has_attn &&
        ((st = bind_norm(bd, ap, "group_norm", ch, &v->attn.norm)) ||
         (st = bind_lin(bd, ap, "to_q", ch, &v->attn.q)) ||
         (st = bind_lin(bd, ap, "to_k", ch, &v->attn.k)) ||
         (st = bind_lin(bd, ap, "to_v", ch, &v->attn.v)) ||
         (st = bind_lin(bd, ap, "to_out.0", ch, &v->attn.out))))
        return st;
    return st != WEFT_OK ? st
                         : bind_resnet(bd, "decoder.mid_block.resnets.1.", ch, ch, &v->mid1);
}

/* Walks the decoder; the first pass (bd->next NULL) counts, the second assigns. */
static weft_status_t bind_all(struct weft_vae *v, struct binder *bd)
{
    const struct weft_vae_config *c = &v->cfg;
    const int64_t L = c->latent_channels, deep = c->block_out_channels[c->n_blocks - 1];
    weft_status_t st = WEFT_OK;
    if (v->has_post_quant)
        st = bind_conv(bd, "", "post_quant_conv", L, L, 1, &v->post_quant);
    if (st == WEFT_OK)
        st = bind_conv(bd, "decoder.", "conv_in", deep, L, 3, &v->conv_in);
    if (st == WEFT_OK)
        st = bind_mid(v, bd);
    char prefix[96];
    struct resnet *next_res = v->res_store;
    for (int i = 0; i < c->n_blocks && st == WEFT_OK; i++) {
        const int64_t in = weft_vae_up_in_channels(c, i), out = weft_vae_up_out_channels(c, i);
        struct up_block *u = &v->up[i];
        u->res = next_res;
        next_res += c->layers_per_block + 1;
        for (int64_t j = 0; j < c->layers_per_block + 1 && st == WEFT_OK; j++) {
            snprintf(prefix, sizeof(prefix), "decoder.up_blocks.%d.resnets.%lld.", i,
                     (long long)j);
            st = bind_resnet(bd, prefix, j == 0 ? in : out, out, &u->res[j]);
        }
        u->has_up = i < c->n_blocks - 1;
        if (st == WEFT_OK && u->has_up) {
            snprintf(prefix, sizeof(prefix), "decoder.up_blocks.%d.upsamplers.0.", i);
            st = bind_conv(bd, prefix, "conv", out, out, 3, &u->up);
        }
    }
    if (st == WEFT_OK)
        st = bind_norm(bd, "decoder.", "conv_norm_out", c->block_out_channels[0], &v->norm_out);
    if (st == WEFT_OK)
        st = bind_conv(bd, "decoder.", "conv_out", c->out_channels, c->block_out_channels[0], 3,
                       &v->conv_out);
    return st;
}

static bool same_shape(const struct weft_st_tensor *t, const struct weft_vae_param *p)
{
    if (t->ndim != p->ndim)
        return false;
    for (int d = 0; d < p->ndim; d++)
        if (t->shape[d] != p->shape[d])
            return false;
    return true;
}

/* Every tensor of the checkpoint is a parameter of this config with its shape, and every
 * decoder parameter is there: the whole file is checked, only the decoder will be read. */
static weft_status_t check_checkpoint(struct weft_ckpt *ck, const struct binder *bd,
                                      struct weft_error *err)
{
    for (size_t i = 0; i < weft_ckpt_count(ck); i++) {
        const struct weft_st_tensor *t = weft_ckpt_at(ck, i)->info;
        const struct weft_vae_param *p = inv_find(bd->inv, bd->n_inv, t->name);
        if (!p && bd->bn && strcmp(t->name, "bn.num_batches_tracked") == 0 && t->ndim == 0)
            continue; /* BatchNorm's bookkeeping, not a parameter */
        if (!p)
            return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "vae",
                                            "%s: unexpected tensor '%s': not a parameter of %s "
                                            "with this config",
                                            weft_ckpt_dir(ck), t->name,
                                            bd->bn ? WEFT_VAE2_CLASS : WEFT_VAE_CLASS);
        if (!same_shape(t, p)) {
            char got[128], want[128];
            return weft_error_refuse_or_log(
                err, WEFT_ERR_FORMAT, "vae",
                "%s: tensor '%s' has shape %s but the config implies %s", weft_ckpt_dir(ck),
                t->name, weft_shape_str(t->ndim, t->shape, got, sizeof(got)),
                weft_shape_str(p->ndim, p->shape, want, sizeof(want)));
        }
    }
    for (size_t i = 0; i < bd->n; i++)
        if (!weft_ckpt_find(ck, bd->b[i].p->name))
            return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "vae",
                                            "%s: missing tensor '%s' (required by the config)",
                                            weft_ckpt_dir(ck), bd->b[i].p->name);
    return WEFT_OK;
}

static weft_status_t read_weights(struct weft_vae *v, struct weft_ckpt *ck, const struct binder *bd,
                                  struct weft_error *err)
{
    size_t max_n = 0;
    for (size_t i = 0; i < bd->n; i++) {
        size_t n = (size_t)param_numel(bd->b[i].p);
        max_n = n > max_n ? n : max_n;
    }
    void *staging = weft_big_alloc(max_n * sizeof(float)); /* the widest held dtype */
    void *raw = NULL; /* device copy of a conv weight before packing (device backends) */
    weft_status_t st = staging ? WEFT_OK : WEFT_ERR_NOMEM;
    if (st != WEFT_OK)
        weft_error_refuse(err, st, "out of memory");
    if (st == WEFT_OK && !v->K->host_visible &&
        (st = v->K->buf_alloc(v->kc, max_n * sizeof(float), &raw)) != WEFT_OK)
        weft_error_refuse(err, st, "%s: no device memory to stage the weights: %s",
                          weft_ckpt_dir(ck), weft_status_str(st)); /* the kernels logged it */
    for (size_t i = 0; i < bd->n && st == WEFT_OK; i++) {
        const struct binding *b = &bd->b[i];
        const struct weft_ckpt_tensor *t = weft_ckpt_find(ck, b->p->name);
        const size_t bytes = (size_t)t->info->numel * weft_dtype_size(b->dt);
        if ((st = weft_st_read(t->file, t->info, staging, b->dt, err)) != WEFT_OK)
            break;
        if (!b->conv) {
            v->K->upload(v->kc, b->dst, staging, bytes);
            continue;
        }
        const void *src = staging;
        if (raw) {
            v->K->upload(v->kc, raw, staging, bytes);
            src = raw;
        }
        v->K->conv2d_pack(v->kc, src, b->dt, b->dst, b->p->shape[0], b->p->shape[1],
                          b->p->shape[2]);
    }
    if (raw)
        v->K->buf_free(v->kc, raw, max_n * sizeof(float));
    weft_big_free(staging, max_n * sizeof(float));
    if (st == WEFT_OK && (st = v->K->sync(v->kc)) != WEFT_OK)
        weft_error_refuse(err, st, "%s: uploading the weights: %s", weft_ckpt_dir(ck),
                          weft_status_str(st)); /* the kernels logged it */
    return st;
}

/* AutoencoderKLFlux2's running statistics, to the host: the mean, and the standard deviation
 * as Flux2Pipeline takes it, sqrt(running_var + batch_norm_eps) in f32. */
static weft_status_t read_bn(struct weft_vae *v, struct weft_ckpt *ck, struct weft_error *err)
{
    const int64_t n = 4 * v->cfg.latent_channels;
    const struct weft_ckpt_tensor *mean = weft_ckpt_find(ck, "bn.running_mean");
    const struct weft_ckpt_tensor *var = weft_ckpt_find(ck, "bn.running_var");
    if (!mean || !var)
        return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "vae",
                                        "%s: missing tensor '%s' (required by %s)",
                                        weft_ckpt_dir(ck),
                                        mean ? "bn.running_var" : "bn.running_mean",
                                        WEFT_VAE2_CLASS);
    v->bn_mean = weft_malloc((size_t)n * sizeof(float));
    v->bn_std = weft_malloc((size_t)n * sizeof(float));
    if (!v->bn_mean || !v->bn_std)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    weft_status_t st = weft_st_read(mean->file, mean->info, v->bn_mean, WEFT_DTYPE_F32, err);
    if (st == WEFT_OK)
        st = weft_st_read(var->file, var->info, v->bn_std, WEFT_DTYPE_F32, err);
    const float eps = (float)v->cfg.batch_norm_eps;
    for (int64_t i = 0; st == WEFT_OK && i < n; i++) {
        if (!(v->bn_std[i] >= 0.0f))
            return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "vae",
                                            "%s: bn.running_var[%lld] = %g is not a variance",
                                            weft_ckpt_dir(ck), (long long)i,
                                            (double)v->bn_std[i]);
        v->bn_std[i] = sqrtf(v->bn_std[i] + eps);
    }
    v->weight_bytes += (size_t)(2 * n) * sizeof(float);
    return st;
}

static weft_status_t load_config(struct weft_vae *v, struct weft_ckpt *ck, const char *dir,
                                 struct weft_error *err)
{
    if (strcmp(weft_ckpt_class(ck), WEFT_VAE_CLASS) != 0 &&
        strcmp(weft_ckpt_class(ck), WEFT_VAE2_CLASS) != 0 &&
        strcmp(weft_ckpt_class(ck), WEFT_VAE3_CLASS) != 0)
        return weft_error_refuse_or_log(err, WEFT_ERR_UNSUPPORTED, "vae",
                                        "%s: class '%s' is none of %s, %s and %s", dir,
                                        weft_ckpt_class(ck), WEFT_VAE_CLASS, WEFT_VAE2_CLASS,
                                        WEFT_VAE3_CLASS);
    char origin[1100];
    snprintf(origin, sizeof(origin), "%s/config.json", dir);
    weft_status_t st = weft_vae_config_parse(weft_ckpt_config(ck), origin, &v->cfg, err);
    if (st != WEFT_OK)
        return st;
    const int64_t deep = v->cfg.block_out_channels[v->cfg.n_blocks - 1];
    if (v->cfg.mid_block_add_attention && deep > ATTN_D_MAX)
        return weft_error_refuse_or_log(err, WEFT_ERR_UNSUPPORTED, "vae",
                                        "%s: mid-block attention over %lld channels is above "
                                        "this backend's head_dim limit of %d",
                                        origin, (long long)deep, ATTN_D_MAX);
    v->has_post_quant = v->cfg.use_post_quant_conv;
    v->has_attn = v->cfg.mid_block_add_attention;
    return WEFT_OK;
}

weft_status_t weft_vae_load(const char *dir, const struct weft_vae_opts *opts,
                            struct weft_vae **vae_p, struct weft_error *err)
{
    struct weft_ckpt *ck;
    weft_status_t st = weft_ckpt_open(dir, &ck, err);
    if (st != WEFT_OK)
        return st;
    struct binder bd = {.err = err};
    struct weft_vae_param *inv = NULL;
    struct weft_vae *v = weft_calloc(1, sizeof(*v));
    if (!v) {
        st = WEFT_ERR_NOMEM;
        goto out;
    }
    v->K = opts->kernels;
    v->kc = opts->kctx;
    if ((st = load_config(v, ck, dir, err)) != WEFT_OK)
        goto out;
    if (v->cfg.version == 3) { /* its own decoder reads what it uses */
        if ((st = weft_vae_qwen_load(ck, &v->cfg, v->K, v->kc, &v->qwen, err)) == WEFT_OK)
            v->weight_bytes = weft_vae_qwen_weight_bytes(v->qwen);
        goto out;
    }
    const struct weft_vae_config *c = &v->cfg;
    bd.n_inv = weft_vae_params(c, NULL);
    inv = weft_calloc(bd.n_inv, sizeof(*inv));
    v->res_store = weft_calloc((size_t)(c->n_blocks * (c->layers_per_block + 1)),
                               sizeof(*v->res_store));
    if (!inv || !v->res_store) {
        st = WEFT_ERR_NOMEM;
        goto out;
    }
    weft_vae_params(c, inv);
    bd.inv = inv;
    bd.ck = ck;
    bd.bn = c->version == 2;
    if ((st = bind_all(v, &bd)) != WEFT_OK || (st = check_checkpoint(ck, &bd, err)) != WEFT_OK)
        goto out;
    if (bd.bn && (st = read_bn(v, ck, err)) != WEFT_OK)
        goto out;
    v->arena_bytes = bd.bytes;
    v->weight_bytes = bd.param_bytes;
    if ((st = v->K->buf_alloc(v->kc, v->arena_bytes, &v->weights)) != WEFT_OK) {
        weft_error_set(err, st, "vae", "%s: cannot allocate %zu bytes of weights", dir,
                       v->arena_bytes);
        goto out;
    }
    bd.n = 0;
    bd.bytes = 0;
    bd.next = v->weights;
    if ((st = bind_all(v, &bd)) != WEFT_OK) /* assign */
        goto out;
    st = read_weights(v, ck, &bd, err);
out:
    weft_free(bd.b);
    weft_free(inv);
    weft_ckpt_close(ck);
    if (st != WEFT_OK) {
        if (st == WEFT_ERR_NOMEM) /* the binder's tables (a cause given above stays) */
            weft_error_refuse(err, st, "out of memory");
        weft_vae_destroy(v);
        return st;
    }
    *vae_p = v;
    return WEFT_OK;
}

void weft_vae_release(struct weft_vae *v)
{
    weft_vae_qwen_release(v->qwen);
    if (v->act)
        v->K->buf_free(v->kc, v->act, v->act_bytes);
    weft_free(v->host);
    v->act = NULL;
    v->host = NULL;
    v->act_bytes = 0;
    memset(&v->have, 0, sizeof(v->have));
}

void weft_vae_destroy(struct weft_vae *v)
{
    if (!v)
        return;
    weft_vae_release(v);
    if (v->weights)
        v->K->buf_free(v->kc, v->weights, v->arena_bytes);
    weft_free(v->res_store);
    weft_free(v->bn_mean);
    weft_free(v->bn_std);
    weft_vae_qwen_destroy(v->qwen);
    weft_free(v);
}

const struct weft_vae_config *weft_vae_get_config(const struct weft_vae *v)
{
    return &v->cfg;
}

size_t weft_vae_weight_bytes(const struct weft_vae *v)
{
    return v->weight_bytes;
}

/* ---------------------------------------------------------------------------------------- */
/* Reservation                                                                               */

struct ws_arg {
    const struct weft_vae *v;
    size_t ws;
};

static void ws_max(void *varg, int64_t h, int64_t w, int64_t cin, int64_t cout, int64_t k)
{
    struct ws_arg *a = varg;
    size_t b = a->v->K->conv2d_workspace(a->v->kc, h, w, cin, cout, k);
    a->ws = b > a->ws ? b : a->ws;
}

/* Buffers for one plain decode of an h x w latent grid (model/vae.h's walk of the forward
 * pass), and this backend's convolution workspace for it. */
static void plan_core(const struct weft_vae *v, int64_t h, int64_t w, struct plan *p)
{
    struct ws_arg a = {v, 0};
    int64_t lat, buf;
    weft_vae_decode_plan(&v->cfg, h, w, ws_max, &a, &lat, &buf);
    *p = (struct plan){lat, buf, a.ws, 0};
}

/* Diffusers' tiled_decode geometry along one axis: the number of tiles and the output extent
 * (the sum of the cropped tiles), which must equal n_lat x scale. */
struct tile_geom {
    int64_t step;     /* overlap_size: latent distance between tile starts */
    int64_t blend;    /* blend_extent in pixels */
    int64_t keep;     /* row_limit: pixels of each tile kept */
};

static weft_status_t tile_geometry(const struct weft_vae_config *c, const struct weft_vae_tiling *t,
                                   int64_t lat_h, int64_t lat_w, struct tile_geom *g,
                                   struct weft_error *err)
{
    /* the tiling is the request's: refused with its numbers, the status returned as such (g is
     * written only when the geometry works) */
    if (t->tile_latent < 1 || t->tile_sample != t->tile_latent * c->scale ||
        !(t->overlap >= 0.0 && t->overlap < 1.0)) {
        weft_error_refuse_or_log(err, WEFT_ERR_INVALID, "vae",
                                 "tiling: tile of %lld latents / %lld pixels with overlap %g: "
                                 "need tile_sample = tile_latent x %lld and overlap in [0, 1)",
                                 (long long)t->tile_latent, (long long)t->tile_sample, t->overlap,
                                 (long long)c->scale);
        return WEFT_ERR_INVALID;
    }
    g->step = (int64_t)((double)t->tile_latent * (1.0 - t->overlap));
    g->blend = (int64_t)((double)t->tile_sample * t->overlap);
    g->keep = t->tile_sample - g->blend;
    const int64_t dims[2] = {lat_h, lat_w};
    for (int d = 0; d < 2 && g->step >= 1; d++) {
        int64_t extent = 0;
        for (int64_t s = 0; s < dims[d]; s += g->step) {
            int64_t tile_px = (s + t->tile_latent <= dims[d] ? t->tile_latent : dims[d] - s) *
                              c->scale;
            extent += tile_px < g->keep ? tile_px : g->keep;
        }
        if (extent != dims[d] * c->scale) {
            weft_error_refuse_or_log(err, WEFT_ERR_INVALID, "vae",
                                     "tiling: tiles of %lld latents with overlap %g crop to %lld "
                                     "pixels, not %lld (use an overlap whose tile step is a whole "
                                     "number of latents)", (long long)t->tile_latent, t->overlap,
                                     (long long)extent, (long long)dims[d] * c->scale);
            return WEFT_ERR_INVALID;
        }
    }
    if (g->step < 1) {
        weft_error_refuse_or_log(err, WEFT_ERR_INVALID, "vae",
                                 "tiling: tile of %lld latents with overlap %g does not advance",
                                 (long long)t->tile_latent, t->overlap);
        return WEFT_ERR_INVALID;
    }
    return WEFT_OK;
}

static bool use_tiles(const struct weft_vae_tiling *t, int64_t lat_h, int64_t lat_w)
{
    return t && t->enabled && (lat_h > t->tile_latent || lat_w > t->tile_latent);
}

static weft_status_t plan_for(const struct weft_vae *v, int64_t lat_h, int64_t lat_w,
                              const struct weft_vae_tiling *t, struct plan *p,
                              struct weft_error *err)
{
    if (lat_h < 1 || lat_w < 1 || lat_h > (1 << 16) || lat_w > (1 << 16)) {
        weft_error_refuse_or_log(err, WEFT_ERR_INVALID, "vae",
                                 "decode: latent grid %lldx%lld is empty or too large",
                                 (long long)lat_h, (long long)lat_w);
        return WEFT_ERR_INVALID; /* p untouched */
    }
    if (!use_tiles(t, lat_h, lat_w)) {
        plan_core(v, lat_h, lat_w, p);
        return WEFT_OK;
    }
    struct tile_geom g;
    weft_status_t st = tile_geometry(&v->cfg, t, lat_h, lat_w, &g, err);
    if (st != WEFT_OK)
        return st;
    const int64_t th = lat_h < t->tile_latent ? lat_h : t->tile_latent;
    const int64_t tw = lat_w < t->tile_latent ? lat_w : t->tile_latent;
    plan_core(v, th, tw, p);
    const int64_t cols = (lat_w + g.step - 1) / g.step;
    const int64_t tile_px = th * tw * v->cfg.scale * v->cfg.scale * v->cfg.out_channels;
    p->host_floats = th * tw * v->cfg.latent_channels + 2 * cols * tile_px;
    return WEFT_OK;
}

static size_t plan_device_bytes(const struct plan *p)
{
    return ((size_t)p->lat_floats + 16 + 3 * ((size_t)p->buf_floats + 16)) * sizeof(float) +
           p->ws_bytes + 64;
}

size_t weft_vae_activation_bytes(const struct weft_vae *v, int64_t lat_h, int64_t lat_w,
                                 const struct weft_vae_tiling *t, size_t *host_p)
{
    struct plan p;
    if (plan_for(v, lat_h, lat_w, t, &p, NULL) != WEFT_OK)
        return 0;
    if (host_p)
        *host_p = (size_t)p.host_floats * sizeof(float);
    return plan_device_bytes(&p);
}

weft_status_t weft_vae_reserve(struct weft_vae *v, int64_t lat_h, int64_t lat_w,
                               const struct weft_vae_tiling *t, struct weft_error *err)
{
    if (v->qwen) /* it reserves on its first decode of a grid */
        return use_tiles(t, lat_h, lat_w) ? weft_error_refuse(err, WEFT_ERR_UNSUPPORTED,
                                              "tiled decoding with %s is not implemented",
                                              WEFT_VAE3_CLASS)
                          : WEFT_OK;
    struct plan p;
    weft_status_t st = plan_for(v, lat_h, lat_w, t, &p, err);
    if (st != WEFT_OK)
        return st;
    const struct plan *h = &v->have;
    if (v->act && p.lat_floats <= h->lat_floats && p.buf_floats <= h->buf_floats &&
        p.ws_bytes <= h->ws_bytes && p.host_floats <= h->host_floats)
        return WEFT_OK;
    weft_vae_release(v);
    const size_t bytes = plan_device_bytes(&p);
    if ((st = v->K->buf_alloc(v->kc, bytes, &v->act)) != WEFT_OK)
        return weft_error_set(err, st, "vae",
                              "cannot reserve %zu bytes of activations for a %lldx%lld latent "
                              "grid",
                              bytes, (long long)lat_h, (long long)lat_w);
    v->act_bytes = bytes;
    if (p.host_floats && !(v->host = weft_malloc((size_t)p.host_floats * sizeof(float)))) {
        weft_vae_release(v);
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    }
    float *f = v->act;
    v->lat = f;
    f += (p.lat_floats + 15) / 16 * 16;
    for (int i = 0; i < 3; i++) {
        v->buf[i] = f;
        f += (p.buf_floats + 15) / 16 * 16;
    }
    v->ws = f;
    v->have = p;
    return WEFT_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Forward                                                                                   */

struct bufs {
    float *x, *t, *u; /* hidden states, normalized, conv output */
};

static void conv(struct weft_vae *v, const struct conv *cv, const float *x, float *y,
                 int64_t h, int64_t w, int accumulate)
{
    v->K->conv2d(v->kc, x, cv->w, cv->wdt, cv->b, y, h, w, cv->cin, cv->cout, cv->k, accumulate,
                 v->ws);
}

static void norm(struct weft_vae *v, const struct gnorm *g, const float *x, float *y, int64_t n,
                 int silu)
{
    v->K->groupnorm(v->kc, x, y, g->w, g->b, n, g->c, v->cfg.norm_num_groups, VAE_EPS, silu);
}

/* ResnetBlock2D: x = shortcut(x) + conv2(silu(norm2(conv1(silu(norm1(x)))))). */
static void resnet(struct weft_vae *v, const struct resnet *r, struct bufs *b, int64_t h,
                   int64_t w)
{
    const int64_t n = h * w;
    norm(v, &r->norm1, b->x, b->t, n, 1);   /* [n, cin] */
    conv(v, &r->conv1, b->t, b->u, h, w, 0); /* [n, cout] */
    norm(v, &r->norm2, b->u, b->t, n, 1);   /* [n, cout] */
    if (!r->has_shortcut) {
        conv(v, &r->conv2, b->t, b->x, h, w, 1); /* residual: x += conv2(t) */
        return;
    }
    conv(v, &r->shortcut, b->x, b->u, h, w, 0); /* [n, cout] */
    conv(v, &r->conv2, b->t, b->u, h, w, 1);
    float *tmp = b->x;
    b->x = b->u;
    b->u = tmp;
}

/* Attention with group norm, one head over all channels, residual connection. */
static void attention(struct weft_vae *v, struct bufs *b, int64_t n)
{
    const struct attn *a = &v->attn;
    const int64_t C = a->q.out;
    float *xn = b->t, *q = b->u, *k = b->u + n * C, *val = b->t + n * C, *o = b->t + 2 * n * C;
    norm(v, &a->norm, b->x, xn, n, 0);                                      /* [n, C] */
    v->K->linear(v->kc, xn, C, a->q.w, a->q.wdt, a->q.b, q, C, n, C, C, 0); /* [n, C] */
    v->K->linear(v->kc, xn, C, a->k.w, a->k.wdt, a->k.b, k, C, n, C, C, 0); /* [n, C] */
    v->K->linear(v->kc, xn, C, a->v.w, a->v.wdt, a->v.b, val, C, n, C, C, 0); /* [n, C] */
    v->K->attention(v->kc, q, C, k, C, val, C, o, C, NULL, n, n, 1, C,
                    1.0f / sqrtf((float)C));                                 /* [n, 1, C] */
    v->K->linear(v->kc, o, C, a->out.w, a->out.wdt, a->out.b, b->x, C, n, C, C, 1); /* x += */
}

/* Decoder.forward on the latents already in v->lat ([h, w, L]); the image lands in one of
 * the buffers, returned. */
static const float *decode_core(struct weft_vae *v, int64_t h, int64_t w)
{
    struct bufs b = {v->buf[0], v->buf[1], v->buf[2]};
    const float *in = v->lat;
    if (v->has_post_quant) {
        conv(v, &v->post_quant, v->lat, b.u, h, w, 0); /* [h*w, L] */
        in = b.u;
    }
    conv(v, &v->conv_in, in, b.x, h, w, 0); /* [h*w, deep] */
    resnet(v, &v->mid0, &b, h, w);
    if (v->has_attn)
        attention(v, &b, h * w);
    resnet(v, &v->mid1, &b, h, w);
    for (int i = 0; i < v->cfg.n_blocks; i++) {
        const struct up_block *u = &v->up[i];
        for (int64_t j = 0; j < v->cfg.layers_per_block + 1; j++)
            resnet(v, &u->res[j], &b, h, w);
        if (u->has_up) {
            v->K->upsample2x(v->kc, b.x, b.t, h, w, u->up.cin); /* [4hw, c] */
            h *= 2;
            w *= 2;
            conv(v, &u->up, b.t, b.x, h, w, 0);
        }
    }
    norm(v, &v->norm_out, b.x, b.t, h * w, 1);
    conv(v, &v->conv_out, b.t, b.u, h, w, 0); /* [H*W, out_channels] */
    return b.u;
}

/* Decode rows [r0, r0 + th) x cols [c0, c0 + tw) of the full latents into tile (host). */
static weft_status_t decode_tile(struct weft_vae *v, const float *latents, int64_t lat_w,
                                 int64_t r0, int64_t c0, int64_t th, int64_t tw, float *tile)
{
    const int64_t L = v->cfg.latent_channels, s = v->cfg.scale;
    const size_t row = (size_t)(tw * L) * sizeof(float);
    if (v->K->host_visible) {
        for (int64_t r = 0; r < th; r++)
            memcpy(v->lat + r * tw * L, latents + ((r0 + r) * lat_w + c0) * L, row);
    } else {
        float *stage = v->host; /* the latent tile staging comes first */
        for (int64_t r = 0; r < th; r++)
            memcpy(stage + r * tw * L, latents + ((r0 + r) * lat_w + c0) * L, row);
        v->K->upload(v->kc, v->lat, stage, (size_t)th * row);
    }
    const float *img = decode_core(v, th, tw);
    v->K->download(v->kc, tile, img, (size_t)(th * s * tw * s * v->cfg.out_channels) * 4);
    return v->K->sync(v->kc);
}

/* blend_v / blend_h, in place on b (Diffusers' float weights: 1 - y/E and y/E). */
static void blend_v(const float *a, int64_t ah, float *b, int64_t bh, int64_t w, int64_t ch,
                    int64_t extent)
{
    const int64_t e = ah < bh ? (ah < extent ? ah : extent) : (bh < extent ? bh : extent);
    for (int64_t y = 0; y < e; y++) {
        const float wa = (float)(1.0 - (double)y / (double)e), wb = (float)((double)y / e);
        const float *ar = a + (ah - e + y) * w * ch;
        float *br = b + y * w * ch;
        for (int64_t i = 0; i < w * ch; i++)
            br[i] = ar[i] * wa + br[i] * wb;
    }
}

static void blend_h(const float *a, int64_t aw, float *b, int64_t bw, int64_t h, int64_t ch,
                    int64_t extent)
{
    const int64_t e = aw < bw ? (aw < extent ? aw : extent) : (bw < extent ? bw : extent);
    for (int64_t x = 0; x < e; x++) {
        const float wa = (float)(1.0 - (double)x / (double)e), wb = (float)((double)x / e);
        for (int64_t y = 0; y < h; y++)
            for (int64_t c = 0; c < ch; c++)
                b[(y * bw + x) * ch + c] =
                    a[(y * aw + aw - e + x) * ch + c] * wa + b[(y * bw + x) * ch + c] * wb;
    }
}

/* AutoencoderKL.tiled_decode: tiles in row-major order, each blended (in place) with the
 * already blended tile above and tile to the left, then cropped to keep x keep pixels. Only
 * the previous row of tiles is kept. */
static weft_status_t decode_tiled(struct weft_vae *v, const float *latents, int64_t lat_h,
                                  int64_t lat_w, const struct weft_vae_tiling *t, float *image,
                                  struct weft_error *err)
{
    struct tile_geom g;
    weft_status_t st = tile_geometry(&v->cfg, t, lat_h, lat_w, &g, err);
    if (st != WEFT_OK)
        return st;
    const int64_t s = v->cfg.scale, ch = v->cfg.out_channels, W = lat_w * s;
    const int64_t tl = t->tile_latent, cols = (lat_w + g.step - 1) / g.step;
    const int64_t th_max = lat_h < tl ? lat_h : tl, tw_max = lat_w < tl ? lat_w : tl;
    const int64_t tile_floats = th_max * tw_max * s * s * ch;
    float *rows[2] = {v->host + th_max * tw_max * v->cfg.latent_channels, NULL};
    rows[1] = rows[0] + cols * tile_floats;
    int64_t prev_h = 0, out_y = 0;
    for (int64_t r0 = 0, ri = 0; r0 < lat_h; r0 += g.step, ri++) {
        float *cur = rows[ri % 2], *prev = rows[(ri + 1) % 2];
        const int64_t th = r0 + tl <= lat_h ? tl : lat_h - r0, hp = th * s;
        int64_t out_x = 0, left_w = 0;
        for (int64_t c0 = 0, ci = 0; c0 < lat_w; c0 += g.step, ci++) {
            const int64_t tw = c0 + tl <= lat_w ? tl : lat_w - c0, wp = tw * s;
            float *tile = cur + ci * tile_floats;
            if ((st = decode_tile(v, latents, lat_w, r0, c0, th, tw, tile)) != WEFT_OK)
                return weft_error_refuse(err, st,
                                         "the VAE failed on the tile at latent (%lld, "
                                         "%lld): %s",
                                         (long long)r0, (long long)c0,
                                         weft_status_str(st)); /* the kernels logged it */
            if (ri > 0)
                blend_v(prev + ci * tile_floats, prev_h, tile, hp, wp, ch, g.blend);
            if (ci > 0)
                blend_h(cur + (ci - 1) * tile_floats, left_w, tile, wp, hp, ch, g.blend);
            const int64_t kh = hp < g.keep ? hp : g.keep, kw = wp < g.keep ? wp : g.keep;
            for (int64_t y = 0; y < kh; y++)
                memcpy(image + ((out_y + y) * W + out_x) * ch, tile + y * wp * ch,
                       (size_t)(kw * ch) * sizeof(float));
            out_x += kw;
            left_w = wp;
        }
        out_y += hp < g.keep ? hp : g.keep;
        prev_h = hp;
    }
    return WEFT_OK;
}

weft_status_t weft_vae_decode(struct weft_vae *v, const float *latents, int64_t lat_h,
                              int64_t lat_w, const struct weft_vae_tiling *t, float *image,
                              struct weft_error *err)
{
    weft_status_t st = weft_vae_reserve(v, lat_h, lat_w, t, err);
    if (st != WEFT_OK)
        return st;
    if (v->qwen)
        return weft_vae_qwen_decode(v->qwen, latents, lat_h, lat_w, image, err);
    if (use_tiles(t, lat_h, lat_w))
        return decode_tiled(v, latents, lat_h, lat_w, t, image, err);
    const int64_t s = v->cfg.scale;
    v->K->upload(v->kc, v->lat, latents,
                 (size_t)(lat_h * lat_w * v->cfg.latent_channels) * sizeof(float));
    const float *img = decode_core(v, lat_h, lat_w);
    v->K->download(v->kc, image, img,
                   (size_t)(lat_h * s * lat_w * s * v->cfg.out_channels) * sizeof(float));
    if ((st = v->K->sync(v->kc)) != WEFT_OK) /* the kernels logged it */
        weft_error_refuse(err, st, "the VAE failed: %s", weft_status_str(st));
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* Pipeline prologue and epilogue (host)                                                     */

void weft_vae_unpack_flux(const struct weft_vae_config *c, const float *packed, int64_t lat_h,
                          int64_t lat_w, float *latents)
{
    const int64_t L = c->latent_channels, gw = lat_w / 2;
    const float scale = (float)c->scaling_factor, shift = (float)c->shift_factor;
    for (int64_t y = 0; y < lat_h; y++)
        for (int64_t x = 0; x < lat_w; x++) {
            const float *tok = packed + ((y / 2) * gw + x / 2) * 4 * L + (y % 2) * 2 + x % 2;
            float *dst = latents + (y * lat_w + x) * L;
            for (int64_t ch = 0; ch < L; ch++)
                dst[ch] = tok[ch * 4] / scale + shift;
        }
}

void weft_vae_unpack(const struct weft_vae *v, const float *packed, int64_t lat_h,
                     int64_t lat_w, float *latents)
{
    const struct weft_vae_config *c = &v->cfg;
    if (c->version == 1) {
        weft_vae_unpack_flux(c, packed, lat_h, lat_w, latents);
        return;
    }
    if (c->version == 3) {
        weft_vae_qwen_unpack(c, packed, lat_h, lat_w, latents);
        return;
    }
    /* Flux2Pipeline: latents * bn_std + bn_mean per packed channel, then _unpatchify_latents
     * (packed channel ch * 4 + dy * 2 + dx is latent channel ch at (2y + dy, 2x + dx)) */
    const int64_t L = c->latent_channels, gw = lat_w / 2;
    for (int64_t y = 0; y < lat_h; y++)
        for (int64_t x = 0; x < lat_w; x++) {
            const int64_t sub = (y % 2) * 2 + x % 2;
            const float *tok = packed + ((y / 2) * gw + x / 2) * 4 * L;
            float *dst = latents + (y * lat_w + x) * L;
            for (int64_t ch = 0; ch < L; ch++) {
                const int64_t k = ch * 4 + sub;
                const float scaled = tok[k] * v->bn_std[k]; /* two roundings, as torch's */
                dst[ch] = scaled + v->bn_mean[k];
            }
        }
}

void weft_vae_to_rgb8(const float *image, int64_t n, uint8_t *out)
{
    for (int64_t i = 0; i < n; i++) {
        float v = image[i] / 2.0f + 0.5f;
        v = v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v); /* NaN stays NaN: rintf gives 0 below */
        float r = rintf(v * 255.0f);
        out[i] = r >= 0.0f && r <= 255.0f ? (uint8_t)r : 0;
    }
}
