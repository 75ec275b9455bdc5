/* test_quant.c: the q8/q4 weight formats and their kernels (engine/cpu/quant.c).
 *  - Round trips: each element within the format's bound of its group scale, read back by
 *    this file's own decoder of the documented layout (quant.h), on gaussian-like rows,
 *    zeros, all-equal rows, huge and tiny magnitudes; bad input gets its error.
 *  - The activation buffer and the repacked weight layout, decoded by this file from their
 *    documentation (quant.h), padding rows included; every level's activation quantizer
 *    writes the plain C version's bytes.
 *  - Kernels at every SIMD level this CPU has (VNNI, AVX2, plain C, capped as FL_SIMD caps
 *    them): bit-identical to this file's model of the specified arithmetic (kernels.h:
 *    exact int32 group products, fma in group order), and within f32 summation error of
 *    sum_g I_g * (dw_g * dx_g) in double; odd m, n and k (multiples of 32, not of 64), n not
 *    a multiple of 16, acc on and off, columns past the range left alone.
 *  - A row's result, and a weight row's, is bit-identical whatever the other rows, their
 *    number, and the column range the call covers (threads split the columns by tiles). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fl.h"
#include "cpu/kernels.h"
#include "cpu/quant.h"

static uint32_t rng = 7;
static float frand(void) /* [-1, 1) */
{
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) / 16777216.0 * 2 - 1);
}
static float grand(void) /* roughly gaussian, with some heavier tails */
{
    return (frand() + frand() + frand()) * (frand() > 0.9f ? 3.0f : 1.0f);
}

/* The documented layouts, decoded independently of quant.c. */
static int q4_at(const uint8_t *q, int k, int j, int c)
{
    int g = c / 32, b = c % 32;
    uint8_t v = q[(size_t)j * (k / 2) + g * 16 + b % 16];
    return (b < 16 ? v & 15 : v >> 4) - 8;
}
static float scale_at(const uint16_t *d, int k, int j, int c) { return fl_f16_to_f32(d[(size_t)j * (k / 32) + c / 32]); }
/* The activation buffer: row i is k quants, then G f32 scales, G int32 -128 * sum, G int32
 * -8 * sum. */
static size_t qx_rowb(int k) { return (size_t)k + 12 * (size_t)(k / 32); }
static const int8_t *qx_row(const int8_t *qx, int k, int i) { return qx + (size_t)i * qx_rowb(k); }
static int32_t qx_word(const int8_t *qx, int k, int i, int w)
{
    int32_t v;
    memcpy(&v, qx_row(qx, k, i) + k + (size_t)w * 4, sizeof v);
    return v;
}
static float qx_scale(const int8_t *qx, int k, int i, int g)
{
    float f;
    memcpy(&f, qx_row(qx, k, i) + k + (size_t)g * 4, sizeof f);
    return f;
}
/* The repacked layout: tiles of 16 rows; per (tile, group) the rows' group bytes in 4-byte
 * chunks, chunk c of row r at (c * 16 + r) * 4; q8 bytes are w + 128; then scales. */
static int r_q8(const uint8_t *rq, int k, int j, int c)
{
    int G = k / 32, t = j / 16, r = j % 16, g = c / 32, b = c % 32;
    return rq[((size_t)t * G + g) * 512 + ((b / 4) * 16 + r) * 4 + b % 4] - 128;
}
static int r_q4(const uint8_t *rq, int k, int j, int c)
{
    int G = k / 32, t = j / 16, r = j % 16, g = c / 32, b = c % 32, byte = b % 16;
    uint8_t v = rq[((size_t)t * G + g) * 256 + ((byte / 4) * 16 + r) * 4 + byte % 4];
    return (b < 16 ? v & 15 : v >> 4) - 8;
}
static uint16_t r_scale(const uint16_t *rd, int k, int j, int g)
{
    return rd[((size_t)(j / 16) * (k / 32) + g) * 16 + j % 16];
}

/* ---------------------------------------------------------------- round trips */

