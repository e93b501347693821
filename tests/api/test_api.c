/* The job API end to end: `weft serve` as a child process on an ephemeral loopback port (or a
 * unix socket), driven through the C client (client/weft.h) and through raw sockets for what a
 * well-behaved client never sends. One case per process: test_api WEFT_BINARY CASE.
 *
 * Every wait is bounded; a watchdog kills the server and fails the test if a case hangs. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spng.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>

#include "client/weft.h"
#include "common/alloc.h"
#include "common/base64.h"
#include "common/utf8.h"
#include "test.h"

static const char *weft_bin;
static char tmpdir[256];
static pid_t server_pid = -1;

struct server {
    pid_t pid;
    char addr[512];
};

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "test_api: watchdog: the case did not finish in time\n";
    if (server_pid > 0)
        kill(server_pid, SIGKILL);
    (void)!write(2, msg, sizeof(msg) - 1);
    _exit(1);
}

/* A failed CHECK exits: the server must not outlive the test. */
static void kill_server(void)
{
    if (server_pid > 0)
        kill(server_pid, SIGKILL);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static void dump_log(void)
{
    char path[400], line[1024];
    snprintf(path, sizeof(path), "%s/serve.log", tmpdir);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    fprintf(stderr, "--- %s ---\n", path);
    while (fgets(line, sizeof(line), f))
        fputs(line, stderr);
    (void)fclose(f);
}

/* Fork `weft serve` on the case's folders with extra options (NULL-terminated); its output
 * goes to serve.log. */
static pid_t server_spawn(const char *listen, const char *const *extra)
{
    char port_file[400], journal[400], out[400], log[400], opt_listen[600];
    snprintf(port_file, sizeof(port_file), "%s/port", tmpdir);
    snprintf(journal, sizeof(journal), "--api.journal_dir=%s/journal", tmpdir);
    snprintf(out, sizeof(out), "--api.output_dir=%s/jobs", tmpdir);
    snprintf(log, sizeof(log), "%s/serve.log", tmpdir);
    snprintf(opt_listen, sizeof(opt_listen), "--listen=%s", listen ? listen : "127.0.0.1:0");
    (void)unlink(port_file);
    const char *argv[32] = {weft_bin, "serve", opt_listen, "--port-file", port_file, journal,
                            out, "--kernels.threads=1"};
    int n = 8;
    for (int i = 0; extra && extra[i] && n < 30; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execv(weft_bin, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* Start `weft serve` and wait (bounded) for the address it bound. */
static void server_start(struct server *s, const char *listen, const char *const *extra)
{
    char port_file[400];
    snprintf(port_file, sizeof(port_file), "%s/port", tmpdir);
    pid_t pid = server_spawn(listen, extra);
    s->pid = server_pid = pid;
    for (int i = 0; i < 600; i++) { /* 30 s */
        FILE *f = fopen(port_file, "r");
        if (f) {
            bool ok = fgets(s->addr, sizeof(s->addr), f) != NULL;
            (void)fclose(f);
            if (ok) {
                s->addr[strcspn(s->addr, "\n")] = '\0';
                return;
            }
        }
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            dump_log();
            fprintf(stderr, "weft serve exited early (status %d)\n", status);
            exit(1);
        }
        sleep_ms(50);
    }
    dump_log();
    CHECK(!"weft serve did not write its port file within 30 s");
}

/* Wait (bounded) for the server to exit and return the exit code (128 + signal when killed);
 * the log is shown when it failed and that was not expected. */
static int server_wait(struct server *s, bool expect_failure)
{
    for (int i = 0; i < 1200; i++) { /* 60 s */
        int status;
        if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
            server_pid = -1;
            int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            if (rc != 0 && !expect_failure)
                dump_log();
            return rc;
        }
        sleep_ms(50);
    }
    kill(s->pid, SIGKILL);
    dump_log();
    CHECK(!"weft serve did not exit within 60 s");
    return -1;
}

/* Send sig, wait (bounded) and return the exit code (128 + signal when killed). */
static int server_stop(struct server *s, int sig)
{
    CHECK(kill(s->pid, sig) == 0);
    return server_wait(s, sig == SIGKILL);
}

/* Run `weft serve` expecting it to fail at start: its exit code. */
static int server_start_fails(const char *listen, const char *const *extra)
{
    pid_t running = server_pid; /* a server of the case that must not outlive it */
    struct server s = {.pid = server_spawn(listen, extra)};
    server_pid = s.pid;
    int rc = server_wait(&s, true);
    server_pid = running;
    return rc;
}

/* serve.log contains text. */
static bool log_contains(const char *text)
{
    char path[400];
    snprintf(path, sizeof(path), "%s/serve.log", tmpdir);
    FILE *f = fopen(path, "r");
    CHECK(f);
    static char log[1 << 20];
    size_t n = fread(log, 1, sizeof(log) - 1, f);
    (void)fclose(f);
    log[n] = '\0';
    return strstr(log, text) != NULL;
}

static struct weft_client *client(const struct server *s, const char *token)
{
    struct weft_client_opts o = {.address = s->addr, .token = token, .timeout_ms = 20000};
    struct weft_client *c;
    CHECK_OK(weft_client_connect(&o, &c));
    return c;
}

#define CHECK_C(c, expr)                                                                     \
    do {                                                                                     \
        weft_status_t st_ = (expr);                                                          \
        if (st_ != WEFT_OK) {                                                                \
            fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #expr,               \
                    weft_status_str(st_), weft_client_error(c));                            \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

/* GET path and return the status code (the body in *body_p when not NULL, caller frees). */
static int get(struct weft_client *c, const char *method, const char *path, const char *body,
               char **body_p)
{
    int code;
    char *ans = NULL;
    /* the answer goes straight to *body_p: a local handed back through it is what gcc's
     * -Wdangling-pointer (release builds) cannot follow */
    CHECK_C(c, weft_client_request(c, method, path, body, body ? strlen(body) : 0, &code,
                                   body_p ? body_p : &ans, NULL));
    weft_client_free(ans);
    return code;
}

static void check_serving(struct weft_client *c)
{
    CHECK_EQ(get(c, "GET", "/healthz", NULL, NULL), 200);
}

static void wait_done(struct weft_client *c, const char *id, struct weft_job_status *st)
{
    CHECK_C(c, weft_client_wait(c, id, 120000, NULL, NULL, st));
    if (st->state != WEFT_JOB_DONE)
        fprintf(stderr, "job %s: %s %s\n", id, weft_client_state_name(st->state), st->error);
    CHECK(st->state == WEFT_JOB_DONE);
}

/* Decode a PNG (libspng checks every CRC) into RGB8; returns the pixels (free). */
static unsigned char *png_pixels(const void *png, size_t len, uint32_t *w, uint32_t *h)
{
    spng_ctx *ctx = spng_ctx_new(0);
    CHECK(ctx);
    CHECK(spng_set_png_buffer(ctx, png, len) == 0);
    struct spng_ihdr ihdr;
    CHECK(spng_get_ihdr(ctx, &ihdr) == 0);
    size_t n;
    CHECK(spng_decoded_image_size(ctx, SPNG_FMT_RGB8, &n) == 0);
    unsigned char *px = malloc(n);
    CHECK(px);
    CHECK(spng_decode_image(ctx, px, n, SPNG_FMT_RGB8, 0) == 0);
    spng_ctx_free(ctx);
    *w = ihdr.width;
    *h = ihdr.height;
    return px;
}

/* Image i of a job: its pixels, checked to be a PNG of w x h. */
static unsigned char *image(struct weft_client *c, const char *id, int i, uint32_t w,
                            uint32_t h)
{
    void *png;
    size_t len;
    CHECK_C(c, weft_client_image(c, id, i, &png, &len));
    uint32_t gw, gh;
    unsigned char *px = png_pixels(png, len, &gw, &gh);
    CHECK_EQ(gw, w);
    CHECK_EQ(gh, h);
    weft_client_free(png);
    return px;
}

static void submit(struct weft_client *c, const char *const *names, size_t n, int64_t size,
                   int64_t steps, int64_t count, uint64_t seed, char id[WEFT_CLIENT_ID_MAX])
{
    struct weft_prompt p[8] = {0};
    CHECK(n <= 8);
    for (size_t i = 0; i < n; i++)
        p[i].name = names[i];
    struct weft_job_request r = {.prompts = p, .n_prompts = n, .height = size, .width = size,
                                 .steps = steps, .count = count, .seed = seed};
    CHECK_C(c, weft_client_submit(c, &r, id));
}

/* ---------------------------------------------------------------------------------------- */

static int case_basic(void)
{
    struct server s;
    server_start(&s, NULL, NULL);
    struct weft_client *c = client(&s, NULL);
    char id[WEFT_CLIENT_ID_MAX], id2[WEFT_CLIENT_ID_MAX];
    const char *fox[] = {"red-fox"};
    submit(c, fox, 1, 64, 3, 1, 7, id);
    struct weft_job_status st = {0};
    wait_done(c, id, &st);
    CHECK_EQ(st.images_total, 1);
    CHECK_EQ(st.n_images, 1);
    CHECK_EQ(st.images[0].prompt, 0);
    CHECK(st.fraction == 1.0);
    unsigned char *a = image(c, id, 0, 64, 64);
    /* equal to the single-device `weft generate` of the same seed */
    char gen[400], cmd[1200];
    snprintf(gen, sizeof(gen), "%s/generate.png", tmpdir);
    snprintf(cmd, sizeof(cmd), "'%s' generate --prompt-embeds red-fox --height 64 --width 64 "
             "--steps 3 --seed 7 --kernels.threads=1 --out '%s' 2>/dev/null", weft_bin, gen);
    CHECK(system(cmd) == 0);
    FILE *gf = fopen(gen, "rb");
    CHECK(gf);
    static char gbuf[1 << 20];
    size_t glen = fread(gbuf, 1, sizeof(gbuf), gf);
    (void)fclose(gf);
    uint32_t gw, gh;
    unsigned char *g = png_pixels(gbuf, glen, &gw, &gh);
    CHECK(gw == 64 && gh == 64);
    CHECK(memcmp(a, g, 64 * 64 * 3) == 0);
    free(g);
    /* the same request again: the same picture (noise from the seed alone) */
    submit(c, fox, 1, 64, 3, 1, 7, id2);
    CHECK(strcmp(id, id2) != 0);
    wait_done(c, id2, &st);
    unsigned char *b = image(c, id2, 0, 64, 64);
    CHECK(memcmp(a, b, 64 * 64 * 3) == 0);
    /* another seed: another picture */
    submit(c, fox, 1, 64, 3, 1, 8, id2);
    wait_done(c, id2, &st);
    free(b);
    b = image(c, id2, 0, 64, 64);
    CHECK(memcmp(a, b, 64 * 64 * 3) != 0);
    free(a);
    free(b);
    /* save to a file */
    char path[400];
    snprintf(path, sizeof(path), "%s/saved.png", tmpdir);
    CHECK_C(c, weft_client_image_save(c, id, 0, path));
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && sb.st_size > 8);
    /* the cluster and the metrics */
    char *text;
    CHECK_C(c, weft_client_cluster(c, &text));
    CHECK(strstr(text, "\"local\""));
    CHECK(strstr(text, "\"tp\""));
    weft_client_free(text);
    CHECK_EQ(get(c, "GET", "/metrics", NULL, &text), 200);
    CHECK(strstr(text, "weft_jobs{state=\"done\"} 3"));
    CHECK(strstr(text, "weft_step_seconds_count 9"));
    CHECK(strstr(text, "weft_queue_length 0"));
    weft_client_free(text);
    CHECK_EQ(get(c, "GET", "/v1/jobs?state=done", NULL, &text), 200);
    CHECK(strstr(text, id));
    weft_client_free(text);
    weft_job_status_cleanup(&st);
    weft_client_close(c);
    CHECK_EQ(server_stop(&s, SIGTERM), 0);
    return 0;
}

static int case_batch(void)
{
    struct server s;
    server_start(&s, NULL, NULL);
    struct weft_client *c = client(&s, NULL);
    const char *batch[] = {"red-fox", "lighthouse", "city-night"};
    char id[WEFT_CLIENT_ID_MAX];
    submit(c, batch, 3, 64, 2, 2, 3, id);
    struct weft_job_status st = {0};
    wait_done(c, id, &st);
    CHECK_EQ(st.n_images, 6);
    unsigned char *px[6];
    for (int i = 0; i < 6; i++) {
        CHECK_EQ(st.images[i].index, i);
        CHECK_EQ(st.images[i].prompt, i / 2); /* prompt order, count images each */
        px[i] = image(c, id, i, 64, 64);
        for (int k = 0; k < i; k++)
            CHECK(memcmp(px[i], px[k], 64 * 64 * 3) != 0);
    }
    /* image i is the prompt at position i / 2 with the seed's noise at i: the same prompt in
     * every position of another job gives the same image at that index */
    for (int p = 0; p < 3; p++) {
        const char *same[] = {batch[p], batch[p], batch[p]};
        char id2[WEFT_CLIENT_ID_MAX];
        submit(c, same, 3, 64, 2, 2, 3, id2);
        struct weft_job_status st2 = {0};
        wait_done(c, id2, &st2);
        for (int k = 0; k < 2; k++) {
            unsigned char *q = image(c, id2, 2 * p + k, 64, 64);
            CHECK(memcmp(q, px[2 * p + k], 64 * 64 * 3) == 0);
            free(q);
        }
        weft_job_status_cleanup(&st2);
    }
    /* the same embeddings sent inline give the same image as by name */
    char path[1200];
    snprintf(path, sizeof(path), "%s/tests/data/random/flux-tiny/prompts/lighthouse.safetensors",
             getenv("WEFT_SOURCE_ROOT"));
    FILE *f = fopen(path, "rb");
    CHECK(f);
    static char file[1 << 20];
    size_t n = fread(file, 1, sizeof(file), f);
    (void)fclose(f);
    CHECK(n > 0 && n < sizeof(file));
    struct weft_prompt pr[2] = {{.name = "red-fox"}, {.safetensors = file, .safetensors_len = n}};
    struct weft_job_request r = {.prompts = pr, .n_prompts = 2, .height = 64, .width = 64,
                                 .steps = 2, .count = 2, .seed = 3};
    CHECK_C(c, weft_client_submit(c, &r, id));
    wait_done(c, id, &st);
    for (int i = 0; i < 4; i++) {
        unsigned char *q = image(c, id, i, 64, 64);
        CHECK(memcmp(q, px[i], 64 * 64 * 3) == 0);
        free(q);
    }
    for (int i = 0; i < 6; i++)
        free(px[i]);
    weft_job_status_cleanup(&st);
    weft_client_close(c);
    CHECK_EQ(server_stop(&s, SIGTERM), 0);
    return 0;
}

static void expect_error(struct weft_client *c, const char *method, const char *path,
                         const char *body, int want, const char *sub)
{
    char *ans;
    int code = get(c, method, path, body, &ans);
    if (code != want || (sub && !strstr(ans, sub))) {
        fprintf(stderr, "%s %s: got %d %s, want %d with \"%s\"\n", method, path, code, ans, want,
                sub ? sub : "");
        exit(1);
    }
    CHECK(strncmp(ans, "{\"error\":", 9) == 0);
    weft_client_free(ans);
}

static int case_errors(void)
{
    struct server s;
    const char *extra[] = {"--api.token=s3cret-token", "--api.max_body=4096",
                           "--api.max_pixels=65536", NULL};
    server_start(&s, NULL, extra);
    /* authentication */
    struct weft_client *bad = client(&s, "wrong");
    expect_error(bad, "GET", "/v1/cluster", NULL, 401, "wrong bearer token");
    char id[WEFT_CLIENT_ID_MAX];
    struct weft_job_request r = {0};
    CHECK(weft_client_submit_json(bad, "{\"prompt\": \"red-fox\"}", id) == WEFT_ERR_AUTH);
    CHECK_EQ(weft_client_http_status(bad), 401);
    weft_client_close(bad);
    struct weft_client *none = client(&s, NULL);
    expect_error(none, "GET", "/metrics", NULL, 401, "missing Authorization");
    weft_client_close(none);
    struct weft_client *c = client(&s, "s3cret-token");
    check_serving(c);
    /* malformed and refused requests, each answered and the server still serving */
    const char *J = "/v1/jobs";
    expect_error(c, "POST", J, "{\"prompt\": \"red-fox\",", 400, "malformed JSON");
    expect_error(c, "POST", J, "{\"prompt\": \"red-fox\", \"bogus\": 1}", 400,
                 "unknown field \\\"bogus\\\"");
    expect_error(c, "POST", J, "{\"prompt\": \"red-fox\", \"height\": 512, \"width\": 512}", 400,
                 "max_pixels");
    expect_error(c, "POST", J, "{\"prompt\": \"red-fox\", \"height\": 100, \"width\": 64}", 400,
                 "multiples of 16");
    expect_error(c, "POST", J, "{\"prompt_embeds\": \"no-such-prompt\"}", 400, "unknown prompt");
    expect_error(c, "POST", J, "{\"prompt\": \"no-such-prompt\"}", 400,
                 "flux-tiny cannot encode text");
    /* a side no worker takes, a NUL inside a key, a client's broken inline embeddings: 400s,
     * and the last is the client's fault, not logged as the server's error */
    expect_error(c, "POST", J, "{\"prompt\": \"red-fox\", \"height\": 65552, \"width\": 16}",
                 400, "16384");
    expect_error(c, "POST", J, "{\"prompt\": \"red-fox\", \"steps\\u0000evil\": 2}", 400,
                 "u0000");
    expect_error(c, "POST", J, "{\"prompt\": {\"safetensors\": \"AAAAAAAAAAA=\"}}", 400,
                 "prompts[0]");
    CHECK(!log_contains(" E api") && !log_contains(" E safetensors"));
    static char big[6000];
    memset(big, ' ', sizeof(big) - 1);
    big[0] = '{';
    big[sizeof(big) - 2] = '}';
    expect_error(c, "POST", J, big, 413, "max_body");
    check_serving(c); /* a new connection: the 413 closed the last one */
    expect_error(c, "GET", "/v1/jobs/0123456789abcdef", NULL, 404, "no job");
    expect_error(c, "GET", "/v1/nothing", NULL, 404, "no such resource");
    expect_error(c, "PUT", J, "{}", 405, "not allowed");
    expect_error(c, "DELETE", "/v1/cluster", NULL, 405, "not allowed");
    check_serving(c);
    /* and a good job after all that */
    struct weft_prompt p = {.name = "red-fox"};
    r = (struct weft_job_request){.prompts = &p, .n_prompts = 1, .height = 64, .width = 64,
                                  .steps = 2};
    CHECK_C(c, weft_client_submit(c, &r, id));
    struct weft_job_status st = {0};
    wait_done(c, id, &st);
    free(image(c, id, 0, 64, 64));
    expect_error(c, "GET", "/v1/jobs/x/images/0", NULL, 404, "no job");
    char path[96];
    snprintf(path, sizeof(path), "/v1/jobs/%s/images/1", id);
    expect_error(c, "GET", path, NULL, 404, "images 0..0");
    weft_job_status_cleanup(&st);
    weft_client_close(c);
    CHECK_EQ(server_stop(&s, SIGTERM), 0);
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Raw sockets                                                                               */

/* A TCP connection to the server, or -1 when nothing accepts it. */
static int raw_try_connect(const struct server *s)
{
    char host[256];
    snprintf(host, sizeof(host), "%s", s->addr);
    char *colon = strrchr(host, ':');
    CHECK(colon);
    *colon = '\0';
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    CHECK(inet_pton(AF_INET, host, &sa.sin_addr) == 1);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fd >= 0);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int raw_connect(const struct server *s)
{
    int fd = raw_try_connect(s);
    CHECK(fd >= 0);
    return fd;
}

static void raw_send(int fd, const void *data, size_t len)
{
    CHECK(send(fd, data, len, MSG_NOSIGNAL) == (ssize_t)len);
}

/* Read until the server closes, until what was read contains `until` (when not NULL), or
 * timeout_ms passes; returns bytes read (NUL-terminated), *closed_p tells whether it closed. */
static size_t raw_read_until(int fd, char *buf, size_t cap, const char *until, int timeout_ms,
                             bool *closed_p)
{
    size_t got = 0;
    *closed_p = false;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        int left = timeout_ms - (int)((t.tv_sec - t0.tv_sec) * 1000 +
                                      (t.tv_nsec - t0.tv_nsec) / 1000000);
        if (left <= 0)
            break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, left) <= 0)
            continue;
        ssize_t n = recv(fd, buf + got, cap - 1 - got, 0);
        if (n <= 0) {
            *closed_p = true;
            break;
        }
        got += (size_t)n;
        buf[got] = '\0';
        if (got == cap - 1 || (until && strstr(buf, until)))
            break;
    }
    buf[got] = '\0';
    return got;
}

