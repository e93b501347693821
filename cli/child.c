/* Child processes and other helpers of the commands that start them (child.h). */
#include "cli/child.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"

extern char **environ;

/* posix_spawnp with its stdout (and with duplex its stdin) on pipes; the child gets SIGPIPE's
 * default action whatever ours is. */
static int start(char *const argv[], char *const envp[], struct weft_child *c, bool duplex)
{
    int out[2], in[2] = {-1, -1};
    if (pipe2(out, O_CLOEXEC) != 0)
        return -1;
    if (duplex && pipe2(in, O_CLOEXEC) != 0) {
        close(out[0]), close(out[1]);
        return -1;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
    if (duplex)
        posix_spawn_file_actions_adddup2(&fa, in[0], STDIN_FILENO);
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    sigset_t def;
    sigemptyset(&def);
    sigaddset(&def, SIGPIPE);
    posix_spawnattr_setsigdefault(&at, &def);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF);
    int err = posix_spawnp(&c->pid, argv[0], &fa, &at, argv, envp ? envp : environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(out[1]);
    if (duplex)
        close(in[0]);
    if (err != 0) {
        close(out[0]);
        if (duplex)
            close(in[1]);
        WEFT_LOG_ERROR("cli", "cannot start %s: %s", argv[0], strerror(err));
        return -1;
    }
    c->out_fd = out[0];
    c->in_fd = duplex ? in[1] : -1;
    return 0;
}

int weft_child_start(char *const argv[], char *const envp[], struct weft_child *c)
{
    return start(argv, envp, c, false);
}

int weft_child_start_duplex(char *const argv[], char *const envp[], struct weft_child *c)
{
    (void)signal(SIGPIPE, SIG_IGN);
    return start(argv, envp, c, true);
}

int weft_child_read_line(struct weft_child *c, char *out, size_t len, double timeout_s)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    size_t got = 0;
    for (;;) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        double left = timeout_s - (double)(t.tv_sec - t0.tv_sec) -
                      (double)(t.tv_nsec - t0.tv_nsec) * 1e-9;
        struct pollfd p = {c->out_fd, POLLIN, 0};
        int pr = left > 0 ? poll(&p, 1, (int)(left * 1e3) + 1) : 0;
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            return -1; /* timed out */
        char ch; /* a byte at a time: the lines are short and few, and nothing is read ahead */
        ssize_t r = read(c->out_fd, &ch, 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0 || got + 1 >= len)
            return -1;
        if (ch == '\n') {
            out[got] = '\0';
            return 0;
        }
        out[got++] = ch;
    }
}

int weft_child_ask(struct weft_child *c, const char *line, char *out, size_t len,
                   double timeout_s)
{
    if (line) {
        size_t n = strlen(line), done = 0;
        while (done <= n) { /* the line, then its newline */
            const char *p = done < n ? line + done : "\n";
            ssize_t w = write(c->in_fd, p, done < n ? n - done : 1);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                return -1;
            done += (size_t)w;
        }
    }
    return weft_child_read_line(c, out, len, timeout_s);
}

void weft_child_settle(void)
{
    struct timespec ts = {0, 100 * 1000 * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

cJSON *weft_child_ask_json(struct weft_child *c, const char *line, double timeout_s)
{
    static char out[1 << 16];
    if (weft_child_ask(c, line, out, sizeof(out), timeout_s) != 0) {
        WEFT_LOG_ERROR("cli", "child %d: no answer%s%s", (int)c->pid, line ? " to " : "",
                       line ? line : "");
        return NULL;
    }
    cJSON *j = cJSON_Parse(out);
    const cJSON *e = j ? cJSON_GetObjectItemCaseSensitive(j, "error") : NULL;
    if (!j || e) {
        WEFT_LOG_ERROR("cli", "child %d: %s", (int)c->pid,
                       e && cJSON_IsString(e) ? e->valuestring : out);
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

int weft_child_finish(struct weft_child *c, char *out, size_t len, long *maxrss_kib)
{
    if (c->in_fd >= 0) {
        close(c->in_fd);
        c->in_fd = -1;
    }
    size_t got = 0;
    char sink[4096]; /* past len: read on, so that the child never blocks on a full pipe */
    for (;;) {
        const bool room = got + 1 < len;
        ssize_t r = read(c->out_fd, room ? out + got : sink, room ? len - 1 - got : sizeof(sink));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        if (room)
            got += (size_t)r;
    }
    if (len)
        out[got] = '\0';
    close(c->out_fd);
    int status = 0;
    struct rusage ru = {0};
    while (wait4(c->pid, &status, 0, &ru) < 0 && errno == EINTR)
        ;
    if (maxrss_kib)
        *maxrss_kib = ru.ru_maxrss;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int weft_child_run(char *const argv[], char *const envp[], char *out, size_t len,
                   long *maxrss_kib)
{
    struct weft_child c;
    if (weft_child_start(argv, envp, &c) != 0)
        return -1;
    return weft_child_finish(&c, out, len, maxrss_kib);
}

int weft_self_path(char *buf, size_t len)
{
    ssize_t n = readlink("/proc/self/exe", buf, len - 1);
    if (n <= 0 || (size_t)n >= len - 1)
        return -1;
    buf[n] = '\0';
    return 0;
}

char **weft_env_edit(const char *drop, const char *add)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = weft_calloc(n + 2, sizeof(*env));
    if (!env)
        return NULL;
    size_t k = 0, dl = drop ? strlen(drop) : 0;
    for (size_t i = 0; i < n; i++)
        if (!drop || strncmp(environ[i], drop, dl) != 0)
            env[k++] = environ[i];
    if (add)
        env[k] = (char *)add;
    return env;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    if (remove(path) != 0)
        WEFT_LOG_WARN("cli", "could not remove %s: %s", path, strerror(errno));
    return 0;
}

void weft_remove_tree(const char *dir)
{
    (void)nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}
