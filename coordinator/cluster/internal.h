/* The cluster runner's inside, shared by its files (everything runs on the coordinator's loop):
 *   bootstrap.c  the worker port: connections, the authenticated bootstrap, control links,
 *                losing a worker
 *   plan.c       the mesh from the workers there are (one layout, or groups of unequal
 *                replicas), device_map, the data-plane rendezvous, assignments and their
 *                answers
 *   dispatch.c   jobs: splitting them over replicas, RUN messages, what workers report, the
 *                progress deadlines, cancel
 *   runner.c     the runner's operations (control/runner.h), the tick, create and destroy */
#ifndef WEFT_COORDINATOR_CLUSTER_INTERNAL_H
#define WEFT_COORDINATOR_CLUSTER_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "common/error.h"
#include "conf/conf.h"
#include "control/boot.h"
#include "control/msg.h"
#include "control/runner.h"
#include "model/autoplan.h"
#include "model/devmap.h"
#include "model/mesh.h"
#include "model/model.h"
#include "transport/comm.h"
#include "transport/link.h"

#define MAX_WORKERS 256          /* workers joined (slots) */
#define MAX_PENDING 64           /* connections still in their bootstrap */
#define MAX_PENDING_PER_ADDR 16  /* of them, from one source address */
#define STOP_WAIT_MS 3000        /* after stop(), how long running jobs may take to stop */
#define LEAVE_WAIT_MS 5000       /* at shutdown, how long the workers may take to close */
#define TICK_MS 20

enum wstate {
    W_FREE,
    W_AUTHED, /* proved the secret, waiting for its link's HELLO */
    W_JOINED, /* control link up */
    W_LEAVING, /* told to SHUTDOWN: waiting for its link to close (weft_cr_shutdown) */
    W_GONE,   /* lost: its connection is closing, the slot is freed when it has */
};

struct cluster_runner;
struct worker;

/* A TCP connection to the worker port. It lives on the heap (libuv holds its handle's address
 * until the close callback) from accept to close; while in its bootstrap it is on the pending
 * list, once authenticated its worker holds it for the worker's lifetime (its end means the
 * process is gone). */
struct conn {
    uv_tcp_t tcp;
    struct cluster_runner *r;
    struct worker *w; /* NULL during the bootstrap */
    char peer[64];    /* source address */
    char challenge[WEFT_BOOT_HEX];
    uint8_t *rbuf;
    size_t rlen, rcap;
    double since;
    bool closing;
    struct conn *next; /* the pending list */
};

struct worker {
    struct cluster_runner *r;
    enum wstate state;
    char id[WEFT_MSG_ID_MAX], host[256];
    long pid;
    cJSON *hello; /* the inventory it reported */
    struct conn *conn;
    struct weft_link *link;
    double last_heard;
    /* the current plan */
    int rank; /* world rank, -1 when outside the mesh */
    int replica, decode, assigned;
    int group; /* the plan group of its last assignment, kept over a reset (-1 none) */
    uint64_t transformer_bytes, vae_bytes, text_bytes;
    int threads; /* its kernel threads, as its assignment left them */
};

struct job_run {
    uint64_t key;
    bool active;
    int pending; /* replicas still running */
    weft_status_t status;
    char reason[320];
    bool reason_peer; /* reason is a rank's report of another's failure (weft_error_peer) */
    char out_dir[WEFT_CONF_PATH + 64];
    char id[WEFT_MSG_JOB_ID_MAX];
    /* progress: the deadline is the last report + max(stall_timeout, 10 x the longest step) */
    double started, last_progress, longest_step;
    bool blocking; /* auto: it ran when the mesh began to drain for a switch (the reservation) */
    int devices;   /* the workers of the replicas it runs on */
    /* what it is and what its images took, for auto's cost record (weft_cr_auto_record): its
     * shape, a replica's workers, and the seconds its decoding ranks reported per image */
    int64_t height, width, steps;
    bool cfg;
    int per;
    int64_t images_done;
    double denoise_s, decode_s;
};

