/* test_kernels.c: the CPU backend's kernels (engine/cpu/kernels.c) at every instruction-set level
 * this CPU has (AVX-512, AVX2, plain C), against double-precision loops, on shapes that
 * exercise every tile remainder (rows, weight rows and widths that are not multiples of the
 * tiles or vector widths). Also: a row's matmul result is bit-identical whatever the other
 * rows and their number (the forward's block-causality rests on it); the fused softmax
 * statistics agree with a plain two-pass computation, across chunk merges and ties; the bf16
 * attention kernels equal the f32 ones on widened rows bit for bit, and f32 -> bf16 equals
 * fl_f32_to_bf16; the RMSNorm of several rows at once equals fl_rmsnorm's bits; the MoE
 * combine's sum is the in-order, unfused sum's bits. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fl.h"
#include "cpu/kernels.h"
#include "decode.h"
#include "logit_ref.h"

static uint32_t rng = 1;
static float frand(void)
{
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) / 16777216.0 * 2 - 1);
}

static void fill(float *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        v[i] = frand();
}

/* max |a - b| / max(1, max |b|) */
static double err(const float *a, const double *b, size_t n)
{
    double m = 1, d = 0;
    for (size_t i = 0; i < n; i++) {
        m = fmax(m, fabs(b[i]));
        d = fmax(d, fabs(a[i] - b[i]));
    }
    return d / m;
}

static void test_matmul(const fl_kernels *kk)
{
    const int ms[] = {1, 2, 3, 4, 5, 7, 9, 33}, ns[] = {1, 3, 4, 5, 8, 13}, ks[] = {1, 7, 8, 15, 16, 17, 40, 129};
    for (size_t a = 0; a < sizeof ms / sizeof *ms; a++)
        for (size_t b = 0; b < sizeof ns / sizeof *ns; b++)
            for (size_t c = 0; c < sizeof ks / sizeof *ks; c++) {
                int m = ms[a], n = ns[b], k = ks[c], ldx = k + 3, ldy = n + 2;
                float *x = malloc(sizeof(float) * m * ldx), *w = malloc(sizeof(float) * n * k);
                uint16_t *wb = malloc(sizeof(uint16_t) * n * k);
                float *y = malloc(sizeof(float) * m * ldy), *y1 = malloc(sizeof(float) * ldy);
                double *ref = malloc(sizeof(double) * m * n), *refb = malloc(sizeof(double) * m * n);
                fill(x, (size_t)m * ldx);
                fill(w, (size_t)n * k);
                for (int i = 0; i < n * k; i++)
                    wb[i] = fl_f32_to_bf16(w[i]);
                for (int i = 0; i < m; i++)
                    for (int j = 0; j < n; j++) {
                        double s = 0, sb = 0;
                        for (int q = 0; q < k; q++) {
                            s += (double)x[i * ldx + q] * w[j * k + q];
                            sb += (double)x[i * ldx + q] * fl_bf16_to_f32(wb[j * k + q]);
                        }
                        ref[i * n + j] = s;
                        refb[i * n + j] = sb;
                    }
                float got[64 * 16];
                for (int bf = 0; bf < 2; bf++) {
                    for (int acc = 0; acc < 2; acc++) {
                        for (int i = 0; i < m * ldy; i++)
                            y[i] = acc ? 0.5f : NAN; /* = must not read y; += adds to it */
                        if (bf)
                            kk->mm_bf16(y, ldy, x, ldx, m, wb, n, k, acc);
                        else
                            kk->mm_f32(y, ldy, x, ldx, m, w, n, k, acc);
                        for (int i = 0; i < m; i++)
                            for (int j = 0; j < n; j++)
                                got[i * n + j] = y[i * ldy + j] - (acc ? 0.5f : 0);
                        double e = err(got, bf ? refb : ref, (size_t)m * n);
                        CHECK(e < 1e-5, "%s mm_%s m=%d n=%d k=%d acc=%d: err %.3g", kk->name,
                              bf ? "bf16" : "f32", m, n, k, acc, e);
                    }
                    /* the last row alone gives the same bits as within the batch */
                    for (int i = 0; i < m * ldy; i++)
                        y[i] = 0;
                    if (bf) {
                        kk->mm_bf16(y, ldy, x, ldx, m, wb, n, k, false);
                        kk->mm_bf16(y1, ldy, x + (size_t)(m - 1) * ldx, ldx, 1, wb, n, k, false);
                    } else {
                        kk->mm_f32(y, ldy, x, ldx, m, w, n, k, false);
                        kk->mm_f32(y1, ldy, x + (size_t)(m - 1) * ldx, ldx, 1, w, n, k, false);
                    }
                    CHECK(!memcmp(y + (size_t)(m - 1) * ldy, y1, sizeof(float) * n),
                          "%s mm_%s m=%d n=%d k=%d: row %d differs alone", kk->name,
                          bf ? "bf16" : "f32", m, n, k, m - 1);
                }
                free(x);
                free(w);
                free(wb);
                free(y);
                free(y1);
                free(ref);
                free(refb);
            }
}

