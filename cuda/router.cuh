/* router.cuh: a mixture-of-experts layer's router logits (flc_router), included by
 * cuda_kernels.cu and, on machines without a GPU, by tests/unit/test_router_emu.cc through
 * tests/unit/cuda_emu.hh. Needs norm.cuh (flc_norm_part, flc_norm_scale, flc_norm_val,
 * flc_block_sum_d) and FULL from its includer.
 *
 * Logits (T, E) of each token's RMSNorm in f32 (the CPU's router input, not the bf16 rows the
 * projections read) times the f32 router (E, H). A block takes RT tokens (1, 2 or 4, as many
 * normed rows as 48 KB of shared memory hold) and a range of the experts (blockIdx.y): each
 * router row a warp reads serves RT tokens, where one block per token read the whole router
 * (2 MiB for LLaDA2.0-mini) again for every token of a prefill; and at decode the experts are
 * spread over more blocks than there are tokens. Per token and expert the sum is one warp's,
 * lane i taking k = i, i + 32, ... in order, then the butterfly, whatever RT and the expert
 * ranges are: the logits have the same bits for any T (and as the kernel of one token per
 * block this replaces computed them). The norm is k_rmsnorm's arithmetic (norm.cuh) before
 * its rounding to bf16. */
#ifndef FL_ROUTER_CUH
#define FL_ROUTER_CUH

#define FLC_ROUTER_RT_MAX 4

/* xn: RT H floats of shared memory; sh: 32 doubles of shared memory. Grid (ceil(T / RT),
 * expert ranges), 256 threads. */
template <int RT>
__device__ __forceinline__ void flc_router_block(float *xn, double *sh, float *lg,
                                                 const float *x, const float *nw, const float *R,
                                                 int T, int H, int E, float eps)
{
    const int t0 = blockIdx.x * RT, nt = T - t0 < RT ? T - t0 : RT;
    const int epb = (E + (int)gridDim.y - 1) / (int)gridDim.y, e0 = blockIdx.y * epb;
    const int e1 = e0 + epb < E ? e0 + epb : E;
    for (int q = 0; q < nt; q++) { /* nt is the block's: every thread takes the block sums */
        const float *xr = x + (size_t)(t0 + q) * H;
        const float rs = flc_norm_scale(flc_block_sum_d(flc_norm_part(xr, H), sh), H, eps);
        for (int i = threadIdx.x; i < H; i += blockDim.x)
            xn[(size_t)q * H + i] = flc_norm_val(nw[i], xr[i], rs);
    }
    __syncthreads();
    const int lane = threadIdx.x & 31, nwarp = blockDim.x >> 5;
    for (int e = e0 + (threadIdx.x >> 5); e < e1; e += nwarp) {
        const float *re = R + (size_t)e * H;
        float acc[RT];
#pragma unroll
        for (int q = 0; q < RT; q++)
            acc[q] = 0.f;
        for (int i = lane; i < H; i += 32) {
            const float w = re[i];
#pragma unroll
            for (int q = 0; q < RT; q++)
                if (q < nt)
                    acc[q] = fmaf(xn[(size_t)q * H + i], w, acc[q]);
        }
#pragma unroll
        for (int q = 0; q < RT; q++)
            for (int o = 16; o; o >>= 1)
                acc[q] += __shfl_xor_sync(FULL, acc[q], o);
        if (lane == 0)
#pragma unroll
            for (int q = 0; q < RT; q++)
                if (q < nt)
                    lg[(size_t)(t0 + q) * E + e] = acc[q];
    }
}

/* The launch: RT tokens a block (at most FLC_ROUTER_RT_MAX and T, RT H floats within
 * smem_max bytes) and as many expert ranges as make about two blocks per SM, each range at
 * least 8 experts (a warp's each); rt 0 when not even one row fits. */
typedef struct flc_router_plan {
    int rt, tblocks, eblocks;
} flc_router_plan;

static inline flc_router_plan flc_router_plan_for(int T, int H, int E, int n_sm, size_t smem_max)
{
    flc_router_plan p = {1, 0, 1};
    while (p.rt * 2 <= FLC_ROUTER_RT_MAX && p.rt * 2 <= T &&
           (size_t)p.rt * 2 * H * sizeof(float) <= smem_max)
        p.rt *= 2;
    if ((size_t)H * sizeof(float) > smem_max) {
        p.rt = 0;
        return p;
    }
    p.tblocks = (T + p.rt - 1) / p.rt;
    const int most = (E + 7) / 8;
    p.eblocks = (2 * n_sm + p.tblocks - 1) / p.tblocks;
    p.eblocks = p.eblocks < 1 ? 1 : p.eblocks > most ? most : p.eblocks;
    return p;
}

#endif
