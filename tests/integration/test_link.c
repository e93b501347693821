/* Control-plane links (transport/link.h) between real processes on 127.0.0.1.
 *
 *   pair       two processes, both driven by weft_link_host_wait: messages both ways (empty,
 *              small, 8 MiB, one of WEFT_LINK_MSG_MAX) in order and intact, echoes, a last
 *              8 MiB message before close, flush, misuse refused
 *   twin       two links between the same two processes: closing one leaves the other up
 *   star_kill  a coordinator driven by libuv (uv_poll on the host descriptor) with 3 workers
 *              that connect to it; one is SIGKILLed mid-run: only its link goes down (bounded
 *              time), the others keep answering; the idle descriptor does not spin
 *   star_stop  the same with SIGSTOP and a 1 s timeout: the silent worker's link goes down
 *              with WEFT_ERR_TIMEOUT, a flush to it ends at its deadline, the others stay up
 *   garbage    a libuv coordinator, a good worker, and a raw UCX peer that sends malformed
 *              frames: each link it opened is dropped with a log line, unattributable frames
 *              are ignored, the good worker is not disturbed
 *   bench      (meson benchmark) round trip of a small message and 4 MiB throughput
 *
 * Every process has an alarm and every loop a deadline, so a test stops by itself. */
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <ucp/api/ucp.h>
#include <unistd.h>
#include <uv.h>

#include "common/alloc.h"
#include "common/log.h"
#include "test.h"
#include "transport/link.h"

#define ALARM_S 90 /* every process dies by then, whatever happens */
#define MIB ((size_t)1 << 20)

enum {
    T_START = 1, /* pair: start the child's stream */
    T_DATA,      /* pair: parent's numbered message, echoed back as T_ECHO */
    T_ECHO,
    T_CHILD, /* pair: child's numbered stream */
    T_END,
    T_FIN,   /* stop: the receiver sends T_LAST (if pair), flushes and closes */
    T_LAST,  /* pair: the child's last message before it closes */
    T_HELLO, /* star: worker index */
    T_PING,  /* star: round, pong size */
    T_PONG,
    T_BULK, /* bench */
    T_ACK,
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- payloads: a seeded pattern, the message number in the first 8 bytes ------------------ */

static uint64_t mix(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x9e3779b97f4a7c15ull;
    return x ^ (x >> 29);
}

static void *payload_make(uint64_t n, size_t len)
{
    uint8_t *p = weft_malloc(len ? len : 1);
    CHECK(p);
    uint64_t x = mix(n + 1);
    for (size_t i = 0; i < len; i++) {
        if (i % 8 == 0)
            x = mix(x + i);
        p[i] = (uint8_t)(x >> (8 * (i % 8)));
    }
    if (len >= 8)
        memcpy(p, &n, 8);
    return p;
}

/* The message number, or -1 when the payload is not what payload_make(n, len) gives. */
static int64_t payload_check(const void *data, size_t len, uint64_t want)
{
    uint8_t *ref = payload_make(want, len);
    int ok = len == 0 || memcmp(ref, data, len) == 0;
    weft_free(ref);
    return ok ? (int64_t)want : -1;
}

/* ---- processes and the out-of-band channel ------------------------------------------------- */

struct proc {
    pid_t pid;
    int fd; /* the parent's end of a socketpair: addresses, go/stop bytes */
};

static int parent_fds[8];
static int n_parent_fds;

typedef int (*child_fn)(int fd, void *arg);

/* Fork before the parent touches UCX (a UCX context does not survive fork). */
static struct proc spawn(child_fn fn, void *arg)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    CHECK(fflush(NULL) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        alarm(ALARM_S);
        for (int i = 0; i < n_parent_fds; i++)
            close(parent_fds[i]);
        close(sv[0]);
        exit(fn(sv[1], arg));
    }
    close(sv[1]);
    parent_fds[n_parent_fds++] = sv[0];
    return (struct proc){pid, sv[0]};
}

static void blob_send(int fd, const void *p, size_t len)
{
    uint32_t n = (uint32_t)len;
    CHECK(write(fd, &n, 4) == 4);
    CHECK(len == 0 || write(fd, p, len) == (ssize_t)len);
}

static void read_full(int fd, void *p, size_t len, double deadline)
{
    char *c = p;
    while (len) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        CHECK(now_ms() < deadline);
        if (poll(&pfd, 1, 100) <= 0)
            continue;
        ssize_t n = read(fd, c, len);
        CHECK(n > 0);
        c += n;
        len -= (size_t)n;
    }
}

/* A blob the other side sent (malloc'd), within 20 s. */
static void *blob_recv(int fd, size_t *len_p)
{
    double deadline = now_ms() + 20000;
    uint32_t n;
    read_full(fd, &n, 4, deadline);
    CHECK(n > 0 && n < 65536);
    void *p = weft_malloc(n);
    CHECK(p);
    read_full(fd, p, n, deadline);
    *len_p = n;
    return p;
}

static void send_address(int fd, struct weft_link_host *h)
{
    const void *addr;
    size_t len;
    CHECK_OK(weft_link_host_address(h, &addr, &len));
    blob_send(fd, addr, len);
}

/* The child must exit with code want, or die of signal sig (want < 0: -sig). */
static void reap(struct proc p, int want)
{
    double deadline = now_ms() + 20000;
    int status;
    pid_t r;
    while ((r = waitpid(p.pid, &status, WNOHANG)) == 0 && now_ms() < deadline)
        usleep(10000);
    if (r == 0) {
        kill(p.pid, SIGKILL);
        fprintf(stderr, "child %d did not exit\n", (int)p.pid);
        exit(1);
    }
    if (want >= 0) {
        if (!WIFEXITED(status) || WEXITSTATUS(status) != want) {
            fprintf(stderr, "child %d: status 0x%x, wanted exit %d\n", (int)p.pid, status, want);
            exit(1);
        }
    } else {
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == -want);
    }
    close(p.fd);
}

/* Log lines: count the ones that contain a needle, show them with WEFT_TEST_VERBOSE. */
static const char *needles[2];
static int needle_hits[2];

