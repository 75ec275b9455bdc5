/* test_config.c: config.json parsing per family (ANCHORS.md "Models" and "Format details"), the
 * consistency checks, and that each error names the offending field. */
#include <jansson.h>

#include "check.h"
#include "config.h"
#include "test_loader_kit.h"

/* SDAR-1.7B-Chat's config.json, as published (keys the engine reads, plus some it ignores). */
static const char *sdar_cfg =
    "{\"architectures\": [\"SDARForCausalLM\"], \"attention_bias\": false, "
    "\"attention_dropout\": 0.0, \"auto_map\": {\"AutoConfig\": \"configuration_sdar.SDARConfig\"},"
    " \"block_size\": 4, \"bos_token_id\": 151643, \"eos_token_id\": 151645, \"head_dim\": 128, "
    "\"hidden_act\": \"silu\", \"hidden_size\": 2048, \"initializer_range\": 0.02, "
    "\"intermediate_size\": 6144, \"mask_token_id\": 151669, \"max_position_embeddings\": 32768, "
    "\"max_window_layers\": 28, \"model_type\": \"sdar\", \"num_attention_heads\": 16, "
    "\"num_hidden_layers\": 28, \"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-06, "
    "\"rope_scaling\": null, \"rope_theta\": 1000000, \"sliding_window\": null, "
    "\"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\", "
    "\"transformers_version\": \"4.52.4\", \"use_cache\": true, \"use_sliding_window\": false, "
    "\"vocab_size\": 151936}";

/* Fast_dLLM_v2_1.5B's config.json: no head_dim, no mask id, bd_size, tied. */
static const char *fast_cfg =
    "{\"architectures\": [\"Fast_dLLM_QwenForCausalLM\"], \"attention_dropout\": 0.0, "
    "\"bd_size\": 32, \"bos_token_id\": 151643, \"eos_token_id\": 151645, "
    "\"hidden_act\": \"silu\", \"hidden_size\": 1536, \"initializer_range\": 0.02, "
    "\"intermediate_size\": 8960, \"max_position_embeddings\": 32768, \"max_window_layers\": 21, "
    "\"model_type\": \"Fast_dLLM_Qwen\", \"num_attention_heads\": 12, \"num_hidden_layers\": 28, "
    "\"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-06, \"rope_scaling\": null, "
    "\"rope_theta\": 1000000.0, \"sliding_window\": null, \"tie_word_embeddings\": true, "
    "\"torch_dtype\": \"bfloat16\", \"use_cache\": true, \"use_sliding_window\": false, "
    "\"vocab_size\": 151936}";

/* Parses base with one key replaced (value = JSON text) or removed (value = NULL). */
static int parse_with(fl_config *c, const char *base, const char *key, const char *value,
                      fl_err *e)
{
    json_t *root = json_loads(base, 0, NULL);
    if (value)
        json_object_set_new(root, key, json_loads(value, JSON_DECODE_ANY, NULL));
    else
        json_object_del(root, key);
    char *text = json_dumps(root, JSON_PRESERVE_ORDER);
    json_decref(root);
    int rc = fl_config_parse(c, text, e);
    free(text);
    return rc;
}

/* One bad-value case: the parse must fail with code and name the field in its message. */
static void bad(const char *base, const char *key, const char *value, int code, const char *names)
{
    fl_config c;
    fl_err e = {0};
    int rc = parse_with(&c, base, key, value, &e);
    CHECK(rc == code, "%s=%s: rc %d, want %d (%s)", key, value ? value : "(removed)", rc, code,
          e.msg);
    CHECK(tk_has(e.msg, names), "%s=%s: message '%s' does not name '%s'", key,
          value ? value : "(removed)", e.msg, names);
}

