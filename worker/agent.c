/* The worker process (see agent.h). Two threads: the control thread owns the coordinator link
 * (UCX, transport/link.h), the bootstrap socket (its end means the coordinator is gone) and the
 * heartbeats; the executor thread owns the data-plane world and the runtime (model loads and
 * images take seconds to minutes) and talks to the control thread through two queues. */
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
#include "common/sha256.h"
#include "control/proto.h"
#include "model/json_get.h"
#include "transport/comm.h"
#include "transport/link.h"
#include "worker/inventory.h"
#include "worker/runtime.h"

/* ---------------------------------------------------------------------------------------- */
/* Queues between the threads                                                                */

struct qitem {
    struct qitem *next;
    unsigned type;
    cJSON *json;
    void *tail;
    size_t tail_len;
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

/* Takes json and tail. */
static void q_push(struct queue *q, unsigned type, cJSON *json, void *tail, size_t tail_len)
{
    struct qitem *it = weft_calloc(1, sizeof(*it));
    if (!it) { /* out of memory: drop it; a lost STEP is harmless, the rest is retried */
        cJSON_Delete(json);
        free(tail);
        return;
    }
    *it = (struct qitem){NULL, type, json, tail, tail_len};
    pthread_mutex_lock(&q->lock);
    if (q->tail)
        q->tail->next = it;
    else
        q->head = it;
    q->tail = it;
    pthread_cond_signal(&q->cond);
    pthread_mutex_unlock(&q->lock);
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
    cJSON_Delete(it->json);
    free(it->tail);
    weft_free(it);
}

/* ---------------------------------------------------------------------------------------- */

struct agent {
    const struct weft_agent_opts *opts;
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    struct weft_runtime *rt;
    struct weft_transport *world;
    char id[64];
    int boot_fd;
    struct weft_link_host *host;
    struct weft_link *link;
    struct queue inbox;  /* control -> executor: ASSIGN, RUN, RESET, SHUTDOWN */
    struct queue outbox; /* executor -> control: ASSIGNED, STEP, IMAGE, DONE */
    int wake_fd;         /* eventfd: the executor queued a reply (the control thread sleeps on
                            it and on the link host's descriptor) */
    atomic_ullong cancel_job; /* key of a job to stop, 0: none */
    atomic_int stop_all;      /* leaving: stop whatever runs */
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

/* ---- executor ---------------------------------------------------------------------------- */

static void reply(struct agent *a, unsigned type, cJSON *json, void *tail, size_t tail_len)
{
    q_push(&a->outbox, type, json, tail, tail_len);
    const uint64_t one = 1;
    if (write(a->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        WEFT_LOG_WARN("worker", "eventfd: %s", strerror(errno));
}

static void drop_world(struct agent *a)
{
    weft_runtime_unassign(a->rt);
    weft_transport_destroy(a->world);
    a->world = NULL;
}

static weft_status_t do_assign(struct agent *a, const cJSON *j)
{
    struct weft_rt_assign as = {0};
    const char *model, *rdv, *rotation;
    int64_t epoch, size, rank, base, dp, ring, uly, tp;
    bool anything, decode, full;
    weft_status_t st;
    const char *o = "assign";
    if ((st = weft_json_get_int(j, "epoch", -1, 0, INT64_MAX, o, &epoch)) ||
        (st = weft_json_get_string(j, "model", NULL, o, &model)) ||
        (st = weft_json_get_string(j, "rdv", "", o, &rdv)) ||
        (st = weft_json_get_int(j, "world_size", 1, 1, 65536, o, &size)) ||
        (st = weft_json_get_int(j, "world_rank", 0, 0, 65535, o, &rank)) ||
        (st = weft_json_get_int(j, "world_base", 0, 0, 65535, o, &base)) ||
        (st = weft_json_get_int(j, "dp", 1, 1, 65536, o, &dp)) ||
        (st = weft_json_get_int(j, "ring", 1, 1, 65536, o, &ring)) ||
        (st = weft_json_get_int(j, "ulysses", 1, 1, 65536, o, &uly)) ||
        (st = weft_json_get_int(j, "tp", 1, 1, 65536, o, &tp)) ||
        (st = weft_json_get_bool(j, "anything", false, o, &anything)) ||
        (st = weft_json_get_string(j, "rotation", "allgather", o, &rotation)) ||
        (st = weft_json_get_bool(j, "tp_full_then_shard", false, o, &full)) ||
        (st = weft_json_get_bool(j, "decode", false, o, &decode)))
        return st;
    if (!model || strlen(model) >= sizeof(as.model) || rank >= size) {
        WEFT_LOG_ERROR("worker", "assign: bad model or rank");
        return WEFT_ERR_PROTOCOL;
    }
    snprintf(as.model, sizeof(as.model), "%s", model);
    as.mesh = (struct weft_mesh){(int)dp, (int)ring, (int)uly, (int)tp};
    as.mesh_rank = (int)(rank - base);
    as.world_base = (int)base;
    as.cp = (struct weft_cp_layout){(int)ring, (int)uly, anything,
                                    strcmp(rotation, "p2p") == 0 ? WEFT_RING_P2P
                                                                 : WEFT_RING_ALLGATHER};
    as.tp_full_then_shard = full;
    as.decode = decode;
    const cJSON *stage = cJSON_GetObjectItemCaseSensitive(j, "stage");
    if (stage) {
        int64_t pp, first, last, prev, next, root;
        const char *so = "assign.stage";
        if ((st = weft_json_get_int(stage, "stages", 1, 1, 65536, so, &pp)) ||
            (st = weft_json_get_int(stage, "unit_first", 0, 0, 1 << 20, so, &first)) ||
            (st = weft_json_get_int(stage, "unit_last", 0, 0, 1 << 20, so, &last)) ||
            (st = weft_json_get_int(stage, "prev", -1, -1, 65535, so, &prev)) ||
            (st = weft_json_get_int(stage, "next", -1, -1, 65535, so, &next)) ||
            (st = weft_json_get_int(stage, "root", 0, 0, 65535, so, &root)))
            return st;
        as.mesh.pp = (int)pp;
        as.stage = (struct weft_flux_stage){true, (int)first, (int)last, (int)prev, (int)next,
                                            (int)root};
    }
    const cJSON *plan = cJSON_GetObjectItemCaseSensitive(j, "tp_plan");
    for (const cJSON *e = plan ? plan->child : NULL; e && as.tp_plan.n < WEFT_CONF_MAP_MAX;
         e = e->next) {
        if (!cJSON_IsString(e))
            return WEFT_ERR_PROTOCOL;
        struct weft_conf_entry *ce = &as.tp_plan.e[as.tp_plan.n++];
        snprintf(ce->key, sizeof(ce->key), "%s", e->string);
        snprintf(ce->value, sizeof(ce->value), "%s", e->valuestring);
        snprintf(ce->origin, sizeof(ce->origin), "the coordinator's [tp_plan]");
    }
    if (as.mesh_rank < 0 || as.mesh_rank >= weft_mesh_size(&as.mesh) ||
        base + weft_mesh_size(&as.mesh) > size) {
        WEFT_LOG_ERROR("worker", "assign: rank %lld is not in the mesh", (long long)rank);
        return WEFT_ERR_PROTOCOL;
    }
    drop_world(a);
    if (size > 1) {
        struct weft_transport_opts to;
        weft_transport_opts_from_conf(&a->opts->conf->transport, &to);
        if ((st = weft_transport_create(&to, (int)rank, (int)size, rdv, &a->world)) != WEFT_OK)
            return st;
    }
    weft_log_set_rank((int)rank);
    return weft_runtime_assign(a->rt, &as, a->world);
}

struct run_ctx {
    struct agent *a;
    uint64_t job;
    int image;
};

static void on_step(void *arg, int step, int steps, double seconds)
{
    struct run_ctx *rc = arg;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "job", (double)rc->job);
    cJSON_AddNumberToObject(j, "image", rc->image);
    cJSON_AddNumberToObject(j, "step", step);
    cJSON_AddNumberToObject(j, "steps", steps);
    cJSON_AddNumberToObject(j, "seconds", seconds);
    reply(rc->a, WEFT_MSG_STEP, j, NULL, 0);
}

static int is_cancelled(void *arg)
{
    struct run_ctx *rc = arg;
    return atomic_load(&rc->a->cancel_job) == rc->job || atomic_load(&rc->a->stop_all);
}

/* RUN: {"job", "height", "width", "steps", "guidance", "seed", "decode", "prompts": [{"s_txt",
 * "joint", "pooled", "name"}], "images": [[index, prompt], ...]}; tail: per prompt its
 * prompt_embeds then pooled floats. */
static weft_status_t do_run(struct agent *a, const cJSON *j, const void *tail, size_t tail_len,
                            uint64_t *job_p)
{
    int64_t job, h, w, steps, seed;
    double guidance;
    const char *o = "run", *model;
    weft_status_t st;
    if ((st = weft_json_get_int(j, "job", -1, 1, INT64_MAX, o, &job)) ||
        (st = weft_json_get_int(j, "height", 0, 16, 1 << 16, o, &h)) ||
        (st = weft_json_get_int(j, "width", 0, 16, 1 << 16, o, &w)) ||
        (st = weft_json_get_int(j, "steps", 0, 1, 1000, o, &steps)) ||
        (st = weft_json_get_int(j, "seed", 0, 0, INT64_MAX, o, &seed)) ||
        (st = weft_json_get_double(j, "guidance", 3.5, 0, 1000, o, &guidance)) ||
        (st = weft_json_get_string(j, "model_name", "", o, &model)))
        return st;
    *job_p = (uint64_t)job;
    const cJSON *prompts = cJSON_GetObjectItemCaseSensitive(j, "prompts");
    const cJSON *images = cJSON_GetObjectItemCaseSensitive(j, "images");
    int np = cJSON_GetArraySize(prompts);
    if (!cJSON_IsArray(prompts) || !cJSON_IsArray(images) || np < 1 || np > 4096)
        return WEFT_ERR_PROTOCOL;
    const float **pe = weft_calloc((size_t)np, sizeof(*pe)), **pooled = weft_calloc((size_t)np,
                                                                                    sizeof(*pooled));
    int64_t *s_txt = weft_calloc((size_t)np, sizeof(*s_txt));
    const char **names = weft_calloc((size_t)np, sizeof(*names));
    if (!pe || !pooled || !s_txt || !names) {
        st = WEFT_ERR_NOMEM;
        goto out;
    }
    size_t off = 0;
    int i = 0;
    for (const cJSON *p = prompts->child; p; p = p->next, i++) {
        int64_t t, joint, pd;
        if ((st = weft_json_get_int(p, "s_txt", -1, 0, 1 << 20, o, &t)) ||
            (st = weft_json_get_int(p, "joint", -1, 1, 1 << 20, o, &joint)) ||
            (st = weft_json_get_int(p, "pooled", -1, 1, 1 << 20, o, &pd)) ||
            (st = weft_json_get_string(p, "name", "", o, &names[i])))
            goto out;
        size_t need = (size_t)(t * joint + pd) * sizeof(float);
        if (off + need > tail_len || off % sizeof(float)) {
            WEFT_LOG_ERROR("worker", "run: prompt %d needs %zu bytes past %zu of a %zu-byte tail",
                           i, need, off, tail_len);
            st = WEFT_ERR_PROTOCOL;
            goto out;
        }
        pe[i] = (const float *)((const char *)tail + off);
        pooled[i] = pe[i] + t * joint;
        s_txt[i] = t;
        off += need;
    }
    for (const cJSON *e = images->child; e && st == WEFT_OK; e = e->next) {
        const cJSON *ix = cJSON_GetArrayItem(e, 0), *pr = cJSON_GetArrayItem(e, 1);
        if (!cJSON_IsNumber(ix) || !cJSON_IsNumber(pr) || pr->valueint < 0 ||
            pr->valueint >= np || ix->valueint < 0) {
            st = WEFT_ERR_PROTOCOL;
            break;
        }
        struct run_ctx rc = {a, (uint64_t)job, ix->valueint};
        struct weft_rt_image img = {
            .prompt_embeds = pe[pr->valueint],
            .s_txt = s_txt[pr->valueint],
            .pooled = pooled[pr->valueint],
            .height = h,
            .width = w,
            .steps = (int)steps,
            .guidance = (float)guidance,
            .seed = (uint64_t)seed,
            .noise_index = ix->valueint,
            .png_prompt = names[pr->valueint],
            .png_model = model[0] ? model : NULL,
        };
        struct weft_rt_result res;
        st = weft_runtime_image(a->rt, &img, on_step, is_cancelled, &rc, &res);
        if (st == WEFT_OK && res.png) {
            cJSON *r = cJSON_CreateObject();
            cJSON_AddNumberToObject(r, "job", (double)job);
            cJSON_AddNumberToObject(r, "image", ix->valueint);
            cJSON_AddNumberToObject(r, "width", (double)w);
            cJSON_AddNumberToObject(r, "height", (double)h);
            cJSON_AddNumberToObject(r, "denoise_s", res.denoise_s);
            cJSON_AddNumberToObject(r, "decode_s", res.decode_s);
            reply(a, WEFT_MSG_IMAGE, r, res.png, res.png_len);
        } else {
            free(res.png);
        }
    }
out:
    weft_free(pe), weft_free(pooled), weft_free(s_txt), weft_free(names);
    return st;
}

/* The job's collectives, for the coordinator's metrics: "comm": {group: {op: [seconds, bytes,
 * calls]}}, the kinds this rank called. */
static void add_comm_stats(cJSON *r, const struct weft_par_stats *before,
                           const struct weft_par_stats *after)
{
    cJSON *comm = NULL;
    for (int g = 0; g < WEFT_MESH_GROUP_COUNT; g++) {
        cJSON *group = NULL;
        for (int op = 0; op < WEFT_PAR_OP_COUNT; op++) {
            long calls = after->calls[g][op] - before->calls[g][op];
            if (calls <= 0)
                continue;
            if (!comm)
                comm = cJSON_AddObjectToObject(r, "comm");
            if (comm && !group)
                group = cJSON_AddObjectToObject(comm, weft_mesh_group_name(g));
            const double v[3] = {after->seconds[g][op] - before->seconds[g][op],
                                 after->bytes[g][op] - before->bytes[g][op], (double)calls};
            if (group)
                cJSON_AddItemToObject(group, weft_par_op_name(op), cJSON_CreateDoubleArray(v, 3));
        }
    }
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
        cJSON *r = cJSON_CreateObject();
        weft_log_clear_last_error();
        if (it->type == WEFT_MSG_ASSIGN) {
            weft_status_t st = do_assign(a, it->json);
            const cJSON *ep = cJSON_GetObjectItemCaseSensitive(it->json, "epoch");
            cJSON_AddNumberToObject(r, "epoch", cJSON_IsNumber(ep) ? ep->valuedouble : -1);
            cJSON_AddNumberToObject(r, "status", st);
            cJSON_AddStringToObject(r, "error", st ? weft_log_last_error() : "");
            uint64_t tb = 0, vb = 0;
            weft_runtime_bytes(a->rt, &tb, &vb);
            cJSON_AddNumberToObject(r, "transformer_bytes", (double)tb);
            cJSON_AddNumberToObject(r, "vae_bytes", (double)vb);
            reply(a, WEFT_MSG_ASSIGNED, r, NULL, 0);
        } else if (it->type == WEFT_MSG_RUN) {
            uint64_t job = 0;
            struct weft_par_stats before, after;
            weft_runtime_comm_stats(a->rt, &before);
            weft_status_t st = do_run(a, it->json, it->tail, it->tail_len, &job);
            weft_runtime_comm_stats(a->rt, &after);
            add_comm_stats(r, &before, &after);
            if (WEFT_STATUS_IS_PEER_LOST(st))
                drop_world(a); /* the world is failed for good: wait for a new assignment */
            cJSON_AddNumberToObject(r, "job", (double)job);
            cJSON_AddNumberToObject(r, "status", st);
            cJSON_AddStringToObject(r, "error", st ? weft_log_last_error() : "");
            reply(a, WEFT_MSG_DONE, r, NULL, 0);
        } else { /* RESET */
            drop_world(a);
            cJSON_Delete(r);
        }
        qitem_free(it);
    }
    drop_world(a);
    return NULL;
}

/* ---- control thread ---------------------------------------------------------------------- */

static void on_msg(struct weft_link *link, uint16_t type, const void *data, size_t len,
                   void *arg)
{
    (void)link;
    struct agent *a = arg;
    a->last_heard = now_s();
    cJSON *json;
    const void *tail;
    size_t tail_len;
    if (weft_msg_unpack(data, len, "coordinator", &json, &tail, &tail_len) != WEFT_OK)
        return;
    switch (type) {
    case WEFT_MSG_PING:
        cJSON_Delete(json);
        return;
    case WEFT_MSG_CANCEL: {
        const cJSON *job = cJSON_GetObjectItemCaseSensitive(json, "job");
        if (cJSON_IsNumber(job))
            atomic_store(&a->cancel_job, (unsigned long long)job->valuedouble);
        cJSON_Delete(json);
        return;
    }
    case WEFT_MSG_SHUTDOWN:
        atomic_store(&a->quit, 1);
        a->exit_code = 0;
        cJSON_Delete(json);
        return;
    case WEFT_MSG_ASSIGN:
    case WEFT_MSG_RUN:
    case WEFT_MSG_RESET: {
        void *copy = NULL;
        if (tail_len && !(copy = malloc(tail_len))) {
            cJSON_Delete(json);
            return;
        }
        if (tail_len)
            memcpy(copy, tail, tail_len);
        if (type == WEFT_MSG_RUN)
            atomic_store(&a->cancel_job, 0);
        q_push(&a->inbox, type, json, copy, tail_len);
        return;
    }
    default:
        WEFT_LOG_WARN("worker", "coordinator sent an unexpected %s message", weft_msg_name(type));
        cJSON_Delete(json);
    }
}

static void on_down(struct weft_link *link, weft_status_t why, void *arg)
{
    (void)link;
    struct agent *a = arg;
    WEFT_LOG_ERROR("worker", "lost the coordinator's control link: %s", weft_status_str(why));
    atomic_store(&a->quit, 1);
    a->exit_code = 1;
}

static weft_status_t send_msg(struct agent *a, unsigned type, cJSON *json, const void *tail,
                              size_t tail_len)
{
    void *buf;
    size_t len;
    weft_status_t st = weft_msg_pack(json, tail, tail_len, &buf, &len);
    if (st == WEFT_OK) {
        st = weft_link_send(a->link, (uint16_t)type, buf, len);
        weft_free(buf);
    }
    return st;
}

static int connect_tcp(const char *hostport, int timeout_ms)
{
    char host[256];
    const char *colon = strrchr(hostport, ':');
    if (!colon || (size_t)(colon - hostport) >= sizeof(host)) {
        WEFT_LOG_ERROR("worker", "coordinator address '%s': expected host:port", hostport);
        return -1;
    }
    memcpy(host, hostport, (size_t)(colon - hostport));
    host[colon - hostport] = '\0';
    double deadline = now_s() + timeout_ms / 1e3;
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
            WEFT_LOG_ERROR("worker", "cannot reach the coordinator at %s within %d ms", hostport,
                           timeout_ms);
            return -1;
        }
        if (!warned++)
            WEFT_LOG_INFO("worker", "waiting for the coordinator at %s", hostport);
        usleep(100000);
    }
}

