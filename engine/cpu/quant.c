/* quant.c: q8/q4 weight quantizers, the activation quantizer, and the integer dot-product
 * kernels over them (quant.h, kernels.h mm_q8/mm_q4): plain C, AVX2 and AVX-512 VNNI.
 *
 * The kernels follow one scheme at every level: the activations are quantized once per
 * projection to int8 per group of 32 (fl_qx_quantize); a group's product is an exact int32
 * dot product of the quants, scaled by the weight's and the activation's group scales and
 * added to a float sum. Each weight group is read once for all rows of the tile (4 rows at
 * a time): at decode sizes the product is bound by reading the weights. */
#include "quant.h"

#include <math.h>
#include <string.h>

#include "kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define FL_HAVE_X86 1
#include <immintrin.h>
#define FL_QAVX2 __attribute__((target("avx2,fma")))
#define FL_QVNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define FL_INLINE inline __attribute__((always_inline))
#endif

/* ---------------------------------------------------------------- quantizers */

/* The smallest f16 (bit pattern, sign clear) whose value is >= a, for 0 <= a <= 65504;
 * -1 when a is larger (or NaN). Positive f16 bit patterns order like their values, so
 * truncating and stepping up once is enough. */
static int fl_f16_up(float a)
{
    if (!(a <= 65504.0f))
        return -1;
    uint32_t u;
    memcpy(&u, &a, sizeof u);
    int ex = (int)((u >> 23) & 0xff) - 127;
    uint16_t h;
    if (ex >= -14)
        h = (uint16_t)(((ex + 15) << 10) | ((u >> 13) & 0x3ff));
    else
        h = (uint16_t)(a * 16777216.0f); /* subnormal: units of 2^-24, exact scaling */
    if (fl_f16_to_f32(h) < a)
        h++;
    return h;
}

/* v rounded to nearest (ties to even) and clamped to [-lim, lim]; NaN -> 0, so the int
 * conversion is defined for any input. Adding and subtracting 1.5 * 2^23 rounds |v| < 2^22
 * in plain f32 arithmetic: branch-free, so the compiler vectorizes the loops, and the same
 * result everywhere (roundf is a libm call at the baseline ISA). */
static inline int fl_qround(float v, int lim)
{
    v = v > (float)lim ? (float)lim : v;
    v = v < (float)-lim ? (float)-lim : v;
    v = v == v ? v : 0.0f;
    return (int)((v + 12582912.0f) - 12582912.0f);
}

static int fl_q_check(const float *x, int k, int j, fl_err *e)
{
    if (k <= 0 || k % FL_QG)
        return fl_err_set(e, FL_EINVAL, "quantize: row length %d is not a positive multiple of %d",
                          k, FL_QG);
    for (int c = 0; c < k; c++)
        if (!isfinite(x[c]))
            return fl_err_set(e, FL_EINVAL, "quantize: row %d column %d is not finite", j, c);
    return 0;
}

int fl_q8_quantize(int8_t *q, uint16_t *d, const float *x, int n, int k, fl_err *e)
{
    int G = k / FL_QG;
    for (int j = 0; j < n; j++) {
        const float *xr = x + (size_t)j * k;
        int rc = fl_q_check(xr, k, j, e);
        if (rc)
            return rc;
        for (int g = 0; g < G; g++) {
            const float *xg = xr + g * FL_QG;
            float amax = 0;
            for (int c = 0; c < FL_QG; c++)
                amax = fabsf(xg[c]) > amax ? fabsf(xg[c]) : amax;
            int h = fl_f16_up(amax / 127.0f);
            if (h < 0)
                return fl_err_set(e, FL_EINVAL,
                                  "quantize q8: row %d group %d: |x| = %g beyond the f16 scale range",
                                  j, g, (double)amax);
            if (h == 0 && amax > 0)
                h = 1; /* amax / 127 underflowed f32: the smallest scale still bounds the error */
            d[(size_t)j * G + g] = (uint16_t)h;
            float dv = fl_f16_to_f32((uint16_t)h);
            int8_t *qg = q + (size_t)j * k + g * FL_QG;
            for (int c = 0; c < FL_QG; c++)
                qg[c] = (int8_t)(dv > 0 ? fl_qround(xg[c] / dv, 127) : 0);
        }
    }
    return 0;
}

