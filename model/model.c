/* The model description and the layout rules (see model.h). */
#include "model/model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/files.h"
#include "model/checkpoint.h"
#include "model/plan.h"


static uint64_t file_bytes(const struct weft_ckpt *ck)
{
    uint64_t n = 0;
    for (size_t i = 0; i < weft_ckpt_file_count(ck); i++)
        n += weft_st_file_size(weft_ckpt_file_at(ck, i));
    return n;
}

/* A component folder whose config.json names the class model_index.json gave. */
static weft_status_t open_component(const char *dir, const char *want, struct weft_ckpt **ck_p,
                                    struct weft_error *err)
{
    weft_status_t st = weft_ckpt_open(dir, ck_p, err);
    if (st != WEFT_OK)
        return st;
    if (strcmp(weft_ckpt_class(*ck_p), want) != 0) {
        weft_error_refuse(err, WEFT_ERR_UNSUPPORTED,
                          "%s/config.json: _class_name is '%s'; %s expected", dir,
                          weft_ckpt_class(*ck_p), want);
        weft_ckpt_close(*ck_p);
        return WEFT_ERR_UNSUPPORTED;
    }
    return WEFT_OK;
}

/* The pipelines weft runs: the classes model_index.json must name for their transformer and
 * VAE, and whether weft encodes their text (FLUX.2's and Qwen-Image's encoders, Mistral and
 * Qwen2.5-VL language models, are not weft's: their text comes as embeddings). */
static const struct pipeline_kind {
    const char *pipeline, *transformer, *vae;
    bool native_text;
} pipelines[] = {
    {WEFT_FLUX_PIPELINE_CLASS, WEFT_FLUX_CLASS, WEFT_VAE_CLASS, true},
    {WEFT_FLUX2_PIPELINE_CLASS, WEFT_FLUX2_CLASS, WEFT_VAE2_CLASS, false},
    {WEFT_QWEN_PIPELINE_CLASS, WEFT_QWEN_CLASS, WEFT_VAE3_CLASS, false},
};

/* The kind of a pipeline class; NULL for one weft does not run. */
static const struct pipeline_kind *pipeline_kind_of(const char *pipeline_class)
{
    for (size_t i = 0; i < sizeof(pipelines) / sizeof(pipelines[0]); i++)
        if (strcmp(pipeline_class, pipelines[i].pipeline) == 0)
            return &pipelines[i];
    return NULL;
}

/* The transformer's channels: multiples of 4 (latents packed 2 x 2), its output those of its
 * input (a velocity of the latents). */
static weft_status_t transformer_channels(const struct weft_model *m, struct weft_error *err)
{
    const struct weft_flux_config *f = &m->flux;
    if (f->in_channels % 4 || f->out_channels % 4)
        return weft_error_refuse(err, WEFT_ERR_FORMAT,
                                 "%s/config.json: in_channels %lld and out_channels %lld must be "
                                 "multiples of 4 (latents are packed 2 x 2)", m->transformer_dir,
                                 (long long)f->in_channels, (long long)f->out_channels);
    if (f->in_channels != f->out_channels)
        return weft_error_refuse(err, WEFT_ERR_FORMAT,
                                 "%s/config.json: out_channels %lld differs from in_channels %lld "
                                 "(the denoiser's output is a velocity of the latents)",
                                 m->transformer_dir, (long long)f->out_channels,
                                 (long long)f->in_channels);
    return WEFT_OK;
}

/* The transformer: the class model_index.json names (a transformer folder alone: any of the
 * three). */
static weft_status_t open_transformer(struct weft_model *m, struct weft_error *err)
{
    struct weft_ckpt *ck;
    weft_status_t st = weft_ckpt_open(m->transformer_dir, &ck, err);
    if (st != WEFT_OK)
        return st;
    const struct pipeline_kind *kind = pipeline_kind_of(m->pipeline_class);
    const char *cls = weft_ckpt_class(ck), *want = kind ? kind->transformer : WEFT_FLUX_CLASS;
    const bool ok = m->pipeline ? strcmp(cls, want) == 0
                                : strcmp(cls, WEFT_FLUX_CLASS) == 0 ||
                                      strcmp(cls, WEFT_FLUX2_CLASS) == 0 ||
                                      strcmp(cls, WEFT_QWEN_CLASS) == 0;
    if (!ok) {
        weft_error_refuse(err, WEFT_ERR_UNSUPPORTED,
                          "%s/config.json: _class_name is '%s'; %s expected", m->transformer_dir,
                          cls, m->pipeline ? want
                                           : WEFT_FLUX_CLASS ", " WEFT_FLUX2_CLASS " or "
                                                             WEFT_QWEN_CLASS);
        weft_ckpt_close(ck);
        return WEFT_ERR_UNSUPPORTED;
    }
    char origin[WEFT_CONF_PATH + 32];
    snprintf(origin, sizeof(origin), "%s/config.json", m->transformer_dir);
    if ((st = weft_flux_config_parse(weft_ckpt_config(ck), origin, &m->flux, err)) == WEFT_OK &&
        (st = transformer_channels(m, err)) == WEFT_OK &&
        (st = weft_flux_check_params(&m->flux, ck, err)) == WEFT_OK)
        st = weft_model_info_get(ck, &m->info, err);
    m->transformer_file_bytes = file_bytes(ck);
    m->transformer_held_bytes = st == WEFT_OK ? weft_flux_held_bytes(&m->flux, ck) : 0;
    weft_ckpt_close(ck);
    return st;
}