static void test_attention(const fl_kernels *kk)
{
    /* nk past the prefetch span (32 keys in the SIMD levels): several spans, a short last one */
    const int nqs[] = {1, 3, 4, 5, 9, 16}, nks[] = {1, 2, 3, 7, 8, 17, 33, 70};
    const int hds[] = {8, 12, 16, 18, 20, 64, 128};
    for (size_t a = 0; a < 6; a++)
        for (size_t b = 0; b < 8; b++)
            for (size_t c = 0; c < 7; c++) {
                int nq = nqs[a], nk = nks[b], hd = hds[c], ld = hd + 5, lds = nk + 3;
                float *q = malloc(sizeof(float) * nq * ld), *k = malloc(sizeof(float) * nk * ld);
                float *v = malloc(sizeof(float) * nk * ld), *s = malloc(sizeof(float) * nq * lds);
                float *o = malloc(sizeof(float) * nq * ld), *og = malloc(sizeof(float) * nq * hd);
                double *rs = malloc(sizeof(double) * nq * nk), *ro = malloc(sizeof(double) * nq * hd);
                float *sg = malloc(sizeof(float) * nq * nk);
                fill(q, (size_t)nq * ld);
                fill(k, (size_t)nk * ld);
                fill(v, (size_t)nk * ld);
                float *qt = malloc(sizeof(float) * hd * FL_QT);
                const float **kr = malloc(sizeof *kr * nk), **vr = malloc(sizeof *vr * nk);
                for (int j = 0; j < nk; j++) { /* rows in a scrambled order, as pages are */
                    kr[j] = k + (size_t)((j * 5) % nk) * ld;
                    vr[j] = v + (size_t)((j * 3) % nk) * ld;
                }
                fl_transpose_q(qt, q, ld, nq, hd);
                kk->qk(s, lds, qt, nq, kr, nk, hd, 0.25f);
                free(qt);
                for (int i = 0; i < nq; i++)
                    for (int j = 0; j < nk; j++) {
                        double d = 0;
                        for (int x = 0; x < hd; x++)
                            d += (double)q[i * ld + x] * kr[j][x];
                        rs[i * nk + j] = d * 0.25;
                        sg[i * nk + j] = s[i * lds + j];
                    }
                CHECK(err(sg, rs, (size_t)nq * nk) < 1e-5, "%s qk nq=%d nk=%d hd=%d", kk->name, nq,
                      nk, hd);
                for (int i = 0; i < nq * ld; i++)
                    o[i] = 0.25f;
                kk->pv(o, ld, s, lds, nq, vr, nk, hd);
                for (int i = 0; i < nq; i++)
                    for (int x = 0; x < hd; x++) {
                        double d = 0.25;
                        for (int j = 0; j < nk; j++)
                            d += (double)s[i * lds + j] * vr[j][x];
                        ro[i * hd + x] = d;
                        og[i * hd + x] = o[i * ld + x];
                    }
                CHECK(err(og, ro, (size_t)nq * hd) < 1e-5, "%s pv nq=%d nk=%d hd=%d", kk->name, nq,
                      nk, hd);
                free(q);
                free(k);
                free(v);
                free(s);
                free(o);
                free(og);
                free(rs);
                free(ro);
                free(sg);
                free(kr);
                free(vr);
            }
}

