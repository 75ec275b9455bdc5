/* test_loader_moe.c: mixture-of-experts directories (LLaDA2's llada2_moe, SDAR-MoE's sdar_moe)
 * through the config parser and the loader. Tiny models are written here with the real tensor
 * names; a good one loads with its experts, router and shared expert bound and its parameter
 * counts right; each bad one, made by breaking one key or tensor, is refused with its exact
 * one-line message. */
#include <jansson.h>

#include "backend.h"
#include "check.h"
#include "model.h"
#include "test_loader_kit.h"

static char root[TK_PATH];

/* hidden 8, 3 layers, 2 heads / 1 kv head, head_dim 4, dense intermediate 16, 8 experts of
 * width 12, top 2, vocab 32 */
enum { MH = 8, ML = 3, MNH = 2, MKV = 1, MHD = 4, MFF = 16, ME = 8, MI = 12, MK = 2, MV = 32 };

static json_t *with(json_t *cfg, const char *key, json_t *v)
{
    json_object_set_new(cfg, key, v);
    return cfg;
}

/* The keys both families' configs share. */
static json_t *common(const char *arch, const char *type)
{
    json_t *c = json_object();
    with(c, "architectures", json_pack("[s]", arch));
    with(c, "model_type", json_string(type));
    with(c, "hidden_size", json_integer(MH));
    with(c, "num_hidden_layers", json_integer(ML));
    with(c, "num_attention_heads", json_integer(MNH));
    with(c, "num_key_value_heads", json_integer(MKV));
    with(c, "head_dim", json_integer(MHD));
    with(c, "intermediate_size", json_integer(MFF));
    with(c, "moe_intermediate_size", json_integer(MI));
    with(c, "num_experts", json_integer(ME));
    with(c, "num_experts_per_tok", json_integer(MK));
    with(c, "norm_topk_prob", json_true());
    with(c, "vocab_size", json_integer(MV));
    with(c, "rms_norm_eps", json_real(1e-6));
    with(c, "max_position_embeddings", json_integer(256));
    with(c, "eos_token_id", json_integer(30));
    return with(c, "tie_word_embeddings", json_false());
}

static json_t *llada2_config(void)
{
    json_t *c = common("LLaDA2MoeModelLM", "llada2_moe");
    with(c, "num_shared_experts", json_integer(1));
    with(c, "n_group", json_integer(4));
    with(c, "topk_group", json_integer(2));
    with(c, "score_function", json_string("sigmoid"));
    with(c, "moe_router_enable_expert_bias", json_true());
    with(c, "routed_scaling_factor", json_real(2.5));
    with(c, "first_k_dense_replace", json_integer(1));
    with(c, "partial_rotary_factor", json_real(0.5));
    with(c, "use_qk_norm", json_true());
    with(c, "use_qkv_bias", json_false());
    with(c, "use_bias", json_false());
    with(c, "router_dtype", json_string("fp32"));
    return with(c, "rope_theta", json_real(600000.0));
}

static json_t *sdar_moe_config(void)
{
    json_t *c = common("SDARMoeForCausalLM", "sdar_moe");
    with(c, "decoder_sparse_step", json_integer(1));
    with(c, "mlp_only_layers", json_array());
    with(c, "mask_token_id", json_integer(31));
    return with(c, "rope_theta", json_real(1000000.0));
}

static void add(tk_st *s, float *b, const char *name, int64_t d0, int64_t d1)
{
    tk_st_add_f32(s, name, d0, d1, *b += 1);
}

