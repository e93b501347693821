/* Process groups and messages on 4 real processes: collectives on different groups in flight at
 * once (also two groups with the same members), point-to-point messages, the errors of group
 * creation and of a second collective on a busy group; and the rendezvous against bad clients.
 *
 * usage: test_comm_group groups|rendezvous */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "coll_ref.h"
#include "common/alloc.h"
#include "common/log.h"
#include "launch.h"
#include "test.h"

#define N 4
#define COUNT ((size_t)1 << 18) /* 1 MiB of f32: ring pipelines, many chunks */

static int check_allreduce(const float *got, size_t count, int n, uint32_t seed)
{
    for (int b = 0; b < n; b++) {
        size_t off, len;
        weft_comm_block(count, n, b, &off, &len);
        for (size_t i = off; i < off + len; i++)
            if (ref_check("allreduce", got, i, WEFT_DTYPE_F32,
                          ref_sum(WEFT_DTYPE_F32, seed, n, b, i)))
                return 1;
    }
    return 0;
}

/* Three collectives on three groups in flight together, started in a different order on
 * different ranks: all-reduce on the contiguous pair, all-gather on the strided pair, and an
 * all-reduce on a group with the same members as the world but its ranks reversed. Then two
 * all-reduces on the world and that reversed group at once. */
static void concurrent(struct weft_transport *tp)
{
    int me = weft_transport_rank(tp);
    int contig[2] = {me & ~1, (me & ~1) + 1}, strided[2] = {me & 1, (me & 1) + 2};
    int reversed[N] = {3, 2, 1, 0};
    struct weft_comm *gc, *gs, *gr, *world = weft_transport_world(tp);
    CHECK_OK(weft_comm_create(tp, 2, contig, 1, &gc));
    CHECK_OK(weft_comm_create(tp, 2, strided, 2, &gs));
    CHECK_OK(weft_comm_create(tp, N, reversed, 3, &gr));
    CHECK_EQ(weft_comm_rank(gr), 3 - me);

    float *a = weft_big_alloc(COUNT * 4), *ag_in = weft_big_alloc(COUNT * 4);
    float *ag_out = weft_big_alloc(2 * COUNT * 4), *c = weft_big_alloc(COUNT * 4);
    float *w = weft_big_alloc(COUNT * 4);
    CHECK(a && ag_in && ag_out && c && w);
    for (int round = 0; round < 3; round++) {
        uint32_t sa = 100 + round, sg = 200 + round, sr = 300 + round;
        ref_fill(a, COUNT, WEFT_DTYPE_F32, sa, weft_comm_rank(gc), 0);
        ref_fill(ag_in, COUNT, WEFT_DTYPE_F32, sg, weft_comm_rank(gs), 0);
        ref_fill(c, COUNT, WEFT_DTYPE_F32, sr, weft_comm_rank(gr), 0);
        struct weft_comm_req *req[3] = {0};
        int order[3] = {0, 1, 2};
        if ((me + round) & 1) {
            order[0] = 2;
            order[2] = 0;
        }
        for (int k = 0; k < 3; k++) {
            if (order[k] == 0)
                CHECK_OK(weft_comm_allreduce_start(gc, a, a, COUNT, WEFT_DTYPE_F32, &req[0]));
            else if (order[k] == 1)
                CHECK_OK(weft_comm_allgather_start(gs, ag_in, ag_out, COUNT, WEFT_DTYPE_F32,
                                                   &req[1]));
            else
                CHECK_OK(weft_comm_allreduce_start(gr, c, c, COUNT, WEFT_DTYPE_F32, &req[2]));
        }
        /* a second collective on a busy group is refused, and the first is not disturbed */
        CHECK_EQ(weft_comm_barrier(gc), WEFT_ERR_BUSY);
        CHECK_OK(weft_comm_waitall(3, req));
        CHECK(!req[0] && !req[1] && !req[2]);
        CHECK(check_allreduce(a, COUNT, 2, sa) == 0);
        CHECK(check_allreduce(c, COUNT, N, sr) == 0);
        for (int r = 0; r < 2; r++)
            for (size_t i = 0; i < COUNT; i++)
                CHECK(ref_check("allgather", ag_out, r * COUNT + i, WEFT_DTYPE_F32,
                                ref_value(sg, r, i)) == 0);
    }
    /* the same members, two groups, one all-reduce each, started in opposite orders */
    for (int round = 0; round < 3; round++) {
        ref_fill(w, COUNT, WEFT_DTYPE_F32, 400 + round, me, 0);
        ref_fill(c, COUNT, WEFT_DTYPE_F32, 500 + round, weft_comm_rank(gr), 0);
        struct weft_comm_req *req[2];
        if (me & 1) {
            CHECK_OK(weft_comm_allreduce_start(gr, c, c, COUNT, WEFT_DTYPE_F32, &req[1]));
            CHECK_OK(weft_comm_allreduce_start(world, w, w, COUNT, WEFT_DTYPE_F32, &req[0]));
        } else {
            CHECK_OK(weft_comm_allreduce_start(world, w, w, COUNT, WEFT_DTYPE_F32, &req[0]));
            CHECK_OK(weft_comm_allreduce_start(gr, c, c, COUNT, WEFT_DTYPE_F32, &req[1]));
        }
        /* wait for them one by one, the later one first */
        CHECK_OK(weft_comm_wait(&req[1]));
        CHECK_OK(weft_comm_wait(&req[0]));
        CHECK(check_allreduce(w, COUNT, N, 400 + round) == 0);
        CHECK(check_allreduce(c, COUNT, N, 500 + round) == 0);
    }
    weft_big_free(a, COUNT * 4);
    weft_big_free(ag_in, COUNT * 4);
    weft_big_free(ag_out, 2 * COUNT * 4);
    weft_big_free(c, COUNT * 4);
    weft_big_free(w, COUNT * 4);
    weft_comm_destroy(gc);
    weft_comm_destroy(gs);
    weft_comm_destroy(gr);
}