/* qk's contract (kernels.h): a row's score does not depend on the other rows of its tile
 * (nq) nor on how the keys are split into calls, bit for bit. The CPU backend relies on it:
 * a block's logits are the same whether its segment holds 4 rows or 8 (decode-store overlap)
 * and bf16 pages are scored FL_KV_CHUNK keys per call. */
static void test_qk_invariance(const fl_kernels *kk)
{
    const int hds[] = {18, 64, 128};
    for (size_t c = 0; c < 3; c++) {
        int hd = hds[c], nk = 37, lds = nk;
        float *q = malloc(sizeof(float) * FL_QT * hd), *k = malloc(sizeof(float) * nk * hd);
        float *qt = malloc(sizeof(float) * hd * FL_QT), *s16 = malloc(sizeof(float) * FL_QT * lds);
        float *s = malloc(sizeof(float) * FL_QT * lds);
        const float **kr = malloc(sizeof *kr * nk);
        fill(q, (size_t)FL_QT * hd);
        fill(k, (size_t)nk * hd);
        for (int j = 0; j < nk; j++)
            kr[j] = k + (size_t)j * hd;
        fl_transpose_q(qt, q, hd, FL_QT, hd);
        kk->qk(s16, lds, qt, FL_QT, kr, nk, hd, 0.125f);
        for (int nq = 1; nq < FL_QT; nq++) {
            fl_transpose_q(qt, q, hd, nq, hd);
            for (int i = 0; i < FL_QT * lds; i++)
                s[i] = -1.0f;
            /* keys in three calls: 9, 1, 27 */
            kk->qk(s, lds, qt, nq, kr, 9, hd, 0.125f);
            kk->qk(s + 9, lds, qt, nq, kr + 9, 1, hd, 0.125f);
            kk->qk(s + 10, lds, qt, nq, kr + 10, nk - 10, hd, 0.125f);
            CHECK(!memcmp(s, s16, sizeof(float) * (size_t)nq * lds),
                  "%s qk: rows of a %d-row tile, keys split, differ from a 16-row tile (hd=%d)",
                  kk->name, nq, hd);
            CHECK(s[(size_t)nq * lds] == -1.0f, "%s qk wrote row %d of a %d-row tile", kk->name,
                  nq, nq);
        }
        free(q);
        free(k);
        free(qt);
        free(s16);
        free(s);
        free(kr);
    }
}

/* The SIMD levels' attention arithmetic, bit for bit: a score is one fused multiply-add per
 * element, d in order from 0, times the scale; an output element is one fused multiply-add
 * per key, keys in order, onto what o held. Spans, prefetching and tiles may change how the
 * work is cut, never these sums (the bf16 pages' exactness and the store/decode overlap rest
 * on them). The plain C level multiplies and adds separately and is not held to it. */
