/* The encoded-prompt cache (prompt_cache.h): a list in recency order; lookups compare keys
 * (a served stream holds tens of prompts, not millions). */
#include "worker/prompt_cache.h"

#include <string.h>

#include "common/alloc.h"

struct entry {
    struct entry *prev, *next; /* most recent first */
    char *model, *text;
    int dtype;
    int64_t msl, tokens;
    float *embeds, *pooled;
    uint64_t bytes;
};

struct weft_prompt_cache {
    uint64_t max_bytes, bytes, entries, hits, misses;
    struct entry *head, *tail;
};

weft_status_t weft_prompt_cache_create(uint64_t max_bytes, struct weft_prompt_cache **cache_p)
{
    struct weft_prompt_cache *c = weft_calloc(1, sizeof(*c));
    if (!c)
        return WEFT_ERR_NOMEM;
    c->max_bytes = max_bytes;
    *cache_p = c;
    return WEFT_OK;
}

static void unlink_entry(struct weft_prompt_cache *c, struct entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        c->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->tail = e->prev;
    e->prev = e->next = NULL;
}

static void push_front(struct weft_prompt_cache *c, struct entry *e)
{
    e->next = c->head;
    if (c->head)
        c->head->prev = e;
    c->head = e;
    if (!c->tail)
        c->tail = e;
}

static void entry_free(struct entry *e)
{
    weft_free(e->model);
    weft_free(e->text);
    weft_free(e->embeds);
    weft_free(e->pooled);
    weft_free(e);
}

void weft_prompt_cache_destroy(struct weft_prompt_cache *c)
{
    if (!c)
        return;
    for (struct entry *e = c->head, *n; e; e = n) {
        n = e->next;
        entry_free(e);
    }
    weft_free(c);
}

static bool same(const struct entry *e, const struct weft_prompt_key *k)
{
    return e->dtype == k->dtype && e->msl == k->max_sequence_length &&
           strcmp(e->text, k->text) == 0 && strcmp(e->model, k->model) == 0;
}

bool weft_prompt_cache_get(struct weft_prompt_cache *c, const struct weft_prompt_key *key,
                           int64_t joint, int64_t pooled, struct weft_prompt_embeds *out)
{
    struct entry *e = c->head;
    while (e && !same(e, key))
        e = e->next;
    if (!e) {
        c->misses++;
        return false;
    }
    const size_t ne = (size_t)(e->tokens * joint) * sizeof(float);
    struct weft_prompt_embeds pe = {weft_malloc(ne), weft_malloc((size_t)pooled * sizeof(float)),
                                    e->tokens};
    if (!pe.embeds || !pe.pooled) {
        weft_prompt_embeds_cleanup(&pe);
        c->misses++;
        return false;
    }
    memcpy(pe.embeds, e->embeds, ne);
    memcpy(pe.pooled, e->pooled, (size_t)pooled * sizeof(float));
    unlink_entry(c, e);
    push_front(c, e);
    c->hits++;
    *out = pe;
    return true;
}

void weft_prompt_cache_put(struct weft_prompt_cache *c, const struct weft_prompt_key *key,
                           int64_t joint, int64_t pooled, const struct weft_prompt_embeds *pe)
{
    const size_t ne = (size_t)(pe->tokens * joint) * sizeof(float);
    const uint64_t bytes = ne + (uint64_t)pooled * sizeof(float) + strlen(key->text) +
                           strlen(key->model) + sizeof(struct entry);
    if (bytes > c->max_bytes)
        return;
    struct entry *e = weft_calloc(1, sizeof(*e));
    if (!e)
        return;
    e->model = weft_strdup(key->model);
    e->text = weft_strdup(key->text);
    e->embeds = weft_malloc(ne);
    e->pooled = weft_malloc((size_t)pooled * sizeof(float));
    if (!e->model || !e->text || !e->embeds || !e->pooled) {
        entry_free(e);
        return;
    }
    memcpy(e->embeds, pe->embeds, ne);
    memcpy(e->pooled, pe->pooled, (size_t)pooled * sizeof(float));
    e->dtype = key->dtype;
    e->msl = key->max_sequence_length;
    e->tokens = pe->tokens;
    e->bytes = bytes;
    while (c->tail && c->bytes + bytes > c->max_bytes) {
        struct entry *old = c->tail;
        unlink_entry(c, old);
        c->bytes -= old->bytes;
        c->entries--;
        entry_free(old);
    }
    push_front(c, e);
    c->bytes += bytes;
    c->entries++;
}

void weft_prompt_cache_stats(const struct weft_prompt_cache *c, uint64_t *hits,
                             uint64_t *misses, uint64_t *entries, uint64_t *bytes)
{
    *hits = c->hits;
    *misses = c->misses;
    *entries = c->entries;
    *bytes = c->bytes;
}
