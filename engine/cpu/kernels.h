/* kernels.h: the CPU backend's compute kernels, single-threaded; cpu_backend.c splits the
 * work over its thread pool. Matrices are row-major. A weight matrix is (rows, cols) as in
 * PyTorch's nn.Linear, so a projection is Y = X * W^T.
 *
 * Two matmul paths: OpenBLAS sgemm for many rows of X, and a streaming kernel for few rows
 * (the decode case, 4-16 tokens) that reads each weight row once for all rows of X, several
 * weight rows at a time. At few rows the product is bound by reading the weights, and
 * sgemm's packing and blocking make it stream them well below the machine's bandwidth.
 * The streaming kernel has AVX-512 and AVX2+FMA versions picked at run time and a plain C
 * fallback.
 *
 * Every output element of the streaming kernel is summed in the same order whatever the
 * number of rows and whichever tile computes it, so a row's result never depends on the
 * other rows of the batch (the block-causality test relies on it). */
#ifndef FL_KERNELS_H
#define FL_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The storage format of one weight matrix. */
typedef enum fl_mfmt {
    FL_MF_F32,
    FL_MF_BF16, /* bf16 bit patterns */
    FL_MF_Q8,   /* quant.h's repacked q8 */
    FL_MF_Q4,   /* quant.h's repacked q4 */
} fl_mfmt;

/* A weight matrix in the backend's storage format. */
typedef struct fl_mat {
    const void *data;       /* (rows, cols) f32 or bf16; q8/q4: the repacked quants */
    const uint16_t *scales; /* q8/q4: the repacked f16 scales; else NULL */
    int rows, cols;
    fl_mfmt fmt;
} fl_mat;

static inline bool fl_mat_quantized(const fl_mat *w) { return w->fmt == FL_MF_Q8 || w->fmt == FL_MF_Q4; }

/* Softmax statistics of one row of logits, accumulated over chunks of the vocabulary:
 * the max, sums of e^u and e^u * u with u = l - max (rescaled when the max moves), and the
 * argmax. The entropy then needs no second pass over the logits. */
typedef struct fl_lse {
    float max;
    double sum, sum_u;
    int32_t arg;
} fl_lse;

#define FL_QT 16 /* queries per score tile: one zmm, two ymm */