/* Messages around the ring: two tags posted in the opposite order to the sends, a large and an
 * empty message, a message to self; a wrong size is a protocol error. */
static void p2p(struct weft_transport *tp)
{
    struct weft_comm *w = weft_transport_world(tp);
    int me = weft_transport_rank(tp), right = (me + 1) % N, left = (me + N - 1) % N;
    size_t big = (size_t)3 << 20;
    char *sbig = weft_big_alloc(big), *rbig = weft_big_alloc(big);
    CHECK(sbig && rbig);
    for (size_t i = 0; i < big; i++)
        sbig[i] = (char)(i * 7 + (size_t)me);
    int s7 = 700 + me, s8 = 800 + me, r7 = -1, r8 = -1, self_in = 5, self_out = 0;
    struct weft_comm_req *req[8];
    CHECK_OK(weft_comm_irecv(w, left, 8, &r8, sizeof(r8), &req[0]));
    CHECK_OK(weft_comm_irecv(w, left, 7, &r7, sizeof(r7), &req[1]));
    CHECK_OK(weft_comm_isend(w, right, 7, &s7, sizeof(s7), &req[2]));
    CHECK_OK(weft_comm_isend(w, right, 8, &s8, sizeof(s8), &req[3]));
    CHECK_OK(weft_comm_isend(w, right, 0xfffffff0u, sbig, big, &req[4]));
    CHECK_OK(weft_comm_irecv(w, left, 0xfffffff0u, rbig, big, &req[5]));
    CHECK_OK(weft_comm_isend(w, me, 1, &self_in, sizeof(self_in), &req[6]));
    CHECK_OK(weft_comm_irecv(w, me, 1, &self_out, sizeof(self_out), &req[7]));
    CHECK_OK(weft_comm_waitall(8, req));
    CHECK_EQ(r7, 700 + left);
    CHECK_EQ(r8, 800 + left);
    CHECK_EQ(self_out, 5);
    for (size_t i = 0; i < big; i++)
        CHECK(rbig[i] == (char)(i * 7 + (size_t)left));
    /* empty message */
    CHECK_OK(weft_comm_isend(w, right, 9, NULL, 0, &req[0]));
    CHECK_OK(weft_comm_irecv(w, left, 9, NULL, 0, &req[1]));
    CHECK_OK(weft_comm_waitall(2, req));
    /* sizes that disagree */
    int64_t one = 1;
    int32_t small = 0;
    CHECK_OK(weft_comm_isend(w, right, 10, &one, sizeof(one), &req[0]));
    CHECK_OK(weft_comm_irecv(w, left, 10, &small, sizeof(small), &req[1]));
    CHECK_EQ(weft_comm_waitall(2, req), WEFT_ERR_PROTOCOL);
    CHECK(!req[0] && !req[1]);
    /* a test loop */
    CHECK_OK(weft_comm_isend(w, right, 11, &s7, sizeof(s7), &req[0]));
    CHECK_OK(weft_comm_irecv(w, left, 11, &r7, sizeof(r7), &req[1]));
    weft_status_t st;
    while ((st = weft_comm_test(&req[1])) == WEFT_INPROGRESS)
        ;
    CHECK_OK(st);
    CHECK_OK(weft_comm_wait(&req[0]));
    CHECK_EQ(r7, 700 + left);
    /* a receive nobody answers ends at the deadline with "timed out", and only it fails */
    CHECK_OK(weft_comm_irecv(w, left, 12, &r7, sizeof(r7), &req[0]));
    CHECK_EQ(weft_comm_wait(&req[0]), WEFT_ERR_TIMEOUT);
    CHECK_OK(weft_comm_status(w));
    CHECK_OK(weft_comm_barrier(w));
    weft_big_free(sbig, big);
    weft_big_free(rbig, big);
}

