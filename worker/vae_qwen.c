/* AutoencoderKLQwenImage's decoder on one frame (worker/vae_qwen.h), in Diffusers' order of
 * operations: post_quant_conv, conv_in, the mid block (resnet, attention, resnet), the up
 * blocks (resnets, then a 2x upsampler whose convolution halves the channels), norm_out, SiLU,
 * conv_out. A causal 3-D convolution sees, on the first frame, only zeros before it: it is the
 * 2-D convolution of its last temporal tap. The upsamplers' time convolutions act from the
 * second frame on and are not loaded. QwenImageRMS_norm (F.normalize over the channels x
 * sqrt(C) x gamma) is an RMS norm of each pixel's channels. */
#include "worker/vae_qwen.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "model/checkpoint.h"

#define RMS_EPS 1e-24f /* F.normalize's guard (a norm of at least 1e-12), as a mean square */

struct qconv {
    void *w; /* packed [cout, cin, k, k] of its last temporal tap, in wdt */
    enum weft_dtype wdt;
    float *b;
    int64_t cout, cin, k;
};

struct qres {
    float *g1, *g2;
    struct qconv c1, c2, sc;
    bool has_sc;
};

struct weft_vae_qwen {
    struct weft_vae_config cfg;
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    struct alloc {
        void *p;
        size_t bytes;
    } *allocs; /* every device buffer of the weights, freed at destroy */
    size_t n_allocs, cap_allocs;
    size_t weight_bytes;
    struct qconv post_quant, conv_in, to_qkv, proj, conv_out;
    float *attn_g, *norm_out_g;
    struct qres mid0, mid1;
    struct qres *res; /* up block i's resnets at res + i (layers_per_block + 1) */
    struct qconv up[WEFT_VAE_MAX_BLOCKS];
    int64_t dims[WEFT_VAE_MAX_BLOCKS + 1];
    /* activations of the last reservation */
    int64_t have_h, have_w;
    void *act;
    size_t act_bytes;
    float *buf[4], *qkv, *lat;
    void *ws;
};

static weft_status_t dev_alloc(struct weft_vae_qwen *q, size_t bytes, void **p)
{
    if (q->n_allocs == q->cap_allocs) {
        size_t cap = q->cap_allocs ? 2 * q->cap_allocs : 64;
        struct alloc *n = weft_realloc(q->allocs, cap * sizeof(*n));
        if (!n)
            return WEFT_ERR_NOMEM;
        q->allocs = n, q->cap_allocs = cap;
    }
    bytes = bytes ? bytes : 4;
    weft_status_t st = q->K->buf_alloc(q->kc, bytes, p);
    if (st == WEFT_OK)
        q->allocs[q->n_allocs++] = (struct alloc){*p, bytes};
    return st;
}

/* A vector (bias, gamma) to the device in f32. */
static weft_status_t load_vec(struct weft_vae_qwen *q, struct weft_ckpt *ck, const char *name,
                              int64_t n, float **dst, struct weft_error *err)
{
    const struct weft_ckpt_tensor *t = weft_ckpt_find(ck, name);
    if (!t || t->info->numel != n)
        return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "vae",
                                        "%s: %s tensor '%s' (%lld values expected)",
                                        weft_ckpt_dir(ck), t ? "a wrong-sized" : "no", name,
                                        (long long)n);
    float *host = weft_malloc((size_t)n * sizeof(float));
    if (!host)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    weft_status_t st = weft_st_read(t->file, t->info, host, WEFT_DTYPE_F32, err);
    void *p = NULL;
    if (st == WEFT_OK && (st = dev_alloc(q, (size_t)n * sizeof(float), &p)) != WEFT_OK)
        weft_error_refuse(err, st, "no memory for the VAE's weights");
    if (st == WEFT_OK) {
        q->K->upload(q->kc, p, host, (size_t)n * sizeof(float));
        *dst = p;
        q->weight_bytes += (size_t)n * sizeof(float);
    }
    weft_free(host);
    return st;
}

/* A convolution: [cout, cin, kt, k, k] (3-D, kept: tap kt - 1) or [cout, cin, k, k], packed in
 * the checkpoint's float dtype, and its bias. */