static cJSON *inventory(struct agent *a, const char *link_b64)
{
    cJSON *h = cJSON_CreateObject();
    char host[256] = "?";
    gethostname(host, sizeof(host) - 1);
    struct sysinfo si;
    cJSON_AddStringToObject(h, "host", host);
    cJSON_AddNumberToObject(h, "pid", getpid());
    cJSON_AddStringToObject(h, "device", "cpu");
    cJSON_AddNumberToObject(h, "threads", weft_kernels_cpu_threads(a->kc));
    if (sysinfo(&si) == 0)
        cJSON_AddNumberToObject(h, "memory", (double)si.totalram * si.mem_unit);
    cJSON_AddStringToObject(h, "launcher", a->opts->launch.source);
    cJSON_AddNumberToObject(h, "launch_rank", a->opts->launch.rank);
    cJSON_AddNumberToObject(h, "local_rank", a->opts->launch.local_rank);
    cJSON_AddStringToObject(h, "version", WEFT_VERSION);
    cJSON_AddStringToObject(h, "link", link_b64);
    (void)weft_inventory_nics_add(h); /* best effort: a failed source is logged, the rest kept */
    return h;
}

/* The authenticated bootstrap: challenge, proof both ways, ids and link addresses. */
static weft_status_t bootstrap(struct agent *a, void **coord_addr_p, size_t *coord_len_p)
{
    const int tmo = 10000;
    const void *addr;
    size_t alen;
    weft_status_t st = weft_link_host_address(a->host, &addr, &alen);
    if (st != WEFT_OK)
        return st;
    a->boot_fd = connect_tcp(a->opts->coordinator, (int)a->opts->conf->cluster.join_timeout_ms);
    if (a->boot_fd < 0)
        return WEFT_ERR_UNREACHABLE;
    cJSON *ch = NULL, *acc = NULL;
    char *b64 = weft_base64(addr, alen);
    if ((st = weft_boot_recv(a->boot_fd, tmo, &ch)) != WEFT_OK)
        goto out;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(ch, "challenge");
    uint8_t raw[32];
    if (!cJSON_IsString(c) || weft_unhex(c->valuestring, raw, 32) != 0) {
        WEFT_LOG_ERROR("worker", "the coordinator sent no valid challenge");
        st = WEFT_ERR_PROTOCOL;
        goto out;
    }
    char proof[65], mine[65], want[65];
    weft_boot_proof(a->opts->secret, "worker", c->valuestring, proof);
    if ((st = weft_boot_challenge(mine)) != WEFT_OK)
        goto out;
    cJSON *resp = cJSON_CreateObject();
    cJSON_AddNumberToObject(resp, "weft", WEFT_PROTO_VERSION);
    cJSON_AddStringToObject(resp, "response", proof);
    cJSON_AddStringToObject(resp, "challenge", mine);
    cJSON_AddItemToObject(resp, "hello", inventory(a, b64 ? b64 : ""));
    st = weft_boot_send(a->boot_fd, resp, tmo);
    cJSON_Delete(resp);
    if (st != WEFT_OK || (st = weft_boot_recv(a->boot_fd, tmo, &acc)) != WEFT_OK)
        goto out;
    const cJSON *ok = cJSON_GetObjectItemCaseSensitive(acc, "accepted");
    if (!cJSON_IsTrue(ok)) {
        const cJSON *err = cJSON_GetObjectItemCaseSensitive(acc, "error");
        WEFT_LOG_ERROR("worker", "the coordinator refused this worker: %s",
                       cJSON_IsString(err) ? err->valuestring : "no reason given");
        st = WEFT_ERR_AUTH;
        goto out;
    }
    weft_boot_proof(a->opts->secret, "coordinator", mine, want);
    const cJSON *their = cJSON_GetObjectItemCaseSensitive(acc, "response");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(acc, "id");
    const cJSON *link = cJSON_GetObjectItemCaseSensitive(acc, "link");
    if (!cJSON_IsString(their) || strlen(their->valuestring) != 64 ||
        weft_ct_compare(their->valuestring, want, 64) != 0) {
        WEFT_LOG_ERROR("worker", "the coordinator did not prove it knows the cluster secret");
        st = WEFT_ERR_AUTH;
        goto out;
    }
    if (!cJSON_IsString(id) || !cJSON_IsString(link) ||
        !(*coord_addr_p = weft_unbase64(link->valuestring, coord_len_p))) {
        st = WEFT_ERR_PROTOCOL;
        goto out;
    }
    snprintf(a->id, sizeof(a->id), "%s", id->valuestring);
out:
    weft_free(b64);
    cJSON_Delete(ch);
    cJSON_Delete(acc);
    return st;
}

