/* The coordinator's inside: the job table and queue (coord.c), the connections (server.c) and
 * the API handlers (api.c) share these structures; everything here runs on the loop thread. */
#ifndef WEFT_COORDINATOR_INTERNAL_H
#define WEFT_COORDINATOR_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "common/sbuf.h"
#include "conf/conf.h"
#include "control/runner.h"
#include "coordinator/coordinator.h"
#include "coordinator/http.h"
#include "coordinator/job.h"
#include "coordinator/journal.h"
#include "image/convert.h"

#define WEFT_JOB_ID_LEN 16
#define JOB_MAX_STAGES 8
#define WEFT_IDEM_KEY_MAX 128 /* bytes of an Idempotency-Key */

enum job_state {
    JOB_QUEUED,
    JOB_RUNNING,
    JOB_DONE,
    JOB_FAILED,
    JOB_CANCELLED,
    JOB_STATE_COUNT
};

struct job_image {
    bool done;
    int width, height;
};

struct job_stage {
    char name[24];
    double seconds;
};

struct job {
    char id[WEFT_JOB_ID_LEN + 1];
    uint64_t key;             /* submission order; the runner names the job by it */
    enum job_state state;
    struct weft_job_spec spec; /* inline prompt bytes are freed once stored */
    int attempts;             /* runs started (journaled), restarts included */
    bool cancel_requested;
    bool interrupted;         /* stopped by shutdown: stays queued in the journal */
    double submitted_at, started_at, finished_at; /* unix seconds (0: not yet) */
    int step, steps;          /* the latest step reported */
    int n_images, images_done;
    int *image_steps;         /* [n_images] steps done per image */
    struct job_image *images; /* [n_images] */
    int n_stages;
    struct job_stage stages[JOB_MAX_STAGES];
    char reason[256];
    char layout[96]; /* the layout it last started on (weft_layout_name; "" not yet) */
    char layout_reason[640]; /* why the runner chose it ("" fixed by the configuration) */
    /* Idempotency-Key of the submission ("" none) and the hash of what it asked (route and
     * body): a retry with the same key and request gets this job, another request a 422 */
    char idem_key[WEFT_IDEM_KEY_MAX + 1];
    uint8_t idem_hash[32];
    struct job *prev, *next;  /* the queue while queued, the finished list once finished */
};

struct job_list {
    struct job *head, *tail;
    size_t n;
};

#define STEP_BUCKETS 14
/* Upper bounds (seconds) of the histogram buckets of step and job times. */
extern const double weft_coord_buckets[STEP_BUCKETS];

struct coord_metrics {
    uint64_t submitted, refused;
    uint64_t finished[JOB_STATE_COUNT];
    uint64_t step_count;
    double step_sum;
    uint64_t step_bucket[STEP_BUCKETS]; /* cumulative at scrape time, per bucket here */
    uint64_t job_count;
    double job_sum;
    uint64_t job_bucket[STEP_BUCKETS];
    /* jobs done, and their run seconds, per layout (the first LAYOUTS_MAX layouts seen; later
     * ones counted as "other") */
#define LAYOUTS_MAX 8
    struct {
        char name[96];
        uint64_t done;
        double seconds;
    } layouts[LAYOUTS_MAX + 1];
    int n_layouts;
    uint64_t http[600]; /* responses by status code */
    uint64_t connections_total, connections_refused, connections_evicted, timeouts;
};

struct ev_node {
    struct weft_runner_event ev;
    struct ev_node *next;
};

struct coord_sink {
    struct weft_runner_sink base; /* what runners see; first */
    uv_async_t async;
    pthread_mutex_t mu;
    struct ev_node *head, *tail;
    bool closed;
    struct weft_coord *coord;
};

struct conn;

/* A connection waiting on a job: an event stream (GET /v1/jobs/{id}/events, answered as the job
 * moves) or a synchronous OpenAI request (POST /v1/images/generations, answered when the job
 * ends). The coordinator tells api.c about every change of a job (weft_api_job_changed); the
 * watch dies with its connection. */