/* What a replica's job has left, for auto's backfill (auto.c): its images [first, first +
 * count), each of steps steps and its decode (counted as one more step: WEFT_CR_DECODE_STEPS),
 * the image-steps reported done, the work of one image-step (pixels; twice that with true
 * CFG). */
#define WEFT_CR_DECODE_STEPS 1
struct replica_work {
    int64_t first, count, steps, done;
    double unit;
};

/* The work of one image-step of a height x width image, in replica_work's units. */
static inline double weft_cr_step_work(int64_t height, int64_t width, bool true_cfg)
{
    return (double)height * (double)width * (true_cfg ? 2.0 : 1.0);
}

/* The work of `images` such images of `steps` steps, each one's decode counted as a step. */
static inline double weft_cr_job_work(int64_t height, int64_t width, bool true_cfg, int64_t steps,
                                      int64_t images)
{
    return weft_cr_step_work(height, width, true_cfg) * (double)images *
           (double)(steps + WEFT_CR_DECODE_STEPS);
}

/* What one completed job cost, in device-seconds (seconds times the workers of its replicas),
 * for auto's stream estimate (auto.c): a denoising step per FLOP the planner counts in it
 * (weft_autoplan_step_flops), an image's decode per pixel, and the rest of the job whatever its
 * size (its text encoding, messages and PNG files, the waits between). A ring of the last
 * WEFT_CR_COSTS. */
#define WEFT_CR_COSTS 16
struct weft_cr_cost {
    double per_flop, per_pixel, fixed;
};

/* The device-seconds a job of `images` images of `steps` steps (each step_flops, each image
 * `pixels`) takes at the medians of costs[0, n) taken apart: a small job's fixed costs do not
 * make a large one's steps look dear. 0 when n is 0. */
double weft_cr_cost_predict(const struct weft_cr_cost *costs, int n, double step_flops,
                            double pixels, int64_t steps, int64_t images);

/* A plan's replicas: groups, each mesh.dp replicas of its layout. The groups take the world's
 * ranks in order (group g's first rank, its mesh's world_base, is the count of the earlier
 * groups' workers), and the replica numbers likewise. One group but with [parallel] groups;
 * auto plans one. */
#define WEFT_CR_GROUPS WEFT_LAYOUT_GROUPS_MAX
struct cr_plan {
    int n;
    struct weft_layout g[WEFT_CR_GROUPS];
};

/* Whether [parallel] sets a degree (mode = auto and groups set them themselves). */
static inline bool weft_cr_degrees_set(const struct weft_conf_parallel *p)
{
    return p->tp_degree > 1 || p->ulysses_degree > 1 || p->ring_degree > 1 ||
           p->dp_degree > 1 || p->cfg_degree > 1;
}

/* The replicas of p, and the workers they take. */
int weft_cr_plan_replicas(const struct cr_plan *p);
int weft_cr_plan_workers(const struct cr_plan *p);
/* The group of replica rep (-1 outside p), its first replica and its first world rank. */
int weft_cr_plan_group(const struct cr_plan *p, int rep, int *rep0_p, int *base_p);
/* "dp 1 x ring 1 x ulysses 2 x tp 1 + dp 2 x ring 1 x ulysses 1 x tp 1" */
void weft_cr_plan_name(const struct cr_plan *p, char *buf, size_t len);

struct comm_total {
    char group[WEFT_MSG_LABEL_MAX], op[WEFT_MSG_LABEL_MAX];
    double seconds, bytes, calls;
};

