/* control/msg.c and control/boot.c: every message survives its encode and decode field for
 * field (64-bit integers exactly, the largest seed included); every bound is refused by the
 * encoder (nothing is sent) and by the decoder (a peer that skipped the encoder); every
 * truncation of every message is refused cleanly; a RUN that cannot be decoded still gives
 * its job key.
 *
 * With WEFT_MSG_CORPUS=DIR set it also writes every message it round-trips into DIR (the type
 * byte, then the payload: fuzz_msg's input), which is how tests/fuzz/corpus/msg is made:
 *   rm -f tests/fuzz/corpus/msg/[a-z]* && WEFT_MSG_CORPUS=tests/fuzz/corpus/msg build/tests/unit/test_msg */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "control/boot.h"
#include "control/msg.h"
#include "control/wire.h"
#include "test.h"

static union weft_msg *roundtrip(unsigned type, const union weft_msg *m, void **buf_p,
                                 size_t *len_p)
{
    struct weft_error err = WEFT_ERROR_INIT;
    if (weft_msg_encode(type, m, buf_p, len_p, &err) != WEFT_OK) {
        fprintf(stderr, "encode %s: %s\n", weft_msg_name(type), weft_error_text(&err));
        exit(1);
    }
    const char *corpus = getenv("WEFT_MSG_CORPUS");
    if (corpus) {
        static int written[WEFT_MSG_TYPE_COUNT + 1];
        char path[1024];
        const int k = written[type]++;
        if (k)
            snprintf(path, sizeof(path), "%s/%s_%d", corpus, weft_msg_name(type), k);
        else
            snprintf(path, sizeof(path), "%s/%s", corpus, weft_msg_name(type));
        FILE *f = fopen(path, "wb");
        CHECK(f && fputc((int)type, f) == (int)type &&
              fwrite(*buf_p, 1, *len_p, f) == *len_p && fclose(f) == 0);
    }
    union weft_msg *back = calloc(1, sizeof(*back));
    CHECK(back);
    if (weft_msg_decode(type, *buf_p, *len_p, back, &err) != WEFT_OK) {
        fprintf(stderr, "decode %s: %s\n", weft_msg_name(type), weft_error_text(&err));
        exit(1);
    }
    /* every shorter payload is refused, nothing read past it (ASan would see it) */
    for (size_t n = 0; n < *len_p; n++) {
        union weft_msg *t = malloc(sizeof(*t));
        CHECK(t);
        void *copy = malloc(n + 1);
        CHECK(copy);
        memcpy(copy, *buf_p, n);
        struct weft_error e = WEFT_ERROR_INIT;
        weft_status_t st = weft_msg_decode(type, copy, n, t, &e);
        /* an image whose PNG is cut but keeps its signature decodes (the PNG is opaque) */
        CHECK(st != WEFT_OK || (type == WEFT_MSG_IMAGE && n >= *len_p - m->image.png_len + 8));
        if (st == WEFT_OK)
            weft_msg_cleanup(type, t);
        free(copy);
        free(t);
    }
    return back;
}

static void expect_refused(unsigned type, const union weft_msg *m, const char *sub)
{
    void *buf;
    size_t len;
    struct weft_error err = WEFT_ERROR_INIT;
    CHECK(weft_msg_encode(type, m, &buf, &len, &err) == WEFT_ERR_INVALID);
    if (!strstr(weft_error_text(&err), sub)) {
        fprintf(stderr, "%s refused with \"%s\", expected \"%s\"\n", weft_msg_name(type),
                weft_error_text(&err), sub);
        exit(1);
    }
}

