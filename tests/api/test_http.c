/* coordinator/http.c: requests whole, byte by byte and pipelined; every limit and malformed
 * input answered with its status code; the API's routes and bearer-token check. */
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/utf8.h"
#include "coordinator/http.h"
#include "coordinator/internal.h"
#include "test.h"

static struct weft_http_parser *parser(size_t max_header, uint64_t max_body)
{
    struct weft_http_limits l = {.max_header = max_header, .max_headers = 20,
                                 .max_body = max_body};
    struct weft_http_parser *p;
    CHECK_OK(weft_http_parser_create(&l, &p));
    return p;
}

/* Feed text in pieces of `step` bytes (0: all at once) until an event other than NEED_MORE
 * and HEADERS; returns it, *off tells how much of text was consumed. */
static enum weft_http_event run(struct weft_http_parser *p, const char *text, size_t len,
                                size_t step, size_t *off)
{
    size_t o = *off;
    for (int guard = 0; guard < 100000; guard++) {
        size_t n = len - o;
        if (step && n > step)
            n = step;
        size_t used;
        enum weft_http_event ev = weft_http_parser_feed(p, text + o, n, &used);
        o += used;
        CHECK(used <= n);
        if (ev == WEFT_HTTP_MESSAGE || ev == WEFT_HTTP_BAD) {
            *off = o;
            return ev;
        }
        if (ev == WEFT_HTTP_NEED_MORE && o == len) {
            *off = o;
            return ev;
        }
    }
    CHECK(!"parser made no progress");
    return WEFT_HTTP_BAD;
}

static int bad_code(const char *text, size_t max_header, uint64_t max_body, const char *want)
{
    struct weft_http_parser *p = parser(max_header, max_body);
    size_t off = 0;
    enum weft_http_event ev = run(p, text, strlen(text), 0, &off);
    int code = 0;
    if (ev == WEFT_HTTP_BAD) {
        const char *why;
        code = weft_http_parser_error(p, &why);
        if (want && !strstr(why, want)) {
            fprintf(stderr, "reason \"%s\" lacks \"%s\"\n", why, want);
            CHECK(0);
        }
        /* stays bad */
        size_t used;
        CHECK(weft_http_parser_feed(p, "GET / HTTP/1.1\r\n\r\n", 18, &used) == WEFT_HTTP_BAD);
        CHECK_EQ(used, 0);
    }
    weft_http_parser_destroy(p);
    return code;
}

static void test_whole_and_bytewise(void)
{
    const char *req = "POST /v1/jobs?x=1 HTTP/1.1\r\n"
                      "Host: localhost\r\n"
                      "Authorization: Bearer s3cret\r\n"
                      "Content-Type: application/json\r\n"
                      "X-Long-Ignored-Header-Name-Beyond-Thirty-Two-Bytes: 1\r\n"
                      "Content-Length: 11\r\n"
                      "\r\n"
                      "{\"a\": true}";
    for (size_t step = 0; step <= 7; step += 1) {
        struct weft_http_parser *p = parser(4096, 1024);
        size_t off = 0;
        CHECK(run(p, req, strlen(req), step, &off) == WEFT_HTTP_MESSAGE);
        CHECK_EQ(off, strlen(req));
        const struct weft_http_request *r = weft_http_parser_request(p);
        CHECK(r->method == WEFT_HTTP_POST);
        CHECK(strcmp(r->target, "/v1/jobs?x=1") == 0);
        CHECK(strcmp(r->authorization, "Bearer s3cret") == 0);
        CHECK(strcmp(r->content_type, "application/json") == 0);
        CHECK(r->keep_alive);
        CHECK_EQ(r->body_len, 11);
        CHECK(strcmp(r->body, "{\"a\": true}") == 0);
        weft_http_parser_destroy(p);
    }
}

