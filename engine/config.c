/* config.c: config.json -> fl_config, with each family's facts (ANCHORS.md, "Format details
 * that trip engines") resolved here so that nothing downstream tests architecture strings.
 *
 * Families are recognised by architectures[0], else by model_type. A plain Qwen2/Qwen3
 * (autoregressive) checkpoint is refused even with block_size and mask_token_id keys: its
 * weights were never trained to denoise, so serving it would only produce fluent-looking
 * garbage. Our own models say so explicitly with FoglineForDiffusionLM / "fogline". */
#include "config.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Upper bounds keep every product the engine forms (heads*head_dim, vocab*hidden, page
 * sizes) far from overflow, while staying far above any real model. */
#define FL_CFG_MAX_DIM (1 << 24)
#define FL_CFG_MAX_LAYERS 4096
#define FL_CFG_MAX_HEADS 4096
#define FL_CFG_MAX_HEAD_DIM 4096

static const struct {
    const char *arch, *model_type, *name, *mask;
} families[FL_FAMILY_COUNT] = {
    [FL_FAMILY_SDAR] = {"SDARForCausalLM", "sdar", "sdar", "<|MASK|>"},
    [FL_FAMILY_FASTDLLM] = {"Fast_dLLM_QwenForCausalLM", "Fast_dLLM_Qwen", "fast-dllm-v2", "|<MASK>|"},
    [FL_FAMILY_FOGLINE] = {"FoglineForDiffusionLM", "fogline", "fogline", NULL},
    [FL_FAMILY_LLADA2] = {"LLaDA2MoeModelLM", "llada2_moe", "llada2", "<|mask|>"},
    [FL_FAMILY_SDAR_MOE] = {"SDARMoeForCausalLM", "sdar_moe", "sdar-moe", "<|MASK|>"},
};

const char *fl_family_name(fl_family f)
{
    return (unsigned)f < FL_FAMILY_COUNT ? families[f].name : "?";
}

const char *fl_quant_name(fl_quant q)
{
    static const char *const names[FL_QUANT_COUNT] = {"none", "q8", "q4"};
    return (unsigned)q < FL_QUANT_COUNT ? names[q] : "?";
}

const char *fl_family_mask_string(fl_family f)
{
    return (unsigned)f < FL_FAMILY_COUNT ? families[f].mask : NULL;
}

const char *fl_family_end_string(fl_family f)
{
    return f == FL_FAMILY_LLADA2 ? "<|endoftext|>" : NULL;
}

/* Reads an integer field. Absent or null -> *out = def and returns 1 when !required. */
static int get_int(const json_t *root, const char *key, bool required, long long def,
                   long long *out, fl_err *e)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (required)
            return fl_err_set(e, FL_EFORMAT, "config.json: missing %s", key);
        *out = def;
        return 0;
    }
    if (!json_is_integer(v))
        return fl_err_set(e, FL_EFORMAT, "config.json: %s must be an integer", key);
    *out = json_integer_value(v);
    return 0;
}

/* A size field: an integer in [1, max]. */
static int get_size(const json_t *root, const char *key, bool required, long long def, int max,
                    int *out, fl_err *e)
{
    long long x = 0;
    int rc = get_int(root, key, required, def, &x, e);
    if (rc)
        return rc;
    if (x < 1 || x > max)
        return fl_err_set(e, FL_ERANGE, "config.json: %s is %lld, must be in 1..%d", key, x, max);
    *out = (int)x;
    return 0;
}

static int get_real(const json_t *root, const char *key, double def, float *out, fl_err *e)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        *out = (float)def;
        return 0;
    }
    if (!json_is_number(v))
        return fl_err_set(e, FL_EFORMAT, "config.json: %s must be a number", key);
    double d = json_number_value(v);
    /* both rope_theta and rms_norm_eps are used as divisors or log bases */
    if (!(d > 0) || !isfinite(d) || d > 1e30 || (float)d == 0.0f)
        return fl_err_set(e, FL_ERANGE, "config.json: %s is %g, must be positive and finite",
                          key, d);
    *out = (float)d;
    return 0;
}

