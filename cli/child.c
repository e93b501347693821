/* Child processes and other helpers of the commands that start them (child.h). */
#include "cli/child.h"

#include <errno.h>
#include <ftw.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"

extern char **environ;

int weft_child_start(char *const argv[], char *const envp[], struct weft_child *c)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    int err = posix_spawnp(&c->pid, argv[0], &fa, NULL, argv, envp ? envp : environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (err != 0) {
        close(fds[0]);
        WEFT_LOG_ERROR("cli", "cannot start %s: %s", argv[0], strerror(err));
        return -1;
    }
    c->out_fd = fds[0];
    return 0;
}

int weft_child_finish(struct weft_child *c, char *out, size_t len, long *maxrss_kib)
{
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

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double weft_median(double *v, int n)
{
    if (n <= 0)
        return 0;
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
