/* quant.c: q8/q4 weight quantizers, the activation quantizer, and the integer dot-product
 * kernels over them (quant.h, kernels.h mm_q8/mm_q4): plain C, AVX2, AVX-512 VNNI and, for
 * 16 activation rows and more, AMX-INT8.
 *
 * The kernels follow one scheme at every level: the activations are quantized once per
 * projection to int8 per group of 32 (fl_qx_quantize); a group's product is an exact int32
 * dot product of the quants, scaled by the weight's and the activation's group scales and
 * added to a float sum, in the order kernels.h specifies. The weights are in the repacked
 * layout (quant.h): a vector holds 16 weight rows x 4 columns, so each lane accumulates
 * its own row's group sum and the scaling is paid once per group, not per vector. Each
 * weight group is read once for up to 8 (AVX-512) or 4 (AVX2) activation rows: at decode
 * sizes the product is bound by reading the weights. */
#include "quant.h"

#include <math.h>
#include <string.h>

#include "kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define FL_HAVE_X86 1
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define FL_QAVX2 __attribute__((target("avx2,fma,f16c")))
#define FL_QVNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define FL_INLINE inline __attribute__((always_inline))
/* Pins v to a register at this point of the code: the AVX2 kernels' sums are chains of
 * 16/32-bit adds, which GCC otherwise reassociates, computing every product of a group
 * first and spilling them (at 4 activation rows 100+ ymm stack moves per group, which
 * made the q4 kernel bound by loads and stores; with the pin, 1.3x faster in cache). A
 * single chain (one activation row) is left free: there the reassociation pays. */
#define FL_KEEP(v) __asm__("" : "+x"(v))
#endif

/* ---------------------------------------------------------------- repacking */

size_t fl_qr_quant_bytes(int n, int k, bool q4) { return (size_t)fl_qr_rows(n) * k / (q4 ? 2 : 1); }
size_t fl_qr_scale_count(int n, int k) { return (size_t)fl_qr_rows(n) * (k / FL_QG); }

/* gb: bytes of a group in a plain row (32 or 16); x: XOR applied to each byte; pad: the
 * byte a padding row gets (a zero weight). */
static void fl_qr_repack(uint8_t *rq, uint16_t *rd, const uint8_t *q, const uint16_t *d, int n,
                         int k, int gb, uint8_t x, uint8_t pad)
{
    int G = k / FL_QG, rows = fl_qr_rows(n);
    size_t rowb = (size_t)G * gb;
    for (int t = 0; t < rows / FL_QR; t++)
        for (int g = 0; g < G; g++) {
            uint8_t *blk = rq + ((size_t)t * G + g) * FL_QR * gb;
            uint16_t *sc = rd + ((size_t)t * G + g) * FL_QR;
            for (int r = 0; r < FL_QR; r++) {
                int j = t * FL_QR + r;
                const uint8_t *src = q + (size_t)j * rowb + (size_t)g * gb;
                for (int c = 0; c < gb / 4; c++)
                    for (int b = 0; b < 4; b++)
                        blk[(c * FL_QR + r) * 4 + b] = j < n ? (uint8_t)(src[c * 4 + b] ^ x) : pad;
                sc[r] = j < n ? d[(size_t)j * G + g] : 0;
            }
        }
}

void fl_q8_repack(uint8_t *rq, uint16_t *rd, const int8_t *q, const uint16_t *d, int n, int k)
{
    fl_qr_repack(rq, rd, (const uint8_t *)q, d, n, k, 32, 0x80, 0x80);
}

void fl_q4_repack(uint8_t *rq, uint16_t *rd, const uint8_t *q, const uint16_t *d, int n, int k)
{
    fl_qr_repack(rq, rd, q, d, n, k, 16, 0, 0x88);
}

/* ---------------------------------------------------------------- activations */

size_t fl_qx_row_bytes(int k) { return (size_t)k + 12 * (size_t)(k / FL_QG); }
size_t fl_qx_bytes(int m, int k) { return (size_t)m * fl_qx_row_bytes(k); }

/* The per-group tail of a qx row: dx, then the two corrections (quant.h). */
static inline void fl_qx_put(uint8_t *row, int k, int g, float dx, int32_t s)
{
    int G = k / FL_QG;
    int32_t c8 = -128 * s, c4 = -8 * s;
    memcpy(row + k + 4 * (size_t)g, &dx, 4);
    memcpy(row + k + 4 * (size_t)(G + g), &c8, 4);
    memcpy(row + k + 4 * (size_t)(2 * G + g), &c4, 4);
}

void fl_qx_quantize(void *qx, const float *x, int ldx, int m, int k)
{
    for (int i = 0; i < m; i++) {
        uint8_t *row = (uint8_t *)qx + (size_t)i * fl_qx_row_bytes(k);
        int8_t *qr = (int8_t *)row;
        const float *xr = x + (size_t)i * ldx;
        for (int g = 0; g < k / FL_QG; g++) {
            const float *xg = xr + g * FL_QG;
            float amax = 0;
            for (int c = 0; c < FL_QG; c++)
                amax = fabsf(xg[c]) > amax ? fabsf(xg[c]) : amax;
            float dx = amax / 127.0f;
            int32_t s = 0;
            for (int c = 0; c < FL_QG; c++) {
                qr[g * FL_QG + c] = (int8_t)(dx > 0 ? fl_qround(xg[c] / dx, 127) : 0);
                s += qr[g * FL_QG + c];
            }
            fl_qx_put(row, k, g, dx, s);
        }
    }
}

/* ---------------------------------------------------------------- plain C kernels */

/* The arithmetic every level performs (kernels.h), one weight row and activation row at a
 * time, from the repacked bytes. */
