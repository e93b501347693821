/* weft plan --auto's choices (model/autoplan.h) on FLUX.1-dev's real sizes, one case per rule
 * of the seeds' table: many prompts and a model that fits -> dp; a transformer that fits no
 * device over NVLink -> tp, over PCIe -> device_map; a 2048 x 2048 image -> context
 * parallelism (Ulysses inside a node, ring across); weights and activations both too large
 * -> tp x cp; heads that do not divide the devices -> a smaller degree or ring, said why; a
 * pipeline that fits nowhere -> refused naming the sizes. */
#include <cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "common/log.h"
#include "model/autoplan.h"
#include "model/checkpoint.h"
#include "model/job.h"
#include "model/model.h"
#include "test.h"

#define GB 1000000000ull
#define MB 1000000ull
#define GIB (1024.0 * 1024.0 * 1024.0)

static struct weft_devmap_unit units[2 + 59 + 1];

/* FLUX.1-dev in bf16: the transformer 23.8 GB (weft plan at tp 4 on the real-sized checkpoint:
 * 16.04 GiB planned, 6.135 GiB replicated, 114 all-reduces a pass), T5-XXL 9.52 GB (its
 * token embedding, 263 MB, whole on every rank), CLIP-L 246 MB, the VAE decoder 99 MB. */
static void flux_dev(struct weft_autoplan_model *m, bool with_vae)
{
    memset(m, 0, sizeof(*m));
    cJSON *fc = cJSON_Parse("{\"guidance_embeds\": true}"); /* Diffusers' defaults: FLUX.1 */
    CHECK_OK(weft_flux_config_parse(fc, "flux", &m->flux, TERR));
    cJSON_Delete(fc);
    cJSON *vc = cJSON_Parse("{\"latent_channels\": 16, \"block_out_channels\": [128, 256, 512, "
                            "512], \"layers_per_block\": 2, \"sample_size\": 1024}");
    CHECK_OK(weft_vae_config_parse(vc, "vae", &m->vae, TERR));
    cJSON_Delete(vc);
    m->has_vae = with_vae;
    m->side_unit = 16;
    const double planned = 16.04 * GIB, replicated = 6.135 * GIB;
    m->transformer_bytes = (uint64_t)(planned + replicated);
    m->clip_bytes = 246 * MB, m->t5_bytes = 9524 * MB, m->vae_bytes = with_vae ? 99 * MB : 0;
    for (int t = 1; t <= WEFT_AUTOPLAN_TP_MAX; t++) {
        if (24 % t)
            continue;
        m->tp_bytes[t] = (uint64_t)(replicated + planned / t);
        m->tp_allreduces[t] = t > 1 ? 114 : 0;
        if (t > 1 && 64 % t == 0)
            m->t5_tp_bytes[t] = 263 * MB + (9524 - 263) * MB / (uint64_t)t;
    }
    /* device_map's units: the encoders, the transformer's embedders, 19 double and 38 single
     * blocks and its output layers, the VAE */
    int u = 0;
    snprintf(units[u].name, sizeof(units[u].name), "text_encoder");
    units[u++].bytes = m->clip_bytes;
    snprintf(units[u].name, sizeof(units[u].name), "text_encoder_2");
    units[u++].bytes = m->t5_bytes;
    for (int i = 0; i < 59; i++, u++) {
        snprintf(units[u].name, sizeof(units[u].name), "transformer.%d", i);
        units[u].bytes = i == 0 ? 90 * MB : i <= 19 ? 679 * MB : i <= 57 ? 283 * MB : 30 * MB;
    }
    snprintf(units[u].name, sizeof(units[u].name), "vae");
    units[u].bytes = m->vae_bytes;
    m->comps[0] = (struct weft_devmap_component){"text_encoder", units, 1};
    m->comps[1] = (struct weft_devmap_component){"text_encoder_2", units + 1, 1};
    m->comps[2] = (struct weft_devmap_component){"transformer", units + 2, 59};
    m->comps[3] = (struct weft_devmap_component){"vae", units + 61, 1};
    m->n_comps = with_vae ? 4 : 3;
}

