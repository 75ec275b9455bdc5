/* cuda_emu.hh: enough of CUDA's execution model to run a kernel's logic on the CPU, for
 * kernels written to need only what is here (cuda/attn_few.cuh). A block runs as one fiber
 * per CUDA thread on the calling OS thread; __syncthreads and the warp shuffles are
 * barriers. Blocks run one after another, so `__shared__` (a function-local static here) is
 * the running block's.
 *
 * What it checks: indexing, masking, the order of the sums, the synchronisation structure
 * (a __syncthreads some threads skip, or a shuffle a lane skips, hangs on a GPU; here the
 * test aborts with a message as soon as no thread can go on), the alignment of vector
 * loads (uint4, uint2, float4 are aligned as CUDA's; __ldg, __ldcg and __ldcs abort on a
 * misaligned one, UBSan flags a plain dereference), and, under ASan, every access to the
 * buffers. What it does not: the GPU's memory model beyond what the barriers
 * order, occupancy, registers, speed. Parity on a GPU (tests/gpu/gpu_parity.c) is still
 * the check of the real thing. */
#ifndef FL_CUDA_EMU_HH
#define FL_CUDA_EMU_HH

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <math.h>
#include <sys/mman.h>
#include <type_traits>
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

/* The threads of a block are fibers on the calling OS thread (emu_swap, below): a block's
 * threads run one after another, each until it waits at a barrier or returns; then the next.
 * A thread waiting at a barrier yields until the barrier's last thread arrives. A whole pass
 * over the block in which no thread arrived anywhere, finished or got past a barrier means
 * some threads wait for others that never come: on a GPU a hang, here an abort with what was
 * waited for. The order of the pass is reversed with emu_reverse, so a read of another
 * thread's write that no barrier orders sees a different value in one of the two orders. */
