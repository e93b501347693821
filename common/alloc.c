/* Allocation wrappers with fault injection. */
#include "common/alloc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static atomic_long alloc_count;
static atomic_long fail_at = -1;
static atomic_int fail_sticky;

static int should_fail(void)
{
    long n = atomic_fetch_add(&alloc_count, 1) + 1;
    long at = atomic_load(&fail_at);
    if (at <= 0)
        return 0;
    return n == at || (atomic_load(&fail_sticky) && n > at);
}

void weft_alloc_fail_after(long n, int sticky)
{
    atomic_store(&fail_sticky, sticky);
    atomic_store(&fail_at, n > 0 ? atomic_load(&alloc_count) + n : -1);
}

long weft_alloc_count(void)
{
    return atomic_load(&alloc_count);
}

void *weft_malloc(size_t size)
{
    return should_fail() ? NULL : malloc(size ? size : 1);
}

void *weft_calloc(size_t n, size_t size)
{
    return should_fail() ? NULL : calloc(n ? n : 1, size ? size : 1);
}

void *weft_realloc(void *p, size_t size)
{
    return should_fail() ? NULL : realloc(p, size ? size : 1);
}

void weft_free(void *p)
{
    free(p);
}

char *weft_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = weft_malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

#define HUGE_SZ ((size_t)2 << 20)

static size_t big_round(size_t size)
{
    size_t page = 4096;
    size = size ? size : 1;
    return size >= HUGE_SZ ? (size + HUGE_SZ - 1) & ~(HUGE_SZ - 1) : (size + page - 1) & ~(page - 1);
}

/* A mapping of len bytes (prot, flags, fd as mmap's) that starts on a 2 MiB boundary, so every
 * part of it can be backed by a huge page: one huge page more is reserved, the mapping placed
 * inside, the rest of the reservation trimmed. NULL when mmap fails. */
static void *map_aligned(size_t len, int prot, int flags, int fd)
{
    char *raw = mmap(NULL, len + HUGE_SZ, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    char *at = (char *)(((size_t)raw + HUGE_SZ - 1) & ~(HUGE_SZ - 1));
    if (mmap(at, len, prot, flags | MAP_FIXED, fd, 0) == MAP_FAILED) {
        munmap(raw, len + HUGE_SZ);
        return NULL;
    }
    if (at > raw)
        munmap(raw, (size_t)(at - raw));
    size_t tail = (size_t)(raw + len + HUGE_SZ - (at + len));
    if (tail)
        munmap(at + len, tail);
    return at;
}

void *weft_big_alloc(size_t size)
{
    if (should_fail())
        return NULL;
    size_t len = big_round(size);
    if (len < HUGE_SZ) {
        void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        return p == MAP_FAILED ? NULL : p;
    }
    void *p = map_aligned(len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1);
    if (p)
        madvise(p, len, MADV_HUGEPAGE);
    return p;
}

/* ---- shareable buffers: a registry of the memfds behind them ---- */

struct shared_buf {
    char *base;
    size_t len;
    int fd;
    uint64_t id;
    uint64_t ino; /* the memfd's inode: names the file, where a descriptor number may be reused */
};

static uint64_t inode_of(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shared_buf *shared;
static size_t n_shared, cap_shared;
static uint64_t shared_next_id = 1;
static atomic_ullong shared_freed;

/* A memfd of len bytes, or -1. */
static int memfd_of(size_t len)
{
    int fd = memfd_create("weft-shared", MFD_CLOEXEC);
    if (fd >= 0 && ftruncate(fd, (off_t)len) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* The registered buffer that holds [c, c + bytes), or NULL; under shared_lock. */
static struct shared_buf *holder(const char *c, size_t bytes)
{
    for (size_t i = 0; i < n_shared; i++) {
        struct shared_buf *b = &shared[i];
        if (c >= b->base && c <= b->base + b->len && bytes <= (size_t)(b->base + b->len - c))
            return b;
    }
    return NULL;
}

void *weft_map_shared(int fd, size_t len, int writable)
{
    return map_aligned(len, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd);
}

void *weft_big_alloc_shared(size_t size)
{
    size_t len = big_round(size);
    if (should_fail())
        return NULL;
    int fd = memfd_of(len);
    if (fd < 0)
        return weft_big_alloc(size); /* descriptors exhausted: a private buffer still works */
    char *p = weft_map_shared(fd, len, 1);
    pthread_mutex_lock(&shared_lock);
    if (p && n_shared == cap_shared) {
        size_t cap = cap_shared ? cap_shared * 2 : 16;
        struct shared_buf *nb = realloc(shared, cap * sizeof(*nb));
        if (nb) {
            shared = nb;
            cap_shared = cap;
        }
    }
    if (p && n_shared < cap_shared) {
        shared[n_shared++] = (struct shared_buf){p, len, fd, shared_next_id++, inode_of(fd)};
        pthread_mutex_unlock(&shared_lock);
        if (len >= HUGE_SZ)
            madvise(p, len, MADV_HUGEPAGE);
        return p;
    }
    pthread_mutex_unlock(&shared_lock);
    if (p)
        munmap(p, len);
    close(fd);
    return NULL;
}

int weft_shared_find(const void *p, size_t bytes, struct weft_shared_region *out)
{
    const char *c = p;
    pthread_mutex_lock(&shared_lock);
    const struct shared_buf *b = holder(c, bytes);
    if (b)
        *out = (struct weft_shared_region){b->fd, b->id, b->len, (size_t)(c - b->base), b->ino};
    pthread_mutex_unlock(&shared_lock);
    return b ? 0 : -1;
}

int weft_shared_renew(const void *p)
{
    int rc = -1;
    pthread_mutex_lock(&shared_lock);
    struct shared_buf *b = holder(p, 1);
    int fd = b ? memfd_of(b->len) : -1;
    char *tmp = fd >= 0 ? mmap(NULL, b->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                        : MAP_FAILED;
    if (tmp != MAP_FAILED) {
        memcpy(tmp, b->base, b->len);
        /* the new file takes the old one's place at the same addresses, in one call */
        if (mmap(b->base, b->len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) !=
            MAP_FAILED) {
            close(b->fd);
            b->fd = fd;
            b->id = shared_next_id++;
            b->ino = inode_of(fd);
            fd = -1;
            rc = 0;
            atomic_fetch_add(&shared_freed, 1); /* peers drop their mappings of the old */
            if (b->len >= HUGE_SZ)
                madvise(b->base, b->len, MADV_HUGEPAGE);
        }
        munmap(tmp, b->len);
    }
    if (fd >= 0)
        close(fd);
    pthread_mutex_unlock(&shared_lock);
    return rc;
}

uint64_t weft_shared_frees(void)
{
    return atomic_load(&shared_freed);
}

void weft_big_free(void *p, size_t size)
{
    if (!p)
        return;
    int fd = -1;
    pthread_mutex_lock(&shared_lock);
    for (size_t i = 0; i < n_shared; i++) {
        if (shared[i].base == p) {
            fd = shared[i].fd;
            shared[i] = shared[--n_shared];
            atomic_fetch_add(&shared_freed, 1);
            break;
        }
    }
    pthread_mutex_unlock(&shared_lock);
    munmap(p, big_round(size));
    if (fd >= 0)
        close(fd);
}
