/* kernels.c: matmul, attention, norm and softmax-statistics kernels of the CPU backend (see
 * kernels.h). Each SIMD kernel has a plain C twin; fl_kernels_init picks per CPU, so the
 * binary is built for generic x86-64 and still uses AVX2+FMA where the CPU has it. */
#include "kernels.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#include "fl.h"
#include "quant.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define FL_HAVE_X86 1
#include <immintrin.h>
#define FL_AVX2 __attribute__((target("avx2,fma")))
#define FL_AVX512 __attribute__((target("avx512f,avx2,fma")))
#endif

/* ---------------------------------------------------------------- small helpers */

void fl_split(int n, int nt, int t, int align, int *lo, int *hi)
{
    int units = (n + align - 1) / align; /* whole aligned units; the last may be short */
    int a = (int)((long)units * t / nt), b = (int)((long)units * (t + 1) / nt);
    *lo = a * align < n ? a * align : n;
    *hi = b * align < n ? b * align : n;
}

void fl_rmsnorm(float *y, const float *x, const float *w, int n, float eps)
{
    double ss = 0; /* double: the mean of squares over a 1-4k wide row, independent of order */
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++)
        y[i] = w[i] * (x[i] * r);
}

/* fl_rmsnorm of `rows` rows four at a time: each row's sum of squares is the same chain of
 * double adds in the same order (so the same bits), but four rows' chains are independent and
 * overlap, where one row alone waits on each add's latency (measured: the norm phase of a
 * 512-row prefill, 2 x 28 norms of 1024 values, took 30 ms in that chain). */
void fl_rmsnorm_rows(float *y, size_t ldy, const float *x, size_t ldx, const float *w, int rows,
                     int n, float eps)
{
    int t = 0;
    for (; t + 4 <= rows; t += 4) {
        const float *x0 = x + t * ldx, *x1 = x0 + ldx, *x2 = x1 + ldx, *x3 = x2 + ldx;
        double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (int i = 0; i < n; i++) {
            s0 += (double)x0[i] * x0[i];
            s1 += (double)x1[i] * x1[i];
            s2 += (double)x2[i] * x2[i];
            s3 += (double)x3[i] * x3[i];
        }
        const double ss[4] = {s0, s1, s2, s3};
        for (int r = 0; r < 4; r++) {
            const float *xr = x + (t + r) * ldx;
            float *yr = y + (t + r) * ldy, rs = (float)(1.0 / sqrt(ss[r] / n + eps));
            for (int i = 0; i < n; i++)
                yr[i] = w[i] * (xr[i] * rs);
        }
    }
    for (; t < rows; t++)
        fl_rmsnorm(y + t * ldy, x + t * ldx, w, n, eps);
}

void fl_rope(float *x, const float *cs, int hd)
{
    int h = hd / 2;
    const float *c = cs, *s = cs + h;
    for (int i = 0; i < h; i++) {
        float a = x[i], b = x[i + h];
        x[i] = a * c[i] - b * s[i];
        x[i + h] = b * c[i] + a * s[i];
    }
}

void fl_transpose_q(float *qt, const float *q, int ldq, int nq, int hd)
{
    for (int d = 0; d < hd; d++)
        for (int i = 0; i < FL_QT; i++)
            qt[d * FL_QT + i] = i < nq ? q[(size_t)i * ldq + d] : 0.0f;
}

void fl_lse_init(fl_lse *s)
{
    s->max = -INFINITY;
    s->sum = 0;
    s->sum_u = 0;
    s->arg = -1;
}

/* Moves the reference point of s from s->max to m (m > s->max): every u shrinks by
 * d = s->max - m, so sum_u' = f * (sum_u + d * sum) and sum' = f * sum with f = e^d. */
static void fl_lse_rebase(fl_lse *s, float m)
{
    if (s->sum > 0) {
        double d = (double)s->max - (double)m, f = exp(d);
        s->sum_u = f * (s->sum_u + d * s->sum);
        s->sum = f * s->sum;
    }
    s->max = m;
}

void fl_lse_merge(fl_lse *a, const fl_lse *b)
{
    if (b->arg < 0)
        return;
    if (a->arg < 0) {
        *a = *b;
        return;
    }
    fl_lse bb = *b;
    int32_t arg;
    if (bb.max > a->max)
        arg = bb.arg;
    else if (bb.max < a->max)
        arg = a->arg;
    else
        arg = a->arg < bb.arg ? a->arg : bb.arg;
    float m = a->max > bb.max ? a->max : bb.max;
    if (a->max < m)
        fl_lse_rebase(a, m);
    if (bb.max < m)
        fl_lse_rebase(&bb, m);
    a->sum += bb.sum;
    a->sum_u += bb.sum_u;
    a->arg = arg;
}

void fl_lse_finish(const fl_lse *s, int32_t *tok, float *prob, float *entropy)
{
    if (s->arg < 0 || !(s->sum > 0)) { /* no finite logit: report a flat nothing */
        *tok = s->arg < 0 ? 0 : s->arg;
        *prob = 0;
        *entropy = NAN;
        return;
    }
    *tok = s->arg;
    *prob = (float)(1.0 / s->sum);
    double h = log(s->sum) - s->sum_u / s->sum;
    *entropy = (float)(h > 0 ? h : 0); /* rounding can dip a near-one-hot row below 0 */
}

/* ---------------------------------------------------------------- plain C kernels */

/* Every output is one running sum over c = 0..k-1, in order, whatever the tile. */
static void fl_mm_f32_c(float *y, int ldy, const float *x, int ldx, int m, const float *w, int n,
                        int k, bool acc)
{
    for (int j = 0; j < n; j++) {
        const float *wj = w + (size_t)j * k;
        for (int i = 0; i < m; i++) {
            const float *xi = x + (size_t)i * ldx;
            float s = 0;
            for (int c = 0; c < k; c++)
                s += xi[c] * wj[c];
            float *yp = y + (size_t)i * ldy + j;
            *yp = acc ? *yp + s : s;
        }
    }
}

static void fl_mm_bf16_c(float *y, int ldy, const float *x, int ldx, int m, const uint16_t *w,
                         int n, int k, bool acc)
{
    float row[512]; /* one weight row widened in slices, so the row is read from DRAM once */
    for (int j = 0; j < n; j++) {
        const uint16_t *wj = w + (size_t)j * k;
        for (int i = 0; i < m; i++) {
            float *yp = y + (size_t)i * ldy + j;
            if (!acc)
                *yp = 0;
        }
        for (int c0 = 0; c0 < k; c0 += 512) {
            int len = k - c0 < 512 ? k - c0 : 512;
            for (int c = 0; c < len; c++)
                row[c] = fl_bf16_to_f32(wj[c0 + c]);
            for (int i = 0; i < m; i++) {
                const float *xi = x + (size_t)i * ldx + c0;
                float s = 0;
                for (int c = 0; c < len; c++)
                    s += xi[c] * row[c];
                y[(size_t)i * ldy + j] += s;
            }
        }
    }
}

static void fl_qk_c(float *s, int lds, const float *qt, int nq, const float *const *kr, int nk,
                    int hd, float scale)
{
    for (int j = 0; j < nk; j++) {
        float acc[FL_QT] = {0};
        for (int d = 0; d < hd; d++)
            for (int i = 0; i < FL_QT; i++)
                acc[i] += kr[j][d] * qt[d * FL_QT + i];
        for (int i = 0; i < nq; i++)
            s[(size_t)i * lds + j] = acc[i] * scale;
    }
}

static void fl_pv_c(float *o, int ldo, const float *p, int ldp, int nq, const float *const *vr,
                    int nk, int hd)
{
    for (int i = 0; i < nq; i++) {
        float *oi = o + (size_t)i * ldo;
        for (int j = 0; j < nk; j++) {
            float pj = p[(size_t)i * ldp + j];
            for (int c = 0; c < hd; c++)
                oi[c] += pj * vr[j][c];
        }
    }
}

static void fl_bf16_to_f32_c(float *dst, const uint16_t *src, long n)
{
    for (long i = 0; i < n; i++)
        dst[i] = fl_bf16_to_f32(src[i]);
}

static void fl_f32_to_bf16_c(uint16_t *dst, const float *src, long n)
{
    for (long i = 0; i < n; i++)
        dst[i] = fl_f32_to_bf16(src[i]);
}

/* The bf16 attention kernels of every level (kernels.h): rows[t] points at row j0 + t
 * widened into wide. The source rows n ahead are prefetched, as qk and pv prefetch theirs:
 * page blocks are far apart. */
static inline void fl_widen_rows(const float **rows, float *wide, const uint16_t *const *r,
                                 int j0, int n, int nk, int hd,
                                 void (*cvt)(float *, const uint16_t *, long))
{
    for (int t = 0; t < n; t++) {
        if (j0 + n + t < nk)
            for (int c = 0; c < hd; c += 32)
                __builtin_prefetch(r[j0 + n + t] + c, 0, 3);
        cvt(wide + (size_t)t * hd, r[j0 + t], hd);
        rows[t] = wide + (size_t)t * hd;
    }
}

#define FL_ATT_BF16(QK_BF16, PV_BF16, QK, PV, CVT, ATTR)                                        \
    ATTR static void QK_BF16(float *s, int lds, const float *qt, int nq,                          \
                             const uint16_t *const *kr, int nk, int hd, float scale, float *wide) \
    {                                                                                             \
        const float *rows[FL_KV_CHUNK];                                                           \
        for (int j0 = 0; j0 < nk; j0 += FL_KV_CHUNK) {                                            \
            int n = nk - j0 < FL_KV_CHUNK ? nk - j0 : FL_KV_CHUNK;                                \
            fl_widen_rows(rows, wide, kr, j0, n, nk, hd, CVT);                                    \
            QK(s + j0, lds, qt, nq, rows, n, hd, scale);                                          \
        }                                                                                         \
    }                                                                                             \
    ATTR static void PV_BF16(float *o, int ldo, const float *p, int ldp, int nq,                  \
                             const uint16_t *const *vr, int nk, int hd, float *wide)              \
    {                                                                                             \
        const float *rows[FL_KV_CHUNK];                                                           \
        for (int j0 = 0; j0 < nk; j0 += FL_KV_CHUNK) {                                            \
            int n = nk - j0 < FL_KV_CHUNK ? nk - j0 : FL_KV_CHUNK;                                \
            fl_widen_rows(rows, wide, vr, j0, n, nk, hd, CVT);                                    \
            PV(o, ldo, p + j0, ldp, nq, rows, n, hd);                                             \
        }                                                                                         \
    }

FL_ATT_BF16(fl_qk_bf16_c, fl_pv_bf16_c, fl_qk_c, fl_pv_c, fl_bf16_to_f32_c, )

/* A SIMD level's attention entries from its fl_qk_pf_L (scores, rows pf keys ahead
 * prefetched) and fl_pv_span_L (outputs over one span of keys, the next span's rows nx
 * prefetched): qk and pv over keys from the pool, pv in spans of FL_KV_PF keys, each
 * prefetching the next while it computes (per output element the keys still come in order,
 * so the split changes no bit: pv's contract); and the bf16 pair, whose rows were just
 * widened into L1 and are prefetched by nobody. */