static weft_status_t open_vae(struct weft_model *m, struct weft_error *err)
{
    struct weft_ckpt *ck;
    /* only a pipeline folder has a VAE, and it is a pipeline weft runs */
    weft_status_t st = open_component(m->vae_dir, pipeline_kind_of(m->pipeline_class)->vae, &ck,
                                      err);
    if (st != WEFT_OK)
        return st;
    char origin[WEFT_CONF_PATH + 32];
    snprintf(origin, sizeof(origin), "%s/config.json", m->vae_dir);
    st = weft_vae_config_parse(weft_ckpt_config(ck), origin, &m->vae, err);
    m->vae_file_bytes = file_bytes(ck);
    m->vae_held_bytes = st == WEFT_OK ? weft_vae_held_bytes(&m->vae, ck, WEFT_VAE_DECODER) : 0;
    weft_ckpt_close(ck);
    return st;
}

/* model_index.json entry `name`: the class expected there, or absent / [null, null] when
 * optional is set. *present_p says whether the component is there. */
static weft_status_t index_entry(const struct weft_pipe *pipe, const char *name,
                                 const char *library, const char *class_name, bool optional,
                                 bool *present_p, struct weft_error *err)
{
    const struct weft_pipe_component *c = weft_pipe_find(pipe, name);
    *present_p = c && c->class_name;
    if (!*present_p) {
        if (optional)
            return WEFT_OK;
        return weft_error_refuse(err, WEFT_ERR_FORMAT,
                                 "%s/model_index.json: no \"%s\" component (%s expected)",
                                 weft_pipe_dir(pipe), name, class_name);
    }
    if (strcmp(c->class_name, class_name) != 0 || strcmp(c->library, library) != 0)
        return weft_error_refuse(err, WEFT_ERR_UNSUPPORTED,
                                 "%s/model_index.json: \"%s\" is [\"%s\", \"%s\"]; weft runs "
                                 "[\"%s\", \"%s\"] there", weft_pipe_dir(pipe), name,
                                 c->library, c->class_name, library, class_name);
    return WEFT_OK;
}

/* A tokenizer folder: the files its class reads are there. */
static weft_status_t check_tokenizer(struct weft_model_text *t, const char *dir, const char *name,
                                     const char *cls, struct weft_error *err)
{
    snprintf(t->tokenizer_dir, sizeof(t->tokenizer_dir), "%s/%s", dir, name);
    snprintf(t->tokenizer_class, sizeof(t->tokenizer_class), "%s", cls);
    const bool clip = strncmp(cls, "CLIP", 4) == 0;
    const char *need[] = {clip ? "vocab.json" : "spiece.model", clip ? "merges.txt" : NULL};
    for (int k = 0; k < 2 && need[k]; k++) {
        char path[WEFT_CONF_PATH + 64];
        snprintf(path, sizeof(path), "%s/%s", t->tokenizer_dir, need[k]);
        const int fd = weft_files_open_regular(path); /* a FIFO would block open(2) */
        if (fd < 0 && errno == ENOENT)
            return weft_error_refuse(err, WEFT_ERR_NOT_FOUND,
                                     "%s: missing (model_index.json names %s for \"%s\"%s)", path,
                                     cls, name, clip ? "" : "; weft reads T5's spiece.model");
        if (fd < 0)
            return weft_error_refuse(err, WEFT_ERR_IO, "%s: %s", path,
                                     weft_files_open_error(errno));
        close(fd);
    }
    return WEFT_OK;
}

/* model_index.json's text components, each optional; each one there is checked. */
static weft_status_t text_entries(struct weft_model *m, const struct weft_pipe *pipe,
                                  struct weft_error *err)
{
    static const struct {
        const char *tok, *enc, *enc_class;
        const char *tok_classes[2];
    } e[2] = {{"tokenizer", "text_encoder", WEFT_CLIP_TEXT_CLASS,
               {"CLIPTokenizer", "CLIPTokenizerFast"}},
              {"tokenizer_2", "text_encoder_2", WEFT_T5_ENCODER_CLASS,
               {"T5TokenizerFast", "T5Tokenizer"}}};
    struct weft_model_text *t[2] = {&m->clip, &m->t5};
    weft_status_t st = WEFT_OK;
    for (int k = 0; k < 2 && st == WEFT_OK; k++) {
        const struct weft_pipe_component *c = weft_pipe_find(pipe, e[k].tok);
        if (c && c->class_name && strcmp(c->class_name, e[k].tok_classes[1]) == 0)
            st = index_entry(pipe, e[k].tok, "transformers", e[k].tok_classes[1], true,
                             &t[k]->tokenizer, err);
        else
            st = index_entry(pipe, e[k].tok, "transformers", e[k].tok_classes[0], true,
                             &t[k]->tokenizer, err);
        if (st == WEFT_OK && t[k]->tokenizer)
            st = check_tokenizer(t[k], m->dir, e[k].tok, weft_pipe_find(pipe, e[k].tok)->class_name,
                                 err);
        if (st == WEFT_OK)
            st = index_entry(pipe, e[k].enc, "transformers", e[k].enc_class, true,
                             &t[k]->encoder, err);
        if (st == WEFT_OK && t[k]->encoder)
            snprintf(t[k]->encoder_dir, sizeof(t[k]->encoder_dir), "%s/%s", m->dir, e[k].enc);
    }
    return st;
}