static void show(const char *what, const struct weft_autoplan *p)
{
    printf("%s: dp %d ring %d ulysses %d tp %d%s pp %d, idle %d, peak %.2f GB (weights %.2f), "
           "%.1f MB sent a step\n", what, p->dp, p->ring, p->ulysses, p->tp,
           p->device_map ? " device_map" : "", p->pp, p->idle,
           (double)(p->peak.weights + p->peak.activations + p->peak.workspace) / 1e9,
           (double)p->peak.weights / 1e9,
           (p->tp_bytes + p->ulysses_bytes + p->ring_bytes + p->stage_bytes) / 1e6);
    for (int i = 0; i < p->n_reasons; i++)
        printf("    %s\n", p->reasons[i]);
}

static bool said(const struct weft_autoplan *p, const char *what)
{
    for (int i = 0; i < p->n_reasons; i++)
        if (strstr(p->reasons[i], what))
            return true;
    return false;
}

/* A device_map's peak is its fullest device's own: the weights placed there, the transformer's
 * activations only where it runs blocks, the VAE's only where it decodes (a worker reserves
 * what its stage runs; the planner once put both on every device, 49 % above a measured
 * worker). */
static void devmap_peak_check(const struct weft_autoplan_model *m,
                              const struct weft_autoplan_job *job, const struct weft_autoplan *p)
{
    struct weft_autoplan_model no_vae = *m;
    no_vae.has_vae = false;
    const uint64_t act = weft_autoplan_memory_of(&no_vae, job, 1, 1, 1).activations;
    const uint64_t vact = weft_autoplan_memory_of(m, job, 1, 1, 1).activations - act;
    CHECK(act > 0 && (vact > 0) == m->has_vae);
    const int t = weft_devmap_find(&p->map, "transformer"), v = weft_devmap_find(&p->map, "vae");
    uint64_t most = 0;
    for (int d = 0; d < p->pp; d++) {
        int first, last;
        const bool runs_t = t >= 0 && weft_devmap_range(&p->map, t, d, &first, &last);
        const bool runs_v = v >= 0 && weft_devmap_range(&p->map, v, d, &first, &last);
        const uint64_t held = p->map.used[d] + (runs_t ? act : 0) + (runs_v ? vact : 0);
        if (d == p->peak_device) {
            CHECK_EQ(p->peak.weights, p->map.used[d]);
            CHECK_EQ(p->peak.activations, (runs_t ? act : 0) + (runs_v ? vact : 0));
        }
        most = held > most ? held : most;
    }
    CHECK_EQ(p->peak.weights + p->peak.activations, most);
}

static struct weft_autoplan plan(const struct weft_autoplan_model *m, int n, int nodes,
                                 uint64_t mem, enum weft_interconnect link, int64_t side,
                                 int64_t prompts, enum weft_goal goal, const char *what)
{
    const struct weft_autoplan_devices dev = {n, nodes, mem, 0, link};
    const struct weft_autoplan_job job = {side, side, 28, prompts, 512, false, goal};
    struct weft_autoplan p;
    CHECK_OK(weft_autoplan(m, &dev, &job, &p, TERR));
    show(what, &p);
    /* whatever it chose fits */
    CHECK(p.peak.weights + p.peak.activations + p.peak.workspace <= mem);
    CHECK_EQ(p.dp * (p.device_map ? p.pp : p.ring * p.ulysses * p.tp) + p.idle, n);
    if (p.device_map)
        devmap_peak_check(m, &job, &p);
    return p;
}

/* From a folder: the tiny pipeline with both text encoders. Its sizes are the model layer's
 * own (held bytes, the tp plan resolved at each degree, T5's slices), its device_map
 * components the four of weft plan --device-map. Then `weft plan --auto --json` on it. */
