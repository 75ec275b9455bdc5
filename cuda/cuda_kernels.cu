/* cuda_kernels.cu: the CUDA backend's own kernels (cuda_kernels.cuh): embedding, RMSNorm,
 * the q/k/v finish (bias, q/k norm, RoPE, KV page store), block-causal attention over the
 * paged cache, the weight-streaming matmul for few rows, SwiGLU and the fused softmax
 * statistics (top-1 token, its probability, entropy) of the logits.
 *
 * The arithmetic follows engine/kernels.c where it matters for parity: RMSNorm sums squares
 * in double, RoPE angles are computed in double from the same inverse frequencies, softmax
 * statistics are per chunk (max, argmax with the lower id winning a tie, sums of e^u and
 * e^u * u in double) merged in chunk order exactly as fl_lse_merge does. Activations enter
 * the projections as bf16 and K/V are kept as bf16, so results agree with the CPU backend to
 * bf16 precision, not bit for bit. */
#include <math.h>
#include <cuda_fp16.h>
#include <mma.h>

#include "cuda_kernels.cuh"

#define FULL 0xffffffffu

#include "norm.cuh"

/* ---------------------------------------------------------------- helpers */

__device__ __forceinline__ float flc_warp_sum_f(float v)
{
    for (int o = 16; o; o >>= 1)
        v += __shfl_xor_sync(FULL, v, o);
    return v;
}

__device__ __forceinline__ float flc_warp_max_f(float v)
{
    for (int o = 16; o; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(FULL, v, o));
    return v;
}

/* Programmatic dependent launch (sm_90; FL_CUDA_PDL=1, docs/cuda.md): a kernel launched with
 * flc_launch(pdl = true) may start while the kernel before it in the stream still runs, as
 * soon as every block of that one has passed flc_pdl_trigger; it reads nothing the earlier
 * kernels write, and writes nothing, before flc_pdl_wait, which returns once they have
 * finished and their writes are visible. Without the launch attribute both are no-ops. The
 * streaming matmuls are the kernels launched so: they load their first weight pieces before
 * the wait. Every other kernel of a forward waits first (FLC_PDL_ENTER), so with
 * FL_CUDA_PDL=1 all of them are launched so (but the first of a forward and those after a
 * copy): a kernel's launch and its blocks' start overlap the end of the kernel before. */
__device__ __forceinline__ void flc_pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void flc_pdl_trigger()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* A kernel's first statement (all but the streaming matmuls, which load weights first): wait
 * for the kernel before, then let the one after start (one level ahead, not a pile). */
#define FLC_PDL_ENTER()                                                                        \
    do {                                                                                       \
        flc_pdl_wait();                                                                        \
        flc_pdl_trigger();                                                                     \
    } while (0)

/* k<<<grid, block, smem, s>>>(args...), with the programmatic-serialization attribute when
 * pdl */
template <typename... P, typename... A>
static cudaError_t flc_launch_smem(bool pdl, void (*k)(P...), dim3 grid, dim3 block, size_t smem,
                                   cudaStream_t s, A... args)
{
#ifndef FL_CUDA_EMU
    if (!pdl) {
        k<<<grid, block, smem, s>>>(args...);
        return cudaGetLastError();
    }
#endif
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, k, args...);
}

template <typename... P, typename... A>
static cudaError_t flc_launch(bool pdl, void (*k)(P...), dim3 grid, dim3 block, cudaStream_t s,
                              A... args)
{
    return flc_launch_smem(pdl, k, grid, block, 0, s, args...);
}

/* A kernel's dynamic shared memory (the launch's smem bytes), as an array of T. */
#ifndef FL_CUDA_EMU
#define FLC_DYN_SHARED(T, name) extern __shared__ T name[]
#else
#define FLC_DYN_SHARED(T, name) T *name = reinterpret_cast<T *>(emu_dyn_smem)
#endif

/* 8 bf16 (one 16-byte load) to floats. */
__device__ __forceinline__ void flc_unpack8(const uint4 &raw, float *f)
{
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&raw);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 p = __bfloat1622float2(h[i]);
        f[2 * i] = p.x;
        f[2 * i + 1] = p.y;
    }
}

/* ---------------------------------------------------------------- embedding, norms */

__global__ void k_embed(float *x, const flc_bf16 *embed, const int32_t *tokens, int H)
{
    FLC_PDL_ENTER(); /* launched plainly (the forward's first): lets RMSNorm start early */
    int t = blockIdx.x;
    const flc_bf16 *row = embed + (size_t)tokens[t] * H;
    for (int i = threadIdx.x; i < H; i += blockDim.x)
        x[(size_t)t * H + i] = __bfloat162float(row[i]);
}

cudaError_t flc_embed(float *x, const flc_bf16 *embed, flc_meta m, int T, int H, cudaStream_t s)
{
    return flc_launch(false, k_embed, dim3((unsigned)T), dim3(256), s, x, embed, m.tokens, H);
}

__global__ void k_rmsnorm(flc_bf16 *out, const float *x, const float *w, const int32_t *gather,
                          int H, float eps)
{
    __shared__ double sh[32];
    FLC_PDL_ENTER();
    flc_rmsnorm_block(out, x, w, gather, H, eps, sh);
}

cudaError_t flc_rmsnorm(flc_bf16 *out, const float *x, const float *w, const int32_t *gather,
                        int rows, int H, float eps, bool pdl, cudaStream_t s)
{
    if (rows <= 0)
        return cudaSuccess;
    return flc_launch(pdl, k_rmsnorm, (unsigned)rows, 256, s, out, x, w, gather, H, eps);
}

/* ---------------------------------------------------------------- q/k/v finish */

/* Block (token t, head hh): hh < nh a q head, then kvh k heads, then kvh v heads. Thread i
 * < hd/2 holds the RoPE pair (i, i + hd/2). */
__global__ void k_qkv_post(float *qkv, flc_bf16 *kvo, flc_bf16 *pool, const float *bias,
                           const float *qn, const float *kn, const double *inv_freq, flc_meta m,
                           flc_dims d, int layer)
{
    __shared__ double sh[32];
    FLC_PDL_ENTER();
    const int t = blockIdx.x, hh = blockIdx.y, i = threadIdx.x, half = d.hd / 2;
    const int col = hh * d.hd;
    float *v = qkv + (size_t)t * d.qkvd + col;
    const bool on = i < half;
    float a = 0.f, b = 0.f;
    if (on) {
        a = v[i];
        b = v[i + half];
        if (bias) {
            a += bias[col + i];
            b += bias[col + i + half];
        }
    }
    const bool is_v = hh >= d.nh + d.kvh;
    if (!is_v) {
        const float *nw = hh < d.nh ? qn : kn; /* the same for the whole block */
        if (nw) {
            double ss = on ? (double)a * a + (double)b * b : 0.0;
            ss = flc_block_sum_d(ss, sh);
            float r = (float)(1.0 / sqrt(ss / d.hd + (double)d.eps));
            if (on) {
                a = nw[i] * (a * r);
                b = nw[i + half] * (b * r);
            }
        }
        if (on) {
            double ang = (double)m.tok_pos[t] * inv_freq[i];
            float c = (float)cos(ang), sn = (float)sin(ang);
            float a2 = a * c - b * sn, b2 = b * c + a * sn;
            a = a2;
            b = b2;
        }
    }
    if (!on)
        return;
    if (hh < d.nh) {
        v[i] = a;
        v[i + half] = b;
        return;
    }
    const int kv = is_v ? 1 : 0, g = hh - d.nh - kv * d.kvh;
    const flc_bf16 ha = __float2bfloat16_rn(a), hb = __float2bfloat16_rn(b);
    flc_bf16 *o = kvo + (((size_t)t * 2 + kv) * d.kvh + g) * d.hd;
    o[i] = ha;
    o[i + half] = hb;
    const int pg = m.tok_store[t];
    if (pg >= 0) {
        const int slot = m.tok_pos[t] % d.B;
        flc_bf16 *dst = pool + (size_t)pg * d.page_elems +
                        ((((size_t)layer * 2 + kv) * d.kvh + g) * d.B + slot) * d.hd;
        dst[i] = ha;
        dst[i + half] = hb;
    }
}

/* k_qkv_post with partial rotary (d.rd < d.hd): thread i < hd holds element i; the norm
 * over all hd, then the pairs (i, i + rd/2) of the first rd dims rotate through shared
 * memory, as the CPU's fl_rope over rd (engine/cpu/kernels.c). */
