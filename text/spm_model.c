/* SentencePiece's ModelProto, walked in protobuf's wire format (see spm_model.h). Only the
 * fields weft needs are read; everything else is carried over unread into the identity copy.
 *
 *   ModelProto:      1 pieces (repeated SentencePiece), 2 trainer_spec, 3 normalizer_spec,
 *                    4 self_test_data, 5 denormalizer_spec
 *   SentencePiece:   1 piece (string), 2 score (float), 3 type (enum)
 *   NormalizerSpec:  1 name, 2 precompiled_charsmap (bytes), 3 add_dummy_prefix,
 *                    4 remove_extra_whitespaces, 5 escape_whitespaces (bools) */
#include "text/spm_model.h"

#include <string.h>

#include "common/alloc.h"
#include "text/internal.h"
#include "text/spm_shim.h"

struct pb {
    const uint8_t *p, *end;
};

static int pb_varint(struct pb *r, uint64_t *v)
{
    uint64_t x = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end)
            return -1;
        uint8_t b = *r->p++;
        x |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* One field: its number, wire type, and for length-delimited ones the bytes. */
struct pb_field {
    uint32_t num;
    int wire;
    uint64_t value;
    const uint8_t *data;
    size_t len;
    const uint8_t *start, *stop; /* the whole field as encoded */
};

static int pb_next(struct pb *r, struct pb_field *f)
{
    f->start = r->p;
    uint64_t key;
    if (pb_varint(r, &key) != 0 || (key >> 3) == 0 || (key >> 3) > UINT32_MAX)
        return -1;
    f->num = (uint32_t)(key >> 3);
    f->wire = (int)(key & 7);
    f->data = NULL;
    f->len = 0;
    switch (f->wire) {
    case 0:
        if (pb_varint(r, &f->value) != 0)
            return -1;
        break;
    case 1:
    case 5: {
        size_t n = f->wire == 1 ? 8 : 4;
        if ((size_t)(r->end - r->p) < n)
            return -1;
        f->data = r->p;
        f->len = n;
        r->p += n;
        break;
    }
    case 2: {
        uint64_t n;
        if (pb_varint(r, &n) != 0 || n > (uint64_t)(r->end - r->p))
            return -1;
        f->data = r->p;
        f->len = (size_t)n;
        r->p += n;
        break;
    }
    default: /* groups (3, 4) and reserved types: not in a ModelProto */
        return -1;
    }
    f->stop = r->p;
    return 0;
}

static weft_status_t bad(struct weft_error *err, const char *origin, const char *what)
{
    return weft_error_refuse(err, WEFT_ERR_FORMAT, "%s: not a SentencePiece model (%s)", origin,
                             what);
}

static weft_status_t parse_piece(const struct pb_field *f, struct weft_spm_piece *out,
                                 const char *origin, struct weft_error *err)
{
    struct pb r = {f->data, f->data + f->len};
    *out = (struct weft_spm_piece){"", 0, WEFT_SPM_NORMAL};
    struct pb_field g;
    while (r.p < r.end) {
        if (pb_next(&r, &g) != 0)
            return bad(err, origin, "a piece is cut short");
        if (g.num == 1 && g.wire == 2) {
            out->text = (const char *)g.data;
            out->len = g.len;
        } else if (g.num == 3 && g.wire == 0) {
            if (g.value < WEFT_SPM_NORMAL || g.value > WEFT_SPM_BYTE)
                return bad(err, origin, "a piece of an unknown type");
            out->type = (int)g.value;
        }
    }
    return WEFT_OK;
}

static weft_status_t parse_normalizer(const struct pb_field *f, struct weft_spm_model *m,
                                      const char *origin, struct weft_error *err)
{
    struct pb r = {f->data, f->data + f->len};
    struct pb_field g;
    while (r.p < r.end) {
        if (pb_next(&r, &g) != 0)
            return bad(err, origin, "its normalizer_spec is cut short");
        if (g.num == 2 && g.wire == 2 && g.len) {
            m->charsmap = g.data;
            m->charsmap_len = g.len;
        }
    }
    return WEFT_OK;
}

/* normalizer_spec {name: "identity", add_dummy_prefix: false, remove_extra_whitespaces: false,
 * escape_whitespaces: false} */
static const uint8_t identity_spec[] = {0x1A, 0x10, 0x0A, 0x08, 'i', 'd', 'e', 'n', 't', 'i',
                                        't', 'y', 0x18, 0x00, 0x20, 0x00, 0x28, 0x00};

weft_status_t weft_spm_model_parse(const void *bytes, size_t len, const char *origin,
                                   struct weft_spm_model *out, struct weft_error *err)
{
    struct weft_spm_model m = {0};
    struct pb r = {bytes, (const uint8_t *)bytes + len};
    struct pb_field f;
    size_t n_pieces = 0;
    while (r.p < r.end) { /* count first, then fill */
        if (pb_next(&r, &f) != 0)
            return bad(err, origin, "cut short or not protobuf");
        n_pieces += f.num == 1 && f.wire == 2;
    }
    if (n_pieces == 0 || n_pieces > (1u << 24))
        return bad(err, origin, n_pieces ? "too many pieces" : "no pieces");
    m.pieces = weft_calloc(n_pieces, sizeof(*m.pieces));
    m.identity = weft_malloc(len + sizeof(identity_spec));
    if (!m.pieces || !m.identity) {
        weft_spm_model_cleanup(&m);
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    }
    weft_status_t st = WEFT_OK;
    r = (struct pb){bytes, (const uint8_t *)bytes + len};
    while (st == WEFT_OK && r.p < r.end) {
        (void)pb_next(&r, &f); /* well-formed: walked above */
        if (f.num == 1 && f.wire == 2)
            st = parse_piece(&f, &m.pieces[m.n++], origin, err);
        else if (f.num == 3 && f.wire == 2)
            st = parse_normalizer(&f, &m, origin, err);
        if (f.num != 3 && f.num != 5) { /* the normalisers are replaced */
            memcpy(m.identity + m.identity_len, f.start, (size_t)(f.stop - f.start));
            m.identity_len += (size_t)(f.stop - f.start);
        }
    }
    if (st != WEFT_OK) {
        weft_spm_model_cleanup(&m);
        return st;
    }
    memcpy(m.identity + m.identity_len, identity_spec, sizeof(identity_spec));
    m.identity_len += sizeof(identity_spec);
    *out = m;
    return WEFT_OK;
}

void weft_spm_model_cleanup(struct weft_spm_model *m)
{
    weft_free(m->pieces);
    weft_free(m->identity);
    *m = (struct weft_spm_model){0};
}