struct cluster_runner {
    struct weft_runner base;
    uv_loop_t *loop;
    struct weft_runner_sink *sink;
    const struct weft_conf *conf;
    const struct weft_model *model;
    struct cr_plan plan;       /* of [parallel] / [device_map] or its groups, or auto's want */
    struct weft_layout check;  /* what the coordinator checks jobs against (layout()) */
    char model_dir[WEFT_CONF_PATH], secret[WEFT_CONF_STR], listen_host[256];
    uv_tcp_t *server; /* the worker port (its own allocation: freed by its close) */
    uv_poll_t link_poll;
    uv_timer_t tick;
    double next_ping;
    struct weft_link_host *host;
    struct worker w[MAX_WORKERS];
    int next_id;
    /* the bootstrap */
    struct conn *pending;
    int n_pending;
    bool accept_stalled;      /* a connection waits in libuv for memory to accept it */
    uint64_t refused, refused_logged;
    double refused_log_at;
    /* planning */
    uint64_t epoch;
    bool planned, assigning;
    char plan_error[WEFT_ERROR_MSG + 64]; /* why the workers there are cannot serve */
    struct cr_plan mesh; /* as planned: plan's groups with the replicas the workers fill (fewer
                            after losses) */
    int n_mesh;          /* its workers */
    int started_group;   /* the group of the job start() took last */
    int mesh_group[WEFT_CR_GROUPS]; /* the plan's group each group of the mesh is */
    /* device_map: the placement of the current plan (map.n_devices 0: none) */
    struct weft_devmap map;
    struct weft_devmap_unit *map_units;
    struct weft_devmap_component map_comps[WEFT_DEVMAP_PIPELINE_MAX];
    struct weft_rdv_server *rdv;
    uv_poll_t rdv_poll;
    bool rdv_poll_open;
    /* jobs run side by side, each on its own data-parallel replicas */
    struct job_run jobs[MAX_WORKERS];
    int replica_job[MAX_WORKERS]; /* per replica: its job's index in jobs, -1 free */
    struct replica_work rep_work[MAX_WORKERS];
    bool stopping, closed;
    double stop_deadline; /* stopping: jobs not finished by then are given up */
    uint64_t jobs_done, images_done, workers_lost, jobs_stalled;
    /* the workers' collectives, summed over jobs and ranks, per process-group kind and op */
    struct comm_total comm[32];
    int n_comm;
    uint64_t prompt_cache_hits, prompt_cache_misses; /* reported by the encoding ranks */
    /* [parallel] mode = auto (auto.c): the layout the queue's head wants; while switching, new
     * jobs wait for the mesh to drain, then it is planned with want, except a head that fits
     * before the drain (backfill: it runs on a free replica of the mesh as it is) */
    bool auto_mode, want_set, switching, backfill;
    char backfill_why[320];
    struct weft_autoplan_model am;
    struct cr_plan want;
    char want_why[640], layout_why[640]; /* the planner's reasons for want, for the layout */
    uint64_t replans;    /* plans after the first */
    uint64_t backfilled; /* jobs started on the mesh as it is while it drained for a switch */
    uint64_t kept_bytes; /* weights workers kept over a new plan instead of loading them */
    /* what plans cost, measured: when the current one began, the bytes its workers kept, the
     * seconds of the last plan that kept every worker's weights, and the bytes a rank read
     * per second in the last one that read weights (0: none yet) */
    double plan_started, plan_kept_s, load_bps;
    uint64_t plan_kept;
    /* what the last jobs that completed cost: auto's stream estimate */
    struct weft_cr_cost costs[WEFT_CR_COSTS];
    uint64_t n_costs;
};

double weft_cr_now(void);
void weft_cr_post_capacity(struct cluster_runner *r);
/* Encode and send a message to a joined worker. */
weft_status_t weft_cr_send(struct worker *w, unsigned type, const union weft_msg *msg);

/* bootstrap.c */
weft_status_t weft_cr_listen(struct cluster_runner *r, const char *listen, const char *port_file,
                             struct weft_error *err);
void weft_cr_on_accept(struct weft_link_host *host, struct weft_link *link, void *arg);
/* The worker is gone (its process ended, it fell silent, it broke the protocol): its jobs
 * stop, the mesh is planned again without it. */
void weft_cr_worker_lost(struct worker *w, const char *why);
void weft_cr_conn_close(struct conn *c);
/* Bootstrap deadlines and the refusal summary (every tick). */
void weft_cr_boot_tick(struct cluster_runner *r, double now);
/* Close the worker port and every connection. */
void weft_cr_boot_close(struct cluster_runner *r);

