/* The worker process (see agent.h). Two threads: the control thread owns the coordinator link
 * (UCX, transport/link.h), the bootstrap socket (its end means the coordinator is gone) and the
 * heartbeats; the executor thread owns the data-plane world and the runtime (model loads and
 * images take seconds to minutes) and talks to the control thread through two queues of typed
 * messages (control/msg.h). The control thread may revoke the world under the executor (the
 * coordinator reset the mesh, or was lost), so a collective with a lost peer ends at once. */
#include "worker/agent.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "control/boot.h"
#include "control/msg.h"
#include "transport/comm.h"
#include "transport/link.h"
#include "worker/inventory.h"
#include "worker/runtime.h"

/* ---------------------------------------------------------------------------------------- */
/* Queues between the threads                                                                */

struct qitem {
    struct qitem *next;
    unsigned type;
    union weft_msg *msg; /* owned (weft_msg_cleanup, then weft_free); NULL for none */
    void *tail;          /* IMAGE's PNG (free()) */
};

struct queue {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct qitem *head, *tail;
};

static void q_init(struct queue *q)
{
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->cond, NULL);
    q->head = q->tail = NULL;
}

static void msg_free(unsigned type, union weft_msg *m)
{
    if (m)
        weft_msg_cleanup(type, m);
    weft_free(m);
}

/* Takes msg and tail; false when out of memory (both freed then). */
static bool q_push(struct queue *q, unsigned type, union weft_msg *msg, void *tail)
{
    struct qitem *it = weft_calloc(1, sizeof(*it));
    if (!it) {
        msg_free(type, msg);
        free(tail);
        return false;
    }
    *it = (struct qitem){NULL, type, msg, tail};
    pthread_mutex_lock(&q->lock);
    if (q->tail)
        q->tail->next = it;
    else
        q->head = it;
    q->tail = it;
    pthread_cond_signal(&q->cond);
    pthread_mutex_unlock(&q->lock);
    return true;
}

/* Wait up to timeout_ms (-1: forever) for an item. */
static struct qitem *q_pop(struct queue *q, int timeout_ms)
{
    pthread_mutex_lock(&q->lock);
    if (!q->head && timeout_ms != 0) {
        if (timeout_ms < 0) {
            while (!q->head)
                pthread_cond_wait(&q->cond, &q->lock);
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += timeout_ms / 1000;
            ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
            if (ts.tv_nsec >= 1000000000L)
                ts.tv_sec++, ts.tv_nsec -= 1000000000L;
            while (!q->head && pthread_cond_timedwait(&q->cond, &q->lock, &ts) == 0)
                ;
        }
    }
    struct qitem *it = q->head;
    if (it) {
        q->head = it->next;
        if (!q->head)
            q->tail = NULL;
    }
    pthread_mutex_unlock(&q->lock);
    return it;
}

static void qitem_free(struct qitem *it)
{
    if (!it)
        return;
    msg_free(it->type, it->msg);
    free(it->tail);
    weft_free(it);
}

/* ---------------------------------------------------------------------------------------- */

