/* The running system on real processes: `weft run` in every layout gives the image of one
 * device (pixels within one level), and dp 2 over 5 prompts the images of one replica;
 * `weft serve --runner cluster` with `weft worker`s: a SIGKILLed worker fails its job with a
 * reason naming it, the coordinator keeps serving, plans again when a worker comes back and the
 * next job completes; a worker with the wrong secret is refused; a job's numbers cross the
 * wire exactly; a model or a job weft cannot run is refused with the same reason on every path;
 * workers on the devmem variant give the same images, a missing GPU is one clear line.
 * One case per process: test_cluster WEFT_BINARY CASE. Every wait is bounded. */
#include <math.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>

#include "harness.h"
#include "kernels/kernels.h"
#include "model/checkpoint.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/text_encoder.h"
#include "model_variant.h"
#include "png_diff.h"
#include "st_write.h"

/* The one-device reference: `weft generate`, 256x256, 3 steps, red-fox, seed 7. */
static void one_device(char *ref, size_t len)
{
    snprintf(ref, len, "%s/ref.png", tmp);
    const char *gen[] = {"generate", "--height", "256", "--width", "256", "--steps", "3",
                         "--prompt-embeds", "red-fox", "--seed", "7", "--out", ref, NULL};
    CHECK_EQ(wait_pid(run_weft(gen, NULL, NULL)), 0);
}

/* `weft run` of the reference's job with opts (NULL-ended) and more prompts after red-fox;
 * image `check` (-1: the only one) against ref, within one level. */
static void run_vs_ref(const char *ref, const char *out, const char *const *opts,
                       const char *const *more, int check)
{
    const char *args[40] = {"run", "--height", "256", "--width", "256", "--steps", "3",
                            "--prompt", "red-fox", "--seed", "7", "--out", out};
    int n = 13;
    char label[160] = "";
    for (; *opts && n < 30; opts++) {
        args[n++] = *opts;
        snprintf(label + strlen(label), sizeof(label) - strlen(label), " %s", *opts);
    }
    for (; more && *more && n < 38; more++)
        args[n++] = *more;
    args[n] = NULL;
    CHECK_EQ(wait_pid(run_weft(args, NULL, NULL)), 0);
    char img[600];
    const char *dot = strrchr(out, '.');
    if (check >= 0)
        snprintf(img, sizeof(img), "%.*s-%d.png", (int)(dot - out), out, check);
    else
        snprintf(img, sizeof(img), "%s", out);
    int d = png_max_diff(ref, img);
    printf("weft run%s: max pixel difference to one device %d\n", label, d);
    CHECK(d <= 1);
}

/* Every layout's image against `weft generate` on one device, same seed and prompt. */
static int case_layouts(void)
{
    char ref[512], out[512];
    one_device(ref, sizeof(ref));
    static const char *const layouts[][5] = {
        {"--np", "1", NULL}, {"--tp", "2", NULL}, {"--ulysses", "2", NULL},
        {"--ring", "2", NULL}, {"--tp", "2", "--ulysses", "2", NULL},
        {"--ring", "2", "--ulysses", "2", NULL}, {"--tp", "2", "--ring", "2", NULL},
    };
    for (size_t l = 0; l < sizeof(layouts) / sizeof(layouts[0]); l++) {
        snprintf(out, sizeof(out), "%s/run%zu.png", tmp, l);
        run_vs_ref(ref, out, layouts[l], NULL, -1);
    }
    /* data parallelism: 5 prompts over 2 replicas (3 + 2, as split_between_processes) against
     * the same batch on one replica, image by image; image 0 is the one-device image */
    static const char *const batch[] = {"red-fox", "lighthouse", "city-night", "lighthouse",
                                        "red-fox"};
    for (int dp = 1; dp <= 2; dp++) {
        const char *args[40] = {"run", "--dp", dp == 1 ? "1" : "2", "--height", "256", "--width",
                                "256", "--steps", "3", "--seed", "7", "--out"};
        int n = 12;
        snprintf(out, sizeof(out), "%s/dp%d.png", tmp, dp);
        args[n++] = out;
        for (int i = 0; i < 5; i++) {
            args[n++] = "--prompt";
            args[n++] = batch[i];
        }
        args[n] = NULL;
        CHECK_EQ(wait_pid(run_weft(args, NULL, NULL)), 0);
    }
    for (int i = 0; i < 5; i++) {
        char one[512];
        snprintf(one, sizeof(one), "%s/dp1-%d.png", tmp, i);
        snprintf(out, sizeof(out), "%s/dp2-%d.png", tmp, i);
        int d = png_max_diff(one, out);
        printf("weft run --dp 2, 5 prompts: image %d (%s) max difference to one replica %d\n", i,
               batch[i], d);
        CHECK(d <= 1);
    }
    /* the images differ from each other: not one image 5 times */
    CHECK(png_max_diff(ref, out) > 8);
    snprintf(out, sizeof(out), "%s/dp2-0.png", tmp);
    CHECK(png_max_diff(ref, out) <= 1);
    return 0;
}

/* tp 2 on two workers; one SIGKILLed mid-job. */
static int case_kill(void)
{
    struct cluster k;
    cluster_up(&k, "2", NULL, 2);
    struct weft_client *c = k.c;
    char id[WEFT_CLIENT_ID_MAX];
    submit(c, 512, 100, id); /* long enough to be killed in the middle */
    wait_running(c, id);
    double t0 = now_ms();
    const pid_t killed = k.w[1];
    kill(killed, SIGKILL);
    (void)wait_pid(killed);
    k.w[1] = 0;
    struct weft_job_status st = {0};
    CHECK_OK(weft_client_wait(c, id, 60000, NULL, NULL, &st));
    printf("worker killed at step %d: job %s after %.0f ms, \"%s\"\n", st.step,
           weft_client_state_name(st.state), now_ms() - t0, st.error);
    CHECK(st.state == WEFT_JOB_FAILED);
    char named[32];
    snprintf(named, sizeof(named), "pid %d)", (int)killed);
    CHECK(strstr(st.error, named) && strstr(st.error, "lost"));
    weft_job_status_cleanup(&st);
    /* still serving; a replacement worker joins, the mesh is planned again, a job completes */
    CHECK(!cluster_ready(c));
    char wlog[512];
    snprintf(wlog, sizeof(wlog), "%s/w2.log", tmp);
    k.w[k.n++] = start_worker(k.workers, secret_env, wlog);
    wait_ready(c);
    submit(c, 256, 2, id);
    CHECK_OK(weft_client_wait(c, id, 120000, NULL, NULL, &st));
    printf("after a new worker joined: job %s\n", weft_client_state_name(st.state));
    CHECK(st.state == WEFT_JOB_DONE && st.n_images == 1);
    weft_job_status_cleanup(&st);
    /* the workers' all-reduces of tensor parallelism are in the metrics */
    int code;
    char *metrics;
    size_t mlen;
    CHECK_OK(weft_client_request(c, "GET", "/metrics", NULL, 0, &code, &metrics, &mlen));
    CHECK_EQ(code, 200);
    const char *calls =
        strstr(metrics, "weft_collective_calls_total{group=\"tp\",op=\"allreduce\"} ");
    CHECK(calls);
    double n_calls = strtod(strchr(calls, '}') + 2, NULL);
    printf("metrics: %.0f tensor-parallel all-reduces\n", n_calls);
    CHECK(n_calls >= 2 * 2 * 2); /* 2 steps x (at least 2 per block) x 2 ranks */
    /* the layout the job ran on: in its record and counted per layout */
    const char *done = strstr(metrics, "weft_jobs_done_by_layout_total{layout=\"dp 1 x ring 1 x "
                                       "ulysses 1 x tp 2\"} ");
    CHECK(done && strtod(strchr(done, '}') + 2, NULL) >= 1);
    CHECK(strstr(metrics, "weft_job_run_seconds_by_layout_total{layout=\"dp 1 x ring 1 x "
                          "ulysses 1 x tp 2\"} "));
    weft_client_free(metrics);
    char path[64], *rec;
    snprintf(path, sizeof(path), "/v1/jobs/%s", id);
    CHECK_OK(weft_client_request(c, "GET", path, NULL, 0, &code, &rec, &mlen));
    CHECK_EQ(code, 200);
    cJSON *j = cJSON_Parse(rec);
    const cJSON *lay = cJSON_GetObjectItemCaseSensitive(j, "layout");
    CHECK(cJSON_IsString(lay) && strcmp(lay->valuestring, "dp 1 x ring 1 x ulysses 1 x tp 2") == 0);
    printf("the job's record: layout \"%s\"\n", lay->valuestring);
    cJSON_Delete(j);
    weft_client_free(rec);
    cluster_down(&k);
    return 0;
}

/* device_map: weft run with the transformer split by blocks over two workers (auto; balanced
 * with host memory) and with 2 replicas of 2 devices, each image against one device; the map
 * the API returns; device_map with tensor parallelism refused before anything loads. */
static int case_devmap(void)
{
    char ref[512], out[512];
    one_device(ref, sizeof(ref));
    static const char *const runs[][9] = {
        {"--np", "2", "--device-map", "auto", "--max-memory", "0:6MiB,1:12MiB", NULL},
        {"--np", "2", "--device-map", "balanced", "--max-memory", "0:8MiB,1:8MiB,cpu:1GiB", NULL},
        {"--np", "2", "--device-map", "balanced", NULL},
        {"--np", "4", "--dp", "2", "--device-map", "auto", "--max-memory", "0:6MiB,1:12MiB",
         NULL},
    };
    static const char *const more[] = {"--prompt", "lighthouse", "--prompt", "city-night", NULL};
    for (size_t l = 0; l < sizeof(runs) / sizeof(runs[0]); l++) {
        snprintf(out, sizeof(out), "%s/dm%zu.png", tmp, l);
        /* two replicas: three prompts, image 0 is red-fox */
        run_vs_ref(ref, out, runs[l], l == 3 ? more : NULL, l == 3 ? 0 : -1);
    }

    /* the map through the API */
    struct cluster kl;
    const char *extra[] = {"--device_map.strategy=auto", "--device_map.max_memory=0:6MiB",
                           "--cluster.workers=2", NULL};
    cluster_up(&kl, "1", extra, 2);
    struct weft_client *c = kl.c;
    char *text;
    CHECK_OK(weft_client_cluster(c, &text));
    cJSON *j = cJSON_Parse(text);
    CHECK(j);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(j, "device_map");
    const cJSON *emb = cJSON_GetObjectItemCaseSensitive(map, "transformer.embedders");
    const cJSON *out_l = cJSON_GetObjectItemCaseSensitive(map, "transformer.output");
    const cJSON *vae = cJSON_GetObjectItemCaseSensitive(map, "vae");
    CHECK(cJSON_IsString(emb) && cJSON_IsString(out_l) && cJSON_IsString(vae));
    printf("device_map from the API: embedders on %s, output layers on %s, vae on %s\n",
           emb->valuestring, out_l->valuestring, vae->valuestring);
    CHECK(strncmp(emb->valuestring, "device 0 (", 10) == 0);
    CHECK(strncmp(out_l->valuestring, "device 1 (", 10) == 0);
    CHECK(strncmp(vae->valuestring, "device 1 (", 10) == 0);
    /* each worker holds its part of the transformer only */
    double bytes[2] = {0};
    int k = 0;
    const cJSON *w;
    cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(j, "workers"))
    {
        const cJSON *tb = cJSON_GetObjectItemCaseSensitive(w, "transformer_bytes");
        CHECK(cJSON_IsNumber(tb) && k < 2);
        bytes[k++] = tb->valuedouble;
    }
    CHECK_EQ(k, 2);
    printf("transformer bytes per worker: %.0f + %.0f\n", bytes[0], bytes[1]);
    CHECK(bytes[0] > 0 && bytes[1] > 0 && bytes[0] <= 6.0 * 1048576);
    cJSON_Delete(j);
    weft_client_free(text);
    char id[WEFT_CLIENT_ID_MAX];
    submit(c, 256, 2, id);
    struct weft_job_status st = {0};
    CHECK_OK(weft_client_wait(c, id, 120000, NULL, NULL, &st));
    CHECK(st.state == WEFT_JOB_DONE && st.n_images == 1);
    weft_job_status_cleanup(&st);
    cluster_down(&kl);

    /* with tensor parallelism: refused at start, naming both */
    char log[512];
    snprintf(log, sizeof(log), "%s/refused.log", tmp);
    const char *tp[] = {"serve", "--runner", "cluster", "--listen", "127.0.0.1:0",
                        "--cluster.listen=127.0.0.1:0", "--parallel.tp_degree=2",
                        "--device_map.strategy=balanced", "--cluster.workers=2", NULL};
    CHECK(wait_pid(run_weft(tp, secret_env, log)) != 0);
    FILE *f = fopen(log, "r");
    char msg[4096] = "";
    CHECK(f);
    size_t n = fread(msg, 1, sizeof(msg) - 1, f);
    msg[n] = '\0';
    (void)fclose(f); /* read only */
    printf("device_map with tp 2: %s", msg);
    CHECK(strstr(msg, "cannot be combined with tensor parallelism"));
    return 0;
}

/* GET /v1/cluster, parsed; cJSON_Delete it. */
static cJSON *cluster_record(struct weft_client *c)
{
    char *text;
    CHECK_OK(weft_client_cluster(c, &text));
    cJSON *j = cJSON_Parse(text);
    CHECK(j);
    weft_client_free(text);
    return j;
}

/* The workers' kernel threads as the cluster reports them after the plan, and the cores each
 * reported; false until every worker is assigned. */
static bool worker_threads(struct weft_client *c, int n, int *threads, int *cores, bool *fixed)
{
    cJSON *j = cluster_record(c);
    int k = 0;
    const cJSON *w;
    cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(j, "workers"))
    {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(w, "threads");
        const cJSON *cs = cJSON_GetObjectItemCaseSensitive(w, "cores");
        const cJSON *fx = cJSON_GetObjectItemCaseSensitive(w, "threads_fixed");
        CHECK(cJSON_IsNumber(t) && cJSON_IsNumber(cs) && cJSON_IsBool(fx) && k < n);
        threads[k] = (int)t->valuedouble, cores[k] = (int)cs->valuedouble;
        fixed[k] = cJSON_IsTrue(fx);
        k++;
    }
    const bool ready = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "ready"));
    cJSON_Delete(j);
    return ready && k == n;
}

/* Workers started without a thread count take their share of the host's cores from the plan:
 * cores / 3 with three workers computing at once (dp 3), one of them started with a count it
 * keeps; cores / 1 when two are the two stages of one device_map replica (they run in turn). A
 * job runs on each. */
