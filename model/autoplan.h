/* Choosing the strategy (`weft plan --auto`): from a model's sizes and shapes, the devices and
 * the job, the degrees dp x ring x ulysses x tp or a device_map, what each device will hold,
 * what the ranks send per denoising step, and the reasons, one line each, in the terms of the
 * rule they follow:
 *
 *   the model fits one device            data parallelism: one replica per device (a stream of
 *                                        prompts), or, for the latency of few prompts on a large
 *                                        image, context parallelism over the spare devices
 *   activations are the problem          context parallelism, the smallest degree that fits:
 *                                        Ulysses inside a node (it divides the heads), ring
 *                                        across nodes
 *   one component's weights do not fit   tensor parallelism when the devices talk over NVLink
 *                                        (it trades weight memory for an all-reduce per block);
 *                                        device_map over PCIe or a network (one hand-over per
 *                                        stage boundary)
 *   the components fit one by one,       device_map
 *   not together
 *   weights and activations both         tensor x context parallelism
 *
 * Pure arithmetic over the model layer's own formulas (the transformer's and the VAE's
 * activation reservations, the tensor-parallel plan's bytes per rank, device_map's placement):
 * shared by the CLI and, later, the coordinator; nothing is loaded. With a device rate
 * (weft_autoplan_devices.flops) the spare devices of a latency job are split by the predicted
 * step time (weft_autoplan_time) instead of the tokens-per-rank rule. */
#ifndef WEFT_MODEL_AUTOPLAN_H
#define WEFT_MODEL_AUTOPLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "model/devmap.h"
#include "model/flux.h"
#include "model/vae.h"

#define WEFT_AUTOPLAN_TP_MAX 64 /* tensor-parallel degrees considered: 1..64 */
#define WEFT_AUTOPLAN_REASONS 12
/* Image tokens a context-parallel rank needs for the split to pay without a device rate: below
 * it, the messages outweigh the compute (bench cp: 1.74x on 2 ranks at 32x32 tokens). */
#define WEFT_AUTOPLAN_MIN_TOKENS_PER_RANK 1024

enum weft_interconnect { WEFT_LINK_NONE, WEFT_LINK_PCIE, WEFT_LINK_NVLINK };
enum weft_goal { WEFT_GOAL_LATENCY, WEFT_GOAL_THROUGHPUT };

/* "none", "pcie", "nvlink"; -1 for another word. */
int weft_link_parse(const char *s);
const char *weft_link_name(enum weft_interconnect link);

/* The model as the planner sees it. weft_autoplan_model_open fills it from a folder; tests may
 * fill it by hand. Bytes are as held (weft_ckpt_held_bytes). */
struct weft_autoplan_model {
    struct weft_flux_config flux;
    bool has_vae;
    struct weft_vae_config vae;
    uint64_t transformer_bytes, clip_bytes, t5_bytes, vae_bytes; /* 0: absent */
    /* tp_bytes[t]: the transformer's bytes on each rank at tp degree t (0: the plan does not
     * resolve at t); tp_allreduces[t] the all-reduces of one forward pass */
    uint64_t tp_bytes[WEFT_AUTOPLAN_TP_MAX + 1];
    int tp_allreduces[WEFT_AUTOPLAN_TP_MAX + 1];
    uint64_t t5_tp_bytes[WEFT_AUTOPLAN_TP_MAX + 1]; /* T5's per rank (0: runs whole) */
    /* device_map's components (weft_devmap_flux_pipeline) */
    struct weft_devmap_component comps[WEFT_DEVMAP_PIPELINE_MAX];
    int n_comps;
    struct weft_devmap_unit *units; /* owned when opened from a folder */
    int64_t side_unit;              /* image sides are multiples of it (pixels per token: /2) */
};

struct weft_model;
weft_status_t weft_autoplan_model_open(const struct weft_model *model,
                                       struct weft_autoplan_model *out, struct weft_error *err);
void weft_autoplan_model_cleanup(struct weft_autoplan_model *m);

struct weft_autoplan_devices {
    int n;                /* devices in all */
    int nodes;            /* hosts they are spread over, evenly (1: one host) */
    uint64_t memory;      /* each device's */
    uint64_t host_memory; /* room for device_map to spill to host memory; 0: none */
    enum weft_interconnect link;  /* between the devices of one host (hosts: a network) */
    /* for the predicted step time (0: unknown) */
    double flops;        /* one device's dense rate, FLOP/s; 0: no time is predicted */
    double link_bps;     /* what a rank sends per second to a device of its host; 0: the
                          * link's nominal figure (NVLink 300 GB/s, PCIe 24, none 10) */
    double link_latency; /* seconds a collective costs beyond its bytes; 0: nominal (NVLink
                          * 10 us, PCIe 20, none 30) */
};