static void group_errors(struct weft_transport *tp)
{
    int me = weft_transport_rank(tp);
    struct weft_comm *g, *h;
    /* creation is collective: both members of a pair create it (the refusals exchange
     * nothing) */
    int pair[2] = {me & ~1, (me & ~1) + 1}, other[2] = {(me + 1) % N, (me + 2) % N};
    int twice[2] = {me, me}, outside[2] = {me, N};
    CHECK_FAILS_LOGGED(weft_comm_create(tp, 2, other, 5, &g), WEFT_ERR_INVALID, "not a member");
    CHECK_FAILS_LOGGED(weft_comm_create(tp, 2, twice, 5, &g), WEFT_ERR_INVALID, "listed twice");
    CHECK_FAILS_LOGGED(weft_comm_create(tp, 2, outside, 5, &g), WEFT_ERR_INVALID,
                       "not in the world");
    CHECK_FAILS_LOGGED(weft_comm_create(tp, 2, pair, 0, &g), WEFT_ERR_INVALID, "id");
    CHECK_FAILS_LOGGED(weft_comm_create(tp, 2, pair, 70000, &g), WEFT_ERR_INVALID, "id");
    CHECK_OK(weft_comm_create(tp, 2, pair, 5, &g));
    CHECK_FAILS_LOGGED(weft_comm_create(tp, 2, pair, 5, &h), WEFT_ERR_BUSY, "already used");
    weft_comm_destroy(g);
    CHECK_OK(weft_comm_create(tp, 2, pair, 5, &h)); /* the id is free again */
    weft_comm_destroy(h);
    struct weft_comm *w = weft_transport_world(tp);
    float x[4] = {0};
    CHECK_FAILS_LOGGED(weft_comm_allreduce(w, x, x, 4, WEFT_DTYPE_I32), WEFT_ERR_UNSUPPORTED,
                       "i32");
    CHECK_FAILS_LOGGED(weft_comm_bcast(w, x, 4, WEFT_DTYPE_F32, N), WEFT_ERR_INVALID, "root");
    size_t sc[N] = {1, 1, 1, 1}, rc[N] = {1, 1, 1, 1};
    rc[me] = 2; /* to self: 1 sent, 2 expected */
    CHECK_FAILS_LOGGED(weft_comm_alltoallv(w, x, sc, x + 1, rc, WEFT_DTYPE_F32), WEFT_ERR_INVALID,
                       "alltoallv");
    CHECK_OK(weft_comm_status(w));
    CHECK_OK(weft_comm_barrier(w));
}

static int groups_fn(struct weft_transport *tp, void *arg)
{
    (void)arg;
    weft_log_set_level(WEFT_LOG_LEVEL_ERROR);
    test_quiet();
    CHECK_EQ(weft_transport_size(tp), N);
    CHECK(!weft_transport_has_cuda(tp)); /* Debian's UCX: no CUDA transport */
    group_errors(tp);
    concurrent(tp);
    p2p(tp);
    return 0;
}

/* ---- rendezvous against bad clients ---- */

