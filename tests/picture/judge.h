/* The picture test's verdict on an image of the embedded default model: the drawing's palette and
 * geometry from tests/data/picture/prompts.json (written by tests/golden/train_default_model.py),
 * and judge(): at each named place (a square the largest shape fits in, jitter included) the
 * pixels that differ from the background colour are the shape, there are enough of them, and the
 * mean colour of the half of them farthest from the background (its core: the edges blend with
 * the background) is nearest (in RGB, among the named colours) the shape's; each image corner that no
 * shape's square touches is nearest the background colour. Used by the picture suite and by the
 * README's first command's test. */
#ifndef WEFT_TESTS_PICTURE_JUDGE_H
#define WEFT_TESTS_PICTURE_JUDGE_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "test.h"
#include "worker/png.h"

#define MAX_COLOURS 16
#define MAX_PROMPTS 256

struct shape_want {
    int colour;
    double cx, cy; /* centre, in units of the side */
};

struct want {
    char prompt[400];
    int bg, n;
    struct shape_want s[2];
};

static struct {
    int n;
    char name[MAX_COLOURS][16];
    double rgb[MAX_COLOURS][3];
} pal __attribute__((unused));
static double reach __attribute__((unused)); /* largest radius + jitter, units of the side */
static int pic_side __attribute__((unused)); /* the side the model draws at by default */
static cJSON *pic_places __attribute__((unused)); /* place name -> [x, y], units of the side */
static struct want wants[MAX_PROMPTS] __attribute__((unused));
static int n_wants __attribute__((unused));

static inline int colour_index(const char *name)
{
    for (int i = 0; i < pal.n; i++)
        if (strcmp(pal.name[i], name) == 0)
            return i;
    fprintf(stderr, "prompts.json: colour '%s' is not in the palette\n", name);
    exit(1);
}

/* A prompt set of tests/data/picture (name: prompts.json, the test's; validation.json, the
 * set for choosing between models) into pal, reach, pic_side, pic_places, wants. */
static inline void load_prompts(const char *name)
{
    char path[1200];
    snprintf(path, sizeof(path), "%s/tests/data/picture/%s", getenv("WEFT_SOURCE_ROOT"), name);
    FILE *f = fopen(path, "rb");
    CHECK(f);
    pal.n = n_wants = 0;
    cJSON_Delete(pic_places);
    pic_places = NULL;
    static char buf[1 << 20];
    size_t len = fread(buf, 1, sizeof(buf) - 1, f);
    CHECK(len < sizeof(buf) - 1); /* the whole file */
    CHECK(fclose(f) == 0 && len > 0);
    buf[len] = '\0';
    cJSON *j = cJSON_Parse(buf);
    CHECK(j);
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(j, "palette"))
    {
        CHECK(pal.n < MAX_COLOURS && cJSON_GetArraySize(c) == 3);
        snprintf(pal.name[pal.n], sizeof(pal.name[0]), "%s", c->string);
        for (int k = 0; k < 3; k++)
            pal.rgb[pal.n][k] = cJSON_GetArrayItem(c, k)->valuedouble;
        pal.n++;
    }
    const cJSON *places = cJSON_GetObjectItemCaseSensitive(j, "places");
    pic_side = (int)cJSON_GetObjectItemCaseSensitive(j, "size")->valuedouble;
    reach = cJSON_GetObjectItemCaseSensitive(j, "max_radius")->valuedouble +
            cJSON_GetObjectItemCaseSensitive(j, "jitter")->valuedouble;
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(j, "prompts"))
    {
        CHECK(n_wants < MAX_PROMPTS);
        struct want *w = &wants[n_wants++];
        snprintf(w->prompt, sizeof(w->prompt), "%s",
                 cJSON_GetObjectItemCaseSensitive(p, "prompt")->valuestring);
        w->bg = colour_index(cJSON_GetObjectItemCaseSensitive(p, "background")->valuestring);
        const cJSON *s;
        cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(p, "shapes"))
        {
            CHECK(w->n < 2);
            struct shape_want *sw = &w->s[w->n++];
            sw->colour = colour_index(cJSON_GetObjectItemCaseSensitive(s, "colour")->valuestring);
            const cJSON *at = cJSON_GetObjectItemCaseSensitive(
                places, cJSON_GetObjectItemCaseSensitive(s, "place")->valuestring);
            CHECK(cJSON_GetArraySize(at) == 2);
            sw->cx = cJSON_GetArrayItem(at, 0)->valuedouble;
            sw->cy = cJSON_GetArrayItem(at, 1)->valuedouble;
        }
    }
    pic_places = cJSON_DetachItemViaPointer(j, (cJSON *)places);
    cJSON_Delete(j);
    CHECK(pal.n >= 8 && n_wants >= 40 && pic_side > 0);
}