static int case_threads(void)
{
    for (int staged = 0; staged < 2; staged++) {
        char api[300], workers[300];
        const char *plain[] = {"--cluster.workers=3", NULL};
        const char *dm[] = {"--device_map.strategy=auto", "--device_map.max_memory=0:6MiB",
                            "--cluster.workers=2", NULL};
        const int n = staged ? 2 : 3;
        pid_t server = start_server_with(api, workers, "1", staged ? dm : plain);
        pid_t w[3];
        for (int i = 0; i < n; i++) {
            char wlog[512];
            snprintf(wlog, sizeof(wlog), "%s/t%d-%d.log", tmp, staged, i);
            const bool fixed = !staged && i == n - 1;
            const char *args[] = {"worker", "--coordinator", workers,
                                  fixed ? "--kernels.threads=2" : NULL, NULL};
            w[i] = run_weft(args, secret_env, wlog);
        }
        struct weft_client *c = client(api);
        int threads[3] = {0}, cores[3] = {0}, n_fixed = 0;
        bool ready = false, fixed[3] = {false};
        for (int t = 0; t < 1200 && !(ready = worker_threads(c, n, threads, cores, fixed)); t++)
            sleep_ms(50);
        CHECK(ready);
        for (int i = 0; i < n; i++) {
            n_fixed += fixed[i];
            const int busy = staged ? 1 : 3;
            const int want = fixed[i] ? 2 : (cores[i] / busy > 0 ? cores[i] / busy : 1);
            printf("%s: worker %d of %d cores: %d kernel threads (want %d%s)\n",
                   staged ? "device_map, 1 replica of 2 stages" : "dp 3", i, cores[i],
                   threads[i], want, fixed[i] ? ", its own count" : "");
            CHECK_EQ(threads[i], want);
        }
        CHECK_EQ(n_fixed, staged ? 0 : 1);
        char id[WEFT_CLIENT_ID_MAX];
        submit(c, 128, 2, id);
        struct weft_job_status st = {0};
        CHECK_OK(weft_client_wait(c, id, 120000, NULL, NULL, &st));
        CHECK(st.state == WEFT_JOB_DONE && st.n_images == 1);
        weft_job_status_cleanup(&st);
        weft_client_close(c);
        kill(server, SIGTERM);
        CHECK_EQ(wait_pid(server), 0);
        for (int i = 0; i < n; i++)
            CHECK_EQ(wait_pid(w[i]), 0);
    }
    return 0;
}

/* The coordinator SIGKILLed with a job running and one queued, then restarted on the same
 * ports and journal: the workers (never restarted) join it again and both jobs complete. */
static int case_restart(void)
{
    struct cluster k;
    const char *retry[] = {"--api.max_attempts=3", NULL};
    cluster_up(&k, "2", retry, 2);
    char id1[WEFT_CLIENT_ID_MAX], id2[WEFT_CLIENT_ID_MAX];
    submit(k.c, 256, 16, id1); /* killed after its first step: 15 steps left */
    submit(k.c, 256, 2, id2);
    wait_running(k.c, id1);
    weft_client_close(k.c);
    kill(k.server, SIGKILL);
    (void)wait_pid(k.server);
    /* the same worker port (workers know only it) and journal; a new API port is fine */
    char listen[340], pf[512];
    snprintf(listen, sizeof(listen), "--cluster.listen=%s", k.workers);
    snprintf(pf, sizeof(pf), "%s/api", tmp);
    unlink(pf);
    const char *again[] = {"--api.max_attempts=3", listen, NULL};
    double t0 = now_ms();
    k.server = start_server_with(k.api, k.workers, "2", again);
    k.c = client(k.api);
    wait_ready(k.c);
    printf("coordinator restarted: the workers joined it again after %.0f ms\n", now_ms() - t0);
    const char *ids[2] = {id1, id2};
    for (int i = 0; i < 2; i++) {
        struct weft_job_status st = {0};
        /* the first job runs again whole: 256x256 in 16 steps, about 2 s, 25 s under ASan
         * on a 2-core AVX-512 machine (its vector kernels are checked load by load) */
        CHECK_OK(weft_client_wait(k.c, ids[i], 120000, NULL, NULL, &st));
        printf("job %s after the restart: %s after %d run(s)\n", ids[i],
               weft_client_state_name(st.state), st.attempts);
        CHECK(st.state == WEFT_JOB_DONE && st.n_images == 1);
        CHECK(i > 0 || st.attempts >= 2); /* the journal kept the run the kill ended */
        weft_job_status_cleanup(&st);
    }
    cluster_down(&k);
    return 0;
}

/* dp 2 on two workers, one SIGKILLed mid-job: the job runs again on the replica left (the
 * mesh planned again as dp 1) and completes with every image. */
static int case_rerun(void)
{
    struct cluster k;
    const char *extra[] = {"--parallel.dp_degree=2", "--api.max_attempts=3", NULL};
    cluster_up(&k, "1", extra, 2);
    struct weft_prompt p[2] = {{.name = "red-fox"}, {.name = "lighthouse"}};
    struct weft_job_request req = {.prompts = p, .n_prompts = 2, .height = 256, .width = 256,
                                   .steps = 16, .count = 1, .guidance = 3.5, .seed = 3};
    char id[WEFT_CLIENT_ID_MAX];
    CHECK_OK(weft_client_submit(k.c, &req, id));
    wait_running(k.c, id); /* after its first step: 15 left */
    kill(k.w[1], SIGKILL);
    (void)wait_pid(k.w[1]);
    k.w[1] = 0;
    struct weft_job_status st = {0};
    CHECK_OK(weft_client_wait(k.c, id, 120000, NULL, NULL, &st));
    printf("a replica's worker killed mid-job: job %s with %zu images after %d runs\n",
           weft_client_state_name(st.state), st.n_images, st.attempts);
    CHECK(st.state == WEFT_JOB_DONE && st.n_images == 2 && st.attempts >= 2);
    weft_job_status_cleanup(&st);
    char *text;
    CHECK_OK(weft_client_cluster(k.c, &text));
    cJSON *j = cJSON_Parse(text);
    const cJSON *lost = cJSON_GetObjectItemCaseSensitive(j, "workers_lost");
    CHECK(cJSON_IsNumber(lost) && lost->valuedouble == 1);
    cJSON_Delete(j);
    weft_client_free(text);
    cluster_down(&k);
    return 0;
}

/* tp 2 on two workers, one SIGKILLed mid-job: the job goes back to the queue and waits there
 * for a second worker, its progress back to nothing made (it showed the lost run's half while
 * queued), then runs whole once a new worker joins. */
static int case_requeue(void)
{
    struct cluster k;
    const char *extra[] = {"--api.max_attempts=3", NULL};
    cluster_up(&k, "2", extra, 2);
    char id[WEFT_CLIENT_ID_MAX];
    submit(k.c, 256, 16, id);
    wait_running(k.c, id); /* after its first step */
    kill(k.w[1], SIGKILL);
    (void)wait_pid(k.w[1]);
    struct weft_job_status st = {0};
    for (int i = 0; i < 1500; i++) { /* 30 s */
        weft_job_status_cleanup(&st);
        CHECK_OK(weft_client_status(k.c, id, &st));
        if (st.state == WEFT_JOB_QUEUED)
            break;
        sleep_ms(20);
    }
    printf("after the loss: %s, step %d, %d images done, fraction %.2f, %d attempts\n",
           weft_client_state_name(st.state), st.step, st.images_done, st.fraction, st.attempts);
    CHECK(st.state == WEFT_JOB_QUEUED && st.attempts == 1);
    CHECK(st.step == 0 && st.images_done == 0 && st.fraction == 0);
    weft_job_status_cleanup(&st);
    char wlog[512];
    snprintf(wlog, sizeof(wlog), "%s/w9.log", tmp);
    k.w[1] = start_worker(k.workers, secret_env, wlog);
    CHECK_OK(weft_client_wait(k.c, id, 120000, NULL, NULL, &st));
    CHECK(st.state == WEFT_JOB_DONE && st.n_images == 1 && st.attempts == 2 &&
          st.fraction == 1);
    weft_job_status_cleanup(&st);
    cluster_down(&k);
    return 0;
}

/* dp 2: two one-image jobs run side by side, one per replica (capacity is the free replicas). */
static int case_concurrent(void)
{
    struct cluster k;
    const char *extra[] = {"--parallel.dp_degree=2", NULL};
    cluster_up(&k, "1", extra, 2);
    char a[WEFT_CLIENT_ID_MAX], b[WEFT_CLIENT_ID_MAX];
    submit(k.c, 256, 30, a);
    submit(k.c, 256, 30, b);
    bool both = false;
    struct weft_job_status sa = {0}, sb = {0};
    for (int i = 0; i < 600 && !both; i++) {
        weft_job_status_cleanup(&sa), weft_job_status_cleanup(&sb);
        CHECK_OK(weft_client_status(k.c, a, &sa));
        CHECK_OK(weft_client_status(k.c, b, &sb));
        both = sa.state == WEFT_JOB_RUNNING && sb.state == WEFT_JOB_RUNNING;
        if (sa.state == WEFT_JOB_DONE || sb.state == WEFT_JOB_DONE)
            break;
        sleep_ms(10);
    }
    printf("two one-image jobs on dp 2: %s\n",
           both ? "running at the same time" : "one after the other");
    CHECK(both);
    for (int i = 0; i < 2; i++) {
        weft_job_status_cleanup(&sa);
        CHECK_OK(weft_client_wait(k.c, i ? b : a, 120000, NULL, NULL, &sa));
        CHECK(sa.state == WEFT_JOB_DONE && sa.n_images == 1);
    }
    weft_job_status_cleanup(&sa), weft_job_status_cleanup(&sb);
    cluster_down(&k);
    return 0;
}

/* A job's record (GET /v1/jobs/{id}); cJSON_Delete it. */
static cJSON *job_record(struct weft_client *c, const char *id)
{
    char path[64], *rec;
    int code;
    size_t rlen;
    snprintf(path, sizeof(path), "/v1/jobs/%s", id);
    CHECK_OK(weft_client_request(c, "GET", path, NULL, 0, &code, &rec, &rlen));
    CHECK_EQ(code, 200);
    cJSON *j = cJSON_Parse(rec);
    CHECK(j);
    weft_client_free(rec);
    return j;
}

/* A job's layout (into out) and why it was chosen (into why, "" none). */
static void job_layout(struct weft_client *c, const char *id, char *out, size_t len, char *why,
                       size_t why_len)
{
    cJSON *j = job_record(c, id);
    const cJSON *lay = cJSON_GetObjectItemCaseSensitive(j, "layout");
    CHECK(cJSON_IsString(lay));
    snprintf(out, len, "%s", lay->valuestring);
    const cJSON *reason = cJSON_GetObjectItemCaseSensitive(j, "layout_reason");
    snprintf(why, why_len, "%s", cJSON_IsString(reason) ? reason->valuestring : "");
    cJSON_Delete(j);
}

/* A number of GET /v1/cluster. */
static double cluster_number(struct weft_client *c, const char *key)
{
    cJSON *j = cluster_record(c);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    CHECK(cJSON_IsNumber(v));
    const double d = v->valuedouble;
    cJSON_Delete(j);
    return d;
}

/* A coordinator in [parallel] mode = auto over 4 workers. */
static void auto_cluster_up(struct cluster *k)
{
    const char *rules[] = {"--parallel.mode=auto", "--cluster.workers=4", NULL};
    cluster_up(k, "1", rules, 4);
}

/* One job of `count` images, height x width, on the cluster: done; its layout and reasons; image
 * 0 against ref within one level when ref is given. */
static void auto_job(struct weft_client *c, int height, int width, int steps, int count,
                     const char *ref, char *lay, size_t len, char *why, size_t why_len)
{
    struct weft_prompt p = {.name = "red-fox"};
    struct weft_job_request req = {.prompts = &p, .n_prompts = 1, .height = height,
                                   .width = width, .steps = steps, .count = count,
                                   .guidance = 3.5, .seed = 7};
    char id[WEFT_CLIENT_ID_MAX];
    struct weft_job_status st = {0};
    CHECK_OK(weft_client_submit(c, &req, id));
    CHECK_OK(weft_client_wait(c, id, 240000, NULL, NULL, &st));
    CHECK(st.state == WEFT_JOB_DONE && (int)st.n_images == count);
    weft_job_status_cleanup(&st);
    job_layout(c, id, lay, len, why, why_len);
    printf("%dx%d, %d image(s) ran on \"%s\" (%s)\n", width, height, count, lay, why);
    if (!ref)
        return;
    char img[600];
    snprintf(img, sizeof(img), "%s/auto.png", tmp);
    CHECK_OK(weft_client_image_save(c, id, 0, img));
    const int d = png_max_diff(ref, img);
    printf("  image 0: max pixel difference to one device %d\n", d);
    CHECK(d <= 1);
}

/* [parallel] mode = auto on 4 workers. By the rules alone: the mesh starts as 4 replicas; a
 * small job stays there (too few tokens to split), a lone job of 2048 tokens gets dp 2 x
 * ulysses 2, keeping every worker's weights (the same tp shard: nothing read again), a job of
 * 4 images 4 replicas again. With a slow device rate in [plan]: a lone small job gets ulysses
 * 4 (the split pays), and a job of 4 images stays there (4 images on ulysses 4 are predicted
 * as fast as on 4 replicas: the switch would not pay for itself). With goal = throughput the
 * lone 2048-token job stays on a replica of 4. Each image as one
 * device's within one level; the reasons in the record; the switches in /metrics; a degree beside
 * mode = auto refused in one line. */
