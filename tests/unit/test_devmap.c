/* device_map placement (model/devmap.h) on hand-computed cases, max_memory parsing, the
 * [device_map] configuration, and the mesh with pipeline stages (model/mesh.h). */
#include <stdint.h>
#include <string.h>

#include "common/log.h"
#include "conf/conf.h"
#include "model/devmap.h"
#include "model/mesh.h"
#include "test.h"

#define MB 1000000ull

/* a transformer of 1, 4, 4, 4, 4, 1 MB and a 3 MB VAE */
static struct weft_devmap_unit tf_units[6], vae_unit[1];
static struct weft_devmap_component comps[2];

static void setup(void)
{
    static const char *const names[6] = {"t.embedders", "t.b0", "t.b1", "t.b2", "t.b3",
                                         "t.output"};
    static const uint64_t mb[6] = {1, 4, 4, 4, 4, 1};
    for (int i = 0; i < 6; i++) {
        snprintf(tf_units[i].name, sizeof(tf_units[i].name), "%s", names[i]);
        tf_units[i].bytes = mb[i] * MB;
    }
    snprintf(vae_unit[0].name, sizeof(vae_unit[0].name), "vae");
    vae_unit[0].bytes = 3 * MB;
    comps[0] = (struct weft_devmap_component){"transformer", tf_units, 6};
    comps[1] = (struct weft_devmap_component){"vae", vae_unit, 1};
}

static struct weft_max_memory mm(const char *text)
{
    struct weft_max_memory m;
    char why[200];
    CHECK_OK(weft_conf_parse_max_memory(text, &m, why, sizeof(why)));
    return m;
}

/* Plan and compare with the expected devices (transformer units, then the VAE). */
static void expect(enum weft_devmap_strategy s, int n, const char *max_memory, const int *want)
{
    struct weft_max_memory m = mm(max_memory);
    struct weft_devmap map;
    CHECK_OK(weft_devmap_plan(s, comps, 2, n, NULL, &m, &map, TERR));
    printf("%-8s %d devices, max_memory '%s':", s == WEFT_DEVMAP_AUTO ? "auto" : "balanced", n,
           max_memory);
    for (int u = 0; u < 6; u++)
        printf(" %d", map.device[0][u]);
    printf(" | vae %d\n", map.device[1][0]);
    for (int u = 0; u < 6; u++)
        CHECK_EQ(map.device[0][u], want[u]);
    CHECK_EQ(map.device[1][0], want[6]);
    /* the bytes add up per device */
    uint64_t sum = map.cpu_used;
    for (int d = 0; d < n; d++) {
        CHECK(map.used[d] <= map.budget[d]);
        sum += map.used[d];
    }
    CHECK_EQ(sum, 21 * MB);
    weft_devmap_cleanup(&map);
}

static void expect_error(enum weft_devmap_strategy s, int n, const char *max_memory,
                         const char *names)
{
    struct weft_max_memory m = mm(max_memory);
    struct weft_devmap map;
    CHECK_FAILS(weft_devmap_plan(s, comps, 2, n, NULL, &m, &map, TERR), WEFT_ERR_INVALID, names);
    printf("refused: %s\n", weft_error_text(TERR));
}