/* Every tensor of the tiny model of the family (llada2 or not). */
static void tensors(tk_st *s, bool llada2)
{
    char n[160], p[96];
    float b = 0;
    add(s, &b, llada2 ? "model.word_embeddings.weight" : "model.embed_tokens.weight", MV, MH);
    add(s, &b, "model.norm.weight", MH, -1);
    add(s, &b, "lm_head.weight", MV, MH);
    for (int l = 0; l < ML; l++) {
#define T(suffix, d0, d1) (snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix), add(s, &b, n, d0, d1))
        T("input_layernorm.weight", MH, -1);
        T("post_attention_layernorm.weight", MH, -1);
        if (llada2) {
            T("attention.query_key_value.weight", (MNH + 2 * MKV) * MHD, MH);
            T("attention.query_layernorm.weight", MHD, -1);
            T("attention.key_layernorm.weight", MHD, -1);
            T("attention.dense.weight", MH, MNH * MHD);
        } else {
            T("self_attn.q_proj.weight", MNH * MHD, MH);
            T("self_attn.k_proj.weight", MKV * MHD, MH);
            T("self_attn.v_proj.weight", MKV * MHD, MH);
            T("self_attn.o_proj.weight", MH, MNH * MHD);
            T("self_attn.q_norm.weight", MHD, -1);
            T("self_attn.k_norm.weight", MHD, -1);
        }
        if (llada2 && l == 0) { /* first_k_dense_replace 1 */
            T("mlp.gate_proj.weight", MFF, MH);
            T("mlp.up_proj.weight", MFF, MH);
            T("mlp.down_proj.weight", MH, MFF);
            continue;
        }
        T("mlp.gate.weight", ME, MH);
        if (llada2)
            T("mlp.gate.expert_bias", ME, -1);
        for (int x = 0; x <= ME; x++) {
            if (x == ME && !llada2)
                break;
            if (x == ME)
                snprintf(p, sizeof p, "mlp.shared_experts");
            else
                snprintf(p, sizeof p, "mlp.experts.%d", x);
            char q[128];
            snprintf(q, sizeof q, "%s.gate_proj.weight", p);
            T(q, MI, MH);
            snprintf(q, sizeof q, "%s.up_proj.weight", p);
            T(q, MI, MH);
            snprintf(q, sizeof q, "%s.down_proj.weight", p);
            T(q, MH, MI);
        }
#undef T
    }
}

/* A fresh directory with cfg (consumed) and the family's tensors, edit (may be NULL) applied
 * to them first. */
static const char *make(json_t *cfg, bool llada2, void (*edit)(tk_st *s, void *arg), void *arg)
{
    static char dir[TK_PATH];
    static int n;
    char p[TK_PATH];
    snprintf(dir, sizeof dir, "%.3000s/m%d", root, n++);
    mkdir(dir, 0755);
    CHECK(json_dump_file(cfg, tk_path(p, dir, "config.json"), 0) == 0, "write %s", p);
    json_decref(cfg);
    tk_st s;
    tk_st_init(&s);
    tensors(&s, llada2);
    if (edit)
        edit(&s, arg);
    CHECK(tk_st_write(&s, tk_path(p, dir, "model.safetensors")) == 0, "write %s", p);
    tk_st_free(&s);
    return dir;
}

static int load(const char *dir, fl_model **out, fl_err *e)
{
    fl_load_opts o = {.no_tokenizer = true};
    fl_model *m = NULL;
    memset(e, 0, sizeof *e);
    int rc = fl_model_load(&m, dir, &o, e);
    CHECK((rc == 0) == (m != NULL), "model pointer follows rc");
    CHECK(rc == 0 || (e->code == rc && e->msg[0] && !strchr(e->msg, '\n')), "message: %s", e->msg);
    if (out)
        *out = m;
    else
        fl_model_free(m);
    return rc;
}

/* The error of loading cfg (consumed) with the family's tensors edited by edit: rc and the
 * message after the directory's prefix must be exactly want. */
static void expect(json_t *cfg, bool llada2, void (*edit)(tk_st *, void *), void *arg, int code,
                   const char *want)
{
    fl_err e;
    const char *dir = make(cfg, llada2, edit, arg);
    int rc = load(dir, NULL, &e);
    CHECK(rc == code, "rc %d (%s), want %d: %s", rc, fl_strerror(rc), code, e.msg);
    const char *msg = e.msg;
    size_t dl = strlen(dir);
    if (!strncmp(msg, dir, dl) && !strncmp(msg + dl, ": ", 2))
        msg += dl + 2;
    CHECK(!strcmp(msg, want), "message\n  got  '%s'\n  want '%s'", msg, want);
}

static void del_tensor(tk_st *s, void *arg) { json_object_del(s->header, arg); }

static void set_dtype(tk_st *s, void *arg)
{
    const char **a = arg; /* name, dtype */
    json_t *t = json_object_get(s->header, a[0]);
    json_object_set_new(t, "dtype", json_string(a[1]));
    /* keep the byte count consistent for the new element size: shape [n] of I32/F32 is 4n */
}

static void reshape(tk_st *s, void *arg)
{
    const char **a = arg; /* name */
    json_t *t = json_object_get(s->header, a[0]);
    json_t *sh = json_object_get(t, "shape");
    json_int_t d0 = json_integer_value(json_array_get(sh, 0)),
               d1 = json_integer_value(json_array_get(sh, 1));
    json_object_set_new(t, "shape", json_pack("[II]", d1, d0));
}