static int case_auto(void)
{
    char ref[600], lay[96], why[640];
    one_device(ref, sizeof(ref));
    struct cluster k;
    auto_cluster_up(&k);
    cJSON *cl = cluster_record(k.c);
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(cl, "mode");
    const cJSON *dp = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cl, "mesh"), "dp");
    CHECK(cJSON_IsString(mode) && strcmp(mode->valuestring, "auto") == 0);
    const cJSON *goal = cJSON_GetObjectItemCaseSensitive(cl, "goal");
    CHECK(cJSON_IsString(goal) && strcmp(goal->valuestring, "latency") == 0);
    printf("auto, before any job: %g replicas\n", dp->valuedouble);
    CHECK_EQ((int)dp->valuedouble, 4);
    cJSON_Delete(cl);
    auto_job(k.c, 256, 256, 3, 1, ref, lay, sizeof(lay), why, sizeof(why));
    CHECK(strcmp(lay, "dp 4 x ring 1 x ulysses 1 x tp 1") == 0 && strstr(why, "too few"));
    auto_job(k.c, 512, 1024, 1, 1, NULL, lay, sizeof(lay), why, sizeof(why));
    CHECK(strcmp(lay, "dp 2 x ring 1 x ulysses 2 x tp 1") == 0 &&
          strstr(why, "context parallelism"));
    const double kept = cluster_number(k.c, "kept_bytes");
    printf("weights kept over the switch: %.0f bytes\n", kept);
    CHECK(kept > 0);
    auto_job(k.c, 256, 256, 3, 4, ref, lay, sizeof(lay), why, sizeof(why));
    CHECK(strncmp(lay, "dp 4 x ", 7) == 0 && strstr(why, "replicas"));
    int code;
    char *metrics;
    size_t mlen;
    CHECK_OK(weft_client_request(k.c, "GET", "/metrics", NULL, 0, &code, &metrics, &mlen));
    const char *rp = strstr(metrics, "\nweft_mesh_replans_total ");
    CHECK(rp && strtod(strchr(rp + 1, ' ') + 1, NULL) >= 2);
    CHECK(strstr(metrics, "\nweft_weights_kept_bytes_total "));
    CHECK(strstr(metrics, "weft_jobs_done_by_layout_total{layout=\"dp 2 x ring 1 x ulysses 2 x "
                          "tp 1\"} 1"));
    weft_client_free(metrics);
    printf("replans: %g\n", cluster_number(k.c, "replans"));
    cluster_down(&k);
    /* a device rate: the planner splits by predicted time, and a switch must pay for itself */
    const char *timed[] = {"--parallel.mode=auto", "--cluster.workers=4",
                           "--plan.device_gflops=1", NULL};
    cluster_up(&k, "1", timed, 4);
    auto_job(k.c, 256, 256, 3, 1, ref, lay, sizeof(lay), why, sizeof(why));
    CHECK(strcmp(lay, "dp 1 x ring 1 x ulysses 4 x tp 1") == 0 && strstr(why, "latency"));
    auto_job(k.c, 256, 256, 3, 4, ref, lay, sizeof(lay), why, sizeof(why));
    CHECK(strcmp(lay, "dp 1 x ring 1 x ulysses 4 x tp 1") == 0 && strstr(why, "mesh stays"));
    cluster_down(&k);
    /* goal = throughput: the lone job of 2048 tokens that latency splits (above) stays on a
     * replica of 4 (the pipeline fits one device), the mesh never planned again */
    const char *thr[] = {"--parallel.mode=auto", "--cluster.workers=4",
                         "--parallel.goal=throughput", NULL};
    cluster_up(&k, "1", thr, 4);
    auto_job(k.c, 512, 1024, 1, 1, NULL, lay, sizeof(lay), why, sizeof(why));
    CHECK(strcmp(lay, "dp 4 x ring 1 x ulysses 1 x tp 1") == 0 && strstr(why, "throughput"));
    CHECK(cluster_number(k.c, "replans") == 0);
    cl = cluster_record(k.c);
    goal = cJSON_GetObjectItemCaseSensitive(cl, "goal");
    CHECK(cJSON_IsString(goal) && strcmp(goal->valuestring, "throughput") == 0);
    cJSON_Delete(cl);
    cluster_down(&k);
    /* a degree beside mode = auto: one line, before any worker */
    char log[600], out[4096];
    snprintf(log, sizeof(log), "%s/bad.log", tmp);
    const char *bad[] = {"serve", "--runner", "cluster", "--listen", "127.0.0.1:0",
                         "--cluster.listen=127.0.0.1:0", "--parallel.mode=auto",
                         "--cluster.workers=2", "--parallel.tp_degree=2", NULL};
    const int rc = wait_pid(run_weft(bad, secret_env, log));
    read_text(log, out, sizeof(out));
    printf("mode = auto with tp_degree 2: exit %d, %s", rc, out);
    CHECK(rc != 0 && strstr(out, "mode = auto plans the degrees itself"));
    return 0;
}

/* mode = auto chooses device_map: two workers on this host that offer 12 MiB each ([worker]
 * memory, through the environment; a budget is a worker's own, not a share of the host's) over
 * PCIe. The weights (13.6 MB) fit neither, and tensor parallelism needs NVLink: the
 * transformer's blocks are split over the two (device_map), the reason says so, and the image
 * is one device's within one level. The budget is what the workers report in GET /v1/cluster. */
static int case_auto_devmap(void)
{
    char ref[600], lay[96], why[640];
    one_device(ref, sizeof(ref));
    const char *rules[] = {"--parallel.mode=auto", "--cluster.workers=2",
                           "--plan.interconnect=pcie", NULL};
    CHECK(setenv("WEFT_WORKER_MEMORY", "12MiB", 1) == 0);
    struct cluster k;
    cluster_up(&k, "1", rules, 2);
    CHECK(unsetenv("WEFT_WORKER_MEMORY") == 0);
    cJSON *cl = cluster_record(k.c);
    int reported = 0;
    const cJSON *w;
    cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(cl, "workers"))
    {
        const cJSON *mem = cJSON_GetObjectItemCaseSensitive(w, "memory");
        reported += cJSON_IsNumber(mem) && mem->valuedouble == 12.0 * 1024 * 1024;
    }
    cJSON_Delete(cl);
    printf("workers reporting the 12 MiB budget: %d\n", reported);
    CHECK_EQ(reported, 2);
    auto_job(k.c, 256, 256, 3, 1, ref, lay, sizeof(lay), why, sizeof(why));
    CHECK(strstr(lay, "device_map") && strstr(why, "device_map"));
    cluster_down(&k);
    return 0;
}

/* mode = auto under a stream: 15 small jobs (128x128) at once, then a job of 2048 tokens (1024x512;
 * alone it runs on dp 2 x ulysses 2, case auto); the stream keeps more jobs running than a
 * split would serve, so it runs on a replica of dp 4 and the mesh never switches. A case of
 * its own: with case auto it outlasted the watchdog (then 240 s) under ASan. */
static int case_auto_stream(void)
{
    char lay[96], why[640];
    struct cluster k;
    auto_cluster_up(&k);
    const double replans = cluster_number(k.c, "replans");
    char ids[16][WEFT_CLIENT_ID_MAX];
    for (int i = 0; i < 16; i++) {
        struct weft_prompt p = {.name = "red-fox"};
        struct weft_job_request req = {.prompts = &p, .n_prompts = 1, .height = i < 15 ? 128 : 512,
                                       .width = i < 15 ? 128 : 1024, .steps = 1, .count = 1,
                                       .guidance = 3.5, .seed = 7};
        CHECK_OK(weft_client_submit(k.c, &req, ids[i]));
    }
    for (int i = 0; i < 16; i++) {
        struct weft_job_status st = {0};
        CHECK_OK(weft_client_wait(k.c, ids[i], 240000, NULL, NULL, &st));
        CHECK(st.state == WEFT_JOB_DONE);
        weft_job_status_cleanup(&st);
    }
    job_layout(k.c, ids[15], lay, sizeof(lay), why, sizeof(why));
    printf("1024x512 after 15 small jobs at once ran on \"%s\" (%s)\n", lay, why);
    CHECK(strncmp(lay, "dp 4 x ", 7) == 0 && strstr(why, "recent stream"));
    CHECK(cluster_number(k.c, "replans") == replans); /* the stream never switched */
    cluster_down(&k);
    return 0;
}

/* The backfill cases' lone large job: 1024x512, `steps` steps, on an auto cluster (it runs on
 * dp 2 x ulysses 2), waited for until its first step is done. The request is left for the
 * small jobs that follow: 1 image, `side` x `side`. */
static void auto_large_running(struct weft_client *c, int steps, int side, char *id,
                               struct weft_job_request *req, struct weft_prompt *p)
{
    *p = (struct weft_prompt){.name = "red-fox"};
    *req = (struct weft_job_request){.prompts = p, .n_prompts = 1, .height = 512, .width = 1024,
                                     .steps = steps, .count = 1, .guidance = 3.5, .seed = 7};
    CHECK_OK(weft_client_submit(c, req, id));
    wait_running(c, id);
    req->height = req->width = side;
}

/* mode = auto, backfill: a lone 1024x512 job runs on one replica of dp 2 x ulysses 2; the
 * small jobs after it want dp 4, so the mesh drains for the switch, but each ends before the
 * large job (2 x 65536 pixel-steps, the decode counted as a step, against at most 3 x
 * 524288 left) and starts at once on the free replica; one of 25 x 65536 pixel-steps does not
 * fit, waits for the drain, and runs on dp 4.
 * (Under ASan a step of the large job takes about 25 s, a small job 7-10 s.) */
static int case_auto_backfill(void)
{
    char lay[96], why[640];
    struct cluster k;
    auto_cluster_up(&k);
    char big[WEFT_CLIENT_ID_MAX], small[3][WEFT_CLIENT_ID_MAX], slow[WEFT_CLIENT_ID_MAX];
    struct weft_prompt p;
    struct weft_job_request req;
    auto_large_running(k.c, 3, 256, big, &req, &p); /* 2 steps and the decode left */
    const double replans = cluster_number(k.c, "replans");
    req.steps = 1;
    for (int i = 0; i < 3; i++)
        CHECK_OK(weft_client_submit(k.c, &req, small[i]));
    req.steps = 24; /* 1638400 pixel-steps: more than the large job has left */
    CHECK_OK(weft_client_submit(k.c, &req, slow));
    const char *ids[5] = {big, small[0], small[1], small[2], slow};
    for (int i = 0; i < 5; i++) {
        struct weft_job_status st = {0};
        CHECK_OK(weft_client_wait(k.c, ids[i], 200000, NULL, NULL, &st));
        CHECK(st.state == WEFT_JOB_DONE);
        weft_job_status_cleanup(&st);
    }
    job_layout(k.c, big, lay, sizeof(lay), why, sizeof(why));
    printf("1024x512 alone: \"%s\"\n", lay);
    CHECK(strcmp(lay, "dp 2 x ring 1 x ulysses 2 x tp 1") == 0);
    for (int i = 0; i < 3; i++) {
        job_layout(k.c, small[i], lay, sizeof(lay), why, sizeof(why));
        printf("256x256, 1 step, behind it: \"%s\" (%s)\n", lay, why);
        CHECK(strcmp(lay, "dp 2 x ring 1 x ulysses 2 x tp 1") == 0 && strstr(why, "backfill"));
    }
    job_layout(k.c, slow, lay, sizeof(lay), why, sizeof(why));
    printf("256x256, 24 steps, behind them: \"%s\" (%s)\n", lay, why);
    CHECK(strncmp(lay, "dp 4 x ", 7) == 0 && !strstr(why, "backfill"));
    CHECK(cluster_number(k.c, "backfilled") == 3);
    CHECK(cluster_number(k.c, "replans") == replans + 1); /* the one switch, after the drain */
    int code;
    char *metrics;
    size_t mlen;
    CHECK_OK(weft_client_request(k.c, "GET", "/metrics", NULL, 0, &code, &metrics, &mlen));
    CHECK(strstr(metrics, "\nweft_jobs_backfilled_total 3\n"));
    weft_client_free(metrics);
    cluster_down(&k);
    return 0;
}

/* A number of a job's record (GET /v1/jobs/{id}). */
static double job_number(struct weft_client *c, const char *id, const char *key)
{
    cJSON *j = job_record(c, id);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    CHECK(cJSON_IsNumber(v));
    const double x = v->valuedouble;
    cJSON_Delete(j);
    return x;
}

/* mode = auto, backfill never extends the drain: behind a lone 1024x512 job (dp 2 x ulysses 2,
 * 6 steps) a long small job (2 images of 128x128, 90 steps: 2 x 91 x 16384 pixel-steps, within
 * the 6 x 524288 the large job has left after its first step) is backfilled on the free replica; then
 * come 8 short ones (128x128, 1 step) and the large job is cancelled, which ends the drain with
 * the long job still running. The short ones would fit within what the long one has left, but
 * the drain is that of the jobs running when the switch was decided, so none starts on the old
 * mesh: they wait for the long one, the mesh switches to dp 4 once, and they run there.
 * Counting the backfilled job in the drain chained them on the old mesh (and a stream of them
 * would have starved the switch). */
static int case_auto_drain(void)
{
    enum { SHORT = 8 };
    char lay[96], why[640];
    struct cluster k;
    auto_cluster_up(&k);
    char big[WEFT_CLIENT_ID_MAX], lng[WEFT_CLIENT_ID_MAX], small[SHORT][WEFT_CLIENT_ID_MAX];
    struct weft_prompt p;
    struct weft_job_request req;
    auto_large_running(k.c, 6, 128, big, &req, &p); /* 5 steps and the decode left */
    const double replans = cluster_number(k.c, "replans");
    req.steps = 90;
    req.count = 2;
    CHECK_OK(weft_client_submit(k.c, &req, lng));
    wait_running(k.c, lng);
    req.steps = 1;
    req.count = 1;
    for (int i = 0; i < SHORT; i++)
        CHECK_OK(weft_client_submit(k.c, &req, small[i]));
    CHECK_OK(weft_client_cancel(k.c, big));
    struct weft_job_status st = {0};
    CHECK_OK(weft_client_wait(k.c, big, 200000, NULL, NULL, &st));
    CHECK(st.state == WEFT_JOB_CANCELLED);
    weft_job_status_cleanup(&st);
    const double big_end = job_number(k.c, big, "finished_at");
    const char *ids[SHORT + 1] = {lng};
    for (int i = 0; i < SHORT; i++)
        ids[i + 1] = small[i];
    for (int i = 0; i < SHORT + 1; i++) {
        CHECK_OK(weft_client_wait(k.c, ids[i], 200000, NULL, NULL, &st));
        CHECK(st.state == WEFT_JOB_DONE);
        weft_job_status_cleanup(&st);
    }
    job_layout(k.c, lng, lay, sizeof(lay), why, sizeof(why));
    const double lng_end = job_number(k.c, lng, "finished_at");
    printf("2 x 128x128, 90 steps, behind the large job: \"%s\", ended %.3f s after it was "
           "cancelled\n", lay, lng_end - big_end);
    CHECK(strcmp(lay, "dp 2 x ring 1 x ulysses 2 x tp 1") == 0 && strstr(why, "backfill"));
    CHECK(lng_end > big_end);
    for (int i = 0; i < SHORT; i++) {
        job_layout(k.c, small[i], lay, sizeof(lay), why, sizeof(why));
        const double start = job_number(k.c, small[i], "started_at");
        printf("128x128, 1 step, behind them: \"%s\", started %+.3f s from the long job's "
               "end\n", lay, start - lng_end);
        CHECK(strncmp(lay, "dp 4 x ", 7) == 0 && start >= lng_end);
    }
    CHECK(cluster_number(k.c, "backfilled") == 1);
    CHECK(cluster_number(k.c, "replans") == replans + 1);
    cluster_down(&k);
    return 0;
}

/* A job's state (GET /v1/jobs/{id}). */
static enum weft_job_state job_state(struct weft_client *c, const char *id)
{
    struct weft_job_status st = {0};
    CHECK_OK(weft_client_status(c, id, &st));
    const enum weft_job_state s = st.state;
    weft_job_status_cleanup(&st);
    return s;
}

/* mode = auto, a stream's running work counts: a lone 1024x512 job (12 steps) runs on dp 2 x
 * ulysses 2; three small jobs (256x256, 1 step), one after another, are backfilled beside it
 * and end; then a second 1024x512 job (28 steps) arrives with nothing queued. By the rules
 * alone it is lone and would take the free ulysses-2 replica at once, and a stream's small jobs
 * would then wait behind two split jobs (bench serve's mixed stream). The stream estimate
 * counts the work the last submissions brought, the running large job's included, at the rate
 * the small jobs ran: more than 2.5 devices busy, so the mesh drains for dp 4, or, where the
 * small jobs alone keep at most 2 devices busy, for the mixed stream's unequal groups (one
 * Ulysses-2 replica beside two singles: case auto_mixed) (GET /v1/cluster says so, and why),
 * and the job waits. Counted by the finished jobs' run times (the estimate
 * before), the stream looked idle (the small jobs' fraction of a second) and it took the free
 * replica. Both large jobs are then cancelled. */
