/* coordinator/journal.c: records come back in order; a torn last record is skipped and cut off
 * so appends continue on a line boundary; a damaged record in the middle is skipped alone;
 * compaction keeps exactly what it is given. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "coordinator/journal.h"
#include "test.h"

struct seen {
    int n;
    int values[64];
};

static void collect(void *arg, const cJSON *rec, size_t line)
{
    (void)line;
    struct seen *s = arg;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(rec, "v");
    CHECK(cJSON_IsNumber(v));
    CHECK(s->n < 64);
    s->values[s->n++] = (int)v->valuedouble;
}

static void append(struct weft_journal *j, int v)
{
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "v", v);
    cJSON_AddStringToObject(r, "pad", "text with \"quotes\" and\nnewline");
    CHECK_OK(weft_journal_append(j, r, v % 2 == 0, TERR));
    cJSON_Delete(r);
}

static struct seen reopen(const char *dir, struct weft_journal **j_p)
{
    struct seen s = {0};
    CHECK_OK(weft_journal_open(dir, collect, &s, j_p));
    return s;
}

static off_t file_size(const char *path)
{
    struct stat sb;
    CHECK(stat(path, &sb) == 0);
    return sb.st_size;
}

static weft_status_t keep_odd(void *arg, struct weft_journal_compaction *c)
{
    (void)arg;
    for (int v = 1; v < 10; v += 2) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddNumberToObject(r, "v", v);
        weft_status_t st = weft_journal_compact_add(c, r);
        cJSON_Delete(r);
        if (st != WEFT_OK)
            return st;
    }
    return WEFT_OK;
}

int main(void)
{
    test_quiet();
    char dir[] = "/tmp/weft-journal-XXXXXX";
    CHECK(mkdtemp(dir));
    char sub[256], path[300];
    snprintf(sub, sizeof(sub), "%s/a/b", dir); /* created on open */
    snprintf(path, sizeof(path), "%s/journal", sub);

    struct weft_journal *j;
    struct seen s = reopen(sub, &j);
    CHECK_EQ(s.n, 0);
    for (int v = 0; v < 5; v++)
        append(j, v);
    CHECK_EQ(weft_journal_size(j), file_size(path));
    weft_journal_close(j);
    s = reopen(sub, &j);
    CHECK_EQ(s.n, 5);
    for (int v = 0; v < 5; v++)
        CHECK_EQ(s.values[v], v);
    CHECK_EQ(weft_journal_skipped(j), 0);
    weft_journal_close(j);

    /* a torn last record (a crash in the middle of a write) */
    off_t full = file_size(path);
    CHECK(truncate(path, full - 7) == 0);
    s = reopen(sub, &j);
    CHECK_EQ(s.n, 4);
    CHECK_EQ(weft_journal_skipped(j), 1);
    append(j, 5); /* on a line boundary again */
    weft_journal_close(j);
    s = reopen(sub, &j);
    CHECK_EQ(s.n, 5);
    CHECK_EQ(s.values[4], 5);
    CHECK_EQ(weft_journal_skipped(j), 0);
    weft_journal_close(j);

    /* a flipped byte in the second record: only it is lost */
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    char buf[4096];
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    CHECK(n > 0);
    buf[n] = '\0';
    char *second = strchr(buf, '\n') + 1;
    char *v = strstr(second, "\"v\":1");
    CHECK(v);
    CHECK(pwrite(fd, "7", 1, (v - buf) + 4) == 1);
    /* and a line that is not a record at all */
    CHECK(pwrite(fd, "garbage line\n", 13, n) == 13);
    close(fd);
    s = reopen(sub, &j);
    CHECK_EQ(s.n, 4);
    CHECK_EQ(s.values[0], 0);
    CHECK_EQ(s.values[1], 2);
    CHECK_EQ(weft_journal_skipped(j), 2);

    /* compaction: exactly the records given, and appends after it */
    CHECK_OK(weft_journal_compact(j, keep_odd, NULL));
    CHECK_EQ(weft_journal_size(j), file_size(path));
    CHECK_EQ(weft_journal_base_size(j), weft_journal_size(j));
    append(j, 11);
    weft_journal_close(j);
    s = reopen(sub, &j);
    CHECK_EQ(s.n, 6);
    for (int i = 0; i < 5; i++)
        CHECK_EQ(s.values[i], 2 * i + 1);
    CHECK_EQ(s.values[5], 11);
    weft_journal_close(j);

    /* crc32 as zlib computes it */
    CHECK(weft_crc32("123456789", 9) == 0xCBF43926u);

    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    printf("ok\n");
    return 0;
}