void fl_q8_dequantize(float *x, const int8_t *q, const uint16_t *d, int n, int k)
{
    int G = k / FL_QG;
    for (int j = 0; j < n; j++)
        for (int g = 0; g < G; g++) {
            float dv = fl_f16_to_f32(d[(size_t)j * G + g]);
            for (int c = 0; c < FL_QG; c++) {
                size_t o = (size_t)j * k + g * FL_QG + c;
                x[o] = dv * q[o];
            }
        }
}

int fl_q4_quantize(uint8_t *q, uint16_t *d, const float *x, int n, int k, fl_err *e)
{
    int G = k / FL_QG;
    for (int j = 0; j < n; j++) {
        const float *xr = x + (size_t)j * k;
        int rc = fl_q_check(xr, k, j, e);
        if (rc)
            return rc;
        for (int g = 0; g < G; g++) {
            const float *xg = xr + g * FL_QG;
            float mx = 0;
            for (int c = 0; c < FL_QG; c++)
                if (fabsf(xg[c]) > fabsf(mx))
                    mx = xg[c];
            int h = fl_f16_up(fabsf(mx) / 8.0f);
            if (h < 0)
                return fl_err_set(e, FL_EINVAL,
                                  "quantize q4: row %d group %d: |x| = %g beyond the f16 scale range",
                                  j, g, (double)fabsf(mx));
            if (h == 0 && mx != 0)
                h = 1;
            if (mx > 0)
                h |= 0x8000; /* d = mx / -8: the largest magnitude lands on nibble 0 */
            d[(size_t)j * G + g] = (uint16_t)h;
            float dv = fl_f16_to_f32((uint16_t)h);
            uint8_t *qg = q + (size_t)j * (k / 2) + g * (FL_QG / 2);
            for (int b = 0; b < FL_QG / 2; b++) {
                int lo = dv != 0 ? fl_qround(xg[b] / dv, 8) + 8 : 8;
                int hi = dv != 0 ? fl_qround(xg[b + 16] / dv, 8) + 8 : 8;
                lo = lo > 15 ? 15 : lo;
                hi = hi > 15 ? 15 : hi;
                qg[b] = (uint8_t)(lo | hi << 4);
            }
        }
    }
    return 0;
}

void fl_q4_dequantize(float *x, const uint8_t *q, const uint16_t *d, int n, int k)
{
    int G = k / FL_QG;
    for (int j = 0; j < n; j++)
        for (int g = 0; g < G; g++) {
            float dv = fl_f16_to_f32(d[(size_t)j * G + g]);
            const uint8_t *qg = q + (size_t)j * (k / 2) + g * (FL_QG / 2);
            float *xg = x + (size_t)j * k + g * FL_QG;
            for (int b = 0; b < FL_QG / 2; b++) {
                xg[b] = dv * (float)((qg[b] & 15) - 8);
                xg[b + 16] = dv * (float)((qg[b] >> 4) - 8);
            }
        }
}

size_t fl_qx_bytes(int m, int k) { return (size_t)m * 2 * (size_t)k; }

void fl_qx_quantize(void *qx, const float *x, int ldx, int m, int k)
{
    for (int i = 0; i < m; i++) {
        int8_t *qr = (int8_t *)qx + (size_t)i * 2 * k;
        float *dr = (float *)(void *)(qr + k);
        const float *xr = x + (size_t)i * ldx;
        for (int g = 0; g < k / FL_QG; g++) {
            const float *xg = xr + g * FL_QG;
            float amax = 0;
            for (int c = 0; c < FL_QG; c++)
                amax = fabsf(xg[c]) > amax ? fabsf(xg[c]) : amax;
            float dx = amax / 127.0f;
            for (int c = 0; c < FL_QG; c++)
                qr[g * FL_QG + c] = (int8_t)(dx > 0 ? fl_qround(xg[c] / dx, 127) : 0);
            for (int l = 0; l < 8; l++)
                dr[g * 8 + l] = dx;
        }
    }
}

/* ---------------------------------------------------------------- plain C kernels */