static void from_folder(const char *weft)
{
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/tests/data/text/pipeline", getenv("WEFT_SOURCE_ROOT"));
    struct weft_model *model;
    CHECK_OK(weft_model_open(dir, &model, TERR));
    struct weft_autoplan_model m;
    CHECK_OK(weft_autoplan_model_open(model, &m, TERR));
    CHECK_EQ(m.tp_bytes[1], model->transformer_held_bytes);
    CHECK(m.tp_bytes[2] > 0 && m.tp_bytes[2] < m.tp_bytes[1] && m.tp_allreduces[2] > 0);
    CHECK_EQ(m.t5_bytes, model->t5.held_bytes);
    CHECK_EQ(m.clip_bytes, model->clip.held_bytes);
    struct weft_ckpt *ck;
    CHECK_OK(weft_ckpt_open(model->t5.encoder_dir, &ck, TERR));
    CHECK_EQ(m.t5_tp_bytes[2], weft_t5_held_bytes_tp(&model->t5_cfg, ck, 2));
    weft_ckpt_close(ck);
    CHECK_EQ(m.n_comps, 4);
    CHECK(strcmp(m.comps[1].name, "text_encoder_2") == 0 && strcmp(m.comps[3].name, "vae") == 0);
    /* a 64 x 64 image on one 100 MB device: fits; the memory is the formulas' sum */
    const struct weft_autoplan_devices dev = {1, 1, 100 * MB, 0, WEFT_LINK_PCIE};
    const struct weft_autoplan_job job = {64, 64, 4, 1, 64, false, WEFT_GOAL_LATENCY};
    struct weft_autoplan p;
    CHECK_OK(weft_autoplan(&m, &dev, &job, &p, TERR));
    CHECK_EQ(p.peak.weights, model->transformer_held_bytes + model->clip.held_bytes +
                                 model->t5.held_bytes + model->vae_held_bytes);
    int64_t lat, buf;
    const int64_t g = 64 / model->vae_scale, s_img = weft_job_image_tokens(model, 64, 64);
    weft_vae_decode_plan(&model->vae, g, g, NULL, NULL, &lat, &buf);
    CHECK_EQ(p.peak.activations,
             weft_flux_act_sizes(&model->flux, 1, false, 1, s_img, 64, s_img, NULL) +
                 (uint64_t)(lat + 3 * buf) * sizeof(float));
    weft_autoplan_model_cleanup(&m);
    weft_model_close(model);

    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "%s plan --model %s --auto --devices 4 --device-memory 5.5MiB "
             "--interconnect pcie --height 64 --width 64 --text-tokens 64 --json", weft, dir);
    FILE *f = popen(cmd, "r");
    CHECK(f);
    static char out[65536];
    const size_t n = fread(out, 1, sizeof(out) - 1, f);
    out[n] = '\0';
    CHECK_EQ(pclose(f), 0);
    cJSON *j = cJSON_Parse(out);
    CHECK(j);
    const cJSON *deg = cJSON_GetObjectItemCaseSensitive(j, "degrees");
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(j, "device_map");
    const cJSON *mem = cJSON_GetObjectItemCaseSensitive(j, "memory_per_device");
    const cJSON *why = cJSON_GetObjectItemCaseSensitive(j, "reasons");
    CHECK(cJSON_IsObject(deg) && cJSON_IsObject(map) && cJSON_IsObject(mem) &&
          cJSON_GetArraySize(why) >= 2);
    CHECK(cJSON_GetObjectItemCaseSensitive(deg, "tp")->valueint == 1);
    CHECK(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(map, "text_encoder_2")));
    CHECK(cJSON_GetObjectItemCaseSensitive(mem, "total")->valuedouble <= 5.5 * 1048576);
    printf("weft plan --auto on the tiny text pipeline, 4 devices of 5.5 MiB over PCIe: "
           "device_map over %d devices, %s\n",
           cJSON_GetObjectItemCaseSensitive(j, "devices_per_replica")->valueint,
           cJSON_GetArrayItem(why, 0)->valuestring);
    cJSON_Delete(j);
    /* the same devices from [plan] (here as --section.key overrides): the same plan */
    snprintf(cmd, sizeof(cmd), "%s plan --model %s --auto --plan.devices=4 "
             "--plan.device_memory=5.5MiB --plan.interconnect=pcie --height 64 --width 64 "
             "--text-tokens 64 --json", weft, dir);
    f = popen(cmd, "r");
    CHECK(f);
    static char out2[65536];
    const size_t n2 = fread(out2, 1, sizeof(out2) - 1, f);
    out2[n2] = '\0';
    CHECK_EQ(pclose(f), 0);
    CHECK(n2 == n && strcmp(out, out2) == 0);
    CHECK(!strstr(out, "step_time")); /* no rate given: no time */
    /* with a device rate: the step time and the ranked layouts of the replica's devices */
    snprintf(cmd, sizeof(cmd), "%s plan --model %s --auto --devices 2 --device-memory 1GB "
             "--height 256 --width 256 --text-tokens 64 --device-tflops 0.05 "
             "--link-bandwidth 5GB --link-latency-us 40 --json", weft, dir);
    f = popen(cmd, "r");
    CHECK(f);
    const size_t n3 = fread(out2, 1, sizeof(out2) - 1, f);
    out2[n3] = '\0';
    CHECK_EQ(pclose(f), 0);
    j = cJSON_Parse(out2);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "step_time");
    const cJSON *rk = cJSON_GetObjectItemCaseSensitive(j, "ranked");
    CHECK(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(t, "total")) &&
          cJSON_GetObjectItemCaseSensitive(t, "total")->valuedouble > 0);
    CHECK(cJSON_IsArray(rk) && cJSON_GetArraySize(rk) >= 2);
    double prev = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, rk)
    {
        const double v = cJSON_GetObjectItemCaseSensitive(
                             cJSON_GetObjectItemCaseSensitive(e, "step_time"), "total")
                             ->valuedouble;
        CHECK(v >= prev);
        prev = v;
    }
    printf("weft plan --auto --device-tflops 0.05 on 2 devices: %.2f ms a step, %d layouts "
           "ranked, fastest %s\n", cJSON_GetObjectItemCaseSensitive(t, "total")->valuedouble * 1e3,
           cJSON_GetArraySize(rk),
           cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(rk, 0), "layout")->valuestring);
    cJSON_Delete(j);
    snprintf(cmd, sizeof(cmd), "%s plan --model %s --auto --devices 2 --device-memory 1GB "
             "--device-tflops fast 2>&1", weft, dir);
    f = popen(cmd, "r");
    CHECK(f);
    const size_t n4 = fread(out2, 1, sizeof(out2) - 1, f);
    out2[n4] = '\0';
    CHECK_EQ(WEXITSTATUS(pclose(f)), 2);
    CHECK(strstr(out2, "--device-tflops 'fast'"));
    /* bad input: one line, exit 2 */
    snprintf(cmd, sizeof(cmd), "%s plan --auto --devices 4 --device-memory lots 2>&1", weft);
    f = popen(cmd, "r");
    CHECK(f);
    const size_t k = fread(out, 1, sizeof(out) - 1, f);
    out[k] = '\0';
    CHECK_EQ(WEXITSTATUS(pclose(f)), 2);
    CHECK(strstr(out, "--device-memory 'lots'"));
}