static weft_status_t open_pipeline(struct weft_model *m, struct weft_error *err)
{
    struct weft_pipe *pipe;
    weft_status_t st = weft_pipe_open(m->dir, &pipe, err);
    if (st != WEFT_OK)
        return st;
    snprintf(m->pipeline_class, sizeof(m->pipeline_class), "%s", weft_pipe_class(pipe));
    bool has_t = false, has_sched = false;
    const struct pipeline_kind *kind = pipeline_kind_of(m->pipeline_class);
    if (!kind) {
        st = weft_error_refuse(err, WEFT_ERR_UNSUPPORTED,
                               "%s/model_index.json: _class_name is '%s'; weft runs %s, %s and %s "
                               "pipeline folders", m->dir, m->pipeline_class,
                               WEFT_FLUX_PIPELINE_CLASS, WEFT_FLUX2_PIPELINE_CLASS,
                               WEFT_QWEN_PIPELINE_CLASS);
    } else if ((st = index_entry(pipe, "transformer", "diffusers", kind->transformer, false,
                                 &has_t, err)) == WEFT_OK) {
        st = index_entry(pipe, "vae", "diffusers", kind->vae, true, &m->has_vae, err);
        if (st == WEFT_OK)
            st = index_entry(pipe, "scheduler", "diffusers", WEFT_SCHED_CLASS, true, &has_sched,
                             err);
    }
    /* a pipeline whose text encoders are not weft's: those entries are not opened */
    if (st == WEFT_OK && kind && kind->native_text)
        st = text_entries(m, pipe, err);
    weft_pipe_close(pipe);
    if (st != WEFT_OK)
        return st;
    snprintf(m->transformer_dir, sizeof(m->transformer_dir), "%s/transformer", m->dir);
    if (m->has_vae)
        snprintf(m->vae_dir, sizeof(m->vae_dir), "%s/vae", m->dir);
    if (has_sched) {
        char path[WEFT_CONF_PATH + 48];
        snprintf(path, sizeof(path), "%s/scheduler/scheduler_config.json", m->dir);
        cJSON *json;
        if ((st = weft_json_read_file(path, 1 << 20, &json, err)) != WEFT_OK)
            return st;
        const cJSON *cls = cJSON_GetObjectItemCaseSensitive(json, "_class_name");
        if (!cJSON_IsString(cls) || strcmp(cls->valuestring, WEFT_SCHED_CLASS) != 0)
            st = weft_error_refuse(err, WEFT_ERR_UNSUPPORTED, "%s: _class_name is not %s", path,
                                   WEFT_SCHED_CLASS);
        else
            st = weft_sched_config_parse(json, path, &m->sched, err);
        cJSON_Delete(json);
    }
    return st;
}

/* The text encoders' configs, and their widths against the transformer's. */
/* T5's length: tokenizer_2/tokenizer_config.json's model_max_length, at most FluxPipeline's. */
static weft_status_t text_length(struct weft_model *m, struct weft_error *err)
{
    m->default_text_tokens = WEFT_MODEL_MAX_SEQUENCE_LENGTH;
    if (!m->t5.tokenizer)
        return WEFT_OK;
    char path[WEFT_CONF_PATH + 64];
    snprintf(path, sizeof(path), "%s/tokenizer_config.json", m->t5.tokenizer_dir);
    if (access(path, F_OK) != 0)
        return WEFT_OK;
    cJSON *cfg;
    int64_t n;
    weft_status_t st = weft_json_read_file(path, 1 << 20, &cfg, err);
    if (st != WEFT_OK)
        return st;
    st = weft_tokenizer_max_length(cfg, false, path, &n, err);
    cJSON_Delete(cfg);
    if (st == WEFT_OK && n < m->default_text_tokens)
        m->default_text_tokens = n;
    return st;
}

static weft_status_t open_text(struct weft_model *m, struct weft_error *err)
{
    weft_status_t st = text_length(m, err);
    char origin[WEFT_CONF_PATH + 48];
    for (int k = 0; k < 2 && st == WEFT_OK; k++) {
        struct weft_model_text *t = k ? &m->t5 : &m->clip;
        if (!t->encoder)
            continue;
        struct weft_ckpt *ck;
        if ((st = open_component(t->encoder_dir, k ? WEFT_T5_ENCODER_CLASS : WEFT_CLIP_TEXT_CLASS,
                                 &ck, err)) != WEFT_OK)
            break;
        snprintf(origin, sizeof(origin), "%s/config.json", t->encoder_dir);
        st = k ? weft_t5_config_parse(weft_ckpt_config(ck), origin, &m->t5_cfg, err)
               : weft_clip_text_config_parse(weft_ckpt_config(ck), origin, &m->clip_cfg, err);
        t->file_bytes = file_bytes(ck);
        if (st == WEFT_OK)
            t->held_bytes = k ? weft_t5_held_bytes(&m->t5_cfg, ck)
                              : weft_clip_text_held_bytes(&m->clip_cfg, ck);
        weft_ckpt_close(ck);
    }
    if (st == WEFT_OK && m->clip.encoder &&
        m->clip_cfg.hidden_size != m->flux.pooled_projection_dim)
        st = weft_error_refuse(err, WEFT_ERR_FORMAT,
                               "%s/config.json: hidden_size %lld is not the transformer's "
                               "pooled_projection_dim %lld (FluxPipeline pools CLIP's output into "
                               "it)", m->clip.encoder_dir, (long long)m->clip_cfg.hidden_size,
                               (long long)m->flux.pooled_projection_dim);
    if (st == WEFT_OK && m->t5.encoder && m->t5_cfg.d_model != m->flux.joint_attention_dim)
        st = weft_error_refuse(err, WEFT_ERR_FORMAT,
                               "%s/config.json: d_model %lld is not the transformer's "
                               "joint_attention_dim %lld", m->t5.encoder_dir,
                               (long long)m->t5_cfg.d_model,
                               (long long)m->flux.joint_attention_dim);
    return st;
}

