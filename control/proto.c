/* Control protocol framing and bootstrap helpers (see proto.h). */
#include "control/proto.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/sha256.h"
#include "common/utf8.h"

const char *weft_msg_name(unsigned type)
{
    static const char *const names[WEFT_MSG_TYPE_COUNT] = {
        "?",    "hello",  "assign", "assigned", "run",      "step",
        "image", "done", "cancel", "reset",    "shutdown", "ping"};
    return type < WEFT_MSG_TYPE_COUNT ? names[type] : "?";
}

weft_status_t weft_msg_pack(cJSON *json, const void *tail, size_t tail_len, void **buf_p,
                            size_t *len_p)
{
    cJSON_DeleteItemFromObjectCaseSensitive(json, "v");
    cJSON_AddNumberToObject(json, "v", WEFT_PROTO_VERSION);
    char *text = cJSON_PrintUnformatted(json);
    if (!text)
        return WEFT_ERR_NOMEM;
    size_t jl = strlen(text), len = 4 + jl + tail_len;
    uint8_t *buf = weft_malloc(len);
    if (!buf) {
        cJSON_free(text);
        return WEFT_ERR_NOMEM;
    }
    for (int i = 0; i < 4; i++)
        buf[i] = (uint8_t)(jl >> (8 * i));
    memcpy(buf + 4, text, jl);
    if (tail_len)
        memcpy(buf + 4 + jl, tail, tail_len);
    cJSON_free(text);
    *buf_p = buf;
    *len_p = len;
    return WEFT_OK;
}

weft_status_t weft_msg_unpack(const void *data, size_t len, const char *from, cJSON **json_p,
                              const void **tail_p, size_t *tail_len_p)
{
    const uint8_t *buf = data;
    if (len < 4) {
        WEFT_LOG_ERROR("control", "%s: a %zu-byte message is shorter than its header", from, len);
        return WEFT_ERR_PROTOCOL;
    }
    size_t jl = (size_t)buf[0] | (size_t)buf[1] << 8 | (size_t)buf[2] << 16 |
                (size_t)buf[3] << 24;
    if (jl > len - 4 || jl > WEFT_MSG_MAX_JSON) {
        WEFT_LOG_ERROR("control", "%s: JSON length %zu does not fit the %zu-byte message", from,
                       jl, len);
        return WEFT_ERR_PROTOCOL;
    }
    if (!weft_utf8_valid((const char *)buf + 4, jl, NULL)) {
        WEFT_LOG_ERROR("control", "%s: message is not valid UTF-8", from);
        return WEFT_ERR_PROTOCOL;
    }
    cJSON *json = cJSON_ParseWithLength((const char *)buf + 4, jl);
    const cJSON *v = json ? cJSON_GetObjectItemCaseSensitive(json, "v") : NULL;
    if (!cJSON_IsObject(json) || !cJSON_IsNumber(v) || v->valueint != WEFT_PROTO_VERSION) {
        WEFT_LOG_ERROR("control", "%s: not a version-%d message object%s", from,
                       WEFT_PROTO_VERSION, cJSON_IsNumber(v) ? " (other version)" : "");
        cJSON_Delete(json);
        return WEFT_ERR_PROTOCOL;
    }
    *json_p = json;
    *tail_p = buf + 4 + jl;
    *tail_len_p = len - 4 - jl;
    return WEFT_OK;
}

void weft_hex(const uint8_t *data, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[data[i] >> 4];
        out[2 * i + 1] = digits[data[i] & 15];
    }
    out[2 * n] = '\0';
}

