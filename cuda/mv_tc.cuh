/* mv_tc.cuh: the weight-streaming matmul for up to 32 rows on tensor cores (FL_CUDA_MV=tc),
 * included by cuda_kernels.cu and, on machines without a GPU, by tests/unit/test_mv_tc_emu.cc
 * through tests/unit/cuda_emu.hh. It needs from its includer: flc_mma_bf16 (one
 * mma.sync.m16n8k16 bf16 -> f32, d += a b), flc_h2f (f16 bits to float), flc_bf16x2 (two
 * floats rounded to a bf16 pair, the first in the low half), flc_prefetch_l2, flc_pdl_wait,
 * flc_pdl_trigger, flc_emat (cuda_kernels.cuh: an expert's matrix, bf16 w or q8 q, d),
 * flc_norm_in (flc_meta.h) and norm.cuh.
 *
 * Why: the CUDA-core kernel (k_skinny) streamed gate|up at 1.6 TB/s and down at 1.1 TB/s
 * on an H200 at batch 1 (docs/cuda.md). Per 16 bytes of weights a lane there unpacks them,
 * and for every row loads and unpacks 16 bytes of x and does 8 FMAs: about 100 instructions
 * per 16 bytes, so issuing them takes as long as the bytes take to arrive. With
 * mma.m16n8k16 a warp multiplies 16 weight rows by 32 k (1 KB) with two loads of 16 bytes and
 * two mma per lane and tile of 8 x rows (B's 8 columns; rows past m are zeros). Up to 4 tiles
 * (32 rows: a few sequences' blocks) reuse the same weight registers, so the weights are read
 * once where cuBLAS took over above 8 rows.
 *
 * The k order inside a window of 32 is permuted, the same way for A (weights) and B (x), so
 * that every lane reads 16 contiguous bytes: lane (g = lane / 4, t = lane % 4) loads weight
 * rows g and g + 8 and x row g (of each tile) at k = kb + 8t .. kb + 8t + 7; mma step s (0, 1)
 * takes the words 2s and 2s + 1 of each, which the fragment layout puts at logical k 2t,
 * 2t + 1 (word 2s) and 2t + 8, 2t + 9 (word 2s + 1), for A (rows g / g + 8 in registers 0, 2 /
 * 1, 3) and B (column g) alike. A dot product does not care in which order its k come.
 *
 * Block: 16 output columns (and, for SwiGLU, the 16 matching up columns), 8 warps splitting
 * the k windows (warp w takes windows w, w + 8, ... in that order), some windows in flight per
 * lane; the warps' sums are added in warp order through shared memory. Each output is the
 * same sum whatever the row count (an element of D uses only its own row and column, and
 * the window order does not depend on the tiles). k % 32 == 0.
 *
 * The RMSNorm before a product can run inside it (NORM, flc_norm_in; the backend does it for
 * q|k|v and a dense layer's gate|up at up to 8 rows): every block sums the squares of its m
 * rows of the f32 residual itself, in k_rmsnorm's order (norm.cuh), and norms each piece of x
 * as it loads it, so the product's input has the bits k_rmsnorm would have written, and the
 * norm's own kernel (a few blocks of dependent sums between two products) is gone. The
 * block's first weights are on their way to L2 while it sums. */
#ifndef FL_MV_TC_CUH
#define FL_MV_TC_CUH

#define FLC_MV_WARPS 8

/* Windows of 32 k in flight per lane: fewer with more weight row sets (NW) or row tiles (NT),
 * which hold more registers per window */
template <int NW, int NT> struct flc_mv_u {
    static constexpr int U = (NW == 2 ? 4 : 8) / NT > 0 ? (NW == 2 ? 4 : 8) / NT : 1;
};

/* Shared floats a block needs for NW weight row sets and NT row tiles (flc_mv_finish) */
#define FLC_MV_RED(NW, NT) (FLC_MV_WARPS * 32 * 4 * (NW) * (NT))