static struct weft_msg_assign *assign_sample(void)
{
    struct weft_msg_assign *a = calloc(1, sizeof(*a));
    CHECK(a);
    a->epoch = UINT64_MAX - 3;
    snprintf(a->model, sizeof(a->model), "/models/FLUX.1-dev (copy)");
    snprintf(a->rdv, sizeof(a->rdv), "10.0.0.1:41235");
    a->world_size = 8, a->world_rank = 5, a->world_base = 0;
    a->layout = (struct weft_layout){.mesh = {2, 1, 2, 2, 1}, .ulysses_anything = true,
                                     .rotation = WEFT_RING_P2P};
    a->tp_full_then_shard = true;
    a->decode = false;
    a->threads = 7;
    a->compute = WEFT_DTYPE_BF16;
    a->tp_plan.n = 2;
    snprintf(a->tp_plan.e[0].key, sizeof(a->tp_plan.e[0].key), "transformer_blocks.*.ff.net.0.proj");
    snprintf(a->tp_plan.e[0].value, sizeof(a->tp_plan.e[0].value), "colwise");
    snprintf(a->tp_plan.e[0].origin, sizeof(a->tp_plan.e[0].origin), "weft.ini:12");
    snprintf(a->tp_plan.e[1].key, sizeof(a->tp_plan.e[1].key), "proj_out");
    snprintf(a->tp_plan.e[1].value, sizeof(a->tp_plan.e[1].value), "none");
    return a;
}

static void test_assign(void)
{
    struct weft_msg_assign *a = assign_sample();
    void *buf;
    size_t len;
    union weft_msg *b = roundtrip(WEFT_MSG_ASSIGN, (union weft_msg *)a, &buf, &len);
    const struct weft_msg_assign *r = &b->assign;
    CHECK(r->epoch == UINT64_MAX - 3);
    CHECK(strcmp(r->model, a->model) == 0 && strcmp(r->rdv, a->rdv) == 0);
    CHECK(r->world_size == 8 && r->world_rank == 5 && r->world_base == 0);
    CHECK(memcmp(&r->layout.mesh, &a->layout.mesh, sizeof(r->layout.mesh)) == 0);
    CHECK(r->layout.ulysses_anything && !r->layout.ring_anything);
    CHECK(r->layout.rotation == WEFT_RING_P2P && !r->layout.device_map);
    CHECK(r->tp_full_then_shard && !r->decode && !r->stage.on && r->threads == 7 &&
          r->compute == WEFT_DTYPE_BF16);
    CHECK(r->tp_plan.n == 2 && strcmp(r->tp_plan.e[0].origin, "weft.ini:12") == 0);
    CHECK(strcmp(r->tp_plan.e[1].value, "none") == 0);
    free(b);
    weft_free(buf);

    /* device_map: a stage */
    a->layout = (struct weft_layout){.mesh = {1, 1, 1, 1, 3}, .device_map = true};
    a->world_size = 3, a->world_rank = 2;
    a->stage = (struct weft_msg_stage){true, 7, 11, 1, -1, 2, 2, 0};
    b = roundtrip(WEFT_MSG_ASSIGN, (union weft_msg *)a, &buf, &len);
    CHECK(b->assign.stage.on && b->assign.stage.unit_first == 7 &&
          b->assign.stage.unit_last == 11 && b->assign.stage.prev == 1 &&
          b->assign.stage.next == -1 && b->assign.stage.root == 2 &&
          b->assign.stage.clip == 2 && b->assign.stage.t5 == 0);
    free(b);
    weft_free(buf);

    /* bounds */
    struct weft_msg_assign bad = *a;
    bad.world_rank = 3;
    expect_refused(WEFT_MSG_ASSIGN, (union weft_msg *)&bad, "world_rank");
    bad = *a, bad.layout.mesh.tp = 0;
    expect_refused(WEFT_MSG_ASSIGN, (union weft_msg *)&bad, "mesh degree");
    bad = *a, bad.layout.mesh = (struct weft_mesh){65536, 2, 1, 1, 1};
    expect_refused(WEFT_MSG_ASSIGN, (union weft_msg *)&bad, "65536");
    /* the CFG halves count in the size (the fuzzer's 989855744 x 3 overflowed int there) */
    bad = *a, bad.layout.mesh = (struct weft_mesh){32768, 1, 1, 2, 1, 2};
    expect_refused(WEFT_MSG_ASSIGN, (union weft_msg *)&bad, "65536");
    bad = *a, bad.layout.mesh.cfg = 3;
    expect_refused(WEFT_MSG_ASSIGN, (union weft_msg *)&bad, "mesh.cfg");
    bad = *a, bad.stage.root = 3;
    expect_refused(WEFT_MSG_ASSIGN, (union weft_msg *)&bad, "stage");
    bad = *a, bad.stage.clip = 3;
    expect_refused(WEFT_MSG_ASSIGN, (union weft_msg *)&bad, "text encoder");
    bad = *a, bad.stage.t5 = -2;
    expect_refused(WEFT_MSG_ASSIGN, (union weft_msg *)&bad, "text encoder");
    bad = *a, bad.stage.on = false;
    expect_refused(WEFT_MSG_ASSIGN, (union weft_msg *)&bad, "stage");
    bad = *a, bad.rdv[0] = '\0';
    expect_refused(WEFT_MSG_ASSIGN, (union weft_msg *)&bad, "rdv");
    bad = *a, bad.model[0] = '\0';
    expect_refused(WEFT_MSG_ASSIGN, (union weft_msg *)&bad, "model");
    bad = *a, bad.compute = 9;
    expect_refused(WEFT_MSG_ASSIGN, (union weft_msg *)&bad, "compute");
    bad = *a, bad.threads = -1;
    expect_refused(WEFT_MSG_ASSIGN, (union weft_msg *)&bad, "threads");
    bad = *a, bad.threads = 1025;
    expect_refused(WEFT_MSG_ASSIGN, (union weft_msg *)&bad, "threads");
    free(a);
}

