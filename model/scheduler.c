/* FlowMatch Euler schedule and step (see scheduler.h for the exact float semantics). */
#include "model/scheduler.h"

#include <math.h>
#include <string.h>

#include <stdio.h>
#include <sys/stat.h>

#include "common/log.h"
#include "model/checkpoint.h"
#include "model/json_get.h"

void weft_sched_config_flux_default(struct weft_sched_config *out)
{
    *out = (struct weft_sched_config){
        .num_train_timesteps = 1000,
        .shift = 3.0,
        .use_dynamic_shifting = true,
        .base_shift = 0.5,
        .max_shift = 1.15,
        .base_image_seq_len = 256,
        .max_image_seq_len = 4096,
        .time_shift_type = WEFT_TIME_SHIFT_EXPONENTIAL,
    };
}

weft_status_t weft_sched_config_parse(const cJSON *cfg, const char *origin,
                                      struct weft_sched_config *out, struct weft_error *err)
{
    struct weft_sched_config c = {.mu_rule = WEFT_MU_CALCULATE_SHIFT};
    const char *cls, *shift_type;
    weft_status_t st;
    if ((st = weft_json_get_string(cfg, "_class_name", WEFT_SCHED_CLASS, origin, &cls, err)))
        return st;
    if (strcmp(cls, WEFT_SCHED_CLASS) != 0)
        return weft_error_refuse_or_log(err, WEFT_ERR_UNSUPPORTED, "model",
                                        "%s: scheduler class '%s' is not supported (only %s)",
                                        origin, cls, WEFT_SCHED_CLASS);
    /* Defaults are the class defaults, as Diffusers applies them to absent keys. */
    if ((st = weft_json_get_int(cfg, "num_train_timesteps", 1000, 1, 1000000, origin,
                                &c.num_train_timesteps, err)) ||
        (st = weft_json_get_double(cfg, "shift", 1.0, 1e-6, 1e6, origin, &c.shift, err)) ||
        (st = weft_json_get_bool(cfg, "use_dynamic_shifting", false, origin,
                                 &c.use_dynamic_shifting, err)) ||
        (st = weft_json_get_double(cfg, "base_shift", 0.5, -100, 100, origin, &c.base_shift,
                                   err)) ||
        (st = weft_json_get_double(cfg, "max_shift", 1.15, -100, 100, origin, &c.max_shift, err)) ||
        (st = weft_json_get_int(cfg, "base_image_seq_len", 256, 1, 1 << 30, origin,
                                &c.base_image_seq_len, err)) ||
        (st = weft_json_get_int(cfg, "max_image_seq_len", 4096, 1, 1 << 30, origin,
                                &c.max_image_seq_len, err)) ||
        (st = weft_json_get_string(cfg, "time_shift_type", "exponential", origin, &shift_type,
                                   err)))
        return st;
    if (c.max_image_seq_len == c.base_image_seq_len)
        return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                        "%s: max_image_seq_len equals base_image_seq_len", origin);
    if (strcmp(shift_type, "exponential") == 0) {
        c.time_shift_type = WEFT_TIME_SHIFT_EXPONENTIAL;
    } else if (strcmp(shift_type, "linear") == 0) {
        c.time_shift_type = WEFT_TIME_SHIFT_LINEAR;
    } else {
        return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                        "%s: time_shift_type '%s' is not exponential or linear",
                                        origin, shift_type);
    }
    static const char *const refused[] = {"use_karras_sigmas", "use_exponential_sigmas",
                                          "use_beta_sigmas", "stochastic_sampling",
                                          "invert_sigmas"};
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        bool on;
        if ((st = weft_json_get_bool(cfg, refused[i], false, origin, &on, err)))
            return st;
        if (on)
            return weft_error_refuse_or_log(err, WEFT_ERR_UNSUPPORTED, "model",
                                            "%s: %s is not supported", origin, refused[i]);
    }
    /* null reads as 0: none */
    if ((st = weft_json_get_double(cfg, "shift_terminal", 0.0, 0.0, 0.999, origin,
                                   &c.shift_terminal, err)))
        return st;
    *out = c;
    return WEFT_OK;
}