static size_t raw_read(int fd, char *buf, size_t cap, int timeout_ms, bool *closed_p)
{
    return raw_read_until(fd, buf, cap, NULL, timeout_ms, closed_p);
}

/* The status code of an answer read by raw_read ("HTTP/1.1 NNN "), 0 when there is none. */
static int raw_status(const char *buf)
{
    int code = 0;
    if (sscanf(buf, "HTTP/1.1 %3d ", &code) != 1)
        return 0;
    return code;
}

/* Send one raw request on a new connection and read the answer until the server closes (or
 * 5 s pass): its status code; the answer is in buf. */
static int raw_exchange(const struct server *s, const char *req, size_t len, char *buf,
                        size_t cap, bool *closed_p)
{
    int fd = raw_connect(s);
    raw_send(fd, req, len);
    raw_read(fd, buf, cap, 5000, closed_p);
    close(fd);
    return raw_status(buf);
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

static int case_robust(void)
{
    struct server s;
    const char *extra[] = {"--api.idle_timeout_ms=300", "--api.request_timeout_ms=800",
                           "--api.max_header=2048", "--api.max_connections=4", NULL};
    server_start(&s, NULL, extra);
    static char buf[1 << 16];
    bool closed;

    /* garbage bytes: 400 and the connection closed */
    int fd = raw_connect(&s);
    static const char tls[] = "\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03garbage\r\n\r\n";
    raw_send(fd, tls, sizeof(tls) - 1);
    raw_read(fd, buf, sizeof(buf), 5000, &closed);
    CHECK(strncmp(buf, "HTTP/1.1 400 ", 13) == 0);
    CHECK(strstr(buf, "{\"error\":"));
    CHECK(closed);
    close(fd);

    /* a request cut short by the client closing: nothing to answer, nothing disturbed */
    fd = raw_connect(&s);
    static const char cut[] = "POST /v1/jobs HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"pro";
    raw_send(fd, cut, sizeof(cut) - 1);
    close(fd);

    /* headers over [api] max_header: 431 */
    fd = raw_connect(&s);
    static char huge[4096];
    int n = snprintf(huge, sizeof(huge), "GET /healthz HTTP/1.1\r\nX-Filler: %03000d\r\n\r\n", 0);
    raw_send(fd, huge, (size_t)n);
    raw_read(fd, buf, sizeof(buf), 5000, &closed);
    CHECK(strncmp(buf, "HTTP/1.1 431 ", 13) == 0);
    CHECK(closed);
    close(fd);

    /* pipelined requests: every answer, in order, on one connection */
    fd = raw_connect(&s);
    const char *three = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                        "GET /v1/jobs/0123456789abcdef HTTP/1.1\r\nHost: x\r\n\r\n"
                        "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        "Content-Length: 2\r\n\r\n{}"
                        "GET /v1/cluster HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    raw_send(fd, three, strlen(three));
    raw_read(fd, buf, sizeof(buf), 5000, &closed);
    CHECK(closed);
    CHECK_EQ(count(buf, "HTTP/1.1 "), 4);
    char *a = strstr(buf, "HTTP/1.1 200"), *b = strstr(buf, "HTTP/1.1 404"),
         *c4 = strstr(buf, "HTTP/1.1 400"), *d = strstr(buf, "\"runner\"");
    CHECK(a && b && c4 && d && a < b && b < c4 && c4 < d);
    close(fd);

    /* Expect: 100-continue gets its interim answer before the body is sent */
    fd = raw_connect(&s);
    const char *ex = "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     "Expect: 100-continue\r\nContent-Length: 2\r\n\r\n";
    raw_send(fd, ex, strlen(ex));
    raw_read_until(fd, buf, sizeof(buf), "\r\n\r\n", 5000, &closed);
    CHECK(strcmp(buf, "HTTP/1.1 100 Continue\r\n\r\n") == 0);
    raw_send(fd, "{}", 2);
    raw_read_until(fd, buf, sizeof(buf), "\"}", 5000, &closed);
    CHECK(strncmp(buf, "HTTP/1.1 400 ", 13) == 0);
    close(fd);

    /* an idle connection is closed after idle_timeout_ms */
    fd = raw_connect(&s);
    size_t got = raw_read(fd, buf, sizeof(buf), 5000, &closed);
    CHECK(closed);
    CHECK_EQ(got, 0);
    close(fd);

    /* slowloris: a byte every 100 ms never completes a request within request_timeout_ms */
    fd = raw_connect(&s);
    const char *slow = "GET /healthz HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    closed = false;
    for (size_t i = 0; i < strlen(slow) && !closed; i++) {
        if (send(fd, slow + i, 1, MSG_NOSIGNAL) != 1)
            break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) > 0)
            break;
    }
    raw_read(fd, buf, sizeof(buf), 5000, &closed);
    CHECK(strncmp(buf, "HTTP/1.1 408 ", 13) == 0);
    CHECK(closed);
    close(fd);

    /* more than max_connections, all waiting for a request: the newcomer takes the place of
     * the one that waited longest, the others unharmed */
    int fds[5];
    for (int i = 0; i < 4; i++) {
        fds[i] = raw_connect(&s);
        sleep_ms(10);
    }
    sleep_ms(40);
    fds[4] = raw_connect(&s);
    const char *hz = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    raw_send(fds[4], hz, strlen(hz));
    raw_read_until(fds[4], buf, sizeof(buf), "}", 5000, &closed);
    CHECK(strncmp(buf, "HTTP/1.1 200 ", 13) == 0);
    CHECK_EQ(raw_read(fds[0], buf, sizeof(buf), 5000, &closed), 0);
    CHECK(closed);
    raw_send(fds[1], hz, strlen(hz));
    raw_read_until(fds[1], buf, sizeof(buf), "}", 5000, &closed);
    CHECK(strncmp(buf, "HTTP/1.1 200 ", 13) == 0);
    for (int i = 0; i < 5; i++)
        close(fds[i]);

    /* every one with a request in progress (a body on its way): 503 for the extra one, and
     * the others unharmed */
    sleep_ms(50);
    const char *part = "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       "Content-Length: 2\r\n\r\n{";
    for (int i = 0; i < 4; i++) {
        fds[i] = raw_connect(&s);
        raw_send(fds[i], part, strlen(part));
    }
    sleep_ms(50);
    fds[4] = raw_connect(&s);
    raw_read(fds[4], buf, sizeof(buf), 5000, &closed);
    CHECK(strncmp(buf, "HTTP/1.1 503 ", 13) == 0);
    raw_send(fds[0], "}", 1);
    raw_read_until(fds[0], buf, sizeof(buf), "\"}", 5000, &closed);
    CHECK(strncmp(buf, "HTTP/1.1 400 ", 13) == 0); /* {} is not a job */
    for (int i = 0; i < 5; i++)
        close(fds[i]);

    /* and the server still serves */
    sleep_ms(50);
    struct weft_client *c = client(&s, NULL);
    check_serving(c);
    char *text;
    CHECK_EQ(get(c, "GET", "/metrics", NULL, &text), 200);
    CHECK(strstr(text, "weft_http_timeouts_total"));
    CHECK(strstr(text, "weft_http_responses_total{code=\"408\"} 1"));
    weft_client_free(text);
    weft_client_close(c);
    CHECK_EQ(server_stop(&s, SIGTERM), 0);
    return 0;
}