const char *weft_model_text_missing(const struct weft_model *m, char *buf, size_t len)
{
    const char *name = strrchr(m->dir, '/');
    name = name && name[1] ? name + 1 : m->dir;
    if (!m->pipeline) {
        snprintf(buf, len, "%s is a transformer folder: it has no text encoders (a pipeline "
                 "folder's tokenizer, text_encoder, tokenizer_2 and text_encoder_2 encode text)",
                 name);
        return buf;
    }
    if (m->flux.version != 1) {
        snprintf(buf, len, "%s cannot encode text: %s's text encoder (%s) is not native to weft "
                 "yet; give its prompt_embeds [1, T, %lld]%s as an embeddings file", name,
                 m->flux.version == 2 ? "FLUX.2" : "Qwen-Image",
                 m->flux.version == 2 ? "Mistral Small 3.1, 24 B parameters"
                                      : "Qwen2.5-VL, 7 B parameters",
                 (long long)m->flux.joint_attention_dim,
                 m->flux.version == 3 ? " (and its prompt_embeds_mask)" : "");
        return buf;
    }
    const struct {
        bool present;
        const char *what;
    } c[4] = {{m->clip.tokenizer, "tokenizer (CLIPTokenizer)"},
              {m->clip.encoder, "text_encoder (CLIPTextModel)"},
              {m->t5.tokenizer, "tokenizer_2 (T5TokenizerFast)"},
              {m->t5.encoder, "text_encoder_2 (T5EncoderModel)"}};
    size_t o = 0;
    int missing = 0;
    for (int k = 0; k < 4; k++)
        missing += !c[k].present;
    if (missing == 0)
        return NULL;
    o += (size_t)snprintf(buf, len, "%s cannot encode text: its model_index.json names no ", name);
    for (int k = 0, seen = 0; k < 4 && o < len; k++) {
        if (c[k].present)
            continue;
        seen++;
        o += (size_t)snprintf(buf + o, len - o, "%s%s",
                              seen == 1 ? "" : (seen == missing ? " or " : ", "), c[k].what);
    }
    return buf;
}

/* The transformer's channels are the VAE's latents packed 2 x 2 (FluxPipeline:
 * num_channels_latents = in_channels // 4, unpacked output of out_channels // 4): the VAE's
 * half (transformer_channels checked the transformer's own). */
static weft_status_t check_channels(const struct weft_model *m, struct weft_error *err)
{
    const struct weft_flux_config *f = &m->flux;
    if (m->has_vae && m->vae.latent_channels * 4 != f->in_channels)
        return weft_error_refuse(err, WEFT_ERR_FORMAT,
                                 "%s/config.json: latent_channels %lld does not match the "
                                 "transformer's in_channels %lld (4 x latent channels, 2 x 2 "
                                 "packing)", m->vae_dir, (long long)m->vae.latent_channels,
                                 (long long)f->in_channels);
    return WEFT_OK;
}

weft_status_t weft_model_open(const char *dir, struct weft_model **model_p,
                              struct weft_error *err)
{
    if (strlen(dir) >= WEFT_CONF_PATH)
        return weft_error_refuse(err, WEFT_ERR_RANGE, "model folder path too long");
    struct weft_model *m = weft_calloc(1, sizeof(*m));
    if (!m)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    snprintf(m->dir, sizeof(m->dir), "%s", dir);
    snprintf(m->prompts_dir, sizeof(m->prompts_dir), "%s/prompts", dir);
    weft_sched_config_flux_default(&m->sched);
    weft_status_t st;
    enum weft_path_kind kind = weft_path_kind(dir);
    if (kind == WEFT_PATH_PIPELINE) {
        m->pipeline = true;
        st = open_pipeline(m, err);
    } else if (kind == WEFT_PATH_MODEL) {
        snprintf(m->transformer_dir, sizeof(m->transformer_dir), "%s", dir);
        st = WEFT_OK;
    } else {
        st = weft_error_refuse(err, WEFT_ERR_NOT_FOUND,
                               "%s: not a pipeline folder (model_index.json) or a model folder "
                               "(config.json)", dir);
    }
    if (st == WEFT_OK)
        st = open_transformer(m, err);
    /* Flux2Pipeline's mu (compute_empirical_mu), whatever its scheduler's config says */
    if (st == WEFT_OK && m->flux.version == 2)
        m->sched.mu_rule = WEFT_MU_EMPIRICAL;
    if (st == WEFT_OK && m->has_vae)
        st = open_vae(m, err);
    if (st == WEFT_OK)
        st = check_channels(m, err);
    if (st == WEFT_OK)
        st = open_text(m, err);
    if (st != WEFT_OK) {
        weft_free(m);
        return st;
    }
    m->vae_scale = m->has_vae ? m->vae.scale : 8;
    m->side_unit = 2 * m->vae_scale;
    m->default_side = 1024;
    if (m->has_vae && m->vae.sample_size <= 1024 && m->vae.sample_size % m->side_unit == 0)
        m->default_side = m->vae.sample_size;
    *model_p = m;
    return WEFT_OK;
}

