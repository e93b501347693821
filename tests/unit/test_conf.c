/* conf/: defaults, every error kind with file:line, precedence, sizes, example file in sync. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf/conf.h"
#include "test.h"

static struct weft_conf conf;

static weft_status_t apply(const char *text)
{
    weft_conf_defaults(&conf);
    return weft_conf_apply_string(&conf, text, "t.ini");
}

static void test_defaults(void)
{
    weft_conf_defaults(&conf);
    CHECK_EQ(conf.log.level, WEFT_LOG_LEVEL_INFO);
    CHECK_EQ(conf.parallel.tp_degree, 1);
    CHECK_EQ(conf.parallel.ring_anything, 0);
    CHECK(strcmp(conf.model.path, "") == 0);
    CHECK(strcmp(conf.worker.device, "cpu") == 0);
}

static void test_values(void)
{
    CHECK_OK(apply("# comment\n; comment\n[log]\nlevel = debug\n\n[parallel]\n"
                   "  tp_degree = 4 ; inline\n\tulysses_anything = yes\n[model]\npath = /m\n"));
    CHECK_EQ(conf.log.level, WEFT_LOG_LEVEL_DEBUG);
    CHECK_EQ(conf.parallel.tp_degree, 4);
    CHECK_EQ(conf.parallel.ulysses_anything, 1);
    CHECK(strcmp(conf.model.path, "/m") == 0);
}

static void test_errors(void)
{
    CHECK_FAILS_LOGGED(apply("[log]\nlevel = info\n[nosuch]\nx = 1\n"), WEFT_ERR_CONFIG, "t.ini:3",
                       "unknown section [nosuch]");
    CHECK_FAILS_LOGGED(apply("[log]\n\nlevle = info\n"), WEFT_ERR_CONFIG, "t.ini:3",
                       "unknown key 'levle'", "[log]");
    CHECK_FAILS_LOGGED(apply("[parallel]\ntp_degree = four\n"), WEFT_ERR_CONFIG, "t.ini:2",
                       "'four'", "not an integer");
    CHECK_FAILS_LOGGED(apply("[parallel]\ntp_degree = 12x\n"), WEFT_ERR_CONFIG, "t.ini:2", "'12x'");
    CHECK_FAILS_LOGGED(apply("[parallel]\ntp_degree = 0\n"), WEFT_ERR_CONFIG, "t.ini:2",
                       "out of range [1, 1024]");
    CHECK_FAILS_LOGGED(apply("[parallel]\ntp_degree = 99999999999999999999\n"), WEFT_ERR_CONFIG,
                       "t.ini:2", "not an integer");
    CHECK_FAILS_LOGGED(apply("[parallel]\ntp_degree = 2\n\ntp_degree = 3\n"), WEFT_ERR_CONFIG,
                       "t.ini:4", "duplicate key 'tp_degree'", "line 2");
    CHECK_FAILS_LOGGED(apply("[parallel]\nring_anything = maybe\n"), WEFT_ERR_CONFIG, "t.ini:2",
                       "'maybe'", "true or false");
    CHECK_FAILS_LOGGED(apply("[log]\nlevel = loud\n"), WEFT_ERR_CONFIG, "t.ini:2", "'loud'",
                       "error, warn, info, debug");
    /* [worker] device: cpu, cuda:N, auto, cpu-devmem */
    CHECK_FAILS_LOGGED(apply("[worker]\n\ndevice = gpu0\n"), WEFT_ERR_CONFIG, "t.ini:3",
                       "[worker] device = 'gpu0'", "cpu, cuda:N, auto");
    CHECK_FAILS_LOGGED(apply("[worker]\ndevice = cuda:x1\n"), WEFT_ERR_CONFIG, "t.ini:2",
                       "'cuda:x1'", "from 0 to 1023");
    CHECK_FAILS_LOGGED(apply("[worker]\ndevice = cuda:1024\n"), WEFT_ERR_CONFIG, "t.ini:2",
                       "'cuda:1024'");
    CHECK_OK(apply("[worker]\ndevice = cuda:3\n"));
    CHECK(strcmp(conf.worker.device, "cuda:3") == 0);
    CHECK_OK(apply("[worker]\ndevice = auto\n"));
    CHECK_OK(apply("[worker]\ndevice = cpu-devmem\n"));
    CHECK_FAILS_LOGGED(apply("[log]\nlevel info\n"), WEFT_ERR_CONFIG, "t.ini:2", "syntax error",
                       "key = value");
    CHECK_FAILS_LOGGED(apply("[log\nlevel = info\n"), WEFT_ERR_CONFIG, "t.ini:1", "syntax error");
    CHECK_FAILS_LOGGED(apply("level = info\n"), WEFT_ERR_CONFIG, "t.ini:1", "outside any section");
    char longline[6000];
    memset(longline, 'x', sizeof(longline));
    memcpy(longline, "[model]\npath = ", 15);
    strcpy(longline + 5990, "\n");
    CHECK_FAILS_LOGGED(apply(longline), WEFT_ERR_CONFIG, "t.ini:2", "longer than 4096");
    /* a long value inih alone could not hold (its line limit is 199 bytes) still works */
    char path_line[700];
    memset(path_line, 'q', sizeof(path_line));
    memcpy(path_line, "[model]\npath = /", 16);
    strcpy(path_line + 600, " ; comment\n");
    CHECK_OK(apply(path_line));
    CHECK_EQ(strlen(conf.model.path), 600 - 15);
    CHECK(conf.model.path[0] == '/' && conf.model.path[584] == 'q');
    /* a string longer than its field */
    char *big = malloc(1200 + 32);
    strcpy(big, "[model]\npath = ");
    memset(big + 15, 'p', 1100);
    strcpy(big + 1115, "\n");
    CHECK_FAILS_LOGGED(apply(big), WEFT_ERR_CONFIG, "t.ini:2", "longer than the limit 1023");
    free(big);
    /* conf is not modified by a failed load */
    weft_conf_defaults(&conf);
    CHECK(weft_conf_apply_string(&conf, "[parallel]\ntp_degree = 2\ndp_degree = x\n", "t") ==
          WEFT_ERR_CONFIG);
    CHECK_EQ(conf.parallel.tp_degree, 1);
}

