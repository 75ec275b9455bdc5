/* cuda_backend.cu: the CUDA implementation of backend.h (docs/cuda.md).
 *
 * Weights are uploaded once as bf16 (F32/F16 files are rounded, to nearest even, as the
 * CPU backend's bf16_weights does), or, with q8 (--weights q8, or a q8 directory), the
 * projections and an untied head as qformat.h's q8 (int8 quants, an f16 scale per 32; the
 * embedding stays bf16), multiplied by bf16 activations: weight-only 8-bit, half the bytes a
 * step streams. Norms, biases and the residual stream stay f32.
 * Projections are cuBLAS GemmEx (bf16 in, f32 accumulate and out), or, for a few rows (the
 * decode case), our weight-streaming kernel, which reads each weight once at close to the
 * memory bandwidth; everything else is our kernels (cuda_kernels.cu). KV pages hold bf16 on
 * the device in the host layout of backend.h; page_read/page_write widen and round.
 *
 * Streams: the forward runs on one stream. page_read, which the persistence thread calls
 * while the next forward runs, copies on a second stream into pinned memory, after waiting
 * for the event recorded at the end of the forward that last stored the page; page_write
 * uses the second stream too and waits for its copy. Both streams are non-blocking, so the
 * copies overlap the forward. The scheduler thread owns forward; page_read may come from any
 * thread (its staging buffer and the event bookkeeping are under mutexes).
 *
 * CUDA graphs: every value a kernel reads that changes between forwards is in one device
 * metadata block (cuda_kernels.cuh), uploaded before each forward. A batch shape (tokens,
 * segments, outputs, attention splits) seen a second time is captured as a graph and
 * replayed from then on (up to FLC_GRAPHS shapes, least recently used evicted). The first
 * run of a shape is eager: it loads lazily-loaded kernels outside any capture. A failed
 * capture turns graphs off for the backend, with the reason in fl_cuda_get_stats.
 *
 * Memory: weights, activations for max_tokens rows and a reserve must fit in the free
 * device memory at create; the KV pool takes what is asked (n_pages), or, when n_pages is 0
 * or more than fits, what the free memory holds after the rest. Every CUDA and cuBLAS call
 * is checked; a failure is an fl_err naming the step, and an error that leaves the device
 * unusable (an illegal address, say) marks the backend failed so later calls say so. */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cublas_dl.cuh"
#include "cuda_kernels.cuh"
#include "fl_cuda.h"
#include "flc_shape.h"
extern "C" {
#include "qformat.h"
}

#ifndef FL_CUBLAS_DIR
#define FL_CUBLAS_DIR ""
#endif
#ifndef FL_CUDA_ARCHS
#define FL_CUDA_ARCHS "?"
#endif

#define FLC_EV_RING 64                   /* events of recent storing forwards */
#define FLC_KT_EVENTS 1024               /* FL_CUDA_KTIME: launches timed per forward */
#define FLC_KT_LABELS 40
#define FLC_HEAD_ROWS 256                /* lm_head rows per pass (the logits buffer) */
#define FLC_WS_BYTES ((size_t)32 << 20)   /* cuBLAS workspace (Hopper's recommendation) */
#define FLC_ALIGN 256
#define GIB(x) ((double)(x) / (double)(1ull << 30))
#define MIB(x) ((double)(x) / (double)(1ull << 20))

/* A weight matrix (n, k): bf16, or q8 (qformat.h's plain layout: quants (n, k) int8, then
 * at flc_q8_scales_at its scales (n, k / 32) f16) */
typedef struct flc_mat {
    const flc_bf16 *w; /* bf16, or NULL when q8 */
    const int8_t *q;
    const uint16_t *d;
} flc_mat;

typedef struct flc_layer {
    flc_mat wqkv;     /* (qkvd, H): q rows, then k, then v */
    flc_mat wo;       /* (H, qd) */
    flc_mat wgu;      /* (2 NI, H): gate rows, then up rows */
    flc_mat wdown;    /* (H, NI) */
    float *bqkv;      /* (qkvd) or NULL */
    float *attn_norm; /* (H) */
    float *mlp_norm;  /* (H) */
    float *q_norm;    /* (hd) or NULL */
    float *k_norm;    /* (hd) or NULL */
    /* a mixture-of-experts layer (wgu, wdown unused) */
    bool moe;
    const float *router; /* (E, H) f32 */
    const float *ebias;  /* (E) f32, or NULL */
    flc_mat *egu;        /* (E) host array: each expert's (2 mi, H), gate rows then up rows */
    flc_mat *edown;      /* (E) (H, mi) */
    flc_mat sgu, sdown;  /* the shared expert ((2 smi, H), (H, smi)) when shared */
    bool shared;
} flc_layer;

/* int32 offsets of the metadata regions (cuda_kernels.cuh flc_meta) */
typedef struct flc_meta_off {
    size_t params, tokens, tok_pos, tok_store, seg_pos0, seg_n, seg_tok0, seg_pt, tile_seg,
        tile_row0, out_rows, pages;
} flc_meta_off;

typedef struct flc {
    fl_backend base;
    fl_config cfg;
    flc_dims d;
    int dev, n_sm, cc_major, cc_minor;
    char gpu[128];
    size_t mem_total;
    cudaStream_t st, st_io;
    flc_blas blas;
    void *ws;
    /* weights */
    char *wmem;
    size_t wbytes, stream_bytes;
    fl_wplan wplan; /* until the weights are uploaded */
    flc_layer *layers;
    flc_bf16 *embed;
    flc_mat lm_head;
    float *final_norm;
    bool q8;         /* matrices whose k % 32 == 0 (but the embedding) are q8 */
    flc_bf16 *wdq;   /* (wdq_elems) a q8 matrix as bf16, for cuBLAS at more than skinny rows */
    size_t wdq_elems; /* 0 with q8_gemm: nothing widens a matrix then */
    bool q8_gemm;     /* FL_CUDA_Q8_GEMM=1: q8 products above the streaming kernels' rows on
                         our tensor-core GEMM (gemm_tc.cuh), not cuBLAS on a bf16 copy */
    float *gq_part;   /* (2 n_sm FLC_GQ_TILE) its partial tiles when it splits k */
    int *gq_ticket;   /* (2 n_sm) its tickets, zero between products */
    double *inv_freq;
    /* activations, for max_tokens rows (T) */
    char *amem;
    size_t abytes;
    float *x;       /* (T, H) */
    flc_bf16 *xb;   /* (T, H) */
    float *qkv;     /* (T, qkvd) */
    flc_bf16 *kvo;  /* (T, 2, kvh, hd) */
    flc_bf16 *att;  /* (T, qd) */
    float *gu;      /* (T, 2 NIm) */
    flc_bf16 *hb;   /* (T, NIm); NIm = the larger of NI and the shared expert's width */
    float *logits;  /* (head_rows, V) */
    flc_lse *lse;   /* (head_rows, V / FLC_VCHUNK) */
    flc_tok *tok_d; /* (T) */
    float *part;    /* (part_floats) */
    size_t part_floats;
    int *ticket;    /* (tiles_max * kvh) the few-row attention's tickets, zero between forwards */
    int head_rows, tiles_max;
    flc_shape_cfg shape_cfg; /* what a batch's graph key is made of (flc_shape.h) */
    /* KV pool */
    flc_bf16 *pool;
    size_t pool_bytes, page_dev_bytes;
    int pages_asked;
    /* metadata block, device and pinned host copies */
    int32_t *meta_d, *meta_h;
    size_t meta_ints, page_cap;
    flc_meta_off off;
    flc_meta mt;
    flc_tok *tok_h; /* (T) pinned */
    /* page I/O */
    pthread_mutex_t ev_mu, rd_mu, wr_mu;
    bool mu_ok;
    cudaEvent_t ev[FLC_EV_RING];
    int n_ev;
    long long *page_wseq; /* (n_pages) the forward that last stored the page, or -1 */
    long long fseq;
    uint16_t *stage_r, *stage_w; /* (page elems) pinned bf16 */
    /* options */
    int skinny_rows;
    bool graphs, sync_debug, attn_tc, attn_few, gemm_pad, shape_pad;
    bool pdl;   /* FL_CUDA_PDL=1 on sm_90+: programmatic launch of a forward's kernels */
    bool pdl_ok; /* flc_pdl: the last thing enqueued was our kernel */
    bool mv_tc; /* FL_CUDA_MV=tc on sm_80+: the streaming matmul on tensor cores */
    int mv_rows; /* rows it takes: FLC_MV_MAX, 0 without it (or FL_CUDA_SKINNY_ROWS=0) */
    bool norm_fuse; /* with mv_tc: the RMSNorms run inside the products they feed, unless
                       FL_CUDA_NORM_FUSE=0 */
    /* FL_CUDA_KTIME: an event after every launch; the time between two events is the work
     * launched between them, summed per label and printed at destroy. =1: eager forwards
     * (graphs off), where the host's launch interval bounds each time from below; =2
     * (kt_graphs): the events are nodes of the captured graphs (external event nodes), timed
     * on replays only, as production runs them */
    bool ktime, kt_graphs;
    bool kt_ext; /* capturing: the events become the graph's nodes */
    int kt_n, kt_labels;
    int kt_replay;   /* kt_graphs: the slot this forward replayed, or -1 */
    int *kt_slot_n;  /* kt_graphs: per graph slot, the events its graph records */
    int *kt_slot_of; /* and their labels (kt_of's), FLC_KT_EVENTS per slot */
    cudaEvent_t kt_ev[FLC_KT_EVENTS];
    int kt_of[FLC_KT_EVENTS];             /* label index of the launch ending at event i */
    char kt_name[FLC_KT_LABELS][64];
    double kt_ms[FLC_KT_LABELS];
    long long kt_calls[FLC_KT_LABELS], kt_forwards;
    /* mixture of experts (moe), all on the device (flc_moe): A = max_tokens x top_k
     * assignments of a token to an expert */
    bool moe;
    int E, K, mi, smi, NIm;
    flc_route route;
    bool egu_q8, edown_q8; /* the experts' matrices are q8 (else bf16) */
    bool moe_gemm;         /* FL_CUDA_MOE_GEMM=1: the experts' grouped GEMM (gemm_tc.cuh) ... */
    int moe_gemm_min;      /* ... when they average this many rows (FL_CUDA_MOE_GEMM_MIN) */
    float *rlog;      /* (T, E) router logits */
    int32_t *rid_d;   /* (A) each token's experts, best first */
    float *rw_d;      /* (A) and their weights */
    int32_t *eoff_d;  /* (n_layers, E + 2) each expert's first assignment, per layer */
    size_t moe_bytes_all, moe_fixed; /* all experts, shared and routers; shared and routers */
    size_t egu_bytes, edown_bytes;   /* one routed expert's two matrices */
    int32_t *atok_d;  /* (A) the token of each assignment, in expert order */
    int32_t *apos_d;  /* (A) where token t's k-th expert's row is */
    flc_bf16 *xg;     /* (A, H) the normed rows in expert order */
    flc_bf16 *eh;     /* (A, mi) SwiGLU of each assignment */
    float *ey;        /* (A, H) each assignment's expert output */
    float *sy;        /* (T, H) the shared expert's output */
    flc_emat *emats;  /* (n_layers, 2, E): layer l's experts' gate|up, then down */
    /* fl_cuda_force_routes: the routes of the next forward (eager), and pinned staging */
    const int32_t *force_ids;
    const float *force_w;
    int force_ld, force_n; /* force_n: the forward's real tokens (padding rows keep theirs) */
    int32_t *rid_h;   /* pinned (A) */
    float *rw_h;      /* pinned (A) */
    flc_gcache gc;                    /* which batch shapes have graphs (flc_shape.h) */
    cudaGraphExec_t gexec[FLC_GRAPHS]; /* by gc's slot; NULL until captured */
    fl_cuda_stats stats;
    char desc[640];
    char broken[300]; /* non-empty once the device failed */
} flc;

/* ---------------------------------------------------------------- errors */

static int flc_cuda_err(fl_err *e, cudaError_t err, const char *what)
{
    return fl_err_set(e, err == cudaErrorMemoryAllocation ? FL_ENOMEM : FL_EIO, "cuda: %s: %s",
                      what, cudaGetErrorString(err));
}

/* An error that poisons the context (kernel faults): everything after it fails. */
static bool flc_sticky(cudaError_t err)
{
    switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
    case cudaErrorUnknown:
        return true;
    default:
        return false;
    }
}

static int flc_fail(flc *c, fl_err *e, cudaError_t err, const char *what)
{
    int rc = flc_cuda_err(e, err, what);
    if (flc_sticky(err) && !c->broken[0])
        snprintf(c->broken, sizeof c->broken, "%s: %s", what, cudaGetErrorString(err));
    return rc;
}

/* FL_CUDA_KTIME's event after a launch: into the capture as a node of the graph (kt_ext),
 * else on the stream */
static cudaError_t flc_kt_record(flc *c, cudaEvent_t ev)
{
    return c->kt_ext ? cudaEventRecordWithFlags(ev, c->st, cudaEventRecordExternal)
                     : cudaEventRecord(ev, c->st);
}

/* Checks a launch (and, with FL_CUDA_SYNC_DEBUG, its completion). layer < 0: not in a
 * layer. */
