/* weft plan --auto: the strategy for a model, devices and a job (model/autoplan.h). */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "client/weft.h"
#include "common/log.h"
#include "control/boot.h"
#include "model/autoplan.h"
#include "model/model.h"

void weft_plan_auto_help(FILE *out)
{
    fprintf(out,
        "       weft plan [--model DIR] --auto (--devices N --device-memory SIZE | --server ADDR)\n"
        "                 [--interconnect nvlink|pcie|none] [--nodes K] [--host-memory SIZE]\n"
        "                 [--height H --width W] [--steps N] [--prompts N] [--text-tokens T]\n"
        "                 [--cfg] [--goal latency|throughput] [--device-tflops F]\n"
        "                 [--link-bandwidth SIZE] [--link-latency-us U] [--json]\n");
}

void weft_plan_auto_help_text(FILE *out)
{
    fprintf(out,
        "With --auto: choose the strategy for N devices of SIZE each (spread over K nodes,\n"
        "linked by --interconnect inside a node; default nvlink, 1 node) and the job\n"
        "(default 1024 x 1024, 28 steps, 1 prompt, 512 text tokens, the goal [parallel]\n"
        "goal's, latency unless set): the degrees dp x cfg x ring x ulysses x tp or a\n"
        "device_map, what the fullest device holds (weights, activations, workspace: the\n"
        "workers' own formulas; the VAE's convolution workspace and the text encoders'\n"
        "activations are not counted), what a rank sends per denoising step, and the\n"
        "reasons, one line each. The rules: the model fits one device -> data\n"
        "parallelism (or, for latency on a large image, context parallelism over the\n"
        "spare devices); activations are the problem -> context parallelism (Ulysses\n"
        "inside a node, ring across); one component's weights do not fit -> tensor\n"
        "parallelism over NVLink, device_map over PCIe or no link;\n"
        "the components fit one by one, not together -> device_map; weights and\n"
        "activations both -> tensor x context parallelism.\n"
        "[plan] devices, device_memory, interconnect, nodes and host_memory give the\n"
        "defaults of the options. --server ADDR reads the devices from a running cluster instead (GET /v1/cluster on\n"
        "its API, [api] token): one device per worker, the nodes its distinct hosts, each\n"
        "device's memory the smallest a worker reported (a CPU worker: its host's memory\n"
        "shared by the workers there); CPU workers of one host talk through memory\n"
        "(counted as nvlink), GPUs as pcie unless --interconnect says otherwise.\n"
        "--device-tflops F (a device's dense rate, [plan] device_gflops) adds the predicted\n"
        "time of one denoising step: the transformer's operations at that rate, each\n"
        "collective's latency plus its bytes at --link-bandwidth per second (default the\n"
        "interconnect's nominal: nvlink 300GB, pcie 24GB, none 10GB; 12.5GB between nodes)\n"
        "and --link-latency-us (nvlink 10, pcie 20, none 30; 30 between nodes), ranks\n"
        "every layout of the chosen replica's devices by it, and splits the spare devices\n"
        "of a latency job by it (the degree whose step is the shortest) instead of the\n"
        "tokens-per-rank rule; the other rules choose as before.\n");
}

/* 12.34 GB or 5.6 MB (a small model's sizes read too) */
static const char *size(uint64_t b, char out[24])
{
    if (b >= 1000000000ull)
        snprintf(out, 24, "%.2f GB", (double)b / 1e9);
    else
        snprintf(out, 24, "%.2f MB", (double)b / 1e6);
    return out;
}

static int parse_size(const char *opt, const char *v, uint64_t *out)
{
    if (weft_conf_parse_size(v, out) == WEFT_OK && *out)
        return 0;
    WEFT_LOG_ERROR("plan", "%s '%s': expected a size such as 80GB or 24GiB", opt, v);
    return 2;
}

/* A worker's host: its boot id when it reported one (two containers on one machine are one
 * host), else its host name. */
static const char *host_of(const cJSON *w)
{
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(w, "host_id");
    if (!cJSON_IsString(h))
        h = cJSON_GetObjectItemCaseSensitive(w, "host");
    return cJSON_IsString(h) ? h->valuestring : "?";
}

static int host_index(char (*hosts)[128], int n_hosts, const char *name)
{
    int k = 0;
    while (k < n_hosts && strcmp(hosts[k], name) != 0)
        k++;
    return k;
}

