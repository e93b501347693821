/* weft bench cp: the seed's context-parallel table on this machine. Every mode on N processes
 * (one thread each) against one process (one thread), for a square and a non-divisible image,
 * with ms per step, peak memory per rank and the share of the step spent in collectives. */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/synth.h"
#include "cli/child.h"
#include "cli/cli.h"
#include "cli/progress.h"
#include "common/log.h"
#include "model/mesh.h"
#include "model/plan.h"
#include "transport/comm.h"
#include "worker/denoise.h"
#include "worker/noise.h"
#include "worker/par_transport.h"

#define HEADS 8
#define HEAD_DIM 64

static void help(FILE *out)
{
    fprintf(out,
        "usage: weft bench cp [--np LIST] [--steps N] [--json]\n"
        "\n"
        "Context parallelism on this machine: a FLUX-shaped model scaled to a few CPU cores\n"
        "(8 heads x 64 = 512 wide, 2 double + 4 single blocks, random f32 weights) denoising a\n"
        "square image (32x32 tokens, 64 text tokens) and a non-divisible one (31x33, 63), in\n"
        "every mode (ulysses, ring all-gather, ring p2p, unified, and their anything forms) on\n"
        "N processes of one thread each, against one process of one thread. Default --np 2,4,\n"
        "--steps 3 (after one warm-up step).\n");
}

struct run_params {
    const char *model, *rdv;
    int np, rank, ring, ulysses, anything, p2p, steps;
    int gh, gw, text;
};

static void child_args(const struct run_params *p, char *buf, size_t len, char **argv,
                       const char *self)
{
    snprintf(buf, len, "%d\n%d\n%d\n%d\n%d\n%d\n%d\n%d\n%d\n%d", p->np, p->rank, p->ring,
             p->ulysses, p->anything, p->p2p, p->steps, p->gh, p->gw, p->text);
    int k = 0;
    argv[k++] = (char *)self;
    argv[k++] = "--kernels.threads=1";
    argv[k++] = "bench";
    argv[k++] = "cp-run";
    argv[k++] = (char *)p->model;
    argv[k++] = (char *)(p->rdv ? p->rdv : "-");
    char *s = buf;
    for (int i = 0; i < 10; i++) {
        argv[k++] = s ? s : (char *)"";
        if (s && (s = strchr(s, '\n')))
            *s++ = '\0';
    }
    argv[k] = NULL;
}

struct step_clock {
    double last, total;
    int counted;
};

static weft_status_t on_step(void *arg, int step, int steps, const float *lat, int64_t n)
{
    (void)steps, (void)lat, (void)n;
    struct step_clock *sc = arg;
    double now = weft_now();
    if (step >= 1) { /* step 0 is the warm-up */
        sc->total += now - sc->last;
        sc->counted++;
    }
    sc->last = now;
    return WEFT_OK;
}

