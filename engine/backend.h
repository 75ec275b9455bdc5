/* backend.h: the operations a compute backend (engine/cpu/, cuda/) provides to the
 * engine. A backend owns the weights in its own format and a pool of KV pages; the engine
 * owns everything else (which page belongs to which sequence, refcounts, scheduling).
 *
 * A page holds the K and V of one block (block_size positions) of one sequence for all
 * layers. Page host layout (page_read/page_write, persistence, Redis): f32,
 * [layer][k|v][kv_head][pos in block][head_dim].
 *
 * One forward takes a packed batch of query segments, each from one sequence. A query at
 * absolute position p attends to a key at absolute position k iff
 * k / block_size <= p / block_size (block-causal: bidirectional inside a block, causal across
 * blocks). Keys before the segment (k < pos0) are read from the sequence's pages; keys of
 * the segment itself come from this forward. pos0 may fall inside a block: that block's
 * earlier positions then come from its page, as computed when they were stored. A page that
 * one segment writes must not be read or written by another segment of the same batch. */
#ifndef FL_BACKEND_H
#define FL_BACKEND_H

#include "model.h"

typedef struct fl_segment {
    int32_t n;            /* tokens in this segment (> 0) */
    int32_t pos0;         /* absolute position of its first token; positions [0, pos0) are cached */
    int32_t n_store;      /* the K/V of its first n_store tokens are written to pages (0..n) */
    int32_t out_from;     /* outputs wanted for tokens [out_from, n) of the segment (n: none) */
    const int32_t *pages; /* page table: pages[b] holds positions [b*B, (b+1)*B), for every
                             block touched by [0, pos0 + n_store) */
} fl_segment;

typedef struct fl_batch {
    const int32_t *tokens; /* (n_tokens) all segments' tokens, concatenated in segment order */
    int32_t n_tokens;
    const fl_segment *segs; /* (n_segs) */
    int32_t n_segs;
} fl_batch;

/* Per position: the argmax token of the logits, its softmax probability and the entropy
 * (nats) of the full distribution, both at temperature 1. */
typedef struct fl_tok_out {
    int32_t token;
    float prob;
    float entropy;
} fl_tok_out;

typedef struct fl_backend_opts {
    int n_pages;    /* KV pages to allocate */
    int n_threads;  /* compute threads (shared budget with BLAS); 0: all cores */
    int max_tokens; /* largest n_tokens one forward may take */
    bool bf16_weights; /* CPU: keep the projection weights as bf16 (half the bytes to stream;
                          exact for bf16 files, rounded for f32 ones); false: f32 */
    int gpu_n_pages;   /* CUDA, when non-zero: replaces n_pages (-1: as many pages as the free
                          device memory holds); see server/backend_select.h */
} fl_backend_opts;

typedef struct fl_backend fl_backend;

typedef struct fl_backend_ops {
    const char *name;
    /* out: (n_tokens) written for every wanted position (see out_from), others untouched;
     * may be NULL. logits: NULL, or (n_tokens, vocab) full logits for wanted positions
     * (debug/parity). A bad batch (sizes, positions past max_pos, page ids, token ids) is
     * FL_EINVAL with a message, checked before anything is computed or any page written. */
    int (*forward)(fl_backend *b, const fl_batch *batch, fl_tok_out *out, float *logits, fl_err *e);
    /* page_read may be called from the persistence thread while a forward runs, for a page
     * that no forward writes (committed pages are immutable until freed). */
    int (*page_read)(fl_backend *b, int32_t page, void *dst, fl_err *e);       /* dst: page_bytes */
    int (*page_write)(fl_backend *b, int32_t page, const void *src, fl_err *e);
    void (*destroy)(fl_backend *b);
} fl_backend_ops;

struct fl_backend {
    const fl_backend_ops *ops;
    const fl_model *model;
    int n_pages;
    int max_tokens;
    size_t page_bytes; /* host layout size of one page */
    void *impl;
};

/* The checks every backend's forward runs first (sizes, segments, positions against cf's
 * max_pos, page ids against b->n_pages, token ids against cf's vocab): FL_EINVAL with a
 * message naming the first bad field. */
int fl_batch_check(const fl_backend *b, const fl_config *cf, const fl_batch *bt, fl_err *e);

/* The backends: the CPU's in engine/cpu/cpu.h, CUDA's in cuda/fl_cuda.h; the application
 * picks one (server/backend_select.h). */

static inline int fl_forward(fl_backend *b, const fl_batch *bt, fl_tok_out *out, float *logits,
                             fl_err *e)
{
    return b->ops->forward(b, bt, out, logits, e);
}
static inline void fl_backend_destroy(fl_backend *b)
{
    if (b)
        b->ops->destroy(b);
}

#endif
