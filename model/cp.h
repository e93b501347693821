/* Context parallelism: how a sequence and the attention heads are split over ranks, and the
 * checks a layout must pass before anything loads.
 *
 * The W = ring x ulysses context-parallel ranks of one replica are numbered in Diffusers'
 * flattened order c = ring_index * ulysses + ulysses_index: Ulysses groups are contiguous,
 * ring groups strided. Sequence chunk c goes to rank c. Equal splits need the length to divide
 * by W; the "anything" modes split like torch.tensor_split (the first n % W chunks one longer),
 * and weft extends them to every mode, unified 2-D included. Every rank can compute every
 * chunk's length, so uneven sizes never need a message, let alone a device sync. */
#ifndef WEFT_MODEL_CP_H
#define WEFT_MODEL_CP_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

enum weft_ring_rotation {
    WEFT_RING_ALLGATHER, /* gather every rank's K/V, attend once (Diffusers' only method) */
    WEFT_RING_P2P,       /* pass K/V around the ring, attend chunk by chunk, merge by LSE */
};

struct weft_cp_layout {
    int ring, ulysses;   /* degrees */
    bool anything;       /* uneven sequence lengths (and head counts) allowed */
    enum weft_ring_rotation rotation;
};

/* Chunk i of n over length s: [begin, begin + len). Even split when s % n == 0; otherwise
 * tensor_split's (the first s % n chunks are one longer). */
void weft_cp_chunk(int64_t s, int n, int i, int64_t *begin_p, int64_t *len_p);

/* Checks before load: degrees >= 1 and ring * ulysses * tp * dp <= world; in plain modes the
 * text and image lengths divide by ring * ulysses and the heads left after tensor parallelism
 * divide by ulysses (the error names the length, the degree and the flag that would accept
 * it); the anything flags need the degree they relax. A layout that fails is the
 * configuration's or the job's: err gets the reason (logged at ERROR with NULL err). */
weft_status_t weft_cp_check(const struct weft_cp_layout *cp, bool ulysses_anything,
                            bool ring_anything, int64_t s_txt, int64_t s_img, int64_t heads_tp,
                            struct weft_error *err);

/* The buffers context-parallel attention reserves on rank (ring_rank, ulysses_rank) for
 * heads of width d (this rank's after tensor parallelism), rows[c] the tokens of rank c, in
 * floats (worker/cp_attention.c's order: send, recv, qg, kg, vg, og, kall, vall, slot 0 and
 * 1, otmp, lse, lse_tmp); sizes may be NULL. Returns the bytes, each buffer rounded up to 16
 * floats. One formula for the worker and the planner. */
#define WEFT_CP_ATTN_BUFFERS 13
size_t weft_cp_attn_sizes(const struct weft_cp_layout *cp, int ring_rank, int ulysses_rank,
                          int64_t heads, int64_t d, const int64_t *rows,
                          int64_t sizes[WEFT_CP_ATTN_BUFFERS]);

#endif
