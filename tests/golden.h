/* Test helper: golden safetensors files (written by the scripts in tests/golden/ from Diffusers) read
 * whole into f32 arrays, and the relative L2 error used by every parity check. */
#ifndef WEFT_TESTS_GOLDEN_H
#define WEFT_TESTS_GOLDEN_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/safetensors.h"
#include "test.h"

struct golden {
    struct weft_st_file *f;
};

static inline void golden_open(struct golden *g, const char *rel)
{
    char path[2048];
    snprintf(path, sizeof(path), "%s/%s", getenv("WEFT_SOURCE_ROOT"), rel);
    CHECK_OK(weft_st_open(path, &g->f, TERR));
}

/* The tensor as a fresh f32 array (caller frees); its element count in *n_p when not NULL.
 * NULL when absent. */
static inline float *golden_get(struct golden *g, const char *name, int64_t *n_p)
{
    const struct weft_st_tensor *t = weft_st_find(g->f, name);
    if (!t)
        return NULL;
    float *p = malloc((size_t)t->numel * sizeof(float) + 4);
    CHECK(p);
    CHECK_OK(weft_st_read(g->f, t, p, WEFT_DTYPE_F32, TERR));
    if (n_p)
        *n_p = t->numel;
    return p;
}

static inline float *golden_need(struct golden *g, const char *name, int64_t *n_p)
{
    float *p = golden_get(g, name, n_p);
    if (!p) {
        fprintf(stderr, "golden file %s lacks tensor '%s'\n", weft_st_path(g->f), name);
        exit(1);
    }
    return p;
}

static inline void golden_close(struct golden *g)
{
    weft_st_close(g->f);
}

/* ||a - b|| / ||b|| */
static inline double rel_l2(const float *a, const float *b, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return sqrt(num / (den > 0 ? den : 1e-300));
}

#endif