static int flc_launched(flc *c, cudaError_t err, const char *what, int layer, fl_err *e)
{
    char w[160];
    if (layer >= 0)
        snprintf(w, sizeof w, "layer %d: %s", layer, what);
    else
        snprintf(w, sizeof w, "%s", what);
    if (err != cudaSuccess) {
        char m[200];
        snprintf(m, sizeof m, "%s: launch failed", w);
        return flc_fail(c, e, err, m);
    }
    if (c->ktime && c->kt_n > 0 && c->kt_n < FLC_KT_EVENTS) {
        int k = 0; /* the label, without its layer */
        while (k < c->kt_labels && strncmp(c->kt_name[k], what, sizeof c->kt_name[0] - 1))
            k++;
        if (k == c->kt_labels && k < FLC_KT_LABELS)
            snprintf(c->kt_name[c->kt_labels++], sizeof c->kt_name[0], "%s", what);
        if (k < FLC_KT_LABELS && flc_kt_record(c, c->kt_ev[c->kt_n]) == cudaSuccess)
            c->kt_of[c->kt_n++] = k;
    }
    if (c->sync_debug) {
        err = cudaStreamSynchronize(c->st);
        if (err != cudaSuccess) {
            char m[200];
            snprintf(m, sizeof m, "%s failed (FL_CUDA_SYNC_DEBUG)", w);
            return flc_fail(c, e, err, m);
        }
    }
    return 0;
}

#define FLC_L(call, what, layer)                                                             \
    do {                                                                                     \
        int rc_ = flc_launched(c, (call), (what), (layer), e);                               \
        if (rc_)                                                                             \
            return rc_;                                                                      \
    } while (0)

/* ---------------------------------------------------------------- matmul dispatch */

/* Whether the kernel about to be enqueued gets the programmatic launch (FL_CUDA_PDL=1): only
 * when the last thing enqueued on the stream was one of our kernels (not a copy, not cuBLAS).
 * A mixture-of-experts layer's kernels too since 2026-12-06 (not yet run on a GPU). */
static bool flc_pdl(flc *c)
{
    bool r = c->pdl && c->pdl_ok;
    c->pdl_ok = true;
    return r;
}

/* Y (m, n) (= or +=) X (m, k) W^T; W (n, k) bf16 row-major, or q8. Up to mv_rows rows
 * (FL_CUDA_MV=tc) or skinny_rows, our weight-streaming kernels; more, cuBLAS, which sees the
 * row-major product as the column-major Y^T = W X^T: op(A) = W^T of a (k, n) column-major
 * matrix. A q8 W goes to cuBLAS as its bf16 copy in wdq, made just before (at that many rows
 * the product is bound by arithmetic, not by W's bytes). */
static int flc_gemm(flc *c, float *y, int ldy, const flc_bf16 *x, int ldx, int m,
                    const flc_mat *wm, int n, int k, int mode, const char *what, int layer,
                    fl_err *e)
{
    if (m <= c->mv_rows && k % 32 == 0 && ldx % 8 == 0)
        return flc_launched(c, wm->q ? flc_mv_tc_q8(y, NULL, ldy, x, ldx, m, wm->q, wm->d, n, k,
                                                    NULL, mode, flc_pdl(c), c->st)
                                     : flc_mv_tc(y, NULL, ldy, x, ldx, m, wm->w, n, k, NULL,
                                                 mode, flc_pdl(c), c->st),
                            what, layer, e);
    if (m <= c->skinny_rows && k % 8 == 0 && ldx % 8 == 0)
        return flc_launched(c, wm->q ? flc_skinny_q8(y, NULL, ldy, x, ldx, m, wm->q, wm->d, n, k,
                                                     mode, flc_pdl(c), c->st)
                                     : flc_skinny(y, NULL, ldy, x, ldx, m, wm->w, n, k, mode,
                                                  flc_pdl(c), c->st),
                            what, layer, e);
    if (wm->q && c->q8_gemm) /* the quants read as they are, no bf16 copy (gemm_tc.cuh) */
        return flc_launched(c, flc_gemm_q8(y, ldy, x, ldx, m, wm->q, wm->d, n, k, mode,
                                           c->gq_part, c->gq_ticket, c->n_sm, flc_pdl(c), c->st),
                            what, layer, e);
    const flc_bf16 *w = wm->w;
    if (wm->q) {
        int rc = flc_launched(c, flc_dequant_q8(c->wdq, wm->q, wm->d, n, k, c->st),
                              "q8 weights to bf16", layer, e);
        if (rc)
            return rc;
        w = c->wdq;
    }
    float alpha = 1.0f, beta = mode == FLC_MM_ACC ? 1.0f : 0.0f;
    /* Row padding: cuBLAS chooses an algorithm the first time it sees an (m, n, k), which
     * costs far more host time than the product itself on a small model, and a scheduler's
     * batches have a new row count almost every forward (measured on an H200 with the
     * default model: 4.5 ms of host time per forward at 16 sequences, 24 us of GPU time).
     * So m goes up to a bucket (16, 32, 64, then multiples of 64): a handful of shapes. The
     * extra rows read rows of x past m (inside the activation buffers, whatever they hold)
     * and write rows of y past m, which nothing reads: each output row depends only on its
     * own input row. */
    if (c->gemm_pad) {
        int mp = flc_pad_rows(m);
        int cap = y == c->logits ? c->head_rows : c->base.max_tokens;
        if (mp <= cap)
            m = mp;
    }
    c->pdl_ok = false; /* the kernel after cuBLAS's waits for it plainly */
    cublasStatus_t st = c->blas.gemm_ex(c->blas.h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w,
                                        CUDA_R_16BF, k, x, CUDA_R_16BF, ldx, &beta, y,
                                        CUDA_R_32F, ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS)
        return fl_err_set(e, FL_EIO, "cuda: layer %d: %s: cublasGemmEx (m %d, n %d, k %d): %s",
                          layer, what, m, n, k, flc_blas_status(&c->blas, st));
    return flc_launched(c, cudaSuccess, what, layer, e);
}

/* Whether the RMSNorm of m rows feeding a product with k = H inputs runs inside it: the
 * fusion is on, the tensor-core matmul takes the product (flc_gemm's and flc_mlp's test) and
 * m is at most one row tile. Every block of the product reads its rows of the f32 residual
 * itself (m + 1 times k floats with the norm weights, where the bf16 rows were m times k
 * halves): per byte of bf16 weights streamed from DRAM, (m + 1) / 8 bytes from L2 against
 * m / 16. At 4 rows that is 0.62 against 0.25; at 32 rows the rows no longer fit the SM's
 * L1 and would be read twice, 8 bytes per weight byte. */
static bool flc_fuses_norm(const flc *c, int m)
{
    return c->norm_fuse && m <= 8 && m <= c->mv_rows && c->d.H % 32 == 0;
}

/* xb = the RMSNorm (weights nw) of the first m rows of c->x for a product; or, when the
 * product will run it inside (flc_fuses_norm), nothing, with *use = nz describing it */
static int flc_norm_for(flc *c, flc_norm_in *nz, const float *nw, int m, const char *what,
                        int layer, const flc_norm_in **use, fl_err *e)
{
    *use = NULL;
    if (flc_fuses_norm(c, m)) {
        *nz = (flc_norm_in){c->x, nw, NULL, c->d.eps};
        *use = nz;
        return 0;
    }
    return flc_launched(c, flc_rmsnorm(c->xb, c->x, nw, NULL, m, c->d.H, c->d.eps, flc_pdl(c),
                                       c->st),
                        what, layer, e);
}

/* Y (m, n) = RMSNorm(the first m rows of c->x) W^T: the norm into xb and flc_gemm, or, when
 * flc_fuses_norm says so, one kernel that norms the rows as it loads them (the same bits:
 * norm.cuh) */
static int flc_norm_gemm(flc *c, const float *nw, float *y, int ldy, int m, const flc_mat *wm,
                         int n, const char *norm_what, const char *what, int layer, fl_err *e)
{
    const int H = c->d.H;
    flc_norm_in nz;
    const flc_norm_in *use;
    int rc = flc_norm_for(c, &nz, nw, m, norm_what, layer, &use, e);
    if (rc || !use)
        return rc ? rc : flc_gemm(c, y, ldy, c->xb, H, m, wm, n, H, FLC_MM_STORE, what, layer, e);
    return flc_launched(c, wm->q ? flc_mv_tc_q8(y, NULL, ldy, NULL, H, m, wm->q, wm->d, n, H, use,
                                                FLC_MM_STORE, flc_pdl(c), c->st)
                                 : flc_mv_tc(y, NULL, ldy, NULL, H, m, wm->w, n, H, use,
                                             FLC_MM_STORE, flc_pdl(c), c->st),
                        what, layer, e);
}

/* flc_gemm for the warm-up: nothing for a q8 matrix that our GEMM takes (no cuBLAS choice to
 * make) */
static int flc_warm1(flc *c, float *y, int ldy, const flc_bf16 *x, int ldx, int m,
                     const flc_mat *wm, int n, int k, int mode, const char *what, int layer,
                     fl_err *e)
{
    if (wm->q && c->q8_gemm)
        return 0;
    return flc_gemm(c, y, ldy, x, ldx, m, wm, n, k, mode, what, layer, e);
}

/* Calls cuBLAS once for every padded row count up to the activation rows and every product
 * shape of a forward (layer 0's weights, the lm_head up to head_rows), so that its
 * algorithm choice for each shape is made here, once, and not in the first forwards that
 * meet it (measured on an H200 with the default model: a forward of 16 new sequences spent
 * 2.4 ms choosing against 0.1 ms replaying). The products write the activation buffers,
 * which every forward overwrites before it reads them. */
static int flc_gemm_warm(flc *c, fl_err *e)
{
    if (!c->gemm_pad || c->cfg.n_layers < 1)
        return 0;
    const flc_dims d = c->d;
    const flc_layer *ly = &c->layers[0];
    int H = d.H, NI = d.NI;
    bool mlp = !ly->moe; /* a MoE layer 0 (SDAR-MoE) has no dense MLP to warm */
    int sl = -1; /* the first layer with a shared expert (LLaDA2), whose shapes are its own */
    for (int l = 0; l < c->cfg.n_layers && sl < 0; l++)
        if (c->layers[l].moe && c->layers[l].shared)
            sl = l;
    for (int m = 16; m <= c->base.max_tokens; m = flc_pad_rows(m + 1)) {
        int rc;
        if (m > c->skinny_rows) { /* rows <= skinny_rows never reach cuBLAS */
            if ((rc = flc_warm1(c, c->qkv, d.qkvd, c->xb, H, m, &ly->wqkv, d.qkvd, H, FLC_MM_STORE,
                               "warm-up: q|k|v projection", 0, e)) ||
                (rc = flc_warm1(c, c->x, H, c->att, d.qd, m, &ly->wo, H, d.qd, FLC_MM_ACC,
                               "warm-up: o projection", 0, e)) ||
                (mlp && (rc = flc_warm1(c, c->gu, 2 * NI, c->xb, H, m, &ly->wgu, 2 * NI, H,
                                       FLC_MM_STORE, "warm-up: gate|up projection", 0, e))) ||
                (mlp && (rc = flc_warm1(c, c->x, H, c->hb, NI, m, &ly->wdown, H, NI, FLC_MM_ACC,
                                       "warm-up: down projection", 0, e))) ||
                (sl >= 0 && (rc = flc_warm1(c, c->gu, 2 * c->smi, c->xb, H, m, &c->layers[sl].sgu,
                                           2 * c->smi, H, FLC_MM_STORE,
                                           "warm-up: shared expert's gate|up", sl, e))) ||
                (sl >= 0 && (rc = flc_warm1(c, c->sy, H, c->hb, c->smi, m, &c->layers[sl].sdown,
                                           H, c->smi, FLC_MM_STORE,
                                           "warm-up: shared expert's down", sl, e))))
                return rc;
            if (m <= c->head_rows &&
                (rc = flc_warm1(c, c->logits, d.V, c->xb, H, m, &c->lm_head, d.V, H, FLC_MM_STORE,
                               "warm-up: lm_head", -1, e)))
                return rc;
        }
    }
    cudaError_t err = cudaStreamSynchronize(c->st);
    return err == cudaSuccess ? 0 : flc_fail(c, e, err, "cuBLAS warm-up");
}

/* ---------------------------------------------------------------- metadata block */

static void flc_meta_layout(flc *c)
{
    size_t T = (size_t)c->base.max_tokens, X = (size_t)c->tiles_max, at = 0;
    flc_meta_off *o = &c->off;
    o->params = at, at += FLC_P_COUNT;
    o->tokens = at, at += T;
    o->tok_pos = at, at += T;
    o->tok_store = at, at += T;
    o->seg_pos0 = at, at += T;
    o->seg_n = at, at += T;
    o->seg_tok0 = at, at += T;
    o->seg_pt = at, at += T;
    o->tile_seg = at, at += X;
    o->tile_row0 = at, at += X;
    o->out_rows = at, at += T;
    o->pages = (at + 31) & ~(size_t)31;
}