static weft_status_t load_conv(struct weft_vae_qwen *q, struct weft_ckpt *ck, const char *prefix,
                               const char *name, int64_t cout, int64_t cin, int64_t k,
                               struct qconv *c, struct weft_error *err)
{
    char key[160];
    snprintf(key, sizeof(key), "%s%s.weight", prefix, name);
    const struct weft_ckpt_tensor *t = weft_ckpt_find(ck, key);
    const int nd = t ? t->info->ndim : 0;
    const int64_t kt = nd == 5 ? t->info->shape[2] : 1;
    if (!t || (nd != 4 && nd != 5) || t->info->shape[0] != cout || t->info->shape[1] != cin ||
        t->info->shape[nd - 1] != k || t->info->shape[nd - 2] != k)
        return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "vae",
                                        "%s: %s tensor '%s' ([%lld, %lld, (kt,) %lld, %lld] "
                                        "expected)", weft_ckpt_dir(ck),
                                        t ? "a wrong-shaped" : "no", key, (long long)cout,
                                        (long long)cin, (long long)k, (long long)k);
    *c = (struct qconv){.wdt = weft_dtype_is_float(t->info->dtype) &&
                                       t->info->dtype != WEFT_DTYPE_F64
                                   ? t->info->dtype
                                   : WEFT_DTYPE_F32,
                        .cout = cout, .cin = cin, .k = k};
    const size_t esz = weft_dtype_size(c->wdt), kk = (size_t)(k * k);
    const size_t whole = (size_t)(cout * cin * kt) * kk, tap = (size_t)(cout * cin) * kk;
    char *full = weft_big_alloc(whole * esz), *slice = weft_malloc(tap * esz);
    void *raw = NULL;
    if (!full || !slice) {
        weft_big_free(full, whole * esz);
        weft_free(slice);
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    }
    weft_status_t st = weft_st_read(t->file, t->info, full, c->wdt, err);
    /* [o][i][kt - 1][y][x]: the last temporal tap of every (o, i) */
    for (size_t oi = 0; st == WEFT_OK && oi < (size_t)(cout * cin); oi++)
        memcpy(slice + oi * kk * esz, full + (oi * (size_t)kt + (size_t)(kt - 1)) * kk * esz,
               kk * esz);
    if (st == WEFT_OK && (st = dev_alloc(q, tap * esz, &c->w)) != WEFT_OK)
        weft_error_refuse(err, st, "no memory for the VAE's weights");
    const void *src = slice;
    if (st == WEFT_OK && !q->K->host_visible) {
        if ((st = q->K->buf_alloc(q->kc, tap * esz, &raw)) == WEFT_OK)
            q->K->upload(q->kc, raw, slice, tap * esz);
        src = raw;
    }
    if (st == WEFT_OK) {
        q->K->conv2d_pack(q->kc, src, c->wdt, c->w, cout, cin, k);
        q->weight_bytes += tap * esz;
        st = q->K->sync(q->kc);
    }
    if (raw)
        q->K->buf_free(q->kc, raw, tap * esz);
    weft_big_free(full, whole * esz);
    weft_free(slice);
    if (st != WEFT_OK)
        return st;
    snprintf(key, sizeof(key), "%s%s.bias", prefix, name);
    return load_vec(q, ck, key, cout, &c->b, err);
}

static weft_status_t load_gamma(struct weft_vae_qwen *q, struct weft_ckpt *ck, const char *prefix,
                                const char *name, int64_t c, float **dst, struct weft_error *err)
{
    char key[160];
    snprintf(key, sizeof(key), "%s%s.gamma", prefix, name);
    return load_vec(q, ck, key, c, dst, err);
}

static weft_status_t load_res(struct weft_vae_qwen *q, struct weft_ckpt *ck, const char *prefix,
                              int64_t cin, int64_t cout, struct qres *r, struct weft_error *err)
{
    weft_status_t st;
    r->has_sc = cin != cout;
    if ((st = load_gamma(q, ck, prefix, "norm1", cin, &r->g1, err)) ||
        (st = load_conv(q, ck, prefix, "conv1", cout, cin, 3, &r->c1, err)) ||
        (st = load_gamma(q, ck, prefix, "norm2", cout, &r->g2, err)) ||
        (st = load_conv(q, ck, prefix, "conv2", cout, cout, 3, &r->c2, err)))
        return st;
    return r->has_sc ? load_conv(q, ck, prefix, "conv_shortcut", cout, cin, 1, &r->sc, err)
                     : WEFT_OK;
}