struct emu_barrier {
    int count = 0;
    unsigned gen = 0;
    int n = 0;
    void wait(const char *what);
};
struct emu_block {
    emu_barrier bar;  /* __syncthreads */
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

/* mma.sync.m16n8k16 (bf16 in, f32 accumulate) emulated as the PTX ISA defines its fragments
 * ("Matrix Fragments for mma.m16n8k16 with floating point type"): the warp's 32 lanes'
 * registers are gathered, the 16x16 A, 16x8 B and 16x8 C rebuilt from them (lane = 4 groupID
 * + threadID_in_group; A register 0 holds row groupID, columns 2 tid, 2 tid + 1, low half
 * first; register 1 row groupID + 8; registers 2, 3 the same rows at columns + 8; B register
 * 0 rows 2 tid, 2 tid + 1 of column groupID, register 1 rows + 8; C/D elements 0, 1 row
 * groupID, columns 2 tid, 2 tid + 1, elements 2, 3 row groupID + 8), and each lane gets its D
 * elements. So a test checks a kernel's fragment bookkeeping against the documented layout,
 * not only its arithmetic. */
/* one bf16 of a 32-bit register: the low half is the lower index */
static inline float half_of(unsigned r, int hi)
{
    return __uint_as_float(hi ? (r & 0xffff0000u) : (r << 16));
}

static inline void emu_mma_bf16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2])
{
    struct frag {
        unsigned a[4], b[2];
        float c[4];
    } mine, all[32];
    memcpy(mine.a, a, sizeof mine.a);
    memcpy(mine.b, b, sizeof mine.b);
    memcpy(mine.c, d, sizeof mine.c);
    emu_warp_gather(&mine, sizeof mine, all);
    float A[16][16], B[16][8], C[16][8];
    for (int l = 0; l < 32; l++) {
        const int gid = l >> 2, tig = l & 3;
        for (int i = 0; i < 8; i++) { /* a0..a7 */
            const int row = (i & 2) ? gid + 8 : gid, col = tig * 2 + (i & 1) + (i >= 4 ? 8 : 0);
            A[row][col] = half_of(all[l].a[i >> 1], i & 1);
        }
        for (int i = 0; i < 4; i++) { /* b0..b3 */
            const int row = tig * 2 + (i & 1) + (i >= 2 ? 8 : 0);
            B[row][gid] = half_of(all[l].b[i >> 1], i & 1);
        }
        for (int i = 0; i < 4; i++) /* c0..c3 */
            C[i < 2 ? gid : gid + 8][tig * 2 + (i & 1)] = all[l].c[i];
    }
    const int lane = (int)(threadIdx.x & 31), gid = lane >> 2, tig = lane & 3;
    for (int i = 0; i < 4; i++) {
        const int row = i < 2 ? gid : gid + 8, col = tig * 2 + (i & 1);
        float v = C[row][col];
        for (int kk = 0; kk < 16; kk++)
            v = fmaf(A[row][kk], B[kk][col], v);
        d[i] = v;
    }
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

/* The fibers. emu_swap (x86-64 System V) saves the callee-saved registers on the running
 * stack, stores its stack pointer in *save and continues on `to` (a stack emu_swap left, or
 * one emu_fiber_init made). */
extern "C" void emu_swap(void **save, void *to);
#define EMU_STACK ((size_t)256 << 10) /* a CUDA thread's stack, with a guard page below */
#define EMU_THREADS_MAX 1024

struct emu_fiber {
    void *sp = nullptr;
    unsigned char *base = nullptr; /* the mapping, guard page first */
    bool done = false;
};
struct emu_sched_t {
    emu_fiber fib[EMU_THREADS_MAX];
    void *main_sp = nullptr;
    int cur = 0;
    void (*run)(void *) = nullptr;
    void *ctx = nullptr;
    unsigned long progress = 0; /* arrivals, barriers passed, threads finished */
    const char *waiting = "";
};
extern emu_sched_t emu_sched;

[[noreturn]] inline void emu_fiber_main()
{
    emu_sched.run(emu_sched.ctx);
    emu_fiber &f = emu_sched.fib[emu_sched.cur];
    f.done = true;
    emu_sched.progress++;
    emu_swap(&f.sp, emu_sched.main_sp);
    abort(); /* a finished fiber is never resumed */
}

inline void emu_fiber_init(emu_fiber &f)
{
    if (!f.base) {
        void *p = mmap(nullptr, EMU_STACK + 4096, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED || mprotect(p, 4096, PROT_NONE)) {
            fprintf(stderr, "cuda_emu: cannot map a thread's stack\n");
            abort();
        }
        f.base = (unsigned char *)p;
    }
    /* from the top: a zero return address for emu_fiber_main (which never returns), then
     * emu_swap's: its `ret` enters emu_fiber_main with the stack as a call leaves it; below
     * them the six registers emu_swap pops */
    /* each fiber's stack starts at its own offset from the mapping's top: tops EMU_STACK
     * apart would all fall into the same cache sets, and every switch would miss */
    const size_t idx = (size_t)(&f - emu_sched.fib),
                 color = (idx & 63) * 64 + ((idx >> 6) & 15) * (4096 + 64);
    void **sp = (void **)(((uintptr_t)(f.base + 4096 + EMU_STACK - color)) & ~(uintptr_t)15);
    *--sp = nullptr;
    *--sp = (void *)&emu_fiber_main;
    for (int i = 0; i < 6; i++)
        *--sp = nullptr;
    f.sp = sp;
    f.done = false;
}

inline void emu_barrier::wait(const char *what)
{
    const unsigned g = gen;
    emu_sched.progress++;
    if (++count == n) {
        count = 0;
        gen = g + 1;
        return;
    }
    while (gen == g) {
        emu_sched.waiting = what;
        emu_swap(&emu_sched.fib[emu_sched.cur].sp, emu_sched.main_sp);
    }
}

/* Runs f() as every thread of every block of the grid, blocks in order (x fastest; the
 * reverse with emu_reverse, which also reverses the order the threads of a block take
 * turns in). The block size must be a multiple of 32, at most 1024. Not reentrant: a
 * caller with several OS threads holds one lock around its launches. */
template <class F> static void emu_launch(dim3 grid, dim3 block, F f)
{
    if (block.x % 32 || block.x > EMU_THREADS_MAX || block.y != 1 || block.z != 1) {
        fprintf(stderr, "cuda_emu: blocks of a multiple of 32 threads (up to %d) in x only\n",
                EMU_THREADS_MAX);
        abort();
    }
    const int nt = (int)block.x;
    gridDim = grid;
    blockDim = block;
    emu_block b;
    b.bar.n = nt;
    b.warp_bar = std::vector<emu_barrier>((size_t)nt / 32);
    for (auto &wb : b.warp_bar)
        wb.n = 32;
    b.xbuf.assign((size_t)nt, 0);
    b.gbuf.assign((size_t)nt * EMU_GATHER_MAX, 0);
    emu_cur = &b;
    emu_sched.run = [](void *c) { (*(F *)c)(); };
    emu_sched.ctx = &f;
    const unsigned nb = grid.x * grid.y * grid.z;
    for (unsigned i = 0; i < nb; i++) {
        const unsigned bi = emu_reverse ? nb - 1 - i : i;
        blockIdx = dim3(bi % grid.x, bi / grid.x % grid.y, bi / (grid.x * grid.y));
        for (int t = 0; t < nt; t++)
            emu_fiber_init(emu_sched.fib[t]);
        for (int live = nt; live > 0;) {
            const unsigned long before = emu_sched.progress;
            for (int k = 0; k < nt; k++) {
                const int t = emu_reverse ? nt - 1 - k : k;
                emu_fiber &fb = emu_sched.fib[t];
                if (fb.done)
                    continue;
                emu_sched.cur = t;
                threadIdx = dim3((unsigned)t);
                emu_swap(&emu_sched.main_sp, fb.sp);
                live -= fb.done;
            }
            if (live > 0 && emu_sched.progress == before) {
                int at_bar = b.bar.count;
                fprintf(stderr, "cuda_emu: %s not reached by every thread of block (%u,%u,%u) "
                        "(%d of %d threads finished, %d at __syncthreads)\n", emu_sched.waiting,
                        blockIdx.x, blockIdx.y, blockIdx.z, nt - live, nt, at_bar);
                abort();
            }
        }
    }
    emu_cur = nullptr;
}

#define FL_CUDA_EMU_DEFINE                                                                     \
    thread_local dim3 threadIdx, blockIdx;                                                     \
    dim3 blockDim, gridDim;                                                                    \
    emu_block *emu_cur;                                                                        \
    bool emu_reverse;                                                                          \
    emu_sched_t emu_sched;                                                                     \
    __asm__(".pushsection .text\n.globl emu_swap\n.type emu_swap, @function\nemu_swap:\n"      \
            "pushq %rbp\npushq %rbx\npushq %r12\npushq %r13\npushq %r14\npushq %r15\n"           \
            "movq %rsp, (%rdi)\nmovq %rsi, %rsp\n"                                               \
            "popq %r15\npopq %r14\npopq %r13\npopq %r12\npopq %rbx\npopq %rbp\nret\n"             \
            ".size emu_swap, .-emu_swap\n.popsection\n");

#endif