static void fl_mm_q_c(float *y, int ldy, const void *qx, int m, const uint8_t *wq,
                      const uint16_t *wd, int n, int k, bool acc, bool q4)
{
    int G = k / FL_QG, gb = q4 ? 16 : 32;
    size_t rb = fl_qx_row_bytes(k);
    for (int j = 0; j < n; j++) {
        int t = j / FL_QR, r = j % FL_QR;
        for (int i = 0; i < m; i++) {
            const int8_t *xq = (const int8_t *)qx + (size_t)i * rb;
            float a = 0;
            for (int g = 0; g < G; g++) {
                const uint8_t *blk = wq + ((size_t)t * G + g) * FL_QR * gb;
                const int8_t *xg = xq + g * FL_QG;
                int32_t s = 0;
                for (int c = 0; c < gb / 4; c++)
                    for (int b = 0; b < 4; b++) {
                        int v = blk[(c * FL_QR + r) * 4 + b];
                        if (q4)
                            s += ((v & 15) - 8) * xg[c * 4 + b] + ((v >> 4) - 8) * xg[16 + c * 4 + b];
                        else
                            s += (v - 128) * xg[c * 4 + b];
                    }
                float dx;
                memcpy(&dx, xq + k + 4 * (size_t)g, 4);
                float p = fl_f16_to_f32(wd[((size_t)t * G + g) * FL_QR + r]) * dx;
                a = fmaf((float)s, p, a);
            }
            float *yp = y + (size_t)i * ldy + j;
            *yp = acc ? *yp + a : a;
        }
    }
}

static void fl_mm_q8_c(float *y, int ldy, const void *qx, int m, const uint8_t *wq,
                       const uint16_t *wd, int n, int k, bool acc)
{
    fl_mm_q_c(y, ldy, qx, m, wq, wd, n, k, acc, false);
}

static void fl_mm_q4_c(float *y, int ldy, const void *qx, int m, const uint8_t *wq,
                       const uint16_t *wd, int n, int k, bool acc)
{
    fl_mm_q_c(y, ldy, qx, m, wq, wd, n, k, acc, true);
}

#ifdef FL_HAVE_X86
/* Broadcast loads of the activation buffer (memcpy: the buffer mixes int8, f32 and int32). */
static FL_INLINE int32_t fl_ld32(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}
static FL_INLINE float fl_ldf(const void *p)
{
    float v;
    memcpy(&v, p, 4);
    return v;
}

/* The weights stream from DRAM once per call: the prefetcher alone left the kernels at
 * compute + memory time rather than the larger of the two (1.8-2.0x the floor at 4 rows
 * against 1.4x with this; 1-4 KB ahead measure alike, NTA/T1/T2 hints worse). Tile t+1
 * follows tile t in both planes, so "this far ahead" crosses tiles without a branch;
 * prefetches past the end do not fault. */
#ifndef FL_QPF /* overridable for experiments: -DFL_QPF=4096 -DFL_QPF_HINT=_MM_HINT_T1 */
#define FL_QPF 2048
#endif
/* The VNNI q4 kernels also prefetch FL_QPF2 bytes ahead into L2: on a Zen 5 (2 vCPUs,
 * 70 GB/s) the block-4 step's q4 projections took 0.4-0.5 ms less (up 2.78 -> 2.47, down
 * 1.41 -> 1.27 ms, means of 5 alternating rounds), while the same for q8 made every q8
 * product slower (gate|up 4.80 -> 5.13, head 4.12 -> 4.42 ms), so q8 has none, nor AVX2,
 * where it was not measured (docs/benchmarks.md, "A Zen 5 again"). */
#ifndef FL_QPF2
#define FL_QPF2 8192
#endif
#ifndef FL_QPF_HINT
#define FL_QPF_HINT _MM_HINT_T0
#endif
static FL_INLINE void fl_qprefetch(const uint8_t *wq, const uint16_t *wd, int g, bool q4)
{
#if FL_QPF > 0
    const char *pf = (const char *)(wq + (size_t)g * (q4 ? 256 : 512) + FL_QPF);
    for (int l = 0; l < (q4 ? 4 : 8); l++)
        _mm_prefetch(pf + 64 * l, FL_QPF_HINT);
    if (!(g & 1)) /* two groups' scales per line */
        _mm_prefetch((const char *)(wd + (size_t)g * FL_QR) + FL_QPF / 16, FL_QPF_HINT);
#else
    (void)wq, (void)wd, (void)g, (void)q4;
#endif
}

/* The VNNI q4 kernels' second prefetch, FL_QPF2 bytes ahead into L2 (measured on VNNI only) */
static FL_INLINE void fl_qprefetch_l2_q4(const uint8_t *wq, const uint16_t *wd, int g)
{
#if FL_QPF2 > 0
    const char *pf2 = (const char *)(wq + (size_t)g * 256 + FL_QPF2);
    for (int l = 0; l < 4; l++)
        _mm_prefetch(pf2 + 64 * l, _MM_HINT_T1);
    if (!(g & 1))
        _mm_prefetch((const char *)(wd + (size_t)g * FL_QR) + FL_QPF2 / 8, _MM_HINT_T1);
#else
    (void)wq, (void)wd, (void)g;
#endif
}

/* fl_tile2_q4_vnni reads two neighbouring tiles side by side: two streams, each of which
 * runs on in the tile after its partner (tile t + 2), the partner's tile being read already.
 * So d bytes ahead of a tile's group g is d bytes on in the tile itself, and past its end
 * one tile further on (tb bytes), with d <= tb so that it never goes two tiles past; the
 * scales (an eighth of the quants' bytes) likewise. Prefetching plainly ahead, as the
 * one-tile kernels do, sent most of the L2 prefetches (all of them at k = 1024) into the
 * partner tile and none into the next pair (docs/benchmarks.md, "Prefetching two tiles"). */
/* one prefetch of a tile's quants d bytes on, and on even groups of its scales sd bytes on */
#define FL_QPF_PAIR(D, SD, HINT)                                                                   \
    do {                                                                                           \
        size_t o_ = at + (D), s_ = sat + (SD);                                                     \
        o_ += o_ >= tb ? tb : 0;                                                                   \
        s_ += s_ >= sb ? sb : 0;                                                                   \
        for (int l = 0; l < 4; l++)                                                                \
            _mm_prefetch((const char *)wq + o_ + 64 * l, HINT);                                    \
        if (!(g & 1)) /* two groups' scales per line */                                            \
            _mm_prefetch((const char *)wd + s_, HINT);                                             \
    } while (0)
