/* weft inspect: what a checkpoint holds, as text or stable JSON. */
#include <cJSON.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "common/alloc.h"
#include "common/log.h"
#include "common/tensor.h"
#include "model/checkpoint.h"
#include "model/flux.h"
#include "model/vae.h"

#define INSPECT_SCHEMA 1

static void help(FILE *out)
{
    fprintf(out,
            "usage: weft inspect PATH [--json] [--no-tensors]\n"
            "\n"
            "Show what a checkpoint holds without loading any weight: its class, its config\n"
            "(exactly as in config.json), parameter count, bytes per dtype and the tensor\n"
            "table (name, dtype, shape, file, offset). PATH is a .safetensors file, a model\n"
            "folder (config.json + weights, single or sharded) or a pipeline folder\n"
            "(model_index.json + one subfolder per component).\n"
            "\n"
            "  --json        machine-readable output (schema in README.md, \"weft_inspect\": %d)\n"
            "  --no-tensors  omit the tensor table\n",
            INSPECT_SCHEMA);
}

static cJSON *shape_json(int ndim, const int64_t *shape)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < ndim; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)shape[i]));
    return a;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* One tensor list (from a checkpoint or a lone file) into a JSON object's fields. */
struct tensor_src {
    const struct weft_st_tensor *t;
    const struct weft_st_file *file;
};

static void add_tensors(cJSON *obj, size_t n, const struct tensor_src *src, bool with_table)
{
    double params = 0;
    cJSON *bytes = cJSON_AddObjectToObject(obj, "bytes_by_dtype");
    cJSON *table = with_table ? cJSON_AddArrayToObject(obj, "tensors") : NULL;
    for (size_t i = 0; i < n; i++) {
        const struct weft_st_tensor *t = src[i].t;
        params += (double)t->numel;
        cJSON *b = cJSON_GetObjectItemCaseSensitive(bytes, t->dtype_name);
        if (b)
            cJSON_SetNumberValue(b, b->valuedouble + (double)t->nbytes);
        else
            cJSON_AddNumberToObject(bytes, t->dtype_name, (double)t->nbytes);
        if (!table)
            continue;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", t->name);
        cJSON_AddStringToObject(e, "dtype", t->dtype_name);
        cJSON_AddItemToObject(e, "shape", shape_json(t->ndim, t->shape));
        cJSON_AddStringToObject(e, "file", base_name(weft_st_path(src[i].file)));
        cJSON_AddNumberToObject(e, "offset", (double)t->offset);
        cJSON_AddNumberToObject(e, "nbytes", (double)t->nbytes);
        cJSON_AddItemToArray(table, e);
    }
    cJSON_AddNumberToObject(obj, "parameters", params);
    cJSON_AddNumberToObject(obj, "tensor_count", (double)n);
}

static weft_status_t inspect_file(const char *path, bool with_table, cJSON *out)
{
    struct weft_st_file *f;
    weft_status_t st = weft_st_open(path, &f, NULL);
    if (st != WEFT_OK)
        return st;
    size_t n = weft_st_count(f);
    struct tensor_src *src = weft_calloc(n, sizeof(*src));
    if (!src) {
        weft_st_close(f);
        return WEFT_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++)
        src[i] = (struct tensor_src){weft_st_at(f, i), f};
    cJSON_AddStringToObject(out, "kind", "safetensors");
    cJSON *meta = cJSON_AddObjectToObject(out, "metadata");
    for (size_t i = 0; i < weft_st_meta_count(f); i++)
        cJSON_AddStringToObject(meta, weft_st_meta_at(f, i)->key, weft_st_meta_at(f, i)->value);
    cJSON *files = cJSON_AddArrayToObject(out, "files");
    cJSON *fe = cJSON_CreateObject();
    cJSON_AddStringToObject(fe, "name", base_name(path));
    cJSON_AddNumberToObject(fe, "bytes", (double)weft_st_file_size(f));
    cJSON_AddItemToArray(files, fe);
    add_tensors(out, n, src, with_table);
    weft_free(src);
    weft_st_close(f);
    return WEFT_OK;
}

/* Known classes get their typed config checked, so inspect also validates. */
static weft_status_t check_config(const char *cls, const cJSON *config, const char *dir)
{
    char origin[1100];
    snprintf(origin, sizeof(origin), "%s/config.json", dir);
    if (strcmp(cls, WEFT_FLUX_CLASS) == 0 || strcmp(cls, WEFT_FLUX2_CLASS) == 0 ||
        strcmp(cls, WEFT_QWEN_CLASS) == 0) {
        struct weft_flux_config fc;
        return weft_flux_config_parse(config, origin, &fc, NULL);
    }
    if (strcmp(cls, WEFT_VAE_CLASS) == 0 || strcmp(cls, WEFT_VAE2_CLASS) == 0 ||
        strcmp(cls, WEFT_VAE3_CLASS) == 0) {
        struct weft_vae_config vc;
        return weft_vae_config_parse(config, origin, &vc, NULL);
    }
    return WEFT_OK;
}

