/* weft plan: what a parallel layout does to a model, without loading a weight. */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "common/alloc.h"
#include "common/log.h"
#include "common/tensor.h"
#include "model/checkpoint.h"
#include "model/cp.h"
#include "model/devmap.h"
#include "model/job.h"
#include "model/mesh.h"
#include "model/model.h"
#include "model/flux.h"
#include "model/plan.h"

static void help(FILE *out)
{
    fprintf(out,
        "usage: weft plan [--model DIR] [--tp N] [--ulysses N] [--ring N] [--dp N] [--np N]\n"
        "                 [--height H --width W] [--text-tokens T] [--json] [--shards]\n"
        "       weft plan [--model DIR] --device-map balanced|auto [--devices N]\n"
        "                 [--max-memory 0:SIZE,1:SIZE,cpu:SIZE] [--json]\n");
    weft_plan_auto_help(out);
    fprintf(out,
        "\n"
        "Resolve the tensor-parallel plan (the model's built-in plan plus [tp_plan] entries)\n"
        "against the checkpoint's headers and print, per rank: shard shapes and bytes,\n"
        "replicated bytes, and the all-reduces per forward pass. Nothing is loaded.\n"
        "\n"
        "  --model DIR  pipeline or transformer folder (default [model] path, else the\n"
        "               embedded models/flux-tiny)\n"
        "  --tp N       tensor-parallel degree (default [parallel] tp_degree)\n"
        "  --ulysses N, --ring N, --cfg 1|2, --dp N   the other degrees (default\n"
        "               [parallel]; cfg 2: the negative prompt's passes on half 1); the\n"
        "               mesh dp x cfg x ring x ulysses x tp is printed rank by rank, and the\n"
        "               context-parallel split of an H x W image with T text tokens\n"
        "               (default 1024 x 1024, 512) is checked as the workers will\n"
        "  --np N       ranks available (default: the mesh size)\n"
        "  [parallel] groups (e.g. --parallel.groups=\"ulysses 2 + dp 2\"): each group's\n"
        "               mesh in turn (with --json: {\"spec\", \"groups\": [one per group]})\n"
        "  --shards     list every planned tensor's full and per-rank shape\n"
        "  --json       machine-readable output\n"
        "\n"
        "With --device-map (or [device_map] strategy): where each component and transformer\n"
        "block goes on the N devices of a replica (the hf_device_map), each device's bytes\n"
        "against its bound, and what spills to host memory. --devices defaults to the\n"
        "devices max_memory names, else [cluster] workers / dp_degree; --max-memory to\n"
        "[device_map] max_memory. A device without a bound is unlimited here (the cluster\n"
        "bounds it by the memory its worker reports).\n"
        "\n");
    weft_plan_auto_help_text(out);
}

static double gib(uint64_t b)
{
    return (double)b / (1024.0 * 1024.0 * 1024.0);
}