/* The end of a block's pass: the warps' fragments summed in warp order through red, then
 * warp 0 writes D's elements of each row tile nt: 0, 1 = column j0 of rows 8 nt + 2t,
 * 8 nt + 2t + 1; 2, 3 = column j1 of the same rows. Every thread of the block calls it; it
 * may be called again (the first barrier keeps red's readers before its next writers). */
template <int MODE, int NW, int NT>
__device__ __forceinline__ void flc_mv_finish(float (&d)[NW][NT][4], float *red, float *y,
                                              flc_bf16 *yh, int ldy, int m, int n, int j0, int j1,
                                              int lane, int wp)
{
    constexpr int S = 4 * NW * NT; /* floats per lane */
    const int t = lane & 3;
    __syncthreads();
#pragma unroll
    for (int q = 0; q < NW; q++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                red[(wp * 32 + lane) * S + (q * NT + nt) * 4 + i] = d[q][nt][i];
    __syncthreads();
    if (wp != 0)
        return;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float s[NW];
#pragma unroll
            for (int q = 0; q < NW; q++) {
                float v = red[lane * S + (q * NT + nt) * 4 + i];
                for (int v2 = 1; v2 < FLC_MV_WARPS; v2++)
                    v += red[(v2 * 32 + lane) * S + (q * NT + nt) * 4 + i];
                s[q] = v;
            }
            const int r = 8 * nt + 2 * t + (i & 1), j = i < 2 ? j0 : j1;
            if (r >= m || j >= n)
                continue;
            if (MODE == FLC_MM_STORE) {
                y[(size_t)r * ldy + j] = s[0];
            } else if (MODE == FLC_MM_ACC) {
                y[(size_t)r * ldy + j] += s[0];
            } else {
                const float gt = s[0], up = s[NW - 1];
                yh[(size_t)r * ldy + j] = __float2bfloat16_rn(gt / (1.0f + expf(-gt)) * up);
            }
        }
}

/* The programmatic launch's wait (and then the trigger for the next kernel), once per thread */
__device__ __forceinline__ void flc_mv_wait_once(bool &waited)
{
    if (!waited) {
        flc_pdl_wait();
        flc_pdl_trigger();
        waited = true;
    }
}

