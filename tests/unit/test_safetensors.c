/* safetensors reader: every read kind against a full read, dtype conversion on read, bytes
 * requested by sliced reads, and a corpus of broken files that must each fail cleanly. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/dtype.h"
#include "model/safetensors.h"
#include "st_write.h"
#include "test.h"

static char dir[] = "/tmp/weft_test_st_XXXXXX";
static char path[512];
static const char *corpus_dir; /* WEFT_WRITE_CORPUS: also save each case as a fuzz seed */

static const char *tmp(const char *name)
{
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return path;
}

static void save_seed(const char *name, const char *file)
{
    if (!corpus_dir)
        return;
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s/%s'", file, corpus_dir, name);
    CHECK(system(cmd) == 0);
}

/* ---------------------------------------------------------------------------------------- */

static float a_data[5 * 7];
static uint16_t b_data[6 * 10];
static uint16_t c_data[4 * 3 * 2];
static int64_t i_data[3] = {1, -2, 1ll << 40};
static float s_data[1] = {42.5f};

static void make_valid(const char *file)
{
    for (int i = 0; i < 35; i++)
        a_data[i] = (float)i * 0.5f - 3.0f;
    for (int i = 0; i < 60; i++)
        b_data[i] = weft_f32_to_bf16((float)i * 0.25f + 1.0f);
    for (int i = 0; i < 24; i++)
        c_data[i] = weft_f32_to_f16((float)i - 10.0f);
    struct st_spec t[] = {
        {"a", "F32", 2, {5, 7}, a_data, sizeof(a_data)},
        {"b", "BF16", 2, {6, 10}, b_data, sizeof(b_data)},
        {"c.weight", "F16", 3, {4, 3, 2}, c_data, sizeof(c_data)},
        {"e", "F32", 2, {0, 3}, NULL, 0},
        {"i", "I64", 1, {3}, i_data, sizeof(i_data)},
        {"s", "F32", 0, {0}, s_data, sizeof(s_data)},
    };
    CHECK(st_write(file, t, 6, "{\"format\":\"pt\",\"note\":\"caf\\u00e9\"}") == 0);
}

