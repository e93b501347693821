/* Shareable buffers (common/alloc.h): the registry finds a range inside one, and a renewed
 * buffer keeps its addresses and contents while what a peer writes through a mapping of the old
 * memfd no longer reaches it (what the shared-memory all-reduce relies on after a failed call,
 * transport/shm.c). The "peer" here is this process mapping its own descriptor through
 * /proc/self/fd, as a peer does through /proc/PID/fd. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "test.h"

static char *map_fd(int fd, size_t len)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    int f = open(path, O_RDWR | O_CLOEXEC);
    CHECK(f >= 0);
    char *p = weft_map_shared(f, len, 1);
    close(f);
    CHECK(p);
    return p;
}

int main(void)
{
    const size_t bytes = (size_t)3 << 20; /* above a huge page: the mapping is 2 MiB aligned */
    char *buf = weft_big_alloc_shared(bytes);
    CHECK(buf);
    for (size_t i = 0; i < bytes; i++)
        buf[i] = (char)(i * 7);

    struct weft_shared_region a, b;
    CHECK(weft_shared_find(buf + 100, 1000, &a) == 0);
    CHECK(a.offset == 100 && a.len >= bytes && a.ino != 0);
    struct stat st;
    CHECK(fstat(a.fd, &st) == 0 && (uint64_t)st.st_ino == a.ino);
    CHECK(weft_shared_find(buf + a.len - 10, 11, &b) != 0); /* runs past its end */
    char local[16];
    CHECK(weft_shared_find(local, sizeof(local), &b) != 0); /* not shareable */

    char *peer = map_fd(a.fd, a.len); /* a peer's writable mapping */
    peer[5] = 'x';
    CHECK(buf[5] == 'x'); /* the same pages */
    buf[5] = (char)(5 * 7);

    const uint64_t frees = weft_shared_frees();
    CHECK(weft_shared_renew(buf + 12345) == 0);
    CHECK(weft_shared_frees() == frees + 1); /* peers drop their cached mappings */
    for (size_t i = 0; i < bytes; i++)
        if (buf[i] != (char)(i * 7)) {
            fprintf(stderr, "byte %zu changed by the renewal\n", i);
            CHECK(0);
        }
    CHECK(weft_shared_find(buf, bytes, &b) == 0);
    CHECK(b.id != a.id && b.ino != a.ino && b.offset == 0 && b.len == a.len);

    /* the old mapping reaches the old memfd only */
    memset(peer, 0x55, a.len);
    CHECK(buf[0] == 0 && buf[bytes - 1] == (char)((bytes - 1) * 7));
    munmap(peer, a.len);

    /* the new memfd is the buffer: a fresh mapping of it sees and changes it */
    char *peer2 = map_fd(b.fd, b.len);
    CHECK(peer2[1] == 7);
    peer2[1] = 'y';
    CHECK(buf[1] == 'y');
    munmap(peer2, b.len);

    CHECK(weft_shared_renew(local) != 0); /* nothing to renew */
    weft_big_free(buf, bytes);
    CHECK(weft_shared_find(buf, 1, &b) != 0);
    printf("ok\n");
    return 0;
}