static void sink(enum weft_log_level level, const char *subsys, const char *msg, void *arg)
{
    (void)arg;
    for (int i = 0; i < 2; i++)
        if (needles[i] && strstr(msg, needles[i]))
            needle_hits[i]++;
    if (getenv("WEFT_TEST_VERBOSE"))
        fprintf(stderr, "[%s] %s: %s\n", weft_log_level_name(level), subsys, msg);
}

/* ---- pair ------------------------------------------------------------------------------- */

#define PAIR_N 40

static size_t pair_size(int i)
{
    if (i == 20)
        return WEFT_LINK_MSG_MAX;
    if (i % 10 == 9)
        return 8 * MIB;
    return (size_t)i * 37 % 2000; /* 0 for the first */
}

struct pair_side {
    struct weft_link *link;
    int next_data, next_echo, next_child;
    bool end, fin, last, down;
    weft_status_t why;
};

static void send_numbered(struct weft_link *l, uint16_t type, int i, size_t len)
{
    void *p = payload_make((uint64_t)i, len);
    CHECK_OK(weft_link_send(l, type, p, len));
    weft_free(p);
}

static void pair_child_msg(struct weft_link *l, uint16_t type, const void *data, size_t len,
                           void *arg)
{
    struct pair_side *c = arg;
    switch (type) {
    case T_START:
        for (int i = 0; i < PAIR_N; i++)
            send_numbered(l, T_CHILD, i, pair_size(PAIR_N - 1 - i));
        CHECK_OK(weft_link_send(l, T_END, NULL, 0));
        break;
    case T_DATA:
        CHECK_EQ(len, pair_size(c->next_data));
        CHECK_EQ(payload_check(data, len, (uint64_t)c->next_data), c->next_data);
        c->next_data++;
        CHECK_OK(weft_link_send(l, T_ECHO, data, len));
        break;
    case T_FIN:
        CHECK_EQ(c->next_data, PAIR_N);
        send_numbered(l, T_LAST, 7, 8 * MIB);
        /* inside a callback: allowed, runs no callbacks */
        CHECK_OK(weft_link_flush(l, 10000));
        c->fin = true;
        break;
    default:
        CHECK(!"unexpected message type");
    }
}

static void pair_down(struct weft_link *l, weft_status_t why, void *arg)
{
    (void)l;
    struct pair_side *s = arg;
    CHECK(!s->down);
    s->down = true;
    s->why = why;
}

static void pair_accept(struct weft_link_host *h, struct weft_link *l, void *arg)
{
    (void)h;
    struct pair_side *c = arg;
    CHECK(!c->link);
    c->link = l;
    weft_link_set_callbacks(l, pair_child_msg, pair_down, c);
}

static int pair_child(int fd, void *arg)
{
    (void)arg;
    struct pair_side c = {0};
    struct weft_link_host *h;
    CHECK_OK(weft_link_host_create(NULL, pair_accept, &c, &h));
    send_address(fd, h);
    double deadline = now_ms() + 60000;
    while (!c.fin && !c.down) {
        CHECK(now_ms() < deadline);
        CHECK_OK(weft_link_host_wait(h, 100));
    }
    CHECK(c.fin && !c.down);
    weft_link_close(c.link); /* the parent sees T_LAST, then down */
    weft_link_host_destroy(h);
    return 0;
}

static void pair_parent_msg(struct weft_link *l, uint16_t type, const void *data, size_t len,
                            void *arg)
{
    (void)l;
    struct pair_side *p = arg;
    switch (type) {
    case T_ECHO:
        CHECK_EQ(len, pair_size(p->next_echo));
        CHECK_EQ(payload_check(data, len, (uint64_t)p->next_echo), p->next_echo);
        p->next_echo++;
        break;
    case T_CHILD:
        CHECK(!p->end);
        CHECK_EQ(len, pair_size(PAIR_N - 1 - p->next_child));
        CHECK_EQ(payload_check(data, len, (uint64_t)p->next_child), p->next_child);
        p->next_child++;
        break;
    case T_END:
        CHECK_EQ(p->next_child, PAIR_N);
        p->end = true;
        break;
    case T_LAST:
        CHECK_EQ(payload_check(data, len, 7), 7);
        p->last = true;
        break;
    default:
        CHECK(!"unexpected message type");
    }
}

static void pair_misuse(struct weft_link_host *h, struct weft_link *l)
{
    test_quiet(); /* the refusals are logged as errors: expected here */
    char b = 0;
    CHECK_FAILS_LOGGED(weft_link_send(l, T_DATA, &b, WEFT_LINK_MSG_MAX + 1), WEFT_ERR_RANGE,
                       "at most");
    CHECK_FAILS_LOGGED(weft_link_send(l, T_DATA, NULL, 1), WEFT_ERR_INVALID, "no data");
    struct weft_link *x;
    CHECK_FAILS_LOGGED(weft_link_connect(h, NULL, 0, NULL, NULL, NULL, &x), WEFT_ERR_INVALID,
                       "address");
    CHECK_FAILS_LOGGED(weft_link_host_set_timeout(h, 5), WEFT_ERR_INVALID, "timeout");
    weft_log_set_sink(NULL, NULL);
}

