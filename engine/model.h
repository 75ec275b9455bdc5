/* model.h: a loaded model directory: config, mmapped weights bound to named roles,
 * tokenizer and chat template. Weights stay in their file dtype here; a backend converts
 * or uploads them once.
 *
 * Matrix roles (q/k/v/o/gate/up/down, embedding, lm_head) are F32, F16 or BF16, or, in a
 * quantized directory (cfg.quant != FL_QUANT_NONE, docs/models.md), the quants of a q8 (I8,
 * shape (n, k)) or q4 (U8, shape (n, k/2)) matrix whose F16 scales fl_model_scales gives
 * (engine/qformat.h). A matrix's format is its tensor's dtype: a quantized directory may
 * hold float matrices (those whose k is not a multiple of 32). Norms and biases are always
 * float. fl_matrix_rows_f32 reads rows of any of them as f32. */
#ifndef FL_MODEL_H
#define FL_MODEL_H

#include "config.h"
#include "safetensors.h"

struct fl_tokenizer;

/* One SwiGLU expert: gate and up (inter, hidden), down (hidden, inter). */
typedef struct fl_expert_w {
    const fl_tensor *gate, *up, *down;
} fl_expert_w;

typedef struct fl_layer_w {
    const fl_tensor *attn_norm;          /* (hidden) input_layernorm */
    const fl_tensor *wq, *wk, *wv, *wo;  /* (n_heads*hd, hidden) (kv*hd, hidden) x2 (hidden, n_heads*hd);
                                            q4: the second dimension halved (two weights a byte) */
    const fl_tensor *bq, *bk, *bv;       /* biases or NULL */
    const fl_tensor *q_norm, *k_norm;    /* (head_dim) or NULL */
    const fl_tensor *mlp_norm;           /* (hidden) post_attention_layernorm */
    const fl_tensor *w_gate, *w_up;      /* (intermediate, hidden) */
    const fl_tensor *w_down;             /* (hidden, intermediate) */
    /* LLaDA2: the fused query_key_value (q_dim + 2 kv_dim, hidden), rows q heads | k | v;
       wq, wk, wv are NULL then */
    const fl_tensor *wqkv;
    /* a mixture-of-experts layer (fl_config_layer_moe; w_gate, w_up, w_down NULL) */
    const fl_tensor *router;      /* (n_experts, hidden) mlp.gate.weight, float */
    const fl_tensor *expert_bias; /* (n_experts) float, or NULL */
    fl_expert_w *experts;         /* (n_experts) each (moe.inter) wide */
    fl_expert_w shared;           /* (moe.inter * moe.n_shared) wide; NULLs when none */
} fl_layer_w;

typedef struct fl_model {
    fl_config cfg;
    char *dir;
    fl_weights *weights;
    const fl_tensor *embed;      /* (vocab, hidden) model.embed_tokens.weight */
    const fl_tensor *final_norm; /* (hidden) model.norm.weight */
    const fl_tensor *lm_head;    /* (vocab, hidden); == embed when tied */
    fl_layer_w *layers;          /* (n_layers) */
    struct fl_tokenizer *tok;    /* NULL when loaded with no_tokenizer */
    int64_t n_params;            /* weights of the tensors bound to roles (the tied embedding
                                    once), counted logically: a q4 matrix (n, k) counts n*k
                                    although its U8 plane has n*k/2 elements; scales are not
                                    parameters */
    fl_quant quant;              /* the directory's quantization, == cfg.quant */
    int64_t n_active;            /* parameters one token's forward uses: n_params less the
                                    routed experts it is not sent to (== n_params when dense) */
    int n_matrices;              /* matrix roles bound (7 per dense layer, 1-3 + 3 per expert
                                    in a MoE layer, embedding, untied lm_head) */
    int n_quantized;             /* of which quantized (I8 or U8 with scales) */
    int64_t weight_bytes;        /* file bytes of the bound tensors, scales included: what a
                                    backend reads */
    const fl_tensor **scales;    /* (fl_weights_count) the scales of tensor i, or NULL; read
                                    through fl_model_scales */
} fl_model;

typedef struct fl_load_opts {
    bool no_tokenizer;        /* weights only (tests) */
    bool no_weights;          /* config + tokenizer only (`fogline tokenize`) */
    const char *chat_template; /* override: "chatml", "qwen3", "fogline", or NULL to detect */
} fl_load_opts;

/* Loads a Hugging Face directory: the Qwen2/Qwen3 layouts (SDAR, Fast-dLLM v2, ours), Qwen3-MoE
 * (SDAR-MoE) and LLaDA2's (model.word_embeddings, attention.query_key_value/dense/
 * query_layernorm/key_layernorm, mlp.gate with expert_bias, mlp.experts.E, mlp.shared_experts).
 * Every tensor the layout needs is checked for presence,
 * dtype (F32/F16/BF16; a quantized matrix: I8/U8 as config.json's quantization_config says,
 * with F16 scales of the right shape, every one finite) and exact shape; the error names
 * the tensor. The caller owns *out
 * (fl_model_free), which owns its weights and tokenizer; a loaded model is read-only, so any
 * number of threads (backends, the scheduler, the server's tokenizing workers) may use it. */
int fl_model_load(fl_model **out, const char *dir, const fl_load_opts *opts, fl_err *e);
void fl_model_free(fl_model *m);

/* The scales of a quantized matrix tensor t (I8 quants of q8, U8 quants of q4, in a
 * directory `fogline quantize` wrote: engine/qformat.h), the F16 tensor `NAME_scale` for t
 * named NAME, checked by the loader: (n, k/32), every value finite. NULL when t is a float
 * tensor, not one of m's role tensors, or m has no weights. O(1) (a table the loader fills,
 * indexed by the tensor's place in m->weights): call it per matrix, per row block, freely.
 * Any thread. */
const fl_tensor *fl_model_scales(const fl_model *m, const fl_tensor *t);

/* The model's identity for its KV pages: a hash of its shape and, for every weight tensor
 * and every quantized matrix's scales, its name, dtype, shape and 3 x 256 bytes sampled
 * from its data. Page keys chain from it
 * (persist.h), so two models that share a cache tier (Redis) never read each other's pages.
 * Needs the weights (not a no_weights load); pure, any thread. */
uint64_t fl_model_fingerprint(const fl_model *m);

#endif
