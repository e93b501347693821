/* The coordinator <-> worker control protocol (version WEFT_PROTO_VERSION).
 *
 * Bootstrap, over TCP (the worker connects to the coordinator's cluster port), length-prefixed
 * JSON frames (u32 little-endian length, at most WEFT_BOOT_MAX bytes):
 *   C->W {"weft": 1, "challenge": hex32}
 *   W->C {"weft": 1, "response": HMAC(secret, "worker:" challenge), "challenge": hex32,
 *         "hello": {inventory, "link": base64 UCX address}}
 *   C->W {"weft": 1, "accepted": true, "id": "w3", "response": HMAC(secret, "coordinator:"
 *         worker challenge), "link": base64 address}  or  {"accepted": false, "error": "..."}
 * The secret never crosses the wire; each side proves it knows it. The TCP connection stays
 * open for the worker's lifetime: its end tells the coordinator the process is gone.
 *
 * Then control messages go over UCX control links (transport/link.h): a type, and a payload of
 * u32 little-endian JSON length, the JSON object (always with "v": WEFT_PROTO_VERSION), and an
 * optional binary tail (prompt embeddings, PNG bytes). Every message is validated on receipt:
 * a malformed one closes the link with the reason logged. */
#ifndef WEFT_CONTROL_PROTO_H
#define WEFT_CONTROL_PROTO_H

#include <cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

#define WEFT_PROTO_VERSION 1
#define WEFT_BOOT_MAX (64u << 10)
#define WEFT_MSG_MAX_JSON (1u << 20)

enum weft_msg_type {
    WEFT_MSG_HELLO = 1, /* W->C {"id"}: first message on a link, names the worker */
    WEFT_MSG_ASSIGN,    /* C->W a place in a mesh and what to load */
    WEFT_MSG_ASSIGNED,  /* W->C {"epoch", "status", "error", "transformer_bytes", "vae_bytes"} */
    WEFT_MSG_RUN,       /* C->W images of a job for this worker's replica; tail: prompts */
    WEFT_MSG_STEP,      /* W->C {"job", "image", "step", "steps", "seconds"} */
    WEFT_MSG_IMAGE,     /* W->C {"job", "image", "denoise_s", "decode_s"}; tail: PNG */
    WEFT_MSG_DONE,      /* W->C {"job", "status", "error"}: the replica finished its images */
    WEFT_MSG_CANCEL,    /* C->W {"job"} */
    WEFT_MSG_RESET,     /* C->W {"epoch"}: drop the assignment and the data-plane world */
    WEFT_MSG_SHUTDOWN,  /* C->W: exit */
    WEFT_MSG_PING,      /* either way: heartbeat */
    WEFT_MSG_TYPE_COUNT
};

const char *weft_msg_name(unsigned type);

/* json (with "v" added) and tail into one payload (weft_free). */
weft_status_t weft_msg_pack(cJSON *json, const void *tail, size_t tail_len, void **buf_p,
                            size_t *len_p);
/* Validate and split a payload: a JSON object of the right version, then the tail. */
weft_status_t weft_msg_unpack(const void *buf, size_t len, const char *from, cJSON **json_p,
                              const void **tail_p, size_t *tail_len_p);

/* Bootstrap helpers. */
void weft_hex(const uint8_t *data, size_t n, char *out /* 2n + 1 */);
int weft_unhex(const char *text, uint8_t *out, size_t n);
/* HMAC-SHA256(secret, label ":" challenge_hex) as hex (65 bytes). */
void weft_boot_proof(const char *secret, const char *label, const char *challenge_hex,
                     char out[65]);
/* A fresh 32-byte challenge as hex. */
weft_status_t weft_boot_challenge(char out[65]);
char *weft_base64(const void *data, size_t len); /* weft_free */
/* Decode base64 into a new buffer (weft_free); NULL when malformed. */
void *weft_unbase64(const char *text, size_t *len_p);

/* Blocking frame I/O on a socket with a deadline (the worker side of the bootstrap). */
weft_status_t weft_boot_send(int fd, const cJSON *json, int timeout_ms);
weft_status_t weft_boot_recv(int fd, int timeout_ms, cJSON **json_p);

#endif
