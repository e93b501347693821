/* common/log.h: one line per message whatever the message holds. Text in a log line comes from
 * users (a prompt the tokenizer truncated, a request path): its control bytes are escaped in
 * the text formats (a terminal escape sequence or a line break would reach the operator's
 * terminal or forge a line) and in JSON. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "test.h"

/* What logging msg wrote to stderr in the current style and format. */
static void logged(const char *msg, char *out, size_t cap)
{
    char path[] = "/tmp/weft-test-log-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    int saved = dup(STDERR_FILENO);
    CHECK(saved >= 0 && dup2(fd, STDERR_FILENO) >= 0);
    WEFT_LOG_WARN("text", "prompt ['%s']", msg);
    CHECK(dup2(saved, STDERR_FILENO) >= 0);
    close(saved);
    ssize_t n = pread(fd, out, cap - 1, 0);
    CHECK(n > 0);
    out[n] = '\0';
    close(fd);
    unlink(path);
}

static int lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

int main(void)
{
    const char *evil = "x \x1b[31mRED\x1b[0m\nW 2026 forged: line\r\x7f\tend";
    char out[8192];
    weft_log_set_format(WEFT_LOG_FORMAT_TEXT);
    weft_log_set_style(WEFT_LOG_STYLE_FULL);
    logged(evil, out, sizeof(out));
    printf("full:  %s", out);
    CHECK(lines(out) == 1 && !strchr(out, '\x1b') && !strchr(out, '\r') && !strchr(out, 0x7f));
    CHECK(strstr(out, "x \\x1b[31mRED\\x1b[0m\\x0aW 2026 forged: line\\x0d\\x7f\tend']\n"));
    weft_log_set_style(WEFT_LOG_STYLE_SHORT);
    logged(evil, out, sizeof(out));
    printf("short: %s", out);
    CHECK(lines(out) == 1 && !strchr(out, '\x1b'));
    CHECK(strcmp(out, "weft: warn: prompt ['x \\x1b[31mRED\\x1b[0m\\x0aW 2026 forged: line\\x0d"
                      "\\x7f\tend']\n") == 0);
    weft_log_set_style(WEFT_LOG_STYLE_FULL);
    weft_log_set_format(WEFT_LOG_FORMAT_JSON);
    logged(evil, out, sizeof(out));
    printf("json:  %s", out);
    CHECK(lines(out) == 1 && !strchr(out, '\x1b'));
    CHECK(strstr(out, "\\u001b[31mRED\\u001b[0m\\nW 2026 forged: line\\u000d"));
    /* a long message stays one line, cut */
    char big[3000];
    memset(big, '\n', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    weft_log_set_format(WEFT_LOG_FORMAT_TEXT);
    logged(big, out, sizeof(out));
    CHECK(lines(out) == 1);
    return 0;
}
