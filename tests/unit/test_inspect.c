/* weft inspect end to end: the binary on the Diffusers-saved tiny FLUX.1 checkpoints reports
 * class and config exactly; --json is stable and complete; bad input is one line and exit 1. */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "model/checkpoint.h"
#include "test.h"

static const char *weft, *root;

/* Run a command, capture stdout (and stderr into err when given); return the exit status. */
static int run(const char *cmd, char **out, char **err)
{
    char full[4096];
    snprintf(full, sizeof(full), "%s 2>/tmp/weft_inspect_err_%d", cmd, (int)getpid());
    FILE *p = popen(full, "r");
    CHECK(p);
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while ((n = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += n;
        if (cap - len < 2)
            buf = realloc(buf, cap *= 2);
    }
    buf[len] = '\0';
    int rc = pclose(p);
    *out = buf;
    char path[64];
    snprintf(path, sizeof(path), "/tmp/weft_inspect_err_%d", (int)getpid());
    if (err) {
        FILE *f = fopen(path, "r");
        *err = calloc(1, 65536);
        if (f) {
            size_t k = fread(*err, 1, 65535, f);
            (*err)[k] = '\0';
            fclose(f);
        }
    }
    remove(path);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void check_model(const char *rel)
{
    char dir[1024], cmd[2048];
    snprintf(dir, sizeof(dir), "%s/%s", root, rel);
    snprintf(cmd, sizeof(cmd), "%s inspect --json '%s'", weft, dir);
    char *out;
    CHECK_EQ(run(cmd, &out, NULL), 0);
    cJSON *j = cJSON_Parse(out);
    CHECK(j);
    CHECK_EQ(cJSON_GetObjectItem(j, "weft_inspect")->valueint, 1);
    CHECK(strcmp(cJSON_GetObjectItem(j, "kind")->valuestring, "model") == 0);
    CHECK(strcmp(cJSON_GetObjectItem(j, "class")->valuestring, "FluxTransformer2DModel") == 0);

    /* the config is config.json, exactly */
    char cfgpath[1100];
    snprintf(cfgpath, sizeof(cfgpath), "%s/config.json", dir);
    cJSON *cfg;
    CHECK_OK(weft_json_read_file(cfgpath, 1 << 20, &cfg, TERR));
    CHECK(cJSON_Compare(cfg, cJSON_GetObjectItem(j, "config"), 1));
    cJSON_Delete(cfg);

    /* the table matches the checkpoint, and the totals match the table */
    struct weft_ckpt *ck;
    CHECK_OK(weft_ckpt_open(dir, &ck, TERR));
    cJSON *tensors = cJSON_GetObjectItem(j, "tensors");
    CHECK_EQ(cJSON_GetArraySize(tensors), weft_ckpt_count(ck));
    double params = 0, bytes = 0;
    int i = 0;
    for (cJSON *t = tensors->child; t; t = t->next, i++) {
        const struct weft_ckpt_tensor *ct = weft_ckpt_at(ck, (size_t)i);
        CHECK(strcmp(cJSON_GetObjectItem(t, "name")->valuestring, ct->info->name) == 0);
        CHECK(cJSON_GetObjectItem(t, "offset")->valuedouble == (double)ct->info->offset);
        CHECK_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(t, "shape")), ct->info->ndim);
        params += (double)ct->info->numel;
        bytes += cJSON_GetObjectItem(t, "nbytes")->valuedouble;
    }
    CHECK(cJSON_GetObjectItem(j, "parameters")->valuedouble == params);
    double by_dtype = 0;
    for (cJSON *b = cJSON_GetObjectItem(j, "bytes_by_dtype")->child; b; b = b->next)
        by_dtype += b->valuedouble;
    CHECK(by_dtype == bytes);
    CHECK_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(j, "files")), weft_ckpt_file_count(ck));
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(j, "sharded")) == weft_ckpt_sharded(ck));
    weft_ckpt_close(ck);
    cJSON_Delete(j);
    free(out);

    /* text form names the class and every config key */
    snprintf(cmd, sizeof(cmd), "%s inspect '%s'", weft, dir);
    CHECK_EQ(run(cmd, &out, NULL), 0);
    CHECK(strstr(out, "class: FluxTransformer2DModel"));
    CHECK(strstr(out, "num_attention_heads = 12"));
    CHECK(strstr(out, "transformer_blocks.0.attn.to_q.weight"));
    free(out);
}

static void check_bad(const char *what, const char *path, const char *reason)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "%s inspect '%s'", weft, path);
    char *out, *err;
    int rc = run(cmd, &out, &err);
    if (rc != 1 || !strstr(err, reason) || strchr(err, '\n') != err + strlen(err) - 1) {
        fprintf(stderr, "%s: rc %d, stderr \"%s\", wanted one line with \"%s\"\n", what, rc, err,
                reason);
        exit(1);
    }
    free(out);
    free(err);
}

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    weft = argv[1];
    root = getenv("WEFT_SOURCE_ROOT");
    CHECK(root);
    check_model("tests/data/flux1/tiny-g");
    check_model("tests/data/flux1/tiny-nog"); /* sharded */
    check_model("tests/data/flux1/tiny-bf16");

    char cmd[2048], *out;
    snprintf(cmd, sizeof(cmd), "%s inspect --json --no-tensors '%s/tests/data/random/flux-tiny'", weft, root);
    CHECK_EQ(run(cmd, &out, NULL), 0);
    cJSON *j = cJSON_Parse(out);
    CHECK(j && strcmp(cJSON_GetObjectItem(j, "kind")->valuestring, "pipeline") == 0);
    int found = 0;
    for (cJSON *c = cJSON_GetObjectItem(j, "components")->child; c; c = c->next) {
        cJSON *m = cJSON_GetObjectItem(c, "model");
        if (m && strcmp(cJSON_GetObjectItem(c, "name")->valuestring, "transformer") == 0)
            found += strcmp(cJSON_GetObjectItem(m, "class")->valuestring,
                            "FluxTransformer2DModel") == 0;
    }
    CHECK_EQ(found, 1);
    cJSON_Delete(j);
    free(out);

    char path[1024];
    snprintf(path, sizeof(path), "/tmp/weft_inspect_bad_%d.safetensors", (int)getpid());
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite("\x10\0\0\0\0\0\0\0{\"a\":", 1, 13, f) == 13 && fclose(f) == 0);
    check_bad("truncated", path, "runs past the end of the file");
    remove(path);
    check_bad("missing", "/nonexistent/x", "not a .safetensors file");

    /* a whole pipeline with text encoders, tokenizers and a scheduler: nothing on stderr (it
     * once looked for a scheduler_config.json in each tokenizer's folder and said so), and
     * one with a component's weights gone: exit 1, the component named */
    char *err;
    snprintf(cmd, sizeof(cmd), "%s inspect --no-tensors '%s/models/flux-tiny'", weft, root);
    CHECK_EQ(run(cmd, &out, &err), 0);
    if (err[0])
        fprintf(stderr, "stderr: %s", err);
    CHECK(err[0] == '\0');
    free(out), free(err);
    char copy[256];
    snprintf(copy, sizeof(copy), "/tmp/weft_inspect_pipe_%d", (int)getpid());
    snprintf(cmd, sizeof(cmd), "cp -r '%s/models/flux-tiny' %s && rm -r %s/vae", root, copy, copy);
    CHECK(system(cmd) == 0);
    check_bad("no vae", copy, "vae: no model here (model_index.json names AutoencoderKL");
    snprintf(cmd, sizeof(cmd), "rm -rf %s", copy);
    CHECK(system(cmd) == 0);
    return 0;
}
