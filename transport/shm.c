/* Shared-memory collectives for the ranks of one host.
 *
 * A group whose members all run on this host (and may open each other's descriptors through
 * /proc/PID/fd, the permission CMA also needs) moves its collectives through memory instead of
 * UCX. Each member maps a small control page of every other member (a memfd: sequence flags,
 * a doorbell, the descriptors of the call's buffers), and the buffers themselves: a buffer from
 * weft_big_alloc_shared is read by the peers in place; a private one of SHM_CMA_MIN bytes or
 * more is read by them in place too, by cross-memory attach (process_vm_readv, a single copy)
 * where every member could read every other's memory at setup; any other is first copied into
 * the member's own shareable staging buffer. A group that may use CMA takes this path at every
 * size; one that may not, up to [transport] shm_max. Then:
 *  - all-reduce is a fused copy-reduce: each rank sums its block straight from every rank's
 *    input (one read of each, the sum order of comm.h; an input read by CMA comes through a
 *    small bounce buffer, a tile at a time). Where every rank's output is shareable, the
 *    owner writes each tile of its sum into every output (push: one phase, each byte read
 *    once and written once, memcpy's traffic); else into its own output, and every rank
 *    copies the other blocks from their owners' results (a second phase);
 *  - all-gather(v), all-to-all(v) and broadcast are single copies from the peers' buffers;
 *  - barrier is the arrival flags alone.
 * The flags count this group's shared-memory calls (64 bits, never wrap): arrive (the call's
 * descriptors are published), reduced (this rank's block of the sum is ready) and done (this
 * rank has read everything it needed from the others, and written all it writes into theirs). A
 * rank leaves a call only once every rank is done, so the caller may reuse its buffers at once;
 * a rank that leaves a failed all-reduce its peers may still be writing into first moves its
 * output out of their reach (weft_tp_shm_abort).
 *
 * Waiting: the op's progress callback only looks at the flags (weft_tp_progress, wait.c, runs
 * it); a wait that finds nothing sleeps on the doorbell of its own control page (a futex the
 * peers ring after every flag they raise) for at most a millisecond, so the liveness sockets
 * and the deadline are read as often as before: a dead peer fails the call with "peer lost", a
 * silent one with "timed out", whatever path the bytes took. A rank that cannot map a peer's
 * buffer raises its failed flag and every peer fails the call with it. A CMA read names a
 * process by its pid, which the system may give to another process once the peer has ended:
 * each member holds a pidfd of every peer, and a read counts only if that peer is still alive
 * after it (else "peer lost"), so a reused pid is never read as the peer's memory.
 *
 * Whether a group uses this path is decided when it is created, by every member together (two
 * small all-gathers over UCX): all must want it ([transport] shm) and all must have mapped
 * every other member's control page. Knows nothing about models. */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "common/alloc.h"
#include "common/log.h"
#include "transport/internal.h"

#define SHM_MAX_RANKS 64
#define SHM_MAPS 8            /* cached mappings of one peer's buffers */
#define SHM_SLEEP_NS 1000000  /* longest doorbell sleep: liveness is read at least this often */
#define SHM_YIELD_NS 20000    /* yield this long before sleeping on the doorbell */
#define SHM_TILE 2048         /* elements summed at a time (the f32 accumulator stays in L1) */

/* A buffer a rank publishes for its peers to read: id 0 is none. A CMA one (cma set) is read
 * with process_vm_readv at addr, len bytes; the others are mapped from the memfd fd. */
struct shm_desc {
    uint64_t id;
    uint64_t len;    /* the mapped length of the memfd; CMA: the buffer's */
    uint64_t offset; /* of the data in it */
    int32_t fd;
    int32_t cma;
    uint64_t addr;   /* CMA: the buffer in its owner's address space */
    uint64_t ino;    /* the memfd's inode: the descriptor must still name it when opened */
};

/* One rank's control page; its owner writes everything but the doorbell, which peers ring. */
struct shm_ctl {
    /* each flag on a cache line of its own, with what the peers read once it is raised */
    _Alignas(64) _Atomic uint64_t arrive;
    struct shm_desc src;         /* what peers read: the input */
    uint32_t whole;              /* all-reduce: res is the whole output, shareable */
    _Alignas(64) _Atomic uint64_t reduced;
    struct shm_desc res;         /* all-reduce: the summed block, or the whole output */
    _Alignas(64) _Atomic uint64_t done;
    uint64_t cookie;
    uint64_t frees;              /* weft_shared_frees() of the owner when it published */
    _Alignas(64) _Atomic uint64_t failed; /* the call this rank failed (0: none) */
    _Atomic int32_t failed_st;   /* ... with this status (set before failed) */
    _Alignas(64) _Atomic uint32_t bell;
    _Atomic uint32_t sleeping;
    uint64_t soff[SHM_MAX_RANKS]; /* all-to-all(v): element offset of the block for rank j */
};

struct shm_map {
    uint64_t id;
    char *base;
    size_t len;
    uint64_t used; /* call number of the last use */
    bool writable;
};


struct weft_tp_shm {
    int n, me;
    int ctl_fd;
    struct shm_ctl **ctl;   /* [n]: every rank's control page, mapped (ctl[me] is ours) */
    pid_t *pid;
    struct shm_map *maps;   /* [n][SHM_MAPS] */
    uint64_t *peer_frees;   /* [n]: the frees count their mappings were made under */
    const char **src;       /* [n]: this call's input of each rank, mapped (or its owner's
                               address, when src_cma[r]) */
    bool *src_cma;          /* [n]: src[r] is read by CMA */
    bool *res_cma;          /* [n]: res[r] is read by CMA */
    float *acc;             /* sum_part's accumulator (SHM_CMA_TILE floats) and the bounce
                               buffer of its CMA reads and 16-bit results */
    char *bounce;
    int *pidfd;             /* [n]: a pidfd of each peer (-1: none), when cma */
    bool cma;               /* the group reads private buffers by CMA (all members could) */
    char **res;             /* [n]: this call's summed block of each rank (push: its whole
                               output, mapped writable) */
    bool push;              /* all-reduce: every rank's output is shareable, and the owner of
                               each block writes its sum into every output */
    uint64_t seq;           /* shared-memory calls so far (the current one while in flight) */
    char *stage;            /* shareable copy of a buffer that is not shareable itself */
    size_t stage_len;
    bool res_staged;        /* all-reduce: the summed block is published from stage + res_at */
    size_t res_at;
    enum weft_tp_shm_kind kind;
};