/* ---------------------------------------------------------------------------------------- */

static void wait_running(struct weft_client *c, const char *id, struct weft_job_status *st)
{
    for (int i = 0; i < 3000; i++) { /* 60 s */
        CHECK_C(c, weft_client_status(c, id, st));
        if (st->state == WEFT_JOB_RUNNING && st->step >= 1)
            return;
        CHECK(st->state == WEFT_JOB_QUEUED || st->state == WEFT_JOB_RUNNING);
        sleep_ms(20);
    }
    CHECK(!"job did not start running within 60 s");
}

static int case_cancel(void)
{
    struct server s;
    const char *extra[] = {"--api.max_steps=1000", "--api.max_queue=1", NULL};
    server_start(&s, NULL, extra);
    struct weft_client *c = client(&s, NULL);
    const char *fox[] = {"red-fox"};
    char id[WEFT_CLIENT_ID_MAX], queued[WEFT_CLIENT_ID_MAX];
    submit(c, fox, 1, 256, 1000, 1, 0, id);
    struct weft_job_status st = {0};
    wait_running(c, id, &st);
    submit(c, fox, 1, 256, 1000, 1, 0, queued);
    /* the queue holds one: the next is refused, and says why */
    CHECK(weft_client_submit_json(c, "{\"prompt\": \"red-fox\"}", id) == WEFT_ERR_BUSY);
    CHECK_EQ(weft_client_http_status(c), 503);
    CHECK(strstr(weft_client_error(c), "max_queue"));
    CHECK_C(c, weft_client_status(c, queued, &st)); /* id was not overwritten: re-read it */
    char *list;
    CHECK_EQ(get(c, "GET", "/v1/jobs?state=running", NULL, &list), 200);
    char *idp = strstr(list, "\"id\":\"");
    CHECK(idp);
    snprintf(id, sizeof(id), "%.16s", idp + 6);
    weft_client_free(list);
    /* the second waits behind the first: cancelling it removes it at once */
    CHECK_C(c, weft_client_status(c, queued, &st));
    CHECK(st.state == WEFT_JOB_QUEUED);
    CHECK_C(c, weft_client_cancel(c, queued));
    CHECK_C(c, weft_client_status(c, queued, &st));
    CHECK(st.state == WEFT_JOB_CANCELLED);
    /* the running one stops at its next step */
    CHECK_C(c, weft_client_cancel(c, id));
    CHECK_C(c, weft_client_wait(c, id, 60000, NULL, NULL, &st));
    CHECK(st.state == WEFT_JOB_CANCELLED);
    CHECK(st.step < 1000);
    CHECK_EQ(st.n_images, 0);
    /* a cancel during the last step (the only one; 1024 x 1024 takes seconds here) stops the
     * job before its decode: cancelled, no image (it once went on to the image and ended done) */
    char last[WEFT_CLIENT_ID_MAX];
    submit(c, fox, 1, 1024, 1, 1, 0, last);
    for (int i = 0; i < 3000; i++) { /* 30 s */
        CHECK_C(c, weft_client_status(c, last, &st));
        if (st.state != WEFT_JOB_QUEUED)
            break;
        sleep_ms(10);
    }
    CHECK(st.state == WEFT_JOB_RUNNING);
    CHECK_C(c, weft_client_cancel(c, last));
    CHECK_C(c, weft_client_wait(c, last, 60000, NULL, NULL, &st));
    CHECK(st.state == WEFT_JOB_CANCELLED && st.n_images == 0);
    /* cancelling a finished job is a conflict */
    CHECK(weft_client_cancel(c, id) == WEFT_ERR_BUSY);
    CHECK_EQ(weft_client_http_status(c), 409);
    /* and the runner takes the next job */
    submit(c, fox, 1, 64, 2, 1, 0, id);
    wait_done(c, id, &st);
    weft_job_status_cleanup(&st);
    weft_client_close(c);
    CHECK_EQ(server_stop(&s, SIGTERM), 0);
    return 0;
}

/* SIGKILL the coordinator with jobs queued: after a restart every job completes, once. */
static int case_restart(void)
{
    struct server s;
    server_start(&s, NULL, NULL);
    struct weft_client *c = client(&s, NULL);
    enum { N = 6 };
    char ids[N][WEFT_CLIENT_ID_MAX];
    const char *p2[] = {"lighthouse", "city-night"};
    submit(c, p2, 1, 128, 50, 1, 1, ids[0]); /* long enough to keep the others queued */
    for (int i = 1; i < N; i++)
        submit(c, p2, 2, 64, 2, 1, (uint64_t)i, ids[i]);
    struct weft_job_status st = {0};
    CHECK_C(c, weft_client_status(c, ids[N - 1], &st));
    CHECK(st.state == WEFT_JOB_QUEUED); /* so the restart has queued work to recover */
    CHECK_EQ(server_stop(&s, SIGKILL), 128 + SIGKILL);
    weft_client_close(c);

    /* a torn record at the end of the journal, as a crash mid-write leaves it */
    char path[400];
    snprintf(path, sizeof(path), "%s/journal/journal", tmpdir);
    FILE *f = fopen(path, "a");
    CHECK(f);
    fputs("0badc0de {\"t\":\"submit\",\"id\":\"tor", f);
    CHECK(fclose(f) == 0);

    /* a small journal_compact: the journal is rewritten while these jobs finish */
    const char *compact[] = {"--api.journal_compact=4096", NULL};
    server_start(&s, NULL, compact);
    c = client(&s, NULL);
    for (int i = 0; i < N; i++) {
        wait_done(c, ids[i], &st);
        CHECK_EQ(st.n_images, i == 0 ? 1 : 2);
        free(image(c, ids[i], st.n_images - 1, i == 0 ? 128 : 64, i == 0 ? 128 : 64));
    }
    /* exactly those jobs, none lost, none twice */
    char *text;
    CHECK_EQ(get(c, "GET", "/v1/jobs", NULL, &text), 200);
    CHECK_EQ(count(text, "\"id\""), N);
    for (int i = 0; i < N; i++) {
        char key[64];
        snprintf(key, sizeof(key), "\"id\":\"%s\"", ids[i]);
        CHECK_EQ(count(text, key), 1);
    }
    weft_client_free(text);
    CHECK_EQ(get(c, "GET", "/metrics", NULL, &text), 200);
    CHECK(strstr(text, "weft_jobs{state=\"done\"} 6"));
    weft_client_free(text);
    weft_client_close(c);
    CHECK_EQ(server_stop(&s, SIGTERM), 0);

    /* and once more: the finished jobs stay finished, with their images */
    struct stat jsb;
    CHECK(stat(path, &jsb) == 0 && jsb.st_size < 3 * 4096);
    server_start(&s, NULL, compact);
    c = client(&s, NULL);
    CHECK_C(c, weft_client_status(c, ids[3], &st));
    CHECK(st.state == WEFT_JOB_DONE);
    CHECK_EQ(st.n_images, 2);
    free(image(c, ids[3], 1, 64, 64));
    weft_job_status_cleanup(&st);
    weft_client_close(c);
    CHECK_EQ(server_stop(&s, SIGTERM), 0);
    return 0;
}

/* SIGTERM with a job running: stopped at a step after the grace period, exit 0, run again after
 * a restart. */
static int case_shutdown(void)
{
    struct server s;
    const char *extra[] = {"--api.max_steps=1000", "--api.shutdown_grace_ms=200", NULL};
    server_start(&s, NULL, extra);
    struct weft_client *c = client(&s, NULL);
    const char *fox[] = {"red-fox"};
    char id[WEFT_CLIENT_ID_MAX];
    submit(c, fox, 1, 256, 1000, 1, 0, id);
    struct weft_job_status st = {0};
    wait_running(c, id, &st);
    weft_client_close(c);
    CHECK_EQ(server_stop(&s, SIGTERM), 0);
    server_start(&s, NULL, extra);
    c = client(&s, NULL);
    wait_running(c, id, &st); /* queued again, and run again */
    CHECK_C(c, weft_client_cancel(c, id));
    CHECK_C(c, weft_client_wait(c, id, 60000, NULL, NULL, &st));
    CHECK(st.state == WEFT_JOB_CANCELLED);
    char *text;
    char path[96];
    snprintf(path, sizeof(path), "/v1/jobs/%s", id);
    CHECK_EQ(get(c, "GET", path, NULL, &text), 200);
    CHECK(strstr(text, "\"attempts\":2"));
    weft_client_free(text);
    weft_job_status_cleanup(&st);
    weft_client_close(c);
    CHECK_EQ(server_stop(&s, SIGINT), 0);
    return 0;
}

