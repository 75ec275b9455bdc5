/* attn_few.cuh: attention for few query rows per KV group (FL_CUDA_ATTN=few), included by
 * cuda_kernels.cu and, on machines without a GPU, by tests/unit/test_attn_few_emu.cc, which
 * runs it on the CPU through tests/unit/cuda_emu.hh (threads for a block's threads) against a
 * plain reference. It therefore uses only what that emulation provides: no bf16 intrinsics
 * (a bf16 is widened by a shift), __shfl_xor_sync, __syncthreads, __threadfence, atomicAdd,
 * __ldcg; and flc_pdl_wait / flc_pdl_trigger, which its includer defines.
 *
 * Why: at batch 1 (a block of 4 tokens over 512 cached, 8 query rows per KV group) the
 * CUDA-core kernel k_attention took 35-45 us a layer on an H200 plus 12.6 us for the
 * separate split combine, for 2 MB of K/V a layer (FL_CUDA_KTIME, docs/cuda.md). Its time
 * is a chain of dependent memory round trips: a key row in four rounds of loads, the V rows
 * eight at a time, two bytes a thread. Here a block's memory traffic is two rounds:
 *   - every K piece a thread needs for a chunk of 64 keys is loaded at once (16 bytes, eight
 *     per thread: two threads per key, hd <= 128), and so is every V piece (8 or 4 dims per
 *     thread, up to 8 or 16 keys), the V loads issued before the scores are computed;
 *   - the splits are combined by the last block of a (tile, group) to finish, found with a
 *     ticket (atomicAdd after a __threadfence), so no second kernel; that block resets the
 *     ticket for the next forward (graphs replay the same launch).
 * The results are deterministic (fixed orders everywhere; the combine sums the splits in
 * split order whichever block is last) and agree with k_attention to float rounding.
 *
 * The tile and split bookkeeping and the key rows' addresses repeat k_attention's on purpose:
 * that kernel has run on a GPU and this one has not, so it stays untouched until the GPU run
 * has measured both and one of them goes.
 *
 * R: the most query rows of a tile (8 when the batch's tokens times rep are at most 8, else
 * FLC_QROWS = 16). The product with V keeps R x DP sums per thread: DP = 8 dims for R = 8, 4
 * for R = 16. Needs hd % 8 == 0 and hd <= FLC_FEW_HD. */
#ifndef FL_ATTN_FEW_CUH
#define FL_ATTN_FEW_CUH

#define FLC_FEW_KEYS 64     /* keys per chunk */
#define FLC_FEW_HD 128      /* largest head_dim */
#define FLC_FEW_THREADS 128 /* threads of a block */

/* bf16 bits to float: exact */
__device__ __forceinline__ void flc_few_unpack(const uint4 &raw, float *f)
{
    const unsigned w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}

__device__ __forceinline__ void flc_few_unpack(const uint2 &raw, float *f)
{
    f[0] = __uint_as_float(raw.x << 16);
    f[1] = __uint_as_float(raw.x & 0xffff0000u);
    f[2] = __uint_as_float(raw.y << 16);
    f[3] = __uint_as_float(raw.y & 0xffff0000u);
}

template <int DP> struct flc_few_vec;
template <> struct flc_few_vec<8> {
    typedef uint4 T;
};
template <> struct flc_few_vec<4> {
    typedef uint2 T;
};