static inline double dist2(const double *a, const double *b)
{
    double d = 0;
    for (int k = 0; k < 3; k++)
        d += (a[k] - b[k]) * (a[k] - b[k]);
    return d;
}

static inline int nearest(const double *c)
{
    int best = 0;
    for (int i = 1; i < pal.n; i++)
        if (dist2(c, pal.rgb[i]) < dist2(c, pal.rgb[best]))
            best = i;
    return best;
}

struct box {
    int x0, y0, x1, y1; /* [x0, x1) x [y0, y1) */
};

static inline struct box shape_box(const struct shape_want *s, int w, int h)
{
    struct box b = {(int)floor((s->cx - reach) * w), (int)floor((s->cy - reach) * h),
                    (int)ceil((s->cx + reach) * w), (int)ceil((s->cy + reach) * h)};
    b.x0 = b.x0 < 0 ? 0 : b.x0, b.y0 = b.y0 < 0 ? 0 : b.y0;
    b.x1 = b.x1 > w ? w : b.x1, b.y1 = b.y1 > h ? h : b.y1;
    return b;
}

static inline int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static inline bool overlap(struct box a, struct box b)
{
    return a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1;
}

/* The verdict on one picture; why says what is wrong when it fails. */
/* The verdict on one picture: JUDGE_OK, JUDGE_BACKGROUND (a free corner is not the
 * background's colour) or JUDGE_SHAPE (a shape is missing or of another colour); why says what
 * is wrong. The background is judged first, so a wrong shape does not hide a wrong background. */
enum { JUDGE_OK, JUDGE_BACKGROUND, JUDGE_SHAPE };

