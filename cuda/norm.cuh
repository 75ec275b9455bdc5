/* norm.cuh: the RMSNorm's arithmetic and the block sums it uses, shared by k_rmsnorm
 * (cuda_kernels.cu) and the norm fused in front of the tensor-core streaming matmul
 * (mv_tc.cuh), so that both produce the same bits; included by cuda_kernels.cu and, on
 * machines without a GPU, by tests/unit/test_mv_tc_emu.cc through tests/unit/cuda_emu.hh.
 * Needs FULL (the full warp mask) and flc_bf16 from its includer.
 *
 * The norm of a row x of H floats with weights w: ss = the sum of x_i^2 in double, each
 * thread of a 256-thread block summing i = thread, thread + 256, ... in that order with a
 * fused multiply-add (what nvcc made of k_rmsnorm's `ss += (double)x * x`: fma.rn.f64), then
 * the block's 256 partial sums as flc_block_sum_d adds them; rs = (float)(1 / sqrt(ss / H +
 * eps)); out_i = bf16(w_i * (x_i * rs)), as engine/kernels.c's fl_rmsnorm computes it. */
#ifndef FL_NORM_CUH
#define FL_NORM_CUH

__device__ __forceinline__ double flc_warp_sum_d(double v)
{
    for (int o = 16; o; o >>= 1)
        v += __shfl_xor_sync(FULL, v, o);
    return v;
}

/* The sum of v over the block, returned to every thread (blockDim.x a multiple of 32, at
 * most 1024). sh: 32 doubles of shared memory. Deterministic order. */
static __device__ double flc_block_sum_d(double v, double *sh)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = flc_warp_sum_d(v);
    __syncthreads(); /* sh may still be read from a previous call */
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0;
    return flc_warp_sum_d(v);
}

/* This thread's part of a row's sum of squares: elements threadIdx.x, + blockDim.x, ... in
 * order (the loads of 8 in flight together; the sum keeps its order) */
__device__ __forceinline__ double flc_norm_part(const float *xr, int H)
{
    double ss = 0;
#pragma unroll 8
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
        const double v = xr[i];
        ss = fma(v, v, ss);
    }
    return ss;
}

__device__ __forceinline__ float flc_norm_scale(double ss, int H, float eps)
{
    return (float)(1.0 / sqrt(ss / H + (double)eps));
}

/* one normed element, before its rounding to bf16 */
__device__ __forceinline__ float flc_norm_val(float w, float x, float rs) { return w * (x * rs); }

/* k_rmsnorm's block (blockDim.x 256): row r = blockIdx.x of out (bf16, H apart) = the norm
 * of row gather[r] (gather NULL: r) of x. sh: 32 doubles of shared memory. */
__device__ __forceinline__ void flc_rmsnorm_block(flc_bf16 *out, const float *x, const float *w,
                                                  const int32_t *gather, int H, float eps,
                                                  double *sh)
{
    const int r = blockIdx.x, src = gather ? gather[r] : r;
    const float *xr = x + (size_t)src * H;
    const float rs = flc_norm_scale(flc_block_sum_d(flc_norm_part(xr, H), sh), H, eps);
#pragma unroll 8
    for (int i = threadIdx.x; i < H; i += blockDim.x)
        out[(size_t)r * H + i] = __float2bfloat16_rn(flc_norm_val(w[i], xr[i], rs));
}

#endif