/* Text prompts: carried as their text (any UTF-8, "" included), nothing in the tail for them;
 * their bounds on both sides. */
static void test_run_text(const struct weft_msg_run *base)
{
    char long_text[WEFT_JOB_MAX_TEXT_BYTES + 2];
    memset(long_text, 'a', sizeof(long_text) - 1);
    long_text[sizeof(long_text) - 1] = '\0';
    struct weft_msg_prompt prompts[3] = {
        {512, 4, 2, "", true, "a photo of a cat \xe6\x9d\xb1\xe4\xba\xac \xf0\x9f\x90\xb1"},
        {1, 4, 2, "red-fox", false, NULL},
        {77, 4, 2, "", true, ""}};
    float embeds[6] = {1, 2, 3, 4, 5, 6};
    struct weft_msg_run m = *base;
    struct weft_msg_image_ref images[2] = {{0, 0}, {1, 2}};
    m.prompts = prompts, m.n_prompts = 3, m.embeds = embeds, m.n_embeds = 6;
    m.images = images, m.n_images = 2;
    void *buf;
    size_t len;
    union weft_msg *b = roundtrip(WEFT_MSG_RUN, (union weft_msg *)&m, &buf, &len);
    const struct weft_msg_run *r = &b->run;
    CHECK(r->n_prompts == 3 && r->prompts[0].is_text && !r->prompts[1].is_text);
    CHECK(strcmp(r->prompts[0].text, prompts[0].text) == 0 && r->prompts[0].tokens == 512);
    CHECK(r->prompts[1].text == NULL && strcmp(r->prompts[1].name, "red-fox") == 0);
    CHECK(r->prompts[2].is_text && strcmp(r->prompts[2].text, "") == 0);
    CHECK(weft_msg_prompt_floats(&r->prompts[0]) == 0 && r->n_embeds == 6);
    weft_msg_cleanup(WEFT_MSG_RUN, b);
    free(b), weft_free(buf);
    struct weft_msg_run bad = m;
    struct weft_msg_prompt p2[3];
    memcpy(p2, prompts, sizeof(p2));
    bad.prompts = p2;
    p2[0].tokens = 513; /* max_sequence_length is at most 512 */
    expect_refused(WEFT_MSG_RUN, (union weft_msg *)&bad, "prompt text");
    memcpy(p2, prompts, sizeof(p2));
    p2[0].text = long_text;
    expect_refused(WEFT_MSG_RUN, (union weft_msg *)&bad, "prompt text");
    memcpy(p2, prompts, sizeof(p2));
    p2[0].text = "caf\xe9";
    expect_refused(WEFT_MSG_RUN, (union weft_msg *)&bad, "prompt text");
    memcpy(p2, prompts, sizeof(p2));
    p2[0].text = NULL;
    expect_refused(WEFT_MSG_RUN, (union weft_msg *)&bad, "prompt text");
    memcpy(p2, prompts, sizeof(p2));
    p2[1].text = "stray";
    expect_refused(WEFT_MSG_RUN, (union weft_msg *)&bad, "not a text prompt");
    /* the decoder refuses invalid UTF-8 a peer put there itself */
    memcpy(p2, prompts, sizeof(p2));
    p2[0].text = "cafX";
    CHECK(weft_msg_encode(WEFT_MSG_RUN, (union weft_msg *)&bad, &buf, &len, TERR) == WEFT_OK);
    uint8_t *x = memmem(buf, len, "cafX", 4);
    CHECK(x);
    x[3] = 0xe9;
    union weft_msg d;
    weft_error_clear(TERR);
    CHECK(weft_msg_decode(WEFT_MSG_RUN, buf, len, &d, TERR) == WEFT_ERR_PROTOCOL);
    CHECK(d.run.job == m.job && strstr(weft_error_text(TERR), "prompt text"));
    weft_free(buf);
}

