/* Variants of the embedded default model for refusal tests: a temporary pipeline folder whose
 * JSON files are flux-tiny's with one edit, and whose weights are links to flux-tiny's. */
#ifndef WEFT_TESTS_MODEL_VARIANT_H
#define WEFT_TESTS_MODEL_VARIANT_H

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"

/* A JSON file of flux-tiny (relative path) as an object. */
static inline cJSON *variant_read(const char *rel)
{
    char path[2048];
    snprintf(path, sizeof(path), "%s/tests/data/random/flux-tiny/%s", getenv("WEFT_SOURCE_ROOT"), rel);
    FILE *f = fopen(path, "rb");
    CHECK(f);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    cJSON *j = cJSON_Parse(buf);
    CHECK(j);
    return j;
}

static inline void variant_write(const char *dir, const char *rel, const char *text)
{
    char path[2048];
    snprintf(path, sizeof(path), "%s/%s", dir, rel);
    FILE *f = fopen(path, "wb");
    CHECK(f);
    CHECK(fputs(text, f) >= 0);
    CHECK(fclose(f) == 0);
}

static inline void variant_write_json(const char *dir, const char *rel, cJSON *j)
{
    char *text = cJSON_Print(j);
    CHECK(text);
    variant_write(dir, rel, text);
    cJSON_free(text);
    cJSON_Delete(j);
}

/* A fresh copy of flux-tiny in a new temporary folder (dir gets its path): every JSON file
 * rewritten as is, every weights file and prompt a link. */
static inline void variant_make(char dir[64])
{
    snprintf(dir, 64, "/tmp/weft_variant_XXXXXX");
    CHECK(mkdtemp(dir));
    static const char *const subs[] = {"transformer", "vae", "scheduler", "prompts"};
    char path[2048], target[2048];
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, subs[i]);
        CHECK(mkdir(path, 0700) == 0);
    }
    static const char *const json[] = {"model_index.json", "transformer/config.json",
                                       "vae/config.json", "scheduler/scheduler_config.json"};
    for (int i = 0; i < 4; i++)
        variant_write_json(dir, json[i], variant_read(json[i]));
    static const char *const links[] = {
        "transformer/diffusion_pytorch_model.safetensors",
        "vae/diffusion_pytorch_model.safetensors", "prompts/red-fox.safetensors",
        "prompts/lighthouse.safetensors", "prompts/city-night.safetensors"};
    for (int i = 0; i < 5; i++) {
        snprintf(target, sizeof(target), "%s/tests/data/random/flux-tiny/%s", getenv("WEFT_SOURCE_ROOT"),
                 links[i]);
        snprintf(path, sizeof(path), "%s/%s", dir, links[i]);
        CHECK(symlink(target, path) == 0);
    }
}

/* Set key of a JSON file of the variant to value (a JSON text), or remove it (NULL). */
static inline void variant_set(const char *dir, const char *rel, const char *key,
                               const char *value)
{
    char path[2048];
    snprintf(path, sizeof(path), "%s/%s", dir, rel);
    FILE *f = fopen(path, "rb");
    CHECK(f);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    cJSON *j = cJSON_Parse(buf);
    CHECK(j);
    cJSON_DeleteItemFromObjectCaseSensitive(j, key);
    if (value) {
        cJSON *v = cJSON_Parse(value);
        CHECK(v);
        cJSON_AddItemToObject(j, key, v);
    }
    variant_write_json(dir, rel, j);
}

/* Remove the variant's folder (links, not what they point to). */
static inline void variant_remove(const char *dir)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

#endif
