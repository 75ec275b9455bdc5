/* config.h: a model's Hugging Face config.json, reduced to what the engine uses, with the
 * family facts (block size, mask token, logits shift) resolved as ANCHORS.md describes. */
#ifndef FL_CONFIG_H
#define FL_CONFIG_H

#include "decode_opts.h"
#include "fl.h"

typedef enum fl_family {
    FL_FAMILY_SDAR = 0,    /* SDARForCausalLM: Qwen3 layout */
    FL_FAMILY_FASTDLLM,    /* Fast_dLLM_QwenForCausalLM: Qwen2 layout, shifted logits */
    FL_FAMILY_FOGLINE,     /* our own small models: Qwen3 layout */
    FL_FAMILY_LLADA2,      /* LLaDA2MoeModelLM (LLaDA2.0/2.1): fused q|k|v, partial rotary, MoE
                              with a grouped sigmoid router and shared experts */
    FL_FAMILY_SDAR_MOE,    /* SDARMoeForCausalLM: the Qwen3-MoE layout, softmax router */
    FL_FAMILY_COUNT
} fl_family;

/* A directory's weight quantization (config.json "quantization_config", docs/models.md):
 * none, or fogline's own q8 / q4 (engine/qformat.h), groups of 32. */
typedef enum fl_quant {
    FL_QUANT_NONE = 0,
    FL_QUANT_Q8,
    FL_QUANT_Q4,
    FL_QUANT_COUNT
} fl_quant;

#define FL_CFG_LAYER_WORDS 64 /* uint64 words of a per-layer bit set: 4096 layers, the limit */

/* How a mixture-of-experts layer picks its experts (MOE.md), both in fp32 from the router's
 * logits h . gate^T:
 *   SOFTMAX (Qwen3-MoE): p = softmax over all experts, the top_k largest; weights = their p,
 *     divided by their sum when norm_topk.
 *   SIGMOID_GROUPED (LLaDA2): s = sigmoid(logit); selection score s + expert_bias (the bias
 *     only chooses); experts in n_group groups of consecutive ids, a group's score the sum of
 *     its two best selection scores, the topk_group best groups kept, the top_k best experts
 *     of those; weights = the chosen experts' s divided by their sum (the authors' code
 *     divides whenever top_k > 1, whatever norm_topk_prob says), times routed scaling.
 * Ties go to the lower expert (or group) id. */
typedef enum fl_router {
    FL_ROUTER_NONE = 0, /* a dense model */
    FL_ROUTER_SOFTMAX,
    FL_ROUTER_SIGMOID_GROUPED,
    FL_ROUTER_COUNT
} fl_router;

typedef struct fl_moe {
    fl_router router;  /* FL_ROUTER_NONE: every layer dense */
    int n_experts;     /* num_experts */
    int top_k;         /* num_experts_per_tok */
    int inter;         /* moe_intermediate_size: each routed expert's SwiGLU width */
    int n_shared;      /* num_shared_experts: one always-on SwiGLU of inter * n_shared (0: none) */
    int n_group;       /* LLaDA2: n_group, topk_group (1, 1 for the softmax router) */
    int topk_group;
    bool norm_topk;    /* norm_topk_prob (softmax router) */
    bool expert_bias;  /* moe_router_enable_expert_bias: layers hold mlp.gate.expert_bias */
    float scaling;     /* routed_scaling_factor (1 when absent) */
    int first_dense;   /* LLaDA2 first_k_dense_replace: layers below it are dense */
    int sparse_step;   /* Qwen3-MoE decoder_sparse_step: layer l is MoE iff (l + 1) % step == 0 */
} fl_moe;