template <int NW, int NT> __device__ __forceinline__ void flc_mv_zero(float (&d)[NW][NT][4])
{
#pragma unroll
    for (int q = 0; q < NW; q++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                d[q][nt][i] = 0.f;
}

/* this lane's x rows, one per row tile (row 8 nt + g), NULL past m */
template <int NT>
__device__ __forceinline__ void flc_mv_xrows(const uint4 *(&xr)[NT], const flc_bf16 *x, int ldx,
                                             int m, int g)
{
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
        xr[nt] = 8 * nt + g < m ? reinterpret_cast<const uint4 *>(x + (size_t)(8 * nt + g) * ldx)
                                : nullptr;
}

/* weights: streamed (read once: evict first) or kept in L2 (a MoE expert read again for
 * every 32 of its rows) */
template <bool STREAM, class T> __device__ __forceinline__ T flc_mv_ld(const T *p)
{
    return STREAM ? __ldcs(p) : __ldg(p);
}

/* Where a lane's pieces of x come from: the bf16 rows xr (NULL past m), or, with NORM, the
 * f32 rows xn (NULL past m) normed with weights w and the rows' scales rs */
template <int NT, bool NORM> struct flc_mv_xs {
    const uint4 *xr[NT];
    const float *xn[NT];
    float rs[NT];
    const float *w;
};

template <int NT, bool NORM>
__device__ __forceinline__ void flc_mv_xinit(flc_mv_xs<NT, NORM> &xs, const flc_bf16 *x, int ldx,
                                             int m, int g)
{
    if (!NORM)
        flc_mv_xrows<NT>(xs.xr, x, ldx, m, g);
}

/* With NORM, after the wait: the norm's scale of each of the m rows (flc_norm_scale of its
 * sum of squares, summed as k_rmsnorm sums it: each thread's part, the warp's sum, then the
 * block's 8 warps' sums in warp order by one warp; 8 rows at once), then this lane's rows.
 * scratch: 160 floats of shared memory, 8-byte aligned (the block's red, which
 * flc_mv_finish uses only after a barrier). Every thread of the block calls it. */
template <int NT, bool NORM>
__device__ __forceinline__ void flc_mv_norm_init(flc_mv_xs<NT, NORM> &xs, const flc_norm_in &nz,
                                                 int m, int k, int g, float *scratch)
{
    static_assert(FLC_MV_WARPS == 8, "a group of 8 rows, one warp each, as k_rmsnorm's block");
    double *sh = reinterpret_cast<double *>(scratch); /* (row of the group, warp) */
    float *rs = scratch + 2 * 8 * FLC_MV_WARPS;        /* (m) */
    const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
    for (int r0 = 0; r0 < m; r0 += 8) {
        double p[8];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int r = r0 + i;
            p[i] = r < m ? flc_norm_part(nz.x + (size_t)(nz.gather ? nz.gather[r] : r) * k, k)
                         : 0.0;
        }
#pragma unroll
        for (int i = 0; i < 8; i++)
            p[i] = flc_warp_sum_d(p[i]);
        __syncthreads(); /* the group before's sums are read */
        if (lane == 0)
#pragma unroll
            for (int i = 0; i < 8; i++)
                sh[i * FLC_MV_WARPS + wp] = p[i];
        __syncthreads();
        if (r0 + wp < m) { /* warp wp finishes row r0 + wp */
            double v = lane < FLC_MV_WARPS ? sh[wp * FLC_MV_WARPS + lane] : 0.0;
            v = flc_warp_sum_d(v);
            if (lane == 0)
                rs[r0 + wp] = flc_norm_scale(v, k, nz.eps);
        }
    }
    __syncthreads();
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const int r = 8 * nt + g;
        xs.xn[nt] = r < m ? nz.x + (size_t)(nz.gather ? nz.gather[r] : r) * k : nullptr;
        xs.rs[nt] = r < m ? rs[r] : 0.f;
    }
    xs.w = nz.w;
}

/* With NORM: the lane's first windows' weights (rows wr, pieces of P) sent towards L2, the
 * wait for the kernel before, then the rows' scales (flc_mv_norm_init) while they arrive */
template <int NT, bool NORM, int U, int NW, class P>
__device__ __forceinline__ void flc_mv_norm_start(flc_mv_xs<NT, NORM> &xs, const P *(&wr)[NW][2],
                                                  const flc_norm_in &nz, int m, int k, int nwin,
                                                  int g, int t, float *red, bool &waited)
{
    if (!NORM)
        return;
    const int wp = threadIdx.x >> 5;
#pragma unroll
    for (int u = 0; u < U; u++)
#pragma unroll
        for (int q = 0; q < NW; q++)
#pragma unroll
            for (int h = 0; h < 2; h++)
                if (wp + FLC_MV_WARPS * u < nwin && wr[q][h])
                    flc_prefetch_l2(wr[q][h] + (wp + FLC_MV_WARPS * u) * 4 + t);
    flc_mv_wait_once(waited);
    flc_mv_norm_init<NT, NORM>(xs, nz, m, k, g, red);
}

/* This lane's piece of x for row tile nt in window win: x at k = 32 win + 8t .. + 7 as 4
 * bf16 pairs (zeros past m or past the windows) */
