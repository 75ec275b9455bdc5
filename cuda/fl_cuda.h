/* fl_cuda.h: the CUDA backend's C interface (cuda/, built when nvcc is found; docs/cuda.md).
 * It implements engine/backend.h; server/backend_select.c picks it or the CPU backend, and
 * nothing in engine/ includes this file. A build without nvcc (or with -DWITH_CUDA=OFF) links
 * cuda/absent.c instead, whose every call says that the build has no CUDA backend. Everything
 * here returns 0 or a negative FL_E* code with a message, and none of it crashes on a machine
 * without a GPU or driver. All of it may be called from any thread; a backend's forward and
 * page calls follow backend.h.
 *
 * Environment, read when a backend is created (tuning and diagnosis):
 *   FL_CUDA_DEVICE=N        the GPU to use (default 0)
 *   FL_CUDA_GRAPHS=0        run every forward eagerly (default 1: CUDA graphs, captured for
 *                           a batch shape the second time it is seen)
 *   FL_CUDA_SKINNY_ROWS=N   projections of at most N rows (0..8, default 8) use our
 *                           weight-streaming kernel; more rows use cuBLAS; 0: cuBLAS always
 *   FL_CUDA_GEMM_PAD=0      call cuBLAS with the exact row count (default 1: rows padded to
 *                           16, 32, 64, then multiples of 64, so that cuBLAS sees few shapes)
 *   FL_CUDA_SHAPE_PAD=1     above 8 rows, pad tokens and outputs as the cuBLAS rows are and
 *                           segments to a power of two, so that graphs replay more often
 *                           (default 0: measured slower on an H200; needs FL_CUDA_GEMM_PAD)
 *   FL_CUDA_ATTN=tc         attention products on tensor cores (wmma; head_dim a multiple
 *                           of 16 up to 128), opt-in until measured; default CUDA cores
 *   FL_CUDA_ATTN=few        the few-row attention kernel (cuda/attn_few.cuh: a chunk's K/V
 *                           loaded at once, splits merged in the kernel; head_dim a multiple
 *                           of 8 up to 128), opt-in until measured on a GPU
 *   FL_CUDA_MV=tc           the weight-streaming matmul (bf16 or q8 weights, k % 32 == 0) on
 *                           tensor cores (mma.sync m16n8k16; sm_80+), up to 32 rows (else
 *                           8), opt-in until measured on a GPU; at up to 8 rows it runs
 *                           the RMSNorms before q|k|v and gate|up inside those products
 *   FL_CUDA_NORM_FUSE=0     with FL_CUDA_MV=tc, the RMSNorms in their own kernel (the same
 *                           bits; for measuring the fusion)
 *   FL_CUDA_PDL=1           launch a dense forward's kernels with programmatic stream
 *                           serialization (sm_90+): each may start while the one before
 *                           finishes, the weight-streaming matmuls loading their first
 *                           weights; opt-in until measured on a GPU
 *   FL_CUDA_SYNC_DEBUG=1    synchronize after every kernel and name the one that failed
 *                           (no graphs; slow)
 *   FL_CUDA_KTIME=1         time every launch of every forward with events (no graphs) and
 *                           print the time per kernel label to stderr when the backend is
 *                           destroyed (diagnosis: where a step's time goes)
 *   FL_CUDA_MEM_LIMIT=BYTES pretend the GPU has at most this much free memory (tests)
 *   FL_CUDA_MOE=1           run mixture-of-experts models (LLaDA2, SDAR-MoE): compiled, not
 *                           yet verified on a GPU, so refused without it
 *   FL_CUBLAS_LIB=PATH      the cuBLAS library to load (default libcublas.so.13, found as
 *                           the dynamic loader finds it, else in the toolkit of the build) */
#ifndef FL_CUDA_H
#define FL_CUDA_H

