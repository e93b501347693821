/* PNG files through libspng: 8-bit RGB images with text chunks (the generation parameters),
 * written beside the target and renamed into place so a reader never sees half a file, and
 * read back with bounds on the size a file may claim. */
#ifndef WEFT_WORKER_PNG_H
#define WEFT_WORKER_PNG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define WEFT_PNG_MAX_EDGE 65535 /* pixels per edge, either way */

struct weft_png_text {
    const char *key;   /* 1-79 printable ASCII characters, no leading/trailing space */
    const char *value; /* ASCII goes in a tEXt chunk; anything else UTF-8 in an iTXt chunk;
                        * an empty value writes no chunk (libspng takes none): read back, the
                        * key is absent */
};

/* rgb: height rows of width x 3 bytes. A size, a key or a write that fails is logged once and
 * recorded in err. */
weft_status_t weft_png_write(const char *path, const uint8_t *rgb, int64_t width,
                             int64_t height, size_t n_text, const struct weft_png_text *text,
                             struct weft_error *err);

/* The same PNG in memory (a worker sends it to the coordinator): *png_p is the caller's to
 * free() (libspng's allocator). */
weft_status_t weft_png_encode(const uint8_t *rgb, int64_t width, int64_t height, size_t n_text,
                              const struct weft_png_text *text, void **png_p, size_t *len_p,
                              struct weft_error *err);

/* The generation parameters every weft image carries, one vocabulary for every path (weft
 * generate, the local runner, the workers) and for the latents' safetensors metadata:
 *   Software          "weft <version>"
 *   weft.prompt       the prompt's name (a prompts/ entry or file), or its text
 *   weft.seed         the noise seed ("none" when the start latents were given)
 *   weft.steps, weft.guidance, weft.size ("WxH"), weft.model (the folder)
 *   weft.layout       the parallel layout that made it ("dp 1 x ring 1 x ulysses 1 x tp 2")
 *   weft.job, weft.image, weft.prompt_index   within a job: its id, the image's index, its
 *                     prompt's index (absent outside a job)
 *   parameters        the same in the form AUTOMATIC1111's web UI writes and the tools of its
 *                     era read (image viewers, Civitai, ComfyUI's loaders): the prompt on the
 *                     first line, then "Steps: 4, Sampler: Euler, Schedule type: Simple, CFG
 *                     scale: 1, Distilled CFG Scale: 3.5, Seed: 7, Size: 256x256, Model: name,
 *                     Version: weft 0.1.0" (Forge's names for FLUX's embedded guidance), and
 *                     Layout and Job when known */
struct weft_png_meta {
    const char *prompt, *model, *layout, *job; /* NULL: omitted */
    bool has_seed;
    uint64_t seed;
    int64_t steps;
    double guidance;
    int64_t width, height;
    int64_t image, prompt_index; /* -1: omitted */
    const char *negative_prompt; /* true CFG: NULL omitted (and true_cfg_scale with it) */
    double true_cfg_scale;
};

#define WEFT_PNG_META_MAX 15

/* The pairs of meta into text (values point into store, which must outlive them); returns
 * their number. */
struct weft_png_meta_store {
    char software[48], seed[24], steps[24], guidance[32], size[48], image[24], prompt[24];
    char cfg[32];
    char parameters[2048];
};
size_t weft_png_meta_text(const struct weft_png_meta *meta, struct weft_png_meta_store *store,
                          struct weft_png_text text[WEFT_PNG_META_MAX]);

struct weft_png_image {
    uint8_t *rgb; /* [height, width, 3] (weft_free) */
    uint32_t width, height;
    size_t n_text;
    struct weft_png_text *text; /* keys and values owned by the image */
};

/* Read any PNG libspng decodes, converted to 8-bit RGB; tEXt/iTXt/zTXt chunks in text. A file
 * that cannot be opened or decoded is recorded in err (logged at ERROR with NULL err). */
weft_status_t weft_png_read(const char *path, struct weft_png_image *img,
                            struct weft_error *err);
void weft_png_image_cleanup(struct weft_png_image *img);
/* The value of a text key, NULL when absent. */
const char *weft_png_image_text(const struct weft_png_image *img, const char *key);

#endif