static int plan_devmap(const char *dir, int strategy, long long devices, const char *max_memory,
                       int json)
{
    struct weft_max_memory mm;
    char why[200];
    if (weft_conf_parse_max_memory(max_memory, &mm, why, sizeof(why)) != WEFT_OK) {
        WEFT_LOG_ERROR("plan", "--max-memory '%s': %s", max_memory, why);
        return 2;
    }
    if (!devices)
        devices = mm.n;
    if (devices < 1 || devices > WEFT_DEVMAP_MAX_DEVICES) {
        WEFT_LOG_ERROR("plan", "device_map: %lld devices; give --devices N (1..%d)", devices,
                       WEFT_DEVMAP_MAX_DEVICES);
        return 2;
    }
    struct weft_devmap map;
    struct weft_devmap_unit *units;
    struct weft_devmap_component comps[WEFT_DEVMAP_PIPELINE_MAX];
    struct weft_error err = WEFT_ERROR_INIT;
    struct weft_model *model = NULL;
    if (weft_model_open(dir, &model, &err) != WEFT_OK ||
        weft_devmap_plan_model(model, (enum weft_devmap_strategy)strategy, (int)devices, NULL, &mm,
                               &map, &units, comps, &err) != WEFT_OK) {
        weft_error_log(&err, "plan");
        weft_model_close(model);
        return 1;
    }
    weft_model_close(model);
    const char *name = strategy == WEFT_DEVMAP_AUTO ? "auto" : "balanced";
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "weft_plan", 1);
        cJSON_AddStringToObject(o, "model", dir);
        cJSON_AddStringToObject(o, "device_map_strategy", name);
        cJSON_AddItemToObject(o, "device_map", weft_devmap_json(&map, NULL));
        cJSON *devs = cJSON_AddArrayToObject(o, "devices");
        for (int d = 0; d < map.n_devices; d++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "index", d);
            cJSON_AddNumberToObject(e, "bytes", (double)map.used[d]);
            if (map.budget[d] != UINT64_MAX)
                cJSON_AddNumberToObject(e, "max_memory", (double)map.budget[d]);
            cJSON_AddItemToArray(devs, e);
        }
        cJSON_AddNumberToObject(o, "cpu_bytes", (double)map.cpu_used);
        char *text = cJSON_Print(o);
        if (text)
            printf("%s\n", text);
        cJSON_free(text);
        cJSON_Delete(o);
    } else {
        printf("%s: device_map %s over %lld device(s)%s%s\n", dir, name, devices,
               max_memory[0] ? ", max_memory " : "", max_memory);
        for (int c = 0; c < map.n_components; c++) {
            /* runs of units on one device, as ranges */
            for (int u = 0; u < comps[c].n_units;) {
                int d = map.device[c][u], v = u;
                uint64_t bytes = 0;
                while (v < comps[c].n_units && map.device[c][v] == d)
                    bytes += comps[c].units[v++].bytes;
                char where[32];
                if (d == WEFT_DEVMAP_CPU)
                    snprintf(where, sizeof(where), "cpu (runs on device %d)",
                             weft_devmap_exec_device(&map, c, u));
                else
                    snprintf(where, sizeof(where), "device %d", d);
                if (v - u == 1)
                    printf("  %-52s -> %s  %9.2f MiB\n", comps[c].units[u].name, where,
                           (double)bytes / 1048576.0);
                else
                    printf("  %-24s .. %-24s -> %s  %9.2f MiB (%d units)\n",
                           comps[c].units[u].name, comps[c].units[v - 1].name, where,
                           (double)bytes / 1048576.0, v - u);
                u = v;
            }
        }
        for (int d = 0; d < map.n_devices; d++) {
            printf("device %d: %.2f MiB", d, (double)map.used[d] / 1048576.0);
            if (map.budget[d] != UINT64_MAX)
                printf(" of %.2f MiB", (double)map.budget[d] / 1048576.0);
            printf("\n");
        }
        if (map.cpu_used)
            printf("cpu (host memory): %.2f MiB of %.2f MiB\n", (double)map.cpu_used / 1048576.0,
                   (double)map.cpu_budget / 1048576.0);
    }
    weft_devmap_cleanup(&map);
    weft_free(units);
    return 0;
}

struct plan_args {
    const char *model, *max_memory;
    int strategy, json, shards;
    long long devices, tp, np, uly, ring, cfg, dp, height, width, n_text;
};