static int get_bool(const json_t *root, const char *key, bool def, bool *out, fl_err *e)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v))
        return fl_err_set(e, FL_EFORMAT, "config.json: %s must be true or false", key);
    *out = json_is_true(v);
    return 0;
}

/* A token id field: absent/null -> -1; else an integer in [0, vocab). */
static int get_token(const json_t *root, const char *key, int vocab, int *out, fl_err *e)
{
    long long x = 0;
    int rc = get_int(root, key, false, -1, &x, e);
    if (rc)
        return rc;
    if (x != -1 && (x < 0 || x >= vocab))
        return fl_err_set(e, FL_ERANGE, "config.json: %s %lld is outside the vocabulary (0..%d)",
                          key, x, vocab - 1);
    *out = (int)x;
    return 0;
}

static int copy_str(char *dst, size_t cap, const char *src, const char *field, fl_err *e)
{
    size_t n = strlen(src);
    if (n >= cap)
        return fl_err_set(e, FL_ERANGE, "config.json: %s is longer than %zu characters", field,
                          cap - 1);
    memcpy(dst, src, n + 1);
    return 0;
}

static int find_family(fl_config *c, fl_err *e)
{
    int by_arch = -1, by_type = -1;
    for (int f = 0; f < FL_FAMILY_COUNT; f++) {
        if (c->arch[0] && !strcmp(c->arch, families[f].arch))
            by_arch = f;
        if (c->model_type[0] && !strcmp(c->model_type, families[f].model_type))
            by_type = f;
    }
    if (by_arch >= 0 && by_type >= 0 && by_arch != by_type)
        return fl_err_set(e, FL_EFORMAT,
                          "config.json: architectures[0] %s and model_type %s name different "
                          "model families",
                          c->arch, c->model_type);
    /* the architecture names the weight layout; model_type only stands in when it is absent */
    int f = c->arch[0] ? by_arch : by_type;
    if (f < 0)
        return fl_err_set(e, FL_EUNSUPPORTED,
                          "config.json: unsupported architecture '%s' (model_type '%s'); fogline "
                          "serves SDARForCausalLM, SDARMoeForCausalLM, "
                          "Fast_dLLM_QwenForCausalLM, LLaDA2MoeModelLM and "
                          "FoglineForDiffusionLM",
                          c->arch[0] ? c->arch : "(none)",
                          c->model_type[0] ? c->model_type : "(none)");
    c->family = (fl_family)f;
    return 0;
}

/* "quantization_config": {"quant_method": "fogline", "format": "q8"|"q4", "group_size": 32}.
 * Other tools' methods (gptq, awq, fp8, ...) store other tensors: refused by name, never
 * guessed at. An unknown key of ours could change what the tensors mean, so it is refused
 * too. Values are quoted with a precision bound: the message stays one short line. */
static int parse_quant(fl_config *c, json_t *q, fl_err *e)
{
    if (!json_is_object(q))
        return fl_err_set(e, FL_EFORMAT, "config.json: quantization_config must be an object");
    json_t *m = json_object_get(q, "quant_method");
    if (!json_is_string(m))
        return fl_err_set(e, FL_EFORMAT,
                          "config.json: quantization_config.quant_method must be a string");
    if (strcmp(json_string_value(m), "fogline"))
        return fl_err_set(e, FL_EUNSUPPORTED,
                          "config.json: quantization_config.quant_method '%.40s' is not "
                          "supported (fogline reads its own, \"fogline\")",
                          json_string_value(m));
    const char *key;
    json_t *v;
    json_object_foreach(q, key, v)
    {
        if (strcmp(key, "quant_method") && strcmp(key, "format") && strcmp(key, "group_size"))
            return fl_err_set(e, FL_EFORMAT,
                              "config.json: quantization_config.%.64s is not a known key "
                              "(quant_method, format, group_size)",
                              key);
    }
    json_t *f = json_object_get(q, "format");
    if (!json_is_string(f))
        return fl_err_set(e, FL_EFORMAT, "config.json: quantization_config.format must be a string");
    if (!strcmp(json_string_value(f), "q8"))
        c->quant = FL_QUANT_Q8;
    else if (!strcmp(json_string_value(f), "q4"))
        c->quant = FL_QUANT_Q4;
    else
        return fl_err_set(e, FL_EUNSUPPORTED,
                          "config.json: quantization_config.format '%.40s' is not q8 or q4",
                          json_string_value(f));
    json_t *g = json_object_get(q, "group_size");
    if (!json_is_integer(g))
        return fl_err_set(e, FL_EFORMAT,
                          "config.json: quantization_config.group_size must be an integer");
    if (json_integer_value(g) != 32)
        return fl_err_set(e, FL_EUNSUPPORTED,
                          "config.json: quantization_config.group_size %lld is not 32 (fogline's "
                          "groups are 32 weights)",
                          (long long)json_integer_value(g));
    return 0;
}

