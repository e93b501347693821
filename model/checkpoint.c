/* Diffusers model and pipeline folders. */
#include "model/checkpoint.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "common/utf8.h"

#define CONFIG_MAX_BYTES ((size_t)4 << 20)
#define INDEX_MAX_BYTES ((size_t)64 << 20)
#define WEIGHTS_NAME "diffusion_pytorch_model.safetensors"
#define INDEX_NAME "diffusion_pytorch_model.safetensors.index.json"

struct weft_ckpt {
    char *dir;
    cJSON *config;
    bool sharded;
    size_t n_files;
    struct weft_st_file **files;
    size_t n_tensors;
    struct weft_ckpt_tensor *tensors; /* name order */
};

static bool is_file(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static bool is_dir(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static char *path_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = weft_malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int key_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A key that appears twice in one object of the tree (the first found), or NULL. */
static const char *duplicate_key(const cJSON *j)
{
    if (!cJSON_IsObject(j) && !cJSON_IsArray(j))
        return NULL;
    int n = 0;
    for (const cJSON *c = j->child; c; c = c->next)
        n++;
    if (cJSON_IsObject(j) && n > 1) {
        const char **keys = weft_malloc((size_t)n * sizeof(*keys));
        if (!keys)
            return NULL; /* not checked: out of memory is for the parse to meet */
        int k = 0;
        for (const cJSON *c = j->child; c; c = c->next)
            keys[k++] = c->string ? c->string : "";
        qsort(keys, (size_t)n, sizeof(*keys), key_cmp);
        const char *twice = NULL;
        for (int i = 1; i < n && !twice; i++)
            if (strcmp(keys[i - 1], keys[i]) == 0)
                twice = keys[i];
        weft_free(keys);
        if (twice)
            return twice;
    }
    for (const cJSON *c = j->child; c; c = c->next) {
        const char *t = duplicate_key(c);
        if (t)
            return t;
    }
    return NULL;
}

weft_status_t weft_json_read_file(const char *path, size_t max_bytes, cJSON **json_p,
                                  struct weft_error *err)
{
    FILE *f = weft_files_fopen_regular(path); /* a FIFO would block open(2) */
    if (!f) {
        int e = errno;
        return weft_error_refuse_or_log(err, e == ENOENT ? WEFT_ERR_NOT_FOUND : WEFT_ERR_IO,
                                        "model", "%s: cannot open: %s", path,
                                        weft_files_open_error(e));
    }
    weft_status_t st = WEFT_OK;
    char *buf = NULL;
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = weft_error_refuse_or_log(err, WEFT_ERR_IO, "model", "%s: not a regular file", path);
        goto out_close;
    }
    if ((uint64_t)sb.st_size > max_bytes) {
        st = weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                      "%s: %lld bytes, larger than the %zu-byte limit for this "
                                      "file", path, (long long)sb.st_size, max_bytes);
        goto out_close;
    }
    buf = weft_malloc((size_t)sb.st_size + 1);
    if (!buf) {
        st = weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
        goto out_close;
    }
    size_t n = fread(buf, 1, (size_t)sb.st_size + 1, f);
    if (ferror(f) || n > (size_t)sb.st_size) {
        st = weft_error_set(err, WEFT_ERR_IO, "model",
                            "%s: read failed (or the file changed while read)", path);
        goto out_free;
    }
    size_t bad;
    if (!weft_utf8_valid(buf, n, &bad)) {
        st = weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                      "%s: not valid UTF-8 (byte %zu)", path, bad);
        goto out_free;
    }
    char why[160];
    if (!weft_json_strict(buf, n, 64, why, sizeof(why))) {
        st = weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model", "%s: not valid JSON: %s",
                                      path, why);
        goto out_free;
    }
    const char *end = NULL;
    cJSON *json = cJSON_ParseWithLengthOpts(buf, n, &end, 0);
    if (!json) {
        st = weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                      "%s: not valid JSON (near byte %zu)", path,
                                      end ? (size_t)(end - buf) : (size_t)0);
        goto out_free;
    }
    const char *twice = duplicate_key(json);
    if (twice) { /* cJSON reads the first; Python's json (what wrote it) the last */
        st = weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                      "%s: the key \"%.100s\" is given twice in one object",
                                      path, twice);
        cJSON_Delete(json);
        goto out_free;
    }
    if (!cJSON_IsObject(json)) {
        cJSON_Delete(json);
        st = weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model", "%s: not a JSON object",
                                      path);
        goto out_free;
    }
    *json_p = json;
out_free:
    weft_free(buf);
out_close:
    (void)fclose(f); /* read-only stream */
    return st;
}

