/* Table-driven INI configuration (Debian's inih does the lexing; this file does the meaning). */
#include "conf/conf.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/files.h"
#include "common/log.h"

enum conf_type {
    CONF_BOOL,
    CONF_INT,
    CONF_SIZE,
    CONF_STRING,
    CONF_ENUM,
    CONF_MAXMEM, /* a string holding a valid max_memory */
    CONF_DEVICE, /* a string naming a device (weft_conf_device_ok) */
    CONF_ADDR,   /* host:port ([v6]:port; the API's also unix:PATH) */
};

struct conf_key {
    const char *name;
    enum conf_type type;
    bool secret; /* --dump-config shows <redacted> */
    size_t offset; /* within the section struct */
    size_t size;   /* of the field (bounds strings) */
    const char *def;
    int64_t min, max; /* INT and SIZE */
    const char *const *choices; /* ENUM, NULL-terminated; the field holds the index */
    const char *doc;
};

struct conf_section {
    const char *name;
    size_t offset; /* within struct weft_conf */
    const struct conf_key *keys;
    size_t n_keys;
    const char *doc;
};

/* s is a struct tag, which cannot be parenthesised */
#define FIELD(s, f) /* NOLINT(bugprone-macro-parentheses) */                                   \
    .offset = offsetof(struct s, f), .size = sizeof(((struct s *)0)->f)