static void test_plans(void)
{
    const int C = WEFT_DEVMAP_CPU;
    /* auto: fill device 0 (1 + 4 + 4 = 9 of 10), then device 1 (4 + 4 + 1 + 3 = 12) */
    expect(WEFT_DEVMAP_AUTO, 2, "0:10MB, 1:12MB", (const int[]){0, 0, 0, 1, 1, 1, 1});
    /* the VAE no longer fits device 1: host memory, or refused without a cpu entry */
    expect(WEFT_DEVMAP_AUTO, 2, "0:10MB, 1:10MB, cpu:100MB", (const int[]){0, 0, 0, 1, 1, 1, C});
    expect_error(WEFT_DEVMAP_AUTO, 2, "0:10MB, 1:10MB", "vae (2.9 MiB) fits nowhere");
    /* auto without bounds: everything on device 0 */
    expect(WEFT_DEVMAP_AUTO, 3, "", (const int[]){0, 0, 0, 0, 0, 0, 0});
    /* balanced, no bounds: largest first, device 0 then 1 (Diffusers' pipeline order) */
    expect(WEFT_DEVMAP_BALANCED, 2, "", (const int[]){0, 0, 0, 0, 0, 0, 1});
    expect(WEFT_DEVMAP_BALANCED, 3, "", (const int[]){0, 0, 0, 0, 0, 0, 1});
    /* balanced, the transformer fits no device whole: split at the unit boundary nearest half
     * of its 18 MB (1 + 4 + 4 | 4 + 4 + 1); the VAE then fits neither: host memory */
    expect(WEFT_DEVMAP_BALANCED, 2, "0:10MB, 1:10MB, cpu:64MB",
           (const int[]){0, 0, 0, 1, 1, 1, C});
    expect(WEFT_DEVMAP_BALANCED, 2, "0:12MB, 1:12MB", (const int[]){0, 0, 0, 1, 1, 1, 0});
    expect_error(WEFT_DEVMAP_BALANCED, 2, "0:10MB, 1:10MB", "vae");
    /* three ways: 6 MB each ideally: 1 + 4 | 4 | 4 + 4 + 1 fits 0:6, 1:6, 2:10 */
    expect(WEFT_DEVMAP_BALANCED, 3, "0:6MB, 1:6MB, 2:12MB", (const int[]){0, 0, 1, 2, 2, 2, 2});
    /* a device that holds it whole is used before splitting */
    expect(WEFT_DEVMAP_BALANCED, 3, "0:6MB, 1:6MB, 2:20MB", (const int[]){2, 2, 2, 2, 2, 2, 0});
    /* a split that leaves a block nowhere: refused, naming it */
    expect_error(WEFT_DEVMAP_BALANCED, 2, "0:3MB, 1:3MB", "t.b0 (3.8 MiB) fits nowhere");
    /* max_memory naming a device that is not there */
    struct weft_max_memory m = mm("0:1GB, 2:1GB");
    struct weft_devmap map;
    CHECK_FAILS(weft_devmap_plan(WEFT_DEVMAP_AUTO, comps, 2, 2, NULL, &m, &map, TERR),
                WEFT_ERR_INVALID, "names device 2 but there are 2");
    /* reported memory bounds a device without a max_memory entry */
    const uint64_t room[2] = {10 * MB, 0};
    m = mm("");
    CHECK_OK(weft_devmap_plan(WEFT_DEVMAP_AUTO, comps, 2, 2, room, &m, &map, TERR));
    CHECK_EQ(map.device[0][3], 1);
    weft_devmap_cleanup(&map);
}

static void test_ranges(void)
{
    struct weft_max_memory m = mm("0:10MB, 1:10MB, cpu:100MB");
    struct weft_devmap map;
    CHECK_OK(weft_devmap_plan(WEFT_DEVMAP_AUTO, comps, 2, 2, NULL, &m, &map, TERR));
    int f, l;
    CHECK(weft_devmap_range(&map, 0, 0, &f, &l) && f == 0 && l == 3);
    CHECK(weft_devmap_range(&map, 0, 1, &f, &l) && f == 3 && l == 6);
    CHECK_EQ(weft_devmap_exec_device(&map, 1, 0), 1); /* the VAE in host memory runs on 1 */
    weft_devmap_cleanup(&map);
    /* host-memory blocks run on the device before them */
    m = mm("0:6MB, 1:5MB, cpu:100MB");
    CHECK_OK(weft_devmap_plan(WEFT_DEVMAP_AUTO, comps, 2, 2, NULL, &m, &map, TERR));
    CHECK_EQ(map.device[0][3], WEFT_DEVMAP_CPU);
    CHECK(weft_devmap_range(&map, 0, 1, &f, &l) && f == 2 && l == 6);
    CHECK(weft_devmap_range(&map, 0, 0, &f, &l) && f == 0 && l == 2);
    cJSON *j = weft_devmap_json(&map, NULL);
    char *text = cJSON_PrintUnformatted(j);
    printf("hf_device_map: %s\n", text);
    CHECK(strstr(text, "\"t.b2\":\"cpu\"") && strstr(text, "\"t.embedders\":0"));
    cJSON_free(text);
    cJSON_Delete(j);
    weft_devmap_cleanup(&map);
}

/* FLUX.1-dev's pipeline in bf16 by its real sizes (MB): CLIP-L 246, T5-XXL 9524, the
 * transformer 23802 in 1 + 19 + 38 + 1 units, the VAE decoder 99; text encoders first (the
 * execution order). */