static void test_file_errors(void)
{
    char path[] = "/tmp/weft_test_conf_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    const char *text = "[log]\nlevel = info\n[parallel]\nbogus = 1\n";
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    weft_conf_defaults(&conf);
    char want[64];
    snprintf(want, sizeof(want), "%s:4", path);
    CHECK_FAILS_LOGGED(weft_conf_apply_file(&conf, path), WEFT_ERR_CONFIG, want,
                       "unknown key 'bogus'");
    unlink(path);
    CHECK_FAILS_LOGGED(weft_conf_apply_file(&conf, "/nonexistent/weft.ini"), WEFT_ERR_IO,
                       "/nonexistent/weft.ini", "cannot open");
    /* a byte-order mark (Windows editors) is read past; a NUL byte is named, with its line */
    static const char bom[] = "\xEF\xBB\xBF[parallel]\ntp_degree = 2\n";
    static const char nul[] = "[parallel]\ntp_degree = 2\nring_degree\0 = 2\n";
    char p2[] = "/tmp/weft_test_conf_XXXXXX", p3[] = "/tmp/weft_test_conf_XXXXXX";
    fd = mkstemp(p2);
    CHECK(fd >= 0 && write(fd, bom, sizeof(bom) - 1) == (ssize_t)(sizeof(bom) - 1));
    close(fd);
    weft_conf_defaults(&conf);
    CHECK_OK(weft_conf_apply_file(&conf, p2));
    CHECK_EQ(conf.parallel.tp_degree, 2);
    unlink(p2);
    fd = mkstemp(p3);
    CHECK(fd >= 0 && write(fd, nul, sizeof(nul) - 1) == (ssize_t)(sizeof(nul) - 1));
    close(fd);
    snprintf(want, sizeof(want), "%s:3", p3);
    CHECK_FAILS_LOGGED(weft_conf_apply_file(&conf, p3), WEFT_ERR_CONFIG, want,
                       "a NUL byte in the line");
    unlink(p3);
}

