/* Every collective x dtype x size x in/out of place on real processes, checked bit for bit
 * against a naive reference computed locally (coll_ref.h).
 *
 * usage: test_comm_coll NP [--mesh] [--algo=ring|direct] [--chunk=BYTES] [--depth=N]
 *                       [--shm=off] [--shm-max=BYTES] [--shared[=odd]] [--no-cma=all|one]
 *   NP ranks run the matrix on the world; --mesh (NP = 4) runs it on the strided sub-groups
 *   {0,2},{1,3} of a 2x2 mesh and the small sizes on the contiguous ones {0,1},{2,3}.
 *   The ranks share one host, so the groups take the shared-memory path unless --shm=off
 *   (UCX for everything; checked after the group's creation). Buffers are private (the path
 *   reads those of 256 KiB or more by CMA and copies the others into its staging buffer) or,
 *   with --shared, from weft_big_alloc_shared (read by the peers in place; an all-reduce's
 *   owners then write their sums into every output, checked), with --shared=odd only on the
 *   odd ranks (the others' private: every all-reduce reads the owners' results). Where the group
 *   cannot use CMA it takes shared memory up to --shm-max ([transport] shm_max; 0: every
 *   size, private buffers staged) and UCX above; --no-cma=all: no rank may call
 *   process_vm_readv (a seccomp filter installed before the ranks start, as a container's
 *   profile may forbid it; the transport then starts UCX without its CMA transport, which
 *   would abort the process); --no-cma=one: rank 1 alone may not call
 *   pidfd_open (installed once its transport is up), and the matrix runs on a group made
 *   after that, whose members must agree to do without. Whether a group reads by CMA is
 *   checked against what this host allows a forked child. 
 *
 * Sizes: 0, 1, 7, 4099 elements, 1 MiB and 24 MiB (the largest buffer of the call: three times
 * the scratch buffer a group registers at the defaults, 4 x depth 4 x 512 KiB = 8 MiB; at
 * 64 MiB the matrix took 8 s on one rank, nearly all of it filling and checking). The 24 MiB
 * cases are the slow ones on two cores; they run for every op in f32 (in and out of place),
 * for all-reduce and reduce-scatter in bf16 (out of place) and for all-reduce in f16 (in
 * place): the paths where 16-bit data is widened, summed and rounded. */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "coll_ref.h"
#include "common/alloc.h"
#include "common/log.h"
#include "launch.h"
#include "test.h"

enum op {
    OP_BCAST,
    OP_ALLGATHER,
    OP_ALLGATHERV,
    OP_REDUCE_SCATTER,
    OP_ALLREDUCE,
    OP_ALLTOALL,
    OP_ALLTOALLV,
    OP_COUNT
};

static const char *const op_names[OP_COUNT] = {
    "bcast", "allgather", "allgatherv", "reduce_scatter", "allreduce", "alltoall", "alltoallv",
};

#define MIB ((size_t)1 << 20)
static const struct size_case {
    size_t elems; /* element count, or 0 with bytes */
    size_t bytes;
} sizes[] = {{0, 0}, {1, 0}, {7, 0}, {4099, 0}, {0, MIB}, {0, 24 * MIB}};
#define N_SIZES (sizeof(sizes) / sizeof(sizes[0]))
#define BIG 5 /* index of the 24 MiB case */

static const enum weft_dtype dtypes[] = {WEFT_DTYPE_F32, WEFT_DTYPE_BF16, WEFT_DTYPE_F16};

struct matrix {
    int max_size; /* sizes[0 .. max_size) */
};

static bool big_case(enum op op, enum weft_dtype dt, bool in_place)
{
    if (dt == WEFT_DTYPE_F32)
        return true;
    if (dt == WEFT_DTYPE_BF16)
        return !in_place && (op == OP_ALLREDUCE || op == OP_REDUCE_SCATTER);
    return in_place && op == OP_ALLREDUCE;
}

/* Uneven counts of the -v variants (some zero). */
static size_t gv_count(size_t base, int r)
{
    return r % 3 == 1 ? 0 : base + (size_t)r * 5;
}

static size_t a2av_count(size_t base, int from, int to, bool sym)
{
    if (sym)
        return (from + to) % 3 == 0 ? 0 : base + (size_t)((from * to) % 5);
    return (from + 2 * to) % 3 == 0 ? 0 : base + (size_t)((from * 7 + to * 3) % 11);
}

static uint64_t a2a_key(int to, size_t i)
{
    return ((uint64_t)(unsigned)to << 32) | i;
}