static void test_attention_exact(const fl_kernels *kk)
{
    if (!strcmp(kk->name, "plain C"))
        return;
    const int nqs[] = {1, 2, 4, 6, 8, 13, 16}, nks[] = {1, 31, 32, 33, 64, 97}, hds[] = {18, 64, 128};
    for (size_t a = 0; a < 7; a++)
        for (size_t b = 0; b < 6; b++)
            for (size_t c = 0; c < 3; c++) {
                int nq = nqs[a], nk = nks[b], hd = hds[c], lds = nk + 1, bad_s = 0, bad_o = 0;
                float *q = malloc(sizeof(float) * nq * hd), *k = malloc(sizeof(float) * nk * hd);
                float *v = malloc(sizeof(float) * nk * hd), *s = malloc(sizeof(float) * nq * lds);
                float *o = malloc(sizeof(float) * nq * hd), *qt = malloc(sizeof(float) * hd * FL_QT);
                const float **kr = malloc(sizeof *kr * nk), **vr = malloc(sizeof *vr * nk);
                fill(q, (size_t)nq * hd);
                fill(k, (size_t)nk * hd);
                fill(v, (size_t)nk * hd);
                for (int j = 0; j < nk; j++) {
                    kr[j] = k + (size_t)((j * 7) % nk) * hd;
                    vr[j] = v + (size_t)((j * 5) % nk) * hd;
                }
                fl_transpose_q(qt, q, hd, nq, hd);
                kk->qk(s, lds, qt, nq, kr, nk, hd, 0.125f);
                for (int i = 0; i < nq; i++)
                    for (int j = 0; j < nk; j++) {
                        float acc = 0;
                        for (int x = 0; x < hd; x++)
                            acc = fmaf(kr[j][x], q[i * hd + x], acc);
                        bad_s += s[i * lds + j] != acc * 0.125f;
                    }
                for (int i = 0; i < nq * hd; i++)
                    o[i] = 0.5f;
                kk->pv(o, hd, s, lds, nq, vr, nk, hd);
                for (int i = 0; i < nq; i++)
                    for (int x = 0; x < hd; x++) {
                        float acc = 0.5f;
                        for (int j = 0; j < nk; j++)
                            acc = fmaf(s[i * lds + j], vr[j][x], acc);
                        bad_o += o[i * hd + x] != acc;
                    }
                CHECK(!bad_s, "%s qk nq=%d nk=%d hd=%d: %d scores are not the in-order fma sum",
                      kk->name, nq, nk, hd, bad_s);
                CHECK(!bad_o, "%s pv nq=%d nk=%d hd=%d: %d outputs are not the in-order fma sum",
                      kk->name, nq, nk, hd, bad_o);
                free(q);
                free(k);
                free(v);
                free(s);
                free(o);
                free(qt);
                free(kr);
                free(vr);
            }
}

/* bf16 keys and values (KV pages in bf16): qk_bf16 / pv_bf16 give exactly what qk / pv give
 * for the rows widened to f32 (bit for bit, kernels.h), and agree with double loops; key counts
 * below, at and past FL_KV_CHUNK so that chunk ends fall inside the kernels' key groups, and
 * past FL_KV_PF's spans; head dims that are and are not whole groups of 16 (the AVX2 level
 * reads bf16 rows in place only for those, and pairs of dims only for even ones). */