static int test_pair(void)
{
    struct proc child = spawn(pair_child, NULL);
    struct pair_side p = {0};
    struct weft_link_host *h;
    CHECK_OK(weft_link_host_create(NULL, NULL, NULL, &h));
    size_t alen;
    void *addr = blob_recv(child.fd, &alen);
    CHECK_OK(weft_link_connect(h, addr, alen, pair_parent_msg, pair_down, &p, &p.link));
    pair_misuse(h, p.link);

    double t0 = now_ms();
    CHECK_OK(weft_link_send(p.link, T_START, NULL, 0));
    for (int i = 0; i < PAIR_N; i++)
        send_numbered(p.link, T_DATA, i, pair_size(i));
    CHECK_OK(weft_link_flush(p.link, 20000));
    double deadline = now_ms() + 60000;
    while (p.next_echo < PAIR_N || !p.end) {
        CHECK(now_ms() < deadline && !p.down);
        CHECK_OK(weft_link_host_wait(h, 100));
    }
    size_t total = 0;
    for (int i = 0; i < PAIR_N; i++)
        total += pair_size(i);
    fprintf(stderr, "pair: %d messages each way (%zu MiB per stream) and the echoes in %.0f ms\n",
            PAIR_N, total >> 20, now_ms() - t0);

    CHECK_OK(weft_link_send(p.link, T_FIN, NULL, 0));
    t0 = now_ms();
    while (!p.down) {
        CHECK(now_ms() - t0 < 20000);
        CHECK_OK(weft_link_host_wait(h, 100));
    }
    CHECK(p.last); /* the message before the close arrived first */
    CHECK_EQ(p.why, WEFT_ERR_PEER_LOST);
    CHECK_EQ(weft_link_status(p.link), WEFT_ERR_PEER_LOST);
    t0 = now_ms();
    CHECK_EQ(weft_link_send(p.link, T_DATA, "x", 1), WEFT_ERR_PEER_LOST);
    CHECK_EQ(weft_link_flush(p.link, 5000), WEFT_ERR_PEER_LOST);
    CHECK(now_ms() - t0 < 500); /* at once; slack for a loaded machine */
    weft_link_close(p.link);
    reap(child, 0);

    /* the child is gone: connecting to its address fails at once (UCX tries to connect its
     * socket; the refusal is UCX's own log line) or as a down event, in bounded time */
    struct pair_side q = {0};
    test_quiet();
    t0 = now_ms();
    weft_status_t st = weft_link_connect(h, addr, alen, pair_parent_msg, pair_down, &q, &q.link);
    if (st == WEFT_OK) {
        CHECK_OK(weft_link_send(q.link, T_DATA, "x", 1));
        while (!q.down) {
            CHECK(now_ms() - t0 < 20000);
            CHECK_OK(weft_link_host_wait(h, 100));
        }
        st = q.why;
        weft_link_close(q.link);
    }
    fprintf(stderr, "pair: connecting to an exited process: '%s' after %.1f ms\n",
            weft_status_str(st), now_ms() - t0);
    CHECK(st == WEFT_ERR_UNREACHABLE || st == WEFT_ERR_PEER_LOST);
    weft_log_set_sink(NULL, NULL);
    weft_free(addr);
    weft_link_host_destroy(h);
    return 0;
}

/* ---- twin: two links between the same two processes ------------------------------------ */

/* UCX pairs the endpoints of two processes by creation order; closing one link must not take
 * the other down. The child echoes on each link and reports the other's down on the survivor. */
struct twin_child {
    struct weft_link *link[2];
    int n, downs;
    bool fin;
};

static void twin_child_msg(struct weft_link *l, uint16_t type, const void *data, size_t len,
                           void *arg)
{
    struct twin_child *c = arg;
    if (type == T_FIN)
        c->fin = true;
    else
        CHECK_OK(weft_link_send(l, type, data, len));
}

static void twin_child_down(struct weft_link *l, weft_status_t why, void *arg)
{
    struct twin_child *c = arg;
    CHECK(l == c->link[0]); /* only the one the parent closed */
    CHECK_EQ(why, WEFT_ERR_PEER_LOST);
    c->downs++;
    CHECK_OK(weft_link_send(c->link[1], T_END, NULL, 0));
}

static void twin_accept(struct weft_link_host *h, struct weft_link *l, void *arg)
{
    (void)h;
    struct twin_child *c = arg;
    CHECK(c->n < 2);
    c->link[c->n++] = l;
    weft_link_set_callbacks(l, twin_child_msg, twin_child_down, c);
}

static int twin_child(int fd, void *arg)
{
    (void)arg;
    struct twin_child c = {0};
    struct weft_link_host *h;
    CHECK_OK(weft_link_host_create(NULL, twin_accept, &c, &h));
    send_address(fd, h);
    double deadline = now_ms() + 30000;
    while (!c.fin) {
        CHECK(now_ms() < deadline);
        CHECK_OK(weft_link_host_wait(h, 100));
    }
    CHECK_EQ(c.downs, 1);
    weft_link_close(c.link[0]);
    weft_link_close(c.link[1]);
    weft_link_host_destroy(h);
    return 0;
}

struct twin_side {
    int echoes;
    bool end, down;
};

static void twin_msg(struct weft_link *l, uint16_t type, const void *data, size_t len, void *arg)
{
    (void)l, (void)data, (void)len;
    struct twin_side *t = arg;
    if (type == T_END)
        t->end = true;
    else
        t->echoes++;
}

static void twin_down(struct weft_link *l, weft_status_t why, void *arg)
{
    (void)l, (void)why;
    struct twin_side *t = arg;
    t->down = true;
}

static void twin_wait(struct weft_link_host *h, const bool *flag, const struct twin_side *t)
{
    double deadline = now_ms() + 20000;
    while (!*flag) {
        CHECK(now_ms() < deadline && !t[1].down);
        CHECK_OK(weft_link_host_wait(h, 100));
    }
}

static int test_twin(void)
{
    struct proc child = spawn(twin_child, NULL);
    struct weft_link_host *h;
    CHECK_OK(weft_link_host_create(NULL, NULL, NULL, &h));
    size_t alen;
    void *addr = blob_recv(child.fd, &alen);
    struct twin_side t[2] = {0};
    struct weft_link *l[2];
    for (int i = 0; i < 2; i++)
        CHECK_OK(weft_link_connect(h, addr, alen, twin_msg, twin_down, &t[i], &l[i]));
    weft_free(addr);
    for (int i = 0; i < 2; i++)
        CHECK_OK(weft_link_send(l[i], T_DATA, "x", 1));
    double deadline = now_ms() + 20000;
    while (t[0].echoes < 1 || t[1].echoes < 1) { /* both links carry messages */
        CHECK(now_ms() < deadline && !t[0].down && !t[1].down);
        CHECK_OK(weft_link_host_wait(h, 100));
    }
    weft_link_close(l[0]);
    twin_wait(h, &t[1].end, t); /* the child saw the first go down, on the second */
    CHECK_OK(weft_link_send(l[1], T_DATA, "y", 1));
    int before = t[1].echoes;
    deadline = now_ms() + 20000;
    while (t[1].echoes == before) {
        CHECK(now_ms() < deadline && !t[1].down);
        CHECK_OK(weft_link_host_wait(h, 100));
    }
    CHECK_OK(weft_link_send(l[1], T_FIN, NULL, 0));
    CHECK_OK(weft_link_flush(l[1], 5000));
    weft_link_close(l[1]);
    weft_link_host_destroy(h);
    reap(child, 0);
    return 0;
}

