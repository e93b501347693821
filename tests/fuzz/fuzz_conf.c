/* Fuzz target: the INI configuration parser. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "conf/conf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void quiet(enum weft_log_level l, const char *s, const char *m, void *a)
{
    (void)l, (void)s, (void)m, (void)a;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    weft_log_set_sink(quiet, NULL);
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    struct weft_conf conf;
    weft_conf_defaults(&conf);
    weft_conf_apply_string(&conf, text, "fuzz");
    free(text);
    return 0;
}