static void test_precedence(void)
{
    char path[] = "/tmp/weft_test_conf_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    const char *text = "[parallel]\ntp_degree = 2\nulysses_degree = 2\nring_degree = 2\n";
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    char cfg[128];
    snprintf(cfg, sizeof(cfg), "WEFT_CONFIG=%s", path);
    char *env[] = {cfg, "WEFT_PARALLEL_ULYSSES_DEGREE=3", "WEFT_PARALLEL_RING_DEGREE=3",
                   "HOME=/root", NULL};
    const char *over[] = {"parallel.ring_degree=4"};
    CHECK_OK(weft_conf_load(&conf, NULL, env, 1, over));
    CHECK_EQ(conf.parallel.tp_degree, 2);      /* INI over default */
    CHECK_EQ(conf.parallel.ulysses_degree, 3); /* env over INI */
    CHECK_EQ(conf.parallel.ring_degree, 4);    /* option over env */
    CHECK_EQ(conf.parallel.dp_degree, 1);      /* default */

    char *bad_env[] = {"WEFT_PARALLEL_TP_DEGREEE=3", NULL};
    CHECK_FAILS_LOGGED(weft_conf_load(&conf, NULL, bad_env, 0, NULL), WEFT_ERR_CONFIG,
                       "WEFT_PARALLEL_TP_DEGREEE", "no key");
    char *bad_val[] = {"WEFT_PARALLEL_TP_DEGREE=abc", NULL};
    CHECK_FAILS_LOGGED(weft_conf_load(&conf, NULL, bad_val, 0, NULL), WEFT_ERR_CONFIG,
                       "environment WEFT_PARALLEL_TP_DEGREE", "'abc'");
    const char *bad_over[] = {"parallel.tp=2"};
    CHECK_FAILS_LOGGED(weft_conf_load(&conf, NULL, NULL, 1, bad_over), WEFT_ERR_CONFIG,
                       "--parallel.tp=2", "unknown key 'tp'");
    const char *bad_sec[] = {"paralel.tp_degree=2"};
    CHECK_FAILS_LOGGED(weft_conf_load(&conf, NULL, NULL, 1, bad_sec), WEFT_ERR_CONFIG,
                       "unknown section [paralel]");
    unlink(path);
}

static void test_sizes(void)
{
    uint64_t b;
    CHECK_OK(weft_conf_parse_size("4096", &b));
    CHECK_EQ(b, 4096);
    CHECK_OK(weft_conf_parse_size("16GiB", &b));
    CHECK(b == 16ull << 30);
    CHECK_OK(weft_conf_parse_size(" 512 MiB ", &b));
    CHECK(b == 512ull << 20);
    CHECK_OK(weft_conf_parse_size("1.5GB", &b));
    CHECK(b == 1500000000ull);
    CHECK_OK(weft_conf_parse_size("1.5GiB", &b));
    CHECK(b == 3ull << 29);
    CHECK_OK(weft_conf_parse_size("64k", &b));
    CHECK(b == 65536);
    CHECK(weft_conf_parse_size("16XB", &b) == WEFT_ERR_INVALID);
    CHECK(weft_conf_parse_size("", &b) == WEFT_ERR_INVALID);
    CHECK(weft_conf_parse_size("-1", &b) == WEFT_ERR_INVALID);
    CHECK(weft_conf_parse_size("1.", &b) == WEFT_ERR_INVALID);
    CHECK(weft_conf_parse_size("1.5B", &b) == WEFT_ERR_INVALID); /* half a byte */
    CHECK(weft_conf_parse_size("2.5", &b) == WEFT_ERR_INVALID);
    CHECK_OK(weft_conf_parse_size("0.3k", &b)); /* 307.2 bytes: a whole byte less */
    CHECK_EQ(b, 307);
    CHECK(weft_conf_parse_size("99999999999TiB", &b) == WEFT_ERR_RANGE);
    CHECK(weft_conf_parse_size("99999999999999999999", &b) == WEFT_ERR_RANGE);
}

/* Addresses: host:port, [v6]:port or unix:PATH, checked when read (999.1.1.1:99999 once
 * passed the configuration and weft plan). */
