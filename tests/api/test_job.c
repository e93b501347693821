/* coordinator/job.c: job requests against the limits and the model (every refusal names its
 * field), inline prompt embeddings, base64, the journal form's round trip, and model/job.c's
 * rules applied to what was parsed (sizes, pixels, prompts against the layout). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/base64.h"
#include "coordinator/job.h"
#include "model/job.h"
#include "test.h"

static struct weft_job_model *model;
static const struct weft_job_limits lim = {.max_prompts = 4, .max_images = 8,
                                           .max_pixels = 512 * 512, .max_steps = 50};

/* Parse body; expect want, and on failure an error containing sub. */
static void expect_n(const char *body, size_t len, weft_status_t want, const char *sub)
{
    struct weft_job_spec spec;
    char err[512] = "";
    weft_status_t st = weft_job_spec_parse(body, len, &lim, model, &spec, err, sizeof(err));
    if (st != want || (sub && !strstr(err, sub))) {
        fprintf(stderr, "body %.200s\n  got %d (%s) \"%s\", want %d with \"%s\"\n", body, st,
                weft_status_str(st), err, want, sub ? sub : "");
        exit(1);
    }
    if (st == WEFT_OK)
        weft_job_spec_cleanup(&spec);
}

static void expect(const char *body, weft_status_t want, const char *sub)
{
    expect_n(body, strlen(body), want, sub);
}

/* Parse body (which must parse), then check the job on layout; expect want and sub. */
static void expect_job(const char *body, const struct weft_layout *layout, weft_status_t want,
                       const char *sub)
{
    struct weft_job_spec spec;
    char err[512] = "";
    CHECK_OK(weft_job_spec_parse(body, strlen(body), &lim, model, &spec, err, sizeof(err)));
    int64_t tokens[16];
    struct weft_job_desc desc;
    weft_job_spec_desc(&spec, tokens, &desc);
    struct weft_error e = WEFT_ERROR_INIT;
    weft_status_t st = weft_job_check(model->desc, layout, &desc, &lim, &e);
    if (st != want || (sub && !strstr(weft_error_text(&e), sub))) {
        fprintf(stderr, "job %.200s\n  got %d (%s) \"%s\", want %d with \"%s\"\n", body, st,
                weft_status_str(st), weft_error_text(&e), want, sub ? sub : "");
        exit(1);
    }
    weft_job_spec_cleanup(&spec);
}

static char *b64(const void *data, size_t len)
{
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = data;
    char *out = malloc((len + 2) / 3 * 4 + 1), *o = out;
    CHECK(out);
    for (size_t i = 0; i < len; i += 3) {
        unsigned w = (unsigned)p[i] << 16 | (i + 1 < len ? (unsigned)p[i + 1] << 8 : 0) |
                     (i + 2 < len ? p[i + 2] : 0);
        *o++ = t[w >> 18 & 63];
        *o++ = t[w >> 12 & 63];
        *o++ = i + 1 < len ? t[w >> 6 & 63] : '=';
        *o++ = i + 2 < len ? t[w & 63] : '=';
    }
    *o = '\0';
    return out;
}

