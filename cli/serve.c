/* weft serve: the coordinator with its job API, until SIGINT/SIGTERM. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "common/log.h"
#include "conf/launch.h"
#include "coordinator/cluster_runner.h"
#include "coordinator/coordinator.h"
#include "worker/local_runner.h"

static void help(FILE *out)
{
    fprintf(out,
        "usage: weft serve [--model DIR] [--listen ADDR] [--runner local|cluster]\n"
        "                  [--port-file FILE] [--worker-port-file FILE]\n"
        "\n"
        "Serve the job API (HTTP/1.1 + JSON) until SIGINT or SIGTERM. Jobs are journaled before\n"
        "they are accepted, so a restart loses none; on a signal the server stops accepting,\n"
        "lets running jobs finish for [api] shutdown_grace_ms and exits 0 (unfinished jobs run\n"
        "again after a restart). Limits, token, journal and output folders: the [api] section\n"
        "(`weft --dump-config --defaults`).\n"
        "\n"
        "  --model DIR        Diffusers pipeline folder served; default [model] path, else the\n"
        "                     embedded models/flux-tiny (trained to draw simple shapes)\n"
        "  --listen ADDR      host:port or unix:/path (default [api] listen, 127.0.0.1:8642);\n"
        "                     port 0 picks a free one. Only loopback unless set explicitly.\n"
        "  --runner NAME      what runs the jobs: local (this process, this machine's CPU) or\n"
        "                     cluster (`weft worker` processes join on [cluster] listen and\n"
        "                     run the [parallel] mesh: tp, ulysses, ring, dp, or\n"
        "                     [parallel] groups of unequal replicas side by side)\n"
        "  --worker-port-file FILE  (cluster) write the worker port actually bound to FILE\n"
        "  --port-file FILE   write the address actually bound to FILE once listening\n"
        "\n"
        "Endpoints (docs/openapi.json, also served at /openapi.json):\n"
        "  /                         the web page: prompt, progress, gallery, cluster\n"
        "  POST /v1/images/generations   the OpenAI images API (waits for the job)\n"
        "  GET  /v1/models           the model served, as OpenAI lists models\n"
        "  POST /v1/jobs, GET /v1/jobs[?limit&after&state&order], GET|DELETE /v1/jobs/ID,\n"
        "  GET  /v1/jobs/ID/events   progress pushed (Server-Sent Events)\n"
        "  GET  /v1/jobs/ID/images/I[?format=png|jpeg|webp]\n"
        "  GET  /v1/cluster, /metrics (Prometheus), /healthz (liveness), /readyz (readiness)\n"
        "Journal and images go under the state folder ([api] state_dir: $STATE_DIRECTORY,\n"
        "$XDG_STATE_HOME/weft or /var/lib/weft), never the current folder.\n");
}

/* The runner behind the API: "local" runs jobs in this process with the worker's pipeline,
 * "cluster" on `weft worker` processes over UCX. */
static weft_status_t runner_create(const char *name, const struct weft_cli *cli,
                                   const char *model, struct weft_coord *coord,
                                   const char *worker_port_file, struct weft_runner **runner_p,
                                   struct weft_error *err)
{
    if (strcmp(name, "local") == 0) {
        struct weft_local_runner_opts o = {.model_dir = model,
                                           .threads = (int)cli->conf.kernels.threads,
                                           .compute = cli->conf.model.dtype,
                                           .prompt_cache = cli->conf.model.prompt_cache};
        char why[300];
        if (weft_device_parse(cli->conf.worker.device, -1, &o.device, why, sizeof(why)) !=
            WEFT_OK)
            return weft_error_refuse(err, WEFT_ERR_CONFIG, "[worker] device: %s", why);
        weft_status_t st = weft_local_runner_create(&o, weft_coord_sink(coord), runner_p);
        return st == WEFT_OK ? st : weft_error_refuse(err, st, "cannot start the local runner");
    }
    if (strcmp(name, "cluster") == 0) {
        char secret[WEFT_CONF_STR];
        weft_status_t st = weft_cluster_secret(&cli->conf.cluster, secret, sizeof(secret), err);
        if (st != WEFT_OK)
            return st;
        struct weft_cluster_runner_opts o = {.conf = &cli->conf, .model = weft_coord_model(coord),
                                             .model_dir = model, .secret = secret,
                                             .port_file = worker_port_file};
        return weft_cluster_runner_create(&o, weft_coord_loop(coord), weft_coord_sink(coord),
                                          runner_p, err);
    }
    return weft_error_refuse(err, WEFT_ERR_CONFIG,
                             "--runner %s: unknown runner (available: local, cluster)", name);
}

int weft_cmd_serve(struct weft_cli *cli)
{
    const char *model = NULL, *listen = NULL, *runner_name = "local", *port_file = NULL;
    const char *worker_port_file = NULL;
    for (int i = 1; i < cli->argc; i++) {
        const char *v;
        char **argv = cli->argv;
        if (weft_cli_is_help(argv[i])) {
            help(stdout);
            return 0;
        }
        if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--model")))
            model = v;
        else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--listen")))
            listen = v;
        else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--runner")))
            runner_name = v;
        else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--port-file")))
            port_file = v;
        else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--worker-port-file")))
            worker_port_file = v;
        else {
            weft_cli_unexpected("serve", "", "weft serve", argv[i]);
            return 2;
        }
    }
    struct weft_conf_api api = cli->conf.api;
    if (listen) {
        if (strlen(listen) >= sizeof(api.listen)) {
            WEFT_LOG_ERROR("serve", "--listen: address too long");
            return 2;
        }
        snprintf(api.listen, sizeof(api.listen), "%s", listen);
    }
    if (!model)
        model = cli->conf.model.path[0] ? cli->conf.model.path : WEFT_DEFAULT_MODEL;
    weft_log_set_style(WEFT_LOG_STYLE_FULL); /* a server's log: times and pids */

    struct weft_coord_opts co = {.api = &api, .model_dir = model};
    struct weft_coord *coord = NULL;
    struct weft_runner *runner = NULL;
    weft_status_t st;
    struct weft_error err = WEFT_ERROR_INIT;
    if ((st = weft_coord_create(&co, &coord, &err)) != WEFT_OK ||
        (st = runner_create(runner_name, cli, model, coord, worker_port_file, &runner, &err)) !=
            WEFT_OK) {
        weft_error_log(&err, "serve");
        goto out;
    }
    if ((st = weft_coord_listen(coord, port_file)) != WEFT_OK) {
        weft_runner_destroy(runner);
        goto out;
    }
    WEFT_LOG_INFO("serve", "serving %s with the %s runner on %s", model, runner_name,
                  weft_coord_address(coord));
    st = weft_coord_run_take(coord, runner);
out:
    weft_coord_destroy(coord);
    return st == WEFT_OK ? 0 : 1;
}