#define FL_ATT_LEVEL(L, ATTR)                                                                      \
    ATTR static void fl_qk_##L(float *s, int lds, const float *qt, int nq, const float *const *kr,  \
                               int nk, int hd, float scale)                                        \
    {                                                                                              \
        fl_qk_pf_##L(s, lds, qt, nq, kr, nk, hd, scale, FL_KV_PF);                                 \
    }                                                                                              \
    ATTR static void fl_qk_wide_##L(float *s, int lds, const float *qt, int nq,                    \
                                    const float *const *kr, int nk, int hd, float scale)           \
    {                                                                                              \
        fl_qk_pf_##L(s, lds, qt, nq, kr, nk, hd, scale, 0);                                        \
    }                                                                                              \
    ATTR static void fl_pv_##L(float *o, int ldo, const float *p, int ldp, int nq,                 \
                               const float *const *vr, int nk, int hd)                             \
    {                                                                                              \
        for (int j0 = 0; j0 < nk; j0 += FL_KV_PF) {                                                \
            int n = nk - j0 < FL_KV_PF ? nk - j0 : FL_KV_PF, j1 = j0 + n;                          \
            int nn = nk - j1 < FL_KV_PF ? nk - j1 : FL_KV_PF;                                      \
            fl_pv_span_##L(o, ldo, p + j0, ldp, nq, vr + j0, n, hd, vr + j1, nn);                  \
        }                                                                                          \
    }                                                                                              \
    ATTR static void fl_pv_wide_##L(float *o, int ldo, const float *p, int ldp, int nq,            \
                                    const float *const *vr, int nk, int hd)                        \
    {                                                                                              \
        fl_pv_span_##L(o, ldo, p, ldp, nq, vr, nk, hd, NULL, 0);                                   \
    }                                                                                              \
    FL_ATT_BF16(fl_qk_bf16_##L, fl_pv_bf16_##L, fl_qk_wide_##L, fl_pv_wide_##L,                    \
                fl_bf16_to_f32_##L, ATTR)

static void fl_lse_add_c(fl_lse *s, const float *l, int n, int32_t id0)
{
    float cmax = -INFINITY;
    int carg = -1;
    for (int i = 0; i < n; i++)
        if (l[i] > cmax) {
            cmax = l[i];
            carg = i;
        }
    if (carg < 0)
        return;
    if (cmax > s->max) {
        fl_lse_rebase(s, cmax);
        s->arg = id0 + carg;
    }
    double sum = 0, su = 0;
    for (int i = 0; i < n; i++) {
        float u = l[i] - s->max;
        float e = expf(u);
        sum += e;
        su += (double)e * u;
    }
    s->sum += sum;
    s->sum_u += su;
}

static void fl_softmax_c(float *s, int n)
{
    float m = -INFINITY;
    for (int i = 0; i < n; i++)
        m = s[i] > m ? s[i] : m;
    float sum = 0;
    for (int i = 0; i < n; i++) {
        s[i] = expf(s[i] - m);
        sum += s[i];
    }
    float r = 1.0f / sum;
    for (int i = 0; i < n; i++)
        s[i] *= r;
}

static void fl_swiglu_c(float *h, const float *gu, int n_grp, int ib)
{
    for (int b = 0; b < n_grp; b++) {
        const float *g = gu + (size_t)2 * b * ib, *u = g + ib;
        for (int c = 0; c < ib; c++)
            h[(size_t)b * ib + c] = g[c] / (1.0f + expf(-g[c])) * u[c];
    }
}

/* moe_sum of elements [d0, n): the plain level, and the AVX2 level's tail */
static void fl_moe_sum_from(float *x, const float *const *ys, const float *w, int K,
                            const float *s, int d0, int n)
{
    for (int d = d0; d < n; d++) {
        float a = 0;
        for (int k = 0; k < K; k++) {
            float p = w[k] * ys[k][d]; /* its own statement: never contracted into an fma */
            a += p;
        }
        if (s)
            a += s[d];
        x[d] += a;
    }
}

static void fl_moe_sum_c(float *x, const float *const *ys, const float *w, int K,
                         const float *s, int n)
{
    fl_moe_sum_from(x, ys, w, K, s, 0, n);
}

/* ---------------------------------------------------------------- AVX2 + FMA kernels */
#ifdef FL_HAVE_X86

FL_AVX2 static inline float fl_hsum8(__m256 v)
{
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

FL_AVX2 static inline __m256 fl_load_bf16x8(const uint16_t *p)
{
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

/* The one order every output of the f32 streaming kernel is summed in: 8 lanes over
 * c < k8, fl_hsum8, then the tail in order. */
static inline float fl_tail_f32(float r, const float *x, const float *w, int k8, int k)
{
    for (int c = k8; c < k; c++)
        r += x[c] * w[c];
    return r;
}

static inline float fl_tail_bf16(float r, const float *x, const uint16_t *w, int k8, int k)
{
    for (int c = k8; c < k; c++)
        r += x[c] * fl_bf16_to_f32(w[c]);
    return r;
}

static inline void fl_put(float *yp, float r, bool acc) { *yp = acc ? *yp + r : r; }

/* The streaming kernels: 4 weight rows at a time (4 read streams from DRAM, ~40% more
 * bandwidth than one), against 2 rows of X (8 accumulators + 6 loads fit the 16 ymm
 * registers). The first X tile pulls the 4 weight rows from DRAM; the others find them in
 * L1/L2. LOADW widens one vector of weights. */
#define FL_MM_AVX2_BODY(WT, LOADW, TAIL)                                                     \
    int k8 = k & ~7;                                                                         \
    int j = 0;                                                                               \
    for (; j + 4 <= n; j += 4) {                                                             \
        const WT *w0 = w + (size_t)j * k, *w1 = w0 + k, *w2 = w1 + k, *w3 = w2 + k;          \
        int i = 0;                                                                           \
        for (; i + 2 <= m; i += 2) {                                                         \
            const float *x0 = x + (size_t)i * ldx, *x1 = x0 + ldx;                           \
            __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a03 = a00;               \
            __m256 a10 = a00, a11 = a00, a12 = a00, a13 = a00;                               \
            for (int c = 0; c < k8; c += 8) {                                                \
                __m256 u0 = _mm256_loadu_ps(x0 + c), u1 = _mm256_loadu_ps(x1 + c), v;        \
                if (i == 0) {                                                                \
                    _mm_prefetch((const char *)(w0 + 4 * (size_t)k + c), _MM_HINT_T0);       \
                    _mm_prefetch((const char *)(w1 + 4 * (size_t)k + c), _MM_HINT_T0);       \
                    _mm_prefetch((const char *)(w2 + 4 * (size_t)k + c), _MM_HINT_T0);       \
                    _mm_prefetch((const char *)(w3 + 4 * (size_t)k + c), _MM_HINT_T0);       \
                }                                                                            \
                v = LOADW(w0 + c);                                                           \
                a00 = _mm256_fmadd_ps(v, u0, a00);                                           \
                a10 = _mm256_fmadd_ps(v, u1, a10);                                           \
                v = LOADW(w1 + c);                                                           \
                a01 = _mm256_fmadd_ps(v, u0, a01);                                           \
                a11 = _mm256_fmadd_ps(v, u1, a11);                                           \
                v = LOADW(w2 + c);                                                           \
                a02 = _mm256_fmadd_ps(v, u0, a02);                                           \
                a12 = _mm256_fmadd_ps(v, u1, a12);                                           \
                v = LOADW(w3 + c);                                                           \
                a03 = _mm256_fmadd_ps(v, u0, a03);                                           \
                a13 = _mm256_fmadd_ps(v, u1, a13);                                           \
            }                                                                                \
            float *y0 = y + (size_t)i * ldy + j, *y1 = y0 + ldy;                             \
            fl_put(y0 + 0, TAIL(fl_hsum8(a00), x0, w0, k8, k), acc);                         \
            fl_put(y0 + 1, TAIL(fl_hsum8(a01), x0, w1, k8, k), acc);                         \
            fl_put(y0 + 2, TAIL(fl_hsum8(a02), x0, w2, k8, k), acc);                         \
            fl_put(y0 + 3, TAIL(fl_hsum8(a03), x0, w3, k8, k), acc);                         \
            fl_put(y1 + 0, TAIL(fl_hsum8(a10), x1, w0, k8, k), acc);                         \
            fl_put(y1 + 1, TAIL(fl_hsum8(a11), x1, w1, k8, k), acc);                         \
            fl_put(y1 + 2, TAIL(fl_hsum8(a12), x1, w2, k8, k), acc);                         \
            fl_put(y1 + 3, TAIL(fl_hsum8(a13), x1, w3, k8, k), acc);                         \
        }                                                                                    \
        for (; i < m; i++) {                                                                 \
            const float *x0 = x + (size_t)i * ldx;                                           \
            __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a03 = a00;               \
            for (int c = 0; c < k8; c += 8) {                                                \
                __m256 u0 = _mm256_loadu_ps(x0 + c);                                         \
                if (i == 0) {                                                                \
                    _mm_prefetch((const char *)(w0 + 4 * (size_t)k + c), _MM_HINT_T0);       \
                    _mm_prefetch((const char *)(w1 + 4 * (size_t)k + c), _MM_HINT_T0);       \
                    _mm_prefetch((const char *)(w2 + 4 * (size_t)k + c), _MM_HINT_T0);       \
                    _mm_prefetch((const char *)(w3 + 4 * (size_t)k + c), _MM_HINT_T0);       \
                }                                                                            \
                a00 = _mm256_fmadd_ps(LOADW(w0 + c), u0, a00);                               \
                a01 = _mm256_fmadd_ps(LOADW(w1 + c), u0, a01);                               \
                a02 = _mm256_fmadd_ps(LOADW(w2 + c), u0, a02);                               \
                a03 = _mm256_fmadd_ps(LOADW(w3 + c), u0, a03);                               \
            }                                                                                \
            float *y0 = y + (size_t)i * ldy + j;                                             \
            fl_put(y0 + 0, TAIL(fl_hsum8(a00), x0, w0, k8, k), acc);                         \
            fl_put(y0 + 1, TAIL(fl_hsum8(a01), x0, w1, k8, k), acc);                         \
            fl_put(y0 + 2, TAIL(fl_hsum8(a02), x0, w2, k8, k), acc);                         \
            fl_put(y0 + 3, TAIL(fl_hsum8(a03), x0, w3, k8, k), acc);                         \
        }                                                                                    \
    }                                                                                        \
    for (; j < n; j++) {                                                                     \
        const WT *w0 = w + (size_t)j * k;                                                    \
        for (int i = 0; i < m; i++) {                                                        \
            const float *x0 = x + (size_t)i * ldx;                                           \
            __m256 a00 = _mm256_setzero_ps();                                                \
            for (int c = 0; c < k8; c += 8)                                                  \
                a00 = _mm256_fmadd_ps(LOADW(w0 + c), _mm256_loadu_ps(x0 + c), a00);         \
            fl_put(y + (size_t)i * ldy + j, TAIL(fl_hsum8(a00), x0, w0, k8, k), acc);        \
        }                                                                                    \
    }

FL_AVX2 static void fl_mm_f32_avx2(float *y, int ldy, const float *x, int ldx, int m,
                                   const float *w, int n, int k, bool acc)
{
    FL_MM_AVX2_BODY(float, _mm256_loadu_ps, fl_tail_f32)
}

FL_AVX2 static void fl_mm_bf16_avx2(float *y, int ldy, const float *x, int ldx, int m,
                                    const uint16_t *w, int n, int k, bool acc)
{
    FL_MM_AVX2_BODY(uint16_t, fl_load_bf16x8, fl_tail_bf16)
}

/* Key rows this far ahead are prefetched: a segment's pages need not be neighbours in their
 * plane, and a page holds a block of keys, too short a run for the hardware prefetcher. The
 * prefetches go a line per row at a time, spread over the work: whole rows at once (64 lines
 * per 8 keys) stalled on the line fill buffers, and cold keys read at 9-10 GB/s on one
 * thread against 36 GB/s streaming (docs/benchmarks.md, "Attention's prefetching"). */
#ifndef FL_KV_PF /* overridable for experiments, as the locality hint: -DFL_KV_PF_LOC=2 */
#define FL_KV_PF 32
#endif
#ifndef FL_KV_PF_LOC
#define FL_KV_PF_LOC 3
#endif

/* The AVX2 level's prefetcher (Zen 3): the lines of the rows ahead in memory order, row after
 * row, one line per call, the calls spread evenly over the work. A line of each of 8 rows at a
 * time (as the AVX-512 level still does) left cold keys at 8 GB/s on a thread of a Zen 3 that
 * streams 16-18; in memory order the hardware prefetcher joins in, and qk and pv read cold
 * keys in 1.35-1.45x less time (docs/benchmarks.md, "Attention's prefetching on AVX2"). */
#define FL_KV_PF_DEF(NAME, T, PER_LINE)                                                            \
    typedef struct {                                                                              \
        const T *const *rows; /* rows[0..n) are prefetched */                                     \
        int n, t, l, lines;   /* row t, line l next; lines per row */                             \
    } NAME;                                                                                       \
    /* kr[j0 .. j0 + r), clipped to nk; none when pf is 0 (rows already in L1) */                 \
    static inline NAME NAME##_at(const T *const *kr, int j0, int r, int nk, int lines, int pf)    \
    {                                                                                             \
        int n = nk - j0 < r ? nk - j0 : r;                                                        \
        if (!pf || n <= 0)                                                                        \
            return (NAME){kr, 0, 0, 0, lines};                                                    \
        return (NAME){kr + j0, n, 0, 0, lines};                                                   \
    }                                                                                             \
    static inline void NAME##_next(NAME *p)                                                       \
    {                                                                                             \
        if (p->t >= p->n)                                                                         \
            return;                                                                               \
        __builtin_prefetch(p->rows[p->t] + p->l * (PER_LINE), 0, FL_KV_PF_LOC);                   \
        if (++p->l == p->lines) {                                                                 \
            p->l = 0;                                                                             \
            p->t++;                                                                               \
        }                                                                                         \
    }
FL_KV_PF_DEF(fl_kv_pf, float, 16)
FL_KV_PF_DEF(fl_kv_pf16, uint16_t, 32)

/* Scores against the transposed queries: per key element, one broadcast times two ymm of
 * 16 queries; 4 keys at a time (8 accumulators). A tile of at most 8 queries (block 4 with
 * 2-way GQA) takes one ymm and 8 keys at a time: half the FMAs, which bound this loop on
 * AVX2. Every score is one running sum over d in order, whatever the tile. */
FL_AVX2 static inline __attribute__((always_inline)) void
fl_qk_pf_avx2(float *s, int lds, const float *qt, int nq, const float *const *kr, int nk, int hd,
              float scale, int pf)
{
    float r[FL_QT];
    int lines = (hd + 15) / 16;
    __m256 sc = _mm256_set1_ps(scale);
    int j = 0;
    if (nq <= 8) /* the tile's first ymm holds every query: the second would be wasted FMAs */
        for (; j + 8 <= nk; j += 8) {
            __m256 a[8];
            _Pragma("GCC unroll 8")
            for (int t = 0; t < 8; t++)
                a[t] = _mm256_setzero_ps();
            fl_kv_pf pq = fl_kv_pf_at(kr, j + pf, 8, nk, lines, pf);
            for (int d = 0; d < hd; d++) {
                if (pf && (d & 1) == 0) /* 8 rows' lines in hd steps: one every 2 */
                    fl_kv_pf_next(&pq);
                __m256 u0 = _mm256_loadu_ps(qt + d * FL_QT);
                _Pragma("GCC unroll 8")
                for (int t = 0; t < 8; t++)
                    a[t] = _mm256_fmadd_ps(_mm256_broadcast_ss(kr[j + t] + d), u0, a[t]);
            }
            _Pragma("GCC unroll 8")
            for (int t = 0; t < 8; t++) {
                _mm256_storeu_ps(r, _mm256_mul_ps(a[t], sc));
                for (int i = 0; i < nq; i++)
                    s[(size_t)i * lds + j + t] = r[i];
            }
        }
    /* 16 queries: 6 keys at a time, 12 accumulators, so that the FMAs' latency is covered
     * with room to spare (8 chains are just enough at 2 FMAs a cycle and 4 cycles each) */
    for (; j + 6 <= nk; j += 6) {
        __m256 a[6][2];
        _Pragma("GCC unroll 6")
        for (int t = 0; t < 6; t++)
            a[t][0] = a[t][1] = _mm256_setzero_ps();
        fl_kv_pf pq = fl_kv_pf_at(kr, j + pf, 6, nk, lines, pf);
        for (int d = 0; d < hd; d++) {
            if (pf && (d & 1) == 0) /* 6 rows' lines in hd steps: at most one every 2 */
                fl_kv_pf_next(&pq);
            __m256 u0 = _mm256_loadu_ps(qt + d * FL_QT), u1 = _mm256_loadu_ps(qt + d * FL_QT + 8);
            _Pragma("GCC unroll 6")
            for (int t = 0; t < 6; t++) {
                __m256 b = _mm256_broadcast_ss(kr[j + t] + d);
                a[t][0] = _mm256_fmadd_ps(b, u0, a[t][0]);
                a[t][1] = _mm256_fmadd_ps(b, u1, a[t][1]);
            }
        }
        _Pragma("GCC unroll 6")
        for (int t = 0; t < 6; t++) {
            _mm256_storeu_ps(r, _mm256_mul_ps(a[t][0], sc));
            _mm256_storeu_ps(r + 8, _mm256_mul_ps(a[t][1], sc));
            for (int i = 0; i < nq; i++)
                s[(size_t)i * lds + j + t] = r[i];
        }
    }
    for (; j + 4 <= nk; j += 4) {
        const float *k0 = kr[j], *k1 = kr[j + 1], *k2 = kr[j + 2], *k3 = kr[j + 3];
        __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00;
        __m256 a20 = a00, a21 = a00, a30 = a00, a31 = a00;
        fl_kv_pf pq = fl_kv_pf_at(kr, j + pf, 4, nk, lines, pf);
        for (int d = 0; d < hd; d++) {
            if (pf && (d & 3) == 0) /* 4 rows' lines in hd steps: one every 4 */
                fl_kv_pf_next(&pq);
            __m256 u0 = _mm256_loadu_ps(qt + d * FL_QT), u1 = _mm256_loadu_ps(qt + d * FL_QT + 8), b;
            b = _mm256_broadcast_ss(k0 + d);
            a00 = _mm256_fmadd_ps(b, u0, a00);
            a01 = _mm256_fmadd_ps(b, u1, a01);
            b = _mm256_broadcast_ss(k1 + d);
            a10 = _mm256_fmadd_ps(b, u0, a10);
            a11 = _mm256_fmadd_ps(b, u1, a11);
            b = _mm256_broadcast_ss(k2 + d);
            a20 = _mm256_fmadd_ps(b, u0, a20);
            a21 = _mm256_fmadd_ps(b, u1, a21);
            b = _mm256_broadcast_ss(k3 + d);
            a30 = _mm256_fmadd_ps(b, u0, a30);
            a31 = _mm256_fmadd_ps(b, u1, a31);
        }
        __m256 acc[4][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}};
        for (int t = 0; t < 4; t++) {
            _mm256_storeu_ps(r, _mm256_mul_ps(acc[t][0], sc));
            _mm256_storeu_ps(r + 8, _mm256_mul_ps(acc[t][1], sc));
            for (int i = 0; i < nq; i++)
                s[(size_t)i * lds + j + t] = r[i];
        }
    }
    for (; j < nk; j++) {
        const float *k0 = kr[j];
        __m256 a00 = _mm256_setzero_ps(), a01 = a00;
        for (int d = 0; d < hd; d++) {
            __m256 b = _mm256_broadcast_ss(k0 + d);
            a00 = _mm256_fmadd_ps(b, _mm256_loadu_ps(qt + d * FL_QT), a00);
            a01 = _mm256_fmadd_ps(b, _mm256_loadu_ps(qt + d * FL_QT + 8), a01);
        }
        _mm256_storeu_ps(r, _mm256_mul_ps(a00, sc));
        _mm256_storeu_ps(r + 8, _mm256_mul_ps(a01, sc));
        for (int i = 0; i < nq; i++)
            s[(size_t)i * lds + j] = r[i];
    }
}

/* R (<= 6) query rows x 16 output dims from d in 2R accumulators over nk keys: per key 2
 * vectors of V (f32 rows vf, or from one 32-byte load of bf16 rows vb: even dims shifted, odd
 * masked, in fl_pv_b16_avx2's even/odd layout), R broadcasts of p, 2R FMAs; the next span's
 * lines prefetched as the keys go (pf for f32 rows, pb for bf16). R and b16 are constants at
 * each call. */
FL_AVX2 static inline __attribute__((always_inline)) void
fl_pv_rows_avx2(float *o0, int ldo, const float *p0, int ldp, int R, int nk,
                const float *const *vf, const uint16_t *const *vb, int d, bool b16, long *pacc,
                long ptot, long pit, fl_kv_pf *pf, fl_kv_pf16 *pb)
{
    __m256 a[6][2], v0, v1;
    _Pragma("GCC unroll 6")
    for (int t = 0; t < R; t++) {
        a[t][0] = _mm256_loadu_ps(o0 + (size_t)t * ldo);
        a[t][1] = _mm256_loadu_ps(o0 + (size_t)t * ldo + 8);
    }
    for (int j = 0; j < nk; j++) {
        if (b16) {
            for (*pacc += ptot; *pacc >= pit && pb->t < pb->n; *pacc -= pit)
                fl_kv_pf16_next(pb);
            __m256i x = _mm256_loadu_si256((const __m256i *)(vb[j] + d));
            v0 = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
            v1 = _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32((int)0xffff0000u)));
        } else {
            for (*pacc += ptot; *pacc >= pit && pf->t < pf->n; *pacc -= pit)
                fl_kv_pf_next(pf);
            v0 = _mm256_loadu_ps(vf[j] + d);
            v1 = _mm256_loadu_ps(vf[j] + d + 8);
        }
        _Pragma("GCC unroll 6")
        for (int t = 0; t < R; t++) {
            __m256 b = _mm256_broadcast_ss(p0 + (size_t)t * ldp + j);
            a[t][0] = _mm256_fmadd_ps(b, v0, a[t][0]);
            a[t][1] = _mm256_fmadd_ps(b, v1, a[t][1]);
        }
    }
    _Pragma("GCC unroll 6")
    for (int t = 0; t < R; t++) {
        _mm256_storeu_ps(o0 + (size_t)t * ldo, a[t][0]);
        _mm256_storeu_ps(o0 + (size_t)t * ldo + 8, a[t][1]);
    }
}