/* Every output: s += (float)I_g * (dw_g * dx_g) over groups g in order. */
static void fl_mm_q_c(float *y, int ldy, const int8_t *qx, int m, const void *wq,
                      const uint16_t *wd, int n, int k, bool acc, bool q4)
{
    int G = k / FL_QG;
    int8_t w[FL_QG];
    for (int j = 0; j < n; j++) {
        for (int i = 0; i < m; i++)
            if (!acc)
                y[(size_t)i * ldy + j] = 0;
        for (int g = 0; g < G; g++) {
            if (q4) {
                const uint8_t *b = (const uint8_t *)wq + (size_t)j * (k / 2) + g * 16;
                for (int c = 0; c < 16; c++) {
                    w[c] = (int8_t)((b[c] & 15) - 8);
                    w[c + 16] = (int8_t)((b[c] >> 4) - 8);
                }
            } else {
                memcpy(w, (const int8_t *)wq + (size_t)j * k + g * FL_QG, FL_QG);
            }
            float dw = fl_f16_to_f32(wd[(size_t)j * G + g]);
            for (int i = 0; i < m; i++) {
                const int8_t *xg = qx + (size_t)i * 2 * k + g * FL_QG;
                const float *dx = (const float *)(const void *)(qx + (size_t)i * 2 * k + k);
                int32_t s = 0;
                for (int c = 0; c < FL_QG; c++)
                    s += (int32_t)xg[c] * w[c];
                y[(size_t)i * ldy + j] += (float)s * (dw * dx[g * 8]);
            }
        }
    }
}

static void fl_mm_q8_c(float *y, int ldy, const int8_t *qx, int m, const int8_t *wq,
                       const uint16_t *wd, int n, int k, bool acc)
{
    fl_mm_q_c(y, ldy, qx, m, wq, wd, n, k, acc, false);
}

static void fl_mm_q4_c(float *y, int ldy, const int8_t *qx, int m, const uint8_t *wq,
                       const uint16_t *wd, int n, int k, bool acc)
{
    fl_mm_q_c(y, ldy, qx, m, wq, wd, n, k, acc, true);
}

#ifdef FL_HAVE_X86
/* ---------------------------------------------------------------- AVX2 kernels */

/* One group of 32 weights as int8 (q4: nibble - 8, weights in order). */
FL_QAVX2 static FL_INLINE __m256i fl_w32_avx2(const void *wq, int k, int j, int g, bool q4)
{
    if (!q4)
        return _mm256_loadu_si256((const __m256i *)((const int8_t *)wq + (size_t)j * k + g * 32));
    __m128i b = _mm_loadu_si128((const __m128i *)((const uint8_t *)wq + (size_t)j * (k / 2) + g * 16));
    __m128i f = _mm_set1_epi8(15);
    __m128i lo = _mm_and_si128(b, f), hi = _mm_and_si128(_mm_srli_epi16(b, 4), f);
    return _mm256_sub_epi8(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(8));
}

FL_QAVX2 static FL_INLINE float fl_qhsum8(__m256 v)
{
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

/* R rows x C weight rows; each (row, weight row) output takes the same instructions in
 * the same order in every tile shape: acc += float(I) * (dw * dx) per group, 8 lanes. The
 * product of a group uses the sign trick: maddubs(|w|, x * sign(w)) (|x|, |w| <= 128 keep
 * the int16 pair sums below 2^15). */
FL_QAVX2 static FL_INLINE void fl_tile_avx2(float *y, int ldy, const int8_t *qx, int k,
                                            const void *wq, const uint16_t *wd, int j, int R,
                                            int C, bool acc, bool q4)
{
    int G = k / 32;
    __m256 a[2][4];
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 4")
        for (int c = 0; c < C; c++)
            a[r][c] = _mm256_setzero_ps();
    const __m256i one = _mm256_set1_epi16(1);
    for (int g = 0; g < G; g++) {
        __m256i w[4], aw[4];
        __m256 dw[4];
        _Pragma("GCC unroll 4")
        for (int c = 0; c < C; c++) {
            w[c] = fl_w32_avx2(wq, k, j + c, g, q4);
            aw[c] = _mm256_abs_epi8(w[c]);
            dw[c] = _mm256_set1_ps(fl_f16_to_f32(wd[(size_t)(j + c) * G + g]));
        }
        _Pragma("GCC unroll 4")
        for (int r = 0; r < R; r++) {
            const int8_t *xr = qx + (size_t)r * 2 * k;
            __m256i xv = _mm256_loadu_si256((const __m256i *)(xr + g * 32));
            __m256 dx = _mm256_broadcast_ss((const float *)(const void *)(xr + k) + g * 8);
            _Pragma("GCC unroll 4")
            for (int c = 0; c < C; c++) {
                __m256i p = _mm256_maddubs_epi16(aw[c], _mm256_sign_epi8(xv, w[c]));
                __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, one));
                a[r][c] = _mm256_fmadd_ps(f, _mm256_mul_ps(dw[c], dx), a[r][c]);
            }
        }
    }
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 4")
        for (int c = 0; c < C; c++) {
            float *yp = y + (size_t)r * ldy + c, s = fl_qhsum8(a[r][c]);
            *yp = acc ? *yp + s : s;
        }
}

