/* Jobs on the cluster (see internal.h): a job's images split over the free data-parallel
 * replicas of one group (weft_cr_route: the group its image size wants) like Accelerate's
 * split_between_processes, one RUN per worker of those replicas,
 * what the workers report, and the deadlines that keep every job owned: a job nobody advances
 * is taken back, and a stop does not wait for a worker that does not answer. */
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/files.h"
#include "common/log.h"
#include "coordinator/cluster/internal.h"
#include "model/job.h"

static void post(struct cluster_runner *r, const struct weft_runner_event *ev)
{
    weft_runner_post(r->sink, ev);
}

/* The running job a worker's message names by its key, or NULL. */
static struct job_run *job_find(struct cluster_runner *r, uint64_t key)
{
    for (int i = 0; i < MAX_WORKERS; i++)
        if (r->jobs[i].active && r->jobs[i].key == key)
            return &r->jobs[i];
    return NULL;
}

int weft_cr_active_jobs(const struct cluster_runner *r)
{
    int n = 0;
    for (int i = 0; i < MAX_WORKERS; i++)
        n += r->jobs[i].active;
    return n;
}

int weft_cr_free_replicas(const struct cluster_runner *r)
{
    int n = 0;
    for (int rep = 0; rep < weft_cr_plan_replicas(&r->mesh) && rep < MAX_WORKERS; rep++)
        n += r->replica_job[rep] < 0;
    return n;
}

double weft_cr_drain_work(const struct cluster_runner *r)
{
    double most = 0;
    for (int rep = 0; rep < weft_cr_plan_replicas(&r->mesh) && rep < MAX_WORKERS; rep++) {
        const struct replica_work *q = &r->rep_work[rep];
        if (r->replica_job[rep] < 0 || !r->jobs[r->replica_job[rep]].blocking)
            continue;
        const int64_t left = q->count * (q->steps + WEFT_CR_DECODE_STEPS) - q->done;
        const double w = q->unit * (double)(left > 0 ? left : 0);
        most = w > most ? w : most;
    }
    return most;
}

void weft_cr_job_finish(struct cluster_runner *r, struct job_run *jr)
{
    struct weft_runner_event ev = {.kind = WEFT_RUNNER_EV_FINISHED, .job = jr->key,
                                   .status = jr->status};
    snprintf(ev.reason, sizeof(ev.reason), "%s", jr->reason);
    const int index = (int)(jr - r->jobs);
    if (jr->status == WEFT_OK)
        weft_cr_auto_record(r, jr);
    for (int rep = 0; rep < MAX_WORKERS; rep++)
        if (r->replica_job[rep] == index)
            r->replica_job[rep] = -1;
    jr->active = false;
    r->jobs_done++;
    post(r, &ev);
    if (r->stopping && weft_cr_active_jobs(r) == 0) {
        weft_cr_shutdown(r);
    } else if (!weft_cr_auto_switch(r)) {
        weft_cr_plan_maybe(r); /* the mesh may grow back now that it is idle */
    }
}

void weft_cr_job_fail(struct job_run *jr, weft_status_t st, const char *reason)
{
    if (jr->status == WEFT_OK || jr->status == WEFT_ERR_CANCELLED) {
        jr->status = st;
        snprintf(jr->reason, sizeof(jr->reason), "%s", reason);
    }
}