struct bufs {
    char *a, *b;
    size_t alen, blen;
};

static int shared_mode; /* 0: private buffers, 1: shareable ones, 2: shareable on odd ranks */
static bool shared_bufs; /* this rank's */
static bool expect_shm; /* every test rank runs on this host */
static bool expect_cma; /* ... and may read the others' memory by CMA */

/* System call nr fails with EPERM from now on in this process and its children. */
static void forbid(long nr)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = (unsigned short)(sizeof(f) / sizeof(f[0])), .filter = f};
    CHECK(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0);
    CHECK(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0);
}

static void *big(size_t bytes)
{
    void *p = shared_bufs ? weft_big_alloc_shared(bytes) : weft_big_alloc(bytes);
    CHECK(p);
    memset(p, 0xa5, bytes); /* what was not written shows as garbage */
    return p;
}

static void bufs_free(struct bufs *b)
{
    weft_big_free(b->a, b->alen);
    weft_big_free(b->b, b->blen);
}

static int run_case(struct weft_comm *comm, enum op op, enum weft_dtype dt, size_t count,
                    bool in_place, uint32_t seed, const char *what)
{
    int n = weft_comm_size(comm), me = weft_comm_rank(comm);
    size_t es = weft_dtype_size(dt);
    struct bufs B = {0};
    weft_status_t st = WEFT_OK;
    int bad = 0;
    size_t counts[16], scnt[16], rcnt[16];
    CHECK(n <= 16);
    switch (op) {
    case OP_BCAST: {
        int root = (int)(seed % (uint32_t)n);
        B.a = big(B.alen = count * es);
        if (me == root)
            ref_fill(B.a, count, dt, seed, root, 0);
        st = weft_comm_bcast(comm, B.a, count, dt, root);
        for (size_t i = 0; st == WEFT_OK && i < count && !bad; i++)
            bad = ref_check(what, B.a, i, dt, ref_value(seed, root, i));
        break;
    }
    case OP_ALLGATHER:
    case OP_ALLGATHERV: {
        size_t total = 0, mine_off = 0;
        for (int r = 0; r < n; r++) {
            counts[r] = op == OP_ALLGATHER ? count : gv_count(count, r);
            if (r == me)
                mine_off = total;
            total += counts[r];
        }
        B.a = big(B.alen = total * es);
        char *send = B.a + mine_off * es;
        if (!in_place)
            send = B.b = big(B.blen = counts[me] * es);
        ref_fill(send, counts[me], dt, seed, me, 0);
        st = op == OP_ALLGATHER ? weft_comm_allgather(comm, send, B.a, count, dt)
                                : weft_comm_allgatherv(comm, send, B.a, counts, dt);
        size_t off = 0;
        for (int r = 0; r < n && st == WEFT_OK && !bad; r++) {
            for (size_t i = 0; i < counts[r] && !bad; i++)
                bad = ref_check(what, B.a, off + i, dt, ref_value(seed, r, i));
            off += counts[r];
        }
        break;
    }
    case OP_REDUCE_SCATTER: {
        B.a = big(B.alen = (size_t)n * count * es);
        ref_fill(B.a, (size_t)n * count, dt, seed, me, 0);
        char *recv = B.a + (size_t)me * count * es;
        if (!in_place)
            recv = B.b = big(B.blen = count * es);
        st = weft_comm_reduce_scatter(comm, B.a, recv, count, dt);
        for (size_t i = 0; st == WEFT_OK && i < count && !bad; i++)
            bad = ref_check(what, recv, i, dt, ref_sum(dt, seed, n, me, (size_t)me * count + i));
        break;
    }
    case OP_ALLREDUCE: {
        B.a = big(B.alen = count * es);
        ref_fill(B.a, count, dt, seed, me, 0);
        char *recv = in_place ? B.a : (B.b = big(B.blen = count * es));
        st = weft_comm_allreduce(comm, B.a, recv, count, dt);
        /* every output shareable: the owners write into them */
        const bool push = shared_mode == 1 && weft_comm_uses_shm(comm) && count;
        if (st == WEFT_OK && count && weft_comm_shm_pushed(comm) != push) {
            fprintf(stderr, "%s: the all-reduce %s its sums into every output\n", what,
                    push ? "did not write" : "wrote");
            bad = 1;
        }
        for (int b = 0; b < n && st == WEFT_OK && !bad; b++) {
            size_t off, len;
            weft_comm_block(count, n, b, &off, &len);
            for (size_t i = off; i < off + len && !bad; i++)
                bad = ref_check(what, recv, i, dt, ref_sum(dt, seed, n, b, i));
        }
        break;
    }
    case OP_ALLTOALL:
    case OP_ALLTOALLV: {
        size_t stot = 0, rtot = 0;
        for (int r = 0; r < n; r++) {
            scnt[r] = op == OP_ALLTOALL ? count : a2av_count(count, me, r, in_place);
            rcnt[r] = op == OP_ALLTOALL ? count : a2av_count(count, r, me, in_place);
            stot += scnt[r];
            rtot += rcnt[r];
        }
        B.a = big(B.alen = stot * es);
        size_t off = 0;
        for (int r = 0; r < n; r++) {
            ref_fill(B.a + off * es, scnt[r], dt, seed, me, a2a_key(r, 0));
            off += scnt[r];
        }
        char *recv = in_place ? B.a : (B.b = big(B.blen = rtot * es));
        st = op == OP_ALLTOALL ? weft_comm_alltoall(comm, B.a, recv, count, dt)
                               : weft_comm_alltoallv(comm, B.a, scnt, recv, rcnt, dt);
        off = 0;
        for (int r = 0; r < n && st == WEFT_OK && !bad; r++) {
            for (size_t i = 0; i < rcnt[r] && !bad; i++)
                bad = ref_check(what, recv, off + i, dt, ref_value(seed, r, a2a_key(me, i)));
            off += rcnt[r];
        }
        break;
    }
    default:
        CHECK(0);
    }
    bufs_free(&B);
    if (st != WEFT_OK) {
        fprintf(stderr, "%s: %s\n", what, weft_status_str(st)); /* the transport logged why */
        return 1;
    }
    return bad;
}

