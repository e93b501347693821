/* Minimal test harness: checks abort the test with file:line and the failed expression.
 * Asserts are always on in tests; exit code 77 means "skipped" to meson. */
#ifndef WEFT_TESTS_TEST_H
#define WEFT_TESTS_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"
#include "common/status.h"

#define TEST_SKIP 77

#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);         \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

/* The err tests hand to the function under test (TERR), for CHECK_OK and CHECK_FAILS to read. */
static struct weft_error test_err __attribute__((unused));
#define TERR (&test_err)

/* The last ERROR line this thread logged, for the layers that only log (conf/, transport/,
 * kernels/): kept by the sink test_quiet() installs (CHECK_FAILS_LOGGED installs it too). */
static _Thread_local char test_logged[1024];
static int test_echo = 1; /* the sink also prints what it keeps */

static inline void test_sink(enum weft_log_level level, const char *subsys, const char *msg,
                             void *arg)
{
    (void)arg;
    if (level == WEFT_LOG_LEVEL_ERROR)
        snprintf(test_logged, sizeof(test_logged), "%s", msg);
    if (test_echo)
        fprintf(stderr, "%s %s: %s\n", weft_log_level_name(level), subsys, msg);
}

/* Silence expected error lines in test output (the last one is still kept for the checks). */
static inline void test_quiet(void)
{
    test_echo = getenv("WEFT_TEST_VERBOSE") != NULL;
    weft_log_set_sink(test_sink, NULL);
}

/* The cause of a failure for a message: the one recorded in TERR, else the last ERROR line. */
static inline const char *test_cause(void)
{
    return test_err.status != WEFT_OK ? weft_error_text(&test_err) : test_logged;
}

#define CHECK_OK(expr)                                                                       \
    do {                                                                                     \
        weft_error_clear(TERR);                                                              \
        test_logged[0] = '\0';                                                               \
        weft_status_t check_st_ = (expr);                                                    \
        if (check_st_ != WEFT_OK) {                                                          \
            fprintf(stderr, "%s:%d: %s returned %d (%s): %s\n", __FILE__, __LINE__, #expr,   \
                    (int)check_st_, weft_status_str(check_st_), test_cause());               \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

#define CHECK_EQ(a, b)                                                                       \
    do {                                                                                     \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);                      \
        if (check_a_ != check_b_) {                                                          \
            fprintf(stderr, "%s:%d: CHECK_EQ failed: %s = %lld, %s = %lld\n", __FILE__,      \
                    __LINE__, #a, check_a_, #b, check_b_);                                   \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

/* text must contain every given substring (what names the failing call). */
#define CHECK_TEXT_HAS(what, text, ...)                                                      \
    do {                                                                                     \
        const char *check_text_ = (text);                                                    \
        const char *check_subs_[] = {__VA_ARGS__};                                           \
        for (size_t check_i_ = 0; check_i_ < sizeof(check_subs_) / sizeof(char *);           \
             check_i_++) {                                                                   \
            if (!strstr(check_text_, check_subs_[check_i_])) {                               \
                fprintf(stderr, "%s:%d: %s: error \"%s\" lacks \"%s\"\n", __FILE__,          \
                        __LINE__, what, check_text_, check_subs_[check_i_]);                 \
                exit(1);                                                                     \
            }                                                                                \
        }                                                                                    \
    } while (0)

/* expr, given TERR as its err, must fail with status want and a cause in TERR containing every
 * given substring. */
#define CHECK_FAILS(expr, want, ...)                                                         \
    do {                                                                                     \
        weft_error_clear(TERR);                                                              \
        weft_status_t check_st_ = (expr);                                                    \
        if (check_st_ != (want) || test_err.status != check_st_) {                           \
            fprintf(stderr, "%s:%d: %s returned %d (%s), expected %d; err holds %d: %s\n",   \
                    __FILE__, __LINE__, #expr, (int)check_st_, weft_status_str(check_st_),   \
                    (int)(want), (int)test_err.status, weft_error_text(&test_err));          \
            exit(1);                                                                         \
        }                                                                                    \
        CHECK_TEXT_HAS(#expr, weft_error_text(&test_err), __VA_ARGS__);                      \
    } while (0)

/* The same for a function that only logs its cause (conf/, transport/, kernels/): the ERROR
 * line it logged must contain every substring. */
#define CHECK_FAILS_LOGGED(expr, want, ...)                                                  \
    do {                                                                                     \
        weft_log_set_sink(test_sink, NULL);                                                  \
        test_logged[0] = '\0';                                                               \
        weft_status_t check_st_ = (expr);                                                    \
        if (check_st_ != (want)) {                                                           \
            fprintf(stderr, "%s:%d: %s returned %d (%s), expected %d; last error: %s\n",     \
                    __FILE__, __LINE__, #expr, (int)check_st_, weft_status_str(check_st_),   \
                    (int)(want), test_logged);                                               \
            exit(1);                                                                         \
        }                                                                                    \
        CHECK_TEXT_HAS(#expr, test_logged, __VA_ARGS__);                                     \
    } while (0)

#endif
