/* Errors as values (see error.h). */
#include "common/error.h"

#include <stdio.h>
#include <string.h>

#include "common/log.h"

void weft_error_clear(struct weft_error *err)
{
    if (err) {
        err->status = WEFT_OK;
        err->msg[0] = '\0';
        err->logged = false;
        err->peer = false;
    }
}

static void record(struct weft_error *err, weft_status_t st, const char *fmt, va_list ap)
{
    if (!err || err->status != WEFT_OK)
        return;
    err->status = st == WEFT_OK ? WEFT_ERR_INTERNAL : st;
    err->logged = false;
    err->peer = false;
    /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): a false positive on glibc */
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
}

weft_status_t weft_error_set(struct weft_error *err, weft_status_t st, const char *subsys,
                             const char *fmt, ...)
{
    char msg[WEFT_ERROR_MSG];
    va_list ap;
    va_start(ap, fmt);
    /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): a false positive on glibc */
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    WEFT_LOG_ERROR(subsys, "%s", msg);
    if (err && err->status == WEFT_OK) {
        err->status = st == WEFT_OK ? WEFT_ERR_INTERNAL : st;
        err->logged = true;
        err->peer = false;
        snprintf(err->msg, sizeof(err->msg), "%s", msg);
    }
    return st;
}

weft_status_t weft_error_refuse(struct weft_error *err, weft_status_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    record(err, st, fmt, ap);
    va_end(ap);
    if (err)
        WEFT_LOG_DEBUG("error", "%s", err->msg);
    return st;
}

weft_status_t weft_error_peer(struct weft_error *err, weft_status_t st, const char *fmt, ...)
{
    const bool empty = err && err->status == WEFT_OK;
    va_list ap;
    va_start(ap, fmt);
    record(err, st, fmt, ap);
    va_end(ap);
    if (empty) {
        err->peer = true;
        WEFT_LOG_DEBUG("error", "%s", err->msg);
    }
    return st;
}

weft_status_t weft_error_refuse_or_log(struct weft_error *err, weft_status_t st,
                                       const char *subsys, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err) {
        record(err, st, fmt, ap);
        WEFT_LOG_DEBUG("error", "%s", err->msg);
    } else if (WEFT_LOG_LEVEL_ERROR <= weft_log_level_current) {
        char msg[1024]; /* as long as a line weft_log_write takes */
        /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): a false positive on glibc */
        vsnprintf(msg, sizeof(msg), fmt, ap);
        weft_log_write(WEFT_LOG_LEVEL_ERROR, subsys, "%s", msg);
    }
    va_end(ap);
    return st;
}

void weft_error_log(struct weft_error *err, const char *subsys)
{
    if (!err || err->status == WEFT_OK || err->logged)
        return;
    WEFT_LOG_ERROR(subsys, "%s", weft_error_text(err));
    err->logged = true;
}

void weft_error_prefix(struct weft_error *err, const char *fmt, ...)
{
    if (!err || err->status == WEFT_OK)
        return;
    char head[WEFT_ERROR_MSG], old[WEFT_ERROR_MSG];
    va_list ap;
    va_start(ap, fmt);
    /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): a false positive on glibc */
    vsnprintf(head, sizeof(head), fmt, ap);
    va_end(ap);
    snprintf(old, sizeof(old), "%s", weft_error_text(err));
    snprintf(err->msg, sizeof(err->msg), "%s: %s", head, old);
}

const char *weft_error_text(const struct weft_error *err)
{
    if (!err || err->status == WEFT_OK)
        return "";
    return err->msg[0] ? err->msg : weft_status_str(err->status);
}
