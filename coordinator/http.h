/* HTTP/1.1 requests from a byte stream: llhttp does the grammar (request line, headers,
 * Content-Length and chunked bodies, keep-alive, request smuggling checks); this layer bounds
 * every size before anything is stored, refuses what llhttp lets through but RFC 9112 does not
 * (no version or HTTP/0.9: 400; HTTP/2.0 and other majors: 505; whitespace before a header's
 * colon, an HTTP/1.1 request without exactly one Host: 400), keeps the headers the API uses
 * and stops at the two points where the server must act: headers complete (authenticate,
 * refuse an oversized body, answer "Expect: 100-continue") and message complete.
 *
 * No I/O, no allocation proportional to anything but the limits: the server feeds it what it
 * reads, the fuzz target feeds it anything. */
#ifndef WEFT_COORDINATOR_HTTP_H
#define WEFT_COORDINATOR_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

enum weft_http_method {
    WEFT_HTTP_GET,
    WEFT_HTTP_HEAD,
    WEFT_HTTP_POST,
    WEFT_HTTP_PUT,
    WEFT_HTTP_DELETE,
    WEFT_HTTP_OPTIONS,
    WEFT_HTTP_OTHER,
};

struct weft_http_limits {
    size_t max_header; /* request line + header names and values */
    size_t max_headers; /* number of header lines */
    uint64_t max_body;
};

/* One request. Strings are NUL-terminated and live until weft_http_parser_next(). */
struct weft_http_request {
    enum weft_http_method method;
    const char *method_name;
    const char *target;        /* "/v1/jobs/abc?x=1" as sent */
    const char *authorization; /* NULL when absent */
    const char *content_type;  /* NULL when absent */
    const char *origin;        /* Origin (CORS), NULL when absent */
    const char *host;          /* Host, NULL when absent */
    const char *idempotency_key; /* Idempotency-Key, NULL when absent */
    bool expect_continue;      /* "Expect: 100-continue" */
    bool keep_alive;           /* the connection may carry another request after this one */
    int http_minor;            /* 1.x (HTTP/1.0 or HTTP/1.1) */
    bool has_body;             /* Content-Length > 0 or chunked */
    uint64_t content_length;   /* when known (not chunked) */
    char *body;                /* [body_len] + NUL, complete at WEFT_HTTP_MESSAGE */
    size_t body_len;
};

enum weft_http_event {
    WEFT_HTTP_NEED_MORE, /* every byte consumed; the request (if any) is not complete */
    WEFT_HTTP_HEADERS,   /* the request's headers are complete; its body has not been read */
    WEFT_HTTP_MESSAGE,   /* the request is complete: handle it, then weft_http_parser_next() */
    WEFT_HTTP_BAD,       /* the stream is not acceptable HTTP: answer the error and close */
};

struct weft_http_parser;

weft_status_t weft_http_parser_create(const struct weft_http_limits *limits,
                                      struct weft_http_parser **parser_p);
void weft_http_parser_destroy(struct weft_http_parser *p);

/* Parse up to len bytes; *used_p tells how many were consumed (feed the rest after handling
 * the event). After WEFT_HTTP_BAD, every call returns WEFT_HTTP_BAD and consumes nothing. */
enum weft_http_event weft_http_parser_feed(struct weft_http_parser *p, const char *data,
                                           size_t len, size_t *used_p);
/* The peer closed its side: WEFT_HTTP_BAD when a request was cut short, else NEED_MORE. */
enum weft_http_event weft_http_parser_eof(struct weft_http_parser *p);
/* The request being parsed (valid from WEFT_HTTP_HEADERS on). */
const struct weft_http_request *weft_http_parser_request(const struct weft_http_parser *p);
/* After WEFT_HTTP_BAD: the status code to answer (400, 408, 413, 414, 431, 500, 501, 505) and
 * a one-line reason. */
int weft_http_parser_error(const struct weft_http_parser *p, const char **reason_p);
/* Start the next request on the same connection. */
void weft_http_parser_next(struct weft_http_parser *p);
/* Some bytes of a request not yet complete have been seen. */
bool weft_http_parser_busy(const struct weft_http_parser *p);

/* The reason phrase of a status code ("Not Found"). */
const char *weft_http_reason(int code);

#endif