static void test_text_encoders(void)
{
    static struct weft_devmap_unit te[2], tf[59], vae[1];
    snprintf(te[0].name, sizeof(te[0].name), "text_encoder");
    snprintf(te[1].name, sizeof(te[1].name), "text_encoder_2");
    te[0].bytes = 246 * MB, te[1].bytes = 9524 * MB;
    for (int u = 0; u < 59; u++) {
        snprintf(tf[u].name, sizeof(tf[u].name), "t.%d", u);
        tf[u].bytes = (u == 0 || u == 58 ? 101 : 400) * MB; /* 2 x 101 + 57 x 400 = 23002 */
    }
    snprintf(vae[0].name, sizeof(vae[0].name), "vae");
    vae[0].bytes = 99 * MB;
    const struct weft_devmap_component pipe[4] = {
        {"text_encoder", te, 1}, {"text_encoder_2", te + 1, 1}, {"transformer", tf, 59},
        {"vae", vae, 1}};
    struct weft_devmap map;
    /* balanced on two 80 GB devices, largest first on turns 0, 1, 1, 0: the transformer on
     * 0, T5 on 1, CLIP on 1, the VAE on 0 (Diffusers' pipeline-level order) */
    struct weft_max_memory m = mm("0:80GB, 1:80GB");
    CHECK_OK(weft_devmap_plan(WEFT_DEVMAP_BALANCED, pipe, 4, 2, NULL, &m, &map, TERR));
    CHECK_EQ(weft_devmap_find(&map, "transformer"), 2);
    CHECK_EQ(weft_devmap_find(&map, "unet"), -1);
    CHECK_EQ(map.device[2][0], 0);
    CHECK_EQ(weft_devmap_component_device(&map, "text_encoder_2"), 1);
    CHECK_EQ(weft_devmap_component_device(&map, "text_encoder"), 1);
    CHECK_EQ(weft_devmap_component_device(&map, "vae"), 0);
    CHECK_EQ(weft_devmap_component_device(&map, "unet"), -1);
    CHECK_EQ(weft_devmap_decode_device(&map), 0); /* the VAE's */
    weft_devmap_cleanup(&map);
    /* device 0 of 23.1 GB: the transformer leaves 98 MB, the VAE's turn is device 0 but it
     * does not fit there: the device with the most room, 1 */
    m = mm("0:23.1GB, 1:24GB");
    CHECK_OK(weft_devmap_plan(WEFT_DEVMAP_BALANCED, pipe, 4, 2, NULL, &m, &map, TERR));
    CHECK_EQ(weft_devmap_component_device(&map, "vae"), 1);
    CHECK_EQ(weft_devmap_decode_device(&map), 1); /* not the transformer's last stage, 0 */
    CHECK_EQ(map.used[0], 23002 * MB);
    CHECK_EQ(map.used[1], (9524 + 246 + 99) * MB);
    weft_devmap_cleanup(&map);
    /* auto on 16 GB devices: the encoders first on device 0 (9.8 GB), the transformer's units
     * after them until device 0 is full, then device 1, the rest and the VAE on 2 */
    m = mm("0:16GB, 1:16GB, 2:16GB");
    CHECK_OK(weft_devmap_plan(WEFT_DEVMAP_AUTO, pipe, 4, 3, NULL, &m, &map, TERR));
    CHECK_EQ(map.device[0][0], 0);
    CHECK_EQ(map.device[1][0], 0);
    int f, l;
    CHECK(weft_devmap_range(&map, 2, 0, &f, &l) && f == 0 && l == 16); /* 9770 + 101 + 15 x 400 */
    CHECK(weft_devmap_range(&map, 2, 1, &f, &l) && f == 16 && l == 56); /* 40 x 400 */
    CHECK_EQ(weft_devmap_component_device(&map, "vae"), 2);
    weft_devmap_cleanup(&map);
    /* no VAE in the map: the device of the transformer's last units decodes */
    m = mm("0:16GB, 1:16GB, 2:16GB");
    CHECK_OK(weft_devmap_plan(WEFT_DEVMAP_AUTO, pipe, 3, 3, NULL, &m, &map, TERR));
    CHECK(weft_devmap_range(&map, 2, 2, &f, &l) && f == 56 && l == 59);
    CHECK_EQ(weft_devmap_component_device(&map, "vae"), -1);
    CHECK_EQ(weft_devmap_decode_device(&map), 2);
    weft_devmap_cleanup(&map);
    /* the transformer split over three 12 GB devices leaves none the room for T5 (a text
     * encoder is never split): refused naming it */
    m = mm("0:12GB, 1:12GB, 2:12GB");
    CHECK_FAILS(weft_devmap_plan(WEFT_DEVMAP_BALANCED, pipe, 4, 3, NULL, &m, &map, TERR),
                WEFT_ERR_INVALID, "text_encoder_2");
}