static void test_attention_bf16(const fl_kernels *kk)
{
    const int nqs[] = {1, 2, 4, 6, 7, 8, 9, 13, 16}, nks[] = {1, 9, FL_KV_CHUNK, FL_KV_CHUNK + 3, 2 * FL_KV_CHUNK + 5};
    const int hds[] = {8, 9, 20, 64, 128}; /* odd: the AVX2 level's pairs fall back to widening */
    for (size_t a = 0; a < sizeof nqs / sizeof *nqs; a++)
        for (size_t b = 0; b < 5; b++)
            for (size_t c = 0; c < sizeof hds / sizeof *hds; c++) {
                int nq = nqs[a], nk = nks[b], hd = hds[c], ld = hd + 5, lds = nk + 3;
                float *q = malloc(sizeof(float) * nq * ld), *qt = malloc(sizeof(float) * hd * FL_QT);
                uint16_t *k16 = malloc(sizeof(uint16_t) * nk * ld), *v16 = malloc(sizeof(uint16_t) * nk * ld);
                float *kw = malloc(sizeof(float) * nk * ld), *vw = malloc(sizeof(float) * nk * ld);
                float *s = malloc(sizeof(float) * nq * lds), *s2 = malloc(sizeof(float) * nq * lds);
                float *o = malloc(sizeof(float) * nq * ld), *o2 = malloc(sizeof(float) * nq * ld);
                float *wide = malloc(sizeof(float) * FL_KV_CHUNK * hd);
                float *sg = malloc(sizeof(float) * nq * nk), *og = malloc(sizeof(float) * nq * hd);
                double *rs = malloc(sizeof(double) * nq * nk), *ro = malloc(sizeof(double) * nq * hd);
                const uint16_t **kr = malloc(sizeof *kr * nk), **vr = malloc(sizeof *vr * nk);
                const float **kf = malloc(sizeof *kf * nk), **vf = malloc(sizeof *vf * nk);
                fill(q, (size_t)nq * ld);
                for (int i = 0; i < nk * ld; i++) {
                    k16[i] = fl_f32_to_bf16(frand());
                    v16[i] = fl_f32_to_bf16(frand());
                    kw[i] = fl_bf16_to_f32(k16[i]);
                    vw[i] = fl_bf16_to_f32(v16[i]);
                }
                for (int j = 0; j < nk; j++) { /* scrambled rows, as pages are */
                    int rk = (j * 5) % nk, rv = (j * 3) % nk;
                    kr[j] = k16 + (size_t)rk * ld;
                    vr[j] = v16 + (size_t)rv * ld;
                    kf[j] = kw + (size_t)rk * ld;
                    vf[j] = vw + (size_t)rv * ld;
                }
                fl_transpose_q(qt, q, ld, nq, hd);
                for (int i = 0; i < nq * lds; i++)
                    s[i] = s2[i] = -1; /* padding past nk stays */
                kk->qk_bf16(s, lds, qt, nq, kr, nk, hd, 0.25f, wide);
                kk->qk(s2, lds, qt, nq, kf, nk, hd, 0.25f);
                CHECK(!memcmp(s, s2, sizeof(float) * nq * lds), "%s qk_bf16 != qk on widened rows "
                      "nq=%d nk=%d hd=%d", kk->name, nq, nk, hd);
                for (int i = 0; i < nq; i++)
                    for (int j = 0; j < nk; j++) {
                        double d = 0;
                        for (int x = 0; x < hd; x++)
                            d += (double)q[i * ld + x] * fl_bf16_to_f32(kr[j][x]);
                        rs[i * nk + j] = d * 0.25;
                        sg[i * nk + j] = s[i * lds + j];
                    }
                CHECK(err(sg, rs, (size_t)nq * nk) < 1e-5, "%s qk_bf16 nq=%d nk=%d hd=%d", kk->name,
                      nq, nk, hd);
                for (int i = 0; i < nq * ld; i++)
                    o[i] = o2[i] = 0.25f;
                kk->pv_bf16(o, ld, s, lds, nq, vr, nk, hd, wide);
                kk->pv(o2, ld, s, lds, nq, vf, nk, hd);
                CHECK(!memcmp(o, o2, sizeof(float) * nq * ld), "%s pv_bf16 != pv on widened rows "
                      "nq=%d nk=%d hd=%d", kk->name, nq, nk, hd);
                for (int i = 0; i < nq; i++)
                    for (int x = 0; x < hd; x++) {
                        double d = 0.25;
                        for (int j = 0; j < nk; j++)
                            d += (double)s[i * lds + j] * fl_bf16_to_f32(vr[j][x]);
                        ro[i * hd + x] = d;
                        og[i * hd + x] = o[i * ld + x];
                    }
                CHECK(err(og, ro, (size_t)nq * hd) < 1e-5, "%s pv_bf16 nq=%d nk=%d hd=%d", kk->name,
                      nq, nk, hd);
                free(q);
                free(qt);
                free(k16);
                free(v16);
                free(kw);
                free(vw);
                free(s);
                free(s2);
                free(o);
                free(o2);
                free(wide);
                free(sg);
                free(og);
                free(rs);
                free(ro);
                free(kr);
                free(vr);
                free(kf);
                free(vf);
            }
}

/* f32 -> bf16 gives fl_f32_to_bf16's bits: random values, ties both ways, the largest finite
 * values (which round to infinity), infinities, zeros, subnormals, NaNs quiet and signalling;
 * lengths that leave every tail. */