/* Options into a; 0 to go on, else the exit status (help printed: 0 as well, done = 1). */
static int parse_args(struct weft_cli *cli, struct plan_args *a, int *done)
{
    const struct weft_conf_parallel *par = &cli->conf.parallel;
    *a = (struct plan_args){.max_memory = cli->conf.device_map.max_memory,
                            .strategy = cli->conf.device_map.strategy,
                            .tp = par->tp_degree, .uly = par->ulysses_degree,
                            .ring = par->ring_degree, .cfg = par->cfg_degree,
                            .dp = par->dp_degree, .height = 1024,
                            .width = 1024, .n_text = 512};
    static const char *const names[] = {"--tp",     "--np",    "--ulysses",     "--ring",
                                        "--dp",     "--height", "--width", "--text-tokens",
                                        "--devices", "--cfg"};
    long long *fields[] = {&a->tp,     &a->np,    &a->uly,    &a->ring,    &a->dp,
                           &a->height, &a->width, &a->n_text, &a->devices, &a->cfg};
    for (int i = 1; i < cli->argc; i++) {
        const char *v;
        char **argv = cli->argv;
        int hit = 0;
        for (size_t k = 0; k < sizeof(names) / sizeof(names[0]) && !hit; k++) {
            if ((v = weft_cli_opt_value(cli->argc, argv, &i, names[k]))) {
                if (weft_cli_parse_int(names[k], v, 0, 65536, fields[k]) != 0)
                    return 2;
                hit = 1;
            }
        }
        if (hit)
            continue;
        if (weft_cli_is_help(argv[i])) {
            help(stdout);
            *done = 1;
            return 0;
        } else if (strcmp(argv[i], "--json") == 0) {
            a->json = 1;
        } else if (strcmp(argv[i], "--shards") == 0) {
            a->shards = 1;
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--model"))) {
            a->model = v;
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--device-map"))) {
            static const char *const strategies[] = {"none", "balanced", "auto"};
            a->strategy = -1;
            for (int k = 0; k < 3; k++)
                a->strategy = strcmp(v, strategies[k]) == 0 ? k : a->strategy;
            if (a->strategy < 0) {
                WEFT_LOG_ERROR("plan", "--device-map '%s': expected none, balanced or auto", v);
                return 2;
            }
        } else if ((v = weft_cli_opt_value(cli->argc, argv, &i, "--max-memory"))) {
            a->max_memory = v;
        } else {
            weft_cli_unexpected("plan", "", "weft plan", argv[i]);
            return 2;
        }
    }
    if (a->tp < 1 || a->tp > 1024 || a->uly < 1 || a->uly > 1024 || a->ring < 1 ||
        a->ring > 1024 || a->dp < 1 || a->dp > 1024 || a->cfg < 1 || a->cfg > 2 || a->np < 0 ||
        a->np > 65536 ||
        a->height < 16 || a->width < 16 || a->height % 16 || a->width % 16 || a->n_text < 0 ||
        a->n_text > 65536) {
        WEFT_LOG_ERROR("plan", "expected degrees in 1..1024 (--cfg 1 or 2), --np in 0..65536, "
                               "--height and "
                               "--width multiples of 16, --text-tokens in 0..65536");
        return 2;
    }
    const long long mesh_n = a->dp * a->cfg * a->ring * a->uly * a->tp;
    if (a->np && a->np < mesh_n) {
        WEFT_LOG_ERROR("plan", "the mesh dp %lld x cfg %lld x ring %lld x ulysses %lld x tp %lld "
                               "needs %lld ranks; --np %lld", a->dp, a->cfg, a->ring, a->uly,
                       a->tp, mesh_n, a->np);
        return 1;
    }
    return 0;
}

/* What the tensor-parallel plan and the mesh come to, for printing. */
struct plan_result {
    const struct plan_args *a;
    const struct weft_conf_parallel *par;
    const char *tdir;
    struct weft_model_info info;
    const struct weft_tp_layout *lay;
    bool builtin, ini_entries;
    uint64_t per_rank;
    int64_t s_img;
    struct weft_mesh mesh;
    char cp_error[300];
};

/* Rank r's coordinates, tokens and heads. */
static void rank_of(const struct plan_result *p, int r, struct weft_mesh_coord *c, int64_t *ni,
                    int64_t *nt, int64_t *heads)
{
    const int w = (int)(p->a->ring * p->a->uly);
    int64_t b;
    weft_mesh_coord(&p->mesh, r, c);
    weft_cp_chunk(p->s_img, w, c->cp, &b, ni);
    weft_cp_chunk(p->a->n_text, w, c->cp, &b, nt);
    *heads = p->info.heads / p->a->tp;
}