static FL_INLINE void fl_qprefetch_pair_q4(const uint8_t *wq, const uint16_t *wd, int g,
                                           size_t d1, size_t d2, size_t tb)
{
    size_t at = (size_t)g * 256, sat = (size_t)g * FL_QR * 2, sb = tb / 8;
#if FL_QPF > 0
    FL_QPF_PAIR(d1, d1 / 16, FL_QPF_HINT);
#endif
#if FL_QPF2 > 0
    FL_QPF_PAIR(d2, d2 / 8, _MM_HINT_T1);
#endif
    (void)wq, (void)wd, (void)at, (void)sat, (void)sb, (void)d1, (void)d2;
}
#undef FL_QPF_PAIR

/* ---------------------------------------------------------------- AVX2 */

/* fl_qx_quantize's arithmetic, 8 lanes at a time: the same bytes. */
FL_QAVX2 static void fl_qx_quantize_avx2(void *qx, const float *x, int ldx, int m, int k)
{
    const __m256 sgn = _mm256_set1_ps(-0.0f), lim = _mm256_set1_ps(127.0f),
                 nlim = _mm256_set1_ps(-127.0f), mag = _mm256_set1_ps(12582912.0f);
    for (int i = 0; i < m; i++) {
        uint8_t *row = (uint8_t *)qx + (size_t)i * fl_qx_row_bytes(k);
        const float *xr = x + (size_t)i * ldx;
        for (int g = 0; g < k / FL_QG; g++) {
            __m256 v[4], a = _mm256_setzero_ps();
            for (int l = 0; l < 4; l++) {
                v[l] = _mm256_loadu_ps(xr + g * FL_QG + 8 * l);
                a = _mm256_max_ps(a, _mm256_andnot_ps(sgn, v[l]));
            }
            __m128 h = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
            h = _mm_max_ps(h, _mm_movehl_ps(h, h));
            h = _mm_max_ss(h, _mm_movehdup_ps(h));
            float dx = _mm_cvtss_f32(h) / 127.0f;
            __m256i qi[4];
            __m256 dv = _mm256_set1_ps(dx);
            for (int l = 0; l < 4; l++) {
                qi[l] = _mm256_setzero_si256();
                if (dx > 0) {
                    __m256 u = _mm256_div_ps(v[l], dv);
                    u = _mm256_max_ps(_mm256_min_ps(u, lim), nlim);
                    qi[l] = _mm256_cvttps_epi32(_mm256_sub_ps(_mm256_add_ps(u, mag), mag));
                }
            }
            __m256i s = _mm256_add_epi32(_mm256_add_epi32(qi[0], qi[1]), _mm256_add_epi32(qi[2], qi[3]));
            __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
            /* packs interleave 128-bit lanes: 0-3 8-11 16-19 24-27 | 4-7 ...; undo with a
             * dword permute */
            __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
            p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *)(row + g * FL_QG), p);
            fl_qx_put(row, k, g, dx, _mm_cvtsi128_si32(s4));
        }
    }
}

/* A half tile (8 weight rows, one ymm of int32 lanes) against R activation rows; h: which
 * half. q8 uses the sign trick, maddubs(|w|, x * sign(w)) with w signed again (XOR 0x80):
 * the pair sums stay below 2^15 (|w| <= 128, |x| <= 127). q4 multiplies the nibbles
 * (<= 15) by x directly: 8 maddubs of a group sum to at most 8 * 2 * 15 * 127 < 2^15 in
 * int16, widened once per group, then the -8 * s correction. */
FL_QAVX2 static FL_INLINE void fl_half_avx2(float *y, int ldy, const uint8_t *qx, size_t rb,
                                            int k, const uint8_t *wq, const uint16_t *wd,
                                            int h, int nr, int R, bool acc, bool q4)
{
    int G = k / FL_QG;
    __m256 a[4];
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++)
        a[r] = _mm256_setzero_ps();
    const __m256i one = _mm256_set1_epi16(1), x80 = _mm256_set1_epi8((char)0x80),
                  m4 = _mm256_set1_epi8(15);
    for (int g = 0; g < G; g++) {
        __m256i I[4];
        if (h == 0)
            fl_qprefetch(wq, wd, g, q4);
        if (!q4) {
            const uint8_t *blk = wq + (size_t)g * 512 + h * 32;
            _Pragma("GCC unroll 4")
            for (int r = 0; r < R; r++)
                I[r] = _mm256_setzero_si256();
            _Pragma("GCC unroll 8")
            for (int s = 0; s < 8; s++) {
                __m256i w = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(blk + s * 64)), x80);
                __m256i aw = _mm256_abs_epi8(w);
                _Pragma("GCC unroll 4")
                for (int r = 0; r < R; r++) {
                    __m256i xb = _mm256_set1_epi32(fl_ld32(qx + r * rb + g * 32 + s * 4));
                    __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xb, w));
                    I[r] = _mm256_add_epi32(I[r], _mm256_madd_epi16(p, one));
                    if (R >= 2)
                        FL_KEEP(I[r]);
                }
            }
        } else {
            const uint8_t *blk = wq + (size_t)g * 256 + h * 32;
            __m256i S[4];
            _Pragma("GCC unroll 4")
            for (int r = 0; r < R; r++)
                S[r] = _mm256_setzero_si256();
            _Pragma("GCC unroll 4")
            for (int c = 0; c < 4; c++) {
                __m256i L = _mm256_loadu_si256((const __m256i *)(blk + c * 64));
                __m256i lo = _mm256_and_si256(L, m4), hi = _mm256_and_si256(_mm256_srli_epi16(L, 4), m4);
                _Pragma("GCC unroll 4")
                for (int r = 0; r < R; r++) {
                    const uint8_t *xg = qx + r * rb + g * 32;
                    S[r] = _mm256_add_epi16(S[r], _mm256_maddubs_epi16(lo, _mm256_set1_epi32(fl_ld32(xg + c * 4))));
                    S[r] = _mm256_add_epi16(S[r], _mm256_maddubs_epi16(hi, _mm256_set1_epi32(fl_ld32(xg + 16 + c * 4))));
                    if (R >= 2)
                        FL_KEEP(S[r]);
                }
            }
            _Pragma("GCC unroll 4")
            for (int r = 0; r < R; r++)
                I[r] = _mm256_add_epi32(_mm256_madd_epi16(S[r], one),
                                        _mm256_set1_epi32(fl_ld32(qx + r * rb + k + 4 * (size_t)(2 * G + g))));
        }
        __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wd + (size_t)g * FL_QR + h * 8)));
        _Pragma("GCC unroll 4")
        for (int r = 0; r < R; r++) {
            __m256 p = _mm256_mul_ps(dw, _mm256_set1_ps(fl_ldf(qx + r * rb + k + 4 * (size_t)g)));
            a[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I[r]), p, a[r]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++) {
        float *yp = y + (size_t)r * ldy, t[8];
        if (nr == 8 && !acc) {
            _mm256_storeu_ps(yp, a[r]);
        } else if (nr == 8) {
            _mm256_storeu_ps(yp, _mm256_add_ps(_mm256_loadu_ps(yp), a[r]));
        } else {
            _mm256_storeu_ps(t, a[r]);
            for (int l = 0; l < nr; l++)
                yp[l] = acc ? yp[l] + t[l] : t[l];
        }
    }
}