static void test_f32_to_bf16(const fl_kernels *kk)
{
    static const uint32_t special[] = {
        0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00008000u, 0x00018000u,
        0x3f808000u, 0x3f818000u, 0x3f80c000u, 0xbf808000u, 0x7f7fffffu, 0xff7fffffu,
        0x7f7f8000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u,
        0x7fbfffffu, 0xff80ffffu, 0x3f7fffffu, 0x4b7fffffu,
    };
    const int ns[] = {1, 7, 8, 9, 23, 64, 1000};
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++) {
        int n = ns[a];
        float *x = malloc(sizeof(float) * n);
        uint16_t *got = malloc(sizeof(uint16_t) * (n + 1));
        for (int i = 0; i < n; i++) {
            uint32_t u;
            float f = frand() * (float)(1 << (i % 20));
            memcpy(&u, &f, 4);
            if (i % 5 == 1) /* exactly halfway between two bf16 values */
                u = (u & 0xffff0000u) | 0x8000u;
            if (i % 7 == 2)
                u = special[(size_t)(i / 7) % (sizeof special / sizeof *special)];
            memcpy(&x[i], &u, 4);
        }
        got[n] = 0xabcd;
        kk->f32_to_bf16(got, x, n);
        int bad = 0;
        for (int i = 0; i < n; i++)
            bad += got[i] != fl_f32_to_bf16(x[i]);
        CHECK(bad == 0 && got[n] == 0xabcd, "%s f32_to_bf16 n=%d: %d values differ from "
              "fl_f32_to_bf16 (or wrote past n)", kk->name, n, bad);
        free(x);
        free(got);
    }
    /* all the specials, in every lane position */
    int ns2 = (int)(sizeof special / sizeof *special);
    float x[64];
    uint16_t got[64];
    for (int sh = 0; sh < 8; sh++) {
        for (int i = 0; i < 64; i++)
            memcpy(&x[i], &special[(size_t)(i + sh) % (size_t)ns2], 4);
        kk->f32_to_bf16(got, x, 64);
        int bad = 0;
        for (int i = 0; i < 64; i++)
            bad += got[i] != fl_f32_to_bf16(x[i]);
        CHECK(bad == 0, "%s f32_to_bf16 of special values (shift %d): %d differ", kk->name, sh, bad);
    }
}

/* moe_sum: each token's experts' outputs weighted and summed in order, products rounded
 * before each add (volatile here, so the reference cannot be contracted into fmas either),
 * plus the shared expert, added to the residual: the same bits at every level, on lengths
 * that leave every tail, with zeros of both signs among the products (the sum starts at +0),
 * and nothing written past n. */
static void test_moe_sum(const fl_kernels *kk)
{
    const int ns[] = {1, 7, 8, 9, 15, 16, 17, 33, 2048};
    const int Ks[] = {1, 2, 8, 32};
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
        for (size_t b = 0; b < sizeof Ks / sizeof *Ks; b++)
            for (int shared = 0; shared < 2; shared++) {
                int n = ns[a], K = Ks[b];
                float *y = malloc(sizeof(float) * (size_t)K * n), *sy = malloc(sizeof(float) * n);
                float *x = malloc(sizeof(float) * (n + 1)), *want = malloc(sizeof(float) * n);
                float w[32];
                const float *ys[32];
                fill(y, (size_t)K * n);
                fill(sy, (size_t)n);
                fill(x, (size_t)n);
                for (int k = 0; k < K; k++) {
                    w[k] = k == 1 ? -0.0f : frand() * 0.5f; /* a weight of -0: products of -0 */
                    ys[k] = y + (size_t)k * n;
                }
                for (int d = 0; d < n; d += 3)
                    y[d] = 0; /* expert 0's zeros times a negative weight: -0 */
                if (K > 0 && w[0] > 0)
                    w[0] = -w[0];
                for (int d = 0; d < n; d++) {
                    volatile float acc = 0;
                    for (int k = 0; k < K; k++) {
                        volatile float p = w[k] * ys[k][d];
                        acc = acc + p;
                    }
                    if (shared)
                        acc = acc + sy[d];
                    want[d] = x[d] + acc;
                }
                x[n] = 1234.5f;
                kk->moe_sum(x, ys, w, K, shared ? sy : NULL, n);
                CHECK(memcmp(x, want, sizeof(float) * n) == 0 && x[n] == 1234.5f,
                      "%s moe_sum n=%d K=%d shared=%d: not the in-order unfused sum's bits (or "
                      "wrote past n)", kk->name, n, K, shared);
                free(y);
                free(sy);
                free(x);
                free(want);
            }
    /* a residual of -0 plus one expert's -1 * 0 = -0: the sum starts at +0, so 0 + -0 = +0
       and -0 + +0 = +0; a sum that started from the first product would leave -0 (every
       lane of the vectors and the tail) */
    float x[40], y0[40] = {0}, w0 = -1.0f;
    const float *ys[1] = {y0};
    for (int d = 0; d < 40; d++)
        x[d] = -0.0f;
    kk->moe_sum(x, ys, &w0, 1, NULL, 40);
    int neg = 0;
    for (int d = 0; d < 40; d++)
        neg += signbit(x[d]) != 0;
    CHECK(neg == 0, "%s moe_sum: -0 + (0 + -1 * 0) gave -0 in %d of 40 places: the sum must "
          "start at +0", kk->name, neg);
}