static inline int judge_why(const struct weft_png_image *im, const struct want *w, char *why,
                            size_t len)
{
    const int W = (int)im->width, H = (int)im->height;
    const double *bg = pal.rgb[w->bg];
    struct box boxes[2];
    for (int k = 0; k < w->n; k++)
        boxes[k] = shape_box(&w->s[k], W, H);
    const int c = W / 10;
    const struct box corners[4] = {
        {0, 0, c, c}, {W - c, 0, W, c}, {0, H - c, c, H}, {W - c, H - c, W, H}};
    for (int q = 0; q < 4; q++) {
        bool near_shape = false;
        for (int k = 0; k < w->n; k++)
            near_shape = near_shape || overlap(corners[q], boxes[k]);
        if (near_shape)
            continue;
        double sum[3] = {0, 0, 0};
        for (int y = corners[q].y0; y < corners[q].y1; y++)
            for (int x = corners[q].x0; x < corners[q].x1; x++)
                for (int k = 0; k < 3; k++)
                    sum[k] += im->rgb[((size_t)y * W + x) * 3 + k];
        for (int k = 0; k < 3; k++)
            sum[k] /= (double)c * c;
        const int got = nearest(sum);
        if (got != w->bg) {
            snprintf(why, len, "corner %d: (%.0f, %.0f, %.0f) is %s, not the background %s", q,
                     sum[0], sum[1], sum[2], pal.name[got], pal.name[w->bg]);
            return JUDGE_BACKGROUND;
        }
    }
    for (int k = 0; k < w->n; k++) {
        const struct box b = boxes[k];
        /* the shape: pixels that differ from the background; its colour: the mean of the half
         * of them farthest from it (the edges, blended with the background, are the rest) */
        static double d[1 << 16];
        int fg = 0;
        for (int y = b.y0; y < b.y1; y++)
            for (int x = b.x0; x < b.x1; x++) {
                const uint8_t *p = im->rgb + ((size_t)y * W + x) * 3;
                const double col[3] = {p[0], p[1], p[2]};
                if (dist2(col, bg) >= 60.0 * 60.0 && fg < (int)(sizeof(d) / sizeof(d[0])))
                    d[fg++] = dist2(col, bg);
            }
        /* the smallest drawn shape (a small star) covers about 1.3 r^2 = 200 pixels at 128 */
        const int min_fg = (int)(0.01 * W * H / 2.0);
        if (fg < min_fg) {
            snprintf(why, len, "shape %d: %d pixels differ from the background (at least %d)",
                     k, fg, min_fg);
            return JUDGE_SHAPE;
        }
        qsort(d, (size_t)fg, sizeof(d[0]), cmp_double);
        const double cut = d[fg / 2];
        double sum[3] = {0, 0, 0};
        int core = 0;
        for (int y = b.y0; y < b.y1; y++)
            for (int x = b.x0; x < b.x1; x++) {
                const uint8_t *p = im->rgb + ((size_t)y * W + x) * 3;
                const double col[3] = {p[0], p[1], p[2]};
                if (dist2(col, bg) < 60.0 * 60.0 || dist2(col, bg) < cut)
                    continue;
                core++;
                for (int q = 0; q < 3; q++)
                    sum[q] += col[q];
            }
        for (int q = 0; q < 3; q++)
            sum[q] /= core;
        const int got = nearest(sum);
        if (got != w->s[k].colour) {
            snprintf(why, len, "shape %d: mean colour (%.0f, %.0f, %.0f) is %s, not %s", k,
                     sum[0], sum[1], sum[2], pal.name[got], pal.name[w->s[k].colour]);
            return JUDGE_SHAPE;
        }
    }
    return JUDGE_OK;
}

static inline bool judge(const struct weft_png_image *im, const struct want *w, char *why,
                         size_t len)
{
    return judge_why(im, w, why, len) == JUDGE_OK;
}

/* What a one-shape caption in the training's phrasings asks for: the background is the colour
 * named before "background", the shape's the other one; the place is the longest place name in
 * the text ("top left" before "left"), else the center. false when the text names no such pair. */
static inline bool want_of_caption(const char *text, struct want *w)
{
    *w = (struct want){.bg = -1, .n = 1};
    w->s[0].colour = -1;
    snprintf(w->prompt, sizeof(w->prompt), "%s", text);
    for (int i = 0; i < pal.n; i++) {
        char with_bg[40];
        snprintf(with_bg, sizeof(with_bg), "%s background", pal.name[i]);
        if (strstr(text, with_bg))
            w->bg = i;
    }
    for (int i = 0; i < pal.n; i++)
        if (i != w->bg && strstr(text, pal.name[i]))
            w->s[0].colour = i;
    size_t best = 0;
    const cJSON *at = cJSON_GetObjectItemCaseSensitive(pic_places, "center");
    const cJSON *p;
    cJSON_ArrayForEach(p, pic_places)
    {
        if (strstr(text, p->string) && strlen(p->string) > best) {
            best = strlen(p->string);
            at = p;
        }
    }
    if (w->bg < 0 || w->s[0].colour < 0 || !at)
        return false;
    w->s[0].cx = cJSON_GetArrayItem(at, 0)->valuedouble;
    w->s[0].cy = cJSON_GetArrayItem(at, 1)->valuedouble;
    return true;
}

#endif