/* The bootstrap socket closes when the coordinator dies. */
static bool coordinator_gone(struct agent *a)
{
    struct pollfd p = {a->boot_fd, POLLIN, 0};
    if (poll(&p, 1, 0) <= 0)
        return false;
    char b;
    return recv(a->boot_fd, &b, 1, MSG_DONTWAIT | MSG_PEEK) == 0 || (p.revents & (POLLHUP | POLLERR));
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
            if (send_msg(a, it->type, it->json, it->tail, it->tail_len) != WEFT_OK)
                atomic_store(&a->quit, 1);
            qitem_free(it);
        }
        double now = now_s();
        if (now >= next_ping) {
            cJSON *p = cJSON_CreateObject();
            if (send_msg(a, WEFT_MSG_PING, p, NULL, 0) != WEFT_OK)
                atomic_store(&a->quit, 1);
            cJSON_Delete(p);
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
    void *caddr = NULL;
    size_t clen = 0;
    pthread_t exec;
    int exec_started = 0;
    weft_status_t st = weft_kernels_cpu_create((int)opts->conf->kernels.threads, &a.K, &a.kc);
    if (st == WEFT_OK)
        st = weft_runtime_create(a.K, a.kc, &a.rt);
    if (st == WEFT_OK)
        st = weft_link_host_create(opts->conf->transport.tls[0] ? opts->conf->transport.tls : NULL,
                                   NULL, NULL, &a.host);
    /* Join; when the coordinator is lost (it died or was restarted), drop everything it
     * assigned and join again, for up to [cluster] join_timeout_ms like the first time. */
    for (int session = 0; st == WEFT_OK; session++) {
        atomic_store(&a.quit, 0);
        atomic_store(&a.stop_all, 0);
        a.exit_code = 1;
        if (session > 0)
            WEFT_LOG_WARN("worker", "joining the coordinator at %s again (for up to %lld ms)",
                          opts->coordinator, (long long)opts->conf->cluster.join_timeout_ms);
        st = bootstrap(&a, &caddr, &clen);
        if (st == WEFT_OK)
            st = weft_link_connect(a.host, caddr, clen, on_msg, on_down, &a, &a.link);
        if (st == WEFT_OK) {
            cJSON *hello = cJSON_CreateObject();
            cJSON_AddStringToObject(hello, "id", a.id);
            st = send_msg(&a, WEFT_MSG_HELLO, hello, NULL, 0);
            cJSON_Delete(hello);
        }
        if (st == WEFT_OK) {
            WEFT_LOG_INFO("worker", "joined the coordinator at %s as %s", opts->coordinator,
                          a.id);
            exec_started = pthread_create(&exec, NULL, executor_main, &a) == 0;
            if (exec_started)
                control_loop(&a);
            else
                st = WEFT_ERR_NOMEM;
        }
        if (exec_started) {
            /* a worker that lost its coordinator must not hang on a collective: the
             * executor's waits end at the transport deadline */
            atomic_store(&a.stop_all, 1);
            q_push(&a.inbox, WEFT_MSG_SHUTDOWN, NULL, NULL, 0);
            pthread_join(exec, NULL);
            exec_started = 0;
        }
        struct qitem *it;
        while ((it = q_pop(&a.outbox, 0)))
            qitem_free(it);
        while ((it = q_pop(&a.inbox, 0)))
            qitem_free(it);
        weft_link_close(a.link);
        a.link = NULL;
        if (a.boot_fd >= 0)
            close(a.boot_fd);
        a.boot_fd = -1;
        weft_free(caddr);
        caddr = NULL;
        if (st != WEFT_OK || a.exit_code == 0)
            break; /* told to stop, or could not join */
    }
    weft_link_host_destroy(a.host);
    close(a.wake_fd);
    weft_runtime_destroy(a.rt);
    weft_kernels_cpu_destroy(a.kc);
    return st != WEFT_OK ? 1 : a.exit_code;
}
