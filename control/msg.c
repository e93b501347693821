/* The typed control messages (see msg.h): one field list per message, walked by the encoder
 * and the decoder, and one check per message that both apply. */
#include "control/msg.h"

#include <math.h>
#include <string.h>

#include "common/alloc.h"
#include "common/utf8.h"
#include "control/wire.h"

const char *weft_msg_name(unsigned type)
{
    static const char *const names[WEFT_MSG_TYPE_COUNT] = {
        "?",     "hello", "assign", "assigned", "run",      "step",
        "image", "done",  "cancel", "reset",    "shutdown", "ping"};
    return type < WEFT_MSG_TYPE_COUNT ? names[type] : "?";
}

size_t weft_msg_prompt_floats(const struct weft_msg_prompt *p)
{
    return p->is_text ? 0 : (size_t)(p->tokens * p->joint + p->pooled);
}

/* ---------------------------------------------------------------------------------------- */
/* Checks                                                                                    */

static weft_status_t bad(struct weft_error *err, const char *what, const char *field,
                         const char *rule)
{
    return weft_error_refuse(err, WEFT_ERR_PROTOCOL, "%s message: %s %s", what, field, rule);
}

static bool in(int64_t v, int64_t lo, int64_t hi)
{
    return v >= lo && v <= hi;
}

static bool finite_nonneg(double v)
{
    return isfinite(v) && v >= 0;
}

static bool label_ok(const char *s)
{
    size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789_");
    return n > 0 && n < WEFT_MSG_LABEL_MAX && s[n] == '\0';
}

static weft_status_t check_layout(const struct weft_layout *l, const char *what,
                                  struct weft_error *err)
{
    const struct weft_mesh *m = &l->mesh;
    /* CFG parallelism has two halves at most (0 and 1 both mean none, as in model/mesh.c) */
    if (!in(m->cfg, 0, 2))
        return bad(err, what, "mesh.cfg", "outside 0..2");
    const int64_t n[6] = {m->dp, m->ring, m->ulysses, m->tp, m->pp, m->cfg > 1 ? m->cfg : 1};
    int64_t size = 1;
    for (int i = 0; i < 6; i++) {
        if (!in(n[i], 1, WEFT_MSG_MAX_RANKS))
            return bad(err, what, "mesh degree", "outside 1..65536");
        size *= n[i];
        if (size > WEFT_MSG_MAX_RANKS)
            return bad(err, what, "mesh", "larger than 65536 ranks");
    }
    if (m->pp > 1 && !l->device_map)
        return bad(err, what, "mesh.pp", "above 1 without device_map");
    if (l->rotation != WEFT_RING_ALLGATHER && l->rotation != WEFT_RING_P2P)
        return bad(err, what, "rotation", "unknown");
    return WEFT_OK;
}