enum weft_watch_kind {
    WEFT_WATCH_EVENTS,
    WEFT_WATCH_OPENAI,
};

struct weft_openai_opts {
    bool b64;                      /* response_format b64_json (else url) */
    enum weft_image_format format; /* output_format */
    int quality;                   /* 1..100 for jpeg and webp */
    char base_url[300];            /* "http://host:port" the client used, for url answers */
    bool replayed;                 /* an Idempotency-Key retry: the first request's job answers */
};

struct weft_watch {
    enum weft_watch_kind kind;
    uint64_t key;          /* the job */
    struct weft_openai_opts oa;
    struct conn *conn;     /* set by the server when it takes the watch */
    uint64_t event_id;     /* the last event's id */
    int last_step, last_images, last_state; /* what the stream last said */
    uint64_t deadline_ms;  /* loop time the OpenAI wait gives up */
    uint64_t last_ms;      /* loop time of the stream's last write */
    struct weft_watch *prev, *next;
};

#define COORD_STREAM WEFT_RUNNER_ARRIVALS
#define WEFT_COORD_CHECK_LAYOUTS WEFT_LAYOUT_GROUPS_MAX /* a job is checked against these
                                                          * beside layout() */

struct weft_coord {
    struct weft_conf_api api;
    uv_loop_t loop;
    struct weft_job_model *model;
    struct weft_journal *journal; /* NULL: journal disabled */
    struct weft_runner *runner;
    struct weft_layout layout; /* the runner's: every job is checked against it */
    struct weft_layout groups[WEFT_COORD_CHECK_LAYOUTS]; /* and against these, where its */
    int n_groups;                                         /* replicas differ (check_layouts) */
    struct coord_sink sink;
    bool sink_ready, loop_ready;
    /* the table, in key order */
    struct job **jobs;
    size_t n_jobs, cap_jobs;
    uint64_t next_key;
    struct job_list queue, finished;
    int running;
    /* the recent stream: the last submissions, a ring of COORD_STREAM (what a runner that
     * plans per job is told: tell_demand) */
    struct weft_runner_arrival arrivals[COORD_STREAM];
    uint64_t n_arrivals;
    /* the API socket */
    union {
        uv_tcp_t tcp;
        uv_pipe_t pipe;
        uv_handle_t handle;
        uv_stream_t stream;
    } listener;
    bool listening;  /* the listener handle is initialised and not closed */
    bool is_unix;
    bool unix_bound; /* unix_path is the socket this process bound (unix_dev, unix_ino) */
    dev_t unix_dev;
    ino_t unix_ino;
    union {
        uv_tcp_t tcp;
        uv_pipe_t pipe;
        uv_handle_t handle;
        uv_stream_t stream;
    } drop; /* takes a connection there is no memory for, to close it */
    bool drop_busy;
    char address[1100];
    char unix_path[1024];
    struct conn *conns;
    int n_conns;
    struct weft_watch *watches;
    uv_timer_t watch_timer; /* keep-alives of event streams, deadlines of OpenAI waits */
    bool watch_timer_ready;
    double started_at;      /* unix seconds the process started serving */
    char read_buf[65536];
    /* signals and shutdown */
    uv_signal_t sigint, sigterm;
    uv_timer_t grace;
    bool signals_ready, stopping, runner_stopped, closing_handles;
    struct coord_metrics m;
};

/* coord.c: jobs */
struct job *weft_coord_job_find(struct weft_coord *c, const char *id);
/* Validated spec taken over (spec is emptied); on success id_p points into the new job. On
 * failure err names the cause and the HTTP status to answer is in *http_p. */
weft_status_t weft_coord_job_submit(struct weft_coord *c, struct weft_job_spec *spec,
                                    const char *idem_key, const uint8_t *idem_hash,
                                    struct job **job_p, int *http_p, char *err, size_t err_len);
/* 200 (removed from the queue), 202 (the runner was asked to stop it), 409 (finished). */
int weft_coord_job_cancel(struct weft_coord *c, struct job *job);
size_t weft_coord_queue_position(const struct weft_coord *c, const struct job *job);
const char *weft_coord_state_name(enum job_state s);
void weft_coord_job_dir(const struct weft_coord *c, const struct job *job, char *buf,
                        size_t len);