static void test_run(void)
{
    struct weft_msg_prompt prompts[2] = {{3, 4, 2, "red-fox"}, {1, 4, 2, ""}};
    struct weft_msg_image_ref images[3] = {{0, 0}, {7, 1}, {65535, 1}};
    float embeds[14 + 6];
    for (int i = 0; i < 20; i++)
        embeds[i] = (float)i * 0.5f - 3.0f;
    struct weft_msg_run m = {
        .job = (1ull << 53) + 1, .epoch = 9, .height = 16384, .width = 16,
        .steps = 1000, .guidance = 0.1, .seed = UINT64_MAX, .n_prompts = 2, .n_images = 3,
        .prompts = prompts, .images = images, .embeds = embeds, .n_embeds = 20,
    };
    snprintf(m.job_id, sizeof(m.job_id), "0000002aabcdef01");
    snprintf(m.model_name, sizeof(m.model_name), "models/flux-tiny");
    void *buf;
    size_t len;
    union weft_msg *b = roundtrip(WEFT_MSG_RUN, (union weft_msg *)&m, &buf, &len);
    const struct weft_msg_run *r = &b->run;
    CHECK(r->job == (1ull << 53) + 1); /* a double would have rounded it */
    CHECK(r->seed == UINT64_MAX);
    CHECK(r->height == 16384 && r->width == 16 && r->steps == 1000 && r->guidance == 0.1);
    CHECK(strcmp(r->job_id, m.job_id) == 0 && strcmp(r->model_name, m.model_name) == 0);
    CHECK(r->n_prompts == 2 && r->prompts[0].tokens == 3 && strcmp(r->prompts[0].name,
                                                                    "red-fox") == 0);
    CHECK(r->n_images == 3 && r->images[2].index == 65535 && r->images[2].prompt == 1);
    CHECK(r->n_embeds == 20 && memcmp(r->embeds, embeds, sizeof(embeds)) == 0);
    weft_msg_cleanup(WEFT_MSG_RUN, b);
    free(b);

    /* the decoder keeps the key when the rest is bad: here the tail is a float short */
    union weft_msg d;
    struct weft_error err = WEFT_ERROR_INIT;
    CHECK(weft_msg_decode(WEFT_MSG_RUN, buf, len - 4, &d, &err) == WEFT_ERR_PROTOCOL);
    CHECK(d.run.job == (1ull << 53) + 1 && d.run.prompts == NULL && d.run.embeds == NULL);
    CHECK(strstr(weft_error_text(&err), "floats"));
    /* a version this side does not speak */
    ((uint8_t *)buf)[0] = WEFT_MSG_VERSION + 1;
    weft_error_clear(&err);
    CHECK(weft_msg_decode(WEFT_MSG_RUN, buf, len, &d, &err) == WEFT_ERR_PROTOCOL);
    CHECK(strstr(weft_error_text(&err), "version"));
    weft_free(buf);

    /* bounds the coordinator's encoder and the worker's decoder share */
    struct weft_msg_run bad = m;
    bad.height = 16385;
    expect_refused(WEFT_MSG_RUN, (union weft_msg *)&bad, "height");
    bad = m, bad.steps = 0;
    expect_refused(WEFT_MSG_RUN, (union weft_msg *)&bad, "steps");
    bad = m, bad.guidance = NAN;
    expect_refused(WEFT_MSG_RUN, (union weft_msg *)&bad, "guidance");
    bad = m, bad.n_embeds = 19;
    expect_refused(WEFT_MSG_RUN, (union weft_msg *)&bad, "floats");
    bad = m, bad.job = 0;
    expect_refused(WEFT_MSG_RUN, (union weft_msg *)&bad, "job");
    struct weft_msg_image_ref far[1] = {{0, 2}};
    bad = m, bad.images = far, bad.n_images = 1;
    expect_refused(WEFT_MSG_RUN, (union weft_msg *)&bad, "image");
    struct weft_msg_prompt empty[2] = {{0, 4, 2, ""}, {1, 4, 2, ""}};
    bad = m, bad.prompts = empty, bad.n_embeds = 8;
    expect_refused(WEFT_MSG_RUN, (union weft_msg *)&bad, "prompt");
    test_run_text(&m);

    /* true CFG: the negatives after the prompts; images are of the first ones only */
    struct weft_msg_image_ref firsts[2] = {{0, 0}, {4, 0}};
    struct weft_msg_run cfg = m;
    cfg.n_negatives = 1, cfg.true_cfg_scale = 3.5, cfg.images = firsts, cfg.n_images = 2;
    b = roundtrip(WEFT_MSG_RUN, (union weft_msg *)&cfg, &buf, &len);
    CHECK(b->run.n_prompts == 2 && b->run.n_negatives == 1 && b->run.true_cfg_scale == 3.5);
    CHECK(b->run.images[1].index == 4 && b->run.images[1].prompt == 0);
    weft_msg_cleanup(WEFT_MSG_RUN, b);
    free(b);
    weft_free(buf);
    bad = cfg, bad.images = images, bad.n_images = 3; /* an image of the negative prompt */
    expect_refused(WEFT_MSG_RUN, (union weft_msg *)&bad, "image");
    bad = cfg, bad.n_negatives = 2;
    expect_refused(WEFT_MSG_RUN, (union weft_msg *)&bad, "n_negatives");
    bad = cfg, bad.true_cfg_scale = NAN;
    expect_refused(WEFT_MSG_RUN, (union weft_msg *)&bad, "true_cfg_scale");
    bad = cfg, bad.true_cfg_scale = 1000.5;
    expect_refused(WEFT_MSG_RUN, (union weft_msg *)&bad, "true_cfg_scale");
}