static weft_status_t check_assign(const struct weft_msg_assign *a, struct weft_error *err)
{
    const char *w = "assign";
    weft_status_t st = check_layout(&a->layout, w, err);
    if (st != WEFT_OK)
        return st;
    const int64_t mesh = weft_mesh_size(&a->layout.mesh);
    if (!a->model[0])
        return bad(err, w, "model", "is empty");
    if (!in(a->world_size, 1, WEFT_MSG_MAX_RANKS) || !in(a->world_rank, 0, a->world_size - 1) ||
        !in(a->world_base, 0, a->world_size - 1) || a->world_base + mesh > a->world_size ||
        !in(a->world_rank - a->world_base, 0, mesh - 1))
        return bad(err, w, "world_rank", "is not a rank of the mesh in the world");
    if (a->world_size > 1 && !a->rdv[0])
        return bad(err, w, "rdv", "is empty for a world of several ranks");
    if (a->compute != WEFT_DTYPE_F32 && a->compute != WEFT_DTYPE_BF16 &&
        a->compute != WEFT_DTYPE_F16)
        return bad(err, w, "compute", "is not f32, bf16 or f16");
    if (!in(a->threads, 0, 1024))
        return bad(err, w, "threads", "outside 0..1024");
    const struct weft_msg_stage *s = &a->stage;
    if (s->on != a->layout.device_map)
        return bad(err, w, "stage", "given without device_map, or missing with it");
    const int pp = a->layout.mesh.pp;
    if (s->on && (!in(s->unit_first, 0, WEFT_MSG_MAX_UNITS) ||
                  !in(s->unit_last, s->unit_first, WEFT_MSG_MAX_UNITS) ||
                  !in(s->prev, -1, pp - 1) || !in(s->next, -1, pp - 1) ||
                  !in(s->root, 0, pp - 1) || !in(s->clip, -1, pp - 1) ||
                  !in(s->t5, -1, pp - 1)))
        return bad(err, w, "stage", "has a unit range, a neighbour or a text encoder's stage out of "
                                 "bounds");
    if (!in(a->tp_plan.n, 0, WEFT_CONF_MAP_MAX))
        return bad(err, w, "tp_plan", "has too many entries");
    for (int i = 0; i < a->tp_plan.n; i++)
        if (!a->tp_plan.e[i].key[0] || !a->tp_plan.e[i].value[0])
            return bad(err, w, "tp_plan entry", "is empty");
    return WEFT_OK;
}

static weft_status_t check_run(const struct weft_msg_run *r, struct weft_error *err)
{
    const char *w = "run";
    if (r->job == 0)
        return bad(err, w, "job", "is 0");
    if (!in(r->height, 1, WEFT_JOB_MAX_SIDE) || !in(r->width, 1, WEFT_JOB_MAX_SIDE))
        return bad(err, w, "height or width", "outside 1..16384");
    if (!in(r->steps, 1, WEFT_JOB_MAX_STEPS))
        return bad(err, w, "steps", "outside 1..1000");
    if (!weft_job_scale_ok(r->guidance))
        return bad(err, w, "guidance", "outside 0..1000");
    if (!in(r->n_prompts, 1, (int64_t)2 * WEFT_JOB_MAX_PROMPTS) ||
        !in(r->n_images, 1, WEFT_JOB_MAX_IMAGES))
        return bad(err, w, "prompts or images", "count out of bounds");
    const int32_t positive = r->n_prompts - r->n_negatives;
    if (r->n_negatives != 0 && r->n_negatives != positive)
        return bad(err, w, "n_negatives", "is neither 0 nor one per prompt");
    if (positive > WEFT_JOB_MAX_PROMPTS)
        return bad(err, w, "prompts", "count out of bounds");
    if (!weft_job_scale_ok(r->true_cfg_scale))
        return bad(err, w, "true_cfg_scale", "outside 0..1000");
    size_t floats = 0;
    for (int i = 0; i < r->n_prompts; i++) {
        const struct weft_msg_prompt *p = &r->prompts[i];
        if (!in(p->tokens, 1, WEFT_JOB_MAX_TEXT_TOKENS) || !in(p->joint, 1, 65536) ||
            !in(p->pooled, 0, 65536)) /* FLUX.2: no pooled embedding */
            return bad(err, w, "prompt", "has a shape out of bounds");
        if (p->is_text && (!p->text || strlen(p->text) > WEFT_JOB_MAX_TEXT_BYTES ||
                           !weft_utf8_valid(p->text, strlen(p->text), NULL) ||
                           !in(p->tokens, 1, WEFT_MODEL_MAX_SEQUENCE_LENGTH)))
            return bad(err, w, "prompt text", "is missing, too long, not UTF-8, or its "
                       "max_sequence_length is outside 1..512");
        if (!p->is_text && p->text)
            return bad(err, w, "prompt", "has a text but is not a text prompt");
        floats += weft_msg_prompt_floats(p);
    }
    for (int i = 0; i < r->n_images; i++)
        if (!in(r->images[i].index, 0, WEFT_JOB_MAX_IMAGES - 1) ||
            !in(r->images[i].prompt, 0, positive - 1))
            return bad(err, w, "image", "index or prompt out of bounds");
    if (floats != r->n_embeds)
        return weft_error_refuse(err, WEFT_ERR_PROTOCOL,
                                 "run message: the prompts need %zu floats, the tail has %zu",
                                 floats, r->n_embeds);
    return WEFT_OK;
}