static int nibble(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

int weft_unhex(const char *text, uint8_t *out, size_t n)
{
    if (!text || strlen(text) != 2 * n)
        return -1;
    for (size_t i = 0; i < n; i++) {
        int hi = nibble(text[2 * i]), lo = nibble(text[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

void weft_boot_proof(const char *secret, const char *label, const char *challenge_hex,
                     char out[65])
{
    char msg[160];
    int n = snprintf(msg, sizeof(msg), "%s:%s", label, challenge_hex);
    uint8_t mac[WEFT_SHA256_LEN];
    weft_hmac_sha256(secret, strlen(secret), msg, n > 0 ? (size_t)n : 0, mac);
    weft_hex(mac, sizeof(mac), out);
}

weft_status_t weft_boot_challenge(char out[65])
{
    uint8_t r[32];
    size_t got = 0;
    while (got < sizeof(r)) {
        ssize_t k = getrandom(r + got, sizeof(r) - got, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            WEFT_LOG_ERROR("control", "getrandom: %s", strerror(errno));
            return WEFT_ERR_IO;
        }
        got += (size_t)k;
    }
    weft_hex(r, sizeof(r), out);
    return WEFT_OK;
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *weft_base64(const void *data, size_t len)
{
    const uint8_t *p = data;
    char *out = weft_malloc((len + 2) / 3 * 4 + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < len ? (uint32_t)p[i + 1] << 8 : 0) |
                     (i + 2 < len ? p[i + 2] : 0);
        out[o++] = b64[v >> 18 & 63];
        out[o++] = b64[v >> 12 & 63];
        out[o++] = i + 1 < len ? b64[v >> 6 & 63] : '=';
        out[o++] = i + 2 < len ? b64[v & 63] : '=';
    }
    out[o] = '\0';
    return out;
}

void *weft_unbase64(const char *text, size_t *len_p)
{
    size_t n = strlen(text);
    if (n % 4)
        return NULL;
    uint8_t *out = weft_malloc(n / 4 * 3 + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        uint32_t v = 0;
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            const char *q = strchr(b64, text[i + k]);
            if (text[i + k] == '=' && i + 4 == n && k >= 2) {
                pad++;
                v <<= 6;
                continue;
            }
            if (!q || !text[i + k] || pad) {
                weft_free(out);
                return NULL;
            }
            v = v << 6 | (uint32_t)(q - b64);
        }
        out[o++] = (uint8_t)(v >> 16);
        if (pad < 2)
            out[o++] = (uint8_t)(v >> 8);
        if (pad < 1)
            out[o++] = (uint8_t)v;
    }
    *len_p = o;
    return out;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static weft_status_t io_all(int fd, void *buf, size_t n, int timeout_ms, int writing)
{
    double deadline = now_ms() + timeout_ms;
    char *p = buf;
    while (n) {
        int left = (int)(deadline - now_ms());
        if (left <= 0) {
            WEFT_LOG_ERROR("control", "bootstrap %s timed out after %d ms",
                           writing ? "send" : "receive", timeout_ms);
            return WEFT_ERR_TIMEOUT;
        }
        struct pollfd pfd = {fd, (short)(writing ? POLLOUT : POLLIN), 0};
        int r = poll(&pfd, 1, left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            continue;
        ssize_t k = writing ? write(fd, p, n) : read(fd, p, n);
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (k <= 0) {
            WEFT_LOG_ERROR("control", "bootstrap connection %s", k == 0 ? "closed by the peer"
                                                                        : strerror(errno));
            return WEFT_ERR_PEER_LOST;
        }
        p += k;
        n -= (size_t)k;
    }
    return WEFT_OK;
}

weft_status_t weft_boot_send(int fd, const cJSON *json, int timeout_ms)
{
    char *text = cJSON_PrintUnformatted(json);
    if (!text)
        return WEFT_ERR_NOMEM;
    size_t n = strlen(text);
    uint8_t hdr[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
    weft_status_t st = n > WEFT_BOOT_MAX ? WEFT_ERR_RANGE : io_all(fd, hdr, 4, timeout_ms, 1);
    if (st == WEFT_OK)
        st = io_all(fd, text, n, timeout_ms, 1);
    cJSON_free(text);
    return st;
}

weft_status_t weft_boot_recv(int fd, int timeout_ms, cJSON **json_p)
{
    uint8_t hdr[4];
    weft_status_t st = io_all(fd, hdr, 4, timeout_ms, 0);
    if (st != WEFT_OK)
        return st;
    size_t n = (size_t)hdr[0] | (size_t)hdr[1] << 8 | (size_t)hdr[2] << 16 | (size_t)hdr[3] << 24;
    if (n == 0 || n > WEFT_BOOT_MAX) {
        WEFT_LOG_ERROR("control", "bootstrap frame of %zu bytes (limit %u)", n, WEFT_BOOT_MAX);
        return WEFT_ERR_PROTOCOL;
    }
    char *buf = weft_malloc(n);
    if (!buf)
        return WEFT_ERR_NOMEM;
    st = io_all(fd, buf, n, timeout_ms, 0);
    cJSON *json = NULL;
    if (st == WEFT_OK && (!weft_utf8_valid(buf, n, NULL) ||
                          !cJSON_IsObject(json = cJSON_ParseWithLength(buf, n)))) {
        WEFT_LOG_ERROR("control", "bootstrap frame is not a JSON object");
        cJSON_Delete(json);
        st = WEFT_ERR_PROTOCOL;
    }
    weft_free(buf);
    if (st == WEFT_OK)
        *json_p = json;
    return st;
}
