/* gemm_tc.cuh: our tensor-core GEMM for more rows than the streaming matmuls take, in two
 * forms: the dense q8 products (k_gemm_q8, FL_CUDA_Q8_GEMM=1), reading the int8 quants and
 * their scales directly, and the experts of a mixture-of-experts layer grouped by expert
 * (k_moe_gemm, FL_CUDA_MOE_GEMM=1), bf16 or q8. Included by cuda_kernels.cu after mv_tc.cuh,
 * and, on machines without a GPU, by tests/unit/test_gemm_tc_emu.cc through
 * tests/unit/cuda_emu.hh. Needs flc_meta.h (the block's size, FLC_GQ_BN x FLC_GQ_BM), from its
 * includer what mv_tc.cuh needs (flc_mma_bf16, flc_h2f, flc_pdl_wait/trigger, flc_emat) and
 * mv_tc.cuh itself (flc_mv_pack_int, flc_mv_wait_once), plus __ldcg, __threadfence, atomicAdd.
 *
 * Why, q8: above the streaming kernels' rows a q8 matrix was widened to bf16 into a scratch
 * copy for cuBLAS (k_dequant_q8): per weight one byte read, two written, two read again, where
 * the bf16 path reads two and q8 should read one. From a few sequences' blocks (33 rows) up to
 * a hundred or so rows the product is still bound by those bytes; above, by arithmetic, where
 * the copy is a pass of its own in front of every product.
 * Why, experts: k_moe_mv_tc takes an expert's rows 32 at a time with 16 output columns a
 * block, so every 16 columns read all of the expert's rows of x again: for a prefill's
 * thousands of rows (tens per expert) that is far more bytes of x than of weights. Here a
 * block has 64 columns (32 with SwiGLU's gate and up) and stages x in shared memory.
 *
 * Arithmetic: k_mv_tc_q8's (and the CPU's q8): per scale group of 32 k, the quants (widened to
 * bf16, exact) times x's bf16 summed on tensor cores into a zeroed fragment, then the row's
 * f16 scale times that sum added to the running one; bf16 weights the same with a scale of 1.
 * Each output is that sum over its groups in order, so it uses only its own row of x and
 * column of W: with the same split count (below) a row's result does not depend on the other
 * rows or where the row sits in a tile.
 *
 * Block: 64 weight rows x 64 rows of x, 4 warps as 2 x 2 (32 weight rows x 32 x rows each:
 * 2 m16 tiles x 4 n8 tiles). With SwiGLU the 64 weight rows are 32 gate rows and the same 32
 * up rows, arranged so that a warp's first m16 tile is 16 gate rows and its second the same
 * columns' up rows: a lane holds both of an output and writes silu(gate) * up itself. Stages
 * of 128 k (4 groups): the next stage's weights, x pieces and scales are loaded into registers
 * while the warps multiply the current one from shared memory, where q8 quants are stored
 * widened to bf16 (once per block, not once per warp). k is permuted inside a group exactly
 * as in mv_tc.cuh (lane t reads k 8t .. 8t + 7 of its rows; mma step s takes words 2s, 2s + 1)
 * for A and B alike, so every shared read is 16 contiguous bytes.
 *
 * Splits of k (dense q8 only): with few tiles (a product of 64 rows has n / 64 of them) the
 * GPU would idle, so the groups are split into S ranges (blockIdx.z; flc_gq_plan_for), each
 * block writes its partial tile, takes a ticket, and the block that takes the last one sums
 * the S partials in split order (not in the order they finished) and writes the tile (store,
 * or add to y), then resets the ticket for the next product (a graph replays the same
 * launch). S depends on the tile count, so on the row count, as cuBLAS's choice of algorithm
 * does. The experts' form needs no splits: its grid is (column tiles, experts). */
#ifndef FL_GEMM_TC_CUH
#define FL_GEMM_TC_CUH

#define FLC_GQ_G 4                 /* scale groups per stage */
#define FLC_GQ_BK (32 * FLC_GQ_G)  /* k per stage */
#define FLC_GQ_LD (FLC_GQ_BK + 32) /* halves per shared row: 16 words of padding, so the two
                                      rows a quarter warp reads use other banks */
