/* File-system helpers: mkdir -p, durable atomic writes, folder sync and removal. */
#include "common/files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/error.h"
#include "common/log.h"

weft_status_t weft_files_mkdirs(const char *path, struct weft_error *err)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof(buf))
        return weft_error_set(err, WEFT_ERR_INVALID, "files", "'%s': not a usable folder path",
                              path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char c = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0700) != 0 && errno != EEXIST)
            return weft_error_set(err, WEFT_ERR_IO, "files", "%s: cannot create the folder: %s",
                                  buf, strerror(errno));
        buf[i] = c;
    }
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return weft_error_set(err, WEFT_ERR_IO, "files", "%s: not a folder", path);
    return WEFT_OK;
}

weft_status_t weft_files_sync_file(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        WEFT_LOG_ERROR("files", "%s: cannot sync: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return WEFT_ERR_IO;
    }
    close(fd);
    return WEFT_OK;
}

static weft_status_t sync_dir(const char *path, struct weft_error *err)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        weft_status_t st = weft_error_set(err, WEFT_ERR_IO, "files",
                                          "%s: cannot sync the folder: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return st;
    }
    close(fd);
    return WEFT_OK;
}

weft_status_t weft_files_sync_dir(const char *path)
{
    return sync_dir(path, NULL);
}

weft_status_t weft_files_remove_dir(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return errno == ENOENT ? WEFT_OK : WEFT_ERR_IO;
    struct dirent *e;
    weft_status_t st = WEFT_OK;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char p[4400];
        snprintf(p, sizeof(p), "%s/%s", path, e->d_name);
        if (unlink(p) != 0 && errno != ENOENT) {
            WEFT_LOG_WARN("files", "%s: cannot remove: %s", p, strerror(errno));
            st = WEFT_ERR_IO;
        }
    }
    closedir(d);
    if (rmdir(path) != 0 && errno != ENOENT) {
        WEFT_LOG_WARN("files", "%s: cannot remove the folder: %s", path, strerror(errno));
        st = WEFT_ERR_IO;
    }
    return st;
}

int weft_files_open_regular(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return -1;
    struct stat sb;
    int e = 0;
    if (fstat(fd, &sb) != 0 || (S_ISREG(sb.st_mode) &&
                                fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0))
        e = errno;
    else if (!S_ISREG(sb.st_mode))
        e = S_ISDIR(sb.st_mode) ? EISDIR : ENXIO;
    if (e) {
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

FILE *weft_files_fopen_regular(const char *path)
{
    int fd = weft_files_open_regular(path);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        const int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

const char *weft_files_open_error(int e)
{
    return e == ENXIO ? "not a regular file" : e == EISDIR ? "a folder, not a file" : strerror(e);
}

weft_status_t weft_files_read(const char *path, size_t max_bytes, char **data_p, size_t *len_p)
{
    int fd = weft_files_open_regular(path);
    if (fd < 0) {
        if (errno == ENOENT)
            return WEFT_ERR_NOT_FOUND;
        WEFT_LOG_ERROR("files", "%s: cannot open: %s", path, weft_files_open_error(errno));
        return WEFT_ERR_IO;
    }
    weft_status_t st = WEFT_OK;
    struct stat sb;
    char *buf = NULL;
    if (fstat(fd, &sb) != 0) {
        WEFT_LOG_ERROR("files", "%s: cannot stat: %s", path, strerror(errno));
        st = WEFT_ERR_IO;
        goto out;
    }
    if ((uint64_t)sb.st_size > max_bytes) {
        WEFT_LOG_ERROR("files", "%s: %lld bytes, over the limit of %zu", path,
                       (long long)sb.st_size, max_bytes);
        st = WEFT_ERR_RANGE;
        goto out;
    }
    size_t size = (size_t)sb.st_size, got = 0;
    if (!(buf = weft_malloc(size + 1))) {
        st = WEFT_ERR_NOMEM;
        goto out;
    }
    while (got < size) {
        ssize_t n = read(fd, buf + got, size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            WEFT_LOG_ERROR("files", "%s: read failed: %s", path,
                           n < 0 ? strerror(errno) : "file shrank while read");
            st = WEFT_ERR_IO;
            goto out;
        }
        got += (size_t)n;
    }
    buf[size] = '\0';
    *data_p = buf;
    *len_p = size;
    buf = NULL;
out:
    weft_free(buf);
    close(fd);
    return st;
}

static weft_status_t write_all(int fd, const char *path, const void *data, size_t len,
                               struct weft_error *err)
{
    const char *p = data;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return weft_error_set(err, WEFT_ERR_IO, "files", "%s: write failed: %s", path,
                                  strerror(errno));
        p += n;
        len -= (size_t)n;
    }
    return WEFT_OK;
}

weft_status_t weft_files_save(const char *path, const void *data, size_t len,
                              struct weft_error *err)
{
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return weft_error_set(err, WEFT_ERR_IO, "files", "%s: cannot create: %s", tmp,
                              strerror(errno));
    weft_status_t st = write_all(fd, tmp, data, len, err);
    if (st == WEFT_OK && fsync(fd) != 0)
        st = weft_error_set(err, WEFT_ERR_IO, "files", "%s: fsync failed: %s", tmp,
                            strerror(errno));
    if (close(fd) != 0 && st == WEFT_OK)
        st = weft_error_set(err, WEFT_ERR_IO, "files", "%s: close failed: %s", tmp,
                            strerror(errno));
    if (st == WEFT_OK && rename(tmp, path) != 0)
        st = weft_error_set(err, WEFT_ERR_IO, "files", "%s: cannot rename into place: %s", path,
                            strerror(errno));
    if (st != WEFT_OK) {
        (void)unlink(tmp);
        return st;
    }
    /* the new name must survive a crash as well as the bytes */
    char *slash = strrchr(tmp, '/');
    if (slash == tmp)
        return sync_dir("/", err);
    if (!slash)
        return sync_dir(".", err);
    *slash = '\0';
    return sync_dir(tmp, err);
}

weft_status_t weft_files_write(const char *path, const void *data, size_t len)
{
    return weft_files_save(path, data, len, NULL);
}

