/* transport/link.h: control-plane links: one UCX worker per process with an event descriptor, an
 * endpoint per peer process created from its worker address, framed messages (UCX active
 * messages), per-peer failure detection. Knows nothing about what the messages mean.
 *
 * Unlike the worlds of comm.h, which fail as a whole, every link lives and dies alone: the
 * coordinator holds one per worker, workers come and go, and a dead worker takes down its own
 * link only. Endpoints use UCX's per-peer error handling (UCP_ERR_HANDLING_MODE_PEER), so UCX
 * 1.13 carries them over TCP, never shared memory (reference/environment.md §8): right for
 * control traffic, and the data plane has its own transport.
 *
 * Failure detection, two layers:
 *  - A peer process that dies (crash, SIGKILL, OOM) has its sockets closed by its kernel; UCX
 *    reports the endpoint failed at once and its links go down with WEFT_ERR_PEER_LOST
 *    (measured on loopback: 1-7 ms after the SIGKILL).
 *  - A peer that is silent (stopped, wedged, its host powered off or cut off: no socket is
 *    closed) is caught by our own heartbeat: a link sends a small frame whenever it has sent
 *    nothing for timeout/4; after timeout without any frame from the peer, the endpoint to that
 *    process is dropped and its links go down with WEFT_ERR_TIMEOUT (weft_link_host_set_timeout,
 *    default 10 s). UCX's keepalives do not cover this: TCP keepalive (UCX_TCP_KEEPIDLE 10 s +
 *    probes) is answered by a stopped process's kernel, and UCP's keepalive only writes to the
 *    socket. So each side must call progress (or wait) at least every timeout/4: drive the host
 *    from a thread or loop that does not run long computations.
 *
 * Threading: a host and its links are used by one thread at a time (the UCX worker runs in
 * single-thread mode and nothing here locks). Callbacks run on that thread, inside
 * weft_link_host_progress or weft_link_host_wait, never inside UCX's own callbacks. A callback
 * may send, flush, connect, set callbacks and close links (its own included), but must not call
 * progress, wait or host_destroy (they refuse, with WEFT_ERR_BUSY and a log line).
 *
 * Ownership: a link handle, whether returned by connect or handed to the accept callback, stays
 * valid until weft_link_close, also after the link went down (sends then fail at once with the
 * status it went down with). Close every link; host_destroy closes those left.
 *
 * Trust: peers are admitted by handing them our address over the authenticated bootstrap
 * connection. Frames are validated (a malformed one closes its link with a log line), but a
 * first frame carries its sender's UCX worker address, which UCX parses: whoever can reach this
 * process's UCX ports can connect, and the accept callback decides whether to keep the link.
 *
 * Wire format, per frame: a UCX active message (id 1) whose 40-byte header is, little
 * endian: u32 magic 'WFLK' (0x4b4c4657), u8 version (1), u8 kind (1 hello, 2 message,
 * 3 heartbeat, 4 goodbye), u8 flags (bit 0: sent by the side that connected), u8 0, u16 message
 * type, u16 0, u32 sequence (per direction, from 0, the hello included), u64 connection host
 * id, u32 connection id (chosen by the connecting side), u32 0, u64 payload bytes. A hello's
 * payload is the connecting side's worker address; heartbeats and goodbyes have none. */
#ifndef WEFT_TRANSPORT_LINK_H
#define WEFT_TRANSPORT_LINK_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct weft_link_host; /* one per process */
struct weft_link;      /* one per peer */

/* Largest message payload. */
#define WEFT_LINK_MSG_MAX ((size_t)64 << 20)
/* Bytes a link may hold queued or in flight before weft_link_send answers WEFT_ERR_BUSY. */
#define WEFT_LINK_QUEUE_MAX ((size_t)256 << 20)

/* A message arrived (data valid during the call only). */
typedef void (*weft_link_msg_cb)(struct weft_link *link, uint16_t type, const void *data,
                                 size_t len, void *arg);
/* The link went down, once, after every message that arrived whole before was delivered. why:
 * WEFT_ERR_PEER_LOST (the peer closed its link, died, or the connection broke), WEFT_ERR_TIMEOUT
 * (silent for the timeout), WEFT_ERR_UNREACHABLE (no route to the peer), WEFT_ERR_PROTOCOL (the
 * peer sent a malformed frame), WEFT_ERR_NOMEM (no memory for a message); all but a close by
 * the peer are logged. */
typedef void (*weft_link_down_cb)(struct weft_link *link, weft_status_t why, void *arg);
/* A peer connected to us: its first frame arrived. Set the link's callbacks here (else its
 * messages are dropped with a warning); close it to refuse the peer. */
