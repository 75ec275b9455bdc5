/* cuda_kernels.cuh: our kernels for the CUDA backend (cuda_kernels.cu), launched by
 * cuda_backend.cu. Every launcher enqueues on the given stream and returns
 * cudaGetLastError(), so a bad launch is reported where it happens.
 *
 * Everything a kernel reads that changes from one forward to the next (tokens, positions,
 * segments, page tables, which rows are wanted, the attention split length) lives in the
 * device metadata block described by flc_meta, never in kernel arguments: the same launches
 * can then be captured once in a CUDA graph and replayed for every batch of the same shape.
 *
 * Layouts (row-major; T = tokens of the forward):
 *   x      f32  (T, H)              residual stream
 *   xb     bf16 (T, H)              normed input of a projection
 *   qkv    f32  (T, qd + 2 kvd)     q | k | v; q is finished (norm, RoPE) in place
 *   kvo    bf16 (T, 2, kvh, hd)     this forward's finished K and V, as a page would hold them
 *   att    bf16 (T, qd)             attention output
 *   pool   bf16 (n_pages, L, 2, kvh, B, hd)   the KV pages: the host layout of backend.h in
 *                                   bf16 (page_read widens it to f32) */
#ifndef FL_CUDA_KERNELS_CUH
#define FL_CUDA_KERNELS_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

typedef __nv_bfloat16 flc_bf16;

#include "flc_meta.h"

/* Softmax statistics of one chunk of a row's logits (engine/kernels.h fl_lse, per chunk). */
typedef struct flc_lse {
    float max;
    int32_t arg; /* -1: no logit above -inf in the chunk */
    double sum, sum_u;
} flc_lse;

/* One row's result (backend.h fl_tok_out). */
typedef struct flc_tok {
    int32_t token;
    float prob, entropy;
} flc_tok;

/* x[t] = embed[tokens[t]] widened, t < T. */
cudaError_t flc_embed(float *x, const flc_bf16 *embed, flc_meta m, int T, int H, cudaStream_t s);

/* out[r] = bf16(w * x[src] / rms(x[src])), src = gather ? gather[r] : r, r < rows. */
cudaError_t flc_rmsnorm(flc_bf16 *out, const float *x, const float *w, const int32_t *gather,
                        int rows, int H, float eps, bool pdl, cudaStream_t s);

/* Bias, q/k norm and RoPE of every head of every token; q back into qkv (f32), K and V
 * rounded to bf16 into kvo and, for tokens with tok_store >= 0, into their page slot of
 * layer `layer`. bias/qn/kn may be NULL. */
cudaError_t flc_qkv_post(float *qkv, flc_bf16 *kvo, flc_bf16 *pool, const float *bias,
                         const float *qn, const float *kn, const double *inv_freq, flc_meta m,
                         flc_dims d, int layer, int T, bool pdl, cudaStream_t s);

/* With partial rotary (d.rd < d.hd, LLaDA2) flc_qkv_post rotates the first rd dims of each
 * q/k head as pairs (i, i + rd/2), after the q/k norm over all hd, and leaves the rest. */

/* Block-causal attention of every query row over its keys: pages for positions before its
 * segment, kvo for the segment's own. Grid: (tiles_bound, kvh, n_splits); with n_splits 1
 * the result goes straight to att, else partial results go to part (tiles_bound * kvh *
 * n_splits * FLC_QROWS * (hd + 2) floats) and flc_attn_combine finishes them. With
 * tensor_cores (FL_CUDA_ATTN=tc) and a head_dim flc_attention_tc_ok takes, the products run
 * on tensor cores (wmma, bf16, f32 accumulate); the results agree to bf16 precision. */
cudaError_t flc_attention(flc_bf16 *att, float *part, const float *qkv, const flc_bf16 *kvo,
                          const flc_bf16 *pool, flc_meta m, flc_dims d, int layer,
                          int tiles_bound, int n_splits, bool tensor_cores, bool pdl,
                          cudaStream_t s);
/* Whether the tensor-core attention (tensor_cores above) takes this head_dim; the CUDA-core
 * kernel runs otherwise. */
bool flc_attention_tc_ok(int hd);
/* The attention for few query rows per KV group (attn_few.cuh; FL_CUDA_ATTN=few): the same
 * grid, tiles and splits as flc_attention, all keys of a chunk of 64 loaded at once, and the
 * splits merged by the last block of each (tile, group) to finish, so no flc_attn_combine.
 * ticket: tiles_bound * kvh ints, zero before the first launch; the kernel leaves them zero.
 * rows8: every tile has at most 8 query rows (T * rep <= 8). hd % 8 == 0, hd <= 128
 * (flc_attention_few_ok). */
