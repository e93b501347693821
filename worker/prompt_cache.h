/* Encoded text prompts kept for reuse on the rank that encodes text: key (model, dtype,
 * max_sequence_length, text), value the prompt's embeddings; bounded in bytes, the least
 * recently used entries evicted first. Not thread-safe: its runtime's thread only. */
#ifndef WEFT_WORKER_PROMPT_CACHE_H
#define WEFT_WORKER_PROMPT_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/status.h"
#include "model/model.h"

struct weft_prompt_cache;

struct weft_prompt_key {
    const char *model; /* the model folder */
    int dtype;         /* enum weft_dtype the encoders ran in */
    int64_t max_sequence_length;
    const char *text;
};

/* max_bytes 0: a cache that keeps nothing (every lookup misses). */
weft_status_t weft_prompt_cache_create(uint64_t max_bytes, struct weft_prompt_cache **cache_p);
void weft_prompt_cache_destroy(struct weft_prompt_cache *cache);
/* A hit copies the entry into out (new buffers, weft_prompt_embeds_cleanup) and counts a hit;
 * false counts a miss (also when out of memory for the copy). */
bool weft_prompt_cache_get(struct weft_prompt_cache *cache, const struct weft_prompt_key *key,
                           int64_t joint, int64_t pooled, struct weft_prompt_embeds *out);
/* Keep a copy of pe (embeds [tokens, joint], pooled [pooled]); an entry larger than the bound,
 * or no memory for the copy, is not kept. */
void weft_prompt_cache_put(struct weft_prompt_cache *cache, const struct weft_prompt_key *key,
                           int64_t joint, int64_t pooled, const struct weft_prompt_embeds *pe);
void weft_prompt_cache_stats(const struct weft_prompt_cache *cache, uint64_t *hits,
                             uint64_t *misses, uint64_t *entries, uint64_t *bytes);

#endif