__global__ void k_qkv_post_part(float *qkv, flc_bf16 *kvo, flc_bf16 *pool, const float *bias,
                                const float *qn, const float *kn, const double *inv_freq,
                                flc_meta m, flc_dims d, int layer)
{
    __shared__ double sh[32];
    __shared__ float el[FLC_HD_MAX];
    FLC_PDL_ENTER();
    const int t = blockIdx.x, hh = blockIdx.y, i = threadIdx.x, rh = d.rd / 2;
    const int col = hh * d.hd;
    float *v = qkv + (size_t)t * d.qkvd + col;
    const bool on = i < d.hd;
    float a = 0.f;
    if (on) {
        a = v[i];
        if (bias)
            a += bias[col + i];
    }
    const bool is_v = hh >= d.nh + d.kvh;
    if (!is_v) {
        const float *nw = hh < d.nh ? qn : kn;
        if (nw) {
            double ss = on ? (double)a * a : 0.0;
            ss = flc_block_sum_d(ss, sh);
            float r = (float)(1.0 / sqrt(ss / d.hd + (double)d.eps));
            if (on)
                a = nw[i] * (a * r);
        }
        if (on)
            el[i] = a;
        __syncthreads();
        if (i < d.rd) {
            const int j = i < rh ? i : i - rh; /* the pair's frequency */
            double ang = (double)m.tok_pos[t] * inv_freq[j];
            float c = (float)cos(ang), sn = (float)sin(ang);
            a = i < rh ? a * c - el[i + rh] * sn : a * c + el[j] * sn;
        }
    }
    if (!on)
        return;
    if (hh < d.nh) {
        v[i] = a;
        return;
    }
    const int kv = is_v ? 1 : 0, g = hh - d.nh - kv * d.kvh;
    const flc_bf16 ha = __float2bfloat16_rn(a);
    kvo[(((size_t)t * 2 + kv) * d.kvh + g) * d.hd + i] = ha;
    const int pg = m.tok_store[t];
    if (pg >= 0) {
        const int slot = m.tok_pos[t] % d.B;
        pool[(size_t)pg * d.page_elems +
             ((((size_t)layer * 2 + kv) * d.kvh + g) * d.B + slot) * d.hd + i] = ha;
    }
}

cudaError_t flc_qkv_post(float *qkv, flc_bf16 *kvo, flc_bf16 *pool, const float *bias,
                         const float *qn, const float *kn, const double *inv_freq, flc_meta m,
                         flc_dims d, int layer, int T, bool pdl, cudaStream_t s)
{
    dim3 grid((unsigned)T, (unsigned)(d.nh + 2 * d.kvh));
    if (d.rd < d.hd)
        return flc_launch(pdl, k_qkv_post_part, grid, (unsigned)((d.hd + 31) / 32 * 32), s, qkv,
                          kvo, pool, bias, qn, kn, inv_freq, m, d, layer);
    return flc_launch(pdl, k_qkv_post, grid, (unsigned)((d.hd / 2 + 31) / 32 * 32), s, qkv, kvo,
                      pool, bias, qn, kn, inv_freq, m, d, layer);
}

/* ---------------------------------------------------------------- attention */

/* One block: a tile of up to FLC_QROWS query rows of one segment and KV group g (row =
 * token i * rep + r for query head g * rep + r, as the CPU backend orders them), over the
 * keys [sp * L, (sp + 1) * L) of the tile's range, in chunks of FLC_KCHUNK keys with an
 * online softmax. Thread j scores key j of a chunk against every row; in the product with
 * V, thread d owns output dimension d (and d + 128) of every row. */
template <bool DIRECT>
__global__ void __launch_bounds__(FLC_KCHUNK)
k_attention(flc_bf16 *att, float *part, const float *qkv, const flc_bf16 *kvo,
            const flc_bf16 *pool, flc_meta m, flc_dims d, int layer, int n_splits)
{
    __shared__ __align__(16) float qs[FLC_QROWS][FLC_HD_MAX];
    __shared__ float S[FLC_QROWS][FLC_KCHUNK];
    __shared__ const flc_bf16 *vrow[FLC_KCHUNK];
    __shared__ float m_s[FLC_QROWS], l_s[FLC_QROWS], a_s[FLC_QROWS];
    __shared__ int kend_s[FLC_QROWS];

    FLC_PDL_ENTER();
    const int tile = blockIdx.x, g = blockIdx.y, sp = blockIdx.z, tid = threadIdx.x;
    if (tile >= m.params[FLC_P_TILES])
        return; /* the grid is sized for the largest batch of this shape */
    const int L = m.params[FLC_P_SPLIT];
    const int seg = m.tile_seg[tile], row0 = m.tile_row0[tile];
    const int pos0 = m.seg_pos0[seg], n = m.seg_n[seg], tok0 = m.seg_tok0[seg];
    const int32_t *pt = m.pages + m.seg_pt[seg];
    const int rep = d.rep, hd = d.hd, B = d.B, kvh = d.kvh;
    const int nrows = min(FLC_QROWS, n * rep - row0);
    const int seg_end = pos0 + n;
    const int last = pos0 + (row0 + nrows - 1) / rep;
    const int kmax = min((last / B + 1) * B, seg_end); /* keys of the tile: [0, kmax) */
    const int k_lo = sp * L, k_hi = min(k_lo + L, kmax);
    const float scale = 1.0f / sqrtf((float)hd);

    /* the tile's query rows, eight loads per thread in flight at a time */
    for (int base = 0; base < FLC_QROWS * hd; base += 8 * FLC_KCHUNK) {
        float q[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const int idx = base + u * FLC_KCHUNK + tid, r = idx / hd, c = idx % hd;
            q[u] = 0.f;
            if (idx < FLC_QROWS * hd && r < nrows) {
                const int i = (row0 + r) / rep, h = g * rep + (row0 + r) % rep;
                q[u] = qkv[(size_t)(tok0 + i) * d.qkvd + (size_t)h * hd + c];
            }
        }
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const int idx = base + u * FLC_KCHUNK + tid;
            if (idx < FLC_QROWS * hd)
                qs[idx / hd][idx % hd] = q[u];
        }
    }
    if (tid < FLC_QROWS) {
        m_s[tid] = -INFINITY;
        l_s[tid] = 0.f;
        a_s[tid] = 1.f;
        int p = pos0 + (row0 + tid) / rep;
        kend_s[tid] = tid < nrows ? min((p / B + 1) * B, seg_end) : 0;
    }
    float o0[FLC_QROWS], o1[FLC_QROWS];
#pragma unroll
    for (int r = 0; r < FLC_QROWS; r++)
        o0[r] = o1[r] = 0.f;
    const bool two = hd > FLC_KCHUNK;
    const size_t lay = (size_t)layer * 2 * kvh;
    __syncthreads();

    for (int j0 = k_lo; j0 < k_hi; j0 += FLC_KCHUNK) {
        const int kk = j0 + tid;
        if (kk < k_hi) {
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
            vrow[tid] = vp;
            float sc[FLC_QROWS];
#pragma unroll
            for (int r = 0; r < FLC_QROWS; r++)
                sc[r] = 0.f;
            /* the key's row in groups of four 16-byte loads issued together: one at a
             * time, each waited for, was most of this kernel's time at batch 1 (H200,
             * FL_CUDA_KTIME); the sums keep their order */
            for (int c0 = 0; c0 < hd; c0 += 32) {
                uint4 raw[4];
#pragma unroll
                for (int u = 0; u < 4; u++)
                    if (c0 + 8 * u < hd)
                        raw[u] = *reinterpret_cast<const uint4 *>(kp + c0 + 8 * u);
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    const int c = c0 + 8 * u;
                    if (c >= hd)
                        break;
                    float kf[8];
                    flc_unpack8(raw[u], kf);
#pragma unroll
                    for (int r = 0; r < FLC_QROWS; r++) {
                        if (r >= nrows)
                            break; /* the same for the whole block */
                        const float4 qa = *reinterpret_cast<const float4 *>(&qs[r][c]);
                        const float4 qb = *reinterpret_cast<const float4 *>(&qs[r][c + 4]);
                        sc[r] += qa.x * kf[0] + qa.y * kf[1] + qa.z * kf[2] + qa.w * kf[3] +
                                 qb.x * kf[4] + qb.y * kf[5] + qb.z * kf[6] + qb.w * kf[7];
                    }
                }
            }
#pragma unroll
            for (int r = 0; r < FLC_QROWS; r++)
                S[r][tid] = (r < nrows && kk < kend_s[r]) ? sc[r] * scale : -INFINITY;
        } else {
            vrow[tid] = nullptr;
#pragma unroll
            for (int r = 0; r < FLC_QROWS; r++)
                S[r][tid] = -INFINITY;
        }
        __syncthreads();

        /* online softmax: warp w updates rows w, w + 4, ... */
        const int warp = tid >> 5, lane = tid & 31;
        for (int r = warp; r < nrows; r += FLC_KCHUNK / 32) {
            float v[FLC_KCHUNK / 32], cm = -INFINITY;
#pragma unroll
            for (int q = 0; q < FLC_KCHUNK / 32; q++) {
                v[q] = S[r][lane + 32 * q];
                cm = fmaxf(cm, v[q]);
            }
            cm = flc_warp_max_f(cm);
            const float mo = m_s[r], mn = fmaxf(mo, cm);
            float sum = 0.f;
#pragma unroll
            for (int q = 0; q < FLC_KCHUNK / 32; q++) {
                float p = mn == -INFINITY ? 0.f : expf(v[q] - mn);
                S[r][lane + 32 * q] = p;
                sum += p;
            }
            sum = flc_warp_sum_f(sum);
            if (lane == 0) {
                float al = mn == -INFINITY ? 1.f : expf(mo - mn);
                a_s[r] = al;
                l_s[r] = l_s[r] * al + sum;
                m_s[r] = mn;
            }
        }
        __syncthreads();

        const int nk = min(FLC_KCHUNK, k_hi - j0);
        if (tid < hd) {
#pragma unroll
            for (int r = 0; r < FLC_QROWS; r++)
                if (r < nrows) {
                    o0[r] *= a_s[r];
                    o1[r] *= a_s[r];
                }
            /* V rows eight at a time: their loads are issued together (see above) */
            for (int jb = 0; jb < nk; jb += 8) {
                float v0[8], v1[8];
#pragma unroll
                for (int u = 0; u < 8; u++)
                    if (jb + u < nk) {
                        const flc_bf16 *vp = vrow[jb + u];
                        v0[u] = __bfloat162float(vp[tid]);
                        v1[u] = two ? __bfloat162float(vp[tid + FLC_KCHUNK]) : 0.f;
                    }
#pragma unroll
                for (int u = 0; u < 8; u++) {
                    if (jb + u >= nk)
                        break;
#pragma unroll
                    for (int r = 0; r < FLC_QROWS; r++)
                        if (r < nrows) {
                            const float p = S[r][jb + u];
                            o0[r] += p * v0[u];
                            o1[r] += p * v1[u];
                        }
                }
            }
        }
        __syncthreads();
    }

    if (tid >= hd)
        return;
