/* device_map placement: which device holds each part of a pipeline (Diffusers' device_map, the
 * hf_device_map it produces). Pure arithmetic over byte counts, shared by the coordinator (to
 * plan before anything loads, and `weft plan`) and nothing else; the workers receive its result.
 *
 * A pipeline is a list of components in execution order (the text encoders, the transformer,
 * the VAE); a component is a list of units in execution order (for the transformer: its
 * embedders, each block, its output layers; a text encoder or the VAE is one unit). Devices are numbered 0..n-1 (the workers of
 * one replica, in rank order); WEFT_DEVMAP_CPU is host memory.
 *
 *   balanced  components, largest first, go to the devices in the order 0, 1, .., n-1, n-1, ..,
 *             0, 0, 1, .. (Diffusers' pipeline-level "balanced"), each to its turn's device when
 *             it fits there (the turn passes only when it does). A component that fits no device
 *             whole is split by units over every device, each device's share as even as the
 *             unit sizes allow and within its room; what fits nowhere goes to host memory when
 *             max_memory gives it room.
 *   auto      every unit in execution order fills device 0, then 1, .., then host memory
 *             (Accelerate's "auto" / "sequential": the first device first).
 *
 * A unit never straddles devices; a component's units on devices are always in device order
 * (stage k's units come before stage k+1's), so a split component is a layer pipeline. Units
 * placed in host memory run on the last device that holds units of the same component before
 * them (or device n-1), from host memory. */
#ifndef WEFT_MODEL_DEVMAP_H
#define WEFT_MODEL_DEVMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#include "common/error.h"
#include "conf/conf.h"

#define WEFT_DEVMAP_MAX_DEVICES WEFT_MAX_MEMORY_DEVICES
#define WEFT_DEVMAP_CPU (-1)

enum weft_devmap_strategy { WEFT_DEVMAP_NONE, WEFT_DEVMAP_BALANCED, WEFT_DEVMAP_AUTO };

/* max_memory (struct weft_max_memory, conf/conf.h): a device without an entry is bounded by
 * what it reports (its memory), host memory by the cpu entry only: no cpu entry, no spilling
 * to host memory. */

struct weft_devmap_unit {
    char name[80];  /* e.g. "transformer.transformer_blocks.3", "vae" */
    uint64_t bytes; /* as loaded */
};

struct weft_devmap_component {
    const char *name;
    const struct weft_devmap_unit *units;
    int n_units;
};

#define WEFT_DEVMAP_MAX_COMPONENTS 8

struct weft_devmap {
    enum weft_devmap_strategy strategy;
    int n_devices, n_components;
    const struct weft_devmap_component *components; /* the caller's, as given to plan */
    int *device[WEFT_DEVMAP_MAX_COMPONENTS];        /* per unit: device or WEFT_DEVMAP_CPU */
    uint64_t used[WEFT_DEVMAP_MAX_DEVICES], budget[WEFT_DEVMAP_MAX_DEVICES];
    uint64_t cpu_used, cpu_budget;
};

/* Place the components on n_devices devices of the given room (device_room[d]: what device d
 * has, e.g. its memory; 0 for unknown, which counts as unlimited), bounded further by max_memory.
 * Fails with a one-line error naming the unit that fits nowhere, its size and the room left
 * (the configuration's fault: in err, or logged at ERROR with NULL err). */
weft_status_t weft_devmap_plan(enum weft_devmap_strategy strategy,
                               const struct weft_devmap_component *components, int n_components,
                               int n_devices, const uint64_t *device_room,
                               const struct weft_max_memory *max_memory, struct weft_devmap *out,
                               struct weft_error *err);
void weft_devmap_cleanup(struct weft_devmap *map);

/* Where unit u of component c runs: its device, or for host memory the device that executes
 * it (see above). */
int weft_devmap_exec_device(const struct weft_devmap *map, int c, int u);
/* The units [*first, *last) of component c that device d executes (host-memory units
 * included); false when it executes none. */
bool weft_devmap_range(const struct weft_devmap *map, int c, int d, int *first, int *last);

/* Components of FLUX.1's pipeline, in execution order: the text encoders (when the pipeline
 * encodes text), the transformer, the VAE. */
#define WEFT_DEVMAP_PIPELINE_MAX 4

/* FLUX.1's pipeline as components: "text_encoder" (CLIP) and "text_encoder_2" (T5), one unit
 * each, when text_bytes gives their held bytes (NULL or 0: absent); "transformer" (its units,
 * model/flux.h); and, when vae is given, "vae" (the decoder: one unit). Each parameter is
 * counted at the bytes the worker holds it in (weft_ckpt_held_bytes: a weight matrix as its
 * checkpoint stores it, vectors f32; a NULL checkpoint counts everything f32). *units_p
 * (weft_free) backs comps[k].units; *n_comps_p gets 1 to 4. */
struct weft_ckpt;
struct weft_flux_config;
struct weft_vae_config;
weft_status_t weft_devmap_flux_pipeline(const struct weft_flux_config *flux,
                                        const struct weft_ckpt *flux_ck,
                                        const struct weft_vae_config *vae,
                                        const struct weft_ckpt *vae_ck, const uint64_t *text_bytes,
                                        struct weft_devmap_unit **units_p,
                                        struct weft_devmap_component comps[WEFT_DEVMAP_PIPELINE_MAX],
                                        int *n_comps_p, struct weft_error *err);

/* An opened model's pipeline (a pipeline folder: its text encoders when it can encode text,
 * the transformer and the VAE; a transformer folder: the transformer alone), planned as
 * weft_devmap_plan does. The map points into *units_p and comps (the caller's), which must
 * outlive it; weft_free(*units_p) after weft_devmap_cleanup. */
struct weft_model;
weft_status_t weft_devmap_plan_model(const struct weft_model *model,
                                     enum weft_devmap_strategy strategy, int n_devices,
                                     const uint64_t *device_room,
                                     const struct weft_max_memory *max_memory,
                                     struct weft_devmap *out, struct weft_devmap_unit **units_p,
                                     struct weft_devmap_component comps[WEFT_DEVMAP_PIPELINE_MAX],
                                     struct weft_error *err);

/* The index of the component called name, or -1. */
int weft_devmap_find(const struct weft_devmap *map, const char *name);

/* The device that runs a one-unit component (a text encoder, the VAE; its exec device), or -1
 * when the map has no such component. */
int weft_devmap_component_device(const struct weft_devmap *map, const char *name);

/* The device that decodes the images: the VAE's, or without a VAE in the map the one that runs
 * the transformer's last unit (the stage the latents end on); -1 when the map has neither. */
int weft_devmap_decode_device(const struct weft_devmap *map);

/* The map as hf_device_map has it: {"transformer.embedders": label, ...}, where the label is
 * device_names[d] (NULL: the index as a number) or "cpu". */
cJSON *weft_devmap_json(const struct weft_devmap *map, const char *const *device_names);

#endif
