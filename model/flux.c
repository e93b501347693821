/* FLUX.1, FLUX.2 and Qwen-Image configs (Diffusers' FluxTransformer2DModel,
 * Flux2Transformer2DModel and QwenImageTransformer2DModel defaults, bounded and cross-checked),
 * their parameter tables and what follows from them. */
#include "model/flux.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/error.h"
#include "common/log.h"
#include "common/tensor.h"
#include "model/checkpoint.h"
#include "model/json_get.h"
#include "model/plan.h"

#define BIG 1048576 /* bound on any width: keeps products far from overflow */

/* FLUX.2's keys beyond FLUX.1's, and its defaults where the two classes differ. */
static weft_status_t parse_v2(const cJSON *cfg, const char *origin, struct weft_flux_config *c,
                              struct weft_error *err)
{
    double ratio, theta, eps;
    weft_status_t st;
    if ((st = weft_json_get_int(cfg, "timestep_guidance_channels", 256, 2, BIG, origin,
                                &c->time_proj_dim, err)) ||
        (st = weft_json_get_double(cfg, "mlp_ratio", 3.0, 0.0, 64.0, origin, &ratio, err)) ||
        (st = weft_json_get_double(cfg, "rope_theta", 2000.0, 1.0, 1e9, origin, &theta, err)) ||
        (st = weft_json_get_double(cfg, "eps", 1e-6, 1e-12, 1.0, origin, &eps, err)))
        return st;
    if (c->time_proj_dim % 2)
        return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                        "%s: timestep_guidance_channels %lld is odd; the "
                                        "sinusoidal embedding pairs cos and sin",
                                        origin, (long long)c->time_proj_dim);
    c->mlp_hidden_dim = (int64_t)((double)c->inner_dim * ratio); /* int(dim * mlp_ratio) */
    if (c->mlp_hidden_dim < 1)
        return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                        "%s: mlp_ratio %g leaves no MLP features", origin, ratio);
    c->rope_theta = theta;
    c->eps = (float)eps;
    return WEFT_OK;
}

/* Qwen-Image's keys: the features weft does not run are refused, never ignored; the output
 * width is patch^2 x out_channels (proj_out packs the patch). */
static weft_status_t parse_v3(const cJSON *cfg, const char *origin, struct weft_flux_config *c,
                              struct weft_error *err)
{
    static const char *const off[] = {"zero_cond_t", "use_additional_t_cond", "use_layer3d_rope",
                                      "guidance_embeds"};
    for (size_t i = 0; i < sizeof(off) / sizeof(off[0]); i++) {
        bool on;
        weft_status_t st = weft_json_get_bool(cfg, off[i], false, origin, &on, err);
        if (st != WEFT_OK)
            return st;
        if (on)
            return weft_error_refuse_or_log(err, WEFT_ERR_UNSUPPORTED, "model",
                                            "%s: %s = true: weft runs Qwen-Image's text-to-image "
                                            "transformer without it", origin, off[i]);
    }
    c->out_channels *= c->patch_size * c->patch_size;
    c->guidance_embeds = false;
    c->num_single_layers = 0;
    return WEFT_OK;
}