static cJSON *plan_json(const struct plan_result *p)
{
    const struct plan_args *a = p->a;
    const struct weft_tp_layout *lay = p->lay;
    const long long tp = a->tp, mesh_n = a->dp * a->cfg * a->ring * a->uly * tp;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "model", p->tdir);
    cJSON_AddStringToObject(j, "class", p->info.class_name);
    cJSON_AddNumberToObject(j, "heads", (double)p->info.heads);
    cJSON_AddNumberToObject(j, "tp_degree", (double)tp);
    cJSON_AddBoolToObject(j, "builtin_plan", p->builtin);
    cJSON_AddNumberToObject(j, "planned_modules", lay->n_modules);
    cJSON_AddNumberToObject(j, "planned_bytes", (double)lay->planned_bytes);
    cJSON_AddNumberToObject(j, "replicated_bytes", (double)lay->replicated_bytes);
    cJSON_AddNumberToObject(j, "bytes_per_rank", (double)p->per_rank);
    cJSON_AddNumberToObject(j, "allreduce_per_forward", tp > 1 ? lay->allreduce_per_pass : 0);
    cJSON *mj = cJSON_AddObjectToObject(j, "mesh");
    cJSON_AddNumberToObject(mj, "dp", (double)a->dp);
    cJSON_AddNumberToObject(mj, "cfg", (double)a->cfg);
    cJSON_AddNumberToObject(mj, "ring", (double)a->ring);
    cJSON_AddNumberToObject(mj, "ulysses", (double)a->uly);
    cJSON_AddNumberToObject(mj, "tp", (double)tp);
    cJSON_AddNumberToObject(mj, "ranks", (double)mesh_n);
    cJSON *rj = cJSON_AddArrayToObject(j, "ranks");
    for (int r = 0; r < (int)mesh_n && mesh_n <= 4096; r++) {
        struct weft_mesh_coord c;
        int64_t ni, nt, heads;
        rank_of(p, r, &c, &ni, &nt, &heads);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "rank", r);
        cJSON_AddNumberToObject(e, "dp", c.dp);
        cJSON_AddNumberToObject(e, "cfg", c.cfg);
        cJSON_AddNumberToObject(e, "ring", c.ring);
        cJSON_AddNumberToObject(e, "ulysses", c.ulysses);
        cJSON_AddNumberToObject(e, "tp", c.tp);
        cJSON_AddNumberToObject(e, "image_tokens", (double)ni);
        cJSON_AddNumberToObject(e, "text_tokens", (double)nt);
        cJSON_AddNumberToObject(e, "heads", (double)heads);
        cJSON_AddItemToArray(rj, e);
    }
    cJSON *cj = cJSON_AddObjectToObject(j, "context_parallel");
    cJSON_AddNumberToObject(cj, "height", (double)a->height);
    cJSON_AddNumberToObject(cj, "width", (double)a->width);
    cJSON_AddNumberToObject(cj, "text_tokens", (double)a->n_text);
    cJSON_AddBoolToObject(cj, "ok", !p->cp_error[0]);
    if (p->cp_error[0])
        cJSON_AddStringToObject(cj, "error", p->cp_error);
    cJSON *arr = cJSON_AddArrayToObject(j, "shards");
    for (size_t i = 0; i < lay->n; i++) {
        const struct weft_tp_shard *s = &lay->shards[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", s->name);
        cJSON_AddStringToObject(e, "style", weft_tp_style_name(s->style));
        cJSON_AddNumberToObject(e, "dim", s->dim);
        cJSON *full = cJSON_AddArrayToObject(e, "full"), *loc = cJSON_AddArrayToObject(e, "local");
        for (int d = 0; d < s->ndim; d++) {
            const int64_t local = d == s->dim ? s->shape[d] / tp : s->shape[d];
            cJSON_AddItemToArray(full, cJSON_CreateNumber((double)s->shape[d]));
            cJSON_AddItemToArray(loc, cJSON_CreateNumber((double)local));
        }
        cJSON_AddItemToArray(arr, e);
    }
    return j;
}

static void print_text(const struct plan_result *p)
{
    const struct plan_args *a = p->a;
    const struct weft_tp_layout *lay = p->lay;
    const long long tp = a->tp, mesh_n = a->dp * a->cfg * a->ring * a->uly * tp;
    printf("model: %s (%s, %lld heads)\n", p->tdir, p->info.class_name,
           (long long)p->info.heads);
    printf("tensor parallel: degree %lld, %s plan%s\n", tp, p->builtin ? "built-in" : "INI",
           p->ini_entries ? " with [tp_plan] entries" : "");
    printf("  planned: %d Linear modules, %.3f GiB in full -> %.3f GiB per rank\n",
           lay->n_modules, gib(lay->planned_bytes), gib(p->per_rank - lay->replicated_bytes));
    printf("  replicated on every rank: %.3f GiB\n", gib(lay->replicated_bytes));
    printf("  weights per rank: %.3f GiB (of %.3f GiB)\n", gib(p->per_rank),
           gib(lay->planned_bytes + lay->replicated_bytes));
    printf("  all-reduces per forward: %d\n", tp > 1 ? lay->allreduce_per_pass : 0);
    printf("mesh: dp %lld x cfg %lld x ring %lld x ulysses %lld x tp %lld = %lld rank(s)\n",
           a->dp, a->cfg, a->ring, a->uly, tp, mesh_n);
    if (a->ring * a->uly > 1 || p->cp_error[0])
        printf("context parallel (%s, %s) on %lldx%lld (%lld image + %lld text tokens): %s\n",
               p->par->ulysses_anything || p->par->ring_anything ? "anything" : "equal splits",
               p->par->ring_rotation ? "ring p2p" : "ring all-gather", a->height, a->width,
               (long long)p->s_img, a->n_text, p->cp_error[0] ? p->cp_error : "ok");
    for (int r = 0; r < (int)mesh_n && mesh_n <= 64; r++) {
        struct weft_mesh_coord c;
        int64_t ni, nt, heads;
        rank_of(p, r, &c, &ni, &nt, &heads);
        printf("  rank %-3d dp %d%s ring %d ulysses %d tp %d: %lld image + %lld text tokens, "
               "%lld heads%s\n", r, c.dp, a->cfg > 1 ? (c.cfg ? " cfg 1" : " cfg 0") : "",
               c.ring, c.ulysses, c.tp, (long long)ni, (long long)nt, (long long)heads,
               c.cfg == 0 && c.ring == 0 && c.ulysses == 0 && c.tp == 0 ? ", decodes (VAE)" : "");
    }
    for (size_t i = 0; a->shards && i < lay->n; i++) {
        const struct weft_tp_shard *s = &lay->shards[i];
        int64_t local[2] = {s->shape[0], s->shape[1]};
        if (s->dim >= 0)
            local[s->dim] /= tp;
        char x[64], y[64];
        printf("  %-56s %-15s %-14s -> %s\n", s->name, weft_tp_style_name(s->style),
               weft_shape_str(s->ndim, s->shape, x, sizeof(x)),
               weft_shape_str(s->ndim, local, y, sizeof(y)));
    }
}

