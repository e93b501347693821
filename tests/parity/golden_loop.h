/* The 4-step FLUX.1 loop of a golden file (latents_init, prompt embeddings, FlowMatch Euler
 * with the model's default schedule, guidance 3.5), shared by the parallel parity tests. */
#ifndef WEFT_TESTS_PARITY_GOLDEN_LOOP_H
#define WEFT_TESTS_PARITY_GOLDEN_LOOP_H

#include "golden.h"
#include "model/scheduler.h"
#include "worker/denoise.h"

/* Runs the loop on a 16x16 grid from the golden file's latents_init; returns the final latents
 * (free()) and their relative L2 error against the file's latents_step_3. */
static inline float *golden_loop16(struct weft_flux *m, const char *golden_rel,
                                   double *vs_diffusers)
{
    struct golden g;
    golden_open(&g, golden_rel);
    int64_t n, npe;
    float *lat = golden_need(&g, "latents_init", &n), *pe = golden_need(&g, "prompt_embeds", &npe);
    float *pooled = golden_need(&g, "pooled_prompt_embeds", NULL);
    float *want = golden_need(&g, "latents_step_3", NULL);
    struct weft_sched_config sc;
    weft_sched_config_flux_default(&sc);
    static struct weft_schedule sched;
    CHECK_OK(weft_sched_plan(&sc, 4, 256, &sched, TERR));
    struct weft_denoise_params p = {.grid_h = 16, .grid_w = 16, .prompt_embeds = pe,
                                    .s_txt = npe / 32, .pooled = pooled, .guidance = 3.5f,
                                    .schedule = &sched};
    CHECK_OK(weft_denoise(m, &p, lat, TERR));
    *vs_diffusers = rel_l2(lat, want, n);
    free(pe), free(pooled), free(want);
    golden_close(&g);
    return lat;
}

#endif