#pragma unroll
    for (int r = 0; r < FLC_QROWS; r++) {
        if (r >= nrows)
            break;
        if (DIRECT) {
            const int i = (row0 + r) / rep, h = g * rep + (row0 + r) % rep;
            const float l = l_s[r], inv = l > 0.f ? 1.f / l : 0.f;
            flc_bf16 *dst = att + (size_t)(tok0 + i) * d.qd + (size_t)h * hd;
            dst[tid] = __float2bfloat16_rn(o0[r] * inv);
            if (two)
                dst[tid + FLC_KCHUNK] = __float2bfloat16_rn(o1[r] * inv);
        } else {
            float *pp = part + ((((size_t)tile * kvh + g) * n_splits + sp) * FLC_QROWS + r) *
                                   (size_t)(hd + 2);
            pp[tid] = o0[r];
            if (two)
                pp[tid + FLC_KCHUNK] = o1[r];
            if (tid == 0) {
                pp[hd] = m_s[r];
                pp[hd + 1] = l_s[r];
            }
        }
    }
}

/* The same tile and split as k_attention, on tensor cores (wmma, bf16 in, f32 accumulate),
 * for head_dim a multiple of 16 up to 128: per chunk of 32 keys, K and V are gathered into
 * shared memory, S = Q K^T (two 16x16 fragments), an online softmax turns S into P (bf16)
 * and rescales the running output O (f32, shared), and O += P V (head_dim / 16 fragments).
 * Q and P are rounded to bf16 for the products, as flash attention does. Opt-in
 * (FL_CUDA_ATTN=tc) until it has been measured against the CUDA-core kernel. */
#define FLC_TC_KEYS 32
#define FLC_TC_HD 128
template <bool DIRECT>
__global__ void __launch_bounds__(128)
k_attention_tc(flc_bf16 *att, float *part, const float *qkv, const flc_bf16 *kvo,
               const flc_bf16 *pool, flc_meta m, flc_dims d, int layer, int n_splits)
{
    using namespace nvcuda;
    __shared__ __align__(32) flc_bf16 Qs[FLC_QROWS][FLC_TC_HD];
    __shared__ __align__(32) flc_bf16 Ks[FLC_TC_KEYS][FLC_TC_HD];
    __shared__ __align__(32) flc_bf16 Vs[FLC_TC_KEYS][FLC_TC_HD];
    __shared__ __align__(32) float Ss[FLC_QROWS][FLC_TC_KEYS];
    __shared__ __align__(32) flc_bf16 Ps[FLC_QROWS][FLC_TC_KEYS];
    __shared__ __align__(32) float Os[FLC_QROWS][FLC_TC_HD];
    __shared__ float m_s[FLC_QROWS], l_s[FLC_QROWS];
    __shared__ int kend_s[FLC_QROWS];

    FLC_PDL_ENTER();
    const int tile = blockIdx.x, g = blockIdx.y, sp = blockIdx.z, tid = threadIdx.x;
    const int warp = tid >> 5, lane = tid & 31;
    if (tile >= m.params[FLC_P_TILES])
        return;
    const int L = m.params[FLC_P_SPLIT];
    const int seg = m.tile_seg[tile], row0 = m.tile_row0[tile];
    const int pos0 = m.seg_pos0[seg], n = m.seg_n[seg], tok0 = m.seg_tok0[seg];
    const int32_t *pt = m.pages + m.seg_pt[seg];
    const int rep = d.rep, hd = d.hd, B = d.B, kvh = d.kvh;
    const int nrows = min(FLC_QROWS, n * rep - row0);
    const int seg_end = pos0 + n;
    const int last = pos0 + (row0 + nrows - 1) / rep;
    const int kmax = min((last / B + 1) * B, seg_end);
    const int k_lo = sp * L, k_hi = min(k_lo + L, kmax);
    const float scale = 1.0f / sqrtf((float)hd);
    const size_t lay = (size_t)layer * 2 * kvh;
    const int pieces = hd / 8; /* 16-byte pieces of a row */

    for (int idx = tid; idx < FLC_QROWS * hd; idx += blockDim.x) {
        int r = idx / hd, c = idx % hd;
        float q = 0.f;
        if (r < nrows) {
            int i = (row0 + r) / rep, h = g * rep + (row0 + r) % rep;
            q = qkv[(size_t)(tok0 + i) * d.qkvd + (size_t)h * hd + c];
        }
        Qs[r][c] = __float2bfloat16_rn(q);
        Os[r][c] = 0.f;
    }
    if (tid < FLC_QROWS) {
        m_s[tid] = -INFINITY;
        l_s[tid] = 0.f;
        int p = pos0 + (row0 + tid) / rep;
        kend_s[tid] = tid < nrows ? min((p / B + 1) * B, seg_end) : 0;
    }
    __syncthreads();

    for (int j0 = k_lo; j0 < k_hi; j0 += FLC_TC_KEYS) {
        /* gather this chunk's K and V rows (zeros past the range) */
        for (int idx = tid; idx < FLC_TC_KEYS * pieces; idx += blockDim.x) {
            const int j = idx / pieces, pc = idx % pieces, kk = j0 + j;
            uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
            if (kk < k_hi) {
                const flc_bf16 *kp, *vp;
                if (kk < pos0) {
                    const flc_bf16 *pg = pool + (size_t)pt[kk / B] * d.page_elems;
                    kp = pg + ((lay + g) * B + kk % B) * hd;
                    vp = pg + ((lay + kvh + g) * B + kk % B) * hd;
                } else {
                    const flc_bf16 *ow = kvo + (size_t)(tok0 + kk - pos0) * 2 * kvh * hd;
                    kp = ow + (size_t)g * hd;
                    vp = ow + (size_t)(kvh + g) * hd;
                }
                kv = reinterpret_cast<const uint4 *>(kp)[pc];
                vv = reinterpret_cast<const uint4 *>(vp)[pc];
            }
            reinterpret_cast<uint4 *>(&Ks[j][0])[pc] = kv;
            reinterpret_cast<uint4 *>(&Vs[j][0])[pc] = vv;
        }
        __syncthreads();
        if (warp < FLC_TC_KEYS / 16) { /* S[:, 16w .. 16w + 16) = Q K^T */
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.0f);
            for (int k = 0; k < hd; k += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
                wmma::load_matrix_sync(a, &Qs[0][k], FLC_TC_HD);
                wmma::load_matrix_sync(b, &Ks[warp * 16][k], FLC_TC_HD);
                wmma::mma_sync(acc, a, b, acc);
            }
            wmma::store_matrix_sync(&Ss[0][warp * 16], acc, FLC_TC_KEYS, wmma::mem_row_major);
        }
        __syncthreads();
        /* online softmax, one key per lane; warp w has rows w, w + 4, ... */
        for (int r = warp; r < FLC_QROWS; r += 4) {
            if (r >= nrows) {
                Ps[r][lane] = __float2bfloat16_rn(0.f);
                continue;
            }
            const int kk = j0 + lane;
            const float v = kk < k_hi && kk < kend_s[r] ? Ss[r][lane] * scale : -INFINITY;
            const float cm = flc_warp_max_f(v);
            const float mo = m_s[r], mn = fmaxf(mo, cm);
            const flc_bf16 pb = __float2bfloat16_rn(mn == -INFINITY ? 0.f : expf(v - mn));
            Ps[r][lane] = pb;
            const float sum = flc_warp_sum_f(__bfloat162float(pb));
            const float al = mn == -INFINITY ? 1.f : expf(mo - mn);
            if (al != 1.f)
                for (int c = lane; c < hd; c += 32)
                    Os[r][c] *= al;
            __syncwarp();
            if (lane == 0) {
                l_s[r] = l_s[r] * al + sum;
                m_s[r] = mn;
            }
        }
        __syncthreads();
        for (int f = warp; f < hd / 16; f += 4) { /* O[:, 16f .. 16f + 16) += P V */
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::load_matrix_sync(acc, &Os[0][f * 16], FLC_TC_HD, wmma::mem_row_major);
            for (int k = 0; k < FLC_TC_KEYS; k += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
                wmma::load_matrix_sync(a, &Ps[0][k], FLC_TC_KEYS);
                wmma::load_matrix_sync(b, &Vs[k][f * 16], FLC_TC_HD);
                wmma::mma_sync(acc, a, b, acc);
            }
            wmma::store_matrix_sync(&Os[0][f * 16], acc, FLC_TC_HD, wmma::mem_row_major);
        }
        __syncthreads();
    }

    for (int idx = tid; idx < nrows * hd; idx += blockDim.x) {
        const int r = idx / hd, c = idx % hd;
        if (DIRECT) {
            const int i = (row0 + r) / rep, h = g * rep + (row0 + r) % rep;
            const float l = l_s[r];
            att[(size_t)(tok0 + i) * d.qd + (size_t)h * hd + c] =
                __float2bfloat16_rn(l > 0.f ? Os[r][c] / l : 0.f);
        } else {
            float *pp = part + ((((size_t)tile * kvh + g) * n_splits + sp) * FLC_QROWS + r) *
                                   (size_t)(hd + 2);
            pp[c] = Os[r][c];
            if (c == 0) {
                pp[hd] = m_s[r];
                pp[hd + 1] = l_s[r];
            }
        }
    }
}

