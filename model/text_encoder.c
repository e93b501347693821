/* CLIPTextModel and T5EncoderModel descriptions (see text_encoder.h). */
#include "model/text_encoder.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "model/checkpoint.h"
#include "model/json_get.h"
#include "model/plan.h"

static weft_status_t want_string(const cJSON *cfg, const char *key, const char *def,
                                 const char *const *ok, const char *origin,
                                 struct weft_error *err)
{
    const char *v;
    weft_status_t st = weft_json_get_string(cfg, key, def, origin, &v, err);
    if (st != WEFT_OK)
        return st;
    for (; *ok; ok++)
        if (strcmp(v, *ok) == 0)
            return WEFT_OK;
    return weft_error_refuse_or_log(err, WEFT_ERR_UNSUPPORTED, "model",
                                    "%s: %s \"%s\" is not supported (weft runs \"%s\")", origin,
                                    key, v, def);
}

weft_status_t weft_tokenizer_max_length(const cJSON *config, bool clip, const char *origin,
                                        int64_t *out, struct weft_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(config, "model_max_length");
    *out = clip ? 77 : 512;
    if (!v || cJSON_IsNull(v))
        return WEFT_OK;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 1))
        return weft_error_refuse(err, WEFT_ERR_FORMAT, "%s: model_max_length is not a positive "
                                 "number", origin);
    *out = v->valuedouble > WEFT_TOKENIZER_MAX_LEN ? WEFT_TOKENIZER_MAX_LEN
                                                    : (int64_t)v->valuedouble;
    return WEFT_OK;
}

weft_status_t weft_clip_text_config_parse(const cJSON *cfg, const char *origin,
                                          struct weft_clip_text_config *out,
                                          struct weft_error *err)
{
    struct weft_clip_text_config c = {0};
    static const char *const acts[] = {"quick_gelu", NULL};
    weft_status_t st;
    const int64_t W = WEFT_TEXT_MAX_WIDTH;
    if ((st = weft_json_get_int(cfg, "vocab_size", 49408, 1, 1 << 24, origin, &c.vocab_size,
                                err)) ||
        (st = weft_json_get_int(cfg, "hidden_size", 512, 1, W, origin, &c.hidden_size, err)) ||
        (st = weft_json_get_int(cfg, "intermediate_size", 2048, 1, 4 * W, origin,
                                &c.intermediate_size, err)) ||
        (st = weft_json_get_int(cfg, "num_hidden_layers", 12, 1, WEFT_TEXT_MAX_LAYERS, origin,
                                &c.num_hidden_layers, err)) ||
        (st = weft_json_get_int(cfg, "num_attention_heads", 8, 1, 1024, origin,
                                &c.num_attention_heads, err)) ||
        (st = weft_json_get_int(cfg, "max_position_embeddings", 77, 1, 4096, origin,
                                &c.max_position_embeddings, err)) ||
        (st = weft_json_get_int(cfg, "eos_token_id", 49407, 0, 1 << 24, origin, &c.eos_token_id,
                                err)) ||
        (st = weft_json_get_double(cfg, "layer_norm_eps", 1e-5, 0.0, 1.0, origin,
                                   &c.layer_norm_eps, err)) ||
        (st = want_string(cfg, "hidden_act", "quick_gelu", acts, origin, err)))
        return st;
    if (c.hidden_size % c.num_attention_heads)
        return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                        "%s: hidden_size %lld is not a multiple of "
                                        "num_attention_heads %lld", origin,
                                        (long long)c.hidden_size,
                                        (long long)c.num_attention_heads);
    c.head_dim = c.hidden_size / c.num_attention_heads;
    if (c.head_dim > 512)
        return weft_error_refuse_or_log(err, WEFT_ERR_UNSUPPORTED, "model",
                                        "%s: a head of %lld features is above the kernels' 512",
                                        origin, (long long)c.head_dim);
    *out = c;
    return WEFT_OK;
}