static void test_reads(void)
{
    const char *file = tmp("valid.safetensors");
    make_valid(file);
    save_seed("valid", file);
    struct weft_st_file *f;
    CHECK_OK(weft_st_open(file, &f, TERR));
    CHECK_EQ(weft_st_count(f), 6);
    CHECK_EQ(weft_st_meta_count(f), 2);
    CHECK(strcmp(weft_st_meta_at(f, 1)->value, "caf\xc3\xa9") == 0);
    const struct weft_st_tensor *a = weft_st_find(f, "a"), *b = weft_st_find(f, "b"),
                                *c = weft_st_find(f, "c.weight"), *i = weft_st_find(f, "i"),
                                *s = weft_st_find(f, "s"), *e = weft_st_find(f, "e");
    CHECK(a && b && c && i && s && e && !weft_st_find(f, "nope"));
    CHECK_EQ(s->ndim, 0);
    CHECK_EQ(s->numel, 1);
    CHECK_EQ(e->numel, 0);
    CHECK_EQ(b->dtype, WEFT_DTYPE_BF16);

    float full[64];
    CHECK_OK(weft_st_read(f, a, full, WEFT_DTYPE_F32, TERR));
    CHECK(memcmp(full, a_data, sizeof(a_data)) == 0);
    float sv;
    CHECK_OK(weft_st_read(f, s, &sv, WEFT_DTYPE_F32, TERR));
    CHECK(sv == 42.5f);
    int64_t iv[3];
    CHECK_OK(weft_st_read(f, i, iv, WEFT_DTYPE_I64, TERR));
    CHECK(iv[2] == 1ll << 40);
    CHECK_FAILS(weft_st_read(f, i, full, WEFT_DTYPE_F32, TERR), WEFT_ERR_UNSUPPORTED, "'i'", "I64");

    /* bf16 -> f32 and f32 -> bf16 (narrowing goes through the staging buffer) */
    float bf[60];
    CHECK_OK(weft_st_read(f, b, bf, WEFT_DTYPE_F32, TERR));
    for (int k = 0; k < 60; k++)
        CHECK(bf[k] == weft_bf16_to_f32(b_data[k]));
    uint16_t ab[35];
    CHECK_OK(weft_st_read(f, a, ab, WEFT_DTYPE_BF16, TERR));
    for (int k = 0; k < 35; k++)
        CHECK_EQ(ab[k], weft_f32_to_bf16(a_data[k]));
    float cf[24];
    CHECK_OK(weft_st_read(f, c, cf, WEFT_DTYPE_F32, TERR));
    for (int k = 0; k < 24; k++)
        CHECK(cf[k] == (float)k - 10.0f);

    /* dim 0: rows [1,3) and [4,5) of a */
    struct weft_range rows[] = {{1, 3}, {4, 5}};
    float got[64];
    CHECK_OK(weft_st_read_ranges(f, a, 0, 2, rows, got, WEFT_DTYPE_F32, TERR));
    CHECK(memcmp(got, a_data + 7, 14 * 4) == 0);
    CHECK(memcmp(got + 14, a_data + 28, 7 * 4) == 0);

    /* dim 1: columns [2,5), [0,1), [6,7) of a, concatenated per row */
    struct weft_range cols[] = {{2, 5}, {0, 1}, {6, 7}};
    CHECK_OK(weft_st_read_ranges(f, a, 1, 3, cols, got, WEFT_DTYPE_F32, TERR));
    for (int r = 0; r < 5; r++) {
        int o = 0;
        for (int k = 0; k < 3; k++)
            for (int64_t col = cols[k].begin; col < cols[k].end; col++)
                CHECK(got[r * 5 + o++] == a_data[r * 7 + col]);
    }

    /* packed blocks [4, 6] of b at T=2, both dims, converted to f32 */
    for (int rank = 0; rank < 2; rank++) {
        struct weft_range pk[] = {{rank * 2, rank * 2 + 2}, {4 + rank * 3, 4 + rank * 3 + 3}};
        CHECK_OK(weft_st_read_ranges(f, b, 1, 2, pk, got, WEFT_DTYPE_F32, TERR));
        for (int r = 0; r < 6; r++) {
            int o = 0;
            for (int k = 0; k < 2; k++)
                for (int64_t col = pk[k].begin; col < pk[k].end; col++)
                    CHECK(got[r * 5 + o++] == bf[r * 10 + col]);
        }
        struct weft_range pr[] = {{rank * 2, rank * 2 + 2}, {4 + rank, 5 + rank}};
        CHECK_OK(weft_st_read_ranges(f, b, 0, 2, pr, got, WEFT_DTYPE_F32, TERR));
        CHECK(memcmp(got, bf + rank * 20, 20 * 4) == 0);
        CHECK(memcmp(got + 20, bf + (4 + rank) * 10, 10 * 4) == 0);
    }

    /* dim 1 of a 3-d tensor keeps the trailing dims together */
    struct weft_range c1[] = {{1, 3}};
    CHECK_OK(weft_st_read_ranges(f, c, 1, 1, c1, got, WEFT_DTYPE_F32, TERR));
    for (int r = 0; r < 4; r++)
        for (int k = 0; k < 4; k++)
            CHECK(got[r * 4 + k] == cf[r * 6 + 2 + k]);

    /* the whole range along dim 1 is one contiguous read */
    struct weft_range all[] = {{0, 7}};
    uint64_t before = weft_st_bytes_read(f);
    CHECK_OK(weft_st_read_ranges(f, a, 1, 1, all, got, WEFT_DTYPE_F32, TERR));
    CHECK(memcmp(got, a_data, sizeof(a_data)) == 0);
    CHECK_EQ(weft_st_bytes_read(f) - before, sizeof(a_data));

    struct weft_range bad[] = {{3, 8}};
    CHECK_FAILS(weft_st_read_ranges(f, a, 1, 1, bad, got, WEFT_DTYPE_F32, TERR), WEFT_ERR_RANGE,
                "'a'", "[3, 8)");
    CHECK_FAILS(weft_st_read_ranges(f, a, 2, 1, rows, got, WEFT_DTYPE_F32, TERR), WEFT_ERR_INVALID,
                "dim 2");
    weft_st_close(f);
}