static void flc_meta_bind(flc *c)
{
    const int32_t *b = c->meta_d;
    const flc_meta_off *o = &c->off;
    c->mt.params = b + o->params;
    c->mt.tokens = b + o->tokens;
    c->mt.tok_pos = b + o->tok_pos;
    c->mt.tok_store = b + o->tok_store;
    c->mt.seg_pos0 = b + o->seg_pos0;
    c->mt.seg_n = b + o->seg_n;
    c->mt.seg_tok0 = b + o->seg_tok0;
    c->mt.seg_pt = b + o->seg_pt;
    c->mt.tile_seg = b + o->tile_seg;
    c->mt.tile_row0 = b + o->tile_row0;
    c->mt.out_rows = b + o->out_rows;
    c->mt.pages = b + o->pages;
}

static void flc_graphs_flush(flc *c)
{
    for (int i = 0; i < FLC_GRAPHS; i++) {
        if (c->gexec[i])
            cudaGraphExecDestroy(c->gexec[i]);
        c->gexec[i] = NULL;
    }
    memset(&c->gc, 0, sizeof c->gc);
}

/* Room for `pages` page-table entries; a new block moves every pointer, so graphs go. */
static int flc_meta_reserve(flc *c, size_t pages, fl_err *e)
{
    if (c->meta_d && pages <= c->page_cap)
        return 0;
    size_t cap = c->page_cap ? c->page_cap : 4096;
    while (cap < pages)
        cap *= 2;
    flc_graphs_flush(c);
    if (c->meta_d)
        cudaFree(c->meta_d);
    if (c->meta_h)
        cudaFreeHost(c->meta_h);
    c->meta_d = c->meta_h = NULL;
    c->page_cap = 0;
    size_t ints = c->off.pages + cap;
    cudaError_t err = cudaMalloc((void **)&c->meta_d, ints * 4);
    if (err != cudaSuccess)
        return flc_cuda_err(e, err, "cudaMalloc of the batch metadata");
    err = cudaMallocHost((void **)&c->meta_h, ints * 4);
    if (err != cudaSuccess)
        return flc_cuda_err(e, err, "cudaMallocHost of the batch metadata");
    memset(c->meta_h, 0, ints * 4);
    c->meta_ints = ints;
    c->page_cap = cap;
    flc_meta_bind(c);
    return 0;
}

/* ---------------------------------------------------------------- the forward */

typedef struct flc_plan {
    int T, S, n_out, tiles, tiles_bound, n_splits, split_len;
    int n_out_real; /* n_out before padding: the rows whose outputs go back */
    size_t meta_bytes;
    bool stores;
} flc_plan;

/* Fills the pinned metadata block for the batch and decides the attention split. */
static int flc_plan_batch(flc *c, const fl_batch *bt, bool want_out, bool pad_out, flc_plan *p,
                          fl_err *e)
{
    const flc_dims *d = &c->d;
    const int B = d->B, rep = d->rep;
    size_t np_total = 0;
    for (int s = 0; s < bt->n_segs; s++)
        np_total += (size_t)(((int64_t)bt->segs[s].pos0 + bt->segs[s].n_store + B - 1) / B);
    int rc = flc_meta_reserve(c, np_total, e);
    if (rc)
        return rc;
    int32_t *h = c->meta_h;
    const flc_meta_off *o = &c->off;
    int t = 0, tiles = 0, n_out = 0, max_end = 0;
    size_t pcur = 0;
    bool stores = false;
    for (int s = 0; s < bt->n_segs; s++) {
        const fl_segment *sg = &bt->segs[s];
        int np = (int)(((int64_t)sg->pos0 + sg->n_store + B - 1) / B);
        h[o->seg_pos0 + s] = sg->pos0;
        h[o->seg_n + s] = sg->n;
        h[o->seg_tok0 + s] = t;
        h[o->seg_pt + s] = (int32_t)pcur;
        if (np > 0)
            memcpy(h + o->pages + pcur, sg->pages, (size_t)np * 4);
        pcur += (size_t)np;
        for (int i = 0; i < sg->n; i++, t++) {
            int pos = sg->pos0 + i;
            h[o->tokens + t] = bt->tokens[t];
            h[o->tok_pos + t] = pos;
            h[o->tok_store + t] = i < sg->n_store ? sg->pages[pos / B] : -1;
            if (fl_seg_wants(sg, i))
                h[o->out_rows + n_out++] = t;
        }
        stores |= sg->n_store > 0;
        for (int r0 = 0; r0 < sg->n * rep; r0 += FLC_QROWS) {
            h[o->tile_seg + tiles] = s;
            h[o->tile_row0 + tiles] = r0;
            tiles++;
        }
        if (sg->pos0 + sg->n > max_end)
            max_end = sg->pos0 + sg->n;
    }
    flc_shape_in in = {bt->n_tokens, bt->n_segs, want_out ? n_out : 0, tiles, max_end, pad_out};
    flc_shape sh;
    if (flc_shape_of(&c->shape_cfg, &in, &sh))
        return fl_err_set(e, FL_EINVAL, "cuda: internal: %d attention tiles (bound %d, room %d)",
                          tiles, sh.tiles_bound, c->tiles_max);
    /* Shape padding (FL_CUDA_SHAPE_PAD=1, opt-in; flc_shape.h): extra tokens are token 0 at
     * position 0, stored nowhere and in no attention tile; extra outputs repeat row 0 and
     * are not copied back. */
    for (int x = bt->n_tokens; x < sh.T; x++) {
        h[o->tokens + x] = 0;
        h[o->tok_pos + x] = 0;
        h[o->tok_store + x] = -1;
    }
    for (int x = in.n_out; x < sh.n_out; x++)
        h[o->out_rows + x] = 0;
    p->T = sh.T;
    p->S = sh.S;
    p->n_out = sh.n_out;
    p->n_out_real = in.n_out;
    p->tiles = tiles;
    p->tiles_bound = sh.tiles_bound;
    p->n_splits = sh.n_splits;
    p->split_len = sh.split_len;
    p->stores = stores;
    h[o->params + FLC_P_TILES] = tiles;
    h[o->params + FLC_P_SPLIT] = p->split_len;
    p->meta_bytes = (o->pages + pcur) * 4;
    return 0;
}

/* One SwiGLU MLP of m rows: hb (m, ni) = silu(x gate^T) * (x up^T), then y (m, H) = or +=
 * hb down^T (mode). gu/hb: its scratch rows. nz: x is the RMSNorm it describes, run inside
 * the gate|up product (flc_norm_for decided so), else NULL. */
static int flc_mlp(flc *c, float *y, int mode, const flc_bf16 *x, const flc_norm_in *nz, int m,
                   const flc_mat *wgu, const flc_mat *wdown, int ni, float *gu, flc_bf16 *hb,
                   int layer, fl_err *e)
{
    const int H = c->d.H;
    int rc;
    const bool tc = m <= c->mv_rows && H % 32 == 0;
    if (tc || (m <= c->skinny_rows && H % 8 == 0)) {
        const bool pdl = flc_pdl(c);
        FLC_L(wgu->q && tc ? flc_mv_tc_q8(NULL, hb, ni, x, H, m, wgu->q, wgu->d, ni, H, nz,
                                          FLC_MM_SWIGLU, pdl, c->st)
              : wgu->q     ? flc_skinny_q8(NULL, hb, ni, x, H, m, wgu->q, wgu->d, ni, H,
                                           FLC_MM_SWIGLU, pdl, c->st)
              : tc ? flc_mv_tc(NULL, hb, ni, x, H, m, wgu->w, ni, H, nz, FLC_MM_SWIGLU, pdl,
                               c->st)
                   : flc_skinny(NULL, hb, ni, x, H, m, wgu->w, ni, H, FLC_MM_SWIGLU, pdl, c->st),
              "gate|up projection + SwiGLU", layer);
    } else {
        if ((rc = flc_gemm(c, gu, 2 * ni, x, H, m, wgu, 2 * ni, H, FLC_MM_STORE,
                           "gate|up projection", layer, e)))
            return rc;
        FLC_L(flc_swiglu(hb, gu, m, ni, flc_pdl(c), c->st), "SwiGLU", layer);
    }
    return flc_gemm(c, y, H, hb, ni, m, wdown, H, ni, mode, "down projection", layer, e);
}

/* fl_cuda_force_routes' routes for layer l in place of the device's (an eager forward of a
 * parity test) for the batch's real tokens (padding rows, FL_CUDA_SHAPE_PAD, keep the
 * device's): the device's own choice is read back and compared first. */
static int flc_force(flc *c, int l, int T, fl_err *e)
{
    const int K = c->K, A = T * K, n = c->force_n < T ? c->force_n : T;
    cudaError_t err = cudaMemcpyAsync(c->rid_h, c->rid_d, (size_t)A * 4, cudaMemcpyDeviceToHost,
                                      c->st);
    if (err == cudaSuccess)
        err = cudaStreamSynchronize(c->st);
    if (err != cudaSuccess)
        return flc_fail(c, e, err, "reading the routes back");
    for (int t = 0; t < n; t++) {
        const int32_t *fi = c->force_ids + ((size_t)l * c->force_ld + t) * K;
        const float *fw = c->force_w + ((size_t)l * c->force_ld + t) * K;
        int32_t *ids = c->rid_h + (size_t)t * K;
        for (int k = 0; k < K; k++) /* each a distinct expert, or k_moe_assign would drop it */
            for (int j = -1; j < k; j++)
                if (j < 0 ? fi[k] < 0 || fi[k] >= c->E : fi[j] == fi[k])
                    return fl_err_set(e, FL_EINVAL, "cuda: fl_cuda_force_routes: layer %d "
                                      "token %d: expert %d is not one of %d distinct ones", l,
                                      t, (int)fi[k], c->E);
        bool same = true;
        for (int k = 0; k < K; k++) {
            bool in = false;
            for (int j = 0; j < K; j++)
                in |= fi[j] == ids[k];
            same &= in;
        }
        c->stats.routes++;
        c->stats.route_diff += !same;
        memcpy(ids, fi, (size_t)K * sizeof *ids);
        memcpy(c->rw_h + (size_t)t * K, fw, (size_t)K * sizeof *fw);
    }
    if ((err = cudaMemcpyAsync(c->rid_d, c->rid_h, (size_t)n * K * 4, cudaMemcpyHostToDevice,
                               c->st)) != cudaSuccess ||
        (err = cudaMemcpyAsync(c->rw_d, c->rw_h, (size_t)n * K * 4, cudaMemcpyHostToDevice,
                               c->st)) != cudaSuccess)
        return flc_fail(c, e, err, "copying the given routes to the device");
    c->pdl_ok = false; /* the kernel after the copies is launched plainly */
    return 0;
}

/* A mixture-of-experts layer's MLP on the T rows of c->xb (normed), added to c->x, all on the
 * device and the same launches whatever the routing (so graphs capture it): the router
 * logits from each row's RMSNorm in f32, each token's top_k (engine/moe.c's steps), the
 * assignments in expert order, the rows gathered, every touched expert's gate|up + SwiGLU in
 * one launch and its down in another (each expert's weights read once), the shared expert
 * over every row, and each token's sum in the CPU's order (its experts best first, then the
 * shared one). */
static int flc_moe(flc *c, const flc_layer *ly, int l, int T, fl_err *e)
{
    const int H = c->d.H, E = c->E, K = c->K, mi = c->mi, A = T * K;
    const flc_emat *gu = c->emats + (size_t)l * 2 * E, *dn = gu + E;
    int32_t *eoff = c->eoff_d + (size_t)l * (E + 2);
    int rc;
    FLC_L(flc_router(c->rlog, c->x, ly->mlp_norm, ly->router, T, H, E, c->d.eps, c->n_sm,
                     flc_pdl(c), c->st),
          "router logits", l);
    FLC_L(flc_route_tokens(c->rid_d, c->rw_d, c->rlog, ly->ebias, c->route, T, flc_pdl(c),
                           c->st),
          "routing (top-k)", l);
    if (c->force_ids && (rc = flc_force(c, l, T, e)))
        return rc;
    FLC_L(flc_moe_assign(eoff, c->atok_d, c->apos_d, c->rid_d, A, K, E, flc_pdl(c), c->st),
          "assignments in expert order", l);
    FLC_L(flc_gather_rows(c->xg, c->xb, c->atok_d, A, H, flc_pdl(c), c->st),
          "gathering rows by expert", l);
    /* the experts' grouped GEMM when they average moe_gemm_min rows or more (a prefill) */
    if (c->moe_gemm && (long)A >= (long)c->moe_gemm_min * E) {
        FLC_L(flc_moe_gemm(NULL, c->eh, mi, c->xg, H, gu, c->egu_q8, eoff, E, mi, H,
                           FLC_MM_SWIGLU, flc_pdl(c), c->st),
              "experts' gate|up + SwiGLU (grouped GEMM)", l);
        FLC_L(flc_moe_gemm(c->ey, NULL, H, c->eh, mi, dn, c->edown_q8, eoff, E, H, mi,
                           FLC_MM_STORE, flc_pdl(c), c->st),
              "experts' down (grouped GEMM)", l);
    } else {
        const bool tgu = c->mv_rows > 0 && H % 32 == 0, tdn = c->mv_rows > 0 && mi % 32 == 0;
        FLC_L(tgu ? flc_moe_mv_tc(NULL, c->eh, mi, c->xg, H, gu, c->egu_q8, eoff, E, mi, H,
                                  FLC_MM_SWIGLU, flc_pdl(c), c->st)
                  : flc_moe_mm(NULL, c->eh, mi, c->xg, H, gu, c->egu_q8, eoff, E, mi, H,
                               FLC_MM_SWIGLU, flc_pdl(c), c->st),
              "experts' gate|up + SwiGLU", l);
        FLC_L(tdn ? flc_moe_mv_tc(c->ey, NULL, H, c->eh, mi, dn, c->edown_q8, eoff, E, H, mi,
                                  FLC_MM_STORE, flc_pdl(c), c->st)
                  : flc_moe_mm(c->ey, NULL, H, c->eh, mi, dn, c->edown_q8, eoff, E, H, mi,
                               FLC_MM_STORE, flc_pdl(c), c->st),
              "experts' down", l);
    }
    if (ly->shared && (rc = flc_mlp(c, c->sy, FLC_MM_STORE, c->xb, NULL, T, &ly->sgu, &ly->sdown,
                                    c->smi, c->gu, c->hb, l, e)))
        return rc;
    FLC_L(flc_moe_combine(c->x, c->ey, c->apos_d, c->rw_d, ly->shared ? c->sy : NULL, T, K, H,
                          flc_pdl(c), c->st),
          "summing the experts' outputs", l);
    return 0;
}