#define FLC_GQ_THREADS 128
#define FLC_GQ_SPLITS_MAX 16
static_assert(FLC_GQ_BN == 64 && FLC_GQ_BM == 64 && FLC_GQ_THREADS == 128 && FLC_GQ_G == 4,
              "the loads' pieces per thread and the 2 x 2 warps of 32 x 32 assume these");

/* The launch of a dense q8 product: its tiles, the split count and the groups per split.
 * Blocks are (tiles_n, tiles_m, splits). With splits > 1 it needs splits * tiles partial
 * tiles and tiles tickets; the choice keeps splits * tiles <= 2 n_sm, so 2 n_sm of each
 * suffice. */
typedef struct flc_gq_plan {
    int tiles_n, tiles_m, splits, gps;
} flc_gq_plan;

static inline flc_gq_plan flc_gq_plan_for(int m, int n, int k, int n_sm)
{
    flc_gq_plan p;
    p.tiles_n = (n + FLC_GQ_BN - 1) / FLC_GQ_BN;
    p.tiles_m = (m + FLC_GQ_BM - 1) / FLC_GQ_BM;
    const long tiles = (long)p.tiles_n * p.tiles_m;
    const int nwin = k / 32;
    int s = 1; /* at least 2 stages a split: the register prefetch has something to hide */
    while (s * 2 <= FLC_GQ_SPLITS_MAX && tiles * s * 2 <= 2L * n_sm &&
           nwin / (s * 2) >= 2 * FLC_GQ_G)
        s *= 2;
    p.gps = (nwin + s - 1) / s;
    p.splits = (nwin + p.gps - 1) / p.gps; /* no empty split */
    return p;
}

/* Where the block's weights are: quants and scales (Q8), or bf16 rows; n output columns,
 * k; SwiGLU's up rows follow the n gate rows */
struct flc_gq_w {
    const int8_t *q;
    const uint16_t *d;
    const flc_bf16 *w;
};

/* A stage in registers: the weights' pieces (q8: 4 of 16 quants; bf16: 8 of 8 halves), 8
 * pieces of 8 halves of x, 2 scales */
template <bool Q8> struct flc_gq_regs {
    uint4 w[Q8 ? 4 : 8];
    uint4 x[8];
    uint16_t sc[2];
};

/* Shared weight row j (0..63) of the block whose first output column is c0: its column of
 * the output (not checked against n) and its row of W. With SwiGLU (32 columns a block):
 * rows 32 v .. 32 v + 15 are gate rows of columns c0 + 16 v .., rows 32 v + 16 .. their up
 * rows (n further on), so that warp v's two m16 tiles are one output's gate and up. */
template <bool SWI> __device__ __forceinline__ int flc_gq_col(int j, int c0)
{
    return SWI ? c0 + 16 * (j >> 5) + (j & 15) : c0 + j;
}
template <bool SWI> __device__ __forceinline__ size_t flc_gq_wrow(int j, int c0, int n)
{
    return (size_t)flc_gq_col<SWI>(j, c0) + (SWI && (j & 16) ? (size_t)n : 0);
}

/* The weights and scales of the stage at group g0 (ng groups): zeros past n and past the
 * stage's groups. q8: piece i of thread tid: c = tid + 128 i, row c / 8, 16 quants at k
 * 16 (c % 8); scale i: row c / 4, group c % 4. bf16: piece c: row c / 16, 8 halves at
 * k 8 (c % 16); no scales. */
