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
    const uint8_t *want;  /* NULL: every output from out_from on; else (n): of those, only the
                             tokens i with want[i] != 0 (the lm_head's rows are the wanted ones) */
} fl_segment;

/* Whether the output of token i of sg is wanted (out_from, want). */
static inline bool fl_seg_wants(const fl_segment *sg, int32_t i)
{
    return i >= sg->out_from && (!sg->want || sg->want[i]);
}

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

/* The format a backend holds the weight plan's matrices in (q|k|v, o, gate|up, down,
 * lm_head); norms and biases are f32 whatever it is. New formats are appended: callers pass
 * the value through without knowing every one (names and parsing below). */
typedef enum fl_wformat {
    FL_WEIGHTS_AUTO = 0, /* a quantized directory's format; else bf16 when every matrix in
                            the file is bf16 (exact), else f32 */
    FL_WEIGHTS_F32,
    FL_WEIGHTS_BF16,     /* half the bytes to stream; exact for bf16 files, rounded for others */
    FL_WEIGHTS_Q8,       /* engine/qformat.h's q8 (8.5 bits per weight); the embedding and the
                            LM head q8 too; a matrix whose k % 32 != 0 stays bf16 */
    FL_WEIGHTS_Q4,       /* q4 (4.5 bits) for the projections; embedding and head q8 */
    FL_WEIGHTS_COUNT
} fl_wformat;

/* "auto", "f32", "bf16", "q8", "q4"; "?" for a value out of range. */
const char *fl_wformat_name(fl_wformat f);
/* Parses a name of fl_wformat_name's into *out; FL_EINVAL with a message to put after the
 * flag's name: "must be auto, f32, bf16, q8 or q4, got 'x'". */
int fl_wformat_parse(const char *s, fl_wformat *out, fl_err *e);
/* What f means for m: f itself unless FL_WEIGHTS_AUTO, which is the format of a quantized
 * directory's projections (Q8 for I8 quants, Q4 for U8), else FL_WEIGHTS_BF16 when every
 * file tensor the weight plan puts in a matrix slot is BF16, else FL_WEIGHTS_F32. m must
 * have its weights loaded (else F32). */
fl_wformat fl_wformat_resolve(fl_wformat f, const fl_model *m);

/* The format a backend holds its KV pages in. The host layout (page_read/page_write,
 * persistence blobs, Redis) is f32 whatever it is, so page_bytes does not change with it. */
typedef enum fl_kvformat {
    FL_KV_AUTO = 0, /* the backend's own: f32 on the CPU (exact), bf16 on CUDA (its only one) */
    FL_KV_F32,
    FL_KV_BF16,     /* half the bytes for attention to read; every key and value attention
                       reads is rounded to bf16 (nearest even), cached or this forward's own */
    FL_KV_COUNT
} fl_kvformat;

/* "auto", "f32", "bf16"; "?" for a value out of range. */
const char *fl_kvformat_name(fl_kvformat f);
/* As fl_wformat_parse: FL_EINVAL with "must be auto, f32 or bf16, got 'x'". */
int fl_kvformat_parse(const char *s, fl_kvformat *out, fl_err *e);

typedef struct fl_backend_opts {
    int n_pages;    /* KV pages to allocate */
    int n_threads;  /* compute threads (shared budget with BLAS); 0: all cores */
    int max_tokens; /* largest n_tokens one forward may take */
    fl_wformat weights; /* the matrices' format; AUTO (0): fl_wformat_resolve's choice. A
                           backend that cannot hold a format says so (FL_EUNSUPPORTED) */
    int gpu_n_pages;   /* CUDA, when non-zero: replaces n_pages (-1: as many pages as the free
                          device memory holds); see server/backend_select.h */
    fl_kvformat kv;    /* the KV pages' format; AUTO (0): the backend's own. A backend that
                          cannot hold a format says so (FL_EUNSUPPORTED) */
} fl_backend_opts;

typedef struct fl_backend fl_backend;

typedef struct fl_backend_ops {
    const char *name;
    /* out: (n_tokens) written for every wanted position (fl_seg_wants), others untouched;
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
    fl_wformat weights; /* what it holds, never AUTO (set by the backend or its chooser) */
    fl_kvformat kv;     /* what its KV pages hold, never AUTO (set by the backend) */
};

/* The checks every backend's forward runs first (sizes, segments, positions against cf's
 * max_pos, page ids against b->n_pages, token ids against cf's vocab): FL_EINVAL with a
 * message naming the first bad field. */
int fl_batch_check(const fl_backend *b, const fl_config *cf, const fl_batch *bt, fl_err *e);

/* ---- Where a backend's weights go: one arena, one plan.
 *
 * A backend converts or uploads the model's weights once, into one block of memory it owns
 * (host mapping, device allocation). The plan fixes, for both backends, which slots that
 * block holds, in which order, made of which file tensors, and at which offsets; a backend
 * chooses only what differs between devices: the alignment, the element size of the
 * matrices, and whether the embedding and the RoPE table live in the arena. How a slot's
 * rows are arranged inside it (gate|up interleaved on the CPU) stays the backend's. */