/* A key the served code never reads but whose other values would change the maths: refused
 * unless absent, null or the one value the forward implements. */
static int want_false(const json_t *root, const char *key, const char *why, fl_err *e)
{
    bool v = false;
    int rc = get_bool(root, key, false, &v, e);
    if (!rc && v)
        return fl_err_set(e, FL_EUNSUPPORTED, "config.json: %s true is not supported (%s)", key,
                          why);
    return rc;
}

static void set_dense(fl_config *c, int l) { c->dense_mask[l / 64] |= (uint64_t)1 << (l % 64); }

bool fl_config_layer_moe(const fl_config *c, int l)
{
    return c->moe.router != FL_ROUTER_NONE && l >= 0 && l < c->n_layers &&
           !(c->dense_mask[l / 64] >> (l % 64) & 1);
}

int fl_config_rotary_dim(const fl_config *c) { return c->rotary_dim ? c->rotary_dim : c->head_dim; }

/* The mixture-of-experts keys of LLaDA2 (llada2_moe) and SDAR-MoE (Qwen3-MoE's keys), each
 * checked; MOE.md has the routers. */
static int parse_moe(fl_config *c, const json_t *root, fl_err *e)
{
    fl_moe *m = &c->moe;
    int rc;
    if ((rc = get_size(root, "num_experts", true, 0, 1 << 16, &m->n_experts, e)) ||
        (rc = get_size(root, "num_experts_per_tok", true, 0, 1 << 16, &m->top_k, e)) ||
        (rc = get_size(root, "moe_intermediate_size", true, 0, FL_CFG_MAX_DIM, &m->inter, e)))
        return rc;
    if (m->top_k > m->n_experts)
        return fl_err_set(e, FL_ERANGE,
                          "config.json: num_experts_per_tok (%d) is more than num_experts (%d)",
                          m->top_k, m->n_experts);
    if (m->top_k > FL_MOE_MAX_TOPK)
        return fl_err_set(e, FL_EUNSUPPORTED,
                          "config.json: num_experts_per_tok %d is above fogline's limit of %d",
                          m->top_k, FL_MOE_MAX_TOPK);
    m->scaling = 1.0f;
    m->n_group = m->topk_group = 1;
    m->sparse_step = 1;
    if (c->family == FL_FAMILY_LLADA2) {
        m->router = FL_ROUTER_SIGMOID_GROUPED;
        long long shared = 0, first = 0;
        float factor = 0.5f;
        /* an absent key takes LLaDA2MoeConfig's default, as the authors' code would:
         * n_group 8, topk_group 4, routed_scaling_factor 2.5, partial_rotary_factor 0.5,
         * use_qk_norm true. use_bias defaults to true there, but no published checkpoint has
         * the bias tensor (a model without the key would run on an uninitialised bias), so an
         * absent use_bias is read as the files are: no bias. */
        if ((rc = get_int(root, "num_shared_experts", false, 0, &shared, e)) ||
            (rc = get_size(root, "n_group", false, 8, m->n_experts, &m->n_group, e)) ||
            (rc = get_size(root, "topk_group", false, 4, m->n_experts, &m->topk_group, e)) ||
            (rc = get_bool(root, "moe_router_enable_expert_bias", true, &m->expert_bias, e)) ||
            (rc = get_bool(root, "norm_topk_prob", true, &m->norm_topk, e)) ||
            (rc = get_real(root, "routed_scaling_factor", 2.5, &m->scaling, e)) ||
            (rc = get_int(root, "first_k_dense_replace", false, 0, &first, e)) ||
            (rc = get_real(root, "partial_rotary_factor", 0.5, &factor, e)) ||
            (rc = get_bool(root, "use_qk_norm", true, &c->qk_norm, e)) ||
            (rc = want_false(root, "use_qkv_bias", "no query_key_value bias", e)) ||
            (rc = want_false(root, "use_bias", "no attention.dense bias", e)))
            return rc;
        if (shared < 0 || shared > 64)
            return fl_err_set(e, FL_ERANGE, "config.json: num_shared_experts is %lld, must be in "
                              "0..64", shared);
        m->n_shared = (int)shared;
        if ((long long)m->inter * m->n_shared > FL_CFG_MAX_DIM)
            return fl_err_set(e, FL_ERANGE, "config.json: the shared expert's width "
                              "(moe_intermediate_size %d x num_shared_experts %d) is above %d",
                              m->inter, m->n_shared, FL_CFG_MAX_DIM);
        if (first < 0 || first > c->n_layers)
            return fl_err_set(e, FL_ERANGE, "config.json: first_k_dense_replace is %lld, must be "
                              "in 0..num_hidden_layers (%d)", first, c->n_layers);
        m->first_dense = (int)first;
        for (int l = 0; l < m->first_dense; l++)
            set_dense(c, l);
        if (m->n_experts % m->n_group)
            return fl_err_set(e, FL_ERANGE, "config.json: n_group (%d) does not divide num_experts "
                              "(%d)", m->n_group, m->n_experts);
        if (m->n_experts / m->n_group < 2)
            return fl_err_set(e, FL_ERANGE, "config.json: n_group %d leaves %d expert(s) a group "
                              "(a group's score is its two best)", m->n_group,
                              m->n_experts / m->n_group);
        if (m->topk_group > m->n_group)
            return fl_err_set(e, FL_ERANGE, "config.json: topk_group (%d) is more than n_group "
                              "(%d)", m->topk_group, m->n_group);
        if (m->top_k > m->topk_group * (m->n_experts / m->n_group))
            return fl_err_set(e, FL_ERANGE, "config.json: num_experts_per_tok (%d) is more than "
                              "the %d experts of topk_group (%d) groups", m->top_k,
                              m->topk_group * (m->n_experts / m->n_group), m->topk_group);
        json_t *sf = json_object_get(root, "score_function");
        if (sf && !json_is_null(sf) &&
            (!json_is_string(sf) || strcmp(json_string_value(sf), "sigmoid")))
            return fl_err_set(e, FL_EUNSUPPORTED, "config.json: score_function must be "
                              "\"sigmoid\" (LLaDA2's router)");
        json_t *rd = json_object_get(root, "router_dtype");
        if (rd && !json_is_null(rd) &&
            (!json_is_string(rd) || (strcmp(json_string_value(rd), "fp32") &&
                                     strcmp(json_string_value(rd), "float32"))))
            return fl_err_set(e, FL_EUNSUPPORTED, "config.json: router_dtype must be \"fp32\" "
                              "(fogline routes in fp32, as the authors' code does)");
        if (!(factor > 0) || factor > 1)
            return fl_err_set(e, FL_ERANGE, "config.json: partial_rotary_factor is %g, must be in "
                              "(0, 1]", (double)factor);
        c->rotary_dim = (int)((double)c->head_dim * (double)factor);
        if (c->rotary_dim < 2 || c->rotary_dim % 2)
            return fl_err_set(e, FL_ERANGE, "config.json: partial_rotary_factor %g gives %d rotary "
                              "dims of head_dim %d (need an even number, at least 2)",
                              (double)factor, c->rotary_dim, c->head_dim);
        c->fused_qkv = true;
    } else { /* SDAR-MoE: Qwen3-MoE */
        m->router = FL_ROUTER_SOFTMAX;
        if ((rc = get_bool(root, "norm_topk_prob", false, &m->norm_topk, e)) ||
            (rc = get_size(root, "decoder_sparse_step", false, 1, c->n_layers, &m->sparse_step, e)))
            return rc;
        for (int l = 0; l < c->n_layers; l++)
            if ((l + 1) % m->sparse_step)
                set_dense(c, l);
        json_t *only = json_object_get(root, "mlp_only_layers");
        if (only && !json_is_null(only)) {
            if (!json_is_array(only))
                return fl_err_set(e, FL_EFORMAT, "config.json: mlp_only_layers must be a list of "
                                  "layer numbers");
            size_t i;
            json_t *v;
            json_array_foreach(only, i, v)
            {
                if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                    json_integer_value(v) >= c->n_layers)
                    return fl_err_set(e, FL_ERANGE, "config.json: mlp_only_layers[%zu] is not a "
                                      "layer number (0..%d)", i, c->n_layers - 1);
                set_dense(c, (int)json_integer_value(v));
            }
        }
        json_t *sh = json_object_get(root, "shared_expert_intermediate_size");
        if (sh && !json_is_null(sh) && !(json_is_integer(sh) && json_integer_value(sh) == 0))
            return fl_err_set(e, FL_EUNSUPPORTED, "config.json: shared_expert_intermediate_size "
                              "is set, but Qwen3-MoE (SDAR-MoE) has no shared expert");
    }
    json_t *rs = json_object_get(root, "rope_scaling");
    if (rs && !json_is_null(rs))
        return fl_err_set(e, FL_EUNSUPPORTED, "config.json: rope_scaling is not supported (plain "
                          "RoPE only)");
    return 0;
}