/* Merges the splits of each row: o = sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s. */
__global__ void k_attn_combine(flc_bf16 *att, const float *part, flc_meta m, flc_dims d,
                               int n_splits)
{
    FLC_PDL_ENTER();
    const int tile = blockIdx.x, g = blockIdx.y;
    if (tile >= m.params[FLC_P_TILES])
        return;
    const int seg = m.tile_seg[tile], row0 = m.tile_row0[tile];
    const int n = m.seg_n[seg], tok0 = m.seg_tok0[seg];
    const int rep = d.rep, hd = d.hd;
    const int nrows = min(FLC_QROWS, n * rep - row0);
    const size_t stride = (size_t)FLC_QROWS * (hd + 2);
    for (int idx = threadIdx.x; idx < nrows * hd; idx += blockDim.x) {
        const int r = idx / hd, c = idx % hd;
        const float *base =
            part + (((size_t)tile * d.kvh + g) * n_splits * FLC_QROWS + r) * (size_t)(hd + 2);
        float M = -INFINITY;
#pragma unroll 8
        for (int s = 0; s < n_splits; s++)
            M = fmaxf(M, base[s * stride + hd]);
        float num = 0.f, den = 0.f;
        if (M != -INFINITY)
#pragma unroll 8
            for (int s = 0; s < n_splits; s++) {
                const float *p = base + s * stride;
                const float w = expf(p[hd] - M);
                num += w * p[c];
                den += w * p[hd + 1];
            }
        const int i = (row0 + r) / rep, h = g * rep + (row0 + r) % rep;
        att[(size_t)(tok0 + i) * d.qd + (size_t)h * hd + c] =
            __float2bfloat16_rn(den > 0.f ? num / den : 0.f);
    }
}

bool flc_attention_tc_ok(int hd) { return hd % 16 == 0 && hd <= FLC_TC_HD; }

cudaError_t flc_attention(flc_bf16 *att, float *part, const float *qkv, const flc_bf16 *kvo,
                          const flc_bf16 *pool, flc_meta m, flc_dims d, int layer,
                          int tiles_bound, int n_splits, bool tensor_cores, bool pdl,
                          cudaStream_t s)
{
    dim3 grid((unsigned)tiles_bound, (unsigned)d.kvh, (unsigned)n_splits);
    if (tensor_cores && flc_attention_tc_ok(d.hd))
        return flc_launch(pdl, n_splits == 1 ? k_attention_tc<true> : k_attention_tc<false>,
                          grid, 128, s, att, part, qkv, kvo, pool, m, d, layer, n_splits);
    return flc_launch(pdl, n_splits == 1 ? k_attention<true> : k_attention<false>, grid,
                      FLC_KCHUNK, s, att, part, qkv, kvo, pool, m, d, layer, n_splits);
}

cudaError_t flc_attn_combine(flc_bf16 *att, const float *part, flc_meta m, flc_dims d,
                             int tiles_bound, int n_splits, bool pdl, cudaStream_t s)
{
    dim3 grid((unsigned)tiles_bound, (unsigned)d.kvh);
    return flc_launch(pdl, k_attn_combine, grid, 256, s, att, part, m, d, n_splits);
}

#include "attn_few.cuh"

bool flc_attention_few_ok(int hd) { return hd % 8 == 0 && hd >= 8 && hd <= FLC_FEW_HD; }

cudaError_t flc_attention_few(flc_bf16 *att, float *part, int *ticket, const float *qkv,
                              const flc_bf16 *kvo, const flc_bf16 *pool, flc_meta m, flc_dims d,
                              int layer, int tiles_bound, int n_splits, bool rows8, bool pdl,
                              cudaStream_t s)
{
    if (!flc_attention_few_ok(d.hd))
        return cudaErrorInvalidValue;
    dim3 grid((unsigned)tiles_bound, (unsigned)d.kvh, (unsigned)n_splits);
    const bool one = n_splits == 1;
    if (rows8)
        return flc_launch(pdl, one ? k_attn_few<8, true> : k_attn_few<8, false>, grid,
                          FLC_FEW_THREADS, s, att, part, ticket, qkv, kvo, pool, m, d, layer,
                          n_splits);
    return flc_launch(pdl, one ? k_attn_few<FLC_QROWS, true> : k_attn_few<FLC_QROWS, false>, grid,
                      FLC_FEW_THREADS, s, att, part, ticket, qkv, kvo, pool, m, d, layer,
                      n_splits);
}

/* ---------------------------------------------------------------- matmul, few rows */

/* The streaming matmuls' end: the warp sums each lane's partial dot products, and lane 0
 * writes column j of the m rows (store, add, or SwiGLU of the gate and up columns). */
template <int R, int NW, int MODE>
__device__ __forceinline__ void flc_skinny_out(float (&acc)[NW][R], int lane, float *y,
                                               flc_bf16 *yh, int ldy, int m, int j)
{
#pragma unroll
    for (int q = 0; q < NW; q++)
#pragma unroll
        for (int r = 0; r < R; r++)
            acc[q][r] = flc_warp_sum_f(acc[q][r]);
    if (lane != 0)
        return;
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (r >= m)
            break;
        if (MODE == FLC_MM_STORE) {
            y[(size_t)r * ldy + j] = acc[0][r];
        } else if (MODE == FLC_MM_ACC) {
            y[(size_t)r * ldy + j] += acc[0][r];
        } else {
            const float gt = acc[0][r], up = acc[NW - 1][r];
            yh[(size_t)r * ldy + j] = __float2bfloat16_rn(gt / (1.0f + expf(-gt)) * up);
        }
    }
}

/* Warp w of block b computes output column j = 4b + w for every row (and, for SwiGLU, the
 * matching up column j + n): lanes stride the 16-byte pieces of the weight row, four pieces
 * in flight per lane, then the warp sums its lanes. The weights are read once, streaming
 * (__ldcs: not kept in the caches); X's few rows stay in L1/L2. */
/* flc_skinny_ld: a weight piece, streaming (__ldcs: evict first; read once) or kept (__ldg:
 * the grouped MoE matmul reads an expert's weights again for every 8 of its rows) */
template <bool STREAM>
__device__ __forceinline__ uint4 flc_skinny_ld(const uint4 *p)
{
    return STREAM ? __ldcs(p) : __ldg(p);
}