/* Enqueues the whole forward on c->st (eagerly, or into a capture). logits: the caller's
 * (T, V) buffer, rows copied out per lm_head pass (eager only). */
static int flc_enqueue(flc *c, const flc_plan *p, float *logits, fl_err *e)
{
    const flc_dims d = c->d;
    const flc_meta m = c->mt;
    const int T = p->T, H = d.H, NI = d.NI, V = d.V;
    cudaStream_t st = c->st;
    FLC_L(flc_embed(c->x, c->embed, m, T, H, st), "embedding lookup", -1);
    c->pdl_ok = true; /* the embedding follows the metadata copy, so it is launched plainly */
    for (int l = 0; l < c->cfg.n_layers; l++) {
        const flc_layer *ly = &c->layers[l];
        int rc;
        if ((rc = flc_norm_gemm(c, ly->attn_norm, c->qkv, d.qkvd, T, &ly->wqkv, d.qkvd,
                                "input RMSNorm", "q|k|v projection", l, e)))
            return rc;
        FLC_L(flc_qkv_post(c->qkv, c->kvo, c->pool, ly->bqkv, ly->q_norm, ly->k_norm,
                           c->inv_freq, m, d, l, T, flc_pdl(c), st),
              "q/k/v bias, norm, RoPE and KV store", l);
        if (c->attn_few) /* splits merged in the same kernel */
            FLC_L(flc_attention_few(c->att, c->part, c->ticket, c->qkv, c->kvo, c->pool, m, d, l,
                                    p->tiles_bound, p->n_splits, p->T * d.rep <= 8, flc_pdl(c),
                                    st),
                  "attention (few-row kernel, splits merged)", l);
        else
            FLC_L(flc_attention(c->att, c->part, c->qkv, c->kvo, c->pool, m, d, l,
                                p->tiles_bound, p->n_splits, c->attn_tc, flc_pdl(c), st),
                  "attention", l);
        if (p->n_splits > 1 && !c->attn_few)
            FLC_L(flc_attn_combine(c->att, c->part, m, d, p->tiles_bound, p->n_splits, flc_pdl(c),
                                   st),
                  "attention split combine", l);
        if ((rc = flc_gemm(c, c->x, H, c->att, d.qd, T, &ly->wo, H, d.qd, FLC_MM_ACC,
                           "o projection", l, e)))
            return rc;
        if (ly->moe) { /* the gathered experts read xb, the router x */
            FLC_L(flc_rmsnorm(c->xb, c->x, ly->mlp_norm, NULL, T, H, d.eps, flc_pdl(c), st),
                  "post-attention RMSNorm", l);
            rc = flc_moe(c, ly, l, T, e);
        } else {
            flc_norm_in nz;
            const flc_norm_in *use;
            rc = flc_norm_for(c, &nz, ly->mlp_norm, T, "post-attention RMSNorm", l, &use, e);
            if (!rc)
                rc = flc_mlp(c, c->x, FLC_MM_ACC, c->xb, use, T, &ly->wgu, &ly->wdown, NI, c->gu,
                             c->hb, l, e);
        }
        if (rc)
            return rc;
    }
    const int32_t *out_rows_h = c->meta_h + c->off.out_rows;
    for (int r0 = 0; r0 < p->n_out; r0 += c->head_rows) {
        int nr = p->n_out - r0 < c->head_rows ? p->n_out - r0 : c->head_rows;
        /* the final norm keeps its kernel: the lm_head's ~10,000 blocks would each read the
         * rows again (flc_fuses_norm), some hundreds of MB from L2 for one kernel saved */
        FLC_L(flc_rmsnorm(c->xb, c->x, c->final_norm, m.out_rows + r0, nr, H, d.eps, flc_pdl(c),
                          st),
              "final RMSNorm", -1);
        int rc = flc_gemm(c, c->logits, V, c->xb, H, nr, &c->lm_head, V, H, FLC_MM_STORE,
                          "lm_head", -1, e);
        if (rc)
            return rc;
        FLC_L(flc_top1(c->tok_d + r0, c->lse, c->logits, nr, V, flc_pdl(c), st),
              "softmax statistics (top-1, probability, entropy)", -1);
        if (logits) {
            c->pdl_ok = false; /* the copies below */
            for (int i = 0; i < nr; i++) {
                cudaError_t err =
                    cudaMemcpyAsync(logits + (size_t)out_rows_h[r0 + i] * V,
                                    c->logits + (size_t)i * V, (size_t)V * 4,
                                    cudaMemcpyDeviceToHost, st);
                if (err != cudaSuccess)
                    return flc_fail(c, e, err, "copying logits to the host");
            }
        }
    }
    return 0;
}

static void flc_graphs_off(flc *c, const char *why, cudaError_t err)
{
    c->graphs = false;
    c->stats.graphs_on = 0;
    snprintf(c->stats.graphs_note, sizeof c->stats.graphs_note, "%.100s%s%.50s", why,
             err != cudaSuccess ? ": " : "", err != cudaSuccess ? cudaGetErrorString(err) : "");
    (void)cudaGetLastError(); /* capture errors are not sticky: clear them */
    flc_graphs_flush(c);
}

/* Runs the plan through the graph cache: replay, capture (second sighting), or eager. */
static int flc_run(flc *c, const flc_plan *p, float *logits, fl_err *e)
{
    if (!c->graphs || c->sync_debug || logits || c->force_ids) {
        c->stats.eager++;
        return flc_enqueue(c, p, logits, e);
    }
    const flc_gkey key = {p->T, p->S, p->n_out, p->n_splits};
    int slot;
    bool evict;
    int what = flc_gcache_see(&c->gc, &key, &slot, &evict);
    if (what == FLC_G_FIRST) { /* first sighting: the key is remembered, the run eager */
        if (c->gexec[slot]) {
            cudaGraphExecDestroy(c->gexec[slot]);
            c->gexec[slot] = NULL;
        }
        c->stats.evicted += evict;
        c->stats.eager++;
        return flc_enqueue(c, p, NULL, e);
    }
    if (what == FLC_G_CAPTURE) {
        double tc0 = fl_now();
        cudaError_t err = cudaStreamBeginCapture(c->st, cudaStreamCaptureModeThreadLocal);
        if (err != cudaSuccess) {
            flc_graphs_off(c, "cudaStreamBeginCapture failed", err);
            c->stats.eager++;
            return flc_enqueue(c, p, NULL, e);
        }
        fl_err ce = {0, {0}};
        if (c->kt_graphs) { /* FL_CUDA_KTIME=2: the events are the graph's own nodes */
            c->kt_ext = true;
            c->kt_n = flc_kt_record(c, c->kt_ev[0]) == cudaSuccess ? 1 : 0;
        }
        int rc = flc_enqueue(c, p, NULL, &ce);
        c->kt_ext = false;
        cudaGraph_t graph = NULL;
        err = cudaStreamEndCapture(c->st, &graph);
        if (rc || err != cudaSuccess || !graph) {
            char why[FL_ERR_MSG + 40];
            snprintf(why, sizeof why, "capture failed%s%s", rc ? ": " : "", rc ? ce.msg : "");
            if (graph)
                cudaGraphDestroy(graph);
            flc_graphs_off(c, why, err);
            if (c->broken[0])
                return fl_err_set(e, FL_EIO, "%s", ce.msg);
            c->stats.eager++;
            return flc_enqueue(c, p, NULL, e);
        }
        err = cudaGraphInstantiate(&c->gexec[slot], graph, 0);
        cudaGraphDestroy(graph);
        if (err != cudaSuccess) {
            c->gexec[slot] = NULL;
            flc_graphs_off(c, "cudaGraphInstantiate failed", err);
            c->stats.eager++;
            return flc_enqueue(c, p, NULL, e);
        }
        c->gc.s[slot].captured = true;
        if (c->kt_graphs) {
            c->kt_slot_n[slot] = c->kt_n;
            memcpy(c->kt_slot_of + (size_t)slot * FLC_KT_EVENTS, c->kt_of,
                   (size_t)c->kt_n * sizeof *c->kt_of);
        }
        c->kt_n = 0;
        c->stats.captured++;
        c->stats.capture_s += fl_now() - tc0;
    }
    cudaError_t err = cudaGraphLaunch(c->gexec[slot], c->st);
    if (err != cudaSuccess)
        return flc_fail(c, e, err, "cudaGraphLaunch");
    c->kt_replay = slot;
    c->stats.replayed++;
    return 0;
}

static int flc_forward_impl(fl_backend *b, const fl_batch *bt, fl_tok_out *out, float *logits,
                            fl_err *e)
{
    flc *c = (flc *)b->impl;
    int rc = fl_batch_check(&c->base, &c->cfg, bt, e);
    if (rc)
        return rc;
    if (c->broken[0])
        return fl_err_set(e, FL_ESTATE, "cuda: the GPU failed earlier (%s); restart fogline",
                          c->broken);
    cudaError_t err = cudaSetDevice(c->dev);
    if (err != cudaSuccess)
        return flc_cuda_err(e, err, "cudaSetDevice");
    flc_plan p;
    memset(&p, 0, sizeof p);
    double t0 = fl_now();
    if ((rc = flc_plan_batch(c, bt, out || logits, logits == NULL, &p, e)))
        return rc;
    err = cudaMemcpyAsync(c->meta_d, c->meta_h, p.meta_bytes, cudaMemcpyHostToDevice, c->st);
    if (err != cudaSuccess)
        return flc_fail(c, e, err, "copying the batch metadata to the GPU");
    double t1 = fl_now();
    if (c->ktime && !c->kt_graphs)
        c->kt_n = cudaEventRecord(c->kt_ev[0], c->st) == cudaSuccess ? 1 : 0;
    c->kt_replay = -1;
    rc = flc_run(c, &p, logits, e);
    if (!rc && out && p.n_out > 0) {
        err = cudaMemcpyAsync(c->tok_h, c->tok_d, (size_t)p.n_out * sizeof(flc_tok),
                              cudaMemcpyDeviceToHost, c->st);
        if (err != cudaSuccess)
            rc = flc_fail(c, e, err, "copying the outputs to the host");
    }
    if (!rc && p.stores) { /* persistence orders its page copies after this */
        pthread_mutex_lock(&c->ev_mu);
        long long seq = c->fseq++;
        err = cudaEventRecord(c->ev[seq % FLC_EV_RING], c->st);
        if (err == cudaSuccess) {
            const int B = c->d.B;
            for (int s = 0; s < bt->n_segs; s++) {
                const fl_segment *sg = &bt->segs[s];
                if (sg->n_store <= 0)
                    continue;
                for (int blk = sg->pos0 / B; blk <= (sg->pos0 + sg->n_store - 1) / B; blk++)
                    c->page_wseq[sg->pages[blk]] = seq;
            }
        }
        pthread_mutex_unlock(&c->ev_mu);
        if (err != cudaSuccess)
            rc = flc_fail(c, e, err, "cudaEventRecord after the forward");
    }
    /* always wait: a failed enqueue may have left work on the stream */
    double t2 = fl_now();
    cudaError_t serr = cudaStreamSynchronize(c->st);
    c->stats.plan_s += t1 - t0;
    c->stats.run_s += t2 - t1;
    c->stats.wait_s += fl_now() - t2;
    c->stats.forwards++;
    c->stats.rows += bt->n_tokens;
    if (c->ktime && serr == cudaSuccess && !rc) {
        /* =1: this eager forward's events; =2: those of the graph it replayed, if any */
        const int n = !c->kt_graphs ? c->kt_n
                      : c->kt_replay >= 0 ? c->kt_slot_n[c->kt_replay] : 0;
        const int *of = !c->kt_graphs ? c->kt_of
                        : c->kt_replay >= 0 ? c->kt_slot_of + (size_t)c->kt_replay * FLC_KT_EVENTS
                                            : NULL;
        for (int i = 1; i < n; i++) {
            float ms = 0;
            if (cudaEventElapsedTime(&ms, c->kt_ev[i - 1], c->kt_ev[i]) == cudaSuccess) {
                c->kt_ms[of[i]] += ms;
                c->kt_calls[of[i]]++;
            }
        }
        c->kt_forwards += n > 1;
    }
    if (c->ktime)
        c->kt_n = 0;
    if (serr != cudaSuccess) {
        if (!rc)
            rc = flc_fail(c, e, serr, "forward (an asynchronous kernel error; "
                                      "FL_CUDA_SYNC_DEBUG=1 names the kernel)");
        else
            flc_fail(c, NULL, serr, "forward");
    }
    if (rc)
        return rc;
    if (out)
        for (int i = 0; i < p.n_out_real; i++) {
            const flc_tok *tk = &c->tok_h[i];
            fl_tok_out *o = &out[c->meta_h[c->off.out_rows + i]];
            o->token = tk->token;
            o->prob = tk->prob;
            o->entropy = tk->entropy;
        }
    return 0;
}