static void add_extra(tk_st *s, void *arg)
{
    float b = 100;
    add(s, &b, arg, MI, MH);
}

static void good(void)
{
    fl_model *m = NULL;
    fl_err e;
    /* LLaDA2: layer 0 dense, 1-2 MoE with a shared expert; a fused q|k|v; half the dims rotate */
    CHECK(load(make(llada2_config(), true, NULL, NULL), &m, &e) == 0, "llada2: %s", e.msg);
    if (m) {
        const fl_config *c = &m->cfg;
        CHECK(c->family == FL_FAMILY_LLADA2 && c->moe.router == FL_ROUTER_SIGMOID_GROUPED,
              "family %d router %d", c->family, c->moe.router);
        CHECK(c->block_size == 32 && c->rotary_dim == MHD / 2 && c->fused_qkv && c->qk_norm,
              "block %d rotary %d", c->block_size, c->rotary_dim);
        CHECK(!fl_config_layer_moe(c, 0) && fl_config_layer_moe(c, 1) && fl_config_layer_moe(c, 2),
              "dense/moe layers");
        CHECK(c->moe.n_group == 4 && c->moe.topk_group == 2 && c->moe.n_shared == 1 &&
                  c->moe.scaling == 2.5f && c->moe.expert_bias,
              "moe keys");
        CHECK(m->layers[0].w_gate && !m->layers[0].experts && m->layers[1].experts &&
                  m->layers[1].router && m->layers[1].expert_bias && m->layers[1].shared.down &&
                  m->layers[0].wqkv && !m->layers[0].wq,
              "bound roles");
        /* parameters: embed + lm_head + norm; per layer 2 norms + qkv + 2 qk norms + dense;
         * dense MLP on layer 0; router + bias + 8 experts + shared on layers 1-2 */
        int64_t att = (MNH + 2 * MKV) * MHD * MH + MH * MNH * MHD + 2 * MHD + 2 * MH;
        int64_t ex = 3 * MI * MH, moe = ME * MH + (ME + 1) * ex; /* the bias is a buffer */
        int64_t want = 2 * MV * MH + MH + 3 * att + 3 * MFF * MH + 2 * moe;
        CHECK(m->n_params == want, "n_params %lld want %lld", (long long)m->n_params,
              (long long)want);
        CHECK(m->n_active == want - 2 * (ME - MK) * ex, "n_active %lld", (long long)m->n_active);
        /* the weight plan: per MoE layer the router in f32 (routing is fp32 whatever the
         * matrices), its bias, two slots per expert and two for the shared expert */
        fl_wplan p;
        fl_wplan_opts po = {.align = 64, .mat_elem = 2, .map = true, .rope = true};
        CHECK(fl_wplan_build(&p, m, &po, &e) == 0, "plan: %s", e.msg);
        int n_router = 0, n_egu = 0, n_edown = 0, n_shared = 0, n_bias = 0, n_qkv = 0;
        for (int i = 0; i < p.n; i++) {
            const fl_wslot *sl = &p.slot[i];
            switch (sl->role) {
            case FL_W_ROUTER:
                n_router++;
                CHECK(sl->elem == 4 && sl->rows == ME && sl->cols == MH, "router slot");
                break;
            case FL_W_EXPERT_BIAS: n_bias++; break;
            case FL_W_EXPERT_GATE_UP:
                CHECK(sl->expert == n_egu % ME && sl->rows == 2 * MI && sl->src[1],
                      "expert gate|up slot %d", n_egu);
                n_egu++;
                break;
            case FL_W_EXPERT_DOWN: n_edown++; break;
            case FL_W_SHARED_GATE_UP:
            case FL_W_SHARED_DOWN: n_shared++; break;
            case FL_W_QKV:
                CHECK(sl->src[0] && !sl->src[1] && sl->rows == (MNH + 2 * MKV) * MHD,
                      "fused qkv: one part");
                n_qkv++;
                break;
            case FL_W_ROPE: CHECK(sl->cols == MHD / 4, "rope slot: rotary_dim / 2"); break;
            default: break;
            }
        }
        CHECK(n_router == 2 && n_bias == 2 && n_egu == 2 * ME && n_edown == 2 * ME &&
                  n_shared == 4 && n_qkv == ML,
              "slots: router %d bias %d gate|up %d down %d shared %d qkv %d", n_router, n_bias,
              n_egu, n_edown, n_shared, n_qkv);
        fl_wplan_free(&p);
        fl_model_free(m);
    }
    /* (a BF16 expert bias, LLaDA2.0's, is in the forward parity fixtures) */
    /* SDAR-MoE: every layer MoE, no shared expert, the family's block 4 */
    CHECK(load(make(sdar_moe_config(), false, NULL, NULL), &m, &e) == 0, "sdar-moe: %s", e.msg);
    if (m) {
        CHECK(m->cfg.family == FL_FAMILY_SDAR_MOE && m->cfg.moe.router == FL_ROUTER_SOFTMAX &&
                  m->cfg.block_size == 4 && m->cfg.rotary_dim == MHD && m->cfg.moe.norm_topk,
              "sdar-moe config");
        for (int l = 0; l < ML; l++)
            CHECK(m->layers[l].experts && !m->layers[l].shared.gate, "layer %d", l);
        fl_model_free(m);
    }
    /* mlp_only_layers and decoder_sparse_step make layers dense */
    json_t *c = with(sdar_moe_config(), "decoder_sparse_step", json_integer(2));
    fl_config cfg;
    char *text = json_dumps(c, 0);
    CHECK(fl_config_parse(&cfg, text, &e) == 0, "parse: %s", e.msg);
    CHECK(!fl_config_layer_moe(&cfg, 0) && fl_config_layer_moe(&cfg, 1) &&
              !fl_config_layer_moe(&cfg, 2),
          "decoder_sparse_step 2");
    free(text);
    json_decref(c);
    c = with(sdar_moe_config(), "mlp_only_layers", json_pack("[i]", 1));
    text = json_dumps(c, 0);
    CHECK(fl_config_parse(&cfg, text, &e) == 0, "parse: %s", e.msg);
    CHECK(fl_config_layer_moe(&cfg, 0) && !fl_config_layer_moe(&cfg, 1), "mlp_only_layers");
    free(text);
    json_decref(c);
}

