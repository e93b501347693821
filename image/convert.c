/* PNG to JPEG and WebP (convert.h). libspng, libjpeg and libwebp codes are translated here and
 * never leave this file. */
#include "image/convert.h"

#include <setjmp.h>
#include <spng.h>
#include <stdint.h>
#include <stdio.h> /* before jpeglib.h, which uses FILE */
#include <jpeglib.h>
#include <stdlib.h>
#include <string.h>
#include <webp/encode.h>

#include "common/alloc.h"

#define MAX_EDGE 16384 /* the largest image a job may make */

int weft_image_format_parse(const char *name)
{
    if (strcmp(name, "png") == 0)
        return WEFT_IMAGE_PNG;
    if (strcmp(name, "jpeg") == 0 || strcmp(name, "jpg") == 0)
        return WEFT_IMAGE_JPEG;
    if (strcmp(name, "webp") == 0)
        return WEFT_IMAGE_WEBP;
    return -1;
}

const char *weft_image_format_name(enum weft_image_format f)
{
    static const char *const names[] = {"png", "jpeg", "webp"};
    return (unsigned)f < WEFT_IMAGE_FORMAT_COUNT ? names[f] : "?";
}

const char *weft_image_format_mime(enum weft_image_format f)
{
    static const char *const names[] = {"image/png", "image/jpeg", "image/webp"};
    return (unsigned)f < WEFT_IMAGE_FORMAT_COUNT ? names[f] : "application/octet-stream";
}

struct rgb {
    uint8_t *px;
    uint32_t width, height;
    char *parameters; /* the "parameters" text chunk, or NULL */
};

static weft_status_t decode_png(const void *png, size_t len, struct rgb *out,
                                struct weft_error *err)
{
    spng_ctx *ctx = spng_ctx_new(0);
    if (!ctx)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    struct spng_ihdr ihdr;
    size_t size = 0;
    int rc = spng_set_image_limits(ctx, MAX_EDGE, MAX_EDGE);
    if (!rc)
        rc = spng_set_png_buffer(ctx, png, len);
    if (!rc)
        rc = spng_get_ihdr(ctx, &ihdr);
    if (!rc)
        rc = spng_decoded_image_size(ctx, SPNG_FMT_RGB8, &size);
    uint8_t *px = rc ? NULL : weft_malloc(size);
    if (!rc && !px) {
        spng_ctx_free(ctx);
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory for %zu bytes", size);
    }
    if (!rc)
        rc = spng_decode_image(ctx, px, size, SPNG_FMT_RGB8, SPNG_DECODE_TRNS);
    if (rc) {
        weft_free(px);
        spng_ctx_free(ctx);
        return weft_error_refuse(err, WEFT_ERR_FORMAT, "the image is not a readable PNG: %s",
                                 spng_strerror(rc));
    }
    *out = (struct rgb){px, ihdr.width, ihdr.height, NULL};
    uint32_t n = 0;
    if (spng_get_text(ctx, NULL, &n) == 0 && n > 0 && n < 64) {
        struct spng_text t[64];
        if (spng_get_text(ctx, t, &n) == 0)
            for (uint32_t i = 0; i < n && !out->parameters; i++)
                if (strcmp(t[i].keyword, "parameters") == 0)
                    out->parameters = weft_strdup(t[i].text);
    }
    spng_ctx_free(ctx);
    return WEFT_OK;
}

/* libjpeg reports errors by calling error_exit, which must not return: jump back. */
struct jpeg_fail {
    struct jpeg_error_mgr mgr;
    jmp_buf env;
    char msg[JMSG_LENGTH_MAX];
};

static void jpeg_fail_exit(j_common_ptr cinfo)
{
    struct jpeg_fail *f = (struct jpeg_fail *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, f->msg);
    longjmp(f->env, 1);
}