/* [api] keep_jobs: the oldest finished jobs go, with their folders, and stay gone. */
static int case_retain(void)
{
    struct server s;
    const char *extra[] = {"--api.keep_jobs=2", NULL};
    server_start(&s, NULL, extra);
    struct weft_client *c = client(&s, NULL);
    const char *fox[] = {"red-fox"};
    char ids[4][WEFT_CLIENT_ID_MAX];
    struct weft_job_status st = {0};
    for (int i = 0; i < 4; i++) {
        submit(c, fox, 1, 32, 1, 1, (uint64_t)i, ids[i]);
        wait_done(c, ids[i], &st);
    }
    char *text, dir[600];
    CHECK_EQ(get(c, "GET", "/v1/jobs", NULL, &text), 200);
    CHECK_EQ(count(text, "\"id\""), 2);
    CHECK(!strstr(text, ids[0]) && !strstr(text, ids[1]) && strstr(text, ids[3]));
    weft_client_free(text);
    CHECK(weft_client_status(c, ids[0], &st) == WEFT_ERR_NOT_FOUND);
    snprintf(dir, sizeof(dir), "%s/jobs/%s", tmpdir, ids[0]);
    struct stat sb;
    CHECK(stat(dir, &sb) != 0);
    weft_client_close(c);
    CHECK_EQ(server_stop(&s, SIGTERM), 0);
    server_start(&s, NULL, extra);
    c = client(&s, NULL);
    CHECK(weft_client_status(c, ids[1], &st) == WEFT_ERR_NOT_FOUND);
    CHECK_C(c, weft_client_status(c, ids[2], &st));
    CHECK(st.state == WEFT_JOB_DONE);
    weft_job_status_cleanup(&st);
    weft_client_close(c);
    CHECK_EQ(server_stop(&s, SIGTERM), 0);
    return 0;
}

static int case_unix(void)
{
    struct server s;
    char listen[400];
    snprintf(listen, sizeof(listen), "unix:%s/api.sock", tmpdir);
    server_start(&s, listen, NULL);
    CHECK(strcmp(s.addr, listen) == 0);
    struct stat sb;
    CHECK(stat(listen + 5, &sb) == 0 && S_ISSOCK(sb.st_mode));
    CHECK_EQ(sb.st_mode & 0077, 0); /* the owner's only */
    struct weft_client *c = client(&s, NULL);
    const char *fox[] = {"red-fox"};
    char id[WEFT_CLIENT_ID_MAX];
    submit(c, fox, 1, 32, 2, 1, 0, id);
    struct weft_job_status st = {0};
    wait_done(c, id, &st);
    free(image(c, id, 0, 32, 32));
    weft_job_status_cleanup(&st);
    weft_client_close(c);
    CHECK_EQ(server_stop(&s, SIGTERM), 0);
    CHECK(stat(listen + 5, &sb) != 0); /* removed on exit */
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Hardening                                                                                 */

/* A unix socket path is taken over only from a server that died; nothing this server did not
 * bind is ever removed. */
static int case_unix_guard(void)
{
    char path[400], addr[420];
    snprintf(path, sizeof(path), "%s/api.sock", tmpdir);
    snprintf(addr, sizeof(addr), "unix:%s", path);
    struct server a;
    server_start(&a, addr, NULL);
    struct stat before, sb;
    CHECK(stat(path, &before) == 0);

    /* a second server where one listens: refused, the first one's socket untouched */
    CHECK_EQ(server_start_fails(addr, NULL), 1);
    CHECK(log_contains("another server is listening there"));
    CHECK(stat(path, &sb) == 0 && S_ISSOCK(sb.st_mode) && sb.st_ino == before.st_ino);
    struct weft_client *c = client(&a, NULL);
    check_serving(c);
    weft_client_close(c);

    /* a file that is not a socket: refused, named, and kept */
    char file[400], flisten[420], text[32] = "";
    snprintf(file, sizeof(file), "%s/not-a-socket", tmpdir);
    snprintf(flisten, sizeof(flisten), "unix:%s", file);
    FILE *f = fopen(file, "w");
    CHECK(f && fputs("precious\n", f) >= 0 && fclose(f) == 0);
    CHECK_EQ(server_start_fails(flisten, NULL), 1);
    CHECK(log_contains(file) && log_contains("not a socket"));
    f = fopen(file, "r");
    CHECK(f && fgets(text, sizeof(text), f));
    (void)fclose(f);
    CHECK(strcmp(text, "precious\n") == 0);

    /* a stale socket (bound, never listened on or closed without unlink: a server that died)
     * is replaced, and removed at exit */
    char stale[400], slisten[420];
    snprintf(stale, sizeof(stale), "%s/stale.sock", tmpdir);
    snprintf(slisten, sizeof(slisten), "unix:%s", stale);
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", stale);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&sun, sizeof(sun)) == 0);
    close(fd);
    CHECK(stat(stale, &sb) == 0 && S_ISSOCK(sb.st_mode));
    struct server b;
    server_start(&b, slisten, NULL);
    c = client(&b, NULL);
    check_serving(c);
    weft_client_close(c);
    CHECK_EQ(server_stop(&b, SIGTERM), 0);
    CHECK(stat(stale, &sb) != 0);

    /* the first server's path taken by another socket while it runs: left alone at its exit */
    CHECK(unlink(path) == 0);
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&sun, sizeof(sun)) == 0);
    CHECK(listen(fd, 1) == 0);
    CHECK(stat(path, &before) == 0);
    CHECK_EQ(server_stop(&a, SIGTERM), 0);
    CHECK(stat(path, &sb) == 0 && sb.st_ino == before.st_ino);
    close(fd);
    return 0;
}

/* One more byte of head on each slow connection the server has not answered yet. */
static void trickle(int *fds, int n, char byte)
{
    for (int i = 0; i < n; i++) {
        struct pollfd p = {.fd = fds[i], .events = POLLIN};
        if (poll(&p, 1, 0) != 0)
            continue; /* answered (408) or closed: read below */
        (void)send(fds[i], &byte, 1, MSG_NOSIGNAL);
    }
}

/* max_connections slow-loris connections (a byte of head now and then) hold every slot: a
 * well-behaved client is served all the same, in place of the one that waited longest; and a
 * head that does not arrive within header_timeout_ms gets its 408 long before
 * request_timeout_ms. */
static int case_flood(void)
{
    struct server s;
    const char *extra[] = {"--api.max_connections=256", NULL};
    server_start(&s, NULL, extra);
    enum { N = 256, ROUNDS = 4 };
    static int slow[N];
    static const char head[] = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: abcdefghijklmnop";
    for (int i = 0; i < N; i++) {
        slow[i] = raw_connect(&s);
        raw_send(slow[i], head, 1);
    }
    sleep_ms(500); /* every one accepted, each in its request head */
    static char buf[1 << 16];
    bool closed;
    char ids[ROUNDS][WEFT_CLIENT_ID_MAX];
    const char *fox[] = {"red-fox"};
    for (int r = 0; r < ROUNDS; r++) {
        trickle(slow, N, head[1 + r]);
        const char *hz = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        int code = raw_exchange(&s, hz, strlen(hz), buf, sizeof(buf), &closed);
        if (code != 200)
            fprintf(stderr, "round %d: /healthz answered: %.200s\n", r, buf);
        CHECK_EQ(code, 200);
        struct weft_client *c = client(&s, NULL);
        submit(c, fox, 1, 32, 1, 1, (uint64_t)r, ids[r]);
        weft_client_close(c);
        sleep_ms(100);
    }
    struct weft_client *c = client(&s, NULL);
    struct weft_job_status st = {0};
    for (int r = 0; r < ROUNDS; r++)
        wait_done(c, ids[r], &st);
    weft_job_status_cleanup(&st);
    weft_client_close(c);
    /* the ones closed for the newcomers were the oldest, each told why; the others still wait */
    raw_read(slow[0], buf, sizeof(buf), 5000, &closed);
    CHECK(strncmp(buf, "HTTP/1.1 408 ", 13) == 0);
    CHECK(strstr(buf, "max_connections"));
    int evicted = 1;
    for (int i = 1; i < N; i++) {
        struct pollfd p = {.fd = slow[i], .events = POLLIN};
        if (poll(&p, 1, 0) > 0) {
            raw_read(slow[i], buf, sizeof(buf), 1000, &closed);
            evicted += strstr(buf, "max_connections") != NULL; /* not a header timeout */
        }
        close(slow[i]);
    }
    close(slow[0]);
    CHECK(evicted <= 2 * ROUNDS + 1); /* one per newcomer at most: some find a slot free */
    CHECK_EQ(server_stop(&s, SIGTERM), 0);

    /* [api] header_timeout_ms: a head trickling in is answered 408 after it, while a body may
     * take up to request_timeout_ms */
    const char *quick[] = {"--api.header_timeout_ms=300", NULL};
    server_start(&s, NULL, quick);
    int fd = raw_connect(&s);
    closed = false;
    for (size_t i = 0; i < strlen(head) && !closed; i++) {
        if (send(fd, head + i, 1, MSG_NOSIGNAL) != 1)
            break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) > 0)
            break;
    }
    raw_read(fd, buf, sizeof(buf), 5000, &closed);
    CHECK(strncmp(buf, "HTTP/1.1 408 ", 13) == 0);
    CHECK(strstr(buf, "header_timeout_ms"));
    close(fd);
    fd = raw_connect(&s);
    const char *body = "{\"prompt\": \"red-fox\", \"height\": 32, \"width\": 32, \"steps\": 1}";
    char post[400];
    int n = snprintf(post, sizeof(post), "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     "application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                     strlen(body));
    raw_send(fd, post, (size_t)n);
    for (size_t i = 0; i < strlen(body); i++) { /* 1 s for the body: over header_timeout_ms */
        raw_send(fd, body + i, 1);
        sleep_ms(15);
    }
    raw_read(fd, buf, sizeof(buf), 5000, &closed);
    CHECK(strncmp(buf, "HTTP/1.1 202 ", 13) == 0);
    close(fd);
    CHECK_EQ(server_stop(&s, SIGTERM), 0);
    return 0;
}

/* Only HTTP/1.0 and HTTP/1.1, as RFC 9112 has them. */
static int case_protocol(void)
{
    struct server s;
    server_start(&s, NULL, NULL);
    static const struct {
        const char *req;
        int code;
    } reqs[] = {
        {"GET /healthz\r\n\r\n", 400},                                   /* no version */
        {"GET /healthz HTTP/0.9\r\n\r\n", 400},
        {"GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n", 505},
        {"GET /healthz HTTP/3.0\r\nHost: x\r\n\r\n", 505},
        {"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505},                       /* HTTP/2 preface */
        {"GET /healthz HTTP/1.1\r\nHost : x\r\n\r\n", 400},              /* section 5.1 */
        {"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A : 1\r\n\r\n", 400},
        {"GET /healthz HTTP/1.1\r\n\r\n", 400},                          /* section 3.2 */
        {"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
        {"GET /healthz HTTP/1.0\r\n\r\n", 200},
        {"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 200},
        {"GET /healthz HTTP/1.1\r\nHost:\r\nConnection: close\r\n\r\n", 200}, /* empty: allowed */
    };
    static char buf[1 << 16];
    for (size_t i = 0; i < sizeof(reqs) / sizeof(reqs[0]); i++) {
        bool closed;
        int code = raw_exchange(&s, reqs[i].req, strlen(reqs[i].req), buf, sizeof(buf), &closed);
        if (code != reqs[i].code || !closed) {
            fprintf(stderr, "%zu: %d%s for %s", i, code, closed ? "" : " (left open)", buf);
            CHECK_EQ(code, reqs[i].code);
        }
        const char *b = strstr(buf, "\r\n\r\n");
        CHECK(b);
        CHECK(strncmp(b + 4, code == 200 ? "{\"ok\":true" : "{\"error\":", code == 200 ? 10 : 9)
              == 0);
    }
    struct weft_client *c = client(&s, NULL);
    check_serving(c);
    weft_client_close(c);
    CHECK_EQ(server_stop(&s, SIGTERM), 0);
    return 0;
}

/* Every error body is UTF-8 JSON of a bounded size, whatever bytes the request held. */
static int case_utf8(void)
{
    struct server s;
    server_start(&s, NULL, NULL);
    static const char *const paths[] = {
        "/v1/jobs/\xff\xfe",           "/v1/jobs/ab\xc3",         "/v1/jobs/\xed\xa0\x80zz",
        "/v1/jobs/\xc0\xaf/images/0",  "/v1/jobs/0123456789abcd\xe2\x82", "/v1/jobs/\xe2\x82\xac",
    };
    static char req[8192], buf[1 << 16];
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]) + 2; i++) {
        int n;
        if (i < sizeof(paths) / sizeof(paths[0])) {
            n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                         "\r\n", paths[i]);
        } else {
            /* a body that is not UTF-8, and one naming a long unknown field */
            char body[4200];
            if (i == sizeof(paths) / sizeof(paths[0]))
                snprintf(body, sizeof(body), "{\"prompt\": \"red-fox\", \"\xff\xfe\": 1}");
            else
                snprintf(body, sizeof(body), "{\"prompt\": \"red-fox\", \"%04000d\xc3\xa9\": 1}",
                         0);
            n = snprintf(req, sizeof(req), "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: "
                         "application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
                         strlen(body), body);
        }
        bool closed;
        int code = raw_exchange(&s, req, (size_t)n, buf, sizeof(buf), &closed);
        CHECK(code == 404 || code == 400);
        const char *b = strstr(buf, "\r\n\r\n");
        CHECK(b);
        b += 4;
        size_t len = strlen(b);
        if (!weft_utf8_valid(b, len, NULL)) {
            fprintf(stderr, "%zu: the error body is not UTF-8: %s\n", i, b);
            CHECK(0);
        }
        CHECK(len < 1024);
        cJSON *j = cJSON_Parse(b);
        CHECK(j && cJSON_IsString(cJSON_GetObjectItem(j, "error")));
        cJSON_Delete(j);
    }
    CHECK_EQ(server_stop(&s, SIGTERM), 0);
    return 0;
}

