/* mma.h of the emulated CUDA: the wmma subset cuda/cuda_kernels.cu uses (16x16x16, bf16 in,
 * f32 accumulate). Each lane holds the whole tile: a load reads all of it, mma_sync computes
 * all of it in fp32 in k order, a store writes all of it (every lane the same values). Loads
 * and stores are warp-wide as on a GPU: the warp's lanes meet before and after each (so every
 * lane has loaded before any lane stores over what it read, and a lane that skips one hangs
 * the warp, which cuda_emu.hh reports). The kernel still needs the block barriers a GPU
 * needs between warps. */
#ifndef FL_EMU_MMA_H
#define FL_EMU_MMA_H
#include "cuda_bf16.h"

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

/* a: M x K, b: K x N, accumulator: M x N, each row-major here */
template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
    static constexpr int rows = std::is_same<Use, matrix_b>::value ? K : M;
    static constexpr int cols = std::is_same<Use, matrix_a>::value ? K : N;
    static constexpr int num_elements = rows * cols;
    float x[rows * cols];
};

template <class T> static inline float emu_wmma_f(T v) { return (float)v; }
static inline float emu_wmma_f(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class Use, int M, int N, int K, class T, class Layout>
static inline void load_matrix_sync(fragment<Use, M, N, K, T, Layout> &f, const T *p, unsigned ld)
{
    typedef fragment<Use, M, N, K, T, Layout> F;
    const bool rowm = std::is_same<Layout, row_major>::value;
    __syncwarp();
    for (int r = 0; r < F::rows; r++)
        for (int c = 0; c < F::cols; c++)
            f.x[r * F::cols + c] = emu_wmma_f(rowm ? p[(size_t)r * ld + c] : p[(size_t)c * ld + r]);
    __syncwarp();
}
template <int M, int N, int K>
static inline void load_matrix_sync(fragment<accumulator, M, N, K, float> &f, const float *p,
                                    unsigned ld, layout_t l)
{
    __syncwarp();
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++)
            f.x[r * N + c] = l == mem_row_major ? p[(size_t)r * ld + c] : p[(size_t)c * ld + r];
    __syncwarp();
}
template <int M, int N, int K>
static inline void store_matrix_sync(float *p, const fragment<accumulator, M, N, K, float> &f,
                                     unsigned ld, layout_t l)
{
    __syncwarp();
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++)
            (l == mem_row_major ? p[(size_t)r * ld + c] : p[(size_t)c * ld + r]) = f.x[r * N + c];
    __syncwarp();
}
template <class U, int M, int N, int K, class T, class L>
static inline void fill_fragment(fragment<U, M, N, K, T, L> &f, float v)
{
    for (auto &e : f.x)
        e = v;
}
template <int M, int N, int K, class T, class LA, class LB>
static inline void mma_sync(fragment<accumulator, M, N, K, float> &d,
                            const fragment<matrix_a, M, N, K, T, LA> &a,
                            const fragment<matrix_b, M, N, K, T, LB> &b,
                            const fragment<accumulator, M, N, K, float> &c)
{
    float out[M * N];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float v = c.x[i * N + j];
            for (int k = 0; k < K; k++)
                v = fmaf(a.x[i * K + k], b.x[k * N + j], v);
            out[i * N + j] = v;
        }
    memcpy(d.x, out, sizeof out);
}
} // namespace wmma
} // namespace nvcuda
#endif