/* One pass of fl_pv_span_avx2's 4-row groups: 4 query rows x 8W output dims from d, in 4W
 * accumulators over the span's keys (per key W loads of V, 4 broadcasts of p, 4W FMAs), the
 * next span's lines prefetched as the keys go. W = 3 (12 accumulators) where the dims allow:
 * with 8, one FMA per key each, the chains were the FMA latency at 2 a cycle. */
FL_AVX2 static inline __attribute__((always_inline)) void
fl_pv_rows4_avx2(float *o0, int ldo, const float *p0, int ldp, const float *const *vr, int nk,
                 int d, int W, long *pacc, long ptot, long pit, fl_kv_pf *pq)
{
    __m256 a[4][3], v[3];
    _Pragma("GCC unroll 4")
    for (int t = 0; t < 4; t++)
        _Pragma("GCC unroll 3")
        for (int u = 0; u < W; u++)
            a[t][u] = _mm256_loadu_ps(o0 + (size_t)t * ldo + 8 * u);
    for (int j = 0; j < nk; j++) {
        for (*pacc += ptot; *pacc >= pit && pq->t < pq->n; *pacc -= pit)
            fl_kv_pf_next(pq);
        _Pragma("GCC unroll 3")
        for (int u = 0; u < W; u++)
            v[u] = _mm256_loadu_ps(vr[j] + d + 8 * u);
        _Pragma("GCC unroll 4")
        for (int t = 0; t < 4; t++) {
            __m256 b = _mm256_broadcast_ss(p0 + (size_t)t * ldp + j);
            _Pragma("GCC unroll 3")
            for (int u = 0; u < W; u++)
                a[t][u] = _mm256_fmadd_ps(b, v[u], a[t][u]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int t = 0; t < 4; t++)
        _Pragma("GCC unroll 3")
        for (int u = 0; u < W; u++)
            _mm256_storeu_ps(o0 + (size_t)t * ldo + 8 * u, a[t][u]);
}

/* Outputs over a span of keys: rows 6 at a time x 16 dims (12 accumulators) where 4-row
 * groups still cover the rest, then 4 rows x 24 dims (fl_pv_rows4_avx2). The rows nx[0..nn)
 * (the next span's) are prefetched a line at a time, in memory order, over the passes. */
FL_AVX2 static void fl_pv_span_avx2(float *o, int ldo, const float *p, int ldp, int nq,
                                    const float *const *vr, int nk, int hd,
                                    const float *const *nx, int nn)
{
    int h16 = hd & ~15, lines = (hd + 15) / 16;
    /* the passes below: 6-row groups of 16 dims, then 4-row groups of 24, 16 and 8 */
    int n6 = 0, r6 = nq;
    while (r6 >= 10 || r6 == 6)
        n6++, r6 -= 6;
    int p4 = h16 / 24 + (h16 % 24 >= 16) + (h16 % 24 % 16 >= 8);
    int passes = n6 * (h16 / 16) + (r6 / 4) * p4;
    /* the next span's nn rows' lines in memory order, spread evenly over the passes' keys */
    long ptot = (long)nn * lines, pit = (long)passes * nk, pacc = 0;
    fl_kv_pf pq = fl_kv_pf_at(nx, 0, nn, nn, lines, 1);
    int i = 0;
    /* 6 rows x 16 dims, 12 accumulators, where 4-row groups still cover the rest (16 rows:
     * 6 + 6 + 4): 8 chains of one FMA per key are just the FMA latency at 2 a cycle */
    for (; nq - i >= 10 || nq - i == 6; i += 6)
        for (int d = 0; d < h16; d += 16)
            fl_pv_rows_avx2(o + (size_t)i * ldo + d, ldo, p + (size_t)i * ldp, ldp, 6, nk, vr, NULL,
                            d, false, &pacc, ptot, pit, &pq, NULL);
    for (; i + 4 <= nq; i += 4) {
        const float *p0 = p + (size_t)i * ldp;
        float *o0 = o + (size_t)i * ldo;
        int d = 0;
        for (; d + 24 <= h16; d += 24)
            fl_pv_rows4_avx2(o0 + d, ldo, p0, ldp, vr, nk, d, 3, &pacc, ptot, pit, &pq);
        if (d + 16 <= h16)
            fl_pv_rows4_avx2(o0 + d, ldo, p0, ldp, vr, nk, d, 2, &pacc, ptot, pit, &pq), d += 16;
        if (d + 8 <= h16)
            fl_pv_rows4_avx2(o0 + d, ldo, p0, ldp, vr, nk, d, 1, &pacc, ptot, pit, &pq);
    }
    /* Remaining rows, and the columns past h16 of all rows: the same per-element order (one
     * fused multiply-add per key, keys in order); with no pass above, the next rows are
     * prefetched whole here. */
    for (int r = 0; r < nq; r++) {
        int d0 = r < i ? h16 : 0;
        const float *pr = p + (size_t)r * ldp;
        float *orow = o + (size_t)r * ldo;
        if (!passes && r == 0)
            for (int j = 0; j < nn; j++)
                for (int l = 0; l < lines; l++)
                    __builtin_prefetch(nx[j] + l * 16, 0, FL_KV_PF_LOC);
        int d = d0;
        for (; d + 8 <= hd; d += 8) {
            __m256 a = _mm256_loadu_ps(orow + d);
            for (int j = 0; j < nk; j++)
                a = _mm256_fmadd_ps(_mm256_broadcast_ss(pr + j), _mm256_loadu_ps(vr[j] + d), a);
            _mm256_storeu_ps(orow + d, a);
        }
        for (; d < hd; d++) {
            float a = orow[d];
            for (int j = 0; j < nk; j++)
                a = fmaf(pr[j], vr[j][d], a);
            orow[d] = a;
        }
    }
}

FL_AVX2 static void fl_bf16_to_f32_avx2(float *dst, const uint16_t *src, long n)
{
    long i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, fl_load_bf16x8(src + i));
    for (; i < n; i++)
        dst[i] = fl_bf16_to_f32(src[i]);
}

/* fl_f32_to_bf16 on 8 lanes: u + 0x7fff + (bit 16 of u), the high half; a NaN keeps its
 * high half with the quiet bit set. */
FL_AVX2 static void fl_f32_to_bf16_avx2(uint16_t *dst, const float *src, long n)
{
    const __m256i abs = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i half = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
    const __m256i quiet = _mm256_set1_epi32(0x40);
    long i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_castps_si256(_mm256_loadu_ps(src + i));
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs), inf);
        __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(half, _mm256_and_si256(
                                                                  _mm256_srli_epi32(u, 16), one)));
        r = _mm256_srli_epi32(r, 16);
        r = _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_srli_epi32(u, 16), quiet), nan);
        /* 8 values < 2^16 in 32-bit lanes -> 16-bit: packus works per 128-bit lane */
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_castsi256_si128(p));
    }
    for (; i < n; i++)
        dst[i] = fl_f32_to_bf16(src[i]);
}

