/* flc_meta.h: the CUDA backend's batch metadata and model dimensions as its kernels see
 * them (cuda_kernels.cuh), in plain C with no CUDA header, so that a kernel's logic can also
 * be compiled for the CPU (tests/unit/cuda_emu.hh). */
#ifndef FL_CUDA_META_H
#define FL_CUDA_META_H

#include <stddef.h>
#include <stdint.h>

#define FLC_QROWS 16       /* query rows (token x head of one KV group) per attention tile */
#define FLC_KCHUNK 128     /* keys per attention chunk = threads of an attention block */
#define FLC_HD_MAX 256     /* largest head_dim the attention kernel takes */
#define FLC_SKINNY_MAX 8   /* most rows the weight-streaming matmul takes */
#define FLC_MV_MAX 32      /* ... and its tensor-core form (FL_CUDA_MV=tc): 4 tiles of 8 */
#define FLC_GQ_BN 64       /* the tensor-core GEMM's block (gemm_tc.cuh): weight rows (y's columns) */
#define FLC_GQ_BM 64       /* ... rows of x */
#define FLC_GQ_TILE (FLC_GQ_BM * FLC_GQ_BN) /* floats of one of its partial tiles */
#define FLC_VCHUNK 4096    /* vocabulary ids per softmax-statistics chunk */

/* Offsets (in int32) of the metadata block; fixed for a backend (sized by max_tokens), so
 * that device pointers into it never change. */
enum {
    FLC_P_TILES = 0, /* params: number of attention tiles in this batch */
    FLC_P_SPLIT,     /* keys per attention split */
    FLC_P_COUNT = 8
};

typedef struct flc_meta {
    const int32_t *params;    /* (FLC_P_COUNT) */
    const int32_t *tokens;    /* (T) */
    const int32_t *tok_pos;   /* (T) absolute position */
    const int32_t *tok_store; /* (T) page its K/V are stored in, or -1 */
    const int32_t *seg_pos0;  /* (S) */
    const int32_t *seg_n;     /* (S) */
    const int32_t *seg_tok0;  /* (S) first token of the segment in the batch */
    const int32_t *seg_pt;    /* (S) offset of the segment's page table in pages */
    const int32_t *tile_seg;  /* (tiles) segment of an attention tile */
    const int32_t *tile_row0; /* (tiles) first query row of the tile within its segment */
    const int32_t *out_rows;  /* (n_out) tokens whose outputs are wanted */
    const int32_t *pages;     /* page tables, concatenated */
} flc_meta;

typedef struct flc_dims {
    int H, nh, kvh, hd, qd, kvd, qkvd, NI, V, B, rep;
    int rd; /* rotated dims of a head (fl_config_rotary_dim): hd, or fewer (partial rotary) */
    float eps;
    size_t page_elems; /* bf16 elements of one page */
} flc_dims;

/* An RMSNorm fused in front of a product (mv_tc.cuh, FL_CUDA_MV=tc): the product's input rows
 * are the norm of the f32 rows x (row r at gather ? gather[r] : r, k floats apart) with
 * weights w (k) and epsilon eps, rounded to bf16 as k_rmsnorm writes them. */
typedef struct flc_norm_in {
    const float *x;
    const float *w;
    const int32_t *gather;
    float eps;
} flc_norm_in;

/* A mixture-of-experts layer's routing (route.cuh), as engine/moe.c's fl_moe takes it. */
typedef struct flc_route {
    int E, K, G, TG; /* experts, top_k, groups, groups kept (1, 1 for softmax) */
    int softmax;     /* FL_ROUTER_SOFTMAX, else SIGMOID_GROUPED */
    int norm_topk;
    float scaling;
} flc_route;

#endif
