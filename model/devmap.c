/* device_map placement (see devmap.h). */
#include "model/devmap.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/error.h"
#include "model/checkpoint.h"
#include "model/flux.h"
#include "model/model.h"
#include "model/vae.h"

static uint64_t room(const struct weft_devmap *m, int d)
{
    return m->budget[d] - m->used[d];
}

static const char *size_str(uint64_t b, char *buf, size_t len)
{
    if (b >= (1ull << 30))
        snprintf(buf, len, "%.2f GiB", (double)b / (double)(1ull << 30));
    else if (b >= (1ull << 20))
        snprintf(buf, len, "%.1f MiB", (double)b / (double)(1ull << 20));
    else
        snprintf(buf, len, "%" PRIu64 " bytes", b);
    return buf;
}

static uint64_t component_bytes(const struct weft_devmap_component *c)
{
    uint64_t t = 0;
    for (int u = 0; u < c->n_units; u++)
        t += c->units[u].bytes;
    return t;
}

/* Put unit u of component c on device d (or host memory); false when it does not fit. */
static bool put(struct weft_devmap *m, int c, int u, int d)
{
    uint64_t b = m->components[c].units[u].bytes;
    if (d == WEFT_DEVMAP_CPU) {
        if (m->cpu_budget - m->cpu_used < b)
            return false;
        m->cpu_used += b;
    } else {
        if (room(m, d) < b)
            return false;
        m->used[d] += b;
    }
    m->device[c][u] = d;
    return true;
}

static weft_status_t nowhere(const struct weft_devmap *m, int c, int u, struct weft_error *err)
{
    char need[32], left[32], cpu[32];
    uint64_t best = 0;
    for (int d = 0; d < m->n_devices; d++)
        best = room(m, d) > best ? room(m, d) : best;
    return weft_error_refuse_or_log(
        err, WEFT_ERR_INVALID, "devmap",
        "device_map %s: %s (%s) fits nowhere: the most any of the %d device(s) has left is %s, "
        "host memory %s (raise max_memory, add devices, or give cpu:SIZE to spill to host "
        "memory)",
        m->strategy == WEFT_DEVMAP_AUTO ? "auto" : "balanced", m->components[c].units[u].name,
        size_str(m->components[c].units[u].bytes, need, sizeof(need)), m->n_devices,
        size_str(best, left, sizeof(left)),
        m->cpu_budget ? size_str(m->cpu_budget - m->cpu_used, cpu, sizeof(cpu))
                      : "not allowed (no cpu entry in max_memory)");
}

/* auto: units in order fill device 0, then 1, .., then host memory. */
static weft_status_t place_sequential(struct weft_devmap *m, int c, int *dev,
                                      struct weft_error *err)
{
    const struct weft_devmap_component *comp = &m->components[c];
    for (int u = 0; u < comp->n_units; u++) {
        while (*dev < m->n_devices && !put(m, c, u, *dev))
            (*dev)++;
        if (*dev == m->n_devices && !put(m, c, u, WEFT_DEVMAP_CPU))
            return nowhere(m, c, u, err);
    }
    return WEFT_OK;
}

/* balanced split of a component that fits no device whole: device d ends its share at the unit
 * boundary nearest (d + 1) / n of the component's bytes, within its room; the rest, host memory.
 * Returns false (placing nothing) when that leaves a unit nowhere to go. */
static bool place_split(struct weft_devmap *m, int c)
{
    const struct weft_devmap_component *comp = &m->components[c];
    const uint64_t total = component_bytes(comp);
    struct weft_devmap saved = *m;
    uint64_t cum = 0;
    int u = 0;
    for (int d = 0; d < m->n_devices && u < comp->n_units; d++) {
        const double ideal = (double)total * (d + 1) / m->n_devices;
        for (; u < comp->n_units; u++) {
            const uint64_t b = comp->units[u].bytes;
            bool last = d == m->n_devices - 1;
            if (!last && (double)cum + (double)b / 2 > ideal)
                break;
            if (!put(m, c, u, d))
                break;
            cum += b;
        }
    }
    for (; u < comp->n_units; u++) {
        if (!put(m, c, u, WEFT_DEVMAP_CPU)) {
            memcpy(m->used, saved.used, sizeof(m->used));
            m->cpu_used = saved.cpu_used;
            return false;
        }
    }
    return true;
}