/* The operation count of FLUX.1-dev's forward pass, written out from its shapes (D 3072, MLP
 * 4D, 64 latent channels, T5 4096 wide, CLIP 768, 19 double and 38 single blocks) against
 * weft_flux_flops, which walks the layer tables; then the predicted step time and the ranking. */
static void step_time(const struct weft_autoplan_model *m)
{
    const double D = 3072, si = 4096, st = 512, S = si + st;
    const double top = 64 * D * si + 4096 * D * st + 256 * D + D * D /* time */ +
                       256 * D + D * D /* guidance */ + 768 * D + D * D /* text */ +
                       D * 2 * D + D * 64 * si /* norm_out, proj_out */;
    const double dbl = 12 * D * D * S + 2 * 6 * D * D, sgl = 12 * D * D * S + 3 * D * D;
    const double want = 2 * (top + 19 * dbl + 38 * sgl) + 57 * 4 * S * S * D;
    const double got = weft_flux_flops(&m->flux, (int64_t)si, (int64_t)st);
    printf("FLUX.1-dev at 1024 x 1024, 512 text tokens: %.2f TFLOP a pass (written out %.2f)\n",
           got / 1e12, want / 1e12);
    CHECK(fabs(got - want) <= 1e-9 * want);
    /* a token passes one stream of a double block (12 D^2 of its 24 D^2 weights), every
     * weight of a single block but the modulation: 57 x 12 D^2 x 4608 x 2 = 59.5 T, and
     * attention 14.9 T */
    CHECK(got > 70e12 && got < 80e12);

    /* 4 devices of 80 GB at 400 TFLOP/s, NVLink at its nominal figures */
    const struct weft_autoplan_devices dev = {.n = 4, .nodes = 1, .memory = 80 * GB,
                                              .link = WEFT_LINK_NVLINK, .flops = 400e12};
    const struct weft_autoplan_job job = {1024, 1024, 28, 1, 512, false, WEFT_GOAL_LATENCY};
    struct weft_autoplan_candidate c[16];
    /* the step's FLOPs as the coordinator's cost record counts them: the pass, twice with
     * true CFG, none for a model with no token size */
    CHECK(weft_autoplan_step_flops(m, &job) == got);
    struct weft_autoplan_job twice = job;
    twice.cfg = true;
    CHECK(weft_autoplan_step_flops(m, &twice) == 2 * got);
    struct weft_autoplan_model none = *m;
    none.side_unit = 0;
    CHECK(weft_autoplan_step_flops(&none, &job) == 0);
    const int n1 = weft_autoplan_rank(m, &dev, &job, 1, c, 16);
    CHECK_EQ(n1, 1);
    CHECK(fabs(c[0].time.compute - got / 400e12) < 1e-12 && c[0].time.total == c[0].time.compute);
    const double one = c[0].time.total;
    const int n4 = weft_autoplan_rank(m, &dev, &job, 4, c, 16);
    /* tp 4, ulysses 4, ring 4, tp 2 x ulysses 2, tp 2 x ring 2, ring 2 x ulysses 2, device_map */
    CHECK_EQ(n4, 7);
    for (int i = 0; i < n4; i++) {
        printf("  %s ring %d ulysses %d tp %d: %.1f ms (compute %.1f)\n",
               c[i].device_map ? "device_map" : "", c[i].ring, c[i].ulysses, c[i].tp,
               c[i].time.total * 1e3, c[i].time.compute * 1e3);
        CHECK(i == 0 || c[i].time.total >= c[i - 1].time.total);
        if (c[i].device_map) { /* the stages run one after another */
            CHECK(fabs(c[i].time.compute - one) < 1e-9);
            continue;
        }
        CHECK(fabs(c[i].time.compute - one / 4) < 1e-9 * one); /* 4608 splits evenly */
        if (c[i].tp == 4) { /* 114 all-reduces of 4608 x 3072 floats, 2 x 3/4 of each sent */
            const double bytes = 114 * 2.0 * 3 / 4 * S * D * 4;
            CHECK(fabs(c[i].time.tp - (114 * 10e-6 + bytes / 300e9)) < 1e-9);
        }
    }
    CHECK(c[n4 - 1].device_map);
    /* no rate: no time, the ranking by memory */
    struct weft_autoplan_devices slow = dev;
    slow.flops = 0;
    CHECK_EQ(weft_autoplan_rank(m, &slow, &job, 4, c, 16), 7);
    CHECK(c[0].time.total == 0);
    /* the chosen plan carries its time; with a rate, the spare devices of a latency job split
     * the step when the predicted time says so (ulysses 4 here, as the token rule) */
    struct weft_autoplan p;
    CHECK_OK(weft_autoplan(m, &dev, &job, &p, TERR));
    show("timed 1024", &p);
    CHECK(p.time.total > 0 && p.time.compute <= one);
    CHECK(p.ulysses == 4 && said(&p, "fastest predicted"));
    weft_autoplan_cleanup(&p);
    /* 512 x 512: the token rule would not split its 1024 tokens; at 400 TFLOP/s over NVLink the
     * cost model does, and over a 100 MB/s link with 1 ms calls it does not */
    const struct weft_autoplan_job small = {512, 512, 28, 1, 512, false, WEFT_GOAL_LATENCY};
    CHECK_OK(weft_autoplan(m, &dev, &small, &p, TERR));
    show("timed 512", &p);
    CHECK(p.ring * p.ulysses > 1 && said(&p, "fastest predicted"));
    weft_autoplan_cleanup(&p);
    struct weft_autoplan_devices thin = dev;
    thin.link_bps = 1e8, thin.link_latency = 1e-3;
    CHECK_OK(weft_autoplan(m, &thin, &small, &p, TERR));
    show("timed 512, thin link", &p);
    CHECK(p.ring * p.ulysses == 1 && p.idle == 3 && said(&p, "no context-parallel degree"));
    weft_autoplan_cleanup(&p);
    /* true CFG, latency, 4 devices: CFG parallelism first (two halves of 2, a pass each, one
     * exchange of the predictions), then each half splits its sequence; in the ranking a
     * cfg 2 layout is the fastest, and every cfg 1 layout of the 4 devices, computing as much
     * per rank, sends more a step */
    struct weft_autoplan_job cfg = job;
    cfg.cfg = true;
    CHECK_OK(weft_autoplan(m, &dev, &cfg, &p, TERR));
    show("timed 1024, true CFG", &p);
    CHECK(p.cfg == 2 && p.ring * p.ulysses == 2 && p.tp == 1 && p.dp == 1 && p.idle == 0);
    CHECK(said(&p, "CFG parallelism") && p.cfg_calls == 1 && p.cfg_bytes > 0);
    const double cfg_step = p.time.total;
    weft_autoplan_cleanup(&p);
    const int nc = weft_autoplan_rank(m, &dev, &cfg, 4, c, 16);
    CHECK(nc > 7 && c[0].cfg == 2 && c[0].time.total == cfg_step);
    for (int i = 0; i < nc; i++)
        if (c[i].cfg == 1 && !c[i].device_map)
            CHECK(c[i].bytes > c[0].bytes && c[i].time.total > c[0].time.total);
    /* throughput: the devices make replicas, each running both passes */
    cfg.goal = WEFT_GOAL_THROUGHPUT, cfg.prompts = 8;
    CHECK_OK(weft_autoplan(m, &dev, &cfg, &p, TERR));
    CHECK(p.cfg == 1 && p.dp == 4 && said(&p, "two transformer passes a step"));
    weft_autoplan_cleanup(&p);
    /* over two nodes a group that leaves its host pays the network: ring 4 across 2 nodes */
    const struct weft_autoplan_devices two = {.n = 4, .nodes = 2, .memory = 80 * GB,
                                              .link = WEFT_LINK_NVLINK, .flops = 400e12};
    const int n2 = weft_autoplan_rank(m, &two, &job, 4, c, 16);
    for (int i = 0; i < n2; i++)
        if (c[i].ring == 4)
            CHECK(c[i].time.ring > 57 * 2 * WEFT_AUTOPLAN_NET_LATENCY);
}