static void test_small(void)
{
    void *buf;
    size_t len;
    union weft_msg m = {.step = {UINT64_MAX, 65535, 28, 28, 0.25}};
    union weft_msg *b = roundtrip(WEFT_MSG_STEP, &m, &buf, &len);
    CHECK(b->step.job == UINT64_MAX && b->step.image == 65535 && b->step.step == 28 &&
          b->step.seconds == 0.25);
    free(b), weft_free(buf);
    m.step.step = 29;
    expect_refused(WEFT_MSG_STEP, &m, "step");

    static const uint8_t png[] = "\x89PNG\r\n\x1a\n rest of a PNG";
    m = (union weft_msg){.image = {5, 3, 256, 128, 1.5, 0.5, png, sizeof(png)}};
    b = roundtrip(WEFT_MSG_IMAGE, &m, &buf, &len);
    CHECK(b->image.job == 5 && b->image.width == 256 && b->image.height == 128);
    CHECK(b->image.png_len == sizeof(png) && memcmp(b->image.png, png, sizeof(png)) == 0);
    free(b), weft_free(buf);
    m.image.png = "not a png";
    m.image.png_len = 9;
    expect_refused(WEFT_MSG_IMAGE, &m, "PNG");

    m = (union weft_msg){.done = {.job = 77, .status = WEFT_ERR_TIMEOUT, .n_comm = 2}};
    snprintf(m.done.error, sizeof(m.done.error), "worker w1: a collective timed out");
    m.done.comm[0] = (struct weft_msg_comm){"tp", "allreduce", 0.5, 1e9, 1ull << 40};
    m.done.comm[1] = (struct weft_msg_comm){"ulysses", "alltoall", 0.25, 2e6, 3};
    m.done.prompt_cache_hits = 5;
    m.done.prompt_cache_misses = UINT64_MAX;
    b = roundtrip(WEFT_MSG_DONE, &m, &buf, &len);
    CHECK(b->done.job == 77 && b->done.status == WEFT_ERR_TIMEOUT && b->done.n_comm == 2);
    CHECK(b->done.prompt_cache_hits == 5 && b->done.prompt_cache_misses == UINT64_MAX);
    CHECK(strcmp(b->done.error, m.done.error) == 0 && b->done.comm[0].calls == 1ull << 40);
    CHECK(strcmp(b->done.comm[1].op, "alltoall") == 0);
    free(b), weft_free(buf);
    snprintf(m.done.comm[1].group, sizeof(m.done.comm[1].group), "Bad-Label");
    expect_refused(WEFT_MSG_DONE, &m, "comm");

    m = (union weft_msg){.assigned = {3, WEFT_ERR_FORMAT, "", 123456789012ull, 42,
                                      (1ull << 40) + 3, 16}};
    snprintf(m.assigned.error, sizeof(m.assigned.error), "vae/config.json: bad");
    b = roundtrip(WEFT_MSG_ASSIGNED, &m, &buf, &len);
    CHECK(b->assigned.epoch == 3 && b->assigned.status == WEFT_ERR_FORMAT &&
          b->assigned.transformer_bytes == 123456789012ull && b->assigned.vae_bytes == 42 &&
          b->assigned.text_bytes == (1ull << 40) + 3 && b->assigned.threads == 16);
    free(b), weft_free(buf);
    m.assigned.threads = 2000;
    expect_refused(WEFT_MSG_ASSIGNED, &m, "threads");

    m = (union weft_msg){.job = {UINT64_MAX}};
    b = roundtrip(WEFT_MSG_CANCEL, &m, &buf, &len);
    CHECK(b->job.job == UINT64_MAX);
    free(b), weft_free(buf);
    m = (union weft_msg){.epoch = {1ull << 60}};
    b = roundtrip(WEFT_MSG_RESET, &m, &buf, &len);
    CHECK(b->epoch.epoch == 1ull << 60);
    free(b), weft_free(buf);
    m = (union weft_msg){.hello = {"w12"}};
    b = roundtrip(WEFT_MSG_HELLO, &m, &buf, &len);
    CHECK(strcmp(b->hello.id, "w12") == 0);
    free(b), weft_free(buf);
    b = roundtrip(WEFT_MSG_PING, NULL, &buf, &len);
    CHECK_EQ(len, 1);
    free(b), weft_free(buf);
    b = roundtrip(WEFT_MSG_SHUTDOWN, NULL, &buf, &len);
    free(b), weft_free(buf);

    /* a string with a NUL or bad UTF-8 inside, and bytes after the fields */
    static const uint8_t nul[] = {WEFT_MSG_VERSION, 3, 0, 0, 0, 'w', 0, '1'};
    union weft_msg d;
    struct weft_error err = WEFT_ERROR_INIT;
    CHECK(weft_msg_decode(WEFT_MSG_HELLO, nul, sizeof(nul), &d, &err) == WEFT_ERR_PROTOCOL);
    static const uint8_t utf[] = {WEFT_MSG_VERSION, 2, 0, 0, 0, 0xc3, 0x28};
    CHECK(weft_msg_decode(WEFT_MSG_HELLO, utf, sizeof(utf), &d, &err) == WEFT_ERR_PROTOCOL);
    static const uint8_t extra[] = {WEFT_MSG_VERSION, 1, 0, 0, 0, 'w', 'x'};
    CHECK(weft_msg_decode(WEFT_MSG_HELLO, extra, sizeof(extra), &d, &err) == WEFT_ERR_PROTOCOL);
    CHECK(weft_msg_decode(0, extra, sizeof(extra), &d, &err) == WEFT_ERR_PROTOCOL);
    CHECK(weft_msg_decode(WEFT_MSG_TYPE_COUNT, extra, 1, &d, &err) == WEFT_ERR_PROTOCOL);
}