template <bool Q8, bool SWI>
__device__ __forceinline__ void flc_gq_load_w(flc_gq_regs<Q8> &r, const flc_gq_w &wm, int n,
                                              int k, int c0, int g0, int ng, int tid)
{
    const uint4 zero = make_uint4(0, 0, 0, 0);
    const int nwin = k >> 5;
    if (Q8) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int c = tid + FLC_GQ_THREADS * i, j = c >> 3, kc = c & 7;
            const size_t row = flc_gq_wrow<SWI>(j, c0, n);
            r.w[i] = flc_gq_col<SWI>(j, c0) < n && kc < 2 * ng
                         ? __ldg(reinterpret_cast<const uint4 *>(wm.q + row * k + g0 * 32) + kc)
                         : zero;
        }
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int c = tid + FLC_GQ_THREADS * i, j = c >> 2, gi = c & 3;
            const size_t row = flc_gq_wrow<SWI>(j, c0, n);
            r.sc[i] = flc_gq_col<SWI>(j, c0) < n && gi < ng ? __ldg(wm.d + row * nwin + g0 + gi)
                                                            : (uint16_t)0;
        }
    } else {
#pragma unroll
        for (int i = 0; i < (Q8 ? 4 : 8); i++) {
            const int c = tid + FLC_GQ_THREADS * i, j = c >> 4, kc = c & 15;
            const size_t row = flc_gq_wrow<SWI>(j, c0, n);
            r.w[i] = flc_gq_col<SWI>(j, c0) < n && kc < 4 * ng
                         ? __ldg(reinterpret_cast<const uint4 *>(wm.w + row * k + g0 * 32) + kc)
                         : zero;
        }
    }
}

/* x's pieces of the same stage for rows r0 .. r0 + 63: piece i of thread tid: c = tid + 128 i,
 * row c / 16, 8 halves at k 8 (c % 16); zeros past m and past the stage's groups */
template <bool Q8>
__device__ __forceinline__ void flc_gq_load_x(flc_gq_regs<Q8> &r, const flc_bf16 *__restrict__ x,
                                              int ldx, int m, int r0, int g0, int ng, int tid)
{
    const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int c = tid + FLC_GQ_THREADS * i, row = r0 + (c >> 4), kc = c & 15;
        r.x[i] = row < m && kc < 4 * ng
                     ? __ldg(reinterpret_cast<const uint4 *>(x + (size_t)row * ldx + g0 * 32) + kc)
                     : zero;
    }
}

/* The stage from registers into shared memory: q8 quants widened to bf16 (exact) and scales
 * to float; bf16 weights as they are */
template <bool Q8>
__device__ __forceinline__ void flc_gq_store(const flc_gq_regs<Q8> &r, uint4 (*sw)[FLC_GQ_LD / 8],
                                             uint4 (*sx)[FLC_GQ_LD / 8],
                                             float (*ss)[FLC_GQ_G], int tid)
{
    if (Q8) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int c = tid + FLC_GQ_THREADS * i, j = c >> 3, kc = c & 7;
            const unsigned v[4] = {r.w[i].x, r.w[i].y, r.w[i].z, r.w[i].w};
            unsigned o[8];
#pragma unroll
            for (int h = 0; h < 8; h++) {
                const unsigned word = v[h >> 1], sh = 16 * (h & 1);
                o[h] = flc_mv_pack_int((float)(signed char)(word >> sh),
                                       (float)(signed char)(word >> (sh + 8)));
            }
            sw[j][2 * kc] = make_uint4(o[0], o[1], o[2], o[3]);
            sw[j][2 * kc + 1] = make_uint4(o[4], o[5], o[6], o[7]);
        }
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int c = tid + FLC_GQ_THREADS * i;
            ss[c >> 2][c & 3] = flc_h2f(r.sc[i]);
        }
    } else {
#pragma unroll
        for (int i = 0; i < (Q8 ? 4 : 8); i++) {
            const int c = tid + FLC_GQ_THREADS * i;
            sw[c >> 4][c & 15] = r.w[i];
        }
    }
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int c = tid + FLC_GQ_THREADS * i;
        sx[c >> 4][c & 15] = r.x[i];
    }
}

/* This thread's place in the block: its lane's group g and place t in it (the fragments'
 * groupID and threadID_in_group), its warp's first weight row cw and x row rw */
struct flc_gq_at {
    int tid, g, t, cw, rw;
};
__device__ __forceinline__ flc_gq_at flc_gq_here()
{
    const int tid = threadIdx.x, lane = tid & 31, wp = tid >> 5;
    return flc_gq_at{tid, lane >> 2, lane & 3, 32 * (wp & 1), 32 * (wp >> 1)};
}