/* The transformer and the VAE alone (embeddings given): a device_map over 2 devices of ample
 * memory puts each whole on its own device, and the peak is the transformer's device with its
 * own activations, not the VAE's (bench plan measured the workers: 1501.5 MiB on the
 * transformer's, 782.8 on the VAE's, against 2233.4 predicted when both counted everywhere). */
static void devmap_apart(void)
{
    struct weft_autoplan_model m;
    flux_dev(&m, true);
    m.clip_bytes = m.t5_bytes = 0;
    memset(m.t5_tp_bytes, 0, sizeof(m.t5_tp_bytes));
    m.comps[0] = m.comps[2];
    m.comps[1] = m.comps[3];
    m.n_comps = 2;
    const struct weft_autoplan_devices dev = {.n = 2, .nodes = 1, .memory = 1000 * GB,
                                              .link = WEFT_LINK_PCIE};
    const struct weft_autoplan_job job = {1024, 1024, 28, 1, 512, false, WEFT_GOAL_LATENCY};
    struct weft_autoplan_candidate c[16];
    const int n = weft_autoplan_rank(&m, &dev, &job, 2, c, 16);
    int k = 0;
    while (k < n && !c[k].device_map)
        k++;
    CHECK(k < n && c[k].pp == 2);
    struct weft_autoplan_model no_vae = m;
    no_vae.has_vae = false;
    const uint64_t act = weft_autoplan_memory_of(&no_vae, &job, 1, 1, 1).activations;
    const uint64_t both = weft_autoplan_memory_of(&m, &job, 1, 1, 1).activations;
    printf("device_map 2, the transformer and the VAE apart: peak %.2f GB (weights %.2f, "
           "activations %.2f; the VAE's %.2f on the other device)\n",
           (double)(c[k].peak.weights + c[k].peak.activations) / 1e9,
           (double)c[k].peak.weights / 1e9, (double)c[k].peak.activations / 1e9,
           (double)(both - act) / 1e9);
    uint64_t tf = 0; /* the transformer's units, whole on its device */
    for (int u = 0; u < m.comps[0].n_units; u++)
        tf += m.comps[0].units[u].bytes;
    CHECK(both > act);
    CHECK_EQ(c[k].peak.weights, tf);
    CHECK_EQ(c[k].peak.activations, act);
}