weft_status_t weft_t5_config_parse(const cJSON *cfg, const char *origin,
                                   struct weft_t5_config *out, struct weft_error *err)
{
    struct weft_t5_config c = {0};
    static const char *const ff[] = {"gated-gelu", NULL};
    static const char *const act[] = {"gelu_new", NULL};
    weft_status_t st;
    const int64_t W = WEFT_TEXT_MAX_WIDTH;
    if ((st = weft_json_get_int(cfg, "vocab_size", 32128, 1, 1 << 24, origin, &c.vocab_size,
                                err)) ||
        (st = weft_json_get_int(cfg, "d_model", 512, 1, W, origin, &c.d_model, err)) ||
        (st = weft_json_get_int(cfg, "d_kv", 64, 1, 512, origin, &c.d_kv, err)) ||
        (st = weft_json_get_int(cfg, "d_ff", 2048, 1, 4 * W, origin, &c.d_ff, err)) ||
        (st = weft_json_get_int(cfg, "num_layers", 6, 1, WEFT_TEXT_MAX_LAYERS, origin,
                                &c.num_layers, err)) ||
        (st = weft_json_get_int(cfg, "num_heads", 8, 1, 1024, origin, &c.num_heads, err)) ||
        (st = weft_json_get_int(cfg, "relative_attention_num_buckets", 32, 2, 4096, origin,
                                &c.num_buckets, err)) ||
        (st = weft_json_get_int(cfg, "relative_attention_max_distance", 128, 1, 1 << 20, origin,
                                &c.max_distance, err)) ||
        (st = weft_json_get_double(cfg, "layer_norm_epsilon", 1e-6, 0.0, 1.0, origin,
                                   &c.layer_norm_epsilon, err)) ||
        (st = want_string(cfg, "feed_forward_proj", "gated-gelu", ff, origin, err)))
        return st;
    /* transformers derives dense_act_fn from feed_forward_proj ("gated-gelu": gelu_new) */
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(cfg, "dense_act_fn");
    if (a && (st = want_string(cfg, "dense_act_fn", "gelu_new", act, origin, err)) != WEFT_OK)
        return st;
    if (c.num_buckets / 2 / 2 < 1 || c.max_distance <= c.num_buckets / 4)
        return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                        "%s: relative_attention_max_distance %lld must exceed a "
                                        "quarter of relative_attention_num_buckets %lld",
                                        origin, (long long)c.max_distance,
                                        (long long)c.num_buckets);
    c.inner = c.num_heads * c.d_kv;
    if (c.inner > 4 * W)
        return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                        "%s: num_heads x d_kv is too wide", origin);
    *out = c;
    return WEFT_OK;
}

/* ---------------------------------------------------------------------------------------- */

struct emit {
    struct weft_text_param *p;
    size_t n;
};

static void put(struct emit *e, int layer, int ndim, int64_t d0, int64_t d1, const char *fmt,
                ...) __attribute__((format(printf, 6, 7)));

static void put(struct emit *e, int layer, int ndim, int64_t d0, int64_t d1, const char *fmt,
                ...)
{
    if (e->p) {
        struct weft_text_param *p = &e->p[e->n];
        va_list ap;
        va_start(ap, fmt);
        /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): a false positive on glibc */
        vsnprintf(p->name, sizeof(p->name), fmt, ap);
        va_end(ap);
        p->ndim = ndim;
        p->shape[0] = d0;
        p->shape[1] = d1;
        p->layer = layer;
    }
    e->n++;
}