static int case_auto_busy(void)
{
    char lay[96], why[640];
    struct cluster k;
    auto_cluster_up(&k);
    char big[WEFT_CLIENT_ID_MAX], small[WEFT_CLIENT_ID_MAX], big2[WEFT_CLIENT_ID_MAX];
    struct weft_prompt p;
    struct weft_job_request req;
    auto_large_running(k.c, 12, 256, big, &req, &p);
    req.steps = 1;
    for (int i = 0; i < 3; i++) {
        struct weft_job_status st = {0};
        CHECK_OK(weft_client_submit(k.c, &req, small));
        CHECK_OK(weft_client_wait(k.c, small, 200000, NULL, NULL, &st));
        CHECK(st.state == WEFT_JOB_DONE);
        weft_job_status_cleanup(&st);
        job_layout(k.c, small, lay, sizeof(lay), why, sizeof(why));
        printf("256x256, 1 step, beside it: \"%s\" (%s)\n", lay, why);
        CHECK(strstr(why, "backfill"));
    }
    req.height = 512;
    req.width = 1024;
    req.steps = 28;
    CHECK_OK(weft_client_submit(k.c, &req, big2));
    char want[96] = "", want_why[640] = "";
    for (int i = 0; i < 250 && !strstr(want_why, "recent stream"); i++) {
        if (i)
            sleep_ms(20);
        cJSON *cl = cluster_record(k.c);
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(cl, "want");
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(cl, "want_reason");
        snprintf(want, sizeof(want), "%s", cJSON_IsString(w) ? w->valuestring : "");
        snprintf(want_why, sizeof(want_why), "%s", cJSON_IsString(r) ? r->valuestring : "");
        cJSON_Delete(cl);
    }
    const enum weft_job_state s1 = job_state(k.c, big), s2 = job_state(k.c, big2);
    printf("the second 1024x512: %s, the first %s; the mesh drains for \"%s\" (%s)\n",
           weft_client_state_name(s2), weft_client_state_name(s1), want, want_why);
    CHECK(s1 == WEFT_JOB_RUNNING); /* else the drain was over: the case proves nothing */
    CHECK(s2 == WEFT_JOB_QUEUED && strstr(want_why, "recent stream"));
    CHECK(strncmp(want, "dp 4 x ", 7) == 0 ||
          (strcmp(want, "dp 1 x ring 1 x ulysses 2 x tp 1 + dp 2 x ring 1 x ulysses 1 x tp 1") ==
               0 &&
           strstr(want_why, "mixes")));
    const char *ids[2] = {big2, big};
    for (int i = 0; i < 2; i++)
        CHECK_OK(weft_client_cancel(k.c, ids[i]));
    for (int i = 0; i < 2; i++) {
        struct weft_job_status st = {0};
        CHECK_OK(weft_client_wait(k.c, ids[i], 200000, NULL, NULL, &st));
        CHECK(st.state == WEFT_JOB_CANCELLED);
        weft_job_status_cleanup(&st);
    }
    cluster_down(&k);
    return 0;
}

/* A worker stopped (SIGSTOP: alive to the kernel, silent to us) with a job running, then the
 * coordinator told to stop: it gives the job up after a bounded wait, closes the silent
 * peer's endpoint and exits 0, the job kept in the journal. */
static int case_stopped(void)
{
    struct cluster k;
    const char *extra[] = {"--api.shutdown_grace_ms=300", NULL};
    cluster_up(&k, "1", extra, 1);
    char id[WEFT_CLIENT_ID_MAX];
    submit(k.c, 512, 100, id);
    wait_running(k.c, id);
    weft_client_close(k.c);
    kill(k.w[0], SIGSTOP);
    double t0 = now_ms();
    kill(k.server, SIGTERM);
    int rc = wait_pid(k.server);
    printf("coordinator stopped with a silent worker: exit %d after %.0f ms\n", rc,
           now_ms() - t0);
    CHECK_EQ(rc, 0);
    CHECK(now_ms() - t0 < 8000);
    kill(k.w[0], SIGKILL);
    (void)wait_pid(k.w[0]);
    return 0;
}

/* tp 2: a running job cancelled through the API stops at a step boundary on both workers
 * (state cancelled), and the next job runs on the same mesh. */
static int case_cancel(void)
{
    struct cluster k;
    cluster_up(&k, "2", NULL, 2);
    char id[WEFT_CLIENT_ID_MAX];
    submit(k.c, 512, 100, id);
    wait_running(k.c, id);
    double t0 = now_ms();
    CHECK_OK(weft_client_cancel(k.c, id));
    struct weft_job_status st = {0};
    CHECK_OK(weft_client_wait(k.c, id, 30000, NULL, NULL, &st));
    printf("cancelled at step %d of 100: %s after %.0f ms\n", st.step,
           weft_client_state_name(st.state), now_ms() - t0);
    CHECK(st.state == WEFT_JOB_CANCELLED && st.step < 100);
    weft_job_status_cleanup(&st);
    /* a cancel during the last step (the only one; 1024 x 1024 takes seconds here) stops the
     * job before its decode: cancelled, no image (it once ended cancelled with its image) */
    submit(k.c, 1024, 1, id);
    wait_started(k.c, id);
    CHECK_OK(weft_client_cancel(k.c, id));
    CHECK_OK(weft_client_wait(k.c, id, 60000, NULL, NULL, &st));
    printf("cancelled in its last step: %s, %zu images\n", weft_client_state_name(st.state),
           st.n_images);
    CHECK(st.state == WEFT_JOB_CANCELLED && st.n_images == 0);
    weft_job_status_cleanup(&st);
    submit(k.c, 256, 2, id);
    CHECK_OK(weft_client_wait(k.c, id, 60000, NULL, NULL, &st));
    CHECK(st.state == WEFT_JOB_DONE && st.n_images == 1);
    weft_job_status_cleanup(&st);
    cluster_down(&k);
    return 0;
}

static int case_secret(void)
{
    char api[300], workers[300], wlog[512];
    pid_t server = start_server(api, workers, "1");
    snprintf(wlog, sizeof(wlog), "%s/bad.log", tmp);
    pid_t bad = start_worker(workers, "WEFT_CLUSTER_SECRET=not-the-secret", wlog);
    CHECK(wait_pid(bad) != 0);
    FILE *f = fopen(wlog, "r");
    char text[8192] = "";
    CHECK(f);
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    text[n] = '\0';
    (void)fclose(f); /* read only */
    printf("a worker with the wrong secret: %s", strstr(text, "refused") ? strstr(text, "refused")
                                                                        : text);
    CHECK(strstr(text, "wrong cluster secret"));
    /* and a good one still joins */
    pid_t good = start_worker(workers, secret_env, NULL);
    struct weft_client *c = client(api);
    wait_ready(c);
    weft_client_close(c);
    kill(server, SIGTERM);
    CHECK_EQ(wait_pid(server), 0);
    CHECK_EQ(wait_pid(good), 0);
    return 0;
}


/* weft with args must fail within max_ms with sub in what it printed; returns its log. */
static void expect_fail(const char *const *args, const char *sub, double max_ms, char *log_text,
                        size_t len)
{
    char log[512];
    snprintf(log, sizeof(log), "%s/fail.log", tmp);
    double t0 = now_ms();
    int rc = wait_pid(run_weft(args, secret_env, log));
    double ms = now_ms() - t0;
    read_text(log, log_text, len);
    const char *line = strstr(log_text, sub);
    printf("weft %s %s: exit %d after %.0f ms: %.*s\n", args[0], args[1] ? args[1] : "", rc, ms,
           line ? (int)strcspn(line, "\n") : 40, line ? line : log_text);
    CHECK(rc != 0);
    CHECK(line);
    CHECK(ms < max_ms);
}

/* The device-memory discipline of the whole cluster path: workers on the CPU's devmem variant
 * (buffers that are not host-visible; collectives staged through host memory, as on a GPU with
 * Debian's UCX) give the one-device image in a tensor-parallel, a Ulysses and a ring layout,
 * and weft generate on it the same PNG bit for bit. WEFT_TEST_DEVICE=cuda:0 runs the same on a
 * GPU (tests/gpu/run.sh: two workers sharing it), within one level of the CPU's image. Without
 * a GPU, a worker and weft generate asked for cuda:0 stop at once with one line naming it. */
static int case_device(void)
{
    const char *dev = getenv("WEFT_TEST_DEVICE") && *getenv("WEFT_TEST_DEVICE")
                          ? getenv("WEFT_TEST_DEVICE")
                          : "cpu-devmem";
    const bool exact = strcmp(dev, "cpu-devmem") == 0;
    char ref[512], out[512], over[96];
    snprintf(over, sizeof(over), "--worker.device=%s", dev);
    one_device(ref, sizeof(ref));
    snprintf(out, sizeof(out), "%s/gen-device.png", tmp);
    const char *gen[] = {"generate", "--height", "256", "--width", "256", "--steps", "3",
                         "--prompt-embeds", "red-fox", "--seed", "7", "--device", dev,
                         "--out", out, NULL};
    CHECK_EQ(wait_pid(run_weft(gen, NULL, NULL)), 0);
    const int d = png_max_diff(ref, out);
    printf("weft generate --device %s: max pixel difference to the CPU %d\n", dev, d);
    CHECK(exact ? d == 0 : d <= 1);
    const char *const layouts[][6] = {
        {"--tp", "2", over, NULL},
        {"--ulysses", "2", over, NULL},
        {"--ring", "2", "--parallel.ring_rotation=p2p", over, NULL},
    };
    for (size_t l = 0; l < sizeof(layouts) / sizeof(layouts[0]); l++) {
        snprintf(out, sizeof(out), "%s/device%zu.png", tmp, l);
        run_vs_ref(ref, out, layouts[l], NULL, -1);
    }
    if (weft_gpu_count() > 0) {
        printf("this machine has a GPU: the refusal of a missing one is not checked\n");
        return 0;
    }
    char text[8192];
#if WEFT_HAVE_CUDA
    const char *why = "cuda:0: no usable GPU";
#else /* a build without CUDA (the sanitizer builds) says so instead */
    const char *why = "cuda:0: this weft was built without CUDA";
#endif
    const char *worker[] = {"worker", "--coordinator", "127.0.0.1:9", "--device", "cuda:0",
                            NULL};
    expect_fail(worker, why, 5000, text, sizeof(text));
    const char *g2[] = {"generate", "--device", "cuda:0", "--height", "64", "--width", "64",
                        "--out", out, NULL};
    expect_fail(g2, why, 5000, text, sizeof(text));
    return 0;
}

/* True CFG through the job: `weft run` with a negative prompt and --true-cfg-scale 3 in
 * several layouts, and a served local runner, give weft generate's image within one level; the
 * PNG says the negative prompt; the job API refuses a scale without negatives, or a count of
 * negatives that is not one per prompt. */
static void true_cfg_jobs(void)
{
    char ref[512], out[512];
    snprintf(ref, sizeof(ref), "%s/cfg_ref.png", tmp);
    const char *gen[] = {"generate", "--prompt-embeds", "red-fox", "--negative-prompt-embeds",
                         "lighthouse", "--true-cfg-scale", "3", "--height", "64", "--width",
                         "64", "--steps", "3", "--seed", "5", "--out", ref, NULL};
    CHECK_EQ(wait_pid(run_weft(gen, NULL, NULL)), 0);
    snprintf(out, sizeof(out), "%s/cfg_off.png", tmp);
    const char *off[] = {"generate", "--prompt-embeds", "red-fox", "--height", "64", "--width",
                         "64", "--steps", "3", "--seed", "5", "--out", out, NULL};
    CHECK_EQ(wait_pid(run_weft(off, NULL, NULL)), 0);
    printf("without true CFG: max pixel difference %d (the guidance changes the image)\n",
           png_max_diff(ref, out));
    CHECK(png_max_diff(ref, out) > 8);
    /* the last: CFG parallelism, the two passes on two halves of tp 2 */
    static const char *const layouts[][5] = {
        {"--np", "1"}, {"--tp", "2"}, {"--ulysses", "2"}, {"--ring", "2"}, {"--dp", "2"},
        {"--cfg", "2"}, {"--cfg", "2", "--ulysses", "2"}, {"--cfg", "2", "--tp", "2"}};
    for (size_t l = 0; l < sizeof(layouts) / sizeof(layouts[0]); l++) {
        snprintf(out, sizeof(out), "%s/cfg_run%zu.png", tmp, l);
        const char *run[] = {"run", "--prompt-embeds", "red-fox", "--negative-prompt-embeds",
                             "lighthouse", "--true-cfg-scale", "3", "--height", "64", "--width",
                             "64", "--steps", "3", "--seed", "5", "--progress", "none", "--out",
                             out, layouts[l][0], layouts[l][1], layouts[l][2], layouts[l][3],
                             NULL};
        CHECK_EQ(wait_pid(run_weft(run, NULL, NULL)), 0);
        const int d = png_max_diff(ref, out);
        printf("weft run --true-cfg-scale 3 %s %s %s %s: max pixel difference to generate %d\n",
               layouts[l][0], layouts[l][1], layouts[l][2] ? layouts[l][2] : "",
               layouts[l][3] ? layouts[l][3] : "", d);
        CHECK(d <= 1);
    }
    struct weft_png_image im;
    CHECK_OK(weft_png_read(out, &im, TERR));
    const char *params = weft_png_image_text(&im, "parameters");
    CHECK(params && strstr(params, "Negative prompt: lighthouse") &&
          strstr(params, "Layout: dp 1 x cfg 2 x ring 1 x ulysses 1 x tp 2"));
    weft_png_image_cleanup(&im);
    /* CFG parallelism on a job without true CFG: both halves run the prompt's pass */
    snprintf(ref, sizeof(ref), "%s/cfg_off.png", tmp);
    snprintf(out, sizeof(out), "%s/cfg_off_cfg2.png", tmp);
    const char *off2[] = {"run", "--cfg", "2", "--prompt-embeds", "red-fox", "--height", "64",
                          "--width", "64", "--steps", "3", "--seed", "5", "--progress", "none",
                          "--out", out, NULL};
    CHECK_EQ(wait_pid(run_weft(off2, NULL, NULL)), 0);
    printf("weft run --cfg 2 without true CFG: max pixel difference to generate %d\n",
           png_max_diff(ref, out));
    CHECK(png_max_diff(ref, out) <= 1);
    snprintf(ref, sizeof(ref), "%s/cfg_ref.png", tmp);
    /* the job API: negative_prompts one per prompt; refusals */
    const char *extra[] = {"--parallel.tp_degree=1", NULL};
    struct cluster k;
    cluster_up(&k, "1", extra, 1);
    char id[WEFT_CLIENT_ID_MAX];
    CHECK_OK(weft_client_submit_json(
        k.c, "{\"prompts\": [{\"name\": \"red-fox\"}, {\"name\": \"city-night\"}], "
             "\"negative_prompts\": [{\"name\": \"lighthouse\"}, {\"name\": \"lighthouse\"}], "
             "\"true_cfg_scale\": 3, \"height\": 64, \"width\": 64, \"steps\": 3, "
             "\"seed\": 5}", id));
    struct weft_job_status st = {0};
    CHECK_OK(weft_client_wait(k.c, id, 120000, NULL, NULL, &st));
    CHECK(st.state == WEFT_JOB_DONE && st.n_images == 2);
    weft_job_status_cleanup(&st);
    snprintf(out, sizeof(out), "%s/cfg_api.png", tmp);
    CHECK_OK(weft_client_image_save(k.c, id, 0, out));
    const int d = png_max_diff(ref, out);
    printf("job API negative_prompts + true_cfg_scale 3: image 0 to generate %d\n", d);
    CHECK(d <= 1);
    char *body;
    int code;
    size_t len;
    char path[128];
    snprintf(path, sizeof(path), "/v1/jobs/%s", id);
    CHECK_OK(weft_client_request(k.c, "GET", path, NULL, 0, &code, &body, &len));
    CHECK(code == 200 && strstr(body, "\"negative_prompts\":[\"lighthouse\",\"lighthouse\"]") &&
          strstr(body, "\"true_cfg_scale\":3"));
    weft_client_free(body);
    static const char *const refused[][2] = {
        {"{\"prompt\": {\"name\": \"red-fox\"}, \"true_cfg_scale\": 3}", "needs"},
        {"{\"prompts\": [{\"name\": \"red-fox\"}], \"negative_prompts\": [], "
         "\"true_cfg_scale\": 3}", "one per prompt"},
        {"{\"prompt\": {\"name\": \"red-fox\"}, \"negative_prompt\": {\"name\": \"nope\"}}",
         "unknown prompt"},
    };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        CHECK(weft_client_submit_json(k.c, refused[i][0], id) != WEFT_OK);
        printf("refused: %s\n", weft_client_error(k.c));
        CHECK(weft_client_http_status(k.c) == 400 && strstr(weft_client_error(k.c), refused[i][1]));
    }
    cluster_down(&k);
}