template <int R, int MODE, bool STREAM = true>
__device__ __forceinline__ void flc_skinny_col(float *y, flc_bf16 *yh, int ldy,
                                               const flc_bf16 *__restrict__ x, int ldx, int m,
                                               const flc_bf16 *__restrict__ w, int n, int k,
                                               int j, int lane)
{
    constexpr int NW = MODE == FLC_MM_SWIGLU ? 2 : 1;
    constexpr int U = 4;
    const int k8 = k >> 3;
    const uint4 *wr[NW];
    wr[0] = reinterpret_cast<const uint4 *>(w + (size_t)j * k);
    if (NW == 2)
        wr[NW - 1] = reinterpret_cast<const uint4 *>(w + (size_t)(j + n) * k);
    float acc[NW][R];
#pragma unroll
    for (int q = 0; q < NW; q++)
#pragma unroll
        for (int r = 0; r < R; r++)
            acc[q][r] = 0.f;
    uint4 wv[U][NW];
    for (int c0 = lane; c0 < k8; c0 += 32 * U) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + 32 * u;
#pragma unroll
            for (int q = 0; q < NW; q++)
                wv[u][q] = c < k8 ? flc_skinny_ld<STREAM>(wr[q] + c) : make_uint4(0, 0, 0, 0);
        }
        if (c0 == lane) { /* the first pieces are on their way; x is the kernel before's */
            flc_pdl_wait();
            flc_pdl_trigger();
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + 32 * u;
            if (c >= k8)
                break;
            float wf[NW][8];
#pragma unroll
            for (int q = 0; q < NW; q++)
                flc_unpack8(wv[u][q], wf[q]);
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (r < m) {
                    float xf[8];
                    flc_unpack8(__ldg(reinterpret_cast<const uint4 *>(x + (size_t)r * ldx) + c),
                                xf);
#pragma unroll
                    for (int q = 0; q < NW; q++)
#pragma unroll
                        for (int e = 0; e < 8; e++)
                            acc[q][r] = fmaf(wf[q][e], xf[e], acc[q][r]);
                }
            }
        }
    }
    flc_skinny_out<R, NW, MODE>(acc, lane, y, yh, ldy, m, j);
}

template <int R, int MODE>
__global__ void __launch_bounds__(128)
k_skinny(float *y, flc_bf16 *yh, int ldy, const flc_bf16 *__restrict__ x, int ldx, int m,
         const flc_bf16 *__restrict__ w, int n, int k)
{
    const int j = blockIdx.x * 4 + (threadIdx.x >> 5);
    if (j < n)
        flc_skinny_col<R, MODE>(y, yh, ldy, x, ldx, m, w, n, k, j, threadIdx.x & 31);
}

template <int MODE>
static cudaError_t flc_skinny_launch(float *y, flc_bf16 *yh, int ldy, const flc_bf16 *x, int ldx,
                                     int m, const flc_bf16 *w, int n, int k, bool pdl,
                                     cudaStream_t s)
{
    unsigned blocks = (unsigned)((n + 3) / 4);
    if (m <= 1)
        return flc_launch(pdl, k_skinny<1, MODE>, blocks, 128, s, y, yh, ldy, x, ldx, m, w, n, k);
    if (m <= 2)
        return flc_launch(pdl, k_skinny<2, MODE>, blocks, 128, s, y, yh, ldy, x, ldx, m, w, n, k);
    if (m <= 4)
        return flc_launch(pdl, k_skinny<4, MODE>, blocks, 128, s, y, yh, ldy, x, ldx, m, w, n, k);
    return flc_launch(pdl, k_skinny<8, MODE>, blocks, 128, s, y, yh, ldy, x, ldx, m, w, n, k);
}

cudaError_t flc_skinny(float *y, flc_bf16 *yh, int ldy, const flc_bf16 *x, int ldx, int m,
                       const flc_bf16 *w, int n, int k, int mode, bool pdl, cudaStream_t s)
{
    if (m <= 0 || m > FLC_SKINNY_MAX || k % 8 || ldx % 8)
        return cudaErrorInvalidValue;
    if (mode == FLC_MM_STORE)
        return flc_skinny_launch<FLC_MM_STORE>(y, yh, ldy, x, ldx, m, w, n, k, pdl, s);
    if (mode == FLC_MM_ACC)
        return flc_skinny_launch<FLC_MM_ACC>(y, yh, ldy, x, ldx, m, w, n, k, pdl, s);
    return flc_skinny_launch<FLC_MM_SWIGLU>(y, yh, ldy, x, ldx, m, w, n, k, pdl, s);
}

/* One mma.sync.m16n8k16 (bf16 in, f32 accumulate): d += a b, fragments as the PTX ISA lays
 * them out (tests/unit/test_mv_tc_emu.cc emulates exactly that layout). sm_80+. */
__device__ __forceinline__ void flc_mma_bf16(float (&d)[4], const unsigned (&a)[4],
                                             const unsigned (&b)[2])
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif defined(FL_CUDA_EMU)
    emu_mma_bf16(d, a, b);
#endif
}

__device__ __forceinline__ float flc_h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }

__device__ __forceinline__ unsigned flc_bf16x2(float lo, float hi)
{
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const unsigned *>(&v);
}

__device__ __forceinline__ void flc_prefetch_l2(const void *p)
{
#ifndef FL_CUDA_EMU
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#else
    (void)p;
#endif
}

#include "mv_tc.cuh"

/* The kernel for m rows: 1, 2 or 4 row tiles; with nz, the norm inside (not for
 * accumulation, which no norm precedes) */
template <int MODE, bool NORM>
static cudaError_t flc_mv_launch_n(float *y, flc_bf16 *yh, int ldy, const flc_bf16 *x, int ldx,
                                   int m, const flc_bf16 *w, const int8_t *wq,
                                   const uint16_t *wd, int n, int k, const flc_norm_in &nz,
                                   bool pdl, cudaStream_t s)
{
    const unsigned b = (unsigned)((n + 15) / 16), nt = 32 * FLC_MV_WARPS;
    if (wq) {
        if (m <= 8)
            return flc_launch(pdl, k_mv_tc_q8<MODE, 1, NORM>, b, nt, s, y, yh, ldy, x, ldx, m, wq,
                              wd, n, k, nz);
        if (m <= 16)
            return flc_launch(pdl, k_mv_tc_q8<MODE, 2, NORM>, b, nt, s, y, yh, ldy, x, ldx, m, wq,
                              wd, n, k, nz);
        return flc_launch(pdl, k_mv_tc_q8<MODE, 4, NORM>, b, nt, s, y, yh, ldy, x, ldx, m, wq, wd,
                          n, k, nz);
    }
    if (m <= 8)
        return flc_launch(pdl, k_mv_tc<MODE, 1, NORM>, b, nt, s, y, yh, ldy, x, ldx, m, w, n, k,
                          nz);
    if (m <= 16)
        return flc_launch(pdl, k_mv_tc<MODE, 2, NORM>, b, nt, s, y, yh, ldy, x, ldx, m, w, n, k,
                          nz);
    return flc_launch(pdl, k_mv_tc<MODE, 4, NORM>, b, nt, s, y, yh, ldy, x, ldx, m, w, n, k, nz);
}

template <int MODE>
static cudaError_t flc_mv_launch(float *y, flc_bf16 *yh, int ldy, const flc_bf16 *x, int ldx,
                                 int m, const flc_bf16 *w, const int8_t *wq, const uint16_t *wd,
                                 int n, int k, const flc_norm_in *nz, bool pdl, cudaStream_t s)
{
    constexpr bool CAN_NORM = MODE != FLC_MM_ACC; /* no instances that nothing launches */
    const flc_norm_in none = {NULL, NULL, NULL, 0.f};
    if (nz)
        return flc_mv_launch_n<MODE, CAN_NORM>(y, yh, ldy, x, ldx, m, w, wq, wd, n, k, *nz, pdl,
                                               s);
    return flc_mv_launch_n<MODE, false>(y, yh, ldy, x, ldx, m, w, wq, wd, n, k, none, pdl, s);
}

static cudaError_t flc_mv_any(float *y, flc_bf16 *yh, int ldy, const flc_bf16 *x, int ldx, int m,
                              const flc_bf16 *w, const int8_t *wq, const uint16_t *wd, int n,
                              int k, const flc_norm_in *nz, int mode, bool pdl, cudaStream_t s)
{
    if (m <= 0 || m > FLC_MV_MAX || k % 32 || n <= 0)
        return cudaErrorInvalidValue;
    if (nz ? mode == FLC_MM_ACC || !nz->x || !nz->w : ldx % 8 != 0)
        return cudaErrorInvalidValue;
    if (mode == FLC_MM_STORE)
        return flc_mv_launch<FLC_MM_STORE>(y, yh, ldy, x, ldx, m, w, wq, wd, n, k, nz, pdl, s);
    if (mode == FLC_MM_ACC)
        return flc_mv_launch<FLC_MM_ACC>(y, yh, ldy, x, ldx, m, w, wq, wd, n, k, nz, pdl, s);
    return flc_mv_launch<FLC_MM_SWIGLU>(y, yh, ldy, x, ldx, m, w, wq, wd, n, k, nz, pdl, s);
}

cudaError_t flc_mv_tc(float *y, flc_bf16 *yh, int ldy, const flc_bf16 *x, int ldx, int m,
                      const flc_bf16 *w, int n, int k, const flc_norm_in *nz, int mode, bool pdl,
                      cudaStream_t s)
{
    return flc_mv_any(y, yh, ldy, x, ldx, m, w, NULL, NULL, n, k, nz, mode, pdl, s);
}

