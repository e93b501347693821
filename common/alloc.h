/* Allocation: thin wrappers that log nothing (callers know what failed) but can be made to fail
 * on purpose (fault tests), and page-aligned "big" buffers backed by transparent huge pages.
 *
 * On the machines weft is tested on a first touch of a 4 KiB page costs ~14 us; big buffers are
 * therefore mmap'd with MADV_HUGEPAGE, allocated once and reused. */
#ifndef WEFT_COMMON_ALLOC_H
#define WEFT_COMMON_ALLOC_H

#include <stddef.h>
#include <stdint.h>

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
/* Either kind of big buffer (a shareable one is looked up by its address). */
void weft_big_free(void *p, size_t size);

/* A big buffer that other processes of this host may map: zeroed and page-aligned like
 * weft_big_alloc, backed by a memfd (MAP_SHARED) so the transport's shared-memory collectives
 * read it in place from a peer. Huge pages back it only where the kernel gives them to shared
 * memory (transparent_hugepage/shmem_enabled; "never" is common, and then every 4 KiB page
 * costs a fault on first touch): meant for the buffers collectives move, not for weights.
 * Falls back to a private buffer (which collectives copy once) when no memfd can be made
 * (descriptors exhausted). Free with weft_big_free. A forked child shares it. */
void *weft_big_alloc_shared(size_t size);

/* Map len bytes of the file fd (a memfd: this process's or a peer's) shared, on a 2 MiB
 * boundary so huge pages behind it map as such; read-only unless writable. NULL on failure;
 * munmap(p, len) undoes it. */
void *weft_map_shared(int fd, size_t len, int writable);

/* Where [p, p + bytes) lies in a shareable buffer: the memfd, the buffer's id (unique in this
 * process, never reused), its mapped length, the offset of p in it and the memfd's inode (what
 * a peer that opens the descriptor checks: the number may name another file by then). 0 on
 * success, -1 when the range is not inside one. */
struct weft_shared_region {
    int fd;
    uint64_t id;
    size_t len;
    size_t offset;
    uint64_t ino;
};
int weft_shared_find(const void *p, size_t bytes, struct weft_shared_region *out);
/* How many shareable buffers this process has freed or renewed so far (a peer that maps them
 * drops its mappings when this changes). */
uint64_t weft_shared_frees(void);
/* Put a new memfd, with the same contents, behind the shareable buffer that holds p, at the same
 * addresses and under a new id: whatever a peer still writes through a mapping of the old one
 * no longer reaches this process's buffer. 0 on success; -1 when p is in no shareable buffer or
 * the system refused (the old memfd then stays). */
int weft_shared_renew(const void *p);

/* Fault injection: the n-th allocation from now (1 = the next) fails, and every one after it
 * while sticky is set. n <= 0 disables. Counts weft_malloc/calloc/realloc/strdup/big_alloc. */
void weft_alloc_fail_after(long n, int sticky);
/* Number of allocations made through these wrappers so far. */
long weft_alloc_count(void);

#ifdef __cplusplus
}
#endif

#endif