FL_QAVX2 static FL_INLINE void fl_mm_q_avx2(float *y, int ldy, const void *qx, int m,
                                            const uint8_t *wq, const uint16_t *wd, int n, int k,
                                            bool acc, bool q4)
{
    int G = k / FL_QG;
    size_t rb = fl_qx_row_bytes(k), tb = (size_t)FL_QR * k / (q4 ? 2 : 1);
    const uint8_t *x = qx;
    for (int j = 0; j < n; j += FL_QR) {
        const uint8_t *wt = wq + (size_t)(j / FL_QR) * tb;
        const uint16_t *dt = wd + (size_t)(j / FL_QR) * FL_QR * G;
        for (int h = 0; h < 2 && j + 8 * h < n; h++) {
            int nr = n - j - 8 * h < 8 ? n - j - 8 * h : 8;
            float *yj = y + j + 8 * h;
            int i = 0;
            for (; i + 4 <= m; i += 4)
                fl_half_avx2(yj + (size_t)i * ldy, ldy, x + i * rb, rb, k, wt, dt, h, nr, 4, acc, q4);
            switch (m - i) {
            case 3: fl_half_avx2(yj + (size_t)i * ldy, ldy, x + i * rb, rb, k, wt, dt, h, nr, 3, acc, q4); break;
            case 2: fl_half_avx2(yj + (size_t)i * ldy, ldy, x + i * rb, rb, k, wt, dt, h, nr, 2, acc, q4); break;
            case 1: fl_half_avx2(yj + (size_t)i * ldy, ldy, x + i * rb, rb, k, wt, dt, h, nr, 1, acc, q4); break;
            default: break;
            }
        }
    }
}

FL_QAVX2 static void fl_mm_q8_avx2(float *y, int ldy, const void *qx, int m, const uint8_t *wq,
                                   const uint16_t *wd, int n, int k, bool acc)
{
    fl_mm_q_avx2(y, ldy, qx, m, wq, wd, n, k, acc, false);
}

FL_QAVX2 static void fl_mm_q4_avx2(float *y, int ldy, const void *qx, int m, const uint8_t *wq,
                                   const uint16_t *wd, int n, int k, bool acc)
{
    fl_mm_q_avx2(y, ldy, qx, m, wq, wd, n, k, acc, true);
}

/* ---------------------------------------------------------------- AVX-512 VNNI */

FL_QVNNI static void fl_qx_quantize_vnni(void *qx, const float *x, int ldx, int m, int k)
{
    const __m512 lim = _mm512_set1_ps(127.0f), nlim = _mm512_set1_ps(-127.0f),
                 mag = _mm512_set1_ps(12582912.0f);
    for (int i = 0; i < m; i++) {
        uint8_t *row = (uint8_t *)qx + (size_t)i * fl_qx_row_bytes(k);
        const float *xr = x + (size_t)i * ldx;
        for (int g = 0; g < k / FL_QG; g++) {
            __m512 v0 = _mm512_loadu_ps(xr + g * FL_QG), v1 = _mm512_loadu_ps(xr + g * FL_QG + 16);
            float dx = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1))) / 127.0f;
            __m512i q0 = _mm512_setzero_si512(), q1 = _mm512_setzero_si512();
            if (dx > 0) {
                __m512 dv = _mm512_set1_ps(dx);
                __m512 u0 = _mm512_max_ps(_mm512_min_ps(_mm512_div_ps(v0, dv), lim), nlim);
                __m512 u1 = _mm512_max_ps(_mm512_min_ps(_mm512_div_ps(v1, dv), lim), nlim);
                q0 = _mm512_cvttps_epi32(_mm512_sub_ps(_mm512_add_ps(u0, mag), mag));
                q1 = _mm512_cvttps_epi32(_mm512_sub_ps(_mm512_add_ps(u1, mag), mag));
            }
            _mm_storeu_si128((__m128i *)(row + g * FL_QG), _mm512_cvtepi32_epi8(q0));
            _mm_storeu_si128((__m128i *)(row + g * FL_QG + 16), _mm512_cvtepi32_epi8(q1));
            fl_qx_put(row, k, g, dx, _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1)));
        }
    }
}

/* One tile (16 weight rows, one zmm of int32 lanes) against R activation rows: per group
 * the 8 weight vectors are loaded (q4: 4, split into nibbles) once for all R rows; each
 * row's sum starts at its correction and takes 8 vpdpbusd with the activations' 4 bytes
 * broadcast from memory. The integer sums are independent across groups, so out-of-order
 * execution overlaps their latency chains. */