/* num_key_value_heads: absent means one per query head; LLaDA2MoeConfig also reads 0 so */
static int get_kv_heads(const json_t *root, bool zero_is_all, int n_heads, int *out, fl_err *e)
{
    long long x = 0;
    int rc = get_int(root, "num_key_value_heads", false, 0, &x, e);
    if (rc)
        return rc;
    json_t *v = json_object_get(root, "num_key_value_heads");
    if (!v || json_is_null(v) || (x == 0 && zero_is_all)) {
        *out = n_heads;
        return 0;
    }
    return get_size(root, "num_key_value_heads", true, 0, FL_CFG_MAX_HEADS, out, e);
}

static int parse_root(fl_config *c, const json_t *root, fl_err *e)
{
    int rc;
    json_t *archs = json_object_get(root, "architectures");
    if (archs && !json_is_null(archs)) {
        if (!json_is_array(archs) ||
            (json_array_size(archs) && !json_is_string(json_array_get(archs, 0))))
            return fl_err_set(e, FL_EFORMAT, "config.json: architectures must be a list of strings");
        if (json_array_size(archs) &&
            (rc = copy_str(c->arch, sizeof c->arch, json_string_value(json_array_get(archs, 0)),
                           "architectures[0]", e)))
            return rc;
    }
    json_t *mt = json_object_get(root, "model_type");
    if (mt && !json_is_null(mt)) {
        if (!json_is_string(mt))
            return fl_err_set(e, FL_EFORMAT, "config.json: model_type must be a string");
        if ((rc = copy_str(c->model_type, sizeof c->model_type, json_string_value(mt),
                           "model_type", e)))
            return rc;
    }
    if ((rc = find_family(c, e)))
        return rc;

    bool llada2 = c->family == FL_FAMILY_LLADA2;
    if ((rc = get_size(root, "hidden_size", true, 0, FL_CFG_MAX_DIM, &c->hidden, e)) ||
        (rc = get_size(root, "num_hidden_layers", true, 0, FL_CFG_MAX_LAYERS, &c->n_layers, e)) ||
        (rc = get_size(root, "num_attention_heads", true, 0, FL_CFG_MAX_HEADS, &c->n_heads, e)) ||
        (rc = get_kv_heads(root, llada2, c->n_heads, &c->n_kv_heads, e)) ||
        (rc = get_size(root, "intermediate_size", true, 0, FL_CFG_MAX_DIM, &c->intermediate, e)) ||
        (rc = get_size(root, "vocab_size", true, 0, FL_CFG_MAX_DIM, &c->vocab, e)) ||
        (rc = get_size(root, "max_position_embeddings", false, 32768, INT_MAX, &c->max_pos, e)))
        return rc;
    /* a one-wide hidden state or a one-token vocabulary is no model; every matrix and vector
     * the backends hold is told apart by its role, but a file this degenerate is refused */
    if (c->hidden < 2 || c->vocab < 2)
        return fl_err_set(e, FL_ERANGE, "config.json: %s is 1, must be at least 2",
                          c->hidden < 2 ? "hidden_size" : "vocab_size");
    if (c->n_heads % c->n_kv_heads)
        return fl_err_set(e, FL_ERANGE,
                          "config.json: num_attention_heads (%d) is not a multiple of "
                          "num_key_value_heads (%d)",
                          c->n_heads, c->n_kv_heads);
    /* Qwen3 configs carry head_dim; Fast-dLLM v2 (Qwen2) has none and uses hidden / heads */
    json_t *hd = json_object_get(root, "head_dim");
    if (hd && !json_is_null(hd)) {
        if ((rc = get_size(root, "head_dim", true, 0, FL_CFG_MAX_HEAD_DIM, &c->head_dim, e)))
            return rc;
    } else {
        if (c->hidden % c->n_heads)
            return fl_err_set(e, FL_ERANGE,
                              "config.json: no head_dim, and hidden_size (%d) is not a multiple "
                              "of num_attention_heads (%d)",
                              c->hidden, c->n_heads);
        c->head_dim = c->hidden / c->n_heads;
        if (c->head_dim > FL_CFG_MAX_HEAD_DIM)
            return fl_err_set(e, FL_ERANGE, "config.json: head_dim (hidden / heads) %d is above %d",
                              c->head_dim, FL_CFG_MAX_HEAD_DIM);
    }
    if (c->head_dim % 2) /* RoPE rotates pairs (i, i + head_dim/2) */
        return fl_err_set(e, FL_ERANGE, "config.json: head_dim %d is odd (RoPE needs it even)",
                          c->head_dim);
    if ((long long)c->n_heads * c->head_dim > FL_CFG_MAX_DIM)
        return fl_err_set(e, FL_ERANGE,
                          "config.json: num_attention_heads * head_dim (%lld) is above %d",
                          (long long)c->n_heads * c->head_dim, FL_CFG_MAX_DIM);
    if ((rc = get_real(root, "rope_theta", 10000.0, &c->rope_theta, e)) ||
        /* the defaults of each family's config class: LLaDA2MoeConfig's eps is 1e-5 */
        (rc = get_real(root, "rms_norm_eps", llada2 ? 1e-5 : 1e-6, &c->rms_eps, e)) ||
        (rc = get_bool(root, "tie_word_embeddings", false, &c->tie_embeddings, e)))
        return rc;

    bool attn_bias;
    if ((rc = get_bool(root, "attention_bias", false, &attn_bias, e)))
        return rc;
    if (c->family == FL_FAMILY_FASTDLLM) {
        /* Qwen2 attention always has q/k/v bias, whatever attention_bias says */
        c->qkv_bias = true;
        c->qk_norm = false;
        c->logits_shift = 1;
        if ((rc = get_size(root, "bd_size", false, 32, FL_MAX_BLOCK, &c->block_size, e)))
            return rc;
        c->sub_block = c->block_size < 8 ? c->block_size : 8;
    } else {
        c->qkv_bias = attn_bias;
        c->qk_norm = true; /* LLaDA2: use_qk_norm (parse_moe) */
        c->logits_shift = 0;
        bool need = c->family == FL_FAMILY_FOGLINE;
        /* LLaDA2's configs have no block key: the authors decode with block_length 32 */
        int def = c->family == FL_FAMILY_LLADA2 ? 32 : 4;
        if ((rc = get_size(root, "block_size", need, def, FL_MAX_BLOCK, &c->block_size, e)))
            return rc;
        c->sub_block = c->block_size;
    }
    c->rotary_dim = c->head_dim;
    if ((c->family == FL_FAMILY_LLADA2 || c->family == FL_FAMILY_SDAR_MOE) &&
        (rc = parse_moe(c, root, e)))
        return rc;
    if (c->block_size % c->sub_block)
        return fl_err_set(e, FL_ERANGE, "config.json: bd_size %d is not a multiple of the sub-block %d",
                          c->block_size, c->sub_block);

    if (c->family == FL_FAMILY_FOGLINE) {
        long long x;
        if ((rc = get_int(root, "mask_token_id", true, 0, &x, e)))
            return rc;
    }
    /* SDAR's older configs and Fast-dLLM v2 have no mask key: -1, resolved from the tokenizer */
    if ((rc = get_token(root, "mask_token_id", c->vocab, &c->mask_token_id, e)) ||
        (rc = get_token(root, "bos_token_id", c->vocab, &c->bos_id, e)))
        return rc;
    if (c->family == FL_FAMILY_FOGLINE && c->mask_token_id < 0)
        return fl_err_set(e, FL_ERANGE, "config.json: mask_token_id must be a token id");

    json_t *eos = json_object_get(root, "eos_token_id");
    c->n_eos = 0;
    if (eos && !json_is_null(eos)) {
        size_t n = json_is_array(eos) ? json_array_size(eos) : 1;
        if (n > sizeof c->eos_ids / sizeof c->eos_ids[0])
            return fl_err_set(e, FL_ERANGE, "config.json: eos_token_id lists %zu ids (at most %zu)",
                              n, sizeof c->eos_ids / sizeof c->eos_ids[0]);
        for (size_t i = 0; i < n; i++) {
            json_t *v = json_is_array(eos) ? json_array_get(eos, i) : eos;
            if (!json_is_integer(v))
                return fl_err_set(e, FL_EFORMAT,
                                  "config.json: eos_token_id must be an integer or a list of them");
            json_int_t x = json_integer_value(v);
            if (x < 0 || x >= c->vocab)
                return fl_err_set(e, FL_ERANGE,
                                  "config.json: eos_token_id %lld is outside the vocabulary (0..%d)",
                                  (long long)x, c->vocab - 1);
            c->eos_ids[c->n_eos++] = (int)x;
        }
    }

    /* fogline's own keys: {"fogline": {"decoding": {...}}}, the model's decoding defaults */
    json_t *fl = json_object_get(root, "fogline");
    if (fl && !json_is_null(fl)) {
        if (!json_is_object(fl))
            return fl_err_set(e, FL_EFORMAT, "config.json: fogline must be an object");
        const char *key;
        json_t *v;
        json_object_foreach(fl, key, v)
        {
            if (strcmp(key, "decoding"))
                return fl_err_set(e, FL_EFORMAT, "config.json: fogline.%.64s is not a known key "
                                                 "(decoding)", key);
        }
        json_t *dec = json_object_get(fl, "decoding");
        fl_decode_opts_default(&c->dec);
        if (dec && (rc = fl_decode_opts_parse_json(dec, "config.json: fogline.decoding", &c->dec,
                                                   &c->dec_set, e)))
            return rc;
    }

    json_t *q = json_object_get(root, "quantization_config");
    if (q && !json_is_null(q) && (rc = parse_quant(c, q, e)))
        return rc;

    /* transformers >= 4.56 writes "dtype"; older ones "torch_dtype" */
    json_t *dt = json_object_get(root, "torch_dtype");
    if (!dt || json_is_null(dt))
        dt = json_object_get(root, "dtype");
    if (dt && !json_is_null(dt)) {
        if (!json_is_string(dt))
            return fl_err_set(e, FL_EFORMAT, "config.json: torch_dtype must be a string");
        if ((rc = copy_str(c->torch_dtype, sizeof c->torch_dtype, json_string_value(dt),
                           "torch_dtype", e)))
            return rc;
    }
    return 0;
}