static void test_addresses(void)
{
    char why[200];
    static const char *const good[] = {"127.0.0.1:0", "0.0.0.0:7450", "[::1]:8642",
                                       "node-1.cluster.local:65535", "unix:/run/weft.sock"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        CHECK(weft_conf_addr_ok(good[i], why, sizeof(why)));
    static const struct {
        const char *addr, *want;
    } bad[] = {
        {"999.1.1.1:80", "not an IPv4 address"}, {"127.0.0.1:99999", "not a number in 0..65535"},
        {"127.0.0.1:-1", "0..65535"},            {"127.0.0.1:", "0..65535"},
        {"host", "expected host:port"},          {":80", "expected host:port"},
        {"a b:1", "not a host name"},            {"[::1:80", "[address]:port"},
        {"unix:", "socket path"},                {"1.2.3:80", "not an IPv4 address"}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        why[0] = '\0';
        CHECK(!weft_conf_addr_ok(bad[i].addr, why, sizeof(why)));
        CHECK_TEXT_HAS(bad[i].addr, why, bad[i].want);
    }
    CHECK_FAILS_LOGGED(apply("[cluster]\nlisten = 999.1.1.1:99999\n"), WEFT_ERR_CONFIG,
                       "[cluster] listen", "0..65535");
}

/* The dump parses back to the same configuration. */
static void test_roundtrip(void)
{
    CHECK_OK(apply("[parallel]\ntp_degree = 3\nring_anything = true\n[model]\npath = /x y\n"));
    struct weft_conf a = conf;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    weft_conf_dump(&a, f);
    fclose(f);
    weft_conf_defaults(&conf);
    CHECK_OK(weft_conf_apply_string(&conf, text, "dump"));
    CHECK(memcmp(&a, &conf, sizeof(conf)) == 0);
    free(text);
}

static void test_example_in_sync(void)
{
    const char *root = getenv("WEFT_SOURCE_ROOT");
    CHECK(root);
    char path[1024];
    snprintf(path, sizeof(path), "%s/conf/weft.example.ini", root);
    FILE *f = fopen(path, "r");
    CHECK(f);
    char want[65536];
    size_t n = fread(want, 1, sizeof(want) - 1, f);
    want[n] = '\0';
    fclose(f);
    char *got = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&got, &len);
    weft_conf_write_example(m);
    fclose(m);
    if (strcmp(want, got) != 0) {
        fprintf(stderr, "conf/weft.example.ini is out of date: regenerate it with\n"
                        "  build/weft --dump-config --defaults > conf/weft.example.ini\n");
        exit(1);
    }
    /* and the example itself is a valid configuration */
    weft_conf_defaults(&conf);
    CHECK_OK(weft_conf_apply_string(&conf, got, "example"));
    free(got);
}

/* Where the file comes from: --config, $WEFT_CONFIG, $XDG_CONFIG_HOME/weft/weft.ini (else
 * ~/.config); the state folder; secrets redacted in the dump. */
