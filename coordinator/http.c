/* HTTP/1.1 request parsing on top of llhttp, with every size bounded before it is stored. */
#include "coordinator/http.h"

#include <ctype.h>
#include <llhttp.h>
#include <string.h>
#include <strings.h>

#include "common/alloc.h"

enum phase {
    PHASE_IDLE,    /* between requests */
    PHASE_HEADERS, /* request line and headers */
    PHASE_BODY,    /* headers reported, body being read */
    PHASE_DONE,    /* message reported, waiting for next() */
    PHASE_BAD,
};

/* Which header the value being read belongs to. */
enum hdr {
    HDR_NONE,
    HDR_AUTHORIZATION,
    HDR_CONTENT_TYPE,
    HDR_EXPECT,
    HDR_ORIGIN,
    HDR_IDEMPOTENCY_KEY,
    HDR_HOST,
};

struct weft_http_parser {
    llhttp_t ll;
    llhttp_settings_t settings;
    struct weft_http_limits lim;
    enum phase phase;
    enum weft_http_event pause_event; /* what a HPE_PAUSED from llhttp means */
    struct weft_http_request req;
    /* The request line and interesting header values, NUL-separated, in one buffer of
     * max_header bytes; header names are matched as they stream in and not kept. */
    char *hdr;
    size_t hdr_len;     /* bytes stored */
    size_t hdr_seen;    /* bytes of request line and headers seen (stored or not) */
    size_t n_headers;
    size_t target_off;
    char name[32];      /* the current header name (long names are not interesting) */
    size_t name_len;
    bool name_long;
    enum hdr cur;
    size_t value_off;   /* start of the current kept value in hdr */
    bool have_auth;
    int n_host;         /* Host header lines (RFC 9112 section 3.2: exactly one in 1.1) */
    uint64_t body_cap;
    int err_code;
    const char *err_reason;
};

static int fail(struct weft_http_parser *p, int code, const char *reason)
{
    p->err_code = code;
    p->err_reason = reason;
    return HPE_USER;
}

/* Count n more bytes of request line or headers; store them when store is set. */
static int hdr_take(struct weft_http_parser *p, const char *at, size_t n, bool store)
{
    if (n > p->lim.max_header - p->hdr_seen)
        return fail(p, p->req.target ? 431 : 414,
                    p->req.target ? "request headers larger than the limit ([api] max_header)"
                                  : "request target longer than the limit ([api] max_header)");
    p->hdr_seen += n;
    if (store) {
        memcpy(p->hdr + p->hdr_len, at, n);
        p->hdr_len += n;
    }
    return 0;
}

static int hdr_end_string(struct weft_http_parser *p)
{
    /* hdr holds max_header + max_headers + 8 bytes: one terminator per kept header value
     * (at most one per header line) and one for the target always fit */
    p->hdr[p->hdr_len++] = '\0';
    return 0;
}

static struct weft_http_parser *parser_of(llhttp_t *ll)
{
    return (struct weft_http_parser *)ll->data;
}

static int on_message_begin(llhttp_t *ll)
{
    struct weft_http_parser *p = parser_of(ll);
    p->phase = PHASE_HEADERS;
    return 0;
}

static int on_url(llhttp_t *ll, const char *at, size_t n)
{
    return hdr_take(parser_of(ll), at, n, true);
}

static int on_url_complete(llhttp_t *ll)
{
    struct weft_http_parser *p = parser_of(ll);
    hdr_end_string(p);
    p->req.target = p->hdr + p->target_off;
    return 0;
}

static int on_header_field(llhttp_t *ll, const char *at, size_t n)
{
    struct weft_http_parser *p = parser_of(ll);
    int rc = hdr_take(p, at, n, false);
    if (rc)
        return rc;
    /* llhttp lets "Host : x" through with the space in the name; RFC 9112 section 5.1 says a
     * server must reject it (proxies disagree on what such a name means: smuggling) */
    if (memchr(at, ' ', n) || memchr(at, '\t', n))
        return fail(p, 400, "whitespace between a header field name and its colon");
    if (p->name_len + n >= sizeof(p->name)) {
        p->name_long = true;
        return 0;
    }
    memcpy(p->name + p->name_len, at, n);
    p->name_len += n;
    return 0;
}