/* The authors' defaults of each family (ANCHORS.md, their generate code): SDAR's
 * low_confidence_dynamic at one token per step (the threshold rule), Fast-dLLM v2's threshold
 * with its sub-blocks, both one block at a time; our own models were trained with, and are
 * evaluated with, multi-block pipelining at the training-side decoder's settings
 * (engine/train/decode.py). Decode-store overlap never changes outputs and is on for all. */
static void family_defaults(fl_family f, fl_decode_opts *o)
{
    fl_decode_opts_default(o);
    o->policy = FL_POLICY_THRESHOLD;
    o->threshold = 0.9f;
    o->pipeline = f == FL_FAMILY_FOGLINE;
    if (f == FL_FAMILY_LLADA2) /* the authors' LLaDA2.0 generate (decode_opts.h) */
        fl_decode_opts_llada2(o);
    if (f == FL_FAMILY_FOGLINE) {
        o->tau_add = 0.5f;
        o->tau_act = 0.75f;
        o->tau_conf = 0.9f;
        o->max_blocks = 3;
    }
}

void fl_config_decode_defaults(const fl_config *c, fl_decode_opts *out, uint8_t src[FL_DF_COUNT])
{
    family_defaults(c->family, out);
    if (src)
        memset(src, FL_DS_FAMILY, FL_DF_COUNT);
    fl_decode_opts_overlay(out, src, &c->dec, c->dec_set, FL_DS_MODEL);
}

