/* model.h: a loaded model directory: config, mmapped weights bound to named roles,
 * tokenizer and chat template. Weights stay in their file dtype here; a backend converts
 * or uploads them once. */
#ifndef FL_MODEL_H
#define FL_MODEL_H

#include "config.h"
#include "safetensors.h"

struct fl_tokenizer;

typedef struct fl_layer_w {
    const fl_tensor *attn_norm;          /* (hidden) input_layernorm */
    const fl_tensor *wq, *wk, *wv, *wo;  /* (n_heads*hd, hidden) (kv*hd, hidden) x2 (hidden, n_heads*hd) */
    const fl_tensor *bq, *bk, *bv;       /* biases or NULL */
    const fl_tensor *q_norm, *k_norm;    /* (head_dim) or NULL */
    const fl_tensor *mlp_norm;           /* (hidden) post_attention_layernorm */
    const fl_tensor *w_gate, *w_up;      /* (intermediate, hidden) */
    const fl_tensor *w_down;             /* (hidden, intermediate) */
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
    int64_t n_params;
} fl_model;

typedef struct fl_load_opts {
    bool no_tokenizer;        /* weights only (tests) */
    bool no_weights;          /* config + tokenizer only (`fogline tokenize`) */
    const char *chat_template; /* override: "chatml", "qwen3", "fogline", or NULL to detect */
} fl_load_opts;

/* Loads a Hugging Face directory. Every tensor the layout needs is checked for presence,
 * dtype (F32/F16/BF16) and exact shape; the error names the tensor. The caller owns *out
 * (fl_model_free), which owns its weights and tokenizer; a loaded model is read-only, so any
 * number of threads (backends, the scheduler, the server's tokenizing workers) may use it. */
int fl_model_load(fl_model **out, const char *dir, const fl_load_opts *opts, fl_err *e);
void fl_model_free(fl_model *m);

/* The scales of a quantized matrix tensor t (I8 quants of q8, U8 quants of q4, in a
 * directory `fogline quantize` wrote: engine/qformat.h), the F16 tensor `NAME_scale` for t
 * named NAME, checked by the loader; NULL when t is a float tensor. */
const fl_tensor *fl_model_scales(const fl_model *m, const fl_tensor *t);

/* The model's identity for its KV pages: a hash of its shape and, for every weight tensor,
 * its name, dtype, shape and 3 x 256 bytes sampled from its data. Page keys chain from it
 * (persist.h), so two models that share a cache tier (Redis) never read each other's pages.
 * Needs the weights (not a no_weights load); pure, any thread. */
uint64_t fl_model_fingerprint(const fl_model *m);

#endif
