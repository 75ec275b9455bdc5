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
    bool qk_norm;        /* per-head RMSNorm on q and k (Qwen3 layout) */
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
/* RoPE's inverse frequencies, inv[i] = 1 / rope_theta^(2i / head_dim) for i < head_dim / 2,
 * in double as the reference computes them; every backend rotates with these values (the
 * angle of position p is p * inv[i], also in double). inv: (head_dim / 2). */
void fl_rope_inv_freq(const fl_config *c, double *inv);
/* "none", "q8", "q4"; "?" out of range. */
const char *fl_quant_name(fl_quant q);
/* The mask token's string for the family ("<|MASK|>", "|<MASK>|"), or NULL. */
const char *fl_family_mask_string(fl_family f);

#endif
