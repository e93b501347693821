/* Append-only job journal with checksummed lines, replay and compaction by rename. */
#include "coordinator/journal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/utf8.h"
#include "common/files.h"
#include "common/sbuf.h"

#define JOURNAL_NAME "journal"
#define MAX_JOURNAL_BYTES (1ull << 32) /* compaction keeps it far below this */

struct weft_journal {
    char dir[1024];
    char path[1100];
    int fd;
    uint64_t size, base_size;
    size_t skipped;
};

struct weft_journal_compaction {
    int fd;
    const char *path;
    uint64_t size;
};

uint32_t weft_crc32(const void *data, size_t len)
{
    static uint32_t table[256];
    static int ready; /* loop thread only (see journal.h) */
    if (!ready) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
        ready = 1;
    }
    const unsigned char *p = data;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < len; i++)
        c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static weft_status_t write_all(int fd, const char *path, const char *p, size_t len,
                               struct weft_error *err)
{
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return weft_error_set(err, WEFT_ERR_IO, "journal", "%s: write failed: %s", path,
                                  strerror(errno));
        p += n;
        len -= (size_t)n;
    }
    return WEFT_OK;
}

/* "<crc> <json>\n" into b. */
static weft_status_t format_record(const cJSON *record, struct weft_sbuf *b,
                                   struct weft_error *err)
{
    char *json = cJSON_PrintUnformatted(record);
    if (!json)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    size_t n = strlen(json);
    if (n > WEFT_JOURNAL_MAX_RECORD) {
        cJSON_free(json);
        return weft_error_set(err, WEFT_ERR_RANGE, "journal",
                              "record of %zu bytes is over the limit %u", n,
                              WEFT_JOURNAL_MAX_RECORD);
    }
    weft_sbuf_printf(b, "%08x ", weft_crc32(json, n));
    weft_sbuf_append(b, json, n);
    weft_sbuf_append(b, "\n", 1);
    cJSON_free(json);
    return weft_sbuf_ok(b) ? WEFT_OK : weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
}

/* One line (without its '\n'): NULL when damaged. */
static cJSON *parse_line(const char *line, size_t len)
{
    if (len < 10 || len - 9 > WEFT_JOURNAL_MAX_RECORD || line[8] != ' ')
        return NULL;
    char hex[9];
    memcpy(hex, line, 8);
    hex[8] = '\0';
    if (strspn(hex, "0123456789abcdef") != 8)
        return NULL;
    uint32_t want = (uint32_t)strtoul(hex, NULL, 16);
    const char *json = line + 9;
    size_t n = len - 9;
    if (weft_crc32(json, n) != want || !weft_utf8_valid(json, n, NULL))
        return NULL;
    const char *end = NULL;
    cJSON *rec = cJSON_ParseWithLengthOpts(json, n, &end, 0);
    if (rec && (end != json + n || !cJSON_IsObject(rec))) {
        cJSON_Delete(rec);
        return NULL;
    }
    return rec;
}

static weft_status_t replay(struct weft_journal *j, weft_journal_replay_cb cb, void *arg)
{
    char *data;
    size_t len;
    weft_status_t st = weft_files_read(j->path, MAX_JOURNAL_BYTES, &data, &len);
    if (st == WEFT_ERR_NOT_FOUND)
        return WEFT_OK;
    if (st != WEFT_OK)
        return st;
    size_t line_no = 0, good_end = 0, off = 0;
    while (off < len) {
        line_no++;
        const char *nl = memchr(data + off, '\n', len - off);
        if (!nl) {
            WEFT_LOG_WARN("journal", "%s:%zu: torn last record (%zu bytes without an end of "
                                     "line) skipped", j->path, line_no, len - off);
            j->skipped++;
            break;
        }
        size_t n = (size_t)(nl - (data + off));
        cJSON *rec = parse_line(data + off, n);
        if (rec) {
            cb(arg, rec, line_no);
            cJSON_Delete(rec);
        } else {
            WEFT_LOG_WARN("journal", "%s:%zu: damaged record (checksum or JSON) skipped",
                          j->path, line_no);
            j->skipped++;
        }
        off += n + 1;
        good_end = off;
    }
    weft_free(data);
    if (good_end < len) {
        if (ftruncate(j->fd, (off_t)good_end) != 0) {
            WEFT_LOG_ERROR("journal", "%s: cannot cut the torn record off: %s", j->path,
                           strerror(errno));
            return WEFT_ERR_IO;
        }
        len = good_end;
    }
    j->size = j->base_size = len;
    return WEFT_OK;
}