/* ---------------------------------------------------------------- pages */

static int flc_page_read(fl_backend *b, int32_t page, void *dst, fl_err *e)
{
    flc *c = (flc *)b->impl;
    if (page < 0 || page >= b->n_pages || !dst)
        return fl_err_set(e, FL_EINVAL, "page_read: page %d not in 0..%d", page, b->n_pages - 1);
    if (c->broken[0])
        return fl_err_set(e, FL_ESTATE, "cuda: page_read: the GPU failed earlier (%s)",
                          c->broken);
    pthread_mutex_lock(&c->rd_mu);
    cudaError_t err = cudaSetDevice(c->dev);
    if (err == cudaSuccess) {
        pthread_mutex_lock(&c->ev_mu);
        long long s = c->page_wseq[page];
        if (s >= 0)
            err = cudaStreamWaitEvent(c->st_io, c->ev[s % FLC_EV_RING], 0);
        pthread_mutex_unlock(&c->ev_mu);
    }
    size_t n = c->d.page_elems;
    if (err == cudaSuccess)
        err = cudaMemcpyAsync(c->stage_r, c->pool + (size_t)page * n, c->page_dev_bytes,
                              cudaMemcpyDeviceToHost, c->st_io);
    if (err == cudaSuccess)
        err = cudaStreamSynchronize(c->st_io);
    if (err == cudaSuccess) {
        uint32_t *d32 = (uint32_t *)dst;
        for (size_t i = 0; i < n; i++)
            d32[i] = (uint32_t)c->stage_r[i] << 16;
    }
    pthread_mutex_unlock(&c->rd_mu);
    if (err != cudaSuccess) {
        char w[64];
        snprintf(w, sizeof w, "page_read of page %d", page);
        return flc_fail(c, e, err, w);
    }
    return 0;
}

static int flc_page_write(fl_backend *b, int32_t page, const void *src, fl_err *e)
{
    flc *c = (flc *)b->impl;
    if (page < 0 || page >= b->n_pages || !src)
        return fl_err_set(e, FL_EINVAL, "page_write: page %d not in 0..%d", page, b->n_pages - 1);
    if (c->broken[0])
        return fl_err_set(e, FL_ESTATE, "cuda: page_write: the GPU failed earlier (%s)",
                          c->broken);
    pthread_mutex_lock(&c->wr_mu);
    size_t n = c->d.page_elems;
    const float *f = (const float *)src;
    for (size_t i = 0; i < n; i++)
        c->stage_w[i] = fl_f32_to_bf16(f[i]);
    cudaError_t err = cudaSetDevice(c->dev);
    if (err == cudaSuccess)
        err = cudaMemcpyAsync(c->pool + (size_t)page * n, c->stage_w, c->page_dev_bytes,
                              cudaMemcpyHostToDevice, c->st_io);
    if (err == cudaSuccess)
        err = cudaStreamSynchronize(c->st_io);
    if (err == cudaSuccess) {
        pthread_mutex_lock(&c->ev_mu);
        c->page_wseq[page] = -1; /* complete: nothing to wait for */
        pthread_mutex_unlock(&c->ev_mu);
    }
    pthread_mutex_unlock(&c->wr_mu);
    if (err != cudaSuccess) {
        char w[64];
        snprintf(w, sizeof w, "page_write of page %d", page);
        return flc_fail(c, e, err, w);
    }
    return 0;
}

/* ---------------------------------------------------------------- create / destroy */

/* The forward; routes forced by fl_cuda_force_routes serve this one forward only. */
static int flc_forward(fl_backend *b, const fl_batch *bt, fl_tok_out *out, float *logits,
                       fl_err *e)
{
    flc *c = (flc *)b->impl;
    c->force_n = bt ? bt->n_tokens : 0;
    int rc = flc_forward_impl(b, bt, out, logits, e);
    c->force_ids = NULL;
    return rc;
}

static void flc_destroy(fl_backend *b)
{
    if (!b)
        return;
    flc *c = (flc *)b->impl;
    cudaSetDevice(c->dev);
    if (c->st)
        cudaStreamSynchronize(c->st);
    if (c->st_io)
        cudaStreamSynchronize(c->st_io);
    flc_graphs_flush(c);
    for (int i = 0; i < c->n_ev; i++)
        cudaEventDestroy(c->ev[i]);
    if (c->ktime) {
        double total = 0;
        for (int k = 0; k < c->kt_labels; k++)
            total += c->kt_ms[k];
        fprintf(stderr, "cuda kernel times (FL_CUDA_KTIME=%d, %s), %lld forwards, %.3f ms per "
                "forward:\n", c->kt_graphs ? 2 : 1, c->kt_graphs ? "graph replays" : "eager",
                c->kt_forwards, c->kt_forwards ? total / (double)c->kt_forwards : 0.0);
        for (int k = 0; k < c->kt_labels; k++)
            fprintf(stderr, "  %-52s %9.3f ms per forward %5.1f%%  %8.1f us per call\n",
                    c->kt_name[k], c->kt_forwards ? c->kt_ms[k] / (double)c->kt_forwards : 0.0,
                    total > 0 ? 100.0 * c->kt_ms[k] / total : 0.0,
                    c->kt_calls[k] ? 1e3 * c->kt_ms[k] / (double)c->kt_calls[k] : 0.0);
        for (int i = 0; i < FLC_KT_EVENTS; i++)
            if (c->kt_ev[i])
                cudaEventDestroy(c->kt_ev[i]);
    }
    free(c->kt_slot_n);
    free(c->kt_slot_of);
    flc_blas_close(&c->blas);
    cudaFree(c->ws);
    cudaFree(c->wmem);
    cudaFree(c->amem);
    cudaFree(c->pool);
    cudaFree(c->meta_d);
    cudaFreeHost(c->meta_h);
    cudaFreeHost(c->tok_h);
    cudaFreeHost(c->stage_r);
    cudaFreeHost(c->stage_w);
    if (c->st)
        cudaStreamDestroy(c->st);
    if (c->st_io)
        cudaStreamDestroy(c->st_io);
    if (c->mu_ok) {
        pthread_mutex_destroy(&c->ev_mu);
        pthread_mutex_destroy(&c->rd_mu);
        pthread_mutex_destroy(&c->wr_mu);
    }
    free(c->page_wseq);
    for (int l = 0; c->layers && l < c->cfg.n_layers; l++) {
        free(c->layers[l].egu);
        free(c->layers[l].edown);
    }
    free(c->layers);
    cudaFreeHost(c->rid_h);
    cudaFreeHost(c->rw_h);
    fl_wplan_free(&c->wplan);
    free(c);
}

static const fl_backend_ops flc_ops = {"cuda", flc_forward, flc_page_read, flc_page_write,
                                       flc_destroy};

/* Points the backend at the slots of the weight plan in the block at base. */
/* Where a q8 matrix's scales start after its quants, and its bytes (fl_wplan_opts.mat_bytes:
 * 0 for a matrix held as bf16: the embedding, which a gather reads, and any whose k is not a
 * multiple of 32). A tied head is the embedding's slot, so it stays bf16. */
static size_t flc_q8_scales_at(size_t rows, size_t cols)
{
    return (rows * cols + FLC_ALIGN - 1) / FLC_ALIGN * FLC_ALIGN;
}

static size_t flc_q8_mat_bytes(void *ctx, fl_wrole role, size_t rows, size_t cols)
{
    (void)ctx;
    if (cols % 32 || (role != FL_W_QKV && role != FL_W_O && role != FL_W_GATE_UP &&
                      role != FL_W_DOWN && role != FL_W_LM_HEAD && role != FL_W_EXPERT_GATE_UP &&
                      role != FL_W_EXPERT_DOWN && role != FL_W_SHARED_GATE_UP &&
                      role != FL_W_SHARED_DOWN))
        return 0;
    return flc_q8_scales_at(rows, cols) + rows * (cols / 32) * 2;
}

static flc_mat flc_mat_at(const fl_wslot *s, char *at)
{
    flc_mat w = {NULL, NULL, NULL};
    if (s->elem == 0) {
        w.q = (const int8_t *)at;
        w.d = (const uint16_t *)(at + flc_q8_scales_at(s->rows, s->cols));
    } else {
        w.w = (const flc_bf16 *)at;
    }
    return w;
}

static void flc_place_weights(flc *c, const fl_wplan *p, char *base)
{
    c->stream_bytes = c->moe_bytes_all = c->moe_fixed = 0;
    for (int i = 0; i < p->n; i++) {
        const fl_wslot *s = &p->slot[i];
        flc_layer *ly = s->layer >= 0 ? &c->layers[s->layer] : NULL;
        char *at = base + s->off;
        switch (s->role) {
        case FL_W_QKV: ly->wqkv = flc_mat_at(s, at); break;
        case FL_W_QKV_BIAS: ly->bqkv = (float *)at; break;
        case FL_W_O: ly->wo = flc_mat_at(s, at); break;
        case FL_W_GATE_UP: ly->wgu = flc_mat_at(s, at); break;
        case FL_W_DOWN: ly->wdown = flc_mat_at(s, at); break;
        case FL_W_ATTN_NORM: ly->attn_norm = (float *)at; break;
        case FL_W_MLP_NORM: ly->mlp_norm = (float *)at; break;
        case FL_W_Q_NORM: ly->q_norm = (float *)at; break;
        case FL_W_K_NORM: ly->k_norm = (float *)at; break;
        case FL_W_EMBED: c->embed = (flc_bf16 *)at; break;
        case FL_W_LM_HEAD: c->lm_head = flc_mat_at(s, at); break;
        case FL_W_FINAL_NORM: c->final_norm = (float *)at; break;
        case FL_W_ROPE: c->inv_freq = (double *)at; break;
        case FL_W_ROUTER: ly->router = (const float *)at; break;
        case FL_W_EXPERT_BIAS: ly->ebias = (const float *)at; break;
        case FL_W_EXPERT_GATE_UP: ly->egu[s->expert] = flc_mat_at(s, at); break;
        case FL_W_EXPERT_DOWN: ly->edown[s->expert] = flc_mat_at(s, at); break;
        case FL_W_SHARED_GATE_UP: ly->sgu = flc_mat_at(s, at); ly->shared = true; break;
        case FL_W_SHARED_DOWN: ly->sdown = flc_mat_at(s, at); break;
        default: abort();
        }
        /* what a forward streams: every projection and the head, tied or not; with experts,
         * all of them (a forward reads those its tokens go to: fl_cuda_moe_stats_get) */
        size_t sb = s->elem ? s->rows * s->cols * s->elem
                            : flc_q8_mat_bytes(c, s->role, s->rows, s->cols);
        bool routed = s->role == FL_W_EXPERT_GATE_UP || s->role == FL_W_EXPERT_DOWN;
        bool fixed = s->role == FL_W_ROUTER || s->role == FL_W_SHARED_GATE_UP ||
                     s->role == FL_W_SHARED_DOWN;
        if (s->role == FL_W_QKV || s->role == FL_W_O || s->role == FL_W_GATE_UP ||
            s->role == FL_W_DOWN || s->role == FL_W_LM_HEAD || routed || fixed)
            c->stream_bytes += sb;
        if (routed || fixed)
            c->moe_bytes_all += sb;
        if (fixed)
            c->moe_fixed += sb;
        if (s->role == FL_W_EXPERT_GATE_UP)
            c->egu_bytes = sb;
        if (s->role == FL_W_EXPERT_DOWN)
            c->edown_bytes = sb;
    }
}