static void test_sdar(void)
{
    fl_config c;
    fl_err e = {0};
    int rc = fl_config_parse(&c, sdar_cfg, &e);
    CHECK(rc == 0, "sdar: %s", e.msg);
    CHECK(c.family == FL_FAMILY_SDAR, "family %d", c.family);
    CHECK(!strcmp(fl_family_name(c.family), "sdar"), "name %s", fl_family_name(c.family));
    CHECK(!strcmp(c.arch, "SDARForCausalLM") && !strcmp(c.model_type, "sdar"), "arch %s %s",
          c.arch, c.model_type);
    CHECK(c.hidden == 2048 && c.n_layers == 28 && c.n_heads == 16 && c.n_kv_heads == 8, "dims");
    CHECK(c.head_dim == 128 && c.intermediate == 6144 && c.vocab == 151936, "dims 2");
    CHECK(c.max_pos == 32768, "max_pos %d", c.max_pos);
    CHECK(c.rope_theta == 1e6f && c.rms_eps == 1e-6f, "theta %g eps %g", c.rope_theta, c.rms_eps);
    CHECK(!c.tie_embeddings && !c.qkv_bias && c.qk_norm, "flags");
    CHECK(c.block_size == 4 && c.sub_block == 4 && c.logits_shift == 0, "block %d/%d shift %d",
          c.block_size, c.sub_block, c.logits_shift);
    CHECK(c.mask_token_id == 151669, "mask %d", c.mask_token_id);
    CHECK(c.n_eos == 1 && c.eos_ids[0] == 151645 && c.bos_id == 151643, "eos/bos");
    CHECK(!strcmp(c.torch_dtype, "bfloat16"), "dtype %s", c.torch_dtype);
    CHECK(!strcmp(fl_family_mask_string(c.family), "<|MASK|>"), "mask string");

    /* older SDAR configs: no block_size, no mask_token_id -> 4 and "resolve from tokenizer" */
    json_t *root = json_loads(sdar_cfg, 0, NULL);
    json_object_del(root, "block_size");
    json_object_del(root, "mask_token_id");
    json_object_set_new(root, "eos_token_id", json_pack("[ii]", 151645, 151643));
    char *t = json_dumps(root, 0);
    json_decref(root);
    rc = fl_config_parse(&c, t, &e);
    free(t);
    CHECK(rc == 0, "old sdar: %s", e.msg);
    CHECK(c.block_size == 4 && c.mask_token_id == -1, "old sdar block %d mask %d", c.block_size,
          c.mask_token_id);
    CHECK(c.n_eos == 2 && c.eos_ids[0] == 151645 && c.eos_ids[1] == 151643, "eos list");

    /* model_type alone identifies the family; block_size other than 4 is honoured */
    CHECK(parse_with(&c, sdar_cfg, "architectures", NULL, &e) == 0 && c.family == FL_FAMILY_SDAR,
          "sdar by model_type: %s", e.msg);
    CHECK(parse_with(&c, sdar_cfg, "block_size", "16", &e) == 0 && c.block_size == 16 &&
              c.sub_block == 16,
          "block 16");
    /* attention_bias true on the Qwen3 layout: q/k/v bias as well as q/k norm */
    CHECK(parse_with(&c, sdar_cfg, "attention_bias", "true", &e) == 0 && c.qkv_bias && c.qk_norm,
          "bias");
    /* num_key_value_heads absent -> heads (MHA) */
    CHECK(parse_with(&c, sdar_cfg, "num_key_value_heads", NULL, &e) == 0 && c.n_kv_heads == 16,
          "kv default");
    /* head_dim absent -> hidden / heads */
    CHECK(parse_with(&c, sdar_cfg, "head_dim", NULL, &e) == 0 && c.head_dim == 128, "hd default");
    /* transformers >= 4.56 writes dtype instead of torch_dtype */
    root = json_loads(sdar_cfg, 0, NULL);
    json_object_del(root, "torch_dtype");
    json_object_set_new(root, "dtype", json_string("float16"));
    t = json_dumps(root, 0);
    json_decref(root);
    CHECK(fl_config_parse(&c, t, &e) == 0 && !strcmp(c.torch_dtype, "float16"), "dtype key");
    free(t);
}