/* A column slice at tp=4 of a 64 MiB tensor requests a quarter of its bytes, no more. */
static void test_bytes_read(void)
{
    const int64_t n = 4096;
    float *w = malloc((size_t)(n * n) * 4);
    for (int64_t k = 0; k < n * n; k++)
        w[k] = (float)(k % 1000);
    struct st_spec t[] = {{"w", "F32", 2, {n, n}, w, (size_t)(n * n) * 4}};
    const char *file = tmp("big.safetensors");
    CHECK(st_write(file, t, 1, NULL) == 0);
    struct weft_st_file *f;
    CHECK_OK(weft_st_open(file, &f, TERR));
    const struct weft_st_tensor *wt = weft_st_find(f, "w");
    float *part = malloc((size_t)(n * n));
    for (int rank = 0; rank < 4; rank++) {
        struct weft_range r = {rank * n / 4, (rank + 1) * n / 4};
        uint64_t before = weft_st_bytes_read(f);
        CHECK_OK(weft_st_read_ranges(f, wt, 1, 1, &r, part, WEFT_DTYPE_F32, TERR));
        uint64_t got = weft_st_bytes_read(f) - before;
        printf("tp=4 rank %d column slice: %llu of %llu bytes requested\n", rank,
               (unsigned long long)got, (unsigned long long)(n * n * 4));
        CHECK(got == (uint64_t)(n * n)); /* exactly a quarter of 64 MiB */
        for (int64_t row = 0; row < n; row += 511)
            CHECK(part[row * (n / 4) + 7] == w[row * n + r.begin + 7]);
        before = weft_st_bytes_read(f);
        CHECK_OK(weft_st_read_ranges(f, wt, 0, 1, &r, part, WEFT_DTYPE_F32, TERR));
        CHECK(weft_st_bytes_read(f) - before == (uint64_t)(n * n));
        CHECK(memcmp(part, w + r.begin * n, (size_t)(n * n)) == 0);
    }
    free(part);
    free(w);
    weft_st_close(f);
    unlink(file);
}

/* ---------------------------------------------------------------------------------------- */

struct broken {
    const char *name;
    const char *header;
    uint64_t len_override;
    size_t data_len;
    const char *reason;
};

#define T1(extra) "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}" extra "}"

static const struct broken corpus[] = {
    {"len_past_eof", T1(""), 1000, 8, "runs past the end of the file"},
    {"len_too_big", T1(""), 200000000, 8, "exceeds the 100000000-byte limit"},
    {"truncated_json", "{\"t\":{\"dtype\":\"F32\",\"sha", 0, 0, "not valid JSON"},
    {"not_object", "[1,2]", 0, 0, "not a JSON object"},
    {"text_after", T1("") " x", 0, 8, "data after the JSON value"},
    {"raw_control",
     "{\"t\x01\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 0, 8,
     "raw control character (0x01) in a string at byte 3"},
    {"unknown_dtype", "{\"t\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 0, 8,
     "unknown dtype 'F33'"},
    {"size_mismatch", "{\"t\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 0, 8,
     "span 8 bytes but F32 [3] needs 12"},
    {"overlap",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
     0, 12, "overlap"},
    {"gap",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
     0, 12, "gap"},
    {"end_before_begin", "{\"t\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", 0,
     8, "end before begin"},
    {"past_data", "{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 0, 8,
     "past the end of the 8-byte data buffer"},
    {"trailing_bytes", T1(""), 0, 12, "trailing bytes"},
    {"duplicate",
     "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
     0, 8, "'t' appears twice"},
    {"bad_utf8", "{\"t\xff\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 0, 8,
     "not valid UTF-8"},
    {"overlong_utf8", "{\"t\xc0\xaf\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
     0, 8, "not valid UTF-8"},
    {"shape_overflow",
     "{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,8]}}",
     0, 8, "more than 2^63 elements"},
    {"bytes_overflow",
     "{\"t\":{\"dtype\":\"F64\",\"shape\":[4294967296,1073741824],\"data_offsets\":[0,8]}}", 0,
     8, "overflows 64 bits"},
    {"shape_huge", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,8]}}", 0, 8,
     "shape[0] is not a non-negative integer"},
    {"shape_negative", "{\"t\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 0, 8,
     "shape[0]"},
    {"shape_fraction", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 0, 8,
     "shape[0]"},
    {"missing_field", "{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 0, 8,
     "missing field 'shape'"},
    {"unknown_field",
     "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 0, 8,
     "unknown field 'x'"},
    {"offsets_arity", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,9]}}", 0, 8,
     "data_offsets is not [begin, end]"},
    {"meta_not_string", "{\"__metadata__\":{\"a\":1}}", 0, 0, "__metadata__ value of 'a'"},
    {"meta_twice", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, 0, "appears twice"},
    {"empty_name", "{\"\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 0, 8,
     "empty name"},
    {"entry_not_object", "{\"t\":[1]}", 0, 0, "not a JSON object"},
    {"too_many_dims",
     "{\"t\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 0, 4,
     "9 dimensions"},
    {"sub_byte", "{\"t\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 0, 2,
     "do not fill whole bytes"},
};