void weft_cr_jobs_interrupt(struct cluster_runner *r, const struct worker *lost,
                            weft_status_t st, const char *why)
{
    for (int i = 0; i < MAX_WORKERS; i++) {
        struct job_run *jr = &r->jobs[i];
        if (!jr->active)
            continue;
        char reason[320];
        if (lost && r->replica_job[lost->replica] == i)
            snprintf(reason, sizeof(reason), "worker %s (%s, pid %ld) was lost during the "
                     "job: %s", lost->id, lost->host, lost->pid, why);
        else if (lost)
            snprintf(reason, sizeof(reason), "the mesh was planned again: worker %s (%s, pid "
                     "%ld) of another replica was lost", lost->id, lost->host, lost->pid);
        else
            snprintf(reason, sizeof(reason), "%s", why);
        weft_cr_job_fail(jr, st, reason);
        weft_cr_job_finish(r, jr);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Starting                                                                                  */

/* Every prompt's embeddings, read and checked against the model, into one RUN's prompts and
 * tail (prompt_embeds then pooled, f32, prompt after prompt); a text prompt travels as its
 * text (borrowed from the job), for the replica to encode. */
static weft_status_t load_prompts(struct cluster_runner *r, const struct weft_runner_job *job,
                                  struct weft_msg_run *m, struct weft_error *err)
{
    const struct weft_flux_config *fc = &r->model->flux;
    const int n = job->n_prompts + job->n_negatives; /* the negatives after the prompts */
    m->prompts = weft_calloc((size_t)n, sizeof(*m->prompts));
    if (!m->prompts)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    m->n_prompts = n;
    m->n_negatives = job->n_negatives;
    size_t total = 0;
    weft_status_t st = WEFT_OK;
    for (int i = 0; i < n && st == WEFT_OK; i++) {
        if (job->prompt_texts && job->prompt_texts[i]) { /* encoded by the replica */
            m->prompts[i] = (struct weft_msg_prompt){
                .tokens = job->max_sequence_length, .joint = fc->joint_attention_dim,
                .pooled = fc->pooled_projection_dim, .is_text = true,
                .text = (char *)job->prompt_texts[i]};
            continue;
        }
        struct weft_prompt_embeds pe;
        if ((st = weft_model_prompt_read(r->model, job->prompt_paths[i], &pe, err)) != WEFT_OK)
            break;
        struct weft_msg_prompt *p = &m->prompts[i];
        *p = (struct weft_msg_prompt){pe.tokens, fc->joint_attention_dim,
                                      fc->pooled_projection_dim, ""};
        snprintf(p->name, sizeof(p->name), "%s", job->prompt_names[i]);
        const size_t e = (size_t)(pe.tokens * p->joint), need = weft_msg_prompt_floats(p);
        float *grown = weft_realloc(m->embeds, (total + need) * sizeof(float));
        if (!grown) {
            st = weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
        } else {
            m->embeds = grown;
            memcpy(m->embeds + total, pe.embeds, e * sizeof(float));
            memcpy(m->embeds + total + e, pe.pooled, (size_t)p->pooled * sizeof(float));
            total += need;
        }
        weft_prompt_embeds_cleanup(&pe);
    }
    m->n_embeds = total;
    return st;
}

/* RUN for one replica: its images [first, first + count) of the job. */
static weft_status_t run_message(const struct weft_runner_job *job, int64_t first, int64_t count,
                                 struct weft_msg_run *m, void **buf_p, size_t *len_p,
                                 struct weft_error *err)
{
    m->n_images = (int32_t)count;
    m->images = weft_calloc((size_t)count, sizeof(*m->images));
    if (!m->images)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    for (int64_t x = 0; x < count; x++)
        m->images[x] = (struct weft_msg_image_ref){first + x,
                                                   (int32_t)((first + x) / job->count)};
    weft_status_t st = weft_msg_encode(WEFT_MSG_RUN, (const union weft_msg *)m, buf_p, len_p,
                                       err);
    weft_free(m->images);
    m->images = NULL;
    if (st == WEFT_OK && *len_p > WEFT_LINK_MSG_MAX) {
        weft_free(*buf_p);
        st = weft_error_refuse(err, WEFT_ERR_RANGE,
                               "its prompts make a %zu-byte message for the workers, over the "
                               "control link's %zu bytes: send fewer prompts per job", *len_p,
                               WEFT_LINK_MSG_MAX);
    }
    return st;
}

static void send_run(struct cluster_runner *r, struct job_run *jr, int rep, const void *buf,
                     size_t len)
{
    for (int i = 0; i < MAX_WORKERS; i++) {
        struct worker *w = &r->w[i];
        if (w->state != W_JOINED || w->rank < 0 || w->replica != rep)
            continue;
        weft_status_t st = weft_link_send(w->link, WEFT_MSG_RUN, buf, len);
        if (st != WEFT_OK) {
            char why[96];
            snprintf(why, sizeof(why), "its job could not be sent (%s)", weft_status_str(st));
            weft_cr_job_fail(jr, WEFT_ERR_PEER_LOST, why);
        }
    }
}

int weft_cr_route(const struct cluster_runner *r, const struct cr_plan *p, int64_t height,
                  int64_t width, const bool *open)
{
    const int64_t ranks = weft_job_image_tokens(r->model, height, width) /
                          WEFT_AUTOPLAN_MIN_TOKENS_PER_RANK;
    int best = -1, best_size = 0;
    for (int g = 0; g < p->n; g++) {
        if (open && !open[g])
            continue;
        const int size = weft_layout_replica_devices(&p->g[g]);
        const bool fits = size == 1 || size <= ranks;
        const bool best_fits = best_size == 1 || best_size <= ranks;
        if (best < 0 || (fits && (!best_fits || size > best_size)) ||
            (!fits && !best_fits && size < best_size))
            best = g, best_size = size;
    }
    return best;
}

/* The group a job starts on (weft_cr_route among the groups with a free replica; -1 none), and
 * its free replicas into reps. */
static int start_group(const struct cluster_runner *r, const struct weft_runner_job *job,
                       int *reps, int *n_p)
{
    bool open[WEFT_CR_GROUPS] = {false};
    for (int rep = 0; rep < weft_cr_plan_replicas(&r->mesh) && rep < MAX_WORKERS; rep++) {
        int rep0, base;
        const int g = weft_cr_plan_group(&r->mesh, rep, &rep0, &base);
        if (g >= 0 && r->replica_job[rep] < 0)
            open[g] = true;
    }
    const int best = weft_cr_route(r, &r->mesh, job->height, job->width, open);
    *n_p = 0;
    for (int rep = 0; best >= 0 && rep < MAX_WORKERS; rep++) {
        int rep0, base;
        if (weft_cr_plan_group(&r->mesh, rep, &rep0, &base) == best && r->replica_job[rep] < 0)
            reps[(*n_p)++] = rep;
    }
    return best;
}

weft_status_t weft_cr_start(struct weft_runner *base, const struct weft_runner_job *job,
                            struct weft_error *err)
{
    struct cluster_runner *r = (struct cluster_runner *)base;
    int reps[MAX_WORKERS], n_free = 0, slot = -1;
    const int group = r->planned ? start_group(r, job, reps, &n_free) : -1;
    for (int i = 0; i < MAX_WORKERS && slot < 0; i++)
        if (!r->jobs[i].active)
            slot = i;
    if (!r->planned || r->stopping || n_free == 0 || slot < 0)
        return weft_error_set(err, WEFT_ERR_BUSY, "cluster", "job %s: the cluster is not ready "
                              "or has no free replica", job->id);
    const int per = weft_layout_replica_devices(&r->mesh.g[group]);
    struct weft_msg_run m = {
        .job = job->key, .epoch = r->epoch, .height = job->height, .width = job->width,
        .steps = job->steps, .guidance = job->guidance, .seed = job->seed,
        .true_cfg_scale = job->true_cfg_scale,
    };
    snprintf(m.job_id, sizeof(m.job_id), "%s", job->id);
    snprintf(m.model_name, sizeof(m.model_name), "%s", r->model_dir);
    weft_status_t st = load_prompts(r, job, &m, err);
    /* the free replicas, no more than there are images; split_between_processes over them:
     * contiguous chunks, the first ones one longer (an image's noise depends on its index
     * only, so the split changes no pixel) */
    const int64_t n_img = (int64_t)job->n_prompts * job->count;
    const int dp = n_img < n_free ? (int)n_img : n_free;
    void *bufs[MAX_WORKERS] = {0};
    size_t lens[MAX_WORKERS] = {0};
    const bool cfg = job->n_negatives > 0 && job->true_cfg_scale > 1;
    struct replica_work work[MAX_WORKERS];
    for (int k = 0; k < dp && st == WEFT_OK; k++) {
        work[k] = (struct replica_work){
            .first = n_img / dp * k + (k < n_img % dp ? k : n_img % dp),
            .count = n_img / dp + (k < n_img % dp), .steps = job->steps,
            .unit = weft_cr_step_work(job->height, job->width, cfg)};
        st = run_message(job, work[k].first, work[k].count, &m, &bufs[k], &lens[k], err);
    }
    for (int i = 0; m.prompts && i < m.n_prompts; i++)
        m.prompts[i].text = NULL; /* the job's, borrowed */
    weft_msg_cleanup(WEFT_MSG_RUN, (union weft_msg *)&m);
    if (st == WEFT_OK) {
        struct job_run *jr = &r->jobs[slot];
        *jr = (struct job_run){
            .key = job->key, .active = true, .started = weft_cr_now(),
            .devices = dp * per, .height = job->height, .width = job->width,
            .steps = job->steps, .cfg = cfg, .per = per};
        jr->last_progress = jr->started;
        snprintf(jr->out_dir, sizeof(jr->out_dir), "%s", job->out_dir);
        snprintf(jr->id, sizeof(jr->id), "%s", job->id);
        for (int k = 0; k < dp; k++) {
            r->replica_job[reps[k]] = slot;
            r->rep_work[reps[k]] = work[k];
            jr->pending++;
            send_run(r, jr, reps[k], bufs[k], lens[k]);
        }
        r->backfilled += r->switching && r->backfill;
        r->started_group = group;
        char name[96];
        weft_layout_name(&r->mesh.g[group], name, sizeof(name));
        WEFT_LOG_INFO("cluster", "job %s: %lld images on %d of the %d replicas of %s", job->id,
                      (long long)n_img, jr->pending, r->mesh.g[group].mesh.dp, name);
    }
    for (int k = 0; k < dp; k++)
        weft_free(bufs[k]);
    return st;
}

void weft_cr_cancel(struct weft_runner *base, uint64_t key)
{
    struct cluster_runner *r = (struct cluster_runner *)base;
    struct job_run *jr = job_find(r, key);
    if (!jr)
        return;
    /* the job ends cancelled when its workers stop it (they agree at a step's end, the last
     * one included); one whose images were all made before the cancel reached them is done */
    const union weft_msg m = {.job = {key}};
    for (int i = 0; i < MAX_WORKERS; i++) {
        struct worker *w = &r->w[i];
        if (w->state == W_JOINED && w->rank >= 0 && w->decode &&
            r->replica_job[w->replica] == (int)(jr - r->jobs))
            (void)weft_cr_send(w, WEFT_MSG_CANCEL, &m);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* What workers report                                                                       */

/* A message about a job must come from a worker of a replica that runs it. */
static struct job_run *job_of(struct cluster_runner *r, const struct worker *w, uint64_t key,
                              const char *what)
{
    struct job_run *jr = job_find(r, key);
    if (!jr || w->rank < 0 || r->replica_job[w->replica] != (int)(jr - r->jobs)) {
        WEFT_LOG_DEBUG("cluster", "worker %s: a %s for job key %llu it does not run: ignored",
                       w->id, what, (unsigned long long)key);
        return NULL;
    }
    return jr;
}

/* A replica's image reached step of its steps + WEFT_CR_DECODE_STEPS (its images run one after
 * another); reports of other images are ignored. */
static void replica_progress(struct replica_work *q, int64_t image, int64_t step)
{
    if (image < q->first || image >= q->first + q->count)
        return;
    const int64_t done = (image - q->first) * (q->steps + WEFT_CR_DECODE_STEPS) + step;
    q->done = done > q->done ? done : q->done;
}

static void on_step(struct cluster_runner *r, struct worker *w, const struct weft_msg_step *m)
{
    struct job_run *jr = job_of(r, w, m->job, "step");
    if (!jr)
        return;
    jr->last_progress = weft_cr_now();
    if (m->seconds > jr->longest_step)
        jr->longest_step = m->seconds;
    if (m->step >= 1 && m->step <= r->rep_work[w->replica].steps)
        replica_progress(&r->rep_work[w->replica], m->image, m->step);
    const struct weft_runner_event ev = {
        .kind = WEFT_RUNNER_EV_STEP, .job = jr->key, .image = (int)m->image, .n_images = 1,
        .step = m->step, .steps = m->steps, .seconds = m->seconds,
    };
    post(r, &ev);
}

static void on_image(struct cluster_runner *r, struct worker *w, const struct weft_msg_image *m)
{
    struct job_run *jr = job_of(r, w, m->job, "image");
    if (!jr || !w->decode)
        return;
    jr->last_progress = weft_cr_now();
    struct replica_work *q = &r->rep_work[w->replica];
    replica_progress(q, m->image, q->steps + WEFT_CR_DECODE_STEPS); /* its decode is done */
    char path[WEFT_CONF_PATH + 96];
    snprintf(path, sizeof(path), "%s/%lld.png", jr->out_dir, (long long)m->image);
    struct weft_error err = WEFT_ERROR_INIT;
    if (weft_files_save(path, m->png, m->png_len, &err) != WEFT_OK) {
        weft_cr_job_fail(jr, WEFT_ERR_IO, weft_error_text(&err));
        return;
    }
    jr->images_done++;
    jr->denoise_s += m->denoise_s;
    jr->decode_s += m->decode_s;
    struct weft_runner_event ev = {.kind = WEFT_RUNNER_EV_STAGE, .job = jr->key,
                                   .seconds = m->denoise_s};
    snprintf(ev.stage, sizeof(ev.stage), "denoise");
    post(r, &ev);
    ev.seconds = m->decode_s;
    snprintf(ev.stage, sizeof(ev.stage), "decode");
    post(r, &ev);
    const struct weft_runner_event im = {.kind = WEFT_RUNNER_EV_IMAGE, .job = jr->key,
                                         .image = (int)m->image, .n_images = 1,
                                         .width = m->width, .height = m->height};
    r->images_done++;
    post(r, &im);
}

/* A job's collectives from one worker, added to the totals (metrics only). */
static void add_comm(struct cluster_runner *r, const struct weft_msg_done *m)
{
    for (int k = 0; k < m->n_comm; k++) {
        const struct weft_msg_comm *c = &m->comm[k];
        struct comm_total *t = NULL;
        for (int i = 0; i < r->n_comm && !t; i++)
            if (!strcmp(r->comm[i].group, c->group) && !strcmp(r->comm[i].op, c->op))
                t = &r->comm[i];
        if (!t && r->n_comm < (int)(sizeof(r->comm) / sizeof(r->comm[0]))) {
            t = &r->comm[r->n_comm++];
            snprintf(t->group, sizeof(t->group), "%s", c->group);
            snprintf(t->op, sizeof(t->op), "%s", c->op);
        }
        if (t)
            t->seconds += c->seconds, t->bytes += c->bytes, t->calls += (double)c->calls;
    }
}

static void on_done(struct cluster_runner *r, struct worker *w, const struct weft_msg_done *m)
{
    add_comm(r, m); /* the collectives ran, whatever became of the job */
    r->prompt_cache_hits += m->prompt_cache_hits;
    r->prompt_cache_misses += m->prompt_cache_misses;
    struct job_run *jr = job_of(r, w, m->job, "done");
    if (!jr)
        return;
    const weft_status_t s = (weft_status_t)m->status;
    if (s != WEFT_OK && s != WEFT_ERR_CANCELLED) {
        char reason[320];
        snprintf(reason, sizeof(reason), "worker %s (%s, pid %ld): %s", w->id, w->host, w->pid,
                 m->error[0] ? m->error : weft_status_str(s));
        if (jr->reason_peer && !m->peer)
            jr->status = WEFT_OK; /* the rank with the cause speaks over its consequences */
        if (jr->status == WEFT_OK || jr->status == WEFT_ERR_CANCELLED)
            jr->reason_peer = m->peer;
        weft_cr_job_fail(jr, s, reason);
    } else if (s == WEFT_ERR_CANCELLED) {
        weft_cr_job_fail(jr, s, "cancelled");
    }
    if (!w->decode)
        return; /* the replica's decoding rank speaks for it, once */
    r->replica_job[w->replica] = -1; /* free for the next job */
    if (--jr->pending == 0)
        weft_cr_job_finish(r, jr);
}

void weft_cr_on_msg(struct weft_link *link, uint16_t type, const void *data, size_t len,
                    void *arg)
{
    (void)link;
    struct worker *w = arg;
    struct cluster_runner *r = w->r;
    union weft_msg *m = weft_malloc(sizeof(*m));
    struct weft_error err = WEFT_ERROR_INIT;
    if (!m) {
        weft_cr_worker_lost(w, "no memory for its message");
        return;
    }
    if (weft_msg_decode(type, data, len, m, &err) != WEFT_OK) {
        char why[WEFT_ERROR_MSG + 48];
        snprintf(why, sizeof(why), "sent a malformed control message: %s",
                 weft_error_text(&err));
        weft_free(m);
        weft_cr_worker_lost(w, why);
        return;
    }
    w->last_heard = weft_cr_now();
    if (w->state != W_JOINED) { /* leaving: what it still says concerns no job of ours */
        weft_msg_cleanup(type, m);
        weft_free(m);
        return;
    }
    switch (type) {
    case WEFT_MSG_PING:
        break;
    case WEFT_MSG_ASSIGNED:
        weft_cr_on_assigned(r, w, &m->assigned);
        break;
    case WEFT_MSG_STEP:
        on_step(r, w, &m->step);
        break;
    case WEFT_MSG_IMAGE:
        on_image(r, w, &m->image);
        break;
    case WEFT_MSG_DONE:
        on_done(r, w, &m->done);
        break;
    default:
        WEFT_LOG_WARN("cluster", "worker %s sent an unexpected %s message", w->id,
                      weft_msg_name(type));
    }
    weft_msg_cleanup(type, m);
    weft_free(m);
}

/* ---------------------------------------------------------------------------------------- */
/* Deadlines                                                                                 */

/* A job no worker advances (its steps stopped coming: a worker wedged, a message lost) is
 * taken back: its mesh is reset (the workers drop their worlds and are assigned again) and the
 * job finishes with a peer-lost class status, so the coordinator runs it again. */
static void stalled(struct cluster_runner *r, struct job_run *jr, double idle)
{
    char reason[320];
    snprintf(reason, sizeof(reason), "no progress for %.1f s ([cluster] stall_timeout_ms, or "
             "10 x its longest step of %.2f s): the workers of its replicas were reset", idle,
             jr->longest_step);
    WEFT_LOG_WARN("cluster", "job %s: %s", jr->id, reason);
    r->jobs_stalled++;
    weft_cr_jobs_interrupt(r, NULL, WEFT_ERR_TIMEOUT, reason);
    weft_cr_plan_reset(r);
    weft_cr_plan_maybe(r);
}

void weft_cr_jobs_tick(struct cluster_runner *r, double now)
{
    if (r->stopping && weft_cr_active_jobs(r) && now > r->stop_deadline) {
        /* a worker that does not answer the cancel (stopped, hung) must not hold the
         * shutdown: its jobs end cancelled and stay in the journal for the next start */
        WEFT_LOG_WARN("cluster", "%d job(s) did not stop within %d ms: given up",
                      weft_cr_active_jobs(r), STOP_WAIT_MS);
        for (int i = 0; i < MAX_WORKERS && !r->closed; i++)
            if (r->jobs[i].active)
                weft_cr_job_finish(r, &r->jobs[i]);
        return;
    }
    const double stall = (double)r->conf->cluster.stall_timeout_ms / 1e3;
    for (int i = 0; i < MAX_WORKERS && !r->stopping; i++) {
        struct job_run *jr = &r->jobs[i];
        if (!jr->active)
            continue;
        const double limit = stall > 10 * jr->longest_step ? stall : 10 * jr->longest_step;
        if (now - jr->last_progress > limit) {
            stalled(r, jr, now - jr->last_progress);
            return; /* every job was interrupted */
        }
    }
}