/* A safetensors image: prompt_embeds [1, T, joint], pooled [1, pooled] (f32 zeros). */
static void *prompt_file(int64_t t, int64_t joint, int64_t pooled, size_t *len_p)
{
    char header[512];
    size_t pe = (size_t)(t * joint) * 4, po = (size_t)pooled * 4;
    int n = snprintf(header, sizeof(header),
                     "{\"pooled_prompt_embeds\":{\"dtype\":\"F32\",\"shape\":[1,%lld],"
                     "\"data_offsets\":[0,%zu]},\"prompt_embeds\":{\"dtype\":\"F32\","
                     "\"shape\":[1,%lld,%lld],\"data_offsets\":[%zu,%zu]}}",
                     (long long)pooled, po, (long long)t, (long long)joint, po, po + pe);
    while (n % 8)
        header[n++] = ' ';
    size_t len = 8 + (size_t)n + po + pe;
    unsigned char *buf = calloc(1, len);
    CHECK(buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(buf + 8, header, (size_t)n);
    *len_p = len;
    return buf;
}

static void test_valid(void)
{
    struct weft_job_spec s;
    char err[256];
    const char *body = "{\"prompts\": [\"red-fox\", {\"name\": \"lighthouse\"}], \"height\": 256,"
                       " \"width\": 512, \"steps\": 4, \"guidance\": 0, \"seed\": "
                       "\"18446744073709551615\", \"count\": 2}";
    CHECK_OK(weft_job_spec_parse(body, strlen(body), &lim, model, &s, err, sizeof(err)));
    CHECK_EQ(s.n_prompts, 2);
    CHECK(strcmp(s.prompts[1].name, "lighthouse") == 0);
    CHECK_EQ(s.height, 256);
    CHECK_EQ(s.width, 512);
    CHECK_EQ(s.count, 2);
    CHECK(s.guidance == 0);
    CHECK(s.seed == 18446744073709551615ull);
    CHECK_EQ(weft_job_spec_images(&s), 4);
    /* journal form and back */
    cJSON *j = weft_job_spec_to_json(&s);
    CHECK(j);
    struct weft_job_spec back;
    CHECK_OK(weft_job_spec_from_json(j, model, &back, err, sizeof(err)));
    CHECK_EQ(back.prompts[1].tokens, s.prompts[1].tokens);
    CHECK(back.seed == s.seed && back.height == 256 && back.n_prompts == 2);
    CHECK(strcmp(back.prompts[0].name, "red-fox") == 0);
    cJSON_Delete(j);
    weft_job_spec_cleanup(&back);
    weft_job_spec_cleanup(&s);

    /* defaults */
    body = "{\"prompt\": \"red-fox\", \"width\": 512, \"height\": 512}";
    CHECK_OK(weft_job_spec_parse(body, strlen(body), &lim, model, &s, err, sizeof(err)));
    CHECK_EQ(s.steps, 28);
    CHECK_EQ(s.count, 1);
    CHECK(s.guidance == 3.5);
    CHECK(s.seed_random); /* no seed: one is drawn at submission */
    weft_job_spec_cleanup(&s);

    /* seed -1, as a number or a string, draws one too; 0 is a seed like any other */
    static const char *const randoms[] = {"-1", "\"-1\"", "null"};
    for (int i = 0; i < 3; i++) {
        char b[200];
        snprintf(b, sizeof(b), "{\"prompt\": \"red-fox\", \"seed\": %s}", randoms[i]);
        CHECK_OK(weft_job_spec_parse(b, strlen(b), &lim, model, &s, err, sizeof(err)));
        CHECK(s.seed_random);
        weft_job_spec_cleanup(&s);
    }
    body = "{\"prompt\": \"red-fox\", \"seed\": 0}";
    CHECK_OK(weft_job_spec_parse(body, strlen(body), &lim, model, &s, err, sizeof(err)));
    CHECK(!s.seed_random && s.seed == 0);
    weft_job_spec_cleanup(&s);
    body = "{\"prompt\": \"red-fox\", \"seed\": 9007199254740992}"; /* 2^53: exact */
    CHECK_OK(weft_job_spec_parse(body, strlen(body), &lim, model, &s, err, sizeof(err)));
    CHECK(!s.seed_random && s.seed == 9007199254740992ull);
    weft_job_spec_cleanup(&s);
}

static void test_refused(void)
{
    expect("", WEFT_ERR_INVALID, "empty");
    expect("{\"prompt\": \"red-fox\"", WEFT_ERR_INVALID, "malformed JSON");
    expect("{\"prompt\": \"red-fox\"} x", WEFT_ERR_INVALID,
           "data after the JSON value at byte 22");
    expect("[1, 2]", WEFT_ERR_INVALID, "JSON object");
    expect("{\"prompt\": \"red-fox\", \"colour\": 1}", WEFT_ERR_INVALID,
           "unknown field \"colour\"");
    expect("{\"prompt\": \"red-fox\", \"steps\": 4, \"steps\": 5}", WEFT_ERR_INVALID,
           "\"steps\" given twice");
    expect("{\"prompt\": \"red-fox\xff\"}", WEFT_ERR_INVALID, "UTF-8");
    expect("{}", WEFT_ERR_INVALID, "\"prompt\", \"prompts\" or \"prompt_embeds\"");
    expect("{\"prompt\": \"red-fox\", \"prompt_embeds\": \"red-fox\"}", WEFT_ERR_INVALID,
           "one of");
    expect("{\"prompt\": \"red-fox\", \"prompts\": [\"red-fox\"]}", WEFT_ERR_INVALID, "one of");
    expect("{\"prompts\": []}", WEFT_ERR_RANGE, "max_prompts");
    expect("{\"prompts\": [\"red-fox\", \"red-fox\", \"red-fox\", \"red-fox\", \"red-fox\"]}",
           WEFT_ERR_RANGE, "max_prompts");
    /* text on a model without text encoders: what it lacks, and the names it has */
    expect("{\"prompt\": \"no-such\", \"width\": 64, \"height\": 64}", WEFT_ERR_UNSUPPORTED,
           "\"prompt\": flux-tiny cannot encode text");
    expect("{\"prompt\": \"a photo of a cat\"}", WEFT_ERR_UNSUPPORTED,
           "text_encoder (CLIPTextModel)");
    expect("{\"prompts\": [\"red-fox\", \"a cat\"]}", WEFT_ERR_UNSUPPORTED,
           "\"prompts\"[1]: flux-tiny cannot encode text");
    expect("{\"prompt\": \"a cat\"}", WEFT_ERR_UNSUPPORTED, "city-night, lighthouse, red-fox");
    expect("{\"prompt_embeds\": \"no-such\", \"width\": 64, \"height\": 64}",
           WEFT_ERR_NOT_FOUND, "unknown prompt \"no-such\"");
    expect("{\"prompt_embeds\": \"../../etc/passwd\"}", WEFT_ERR_INVALID, "not a name");
    expect("{\"prompt_embeds\": [\".hidden\"]}", WEFT_ERR_INVALID, "not a name");
    expect("{\"prompt_embeds\": 7}", WEFT_ERR_INVALID, "precomputed embeddings are");
    expect("{\"prompt\": \"red-fox\", \"max_sequence_length\": 513}", WEFT_ERR_RANGE,
           "\"max_sequence_length\"");
    expect("{\"prompt\": \"red-fox\", \"max_sequence_length\": 0}", WEFT_ERR_RANGE,
           "\"max_sequence_length\"");
    expect("{\"prompt\": 7}", WEFT_ERR_INVALID, "a prompt is");
    expect("{\"prompt\": {\"name\": \"red-fox\", \"x\": 1}}", WEFT_ERR_INVALID,
           "unknown field \"x\"");
    expect("{\"prompt\": \"red-fox\", \"height\": 16385, \"width\": 64}", WEFT_ERR_RANGE,
           "\"height\"");
    expect("{\"prompt\": \"red-fox\", \"height\": 65552, \"width\": 64}", WEFT_ERR_RANGE,
           "\"height\"");
    /* NUL inside a key or a value: cJSON would cut the string there */
    expect("{\"prompt\": \"red-fox\", \"steps\\u0000evil\": 4}", WEFT_ERR_INVALID, "\\u0000");
    expect("{\"prompt\": \"red\\u0000-fox\"}", WEFT_ERR_INVALID, "\\u0000");
    expect("{\"prompt\": \"red-fox\", \"seed\": \"1\\u00002\"}", WEFT_ERR_INVALID, "\\u0000");
    /* an escaped backslash before u0000 is text, not a NUL */
    expect("{\"prompt_embeds\": \"red-fox\\\\u0000\"}", WEFT_ERR_INVALID, "not a name");
    expect("{\"prompt\": \"red-fox\", \"height\": 64.5, \"width\": 64}", WEFT_ERR_INVALID,
           "\"height\" must be an integer");
    expect("{\"prompt\": \"red-fox\", \"height\": \"64\", \"width\": 64}", WEFT_ERR_INVALID,
           "\"height\" must be an integer");
    expect("{\"prompt\": \"red-fox\", \"height\": 1e300, \"width\": 64}", WEFT_ERR_INVALID,
           "\"height\"");
    expect("{\"prompt\": \"red-fox\", \"width\": 64, \"height\": 64, \"steps\": 51}",
           WEFT_ERR_RANGE, "max_steps");
    expect("{\"prompt\": \"red-fox\", \"width\": 64, \"height\": 64, \"steps\": 0}",
           WEFT_ERR_RANGE, "\"steps\"");
    expect("{\"prompt\": \"red-fox\", \"width\": 64, \"height\": 64, \"count\": 9}",
           WEFT_ERR_RANGE, "max_images");
    expect("{\"prompt\": \"red-fox\", \"width\": 64, \"height\": 64, \"guidance\": -1}",
           WEFT_ERR_INVALID, "\"guidance\"");
    expect("{\"prompt\": \"red-fox\", \"width\": 64, \"height\": 64, \"seed\": -2}",
           WEFT_ERR_INVALID, "\"seed\"");
    expect("{\"prompt\": \"red-fox\", \"width\": 64, \"height\": 64, \"seed\": "
           "\"18446744073709551616\"}", WEFT_ERR_RANGE, "64 bits");
    expect("{\"prompt\": \"red-fox\", \"width\": 64, \"height\": 64, \"seed\": 1e17}",
           WEFT_ERR_INVALID, "\"seed\"");
    /* what cJSON takes but RFC 8259 forbids, and what a double does not carry exactly */
    static const char nul[] = "{\"prompt\": \"red\0-fox\"}";
    expect_n(nul, sizeof(nul) - 1, WEFT_ERR_INVALID, "NUL byte in a string at byte 15");
    static const char nul_after[] = "{\"prompt\": \"red-fox\"}\0";
    expect_n(nul_after, sizeof(nul_after) - 1, WEFT_ERR_INVALID, "NUL byte after the JSON");
    expect("{\"prompt\": \"red\x01-fox\"}", WEFT_ERR_INVALID, "raw control character (0x01)");
    expect("{\"prompt\": \"red\n-fox\"}", WEFT_ERR_INVALID, "raw control character (0x0a)");
    expect("{\"prompt\": \"red-fox\", \"width\": 064}", WEFT_ERR_INVALID, "leading zero");
    expect("{\"prompt\": \"red-fox\", \"guidance\": 5.}", WEFT_ERR_INVALID, "after its '.'");
    expect("{\"prompt\": \"red-fox\",\v\"steps\": 4}", WEFT_ERR_INVALID, "JSON whitespace");
    expect("\xEF\xBB\xBF{\"prompt\": \"red-fox\"}", WEFT_ERR_INVALID, "byte-order mark");
    expect("{\"prompt\": \"red-fox\", \"seed\": 9007199254740993}", WEFT_ERR_INVALID,
           "beyond 2^53");
    expect("{\"prompt\": \"red-fox\", \"seed\": -9007199254740993}", WEFT_ERR_INVALID,
           "beyond 2^53");
    char deep[200] = "{\"prompt\": ";
    for (int i = 0; i < 40; i++)
        strcat(deep, "[");
    expect(deep, WEFT_ERR_INVALID, "nested deeper than 32");
}

static void test_inline(void)
{
    size_t len;
    const int64_t joint = model->desc->flux.joint_attention_dim;
    const int64_t pooled = model->desc->flux.pooled_projection_dim;
    void *good = prompt_file(7, joint, pooled, &len);
    char *enc = b64(good, len);
    char *body = malloc(4 * strlen(enc) + 256); /* the bad files below are larger */
    CHECK(body);
    sprintf(body, "{\"prompts\": [{\"safetensors\": \"%s\"}, \"red-fox\"], \"width\": 64, "
                  "\"height\": 64}", enc);
    struct weft_job_spec s;
    char err[512];
    CHECK_OK(weft_job_spec_parse(body, strlen(body), &lim, model, &s, err, sizeof(err)));
    CHECK(s.prompts[0].name[0] == '\0');
    CHECK_EQ(s.prompts[0].len, len);
    CHECK(memcmp(s.prompts[0].data, good, len) == 0);
    cJSON *j = weft_job_spec_to_json(&s);
    char *text = cJSON_PrintUnformatted(j);
    CHECK(strstr(text, "{\"file\":0,\"tokens\":7}")); /* the journal names the stored file */
    cJSON_free(text);
    cJSON_Delete(j);
    weft_job_spec_cleanup(&s);

    /* the wrong joint dimension, the wrong pooled size, no tensors, not base64 */
    void *bad = prompt_file(7, joint + 1, pooled, &len);
    char *bad_enc = b64(bad, len);
    sprintf(body, "{\"prompt\": {\"safetensors\": \"%s\"}}", bad_enc);
    expect(body, WEFT_ERR_INVALID, "joint_attention_dim");
    free(bad);
    free(bad_enc);
    bad = prompt_file(7, joint, pooled * 2, &len);
    bad_enc = b64(bad, len);
    sprintf(body, "{\"prompt\": {\"safetensors\": \"%s\"}}", bad_enc);
    expect(body, WEFT_ERR_INVALID, "pooled_projection_dim");
    free(bad);
    free(bad_enc);
    /* a NaN in prompt_embeds, an infinity in pooled_prompt_embeds: refused at submission, not
     * at the first step */
    for (int k = 0; k < 2; k++) {
        bad = prompt_file(7, joint, pooled, &len);
        const size_t data = len - (size_t)(7 * joint + pooled) * 4; /* pooled, then embeds */
        const float v = k ? INFINITY : NAN;
        memcpy((char *)bad + data + (k ? 0 : (size_t)pooled * 4 + 5 * 4), &v, 4);
        bad_enc = b64(bad, len);
        sprintf(body, "{\"prompt\": {\"safetensors\": \"%s\"}}", bad_enc);
        expect(body, WEFT_ERR_INVALID,
               k ? "pooled_prompt_embeds holds a value that is not finite (NaN or infinite) at "
                   "element 0"
                 : "prompt_embeds holds a value that is not finite (NaN or infinite) at element 5");
        free(bad);
        free(bad_enc);
    }
    bad_enc = b64("hello, not a file", 17);
    sprintf(body, "{\"prompt\": {\"safetensors\": \"%s\"}}", bad_enc);
    expect(body, WEFT_ERR_INVALID, "prompts[0]");
    free(bad_enc);
    /* no text tokens, and more than any encoder makes */
    for (int k = 0; k < 2; k++) {
        bad = prompt_file(k ? WEFT_JOB_MAX_TEXT_TOKENS + 1 : 0, joint, pooled, &len);
        char *big = b64(bad, len);
        char *b = malloc(strlen(big) + 64);
        CHECK(b);
        sprintf(b, "{\"prompt\": {\"safetensors\": \"%s\"}}", big);
        expect(b, WEFT_ERR_INVALID, "tokens");
        free(b), free(big), free(bad);
    }
    expect("{\"prompt\": {\"safetensors\": \"abc\"}}", WEFT_ERR_INVALID, "not base64");
    expect("{\"prompt\": {\"safetensors\": \"ab=c\"}}", WEFT_ERR_INVALID, "not base64");
    expect("{\"prompt\": {\"safetensors\": 5}}", WEFT_ERR_INVALID, "base64 string");
    expect("{\"prompt\": {\"name\": \"red-fox\", \"safetensors\": \"\"}}", WEFT_ERR_INVALID,
           "one of");
    free(good);
    free(enc);
    free(body);
}

static void test_base64(void)
{
    static const struct {
        const char *in, *out;
    } cases[] = {{"", ""}, {"Zg==", "f"}, {"Zm8=", "fo"}, {"Zm9v", "foo"}, {"Zm9vYg==", "foob"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        void *d;
        size_t n;
        CHECK_OK(weft_base64_decode(cases[i].in, strlen(cases[i].in), &d, &n));
        CHECK_EQ(n, strlen(cases[i].out));
        CHECK(memcmp(d, cases[i].out, n) == 0);
        weft_free(d);
    }
    const char *bad[] = {"Z", "Zg=", "Z===", "Zg==Zg==", "Zm9v\n", "Zm-v"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        void *d;
        size_t n;
        CHECK(weft_base64_decode(bad[i], strlen(bad[i]), &d, &n) == WEFT_ERR_FORMAT);
    }
}

static void test_model(void)
{
    CHECK(model->desc->flux.joint_attention_dim > 0);
    CHECK(model->n_names >= 3);
    for (size_t i = 1; i < model->n_names; i++)
        CHECK(strcmp(model->names[i - 1], model->names[i]) < 0);
    for (size_t i = 0; i < model->n_names; i++)
        CHECK(model->name_tokens[i] >= 1);
    struct weft_job_model *m;
    struct weft_error e = WEFT_ERROR_INIT;
    CHECK(weft_job_model_load("/nonexistent", &m, &e) == WEFT_ERR_NOT_FOUND);
    CHECK(strstr(weft_error_text(&e), "/nonexistent"));
}

/* What parses is then checked on the layout it will run on. */
static void test_rules(void)
{
    struct weft_layout one, u2 = {.mesh = {1, 1, 2, 1, 1}}, u2a = u2;
    weft_layout_single(&one);
    u2a.ulysses_anything = true;
    expect_job("{\"prompt\": \"red-fox\", \"height\": 256, \"width\": 256}", &one, WEFT_OK,
               NULL);
    expect_job("{\"prompt\": \"red-fox\", \"height\": 1000, \"width\": 64}", &one,
               WEFT_ERR_INVALID, "multiples of 16");
    expect_job("{\"prompt\": \"red-fox\", \"height\": 8, \"width\": 64}", &one, WEFT_ERR_RANGE,
               "16..16384");
    expect_job("{\"prompt\": \"red-fox\", \"height\": 1024, \"width\": 1024}", &one,
               WEFT_ERR_RANGE, "max_pixels");
    expect_job("{\"prompts\": [\"red-fox\", \"red-fox\"], \"width\": 64, \"height\": 64, "
               "\"count\": 5}", &one, WEFT_ERR_RANGE, "max_images");
    /* 15 x 16 tokens do not split in two without ulysses_anything */
    expect_job("{\"prompt\": \"red-fox\", \"height\": 240, \"width\": 256}", &u2, WEFT_OK,
               NULL);
    expect_job("{\"prompt\": \"red-fox\", \"height\": 240, \"width\": 240}", &u2,
               WEFT_ERR_INVALID, "ulysses_anything");
    expect_job("{\"prompt\": \"red-fox\", \"height\": 240, \"width\": 240}", &u2a, WEFT_OK,
               NULL);
}

/* A model with text encoders (tests/data/text/pipeline): text is text, names of precomputed
 * prompts only through prompt_embeds; lists; max_sequence_length; the journal form. */
static void test_text(const char *root)
{
    char dir[1100];
    snprintf(dir, sizeof(dir), "%s/tests/data/text/pipeline", root);
    struct weft_job_model *tm;
    struct weft_error e = WEFT_ERROR_INIT;
    CHECK_OK(weft_job_model_load(dir, &tm, &e));
    struct weft_job_spec s;
    char err[512];
    const char *body = "{\"prompt\": [\"a photo of a cat\", \"\", \"red-fox\"], "
                       "\"max_sequence_length\": 64}";
    CHECK_OK(weft_job_spec_parse(body, strlen(body), &lim, tm, &s, err, sizeof(err)));
    CHECK_EQ(s.n_prompts, 3);
    CHECK(strcmp(s.prompts[0].text, "a photo of a cat") == 0 && s.prompts[0].tokens == 64);
    CHECK(s.prompts[1].text && s.prompts[1].text[0] == '\0'); /* "" is a prompt too */
    CHECK(strcmp(s.prompts[2].text, "red-fox") == 0 && !s.prompts[2].name[0]);
    CHECK_EQ(s.max_sequence_length, 64);
    cJSON *j = weft_job_spec_to_json(&s);
    struct weft_job_spec back;
    CHECK_OK(weft_job_spec_from_json(j, tm, &back, err, sizeof(err)));
    CHECK(strcmp(back.prompts[0].text, "a photo of a cat") == 0 && back.prompts[0].tokens == 64);
    CHECK_EQ(back.max_sequence_length, 64);
    weft_job_spec_cleanup(&back);
    /* the same journal on a model that cannot encode text fails, saying why */
    CHECK(weft_job_spec_from_json(j, model, &back, err, sizeof(err)) == WEFT_ERR_FORMAT);
    CHECK(strstr(err, "prompt 0: flux-tiny cannot encode text"));
    cJSON_Delete(j);
    weft_job_spec_cleanup(&s);
    /* the default length; objects and prompt_embeds stay precomputed embeddings */
    body = "{\"prompts\": [\"a\", {\"name\": \"x\"}]}";
    char eb[600];
    CHECK(weft_job_spec_parse(body, strlen(body), &lim, tm, &s, eb, sizeof(eb)) ==
          WEFT_ERR_NOT_FOUND);
    CHECK(strstr(eb, "\"prompts\"[1]: unknown prompt \"x\""));
    body = "{\"prompt\": \"a cat\"}";
    CHECK_OK(weft_job_spec_parse(body, strlen(body), &lim, tm, &s, err, sizeof(err)));
    CHECK_EQ(s.prompts[0].tokens, 512);
    weft_job_spec_cleanup(&s);
    /* a text past 64 KiB */
    size_t n = WEFT_JOB_MAX_TEXT_BYTES + 40;
    char *big = malloc(n + 1);
    CHECK(big);
    memset(big, 'a', n);
    memcpy(big, "{\"prompt\": \"", 12);
    memcpy(big + n - 2, "\"}", 2);
    big[n] = '\0';
    CHECK(weft_job_spec_parse(big, n, &lim, tm, &s, err, sizeof(err)) == WEFT_ERR_RANGE);
    CHECK(strstr(err, "bytes of text; at most 65536"));
    free(big);
    /* the job's tokens are the max_sequence_length: a context-parallel split checks them */
    struct weft_layout u3 = {.mesh = {1, 1, 3, 1, 1}};
    body = "{\"prompt\": \"a cat\", \"max_sequence_length\": 64, \"height\": 48, "
           "\"width\": 48}";
    CHECK_OK(weft_job_spec_parse(body, strlen(body), &lim, tm, &s, err, sizeof(err)));
    int64_t tokens[4];
    struct weft_job_desc desc;
    weft_job_spec_desc(&s, tokens, &desc);
    CHECK_EQ(tokens[0], 64);
    weft_error_clear(&e);
    CHECK(weft_job_check(tm->desc, &u3, &desc, &lim, &e) == WEFT_ERR_INVALID);
    weft_job_spec_cleanup(&s);
    weft_job_model_destroy(tm);
}

/* True CFG: negative_prompt for every prompt, negative_prompts one each, true_cfg_scale; the
 * journal keeps them; the refusals name the field. */
static void test_true_cfg(void)
{
    struct weft_job_spec s, back;
    char err[256];
    const char *body = "{\"prompts\": [\"red-fox\", \"city-night\"], \"negative_prompt\": "
                       "\"lighthouse\", \"true_cfg_scale\": 4.5, \"height\": 64, \"width\": 64}";
    CHECK_OK(weft_job_spec_parse(body, strlen(body), &lim, model, &s, err, sizeof(err)));
    CHECK(s.n_prompts == 2 && s.n_negatives == 2 && s.true_cfg_scale == 4.5);
    CHECK(strcmp(s.prompts[2].name, "lighthouse") == 0 &&
          strcmp(s.prompts[3].name, "lighthouse") == 0);
    CHECK_EQ(weft_job_spec_images(&s), 2);
    int64_t tokens[8];
    struct weft_job_desc desc;
    weft_job_spec_desc(&s, tokens, &desc);
    CHECK(desc.negative_tokens == tokens + 2 && desc.true_cfg_scale == 4.5);
    struct weft_layout one;
    weft_layout_single(&one);
    struct weft_error e = WEFT_ERROR_INIT;
    CHECK_OK(weft_job_check(model->desc, &one, &desc, &lim, &e));
    cJSON *j = weft_job_spec_to_json(&s);
    CHECK(j);
    CHECK_OK(weft_job_spec_from_json(j, model, &back, err, sizeof(err)));
    CHECK(back.n_prompts == 2 && back.n_negatives == 2 && back.true_cfg_scale == 4.5);
    CHECK(strcmp(back.prompts[3].name, "lighthouse") == 0);
    CHECK_EQ(back.prompts[3].tokens, s.prompts[3].tokens);
    /* a journal whose negatives are not one per prompt is refused */
    cJSON_ReplaceItemInObject(j, "negatives", cJSON_CreateNumber(1));
    weft_job_spec_cleanup(&back);
    CHECK(weft_job_spec_from_json(j, model, &back, err, sizeof(err)) == WEFT_ERR_FORMAT);
    cJSON_Delete(j);
    weft_job_spec_cleanup(&s);
    body = "{\"prompts\": [\"red-fox\", \"city-night\"], \"negative_prompts\": "
           "[\"lighthouse\", {\"name\": \"red-fox\"}], \"true_cfg_scale\": 2}";
    CHECK_OK(weft_job_spec_parse(body, strlen(body), &lim, model, &s, err, sizeof(err)));
    CHECK(strcmp(s.prompts[3].name, "red-fox") == 0 && s.n_negatives == 2);
    weft_job_spec_cleanup(&s);
    /* negatives without a scale above 1 are kept, and unused (as Diffusers) */
    expect("{\"prompt\": \"red-fox\", \"negative_prompt\": \"lighthouse\"}", WEFT_OK, NULL);
    expect("{\"prompt\": \"red-fox\", \"true_cfg_scale\": 2}", WEFT_ERR_INVALID,
           "\"true_cfg_scale\" above 1 needs");
    expect("{\"prompt\": \"red-fox\", \"negative_prompt\": \"x\", \"negative_prompts\": "
           "[\"x\"]}", WEFT_ERR_INVALID, "give one of");
    expect("{\"prompts\": [\"red-fox\", \"lighthouse\"], \"negative_prompts\": [\"x\"]}",
           WEFT_ERR_INVALID, "an array of 2");
    expect("{\"prompt\": \"red-fox\", \"negative_prompt\": \"nope\", \"true_cfg_scale\": 2}",
           WEFT_ERR_UNSUPPORTED, "\"negative_prompt\"");
    expect("{\"prompt\": \"red-fox\", \"negative_prompt\": \"lighthouse\", "
           "\"true_cfg_scale\": \"3\"}", WEFT_ERR_INVALID, "0..1000");
    expect("{\"prompt\": \"red-fox\", \"negative_prompt\": \"lighthouse\", "
           "\"true_cfg_scale\": 1001}", WEFT_ERR_INVALID, "0..1000");
}

int main(void)
{
    test_quiet();
    const char *root = getenv("WEFT_SOURCE_ROOT");
    CHECK(root);
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/tests/data/random/flux-tiny", root);
    struct weft_error e = WEFT_ERROR_INIT;
    CHECK_OK(weft_job_model_load(dir, &model, &e));
    test_model();
    test_valid();
    test_refused();
    test_rules();
    test_inline();
    test_base64();
    test_text(root);
    test_true_cfg();
    weft_job_model_destroy(model);
    printf("ok\n");
    return 0;
}