static void test_fast(void)
{
    fl_config c;
    fl_err e = {0};
    int rc = fl_config_parse(&c, fast_cfg, &e);
    CHECK(rc == 0, "fast: %s", e.msg);
    CHECK(c.family == FL_FAMILY_FASTDLLM, "family %d", c.family);
    CHECK(c.hidden == 1536 && c.n_heads == 12 && c.n_kv_heads == 2, "dims");
    CHECK(c.head_dim == 128, "head_dim = hidden / heads: %d", c.head_dim);
    CHECK(c.qkv_bias && !c.qk_norm, "qwen2 layout");
    CHECK(c.tie_embeddings, "tied");
    CHECK(c.block_size == 32 && c.sub_block == 8 && c.logits_shift == 1, "block %d sub %d shift %d",
          c.block_size, c.sub_block, c.logits_shift);
    CHECK(c.mask_token_id == -1, "mask from tokenizer: %d", c.mask_token_id);
    CHECK(!strcmp(fl_family_mask_string(c.family), "|<MASK>|"), "mask string");
    CHECK(c.n_eos == 1 && c.eos_ids[0] == 151645, "eos");
    /* Qwen2 attention has q/k/v bias whatever attention_bias says */
    CHECK(parse_with(&c, fast_cfg, "attention_bias", "false", &e) == 0 && c.qkv_bias, "bias forced");
    CHECK(parse_with(&c, fast_cfg, "bd_size", NULL, &e) == 0 && c.block_size == 32, "bd default");
    CHECK(parse_with(&c, fast_cfg, "bd_size", "4", &e) == 0 && c.block_size == 4 && c.sub_block == 4,
          "small bd");
    CHECK(parse_with(&c, fast_cfg, "architectures", NULL, &e) == 0 &&
              c.family == FL_FAMILY_FASTDLLM,
          "by model_type");
}

static void test_fogline(void)
{
    const char *fog = tk_tiny_config(false, true);
    fl_config c;
    fl_err e = {0};
    CHECK(fl_config_parse(&c, fog, &e) == 0, "fogline: %s", e.msg);
    CHECK(c.family == FL_FAMILY_FOGLINE && c.tie_embeddings, "family");
    CHECK(c.block_size == 4 && c.mask_token_id == 31 && c.qk_norm && !c.qkv_bias, "fogline facts");
    CHECK(fl_family_mask_string(c.family) == NULL, "no mask string");
    /* our own models must say what they are: both keys are required */
    bad(fog, "block_size", NULL, FL_EFORMAT, "block_size");
    bad(fog, "mask_token_id", NULL, FL_EFORMAT, "mask_token_id");
    bad(fog, "mask_token_id", "null", FL_EFORMAT, "mask_token_id");
    /* model_type alone */
    CHECK(parse_with(&c, fog, "architectures", NULL, &e) == 0 && c.family == FL_FAMILY_FOGLINE,
          "by model_type");
}

static void test_unsupported(void)
{
    /* plain autoregressive Qwen: refused, with the reason and the names we serve */
    const char *q3 = "{\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3\", "
                     "\"hidden_size\": 64, \"num_hidden_layers\": 1, \"num_attention_heads\": 4, "
                     "\"intermediate_size\": 8, \"vocab_size\": 16, \"block_size\": 4, "
                     "\"mask_token_id\": 3}";
    fl_config c;
    fl_err e = {0};
    CHECK(fl_config_parse(&c, q3, &e) == FL_EUNSUPPORTED, "qwen3 refused");
    CHECK(tk_has(e.msg, "Qwen3ForCausalLM") && tk_has(e.msg, "SDARForCausalLM"), "msg: %s", e.msg);
    /* an unknown architecture is not rescued by a known model_type: the layout would differ */
    bad(sdar_cfg, "architectures", "[\"LLaDAModelLM\"]", FL_EUNSUPPORTED, "LLaDAModelLM");
    bad(sdar_cfg, "model_type", "\"Fast_dLLM_Qwen\"", FL_EFORMAT, "model_type");
    bad(sdar_cfg, "architectures", "\"SDARForCausalLM\"", FL_EFORMAT, "architectures");
    bad(sdar_cfg, "model_type", "7", FL_EFORMAT, "model_type");
}

