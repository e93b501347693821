/* PNG writing and reading through libspng (see png.h). libspng's error codes are translated
 * here and never leave this file. */
#include "worker/png.h"

#include <errno.h>
#include <spng.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/files.h"
#include "common/log.h"

#define MAX_PIXELS ((uint64_t)1 << 28)

static bool is_ascii_text(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s > 126 || ((unsigned char)*s < 32 && *s != '\n'))
            return false;
    return true;
}

static bool valid_key(const char *k)
{
    size_t n = strlen(k);
    if (n < 1 || n > 79 || k[0] == ' ' || k[n - 1] == ' ')
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)k[i] < 32 || (unsigned char)k[i] > 126)
            return false;
    return true;
}

static weft_status_t set_texts(spng_ctx *ctx, const char *path, size_t n,
                               const struct weft_png_text *text, struct weft_error *err)
{
    if (n == 0)
        return WEFT_OK;
    struct spng_text *t = weft_calloc(n, sizeof(*t));
    if (!t)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    static char empty[1] = "";
    weft_status_t st = WEFT_OK;
    uint32_t m = 0; /* the chunks written: an empty value writes none (spng refuses it) */
    for (size_t i = 0; i < n && st == WEFT_OK; i++) {
        if (!valid_key(text[i].key)) {
            st = weft_error_set(err, WEFT_ERR_INVALID, "png",
                                "%s: text key '%s' is not 1-79 printable ASCII characters", path,
                                text[i].key);
            break;
        }
        if (!text[i].value[0])
            continue;
        snprintf(t[m].keyword, sizeof(t[m].keyword), "%s", text[i].key);
        t[m].type = is_ascii_text(text[i].value) ? SPNG_TEXT : SPNG_ITXT;
        t[m].text = (char *)text[i].value; /* spng copies it; it does not write through this */
        t[m].length = strlen(text[i].value);
        t[m].language_tag = empty;
        t[m].translated_keyword = empty;
        m++;
    }
    int rc = st == WEFT_OK && m ? spng_set_text(ctx, t, m) : 0;
    if (rc)
        st = weft_error_set(err, WEFT_ERR_INVALID, "png", "%s: text chunks: %s", path,
                            spng_strerror(rc));
    weft_free(t);
    return st;
}

/* Encode into a buffer (owned by spng's allocator: free()). */
static weft_status_t encode(const char *path, const uint8_t *rgb, int64_t width, int64_t height,
                            size_t n_text, const struct weft_png_text *text, void **png_p,
                            size_t *len_p, struct weft_error *err)
{
    spng_ctx *ctx = spng_ctx_new(SPNG_CTX_ENCODER);
    if (!ctx)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    struct spng_ihdr ihdr = {
        .width = (uint32_t)width,
        .height = (uint32_t)height,
        .bit_depth = 8,
        .color_type = SPNG_COLOR_TYPE_TRUECOLOR,
    };
    weft_status_t st = WEFT_OK;
    int rc = spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
    if (!rc)
        rc = spng_set_ihdr(ctx, &ihdr);
    if (!rc && (st = set_texts(ctx, path, n_text, text, err)) == WEFT_OK)
        rc = spng_encode_image(ctx, rgb, (size_t)(width * height * 3), SPNG_FMT_PNG,
                               SPNG_ENCODE_FINALIZE);
    if (!rc && st == WEFT_OK) {
        *png_p = spng_get_png_buffer(ctx, len_p, &rc);
        if (!*png_p && !rc)
            rc = SPNG_EMEM;
    }
    if (rc && st == WEFT_OK)
        st = weft_error_set(err, rc == SPNG_EMEM ? WEFT_ERR_NOMEM : WEFT_ERR_INVALID, "png",
                            "%s: encoding %lldx%lld RGB: %s", path, (long long)width,
                            (long long)height, spng_strerror(rc));
    spng_ctx_free(ctx);
    return st;
}

static weft_status_t write_atomic(const char *path, const void *data, size_t len,
                                  struct weft_error *err)
{
    size_t n = strlen(path);
    char *tmp = weft_malloc(n + 16);
    if (!tmp)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    snprintf(tmp, n + 16, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        weft_free(tmp);
        return weft_error_set(err, WEFT_ERR_IO, "png", "%s: cannot create a file beside it: %s",
                              path, strerror(errno));
    }
    if (fchmod(fd, 0644) != 0) /* mkstemp makes 0600; an image is for sharing */
        WEFT_LOG_DEBUG("png", "%s: fchmod: %s", tmp, strerror(errno));
    FILE *f = fdopen(fd, "wb");
    bool ok = f && fwrite(data, 1, len, f) == len;
    int e = errno;
    if (f) {
        ok = fclose(f) == 0 && ok;
        e = ok ? 0 : errno;
    } else {
        close(fd);
    }
    if (ok && rename(tmp, path) != 0) {
        ok = false;
        e = errno;
    }
    if (!ok) {
        weft_error_set(err, WEFT_ERR_IO, "png", "%s: write failed: %s", path, strerror(e));
        if (remove(tmp) != 0)
            WEFT_LOG_DEBUG("png", "%s: cannot remove: %s", tmp, strerror(errno));
    }
    weft_free(tmp);
    return ok ? WEFT_OK : WEFT_ERR_IO;
}