static weft_status_t inspect_model(const char *dir, bool with_table, cJSON *out)
{
    struct weft_ckpt *ck;
    weft_status_t st = weft_ckpt_open(dir, &ck, NULL);
    if (st != WEFT_OK)
        return st;
    if ((st = check_config(weft_ckpt_class(ck), weft_ckpt_config(ck), dir)) != WEFT_OK)
        goto out;
    cJSON_AddStringToObject(out, "kind", "model");
    cJSON_AddStringToObject(out, "class", weft_ckpt_class(ck));
    cJSON_AddItemToObject(out, "config", cJSON_Duplicate(weft_ckpt_config(ck), 1));
    cJSON_AddBoolToObject(out, "sharded", weft_ckpt_sharded(ck));
    cJSON *files = cJSON_AddArrayToObject(out, "files");
    for (size_t i = 0; i < weft_ckpt_file_count(ck); i++) {
        struct weft_st_file *f = weft_ckpt_file_at(ck, i);
        cJSON *fe = cJSON_CreateObject();
        cJSON_AddStringToObject(fe, "name", base_name(weft_st_path(f)));
        cJSON_AddNumberToObject(fe, "bytes", (double)weft_st_file_size(f));
        cJSON_AddItemToArray(files, fe);
    }
    size_t n = weft_ckpt_count(ck);
    struct tensor_src *src = weft_calloc(n, sizeof(*src));
    if (!src) {
        st = WEFT_ERR_NOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        src[i] = (struct tensor_src){weft_ckpt_at(ck, i)->info, weft_ckpt_at(ck, i)->file};
    add_tensors(out, n, src, with_table);
    weft_free(src);
out:
    weft_ckpt_close(ck);
    return st;
}

static weft_status_t inspect_pipeline(const char *dir, bool with_table, cJSON *out)
{
    struct weft_pipe *p;
    weft_status_t st = weft_pipe_open(dir, &p, NULL);
    if (st != WEFT_OK)
        return st;
    cJSON_AddStringToObject(out, "kind", "pipeline");
    cJSON_AddStringToObject(out, "class", weft_pipe_class(p));
    cJSON *comps = cJSON_AddArrayToObject(out, "components");
    for (size_t i = 0; i < weft_pipe_count(p) && st == WEFT_OK; i++) {
        const struct weft_pipe_component *c = weft_pipe_at(p, i);
        cJSON *ce = cJSON_CreateObject();
        cJSON_AddItemToArray(comps, ce);
        cJSON_AddStringToObject(ce, "name", c->name);
        if (!c->class_name) {
            cJSON_AddNullToObject(ce, "library");
            cJSON_AddNullToObject(ce, "class");
            continue;
        }
        cJSON_AddStringToObject(ce, "library", c->library);
        cJSON_AddStringToObject(ce, "class", c->class_name);
        char sub[2048];
        snprintf(sub, sizeof(sub), "%s/%s", dir, c->name);
        enum weft_path_kind kind = weft_path_kind(sub);
        if (kind == WEFT_PATH_MODEL) {
            cJSON *m = cJSON_AddObjectToObject(ce, "model");
            cJSON_AddStringToObject(m, "path", sub);
            st = inspect_model(sub, with_table, m);
        } else if (weft_cli_ends_with(c->class_name, "Scheduler")) {
            char cfg[2100];
            snprintf(cfg, sizeof(cfg), "%s/scheduler_config.json", sub);
            cJSON *json;
            st = weft_json_read_file(cfg, 1 << 20, &json, NULL); /* logs why */
            if (st == WEFT_OK)
                cJSON_AddItemToObject(ce, "config", json);
        } else if (!weft_cli_ends_with(c->class_name, "Tokenizer") &&
                   !weft_cli_ends_with(c->class_name, "TokenizerFast")) {
            /* a model class (a transformer, an encoder, a VAE): its folder must hold one */
            WEFT_LOG_ERROR("inspect", "%s: no model here (model_index.json names %s for \"%s\": "
                           "a folder with config.json and .safetensors weights)", sub,
                           c->class_name, c->name);
            st = WEFT_ERR_NOT_FOUND;
        }
    }
    weft_pipe_close(p);
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* Text output                                                                               */

static void print_value(const cJSON *v)
{
    char *s = cJSON_PrintUnformatted(v);
    printf("%s", s ? s : "?");
    cJSON_free(s);
}

static void print_model_text(const cJSON *m, const char *indent)
{
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(m, "class");
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(m, "kind");
    if (cls)
        printf("%sclass: %s\n", indent, cls->valuestring);
    const cJSON *config = cJSON_GetObjectItemCaseSensitive(m, "config");
    if (config && strcmp(kind->valuestring, "model") == 0) {
        printf("%sconfig (config.json):\n", indent);
        for (const cJSON *c = config->child; c; c = c->next) {
            printf("%s  %s = ", indent, c->string);
            print_value(c);
            printf("\n");
        }
    }
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(m, "metadata");
    for (const cJSON *c = meta ? meta->child : NULL; c; c = c->next)
        printf("%smetadata: %s = %s\n", indent, c->string, c->valuestring);
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(m, "files");
    const cJSON *sharded = cJSON_GetObjectItemCaseSensitive(m, "sharded");
    printf("%sfiles: %d%s\n", indent, cJSON_GetArraySize(files),
           cJSON_IsTrue(sharded) ? " (sharded, diffusion_pytorch_model.safetensors.index.json)"
                                 : "");
    for (const cJSON *f = files->child; f; f = f->next)
        printf("%s  %s  %.0f bytes\n", indent,
               cJSON_GetObjectItemCaseSensitive(f, "name")->valuestring,
               cJSON_GetObjectItemCaseSensitive(f, "bytes")->valuedouble);
    printf("%sparameters: %.0f in %.0f tensors\n", indent,
           cJSON_GetObjectItemCaseSensitive(m, "parameters")->valuedouble,
           cJSON_GetObjectItemCaseSensitive(m, "tensor_count")->valuedouble);
    const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(m, "bytes_by_dtype");
    for (const cJSON *b = bytes->child; b; b = b->next)
        printf("%sbytes %s: %.0f\n", indent, b->string, b->valuedouble);
    const cJSON *table = cJSON_GetObjectItemCaseSensitive(m, "tensors");
    if (!table)
        return;
    printf("%s%-56s %-6s %-18s %-40s %s\n", indent, "tensor", "dtype", "shape", "file", "offset");
    for (const cJSON *t = table->child; t; t = t->next) {
        char shape[128];
        int64_t dims[16];
        int nd = 0;
        for (const cJSON *d = cJSON_GetObjectItemCaseSensitive(t, "shape")->child; d && nd < 16;
             d = d->next)
            dims[nd++] = (int64_t)d->valuedouble;
        printf("%s%-56s %-6s %-18s %-40s %.0f\n", indent,
               cJSON_GetObjectItemCaseSensitive(t, "name")->valuestring,
               cJSON_GetObjectItemCaseSensitive(t, "dtype")->valuestring,
               weft_shape_str(nd, dims, shape, sizeof(shape)),
               cJSON_GetObjectItemCaseSensitive(t, "file")->valuestring,
               cJSON_GetObjectItemCaseSensitive(t, "offset")->valuedouble);
    }
}

static void print_text(const cJSON *root)
{
    const char *kind = cJSON_GetObjectItemCaseSensitive(root, "kind")->valuestring;
    printf("path: %s\nkind: %s\n", cJSON_GetObjectItemCaseSensitive(root, "path")->valuestring,
           kind);
    if (strcmp(kind, "pipeline") != 0) {
        print_model_text(root, "");
        return;
    }
    printf("class: %s\ncomponents:\n", cJSON_GetObjectItemCaseSensitive(root, "class")->valuestring);
    const cJSON *comps = cJSON_GetObjectItemCaseSensitive(root, "components");
    for (const cJSON *c = comps->child; c; c = c->next) {
        const cJSON *cls = cJSON_GetObjectItemCaseSensitive(c, "class");
        printf("  %s: %s\n", cJSON_GetObjectItemCaseSensitive(c, "name")->valuestring,
               cJSON_IsString(cls) ? cls->valuestring : "(none)");
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(c, "model");
        if (m)
            print_model_text(m, "    ");
        const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(c, "config");
        for (const cJSON *k = cfg ? cfg->child : NULL; k; k = k->next) {
            printf("    %s = ", k->string);
            print_value(k);
            printf("\n");
        }
    }
}

int weft_cmd_inspect(struct weft_cli *cli)
{
    const char *path = NULL;
    bool json = false, with_table = true;
    for (int i = 1; i < cli->argc; i++) {
        const char *a = cli->argv[i];
        if (weft_cli_is_help(a)) {
            help(stdout);
            return 0;
        } else if (strcmp(a, "--json") == 0) {
            json = true;
        } else if (strcmp(a, "--no-tensors") == 0) {
            with_table = false;
        } else if (a[0] == '-' || path) {
            weft_cli_unexpected("inspect", "", "weft inspect", a);
            return 2;
        } else {
            path = a;
        }
    }
    if (!path) {
        help(stderr);
        return 2;
    }
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return 1;
    cJSON_AddNumberToObject(root, "weft_inspect", INSPECT_SCHEMA);
    cJSON_AddStringToObject(root, "path", path);
    weft_status_t st;
    switch (weft_path_kind(path)) {
    case WEFT_PATH_SAFETENSORS:
        st = inspect_file(path, with_table, root);
        break;
    case WEFT_PATH_MODEL:
        st = inspect_model(path, with_table, root);
        break;
    case WEFT_PATH_PIPELINE:
        st = inspect_pipeline(path, with_table, root);
        break;
    default:
        WEFT_LOG_ERROR("inspect", "%s: not a .safetensors file, a model folder (config.json) or "
                                  "a pipeline folder (model_index.json)", path);
        st = WEFT_ERR_NOT_FOUND;
    }
    if (st == WEFT_OK) {
        if (json) {
            char *s = cJSON_Print(root);
            if (s)
                printf("%s\n", s);
            cJSON_free(s);
        } else {
            print_text(root);
        }
    }
    cJSON_Delete(root);
    return st == WEFT_OK ? 0 : 1;
}