static weft_status_t encode_jpeg(const struct rgb *img, int quality, void **out_p,
                                 size_t *len_p, struct weft_error *err)
{
    struct jpeg_compress_struct cinfo;
    struct jpeg_fail fail = {0};
    unsigned char *volatile buf = NULL;
    unsigned long volatile len = 0;
    cinfo.err = jpeg_std_error(&fail.mgr);
    fail.mgr.error_exit = jpeg_fail_exit;
    if (setjmp(fail.env)) {
        jpeg_destroy_compress(&cinfo);
        free(buf);
        return weft_error_refuse(err, WEFT_ERR_INTERNAL, "JPEG encoder: %s", fail.msg);
    }
    jpeg_create_compress(&cinfo);
    jpeg_mem_dest(&cinfo, (unsigned char **)&buf, (unsigned long *)&len);
    cinfo.image_width = img->width;
    cinfo.image_height = img->height;
    cinfo.input_components = 3;
    cinfo.in_color_space = JCS_RGB;
    jpeg_set_defaults(&cinfo);
    jpeg_set_quality(&cinfo, quality, TRUE);
    jpeg_start_compress(&cinfo, TRUE);
    if (img->parameters) /* a COM marker holds at most 65533 bytes */
        jpeg_write_marker(&cinfo, JPEG_COM, (const JOCTET *)img->parameters,
                          (unsigned)(strlen(img->parameters) < 65533 ? strlen(img->parameters)
                                                                     : 65533));
    while (cinfo.next_scanline < cinfo.image_height) {
        JSAMPROW row = img->px + (size_t)cinfo.next_scanline * img->width * 3;
        jpeg_write_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_compress(&cinfo);
    jpeg_destroy_compress(&cinfo);
    void *copy = weft_malloc(len ? len : 1);
    if (copy)
        memcpy(copy, buf, len);
    free(buf); /* libjpeg's own allocation */
    if (!copy)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    *out_p = copy;
    *len_p = len;
    return WEFT_OK;
}

static weft_status_t encode_webp(const struct rgb *img, int quality, void **out_p,
                                 size_t *len_p, struct weft_error *err)
{
    uint8_t *buf = NULL;
    size_t len = WebPEncodeRGB(img->px, (int)img->width, (int)img->height,
                               (int)img->width * 3, (float)quality, &buf);
    if (len == 0) {
        WebPFree(buf);
        return weft_error_refuse(err, WEFT_ERR_INTERNAL, "WebP encoder failed (%ux%u)",
                                 img->width, img->height);
    }
    void *copy = weft_malloc(len);
    if (copy)
        memcpy(copy, buf, len);
    WebPFree(buf);
    if (!copy)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    *out_p = copy;
    *len_p = len;
    return WEFT_OK;
}

weft_status_t weft_image_convert(const void *png, size_t png_len, enum weft_image_format fmt,
                                 int quality, void **out_p, size_t *out_len_p,
                                 struct weft_error *err)
{
    if (quality < 1 || quality > 100)
        return weft_error_refuse(err, WEFT_ERR_INVALID, "quality %d is outside 1..100",
                                 quality);
    if (fmt == WEFT_IMAGE_PNG) {
        void *copy = weft_malloc(png_len ? png_len : 1);
        if (!copy)
            return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
        memcpy(copy, png, png_len);
        *out_p = copy;
        *out_len_p = png_len;
        return WEFT_OK;
    }
    if (fmt != WEFT_IMAGE_JPEG && fmt != WEFT_IMAGE_WEBP)
        return weft_error_refuse(err, WEFT_ERR_INVALID, "unknown image format %d", (int)fmt);
    struct rgb img = {0};
    weft_status_t st = decode_png(png, png_len, &img, err);
    if (st != WEFT_OK)
        return st;
    st = fmt == WEFT_IMAGE_JPEG ? encode_jpeg(&img, quality, out_p, out_len_p, err)
                                : encode_webp(&img, quality, out_p, out_len_p, err);
    weft_free(img.px);
    weft_free(img.parameters);
    return st;
}