#define KEY_BOOL(s, f, d, doc_)                                                              \
    {.name = #f, .type = CONF_BOOL, FIELD(s, f), .def = (d), .doc = (doc_)}
#define KEY_INT(s, f, d, lo, hi, doc_)                                                       \
    {.name = #f, .type = CONF_INT, FIELD(s, f), .def = (d), .min = (lo), .max = (hi),          \
     .doc = (doc_)}
#define KEY_SIZE(s, f, d, lo, hi, doc_)                                                      \
    {.name = #f, .type = CONF_SIZE, FIELD(s, f), .def = (d), .min = (lo), .max = (hi),         \
     .doc = (doc_)}
#define KEY_STR(s, f, d, doc_)                                                               \
    {.name = #f, .type = CONF_STRING, FIELD(s, f), .def = (d), .doc = (doc_)}
#define KEY_SECRET(s, f, d, doc_)                                                            \
    {.name = #f, .type = CONF_STRING, .secret = true, FIELD(s, f), .def = (d), .doc = (doc_)}
#define KEY_MAXMEM(s, f, d, doc_)                                                            \
    {.name = #f, .type = CONF_MAXMEM, FIELD(s, f), .def = (d), .doc = (doc_)}
#define KEY_DEVICE(s, f, d, doc_)                                                            \
    {.name = #f, .type = CONF_DEVICE, FIELD(s, f), .def = (d), .doc = (doc_)}
#define KEY_ADDR(s, f, d, doc_)                                                              \
    {.name = #f, .type = CONF_ADDR, FIELD(s, f), .def = (d), .doc = (doc_)}
#define KEY_ENUM(s, f, d, ch, doc_)                                                          \
    {.name = #f, .type = CONF_ENUM, FIELD(s, f), .def = (d), .choices = (ch), .doc = (doc_)}
#define SECTION(name, keys, doc) {#name, offsetof(struct weft_conf, name), (keys), \
                                  sizeof(keys) / sizeof((keys)[0]), (doc)}

/* Orders match enum weft_log_level and enum weft_dtype. */
static const char *const log_levels[] = {"error", "warn", "info", "debug", NULL};
static const char *const log_formats[] = {"text", "json", NULL}; /* enum weft_log_format */
static const char *const compute_dtypes[] = {"f32", "bf16", "f16", NULL};

static const struct conf_key log_keys[] = {
    KEY_ENUM(weft_conf_log, level, "info", log_levels,
             "Lowest level that is printed."),
    KEY_ENUM(weft_conf_log, format, "text", log_formats,
             "Log lines of servers and workers: text ('2026-01-31T12:00:00.123Z r0 host:pid I "
             "subsys: message', wall-clock time in RFC 3339, UTC) or json (one JSON object a "
             "line: ts, level, subsys, rank, host, pid, msg; for log collectors)."),
};

static const struct conf_key model_keys[] = {
    KEY_STR(weft_conf_model, path, "",
            "Diffusers pipeline or model folder. Empty: the embedded default (models/flux-tiny)."),
    KEY_ENUM(weft_conf_model, dtype, "f32", compute_dtypes,
             "Dtype of the products (f32 accumulation either way): bf16 needs AVX512_BF16 on "
             "the CPU, else f32 is used. Weights stay as stored (f32, bf16 or f16)."),
    KEY_SIZE(weft_conf_model, prompt_cache, "256MiB", 0, 1ll << 40,
             "Bytes of text prompts' embeddings kept by the rank that encodes text (the key: the "
             "text, max_sequence_length and the model), so a served stream of repeated prompts "
             "encodes each once; least recently used ones go first. 0: no cache."),
};

static const struct conf_key kernels_keys[] = {
    KEY_INT(weft_conf_kernels, threads, "0", 0, 1024,
            "Threads per worker for CPU kernels; 0: a worker in a cluster takes its share of "
            "its host's cores, one process alone every core it may run on."),
};

static const struct conf_key worker_keys[] = {
    KEY_DEVICE(weft_conf_worker, device, "cpu",
               "The device this process computes on (weft worker; weft generate and weft "
               "serve's local runner too): cpu; cuda:N (GPU N; cuda is cuda:0); auto (the GPU "
               "of the launcher's local rank, LOCAL_RANK, SLURM_LOCALID or "
               "OMPI_COMM_WORLD_LOCAL_RANK, modulo the GPUs present, when there are GPUs, else "
               "the CPU); cpu-devmem (the CPU with buffers that are not host-visible: tests the "
               "discipline a GPU needs). weft worker --device overrides it."),
    KEY_SIZE(weft_conf_worker, memory, "0", 0, 1ll << 50,
             "The memory this worker offers: it reports at most this many bytes as its "
             "device's memory, and the coordinator's planners (device_map, [parallel] mode = "
             "auto) plan with it (0: the device's own: a GPU's, on the CPU the host's). A "
             "budget for planning, e.g. for workers that share a device; not enforced."),
};

/* Orders match enum weft_ring_rotation (model/cp.h). */
static const char *const ring_rotations[] = {"allgather", "p2p", NULL};
static const char *const tp_loads[] = {"sharded", "full", NULL};
static const char *const parallel_modes[] = {"fixed", "auto", NULL};
/* Orders match enum weft_goal (model/autoplan.h). */
static const char *const parallel_goals[] = {"latency", "throughput", NULL};

static const struct conf_key parallel_keys[] = {
    KEY_ENUM(weft_conf_parallel, mode, "fixed", parallel_modes,
             "fixed: every job runs on the mesh of the degrees below. auto (weft serve's "
             "cluster runner): the coordinator plans the layout of the jobs at the head of "
             "its queue with weft plan --auto's rules over the [cluster] workers (the degrees "
             "below stay 1; [plan] gives the devices' rate and link) and re-plans the mesh "
             "between jobs when the next ones want another, keeping each worker's loaded "
             "weights when its tensor-parallel shard does not change."),
    KEY_ENUM(weft_conf_parallel, goal, "latency", parallel_goals,
             "What mode = auto plans for, as weft plan --auto --goal: latency (a job that "
             "would wait on no other gets the spare devices: context or tensor parallelism "
             "where the rules say it pays) or throughput (every job on the fewest devices "
             "that hold it, the rest replicas running other jobs side by side)."),
    KEY_INT(weft_conf_parallel, tp_degree, "1", 1, 1024,
            "Tensor-parallel degree: ranks that share each layer's weights; divides the heads."),
    KEY_INT(weft_conf_parallel, ulysses_degree, "1", 1, 1024,
            "Ulysses (all-to-all) context-parallel degree."),
    KEY_INT(weft_conf_parallel, ring_degree, "1", 1, 1024,
            "Ring-attention context-parallel degree."),
    KEY_INT(weft_conf_parallel, dp_degree, "1", 1, 1024,
            "Data-parallel replicas; a batch of prompts is split between them."),
    KEY_INT(weft_conf_parallel, cfg_degree, "1", 1, 2,
            "CFG parallelism: 2 runs a true-CFG job's conditional and unconditional passes on "
            "the two halves of each replica at once (each half tp x ulysses x ring), one "
            "exchange of the predictions a step; a job without true CFG runs the conditional "
            "pass on both halves."),
    KEY_STR(weft_conf_parallel, groups, "",
            "The cluster's workers as groups of replicas of different layouts, joined by '+': "
            "each a layout's degrees (dp, cfg, ring, ulysses, tp; those not named are 1), "
            "e.g. 'ulysses 2 + dp 2' on 4 workers: one replica of Ulysses 2 for the large "
            "images beside two single-device replicas for the small ones. A job runs within "
            "one group: the free one whose devices per replica come nearest to what its image "
            "splits over (weft plan's rule, about 1024 image tokens per rank) without "
            "exceeding it, else the free one with the fewest. The degrees above stay 1; "
            "[cluster] workers is the groups' sum. Empty: one layout, the degrees above."),
    KEY_BOOL(weft_conf_parallel, ulysses_anything, "false",
             "Any sequence length and head count for Ulysses (and unified 2-D): uneven splits, "
             "the first ranks one token (or head) longer."),
    KEY_BOOL(weft_conf_parallel, ring_anything, "false",
             "Any sequence length for ring attention (and unified 2-D): uneven splits, each "
             "rank's K/V moved at its true length."),
    KEY_ENUM(weft_conf_parallel, ring_rotation, "allgather", ring_rotations,
             "How K/V travel in ring attention: allgather (every chunk at once, one attention) "
             "or p2p (chunk by chunk around the ring, merged by log-sum-exp; two chunks "
             "resident)."),
    KEY_ENUM(weft_conf_parallel, tp_load, "sharded", tp_loads,
             "Tensor-parallel loading: sharded (each rank reads only its byte ranges) or full "
             "(read every tensor whole, keep the local slices; more memory)."),
};

static const char *const allreduce_algos[] = {"auto", "ring", "direct", NULL};

static const struct conf_key transport_keys[] = {
    KEY_STR(weft_conf_transport, tls, "",
            "UCX transports (what UCX_TLS would say), e.g. 'sm,self' or 'tcp'. Empty: UCX "
            "picks (shared memory and CMA on one host, TCP or verbs between hosts)."),
    KEY_SIZE(weft_conf_transport, chunk_bytes, "512KiB", 4096, 1ll << 30,
             "Pipelining unit of the ring and chain collectives: each message carries at most "
             "this many bytes of data."),
    KEY_INT(weft_conf_transport, pipeline_depth, "4", 1, 64,
            "Chunks each rank keeps in flight per collective; with chunk_bytes it sizes the "
            "registered scratch buffer of every process group (4 * depth * chunk_bytes)."),
    KEY_ENUM(weft_conf_transport, allreduce_algo, "auto", allreduce_algos,
             "All-reduce algorithm: ring (reduce-scatter + all-gather, bandwidth-optimal), "
             "direct (every rank sends its whole input to every other: one step, for small "
             "messages), or auto (direct up to allreduce_direct_max, ring above)."),
    KEY_SIZE(weft_conf_transport, allreduce_direct_max, "32KiB", 0, 1ll << 30,
             "Largest all-reduce (bytes per rank) that auto sends with the direct algorithm."),
    KEY_INT(weft_conf_transport, timeout_ms, "30000", 1, 86400000,
            "Deadline of every blocking transport call: a peer that is dead or silent this "
            "long makes the call return 'peer lost' (or 'timed out')."),
    KEY_INT(weft_conf_transport, spin_us, "-1", -1, 10000000,
            "How long a wait polls UCX before it sleeps on the worker's event descriptor. Busy "
            "polling starves peers when there are more processes than cores. -1: 50 when this "
            "host runs no more ranks than the process may use cores, else 0."),
    KEY_BOOL(weft_conf_transport, shm, "true",
             "Groups whose ranks all run on one host move their collectives through shared "
             "memory: each rank reads its peers' buffers in place (a fused copy-reduce for "
             "all-reduce), UCX carrying only the set-up. false: UCX for everything."),
    KEY_SIZE(weft_conf_transport, shm_max, "1MiB", 0, 1ll << 40,
             "For groups that cannot read each other's memory by CMA (process_vm_readv, which "
             "a container's seccomp profile may forbid): the largest collective (bytes per "
             "rank: the all-reduce input, the all-gather output, the all-to-all send buffer) "
             "that takes the shared-memory path, which then copies a private buffer into its "
             "staging buffer first; larger ones take UCX. 0: every size. All-to-all with "
             "per-rank counts then takes the shared-memory path only with 0 (its sizes differ "
             "between ranks). Groups that can use CMA take the shared-memory path at every "
             "size."),
};

static const struct conf_key cluster_keys[] = {
    KEY_ADDR(weft_conf_cluster, listen, "127.0.0.1:7450",
            "The coordinator's port for workers, host:port: weft serve --runner cluster listens there, "
            "weft worker connects there (torchrun's MASTER_ADDR/MASTER_PORT and Slurm's first "
            "node override the host when set)."),
    KEY_SECRET(weft_conf_cluster, secret, "",
            "Cluster secret: workers and the coordinator prove they know it (HMAC-SHA256 "
            "challenge-response); it never crosses the wire. Required unless secret_file is "
            "set."),
    KEY_STR(weft_conf_cluster, secret_file, "",
            "A file holding the cluster secret (its first line); wins over secret."),
    KEY_INT(weft_conf_cluster, workers, "0", 0, 65536,
            "Workers that form the mesh; 0: the product of the [parallel] degrees."),
    KEY_INT(weft_conf_cluster, heartbeat_ms, "1000", 10, 600000,
            "How often workers and the coordinator exchange heartbeats."),
    KEY_INT(weft_conf_cluster, worker_timeout_ms, "10000", 100, 3600000,
            "A worker silent this long is lost: its jobs fail or run again elsewhere."),
    KEY_INT(weft_conf_cluster, join_timeout_ms, "60000", 100, 3600000,
            "How long a worker keeps trying to reach the coordinator."),
    KEY_INT(weft_conf_cluster, stall_timeout_ms, "300000", 10, 86400000,
            "A running job whose workers report no step (or image) for this long, or for ten "
            "times its longest step if that is longer, is taken from them: their mesh is "
            "reset and the job runs again (up to [api] max_attempts runs)."),
};

static const struct conf_key api_keys[] = {
    KEY_ADDR(weft_conf_api, listen, "127.0.0.1:8642",
            "Where weft serve listens and where weft submit/status connect: host:port (TCP) or "
            "unix:/path (a unix socket, mode 0600). Port 0 picks a free port. An address "
            "other than loopback exposes the API to the network: set a token."),
    KEY_SECRET(weft_conf_api, token, "",
            "Bearer token: when set, every request needs 'Authorization: Bearer <token>' "
            "(clients send it from here). Empty: no authentication (loopback use)."),
    KEY_SIZE(weft_conf_api, max_body, "64MiB", 1024, 1ll << 32,
             "Largest request body (inline prompt embeddings are base64 in the body)."),
    KEY_SIZE(weft_conf_api, max_header, "16KiB", 1024, 1ll << 20,
             "Largest request line plus headers."),
    KEY_INT(weft_conf_api, max_prompts, "64", 1, 4096, "Most prompts in one job (a batch)."),
    KEY_INT(weft_conf_api, max_images, "64", 1, 65536,
            "Most images in one job (prompts x count)."),
    KEY_INT(weft_conf_api, max_pixels, "4194304", 256, 1ll << 28,
            "Largest image, width x height in pixels (each side a multiple of 16)."),
    KEY_INT(weft_conf_api, max_steps, "100", 1, 1000, "Most denoising steps of a job."),
    KEY_INT(weft_conf_api, max_queue, "1024", 1, 1000000,
            "Most jobs waiting to run; a submission beyond it gets 503."),
    KEY_INT(weft_conf_api, max_connections, "256", 1, 65536,
            "Most client connections at once. When all are taken, a new one replaces the one "
            "that has waited longest for a request (idle, or its head still arriving: that one "
            "gets a 408); only when every one has a request in progress is the new one "
            "answered 503 and closed."),
    KEY_INT(weft_conf_api, idle_timeout_ms, "30000", 10, 86400000,
            "An open connection with no request in progress is closed after this long."),
    KEY_INT(weft_conf_api, header_timeout_ms, "10000", 10, 86400000,
            "A request's line and headers must arrive within this long of its first byte, "
            "else 408 and the connection is closed (slow clients holding connections with a "
            "trickle of header bytes); the body has the rest of request_timeout_ms."),
    KEY_INT(weft_conf_api, request_timeout_ms, "60000", 10, 86400000,
            "A request must arrive whole (and its response be taken) within this long of its "
            "first byte, else 408 and the connection is closed (slow clients)."),
    KEY_STR(weft_conf_api, state_dir, "",
            "The state folder: the journal and the jobs' images go under it. Empty: "
            "$STATE_DIRECTORY (systemd's StateDirectory=), else $XDG_STATE_HOME/weft (default "
            "~/.local/state/weft), else /var/lib/weft; never the current folder."),
    KEY_STR(weft_conf_api, journal_dir, "",
            "Folder of the job journal: accepted jobs are written there (and synced) before "
            "the 202, so a restart of the coordinator loses none. Empty: state_dir/journal. "
            "none: no journal, jobs live in memory only."),
    KEY_STR(weft_conf_api, output_dir, "",
            "Folder of job results: one folder per job with its PNGs (and its inline prompt "
            "embeddings). Empty: state_dir/jobs."),
    KEY_SIZE(weft_conf_api, journal_compact, "16MiB", 4096, 1ll << 40,
             "Journal size that triggers its compaction (rewritten with the live jobs only)."),
    KEY_INT(weft_conf_api, keep_jobs, "10000", 1, 10000000,
            "Finished jobs kept (with their images); beyond it the oldest are deleted."),
    KEY_INT(weft_conf_api, max_attempts, "3", 1, 100,
            "Most runs of one job: a run cut short by a lost or stalled worker, or by a "
            "coordinator restart, is started again until this many runs have started; then the "
            "job fails with the last reason."),
    KEY_INT(weft_conf_api, shutdown_grace_ms, "10000", 0, 86400000,
            "On SIGINT/SIGTERM, how long running jobs may finish before they are stopped "
            "(they stay in the journal and run again after a restart)."),
    KEY_STR(weft_conf_api, cors_origins, "",
            "Origins a browser page may call the API from (CORS), comma-separated, e.g. "
            "'https://a.example, http://localhost:3000', or '*' for any. Empty: none (the page "
            "weft serves itself is same-origin and needs nothing). OPTIONS is answered either "
            "way."),
    KEY_INT(weft_conf_api, image_quality, "90", 1, 100,
            "Quality of JPEG and WebP images made from the PNGs (output_format, ?format=); "
            "a request's output_compression wins."),
    KEY_INT(weft_conf_api, events_keepalive_ms, "15000", 100, 3600000,
            "An event stream (GET /v1/jobs/{id}/events) with nothing to say for this long gets "
            "a comment line, so that proxies and clients do not time it out."),
    KEY_INT(weft_conf_api, sync_timeout_ms, "3600000", 1000, 86400000,
            "How long POST /v1/images/generations waits for its job before it answers 504 "
            "(the job goes on, and stays in /v1/jobs)."),
    KEY_BOOL(weft_conf_api, access_log, "true",
             "One INFO line per request (subsystem access): method, path, status, bytes, "
             "milliseconds and the job it names."),
};

static const char *const devmap_strategies[] = {"none", "balanced", "auto", NULL};

static const struct conf_key device_map_keys[] = {
    KEY_ENUM(weft_conf_device_map, strategy, "none", devmap_strategies,
             "Place the pipeline's components on the devices of each replica (the workers of a "
             "replica are its devices): none (every worker holds the whole pipeline, or its "
             "tensor/context-parallel share), balanced (components, largest first, spread over "
             "the devices; a transformer that fits no device whole is split by blocks evenly), "
             "auto (fill device 0, then 1, .., then host memory, block by block). Not with "
             "tensor or context parallelism."),
    KEY_MAXMEM(weft_conf_device_map, max_memory, "",
               "Most bytes each device may hold, as DEVICE:SIZE pairs (e.g. '0:16GiB, 1:16GiB, "
               "cpu:64GiB'); a device not named is bounded by its memory, and blocks spill to "
               "host memory only with a cpu entry."),
};

static const char *const links[] = {"none", "pcie", "nvlink", NULL};

static const struct conf_key plan_keys[] = {
    KEY_INT(weft_conf_plan, devices, "0", 0, 16384,
            "Devices `weft plan --auto` plans for when --devices and --server do not say (0: "
            "not described)."),
    KEY_SIZE(weft_conf_plan, device_memory, "0", 0, 1ll << 50,
             "Each device's memory for `weft plan --auto` (with devices)."),
    KEY_ENUM(weft_conf_plan, interconnect, "nvlink", links,
             "How the devices of one node talk: nvlink (tensor parallelism pays), pcie or none "
             "(device_map before tensor parallelism)."),
    KEY_INT(weft_conf_plan, nodes, "1", 1, 16384,
            "Nodes the devices are spread over, evenly (Ulysses inside a node, ring across)."),
    KEY_SIZE(weft_conf_plan, host_memory, "0", 0, 1ll << 50,
             "Host memory device_map may spill to (0: none)."),
    KEY_INT(weft_conf_plan, device_gflops, "0", 0, 1000000000,
            "One device's dense GEMM rate in GFLOP/s, for the predicted step time (0: "
            "unknown, no time predicted)."),
    KEY_SIZE(weft_conf_plan, link_bandwidth, "0", 0, 1ll << 50,
             "Bytes per second a rank sends to a device of its node (0: the interconnect's "
             "nominal: nvlink 300GB, pcie 24GB, none 10GB)."),
    KEY_INT(weft_conf_plan, link_latency_us, "0", 0, 1000000,
            "Microseconds a collective costs beyond its bytes (0: the interconnect's nominal: "
            "nvlink 10, pcie 20, none 30)."),
};

static const struct conf_section sections[] = {
    SECTION(log, log_keys, "Logging."),
    SECTION(model, model_keys, "The model to run."),
    SECTION(kernels, kernels_keys, "Compute kernels."),
    SECTION(worker, worker_keys, "The device a worker computes on, and the memory it offers."),
    SECTION(parallel, parallel_keys, "How the work is split across ranks."),
    SECTION(cluster, cluster_keys, "Workers and the coordinator: joining, secrets, liveness."),
    SECTION(transport, transport_keys, "Worker-to-worker communication (UCX) and collectives."),
    SECTION(device_map, device_map_keys,
            "Component placement (device_map): which device holds what, bounded by max_memory."),
    SECTION(api, api_keys, "The job API: weft serve, and the address weft submit/status use."),
    SECTION(plan, plan_keys, "The devices `weft plan --auto` plans for, when its options do not "
            "say."),
};
#define N_SECTIONS (sizeof(sections) / sizeof(sections[0]))

/* Where a value came from, for error messages: "weft.ini:12", "WEFT_LOG_LEVEL", "--log.level". */
struct conf_origin {
    char text[WEFT_CONF_PATH + 32];
};

/* ---------------------------------------------------------------------------------------- */
/* Value parsing                                                                             */

bool weft_conf_addr_ok(const char *v, char *why, size_t len)
{
    if (strncmp(v, "unix:", 5) == 0) {
        if (!v[5])
            snprintf(why, len, "unix: needs a socket path");
        return v[5] != '\0';
    }
    const char *colon = strrchr(v, ':');
    if (!colon || colon == v) {
        snprintf(why, len, "expected host:port (or unix:PATH)");
        return false;
    }
    const size_t host = (size_t)(colon - v);
    const char *port = colon + 1;
    char *end;
    errno = 0;
    const long p = strtol(port, &end, 10);
    if (!isdigit((unsigned char)port[0]) || *end || errno || p < 0 || p > 65535) {
        snprintf(why, len, "port '%s' is not a number in 0..65535", port);
        return false;
    }
    if (v[0] == '[') {
        if (v[host - 1] != ']' || host < 3) {
            snprintf(why, len, "an IPv6 host is written [address]:port");
            return false;
        }
        return true;
    }
    /* all digits and dots: a dotted IPv4 address, four numbers of 0..255 */
    if (strspn(v, "0123456789.") >= host) {
        unsigned a, b, c, d;
        char tail;
        char h[64];
        snprintf(h, sizeof(h), "%.*s", (int)(host < sizeof(h) ? host : sizeof(h) - 1), v);
        if (sscanf(h, "%3u.%3u.%3u.%3u%c", &a, &b, &c, &d, &tail) != 4 || a > 255 || b > 255 ||
            c > 255 || d > 255) {
            snprintf(why, len, "'%s' is not an IPv4 address", h);
            return false;
        }
        return true;
    }
    for (size_t i = 0; i < host; i++)
        if (!isalnum((unsigned char)v[i]) && v[i] != '-' && v[i] != '.' && v[i] != '_') {
            snprintf(why, len, "'%.*s' is not a host name", (int)host, v);
            return false;
        }
    return true;
}

weft_status_t weft_conf_parse_size(const char *text, uint64_t *bytes_p)
{
    static const struct {
        const char *unit;
        uint64_t mult;
    } units[] = {
        {"", 1},
        {"b", 1},
        {"k", 1ull << 10},
        {"kib", 1ull << 10},
        {"kb", 1000ull},
        {"m", 1ull << 20},
        {"mib", 1ull << 20},
        {"mb", 1000000ull},
        {"g", 1ull << 30},
        {"gib", 1ull << 30},
        {"gb", 1000000000ull},
        {"t", 1ull << 40},
        {"tib", 1ull << 40},
        {"tb", 1000000000000ull},
    };
    const char *p = text;
    while (isspace((unsigned char)*p))
        p++;
    if (!isdigit((unsigned char)*p))
        return WEFT_ERR_INVALID;
    uint64_t whole = 0;
    while (isdigit((unsigned char)*p)) {
        if (__builtin_mul_overflow(whole, 10u, &whole) ||
            __builtin_add_overflow(whole, (uint64_t)(*p - '0'), &whole))
            return WEFT_ERR_RANGE;
        p++;
    }
    /* Fraction kept as decimal digits so 1.5GiB is exact. */
    uint64_t frac = 0, frac_div = 1;
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p))
            return WEFT_ERR_INVALID;
        while (isdigit((unsigned char)*p)) {
            if (frac_div < 1000000000000ull) {
                frac = frac * 10 + (uint64_t)(*p - '0');
                frac_div *= 10;
            }
            p++;
        }
    }
    while (isspace((unsigned char)*p))
        p++;
    char unit[8];
    size_t n = 0;
    while (*p && !isspace((unsigned char)*p) && n < sizeof(unit) - 1)
        unit[n++] = (char)tolower((unsigned char)*p++);
    unit[n] = '\0';
    while (isspace((unsigned char)*p))
        p++;
    if (*p)
        return WEFT_ERR_INVALID;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(unit, units[i].unit) != 0)
            continue;
        uint64_t bytes;
        if (__builtin_mul_overflow(whole, units[i].mult, &bytes))
            return WEFT_ERR_RANGE;
        /* frac/frac_div * mult, without overflow for any mult <= 2^40 and frac_div <= 10^12 */
        long double part = (long double)frac * (long double)units[i].mult / (long double)frac_div;
        if (units[i].mult == 1 && frac) /* 1.5B: half a byte (1.5MiB rounds to a byte) */
            return WEFT_ERR_INVALID;
        if (__builtin_add_overflow(bytes, (uint64_t)part, &bytes))
            return WEFT_ERR_RANGE;
        *bytes_p = bytes;
        return WEFT_OK;
    }
    return WEFT_ERR_INVALID;
}

static int parse_bool(const char *v, bool *out)
{
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(v, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(v, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return -1;
}

static int parse_int(const char *v, int64_t *out)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || errno == ERANGE)
        return -1;
    while (isspace((unsigned char)*end))
        end++;
    if (*end)
        return -1;
    *out = x;
    return 0;
}

static void choices_str(const char *const *choices, char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; choices[i] && off < len; i++) {
        int n = snprintf(buf + off, len - off, "%s%s", i ? ", " : "", choices[i]);
        off += n > 0 ? (size_t)n : 0;
    }
}

