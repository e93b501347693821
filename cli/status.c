/* weft status: a job, or the cluster and its queue; weft cancel: stop a job. */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "client/weft.h"
#include "common/log.h"
#include "common/num.h"

static void help(FILE *out)
{
    fprintf(out,
        "usage: weft status [JOB_ID] [--json] [--server ADDR] [--token TOKEN]\n"
        "       weft cancel JOB_ID [--server ADDR] [--token TOKEN]\n"
        "\n"
        "status: without JOB_ID, the cluster behind a `weft serve` (runner, workers, mesh,\n"
        "device map) and its jobs by state; with JOB_ID, the job's state, progress, timings\n"
        "and images. --json prints the server's JSON as is.\n"
        "cancel: a queued job is removed, a running one stops at its next step.\n"
        "Exit status: 0 when the server answered, 1 when it did not or the job is unknown.\n"
        "\n"
        "  --server ADDR   host:port or unix:/path (default [api] listen)\n"
        "  --token TOKEN   bearer token (default [api] token, or WEFT_API_TOKEN)\n");
}

struct status_opts {
    const char *server, *token, *id;
    bool json;
};

static int parse_args(struct weft_cli *cli, struct status_opts *o, const char *cmd)
{
    *o = (struct status_opts){.server = cli->conf.api.listen, .token = cli->conf.api.token};
    for (int i = 1; i < cli->argc; i++) {
        const char *v;
        char **argv = cli->argv;
        if (weft_cli_is_help(argv[i])) {
            help(stdout);
            return 1;
        }
        if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--server")))
            o->server = v;
        else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--token")))
            o->token = v;
        else if (strcmp(argv[i], "--json") == 0)
            o->json = true;
        else if (argv[i][0] != '-' && !o->id)
            o->id = argv[i];
        else {
            char name[64];
            snprintf(name, sizeof(name), "weft %s", cmd);
            weft_cli_unexpected(cmd, "", name, argv[i]);
            return -1;
        }
    }
    return 0;
}

static int show_raw(struct weft_client *c, const char *path)
{
    int code;
    char *body;
    if (weft_client_request(c, "GET", path, NULL, 0, &code, &body, NULL) != WEFT_OK) {
        WEFT_LOG_ERROR("status", "%s", weft_client_error(c));
        return 1;
    }
    fputs(body, stdout);
    weft_client_free(body);
    if (code != 200) {
        WEFT_LOG_ERROR("status", "GET %s: %d", path, code);
        return 1;
    }
    return 0;
}

static void show_job(const struct weft_job_status *st)
{
    printf("job %s: %s", st->id, weft_client_state_name(st->state));
    if (st->state == WEFT_JOB_QUEUED)
        printf(" (%d ahead)", st->queue_position);
    if (st->state == WEFT_JOB_RUNNING)
        printf(", step %d/%d", st->step, st->steps);
    printf(", %d/%d images, %.0f%%\n", st->images_done, st->images_total, st->fraction * 100);
    if (st->state == WEFT_JOB_FAILED)
        printf("error: %s\n", st->error);
    for (size_t i = 0; i < st->n_images; i++)
        printf("  image %d: prompt %d, %dx%d, /v1/jobs/%s/images/%d\n", st->images[i].index,
               st->images[i].prompt, st->images[i].width, st->images[i].height, st->id,
               st->images[i].index);
}