cudaError_t flc_mv_tc_q8(float *y, flc_bf16 *yh, int ldy, const flc_bf16 *x, int ldx, int m,
                         const int8_t *wq, const uint16_t *wd, int n, int k,
                         const flc_norm_in *nz, int mode, bool pdl, cudaStream_t s)
{
    return flc_mv_any(y, yh, ldy, x, ldx, m, NULL, wq, wd, n, k, nz, mode, pdl, s);
}

#include "gemm_tc.cuh"

cudaError_t flc_gemm_q8(float *y, int ldy, const flc_bf16 *x, int ldx, int m, const int8_t *wq,
                        const uint16_t *wd, int n, int k, int mode, float *part, int *ticket,
                        int n_sm, bool pdl, cudaStream_t s)
{
    if (m <= 0 || n <= 0 || k <= 0 || k % 32 || ldx % 8 || n_sm <= 0 ||
        (mode != FLC_MM_STORE && mode != FLC_MM_ACC))
        return cudaErrorInvalidValue;
    flc_gq_plan p = flc_gq_plan_for(m, n, k, n_sm);
    if (p.tiles_m > 65535)
        return cudaErrorInvalidValue;
    if (p.splits > 1 && (!part || !ticket))
        p.splits = 1, p.gps = k / 32;
    dim3 grid((unsigned)p.tiles_n, (unsigned)p.tiles_m, (unsigned)p.splits);
    if (mode == FLC_MM_ACC)
        return flc_launch(pdl, k_gemm_q8<FLC_MM_ACC>, grid, FLC_GQ_THREADS, s, y, ldy, x, ldx,
                          m, wq, wd, n, k, p.gps, part, ticket);
    return flc_launch(pdl, k_gemm_q8<FLC_MM_STORE>, grid, FLC_GQ_THREADS, s, y, ldy, x, ldx, m,
                      wq, wd, n, k, p.gps, part, ticket);
}

/* ---------------------------------------------------------------- q8 weights (weight-only) */

/* q8 weights in qformat.h's plain layout: quants (n, k) int8 row-major, scales (n, k / 32) f16
 * (FL_QG = 32 weights a group); weight = scale * quant. Activations stay bf16: only the
 * weights are 8-bit, so a product differs from the bf16 one by the weights' rounding alone. */

/* 16 int8 quants as floats */
__device__ __forceinline__ void flc_unpack16_i8(const uint4 &raw, float *f)
{
    const int8_t *b = reinterpret_cast<const int8_t *>(&raw);
#pragma unroll
    for (int i = 0; i < 16; i++)
        f[i] = (float)b[i];
}

/* k_skinny with q8 weights: warp w of block b computes output column j = 4b + w; a lane's
 * piece c is 16 quants of row j (group c / 2, whose scale multiplies the piece's sum), read
 * once, streaming. k % 32 == 0. */
template <int R, int MODE, bool STREAM = true>
__device__ __forceinline__ void flc_skinny_q8_col(float *y, flc_bf16 *yh, int ldy,
                                                  const flc_bf16 *__restrict__ x, int ldx, int m,
                                                  const int8_t *__restrict__ wq,
                                                  const uint16_t *__restrict__ wd, int n, int k,
                                                  int j, int lane)
{
    constexpr int NW = MODE == FLC_MM_SWIGLU ? 2 : 1;
    constexpr int U = 4;
    const int k16 = k >> 4, G = k >> 5;
    const uint4 *wr[NW];
    const __half *dr[NW];
    wr[0] = reinterpret_cast<const uint4 *>(wq + (size_t)j * k);
    dr[0] = reinterpret_cast<const __half *>(wd) + (size_t)j * G;
    if (NW == 2) {
        wr[NW - 1] = reinterpret_cast<const uint4 *>(wq + (size_t)(j + n) * k);
        dr[NW - 1] = reinterpret_cast<const __half *>(wd) + (size_t)(j + n) * G;
    }
    float acc[NW][R];
#pragma unroll
    for (int q = 0; q < NW; q++)
#pragma unroll
        for (int r = 0; r < R; r++)
            acc[q][r] = 0.f;
    for (int c0 = lane; c0 < k16; c0 += 32 * U) {
        uint4 wv[U][NW];
        float dv[U][NW];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + 32 * u;
#pragma unroll
            for (int q = 0; q < NW; q++) {
                wv[u][q] = c < k16 ? flc_skinny_ld<STREAM>(wr[q] + c) : make_uint4(0, 0, 0, 0);
                dv[u][q] = c < k16 ? __half2float(dr[q][c >> 1]) : 0.f;
            }
        }
        if (c0 == lane) { /* as in flc_skinny_col */
            flc_pdl_wait();
            flc_pdl_trigger();
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + 32 * u;
            if (c >= k16)
                break;
            float wf[NW][16];
#pragma unroll
            for (int q = 0; q < NW; q++)
                flc_unpack16_i8(wv[u][q], wf[q]);
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (r < m) {
                    float xf[16];
                    const uint4 *xr = reinterpret_cast<const uint4 *>(x + (size_t)r * ldx);
                    flc_unpack8(__ldg(xr + 2 * c), xf);
                    flc_unpack8(__ldg(xr + 2 * c + 1), xf + 8);
#pragma unroll
                    for (int q = 0; q < NW; q++) {
                        float sum = 0.f;
#pragma unroll
                        for (int e = 0; e < 16; e++)
                            sum = fmaf(wf[q][e], xf[e], sum);
                        acc[q][r] = fmaf(dv[u][q], sum, acc[q][r]);
                    }
                }
            }
        }
    }
    flc_skinny_out<R, NW, MODE>(acc, lane, y, yh, ldy, m, j);
}

template <int R, int MODE>
__global__ void __launch_bounds__(128)
k_skinny_q8(float *y, flc_bf16 *yh, int ldy, const flc_bf16 *__restrict__ x, int ldx, int m,
            const int8_t *__restrict__ wq, const uint16_t *__restrict__ wd, int n, int k)
{
    const int j = blockIdx.x * 4 + (threadIdx.x >> 5);
    if (j < n)
        flc_skinny_q8_col<R, MODE>(y, yh, ldy, x, ldx, m, wq, wd, n, k, j, threadIdx.x & 31);
}

template <int MODE>
static cudaError_t flc_skinny_q8_launch(float *y, flc_bf16 *yh, int ldy, const flc_bf16 *x,
                                        int ldx, int m, const int8_t *wq, const uint16_t *wd,
                                        int n, int k, bool pdl, cudaStream_t s)
{
    unsigned b = (unsigned)((n + 3) / 4);
    if (m <= 1)
        return flc_launch(pdl, k_skinny_q8<1, MODE>, b, 128, s, y, yh, ldy, x, ldx, m, wq, wd, n,
                          k);
    if (m <= 2)
        return flc_launch(pdl, k_skinny_q8<2, MODE>, b, 128, s, y, yh, ldy, x, ldx, m, wq, wd, n,
                          k);
    if (m <= 4)
        return flc_launch(pdl, k_skinny_q8<4, MODE>, b, 128, s, y, yh, ldy, x, ldx, m, wq, wd, n,
                          k);
    return flc_launch(pdl, k_skinny_q8<8, MODE>, b, 128, s, y, yh, ldy, x, ldx, m, wq, wd, n, k);
}

cudaError_t flc_skinny_q8(float *y, flc_bf16 *yh, int ldy, const flc_bf16 *x, int ldx, int m,
                          const int8_t *wq, const uint16_t *wd, int n, int k, int mode, bool pdl,
                          cudaStream_t s)
{
    if (m <= 0 || m > FLC_SKINNY_MAX || k % 32 || ldx % 8)
        return cudaErrorInvalidValue;
    if (mode == FLC_MM_STORE)
        return flc_skinny_q8_launch<FLC_MM_STORE>(y, yh, ldy, x, ldx, m, wq, wd, n, k, pdl, s);
    if (mode == FLC_MM_ACC)
        return flc_skinny_q8_launch<FLC_MM_ACC>(y, yh, ldy, x, ldx, m, wq, wd, n, k, pdl, s);
    return flc_skinny_q8_launch<FLC_MM_SWIGLU>(y, yh, ldy, x, ldx, m, wq, wd, n, k, pdl, s);
}

/* w (n, k) bf16 = the q8 weights, for cuBLAS at row counts the streaming kernel does not
 * take: a thread widens 16 quants (one piece) and rounds scale * quant to bf16. */