void weft_model_close(struct weft_model *model)
{
    weft_free(model);
}

/* ---------------------------------------------------------------------------------------- */
/* Layouts                                                                                   */

void weft_layout_single(struct weft_layout *out)
{
    *out = (struct weft_layout){.mesh = {1, 1, 1, 1, 1}};
}

void weft_layout_from_conf(const struct weft_conf *conf, int devices_per_replica,
                           struct weft_layout *out)
{
    const struct weft_conf_parallel *p = &conf->parallel;
    *out = (struct weft_layout){
        .mesh = {(int)p->dp_degree, (int)p->ring_degree, (int)p->ulysses_degree,
                 (int)p->tp_degree, 1, (int)p->cfg_degree},
        .ulysses_anything = p->ulysses_anything,
        .ring_anything = p->ring_anything,
        .rotation = (enum weft_ring_rotation)p->ring_rotation,
    };
    if (conf->device_map.strategy != 0) {
        out->device_map = true;
        out->mesh.pp = devices_per_replica > 0 ? devices_per_replica : 1;
    }
}

/* The degrees a group may name, in the order of group_places. */
static const char *const group_names[] = {"dp", "cfg", "ring", "ulysses", "tp"};
#define GROUP_DEGREES ((int)(sizeof(group_names) / sizeof(group_names[0])))

static const char *skip_blank(const char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    return s;
}

/* One group of [parallel] groups, text [s, end): "name N" factors joined by 'x'. */
static weft_status_t parse_group(const char *s, const char *end, int index,
                                 struct weft_layout *l, struct weft_error *err)
{
    bool seen[GROUP_DEGREES] = {false};
    int factors = 0;
    int64_t devices = 1;
    while (true) {
        s = skip_blank(s);
        const char *name = s;
        while (s < end && *s != ' ' && *s != '\t' && (*s < '0' || *s > '9'))
            s++;
        const size_t len = (size_t)(s - name);
        if (len == 0)
            return weft_error_refuse(err, WEFT_ERR_CONFIG,
                                     "[parallel] groups: group %d: a degree's name (dp, cfg, "
                                     "ring, ulysses or tp) expected%s", index + 1,
                                     factors ? " after 'x'" : "");
        int which = 0;
        while (which < GROUP_DEGREES && (strlen(group_names[which]) != len ||
                                         strncmp(group_names[which], name, len) != 0))
            which++;
        if (which == GROUP_DEGREES)
            return weft_error_refuse(err, WEFT_ERR_CONFIG,
                                     "[parallel] groups: group %d: \"%.*s\" is not a degree "
                                     "(dp, cfg, ring, ulysses or tp, each followed by its "
                                     "value)", index + 1, (int)len, name);
        if (seen[which])
            return weft_error_refuse(err, WEFT_ERR_CONFIG,
                                     "[parallel] groups: group %d names %.*s twice", index + 1,
                                     (int)len, name);
        seen[which] = true;
        s = skip_blank(s);
        long v = 0;
        const char *digits = s;
        while (s < end && *s >= '0' && *s <= '9' && v <= 1024)
            v = v * 10 + (*s++ - '0');
        if (s == digits || v < 1 || v > 1024 || (s < end && *s >= '0' && *s <= '9'))
            return weft_error_refuse(err, WEFT_ERR_CONFIG,
                                     "[parallel] groups: group %d: %.*s needs a degree from 1 "
                                     "to 1024", index + 1, (int)len, name);
        int *const places[GROUP_DEGREES] = {&l->mesh.dp, &l->mesh.cfg, &l->mesh.ring,
                                            &l->mesh.ulysses, &l->mesh.tp};
        *places[which] = (int)v;
        factors++;
        devices *= v;
        if (devices > WEFT_LAYOUT_GROUP_DEVICES_MAX)
            return weft_error_refuse(err, WEFT_ERR_CONFIG,
                                     "[parallel] groups: group %d takes more than %d devices",
                                     index + 1, WEFT_LAYOUT_GROUP_DEVICES_MAX);
        s = skip_blank(s);
        if (s == end)
            return WEFT_OK;
        if (*s != 'x')
            return weft_error_refuse(err, WEFT_ERR_CONFIG,
                                     "[parallel] groups: group %d: '%c' where 'x' or '+' was "
                                     "expected", index + 1, *s);
        s++;
    }
}