FL_QVNNI static FL_INLINE void fl_tile_vnni(float *y, int ldy, const uint8_t *qx, size_t rb,
                                            int k, const uint8_t *wq, const uint16_t *wd,
                                            int nr, int R, bool acc, bool q4)
{
    int G = k / FL_QG;
    __m512 a[8];
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++)
        a[r] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(15);
    size_t co = (size_t)k + 4 * (size_t)(q4 ? 2 * G : G);
    for (int g = 0; g < G; g++) {
        __m512i w[8];
        fl_qprefetch(wq, wd, g, q4);
        if (q4)
            fl_qprefetch_l2_q4(wq, wd, g);
        if (q4) {
            const uint8_t *blk = wq + (size_t)g * 256;
            _Pragma("GCC unroll 4")
            for (int c = 0; c < 4; c++) {
                __m512i L = _mm512_loadu_si512(blk + c * 64);
                w[c] = _mm512_and_si512(L, m4);
                w[c + 4] = _mm512_and_si512(_mm512_srli_epi16(L, 4), m4);
            }
        } else {
            const uint8_t *blk = wq + (size_t)g * 512;
            _Pragma("GCC unroll 8")
            for (int s = 0; s < 8; s++)
                w[s] = _mm512_loadu_si512(blk + s * 64);
        }
        __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(wd + (size_t)g * FL_QR)));
        _Pragma("GCC unroll 8")
        for (int r = 0; r < R; r++) {
            const uint8_t *xr = qx + r * rb;
            __m512i I = _mm512_set1_epi32(fl_ld32(xr + co + 4 * (size_t)g));
            /* q4's steps 4-7 are the high nibbles: columns 16.. of the group */
            _Pragma("GCC unroll 8")
            for (int s = 0; s < 8; s++)
                I = _mm512_dpbusd_epi32(I, w[s], _mm512_set1_epi32(fl_ld32(xr + g * 32 + s * 4)));
            __m512 p = _mm512_mul_ps(dw, _mm512_set1_ps(fl_ldf(xr + k + 4 * (size_t)g)));
            a[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), p, a[r]);
        }
    }
    __mmask16 mk = (__mmask16)(nr >= 16 ? 0xffff : (1u << nr) - 1);
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++) {
        float *yp = y + (size_t)r * ldy;
        __m512 v = acc ? _mm512_add_ps(_mm512_maskz_loadu_ps(mk, yp), a[r]) : a[r];
        _mm512_mask_storeu_ps(yp, mk, v);
    }
}

/* q4: two whole tiles (32 weight rows) against R <= 4 activation rows: fl_tile_vnni's sums, each
 * broadcast of the activations' 4 bytes serving both tiles. A group of one tile costs about
 * as many loads (the weights, then 10 broadcasts per row) as vpdpbusd; with two tiles there
 * are 64 vpdpbusd for 50 loads. On a Zen 5 (2 vpdpbusd a cycle) a q4 1024 x 1024 product at
 * 4 rows in cache went 16.4 -> 14.1 us and the block-4 step's q4 projections 8.5 -> 7.5 ms;
 * q8 (the head in particular) measured no better, so q8 keeps one tile (docs/benchmarks.md,
 * "A Zen 5 again"). Each lane's integer and float sums are the same operations
 * in the same order as fl_tile_vnni's: the same bits. */
FL_QVNNI static FL_INLINE void fl_tile2_q4_vnni(float *y, int ldy, const uint8_t *qx, size_t rb,
                                                int k, const uint8_t *wq, const uint16_t *wd,
                                                size_t tb, size_t pd1, size_t pd2, int R, bool acc)
{
    int G = k / FL_QG;
    __m512 a0[4], a1[4];
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++)
        a0[r] = a1[r] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(15);
    const uint8_t *wq1 = wq + tb;
    const uint16_t *wd1 = wd + (size_t)FL_QR * G;
    size_t co = (size_t)k + 4 * (size_t)(2 * G);
    for (int g = 0; g < G; g++) {
        __m512i w0[8], w1[8];
        fl_qprefetch_pair_q4(wq, wd, g, pd1, pd2, tb);
        fl_qprefetch_pair_q4(wq1, wd1, g, pd1, pd2, tb);
        const uint8_t *b0 = wq + (size_t)g * 256, *b1 = wq1 + (size_t)g * 256;
        _Pragma("GCC unroll 4")
        for (int c = 0; c < 4; c++) {
            __m512i L0 = _mm512_loadu_si512(b0 + c * 64), L1 = _mm512_loadu_si512(b1 + c * 64);
            w0[c] = _mm512_and_si512(L0, m4);
            w0[c + 4] = _mm512_and_si512(_mm512_srli_epi16(L0, 4), m4);
            w1[c] = _mm512_and_si512(L1, m4);
            w1[c + 4] = _mm512_and_si512(_mm512_srli_epi16(L1, 4), m4);
        }
        __m512 d0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(wd + (size_t)g * FL_QR)));
        __m512 d1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(wd1 + (size_t)g * FL_QR)));
        _Pragma("GCC unroll 4")
        for (int r = 0; r < R; r++) {
            const uint8_t *xr = qx + r * rb;
            __m512i I0 = _mm512_set1_epi32(fl_ld32(xr + co + 4 * (size_t)g)), I1 = I0;
            _Pragma("GCC unroll 8")
            for (int s = 0; s < 8; s++) {
                __m512i b = _mm512_set1_epi32(fl_ld32(xr + g * 32 + s * 4));
                I0 = _mm512_dpbusd_epi32(I0, w0[s], b);
                I1 = _mm512_dpbusd_epi32(I1, w1[s], b);
            }
            __m512 xs = _mm512_set1_ps(fl_ldf(xr + k + 4 * (size_t)g));
            a0[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I0), _mm512_mul_ps(d0, xs), a0[r]);
            a1[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I1), _mm512_mul_ps(d1, xs), a1[r]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++) {
        float *yp = y + (size_t)r * ldy;
        _mm512_storeu_ps(yp, acc ? _mm512_add_ps(_mm512_loadu_ps(yp), a0[r]) : a0[r]);
        _mm512_storeu_ps(yp + 16, acc ? _mm512_add_ps(_mm512_loadu_ps(yp + 16), a1[r]) : a1[r]);
    }
}