typedef enum fl_wrole {
    FL_W_QKV,        /* (q_dim + 2 kv_dim, hidden): wq rows, then wk, then wv */
    FL_W_QKV_BIAS,   /* (q_dim + 2 kv_dim) f32: bq | bk | bv; only when the layer has all three */
    FL_W_O,          /* (hidden, q_dim) */
    FL_W_GATE_UP,    /* (2 inter, hidden): w_gate's and w_up's rows */
    FL_W_DOWN,       /* (hidden, inter) */
    FL_W_ATTN_NORM,  /* (hidden) f32 */
    FL_W_MLP_NORM,   /* (hidden) f32 */
    FL_W_Q_NORM,     /* (head_dim) f32; q and k norms only when the layer has both */
    FL_W_K_NORM,     /* (head_dim) f32 */
    FL_W_EMBED,      /* (vocab, hidden); only with fl_wplan_opts.embed */
    FL_W_LM_HEAD,    /* (vocab, hidden) */
    FL_W_FINAL_NORM, /* (hidden) f32 */
    FL_W_ROPE,       /* (rotary_dim / 2) f64, fl_rope_inv_freq; only with fl_wplan_opts.rope */
    /* a mixture-of-experts layer, instead of GATE_UP and DOWN (fl_wslot.expert numbers the
       routed expert) */
    FL_W_ROUTER,         /* (n_experts, hidden) f32 whatever the matrices' format: fp32 routing */
    FL_W_EXPERT_BIAS,    /* (n_experts) f32; only when the layer has one */
    FL_W_EXPERT_GATE_UP, /* (2 moe_inter, hidden): expert x's gate and up rows */
    FL_W_EXPERT_DOWN,    /* (hidden, moe_inter) */
    FL_W_SHARED_GATE_UP, /* (2 moe_inter n_shared, hidden): the shared expert's; when present */
    FL_W_SHARED_DOWN,    /* (hidden, moe_inter n_shared) */
    FL_W_ROLE_COUNT
} fl_wrole;

#define FL_WSLOT_PARTS 3

typedef struct fl_wslot {
    fl_wrole role;
    int layer;                /* -1 for the model's own slots */
    int expert;               /* FL_W_EXPERT_*: the routed expert's number; else -1 */
    const fl_tensor *src[FL_WSLOT_PARTS]; /* its file tensors in order, NULL after the last
                                             (all NULL for FL_W_ROPE) */
    size_t part_elems[FL_WSLOT_PARTS];    /* elements of each src: part k starts at the sum of
                                             the earlier ones */
    size_t rows, cols;        /* shape in elements; a vector has rows 1 */
    size_t elem;              /* bytes per element; 0 for a matrix in the backend's own
                                 format (fl_wplan_opts.mat_bytes) */
    size_t off;               /* offset in the arena, a multiple of the alignment */
    size_t bytes;             /* rows * cols * elem (or mat_bytes' answer), or 0 when it
                                 shares another slot's or is mapped */
    int shares;               /* -1, or the slot whose memory it is (lm_head tied to the
                                 embedding when the embedding is placed) */
    bool mapped;              /* with fl_wplan_opts.map: src[0] already holds the slot as
                                 placed (one tensor, its dtype the slot's element), so the
                                 backend reads src[0]->data and the arena holds nothing */
} fl_wslot;

typedef struct fl_wplan_opts {
    size_t align;    /* of every slot's offset: a power of two */
    size_t mat_elem; /* bytes per element of the matrices (projections, embed, lm_head): 2 for
                        bf16, 4 for f32; vectors are f32, the RoPE table f64 */
    bool embed;      /* place the embedding */
    bool rope;       /* place the RoPE inverse frequencies */
    bool map;        /* leave one-tensor matrix slots (o, down, embed, lm_head) whose file
                        dtype is the matrices' element (BF16 for 2, F32 for 4) in the file's
                        mapping (fl_wslot.mapped), for a host backend that computes from it */
    /* NULL, or the bytes a matrix slot of this role and shape takes when the backend holds
     * it in a format of its own (quantized), 0 when it holds it plainly (rows * cols *
     * mat_elem, mappable). Then fl_wslot.elem is 0 for such a slot. */
    size_t (*mat_bytes)(void *ctx, fl_wrole role, size_t rows, size_t cols);
    void *ctx;
} fl_wplan_opts;

typedef struct fl_wplan {
    fl_wslot *slot; /* (n) in the order they are placed: per layer QKV (one part when the
                       file fuses it), QKV_BIAS, O, GATE_UP, DOWN (a MoE layer: ROUTER,
                       EXPERT_BIAS, EXPERT_GATE_UP and EXPERT_DOWN per expert, SHARED_GATE_UP,
                       SHARED_DOWN), ATTN_NORM, MLP_NORM, Q_NORM, K_NORM; then EMBED, LM_HEAD,
                       FINAL_NORM, ROPE */
    int n;
    size_t bytes;   /* the arena's size: the end of the last slot */
} fl_wplan;

/* Plans m's weights (which must be loaded) for o. FL_EINVAL for a model without weights or
 * a bad alignment or element size, FL_ENOMEM; the error says which. Free with
 * fl_wplan_free (also after a failure, and twice). */
int fl_wplan_build(fl_wplan *p, const fl_model *m, const fl_wplan_opts *o, fl_err *e);
void fl_wplan_free(fl_wplan *p);

/* A bump allocator: each take starts at the next multiple of align (a power of two) after
 * the last. With base NULL it only counts, so that one walk both sizes a block and, run
 * again over the allocated block, places into it. */
typedef struct fl_bump {
    char *base; /* NULL: sizing only */
    size_t used;
    size_t align;
} fl_bump;

/* The offset of a take of n bytes. */
static inline size_t fl_bump_off(fl_bump *b, size_t n)
{
    size_t at = (b->used + b->align - 1) & ~(b->align - 1);
    b->used = at + n;
    return at;
}
/* The address of a take of n bytes; NULL while sizing. */
static inline void *fl_bump_take(fl_bump *b, size_t n)
{
    size_t at = fl_bump_off(b, n);
    return b->base ? b->base + at : NULL;
}

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
