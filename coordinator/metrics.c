/* GET /metrics: Prometheus text exposition format 0.0.4. The coordinator's own families, then
 * whatever the runner measures (collectives per group, workers). */
#include <dirent.h>
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

#include "coordinator/internal.h"

static void histogram(struct weft_sbuf *b, const char *name, const char *help,
                      const uint64_t *buckets, uint64_t count, double sum)
{
    weft_sbuf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < STEP_BUCKETS; i++) {
        cum += buckets[i];
        weft_sbuf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, weft_coord_buckets[i],
                         (unsigned long long)cum);
    }
    weft_sbuf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", name,
                     (unsigned long long)count, name, sum, name, (unsigned long long)count);
}

static void counter(struct weft_sbuf *b, const char *name, const char *help, uint64_t v)
{
    weft_sbuf_printf(b, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
                     (unsigned long long)v);
}

static void gauge(struct weft_sbuf *b, const char *name, const char *help, double v)
{
    weft_sbuf_printf(b, "# HELP %s %s\n# TYPE %s gauge\n%s %.17g\n", name, help, name, name, v);
}

/* The process collector's standard names (as Prometheus client libraries export them). */
static void process_metrics(struct weft_coord *c, struct weft_sbuf *b)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        double cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
                     (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
        weft_sbuf_printf(b, "# HELP process_cpu_seconds_total User and system CPU time.\n"
                            "# TYPE process_cpu_seconds_total counter\n"
                            "process_cpu_seconds_total %.6f\n", cpu);
    }
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long size = 0, resident = 0;
    if (f) {
        if (fscanf(f, "%llu %llu", &size, &resident) == 2) {
            double page = (double)sysconf(_SC_PAGESIZE);
            gauge(b, "process_resident_memory_bytes", "Resident memory.", (double)resident * page);
            gauge(b, "process_virtual_memory_bytes", "Virtual memory.", (double)size * page);
        }
        (void)fclose(f);
    }
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        long n = 0;
        for (struct dirent *e; (e = readdir(d));)
            n += e->d_name[0] != '.';
        closedir(d);
        gauge(b, "process_open_fds", "Open file descriptors.", (double)(n - 1)); /* not d's own */
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        gauge(b, "process_max_fds", "Most open file descriptors.", (double)rl.rlim_cur);
    gauge(b, "process_start_time_seconds", "When the process started serving (unix seconds).",
          c->started_at);
    weft_sbuf_printf(b, "# HELP weft_build_info The weft build serving: always 1.\n"
                        "# TYPE weft_build_info gauge\n"
                        "weft_build_info{version=\"%s\",runner=\"%s\"} 1\n",
                     WEFT_VERSION, c->runner ? c->runner->ops->name : "none");
    int streams = 0, waits = 0;
    for (const struct weft_watch *w = c->watches; w; w = w->next)
        if (w->kind == WEFT_WATCH_EVENTS)
            streams++;
        else
            waits++;
    gauge(b, "weft_event_streams", "Open event streams (GET /v1/jobs/{id}/events).", streams);
    gauge(b, "weft_openai_waiting", "OpenAI image requests waiting for their job.", waits);
}