/* The bootstrap frames: encode, parse, decode; malformed fields named. */
static void test_boot(void)
{
    struct weft_boot_challenge c, c2;
    CHECK_OK(weft_boot_new_challenge(c.challenge));
    char *text = weft_boot_challenge_encode(&c);
    CHECK(text);
    cJSON *j;
    struct weft_error err = WEFT_ERROR_INIT;
    CHECK_OK(weft_boot_parse(text, strlen(text), &j, &err));
    CHECK_OK(weft_boot_challenge_decode(j, &c2, &err));
    CHECK(strcmp(c.challenge, c2.challenge) == 0);
    cJSON_Delete(j), weft_free(text);

    struct weft_boot_hello h = {.link = "ucx-address", .link_len = 11}, h2;
    weft_boot_proof("s3cret", "worker", c.challenge, h.response);
    CHECK_OK(weft_boot_new_challenge(h.challenge));
    h.inventory = cJSON_CreateObject();
    cJSON_AddStringToObject(h.inventory, "host", "node7");
    text = weft_boot_hello_encode(&h);
    CHECK(text);
    CHECK_OK(weft_boot_parse(text, strlen(text), &j, &err));
    CHECK_OK(weft_boot_hello_decode(j, &h2, &err));
    CHECK(h2.link_len == 11 && memcmp(h2.link, "ucx-address", 11) == 0);
    CHECK(weft_boot_proof_ok(h2.response, h.response));
    CHECK(!cJSON_GetObjectItemCaseSensitive(h2.inventory, "link"));
    CHECK(strcmp(cJSON_GetObjectItemCaseSensitive(h2.inventory, "host")->valuestring,
                 "node7") == 0);
    weft_boot_hello_cleanup(&h2);
    cJSON_Delete(j), weft_free(text), cJSON_Delete(h.inventory);

    const char *bad[] = {
        "{\"weft\": 2, \"challenge\": \"00\"}",
        "{\"weft\": 1, \"challenge\": \"xyz\"}",
        "{\"weft\": 1, \"accepted\": true, \"id\": \"w1\", \"response\": \"00\", \"link\": \"QQ==\"}",
        "{\"weft\": 1, \"accepted\": \"yes\"}",
    };
    for (int i = 0; i < 4; i++) {
        CHECK_OK(weft_boot_parse(bad[i], strlen(bad[i]), &j, &err));
        struct weft_boot_accept a;
        weft_status_t st = i < 2 ? weft_boot_challenge_decode(j, &c2, &err)
                                 : weft_boot_accept_decode(j, &a, &err);
        CHECK(st == WEFT_ERR_PROTOCOL);
        cJSON_Delete(j);
    }
    CHECK(weft_boot_parse("[1]", 3, &j, &err) == WEFT_ERR_PROTOCOL);
    CHECK(weft_boot_parse("{\"a\":\xff}", 7, &j, &err) == WEFT_ERR_PROTOCOL);
}

