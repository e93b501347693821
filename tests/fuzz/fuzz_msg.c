/* Fuzz target: the control messages' decoder (control/msg.c), what a worker or the
 * coordinator makes of any payload a peer can send. The first byte picks the message type;
 * the rest is the payload. A decoded message must re-encode (the encoder applies the same
 * checks) and decode again to the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "control/msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void quiet(enum weft_log_level l, const char *s, const char *m, void *a)
{
    (void)l, (void)s, (void)m, (void)a;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    weft_log_set_sink(quiet, NULL);
    if (size == 0)
        return 0;
    const unsigned type = data[0] % (WEFT_MSG_TYPE_COUNT + 1);
    union weft_msg *m = malloc(sizeof(*m)), *again = malloc(sizeof(*again));
    if (!m || !again)
        abort();
    struct weft_error err = WEFT_ERROR_INIT;
    if (weft_msg_decode(type, data + 1, size - 1, m, &err) == WEFT_OK) {
        void *buf, *buf2;
        size_t len, len2;
        if (weft_msg_encode(type, m, &buf, &len, &err) != WEFT_OK)
            abort(); /* what one side accepts, the other could have sent */
        if (weft_msg_decode(type, buf, len, again, &err) != WEFT_OK ||
            weft_msg_encode(type, again, &buf2, &len2, &err) != WEFT_OK || len != len2 ||
            memcmp(buf, buf2, len) != 0)
            abort();
        weft_free(buf);
        weft_free(buf2);
        weft_msg_cleanup(type, again);
        weft_msg_cleanup(type, m);
    }
    free(m);
    free(again);
    return 0;
}