/* ---- star: a libuv coordinator and 3 workers ------------------------------------------- */

#define NW 3
#define VICTIM 1
#define KILL_ROUND 10
#define LAST_ROUND 30
#define STOP_TIMEOUT_MS 1000 /* the 2-core test machines are shared: leave the loop slack */

struct worker_state {
    struct weft_link *link;
    bool fin, down;
    weft_status_t why;
};

static void worker_msg(struct weft_link *l, uint16_t type, const void *data, size_t len, void *arg)
{
    struct worker_state *w = arg;
    if (type == T_FIN) {
        w->fin = true;
        return;
    }
    CHECK_EQ(type, T_PING);
    CHECK_EQ(len, 8);
    uint32_t round, size;
    memcpy(&round, data, 4);
    memcpy(&size, (const char *)data + 4, 4);
    void *p = payload_make(round, size);
    CHECK_OK(weft_link_send(l, T_PONG, p, size));
    weft_free(p);
}

static void worker_down(struct weft_link *l, weft_status_t why, void *arg)
{
    (void)l;
    struct worker_state *w = arg;
    w->down = true;
    w->why = why;
}

/* A worker: connects to the coordinator, names itself, answers pings until told to stop. */
static int worker_main(int fd, void *arg)
{
    int idx = (int)(intptr_t)arg;
    struct worker_state w = {0};
    struct weft_link_host *h;
    CHECK_OK(weft_link_host_create(NULL, NULL, NULL, &h));
    size_t clen;
    void *caddr = blob_recv(fd, &clen);
    char timeout_ms[4];
    read_full(fd, timeout_ms, 4, now_ms() + 20000);
    int t;
    memcpy(&t, timeout_ms, 4);
    CHECK_OK(weft_link_host_set_timeout(h, t));
    CHECK_OK(weft_link_connect(h, caddr, clen, worker_msg, worker_down, &w, &w.link));
    weft_free(caddr);
    uint32_t me = (uint32_t)idx;
    CHECK_OK(weft_link_send(w.link, T_HELLO, &me, sizeof(me)));
    double deadline = now_ms() + 60000;
    while (!w.fin && !w.down) {
        CHECK(now_ms() < deadline);
        CHECK_OK(weft_link_host_wait(h, 100));
    }
    CHECK(!w.down); /* the coordinator never drops a healthy worker */
    CHECK_OK(weft_link_flush(w.link, 5000));
    weft_link_close(w.link);
    weft_link_host_destroy(h);
    return 0;
}

struct star {
    uv_loop_t loop;
    uv_poll_t poll;
    uv_timer_t watchdog, later;
    struct weft_link_host *h;
    bool stop_mode;
    struct {
        struct proc proc;
        struct weft_link *link;
        int round; /* last pong */
        bool down;
        weft_status_t why;
        double down_ms;
    } w[NW];
    int round;
    double kill_ms;
    int wakeups;
    bool idle_done, fin_sent;
    int finished;
    void *big; /* made before the loop: making it there would stall the loop */
};

static int star_index(struct star *s, const struct weft_link *l)
{
    for (int i = 0; i < NW; i++)
        if (s->w[i].link == l)
            return i;
    return -1;
}

static void star_ping(struct star *s)
{
    s->round++;
    uint32_t msg[2] = {(uint32_t)s->round, s->round % 4 == 3 ? (uint32_t)MIB : 16};
    for (int i = 0; i < NW; i++)
        if (!s->w[i].down)
            CHECK_OK(weft_link_send(s->w[i].link, T_PING, msg, sizeof(msg)));
}

static void star_fin(struct star *s)
{
    s->fin_sent = true;
    for (int i = 0; i < NW; i++)
        if (i != VICTIM)
            CHECK_OK(weft_link_send(s->w[i].link, T_FIN, NULL, 0));
}

/* An idle stretch: the descriptor must not keep waking the loop. */
static void star_idle_end(uv_timer_t *t)
{
    struct star *s = t->data;
    fprintf(stderr, "star: %d wake-ups in 500 idle ms\n", s->wakeups);
    /* heartbeats every 250 ms with the stop timeout; a spinning descriptor makes thousands */
    CHECK(s->wakeups < (s->stop_mode ? 40 : 10));
    s->idle_done = true;
    star_fin(s);
}

/* Right after SIGSTOP: a flush to the stopped worker must end at its deadline. */
static void star_flush_stopped(uv_timer_t *t)
{
    struct star *s = t->data;
    struct weft_link *l = s->w[VICTIM].link;
    /* by rendezvous: it completes only once the stopped process fetches it */
    CHECK_OK(weft_link_send(l, T_PING, s->big, 8 * MIB));
    double t0 = now_ms();
    weft_status_t st = weft_link_flush(l, 150);
    double dt = now_ms() - t0;
    fprintf(stderr, "star: flush to the stopped worker: '%s' after %.0f ms\n", weft_status_str(st),
            dt);
    CHECK_EQ(st, WEFT_ERR_TIMEOUT);
    CHECK(dt >= 140 && dt < 1000);
}

static void star_round_done(struct star *s)
{
    if (s->round == KILL_ROUND) {
        s->kill_ms = now_ms();
        CHECK(kill(s->w[VICTIM].proc.pid, s->stop_mode ? SIGSTOP : SIGKILL) == 0);
        if (s->stop_mode)
            uv_timer_start(&s->later, star_flush_stopped, 0, 0);
    }
    if (s->round < LAST_ROUND) {
        star_ping(s);
        return;
    }
    s->wakeups = 0;
    uv_timer_start(&s->later, star_idle_end, 500, 0);
}