typedef struct fl_config {
    char arch[96];       /* architectures[0] */
    char model_type[64];
    fl_family family;
    int hidden;          /* hidden_size */
    int n_layers;        /* num_hidden_layers */
    int n_heads;         /* num_attention_heads */
    int n_kv_heads;      /* num_key_value_heads (defaults to n_heads) */
    int head_dim;        /* head_dim, or hidden / n_heads when absent */
    int intermediate;    /* intermediate_size */
    int vocab;           /* vocab_size */
    int max_pos;         /* max_position_embeddings */
    float rope_theta;
    float rms_eps;
    bool tie_embeddings; /* tie_word_embeddings */
    bool qkv_bias;       /* q/k/v projections carry a bias (Qwen2 layout, attention_bias) */
    bool qk_norm;        /* per-head RMSNorm on q and k (Qwen3 layout, LLaDA2 use_qk_norm), before
                            RoPE */
    int rotary_dim;      /* RoPE rotates the first rotary_dim dims of a head (pairs (i, i +
                            rotary_dim/2)); head_dim but for LLaDA2's partial_rotary_factor */
    bool fused_qkv;      /* one query_key_value tensor (LLaDA2) instead of q/k/v_proj */
    fl_moe moe;          /* mixture-of-experts layers (router NONE: dense) */
    uint64_t dense_mask[FL_CFG_LAYER_WORDS]; /* MoE models: bit l set when layer l is dense
                                                    (first_k_dense_replace, mlp_only_layers,
                                                    decoder_sparse_step) */
    int block_size;      /* denoising block, tokens */
    int sub_block;       /* Fast-dLLM v2 sub-block (8), else == block_size */
    int mask_token_id;   /* -1 until resolved from the tokenizer */
    int logits_shift;    /* 1: position i is predicted from the logits at i-1 (Fast-dLLM v2) */
    int eos_ids[8];      /* eos_token_id (int or list) */
    int n_eos;
    int bos_id;          /* -1 when absent */
    char torch_dtype[16];
    fl_quant quant;      /* quantization_config.format; FL_QUANT_NONE without the key */
    fl_decode_opts dec;  /* the model's own decoding defaults ("fogline": {"decoding": ...}) */
    uint32_t dec_set;    /* which of dec's fields it sets (FL_DF_BIT) */
} fl_config;

/* The rotated dims of a head: rotary_dim, or head_dim when 0 (a config built by hand). */
int fl_config_rotary_dim(const fl_config *c);
/* True when layer l of c is a mixture-of-experts layer. */
bool fl_config_layer_moe(const fl_config *c, int l);

/* Parses dir/config.json. The mask token may be left at -1 when the family resolves it
 * from the tokenizer (SDAR without the key, Fast-dLLM v2). Checks consistency: positive
 * sizes, heads divisible by kv heads, ... and names the offending field in the error. */
int fl_config_load(fl_config *c, const char *dir, fl_err *e);
int fl_config_parse(fl_config *c, const char *json_text, fl_err *e);
const char *fl_family_name(fl_family f);
/* The effective decoding defaults of a model before flags and requests: its family's
 * authors' defaults, overridden by the model directory's own. src (may be NULL) gets each
 * field's source (FL_DS_FAMILY or FL_DS_MODEL). */
void fl_config_decode_defaults(const fl_config *c, fl_decode_opts *out, uint8_t src[FL_DF_COUNT]);
/* Floats in one KV page, the host layout of backend.h: n_layers x {K, V} x n_kv_heads x
 * block_size x head_dim. Every size of a page (backends, blobs, pool budgets) derives from it. */
size_t fl_kv_page_floats(const fl_config *c);
/* RoPE's inverse frequencies, inv[i] = 1 / rope_theta^(2i / rotary_dim) for i < rotary_dim / 2,
 * in double as the reference computes them; every backend rotates with these values (the
 * angle of position p is p * inv[i], also in double). inv: (rotary_dim / 2). */
void fl_rope_inv_freq(const fl_config *c, double *inv);
/* "none", "q8", "q4"; "?" out of range. */
const char *fl_quant_name(fl_quant q);
/* The mask token's string for the family ("<|MASK|>", "|<MASK>|"), or NULL. */
const char *fl_family_mask_string(fl_family f);
/* The end token's string a family's configs may leave out (LLaDA2: "<|endoftext|>"), or NULL:
 * the loader resolves it from the tokenizer when config.json has no eos_token_id. */
const char *fl_family_end_string(fl_family f);

#endif
