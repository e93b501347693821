/* Typed, bounded reads of config.json values with errors that name the file and the key. A bad
 * value is the file's fault: recorded in err without logging above DEBUG, or logged at ERROR
 * with NULL err. */
#ifndef WEFT_MODEL_JSON_GET_H
#define WEFT_MODEL_JSON_GET_H

#include <cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

/* Absent or null keys take the default; present keys must be integers in [min, max]. */
weft_status_t weft_json_get_int(const cJSON *obj, const char *key, int64_t def, int64_t min,
                                int64_t max, const char *origin, int64_t *out_p,
                                struct weft_error *err);
weft_status_t weft_json_get_bool(const cJSON *obj, const char *key, bool def,
                                 const char *origin, bool *out_p, struct weft_error *err);
weft_status_t weft_json_get_double(const cJSON *obj, const char *key, double def, double min,
                                   double max, const char *origin, double *out_p,
                                   struct weft_error *err);
/* Array of at most max_n integers in [min, max]; absent: the default array. */
weft_status_t weft_json_get_int_array(const cJSON *obj, const char *key, const int64_t *def,
                                      int n_def, int max_n, int64_t min, int64_t max,
                                      const char *origin, int64_t *out, int *n_p,
                                      struct weft_error *err);
/* String; absent: def. The pointer stays valid as long as obj. */
weft_status_t weft_json_get_string(const cJSON *obj, const char *key, const char *def,
                                   const char *origin, const char **out_p,
                                   struct weft_error *err);

#endif