enum weft_path_kind weft_path_kind(const char *path)
{
    if (is_file(path)) {
        size_t n = strlen(path);
        return n > 12 && strcmp(path + n - 12, ".safetensors") == 0 ? WEFT_PATH_SAFETENSORS
                                                                     : WEFT_PATH_NONE;
    }
    if (!is_dir(path))
        return WEFT_PATH_NONE;
    enum weft_path_kind kind = WEFT_PATH_NONE;
    char *p = path_join(path, "model_index.json");
    if (p && is_file(p))
        kind = WEFT_PATH_PIPELINE;
    weft_free(p);
    if (kind != WEFT_PATH_NONE)
        return kind;
    p = path_join(path, "config.json");
    if (p && is_file(p))
        kind = WEFT_PATH_MODEL;
    weft_free(p);
    return kind;
}

/* ---------------------------------------------------------------------------------------- */

static int tensor_by_name(const void *a, const void *b)
{
    const struct weft_ckpt_tensor *x = a, *y = b;
    return strcmp(x->info->name, y->info->name);
}

static weft_status_t add_file(struct weft_ckpt *ck, const char *name, struct weft_error *err)
{
    char *path = path_join(ck->dir, name);
    if (!path)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    struct weft_st_file **files =
        weft_realloc(ck->files, (ck->n_files + 1) * sizeof(struct weft_st_file *));
    if (!files) {
        weft_free(path);
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    }
    ck->files = files;
    weft_status_t st = weft_st_open(path, &ck->files[ck->n_files], err);
    weft_free(path);
    if (st == WEFT_OK)
        ck->n_files++;
    return st;
}

static bool shard_name_ok(const char *s)
{
    return s[0] && !strchr(s, '/') && !strchr(s, '\\') && strcmp(s, ".") != 0 &&
           strcmp(s, "..") != 0;
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Opens every shard named by the index, then checks the index against the shards. */
static weft_status_t open_sharded(struct weft_ckpt *ck, const char *index_path,
                                  struct weft_error *err)
{
    cJSON *index = NULL;
    weft_status_t st = weft_json_read_file(index_path, INDEX_MAX_BYTES, &index, err);
    if (st != WEFT_OK)
        return st;
    const char **names = NULL;
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(index, "weight_map");
    if (!cJSON_IsObject(map)) {
        st = weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                      "%s: no \"weight_map\" object", index_path);
        goto out;
    }
    size_t n_map = (size_t)cJSON_GetArraySize(map);
    names = weft_malloc((n_map + 1) * sizeof(*names));
    if (!names) {
        st = weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
        goto out;
    }
    size_t i = 0;
    for (const cJSON *e = map->child; e; e = e->next, i++) {
        if (!cJSON_IsString(e)) {
            st = weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                          "%s: weight_map entry '%s' is not a file name",
                                          index_path, e->string);
            goto out;
        }
        if (!shard_name_ok(e->valuestring)) {
            st = weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                          "%s: weight_map entry '%s' names shard '%s', which is "
                                          "not a plain file name in the folder", index_path,
                                          e->string, e->valuestring);
            goto out;
        }
        names[i] = e->valuestring;
    }
    qsort(names, n_map, sizeof(*names), str_cmp);
    for (i = 0; i < n_map; i++) {
        if (i && strcmp(names[i], names[i - 1]) == 0)
            continue;
        if ((st = add_file(ck, names[i], err)) != WEFT_OK)
            goto out;
    }
    /* Both directions: mapped tensors exist in their shard; shard tensors are mapped there. */
    for (const cJSON *e = map->child; e; e = e->next) {
        for (i = 0; i < ck->n_files; i++) {
            const char *fname = strrchr(weft_st_path(ck->files[i]), '/') + 1;
            if (strcmp(fname, e->valuestring) != 0)
                continue;
            if (!weft_st_find(ck->files[i], e->string)) {
                st = weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                              "%s: maps '%s' to shard '%s', which does not "
                                              "contain it", index_path, e->string,
                                              e->valuestring);
                goto out;
            }
        }
    }
    for (i = 0; i < ck->n_files; i++) {
        const char *fname = strrchr(weft_st_path(ck->files[i]), '/') + 1;
        for (size_t k = 0; k < weft_st_count(ck->files[i]); k++) {
            const char *tname = weft_st_at(ck->files[i], k)->name;
            const cJSON *e = cJSON_GetObjectItemCaseSensitive(map, tname);
            if (!e || strcmp(e->valuestring, fname) != 0) {
                st = weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                              "%s: shard '%s' holds '%s', which the index %s",
                                              index_path, fname, tname,
                                              e ? "maps to another shard" : "does not list");
                goto out;
            }
        }
    }
    ck->sharded = true;
out:
    weft_free(names);
    cJSON_Delete(index);
    return st;
}