/* server.c: the listener and connections */
/* [api] listen is a usable address (checked before anything is created). */
weft_status_t weft_server_check_address(const char *listen);
weft_status_t weft_server_listen(struct weft_coord *c);
/* Stop listening and remove the unix socket this process bound (only if it is still the same
 * file). Safe to call more than once, and before the listener was opened. While shutting down
 * (c->stopping) until then, the server keeps accepting and answers every request 503 (/healthz
 * saying why) and closes each connection after its answer, so a health check sees the drain;
 * finish_shutdown calls it. */
void weft_server_close_listener(struct weft_coord *c);
/* Close every connection; with idle_only, those with nothing in progress. */
void weft_server_close_conns(struct weft_coord *c, bool idle_only);

/* A response the API handlers build; the server writes it. body is owned (weft_free). */
struct weft_api_response {
    int code;
    const char *content_type;
    char headers[512]; /* extra header lines, each ending in \r\n */
    char *body;
    size_t len;
    bool close; /* close the connection after it */
    /* The answer waits on a job (owned; the server takes it): with stream, the head and body
     * go now (chunked) and weft_server_conn_chunk() follows; without, nothing goes now and
     * weft_server_conn_respond() answers later. */
    struct weft_watch *watch;
    bool stream;
};

/* server.c: answering a connection that waits (a watch's). Both forget the watch first (the
 * caller frees it after the call); the connection may close meanwhile. */
void weft_server_conn_respond(struct conn *conn, struct weft_api_response *resp);
/* One chunk of a streamed answer (copied); with end, the stream's end after it. Without end the
 * connection may close (a client that does not read): its watch is dropped then, so the caller
 * must not touch the watch after this call. */
void weft_server_conn_chunk(struct conn *conn, const char *data, size_t len, bool end);
/* Loop time in ms (for watch deadlines). */
uint64_t weft_server_now(const struct weft_coord *c);

/* api.c */
enum weft_api_route_kind {
    WEFT_ROUTE_PAGE,      /* / : the web page */
    WEFT_ROUTE_OPENAPI,   /* /openapi.json */
    WEFT_ROUTE_READY,     /* /readyz */
    WEFT_ROUTE_MODELS,    /* /v1/models */
    WEFT_ROUTE_OPENAI,    /* /v1/images/generations */
    WEFT_ROUTE_JOB_EVENTS, /* /v1/jobs/{id}/events */
    WEFT_ROUTE_JOBS,      /* /v1/jobs */
    WEFT_ROUTE_JOB,       /* /v1/jobs/{id} */
    WEFT_ROUTE_JOB_IMAGE, /* /v1/jobs/{id}/images/{i} */
    WEFT_ROUTE_CLUSTER,   /* /v1/cluster */
    WEFT_ROUTE_METRICS,   /* /metrics */
    WEFT_ROUTE_HEALTH,    /* /healthz */
};

struct weft_api_route {
    enum weft_api_route_kind kind;
    char id[WEFT_JOB_ID_LEN + 1];
    int image;
};

/* Parse a request target; false when it names nothing (404). */
bool weft_api_match(const char *target, struct weft_api_route *route);
/* True when token is empty, or authorization is "Bearer <token>" (compared in constant time). */
bool weft_api_auth_ok(const char *token, const char *authorization);
/* Headers complete: refuse early (401, 404, 405, 411, 413, 415; 503 for all but /healthz
 * while shutting down) so no body is read for nothing. Returns false with resp filled when
 * refused. */
bool weft_api_precheck(struct weft_coord *c, const struct weft_http_request *req,
                       struct weft_api_response *resp);
/* A complete request. */
void weft_api_handle(struct weft_coord *c, const struct weft_http_request *req,
                     struct weft_api_response *resp);