weft_status_t weft_png_write(const char *path, const uint8_t *rgb, int64_t width,
                             int64_t height, size_t n_text, const struct weft_png_text *text,
                             struct weft_error *err)
{
    if (width < 1 || height < 1 || width > WEFT_PNG_MAX_EDGE || height > WEFT_PNG_MAX_EDGE)
        return weft_error_set(err, WEFT_ERR_INVALID, "png",
                              "%s: %lldx%lld is not a PNG size (1 to %d pixels per edge)", path,
                              (long long)width, (long long)height, WEFT_PNG_MAX_EDGE);
    void *png = NULL;
    size_t len = 0;
    weft_status_t st = encode(path, rgb, width, height, n_text, text, &png, &len, err);
    if (st == WEFT_OK)
        st = write_atomic(path, png, len, err);
    free(png);
    return st;
}

weft_status_t weft_png_encode(const uint8_t *rgb, int64_t width, int64_t height, size_t n_text,
                              const struct weft_png_text *text, void **png_p, size_t *len_p,
                              struct weft_error *err)
{
    if (width < 1 || height < 1 || width > WEFT_PNG_MAX_EDGE || height > WEFT_PNG_MAX_EDGE)
        return weft_error_set(err, WEFT_ERR_INVALID, "png",
                              "%lldx%lld is not a PNG size (1 to %d pixels per edge)",
                              (long long)width, (long long)height, WEFT_PNG_MAX_EDGE);
    return encode("(memory)", rgb, width, height, n_text, text, png_p, len_p, err);
}

size_t weft_png_meta_text(const struct weft_png_meta *m, struct weft_png_meta_store *st,
                          struct weft_png_text text[WEFT_PNG_META_MAX])
{
    size_t n = 0;
    snprintf(st->software, sizeof(st->software), "weft %s", WEFT_VERSION);
    text[n++] = (struct weft_png_text){"Software", st->software};
    if (m->prompt)
        text[n++] = (struct weft_png_text){"weft.prompt", m->prompt};
    if (m->has_seed)
        snprintf(st->seed, sizeof(st->seed), "%llu", (unsigned long long)m->seed);
    else
        snprintf(st->seed, sizeof(st->seed), "none");
    text[n++] = (struct weft_png_text){"weft.seed", st->seed};
    snprintf(st->steps, sizeof(st->steps), "%lld", (long long)m->steps);
    text[n++] = (struct weft_png_text){"weft.steps", st->steps};
    snprintf(st->guidance, sizeof(st->guidance), "%g", m->guidance);
    text[n++] = (struct weft_png_text){"weft.guidance", st->guidance};
    snprintf(st->size, sizeof(st->size), "%lldx%lld", (long long)m->width, (long long)m->height);
    text[n++] = (struct weft_png_text){"weft.size", st->size};
    if (m->model)
        text[n++] = (struct weft_png_text){"weft.model", m->model};
    if (m->layout)
        text[n++] = (struct weft_png_text){"weft.layout", m->layout};
    if (m->job)
        text[n++] = (struct weft_png_text){"weft.job", m->job};
    if (m->image >= 0) {
        snprintf(st->image, sizeof(st->image), "%lld", (long long)m->image);
        text[n++] = (struct weft_png_text){"weft.image", st->image};
    }
    if (m->prompt_index >= 0) {
        snprintf(st->prompt, sizeof(st->prompt), "%lld", (long long)m->prompt_index);
        text[n++] = (struct weft_png_text){"weft.prompt_index", st->prompt};
    }
    snprintf(st->cfg, sizeof(st->cfg), "%g", m->negative_prompt ? m->true_cfg_scale : 1.0);
    if (m->negative_prompt) {
        text[n++] = (struct weft_png_text){"weft.negative_prompt", m->negative_prompt};
        text[n++] = (struct weft_png_text){"weft.true_cfg_scale", st->cfg};
    }
    const char *model = m->model ? strrchr(m->model, '/') : NULL;
    model = model && model[1] ? model + 1 : m->model;
    snprintf(st->parameters, sizeof(st->parameters),
             "%s%s%s\nSteps: %lld, Sampler: Euler, Schedule type: Simple, CFG scale: %s, "
             "Distilled CFG Scale: %g, Seed: %s, Size: %lldx%lld%s%s, Version: %s%s%s%s%s",
             m->prompt ? m->prompt : "", m->negative_prompt ? "\nNegative prompt: " : "",
             m->negative_prompt ? m->negative_prompt : "", (long long)m->steps, st->cfg,
             m->guidance,
             m->has_seed ? st->seed : "-1", (long long)m->width, (long long)m->height,
             model ? ", Model: " : "", model ? model : "", st->software,
             m->layout ? ", Layout: " : "", m->layout ? m->layout : "", m->job ? ", Job: " : "",
             m->job ? m->job : "");
    text[n++] = (struct weft_png_text){"parameters", st->parameters};
    return n;
}

