/* The local runner: one thread that owns the model and runs the coordinator's jobs one after
 * another, image by image, reporting steps, stages and images through the sink. */
#include "coordinator/local_runner.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "coordinator/files.h"
#include "worker/noise.h"
#include "worker/pipeline.h"
#include "worker/png.h"

struct lr_job {
    struct weft_runner_job job; /* strings below are owned copies */
    char *id, *out_dir;
    char **prompt_paths;
    struct lr_job *next;
};

struct local_runner {
    struct weft_runner base;
    struct weft_runner_sink *sink;
    char model_dir[1024];
    int threads;
    pthread_t thread;
    bool thread_started;
    /* owned by the thread */
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    struct weft_pipeline *pipe;
    /* shared, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct lr_job *head, *tail;
    bool quit, stopping, loaded;
    uint64_t current;           /* key of the job running (0: none) */
    char load_error[256];
    double load_seconds;
    size_t weight_bytes;
    int kernel_threads;
    size_t n_comps; /* the pipeline's components, copied once opened (describe reads these) */
    struct {
        char name[32], class_name[64], stage[16];
        int device;
        uint64_t weight_bytes;
    } comps[8];
    uint64_t jobs_done, images_done;
    atomic_bool cancel;         /* the current job stops at its next step */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void lr_job_free(struct lr_job *j)
{
    if (!j)
        return;
    for (int i = 0; j->prompt_paths && i < j->job.n_prompts; i++)
        weft_free(j->prompt_paths[i]);
    weft_free(j->prompt_paths);
    weft_free(j->id);
    weft_free(j->out_dir);
    weft_free(j);
}

static void post_finished(struct local_runner *r, uint64_t key, weft_status_t st,
                          const char *reason)
{
    struct weft_runner_event ev = {.kind = WEFT_RUNNER_EV_FINISHED, .job = key, .status = st};
    if (reason)
        snprintf(ev.reason, sizeof(ev.reason), "%s", reason);
    weft_runner_post(r->sink, &ev);
}

static void post_stage(struct local_runner *r, uint64_t key, const char *stage, double seconds)
{
    struct weft_runner_event ev = {.kind = WEFT_RUNNER_EV_STAGE, .job = key, .seconds = seconds};
    snprintf(ev.stage, sizeof(ev.stage), "%s", stage);
    weft_runner_post(r->sink, &ev);
}

/* ---------------------------------------------------------------------------------------- */
/* Model                                                                                     */

static weft_status_t load_model(struct local_runner *r)
{
    weft_status_t st = weft_kernels_cpu_create(r->threads, &r->K, &r->kc);
    if (st != WEFT_OK)
        return st;
    /* a server runs many jobs: every component stays loaded once it has been */
    struct weft_pipeline_opts po = {.kernels = r->K, .kctx = r->kc, .keep_resident = true};
    if ((st = weft_pipeline_open(r->model_dir, &po, &r->pipe)) != WEFT_OK)
        return st;
    if (!weft_pipeline_has_vae(r->pipe)) {
        WEFT_LOG_ERROR("local", "%s: no vae/ component: serving images needs a pipeline "
                                "folder (model_index.json, transformer/, vae/)", r->model_dir);
        return WEFT_ERR_UNSUPPORTED;
    }
    return WEFT_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Jobs                                                                                      */

struct step_ctx {
    struct local_runner *r;
    uint64_t key;
    int image;
    double t_last;
};

static weft_status_t on_step(void *arg, int step, int steps, const float *latents, int64_t n)
{
    (void)latents, (void)n;
    struct step_ctx *s = arg;
    double t = now_s();
    struct weft_runner_event ev = {.kind = WEFT_RUNNER_EV_STEP, .job = s->key,
                                   .image = s->image, .n_images = 1, .step = step + 1,
                                   .steps = steps, .seconds = t - s->t_last};
    s->t_last = t;
    weft_runner_post(s->r->sink, &ev);
    return atomic_load(&s->r->cancel) ? WEFT_ERR_CANCELLED : WEFT_OK;
}

/* PNG of image i, with the parameters that made it in text chunks, durable before it is
 * reported. */
static weft_status_t write_png(const struct weft_runner_job *job, int image,
                               const struct weft_pipeline_result *res)
{
    char path[2400], software[64], seed[32], steps[32], guid[32], prompt[32], index[32];
    snprintf(path, sizeof(path), "%s/%d.png", job->out_dir, image);
    snprintf(software, sizeof(software), "weft %s", WEFT_VERSION);
    snprintf(seed, sizeof(seed), "%llu", (unsigned long long)job->seed);
    snprintf(steps, sizeof(steps), "%lld", (long long)job->steps);
    snprintf(guid, sizeof(guid), "%g", job->guidance);
    snprintf(prompt, sizeof(prompt), "%lld", (long long)(image / job->count));
    snprintf(index, sizeof(index), "%d", image);
    const struct weft_png_text text[] = {
        {"Software", software}, {"weft.job", job->id},   {"weft.image", index},
        {"weft.prompt_index", prompt}, {"weft.seed", seed}, {"weft.steps", steps},
        {"weft.guidance", guid},
    };
    weft_status_t st = weft_png_write(path, res->rgb, res->width, res->height,
                                      sizeof(text) / sizeof(text[0]), text);
    if (st == WEFT_OK)
        st = weft_files_sync_file(path);
    if (st == WEFT_OK)
        st = weft_files_sync_dir(job->out_dir);
    return st;
}

/* Image i of the job: prompt i / count, the seed's noise at [i n, (i + 1) n) (runner.h). */
static weft_status_t run_image(struct local_runner *r, const struct weft_runner_job *job,
                               int image, float *noise, int64_t n)
{
    weft_noise_normal(job->seed, (int64_t)image * n, n, noise);
    struct step_ctx sc = {r, job->key, image, now_s()};
    struct weft_pipeline_job pj = {
        .prompt_embeds = job->prompt_paths[image / job->count], .height = job->height,
        .width = job->width, .steps = (int)job->steps, .guidance = (float)job->guidance,
        .seed = job->seed, .latents_init = noise, .decode = true, .on_step = on_step,
        .cb_arg = &sc,
    };
    struct weft_pipeline_result res;
    weft_status_t st = weft_pipeline_run(r->pipe, &pj, &res);
    if (st != WEFT_OK)
        return st;
    static const char *const names[WEFT_STAGE_COUNT] = {"encode", "denoise", "decode"};
    for (int s = 0; s < WEFT_STAGE_COUNT; s++)
        post_stage(r, job->key, names[s], res.seconds[s]);
    double t0 = now_s();
    st = write_png(job, image, &res);
    weft_pipeline_result_cleanup(&res);
    if (st != WEFT_OK)
        return st;
    post_stage(r, job->key, "png", now_s() - t0);
    struct weft_runner_event ev = {.kind = WEFT_RUNNER_EV_IMAGE, .job = job->key,
                                   .image = image, .n_images = 1, .width = (int)job->width,
                                   .height = (int)job->height};
    weft_runner_post(r->sink, &ev);
    pthread_mutex_lock(&r->mu);
    r->images_done++;
    pthread_mutex_unlock(&r->mu);
    return WEFT_OK;
}

static weft_status_t run_job(struct local_runner *r, const struct weft_runner_job *job)
{
    const struct weft_flux_config *c = weft_pipeline_flux_config(r->pipe);
    int64_t n = (job->height / 16) * (job->width / 16) * c->in_channels;
    float *noise = weft_malloc((size_t)n * sizeof(float));
    if (!noise)
        return WEFT_ERR_NOMEM;
    weft_status_t st = WEFT_OK;
    int64_t images = (int64_t)job->n_prompts * job->count;
    for (int64_t i = 0; st == WEFT_OK && i < images; i++)
        st = run_image(r, job, (int)i, noise, n);
    weft_free(noise);
    return st;
}

static void *thread_main(void *arg)
{
    struct local_runner *r = arg;
    weft_log_clear_last_error();
    double t0 = now_s();
    weft_status_t load = load_model(r);
    pthread_mutex_lock(&r->mu);
    r->loaded = load == WEFT_OK;
    r->load_seconds = now_s() - t0;
    if (load == WEFT_OK) {
        for (size_t i = 0; i < weft_pipeline_component_count(r->pipe); i++) {
            const struct weft_pipeline_component *pc = weft_pipeline_component_at(r->pipe, i);
            r->weight_bytes += pc->weight_bytes;
            if (r->n_comps == sizeof(r->comps) / sizeof(r->comps[0]))
                continue;
            snprintf(r->comps[r->n_comps].name, sizeof(r->comps[0].name), "%s", pc->name);
            snprintf(r->comps[r->n_comps].class_name, sizeof(r->comps[0].class_name), "%s",
                     pc->class_name ? pc->class_name : "");
            snprintf(r->comps[r->n_comps].stage, sizeof(r->comps[0].stage), "%s",
                     weft_pipe_stage_name(pc->stage));
            r->comps[r->n_comps].device = pc->device.index;
            r->comps[r->n_comps++].weight_bytes = pc->weight_bytes;
        }
        r->kernel_threads = weft_kernels_cpu_threads(r->kc);
        WEFT_LOG_INFO("local", "pipeline %s opened (%zu MiB of weights once loaded, on the "
                               "first job)", r->model_dir, r->weight_bytes >> 20);
    } else {
        snprintf(r->load_error, sizeof(r->load_error), "the model did not load: %s",
                 weft_log_last_error()[0] ? weft_log_last_error() : weft_status_str(load));
    }
    for (;;) {
        while (!r->head && !r->quit)
            pthread_cond_wait(&r->cv, &r->mu);
        if (!r->head)
            break; /* quit with nothing left */
        struct lr_job *j = r->head;
        r->head = j->next;
        if (!r->head)
            r->tail = NULL;
        bool stopped = r->stopping || r->quit;
        r->current = j->job.key;
        atomic_store(&r->cancel, false);
        pthread_mutex_unlock(&r->mu);

        weft_status_t st;
        char reason[256] = "";
        if (stopped) {
            st = WEFT_ERR_CANCELLED;
        } else if (load != WEFT_OK) {
            st = load;
            snprintf(reason, sizeof(reason), "%s", r->load_error);
        } else {
            weft_log_clear_last_error();
            st = run_job(r, &j->job);
            if (st != WEFT_OK && st != WEFT_ERR_CANCELLED)
                snprintf(reason, sizeof(reason), "%s",
                         weft_log_last_error()[0] ? weft_log_last_error()
                                                  : weft_status_str(st));
        }
        post_finished(r, j->job.key, st, reason[0] ? reason : NULL);
        lr_job_free(j);
        pthread_mutex_lock(&r->mu);
        r->current = 0;
        r->jobs_done++;
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* The runner's operations (loop thread)                                                     */

static struct lr_job *job_copy(const struct weft_runner_job *src)
{
    struct lr_job *j = weft_calloc(1, sizeof(*j));
    if (!j)
        return NULL;
    j->job = *src;
    j->id = weft_strdup(src->id);
    j->out_dir = weft_strdup(src->out_dir);
    j->prompt_paths = weft_calloc((size_t)src->n_prompts, sizeof(char *));
    bool ok = j->id && j->out_dir && j->prompt_paths;
    for (int i = 0; ok && i < src->n_prompts; i++)
        ok = (j->prompt_paths[i] = weft_strdup(src->prompt_paths[i])) != NULL;
    if (!ok) {
        lr_job_free(j);
        return NULL;
    }
    j->job.id = j->id;
    j->job.out_dir = j->out_dir;
    j->job.prompt_paths = (const char *const *)j->prompt_paths;
    return j;
}

static weft_status_t lr_start(struct weft_runner *base, const struct weft_runner_job *job)
{
    struct local_runner *r = (struct local_runner *)base;
    struct lr_job *j = job_copy(job);
    if (!j) {
        WEFT_LOG_ERROR("local", "job %s: out of memory", job->id);
        return WEFT_ERR_NOMEM;
    }
    pthread_mutex_lock(&r->mu);
    if (r->tail)
        r->tail->next = j;
    else
        r->head = j;
    r->tail = j;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return WEFT_OK;
}

static void lr_cancel(struct weft_runner *base, uint64_t key)
{
    struct local_runner *r = (struct local_runner *)base;
    struct lr_job *found = NULL;
    pthread_mutex_lock(&r->mu);
    if (r->current == key) {
        atomic_store(&r->cancel, true);
    } else {
        for (struct lr_job **pp = &r->head; *pp; pp = &(*pp)->next) {
            if ((*pp)->job.key != key)
                continue;
            found = *pp;
            *pp = found->next;
            if (r->tail == found) {
                r->tail = NULL;
                for (struct lr_job *q = r->head; q; q = q->next)
                    r->tail = q;
            }
            break;
        }
    }
    pthread_mutex_unlock(&r->mu);
    if (found) {
        post_finished(r, key, WEFT_ERR_CANCELLED, NULL);
        lr_job_free(found);
    }
}

static int lr_capacity(struct weft_runner *base)
{
    (void)base;
    return 1;
}

static cJSON *lr_describe(struct weft_runner *base)
{
    struct local_runner *r = (struct local_runner *)base;
    pthread_mutex_lock(&r->mu);
    bool loaded = r->loaded, failed = r->load_error[0] != 0;
    char err[256];
    snprintf(err, sizeof(err), "%s", r->load_error);
    double load_s = r->load_seconds;
    size_t bytes = r->weight_bytes;
    int threads = r->kernel_threads;
    uint64_t jobs = r->jobs_done, images = r->images_done;
    bool busy = r->current != 0;
    pthread_mutex_unlock(&r->mu);

    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "runner", "local");
    cJSON_AddBoolToObject(o, "ready", loaded);
    if (failed)
        cJSON_AddStringToObject(o, "error", err);
    cJSON *workers = cJSON_AddArrayToObject(o, "workers");
    cJSON *w = cJSON_CreateObject();
    char host[256] = "localhost";
    (void)gethostname(host, sizeof(host) - 1);
    cJSON_AddStringToObject(w, "id", "local-0");
    cJSON_AddStringToObject(w, "host", host);
    cJSON_AddStringToObject(w, "device", "cpu:0");
    cJSON_AddStringToObject(w, "state", failed ? "failed" : !loaded ? "loading"
                                                    : busy          ? "busy"
                                                                    : "idle");
    cJSON_AddNumberToObject(w, "threads", threads);
    cJSON_AddNumberToObject(w, "weight_bytes", (double)bytes);
    cJSON_AddItemToArray(workers, w);
    cJSON *mesh = cJSON_AddObjectToObject(o, "mesh");
    cJSON_AddNumberToObject(mesh, "dp", 1);
    cJSON_AddNumberToObject(mesh, "ring", 1);
    cJSON_AddNumberToObject(mesh, "ulysses", 1);
    cJSON_AddNumberToObject(mesh, "tp", 1);
    cJSON *dm = cJSON_AddObjectToObject(o, "device_map");
    cJSON *comps = cJSON_AddArrayToObject(o, "components");
    pthread_mutex_lock(&r->mu); /* written once by the thread before loaded, under mu */
    for (size_t i = 0; i < r->n_comps; i++) {
        char dev[32];
        snprintf(dev, sizeof(dev), "cpu:%d", r->comps[i].device);
        cJSON_AddStringToObject(dm, r->comps[i].name, dev);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", r->comps[i].name);
        cJSON_AddStringToObject(e, "class", r->comps[i].class_name);
        cJSON_AddStringToObject(e, "device", dev);
        cJSON_AddStringToObject(e, "stage", r->comps[i].stage);
        cJSON_AddNumberToObject(e, "weight_bytes", (double)r->comps[i].weight_bytes);
        cJSON_AddItemToArray(comps, e);
    }
    pthread_mutex_unlock(&r->mu);
    cJSON_AddStringToObject(o, "model", r->model_dir);
    cJSON_AddNumberToObject(o, "load_seconds", load_s);
    cJSON_AddNumberToObject(o, "jobs_run", (double)jobs);
    cJSON_AddNumberToObject(o, "images_made", (double)images);
    return o;
}

static void lr_metrics(struct weft_runner *base, struct weft_sbuf *out)
{
    struct local_runner *r = (struct local_runner *)base;
    pthread_mutex_lock(&r->mu);
    uint64_t images = r->images_done;
    bool loaded = r->loaded;
    pthread_mutex_unlock(&r->mu);
    weft_sbuf_printf(out,
                     "# HELP weft_local_model_loaded The local runner's model is loaded.\n"
                     "# TYPE weft_local_model_loaded gauge\nweft_local_model_loaded %d\n"
                     "# HELP weft_local_images_total Images the local runner made.\n"
                     "# TYPE weft_local_images_total counter\nweft_local_images_total %llu\n",
                     loaded ? 1 : 0, (unsigned long long)images);
}

static void lr_stop(struct weft_runner *base)
{
    struct local_runner *r = (struct local_runner *)base;
    pthread_mutex_lock(&r->mu);
    r->stopping = true;
    if (r->current)
        atomic_store(&r->cancel, true);
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void lr_destroy(struct weft_runner *base)
{
    struct local_runner *r = (struct local_runner *)base;
    if (r->thread_started) {
        pthread_mutex_lock(&r->mu);
        r->quit = true;
        r->stopping = true;
        atomic_store(&r->cancel, true);
        pthread_cond_signal(&r->cv);
        pthread_mutex_unlock(&r->mu);
        pthread_join(r->thread, NULL);
    }
    struct lr_job *j = r->head;
    while (j) {
        struct lr_job *next = j->next;
        lr_job_free(j);
        j = next;
    }
    weft_pipeline_close(r->pipe);
    weft_kernels_cpu_destroy(r->kc);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    weft_free(r);
}

static const struct weft_runner_ops lr_ops = {
    .name = "local",
    .start = lr_start,
    .cancel = lr_cancel,
    .capacity = lr_capacity,
    .describe = lr_describe,
    .metrics = lr_metrics,
    .stop = lr_stop,
    .destroy = lr_destroy,
};

weft_status_t weft_local_runner_create(const struct weft_local_runner_opts *opts,
                                       struct weft_runner_sink *sink,
                                       struct weft_runner **runner_p)
{
    struct local_runner *r = weft_calloc(1, sizeof(*r));
    if (!r)
        return WEFT_ERR_NOMEM;
    r->base.ops = &lr_ops;
    r->sink = sink;
    r->threads = opts->threads;
    snprintf(r->model_dir, sizeof(r->model_dir), "%s", opts->model_dir);
    atomic_init(&r->cancel, false);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    int rc = pthread_create(&r->thread, NULL, thread_main, r);
    if (rc != 0) {
        WEFT_LOG_ERROR("local", "cannot start the runner thread: %s", strerror(rc));
        lr_destroy(&r->base);
        return WEFT_ERR_INTERNAL;
    }
    r->thread_started = true;
    *runner_p = &r->base;
    return WEFT_OK;
}