weft_status_t weft_devmap_plan(enum weft_devmap_strategy strategy,
                               const struct weft_devmap_component *components, int n_components,
                               int n_devices, const uint64_t *device_room,
                               const struct weft_max_memory *mm, struct weft_devmap *out,
                               struct weft_error *err)
{
    memset(out, 0, sizeof(*out));
    if (strategy == WEFT_DEVMAP_NONE || n_devices < 1 || n_devices > WEFT_DEVMAP_MAX_DEVICES ||
        n_components < 1 || n_components > WEFT_DEVMAP_MAX_COMPONENTS)
        return weft_error_refuse_or_log(err, WEFT_ERR_INVALID, "devmap",
                                        "device_map: nothing to place or %d devices (1..%d)",
                                        n_devices, WEFT_DEVMAP_MAX_DEVICES);
    if (mm && mm->n > n_devices)
        return weft_error_refuse_or_log(err, WEFT_ERR_INVALID, "devmap",
                                        "device_map: max_memory names device %d but there are %d "
                                        "device(s) (0..%d)",
                                        mm->n - 1, n_devices, n_devices - 1);
    out->strategy = strategy;
    out->n_devices = n_devices;
    out->n_components = n_components;
    out->components = components;
    for (int d = 0; d < n_devices; d++) {
        uint64_t b = device_room && device_room[d] ? device_room[d] : UINT64_MAX;
        if (mm && mm->has[d] && mm->device[d] < b)
            b = mm->device[d];
        out->budget[d] = b;
    }
    out->cpu_budget = mm && mm->has_cpu ? mm->cpu : 0;
    for (int c = 0; c < n_components; c++) {
        out->device[c] = weft_calloc((size_t)(components[c].n_units ? components[c].n_units : 1),
                                     sizeof(int));
        if (!out->device[c]) {
            weft_devmap_cleanup(out);
            return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
        }
    }
    weft_status_t st = WEFT_OK;
    if (strategy == WEFT_DEVMAP_AUTO) {
        int dev = 0;
        for (int c = 0; c < n_components && st == WEFT_OK; c++)
            st = place_sequential(out, c, &dev, err);
    } else {
        /* largest first; ties keep pipeline order */
        int order[WEFT_DEVMAP_MAX_COMPONENTS];
        for (int c = 0; c < n_components; c++)
            order[c] = c;
        for (int i = 1; i < n_components; i++)
            for (int k = i; k > 0 && component_bytes(&components[order[k]]) >
                                         component_bytes(&components[order[k - 1]]);
                 k--) {
                int t = order[k];
                order[k] = order[k - 1];
                order[k - 1] = t;
            }
        int turn = 0;
        for (int i = 0; i < n_components && st == WEFT_OK; i++) {
            const int c = order[i], cycle = 2 * n_devices;
            const int d = turn % cycle < n_devices ? turn % cycle : cycle - 1 - turn % cycle;
            const uint64_t b = component_bytes(&components[c]);
            if (room(out, d) >= b) {
                for (int u = 0; u < components[c].n_units; u++)
                    (void)put(out, c, u, d);
                turn++;
                continue;
            }
            int whole = -1; /* another device that holds it whole: the one with the most room */
            for (int k = 0; k < n_devices; k++)
                if (room(out, k) >= b && (whole < 0 || room(out, k) > room(out, whole)))
                    whole = k;
            if (whole >= 0) {
                for (int u = 0; u < components[c].n_units; u++)
                    (void)put(out, c, u, whole);
            } else if (!place_split(out, c)) {
                int dev = 0;
                st = place_sequential(out, c, &dev, err);
            }
        }
    }
    if (st != WEFT_OK)
        weft_devmap_cleanup(out);
    return st;
}

void weft_devmap_cleanup(struct weft_devmap *map)
{
    for (int c = 0; c < WEFT_DEVMAP_MAX_COMPONENTS; c++) {
        weft_free(map->device[c]);
        map->device[c] = NULL;
    }
}

int weft_devmap_exec_device(const struct weft_devmap *map, int c, int u)
{
    for (int k = u; k >= 0; k--)
        if (map->device[c][k] != WEFT_DEVMAP_CPU)
            return map->device[c][k];
    return map->n_devices - 1;
}

bool weft_devmap_range(const struct weft_devmap *map, int c, int d, int *first, int *last)
{
    int f = -1, l = -1;
    for (int u = 0; u < map->components[c].n_units; u++) {
        if (weft_devmap_exec_device(map, c, u) == d) {
            if (f < 0)
                f = u;
            l = u + 1;
        }
    }
    *first = f, *last = l;
    return f >= 0;
}

int weft_devmap_find(const struct weft_devmap *map, const char *name)
{
    for (int c = 0; c < map->n_components; c++)
        if (strcmp(map->components[c].name, name) == 0)
            return c;
    return -1;
}

int weft_devmap_component_device(const struct weft_devmap *map, const char *name)
{
    const int c = weft_devmap_find(map, name);
    return c < 0 ? -1 : weft_devmap_exec_device(map, c, 0);
}

int weft_devmap_decode_device(const struct weft_devmap *map)
{
    const int vae = weft_devmap_component_device(map, "vae");
    if (vae >= 0)
        return vae;
    const int tf = weft_devmap_find(map, "transformer");
    if (tf < 0)
        return -1;
    for (int d = 0; d < map->n_devices; d++) {
        int first, last;
        if (weft_devmap_range(map, tf, d, &first, &last) && last == map->components[tf].n_units)
            return d;
    }
    return -1;
}