size_t weft_clip_text_params(const struct weft_clip_text_config *c, const char *prefix,
                             struct weft_text_param *params)
{
    struct emit e = {params, 0};
    const int64_t D = c->hidden_size, F = c->intermediate_size;
    put(&e, -1, 2, c->vocab_size, D, "%sembeddings.token_embedding.weight", prefix);
    put(&e, -1, 2, c->max_position_embeddings, D, "%sembeddings.position_embedding.weight",
        prefix);
    static const char *const proj[] = {"q_proj", "k_proj", "v_proj", "out_proj"};
    for (int l = 0; l < c->num_hidden_layers; l++) {
        const char *p = prefix;
        put(&e, l, 1, D, 0, "%sencoder.layers.%d.layer_norm1.weight", p, l);
        put(&e, l, 1, D, 0, "%sencoder.layers.%d.layer_norm1.bias", p, l);
        for (int k = 0; k < 4; k++) {
            put(&e, l, 2, D, D, "%sencoder.layers.%d.self_attn.%s.weight", p, l, proj[k]);
            put(&e, l, 1, D, 0, "%sencoder.layers.%d.self_attn.%s.bias", p, l, proj[k]);
        }
        put(&e, l, 1, D, 0, "%sencoder.layers.%d.layer_norm2.weight", p, l);
        put(&e, l, 1, D, 0, "%sencoder.layers.%d.layer_norm2.bias", p, l);
        put(&e, l, 2, F, D, "%sencoder.layers.%d.mlp.fc1.weight", p, l);
        put(&e, l, 1, F, 0, "%sencoder.layers.%d.mlp.fc1.bias", p, l);
        put(&e, l, 2, D, F, "%sencoder.layers.%d.mlp.fc2.weight", p, l);
        put(&e, l, 1, D, 0, "%sencoder.layers.%d.mlp.fc2.bias", p, l);
    }
    put(&e, -1, 1, D, 0, "%sfinal_layer_norm.weight", prefix);
    put(&e, -1, 1, D, 0, "%sfinal_layer_norm.bias", prefix);
    return e.n;
}

size_t weft_t5_params(const struct weft_t5_config *c, const char *embedding,
                      struct weft_text_param *params)
{
    struct emit e = {params, 0};
    const int64_t D = c->d_model, I = c->inner, F = c->d_ff;
    put(&e, -1, 2, c->vocab_size, D, "%s", embedding);
    static const char *const qkvo[] = {"q", "k", "v", "o"};
    for (int l = 0; l < c->num_layers; l++) {
        const char *b = "encoder.block";
        put(&e, l, 1, D, 0, "%s.%d.layer.0.layer_norm.weight", b, l);
        for (int k = 0; k < 4; k++)
            put(&e, l, 2, k == 3 ? D : I, k == 3 ? I : D, "%s.%d.layer.0.SelfAttention.%s.weight",
                b, l, qkvo[k]);
        if (l == 0)
            put(&e, l, 2, c->num_buckets, c->num_heads,
                "%s.0.layer.0.SelfAttention.relative_attention_bias.weight", b);
        put(&e, l, 1, D, 0, "%s.%d.layer.1.layer_norm.weight", b, l);
        put(&e, l, 2, F, D, "%s.%d.layer.1.DenseReluDense.wi_0.weight", b, l);
        put(&e, l, 2, F, D, "%s.%d.layer.1.DenseReluDense.wi_1.weight", b, l);
        put(&e, l, 2, D, F, "%s.%d.layer.1.DenseReluDense.wo.weight", b, l);
    }
    put(&e, -1, 1, D, 0, "encoder.final_layer_norm.weight");
    return e.n;
}

const char *weft_clip_text_prefix(const struct weft_ckpt *ck)
{
    return weft_ckpt_find(ck, "text_model.final_layer_norm.weight") ? "text_model." : "";
}

const char *weft_t5_embedding_key(const struct weft_ckpt *ck)
{
    return weft_ckpt_find(ck, "shared.weight") || !weft_ckpt_find(ck, "encoder.embed_tokens.weight")
               ? "shared.weight"
               : "encoder.embed_tokens.weight";
}

bool weft_text_param_ignorable(const char *name)
{
    return strcmp(name, "text_model.embeddings.position_ids") == 0 ||
           strcmp(name, "embeddings.position_ids") == 0 ||
           strcmp(name, "encoder.embed_tokens.weight") == 0 || strcmp(name, "shared.weight") == 0;
}

/* CLIP's position table and T5's relative position table: host tables the worker holds in
 * f32 whatever the stored dtype (only the token embedding stays as stored). */
static bool host_f32_table(const char *name)
{
    const size_t n = strlen(name);
    static const char *const ends[] = {"position_embedding.weight",
                                       "relative_attention_bias.weight"};
    for (size_t k = 0; k < 2; k++) {
        const size_t e = strlen(ends[k]);
        if (n >= e && strcmp(name + n - e, ends[k]) == 0)
            return true;
    }
    return false;
}