/* weft generate with true CFG (a negative prompt, --true-cfg-scale 3) from Diffusers' initial
 * latents gives Diffusers' final latents (tests/data/pipeline_cfg); a scale without a negative
 * prompt, or both kinds of negative prompt, are one line each; then through the job. */
static int case_true_cfg(void)
{
    char golden_path[1200], out[512], log[512];
    snprintf(golden_path, sizeof(golden_path),
             "%s/tests/data/pipeline_cfg/golden_true_cfg_red-fox_128.safetensors",
             getenv("WEFT_SOURCE_ROOT"));
    snprintf(out, sizeof(out), "%s/cfg.safetensors", tmp);
    snprintf(log, sizeof(log), "%s/cfg.log", tmp);
    const char *gen[] = {"generate", "--prompt-embeds", "red-fox", "--negative-prompt-embeds",
                         "lighthouse", "--true-cfg-scale", "3", "--height", "128", "--width",
                         "128", "--steps", "4", "--latents", golden_path, "--out", out, NULL};
    CHECK_EQ(wait_pid(run_weft(gen, NULL, log)), 0);
    struct weft_st_file *fw, *fg;
    CHECK_OK(weft_st_open(out, &fw, TERR));
    CHECK_OK(weft_st_open(golden_path, &fg, TERR));
    const struct weft_st_tensor *tw = weft_st_find(fw, "latents");
    const struct weft_st_tensor *tg = weft_st_find(fg, "latents_final");
    CHECK(tw && tg && tw->numel == tg->numel);
    float *a = malloc((size_t)tw->numel * sizeof(float)), *b = malloc((size_t)tw->numel * 4);
    CHECK(a && b);
    CHECK_OK(weft_st_read(fw, tw, a, WEFT_DTYPE_F32, TERR));
    CHECK_OK(weft_st_read(fg, tg, b, WEFT_DTYPE_F32, TERR));
    double num = 0, den = 0;
    for (int64_t i = 0; i < tw->numel; i++)
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), den += (double)b[i] * b[i];
    const double e = sqrt(num / den);
    printf("weft generate --true-cfg-scale 3 --negative-prompt-embeds lighthouse: final latents "
           "rel L2 %.3g to Diffusers'\n", e);
    CHECK(e <= 1e-4);
    free(a), free(b);
    weft_st_close(fw);
    weft_st_close(fg);
    static char text[8192];
    const char *no_neg[] = {"generate", "--prompt-embeds", "red-fox", "--true-cfg-scale", "3",
                            "--height", "64", "--width", "64", "--steps", "1", "--out", out, NULL};
    CHECK(wait_pid(run_weft(no_neg, NULL, log)) != 0);
    read_text(log, text, sizeof(text));
    CHECK(strstr(text, "true_cfg_scale 3 needs a negative prompt"));
    const char *both[] = {"generate", "--negative-prompt", "x", "--negative-prompt-embeds", "y",
                          "--out", out, NULL};
    CHECK_EQ(wait_pid(run_weft(both, NULL, log)), 2);
    read_text(log, text, sizeof(text));
    CHECK(strstr(text, "not both"));
    true_cfg_jobs();
    return 0;
}

/* A job's 64-bit numbers cross the wire exactly: the largest seed (and one just above 2^53,
 * which a double would round down) give on a cluster the image of one device, and a side
 * beyond 16384 is refused at submission rather than by the workers. */
static int case_exact(void)
{
    char ref[512], out[512], alt[512];
    static const char *const seeds[] = {"18446744073709551615", "9007199254740993"};
    for (int i = 0; i < 2; i++) {
        snprintf(ref, sizeof(ref), "%s/exact%d.png", tmp, i);
        snprintf(out, sizeof(out), "%s/exact%d-run.png", tmp, i);
        const char *gen[] = {"generate", "--height", "128", "--width", "128", "--steps", "2",
                             "--prompt-embeds", "red-fox", "--seed", seeds[i], "--out", ref,
                             NULL};
        CHECK_EQ(wait_pid(run_weft(gen, NULL, NULL)), 0);
        const char *run[] = {"run", "--tp", "2", "--height", "128", "--width", "128", "--steps",
                             "2", "--prompt", "red-fox", "--seed", seeds[i], "--out", out, NULL};
        CHECK_EQ(wait_pid(run_weft(run, NULL, NULL)), 0);
        int d = png_max_diff(ref, out);
        struct weft_png_image img;
        CHECK_OK(weft_png_read(out, &img, TERR));
        const char *seed = weft_png_image_text(&img, "weft.seed");
        printf("seed %s: tp 2 vs one device max difference %d, the PNG says seed %s\n", seeds[i],
               d, seed ? seed : "(none)");
        CHECK(d <= 1 && seed && strcmp(seed, seeds[i]) == 0);
        weft_png_image_cleanup(&img);
    }
    /* 2^53 + 1 is not 2^53 */
    snprintf(alt, sizeof(alt), "%s/exact-2p53.png", tmp);
    const char *gen[] = {"generate", "--height", "128", "--width", "128", "--steps", "2",
                         "--prompt-embeds", "red-fox", "--seed", "9007199254740992", "--out",
                         alt, NULL};
    CHECK_EQ(wait_pid(run_weft(gen, NULL, NULL)), 0);
    CHECK(png_max_diff(alt, out) > 8);

    /* a side the workers could never take, within max_pixels: a 400 naming it */
    struct cluster k;
    const char *extra[] = {"--api.max_pixels=2000000", NULL};
    cluster_up(&k, "1", extra, 1);
    struct weft_prompt p = {.name = "red-fox"};
    struct weft_job_request req = {.prompts = &p, .n_prompts = 1, .height = 65552, .width = 16,
                                   .steps = 2, .count = 1, .guidance = 3.5, .seed = 1};
    char id[WEFT_CLIENT_ID_MAX];
    CHECK(weft_client_submit(k.c, &req, id) != WEFT_OK);
    printf("65552 x 16 submitted: %s\n", weft_client_error(k.c));
    CHECK(strstr(weft_client_error(k.c), "16384"));
    req.height = 16400;
    CHECK(weft_client_submit(k.c, &req, id) != WEFT_OK);
    CHECK(strstr(weft_client_error(k.c), "16384"));
    /* the largest side runs */
    req.height = 16384, req.width = 16, req.steps = 1;
    CHECK_OK(weft_client_submit(k.c, &req, id));
    struct weft_job_status st = {0};
    CHECK_OK(weft_client_wait(k.c, id, 120000, NULL, NULL, &st));
    printf("16384 x 16: %s\n", weft_client_state_name(st.state));
    CHECK(st.state == WEFT_JOB_DONE && st.n_images == 1);
    weft_job_status_cleanup(&st);
    cluster_down(&k);
    return 0;
}

/* A model the workers cannot take: refused before anything runs, with the reason, within
 * seconds, by `weft run` (which starts the cluster) and by `weft serve --runner cluster`; and
 * a refusal only a worker can see (config heads against the tensors) fails the job waiting
 * for the mesh with the worker's reason instead of leaving it queued. */
static int case_refuse(void)
{
    static const struct {
        const char *rel, *key, *value, *why;
    } broken[] = {
        {"scheduler/scheduler_config.json", "use_karras_sigmas", "true", "karras"},
        {"vae/config.json", "latent_channels", "8", "latent_channels"},
        {"vae/config.json", "norm_num_groups", "7", "norm_num_groups"},
        {"transformer/config.json", "_class_name", "\"SD3Transformer2DModel\"", "_class_name"},
    };
    char text[16384];
    for (size_t i = 0; i < sizeof(broken) / sizeof(broken[0]); i++) {
        char dir[64];
        variant_make(dir);
        variant_set(dir, broken[i].rel, broken[i].key, broken[i].value);
        const char *run[] = {"run", "--np", "2", "--tp", "2", "--model", dir, "--height",
                             "128", "--width", "128", "--steps", "2", NULL};
        expect_fail(run, broken[i].why, 15000, text, sizeof(text));
        const char *serve[] = {"serve", "--runner", "cluster", "--model", dir, "--listen",
                               "127.0.0.1:0", "--cluster.listen=127.0.0.1:0", NULL};
        expect_fail(serve, broken[i].why, 10000, text, sizeof(text));
        variant_remove(dir);
    }
    /* no vae/ folder where model_index.json names one */
    char dir[64], path[256];
    variant_make(dir);
    snprintf(path, sizeof(path), "rm -rf '%s/vae'", dir);
    CHECK(system(path) == 0);
    const char *novae[] = {"run", "--np", "1", "--model", dir, "--height", "128", "--width",
                           "128", "--steps", "2", NULL};
    expect_fail(novae, "vae", 15000, text, sizeof(text));
    variant_remove(dir);
    /* a [tp_plan] style the dataflow cannot take */
    const char *plan[] = {"run", "--tp", "2", "--height", "128", "--width", "128", "--steps",
                          "2", "--tp_plan.transformer_blocks.*.attn.to_q=rowwise", NULL};
    expect_fail(plan, "to_q", 15000, text, sizeof(text));

    /* heads that disagree with the tensors: the coordinator's check of the tensors against
     * the config refuses them before any worker starts */
    variant_make(dir);
    variant_set(dir, "transformer/config.json", "num_attention_heads", "6");
    const char *heads[] = {"run", "--np", "1", "--model", dir, "--height", "128", "--width",
                           "128", "--steps", "2", NULL};
    expect_fail(heads, "but the config implies", 20000, text, sizeof(text));
    /* a folder changed under a running weft serve (the coordinator read it whole, its worker
     * reads it changed): a queued job fails with the worker's reason, a new one 503s */
    variant_remove(dir);
    variant_make(dir);
    struct cluster k;
    char model[128];
    snprintf(model, sizeof(model), "--model=%s", dir);
    k.server = start_server_with(k.api, k.workers, "1", (const char *const[]){model, NULL});
    k.c = client(k.api);
    char id[WEFT_CLIENT_ID_MAX];
    submit(k.c, 128, 2, id);
    variant_set(dir, "transformer/config.json", "num_attention_heads", "6");
    char wlog[512];
    snprintf(wlog, sizeof(wlog), "%s/w0.log", tmp);
    k.w[0] = start_worker(k.workers, secret_env, wlog);
    k.n = 1;
    struct weft_job_status st = {0};
    double t0 = now_ms();
    CHECK_OK(weft_client_wait(k.c, id, 30000, NULL, NULL, &st));
    printf("a job queued for a mesh whose worker refused: %s after %.0f ms: %s\n",
           weft_client_state_name(st.state), now_ms() - t0, st.error);
    CHECK(st.state == WEFT_JOB_FAILED && strstr(st.error, "could not take its assignment"));
    weft_job_status_cleanup(&st);
    struct weft_prompt p = {.name = "red-fox"};
    struct weft_job_request req = {.prompts = &p, .n_prompts = 1, .height = 128, .width = 128,
                                   .steps = 2, .count = 1, .guidance = 3.5, .seed = 1};
    CHECK(weft_client_submit(k.c, &req, id) != WEFT_OK);
    printf("submitted after the refusal: %s\n", weft_client_error(k.c));
    CHECK(strstr(weft_client_error(k.c), "could not take its assignment"));
    cluster_down(&k);
    variant_remove(dir);
    return 0;
}

/* Prompt embeddings of T tokens (zeros) for flux-tiny. */
static void prompt_file(const char *path, int64_t t)
{
    static float zeros[64];
    float *pe = calloc((size_t)(t * 64) + 1, sizeof(float));
    CHECK(pe);
    const struct st_spec specs[] = {
        {"prompt_embeds", "F32", 3, {1, t, 64}, pe, (size_t)(t * 64) * 4},
        {"pooled_prompt_embeds", "F32", 2, {1, 64}, zeros, sizeof(zeros)},
    };
    CHECK(st_write(path, specs, 2, NULL) == 0);
    free(pe);
}

/* One value of a tensor of the variant's transformer made NaN (a copy replaces the link). */
static void poison(const char *dir, const char *tensor)
{
    char src[1024], dst[256], cmd[1400];
    snprintf(src, sizeof(src), "%s/tests/data/random/flux-tiny/transformer/"
             "diffusion_pytorch_model.safetensors", getenv("WEFT_SOURCE_ROOT"));
    snprintf(dst, sizeof(dst), "%s/transformer/diffusion_pytorch_model.safetensors", dir);
    snprintf(cmd, sizeof(cmd), "rm -f '%s' && cp '%s' '%s'", dst, src, dst);
    CHECK(system(cmd) == 0);
    struct weft_st_file *f;
    CHECK_OK(weft_st_open(dst, &f, TERR));
    const struct weft_st_tensor *t = weft_st_find(f, tensor);
    CHECK(t && t->dtype == WEFT_DTYPE_BF16);
    const uint64_t at = t->offset;
    weft_st_close(f);
    FILE *w = fopen(dst, "r+b");
    CHECK(w);
    static const unsigned char nan_bf16[2] = {0xc0, 0x7f};
    CHECK(fseek(w, (long)at, SEEK_SET) == 0 && fwrite(nan_bf16, 1, 2, w) == 2);
    CHECK(fclose(w) == 0);
}