__global__ void k_dequant_q8(flc_bf16 *w, const int8_t *__restrict__ wq,
                             const uint16_t *__restrict__ wd, size_t pieces)
{
    for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < pieces;
         p += (size_t)gridDim.x * blockDim.x) {
        float f[16];
        flc_unpack16_i8(__ldcs(reinterpret_cast<const uint4 *>(wq) + p), f);
        const float d = __half2float(reinterpret_cast<const __half *>(wd)[p >> 1]);
        __nv_bfloat162 o[8];
#pragma unroll
        for (int i = 0; i < 8; i++)
            o[i] = __floats2bfloat162_rn(d * f[2 * i], d * f[2 * i + 1]);
        uint4 *dst = reinterpret_cast<uint4 *>(w + p * 16);
        dst[0] = *reinterpret_cast<const uint4 *>(&o[0]);
        dst[1] = *reinterpret_cast<const uint4 *>(&o[4]);
    }
}

cudaError_t flc_dequant_q8(flc_bf16 *w, const int8_t *wq, const uint16_t *wd, int n, int k,
                           cudaStream_t s)
{
    if (n <= 0 || k % 32)
        return cudaErrorInvalidValue;
    size_t pieces = (size_t)n * (size_t)k / 16;
    size_t blocks = (pieces + 255) / 256;
    return flc_launch(false, k_dequant_q8, dim3((unsigned)(blocks < 65535 ? blocks : 65535)),
                      dim3(256), s, w, wq, wd, pieces);
}

__global__ void k_swiglu(flc_bf16 *hb, const float *gu, int NI, size_t total)
{
    FLC_PDL_ENTER();
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        size_t t = idx / NI, j = idx % NI;
        const float gt = gu[t * 2 * NI + j], up = gu[t * 2 * NI + NI + j];
        hb[idx] = __float2bfloat16_rn(gt / (1.0f + expf(-gt)) * up);
    }
}

cudaError_t flc_swiglu(flc_bf16 *hb, const float *gu, int T, int NI, bool pdl, cudaStream_t s)
{
    size_t total = (size_t)T * NI;
    unsigned blocks = (unsigned)((total + 255) / 256 < 65535 ? (total + 255) / 256 : 65535);
    return flc_launch(pdl, k_swiglu, blocks, 256, s, hb, gu, NI, total);
}

/* ---------------------------------------------------------------- softmax statistics */

/* Block (row, chunk): the chunk's max, its argmax (lowest id among equal maxima), and the
 * sums of e^u and e^u * u with u = l - max, as fl_lse_add computes them. */
__global__ void k_top1_chunk(flc_lse *lse, const float *logits, int V, int nch)
{
    __shared__ float smx[32];
    __shared__ int sarg[32];
    __shared__ double sh[32];
    FLC_PDL_ENTER();
    const int row = blockIdx.x, ch = blockIdx.y, tid = threadIdx.x;
    const int lane = tid & 31, wp = tid >> 5, nw = blockDim.x >> 5;
    const int v0 = ch * FLC_VCHUNK, v1 = min(V, v0 + FLC_VCHUNK);
    const float *l = logits + (size_t)row * V;
    float mx = -INFINITY;
    int arg = -1;
    for (int v = v0 + tid; v < v1; v += blockDim.x) {
        float x = l[v];
        if (x > mx) { /* a NaN is never greater: skipped, as on the CPU */
            mx = x;
            arg = v;
        }
    }
    for (int o = 16; o; o >>= 1) {
        float om = __shfl_xor_sync(FULL, mx, o);
        int oa = __shfl_xor_sync(FULL, arg, o);
        if (oa >= 0 && (om > mx || (om == mx && (arg < 0 || oa < arg)))) {
            mx = om;
            arg = oa;
        }
    }
    if (lane == 0) {
        smx[wp] = mx;
        sarg[wp] = arg;
    }
    __syncthreads();
    mx = -INFINITY;
    arg = -1;
    for (int i = 0; i < nw; i++) /* the same order in every thread */
        if (sarg[i] >= 0 && (smx[i] > mx || (smx[i] == mx && (arg < 0 || sarg[i] < arg)))) {
            mx = smx[i];
            arg = sarg[i];
        }
    flc_lse out;
    out.max = mx;
    out.arg = arg;
    out.sum = 0;
    out.sum_u = 0;
    if (arg >= 0) { /* uniform across the block */
        double s = 0, su = 0;
        for (int v = v0 + tid; v < v1; v += blockDim.x) {
            float u = l[v] - mx;
            float e = expf(u);
            s += e;
            su += (double)e * u;
        }
        out.sum = flc_block_sum_d(s, sh);
        out.sum_u = flc_block_sum_d(su, sh);
    } else {
        out.max = -INFINITY;
    }
    if (tid == 0)
        lse[(size_t)row * nch + ch] = out;
}

__device__ void flc_lse_rebase(flc_lse &s, float mnew)
{
    if (s.sum > 0) {
        double dd = (double)s.max - (double)mnew, f = exp(dd);
        s.sum_u = f * (s.sum_u + dd * s.sum);
        s.sum = f * s.sum;
    }
    s.max = mnew;
}

/* fl_lse_merge: b's ids are above a's; the lower id wins a tie. */
__device__ void flc_lse_merge(flc_lse &a, flc_lse b)
{
    if (b.arg < 0)
        return;
    if (a.arg < 0) {
        a = b;
        return;
    }
    int32_t arg = b.max > a.max ? b.arg : b.max < a.max ? a.arg : min(a.arg, b.arg);
    float mm = a.max > b.max ? a.max : b.max;
    if (a.max < mm)
        flc_lse_rebase(a, mm);
    if (b.max < mm)
        flc_lse_rebase(b, mm);
    a.sum += b.sum;
    a.sum_u += b.sum_u;
    a.arg = arg;
}

__global__ void k_top1_merge(flc_tok *out, const flc_lse *lse, int rows, int nch)
{
    FLC_PDL_ENTER();
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows)
        return;
    flc_lse a = lse[(size_t)row * nch];
    for (int ch = 1; ch < nch; ch++)
        flc_lse_merge(a, lse[(size_t)row * nch + ch]);
    flc_tok t;
    if (a.arg < 0 || !(a.sum > 0)) { /* fl_lse_finish: no finite logit */
        t.token = a.arg < 0 ? 0 : a.arg;
        t.prob = 0.f;
        t.entropy = NAN;
    } else {
        t.token = a.arg;
        t.prob = (float)(1.0 / a.sum);
        double h = log(a.sum) - a.sum_u / a.sum;
        t.entropy = (float)(h > 0 ? h : 0);
    }
    out[row] = t;
}

cudaError_t flc_top1(flc_tok *out, flc_lse *lse, const float *logits, int rows, int V, bool pdl,
                     cudaStream_t s)
{
    if (rows <= 0)
        return cudaSuccess;
    int nch = (V + FLC_VCHUNK - 1) / FLC_VCHUNK;
    cudaError_t err = flc_launch(pdl, k_top1_chunk, dim3((unsigned)rows, (unsigned)nch), 256, s,
                                 lse, logits, V, nch);
    if (err != cudaSuccess)
        return err;
    return flc_launch(pdl, k_top1_merge, (unsigned)((rows + 63) / 64), 64, s, out, lse, rows,
                      nch);
}

/* ---------------------------------------------------------------- mixture of experts */

#include "router.cuh"

/* Block (t, r): RT tokens' RMSNorms in f32 into shared memory (xn), then a warp per expert of
 * range r (router.cuh) */
template <int RT>
__global__ void __launch_bounds__(256)
k_router(float *lg, const float *x, const float *nw, const float *R, int T, int H, int E,
         float eps)
{
    FLC_DYN_SHARED(float, xn); /* RT H */
    __shared__ double sh[32];
    FLC_PDL_ENTER();
    flc_router_block<RT>(xn, sh, lg, x, nw, R, T, H, E, eps);
}

cudaError_t flc_router(float *logits, const float *x, const float *norm_w, const float *router,
                       int T, int H, int E, float eps, int n_sm, bool pdl, cudaStream_t s)
{
    if (T <= 0)
        return cudaSuccess;
    /* 48 KiB a block without opting in, less sh; create admits hidden <= 12224 */
    const flc_router_plan p = flc_router_plan_for(T, H, E, n_sm, 48 * 1024 - 256);
    if (p.rt == 0)
        return cudaErrorInvalidValue;
    const dim3 grid((unsigned)p.tblocks, (unsigned)p.eblocks);
    const size_t shm = (size_t)p.rt * H * sizeof(float);
    return flc_launch_smem(pdl, p.rt == 4 ? k_router<4> : p.rt == 2 ? k_router<2> : k_router<1>,
                           grid, 256, shm, s, logits, x, norm_w, router, T, H, E, eps);
}

#include "route.cuh"

/* Block t routes token t (route.cuh) */
__global__ void k_route(int32_t *rid, float *rw, const float *lg, const float *bias,
                        flc_route r)
{
    FLC_DYN_SHARED(float, sm);
    __shared__ float red[2];
    FLC_PDL_ENTER();
    flc_route_block(sm, red, rid, rw, lg, bias, r);
}