static void star_msg(struct weft_link *l, uint16_t type, const void *data, size_t len, void *arg)
{
    struct star *s = arg;
    int i = star_index(s, l);
    CHECK(i >= 0);
    CHECK_EQ(type, T_PONG);
    CHECK_EQ(payload_check(data, len, (uint64_t)s->round), s->round);
    CHECK_EQ(s->w[i].round, s->round - 1);
    s->w[i].round = s->round;
    for (int k = 0; k < NW; k++)
        if (!s->w[k].down && s->w[k].round != s->round)
            return;
    star_round_done(s);
}

static void star_down(struct weft_link *l, weft_status_t why, void *arg)
{
    struct star *s = arg;
    int i = star_index(s, l);
    CHECK(i >= 0 && !s->w[i].down);
    s->w[i].down = true;
    s->w[i].why = why;
    s->w[i].down_ms = now_ms();
    if (i == VICTIM) {
        CHECK(s->kill_ms > 0);
        fprintf(stderr, "star: the %s worker's link went down ('%s') %.1f ms after the signal\n",
                s->stop_mode ? "stopped" : "killed", weft_status_str(why),
                s->w[i].down_ms - s->kill_ms);
        /* its send fails fast now */
        CHECK_EQ(weft_link_send(l, T_PING, "x", 1), why);
        /* the round it missed goes on without it */
        for (int k = 0; k < NW; k++)
            if (!s->w[k].down && s->w[k].round != s->round)
                return;
        if (s->round >= KILL_ROUND && s->round < LAST_ROUND)
            star_round_done(s);
        return;
    }
    CHECK(s->fin_sent); /* a healthy worker goes down only when told to finish */
    CHECK_EQ(why, WEFT_ERR_PEER_LOST);
    if (++s->finished == NW - 1)
        uv_stop(&s->loop);
}

static void star_first_msg(struct weft_link *l, uint16_t type, const void *data, size_t len,
                           void *arg)
{
    struct star *s = arg;
    CHECK_EQ(type, T_HELLO);
    CHECK_EQ(len, 4);
    uint32_t idx;
    memcpy(&idx, data, 4);
    CHECK(idx < NW && !s->w[idx].link);
    s->w[idx].link = l;
    weft_link_set_callbacks(l, star_msg, star_down, s);
    for (int i = 0; i < NW; i++)
        if (!s->w[i].link)
            return;
    star_ping(s);
}

static void star_accept(struct weft_link_host *h, struct weft_link *l, void *arg)
{
    (void)h;
    weft_link_set_callbacks(l, star_first_msg, NULL, arg);
}

static void on_link_fd(uv_poll_t *p, int status, int events)
{
    (void)events;
    struct star *s = p->data;
    CHECK_EQ(status, 0);
    s->wakeups++;
    CHECK_OK(weft_link_host_progress(s->h));
}

static void on_watchdog(uv_timer_t *t)
{
    (void)t;
    fprintf(stderr, "test did not finish in time\n");
    exit(1);
}

static void star_loop_init(struct star *s)
{
    CHECK_EQ(uv_loop_init(&s->loop), 0);
    CHECK_EQ(uv_poll_init(&s->loop, &s->poll, weft_link_host_fd(s->h)), 0);
    s->poll.data = s;
    CHECK_EQ(uv_poll_start(&s->poll, UV_READABLE, on_link_fd), 0);
    uv_timer_init(&s->loop, &s->watchdog);
    uv_timer_init(&s->loop, &s->later);
    s->later.data = s;
    uv_timer_start(&s->watchdog, on_watchdog, 60000, 0);
}

static void star_loop_close(struct star *s)
{
    uv_poll_stop(&s->poll);
    uv_close((uv_handle_t *)&s->poll, NULL);
    uv_close((uv_handle_t *)&s->watchdog, NULL);
    uv_close((uv_handle_t *)&s->later, NULL);
    CHECK_EQ(uv_run(&s->loop, UV_RUN_DEFAULT), 0);
    CHECK_EQ(uv_loop_close(&s->loop), 0);
}

static int test_star(bool stop_mode)
{
    static struct star s;
    s.stop_mode = stop_mode;
    int timeout = stop_mode ? STOP_TIMEOUT_MS : 10000;
    for (int i = 0; i < NW; i++)
        s.w[i].proc = spawn(worker_main, (void *)(intptr_t)i);
    s.big = payload_make(1, 8 * MIB);
    CHECK_OK(weft_link_host_create(NULL, star_accept, &s, &s.h));
    CHECK_OK(weft_link_host_set_timeout(s.h, timeout));
    for (int i = 0; i < NW; i++) {
        send_address(s.w[i].proc.fd, s.h);
        CHECK(write(s.w[i].proc.fd, &timeout, 4) == 4);
    }
    star_loop_init(&s);
    CHECK_EQ(uv_run(&s.loop, UV_RUN_DEFAULT), 1); /* uv_stop: handles are still open */
    star_loop_close(&s);

    CHECK(s.idle_done && s.round == LAST_ROUND);
    CHECK(s.w[VICTIM].down);
    double dt = s.w[VICTIM].down_ms - s.kill_ms;
    if (stop_mode) {
        CHECK_EQ(s.w[VICTIM].why, WEFT_ERR_TIMEOUT);
        CHECK(dt >= STOP_TIMEOUT_MS * 0.9 && dt < STOP_TIMEOUT_MS * 2 + 500);
    } else {
        CHECK_EQ(s.w[VICTIM].why, WEFT_ERR_PEER_LOST);
        CHECK(dt < 2000); /* the kernel closes its sockets: UCX sees it at once */
    }
    for (int i = 0; i < NW; i++)
        if (i != VICTIM)
            CHECK_EQ(s.w[i].round, LAST_ROUND);
    for (int i = 0; i < NW; i++)
        weft_link_close(s.w[i].link);
    weft_link_host_destroy(s.h);
    weft_free(s.big);
    if (stop_mode)
        CHECK(kill(s.w[VICTIM].proc.pid, SIGKILL) == 0);
    for (int i = 0; i < NW; i++)
        reap(s.w[i].proc, i == VICTIM ? -SIGKILL : 0);
    return 0;
}

