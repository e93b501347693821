/* Allocation wrappers with fault injection. */
#include "common/alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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

void *weft_big_alloc(size_t size)
{
    if (should_fail())
        return NULL;
    size_t len = big_round(size);
    if (len < HUGE_SZ) {
        void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        return p == MAP_FAILED ? NULL : p;
    }
    /* Over-map by one huge page and trim, so the buffer starts on a 2 MiB boundary and every
     * part of it can be backed by a huge page. */
    char *raw = mmap(NULL, len + HUGE_SZ, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    char *p = (char *)(((size_t)raw + HUGE_SZ - 1) & ~(HUGE_SZ - 1));
    if (p > raw)
        munmap(raw, (size_t)(p - raw));
    size_t tail = (size_t)(raw + len + HUGE_SZ - (p + len));
    if (tail)
        munmap(p + len, tail);
    madvise(p, len, MADV_HUGEPAGE);
    return p;
}

void weft_big_free(void *p, size_t size)
{
    if (p)
        munmap(p, big_round(size));
}