/* During the shutdown grace the server still answers: 503 to every new request, /healthz
 * saying why; it exits 0 once the running job has stopped, and then nothing listens. */
static int case_drain(void)
{
    struct server s;
    const char *extra[] = {"--api.max_steps=1000", "--api.shutdown_grace_ms=3000", NULL};
    server_start(&s, NULL, extra);
    struct weft_client *c = client(&s, NULL);
    const char *fox[] = {"red-fox"};
    char id[WEFT_CLIENT_ID_MAX];
    submit(c, fox, 1, 256, 1000, 1, 0, id);
    struct weft_job_status st = {0};
    wait_running(c, id, &st);
    weft_job_status_cleanup(&st);
    weft_client_close(c);
    static char buf[1 << 16];
    const char *hz = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    bool closed;
    int idle = raw_connect(&s); /* a keep-alive connection, idle when the signal comes */
    raw_send(idle, hz, strlen(hz));
    raw_read_until(idle, buf, sizeof(buf), "}", 5000, &closed);
    CHECK_EQ(raw_status(buf), 200);
    CHECK(kill(s.pid, SIGTERM) == 0);
    int code = 0;
    for (int i = 0; i < 100 && code != 503; i++) { /* until the signal is seen: 5 s at most */
        int fd = raw_try_connect(&s);
        if (fd < 0)
            CHECK(!"nothing answers during the shutdown grace");
        raw_send(fd, hz, strlen(hz));
        raw_read_until(fd, buf, sizeof(buf), "}", 5000, &closed);
        close(fd);
        code = raw_status(buf);
        CHECK(code == 200 || code == 503);
        if (code == 200)
            sleep_ms(50);
    }
    CHECK_EQ(code, 503);
    CHECK(strstr(buf, "{\"ok\":false,\"status\":\"shutting down\"}"));
    CHECK(strstr(buf, "Connection: close\r\n"));
    /* the idle one's next request is answered too, then it is closed */
    raw_send(idle, hz, strlen(hz));
    raw_read(idle, buf, sizeof(buf), 5000, &closed);
    CHECK_EQ(raw_status(buf), 503);
    CHECK(closed);
    close(idle);
    const char *post = "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       "Content-Length: 20\r\n\r\n{\"prompt\":\"red-fox\"}";
    CHECK_EQ(raw_exchange(&s, post, strlen(post), buf, sizeof(buf), &closed), 503);
    CHECK(strstr(buf, "shutting down"));
    const char *list = "GET /v1/jobs HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK_EQ(raw_exchange(&s, list, strlen(list), buf, sizeof(buf), &closed), 503);
    CHECK_EQ(server_wait(&s, false), 0);
    CHECK_EQ(raw_try_connect(&s), -1);
    return 0;
}


/* ---------------------------------------------------------------------------------------- */
/* Serving as people expect: the OpenAI images API, event streams, idempotency, pages, CORS  */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* POST body to path: the status, the parsed JSON answer in *json_p (caller deletes). */
static int post_json(struct weft_client *c, const char *path, const char *body, cJSON **json_p)
{
    char *ans;
    int code = get(c, "POST", path, body, &ans);
    *json_p = cJSON_Parse(ans);
    if (!*json_p)
        fprintf(stderr, "POST %s: not JSON: %s\n", path, ans);
    CHECK(*json_p);
    weft_client_free(ans);
    return code;
}

static const char *jstr(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    CHECK(cJSON_IsString(v));
    return v->valuestring;
}

/* The OpenAI error shape: {"error": {"message", "type", "param", "code"}}. */
static void expect_oa_error(struct weft_client *c, const char *body, int want, const char *param,
                            const char *sub)
{
    cJSON *o;
    int code = post_json(c, "/v1/images/generations", body, &o);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "error");
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(e, "message");
    const cJSON *par = cJSON_GetObjectItemCaseSensitive(e, "param");
    bool ok = code == want && cJSON_IsString(msg) && strstr(msg->valuestring, sub) &&
              cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "type")) &&
              (param ? cJSON_IsString(par) && strcmp(par->valuestring, param) == 0
                     : cJSON_IsNull(par));
    if (!ok) {
        char *t = cJSON_PrintUnformatted(o);
        fprintf(stderr, "%s: got %d %s, want %d with \"%s\" (param %s)\n", body, code, t, want,
                sub, param ? param : "null");
        exit(1);
    }
    cJSON_Delete(o);
}

static int case_openai(void)
{
    struct server s;
    server_start(&s, NULL, NULL);
    struct weft_client *c = client(&s, NULL);
    cJSON *o;
    /* GET /v1/models: OpenAI's list, the model folder's name as its id */
    char *text;
    CHECK_EQ(get(c, "GET", "/v1/models", NULL, &text), 200);
    o = cJSON_Parse(text);
    CHECK(o && strcmp(jstr(o, "object"), "list") == 0);
    const cJSON *m0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "data"), 0);
    CHECK(strcmp(jstr(m0, "id"), "flux-tiny") == 0 && strcmp(jstr(m0, "object"), "model") == 0);
    cJSON_Delete(o);
    weft_client_free(text);

    /* b64_json PNG, two images: the pixels of the job's own PNGs, and the job is in /v1/jobs */
    CHECK_EQ(post_json(c, "/v1/images/generations",
                       "{\"model\": \"flux-tiny\", \"prompt\": \"red-fox\", \"n\": 2, \"size\": "
                       "\"64x48\", \"seed\": 7, \"steps\": 3}", &o), 200);
    CHECK(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(o, "created")));
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(o, "data");
    CHECK_EQ(cJSON_GetArraySize(data), 2);
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, "weft");
    char id[WEFT_CLIENT_ID_MAX];
    snprintf(id, sizeof(id), "%s", jstr(x, "job"));
    CHECK(strcmp(jstr(x, "seed"), "7") == 0);
    for (int i = 0; i < 2; i++) {
        const char *b64 = jstr(cJSON_GetArrayItem(data, i), "b64_json");
        void *png;
        size_t len;
        CHECK_OK(weft_base64_decode(b64, strlen(b64), &png, &len));
        uint32_t w, h;
        unsigned char *a = png_pixels(png, len, &w, &h);
        CHECK(w == 64 && h == 48);
        unsigned char *b = image(c, id, i, 64, 48);
        CHECK(memcmp(a, b, 64 * 48 * 3) == 0);
        free(a);
        free(b);
        weft_free(png);
    }
    cJSON_Delete(o);
    /* the same seed through POST /v1/jobs: the same picture (one job model for both APIs) */
    char id2[WEFT_CLIENT_ID_MAX];
    const char *fox[] = {"red-fox"};
    struct weft_prompt p = {.name = "red-fox"};
    struct weft_job_request r = {.prompts = &p, .n_prompts = 1, .height = 48, .width = 64,
                                 .steps = 3, .seed = 7};
    CHECK_C(c, weft_client_submit(c, &r, id2));
    struct weft_job_status st = {0};
    wait_done(c, id2, &st);
    unsigned char *ja = image(c, id2, 0, 64, 48), *jb = image(c, id, 0, 64, 48);
    CHECK(memcmp(ja, jb, 64 * 48 * 3) == 0);
    free(ja);
    free(jb);
    (void)fox;

    /* JPEG, WebP: their signatures; a URL answer that serves the image in that format */
    static const struct {
        const char *fmt;
        const char *magic;
        size_t off, n;
    } fmts[] = {{"jpeg", "\xff\xd8\xff", 0, 3}, {"webp", "WEBP", 8, 4}, {"png", "\x89PNG", 0, 4}};
    for (int k = 0; k < 3; k++) {
        char body[300];
        snprintf(body, sizeof(body), "{\"prompt\": \"lighthouse\", \"size\": \"64x64\", "
                 "\"steps\": 2, \"output_format\": \"%s\", \"output_compression\": 20}",
                 fmts[k].fmt);
        CHECK_EQ(post_json(c, "/v1/images/generations", body, &o), 200);
        CHECK(strcmp(jstr(o, "output_format"), fmts[k].fmt) == 0);
        const char *b64 = jstr(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "data"), 0),
                               "b64_json");
        void *img;
        size_t len;
        CHECK_OK(weft_base64_decode(b64, strlen(b64), &img, &len));
        CHECK(len > fmts[k].off + fmts[k].n &&
              memcmp((char *)img + fmts[k].off, fmts[k].magic, fmts[k].n) == 0);
        weft_free(img);
        cJSON_Delete(o);
        snprintf(body, sizeof(body), "{\"prompt\": \"lighthouse\", \"size\": \"64x64\", "
                 "\"steps\": 2, \"output_format\": \"%s\", \"response_format\": \"url\"}",
                 fmts[k].fmt);
        CHECK_EQ(post_json(c, "/v1/images/generations", body, &o), 200);
        const char *url = jstr(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "data"), 0),
                               "url");
        char prefix[600];
        snprintf(prefix, sizeof(prefix), "http://%s/v1/jobs/", s.addr);
        CHECK(strncmp(url, prefix, strlen(prefix)) == 0);
        char *ans;
        size_t alen;
        int code;
        CHECK_C(c, weft_client_request(c, "GET", url + strlen(prefix) - 9, NULL, 0, &code, &ans,
                                       &alen));
        CHECK_EQ(code, 200);
        CHECK(alen > fmts[k].off + fmts[k].n &&
              memcmp(ans + fmts[k].off, fmts[k].magic, fmts[k].n) == 0);
        weft_client_free(ans);
        cJSON_Delete(o);
    }
    /* the JPEG is made once from the PNG and then served from the job's folder */
    CHECK(log_contains("POST /v1/images/generations 200"));

    /* refusals in OpenAI's shape, naming the field */
    expect_oa_error(c, "{\"prompt\": \"a red fox in the snow\"}", 400, "prompt",
                    "flux-tiny cannot encode text");
    expect_oa_error(c, "{\"prompt\": \"a red fox in the snow\"}", 400, "prompt",
                    "city-night, lighthouse, red-fox");
    expect_oa_error(c, "{\"size\": \"64x64\"}", 400, "prompt", "'prompt' is required");
    expect_oa_error(c, "{\"prompt\": \"\"}", 400, "prompt", "'prompt' is empty");
    expect_oa_error(c, "{\"prompt\": \"red-fox\", \"model\": \"dall-e-3\"}", 404, "model",
                    "not served here");
    expect_oa_error(c, "{\"prompt\": \"red-fox\", \"negative_prompt\": \"blur\", "
                    "\"true_cfg_scale\": 2}", 400, "negative_prompt", "cannot encode text");
    expect_oa_error(c, "{\"prompt\": \"red-fox\", \"true_cfg_scale\": 2}", 400,
                    "true_cfg_scale", "needs a 'negative_prompt'");
    expect_oa_error(c, "{\"prompt\": \"red-fox\", \"negative_prompt\": \"lighthouse\", "
                    "\"true_cfg_scale\": -1}", 400, "true_cfg_scale", "0..1000");
    expect_oa_error(c, "{\"prompt\": \"red-fox\", \"size\": \"big\"}", 400, "size", "WIDTHxHEIGHT");
    static const char *const sizes[] = {"+64x+64", "064x064", " 64x64", "64x64 ", "64X64", "x64",
                                        "64x", "-64x64", "64x64x64", "0x64", "123456x64"};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        char b[128];
        snprintf(b, sizeof(b), "{\"prompt\": \"red-fox\", \"size\": \"%s\"}", sizes[i]);
        expect_oa_error(c, b, 400, "size", "WIDTHxHEIGHT");
    }
    expect_oa_error(c, "{\"prompt\": \"red-fox\", \"size\": \"60x60\"}", 400, NULL,
                    "multiples of 16");
    expect_oa_error(c, "{\"prompt\": \"red-fox\", \"colour\": 1}", 400, "colour", "unknown field");
    expect_oa_error(c, "{\"prompt\": \"red-fox\", \"response_format\": \"gif\"}", 400,
                    "response_format", "b64_json or url");
    expect_oa_error(c, "{\"prompt\": \"red-fox\", \"background\": \"transparent\"}", 400,
                    "background", "alpha");
    expect_oa_error(c, "{\"n\": 1}", 400, "prompt", "required");
    expect_oa_error(c, "[1]", 400, NULL, "JSON object");
    weft_job_status_cleanup(&st);
    weft_client_close(c);
    CHECK_EQ(server_stop(&s, SIGTERM), 0);
    return 0;
}

