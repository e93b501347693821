/* weft configuration: INI sections into typed, validated, read-only structs.
 *
 * One declarative table per section (name, type, default, bounds, doc) drives parsing,
 * validation, `weft --dump-config` and the generated conf/weft.example.ini.
 * Precedence: default < INI file < WEFT_<SECTION>_<KEY> environment < --section.key=value.
 * Unknown sections or keys, bad values, out-of-range values and duplicate keys are errors that
 * name the file and line (or the variable, or the option) and the offending text. */
#ifndef WEFT_CONF_CONF_H
#define WEFT_CONF_CONF_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common/status.h"

#define WEFT_CONF_STR 256
#define WEFT_CONF_PATH 1024

struct weft_conf_log {
    int level;  /* enum weft_log_level */
    int format; /* enum weft_log_format: text, json */
};

struct weft_conf_model {
    char path[WEFT_CONF_PATH];
    int dtype; /* compute dtype: enum weft_dtype (f32, bf16, f16) */
    uint64_t prompt_cache; /* bytes of encoded prompts kept by the rank that encodes text */
};

struct weft_conf_kernels {
    int64_t threads;
};

/* [worker]: the device this process computes on (weft worker, weft generate, weft serve's local
 * runner): "cpu", "cuda:N" ("cuda" is cuda:0), "auto" (the GPU of the launcher's local rank
 * when there are GPUs, else the CPU) or "cpu-devmem" (the CPU with device-like memory, for
 * tests). Only the syntax is checked here; kernels/kernels.h resolves it. */
struct weft_conf_worker {
    char device[64];
    uint64_t memory; /* the budget the worker reports (0: its device's memory) */
};

/* Orders match the names of [parallel] mode. */
enum weft_parallel_mode { WEFT_PARALLEL_FIXED, WEFT_PARALLEL_AUTO };

struct weft_conf_parallel {
    int mode; /* enum weft_parallel_mode */
    int goal; /* enum weft_goal (model/autoplan.h): latency, throughput; mode = auto's */
    int64_t tp_degree;
    int64_t ulysses_degree;
    int64_t ring_degree;
    int64_t dp_degree;
    int64_t cfg_degree; /* 1 or 2: CFG-parallel halves of a replica */
    bool ulysses_anything;
    bool ring_anything;
    int ring_rotation; /* enum weft_ring_rotation: allgather, p2p */
    int tp_load;       /* sharded, full (read everything, then keep the local shards) */
    char groups[WEFT_CONF_STR]; /* replica groups of unequal layouts ("" one layout) */
};

/* Orders of allreduce_algo match enum weft_comm_algo in transport/comm.h. */
struct weft_conf_transport {
    char tls[WEFT_CONF_STR];
    uint64_t chunk_bytes;
    int64_t pipeline_depth;
    int allreduce_algo;
    uint64_t allreduce_direct_max;
    int64_t timeout_ms;
    int64_t spin_us;
    bool shm;
    uint64_t shm_max;
};

/* [cluster]: how workers find and join the coordinator (weft serve --cluster, weft worker,
 * weft run). */
struct weft_conf_cluster {
    char listen[WEFT_CONF_STR]; /* the coordinator's worker port, "host:port" */
    char secret[WEFT_CONF_STR];
    char secret_file[WEFT_CONF_PATH];
    int64_t workers;            /* ranks in the mesh; 0: the product of [parallel] degrees */
    int64_t heartbeat_ms;
    int64_t worker_timeout_ms;  /* silent this long: lost */
    int64_t join_timeout_ms;    /* a worker gives up reaching the coordinator after this */
    int64_t stall_timeout_ms;   /* a running job with no progress this long is taken back */
};

/* [device_map]: placing a pipeline's components (and a transformer's blocks) on the devices of
 * a replica (model/devmap.h). */
struct weft_conf_device_map {
    int strategy;                   /* enum weft_devmap_strategy: none, balanced, auto */
    char max_memory[WEFT_CONF_STR]; /* "0:16GiB, 1:16GiB, cpu:64GiB" */
};

/* The devices `weft plan --auto` plans for when its options do not say (model/autoplan.h). */
struct weft_conf_plan {
    int64_t devices;      /* 0: not described (give --devices or --server) */
    uint64_t device_memory;
    int interconnect;     /* enum weft_interconnect: none, pcie, nvlink */
    int64_t nodes;
    uint64_t host_memory; /* 0: no spilling to host memory */
    int64_t device_gflops;   /* for the predicted step time; 0: unknown */
    uint64_t link_bandwidth; /* bytes per second; 0: the interconnect's nominal */
    int64_t link_latency_us; /* 0: the interconnect's nominal */
};

/* max_memory parsed: a bound per device index and for host memory ("cpu"). */
#define WEFT_MAX_MEMORY_DEVICES 64
struct weft_max_memory {
    int n; /* 1 + the largest device index given */
    uint64_t device[WEFT_MAX_MEMORY_DEVICES];
    bool has[WEFT_MAX_MEMORY_DEVICES];
    uint64_t cpu;
    bool has_cpu;
};
/* Parse "DEVICE:SIZE, ..." (DEVICE an index or cpu; sizes as every size key); empty is no
 * bound. err gets a one-line reason. */
