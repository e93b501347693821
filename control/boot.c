/* The bootstrap frames and their proofs (see boot.h). */
#include "control/boot.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/base64.h"
#include "common/num.h"
#include "common/sha256.h"
#include "common/utf8.h"

static void hex(const uint8_t *data, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[data[i] >> 4];
        out[2 * i + 1] = digits[data[i] & 15];
    }
    out[2 * n] = '\0';
}

/* 64 lowercase hex digits. */
static bool is_hex32(const char *s)
{
    return strlen(s) == 64 && strspn(s, "0123456789abcdef") == 64;
}

void weft_boot_proof(const char *secret, const char *label, const char *challenge_hex,
                     char out[WEFT_BOOT_HEX])
{
    char msg[160];
    int n = snprintf(msg, sizeof(msg), "%s:%s", label, challenge_hex);
    uint8_t mac[WEFT_SHA256_LEN];
    weft_hmac_sha256(secret, strlen(secret), msg, n > 0 ? (size_t)n : 0, mac);
    hex(mac, sizeof(mac), out);
}

bool weft_boot_proof_ok(const char *got, const char *want)
{
    return strlen(got) == 64 && weft_ct_compare(got, want, 64) == 0;
}

weft_status_t weft_boot_new_challenge(char out[WEFT_BOOT_HEX])
{
    uint8_t r[32];
    size_t got = 0;
    while (got < sizeof(r)) {
        ssize_t k = getrandom(r + got, sizeof(r) - got, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return WEFT_ERR_IO;
        got += (size_t)k;
    }
    hex(r, sizeof(r), out);
    return WEFT_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Frames                                                                                    */

static cJSON *frame_new(void)
{
    cJSON *m = cJSON_CreateObject();
    if (m && !cJSON_AddNumberToObject(m, "weft", WEFT_BOOT_VERSION)) {
        cJSON_Delete(m);
        return NULL;
    }
    return m;
}

static char *frame_text(cJSON *m, bool ok)
{
    char *text = ok && m ? cJSON_PrintUnformatted(m) : NULL;
    cJSON_Delete(m);
    if (!text)
        return NULL;
    char *out = weft_strdup(text);
    cJSON_free(text);
    return out;
}

char *weft_boot_challenge_encode(const struct weft_boot_challenge *c)
{
    cJSON *m = frame_new();
    return frame_text(m, m && cJSON_AddStringToObject(m, "challenge", c->challenge));
}

static bool add_b64(cJSON *m, const char *key, const void *data, size_t len)
{
    char *b = weft_base64_encode(data, len);
    bool ok = b && cJSON_AddStringToObject(m, key, b);
    weft_free(b);
    return ok;
}

char *weft_boot_hello_encode(const struct weft_boot_hello *h)
{
    cJSON *m = frame_new();
    cJSON *inv = h->inventory ? cJSON_Duplicate(h->inventory, 1) : cJSON_CreateObject();
    bool ok = m && inv && cJSON_AddStringToObject(m, "response", h->response) &&
              cJSON_AddStringToObject(m, "challenge", h->challenge) &&
              add_b64(inv, "link", h->link, h->link_len);
    if (ok && cJSON_AddItemToObject(m, "hello", inv))
        inv = NULL;
    else
        ok = false;
    cJSON_Delete(inv);
    return frame_text(m, ok);
}

char *weft_boot_accept_encode(const struct weft_boot_accept *a)
{
    cJSON *m = frame_new();
    bool ok = m && cJSON_AddBoolToObject(m, "accepted", a->accepted);
    if (ok && a->accepted)
        ok = cJSON_AddStringToObject(m, "id", a->id) &&
             cJSON_AddStringToObject(m, "response", a->response) &&
             add_b64(m, "link", a->link, a->link_len);
    else if (ok)
        ok = cJSON_AddStringToObject(m, "error", a->error) != NULL;
    return frame_text(m, ok);
}

static weft_status_t malformed(struct weft_error *err, const char *frame, const char *field)
{
    return weft_error_refuse(err, WEFT_ERR_PROTOCOL, "bootstrap %s frame: %s is missing or "
                                                     "malformed", frame, field);
}

static weft_status_t check_version(const cJSON *j, const char *frame, struct weft_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "weft");
    if (!cJSON_IsNumber(v) || v->valuedouble != WEFT_BOOT_VERSION)
        return weft_error_refuse(err, WEFT_ERR_PROTOCOL,
                                 "bootstrap %s frame: not version %d of the protocol", frame,
                                 WEFT_BOOT_VERSION);
    return WEFT_OK;
}

static const char *get_str(const cJSON *j, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static weft_status_t get_b64(const cJSON *j, const char *key, void **data_p, size_t *len_p)
{
    const char *s = get_str(j, key);
    if (!s)
        return WEFT_ERR_PROTOCOL;
    weft_status_t st = weft_base64_decode(s, strlen(s), data_p, len_p);
    if (st == WEFT_OK && *len_p == 0) {
        weft_free(*data_p);
        st = WEFT_ERR_PROTOCOL;
    }
    return st == WEFT_ERR_FORMAT ? WEFT_ERR_PROTOCOL : st;
}

weft_status_t weft_boot_challenge_decode(const cJSON *json, struct weft_boot_challenge *m,
                                         struct weft_error *err)
{
    weft_status_t st = check_version(json, "challenge", err);
    const char *c = get_str(json, "challenge");
    if (st == WEFT_OK && (!c || !is_hex32(c)))
        st = malformed(err, "challenge", "challenge");
    if (st == WEFT_OK)
        snprintf(m->challenge, sizeof(m->challenge), "%s", c);
    return st;
}

weft_status_t weft_boot_hello_decode(const cJSON *json, struct weft_boot_hello *m,
                                     struct weft_error *err)
{
    weft_status_t st = check_version(json, "hello", err);
    if (st != WEFT_OK)
        return st;
    const char *resp = get_str(json, "response"), *ch = get_str(json, "challenge");
    const cJSON *inv = cJSON_GetObjectItemCaseSensitive(json, "hello");
    if (!resp || !is_hex32(resp))
        return malformed(err, "hello", "response");
    if (!ch || !is_hex32(ch))
        return malformed(err, "hello", "challenge");
    if (!cJSON_IsObject(inv))
        return malformed(err, "hello", "hello");
    struct weft_boot_hello h = {0};
    if ((st = get_b64(inv, "link", &h.link, &h.link_len)) != WEFT_OK)
        return st == WEFT_ERR_NOMEM ? weft_error_refuse(err, st, "out of memory")
                                    : malformed(err, "hello", "hello.link");
    if (!(h.inventory = cJSON_Duplicate(inv, 1))) {
        weft_free(h.link);
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    }
    cJSON_DeleteItemFromObjectCaseSensitive(h.inventory, "link");
    snprintf(h.response, sizeof(h.response), "%s", resp);
    snprintf(h.challenge, sizeof(h.challenge), "%s", ch);
    *m = h;
    return WEFT_OK;
}

weft_status_t weft_boot_accept_decode(const cJSON *json, struct weft_boot_accept *m,
                                      struct weft_error *err)
{
    weft_status_t st = check_version(json, "accept", err);
    if (st != WEFT_OK)
        return st;
    const cJSON *acc = cJSON_GetObjectItemCaseSensitive(json, "accepted");
    if (!cJSON_IsBool(acc))
        return malformed(err, "accept", "accepted");
    struct weft_boot_accept a = {.accepted = cJSON_IsTrue(acc)};
    if (!a.accepted) {
        const char *e = get_str(json, "error");
        snprintf(a.error, sizeof(a.error), "%s", e && e[0] ? e : "no reason given");
        *m = a;
        return WEFT_OK;
    }
    const char *id = get_str(json, "id"), *resp = get_str(json, "response");
    if (!id || !id[0] || strlen(id) >= sizeof(a.id))
        return malformed(err, "accept", "id");
    if (!resp || !is_hex32(resp))
        return malformed(err, "accept", "response");
    if ((st = get_b64(json, "link", &a.link, &a.link_len)) != WEFT_OK)
        return st == WEFT_ERR_NOMEM ? weft_error_refuse(err, st, "out of memory")
                                    : malformed(err, "accept", "link");
    snprintf(a.id, sizeof(a.id), "%s", id);
    snprintf(a.response, sizeof(a.response), "%s", resp);
    *m = a;
    return WEFT_OK;
}

void weft_boot_hello_cleanup(struct weft_boot_hello *m)
{
    cJSON_Delete(m->inventory);
    weft_free(m->link);
    m->inventory = NULL;
    m->link = NULL;
}

void weft_boot_accept_cleanup(struct weft_boot_accept *m)
{
    weft_free(m->link);
    m->link = NULL;
}

weft_status_t weft_boot_parse(const void *text, size_t len, cJSON **json_p,
                              struct weft_error *err)
{
    if (len == 0 || len > WEFT_BOOT_MAX)
        return weft_error_refuse(err, WEFT_ERR_PROTOCOL,
                                 "bootstrap frame of %zu bytes (1..%u allowed)", len,
                                 WEFT_BOOT_MAX);
    cJSON *json = NULL;
    if (!weft_utf8_valid(text, len, NULL) ||
        !cJSON_IsObject(json = cJSON_ParseWithLength(text, len))) {
        cJSON_Delete(json);
        return weft_error_refuse(err, WEFT_ERR_PROTOCOL,
                                 "bootstrap frame is not a UTF-8 JSON object");
    }
    *json_p = json;
    return WEFT_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Blocking I/O (the worker side)                                                            */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static weft_status_t io_all(int fd, void *buf, size_t n, int timeout_ms, bool writing,
                            struct weft_error *err)
{
    double deadline = now_ms() + timeout_ms;
    char *p = buf;
    while (n) {
        int left = (int)(deadline - now_ms());
        if (left <= 0)
            return weft_error_refuse(err, WEFT_ERR_TIMEOUT, "bootstrap %s timed out after %d ms",
                                     writing ? "send" : "receive", timeout_ms);
        struct pollfd pfd = {fd, (short)(writing ? POLLOUT : POLLIN), 0};
        int r = poll(&pfd, 1, left);
        if (r <= 0)
            continue; /* EINTR, or the deadline: checked above */
        ssize_t k = writing ? write(fd, p, n) : read(fd, p, n);
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (k <= 0)
            return weft_error_refuse(err, WEFT_ERR_PEER_LOST, "bootstrap connection %s",
                                     k == 0 ? "closed by the peer" : strerror(errno));
        p += k;
        n -= (size_t)k;
    }
    return WEFT_OK;
}

weft_status_t weft_boot_send(int fd, const char *text, int timeout_ms, struct weft_error *err)
{
    size_t n = strlen(text);
    if (n == 0 || n > WEFT_BOOT_MAX)
        return weft_error_refuse(err, WEFT_ERR_RANGE, "bootstrap frame of %zu bytes", n);
    uint8_t hdr[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
    weft_status_t st = io_all(fd, hdr, 4, timeout_ms, true, err);
    return st == WEFT_OK ? io_all(fd, (char *)text, n, timeout_ms, true, err) : st;
}

weft_status_t weft_boot_recv(int fd, int timeout_ms, cJSON **json_p, struct weft_error *err)
{
    uint8_t hdr[4] = {0};
    weft_status_t st = io_all(fd, hdr, 4, timeout_ms, false, err);
    if (st != WEFT_OK)
        return st;
    size_t n = (size_t)hdr[0] | (size_t)hdr[1] << 8 | (size_t)hdr[2] << 16 | (size_t)hdr[3] << 24;
    if (n == 0 || n > WEFT_BOOT_MAX)
        return weft_error_refuse(err, WEFT_ERR_PROTOCOL, "bootstrap frame of %zu bytes (limit %u)",
                                 n, WEFT_BOOT_MAX);
    char *buf = weft_malloc(n);
    if (!buf)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    st = io_all(fd, buf, n, timeout_ms, false, err);
    if (st == WEFT_OK)
        st = weft_boot_parse(buf, n, json_p, err);
    weft_free(buf);
    return st;
}

bool weft_boot_inventory_memory(const cJSON *inventory, uint64_t *bytes_p, bool *shared_p)
{
    const cJSON *mem = cJSON_GetObjectItemCaseSensitive(inventory, "memory");
    const cJSON *host = cJSON_GetObjectItemCaseSensitive(inventory, "host_memory");
    const cJSON *dev = cJSON_GetObjectItemCaseSensitive(inventory, "device");
    int64_t bytes;
    if (!mem || !cJSON_IsNumber(mem) || !weft_double_int(mem->valuedouble, 1, INT64_MAX, &bytes))
        return false;
    const bool gpu = cJSON_IsString(dev) && strncmp(dev->valuestring, "cuda", 4) == 0;
    *bytes_p = (uint64_t)bytes;
    *shared_p = !gpu && (!cJSON_IsNumber(host) || host->valuedouble <= mem->valuedouble);
    return true;
}