/* An SSE event's data JSON, the event named name, from buf at or after *pos. */
static cJSON *sse_next(const char *buf, size_t *pos, const char *name)
{
    char want[64];
    snprintf(want, sizeof(want), "event: %s\ndata: ", name);
    const char *at = strstr(buf + *pos, want);
    if (!at)
        return NULL;
    at += strlen(want);
    const char *end = strchr(at, '\n');
    CHECK(end);
    *pos = (size_t)(end - buf);
    return cJSON_ParseWithLength(at, (size_t)(end - at));
}

struct follow_log {
    int calls, last_step, steps_seen;
    bool monotonic;
};

static int on_follow(void *arg, const struct weft_job_status *st)
{
    struct follow_log *f = arg;
    f->calls++;
    if (st->state == WEFT_JOB_RUNNING && st->step > 0) {
        if (st->step < f->last_step && st->images_done == 0)
            f->monotonic = false;
        f->last_step = st->step;
        f->steps_seen++;
    }
    return 0;
}

static int case_events(void)
{
    struct server s;
    const char *extra[] = {"--api.events_keepalive_ms=200", NULL};
    server_start(&s, NULL, extra);
    struct weft_client *c = client(&s, NULL);
    const char *fox[] = {"red-fox"};
    char id[WEFT_CLIENT_ID_MAX];
    submit(c, fox, 1, 256, 6, 2, 1, id);
    /* a raw stream: the head, then state, progress for each step, images, end */
    int fd = raw_connect(&s);
    char req[300];
    int n = snprintf(req, sizeof(req), "GET /v1/jobs/%s/events HTTP/1.1\r\nHost: x\r\n"
                     "Accept: text/event-stream\r\n\r\n", id);
    double t0 = now_s();
    raw_send(fd, req, (size_t)n);
    static char buf[1 << 20];
    bool closed;
    size_t got = raw_read_until(fd, buf, sizeof(buf), "event: end", 60000, &closed);
    double t_end = now_s();
    CHECK(got > 0 && strstr(buf, "event: end"));
    CHECK_EQ(raw_status(buf), 200);
    CHECK(strstr(buf, "Content-Type: text/event-stream"));
    CHECK(strstr(buf, "Transfer-Encoding: chunked"));
    size_t pos = 0;
    cJSON *e = sse_next(buf, &pos, "state");
    CHECK(e);
    cJSON_Delete(e);
    int steps = 0, last = 0;
    size_t ppos = pos;
    while ((e = sse_next(buf, &ppos, "progress"))) {
        const cJSON *step = cJSON_GetObjectItemCaseSensitive(e, "step");
        CHECK(cJSON_IsNumber(step) && cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(e, "eta")));
        CHECK(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(e, "elapsed")));
        CHECK_EQ(cJSON_GetObjectItemCaseSensitive(e, "steps")->valueint, 6);
        last = step->valueint;
        steps++;
        cJSON_Delete(e);
    }
    CHECK(steps >= 5); /* every step of the batch is pushed (the first may come in "state") */
    CHECK_EQ(last, 6);
    size_t ipos = 0;
    int images = 0;
    while ((e = sse_next(buf, &ipos, "image"))) {
        CHECK(strstr(jstr(e, "url"), id));
        images++;
        cJSON_Delete(e);
    }
    CHECK_EQ(images, 2);
    size_t epos = 0;
    e = sse_next(buf, &epos, "end");
    CHECK(e && strcmp(jstr(e, "state"), "done") == 0);
    cJSON_Delete(e);
    /* the stream ends with the chunked terminator and the connection takes another request */
    if (!strstr(buf, "\r\n0\r\n\r\n"))
        raw_read_until(fd, buf + got, sizeof(buf) - got, "\r\n0\r\n\r\n", 5000, &closed);
    CHECK(strstr(buf, "\r\n0\r\n\r\n"));
    n = snprintf(req, sizeof(req), "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    raw_send(fd, req, (size_t)n);
    raw_read_until(fd, buf, sizeof(buf), "\"ok\"", 5000, &closed);
    CHECK_EQ(raw_status(buf), 200);
    close(fd);
    fprintf(stderr, "events: a 2-image 256x256 6-step job streamed in %.3f s\n", t_end - t0);

    /* the stream of a finished job: all of it at once, a whole answer */
    CHECK_EQ(get(c, "GET", "/v1/jobs/0000000000000000/events", NULL, NULL), 404);
    char *text;
    char path[96];
    snprintf(path, sizeof(path), "/v1/jobs/%s/events", id);
    CHECK_EQ(get(c, "GET", path, NULL, &text), 200);
    CHECK(strstr(text, "event: state") == NULL && strstr(text, "event: end"));
    /* HEAD says the length GET sends (it said 0) */
    char head[300], ans[2048], want[64];
    bool shut;
    int hn = snprintf(head, sizeof(head), "HEAD %s HTTP/1.1\r\nHost: x\r\nConnection: close"
                      "\r\n\r\n", path);
    CHECK_EQ(raw_exchange(&s, head, (size_t)hn, ans, sizeof(ans), &shut), 200);
    snprintf(want, sizeof(want), "Content-Length: %zu\r\n", strlen(text));
    CHECK(strstr(ans, want) && strstr(ans, "text/event-stream"));
    weft_client_free(text);

    /* keep-alive comments while a queued job waits; the client's follow sees every step */
    submit(c, fox, 1, 256, 8, 1, 2, id);
    struct follow_log fl = {.monotonic = true};
    struct weft_job_status st = {0};
    CHECK_C(c, weft_client_follow(c, id, 60000, on_follow, &fl, &st));
    CHECK(st.state == WEFT_JOB_DONE && st.n_images == 1 && fl.monotonic);
    CHECK(fl.steps_seen >= 7);
    /* latency: a step's event reaches a client within a few ms of its end (loopback) */
    weft_job_status_cleanup(&st);
    weft_client_close(c);
    CHECK_EQ(server_stop(&s, SIGTERM), 0);
    return 0;
}

static int stop_after_2s(void *arg, const struct weft_job_status *st)
{
    (void)st;
    return now_s() - *(double *)arg >= 2.0;
}

static int case_keepalive(void)
{
    struct server s;
    const char *extra[] = {"--api.events_keepalive_ms=150", "--api.shutdown_grace_ms=0", NULL};
    server_start(&s, NULL, extra);
    struct weft_client *c = client(&s, NULL);
    const char *fox[] = {"red-fox"};
    char busy[WEFT_CLIENT_ID_MAX], id[WEFT_CLIENT_ID_MAX];
    submit(c, fox, 1, 512, 100, 1, 1, busy); /* holds the local runner */
    submit(c, fox, 1, 64, 2, 1, 1, id);      /* waits behind it */
    int fd = raw_connect(&s);
    char req[300];
    int n = snprintf(req, sizeof(req), "GET /v1/jobs/%s/events HTTP/1.1\r\nHost: x\r\n\r\n", id);
    raw_send(fd, req, (size_t)n);
    static char buf[1 << 16];
    bool closed;
    raw_read_until(fd, buf, sizeof(buf), ": keep-alive\n\n: keep-alive", 5000, &closed);
    CHECK(strstr(buf, "\"state\":\"queued\""));
    CHECK(count(buf, ": keep-alive") >= 2);
    /* cancelling the job ends its stream */
    CHECK_C(c, weft_client_cancel(c, id));
    raw_read_until(fd, buf, sizeof(buf), "event: end", 5000, &closed);
    CHECK(strstr(buf, "event: end") && strstr(buf, "\"cancelled\""));
    close(fd);
    /* a stream outlasts the client's per-request timeout (600 ms here) as long as something
     * comes: the client's follow runs 2 s on the busy job, then its callback stops it */
    struct weft_client_opts o = {.address = s.addr, .timeout_ms = 600};
    struct weft_client *c2;
    CHECK_OK(weft_client_connect(&o, &c2));
    struct weft_job_status st = {0};
    double t0 = now_s();
    weft_status_t fs = weft_client_follow(c2, busy, 60000, stop_after_2s, &t0, &st);
    CHECK_EQ(fs, WEFT_ERR_CANCELLED);
    CHECK(now_s() - t0 >= 2.0);
    weft_job_status_cleanup(&st);
    weft_client_close(c2);
    CHECK_C(c, weft_client_cancel(c, busy));
    weft_client_close(c);
    CHECK_EQ(server_stop(&s, SIGTERM), 0);
    return 0;
}