/* m activation rows against one weight tile: 8 rows at a time, then the rest */
FL_QVNNI static FL_INLINE void fl_rows_vnni(float *yj, int ldy, const uint8_t *x, size_t rb, int k,
                                            const uint8_t *wt, const uint16_t *dt, int nr, int m,
                                            bool acc, bool q4)
{
    int i = 0;
    for (; i + 8 <= m; i += 8)
        fl_tile_vnni(yj + (size_t)i * ldy, ldy, x + i * rb, rb, k, wt, dt, nr, 8, acc, q4);
#define FL_QV_TAIL(R) fl_tile_vnni(yj + (size_t)i * ldy, ldy, x + i * rb, rb, k, wt, dt, nr, R, acc, q4)
    switch (m - i) {
    case 7: FL_QV_TAIL(7); break;
    case 6: FL_QV_TAIL(6); break;
    case 5: FL_QV_TAIL(5); break;
    case 4: FL_QV_TAIL(4); break;
    case 3: FL_QV_TAIL(3); break;
    case 2: FL_QV_TAIL(2); break;
    case 1: FL_QV_TAIL(1); break;
    default: break;
    }
#undef FL_QV_TAIL
}

FL_QVNNI static FL_INLINE void fl_mm_q_vnni(float *y, int ldy, const void *qx, int m,
                                            const uint8_t *wq, const uint16_t *wd, int n, int k,
                                            bool acc, bool q4)
{
    int G = k / FL_QG;
    size_t rb = fl_qx_row_bytes(k), tb = (size_t)FL_QR * k / (q4 ? 2 : 1);
    const uint8_t *x = qx;
    for (int j = 0; j < n; j += FL_QR) {
        const uint8_t *wt = wq + (size_t)(j / FL_QR) * tb;
        const uint16_t *dt = wd + (size_t)(j / FL_QR) * FL_QR * G;
        int nr = n - j < FL_QR ? n - j : FL_QR;
        float *yj = y + j;
        if (q4 && m <= 4 && n - j >= 2 * FL_QR) { /* two whole tiles at once */
            /* the prefetch distances as constants where tiles are long enough (k >= 1024) */
#define FL_QT2(D1, D2)                                                                             \
    switch (m) {                                                                                   \
    case 4: fl_tile2_q4_vnni(yj, ldy, x, rb, k, wt, dt, tb, D1, D2, 4, acc); break;                \
    case 3: fl_tile2_q4_vnni(yj, ldy, x, rb, k, wt, dt, tb, D1, D2, 3, acc); break;                \
    case 2: fl_tile2_q4_vnni(yj, ldy, x, rb, k, wt, dt, tb, D1, D2, 2, acc); break;                \
    default: fl_tile2_q4_vnni(yj, ldy, x, rb, k, wt, dt, tb, D1, D2, 1, acc); break;               \
    }
            if (tb >= FL_QPF && tb >= FL_QPF2)
                FL_QT2(FL_QPF, FL_QPF2)
            else
                FL_QT2(FL_QPF < tb ? FL_QPF : tb, FL_QPF2 < tb ? FL_QPF2 : tb)
#undef FL_QT2
            j += FL_QR; /* the loop adds the second tile's */
            continue;
        }
        fl_rows_vnni(yj, ldy, x, rb, k, wt, dt, nr, m, acc, q4);
    }
}

FL_QVNNI static void fl_mm_q8_vnni(float *y, int ldy, const void *qx, int m, const uint8_t *wq,
                                   const uint16_t *wd, int n, int k, bool acc)
{
    fl_mm_q_vnni(y, ldy, qx, m, wq, wd, n, k, acc, false);
}

FL_QVNNI static void fl_mm_q4_vnni(float *y, int ldy, const void *qx, int m, const uint8_t *wq,
                                   const uint16_t *wd, int n, int k, bool acc)
{
    fl_mm_q_vnni(y, ldy, qx, m, wq, wd, n, k, acc, true);
}

/* ---------------------------------------------------------------- AMX-INT8 */

/* Intel's AMX (Sapphire Rapids and later): eight tile registers of up to 16 rows x 64 bytes
 * and TDPBSSD, which adds a 16 x 16 block of int32 dot products of signed bytes in one
 * instruction. The repacked layout (quant.h) is already AMX's B operand: a q8 group's 512
 * bytes are 8 rows of 16 weight rows x 4 bytes (q4's nibbles are spread into that shape); each
 * group is copied once per weight tile as signed bytes (fl_amx_spread), and 16 activation
 * rows' 32 quants of the group are the A operand (stride fl_qx_row_bytes). Each group's block
 * of sums goes through memory to the AVX-512 side, which scales it into the float sums
 * exactly as fl_tile_vnni does: the same integers, the same float operations in the same
 * order, so the same bits (kernels.h), and a row's outputs do not depend on which level or
 * batch computed them. A group is only 32 bytes deep (the scales change every 32 columns),
 * half of what one TDPBSSD can take, and the per-group scaling on the AVX side is what bounds
 * the kernel (docs/benchmarks.md, "AMX"). Below FL_AMX_ROWS activation rows it is no faster
 * than VNNI, which then does the work.
 *
 * Tiles: 0-3 the sums of a 16-row block (a ring of groups), 4 and 5 its activations, 6 and 7
 * the weights (even and odd groups). */
#define FL_QAMX                                                                                    \
    __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#ifndef FL_AMX_LAG /* groups between a product's issue and its read-back: 1..3 */