weft_status_t weft_flux_config_parse(const cJSON *cfg, const char *origin,
                                     struct weft_flux_config *out, struct weft_error *err)
{
    struct weft_flux_config c = {.version = 1};
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(cfg, "_class_name");
    if (cJSON_IsString(cls) && strcmp(cls->valuestring, WEFT_FLUX2_CLASS) == 0)
        c.version = 2;
    if (cJSON_IsString(cls) && strcmp(cls->valuestring, WEFT_QWEN_CLASS) == 0)
        c.version = 3;
    const bool v2 = c.version == 2, v3 = c.version == 3;
    static const int64_t axes1[] = {16, 56, 56}, axes2[] = {32, 32, 32, 32};
    weft_status_t st;
    if ((st = weft_json_get_int(cfg, "patch_size", v3 ? 2 : 1, 1, v3 ? 2 : 1, origin,
                                &c.patch_size, err)) ||
        (st = weft_json_get_int(cfg, "in_channels", v2 ? 128 : 64, 1, BIG, origin,
                                &c.in_channels, err)) ||
        (st = weft_json_get_int(cfg, "out_channels", v3 ? 16 : c.in_channels, 1, BIG, origin,
                                &c.out_channels, err)) ||
        (st = weft_json_get_int(cfg, "num_layers", v2 ? 8 : v3 ? 60 : 19, 0, 4096, origin,
                                &c.num_layers, err)) ||
        (!v3 && (st = weft_json_get_int(cfg, "num_single_layers", v2 ? 48 : 38, 0, 4096, origin,
                                        &c.num_single_layers, err))) ||
        (st = weft_json_get_int(cfg, "attention_head_dim", 128, 2, 4096, origin,
                                &c.attention_head_dim, err)) ||
        (st = weft_json_get_int(cfg, "num_attention_heads", v2 ? 48 : 24, 1, 4096, origin,
                                &c.num_attention_heads, err)) ||
        (st = weft_json_get_int(cfg, "joint_attention_dim", v2 ? 15360 : v3 ? 3584 : 4096, 1, BIG,
                                origin, &c.joint_attention_dim, err)) ||
        (c.version == 1 && (st = weft_json_get_int(cfg, "pooled_projection_dim", 768, 1, BIG,
                                                   origin, &c.pooled_projection_dim, err))) ||
        (!v3 && (st = weft_json_get_bool(cfg, "guidance_embeds", v2, origin, &c.guidance_embeds,
                                         err))) ||
        (v3 && (st = parse_v3(cfg, origin, &c, err))) ||
        (st = weft_json_get_int_array(cfg, "axes_dims_rope", v2 ? axes2 : axes1, v2 ? 4 : 3,
                                      WEFT_FLUX_MAX_AXES, 0, 4096, origin, c.axes_dims_rope,
                                      &c.n_axes, err)))
        return st;
    c.inner_dim = c.attention_head_dim * c.num_attention_heads;
    if (c.inner_dim > BIG)
        return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                        "%s: %lld heads x %lld head_dim = %lld is too wide", origin,
                                        (long long)c.num_attention_heads,
                                        (long long)c.attention_head_dim, (long long)c.inner_dim);
    c.mlp_hidden_dim = 4 * c.inner_dim;
    c.time_proj_dim = WEFT_FLUX_TIME_PROJ_DIM;
    c.rope_theta = 10000.0;
    c.eps = 1e-6f;
    if (v2 && (st = parse_v2(cfg, origin, &c, err)) != WEFT_OK)
        return st;
    int64_t sum = 0;
    for (int i = 0; i < c.n_axes; i++) {
        if (c.axes_dims_rope[i] % 2)
            return weft_error_refuse_or_log(
                err, WEFT_ERR_FORMAT, "model",
                "%s: axes_dims_rope[%d] = %lld is odd; RoPE rotates pairs", origin, i,
                (long long)c.axes_dims_rope[i]);
        sum += c.axes_dims_rope[i];
    }
    /* one per column of the position ids the pipeline makes (Diffusers' FluxPosEmbed zips
     * them): FLUX.1's and Qwen-Image's 3, FLUX.2's 4 */
    if (c.n_axes != (v2 ? 4 : 3))
        return weft_error_refuse_or_log(
            err, WEFT_ERR_FORMAT, "model",
            "%s: axes_dims_rope has %d axes; %s's RoPE has %d, one per column of its position ids",
            origin, c.n_axes, v3 ? "Qwen-Image" : v2 ? "FLUX.2" : "FLUX.1", v2 ? 4 : 3);
    if (sum != c.attention_head_dim)
        return weft_error_refuse_or_log(
            err, WEFT_ERR_FORMAT, "model",
            "%s: axes_dims_rope sum to %lld but attention_head_dim is %lld", origin, (long long)sum,
            (long long)c.attention_head_dim);
    if (c.in_channels % 4 != 0)
        return weft_error_refuse_or_log(
            err, WEFT_ERR_FORMAT, "model",
            "%s: in_channels %lld is not 4 x latent channels (2x2 packing)", origin,
            (long long)c.in_channels);
    *out = c;
    return WEFT_OK;
}

const char *weft_flux_class(const struct weft_flux_config *c)
{
    return c->version == 2 ? WEFT_FLUX2_CLASS : c->version == 3 ? WEFT_QWEN_CLASS : WEFT_FLUX_CLASS;
}

/* Every FLUX.1 and Qwen-Image Linear has a bias, no FLUX.2 one does. */
static void copy_table(const struct weft_flux_config *c, const struct weft_flux_linear_desc *t,
                       int n, struct weft_flux_linear_desc *out)
{
    for (int i = 0; i < n; i++) {
        out[i] = t[i];
        out[i].bias = c->version != 2;
    }
}

static void set_blocks(struct weft_flux_linear_desc *l, int n, const int64_t *blocks)
{
    l->n_blocks = n;
    for (int i = 0; i < n; i++)
        l->blocks[i] = blocks[i];
}