/* The fuzz corpus's seeds (the files this test writes, named after their type) still decode:
 * after a change to the wire they are made again, or the fuzzer starts from inputs the
 * version byte turns away. */
static void test_corpus(void)
{
    const char *root = getenv("WEFT_SOURCE_ROOT");
    if (!root)
        return; /* run by hand outside meson */
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/tests/fuzz/corpus/msg", root);
    DIR *d = opendir(dir);
    CHECK(d);
    int seeds = 0;
    for (struct dirent *e; (e = readdir(d));) {
        bool seed = false; /* TYPE or TYPE_K, as roundtrip() names them */
        for (unsigned t = 1; t < WEFT_MSG_TYPE_COUNT && !seed; t++) {
            const size_t k = strlen(weft_msg_name(t));
            seed = strncmp(e->d_name, weft_msg_name(t), k) == 0 &&
                   (e->d_name[k] == '\0' ||
                    (e->d_name[k] == '_' && strspn(e->d_name + k + 1, "0123456789") ==
                                                strlen(e->d_name + k + 1)));
        }
        if (!seed)
            continue; /* what the fuzzer found keeps its own name */
        char path[1400];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        CHECK(f);
        static uint8_t buf[1 << 20];
        const size_t n = fread(buf, 1, sizeof(buf), f);
        fclose(f);
        CHECK(n >= 1);
        union weft_msg *m = calloc(1, sizeof(*m));
        CHECK(m);
        struct weft_error err = WEFT_ERROR_INIT;
        if (weft_msg_decode(buf[0], buf + 1, n - 1, m, &err) != WEFT_OK) {
            fprintf(stderr, "%s no longer decodes (%s): make the corpus again (the command "
                            "at the top of tests/unit/test_msg.c)\n", path, weft_error_text(&err));
            exit(1);
        }
        weft_msg_cleanup(buf[0], m);
        free(m);
        seeds++;
    }
    closedir(d);
    CHECK(seeds >= WEFT_MSG_TYPE_COUNT - 1);
}

