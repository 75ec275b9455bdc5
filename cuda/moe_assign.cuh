/* moe_assign.cuh: a mixture-of-experts layer's assignments in expert order (flc_moe_assign),
 * included by cuda_kernels.cu and, on machines without a GPU, by
 * tests/unit/test_moe_assign_emu.cc through tests/unit/cuda_emu.hh.
 *
 * The A = T K assignments (rid: each one's expert, token-major) become: eoff (E + 2), the
 * first assignment of each expert in expert order (eoff[E] = eoff[E + 1] = A); atok (A), the
 * token of each place; apos (A), the place of each assignment. Within an expert the places
 * follow the assignments' order, so tokens ascend, as on the CPU.
 *
 * One block, a counting sort in chunks. The kernel this replaced gave each expert a thread
 * that read all A ids twice: 2 A steps a thread, some 16,000 for LLaDA2.0-mini at batch 32
 * of block 32 (A = 8,192; estimated at tens of microseconds a layer, not measured). Here A is cut
 * into C contiguous chunks (C a power of two, C E counts in shared memory): the chunks'
 * per-expert counts by shared atomics (any order: they are counts), then each expert's
 * chunk offsets and the experts' prefix, then one thread per chunk places its assignments in
 * order: A / C + A / threads + C + E steps a thread. */
#ifndef FL_MOE_ASSIGN_CUH
#define FL_MOE_ASSIGN_CUH

#define FLC_ASSIGN_COUNTS 8192 /* shared ints for the chunks' counts: C x E at most */

/* C: the largest power of two with C E <= FLC_ASSIGN_COUNTS and C <= threads. */
static inline int flc_assign_chunks(int E, int threads)
{
    int c = 1;
    while (c * 2 <= threads && (long)c * 2 * E <= FLC_ASSIGN_COUNTS)
        c *= 2;
    return c;
}

/* Shared ints the block needs: C E counts, E totals, E + 1 offsets. */
static inline size_t flc_assign_smem_ints(int E, int C)
{
    return (size_t)C * E + 2 * (size_t)E + 1;
}

/* The block's work; sm: flc_assign_smem_ints(E, C) ints of shared memory; C from
 * flc_assign_chunks(E, blockDim.x). An id outside [0, E) (the router makes none) is placed
 * nowhere and given apos 0, a row that exists, rather than a write out of bounds. */
__device__ __forceinline__ void flc_moe_assign_block(int32_t *sm, int32_t *eoff, int32_t *atok,
                                                     int32_t *apos, const int32_t *rid, int A,
                                                     int K, int E, int C)
{
    int32_t *cnt = sm, *tot = sm + (size_t)C * E, *pre = tot + E;
    const int nt = (int)blockDim.x, t = (int)threadIdx.x;
    const int per = (A + C - 1) / C; /* assignments a chunk */
    for (int i = t; i < C * E; i += nt)
        cnt[i] = 0;
    __syncthreads();
    /* counts: chunk c's nt / C threads stride over its assignments */
    {
        const int g = nt / C, c = t / g, r = t % g;
        if (c < C) {
            const int a1 = A < (c + 1) * per ? A : (c + 1) * per;
            for (int a = c * per + r; a < a1; a += g) {
                const int e = rid[a];
                if ((unsigned)e < (unsigned)E)
                    atomicAdd(&cnt[c * E + e], 1);
            }
        }
    }
    __syncthreads();
    /* per expert: the chunks' counts become the chunks' offsets within the expert */
    for (int e = t; e < E; e += nt) {
        int run = 0;
        for (int c = 0; c < C; c++) {
            const int v = cnt[c * E + e];
            cnt[c * E + e] = run;
            run += v;
        }
        tot[e] = run;
    }
    __syncthreads();
    /* the experts' prefix: each thread sums the totals before its expert (broadcast reads,
     * none waiting on another) */
    for (int e = t; e <= E; e += nt) {
        int s = 0;
        for (int j = 0; j < e; j++)
            s += tot[j];
        pre[e] = s;
        eoff[e] = s;
        if (e == E)
            eoff[E + 1] = s;
    }
    __syncthreads();
    /* placement: one thread a chunk, its assignments in order */
    if (t < C) {
        const int a1 = A < (t + 1) * per ? A : (t + 1) * per;
        for (int a = t * per; a < a1; a++) {
            const int e = rid[a];
            if ((unsigned)e >= (unsigned)E) {
                apos[a] = 0;
                continue;
            }
            const int at = pre[e] + cnt[t * E + e]++;
            atok[at] = a / K;
            apos[a] = at;
        }
    }
}

#endif