template <int NT, bool NORM>
__device__ __forceinline__ uint4 flc_mv_xpiece(const flc_mv_xs<NT, NORM> &xs, int nt, int win,
                                               int nwin, int t)
{
    if (win >= nwin)
        return make_uint4(0, 0, 0, 0);
    if (!NORM)
        return xs.xr[nt] ? __ldg(xs.xr[nt] + win * 4 + t) : make_uint4(0, 0, 0, 0);
    if (!xs.xn[nt])
        return make_uint4(0, 0, 0, 0);
    const int k0 = win * 32 + 8 * t;
    const float4 a0 = __ldg(reinterpret_cast<const float4 *>(xs.xn[nt] + k0));
    const float4 a1 = __ldg(reinterpret_cast<const float4 *>(xs.xn[nt] + k0 + 4));
    const float4 w0 = __ldg(reinterpret_cast<const float4 *>(xs.w + k0));
    const float4 w1 = __ldg(reinterpret_cast<const float4 *>(xs.w + k0 + 4));
    const float r = xs.rs[nt];
    return make_uint4(flc_bf16x2(flc_norm_val(w0.x, a0.x, r), flc_norm_val(w0.y, a0.y, r)),
                      flc_bf16x2(flc_norm_val(w0.z, a0.z, r), flc_norm_val(w0.w, a0.w, r)),
                      flc_bf16x2(flc_norm_val(w1.x, a1.x, r), flc_norm_val(w1.y, a1.y, r)),
                      flc_bf16x2(flc_norm_val(w1.z, a1.z, r), flc_norm_val(w1.w, a1.w, r)));
}

/* One block's work with bf16 weights: the 16 columns of column block cb (and their up
 * columns) for the m <= 8 NT rows of x. NT: row tiles of 8; every tile reuses the lane's
 * weight registers. waited: whether this thread has passed flc_pdl_wait. */
template <int MODE, int NT, bool STREAM, bool NORM>
__device__ __forceinline__ void flc_mv_block(float *red, float *y, flc_bf16 *yh, int ldy,
                                             const flc_bf16 *__restrict__ x, int ldx, int m,
                                             const flc_bf16 *__restrict__ w, int n, int k,
                                             int cb, bool &waited, const flc_norm_in &nz)
{
    constexpr int NW = MODE == FLC_MM_SWIGLU ? 2 : 1; /* weight row sets: gate (, up) */
    constexpr int U = flc_mv_u<NW, NT>::U;
    const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int j0 = cb * 16 + g, j1 = j0 + 8; /* this lane's two weight rows */
    const int nwin = k >> 5;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    const uint4 *wr[NW][2];
#pragma unroll
    for (int q = 0; q < NW; q++) {
        const size_t base = (size_t)q * n;
        wr[q][0] = j0 < n ? reinterpret_cast<const uint4 *>(w + (base + j0) * k) : nullptr;
        wr[q][1] = j1 < n ? reinterpret_cast<const uint4 *>(w + (base + j1) * k) : nullptr;
    }
    flc_mv_xs<NT, NORM> xs;
    flc_mv_xinit<NT, NORM>(xs, x, ldx, m, g);
    flc_mv_norm_start<NT, NORM, U, NW>(xs, wr, nz, m, k, nwin, g, t, red, waited);

    float d[NW][NT][4];
    flc_mv_zero<NW, NT>(d);
    for (int w0 = wp; w0 < nwin; w0 += FLC_MV_WARPS * U) {
        uint4 a[U][NW][2], b[U][NT];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int win = w0 + FLC_MV_WARPS * u, c = win * 4 + t; /* 16-byte piece */
#pragma unroll
            for (int q = 0; q < NW; q++)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    a[u][q][h] = win < nwin && wr[q][h] ? flc_mv_ld<STREAM>(wr[q][h] + c) : zero;
        }
        flc_mv_wait_once(waited); /* the first weights are on their way; x is the kernel before's */
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int win = w0 + FLC_MV_WARPS * u;
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
                b[u][nt] = flc_mv_xpiece<NT, NORM>(xs, nt, win, nwin, t);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
#pragma unroll
            for (int q = 0; q < NW; q++) {
                const unsigned a0[4] = {a[u][q][0].x, a[u][q][0].y, a[u][q][0].z, a[u][q][0].w};
                const unsigned a1[4] = {a[u][q][1].x, a[u][q][1].y, a[u][q][1].z, a[u][q][1].w};
#pragma unroll
                for (int s = 0; s < 2; s++) {
                    const unsigned af[4] = {a0[2 * s], a1[2 * s], a0[2 * s + 1], a1[2 * s + 1]};
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) {
                        const unsigned bw[4] = {b[u][nt].x, b[u][nt].y, b[u][nt].z, b[u][nt].w};
                        const unsigned bf[2] = {bw[2 * s], bw[2 * s + 1]};
                        flc_mma_bf16(d[q][nt], af, bf);
                    }
                }
            }
        }
    }
    flc_mv_wait_once(waited); /* a warp without windows still writes nothing before it */
    flc_mv_finish<MODE, NW, NT>(d, red, y, yh, ldy, m, n, j0, j1, lane, wp);
}