static void test_inconsistent(void)
{
    bad(sdar_cfg, "hidden_size", NULL, FL_EFORMAT, "hidden_size");
    bad(sdar_cfg, "hidden_size", "\"2048\"", FL_EFORMAT, "hidden_size");
    bad(sdar_cfg, "hidden_size", "2048.0", FL_EFORMAT, "hidden_size");
    bad(sdar_cfg, "hidden_size", "0", FL_ERANGE, "hidden_size");
    bad(sdar_cfg, "hidden_size", "-5", FL_ERANGE, "hidden_size");
    bad(sdar_cfg, "hidden_size", "99999999999999", FL_ERANGE, "hidden_size");
    bad(sdar_cfg, "num_hidden_layers", "0", FL_ERANGE, "num_hidden_layers");
    bad(sdar_cfg, "num_attention_heads", "12", FL_ERANGE, "num_key_value_heads");
    bad(sdar_cfg, "num_key_value_heads", "3", FL_ERANGE, "num_attention_heads");
    bad(sdar_cfg, "num_key_value_heads", "0", FL_ERANGE, "num_key_value_heads");
    bad(sdar_cfg, "head_dim", "127", FL_ERANGE, "head_dim");
    bad(sdar_cfg, "head_dim", "0", FL_ERANGE, "head_dim");
    bad(sdar_cfg, "intermediate_size", NULL, FL_EFORMAT, "intermediate_size");
    bad(sdar_cfg, "vocab_size", "0", FL_ERANGE, "vocab_size");
    bad(sdar_cfg, "vocab_size", NULL, FL_EFORMAT, "vocab_size");
    bad(sdar_cfg, "block_size", "0", FL_ERANGE, "block_size");
    bad(sdar_cfg, "block_size", "257", FL_ERANGE, "block_size");
    bad(sdar_cfg, "mask_token_id", "151936", FL_ERANGE, "mask_token_id");
    bad(sdar_cfg, "mask_token_id", "-2", FL_ERANGE, "mask_token_id");
    bad(sdar_cfg, "eos_token_id", "200000", FL_ERANGE, "eos_token_id");
    bad(sdar_cfg, "eos_token_id", "[1, \"2\"]", FL_EFORMAT, "eos_token_id");
    bad(sdar_cfg, "eos_token_id", "[1,2,3,4,5,6,7,8,9]", FL_ERANGE, "eos_token_id");
    bad(sdar_cfg, "bos_token_id", "151936", FL_ERANGE, "bos_token_id");
    bad(sdar_cfg, "rope_theta", "-1", FL_ERANGE, "rope_theta");
    bad(sdar_cfg, "rope_theta", "\"big\"", FL_EFORMAT, "rope_theta");
    bad(sdar_cfg, "rms_norm_eps", "0", FL_ERANGE, "rms_norm_eps");
    bad(sdar_cfg, "rms_norm_eps", "1e-60", FL_ERANGE, "rms_norm_eps");
    bad(sdar_cfg, "tie_word_embeddings", "1", FL_EFORMAT, "tie_word_embeddings");
    bad(sdar_cfg, "max_position_embeddings", "0", FL_ERANGE, "max_position_embeddings");
    bad(sdar_cfg, "torch_dtype", "\"float32-but-much-longer-than-sixteen\"", FL_ERANGE, "torch_dtype");
    /* Fast-dLLM v2 without head_dim: hidden must split evenly over the heads */
    bad(fast_cfg, "hidden_size", "1540", FL_ERANGE, "head_dim");
    bad(fast_cfg, "bd_size", "12", FL_ERANGE, "bd_size");
    bad(fast_cfg, "bd_size", "0", FL_ERANGE, "bd_size");
    /* not a config at all */
    fl_config c;
    fl_err e = {0};
    CHECK(fl_config_parse(&c, "{\"hidden_size\": 3", &e) == FL_EFORMAT && tk_has(e.msg, "JSON"),
          "bad JSON: %s", e.msg);
    CHECK(fl_config_parse(&c, "[1, 2]", &e) == FL_EFORMAT && tk_has(e.msg, "object"),
          "array: %s", e.msg);
    CHECK(fl_config_parse(&c, "", &e) == FL_EFORMAT, "empty: %s", e.msg);
    /* deep nesting: refused by the parser's depth limit, not a stack overflow */
    {
        size_t depth = 100000;
        char *deep = malloc(2 * depth + 1);
        memset(deep, '[', depth);
        memset(deep + depth, ']', depth);
        deep[2 * depth] = 0;
        CHECK(fl_config_parse(&c, deep, &e) == FL_EFORMAT && tk_has(e.msg, "JSON"), "deep: %s",
              e.msg);
        free(deep);
    }
    /* a key given twice is ambiguous */
    CHECK(fl_config_parse(&c, "{\"vocab_size\": 4, \"vocab_size\": 5}", &e) == FL_EFORMAT &&
              tk_has(e.msg, "vocab_size"),
          "duplicate key: %s", e.msg);
}