__device__ __forceinline__ void flc_gq_zero(float (&d)[2][4][4])
{
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                d[i][j][e] = 0.f;
}

/* A warp's product of one stage's ng groups: rows cw .. cw + 31 of the shared weights
 * (2 m16 tiles) by rows rw .. rw + 31 of the shared x (4 n8 tiles); per group the sum of
 * w x x into a zeroed fragment, then the scale (q8) or 1 times it into d */
template <bool Q8>
__device__ __forceinline__ void flc_gq_mma(float (&d)[2][4][4], uint4 (*sw)[FLC_GQ_LD / 8],
                                           uint4 (*sx)[FLC_GQ_LD / 8], float (*ss)[FLC_GQ_G],
                                           int ng, int cw, int rw, int g, int t)
{
    for (int gi = 0; gi < ng; gi++) {
        const int kk = 4 * gi + t; /* the 16 bytes at k 32 gi + 8t */
        uint4 a[2][2], b[4];
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int h = 0; h < 2; h++)
                a[i][h] = sw[cw + 16 * i + 8 * h + g][kk];
#pragma unroll
        for (int j = 0; j < 4; j++)
            b[j] = sx[rw + 8 * j + g][kk];
        float tmp[2][4][4];
        flc_gq_zero(tmp);
#pragma unroll
        for (int s = 0; s < 2; s++)
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const unsigned a0[4] = {a[i][0].x, a[i][0].y, a[i][0].z, a[i][0].w};
                const unsigned a1[4] = {a[i][1].x, a[i][1].y, a[i][1].z, a[i][1].w};
                const unsigned af[4] = {a0[2 * s], a1[2 * s], a0[2 * s + 1], a1[2 * s + 1]};
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const unsigned bw[4] = {b[j].x, b[j].y, b[j].z, b[j].w};
                    const unsigned bf[2] = {bw[2 * s], bw[2 * s + 1]};
                    flc_mma_bf16(tmp[i][j], af, bf);
                }
            }
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const float s0 = Q8 ? ss[cw + 16 * i + g][gi] : 1.0f;
            const float s1 = Q8 ? ss[cw + 16 * i + 8 + g][gi] : 1.0f;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                d[i][j][0] = fmaf(s0, tmp[i][j][0], d[i][j][0]);
                d[i][j][1] = fmaf(s0, tmp[i][j][1], d[i][j][1]);
                d[i][j][2] = fmaf(s1, tmp[i][j][2], d[i][j][2]);
                d[i][j][3] = fmaf(s1, tmp[i][j][3], d[i][j][3]);
            }
        }
    }
}

/* The shared memory of a block */
struct flc_gq_smem {
    uint4 w[FLC_GQ_BN][FLC_GQ_LD / 8]; /* bf16 pairs: rows of LD halves */
    uint4 x[FLC_GQ_BM][FLC_GQ_LD / 8];
    float s[FLC_GQ_BN][FLC_GQ_G];
};

/* One tile's sum over groups [gbeg, gend) into d (zeroed here): the block's weight rows from
 * c0 (flc_gq_col) times rows r0 .. r0 + 63 of x. Every thread of the block calls it; it may be
 * called again (its first barrier keeps the shared memory's readers before its next writers).
 * waited: whether this thread has passed flc_pdl_wait (the weights are loaded before it). */
