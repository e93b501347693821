/* Text for status codes. */
#include "common/status.h"

const char *weft_status_str(weft_status_t status)
{
    switch (status) {
    case WEFT_OK: return "success";
    case WEFT_INPROGRESS: return "in progress";
    case WEFT_ERR_INVALID: return "invalid argument";
    case WEFT_ERR_NOMEM: return "out of memory";
    case WEFT_ERR_IO: return "input/output error";
    case WEFT_ERR_FORMAT: return "malformed data";
    case WEFT_ERR_CONFIG: return "configuration error";
    case WEFT_ERR_UNSUPPORTED: return "not supported";
    case WEFT_ERR_NOT_FOUND: return "not found";
    case WEFT_ERR_RANGE: return "out of range";
    case WEFT_ERR_CANCELLED: return "cancelled";
    case WEFT_ERR_PROTOCOL: return "protocol error";
    case WEFT_ERR_AUTH: return "authentication failed";
    case WEFT_ERR_BUSY: return "busy";
    case WEFT_ERR_NO_DEVICE: return "no device";
    case WEFT_ERR_INTERNAL: return "internal error";
    case WEFT_ERR_PEER_LOST: return "peer lost";
    case WEFT_ERR_TIMEOUT: return "timed out";
    case WEFT_ERR_UNREACHABLE: return "peer unreachable";
    case WEFT_ERR_DEVICE: return "device error";
    }
    return "unknown status";
}
