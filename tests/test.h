/* Minimal test harness: checks abort the test with file:line and the failed expression.
 * Asserts are always on in tests; exit code 77 means "skipped" to meson. */
#ifndef WEFT_TESTS_TEST_H
#define WEFT_TESTS_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/status.h"

#define TEST_SKIP 77

#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);          \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

#define CHECK_OK(expr)                                                                       \
    do {                                                                                     \
        weft_status_t check_st_ = (expr);                                                    \
        if (check_st_ != WEFT_OK) {                                                          \
            fprintf(stderr, "%s:%d: %s returned %d (%s); last error: %s\n", __FILE__,         \
                    __LINE__, #expr, (int)check_st_, weft_status_str(check_st_),             \
                    weft_log_last_error());                                                  \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

#define CHECK_EQ(a, b)                                                                       \
    do {                                                                                     \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);                      \
        if (check_a_ != check_b_) {                                                          \
            fprintf(stderr, "%s:%d: CHECK_EQ failed: %s = %lld, %s = %lld\n", __FILE__,       \
                    __LINE__, #a, check_a_, #b, check_b_);                                   \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

/* expr must fail with status want and the logged error must contain every given substring. */
#define CHECK_FAILS(expr, want, ...)                                                         \
    do {                                                                                     \
        weft_log_clear_last_error();                                                         \
        weft_status_t check_st_ = (expr);                                                    \
        if (check_st_ != (want)) {                                                           \
            fprintf(stderr, "%s:%d: %s returned %d (%s), expected %d; last error: %s\n",      \
                    __FILE__, __LINE__, #expr, (int)check_st_, weft_status_str(check_st_),   \
                    (int)(want), weft_log_last_error());                                     \
            exit(1);                                                                         \
        }                                                                                    \
        const char *check_subs_[] = {__VA_ARGS__};                                           \
        for (size_t check_i_ = 0; check_i_ < sizeof(check_subs_) / sizeof(char *);          \
             check_i_++) {                                                                   \
            if (!strstr(weft_log_last_error(), check_subs_[check_i_])) {                     \
                fprintf(stderr, "%s:%d: error \"%s\" lacks \"%s\"\n", __FILE__, __LINE__,     \
                        weft_log_last_error(), check_subs_[check_i_]);                       \
                exit(1);                                                                     \
            }                                                                                \
        }                                                                                    \
    } while (0)

/* Silence expected error lines in test output (they are still recorded as last error). */
static inline void test_quiet_sink(enum weft_log_level level, const char *subsys,
                                   const char *msg, void *arg)
{
    (void)level, (void)subsys, (void)msg, (void)arg;
}

static inline void test_quiet(void)
{
    weft_log_set_sink(getenv("WEFT_TEST_VERBOSE") ? NULL : test_quiet_sink, NULL);
}

#endif
