/* Mesh arithmetic (see mesh.h). */
#include "model/mesh.h"

static int stages(const struct weft_mesh *m)
{
    return m->pp > 1 ? m->pp : 1;
}

static int halves(const struct weft_mesh *m)
{
    return m->cfg > 1 ? m->cfg : 1;
}

int weft_mesh_size(const struct weft_mesh *m)
{
    return m->dp * halves(m) * stages(m) * m->ring * m->ulysses * m->tp;
}

void weft_mesh_coord(const struct weft_mesh *m, int rank, struct weft_mesh_coord *c)
{
    c->tp = rank % m->tp;
    rank /= m->tp;
    c->ulysses = rank % m->ulysses;
    rank /= m->ulysses;
    c->ring = rank % m->ring;
    rank /= m->ring;
    c->pp = rank % stages(m);
    rank /= stages(m);
    c->cfg = rank % halves(m);
    c->dp = rank / halves(m);
    c->cp = c->ring * m->ulysses + c->ulysses;
}

int weft_mesh_rank(const struct weft_mesh *m, const struct weft_mesh_coord *c)
{
    return ((((c->dp * halves(m) + c->cfg) * stages(m) + c->pp) * m->ring + c->ring) *
                m->ulysses + c->ulysses) * m->tp + c->tp;
}

int weft_mesh_group(const struct weft_mesh *m, int rank, enum weft_mesh_group kind, int *ranks,
                    int *index_p)
{
    struct weft_mesh_coord me, c;
    weft_mesh_coord(m, rank, &me);
    int n = 0;
    for (int r = 0; r < weft_mesh_size(m); r++) {
        weft_mesh_coord(m, r, &c);
        int same = c.dp == me.dp && (kind == WEFT_MESH_REPLICA || kind == WEFT_MESH_CFG ||
                                     c.cfg == me.cfg);
        switch (kind) {
        case WEFT_MESH_TP:
            same = same && c.pp == me.pp && c.ring == me.ring && c.ulysses == me.ulysses;
            break;
        case WEFT_MESH_ULYSSES:
            same = same && c.pp == me.pp && c.ring == me.ring && c.tp == me.tp;
            break;
        case WEFT_MESH_RING:
            same = same && c.pp == me.pp && c.ulysses == me.ulysses && c.tp == me.tp;
            break;
        case WEFT_MESH_CP:
            same = same && c.pp == me.pp && c.tp == me.tp;
            break;
        case WEFT_MESH_PIPE:
            same = same && c.ring == me.ring && c.ulysses == me.ulysses && c.tp == me.tp;
            break;
        case WEFT_MESH_CFG:
            same = same && c.pp == me.pp && c.ring == me.ring && c.ulysses == me.ulysses &&
                   c.tp == me.tp;
            break;
        default:
            break;
        }
        if (!same)
            continue;
        if (r == rank)
            *index_p = n;
        ranks[n++] = r;
    }
    return n;
}

const char *weft_mesh_group_name(enum weft_mesh_group g)
{
    static const char *const names[WEFT_MESH_GROUP_COUNT] = {"tp",      "ulysses", "ring", "cp",
                                                             "replica", "pipe",    "cfg"};
    return (unsigned)g < WEFT_MESH_GROUP_COUNT ? names[g] : "?";
}