static void test_discovery(void)
{
    char dir[] = "/tmp/weft_test_xdg_XXXXXX";
    CHECK(mkdtemp(dir));
    char sub[300], path[400], xdg[400], home[400], state[400];
    snprintf(sub, sizeof(sub), "%s/weft", dir);
    CHECK(mkdir(sub, 0700) == 0);
    snprintf(path, sizeof(path), "%s/weft.ini", sub);
    FILE *f = fopen(path, "w");
    CHECK(f && fputs("[parallel]\ntp_degree = 3\n[api]\ntoken = hunter2\n", f) >= 0);
    CHECK(fclose(f) == 0);
    snprintf(xdg, sizeof(xdg), "XDG_CONFIG_HOME=%s", dir);
    snprintf(home, sizeof(home), "HOME=%s/nohome", dir);
    snprintf(state, sizeof(state), "XDG_STATE_HOME=%s/state", dir);
    char *env[] = {xdg, home, state, NULL};
    CHECK_OK(weft_conf_load(&conf, NULL, env, 0, NULL));
    CHECK_EQ(conf.parallel.tp_degree, 3);
    CHECK(strcmp(conf.source, path) == 0);
    /* journal and images under the state folder, never the current one */
    char want[500];
    snprintf(want, sizeof(want), "%s/state/weft/journal", dir);
    CHECK(strcmp(conf.api.journal_dir, want) == 0);
    snprintf(want, sizeof(want), "%s/state/weft/jobs", dir);
    CHECK(strcmp(conf.api.output_dir, want) == 0);
    /* systemd's StateDirectory= wins; none means no journal */
    char *sysd[] = {xdg, "STATE_DIRECTORY=/var/lib/weft:/var/lib/other", NULL};
    const char *none[] = {"api.journal_dir=none"};
    CHECK_OK(weft_conf_load(&conf, NULL, sysd, 1, none));
    CHECK(strcmp(conf.api.state_dir, "/var/lib/weft") == 0);
    CHECK(strcmp(conf.api.output_dir, "/var/lib/weft/jobs") == 0 && !conf.api.journal_dir[0]);
    /* --config wins over the discovered file, and must exist */
    CHECK_FAILS_LOGGED(weft_conf_load(&conf, "/nonexistent/weft.ini", env, 0, NULL), WEFT_ERR_IO,
                "/nonexistent/weft.ini");
    /* a folder, or a FIFO (whose open(2) would wait for a writer), is no configuration */
    CHECK_FAILS_LOGGED(weft_conf_load(&conf, dir, env, 0, NULL), WEFT_ERR_IO,
                       "a folder, not a file");
    char fifo[400];
    snprintf(fifo, sizeof(fifo), "%s/fifo.ini", dir);
    CHECK(mkfifo(fifo, 0600) == 0);
    CHECK_FAILS_LOGGED(weft_conf_load(&conf, fifo, env, 0, NULL), WEFT_ERR_IO,
                       "not a regular file");
    CHECK(unlink(fifo) == 0);
    char cfg[500];
    snprintf(cfg, sizeof(cfg), "WEFT_CONFIG=%s/missing.ini", dir);
    char *env2[] = {cfg, xdg, NULL};
    CHECK_FAILS_LOGGED(weft_conf_load(&conf, NULL, env2, 0, NULL), WEFT_ERR_IO, "missing.ini");
    /* without XDG_CONFIG_HOME: ~/.config/weft/weft.ini */
    char home2[400];
    snprintf(home2, sizeof(home2), "HOME=%s/h", dir);
    snprintf(sub, sizeof(sub), "%s/h", dir);
    CHECK(mkdir(sub, 0700) == 0);
    snprintf(sub, sizeof(sub), "%s/h/.config", dir);
    CHECK(mkdir(sub, 0700) == 0);
    snprintf(sub, sizeof(sub), "%s/h/.config/weft", dir);
    CHECK(mkdir(sub, 0700) == 0);
    snprintf(path, sizeof(path), "%s/weft.ini", sub);
    CHECK((f = fopen(path, "w")) && fputs("[parallel]\ntp_degree = 5\n", f) >= 0);
    CHECK(fclose(f) == 0);
    char *env3[] = {home2, NULL};
    CHECK_OK(weft_conf_load(&conf, NULL, env3, 0, NULL));
    CHECK_EQ(conf.parallel.tp_degree, 5);
    /* the dump redacts secrets and says which file it read */
    CHECK_OK(weft_conf_load(&conf, NULL, env, 0, NULL));
    char dump[300];
    snprintf(dump, sizeof(dump), "%s/dump.ini", dir);
    CHECK((f = fopen(dump, "w")));
    weft_conf_dump(&conf, f);
    CHECK(fclose(f) == 0);
    char *text;
    static char buf[1 << 16];
    CHECK((f = fopen(dump, "r")));
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    (void)fclose(f);
    buf[n] = '\0';
    text = buf;
    CHECK(strstr(text, "token = <redacted>") && !strstr(text, "hunter2"));
    CHECK(strstr(text, "# read from "));
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

int main(void)
{
    test_quiet();
    test_defaults();
    test_values();
    test_errors();
    test_file_errors();
    test_precedence();
    test_sizes();
    test_addresses();
    test_roundtrip();
    test_example_in_sync();
    test_discovery();
    return 0;
}