void weft_flux_top_linears(const struct weft_flux_config *c,
                           struct weft_flux_linear_desc out[WEFT_FLUX_TOP_COUNT])
{
    const int64_t d = c->inner_dim, tp = c->time_proj_dim;
    const bool g = c->guidance_embeds, v1 = c->version == 1, v2 = c->version == 2;
    const struct weft_flux_linear_desc t1[WEFT_FLUX_TOP_COUNT] = {
        [WEFT_FLUX_X_EMBEDDER] = {"x_embedder", d, c->in_channels, true},
        [WEFT_FLUX_CONTEXT_EMBEDDER] = {"context_embedder", d, c->joint_attention_dim, true},
        [WEFT_FLUX_TIME_LIN1] = {"time_text_embed.timestep_embedder.linear_1", d, tp, true},
        [WEFT_FLUX_TIME_LIN2] = {"time_text_embed.timestep_embedder.linear_2", d, d, true},
        [WEFT_FLUX_GUIDANCE_LIN1] = {"time_text_embed.guidance_embedder.linear_1", d, tp, g},
        [WEFT_FLUX_GUIDANCE_LIN2] = {"time_text_embed.guidance_embedder.linear_2", d, d, g},
        [WEFT_FLUX_TEXT_LIN1] = {"time_text_embed.text_embedder.linear_1", d,
                                 c->pooled_projection_dim, v1},
        [WEFT_FLUX_TEXT_LIN2] = {"time_text_embed.text_embedder.linear_2", d, d, v1},
        [WEFT_FLUX_MOD_IMG] = {"double_stream_modulation_img.linear", 6 * d, d, v2},
        [WEFT_FLUX_MOD_TXT] = {"double_stream_modulation_txt.linear", 6 * d, d, v2},
        [WEFT_FLUX_MOD_SINGLE] = {"single_stream_modulation.linear", 3 * d, d, v2},
        [WEFT_FLUX_NORM_OUT] = {"norm_out.linear", 2 * d, d, true},
        [WEFT_FLUX_PROJ_OUT] = {"proj_out", c->out_channels, d, true},
    };
    copy_table(c, t1, WEFT_FLUX_TOP_COUNT, out);
    if (c->version == 3) { /* Qwen-Image's embedders */
        out[WEFT_FLUX_X_EMBEDDER].name = "img_in";
        out[WEFT_FLUX_CONTEXT_EMBEDDER].name = "txt_in";
    }
    if (v2) {
        out[WEFT_FLUX_TIME_LIN1].name = "time_guidance_embed.timestep_embedder.linear_1";
        out[WEFT_FLUX_TIME_LIN2].name = "time_guidance_embed.timestep_embedder.linear_2";
        out[WEFT_FLUX_GUIDANCE_LIN1].name = "time_guidance_embed.guidance_embedder.linear_1";
        out[WEFT_FLUX_GUIDANCE_LIN2].name = "time_guidance_embed.guidance_embedder.linear_2";
    }
}

