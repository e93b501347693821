/* Logging implementation: one write(2) per line so lines from threads and processes never mix. */
#include "common/log.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int weft_log_level_current = WEFT_LOG_LEVEL_INFO;

static enum weft_log_style log_style = WEFT_LOG_STYLE_FULL;
static enum weft_log_format log_format = WEFT_LOG_FORMAT_TEXT;
static int log_rank = -1;
static weft_log_sink_cb log_sink;
static void *log_sink_arg;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const level_names[WEFT_LOG_LEVEL_COUNT] = {"error", "warn", "info", "debug"};
static const char level_letters[WEFT_LOG_LEVEL_COUNT] = {'E', 'W', 'I', 'D'};

/* "2026-01-31T12:00:00.123Z": RFC 3339, UTC, milliseconds. */
static void rfc3339(char *out, size_t len)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(out, len, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, len - n, ".%03ldZ", ts.tv_nsec / 1000000);
}

/* s as the inside of a JSON string: quotes, backslashes and control bytes escaped; bytes that
 * are not UTF-8 are replaced by '?', so that the line stays JSON. */
static size_t json_escape(const char *s, char *out, size_t cap)
{
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && o + 8 < cap; p++) {
        unsigned c = *p;
        if (c == '"' || c == '\\') {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else if (c == '\n') {
            out[o++] = '\\';
            out[o++] = 'n';
        } else if (c < 0x20) {
            o += (size_t)snprintf(out + o, cap - o, "\\u%04x", c);
        } else if (c < 0x80) {
            out[o++] = (char)c;
        } else {
            /* a whole UTF-8 sequence, or '?' */
            int n = c >= 0xf0 && c < 0xf5 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
            bool ok = n > 0;
            for (int k = 1; ok && k < n; k++)
                ok = (p[k] & 0xc0) == 0x80;
            if (!ok) {
                out[o++] = '?';
                continue;
            }
            for (int k = 0; k < n; k++)
                out[o++] = (char)p[k];
            p += n - 1;
        }
    }
    out[o] = '\0';
    return o;
}

/* s for a text line: control bytes (a terminal's escape sequences, line breaks that would
 * forge another log line) written as \xNN; a tab stays. */
static void text_escape(const char *s, char *out, size_t cap)
{
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && o + 5 < cap; p++) {
        if ((*p < 0x20 && *p != '\t') || *p == 0x7f)
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", *p);
        else
            out[o++] = (char)*p;
    }
    out[o] = '\0';
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

    char line[4608], text[4096];
    int len;
    if (log_format != WEFT_LOG_FORMAT_JSON || log_style == WEFT_LOG_STYLE_SHORT)
        text_escape(msg, text, sizeof(text));
    if (log_style == WEFT_LOG_STYLE_SHORT) {
        len = snprintf(line, sizeof(line), "weft: %s%s%s\n",
                       level == WEFT_LOG_LEVEL_INFO ? "" : level_names[level],
                       level == WEFT_LOG_LEVEL_INFO ? "" : ": ", text);
    } else {
        char host[64] = "?", ts[40];
        gethostname(host, sizeof(host) - 1);
        rfc3339(ts, sizeof(ts));
        if (log_format == WEFT_LOG_FORMAT_JSON) {
            char esc[2400], hesc[140];
            json_escape(msg, esc, sizeof(esc));
            json_escape(host, hesc, sizeof(hesc));
            char rank[16] = "null";
            if (log_rank >= 0)
                snprintf(rank, sizeof(rank), "%d", log_rank);
            len = snprintf(line, sizeof(line),
                           "{\"ts\":\"%s\",\"level\":\"%s\",\"subsys\":\"%s\",\"rank\":%s,"
                           "\"host\":\"%s\",\"pid\":%d,\"msg\":\"%s\"}\n",
                           ts, level_names[level], subsys, rank, hesc, (int)getpid(), esc);
            if (len > (int)sizeof(line) - 1) { /* cut: keep it one JSON object */
                json_escape("(message too long for one line)", esc, sizeof(esc));
                len = snprintf(line, sizeof(line),
                               "{\"ts\":\"%s\",\"level\":\"%s\",\"subsys\":\"%s\","
                               "\"msg\":\"%s\"}\n", ts, level_names[level], subsys, esc);
            }
        } else {
            char rank[16] = "r-";
            if (log_rank >= 0)
                snprintf(rank, sizeof(rank), "r%d", log_rank);
            len = snprintf(line, sizeof(line), "%s %s %s:%d %c %s: %s\n", ts, rank, host,
                           (int)getpid(), level_letters[level], subsys, text);
        }
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

void weft_log_set_format(enum weft_log_format format)
{
    log_format = format;
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