#define FL_AMX_LAG 2
#endif
#ifndef FL_AMX_ROWS
#define FL_AMX_ROWS 16
#endif

/* GCC's tile intrinsics are asm statements that do not tell the compiler which memory they
 * read or write: without this between a tile load and the stores that fill its source (the
 * spread weights), and between a tile store and the loads of what it wrote, GCC dropped the
 * "dead" stores (the q4 products came out wrong) */
#define FL_AMX_FENCE() __asm__ __volatile__("" ::: "memory")

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} fl_tilecfg;

/* Group g of a weight tile copied into AMX's B shape at o (512 bytes) as signed bytes, so
 * that TDPBSSD gives its dot products without a correction: q8's bytes with the sign bit
 * flipped back (w + 128 -> w), q4's nibbles spread and less 8 (w + 8 -> w). The tile streams
 * from memory here (prefetched ahead), once for all the row blocks. */
FL_QAMX static FL_INLINE void fl_amx_spread(uint8_t *o, const uint8_t *wt, const uint16_t *dt,
                                            int g, bool q4)
{
    fl_qprefetch(wt, dt, g, q4);
    if (q4) {
        const __m512i m4 = _mm512_set1_epi8(15), e8 = _mm512_set1_epi8(8);
        const uint8_t *blk = wt + (size_t)g * 256;
        _Pragma("GCC unroll 4")
        for (int c = 0; c < 4; c++) {
            __m512i L = _mm512_loadu_si512(blk + c * 64);
            _mm512_store_si512(o + c * 64, _mm512_sub_epi8(_mm512_and_si512(L, m4), e8));
            _mm512_store_si512(o + (c + 4) * 64,
                               _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(L, 4), m4), e8));
        }
    } else {
        const __m512i x80 = _mm512_set1_epi8((char)0x80);
        const uint8_t *blk = wt + (size_t)g * 512;
        _Pragma("GCC unroll 8")
        for (int c = 0; c < 8; c++)
            _mm512_store_si512(o + c * 64, _mm512_xor_si512(_mm512_loadu_si512(blk + c * 64), x80));
    }
    FL_AMX_FENCE();
}

/* one group's sums of 16 rows (cb: 16 x 16 int32, the exact dot products) into the float
 * sums a, as fl_tile_vnni does it */
FL_QAMX static FL_INLINE void fl_amx_scale(__m512 *a, const int32_t *cb, const uint8_t *x,
                                           size_t rb, int k, int g, __m512 dw)
{
    _Pragma("GCC unroll 16")
    for (int r = 0; r < 16; r++) {
        const uint8_t *xr = x + r * rb;
        __m512i I = _mm512_load_si512(cb + r * 16);
        __m512 p = _mm512_mul_ps(dw, _mm512_set1_ps(fl_ldf(xr + k + 4 * (size_t)g)));
        a[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), p, a[r]);
    }
}

/* Groups [g0, g1) of one weight tile (16 columns of y) against a block of 16 activation rows,
 * into its float sums a; group g's weights at b + (g - g0) * 512, put there by this call when
 * spread (the first block: reading the tile from memory overlaps its products), else by an
 * earlier one. The groups go through a pipeline: group g's product goes to sum tile g % 4
 * and is read back FL_AMX_LAG groups later, so the tile unit computes the next groups while
 * the vector units scale this one. */
#define FL_AMX_ISSUE(C, A, B, g)                                                                   \
    do {                                                                                           \
        _tile_loadd(B, b + (size_t)((g) - g0) * 512, 64);                                          \
        _tile_loadd(A, x + (g) * 32, (long)rb);                                                    \
        _tile_zero(C);                                                                             \
        _tile_dpbssd(C, A, B);                                                                     \
    } while (0)
FL_QAMX static FL_INLINE void fl_amx_groups(__m512 *a, const uint8_t *x, size_t rb, int k,
                                            uint8_t *b, int g0, int g1, const uint8_t *wt,
                                            const uint16_t *dt, bool spread, bool q4)
{
    _Alignas(64) int32_t cb[256];
    for (int g = g0; g < g1 + FL_AMX_LAG; g++) {
        if (g < g1) {
            if (spread)
                fl_amx_spread(b + (size_t)(g - g0) * 512, wt, dt, g, q4);
            switch (g & 3) {
            case 0: FL_AMX_ISSUE(0, 4, 6, g); break;
            case 1: FL_AMX_ISSUE(1, 5, 7, g); break;
            case 2: FL_AMX_ISSUE(2, 4, 6, g); break;
            default: FL_AMX_ISSUE(3, 5, 7, g); break;
            }
        }
        int h = g - FL_AMX_LAG;
        if (h < g0)
            continue;
        switch (h & 3) {
        case 0: _tile_stored(0, cb, 64); break;
        case 1: _tile_stored(1, cb, 64); break;
        case 2: _tile_stored(2, cb, 64); break;
        default: _tile_stored(3, cb, 64); break;
        }
        FL_AMX_FENCE();
        fl_amx_scale(a, cb, x, rb, k, h,
                     _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(dt + (size_t)h * FL_QR))));
    }
}
#undef FL_AMX_ISSUE

/* Per weight tile: the activation rows in 16-row blocks, up to FL_AMX_NB blocks at a time,
 * and the groups in chunks of FL_AMX_GC, each spread by the first block for all of them (32
 * KB, in L1/L2 while they read it); the blocks' float sums wait in sums between chunks (a
 * tile of k <= 2048 is one chunk). The rows past the last whole block go to VNNI, the tile's
 * weights then in L1/L2: the same bits, and one tile configuration. */