/* One rank: argv = model rdv np rank ring ulysses anything p2p steps gh gw text */
int weft_bench_cp_run(struct weft_cli *cli)
{
    if (cli->argc != 13)
        return 2;
    struct run_params p = {cli->argv[1], cli->argv[2]};
    int *f[] = {&p.np, &p.rank, &p.ring, &p.ulysses, &p.anything, &p.p2p, &p.steps,
                &p.gh, &p.gw, &p.text};
    for (int i = 0; i < 10; i++)
        *f[i] = atoi(cli->argv[3 + i]);
    struct weft_transport *tp = NULL;
    struct weft_par_transport *pt = NULL;
    struct weft_mesh mesh = {1, p.ring, p.ulysses, 1};
    struct weft_mesh_coord me = {0};
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    if (weft_kernels_cpu_create((int)cli->conf.kernels.threads, &K, &kc) != WEFT_OK)
        return 1;
    struct weft_flux_opts o = {.kernels = K, .kctx = kc};
    if (p.np > 1) {
        struct weft_transport_opts to;
        weft_transport_opts_from_conf(&cli->conf.transport, &to);
        if (weft_transport_create(&to, p.rank, p.np, p.rdv, &tp, NULL) != WEFT_OK ||
            weft_par_transport_create(tp, &mesh, 0, &pt, NULL) != WEFT_OK)
            return 1;
        weft_mesh_coord(&mesh, p.rank, &me);
        o.cp = (struct weft_cp_layout){p.ring, p.ulysses, p.anything != 0,
                                       p.p2p ? WEFT_RING_P2P : WEFT_RING_ALLGATHER};
        o.ring_rank = me.ring, o.ulysses_rank = me.ulysses;
        o.comm = weft_par_transport_comm(pt);
    }
    struct weft_flux *m;
    if (weft_flux_load(p.model, &o, &m, NULL) != WEFT_OK)
        return 1;
    const struct weft_flux_config *c = weft_flux_get_config(m);
    int64_t s_img = (int64_t)p.gh * p.gw, n = s_img * c->in_channels;
    float *lat = malloc((size_t)n * 4), *pe = malloc((size_t)(p.text * c->joint_attention_dim) * 4);
    float *pooled = malloc((size_t)c->pooled_projection_dim * 4);
    weft_noise_normal(1, 0, n, lat);
    weft_noise_normal(2, 0, p.text * c->joint_attention_dim, pe);
    weft_noise_normal(3, 0, c->pooled_projection_dim, pooled);
    struct weft_sched_config sc;
    weft_sched_config_flux_default(&sc);
    static struct weft_schedule sched;
    struct weft_error err = WEFT_ERROR_INIT;
    weft_sched_plan(&sc, p.steps + 1, s_img, &sched, &err);
    struct step_clock clk = {weft_now(), 0, 0};
    struct weft_denoise_params dp = {.grid_h = p.gh, .grid_w = p.gw, .prompt_embeds = pe,
                                     .s_txt = p.text, .pooled = pooled, .guidance = 3.5f,
                                     .schedule = &sched, .on_step = on_step, .cb_arg = &clk};
    weft_status_t st = weft_flux_reserve(m, 1, s_img, p.text, &err);
    if (st == WEFT_OK) {
        if (pt)
            weft_par_transport_reset_stats(pt);
        clk.last = weft_now();
        st = weft_denoise(m, &dp, lat, &err);
    }
    if (st == WEFT_OK) {
        double comm = 0, bytes = 0;
        if (pt) {
            struct weft_par_stats ps;
            weft_par_transport_stats(pt, &ps);
            for (int k = 0; k < WEFT_MESH_GROUP_COUNT; k++)
                for (int op = 0; op < WEFT_PAR_OP_COUNT; op++)
                    comm += ps.seconds[k][op], bytes += ps.bytes[k][op];
        }
        int steps = p.steps + 1;
        printf("{\"ms_per_step\": %.3f, \"comm_ms_per_step\": %.3f, \"bytes_per_step\": %.0f}\n",
               clk.total / clk.counted * 1e3, comm / steps * 1e3, bytes / steps);
    } else {
        printf("{\"refused\": \"%s\"}\n", weft_error_text(&err));
    }
    free(lat), free(pe), free(pooled);
    weft_flux_destroy(m);
    weft_par_transport_destroy(pt);
    weft_transport_destroy(tp);
    weft_kernels_cpu_destroy(kc);
    return 0;
}

/* ---------------------------------------------------------------------------------------- */

struct result {
    int ok;
    double ms, comm_ms, rss_mib;
    char refused[256];
};

/* Launch np ranks (np 1: no transport), collect rank 0's figures and the largest peak RSS. */
static int run_mode(struct run_params p, const char *self, struct result *res)
{
    struct weft_rdv_server *srv = NULL;
    char where[64] = "-";
    if (p.np > 1) {
        if (weft_rdv_server_create("127.0.0.1", 0, p.np, &srv, NULL) != WEFT_OK)
            return -1;
        snprintf(where, sizeof(where), "127.0.0.1:%u", (unsigned)weft_rdv_server_port(srv));
    }
    p.rdv = where;
    struct weft_child ranks[16];
    for (int r = 0; r < p.np; r++) {
        p.rank = r;
        char buf[256], *argv[20];
        child_args(&p, buf, sizeof(buf), argv, self);
        if (weft_child_start(argv, NULL, &ranks[r]) != 0)
            return -1;
    }
    double deadline = weft_now() + 600;
    while (srv && weft_rdv_server_progress(srv, 100) == WEFT_INPROGRESS && weft_now() < deadline)
        ;
    weft_rdv_server_destroy(srv);
    memset(res, 0, sizeof(*res));
    for (int r = 0; r < p.np; r++) {
        char out[4096];
        long rss_kib = 0;
        (void)weft_child_finish(&ranks[r], out, sizeof(out), &rss_kib);
        double rss = (double)rss_kib / 1024.0;
        res->rss_mib = rss > res->rss_mib ? rss : res->rss_mib;
        if (r != 0)
            continue;
        cJSON *j = cJSON_Parse(out);
        if (j && cJSON_GetObjectItem(j, "ms_per_step")) {
            res->ok = 1;
            res->ms = cJSON_GetObjectItem(j, "ms_per_step")->valuedouble;
            res->comm_ms = cJSON_GetObjectItem(j, "comm_ms_per_step")->valuedouble;
        } else if (j && cJSON_GetObjectItem(j, "refused")) {
            snprintf(res->refused, sizeof(res->refused), "%s",
                     cJSON_GetObjectItem(j, "refused")->valuestring);
        }
        cJSON_Delete(j);
    }
    return 0;
}