void weft_flux_double_linears(const struct weft_flux_config *c,
                              struct weft_flux_linear_desc out[WEFT_FLUX_DOUBLE_COUNT])
{
    const int64_t d = c->inner_dim, mlp = c->mlp_hidden_dim;
    const bool v1 = c->version != 2; /* Qwen-Image's blocks are FLUX.1's, renamed */
    /* FLUX.2's feed-forward input is the gate and value projections in one: two blocks */
    const int64_t ff_in = v1 ? mlp : 2 * mlp;
    const struct weft_flux_linear_desc t[WEFT_FLUX_DOUBLE_COUNT] = {
        [WEFT_FLUX_D_NORM1] = {"norm1.linear", 6 * d, d, v1},
        [WEFT_FLUX_D_NORM1_CONTEXT] = {"norm1_context.linear", 6 * d, d, v1},
        [WEFT_FLUX_D_TO_Q] = {"attn.to_q", d, d, true, WEFT_TP_ROLE_SPLIT_OUT},
        [WEFT_FLUX_D_TO_K] = {"attn.to_k", d, d, true, WEFT_TP_ROLE_SPLIT_OUT},
        [WEFT_FLUX_D_TO_V] = {"attn.to_v", d, d, true, WEFT_TP_ROLE_SPLIT_OUT},
        [WEFT_FLUX_D_TO_OUT] = {"attn.to_out.0", d, d, true, WEFT_TP_ROLE_SPLIT_IN},
        [WEFT_FLUX_D_ADD_Q] = {"attn.add_q_proj", d, d, true, WEFT_TP_ROLE_SPLIT_OUT},
        [WEFT_FLUX_D_ADD_K] = {"attn.add_k_proj", d, d, true, WEFT_TP_ROLE_SPLIT_OUT},
        [WEFT_FLUX_D_ADD_V] = {"attn.add_v_proj", d, d, true, WEFT_TP_ROLE_SPLIT_OUT},
        [WEFT_FLUX_D_TO_ADD_OUT] = {"attn.to_add_out", d, d, true, WEFT_TP_ROLE_SPLIT_IN},
        [WEFT_FLUX_D_FF_IN] = {v1 ? "ff.net.0.proj" : "ff.linear_in", ff_in, d, true,
                               WEFT_TP_ROLE_SPLIT_OUT},
        [WEFT_FLUX_D_FF_OUT] = {v1 ? "ff.net.2" : "ff.linear_out", d, mlp, true,
                                WEFT_TP_ROLE_SPLIT_IN},
        [WEFT_FLUX_D_FF_CONTEXT_IN] = {v1 ? "ff_context.net.0.proj" : "ff_context.linear_in",
                                       ff_in, d, true, WEFT_TP_ROLE_SPLIT_OUT},
        [WEFT_FLUX_D_FF_CONTEXT_OUT] = {v1 ? "ff_context.net.2" : "ff_context.linear_out", d, mlp,
                                        true, WEFT_TP_ROLE_SPLIT_IN},
    };
    copy_table(c, t, WEFT_FLUX_DOUBLE_COUNT, out);
    if (c->version == 3) {
        static const char *const qwen[WEFT_FLUX_DOUBLE_COUNT] = {
            [WEFT_FLUX_D_NORM1] = "img_mod.1",
            [WEFT_FLUX_D_NORM1_CONTEXT] = "txt_mod.1",
            [WEFT_FLUX_D_FF_IN] = "img_mlp.net.0.proj",
            [WEFT_FLUX_D_FF_OUT] = "img_mlp.net.2",
            [WEFT_FLUX_D_FF_CONTEXT_IN] = "txt_mlp.net.0.proj",
            [WEFT_FLUX_D_FF_CONTEXT_OUT] = "txt_mlp.net.2",
        };
        for (int i = 0; i < WEFT_FLUX_DOUBLE_COUNT; i++)
            if (qwen[i])
                out[i].name = qwen[i];
    }
    if (!v1) {
        set_blocks(&out[WEFT_FLUX_D_FF_IN], 2, (const int64_t[]){mlp, mlp});
        set_blocks(&out[WEFT_FLUX_D_FF_CONTEXT_IN], 2, (const int64_t[]){mlp, mlp});
    }
}

void weft_flux_single_linears(const struct weft_flux_config *c,
                              struct weft_flux_linear_desc out[WEFT_FLUX_SINGLE_COUNT])
{
    const int64_t d = c->inner_dim, mlp = c->mlp_hidden_dim;
    const bool v1 = c->version != 2, v2 = c->version == 2; /* Qwen-Image has none */
    const struct weft_flux_linear_desc t[WEFT_FLUX_SINGLE_COUNT] = {
        [WEFT_FLUX_S_NORM] = {"norm.linear", 3 * d, d, v1},
        [WEFT_FLUX_S_TO_Q] = {"attn.to_q", d, d, v1, WEFT_TP_ROLE_SPLIT_OUT},
        [WEFT_FLUX_S_TO_K] = {"attn.to_k", d, d, v1, WEFT_TP_ROLE_SPLIT_OUT},
        [WEFT_FLUX_S_TO_V] = {"attn.to_v", d, d, v1, WEFT_TP_ROLE_SPLIT_OUT},
        [WEFT_FLUX_S_PROJ_MLP] = {"proj_mlp", mlp, d, v1, WEFT_TP_ROLE_SPLIT_OUT},
        /* Q | K | V | gate | value */
        [WEFT_FLUX_S_QKV_MLP] = {"attn.to_qkv_mlp_proj", 3 * d + 2 * mlp, d, v2,
                                 WEFT_TP_ROLE_SPLIT_OUT},
        /* attention output | MLP hidden states */
        [WEFT_FLUX_S_PROJ_OUT] = {v1 ? "proj_out" : "attn.to_out", d, d + mlp, true,
                                  WEFT_TP_ROLE_SPLIT_IN},
    };
    copy_table(c, t, WEFT_FLUX_SINGLE_COUNT, out);
    set_blocks(&out[WEFT_FLUX_S_QKV_MLP], 5, (const int64_t[]){d, d, d, mlp, mlp});
    set_blocks(&out[WEFT_FLUX_S_PROJ_OUT], 2, (const int64_t[]){d, mlp});
}

