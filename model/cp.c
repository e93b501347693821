/* Context-parallel splits and layout checks (see cp.h). */
#include "model/cp.h"

#include "common/error.h"

void weft_cp_chunk(int64_t s, int n, int i, int64_t *begin_p, int64_t *len_p)
{
    int64_t base = s / n, extra = s % n;
    *len_p = base + (i < extra ? 1 : 0);
    *begin_p = (int64_t)i * base + (i < extra ? i : extra);
}

weft_status_t weft_cp_check(const struct weft_cp_layout *cp, bool ulysses_anything,
                            bool ring_anything, int64_t s_txt, int64_t s_img, int64_t heads_tp,
                            struct weft_error *err)
{
    if (cp->ring < 1 || cp->ulysses < 1)
        return weft_error_refuse_or_log(err, WEFT_ERR_CONFIG, "plan",
                                        "ring_degree %d and ulysses_degree %d must be at least 1",
                                        cp->ring, cp->ulysses);
    if (ulysses_anything && cp->ulysses < 2)
        return weft_error_refuse_or_log(err, WEFT_ERR_CONFIG, "plan",
                                        "ulysses_anything needs ulysses_degree > 1 (it is %d)",
                                        cp->ulysses);
    if (ring_anything && cp->ring < 2)
        return weft_error_refuse_or_log(err, WEFT_ERR_CONFIG, "plan",
                                        "ring_anything needs ring_degree > 1 (it is %d)", cp->ring);
    const int w = cp->ring * cp->ulysses;
    const char *flag = cp->ulysses > 1 ? "ulysses_anything" : "ring_anything";
    if (!cp->anything && w > 1) {
        const struct {
            const char *what;
            int64_t len;
        } seq[] = {{"text", s_txt}, {"image", s_img}};
        for (int i = 0; i < 2; i++) {
            if (seq[i].len % w != 0)
                return weft_error_refuse_or_log(
                    err, WEFT_ERR_CONFIG, "plan",
                    "%s sequence length %lld does not divide by the "
                    "context-parallel degree %d (ring %d x ulysses %d); set "
                    "[parallel] %s = true to split it unevenly",
                    seq[i].what, (long long)seq[i].len, w, cp->ring, cp->ulysses, flag);
        }
        if (heads_tp % cp->ulysses != 0)
            return weft_error_refuse_or_log(
                err, WEFT_ERR_CONFIG, "plan",
                "%lld heads per tensor-parallel rank do not divide by "
                "ulysses_degree %d; set [parallel] ulysses_anything = true "
                "to split them unevenly",
                (long long)heads_tp, cp->ulysses);
    }
    if (s_img < w || (s_txt > 0 && s_txt < w && !cp->anything))
        return weft_error_refuse_or_log(
            err, WEFT_ERR_CONFIG, "plan",
            "%lld image tokens cannot give each of %d context-parallel ranks "
            "one",
            (long long)s_img, w);
    if (heads_tp < cp->ulysses)
        return weft_error_refuse_or_log(err, WEFT_ERR_CONFIG, "plan",
                                        "%lld heads per tensor-parallel rank are fewer than "
                                        "ulysses_degree %d",
                                        (long long)heads_tp, cp->ulysses);
    return WEFT_OK;
}

static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

size_t weft_cp_attn_sizes(const struct weft_cp_layout *cp, int ring_rank, int ulysses_rank,
                          int64_t heads, int64_t d, const int64_t *rows,
                          int64_t sizes[WEFT_CP_ATTN_BUFFERS])
{
    const int U = cp->ulysses, R = cp->ring;
    int64_t hmax = 0, gmax = 0, total = 0;
    for (int i = 0; i < U; i++) {
        int64_t h0, hn;
        weft_cp_chunk(heads, U, i, &h0, &hn);
        hmax = max64(hmax, hn);
    }
    for (int rr = 0; rr < R; rr++) {
        int64_t g = 0;
        for (int i = 0; i < U; i++)
            g += rows[rr * U + i];
        gmax = max64(gmax, g);
        total += g;
    }
    const int64_t S = rows[ring_rank * U + ulysses_rank];
    const bool gather = R > 1 && cp->rotation == WEFT_RING_ALLGATHER;
    const bool p2p = R > 1 && cp->rotation == WEFT_RING_P2P;
    const int64_t s[WEFT_CP_ATTN_BUFFERS] = {
        U > 1 ? 3 * max64(S * heads, gmax * hmax) * d : 0, /* send */
        U > 1 ? 3 * gmax * hmax * d : 0,                    /* recv */
        gmax * hmax * d, gmax * hmax * d, gmax * hmax * d,  /* qg kg vg */
        gmax * hmax * d,                                     /* og */
        gather ? total * hmax * d : 0, gather ? total * hmax * d : 0,
        p2p ? 2 * gmax * hmax * d : 0, p2p ? 2 * gmax * hmax * d : 0,
        p2p ? gmax * hmax * d : 0, p2p ? gmax * hmax : 0, p2p ? gmax * hmax : 0,
    };
    size_t floats = 0;
    for (int i = 0; i < WEFT_CP_ATTN_BUFFERS; i++) {
        if (sizes)
            sizes[i] = s[i];
        floats += ((size_t)s[i] + 15) / 16 * 16;
    }
    return floats * sizeof(float);
}