static void roundtrip(const char *what, const float *x, int n, int k)
{
    int G = k / 32;
    int8_t *q8 = malloc((size_t)n * k);
    uint8_t *q4 = malloc((size_t)n * k / 2);
    uint16_t *d8 = malloc(sizeof(uint16_t) * n * G), *d4 = malloc(sizeof(uint16_t) * n * G);
    float *back = malloc(sizeof(float) * n * k);
    fl_err e = {0};
    CHECK(fl_q8_quantize(q8, d8, x, n, k, &e) == 0, "%s: q8 quantize: %s", what, e.msg);
    CHECK(fl_q4_quantize(q4, d4, x, n, k, &e) == 0, "%s: q4 quantize: %s", what, e.msg);
    fl_q8_dequantize(back, q8, d8, n, k);
    int bad8 = 0, bad4 = 0, badd = 0;
    for (int j = 0; j < n; j++)
        for (int c = 0; c < k; c++) {
            size_t o = (size_t)j * k + c;
            double d = scale_at(d8, k, j, c), v = d * q8[o];
            bad8 += !(fabs(x[o] - v) <= d / 2 * (1 + 1e-6)) || q8[o] < -127 || !isfinite(d);
            badd += back[o] != (float)v;
            /* the group's max |x| must use the range: a scale twice too big also passes d/2 */
            if (c % 32 == 0) {
                float amax = 0;
                for (int t = 0; t < 32; t++)
                    amax = fmaxf(amax, fabsf(x[o + t]));
                bad8 += !(d <= amax / 127 * (1 + 1.0 / 1024) + ldexp(1, -24));
            }
        }
    fl_q4_dequantize(back, q4, d4, n, k);
    for (int j = 0; j < n; j++)
        for (int c = 0; c < k; c++) {
            size_t o = (size_t)j * k + c;
            double d = fabs(scale_at(d4, k, j, c)), v = scale_at(d4, k, j, c) * (double)q4_at(q4, k, j, c);
            double bound = fmax(d / 2 * (1 + 1e-6), fabs(x[o]) - 7 * d * (1 - 1e-6));
            bad4 += !(fabs(x[o] - v) <= bound) || !isfinite(d) || bound > d * (1 + 1e-5);
            badd += back[o] != (float)v;
            if (c % 32 == 0) {
                float amax = 0;
                for (int t = 0; t < 32; t++)
                    amax = fmaxf(amax, fabsf(x[o + t]));
                bad4 += !(d <= amax / 8 * (1 + 1.0 / 1024) + ldexp(1, -24));
            }
        }
    CHECK(bad8 == 0, "%s: %d q8 values outside |x - deq| <= d/2 (or scale off)", what, bad8);
    CHECK(bad4 == 0, "%s: %d q4 values outside their bound (or scale off)", what, bad4);
    CHECK(badd == 0, "%s: %d dequantized values differ from the layout's", what, badd);
    free(q8);
    free(q4);
    free(d8);
    free(d4);
    free(back);
}

