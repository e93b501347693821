/* The local runner: one thread that owns the model and runs the coordinator's jobs one after
 * another, image by image, through the image pipeline (runtime.h), reporting steps, stages and
 * images through the sink. */
#include "worker/local_runner.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/files.h"
#include "common/log.h"
#include "model/job.h"
#include "worker/runtime.h"

struct lr_job {
    struct weft_runner_job job; /* strings below are owned copies */
    char *id, *out_dir;
    char **prompt_paths, **prompt_names, **prompt_texts; /* NULL entries: the other kind */
    struct lr_job *next;
};

struct local_runner {
    struct weft_runner base;
    struct weft_runner_sink *sink;
    char model_dir[WEFT_CONF_PATH];
    int threads, compute;
    struct weft_device device;
    uint64_t prompt_cache;
    pthread_t thread;
    bool thread_started;
    /* owned by the thread */
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    struct weft_runtime *rt;
    /* shared, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct lr_job *head, *tail;
    bool quit, stopping, load_done, loaded;
    uint64_t current;           /* key of the job running (0: none) */
    char load_error[WEFT_ERROR_MSG + 32]; /* written once, before load_done */
    double load_seconds;
    int kernel_threads;
    struct weft_model model;    /* a copy of the description, once loaded */
    uint64_t transformer_bytes, vae_bytes;
    uint64_t jobs_done, images_done;
    struct weft_rt_text_stats text; /* the runtime's, copied after each job */
    uint64_t text_bytes;            /* the text encoders', once loaded (or as they will be) */
    atomic_bool cancel;         /* the current job stops at its next step */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void strv_free(char **v, int n)
{
    for (int i = 0; v && i < n; i++)
        weft_free(v[i]);
    weft_free(v);
}

static void lr_job_free(struct lr_job *j)
{
    if (!j)
        return;
    const int n = j->job.n_prompts + j->job.n_negatives;
    strv_free(j->prompt_paths, n);
    strv_free(j->prompt_names, n);
    strv_free(j->prompt_texts, n);
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

static weft_status_t load_model(struct local_runner *r, struct weft_error *err)
{
    char why[300];
    weft_status_t st = weft_kernels_create(&r->device, r->threads, &r->K, &r->kc, why,
                                           sizeof(why));
    if (st != WEFT_OK)
        return weft_error_set(err, st, "local", "cannot start the kernels: %s", why);
    /* a server: everything resident, encoded prompts cached */
    const struct weft_rt_opts ro = {r->K, r->kc, false, r->prompt_cache};
    if ((st = weft_runtime_create(&ro, &r->rt)) != WEFT_OK)
        return weft_error_refuse(err, st, "out of memory");
    struct weft_rt_assign *a = weft_calloc(1, sizeof(*a));
    if (!a)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    weft_rt_assign_single(r->model_dir, a);
    a->compute = (enum weft_dtype)r->compute;
    st = weft_runtime_assign(r->rt, a, NULL, err);
    weft_free(a);
    if (st == WEFT_OK && !weft_runtime_model(r->rt)->has_vae)
        st = weft_error_refuse(err, WEFT_ERR_UNSUPPORTED,
                               "%s: no vae/ component: serving images needs a pipeline folder "
                               "(model_index.json, transformer/, vae/)", r->model_dir);
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* Jobs                                                                                      */

struct step_ctx {
    struct local_runner *r;
    uint64_t key;
    int image;
};

static void on_step(void *arg, int step, int steps, double seconds)
{
    struct step_ctx *s = arg;
    struct weft_runner_event ev = {.kind = WEFT_RUNNER_EV_STEP, .job = s->key,
                                   .image = s->image, .n_images = 1, .step = step,
                                   .steps = steps, .seconds = seconds};
    weft_runner_post(s->r->sink, &ev);
}

static int is_cancelled(void *arg)
{
    return atomic_load(&((struct step_ctx *)arg)->r->cancel);
}

/* Image i of the job: prompt i / count, the seed's noise at [i n, (i + 1) n) (runner.h),
 * written as out_dir/<i>.png before it is reported. */
static bool job_cfg(const struct weft_runner_job *job)
{
    return weft_job_true_cfg(job->n_negatives, job->true_cfg_scale);
}

/* What the PNG names prompt i by: its text, else its name. */
static const char *prompt_label(const struct weft_runner_job *job, int i)
{
    return job->prompt_texts[i] ? job->prompt_texts[i] : job->prompt_names[i];
}

static weft_status_t run_image(struct local_runner *r, const struct weft_runner_job *job,
                               int image, const struct weft_prompt_embeds *pe,
                               struct weft_error *err)
{
    const int prompt = (int)(image / job->count);
    /* true CFG: the prompt's negative, after the prompts */
    const struct weft_prompt_embeds *np = job_cfg(job) ? &pe[job->n_prompts + prompt] : NULL;
    const struct weft_prompt_embeds *p = &pe[prompt];
    struct step_ctx sc = {r, job->key, image};
    if (np && np->tokens != p->tokens)
        return weft_error_refuse(err, WEFT_ERR_INVALID, "prompt %d has %lld tokens, its "
                                 "negative prompt %lld", prompt, (long long)p->tokens,
                                 (long long)np->tokens);
    const struct weft_rt_image img = {
        .prompt_embeds = p->embeds, .s_txt = p->tokens, .pooled = p->pooled,
        .height = job->height, .width = job->width, .steps = (int)job->steps,
        .guidance = (float)job->guidance, .seed = job->seed, .noise_index = image,
        .neg_prompt_embeds = np ? np->embeds : NULL, .neg_pooled = np ? np->pooled : NULL,
        .true_cfg_scale = np ? (float)job->true_cfg_scale : 1.0f,
        .decode = true,
        .png_prompt = prompt_label(job, prompt),
        .png_negative_prompt = np ? prompt_label(job, job->n_prompts + prompt) : NULL,
        .png_model = r->model_dir,
        .png_job = job->id, .png_prompt_index = prompt,
    };
    struct weft_rt_result res;
    weft_status_t st = weft_runtime_image(r->rt, &img, on_step, is_cancelled, &sc, &res, err);
    if (st != WEFT_OK)
        return st;
    post_stage(r, job->key, "denoise", res.denoise_s);
    post_stage(r, job->key, "decode", res.decode_s);
    char path[WEFT_CONF_PATH + 64];
    snprintf(path, sizeof(path), "%s/%d.png", job->out_dir, image);
    double t0 = now_s();
    st = weft_files_save(path, res.png, res.png_len, err);
    weft_rt_result_cleanup(&res);
    if (st != WEFT_OK)
        return st;
    post_stage(r, job->key, "png", res.png_s + now_s() - t0);
    struct weft_runner_event ev = {.kind = WEFT_RUNNER_EV_IMAGE, .job = job->key,
                                   .image = image, .n_images = 1, .width = (int)job->width,
                                   .height = (int)job->height};
    weft_runner_post(r->sink, &ev);
    pthread_mutex_lock(&r->mu);
    r->images_done++;
    pthread_mutex_unlock(&r->mu);
    return WEFT_OK;
}

static weft_status_t run_job(struct local_runner *r, const struct weft_runner_job *job,
                             struct weft_error *err)
{
    const struct weft_model *m = weft_runtime_model(r->rt);
    /* the prompts, then (true CFG) their negatives */
    const int n = job->n_prompts + (job_cfg(job) ? job->n_negatives : 0);
    struct weft_prompt_embeds *pe = weft_calloc((size_t)n, sizeof(*pe));
    if (!pe)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    double t0 = now_s();
    weft_status_t st = WEFT_OK;
    for (int i = 0; i < n && st == WEFT_OK; i++)
        st = job->prompt_texts[i]
                 ? weft_runtime_encode(r->rt, job->prompt_texts[i], job->max_sequence_length,
                                       &pe[i], err)
                 : weft_model_prompt_read(m, job->prompt_paths[i], &pe[i], err);
    post_stage(r, job->key, "encode", now_s() - t0);
    const int64_t images = (int64_t)job->n_prompts * job->count;
    for (int64_t i = 0; st == WEFT_OK && i < images; i++)
        st = run_image(r, job, (int)i, pe, err);
    for (int i = 0; i < n; i++)
        weft_prompt_embeds_cleanup(&pe[i]);
    weft_free(pe);
    return st;
}

static void loaded(struct local_runner *r, weft_status_t load, const struct weft_error *err,
                   double seconds)
{
    pthread_mutex_lock(&r->mu);
    r->load_done = true;
    r->loaded = load == WEFT_OK;
    r->load_seconds = seconds;
    if (load == WEFT_OK) {
        r->model = *weft_runtime_model(r->rt);
        weft_runtime_bytes(r->rt, &r->transformer_bytes, &r->vae_bytes);
        r->kernel_threads = weft_kernels_is_cpu(r->K) ? weft_kernels_cpu_threads(r->kc) : 0;
        WEFT_LOG_INFO("local", "pipeline %s loaded (%llu MiB of weights) in %.2f s",
                      r->model_dir,
                      (unsigned long long)((r->transformer_bytes + r->vae_bytes) >> 20),
                      seconds);
    } else {
        snprintf(r->load_error, sizeof(r->load_error), "the model did not load: %s",
                 weft_error_text(err));
        WEFT_LOG_ERROR("local", "%s", r->load_error);
    }
    pthread_mutex_unlock(&r->mu);
    struct weft_runner_event ev = {.kind = WEFT_RUNNER_EV_CAPACITY};
    weft_runner_post(r->sink, &ev);
}

static void *thread_main(void *arg)
{
    struct local_runner *r = arg;
    struct weft_error lerr = WEFT_ERROR_INIT;
    double t0 = now_s();
    weft_status_t load = load_model(r, &lerr);
    loaded(r, load, &lerr, now_s() - t0);
    pthread_mutex_lock(&r->mu);
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
        struct weft_error err = WEFT_ERROR_INIT;
        if (stopped)
            st = WEFT_ERR_CANCELLED;
        else if (load != WEFT_OK)
            st = weft_error_refuse(&err, load, "%s", r->load_error);
        else
            st = run_job(r, &j->job, &err);
        post_finished(r, j->job.key, st,
                      st != WEFT_OK && st != WEFT_ERR_CANCELLED ? weft_error_text(&err) : NULL);
        lr_job_free(j);
        struct weft_rt_text_stats text;
        weft_runtime_text_stats(r->rt, &text);
        const uint64_t text_bytes = load == WEFT_OK ? weft_runtime_text_bytes(r->rt) : 0;
        pthread_mutex_lock(&r->mu);
        r->current = 0;
        r->jobs_done++;
        r->text = text;
        r->text_bytes = text_bytes;
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* The runner's operations (loop thread)                                                     */

static char **strv_copy(const char *const *src, int n)
{
    char **v = weft_calloc((size_t)n + 1, sizeof(char *));
    for (int i = 0; v && i < n; i++) {
        if (src && src[i] && !(v[i] = weft_strdup(src[i]))) {
            strv_free(v, n);
            return NULL;
        }
    }
    return v;
}

static struct lr_job *job_copy(const struct weft_runner_job *src)
{
    struct lr_job *j = weft_calloc(1, sizeof(*j));
    if (!j)
        return NULL;
    j->job = *src;
    j->id = weft_strdup(src->id);
    j->out_dir = weft_strdup(src->out_dir);
    const int n = src->n_prompts + src->n_negatives;
    j->prompt_paths = strv_copy(src->prompt_paths, n);
    j->prompt_names = strv_copy(src->prompt_names, n);
    j->prompt_texts = strv_copy(src->prompt_texts, n);
    if (!j->id || !j->out_dir || !j->prompt_paths || !j->prompt_names || !j->prompt_texts) {
        lr_job_free(j);
        return NULL;
    }
    j->job.id = j->id;
    j->job.out_dir = j->out_dir;
    j->job.prompt_paths = (const char *const *)j->prompt_paths;
    j->job.prompt_names = (const char *const *)j->prompt_names;
    j->job.prompt_texts = (const char *const *)j->prompt_texts;
    return j;
}

static weft_status_t lr_start(struct weft_runner *base, const struct weft_runner_job *job,
                              struct weft_error *err)
{
    struct local_runner *r = (struct local_runner *)base;
    struct lr_job *j = job_copy(job);
    if (!j)
        return weft_error_set(err, WEFT_ERR_NOMEM, "local", "job %s: out of memory", job->id);
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

static const char *lr_unavailable(struct weft_runner *base)
{
    struct local_runner *r = (struct local_runner *)base;
    pthread_mutex_lock(&r->mu);
    bool failed = r->load_done && !r->loaded;
    pthread_mutex_unlock(&r->mu);
    return failed ? r->load_error : NULL; /* written once, before load_done */
}

static void lr_layout(struct weft_runner *base, struct weft_layout *out)
{
    (void)base;
    weft_layout_single(out);
}

static void add_component(cJSON *comps, cJSON *dm, const char *name, const char *cls,
                          const char *stage, uint64_t file_bytes, uint64_t weight_bytes)
{
    cJSON_AddStringToObject(dm, name, "cpu:0");
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", name);
    cJSON_AddStringToObject(e, "class", cls);
    cJSON_AddStringToObject(e, "device", "cpu:0");
    cJSON_AddStringToObject(e, "stage", stage);
    cJSON_AddNumberToObject(e, "file_bytes", (double)file_bytes);
    cJSON_AddNumberToObject(e, "weight_bytes", (double)weight_bytes);
    cJSON_AddItemToArray(comps, e);
}

static cJSON *lr_describe(struct weft_runner *base)
{
    struct local_runner *r = (struct local_runner *)base;
    cJSON *o = cJSON_CreateObject();
    pthread_mutex_lock(&r->mu);
    cJSON_AddStringToObject(o, "runner", "local");
    cJSON_AddBoolToObject(o, "ready", r->loaded);
    if (r->load_done && !r->loaded)
        cJSON_AddStringToObject(o, "error", r->load_error);
    cJSON *workers = cJSON_AddArrayToObject(o, "workers");
    cJSON *w = cJSON_CreateObject();
    char host[256] = "localhost";
    (void)gethostname(host, sizeof(host) - 1);
    cJSON_AddStringToObject(w, "id", "local-0");
    cJSON_AddStringToObject(w, "host", host);
    char device[32] = "cpu:0";
    if (r->device.kind != WEFT_DEVICE_CPU)
        weft_device_name(&r->device, device, sizeof(device));
    cJSON_AddStringToObject(w, "device", device);
    cJSON_AddStringToObject(w, "state", !r->load_done ? "loading"
                                        : !r->loaded  ? "failed"
                                        : r->current  ? "busy"
                                                      : "idle");
    cJSON_AddNumberToObject(w, "threads", r->kernel_threads);
    cJSON_AddNumberToObject(w, "weight_bytes", (double)(r->transformer_bytes + r->vae_bytes));
    cJSON_AddItemToArray(workers, w);
    cJSON *mesh = cJSON_AddObjectToObject(o, "mesh");
    static const char *const degrees[] = {"dp", "ring", "ulysses", "tp"};
    for (int i = 0; i < 4; i++)
        cJSON_AddNumberToObject(mesh, degrees[i], 1);
    cJSON *dm = cJSON_AddObjectToObject(o, "device_map");
    cJSON *comps = cJSON_AddArrayToObject(o, "components");
    if (r->loaded) {
        add_component(comps, dm, "prompt_embeds", "precomputed (safetensors)", "encode", 0, 0);
        if (r->model.clip.encoder && r->model.t5.encoder) {
            const uint64_t t5 = r->text_bytes > r->model.clip.held_bytes
                                    ? r->text_bytes - r->model.clip.held_bytes
                                    : r->model.t5.held_bytes;
            add_component(comps, dm, "text_encoder", WEFT_CLIP_TEXT_CLASS, "encode",
                          r->model.clip.file_bytes, r->model.clip.held_bytes);
            add_component(comps, dm, "text_encoder_2", WEFT_T5_ENCODER_CLASS, "encode",
                          r->model.t5.file_bytes, t5);
        }
        add_component(comps, dm, "transformer", WEFT_FLUX_CLASS, "denoise",
                      r->model.transformer_file_bytes, r->transformer_bytes);
        add_component(comps, dm, "vae", WEFT_VAE_CLASS, "decode", r->model.vae_file_bytes,
                      r->vae_bytes);
    }
    cJSON_AddStringToObject(o, "model", r->model_dir);
    cJSON_AddNumberToObject(o, "load_seconds", r->load_seconds);
    cJSON_AddNumberToObject(o, "jobs_run", (double)r->jobs_done);
    cJSON_AddNumberToObject(o, "images_made", (double)r->images_done);
    pthread_mutex_unlock(&r->mu);
    return o;
}

static void lr_metrics(struct weft_runner *base, struct weft_sbuf *out)
{
    struct local_runner *r = (struct local_runner *)base;
    pthread_mutex_lock(&r->mu);
    uint64_t images = r->images_done;
    bool ok = r->loaded;
    const struct weft_rt_text_stats t = r->text;
    pthread_mutex_unlock(&r->mu);
    weft_sbuf_printf(out,
                     "# HELP weft_local_model_loaded The local runner's model is loaded.\n"
                     "# TYPE weft_local_model_loaded gauge\nweft_local_model_loaded %d\n"
                     "# HELP weft_local_images_total Images the local runner made.\n"
                     "# TYPE weft_local_images_total counter\nweft_local_images_total %llu\n",
                     ok ? 1 : 0, (unsigned long long)images);
    weft_prompt_cache_metrics(out, t.hits, t.misses, t.bytes, true);
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
    weft_runtime_destroy(r->rt);
    if (r->K)
        r->K->destroy(r->kc);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    weft_free(r);
}

static const struct weft_runner_ops lr_ops = {
    .name = "local",
    .start = lr_start,
    .cancel = lr_cancel,
    .capacity = lr_capacity,
    .unavailable = lr_unavailable,
    .layout = lr_layout,
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
    r->compute = opts->compute;
    r->device = opts->device;
    r->prompt_cache = opts->prompt_cache;
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