/* ---- garbage: a peer that speaks the wire format badly ---------------------------------- */

#define HDR_LEN 40
#define BAD_AM_ID 1
#define BAD_LINKS 6 /* variants that open a link and then break the rules */

struct raw {
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_address_t *addr;
    size_t addr_len;
    uint64_t host_id;
};

static void raw_put(uint8_t *h, uint8_t kind, uint16_t type, uint32_t seq, uint32_t conn,
                    uint64_t host, uint64_t len)
{
    memset(h, 0, HDR_LEN);
    uint32_t magic = 0x4b4c4657u;
    memcpy(h, &magic, 4); /* the test machines are little endian, as the format is */
    h[4] = 1;
    h[5] = kind;
    h[6] = 1; /* from the connecting side */
    memcpy(h + 8, &type, 2);
    memcpy(h + 12, &seq, 4);
    memcpy(h + 16, &host, 8);
    memcpy(h + 24, &conn, 4);
    memcpy(h + 32, &len, 8);
}

static void raw_wait(struct raw *r, ucs_status_ptr_t q)
{
    if (q == NULL || UCS_PTR_IS_ERR(q))
        return;
    double deadline = now_ms() + 10000;
    while (ucp_request_check_status(q) == UCS_INPROGRESS) {
        CHECK(now_ms() < deadline);
        ucp_worker_progress(r->worker);
    }
    ucp_request_free(q);
}

/* Send one frame: hdr_len header bytes, len payload bytes (of a buffer that large). */
static void raw_send(struct raw *r, ucp_ep_h ep, const uint8_t *hdr, size_t hdr_len,
                     const void *data, size_t len, uint32_t flags)
{
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = flags};
    raw_wait(r, ucp_am_send_nbx(ep, BAD_AM_ID, hdr, hdr_len, data, len, &p));
}

static ucs_status_t raw_am(void *arg, const void *header, size_t header_length, void *data,
                           size_t length, const ucp_am_recv_param_t *param)
{
    (void)arg, (void)header, (void)header_length, (void)data, (void)length, (void)param;
    return UCS_OK; /* the coordinator's goodbyes to the links it dropped */
}

static void raw_err(void *arg, ucp_ep_h ep, ucs_status_t s)
{
    (void)arg, (void)ep, (void)s; /* the coordinator dropped us: expected */
}

static ucp_ep_h raw_ep(struct raw *r, const void *addr)
{
    ucp_ep_params_t ep = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address = addr,
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = raw_err},
    };
    ucp_ep_h e;
    CHECK(ucp_ep_create(r->worker, &ep, &e) == UCS_OK);
    ucp_request_param_t p = {0};
    raw_wait(r, ucp_ep_flush_nbx(e, &p));
    return e;
}

/* Variant v on connection v: a valid hello (except for v == 6), then the breach. */
static void raw_variant(struct raw *r, ucp_ep_h ep, uint32_t v, void *big)
{
    uint8_t h[HDR_LEN];
    const uint64_t id = r->host_id;
    char small[100] = {0};
    if (v == 1) { /* unattributable: a short header */
        raw_send(r, ep, (const uint8_t *)small, 13, small, 10, 0);
    } else if (v == 2) { /* unattributable: bad magic */
        raw_send(r, ep, (const uint8_t *)small, HDR_LEN, small, 10, 0);
    }
    raw_put(h, 1, 0, 0, v, id, r->addr_len);
    raw_send(r, ep, h, HDR_LEN, r->addr, r->addr_len,
             v == 6 ? UCP_AM_SEND_FLAG_RNDV : 0); /* a hello by rendezvous: refused */
    switch (v) {
    case 1: /* a good message, then one out of sequence */
        raw_put(h, 2, 77, 1, v, id, 10);
        raw_send(r, ep, h, HDR_LEN, small, 10, 0);
        raw_put(h, 2, 77, 5, v, id, 10);
        raw_send(r, ep, h, HDR_LEN, small, 10, 0);
        break;
    case 2: /* an unknown kind */
        raw_put(h, 9, 0, 1, v, id, 0);
        raw_send(r, ep, h, HDR_LEN, NULL, 0, 0);
        break;
    case 3: /* a length that is not the payload's */
        raw_put(h, 2, 77, 1, v, id, 100);
        raw_send(r, ep, h, HDR_LEN, small, 10, 0);
        break;
    case 4: /* a heartbeat with a payload */
        raw_put(h, 3, 0, 1, v, id, 4);
        raw_send(r, ep, h, HDR_LEN, small, 4, 0);
        break;
    case 5: /* 8 MiB by rendezvous, out of sequence: dropped without fetching it */
        raw_put(h, 2, 77, 3, v, id, 8 * MIB);
        raw_send(r, ep, h, HDR_LEN, big, 8 * MIB, UCP_AM_SEND_FLAG_RNDV);
        break;
    case 7: /* a second hello */
        raw_put(h, 1, 0, 1, v, id, r->addr_len);
        raw_send(r, ep, h, HDR_LEN, r->addr, r->addr_len, 0);
        break;
    default:
        break;
    }
}

static int bad_peer(int fd, void *arg)
{
    (void)arg;
    struct raw r = {.host_id = 0x0badbadbadbad000ull};
    ucp_config_t *cfg;
    CHECK(ucp_config_read(NULL, NULL, &cfg) == UCS_OK);
    ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_AM};
    CHECK(ucp_init(&p, cfg, &r.ctx) == UCS_OK);
    ucp_config_release(cfg);
    ucp_worker_params_t wp = {0};
    CHECK(ucp_worker_create(r.ctx, &wp, &r.worker) == UCS_OK);
    CHECK(ucp_worker_get_address(r.worker, &r.addr, &r.addr_len) == UCS_OK);
    ucp_am_handler_param_t ap = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB,
        .id = BAD_AM_ID,
        .cb = raw_am,
    };
    CHECK(ucp_worker_set_am_recv_handler(r.worker, &ap) == UCS_OK);
    size_t clen;
    void *caddr = blob_recv(fd, &clen);
    void *big = payload_make(0, 8 * MIB);
    ucp_ep_h eps[8];
    for (uint32_t v = 1; v <= 7; v++) {
        eps[v] = raw_ep(&r, caddr);
        raw_variant(&r, eps[v], v, big);
    }
    char done = 'D', stop = 0;
    CHECK(write(fd, &done, 1) == 1);
    /* answer the coordinator's wire-up until it lets us go */
    double deadline = now_ms() + 30000;
    for (;;) {
        CHECK(now_ms() < deadline);
        ucp_worker_progress(r.worker);
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 1) > 0) {
            CHECK(read(fd, &stop, 1) == 1);
            break;
        }
    }
    weft_free(big);
    weft_free(caddr);
    ucp_worker_release_address(r.worker, r.addr);
    ucp_worker_destroy(r.worker);
    ucp_cleanup(r.ctx);
    return 0;
}