static weft_status_t build_table(struct weft_ckpt *ck, struct weft_error *err)
{
    size_t n = 0;
    for (size_t i = 0; i < ck->n_files; i++)
        n += weft_st_count(ck->files[i]);
    ck->tensors = weft_calloc(n, sizeof(*ck->tensors));
    if (!ck->tensors)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    size_t k = 0;
    for (size_t i = 0; i < ck->n_files; i++) {
        for (size_t j = 0; j < weft_st_count(ck->files[i]); j++) {
            ck->tensors[k].info = weft_st_at(ck->files[i], j);
            ck->tensors[k].file = ck->files[i];
            k++;
        }
    }
    qsort(ck->tensors, n, sizeof(*ck->tensors), tensor_by_name);
    for (size_t i = 1; i < n; i++) {
        if (strcmp(ck->tensors[i].info->name, ck->tensors[i - 1].info->name) == 0)
            return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                            "%s: tensor '%s' appears in two shards", ck->dir,
                                            ck->tensors[i].info->name);
    }
    ck->n_tensors = n;
    return WEFT_OK;
}

/* The weights' file names: Diffusers' first, then transformers' (the text encoders). */
static const char *const weight_names[][3] = {
    {INDEX_NAME, WEIGHTS_NAME, "diffusion_pytorch_model.bin"},
    {"model.safetensors.index.json", "model.safetensors", "pytorch_model.bin"},
};

weft_status_t weft_ckpt_open(const char *dir, struct weft_ckpt **ck_p, struct weft_error *err)
{
    struct weft_ckpt *ck = weft_calloc(1, sizeof(*ck));
    if (!ck)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    weft_status_t st = WEFT_ERR_NOMEM;
    char *config = NULL, *paths[2][3] = {{NULL}};
    ck->dir = weft_strdup(dir);
    config = path_join(dir, "config.json");
    bool ok = ck->dir && config;
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 3; j++)
            ok = ok && (paths[k][j] = path_join(dir, weight_names[k][j]));
    if (!ok) {
        weft_error_refuse(err, st, "out of memory");
        goto err;
    }
    if ((st = weft_json_read_file(config, CONFIG_MAX_BYTES, &ck->config, err)) != WEFT_OK)
        goto err;
    bool found = false;
    for (int k = 0; k < 2 && !found; k++) {
        found = true;
        if (is_file(paths[k][0]))
            st = open_sharded(ck, paths[k][0], err);
        else if (is_file(paths[k][1]))
            st = add_file(ck, weight_names[k][1], err);
        else if (is_file(paths[k][2]))
            st = weft_error_refuse_or_log(err, WEFT_ERR_UNSUPPORTED, "model",
                                          "%s: only non-safetensors weights (%s); weft reads "
                                          "safetensors only: convert the checkpoint", dir,
                                          weight_names[k][2]);
        else
            found = false;
    }
    if (!found)
        st = weft_error_refuse_or_log(err, WEFT_ERR_NOT_FOUND, "model",
                                      "%s: no weights (%s or %s; %s or %s)", dir, WEIGHTS_NAME,
                                      INDEX_NAME, weight_names[1][1], weight_names[1][0]);
    if (st != WEFT_OK)
        goto err;
    if ((st = build_table(ck, err)) != WEFT_OK)
        goto err;
    st = WEFT_OK;
err:
    weft_free(config);
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 3; j++)
            weft_free(paths[k][j]);
    if (st != WEFT_OK) {
        weft_ckpt_close(ck);
        return st;
    }
    *ck_p = ck;
    return WEFT_OK;
}

void weft_ckpt_close(struct weft_ckpt *ck)
{
    if (!ck)
        return;
    for (size_t i = 0; i < ck->n_files; i++)
        weft_st_close(ck->files[i]);
    weft_free(ck->files);
    weft_free(ck->tensors);
    cJSON_Delete(ck->config);
    weft_free(ck->dir);
    weft_free(ck);
}

const char *weft_ckpt_dir(const struct weft_ckpt *ck)
{
    return ck->dir;
}

const char *weft_ckpt_class(const struct weft_ckpt *ck)
{
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(ck->config, "_class_name");
    if (cJSON_IsString(c))
        return c->valuestring;
    /* transformers: "architectures": ["CLIPTextModel"] */
    const cJSON *a = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(ck->config,
                                                                         "architectures"), 0);
    return cJSON_IsString(a) ? a->valuestring : "";
}

const cJSON *weft_ckpt_config(const struct weft_ckpt *ck)
{
    return ck->config;
}

bool weft_ckpt_sharded(const struct weft_ckpt *ck)
{
    return ck->sharded;
}

size_t weft_ckpt_file_count(const struct weft_ckpt *ck)
{
    return ck->n_files;
}

