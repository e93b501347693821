/* PNG through libspng: what is written reads back pixel for pixel with its text chunks (ASCII
 * in tEXt, UTF-8 in iTXt); bad keys, sizes, truncated and corrupted files are errors. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "test.h"
#include "worker/png.h"

static char dir[256];

static void path_in(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", dir, name);
}

static uint8_t *pattern(int64_t w, int64_t h)
{
    uint8_t *p = malloc((size_t)(w * h * 3));
    CHECK(p);
    uint32_t s = 12345;
    for (int64_t i = 0; i < w * h * 3; i++) {
        s = s * 1103515245u + 12345u;
        p[i] = i % 7 == 0 ? (uint8_t)(s >> 24) : (uint8_t)(i * 31 / 7); /* noise and ramps */
    }
    return p;
}

static void roundtrip(int64_t w, int64_t h)
{
    char path[512];
    path_in(path, sizeof(path), "rt.png");
    uint8_t *rgb = pattern(w, h);
    const struct weft_png_text text[] = {
        {"Software", "weft test"},
        {"weft.prompt", "red-fox"},
        {"weft.seed", "18446744073709551615"},
        {"weft.model", "/tmp/mod\xc3\xa8les/flux \xe2\x80\x94 tiny"}, /* UTF-8: iTXt */
    };
    CHECK_OK(weft_png_write(path, rgb, w, h, 4, text, TERR));
    FILE *f = fopen(path, "rb");
    CHECK(f);
    uint8_t sig[8];
    CHECK(fread(sig, 1, 8, f) == 8);
    CHECK(fclose(f) == 0);
    CHECK(memcmp(sig, "\x89PNG\r\n\x1a\n", 8) == 0);
    struct weft_png_image img;
    CHECK_OK(weft_png_read(path, &img, TERR));
    CHECK_EQ(img.width, w);
    CHECK_EQ(img.height, h);
    CHECK(memcmp(img.rgb, rgb, (size_t)(w * h * 3)) == 0);
    CHECK_EQ(img.n_text, 4);
    for (int i = 0; i < 4; i++) {
        const char *v = weft_png_image_text(&img, text[i].key);
        CHECK(v && strcmp(v, text[i].value) == 0);
    }
    CHECK(weft_png_image_text(&img, "absent") == NULL);
    weft_png_image_cleanup(&img);
    /* an empty value (an empty prompt) writes no chunk, and the rest are kept */
    const struct weft_png_text some[] = {{"weft.prompt", ""}, {"weft.seed", "7"}};
    CHECK_OK(weft_png_write(path, rgb, w, h, 2, some, TERR));
    CHECK_OK(weft_png_read(path, &img, TERR));
    CHECK_EQ(img.n_text, 1);
    CHECK(weft_png_image_text(&img, "weft.prompt") == NULL);
    CHECK(strcmp(weft_png_image_text(&img, "weft.seed"), "7") == 0);
    weft_png_image_cleanup(&img);
    free(rgb);
}

static void errors(void)
{
    char path[512], bad[512];
    path_in(path, sizeof(path), "e.png");
    uint8_t px[3 * 4] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    struct weft_png_text long_key = {"k123456789k123456789k123456789k123456789k123456789"
                                     "k123456789k123456789k123456789", "v"};
    struct weft_png_text bad_key = {" lead", "v"};
    test_quiet();
    CHECK_FAILS(weft_png_write(path, px, 2, 2, 1, &long_key, TERR), WEFT_ERR_INVALID, "text key");
    CHECK_FAILS(weft_png_write(path, px, 2, 2, 1, &bad_key, TERR), WEFT_ERR_INVALID, "text key");
    CHECK_FAILS(weft_png_write(path, px, 0, 2, 0, NULL, TERR), WEFT_ERR_INVALID, "not a PNG size");
    CHECK_FAILS(weft_png_write(path, px, 70000, 1, 0, NULL, TERR), WEFT_ERR_INVALID, "PNG size");
    CHECK(access(path, F_OK) != 0); /* nothing half-written left behind */
    path_in(bad, sizeof(bad), "no/such/dir/x.png");
    CHECK_FAILS(weft_png_write(bad, px, 2, 2, 0, NULL, TERR), WEFT_ERR_IO, "no/such/dir");
    struct weft_png_image img;
    CHECK_FAILS(weft_png_read(bad, &img, TERR), WEFT_ERR_IO, "no/such/dir");

    /* a valid file, then truncated, then with a flipped byte in the image data */
    uint8_t *big = pattern(64, 48);
    CHECK_OK(weft_png_write(path, big, 64, 48, 0, NULL, TERR));
    FILE *f = fopen(path, "rb");
    CHECK(f);
    uint8_t buf[65536];
    size_t n = fread(buf, 1, sizeof(buf), f);
    CHECK(fclose(f) == 0 && n > 100);
    path_in(bad, sizeof(bad), "bad.png");
    f = fopen(bad, "wb");
    CHECK(f && fwrite(buf, 1, n / 2, f) == n / 2 && fclose(f) == 0);
    CHECK_FAILS(weft_png_read(bad, &img, TERR), WEFT_ERR_FORMAT, "bad.png");
    buf[n / 2] ^= 0x55; /* inside IDAT: the CRC no longer matches */
    f = fopen(bad, "wb");
    CHECK(f && fwrite(buf, 1, n, f) == n && fclose(f) == 0);
    CHECK_FAILS(weft_png_read(bad, &img, TERR), WEFT_ERR_FORMAT, "bad.png");
    f = fopen(bad, "wb");
    CHECK(f && fwrite("not a png at all", 1, 16, f) == 16 && fclose(f) == 0);
    CHECK_FAILS(weft_png_read(bad, &img, TERR), WEFT_ERR_FORMAT, "bad.png");
    weft_log_set_sink(NULL, NULL);
    free(big);
    CHECK(remove(bad) == 0 && remove(path) == 0);
}