FL_QAVX2 static FL_INLINE void fl_mm_q_avx2(float *y, int ldy, const int8_t *qx, int m,
                                            const void *wq, const uint16_t *wd, int n, int k,
                                            bool acc, bool q4)
{
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        int i = 0;
        for (; i + 2 <= m; i += 2)
            fl_tile_avx2(y + (size_t)i * ldy + j, ldy, qx + (size_t)i * 2 * k, k, wq, wd, j, 2, 4, acc, q4);
        for (; i < m; i++)
            fl_tile_avx2(y + (size_t)i * ldy + j, ldy, qx + (size_t)i * 2 * k, k, wq, wd, j, 1, 4, acc, q4);
    }
    for (; j < n; j++)
        for (int i = 0; i < m; i++)
            fl_tile_avx2(y + (size_t)i * ldy + j, ldy, qx + (size_t)i * 2 * k, k, wq, wd, j, 1, 1, acc, q4);
}

FL_QAVX2 static void fl_mm_q8_avx2(float *y, int ldy, const int8_t *qx, int m, const int8_t *wq,
                                   const uint16_t *wd, int n, int k, bool acc)
{
    fl_mm_q_avx2(y, ldy, qx, m, wq, wd, n, k, acc, false);
}

FL_QAVX2 static void fl_mm_q4_avx2(float *y, int ldy, const int8_t *qx, int m, const uint8_t *wq,
                                   const uint16_t *wd, int n, int k, bool acc)
{
    fl_mm_q_avx2(y, ldy, qx, m, wq, wd, n, k, acc, true);
}

/* ---------------------------------------------------------------- AVX-512 VNNI kernels */

/* Two groups (64 weights, in order) as int8, from group g; `one`: only group g (the odd
 * last group of a row), the upper half zero. */
FL_QVNNI static FL_INLINE __m512i fl_w64_vnni(const void *wq, int k, int j, int g, bool one,
                                              bool q4)
{
    if (!q4) {
        const int8_t *p = (const int8_t *)wq + (size_t)j * k + g * 32;
        return one ? _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)p))
                   : _mm512_loadu_si512(p);
    }
    const uint8_t *p = (const uint8_t *)wq + (size_t)j * (k / 2) + g * 16;
    __m256i b = one ? _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)p))
                    : _mm256_loadu_si256((const __m256i *)p);
    __m256i f = _mm256_set1_epi8(15);
    __m256i lo = _mm256_and_si256(b, f), hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), f);
    /* 128-bit lanes [lo g, lo g+1, hi g, hi g+1] -> [lo g, hi g, lo g+1, hi g+1] */
    __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    z = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
    z = _mm512_sub_epi8(z, _mm512_set1_epi8(8));
    return one ? _mm512_maskz_mov_epi8(0xffffffffull, z) : z;
}

/* vpdpbusd multiplies unsigned by signed bytes: the activations go in as x + 128 (one xor),
 * and the weight side starts each sum at -128 * sum(w), computed once per weight vector
 * for all rows. Lanes 0-7 hold group g, lanes 8-15 group g + 1; each lane's int32 is exact
 * and so is its float (|sum| < 2^24). */