/* The devices of a running cluster, from its workers' inventories (GET /v1/cluster). */
static int devices_of_cluster(const char *server, const char *token, bool link_given,
                              struct weft_autoplan_devices *dev)
{
    struct weft_client_opts co = {.address = server, .token = token};
    struct weft_client *c;
    if (weft_client_connect(&co, &c) != WEFT_OK) {
        WEFT_LOG_ERROR("plan", "--server %s: cannot connect", server);
        return 1;
    }
    char *text = NULL;
    const weft_status_t st = weft_client_cluster(c, &text);
    if (st != WEFT_OK) {
        WEFT_LOG_ERROR("plan", "--server %s: %s", server, weft_client_error(c));
        weft_client_close(c);
        return 1;
    }
    cJSON *j = cJSON_Parse(text);
    weft_client_free(text);
    weft_client_close(c);
    const cJSON *ws = cJSON_GetObjectItemCaseSensitive(j, "workers");
    char hosts[64][128];
    int n_hosts = 0, per_host[64] = {0}, n = 0, gpus = 0;
    const cJSON *w;
    cJSON_ArrayForEach(w, ws) /* hosts first: a CPU worker shares its host's memory */
    {
        const char *name = host_of(w);
        const int k = host_index(hosts, n_hosts, name);
        if (k == n_hosts && n_hosts < 64)
            snprintf(hosts[n_hosts++], sizeof(hosts[0]), "%s", name);
        if (k < 64)
            per_host[k]++;
    }
    uint64_t least = 0;
    cJSON_ArrayForEach(w, ws)
    {
        const int k = host_index(hosts, n_hosts, host_of(w));
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(w, "device");
        const bool gpu = cJSON_IsString(d) && strncmp(d->valuestring, "cuda", 4) == 0;
        uint64_t b;
        bool shared;
        if (!weft_boot_inventory_memory(w, &b, &shared))
            continue;
        if (shared && k < n_hosts && per_host[k] > 1) /* the host's RAM, its workers' together */
            b /= (uint64_t)per_host[k];
        least = !least || b < least ? b : least;
        gpus += gpu;
        n++;
    }
    cJSON_Delete(j);
    if (!n) {
        WEFT_LOG_ERROR("plan", "--server %s: no worker has joined (or none reported its "
                               "memory)", server);
        return 1;
    }
    if (n % n_hosts) {
        WEFT_LOG_ERROR("plan", "--server %s: %d workers over %d hosts, not the same number on "
                               "each", server, n, n_hosts);
        return 1;
    }
    dev->n = n, dev->nodes = n_hosts, dev->memory = least;
    if (!link_given)
        dev->link = gpus ? WEFT_LINK_PCIE : WEFT_LINK_NVLINK;
    WEFT_LOG_INFO("plan", "the cluster at %s: %d worker(s) on %d host(s), %s, %.2f GB each%s",
                  server, n, n_hosts, gpus ? "GPUs" : "CPU devices", (double)least / 1e9,
                  gpus ? "" : " (a host's memory shared by its workers)");
    return 0;
}

static double step_bytes(const struct weft_autoplan *p)
{
    return p->tp_bytes + p->ulysses_bytes + p->ring_bytes + p->stage_bytes + p->cfg_bytes;
}

static cJSON *time_json(const struct weft_autoplan_time *t)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "total", t->total);
    cJSON_AddNumberToObject(o, "compute", t->compute);
    cJSON_AddNumberToObject(o, "tp", t->tp);
    cJSON_AddNumberToObject(o, "ulysses", t->ulysses);
    cJSON_AddNumberToObject(o, "ring", t->ring);
    cJSON_AddNumberToObject(o, "device_map", t->stage);
    cJSON_AddNumberToObject(o, "cfg", t->cfg);
    return o;
}

/* The name a job's record and /metrics give the layout (weft_layout_name), for one replica. */
static const char *layout_name(const struct weft_autoplan_candidate *c, char *buf, size_t len)
{
    const struct weft_layout l = {
        .mesh = {.dp = 1, .ring = c->ring, .ulysses = c->ulysses, .tp = c->tp, .pp = c->pp,
                 .cfg = c->cfg},
        .device_map = c->device_map};
    weft_layout_name(&l, buf, len);
    return buf;
}

#define RANKED 12