/* The generation parameters: weft's keys and the A1111 "parameters" chunk, one vocabulary. */
static void test_meta(void)
{
    struct weft_png_meta m = {.prompt = "red-fox", .model = "/models/flux-tiny",
                              .layout = "dp 1 x ring 1 x ulysses 1 x tp 2", .job = "00000001abcd",
                              .has_seed = true, .seed = 7, .steps = 4, .guidance = 3.5,
                              .width = 256, .height = 192, .image = 0, .prompt_index = 0};
    struct weft_png_meta_store store;
    struct weft_png_text text[WEFT_PNG_META_MAX];
    size_t n = weft_png_meta_text(&m, &store, text);
    CHECK(n <= WEFT_PNG_META_MAX);
    const char *params = NULL, *seed = NULL;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(text[i].key, "parameters") == 0)
            params = text[i].value;
        if (strcmp(text[i].key, "weft.seed") == 0)
            seed = text[i].value;
    }
    CHECK(seed && strcmp(seed, "7") == 0);
    CHECK(params);
    char want[512];
    snprintf(want, sizeof(want), "red-fox\nSteps: 4, Sampler: Euler, Schedule type: Simple, CFG "
             "scale: 1, Distilled CFG Scale: 3.5, Seed: 7, Size: 256x192, Model: flux-tiny, "
             "Version: weft %s, Layout: dp 1 x ring 1 x ulysses 1 x tp 2, Job: 00000001abcd",
             WEFT_VERSION);
    if (strcmp(params, want) != 0)
        fprintf(stderr, "parameters:\n%s\nwant:\n%s\n", params, want);
    CHECK(strcmp(params, want) == 0);
    /* start latents given: no seed, as A1111 writes -1 */
    m.has_seed = false;
    m.layout = m.job = NULL;
    n = weft_png_meta_text(&m, &store, text);
    CHECK(strstr(text[n - 1].value, "Seed: -1, ") && !strstr(text[n - 1].value, "Job:"));
    /* a PNG written with them reads back with them */
    uint8_t px[2 * 2 * 3] = {0};
    char path[256];
    snprintf(path, sizeof(path), "/tmp/weft-test-png-meta-%d.png", (int)getpid());
    CHECK_OK(weft_png_write(path, px, 2, 2, n, text, TERR));
    struct weft_png_image img;
    CHECK_OK(weft_png_read(path, &img, TERR));
    CHECK(weft_png_image_text(&img, "parameters") &&
          strcmp(weft_png_image_text(&img, "parameters"), text[n - 1].value) == 0);
    weft_png_image_cleanup(&img);
    CHECK(unlink(path) == 0);
}

int main(void)
{
    test_meta();
    snprintf(dir, sizeof(dir), "%s/weft_png_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    CHECK(mkdtemp(dir));
    roundtrip(1, 1);
    roundtrip(256, 256);
    roundtrip(33, 7);
    errors();
    char path[512];
    path_in(path, sizeof(path), "rt.png");
    CHECK(remove(path) == 0);
    CHECK(rmdir(dir) == 0);
    return 0;
}