/* Two floats that are small integers (|v| <= 256: 8 significant bits at most) as a bf16 pair,
 * lo in the low half: exact, by truncation */
__device__ __forceinline__ unsigned flc_mv_pack_int(float lo, float hi)
{
    return (__float_as_uint(hi) & 0xffff0000u) | (__float_as_uint(lo) >> 16);
}

/* flc_mv_block with q8 weights (qformat.h's plain layout: quants (n, k) int8, a f16 scale per
 * 32 of a row; the group is the window). Per window a lane loads 8 quants of rows g and g + 8
 * (k = 8t .. 8t + 7), widens them to bf16 (exact: integers of at most 8 bits), the two mma
 * steps sum quant x x over the window into a zeroed fragment per row tile, and the row's
 * scale multiplies that sum into the running one: sum over groups of d_g (sum of q x), as
 * k_skinny_q8 sums. */
template <int MODE, int NT, bool STREAM, bool NORM>
__device__ __forceinline__ void flc_mv_block_q8(float *red, float *y, flc_bf16 *yh, int ldy,
                                                const flc_bf16 *__restrict__ x, int ldx, int m,
                                                const int8_t *__restrict__ wq,
                                                const uint16_t *__restrict__ wd, int n, int k,
                                                int cb, bool &waited, const flc_norm_in &nz)
{
    constexpr int NW = MODE == FLC_MM_SWIGLU ? 2 : 1;
    constexpr int U = flc_mv_u<NW, NT>::U;
    const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int j0 = cb * 16 + g, j1 = j0 + 8;
    const int nwin = k >> 5; /* windows = scale groups */
    const uint2 zero2 = {0u, 0u};
    const uint2 *wr[NW][2];
    const uint16_t *dr[NW][2];
#pragma unroll
    for (int q = 0; q < NW; q++) {
        const size_t base = (size_t)q * n;
        wr[q][0] = j0 < n ? reinterpret_cast<const uint2 *>(wq + (base + j0) * k) : nullptr;
        wr[q][1] = j1 < n ? reinterpret_cast<const uint2 *>(wq + (base + j1) * k) : nullptr;
        dr[q][0] = j0 < n ? wd + (base + j0) * nwin : nullptr;
        dr[q][1] = j1 < n ? wd + (base + j1) * nwin : nullptr;
    }
    flc_mv_xs<NT, NORM> xs;
    flc_mv_xinit<NT, NORM>(xs, x, ldx, m, g);
    flc_mv_norm_start<NT, NORM, U, NW>(xs, wr, nz, m, k, nwin, g, t, red, waited);

    float d[NW][NT][4];
    flc_mv_zero<NW, NT>(d);
    for (int w0 = wp; w0 < nwin; w0 += FLC_MV_WARPS * U) {
        uint2 a[U][NW][2];
        uint16_t sc[U][NW][2];
        uint4 b[U][NT];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int win = w0 + FLC_MV_WARPS * u;
#pragma unroll
            for (int q = 0; q < NW; q++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const bool in = win < nwin && wr[q][h];
                    a[u][q][h] = in ? flc_mv_ld<STREAM>(wr[q][h] + win * 4 + t) : zero2;
                    sc[u][q][h] = in ? __ldg(dr[q][h] + win) : (uint16_t)0;
                }
        }
        flc_mv_wait_once(waited);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int win = w0 + FLC_MV_WARPS * u;
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
                b[u][nt] = flc_mv_xpiece<NT, NORM>(xs, nt, win, nwin, t);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
#pragma unroll
            for (int q = 0; q < NW; q++) {
                float tmp[NT][4];
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        tmp[nt][i] = 0.f;
#pragma unroll
                for (int s = 0; s < 2; s++) {
                    /* word s of each row: quants k = 8t + 4s .. 8t + 4s + 3 */
                    const unsigned v0 = s ? a[u][q][0].y : a[u][q][0].x;
                    const unsigned v1 = s ? a[u][q][1].y : a[u][q][1].x;
                    float e0[4], e1[4];
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        e0[i] = (float)(signed char)(v0 >> (8 * i));
                        e1[i] = (float)(signed char)(v1 >> (8 * i));
                    }
                    const unsigned af[4] = {flc_mv_pack_int(e0[0], e0[1]),
                                            flc_mv_pack_int(e1[0], e1[1]),
                                            flc_mv_pack_int(e0[2], e0[3]),
                                            flc_mv_pack_int(e1[2], e1[3])};
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) {
                        const unsigned bw[4] = {b[u][nt].x, b[u][nt].y, b[u][nt].z, b[u][nt].w};
                        const unsigned bf[2] = {bw[2 * s], bw[2 * s + 1]};
                        flc_mma_bf16(tmp[nt], af, bf);
                    }
                }
                const float s0 = flc_h2f(sc[u][q][0]), s1 = flc_h2f(sc[u][q][1]);
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    d[q][nt][0] = fmaf(s0, tmp[nt][0], d[q][nt][0]);
                    d[q][nt][1] = fmaf(s0, tmp[nt][1], d[q][nt][1]);
                    d[q][nt][2] = fmaf(s1, tmp[nt][2], d[q][nt][2]);
                    d[q][nt][3] = fmaf(s1, tmp[nt][3], d[q][nt][3]);
                }
            }
        }
    }
    flc_mv_wait_once(waited);
    flc_mv_finish<MODE, NW, NT>(d, red, y, yh, ldy, m, n, j0, j1, lane, wp);
}

