/* An error as a value: the status and the one-line cause, handed to the caller explicitly.
 *
 * Functions whose failures cross a boundary (a job's reason, an HTTP error, a wire message, a
 * CLI's last line) take a struct weft_error * and fill it; the caller reads the text from the
 * struct it passed, never from a log buffer. The first cause recorded wins: a caller that adds
 * context after a callee failed does not hide the callee's reason (use weft_error_prefix). */
#ifndef WEFT_COMMON_ERROR_H
#define WEFT_COMMON_ERROR_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/status.h"

#define WEFT_ERROR_MSG 320

struct weft_error {
    weft_status_t status; /* WEFT_OK: nothing recorded */
    char msg[WEFT_ERROR_MSG];
    bool logged; /* the cause is in the log already (weft_error_set, weft_error_log) */
    bool peer;   /* a consequence of another rank's failure, whose own report has the cause */
};

#define WEFT_ERROR_INIT {WEFT_OK, "", false, false}

void weft_error_clear(struct weft_error *err);

/* Record st and the cause in err (when err is non-NULL and holds nothing yet) and log it once
 * at ERROR under subsys. Returns st, so that `return weft_error_set(...)` reads naturally. */
weft_status_t weft_error_set(struct weft_error *err, weft_status_t st, const char *subsys,
                             const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* The same without logging above DEBUG: the cause is someone else's (a request, a job) and the
 * caller decides how loud it is. */
weft_status_t weft_error_refuse(struct weft_error *err, weft_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Another rank failed and this one stops because of it: recorded as weft_error_refuse does,
 * marked peer, so that whoever collects the ranks' reports prefers the one with the cause. */
weft_status_t weft_error_peer(struct weft_error *err, weft_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The input's fault (a user's file, a request, a config) where err may be NULL: recorded as
 * weft_error_refuse does; with NULL nobody will report the cause, so it is logged at ERROR under
 * subsys instead. */
weft_status_t weft_error_refuse_or_log(struct weft_error *err, weft_status_t st,
                                       const char *subsys, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Put "prefix: " before the recorded cause (nothing recorded: nothing happens). */
void weft_error_prefix(struct weft_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The one line a command or a report ends with: the recorded cause at ERROR under subsys,
 * unless it is in the log already (then nothing: a failure is logged once). */
void weft_error_log(struct weft_error *err, const char *subsys);
/* The cause, or the status's own text when none was given; "" when err holds nothing. */
const char *weft_error_text(const struct weft_error *err);

#endif