static void print_json(const char *dir, const struct weft_autoplan *p,
                       const struct weft_autoplan_devices *dev,
                       const struct weft_autoplan_candidate *ranked, int n_ranked)
{
    const struct weft_autoplan_memory *pk = &p->peak;
    const double step = step_bytes(p);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "weft_plan", 1);
    cJSON_AddStringToObject(o, "model", dir);
    cJSON *d = cJSON_AddObjectToObject(o, "degrees");
    cJSON_AddNumberToObject(d, "dp", p->dp);
    cJSON_AddNumberToObject(d, "cfg", p->cfg);
    cJSON_AddNumberToObject(d, "ring", p->ring);
    cJSON_AddNumberToObject(d, "ulysses", p->ulysses);
    cJSON_AddNumberToObject(d, "tp", p->tp);
    cJSON_AddBoolToObject(o, "ulysses_anything", p->ulysses_anything);
    cJSON_AddBoolToObject(o, "ring_anything", p->ring_anything);
    if (p->device_map) {
        cJSON_AddStringToObject(o, "device_map_strategy", "balanced");
        cJSON_AddNumberToObject(o, "devices_per_replica", p->pp);
        cJSON_AddItemToObject(o, "device_map", weft_devmap_json(&p->map, NULL));
    }
    cJSON_AddNumberToObject(o, "idle_devices", p->idle);
    cJSON *mem = cJSON_AddObjectToObject(o, "memory_per_device");
    cJSON_AddNumberToObject(mem, "device", p->peak_device);
    cJSON_AddNumberToObject(mem, "weights", (double)pk->weights);
    cJSON_AddNumberToObject(mem, "activations", (double)pk->activations);
    cJSON_AddNumberToObject(mem, "workspace", (double)pk->workspace);
    cJSON_AddNumberToObject(mem, "total",
                            (double)(pk->weights + pk->activations + pk->workspace));
    cJSON_AddNumberToObject(mem, "device_memory", (double)dev->memory);
    cJSON *c = cJSON_AddObjectToObject(o, "communication_per_step");
    cJSON_AddNumberToObject(c, "tp_allreduce_bytes", p->tp_bytes);
    cJSON_AddNumberToObject(c, "tp_allreduces", p->tp_allreduces);
    cJSON_AddNumberToObject(c, "ulysses_alltoall_bytes", p->ulysses_bytes);
    cJSON_AddNumberToObject(c, "ring_bytes", p->ring_bytes);
    cJSON_AddNumberToObject(c, "device_map_bytes", p->stage_bytes);
    cJSON_AddNumberToObject(c, "cfg_bytes", p->cfg_bytes);
    cJSON_AddNumberToObject(c, "total_bytes", step);
    if (dev->flops > 0) {
        cJSON_AddItemToObject(o, "step_time", time_json(&p->time));
        cJSON *rk = cJSON_AddArrayToObject(o, "ranked");
        for (int i = 0; i < n_ranked; i++) {
            char name[64];
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "layout", layout_name(&ranked[i], name, sizeof(name)));
            cJSON_AddNumberToObject(e, "cfg", ranked[i].cfg);
            cJSON_AddNumberToObject(e, "ring", ranked[i].ring);
            cJSON_AddNumberToObject(e, "ulysses", ranked[i].ulysses);
            cJSON_AddNumberToObject(e, "tp", ranked[i].tp);
            cJSON_AddBoolToObject(e, "device_map", ranked[i].device_map);
            cJSON_AddNumberToObject(e, "memory", (double)(ranked[i].peak.weights +
                                                          ranked[i].peak.activations +
                                                          ranked[i].peak.workspace));
            cJSON_AddNumberToObject(e, "bytes_per_step", ranked[i].bytes);
            cJSON_AddItemToObject(e, "step_time", time_json(&ranked[i].time));
            cJSON_AddItemToArray(rk, e);
        }
    }
    cJSON *r = cJSON_AddArrayToObject(o, "reasons");
    for (int i = 0; i < p->n_reasons; i++)
        cJSON_AddItemToArray(r, cJSON_CreateString(p->reasons[i]));
    char *text = cJSON_Print(o);
    if (text)
        printf("%s\n", text);
    cJSON_free(text);
    cJSON_Delete(o);
}

static void print_time(const char *what, const struct weft_autoplan_time *t)
{
    printf("%s %.2f ms (compute %.2f, tp %.2f, ulysses %.2f, ring %.2f, device_map %.2f, cfg "
           "%.2f)\n", what, t->total * 1e3, t->compute * 1e3, t->tp * 1e3, t->ulysses * 1e3,
           t->ring * 1e3, t->stage * 1e3, t->cfg * 1e3);
}