cudaError_t flc_attention_few(flc_bf16 *att, float *part, int *ticket, const float *qkv,
                              const flc_bf16 *kvo, const flc_bf16 *pool, flc_meta m, flc_dims d,
                              int layer, int tiles_bound, int n_splits, bool rows8, bool pdl,
                              cudaStream_t s);
bool flc_attention_few_ok(int hd);
cudaError_t flc_attn_combine(flc_bf16 *att, const float *part, flc_meta m, flc_dims d,
                             int tiles_bound, int n_splits, bool pdl, cudaStream_t s);

/* Weight-streaming matmul for m <= FLC_SKINNY_MAX rows: Y (m, n) = X (m, k) W^T, W (n, k)
 * bf16, k % 8 == 0, X rows 16-byte aligned (ldx % 8 == 0). mode 0: y = ; mode 1: y += ;
 * mode 2 (SwiGLU): W is (2n, k), gate rows then up rows, and yh (m, n) bf16 =
 * silu(gate) * up. Each output is summed in the same order whatever m is. */
enum { FLC_MM_STORE = 0, FLC_MM_ACC = 1, FLC_MM_SWIGLU = 2 };
/* pdl (here and in the launchers above and below): launched with programmatic stream
 * serialization (sm_90, FL_CUDA_PDL=1): the kernel may start while the kernel before it in
 * the stream finishes and waits for that one's results before it reads them (cuda_kernels.cu,
 * flc_pdl_wait); a streaming matmul loads its first weights before it waits. Only for a
 * kernel whose predecessor in the stream is a kernel. */
cudaError_t flc_skinny(float *y, flc_bf16 *yh, int ldy, const flc_bf16 *x, int ldx, int m,
                       const flc_bf16 *w, int n, int k, int mode, bool pdl, cudaStream_t s);
/* flc_skinny on tensor cores (mv_tc.cuh; FL_CUDA_MV=tc): the same modes, up to FLC_MV_MAX
 * (32) rows with the weights read once, k % 32 == 0, each output summed in an order that
 * does not depend on m; sm_80+. With nz (store and SwiGLU only), x is not read: the input
 * rows are nz's RMSNorm of its f32 rows, with the bits flc_rmsnorm would have written. */
cudaError_t flc_mv_tc(float *y, flc_bf16 *yh, int ldy, const flc_bf16 *x, int ldx, int m,
                      const flc_bf16 *w, int n, int k, const flc_norm_in *nz, int mode, bool pdl,
                      cudaStream_t s);
/* flc_skinny_q8 on tensor cores: each group of 32 summed exactly (quants are exact in bf16)
 * and scaled, as flc_skinny_q8 does */
cudaError_t flc_mv_tc_q8(float *y, flc_bf16 *yh, int ldy, const flc_bf16 *x, int ldx, int m,
                         const int8_t *wq, const uint16_t *wd, int n, int k,
                         const flc_norm_in *nz, int mode, bool pdl, cudaStream_t s);

/* hb (T, NI) = bf16(silu(gu[:, :NI]) * gu[:, NI:]), gu f32 (T, 2 NI). */
/* q8 weights (qformat.h's plain layout: quants (n, k) int8, scales (n, k / 32) f16; k % 32
 * == 0): the streaming matmul for up to FLC_SKINNY_MAX rows, as flc_skinny, and the bf16
 * copy cuBLAS multiplies by for more rows */
cudaError_t flc_skinny_q8(float *y, flc_bf16 *yh, int ldy, const flc_bf16 *x, int ldx, int m,
                          const int8_t *wq, const uint16_t *wd, int n, int k, int mode, bool pdl,
                          cudaStream_t s);
cudaError_t flc_dequant_q8(flc_bf16 *w, const int8_t *wq, const uint16_t *wd, int n, int k,
                           cudaStream_t s);
/* Y (m, n) = (FLC_MM_STORE) or += (FLC_MM_ACC) X W^T with W q8, any m, on tensor cores
 * (gemm_tc.cuh; FL_CUDA_Q8_GEMM=1): the quants read directly, the CPU q8's arithmetic (each
 * group's sum scaled). part (2 n_sm * FLC_GQ_TILE floats) and ticket (2 n_sm ints, zero) let
 * it split k when the tiles would not fill the n_sm multiprocessors; NULL: no splits. */
cudaError_t flc_gemm_q8(float *y, int ldy, const flc_bf16 *x, int ldx, int m, const int8_t *wq,
                        const uint16_t *wd, int n, int k, int mode, float *part, int *ticket,
                        int n_sm, bool pdl, cudaStream_t s);

cudaError_t flc_swiglu(flc_bf16 *hb, const float *gu, int T, int NI, bool pdl, cudaStream_t s);