static void flc_place_acts(flc *c, fl_bump *b)
{
    const flc_dims *d = &c->d;
    size_t T = (size_t)c->base.max_tokens, H = (size_t)d->H, NI = (size_t)c->NIm;
    size_t V = (size_t)d->V, HR = (size_t)c->head_rows;
    c->x = (float *)fl_bump_take(b, T * H * 4);
    c->xb = (flc_bf16 *)fl_bump_take(b, T * H * 2);
    c->qkv = (float *)fl_bump_take(b, T * d->qkvd * 4);
    c->kvo = (flc_bf16 *)fl_bump_take(b, T * 2 * d->kvd * 2);
    c->att = (flc_bf16 *)fl_bump_take(b, T * d->qd * 2);
    c->gu = (float *)fl_bump_take(b, T * 2 * NI * 4);
    c->hb = (flc_bf16 *)fl_bump_take(b, T * NI * 2);
    c->logits = (float *)fl_bump_take(b, HR * V * 4);
    c->lse = (flc_lse *)fl_bump_take(b, HR * ((V + FLC_VCHUNK - 1) / FLC_VCHUNK) * sizeof(flc_lse));
    c->tok_d = (flc_tok *)fl_bump_take(b, T * sizeof(flc_tok));
    c->part = (float *)fl_bump_take(b, c->part_floats * 4);
    c->ticket = (int *)fl_bump_take(b, (size_t)c->tiles_max * d->kvh * sizeof(int));
    c->wdq = c->wdq_elems ? (flc_bf16 *)fl_bump_take(b, c->wdq_elems * 2) : NULL;
    if (c->q8_gemm) {
        c->gq_part = (float *)fl_bump_take(b, 2 * (size_t)c->n_sm * FLC_GQ_TILE * 4);
        c->gq_ticket = (int *)fl_bump_take(b, 2 * (size_t)c->n_sm * sizeof(int));
    }
    if (c->moe) {
        size_t E = (size_t)c->E, A = T * (size_t)c->K, mi = (size_t)c->mi;
        c->rlog = (float *)fl_bump_take(b, T * E * 4);
        c->rid_d = (int32_t *)fl_bump_take(b, A * 4);
        c->rw_d = (float *)fl_bump_take(b, A * 4);
        c->eoff_d = (int32_t *)fl_bump_take(b, (size_t)c->cfg.n_layers * (E + 2) * 4);
        c->atok_d = (int32_t *)fl_bump_take(b, A * 4);
        c->apos_d = (int32_t *)fl_bump_take(b, A * 4);
        c->xg = (flc_bf16 *)fl_bump_take(b, A * H * 2);
        c->eh = (flc_bf16 *)fl_bump_take(b, A * mi * 2);
        c->ey = (float *)fl_bump_take(b, A * H * 4);
        c->sy = (float *)fl_bump_take(b, T * H * 4);
        c->emats = (flc_emat *)fl_bump_take(b, (size_t)c->cfg.n_layers * 2 * E * sizeof(flc_emat));
    }
}

/* Uploads rows [r0, r0 + rows) of the weight matrix held by tensor t (cols columns; a float
 * dtype, or a quantized directory's q8/q4 quants with their scales ts) into dst: as bf16, or,
 * with q/dq, as q8 quants at q + r0 * cols and scales at dq + r0 * cols / 32 (qformat.h's
 * quantizer, the CPU's). A BF16 tensor's rows are copied as they are; others go through
 * f32 (fl_matrix_rows_f32) in chunks of tmp_elems. */
static int flc_upload_mat(flc_bf16 *dst, int8_t *q, uint16_t *dq, const fl_tensor *t,
                          const fl_tensor *ts, size_t rows, size_t cols, float *tmp,
                          size_t tmp_elems, fl_err *e)
{
    if (!t)
        return fl_err_set(e, FL_EFORMAT, "cuda: a weight matrix has no tensor");
    cudaError_t err = cudaSuccess;
    if (!q && t->dtype == FL_DT_BF16) {
        if ((size_t)t->numel != rows * cols)
            return fl_err_set(e, FL_EFORMAT, "cuda: tensor %s: expected %zu x %zu values",
                              t->name, rows, cols);
        err = cudaMemcpy(dst, t->data, rows * cols * 2, cudaMemcpyHostToDevice);
    } else {
        size_t chunk = tmp_elems / cols ? tmp_elems / cols : 1; /* rows per pass */
        /* the pass's f32 rows, then its bf16 or int8 values, then its f16 scales */
        uint16_t *hb = (uint16_t *)(tmp + chunk * cols);
        int8_t *hq = (int8_t *)hb;
        uint16_t *hd = (uint16_t *)(hq + chunk * cols);
        for (size_t r = 0; r < rows && err == cudaSuccess; r += chunk) {
            size_t nr = rows - r < chunk ? rows - r : chunk;
            if (fl_matrix_rows_f32(tmp, t, ts, r, nr, cols, e))
                return -1;
            if (q) {
                if (fl_q8_quantize(hq, hd, tmp, (int)nr, (int)cols, e))
                    return -1;
                err = cudaMemcpy(q + r * cols, hq, nr * cols, cudaMemcpyHostToDevice);
                if (err == cudaSuccess)
                    err = cudaMemcpy(dq + r * (cols / 32), hd, nr * (cols / 32) * 2,
                                     cudaMemcpyHostToDevice);
            } else {
                for (size_t i = 0; i < nr * cols; i++)
                    hb[i] = fl_f32_to_bf16(tmp[i]);
                err = cudaMemcpy(dst + r * cols, hb, nr * cols * 2, cudaMemcpyHostToDevice);
            }
        }
    }
    if (err != cudaSuccess) {
        char w[200];
        snprintf(w, sizeof w, "uploading tensor %s", t->name);
        return flc_cuda_err(e, err, w);
    }
    return 0;
}

static int flc_upload_vec(float *dst, const fl_tensor *t, size_t n, fl_err *e)
{
    if (!t || (size_t)t->numel != n)
        return fl_err_set(e, FL_EFORMAT, "cuda: tensor %s: expected %zu float values",
                          t ? t->name : "?", n);
    float *h = (float *)malloc(n * 4);
    if (!h)
        return fl_err_set(e, FL_ENOMEM, "cuda: out of host memory");
    int rc = 0;
    if (fl_to_f32(h, t->data, t->dtype, n))
        rc = fl_err_set(e, FL_EFORMAT, "cuda: tensor %s: not a float type", t->name);
    cudaError_t err = rc ? cudaSuccess : cudaMemcpy(dst, h, n * 4, cudaMemcpyHostToDevice);
    free(h);
    if (err != cudaSuccess) {
        char w[200];
        snprintf(w, sizeof w, "uploading tensor %s", t->name);
        return flc_cuda_err(e, err, w);
    }
    return rc;
}

/* Uploads every slot of the weight plan into wmem: the matrices as bf16, the vectors as f32,
 * the RoPE frequencies as computed on the host (fl_rope_inv_freq, f64). */
static int flc_upload_weights(flc *c, const fl_wplan *p, fl_err *e)
{
    /* f32 rows, then as many bf16 or int8 values and their scales (flc_upload_mat) */
    size_t tmp_elems = (size_t)8 << 20;
    float *tmp = (float *)malloc(tmp_elems * 4 + tmp_elems * 2 + tmp_elems / 16 + 64);
    if (!tmp)
        return fl_err_set(e, FL_ENOMEM, "cuda: out of host memory");
    int rc = 0;
    for (int i = 0; i < p->n && !rc; i++) {
        const fl_wslot *s = &p->slot[i];
        char *at = c->wmem + s->off;
        if (s->shares >= 0) /* the tied head reads the embedding's copy */
            continue;
        if (s->role == FL_W_ROPE) {
            double inv[FLC_HD_MAX / 2]; /* create admits head_dim <= FLC_HD_MAX */
            fl_rope_inv_freq(&c->cfg, inv);
            cudaError_t err = cudaMemcpy(at, inv, s->bytes, cudaMemcpyHostToDevice);
            if (err != cudaSuccess)
                rc = flc_cuda_err(e, err, "uploading the RoPE frequencies");
            continue;
        }
        if (s->elem == 0) { /* q8: each part's rows after the last, in both planes */
            flc_mat w = flc_mat_at(s, at);
            size_t r0 = 0;
            for (int k = 0; k < FL_WSLOT_PARTS && s->part_elems[k] && !rc; k++) {
                size_t nr = s->part_elems[k] / s->cols;
                rc = flc_upload_mat(NULL, (int8_t *)w.q + r0 * s->cols,
                                    (uint16_t *)w.d + r0 * (s->cols / 32), s->src[k],
                                    fl_model_scales(c->base.model, s->src[k]), nr, s->cols, tmp,
                                    tmp_elems, e);
                r0 += nr;
            }
            continue;
        }
        for (int k = 0; k < FL_WSLOT_PARTS && s->part_elems[k] && !rc; k++) {
            if (s->elem == 2)
                rc = flc_upload_mat((flc_bf16 *)at, NULL, NULL, s->src[k],
                                    fl_model_scales(c->base.model, s->src[k]),
                                    s->part_elems[k] / s->cols, s->cols, tmp, tmp_elems, e);
            else
                rc = flc_upload_vec((float *)at, s->src[k], s->part_elems[k], e);
            at += s->part_elems[k] * s->elem;
        }
    }
    free(tmp);
    return rc;
}

/* The experts' matrices of every MoE layer into c->emats (the grouped kernel's table), and
 * which format they are in. */
static cudaError_t flc_upload_emats(flc *c)
{
    size_t E = (size_t)c->E, L = (size_t)c->cfg.n_layers;
    flc_emat *h = (flc_emat *)calloc(L * 2 * E, sizeof *h);
    if (!h)
        return cudaErrorMemoryAllocation;
    for (size_t l = 0; l < L; l++) {
        const flc_layer *ly = &c->layers[l];
        for (size_t x = 0; ly->moe && x < E; x++) {
            h[(l * 2) * E + x] = (flc_emat){ly->egu[x].w, ly->egu[x].q, ly->egu[x].d};
            h[(l * 2 + 1) * E + x] = (flc_emat){ly->edown[x].w, ly->edown[x].q, ly->edown[x].d};
        }
        if (ly->moe) {
            c->egu_q8 = ly->egu[0].q != NULL;
            c->edown_q8 = ly->edown[0].q != NULL;
        }
    }
    cudaError_t err = cudaMemcpy(c->emats, h, L * 2 * E * sizeof *h, cudaMemcpyHostToDevice);
    free(h);
    return err;
}

static int flc_env_int(const char *name, int def, int lo, int hi)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return def;
    char *end;
    long v = strtol(s, &end, 10);
    return *end || v < lo || v > hi ? def : (int)v;
}

/* Whether the driver library exists; cudart loads it itself, but saying "no driver" is
 * clearer than its "driver version is insufficient". */
static bool flc_driver_present(char *why, size_t cap)
{
#ifdef FL_CUDA_EMU
    (void)why;
    (void)cap;
    return true; /* tests/cuda_emu: no driver involved */
#endif
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *d = dlerror();
        snprintf(why, cap, "no NVIDIA driver (%s)", d ? d : "libcuda.so.1 not found");
        return false;
    }
    dlclose(h);
    return true;
}

/* Picks the device and checks this build can run on it; fills name/props. */
static int flc_pick_device(int *dev, cudaDeviceProp *prop, char *why, size_t cap)
{
    if (!flc_driver_present(why, cap))
        return 0;
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        snprintf(why, cap, "CUDA cannot start: %s", cudaGetErrorString(err));
        (void)cudaGetLastError();
        return 0;
    }
    if (n <= 0) {
        snprintf(why, cap, "no CUDA device visible");
        return 0;
    }
    *dev = flc_env_int("FL_CUDA_DEVICE", 0, 0, 1 << 20);
    if (*dev >= n) {
        snprintf(why, cap, "FL_CUDA_DEVICE=%d, but %d device%s visible", *dev, n,
                 n == 1 ? " is" : "s are");
        return 0;
    }
    if ((err = cudaGetDeviceProperties(prop, *dev)) != cudaSuccess ||
        (err = cudaSetDevice(*dev)) != cudaSuccess) {
        snprintf(why, cap, "device %d: %s", *dev, cudaGetErrorString(err));
        (void)cudaGetLastError();
        return 0;
    }
    err = flc_kernels_loadable();
    if (err != cudaSuccess) {
        snprintf(why, cap, "%s (sm_%d%d) cannot run this build's kernels (built for sm_%s: %s); "
                 "rebuild with -DCMAKE_CUDA_ARCHITECTURES=%d%d", prop->name, prop->major,
                 prop->minor, FL_CUDA_ARCHS, cudaGetErrorString(err), prop->major, prop->minor);
        (void)cudaGetLastError();
        return 0;
    }
    return 1;
}

extern "C" bool fl_cuda_built(void) { return true; }

extern "C" int fl_cuda_probe(char *why, size_t cap)
{
    int dev = 0;
    cudaDeviceProp prop;
    memset(&prop, 0, sizeof prop);
    if (!flc_pick_device(&dev, &prop, why, cap))
        return 0;
    snprintf(why, cap, "%s (device %d, sm_%d%d, %.1f GiB)", prop.name, dev, prop.major,
             prop.minor, GIB(prop.totalGlobalMem));
    return 1;
}