const char *weft_flux_qk_norm_name(enum weft_flux_qk_norm which)
{
    static const char *const names[WEFT_FLUX_QK_NORM_COUNT] = {
        "attn.norm_q", "attn.norm_k", "attn.norm_added_q", "attn.norm_added_k"};
    return names[which];
}

weft_status_t weft_flux_walk(const struct weft_flux_config *c,
                             const struct weft_flux_visitor *v, void *arg)
{
    struct weft_flux_linear_desc top[WEFT_FLUX_TOP_COUNT], dbl[WEFT_FLUX_DOUBLE_COUNT],
        sgl[WEFT_FLUX_SINGLE_COUNT];
    weft_flux_top_linears(c, top);
    weft_flux_double_linears(c, dbl);
    weft_flux_single_linears(c, sgl);
    weft_status_t st = WEFT_OK;
    for (int i = 0; i < WEFT_FLUX_TOP_COUNT && st == WEFT_OK; i++)
        st = v->linear(arg, WEFT_FLUX_PART_TOP, -1, i, "", &top[i]);
    if (c->version == 3 && st == WEFT_OK && v->norm) /* Qwen-Image's RMSNorm of the text input */
        st = v->norm(arg, WEFT_FLUX_PART_TOP, -1, 0, "", "txt_norm", c->joint_attention_dim);
    char prefix[64];
    for (int64_t b = 0; b < c->num_layers && st == WEFT_OK; b++) {
        snprintf(prefix, sizeof(prefix), "transformer_blocks.%lld.", (long long)b);
        for (int i = 0; i < WEFT_FLUX_DOUBLE_COUNT && st == WEFT_OK; i++)
            st = v->linear(arg, WEFT_FLUX_PART_DOUBLE, b, i, prefix, &dbl[i]);
        for (int i = 0; i < WEFT_FLUX_QK_NORM_COUNT && st == WEFT_OK && v->norm; i++)
            st = v->norm(arg, WEFT_FLUX_PART_DOUBLE, b, i, prefix,
                         weft_flux_qk_norm_name((enum weft_flux_qk_norm)i), c->attention_head_dim);
    }
    for (int64_t b = 0; b < c->num_single_layers && st == WEFT_OK; b++) {
        snprintf(prefix, sizeof(prefix), "single_transformer_blocks.%lld.", (long long)b);
        for (int i = 0; i < WEFT_FLUX_SINGLE_COUNT && st == WEFT_OK; i++)
            st = v->linear(arg, WEFT_FLUX_PART_SINGLE, b, i, prefix, &sgl[i]);
        for (int i = 0; i < 2 && st == WEFT_OK && v->norm; i++) /* norm_q, norm_k */
            st = v->norm(arg, WEFT_FLUX_PART_SINGLE, b, i, prefix,
                         weft_flux_qk_norm_name((enum weft_flux_qk_norm)i), c->attention_head_dim);
    }
    return st;
}

struct param_list {
    struct weft_param *p; /* NULL: count only */
    size_t n;
};

static weft_status_t param_linear(void *arg, enum weft_flux_part part, int64_t block, int index,
                                  const char *prefix, const struct weft_flux_linear_desc *l)
{
    (void)part, (void)block, (void)index;
    struct param_list *pl = arg;
    if (!l->present)
        return WEFT_OK;
    if (pl->p) {
        struct weft_param *w = &pl->p[pl->n];
        snprintf(w->name, sizeof(w->name), "%s%s.weight", prefix, l->name);
        w->ndim = 2;
        w->shape[0] = l->out;
        w->shape[1] = l->in;
        if (l->bias) {
            struct weft_param *bias = &pl->p[pl->n + 1];
            snprintf(bias->name, sizeof(bias->name), "%s%s.bias", prefix, l->name);
            bias->ndim = 1;
            bias->shape[0] = l->out;
        }
    }
    pl->n += l->bias ? 2 : 1;
    return WEFT_OK;
}

static weft_status_t param_norm(void *arg, enum weft_flux_part part, int64_t block, int index,
                                const char *prefix, const char *name, int64_t dim)
{
    (void)part, (void)block, (void)index;
    struct param_list *pl = arg;
    if (pl->p) {
        snprintf(pl->p[pl->n].name, sizeof(pl->p[pl->n].name), "%s%s.weight", prefix, name);
        pl->p[pl->n].ndim = 1;
        pl->p[pl->n].shape[0] = dim;
    }
    pl->n++;
    return WEFT_OK;
}

size_t weft_flux_params(const struct weft_flux_config *c, struct weft_param *p)
{
    struct param_list pl = {p, 0};
    static const struct weft_flux_visitor v = {param_linear, param_norm};
    (void)weft_flux_walk(c, &v, &pl);
    return pl.n;
}