#define FL_AMX_GC 64
#define FL_AMX_NB 4
FL_QAMX static FL_INLINE void fl_mm_q_amx(float *y, int ldy, const void *qx, int m,
                                          const uint8_t *wq, const uint16_t *wd, int n, int k,
                                          bool acc, bool q4)
{
    if (m < FL_AMX_ROWS) {
        fl_mm_q_vnni(y, ldy, qx, m, wq, wd, n, k, acc, q4);
        return;
    }
    int G = k / FL_QG;
    size_t rb = fl_qx_row_bytes(k), tb = (size_t)FL_QR * k / (q4 ? 2 : 1);
    _Alignas(64) fl_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 4; t++) /* sums */
        cfg.rows[t] = 16, cfg.colsb[t] = 64;
    cfg.rows[4] = cfg.rows[5] = 16, cfg.colsb[4] = cfg.colsb[5] = 32; /* activations */
    cfg.rows[6] = cfg.rows[7] = 8, cfg.colsb[6] = cfg.colsb[7] = 64;  /* weights */
    _tile_loadconfig(&cfg);
    _Alignas(64) uint8_t ub[FL_AMX_GC * 512];
    _Alignas(64) float sums[FL_AMX_NB][16 * 16];
    const uint8_t *x = qx;
    int mb = m / 16 * 16;
    for (int j = 0; j < n; j += FL_QR) {
        const uint8_t *wt = wq + (size_t)(j / FL_QR) * tb;
        const uint16_t *dt = wd + (size_t)(j / FL_QR) * FL_QR * G;
        int nr = n - j < FL_QR ? n - j : FL_QR;
        for (int i0 = 0; i0 < mb; i0 += 16 * FL_AMX_NB) {
            int nb = (mb - i0) / 16 < FL_AMX_NB ? (mb - i0) / 16 : FL_AMX_NB;
            for (int g0 = 0; g0 < G; g0 += FL_AMX_GC) {
                int g1 = G - g0 < FL_AMX_GC ? G : g0 + FL_AMX_GC;
                for (int s = 0; s < nb; s++) {
                    const uint8_t *xb = x + (size_t)(i0 + 16 * s) * rb;
                    __m512 a[16];
                    _Pragma("GCC unroll 16")
                    for (int r = 0; r < 16; r++)
                        a[r] = g0 ? _mm512_load_ps(sums[s] + 16 * r) : _mm512_setzero_ps();
                    fl_amx_groups(a, xb, rb, k, ub, g0, g1, wt, dt, s == 0, q4);
                    if (g1 < G) {
                        _Pragma("GCC unroll 16")
                        for (int r = 0; r < 16; r++)
                            _mm512_store_ps(sums[s] + 16 * r, a[r]);
                        continue;
                    }
                    __mmask16 mk = (__mmask16)(nr >= 16 ? 0xffff : (1u << nr) - 1);
                    float *yb = y + (size_t)(i0 + 16 * s) * ldy + j;
                    _Pragma("GCC unroll 16")
                    for (int r = 0; r < 16; r++) {
                        float *yp = yb + (size_t)r * ldy;
                        _mm512_mask_storeu_ps(yp, mk, acc ? _mm512_add_ps(_mm512_maskz_loadu_ps(mk, yp), a[r]) : a[r]);
                    }
                }
            }
        }
        fl_rows_vnni(y + (size_t)mb * ldy + j, ldy, x + mb * rb, rb, k, wt, dt, nr, m - mb, acc, q4);
    }
    _tile_release();
}

FL_QAMX static void fl_mm_q8_amx(float *y, int ldy, const void *qx, int m, const uint8_t *wq,
                                 const uint16_t *wd, int n, int k, bool acc)
{
    fl_mm_q_amx(y, ldy, qx, m, wq, wd, n, k, acc, false);
}

FL_QAMX static void fl_mm_q4_amx(float *y, int ldy, const void *qx, int m, const uint8_t *wq,
                                 const uint16_t *wd, int n, int k, bool acc)
{
    fl_mm_q_amx(y, ldy, qx, m, wq, wd, n, k, acc, true);
}

/* Whether this process may use AMX-INT8: the CPU has it (CPUID.7.0:EDX bits 24, 25), the OS
 * saves its state (XCR0 bits 17, 18), and Linux granted the tile data's permission
 * (arch_prctl ARCH_REQ_XCOMP_PERM, Linux 5.16+; the grant covers every thread, and asking
 * again is harmless). */
static bool fl_amx_usable(void)
{
    unsigned a, b, c, d;
    bool ok = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 24 & 1) && (d >> 25 & 1) &&
              __get_cpuid(1, &a, &b, &c, &d) && (c >> 27 & 1); /* OSXSAVE */
    if (ok) {
        unsigned lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        ok = (lo >> 17 & 3) == 3;
    }
#ifdef SYS_arch_prctl
    ok = ok && syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
#else
    ok = false;
#endif
    return ok;
}
#endif /* FL_HAVE_X86 */

void fl_quant_kernels_init(fl_kernels *kk, const char *want)
{
    kk->qname = "plain C";
    kk->qx_quantize = fl_qx_quantize;
    kk->mm_q8 = fl_mm_q8_c;
    kk->mm_q4 = fl_mm_q4_c;
    if (!want)
        want = "";
#ifdef FL_HAVE_X86
    __builtin_cpu_init();
    unsigned a, b, c, d; /* F16C (CPUID.1:ECX bit 29): clang 14's __builtin_cpu_supports lacks it */
    bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
    if (strcmp(want, "plain") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        f16c) {
        kk->qname = "AVX2";
        kk->qx_quantize = fl_qx_quantize_avx2;
        kk->mm_q8 = fl_mm_q8_avx2;
        kk->mm_q4 = fl_mm_q4_avx2;
    }
    if ((!strcmp(want, "") || !strcmp(want, "avx512")) && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512vnni")) {
        kk->qname = "AVX-512 VNNI";
        kk->qx_quantize = fl_qx_quantize_vnni;
        kk->mm_q8 = fl_mm_q8_vnni;
        kk->mm_q4 = fl_mm_q4_vnni;
        if (!strcmp(want, "") && fl_amx_usable()) { /* VNNI below FL_AMX_ROWS rows */
            kk->qname = "AMX-INT8";
            kk->mm_q8 = fl_mm_q8_amx;
            kk->mm_q4 = fl_mm_q4_amx;
        }
    }
#endif
}