static uint64_t held(const struct weft_text_param *p, size_t n, const struct weft_ckpt *ck)
{
    uint64_t b = 0;
    for (size_t i = 0; i < n; i++) {
        const int64_t numel = p[i].shape[0] * (p[i].ndim == 2 ? p[i].shape[1] : 1);
        b += host_f32_table(p[i].name) ? (uint64_t)numel * sizeof(float)
                                       : weft_ckpt_held_bytes(ck, p[i].name, p[i].ndim, numel);
    }
    return b;
}

uint64_t weft_clip_text_held_bytes(const struct weft_clip_text_config *c,
                                   const struct weft_ckpt *ck)
{
    const char *prefix = ck ? weft_clip_text_prefix(ck) : "";
    size_t n = weft_clip_text_params(c, prefix, NULL);
    struct weft_text_param *p = weft_calloc(n, sizeof(*p));
    if (!p)
        return 0;
    weft_clip_text_params(c, prefix, p);
    uint64_t b = held(p, n, ck);
    weft_free(p);
    return b;
}

uint64_t weft_t5_held_bytes(const struct weft_t5_config *c, const struct weft_ckpt *ck)
{
    const char *emb = ck ? weft_t5_embedding_key(ck) : "shared.weight";
    size_t n = weft_t5_params(c, emb, NULL);
    struct weft_text_param *p = weft_calloc(n, sizeof(*p));
    if (!p)
        return 0;
    weft_t5_params(c, emb, p);
    uint64_t b = held(p, n, ck);
    weft_free(p);
    return b;
}

bool weft_t5_tp_fits(const struct weft_t5_config *c, int tp)
{
    return tp >= 1 && c->num_heads % tp == 0 && c->d_ff % tp == 0;
}

weft_status_t weft_t5_tp_resolve(const struct weft_t5_config *c, const struct weft_ckpt *ck,
                                 int tp, struct weft_tp_layout **layout_p,
                                 struct weft_error *err)
{
    if (!weft_t5_tp_fits(c, tp))
        return weft_error_refuse_or_log(err, WEFT_ERR_CONFIG, "text",
                                        "T5: tp_degree %d does not divide num_heads %lld and "
                                        "d_ff %lld", tp, (long long)c->num_heads,
                                        (long long)c->d_ff);
    struct weft_tp_plan plan;
    weft_tp_plan_builtin(WEFT_T5_ENCODER_CLASS, &plan);
    const struct weft_model_info info = {.class_name = WEFT_T5_ENCODER_CLASS,
                                         .heads = c->num_heads, .head_dim = c->d_kv};
    return weft_tp_resolve(&plan, ck, &info, tp, tp, layout_p, err);
}

uint64_t weft_t5_held_bytes_tp(const struct weft_t5_config *c, const struct weft_ckpt *ck,
                               int tp)
{
    const uint64_t whole = weft_t5_held_bytes(c, ck);
    struct weft_tp_layout *lay = NULL;
    if (tp <= 1 || !ck || weft_t5_tp_resolve(c, ck, tp, &lay, &(struct weft_error){0}) != WEFT_OK ||
        !lay)
        return whole;
    const uint64_t planned = lay->planned_bytes;
    weft_tp_layout_destroy(lay);
    return whole - planned + planned / (uint64_t)tp;
}

int64_t weft_t5_bucket(int64_t rel, int64_t num_buckets, int64_t max_distance)
{
    int64_t b = 0, nb = num_buckets / 2;
    if (rel > 0)
        b += nb;
    const int64_t r = rel < 0 ? -rel : rel, max_exact = nb / 2;
    if (r < max_exact)
        return b + r;
    /* torch: (log(r.float() / max_exact) / math.log(max_distance / max_exact)
     * * (num_buckets - max_exact)).to(long), each operation in f32 */
    const float lr = logf((float)r / (float)max_exact);
    const float v = lr / (float)log((double)max_distance / (double)max_exact) *
                    (float)(nb - max_exact);
    int64_t large = max_exact + (int64_t)v;
    if (large > nb - 1)
        large = nb - 1;
    return b + large;
}