/* The same refusal, with the same words, through `weft generate` (one process) and `weft run`
 * (a cluster): what one path refuses, every path refuses. */
static int case_validate(void)
{
    char text[16384], dir[64], p0[256], pbig[256], out[256];
    snprintf(out, sizeof(out), "%s/v.png", tmp);
    snprintf(p0, sizeof(p0), "%s/empty.safetensors", tmp);
    snprintf(pbig, sizeof(pbig), "%s/long.safetensors", tmp);
    prompt_file(p0, 0);
    prompt_file(pbig, 5000);
    const char *prompts[] = {p0, pbig};
    for (int i = 0; i < 2; i++) {
        const char *gen[] = {"generate", "--height", "128", "--width", "128", "--steps", "2",
                             "--prompt-embeds", prompts[i], "--out", out, NULL};
        expect_fail(gen, "tokens", 10000, text, sizeof(text));
        const char *run[] = {"run", "--height", "128", "--width", "128", "--steps", "2",
                             "--prompt-embeds", prompts[i], "--out", out, NULL};
        expect_fail(run, "tokens", 15000, text, sizeof(text));
    }
    /* model folders: an invalid model_index.json, a wrong class, a transformer whose channels
     * do not match the VAE's latents, NaN weights */
    for (int v = 0; v < 4; v++) {
        variant_make(dir);
        const char *why = v == 0 ? "model_index.json" : v == 1 ? "_class_name"
                          : v == 2 ? "latent_channels" : "not finite";
        if (v == 0)
            variant_write(dir, "model_index.json", "{\"_class_name\": \"FluxPipeline\",");
        else if (v == 1)
            variant_set(dir, "model_index.json", "_class_name", "\"FluxImg2ImgPipeline\"");
        else if (v == 2)
            variant_set(dir, "vae/config.json", "latent_channels", "32");
        else
            poison(dir, "transformer_blocks.0.attn.to_q.weight");
        const char *gen[] = {"generate", "--model", dir, "--height", "128", "--width", "128",
                             "--steps", "2", "--out", out, NULL};
        expect_fail(gen, why, 10000, text, sizeof(text));
        const char *run[] = {"run", "--model", dir, "--height", "128", "--width", "128",
                             "--steps", "2", "--out", out, NULL};
        expect_fail(run, why, 15000, text, sizeof(text));
        variant_remove(dir);
    }
    return 0;
}

/* The served text tests' common parts: a job of n copies of prompt (32 x 48, 2 steps), the
 * prompt cache's counters from /metrics, and each rank's text_bytes from /v1/cluster (j, kept
 * for the caller's own look, cJSON_Delete it). */
static void text_job(struct weft_client *c, const char *prompt, int n)
{
    char id[WEFT_CLIENT_ID_MAX];
    struct weft_job_status st = {0};
    struct weft_prompt p[2] = {{.text = prompt}, {.text = prompt}};
    struct weft_job_request req = {.prompts = p, .n_prompts = n, .height = 32, .width = 48,
                                   .steps = 2, .seed = 7, .max_sequence_length = 64};
    CHECK_OK(weft_client_submit(c, &req, id));
    CHECK_OK(weft_client_wait(c, id, 120000, NULL, NULL, &st));
    CHECK(st.state == WEFT_JOB_DONE && st.n_images == (size_t)n);
    weft_job_status_cleanup(&st);
}

static void cache_counts(struct weft_client *c, double *hits, double *misses)
{
    int code;
    char *body;
    size_t len;
    CHECK_OK(weft_client_request(c, "GET", "/metrics", NULL, 0, &code, &body, &len));
    const char *h = strstr(body, "\nweft_prompt_cache_hits_total ");
    const char *m = strstr(body, "\nweft_prompt_cache_misses_total ");
    CHECK(h && m);
    *hits = strtod(h + 30, NULL), *misses = strtod(m + 32, NULL);
    weft_client_free(body);
}

static cJSON *text_bytes_by_rank(struct weft_client *c, double bytes[2])
{
    char *text;
    CHECK_OK(weft_client_cluster(c, &text));
    cJSON *j = cJSON_Parse(text);
    weft_client_free(text);
    CHECK(j);
    bytes[0] = bytes[1] = -1;
    const cJSON *w;
    cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(j, "workers"))
    {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(w, "rank");
        const cJSON *tb = cJSON_GetObjectItemCaseSensitive(w, "text_bytes");
        CHECK(cJSON_IsNumber(r) && cJSON_IsNumber(tb) && r->valueint >= 0 && r->valueint < 2);
        bytes[r->valueint] = tb->valuedouble;
    }
    return j;
}

/* Served at tp 2: T5 tensor-parallel over both ranks, each reporting its slice in ASSIGNED (the
 * first rank CLIP too); a repeated prompt comes from the first rank's cache, the group told. */
static void text_tp_served(const char *model, const char *prompt)
{
    struct weft_model *m;
    CHECK_OK(weft_model_open(model, &m, TERR));
    struct weft_ckpt *ck;
    CHECK_OK(weft_ckpt_open(m->t5.encoder_dir, &ck, TERR));
    const uint64_t t5_slice = weft_t5_held_bytes_tp(&m->t5_cfg, ck, 2);
    const uint64_t clip = m->clip.held_bytes, t5_whole = m->t5.held_bytes;
    weft_ckpt_close(ck);
    weft_model_close(m);
    CHECK(t5_slice < t5_whole);
    const char *extra[] = {"--model", model, NULL};
    struct cluster k;
    cluster_up(&k, "2", extra, 2);
    text_job(k.c, prompt, 2);
    double hits, misses, bytes[2];
    cache_counts(k.c, &hits, &misses);
    CHECK(hits == 1 && misses == 1);
    cJSON *j = text_bytes_by_rank(k.c, bytes);
    printf("served tp 2: text bytes per rank %.0f and %.0f (CLIP %llu, T5 %llu whole, %llu a "
           "slice)\n", bytes[0], bytes[1], (unsigned long long)clip,
           (unsigned long long)t5_whole, (unsigned long long)t5_slice);
    CHECK(bytes[0] == (double)(clip + t5_slice) && bytes[1] == (double)t5_slice);
    cJSON_Delete(j);
    cluster_down(&k);
}

/* device_map with the text encoders placed like every component: balanced over two devices
 * with device 0 bounded so that CLIP (3.06 MiB) fits it and T5 (0.07 MiB) then does not:
 * CLIP on device 0, T5, the transformer and the VAE on device 1 (weft plan prints the same).
 * The map through the API names both encoders' devices, each worker holds exactly the
 * encoders placed on it, and a repeated prompt hits T5's rank's cache. */
static void text_devmap_served(const char *model, const char *prompt)
{
    struct weft_model *m;
    CHECK_OK(weft_model_open(model, &m, TERR));
    const uint64_t clip = m->clip.held_bytes, t5 = m->t5.held_bytes;
    weft_model_close(m);
    const char *extra[] = {"--model", model, "--device_map.strategy=balanced",
                           "--device_map.max_memory=0:3.1MiB", "--cluster.workers=2", NULL};
    struct cluster k;
    cluster_up(&k, "1", extra, 2);
    text_job(k.c, prompt, 1);
    text_job(k.c, prompt, 1);
    double hits, misses, bytes[2];
    cache_counts(k.c, &hits, &misses);
    CHECK(hits == 1 && misses == 1);
    cJSON *j = text_bytes_by_rank(k.c, bytes);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(j, "device_map");
    const cJSON *te = cJSON_GetObjectItemCaseSensitive(map, "text_encoder");
    const cJSON *te2 = cJSON_GetObjectItemCaseSensitive(map, "text_encoder_2");
    const cJSON *emb = cJSON_GetObjectItemCaseSensitive(map, "transformer.embedders");
    CHECK(cJSON_IsString(te) && cJSON_IsString(te2) && cJSON_IsString(emb));
    printf("device_map with text encoders from the API: text_encoder on %s, text_encoder_2 on "
           "%s, embedders on %s\n", te->valuestring, te2->valuestring, emb->valuestring);
    CHECK(strncmp(te->valuestring, "device 0 (", 10) == 0);
    CHECK(strncmp(te2->valuestring, "device 1 (", 10) == 0);
    CHECK(strncmp(emb->valuestring, "device 1 (", 10) == 0);
    printf("device_map: text bytes on device 0 %.0f (CLIP %llu), on device 1 %.0f (T5 %llu)\n",
           bytes[0], (unsigned long long)clip, bytes[1], (unsigned long long)t5);
    CHECK(bytes[0] == (double)clip && bytes[1] == (double)t5);
    cJSON_Delete(j);
    cluster_down(&k);
}

/* Text prompts: `weft run` on the tiny pipeline with both text encoders, in several layouts,
 * against `weft generate --prompt` on one device (the replica's first rank encodes and shares
 * the embeddings; at tp 2 T5 runs over both ranks); a served cluster encodes a repeated prompt once (the cache's hits reach
 * /metrics) and shows where the encoders are; the default model refuses text naming what it
 * lacks. */
static int case_text(void)
{
    char model[1200], ref[512], out[512];
    snprintf(model, sizeof(model), "%s/tests/data/text/pipeline", getenv("WEFT_SOURCE_ROOT"));
    const char *prompt = "a photo of a red fox sitting in the snow, highly detailed";
    snprintf(ref, sizeof(ref), "%s/text_ref.png", tmp);
    const char *gen[] = {"generate", "--model", model, "--prompt", prompt,
                         "--max-sequence-length", "64", "--height", "32", "--width", "48",
                         "--steps", "3", "--seed", "7", "--out", ref, NULL};
    CHECK_EQ(wait_pid(run_weft(gen, NULL, NULL)), 0);
    static const char *const layouts[][8] = {
        {"--np", "1", NULL}, {"--tp", "2", NULL}, {"--tp", "4", NULL},
        {"--ulysses", "2", NULL}, {"--ring", "2", NULL},
        {"--device-map", "balanced", "--np", "2", NULL}, /* both encoders on device 0 */
        {"--device-map", "balanced", "--np", "2", "--max-memory", "0:3.1MiB", NULL}, /* split */
    };
    for (size_t l = 0; l < sizeof(layouts) / sizeof(layouts[0]); l++) {
        const char *args[40] = {"run", "--model", model, "--prompt", prompt,
                                "--max-sequence-length", "64", "--height", "32", "--width",
                                "48", "--steps", "3", "--seed", "7", "--progress", "none",
                                "--out"};
        int n = 18;
        snprintf(out, sizeof(out), "%s/text_run%zu.png", tmp, l);
        args[n++] = out;
        for (const char *const *o = layouts[l]; *o; o++)
            args[n++] = *o;
        const bool tp = strcmp(layouts[l][0], "--tp") == 0;
        char log[512], text[16384];
        snprintf(log, sizeof(log), "%s/text_run%zu.log", tmp, l);
        if (tp)
            args[n++] = "-v";
        args[n] = NULL;
        CHECK_EQ(wait_pid(run_weft(args, NULL, tp ? log : NULL)), 0);
        int d = png_max_diff(ref, out);
        printf("weft run --prompt TEXT %s %s: max pixel difference to one device %d\n",
               layouts[l][0], layouts[l][1], d);
        CHECK(d <= 1);
        if (tp) { /* tp 2: T5 tensor-parallel, both ranks said so; tp 4 does not divide its
                   * 2 heads: the first rank ran it whole */
            read_text(log, text, sizeof(text));
            const bool two = strcmp(layouts[l][1], "2") == 0;
            const char *a = strstr(text, "T5 tensor-parallel over 2 ranks");
            CHECK(two ? a && strstr(a + 1, "T5 tensor-parallel over 2 ranks") : !a);
            CHECK(two == !strstr(text, "tp 4 does not divide T5's 2 heads"));
        }
    }
    /* true CFG with a text negative prompt on cfg 2 x tp 2: only the first half's tp ranks
     * run T5 (tensor-parallel), the prompt and its negative reach the second half over the
     * replica, and the image is one device's */
    snprintf(ref, sizeof(ref), "%s/text_cfg_ref.png", tmp);
    const char *neg = "a blurry picture of a city at night";
    const char *gen_cfg[] = {"generate", "--model", model, "--prompt", prompt,
                             "--negative-prompt", neg, "--true-cfg-scale", "3",
                             "--max-sequence-length", "64", "--height", "32", "--width", "48",
                             "--steps", "3", "--seed", "7", "--out", ref, NULL};
    CHECK_EQ(wait_pid(run_weft(gen_cfg, NULL, NULL)), 0);
    snprintf(out, sizeof(out), "%s/text_cfg2_tp2.png", tmp);
    const char *run_cfg[] = {"run", "--model", model, "--prompt", prompt, "--negative-prompt",
                             neg, "--true-cfg-scale", "3", "--max-sequence-length", "64",
                             "--height", "32", "--width", "48", "--steps", "3", "--seed", "7",
                             "--progress", "none", "--cfg", "2", "--tp", "2", "--out", out,
                             NULL};
    CHECK_EQ(wait_pid(run_weft(run_cfg, NULL, NULL)), 0);
    printf("weft run --prompt TEXT --negative-prompt TEXT --cfg 2 --tp 2: max pixel difference "
           "to one device %d\n", png_max_diff(ref, out));
    CHECK(png_max_diff(ref, out) <= 1);
    text_tp_served(model, prompt);
    text_devmap_served(model, prompt);
    /* an encoder that fails on one rank fails the job on every rank, within seconds, and the
     * job's error is the failing rank's cause, not another rank's consequence of it: T5's
     * tokenizer broken, T5 on device 1 (device_map) or over both ranks (tp 2) */
    char broken[1200], cmd[3000];
    snprintf(broken, sizeof(broken), "%s/text_broken", tmp);
    /* (a tokenizer_config.json that is not JSON is refused where the model is opened, before
     * any rank: the SentencePiece model is what only the encoding rank reads) */
    snprintf(cmd, sizeof(cmd), "cp -rL '%s' '%s' && echo garbage > '%s/tokenizer_2/spiece.model'",
             model, broken, broken);
    CHECK(system(cmd) == 0);
    static const char *const failing[][6] = {
        {"--device-map", "balanced", "--np", "2", "--max-memory", "0:3.1MiB"},
        {"--tp", "2", NULL},
    };
    for (size_t l = 0; l < 2; l++) {
        const char *args[24] = {"run", "--model", broken, "--prompt", prompt,
                                "--max-sequence-length", "64", "--height", "32", "--width", "48",
                                "--steps", "2", "--progress", "none", "--out", out};
        int n = 17;
        for (int i = 0; i < 6 && failing[l][i]; i++)
            args[n++] = failing[l][i];
        args[n] = NULL;
        static char log_text[16384];
        expect_fail(args, "tokenizer_2: not a SentencePiece model", 20000, log_text,
                    sizeof(log_text));
        CHECK(!strstr(log_text, "could not encode the prompt") &&
              !strstr(log_text, "their reports say why"));
    }
    /* served: dp 2, the same prompt in two jobs; another prompt; a prompt as embeddings */
    const char *extra[] = {"--model", model, "--parallel.dp_degree=2", NULL};
    struct cluster k;
    cluster_up(&k, "1", extra, 2);
    char id[WEFT_CLIENT_ID_MAX];
    struct weft_job_status st = {0};
    for (int i = 0; i < 3; i++) {
        struct weft_prompt p[2] = {{.text = prompt}, {.text = i == 2 ? "a lighthouse" : prompt}};
        struct weft_job_request req = {.prompts = p, .n_prompts = 2, .height = 32, .width = 48,
                                       .steps = 2, .seed = 7, .max_sequence_length = 64};
        CHECK_OK(weft_client_submit(k.c, &req, id));
        CHECK_OK(weft_client_wait(k.c, id, 120000, NULL, NULL, &st));
        CHECK(st.state == WEFT_JOB_DONE && st.n_images == 2);
        weft_job_status_cleanup(&st);
    }
    double hits, misses;
    cache_counts(k.c, &hits, &misses);
    /* 6 prompts over 2 replicas, each replica's first rank encoding its own: the first job
     * misses on both, the second hits on both, the third misses once ("a lighthouse") */
    printf("served text: prompt cache %.0f hits, %.0f misses\n", hits, misses);
    CHECK(hits == 3 && misses == 3);
    int code;
    char *body;
    size_t len;
    CHECK_OK(weft_client_request(k.c, "GET", "/v1/cluster", NULL, 0, &code, &body, &len));
    CHECK(strstr(body, "\"text_encoder\"") && strstr(body, "\"text_encoder_2\"") &&
          strstr(body, "\"text_bytes\""));
    weft_client_free(body);
    cluster_down(&k);
    /* the embedded model: text is refused, naming what it lacks */
    char log[512];
    snprintf(log, sizeof(log), "%s/text_refused.log", tmp);
    const char *refused[] = {"run", "--prompt", "a photo of a cat", "--height", "64", "--width",
                             "64", "--steps", "1", "--progress", "none", "--out", out, NULL};
    CHECK(wait_pid(run_weft(refused, NULL, log)) != 0);
    static char text[8192];
    read_text(log, text, sizeof(text));
    CHECK(strstr(text, "flux-tiny cannot encode text") && strstr(text, "text_encoder_2"));
    return 0;
}

