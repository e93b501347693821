/* Image formats for delivery: a finished PNG (what every runner writes, with its text chunks)
 * converted once to JPEG (libjpeg-turbo) or WebP (libwebp) for a client that asked for them.
 *
 * Why a folder of its own: the conversion is format work, not math, so the coordinator (which
 * serves the images and may not use worker/) and anything else may call it; it depends on
 * common/ and the codec libraries only. The PNG encoder of the pipeline stays in worker/png.c.
 *
 * A lossy image is always made from the lossless PNG, never from another lossy one, so quality
 * is lost at most once; the coordinator caches each conversion beside the PNG. */
#ifndef WEFT_IMAGE_CONVERT_H
#define WEFT_IMAGE_CONVERT_H

#include <stddef.h>

#include "common/error.h"
#include "common/status.h"

enum weft_image_format {
    WEFT_IMAGE_PNG,
    WEFT_IMAGE_JPEG,
    WEFT_IMAGE_WEBP,
    WEFT_IMAGE_FORMAT_COUNT
};

#define WEFT_IMAGE_DEFAULT_QUALITY 90

/* "png", "jpeg" (or "jpg"), "webp"; -1 for anything else. */
int weft_image_format_parse(const char *name);
/* "png", "jpeg", "webp". */
const char *weft_image_format_name(enum weft_image_format f);
/* "image/png", "image/jpeg", "image/webp". */
const char *weft_image_format_mime(enum weft_image_format f);

/* Convert a PNG (8-bit RGB or anything libspng decodes) to fmt at quality 1..100 (lossy
 * formats; ignored for PNG, which is returned as a copy). The PNG's "parameters" text chunk, when
 * present, goes along as a JPEG comment (COM marker). *out_p is weft_malloc'd. err says why on
 * failure (a PNG that does not decode is WEFT_ERR_FORMAT). */
weft_status_t weft_image_convert(const void *png, size_t png_len, enum weft_image_format fmt,
                                 int quality, void **out_p, size_t *out_len_p,
                                 struct weft_error *err);

#endif