static void test_roundtrip(void)
{
    int n = 5, k = 160;
    float *x = malloc(sizeof(float) * n * k);
    for (int i = 0; i < n * k; i++)
        x[i] = grand() * 0.05f;
    roundtrip("gaussian", x, n, k);
    for (int i = 0; i < n * k; i++)
        x[i] = 0;
    roundtrip("zeros", x, n, k);
    for (int i = 0; i < n * k; i++)
        x[i] = -0.3f;
    roundtrip("all equal", x, n, k);
    for (int i = 0; i < n * k; i++)
        x[i] = (i / 32) % 2 ? 0.37f : -0.37f; /* all-equal groups of either sign */
    roundtrip("all equal signed", x, n, k);
    const float mags[] = {5e5f, 3e-2f, 1e-3f, 1e-5f, 3e-6f, 1e-6f, 1e-9f, 1e-30f, 1e-40f /* f32 subnormal */};
    for (size_t t = 0; t < sizeof mags / sizeof *mags; t++) {
        for (int i = 0; i < n * k; i++)
            x[i] = frand() * mags[t];
        char what[32];
        snprintf(what, sizeof what, "magnitude %g", (double)mags[t]);
        roundtrip(what, x, n, k);
    }
    /* mixed magnitudes inside one row: each group has its own scale */
    for (int i = 0; i < n * k; i++)
        x[i] = frand() * mags[(i / 32) % 9];
    roundtrip("mixed magnitudes", x, n, k);
    /* the value of largest magnitude positive, and one of equal magnitude and the other
     * sign: the q4 case that clips by a full step */
    for (int i = 0; i < n * k; i++)
        x[i] = i % 32 == 3 ? 1.0f : i % 32 == 9 ? -1.0f : frand();
    roundtrip("q4 clip", x, n, k);

    /* bad input: the error, with a message */
    int8_t q8[64];
    uint8_t q4[32];
    uint16_t d[2];
    float bad[64];
    for (int i = 0; i < 64; i++)
        bad[i] = frand();
    fl_err e = {0};
    CHECK(fl_q8_quantize(q8, d, bad, 1, 48, &e) == FL_EINVAL && e.msg[0], "k = 48 accepted");
    CHECK(fl_q4_quantize(q4, d, bad, 1, 0, &e) == FL_EINVAL, "k = 0 accepted");
    bad[40] = NAN;
    CHECK(fl_q8_quantize(q8, d, bad, 1, 64, &e) == FL_EINVAL && strstr(e.msg, "finite"), "NaN accepted: %s", e.msg);
    bad[40] = INFINITY;
    CHECK(fl_q4_quantize(q4, d, bad, 1, 64, &e) == FL_EINVAL && strstr(e.msg, "finite"), "inf accepted: %s", e.msg);
    bad[40] = 65504.0f * 127 * 1.01f;
    CHECK(fl_q8_quantize(q8, d, bad, 1, 64, &e) == FL_EINVAL && strstr(e.msg, "range"), "q8 overflow accepted: %s", e.msg);
    CHECK(fl_q8_quantize(q8, d, bad, 1, 32, &e) == 0, "q8 rejected a group it can hold: %s", e.msg);
    bad[40] = 65504.0f * 8 * 1.01f;
    CHECK(fl_q4_quantize(q4, d, bad, 1, 64, &e) == FL_EINVAL && strstr(e.msg, "range"), "q4 overflow accepted: %s", e.msg);
    free(x);
}

/* The activation buffer: each row's quants within dx/2 of x, dx = max|x| / 127, the two
 * corrections of the quants' sum. */
static void test_qx(void)
{
    int m = 3, k = 96, ldx = 101, G = k / 32;
    CHECK(fl_qx_row_bytes(k) == qx_rowb(k) && fl_qx_bytes(m, k) == m * qx_rowb(k),
          "activation buffer size %zu, the layout says %zu", fl_qx_row_bytes(k), qx_rowb(k));
    float *x = malloc(sizeof(float) * m * ldx);
    for (int i = 0; i < m * ldx; i++)
        x[i] = grand() * (i % 3 ? 1.0f : 1e-20f);
    for (int c = 32; c < 64; c++)
        x[ldx + c] = 0; /* an all-zero group */
    int8_t *qx = aligned_alloc(64, 64 * ((fl_qx_bytes(m, k) + 63) / 64));
    fl_qx_quantize(qx, x, ldx, m, k);
    int bad = 0;
    for (int i = 0; i < m; i++)
        for (int g = 0; g < G; g++) {
            float amax = 0, dx = qx_scale(qx, k, i, g);
            for (int c = 0; c < 32; c++)
                amax = fmaxf(amax, fabsf(x[i * ldx + g * 32 + c]));
            bad += dx != amax / 127.0f;
            int32_t sum = 0;
            for (int c = 0; c < 32; c++) {
                int q = qx_row(qx, k, i)[g * 32 + c];
                sum += q;
                bad += !(fabs(x[i * ldx + g * 32 + c] - (double)dx * q) <= dx / 2 * (1 + 1e-6)) || q < -127;
            }
            bad += qx_word(qx, k, i, G + g) != -128 * sum;
            bad += qx_word(qx, k, i, 2 * G + g) != -8 * sum;
        }
    CHECK(bad == 0, "activation quantization: %d bad values", bad);
    free(x);
    free(qx);
}