template <bool Q8, bool SWI>
__device__ __forceinline__ void flc_gq_tile(float (&d)[2][4][4], flc_gq_smem &sm,
                                            const flc_gq_w &wm, const flc_bf16 *__restrict__ x,
                                            int ldx, int m, int n, int k, int c0, int r0,
                                            int gbeg, int gend, bool &waited)
{
    const flc_gq_at at = flc_gq_here();
    const int tid = at.tid;
    flc_gq_zero(d);
    flc_gq_regs<Q8> r;
    int ng = gend - gbeg < FLC_GQ_G ? gend - gbeg : FLC_GQ_G;
    flc_gq_load_w<Q8, SWI>(r, wm, n, k, c0, gbeg, ng, tid);
    flc_mv_wait_once(waited); /* the weights are on their way; x is the kernel before's */
    flc_gq_load_x<Q8>(r, x, ldx, m, r0, gbeg, ng, tid);
    for (int g0 = gbeg; g0 < gend; g0 += FLC_GQ_G) {
        ng = gend - g0 < FLC_GQ_G ? gend - g0 : FLC_GQ_G;
        __syncthreads(); /* the stage before is multiplied: its shared memory is free */
        flc_gq_store<Q8>(r, sm.w, sm.x, sm.s, tid);
        __syncthreads();
        const int g1 = g0 + FLC_GQ_G;
        if (g1 < gend) { /* the next stage into registers while this one is multiplied */
            const int ng1 = gend - g1 < FLC_GQ_G ? gend - g1 : FLC_GQ_G;
            flc_gq_load_w<Q8, SWI>(r, wm, n, k, c0, g1, ng1, tid);
            flc_gq_load_x<Q8>(r, x, ldx, m, r0, g1, ng1, tid);
        }
        flc_gq_mma<Q8>(d, sm.w, sm.x, sm.s, ng, at.cw, at.rw, at.g, at.t);
    }
}

/* Writes a tile from the lanes' fragments: element e of fragment (i, j) is weight row
 * cw + 16 i + g (+ 8 for e >= 2) and x row rw + 8 j + 2t + (e & 1). Store or add to y (f32),
 * or, with SwiGLU, fragment i = 0 is the gate and i = 1 the up of the same output: yh (bf16)
 * = silu(gate) * up. */
template <int MODE>
__device__ __forceinline__ void flc_gq_write(const float (&d)[2][4][4], float *y, flc_bf16 *yh,
                                             int ldy, int m, int n, int c0, int r0)
{
    const flc_gq_at at = flc_gq_here();
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int jw = at.cw + 16 * i + at.g + (e >= 2 ? 8 : 0); /* shared weight row */
                const int col = MODE == FLC_MM_SWIGLU ? flc_gq_col<true>(jw, c0) : c0 + jw;
                const int row = r0 + at.rw + 8 * j + 2 * at.t + (e & 1);
                if (row >= m || col >= n || (MODE == FLC_MM_SWIGLU && i == 1))
                    continue;
                if (MODE == FLC_MM_SWIGLU) {
                    const float gt = d[0][j][e], up = d[1][j][e];
                    yh[(size_t)row * ldy + col] = __float2bfloat16_rn(gt / (1.0f + expf(-gt)) * up);
                } else if (MODE == FLC_MM_ACC) {
                    y[(size_t)row * ldy + col] += d[i][j][e];
                } else {
                    y[(size_t)row * ldy + col] = d[i][j][e];
                }
            }
}

/* Y (m, n) = (or +=, MODE) X (m, k) W^T with W q8 (quants (n, k), scales (n, k / 32) f16).
 * Grid (tiles_n, tiles_m, splits) of flc_gq_plan_for; gps groups per split. part/ticket: the
 * partial tiles and tickets (zero between products) when splits > 1, else unused. k % 32 == 0,
 * ldx % 8 == 0, x and wq 16-byte aligned. */