static int on_header_field_complete(llhttp_t *ll)
{
    struct weft_http_parser *p = parser_of(ll);
    if (++p->n_headers > p->lim.max_headers)
        return fail(p, 431, "too many request headers");
    p->name[p->name_len] = '\0';
    p->cur = HDR_NONE;
    if (!p->name_long) {
        if (strcasecmp(p->name, "authorization") == 0) {
            if (p->have_auth)
                return fail(p, 400, "more than one Authorization header");
            p->have_auth = true;
            p->cur = HDR_AUTHORIZATION;
        } else if (strcasecmp(p->name, "content-type") == 0) {
            p->cur = HDR_CONTENT_TYPE;
        } else if (strcasecmp(p->name, "expect") == 0) {
            p->cur = HDR_EXPECT;
        } else if (strcasecmp(p->name, "origin") == 0) {
            p->cur = HDR_ORIGIN;
        } else if (strcasecmp(p->name, "idempotency-key") == 0) {
            if (p->req.idempotency_key)
                return fail(p, 400, "more than one Idempotency-Key header");
            p->cur = HDR_IDEMPOTENCY_KEY;
        } else if (strcasecmp(p->name, "host") == 0) {
            if (++p->n_host > 1)
                return fail(p, 400, "more than one Host header");
            p->cur = HDR_HOST;
        }
    }
    p->name_len = 0;
    p->name_long = false;
    p->value_off = p->hdr_len;
    return 0;
}

static int on_header_value(llhttp_t *ll, const char *at, size_t n)
{
    struct weft_http_parser *p = parser_of(ll);
    return hdr_take(p, at, n, p->cur != HDR_NONE);
}

/* RFC 9112 section 3.2's Host: uri-host [":" port], uri-host an IP-literal ("[" v6 "]") or a
 * reg-name / IPv4 (unreserved, pct-encoded, sub-delims); empty is allowed (an absolute target
 * with no authority). A value with '/', '?', '@', a space or a quote is refused. */
static bool host_ok(const char *v)
{
    size_t i = 0;
    if (v[0] == '[') {
        for (i = 1; v[i] && v[i] != ']'; i++)
            if (!isxdigit((unsigned char)v[i]) && v[i] != ':' && v[i] != '.')
                return false;
        if (v[i++] != ']')
            return false;
    } else {
        for (; v[i] && v[i] != ':'; i++)
            if (!isalnum((unsigned char)v[i]) && !strchr("-._~%!$&'()*+,;=", v[i]))
                return false;
    }
    if (v[i] == ':')
        for (i++; v[i]; i++)
            if (!isdigit((unsigned char)v[i]))
                return false;
    return v[i] == '\0';
}

static int on_header_value_complete(llhttp_t *ll)
{
    struct weft_http_parser *p = parser_of(ll);
    if (p->cur == HDR_NONE)
        return 0;
    hdr_end_string(p);
    const char *v = p->hdr + p->value_off;
    switch (p->cur) {
    case HDR_AUTHORIZATION:
        p->req.authorization = v;
        break;
    case HDR_CONTENT_TYPE:
        p->req.content_type = v; /* the last one wins, as nothing depends on it but a check */
        break;
    case HDR_EXPECT:
        if (strcasecmp(v, "100-continue") != 0)
            return fail(p, 417, "unsupported Expect header (only 100-continue)");
        p->req.expect_continue = true;
        break;
    case HDR_ORIGIN:
        p->req.origin = v;
        break;
    case HDR_IDEMPOTENCY_KEY:
        p->req.idempotency_key = v;
        break;
    case HDR_HOST:
        if (!host_ok(v))
            return fail(p, 400, "invalid Host header (RFC 9112: host[:port])");
        p->req.host = v;
        break;
    case HDR_NONE:
        break;
    }
    p->cur = HDR_NONE;
    return 0;
}

static enum weft_http_method method_of(uint8_t m)
{
    switch (m) {
    case HTTP_GET:
        return WEFT_HTTP_GET;
    case HTTP_HEAD:
        return WEFT_HTTP_HEAD;
    case HTTP_POST:
        return WEFT_HTTP_POST;
    case HTTP_PUT:
        return WEFT_HTTP_PUT;
    case HTTP_DELETE:
        return WEFT_HTTP_DELETE;
    case HTTP_OPTIONS:
        return WEFT_HTTP_OPTIONS;
    default:
        return WEFT_HTTP_OTHER;
    }
}

