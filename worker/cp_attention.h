/* Context-parallel attention over a joint sequence split across ranks: Ulysses (all-to-all
 * trades sequence for heads), Ring (every rank's K/V reaches every other; either gathered at
 * once or passed around the ring chunk by chunk and merged by log-sum-exp in f32), and both
 * at once (unified 2-D: Ulysses inside contiguous groups, ring across strided ones). Any
 * sequence lengths per rank and any head count: Ulysses splits heads like tensor_split, so
 * uneven counts need no padding. Model-agnostic: q, k, v already projected, normed and
 * rotated for this rank's rows. Buffers are reserved once per layout of lengths. */
#ifndef WEFT_WORKER_CP_ATTENTION_H
#define WEFT_WORKER_CP_ATTENTION_H

#include <stdint.h>

#include "kernels/kernels.h"
#include "model/cp.h"
#include "worker/par.h"

struct weft_cp_attn;

/* rows[c]: sequence rows held by context-parallel rank c (flattened order, ring x ulysses of
 * them); heads of head_dim d on this rank (after tensor parallelism). */
weft_status_t weft_cp_attn_create(const struct weft_kernels *K, struct weft_kctx *kc,
                                  const struct weft_par_comm *comm,
                                  const struct weft_cp_layout *cp, int ring_rank,
                                  int ulysses_rank, int64_t heads, int64_t d,
                                  const int64_t *rows, struct weft_cp_attn **attn_p);
void weft_cp_attn_destroy(struct weft_cp_attn *attn);

/* out[rows, heads*d] (row stride ldo) = softmax attention of this rank's queries over every
 * rank's keys and values; q, k, v have row stride ld. */
weft_status_t weft_cp_attn_run(struct weft_cp_attn *attn, const float *q, const float *k,
                               const float *v, int64_t ld, float *out, int64_t ldo, float scale);

/* Bytes of buffers reserved (for memory reports). */
size_t weft_cp_attn_bytes(const struct weft_cp_attn *attn);

#endif