/* Parse value into the key's field of section struct sect. Logs the error with origin. */
static weft_status_t key_set(const struct conf_section *sec, const struct conf_key *key,
                             void *sect, const char *value, const struct conf_origin *origin)
{
    char *field = (char *)sect + key->offset;
    switch (key->type) {
    case CONF_BOOL: {
        bool b;
        if (parse_bool(value, &b) != 0) {
            WEFT_LOG_ERROR("conf", "%s: [%s] %s = '%s': expected true or false (or yes/no, "
                           "on/off, 1/0)", origin->text, sec->name, key->name, value);
            return WEFT_ERR_CONFIG;
        }
        *(bool *)field = b;
        return WEFT_OK;
    }
    case CONF_INT: {
        int64_t x;
        if (parse_int(value, &x) != 0) {
            WEFT_LOG_ERROR("conf", "%s: [%s] %s = '%s': not an integer", origin->text,
                           sec->name, key->name, value);
            return WEFT_ERR_CONFIG;
        }
        if (x < key->min || x > key->max) {
            WEFT_LOG_ERROR("conf", "%s: [%s] %s = '%s': out of range [%lld, %lld]",
                           origin->text, sec->name, key->name, value, (long long)key->min,
                           (long long)key->max);
            return WEFT_ERR_CONFIG;
        }
        *(int64_t *)field = x;
        return WEFT_OK;
    }
    case CONF_SIZE: {
        uint64_t x;
        weft_status_t st = weft_conf_parse_size(value, &x);
        if (st != WEFT_OK) {
            WEFT_LOG_ERROR("conf", "%s: [%s] %s = '%s': %s", origin->text, sec->name, key->name,
                           value,
                           st == WEFT_ERR_RANGE ? "size overflows 64 bits"
                                                : "not a size (e.g. 4096, 64KiB, 16GiB, 1.5GB)");
            return WEFT_ERR_CONFIG;
        }
        if (x < (uint64_t)key->min || x > (uint64_t)key->max) {
            WEFT_LOG_ERROR("conf", "%s: [%s] %s = '%s': out of range [%lld, %lld] bytes",
                           origin->text, sec->name, key->name, value, (long long)key->min,
                           (long long)key->max);
            return WEFT_ERR_CONFIG;
        }
        *(uint64_t *)field = x;
        return WEFT_OK;
    }
    case CONF_MAXMEM:
    case CONF_DEVICE:
    case CONF_ADDR: {
        struct weft_max_memory mm;
        char why[200];
        const bool ok =
            key->type == CONF_DEVICE ? weft_conf_device_ok(value, why, sizeof(why))
            : key->type == CONF_ADDR ? weft_conf_addr_ok(value, why, sizeof(why))
                                     : weft_conf_parse_max_memory(value, &mm, why, sizeof(why)) ==
                                           WEFT_OK;
        if (!ok) {
            WEFT_LOG_ERROR("conf", "%s: [%s] %s = '%s': %s", origin->text, sec->name, key->name,
                           value, why);
            return WEFT_ERR_CONFIG;
        }
    }
        __attribute__((fallthrough)); /* stored as the text */
    case CONF_STRING: {
        size_t n = strlen(value);
        if (n >= key->size) {
            WEFT_LOG_ERROR("conf", "%s: [%s] %s: value is %zu bytes, longer than the limit %zu",
                           origin->text, sec->name, key->name, n, key->size - 1);
            return WEFT_ERR_CONFIG;
        }
        memcpy(field, value, n + 1);
        return WEFT_OK;
    }
    case CONF_ENUM:
        for (int i = 0; key->choices[i]; i++) {
            if (strcmp(value, key->choices[i]) == 0) {
                *(int *)field = i;
                return WEFT_OK;
            }
        }
        char ch[256];
        choices_str(key->choices, ch, sizeof(ch));
        WEFT_LOG_ERROR("conf", "%s: [%s] %s = '%s': expected one of %s", origin->text, sec->name,
                       key->name, value, ch);
        return WEFT_ERR_CONFIG;
    }
    return WEFT_ERR_INTERNAL;
}

