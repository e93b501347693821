/* Reading what a user names: a FIFO, a device or a folder where a file is expected is refused
 * at once (open(2) of a FIFO blocks until a writer comes: `weft generate` once hung on a FIFO
 * config.json, `--config DIR` read a folder as an empty file), and a model's JSON files are read
 * as RFC 8259 writes them, a key given twice refused (cJSON would take the first, Python's json
 * the last). A watchdog fails the test instead of hanging. */
#include <cJSON.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/files.h"
#include "model/checkpoint.h"
#include "test.h"

static char dir[] = "/tmp/weft_test_files_XXXXXX";

static void write_text(const char *name, const char *text, char *path, size_t len)
{
    snprintf(path, len, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(text, 1, strlen(text), f) == strlen(text));
    CHECK(fclose(f) == 0);
}

static void json_refused(const char *text, const char *want)
{
    char path[300];
    write_text("c.json", text, path, sizeof(path));
    cJSON *j = NULL;
    struct weft_error e = WEFT_ERROR_INIT;
    CHECK(weft_json_read_file(path, 1 << 20, &j, &e) == WEFT_ERR_FORMAT && !j);
    if (!strstr(weft_error_text(&e), want)) {
        fprintf(stderr, "\"%s\" lacks \"%s\"\n", weft_error_text(&e), want);
        CHECK(0);
    }
}

int main(void)
{
    test_quiet();
    alarm(30); /* a blocking open would hang here: fail instead */
    CHECK(mkdtemp(dir));
    char fifo[300], file[300], path[300];
    snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
    CHECK(mkfifo(fifo, 0600) == 0);
    write_text("file", "{\"a\": 1}", file, sizeof(file));

    int fd = weft_files_open_regular(file);
    CHECK(fd >= 0);
    char buf[16];
    CHECK(read(fd, buf, sizeof(buf)) == 8); /* blocking again, reads the file */
    close(fd);
    CHECK(weft_files_open_regular(fifo) < 0 && errno == ENXIO);
    CHECK(strcmp(weft_files_open_error(ENXIO), "not a regular file") == 0);
    CHECK(weft_files_open_regular(dir) < 0 && errno == EISDIR);
    CHECK(weft_files_open_regular("/dev/null") < 0 && errno == ENXIO);
    snprintf(path, sizeof(path), "%s/none", dir);
    CHECK(weft_files_open_regular(path) < 0 && errno == ENOENT);
    FILE *f = weft_files_fopen_regular(file);
    CHECK(f && fgets(buf, sizeof(buf), f) && strcmp(buf, "{\"a\": 1}") == 0);
    fclose(f);
    CHECK(!weft_files_fopen_regular(fifo) && errno == ENXIO);

    char *data;
    size_t len;
    CHECK(weft_files_read(fifo, 100, &data, &len) == WEFT_ERR_IO);
    CHECK(weft_files_read(dir, 100, &data, &len) == WEFT_ERR_IO);
    CHECK(weft_files_read(path, 100, &data, &len) == WEFT_ERR_NOT_FOUND);
    CHECK_OK(weft_files_read(file, 100, &data, &len));
    CHECK(len == 8);
    weft_free(data);

    /* a model's JSON file (config.json, model_index.json) */
    cJSON *j = NULL;
    struct weft_error e = WEFT_ERROR_INIT;
    CHECK(weft_json_read_file(fifo, 1 << 20, &j, &e) == WEFT_ERR_IO);
    CHECK(strstr(weft_error_text(&e), "not a regular file"));
    CHECK_OK(weft_json_read_file(file, 1 << 20, &j, TERR));
    cJSON_Delete(j);
    json_refused("{\"num_layers\": 4, \"num_layers\": 9}",
                 "the key \"num_layers\" is given twice in one object");
    json_refused("{\"a\": {\"b\": 1, \"c\": [{\"x\": 1, \"x\": 2}]}}", "\"x\" is given twice");
    json_refused("\xEF\xBB\xBF{\"a\": 1}", "byte-order mark at byte 0");
    json_refused("{\"a\": \"x\x01\"}", "raw control character (0x01)");
    json_refused("{\"a\": 1} {}", "data after the JSON value");
    /* the same key in different objects is fine */
    write_text("ok.json", "{\"a\": {\"k\": 1}, \"b\": {\"k\": 2}, \"k\": 3}", path, sizeof(path));
    CHECK_OK(weft_json_read_file(path, 1 << 20, &j, TERR));
    cJSON_Delete(j);

    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    return 0;
}
