/* Fuzz target: the job API's request path without sockets: the HTTP parser fed in pieces
 * (the first byte picks the piece size), then for each request the bearer-token check, the
 * route and query parameters, and for POST /v1/jobs and POST /v1/images/generations the JSON
 * body validation against a model with three prompts. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/log.h"
#include "coordinator/http.h"
#include "coordinator/internal.h"
#include "coordinator/job.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void quiet(enum weft_log_level l, const char *s, const char *m, void *a)
{
    (void)l, (void)s, (void)m, (void)a;
}

static char names[3][WEFT_JOB_NAME_MAX] = {"city-night", "lighthouse", "red-fox"};
static int64_t tokens[3] = {8, 8, 8};
/* flux-tiny's shapes, as weft_model_open would describe it */
static struct weft_model desc = {
    .dir = "fuzz", .pipeline = true, .prompts_dir = "fuzz/prompts", .has_vae = true,
    .flux = {.in_channels = 64, .out_channels = 64, .joint_attention_dim = 64,
             .pooled_projection_dim = 64, .num_attention_heads = 12, .attention_head_dim = 16},
    .vae_scale = 8, .side_unit = 16, .default_side = 1024, .default_text_tokens = 512,
};
/* the same with both text encoders: text prompts take the text path */
static struct weft_model desc_text = {
    .dir = "fuzz", .pipeline = true, .prompts_dir = "fuzz/prompts", .has_vae = true,
    .flux = {.in_channels = 64, .out_channels = 64, .joint_attention_dim = 64,
             .pooled_projection_dim = 64, .num_attention_heads = 12, .attention_head_dim = 16},
    .vae_scale = 8, .side_unit = 16, .default_side = 128, .default_text_tokens = 48,
    .clip = {.tokenizer = true, .encoder = true}, .t5 = {.tokenizer = true, .encoder = true},
};

static void job(const struct weft_http_request *r, struct weft_job_model *model,
                const struct weft_model *d_model);

static void request(const struct weft_http_request *r)
{
    static struct weft_job_model model = {
        .dir = "fuzz", .prompts_dir = "fuzz/prompts", .desc = &desc, .n_names = 3,
        .names = names, .name_tokens = tokens,
    };
    static struct weft_job_model model_text = {
        .dir = "fuzz", .prompts_dir = "fuzz/prompts", .desc = &desc_text, .n_names = 3,
        .names = names, .name_tokens = tokens,
    };
    (void)weft_api_auth_ok("token", r->authorization);
    struct weft_api_route route;
    if (!weft_api_match(r->target, &route))
        return;
    char v[64];
    (void)weft_api_query(r->target, "after", v, sizeof(v));
    (void)weft_api_query(r->target, "limit", v, sizeof(v));
    if (route.kind == WEFT_ROUTE_OPENAI && r->method == WEFT_HTTP_POST) {
        static const struct weft_conf_api api = {.max_images = 64, .max_steps = 100,
                                                 .image_quality = 90};
        struct weft_job_spec spec;
        char err[512];
        for (int k = 0; k < 2; k++)
            if (weft_api_openai_parse(k ? &model_text : &model, &api, r->body, r->body_len,
                                      &spec, err, sizeof(err)) == 200)
                weft_job_spec_cleanup(&spec);
        return;
    }
    if (route.kind != WEFT_ROUTE_JOBS || r->method != WEFT_HTTP_POST)
        return;
    job(r, &model, &desc);
    job(r, &model_text, &desc_text);
}

/* A job request on one model: parsed, through the journal form, checked. */
static void job(const struct weft_http_request *r, struct weft_job_model *model,
                const struct weft_model *d_model)
{
    static const struct weft_job_limits lim = {64, 64, 4194304, 100};
    struct weft_job_spec spec;
    char err[512];
    if (weft_job_spec_parse(r->body, r->body_len, &lim, model, &spec, err, sizeof(err)) !=
        WEFT_OK)
        return;
    /* what was accepted must survive the journal form */
    cJSON *j = weft_job_spec_to_json(&spec);
    struct weft_job_spec back;
    if (j && weft_job_spec_from_json(j, model, &back, err, sizeof(err)) == WEFT_OK)
        weft_job_spec_cleanup(&back);
    /* and the job's rules, on one device and on a context-parallel layout */
    int64_t t[WEFT_JOB_MAX_PROMPTS];
    struct weft_job_desc d;
    weft_job_spec_desc(&spec, t, &d);
    struct weft_layout one, cp = {.mesh = {1, 2, 2, 1, 1}};
    weft_layout_single(&one);
    struct weft_error e = WEFT_ERROR_INIT;
    (void)weft_job_check(d_model, &one, &d, &lim, &e);
    weft_error_clear(&e);
    (void)weft_job_check(d_model, &cp, &d, &lim, &e);
    cJSON_Delete(j);
    weft_job_spec_cleanup(&spec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    weft_log_set_sink(quiet, NULL);
    if (size == 0)
        return 0;
    size_t piece = data[0] ? data[0] : size;
    data++, size--;
    struct weft_http_limits lim = {.max_header = 2048, .max_headers = 32, .max_body = 32768};
    struct weft_http_parser *p;
    if (weft_http_parser_create(&lim, &p) != WEFT_OK)
        return 0;
    size_t off = 0;
    for (int guard = 0; guard < 100000; guard++) {
        size_t n = size - off < piece ? size - off : piece;
        size_t used;
        enum weft_http_event ev = weft_http_parser_feed(p, (const char *)data + off, n, &used);
        off += used;
        if (ev == WEFT_HTTP_BAD) {
            const char *why;
            (void)weft_http_parser_error(p, &why);
            break;
        }
        if (ev == WEFT_HTTP_MESSAGE) {
            request(weft_http_parser_request(p));
            if (!weft_http_parser_request(p)->keep_alive)
                break;
            weft_http_parser_next(p);
            continue;
        }
        if (ev == WEFT_HTTP_NEED_MORE && off == size) {
            (void)weft_http_parser_eof(p);
            break;
        }
    }
    weft_http_parser_destroy(p);
    return 0;
}