static weft_status_t check_done(const struct weft_msg_done *d, struct weft_error *err)
{
    const char *w = "done";
    if (d->job == 0)
        return bad(err, w, "job", "is 0");
    if (d->status > 0 || d->status <= -300)
        return bad(err, w, "status", "is not a weft status");
    if (!in(d->n_comm, 0, WEFT_MSG_COMM_MAX))
        return bad(err, w, "comm", "has too many entries");
    for (int i = 0; i < d->n_comm; i++) {
        const struct weft_msg_comm *c = &d->comm[i];
        if (!label_ok(c->group) || !label_ok(c->op) || !finite_nonneg(c->seconds) ||
            !finite_nonneg(c->bytes))
            return bad(err, w, "comm entry", "is malformed");
    }
    return WEFT_OK;
}

static weft_status_t check_image(const struct weft_msg_image *m, struct weft_error *err)
{
    const char *w = "image";
    if (m->job == 0 || !in(m->image, 0, WEFT_JOB_MAX_IMAGES - 1))
        return bad(err, w, "job or image", "out of bounds");
    if (!in(m->width, 1, WEFT_JOB_MAX_SIDE) || !in(m->height, 1, WEFT_JOB_MAX_SIDE))
        return bad(err, w, "width or height", "outside 1..16384");
    if (!finite_nonneg(m->denoise_s) || !finite_nonneg(m->decode_s))
        return bad(err, w, "timings", "are not finite");
    if (m->png_len < 8 || memcmp(m->png, "\x89PNG\r\n\x1a\n", 8) != 0)
        return bad(err, w, "tail", "is not a PNG");
    return WEFT_OK;
}