weft_status_t weft_layout_parse_groups(const char *text, const struct weft_layout *base,
                                       struct weft_layout out[WEFT_LAYOUT_GROUPS_MAX], int *n_p,
                                       struct weft_error *err)
{
    *n_p = 0;
    const char *s = text;
    for (int n = 0;; n++) {
        const char *end = strchr(s, '+');
        if (!end)
            end = s + strlen(s);
        if (n == WEFT_LAYOUT_GROUPS_MAX)
            return weft_error_refuse(err, WEFT_ERR_CONFIG,
                                     "[parallel] groups: more than %d groups",
                                     WEFT_LAYOUT_GROUPS_MAX);
        if (*skip_blank(s) == '\0' || skip_blank(s) == end)
            return weft_error_refuse(err, WEFT_ERR_CONFIG,
                                     "[parallel] groups: group %d is empty (layouts joined by "
                                     "'+', e.g. \"ulysses 2 + dp 2\")", n + 1);
        struct weft_layout *l = &out[n];
        *l = (struct weft_layout){.mesh = {1, 1, 1, 1, 1, 1}, .rotation = base->rotation};
        weft_status_t st = parse_group(s, end, n, l, err);
        if (st != WEFT_OK)
            return st;
        /* the anything flags relax the groups that split the sequence that way */
        l->ulysses_anything = base->ulysses_anything && l->mesh.ulysses > 1;
        l->ring_anything = base->ring_anything && l->mesh.ring > 1;
        *n_p = n + 1;
        if (*end == '\0')
            return WEFT_OK;
        s = end + 1;
    }
}

int weft_layout_replica_devices(const struct weft_layout *l)
{
    return l->device_map ? l->mesh.pp
                         : (l->mesh.cfg > 1 ? l->mesh.cfg : 1) * l->mesh.ring * l->mesh.ulysses *
                               l->mesh.tp;
}

int weft_layout_groups_devices(const struct weft_layout *g, int n)
{
    int devices = 0;
    for (int k = 0; k < n; k++)
        devices += g[k].mesh.dp * weft_layout_replica_devices(&g[k]);
    return devices;
}

void weft_layout_name(const struct weft_layout *l, char *buf, size_t len)
{
    char cfg[16] = "";
    if (l->mesh.cfg > 1)
        snprintf(cfg, sizeof(cfg), "cfg %d x ", l->mesh.cfg);
    if (l->device_map)
        snprintf(buf, len, "dp %d x %s%d device_map stages", l->mesh.dp, cfg, l->mesh.pp);
    else
        snprintf(buf, len, "dp %d x %sring %d x ulysses %d x tp %d", l->mesh.dp, cfg,
                 l->mesh.ring, l->mesh.ulysses, l->mesh.tp);
}

static weft_status_t check_degrees(const struct weft_layout *l, struct weft_error *err)
{
    const struct weft_mesh *m = &l->mesh;
    if (m->dp < 1 || m->ring < 1 || m->ulysses < 1 || m->tp < 1 || m->pp < 0)
        return weft_error_refuse(err, WEFT_ERR_CONFIG,
                                 "every parallel degree must be at least 1 (dp %d, ring %d, "
                                 "ulysses %d, tp %d)", m->dp, m->ring, m->ulysses, m->tp);
    if (m->cfg < 0 || m->cfg > 2)
        return weft_error_refuse(err, WEFT_ERR_CONFIG,
                                 "[parallel] cfg_degree must be 1 or 2 (it is %d): CFG "
                                 "parallelism splits a replica into the conditional and the "
                                 "unconditional half", m->cfg);
    if (l->device_map && m->cfg > 1)
        return weft_error_refuse(err, WEFT_ERR_CONFIG,
                                 "[device_map] strategy cannot be combined with CFG parallelism "
                                 "(cfg_degree %d) in this version; set cfg_degree = 1 or "
                                 "strategy = none", m->cfg);
    if (l->ulysses_anything && m->ulysses < 2)
        return weft_error_refuse(err, WEFT_ERR_CONFIG,
                                 "[parallel] ulysses_anything needs ulysses_degree > 1 (it is "
                                 "%d)", m->ulysses);
    if (l->ring_anything && m->ring < 2)
        return weft_error_refuse(err, WEFT_ERR_CONFIG,
                                 "[parallel] ring_anything needs ring_degree > 1 (it is %d)",
                                 m->ring);
    if (l->device_map && m->tp > 1)
        return weft_error_refuse(err, WEFT_ERR_CONFIG,
                                 "[device_map] strategy cannot be combined with tensor "
                                 "parallelism (tp_degree %d): tensor parallelism already places "
                                 "each rank's shard on that rank's device; set tp_degree = 1 or "
                                 "strategy = none", m->tp);
    if (l->device_map && (m->ring > 1 || m->ulysses > 1))
        return weft_error_refuse(err, WEFT_ERR_CONFIG,
                                 "[device_map] strategy cannot be combined with context "
                                 "parallelism (ring %d x ulysses %d) in this version: each stage "
                                 "of a layer pipeline holds whole sequences; set the degrees to 1 "
                                 "or strategy = none", m->ring, m->ulysses);
    return WEFT_OK;
}

/* Resolve the plan the workers will resolve, against the checkpoint's headers. */
static weft_status_t check_tp(const struct weft_model *model, int tp,
                              const struct weft_conf_map *tp_plan, struct weft_error *err)
{
    struct weft_tp_plan plan;
    weft_tp_plan_builtin(model->info.class_name, &plan);
    weft_status_t st = tp_plan ? weft_tp_plan_apply_conf(&plan, tp_plan, err) : WEFT_OK;
    if (st != WEFT_OK)
        return st;
    if (plan.n == 0)
        return weft_error_refuse(err, WEFT_ERR_UNSUPPORTED,
                                 "%s has no tensor-parallel plan; give one in [tp_plan]",
                                 model->info.class_name);
    struct weft_ckpt *ck;
    if ((st = weft_ckpt_open(model->transformer_dir, &ck, err)) != WEFT_OK)
        return st;
    struct weft_tp_layout *lay = NULL;
    st = weft_tp_resolve(&plan, ck, &model->info, tp, tp, &lay, err);
    if (st == WEFT_OK)
        st = weft_flux_tp_check(&model->flux, lay, err);
    weft_tp_layout_destroy(lay);
    weft_ckpt_close(ck);
    return st;
}