cudaError_t flc_route_tokens(int32_t *rid, float *rw, const float *logits, const float *bias,
                             flc_route r, int T, bool pdl, cudaStream_t s)
{
    if (T <= 0)
        return cudaSuccess;
    size_t shm = (3 * (size_t)r.E + 2 * (size_t)r.G) * sizeof(float);
    return flc_launch_smem(pdl, k_route, (unsigned)T, 128, shm, s, rid, rw, logits, bias, r);
}

#include "moe_assign.cuh"

/* One block of 1,024 threads (moe_assign.cuh) */
__global__ void __launch_bounds__(1024)
k_moe_assign(int32_t *eoff, int32_t *atok, int32_t *apos, const int32_t *rid, int A, int K, int E,
             int C)
{
    FLC_DYN_SHARED(int32_t, sa);
    FLC_PDL_ENTER();
    flc_moe_assign_block(sa, eoff, atok, apos, rid, A, K, E, C);
}

cudaError_t flc_moe_assign(int32_t *eoff, int32_t *atok, int32_t *apos, const int32_t *rid,
                           int A, int K, int E, bool pdl, cudaStream_t s)
{
    const int C = flc_assign_chunks(E, 1024);
    const size_t shm = flc_assign_smem_ints(E, C) * sizeof(int32_t);
    if (shm > 48 * 1024)
        return cudaErrorInvalidValue;
    return flc_launch_smem(pdl, k_moe_assign, 1, 1024, shm, s, eoff, atok, apos, rid, A, K, E, C);
}

/* Block (b, e): output columns 4b .. 4b + 3 of expert e for its rows [eoff[e], eoff[e + 1])
 * of x and y, 8 rows at a time (with more than 8 the weights are loaded to stay in L2 for the
 * next 8); an expert without rows returns at once. */
template <int MODE, bool Q8>
__global__ void __launch_bounds__(128)
k_moe_mm(float *y, flc_bf16 *yh, int ldy, const flc_bf16 *__restrict__ x, int ldx,
         const flc_emat *mats, const int32_t *eoff, int n, int k)
{
    FLC_PDL_ENTER(); /* eoff and x are the kernels' before */
    const int e = blockIdx.y, a0 = eoff[e], me = eoff[e + 1] - a0;
    const int j = blockIdx.x * 4 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (me <= 0 || j >= n)
        return;
    const flc_emat wm = mats[e];
    const bool once = me <= 8; /* one pass: stream the weights; more: keep them in L2 */
    for (int r0 = 0; r0 < me; r0 += 8) {
        const int mm = me - r0 < 8 ? me - r0 : 8;
        float *yy = y ? y + (size_t)(a0 + r0) * ldy : NULL;
        flc_bf16 *yyh = yh ? yh + (size_t)(a0 + r0) * ldy : NULL;
        const flc_bf16 *xx = x + (size_t)(a0 + r0) * ldx;
        if (Q8 && once)
            flc_skinny_q8_col<8, MODE, true>(yy, yyh, ldy, xx, ldx, mm, wm.q, wm.d, n, k, j, lane);
        else if (Q8)
            flc_skinny_q8_col<8, MODE, false>(yy, yyh, ldy, xx, ldx, mm, wm.q, wm.d, n, k, j, lane);
        else if (once)
            flc_skinny_col<8, MODE, true>(yy, yyh, ldy, xx, ldx, mm, wm.w, n, k, j, lane);
        else
            flc_skinny_col<8, MODE, false>(yy, yyh, ldy, xx, ldx, mm, wm.w, n, k, j, lane);
    }
}

cudaError_t flc_moe_mv_tc(float *y, flc_bf16 *yh, int ldy, const flc_bf16 *x, int ldx,
                          const flc_emat *mats, bool q8, const int32_t *eoff, int E, int n, int k,
                          int mode, bool pdl, cudaStream_t s)
{
    if (k % 32 || ldx % 8 || (mode != FLC_MM_STORE && mode != FLC_MM_SWIGLU))
        return cudaErrorInvalidValue;
    dim3 grid((unsigned)((n + 15) / 16), (unsigned)E);
    const unsigned nt = 32 * FLC_MV_WARPS;
    void (*kf)(float *, flc_bf16 *, int, const flc_bf16 *, int, const flc_emat *,
               const int32_t *, int, int) =
        mode == FLC_MM_SWIGLU
            ? (q8 ? k_moe_mv_tc<FLC_MM_SWIGLU, true> : k_moe_mv_tc<FLC_MM_SWIGLU, false>)
            : (q8 ? k_moe_mv_tc<FLC_MM_STORE, true> : k_moe_mv_tc<FLC_MM_STORE, false>);
    return flc_launch(pdl, kf, grid, nt, s, y, yh, ldy, x, ldx, mats, eoff, n, k);
}

cudaError_t flc_moe_gemm(float *y, flc_bf16 *yh, int ldy, const flc_bf16 *x, int ldx,
                         const flc_emat *mats, bool q8, const int32_t *eoff, int E, int n, int k,
                         int mode, bool pdl, cudaStream_t s)
{
    if (k % 32 || ldx % 8 || E <= 0 || (mode != FLC_MM_STORE && mode != FLC_MM_SWIGLU))
        return cudaErrorInvalidValue;
    const int bn = mode == FLC_MM_SWIGLU ? FLC_GQ_BN / 2 : FLC_GQ_BN;
    dim3 grid((unsigned)((n + bn - 1) / bn), (unsigned)E);
    void (*kf)(float *, flc_bf16 *, int, const flc_bf16 *, int, const flc_emat *,
               const int32_t *, int, int) =
        mode == FLC_MM_SWIGLU
            ? (q8 ? k_moe_gemm<FLC_MM_SWIGLU, true> : k_moe_gemm<FLC_MM_SWIGLU, false>)
            : (q8 ? k_moe_gemm<FLC_MM_STORE, true> : k_moe_gemm<FLC_MM_STORE, false>);
    return flc_launch(pdl, kf, grid, FLC_GQ_THREADS, s, y, yh, ldy, x, ldx, mats, eoff, n, k);
}

cudaError_t flc_moe_mm(float *y, flc_bf16 *yh, int ldy, const flc_bf16 *x, int ldx,
                       const flc_emat *mats, bool q8, const int32_t *eoff, int E, int n, int k,
                       int mode, bool pdl, cudaStream_t s)
{
    if (k % (q8 ? 32 : 8) || ldx % 8 || (mode != FLC_MM_STORE && mode != FLC_MM_SWIGLU))
        return cudaErrorInvalidValue;
    dim3 grid((unsigned)((n + 3) / 4), (unsigned)E);
    void (*kf)(float *, flc_bf16 *, int, const flc_bf16 *, int, const flc_emat *,
               const int32_t *, int, int) =
        mode == FLC_MM_SWIGLU
            ? (q8 ? k_moe_mm<FLC_MM_SWIGLU, true> : k_moe_mm<FLC_MM_SWIGLU, false>)
            : (q8 ? k_moe_mm<FLC_MM_STORE, true> : k_moe_mm<FLC_MM_STORE, false>);
    return flc_launch(pdl, kf, grid, 128, s, y, yh, ldy, x, ldx, mats, eoff, n, k);
}

__global__ void k_gather_rows(flc_bf16 *xg, const flc_bf16 *xb, const int32_t *rows, int H)
{
    FLC_PDL_ENTER();
    const int a = blockIdx.x;
    const flc_bf16 *src = xb + (size_t)rows[a] * H;
    flc_bf16 *dst = xg + (size_t)a * H;
    for (int i = threadIdx.x; i < H; i += blockDim.x)
        dst[i] = src[i];
}

cudaError_t flc_gather_rows(flc_bf16 *xg, const flc_bf16 *xb, const int32_t *rows, int A, int H,
                            bool pdl, cudaStream_t s)
{
    if (A <= 0)
        return cudaSuccess;
    return flc_launch(pdl, k_gather_rows, (unsigned)A, 256, s, xg, xb, rows, H);
}

__global__ void k_moe_combine(float *x, const float *ey, const int32_t *apos, const float *w,
                              const float *sy, int K, int H)
{
    FLC_PDL_ENTER();
    const int t = blockIdx.x;
    for (int d = threadIdx.x; d < H; d += blockDim.x) {
        float acc = 0.f;
        for (int k = 0; k < K; k++)
            acc = __fadd_rn(acc, __fmul_rn(w[t * K + k], ey[(size_t)apos[t * K + k] * H + d]));
        if (sy)
            acc = __fadd_rn(acc, sy[(size_t)t * H + d]);
        x[(size_t)t * H + d] += acc;
    }
}

cudaError_t flc_moe_combine(float *x, const float *ey, const int32_t *apos, const float *w,
                            const float *sy, int T, int K, int H, bool pdl, cudaStream_t s)
{
    if (T <= 0)
        return cudaSuccess;
    return flc_launch(pdl, k_moe_combine, (unsigned)T, 256, s, x, ey, apos, w, sy, K, H);
}

cudaError_t flc_kernels_loadable(void)
{
    cudaFuncAttributes a;
    return cudaFuncGetAttributes(&a, k_embed);
}