weft_status_t weft_sched_config_load(const char *pipeline_dir, struct weft_sched_config *out,
                                     struct weft_error *err)
{
    char path[2048];
    snprintf(path, sizeof(path), "%s/scheduler/scheduler_config.json", pipeline_dir);
    struct stat sb;
    if (stat(path, &sb) != 0) {
        weft_sched_config_flux_default(out);
        return WEFT_OK;
    }
    cJSON *json;
    weft_status_t st = weft_json_read_file(path, 1 << 20, &json, err);
    if (st != WEFT_OK)
        return st;
    st = weft_sched_config_parse(json, path, out, err);
    cJSON_Delete(json);
    return st;
}

double weft_sched_mu(const struct weft_sched_config *c, int64_t image_seq_len, int steps)
{
    if (c->mu_rule == WEFT_MU_EMPIRICAL) {
        const double a1 = 8.73809524e-05, b1 = 1.89833333, a2 = 0.00016927, b2 = 0.45666666;
        const double m200 = a2 * (double)image_seq_len + b2;
        if (image_seq_len > 4300)
            return m200;
        const double m10 = a1 * (double)image_seq_len + b1;
        const double a = (m200 - m10) / 190.0, b = m200 - 200.0 * a;
        return a * (double)steps + b;
    }
    double m = (c->max_shift - c->base_shift) /
               (double)(c->max_image_seq_len - c->base_image_seq_len);
    double b = c->base_shift - m * (double)c->base_image_seq_len;
    return (double)image_seq_len * m + b;
}

weft_status_t weft_sched_plan(const struct weft_sched_config *c, int steps, int64_t image_seq_len,
                              struct weft_schedule *out, struct weft_error *err)
{
    if (steps < 1 || steps > WEFT_SCHED_MAX_STEPS)
        return weft_error_refuse_or_log(err, WEFT_ERR_RANGE, "model",
                                        "steps = %d is outside [1, %d]", steps,
                                        WEFT_SCHED_MAX_STEPS);
    out->steps = steps;
    out->mu = weft_sched_mu(c, image_seq_len, steps);
    /* numpy linspace(1.0, 1/N, N): start + i * step, the last exactly the stop */
    double start = 1.0, stop = 1.0 / steps;
    double step = steps > 1 ? (stop - start) / (steps - 1) : 0.0;
    const float e = (float)exp(out->mu), mu = (float)out->mu;
    const float shift = (float)c->shift;
    for (int i = 0; i < steps; i++) {
        double lin = (steps > 1 && i == steps - 1) ? stop : (double)i * step + start;
        float s = (float)lin;
        if (c->use_dynamic_shifting) {
            float d = 1.0f / s - 1.0f; /* (1/t - 1) ** 1.0 */
            s = c->time_shift_type == WEFT_TIME_SHIFT_EXPONENTIAL ? e / (e + d) : mu / (mu + d);
        } else {
            s = shift * s / (1.0f + (float)(c->shift - 1.0) * s);
        }
        out->sigmas[i] = s;
    }
    if (c->shift_terminal != 0.0) { /* stretch_shift_to_terminal, in f32 */
        const float scale = (1.0f - out->sigmas[steps - 1]) / (float)(1.0 - c->shift_terminal);
        for (int i = 0; i < steps; i++)
            out->sigmas[i] = 1.0f - (1.0f - out->sigmas[i]) / scale;
    }
    for (int i = 0; i < steps; i++)
        out->timesteps[i] = out->sigmas[i] * (float)c->num_train_timesteps;
    out->sigmas[steps] = 0.0f;
    return WEFT_OK;
}

void weft_sched_step(const struct weft_schedule *s, int i, float *latents,
                     const float *model_output, int64_t n)
{
    const float dt = s->sigmas[i + 1] - s->sigmas[i];
    for (int64_t k = 0; k < n; k++)
        latents[k] = latents[k] + dt * model_output[k];
}