struct garb {
    uv_loop_t loop;
    uv_poll_t poll, bad_poll;
    uv_timer_t watchdog;
    struct weft_link_host *h;
    struct proc good, bad;
    struct weft_link *good_link;
    int round, bad_msgs, bad_downs, accepted;
    bool bad_done, fin_sent;
};

static void garb_ping(struct garb *g)
{
    g->round++;
    uint32_t msg[2] = {(uint32_t)g->round, 1000};
    CHECK_OK(weft_link_send(g->good_link, T_PING, msg, sizeof(msg)));
}

static void garb_msg(struct weft_link *l, uint16_t type, const void *data, size_t len, void *arg)
{
    struct garb *g = arg;
    if (type == T_HELLO) { /* the good worker */
        CHECK(!g->good_link);
        g->good_link = l;
        garb_ping(g);
        return;
    }
    if (type == 77) { /* the bad peer's one good message */
        CHECK(l != g->good_link && len == 10);
        g->bad_msgs++;
        return;
    }
    CHECK(l == g->good_link && type == T_PONG);
    CHECK_EQ(payload_check(data, len, (uint64_t)g->round), g->round);
    if (g->bad_done && g->bad_downs == BAD_LINKS && g->round >= 20) {
        if (!g->fin_sent)
            CHECK_OK(weft_link_send(l, T_FIN, NULL, 0));
        g->fin_sent = true;
        return;
    }
    garb_ping(g);
}

static void garb_down(struct weft_link *l, weft_status_t why, void *arg)
{
    struct garb *g = arg;
    if (l == g->good_link) {
        CHECK(g->fin_sent);
        CHECK_EQ(why, WEFT_ERR_PEER_LOST);
        uv_stop(&g->loop);
        return;
    }
    CHECK_EQ(why, WEFT_ERR_PROTOCOL);
    g->bad_downs++;
    weft_link_close(l); /* inside its own callback */
}

static void garb_accept(struct weft_link_host *h, struct weft_link *l, void *arg)
{
    (void)h;
    struct garb *g = arg;
    g->accepted++;
    weft_link_set_callbacks(l, garb_msg, garb_down, g);
}

static void garb_link_fd(uv_poll_t *p, int status, int events)
{
    (void)status, (void)events;
    struct garb *g = p->data;
    CHECK_OK(weft_link_host_progress(g->h));
}

static void garb_bad_fd(uv_poll_t *p, int status, int events)
{
    (void)status, (void)events;
    struct garb *g = p->data;
    char c;
    CHECK(read(g->bad.fd, &c, 1) == 1 && c == 'D');
    g->bad_done = true;
    uv_poll_stop(p);
}

static int test_garbage(void)
{
    static struct garb g;
    g.good = spawn(worker_main, (void *)(intptr_t)0);
    g.bad = spawn(bad_peer, NULL);
    needles[0] = "malformed frame from the peer";
    needles[1] = "names no link of ours";
    weft_log_set_sink(sink, NULL);
    CHECK_OK(weft_link_host_create(NULL, garb_accept, &g, &g.h));
    int timeout = 10000;
    send_address(g.good.fd, g.h);
    CHECK(write(g.good.fd, &timeout, 4) == 4);
    send_address(g.bad.fd, g.h);

    CHECK_EQ(uv_loop_init(&g.loop), 0);
    uv_poll_init(&g.loop, &g.poll, weft_link_host_fd(g.h));
    uv_poll_init(&g.loop, &g.bad_poll, g.bad.fd);
    g.poll.data = g.bad_poll.data = &g;
    uv_poll_start(&g.poll, UV_READABLE, garb_link_fd);
    uv_poll_start(&g.bad_poll, UV_READABLE, garb_bad_fd);
    uv_timer_init(&g.loop, &g.watchdog);
    uv_timer_start(&g.watchdog, on_watchdog, 60000, 0);
    CHECK_EQ(uv_run(&g.loop, UV_RUN_DEFAULT), 1);
    uv_close((uv_handle_t *)&g.poll, NULL);
    uv_close((uv_handle_t *)&g.bad_poll, NULL);
    uv_close((uv_handle_t *)&g.watchdog, NULL);
    CHECK_EQ(uv_run(&g.loop, UV_RUN_DEFAULT), 0);
    CHECK_EQ(uv_loop_close(&g.loop), 0);

    fprintf(stderr,
            "garbage: %d links accepted, %d dropped as malformed, %d log lines say "
            "so, %d frames ignored as unattributable\n",
            g.accepted, g.bad_downs, needle_hits[0], needle_hits[1]);
    CHECK_EQ(g.accepted, BAD_LINKS + 1);
    CHECK_EQ(g.bad_downs, BAD_LINKS);
    CHECK_EQ(needle_hits[0], BAD_LINKS);
    CHECK_EQ(needle_hits[1], 3); /* short header, bad magic, rendezvous hello */
    CHECK_EQ(g.bad_msgs, 1);     /* the good message before the bad one was delivered */
    weft_link_close(g.good_link);
    weft_link_host_destroy(g.h);
    char stop = 'X';
    CHECK(write(g.bad.fd, &stop, 1) == 1);
    reap(g.good, 0);
    reap(g.bad, 0);
    return 0;
}

/* ---- bench --------------------------------------------------------------------------------- */