/* The dense projections: block b has columns 16b .. 16b + 15 of all m <= 8 NT rows. */
template <int MODE, int NT, bool NORM>
__global__ void __launch_bounds__(32 * FLC_MV_WARPS)
k_mv_tc(float *y, flc_bf16 *yh, int ldy, const flc_bf16 *__restrict__ x, int ldx, int m,
        const flc_bf16 *__restrict__ w, int n, int k, flc_norm_in nz)
{
    __shared__ __align__(16) float red[FLC_MV_RED(MODE == FLC_MM_SWIGLU ? 2 : 1, NT)];
    bool waited = false;
    flc_mv_block<MODE, NT, true, NORM>(red, y, yh, ldy, x, ldx, m, w, n, k, blockIdx.x, waited,
                                       nz);
}

template <int MODE, int NT, bool NORM>
__global__ void __launch_bounds__(32 * FLC_MV_WARPS)
k_mv_tc_q8(float *y, flc_bf16 *yh, int ldy, const flc_bf16 *__restrict__ x, int ldx, int m,
           const int8_t *__restrict__ wq, const uint16_t *__restrict__ wd, int n, int k,
           flc_norm_in nz)
{
    __shared__ __align__(16) float red[FLC_MV_RED(MODE == FLC_MM_SWIGLU ? 2 : 1, NT)];
    bool waited = false;
    flc_mv_block_q8<MODE, NT, true, NORM>(red, y, yh, ldy, x, ldx, m, wq, wd, n, k, blockIdx.x,
                                          waited, nz);
}