static void test_load(void)
{
    char dir[TK_PATH], p[TK_PATH];
    CHECK(tk_mkdtemp(dir, "config") == 0, "mkdtemp");
    fl_config c;
    fl_err e = {0};
    int rc = fl_config_load(&c, dir, &e);
    CHECK(rc == FL_ENOTFOUND && tk_has(e.msg, "config.json") && tk_has(e.msg, dir),
          "missing config.json: %d %s", rc, e.msg);
    rc = fl_config_load(&c, tk_path(p, dir, "nope"), &e);
    CHECK(rc == FL_ENOTFOUND && tk_has(e.msg, "nope"), "missing dir: %d %s", rc, e.msg);
    tk_write_str(tk_path(p, dir, "config.json"), sdar_cfg);
    rc = fl_config_load(&c, dir, &e);
    CHECK(rc == 0 && c.family == FL_FAMILY_SDAR, "load: %s", e.msg);
    /* errors from a file name the directory and the field */
    char *broken = strdup(sdar_cfg);
    *strstr(broken, "\"num_key_value_heads\": 8") = 0;
    tk_write_str(p, broken);
    free(broken);
    rc = fl_config_load(&c, dir, &e);
    CHECK(rc == FL_EFORMAT && tk_has(e.msg, dir) && tk_has(e.msg, "config.json"),
          "truncated: %d %s", rc, e.msg);
    tk_write(p, "{\"a\": 1}\0{\"b\": 2}", 17);
    rc = fl_config_load(&c, dir, &e);
    CHECK(rc == FL_EFORMAT && tk_has(e.msg, "NUL"), "NUL byte: %d %s", rc, e.msg);
    fl_rmtree(dir);
}