weft_status_t weft_journal_open(const char *dir, weft_journal_replay_cb cb, void *arg,
                                struct weft_journal **journal_p)
{
    weft_status_t st = weft_files_mkdirs(dir, NULL);
    if (st != WEFT_OK)
        return st;
    struct weft_journal *j = weft_calloc(1, sizeof(*j));
    if (!j)
        return WEFT_ERR_NOMEM;
    snprintf(j->dir, sizeof(j->dir), "%s", dir);
    snprintf(j->path, sizeof(j->path), "%s/%s", dir, JOURNAL_NAME);
    j->fd = open(j->path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (j->fd < 0) {
        WEFT_LOG_ERROR("journal", "%s: cannot open: %s", j->path, strerror(errno));
        weft_free(j);
        return WEFT_ERR_IO;
    }
    if ((st = replay(j, cb, arg)) != WEFT_OK) {
        weft_journal_close(j);
        return st;
    }
    *journal_p = j;
    return WEFT_OK;
}

void weft_journal_close(struct weft_journal *j)
{
    if (!j)
        return;
    if (j->fd >= 0)
        close(j->fd);
    weft_free(j);
}

weft_status_t weft_journal_append(struct weft_journal *j, const cJSON *record, bool sync,
                                  struct weft_error *err)
{
    struct weft_sbuf b;
    weft_sbuf_init(&b);
    weft_status_t st = format_record(record, &b, err);
    if (st == WEFT_OK)
        st = write_all(j->fd, j->path, b.data, b.len, err);
    if (st == WEFT_OK && sync && fdatasync(j->fd) != 0)
        st = weft_error_set(err, WEFT_ERR_IO, "journal", "%s: fdatasync failed: %s", j->path,
                            strerror(errno));
    if (st == WEFT_OK)
        j->size += b.len;
    weft_sbuf_cleanup(&b);
    return st;
}

weft_status_t weft_journal_compact_add(struct weft_journal_compaction *c, const cJSON *record)
{
    struct weft_sbuf b;
    weft_sbuf_init(&b);
    weft_status_t st = format_record(record, &b, NULL);
    if (st == WEFT_OK)
        st = write_all(c->fd, c->path, b.data, b.len, NULL);
    if (st == WEFT_OK)
        c->size += b.len;
    weft_sbuf_cleanup(&b);
    return st;
}

weft_status_t weft_journal_compact(struct weft_journal *j, weft_journal_fill_cb fill, void *arg)
{
    char tmp[1200];
    snprintf(tmp, sizeof(tmp), "%s.new", j->path);
    struct weft_journal_compaction c = {.path = tmp};
    c.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (c.fd < 0) {
        WEFT_LOG_ERROR("journal", "%s: cannot create: %s", tmp, strerror(errno));
        return WEFT_ERR_IO;
    }
    weft_status_t st = fill(arg, &c);
    if (st == WEFT_OK && fsync(c.fd) != 0) {
        WEFT_LOG_ERROR("journal", "%s: fsync failed: %s", tmp, strerror(errno));
        st = WEFT_ERR_IO;
    }
    close(c.fd);
    if (st == WEFT_OK && rename(tmp, j->path) != 0) {
        WEFT_LOG_ERROR("journal", "%s: cannot rename into place: %s", j->path, strerror(errno));
        st = WEFT_ERR_IO;
    }
    if (st != WEFT_OK) {
        (void)unlink(tmp);
        return st;
    }
    if ((st = weft_files_sync_dir(j->dir)) != WEFT_OK)
        return st;
    int fd = open(j->path, O_RDWR | O_APPEND | O_CLOEXEC);
    if (fd < 0) {
        WEFT_LOG_ERROR("journal", "%s: cannot reopen: %s", j->path, strerror(errno));
        return WEFT_ERR_IO;
    }
    close(j->fd);
    j->fd = fd;
    uint64_t before = j->size;
    j->size = j->base_size = c.size;
    WEFT_LOG_DEBUG("journal", "compacted %s: %llu -> %llu bytes", j->path,
                   (unsigned long long)before, (unsigned long long)c.size);
    return WEFT_OK;
}

uint64_t weft_journal_size(const struct weft_journal *j)
{
    return j->size;
}

uint64_t weft_journal_base_size(const struct weft_journal *j)
{
    return j->base_size;
}

size_t weft_journal_skipped(const struct weft_journal *j)
{
    return j->skipped;
}
