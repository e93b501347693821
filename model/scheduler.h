/* FlowMatchEulerDiscreteScheduler as FluxPipeline drives it: the config, the sigma schedule with
 * dynamic shifting (mu from the image sequence length), and the Euler step. The arithmetic
 * follows Diffusers to the float: sigmas start as float64 linspace(1, 1/N, N) rounded to f32,
 * the exponential time shift runs in f32 with exp(mu) rounded to f32 (numpy's NEP 50
 * promotion), timesteps = sigmas * 1000 in f32; a shift_terminal stretches the shifted sigmas
 * so the last one is it (stretch_shift_to_terminal, in f32 as numpy does). */
#ifndef WEFT_MODEL_SCHEDULER_H
#define WEFT_MODEL_SCHEDULER_H

#include <cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

#define WEFT_SCHED_CLASS "FlowMatchEulerDiscreteScheduler"
#define WEFT_SCHED_MAX_STEPS 1000

enum weft_time_shift {
    WEFT_TIME_SHIFT_EXPONENTIAL,
    WEFT_TIME_SHIFT_LINEAR,
};

/* How the pipeline derives mu from the image (not a scheduler_config.json key: the pipeline's
 * own code). */
enum weft_mu_rule {
    WEFT_MU_CALCULATE_SHIFT, /* FluxPipeline: linear in the image sequence length */
    WEFT_MU_EMPIRICAL,       /* Flux2Pipeline's compute_empirical_mu: length and step count */
};

struct weft_sched_config {
    enum weft_mu_rule mu_rule; /* set by the pipeline; CALCULATE_SHIFT when parsed */
    int64_t num_train_timesteps;
    double shift;
    bool use_dynamic_shifting;
    double base_shift, max_shift;
    int64_t base_image_seq_len, max_image_seq_len;
    enum weft_time_shift time_shift_type;
    double shift_terminal; /* 0: none; else the shifted sigmas are stretched to end there */
};

/* FLUX.1-dev's scheduler_config.json values (used when a folder has no scheduler). */
void weft_sched_config_flux_default(struct weft_sched_config *out);
/* Parse scheduler_config.json; options weft does not implement (karras/exponential/beta
 * sigmas, shift_terminal, stochastic sampling, invert_sigmas) are refused, never ignored. */
weft_status_t weft_sched_config_parse(const cJSON *config, const char *origin,
                                      struct weft_sched_config *out, struct weft_error *err);

/* The scheduler of a pipeline folder (scheduler/scheduler_config.json), or FLUX.1-dev's
 * settings when the folder has none (a transformer folder alone). */
weft_status_t weft_sched_config_load(const char *pipeline_dir, struct weft_sched_config *out,
                                     struct weft_error *err);

struct weft_schedule {
    int steps;
    double mu;
    float sigmas[WEFT_SCHED_MAX_STEPS + 1]; /* steps + 1, the last is 0 */
    float timesteps[WEFT_SCHED_MAX_STEPS];
};

/* mu for this image and step count: FluxPipeline's calculate_shift (mu = m * image_seq_len +
 * b, from the config's base/max shift and lengths) or Flux2Pipeline's compute_empirical_mu
 * (two fitted lines in the length, interpolated linearly in the step count; above 4300
 * tokens the 200-step line alone), in f64 as Python computes them. */
double weft_sched_mu(const struct weft_sched_config *c, int64_t image_seq_len, int steps);
/* steps outside [1, WEFT_SCHED_MAX_STEPS] are refused in err (or logged with NULL err). */
weft_status_t weft_sched_plan(const struct weft_sched_config *c, int steps,
                              int64_t image_seq_len, struct weft_schedule *out,
                              struct weft_error *err);
/* latents += (sigma[i+1] - sigma[i]) * model_output, in f32 (n elements). */
void weft_sched_step(const struct weft_schedule *s, int i, float *latents,
                     const float *model_output, int64_t n);

#endif