int fl_config_parse(fl_config *c, const char *json_text, fl_err *e)
{
    memset(c, 0, sizeof *c);
    c->mask_token_id = -1;
    c->bos_id = -1;
    json_error_t jerr;
    json_t *root = json_loads(json_text, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return fl_err_set(e, FL_EFORMAT, "config.json: not valid JSON: %s (line %d)", jerr.text,
                          jerr.line);
    int rc = json_is_object(root)
                 ? parse_root(c, root, e)
                 : fl_err_set(e, FL_EFORMAT, "config.json: the top level is not an object");
    json_decref(root);
    return rc;
}

int fl_config_load(fl_config *c, const char *dir, fl_err *e)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/config.json", dir) >= (int)sizeof path)
        return fl_err_set(e, FL_EINVAL, "model path too long: %s", dir);
    struct stat sb;
    if (stat(dir, &sb) || !S_ISDIR(sb.st_mode))
        return fl_err_set(e, FL_ENOTFOUND, "%s: not a directory", dir);
    if (stat(path, &sb) && errno == ENOENT)
        return fl_err_set(e, FL_ENOTFOUND, "%s: no config.json (not a Hugging Face model directory?)",
                          dir);
    char *text = NULL;
    size_t len = 0;
    int rc = fl_read_file(path, &text, &len, e);
    if (rc)
        return rc;
    if (strlen(text) != len) {
        free(text);
        return fl_err_set(e, FL_EFORMAT, "%s: contains a NUL byte", path);
    }
    rc = fl_config_parse(c, text, e);
    free(text);
    if (rc)
        fl_err_prefix(e, "%s", dir);
    return rc;
}

size_t fl_kv_page_floats(const fl_config *c)
{
    return (size_t)c->n_layers * 2u * (size_t)c->n_kv_heads * (size_t)c->block_size *
           (size_t)c->head_dim;
}

void fl_rope_inv_freq(const fl_config *c, double *inv)
{
    int rd = fl_config_rotary_dim(c);
    for (int i = 0; i < rd / 2; i++)
        inv[i] = 1.0 / pow((double)c->rope_theta, (double)(2 * i) / rd);
}