/* The experts' projections of a mixture-of-experts layer (FL_CUDA_MOE=1 with FL_CUDA_MV=tc):
 * block (cb, e) has columns 16 cb .. 16 cb + 15 of expert e for its rows [eoff[e],
 * eoff[e + 1]) of x (grouped by expert, flc_moe_assign), 32 at a time; y's rows are x's. An
 * expert without rows returns at once, so the launch is the same whatever the routing (a
 * graph replays it). The weights are streamed when the expert has at most 32 rows (read
 * once), else kept in L2 for its next 32. */
template <int MODE, int NT, bool Q8, bool STREAM>
__device__ __forceinline__ void flc_moe_mv_rows(float *red, float *y, flc_bf16 *yh, int ldy,
                                                const flc_bf16 *x, int ldx, int m,
                                                const flc_emat &wm, int n, int k, bool &waited)
{
    const flc_norm_in none = {nullptr, nullptr, nullptr, 0.f};
    if (Q8)
        flc_mv_block_q8<MODE, NT, STREAM, false>(red, y, yh, ldy, x, ldx, m, wm.q, wm.d, n, k,
                                                 blockIdx.x, waited, none);
    else
        flc_mv_block<MODE, NT, STREAM, false>(red, y, yh, ldy, x, ldx, m, wm.w, n, k,
                                              blockIdx.x, waited, none);
}

template <int MODE, bool Q8, bool STREAM>
__device__ __forceinline__ void flc_moe_mv_any(float *red, float *y, flc_bf16 *yh, int ldy,
                                               const flc_bf16 *x, int ldx, int m,
                                               const flc_emat &wm, int n, int k, bool &waited)
{
    if (m <= 8)
        flc_moe_mv_rows<MODE, 1, Q8, STREAM>(red, y, yh, ldy, x, ldx, m, wm, n, k, waited);
    else if (m <= 16)
        flc_moe_mv_rows<MODE, 2, Q8, STREAM>(red, y, yh, ldy, x, ldx, m, wm, n, k, waited);
    else
        flc_moe_mv_rows<MODE, 4, Q8, STREAM>(red, y, yh, ldy, x, ldx, m, wm, n, k, waited);
}

template <int MODE, bool Q8>
__global__ void __launch_bounds__(32 * FLC_MV_WARPS)
k_moe_mv_tc(float *y, flc_bf16 *yh, int ldy, const flc_bf16 *__restrict__ x, int ldx,
            const flc_emat *mats, const int32_t *eoff, int n, int k)
{
    __shared__ __align__(16) float red[FLC_MV_RED(MODE == FLC_MM_SWIGLU ? 2 : 1, 4)];
    flc_pdl_wait(); /* eoff, and then x, are the kernels' before */
    flc_pdl_trigger();
    const int e = blockIdx.y, a0 = eoff[e], me = eoff[e + 1] - a0;
    if (me <= 0)
        return; /* the whole block: me is the block's */
    const flc_emat wm = mats[e];
    bool waited = true;
    for (int r0 = 0; r0 < me; r0 += 32) {
        const int mm = me - r0 < 32 ? me - r0 : 32;
        float *yy = y ? y + (size_t)(a0 + r0) * ldy : nullptr;
        flc_bf16 *yyh = yh ? yh + (size_t)(a0 + r0) * ldy : nullptr;
        const flc_bf16 *xx = x + (size_t)(a0 + r0) * ldx;
        if (me <= 32)
            flc_moe_mv_any<MODE, Q8, true>(red, yy, yyh, ldy, xx, ldx, mm, wm, n, k, waited);
        else
            flc_moe_mv_any<MODE, Q8, false>(red, yy, yyh, ldy, xx, ldx, mm, wm, n, k, waited);
    }
}

#endif
