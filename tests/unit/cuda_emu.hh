/* cuda_emu.hh: enough of CUDA's execution model to run a kernel's logic on the CPU, for
 * kernels written to need only what is here (cuda/attn_few.cuh). A block runs as one OS
 * thread per CUDA thread; __syncthreads and the warp shuffles are barriers. Blocks run one
 * after another, so `__shared__` (a function-local static here) is the running block's.
 *
 * What it checks: indexing, masking, the order of the sums, the synchronisation structure
 * (a __syncthreads some threads skip, or a shuffle a lane skips, hangs on a GPU; here the
 * barrier times out after 60 s and the test aborts with a message), the alignment of vector
 * loads (uint4, uint2, float4 are aligned as CUDA's; __ldg, __ldcg and __ldcs abort on a
 * misaligned one, UBSan flags a plain dereference), and, under ASan, every access to the
 * buffers. What it does not: the GPU's memory model beyond what the barriers
 * order, occupancy, registers, speed. Parity on a GPU (tests/gpu/gpu_parity.c) is still
 * the check of the real thing. */
#ifndef FL_CUDA_EMU_HH
#define FL_CUDA_EMU_HH

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <math.h>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
/* aligned as CUDA's: a misaligned vector load faults on a GPU, so here __ldg and its kin
 * abort on one (emu_aligned), and UBSan flags a plain dereference */
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d)
{
    return uint4{a, b, c, d};
}

/* bf16 as its bits; conversions as CUDA's (round to nearest even) */
struct emu_bf16 {
    uint16_t x;
};
static inline emu_bf16 __float2bfloat16_rn(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return emu_bf16{0x7fc0};
    u += 0x7fffu + ((u >> 16) & 1u);
    return emu_bf16{(uint16_t)(u >> 16)};
}
static inline float __bfloat162float(emu_bf16 b)
{
    uint32_t u = (uint32_t)b.x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline float __uint_as_float(unsigned u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline unsigned __float_as_uint(float f)
{
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
}

static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }

/* A barrier that aborts instead of hanging: the threads of a block that do not all reach
 * it are a bug that hangs a GPU. */
struct emu_barrier {
    std::atomic<int> count{0};
    std::atomic<unsigned> gen{0};
    int n = 0;
    emu_barrier() = default;
    emu_barrier(const emu_barrier &o) : n(o.n) {}
    /* the last to arrive starts the next generation; the others yield the CPU until it
     * does (a block's threads outnumber the cores: blocking costs more than yielding) */
    void wait(const char *what)
    {
        const unsigned g = gen.load(std::memory_order_acquire);
        if (count.fetch_add(1, std::memory_order_acq_rel) + 1 == n) {
            count.store(0, std::memory_order_relaxed);
            gen.store(g + 1, std::memory_order_release);
            return;
        }
        const auto t0 = std::chrono::steady_clock::now();
        for (unsigned i = 0; gen.load(std::memory_order_acquire) == g; i++) {
            std::this_thread::yield();
            if ((i & 0xffff) == 0xffff &&
                std::chrono::steady_clock::now() - t0 > std::chrono::seconds(60)) {
                fprintf(stderr, "cuda_emu: %s not reached by every thread in 60 s (%d of %d)\n",
                        what, count.load(), n);
                abort();
            }
        }
    }
};

struct emu_block {
    emu_barrier bar;  /* __syncthreads */
    emu_barrier done; /* the end of the block (a thread that returns early waits here) */
    std::vector<emu_barrier> warp_bar;
    std::vector<uint64_t> xbuf; /* one slot per thread, for the shuffles */
    std::vector<unsigned char> gbuf; /* EMU_GATHER_MAX bytes per thread, for emu_warp_gather */
};
#define EMU_GATHER_MAX 64

extern thread_local dim3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;
extern emu_block *emu_cur;
/* Run the blocks last first: a kernel whose result depends on the order its blocks run in
 * (one block overwriting another's output, a merge that depends on who finishes last) gives
 * a different result; tests compare the two orders. */
extern bool emu_reverse;

static inline void __syncthreads() { emu_cur->bar.wait("__syncthreads"); }
static inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }

static inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    (void)mask;
    emu_cur->warp_bar[threadIdx.x >> 5].wait("__syncwarp");
}

template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask)
{
    static_assert(sizeof(T) <= 8, "a shuffled value fits a slot");
    (void)mask;
    const unsigned t = threadIdx.x, lane = t & 31, w = t >> 5;
    memcpy(&emu_cur->xbuf[t], &v, sizeof v);
    emu_cur->warp_bar[w].wait("a warp shuffle");
    T r;
    memcpy(&r, &emu_cur->xbuf[(t & ~31u) | (lane ^ (unsigned)lane_mask)], sizeof r);
    emu_cur->warp_bar[w].wait("a warp shuffle");
    return r;
}

/* Every lane of the calling warp passes `bytes` (<= EMU_GATHER_MAX) and receives all 32
 * lanes' in lane order: how a warp-wide instruction (mma.sync) sees its operands. */
static inline void emu_warp_gather(const void *mine, size_t bytes, void *all)
{
    if (bytes > EMU_GATHER_MAX)
        abort();
    const unsigned t = threadIdx.x, w = t >> 5;
    memcpy(&emu_cur->gbuf[(size_t)t * EMU_GATHER_MAX], mine, bytes);
    emu_cur->warp_bar[w].wait("a warp-wide instruction");
    for (unsigned l = 0; l < 32; l++)
        memcpy((unsigned char *)all + l * bytes,
               &emu_cur->gbuf[(size_t)((t & ~31u) + l) * EMU_GATHER_MAX], bytes);
    emu_cur->warp_bar[w].wait("a warp-wide instruction");
}

static inline int atomicAdd(int *p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
template <class T> static inline const T *emu_aligned(const T *p, const char *what)
{
    if ((uintptr_t)p % alignof(T)) {
        fprintf(stderr, "cuda_emu: %s of %zu bytes from %p, not %zu-byte aligned (a GPU faults)\n",
                what, sizeof(T), (const void *)p, alignof(T));
        abort();
    }
    return p;
}
template <class T> static inline T __ldcg(const T *p) { return *emu_aligned(p, "__ldcg"); }
template <class T> static inline T __ldg(const T *p) { return *emu_aligned(p, "__ldg"); }
template <class T> static inline T __ldcs(const T *p) { return *emu_aligned(p, "__ldcs"); }

/* Runs f() as every thread of every block of the grid, blocks in order (x fastest; the
 * reverse with emu_reverse). The block size must be a multiple of 32. */
template <class F> static void emu_launch(dim3 grid, dim3 block, F f)
{
    if (block.x % 32 || block.y != 1 || block.z != 1) {
        fprintf(stderr, "cuda_emu: blocks of a multiple of 32 threads in x only\n");
        abort();
    }
    const int nt = (int)block.x;
    gridDim = grid;
    blockDim = block;
    emu_block b;
    b.bar.n = b.done.n = nt;
    b.warp_bar = std::vector<emu_barrier>((size_t)nt / 32);
    for (auto &wb : b.warp_bar)
        wb.n = 32;
    b.xbuf.assign((size_t)nt, 0);
    b.gbuf.assign((size_t)nt * EMU_GATHER_MAX, 0);
    emu_cur = &b;
    std::vector<std::thread> th;
    th.reserve((size_t)nt);
    for (int t = 0; t < nt; t++)
        th.emplace_back([&, t] {
            threadIdx = dim3((unsigned)t);
            const unsigned nb = grid.x * grid.y * grid.z;
            for (unsigned i = 0; i < nb; i++) {
                const unsigned bi = emu_reverse ? nb - 1 - i : i;
                blockIdx = dim3(bi % grid.x, bi / grid.x % grid.y, bi / (grid.x * grid.y));
                f();
                emu_cur->done.wait("the end of the block");
            }
        });
    for (auto &t : th)
        t.join();
    emu_cur = nullptr;
}

#define FL_CUDA_EMU_DEFINE                                                                     \
    thread_local dim3 threadIdx, blockIdx;                                                     \
    dim3 blockDim, gridDim;                                                                    \
    emu_block *emu_cur;                                                                        \
    bool emu_reverse;

#endif