static void key_format(const struct conf_key *key, const void *sect, char *buf, size_t len)
{
    const char *field = (const char *)sect + key->offset;
    switch (key->type) {
    case CONF_BOOL:
        snprintf(buf, len, "%s", *(const bool *)field ? "true" : "false");
        return;
    case CONF_INT:
        snprintf(buf, len, "%lld", (long long)*(const int64_t *)field);
        return;
    case CONF_SIZE: {
        uint64_t x = *(const uint64_t *)field;
        static const char *const u[] = {"TiB", "GiB", "MiB", "KiB"};
        for (int i = 0; i < 4; i++) {
            uint64_t m = 1ull << (10 * (4 - i));
            if (x && x % m == 0) {
                snprintf(buf, len, "%llu%s", (unsigned long long)(x / m), u[i]);
                return;
            }
        }
        snprintf(buf, len, "%llu", (unsigned long long)x);
        return;
    }
    case CONF_STRING:
    case CONF_MAXMEM:
    case CONF_DEVICE:
    case CONF_ADDR:
        snprintf(buf, len, "%s", field);
        return;
    case CONF_ENUM:
        snprintf(buf, len, "%s", key->choices[*(const int *)field]);
        return;
    }
}

bool weft_conf_device_ok(const char *text, char *why, size_t why_len)
{
    if (strcmp(text, "cpu") == 0 || strcmp(text, "cpu-devmem") == 0 ||
        strcmp(text, "auto") == 0 || strcmp(text, "cuda") == 0)
        return true;
    if (strncmp(text, "cuda:", 5) == 0) {
        const char *d = text + 5;
        size_t n = strspn(d, "0123456789");
        if (n > 0 && n <= 4 && d[n] == '\0' && atoi(d) <= 1023)
            return true;
        snprintf(why, why_len, "the GPU index after cuda: must be a number from 0 to 1023");
        return false;
    }
    snprintf(why, why_len, "expected cpu, cuda:N, auto or cpu-devmem");
    return false;
}

