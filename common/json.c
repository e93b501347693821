/* RFC 8259's grammar, one pass, no recursion (see json.h). */
#include "common/json.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define DEPTH_MAX 256

struct scan {
    const char *s;
    size_t n, i;
    char *why;
    size_t why_len;
};

/* why = "what at byte N" and the hint after it, if any. */
static bool fail_hint(struct scan *c, size_t at, const char *what, const char *hint)
{
    snprintf(c->why, c->why_len, "%s at byte %zu%s", what, at, hint);
    return false;
}

static bool fail(struct scan *c, size_t at, const char *what)
{
    return fail_hint(c, at, what, "");
}

/* Something else than `expected` at c->i: named for what it is when it is a control
 * character (a stray NUL or vertical tab is the likelier mistake). */
static bool unexpected(struct scan *c, const char *expected)
{
    if (c->i >= c->n)
        return fail(c, c->i, "the JSON text ends inside an array or object");
    const unsigned char x = (unsigned char)c->s[c->i];
    if (x == 0)
        return fail(c, c->i, "a NUL byte");
    if (x < 0x20)
        return fail(c, c->i, "a control character that is not JSON whitespace");
    return fail(c, c->i, expected);
}

static void space(struct scan *c)
{
    while (c->i < c->n && (c->s[c->i] == ' ' || c->s[c->i] == '\t' || c->s[c->i] == '\n' ||
                           c->s[c->i] == '\r'))
        c->i++;
}

static bool hex(char x)
{
    return (x >= '0' && x <= '9') || (x >= 'a' && x <= 'f') || (x >= 'A' && x <= 'F');
}

/* A string, c->i on its opening quote. */
static bool string(struct scan *c)
{
    const size_t open = c->i++;
    while (c->i < c->n) {
        const unsigned char x = (unsigned char)c->s[c->i];
        if (x == '"') {
            c->i++;
            return true;
        }
        if (x == 0)
            return fail(c, c->i, "a NUL byte in a string");
        if (x < 0x20) {
            char what[96];
            snprintf(what, sizeof(what), "a raw control character (0x%02x) in a string", x);
            return fail_hint(c, c->i, what, ": escape it");
        }
        if (x != '\\') {
            c->i++;
            continue;
        }
        if (c->i + 1 >= c->n)
            break;
        const char e = c->s[c->i + 1];
        if (e == 'u') {
            if (c->i + 6 > c->n || !hex(c->s[c->i + 2]) || !hex(c->s[c->i + 3]) ||
                !hex(c->s[c->i + 4]) || !hex(c->s[c->i + 5]))
                return fail(c, c->i, "a \\u escape without four hex digits");
            if (!memcmp(c->s + c->i + 2, "0000", 4))
                return fail(c, c->i, "a \\u0000 escape (NUL)");
            c->i += 6;
        } else if (e && strchr("\"\\/bfnrt", e)) {
            c->i += 2;
        } else {
            return fail(c, c->i, "an unknown escape in a string");
        }
    }
    return fail(c, open, "a string that never ends");
}

/* A number, c->i on its first character: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?; an
 * integer (no fraction, no exponent) beyond 2^53 is refused. */
static bool number(struct scan *c)
{
    const size_t start = c->i;
    if (c->s[c->i] == '-')
        c->i++;
    if (c->i >= c->n || c->s[c->i] < '0' || c->s[c->i] > '9')
        return fail(c, start, "a '-' without digits");
    const size_t digits = c->i;
    if (c->s[c->i] == '0') {
        c->i++;
        if (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9')
            return fail(c, start, "a number with a leading zero");
    } else {
        while (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9')
            c->i++;
    }
    const size_t int_end = c->i;
    bool integer = true;
    if (c->i < c->n && c->s[c->i] == '.') {
        integer = false;
        c->i++;
        if (c->i >= c->n || c->s[c->i] < '0' || c->s[c->i] > '9')
            return fail(c, start, "a number with no digit after its '.'");
        while (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9')
            c->i++;
    }
    if (c->i < c->n && (c->s[c->i] == 'e' || c->s[c->i] == 'E')) {
        integer = false;
        c->i++;
        if (c->i < c->n && (c->s[c->i] == '+' || c->s[c->i] == '-'))
            c->i++;
        if (c->i >= c->n || c->s[c->i] < '0' || c->s[c->i] > '9')
            return fail(c, start, "a number with no digit in its exponent");
        while (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9')
            c->i++;
    }
    if (integer) { /* 2^53 = 9007199254740992, 16 digits */
        const size_t nd = int_end - digits;
        const char *lim = "9007199254740992";
        if (nd > 16 || (nd == 16 && memcmp(c->s + digits, lim, 16) > 0))
            return fail_hint(c, start, "an integer beyond 2^53",
                             ": a JSON number does not carry it exactly (give a seed that large "
                             "as a decimal string)");
    }
    return true;
}

static bool literal(struct scan *c, const char *word)
{
    const size_t k = strlen(word);
    if (c->n - c->i < k || memcmp(c->s + c->i, word, k) != 0)
        return false;
    c->i += k;
    return true;
}

bool weft_json_strict(const char *s, size_t len, int max_depth, char *why, size_t why_len)
{
    struct scan c = {s, len, 0, why, why_len};
    if (max_depth > DEPTH_MAX)
        max_depth = DEPTH_MAX;
    if (len >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3))
        return fail(&c, 0, "a byte-order mark");
    char stack[DEPTH_MAX]; /* '{' or '[' of each open container */
    int depth = 0;
    /* expecting a value (or, right after '[' or '{', the container's end or a key) */
    for (;;) {
        space(&c);
        if (c.i >= c.n)
            return fail(&c, c.i, depth ? "the JSON text ends inside an array or object"
                                       : "no JSON value");
        const char x = s[c.i];
        if (x == '{' || x == '[') {
            if (depth >= max_depth) {
                char what[64];
                snprintf(what, sizeof(what), "arrays and objects nested deeper than %d",
                         max_depth);
                return fail(&c, c.i, what);
            }
            stack[depth++] = x;
            c.i++;
            space(&c);
            if (c.i < c.n && s[c.i] == (x == '{' ? '}' : ']')) {
                c.i++;
                depth--;
                goto after_value;
            }
            if (x == '[')
                continue;
            goto key;
        }
        if (x == '"') {
            if (!string(&c))
                return false;
        } else if (x == '-' || (x >= '0' && x <= '9')) {
            if (!number(&c))
                return false;
        } else if (!literal(&c, "true") && !literal(&c, "false") && !literal(&c, "null")) {
            return unexpected(&c, "a character that begins no JSON value");
        }
    after_value:
        space(&c);
        if (depth == 0) {
            if (c.i < c.n)
                return fail(&c, c.i, s[c.i] ? "data after the JSON value"
                                             : "a NUL byte after the JSON value");
            return true;
        }
        const char open = stack[depth - 1];
        if (c.i < c.n && s[c.i] == (open == '{' ? '}' : ']')) {
            c.i++;
            depth--;
            goto after_value;
        }
        if (c.i >= c.n || s[c.i] != ',')
            return unexpected(&c, open == '{' ? "expected ',' or '}'" : "expected ',' or ']'");
        c.i++;
        if (open == '[')
            continue;
    key:
        space(&c);
        if (c.i >= c.n || s[c.i] != '"')
            return unexpected(&c, "expected a string key");
        if (!string(&c))
            return false;
        space(&c);
        if (c.i >= c.n || s[c.i] != ':')
            return unexpected(&c, "expected ':' after a key");
        c.i++;
    }
}
