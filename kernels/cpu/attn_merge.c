/* Merge two partial attention results by their log-sum-exps, in f32 (ring attention):
 * with m = max(lse, lse_i): w = e^(lse-m), w_i = e^(lse_i-m), out = (w out + w_i out_i)/(w+w_i),
 * lse = m + log(w + w_i). Rows with lse = -inf (no keys yet) take the other side as is. */
#include "kernels/cpu/cpu.h"

struct merge_arg {
    float *out, *lse;
    const float *out_i, *lse_i;
    int64_t ldo, ldi, heads, d;
};

static void merge_rows(void *varg, int64_t b, int64_t e, int thread)
{
    (void)thread;
    const struct merge_arg *a = varg;
    for (int64_t r = b; r < e; r++) {
        for (int64_t h = 0; h < a->heads; h++) {
            float *o = a->out + r * a->ldo + h * a->d;
            const float *oi = a->out_i + r * a->ldi + h * a->d;
            float l = a->lse[r * a->heads + h], li = a->lse_i[r * a->heads + h];
            if (li == -INFINITY)
                continue;
            if (l == -INFINITY) {
                memcpy(o, oi, (size_t)a->d * sizeof(float));
                a->lse[r * a->heads + h] = li;
                continue;
            }
            float m = l > li ? l : li;
            float w = expf(l - m), wi = expf(li - m), sum = w + wi;
            float cw = w / sum, cwi = wi / sum;
            for (int64_t j = 0; j < a->d; j++)
                o[j] = cw * o[j] + cwi * oi[j];
            a->lse[r * a->heads + h] = m + logf(sum);
        }
    }
}

void cpu_attn_merge(struct weft_kctx *ctx, float *out, int64_t ldo, float *lse,
                    const float *out_i, int64_t ldi, const float *lse_i, int64_t rows,
                    int64_t heads, int64_t d)
{
    struct merge_arg a = {out, lse, out_i, lse_i, ldo, ldi, heads, d};
    cpu_parallel(ctx, rows, 1 + 4096 / (heads * d + 1), merge_rows, &a);
}