/* Nobody leaves a barrier before the last rank has entered it (CLOCK_MONOTONIC is one clock
 * for every process of the host). */
static int check_barrier(struct weft_comm *comm)
{
    int n = weft_comm_size(comm), me = weft_comm_rank(comm);
    struct timespec pause = {0, 20000000L * me};
    nanosleep(&pause, NULL);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_OK(weft_comm_barrier(comm));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double enter[16], mine = (double)t0.tv_sec + (double)t0.tv_nsec / 1e9;
    CHECK_OK(weft_comm_allgather(comm, &mine, enter, 1, WEFT_DTYPE_F64));
    double exit_t = (double)t1.tv_sec + (double)t1.tv_nsec / 1e9;
    for (int r = 0; r < n; r++) {
        if (exit_t < enter[r]) {
            fprintf(stderr, "barrier: rank %d left at %.6f before rank %d entered at %.6f\n",
                    me, exit_t, r, enter[r]);
            return 1;
        }
    }
    return 0;
}

static int run_matrix(struct weft_comm *comm, const char *label, int max_size)
{
    int fails = 0;
    uint32_t seed = 1;
    if (check_barrier(comm))
        fails++;
    bool want = expect_shm && weft_comm_size(comm) > 1;
    if (weft_comm_uses_shm(comm) != want) {
        fprintf(stderr, "%s: the group %s shared memory\n", label,
                want ? "does not use" : "uses");
        fails++;
    }
    if (weft_comm_uses_cma(comm) != (want && expect_cma)) {
        fprintf(stderr, "%s: the group %s CMA\n", label,
                want && expect_cma ? "does not use" : "uses");
        fails++;
    }
    for (int op = 0; op < OP_COUNT; op++) {
        for (size_t d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]); d++) {
            enum weft_dtype dt = dtypes[d];
            for (int s = 0; s < max_size; s++) {
                for (int ip = 0; ip < 2; ip++) {
                    bool in_place = ip, v = op == OP_ALLGATHERV || op == OP_ALLTOALLV;
                    if (op == OP_BCAST && in_place)
                        continue; /* a broadcast has one buffer */
                    if (s == BIG && !big_case(op, dt, in_place))
                        continue;
                    size_t es = weft_dtype_size(dt), n = (size_t)weft_comm_size(comm);
                    size_t count = sizes[s].elems;
                    if (sizes[s].bytes) {
                        size_t per = op == OP_ALLREDUCE || op == OP_BCAST ? 1 : n;
                        count = sizes[s].bytes / es / per;
                        if (v)
                            count -= count / 8; /* room for the uneven extra elements */
                    }
                    char what[160];
                    snprintf(what, sizeof(what), "%s: %s %s count %zu %s", label, op_names[op],
                             weft_dtype_name(dt), count, in_place ? "in place" : "out of place");
                    if (run_case(comm, (enum op)op, dt, count, in_place, seed++, what)) {
                        fails++;
                        if (weft_comm_status(comm) != WEFT_OK)
                            return fails; /* the group is gone: stop */
                    }
                }
            }
        }
    }
    return fails;
}