/* Keys a config leaves out take LLaDA2MoeConfig's defaults, as the authors' code reads them:
 * n_group 8, topk_group 4, routed_scaling_factor 2.5, partial_rotary_factor 0.5, use_qk_norm
 * true, rms_norm_eps 1e-5, num_key_value_heads 0 = one per head. 16 experts so that 8 groups
 * of two fit, and head_dim 8 so that half of it rotates in pairs. */
static void llada2_defaults(void)
{
    json_t *c = llada2_config();
    const char *gone[] = {"n_group", "topk_group", "routed_scaling_factor",
                          "partial_rotary_factor", "use_qk_norm", "rms_norm_eps"};
    for (size_t i = 0; i < sizeof gone / sizeof *gone; i++)
        json_object_del(c, gone[i]);
    with(c, "num_experts", json_integer(16));
    with(c, "head_dim", json_integer(8));
    with(c, "num_key_value_heads", json_integer(0));
    fl_config cfg;
    fl_err e;
    char *text = json_dumps(c, 0);
    CHECK(fl_config_parse(&cfg, text, &e) == 0, "parse: %s", e.msg);
    CHECK(cfg.moe.n_group == 8 && cfg.moe.topk_group == 4 && cfg.moe.scaling == 2.5f,
          "group %d topk_group %d scaling %g", cfg.moe.n_group, cfg.moe.topk_group,
          (double)cfg.moe.scaling);
    CHECK(cfg.rotary_dim == 4 && cfg.qk_norm && cfg.rms_eps == 1e-5f,
          "rotary %d qk_norm %d eps %g", cfg.rotary_dim, cfg.qk_norm, (double)cfg.rms_eps);
    CHECK(cfg.n_kv_heads == MNH, "kv heads %d (0 means one per head)", cfg.n_kv_heads);
    free(text);
    /* SDAR-MoE (Qwen3-MoE) keeps Qwen3's eps default and refuses 0 kv heads */
    json_t *q = sdar_moe_config();
    json_object_del(q, "rms_norm_eps");
    text = json_dumps(q, 0);
    CHECK(fl_config_parse(&cfg, text, &e) == 0 && cfg.rms_eps == 1e-6f, "sdar eps %g",
          (double)cfg.rms_eps);
    free(text);
    json_decref(q);
    json_decref(c);
    expect(with(sdar_moe_config(), "num_key_value_heads", json_integer(0)), false, NULL, NULL,
           FL_ERANGE, "config.json: num_key_value_heads is 0, must be in 1..4096");
}