weft_status_t weft_conf_parse_max_memory(const char *text, struct weft_max_memory *out,
                                         char *err, size_t err_len)
{
    memset(out, 0, sizeof(*out));
    const char *p = text ? text : "";
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        if (!*p)
            break;
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[128];
        if (len >= sizeof(item)) {
            snprintf(err, err_len, "'%.40s...': too long", p);
            return WEFT_ERR_CONFIG;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        p += len;
        char *colon = strchr(item, ':');
        if (!colon) {
            snprintf(err, err_len, "'%s': expected DEVICE:SIZE (e.g. 0:16GiB or cpu:64GiB)",
                     item);
            return WEFT_ERR_CONFIG;
        }
        *colon = '\0';
        char *key = item, *val = colon + 1;
        while (isspace((unsigned char)*key))
            key++;
        for (size_t n = strlen(key); n && isspace((unsigned char)key[n - 1]);)
            key[--n] = '\0';
        for (size_t n = strlen(val); n && isspace((unsigned char)val[n - 1]);)
            val[--n] = '\0';
        uint64_t bytes;
        if (weft_conf_parse_size(val, &bytes) != WEFT_OK) {
            snprintf(err, err_len, "'%s:%s': '%s' is not a size (e.g. 16GiB)", key, val, val);
            return WEFT_ERR_CONFIG;
        }
        if (strcasecmp(key, "cpu") == 0) {
            if (out->has_cpu) {
                snprintf(err, err_len, "cpu is given twice");
                return WEFT_ERR_CONFIG;
            }
            out->cpu = bytes, out->has_cpu = true;
            continue;
        }
        char *end;
        errno = 0;
        long d = strtol(key, &end, 10);
        if (!*key || *end || errno || d < 0 || d >= WEFT_MAX_MEMORY_DEVICES) {
            snprintf(err, err_len, "'%s': the device must be an index 0..%d or cpu", key,
                     WEFT_MAX_MEMORY_DEVICES - 1);
            return WEFT_ERR_CONFIG;
        }
        if (out->has[d]) {
            snprintf(err, err_len, "device %ld is given twice", d);
            return WEFT_ERR_CONFIG;
        }
        out->device[d] = bytes, out->has[d] = true;
        out->n = (int)d + 1 > out->n ? (int)d + 1 : out->n;
    }
    return WEFT_OK;
}

static const struct conf_section *section_find(const char *name, size_t len)
{
    for (size_t i = 0; i < N_SECTIONS; i++)
        if (strlen(sections[i].name) == len && strncmp(sections[i].name, name, len) == 0)
            return &sections[i];
    return NULL;
}

static const struct conf_key *key_find(const struct conf_section *sec, const char *name)
{
    for (size_t i = 0; i < sec->n_keys; i++)
        if (strcmp(sec->keys[i].name, name) == 0)
            return &sec->keys[i];
    return NULL;
}