static void test_max_memory(void)
{
    struct weft_max_memory m = mm("0:16GiB, 1:16GiB, cpu:64GiB");
    CHECK_EQ(m.n, 2);
    CHECK(m.has[0] && m.has[1] && m.has_cpu);
    CHECK_EQ(m.device[1], 16ull << 30);
    CHECK_EQ(m.cpu, 64ull << 30);
    m = mm(" 3 : 1.5GB ");
    CHECK_EQ(m.n, 4);
    CHECK(!m.has[0] && m.has[3] && m.device[3] == 1500000000ull);
    m = mm("");
    CHECK_EQ(m.n, 0);
    static const char *const bad[][2] = {
        {"0=16GiB", "expected DEVICE:SIZE"}, {"gpu:1GiB", "an index 0..63 or cpu"},
        {"0:lots", "not a size"},            {"0:1G, 0:2G", "device 0 is given twice"},
        {"cpu:1G,cpu:1G", "cpu is given twice"}, {"64:1G", "an index 0..63"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char why[200] = "";
        CHECK(weft_conf_parse_max_memory(bad[i][0], &m, why, sizeof(why)) == WEFT_ERR_CONFIG);
        printf("max_memory '%s': %s\n", bad[i][0], why);
        CHECK(strstr(why, bad[i][1]));
    }
    /* through the configuration: the key is checked when it is set */
    struct weft_conf conf;
    weft_conf_defaults(&conf);
    CHECK_EQ(conf.device_map.strategy, WEFT_DEVMAP_NONE);
    CHECK_OK(weft_conf_apply_override(&conf, "device_map.strategy=auto"));
    CHECK_EQ(conf.device_map.strategy, WEFT_DEVMAP_AUTO);
    CHECK_OK(weft_conf_apply_override(&conf, "device_map.max_memory=0:1GiB,cpu:2GiB"));
    CHECK(strcmp(conf.device_map.max_memory, "0:1GiB,cpu:2GiB") == 0);
    CHECK_FAILS_LOGGED(weft_conf_apply_override(&conf, "device_map.max_memory=0:1GiB,x:2"),
                       WEFT_ERR_CONFIG, "--device_map.max_memory", "'x'");
    CHECK(weft_conf_apply_override(&conf, "device_map.strategy=sideways") == WEFT_ERR_CONFIG);
}

static void test_mesh(void)
{
    struct weft_mesh m = {2, 1, 1, 1, 3};
    CHECK_EQ(weft_mesh_size(&m), 6);
    struct weft_mesh_coord c;
    weft_mesh_coord(&m, 4, &c);
    CHECK(c.dp == 1 && c.pp == 1 && c.tp == 0);
    int ranks[16], index = -1;
    CHECK_EQ(weft_mesh_group(&m, 4, WEFT_MESH_PIPE, ranks, &index), 3);
    CHECK(ranks[0] == 3 && ranks[1] == 4 && ranks[2] == 5 && index == 1);
    CHECK_EQ(weft_mesh_group(&m, 4, WEFT_MESH_TP, ranks, &index), 1);
    CHECK_EQ(weft_mesh_group(&m, 4, WEFT_MESH_REPLICA, ranks, &index), 3);
    /* every dimension together: coordinates and ranks are inverse; stages outside ring */
    struct weft_mesh big = {2, 2, 3, 2, 2};
    CHECK_EQ(weft_mesh_size(&big), 48);
    for (int r = 0; r < 48; r++) {
        weft_mesh_coord(&big, r, &c);
        CHECK_EQ(weft_mesh_rank(&big, &c), r);
    }
    weft_mesh_coord(&big, 13, &c); /* 13 = ((0*2+1)*2+0)*3*2 + 0*2 + 1 */
    CHECK(c.dp == 0 && c.pp == 1 && c.ring == 0 && c.ulysses == 0 && c.tp == 1);
    CHECK_EQ(weft_mesh_group(&big, 13, WEFT_MESH_PIPE, ranks, &index), 2);
    CHECK(ranks[0] == 1 && ranks[1] == 13 && index == 1);
    CHECK_EQ(weft_mesh_group(&big, 13, WEFT_MESH_CP, ranks, &index), 6);
    /* a mesh without stages is what it was: {dp, ring, ulysses, tp} */
    struct weft_mesh old = {2, 1, 2, 2};
    CHECK_EQ(weft_mesh_size(&old), 8);
    weft_mesh_coord(&old, 5, &c);
    CHECK(c.dp == 1 && c.pp == 0 && c.ulysses == 0 && c.tp == 1);
}

int main(void)
{
    test_quiet();
    setup();
    test_plans();
    test_ranges();
    test_text_encoders();
    test_max_memory();
    test_mesh();
    printf("device_map: all cases as computed by hand\n");
    return 0;
}