weft_status_t weft_model_check_layout(const struct weft_model *model,
                                      const struct weft_layout *layout,
                                      const struct weft_conf_map *tp_plan,
                                      struct weft_error *err)
{
    weft_status_t st = check_degrees(layout, err);
    if (st != WEFT_OK)
        return st;
    const struct weft_mesh *m = &layout->mesh;
    if (m->tp > 1 && (st = check_tp(model, m->tp, tp_plan, err)) != WEFT_OK)
        return st;
    const int64_t heads = model->flux.num_attention_heads;
    if (heads % m->tp)
        return weft_error_refuse(err, WEFT_ERR_CONFIG,
                                 "tp_degree %d does not divide num_attention_heads %lld of %s",
                                 m->tp, (long long)heads, model->transformer_dir);
    if (heads / m->tp < m->ulysses)
        return weft_error_refuse(err, WEFT_ERR_CONFIG,
                                 "%lld heads per tensor-parallel rank are fewer than "
                                 "ulysses_degree %d", (long long)(heads / m->tp), m->ulysses);
    if ((heads / m->tp) % m->ulysses && !layout->ulysses_anything)
        return weft_error_refuse(err, WEFT_ERR_CONFIG,
                                 "%lld heads per tensor-parallel rank do not divide by "
                                 "ulysses_degree %d; set [parallel] ulysses_anything = true to "
                                 "split them unevenly", (long long)(heads / m->tp), m->ulysses);
    return WEFT_OK;
}

/* ---------------------------------------------------------------------------------------- */

/* Token l of a mask read in dt (f32, i64, i32 or u8): kept? */
static bool mask_on(const void *raw, enum weft_dtype dt, int64_t l)
{
    return dt == WEFT_DTYPE_F32   ? ((const float *)raw)[l] != 0.0f
           : dt == WEFT_DTYPE_I64 ? ((const int64_t *)raw)[l] != 0
           : dt == WEFT_DTYPE_I32 ? ((const int32_t *)raw)[l] != 0
                                  : ((const uint8_t *)raw)[l] != 0;
}

/* A Qwen-Image prompt's mask: its tokens are a prefix of ones (padding after them), so the
 * prompt is its first tokens; a mask with holes would move the positions of the tokens after
 * them, which weft does not model. Returns the tokens kept. */
static weft_status_t mask_tokens(struct weft_st_file *f, const char *what, int64_t tokens,
                                 int64_t *kept_p, struct weft_error *err)
{
    const struct weft_st_tensor *mk = weft_st_find(f, "prompt_embeds_mask");
    *kept_p = tokens;
    if (!mk)
        return WEFT_OK;
    /* as the pipeline passes it: int64 (the tokenizer's attention mask), or any float or int */
    const enum weft_dtype dt = weft_dtype_is_float(mk->dtype) ? WEFT_DTYPE_F32 : mk->dtype;
    if (dt != WEFT_DTYPE_F32 && dt != WEFT_DTYPE_I64 && dt != WEFT_DTYPE_I32 &&
        dt != WEFT_DTYPE_U8)
        return weft_error_refuse(err, WEFT_ERR_FORMAT, "%s: prompt_embeds_mask is %s; a float, "
                                 "int or bool mask expected", what, mk->dtype_name);
    void *raw = weft_malloc((size_t)tokens * 8);
    if (!raw)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    weft_status_t st = weft_st_read(f, mk, raw, dt, err);
    int64_t kept = 0;
    while (st == WEFT_OK && kept < tokens && mask_on(raw, dt, kept))
        kept++;
    for (int64_t l = kept; st == WEFT_OK && l < tokens; l++)
        if (mask_on(raw, dt, l))
            st = weft_error_refuse(err, WEFT_ERR_UNSUPPORTED,
                                   "%s: prompt_embeds_mask has a masked token (%lld) before a "
                                   "kept one (%lld); weft takes masks of padding only (ones, "
                                   "then zeros)", what, (long long)kept, (long long)l);
    weft_free(raw);
    if (st == WEFT_OK && kept == 0)
        st = weft_error_refuse(err, WEFT_ERR_FORMAT, "%s: prompt_embeds_mask masks every token",
                               what);
    *kept_p = kept;
    return st;
}

