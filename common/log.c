/* Logging implementation: one write(2) per line so lines from threads and processes never mix. */
#include "common/log.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int weft_log_level_current = WEFT_LOG_LEVEL_INFO;

static enum weft_log_style log_style = WEFT_LOG_STYLE_FULL;
static int log_rank = -1;
static weft_log_sink_cb log_sink;
static void *log_sink_arg;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const level_names[WEFT_LOG_LEVEL_COUNT] = {"error", "warn", "info", "debug"};
static const char level_letters[WEFT_LOG_LEVEL_COUNT] = {'E', 'W', 'I', 'D'};

static double start_ms(void)
{
    static double t0 = -1.0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double now = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
    if (t0 < 0.0)
        t0 = now;
    return now - t0;
}

/* Take the clock once at load so times count from process start, not from the first line. */
__attribute__((constructor)) static void log_clock_init(void)
{
    (void)start_ms();
}

void weft_log_write(enum weft_log_level level, const char *subsys, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof(msg), fmt, ap); /* NOLINT(clang-analyzer-valist.Uninitialized) */
    va_end(ap);
    if (n < 0)
        return;

    pthread_mutex_lock(&log_lock);
    weft_log_sink_cb sink = log_sink;
    void *sink_arg = log_sink_arg;
    pthread_mutex_unlock(&log_lock);
    if (sink) {
        sink(level, subsys, msg, sink_arg);
        return;
    }

    char line[1280];
    int len;
    if (log_style == WEFT_LOG_STYLE_SHORT) {
        len = snprintf(line, sizeof(line), "weft: %s%s%s\n",
                       level == WEFT_LOG_LEVEL_INFO ? "" : level_names[level],
                       level == WEFT_LOG_LEVEL_INFO ? "" : ": ", msg);
    } else {
        char host[64] = "?";
        gethostname(host, sizeof(host) - 1);
        char rank[16] = "r-";
        if (log_rank >= 0)
            snprintf(rank, sizeof(rank), "r%d", log_rank);
        len = snprintf(line, sizeof(line), "[%10.3f] %s %s:%d %c %s: %s\n", start_ms() / 1e3, rank,
                       host, (int)getpid(), level_letters[level], subsys, msg);
    }
    if (len > (int)sizeof(line) - 1)
        len = (int)sizeof(line) - 1;
    if (len > 0) {
        ssize_t w = write(STDERR_FILENO, line, (size_t)len);
        (void)w;
    }
}

void weft_log_set_level(enum weft_log_level level)
{
    weft_log_level_current = (int)level;
}

void weft_log_set_style(enum weft_log_style style)
{
    log_style = style;
}

void weft_log_set_rank(int rank)
{
    log_rank = rank;
}

void weft_log_set_sink(weft_log_sink_cb cb, void *arg)
{
    pthread_mutex_lock(&log_lock);
    log_sink = cb;
    log_sink_arg = arg;
    pthread_mutex_unlock(&log_lock);
}

int weft_log_level_parse(const char *name)
{
    for (int i = 0; i < WEFT_LOG_LEVEL_COUNT; i++)
        if (strcmp(name, level_names[i]) == 0)
            return i;
    return -1;
}

const char *weft_log_level_name(enum weft_log_level level)
{
    return (unsigned)level < WEFT_LOG_LEVEL_COUNT ? level_names[level] : "?";
}