static void test_softmax_stats(const fl_kernels *kk)
{
    const int ns[] = {1, 5, 8, 17, 300, 1000};
    for (size_t a = 0; a < 6; a++) {
        int n = ns[a];
        float *l = malloc(sizeof(float) * n), *s = malloc(sizeof(float) * n);
        for (int i = 0; i < n; i++)
            l[i] = 8 * frand();
        if (n > 8)
            l[n / 3] = l[2 * n / 3] = 9; /* a tie for the max: the lower id wins */
        /* reference in double */
        double p1, h;
        int arg = fl_ref_top1(l, n, &p1, &h);
        double z = 1 / p1, mx = l[arg];
        /* in chunks of several sizes, merged in order, and in one piece */
        const int chunks[] = {1, 3, 16, 1000};
        for (size_t c = 0; c < 4; c++) {
            fl_lse all;
            fl_lse_init(&all);
            for (int i0 = 0; i0 < n; i0 += chunks[c]) {
                fl_lse part;
                fl_lse_init(&part);
                int len = n - i0 < chunks[c] ? n - i0 : chunks[c];
                kk->lse_add(&part, l + i0, len, i0);
                fl_lse_merge(&all, &part);
            }
            int32_t tok;
            float prob, ent;
            fl_lse_finish(&all, &tok, &prob, &ent);
            CHECK(tok == arg, "%s lse n=%d chunk=%d: argmax %d, want %d", kk->name, n, chunks[c],
                  tok, arg);
            CHECK(fabs(prob - 1 / z) < 1e-6, "%s lse n=%d chunk=%d: prob %.8g, want %.8g",
                  kk->name, n, chunks[c], prob, 1 / z);
            CHECK(fabs(ent - h) < 1e-5 * fmax(1, h), "%s lse n=%d chunk=%d: entropy %.8g, want "
                  "%.8g", kk->name, n, chunks[c], ent, h);
            /* the log probabilities' normaliser is taken from these (fl_row_lse) */
            fl_tok_out t1 = {tok, prob, ent};
            double lse = fl_row_lse(l, n, &t1), want = mx + log(z);
            CHECK(fabs(lse - want) < 1e-6, "%s lse n=%d chunk=%d: log-sum-exp %.9f, want %.9f",
                  kk->name, n, chunks[c], lse, want);
        }
        memcpy(s, l, sizeof(float) * n);
        kk->softmax(s, n);
        double se = 0;
        for (int i = 0; i < n; i++)
            se = fmax(se, fabs(s[i] - exp(l[i] - mx) / z));
        CHECK(se < 1e-6, "%s softmax n=%d: err %.3g", kk->name, n, se);
        free(l);
        free(s);
    }
}