int weft_bench_cp(struct weft_cli *cli)
{
    int nps[4] = {2, 4}, n_np = 2, json = 0, steps = 3;
    for (int i = 1; i < cli->argc; i++) {
        const char *v;
        if (weft_cli_is_help(cli->argv[i])) {
            help(stdout);
            return 0;
        } else if (!strcmp(cli->argv[i], "--json")) {
            json = 1;
        } else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--steps"))) {
            long long x;
            if (weft_cli_parse_int("--steps", v, 1, 1000, &x) != 0)
                return 2;
            steps = (int)x;
        } else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--np"))) {
            if ((n_np = weft_cli_parse_int_list("--np", v, 2, 16, nps, 4)) < 0)
                return 2;
        } else {
            WEFT_LOG_ERROR("bench", "unexpected argument '%s' (see `weft bench cp --help`)",
                           cli->argv[i]);
            return 2;
        }
    }
    char dir[] = "/tmp/weft_bench_cp_XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    struct weft_flux_config c;
    weft_synth_flux_config(&c, HEADS, HEAD_DIM, 2, 4);
    c.joint_attention_dim = 256;
    c.pooled_projection_dim = 256;
    if (weft_synth_flux_write(dir, &c, WEFT_DTYPE_F32, 1) != WEFT_OK)
        return 1;
    char self[4096];
    if (weft_self_path(self, sizeof(self)) != 0)
        return 1;
    static const struct {
        const char *name;
        int gh, gw, text;
    } shapes[] = {{"32x32 (1024+64)", 32, 32, 64}, {"31x33 (1023+63)", 31, 33, 63}};
    static const struct {
        const char *name;
        int ring_only, uly_only, unified, anything, p2p;
    } modes[] = {
        {"ulysses", 0, 1, 0, 0, 0},         {"ring all-gather", 1, 0, 0, 0, 0},
        {"ring p2p", 1, 0, 0, 0, 1},        {"unified 2-D", 0, 0, 1, 0, 0},
        {"ulysses_anything", 0, 1, 0, 1, 0}, {"ring_anything ag", 1, 0, 0, 1, 0},
        {"ring_anything p2p", 1, 0, 0, 1, 1}, {"unified anything", 0, 0, 1, 1, 0},
    };
    cJSON *rows = cJSON_CreateArray();
    if (!json)
        printf("FLUX-shaped: %d heads x %d, 2 double + 4 single blocks, f32, 1 thread per "
               "process\n%-18s %-16s %3s %9s %8s %10s %8s %7s\n",
               HEADS, HEAD_DIM, "mode", "shape", "np", "ms/step", "steps/s", "RSS MiB",
               "speed-up", "comm %");
    for (size_t s = 0; s < 2; s++) {
        struct run_params base = {.model = dir, .np = 1, .ring = 1, .ulysses = 1,
                                  .steps = steps, .gh = shapes[s].gh, .gw = shapes[s].gw,
                                  .text = shapes[s].text};
        struct result one = {0};
        run_mode(base, self, &one);
        if (!json)
            printf("%-18s %-16s %3d %9.1f %8.2f %10.0f %8s %7s\n", "one process",
                   shapes[s].name, 1, one.ms, 1e3 / one.ms, one.rss_mib, "1.00", "-");
        for (int k = 0; k < n_np; k++) {
            for (size_t md = 0; md < sizeof(modes) / sizeof(modes[0]); md++) {
                struct run_params p = base;
                p.np = nps[k];
                if (modes[md].unified) {
                    if (nps[k] != 4)
                        continue;
                    p.ring = 2, p.ulysses = 2;
                } else if (modes[md].ring_only) {
                    p.ring = nps[k];
                } else {
                    p.ulysses = nps[k];
                }
                p.anything = modes[md].anything, p.p2p = modes[md].p2p;
                struct result r = {0};
                run_mode(p, self, &r);
                if (json) {
                    cJSON *e = cJSON_CreateObject();
                    cJSON_AddStringToObject(e, "mode", modes[md].name);
                    cJSON_AddStringToObject(e, "shape", shapes[s].name);
                    cJSON_AddNumberToObject(e, "np", nps[k]);
                    if (r.ok) {
                        cJSON_AddNumberToObject(e, "ms_per_step", r.ms);
                        cJSON_AddNumberToObject(e, "speedup", one.ms / r.ms);
                        cJSON_AddNumberToObject(e, "comm_share", r.comm_ms / r.ms);
                        cJSON_AddNumberToObject(e, "peak_rss_mib", r.rss_mib);
                    } else {
                        cJSON_AddStringToObject(e, "fails", r.refused);
                    }
                    cJSON_AddItemToArray(rows, e);
                } else if (r.ok) {
                    printf("%-18s %-16s %3d %9.1f %8.2f %10.0f %8.2f %6.0f%%\n", modes[md].name,
                           shapes[s].name, nps[k], r.ms, 1e3 / r.ms, r.rss_mib, one.ms / r.ms,
                           100.0 * r.comm_ms / r.ms);
                } else {
                    printf("%-18s %-16s %3d %9s   (%.60s)\n", modes[md].name, shapes[s].name,
                           nps[k], "fails", r.refused);
                }
            }
        }
    }
    if (json) {
        char *text = cJSON_Print(rows);
        printf("%s\n", text ? text : "[]");
        cJSON_free(text);
    }
    cJSON_Delete(rows);
    weft_remove_tree(dir);
    return 0;
}