int main(int argc, char **argv)
{
    test_quiet();
    CHECK(argc == 2);
    from_folder(argv[1]);
    struct weft_autoplan_model m;
    flux_dev(&m, true);
    step_time(&m);
    devmap_apart();
    struct weft_autoplan p;

    /* many prompts, a model that fits: one replica per device */
    p = plan(&m, 8, 1, 80 * GB, WEFT_LINK_NVLINK, 1024, 100, WEFT_GOAL_THROUGHPUT, "dp");
    CHECK(p.dp == 8 && p.tp == 1 && p.ring * p.ulysses == 1 && !p.device_map);
    CHECK(said(&p, "fits one device") && said(&p, "data parallelism"));
    CHECK(p.tp_bytes + p.ulysses_bytes + p.ring_bytes + p.stage_bytes == 0);

    /* the transformer with its activations fits no 20 GB device; NVLink: the smallest tp that
     * fits (tp 2 holds 24 GB), with the spare devices of a latency job splitting the sequence,
     * or, for throughput, more replicas */
    p = plan(&m, 4, 1, 20 * GB, WEFT_LINK_NVLINK, 1024, 1, WEFT_GOAL_LATENCY, "tp");
    CHECK(p.tp == 4 && p.dp == 1 && !p.device_map && p.ring * p.ulysses == 1 && p.idle == 0);
    CHECK(said(&p, "NVLink, so tensor parallelism"));
    CHECK_EQ(p.tp_allreduces, 114);
    p = plan(&m, 8, 1, 20 * GB, WEFT_LINK_NVLINK, 1024, 1, WEFT_GOAL_LATENCY, "tp x cp");
    CHECK(p.tp == 4 && p.ulysses == 2 && p.dp == 1 && said(&p, "spare"));
    p = plan(&m, 8, 1, 20 * GB, WEFT_LINK_NVLINK, 1024, 64, WEFT_GOAL_THROUGHPUT, "tp x dp");
    CHECK(p.tp == 4 && p.dp == 2 && p.ring * p.ulysses == 1);

    /* the same over PCIe: device_map, the fewest devices that hold it */
    p = plan(&m, 4, 1, 20 * GB, WEFT_LINK_PCIE, 1024, 1, WEFT_GOAL_LATENCY, "device_map");
    CHECK(p.device_map && p.pp == 4 && p.tp == 1 && p.idle == 0); /* balanced splits over all */
    CHECK(said(&p, "PCIe") && said(&p, "device_map balanced over 4"));
    CHECK(weft_devmap_component_device(&p.map, "text_encoder_2") >= 0);
    CHECK(p.stage_bytes > 0 && p.tp_bytes == 0);
    weft_autoplan_cleanup(&p);

    /* the components fit one by one but not together: device_map (the transformer and T5
     * each fit 32 GB with the activations, not both) */
    p = plan(&m, 2, 1, 32 * GB, WEFT_LINK_NVLINK, 1024, 1, WEFT_GOAL_LATENCY, "together");
    CHECK(p.device_map && p.pp == 2);
    CHECK(said(&p, "every component fits a device alone"));
    weft_autoplan_cleanup(&p);

    /* a 2048 x 2048 image that fits, one prompt, latency: context parallelism over all 8,
     * Ulysses 8 on one node (it divides the 24 heads) */
    p = plan(&m, 8, 1, 80 * GB, WEFT_LINK_NVLINK, 2048, 1, WEFT_GOAL_LATENCY, "cp");
    CHECK(p.ulysses == 8 && p.ring == 1 && p.tp == 1 && p.dp == 1);
    CHECK(said(&p, "context parallelism") && p.ulysses_bytes > 0);
    /* two nodes of 4: Ulysses inside a node, ring across */
    p = plan(&m, 8, 2, 80 * GB, WEFT_LINK_NVLINK, 2048, 1, WEFT_GOAL_LATENCY, "cp 2 nodes");
    CHECK(p.ulysses == 4 && p.ring == 2);
    CHECK(said(&p, "Ulysses 4 inside a node") && p.ring_bytes > 0);
    /* a small image is not split: its 1024 tokens are too few */
    p = plan(&m, 4, 1, 80 * GB, WEFT_LINK_NVLINK, 512, 1, WEFT_GOAL_LATENCY, "small");
    CHECK(p.ring * p.ulysses == 1 && p.dp == 1 && p.idle == 3);
    CHECK(said(&p, "too few to split"));

    /* weights and activations both too large: the transformer alone (latents out) at
     * 4096 x 4096 on 14 GB devices, NVLink inside nodes of 4: tp 4 (at most a node) holds the
     * weights, not with the activations of 65536 tokens: context parallelism over the nodes */
    struct weft_autoplan_model t;
    flux_dev(&t, false);
    t.clip_bytes = t.t5_bytes = 0;
    memset(t.t5_tp_bytes, 0, sizeof(t.t5_tp_bytes));
    p = plan(&t, 8, 2, 14 * GB, WEFT_LINK_NVLINK, 4096, 1, WEFT_GOAL_LATENCY, "tp x cp");
    CHECK(p.tp == 4 && p.ring == 2 && p.ulysses == 1);
    CHECK(said(&p, "weights and activations both too large"));

    /* five devices: tp must divide the 24 heads (4, one idle); context parallelism over 5:
     * ring (it splits the sequence, not the heads) */
    p = plan(&m, 5, 1, 20 * GB, WEFT_LINK_NVLINK, 1024, 1, WEFT_GOAL_LATENCY, "5 devices tp");
    CHECK(p.tp == 4 && p.idle == 1 && said(&p, "idle"));
    p = plan(&m, 5, 1, 80 * GB, WEFT_LINK_NVLINK, 2048, 1, WEFT_GOAL_LATENCY, "5 devices cp");
    CHECK(p.ring == 5 && p.ulysses == 1 && said(&p, "do not divide by 5"));
    CHECK(p.ring_anything); /* 16384 image tokens do not split by 5 */

    /* nothing fits: refused with the sizes */
    const struct weft_autoplan_devices small = {2, 1, 8 * GB, 0, WEFT_LINK_PCIE};
    const struct weft_autoplan_job job = {1024, 1024, 28, 1, 512, false, WEFT_GOAL_LATENCY};
    CHECK_FAILS(weft_autoplan(&m, &small, &job, &p, TERR), WEFT_ERR_INVALID, "no layout of 2");
    printf("refused: %s\n", weft_error_text(TERR));
    /* bad inputs */
    const struct weft_autoplan_devices none = {0, 1, 8 * GB, 0, WEFT_LINK_PCIE};
    CHECK_FAILS(weft_autoplan(&m, &none, &job, &p, TERR), WEFT_ERR_INVALID, "devices");
    const struct weft_autoplan_job odd = {1000, 1024, 28, 1, 512, false, WEFT_GOAL_LATENCY};
    CHECK_FAILS(weft_autoplan(&m, &small, &odd, &p, TERR), WEFT_ERR_INVALID, "multiples of 16");
    printf("autoplan: every case as the seeds' table decides it\n");
    return 0;
}