/* Decoding defaults: the family's, then config.json's fogline.decoding, each with its source. */
static void test_decoding_defaults(void)
{
    fl_config c;
    fl_err e = {0};
    fl_decode_opts d;
    uint8_t src[FL_DF_COUNT];
    CHECK(fl_config_parse(&c, sdar_cfg, &e) == 0, "sdar: %s", e.msg);
    fl_config_decode_defaults(&c, &d, src);
    CHECK(!d.pipeline && d.store_overlap && d.policy == FL_POLICY_THRESHOLD && d.threshold == 0.9f &&
              d.temperature == 0.0f && src[FL_DF_PIPELINE] == FL_DS_FAMILY,
          "SDAR: threshold 0.9, one block at a time, greedy");
    CHECK(fl_config_parse(&c, fast_cfg, &e) == 0, "fast: %s", e.msg);
    fl_config_decode_defaults(&c, &d, src);
    CHECK(!d.pipeline && d.threshold == 0.9f && c.sub_block == 8, "Fast-dLLM v2: threshold 0.9, sub-block 8");
    const char *fog = tk_tiny_config(false, true);
    CHECK(fl_config_parse(&c, fog, &e) == 0, "fogline: %s", e.msg);
    fl_config_decode_defaults(&c, &d, src);
    CHECK(d.pipeline && d.tau_add == 0.5f && d.tau_act == 0.75f && d.max_blocks == 3,
          "fogline: the training-side pipeline");
    /* a model's own defaults override its family's, field by field */
    CHECK(parse_with(&c, sdar_cfg, "fogline",
                     "{\"decoding\": {\"pipeline\": true, \"threshold\": 0.8, \"policy\": \"dynamic\", "
                     "\"k\": 2, \"temperature\": 0.5}}", &e) == 0, "model defaults: %s", e.msg);
    fl_config_decode_defaults(&c, &d, src);
    CHECK(d.pipeline && d.threshold == 0.8f && d.policy == FL_POLICY_DYNAMIC && d.k == 2 &&
              d.temperature == 0.5f && src[FL_DF_PIPELINE] == FL_DS_MODEL &&
              src[FL_DF_K] == FL_DS_MODEL && src[FL_DF_TAU_ADD] == FL_DS_FAMILY,
          "model over family");
    /* and a flag over the model */
    fl_decode_opts flag = d;
    flag.threshold = 0.7f;
    fl_decode_opts_overlay(&d, src, &flag, FL_DF_BIT(FL_DF_THRESHOLD), FL_DS_FLAG);
    CHECK(d.threshold == 0.7f && src[FL_DF_THRESHOLD] == FL_DS_FLAG && d.k == 2, "flag over model");
    /* bad sections: each names the key */
    bad(sdar_cfg, "fogline", "[1]", FL_EFORMAT, "fogline");
    bad(sdar_cfg, "fogline", "{\"decode\": {}}", FL_EFORMAT, "fogline.decode");
    bad(sdar_cfg, "fogline", "{\"decoding\": 3}", FL_EFORMAT, "fogline.decoding");
    bad(sdar_cfg, "fogline", "{\"decoding\": {\"treshold\": 0.9}}", FL_EFORMAT, "treshold");
    bad(sdar_cfg, "fogline", "{\"decoding\": {\"threshold\": \"high\"}}", FL_EFORMAT, "threshold");
    bad(sdar_cfg, "fogline", "{\"decoding\": {\"threshold\": 1.5}}", FL_ERANGE, "threshold");
    bad(sdar_cfg, "fogline", "{\"decoding\": {\"pipeline\": 1}}", FL_EFORMAT, "pipeline");
    bad(sdar_cfg, "fogline", "{\"decoding\": {\"policy\": \"greedy\"}}", FL_EFORMAT, "policy");
    bad(sdar_cfg, "fogline", "{\"decoding\": {\"max_blocks\": 40}}", FL_ERANGE, "max_blocks");
    bad(sdar_cfg, "fogline", "{\"decoding\": {\"max_blocks\": 2.5}}", FL_EFORMAT, "max_blocks");
    bad(sdar_cfg, "fogline", "{\"decoding\": {\"top_p\": 0}}", FL_ERANGE, "top_p");
}

int main(void)
{
    test_decoding_defaults();
    test_sdar();
    test_fast();
    test_fogline();
    test_unsupported();
    test_inconsistent();
    test_load();
    return check_summary("test_config");
}