#ifdef __cplusplus
extern "C" {
#endif

#include "backend.h"

/* Whether this build has the CUDA backend (false: cuda/absent.c). */
bool fl_cuda_built(void);

/* The CUDA backend: weights as bf16 on the GPU, or q8 (weight-only: o->weights Q8, or AUTO
 * on a q8 directory), KV pages as bf16 there (page_read/page_write convert to and from the f32
 * host layout). n_pages 0, or more than fits, sizes the pool from the free device memory (read
 * the result from (*out)->n_pages). The caller owns *out (fl_backend_destroy); m must outlive
 * it. FL_EUNSUPPORTED when the build has no CUDA or no GPU is usable, for weights f32 or q4
 * (asked for, or a q4 directory's AUTO), or o->kv other than AUTO or BF16; *out is NULL on
 * failure. */
int fl_backend_cuda_create(fl_backend **out, const fl_model *m, const fl_backend_opts *o,
                           fl_err *e);

/* Whether a GPU is usable: 1 (why: "NVIDIA H200, sm_90, 139.8 GiB"), 0 (why: the reason
 * none is, e.g. "no NVIDIA driver (libcuda.so.1 not found)" or "no CUDA device visible").
 * Never initializes CUDA when the driver library is absent. */
int fl_cuda_probe(char *why, size_t cap);

/* One line on what a CUDA backend holds: GPU, memory plan, pages, graphs, kernels. */
const char *fl_cuda_describe(const fl_backend *b);

/* The GPU's device-to-device copy bandwidth in bytes per second (bytes read plus bytes
 * written over the time of cudaMemcpy of `bytes`, best of `reps`), on the backend's GPU.
 * The benchmark's floor for a step is weight bytes over this. */
int fl_cuda_copy_bandwidth(const fl_backend *b, size_t bytes, int reps, double *bytes_per_s,
                           fl_err *e);

/* Bytes of weights one forward streams (every layer's projections and the lm_head; the
 * embedding rows it looks up are not counted unless they are the tied lm_head; with experts,
 * every expert, shared expert and router: a forward reads only those its tokens go to, which
 * fl_cuda_moe_stats_get says). */
size_t fl_cuda_weight_stream_bytes(const fl_backend *b);

/* A mixture-of-experts model's last forward (fl_cuda_moe_stats_get): as the CPU's
 * fl_cpu_moe_stats. */
typedef struct fl_cuda_moe_stats {
    int moe_layers;           /* layers with experts */
    long long touched;        /* routed experts at least one token went to, summed over layers */
    long long expert_bytes;   /* bytes of expert weights it read: the touched experts, shared
                                 experts and routers, each once */
    long long expert_bytes_all; /* bytes of every expert, shared expert and router held */
} fl_cuda_moe_stats;
/* Waits for b's forwards and reads which experts its last forward touched. FL_EINVAL for
 * another backend or a dense model. */
int fl_cuda_moe_stats_get(const fl_backend *b, fl_cuda_moe_stats *st, fl_err *e);

/* Counters since create: forwards run eagerly, forwards run from a graph (replayed: the one
 * that captured it included), graphs captured. */
typedef struct fl_cuda_stats {
    long long eager, replayed, captured;
    int graphs_on; /* 0 once a capture failed (graphs_note says why) or when disabled */
    char graphs_note[160];
    /* host seconds spent in forwards: planning the batch (metadata), enqueueing it (eager
     * launches, or capture + instantiate + launch; capture_s is the part spent capturing and
     * instantiating), and waiting for the stream; forwards and rows (tokens) counted */
    double plan_s, run_s, capture_s, wait_s;
    long long forwards, rows;
    /* mixture of experts, in forwards whose routes fl_cuda_force_routes gave: the
     * token-layers routed so, and those where the backend's own choice of experts differed */
    long long routes, route_diff;
    /* captured graphs pushed out of the cache (FLC_GRAPHS shapes) by a newer shape */
    long long evicted;
    /* what a batch's graph key is made of (cuda/flc_shape.h flc_shape_cfg): multiprocessors,
     * the weight-streaming kernels' rows, FL_CUDA_SHAPE_PAD, FL_CUDA_ATTN=few; 0 for another
     * backend */
    int n_sm, skinny_rows, shape_pad, attn_few;
} fl_cuda_stats;
void fl_cuda_get_stats(const fl_backend *b, fl_cuda_stats *s);

/* For parity tests of mixture-of-experts models: the next forward of b routes its tokens as
 * given instead of by its own router logits (ids/w as fl_cpu_routes gives them: (n_layers,
 * ld_tokens, top_k), best first), counting in route_diff the token-layers where its own
 * choice of experts differed. Once: the forward after it routes by itself again. The routes
 * must outlive that forward. FL_EINVAL for another backend or a model without experts. */
int fl_cuda_force_routes(fl_backend *b, const int32_t *ids, const float *w, int ld_tokens,
                         fl_err *e);

#ifdef __cplusplus
}
#endif

#endif