static int param_cmp(const void *a, const void *b)
{
    return strcmp(((const struct weft_param *)a)->name, ((const struct weft_param *)b)->name);
}

weft_status_t weft_flux_check_params(const struct weft_flux_config *c, const struct weft_ckpt *ck,
                                     struct weft_error *err)
{
    const size_t n = weft_flux_params(c, NULL);
    struct weft_param *p = weft_calloc(n + 1, sizeof(*p));
    if (!p)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    weft_flux_params(c, p);
    weft_status_t st = WEFT_OK;
    for (size_t i = 0; i < n && st == WEFT_OK; i++) {
        const struct weft_ckpt_tensor *t = weft_ckpt_find(ck, p[i].name);
        if (!t) {
            st = weft_error_refuse(err, WEFT_ERR_FORMAT,
                                   "%s: missing tensor '%s' (required by the config)",
                                   weft_ckpt_dir(ck), p[i].name);
        } else if (t->info->ndim != p[i].ndim || t->info->shape[0] != p[i].shape[0] ||
                   (p[i].ndim == 2 && t->info->shape[1] != p[i].shape[1])) {
            char got[128], want[128];
            st = weft_error_refuse(
                err, WEFT_ERR_FORMAT, "%s: tensor '%s' has shape %s but the config implies %s",
                weft_ckpt_dir(ck), p[i].name,
                weft_shape_str(t->info->ndim, t->info->shape, got, sizeof(got)),
                weft_shape_str(p[i].ndim, p[i].shape, want, sizeof(want)));
        }
    }
    if (st == WEFT_OK && weft_ckpt_count(ck) != n) { /* name the first nobody asked for */
        qsort(p, n, sizeof(*p), param_cmp);
        for (size_t i = 0; i < weft_ckpt_count(ck) && st == WEFT_OK; i++) {
            struct weft_param key;
            snprintf(key.name, sizeof(key.name), "%s", weft_ckpt_at(ck, i)->info->name);
            if (!bsearch(&key, p, n, sizeof(*p), param_cmp))
                st = weft_error_refuse(err, WEFT_ERR_FORMAT,
                                       "%s: unexpected tensor '%s': not a parameter of %s with "
                                       "this config",
                                       weft_ckpt_dir(ck), key.name, weft_flux_class(c));
        }
    }
    weft_free(p);
    return st;
}

uint64_t weft_flux_held_bytes(const struct weft_flux_config *c, const struct weft_ckpt *ck)
{
    const size_t n = weft_flux_params(c, NULL);
    struct weft_param *p = weft_calloc(n + 1, sizeof(*p));
    uint64_t bytes = 0;
    if (p)
        weft_flux_params(c, p);
    for (size_t i = 0; p && i < n; i++) {
        const int64_t numel = p[i].shape[0] * (p[i].ndim == 2 ? p[i].shape[1] : 1);
        bytes += weft_ckpt_held_bytes(ck, p[i].name, p[i].ndim, numel);
    }
    weft_free(p);
    return bytes;
}

static const char *role_needs(enum weft_tp_role role)
{
    switch (role) {
    case WEFT_TP_ROLE_SPLIT_OUT:
        return "colwise or packed_colwise: its output feeds this rank's heads or MLP features";
    case WEFT_TP_ROLE_SPLIT_IN:
        return "rowwise or packed_rowwise: its input is this rank's heads or MLP features";
    default:
        return "replicated or rowwise_split_input: its input and output are replicated";
    }
}

static bool role_allows(enum weft_tp_role role, enum weft_tp_style style, int degree)
{
    if (degree == 1)
        return true;
    switch (role) {
    case WEFT_TP_ROLE_SPLIT_OUT:
        return style == WEFT_TP_COLWISE || style == WEFT_TP_PACKED_COLWISE;
    case WEFT_TP_ROLE_SPLIT_IN:
        return style == WEFT_TP_ROWWISE || style == WEFT_TP_PACKED_ROWWISE;
    default:
        return style == WEFT_TP_REPLICATE || style == WEFT_TP_ROWWISE_SPLIT_INPUT;
    }
}