static void print_text(const struct weft_autoplan *p, const struct weft_autoplan_devices *dev,
                       const struct weft_autoplan_candidate *ranked, int n_ranked)
{
    const struct weft_autoplan_memory *pk = &p->peak;
    const double step = step_bytes(p);
    if (p->device_map)
        printf("plan: dp %d x device_map balanced over %d devices", p->dp, p->pp);
    else
        printf("plan: dp %d x cfg %d x ring %d x ulysses %d x tp %d%s%s", p->dp, p->cfg,
               p->ring, p->ulysses, p->tp, p->ulysses_anything ? " (ulysses_anything)" : "",
               p->ring_anything ? " (ring_anything)" : "");
    printf("%s\n", p->idle ? " (some devices idle)" : "");
    char t[4][24];
    printf("memory on device %d: %s of %s (weights %s, activations %s, workspace %s)\n",
           p->peak_device, size(pk->weights + pk->activations + pk->workspace, t[0]),
           size(dev->memory, t[1]), size(pk->weights, t[2]), size(pk->activations, t[3]),
           size(pk->workspace, (char[24]){0}));
    printf("sent per step by a rank: %s (tp all-reduce %s in %d calls, ulysses %s, ring %s, "
           "device_map %s, cfg %s)\n", size((uint64_t)step, t[0]),
           size((uint64_t)p->tp_bytes, t[1]), p->tp_allreduces,
           size((uint64_t)p->ulysses_bytes, t[2]), size((uint64_t)p->ring_bytes, t[3]),
           size((uint64_t)p->stage_bytes, (char[24]){0}), size((uint64_t)p->cfg_bytes,
                                                                (char[24]){0}));
    if (dev->flops > 0)
        print_time("predicted step time:", &p->time);
    for (int i = 0; i < p->n_reasons; i++)
        printf("  - %s\n", p->reasons[i]);
    if (n_ranked > 1) {
        printf("the layouts of one replica's %d device(s), fastest predicted first:\n",
               p->device_map ? p->pp : p->cfg * p->ring * p->ulysses * p->tp);
        for (int i = 0; i < n_ranked; i++) {
            char name[64], what[96], mem[24];
            snprintf(what, sizeof(what), "  %-42s %10s", layout_name(&ranked[i], name,
                     sizeof(name)), size(ranked[i].peak.weights + ranked[i].peak.activations +
                                         ranked[i].peak.workspace, mem));
            print_time(what, &ranked[i].time);
        }
    }
}