static int case_idempotency(void)
{
    struct server s;
    server_start(&s, NULL, NULL);
    const char body[] = "{\"prompt\": \"red-fox\", \"width\": 64, \"height\": 64, \"steps\": 2}";
    char req[600], buf[8192], first[WEFT_CLIENT_ID_MAX] = "";
    bool closed;
    for (int attempt = 0; attempt < 2; attempt++) {
        int n = snprintf(req, sizeof(req), "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: "
                         "application/json\r\nIdempotency-Key: retry-1\r\nContent-Length: %zu\r\n"
                         "Connection: close\r\n\r\n%s", strlen(body), body);
        CHECK_EQ(raw_exchange(&s, req, (size_t)n, buf, sizeof(buf), &closed), 202);
        const char *idp = strstr(buf, "\"id\":\"");
        CHECK(idp);
        char id[WEFT_CLIENT_ID_MAX];
        CHECK(sscanf(idp, "\"id\":\"%16[0-9a-f]", id) == 1);
        if (attempt == 0)
            snprintf(first, sizeof(first), "%s", id);
        else
            CHECK(strcmp(first, id) == 0 && strstr(buf, "Idempotent-Replayed: true"));
    }
    /* the same key for another request: 422 */
    const char other[] = "{\"prompt\": \"lighthouse\", \"width\": 64, \"height\": 64}";
    int n = snprintf(req, sizeof(req), "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     "application/json\r\nIdempotency-Key: retry-1\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n%s", strlen(other), other);
    CHECK_EQ(raw_exchange(&s, req, (size_t)n, buf, sizeof(buf), &closed), 422);
    CHECK(strstr(buf, first));
    /* kept across a restart (journaled) */
    CHECK_EQ(server_stop(&s, SIGTERM), 0);
    server_start(&s, NULL, NULL);
    n = snprintf(req, sizeof(req), "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: "
                 "application/json\r\nIdempotency-Key: retry-1\r\nContent-Length: %zu\r\n"
                 "Connection: close\r\n\r\n%s", strlen(body), body);
    CHECK_EQ(raw_exchange(&s, req, (size_t)n, buf, sizeof(buf), &closed), 202);
    CHECK(strstr(buf, first));
    /* the OpenAI endpoint: a retried generation answers with the first job's images */
    const char gen[] = "{\"prompt\": \"red-fox\", \"size\": \"64x64\", \"steps\": 2}";
    char ids[2][WEFT_CLIENT_ID_MAX];
    for (int k = 0; k < 2; k++) {
        n = snprintf(req, sizeof(req), "POST /v1/images/generations HTTP/1.1\r\nHost: x\r\n"
                     "Content-Type: application/json\r\nIdempotency-Key: gen-1\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n%s", strlen(gen), gen);
        CHECK_EQ(raw_exchange(&s, req, (size_t)n, buf, sizeof(buf) - 1, &closed), 200);
        const char *j = strstr(buf, "X-Weft-Job: ");
        CHECK(j && sscanf(j, "X-Weft-Job: %16[0-9a-f]", ids[k]) == 1);
        CHECK((k == 1) == (strstr(buf, "Idempotent-Replayed: true\r\n") != NULL));
    }
    CHECK(strcmp(ids[0], ids[1]) == 0);
    n = snprintf(req, sizeof(req), "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: "
                 "application/json\r\nIdempotency-Key: \x01\r\nContent-Length: %zu\r\n"
                 "Connection: close\r\n\r\n%s", strlen(body), body);
    CHECK_EQ(raw_exchange(&s, req, (size_t)n, buf, sizeof(buf), &closed), 400);
    CHECK_EQ(server_stop(&s, SIGTERM), 0);
    return 0;
}

static int case_pages(void)
{
    struct server s;
    server_start(&s, NULL, NULL);
    struct weft_client *c = client(&s, NULL);
    const char *fox[] = {"red-fox"};
    char ids[5][WEFT_CLIENT_ID_MAX];
    struct weft_job_status st = {0};
    for (int i = 0; i < 5; i++) {
        submit(c, fox, 1, 64, 1, 1, (uint64_t)i, ids[i]);
        wait_done(c, ids[i], &st);
    }
    /* pages of 2 in submission order, "next" leading to the following page */
    char path[200], after[WEFT_CLIENT_ID_MAX] = "";
    int seen = 0;
    for (int page = 0; page < 4; page++) {
        snprintf(path, sizeof(path), "/v1/jobs?limit=2%s%s", after[0] ? "&after=" : "", after);
        char *text;
        CHECK_EQ(get(c, "GET", path, NULL, &text), 200);
        cJSON *o = cJSON_Parse(text);
        weft_client_free(text);
        const cJSON *jobs = cJSON_GetObjectItemCaseSensitive(o, "jobs");
        for (const cJSON *j = jobs->child; j; j = j->next)
            CHECK(strcmp(jstr(j, "id"), ids[seen++]) == 0);
        const cJSON *next = cJSON_GetObjectItemCaseSensitive(o, "next");
        if (cJSON_IsNull(next)) {
            cJSON_Delete(o);
            break;
        }
        CHECK_EQ(cJSON_GetArraySize(jobs), 2);
        snprintf(after, sizeof(after), "%s", next->valuestring);
        cJSON_Delete(o);
    }
    CHECK_EQ(seen, 5);
    /* newest first, and a bound */
    char *text;
    CHECK_EQ(get(c, "GET", "/v1/jobs?order=desc&limit=1", NULL, &text), 200);
    CHECK(strstr(text, ids[4]) && !strstr(text, ids[3]));
    weft_client_free(text);
    snprintf(path, sizeof(path), "/v1/jobs?order=desc&after=%s", ids[2]);
    CHECK_EQ(get(c, "GET", path, NULL, &text), 200);
    CHECK(strstr(text, ids[1]) && strstr(text, ids[0]) && !strstr(text, ids[2]));
    weft_client_free(text);
    expect_error(c, "GET", "/v1/jobs?limit=0", NULL, 400, "limit");
    expect_error(c, "GET", "/v1/jobs?limit=5000", NULL, 400, "limit");
    expect_error(c, "GET", "/v1/jobs?after=xyz", NULL, 400, "after");
    /* seeds: absent and -1 are drawn and recorded (and differ); 0 is 0 */
    const char *bodies[] = {
        "{\"prompt\": \"red-fox\", \"width\": 64, \"height\": 64}",
        "{\"prompt\": \"red-fox\", \"width\": 64, \"height\": 64, \"seed\": -1}",
        "{\"prompt\": \"red-fox\", \"width\": 64, \"height\": 64, \"seed\": 0}"};
    char seeds[3][32];
    for (int i = 0; i < 3; i++) {
        char id[WEFT_CLIENT_ID_MAX];
        CHECK_C(c, weft_client_submit_json(c, bodies[i], id));
        CHECK_C(c, weft_client_status(c, id, &st));
        snprintf(seeds[i], sizeof(seeds[i]), "%s", st.seed);
    }
    CHECK(strcmp(seeds[0], seeds[1]) != 0 && strcmp(seeds[2], "0") == 0);
    CHECK(strcmp(seeds[0], "0") != 0 && strcmp(seeds[1], "0") != 0);
    weft_job_status_cleanup(&st);
    weft_client_close(c);
    CHECK_EQ(server_stop(&s, SIGTERM), 0);
    return 0;
}

static int case_cors(void)
{
    struct server s;
    const char *extra[] = {"--api.token=sesame", "--api.cors_origins=http://app.example, "
                           "http://localhost:3000", NULL};
    server_start(&s, NULL, extra);
    char buf[8192];
    bool closed;
    /* a preflight: no token needed, allowed origin echoed, methods and headers listed */
    const char pre[] = "OPTIONS /v1/jobs HTTP/1.1\r\nHost: x\r\nOrigin: http://app.example\r\n"
                       "Access-Control-Request-Method: POST\r\nConnection: close\r\n\r\n";
    CHECK_EQ(raw_exchange(&s, pre, sizeof(pre) - 1, buf, sizeof(buf), &closed), 204);
    CHECK(strstr(buf, "Access-Control-Allow-Origin: http://app.example\r\n"));
    CHECK(strstr(buf, "Access-Control-Allow-Methods: ") && strstr(buf, "Idempotency-Key"));
    CHECK(strstr(buf, "Allow: GET, HEAD, POST, OPTIONS"));
    /* another origin gets no CORS headers */
    const char bad[] = "OPTIONS /v1/jobs HTTP/1.1\r\nHost: x\r\nOrigin: http://evil.example\r\n"
                       "Connection: close\r\n\r\n";
    CHECK_EQ(raw_exchange(&s, bad, sizeof(bad) - 1, buf, sizeof(buf), &closed), 204);
    CHECK(!strstr(buf, "Access-Control-Allow-Origin"));
    /* an authorised request from an allowed origin is answered with the header; without the
     * token 401 (with the header too, so the page can read why) */
    const char get1[] = "GET /v1/jobs HTTP/1.1\r\nHost: x\r\nOrigin: http://localhost:3000\r\n"
                        "Authorization: Bearer sesame\r\nConnection: close\r\n\r\n";
    CHECK_EQ(raw_exchange(&s, get1, sizeof(get1) - 1, buf, sizeof(buf), &closed), 200);
    CHECK(strstr(buf, "Access-Control-Allow-Origin: http://localhost:3000\r\n"));
    const char get2[] = "GET /v1/jobs HTTP/1.1\r\nHost: x\r\nOrigin: http://localhost:3000\r\n"
                        "Connection: close\r\n\r\n";
    CHECK_EQ(raw_exchange(&s, get2, sizeof(get2) - 1, buf, sizeof(buf), &closed), 401);
    CHECK(strstr(buf, "Access-Control-Allow-Origin: http://localhost:3000\r\n"));
    /* probes, the page and the API's description need no token; the rest does */
    static const struct {
        const char *path;
        int code;
    } open_paths[] = {{"/healthz", 200}, {"/readyz", 200}, {"/", 200}, {"/openapi.json", 200},
                      {"/metrics", 401}, {"/v1/models", 401}, {"/v1/cluster", 401}};
    for (size_t i = 0; i < sizeof(open_paths) / sizeof(open_paths[0]); i++) {
        char req[200];
        int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close"
                         "\r\n\r\n", open_paths[i].path);
        int code = raw_exchange(&s, req, (size_t)n, buf, sizeof(buf), &closed);
        if (code != open_paths[i].code)
            fprintf(stderr, "%s: %d, want %d\n", open_paths[i].path, code, open_paths[i].code);
        CHECK_EQ(code, open_paths[i].code);
    }
    CHECK_EQ(server_stop(&s, SIGTERM), 0);
    return 0;
}

static int case_ready(void)
{
    /* the cluster runner without workers: alive, not ready, and why */
    struct server s;
    char wport[400], wopt[500];
    snprintf(wport, sizeof(wport), "%s/wport", tmpdir);
    snprintf(wopt, sizeof(wopt), "--worker-port-file=%s", wport);
    const char *extra[] = {"--runner", "cluster", wopt, "--cluster.listen=127.0.0.1:0",
                           "--cluster.secret=0123456789abcdef0123456789abcdef",
                           "--cluster.workers=2", NULL};
    server_start(&s, NULL, extra);
    struct weft_client *c = client(&s, NULL);
    char *text;
    CHECK_EQ(get(c, "GET", "/healthz", NULL, NULL), 200);
    CHECK_EQ(get(c, "GET", "/readyz", NULL, &text), 503);
    CHECK(strstr(text, "\"ready\":false") && strstr(text, "waiting for its workers"));
    weft_client_free(text);
    weft_client_close(c);
    CHECK_EQ(server_stop(&s, SIGTERM), 0);
    /* the local runner: ready; while shutting down: not, with the reason */
    const char *grace[] = {"--api.shutdown_grace_ms=20000", NULL};
    server_start(&s, NULL, grace);
    c = client(&s, NULL);
    CHECK_EQ(get(c, "GET", "/readyz", NULL, &text), 200);
    weft_client_free(text);
    const char *fox[] = {"red-fox"};
    char id[WEFT_CLIENT_ID_MAX];
    submit(c, fox, 1, 512, 100, 1, 1, id);
    struct weft_job_status st = {0};
    wait_running(c, id, &st);
    CHECK(kill(s.pid, SIGTERM) == 0);
    int code = 0;
    for (int i = 0; i < 100 && code != 503; i++) {
        struct weft_client *c2 = client(&s, NULL);
        code = get(c2, "GET", "/readyz", NULL, &text);
        if (code == 503)
            CHECK(strstr(text, "shutting down"));
        weft_client_free(text);
        weft_client_close(c2);
        sleep_ms(20);
    }
    CHECK_EQ(code, 503);
    weft_client_close(c);
    /* the server's second signal stops the running job at once */
    kill(s.pid, SIGTERM);
    CHECK_EQ(server_wait(&s, false), 0);
    weft_job_status_cleanup(&st);
    return 0;
}

/* /metrics after real work, through promtool (Debian's prometheus package) when present. */
static int case_promtool(void)
{
    if (system("command -v promtool >/dev/null 2>&1") != 0) {
        fprintf(stderr, "promtool not found (Debian package prometheus): skipped\n");
        return TEST_SKIP;
    }
    struct server s;
    server_start(&s, NULL, NULL);
    struct weft_client *c = client(&s, NULL);
    const char *fox[] = {"red-fox"};
    char id[WEFT_CLIENT_ID_MAX];
    struct weft_job_status st = {0};
    submit(c, fox, 1, 64, 3, 2, 1, id);
    wait_done(c, id, &st);
    CHECK_EQ(get(c, "GET", "/v1/jobs/ffffffffffffffff", NULL, NULL), 404);
    char *text;
    CHECK_EQ(get(c, "GET", "/metrics", NULL, &text), 200);
    static const char *const want[] = {
        "process_resident_memory_bytes ", "process_cpu_seconds_total ", "process_open_fds ",
        "weft_build_info{version=\"", "weft_queue_length 0", "weft_step_seconds_bucket{le=",
        "weft_step_seconds_count 6", "weft_http_responses_total{code=\"404\"} 1"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        if (!strstr(text, want[i]))
            fprintf(stderr, "/metrics lacks %s\n", want[i]);
        CHECK(strstr(text, want[i]));
    }
    char path[400], cmd[600];
    snprintf(path, sizeof(path), "%s/metrics.txt", tmpdir);
    FILE *f = fopen(path, "w");
    CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0);
    weft_client_free(text);
    snprintf(cmd, sizeof(cmd), "promtool check metrics < '%s' >&2", path);
    int rc = system(cmd);
    CHECK_EQ(rc, 0);
    weft_job_status_cleanup(&st);
    weft_client_close(c);
    CHECK_EQ(server_stop(&s, SIGTERM), 0);
    return 0;
}

