/* Allocation: thin wrappers that log nothing (callers know what failed) but can be made to fail
 * on purpose (fault tests), and page-aligned "big" buffers backed by transparent huge pages.
 *
 * On the machines weft is tested on a first touch of a 4 KiB page costs ~14 us; big buffers are
 * therefore mmap'd with MADV_HUGEPAGE, allocated once and reused. */
#ifndef WEFT_COMMON_ALLOC_H
#define WEFT_COMMON_ALLOC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

void *weft_malloc(size_t size);
void *weft_calloc(size_t n, size_t size);
void *weft_realloc(void *p, size_t size);
void weft_free(void *p);
char *weft_strdup(const char *s);

/* Page-aligned zeroed buffer of at least size bytes with MADV_HUGEPAGE; NULL on failure. */
void *weft_big_alloc(size_t size);
void weft_big_free(void *p, size_t size);

/* Fault injection: the n-th allocation from now (1 = the next) fails, and every one after it
 * while sticky is set. n <= 0 disables. Counts weft_malloc/calloc/realloc/strdup/big_alloc. */
void weft_alloc_fail_after(long n, int sticky);
/* Number of allocations made through these wrappers so far. */
long weft_alloc_count(void);

#ifdef __cplusplus
}
#endif

#endif