/* Between hosts the planner counts a network of 12.5 GB/s (100 Gb/s) and 30 us a call. */
#define WEFT_AUTOPLAN_NET_BPS 12.5e9
#define WEFT_AUTOPLAN_NET_LATENCY 30e-6

struct weft_autoplan_job {
    int64_t height, width, steps, prompts, text_tokens;
    bool cfg; /* true classifier-free guidance: two transformer passes a step */
    enum weft_goal goal;
};

/* What one device holds, in bytes. */
struct weft_autoplan_memory {
    uint64_t weights, activations, workspace;
};

/* One denoising step of one prompt on its replica, predicted, seconds: the first rank's share
 * of the transformer's operations (weft_flux_flops) at the device's rate, and each kind of
 * collective as its calls' latency plus its bytes at the link's rate (the network's where the
 * group spans hosts), nothing overlapped. All 0 when the device rate is unknown. */
struct weft_autoplan_time {
    double compute, tp, ulysses, ring, stage, cfg, total;
};

struct weft_autoplan {
    int dp, cfg, ring, ulysses, tp;
    bool ulysses_anything, ring_anything; /* a degree that does not divide what it splits */
    bool device_map;                      /* a replica of pp devices placed by balanced */
    int pp;                               /* devices per replica with device_map, else 1 */
    int idle;                             /* devices left out */
    struct weft_devmap map;               /* with device_map: the placement (cleanup frees) */
    /* the device that holds the most (the replica's first rank: the text encoders and the VAE
     * with the transformer's share; with device_map the fullest stage) */
    struct weft_autoplan_memory peak;
    int peak_device;
    /* one rank's sends in one denoising step, bytes: tensor-parallel all-reduces, Ulysses
     * all-to-alls, ring exchanges, device_map hand-overs, CFG parallelism's exchange of the
     * halves' predictions */
    double tp_bytes, ulysses_bytes, ring_bytes, stage_bytes, cfg_bytes;
    int tp_allreduces; /* per step */
    int ulysses_calls, ring_calls, stage_calls, cfg_calls;
    struct weft_autoplan_time time;
    char reasons[WEFT_AUTOPLAN_REASONS][240];
    int n_reasons;
};

/* The transformer's floating-point operations in one denoising step of one of job's prompts on
 * one device (weft_flux_flops; twice that with true CFG): what the predicted step time and the
 * coordinator's measured cost per FLOP are counted in. */
double weft_autoplan_step_flops(const struct weft_autoplan_model *m,
                                const struct weft_autoplan_job *job);

/* Choose. Fails (naming what cannot fit where) when no layout fits the devices. */
weft_status_t weft_autoplan(const struct weft_autoplan_model *m,
                            const struct weft_autoplan_devices *dev,
                            const struct weft_autoplan_job *job, struct weft_autoplan *out,
                            struct weft_error *err);
void weft_autoplan_cleanup(struct weft_autoplan *p);

/* Every layout of one replica over exactly k devices that fits them (tp x ulysses x ring = k,
 * with a CFG job and k even also cfg 2 x tp x ulysses x ring, and device_map over k when
 * k > 1), fastest predicted step first (by memory when the rate is
 * unknown); at most max, returns how many. The rules of weft_autoplan choose; this shows what
 * the cost model thinks of the alternatives (weft plan --auto --rank, weft bench plan). */
struct weft_autoplan_candidate {
    int cfg, ring, ulysses, tp, pp;
    bool device_map, anything;
    struct weft_autoplan_memory peak;
    struct weft_autoplan_time time;
    double bytes; /* a rank sends per step */
};
int weft_autoplan_rank(const struct weft_autoplan_model *m,
                       const struct weft_autoplan_devices *dev,
                       const struct weft_autoplan_job *job, int k,
                       struct weft_autoplan_candidate *out, int max);

/* The memory of one layout's fullest device (device_map excluded): what the choice compares. */
struct weft_autoplan_memory weft_autoplan_memory_of(const struct weft_autoplan_model *m,
                                                    const struct weft_autoplan_job *job, int ring,
                                                    int ulysses, int tp);

#endif