FL_ATT_LEVEL(avx2, FL_AVX2)

/* bf16 keys and values read as they are, without widening them into scratch first. A 32-bit
 * broadcast of keys d and d + 1 gives both: key d as f32 is the low half shifted up, d + 1
 * the high half masked, so per two elements of a row one load serves two FMAs and the
 * shift and the mask go to pipes the FMAs leave idle. Every score is still one running sum
 * over d in order: the bits of the widening path (kernels.h). */
FL_AVX2 static inline __m256 fl_bf16_lo(__m256i b) { return _mm256_castsi256_ps(_mm256_slli_epi32(b, 16)); }
FL_AVX2 static inline __m256 fl_bf16_hi(__m256i b)
{
    return _mm256_castsi256_ps(_mm256_and_si256(b, _mm256_set1_epi32((int)0xffff0000u)));
}
FL_AVX2 static inline __m256i fl_bcast_pair(const uint16_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

FL_AVX2 static void fl_qk_b16_avx2(float *s, int lds, const float *qt, int nq,
                                   const uint16_t *const *kr, int nk, int hd, float scale,
                                   float *wide)
{
    if (hd & 1) { /* the pairs need an even head_dim: widen (the same bits) */
        fl_qk_bf16_avx2(s, lds, qt, nq, kr, nk, hd, scale, wide);
        return;
    }
    float r[FL_QT];
    int lines = (hd + 31) / 32, pf = FL_KV_PF;
    __m256 sc = _mm256_set1_ps(scale);
    int j = 0;
    if (nq <= 8)
        for (; j + 8 <= nk; j += 8) {
            __m256 a[8];
            _Pragma("GCC unroll 8")
            for (int t = 0; t < 8; t++)
                a[t] = _mm256_setzero_ps();
            fl_kv_pf16 pq = fl_kv_pf16_at(kr, j + pf, 8, nk, lines, pf);
            for (int d = 0; d < hd; d += 2) {
                if ((d & 3) == 0) /* 8 rows' lines in hd / 2 steps: one every 2 */
                    fl_kv_pf16_next(&pq);
                __m256 u0 = _mm256_loadu_ps(qt + d * FL_QT), u1 = _mm256_loadu_ps(qt + (d + 1) * FL_QT);
                _Pragma("GCC unroll 8")
                for (int t = 0; t < 8; t++) {
                    __m256i b = fl_bcast_pair(kr[j + t] + d);
                    a[t] = _mm256_fmadd_ps(fl_bf16_lo(b), u0, a[t]);
                    a[t] = _mm256_fmadd_ps(fl_bf16_hi(b), u1, a[t]);
                }
            }
            _Pragma("GCC unroll 8")
            for (int t = 0; t < 8; t++) {
                _mm256_storeu_ps(r, _mm256_mul_ps(a[t], sc));
                for (int i = 0; i < nq; i++)
                    s[(size_t)i * lds + j + t] = r[i];
            }
        }
    for (; j + 4 <= nk; j += 4) {
        __m256 a[4][2];
        for (int t = 0; t < 4; t++)
            a[t][0] = a[t][1] = _mm256_setzero_ps();
        fl_kv_pf16 pq = fl_kv_pf16_at(kr, j + pf, 4, nk, lines, pf);
        for (int d = 0; d < hd; d += 2) {
            if ((d & 7) == 0) /* 4 rows' lines in hd / 2 steps: one every 4 */
                fl_kv_pf16_next(&pq);
            const float *q0 = qt + d * FL_QT, *q1 = q0 + FL_QT;
            __m256 u00 = _mm256_loadu_ps(q0), u01 = _mm256_loadu_ps(q0 + 8);
            __m256 u10 = _mm256_loadu_ps(q1), u11 = _mm256_loadu_ps(q1 + 8);
            _Pragma("GCC unroll 4")
            for (int t = 0; t < 4; t++) {
                __m256i b = fl_bcast_pair(kr[j + t] + d);
                __m256 lo = fl_bf16_lo(b), hi = fl_bf16_hi(b);
                a[t][0] = _mm256_fmadd_ps(hi, u10, _mm256_fmadd_ps(lo, u00, a[t][0]));
                a[t][1] = _mm256_fmadd_ps(hi, u11, _mm256_fmadd_ps(lo, u01, a[t][1]));
            }
        }
        for (int t = 0; t < 4; t++) {
            _mm256_storeu_ps(r, _mm256_mul_ps(a[t][0], sc));
            _mm256_storeu_ps(r + 8, _mm256_mul_ps(a[t][1], sc));
            for (int i = 0; i < nq; i++)
                s[(size_t)i * lds + j + t] = r[i];
        }
    }
    for (; j < nk; j++) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0;
        for (int d = 0; d < hd; d += 2) {
            __m256i b = fl_bcast_pair(kr[j] + d);
            __m256 lo = fl_bf16_lo(b), hi = fl_bf16_hi(b);
            a0 = _mm256_fmadd_ps(hi, _mm256_loadu_ps(qt + (d + 1) * FL_QT),
                                 _mm256_fmadd_ps(lo, _mm256_loadu_ps(qt + d * FL_QT), a0));
            a1 = _mm256_fmadd_ps(hi, _mm256_loadu_ps(qt + (d + 1) * FL_QT + 8),
                                 _mm256_fmadd_ps(lo, _mm256_loadu_ps(qt + d * FL_QT + 8), a1));
        }
        _mm256_storeu_ps(r, _mm256_mul_ps(a0, sc));
        _mm256_storeu_ps(r + 8, _mm256_mul_ps(a1, sc));
        for (int i = 0; i < nq; i++)
            s[(size_t)i * lds + j] = r[i];
    }
}

/* o rows (nq x hd) <-> w in the layout pv's loads give: per 16 output dims, the 8 even ones
 * then the 8 odd ones (16 bf16 values of a row are 8 pairs: the low halves are the even dims,
 * the high halves the odd) */
FL_AVX2 static void fl_eo_split(float *w, const float *o, int ldo, int nq, int hd)
{
    for (int i = 0; i < nq; i++)
        for (int d = 0; d < hd; d += 16) {
            __m256 x0 = _mm256_loadu_ps(o + (size_t)i * ldo + d), x1 = _mm256_loadu_ps(o + (size_t)i * ldo + d + 8);
            __m256 lo = _mm256_permute2f128_ps(x0, x1, 0x20), hi = _mm256_permute2f128_ps(x0, x1, 0x31);
            _mm256_storeu_ps(w + (size_t)i * hd + d, _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0)));
            _mm256_storeu_ps(w + (size_t)i * hd + d + 8, _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1)));
        }
}