FL_QVNNI static FL_INLINE void fl_tile_vnni(float *y, int ldy, const int8_t *qx, int k,
                                            const void *wq, const uint16_t *wd, int j, int R,
                                            int C, bool acc, bool q4)
{
    int G = k / 32;
    __m512 a[4][4];
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 4")
        for (int c = 0; c < C; c++)
            a[r][c] = _mm512_setzero_ps();
    const __m512i x80 = _mm512_set1_epi8((char)0x80);
    const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    for (int g = 0; g < G; g += 2) {
        bool one = g + 1 == G;
        __m512i w[4], nc[4];
        __m512 dw[4];
        _Pragma("GCC unroll 4")
        for (int c = 0; c < C; c++) {
            w[c] = fl_w64_vnni(wq, k, j + c, g, one, q4);
            nc[c] = _mm512_sub_epi32(_mm512_setzero_si512(),
                                     _mm512_dpbusd_epi32(_mm512_setzero_si512(), x80, w[c]));
            const uint16_t *dp = wd + (size_t)(j + c) * G + g;
            uint32_t d2 = one ? dp[0] : (uint32_t)dp[0] | (uint32_t)dp[1] << 16;
            dw[c] = _mm512_permutexvar_ps(
                idx, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128((int)d2))));
        }
        _Pragma("GCC unroll 4")
        for (int r = 0; r < R; r++) {
            const int8_t *xr = qx + (size_t)r * 2 * k;
            const float *dxp = (const float *)(const void *)(xr + k) + g * 8;
            __m512i xv = one ? _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(xr + g * 32)))
                             : _mm512_loadu_si512(xr + g * 32);
            __m512 dx = one ? _mm512_maskz_loadu_ps(0xff, dxp) : _mm512_loadu_ps(dxp);
            xv = _mm512_xor_si512(xv, x80);
            _Pragma("GCC unroll 4")
            for (int c = 0; c < C; c++) {
                __m512 f = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(nc[c], xv, w[c]));
                a[r][c] = _mm512_fmadd_ps(f, _mm512_mul_ps(dw[c], dx), a[r][c]);
            }
        }
    }
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 4")
        for (int c = 0; c < C; c++) {
            float *yp = y + (size_t)r * ldy + c, s = _mm512_reduce_add_ps(a[r][c]);
            *yp = acc ? *yp + s : s;
        }
}

FL_QVNNI static FL_INLINE void fl_mm_q_vnni(float *y, int ldy, const int8_t *qx, int m,
                                            const void *wq, const uint16_t *wd, int n, int k,
                                            bool acc, bool q4)
{
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        int i = 0;
        for (; i + 4 <= m; i += 4)
            fl_tile_vnni(y + (size_t)i * ldy + j, ldy, qx + (size_t)i * 2 * k, k, wq, wd, j, 4, 4, acc, q4);
        for (; i < m; i++)
            fl_tile_vnni(y + (size_t)i * ldy + j, ldy, qx + (size_t)i * 2 * k, k, wq, wd, j, 1, 4, acc, q4);
    }
    for (; j < n; j++)
        for (int i = 0; i < m; i++)
            fl_tile_vnni(y + (size_t)i * ldy + j, ldy, qx + (size_t)i * 2 * k, k, wq, wd, j, 1, 1, acc, q4);
}

FL_QVNNI static void fl_mm_q8_vnni(float *y, int ldy, const int8_t *qx, int m, const int8_t *wq,
                                   const uint16_t *wd, int n, int k, bool acc)
{
    fl_mm_q_vnni(y, ldy, qx, m, wq, wd, n, k, acc, false);
}

FL_QVNNI static void fl_mm_q4_vnni(float *y, int ldy, const int8_t *qx, int m, const uint8_t *wq,
                                   const uint16_t *wd, int n, int k, bool acc)
{
    fl_mm_q_vnni(y, ldy, qx, m, wq, wd, n, k, acc, true);
}
#endif /* FL_HAVE_X86 */

void fl_quant_kernels_init(fl_kernels *kk, const char *want)
{
    kk->qname = "plain C";
    kk->mm_q8 = fl_mm_q8_c;
    kk->mm_q4 = fl_mm_q4_c;
    if (!want)
        want = "";
#ifdef FL_HAVE_X86
    __builtin_cpu_init();
    if (strcmp(want, "plain") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        kk->qname = "AVX2";
        kk->mm_q8 = fl_mm_q8_avx2;
        kk->mm_q4 = fl_mm_q4_avx2;
    }
    if (!strcmp(want, "") && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512vnni")) {
        kk->qname = "AVX-512 VNNI";
        kk->mm_q8 = fl_mm_q8_vnni;
        kk->mm_q4 = fl_mm_q4_vnni;
    }
#endif
}
