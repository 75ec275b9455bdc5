/* route.cuh: a mixture-of-experts layer's routing, each token's top_k experts and weights from
 * its router logits, as engine/moe.c fl_moe_route computes them (the same steps in the same
 * order); included by cuda_kernels.cu and, on machines without a GPU, by
 * tests/unit/test_route_emu.cc through tests/unit/cuda_emu.hh, which compares it with
 * fl_moe_route itself. Needs FULL from its includer.
 *
 * A block per token. The scores by all threads; each group's two best by a thread of its
 * own; the kept groups, the sums and the weights by thread 0; the top_k by warp 0, each pick
 * a warp-wide search under the order fl_best's scan follows (flc_before), so the same expert
 * as that scan. Until 2026-12-06 thread 0 did every selection alone: top_k x E steps (2,048
 * for LLaDA2's 8 of 256) where the warp takes top_k x (E / 32 + 5). The device's expf may
 * differ from glibc's in the last bit, so a near tie can go the other way on a GPU. */
#ifndef FL_ROUTE_CUH
#define FL_ROUTE_CUH

/* engine/moe.c's fl_best, by one thread: the first ok index of the largest number, NaN only
 * where nothing else is ok; -1 when nothing is */
__device__ __forceinline__ int flc_best(const float *v, const float *ok, int n)
{
    int b = -1;
    for (int i = 0; i < n; i++)
        if (ok[i] != 0 && (b < 0 || v[i] > v[b] || (v[b] != v[b] && v[i] == v[i])))
            b = i;
    return b;
}

/* Whether candidate (va, ia) comes before (vb, ib) in fl_best's choice: no candidate (index
 * -1) never does; a number before NaN; the larger number; at equal numbers, or both NaN, the
 * lower index. A strict total order on distinct indices, whose first element is what
 * fl_best's scan picks, so a search in any grouping finds the same. */
__device__ __forceinline__ bool flc_before(float va, int ia, float vb, int ib)
{
    if (ia < 0)
        return false;
    if (ib < 0)
        return true;
    const bool na = va == va, nb = vb == vb;
    if (na != nb)
        return na;
    if (na && va != vb)
        return va > vb;
    return ia < ib;
}

/* fl_best by the 32 lanes of a warp (every lane calls it and gets the index). */
__device__ __forceinline__ int flc_best_warp(const float *v, const float *ok, int n)
{
    float bv = 0.f;
    int bi = -1;
    for (int i = (int)(threadIdx.x & 31); i < n; i += 32)
        if (ok[i] != 0 && flc_before(v[i], i, bv, bi)) {
            bv = v[i];
            bi = i;
        }
    for (int o = 16; o; o >>= 1) {
        const float ov = __shfl_xor_sync(FULL, bv, o);
        const int oi = __shfl_xor_sync(FULL, bi, o);
        if (flc_before(ov, oi, bv, bi)) {
            bv = ov;
            bi = oi;
        }
    }
    return bi;
}

/* engine/moe.c's fl_take by a warp: the top K of score among ok (cleared as taken), ids best
 * first and w their wt, written by lane 0; every lane returns the sum in fl_take's order. A
 * pick with nothing left (a configuration the loader refuses) takes expert 0 at weight 0. */
__device__ __forceinline__ float flc_take_warp(int K, int E, const float *score, float *ok,
                                               const float *wt, int32_t *ids, float *w)
{
    const bool lead = (threadIdx.x & 31) == 0;
    float tot = 0;
    for (int k = 0; k < K; k++) {
        const int b = flc_best_warp(score, ok, E);
        const float wb = b >= 0 ? wt[b] : 0.f;
        __syncwarp(); /* every lane has read ok before it changes */
        if (lead) {
            if (b >= 0)
                ok[b] = 0;
            ids[k] = b >= 0 ? b : 0;
            w[k] = wb;
        }
        tot += wb;
        __syncwarp(); /* the change is seen by the next search */
    }
    return tot;
}

/* Token blockIdx.x's routing. sm: 3 E + 2 G floats of shared memory, red: 2 floats of shared
 * memory; any block size of whole warps with at least r.G threads. */
__device__ __forceinline__ void flc_route_block(float *sm, float *red, int32_t *rid, float *rw,
                                                const float *lg, const float *bias, flc_route r)
{
    const int E = r.E, K = r.K, t = blockIdx.x;
    float *score = sm, *sel = sm + E, *ok = sm + 2 * E, *gs = sm + 3 * E, *gok = gs + r.G;
    const float *l = lg + (size_t)t * E;
    int32_t *ids = rid + (size_t)t * K;
    float *w = rw + (size_t)t * K;
    if (r.softmax) {
        if (threadIdx.x == 0) {
            float mx = l[0];
            for (int i = 1; i < E; i++)
                mx = l[i] > mx ? l[i] : mx;
            red[0] = mx;
        }
        __syncthreads();
        for (int i = threadIdx.x; i < E; i += blockDim.x)
            score[i] = expf(l[i] - red[0]);
        __syncthreads();
        if (threadIdx.x == 0) {
            float sum = 0;
            for (int i = 0; i < E; i++)
                sum += score[i];
            red[1] = sum;
        }
        __syncthreads();
        for (int i = threadIdx.x; i < E; i += blockDim.x) {
            score[i] /= red[1];
            ok[i] = 1;
        }
        __syncthreads();
        if (threadIdx.x < 32) {
            const float tot = flc_take_warp(K, E, score, ok, score, ids, w);
            if (threadIdx.x == 0 && r.norm_topk)
                for (int k = 0; k < K; k++)
                    w[k] /= tot;
        }
        return;
    }
    for (int i = threadIdx.x; i < E; i += blockDim.x) {
        score[i] = 1.0f / (1.0f + expf(-l[i]));
        sel[i] = bias ? score[i] + bias[i] : score[i];
        ok[i] = 0;
    }
    __syncthreads();
    const int G = r.G, per = E / G;
    for (int g = threadIdx.x; g < G; g += blockDim.x) { /* each group's two best */
        const float *sg = sel + (size_t)g * per;
        int a = 0, b = -1;
        for (int i = 1; i < per; i++)
            a = sg[i] > sg[a] ? i : a;
        for (int i = 0; i < per; i++)
            if (i != a && (b < 0 || sg[i] > sg[b]))
                b = i;
        gs[g] = sg[a] + sg[b];
        gok[g] = 1;
    }
    __syncthreads();
    if (threadIdx.x == 0)
        for (int k = 0; k < r.TG; k++) {
            const int g = flc_best(gs, gok, G);
            gok[g] = 0;
            for (int i = 0; i < per; i++)
                ok[(size_t)g * per + i] = 1;
        }
    __syncthreads();
    if (threadIdx.x < 32) {
        const float tot = flc_take_warp(K, E, sel, ok, score, ids, w);
        if (threadIdx.x == 0)
            for (int k = 0; k < K; k++)
                w[k] = (K > 1 ? w[k] / (tot + 1e-20f) : w[k]) * r.scaling;
    }
}

#endif
