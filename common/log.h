/* Logging: leveled, prefixed lines on stderr (or a sink set by tests and servers).
 *
 * The level is checked before any formatting. Lines are prefixed with the wall-clock time (RFC
 * 3339, UTC, milliseconds), the rank and host:pid in the full style (or are JSON objects); the short style (for one-shot CLI commands) prints
 * "weft: error: ...". Library code never printf()s; it logs. */
#ifndef WEFT_COMMON_LOG_H
#define WEFT_COMMON_LOG_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

enum weft_log_level {
    WEFT_LOG_LEVEL_ERROR,
    WEFT_LOG_LEVEL_WARN,
    WEFT_LOG_LEVEL_INFO,
    WEFT_LOG_LEVEL_DEBUG,
    WEFT_LOG_LEVEL_COUNT
};

enum weft_log_style {
    WEFT_LOG_STYLE_FULL,  /* "2026-01-31T12:00:00.123Z r0 host:123 E subsys: message" */
    WEFT_LOG_STYLE_SHORT, /* "weft: error: message" */
};

/* How full-style lines are written (a server's, a worker's): text, or one JSON object a line
 * ({"ts", "level", "subsys", "rank", "host", "pid", "msg"}) for log collectors. */
enum weft_log_format {
    WEFT_LOG_FORMAT_TEXT,
    WEFT_LOG_FORMAT_JSON,
};

typedef void (*weft_log_sink_cb)(enum weft_log_level level, const char *subsys, const char *msg,
                                 void *arg);

extern int weft_log_level_current;

#define WEFT_LOG(level, subsys, ...)                                                        \
    do {                                                                                    \
        if ((int)(level) <= weft_log_level_current)                                         \
            weft_log_write((level), (subsys), __VA_ARGS__);                                 \
    } while (0)
#define WEFT_LOG_ERROR(subsys, ...) WEFT_LOG(WEFT_LOG_LEVEL_ERROR, subsys, __VA_ARGS__)
#define WEFT_LOG_WARN(subsys, ...) WEFT_LOG(WEFT_LOG_LEVEL_WARN, subsys, __VA_ARGS__)
#define WEFT_LOG_INFO(subsys, ...) WEFT_LOG(WEFT_LOG_LEVEL_INFO, subsys, __VA_ARGS__)
#define WEFT_LOG_DEBUG(subsys, ...) WEFT_LOG(WEFT_LOG_LEVEL_DEBUG, subsys, __VA_ARGS__)

void weft_log_write(enum weft_log_level level, const char *subsys, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void weft_log_set_level(enum weft_log_level level);
void weft_log_set_style(enum weft_log_style style);
void weft_log_set_format(enum weft_log_format format);
void weft_log_set_rank(int rank);
/* Replace stderr by a callback (NULL restores stderr). */
void weft_log_set_sink(weft_log_sink_cb cb, void *arg);
/* Parse "error", "warn", "info", "debug"; returns -1 when unknown. */
int weft_log_level_parse(const char *name);
const char *weft_log_level_name(enum weft_log_level level);

#ifdef __cplusplus
}
#endif

#endif