struct args {
    bool mesh;
    bool no_cma_one;
    int max_size;
};

static int rank_fn(struct weft_transport *tp, void *arg)
{
    const struct args *a = arg;
    weft_log_set_level(WEFT_LOG_LEVEL_ERROR);
    int me = weft_transport_rank(tp);
    int fails = 0;
    shared_bufs = shared_mode == 1 || (shared_mode == 2 && me % 2);
    if (a->no_cma_one) {
        /* a group made once rank 1 cannot use CMA safely: its members agree to do without */
        int n = weft_transport_size(tp), all[16];
        for (int r = 0; r < n; r++)
            all[r] = r;
        if (me == 1)
            forbid(SYS_pidfd_open);
        struct weft_comm *g;
        CHECK_OK(weft_comm_create(tp, n, all, 3, &g));
        char label[48];
        snprintf(label, sizeof(label), "group of %d without CMA", n);
        fails += run_matrix(g, label, a->max_size);
        weft_comm_destroy(g);
    } else if (!a->mesh) {
        char label[32];
        snprintf(label, sizeof(label), "world of %d", weft_transport_size(tp));
        fails += run_matrix(weft_transport_world(tp), label, a->max_size);
    } else {
        /* 2x2 mesh: contiguous groups {0,1},{2,3}, strided {0,2},{1,3} */
        int contig[2] = {me & ~1, (me & ~1) + 1}, strided[2] = {me & 1, (me & 1) + 2};
        struct weft_comm *gc, *gs;
        CHECK_OK(weft_comm_create(tp, 2, contig, 1, &gc));
        CHECK_OK(weft_comm_create(tp, 2, strided, 2, &gs));
        CHECK_EQ(weft_comm_rank(gs), me >> 1);
        fails += run_matrix(gs, "strided group", a->max_size);
        fails += run_matrix(gc, "contiguous group", BIG);
        weft_comm_destroy(gc);
        weft_comm_destroy(gs);
    }
    if (fails)
        fprintf(stderr, "rank %d: %d case(s) failed\n", me, fails);
    return fails ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s NP [--mesh] [--algo=ring|direct] [--chunk=BYTES] "
                        "[--depth=N] [--no-big] [--shm=off] [--shm-max=N] [--shared[=odd]] "
                        "[--no-cma=all|one]\n",
                argv[0]);
        return 2;
    }
    int np = atoi(argv[1]);
    struct args a = {.max_size = (int)N_SIZES};
    struct weft_transport_opts opts;
    launch_opts(&opts);
    bool no_cma_all = false;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--mesh") == 0)
            a.mesh = true;
        else if (strcmp(argv[i], "--algo=ring") == 0)
            opts.allreduce_algo = WEFT_COMM_ALGO_RING;
        else if (strcmp(argv[i], "--algo=direct") == 0)
            opts.allreduce_algo = WEFT_COMM_ALGO_DIRECT;
        else if (strncmp(argv[i], "--chunk=", 8) == 0)
            opts.chunk_bytes = strtoul(argv[i] + 8, NULL, 10);
        else if (strncmp(argv[i], "--depth=", 8) == 0)
            opts.pipeline_depth = atoi(argv[i] + 8);
        else if (strcmp(argv[i], "--no-big") == 0)
            a.max_size = BIG;
        else if (strcmp(argv[i], "--shm=off") == 0)
            opts.shm = false;
        else if (strncmp(argv[i], "--shm-max=", 10) == 0)
            opts.shm_max = strtoul(argv[i] + 10, NULL, 10);
        else if (strcmp(argv[i], "--shared") == 0)
            shared_mode = 1;
        else if (strcmp(argv[i], "--shared=odd") == 0)
            shared_mode = 2;
        else if (strcmp(argv[i], "--no-cma=one") == 0)
            a.no_cma_one = true;
        else if (strcmp(argv[i], "--no-cma=all") == 0)
            no_cma_all = true;
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    CHECK(np >= 1 && np <= 16 && (!a.mesh || np == 4));
    CHECK(!a.mesh || shared_mode != 2); /* a strided group of odd ranks would push */
    expect_shm = opts.shm;
    if (no_cma_all)
        forbid(SYS_process_vm_readv);
    expect_cma = !a.no_cma_one && weft_transport_cma_allowed();
    CHECK(!a.no_cma_one || np >= 2);
    return launch_run(np, &opts, rank_fn, &a, 170, -1);
}
