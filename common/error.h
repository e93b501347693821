/* An error as a value: the status and the one-line cause, handed to the caller explicitly.
 *
 * Functions whose failures cross a boundary (a job's reason, an HTTP error, a wire message, a
 * CLI's last line) take a struct weft_error * and fill it; the caller reads the text from the
 * struct it passed, never from a log buffer. The first cause recorded wins: a caller that adds
 * context after a callee failed does not hide the callee's reason (use weft_error_prefix). */
#ifndef WEFT_COMMON_ERROR_H
#define WEFT_COMMON_ERROR_H

#include <stdarg.h>
#include <stddef.h>

#include "common/status.h"

#define WEFT_ERROR_MSG 320

struct weft_error {
    weft_status_t status; /* WEFT_OK: nothing recorded */
    char msg[WEFT_ERROR_MSG];
};

#define WEFT_ERROR_INIT {WEFT_OK, ""}

void weft_error_clear(struct weft_error *err);

/* Record st and the cause in err (when err is non-NULL and holds nothing yet) and log it once
 * at ERROR under subsys. Returns st, so that `return weft_error_set(...)` reads naturally. */
weft_status_t weft_error_set(struct weft_error *err, weft_status_t st, const char *subsys,
                             const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* The same without logging above DEBUG: the cause is someone else's (a request, a job) and the
 * caller decides how loud it is. */
weft_status_t weft_error_refuse(struct weft_error *err, weft_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Put "prefix: " before the recorded cause (nothing recorded: nothing happens). */
void weft_error_prefix(struct weft_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* For callees that still log their cause instead of taking a struct weft_error: record st with
 * the last error this thread logged (or the status's text). Returns st; WEFT_OK records
 * nothing. */
weft_status_t weft_error_from_log(struct weft_error *err, weft_status_t st);
/* The cause, or the status's own text when none was given; "" when err holds nothing. */
const char *weft_error_text(const struct weft_error *err);

#endif