/* The tensor-parallel plan and the mesh of layout (a's degrees), checked as the coordinator and
 * the workers check them, printed (into groups, a JSON array, when given, else as --json or
 * text says); 0, else 1 (logged). */
static int plan_mesh(struct weft_cli *cli, const struct plan_args *ap, const char *dir,
                     const struct weft_layout *layout, cJSON *groups)
{
    const struct plan_args a = *ap;
    const struct weft_conf_parallel *par = &cli->conf.parallel;
    struct weft_error err = WEFT_ERROR_INIT;
    struct weft_model *model = NULL;
    if (weft_model_open(dir, &model, &err) != WEFT_OK ||
        weft_model_check_layout(model, layout, &cli->conf.tp_plan, &err) != WEFT_OK) {
        weft_error_log(&err, "plan");
        weft_model_close(model);
        return 1;
    }
    const char *tdir = model->transformer_dir;
    struct weft_ckpt *ck;
    if (weft_ckpt_open(tdir, &ck, &err) != WEFT_OK) {
        weft_error_log(&err, "plan");
        weft_model_close(model);
        return 1;
    }
    int rc = 1;
    struct weft_tp_layout *lay = NULL;
    struct plan_result p = {.a = &a, .par = par, .tdir = tdir,
                            .ini_entries = cli->conf.tp_plan.n > 0, .info = model->info};
    struct weft_tp_plan plan;
    const int tp = (int)a.tp;
    p.builtin = weft_tp_plan_builtin(p.info.class_name, &plan);
    if (weft_tp_plan_apply_conf(&plan, &cli->conf.tp_plan, &err) != WEFT_OK ||
        weft_tp_resolve(&plan, ck, &p.info, tp, a.np ? (int)a.np : tp, &lay, &err) != WEFT_OK) {
        weft_error_log(&err, "plan");
        goto out;
    }
    /* this image on the layout: the check a job gets at submission */
    p.s_img = weft_job_image_tokens(model, a.height, a.width);
    const int64_t tokens = a.n_text;
    const struct weft_job_desc job = {.height = a.height, .width = a.width, .steps = 1,
                                      .count = 1, .n_prompts = 1, .prompt_tokens = &tokens};
    struct weft_error why = WEFT_ERROR_INIT;
    if (weft_job_check(model, layout, &job, NULL, &why) != WEFT_OK)
        snprintf(p.cp_error, sizeof(p.cp_error), "%s", weft_error_text(&why));
    p.mesh = (struct weft_mesh){(int)a.dp, (int)a.ring, (int)a.uly, tp, 1, (int)a.cfg};
    p.lay = lay;
    p.per_rank = lay->replicated_bytes;
    for (size_t i = 0; i < lay->n; i++) {
        const struct weft_ckpt_tensor *t = weft_ckpt_find(ck, lay->shards[i].name);
        p.per_rank += lay->shards[i].dim >= 0 ? t->info->nbytes / (uint64_t)tp : t->info->nbytes;
    }
    if (groups) {
        cJSON_AddItemToArray(groups, plan_json(&p));
    } else if (a.json) {
        cJSON *j = plan_json(&p);
        char *text = cJSON_Print(j);
        printf("%s\n", text ? text : "{}");
        cJSON_free(text);
        cJSON_Delete(j);
    } else {
        print_text(&p);
    }
    if (p.cp_error[0])
        WEFT_LOG_ERROR("plan", "%s", p.cp_error);
    rc = p.cp_error[0] ? 1 : 0;
out:
    weft_tp_layout_destroy(lay);
    weft_ckpt_close(ck);
    weft_model_close(model);
    return rc;
}

