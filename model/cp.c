/* Context-parallel splits and layout checks (see cp.h). */
#include "model/cp.h"

#include "common/log.h"

void weft_cp_chunk(int64_t s, int n, int i, int64_t *begin_p, int64_t *len_p)
{
    int64_t base = s / n, extra = s % n;
    *len_p = base + (i < extra ? 1 : 0);
    *begin_p = (int64_t)i * base + (i < extra ? i : extra);
}

weft_status_t weft_cp_check(const struct weft_cp_layout *cp, bool ulysses_anything,
                            bool ring_anything, int64_t s_txt, int64_t s_img, int64_t heads_tp)
{
    if (cp->ring < 1 || cp->ulysses < 1) {
        WEFT_LOG_ERROR("plan", "ring_degree %d and ulysses_degree %d must be at least 1",
                       cp->ring, cp->ulysses);
        return WEFT_ERR_CONFIG;
    }
    if (ulysses_anything && cp->ulysses < 2) {
        WEFT_LOG_ERROR("plan", "ulysses_anything needs ulysses_degree > 1 (it is %d)",
                       cp->ulysses);
        return WEFT_ERR_CONFIG;
    }
    if (ring_anything && cp->ring < 2) {
        WEFT_LOG_ERROR("plan", "ring_anything needs ring_degree > 1 (it is %d)", cp->ring);
        return WEFT_ERR_CONFIG;
    }
    const int w = cp->ring * cp->ulysses;
    const char *flag = cp->ulysses > 1 ? "ulysses_anything" : "ring_anything";
    if (!cp->anything && w > 1) {
        const struct {
            const char *what;
            int64_t len;
        } seq[] = {{"text", s_txt}, {"image", s_img}};
        for (int i = 0; i < 2; i++) {
            if (seq[i].len % w != 0) {
                WEFT_LOG_ERROR("plan", "%s sequence length %lld does not divide by the "
                                       "context-parallel degree %d (ring %d x ulysses %d); set "
                                       "[parallel] %s = true to split it unevenly",
                               seq[i].what, (long long)seq[i].len, w, cp->ring, cp->ulysses,
                               flag);
                return WEFT_ERR_CONFIG;
            }
        }
        if (heads_tp % cp->ulysses != 0) {
            WEFT_LOG_ERROR("plan", "%lld heads per tensor-parallel rank do not divide by "
                                   "ulysses_degree %d; set [parallel] ulysses_anything = true "
                                   "to split them unevenly", (long long)heads_tp, cp->ulysses);
            return WEFT_ERR_CONFIG;
        }
    }
    if (s_img < w || (s_txt > 0 && s_txt < w && !cp->anything)) {
        WEFT_LOG_ERROR("plan", "%lld image tokens cannot give each of %d context-parallel ranks "
                               "one", (long long)s_img, w);
        return WEFT_ERR_CONFIG;
    }
    if (heads_tp < cp->ulysses) {
        WEFT_LOG_ERROR("plan", "%lld heads per tensor-parallel rank are fewer than "
                               "ulysses_degree %d", (long long)heads_tp, cp->ulysses);
        return WEFT_ERR_CONFIG;
    }
    return WEFT_OK;
}