__device__ __forceinline__ float flc_few_wmax(float v)
{
    for (int o = 16; o; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float flc_few_wsum(float v)
{
    for (int o = 16; o; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Grid (tiles_bound, kvh, n_splits), FLC_FEW_THREADS threads. The tile, split and key
 * ranges are k_attention's; with n_splits > 1 a block writes its partial result to part
 * (k_attention's layout), takes a ticket of ticket[tile * kvh + g], and the block that takes
 * the last one merges the splits into att as k_attn_combine does. */
template <int R, bool DIRECT>
__global__ void __launch_bounds__(FLC_FEW_THREADS)
k_attn_few(flc_bf16 *att, float *part, int *ticket, const float *qkv, const flc_bf16 *kvo,
           const flc_bf16 *pool, flc_meta m, flc_dims d, int layer, int n_splits)
{
    constexpr int KC = FLC_FEW_KEYS, NT = FLC_FEW_THREADS;
    constexpr int DP = R <= 8 ? 8 : 4; /* V dims per thread in the product */
    constexpr int NVK = KC / DP;       /* most keys per thread in the product (hd 128) */
    typedef typename flc_few_vec<DP>::T vec;
    static_assert(KC == 64 && NT == 2 * KC, "two threads per key, two keys per lane");

    __shared__ __align__(16) float qs[R][FLC_FEW_HD];
    __shared__ float S[R][KC];
    __shared__ float red[R][FLC_FEW_HD];
    __shared__ const flc_bf16 *vrow[KC];
    __shared__ float m_s[R], l_s[R], a_s[R];
    __shared__ int kend_s[R];
    __shared__ int last_s;

    flc_pdl_wait(); /* cuda_kernels.cu: programmatic launch (FL_CUDA_PDL=1) */
    flc_pdl_trigger();
    const int tile = blockIdx.x, g = blockIdx.y, sp = blockIdx.z, tid = threadIdx.x;
    if (tile >= m.params[FLC_P_TILES])
        return; /* the grid is sized for the largest batch of this shape */
    const int L = m.params[FLC_P_SPLIT];
    const int seg = m.tile_seg[tile], row0 = m.tile_row0[tile];
    const int pos0 = m.seg_pos0[seg], n = m.seg_n[seg], tok0 = m.seg_tok0[seg];
    const int32_t *pt = m.pages + m.seg_pt[seg];
    const int rep = d.rep, hd = d.hd, B = d.B, kvh = d.kvh;
    const int nrows = min(R, n * rep - row0);
    const int seg_end = pos0 + n;
    const int last = pos0 + (row0 + nrows - 1) / rep;
    const int kmax = min((last / B + 1) * B, seg_end); /* keys of the tile: [0, kmax) */
    const int k_lo = sp * L, k_hi = min(k_lo + L, kmax);
    const float scale = 1.0f / sqrtf((float)hd);
    const size_t lay = (size_t)layer * 2 * kvh;
    const int np8 = hd >> 3;                        /* 16-byte pieces of a K row */
    const int npv = hd / DP, ng = NT / npv;         /* V pieces of a row; key groups */
    const int vpi = tid % npv, kg = tid / npv;      /* this thread's V piece and key group */

    for (int idx = tid; idx < R * hd; idx += NT) {
        const int r = idx / hd, c = idx % hd;
        float q = 0.f;
        if (r < nrows) {
            const int i = (row0 + r) / rep, h = g * rep + (row0 + r) % rep;
            q = qkv[(size_t)(tok0 + i) * d.qkvd + (size_t)h * hd + c];
        }
        qs[r][c] = q;
    }
    if (tid < R) {
        m_s[tid] = -INFINITY;
        l_s[tid] = 0.f;
        a_s[tid] = 1.f;
        const int p = pos0 + (row0 + tid) / rep;
        kend_s[tid] = tid < nrows ? min((p / B + 1) * B, seg_end) : 0;
    }
    float o[R][DP];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int e = 0; e < DP; e++)
            o[r][e] = 0.f;
    __syncthreads();

    for (int j0 = k_lo; j0 < k_hi; j0 += KC) {
        const int nk = min(KC, k_hi - j0);
        /* K: thread t takes key t / 2, pieces h, h + 2, ... (h = t % 2) */
        const int j = tid >> 1, h = tid & 1, kk = j0 + j;
        const bool kin = j < nk;
        uint4 kr[8];
        if (kin) {
            const flc_bf16 *kp, *vp;
            if (kk < pos0) { /* cached: from the page of its block */
                const flc_bf16 *pg = pool + (size_t)pt[kk / B] * d.page_elems;
                kp = pg + ((lay + g) * B + kk % B) * hd;
                vp = pg + ((lay + kvh + g) * B + kk % B) * hd;
            } else { /* this segment's own, from this forward */
                const flc_bf16 *ow = kvo + (size_t)(tok0 + kk - pos0) * 2 * kvh * hd;
                kp = ow + (size_t)g * hd;
                vp = ow + (size_t)(kvh + g) * hd;
            }
            if (h == 0)
                vrow[j] = vp;
#pragma unroll
            for (int u = 0; u < 8; u++) {
                const int c = h + 2 * u;
                kr[u] = c < np8 ? reinterpret_cast<const uint4 *>(kp)[c] : make_uint4(0, 0, 0, 0);
            }
        } else {
#pragma unroll
            for (int u = 0; u < 8; u++)
                kr[u] = make_uint4(0, 0, 0, 0);
        }
        __syncthreads(); /* vrow */
        /* V: thread (vpi, kg) takes keys kg, kg + ng, ...; loaded before the scores */
        vec vr[NVK];
#pragma unroll
        for (int i = 0; i < NVK; i++) {
            const int jj = kg + ng * i;
            vr[i] = kg < ng && jj < nk ? reinterpret_cast<const vec *>(vrow[jj])[vpi] : vec{};
        }
        /* scores: each half-row's dot products, then the pair's sum */
        float acc[R];
#pragma unroll
        for (int r = 0; r < R; r++)
            acc[r] = 0.f;
        if (kin)
#pragma unroll
            for (int u = 0; u < 8; u++) {
                const int c = h + 2 * u;
                if (c >= np8)
                    break;
                float kf[8];
                flc_few_unpack(kr[u], kf);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    if (r >= nrows)
                        break;
                    const float4 qa = *reinterpret_cast<const float4 *>(&qs[r][8 * c]);
                    const float4 qb = *reinterpret_cast<const float4 *>(&qs[r][8 * c + 4]);
                    acc[r] += qa.x * kf[0] + qa.y * kf[1] + qa.z * kf[2] + qa.w * kf[3] +
                              qb.x * kf[4] + qb.y * kf[5] + qb.z * kf[6] + qb.w * kf[7];
                }
            }
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (r >= nrows)
                break; /* the same for the whole block */
            const float sc = acc[r] + __shfl_xor_sync(0xffffffffu, acc[r], 1);
            if (h == 0)
                S[r][j] = kin && kk < kend_s[r] ? sc * scale : -INFINITY;
        }
        __syncthreads();

        /* online softmax: warp w updates rows w, w + 4, ...; a lane has keys lane, lane + 32 */
        const int warp = tid >> 5, lane = tid & 31;
        for (int r = warp; r < nrows; r += NT / 32) {
            const float v0 = S[r][lane], v1 = S[r][lane + 32];
            const float cm = flc_few_wmax(fmaxf(v0, v1));
            const float mo = m_s[r], mn = fmaxf(mo, cm);
            const float p0 = mn == -INFINITY ? 0.f : expf(v0 - mn);
            const float p1 = mn == -INFINITY ? 0.f : expf(v1 - mn);
            S[r][lane] = p0;
            S[r][lane + 32] = p1;
            const float sum = flc_few_wsum(p0 + p1);
            if (lane == 0) {
                const float al = mn == -INFINITY ? 1.f : expf(mo - mn);
                a_s[r] = al;
                l_s[r] = l_s[r] * al + sum;
                m_s[r] = mn;
            }
        }
        __syncthreads();

        if (kg < ng) {
#pragma unroll
            for (int r = 0; r < R; r++)
                if (r < nrows) {
                    const float al = a_s[r];
#pragma unroll
                    for (int e = 0; e < DP; e++)
                        o[r][e] *= al;
                }
#pragma unroll
            for (int i = 0; i < NVK; i++) {
                const int jj = kg + ng * i;
                if (jj >= nk)
                    break;
                float vf[DP];
                flc_few_unpack(vr[i], vf);
#pragma unroll
                for (int r = 0; r < R; r++)
                    if (r < nrows) {
                        const float p = S[r][jj];
#pragma unroll
                        for (int e = 0; e < DP; e++)
                            o[r][e] += p * vf[e];
                    }
            }
        }
        __syncthreads(); /* S and vrow are the next chunk's */
    }

    /* the key groups' sums, in group order */
    for (int gi = 0; gi < ng; gi++) {
        if (kg == gi)
#pragma unroll
            for (int r = 0; r < R; r++)
                if (r < nrows)
#pragma unroll
                    for (int e = 0; e < DP; e++)
                        red[r][vpi * DP + e] = gi == 0 ? o[r][e] : red[r][vpi * DP + e] + o[r][e];
        __syncthreads();
    }

    if (DIRECT) {
        for (int idx = tid; idx < nrows * hd; idx += NT) {
            const int r = idx / hd, c = idx % hd;
            const int i = (row0 + r) / rep, h = g * rep + (row0 + r) % rep;
            const float l = l_s[r];
            att[(size_t)(tok0 + i) * d.qd + (size_t)h * hd + c] =
                __float2bfloat16_rn(l > 0.f ? red[r][c] / l : 0.f);
        }
        return;
    }
    const size_t stride = (size_t)FLC_QROWS * (hd + 2); /* one split's rows */
    float *mine = part + (((size_t)tile * kvh + g) * n_splits + sp) * stride;
    for (int idx = tid; idx < nrows * hd; idx += NT) {
        const int r = idx / hd, c = idx % hd;
        mine[(size_t)r * (hd + 2) + c] = red[r][c];
    }
    if (tid < nrows) {
        mine[(size_t)tid * (hd + 2) + hd] = m_s[tid];
        mine[(size_t)tid * (hd + 2) + hd + 1] = l_s[tid];
    }
    __threadfence(); /* this block's partial before its ticket */
    __syncthreads();
    int *tk = ticket + (size_t)tile * kvh + g;
    if (tid == 0)
        last_s = atomicAdd(tk, 1) == n_splits - 1;
    __syncthreads();
    if (!last_s)
        return;
    __threadfence();
    /* the last block: o = sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s, splits in order;
     * __ldcg reads through L2, where the other blocks' partials are */
    const float *all = part + ((size_t)tile * kvh + g) * n_splits * stride;
    for (int idx = tid; idx < nrows * hd; idx += NT) {
        const int r = idx / hd, c = idx % hd;
        const float *base = all + (size_t)r * (hd + 2);
        float M = -INFINITY;
        for (int s = 0; s < n_splits; s++)
            M = fmaxf(M, __ldcg(base + s * stride + hd));
        float num = 0.f, den = 0.f;
        if (M != -INFINITY)
            for (int s = 0; s < n_splits; s++) {
                const float *p = base + s * stride;
                const float w = expf(__ldcg(p + hd) - M);
                num += w * __ldcg(p + c);
                den += w * __ldcg(p + hd + 1);
            }
        const int i = (row0 + r) / rep, h = g * rep + (row0 + r) % rep;
        att[(size_t)(tok0 + i) * d.qd + (size_t)h * hd + c] =
            __float2bfloat16_rn(den > 0.f ? num / den : 0.f);
    }
    if (tid == 0)
        *tk = 0; /* every split has taken its ticket: ready for the next forward */
}

#endif