typedef struct fl_kernels {
    const char *name; /* "AVX-512", "AVX2+FMA" or "plain C": the streaming matmul's level */
    int sgemm_rows;   /* rows of X from which OpenBLAS sgemm beat this level's streaming
                         kernel in the forward (measured on 2-core EPYC, bench_forward.c) */
    /* y[i*ldy + j] (= or += when acc) sum_c x[i*ldx + c] * w[j*k + c], i < m, j < n. */
    void (*mm_f32)(float *y, int ldy, const float *x, int ldx, int m, const float *w, int n,
                   int k, bool acc);
    void (*mm_bf16)(float *y, int ldy, const float *x, int ldx, int m, const uint16_t *w, int n,
                    int k, bool acc);
    /* s[i*lds + j] = scale * (q_i . k_j) for i < nq <= FL_QT, j < nk, k_j = kr[j] (hd
     * floats). The queries come transposed: qt (hd, FL_QT), qt[d*FL_QT + i] = q_i[d]
     * (fl_transpose_q), so that each key element is broadcast against FL_QT queries at
     * once: no horizontal sums, which at head_dim 128 cost as much as the products. Keys
     * are rows anywhere (K/V pages hold B keys each): one call walks them all, enough
     * independent sums to hide the FMA latency, prefetching rows ahead. (AVX-512, at most 8
     * queries and hd % 16 == 0: 16 keys transposed in registers instead, each query's
     * element broadcast against one element of 16 keys; the same sums.) */
    void (*qk)(float *s, int lds, const float *qt, int nq, const float *const *kr, int nk,
               int hd, float scale);
    /* o_i += sum_j p[i*ldp + j] * v_j for i < nq, j < nk, v_j = vr[j] (hd floats). */
    void (*pv)(float *o, int ldo, const float *p, int ldp, int nq, const float *const *vr,
               int nk, int hd);
    /* bf16 -> f32 of n values. */
    void (*bf16_to_f32)(float *dst, const uint16_t *src, long n);
    /* fl_lse_add, below */
    void (*lse_add)(fl_lse *s, const float *l, int n, int32_t id0);
    /* In place: s[0..n) = softmax(s[0..n)), max-subtracted. */
    void (*softmax)(float *s, int n);
    /* SwiGLU over one row whose gate and up columns are interleaved in groups of ib:
     * gu = [g0..g(ib-1), u0..u(ib-1), g(ib)..]; h[c] = silu(g[c]) * u[c], n_grp groups. */
    void (*swiglu)(float *h, const float *gu, int n_grp, int ib);
    /* Quantized weights (quant.h): y[i*ldy + j] (= or += when acc) sum_c x_i[c] * W[j][c]
     * for i < m, j < n, where x_i is row i of qx (m consecutive rows of an
     * fl_qx_quantize buffer) and W is q8/q4 weights in the repacked layout, wq and wd
     * pointing at the tile of the range's first row j0 (j0 % FL_QR == 0; q8: wq + j0*k, q4:
     * wq + j0*k/2; wd + j0*k/32); the range ends inside a tile only at the matrix end.
     * k % 32 == 0. The arithmetic is specified exactly, so every level gives the same bits:
     * per output, a = 0; for each group g in order, a = fma((float)I_g, dw_g * dx_g, a) with
     * I_g the exact int32 dot product of the group's quants and dw_g * dx_g rounded to f32;
     * then y = a, or y = y + a when acc. */
    const char *qname; /* the level of these three: "AMX-INT8" (VNNI below 16 rows),
                          "AVX-512 VNNI", "AVX2" or "plain C" */
    /* fl_qx_quantize, same bytes */
    void (*qx_quantize)(void *qx, const float *x, int ldx, int m, int k);
    void (*mm_q8)(float *y, int ldy, const void *qx, int m, const uint8_t *wq,
                  const uint16_t *wd, int n, int k, bool acc);
    void (*mm_q4)(float *y, int ldy, const void *qx, int m, const uint8_t *wq,
                  const uint16_t *wd, int n, int k, bool acc);
    /* Attention over bf16 keys and values (KV pages in bf16): qk and pv with rows kr[j] /
     * vr[j] of hd bf16 values. Each gives exactly what this level's qk / pv give for the rows
     * widened to f32 (an exact conversion), as that is how they compute: FL_KV_CHUNK rows at
     * a time widened into wide, (FL_KV_CHUNK * hd) floats of scratch, then qk / pv on them
     * (AVX2 reads even head dims' rows in place instead, the same products in the same
     * order, and uses wide for pv's outputs; so does AVX-512, with 16 lanes: tiles of up to
     * 8 queries two keys per zmm in qk, and pv 8 query rows per pass).
     * Widening a chunk once costs a few instructions per 16 values next to the hd FMAs per
     * key and query tile (or per key and 4 query rows), so the products run at f32 speed
     * while memory gives up half the bytes. Exactness rests on qk's and pv's contracts: a
     * score or output's sum never depends on how the keys are split into calls. */
    void (*qk_bf16)(float *s, int lds, const float *qt, int nq, const uint16_t *const *kr,
                    int nk, int hd, float scale, float *wide);
    void (*pv_bf16)(float *o, int ldo, const float *p, int ldp, int nq,
                    const uint16_t *const *vr, int nk, int hd, float *wide);
    /* f32 -> bf16 of n values: fl_f32_to_bf16's bits (nearest even; a NaN stays a NaN). */
    void (*f32_to_bf16)(uint16_t *dst, const float *src, long n);
    /* A MoE layer's sum for one token, d < n: a = 0, a = a + w[k] * ys[k][d] for k < K in
     * order (each product rounded, then added: no fused multiply-add), then a = a + s[d] when
     * s is not NULL (the shared expert), then x[d] = x[d] + a. Elementwise and unfused, so
     * every level gives the same bits, as does the CUDA backend's k_moe_combine. */
    void (*moe_sum)(float *x, const float *const *ys, const float *w, int K, const float *s,
                    int n);
} fl_kernels;