typedef void (*weft_link_accept_cb)(struct weft_link_host *host, struct weft_link *link, void *arg);

/* tls: a UCX_TLS value, NULL or "" for UCX's choice (it picks tcp: see above). on_accept may
 * be NULL: incoming connections are then refused. */
weft_status_t weft_link_host_create(const char *tls, weft_link_accept_cb on_accept, void *arg,
                                    struct weft_link_host **host_p);
/* Closes every link left (no callbacks after), lets their last frames leave for at most a
 * second, then frees everything. */
void weft_link_host_destroy(struct weft_link_host *host);
/* Silence after which the peer's endpoint is dropped and its links go down with
 * WEFT_ERR_TIMEOUT (an idle link sends a heartbeat about every timeout/4); 0 turns the
 * heartbeat off (then only broken connections are noticed). Both sides should use the same
 * value. Default 10000 ms; at least 20 ms. */
weft_status_t weft_link_host_set_timeout(struct weft_link_host *host, int timeout_ms);
/* This process's UCX worker address (owned by the host), to hand to peers out of band (the
 * coordinator and workers exchange them over their authenticated TCP bootstrap connection). */
weft_status_t weft_link_host_address(struct weft_link_host *host, const void **addr_p,
                                     size_t *len_p);
/* A descriptor that becomes readable when there is work: UCX events, a heartbeat due, or work
 * a previous progress left. Wait for readability (libuv's uv_poll, poll()), then call
 * progress, which re-arms it; never read it. */
int weft_link_host_fd(struct weft_link_host *host);
/* Run UCX, deliver messages, accepted links and down events (callbacks run here, on the
 * caller's thread), send heartbeats. Never blocks. */
weft_status_t weft_link_host_progress(struct weft_link_host *host);
/* Block up to timeout_ms (0: not at all) for work, then progress (for a worker thread without
 * an event loop). */
weft_status_t weft_link_host_wait(struct weft_link_host *host, int timeout_ms);

/* Connect to a peer by its address; returns at once (frames queue until UCX has wired the
 * endpoint up). The peer learns about it through its accept callback when our first frame
 * arrives, so both sides end with one link for the pair. Our first frame carries our address,
 * and the peer connects back with it unless it has an endpoint to us already: a host keeps one
 * UCX endpoint per remote process, shared by every link to it, because UCX 1.13 pairs the
 * endpoints of two processes in creation order and per-link endpoints could end up crossed (one
 * link's close breaking another's). So a link closes with a goodbye frame; an endpoint closes
 * when it fails (taking down every link to that process) or with the host. A peer UCX cannot
 * reach at once fails here (WEFT_ERR_UNREACHABLE, e.g. its process has exited); one that fails
 * later shows as down. */
weft_status_t weft_link_connect(struct weft_link_host *host, const void *peer_addr, size_t len,
                                weft_link_msg_cb on_msg, weft_link_down_cb on_down, void *arg,
                                struct weft_link **link_p);
/* For accepted links (any link may change its callbacks; NULL on_msg drops messages). */
void weft_link_set_callbacks(struct weft_link *link, weft_link_msg_cb on_msg,
                             weft_link_down_cb on_down, void *arg);
/* Queue a message (copied; returns at once). Messages on a link arrive in order, whole, or the
 * link goes down. Any size up to WEFT_LINK_MSG_MAX (else WEFT_ERR_RANGE). Fails with the status
 * the link went down with once it is down, WEFT_ERR_BUSY while WEFT_LINK_QUEUE_MAX bytes wait. */
weft_status_t weft_link_send(struct weft_link *link, uint16_t type, const void *data, size_t len);
/* Block until every message sent on the link so far has left this process (UCX flushed the
 * endpoint: written to the socket, a large message fetched by the peer), or timeout_ms passed
 * (WEFT_ERR_TIMEOUT; the messages stay queued), or the link went down (its status). Progresses
 * UCX but runs no callbacks (allowed inside one); what arrives meanwhile is delivered by the
 * next progress. For a worker that must know its last message went before it exits. */
weft_status_t weft_link_flush(struct weft_link *link, int timeout_ms);
/* WEFT_OK while the link is up, else the status it went down with. */
weft_status_t weft_link_status(const struct weft_link *link);
/* Send a goodbye after the queued messages and free the link (no callbacks after; the frames
 * leave during later progress calls or host_destroy). The peer sees down with
 * WEFT_ERR_PEER_LOST after the messages sent before. */
void weft_link_close(struct weft_link *link);

#ifdef __cplusplus
}
#endif

#endif