/* RFC 9112 section 3.2.2: the absolute form is taken, its path and query asked for. */
static void test_absolute_form(void)
{
    static const char *const forms[][2] = {
        {"GET http://x:8642/v1/models HTTP/1.1\r\nHost: x:8642\r\n\r\n", "/v1/models"},
        {"GET HTTPS://x/v1/jobs?state=done HTTP/1.1\r\nHost: x\r\n\r\n", "/v1/jobs?state=done"},
        {"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", "/v1/models"}};
    for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
        struct weft_http_parser *p = parser(4096, 1024);
        size_t off = 0;
        CHECK(run(p, forms[i][0], strlen(forms[i][0]), 0, &off) == WEFT_HTTP_MESSAGE);
        CHECK(strcmp(weft_http_parser_request(p)->target, forms[i][1]) == 0);
        weft_http_parser_destroy(p);
    }
    CHECK_EQ(bad_code("GET http://x?a=1 HTTP/1.1\r\nHost: x\r\n\r\n", 4096, 1000,
                      "without a path"), 400);
}

static void test_pipelined_and_chunked(void)
{
    const char *two = "GET /v1/cluster HTTP/1.1\r\nHost: a\r\n\r\n"
                      "POST /v1/jobs HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                      "4\r\n{\"a\"\r\n3\r\n: 1\r\n1\r\n}\r\n0\r\n\r\n"
                      "DELETE /v1/jobs/0123 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
    struct weft_http_parser *p = parser(4096, 1024);
    size_t off = 0, len = strlen(two);
    CHECK(run(p, two, len, 0, &off) == WEFT_HTTP_MESSAGE);
    CHECK(strcmp(weft_http_parser_request(p)->target, "/v1/cluster") == 0);
    CHECK(weft_http_parser_request(p)->body == NULL);
    weft_http_parser_next(p);
    CHECK(run(p, two, len, 0, &off) == WEFT_HTTP_MESSAGE);
    const struct weft_http_request *r = weft_http_parser_request(p);
    CHECK(r->has_body);
    CHECK(strcmp(r->body, "{\"a\": 1}") == 0);
    weft_http_parser_next(p);
    CHECK(!weft_http_parser_busy(p));
    CHECK(run(p, two, len, 0, &off) == WEFT_HTTP_MESSAGE);
    r = weft_http_parser_request(p);
    CHECK(r->method == WEFT_HTTP_DELETE);
    CHECK(!r->keep_alive);
    CHECK_EQ(off, len);
    weft_http_parser_destroy(p);

    /* HTTP/1.0 without keep-alive closes; a request cut short at EOF is bad */
    p = parser(4096, 1024);
    off = 0;
    const char *old = "GET / HTTP/1.0\r\n\r\n";
    CHECK(run(p, old, strlen(old), 0, &off) == WEFT_HTTP_MESSAGE);
    CHECK(!weft_http_parser_request(p)->keep_alive);
    weft_http_parser_next(p);
    CHECK(weft_http_parser_eof(p) == WEFT_HTTP_NEED_MORE);
    weft_http_parser_destroy(p);
    p = parser(4096, 1024);
    size_t used;
    CHECK(weft_http_parser_feed(p, "GET /x HT", 9, &used) == WEFT_HTTP_NEED_MORE);
    CHECK(weft_http_parser_busy(p));
    CHECK(weft_http_parser_eof(p) == WEFT_HTTP_BAD);
    weft_http_parser_destroy(p);
}

static void test_headers_event(void)
{
    /* the server acts at the headers: the body is not read before it says so */
    const char *req = "POST /v1/jobs HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n"
                      "Content-Length: 5\r\n\r\n";
    struct weft_http_parser *p = parser(4096, 1024);
    size_t used;
    CHECK(weft_http_parser_feed(p, req, strlen(req), &used) == WEFT_HTTP_HEADERS);
    CHECK_EQ(used, strlen(req));
    CHECK(weft_http_parser_request(p)->expect_continue);
    CHECK(weft_http_parser_request(p)->content_length == 5);
    CHECK(weft_http_parser_feed(p, "", 0, &used) == WEFT_HTTP_NEED_MORE);
    CHECK(weft_http_parser_feed(p, "hello", 5, &used) == WEFT_HTTP_MESSAGE);
    CHECK(strcmp(weft_http_parser_request(p)->body, "hello") == 0);
    weft_http_parser_destroy(p);
}

static void test_limits_and_garbage(void)
{
    char big[8192];
    /* body over the limit, by Content-Length (refused before any byte of it) or chunked */
    CHECK_EQ(bad_code("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2000\r\n\r\n", 4096, 1000,
                      "max_body"), 413);
    CHECK_EQ(bad_code("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                      "400\r\n", 4096, 1000, NULL), 0); /* needs more: not over yet */
    snprintf(big, sizeof(big),
             "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%0*d", 1200,
             1200, 0);
    CHECK_EQ(bad_code(big, 4096, 1000, "max_body"), 413);
    /* target and headers over the limit */
    snprintf(big, sizeof(big), "GET /%0*d HTTP/1.1\r\n\r\n", 3000, 0);
    CHECK_EQ(bad_code(big, 1024, 1000, "target"), 414);
    snprintf(big, sizeof(big), "GET / HTTP/1.1\r\nX-Big: %0*d\r\n\r\n", 3000, 0);
    CHECK_EQ(bad_code(big, 1024, 1000, "headers"), 431);
    size_t o = (size_t)snprintf(big, sizeof(big), "GET / HTTP/1.1\r\n");
    for (int i = 0; i < 30; i++)
        o += (size_t)snprintf(big + o, sizeof(big) - o, "X-%d: 1\r\n", i);
    snprintf(big + o, sizeof(big) - o, "\r\n");
    CHECK_EQ(bad_code(big, 4096, 1000, "too many"), 431);
    /* malformed */
    CHECK_EQ(bad_code("\x16\x03\x01\x02\x00garbage\r\n\r\n", 4096, 1000, NULL), 400);
    CHECK(bad_code("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 4096, 1000, NULL) >= 400);
    CHECK_EQ(bad_code("GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 4096,
                      1000, NULL), 400);
    CHECK_EQ(bad_code("POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
                      4096, 1000, NULL), 400);
    CHECK_EQ(bad_code("GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 4096, 1000, NULL), 400);
    CHECK_EQ(bad_code("GET / HTTP/1.1\r\nAuthorization: a\r\nAuthorization: b\r\n\r\n", 4096,
                      1000, "Authorization"), 400);
    CHECK_EQ(bad_code("GET / HTTP/1.1\r\nExpect: 200-ok\r\n\r\n", 4096, 1000, "Expect"), 417);
    CHECK_EQ(bad_code("GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n",
                      4096, 1000, "upgrade"), 501);
    CHECK(bad_code("GET / HTTP/3.7\r\n\r\n", 4096, 1000, NULL) >= 400);
}

/* What llhttp lets through and RFC 9112 does not. */
static void test_versions_and_host(void)
{
    /* no version is HTTP/0.9 to llhttp; HTTP/2.0 is a version it knows */
    CHECK_EQ(bad_code("GET /healthz\r\n\r\n", 4096, 1000, "HTTP/0.9"), 400);
    CHECK_EQ(bad_code("GET /healthz HTTP/0.9\r\n\r\n", 4096, 1000, "HTTP/0.9"), 400);
    CHECK_EQ(bad_code("GET / HTTP/2.0\r\nHost: a\r\n\r\n", 4096, 1000, "version"), 505);
    CHECK_EQ(bad_code("GET / HTTP/4.0\r\nHost: a\r\n\r\n", 4096, 1000, "version"), 505);
    CHECK_EQ(bad_code("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 4096, 1000, "version"), 505);
    /* section 5.1: no whitespace between a field name and its colon */
    CHECK_EQ(bad_code("GET / HTTP/1.1\r\nHost : a\r\n\r\n", 4096, 1000, "whitespace"), 400);
    CHECK_EQ(bad_code("GET / HTTP/1.0\r\nX-A  : 1\r\n\r\n", 4096, 1000, "whitespace"), 400);
    /* section 3.2: exactly one Host in HTTP/1.1; HTTP/1.0 needs none */
    CHECK_EQ(bad_code("GET / HTTP/1.1\r\n\r\n", 4096, 1000, "Host"), 400);
    CHECK_EQ(bad_code("GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n", 4096, 1000, "Host"), 400);
    CHECK_EQ(bad_code("GET / HTTP/1.1\r\nHost: a\r\n\r\n", 4096, 1000, NULL), 0);
    CHECK_EQ(bad_code("GET / HTTP/1.1\r\nHost:\r\n\r\n", 4096, 1000, NULL), 0);
    /* and a valid one (it becomes the base of the URLs the OpenAI endpoint answers with) */
    static const char *const hosts_ok[] = {"localhost:8642", "127.0.0.1", "[::1]:80",
                                           "my-host.example", "a_b~c%41"};
    static const char *const hosts_bad[] = {"evil.example/x?y=", "a\"b", "a b", "u@h",
                                            "h:80x", "[::1", "[zz]", "h:8/"};
    char req[160];
    for (size_t i = 0; i < sizeof(hosts_ok) / sizeof(hosts_ok[0]); i++) {
        snprintf(req, sizeof(req), "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", hosts_ok[i]);
        CHECK_EQ(bad_code(req, 4096, 1000, NULL), 0);
    }
    for (size_t i = 0; i < sizeof(hosts_bad) / sizeof(hosts_bad[0]); i++) {
        snprintf(req, sizeof(req), "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", hosts_bad[i]);
        CHECK_EQ(bad_code(req, 4096, 1000, "invalid Host"), 400);
    }
    CHECK_EQ(bad_code("GET / HTTP/1.0\r\n\r\n", 4096, 1000, NULL), 0);
    /* and per request: the second request of a connection needs its own Host */
    struct weft_http_parser *p = parser(4096, 1000);
    const char *two = "GET / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\n\r\n";
    size_t off = 0;
    CHECK(run(p, two, strlen(two), 0, &off) == WEFT_HTTP_MESSAGE);
    weft_http_parser_next(p);
    CHECK(run(p, two, strlen(two), 0, &off) == WEFT_HTTP_BAD);
    weft_http_parser_destroy(p);
}

static void test_routes_and_auth(void)
{
    struct weft_api_route r;
    CHECK(weft_api_match("/v1/jobs", &r) && r.kind == WEFT_ROUTE_JOBS);
    CHECK(weft_api_match("/v1/jobs/?state=done", &r) && r.kind == WEFT_ROUTE_JOBS);
    CHECK(weft_api_match("/v1/jobs/0123456789abcdef", &r) && r.kind == WEFT_ROUTE_JOB);
    CHECK(strcmp(r.id, "0123456789abcdef") == 0);
    CHECK(weft_api_match("/v1/jobs/00ab/images/12", &r) && r.kind == WEFT_ROUTE_JOB_IMAGE);
    CHECK_EQ(r.image, 12);
    CHECK(weft_api_match("/v1/cluster", &r) && r.kind == WEFT_ROUTE_CLUSTER);
    CHECK(weft_api_match("/metrics", &r) && r.kind == WEFT_ROUTE_METRICS);
    CHECK(!weft_api_match("/v1/jobs/0123456789abcdef0", &r)); /* id too long */
    CHECK(!weft_api_match("/v1/jobs/00ab/images/01", &r));
    CHECK(!weft_api_match("/v1/jobs/00ab/images/-1", &r));
    CHECK(!weft_api_match("/v1/jobs/00ab/images/9999999", &r));
    CHECK(!weft_api_match("/v1/jobsx", &r));
    CHECK(!weft_api_match("/v2/jobs", &r));
    CHECK(!weft_api_match("", &r));

    /* query values, percent-decoded (RFC 3986 section 2.1); a stray '%' and %00 kept */
    char v[16];
    CHECK(weft_api_query("/i?format=jpeg&quality=%35%30", "quality", v, sizeof(v)));
    CHECK(strcmp(v, "50") == 0);
    CHECK(weft_api_query("/i?a=%7e%2Fx%", "a", v, sizeof(v)) && strcmp(v, "~/x%") == 0);
    CHECK(weft_api_query("/i?a=%zz%4&b", "a", v, sizeof(v)) && strcmp(v, "%zz%4") == 0);
    CHECK(weft_api_query("/i?a=%00", "a", v, sizeof(v)) && strcmp(v, "%00") == 0);
    CHECK(weft_api_query("/i?a=&b", "a", v, sizeof(v)) && v[0] == '\0');
    CHECK(weft_api_query("/i?b&a=123456789012345678901", "a", v, sizeof(v)) &&
          strcmp(v, "123456789012345") == 0); /* cut to the buffer */
    CHECK(!weft_api_query("/i?ab=1", "a", v, sizeof(v)));

    CHECK(weft_api_auth_ok("", NULL));
    CHECK(weft_api_auth_ok("", "Bearer anything"));
    CHECK(weft_api_auth_ok("tok", "Bearer tok"));
    CHECK(weft_api_auth_ok("tok", "bearer  tok "));
    CHECK(!weft_api_auth_ok("tok", NULL));
    CHECK(!weft_api_auth_ok("tok", "Bearer tok2"));
    CHECK(!weft_api_auth_ok("tok", "Bearer to"));
    CHECK(!weft_api_auth_ok("tok", "Bearer "));
    CHECK(!weft_api_auth_ok("tok", "Basic dG9rOg=="));
}

/* The length of the "error" text of a JSON body. */
static size_t error_len(const char *body)
{
    cJSON *j = cJSON_Parse(body);
    CHECK(j && cJSON_IsString(cJSON_GetObjectItem(j, "error")));
    size_t n = strlen(cJSON_GetObjectItem(j, "error")->valuestring);
    cJSON_Delete(j);
    return n;
}

/* Error bodies stay UTF-8 JSON of a bounded size whatever the message quotes. */
static void test_error_bodies(void)
{
    struct weft_api_response r = {0};
    weft_api_error(&r, 404, "no job \xff\xfe\xc3(\xe2\x82\xac)");
    CHECK(strcmp(r.body, "{\"error\":\"no job \\\\xff\\\\xfe\\\\xc3(\xe2\x82\xac)\"}") == 0);
    CHECK_EQ(r.code, 404);
    static char big[4000];
    for (size_t i = 0; i + 2 < sizeof(big); i += 2)
        memcpy(big + i, "\xc3\xa9", 2); /* e-acute: a cut inside one would be invalid */
    weft_api_error(&r, 400, big);
    CHECK(weft_utf8_valid(r.body, r.len, NULL));
    CHECK(strstr(r.body, "\xc3\xa9...\"}"));
    CHECK(error_len(r.body) <= 483);
    memset(big, 0xff, sizeof(big) - 1);
    weft_api_error(&r, 400, big);
    CHECK(weft_utf8_valid(r.body, r.len, NULL));
    CHECK(error_len(r.body) <= 483);
    weft_free(r.body);
}

int main(void)
{
    test_quiet();
    test_whole_and_bytewise();
    test_absolute_form();
    test_pipelined_and_chunked();
    test_headers_event();
    test_limits_and_garbage();
    test_versions_and_host();
    test_routes_and_auth();
    test_error_bodies();
    printf("ok\n");
    return 0;
}