/* {"error": msg}, msg made valid UTF-8 (other bytes as \xNN) and cut to a bounded length. */
void weft_api_error(struct weft_api_response *resp, int code, const char *msg);
/* Prometheus text of everything the coordinator and the runner measure. */
void weft_coord_metrics_write(struct weft_coord *c, struct weft_sbuf *out);

/* api.c: helpers the handlers of openai.c and events.c share */
#define WEFT_API_ERROR_TEXT 484
void weft_api_respond_json(struct weft_api_response *resp, int code, cJSON *json);
cJSON *weft_api_job_json(struct weft_coord *c, const struct job *job);
/* msg as bounded UTF-8 (bytes that are not as \xNN) into out[WEFT_API_ERROR_TEXT]. */
void weft_api_error_text(const char *msg, char *out);
/* The value of a query parameter of target, false when absent. */
bool weft_api_query(const char *target, const char *name, char *out, size_t len);
/* See api.c: 1 a replay (*job_p), 0 go on (hash filled), -1 refused (resp filled). */
int weft_api_idempotent(struct weft_coord *c, const struct weft_http_request *req,
                        const char *route, uint8_t hash[32], struct job **job_p,
                        struct weft_api_response *resp);
/* Image i of job j in fmt (converted from the PNG once, then cached beside it): 200 with
 * *data_p (weft_free), or the HTTP status of the refusal with msg. */
int weft_api_image_bytes(struct weft_coord *c, const struct job *j, int i,
                         enum weft_image_format fmt, int quality, char **data_p, size_t *len_p,
                         char *msg, size_t msg_len);

/* openai.c */
void weft_api_openai_generate(struct weft_coord *c, const struct weft_http_request *req,
                              struct weft_api_response *resp);
void weft_api_models(struct weft_coord *c, struct weft_api_response *resp);
/* The body of POST /v1/images/generations as a job (pure: the fuzz target drives it): 200 with
 * spec filled (weft_job_spec_cleanup), or the HTTP status of the refusal with err. */
int weft_api_openai_parse(const struct weft_job_model *m, const struct weft_conf_api *api,
                          const char *body, size_t len, struct weft_job_spec *spec, char *err,
                          size_t err_len);
/* A refusal {"error": "..."} rewritten in OpenAI's shape (for POST /v1/images/generations). */
void weft_api_openai_reshape(struct weft_api_response *resp);
/* events.c */
void weft_api_events(struct weft_coord *c, const struct weft_http_request *req, struct job *j,
                     struct weft_api_response *resp);

/* assets.c (generated at build time from docs/openapi.json and coordinator/page/index.html) */
extern const char weft_asset_openapi[];
extern const size_t weft_asset_openapi_len;
extern const char weft_asset_page[];
extern const size_t weft_asset_page_len;

/* api.c: watches. A job changed (a step, its state; image >= 0: that image was written):
 * streams hear of it, OpenAI waits for a job that ended are answered. Called by coord.c on the
 * loop thread. */
void weft_api_job_changed(struct weft_coord *c, struct job *job, int image);
/* The server took w for conn: link it. */
void weft_api_watch_take(struct weft_coord *c, struct weft_watch *w, struct conn *conn);
/* The connection of w closed: unlink and free it. */
void weft_api_watch_drop(struct weft_coord *c, struct weft_watch *w);
/* Headers every answer to req gets (CORS), appended to resp->headers. */
void weft_api_decorate(struct weft_coord *c, const struct weft_http_request *req,
                       struct weft_api_response *resp);
/* One access log line per request: method, path, status, bytes, milliseconds, job id. */
void weft_api_access_log(struct weft_coord *c, const struct weft_http_request *req,
                         const struct weft_api_response *resp, size_t bytes, double seconds);
/* Keep-alives and deadlines (the watch timer). */
void weft_api_watch_tick(struct weft_coord *c);

/* coord.c: the job an Idempotency-Key names, or NULL. */
struct job *weft_coord_job_by_idem(struct weft_coord *c, const char *key);
/* A job by its key (submission order), or NULL. */
struct job *weft_coord_job_by_key(struct weft_coord *c, uint64_t key);
/* Draw a random seed (getrandom). */
uint64_t weft_coord_random_seed(void);

#endif