weft_status_t weft_vae_qwen_load(struct weft_ckpt *ck, const struct weft_vae_config *cfg,
                                 const struct weft_kernels *K, struct weft_kctx *kc,
                                 struct weft_vae_qwen **q_p, struct weft_error *err)
{
    struct weft_vae_qwen *q = weft_calloc(1, sizeof(*q));
    if (!q)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    q->cfg = *cfg, q->K = K, q->kc = kc;
    const struct weft_vae_config *c = &q->cfg;
    const int n = c->n_blocks;
    q->dims[0] = c->block_out_channels[n - 1];
    for (int i = 0; i < n; i++)
        q->dims[i + 1] = c->block_out_channels[n - 1 - i];
    const int64_t L = c->latent_channels, d0 = q->dims[0], R = c->layers_per_block + 1;
    q->res = weft_calloc((size_t)(n * R), sizeof(*q->res));
    weft_status_t st = q->res ? WEFT_OK : weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    const char *ap = "decoder.mid_block.attentions.0.";
    if (st == WEFT_OK &&
        ((st = load_conv(q, ck, "", "post_quant_conv", L, L, 1, &q->post_quant, err)) ||
         (st = load_conv(q, ck, "decoder.", "conv_in", d0, L, 3, &q->conv_in, err)) ||
         (st = load_res(q, ck, "decoder.mid_block.resnets.0.", d0, d0, &q->mid0, err)) ||
         (st = load_gamma(q, ck, ap, "norm", d0, &q->attn_g, err)) ||
         (st = load_conv(q, ck, ap, "to_qkv", 3 * d0, d0, 1, &q->to_qkv, err)) ||
         (st = load_conv(q, ck, ap, "proj", d0, d0, 1, &q->proj, err)) ||
         (st = load_res(q, ck, "decoder.mid_block.resnets.1.", d0, d0, &q->mid1, err))))
        goto out;
    char prefix[96];
    for (int i = 0; i < n && st == WEFT_OK; i++) {
        const int64_t in = i ? q->dims[i] / 2 : q->dims[i], out = q->dims[i + 1];
        for (int64_t j = 0; j < R && st == WEFT_OK; j++) {
            snprintf(prefix, sizeof(prefix), "decoder.up_blocks.%d.resnets.%lld.", i,
                     (long long)j);
            st = load_res(q, ck, prefix, j ? out : in, out, &q->res[i * R + j], err);
        }
        if (st == WEFT_OK && i < n - 1) {
            snprintf(prefix, sizeof(prefix), "decoder.up_blocks.%d.upsamplers.0.", i);
            st = load_conv(q, ck, prefix, "resample.1", out / 2, out, 3, &q->up[i], err);
        }
    }
    if (st == WEFT_OK &&
        (st = load_gamma(q, ck, "decoder.", "norm_out", q->dims[n], &q->norm_out_g, err)) ==
            WEFT_OK)
        st = load_conv(q, ck, "decoder.", "conv_out", c->out_channels, q->dims[n], 3,
                       &q->conv_out, err);
out:
    if (st != WEFT_OK) {
        weft_vae_qwen_destroy(q);
        return st;
    }
    *q_p = q;
    return WEFT_OK;
}

static void release(struct weft_vae_qwen *q)
{
    if (q->act)
        q->K->buf_free(q->kc, q->act, q->act_bytes);
    q->act = NULL, q->act_bytes = 0, q->have_h = q->have_w = 0;
}

void weft_vae_qwen_release(struct weft_vae_qwen *q)
{
    if (q)
        release(q);
}

void weft_vae_qwen_destroy(struct weft_vae_qwen *q)
{
    if (!q)
        return;
    release(q);
    for (size_t i = 0; i < q->n_allocs; i++)
        q->K->buf_free(q->kc, q->allocs[i].p, q->allocs[i].bytes);
    weft_free(q->allocs);
    weft_free(q->res);
    weft_free(q);
}

size_t weft_vae_qwen_weight_bytes(const struct weft_vae_qwen *q)
{
    return q->weight_bytes;
}

