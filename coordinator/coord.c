/* The coordinator's loop and its jobs: the table and FIFO queue, the journal (replay,
 * records, compaction), dispatch to the runner, the runner's events, retention, shutdown. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/files.h"
#include "common/log.h"
#include "common/num.h"
#include "coordinator/internal.h"

static const char *const state_names[JOB_STATE_COUNT] = {"queued", "running", "done", "failed",
                                                         "cancelled"};

const char *weft_coord_state_name(enum job_state s)
{
    return (unsigned)s < JOB_STATE_COUNT ? state_names[s] : "unknown";
}

static double unix_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------------------------------- */
/* Lists and the table                                                                       */

static void list_push(struct job_list *l, struct job *j)
{
    j->next = NULL;
    j->prev = l->tail;
    if (l->tail)
        l->tail->next = j;
    else
        l->head = j;
    l->tail = j;
    l->n++;
}

static void list_push_front(struct job_list *l, struct job *j)
{
    j->prev = NULL;
    j->next = l->head;
    if (l->head)
        l->head->prev = j;
    else
        l->tail = j;
    l->head = j;
    l->n++;
}

static void list_remove(struct job_list *l, struct job *j)
{
    if (j->prev)
        j->prev->next = j->next;
    else
        l->head = j->next;
    if (j->next)
        j->next->prev = j->prev;
    else
        l->tail = j->prev;
    j->prev = j->next = NULL;
    l->n--;
}

static void job_free(struct job *j)
{
    if (!j)
        return;
    weft_job_spec_cleanup(&j->spec);
    weft_free(j->image_steps);
    weft_free(j->images);
    weft_free(j);
}

/* A new job owning spec's contents (spec is emptied). */
static struct job *job_new(uint64_t key, const char *id, struct weft_job_spec *spec)
{
    struct job *j = weft_calloc(1, sizeof(*j));
    if (!j)
        return NULL;
    int64_t n = weft_job_spec_images(spec);
    j->image_steps = weft_calloc((size_t)n, sizeof(*j->image_steps));
    j->images = weft_calloc((size_t)n, sizeof(*j->images));
    if (!j->image_steps || !j->images) {
        job_free(j);
        return NULL;
    }
    j->key = key;
    snprintf(j->id, sizeof(j->id), "%s", id);
    j->spec = *spec;
    *spec = (struct weft_job_spec){0};
    j->n_images = (int)n;
    j->steps = (int)j->spec.steps;
    return j;
}