static void bad_config(void)
{
    expect(with(llada2_config(), "hidden_size", json_integer(1)), true, NULL, NULL, FL_ERANGE,
           "config.json: hidden_size is 1, must be at least 2");
    expect(with(llada2_config(), "vocab_size", json_integer(1)), true, NULL, NULL, FL_ERANGE,
           "config.json: vocab_size is 1, must be at least 2");
    expect(with(with(llada2_config(), "moe_intermediate_size", json_integer(1 << 20)),
                "num_shared_experts", json_integer(17)),
           true, NULL, NULL, FL_ERANGE,
           "config.json: the shared expert's width (moe_intermediate_size 1048576 x "
           "num_shared_experts 17) is above 16777216");
    expect(with(llada2_config(), "num_experts_per_tok", json_integer(9)), true, NULL, NULL,
           FL_ERANGE, "config.json: num_experts_per_tok (9) is more than num_experts (8)");
    expect(with(llada2_config(), "n_group", json_integer(3)), true, NULL, NULL, FL_ERANGE,
           "config.json: n_group (3) does not divide num_experts (8)");
    expect(with(llada2_config(), "n_group", json_integer(8)), true, NULL, NULL, FL_ERANGE,
           "config.json: n_group 8 leaves 1 expert(s) a group (a group's score is its two best)");
    expect(with(llada2_config(), "topk_group", json_integer(5)), true, NULL, NULL, FL_ERANGE,
           "config.json: topk_group (5) is more than n_group (4)");
    expect(with(with(llada2_config(), "topk_group", json_integer(1)), "num_experts_per_tok",
                json_integer(3)),
           true, NULL, NULL, FL_ERANGE,
           "config.json: num_experts_per_tok (3) is more than the 2 experts of topk_group (1) "
           "groups");
    expect(with(llada2_config(), "score_function", json_string("softmax")), true, NULL, NULL,
           FL_EUNSUPPORTED, "config.json: score_function must be \"sigmoid\" (LLaDA2's router)");
    expect(with(llada2_config(), "router_dtype", json_string("bf16")), true, NULL, NULL,
           FL_EUNSUPPORTED,
           "config.json: router_dtype must be \"fp32\" (fogline routes in fp32, as the authors' "
           "code does)");
    expect(with(llada2_config(), "partial_rotary_factor", json_real(0.25)), true, NULL, NULL,
           FL_ERANGE,
           "config.json: partial_rotary_factor 0.25 gives 1 rotary dims of head_dim 4 (need an "
           "even number, at least 2)");
    expect(with(llada2_config(), "partial_rotary_factor", json_real(1.5)), true, NULL, NULL,
           FL_ERANGE, "config.json: partial_rotary_factor is 1.5, must be in (0, 1]");
    expect(with(llada2_config(), "first_k_dense_replace", json_integer(4)), true, NULL, NULL,
           FL_ERANGE,
           "config.json: first_k_dense_replace is 4, must be in 0..num_hidden_layers (3)");
    expect(with(llada2_config(), "use_qkv_bias", json_true()), true, NULL, NULL, FL_EUNSUPPORTED,
           "config.json: use_qkv_bias true is not supported (no query_key_value bias)");
    expect(with(llada2_config(), "num_shared_experts", json_integer(-1)), true, NULL, NULL,
           FL_ERANGE, "config.json: num_shared_experts is -1, must be in 0..64");
    expect(with(llada2_config(), "rope_scaling", json_pack("{ss}", "type", "yarn")), true, NULL,
           NULL, FL_EUNSUPPORTED, "config.json: rope_scaling is not supported (plain RoPE only)");
    json_t *c = llada2_config();
    json_object_del(c, "num_experts");
    expect(c, true, NULL, NULL, FL_EFORMAT, "config.json: missing num_experts");
    expect(with(sdar_moe_config(), "num_experts_per_tok", json_integer(40)), false, NULL, NULL,
           FL_ERANGE, "config.json: num_experts_per_tok (40) is more than num_experts (8)");
    expect(with(with(sdar_moe_config(), "num_experts", json_integer(64)), "num_experts_per_tok",
                json_integer(33)),
           false, NULL, NULL, FL_EUNSUPPORTED,
           "config.json: num_experts_per_tok 33 is above fogline's limit of 32");
    expect(with(sdar_moe_config(), "mlp_only_layers", json_pack("[i]", 3)), false, NULL, NULL,
           FL_ERANGE, "config.json: mlp_only_layers[0] is not a layer number (0..2)");
    expect(with(sdar_moe_config(), "shared_expert_intermediate_size", json_integer(8)), false,
           NULL, NULL, FL_EUNSUPPORTED,
           "config.json: shared_expert_intermediate_size is set, but Qwen3-MoE (SDAR-MoE) has no "
           "shared expert");
}

