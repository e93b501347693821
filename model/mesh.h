/* The device mesh: dp x cfg x pp x ring x ulysses x tp, tensor parallelism innermost (it talks
 * the most, so it stays on the fastest links), then Ulysses, then ring, then pipeline stages (a
 * model split by layers, device_map), then the halves of CFG parallelism (the conditional pass
 * on cfg_i 0, the unconditional on 1: one exchange a step), then data parallelism:
 *   rank = ((((dp_i * cfg + cfg_i) * pp + pp_i) * ring + ring_i) * ulysses + ulysses_i) * tp
 *          + tp_i
 * (pp and cfg 0 count as 1, so {dp, ring, ulysses, tp} initializers mean one stage, one half).
 * Within a replica the context-parallel ranks are numbered c = ring_i * ulysses + ulysses_i
 * (Diffusers' flattened order). Pure arithmetic, shared by the planner and the workers. */
#ifndef WEFT_MODEL_MESH_H
#define WEFT_MODEL_MESH_H

struct weft_mesh {
    int dp, ring, ulysses, tp;
    int pp;  /* pipeline stages of a replica; 0 or 1: one */
    int cfg; /* CFG-parallel halves of a replica; 0 or 1: none, 2: two */
};

struct weft_mesh_coord {
    int dp, ring, ulysses, tp, pp, cfg;
    int cp; /* ring * ulysses_degree + ulysses */
};

int weft_mesh_size(const struct weft_mesh *m);
void weft_mesh_coord(const struct weft_mesh *m, int rank, struct weft_mesh_coord *c);
int weft_mesh_rank(const struct weft_mesh *m, const struct weft_mesh_coord *c);

enum weft_mesh_group {
    /* every group but the replica and cfg lies inside one CFG half (same dp and cfg) */
    WEFT_MESH_TP,      /* same pp, ring, ulysses: varying tp */
    WEFT_MESH_ULYSSES, /* same pp, ring, tp: varying ulysses (contiguous) */
    WEFT_MESH_RING,    /* same pp, ulysses, tp: varying ring (strided) */
    WEFT_MESH_CP,      /* same pp, tp: every ring x ulysses, flattened order */
    WEFT_MESH_REPLICA, /* same dp: the whole replica, both CFG halves */
    WEFT_MESH_PIPE,    /* same ring, ulysses, tp: varying pp (the stages, in order) */
    WEFT_MESH_CFG,     /* same dp, pp, ring, ulysses, tp: varying cfg (the two halves) */
    WEFT_MESH_GROUP_COUNT
};
/* "tp", "ulysses", "ring", "cp", "replica", "pipe", "cfg" */
const char *weft_mesh_group_name(enum weft_mesh_group g);

/* World ranks of rank's group of the given kind, in group-rank order, into ranks (size at
 * least weft_mesh_size); returns the group size and sets *index_p to rank's place in it. */
int weft_mesh_group(const struct weft_mesh *m, int rank, enum weft_mesh_group kind, int *ranks,
                    int *index_p);

#endif