void weft_conf_defaults(struct weft_conf *conf)
{
    memset(conf, 0, sizeof(*conf));
    struct conf_origin o = {"built-in default"};
    for (size_t s = 0; s < N_SECTIONS; s++) {
        for (size_t k = 0; k < sections[s].n_keys; k++) {
            weft_status_t st = key_set(&sections[s], &sections[s].keys[k],
                                       (char *)conf + sections[s].offset,
                                       sections[s].keys[k].def, &o);
            (void)st; /* the defaults are checked by the unit tests */
        }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Map sections                                                                              */

#define TP_PLAN_SECTION "tp_plan"

static bool is_map_section(const char *name, size_t len)
{
    return len == strlen(TP_PLAN_SECTION) && strncmp(name, TP_PLAN_SECTION, len) == 0;
}

/* Set key in the map. Within one file (dup_file, NULL for options) a key may appear once. */
static weft_status_t map_set(struct weft_conf_map *map, const char *key, const char *value,
                             const struct conf_origin *origin, const char *dup_file)
{
    if (strlen(key) >= sizeof(map->e[0].key) || strlen(value) >= sizeof(map->e[0].value)) {
        WEFT_LOG_ERROR("conf", "%s: [%s] entry '%.40s...': key or value longer than %zu bytes",
                       origin->text, TP_PLAN_SECTION, key, sizeof(map->e[0].key) - 1);
        return WEFT_ERR_CONFIG;
    }
    for (int i = 0; i < map->n; i++) {
        if (strcmp(map->e[i].key, key) != 0)
            continue;
        size_t fl = dup_file ? strlen(dup_file) : 0;
        if (dup_file && strncmp(map->e[i].origin, dup_file, fl) == 0 &&
            map->e[i].origin[fl] == ':') {
            WEFT_LOG_ERROR("conf", "%s: duplicate key '%s' in section [%s] (first set at %s)",
                           origin->text, key, TP_PLAN_SECTION, map->e[i].origin);
            return WEFT_ERR_CONFIG;
        }
        snprintf(map->e[i].value, sizeof(map->e[i].value), "%s", value);
        snprintf(map->e[i].origin, sizeof(map->e[i].origin), "%s", origin->text);
        return WEFT_OK;
    }
    if (map->n == WEFT_CONF_MAP_MAX) {
        WEFT_LOG_ERROR("conf", "%s: more than %d entries in [%s]", origin->text,
                       WEFT_CONF_MAP_MAX, TP_PLAN_SECTION);
        return WEFT_ERR_CONFIG;
    }
    struct weft_conf_entry *e = &map->e[map->n++];
    snprintf(e->key, sizeof(e->key), "%s", key);
    snprintf(e->value, sizeof(e->value), "%s", value);
    snprintf(e->origin, sizeof(e->origin), "%s", origin->text);
    return WEFT_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* INI files                                                                                 */

#define MAX_LINE 4096
#define LONG_VALUE_MARK "\x01"
#define MAX_SECTIONS 16
#define MAX_KEYS 32
_Static_assert(N_SECTIONS <= MAX_SECTIONS, "raise MAX_SECTIONS");

struct ini_state {
    struct weft_conf *conf;
    const char *name; /* file name for messages */
    /* reader side */
    FILE *file;
    const char *text;
    int line;
    bool bad_line; /* the reader rejected a line (already logged) */
    char long_value[MAX_LINE + 2]; /* value of the current line when inih could not hold it */
    /* handler side */
    weft_status_t status;
    /* line of the first assignment of each key, to report duplicates */
    int seen[MAX_SECTIONS][MAX_KEYS];
};

/* Reads one line for inih, counts lines, strips leading blanks (so indented keys are keys, not
 * inih "continuation lines") and validates section headers, which inih does not report. */
static char *ini_read_line(char *str, int num, void *stream)
{
    struct ini_state *st = stream;
    char buf[MAX_LINE + 2] = "";
    size_t n = 0;
    bool nul = false;
    if (st->file) { /* getc, not fgets: a NUL byte would end the line early, unseen */
        int ch = 0;
        while (n < sizeof(buf) - 1 && ch != '\n' && (ch = getc(st->file)) != EOF) {
            nul |= ch == 0;
            buf[n++] = (char)ch;
        }
        if (n == 0)
            return NULL;
        buf[n] = '\0';
    } else {
        if (!*st->text)
            return NULL;
        const char *nl = strchr(st->text, '\n');
        n = nl ? (size_t)(nl - st->text) + 1 : strlen(st->text);
        if (n > MAX_LINE)
            n = MAX_LINE + 1;
        memcpy(buf, st->text, n);
        buf[n] = '\0';
        st->text += n;
    }
    st->line++;
    if (nul) {
        WEFT_LOG_ERROR("conf", "%s:%d: a NUL byte in the line", st->name, st->line);
        st->bad_line = true;
        return NULL;
    }
    bool complete = n > 0 && buf[n - 1] == '\n';
    bool at_end = st->file ? feof(st->file) : *st->text == '\0';
    if (!complete && !at_end) {
        WEFT_LOG_ERROR("conf", "%s:%d: line longer than %d bytes", st->name, st->line, MAX_LINE);
        st->bad_line = true;
        return NULL;
    }
    st->long_value[0] = '\0';
    const char *p = buf;
    if (st->line == 1 && strncmp(p, "\xEF\xBB\xBF", 3) == 0)
        p += 3; /* a UTF-8 byte-order mark, as Windows editors write one */
    while (*p == ' ' || *p == '\t')
        p++;
    /* inih reports a syntax error only as a line number after the fact; catch it here so the
     * first error in the file is the one reported, with its text. */
    if (*p == '[' && !strchr(p, ']')) {
        WEFT_LOG_ERROR("conf", "%s:%d: syntax error: section header without ']'", st->name,
                       st->line);
        st->bad_line = true;
        return NULL;
    }
    if (*p && *p != '[' && *p != '#' && *p != ';' && *p != '\n' && *p != '\r' &&
        !strpbrk(p, "=:")) {
        WEFT_LOG_ERROR("conf", "%s:%d: syntax error: expected key = value", st->name, st->line);
        st->bad_line = true;
        return NULL;
    }
    if (*p == '[' && st->status == WEFT_OK) {
        const char *end = strchr(p, ']');
        const char *name = p + 1;
        size_t len = (size_t)(end - name);
        while (len && isspace((unsigned char)*name)) {
            name++;
            len--;
        }
        while (len && isspace((unsigned char)name[len - 1]))
            len--;
        if (!section_find(name, len) && !is_map_section(name, len)) {
            WEFT_LOG_ERROR("conf", "%s:%d: unknown section [%.*s]", st->name, st->line,
                           (int)len, name);
            st->status = WEFT_ERR_CONFIG;
        }
    }
    /* Debian's inih holds 199 bytes a line. A longer "key = value" line is handed to it as
     * "key = <mark>" and the handler takes the value from here, trimmed as inih trims. */
    if (strlen(p) >= (size_t)num) {
        const char *eq = strpbrk(p, "=:");
        if (*p == '#' || *p == ';')
            return strcpy(str, "#");
        if (!eq || (size_t)(eq - p) + sizeof(LONG_VALUE_MARK) + 2 >= (size_t)num) {
            WEFT_LOG_ERROR("conf", "%s:%d: line too long", st->name, st->line);
            st->bad_line = true;
            return NULL;
        }
        const char *v = eq + 1;
        while (isspace((unsigned char)*v))
            v++;
        snprintf(st->long_value, sizeof(st->long_value), "%s", v);
        char *c = st->long_value;
        for (char *q = c; *q; q++) {
            if (*q == ';' && q > c && isspace((unsigned char)q[-1])) {
                *q = '\0';
                break;
            }
        }
        size_t len = strlen(c);
        while (len && isspace((unsigned char)c[len - 1]))
            c[--len] = '\0';
        snprintf(str, (size_t)num, "%.*s= %s\n", (int)(eq - p), p, LONG_VALUE_MARK);
        return str;
    }
    strcpy(str, p);
    return str;
}

static int ini_on_value(void *user, const char *section, const char *name, const char *value)
{
    struct ini_state *st = user;
    if (st->status != WEFT_OK)
        return 1; /* report only the first error */
    struct conf_origin o;
    snprintf(o.text, sizeof(o.text), "%s:%d", st->name, st->line);
    if (is_map_section(section, strlen(section))) {
        st->status = map_set(&st->conf->tp_plan, name, value, &o, st->name);
        return 1;
    }
    const struct conf_section *sec = section_find(section, strlen(section));
    if (!sec) {
        if (section[0] == '\0')
            WEFT_LOG_ERROR("conf", "%s: key '%s' outside any section", o.text, name);
        /* an unknown named section was reported by the reader */
        st->status = WEFT_ERR_CONFIG;
        return 1;
    }
    const struct conf_key *key = key_find(sec, name);
    if (!key) {
        WEFT_LOG_ERROR("conf", "%s: unknown key '%s' in section [%s]", o.text, name, sec->name);
        st->status = WEFT_ERR_CONFIG;
        return 1;
    }
    if (key - sec->keys >= MAX_KEYS) {
        WEFT_LOG_ERROR("conf", "section [%s] has more than %d keys: raise MAX_KEYS", sec->name,
                       MAX_KEYS);
        st->status = WEFT_ERR_INTERNAL;
        return 1;
    }
    int *first = &st->seen[sec - sections][key - sec->keys];
    if (*first) {
        WEFT_LOG_ERROR("conf", "%s: duplicate key '%s' in section [%s] (first set at line %d)",
                       o.text, name, sec->name, *first);
        st->status = WEFT_ERR_CONFIG;
        return 1;
    }
    *first = st->line;
    if (strcmp(value, LONG_VALUE_MARK) == 0 && st->long_value[0])
        value = st->long_value;
    st->status = key_set(sec, key, (char *)st->conf + sec->offset, value, &o);
    return 1;
}

static weft_status_t ini_run(struct weft_conf *conf, struct ini_state *st)
{
    struct weft_conf work = *conf;
    st->conf = &work;
    int rc = ini_parse_stream(ini_read_line, st, ini_on_value, st);
    if (st->status != WEFT_OK)
        return st->status;
    if (st->bad_line)
        return WEFT_ERR_CONFIG;
    if (rc > 0) {
        WEFT_LOG_ERROR("conf", "%s:%d: syntax error (expected [section], key = value, or a "
                               "comment starting with # or ;)", st->name, rc);
        return WEFT_ERR_CONFIG;
    }
    if (rc < 0) {
        WEFT_LOG_ERROR("conf", "%s: cannot read the file", st->name);
        return WEFT_ERR_IO;
    }
    *conf = work;
    return WEFT_OK;
}

weft_status_t weft_conf_apply_file(struct weft_conf *conf, const char *path)
{
    FILE *f = weft_files_fopen_regular(path); /* not a folder, a FIFO or a device */
    if (!f) {
        WEFT_LOG_ERROR("conf", "%s: cannot open: %s", path, weft_files_open_error(errno));
        return WEFT_ERR_IO;
    }
    struct ini_state st = {.name = path, .file = f};
    weft_status_t status = ini_run(conf, &st);
    (void)fclose(f); /* read-only stream: nothing to lose */
    return status;
}

weft_status_t weft_conf_apply_string(struct weft_conf *conf, const char *text, const char *name)
{
    struct ini_state st = {.name = name, .text = text};
    return ini_run(conf, &st);
}

/* ---------------------------------------------------------------------------------------- */
/* Environment and command line                                                              */

static void env_name(const struct conf_section *sec, const struct conf_key *key, char *buf,
                     size_t len)
{
    snprintf(buf, len, "WEFT_%s_%s", sec->name, key->name);
    for (char *p = buf; *p; p++)
        *p = (char)toupper((unsigned char)*p);
}

weft_status_t weft_conf_apply_env(struct weft_conf *conf, char *const *envp)
{
    if (!envp)
        return WEFT_OK;
    struct weft_conf work = *conf;
    for (char *const *e = envp; *e; e++) {
        if (strncmp(*e, "WEFT_", 5) != 0)
            continue;
        const char *eq = strchr(*e, '=');
        if (!eq)
            continue;
        size_t name_len = (size_t)(eq - *e);
        const struct conf_section *match_sec = NULL;
        bool matched = false;
        for (size_t s = 0; s < N_SECTIONS && !matched; s++) {
            char prefix[64];
            snprintf(prefix, sizeof(prefix), "WEFT_%s_", sections[s].name);
            for (char *p = prefix; *p; p++)
                *p = (char)toupper((unsigned char)*p);
            if (strncmp(*e, prefix, strlen(prefix)) != 0)
                continue;
            match_sec = &sections[s];
            for (size_t k = 0; k < sections[s].n_keys; k++) {
                char name[128];
                env_name(&sections[s], &sections[s].keys[k], name, sizeof(name));
                if (strlen(name) != name_len || strncmp(*e, name, name_len) != 0)
                    continue;
                struct conf_origin o;
                snprintf(o.text, sizeof(o.text), "environment %s", name);
                weft_status_t st = key_set(&sections[s], &sections[s].keys[k],
                                           (char *)&work + sections[s].offset, eq + 1, &o);
                if (st != WEFT_OK)
                    return st;
                matched = true;
                break;
            }
        }
        /* WEFT_<SECTION>_<anything else> is a typo of a key: refuse rather than ignore it. */
        if (match_sec && !matched) {
            WEFT_LOG_ERROR("conf", "environment %.*s: no key of that name in section [%s]",
                           (int)name_len, *e, match_sec->name);
            return WEFT_ERR_CONFIG;
        }
    }
    *conf = work;
    return WEFT_OK;
}

weft_status_t weft_conf_apply_override(struct weft_conf *conf, const char *assignment)
{
    struct conf_origin o;
    snprintf(o.text, sizeof(o.text), "option --%s", assignment);
    const char *dot = strchr(assignment, '.');
    const char *eq = strchr(assignment, '=');
    if (!dot || !eq || dot > eq) {
        WEFT_LOG_ERROR("conf", "%s: expected --section.key=value", o.text);
        return WEFT_ERR_CONFIG;
    }
    if (is_map_section(assignment, (size_t)(dot - assignment))) {
        char mkey[256];
        snprintf(mkey, sizeof(mkey), "%.*s", (int)(eq - dot - 1), dot + 1);
        return map_set(&conf->tp_plan, mkey, eq + 1, &o, NULL);
    }
    const struct conf_section *sec = section_find(assignment, (size_t)(dot - assignment));
    if (!sec) {
        WEFT_LOG_ERROR("conf", "%s: unknown section [%.*s]", o.text, (int)(dot - assignment),
                       assignment);
        return WEFT_ERR_CONFIG;
    }
    char name[128];
    size_t len = (size_t)(eq - dot - 1);
    if (len >= sizeof(name))
        len = sizeof(name) - 1;
    memcpy(name, dot + 1, len);
    name[len] = '\0';
    const struct conf_key *key = key_find(sec, name);
    if (!key) {
        WEFT_LOG_ERROR("conf", "%s: unknown key '%s' in section [%s]", o.text, name, sec->name);
        return WEFT_ERR_CONFIG;
    }
    return key_set(sec, key, (char *)conf + sec->offset, eq + 1, &o);
}

#ifndef WEFT_SYSCONFDIR
#define WEFT_SYSCONFDIR "/etc"
#endif

static const char *env_get(char *const *envp, const char *name)
{
    size_t n = strlen(name);
    for (char *const *e = envp; e && *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=' && (*e)[n + 1])
            return *e + n + 1;
    return NULL;
}

/* The first INI file that applies (see conf.h), into path; false when none. */
static bool discover_file(const char *given, char *const *envp, char *path, size_t len)
{
    const char *explicit = given ? given : env_get(envp, "WEFT_CONFIG");
    if (explicit) {
        snprintf(path, len, "%s", explicit);
        return true;
    }
    const char *xdg = env_get(envp, "XDG_CONFIG_HOME"), *home = env_get(envp, "HOME");
    if (xdg && xdg[0] == '/')
        snprintf(path, len, "%s/weft/weft.ini", xdg);
    else if (home)
        snprintf(path, len, "%s/.config/weft/weft.ini", home);
    else
        path[0] = '\0';
    /* there, if readable or there but no file (its reader then says why) */
    FILE *f = path[0] ? weft_files_fopen_regular(path) : NULL;
    if (f || (path[0] && (errno == EISDIR || errno == ENXIO))) {
        if (f)
            (void)fclose(f);
        return true;
    }
    snprintf(path, len, "%s/weft/weft.ini", WEFT_SYSCONFDIR);
    if ((f = weft_files_fopen_regular(path)) || errno == EISDIR || errno == ENXIO) {
        if (f)
            (void)fclose(f);
        return true;
    }
    return false;
}

/* [api] state_dir, journal_dir and output_dir when left empty (see conf.h). */
static weft_status_t resolve_state(struct weft_conf_api *api, char *const *envp)
{
    if (!api->state_dir[0]) {
        const char *sd = env_get(envp, "STATE_DIRECTORY"); /* systemd: may be a:b:c */
        const char *xdg = env_get(envp, "XDG_STATE_HOME"), *home = env_get(envp, "HOME");
        if (sd)
            snprintf(api->state_dir, sizeof(api->state_dir), "%.*s", (int)strcspn(sd, ":"), sd);
        else if (xdg && xdg[0] == '/')
            snprintf(api->state_dir, sizeof(api->state_dir), "%s/weft", xdg);
        else if (home && home[0] == '/')
            snprintf(api->state_dir, sizeof(api->state_dir), "%s/.local/state/weft", home);
        else
            snprintf(api->state_dir, sizeof(api->state_dir), "/var/lib/weft");
    }
    int a = 0, b = 0;
    if (!api->journal_dir[0])
        a = snprintf(api->journal_dir, sizeof(api->journal_dir), "%s/journal", api->state_dir);
    else if (strcmp(api->journal_dir, "none") == 0)
        api->journal_dir[0] = '\0';
    if (!api->output_dir[0])
        b = snprintf(api->output_dir, sizeof(api->output_dir), "%s/jobs", api->state_dir);
    if (a >= (int)sizeof(api->journal_dir) || b >= (int)sizeof(api->output_dir)) {
        WEFT_LOG_ERROR("conf", "[api] state_dir = '%s': too long for the folders under it",
                       api->state_dir);
        return WEFT_ERR_CONFIG;
    }
    return WEFT_OK;
}

weft_status_t weft_conf_load(struct weft_conf *conf, const char *ini_path, char *const *envp,
                             int n_overrides, const char *const *overrides)
{
    struct weft_conf work;
    weft_conf_defaults(&work);
    char path[WEFT_CONF_PATH];
    weft_status_t st = WEFT_OK;
    if (discover_file(ini_path, envp, path, sizeof(path))) {
        st = weft_conf_apply_file(&work, path);
        snprintf(work.source, sizeof(work.source), "%s", path);
    }
    if (st == WEFT_OK)
        st = weft_conf_apply_env(&work, envp);
    for (int i = 0; st == WEFT_OK && i < n_overrides; i++)
        st = weft_conf_apply_override(&work, overrides[i]);
    if (st == WEFT_OK)
        st = resolve_state(&work.api, envp);
    if (st == WEFT_OK)
        *conf = work;
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* Output                                                                                    */

static void key_doc(const struct conf_key *key, FILE *out)
{
    fprintf(out, "# %s", key->doc);
    if (key->type == CONF_INT)
        fprintf(out, " Range %lld..%lld.", (long long)key->min, (long long)key->max);
    else if (key->type == CONF_SIZE)
        fprintf(out, " A size (units B, KiB, MiB, GiB, TiB, or KB, MB, GB, TB).");
    else if (key->type == CONF_ENUM) {
        char ch[256];
        choices_str(key->choices, ch, sizeof(ch));
        fprintf(out, " One of: %s.", ch);
    } else if (key->type == CONF_BOOL)
        fprintf(out, " true or false.");
    fprintf(out, "\n# Environment: ");
}

static void dump_map(const struct weft_conf_map *map, FILE *out)
{
    fprintf(out, "\n[%s]\n# Tensor-parallel plan entries: module glob = style. They override the model's\n"
                 "# built-in plan (same glob) or extend it; style none removes an entry. Globs\n"
                 "# have at most one '*', standing for the block index of a list of blocks.\n"
                 "# Styles: colwise, rowwise, rowwise_split_input, packed_colwise(a,b,...),\n"
                 "# packed_rowwise(a,b,...) (block proportions; without them the model's own\n"
                 "# block sizes), none. Option --tp_plan.GLOB=STYLE. Example:\n"
                 "# single_transformer_blocks.*.proj_out = packed_rowwise\n",
            TP_PLAN_SECTION);
    for (int i = 0; i < map->n; i++)
        fprintf(out, "%s = %s\n", map->e[i].key, map->e[i].value);
}

void weft_conf_dump(const struct weft_conf *conf, FILE *out)
{
    if (conf->source[0])
        fprintf(out, "# read from %s\n\n", conf->source);
    for (size_t s = 0; s < N_SECTIONS; s++) {
        const struct conf_section *sec = &sections[s];
        fprintf(out, "%s[%s]\n# %s\n", s ? "\n" : "", sec->name, sec->doc);
        for (size_t k = 0; k < sec->n_keys; k++) {
            const struct conf_key *key = &sec->keys[k];
            char value[WEFT_CONF_PATH + 1], env[128];
            key_format(key, (const char *)conf + sec->offset, value, sizeof(value));
            if (key->secret && value[0])
                snprintf(value, sizeof(value), "<redacted>");
            env_name(sec, key, env, sizeof(env));
            fprintf(out, "\n");
            key_doc(key, out);
            fprintf(out, "%s, option --%s.%s=...\n%s = %s\n", env, sec->name, key->name,
                    key->name, value);
        }
    }
    dump_map(&conf->tp_plan, out);
}

void weft_conf_write_example(FILE *out)
{
    struct weft_conf conf;
    weft_conf_defaults(&conf);
    fprintf(out, "# weft example configuration: every key with its default value.\n"
                 "# Generated by `weft --dump-config --defaults`; a test keeps it in sync.\n"
                 "# Precedence: default < this file < WEFT_<SECTION>_<KEY> < "
                 "--section.key=value.\n\n");
    weft_conf_dump(&conf, out);
}