#define FL_KV_CHUNK 64 /* bf16 key/value rows widened per qk / pv call (16 KB at head_dim 64,
                          32 KB at 128: in L1/L2 while the products read them); the next
                          chunk's rows are prefetched while this one is computed. 32 did
                          better at short contexts, worse at long ones; 128 worse at both
                          (docs/benchmarks.md, "KV pages in bf16") */

/* Picks the fastest versions this CPU runs, capped by want: NULL or "" (no cap), "avx512"
 * (no AMX), "avx2" (no AVX-512), "plain" (no SIMD at all). The AVX-512 level replaces the
 * streaming matmuls (where the 32 registers allow a 4x4 tile) and the attention products;
 * the rest stays AVX2. AMX (Intel's tile unit) does the q8/q4 products of 16 rows and more
 * (quant.c); the levels give the same bits (the contract above). */
void fl_kernels_init(fl_kernels *k, const char *want);

/* Columns [n0, n0 + n) of Y (m, w->rows) (= or += when acc) X (m, k) * W^T, on one thread.
 * f32/bf16 weights: sgemm when m >= sgemm_rows, else the streaming kernel; x is read, qx
 * not. q8/q4 weights: the integer kernels at every m (one exact arithmetic, so a row's
 * result never depends on the others), reading qx, X's rows quantized by kk->qx_quantize
 * (quant.h; fl_qx_row_bytes(k) per row), not x; n0 % FL_QR == 0 and n0 + n is a multiple
 * of FL_QR or w->rows. y points at Y[0][n0], row stride ldy. scratch: (FL_MM_TILE * k)
 * floats, to widen bf16 weights for sgemm. */
#define FL_MM_TILE 256
void fl_matmul(const fl_kernels *kk, float *y, int ldy, const float *x, int ldx, const void *qx,
               int m, const fl_mat *w, int n0, int n, bool acc, int sgemm_rows, float *scratch);

/* Splits [0, n) into nt near-equal parts aligned to `align`; part t is [*lo, *hi). */
void fl_split(int n, int nt, int t, int align, int *lo, int *hi);

/* qt (hd, FL_QT) = the nq rows of q (stride ldq) transposed, lanes past nq zero. */
void fl_transpose_q(float *qt, const float *q, int ldq, int nq, int hd);

/* y = x / rms(x) * w, over n values (the reference's RMSNorm, f32). */
void fl_rmsnorm(float *y, const float *x, const float *w, int n, float eps);
/* fl_rmsnorm of rows rows of x (stride ldx) into y (stride ldy; y == x in place), with the
 * same bits, several rows' sums overlapping */
void fl_rmsnorm_rows(float *y, size_t ldy, const float *x, size_t ldx, const float *w, int rows,
                     int n, float eps);

/* In place, HF rotate_half layout: pairs (i, i + hd/2). cs: (hd/2) cos then (hd/2) sin. */
void fl_rope(float *x, const float *cs, int hd);

void fl_lse_init(fl_lse *s);
/* Adding logits l[0..n) whose ids start at id0 is kk->lse_add(s, l, n, id0); one fl_lse
 * must see its ids in increasing order. */
/* Merges b into a (b's ids are disjoint from a's). The lower id wins a tie. */
void fl_lse_merge(fl_lse *a, const fl_lse *b);
/* prob = softmax(l)[arg] = 1 / sum; entropy = log(sum) - sum_u / sum (nats). */
void fl_lse_finish(const fl_lse *s, int32_t *tok, float *prob, float *entropy);

#endif