/* Index of the first job with key >= key. */
static size_t table_lower(const struct weft_coord *c, uint64_t key)
{
    size_t lo = 0, hi = c->n_jobs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->jobs[mid]->key < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static weft_status_t table_insert(struct weft_coord *c, struct job *j)
{
    if (c->n_jobs == c->cap_jobs) {
        size_t cap = c->cap_jobs ? c->cap_jobs * 2 : 64;
        struct job **p = weft_realloc(c->jobs, cap * sizeof(struct job *));
        if (!p)
            return WEFT_ERR_NOMEM;
        c->jobs = p;
        c->cap_jobs = cap;
    }
    size_t at = table_lower(c, j->key);
    memmove(c->jobs + at + 1, c->jobs + at, (c->n_jobs - at) * sizeof(struct job *));
    c->jobs[at] = j;
    c->n_jobs++;
    if (j->key >= c->next_key)
        c->next_key = j->key + 1;
    return WEFT_OK;
}

static void table_remove(struct weft_coord *c, struct job *j)
{
    size_t at = table_lower(c, j->key);
    if (at < c->n_jobs && c->jobs[at] == j) {
        memmove(c->jobs + at, c->jobs + at + 1, (c->n_jobs - at - 1) * sizeof(struct job *));
        c->n_jobs--;
    }
}

static struct job *find_key(const struct weft_coord *c, uint64_t key)
{
    size_t at = table_lower(c, key);
    return at < c->n_jobs && c->jobs[at]->key == key ? c->jobs[at] : NULL;
}

/* Ids are 16 hex digits: the key (8) then 32 random bits, so a lookup is a binary search and
 * ids of a restarted coordinator never repeat an old one. */
struct job *weft_coord_job_find(struct weft_coord *c, const char *id)
{
    if (strlen(id) != WEFT_JOB_ID_LEN || strspn(id, "0123456789abcdef") != WEFT_JOB_ID_LEN)
        return NULL;
    char hex[9];
    memcpy(hex, id, 8);
    hex[8] = '\0';
    struct job *j = find_key(c, strtoull(hex, NULL, 16));
    return j && strcmp(j->id, id) == 0 ? j : NULL;
}

static void make_id(uint64_t key, char id[WEFT_JOB_ID_LEN + 1])
{
    uint32_t r = 0;
    if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
        r = (uint32_t)(unix_now() * 1e6) ^ (uint32_t)getpid();
    snprintf(id, WEFT_JOB_ID_LEN + 1, "%08" PRIx32 "%08" PRIx32, (uint32_t)key, r);
}

void weft_coord_job_dir(const struct weft_coord *c, const struct job *job, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", c->api.output_dir, job->id);
}

size_t weft_coord_queue_position(const struct weft_coord *c, const struct job *job)
{
    size_t pos = 0;
    for (const struct job *q = c->queue.head; q; q = q->next, pos++)
        if (q == job)
            return pos;
    return pos;
}

/* ---------------------------------------------------------------------------------------- */
/* Journal records                                                                           */

static cJSON *record_new(const char *type, const struct job *j)
{
    cJSON *r = cJSON_CreateObject();
    if (!cJSON_AddStringToObject(r, "t", type) || !cJSON_AddStringToObject(r, "id", j->id)) {
        cJSON_Delete(r);
        return NULL;
    }
    return r;
}

static cJSON *record_submit(const struct job *j, bool with_attempts)
{
    cJSON *r = record_new("submit", j);
    cJSON *spec = weft_job_spec_to_json(&j->spec);
    if (!r || !spec) {
        cJSON_Delete(r);
        cJSON_Delete(spec);
        return NULL;
    }
    cJSON_AddItemToObject(r, "spec", spec);
    if (!cJSON_AddNumberToObject(r, "key", (double)j->key) ||
        !cJSON_AddNumberToObject(r, "at", j->submitted_at) ||
        (with_attempts && !cJSON_AddNumberToObject(r, "attempts", j->attempts))) {
        cJSON_Delete(r);
        return NULL;
    }
    if (j->idem_key[0]) {
        char hex[2 * sizeof(j->idem_hash) + 1];
        for (size_t i = 0; i < sizeof(j->idem_hash); i++)
            snprintf(hex + 2 * i, 3, "%02x", j->idem_hash[i]);
        if (!cJSON_AddStringToObject(r, "idem", j->idem_key) ||
            !cJSON_AddStringToObject(r, "idem_hash", hex)) {
            cJSON_Delete(r);
            return NULL;
        }
    }
    return r;
}

static cJSON *timings_json(const struct job *j)
{
    cJSON *t = cJSON_CreateObject();
    for (int i = 0; t && i < j->n_stages; i++) {
        if (!cJSON_AddNumberToObject(t, j->stages[i].name, j->stages[i].seconds)) {
            cJSON_Delete(t);
            return NULL;
        }
    }
    return t;
}

/* The record of a finished job's outcome. */
static cJSON *record_final(const struct job *j)
{
    cJSON *r = record_new(weft_coord_state_name(j->state), j);
    if (!r || !cJSON_AddNumberToObject(r, "at", j->finished_at) ||
        !cJSON_AddNumberToObject(r, "started", j->started_at))
        goto err;
    if (j->state == JOB_FAILED && !cJSON_AddStringToObject(r, "reason", j->reason))
        goto err;
    if (j->layout[0] && !cJSON_AddStringToObject(r, "layout", j->layout))
        goto err;
    if (j->layout_reason[0] && !cJSON_AddStringToObject(r, "layout_reason", j->layout_reason))
        goto err;
    cJSON *t = timings_json(j);
    if (!t)
        goto err;
    cJSON_AddItemToObject(r, "timings", t);
    if (j->state == JOB_DONE) {
        cJSON *imgs = cJSON_AddArrayToObject(r, "images");
        if (!imgs)
            goto err;
        for (int i = 0; i < j->n_images; i++) {
            cJSON *im = cJSON_CreateIntArray((const int[]){j->images[i].width,
                                                            j->images[i].height}, 2);
            if (!im)
                goto err;
            cJSON_AddItemToArray(imgs, im);
        }
    }
    return r;
err:
    cJSON_Delete(r);
    return NULL;
}

static weft_status_t journal_put(struct weft_coord *c, cJSON *rec, bool sync,
                                 struct weft_error *err)
{
    if (!c->journal) {
        cJSON_Delete(rec);
        return WEFT_OK;
    }
    if (!rec)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    weft_status_t st = weft_journal_append(c->journal, rec, sync, err);
    cJSON_Delete(rec);
    return st;
}

static weft_status_t compact_fill(void *arg, struct weft_journal_compaction *jc)
{
    struct weft_coord *c = arg;
    for (size_t i = 0; i < c->n_jobs; i++) {
        const struct job *j = c->jobs[i];
        cJSON *rec = record_submit(j, true);
        if (!rec)
            return WEFT_ERR_NOMEM;
        weft_status_t st = weft_journal_compact_add(jc, rec);
        cJSON_Delete(rec);
        if (st != WEFT_OK)
            return st;
        if (j->state < JOB_DONE)
            continue;
        if (!(rec = record_final(j)))
            return WEFT_ERR_NOMEM;
        st = weft_journal_compact_add(jc, rec);
        cJSON_Delete(rec);
        if (st != WEFT_OK)
            return st;
    }
    return WEFT_OK;
}

static void maybe_compact(struct weft_coord *c)
{
    if (!c->journal)
        return;
    uint64_t size = weft_journal_size(c->journal), base = weft_journal_base_size(c->journal);
    if (size < c->api.journal_compact || size < 2 * base)
        return;
    if (weft_journal_compact(c->journal, compact_fill, c) != WEFT_OK)
        WEFT_LOG_WARN("coord", "journal compaction failed; the journal keeps growing");
}

/* ---------------------------------------------------------------------------------------- */
/* Outcomes                                                                                  */

static void job_folder_remove(struct weft_coord *c, const struct job *j)
{
    char dir[2200];
    weft_coord_job_dir(c, j, dir, sizeof(dir));
    (void)weft_files_remove_dir(dir); /* logged; what is left is only disk space */
}

/* Keep at most keep_jobs finished jobs: the oldest go, with their folders. */
static void retain(struct weft_coord *c)
{
    while (c->finished.n > (size_t)c->api.keep_jobs) {
        struct job *j = c->finished.head;
        list_remove(&c->finished, j);
        if (journal_put(c, record_new("evict", j), false, NULL) != WEFT_OK)
            WEFT_LOG_WARN("coord", "job %s: cannot journal its eviction", j->id);
        job_folder_remove(c, j);
        table_remove(c, j);
        job_free(j);
    }
}

static void observe(uint64_t *buckets, uint64_t *count, double *sum, double v);

/* The job reached state (done, failed or cancelled): journal it and free its slot. */
static void job_finish(struct weft_coord *c, struct job *j, enum job_state state,
                       const char *reason)
{
    j->state = state;
    j->finished_at = unix_now();
    if (reason)
        snprintf(j->reason, sizeof(j->reason), "%s", reason);
    c->m.finished[state]++;
    if (state == JOB_DONE && j->started_at > 0) {
        observe(c->m.job_bucket, &c->m.job_count, &c->m.job_sum, j->finished_at - j->started_at);
        int k = 0;
        while (k < c->m.n_layouts && strcmp(c->m.layouts[k].name, j->layout) != 0)
            k++;
        if (k == c->m.n_layouts && k < LAYOUTS_MAX)
            snprintf(c->m.layouts[c->m.n_layouts++].name, sizeof(c->m.layouts[0].name), "%s",
                     j->layout);
        else if (k == c->m.n_layouts)
            snprintf(c->m.layouts[k = LAYOUTS_MAX].name, sizeof(c->m.layouts[0].name), "other");
        c->m.layouts[k].done++;
        c->m.layouts[k].seconds += j->finished_at - j->started_at;
    }
    if (journal_put(c, record_final(j), true, NULL) != WEFT_OK)
        WEFT_LOG_WARN("coord", "job %s: cannot journal that it is %s; after a restart it "
                               "runs again", j->id, weft_coord_state_name(state));
    list_push(&c->finished, j);
    /* its stages' seconds (summed over its images and replicas), as its record's timings */
    char times[256] = "", stages[200] = "";
    for (int i = 0, n = 0; i < j->n_stages && n < (int)sizeof(stages); i++)
        n += snprintf(stages + n, sizeof(stages) - (size_t)n, "%s%s %.3f s", i ? ", " : " (",
                      j->stages[i].name, j->stages[i].seconds);
    if (state == JOB_DONE && j->started_at > 0)
        snprintf(times, sizeof(times), " in %.3f s%s%s", j->finished_at - j->started_at, stages,
                 stages[0] ? ")" : "");
    WEFT_LOG_INFO("coord", "job %s %s%s%s%s", j->id, weft_coord_state_name(state), times,
                  reason ? ": " : "", reason ? reason : "");
    weft_api_job_changed(c, j, -1);
    retain(c);
    maybe_compact(c);
}

/* ---------------------------------------------------------------------------------------- */
/* Dispatch                                                                                  */

static weft_status_t job_start(struct weft_coord *c, struct job *j, struct weft_error *err)
{
    char dir[2200];
    weft_coord_job_dir(c, j, dir, sizeof(dir));
    weft_status_t st = weft_files_mkdirs(dir, err);
    const int n = j->spec.n_prompts + j->spec.n_negatives; /* the negatives after the prompts */
    char (*paths)[2400] = weft_calloc((size_t)n, sizeof(*paths));
    const char **ptrs = weft_calloc((size_t)n, sizeof(*ptrs));
    const char **names = weft_calloc((size_t)n, sizeof(*names));
    const char **texts = weft_calloc((size_t)n, sizeof(*texts));
    if (st == WEFT_OK && (!paths || !ptrs || !names || !texts)) {
        st = WEFT_ERR_NOMEM;
        weft_error_refuse(err, st, "out of memory");
    }
    for (int i = 0; st == WEFT_OK && i < n; i++) {
        const struct weft_job_prompt *p = &j->spec.prompts[i];
        if (p->text) {
            texts[i] = p->text;
            names[i] = "";
            continue;
        }
        if (p->name[0])
            snprintf(paths[i], sizeof(paths[i]), "%s/%s.safetensors", c->model->prompts_dir,
                     p->name);
        else
            snprintf(paths[i], sizeof(paths[i]), "%s/prompt-%d.safetensors", dir, i);
        ptrs[i] = paths[i];
        names[i] = p->name[0] ? p->name : "inline";
    }
    j->attempts++;
    cJSON *rec = record_new("start", j);
    if (st == WEFT_OK && (!rec || !cJSON_AddNumberToObject(rec, "attempt", j->attempts)))
        st = weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    /* not synced: a lost start record only lets a job run once more than max_attempts */
    if (st == WEFT_OK)
        st = journal_put(c, rec, false, err);
    else
        cJSON_Delete(rec);
    if (st == WEFT_OK) {
        struct weft_runner_job rj = {
            .key = j->key, .id = j->id, .n_prompts = j->spec.n_prompts,
            .n_negatives = j->spec.n_negatives, .true_cfg_scale = j->spec.true_cfg_scale,
            .prompt_paths = ptrs,
            .prompt_names = names, .prompt_texts = texts,
            .max_sequence_length = j->spec.max_sequence_length,
            .height = j->spec.height, .width = j->spec.width,
            .steps = j->spec.steps, .count = j->spec.count, .guidance = j->spec.guidance,
            .seed = j->spec.seed, .out_dir = dir,
        };
        st = c->runner->ops->start(c->runner, &rj, err);
    }
    weft_free(paths);
    weft_free(ptrs);
    weft_free(names);
    weft_free(texts);
    return st;
}

/* The runner cannot run jobs until something changes: every queued job fails with its
 * reason, instead of waiting for a capacity that will not come. */
static void fail_queued(struct weft_coord *c, const char *why)
{
    char reason[400];
    snprintf(reason, sizeof(reason), "the %s runner cannot run jobs: %s", c->runner->ops->name,
             why);
    while (c->queue.head) {
        struct job *j = c->queue.head;
        list_remove(&c->queue, j);
        job_finish(c, j, JOB_FAILED, reason);
    }
}

/* A runner that plans per job hears what waits (the queue's head and its total) and the last
 * submissions. */
static void tell_demand(struct weft_coord *c)
{
    if (!c->runner->ops->demand || !c->queue.head)
        return;
    const struct job *h = c->queue.head;
    struct weft_runner_demand d = {.height = h->spec.height, .width = h->spec.width,
                                   .steps = h->spec.steps, .images = weft_job_spec_images(&h->spec),
                                   .cfg = h->spec.n_negatives > 0 && h->spec.true_cfg_scale > 1};
    for (int i = 0; i < h->spec.n_prompts; i++)
        if (h->spec.prompts[i].tokens > d.text_tokens)
            d.text_tokens = h->spec.prompts[i].tokens;
    for (const struct job *j = h; j; j = j->next) {
        d.queued_images += weft_job_spec_images(&j->spec);
        d.queued_jobs++;
    }
    struct weft_runner_arrival recent[COORD_STREAM];
    const int n = c->n_arrivals < COORD_STREAM ? (int)c->n_arrivals : COORD_STREAM;
    for (int i = 0; i < n; i++) /* oldest first */
        recent[i] = c->arrivals[(c->n_arrivals - (uint64_t)(n - i)) % COORD_STREAM];
    d.arrivals = recent;
    d.n_arrivals = n;
    d.now = unix_now();
    c->runner->ops->demand(c->runner, &d);
}

static void dispatch(struct weft_coord *c)
{
    if (!c->runner || c->stopping)
        return;
    const char *why = c->runner->ops->unavailable(c->runner);
    if (why && c->queue.head) {
        fail_queued(c, why);
        return;
    }
    tell_demand(c);
    while (c->queue.head && c->running < c->runner->ops->capacity(c->runner)) {
        struct job *j = c->queue.head;
        list_remove(&c->queue, j);
        struct weft_error err = WEFT_ERROR_INIT;
        weft_status_t st = job_start(c, j, &err);
        if (st != WEFT_OK) {
            char reason[400];
            snprintf(reason, sizeof(reason), "could not start: %s", weft_error_text(&err));
            job_finish(c, j, JOB_FAILED, reason);
            continue;
        }
        j->state = JOB_RUNNING;
        j->started_at = unix_now();
        j->cancel_requested = false;
        c->running++;
        struct weft_layout lay;
        if (c->runner->ops->started_layout) /* its group's */
            c->runner->ops->started_layout(c->runner, &lay);
        else
            c->runner->ops->layout(c->runner, &lay); /* dp may have shrunk after a loss */
        weft_layout_name(&lay, j->layout, sizeof(j->layout));
        const char *chosen = c->runner->ops->layout_reason
                                 ? c->runner->ops->layout_reason(c->runner)
                                 : NULL;
        snprintf(j->layout_reason, sizeof(j->layout_reason), "%s", chosen ? chosen : "");
        WEFT_LOG_INFO("coord", "job %s started (attempt %d) on %s", j->id, j->attempts,
                      j->layout);
        weft_api_job_changed(c, j, -1);
        tell_demand(c);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Submission and cancellation                                                               */

/* The job on the model and the runner's layout (model/job.h's rules). */
static weft_status_t check_spec(const struct weft_coord *c, const struct weft_job_spec *spec,
                                struct weft_error *err)
{
    int64_t *tokens = weft_calloc((size_t)spec->n_prompts + (size_t)spec->n_negatives + 1,
                                  sizeof(*tokens));
    if (!tokens)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    struct weft_job_desc desc;
    weft_job_spec_desc(spec, tokens, &desc);
    const struct weft_job_limits lim = {c->api.max_prompts, c->api.max_images, c->api.max_pixels,
                                        c->api.max_steps};
    weft_status_t st = weft_job_check(c->model->desc, &c->layout, &desc, &lim, err);
    for (int g = 0; g < c->n_groups && st == WEFT_OK; g++) {
        if ((st = weft_job_check(c->model->desc, &c->groups[g], &desc, &lim, err)) != WEFT_OK) {
            char name[96];
            weft_layout_name(&c->groups[g], name, sizeof(name));
            weft_error_prefix(err, "group %d of [parallel] groups (%s, where the job may be "
                              "started)", g + 1, name);
        }
    }
    weft_free(tokens);
    return st;
}

/* Jobs of the journal were accepted under the configuration of their time: those the layout
 * of this start refuses fail now, with the reason, rather than on the workers. */
static void recheck_queue(struct weft_coord *c)
{
    struct job *next;
    for (struct job *j = c->queue.head; j; j = next) {
        next = j->next;
        struct weft_error err = WEFT_ERROR_INIT;
        if (check_spec(c, &j->spec, &err) == WEFT_OK)
            continue;
        char why[400];
        snprintf(why, sizeof(why), "refused by this configuration: %s", weft_error_text(&err));
        list_remove(&c->queue, j);
        job_finish(c, j, JOB_FAILED, why);
    }
}

static weft_status_t store_inline(struct weft_coord *c, struct job *j, struct weft_error *err)
{
    char dir[2200];
    weft_coord_job_dir(c, j, dir, sizeof(dir));
    weft_status_t st = weft_files_mkdirs(dir, err);
    for (int i = 0; st == WEFT_OK && i < j->spec.n_prompts + j->spec.n_negatives; i++) {
        struct weft_job_prompt *p = &j->spec.prompts[i];
        if (p->name[0] || p->text)
            continue;
        char path[2400];
        snprintf(path, sizeof(path), "%s/prompt-%d.safetensors", dir, i);
        st = weft_files_save(path, p->data, p->len, err);
        weft_free(p->data);
        p->data = NULL;
        p->len = 0;
    }
    return st;
}

uint64_t weft_coord_random_seed(void)
{
    uint64_t r = 0;
    if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
        r = (uint64_t)(unix_now() * 1e9) ^ ((uint64_t)getpid() << 32);
    return r & ((1ull << 53) - 1); /* exact in every JSON reader, as a number too */
}

struct job *weft_coord_job_by_key(struct weft_coord *c, uint64_t key)
{
    return find_key(c, key);
}

struct job *weft_coord_job_by_idem(struct weft_coord *c, const char *key)
{
    for (size_t i = c->n_jobs; i-- > 0;)
        if (c->jobs[i]->idem_key[0] && strcmp(c->jobs[i]->idem_key, key) == 0)
            return c->jobs[i];
    return NULL;
}

weft_status_t weft_coord_job_submit(struct weft_coord *c, struct weft_job_spec *spec,
                                    const char *idem_key, const uint8_t *idem_hash,
                                    struct job **job_p, int *http_p, char *err, size_t err_len)
{
    if (c->stopping) {
        *http_p = 503;
        snprintf(err, err_len, "the coordinator is shutting down");
        return WEFT_ERR_BUSY;
    }
    if (c->queue.n >= (size_t)c->api.max_queue) {
        *http_p = 503;
        snprintf(err, err_len, "the queue is full (%zu jobs waiting, [api] max_queue)",
                 c->queue.n);
        return WEFT_ERR_BUSY;
    }
    if (c->next_key > 0xffffffffull) {
        *http_p = 503;
        snprintf(err, err_len, "job numbers exhausted: restart with a new journal");
        return WEFT_ERR_RANGE;
    }
    const char *why = c->runner ? c->runner->ops->unavailable(c->runner) : NULL;
    if (why) {
        *http_p = 503;
        snprintf(err, err_len, "the %s runner cannot run jobs: %s", c->runner->ops->name, why);
        return WEFT_ERR_BUSY;
    }
    /* the job's rules, with the layout it will run on: a job the workers would refuse is
     * refused here */
    struct weft_error why_not = WEFT_ERROR_INIT;
    weft_status_t chk = check_spec(c, spec, &why_not);
    if (chk != WEFT_OK) {
        *http_p = chk == WEFT_ERR_NOMEM ? 500 : 400;
        snprintf(err, err_len, "%s", weft_error_text(&why_not));
        return chk;
    }
    char id[WEFT_JOB_ID_LEN + 1];
    make_id(c->next_key, id);
    if (spec->seed_random) { /* drawn once, then recorded like a given one */
        spec->seed = weft_coord_random_seed();
        spec->seed_random = false;
    }
    struct job *j = job_new(c->next_key, id, spec);
    *http_p = 500;
    if (!j) {
        snprintf(err, err_len, "out of memory");
        return WEFT_ERR_NOMEM;
    }
    j->submitted_at = unix_now();
    c->arrivals[c->n_arrivals++ % COORD_STREAM] = (struct weft_runner_arrival){
        .at = j->submitted_at, .height = j->spec.height, .width = j->spec.width,
        .steps = j->spec.steps, .images = weft_job_spec_images(&j->spec),
        .cfg = j->spec.n_negatives > 0 && j->spec.true_cfg_scale > 1};
    if (idem_key && idem_key[0]) {
        snprintf(j->idem_key, sizeof(j->idem_key), "%s", idem_key);
        memcpy(j->idem_hash, idem_hash, sizeof(j->idem_hash));
    }
    struct weft_error rec_err = WEFT_ERROR_INIT;
    weft_status_t st = store_inline(c, j, &rec_err);
    if (st == WEFT_OK)
        st = journal_put(c, record_submit(j, false), true, &rec_err);
    if (st == WEFT_OK)
        st = table_insert(c, j);
    if (st != WEFT_OK) {
        snprintf(err, err_len, "cannot record the job: %s",
                 rec_err.status != WEFT_OK ? weft_error_text(&rec_err) : weft_status_str(st));
        job_folder_remove(c, j);
        job_free(j);
        return st;
    }
    c->m.submitted++;
    list_push(&c->queue, j);
    WEFT_LOG_INFO("coord", "job %s queued: %d prompt(s) x %lld, %lldx%lld, %lld steps", j->id,
                  j->spec.n_prompts, (long long)j->spec.count, (long long)j->spec.width,
                  (long long)j->spec.height, (long long)j->spec.steps);
    *job_p = j;
    *http_p = 202;
    dispatch(c);
    return WEFT_OK;
}

int weft_coord_job_cancel(struct weft_coord *c, struct job *j)
{
    switch (j->state) {
    case JOB_QUEUED:
        list_remove(&c->queue, j);
        job_finish(c, j, JOB_CANCELLED, NULL);
        return 200;
    case JOB_RUNNING:
        if (!j->cancel_requested) {
            j->cancel_requested = true;
            c->runner->ops->cancel(c->runner, j->key);
        }
        return 202;
    default:
        return 409;
    }
}

/* ---------------------------------------------------------------------------------------- */
/* The runner's events                                                                       */

const double weft_coord_buckets[STEP_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                 1, 2.5, 5, 10, 30, 60, 300};

static void observe(uint64_t *buckets, uint64_t *count, double *sum, double v)
{
    (*count)++;
    *sum += v;
    for (int i = 0; i < STEP_BUCKETS; i++) {
        if (v <= weft_coord_buckets[i]) {
            buckets[i]++;
            return;
        }
    }
}

static void add_stage(struct job *j, const char *name, double seconds)
{
    for (int i = 0; i < j->n_stages; i++) {
        if (strcmp(j->stages[i].name, name) == 0) {
            j->stages[i].seconds += seconds;
            return;
        }
    }
    if (j->n_stages < JOB_MAX_STAGES) {
        snprintf(j->stages[j->n_stages].name, sizeof(j->stages[0].name), "%s", name);
        j->stages[j->n_stages++].seconds = seconds;
    }
}

/* Back in the queue: the steps of the images not yet made start again (the progress says so;
 * the images made are kept). */
static void requeue_progress(struct job *j)
{
    j->step = 0;
    for (int i = 0; i < j->n_images; i++)
        if (!j->images[i].done)
            j->image_steps[i] = 0;
}

static void on_finished(struct weft_coord *c, struct job *j, const struct weft_runner_event *ev)
{
    c->running--;
    if (ev->status == WEFT_ERR_CANCELLED && !j->cancel_requested && c->runner_stopped) {
        /* stopped by the shutdown: it stays queued in the journal and runs after a restart */
        j->state = JOB_QUEUED;
        j->interrupted = true;
        requeue_progress(j);
        WEFT_LOG_INFO("coord", "job %s interrupted by the shutdown; it runs again after a "
                               "restart", j->id);
        weft_api_job_changed(c, j, -1);
        return;
    }
    if (WEFT_STATUS_IS_PEER_LOST(ev->status) && !j->cancel_requested && !c->stopping &&
        j->attempts < c->api.max_attempts) {
        /* a device was lost under it: first in the queue again, for what the runner has left
         * (another replica, or the mesh planned again); images already written are kept */
        j->state = JOB_QUEUED;
        requeue_progress(j);
        list_push_front(&c->queue, j);
        WEFT_LOG_WARN("coord", "job %s: %s; it runs again (attempt %d of at most %lld)", j->id,
                      ev->reason[0] ? ev->reason : weft_status_str(ev->status), j->attempts + 1,
                      (long long)c->api.max_attempts);
        weft_api_job_changed(c, j, -1);
        return;
    }
    if (ev->status == WEFT_ERR_CANCELLED && j->cancel_requested) {
        job_finish(c, j, JOB_CANCELLED, NULL);
    } else if (ev->status == WEFT_ERR_CANCELLED) {
        job_finish(c, j, JOB_FAILED, "stopped by the runner without a request");
    } else if (ev->status != WEFT_OK) {
        job_finish(c, j, JOB_FAILED, ev->reason[0] ? ev->reason : weft_status_str(ev->status));
    } else if (j->images_done != j->n_images) {
        char why[128];
        snprintf(why, sizeof(why), "the runner finished with %d of %d images", j->images_done,
                 j->n_images);
        job_finish(c, j, JOB_FAILED, why);
    } else {
        job_finish(c, j, JOB_DONE, NULL);
    }
}

static void apply_event(struct weft_coord *c, const struct weft_runner_event *ev)
{
    if (ev->kind == WEFT_RUNNER_EV_CAPACITY)
        return; /* dispatch() below looks at capacity() again */
    struct job *j = find_key(c, ev->job);
    if (!j || j->state != JOB_RUNNING) {
        WEFT_LOG_DEBUG("coord", "event %d for job key %llu that is not running: ignored",
                       (int)ev->kind, (unsigned long long)ev->job);
        return;
    }
    switch (ev->kind) {
    case WEFT_RUNNER_EV_STAGE:
        add_stage(j, ev->stage[0] ? ev->stage : "other", ev->seconds);
        break;
    case WEFT_RUNNER_EV_STEP:
        j->step = ev->step;
        j->steps = ev->steps;
        for (int i = ev->image; i >= 0 && i < ev->image + ev->n_images && i < j->n_images; i++)
            j->image_steps[i] = ev->step;
        observe(c->m.step_bucket, &c->m.step_count, &c->m.step_sum, ev->seconds);
        weft_api_job_changed(c, j, -1);
        break;
    case WEFT_RUNNER_EV_IMAGE:
        if (ev->image >= 0 && ev->image < j->n_images && !j->images[ev->image].done) {
            j->images[ev->image] = (struct job_image){true, ev->width, ev->height};
            j->image_steps[ev->image] = j->steps;
            j->images_done++;
            weft_api_job_changed(c, j, ev->image);
        }
        break;
    case WEFT_RUNNER_EV_FINISHED:
        on_finished(c, j, ev);
        break;
    case WEFT_RUNNER_EV_CAPACITY:
        break;
    }
}

static void finish_shutdown(struct weft_coord *c);
static void stop_runner(struct weft_coord *c);

static void on_async(uv_async_t *h)
{
    struct weft_coord *c = h->data;
    pthread_mutex_lock(&c->sink.mu);
    struct ev_node *n = c->sink.head;
    c->sink.head = c->sink.tail = NULL;
    pthread_mutex_unlock(&c->sink.mu);
    while (n) {
        struct ev_node *next = n->next;
        apply_event(c, &n->ev);
        weft_free(n);
        n = next;
    }
    if (c->stopping && c->running == 0)
        finish_shutdown(c);
    else
        dispatch(c);
}

static void sink_post(struct weft_runner_sink *base, const struct weft_runner_event *ev)
{
    struct coord_sink *sink = (struct coord_sink *)base;
    bool critical = ev->kind == WEFT_RUNNER_EV_IMAGE || ev->kind == WEFT_RUNNER_EV_FINISHED ||
                    ev->kind == WEFT_RUNNER_EV_CAPACITY;
    struct ev_node *n;
    while (!(n = weft_malloc(sizeof(*n)))) {
        if (!critical)
            return;
        struct timespec ts = {0, 10000000L};
        nanosleep(&ts, NULL);
    }
    n->ev = *ev;
    n->ev.stage[sizeof(n->ev.stage) - 1] = '\0';
    n->ev.reason[sizeof(n->ev.reason) - 1] = '\0';
    n->next = NULL;
    pthread_mutex_lock(&sink->mu);
    if (sink->closed) {
        pthread_mutex_unlock(&sink->mu);
        weft_free(n);
        return;
    }
    if (sink->tail)
        sink->tail->next = n;
    else
        sink->head = n;
    sink->tail = n;
    uv_async_send(&sink->async); /* under the lock: the handle is not closed meanwhile */
    pthread_mutex_unlock(&sink->mu);
}

uv_loop_t *weft_coord_loop(struct weft_coord *c)
{
    return &c->loop;
}

struct weft_runner_sink *weft_coord_sink(struct weft_coord *c)
{
    return &c->sink.base;
}

const struct weft_model *weft_coord_model(const struct weft_coord *c)
{
    return c->model->desc;
}

/* ---------------------------------------------------------------------------------------- */
/* Replay                                                                                    */

static void replay_submit(struct weft_coord *c, const cJSON *rec, const char *id, size_t line)
{
    const cJSON *key = cJSON_GetObjectItemCaseSensitive(rec, "key");
    const cJSON *spec_json = cJSON_GetObjectItemCaseSensitive(rec, "spec");
    const cJSON *at = cJSON_GetObjectItemCaseSensitive(rec, "at");
    const cJSON *attempts = cJSON_GetObjectItemCaseSensitive(rec, "attempts");
    char err[256];
    struct weft_job_spec spec;
    if (!cJSON_IsNumber(key) || key->valuedouble < 0 || key->valuedouble > 0xffffffff ||
        strlen(id) != WEFT_JOB_ID_LEN) {
        WEFT_LOG_WARN("coord", "journal line %zu: submit record without a valid key or id: "
                               "skipped", line);
        return;
    }
    if (weft_coord_job_find(c, id) || find_key(c, (uint64_t)key->valuedouble)) {
        WEFT_LOG_WARN("coord", "journal line %zu: job %s recorded twice: the repeat is skipped",
                      line, id);
        return;
    }
    if (weft_job_spec_from_json(spec_json, c->model, &spec, err, sizeof(err)) != WEFT_OK) {
        WEFT_LOG_WARN("coord", "journal line %zu: job %s: %s: skipped", line, id, err);
        return;
    }
    struct job *j = job_new((uint64_t)key->valuedouble, id, &spec);
    if (!j || table_insert(c, j) != WEFT_OK) {
        WEFT_LOG_WARN("coord", "journal line %zu: out of memory: job %s skipped", line, id);
        weft_job_spec_cleanup(&spec);
        job_free(j);
        return;
    }
    j->submitted_at = cJSON_IsNumber(at) ? at->valuedouble : 0;
    j->attempts = cJSON_IsNumber(attempts)
                      ? (int)weft_double_int_or(attempts->valuedouble, 0, INT32_MAX, 0)
                      : 0;
    const cJSON *idem = cJSON_GetObjectItemCaseSensitive(rec, "idem");
    const cJSON *hash = cJSON_GetObjectItemCaseSensitive(rec, "idem_hash");
    if (cJSON_IsString(idem) && strlen(idem->valuestring) <= WEFT_IDEM_KEY_MAX &&
        cJSON_IsString(hash) && strlen(hash->valuestring) == 2 * sizeof(j->idem_hash)) {
        snprintf(j->idem_key, sizeof(j->idem_key), "%s", idem->valuestring);
        for (size_t i = 0; i < sizeof(j->idem_hash); i++) {
            unsigned v = 0;
            (void)sscanf(hash->valuestring + 2 * i, "%2x", &v);
            j->idem_hash[i] = (uint8_t)v;
        }
    }
}

static void replay_final(struct job *j, const cJSON *rec, enum job_state state)
{
    const cJSON *at = cJSON_GetObjectItemCaseSensitive(rec, "at");
    const cJSON *started = cJSON_GetObjectItemCaseSensitive(rec, "started");
    const cJSON *reason = cJSON_GetObjectItemCaseSensitive(rec, "reason");
    const cJSON *timings = cJSON_GetObjectItemCaseSensitive(rec, "timings");
    const cJSON *images = cJSON_GetObjectItemCaseSensitive(rec, "images");
    const cJSON *layout = cJSON_GetObjectItemCaseSensitive(rec, "layout");
    if (cJSON_IsString(layout))
        snprintf(j->layout, sizeof(j->layout), "%s", layout->valuestring);
    const cJSON *why = cJSON_GetObjectItemCaseSensitive(rec, "layout_reason");
    if (cJSON_IsString(why))
        snprintf(j->layout_reason, sizeof(j->layout_reason), "%s", why->valuestring);
    j->state = state;
    j->finished_at = cJSON_IsNumber(at) ? at->valuedouble : 0;
    j->started_at = cJSON_IsNumber(started) ? started->valuedouble : 0;
    if (cJSON_IsString(reason))
        snprintf(j->reason, sizeof(j->reason), "%s", reason->valuestring);
    for (const cJSON *t = timings ? timings->child : NULL; t; t = t->next)
        if (cJSON_IsNumber(t) && t->string)
            add_stage(j, t->string, t->valuedouble);
    if (state != JOB_DONE)
        return;
    int i = 0;
    for (const cJSON *im = images ? images->child : NULL; im && i < j->n_images; im = im->next) {
        const cJSON *w = cJSON_GetArrayItem(im, 0), *h = cJSON_GetArrayItem(im, 1);
        int64_t iw, ih;
        if (!cJSON_IsNumber(w) || !cJSON_IsNumber(h) ||
            !weft_double_int(w->valuedouble, 1, INT32_MAX, &iw) ||
            !weft_double_int(h->valuedouble, 1, INT32_MAX, &ih))
            break;
        j->images[i] = (struct job_image){true, (int)iw, (int)ih};
        j->image_steps[i++] = j->steps;
    }
    j->images_done = i;
}

static void replay_record(void *arg, const cJSON *rec, size_t line)
{
    struct weft_coord *c = arg;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(rec, "t");
    const cJSON *idj = cJSON_GetObjectItemCaseSensitive(rec, "id");
    if (!cJSON_IsString(t) || !cJSON_IsString(idj)) {
        WEFT_LOG_WARN("coord", "journal line %zu: record without type or id: skipped", line);
        return;
    }
    const char *type = t->valuestring, *id = idj->valuestring;
    if (strcmp(type, "submit") == 0) {
        replay_submit(c, rec, id, line);
        return;
    }
    struct job *j = weft_coord_job_find(c, id);
    if (!j) {
        WEFT_LOG_WARN("coord", "journal line %zu: '%s' record for unknown job %s: skipped", line,
                      type, id);
        return;
    }
    if (strcmp(type, "start") == 0) {
        j->attempts++;
    } else if (strcmp(type, "evict") == 0) {
        table_remove(c, j);
        job_free(j);
    } else {
        for (int s = JOB_DONE; s < JOB_STATE_COUNT; s++)
            if (strcmp(type, state_names[s]) == 0)
                replay_final(j, rec, (enum job_state)s);
    }
}

static int finished_cmp(const void *a, const void *b)
{
    const struct job *x = *(const struct job *const *)a, *y = *(const struct job *const *)b;
    return x->finished_at < y->finished_at ? -1 : x->finished_at > y->finished_at;
}

/* After replay: unfinished jobs back in the queue (key order), finished ones in the retention
 * list, images checked. */
static weft_status_t replay_settle(struct weft_coord *c)
{
    struct job **fin = weft_calloc(c->n_jobs + 1, sizeof(struct job *));
    if (!fin)
        return WEFT_ERR_NOMEM;
    size_t n_fin = 0, requeued = 0, done = 0;
    for (size_t i = 0; i < c->n_jobs; i++) {
        struct job *j = c->jobs[i];
        if (j->state >= JOB_DONE) {
            fin[n_fin++] = j;
            continue;
        }
        if (j->attempts >= c->api.max_attempts) {
            char why[200];
            snprintf(why, sizeof(why), "%d runs were started and none finished (the last was "
                                       "cut short by a coordinator restart); not run again "
                                       "([api] max_attempts)", j->attempts);
            j->state = JOB_FAILED;
            j->finished_at = unix_now();
            snprintf(j->reason, sizeof(j->reason), "%s", why);
            WEFT_LOG_WARN("coord", "job %s: %s", j->id, why);
            fin[n_fin++] = j;
            continue;
        }
        list_push(&c->queue, j);
        requeued++;
    }
    qsort(fin, n_fin, sizeof(struct job *), finished_cmp);
    for (size_t i = 0; i < n_fin; i++) {
        struct job *j = fin[i];
        list_push(&c->finished, j);
        for (int k = 0; j->state == JOB_DONE && k < j->n_images; k++) {
            char path[2400], dir[2200];
            struct stat sb;
            weft_coord_job_dir(c, j, dir, sizeof(dir));
            snprintf(path, sizeof(path), "%s/%d.png", dir, k);
            if (stat(path, &sb) != 0)
                WEFT_LOG_WARN("coord", "job %s: image %s is missing", j->id, path);
        }
        done += j->state == JOB_DONE;
    }
    weft_free(fin);
    retain(c);
    if (c->n_jobs)
        WEFT_LOG_INFO("coord", "journal: %zu jobs (%zu queued again, %zu done)", c->n_jobs,
                      requeued, done);
    return WEFT_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Life cycle                                                                                */

weft_status_t weft_coord_create(const struct weft_coord_opts *opts, struct weft_coord **coord_p,
                                struct weft_error *err)
{
    weft_status_t st = weft_server_check_address(opts->api->listen);
    if (st != WEFT_OK)
        return st;
    struct weft_coord *c = weft_calloc(1, sizeof(*c));
    if (!c)
        return WEFT_ERR_NOMEM;
    c->api = *opts->api;
    c->next_key = 1;
    int rc;
    if ((rc = uv_loop_init(&c->loop)) != 0) {
        WEFT_LOG_ERROR("coord", "event loop: %s", uv_strerror(rc));
        st = WEFT_ERR_INTERNAL;
        goto err;
    }
    c->loop_ready = true;
    if ((rc = uv_async_init(&c->loop, &c->sink.async, on_async)) != 0) {
        WEFT_LOG_ERROR("coord", "event loop: %s", uv_strerror(rc));
        st = WEFT_ERR_INTERNAL;
        goto err;
    }
    c->sink.async.data = c;
    c->sink.base.post = sink_post;
    c->sink.coord = c;
    pthread_mutex_init(&c->sink.mu, NULL);
    c->sink_ready = true;
    if ((st = weft_job_model_load(opts->model_dir, &c->model, err)) != WEFT_OK)
        goto err;
    if ((st = weft_files_mkdirs(c->api.output_dir, err)) != WEFT_OK)
        goto err;
    if (c->api.journal_dir[0]) {
        if ((st = weft_journal_open(c->api.journal_dir, replay_record, c, &c->journal)) ||
            (st = replay_settle(c)) ||
            (st = weft_journal_compact(c->journal, compact_fill, c)))
            goto err;
    } else {
        WEFT_LOG_WARN("coord", "[api] journal_dir is empty: jobs are not journaled and a "
                               "restart loses them");
    }
    *coord_p = c;
    return WEFT_OK;
err:
    weft_coord_destroy(c);
    return st;
}

static void on_handle_closed(uv_handle_t *h)
{
    (void)h;
}

static void close_walk(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, on_handle_closed);
}

void weft_coord_destroy(struct weft_coord *c)
{
    if (!c)
        return;
    if (c->loop_ready) {
        /* the connections free themselves when closed; every other handle is ours */
        weft_server_close_conns(c, false);
        weft_server_close_listener(c);
        uv_walk(&c->loop, close_walk, NULL);
        (void)uv_run(&c->loop, UV_RUN_DEFAULT);
        if (uv_loop_close(&c->loop) != 0)
            WEFT_LOG_WARN("coord", "event loop closed with handles still open");
    }
    if (c->sink_ready) {
        struct ev_node *n = c->sink.head;
        while (n) {
            struct ev_node *next = n->next;
            weft_free(n);
            n = next;
        }
        pthread_mutex_destroy(&c->sink.mu);
    }
    for (size_t i = 0; i < c->n_jobs; i++)
        job_free(c->jobs[i]);
    weft_free(c->jobs);
    weft_journal_close(c->journal);
    weft_job_model_destroy(c->model);
    weft_free(c);
}

/* Everything has stopped: close the handles so that uv_run returns. */
static void finish_shutdown(struct weft_coord *c)
{
    if (c->closing_handles)
        return;
    c->closing_handles = true;
    stop_runner(c); /* a runner with handles on the loop (the cluster runner) closes them */
    pthread_mutex_lock(&c->sink.mu);
    c->sink.closed = true;
    pthread_mutex_unlock(&c->sink.mu);
    weft_server_close_conns(c, false);
    weft_server_close_listener(c);
    uv_close((uv_handle_t *)&c->sink.async, on_handle_closed);
    uv_close((uv_handle_t *)&c->grace, on_handle_closed);
    uv_close((uv_handle_t *)&c->watch_timer, on_handle_closed);
    uv_close((uv_handle_t *)&c->sigint, on_handle_closed);
    uv_close((uv_handle_t *)&c->sigterm, on_handle_closed);
    /* closing the handles restored the default action: a second signal during the rest of
     * the teardown would kill the process instead of letting it exit 0 */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    WEFT_LOG_INFO("coord", "stopped (%zu jobs queued in the journal)", c->queue.n);
}

static void stop_runner(struct weft_coord *c)
{
    if (c->runner_stopped)
        return;
    c->runner_stopped = true;
    if (c->running)
        WEFT_LOG_INFO("coord", "stopping %d running job(s) at the next step", c->running);
    c->runner->ops->stop(c->runner);
}

static void on_watch_tick(uv_timer_t *t)
{
    struct weft_coord *c = t->data;
    if (c->watches)
        weft_api_watch_tick(c);
}

static void on_grace(uv_timer_t *t)
{
    stop_runner(t->data);
}

static void on_signal(uv_signal_t *s, int signum)
{
    struct weft_coord *c = s->data;
    if (c->stopping) {
        stop_runner(c); /* a second signal: do not wait */
        return;
    }
    WEFT_LOG_INFO("coord", "%s: shutting down (no new jobs; new requests answered 503)",
                  strsignal(signum));
    c->stopping = true; /* the server answers 503 from here on; the listener stays open */
    /* answers waiting on jobs that will not run in this process are given now (503 for an
     * OpenAI request, the end of an event stream): the jobs stay journaled */
    for (struct job *j = c->queue.head, *next; j; j = next) {
        next = j->next;
        weft_api_job_changed(c, j, -1);
    }
    if (c->running == 0) {
        finish_shutdown(c);
        return;
    }
    WEFT_LOG_INFO("coord", "waiting up to %lld ms for %d running job(s)",
                  (long long)c->api.shutdown_grace_ms, c->running);
    uv_timer_start(&c->grace, on_grace, (uint64_t)c->api.shutdown_grace_ms, 0);
}

weft_status_t weft_coord_run_take(struct weft_coord *c, struct weft_runner *runner)
{
    c->runner = runner;
    runner->ops->layout(runner, &c->layout);
    c->n_groups = runner->ops->check_layouts
                      ? runner->ops->check_layouts(runner, c->groups, WEFT_COORD_CHECK_LAYOUTS)
                      : 0;
    recheck_queue(c);
    int rc;
    if ((rc = uv_timer_init(&c->loop, &c->grace)) != 0 ||
        (rc = uv_timer_init(&c->loop, &c->watch_timer)) != 0 ||
        (rc = uv_signal_init(&c->loop, &c->sigint)) != 0 ||
        (rc = uv_signal_init(&c->loop, &c->sigterm)) != 0 ||
        (rc = uv_signal_start(&c->sigint, on_signal, SIGINT)) != 0 ||
        (rc = uv_signal_start(&c->sigterm, on_signal, SIGTERM)) != 0) {
        WEFT_LOG_ERROR("coord", "signals: %s", uv_strerror(rc));
        c->runner = NULL;
        weft_runner_destroy(runner);
        return WEFT_ERR_INTERNAL;
    }
    c->grace.data = c->sigint.data = c->sigterm.data = c->watch_timer.data = c;
    c->signals_ready = true;
    c->watch_timer_ready = true;
    c->started_at = unix_now();
    uint64_t tick = c->api.events_keepalive_ms < 1000 ? (uint64_t)c->api.events_keepalive_ms
                                                       : 1000;
    uv_timer_start(&c->watch_timer, on_watch_tick, tick, tick);
    dispatch(c);
    rc = uv_run(&c->loop, UV_RUN_DEFAULT);
    c->runner = NULL;
    weft_runner_destroy(runner);
    return rc == 0 ? WEFT_OK : WEFT_ERR_INTERNAL;
}