FL_AVX2 static void fl_eo_join(float *o, int ldo, const float *w, int nq, int hd)
{
    for (int i = 0; i < nq; i++)
        for (int d = 0; d < hd; d += 16) {
            __m256 e = _mm256_loadu_ps(w + (size_t)i * hd + d), od = _mm256_loadu_ps(w + (size_t)i * hd + d + 8);
            __m256 lo = _mm256_unpacklo_ps(e, od), hi = _mm256_unpackhi_ps(e, od);
            _mm256_storeu_ps(o + (size_t)i * ldo + d, _mm256_permute2f128_ps(lo, hi, 0x20));
            _mm256_storeu_ps(o + (size_t)i * ldo + d + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
        }
}

/* o_i += sum_j p_ij v_j over bf16 rows: per key, one 32-byte load of 16 values gives the
 * even dims (shifted) and the odd (masked), accumulated in w's even/odd layout, 4 query rows x
 * 16 dims in 8 accumulators, in spans of FL_KV_PF keys whose rows stay in L1 across the
 * passes, the next span's rows prefetched in memory order over them (as fl_pv_span_avx2).
 * Per output element one fused multiply-add per key, keys in order: the widening path's
 * bits. */
FL_AVX2 static void fl_pv_b16_avx2(float *o, int ldo, const float *p, int ldp, int nq,
                                   const uint16_t *const *vr, int nk, int hd, float *wide)
{
    if (hd & 15 || nq > FL_KV_CHUNK) { /* whole groups of 16 dims only: widen (the same bits) */
        fl_pv_bf16_avx2(o, ldo, p, ldp, nq, vr, nk, hd, wide);
        return;
    }
    const __m256i mhi = _mm256_set1_epi32((int)0xffff0000u);
    int lines = (hd + 31) / 32, n6 = 0, r6 = nq;
    while (r6 >= 10 || r6 == 6) /* the groups below: 6 rows, then 4, then single rows */
        n6++, r6 -= 6;
    int passes = (n6 + r6 / 4 + r6 % 4) * (hd / 16);
    fl_eo_split(wide, o, ldo, nq, hd);
    for (int j0 = 0; j0 < nk; j0 += FL_KV_PF) {
        int n = nk - j0 < FL_KV_PF ? nk - j0 : FL_KV_PF, j1 = j0 + n;
        int nn = nk - j1 < FL_KV_PF ? nk - j1 : FL_KV_PF;
        const uint16_t *const *v = vr + j0;
        const float *ps = p + j0;
        long ptot = (long)(nn > 0 ? nn : 0) * lines, pit = (long)passes * n, pacc = 0;
        fl_kv_pf16 pq = fl_kv_pf16_at(vr, j1, nn, nk, lines, 1);
        int i = 0;
        for (; nq - i >= 10 || nq - i == 6; i += 6) /* 12 accumulators, as fl_pv_span_avx2 */
            for (int d = 0; d < hd; d += 16)
                fl_pv_rows_avx2(wide + (size_t)i * hd + d, hd, ps + (size_t)i * ldp, ldp, 6, n, NULL,
                                v, d, true, &pacc, ptot, pit, NULL, &pq);
        for (; i + 4 <= nq; i += 4)
            for (int d = 0; d < hd; d += 16)
                fl_pv_rows_avx2(wide + (size_t)i * hd + d, hd, ps + (size_t)i * ldp, ldp, 4, n, NULL,
                                v, d, true, &pacc, ptot, pit, NULL, &pq);
        for (; i < nq; i++) { /* the last rows, one at a time */
            const float *pr = ps + (size_t)i * ldp;
            float *w = wide + (size_t)i * hd;
            for (int d = 0; d < hd; d += 16) {
                __m256 a0 = _mm256_loadu_ps(w + d), a1 = _mm256_loadu_ps(w + d + 8);
                for (int j = 0; j < n; j++) {
                    for (pacc += ptot; pacc >= pit && pq.t < pq.n; pacc -= pit)
                        fl_kv_pf16_next(&pq);
                    __m256i x = _mm256_loadu_si256((const __m256i *)(v[j] + d));
                    __m256 b = _mm256_broadcast_ss(pr + j);
                    a0 = _mm256_fmadd_ps(b, _mm256_castsi256_ps(_mm256_slli_epi32(x, 16)), a0);
                    a1 = _mm256_fmadd_ps(b, _mm256_castsi256_ps(_mm256_and_si256(x, mhi)), a1);
                }
                _mm256_storeu_ps(w + d, a0);
                _mm256_storeu_ps(w + d + 8, a1);
            }
        }
    }
    fl_eo_join(o, ldo, wide, nq, hd);
}

/* e^x: 2^n * p(r), r = x - n ln2 in [-ln2/2, ln2/2], p the degree-6 Taylor polynomial
 * (relative error ~2e-7). x is clamped to [-87, 88] so 2^n stays a normal float: e^-87 ~
 * 1.6e-38 is nothing next to the e^0 = 1 of a softmax's max, and silu(g) for g < -88 is
 * g / e^88 ~ 0 either way. */
FL_AVX2 static inline __m256 fl_exp8(__m256 x)
{
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

FL_AVX2 static void fl_lse_add_avx2(fl_lse *s, const float *l, int n, int32_t id0)
{
    int n8 = n & ~7;
    __m256 vm = _mm256_set1_ps(-INFINITY);
    for (int i = 0; i < n8; i += 8)
        vm = _mm256_max_ps(vm, _mm256_loadu_ps(l + i));
    float tmp[8];
    _mm256_storeu_ps(tmp, vm);
    float cmax = -INFINITY;
    for (int i = 0; i < 8; i++)
        cmax = tmp[i] > cmax ? tmp[i] : cmax;
    for (int i = n8; i < n; i++)
        cmax = l[i] > cmax ? l[i] : cmax;
    if (!(cmax > -INFINITY))
        return; /* all -inf or NaN: nothing to add */
    if (cmax > s->max) {
        int at = 0;
        __m256 vc = _mm256_set1_ps(cmax);
        int i = 0;
        for (; i < n8; i += 8) {
            int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(l + i), vc, _CMP_EQ_OQ));
            if (mask) {
                at = i + __builtin_ctz((unsigned)mask);
                break;
            }
        }
        if (i >= n8)
            for (at = n8; at < n && l[at] != cmax; at++)
                ;
        fl_lse_rebase(s, cmax);
        s->arg = id0 + at;
    }
    __m256 mx = _mm256_set1_ps(s->max), vs = _mm256_setzero_ps(), vu = vs;
    for (int i = 0; i < n8; i += 8) {
        __m256 u = _mm256_sub_ps(_mm256_loadu_ps(l + i), mx);
        __m256 e = fl_exp8(u);
        vs = _mm256_add_ps(vs, e);
        vu = _mm256_fmadd_ps(e, u, vu);
    }
    double sum = fl_hsum8(vs), su = fl_hsum8(vu);
    for (int i = n8; i < n; i++) {
        float u = l[i] - s->max, e = expf(u);
        sum += e;
        su += (double)e * u;
    }
    s->sum += sum;
    s->sum_u += su;
}

FL_AVX2 static void fl_softmax_avx2(float *s, int n)
{
    int n8 = n & ~7;
    __m256 vm = _mm256_set1_ps(-INFINITY);
    for (int i = 0; i < n8; i += 8)
        vm = _mm256_max_ps(vm, _mm256_loadu_ps(s + i));
    float tmp[8];
    _mm256_storeu_ps(tmp, vm);
    float m = -INFINITY;
    for (int i = 0; i < 8; i++)
        m = tmp[i] > m ? tmp[i] : m;
    for (int i = n8; i < n; i++)
        m = s[i] > m ? s[i] : m;
    __m256 mx = _mm256_set1_ps(m), vs = _mm256_setzero_ps();
    for (int i = 0; i < n8; i += 8) {
        __m256 e = fl_exp8(_mm256_sub_ps(_mm256_loadu_ps(s + i), mx));
        _mm256_storeu_ps(s + i, e);
        vs = _mm256_add_ps(vs, e);
    }
    float sum = fl_hsum8(vs);
    for (int i = n8; i < n; i++) {
        s[i] = expf(s[i] - m);
        sum += s[i];
    }
    __m256 r = _mm256_set1_ps(1.0f / sum);
    for (int i = 0; i < n8; i += 8)
        _mm256_storeu_ps(s + i, _mm256_mul_ps(_mm256_loadu_ps(s + i), r));
    for (int i = n8; i < n; i++)
        s[i] *= 1.0f / sum;
}

FL_AVX2 static void fl_swiglu_avx2(float *h, const float *gu, int n_grp, int ib)
{
    if (ib != 8) {
        fl_swiglu_c(h, gu, n_grp, ib);
        return;
    }
    __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    for (int b = 0; b < n_grp; b++) {
        __m256 g = _mm256_loadu_ps(gu + 16 * b), u = _mm256_loadu_ps(gu + 16 * b + 8);
        __m256 e = fl_exp8(_mm256_sub_ps(zero, g));
        __m256 sg = _mm256_div_ps(g, _mm256_add_ps(one, e));
        _mm256_storeu_ps(h + 8 * b, _mm256_mul_ps(sg, u));
    }
}

FL_AVX2 static void fl_moe_sum_avx2(float *x, const float *const *ys, const float *w, int K,
                                    const float *s, int n)
{
    int d = 0;
    for (; d + 8 <= n; d += 8) {
        __m256 a = _mm256_setzero_ps();
        for (int k = 0; k < K; k++)
            a = _mm256_add_ps(a, _mm256_mul_ps(_mm256_set1_ps(w[k]), _mm256_loadu_ps(ys[k] + d)));
        if (s)
            a = _mm256_add_ps(a, _mm256_loadu_ps(s + d));
        _mm256_storeu_ps(x + d, _mm256_add_ps(_mm256_loadu_ps(x + d), a));
    }
    fl_moe_sum_from(x, ys, w, K, s, d, n);
}

/* ---------------------------------------------------------------- AVX-512 streaming matmul */

