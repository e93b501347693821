/* weft worker: one process per device; joins the coordinator and does what it says. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "common/log.h"
#include "conf/launch.h"
#include "worker/agent.h"

extern char **environ;

static void help(FILE *out)
{
    fprintf(out,
        "usage: weft worker [--coordinator HOST:PORT] [--device DEV]\n"
        "\n"
        "Join a coordinator (`weft serve --runner cluster`) as one device: prove the cluster\n"
        "secret ([cluster] secret or secret_file), report this machine's inventory, then load\n"
        "and run what the coordinator assigns until it says to stop (exit 0). A lost\n"
        "coordinator (died, restarting) is joined again for up to [cluster] join_timeout_ms,\n"
        "then the worker exits 1.\n"
        "\n"
        "The coordinator is, first found: --coordinator; torchrun's MASTER_ADDR and\n"
        "MASTER_PORT; the first host of Slurm's SLURM_JOB_NODELIST with [cluster] listen's\n"
        "port; [cluster] listen. Launchers (Slurm, torchrun, mpirun) are recognised from their\n"
        "environment and reported to the coordinator. CPU kernel threads: [kernels] threads.\n"
        "\n"
        "--device DEV (default [worker] device, cpu): cpu, cuda:N (GPU N), or auto: the GPU of\n"
        "this process's local rank (LOCAL_RANK, SLURM_LOCALID or OMPI_COMM_WORLD_LOCAL_RANK,\n"
        "modulo the GPUs present) when there are GPUs, else the CPU; cpu-devmem is the CPU with\n"
        "device-like memory (tests). A GPU that is not there is an error (exit 1). The\n"
        "inventory reports the GPUs (name, memory, SMs, peers) and the device's memory.\n");
}

int weft_cmd_worker(struct weft_cli *cli)
{
    const char *coordinator = NULL, *device = cli->conf.worker.device;
    for (int i = 1; i < cli->argc; i++) {
        const char *v;
        if (weft_cli_is_help(cli->argv[i])) {
            help(stdout);
            return 0;
        }
        if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--coordinator"))) {
            coordinator = v;
        } else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--device"))) {
            device = v;
        } else {
            weft_cli_unexpected("worker", "", "weft worker", cli->argv[i]);
            return 2;
        }
    }
    struct weft_agent_opts o = {.conf = &cli->conf};
    char secret[WEFT_CONF_STR], where[300];
    if (weft_launch_from_env(environ, &o.launch) != WEFT_OK ||
        weft_cluster_secret(&cli->conf.cluster, secret, sizeof(secret), NULL) != WEFT_OK)
        return 2;
    char why[300];
    if (weft_device_parse(device, o.launch.local_rank, &o.device, why, sizeof(why)) != WEFT_OK) {
        WEFT_LOG_ERROR("worker", "--device: %s", why);
        return 2;
    }
    if (!coordinator) {
        const char *listen = cli->conf.cluster.listen, *colon = strrchr(listen, ':');
        int port = o.launch.coordinator_port ? o.launch.coordinator_port
                                             : (colon ? atoi(colon + 1) : 7450);
        if (o.launch.coordinator_host[0])
            snprintf(where, sizeof(where), "%s:%d", o.launch.coordinator_host, port);
        else
            snprintf(where, sizeof(where), "%s", listen);
        coordinator = where;
    }
    o.coordinator = coordinator;
    o.secret = secret;
    weft_log_set_style(WEFT_LOG_STYLE_FULL);
    if (o.launch.source[0])
        WEFT_LOG_INFO("worker", "started by %s: rank %d of %d, local rank %d", o.launch.source,
                      o.launch.rank, o.launch.size, o.launch.local_rank);
    return weft_agent_main(&o);
}
