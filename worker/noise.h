/* The initial noise: a counter-based generator (Philox4x32-10) so that element i of the packed
 * latents is a pure function of (seed, i). Every rank, device and parallel layout therefore
 * produces the same noise for a seed, and a rank can generate just its own slice. */
#ifndef WEFT_WORKER_NOISE_H
#define WEFT_WORKER_NOISE_H

#include <stdint.h>

/* One Philox4x32-10 block: ctr is replaced by the output. */
void weft_philox4x32(uint32_t ctr[4], uint32_t key0, uint32_t key1);

/* Standard normal values for elements [first, first + n) of the stream of seed. */
void weft_noise_normal(uint64_t seed, int64_t first, int64_t n, float *out);

#endif