/* What an inventory's memory means to the planners: a GPU's own, a CPU worker's host RAM
 * (shared with the host's other workers), a [worker] memory budget (its own); none, or a
 * number that is not a size, is no memory. */
static void test_inventory_memory(void)
{
    static const struct {
        const char *json;
        bool ok, shared;
        uint64_t bytes;
    } cases[] = {
        {"{\"device\": \"cuda:0\", \"memory\": 1000, \"host_memory\": 5000}", true, false,
         1000},
        {"{\"device\": \"cpu\", \"memory\": 5000, \"host_memory\": 5000}", true, true, 5000},
        {"{\"device\": \"cpu\", \"memory\": 1000, \"host_memory\": 5000}", true, false, 1000},
        {"{\"device\": \"cpu\", \"memory\": 5000}", true, true, 5000},
        {"{\"device\": \"cpu\", \"host_memory\": 5000}", false, false, 0},
        {"{\"device\": \"cpu\", \"memory\": 3.3e124}", false, false, 0},
        {"{\"device\": \"cpu\", \"memory\": 0}", false, false, 0},
        {"{\"device\": \"cpu\", \"memory\": \"5000\"}", false, false, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cJSON *j = cJSON_Parse(cases[i].json);
        uint64_t bytes = 7;
        bool shared = false;
        const bool ok = weft_boot_inventory_memory(j, &bytes, &shared);
        CHECK_EQ(ok, cases[i].ok);
        if (ok)
            CHECK(bytes == cases[i].bytes && shared == cases[i].shared);
        cJSON_Delete(j);
    }
    CHECK(!weft_boot_inventory_memory(NULL, &(uint64_t){0}, &(bool){false}));
}

int main(void)
{
    test_quiet();
    test_assign();
    test_run();
    test_small();
    test_boot();
    test_inventory_memory();
    test_corpus();
    printf("ok\n");
    return 0;
}
