/* The authenticated bootstrap of a worker (version WEFT_BOOT_VERSION), before its control
 * link exists: over TCP (the worker connects to the coordinator's [cluster] listen port),
 * length-prefixed JSON frames (u32 little-endian length, 1..WEFT_BOOT_MAX bytes, a UTF-8 JSON
 * object):
 *   C->W challenge  {"weft": 1, "challenge": hex32}
 *   W->C hello      {"weft": 1, "response": HMAC(secret, "worker:" challenge), "challenge":
 *                    hex32, "hello": {inventory..., "link": base64 UCX address}}
 *   C->W accept     {"weft": 1, "accepted": true, "id": "w3", "response": HMAC(secret,
 *                    "coordinator:" worker challenge), "link": base64 address}
 *                or {"weft": 1, "accepted": false, "error": "..."}
 * The secret never crosses the wire; each side proves it knows it. The TCP connection stays
 * open for the worker's lifetime: its end tells the coordinator the process is gone.
 *
 * Each frame has one encode and one decode function here; a decoder checks every field (hex
 * lengths, base64, sizes) and names the first bad one in err. */
#ifndef WEFT_CONTROL_BOOT_H
#define WEFT_CONTROL_BOOT_H

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "common/status.h"
#include "control/msg.h"

#define WEFT_BOOT_VERSION 1
#define WEFT_BOOT_MAX (64u << 10)
#define WEFT_BOOT_HEX 65 /* 32 bytes as hex, NUL */

struct weft_boot_challenge {
    char challenge[WEFT_BOOT_HEX];
};

struct weft_boot_hello {
    char response[WEFT_BOOT_HEX];
    char challenge[WEFT_BOOT_HEX];
    cJSON *inventory; /* owned: the hello object without "link" (host, pid, device, ...) */
    void *link;       /* owned: the worker's UCX address */
    size_t link_len;
};

struct weft_boot_accept {
    bool accepted;
    char id[WEFT_MSG_ID_MAX];
    char response[WEFT_BOOT_HEX];
    void *link; /* owned: the coordinator's UCX address */
    size_t link_len;
    char error[256]; /* the refusal's reason */
};

/* Each encoder returns the frame's JSON text (weft_free), NULL when out of memory. */
char *weft_boot_challenge_encode(const struct weft_boot_challenge *m);
char *weft_boot_hello_encode(const struct weft_boot_hello *m);
char *weft_boot_accept_encode(const struct weft_boot_accept *m);
/* Each decoder takes a parsed frame; outputs only on success. */
weft_status_t weft_boot_challenge_decode(const cJSON *json, struct weft_boot_challenge *m,
                                         struct weft_error *err);
weft_status_t weft_boot_hello_decode(const cJSON *json, struct weft_boot_hello *m,
                                     struct weft_error *err);
weft_status_t weft_boot_accept_decode(const cJSON *json, struct weft_boot_accept *m,
                                      struct weft_error *err);
void weft_boot_hello_cleanup(struct weft_boot_hello *m);

/* The memory a worker's inventory (its hello, as GET /v1/cluster lists it) reports for its
 * device, which the planners plan with: false when it reports none. *shared_p: the host's RAM,
 * which the CPU workers of one host share (a CPU worker without a [worker] memory budget);
 * false for a GPU's own memory or a budget, which is the worker's. */
bool weft_boot_inventory_memory(const cJSON *inventory, uint64_t *bytes_p, bool *shared_p);
void weft_boot_accept_cleanup(struct weft_boot_accept *m);

/* A frame's bytes (4-byte length, then text) into a parsed JSON object: WEFT_ERR_PROTOCOL when
 * the text is not a UTF-8 JSON object. */
weft_status_t weft_boot_parse(const void *text, size_t len, cJSON **json_p,
                              struct weft_error *err);

/* HMAC-SHA256(secret, label ":" challenge_hex) as hex. */
void weft_boot_proof(const char *secret, const char *label, const char *challenge_hex,
                     char out[WEFT_BOOT_HEX]);
/* A fresh 32-byte challenge as hex. */
weft_status_t weft_boot_new_challenge(char out[WEFT_BOOT_HEX]);
/* Compare a proof in constant time. */
bool weft_boot_proof_ok(const char *got, const char *want);

/* Blocking frame I/O on a socket with a deadline (the worker side). */
weft_status_t weft_boot_send(int fd, const char *text, int timeout_ms, struct weft_error *err);
weft_status_t weft_boot_recv(int fd, int timeout_ms, cJSON **json_p, struct weft_error *err);

#endif