/* One convolution's demand on the reservation: its larger side, its workspace. */
static void see(const struct weft_vae_qwen *q, int64_t h, int64_t w, int64_t cin, int64_t cout,
                int64_t k, int64_t *floats, size_t *ws)
{
    const int64_t m = h * w * (cin > cout ? cin : cout);
    *floats = m > *floats ? m : *floats;
    const size_t s = q->K->conv2d_workspace(q->kc, h, w, cin, cout, k);
    *ws = s > *ws ? s : *ws;
}

/* The largest activation (floats) and convolution workspace (bytes) of a decode. */
static void walk_sizes(const struct weft_vae_qwen *q, int64_t h, int64_t w, int64_t *floats,
                       size_t *ws)
{
    const struct weft_vae_config *c = &q->cfg;
    *floats = h * w * 3 * q->dims[0]; /* the attention's Q | K | V */
    *ws = 0;
    see(q, h, w, c->latent_channels, q->dims[0], 3, floats, ws);
    see(q, h, w, q->dims[0], 3 * q->dims[0], 1, floats, ws);
    see(q, h, w, q->dims[0], q->dims[0], 3, floats, ws);
    for (int i = 0; i < c->n_blocks; i++) {
        const int64_t in = i ? q->dims[i] / 2 : q->dims[i], out = q->dims[i + 1];
        see(q, h, w, in, out, 3, floats, ws);
        see(q, h, w, in, out, 1, floats, ws);
        see(q, h, w, out, out, 3, floats, ws);
        if (i < c->n_blocks - 1) {
            h *= 2, w *= 2;
            see(q, h, w, out, out, 1, floats, ws); /* the upsampled input */
            see(q, h, w, out, out / 2, 3, floats, ws);
        }
    }
    see(q, h, w, q->dims[c->n_blocks], c->out_channels, 3, floats, ws);
}

static weft_status_t reserve(struct weft_vae_qwen *q, int64_t h, int64_t w,
                             struct weft_error *err)
{
    if (q->act && h <= q->have_h && w <= q->have_w && h * w <= q->have_h * q->have_w)
        return WEFT_OK;
    release(q);
    int64_t floats;
    size_t ws;
    walk_sizes(q, h, w, &floats, &ws);
    const size_t fb = ((size_t)floats * sizeof(float) + 63) / 64 * 64;
    const size_t lat = ((size_t)(h * w * q->cfg.latent_channels) * sizeof(float) + 63) / 64 * 64;
    const size_t bytes = 5 * fb + lat + (ws + 63) / 64 * 64;
    weft_status_t st = q->K->buf_alloc(q->kc, bytes, &q->act);
    if (st != WEFT_OK)
        return weft_error_set(err, st, "vae",
                              "cannot reserve %zu bytes to decode a %lldx%lld latent grid",
                              bytes, (long long)h, (long long)w);
    char *p = q->act;
    for (int i = 0; i < 4; i++, p += fb)
        q->buf[i] = (float *)p;
    q->qkv = (float *)p, p += fb;
    q->lat = (float *)p, p += lat;
    q->ws = ws ? p : NULL;
    q->act_bytes = bytes, q->have_h = h, q->have_w = w;
    return WEFT_OK;
}

static void conv(struct weft_vae_qwen *q, const struct qconv *c, const float *x, float *y,
                 int64_t h, int64_t w, int accumulate)
{
    q->K->conv2d(q->kc, x, c->w, c->wdt, c->b, y, h, w, c->cin, c->cout, c->k, accumulate, q->ws);
}

/* x = rms(x) gamma, then SiLU when asked: in place on n pixels of c channels. */
static void rms(struct weft_vae_qwen *q, float *x, const float *g, int64_t n, int64_t c,
                bool silu)
{
    q->K->rmsnorm(q->kc, x, c, g, n, 1, c, RMS_EPS);
    if (silu)
        q->K->silu(q->kc, x, x, n * c);
}

/* QwenImageResidualBlock: shortcut(x) + conv2(silu(rms2(conv1(silu(rms1(x)))))). The result
 * is left in b[0] (the buffers rotate). */