FL_AVX512 static inline __m512 fl_load_bf16x16(const uint16_t *p)
{
    __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

/* As the AVX2 kernel, with 16 lanes and a 4x4 tile (16 accumulators + 4 weight vectors + 1
 * X vector of the 32 zmm registers): at 4 rows of X each weight row is read exactly once,
 * and at 32 rows the kernel stays FMA-bound (16 FMAs per 8 loads). Every output: 16-lane
 * running sum over c < k16, _mm512_reduce_add_ps, then the tail in order. */
#define FL_MM_AVX512_BODY(WT, LOADW, TAIL)                                                   \
    int k16 = k & ~15;                                                                       \
    int j = 0;                                                                               \
    for (; j + 4 <= n; j += 4) {                                                             \
        const WT *w0 = w + (size_t)j * k, *w1 = w0 + k, *w2 = w1 + k, *w3 = w2 + k;          \
        const WT *pf = w0 + 4 * (size_t)k; /* the next group, fetched during the first tile */ \
        int i = 0;                                                                           \
        for (; i + 4 <= m; i += 4) {                                                         \
            const float *x0 = x + (size_t)i * ldx, *x1 = x0 + ldx, *x2 = x1 + ldx, *x3 = x2 + ldx; \
            __m512 a[4][4];                                                                  \
            for (int r = 0; r < 4; r++)                                                      \
                a[r][0] = a[r][1] = a[r][2] = a[r][3] = _mm512_setzero_ps();                 \
            for (int c = 0; c < k16; c += 16) {                                              \
                if (i == 0) {                                                                \
                    _mm_prefetch((const char *)(pf + c), _MM_HINT_T0);                       \
                    _mm_prefetch((const char *)(pf + k + c), _MM_HINT_T0);                   \
                    _mm_prefetch((const char *)(pf + 2 * (size_t)k + c), _MM_HINT_T0);       \
                    _mm_prefetch((const char *)(pf + 3 * (size_t)k + c), _MM_HINT_T0);       \
                }                                                                            \
                __m512 v0 = LOADW(w0 + c), v1 = LOADW(w1 + c), v2 = LOADW(w2 + c),           \
                       v3 = LOADW(w3 + c), u;                                                \
                u = _mm512_loadu_ps(x0 + c);                                                 \
                a[0][0] = _mm512_fmadd_ps(v0, u, a[0][0]);                                   \
                a[0][1] = _mm512_fmadd_ps(v1, u, a[0][1]);                                   \
                a[0][2] = _mm512_fmadd_ps(v2, u, a[0][2]);                                   \
                a[0][3] = _mm512_fmadd_ps(v3, u, a[0][3]);                                   \
                u = _mm512_loadu_ps(x1 + c);                                                 \
                a[1][0] = _mm512_fmadd_ps(v0, u, a[1][0]);                                   \
                a[1][1] = _mm512_fmadd_ps(v1, u, a[1][1]);                                   \
                a[1][2] = _mm512_fmadd_ps(v2, u, a[1][2]);                                   \
                a[1][3] = _mm512_fmadd_ps(v3, u, a[1][3]);                                   \
                u = _mm512_loadu_ps(x2 + c);                                                 \
                a[2][0] = _mm512_fmadd_ps(v0, u, a[2][0]);                                   \
                a[2][1] = _mm512_fmadd_ps(v1, u, a[2][1]);                                   \
                a[2][2] = _mm512_fmadd_ps(v2, u, a[2][2]);                                   \
                a[2][3] = _mm512_fmadd_ps(v3, u, a[2][3]);                                   \
                u = _mm512_loadu_ps(x3 + c);                                                 \
                a[3][0] = _mm512_fmadd_ps(v0, u, a[3][0]);                                   \
                a[3][1] = _mm512_fmadd_ps(v1, u, a[3][1]);                                   \
                a[3][2] = _mm512_fmadd_ps(v2, u, a[3][2]);                                   \
                a[3][3] = _mm512_fmadd_ps(v3, u, a[3][3]);                                   \
            }                                                                                \
            const float *xr[4] = {x0, x1, x2, x3};                                           \
            const WT *wr[4] = {w0, w1, w2, w3};                                              \
            for (int r = 0; r < 4; r++)                                                      \
                for (int q = 0; q < 4; q++)                                                  \
                    fl_put(y + (size_t)(i + r) * ldy + j + q,                                \
                           TAIL(_mm512_reduce_add_ps(a[r][q]), xr[r], wr[q], k16, k), acc);  \
        }                                                                                    \
        for (; i < m; i++) {                                                                 \
            const float *x0 = x + (size_t)i * ldx;                                           \
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                      \
            for (int c = 0; c < k16; c += 16) {                                              \
                if (i == 0) {                                                                \
                    _mm_prefetch((const char *)(pf + c), _MM_HINT_T0);                       \
                    _mm_prefetch((const char *)(pf + k + c), _MM_HINT_T0);                   \
                    _mm_prefetch((const char *)(pf + 2 * (size_t)k + c), _MM_HINT_T0);       \
                    _mm_prefetch((const char *)(pf + 3 * (size_t)k + c), _MM_HINT_T0);       \
                }                                                                            \
                __m512 u = _mm512_loadu_ps(x0 + c);                                          \
                a0 = _mm512_fmadd_ps(LOADW(w0 + c), u, a0);                                  \
                a1 = _mm512_fmadd_ps(LOADW(w1 + c), u, a1);                                  \
                a2 = _mm512_fmadd_ps(LOADW(w2 + c), u, a2);                                  \
                a3 = _mm512_fmadd_ps(LOADW(w3 + c), u, a3);                                  \
            }                                                                                \
            float *y0 = y + (size_t)i * ldy + j;                                             \
            fl_put(y0 + 0, TAIL(_mm512_reduce_add_ps(a0), x0, w0, k16, k), acc);             \
            fl_put(y0 + 1, TAIL(_mm512_reduce_add_ps(a1), x0, w1, k16, k), acc);             \
            fl_put(y0 + 2, TAIL(_mm512_reduce_add_ps(a2), x0, w2, k16, k), acc);             \
            fl_put(y0 + 3, TAIL(_mm512_reduce_add_ps(a3), x0, w3, k16, k), acc);             \
        }                                                                                    \
    }                                                                                        \
    for (; j < n; j++) {                                                                     \
        const WT *w0 = w + (size_t)j * k;                                                    \
        for (int i = 0; i < m; i++) {                                                        \
            const float *x0 = x + (size_t)i * ldx;                                           \
            __m512 a0 = _mm512_setzero_ps();                                                 \
            for (int c = 0; c < k16; c += 16)                                                \
                a0 = _mm512_fmadd_ps(LOADW(w0 + c), _mm512_loadu_ps(x0 + c), a0);           \
            fl_put(y + (size_t)i * ldy + j, TAIL(_mm512_reduce_add_ps(a0), x0, w0, k16, k), acc); \
        }                                                                                    \
    }

/* The 16 x 16 floats r[0..16) transposed in place: r[e] lane t = old r[t] lane e. In-lane 4 x 4
 * transposes (unpack, shuffle), then the 128-bit lanes (two rounds of shuffle_f32x4). */
FL_AVX512 static inline __attribute__((always_inline)) void fl_tr16_ps(__m512 *r)
{
    __m512 t[16], v[16];
    _Pragma("GCC unroll 8")
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* v[4a + b]: in lane L, rows 4a..4a+3 at element 4L + b */
    _Pragma("GCC unroll 4")
    for (int a = 0; a < 4; a++) {
        v[4 * a] = _mm512_shuffle_ps(t[4 * a], t[4 * a + 2], 0x44);
        v[4 * a + 1] = _mm512_shuffle_ps(t[4 * a], t[4 * a + 2], 0xee);
        v[4 * a + 2] = _mm512_shuffle_ps(t[4 * a + 1], t[4 * a + 3], 0x44);
        v[4 * a + 3] = _mm512_shuffle_ps(t[4 * a + 1], t[4 * a + 3], 0xee);
    }
    _Pragma("GCC unroll 4")
    for (int b = 0; b < 4; b++) {
        __m512 p0 = _mm512_shuffle_f32x4(v[b], v[4 + b], 0x88), p1 = _mm512_shuffle_f32x4(v[b], v[4 + b], 0xdd);
        __m512 q0 = _mm512_shuffle_f32x4(v[8 + b], v[12 + b], 0x88), q1 = _mm512_shuffle_f32x4(v[8 + b], v[12 + b], 0xdd);
        r[b] = _mm512_shuffle_f32x4(p0, q0, 0x88);
        r[8 + b] = _mm512_shuffle_f32x4(p0, q0, 0xdd);
        r[4 + b] = _mm512_shuffle_f32x4(p1, q1, 0x88);
        r[12 + b] = _mm512_shuffle_f32x4(p1, q1, 0xdd);
    }
}

/* Scores of a tile of at most 8 queries (block 4 with 2-way GQA), keys [0, nk rounded down
 * to 16), hd % 16 == 0: 16 keys x 16 elements read as rows and transposed in registers, so
 * a zmm holds one element of 16 keys, against each query's element broadcast: one
 * accumulator per query (R of them), lanes the keys, and every lane at work, where the
 * 16-query kernel below leaves half of each FMA idle at 8 queries and broadcasts every key
 * element. Each score is still one running sum over d in order (the same bits); a query
 * row's scores are one store of 16. The rows pf keys ahead are prefetched in memory order,
 * their lines spread over the element blocks. Returns the keys done. */
FL_AVX512 static inline __attribute__((always_inline)) int
fl_qk_t16_avx512(float *s, int lds, const float *qt, const float *const *kr, int nk, int hd,
                 float scale, int pf, int R)
{
    const __m512 sc = _mm512_set1_ps(scale);
    int lines = hd / 16, per = 16; /* 16 rows x lines lines over lines blocks */
    int j = 0;
    for (; j + 16 <= nk; j += 16) {
        __m512 a[8];
        _Pragma("GCC unroll 8")
        for (int i = 0; i < R; i++)
            a[i] = _mm512_setzero_ps();
        fl_kv_pf pq = fl_kv_pf_at(kr, j + pf, 16, nk, lines, pf);
        for (int d0 = 0; d0 < hd; d0 += 16) {
            for (int x = 0; x < per; x++)
                fl_kv_pf_next(&pq);
            __m512 c[16];
            _Pragma("GCC unroll 16")
            for (int t = 0; t < 16; t++)
                c[t] = _mm512_loadu_ps(kr[j + t] + d0);
            fl_tr16_ps(c);
            _Pragma("GCC unroll 16")
            for (int e = 0; e < 16; e++) {
                const float *qd = qt + (size_t)(d0 + e) * FL_QT;
                _Pragma("GCC unroll 8")
                for (int i = 0; i < R; i++)
                    a[i] = _mm512_fmadd_ps(c[e], _mm512_set1_ps(qd[i]), a[i]);
            }
        }
        _Pragma("GCC unroll 8")
        for (int i = 0; i < R; i++)
            _mm512_storeu_ps(s + (size_t)i * lds + j, _mm512_mul_ps(a[i], sc));
    }
    return j;
}

/* Attention with 16 lanes: scores as the AVX2 kernel with one zmm of 16 queries and 8 keys
 * at a time (a tile of at most 8 queries takes fl_qk_t16_avx512 first, above), the rows
 * FL_KV_PF keys ahead prefetched a line per row every 16 elements
 * (whole rows at once, 64 lines per 8 keys, stalled on the fill buffers: cold keys read at
 * 9-10 GB/s against 36 GB/s streaming, docs/benchmarks.md); outputs with 4 query rows x 32
 * dims over spans of FL_KV_PF keys. */
FL_AVX512 static inline __attribute__((always_inline)) void
fl_qk_pf_avx512(float *s, int lds, const float *qt, int nq, const float *const *kr, int nk, int hd,
              float scale, int pf)
{
    float r[FL_QT];
    __m512 sc = _mm512_set1_ps(scale);
    int j = 0;
    if (nq <= 8 && hd % 16 == 0) {
        switch (nq) {
#define FL_QKT(R) case R: j = fl_qk_t16_avx512(s, lds, qt, kr, nk, hd, scale, pf, R); break;
        FL_QKT(1) FL_QKT(2) FL_QKT(3) FL_QKT(4) FL_QKT(5) FL_QKT(6) FL_QKT(7) FL_QKT(8)
#undef FL_QKT
        default: break;
        }
    }
    for (; j + 8 <= nk; j += 8) {
        const float *k0 = kr[j], *k1 = kr[j + 1], *k2 = kr[j + 2], *k3 = kr[j + 3];
        const float *k4 = kr[j + 4], *k5 = kr[j + 5], *k6 = kr[j + 6], *k7 = kr[j + 7];
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
        for (int d = 0; d < hd; d++) {
            if (pf && (d & 15) == 0) /* one line of each of 8 rows ahead per 16 elements */
                for (int t = 0; t < 8 && j + pf + t < nk; t++)
                    __builtin_prefetch(kr[j + pf + t] + d, 0, FL_KV_PF_LOC);
            __m512 u = _mm512_loadu_ps(qt + d * FL_QT);
            a0 = _mm512_fmadd_ps(_mm512_set1_ps(k0[d]), u, a0);
            a1 = _mm512_fmadd_ps(_mm512_set1_ps(k1[d]), u, a1);
            a2 = _mm512_fmadd_ps(_mm512_set1_ps(k2[d]), u, a2);
            a3 = _mm512_fmadd_ps(_mm512_set1_ps(k3[d]), u, a3);
            a4 = _mm512_fmadd_ps(_mm512_set1_ps(k4[d]), u, a4);
            a5 = _mm512_fmadd_ps(_mm512_set1_ps(k5[d]), u, a5);
            a6 = _mm512_fmadd_ps(_mm512_set1_ps(k6[d]), u, a6);
            a7 = _mm512_fmadd_ps(_mm512_set1_ps(k7[d]), u, a7);
        }
        __m512 acc[8] = {a0, a1, a2, a3, a4, a5, a6, a7};
        for (int t = 0; t < 8; t++) {
            _mm512_storeu_ps(r, _mm512_mul_ps(acc[t], sc));
            for (int i = 0; i < nq; i++)
                s[(size_t)i * lds + j + t] = r[i];
        }
    }
    for (; j < nk; j++) {
        const float *k0 = kr[j];
        __m512 a0 = _mm512_setzero_ps();
        for (int d = 0; d < hd; d++)
            a0 = _mm512_fmadd_ps(_mm512_set1_ps(k0[d]), _mm512_loadu_ps(qt + d * FL_QT), a0);
        _mm512_storeu_ps(r, _mm512_mul_ps(a0, sc));
        for (int i = 0; i < nq; i++)
            s[(size_t)i * lds + j] = r[i];
    }
}

/* pv on one span of keys (vr[0..nk), p's columns likewise), prefetching the rows nx[0..nn)
 * (the next span's, nn <= nk) a line at a time, spread over the passes the span makes:
 * rows of V are walked 32 dims at a time per 8 query rows in tiles of more than 8 (16
 * accumulators: per key 2 loads of V and 8 broadcasts of p for 16 FMAs; 4 rows took 6 loads
 * for 8, and ran a 16-query tile's pv in cache 1.5x slower), then per 4 rows, so a row's
 * lines are wanted in different passes, and a whole row prefetched per key swamped the line
 * fill buffers. A tile of 8 (block 4, 2-way GQA) keeps 4-row passes: it waits on DRAM, and
 * 8-row passes measured no faster there (docs/benchmarks.md). */
FL_AVX512 static void fl_pv_span_avx512(float *o, int ldo, const float *p, int ldp, int nq,
                                        const float *const *vr, int nk, int hd,
                                        const float *const *nx, int nn)
{
    int h32 = hd & ~31, lines = (hd + 15) / 16, pass = 0;
    int g8 = nq > 8 ? nq / 8 : 0; /* a tile of 8 rows (block 4): memory-bound, kept on 4 */
    int passes = (g8 + (nq - 8 * g8) / 4) * (h32 / 32);
    int i = 0;
    for (; i < 8 * g8; i += 8)
        for (int d = 0; d < h32; d += 32, pass++) {
            int l0 = pass * lines / passes, l1 = (pass + 1) * lines / passes;
            __m512 a[8][2];
            _Pragma("GCC unroll 8")
            for (int r = 0; r < 8; r++) {
                a[r][0] = _mm512_loadu_ps(o + (size_t)(i + r) * ldo + d);
                a[r][1] = _mm512_loadu_ps(o + (size_t)(i + r) * ldo + d + 16);
            }
            for (int j = 0; j < nk; j++) {
                if (j < nn)
                    for (int l = l0; l < l1; l++)
                        __builtin_prefetch(nx[j] + l * 16, 0, FL_KV_PF_LOC);
                const float *vj = vr[j] + d;
                __m512 v0 = _mm512_loadu_ps(vj), v1 = _mm512_loadu_ps(vj + 16);
                _Pragma("GCC unroll 8")
                for (int r = 0; r < 8; r++) {
                    __m512 b = _mm512_set1_ps(p[(size_t)(i + r) * ldp + j]);
                    a[r][0] = _mm512_fmadd_ps(b, v0, a[r][0]);
                    a[r][1] = _mm512_fmadd_ps(b, v1, a[r][1]);
                }
            }
            _Pragma("GCC unroll 8")
            for (int r = 0; r < 8; r++) {
                _mm512_storeu_ps(o + (size_t)(i + r) * ldo + d, a[r][0]);
                _mm512_storeu_ps(o + (size_t)(i + r) * ldo + d + 16, a[r][1]);
            }
        }
    for (; i + 4 <= nq; i += 4) {
        const float *p0 = p + (size_t)i * ldp, *p1 = p0 + ldp, *p2 = p1 + ldp, *p3 = p2 + ldp;
        float *o0 = o + (size_t)i * ldo, *o1 = o0 + ldo, *o2 = o1 + ldo, *o3 = o2 + ldo;
        for (int d = 0; d < h32; d += 32, pass++) {
            int l0 = pass * lines / passes, l1 = (pass + 1) * lines / passes;
            __m512 a00 = _mm512_loadu_ps(o0 + d), a01 = _mm512_loadu_ps(o0 + d + 16);
            __m512 a10 = _mm512_loadu_ps(o1 + d), a11 = _mm512_loadu_ps(o1 + d + 16);
            __m512 a20 = _mm512_loadu_ps(o2 + d), a21 = _mm512_loadu_ps(o2 + d + 16);
            __m512 a30 = _mm512_loadu_ps(o3 + d), a31 = _mm512_loadu_ps(o3 + d + 16);
            for (int j = 0; j < nk; j++) {
                if (j < nn)
                    for (int l = l0; l < l1; l++)
                        __builtin_prefetch(nx[j] + l * 16, 0, FL_KV_PF_LOC);
                const float *vj = vr[j] + d;
                __m512 v0 = _mm512_loadu_ps(vj), v1 = _mm512_loadu_ps(vj + 16), b;
                b = _mm512_set1_ps(p0[j]);
                a00 = _mm512_fmadd_ps(b, v0, a00);
                a01 = _mm512_fmadd_ps(b, v1, a01);
                b = _mm512_set1_ps(p1[j]);
                a10 = _mm512_fmadd_ps(b, v0, a10);
                a11 = _mm512_fmadd_ps(b, v1, a11);
                b = _mm512_set1_ps(p2[j]);
                a20 = _mm512_fmadd_ps(b, v0, a20);
                a21 = _mm512_fmadd_ps(b, v1, a21);
                b = _mm512_set1_ps(p3[j]);
                a30 = _mm512_fmadd_ps(b, v0, a30);
                a31 = _mm512_fmadd_ps(b, v1, a31);
            }
            _mm512_storeu_ps(o0 + d, a00);
            _mm512_storeu_ps(o0 + d + 16, a01);
            _mm512_storeu_ps(o1 + d, a10);
            _mm512_storeu_ps(o1 + d + 16, a11);
            _mm512_storeu_ps(o2 + d, a20);
            _mm512_storeu_ps(o2 + d + 16, a21);
            _mm512_storeu_ps(o3 + d, a30);
            _mm512_storeu_ps(o3 + d + 16, a31);
        }
    }
    /* the rest: one fused multiply-add per key and element, keys in order, as above (with no
     * pass above, the next rows are prefetched whole here) */
    for (int r = 0; r < nq; r++) {
        int d = r < i ? h32 : 0;
        const float *pr = p + (size_t)r * ldp;
        float *orow = o + (size_t)r * ldo;
        if (!passes && r == 0)
            for (int j = 0; j < nn; j++)
                for (int l = 0; l < lines; l++)
                    __builtin_prefetch(nx[j] + l * 16, 0, FL_KV_PF_LOC);
        for (; d + 16 <= hd; d += 16) {
            __m512 a = _mm512_loadu_ps(orow + d);
            for (int j = 0; j < nk; j++)
                a = _mm512_fmadd_ps(_mm512_set1_ps(pr[j]), _mm512_loadu_ps(vr[j] + d), a);
            _mm512_storeu_ps(orow + d, a);
        }
        for (; d < hd; d++) {
            float a = orow[d];
            for (int j = 0; j < nk; j++)
                a = fmaf(pr[j], vr[j][d], a);
            orow[d] = a;
        }
    }
}

FL_AVX512 static void fl_mm_f32_avx512(float *y, int ldy, const float *x, int ldx, int m,
                                       const float *w, int n, int k, bool acc)
{
    FL_MM_AVX512_BODY(float, _mm512_loadu_ps, fl_tail_f32)
}

FL_AVX512 static void fl_mm_bf16_avx512(float *y, int ldy, const float *x, int ldx, int m,
                                        const uint16_t *w, int n, int k, bool acc)
{
    FL_MM_AVX512_BODY(uint16_t, fl_load_bf16x16, fl_tail_bf16)
}

/* bf16 -> f32 of n values, 16 at a time: the widening of the bf16 attention kernels, which
 * runs once per key row and query tile */
FL_AVX512 static void fl_bf16_to_f32_avx512(float *dst, const uint16_t *src, long n)
{
    long i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i)));
        _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
    }
    for (; i < n; i++)
        dst[i] = fl_bf16_to_f32(src[i]);
}