static bool rfc3339_ok(const char *ts)
{
    int y, mo, d, h, mi, sec, ms;
    char z;
    return strlen(ts) == 24 && sscanf(ts, "%4d-%2d-%2dT%2d:%2d:%2d.%3d%c", &y, &mo, &d, &h, &mi,
                                      &sec, &ms, &z) == 8 && z == 'Z' && y >= 2024;
}

/* Logs: wall-clock RFC 3339 times, one JSON object a line with --log.format=json, an access
 * line per request (method, path, status, bytes, ms, job). */
static int case_logs(void)
{
    struct server s;
    const char *extra[] = {"--log.format=json", NULL};
    server_start(&s, NULL, extra);
    struct weft_client *c = client(&s, NULL);
    const char *fox[] = {"red-fox"};
    char id[WEFT_CLIENT_ID_MAX];
    struct weft_job_status st = {0};
    submit(c, fox, 1, 64, 2, 1, 1, id);
    wait_done(c, id, &st);
    CHECK_EQ(get(c, "GET", "/v1/jobs/ffffffffffffffff", NULL, NULL), 404);
    weft_client_close(c);
    CHECK_EQ(server_stop(&s, SIGTERM), 0);
    char path[400], line[4096];
    snprintf(path, sizeof(path), "%s/serve.log", tmpdir);
    FILE *f = fopen(path, "r");
    CHECK(f);
    int lines = 0, access_post = 0, access_404 = 0;
    while (fgets(line, sizeof(line), f)) {
        cJSON *o = cJSON_Parse(line);
        if (!o)
            fprintf(stderr, "not a JSON line: %s", line);
        CHECK(o);
        CHECK(rfc3339_ok(jstr(o, "ts")));
        const char *msg = jstr(o, "msg"), *sub = jstr(o, "subsys");
        CHECK(jstr(o, "level") && cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(o, "pid")));
        char want[100];
        snprintf(want, sizeof(want), "POST /v1/jobs 202 ");
        if (strcmp(sub, "access") == 0 && strncmp(msg, want, strlen(want)) == 0 &&
            strstr(msg, id) && strstr(msg, "ms job="))
            access_post++;
        if (strcmp(sub, "access") == 0 && strstr(msg, "GET /v1/jobs/ffffffffffffffff 404 "))
            access_404++;
        cJSON_Delete(o);
        lines++;
    }
    (void)fclose(f);
    CHECK(lines > 3 && access_post == 1 && access_404 == 1);
    /* [api] access_log = false: none */
    CHECK(unlink(path) == 0);
    const char *quiet[] = {"--api.access_log=false", NULL};
    server_start(&s, NULL, quiet);
    c = client(&s, NULL);
    check_serving(c);
    weft_client_close(c);
    CHECK_EQ(server_stop(&s, SIGTERM), 0);
    CHECK(!log_contains("access: "));
    /* the text format: "2026-..Z r- host:pid I subsys: message" */
    CHECK(unlink(path) == 0);
    server_start(&s, NULL, NULL);
    CHECK_EQ(server_stop(&s, SIGTERM), 0);
    CHECK((f = fopen(path, "r")) && fgets(line, sizeof(line), f));
    (void)fclose(f);
    char ts[64];
    CHECK(sscanf(line, "%63s ", ts) == 1 && rfc3339_ok(ts));
    weft_job_status_cleanup(&st);
    return 0;
}

/* SIGTERM while an OpenAI request waits for a job that has not started: answered 503 at once
 * (the job stays journaled), not left hanging until the connection closes. */
/* Text prompts served by the local runner on the tiny pipeline with both text encoders: the
 * image equals `weft generate --prompt` of the same text; the job's record shows the text; the
 * PNG carries it; a repeated prompt is encoded once (the cache's hits in /metrics); the OpenAI
 * endpoint takes text; GET /v1/models says it encodes text; precomputed embeddings stay
 * available as prompt_embeds (none here: refused by name). */
static int case_text(void)
{
    char model[700], modelopt[800];
    snprintf(model, sizeof(model), "%s/tests/data/text/pipeline", getenv("WEFT_SOURCE_ROOT"));
    snprintf(modelopt, sizeof(modelopt), "--model=%s", model);
    struct server s;
    const char *extra[] = {modelopt, NULL};
    server_start(&s, NULL, extra);
    struct weft_client *c = client(&s, NULL);
    const char *text = "a photo of a red fox \xf0\x9f\xa6\x8a in the snow, caf\xc3\xa9";
    struct weft_prompt p[2] = {{.text = text}, {.text = text}};
    struct weft_job_request r = {.prompts = p, .n_prompts = 2, .height = 32, .width = 48,
                                 .steps = 2, .seed = 11, .max_sequence_length = 64};
    char id[WEFT_CLIENT_ID_MAX];
    CHECK_C(c, weft_client_submit(c, &r, id));
    struct weft_job_status st = {0};
    wait_done(c, id, &st);
    CHECK_EQ(st.n_images, 2);
    unsigned char *a = image(c, id, 0, 48, 32), *b = image(c, id, 1, 48, 32);
    CHECK(memcmp(a, b, 48 * 32 * 3) != 0); /* one prompt, two noises */
    char gen[400], cmd[2400];
    snprintf(gen, sizeof(gen), "%s/generate.png", tmpdir);
    snprintf(cmd, sizeof(cmd), "'%s' generate --model '%s' --prompt '%s' "
             "--max-sequence-length 64 --height 32 --width 48 --steps 2 --seed 11 "
             "--kernels.threads=1 --out '%s' 2>/dev/null", weft_bin, model, text, gen);
    CHECK(system(cmd) == 0);
    FILE *gf = fopen(gen, "rb");
    CHECK(gf);
    static char gbuf[1 << 20];
    size_t glen = fread(gbuf, 1, sizeof(gbuf), gf);
    (void)fclose(gf);
    uint32_t gw, gh;
    unsigned char *g = png_pixels(gbuf, glen, &gw, &gh);
    CHECK(memcmp(a, g, 48 * 32 * 3) == 0);
    free(a), free(b), free(g);
    /* the record shows the text; the PNG carries it (UTF-8: an iTXt chunk) */
    char path[200], *ans;
    snprintf(path, sizeof(path), "/v1/jobs/%s", id);
    CHECK_EQ(get(c, "GET", path, NULL, &ans), 200);
    cJSON *o = cJSON_Parse(ans);
    const cJSON *req = cJSON_GetObjectItem(o, "request");
    CHECK(strcmp(cJSON_GetArrayItem(cJSON_GetObjectItem(req, "prompts"), 0)->valuestring,
                 text) == 0);
    CHECK(strcmp(cJSON_GetArrayItem(cJSON_GetObjectItem(req, "prompt_types"), 0)->valuestring,
                 "text") == 0);
    CHECK_EQ(cJSON_GetObjectItem(req, "max_sequence_length")->valuedouble, 64);
    cJSON_Delete(o);
    weft_client_free(ans);
    void *png;
    size_t len;
    CHECK_C(c, weft_client_image(c, id, 0, &png, &len));
    CHECK(memmem(png, len, "weft.prompt", 11) && memmem(png, len, text, strlen(text)));
    weft_client_free(png);
    /* the same prompt again, and through the OpenAI endpoint: no encoder run */
    CHECK_C(c, weft_client_submit(c, &r, id));
    wait_done(c, id, &st);
    char oa[600];
    snprintf(oa, sizeof(oa), "{\"prompt\": \"%s\", \"size\": \"48x32\", \"steps\": 1, "
             "\"max_sequence_length\": 64}", text);
    CHECK_EQ(get(c, "POST", "/v1/images/generations", oa, &ans), 200);
    CHECK(strstr(ans, "\"b64_json\""));
    weft_client_free(ans);
    CHECK_EQ(get(c, "GET", "/metrics", NULL, &ans), 200);
    /* job 1: a miss then a hit (its two prompts are one text); job 2 and the OpenAI one: hits */
    CHECK(strstr(ans, "\nweft_prompt_cache_hits_total 4\n"));
    CHECK(strstr(ans, "\nweft_prompt_cache_misses_total 1\n"));
    CHECK(strstr(ans, "\nweft_prompt_cache_bytes "));
    weft_client_free(ans);
    CHECK_EQ(get(c, "GET", "/v1/models", NULL, &ans), 200);
    CHECK(strstr(ans, "\"text_encoder\":true"));
    weft_client_free(ans);
    CHECK_EQ(get(c, "GET", "/v1/cluster", NULL, &ans), 200);
    CHECK(strstr(ans, "\"text_encoder_2\"") && strstr(ans, "T5EncoderModel"));
    weft_client_free(ans);
    /* refusals: embeddings by name on a model without precomputed prompts; a length past 512;
     * a text prompt that is not UTF-8 never gets past the body check */
    expect_error(c, "POST", "/v1/jobs", "{\"prompt_embeds\": \"red-fox\"}", 400,
                 "unknown prompt");
    expect_error(c, "POST", "/v1/jobs", "{\"prompt\": \"a\", \"max_sequence_length\": 600}", 400,
                 "max_sequence_length");
    expect_error(c, "POST", "/v1/jobs", "{\"prompt\": \"caf\xe9\"}", 400, "UTF-8");
    weft_job_status_cleanup(&st);
    weft_client_close(c);
    CHECK_EQ(server_stop(&s, SIGTERM), 0);
    return 0;
}

static int case_shutdown_wait(void)
{
    struct server s;
    const char *extra[] = {"--api.shutdown_grace_ms=20000", NULL};
    server_start(&s, NULL, extra);
    struct weft_client *c = client(&s, NULL);
    const char *fox[] = {"red-fox"};
    char id[WEFT_CLIENT_ID_MAX];
    struct weft_job_status st = {0};
    submit(c, fox, 1, 512, 100, 1, 1, id);
    wait_running(c, id, &st);
    int fd = raw_connect(&s);
    const char gen[] = "{\"prompt\": \"red-fox\", \"size\": \"64x64\", \"steps\": 2}";
    char req[400];
    int n = snprintf(req, sizeof(req), "POST /v1/images/generations HTTP/1.1\r\nHost: x\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     strlen(gen), gen);
    raw_send(fd, req, (size_t)n);
    sleep_ms(200); /* it waits behind the running job */
    CHECK(kill(s.pid, SIGTERM) == 0);
    static char buf[8192];
    bool closed;
    raw_read_until(fd, buf, sizeof(buf), "}}", 5000, &closed);
    CHECK_EQ(raw_status(buf), 503);
    CHECK(strstr(buf, "stays queued") && strstr(buf, "\"shutting_down\""));
    close(fd);
    weft_client_close(c);
    kill(s.pid, SIGTERM);
    CHECK_EQ(server_wait(&s, false), 0);
    weft_job_status_cleanup(&st);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_api WEFT_BINARY CASE\n");
        return 2;
    }
    weft_bin = argv[1];
    CHECK(getenv("WEFT_SOURCE_ROOT"));
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/weft-test-api-XXXXXX");
    CHECK(mkdtemp(tmpdir));
    signal(SIGALRM, on_alarm);
    alarm(240);
    atexit(kill_server);
    static const struct {
        const char *name;
        int (*fn)(void);
    } cases[] = {
        {"basic", case_basic},     {"batch", case_batch},       {"errors", case_errors},
        {"robust", case_robust},   {"cancel", case_cancel},     {"restart", case_restart},
        {"shutdown", case_shutdown}, {"unix", case_unix},         {"retain", case_retain},
        {"unix_guard", case_unix_guard}, {"flood", case_flood},   {"protocol", case_protocol},
        {"utf8", case_utf8},       {"drain", case_drain},
        {"openai", case_openai},   {"events", case_events},     {"keepalive", case_keepalive},
        {"idempotency", case_idempotency}, {"pages", case_pages}, {"cors", case_cors},
        {"ready", case_ready},     {"promtool", case_promtool}, {"logs", case_logs},
        {"shutdown_wait", case_shutdown_wait}, {"text", case_text},
    };
    int rc = 2;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        if (strcmp(argv[2], cases[i].name) == 0)
            rc = cases[i].fn();
    if (rc == 2)
        fprintf(stderr, "unknown case %s\n", argv[2]);
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    if (rc == 0 && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return rc;
}