static void bad_tensors(void)
{
    expect(llada2_config(), true, del_tensor, "model.layers.2.mlp.experts.5.up_proj.weight",
           FL_ENOTFOUND,
           "missing tensor model.layers.2.mlp.experts.5.up_proj.weight (expected shape [12, 8])");
    const char *rs[] = {"model.layers.1.mlp.experts.3.down_proj.weight"};
    expect(sdar_moe_config(), false, reshape, rs, FL_EFORMAT,
           "tensor model.layers.1.mlp.experts.3.down_proj.weight has shape [12, 8], config.json "
           "implies [8, 12]");
    expect(with(llada2_config(), "moe_intermediate_size", json_integer(4)), true, NULL, NULL,
           FL_EFORMAT,
           "tensor model.layers.1.mlp.experts.0.gate_proj.weight has shape [12, 8], config.json "
           "implies [4, 8]");
    expect(llada2_config(), true, add_extra, "model.layers.1.mlp.experts.8.gate_proj.weight",
           FL_EFORMAT,
           "the weights hold model.layers.1.mlp.experts.8.gate_proj.weight, but config.json has "
           "num_experts 8");
    const char *bias_i32[] = {"model.layers.1.mlp.gate.expert_bias", "I32"};
    expect(llada2_config(), true, set_dtype, (void *)bias_i32, FL_EUNSUPPORTED,
           "tensor model.layers.1.mlp.gate.expert_bias has dtype I32 (the router's expert bias "
           "is F32, F16 or BF16)");
    expect(llada2_config(), true, del_tensor, "model.layers.2.mlp.gate.expert_bias", FL_ENOTFOUND,
           "missing tensor model.layers.2.mlp.gate.expert_bias (expected shape [8])");
    expect(with(llada2_config(), "moe_router_enable_expert_bias", json_false()), true, NULL, NULL,
           FL_EUNSUPPORTED,
           "tensor model.layers.1.mlp.gate.expert_bias is present, but config.json has "
           "moe_router_enable_expert_bias false");
    expect(llada2_config(), true, del_tensor, "model.layers.1.mlp.gate.weight", FL_ENOTFOUND,
           "missing tensor model.layers.1.mlp.gate.weight (expected shape [8, 8])");
    expect(llada2_config(), true, del_tensor, "model.layers.1.mlp.shared_experts.down_proj.weight",
           FL_ENOTFOUND,
           "missing tensor model.layers.1.mlp.shared_experts.down_proj.weight (expected shape "
           "[8, 12])");
    expect(with(llada2_config(), "num_shared_experts", json_integer(0)), true, NULL, NULL,
           FL_EUNSUPPORTED,
           "tensor model.layers.1.mlp.shared_experts.gate_proj.weight is present, but "
           "config.json has no shared experts");
    expect(with(llada2_config(), "first_k_dense_replace", json_integer(0)), true, NULL, NULL,
           FL_ENOTFOUND,
           "missing tensor model.layers.0.mlp.gate.weight (expected shape [8, 8])");
    expect(with(llada2_config(), "first_k_dense_replace", json_integer(2)), true, NULL, NULL,
           FL_ENOTFOUND,
           "missing tensor model.layers.1.mlp.gate_proj.weight (expected shape [16, 8])");
    expect(llada2_config(), true, del_tensor, "model.layers.0.attention.query_key_value.weight",
           FL_ENOTFOUND,
           "missing tensor model.layers.0.attention.query_key_value.weight (expected shape [16, "
           "8])");
    expect(with(sdar_moe_config(), "mlp_only_layers", json_pack("[i]", 2)), false, NULL, NULL,
           FL_ENOTFOUND, "missing tensor model.layers.2.mlp.gate_proj.weight (expected shape [16, 8])");
}

int main(void)
{
    CHECK(tk_mkdtemp(root, "moe") == 0, "scratch dir");
    good();
    llada2_defaults();
    bad_config();
    bad_tensors();
    fl_rmtree(root);
    return check_summary("test_loader_moe");
}