/* Softmax statistics of rows logits (rows, V): per chunk of FLC_VCHUNK ids into
 * lse (rows, nchunks), then merged in chunk order into out (rows). */
cudaError_t flc_top1(flc_tok *out, flc_lse *lse, const float *logits, int rows, int V, bool pdl,
                     cudaStream_t s);

/* Mixture of experts (cuda_backend.cu flc_moe); every kernel waits first (FLC_PDL_ENTER),
 * so each may be launched with pdl. Router logits (T, E) f32 of each token's
 * RMSNorm in f32 (norm_w, as the CPU computes the router's input) by router (E, H) f32;
 * several tokens a block and the experts spread over about 2 n_sm blocks (router.cuh), the
 * same bits for any T. */
cudaError_t flc_router(float *logits, const float *x, const float *norm_w, const float *router,
                       int T, int H, int E, float eps, int n_sm, bool pdl, cudaStream_t s);
/* Each of the T tokens' top_k experts (rid (T, K), best first) and weights (rw (T, K)) from
 * its router logits (T, E), as engine/moe.c fl_moe_route computes them (route.cuh); bias (E)
 * or NULL; r: config.h's fl_moe as flc_meta.h's flc_route. */
cudaError_t flc_route_tokens(int32_t *rid, float *rw, const float *logits, const float *bias,
                             flc_route r, int T, bool pdl, cudaStream_t s);
/* The A = T K assignments in expert order: eoff (E + 2) the first assignment of each expert
 * (eoff[E] = eoff[E + 1] = A), atok (A) each one's token, apos (A) where assignment a (token
 * a / K's k-th expert) went. One block; E <= 1024. */
cudaError_t flc_moe_assign(int32_t *eoff, int32_t *atok, int32_t *apos, const int32_t *rid,
                           int A, int K, int E, bool pdl, cudaStream_t s);
/* An expert's matrix, as the backend holds it: bf16 (w), or q8 (q, d; w NULL). */
typedef struct flc_emat {
    const flc_bf16 *w;
    const int8_t *q;
    const uint16_t *d;
} flc_emat;
/* For each expert e of E with rows [eoff[e], eoff[e + 1]) of x: y = x W_e^T (mode STORE) or
 * yh = SwiGLU (mode SWIGLU: W_e (2n, k), gate rows then up rows), as flc_skinny computes
 * each row; mats (E) on the device, all bf16 or all q8 (q8). One launch for every expert:
 * blocks of experts without rows return at once, so the launch is the same for any routing
 * (a graph replays it). */
cudaError_t flc_moe_mm(float *y, flc_bf16 *yh, int ldy, const flc_bf16 *x, int ldx,
                       const flc_emat *mats, bool q8, const int32_t *eoff, int E, int n, int k,
                       int mode, bool pdl, cudaStream_t s);
/* flc_moe_mm on tensor cores (mv_tc.cuh, FL_CUDA_MV=tc): an expert's rows 32 at a time, its
 * weights read once for up to 32 rows; k % 32 == 0. */
cudaError_t flc_moe_mv_tc(float *y, flc_bf16 *yh, int ldy, const flc_bf16 *x, int ldx,
                          const flc_emat *mats, bool q8, const int32_t *eoff, int E, int n, int k,
                          int mode, bool pdl, cudaStream_t s);
/* flc_moe_mm grouped on tensor cores (gemm_tc.cuh, FL_CUDA_MOE_GEMM=1): an expert's rows 64 at
 * a time against 64 of its output columns (32 with SwiGLU) staged in shared memory, for
 * prefills' tens of rows per expert; k % 32 == 0, ldx % 8 == 0. */
cudaError_t flc_moe_gemm(float *y, flc_bf16 *yh, int ldy, const flc_bf16 *x, int ldx,
                         const flc_emat *mats, bool q8, const int32_t *eoff, int E, int n, int k,
                         int mode, bool pdl, cudaStream_t s);
/* xg[a] = xb[rows[a]] (H wide, bf16), a < A. */
cudaError_t flc_gather_rows(flc_bf16 *xg, const flc_bf16 *xb, const int32_t *rows, int A, int H,
                            bool pdl, cudaStream_t s);
/* x[t] += (sum over k < K, in order, of w[t K + k] ey[apos[t K + k]]) + sy[t] (sy may be
 * NULL): each token's experts best first, then the shared expert, as the CPU sums them. */
cudaError_t flc_moe_combine(float *x, const float *ey, const int32_t *apos, const float *w,
                            const float *sy, int T, int K, int H, bool pdl, cudaStream_t s);

/* Whether this build's kernels can run on the current device (a device the build has no
 * code for answers cudaErrorNoKernelImageForDevice or cudaErrorInvalidDeviceFunction). */
cudaError_t flc_kernels_loadable(void);

#endif