static weft_status_t check_linear(const struct weft_flux_config *c,
                                  const struct weft_tp_layout *lay, const char *prefix,
                                  const struct weft_flux_linear_desc *l, struct weft_error *err)
{
    if (!l->present)
        return WEFT_OK;
    char name[160];
    snprintf(name, sizeof(name), "%s%s.weight", prefix, l->name);
    const struct weft_tp_shard *s = weft_tp_find(lay, name);
    enum weft_tp_style style = s ? s->style : WEFT_TP_REPLICATE;
    if (!role_allows(l->role, style, lay->degree))
        return weft_error_refuse_or_log(
            err, WEFT_ERR_CONFIG, "plan",
            "%s%s: style %s does not fit %s's dataflow; it must be %s", prefix, l->name,
            weft_tp_style_name(style), weft_flux_class(c), role_needs(l->role));
    if (lay->degree == 1 || l->n_blocks == 0)
        return WEFT_OK;
    /* a fused layer: the packed style over exactly its blocks, or each rank's slice mixes them */
    bool same = (style == WEFT_TP_PACKED_COLWISE || style == WEFT_TP_PACKED_ROWWISE) &&
                s->n_blocks == l->n_blocks;
    for (int i = 0; same && i < l->n_blocks; i++)
        same = s->blocks[i] == l->blocks[i];
    if (same)
        return WEFT_OK;
    char want[96] = "";
    size_t len = 0;
    for (int i = 0; i < l->n_blocks && len < sizeof(want); i++)
        len += (size_t)snprintf(want + len, sizeof(want) - len, "%s%lld", i ? ", " : "",
                                (long long)l->blocks[i]);
    return weft_error_refuse_or_log(
        err, WEFT_ERR_CONFIG, "plan",
        "%s%s fuses blocks [%s]: style %s mixes them in each rank's slice; it must be %s over "
        "those blocks", prefix, l->name, want, weft_tp_style_name(style),
        l->role == WEFT_TP_ROLE_SPLIT_OUT ? "packed_colwise" : "packed_rowwise");
}

struct tp_check {
    const struct weft_flux_config *c;
    const struct weft_tp_layout *lay;
    struct weft_error *err;
};

static weft_status_t check_visit(void *arg, enum weft_flux_part part, int64_t block, int index,
                                 const char *prefix, const struct weft_flux_linear_desc *desc)
{
    (void)part, (void)block, (void)index;
    const struct tp_check *tc = arg;
    return check_linear(tc->c, tc->lay, prefix, desc, tc->err);
}

weft_status_t weft_flux_tp_check(const struct weft_flux_config *c, const struct weft_tp_layout *lay,
                                 struct weft_error *err)
{
    static const struct weft_flux_visitor v = {check_visit, NULL};
    struct tp_check tc = {c, lay, err};
    return weft_flux_walk(c, &v, &tc);
}

int weft_flux_unit_count(const struct weft_flux_config *c)
{
    return (int)(c->num_layers + c->num_single_layers) + 2;
}

int weft_flux_param_unit(const struct weft_flux_config *c, const char *name)
{
    static const char *const head[] = {"x_embedder.",
                                       "img_in.",
                                       "txt_in.",
                                       "txt_norm.",
                                       "context_embedder.",
                                       "time_text_embed.",
                                       "time_guidance_embed.",
                                       "double_stream_modulation_img.",
                                       "double_stream_modulation_txt.",
                                       "single_stream_modulation."};
    static const char *const tail[] = {"norm_out.", "proj_out."};
    for (size_t i = 0; i < sizeof(head) / sizeof(head[0]); i++)
        if (strncmp(name, head[i], strlen(head[i])) == 0)
            return 0;
    for (size_t i = 0; i < sizeof(tail) / sizeof(tail[0]); i++)
        if (strncmp(name, tail[i], strlen(tail[i])) == 0)
            return weft_flux_unit_count(c) - 1;
    static const char *const blocks[] = {"transformer_blocks.", "single_transformer_blocks."};
    for (int k = 0; k < 2; k++) {
        size_t len = strlen(blocks[k]);
        if (strncmp(name, blocks[k], len) != 0)
            continue;
        char *end;
        long long i = strtoll(name + len, &end, 10);
        int64_t n = k == 0 ? c->num_layers : c->num_single_layers;
        if (end == name + len || *end != '.' || i < 0 || i >= n)
            return -1;
        return (int)(1 + (k == 0 ? 0 : c->num_layers) + i);
    }
    return -1;
}

void weft_flux_unit_name(const struct weft_flux_config *c, int unit, char *buf, size_t len)
{
    const int64_t L = c->num_layers;
    if (unit == 0)
        snprintf(buf, len, "embedders");
    else if (unit == weft_flux_unit_count(c) - 1)
        snprintf(buf, len, "output");
    else if (unit <= L)
        snprintf(buf, len, "transformer_blocks.%d", unit - 1);
    else
        snprintf(buf, len, "single_transformer_blocks.%lld", (long long)(unit - 1 - L));
}