int weft_cmd_plan_auto(struct weft_cli *cli, const char *default_dir)
{
    const char *dir = default_dir, *v;
    const struct weft_conf_plan *cp = &cli->conf.plan; /* [plan]: the defaults of the options */
    struct weft_autoplan_devices dev = {.n = 0, .nodes = 1, .memory = cp->device_memory,
                                        .host_memory = cp->host_memory,
                                        .link = (enum weft_interconnect)cp->interconnect,
                                        .flops = (double)cp->device_gflops * 1e9,
                                        .link_bps = (double)cp->link_bandwidth,
                                        .link_latency = (double)cp->link_latency_us * 1e-6};
    struct weft_autoplan_job job = {.height = 1024, .width = 1024, .steps = 28, .prompts = 1,
                                    .text_tokens = 512,
                                    .goal = (enum weft_goal)cli->conf.parallel.goal};
    long long n = cp->devices, nodes = cp->nodes, n_opt = 0;
    int json = 0;
    const char *server = NULL, *token = cli->conf.api.token;
    bool link_given = false;
    for (int i = 1; i < cli->argc; i++) {
        char **argv = cli->argv;
        const struct {
            const char *name;
            long long lo, hi;
            void *field;
            bool is64;
        } ints[] = {
            {"--devices", 1, 16384, &n_opt, false},       {"--nodes", 1, 16384, &nodes, false},
            {"--height", 16, 16384, &job.height, true}, {"--width", 16, 16384, &job.width, true},
            {"--steps", 1, 10000, &job.steps, true},  {"--prompts", 1, 1000000, &job.prompts, true},
            {"--text-tokens", 1, 4096, &job.text_tokens, true},
        };
        bool hit = false;
        for (size_t k = 0; k < sizeof(ints) / sizeof(ints[0]) && !hit; k++) {
            if ((v = weft_cli_opt_value(cli->argc, argv, &i, ints[k].name))) {
                long long x;
                if (weft_cli_parse_int(ints[k].name, v, ints[k].lo, ints[k].hi, &x) != 0)
                    return 2;
                if (ints[k].is64)
                    *(int64_t *)ints[k].field = x;
                else
                    *(long long *)ints[k].field = x;
                hit = true;
            }
        }
        if (hit || strcmp(argv[i], "--auto") == 0)
            continue;
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--cfg") == 0) {
            job.cfg = true;
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--model"))) {
            dir = v;
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--device-memory"))) {
            if (parse_size("--device-memory", v, &dev.memory) != 0)
                return 2;
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--host-memory"))) {
            if (parse_size("--host-memory", v, &dev.host_memory) != 0)
                return 2;
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--device-tflops"))) {
            char *end;
            const double f = strtod(v, &end);
            if (end == v || *end || !(f > 0) || f > 1e6) {
                WEFT_LOG_ERROR("plan", "--device-tflops '%s': expected a positive number of "
                                       "TFLOP/s (e.g. 989 or 0.05)", v);
                return 2;
            }
            dev.flops = f * 1e12;
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--link-bandwidth"))) {
            uint64_t b;
            if (parse_size("--link-bandwidth", v, &b) != 0)
                return 2;
            dev.link_bps = (double)b;
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--link-latency-us"))) {
            long long us;
            if (weft_cli_parse_int("--link-latency-us", v, 1, 1000000, &us) != 0)
                return 2;
            dev.link_latency = (double)us * 1e-6;
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--server"))) {
            server = v;
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--token"))) {
            token = v;
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--interconnect"))) {
            link_given = true;
            const int l = weft_link_parse(v);
            if (l < 0) {
                WEFT_LOG_ERROR("plan", "--interconnect '%s': expected nvlink, pcie or none", v);
                return 2;
            }
            dev.link = (enum weft_interconnect)l;
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--goal"))) {
            if (strcmp(v, "latency") != 0 && strcmp(v, "throughput") != 0) {
                WEFT_LOG_ERROR("plan", "--goal '%s': expected latency or throughput", v);
                return 2;
            }
            job.goal = strcmp(v, "latency") == 0 ? WEFT_GOAL_LATENCY : WEFT_GOAL_THROUGHPUT;
        } else {
            weft_cli_unexpected("plan", "with --auto", "weft plan", argv[i]);
            return 2;
        }
    }
    if (n_opt)
        n = n_opt;
    if (server) {
        if (n_opt) {
            WEFT_LOG_ERROR("plan", "--server reads the devices from the cluster: not with "
                                   "--devices");
            return 2;
        }
        if (devices_of_cluster(server, token, link_given, &dev) != 0)
            return 1;
    } else if (!n || !dev.memory) {
        WEFT_LOG_ERROR("plan", "--auto needs --devices N and --device-memory SIZE ([plan] "
                               "devices and device_memory), or --server ADDR (a running "
                               "cluster)");
        return 2;
    } else {
        dev.n = (int)n, dev.nodes = (int)nodes;
    }
    struct weft_error err = WEFT_ERROR_INIT;
    struct weft_model *model = NULL;
    struct weft_autoplan_model am;
    if (weft_model_open(dir, &model, &err) != WEFT_OK ||
        weft_autoplan_model_open(model, &am, &err) != WEFT_OK) {
        weft_error_log(&err, "plan");
        weft_model_close(model);
        return 1;
    }
    struct weft_autoplan p;
    const weft_status_t st = weft_autoplan(&am, &dev, &job, &p, &err);
    if (st != WEFT_OK) {
        weft_error_log(&err, "plan");
        weft_autoplan_model_cleanup(&am);
        weft_model_close(model);
        return 1;
    }
    struct weft_autoplan_candidate ranked[RANKED];
    const int n_ranked =
        dev.flops > 0 ? weft_autoplan_rank(&am, &dev, &job, p.device_map ? p.pp
                                           : p.cfg * p.ring * p.ulysses * p.tp, ranked,
                                           RANKED) : 0;
    if (json)
        print_json(dir, &p, &dev, ranked, n_ranked);
    else
        print_text(&p, &dev, ranked, n_ranked);
    weft_autoplan_cleanup(&p);
    weft_autoplan_model_cleanup(&am);
    weft_model_close(model);
    return 0;
}