int weft_cmd_plan(struct weft_cli *cli)
{
    for (int i = 1; i < cli->argc; i++) {
        if (weft_cli_is_help(cli->argv[i]))
            break;
        if (strcmp(cli->argv[i], "--auto") == 0)
            return weft_cmd_plan_auto(cli, cli->conf.model.path[0] ? cli->conf.model.path
                                                                   : WEFT_DEFAULT_MODEL);
    }
    struct plan_args a;
    int done = 0, prc = parse_args(cli, &a, &done);
    if (prc || done)
        return prc;
    const struct weft_conf_parallel *par = &cli->conf.parallel;
    const char *dir = a.model ? a.model : cli->conf.model.path[0] ? cli->conf.model.path
                                                                  : WEFT_DEFAULT_MODEL;
    if (a.strategy != WEFT_DEVMAP_NONE) {
        if (a.tp > 1) {
            WEFT_LOG_ERROR("plan", "device_map cannot be combined with tensor parallelism (tp "
                                   "%lld): tensor parallelism already places each rank's "
                                   "shard on that rank's device", a.tp);
            return 2;
        }
        if (!a.devices && cli->conf.cluster.workers)
            a.devices = cli->conf.cluster.workers / par->dp_degree;
        return plan_devmap(dir, a.strategy, a.devices, a.max_memory, a.json);
    }
    if (par->groups[0]) { /* each group of [parallel] groups as its own mesh */
        if (a.tp != par->tp_degree || a.uly != par->ulysses_degree || a.ring != par->ring_degree ||
            a.dp != par->dp_degree || a.cfg != par->cfg_degree) {
            WEFT_LOG_ERROR("plan", "[parallel] groups (\"%s\") sets the degrees: no --tp, "
                                   "--ulysses, --ring, --dp or --cfg beside it", par->groups);
            return 2;
        }
        struct weft_layout base, g[WEFT_LAYOUT_GROUPS_MAX];
        int n = 0;
        struct weft_error err = WEFT_ERROR_INIT;
        weft_layout_from_conf(&cli->conf, 0, &base);
        if (weft_layout_parse_groups(par->groups, &base, g, &n, &err) != WEFT_OK) {
            weft_error_log(&err, "plan");
            return 2;
        }
        cJSON *all = a.json ? cJSON_CreateArray() : NULL;
        int rc = 0;
        for (int k = 0; k < n && rc == 0; k++) {
            char name[96];
            weft_layout_name(&g[k], name, sizeof(name));
            if (!a.json)
                printf("%sgroup %d of %d: %s\n", k ? "\n" : "", k + 1, n, name);
            a.dp = g[k].mesh.dp, a.ring = g[k].mesh.ring, a.uly = g[k].mesh.ulysses;
            a.tp = g[k].mesh.tp, a.cfg = g[k].mesh.cfg;
            rc = plan_mesh(cli, &a, dir, &g[k], all);
        }
        if (all) {
            cJSON *j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "spec", par->groups);
            cJSON_AddItemToObject(j, "groups", all);
            char *text = cJSON_Print(j);
            printf("%s\n", text ? text : "{}");
            cJSON_free(text);
            cJSON_Delete(j);
        }
        return rc;
    }
    struct weft_layout layout = {
        .mesh = {(int)a.dp, (int)a.ring, (int)a.uly, (int)a.tp, 1, (int)a.cfg},
        .ulysses_anything = par->ulysses_anything, .ring_anything = par->ring_anything,
        .rotation = (enum weft_ring_rotation)par->ring_rotation,
    };
    return plan_mesh(cli, &a, dir, &layout, NULL);
}