static void test_swiglu(const fl_kernels *kk)
{
    for (int ib = 1; ib <= 8; ib += 7) {
        int grp = 5, n = grp * ib;
        float gu[80], h[40];
        for (int i = 0; i < 2 * n; i++)
            gu[i] = 12 * frand();
        gu[0] = -100; /* far in the tail: silu -> -0 without overflow trouble */
        kk->swiglu(h, gu, grp, ib);
        double e = 0;
        for (int b = 0; b < grp; b++)
            for (int c = 0; c < ib; c++) {
                double g = gu[2 * b * ib + c], u = gu[2 * b * ib + ib + c];
                double want = g / (1 + exp(-g)) * u;
                e = fmax(e, fabs(h[b * ib + c] - want) / fmax(1, fabs(want)));
            }
        CHECK(e < 1e-6, "%s swiglu ib=%d: err %.3g", kk->name, ib, e);
    }
}

/* fl_rmsnorm_rows: rows 1..9 (four at a time, then the rest), strided rows, in place; each row
 * bit-identical to fl_rmsnorm's and within float rounding of the norm in double. Rows of
 * very different magnitudes (their sums must not mix). */
static void test_rmsnorm_rows(void)
{
    enum { N = 130, LD = 141, R = 9 };
    static float x[R * LD], y[R * LD], z[R * LD], w[N];
    fill(w, N);
    for (int rows = 1; rows <= R; rows++) {
        for (int r = 0; r < R; r++)
            for (int i = 0; i < LD; i++)
                x[r * LD + i] = frand() * ldexpf(1.0f, 3 * (r % 5) - 6);
        memset(y, 0, sizeof y);
        fl_rmsnorm_rows(y, LD, x, LD, w, rows, N, 1e-6f);
        int diff = 0, past = 0;
        double e = 0;
        for (int r = 0; r < R; r++) {
            if (r >= rows) {
                for (int i = 0; i < LD; i++)
                    past += y[r * LD + i] != 0.0f;
                continue;
            }
            fl_rmsnorm(z, x + r * LD, w, N, 1e-6f);
            diff += memcmp(z, y + r * LD, N * sizeof *z) != 0;
            double ss = 0;
            for (int i = 0; i < N; i++)
                ss += (double)x[r * LD + i] * x[r * LD + i];
            double inv = 1 / sqrt(ss / N + 1e-6);
            for (int i = 0; i < N; i++) {
                double want = w[i] * (x[r * LD + i] * inv);
                e = fmax(e, fabs(y[r * LD + i] - want) / fmax(1e-30, fabs(want)));
            }
            for (int i = N; i < LD; i++) /* between the rows: untouched */
                past += y[r * LD + i] != 0.0f;
        }
        CHECK(diff == 0, "rmsnorm_rows, %d rows: %d rows differ from fl_rmsnorm", rows, diff);
        CHECK(past == 0, "rmsnorm_rows, %d rows: %d values written outside the rows", rows, past);
        CHECK(e < 1e-6, "rmsnorm_rows, %d rows: rel err %.3g against the double norm", rows, e);
        memcpy(z, x, sizeof x); /* in place, as the q/k norm runs */
        fl_rmsnorm_rows(z, LD, z, LD, w, rows, N, 1e-6f);
        diff = 0;
        for (int r = 0; r < rows; r++)
            diff += memcmp(z + r * LD, y + r * LD, N * sizeof *z) != 0;
        CHECK(diff == 0, "rmsnorm_rows in place, %d rows: %d rows differ", rows, diff);
    }
}

int main(void)
{
    const char *levels[] = {"", "avx2", "plain"};
    const char *seen[3] = {0};
    for (int i = 0; i < 3; i++) {
        fl_kernels kk;
        fl_kernels_init(&kk, levels[i]);
        bool dup = false;
        for (int j = 0; j < i; j++)
            dup |= seen[j] && !strcmp(seen[j], kk.name);
        seen[i] = kk.name;
        if (dup)
            continue; /* this CPU lacks the level: the cap fell back to one already tested */
        printf("kernels: %s\n", kk.name);
        test_matmul(&kk);
        test_attention(&kk);
        test_qk_invariance(&kk);
        test_attention_exact(&kk);
        test_attention_bf16(&kk);
        test_f32_to_bf16(&kk);
        test_softmax_stats(&kk);
        test_swiglu(&kk);
        test_moe_sum(&kk);
    }
    test_rmsnorm_rows(); /* plain C, every level's */
    return check_summary("test_kernels");
}