weft_status_t weft_conf_parse_max_memory(const char *text, struct weft_max_memory *out,
                                         char *err, size_t err_len);

/* [api]: the coordinator's job API (weft serve) and its clients (weft submit, weft status). */
struct weft_conf_api {
    char listen[WEFT_CONF_PATH]; /* "host:port" or "unix:/path" */
    char token[WEFT_CONF_STR];
    uint64_t max_body;
    uint64_t max_header;
    int64_t max_prompts;
    int64_t max_images;
    int64_t max_pixels;
    int64_t max_steps;
    int64_t max_queue;
    int64_t max_connections;
    int64_t idle_timeout_ms;
    int64_t header_timeout_ms;
    int64_t request_timeout_ms;
    char state_dir[WEFT_CONF_PATH];   /* resolved by weft_conf_load when empty */
    char journal_dir[WEFT_CONF_PATH]; /* resolved: state_dir/journal; "none": no journal */
    char output_dir[WEFT_CONF_PATH];  /* resolved: state_dir/jobs */
    uint64_t journal_compact;
    int64_t keep_jobs;
    int64_t max_attempts;
    int64_t shutdown_grace_ms;
    char cors_origins[WEFT_CONF_STR];
    int64_t image_quality;
    int64_t events_keepalive_ms;
    int64_t sync_timeout_ms;
    bool access_log;
};

/* [tp_plan]: a free-form map of module globs to tensor-parallel styles, validated by the plan
 * code (model/plan.h), which reports errors with each entry's origin (file:line, option). */
#define WEFT_CONF_MAP_MAX 64
struct weft_conf_entry {
    char key[128];
    char value[128];
    char origin[160];
};
struct weft_conf_map {
    int n;
    struct weft_conf_entry e[WEFT_CONF_MAP_MAX];
};

struct weft_conf {
    struct weft_conf_log log;
    struct weft_conf_model model;
    struct weft_conf_kernels kernels;
    struct weft_conf_worker worker;
    struct weft_conf_parallel parallel;
    struct weft_conf_transport transport;
    struct weft_conf_api api;
    struct weft_conf_cluster cluster;
    struct weft_conf_device_map device_map;
    struct weft_conf_plan plan;
    struct weft_conf_map tp_plan;
    char source[WEFT_CONF_PATH]; /* the INI file read ("" none), for --dump-config */
};

/* Whether text names a device ([worker] device's syntax); a one-line reason in why when not. */
bool weft_conf_device_ok(const char *text, char *why, size_t why_len);
/* An address to listen on or connect to: host:port (a name, a dotted IPv4 address or [IPv6]; a
 * port of 0..65535) or unix:PATH; false with why filled otherwise. */
bool weft_conf_addr_ok(const char *text, char *why, size_t why_len);

/* Fill every key with its default. */
void weft_conf_defaults(struct weft_conf *conf);

/* Defaults, then the INI file, then WEFT_<SECTION>_<KEY> variables from envp (may be NULL), then
 * the overrides "section.key=value" in order. conf is written only on success.
 *
 * The INI file is the first of: ini_path (--config; must exist), $WEFT_CONFIG (must exist),
 * $XDG_CONFIG_HOME/weft/weft.ini (default $HOME/.config), WEFT_SYSCONFDIR/weft/weft.ini
 * (/etc/weft/weft.ini); the last two only when they exist, and no file at all is fine.
 *
 * Then the state folder: [api] state_dir, when empty, is $STATE_DIRECTORY (systemd's
 * StateDirectory=), else $XDG_STATE_HOME/weft (default $HOME/.local/state/weft), else
 * /var/lib/weft; an empty journal_dir or output_dir is state_dir/journal or state_dir/jobs (never
 * the current folder). */
weft_status_t weft_conf_load(struct weft_conf *conf, const char *ini_path, char *const *envp,
                             int n_overrides, const char *const *overrides);

/* Individual layers, applied on top of what conf already holds. */
weft_status_t weft_conf_apply_file(struct weft_conf *conf, const char *path);
weft_status_t weft_conf_apply_string(struct weft_conf *conf, const char *text, const char *name);
weft_status_t weft_conf_apply_env(struct weft_conf *conf, char *const *envp);
weft_status_t weft_conf_apply_override(struct weft_conf *conf, const char *assignment);

/* Write conf as an INI file with every key documented; secrets (the cluster secret, the API
 * token) are shown as <redacted> when set. */
void weft_conf_dump(const struct weft_conf *conf, FILE *out);
/* The example file: the dump of the defaults, with a header. */
void weft_conf_write_example(FILE *out);

/* "16GiB", "512 MiB", "1.5GB", "4096" -> bytes. Units: B; K/KiB, M/MiB, G/GiB, T/TiB (1024^n);
 * KB, MB, GB, TB (1000^n). Returns WEFT_ERR_INVALID on bad syntax, WEFT_ERR_RANGE on overflow. */
weft_status_t weft_conf_parse_size(const char *text, uint64_t *bytes_p);

#endif