static int client(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    return fd;
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void hello(int fd, uint32_t magic, uint32_t rank, uint32_t size, uint32_t alen)
{
    uint8_t h[24 + 8];
    put32(h, magic);
    put32(h + 4, 1);
    put32(h + 8, rank);
    put32(h + 12, size);
    put32(h + 16, 4000 + rank);
    put32(h + 20, alen);
    memset(h + 24, (int)('a' + rank), 8);
    size_t len = 24 + (alen < 8 ? alen : 8);
    CHECK(write(fd, h, len) == (ssize_t)len);
}

/* Closed by the server: EOF, or a reset when it closed with our bytes still unread. */
static bool closed(int fd)
{
    char c;
    return read(fd, &c, 1) <= 0;
}

static int rendezvous(void)
{
    test_quiet();
    struct weft_rdv_server *srv;
    CHECK_FAILS(weft_rdv_server_create("127.0.0.1", 0, 0, &srv, TERR), WEFT_ERR_RANGE, "ranks");
    CHECK_OK(weft_rdv_server_create("127.0.0.1", 0, 2, &srv, TERR));
    uint16_t port = weft_rdv_server_port(srv);
    int junk = client(port), badrank = client(port), bigaddr = client(port);
    CHECK(write(junk, "GET / HTTP/1.0\r\n\r\n.....", 24) == 24);
    hello(badrank, 0x56524657u, 5, 2, 8);
    hello(bigaddr, 0x56524657u, 0, 2, 1u << 30);
    CHECK_EQ(weft_rdv_server_progress(srv, 200), WEFT_INPROGRESS);
    CHECK(closed(junk) && closed(badrank) && closed(bigaddr));
    int a = client(port), dup = client(port), b = client(port);
    hello(a, 0x56524657u, 0, 2, 8);
    CHECK_EQ(weft_rdv_server_progress(srv, 100), WEFT_INPROGRESS);
    hello(dup, 0x56524657u, 0, 2, 8); /* rank 0 again: dropped, rank 0 keeps its place */
    CHECK_EQ(weft_rdv_server_progress(srv, 100), WEFT_INPROGRESS);
    CHECK(closed(dup));
    hello(b, 0x56524657u, 1, 2, 8);
    CHECK_OK(weft_rdv_server_progress(srv, 2000));
    /* both got the same table: 2 entries with their 8-byte addresses and ports */
    for (int k = 0; k < 2; k++) {
        uint8_t t[16 + 2 * (28 + 8)];
        size_t got = 0;
        while (got < sizeof(t)) {
            ssize_t n = read(k ? b : a, t + got, sizeof(t) - got);
            CHECK(n > 0);
            got += (size_t)n;
        }
        CHECK(closed(k ? b : a));
        CHECK_EQ(get32(t + 8), 2);
        CHECK_EQ(get32(t + 12), 2 * (28 + 8));
        for (int r = 0; r < 2; r++) {
            const uint8_t *e = t + 16 + r * (28 + 8);
            CHECK_EQ(get32(e), 4);
            CHECK_EQ(get32(e + 4), 4000 + r);
            CHECK_EQ(get32(e + 24), 8);
            CHECK(e[28] == 'a' + r && e[35] == 'a' + r);
        }
    }
    close(junk);
    close(badrank);
    close(bigaddr);
    close(a);
    close(dup);
    close(b);
    weft_rdv_server_destroy(srv);
    /* a rank whose rendezvous never answers gives up at its deadline */
    struct weft_transport_opts opts;
    launch_opts(&opts);
    opts.timeout_ms = 300;
    CHECK_OK(weft_rdv_server_create("127.0.0.1", 0, 2, &srv, TERR));
    char where[32];
    snprintf(where, sizeof(where), "127.0.0.1:%u", (unsigned)weft_rdv_server_port(srv));
    struct weft_transport *tp;
    CHECK_FAILS(weft_transport_create(&opts, 0, 2, where, &tp, TERR), WEFT_ERR_TIMEOUT, "deadline");
    weft_rdv_server_destroy(srv);
    CHECK_FAILS(weft_transport_create(&opts, 0, 2, "nohostport", &tp, TERR), WEFT_ERR_INVALID,
                "host:port");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "rendezvous") == 0)
        return rendezvous();
    if (argc != 2 || strcmp(argv[1], "groups") != 0) {
        fprintf(stderr, "usage: %s groups|rendezvous\n", argv[0]);
        return 2;
    }
    struct weft_transport_opts opts;
    launch_opts(&opts);
    opts.timeout_ms = 2000; /* the unanswered receive waits this long */
    return launch_run(N, &opts, groups_fn, NULL, 60, -1);
}
