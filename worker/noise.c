/* Philox4x32-10 (Salmon et al., SC'11) and Box-Muller in double precision. Counter c gives
 * four uniforms, hence the normals 4c..4c+3. */
#include "worker/noise.h"

#include <math.h>

void weft_philox4x32(uint32_t ctr[4], uint32_t key0, uint32_t key1)
{
    const uint32_t m0 = 0xD2511F53u, m1 = 0xCD9E8D57u, w0 = 0x9E3779B9u, w1 = 0xBB67AE85u;
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)m0 * ctr[0], p1 = (uint64_t)m1 * ctr[2];
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        uint32_t n0 = hi1 ^ ctr[1] ^ key0, n2 = hi0 ^ ctr[3] ^ key1;
        ctr[0] = n0, ctr[1] = lo1, ctr[2] = n2, ctr[3] = lo0;
        key0 += w0, key1 += w1;
    }
}

/* (0, 1], never 0 so the logarithm is finite */
static double uniform(uint32_t x)
{
    return ((double)x + 1.0) / 4294967296.0;
}

void weft_noise_normal(uint64_t seed, int64_t first, int64_t n, float *out)
{
    const uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    int64_t i = first, end = first + n;
    while (i < end) {
        uint64_t c = (uint64_t)i / 4;
        uint32_t ctr[4] = {(uint32_t)c, (uint32_t)(c >> 32), 0x77656674u /* "weft" */, 0};
        weft_philox4x32(ctr, k0, k1);
        double r0 = sqrt(-2.0 * log(uniform(ctr[0]))), a0 = 2.0 * M_PI * uniform(ctr[1]);
        double r1 = sqrt(-2.0 * log(uniform(ctr[2]))), a1 = 2.0 * M_PI * uniform(ctr[3]);
        double v[4] = {r0 * cos(a0), r0 * sin(a0), r1 * cos(a1), r1 * sin(a1)};
        for (int64_t k = i % 4; k < 4 && i < end; k++, i++)
            out[i - first] = (float)v[k];
    }
}
