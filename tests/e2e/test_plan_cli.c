/* `weft plan` as a user runs it: the mesh rank by rank, the context-parallel check of an image
 * size (refused with the reason and exit 1, accepted with the anything flag), the device map
 * (--json: the hf_device_map and each device's bytes), and device_map with tensor parallelism
 * refused. usage: test_plan_cli WEFT_BINARY */
#include <cJSON.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"

extern char **environ;

static const char *weft_bin;
static char out_path[256], err_path[256];

/* Run weft with args (NULL-terminated); stdout and stderr land in files. Returns the exit
 * status. */
static int run(const char *const *args, char **out_p, char **err_p)
{
    char *argv[32];
    int n = 0;
    argv[n++] = (char *)weft_bin;
    for (; *args && n < 31; args++)
        argv[n++] = (char *)*args;
    argv[n] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    CHECK(posix_spawn(&pid, weft_bin, &fa, NULL, argv, environ) == 0);
    posix_spawn_file_actions_destroy(&fa);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    const char *paths[2] = {out_path, err_path};
    char **dst[2] = {out_p, err_p};
    for (int k = 0; k < 2; k++) {
        FILE *f = fopen(paths[k], "r");
        CHECK(f);
        char *buf = calloc(1, 1 << 20);
        CHECK(buf);
        size_t got = fread(buf, 1, (1 << 20) - 1, f);
        buf[got] = '\0';
        fclose(f);
        *dst[k] = buf;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    CHECK(cJSON_IsNumber(v));
    return v->valuedouble;
}

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    weft_bin = argv[1];
    snprintf(out_path, sizeof(out_path), "/tmp/weft_plan_cli_%d.out", (int)getpid());
    snprintf(err_path, sizeof(err_path), "/tmp/weft_plan_cli_%d.err", (int)getpid());
    char *out, *err;

    /* the mesh: 8 ranks, coordinates innermost tp, then ulysses, then dp */
    const char *mesh[] = {"plan", "--tp", "2", "--ulysses", "2", "--dp", "2", "--json", NULL};
    CHECK_EQ(run(mesh, &out, &err), 0);
    cJSON *j = cJSON_Parse(out);
    CHECK(j);
    CHECK_EQ(num(cJSON_GetObjectItemCaseSensitive(j, "mesh"), "ranks"), 8);
    const cJSON *r5 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "ranks"), 5);
    CHECK(num(r5, "dp") == 1 && num(r5, "ulysses") == 0 && num(r5, "tp") == 1);
    CHECK_EQ(num(r5, "image_tokens"), 2048); /* 1024x1024: 4096 tokens over ulysses 2 */
    CHECK_EQ(num(r5, "heads"), 6);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(j, "context_parallel"), "ok")));
    cJSON_Delete(j);
    free(out), free(err);

    /* FLUX.2 and Qwen-Image folders: their classes, heads and fused layers planned; FLUX.2's
     * 1 double + 1 single block all-reduce 5 times a forward, Qwen-Image's 1 block 4 times */
    static const struct {
        const char *dir, *cls, *tp;
        int heads, modules, allreduces;
    } fam[] = {{"tests/data/flux2/pipeline", "Flux2Transformer2DModel", "2", 6, 14, 5},
               {"tests/data/qwenimage/pipeline", "QwenImageTransformer2DModel", "3", 4, 12, 4}};
    for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
        char dir[1100];
        snprintf(dir, sizeof(dir), "%s/%s", getenv("WEFT_SOURCE_ROOT"), fam[f].dir);
        const char *args[] = {"plan", "--model", dir, "--tp", fam[f].tp, "--height", "96",
                              "--width", "80", "--json", NULL};
        CHECK_EQ(run(args, &out, &err), 0);
        j = cJSON_Parse(out);
        CHECK(j);
        const cJSON *cls = cJSON_GetObjectItemCaseSensitive(j, "class");
        CHECK(cJSON_IsString(cls) && strcmp(cls->valuestring, fam[f].cls) == 0);
        const cJSON *r0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "ranks"), 0);
        CHECK_EQ(num(r0, "heads"), fam[f].heads);
        CHECK_EQ(num(j, "planned_modules"), fam[f].modules);
        CHECK_EQ(num(j, "allreduce_per_forward"), fam[f].allreduces);
        cJSON_Delete(j);
        free(out), free(err);
    }

    /* CFG parallelism: the halves outside ring x ulysses x tp; a third half is refused */
    const char *cfg[] = {"plan", "--cfg", "2", "--tp", "2", "--dp", "2", "--json", NULL};
    CHECK_EQ(run(cfg, &out, &err), 0);
    j = cJSON_Parse(out);
    CHECK(j);
    CHECK_EQ(num(cJSON_GetObjectItemCaseSensitive(j, "mesh"), "ranks"), 8);
    CHECK_EQ(num(cJSON_GetObjectItemCaseSensitive(j, "mesh"), "cfg"), 2);
    const cJSON *r3 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "ranks"), 3);
    CHECK(num(r3, "dp") == 0 && num(r3, "cfg") == 1 && num(r3, "tp") == 1);
    cJSON_Delete(j);
    free(out), free(err);
    const char *cfg3[] = {"plan", "--cfg", "3", NULL};
    CHECK_EQ(run(cfg3, &out, &err), 2);
    CHECK(strstr(err, "--cfg 1 or 2"));
    free(out), free(err);

    /* [parallel] groups: each group's mesh; a degree beside them, or a bad group, refused */
    const char *groups[] = {"plan", "--parallel.groups=ulysses 2 + dp 2", "--json", NULL};
    CHECK_EQ(run(groups, &out, &err), 0);
    j = cJSON_Parse(out);
    CHECK(j);
    const cJSON *gs = cJSON_GetObjectItemCaseSensitive(j, "groups");
    CHECK_EQ(cJSON_GetArraySize(gs), 2);
    const cJSON *m0 = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(gs, 0), "mesh");
    const cJSON *m1 = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(gs, 1), "mesh");
    CHECK(num(m0, "ulysses") == 2 && num(m0, "dp") == 1 && num(m0, "ranks") == 2);
    CHECK(num(m1, "ulysses") == 1 && num(m1, "dp") == 2 && num(m1, "ranks") == 2);
    cJSON_Delete(j);
    free(out), free(err);
    const char *groups_tp[] = {"plan", "--parallel.groups=ulysses 2 + dp 2", "--tp", "2", NULL};
    CHECK_EQ(run(groups_tp, &out, &err), 2);
    CHECK(strstr(err, "sets the degrees"));
    free(out), free(err);
    const char *groups_bad[] = {"plan", "--parallel.groups=ulysses 2 + dq 2", NULL};
    CHECK_EQ(run(groups_bad, &out, &err), 2);
    CHECK(strstr(err, "\"dq\" is not a degree"));
    free(out), free(err);

    /* 1008 x 1008 with 512 text tokens over ring 3: refused, then accepted with ring_anything */
    const char *odd[] = {"plan", "--ring", "3", "--height", "1008", "--width", "1008", NULL};
    CHECK_EQ(run(odd, &out, &err), 1);
    printf("ring 3 on 1008x1008: %s", err);
    CHECK(strstr(err, "does not divide by the context-parallel degree 3") &&
          strstr(err, "ring_anything"));
    free(out), free(err);
    const char *odd_ok[] = {"plan", "--ring", "3", "--height", "1008", "--width", "1008",
                            "--parallel.ring_anything=true", NULL};
    CHECK_EQ(run(odd_ok, &out, &err), 0);
    CHECK(strstr(out, "1323 image + 170 text tokens"));
    free(out), free(err);

    /* the device map */
    const char *dm[] = {"plan", "--device-map", "auto", "--max-memory", "0:6MiB,1:12MiB",
                        "--json", NULL};
    CHECK_EQ(run(dm, &out, &err), 0);
    j = cJSON_Parse(out);
    CHECK(j);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(j, "device_map");
    CHECK_EQ(num(map, "transformer.embedders"), 0);
    CHECK_EQ(num(map, "transformer.output"), 1);
    CHECK_EQ(num(map, "vae"), 1);
    const cJSON *devs = cJSON_GetObjectItemCaseSensitive(j, "devices");
    CHECK_EQ(cJSON_GetArraySize(devs), 2);
    for (int d = 0; d < 2; d++) {
        const cJSON *e = cJSON_GetArrayItem(devs, d);
        printf("device %d: %.0f of %.0f bytes\n", d, num(e, "bytes"), num(e, "max_memory"));
        CHECK(num(e, "bytes") > 0 && num(e, "bytes") <= num(e, "max_memory"));
    }
    cJSON_Delete(j);
    free(out), free(err);
    const char *small[] = {"plan", "--device-map", "auto", "--max-memory", "0:1MiB,1:1MiB",
                           NULL};
    CHECK_EQ(run(small, &out, &err), 1);
    CHECK(strstr(err, "fits nowhere"));
    free(out), free(err);
    const char *with_tp[] = {"plan", "--device-map", "balanced", "--devices", "2", "--tp", "2",
                             NULL};
    CHECK_EQ(run(with_tp, &out, &err), 2);
    CHECK(strstr(err, "cannot be combined with tensor parallelism"));
    free(out), free(err);
    unlink(out_path), unlink(err_path);
    printf("weft plan: mesh, context-parallel check and device map as expected\n");
    return 0;
}