static int on_headers_complete(llhttp_t *ll)
{
    struct weft_http_parser *p = parser_of(ll);
    struct weft_http_request *r = &p->req;
    if (!r->target)
        return fail(p, 400, "request without a target");
    /* RFC 9112 section 3.2.2: a server must accept the absolute form (what a client sends to a
     * proxy); the path and query are what it asks for */
    if (strncasecmp(r->target, "http://", 7) == 0 || strncasecmp(r->target, "https://", 8) == 0) {
        const char *auth = strstr(r->target, "//") + 2;
        const char *path = auth + strcspn(auth, "/?#");
        if (*path != '/')
            return fail(p, 400, "absolute request target without a path");
        r->target = path;
    }
    /* llhttp takes a request line without a version as HTTP/0.9 and accepts HTTP/2.0 in a
     * request line; neither is the HTTP/1.x this parser speaks */
    if (ll->http_major == 0)
        return fail(p, 400, "request line without HTTP/1.0 or HTTP/1.1 (HTTP/0.9 is not "
                            "supported)");
    if (ll->http_major != 1)
        return fail(p, 505, "unsupported HTTP version (HTTP/1.0 and HTTP/1.1 only)");
    if (ll->http_minor >= 1 && p->n_host == 0)
        return fail(p, 400, "HTTP/1.1 request without a Host header");
    if (ll->method == HTTP_CONNECT ||
        ((ll->flags & F_UPGRADE) && (ll->flags & F_CONNECTION_UPGRADE)))
        return fail(p, 501, "protocol upgrades and CONNECT are not supported");
    r->method = method_of(ll->method);
    r->method_name = llhttp_method_name((llhttp_method_t)ll->method);
    r->http_minor = ll->http_minor;
    r->keep_alive = llhttp_should_keep_alive(ll) != 0;
    bool chunked = (ll->flags & F_CHUNKED) != 0;
    bool has_length = (ll->flags & F_CONTENT_LENGTH) != 0;
    r->content_length = has_length ? ll->content_length : 0;
    r->has_body = chunked || (has_length && ll->content_length > 0);
    if (has_length && ll->content_length > p->lim.max_body)
        return fail(p, 413, "request body larger than the limit ([api] max_body)");
    p->body_cap = has_length ? ll->content_length : 0;
    if (p->body_cap) {
        r->body = weft_malloc((size_t)p->body_cap + 1);
        if (!r->body)
            return fail(p, 500, "out of memory for the request body");
    }
    p->phase = PHASE_BODY;
    p->pause_event = WEFT_HTTP_HEADERS;
    return HPE_PAUSED;
}

static int on_body(llhttp_t *ll, const char *at, size_t n)
{
    struct weft_http_parser *p = parser_of(ll);
    struct weft_http_request *r = &p->req;
    if (n > p->lim.max_body - r->body_len)
        return fail(p, 413, "request body larger than the limit ([api] max_body)");
    if (r->body_len + n > p->body_cap) { /* chunked: grow geometrically, within the limit */
        uint64_t cap = p->body_cap ? p->body_cap * 2 : 4096;
        while (cap < r->body_len + n)
            cap *= 2;
        if (cap > p->lim.max_body)
            cap = p->lim.max_body;
        char *b = weft_realloc(r->body, (size_t)cap + 1);
        if (!b)
            return fail(p, 500, "out of memory for the request body");
        r->body = b;
        p->body_cap = cap;
    }
    memcpy(r->body + r->body_len, at, n);
    r->body_len += n;
    return 0;
}

static int on_message_complete(llhttp_t *ll)
{
    struct weft_http_parser *p = parser_of(ll);
    struct weft_http_request *r = &p->req;
    if (r->body)
        r->body[r->body_len] = '\0';
    r->keep_alive = llhttp_should_keep_alive(ll) != 0;
    p->phase = PHASE_DONE;
    p->pause_event = WEFT_HTTP_MESSAGE;
    return HPE_PAUSED;
}

static void request_reset(struct weft_http_parser *p)
{
    weft_free(p->req.body);
    p->req = (struct weft_http_request){0};
    p->hdr_len = p->hdr_seen = p->n_headers = 0;
    p->target_off = 0;
    p->name_len = 0;
    p->name_long = false;
    p->cur = HDR_NONE;
    p->have_auth = false;
    p->n_host = 0;
    p->body_cap = 0;
    p->phase = PHASE_IDLE;
}