#define BENCH_RTT_N 5000
#define BENCH_BULK_N 64
#define BENCH_WINDOW 8

struct bench {
    struct weft_link *link;
    int got;
    bool fin;
};

static void bench_down(struct weft_link *l, weft_status_t why, void *arg)
{
    (void)l, (void)arg;
    CHECK(!"the benchmark's link went down");
    (void)why;
}

static void bench_echo_msg(struct weft_link *l, uint16_t type, const void *data, size_t len,
                           void *arg)
{
    struct bench *b = arg;
    if (type == T_FIN)
        b->fin = true;
    else if (type == T_BULK)
        CHECK_OK(weft_link_send(l, T_ACK, NULL, 0));
    else
        CHECK_OK(weft_link_send(l, type, data, len));
}

static void bench_accept(struct weft_link_host *h, struct weft_link *l, void *arg)
{
    (void)h;
    struct bench *b = arg;
    b->link = l;
    weft_link_set_callbacks(l, bench_echo_msg, NULL, b);
}

static int bench_child(int fd, void *arg)
{
    (void)arg;
    struct bench b = {0};
    struct weft_link_host *h;
    CHECK_OK(weft_link_host_create(NULL, bench_accept, &b, &h));
    send_address(fd, h);
    char mode;
    read_full(fd, &mode, 1, now_ms() + 20000);
    double deadline = now_ms() + 80000;
    while (!b.fin) {
        CHECK(now_ms() < deadline);
        if (mode == 's')
            CHECK_OK(weft_link_host_progress(h));
        else
            CHECK_OK(weft_link_host_wait(h, 100));
    }
    weft_link_close(b.link);
    weft_link_host_destroy(h);
    return 0;
}

static void bench_msg(struct weft_link *l, uint16_t type, const void *data, size_t len, void *arg)
{
    (void)l, (void)type, (void)data, (void)len;
    struct bench *b = arg;
    b->got++;
}

static void bench_drive(struct weft_link_host *h, bool spin)
{
    if (spin)
        CHECK_OK(weft_link_host_progress(h));
    else
        CHECK_OK(weft_link_host_wait(h, 100));
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void bench_rtt(struct weft_link_host *h, struct bench *b, bool spin)
{
    static double t[BENCH_RTT_N];
    char msg[64] = {0};
    double deadline = now_ms() + 30000;
    for (int i = -500; i < BENCH_RTT_N; i++) {
        int want = b->got + 1;
        double t0 = now_ms();
        CHECK_OK(weft_link_send(b->link, T_DATA, msg, sizeof(msg)));
        while (b->got < want) {
            CHECK(now_ms() < deadline);
            bench_drive(h, spin);
        }
        if (i >= 0)
            t[i] = (now_ms() - t0) * 1e3;
    }
    qsort(t, BENCH_RTT_N, sizeof(double), cmp_double);
    printf("link round trip, 64 B, %s: median %.1f us, p10 %.1f us, p90 %.1f us, p99 %.1f us\n",
           spin ? "both sides polling" : "both sides sleeping on the descriptor",
           t[BENCH_RTT_N / 2], t[BENCH_RTT_N / 10], t[BENCH_RTT_N * 9 / 10],
           t[BENCH_RTT_N * 99 / 100]);
}

static void bench_bulk(struct weft_link_host *h, struct bench *b, size_t size)
{
    void *p = payload_make(3, size);
    int base = b->got, sent = 0;
    double deadline = now_ms() + 60000, t0 = now_ms();
    while (b->got - base < BENCH_BULK_N) {
        CHECK(now_ms() < deadline);
        while (sent < BENCH_BULK_N && sent - (b->got - base) < BENCH_WINDOW) {
            CHECK_OK(weft_link_send(b->link, T_BULK, p, size));
            sent++;
        }
        bench_drive(h, false);
    }
    double s = (now_ms() - t0) / 1e3;
    printf("link throughput, %zu MiB messages, %d in flight: %.0f MB/s (%d in %.2f s)\n",
           size >> 20, BENCH_WINDOW, (double)size * BENCH_BULK_N / s / 1e6, BENCH_BULK_N, s);
    weft_free(p);
}

static int test_bench(void)
{
    for (int pass = 0; pass < 2; pass++) {
        bool spin = pass == 1;
        struct proc child = spawn(bench_child, NULL);
        struct bench b = {0};
        struct weft_link_host *h;
        CHECK_OK(weft_link_host_create(NULL, NULL, NULL, &h));
        size_t alen;
        void *addr = blob_recv(child.fd, &alen);
        CHECK(write(child.fd, spin ? "s" : "w", 1) == 1);
        CHECK_OK(weft_link_connect(h, addr, alen, bench_msg, bench_down, &b, &b.link));
        weft_free(addr);
        bench_rtt(h, &b, spin);
        if (!spin)
            bench_bulk(h, &b, 4 * MIB);
        CHECK_OK(weft_link_send(b.link, T_FIN, NULL, 0));
        /* the child may close as soon as it has T_FIN: gone is as good as flushed here */
        weft_status_t st = weft_link_flush(b.link, 5000);
        CHECK(st == WEFT_OK || st == WEFT_ERR_PEER_LOST);
        weft_link_close(b.link);
        weft_link_host_destroy(h);
        reap(child, 0);
        n_parent_fds = 0;
    }
    return 0;
}

int main(int argc, char **argv)
{
    alarm(ALARM_S);
    weft_log_set_level(WEFT_LOG_LEVEL_WARN);
    if (argc == 2 && strcmp(argv[1], "pair") == 0)
        return test_pair();
    if (argc == 2 && strcmp(argv[1], "twin") == 0)
        return test_twin();
    if (argc == 2 && strcmp(argv[1], "star_kill") == 0)
        return test_star(false);
    if (argc == 2 && strcmp(argv[1], "star_stop") == 0)
        return test_star(true);
    if (argc == 2 && strcmp(argv[1], "garbage") == 0)
        return test_garbage();
    if (argc == 2 && strcmp(argv[1], "bench") == 0)
        return test_bench();
    fprintf(stderr, "usage: test_link pair|twin|star_kill|star_stop|garbage|bench\n");
    return 2;
}
