/* The largest difference of one 8-bit channel between two PNG files of the same size (the
 * end-to-end tests compare images from different layouts: within one level is the bar). */
#ifndef WEFT_TESTS_E2E_PNG_DIFF_H
#define WEFT_TESTS_E2E_PNG_DIFF_H

#include <stdlib.h>

#include "test.h"
#include "worker/png.h"

static inline int png_max_diff(const char *a, const char *b)
{
    struct weft_png_image ia, ib;
    CHECK_OK(weft_png_read(a, &ia, TERR));
    CHECK_OK(weft_png_read(b, &ib, TERR));
    CHECK(ia.width == ib.width && ia.height == ib.height);
    int d = 0;
    for (size_t i = 0; i < (size_t)ia.width * ia.height * 3; i++) {
        int x = abs((int)ia.rgb[i] - (int)ib.rgb[i]);
        d = x > d ? x : d;
    }
    weft_png_image_cleanup(&ia);
    weft_png_image_cleanup(&ib);
    return d;
}

#endif