/* The hello each member sends at the group's first collective. */
struct shm_hello {
    uint8_t boot_id[16];
    uint64_t cookie;
    int32_t pid;
    int32_t fd;
    uint32_t uid;
    uint32_t want; /* this rank takes the path: [transport] shm and its page made */
    uint32_t pad;
    uint64_t ctl_addr; /* its control page here: the CMA probe reads the cookie from it */
};

/* What each member says after mapping the others' pages. */
enum { SHM_MAPPED = 1, SHM_CMA_OK = 2 };

/* A private buffer of at least this many bytes is read by CMA, where the group may, rather than
 * staged: below it a copy into the staging buffer costs less than the system call. */
#define SHM_CMA_MIN ((size_t)256 << 10)
/* Elements an all-reduce reads by CMA at a time (one system call; the f32 accumulator and the
 * bounce buffer stay in L2). */
#define SHM_CMA_TILE ((size_t)16 << 10)
/* A staging buffer larger than this is freed once its call is done (only an in-place
 * all-to-all stages that much where the group reads by CMA). */
#define SHM_STAGE_KEEP ((size_t)1 << 20)
/* How long a failed CMA read waits for its peer's end to become visible. */
#define SHM_END_WAIT_MS 200

/* Copies of at least this many bytes bypass the cache (streaming stores): the result is
 * larger than what the cache would keep, and a store that misses would first read the line. */
#define SHM_NT_MIN ((size_t)1 << 20)

/* memcpy with streaming stores; the caller fences (shm_fence) before raising a flag. */
static void copy_out(void *dst, const void *src, size_t bytes, bool stream)
{
    if (!bytes)
        return;
#ifdef __SSE2__
    if (stream) {
        char *d = dst;
        const char *s = src;
        size_t head = (size_t)(-(uintptr_t)d & 15);
        if (head > bytes)
            head = bytes;
        memcpy(d, s, head);
        d += head;
        s += head;
        bytes -= head;
        for (; bytes >= 64; bytes -= 64, d += 64, s += 64) {
            __m128i a = _mm_loadu_si128((const __m128i *)s);
            __m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
            __m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
            __m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
            _mm_stream_si128((__m128i *)d, a);
            _mm_stream_si128((__m128i *)(d + 16), b);
            _mm_stream_si128((__m128i *)(d + 32), c);
            _mm_stream_si128((__m128i *)(d + 48), e);
        }
        memcpy(d, s, bytes);
        return;
    }
#endif
    (void)stream;
    memcpy(dst, src, bytes);
}

/* Streaming stores are not ordered by release stores: fence them before a flag. */
static void shm_fence(void)
{
#ifdef __SSE2__
    _mm_sfence();
#endif
}

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
}

static void ring_all(struct weft_tp_shm *s)
{
    for (int r = 0; r < s->n; r++) {
        if (r == s->me)
            continue;
        struct shm_ctl *c = s->ctl[r];
        atomic_fetch_add(&c->bell, 1);
        if (atomic_load(&c->sleeping))
            futex(&c->bell, FUTEX_WAKE, INT32_MAX, NULL);
    }
}

static void raise_flag(struct weft_tp_shm *s, _Atomic uint64_t *flag)
{
    shm_fence();
    atomic_store_explicit(flag, s->seq, memory_order_release);
    ring_all(s);
}

/* /proc files report no size: read with stdio (weft_files_read sizes by fstat). */
static void boot_id(uint8_t out[16])
{
    memset(out, 0, 16);
    char text[64] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(text, sizeof(text), f))
            text[0] = '\0';
        (void)fclose(f);
    }
    /* the text itself identifies the boot; folded into 16 bytes */
    for (size_t i = 0; text[i] && text[i] != '\n'; i++)
        out[i % 16] = (uint8_t)(out[i % 16] * 31 + (uint8_t)text[i]);
}

/* Map the memfd fd of process pid (the whole len bytes) on a 2 MiB boundary, so the huge pages
 * behind it are mapped as such; ino (unless 0): the file's inode, which a descriptor number
 * closed and reused since it was published no longer has. */
static char *map_peer(pid_t pid, int fd, size_t len, bool writable, uint64_t ino)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, fd);
    int f = open(path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (f < 0)
        return NULL;
    struct stat st;
    if (ino && (fstat(f, &st) != 0 || (uint64_t)st.st_ino != ino)) {
        close(f);
        return NULL;
    }
    char *p = weft_map_shared(f, len, writable);
    close(f);
    return p;
}

static void maps_drop(struct weft_tp_shm *s, int r)
{
    for (int k = 0; k < SHM_MAPS; k++) {
        struct shm_map *m = &s->maps[(size_t)r * SHM_MAPS + k];
        if (m->base)
            munmap(m->base, m->len);
        *m = (struct shm_map){0};
    }
}

void weft_tp_shm_free(struct weft_comm *comm)
{
    struct weft_tp_shm *s = comm->shm;
    if (!s)
        return;
    for (int r = 0; r < s->n; r++) {
        if (s->maps)
            maps_drop(s, r);
        if (s->ctl && s->ctl[r])
            munmap(s->ctl[r], sizeof(struct shm_ctl));
        if (s->pidfd && s->pidfd[r] >= 0)
            close(s->pidfd[r]);
    }
    if (s->ctl_fd >= 0)
        close(s->ctl_fd);
    weft_big_free(s->stage, s->stage_len);
    weft_free(s->ctl);
    weft_free(s->pid);
    weft_free(s->maps);
    weft_free(s->peer_frees);
    weft_free(s->src);
    weft_free(s->src_cma);
    weft_free(s->res_cma);
    weft_free(s->acc);
    weft_free(s->bounce);
    weft_free(s->pidfd);
    weft_free(s->res);
    weft_free(s);
    comm->shm = NULL;
}

