/* common/json.h: RFC 8259's grammar before cJSON reads a request, each refusal naming its
 * cause and byte. */
#include <string.h>

#include "common/json.h"
#include "test.h"

static void ok(const char *s)
{
    char why[160] = "";
    if (!weft_json_strict(s, strlen(s), 8, why, sizeof(why))) {
        fprintf(stderr, "refused %s: %s\n", s, why);
        CHECK(false);
    }
}

static void bad_n(const char *s, size_t n, const char *sub)
{
    char why[160] = "";
    if (weft_json_strict(s, n, 8, why, sizeof(why)) || !strstr(why, sub)) {
        fprintf(stderr, "%.60s: \"%s\", want \"%s\"\n", s, why, sub);
        CHECK(false);
    }
}

static void bad(const char *s, const char *sub)
{
    bad_n(s, strlen(s), sub);
}

int main(void)
{
    test_quiet();
    ok("{}");
    ok(" [ ] ");
    ok("\t{\"a\": [1, -0, 0.5, -1.5E-3, 1e+5, 2E7, true, false, null, \"x\"]}\r\n");
    ok("{\"a\": {\"b\": {\"c\": []}}, \"d\": \"\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9\"}");
    ok("\"text\"");
    ok("9007199254740992");  /* 2^53 */
    ok("-9007199254740992");
    ok("12345678901234567890.5"); /* not an integer: a double by intent */
    ok("1e30");
    ok("{\"k\": \"\xc3\xa9 \xe2\x82\xac\"}"); /* UTF-8 passes as it is */
    ok("[[[[[[[[1]]]]]]]]");              /* depth 8, the limit here */

    bad("", "no JSON value at byte 0");
    bad("   ", "no JSON value at byte 3");
    bad("{\"a\": 1", "ends inside an array or object at byte 7");
    bad("{\"a\": 1} x", "data after the JSON value at byte 9");
    bad_n("{}\0", 3, "NUL byte after the JSON value at byte 2");
    bad_n("{\"a\": \"x\0y\"}", 11, "NUL byte in a string at byte 8");
    bad_n("[1,\0]", 5, "NUL byte at byte 3");
    bad("{\"a\": \"x\\u0000y\"}", "\\u0000 escape (NUL) at byte 8");
    bad("{\"a\": \"x\\u00g0\"}", "four hex digits at byte 8");
    bad("{\"a\": \"x\\q\"}", "unknown escape in a string at byte 8");
    bad("{\"a\": \"x", "never ends at byte 6");
    bad("{\"a\": \"x\x1fy\"}", "raw control character (0x1f) in a string at byte 8: escape it");
    bad("{\"a\": \"x\ty\"}", "raw control character (0x09)");
    bad("[01]", "leading zero at byte 1");
    bad("[-01]", "leading zero at byte 1");
    bad("[5.]", "no digit after its '.' at byte 1");
    bad("[.5]", "begins no JSON value at byte 1");
    bad("[1e]", "no digit in its exponent");
    bad("[-]", "'-' without digits");
    bad("[+1]", "begins no JSON value");
    bad("[9007199254740993]", "beyond 2^53 at byte 1");
    bad("[-9007199254740993]", "beyond 2^53");
    bad("[18446744073709551615]", "beyond 2^53");
    bad("[1,\v2]", "not JSON whitespace at byte 3");
    bad("\xEF\xBB\xBF{}", "byte-order mark at byte 0");
    bad("[1 2]", "expected ',' or ']' at byte 3");
    bad("{\"a\" 1}", "expected ':' after a key at byte 5");
    bad("{\"a\": 1,}", "expected a string key at byte 8");
    bad("{1: 2}", "expected a string key at byte 1");
    bad("[1,]", "begins no JSON value at byte 3");
    bad("[tru]", "begins no JSON value at byte 1");
    bad("[NaN]", "begins no JSON value");
    bad("[Infinity]", "begins no JSON value");
    bad("[[[[[[[[[1]]]]]]]]]", "nested deeper than 8 at byte 8");
    return 0;
}