struct agent {
    const struct weft_agent_opts *opts;
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    struct weft_runtime *rt;
    char id[WEFT_MSG_ID_MAX];
    int boot_fd;
    struct weft_link_host *host;
    struct weft_link *link;
    struct queue inbox;  /* control -> executor: ASSIGN, RUN, RESET, SHUTDOWN */
    struct queue outbox; /* executor -> control: ASSIGNED, STEP, IMAGE, DONE */
    int wake_fd;         /* eventfd: the executor queued a reply (the control thread sleeps on
                            it and on the link host's descriptor) */
    /* the data-plane world: created and destroyed by the executor, revoked by either thread;
     * the pointer changes under world_mu only */
    pthread_mutex_t world_mu;
    struct weft_transport *world;
    uint64_t world_epoch;
    uint64_t assigned_epoch;   /* the executor's: the epoch of the assignment it holds */
    atomic_ullong reset_epoch; /* RESET e: worlds of epochs before e are revoked */
    atomic_ullong cancel_job;  /* key of a job to stop, 0: none */
    atomic_int stop_all;       /* leaving: stop whatever runs */
    atomic_int quit;
    int exit_code;
    double last_heard;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Revoke the world when it belongs to an epoch before `before` (UINT64_MAX: any). */
static void world_revoke(struct agent *a, uint64_t before, const char *why)
{
    pthread_mutex_lock(&a->world_mu);
    if (a->world && a->world_epoch < before) {
        WEFT_LOG_INFO("worker", "data-plane world of epoch %llu revoked: %s",
                      (unsigned long long)a->world_epoch, why);
        weft_transport_revoke(a->world, WEFT_ERR_PEER_LOST);
    }
    pthread_mutex_unlock(&a->world_mu);
}

/* ---- executor ---------------------------------------------------------------------------- */

/* Queue a message for the coordinator (takes msg and tail). */
static void reply(struct agent *a, unsigned type, union weft_msg *msg, void *tail)
{
    if (!q_push(&a->outbox, type, msg, tail))
        WEFT_LOG_WARN("worker", "out of memory: a %s message was dropped", weft_msg_name(type));
    const uint64_t one = 1;
    if (write(a->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        WEFT_LOG_WARN("worker", "eventfd: %s", strerror(errno));
}

static union weft_msg *msg_new(void)
{
    return weft_calloc(1, sizeof(union weft_msg));
}

static void drop_world(struct agent *a)
{
    weft_runtime_detach(a->rt); /* the weights stay for a next assignment that can use them */
    pthread_mutex_lock(&a->world_mu);
    struct weft_transport *w = a->world;
    a->world = NULL;
    pthread_mutex_unlock(&a->world_mu);
    weft_transport_destroy(w);
}

static void assign_of_msg(const struct weft_msg_assign *m, struct weft_rt_assign *as)
{
    memset(as, 0, sizeof(*as));
    snprintf(as->model, sizeof(as->model), "%s", m->model);
    as->layout = m->layout;
    as->mesh_rank = m->world_rank - m->world_base;
    as->world_base = m->world_base;
    as->tp_full_then_shard = m->tp_full_then_shard;
    as->tp_plan = m->tp_plan;
    as->decode = m->decode;
    as->compute = (enum weft_dtype)m->compute;
    as->stage = (struct weft_rt_stage){m->stage.on,   m->stage.unit_first, m->stage.unit_last,
                                       m->stage.prev, m->stage.next,       m->stage.root,
                                       m->stage.clip, m->stage.t5};
}

static weft_status_t do_assign(struct agent *a, const struct weft_msg_assign *m,
                               struct weft_error *err)
{
    drop_world(a);
    /* the cores of this host are the plan's to share out, unless we were given a count (or
     * compute on a GPU) */
    if (m->threads > 0 && !a->opts->conf->kernels.threads && weft_kernels_is_cpu(a->K) &&
        m->threads != weft_kernels_cpu_threads(a->kc)) {
        WEFT_LOG_INFO("worker", "kernel threads %d -> %d (this worker's share of the host)",
                      weft_kernels_cpu_threads(a->kc), (int)m->threads);
        if (weft_kernels_cpu_set_threads(a->kc, m->threads) != WEFT_OK)
            return weft_error_refuse(err, WEFT_ERR_NOMEM,
                                     "out of memory for %d kernel threads", (int)m->threads);
    }
    if (m->world_size > 1) {
        struct weft_transport_opts to;
        weft_transport_opts_from_conf(&a->opts->conf->transport, &to);
        /* a process stopped for half the coordinator's patience has likely been dropped:
         * its world must not progress again (its peers may have freed what it would read) */
        to.freeze_ms = (int)(a->opts->conf->cluster.worker_timeout_ms / 2);
        struct weft_transport *w = NULL;
        weft_status_t st =
            weft_transport_create(&to, m->world_rank, m->world_size, m->rdv, &w, err);
        if (st != WEFT_OK)
            return st;
        pthread_mutex_lock(&a->world_mu);
        a->world = w;
        a->world_epoch = m->epoch;
        pthread_mutex_unlock(&a->world_mu);
        /* a RESET that came while the world was being built */
        world_revoke(a, atomic_load(&a->reset_epoch), "reset while it was being built");
    }
    weft_log_set_rank(m->world_rank);
    struct weft_rt_assign *as = weft_malloc(sizeof(*as));
    if (!as)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    assign_of_msg(m, as);
    weft_status_t st = weft_runtime_assign(a->rt, as, a->world, err);
    weft_free(as);
    return st;
}

struct run_ctx {
    struct agent *a;
    uint64_t job;
    int64_t image;
};

static void on_step(void *arg, int step, int steps, double seconds)
{
    struct run_ctx *rc = arg;
    union weft_msg *m = msg_new();
    if (!m)
        return; /* a lost step report is harmless */
    m->step = (struct weft_msg_step){rc->job, rc->image, step, steps, seconds};
    reply(rc->a, WEFT_MSG_STEP, m, NULL);
}

static int is_cancelled(void *arg)
{
    struct run_ctx *rc = arg;
    return atomic_load(&rc->a->cancel_job) == rc->job || atomic_load(&rc->a->stop_all);
}

/* Whether the RUN does true CFG: negative prompts and a scale above 1 (FluxPipeline). */
static bool run_cfg(const struct weft_msg_run *r)
{
    return weft_job_true_cfg(r->n_negatives, r->true_cfg_scale);
}

/* The text prompts of a RUN's images encoded over the replica (its first rank encodes, in
 * prompt order on every rank), each into text[i]; embeds[i] and pooled[i] point at each
 * prompt's embeddings (from the text, or in the RUN's tail). A negative prompt is encoded when
 * its prompt is and true CFG is on. */
static weft_status_t encode_texts(struct agent *a, const struct weft_msg_run *r,
                                  struct weft_prompt_embeds *text, const float **embeds,
                                  const float **pooled, struct weft_error *err)
{
    weft_status_t st = WEFT_OK;
    size_t off = 0;
    const int positive = r->n_prompts - r->n_negatives;
    for (int i = 0; i < r->n_prompts && st == WEFT_OK; i++) {
        const struct weft_msg_prompt *p = &r->prompts[i];
        const int of = i < positive ? i : i - positive;
        bool used = i < positive || run_cfg(r); /* only the prompts of this replica's images */
        bool here = false;
        for (int k = 0; k < r->n_images && used && !here; k++)
            here = r->images[k].prompt == of;
        used = used && here;
        if (p->is_text && used) {
            st = weft_runtime_encode(a->rt, p->text, p->tokens, &text[i], err);
            embeds[i] = text[i].embeds;
            pooled[i] = text[i].pooled;
            continue;
        }
        embeds[i] = r->embeds + off;
        pooled[i] = r->embeds + off + p->tokens * p->joint;
        off += weft_msg_prompt_floats(p);
    }
    return st;
}

/* Every image of a RUN in order; the decoding rank sends each one. */
static weft_status_t do_run(struct agent *a, const struct weft_msg_run *r, struct weft_error *err)
{
    const float **embeds = weft_calloc((size_t)r->n_prompts, sizeof(*embeds));
    const float **pooled = weft_calloc((size_t)r->n_prompts, sizeof(*pooled));
    struct weft_prompt_embeds *text = weft_calloc((size_t)r->n_prompts, sizeof(*text));
    if (!embeds || !pooled || !text) {
        weft_free(text);
        weft_free((void *)embeds);
        weft_free((void *)pooled);
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    }
    weft_status_t st = encode_texts(a, r, text, embeds, pooled, err);
    for (int k = 0; k < r->n_images && st == WEFT_OK; k++) {
        const struct weft_msg_image_ref *ref = &r->images[k];
        const struct weft_msg_prompt *p = &r->prompts[ref->prompt];
        const int neg = run_cfg(r) ? r->n_prompts - r->n_negatives + ref->prompt : -1;
        const struct weft_msg_prompt *np = neg >= 0 ? &r->prompts[neg] : NULL;
        struct run_ctx rc = {a, r->job, ref->index};
        const struct weft_rt_image img = {
            .prompt_embeds = embeds[ref->prompt],
            .s_txt = p->tokens,
            .pooled = pooled[ref->prompt],
            .height = r->height,
            .width = r->width,
            .steps = (int)r->steps,
            .guidance = (float)r->guidance,
            .neg_prompt_embeds = np ? embeds[neg] : NULL,
            .neg_pooled = np ? pooled[neg] : NULL,
            .true_cfg_scale = np ? (float)r->true_cfg_scale : 1.0f,
            .seed = r->seed,
            .noise_index = ref->index,
            .decode = true,
            .png_prompt = p->is_text ? p->text : p->name,
            .png_model = r->model_name[0] ? r->model_name : NULL,
            .png_job = r->job_id,
            .png_negative_prompt = !np ? NULL : np->is_text ? np->text : np->name,
            .png_prompt_index = ref->prompt,
        };
        const struct weft_model *mod = weft_runtime_model(a->rt);
        if (mod && (p->joint != mod->flux.joint_attention_dim ||
                    p->pooled != mod->flux.pooled_projection_dim)) {
            st = weft_error_set(err, WEFT_ERR_PROTOCOL, "worker",
                                "prompt %d is [%lld, %lld] + [%lld]; the model takes [T, %lld] "
                                "+ [%lld]", ref->prompt, (long long)p->tokens,
                                (long long)p->joint, (long long)p->pooled,
                                (long long)mod->flux.joint_attention_dim,
                                (long long)mod->flux.pooled_projection_dim);
            break;
        }
        if (np && np->tokens != p->tokens) {
            st = weft_error_set(err, WEFT_ERR_PROTOCOL, "worker",
                                "prompt %d has %lld tokens, its negative prompt %lld",
                                ref->prompt, (long long)p->tokens, (long long)np->tokens);
            break;
        }
        struct weft_rt_result res;
        st = weft_runtime_image(a->rt, &img, on_step, is_cancelled, &rc, &res, err);
        if (st != WEFT_OK || !res.png) {
            weft_rt_result_cleanup(&res);
            continue;
        }
        union weft_msg *m = msg_new();
        if (!m) {
            weft_rt_result_cleanup(&res);
            st = weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
            break;
        }
        m->image = (struct weft_msg_image){r->job, ref->index, (int32_t)r->width,
                                           (int32_t)r->height, res.denoise_s,
                                           res.decode_s + res.png_s, res.png, res.png_len};
        reply(a, WEFT_MSG_IMAGE, m, res.png); /* the PNG travels with its message */
        res.png = NULL;
        weft_rt_result_cleanup(&res);
    }
    for (int i = 0; i < r->n_prompts; i++)
        weft_prompt_embeds_cleanup(&text[i]);
    weft_free(text);
    weft_free((void *)embeds);
    weft_free((void *)pooled);
    return st;
}

/* The job's collectives on this rank, for the coordinator's metrics. */
static void comm_stats(struct weft_msg_done *d, const struct weft_par_stats *before,
                       const struct weft_par_stats *after)
{
    for (int g = 0; g < WEFT_MESH_GROUP_COUNT; g++) {
        for (int op = 0; op < WEFT_PAR_OP_COUNT; op++) {
            long calls = after->calls[g][op] - before->calls[g][op];
            if (calls <= 0 || d->n_comm == WEFT_MSG_COMM_MAX)
                continue;
            struct weft_msg_comm *c = &d->comm[d->n_comm++];
            snprintf(c->group, sizeof(c->group), "%s", weft_mesh_group_name(g));
            snprintf(c->op, sizeof(c->op), "%s", weft_par_op_name(op));
            c->seconds = after->seconds[g][op] - before->seconds[g][op];
            c->bytes = after->bytes[g][op] - before->bytes[g][op];
            c->calls = (uint64_t)calls;
        }
    }
}

static void done(struct agent *a, uint64_t job, weft_status_t st, const struct weft_error *err,
                 const struct weft_par_stats *before, const struct weft_rt_text_stats *text)
{
    union weft_msg *m = msg_new();
    if (!m) {
        WEFT_LOG_ERROR("worker", "out of memory: job %llu's end cannot be reported",
                       (unsigned long long)job);
        return;
    }
    m->done.job = job;
    m->done.status = st;
    snprintf(m->done.error, sizeof(m->done.error), "%s",
             st != WEFT_OK && st != WEFT_ERR_CANCELLED ? weft_error_text(err) : "");
    m->done.peer = st != WEFT_OK && err && err->peer;
    if (before) {
        struct weft_par_stats after;
        weft_runtime_comm_stats(a->rt, &after);
        comm_stats(&m->done, before, &after);
    }
    if (text) {
        struct weft_rt_text_stats now;
        weft_runtime_text_stats(a->rt, &now);
        m->done.prompt_cache_hits = now.hits - text->hits;
        m->done.prompt_cache_misses = now.misses - text->misses;
    }
    reply(a, WEFT_MSG_DONE, m, NULL);
}

static void exec_run(struct agent *a, struct qitem *it)
{
    const struct weft_msg_run *r = &it->msg->run;
    struct weft_error err = WEFT_ERROR_INIT;
    struct weft_par_stats before;
    weft_runtime_comm_stats(a->rt, &before);
    struct weft_rt_text_stats text;
    weft_runtime_text_stats(a->rt, &text);
    weft_status_t st;
    if (!weft_runtime_model(a->rt))
        st = weft_error_set(&err, WEFT_ERR_PROTOCOL, "worker",
                            "job %s came to a worker with no assignment", r->job_id);
    else if (r->epoch != a->assigned_epoch)
        st = weft_error_set(&err, WEFT_ERR_PROTOCOL, "worker",
                            "job %s is for epoch %llu; this worker holds epoch %llu", r->job_id,
                            (unsigned long long)r->epoch, (unsigned long long)a->assigned_epoch);
    else
        st = do_run(a, r, &err);
    if (WEFT_STATUS_IS_PEER_LOST(st))
        drop_world(a); /* the world is failed for good: wait for a new assignment */
    done(a, r->job, st, &err, &before, &text);
}

static void exec_assign(struct agent *a, struct qitem *it)
{
    const struct weft_msg_assign *m = &it->msg->assign;
    struct weft_error err = WEFT_ERROR_INIT;
    a->assigned_epoch = m->epoch;
    weft_status_t st = do_assign(a, m, &err);
    union weft_msg *r = msg_new();
    if (!r) {
        WEFT_LOG_ERROR("worker", "out of memory: the assignment's outcome cannot be reported");
        return;
    }
    r->assigned.epoch = m->epoch;
    r->assigned.status = st;
    snprintf(r->assigned.error, sizeof(r->assigned.error), "%s", weft_error_text(&err));
    weft_runtime_bytes(a->rt, &r->assigned.transformer_bytes, &r->assigned.vae_bytes);
    r->assigned.text_bytes = weft_runtime_text_bytes(a->rt);
    r->assigned.kept_bytes = st == WEFT_OK ? weft_runtime_kept_bytes(a->rt) : 0;
    r->assigned.threads = weft_kernels_is_cpu(a->K) ? weft_kernels_cpu_threads(a->kc) : 0;
    reply(a, WEFT_MSG_ASSIGNED, r, NULL);
}

static void *executor_main(void *arg)
{
    struct agent *a = arg;
    for (;;) {
        struct qitem *it = q_pop(&a->inbox, -1);
        if (it->type == WEFT_MSG_SHUTDOWN) {
            qitem_free(it);
            break;
        }
        if (it->type == WEFT_MSG_ASSIGN)
            exec_assign(a, it);
        else if (it->type == WEFT_MSG_RUN)
            exec_run(a, it);
        else /* RESET */
            drop_world(a);
        qitem_free(it);
    }
    drop_world(a);
    return NULL;
}

/* ---- control thread ---------------------------------------------------------------------- */

static weft_status_t send_msg(struct agent *a, unsigned type, const union weft_msg *m)
{
    void *buf;
    size_t len;
    struct weft_error err = WEFT_ERROR_INIT;
    weft_status_t st = weft_msg_encode(type, m, &buf, &len, &err);
    if (st != WEFT_OK) {
        WEFT_LOG_ERROR("worker", "cannot send a %s message: %s", weft_msg_name(type),
                       weft_error_text(&err));
        return st;
    }
    st = weft_link_send(a->link, (uint16_t)type, buf, len);
    weft_free(buf);
    return st;
}

/* A RUN that cannot be decoded is answered with its job's DONE (when its key could be read),
 * so the coordinator never waits for it; anything else malformed ends the session. */
static void on_bad_msg(struct agent *a, unsigned type, const union weft_msg *m,
                       const struct weft_error *err)
{
    WEFT_LOG_ERROR("worker", "the coordinator sent a malformed %s message: %s",
                   weft_msg_name(type), weft_error_text(err));
    if (type == WEFT_MSG_RUN && m->run.job) {
        union weft_msg d = {.done = {.job = m->run.job, .status = WEFT_ERR_PROTOCOL}};
        snprintf(d.done.error, sizeof(d.done.error), "worker %s: %s", a->id,
                 weft_error_text(err));
        (void)send_msg(a, WEFT_MSG_DONE, &d);
        return;
    }
    atomic_store(&a->quit, 1);
}

static void on_msg(struct weft_link *link, uint16_t type, const void *data, size_t len,
                   void *arg)
{
    (void)link;
    struct agent *a = arg;
    a->last_heard = now_s();
    union weft_msg *m = msg_new();
    if (!m) {
        WEFT_LOG_ERROR("worker", "out of memory: a %s message was dropped", weft_msg_name(type));
        atomic_store(&a->quit, 1); /* the coordinator would wait for an answer forever */
        return;
    }
    struct weft_error err = WEFT_ERROR_INIT;
    if (weft_msg_decode(type, data, len, m, &err) != WEFT_OK) {
        on_bad_msg(a, type, m, &err);
        msg_free(type, m);
        return;
    }
    switch (type) {
    case WEFT_MSG_PING:
        break;
    case WEFT_MSG_CANCEL:
        atomic_store(&a->cancel_job, m->job.job);
        break;
    case WEFT_MSG_SHUTDOWN:
        atomic_store(&a->quit, 1);
        a->exit_code = 0;
        break;
    case WEFT_MSG_RESET:
        /* the mesh is gone: a collective with a lost peer must not wait for its deadline;
         * then the executor drops the world */
        atomic_store(&a->reset_epoch, m->epoch.epoch);
        world_revoke(a, m->epoch.epoch, "the coordinator reset the mesh");
        /* fall through */
    case WEFT_MSG_ASSIGN:
    case WEFT_MSG_RUN:
        if (type == WEFT_MSG_RUN)
            atomic_store(&a->cancel_job, 0);
        if (!q_push(&a->inbox, type, m, NULL))
            atomic_store(&a->quit, 1);
        return;
    default:
        WEFT_LOG_WARN("worker", "coordinator sent an unexpected %s message", weft_msg_name(type));
    }
    msg_free(type, m);
}

static void on_down(struct weft_link *link, weft_status_t why, void *arg)
{
    (void)link;
    struct agent *a = arg;
    WEFT_LOG_ERROR("worker", "lost the coordinator's control link: %s", weft_status_str(why));
    atomic_store(&a->quit, 1);
    a->exit_code = 1;
}

static int connect_tcp(const char *hostport, double deadline, struct weft_error *err)
{
    char host[256];
    const char *colon = strrchr(hostport, ':');
    if (!colon || (size_t)(colon - hostport) >= sizeof(host)) {
        weft_error_set(err, WEFT_ERR_CONFIG, "worker",
                       "coordinator address '%s': expected host:port", hostport);
        return -1;
    }
    memcpy(host, hostport, (size_t)(colon - hostport));
    host[colon - hostport] = '\0';
    int warned = 0;
    for (;;) {
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
        int rc = getaddrinfo(host, colon + 1, &hints, &res);
        int fd = -1;
        for (struct addrinfo *ai = res; rc == 0 && ai && fd < 0; ai = ai->ai_next) {
            fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
            if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
                close(fd);
                fd = -1;
            }
        }
        if (res)
            freeaddrinfo(res);
        if (fd >= 0)
            return fd;
        if (now_s() > deadline) {
            weft_error_set(err, WEFT_ERR_UNREACHABLE, "worker",
                           "cannot reach the coordinator at %s", hostport);
            return -1;
        }
        if (!warned++)
            WEFT_LOG_INFO("worker", "waiting for the coordinator at %s", hostport);
        usleep(100000);
    }
}

static cJSON *inventory(struct agent *a)
{
    cJSON *h = cJSON_CreateObject();
    char host[256] = "?";
    gethostname(host, sizeof(host) - 1);
    struct sysinfo si;
    cJSON_AddStringToObject(h, "host", host);
    cJSON_AddNumberToObject(h, "pid", getpid());
    char device[32];
    weft_device_name(&a->opts->device, device, sizeof(device));
    cJSON_AddStringToObject(h, "device", device);
    /* a GPU worker's CPU threads are not the plan's to share out */
    const bool cpu = weft_kernels_is_cpu(a->K);
    cJSON_AddNumberToObject(h, "threads", cpu ? weft_kernels_cpu_threads(a->kc) : 0);
    cJSON_AddBoolToObject(h, "threads_fixed", !cpu || a->opts->conf->kernels.threads != 0);
    cJSON_AddNumberToObject(h, "cores", weft_kernels_cpu_usable_cores());
    char boot_id[64] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r"); /* one per booted machine */
    if (f) {
        if (fgets(boot_id, sizeof(boot_id), f))
            boot_id[strcspn(boot_id, "\n")] = '\0';
        (void)fclose(f); /* read only */
    }
    if (boot_id[0])
        cJSON_AddStringToObject(h, "host_id", boot_id);
    /* "memory" is the device's (what device_map plans with): a GPU's own, else the host's (its
     * cgroup's limit where that is less), or the [worker] memory budget when that is less */
    struct weft_gpu_info gpu;
    const bool on_gpu = a->opts->device.kind == WEFT_DEVICE_CUDA &&
                        weft_gpu_info(a->opts->device.index, &gpu) == WEFT_OK;
    uint64_t memory = on_gpu ? gpu.memory : 0;
    if (sysinfo(&si) == 0) {
        /* the host's RAM as this process may have it: bounded by its cgroup's limit */
        uint64_t ram = (uint64_t)si.totalram * si.mem_unit;
        const uint64_t limit = weft_inventory_cgroup_memory("/sys/fs/cgroup", "/proc/self/cgroup");
        ram = limit && limit < ram ? limit : ram;
        cJSON_AddNumberToObject(h, "host_memory", (double)ram);
        memory = on_gpu ? memory : ram;
    }
    const uint64_t budget = a->opts->conf->worker.memory; /* [worker] memory: at most this */
    if (budget && (!memory || budget < memory))
        memory = budget;
    if (memory)
        cJSON_AddNumberToObject(h, "memory", (double)memory);
    cJSON_AddStringToObject(h, "launcher", a->opts->launch.source);
    cJSON_AddNumberToObject(h, "launch_rank", a->opts->launch.rank);
    cJSON_AddNumberToObject(h, "local_rank", a->opts->launch.local_rank);
    cJSON_AddStringToObject(h, "version", WEFT_VERSION);
    (void)weft_inventory_gpus_add(h); /* best effort, like the NICs */
    (void)weft_inventory_nics_add(h); /* best effort: a failed source is logged, the rest kept */
    return h;
}

/* One try of the authenticated bootstrap on a fresh connection: challenge, proof both ways,
 * ids and link addresses. */
static weft_status_t boot_once(struct agent *a, const void *addr, size_t alen,
                               struct weft_boot_accept *acc, struct weft_error *err)
{
    const int tmo = 10000;
    cJSON *json = NULL;
    struct weft_boot_challenge ch;
    weft_status_t st = weft_boot_recv(a->boot_fd, tmo, &json, err);
    if (st == WEFT_OK)
        st = weft_boot_challenge_decode(json, &ch, err);
    cJSON_Delete(json);
    json = NULL;
    struct weft_boot_hello h = {.link = (void *)addr, .link_len = alen};
    if (st == WEFT_OK && (st = weft_boot_new_challenge(h.challenge)) != WEFT_OK)
        weft_error_refuse(err, st, "no randomness for a challenge");
    char *text = NULL;
    if (st == WEFT_OK) {
        weft_boot_proof(a->opts->secret, "worker", ch.challenge, h.response);
        h.inventory = inventory(a);
        text = weft_boot_hello_encode(&h);
        cJSON_Delete(h.inventory);
        st = text ? weft_boot_send(a->boot_fd, text, tmo, err)
                  : weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
        weft_free(text);
    }
    if (st == WEFT_OK && (st = weft_boot_recv(a->boot_fd, tmo, &json, err)) == WEFT_OK)
        st = weft_boot_accept_decode(json, acc, err);
    cJSON_Delete(json);
    if (st != WEFT_OK)
        return st;
    if (!acc->accepted) {
        st = weft_error_set(err, WEFT_ERR_AUTH, "worker", "the coordinator refused this worker: "
                            "%s", acc->error);
    } else {
        char want[WEFT_BOOT_HEX];
        weft_boot_proof(a->opts->secret, "coordinator", h.challenge, want);
        if (!weft_boot_proof_ok(acc->response, want))
            st = weft_error_set(err, WEFT_ERR_AUTH, "worker",
                                "the coordinator did not prove it knows the cluster secret");
    }
    if (st != WEFT_OK)
        weft_boot_accept_cleanup(acc);
    return st;
}

/* Join: connect and bootstrap until the join deadline. A coordinator that sheds load (too many
 * connections joining at once) closes the connection before its challenge: try again. */
static weft_status_t bootstrap(struct agent *a, struct weft_boot_accept *acc,
                               struct weft_error *err)
{
    const void *addr;
    size_t alen;
    weft_status_t st = weft_link_host_address(a->host, &addr, &alen);
    if (st != WEFT_OK)
        return weft_error_refuse(err, st, "no UCX address for the control link");
    const double deadline = now_s() + (double)a->opts->conf->cluster.join_timeout_ms / 1e3;
    for (int attempt = 0;; attempt++) {
        weft_error_clear(err);
        a->boot_fd = connect_tcp(a->opts->coordinator, deadline, err);
        if (a->boot_fd < 0)
            return err->status;
        st = boot_once(a, addr, alen, acc, err);
        if (st != WEFT_ERR_PEER_LOST || now_s() > deadline)
            break;
        close(a->boot_fd);
        a->boot_fd = -1;
        if (attempt == 0)
            WEFT_LOG_INFO("worker", "the coordinator closed the bootstrap (%s); trying again",
                          weft_error_text(err));
        usleep((useconds_t)(100000 + 50000 * (attempt % 8)));
    }
    if (st != WEFT_OK)
        WEFT_LOG_ERROR("worker", "%s", weft_error_text(err));
    else
        snprintf(a->id, sizeof(a->id), "%s", acc->id);
    return st;
}

/* The bootstrap socket closes when the coordinator dies. */
static bool coordinator_gone(struct agent *a)
{
    struct pollfd p = {a->boot_fd, POLLIN, 0};
    if (poll(&p, 1, 0) <= 0)
        return false;
    char b;
    return recv(a->boot_fd, &b, 1, MSG_DONTWAIT | MSG_PEEK) == 0 ||
           (p.revents & (POLLHUP | POLLERR));
}

static void control_loop(struct agent *a)
{
    const double hb = (double)a->opts->conf->cluster.heartbeat_ms / 1e3;
    const double lost = (double)a->opts->conf->cluster.worker_timeout_ms / 1e3;
    double next_ping = 0;
    a->last_heard = now_s();
    while (!atomic_load(&a->quit)) {
        /* sleep until the link has work or the executor a reply (a reply must not wait for a
         * timeout: it is a job's step, image or end); 50 ms bounds the heartbeat checks */
        struct pollfd fds[2] = {{weft_link_host_fd(a->host), POLLIN, 0},
                                {a->wake_fd, POLLIN, 0}};
        if (poll(fds, 2, 50) < 0 && errno != EINTR)
            WEFT_LOG_WARN("worker", "poll: %s", strerror(errno));
        uint64_t n;
        if (fds[1].revents & POLLIN)
            (void)!read(a->wake_fd, &n, sizeof(n));
        (void)weft_link_host_progress(a->host);
        struct qitem *it;
        while ((it = q_pop(&a->outbox, 0))) {
            if (send_msg(a, it->type, it->msg) != WEFT_OK)
                atomic_store(&a->quit, 1);
            qitem_free(it);
        }
        double now = now_s();
        if (now >= next_ping) {
            if (send_msg(a, WEFT_MSG_PING, NULL) != WEFT_OK)
                atomic_store(&a->quit, 1);
            next_ping = now + hb;
        }
        if (coordinator_gone(a) || now - a->last_heard > lost) {
            WEFT_LOG_ERROR("worker", "lost the coordinator (%s)",
                           now - a->last_heard > lost ? "silent" : "connection closed");
            a->exit_code = 1;
            break;
        }
    }
}

/* One membership: join, serve, and take everything down when it ends. */
static weft_status_t session(struct agent *a, int number)
{
    atomic_store(&a->quit, 0);
    atomic_store(&a->stop_all, 0);
    atomic_store(&a->reset_epoch, 0);
    a->exit_code = 1;
    if (number > 0)
        WEFT_LOG_WARN("worker", "joining the coordinator at %s again (for up to %lld ms)",
                      a->opts->coordinator, (long long)a->opts->conf->cluster.join_timeout_ms);
    struct weft_error err = WEFT_ERROR_INIT;
    struct weft_boot_accept acc = {0};
    weft_status_t st = bootstrap(a, &acc, &err);
    if (st == WEFT_OK)
        st = weft_link_connect(a->host, acc.link, acc.link_len, on_msg, on_down, a, &a->link);
    weft_boot_accept_cleanup(&acc);
    if (st == WEFT_OK) {
        union weft_msg hello;
        snprintf(hello.hello.id, sizeof(hello.hello.id), "%s", a->id);
        st = send_msg(a, WEFT_MSG_HELLO, &hello);
    }
    pthread_t exec;
    bool exec_started = false;
    if (st == WEFT_OK) {
        WEFT_LOG_INFO("worker", "joined the coordinator at %s as %s", a->opts->coordinator,
                      a->id);
        exec_started = pthread_create(&exec, NULL, executor_main, a) == 0;
        if (exec_started)
            control_loop(a);
        else
            st = WEFT_ERR_NOMEM;
    }
    if (exec_started) {
        /* this membership is over: whatever the executor runs must stop now, without waiting
         * on peers that have moved on (or are gone) */
        atomic_store(&a->stop_all, 1);
        world_revoke(a, UINT64_MAX, "this worker left the mesh");
        q_push(&a->inbox, WEFT_MSG_SHUTDOWN, NULL, NULL);
        pthread_join(exec, NULL);
    }
    struct qitem *it;
    while ((it = q_pop(&a->outbox, 0)))
        qitem_free(it);
    while ((it = q_pop(&a->inbox, 0)))
        qitem_free(it);
    weft_link_close(a->link);
    a->link = NULL;
    if (a->boot_fd >= 0)
        close(a->boot_fd);
    a->boot_fd = -1;
    return st;
}

int weft_agent_main(const struct weft_agent_opts *opts)
{
    struct agent a = {.opts = opts, .boot_fd = -1, .exit_code = 1,
                      .wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)};
    if (a.wake_fd < 0) {
        WEFT_LOG_ERROR("worker", "eventfd: %s", strerror(errno));
        return 1;
    }
    q_init(&a.inbox);
    q_init(&a.outbox);
    pthread_mutex_init(&a.world_mu, NULL);
    char why[300], device[32];
    weft_device_name(&opts->device, device, sizeof(device));
    weft_status_t st = weft_kernels_create(&opts->device, (int)opts->conf->kernels.threads, &a.K,
                                           &a.kc, why, sizeof(why));
    if (st != WEFT_OK) {
        WEFT_LOG_ERROR("worker", "%s", why);
    } else {
        char what[300];
        a.K->describe(a.kc, what, sizeof(what));
        WEFT_LOG_INFO("worker", "computing on %s: %s", device, what);
    }
    const struct weft_rt_opts ro = {a.K, a.kc, false, opts->conf->model.prompt_cache};
    if (st == WEFT_OK)
        st = weft_runtime_create(&ro, &a.rt);
    if (st == WEFT_OK)
        st = weft_link_host_create(opts->conf->transport.tls[0] ? opts->conf->transport.tls : NULL,
                                   NULL, NULL, &a.host);
    /* Join; when the coordinator is lost (it died or was restarted), drop everything it
     * assigned and join again, for up to [cluster] join_timeout_ms like the first time. */
    for (int n = 0; st == WEFT_OK; n++) {
        st = session(&a, n);
        if (st != WEFT_OK || a.exit_code == 0)
            break; /* told to stop, or could not join */
    }
    weft_link_host_destroy(a.host);
    close(a.wake_fd);
    weft_runtime_destroy(a.rt);
    if (a.K)
        a.K->destroy(a.kc);
    pthread_mutex_destroy(&a.world_mu);
    return st != WEFT_OK ? 1 : a.exit_code;
}