/* Every level's activation quantizer writes the plain version's bytes (odd m, strides,
 * zero groups, tiny and huge magnitudes, ties of rounding). */
static void test_qx_levels(const fl_kernels *kk)
{
    int m = 5, k = 352, ldx = 357;
    float *x = malloc(sizeof(float) * m * ldx);
    for (int i = 0; i < m * ldx; i++) {
        int c = i % ldx;
        x[i] = grand() * (c / 32 == 1 ? 1e-38f : c / 32 == 2 ? 1e30f : 1.0f);
        if (c / 32 == 3)
            x[i] = 0;
        if (c / 32 == 4) /* x / dx lands on .5: 127 * (h + 0.5) / 127 */
            x[i] = c % 32 == 0 ? 127.0f : (float)(c % 7) + 0.5f;
    }
    size_t bytes = fl_qx_bytes(m, k);
    uint8_t *a = malloc(bytes), *b = malloc(bytes);
    memset(a, 0xa5, bytes);
    memset(b, 0x5a, bytes);
    fl_qx_quantize(a, x, ldx, m, k);
    kk->qx_quantize(b, x, ldx, m, k);
    CHECK(memcmp(a, b, bytes) == 0, "%s activation quantizer differs from plain C", kk->qname);
    free(x);
    free(a);
    free(b);
}

/* The repacked layout against the plain one, padding rows included. */
static void test_repack(void)
{
    const int ns[] = {1, 15, 16, 17, 40}, ks[] = {32, 96};
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
        for (size_t b = 0; b < sizeof ks / sizeof *ks; b++) {
            int n = ns[a], k = ks[b], G = k / 32, rows = (n + 15) / 16 * 16;
            CHECK(fl_qr_rows(n) == rows && fl_qr_quant_bytes(n, k, false) == (size_t)rows * k &&
                      fl_qr_quant_bytes(n, k, true) == (size_t)rows * k / 2 &&
                      fl_qr_scale_count(n, k) == (size_t)rows * G,
                  "n=%d k=%d: repacked sizes", n, k);
            float *x = malloc(sizeof(float) * n * k);
            for (int i = 0; i < n * k; i++)
                x[i] = grand();
            int8_t *q8 = malloc((size_t)n * k);
            uint8_t *q4 = malloc((size_t)n * k / 2), *r8 = malloc((size_t)rows * k), *r4 = malloc((size_t)rows * k / 2);
            uint16_t *d8 = malloc(2 * (size_t)n * G), *d4 = malloc(2 * (size_t)n * G);
            uint16_t *rd8 = malloc(2 * (size_t)rows * G), *rd4 = malloc(2 * (size_t)rows * G);
            fl_err e = {0};
            CHECK(fl_q8_quantize(q8, d8, x, n, k, &e) == 0 && fl_q4_quantize(q4, d4, x, n, k, &e) == 0, "quantize");
            fl_q8_repack(r8, rd8, q8, d8, n, k);
            fl_q4_repack(r4, rd4, q4, d4, n, k);
            int bad = 0;
            for (int j = 0; j < rows; j++)
                for (int c = 0; c < k; c++) {
                    bad += r_q8(r8, k, j, c) != (j < n ? q8[(size_t)j * k + c] : 0);
                    bad += r_q4(r4, k, j, c) != (j < n ? q4_at(q4, k, j, c) : 0);
                    if (c % 32 == 0) {
                        bad += r_scale(rd8, k, j, c / 32) != (j < n ? d8[(size_t)j * G + c / 32] : 0);
                        bad += r_scale(rd4, k, j, c / 32) != (j < n ? d4[(size_t)j * G + c / 32] : 0);
                    }
                }
            CHECK(bad == 0, "n=%d k=%d: %d repacked values differ from the plain layout", n, k, bad);
            free(x);
            free(q8);
            free(q4);
            free(r8);
            free(r4);
            free(d8);
            free(d4);
            free(rd8);
            free(rd4);
        }
}

