/* Status codes shared by every weft module.
 *
 * Codes are grouped by what the caller can do about them (as UCX groups its ucs_status_t):
 *   0 / 1          success, or "started, call again / wait"
 *   -1 .. -99      the operation failed; the process, its device and its peers are fine
 *   -100 .. -199   a peer is lost or silent: re-plan without it
 *   -200 .. -299   the device is poisoned: the process must exit
 */
#ifndef WEFT_COMMON_STATUS_H
#define WEFT_COMMON_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum weft_status {
    WEFT_OK = 0,
    WEFT_INPROGRESS = 1,

    WEFT_ERR_INVALID = -1,     /* bad argument or request */
    WEFT_ERR_NOMEM = -2,       /* allocation failed */
    WEFT_ERR_IO = -3,          /* read/write/open failed */
    WEFT_ERR_FORMAT = -4,      /* malformed file or message */
    WEFT_ERR_CONFIG = -5,      /* bad configuration value */
    WEFT_ERR_UNSUPPORTED = -6, /* valid, but weft refuses or cannot do it */
    WEFT_ERR_NOT_FOUND = -7,   /* a named thing does not exist */
    WEFT_ERR_RANGE = -8,       /* a value or size outside its bounds */
    WEFT_ERR_CANCELLED = -9,   /* stopped on request */
    WEFT_ERR_PROTOCOL = -10,   /* a peer spoke out of turn */
    WEFT_ERR_AUTH = -11,       /* authentication failed */
    WEFT_ERR_BUSY = -12,       /* resource in use or queue full */
    WEFT_ERR_NO_DEVICE = -13,  /* no usable accelerator */
    WEFT_ERR_INTERNAL = -14,   /* a bug in weft */

    WEFT_ERR_PEER_LOST = -100,    /* a peer died or closed its endpoint */
    WEFT_ERR_TIMEOUT = -101,      /* a peer did not answer within the deadline */
    WEFT_ERR_UNREACHABLE = -102,  /* no route to the peer */

    WEFT_ERR_DEVICE = -200,       /* the device reported a sticky error */
} weft_status_t;

#define WEFT_STATUS_IS_PEER_LOST(s) ((s) <= -100 && (s) > -200)
#define WEFT_STATUS_IS_DEVICE_FATAL(s) ((s) <= -200 && (s) > -300)

const char *weft_status_str(weft_status_t status);

#ifdef __cplusplus
}
#endif

#endif