extern "C" int fl_backend_cuda_create(fl_backend **out, const fl_model *m,
                                      const fl_backend_opts *o, fl_err *e)
{
    *out = NULL;
    if (!m || !o)
        return fl_err_set(e, FL_EINVAL, "cuda backend: no model or options");
    const fl_config *cf = &m->cfg;
    if (!m->weights || !m->embed || !m->lm_head || !m->final_norm || !m->layers)
        return fl_err_set(e, FL_EINVAL, "cuda backend: the model was loaded without weights");
    /* mixture-of-experts layers, LLaDA2's fused q|k|v and partial rotary: compiled, not yet
     * run on a GPU, so opt-in (FL_CUDA_MOE=1) until tests/gpu/run.sh's MoE parity has passed
     * on one (docs/cuda.md) */
    bool moe = cf->moe.router != FL_ROUTER_NONE;
    if ((moe || cf->fused_qkv || fl_config_rotary_dim(cf) != cf->head_dim) &&
        flc_env_int("FL_CUDA_MOE", 0, 0, 1) != 1)
        return fl_err_set(e, FL_EUNSUPPORTED,
                          "cuda backend: %s models (mixture of experts) on CUDA are not yet "
                          "verified on a GPU: use the CPU backend, or set FL_CUDA_MOE=1 to try them",
                          fl_family_name(cf->family));
    if (moe && (cf->hidden > 12224 || cf->hidden % 8 || cf->moe.inter % 8 ||
                cf->moe.n_experts <= 0 || cf->moe.n_experts > 1024 || cf->moe.top_k <= 0 ||
                cf->moe.top_k > cf->moe.n_experts || cf->moe.n_group <= 0))
        return fl_err_set(e, FL_EUNSUPPORTED, "cuda backend: unsupported mixture of experts "
                          "(hidden %d, expert width %d: multiples of 8, hidden at most 12224; "
                          "%d experts: at most 1024; top %d)", cf->hidden, cf->moe.inter,
                          cf->moe.n_experts, cf->moe.top_k);
    if (o->n_pages < 0 || o->max_tokens <= 0)
        return fl_err_set(e, FL_EINVAL, "cuda backend: bad options (n_pages %d, max_tokens %d)",
                          o->n_pages, o->max_tokens);
    /* bf16 and q8 are the formats the kernels take; an explicit f32 is refused rather than
     * silently rounded (docs/cuda.md "Weights"), AUTO on an F32/F16 file is rounded; q4 (asked
     * for, or a q4 directory's auto) is the CPU's */
    fl_wformat wf = fl_wformat_resolve(o->weights, m);
    if (o->weights == FL_WEIGHTS_F32 || wf == FL_WEIGHTS_Q4)
        return fl_err_set(e, FL_EUNSUPPORTED, "cuda backend: %s%s: it holds bf16 or q8 weights "
                          "only (use --weights bf16, q8 or auto, or --device cpu)",
                          o->weights == FL_WEIGHTS_AUTO ? "the directory's weights " : "--weights ",
                          fl_wformat_name(wf));
    /* its pages and attention are bf16 only (this forward's K/V rounded as pages hold them) */
    if (o->kv != FL_KV_AUTO && o->kv != FL_KV_BF16)
        return fl_err_set(e, FL_EUNSUPPORTED, "cuda backend: --kv-format %s: it holds bf16 KV "
                          "pages only (use --kv-format bf16 or auto, or --device cpu)",
                          fl_kvformat_name(o->kv));
    if (cf->head_dim % 8 || cf->head_dim > FLC_HD_MAX || cf->n_kv_heads <= 0 ||
        cf->n_heads % cf->n_kv_heads || cf->block_size <= 0 || cf->max_pos <= 0)
        return fl_err_set(e, FL_EUNSUPPORTED, "cuda backend: unsupported shape (head_dim %d: "
                          "needs a multiple of 8 up to %d; heads %d/%d, block %d)",
                          cf->head_dim, FLC_HD_MAX, cf->n_heads, cf->n_kv_heads, cf->block_size);
    char why[400];
    int dev = 0;
    cudaDeviceProp prop;
    memset(&prop, 0, sizeof prop);
    if (!flc_pick_device(&dev, &prop, why, sizeof why))
        return fl_err_set(e, FL_EUNSUPPORTED, "cuda: no usable GPU: %s", why);

    flc *c = (flc *)calloc(1, sizeof *c);
    if (!c)
        return fl_err_set(e, FL_ENOMEM, "cuda backend: out of host memory");
    c->base.ops = &flc_ops;
    c->base.model = m;
    c->base.max_tokens = o->max_tokens;
    c->base.impl = c;
    c->q8 = wf == FL_WEIGHTS_Q8;
    c->base.weights = c->q8 ? FL_WEIGHTS_Q8 : FL_WEIGHTS_BF16;
    c->base.kv = FL_KV_BF16;
    c->cfg = *cf;
    c->dev = dev;
    c->n_sm = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;
    c->cc_major = prop.major;
    c->cc_minor = prop.minor;
    c->mem_total = prop.totalGlobalMem;
    snprintf(c->gpu, sizeof c->gpu, "%.120s", prop.name);
    flc_dims *d = &c->d;
    d->H = cf->hidden;
    d->nh = cf->n_heads;
    d->kvh = cf->n_kv_heads;
    d->hd = cf->head_dim;
    d->qd = cf->n_heads * cf->head_dim;
    d->kvd = cf->n_kv_heads * cf->head_dim;
    d->qkvd = d->qd + 2 * d->kvd;
    d->NI = cf->intermediate;
    d->rd = fl_config_rotary_dim(cf);
    c->moe = moe;
    c->NIm = d->NI;
    if (moe) {
        c->E = cf->moe.n_experts;
        c->K = cf->moe.top_k;
        c->mi = cf->moe.inter;
        c->smi = cf->moe.inter * cf->moe.n_shared;
        if (c->smi > c->NIm)
            c->NIm = c->smi;
        c->route = (flc_route){c->E, c->K, cf->moe.n_group, cf->moe.topk_group,
                               cf->moe.router == FL_ROUTER_SOFTMAX, cf->moe.norm_topk,
                               cf->moe.scaling};
        /* opt-in until measured on a GPU (docs/cuda.md "Mixture of experts") */
        c->moe_gemm = flc_env_int("FL_CUDA_MOE_GEMM", 0, 0, 1) == 1 && c->cc_major >= 8 &&
                      d->H % 32 == 0 && c->mi % 32 == 0;
        c->moe_gemm_min = flc_env_int("FL_CUDA_MOE_GEMM_MIN", 16, 0, 1 << 20);
    }
    d->V = cf->vocab;
    d->B = cf->block_size;
    d->rep = cf->n_heads / cf->n_kv_heads;
    d->eps = cf->rms_eps;
    d->page_elems = fl_kv_page_floats(cf);
    c->base.page_bytes = d->page_elems * 4;
    c->page_dev_bytes = d->page_elems * 2;
    c->skinny_rows = flc_env_int("FL_CUDA_SKINNY_ROWS", FLC_SKINNY_MAX, 0, FLC_SKINNY_MAX);
    c->gemm_pad = flc_env_int("FL_CUDA_GEMM_PAD", 1, 0, 1) == 1;
    /* opt-in: on the H200 it made graphs replay 3x as often at 4 sequences but the forwards
     * slower (12.2 vs 10.3 ms for 29; extra rows and attention blocks), docs/cuda.md */
    c->shape_pad = c->gemm_pad && flc_env_int("FL_CUDA_SHAPE_PAD", 0, 0, 1) == 1;
    c->sync_debug = flc_env_int("FL_CUDA_SYNC_DEBUG", 0, 0, 1) == 1;
    {
        const int kt = flc_env_int("FL_CUDA_KTIME", 0, 0, 2);
        c->ktime = kt > 0;
        c->kt_graphs = kt == 2;
    }
    /* opt-in until measured on a GPU (docs/cuda.md "Programmatic launch") */
    /* not with the per-launch events of FL_CUDA_KTIME or the syncs of FL_CUDA_SYNC_DEBUG */
    c->pdl = flc_env_int("FL_CUDA_PDL", 0, 0, 1) == 1 && c->cc_major >= 9 && !c->ktime &&
             !c->sync_debug;
    {
        const char *mv = getenv("FL_CUDA_MV");
        c->mv_tc = mv && !strcmp(mv, "tc") && c->cc_major >= 8;
        c->mv_rows = c->mv_tc && c->skinny_rows > 0 ? FLC_MV_MAX : 0;
        c->norm_fuse = c->mv_tc && flc_env_int("FL_CUDA_NORM_FUSE", 1, 0, 1) == 1;
    }
    /* opt-in until measured on a GPU (docs/cuda.md "q8 weights"); every x a q8 product reads
     * (rows of H, the attention's qd, the SwiGLU's NI or a shared expert's) in whole 16 bytes */
    c->q8_gemm = c->q8 && c->cc_major >= 8 && flc_env_int("FL_CUDA_Q8_GEMM", 0, 0, 1) == 1 &&
                 d->H % 8 == 0 && d->qd % 8 == 0 && d->NI % 8 == 0 && c->smi % 8 == 0;
    c->graphs = flc_env_int("FL_CUDA_GRAPHS", 1, 0, 1) == 1 && !c->sync_debug &&
                (!c->ktime || c->kt_graphs);
    {
        const char *at = getenv("FL_CUDA_ATTN");
        c->attn_tc = at && !strcmp(at, "tc") && flc_attention_tc_ok(d->hd);
        c->attn_few = at && !strcmp(at, "few") && flc_attention_few_ok(d->hd);
    }
    c->stats.graphs_on = c->graphs;
    snprintf(c->stats.graphs_note, sizeof c->stats.graphs_note, "%s",
             c->graphs       ? "on"
             : c->sync_debug ? "off (FL_CUDA_SYNC_DEBUG)"
             : c->ktime      ? "off (FL_CUDA_KTIME=1)"
                             : "off (FL_CUDA_GRAPHS=0)");
    c->head_rows = o->max_tokens < FLC_HEAD_ROWS ? o->max_tokens : FLC_HEAD_ROWS;
    flc_shape_cfg_init(&c->shape_cfg, d->rep, d->kvh, d->hd, c->n_sm, c->skinny_rows,
                       o->max_tokens, c->shape_pad, c->attn_few);
    c->tiles_max = c->shape_cfg.tiles_max;
    c->part_floats = c->shape_cfg.part_floats;
    c->stats.n_sm = c->n_sm;
    c->stats.skinny_rows = c->skinny_rows;
    c->stats.shape_pad = c->shape_pad;
    c->stats.attn_few = c->attn_few;
    int rc = 0;
    cudaError_t err;
    char w[320];
    if (pthread_mutex_init(&c->ev_mu, NULL) || pthread_mutex_init(&c->rd_mu, NULL) ||
        pthread_mutex_init(&c->wr_mu, NULL)) {
        rc = fl_err_set(e, FL_ENOMEM, "cuda backend: cannot create mutexes");
        goto fail;
    }
    c->mu_ok = true;
    if (!(c->layers = (flc_layer *)calloc((size_t)cf->n_layers, sizeof *c->layers))) {
        rc = fl_err_set(e, FL_ENOMEM, "cuda backend: out of host memory");
        goto fail;
    }
    for (int l = 0; moe && l < cf->n_layers; l++) {
        flc_layer *ly = &c->layers[l];
        if (!(ly->moe = fl_config_layer_moe(cf, l)))
            continue;
        ly->egu = (flc_mat *)calloc((size_t)c->E, sizeof *ly->egu);
        ly->edown = (flc_mat *)calloc((size_t)c->E, sizeof *ly->edown);
        if (!ly->egu || !ly->edown) {
            rc = fl_err_set(e, FL_ENOMEM, "cuda backend: out of host memory");
            goto fail;
        }
    }
#define CK(call, what)                                                                       \
    do {                                                                                     \
        if ((err = (call)) != cudaSuccess) {                                                 \
            rc = flc_cuda_err(e, err, (what));                                               \
            goto fail;                                                                       \
        }                                                                                    \
    } while (0)
    CK(cudaSetDevice(dev), "cudaSetDevice");
    CK(cudaStreamCreateWithFlags(&c->st, cudaStreamNonBlocking), "creating the compute stream");
    CK(cudaStreamCreateWithFlags(&c->st_io, cudaStreamNonBlocking), "creating the copy stream");
    for (; c->n_ev < FLC_EV_RING; c->n_ev++)
        CK(cudaEventCreateWithFlags(&c->ev[c->n_ev], cudaEventDisableTiming), "creating events");
    for (int i = 0; c->ktime && i < FLC_KT_EVENTS; i++)
        CK(cudaEventCreate(&c->kt_ev[i]), "creating FL_CUDA_KTIME events");
    if (c->kt_graphs) {
        c->kt_slot_n = (int *)calloc(FLC_GRAPHS, sizeof *c->kt_slot_n);
        c->kt_slot_of = (int *)calloc((size_t)FLC_GRAPHS * FLC_KT_EVENTS, sizeof *c->kt_slot_of);
        if (!c->kt_slot_n || !c->kt_slot_of) {
            rc = fl_err_set(e, FL_ENOMEM, "cuda: FL_CUDA_KTIME=2: out of host memory");
            goto fail;
        }
    }
    if (flc_blas_open(&c->blas, FL_CUBLAS_DIR, w, sizeof w)) {
        rc = fl_err_set(e, FL_EUNSUPPORTED, "cuda: %s", w);
        goto fail;
    }
    if (c->blas.set_stream(c->blas.h, c->st) != CUBLAS_STATUS_SUCCESS) {
        rc = fl_err_set(e, FL_EIO, "cuda: cublasSetStream failed");
        goto fail;
    }
    CK(cudaMalloc(&c->ws, FLC_WS_BYTES), "cudaMalloc of the cuBLAS workspace (32 MiB)");
    if (c->blas.set_workspace(c->blas.h, c->ws, FLC_WS_BYTES) != CUBLAS_STATUS_SUCCESS) {
        rc = fl_err_set(e, FL_EIO, "cuda: cublasSetWorkspace failed");
        goto fail;
    }
    {
        /* the memory plan: sizes first, from the same walks that place */
        fl_wplan_opts po = {.align = FLC_ALIGN, .mat_elem = 2, .embed = true, .rope = true,
                            .map = false, .mat_bytes = c->q8 ? flc_q8_mat_bytes : NULL, .ctx = c};
        if ((rc = fl_wplan_build(&c->wplan, m, &po, e)))
            goto fail;
        for (int i = 0; !c->q8_gemm && i < c->wplan.n; i++) /* the largest q8 matrix, for its bf16 copy */
            if (c->wplan.slot[i].elem == 0 &&
                c->wplan.slot[i].rows * c->wplan.slot[i].cols > c->wdq_elems)
                c->wdq_elems = c->wplan.slot[i].rows * c->wplan.slot[i].cols;
        fl_bump ab = {NULL, 0, FLC_ALIGN};
        flc_place_acts(c, &ab);
        c->wbytes = c->wplan.bytes;
        c->abytes = ab.used;
        size_t free_b = 0, total_b = 0;
        CK(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
        const char *lim = getenv("FL_CUDA_MEM_LIMIT");
        if (lim && *lim) {
            unsigned long long v = strtoull(lim, NULL, 10);
            if (v > 0 && v < free_b)
                free_b = (size_t)v;
        }
        size_t reserve = ((size_t)256 << 20) + total_b / 100; /* graphs, cuBLAS, context */
        size_t need = c->wbytes + c->abytes + reserve;
        if (need > free_b) {
            rc = fl_err_set(e, FL_ENOMEM, "cuda: the model does not fit on %s: weights %.2f GiB "
                            "(%s) + activations for max_tokens %d %.2f GiB + reserve %.2f GiB "
                            "= %.2f GiB, but %.2f GiB of %.2f GiB are free", c->gpu,
                            GIB(c->wbytes), c->q8 ? "q8" : "bf16", o->max_tokens, GIB(c->abytes), GIB(reserve),
                            GIB(need), GIB(free_b), GIB(total_b));
            goto fail;
        }
        size_t fit = (free_b - need) / c->page_dev_bytes;
        if (fit > (size_t)(INT32_MAX / 2))
            fit = (size_t)(INT32_MAX / 2);
        size_t n_pages = o->n_pages == 0 || (size_t)o->n_pages > fit ? fit : (size_t)o->n_pages;
        c->pages_asked = o->n_pages;
        if (n_pages < 1) {
            rc = fl_err_set(e, FL_ENOMEM, "cuda: no room for a single KV page (%.2f MiB) on %s "
                            "after weights %.2f GiB and activations %.2f GiB (%.2f GiB free)",
                            MIB(c->page_dev_bytes), c->gpu, GIB(c->wbytes), GIB(c->abytes),
                            GIB(free_b));
            goto fail;
        }
        c->base.n_pages = (int)n_pages;
        c->pool_bytes = n_pages * c->page_dev_bytes;
        snprintf(w, sizeof w, "cudaMalloc of %.2f GiB for the weights", GIB(c->wbytes));
        CK(cudaMalloc((void **)&c->wmem, c->wbytes), w);
        snprintf(w, sizeof w, "cudaMalloc of %.2f GiB for the activations (max_tokens %d)",
                 GIB(c->abytes), o->max_tokens);
        CK(cudaMalloc((void **)&c->amem, c->abytes), w);
        snprintf(w, sizeof w, "cudaMalloc of %.2f GiB for the KV pool (%zu pages)",
                 GIB(c->pool_bytes), n_pages);
        CK(cudaMalloc((void **)&c->pool, c->pool_bytes), w);
        CK(cudaMemsetAsync(c->pool, 0, c->pool_bytes, c->st), "clearing the KV pool");
        ab.base = c->amem;
        ab.used = 0;
        flc_place_weights(c, &c->wplan, c->wmem);
        flc_place_acts(c, &ab);
        CK(cudaMemsetAsync(c->ticket, 0, (size_t)c->tiles_max * d->kvh * sizeof(int), c->st),
           "clearing the attention tickets");
        if (c->q8_gemm)
            CK(cudaMemsetAsync(c->gq_ticket, 0, 2 * (size_t)c->n_sm * sizeof(int), c->st),
               "clearing the q8 GEMM's tickets");
    }
    if ((rc = flc_upload_weights(c, &c->wplan, e)))
        goto fail;
    fl_wplan_free(&c->wplan);
    flc_meta_layout(c);
    if ((rc = flc_meta_reserve(c, (size_t)o->max_tokens + 4096, e)))
        goto fail;
    CK(cudaMallocHost((void **)&c->tok_h, (size_t)o->max_tokens * sizeof(flc_tok)),
       "cudaMallocHost of the output buffer");
    CK(cudaMallocHost((void **)&c->stage_r, c->page_dev_bytes), "cudaMallocHost of a page buffer");
    CK(cudaMallocHost((void **)&c->stage_w, c->page_dev_bytes), "cudaMallocHost of a page buffer");
    if (moe) {
        size_t A = (size_t)o->max_tokens * (size_t)c->K;
        CK(cudaMallocHost((void **)&c->rid_h, A * 4), "cudaMallocHost of the routes");
        CK(cudaMallocHost((void **)&c->rw_h, A * 4), "cudaMallocHost of the routes");
        CK(flc_upload_emats(c), "uploading the experts' matrix table");
        /* fl_cuda_moe_stats_get before any forward reads no expert touched */
        CK(cudaMemset(c->eoff_d, 0, (size_t)cf->n_layers * (c->E + 2) * sizeof(int32_t)),
           "clearing the experts' assignments");
    }
    if (!(c->page_wseq = (long long *)malloc((size_t)c->base.n_pages * sizeof(long long)))) {
        rc = fl_err_set(e, FL_ENOMEM, "cuda backend: out of host memory");
        goto fail;
    }
    for (int i = 0; i < c->base.n_pages; i++)
        c->page_wseq[i] = -1;
    CK(cudaStreamSynchronize(c->st), "clearing the KV pool");
    if ((rc = flc_gemm_warm(c, e)))
        goto fail;
#undef CK
    {
        char pages[96] = "";
        if (c->pages_asked > 0 && c->pages_asked != c->base.n_pages)
            snprintf(pages, sizeof pages, " (of %d asked: no room for more)", c->pages_asked);
        else if (c->pages_asked == 0)
            snprintf(pages, sizeof pages, " (sized from free memory)");
        snprintf(c->desc, sizeof c->desc,
                 "%s (device %d, sm_%d%d, %d SMs, %.1f GiB); weights %.2f GiB %s; activations "
                 "%.2f GiB for %d tokens; KV pool %d pages x %.2f MiB = %.2f GiB%s; %.120s; graphs %s; "
                 "streaming matmul up to %d rows%s; cuBLAS rows %s; attention on %s",
                 c->gpu, c->dev, c->cc_major, c->cc_minor, c->n_sm, GIB(c->mem_total),
                 GIB(c->wbytes),
                 c->q8_gemm ? "q8 (embedding bf16; above the streaming rows our q8 GEMM)"
                 : c->q8    ? "q8 (embedding bf16)"
                            : "bf16",
                 GIB(c->abytes), o->max_tokens, c->base.n_pages,
                 MIB(c->page_dev_bytes), GIB(c->pool_bytes), pages, c->blas.path,
                 c->graphs ? "on" : "off", c->skinny_rows,
                 c->mv_tc && c->pdl && c->norm_fuse
                     ? " (tensor cores, RMSNorms inside, programmatic launch)"
                 : c->mv_tc && c->pdl ? " (tensor cores, programmatic launch)"
                 : c->mv_tc && c->norm_fuse ? " (tensor cores, RMSNorms inside)"
                 : c->mv_tc                 ? " (tensor cores)"
                 : c->pdl                   ? " (programmatic launch)"
                                            : "",
                 c->gemm_pad ? "padded" : "exact",
                 c->attn_tc    ? "tensor cores"
                 : c->attn_few ? "CUDA cores, few-row kernel"
                               : "CUDA cores");
    }
    *out = &c->base;
    return 0;
fail:
    (void)cudaGetLastError();
    flc_destroy(&c->base);
    return rc;
}

/* ---------------------------------------------------------------- extras (fl_cuda.h) */

extern "C" const char *fl_cuda_describe(const fl_backend *b)
{
    return b && b->ops == &flc_ops ? ((const flc *)b->impl)->desc : "not a CUDA backend";
}

extern "C" size_t fl_cuda_weight_stream_bytes(const fl_backend *b)
{
    return b && b->ops == &flc_ops ? ((const flc *)b->impl)->stream_bytes : 0;
}

extern "C" int fl_cuda_moe_stats_get(const fl_backend *b, fl_cuda_moe_stats *st, fl_err *e)
{
    memset(st, 0, sizeof *st);
    if (!b || b->ops != &flc_ops || !((const flc *)b->impl)->moe)
        return fl_err_set(e, FL_EINVAL, "cuda: fl_cuda_moe_stats_get: not a CUDA backend of a "
                          "mixture-of-experts model");
    const flc *c = (const flc *)b->impl;
    size_t E = (size_t)c->E, L = (size_t)c->cfg.n_layers;
    int32_t *h = (int32_t *)malloc(L * (E + 2) * sizeof *h);
    if (!h)
        return fl_err_set(e, FL_ENOMEM, "cuda: out of host memory");
    cudaError_t err = cudaSetDevice(c->dev);
    if (err == cudaSuccess)
        err = cudaStreamSynchronize(c->st);
    if (err == cudaSuccess)
        err = cudaMemcpy(h, c->eoff_d, L * (E + 2) * sizeof *h, cudaMemcpyDeviceToHost);
    if (err != cudaSuccess) {
        free(h);
        return flc_cuda_err(e, err, "reading the experts' assignments");
    }
    st->expert_bytes_all = (long long)c->moe_bytes_all;
    st->expert_bytes = (long long)c->moe_fixed;
    for (size_t l = 0; l < L; l++) {
        if (!c->layers[l].moe)
            continue;
        st->moe_layers++;
        for (size_t x = 0; x < E; x++)
            if (h[l * (E + 2) + x + 1] > h[l * (E + 2) + x]) {
                st->touched++;
                st->expert_bytes += (long long)(c->egu_bytes + c->edown_bytes);
            }
    }
    free(h);
    return 0;
}

extern "C" int fl_cuda_force_routes(fl_backend *b, const int32_t *ids, const float *w,
                                    int ld_tokens, fl_err *e)
{
    if (!b || b->ops != &flc_ops || !((flc *)b->impl)->moe || !ids || !w ||
        ld_tokens < b->max_tokens)
        return fl_err_set(e, FL_EINVAL, "cuda: fl_cuda_force_routes: not a CUDA backend of a "
                          "mixture-of-experts model, or no routes");
    flc *c = (flc *)b->impl;
    c->force_ids = ids;
    c->force_w = w;
    c->force_ld = ld_tokens;
    return 0;
}

extern "C" void fl_cuda_get_stats(const fl_backend *b, fl_cuda_stats *s)
{
    memset(s, 0, sizeof *s);
    if (b && b->ops == &flc_ops)
        *s = ((const flc *)b->impl)->stats;
}

extern "C" int fl_cuda_copy_bandwidth(const fl_backend *b, size_t bytes, int reps,
                                      double *bytes_per_s, fl_err *e)
{
    *bytes_per_s = 0;
    if (!b || b->ops != &flc_ops)
        return fl_err_set(e, FL_EINVAL, "cuda: not a CUDA backend");
    flc *c = (flc *)b->impl;
    void *src = NULL, *dst = NULL;
    cudaEvent_t t0 = NULL, t1 = NULL;
    int rc = 0;
    float best = 0;
    cudaError_t err = cudaSetDevice(c->dev);
    if (err == cudaSuccess)
        err = cudaMalloc(&src, bytes);
    if (err == cudaSuccess)
        err = cudaMalloc(&dst, bytes);
    if (err == cudaSuccess)
        err = cudaMemsetAsync(src, 1, bytes, c->st);
    if (err == cudaSuccess)
        err = cudaEventCreate(&t0);
    if (err == cudaSuccess)
        err = cudaEventCreate(&t1);
    for (int i = 0; i <= reps && err == cudaSuccess; i++) { /* the first is a warm-up */
        float ms = 0;
        if ((err = cudaEventRecord(t0, c->st)) == cudaSuccess &&
            (err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->st)) ==
                cudaSuccess &&
            (err = cudaEventRecord(t1, c->st)) == cudaSuccess &&
            (err = cudaEventSynchronize(t1)) == cudaSuccess &&
            (err = cudaEventElapsedTime(&ms, t0, t1)) == cudaSuccess && i > 0 &&
            (best == 0 || ms < best))
            best = ms;
    }
    if (err != cudaSuccess)
        rc = flc_cuda_err(e, err, "measuring the copy bandwidth");
    else if (best > 0)
        *bytes_per_s = 2.0 * (double)bytes / (best * 1e-3);
    if (t0)
        cudaEventDestroy(t0);
    if (t1)
        cudaEventDestroy(t1);
    cudaFree(src);
    cudaFree(dst);
    return rc;
}