/* ---------------------------------------------------------------- kernels */

typedef struct wset {
    int n, k, q4;
    int8_t *q8;
    uint8_t *q4b;
    uint16_t *d;
    uint8_t *rq; /* repacked */
    uint16_t *rd;
} wset;

/* Columns [j0, j0 + n) through the repacked planes; j0 % 16 == 0. */
static void mm(const fl_kernels *kk, const wset *w, float *y, int ldy, const int8_t *qx, int m,
               int j0, int n, bool acc)
{
    int k = w->k, G = k / 32;
    if (w->q4)
        kk->mm_q4(y, ldy, qx, m, w->rq + (size_t)j0 * (k / 2), w->rd + (size_t)j0 * G, n, k, acc);
    else
        kk->mm_q8(y, ldy, qx, m, w->rq + (size_t)j0 * k, w->rd + (size_t)j0 * G, n, k, acc);
}

static int wq_at(const wset *w, int j, int c)
{
    return w->q4 ? q4_at(w->q4b, w->k, j, c) : w->q8[(size_t)j * w->k + c];
}

static int32_t group_dot(const wset *w, const int8_t *qx, int i, int j, int g, int32_t *Iabs)
{
    int32_t I = 0, a = 0;
    for (int c = g * 32; c < g * 32 + 32; c++) {
        int32_t t = (int32_t)qx_row(qx, w->k, i)[c] * wq_at(w, j, c);
        I += t;
        a += t < 0 ? -t : t;
    }
    if (Iabs)
        *Iabs = a;
    return I;
}

/* ref[i*n + j] = sum_g I_g * p_g in double, p_g = (float)(dw_g * dx_g) as the kernels
 * form it, I_g the exact int32 group product; sabs = sum_g |p_g| sum_c |xq_c wq_c| (a bound
 * on the f32 summation's error); model[i*n + j]: the arithmetic kernels.h specifies, in f32
 * (before acc). */
static void reference(const wset *w, const int8_t *qx, int m, double *ref, double *sabs, float *model)
{
    int k = w->k, n = w->n;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0, a = 0;
            float f = 0;
            for (int g = 0; g < k / 32; g++) {
                int32_t Iabs, I = group_dot(w, qx, i, j, g, &Iabs);
                float p = scale_at(w->d, k, j, g * 32) * qx_scale(qx, k, i, g);
                s += (double)I * p;
                a += (double)Iabs * fabs(p);
                f = fmaf((float)I, p, f);
            }
            ref[(size_t)i * n + j] = s;
            sabs[(size_t)i * n + j] = a;
            model[(size_t)i * n + j] = f;
        }
}

static void quantize_w(wset *w, const float *x)
{
    fl_err e = {0};
    int rc = w->q4 ? fl_q4_quantize(w->q4b, w->d, x, w->n, w->k, &e)
                   : fl_q8_quantize(w->q8, w->d, x, w->n, w->k, &e);
    CHECK(rc == 0, "quantize: %s", e.msg);
    if (w->q4)
        fl_q4_repack(w->rq, w->rd, w->q4b, w->d, w->n, w->k);
    else
        fl_q8_repack(w->rq, w->rd, w->q8, w->d, w->n, w->k);
}

#define LDY_PAD 3
static const float SENT = -1234.5f; /* y past the range: the kernels must not write it */

/* One shape: every check on one level. kind 1: integer weights and activations whose
 * scales are all 1, so the result is the integer sum itself. */