/* ---------------------------------------------------------------------------------------- */
/* Reading                                                                                   */

static weft_status_t copy_texts(spng_ctx *ctx, struct weft_png_image *img)
{
    uint32_t n = 0;
    if (spng_get_text(ctx, NULL, &n) != 0 || n == 0)
        return WEFT_OK; /* SPNG_ECHUNKAVAIL: no text chunks */
    struct spng_text *t = weft_calloc(n, sizeof(*t));
    img->text = weft_calloc(n, sizeof(*img->text));
    if (!t || !img->text) {
        weft_free(t);
        return WEFT_ERR_NOMEM;
    }
    weft_status_t st = spng_get_text(ctx, t, &n) == 0 ? WEFT_OK : WEFT_ERR_FORMAT;
    for (uint32_t i = 0; i < n && st == WEFT_OK; i++) {
        char *k = weft_strdup(t[i].keyword), *v = weft_malloc(t[i].length + 1);
        if (!k || !v) {
            weft_free(k);
            weft_free(v);
            st = WEFT_ERR_NOMEM;
            break;
        }
        memcpy(v, t[i].text, t[i].length);
        v[t[i].length] = '\0';
        img->text[img->n_text++] = (struct weft_png_text){k, v};
    }
    weft_free(t);
    return st;
}

static weft_status_t decode(spng_ctx *ctx, const char *path, struct weft_png_image *img,
                            struct weft_error *err)
{
    struct spng_ihdr ihdr;
    size_t size = 0;
    int rc = spng_get_ihdr(ctx, &ihdr);
    if (!rc && (uint64_t)ihdr.width * ihdr.height > MAX_PIXELS)
        rc = SPNG_EWIDTH;
    if (!rc)
        rc = spng_decoded_image_size(ctx, SPNG_FMT_RGB8, &size);
    if (rc)
        return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "png", "%s: %s", path,
                                        spng_strerror(rc));
    if (!(img->rgb = weft_malloc(size)))
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    if ((rc = spng_decode_image(ctx, img->rgb, size, SPNG_FMT_RGB8, SPNG_DECODE_TRNS)))
        return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "png", "%s: %s", path,
                                        spng_strerror(rc));
    img->width = ihdr.width;
    img->height = ihdr.height;
    weft_status_t st = copy_texts(ctx, img);
    if (st == WEFT_ERR_FORMAT)
        weft_error_refuse_or_log(err, st, "png", "%s: unreadable text chunks", path);
    else if (st == WEFT_ERR_NOMEM)
        weft_error_refuse(err, st, "out of memory");
    return st;
}

weft_status_t weft_png_read(const char *path, struct weft_png_image *img,
                            struct weft_error *err)
{
    struct weft_png_image out = {0};
    FILE *f = weft_files_fopen_regular(path);
    if (!f)
        return weft_error_refuse_or_log(err, WEFT_ERR_IO, "png", "%s: %s", path,
                                        weft_files_open_error(errno));
    spng_ctx *ctx = spng_ctx_new(0);
    weft_status_t st = ctx ? WEFT_OK : WEFT_ERR_NOMEM;
    if (st != WEFT_OK)
        weft_error_refuse(err, st, "out of memory");
    if (st == WEFT_OK && (spng_set_image_limits(ctx, WEFT_PNG_MAX_EDGE, WEFT_PNG_MAX_EDGE) ||
                          spng_set_chunk_limits(ctx, (size_t)64 << 20, (size_t)64 << 20) ||
                          spng_set_png_file(ctx, f)))
        st = weft_error_set(err, WEFT_ERR_INTERNAL, "png", "%s: cannot set up the decoder",
                            path);
    if (st == WEFT_OK)
        st = decode(ctx, path, &out, err);
    spng_ctx_free(ctx);
    if (fclose(f) != 0 && st == WEFT_OK)
        st = weft_error_set(err, WEFT_ERR_IO, "png", "%s: %s", path, strerror(errno));
    if (st != WEFT_OK) {
        weft_png_image_cleanup(&out);
        return st;
    }
    *img = out;
    return WEFT_OK;
}

void weft_png_image_cleanup(struct weft_png_image *img)
{
    for (size_t i = 0; i < img->n_text; i++) {
        weft_free((char *)img->text[i].key);
        weft_free((char *)img->text[i].value);
    }
    weft_free(img->text);
    weft_free(img->rgb);
    memset(img, 0, sizeof(*img));
}

const char *weft_png_image_text(const struct weft_png_image *img, const char *key)
{
    for (size_t i = 0; i < img->n_text; i++)
        if (strcmp(img->text[i].key, key) == 0)
            return img->text[i].value;
    return NULL;
}