size_t weft_flux_act_sizes(const struct weft_flux_config *c, int tp, bool cp, int64_t batch,
                           int64_t ni, int64_t nt, int64_t s_img,
                           int64_t sizes[WEFT_FLUX_ACT_BUFFERS])
{
    const int64_t B = batch, S = ni + nt, D = c->inner_dim, hd = c->attention_head_dim;
    const int64_t Dl = c->num_attention_heads / tp * hd, mlpl = c->mlp_hidden_dim / tp;
    const bool v2 = c->version == 2;
    /* FLUX.1: Q, K and V live in cat's MLP columns (stride Dl + mlpl) when they fit there:
     * each block's MLP hidden states are made after its attention (the single block's from xn,
     * which attention leaves alone), so the two never coexist. FLUX's 4x MLP always fits.
     * FLUX.2: one buffer of rows Q | K | V | gate | value (the single block's fused projection
     * writes it whole; the double block's Q, K, V and then its feed-forward input use it). */
    const int64_t nqkv = v2 ? 0 : mlpl >= 3 * Dl ? 0 : B * S * Dl;
    const int64_t nq = v2 ? B * S * (3 * Dl + 2 * mlpl) : nqkv;
    const int64_t s[WEFT_FLUX_ACT_BUFFERS] = {
        B * S * D,  B * S * D,  nq,             nqkv,           nqkv,
        B * S * (Dl + mlpl),    B * S * D,      S * hd,         S * hd,
        B * ni * c->in_channels,                B * nt * c->joint_attention_dim,
        B * s_img * c->out_channels,            B * D,          B * D,          B * D,
        B * c->time_proj_dim,                   B * 6 * D,      B * 6 * D,
        4 * B + B * c->pooled_projection_dim,   cp ? B * ni * c->out_channels : 0,
        v2 ? B * 3 * D : 0,
    };
    size_t floats = 0;
    for (int i = 0; i < WEFT_FLUX_ACT_BUFFERS; i++) {
        if (sizes)
            sizes[i] = s[i];
        floats += ((size_t)s[i] + 15) / 16 * 16;
    }
    return floats * sizeof(float);
}

/* How many rows a layer's input has in one forward pass: the image's tokens, the text's, both
 * (single blocks), or one vector a sample (the modulation and embedding layers). */
static double linear_flops(const struct weft_flux_linear_desc *d, int64_t rows)
{
    return d->present ? 2.0 * (double)rows * (double)d->in * (double)d->out : 0.0;
}

double weft_flux_flops(const struct weft_flux_config *c, int64_t s_img, int64_t s_txt)
{
    struct weft_flux_linear_desc top[WEFT_FLUX_TOP_COUNT], dbl[WEFT_FLUX_DOUBLE_COUNT],
        sgl[WEFT_FLUX_SINGLE_COUNT];
    weft_flux_top_linears(c, top);
    weft_flux_double_linears(c, dbl);
    weft_flux_single_linears(c, sgl);
    const int64_t S = s_img + s_txt;
    double f = 0;
    for (int i = 0; i < WEFT_FLUX_TOP_COUNT; i++)
        f += linear_flops(&top[i], i == WEFT_FLUX_X_EMBEDDER || i == WEFT_FLUX_PROJ_OUT ? s_img
                                   : i == WEFT_FLUX_CONTEXT_EMBEDDER              ? s_txt
                                                                                  : 1);
    double block = 0;
    for (int i = 0; i < WEFT_FLUX_DOUBLE_COUNT; i++) {
        const bool txt = i == WEFT_FLUX_D_ADD_Q || i == WEFT_FLUX_D_ADD_K ||
                         i == WEFT_FLUX_D_ADD_V || i == WEFT_FLUX_D_TO_ADD_OUT ||
                         i == WEFT_FLUX_D_FF_CONTEXT_IN || i == WEFT_FLUX_D_FF_CONTEXT_OUT;
        const bool vec = i == WEFT_FLUX_D_NORM1 || i == WEFT_FLUX_D_NORM1_CONTEXT;
        block += linear_flops(&dbl[i], vec ? 1 : txt ? s_txt : s_img);
    }
    /* joint attention: Q K^T and the weighted sum of V, S x S x inner multiply-adds each */
    const double attn = 4.0 * (double)S * (double)S * (double)c->inner_dim;
    f += (double)c->num_layers * (block + attn);
    block = 0;
    for (int i = 0; i < WEFT_FLUX_SINGLE_COUNT; i++)
        block += linear_flops(&sgl[i], i == WEFT_FLUX_S_NORM ? 1 : S);
    f += (double)c->num_single_layers * (block + attn);
    return f;
}