static void run_shape(const fl_kernels *kk, int q4, int m, int n, int k, int kind)
{
    int ldx = k + 5, ldy = n + LDY_PAD, G = k / 32;
    float *x = malloc(sizeof(float) * m * ldx), *wf = malloc(sizeof(float) * n * k);
    wset w = {n, k, q4, malloc((size_t)n * k), malloc((size_t)n * k / 2), malloc(sizeof(uint16_t) * n * G),
              malloc(fl_qr_quant_bytes(n, k, q4)), malloc(sizeof(uint16_t) * fl_qr_scale_count(n, k))};
    for (int i = 0; i < m * ldx; i++) {
        int c = i % ldx;
        if (kind == 1) /* integers with a +-127 in each group: dx = 1 */
            x[i] = c % 32 == 5 ? (c & 64 ? -127.0f : 127.0f) : (float)((int)(frand() * 127.9f));
        else if (kind == 2) /* tiny activations */
            x[i] = frand() * 1e-30f;
        else
            x[i] = grand();
    }
    for (int i = 0; i < n * k; i++) {
        int c = i % k;
        if (kind == 1 && q4) /* integers in [-8, 7] with a -8 in each group: d = 1 */
            wf[i] = c % 32 == 11 ? -8.0f : (float)((int)((frand() + 1) * 7.5f) - 7);
        else if (kind == 1)
            wf[i] = c % 32 == 17 ? -127.0f : (float)((int)(frand() * 127.9f));
        else if (kind == 2) /* huge weights */
            wf[i] = grand() * 4e4f;
        else if (kind == 3) /* zeros */
            wf[i] = 0;
        else
            wf[i] = grand() * 0.05f;
    }
    quantize_w(&w, wf);
    int8_t *qx = aligned_alloc(64, 64 * ((fl_qx_bytes(m, k) + 63) / 64));
    kk->qx_quantize(qx, x, ldx, m, k);
    double *ref = malloc(sizeof(double) * m * n), *sabs = malloc(sizeof(double) * m * n);
    float *model = malloc(sizeof(float) * m * n);
    reference(&w, qx, m, ref, sabs, model);
    float *y = malloc(sizeof(float) * m * ldy), *y1 = malloc(sizeof(float) * m * ldy);
    const char *fmt = q4 ? "q4" : "q8";
    for (int acc = 0; acc < 2; acc++) {
        for (int i = 0; i < m * ldy; i++)
            y[i] = i % ldy >= n ? SENT : acc ? 0.5f : NAN; /* = must not read y; += adds to it */
        mm(kk, &w, y, ldy, qx, m, 0, n, acc);
        int bad = 0, nonfinite = 0, notmodel = 0, past = 0;
        double worst = 0;
        for (int i = 0; i < m; i++) {
            for (int j = 0; j < n; j++) {
                double got = y[i * ldy + j], r = ref[i * n + j];
                float want = acc ? 0.5f + model[i * n + j] : model[i * n + j];
                notmodel += memcmp(&y[i * ldy + j], &want, sizeof want) != 0;
                if (acc)
                    got -= 0.5; /* exact: the kernel adds its sum to 0.5 in f32 */
                nonfinite += !isfinite(y[i * ldy + j]);
                double tol = kind == 1 && !acc ? 0 : (G + 8) * ldexp(1, -23) * sabs[i * n + j] + (acc ? ldexp(1, -24) : 0);
                double dev = fabs(got - r);
                if (acc) /* the final add rounds once more, relative to the sum */
                    tol += ldexp(1, -24) * fabs(r + 0.5);
                worst = fmax(worst, dev - tol);
                bad += !(dev <= tol);
            }
            for (int j = n; j < ldy; j++)
                past += y[i * ldy + j] != SENT;
        }
        CHECK(nonfinite == 0, "%s %s kind %d m=%d n=%d k=%d acc=%d: %d outputs not finite",
              kk->qname, fmt, kind, m, n, k, acc, nonfinite);
        CHECK(bad == 0, "%s %s kind %d m=%d n=%d k=%d acc=%d: %d outputs off the reference (worst by %.3g)",
              kk->qname, fmt, kind, m, n, k, acc, bad, worst);
        CHECK(notmodel == 0, "%s %s kind %d m=%d n=%d k=%d acc=%d: %d outputs differ from the specified arithmetic",
              kk->qname, fmt, kind, m, n, k, acc, notmodel);
        CHECK(past == 0, "%s %s kind %d m=%d n=%d k=%d acc=%d: %d values past the range written",
              kk->qname, fmt, kind, m, n, k, acc, past);
    }
    /* bit-identical: each row alone, column ranges starting at later tiles, the columns
     * split over 2 and 3 "threads" as fl_split splits them, and another tiling of the rows */
    mm(kk, &w, y, ldy, qx, m, 0, n, false);
    int diff = 0;
    for (int i = 0; i < m; i++) {
        mm(kk, &w, y1, ldy, qx_row(qx, k, i), 1, 0, n, false);
        diff += memcmp(y + (size_t)i * ldy, y1, sizeof(float) * n) != 0;
    }
    for (int j0 = 16; j0 < n; j0 += 16) {
        mm(kk, &w, y1, ldy, qx, m, j0, n - j0, false);
        for (int i = 0; i < m; i++)
            diff += memcmp(y + (size_t)i * ldy + j0, y1 + (size_t)i * ldy, sizeof(float) * (n - j0)) != 0;
    }
    for (int nt = 2; nt <= 3; nt++) {
        for (int i = 0; i < m * ldy; i++)
            y1[i] = SENT;
        for (int t = 0; t < nt; t++) {
            int lo, hi;
            fl_split(n, nt, t, FL_QR, &lo, &hi);
            if (hi > lo)
                mm(kk, &w, y1 + lo, ldy, qx, m, lo, hi - lo, false);
        }
        for (int i = 0; i < m; i++)
            diff += memcmp(y + (size_t)i * ldy, y1 + (size_t)i * ldy, sizeof(float) * n) != 0;
    }
    if (m > 2) { /* rows 1..m-1: another tiling of the same rows */
        mm(kk, &w, y1, ldy, qx_row(qx, k, 1), m - 1, 0, n, false);
        for (int i = 1; i < m; i++)
            diff += memcmp(y + (size_t)i * ldy, y1 + (size_t)(i - 1) * ldy, sizeof(float) * n) != 0;
    }
    CHECK(diff == 0, "%s %s kind %d m=%d n=%d k=%d: %d rows depend on the batch or the column range",
          kk->qname, fmt, kind, m, n, k, diff);
    free(x);
    free(wf);
    free(w.q8);
    free(w.q4b);
    free(w.d);
    free(w.rq);
    free(w.rd);
    free(qx);
    free(ref);
    free(sabs);
    free(model);
    free(y);
    free(y1);
}

