/* The device mesh: dp x pp x ring x ulysses x tp, tensor parallelism innermost (it talks the
 * most, so it stays on the fastest links), then Ulysses, then ring, then pipeline stages (a
 * model split by layers, device_map), then data parallelism:
 *   rank = (((dp_i * pp + pp_i) * ring + ring_i) * ulysses + ulysses_i) * tp + tp_i
 * (pp 0 counts as 1, so {dp, ring, ulysses, tp} initializers mean one stage).
 * Within a replica the context-parallel ranks are numbered c = ring_i * ulysses + ulysses_i
 * (Diffusers' flattened order). Pure arithmetic, shared by the planner and the workers. */
#ifndef WEFT_MODEL_MESH_H
#define WEFT_MODEL_MESH_H

struct weft_mesh {
    int dp, ring, ulysses, tp;
    int pp; /* pipeline stages of a replica; 0 or 1: one */
};

struct weft_mesh_coord {
    int dp, ring, ulysses, tp, pp;
    int cp; /* ring * ulysses_degree + ulysses */
};

int weft_mesh_size(const struct weft_mesh *m);
void weft_mesh_coord(const struct weft_mesh *m, int rank, struct weft_mesh_coord *c);
int weft_mesh_rank(const struct weft_mesh *m, const struct weft_mesh_coord *c);

enum weft_mesh_group {
    WEFT_MESH_TP,      /* same dp, ring, ulysses: varying tp */
    WEFT_MESH_ULYSSES, /* same dp, ring, tp: varying ulysses (contiguous) */
    WEFT_MESH_RING,    /* same dp, ulysses, tp: varying ring (strided) */
    WEFT_MESH_CP,      /* same dp, tp: every ring x ulysses, flattened order */
    WEFT_MESH_REPLICA, /* same dp: the whole replica */
    WEFT_MESH_PIPE,    /* same dp, ring, ulysses, tp: varying pp (the stages, in order) */
    WEFT_MESH_GROUP_COUNT
};
/* "tp", "ulysses", "ring", "cp", "replica", "pipe" */
const char *weft_mesh_group_name(enum weft_mesh_group g);

/* World ranks of rank's group of the given kind, in group-rank order, into ranks (size at
 * least weft_mesh_size); returns the group size and sets *index_p to rank's place in it. */
int weft_mesh_group(const struct weft_mesh *m, int rank, enum weft_mesh_group kind, int *ranks,
                    int *index_p);

#endif