struct weft_st_file *weft_ckpt_file_at(const struct weft_ckpt *ck, size_t i)
{
    return i < ck->n_files ? ck->files[i] : NULL;
}

size_t weft_ckpt_count(const struct weft_ckpt *ck)
{
    return ck->n_tensors;
}

const struct weft_ckpt_tensor *weft_ckpt_at(const struct weft_ckpt *ck, size_t i)
{
    return i < ck->n_tensors ? &ck->tensors[i] : NULL;
}

const struct weft_ckpt_tensor *weft_ckpt_find(const struct weft_ckpt *ck, const char *name)
{
    size_t lo = 0, hi = ck->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(ck->tensors[mid].info->name, name);
        if (c == 0)
            return &ck->tensors[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

enum weft_dtype weft_ckpt_weight_dtype(const struct weft_ckpt *ck, const char *name)
{
    const struct weft_ckpt_tensor *t = ck ? weft_ckpt_find(ck, name) : NULL;
    const enum weft_dtype d = t ? (enum weft_dtype)t->info->dtype : WEFT_DTYPE_F32;
    return d == WEFT_DTYPE_BF16 || d == WEFT_DTYPE_F16 ? d : WEFT_DTYPE_F32;
}

uint64_t weft_ckpt_held_bytes(const struct weft_ckpt *ck, const char *name, int ndim,
                              int64_t numel)
{
    const enum weft_dtype d = ndim >= 2 ? weft_ckpt_weight_dtype(ck, name) : WEFT_DTYPE_F32;
    return (uint64_t)numel * weft_dtype_size(d);
}

/* ---------------------------------------------------------------------------------------- */
/* Pipelines                                                                                 */

struct weft_pipe {
    char *dir;
    cJSON *index;
    size_t n;
    struct weft_pipe_component *components;
};

weft_status_t weft_pipe_open(const char *dir, struct weft_pipe **pipe_p, struct weft_error *err)
{
    struct weft_pipe *p = weft_calloc(1, sizeof(*p));
    char *path = path_join(dir, "model_index.json");
    weft_status_t st = WEFT_ERR_NOMEM;
    if (!p || !path || !(p->dir = weft_strdup(dir))) {
        weft_error_refuse(err, st, "out of memory");
        goto err;
    }
    if ((st = weft_json_read_file(path, CONFIG_MAX_BYTES, &p->index, err)) != WEFT_OK)
        goto err;
    size_t n = 0;
    for (const cJSON *e = p->index->child; e; e = e->next)
        n += e->string[0] != '_' && cJSON_IsArray(e);
    p->components = weft_calloc(n, sizeof(*p->components));
    if (!p->components) {
        st = weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
        goto err;
    }
    for (const cJSON *e = p->index->child; e; e = e->next) {
        if (e->string[0] == '_' || !cJSON_IsArray(e))
            continue;
        const cJSON *lib = cJSON_GetArrayItem(e, 0), *cls = cJSON_GetArrayItem(e, 1);
        bool null_entry = cJSON_IsNull(lib) && cJSON_IsNull(cls);
        if (cJSON_GetArraySize(e) != 2 ||
            !(null_entry || (cJSON_IsString(lib) && cJSON_IsString(cls)))) {
            st = weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                          "%s: component '%s' is not [library, class] or [null, "
                                          "null]", path, e->string);
            goto err;
        }
        if (!shard_name_ok(e->string)) {
            st = weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                          "%s: component name '%s' is not a plain folder name",
                                          path, e->string);
            goto err;
        }
        struct weft_pipe_component *c = &p->components[p->n++];
        c->name = e->string;
        c->library = null_entry ? NULL : lib->valuestring;
        c->class_name = null_entry ? NULL : cls->valuestring;
    }
    weft_free(path);
    *pipe_p = p;
    return WEFT_OK;
err:
    weft_free(path);
    weft_pipe_close(p);
    return st;
}

void weft_pipe_close(struct weft_pipe *p)
{
    if (!p)
        return;
    weft_free(p->components);
    cJSON_Delete(p->index);
    weft_free(p->dir);
    weft_free(p);
}

const char *weft_pipe_dir(const struct weft_pipe *p)
{
    return p->dir;
}

const char *weft_pipe_class(const struct weft_pipe *p)
{
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(p->index, "_class_name");
    return cJSON_IsString(c) ? c->valuestring : "";
}

size_t weft_pipe_count(const struct weft_pipe *p)
{
    return p->n;
}

const struct weft_pipe_component *weft_pipe_at(const struct weft_pipe *p, size_t i)
{
    return i < p->n ? &p->components[i] : NULL;
}

const struct weft_pipe_component *weft_pipe_find(const struct weft_pipe *p, const char *name)
{
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->components[i].name, name) == 0)
            return &p->components[i];
    return NULL;
}