weft_status_t weft_http_parser_create(const struct weft_http_limits *limits,
                                      struct weft_http_parser **parser_p)
{
    struct weft_http_parser *p = weft_calloc(1, sizeof(*p));
    if (!p)
        return WEFT_ERR_NOMEM;
    p->lim = *limits;
    if (!p->lim.max_headers)
        p->lim.max_headers = 100;
    p->hdr = weft_malloc(p->lim.max_header + p->lim.max_headers + 8);
    if (!p->hdr) {
        weft_free(p);
        return WEFT_ERR_NOMEM;
    }
    llhttp_settings_init(&p->settings);
    p->settings.on_message_begin = on_message_begin;
    p->settings.on_url = on_url;
    p->settings.on_url_complete = on_url_complete;
    p->settings.on_header_field = on_header_field;
    p->settings.on_header_field_complete = on_header_field_complete;
    p->settings.on_header_value = on_header_value;
    p->settings.on_header_value_complete = on_header_value_complete;
    p->settings.on_headers_complete = on_headers_complete;
    p->settings.on_body = on_body;
    p->settings.on_message_complete = on_message_complete;
    llhttp_init(&p->ll, HTTP_REQUEST, &p->settings);
    p->ll.data = p;
    *parser_p = p;
    return WEFT_OK;
}

void weft_http_parser_destroy(struct weft_http_parser *p)
{
    if (!p)
        return;
    weft_free(p->req.body);
    weft_free(p->hdr);
    weft_free(p);
}

static enum weft_http_event bad(struct weft_http_parser *p, int code, const char *reason)
{
    if (!p->err_code) {
        p->err_code = code;
        p->err_reason = reason;
    }
    p->phase = PHASE_BAD;
    return WEFT_HTTP_BAD;
}

enum weft_http_event weft_http_parser_feed(struct weft_http_parser *p, const char *data,
                                           size_t len, size_t *used_p)
{
    *used_p = 0;
    if (p->phase == PHASE_BAD)
        return WEFT_HTTP_BAD;
    if (p->phase == PHASE_DONE)
        return WEFT_HTTP_MESSAGE;
    /* right after the headers, llhttp may complete a body-less message without more input */
    if (len == 0 && p->phase != PHASE_BODY)
        return WEFT_HTTP_NEED_MORE;
    llhttp_errno_t err = llhttp_execute(&p->ll, data, len);
    switch (err) {
    case HPE_OK:
        *used_p = len;
        return WEFT_HTTP_NEED_MORE;
    case HPE_PAUSED: {
        const char *pos = llhttp_get_error_pos(&p->ll);
        *used_p = pos && pos >= data && pos <= data + len ? (size_t)(pos - data) : len;
        llhttp_resume(&p->ll);
        return p->pause_event;
    }
    case HPE_USER:
        return bad(p, p->err_code, p->err_reason);
    case HPE_INVALID_VERSION:
        return bad(p, 505, "unsupported HTTP version (HTTP/1.0 and HTTP/1.1 only)");
    case HPE_PAUSED_UPGRADE:
        return bad(p, 501, "protocol upgrades are not supported");
    case HPE_PAUSED_H2_UPGRADE: /* the HTTP/2 connection preface, "PRI * HTTP/2.0" */
        return bad(p, 505, "unsupported HTTP version (HTTP/1.0 and HTTP/1.1 only)");
    case HPE_INVALID_METHOD:
        return bad(p, 400, "malformed request line: invalid method");
    case HPE_INVALID_URL:
        return bad(p, 400, "malformed request target");
    case HPE_INVALID_CONTENT_LENGTH:
    case HPE_UNEXPECTED_CONTENT_LENGTH:
        return bad(p, 400, "invalid or conflicting Content-Length");
    case HPE_INVALID_TRANSFER_ENCODING:
        return bad(p, 400, "invalid Transfer-Encoding");
    case HPE_INVALID_CHUNK_SIZE:
        return bad(p, 400, "invalid chunk size in a chunked body");
    default:
        return bad(p, 400, "malformed HTTP request");
    }
}

enum weft_http_event weft_http_parser_eof(struct weft_http_parser *p)
{
    if (p->phase == PHASE_BAD)
        return WEFT_HTTP_BAD;
    if (p->phase == PHASE_HEADERS || p->phase == PHASE_BODY)
        return bad(p, 400, "connection closed in the middle of a request");
    return WEFT_HTTP_NEED_MORE;
}

const struct weft_http_request *weft_http_parser_request(const struct weft_http_parser *p)
{
    return &p->req;
}

int weft_http_parser_error(const struct weft_http_parser *p, const char **reason_p)
{
    *reason_p = p->err_reason ? p->err_reason : "malformed HTTP request";
    return p->err_code ? p->err_code : 400;
}

void weft_http_parser_next(struct weft_http_parser *p)
{
    if (p->phase == PHASE_BAD)
        return;
    request_reset(p);
}

bool weft_http_parser_busy(const struct weft_http_parser *p)
{
    return p->phase == PHASE_HEADERS || p->phase == PHASE_BODY;
}

const char *weft_http_reason(int code)
{
    switch (code) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 422: return "Unprocessable Content";
    case 504: return "Gateway Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
    }
}