static void resnet(struct weft_vae_qwen *q, const struct qres *r, float **b, int64_t h,
                   int64_t w)
{
    const int64_t n = h * w, cin = r->c1.cin, cout = r->c1.cout;
    q->K->copy_rows(q->kc, b[1], cin, b[0], cin, n, cin);
    rms(q, b[1], r->g1, n, cin, true);
    conv(q, &r->c1, b[1], b[2], h, w, 0);
    rms(q, b[2], r->g2, n, cout, true);
    if (!r->has_sc) {
        conv(q, &r->c2, b[2], b[0], h, w, 1); /* x += conv2(...) */
        return;
    }
    conv(q, &r->sc, b[0], b[3], h, w, 0);
    conv(q, &r->c2, b[2], b[3], h, w, 1);
    float *t = b[0];
    b[0] = b[3], b[3] = t;
}

weft_status_t weft_vae_qwen_decode(struct weft_vae_qwen *q, const float *latents, int64_t lat_h,
                                   int64_t lat_w, float *image, struct weft_error *err)
{
    weft_status_t st = reserve(q, lat_h, lat_w, err);
    if (st != WEFT_OK)
        return st;
    const struct weft_vae_config *c = &q->cfg;
    const struct weft_kernels *K = q->K;
    int64_t h = lat_h, w = lat_w;
    const int64_t d0 = q->dims[0], R = c->layers_per_block + 1;
    float *b[4] = {q->buf[0], q->buf[1], q->buf[2], q->buf[3]};
    K->upload(q->kc, q->lat, latents, (size_t)(h * w * c->latent_channels) * sizeof(float));
    conv(q, &q->post_quant, q->lat, b[1], h, w, 0);
    conv(q, &q->conv_in, b[1], b[0], h, w, 0);
    resnet(q, &q->mid0, b, h, w);
    /* QwenImageAttentionBlock: one head over the pixels, x += proj(attention(qkv(rms(x)))) */
    const int64_t n = h * w;
    K->copy_rows(q->kc, b[1], d0, b[0], d0, n, d0);
    rms(q, b[1], q->attn_g, n, d0, false);
    conv(q, &q->to_qkv, b[1], q->qkv, h, w, 0);
    K->attention(q->kc, q->qkv, 3 * d0, q->qkv + d0, 3 * d0, q->qkv + 2 * d0, 3 * d0, b[2], d0,
                 NULL, n, n, 1, d0, 1.0f / sqrtf((float)d0));
    conv(q, &q->proj, b[2], b[0], h, w, 1);
    resnet(q, &q->mid1, b, h, w);
    for (int i = 0; i < c->n_blocks; i++) {
        for (int64_t j = 0; j < R; j++)
            resnet(q, &q->res[i * R + j], b, h, w);
        if (i == c->n_blocks - 1)
            continue;
        const int64_t ch = q->dims[i + 1];
        K->upsample2x(q->kc, b[0], b[1], h, w, ch); /* nearest-exact: exactly 2x */
        h *= 2, w *= 2;
        conv(q, &q->up[i], b[1], b[0], h, w, 0);
    }
    const int64_t cl = q->dims[c->n_blocks];
    rms(q, b[0], q->norm_out_g, h * w, cl, true);
    conv(q, &q->conv_out, b[0], b[1], h, w, 0);
    K->download(q->kc, image, b[1], (size_t)(h * w * c->out_channels) * sizeof(float));
    if ((st = K->sync(q->kc)) != WEFT_OK) /* the kernels logged it */
        return weft_error_refuse(err, st, "the VAE failed: %s", weft_status_str(st));
    /* _decode's clamp to [-1, 1] */
    for (int64_t i = 0; i < h * w * c->out_channels; i++)
        image[i] = image[i] < -1.0f ? -1.0f : image[i] > 1.0f ? 1.0f : image[i];
    return WEFT_OK;
}

void weft_vae_qwen_unpack(const struct weft_vae_config *c, const float *packed, int64_t lat_h,
                          int64_t lat_w, float *latents)
{
    const int64_t L = c->latent_channels, gw = lat_w / 2;
    for (int64_t y = 0; y < lat_h; y++)
        for (int64_t x = 0; x < lat_w; x++) {
            const float *tok = packed + ((y / 2) * gw + x / 2) * 4 * L + (y % 2) * 2 + x % 2;
            float *dst = latents + (y * lat_w + x) * L;
            for (int64_t ch = 0; ch < L; ch++) {
                /* latents / (1 / std) + mean, each in f32 as the pipeline computes it */
                const float inv = 1.0f / c->latents_std[ch];
                dst[ch] = tok[ch * 4] / inv + c->latents_mean[ch];
            }
        }
}