weft_status_t weft_msg_check(unsigned type, const union weft_msg *m, struct weft_error *err)
{
    switch (type) {
    case WEFT_MSG_HELLO:
        return m->hello.id[0] ? WEFT_OK : bad(err, "hello", "id", "is empty");
    case WEFT_MSG_ASSIGN:
        return check_assign(&m->assign, err);
    case WEFT_MSG_ASSIGNED:
        if (!in(m->assigned.threads, 0, 1024))
            return bad(err, "assigned", "threads", "outside 0..1024");
        return m->assigned.status <= 0 && m->assigned.status > -300
                   ? WEFT_OK
                   : bad(err, "assigned", "status", "is not a weft status");
    case WEFT_MSG_RUN:
        return check_run(&m->run, err);
    case WEFT_MSG_STEP:
        if (m->step.job == 0 || !in(m->step.image, 0, WEFT_JOB_MAX_IMAGES - 1) ||
            !in(m->step.steps, 1, WEFT_JOB_MAX_STEPS) || !in(m->step.step, 1, m->step.steps) ||
            !finite_nonneg(m->step.seconds))
            return bad(err, "step", "field", "out of bounds");
        return WEFT_OK;
    case WEFT_MSG_IMAGE:
        return check_image(&m->image, err);
    case WEFT_MSG_DONE:
        return check_done(&m->done, err);
    case WEFT_MSG_CANCEL:
        return m->job.job ? WEFT_OK : bad(err, "cancel", "job", "is 0");
    case WEFT_MSG_RESET:
    case WEFT_MSG_SHUTDOWN:
    case WEFT_MSG_PING:
        return WEFT_OK;
    default:
        return weft_error_refuse(err, WEFT_ERR_PROTOCOL, "unknown message type %u", type);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Fields, one walk for both directions                                                      */

/* A codec is either a writer or a reader; each field function moves one field between the
 * struct and the wire in the codec's direction. */
struct codec {
    struct weft_wire_w *w;
    struct weft_wire_r *r;
};

static void f_u64(struct codec *c, uint64_t *v, const char *name)
{
    if (c->w)
        weft_wire_put_u64(c->w, *v);
    else
        *v = weft_wire_get_u64(c->r, name);
}

static void f_i64(struct codec *c, int64_t *v, const char *name)
{
    if (c->w)
        weft_wire_put_i64(c->w, *v);
    else
        *v = weft_wire_get_i64(c->r, name);
}

static void f_i32(struct codec *c, int32_t *v, const char *name)
{
    if (c->w)
        weft_wire_put_u32(c->w, (uint32_t)*v);
    else
        *v = (int32_t)weft_wire_get_u32(c->r, name);
}

static void f_int(struct codec *c, int *v, const char *name)
{
    int32_t x = (int32_t)*v;
    f_i32(c, &x, name);
    *v = x;
}

static void f_f64(struct codec *c, double *v, const char *name)
{
    if (c->w)
        weft_wire_put_f64(c->w, *v);
    else
        *v = weft_wire_get_f64(c->r, name);
}

static void f_bool(struct codec *c, bool *v, const char *name)
{
    if (c->w)
        weft_wire_put_u8(c->w, *v ? 1 : 0);
    else
        *v = weft_wire_get_bool(c->r, name);
}

static void f_str(struct codec *c, char *s, size_t cap, const char *name)
{
    if (c->w)
        weft_wire_put_str(c->w, s);
    else
        weft_wire_get_str(c->r, name, s, cap);
}

#define F_STR(c, field, name) f_str((c), (field), sizeof(field), (name))

static void f_layout(struct codec *c, struct weft_layout *l)
{
    f_int(c, &l->mesh.dp, "mesh.dp");
    f_int(c, &l->mesh.ring, "mesh.ring");
    f_int(c, &l->mesh.ulysses, "mesh.ulysses");
    f_int(c, &l->mesh.tp, "mesh.tp");
    f_int(c, &l->mesh.pp, "mesh.pp");
    f_int(c, &l->mesh.cfg, "mesh.cfg");
    f_bool(c, &l->ulysses_anything, "ulysses_anything");
    f_bool(c, &l->ring_anything, "ring_anything");
    int rotation = (int)l->rotation;
    f_int(c, &rotation, "rotation");
    l->rotation = (enum weft_ring_rotation)rotation;
    f_bool(c, &l->device_map, "device_map");
}

static void f_assign(struct codec *c, struct weft_msg_assign *a)
{
    f_u64(c, &a->epoch, "epoch");
    F_STR(c, a->model, "model");
    F_STR(c, a->rdv, "rdv");
    f_i32(c, &a->world_size, "world_size");
    f_i32(c, &a->world_rank, "world_rank");
    f_i32(c, &a->world_base, "world_base");
    f_layout(c, &a->layout);
    f_bool(c, &a->tp_full_then_shard, "tp_full_then_shard");
    f_bool(c, &a->decode, "decode");
    f_i32(c, &a->compute, "compute");
    f_i32(c, &a->threads, "threads");
    f_bool(c, &a->stage.on, "stage.on");
    f_i32(c, &a->stage.unit_first, "stage.unit_first");
    f_i32(c, &a->stage.unit_last, "stage.unit_last");
    f_i32(c, &a->stage.prev, "stage.prev");
    f_i32(c, &a->stage.next, "stage.next");
    f_i32(c, &a->stage.root, "stage.root");
    f_i32(c, &a->stage.clip, "stage.clip");
    f_i32(c, &a->stage.t5, "stage.t5");
    f_int(c, &a->tp_plan.n, "tp_plan");
    if (c->r && !in(a->tp_plan.n, 0, WEFT_CONF_MAP_MAX)) {
        c->r->failed = "tp_plan";
        return;
    }
    for (int i = 0; i < a->tp_plan.n; i++) {
        struct weft_conf_entry *e = &a->tp_plan.e[i];
        F_STR(c, e->key, "tp_plan key");
        F_STR(c, e->value, "tp_plan value");
        F_STR(c, e->origin, "tp_plan origin");
    }
}

static void f_assigned(struct codec *c, struct weft_msg_assigned *a)
{
    f_u64(c, &a->epoch, "epoch");
    f_i32(c, &a->status, "status");
    F_STR(c, a->error, "error");
    f_u64(c, &a->transformer_bytes, "transformer_bytes");
    f_u64(c, &a->vae_bytes, "vae_bytes");
    f_u64(c, &a->text_bytes, "text_bytes");
    f_i32(c, &a->threads, "threads");
    f_u64(c, &a->kept_bytes, "kept_bytes");
}

/* RUN's counts first, so the decoder can size its arrays before reading them. */
static weft_status_t f_run(struct codec *c, struct weft_msg_run *r)
{
    f_u64(c, &r->job, "job");
    f_u64(c, &r->epoch, "epoch");
    F_STR(c, r->job_id, "job_id");
    F_STR(c, r->model_name, "model_name");
    f_i64(c, &r->height, "height");
    f_i64(c, &r->width, "width");
    f_i64(c, &r->steps, "steps");
    f_f64(c, &r->guidance, "guidance");
    f_u64(c, &r->seed, "seed");
    f_i32(c, &r->n_prompts, "n_prompts");
    f_i32(c, &r->n_images, "n_images");
    f_i32(c, &r->n_negatives, "n_negatives");
    f_f64(c, &r->true_cfg_scale, "true_cfg_scale");
    if (c->r) {
        if (c->r->failed)
            return WEFT_OK;
        if (!in(r->n_prompts, 1, (int64_t)2 * WEFT_JOB_MAX_PROMPTS) ||
            !in(r->n_images, 1, WEFT_JOB_MAX_IMAGES)) {
            c->r->failed = "n_prompts or n_images";
            return WEFT_OK;
        }
        r->prompts = weft_calloc((size_t)r->n_prompts, sizeof(*r->prompts));
        r->images = weft_calloc((size_t)r->n_images, sizeof(*r->images));
        if (!r->prompts || !r->images)
            return WEFT_ERR_NOMEM;
    }
    for (int i = 0; i < r->n_prompts; i++) {
        struct weft_msg_prompt *p = &r->prompts[i];
        f_i64(c, &p->tokens, "prompt tokens");
        f_i64(c, &p->joint, "prompt joint");
        f_i64(c, &p->pooled, "prompt pooled");
        F_STR(c, p->name, "prompt name");
        f_bool(c, &p->is_text, "prompt is_text");
        if (c->w && p->is_text)
            weft_wire_put_str(c->w, p->text ? p->text : "");
        else if (c->r && p->is_text && !c->r->failed)
            p->text = weft_wire_get_str_alloc(c->r, "prompt text", WEFT_JOB_MAX_TEXT_BYTES);
    }
    for (int i = 0; i < r->n_images; i++) {
        f_i64(c, &r->images[i].index, "image index");
        f_i32(c, &r->images[i].prompt, "image prompt");
    }
    return WEFT_OK;
}

static void f_step(struct codec *c, struct weft_msg_step *s)
{
    f_u64(c, &s->job, "job");
    f_i64(c, &s->image, "image");
    f_i32(c, &s->step, "step");
    f_i32(c, &s->steps, "steps");
    f_f64(c, &s->seconds, "seconds");
}

static void f_image(struct codec *c, struct weft_msg_image *m)
{
    f_u64(c, &m->job, "job");
    f_i64(c, &m->image, "image");
    f_i32(c, &m->width, "width");
    f_i32(c, &m->height, "height");
    f_f64(c, &m->denoise_s, "denoise_s");
    f_f64(c, &m->decode_s, "decode_s");
}

static void f_done(struct codec *c, struct weft_msg_done *d)
{
    f_u64(c, &d->job, "job");
    f_i32(c, &d->status, "status");
    F_STR(c, d->error, "error");
    f_bool(c, &d->peer, "peer");
    f_i32(c, &d->n_comm, "n_comm");
    if (c->r && !in(d->n_comm, 0, WEFT_MSG_COMM_MAX)) {
        if (!c->r->failed)
            c->r->failed = "n_comm";
        return;
    }
    for (int i = 0; i < d->n_comm; i++) {
        struct weft_msg_comm *e = &d->comm[i];
        F_STR(c, e->group, "comm group");
        F_STR(c, e->op, "comm op");
        f_f64(c, &e->seconds, "comm seconds");
        f_f64(c, &e->bytes, "comm bytes");
        f_u64(c, &e->calls, "comm calls");
    }
    f_u64(c, &d->prompt_cache_hits, "prompt_cache_hits");
    f_u64(c, &d->prompt_cache_misses, "prompt_cache_misses");
}

/* The fields of type between the version byte and the tail. */
static weft_status_t fields(struct codec *c, unsigned type, union weft_msg *m)
{
    switch (type) {
    case WEFT_MSG_HELLO:
        F_STR(c, m->hello.id, "id");
        break;
    case WEFT_MSG_ASSIGN:
        f_assign(c, &m->assign);
        break;
    case WEFT_MSG_ASSIGNED:
        f_assigned(c, &m->assigned);
        break;
    case WEFT_MSG_RUN:
        return f_run(c, &m->run);
    case WEFT_MSG_STEP:
        f_step(c, &m->step);
        break;
    case WEFT_MSG_IMAGE:
        f_image(c, &m->image);
        break;
    case WEFT_MSG_DONE:
        f_done(c, &m->done);
        break;
    case WEFT_MSG_CANCEL:
        f_u64(c, &m->job.job, "job");
        break;
    case WEFT_MSG_RESET:
        f_u64(c, &m->epoch.epoch, "epoch");
        break;
    default:
        break;
    }
    return WEFT_OK;
}

/* ---------------------------------------------------------------------------------------- */

weft_status_t weft_msg_encode(unsigned type, const union weft_msg *msg, void **buf_p,
                              size_t *len_p, struct weft_error *err)
{
    static const union weft_msg none;
    if (!msg)
        msg = &none;
    weft_status_t st = weft_msg_check(type, msg, err);
    if (st != WEFT_OK)
        return st == WEFT_ERR_PROTOCOL ? WEFT_ERR_INVALID : st;
    struct weft_wire_w w;
    weft_wire_w_init(&w);
    struct codec c = {&w, NULL};
    weft_wire_put_u8(&w, WEFT_MSG_VERSION);
    /* the field walk only reads the struct when writing */
    (void)fields(&c, type, (union weft_msg *)msg);
    if (type == WEFT_MSG_RUN)
        weft_wire_put_bytes(&w, msg->run.embeds, msg->run.n_embeds * sizeof(float));
    else if (type == WEFT_MSG_IMAGE)
        weft_wire_put_bytes(&w, msg->image.png, msg->image.png_len);
    if (w.failed) {
        weft_wire_w_cleanup(&w);
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "%s message: out of memory",
                                 weft_msg_name(type));
    }
    *buf_p = w.buf;
    *len_p = w.len;
    return WEFT_OK;
}

/* RUN's tail into an aligned buffer of its own. */
static weft_status_t run_tail(struct weft_msg_run *r, const void *tail, size_t len,
                              struct weft_error *err)
{
    if (len % sizeof(float))
        return weft_error_refuse(err, WEFT_ERR_PROTOCOL,
                                 "run message: a %zu-byte tail is not a run of floats", len);
    r->n_embeds = len / sizeof(float);
    r->embeds = weft_malloc(len + sizeof(float));
    if (!r->embeds)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "run message: out of memory");
    if (len)
        memcpy(r->embeds, tail, len);
    return WEFT_OK;
}