static void test_kernels(const fl_kernels *kk)
{
    const int ms[] = {1, 2, 3, 4, 5, 7, 8, 9, 12, 16, 17, 31, 33, 48, 75}, ns[] = {1, 3, 8, 13, 16, 17, 31, 48},
              ks[] = {32, 64, 96, 160, 352};
    test_qx_levels(kk);
    for (int q4 = 0; q4 < 2; q4++)
        for (size_t a = 0; a < sizeof ms / sizeof *ms; a++)
            for (size_t b = 0; b < sizeof ns / sizeof *ns; b++)
                for (size_t c = 0; c < sizeof ks / sizeof *ks; c++)
                    for (int kind = 0; kind < 4; kind++)
                        run_shape(kk, q4, ms[a], ns[b], ks[c], kind);
}

int main(void)
{
    test_roundtrip();
    test_qx();
    test_repack();
    const char *levels[] = {"", "avx512", "avx2", "plain"};
    const char *seen[4] = {0};
    for (int i = 0; i < 4; i++) {
        fl_kernels kk;
        fl_kernels_init(&kk, levels[i]);
        bool dup = false;
        for (int j = 0; j < i; j++)
            dup |= seen[j] && !strcmp(seen[j], kk.qname);
        seen[i] = kk.qname;
        if (dup)
            continue; /* this CPU lacks the level: the cap fell back to one already tested */
        printf("quantized kernels: %s\n", kk.qname);
        test_kernels(&kk);
    }
    return check_summary("test_quant");
}