static void show_cluster(const cJSON *o, const cJSON *jobs)
{
    const cJSON *co = cJSON_GetObjectItemCaseSensitive(o, "coordinator");
    const cJSON *runner = cJSON_GetObjectItemCaseSensitive(o, "runner");
    const cJSON *ready = cJSON_GetObjectItemCaseSensitive(o, "ready");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(co, "model");
    printf("runner %s, %s, model %s\n", cJSON_IsString(runner) ? runner->valuestring : "?",
           cJSON_IsTrue(ready) ? "ready" : "not ready",
           cJSON_IsString(model) ? model->valuestring : "?");
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(o, "error");
    if (cJSON_IsString(err))
        printf("error: %s\n", err->valuestring);
    const cJSON *mesh = cJSON_GetObjectItemCaseSensitive(o, "mesh");
    if (mesh) {
        printf("mesh:");
        for (const cJSON *m = mesh->child; m; m = m->next)
            printf(" %s %g", m->string, m->valuedouble);
        printf("\n");
    }
    const cJSON *ws = cJSON_GetObjectItemCaseSensitive(o, "workers");
    for (const cJSON *w = ws ? ws->child : NULL; w; w = w->next) {
        const char *k[] = {"id", "host", "device", "state"};
        printf("  worker");
        for (int i = 0; i < 4; i++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(w, k[i]);
            printf(" %s", cJSON_IsString(v) ? v->valuestring : "?");
        }
        const cJSON *pid = cJSON_GetObjectItemCaseSensitive(w, "pid");
        const cJSON *rank = cJSON_GetObjectItemCaseSensitive(w, "rank");
        const cJSON *launcher = cJSON_GetObjectItemCaseSensitive(w, "launcher");
        if (cJSON_IsNumber(pid))
            printf(", pid %.0f", pid->valuedouble);
        if (cJSON_IsNumber(rank) && rank->valuedouble >= 0)
            printf(", rank %.0f", rank->valuedouble);
        if (cJSON_IsString(launcher) && launcher->valuestring[0] &&
            strcmp(launcher->valuestring, "none") != 0)
            printf(", started by %s", launcher->valuestring);
        printf("\n");
    }
    const cJSON *dm = cJSON_GetObjectItemCaseSensitive(o, "device_map");
    for (const cJSON *d = dm ? dm->child : NULL; d; d = d->next) {
        printf("  %s ->", d->string);
        if (cJSON_IsString(d))
            printf(" %s", d->valuestring);
        for (const cJSON *e = cJSON_IsArray(d) ? d->child : NULL; e; e = e->next)
            printf(" %s", cJSON_IsString(e) ? e->valuestring : "?");
        printf("\n");
    }
    int counts[5] = {0};
    static const char *const names[] = {"queued", "running", "done", "failed", "cancelled"};
    /* the coordinator counts every job; the list is one page of them (older servers) */
    const cJSON *by_state = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(o, "coordinator"), "jobs");
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(jobs, "jobs");
    for (int i = 0; i < 5 && by_state; i++) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(by_state, names[i]);
        counts[i] =
            cJSON_IsNumber(n) ? (int)weft_double_int_or(n->valuedouble, 0, INT32_MAX, 0) : 0;
    }
    for (const cJSON *j = list && !by_state ? list->child : NULL; j; j = j->next) {
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "state");
        for (int i = 0; i < 5 && cJSON_IsString(s); i++)
            counts[i] += strcmp(s->valuestring, names[i]) == 0;
    }
    printf("jobs:");
    for (int i = 0; i < 5; i++)
        printf(" %s %d%s", names[i], counts[i], i < 4 ? "," : "\n");
}

static int cluster(struct weft_client *c)
{
    char *text;
    int code;
    char *jobs_text = NULL;
    if (weft_client_cluster(c, &text) != WEFT_OK ||
        weft_client_request(c, "GET", "/v1/jobs", NULL, 0, &code, &jobs_text, NULL) !=
            WEFT_OK) {
        WEFT_LOG_ERROR("status", "%s", weft_client_error(c));
        return 1;
    }
    cJSON *o = cJSON_Parse(text), *jobs = code == 200 ? cJSON_Parse(jobs_text) : NULL;
    weft_client_free(text);
    weft_client_free(jobs_text);
    show_cluster(o, jobs);
    cJSON_Delete(o);
    cJSON_Delete(jobs);
    return 0;
}

static int run(struct weft_cli *cli, bool cancel)
{
    const char *cmd = cancel ? "cancel" : "status";
    struct status_opts o;
    int rc = parse_args(cli, &o, cmd);
    if (rc)
        return rc > 0 ? 0 : 2;
    if (cancel && !o.id) {
        WEFT_LOG_ERROR(cmd, "which job? (weft cancel JOB_ID)");
        return 2;
    }
    struct weft_client_opts co = {.address = o.server, .token = o.token};
    struct weft_client *c;
    if (weft_client_connect(&co, &c) != WEFT_OK)
        return 1;
    rc = 0;
    if (cancel) {
        if (weft_client_cancel(c, o.id) != WEFT_OK) {
            WEFT_LOG_ERROR(cmd, "%s", weft_client_error(c));
            rc = 1;
        } else {
            printf("job %s: cancel requested\n", o.id);
        }
    } else if (o.json) {
        char path[96] = "/v1/cluster";
        if (o.id)
            snprintf(path, sizeof(path), "/v1/jobs/%.40s", o.id);
        rc = show_raw(c, path);
    } else if (o.id) {
        struct weft_job_status st = {0};
        if (weft_client_status(c, o.id, &st) != WEFT_OK) {
            WEFT_LOG_ERROR(cmd, "%s", weft_client_error(c));
            rc = 1;
        } else {
            show_job(&st);
        }
        weft_job_status_cleanup(&st);
    } else {
        rc = cluster(c);
    }
    weft_client_close(c);
    return rc;
}

int weft_cmd_status(struct weft_cli *cli)
{
    return run(cli, false);
}

int weft_cmd_cancel(struct weft_cli *cli)
{
    return run(cli, true);
}