/* The one-device image of the groups cases' large job: 1024x512, 1 step, red-fox, seed 7. */
static void big_reference(char *out, size_t len)
{
    snprintf(out, len, "%s/big-ref.png", tmp);
    const char *gen[] = {"generate", "--height", "512", "--width", "1024", "--steps", "1",
                         "--prompt-embeds", "red-fox", "--seed", "7", "--out", out, NULL};
    CHECK_EQ(wait_pid(run_weft(gen, NULL, NULL)), 0);
}

/* A job of the groups case: submitted (not waited for), 1 image unless count says more. */
static void groups_submit(struct weft_client *c, int height, int width, int steps, int count,
                          char *id)
{
    struct weft_prompt p = {.name = "red-fox"};
    struct weft_job_request req = {.prompts = &p, .n_prompts = 1, .height = height,
                                   .width = width, .steps = steps, .count = count,
                                   .guidance = 3.5, .seed = 7};
    CHECK_OK(weft_client_submit(c, &req, id));
}

/* Job id done; its layout; image 0 against ref within one level. */
static void groups_done(struct weft_client *c, const char *id, const char *ref,
                        const char *want)
{
    struct weft_job_status st = {0};
    CHECK_OK(weft_client_wait(c, id, 240000, NULL, NULL, &st));
    CHECK(st.state == WEFT_JOB_DONE);
    weft_job_status_cleanup(&st);
    char lay[96], why[640], img[600];
    job_layout(c, id, lay, sizeof(lay), why, sizeof(why));
    snprintf(img, sizeof(img), "%s/group.png", tmp);
    CHECK_OK(weft_client_image_save(c, id, 0, img));
    const int d = png_max_diff(ref, img);
    printf("job %s ran on \"%s\"; image 0 within %d level(s) of one device's\n", id, lay, d);
    CHECK(strcmp(lay, want) == 0);
    CHECK(d <= 1);
}

/* The plan GET /v1/cluster shows: its groups' layouts joined by " + ", "" until ready. */
static void groups_plan(struct weft_client *c, char *plan, size_t len)
{
    cJSON *cl = cluster_record(c);
    const cJSON *gs = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cl, "mesh"), "groups");
    plan[0] = '\0';
    const cJSON *e;
    cJSON_ArrayForEach(e, gs)
    {
        const cJSON *lay = cJSON_GetObjectItemCaseSensitive(e, "layout");
        snprintf(plan + strlen(plan), len - strlen(plan), "%s%s", plan[0] ? " + " : "",
                 cJSON_IsString(lay) ? lay->valuestring : "?");
    }
    if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cl, "ready")))
        plan[0] = '\0';
    cJSON_Delete(cl);
}

/* A 1024x512 job (1 step) and two 256x256 ones (3 steps) submitted at once, each done and one
 * device's image within one level: the large one on large_on, the small ones on small_on. The
 * ids of the large one and the first small one into big and a. */
static void groups_trio(struct weft_client *c, const char *big_ref, const char *ref,
                        const char *large_on, const char *small_on, char *big, char *a)
{
    char b[WEFT_CLIENT_ID_MAX];
    groups_submit(c, 512, 1024, 1, 1, big);
    groups_submit(c, 256, 256, 3, 1, a);
    groups_submit(c, 256, 256, 3, 1, b);
    groups_done(c, big, big_ref, large_on);
    groups_done(c, a, ref, small_on);
    groups_done(c, b, ref, small_on);
}

/* SIGKILL the first worker GET /v1/cluster lists in group g; its pid leaves k. */
static pid_t groups_kill(struct cluster *k, int g)
{
    cJSON *cl = cluster_record(k->c);
    const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(cl, "mesh"), "groups"), g), "workers"), 0);
    pid_t victim = 0;
    const cJSON *w;
    cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(cl, "workers"))
    {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(w, "id");
        const cJSON *pid = cJSON_GetObjectItemCaseSensitive(w, "pid");
        if (cJSON_IsString(first) && cJSON_IsString(id) && cJSON_IsNumber(pid) &&
            strcmp(id->valuestring, first->valuestring) == 0)
            victim = (pid_t)pid->valuedouble;
    }
    cJSON_Delete(cl);
    CHECK(victim > 0);
    for (int i = 0; i < k->n; i++)
        if (k->w[i] == victim)
            k->w[i] = 0;
    kill(victim, SIGKILL);
    (void)wait_pid(victim);
    return victim;
}

/* Until the plan is want (bounded); the plan it ended on into plan. */
static void groups_wait_plan(struct weft_client *c, const char *want, char *plan, size_t len)
{
    for (int i = 0; i < 300; i++) {
        if (i)
            sleep_ms(50);
        groups_plan(c, plan, len);
        if (strcmp(plan, want) == 0)
            return;
    }
}

/* serve --runner cluster with opts: it refuses to start, in one line that has `says`. */
static void groups_refused(const char *const *opts, const char *says)
{
    char log[600], out[4096];
    snprintf(log, sizeof(log), "%s/groups-bad.log", tmp);
    const char *args[16] = {"serve", "--runner", "cluster", "--listen", "127.0.0.1:0",
                            "--cluster.listen=127.0.0.1:0"};
    int n = 6;
    for (; *opts && n < 15; opts++)
        args[n++] = *opts;
    args[n] = NULL;
    const pid_t pid = run_weft(args, secret_env, log);
    int status = 0, i = 0;
    for (; i < 600 && waitpid(pid, &status, WNOHANG) == 0; i++) /* it must not start serving */
        sleep_ms(50);
    if (i == 600) {
        kill(pid, SIGKILL);
        (void)waitpid(pid, &status, 0);
        printf("%s: still running after 30 s\n", args[6]);
        CHECK(!"the configuration was not refused");
    }
    const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    read_text(log, out, sizeof(out));
    printf("%s: exit %d, %s", args[6], rc, out);
    fflush(stdout);
    CHECK(rc != 0 && strstr(out, says) && strchr(out, '\n') == out + strlen(out) - 1);
}

/* [parallel] groups = "dp 2 + ulysses 2" on 4 workers: two single-device replicas (ranks 0-1)
 * beside one replica of Ulysses 2 (ranks 2-3: a mesh at world_base 2). GET /v1/cluster lists
 * both groups and their workers. A 1024x512 job (2048 image tokens: two context-parallel
 * ranks pay) and two 256x256 ones submitted at once: the large one runs on the Ulysses
 * replica, the small ones side by side on the singles; a job of 2 small images takes both
 * singles, and the small job behind it the free Ulysses replica (no fitting group is free: the
 * free one with the fewest devices). Every image is one device's within one level, and the
 * record and /metrics name each job's group; a job one group cannot split is refused at
 * submission, naming the group. A single's worker killed: the mesh is planned
 * again as one replica of each group on the 3 left, and both kinds of job run there; on
 * "tp 2 + ulysses 2" a lost tensor-parallel worker leaves the intact Ulysses group serving with
 * its weights kept. weft run
 * with groups gives one device's image, and refuses a degree beside them. Wrong groups are
 * refused in one line before any worker. */
static int case_groups(void)
{
    char ref[600], big_ref[600];
    one_device(ref, sizeof(ref));
    big_reference(big_ref, sizeof(big_ref));
    static const char *const single = "dp 2 x ring 1 x ulysses 1 x tp 1",
                             *split = "dp 1 x ring 1 x ulysses 2 x tp 1";
    const char *rules[] = {"--parallel.groups=dp 2 + ulysses 2", NULL};
    struct cluster k;
    cluster_up(&k, "1", rules, 4);
    cJSON *cl = cluster_record(k.c);
    const cJSON *mesh = cJSON_GetObjectItemCaseSensitive(cl, "mesh");
    const cJSON *groups = cJSON_GetObjectItemCaseSensitive(mesh, "groups");
    CHECK(cJSON_GetArraySize(groups) == 2);
    CHECK(cJSON_GetObjectItemCaseSensitive(mesh, "dp")->valuedouble == 3);
    static const char *const *const names[] = {&single, &split};
    static const int replicas[] = {2, 1}, per[] = {1, 2};
    for (int g = 0; g < 2; g++) {
        const cJSON *e = cJSON_GetArrayItem(groups, g);
        const cJSON *lay = cJSON_GetObjectItemCaseSensitive(e, "layout");
        const cJSON *ws = cJSON_GetObjectItemCaseSensitive(e, "workers");
        printf("group %d: %s, %g replica(s) of %g device(s), %d workers\n", g + 1,
               cJSON_IsString(lay) ? lay->valuestring : "?",
               cJSON_GetObjectItemCaseSensitive(e, "replicas")->valuedouble,
               cJSON_GetObjectItemCaseSensitive(e, "devices_per_replica")->valuedouble,
               cJSON_GetArraySize(ws));
        CHECK(cJSON_IsString(lay) && strcmp(lay->valuestring, *names[g]) == 0);
        CHECK(cJSON_GetObjectItemCaseSensitive(e, "replicas")->valuedouble == replicas[g]);
        CHECK(cJSON_GetObjectItemCaseSensitive(e, "devices_per_replica")->valuedouble ==
              per[g]);
        CHECK(cJSON_GetArraySize(ws) == 2);
    }
    cJSON_Delete(cl);
    char big[WEFT_CLIENT_ID_MAX], a[WEFT_CLIENT_ID_MAX];
    groups_trio(k.c, big_ref, ref, split, single, big, a);
    /* 784x784 (2401 tokens) splits evenly over no Ulysses 2: refused, naming the group */
    struct weft_prompt odd_p = {.name = "red-fox"};
    struct weft_job_request odd = {.prompts = &odd_p, .n_prompts = 1, .height = 784,
                                   .width = 784, .steps = 1, .count = 1, .guidance = 3.5};
    char odd_id[WEFT_CLIENT_ID_MAX];
    CHECK(weft_client_submit(k.c, &odd, odd_id) != WEFT_OK);
    printf("784x784 submitted: %s\n", weft_client_error(k.c));
    CHECK(weft_client_http_status(k.c) == 400 &&
          strstr(weft_client_error(k.c), "group 2 of [parallel] groups (dp 1 x ring 1 x ulysses "
                                         "2 x tp 1") &&
          strstr(weft_client_error(k.c), "ulysses_anything"));
    char two[WEFT_CLIENT_ID_MAX], behind[WEFT_CLIENT_ID_MAX];
    groups_submit(k.c, 256, 256, 3, 2, two);
    groups_submit(k.c, 256, 256, 3, 1, behind);
    groups_done(k.c, two, ref, single);
    groups_done(k.c, behind, ref, split);
    int code;
    char *metrics;
    size_t mlen;
    CHECK_OK(weft_client_request(k.c, "GET", "/metrics", NULL, 0, &code, &metrics, &mlen));
    CHECK(strstr(metrics, "weft_jobs_done_by_layout_total{layout=\"dp 1 x ring 1 x ulysses 2 x "
                          "tp 1\"} 2"));
    CHECK(strstr(metrics, "weft_jobs_done_by_layout_total{layout=\"dp 2 x ring 1 x ulysses 1 x "
                          "tp 1\"} 3"));
    weft_client_free(metrics);
    /* a single's worker lost: the mesh keeps a replica of each group on the 3 left */
    const pid_t victim = groups_kill(&k, 0);
    char plan[256];
    static const char *const shrunk =
        "dp 1 x ring 1 x ulysses 1 x tp 1 + dp 1 x ring 1 x ulysses 2 x tp 1";
    groups_wait_plan(k.c, shrunk, plan, sizeof(plan));
    printf("after worker pid %d was killed: %s\n", (int)victim, plan);
    CHECK(strcmp(plan, shrunk) == 0);
    groups_submit(k.c, 512, 1024, 1, 1, big);
    groups_submit(k.c, 256, 256, 3, 1, a);
    groups_done(k.c, big, big_ref, split);
    groups_done(k.c, a, ref, "dp 1 x ring 1 x ulysses 1 x tp 1");
    cluster_down(&k);
    /* "tp 2 + ulysses 2" losing a tensor-parallel worker: the 3 left hold one group, and the
     * intact one stays (its workers keep their weights) rather than the first */
    const char *tp_rules[] = {"--parallel.groups=tp 2 + ulysses 2", NULL};
    cluster_up(&k, "1", tp_rules, 4);
    const double epoch0 = cluster_number(k.c, "epoch");
    groups_kill(&k, 0);
    groups_wait_plan(k.c, split, plan, sizeof(plan));
    int code0;
    char *m0;
    size_t m0len;
    CHECK_OK(weft_client_request(k.c, "GET", "/metrics", NULL, 0, &code0, &m0, &m0len));
    const char *kept = strstr(m0, "\nweft_weights_kept_bytes_total ");
    const double kept_bytes = kept ? strtod(strchr(kept + 1, ' ') + 1, NULL) : 0;
    weft_client_free(m0);
    printf("tp 2 + ulysses 2 after losing a tp worker (epoch %g -> %g): %s, %.0f bytes of "
           "weights kept\n", epoch0, cluster_number(k.c, "epoch"), plan, kept_bytes);
    CHECK(strcmp(plan, split) == 0 && kept_bytes > 0);
    groups_submit(k.c, 512, 1024, 1, 1, big);
    groups_done(k.c, big, big_ref, split);
    cluster_down(&k);
    /* weft run takes its workers from the groups, and no degree beside them */
    char out[600], log[600], text[4096];
    snprintf(out, sizeof(out), "%s/run-groups.png", tmp);
    run_vs_ref(ref, out, (const char *[]){"--parallel.groups=ulysses 2 + dp 2", NULL}, NULL, -1);
    snprintf(log, sizeof(log), "%s/run-groups.log", tmp);
    const char *bad_run[] = {"run", "--parallel.groups=ulysses 2 + dp 2", "--tp", "2",
                             "--prompt", "red-fox", "--out", out, NULL};
    const int rc = wait_pid(run_weft(bad_run, NULL, log));
    read_text(log, text, sizeof(text));
    printf("weft run with groups and --tp 2: exit %d, %s", rc, text);
    CHECK(rc != 0 && strstr(text, "takes 4 workers: no --tp"));
    groups_refused((const char *[]){"--parallel.groups=dp 2 + ulysses", NULL},
                   "ulysses needs a degree");
    groups_refused((const char *[]){"--parallel.groups=dp 2 + tpp 2", NULL},
                   "\"tpp\" is not a degree");
    groups_refused((const char *[]){"--parallel.groups=dp 2 +", NULL}, "group 2 is empty");
    groups_refused((const char *[]){"--parallel.groups=dp 2 + tp 2", "--parallel.tp_degree=2",
                                    NULL},
                   "groups sets the degrees");
    groups_refused((const char *[]){"--parallel.groups=dp 2 + tp 2", "--cluster.workers=3",
                                    NULL},
                   "workers is 3 but [parallel] groups takes 4");
    groups_refused((const char *[]){"--parallel.groups=dp 1 + tp 5", NULL},
                   "group 2 (dp 1 x ring 1 x ulysses 1 x tp 5): tp_degree 5 does not divide");
    groups_refused((const char *[]){"--parallel.groups=dp 2", "--parallel.mode=auto",
                                    "--cluster.workers=2", NULL},
                   "leave [parallel] groups empty");
    return 0;
}