/* plan.c */
void weft_cr_plan_maybe(struct cluster_runner *r);
/* The mesh breaks (a worker lost, an assignment failed, a job stalled): everyone drops it. */
void weft_cr_plan_reset(struct cluster_runner *r);
void weft_cr_on_assigned(struct cluster_runner *r, struct worker *w,
                         const struct weft_msg_assigned *m);
void weft_cr_rdv_close(struct cluster_runner *r);
void weft_cr_rdv_progress(struct cluster_runner *r);
void weft_cr_devmap_drop(struct cluster_runner *r);
int weft_cr_joined(const struct cluster_runner *r);
/* Workers past their bootstrap whose control link has not said hello yet. */
int weft_cr_authed(const struct cluster_runner *r);

/* The host a worker runs on, as its inventory names it: the kernel's boot id, else its name. */
const char *weft_cr_host_key(const struct worker *w);

/* auto.c */
/* [parallel] mode = auto: check the configuration, open the planner's view of the model and
 * start from one replica per worker. A no-op in fixed mode. */
weft_status_t weft_cr_auto_init(struct cluster_runner *r, struct weft_error *err);
void weft_cr_auto_cleanup(struct cluster_runner *r);
/* Record what jr, just completed, cost (auto mode only). */
void weft_cr_auto_record(struct cluster_runner *r, const struct job_run *jr);
void weft_cr_demand(struct weft_runner *base, const struct weft_runner_demand *d);
const char *weft_cr_layout_reason(struct weft_runner *base);
/* Before a plan: the layout it takes (want, or for the first plan one chosen for a stream of
 * the model's default images). A no-op in fixed mode. */
void weft_cr_auto_prepare(struct cluster_runner *r);
/* auto: when the mesh is switching and drained, plan it again with the layout the queue wants;
 * true when it did. */
bool weft_cr_auto_switch(struct cluster_runner *r);

/* dispatch.c */
/* The group of p a job of height x width runs on, among the open ones (NULL: all; -1 when none
 * is): the one whose devices per replica come nearest to the context-parallel ranks its image
 * pays for (weft plan's rule: WEFT_AUTOPLAN_MIN_TOKENS_PER_RANK image tokens a rank) without
 * exceeding them, else the one with the fewest. */
int weft_cr_route(const struct cluster_runner *r, const struct cr_plan *p, int64_t height,
                  int64_t width, const bool *open);
weft_status_t weft_cr_start(struct weft_runner *base, const struct weft_runner_job *job,
                            struct weft_error *err);
void weft_cr_cancel(struct weft_runner *base, uint64_t key);
int weft_cr_active_jobs(const struct cluster_runner *r);
int weft_cr_free_replicas(const struct cluster_runner *r);
/* The work the replicas of the blocking jobs have left until the last of them is free (the
 * drain), in the units of struct replica_work; backfilled jobs do not move it. */
double weft_cr_drain_work(const struct cluster_runner *r);
void weft_cr_job_fail(struct job_run *jr, weft_status_t st, const char *reason);
void weft_cr_job_finish(struct cluster_runner *r, struct job_run *jr);
/* Every running job stops: the mesh is being planned again (lost is the worker whose loss
 * caused it, NULL for another cause given in why). */
void weft_cr_jobs_interrupt(struct cluster_runner *r, const struct worker *lost,
                            weft_status_t st, const char *why);
void weft_cr_on_msg(struct weft_link *link, uint16_t type, const void *data, size_t len,
                    void *arg);
/* Jobs past their progress deadline, and jobs that outlive a stop. */
void weft_cr_jobs_tick(struct cluster_runner *r, double now);

/* runner.c */
void weft_cr_shutdown(struct cluster_runner *r);
void weft_cr_leave(struct worker *w); /* SHUTDOWN sent: W_LEAVING */

#endif