FL_ATT_LEVEL(avx512, FL_AVX512)

/* bf16 K/V at the AVX-512 level: the rows are read in place, as the AVX2 level reads them,
 * with every lane of a zmm at work.
 *
 * Scores, keys [0, nk rounded down to a group): per two elements a key's pair of values is
 * one 32-bit broadcast; its low half shifted up is element d, its high half masked d + 1 (as
 * fl_bcast_pair). Tiles of 9-16 queries take 8 keys at a time against the 16 query lanes of
 * qt. A tile of at most 8 (block 4 with 2-way GQA), where a ymm per key left half of every
 * FMA idle, takes 16 keys at a time (pair): a zmm holds two keys' scores, key 2t's 8 queries
 * in the low half and key 2t + 1's, masked into the broadcast's high half, in the high one,
 * against qs = the queries repeated in both halves. 8 accumulators either way. Each score is
 * still one running sum over d in order: the widening path's bits (kernels.h). The next rows
 * are prefetched in memory order. hd even. Returns the keys done. */
FL_AVX512 static inline __attribute__((always_inline)) int
fl_qk_b16_groups(float *s, int lds, const float *qs, int nq, const uint16_t *const *kr, int nk,
                 int hd, float scale, bool pair)
{
    const __m512i mhi = _mm512_set1_epi32((int)0xffff0000u);
    const __m512 sc = _mm512_set1_ps(scale);
    int g = pair ? 16 : 8, lines = (hd + 31) / 32, pf = FL_KV_PF, steps = hd / 2;
    int per = (g * lines + steps - 1) / steps; /* prefetches per step: g rows' lines */
    float r[16];
    int j = 0;
    for (; j + g <= nk; j += g) {
        __m512 a[8];
        _Pragma("GCC unroll 8")
        for (int t = 0; t < 8; t++)
            a[t] = _mm512_setzero_ps();
        fl_kv_pf16 pq = fl_kv_pf16_at(kr, j + pf, g, nk, lines, pf);
        for (int d = 0; d < hd; d += 2) {
            for (int x = 0; x < per; x++)
                fl_kv_pf16_next(&pq);
            __m512 u0 = _mm512_loadu_ps(qs + d * FL_QT), u1 = _mm512_loadu_ps(qs + (d + 1) * FL_QT);
            _Pragma("GCC unroll 8")
            for (int t = 0; t < 8; t++) {
                int32_t lo, hi;
                memcpy(&lo, kr[j + (pair ? 2 * t : t)] + d, 4);
                __m512i b = _mm512_set1_epi32(lo);
                if (pair) {
                    memcpy(&hi, kr[j + 2 * t + 1] + d, 4);
                    b = _mm512_mask_set1_epi32(b, 0xff00, hi);
                }
                a[t] = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(b, 16)), u0, a[t]);
                a[t] = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(b, mhi)), u1, a[t]);
            }
        }
        _Pragma("GCC unroll 8")
        for (int t = 0; t < 8; t++) {
            _mm512_storeu_ps(r, _mm512_mul_ps(a[t], sc));
            for (int i = 0; i < nq; i++)
                if (pair) {
                    s[(size_t)i * lds + j + 2 * t] = r[i];
                    s[(size_t)i * lds + j + 2 * t + 1] = r[8 + i];
                } else {
                    s[(size_t)i * lds + j + t] = r[i];
                }
        }
    }
    return j;
}

/* hd <= 256 (q2 on the stack); the last keys take the AVX2 kernel (a score never depends on
 * how the keys are split) */
#define FL_QK8_MAXHD 256
FL_AVX512 static void fl_qk8_b16_avx512(float *s, int lds, const float *qt, int nq,
                                        const uint16_t *const *kr, int nk, int hd, float scale,
                                        float *wide)
{
    float q2[FL_QK8_MAXHD * FL_QT] __attribute__((aligned(64)));
    for (int d = 0; d < hd; d++) {
        __m512 u = _mm512_loadu_ps(qt + d * FL_QT);
        _mm512_store_ps(q2 + d * FL_QT, _mm512_shuffle_f32x4(u, u, 0x44));
    }
    int j = fl_qk_b16_groups(s, lds, q2, nq, kr, nk, hd, scale, true);
    if (j < nk)
        fl_qk_b16_avx2(s + j, lds, qt, nq, kr + j, nk - j, hd, scale, wide);
}

/* Widening 64 rows into scratch and reading them back cost a third of the FMAs' time; the
 * last keys are still widened for the 16-lane kernel. */
FL_AVX512 static void fl_qk16_b16_avx512(float *s, int lds, const float *qt, int nq,
                                         const uint16_t *const *kr, int nk, int hd, float scale,
                                         float *wide)
{
    int j = fl_qk_b16_groups(s, lds, qt, nq, kr, nk, hd, scale, false);
    if (j < nk)
        fl_qk_bf16_avx512(s + j, lds, qt, nq, kr + j, nk - j, hd, scale, wide);
}

/* Outputs from bf16 rows in place, 8 query rows at a time: per pass 32 dims of 8 rows (16
 * accumulators). A key's 32 values are one 64-byte load; shifted up they are the even dims,
 * masked the odd ones, so the passes accumulate in an even/odd layout (per 32 dims the 16
 * even, then the 16 odd) in w, into which o is split first and from which it is joined
 * back. Per key 1 load and 8 broadcasts of p for 16 FMAs, where the AVX2 kernel's 4 rows x 16
 * dims took 5 loads for 8 FMAs of half the width. Rows past nq in the last group take p = 0
 * from a span's copy (pz) and are never joined back. Spans of FL_KV_PF keys, the next span's
 * rows prefetched a line per pass and key. hd % 32 == 0; w: (nq rounded up to 8) x hd.
 * Per output element one FMA per key, keys in order: the widening path's bits. */