weft_status_t weft_devmap_flux_pipeline(const struct weft_flux_config *flux,
                                        const struct weft_ckpt *flux_ck,
                                        const struct weft_vae_config *vae,
                                        const struct weft_ckpt *vae_ck, const uint64_t *text_bytes,
                                        struct weft_devmap_unit **units_p,
                                        struct weft_devmap_component comps[WEFT_DEVMAP_PIPELINE_MAX],
                                        int *n_comps_p, struct weft_error *err)
{
    static const char *const text_names[2] = {"text_encoder", "text_encoder_2"};
    const int n_tf = weft_flux_unit_count(flux);
    size_t n_params = weft_flux_params(flux, NULL);
    struct weft_param *params = weft_calloc(n_params, sizeof(*params));
    /* units: the text encoders', the transformer's, the VAE's */
    struct weft_devmap_unit *units = weft_calloc((size_t)n_tf + 3, sizeof(*units));
    if (!params || !units) {
        weft_free(params), weft_free(units);
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    }
    int n = 0, next = 0; /* components, units */
    for (int k = 0; k < 2; k++) {
        if (!text_bytes || !text_bytes[k])
            continue;
        struct weft_devmap_unit *u = &units[next++];
        snprintf(u->name, sizeof(u->name), "%s", text_names[k]);
        u->bytes = text_bytes[k];
        comps[n++] = (struct weft_devmap_component){text_names[k], u, 1};
    }
    struct weft_devmap_unit *tf = units + next;
    (void)weft_flux_params(flux, params);
    for (int u = 0; u < n_tf; u++) {
        char name[64];
        weft_flux_unit_name(flux, u, name, sizeof(name));
        snprintf(tf[u].name, sizeof(tf[u].name), "transformer.%s", name);
    }
    for (size_t i = 0; i < n_params; i++) {
        int u = weft_flux_param_unit(flux, params[i].name);
        int64_t numel = params[i].ndim == 2 ? params[i].shape[0] * params[i].shape[1]
                                            : params[i].shape[0];
        if (u >= 0)
            tf[u].bytes += weft_ckpt_held_bytes(flux_ck, params[i].name, params[i].ndim, numel);
    }
    weft_free(params);
    comps[n++] = (struct weft_devmap_component){"transformer", tf, n_tf};
    next += n_tf;
    if (vae) {
        struct weft_devmap_unit *u = &units[next++];
        snprintf(u->name, sizeof(u->name), "vae");
        u->bytes = weft_vae_held_bytes(vae, vae_ck, WEFT_VAE_DECODER);
        comps[n++] = (struct weft_devmap_component){"vae", u, 1};
    }
    *n_comps_p = n;
    *units_p = units;
    return WEFT_OK;
}

weft_status_t weft_devmap_plan_model(const struct weft_model *model,
                                     enum weft_devmap_strategy strategy, int n_devices,
                                     const uint64_t *device_room,
                                     const struct weft_max_memory *max_memory,
                                     struct weft_devmap *out, struct weft_devmap_unit **units_p,
                                     struct weft_devmap_component comps[WEFT_DEVMAP_PIPELINE_MAX],
                                     struct weft_error *err)
{
    struct weft_ckpt *ck, *vck = NULL;
    weft_status_t st = weft_ckpt_open(model->transformer_dir, &ck, err);
    if (st != WEFT_OK)
        return st;
    if (model->has_vae && (st = weft_ckpt_open(model->vae_dir, &vck, err)) != WEFT_OK) {
        weft_ckpt_close(ck);
        return st;
    }
    /* the text encoders are placed when the pipeline encodes text with them */
    char why[8];
    const bool text = !weft_model_text_missing(model, why, sizeof(why));
    const uint64_t text_bytes[2] = {text ? model->clip.held_bytes : 0,
                                    text ? model->t5.held_bytes : 0};
    int n_comps = 0;
    st = weft_devmap_flux_pipeline(&model->flux, ck, model->has_vae ? &model->vae : NULL, vck,
                                   text_bytes, units_p, comps, &n_comps, err);
    weft_ckpt_close(ck);
    weft_ckpt_close(vck);
    if (st != WEFT_OK)
        return st;
    st = weft_devmap_plan(strategy, comps, n_comps, n_devices, device_room, max_memory, out, err);
    if (st != WEFT_OK) {
        weft_free(*units_p);
        *units_p = NULL;
    }
    return st;
}

cJSON *weft_devmap_json(const struct weft_devmap *map, const char *const *device_names)
{
    cJSON *o = cJSON_CreateObject();
    for (int c = 0; o && c < map->n_components; c++) {
        for (int u = 0; u < map->components[c].n_units; u++) {
            const int d = map->device[c][u];
            const char *name = map->components[c].units[u].name;
            if (d == WEFT_DEVMAP_CPU)
                cJSON_AddStringToObject(o, name, "cpu");
            else if (device_names)
                cJSON_AddStringToObject(o, name, device_names[d]);
            else
                cJSON_AddNumberToObject(o, name, d);
        }
    }
    return o;
}