/* The job key of a message that names a job (its first field), 0 for the others. */
static uint64_t job_key(unsigned type, const union weft_msg *m)
{
    switch (type) {
    case WEFT_MSG_RUN: return m->run.job;
    case WEFT_MSG_STEP: return m->step.job;
    case WEFT_MSG_IMAGE: return m->image.job;
    case WEFT_MSG_DONE: return m->done.job;
    case WEFT_MSG_CANCEL: return m->job.job;
    default: return 0;
    }
}

static void set_job_key(unsigned type, union weft_msg *m, uint64_t key)
{
    memset(m, 0, sizeof(*m));
    switch (type) {
    case WEFT_MSG_RUN: m->run.job = key; break;
    case WEFT_MSG_STEP: m->step.job = key; break;
    case WEFT_MSG_IMAGE: m->image.job = key; break;
    case WEFT_MSG_DONE: m->done.job = key; break;
    case WEFT_MSG_CANCEL: m->job.job = key; break;
    default: break;
    }
}

weft_status_t weft_msg_decode(unsigned type, const void *buf, size_t len, union weft_msg *msg,
                              struct weft_error *err)
{
    memset(msg, 0, sizeof(*msg));
    if (type == 0 || type >= WEFT_MSG_TYPE_COUNT)
        return weft_error_refuse(err, WEFT_ERR_PROTOCOL, "unknown message type %u", type);
    const char *name = weft_msg_name(type);
    struct weft_wire_r r;
    weft_wire_r_init(&r, buf, len);
    uint8_t version = weft_wire_get_u8(&r, "version");
    if (r.failed || version != WEFT_MSG_VERSION)
        return weft_error_refuse(err, WEFT_ERR_PROTOCOL,
                                 "%s message: version %u, this side speaks %d", name,
                                 (unsigned)version, WEFT_MSG_VERSION);
    struct codec c = {NULL, &r};
    weft_status_t st = fields(&c, type, msg);
    size_t tail_len;
    const void *tail = weft_wire_rest(&r, &tail_len);
    if (st == WEFT_OK && r.failed)
        st = weft_error_refuse(err, WEFT_ERR_PROTOCOL, "%s message: field %s is malformed",
                               name, r.failed);
    else if (st == WEFT_ERR_NOMEM)
        weft_error_refuse(err, st, "%s message: out of memory", name);
    if (st == WEFT_OK && type == WEFT_MSG_RUN)
        st = run_tail(&msg->run, tail, tail_len, err);
    else if (st == WEFT_OK && type == WEFT_MSG_IMAGE) {
        msg->image.png = tail;
        msg->image.png_len = tail_len;
    } else if (st == WEFT_OK && tail_len)
        st = weft_error_refuse(err, WEFT_ERR_PROTOCOL, "%s message: %zu bytes after its fields",
                               name, tail_len);
    if (st == WEFT_OK)
        st = weft_msg_check(type, msg, err);
    if (st != WEFT_OK) {
        /* keep only the key (read first), so a job's failure can still be answered */
        uint64_t key = job_key(type, msg);
        weft_msg_cleanup(type, msg);
        set_job_key(type, msg, key);
    }
    return st;
}

void weft_msg_cleanup(unsigned type, union weft_msg *msg)
{
    if (type != WEFT_MSG_RUN)
        return;
    for (int i = 0; msg->run.prompts && i < msg->run.n_prompts; i++)
        weft_free(msg->run.prompts[i].text);
    weft_free(msg->run.prompts);
    weft_free(msg->run.images);
    weft_free(msg->run.embeds);
    msg->run.prompts = NULL;
    msg->run.images = NULL;
    msg->run.embeds = NULL;
}