template <int MODE>
__global__ void __launch_bounds__(FLC_GQ_THREADS)
k_gemm_q8(float *y, int ldy, const flc_bf16 *__restrict__ x, int ldx, int m,
          const int8_t *__restrict__ wq, const uint16_t *__restrict__ wd, int n, int k, int gps,
          float *part, int *ticket)
{
    __shared__ __align__(16) flc_gq_smem sm;
    __shared__ int last_s;
    const flc_gq_at at = flc_gq_here();
    const int tid = at.tid;
    const int c0 = blockIdx.x * FLC_GQ_BN, r0 = blockIdx.y * FLC_GQ_BM;
    const int S = gridDim.z, sp = blockIdx.z, nwin = k >> 5;
    const int gbeg = sp * gps, gend = gbeg + gps < nwin ? gbeg + gps : nwin;
    const flc_gq_w wm = {wq, wd, nullptr};
    bool waited = false;
    float d[2][4][4];
    flc_gq_tile<true, false>(d, sm, wm, x, ldx, m, n, k, c0, r0, gbeg, gend, waited);
    if (S == 1) {
        flc_gq_write<MODE>(d, y, nullptr, ldy, m, n, c0, r0);
        return;
    }
    const size_t tile = (size_t)blockIdx.y * gridDim.x + blockIdx.x;
    float *mine = part + (tile * S + sp) * FLC_GQ_TILE; /* (x row, weight row) of the tile */
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                mine[(at.rw + 8 * j + 2 * at.t + (e & 1)) * FLC_GQ_BN + at.cw + 16 * i + at.g +
                     (e >= 2 ? 8 : 0)] = d[i][j][e];
    __threadfence(); /* this block's partial before its ticket */
    __syncthreads();
    if (tid == 0)
        last_s = atomicAdd(ticket + tile, 1) == S - 1;
    __syncthreads();
    if (!last_s)
        return;
    __threadfence();
    const float *all = part + tile * S * FLC_GQ_TILE;
    for (int idx = tid; idx < FLC_GQ_TILE; idx += FLC_GQ_THREADS) {
        const int row = r0 + idx / FLC_GQ_BN, col = c0 + idx % FLC_GQ_BN;
        if (row >= m || col >= n)
            continue;
        float v = __ldcg(all + idx); /* through L2, where the other blocks' partials are */
        for (int s = 1; s < S; s++)
            v += __ldcg(all + (size_t)s * FLC_GQ_TILE + idx);
        if (MODE == FLC_MM_ACC)
            y[(size_t)row * ldy + col] += v;
        else
            y[(size_t)row * ldy + col] = v;
    }
    if (tid == 0)
        ticket[tile] = 0; /* every split has taken its ticket: ready for the next product */
}

/* The experts' products of a mixture-of-experts layer, grouped by expert (FL_CUDA_MOE_GEMM=1):
 * block (cb, e) has output columns 64 cb .. (32 cb .. with SwiGLU: gate and up) of expert e
 * for its rows [eoff[e], eoff[e + 1]) of x (grouped by expert, flc_moe_assign), 64 at a time;
 * y's rows are x's. Store (f32 y) or SwiGLU (bf16 yh; mats' matrices (2n, k), gate rows then
 * up rows). An expert without rows returns at once, so the launch is the same whatever the
 * routing (a graph replays it). Every thread waits first (programmatic launch): eoff and x
 * are the kernels' before. */
template <int MODE, bool Q8>
__global__ void __launch_bounds__(FLC_GQ_THREADS)
k_moe_gemm(float *y, flc_bf16 *yh, int ldy, const flc_bf16 *__restrict__ x, int ldx,
           const flc_emat *mats, const int32_t *eoff, int n, int k)
{
    __shared__ __align__(16) flc_gq_smem sm;
    constexpr bool SWI = MODE == FLC_MM_SWIGLU;
    flc_pdl_wait();
    flc_pdl_trigger();
    const int e = blockIdx.y, a0 = eoff[e], me = eoff[e + 1] - a0;
    if (me <= 0)
        return; /* the whole block: me is the block's */
    const flc_emat em = mats[e];
    const flc_gq_w wm = {em.q, em.d, em.w};
    const int c0 = blockIdx.x * (SWI ? FLC_GQ_BN / 2 : FLC_GQ_BN);
    bool waited = true;
    float d[2][4][4];
    for (int r0 = 0; r0 < me; r0 += FLC_GQ_BM) {
        flc_gq_tile<Q8, SWI>(d, sm, wm, x + (size_t)a0 * ldx, ldx, me, n, k, c0, r0, 0, k >> 5,
                             waited);
        flc_gq_write<MODE>(d, y ? y + (size_t)a0 * ldy : nullptr,
                           yh ? yh + (size_t)a0 * ldy : nullptr, ldy, me, n, c0, r0);
    }
}

#endif