static struct weft_tp_shm *shm_new(int n, int me)
{
    struct weft_tp_shm *s = weft_calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->n = n;
    s->me = me;
    s->ctl_fd = -1;
    size_t un = (size_t)n;
    s->ctl = weft_calloc(un, sizeof(struct shm_ctl *));
    s->pid = weft_calloc(un, sizeof(*s->pid));
    s->maps = weft_calloc(un * SHM_MAPS, sizeof(*s->maps));
    s->peer_frees = weft_calloc(un, sizeof(*s->peer_frees));
    s->src = weft_calloc(un, sizeof(*s->src));
    s->res = weft_calloc(un, sizeof(*s->res));
    s->src_cma = weft_calloc(un, sizeof(*s->src_cma));
    s->res_cma = weft_calloc(un, sizeof(*s->res_cma));
    s->acc = weft_calloc(SHM_CMA_TILE, sizeof(float));
    s->bounce = weft_calloc(SHM_CMA_TILE, sizeof(float));
    s->pidfd = weft_calloc(un, sizeof(*s->pidfd));
    for (int r = 0; s->pidfd && r < n; r++)
        s->pidfd[r] = -1; /* before any return: weft_tp_shm_free closes the others */
    if (!s->ctl || !s->pid || !s->maps || !s->peer_frees || !s->src || !s->res ||
        !s->src_cma || !s->res_cma || !s->acc || !s->bounce || !s->pidfd)
        return s; /* the caller sees the missing arrays and gives up */
    int fd = memfd_create("weft-shm-ctl", MFD_CLOEXEC);
    if (fd < 0)
        return s;
    s->ctl_fd = fd;
    if (ftruncate(fd, sizeof(struct shm_ctl)) != 0)
        return s;
    void *p = mmap(NULL, sizeof(struct shm_ctl), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return s;
    s->ctl[me] = p;
    uint64_t cookie = 0;
    if (getrandom(&cookie, sizeof(cookie), 0) != sizeof(cookie))
        cookie = (uint64_t)weft_tp_now_ns() ^ ((uint64_t)getpid() << 32);
    s->ctl[me]->cookie = cookie | 1;
    return s;
}

/* Whether this process may read the memory of peer pid by CMA: a pidfd of it (the guard
 * against a reused pid, into *pidfd), and its cookie read from its control page at addr. A
 * container's seccomp profile or a hardened kernel may forbid either; the group then stages
 * private buffers. */
static bool cma_probe(pid_t pid, int *pidfd, uint64_t addr, uint64_t cookie)
{
    *pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (*pidfd < 0)
        return false;
    uint64_t got = 0;
    struct iovec local = {&got, sizeof(got)};
    struct iovec remote = {(void *)(uintptr_t)(addr + offsetof(struct shm_ctl, cookie)),
                           sizeof(got)};
    return process_vm_readv(pid, &local, 1, &remote, 1, 0) == (ssize_t)sizeof(got) &&
           got == cookie;
}

/* The group's first collective: every member says whether it can and wants to, and what to
 * map; then whether it mapped every other member (and could read it by CMA). Both exchanges
 * over UCX. */
static weft_status_t shm_setup(struct weft_comm *comm)
{
    int n = comm->size, me = comm->rank;
    struct weft_tp_shm *s = n <= SHM_MAX_RANKS ? shm_new(n, me) : NULL;
    struct shm_hello mine = {0};
    boot_id(mine.boot_id);
    mine.pid = (int32_t)getpid();
    mine.uid = (uint32_t)getuid();
    mine.want = comm->tp->opts.shm && s && s->ctl && s->ctl[me];
    mine.fd = mine.want ? s->ctl_fd : -1;
    mine.cookie = mine.want ? s->ctl[me]->cookie : 0;
    mine.ctl_addr = mine.want ? (uint64_t)(uintptr_t)s->ctl[me] : 0;
    /* Yama's ptrace_scope 1 (Ubuntu's default) lets only an ancestor read a process's memory
     * unless the process allows others, as UCX's CMA transport also does; no effect elsewhere */
    if (mine.want)
        (void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    struct shm_hello *all = weft_calloc((size_t)n, sizeof(*all));
    uint8_t *ok = weft_calloc((size_t)n, 1);
    weft_status_t st = all && ok ? WEFT_OK : WEFT_ERR_NOMEM;
    if (st == WEFT_OK)
        st = weft_comm_allgather(comm, &mine, all, sizeof(mine), WEFT_DTYPE_U8);
    bool able = st == WEFT_OK && mine.want && s && s->ctl, cma = able;
    for (int r = 0; r < n && able; r++) {
        able = all[r].want && memcmp(all[r].boot_id, mine.boot_id, 16) == 0;
        if (!able || r == me)
            continue;
        s->pid[r] = all[r].pid;
        s->ctl[r] = (struct shm_ctl *)map_peer(all[r].pid, all[r].fd, sizeof(struct shm_ctl),
                                               true, 0);
        /* the cookie proves the page is that rank's, not another process's with its pid */
        able = s->ctl[r] && s->ctl[r]->cookie == all[r].cookie;
        cma = cma && able && cma_probe(s->pid[r], &s->pidfd[r], all[r].ctl_addr, all[r].cookie);
    }
    uint8_t me_ok = (uint8_t)((able ? SHM_MAPPED : 0) | (able && cma ? SHM_CMA_OK : 0));
    if (st == WEFT_OK)
        st = weft_comm_allgather(comm, &me_ok, ok, 1, WEFT_DTYPE_U8);
    bool on = st == WEFT_OK;
    cma = on;
    for (int r = 0; r < n && on; r++) {
        on = ok[r] & SHM_MAPPED;
        cma = cma && (ok[r] & SHM_CMA_OK);
    }
    weft_free(all);
    weft_free(ok);
    comm->shm = s;
    if (on) {
        s->pid[me] = getpid();
        s->cma = cma;
        comm->shm_state = SHM_ON;
        WEFT_LOG_DEBUG("transport", "group %u: %d ranks on this host, collectives through shared "
                       "memory%s", comm->id, n, cma ? " (private buffers read by CMA)" : "");
    } else {
        weft_tp_shm_free(comm);
        comm->shm_state = SHM_OFF;
    }
    return st;
}

weft_status_t weft_tp_shm_setup(struct weft_comm *comm)
{
    if (comm->size == 1 || comm->failed != WEFT_OK) {
        comm->shm_state = SHM_OFF;
        return WEFT_OK;
    }
    comm->shm_state = SHM_SETUP; /* the setup's own exchanges take UCX */
    weft_status_t st = shm_setup(comm);
    if (st != WEFT_OK)
        comm->shm_state = SHM_OFF; /* the group failed with it (peer lost) */
    return st;
}

/* ---- buffers ---- */

/* Describe [p, p + bytes) for the peers: read by CMA in place (cma set), or a buffer that is
 * not shareable copied into the staging buffer at stage_off first (copy set). */
static weft_status_t publish(struct weft_tp_shm *s, const void *p, size_t bytes, size_t stage_off,
                             bool copy, bool cma, struct shm_desc *d)
{
    struct weft_shared_region reg;
    if (!bytes) {
        *d = (struct shm_desc){0};
        return WEFT_OK;
    }
    if (cma) {
        *d = (struct shm_desc){.id = 1, .len = bytes, .cma = 1, .addr = (uintptr_t)p};
        return WEFT_OK;
    }
    if (!copy && weft_shared_find(p, bytes, &reg) == 0) {
        *d = (struct shm_desc){reg.id, reg.len, reg.offset, reg.fd, 0, 0, reg.ino};
        return WEFT_OK;
    }
    if (weft_shared_find(s->stage + stage_off, bytes, &reg) != 0)
        return WEFT_ERR_NOMEM; /* the staging buffer could not be made shareable */
    if (copy && p)
        memcpy(s->stage + stage_off, p, bytes);
    *d = (struct shm_desc){reg.id, reg.len, reg.offset, reg.fd, 0, 0, reg.ino};
    return WEFT_OK;
}

static weft_status_t stage_need(struct weft_tp_shm *s, size_t bytes)
{
    if (bytes <= s->stage_len)
        return WEFT_OK;
    weft_big_free(s->stage, s->stage_len);
    s->stage_len = 0;
    s->stage = weft_big_alloc_shared(bytes);
    if (!s->stage)
        return WEFT_ERR_NOMEM;
    s->stage_len = bytes;
    return WEFT_OK;
}

/* Whether a buffer needs the staging copy: not inside a shareable buffer. */
static bool unshared(const void *p, size_t bytes)
{
    struct weft_shared_region reg;
    return bytes && weft_shared_find(p, bytes, &reg) != 0;
}

/* Whether the peers read this buffer by CMA: private, large enough, and the group may. */
static bool via_cma(const struct weft_tp_shm *s, const void *p, size_t bytes)
{
    return s->cma && bytes >= SHM_CMA_MIN && unshared(p, bytes);
}

/* The address of rank r's described buffer in this process (mapped on first use, writable if
 * asked); a CMA one's address is its owner's (*cma set). */
static char *resolve(struct weft_tp_shm *s, int r, const struct shm_desc *d, bool writable,
                     bool *cma)
{
    *cma = d->id && d->cma;
    if (!d->id || d->cma)
        return d->id ? (char *)(uintptr_t)d->addr : NULL;
    struct shm_map *m = &s->maps[(size_t)r * SHM_MAPS], *victim = m;
    for (int k = 0; k < SHM_MAPS; k++) {
        if (m[k].id == d->id && m[k].len == d->len && (m[k].writable || !writable)) {
            m[k].used = s->seq;
            return m[k].base + d->offset;
        }
        if (m[k].used < victim->used)
            victim = &m[k];
    }
    if (victim->base)
        munmap(victim->base, victim->len);
    *victim = (struct shm_map){0};
    char *base = map_peer(s->pid[r], d->fd, d->len, writable, d->ino);
    if (!base)
        return NULL;
    *victim = (struct shm_map){d->id, base, d->len, s->seq, writable};
    return base + d->offset;
}

/* ---- the calls ---- */

/* Rank r failed this call. A peer it found lost is lost to this rank too; any other failure
 * (it could not map or read a buffer) leaves the members out of step: the group is done. */
static weft_status_t peer_failed(struct weft_comm *c, int r)
{
    const weft_status_t why = (weft_status_t)atomic_load(&c->shm->ctl[r]->failed_st);
    const weft_status_t st = WEFT_STATUS_IS_PEER_LOST(why) ? why : WEFT_ERR_PROTOCOL;
    WEFT_LOG_ERROR("transport", "group %u: rank %d could not take part in shared-memory "
                   "collective %llu (%s)", c->id, r, (unsigned long long)c->shm->seq,
                   WEFT_STATUS_IS_PEER_LOST(why) ? "it lost a peer"
                                                 : "it could not map or read a buffer");
    if (c->failed == WEFT_OK)
        c->failed = st;
    return st;
}

/* The first rank whose flag (the field of its control page) has not reached this call, -1 when
 * every one has; *failed: that rank has raised its failed flag instead. */
static int first_behind(const struct weft_tp_shm *s, size_t field, bool *failed)
{
    for (int r = 0; r < s->n; r++) {
        _Atomic uint64_t *f = (_Atomic uint64_t *)((char *)s->ctl[r] + field);
        if (atomic_load_explicit(f, memory_order_acquire) >= s->seq)
            continue;
        *failed = atomic_load(&s->ctl[r]->failed) >= s->seq;
        return r;
    }
    return -1;
}

/* Every rank's flag at this call: WEFT_OK, WEFT_INPROGRESS, or a peer's failure. */
static weft_status_t all_at(struct weft_comm *c, size_t field)
{
    bool failed = false;
    const int r = first_behind(c->shm, field, &failed);
    return r < 0 ? WEFT_OK : failed ? peer_failed(c, r) : WEFT_INPROGRESS;
}

static weft_status_t fail_here(struct weft_comm *c, weft_status_t st, const char *what, int r)
{
    struct weft_tp_shm *s = c->shm;
    atomic_store(&s->ctl[s->me]->failed_st, (int32_t)st);
    atomic_store(&s->ctl[s->me]->failed, s->seq);
    ring_all(s);
    if (c->failed == WEFT_OK)
        c->failed = st;
    WEFT_LOG_ERROR("transport", "group %u: %s of rank %d: %s", c->id, what, r,
                   st == WEFT_ERR_NOMEM ? "cannot map it (out of memory or descriptors)"
                                        : weft_status_str(st));
    return st;
}

/* Whether process pid has ended (gone, or a zombie whose descriptors are closed): a buffer of
 * it that cannot be mapped then means the peer is lost, not that memory ran out. */
static bool process_gone(pid_t pid)
{
    char path[64], buf[256];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return true;
    const size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    (void)fclose(f);
    buf[n] = 0;
    const char *end = strrchr(buf, ')'); /* the state follows the command's closing ")" */
    return end && end[1] == ' ' && (end[2] == 'Z' || end[2] == 'X');
}

/* A peer's buffer could not be mapped: lost when its process has ended, else out of memory or
 * descriptors. */
static weft_status_t map_failed(struct weft_comm *c, const char *what, int r)
{
    return fail_here(c, process_gone(c->shm->pid[r]) ? WEFT_ERR_PEER_LOST : WEFT_ERR_NOMEM,
                     what, r);
}

/* The peers' buffers of this call, mapped (their results too when res; writable when
 * s->push); new mappings after a peer freed a shareable buffer (what it frees may come back at
 * the same descriptor). */
static weft_status_t resolve_all(struct weft_comm *c, bool res)
{
    struct weft_tp_shm *s = c->shm;
    for (int r = 0; r < s->n; r++) {
        const struct shm_ctl *k = s->ctl[r];
        if (r != s->me && k->frees != s->peer_frees[r]) {
            maps_drop(s, r);
            s->peer_frees[r] = k->frees;
        }
        s->src[r] = NULL;
        s->res[r] = NULL;
        s->src_cma[r] = false;
        s->res_cma[r] = false;
        if (r == s->me)
            continue;
        /* in place, the input is the output a pushing rank writes: one writable mapping */
        const bool same = k->src.id && k->src.id == k->res.id && !k->src.cma;
        if (k->src.id && !(s->src[r] = resolve(s, r, &k->src, s->push && same, &s->src_cma[r])))
            return map_failed(c, "the input", r);
        if (res && k->res.id && !(s->res[r] = resolve(s, r, &k->res, s->push, &s->res_cma[r])))
            return map_failed(c, s->push ? "the output" : "the summed block", r);
    }
    return WEFT_OK;
}

/* Whether the process of pidfd fd has ended, waiting at most ms for it (a signal does not cut
 * the wait short). An unusable descriptor counts as ended: the peer cannot be vouched for. */
static bool pidfd_ended(int fd, int ms)
{
    const int64_t end = weft_tp_now_ns() + (int64_t)ms * 1000000;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int64_t left = (end - weft_tp_now_ns()) / 1000000;
        int k = poll(&p, 1, left > 0 ? (int)left : 0);
        if (k > 0)
            return true; /* POLLIN: it ended; POLLERR, POLLHUP, POLLNVAL: no telling */
        if (k == 0)
            return false;
        if (errno != EINTR)
            return true;
    }
}

/* Whether peer r has ended or is ending: a killed process frees its memory (a CMA read of it
 * fails) before it closes its descriptors and becomes a zombie, so a read that failed waits a
 * little for the end (its pidfd turning readable). */
static bool peer_ending(const struct weft_tp_shm *s, int r)
{
    return pidfd_ended(s->pidfd[r], SHM_END_WAIT_MS) || process_gone(s->pid[r]);
}

/* What was read of peer r by CMA counts only if r is still alive now (its pidfd not
 * readable). */
static weft_status_t cma_alive(struct weft_comm *c, int r, const char *what)
{
    if (pidfd_ended(c->shm->pidfd[r], 0)) /* the bytes may not be the peer's */
        return fail_here(c, WEFT_ERR_PEER_LOST, what, r);
    return WEFT_OK;
}

/* Read bytes of peer r's memory at src into dst by CMA. It counts only if r is still alive
 * afterwards (its pidfd not readable): a pid freed by the peer's end may name another process
 * by then (check: here; else the caller's cma_alive once its reads are done). A read that
 * fails is a lost peer when the peer has no memory left (ESRCH), ends soon after, or where the
 * world expects such faults (revoked, frozen, or a peer leaving: it freed its buffers); else a
 * protocol error. */
static weft_status_t cma_read(struct weft_comm *c, int r, const char *what, char *dst,
                              const char *src, size_t bytes, bool check)
{
    struct weft_tp_shm *s = c->shm;
    while (bytes) {
        struct iovec local = {dst, bytes}, remote = {(void *)(uintptr_t)src, bytes};
        ssize_t got = process_vm_readv(s->pid[r], &local, 1, &remote, 1, 0);
        if (got <= 0) {
            const int err = got < 0 ? errno : EIO;
            /* a peer that failed this call may have freed or reused its buffer already */
            if (atomic_load(&s->ctl[r]->failed) >= s->seq)
                return peer_failed(c, r);
            if (err == ESRCH || peer_ending(s, r) ||
                (err == EFAULT && weft_tp_cma_fault_expected_in(c->tp, c->ranks, c->size)))
                return fail_here(c, WEFT_ERR_PEER_LOST, what, r);
            WEFT_LOG_ERROR("transport", "group %u: reading %s of rank %d (pid %d) by CMA: %s",
                           c->id, what, r, (int)s->pid[r], strerror(err));
            return fail_here(c, WEFT_ERR_PROTOCOL, what, r);
        }
        dst += got;
        src += got;
        bytes -= (size_t)got;
    }
    return check ? cma_alive(c, r, what) : WEFT_OK;
}

/* Part of block b of the sum (elements off + from .. off + to) from every rank's input, in the
 * order of comm.h: starting after the owner, ending with it, into dst (and, push, into every
 * peer's output). mine: this rank's own input. A tile of each input in turn is summed into the
 * accumulator; an input read by CMA comes through the bounce buffer, in larger tiles (one
 * system call each), and counts once its owner is seen alive after the reads. In place, a
 * tile of a peer's output is its input: every input's tile is read before it is written. */
static weft_status_t sum_part(struct weft_tp_op *op, const char *mine, int b, char *dst,
                              size_t from, size_t to)
{
    struct weft_comm *c = op->comm;
    struct weft_tp_shm *s = c->shm;
    int n = s->n;
    size_t off = c->off[b], es = op->esize;
    const bool stream = c->len[b] * es >= SHM_NT_MIN;
    bool cma = false;
    for (int r = 0; r < n; r++)
        cma = cma || s->src_cma[r];
    const size_t tile = cma ? SHM_CMA_TILE : SHM_TILE;
    for (size_t t = from; t < to; t += tile) {
        size_t m = to - t < tile ? to - t : tile;
        for (int k = 1; k <= n; k++) {
            int r = (b + k) % n;
            const char *x = (r == s->me ? mine : s->src[r]) + (off + t) * es;
            if (r != s->me && s->src_cma[r]) {
                weft_status_t st = cma_read(c, r, "the input", s->bounce, x, m * es, false);
                if (st != WEFT_OK)
                    return st;
                x = s->bounce;
            }
            if (k == 1)
                weft_tp_sum_load(s->acc, x, m, op->dtype);
            else
                weft_tp_sum_acc(s->acc, x, m, op->dtype);
        }
        const char *sum = (const char *)s->acc;
        if (op->dtype != WEFT_DTYPE_F32) {
            weft_tp_sum_store(s->bounce, s->acc, m, op->dtype);
            sum = s->bounce;
        }
        copy_out(dst + t * es, sum, m * es, stream);
        for (int r = 0; s->push && r < n; r++)
            if (r != s->me)
                copy_out(s->res[r] + (off + t) * es, sum, m * es, stream);
    }
    for (int r = 0; r < n; r++) {
        weft_status_t st = s->src_cma[r] ? cma_alive(c, r, "the input") : WEFT_OK;
        if (st != WEFT_OK)
            return st;
    }
    return WEFT_OK;
}

/* The k-th copy (k = 1 .. n-1: from rank me + k) of the copying step: destination, source
 * and bytes; 0 bytes when there is nothing to copy from that rank. *cma: the source is that
 * rank's address, read by CMA. */
static size_t copy_job(struct weft_tp_op *op, int k, char **dst, const char **src, int *from,
                       bool *cma)
{
    struct weft_comm *c = op->comm;
    struct weft_tp_shm *s = c->shm;
    size_t es = op->esize;
    int r = (s->me + k) % s->n; /* each rank starts at a different peer */
    *from = r;
    *cma = s->kind == WEFT_SHM_ALLREDUCE ? s->res_cma[r] : s->src_cma[r];
    *dst = op->out + c->off[r] * es;
    switch (s->kind) {
    case WEFT_SHM_ALLREDUCE: /* a whole output is read at the owner's block */
        *src = s->res[r] && s->ctl[r]->whole ? s->res[r] + c->off[r] * es : s->res[r];
        return c->len[r] * es;
    case WEFT_SHM_ALLGATHER:
        *src = s->src[r];
        return c->len[r] * es;
    case WEFT_SHM_ALLTOALL:
        *src = s->src[r] ? s->src[r] + s->ctl[r]->soff[s->me] * es : NULL;
        return c->len[r] * es;
    case WEFT_SHM_BCAST:
        *dst = op->out;
        *src = s->src[r];
        return r == op->root ? op->count * es : 0;
    default:
        return 0;
    }
}

/* Copy from the peers, at most budget bytes (op->next_stream: the copy, op->done: bytes of
 * it). WEFT_OK once every copy is done, WEFT_INPROGRESS before, or a failed CMA read. */
static weft_status_t copy_step(struct weft_tp_op *op, size_t budget)
{
    struct weft_tp_shm *s = op->comm->shm;
    if (op->next_stream == 0)
        op->next_stream = 1;
    while (op->next_stream < (size_t)s->n) {
        char *dst = NULL;
        const char *src = NULL;
        int from = 0;
        bool cma = false;
        size_t len = copy_job(op, (int)op->next_stream, &dst, &src, &from, &cma);
        size_t m = len - op->done < budget ? len - op->done : budget;
        if (m && src && cma) {
            weft_status_t st = cma_read(op->comm, from, s->kind == WEFT_SHM_ALLREDUCE
                                                             ? "the summed block" : "the input",
                                        dst + op->done, src + op->done, m, true);
            if (st != WEFT_OK)
                return st;
        } else if (m && src) { /* a rank publishes a buffer for every block it holds */
            copy_out(dst + op->done, src + op->done, m, len >= SHM_NT_MIN);
        }
        op->done += m;
        budget -= m;
        if (op->done < len)
            return WEFT_INPROGRESS;
        op->next_stream++;
        op->done = 0;
    }
    return WEFT_OK;
}

/* dst = src, bytes of them; large copies as the peers' (streaming stores), unless the two
 * overlap. */
static void local_copy(char *dst, const char *src, size_t bytes)
{
    const uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
    if (d + bytes <= s || s + bytes <= d)
        copy_out(dst, src, bytes, bytes >= SHM_NT_MIN);
    else
        memmove(dst, src, bytes);
}

/* This rank's own block, where it stays (out of place: from its input). */
static void own_copy(struct weft_tp_op *op)
{
    struct weft_comm *c = op->comm;
    struct weft_tp_shm *s = c->shm;
    size_t es = op->esize;
    if (s->kind == WEFT_SHM_ALLGATHER && c->len[s->me] && !op->in_place)
        local_copy(op->out + c->off[s->me] * es, op->in, c->len[s->me] * es);
    if (s->kind == WEFT_SHM_ALLTOALL && c->len[s->me] && !op->in_place)
        local_copy(op->out + c->off[s->me] * es, op->in + c->soff[s->me] * es,
                   c->len[s->me] * es);
}

static void phase_next(struct weft_tp_op *op, int phase)
{
    op->phase = phase;
    op->retired = 0; /* the phase's buffers are not resolved yet */
    op->next_stream = 0;
    op->done = 0;
}

/* One progress call moves at most this much, so a test() returns while the bytes move. */
#define SHM_STEP ((size_t)1 << 20)

static weft_status_t shm_progress(struct weft_tp_op *op, int *moved)
{
    struct weft_comm *c = op->comm;
    struct weft_tp_shm *s = c->shm;
    struct shm_ctl *me = s->ctl[s->me];
    weft_status_t st;
    size_t es = op->esize;
    switch (op->phase) {
    case 0: /* everyone's descriptors: sum (all-reduce) or copy */
        if (!op->retired) {
            if ((st = all_at(c, offsetof(struct shm_ctl, arrive))) != WEFT_OK)
                return st;
            *moved = 1;
            if (s->kind == WEFT_SHM_BARRIER)
                return WEFT_OK;
            s->push = s->kind == WEFT_SHM_ALLREDUCE;
            for (int r = 0; r < s->n; r++)
                s->push = s->push && s->ctl[r]->whole;
            if ((st = resolve_all(c, s->push)) != WEFT_OK)
                return st;
            op->retired = 1;
            if (s->kind != WEFT_SHM_ALLREDUCE)
                own_copy(op);
        }
        *moved = 1;
        if (s->kind == WEFT_SHM_ALLREDUCE) {
            /* the summed block goes where the peers read it: out itself when out is
             * shareable, else the staging buffer after the input's copy */
            int b = s->me;
            size_t len = c->len[b], to = op->done + SHM_STEP / es;
            char *out_b = op->out + c->off[b] * es;
            char *dst = s->res_staged ? s->stage + s->res_at : out_b;
            to = to < len ? to : len;
            if ((st = sum_part(op, op->in, b, dst, op->done, to)) != WEFT_OK)
                return st;
            if (dst != out_b)
                memcpy(out_b + op->done * es, dst + op->done * es, (to - op->done) * es);
            op->done = to;
            if (to < len)
                return WEFT_INPROGRESS;
            /* push: every output has its block from this rank; nothing is left to read */
            phase_next(op, s->push ? 2 : 1);
            raise_flag(s, s->push ? &me->done : &me->reduced);
            return WEFT_INPROGRESS;
        }
        if ((st = copy_step(op, SHM_STEP)) != WEFT_OK)
            return st;
        phase_next(op, 2);
        raise_flag(s, &me->done);
        return WEFT_INPROGRESS;
    case 1: /* all-reduce: every block summed; copy the others' */
        if (!op->retired) {
            if ((st = all_at(c, offsetof(struct shm_ctl, reduced))) != WEFT_OK)
                return st;
            if ((st = resolve_all(c, true)) != WEFT_OK)
                return st;
            op->retired = 1;
        }
        *moved = 1;
        if ((st = copy_step(op, SHM_STEP)) != WEFT_OK)
            return st;
        phase_next(op, 2);
        raise_flag(s, &me->done);
        return WEFT_INPROGRESS;
    default: /* nobody reads this rank's buffers any more */
        if ((st = all_at(c, offsetof(struct shm_ctl, done))) != WEFT_OK)
            return st;
        *moved = 1;
        if (s->cma && s->stage_len > SHM_STAGE_KEEP) { /* a large in-place all-to-all */
            weft_big_free(s->stage, s->stage_len);
            s->stage = NULL;
            s->stage_len = 0;
        }
        return WEFT_OK;
    }
}

/* Publish this call's buffers and raise arrive. The layouts are in comm->off/len (the blocks
 * this rank receives or sums) and comm->soff/slen (what it sends). */
weft_status_t weft_tp_shm_start(struct weft_tp_op *op, enum weft_tp_shm_kind kind)
{
    struct weft_comm *c = op->comm;
    struct weft_tp_shm *s = c->shm;
    struct shm_ctl *me = s->ctl[s->me];
    size_t es = op->esize;
    s->kind = kind;
    s->push = false;
    s->seq++;
    op->progress = shm_progress;
    phase_next(op, 0);
    me->src = (struct shm_desc){0};
    me->res = (struct shm_desc){0};
    weft_status_t st = WEFT_OK;
    size_t in_bytes = 0;
    bool copy = false, cma = false;
    switch (kind) {
    case WEFT_SHM_BARRIER:
        break;
    case WEFT_SHM_ALLREDUCE: {
        /* in place, a shareable buffer is read in place: a peer reads only the blocks it
         * sums, which this rank overwrites only once every sum is done (phase 1), and which
         * a pushing peer overwrites only tile by tile after reading them; so is a private
         * one read by CMA. A shareable output is published whole: where every rank's is,
         * the owners write their sums into every output (push, one phase); else each rank
         * reads the others' blocks from their owners' results. */
        in_bytes = op->count * es;
        size_t res_bytes = c->len[s->me] * es;
        char *res = op->out + c->off[s->me] * es;
        cma = via_cma(s, op->in, in_bytes);
        copy = !cma && unshared(op->in, in_bytes);
        const bool res_cma = via_cma(s, op->out, in_bytes);
        s->res_staged = !res_cma && unshared(op->out, in_bytes);
        me->whole = !res_cma && !s->res_staged;
        s->res_at = copy ? in_bytes : 0;
        st = stage_need(s, s->res_at + (s->res_staged ? res_bytes : 0));
        if (st == WEFT_OK)
            st = publish(s, op->in, in_bytes, 0, copy, cma, &me->src);
        if (st == WEFT_OK && me->whole)
            st = publish(s, op->out, in_bytes, 0, false, false, &me->res);
        else if (st == WEFT_OK)
            st = s->res_staged ? publish(s, NULL, res_bytes, s->res_at, false, false, &me->res)
                               : publish(s, res, res_bytes, 0, false, res_cma, &me->res);
        break;
    }
    case WEFT_SHM_ALLGATHER:
        in_bytes = c->len[s->me] * es;
        cma = via_cma(s, op->in, in_bytes);
        copy = !cma && unshared(op->in, in_bytes);
        st = stage_need(s, copy ? in_bytes : 0);
        if (st == WEFT_OK)
            st = publish(s, op->in, in_bytes, 0, copy, cma, &me->src);
        break;
    case WEFT_SHM_ALLTOALL:
        for (int r = 0; r < s->n; r++) {
            me->soff[r] = c->soff[r];
            in_bytes += c->slen[r] * es; /* blocks packed in rank order */
        }
        /* in place, the peers would read what this rank is overwriting: always a copy */
        cma = !op->in_place && via_cma(s, op->in, in_bytes);
        copy = !cma && (op->in_place || unshared(op->in, in_bytes));
        st = stage_need(s, copy ? in_bytes : 0);
        if (st == WEFT_OK)
            st = publish(s, op->in, in_bytes, 0, copy, cma, &me->src);
        break;
    case WEFT_SHM_BCAST:
        if (c->rank == op->root) {
            in_bytes = op->count * es;
            cma = via_cma(s, op->out, in_bytes);
            copy = !cma && unshared(op->out, in_bytes);
            st = stage_need(s, copy ? in_bytes : 0);
            if (st == WEFT_OK)
                st = publish(s, op->out, in_bytes, 0, copy, cma, &me->src);
        }
        break;
    }
    if (st != WEFT_OK)
        return fail_here(c, st, "a staging buffer", s->me);
    me->frees = weft_shared_frees();
    raise_flag(s, &me->arrive);
    return WEFT_INPROGRESS;
}

/* A rank that pushes writes into the peers' outputs until it has seen every output (a rank
 * that failed does not tell everyone; one stopped mid-call writes the rest of its step when it
 * resumes, whatever happened meanwhile). So a rank that leaves a failed all-reduce after it
 * published its output for the peers to write (whole, arrive raised) puts a new memfd behind
 * it: what they still write lands in the old one, which nobody reads. A peer that opens the
 * published descriptor afterwards finds another inode behind the number and fails. */
void weft_tp_shm_abort(struct weft_tp_op *op)
{
    struct weft_comm *c = op->comm;
    struct weft_tp_shm *s = c->shm;
    if (op->progress != shm_progress || !s || s->kind != WEFT_SHM_ALLREDUCE || !op->count)
        return;
    struct shm_ctl *me = s->ctl[s->me];
    if (!me->whole || atomic_load(&me->arrive) != s->seq)
        return;
    if (weft_shared_renew(op->out) != 0)
        WEFT_LOG_ERROR("transport", "group %u: the output of failed all-reduce %llu cannot be "
                       "given a new memfd: a peer that still writes into it may change it",
                       c->id, (unsigned long long)s->seq);
}

bool weft_comm_shm_fits(const struct weft_comm *comm, size_t bytes)
{
    size_t max = comm->tp->opts.shm_max;
    return comm->shm_state == SHM_ON && (comm->shm->cma || max == 0 || bytes <= max);
}

bool weft_comm_uses_shm(const struct weft_comm *comm)
{
    return comm && comm->shm_state == SHM_ON;
}

bool weft_comm_shm_pushed(const struct weft_comm *comm)
{
    return weft_comm_uses_shm(comm) && comm->shm->push;
}

bool weft_comm_uses_cma(const struct weft_comm *comm)
{
    return weft_comm_uses_shm(comm) && comm->shm->cma;
}

bool weft_transport_cma_allowed(void)
{
    static volatile int probe = 42;
    (void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    const pid_t parent = getpid(), child = fork();
    if (child == 0) {
        int got = 0;
        struct iovec l = {&got, sizeof(got)}, r = {(void *)&probe, sizeof(got)};
        _exit(process_vm_readv(parent, &l, 1, &r, 1, 0) == (ssize_t)sizeof(got) && got == 42
                  ? 0
                  : 1);
    }
    int ws = 0;
    return child > 0 && waitpid(child, &ws, 0) == child && WIFEXITED(ws) &&
           WEXITSTATUS(ws) == 0;
}

/* ---- sleeping ---- */

/* Whether the flag the op waits for has moved, or a rank it waits for failed (read only: the
 * next progress takes it). */
static bool shm_ready(const struct weft_tp_op *op)
{
    if (op->retired)
        return true; /* between two steps of work, not waiting */
    const size_t field = op->phase == 0   ? offsetof(struct shm_ctl, arrive)
                         : op->phase == 1 ? offsetof(struct shm_ctl, reduced)
                                          : offsetof(struct shm_ctl, done);
    bool failed = false;
    return first_behind(op->comm->shm, field, &failed) < 0 || failed;
}

bool weft_tp_shm_sleep(struct weft_transport *tp, int64_t deadline)
{
    const struct weft_tp_op *op = NULL;
    int shm_ops = 0, others = 0;
    for (const struct weft_tp_op *a = tp->active; a; a = a->next_active) {
        if (a->progress == shm_progress) {
            op = op ? op : a;
            shm_ops++;
        } else {
            others++;
        }
    }
    if (!op || others)
        return false; /* UCX has work in flight too: its descriptor is the one to sleep on */
    struct shm_ctl *me = op->comm->shm->ctl[op->comm->shm->me];
    /* Yield first: a peer on another core arrives within microseconds, and one waiting for
     * this core gets it; a futex sleep and wake-up cost tens of microseconds each. */
    int64_t t0 = weft_tp_now_ns();
    while (weft_tp_now_ns() - t0 < SHM_YIELD_NS) {
        if (shm_ready(op))
            return true;
        sched_yield();
    }
    uint32_t v = atomic_load(&me->bell);
    if (shm_ready(op))
        return true;
    int64_t left = deadline - weft_tp_now_ns();
    if (left <= 0)
        return true;
    if (left > SHM_SLEEP_NS || shm_ops > 1)
        left = SHM_SLEEP_NS;
    struct timespec ts = {0, (long)left};
    atomic_store(&me->sleeping, 1);
    (void)futex(&me->bell, FUTEX_WAIT, v, &ts); /* woken, timed out, or the bell moved */
    atomic_store(&me->sleeping, 0);
    return true;
}