void weft_coord_metrics_write(struct weft_coord *c, struct weft_sbuf *b)
{
    process_metrics(c, b);
    uint64_t by_state[JOB_STATE_COUNT] = {0};
    for (size_t i = 0; i < c->n_jobs; i++)
        by_state[c->jobs[i]->state]++;
    weft_sbuf_puts(b, "# HELP weft_jobs Jobs in the table by state.\n# TYPE weft_jobs gauge\n");
    for (int s = 0; s < JOB_STATE_COUNT; s++)
        weft_sbuf_printf(b, "weft_jobs{state=\"%s\"} %llu\n",
                         weft_coord_state_name((enum job_state)s), (unsigned long long)by_state[s]);
    weft_sbuf_printf(b, "# HELP weft_queue_length Jobs waiting to run.\n"
                        "# TYPE weft_queue_length gauge\nweft_queue_length %zu\n",
                     c->queue.n);
    weft_sbuf_printf(b, "# HELP weft_runner_capacity Jobs the runner can run at once.\n"
                        "# TYPE weft_runner_capacity gauge\nweft_runner_capacity %d\n",
                     c->runner ? c->runner->ops->capacity(c->runner) : 0);
    counter(b, "weft_jobs_submitted_total", "Jobs accepted (202).", c->m.submitted);
    counter(b, "weft_jobs_refused_total", "Submissions refused (invalid, queue full).",
            c->m.refused);
    weft_sbuf_puts(b, "# HELP weft_jobs_finished_total Jobs that ended, by outcome.\n"
                      "# TYPE weft_jobs_finished_total counter\n");
    for (int s = JOB_DONE; s < JOB_STATE_COUNT; s++)
        weft_sbuf_printf(b, "weft_jobs_finished_total{state=\"%s\"} %llu\n",
                         weft_coord_state_name((enum job_state)s),
                         (unsigned long long)c->m.finished[s]);
    histogram(b, "weft_step_seconds", "Time of one denoising step (all devices of a replica).",
              c->m.step_bucket, c->m.step_count, c->m.step_sum);
    histogram(b, "weft_job_run_seconds", "Time from start to done of completed jobs.",
              c->m.job_bucket, c->m.job_count, c->m.job_sum);
    weft_sbuf_puts(b, "# HELP weft_jobs_done_by_layout_total Jobs completed, by the layout they "
                      "ran on.\n# TYPE weft_jobs_done_by_layout_total counter\n");
    for (int k = 0; k <= LAYOUTS_MAX; k++)
        if (c->m.layouts[k].done)
            weft_sbuf_printf(b, "weft_jobs_done_by_layout_total{layout=\"%s\"} %llu\n",
                             c->m.layouts[k].name, (unsigned long long)c->m.layouts[k].done);
    weft_sbuf_puts(b, "# HELP weft_job_run_seconds_by_layout_total Run seconds of completed "
                      "jobs, by layout.\n# TYPE weft_job_run_seconds_by_layout_total counter\n");
    for (int k = 0; k <= LAYOUTS_MAX; k++)
        if (c->m.layouts[k].done)
            weft_sbuf_printf(b, "weft_job_run_seconds_by_layout_total{layout=\"%s\"} %.6f\n",
                             c->m.layouts[k].name, c->m.layouts[k].seconds);
    weft_sbuf_puts(b, "# HELP weft_http_responses_total HTTP responses by status code.\n"
                      "# TYPE weft_http_responses_total counter\n");
    for (int code = 100; code < 600; code++)
        if (c->m.http[code])
            weft_sbuf_printf(b, "weft_http_responses_total{code=\"%d\"} %llu\n", code,
                             (unsigned long long)c->m.http[code]);
    weft_sbuf_printf(b, "# HELP weft_http_connections Open client connections.\n"
                        "# TYPE weft_http_connections gauge\nweft_http_connections %d\n",
                     c->n_conns);
    counter(b, "weft_http_connections_total", "Client connections accepted.",
            c->m.connections_total);
    counter(b, "weft_http_connections_refused_total",
            "Connections answered 503 ([api] max_connections).", c->m.connections_refused);
    counter(b, "weft_http_connections_evicted_total",
            "Connections waiting for a request closed to make room for a new one "
            "([api] max_connections).", c->m.connections_evicted);
    counter(b, "weft_http_timeouts_total", "Connections closed for slowness (408 or stalled).",
            c->m.timeouts);
    if (c->journal)
        weft_sbuf_printf(b, "# HELP weft_journal_bytes Size of the job journal.\n"
                            "# TYPE weft_journal_bytes gauge\nweft_journal_bytes %llu\n",
                         (unsigned long long)weft_journal_size(c->journal));
    if (c->runner && c->runner->ops->metrics)
        c->runner->ops->metrics(c->runner, b);
}