FL_AVX512 static void fl_pv8_b16_avx512(float *o, int ldo, const float *p, int ldp, int nq,
                                        const uint16_t *const *vr, int nk, int hd, float *w)
{
    const __m512i ev = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i od = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i hi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
    const __m512i mhi = _mm512_set1_epi32((int)0xffff0000u);
    int rows = (nq + 7) & ~7;
    float pz[8 * FL_KV_PF];
    for (int i = 0; i < rows; i++)
        for (int d = 0; d < hd; d += 32) {
            __m512 x0 = _mm512_setzero_ps(), x1 = x0;
            if (i < nq) {
                x0 = _mm512_loadu_ps(o + (size_t)i * ldo + d);
                x1 = _mm512_loadu_ps(o + (size_t)i * ldo + d + 16);
            }
            _mm512_storeu_ps(w + (size_t)i * hd + d, _mm512_permutex2var_ps(x0, ev, x1));
            _mm512_storeu_ps(w + (size_t)i * hd + d + 16, _mm512_permutex2var_ps(x0, od, x1));
        }
    for (int j0 = 0; j0 < nk; j0 += FL_KV_PF) {
        int n = nk - j0 < FL_KV_PF ? nk - j0 : FL_KV_PF, j1 = j0 + n;
        int nn = nk - j1 < FL_KV_PF ? nk - j1 : FL_KV_PF;
        for (int g = 0; g < rows; g += 8) {
            const float *pg = p + (size_t)g * ldp + j0;
            int lp = ldp;
            if (g + 8 > nq) { /* the last rows, padded with p = 0 */
                for (int i = 0; i < 8; i++)
                    for (int j = 0; j < n; j++)
                        pz[i * FL_KV_PF + j] = g + i < nq ? pg[(size_t)i * ldp + j] : 0.0f;
                pg = pz;
                lp = FL_KV_PF;
            }
            float *wg = w + (size_t)g * hd;
            for (int d = 0; d < hd; d += 32) {
                __m512 a[8][2];
                _Pragma("GCC unroll 8")
                for (int i = 0; i < 8; i++) {
                    a[i][0] = _mm512_loadu_ps(wg + (size_t)i * hd + d);
                    a[i][1] = _mm512_loadu_ps(wg + (size_t)i * hd + d + 16);
                }
                for (int j = 0; j < n; j++) {
                    if (g == 0 && j < nn)
                        __builtin_prefetch(vr[j1 + j] + d, 0, FL_KV_PF_LOC);
                    __m512i x = _mm512_loadu_si512(vr[j0 + j] + d);
                    __m512 ve = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
                    __m512 vo = _mm512_castsi512_ps(_mm512_and_si512(x, mhi));
                    _Pragma("GCC unroll 8")
                    for (int i = 0; i < 8; i++) {
                        __m512 b = _mm512_set1_ps(pg[(size_t)i * lp + j]);
                        a[i][0] = _mm512_fmadd_ps(b, ve, a[i][0]);
                        a[i][1] = _mm512_fmadd_ps(b, vo, a[i][1]);
                    }
                }
                _Pragma("GCC unroll 8")
                for (int i = 0; i < 8; i++) {
                    _mm512_storeu_ps(wg + (size_t)i * hd + d, a[i][0]);
                    _mm512_storeu_ps(wg + (size_t)i * hd + d + 16, a[i][1]);
                }
            }
        }
    }
    for (int i = 0; i < nq; i++)
        for (int d = 0; d < hd; d += 32) {
            __m512 e = _mm512_loadu_ps(w + (size_t)i * hd + d), q = _mm512_loadu_ps(w + (size_t)i * hd + d + 16);
            _mm512_storeu_ps(o + (size_t)i * ldo + d, _mm512_permutex2var_ps(e, lo, q));
            _mm512_storeu_ps(o + (size_t)i * ldo + d + 16, _mm512_permutex2var_ps(e, hi, q));
        }
}

/* The dispatch: bf16 rows are read in place (above; the AVX2 kernels for tiles of fewer
 * than 8 queries in pv, and for shapes the kernels above do not take: odd or wide heads, pv
 * with head dims not a multiple of 32); otherwise 64 rows are widened at a time for the
 * 16-lane kernels. Every path computes the same bits (kernels.h), so the choice changes no
 * result. In cache, one thread, 512 keys, head_dim 128 (docs/benchmarks.md): 8 queries, qk
 * 12.9 -> 8.6 us and pv 13-16 -> 4.9 us against the AVX2 kernels; 16 queries, qk 17.2 -> 13.1
 * us and pv 15.0 -> 9.9 us against widening. */
FL_AVX512 static void fl_qk_b16_avx512(float *s, int lds, const float *qt, int nq,
                                       const uint16_t *const *kr, int nk, int hd, float scale,
                                       float *wide)
{
    bool even = hd % 2 == 0;
    if (nq <= 8)
        (even && hd <= FL_QK8_MAXHD ? fl_qk8_b16_avx512 : fl_qk_b16_avx2)(s, lds, qt, nq, kr, nk,
                                                                           hd, scale, wide);
    else
        (even ? fl_qk16_b16_avx512 : fl_qk_bf16_avx512)(s, lds, qt, nq, kr, nk, hd, scale, wide);
}

FL_AVX512 static void fl_pv_b16_avx512(float *o, int ldo, const float *p, int ldp, int nq,
                                       const uint16_t *const *vr, int nk, int hd, float *wide)
{
    if (nq >= 8 && hd % 32 == 0 && ((nq + 7) & ~7) <= FL_KV_CHUNK) /* w holds the groups */
        fl_pv8_b16_avx512(o, ldo, p, ldp, nq, vr, nk, hd, wide);
    else if (nq <= 8)
        fl_pv_b16_avx2(o, ldo, p, ldp, nq, vr, nk, hd, wide);
    else
        fl_pv_bf16_avx512(o, ldo, p, ldp, nq, vr, nk, hd, wide);
}

FL_AVX512 static void fl_moe_sum_avx512(float *x, const float *const *ys, const float *w,
                                        int K, const float *s, int n)
{
    for (int d = 0; d < n; d += 16) {
        __mmask16 m = (__mmask16)(n - d >= 16 ? 0xffff : (1u << (n - d)) - 1);
        __m512 a = _mm512_setzero_ps();
        for (int k = 0; k < K; k++)
            a = _mm512_add_ps(a, _mm512_mul_ps(_mm512_set1_ps(w[k]),
                                               _mm512_maskz_loadu_ps(m, ys[k] + d)));
        if (s)
            a = _mm512_add_ps(a, _mm512_maskz_loadu_ps(m, s + d));
        _mm512_mask_storeu_ps(x + d, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, x + d), a));
    }
}

#endif /* FL_HAVE_X86 */

void fl_kernels_init(fl_kernels *k, const char *want)
{
    *k = (fl_kernels){"plain C", 8, fl_mm_f32_c, fl_mm_bf16_c, fl_qk_c, fl_pv_c, fl_bf16_to_f32_c,
                      fl_lse_add_c, fl_softmax_c, fl_swiglu_c, NULL, NULL, NULL, NULL,
                      fl_qk_bf16_c, fl_pv_bf16_c, fl_f32_to_bf16_c, fl_moe_sum_c};
    if (!want)
        want = "";
#ifdef FL_HAVE_X86
    __builtin_cpu_init();
    if (strcmp(want, "plain") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        *k = (fl_kernels){"AVX2+FMA", 32, fl_mm_f32_avx2, fl_mm_bf16_avx2, fl_qk_avx2, fl_pv_avx2,
                          fl_bf16_to_f32_avx2, fl_lse_add_avx2, fl_softmax_avx2, fl_swiglu_avx2,
                          NULL, NULL, NULL, NULL, /* fl_quant_kernels_init fills these */
                          fl_qk_b16_avx2, fl_pv_b16_avx2, fl_f32_to_bf16_avx2,
                          fl_moe_sum_avx2};
    if (!strcmp(want, "") && k->mm_f32 == fl_mm_f32_avx2 && __builtin_cpu_supports("avx512f")) {
        k->name = "AVX-512";
        /* against OpenBLAS's AVX-512 (Cooperlake) sgemm, one thread, 0.6B model: 366 vs
         * 447 ms at 32 rows, 1386 vs 1126 ms at 128 (the speed crossover; cpu_backend.c's
         * default takes sgemm nowhere on x86, whose sums depend on the batch) */
        k->sgemm_rows = 128;
        k->mm_f32 = fl_mm_f32_avx512;
        k->mm_bf16 = fl_mm_bf16_avx512;
        k->qk = fl_qk_avx512;
        k->pv = fl_pv_avx512;
        k->qk_bf16 = fl_qk_b16_avx512;
        k->pv_bf16 = fl_pv_b16_avx512;
        k->moe_sum = fl_moe_sum_avx512;
    }
#endif
    fl_quant_kernels_init(k, want);
}

/* ---------------------------------------------------------------- matmul dispatch */

void fl_matmul(const fl_kernels *kk, float *y, int ldy, const float *x, int ldx, const void *qx,
               int m, const fl_mat *w, int n0, int n, bool acc, int sgemm_rows, float *scratch)
{
    if (m <= 0 || n <= 0)
        return;
    int k = w->cols;
    float *yc = y;
    if (fl_mat_quantized(w)) {
        /* 64 rows of X at a time, as below: the chunk's weights stay in L2 */
        bool q4 = w->fmt == FL_MF_Q4;
        const uint8_t *wq = (const uint8_t *)w->data + (size_t)n0 * k / (q4 ? 2 : 1);
        const uint16_t *wd = w->scales + (size_t)n0 * (k / FL_QG);
        for (int i0 = 0; i0 < m; i0 += 64) {
            int mb = m - i0 < 64 ? m - i0 : 64;
            const void *qb = (const char *)qx + (size_t)i0 * fl_qx_row_bytes(k);
            (q4 ? kk->mm_q4 : kk->mm_q8)(yc + (size_t)i0 * ldy, ldy, qb, mb, wq, wd, n, k, acc);
        }
        return;
    }
    if (m < sgemm_rows) {
        /* 64 rows of X at a time, so X's block and the weight rows stay in L2 however many
         * rows there are (each X block re-reads this call's weight rows, from L2/L3) */
        for (int i0 = 0; i0 < m; i0 += 64) {
            int mb = m - i0 < 64 ? m - i0 : 64;
            float *yb = yc + (size_t)i0 * ldy;
            const float *xb = x + (size_t)i0 * ldx;
            if (w->fmt == FL_MF_BF16)
                kk->mm_bf16(yb, ldy, xb, ldx, mb, (const uint16_t *)w->data + (size_t)n0 * k, n, k, acc);
            else
                kk->mm_f32(yb, ldy, xb, ldx, mb, (const float *)w->data + (size_t)n0 * k, n, k, acc);
        }
        return;
    }
    /* A tile of FL_MM_TILE weight rows per sgemm call, f32 weights read in place and bf16
     * ones widened into scratch (where the tile stays in L2 while sgemm uses it): the same
     * calls with the same shapes for both, so bf16 weights of a BF16 file give the same bits
     * as their f32 widening. With whole ranges for f32 they did not on every CPU: OpenBLAS
     * picks its kernels and blocking by the call's shape (seen on Zen 5, not on Zen 4). */
    for (int t = 0; t < n; t += FL_MM_TILE) {
        int nt = n - t < FL_MM_TILE ? n - t : FL_MM_TILE;
        const float *wt = (const float *)w->data + (size_t)(n0 + t) * k;
        if (w->fmt == FL_MF_BF16) {
            kk->bf16_to_f32(scratch, (const uint16_t *)w->data + (size_t)(n0 + t) * k,
                            (long)nt * k);
            wt = scratch;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, nt, k, 1.0f, x, ldx, wt, k,
                    acc ? 1.0f : 0.0f, yc + t, ldy);
    }
}

