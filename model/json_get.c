/* Typed config.json reads. */
#include "model/json_get.h"

#include <math.h>

#include "common/error.h"

static const cJSON *get(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static bool as_int(const cJSON *v, int64_t *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (d != floor(d) || d < -9007199254740992.0 || d > 9007199254740992.0)
        return false;
    *out = (int64_t)d;
    return true;
}

weft_status_t weft_json_get_int(const cJSON *obj, const char *key, int64_t def, int64_t min,
                                int64_t max, const char *origin, int64_t *out_p,
                                struct weft_error *err)
{
    const cJSON *v = get(obj, key);
    int64_t x = def;
    if (v && !as_int(v, &x))
        return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                        "%s: \"%s\" is not an integer", origin, key);
    if (x < min || x > max)
        return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                        "%s: \"%s\" = %lld is outside [%lld, %lld]", origin, key,
                                        (long long)x, (long long)min, (long long)max);
    *out_p = x;
    return WEFT_OK;
}

weft_status_t weft_json_get_bool(const cJSON *obj, const char *key, bool def,
                                 const char *origin, bool *out_p, struct weft_error *err)
{
    const cJSON *v = get(obj, key);
    if (v && !cJSON_IsBool(v))
        return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                        "%s: \"%s\" is not true or false", origin, key);
    *out_p = v ? cJSON_IsTrue(v) : def;
    return WEFT_OK;
}

weft_status_t weft_json_get_double(const cJSON *obj, const char *key, double def, double min,
                                   double max, const char *origin, double *out_p,
                                   struct weft_error *err)
{
    const cJSON *v = get(obj, key);
    if (v && !cJSON_IsNumber(v))
        return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                        "%s: \"%s\" is not a number", origin, key);
    double x = v ? v->valuedouble : def;
    if (!(x >= min && x <= max))
        return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                        "%s: \"%s\" = %g is outside [%g, %g]", origin, key, x,
                                        min, max);
    *out_p = x;
    return WEFT_OK;
}

weft_status_t weft_json_get_int_array(const cJSON *obj, const char *key, const int64_t *def,
                                      int n_def, int max_n, int64_t min, int64_t max,
                                      const char *origin, int64_t *out, int *n_p,
                                      struct weft_error *err)
{
    const cJSON *v = get(obj, key);
    if (!v) {
        for (int i = 0; i < n_def; i++)
            out[i] = def[i];
        *n_p = n_def;
        return WEFT_OK;
    }
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > max_n || cJSON_GetArraySize(v) < 1)
        return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                        "%s: \"%s\" is not an array of 1 to %d integers", origin,
                                        key, max_n);
    int n = 0;
    for (const cJSON *c = v->child; c; c = c->next, n++) {
        int64_t x;
        if (!as_int(c, &x) || x < min || x > max)
            return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                            "%s: \"%s\"[%d] is not an integer in [%lld, %lld]",
                                            origin, key, n, (long long)min, (long long)max);
        out[n] = x;
    }
    *n_p = n;
    return WEFT_OK;
}

weft_status_t weft_json_get_string(const cJSON *obj, const char *key, const char *def,
                                   const char *origin, const char **out_p,
                                   struct weft_error *err)
{
    const cJSON *v = get(obj, key);
    if (v && !cJSON_IsString(v))
        return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                        "%s: \"%s\" is not a string", origin, key);
    *out_p = v ? v->valuestring : def;
    return WEFT_OK;
}
