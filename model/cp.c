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