/* mode = auto, a stream of small and large jobs: unequal groups side by side. A 256x256 job,
 * then a lone 1024x512 one (it splits: dp 2 x ulysses 2), then a 256x256 one: the stream now
 * mixes both kinds, so the mesh becomes one replica of Ulysses 2 for the large jobs beside two
 * single-device replicas for the small ones (the large job's lone plan over the 3 devices the
 * small ones leave), and the small job runs on the singles. Then a 1024x512 job and two
 * 256x256 ones at once: the mesh stays (a large head wants the same plan), the large job on
 * the Ulysses replica, the small ones on the singles while it runs. Images one device's
 * within one level; GET /v1/cluster lists the groups. */
static int case_auto_mixed(void)
{
    char ref[600], big_ref[600], lay[96], why[640];
    one_device(ref, sizeof(ref));
    big_reference(big_ref, sizeof(big_ref));
    static const char *const split = "dp 1 x ring 1 x ulysses 2 x tp 1",
                             *singles = "dp 2 x ring 1 x ulysses 1 x tp 1";
    struct cluster k;
    auto_cluster_up(&k);
    auto_job(k.c, 256, 256, 3, 1, ref, lay, sizeof(lay), why, sizeof(why));
    auto_job(k.c, 512, 1024, 1, 1, NULL, lay, sizeof(lay), why, sizeof(why));
    CHECK(strcmp(lay, "dp 2 x ring 1 x ulysses 2 x tp 1") == 0);
    auto_job(k.c, 256, 256, 3, 1, ref, lay, sizeof(lay), why, sizeof(why));
    CHECK(strcmp(lay, singles) == 0 && strstr(why, "mixes"));
    const double replans = cluster_number(k.c, "replans");
    char big[WEFT_CLIENT_ID_MAX], a[WEFT_CLIENT_ID_MAX];
    groups_trio(k.c, big_ref, ref, split, singles, big, a);
    const double big_end = job_number(k.c, big, "finished_at");
    const double a_start = job_number(k.c, a, "started_at");
    printf("the small job started %.3f s before the large one ended\n", big_end - a_start);
    CHECK(a_start < big_end);
    CHECK(cluster_number(k.c, "replans") == replans);
    cJSON *cl = cluster_record(k.c);
    const cJSON *groups = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cl, "mesh"), "groups");
    CHECK(cJSON_GetArraySize(groups) == 2);
    const cJSON *l0 = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(groups, 0), "layout");
    const cJSON *l1 = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(groups, 1), "layout");
    CHECK(cJSON_IsString(l0) && strcmp(l0->valuestring, split) == 0);
    CHECK(cJSON_IsString(l1) && strcmp(l1->valuestring, singles) == 0);
    cJSON_Delete(cl);
    cluster_down(&k);
    return 0;
}

/* weft plan --auto --server: the devices read from a running cluster (two CPU workers on
 * this host, sharing its memory), planned for a stream of prompts: one replica each; a server
 * that is not there: one line, exit 1. */
static int case_autoplan(void)
{
    const char *extra[] = {"--cluster.workers=2", NULL};
    struct cluster k;
    cluster_up(&k, "1", extra, 2);
    char cmd[1400];
    snprintf(cmd, sizeof(cmd), "'%s' plan --auto --server %s --height 512 --width 512 --goal "
             "throughput --prompts 8 --json 2>/dev/null", weft_bin, k.api);
    FILE *f = popen(cmd, "r");
    CHECK(f);
    static char out[65536];
    size_t n = fread(out, 1, sizeof(out) - 1, f);
    out[n] = '\0';
    CHECK_EQ(pclose(f), 0);
    cJSON *j = cJSON_Parse(out);
    CHECK(j);
    const cJSON *deg = cJSON_GetObjectItemCaseSensitive(j, "degrees");
    const cJSON *mem = cJSON_GetObjectItemCaseSensitive(j, "memory_per_device");
    struct sysinfo si;
    CHECK(sysinfo(&si) == 0);
    const double half = (double)si.totalram * si.mem_unit / 2;
    const double got = cJSON_GetObjectItemCaseSensitive(mem, "device_memory")->valuedouble;
    printf("weft plan --auto --server: dp %d, %.2f GB per device (host %.2f GB over 2 "
           "workers)\n", cJSON_GetObjectItemCaseSensitive(deg, "dp")->valueint, got / 1e9,
           2 * half / 1e9);
    CHECK_EQ(cJSON_GetObjectItemCaseSensitive(deg, "dp")->valueint, 2);
    CHECK(fabs(got - half) <= 2.0);
    cJSON_Delete(j);
    /* one 1024x1024 prompt: latency splits it (ulysses 2); [parallel] goal = throughput, the
     * option's default, keeps it on one device of 2 replicas */
    for (int thr = 0; thr < 2; thr++) {
        snprintf(cmd, sizeof(cmd), "'%s' plan --auto --server %s --height 1024 --width 1024 "
                 "%s --json 2>/dev/null", weft_bin, k.api, thr ? "--parallel.goal=throughput" : "");
        f = popen(cmd, "r");
        CHECK(f);
        n = fread(out, 1, sizeof(out) - 1, f);
        out[n] = '\0';
        CHECK_EQ(pclose(f), 0);
        j = cJSON_Parse(out);
        CHECK(j);
        deg = cJSON_GetObjectItemCaseSensitive(j, "degrees");
        const int dp = cJSON_GetObjectItemCaseSensitive(deg, "dp")->valueint;
        const int uly = cJSON_GetObjectItemCaseSensitive(deg, "ulysses")->valueint;
        printf("weft plan --auto, one 1024x1024 prompt, goal %s: dp %d x ulysses %d\n",
               thr ? "throughput" : "latency", dp, uly);
        CHECK(thr ? dp == 2 && uly == 1 : dp == 1 && uly == 2);
        cJSON_Delete(j);
    }
    cluster_down(&k);
    snprintf(cmd, sizeof(cmd), "'%s' plan --auto --server 127.0.0.1:1 2>&1", weft_bin);
    f = popen(cmd, "r");
    CHECK(f);
    n = fread(out, 1, sizeof(out) - 1, f);
    out[n] = '\0';
    CHECK_EQ(WEXITSTATUS(pclose(f)), 1);
    CHECK(strstr(out, "--server 127.0.0.1:1: cannot connect"));
    return 0;
}

/* weft generate with the job's arguments: the one-device image the layouts are held to. */
static void generate_ref(const char *ref, const char *const *job)
{
    const char *gen[40] = {"generate", "--out", ref};
    int n = 3;
    for (const char *const *o = job; *o && n < 39; o++)
        gen[n++] = *o;
    CHECK_EQ(wait_pid(run_weft(gen, NULL, NULL)), 0);
}

/* `weft run` with the job's arguments once per layout: each PNG within one level of ref. */
static void run_layouts(const char *what, const char *ref, const char *const *job,
                        const char *const (*layouts)[6], size_t n_layouts)
{
    char out[512];
    for (size_t l = 0; l < n_layouts; l++) {
        const char *args[40] = {"run", "--progress", "none", "--out", out};
        int n = 5;
        snprintf(out, sizeof(out), "%s/%s_run%zu.png", tmp, what, l);
        for (const char *const *o = job; *o && n < 30; o++)
            args[n++] = *o;
        for (const char *const *o = layouts[l]; *o && n < 38; o++)
            args[n++] = *o;
        args[n] = NULL;
        CHECK_EQ(wait_pid(run_weft(args, NULL, NULL)), 0);
        const int d = png_max_diff(ref, out);
        printf("%s: weft run %s %s %s %s: max pixel difference to one device %d\n", what,
               layouts[l][0], layouts[l][1], layouts[l][2] ? layouts[l][2] : "",
               layouts[l][2] && layouts[l][3] ? layouts[l][3] : "", d);
        CHECK(d <= 1);
    }
}

/* A FLUX.2 pipeline (Flux2Pipeline: its transformer, AutoencoderKLFlux2, prompt embeddings)
 * through the cluster: `weft run` in every layout gives weft generate's image within one level
 * (tests/parity/test_dit holds generate to Diffusers'); a text prompt is refused, naming the
 * encoder FLUX.2 lacks. */
static int case_flux2(void)
{
    char model[1200], ref[512], out[512];
    snprintf(model, sizeof(model), "%s/tests/data/flux2/pipeline", getenv("WEFT_SOURCE_ROOT"));
    snprintf(ref, sizeof(ref), "%s/flux2_ref.png", tmp);
    const char *const job[] = {"--model", model, "--prompt-embeds", "cat", "--height", "96",
                               "--width", "80", "--steps", "3", "--seed", "9", NULL};
    generate_ref(ref, job);
    static const char *const layouts[][6] = {
        {"--np", "1", NULL}, {"--tp", "2", NULL}, {"--tp", "3", NULL},
        {"--ulysses", "2", NULL}, {"--ring", "2", NULL}, {"--tp", "2", "--ulysses", "2", NULL},
        {"--dp", "2", NULL}, {"--device-map", "balanced", "--np", "2", NULL},
    };
    run_layouts("FLUX.2", ref, job, layouts, sizeof(layouts) / sizeof(layouts[0]));
    char log[512], text[4096];
    snprintf(log, sizeof(log), "%s/flux2_text.log", tmp);
    snprintf(out, sizeof(out), "%s/flux2_text.png", tmp);
    const char *txt[] = {"run", "--np", "1", "--model", model, "--prompt", "a cat", "--out", out,
                         NULL};
    CHECK(wait_pid(run_weft(txt, NULL, log)) != 0);
    read_text(log, text, sizeof(text));
    CHECK(strstr(text, "FLUX.2's text encoder") && strstr(text, "prompt_embeds"));
    /* a negative prompt: Flux2Pipeline has no true CFG, refused by name */
    snprintf(log, sizeof(log), "%s/flux2_neg.log", tmp);
    const char *neg[] = {"run", "--np", "1", "--model", model, "--prompt-embeds", "cat",
                         "--negative-prompt-embeds", "cat", "--true-cfg-scale", "3", "--out", out,
                         NULL};
    CHECK(wait_pid(run_weft(neg, NULL, log)) != 0);
    read_text(log, text, sizeof(text));
    CHECK(strstr(text, "Flux2Pipeline has no true CFG"));
    return 0;
}

/* A Qwen-Image pipeline (QwenImagePipeline: its transformer, AutoencoderKLQwenImage, masked
 * prompt embeddings, true CFG with its renormalisation) through the cluster: `weft run` in
 * every layout, CFG parallelism among them, gives weft generate's image within one level
 * (tests/parity/test_dit holds generate to Diffusers'). */
static int case_qwen(void)
{
    char model[1200], ref[512];
    snprintf(model, sizeof(model), "%s/tests/data/qwenimage/pipeline", getenv("WEFT_SOURCE_ROOT"));
    snprintf(ref, sizeof(ref), "%s/qwen_ref.png", tmp);
    const char *const job[] = {"--model", model, "--prompt-embeds", "cat",
                               "--negative-prompt-embeds", "blurry", "--true-cfg-scale", "4",
                               "--height", "128", "--width", "96", "--steps", "3", "--seed", "9",
                               NULL};
    generate_ref(ref, job);
    static const char *const layouts[][6] = {
        {"--np", "1", NULL}, {"--tp", "2", NULL}, {"--tp", "3", NULL},
        /* the 7 text tokens split unevenly */
        {"--ulysses", "2", "--parallel.ulysses_anything=true", NULL},
        {"--ring", "2", "--parallel.ring_anything=true", NULL}, {"--cfg", "2", NULL},
        {"--cfg", "2", "--tp", "2", NULL}, {"--dp", "2", NULL},
        {"--device-map", "balanced", "--np", "2", NULL},
    };
    run_layouts("Qwen-Image", ref, job, layouts, sizeof(layouts) / sizeof(layouts[0]));
    return 0;
}

int main(int argc, char **argv)
{
    static const struct harness_case cases[] = {
        {"flux2", case_flux2},     {"qwen", case_qwen},
        {"layouts", case_layouts}, {"kill", case_kill},       {"secret", case_secret},
        {"devmap", case_devmap},   {"autoplan", case_autoplan}, {"true_cfg", case_true_cfg},   {"restart", case_restart}, {"rerun", case_rerun},
        {"requeue", case_requeue},
        {"concurrent", case_concurrent}, {"auto", case_auto}, {"stopped", case_stopped},
        {"auto_stream", case_auto_stream}, {"auto_backfill", case_auto_backfill},
        {"auto_drain", case_auto_drain}, {"auto_devmap", case_auto_devmap},
        {"auto_busy", case_auto_busy}, {"groups", case_groups},
        {"auto_mixed", case_auto_mixed},
        {"cancel", case_cancel},
        {"exact", case_exact},     {"refuse", case_refuse},   {"validate", case_validate},
        {"threads", case_threads}, {"device", case_device},   {"text", case_text},
    };
    return harness_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 280);
}