weft_status_t weft_model_check_prompt(const struct weft_model *model, struct weft_st_file *file,
                                      const char *what,
                                      int64_t *tokens_p, struct weft_error *err)
{
    const struct weft_st_tensor *pe = weft_st_find(file, "prompt_embeds");
    const struct weft_st_tensor *po = weft_st_find(file, "pooled_prompt_embeds");
    /* FLUX.2 and Qwen-Image take prompt_embeds only (Qwen-Image: with its mask) */
    const bool pooled_wanted = model->flux.version == 1;
    if (!pooled_wanted && pe && po)
        return weft_error_refuse(err, WEFT_ERR_FORMAT,
                                 "%s: pooled_prompt_embeds given, but %s takes no pooled "
                                 "embedding (an embeddings file of another model?)", what,
                                 weft_flux_class(&model->flux));
    if (!pe || (pooled_wanted && !po))
        return weft_error_refuse(err, WEFT_ERR_FORMAT,
                                 pooled_wanted
                                     ? "%s: needs tensors prompt_embeds and pooled_prompt_embeds"
                                     : "%s: needs the tensor prompt_embeds",
                                 what);
    for (int k = 0; k < (pooled_wanted ? 2 : 1); k++) {
        const struct weft_st_tensor *t = k ? po : pe;
        if (t->dtype != WEFT_DTYPE_F32 && t->dtype != WEFT_DTYPE_BF16 &&
            t->dtype != WEFT_DTYPE_F16)
            return weft_error_refuse(err, WEFT_ERR_FORMAT,
                                     "%s: %s is %s; F32, BF16 or F16 expected", what, t->name,
                                     t->dtype_name);
    }
    const int64_t joint = model->flux.joint_attention_dim;
    if (pe->ndim != 3 || pe->shape[0] != 1 || pe->shape[2] != joint)
        return weft_error_refuse(err, WEFT_ERR_FORMAT,
                                 "%s: prompt_embeds must be [1, T, %lld] (the model's "
                                 "joint_attention_dim)", what, (long long)joint);
    if (pe->shape[1] < 1 || pe->shape[1] > WEFT_MODEL_MAX_TEXT_TOKENS)
        return weft_error_refuse(err, WEFT_ERR_RANGE,
                                 "%s: prompt_embeds has %lld tokens; 1..%d allowed", what,
                                 (long long)pe->shape[1], WEFT_MODEL_MAX_TEXT_TOKENS);
    const int64_t pooled = model->flux.pooled_projection_dim;
    if (pooled_wanted && (po->numel != pooled || po->ndim > 2 || po->ndim < 1 ||
        (po->ndim == 2 && po->shape[0] != 1)))
        return weft_error_refuse(err, WEFT_ERR_FORMAT,
                                 "%s: pooled_prompt_embeds must be [1, %lld] (the model's "
                                 "pooled_projection_dim)", what, (long long)pooled);
    *tokens_p = pe->shape[1];
    const struct weft_st_tensor *mk = weft_st_find(file, "prompt_embeds_mask");
    if (mk && model->flux.version != 3)
        return weft_error_refuse(err, WEFT_ERR_FORMAT,
                                 "%s: prompt_embeds_mask given, but %s takes no mask", what,
                                 weft_flux_class(&model->flux));
    if (mk && (mk->numel != pe->shape[1] || mk->ndim < 1 || mk->ndim > 2))
        return weft_error_refuse(err, WEFT_ERR_FORMAT,
                                 "%s: prompt_embeds_mask must be [1, %lld] (one per token)", what,
                                 (long long)pe->shape[1]);
    return mask_tokens(file, what, pe->shape[1], tokens_p, err);
}

static weft_status_t read_f32(struct weft_st_file *f, const char *name, float **out,
                              struct weft_error *err)
{
    const struct weft_st_tensor *t = weft_st_find(f, name);
    float *p = weft_malloc((size_t)t->numel * sizeof(float) + sizeof(float));
    if (!p)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    weft_status_t st = weft_st_read(f, t, p, WEFT_DTYPE_F32, err);
    if (st != WEFT_OK) {
        weft_free(p);
        return st;
    }
    *out = p;
    return WEFT_OK;
}

weft_status_t weft_model_check_prompt_values(struct weft_st_file *file, const char *what,
                                             struct weft_error *err)
{
    static const char *const names[] = {"prompt_embeds", "pooled_prompt_embeds"};
    for (int k = 0; k < 2; k++) {
        const struct weft_st_tensor *t = weft_st_find(file, names[k]);
        if (!t)
            continue;
        float *v = NULL;
        weft_status_t st = read_f32(file, names[k], &v, err);
        if (st != WEFT_OK || !v)
            return st;
        int64_t bad = -1;
        for (int64_t i = 0; i < t->numel && bad < 0; i++)
            if (!isfinite(v[i]))
                bad = i;
        weft_free(v);
        if (bad >= 0)
            return weft_error_refuse(err, WEFT_ERR_FORMAT,
                                     "%s: %s holds a value that is not finite (NaN or infinite) "
                                     "at element %lld", what, names[k], (long long)bad);
    }
    return WEFT_OK;
}

weft_status_t weft_model_prompt_read(const struct weft_model *model, const char *path,
                                     struct weft_prompt_embeds *out, struct weft_error *err)
{
    struct weft_st_file *f;
    weft_status_t st = weft_st_open(path, &f, err);
    if (st != WEFT_OK)
        return st;
    struct weft_prompt_embeds p = {0};
    st = weft_model_check_prompt(model, f, path, &p.tokens, err);
    if (st == WEFT_OK && (st = read_f32(f, "prompt_embeds", &p.embeds, err)) == WEFT_OK) {
        if (model->flux.version == 1)
            st = read_f32(f, "pooled_prompt_embeds", &p.pooled, err);
        else if (!(p.pooled = weft_calloc(1, sizeof(float)))) /* none: an empty vector */
            st = weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    }
    weft_st_close(f);
    if (st != WEFT_OK) {
        weft_prompt_embeds_cleanup(&p);
        return st;
    }
    *out = p;
    return WEFT_OK;
}

void weft_prompt_embeds_cleanup(struct weft_prompt_embeds *p)
{
    weft_free(p->embeds);
    weft_free(p->pooled);
    p->embeds = p->pooled = NULL;
}