static void check_broken(const char *name, const char *file, const char *reason)
{
    struct weft_st_file *f = NULL;
    struct weft_error err = WEFT_ERROR_INIT;
    weft_status_t st = weft_st_open(file, &f, &err);
    const char *text = weft_error_text(&err);
    if (st == WEFT_OK || err.status != st || !strstr(text, reason) || !strstr(text, file)) {
        fprintf(stderr, "broken case %s: status %d, error \"%s\", wanted \"%s\"\n", name, st, text,
                reason);
        exit(1);
    }
    CHECK(f == NULL);
}

static void test_corpus(void)
{
    uint8_t zeros[64] = {0};
    for (size_t k = 0; k < sizeof(corpus) / sizeof(corpus[0]); k++) {
        const struct broken *b = &corpus[k];
        const char *file = tmp(b->name);
        CHECK(st_write_raw(file, b->header, b->len_override, zeros, b->data_len) == 0);
        check_broken(b->name, file, b->reason);
        save_seed(b->name, file);
    }
    /* shorter than the length prefix */
    const char *file = tmp("short");
    FILE *fp = fopen(file, "wb");
    CHECK(fp && fwrite("abc", 1, 3, fp) == 3 && fclose(fp) == 0);
    check_broken("short", file, "too short for the 8-byte header length");
    /* deep nesting */
    char *deep = malloc(200016);
    strcpy(deep, "{\"t\":");
    memset(deep + 5, '[', 100000);
    deep[100005] = '\0';
    CHECK(st_write_raw(tmp("deep"), deep, 0, NULL, 0) == 0);
    check_broken("deep", tmp("deep"), "not valid JSON");
    free(deep);
    /* JSON order is not offset order: valid */
    const char *rev = "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
                      "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    CHECK(st_write_raw(tmp("reversed"), rev, 0, zeros, 8) == 0);
    struct weft_st_file *f;
    CHECK_OK(weft_st_open(tmp("reversed"), &f, TERR));
    CHECK(strcmp(weft_st_at(f, 0)->name, "a") == 0);
    weft_st_close(f);
    /* a file truncated after it was opened: the read fails cleanly */
    make_valid(tmp("trunc"));
    CHECK_OK(weft_st_open(tmp("trunc"), &f, TERR));
    CHECK(truncate(tmp("trunc"), 100) == 0);
    float buf[64];
    CHECK_FAILS(weft_st_read(f, weft_st_find(f, "s"), buf, WEFT_DTYPE_F32, TERR), WEFT_ERR_IO,
                "unexpected end of file");
    weft_st_close(f);
    CHECK_FAILS(weft_st_open(tmp("missing"), &f, TERR), WEFT_ERR_NOT_FOUND, "cannot open");
}

int main(void)
{
    test_quiet();
    corpus_dir = getenv("WEFT_WRITE_CORPUS");
    CHECK(mkdtemp(dir));
    test_reads();
    test_bytes_read();
    test_corpus();
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    return 0;
}
