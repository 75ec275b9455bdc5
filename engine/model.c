/* model.c: binds a Hugging Face directory's tensors to the roles of the Qwen2/Qwen3 layouts,
 * checking presence, dtype and exact shape of each (and, in a quantized directory, each
 * quantized matrix's scales), and loads the tokenizer that resolves the mask token. Nothing
 * is converted or copied: tensors point into the mmapped files. */
#include "model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "qformat.h"
#include "tokenizer/tokenizer.h"

static bool is_float(fl_dtype t) { return t == FL_DT_F32 || t == FL_DT_F16 || t == FL_DT_BF16; }

static void shape_str(char *dst, size_t cap, int ndim, const int64_t *shape)
{
    size_t at = 0;
    at += (size_t)snprintf(dst + at, cap - at, "[");
    for (int i = 0; i < ndim && at < cap; i++)
        at += (size_t)snprintf(dst + at, cap - at, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (at < cap)
        snprintf(dst + at, cap - at, "]");
}

/* Looks up name and checks it is a float tensor of exactly the given shape (ndim 1 or 2;
 * d1 < 0 means a vector). */
static int bind(const fl_model *m, const fl_tensor **slot, const char *name, int64_t d0,
                int64_t d1, fl_err *e)
{
    int ndim = d1 < 0 ? 1 : 2;
    int64_t want[2] = {d0, d1};
    char ws[64], hs[160];
    shape_str(ws, sizeof ws, ndim, want);
    const fl_tensor *t = fl_weights_get(m->weights, name);
    if (!t)
        return fl_err_set(e, FL_ENOTFOUND, "%s: missing tensor %s (expected shape %s)", m->dir,
                          name, ws);
    if (!is_float(t->dtype))
        return fl_err_set(e, FL_EUNSUPPORTED, "%s: tensor %s has dtype %s (need F32, F16 or BF16)",
                          m->dir, name, fl_dtype_name(t->dtype));
    if (t->ndim != ndim || t->shape[0] != d0 || (ndim == 2 && t->shape[1] != d1)) {
        shape_str(hs, sizeof hs, t->ndim, t->shape);
        return fl_err_set(e, FL_EFORMAT, "%s: tensor %s has shape %s, config.json implies %s",
                          m->dir, name, hs, ws);
    }
    *slot = t;
    return 0;
}

/* A tensor the config says should not be there changes the maths (a bias we would drop):
 * refuse rather than silently compute something else. */
static int refuse(const fl_model *m, const char *name, const char *why, fl_err *e)
{
    if (fl_weights_get(m->weights, name))
        return fl_err_set(e, FL_EUNSUPPORTED, "%s: tensor %s is present, but %s", m->dir, name,
                          why);
    return 0;
}

/* The dtype a quantized matrix must have: q8's I8, q4's U8 for the projections; the
 * embedding and lm_head are q8 in every quantized directory (docs/models.md: one wrong
 * logit or embedding row costs more than a projection's, and they are a small share of a
 * large model's bytes). */
static fl_dtype quant_dtype(fl_quant q, bool head)
{
    return head || q == FL_QUANT_Q8 ? FL_DT_I8 : FL_DT_U8;
}

/* Checks the F16 scales of quantized matrix t (n, k): present as NAME_scale, F16, shape
 * (n, k/32) (a file written with another group size shows here), every value finite (a NaN
 * scale would turn its whole group into NaN at every forward). */
static int bind_scales(fl_model *m, const fl_tensor *t, int64_t n, int64_t k, fl_err *e)
{
    char sn[192], ws[64], hs[160];
    int64_t G = k / FL_QG, want[2] = {n, G};
    shape_str(ws, sizeof ws, 2, want);
    if ((size_t)snprintf(sn, sizeof sn, "%s_scale", t->name) >= sizeof sn)
        return fl_err_set(e, FL_EINVAL, "%s: tensor name %.100s is too long", m->dir, t->name);
    const fl_tensor *s = fl_weights_get(m->weights, sn);
    if (!s)
        return fl_err_set(e, FL_ENOTFOUND,
                          "%s: missing tensor %s (the F16 scales of %s %s, expected shape %s)",
                          m->dir, sn, fl_dtype_name(t->dtype), t->name, ws);
    if (s->dtype != FL_DT_F16)
        return fl_err_set(e, FL_EUNSUPPORTED, "%s: tensor %s has dtype %s (scales are F16)",
                          m->dir, sn, fl_dtype_name(s->dtype));
    if (s->ndim != 2 || s->shape[0] != n || s->shape[1] != G) {
        shape_str(hs, sizeof hs, s->ndim, s->shape);
        return fl_err_set(e, FL_EFORMAT,
                          "%s: tensor %s has shape %s, config.json and groups of %d imply %s",
                          m->dir, sn, hs, FL_QG, ws);
    }
    /* fl_matrix_rows_f32 and the backends read scales as uint16_t */
    if ((uintptr_t)s->data % 2)
        return fl_err_set(e, FL_EFORMAT, "%s: tensor %s starts at an odd offset (F16 scales must "
                          "be 2-byte aligned)", m->dir, sn);
    const unsigned char *p = s->data; /* byte order of the file, whatever the host's */
    for (int64_t i = 0; i < n * G; i++) {
        unsigned h = (unsigned)p[2 * i] | (unsigned)p[2 * i + 1] << 8;
        if ((h & 0x7c00) == 0x7c00)
            return fl_err_set(e, FL_EFORMAT, "%s: tensor %s: the scale of row %lld group %lld is %s",
                              m->dir, sn, (long long)(i / G), (long long)(i % G),
                              h & 0x3ff ? "NaN" : (h & 0x8000 ? "-inf" : "inf"));
    }
    m->scales[fl_weights_index(m->weights, t)] = s;
    m->weight_bytes += (int64_t)s->nbytes;
    return 0;
}

/* A matrix role (n, k): as bind() for a float tensor; an I8/U8 tensor only in a quantized
 * directory, with the dtype and packed shape its format gives and its scales. head: the
 * embedding or lm_head. */
static int bind_mat(fl_model *m, const fl_tensor **slot, const char *name, int64_t n, int64_t k,
                    bool head, fl_err *e)
{
    const fl_tensor *t = fl_weights_get(m->weights, name);
    fl_quant q = m->cfg.quant;
    if (!t || is_float(t->dtype) ||
        (q == FL_QUANT_NONE && t->dtype != FL_DT_I8 && t->dtype != FL_DT_U8)) {
        int rc = bind(m, slot, name, n, k, e);
        if (!rc) {
            m->n_params += n * k;
            m->weight_bytes += (int64_t)t->nbytes;
            m->n_matrices++;
        }
        return rc;
    }
    if (q == FL_QUANT_NONE)
        return fl_err_set(e, FL_EUNSUPPORTED,
                          "%s: tensor %s is quantized (%s), but config.json has no "
                          "quantization_config",
                          m->dir, name, fl_dtype_name(t->dtype));
    fl_dtype want = quant_dtype(q, head);
    if (t->dtype != want) {
        if (t->dtype != FL_DT_I8 && t->dtype != FL_DT_U8)
            return fl_err_set(e, FL_EUNSUPPORTED,
                              "%s: tensor %s has dtype %s (need F32, F16 or BF16, or %s with F16 "
                              "scales: quantization_config format %s)",
                              m->dir, name, fl_dtype_name(t->dtype), fl_dtype_name(want),
                              fl_quant_name(q));
        return fl_err_set(e, FL_EUNSUPPORTED,
                          "%s: tensor %s has dtype %s, but quantization_config format %s stores "
                          "%s as %s",
                          m->dir, name, fl_dtype_name(t->dtype), fl_quant_name(q),
                          head ? "the embedding and lm_head" : "the projections",
                          fl_dtype_name(want));
    }
    if (k % FL_QG)
        return fl_err_set(e, FL_EFORMAT,
                          "%s: tensor %s is quantized, but its rows have %lld weights, not a "
                          "multiple of %d (such a matrix stays F32, F16 or BF16)",
                          m->dir, name, (long long)k, FL_QG);
    int64_t cols = want == FL_DT_U8 ? k / 2 : k;
    if (t->ndim != 2 || t->shape[0] != n || t->shape[1] != cols) {
        char ws[64], hs[160];
        int64_t sh[2] = {n, cols};
        shape_str(ws, sizeof ws, 2, sh);
        shape_str(hs, sizeof hs, t->ndim, t->shape);
        return fl_err_set(e, FL_EFORMAT, "%s: tensor %s has shape %s, config.json implies %s%s",
                          m->dir, name, hs, ws, want == FL_DT_U8 ? " (q4: two weights a byte)" : "");
    }
    int rc = bind_scales(m, t, n, k, e);
    if (rc)
        return rc;
    *slot = t;
    m->n_params += n * k;
    m->weight_bytes += (int64_t)t->nbytes;
    m->n_matrices++;
    m->n_quantized++;
    return 0;
}

/* A scale tensor that no quantized matrix of the model owns (a float matrix's, a norm's, a
 * stored but tied lm_head's) would be ignored, and whatever wrote it meant something else:
 * refused. */
static int check_stray_scales(const fl_model *m, fl_err *e)
{
    static const char suffix[] = ".weight_scale";
    const size_t ns = sizeof suffix - 1;
    for (size_t i = 0; i < fl_weights_count(m->weights); i++) {
        const fl_tensor *s = fl_weights_at(m->weights, i);
        size_t len = strlen(s->name);
        if (len <= ns || strcmp(s->name + len - ns, suffix))
            continue;
        char base[192];
        if (len - 6 >= sizeof base)
            return fl_err_set(e, FL_EINVAL, "%s: tensor name %.100s is too long", m->dir, s->name);
        memcpy(base, s->name, len - 6); /* drop "_scale" */
        base[len - 6] = 0;
        const fl_tensor *t = fl_weights_get(m->weights, base);
        if (!t || fl_model_scales(m, t) != s)
            return fl_err_set(e, FL_EUNSUPPORTED,
                              "%s: tensor %s is present, but %s is not a quantized matrix of the "
                              "model",
                              m->dir, s->name, base);
    }
    return 0;
}

/* The three matrices of a SwiGLU at prefix P (P.gate_proj, P.up_proj, P.down_proj), ff wide. */
static int bind_swiglu(fl_model *m, fl_expert_w *w, const char *prefix, int64_t ff, fl_err *e)
{
    const fl_config *c = &m->cfg;
    char n[192];
    int rc;
#define PNAME(suffix) (snprintf(n, sizeof n, "%s.%s", prefix, suffix), n)
    if ((rc = bind_mat(m, &w->gate, PNAME("gate_proj.weight"), ff, c->hidden, false, e)) ||
        (rc = bind_mat(m, &w->up, PNAME("up_proj.weight"), ff, c->hidden, false, e)) ||
        (rc = bind_mat(m, &w->down, PNAME("down_proj.weight"), c->hidden, ff, false, e)))
        return rc;
#undef PNAME
    return 0;
}

/* A float vector of n values that may be F32, F16 or BF16 (the router's expert_bias: BF16 in
 * LLaDA2.0, F32 in 2.1); anything else is refused by name. */
static int bind_bias(const fl_model *m, const fl_tensor **slot, const char *name, int64_t n,
                     fl_err *e)
{
    const fl_tensor *t = fl_weights_get(m->weights, name);
    if (t && !is_float(t->dtype))
        return fl_err_set(e, FL_EUNSUPPORTED, "%s: tensor %s has dtype %s (the router's expert "
                          "bias is F32, F16 or BF16)", m->dir, name, fl_dtype_name(t->dtype));
    return bind(m, slot, name, n, -1, e);
}

/* A mixture-of-experts layer's router, experts and shared expert. */
static int bind_moe(fl_model *m, int l, fl_err *e)
{
    const fl_config *c = &m->cfg;
    const fl_moe *mo = &c->moe;
    fl_layer_w *L = &m->layers[l];
    char n[192], p[160];
    int rc;
#define NAME(suffix) (snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix), n)
    /* the router stays float: it is computed in fp32, as the authors do */
    if ((rc = bind(m, &L->router, NAME("mlp.gate.weight"), mo->n_experts, c->hidden, e)))
        return rc;
    m->n_params += L->router->numel;
    m->weight_bytes += (int64_t)L->router->nbytes;
    if (mo->expert_bias) {
        if ((rc = bind_bias(m, &L->expert_bias, NAME("mlp.gate.expert_bias"), mo->n_experts, e)))
            return rc;
        m->weight_bytes += (int64_t)L->expert_bias->nbytes;
    } else if ((rc = refuse(m, NAME("mlp.gate.expert_bias"), "config.json has "
                            "moe_router_enable_expert_bias false", e))) {
        return rc;
    }
    if (!(L->experts = calloc((size_t)mo->n_experts, sizeof *L->experts)))
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    int64_t before = m->n_params;
    for (int x = 0; x < mo->n_experts; x++) {
        snprintf(p, sizeof p, "model.layers.%d.mlp.experts.%d", l, x);
        if ((rc = bind_swiglu(m, &L->experts[x], p, mo->inter, e)))
            return rc;
    }
    /* one token uses top_k of the n_experts */
    int64_t per = (m->n_params - before) / mo->n_experts;
    m->n_active -= per * (mo->n_experts - mo->top_k);
    snprintf(p, sizeof p, "model.layers.%d.mlp.experts.%d.gate_proj.weight", l, mo->n_experts);
    if (fl_weights_get(m->weights, p))
        return fl_err_set(e, FL_EFORMAT, "%s: the weights hold %s, but config.json has "
                          "num_experts %d", m->dir, p, mo->n_experts);
    if (mo->n_shared) {
        snprintf(p, sizeof p, "model.layers.%d.mlp.shared_experts", l);
        if ((rc = bind_swiglu(m, &L->shared, p, (int64_t)mo->inter * mo->n_shared, e)))
            return rc;
    } else if ((rc = refuse(m, NAME("mlp.shared_experts.gate_proj.weight"),
                            "config.json has no shared experts", e))) {
        return rc;
    }
    if ((rc = refuse(m, NAME("mlp.gate_proj.weight"), "the layer is a mixture of experts", e)))
        return rc;
#undef NAME
    return 0;
}

static int bind_layer(fl_model *m, int l, fl_err *e)
{
    const fl_config *c = &m->cfg;
    fl_layer_w *L = &m->layers[l];
    int64_t h = c->hidden, hd = c->head_dim, q = (int64_t)c->n_heads * hd,
            kv = (int64_t)c->n_kv_heads * hd, ff = c->intermediate;
    bool ll = c->family == FL_FAMILY_LLADA2;
    const char *at = ll ? "attention" : "self_attn";
    char n[160], a[64];
    int rc;
#define NAME(suffix) (snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix), n)
#define ANAME(suffix) (snprintf(a, sizeof a, "%s.%s", at, suffix), NAME(a))
    if ((rc = bind(m, &L->attn_norm, NAME("input_layernorm.weight"), h, -1, e)))
        return rc;
    if (c->fused_qkv) {
        if ((rc = bind_mat(m, &L->wqkv, ANAME("query_key_value.weight"), q + 2 * kv, h, false, e)) ||
            (rc = refuse(m, ANAME("query_key_value.bias"), "config.json has use_qkv_bias false",
                         e)))
            return rc;
    } else if ((rc = bind_mat(m, &L->wq, ANAME("q_proj.weight"), q, h, false, e)) ||
               (rc = bind_mat(m, &L->wk, ANAME("k_proj.weight"), kv, h, false, e)) ||
               (rc = bind_mat(m, &L->wv, ANAME("v_proj.weight"), kv, h, false, e))) {
        return rc;
    }
    if ((rc = bind_mat(m, &L->wo, ANAME(ll ? "dense.weight" : "o_proj.weight"), h, q, false, e)) ||
        (rc = bind(m, &L->mlp_norm, NAME("post_attention_layernorm.weight"), h, -1, e)))
        return rc;
    if (fl_config_layer_moe(c, l)) {
        if ((rc = bind_moe(m, l, e)))
            return rc;
    } else {
        fl_expert_w d = {0};
        if ((rc = bind_swiglu(m, &d, NAME("mlp"), ff, e)))
            return rc;
        L->w_gate = d.gate;
        L->w_up = d.up;
        L->w_down = d.down;
        if (c->moe.router != FL_ROUTER_NONE &&
            (rc = refuse(m, NAME("mlp.gate.weight"), "config.json makes this layer dense", e)))
            return rc;
    }
    if (c->qkv_bias) {
        if ((rc = bind(m, &L->bq, ANAME("q_proj.bias"), q, -1, e)) ||
            (rc = bind(m, &L->bk, ANAME("k_proj.bias"), kv, -1, e)) ||
            (rc = bind(m, &L->bv, ANAME("v_proj.bias"), kv, -1, e)))
            return rc;
    } else if (!c->fused_qkv) {
        const char *why = "config.json has no attention bias (attention_bias false)";
        if ((rc = refuse(m, ANAME("q_proj.bias"), why, e)) ||
            (rc = refuse(m, ANAME("k_proj.bias"), why, e)) ||
            (rc = refuse(m, ANAME("v_proj.bias"), why, e)))
            return rc;
    }
    const char *qn = ll ? "query_layernorm.weight" : "q_norm.weight";
    const char *kn = ll ? "key_layernorm.weight" : "k_norm.weight";
    if (c->qk_norm) {
        if ((rc = bind(m, &L->q_norm, ANAME(qn), hd, -1, e)) ||
            (rc = bind(m, &L->k_norm, ANAME(kn), hd, -1, e)))
            return rc;
    } else {
        const char *why = ll ? "config.json has use_qk_norm false" : "the Qwen2 layout has no q/k norm";
        if ((rc = refuse(m, ANAME(qn), why, e)) || (rc = refuse(m, ANAME(kn), why, e)))
            return rc;
    }
    if ((rc = refuse(m, ANAME(ll ? "dense.bias" : "o_proj.bias"), "fogline has no o_proj bias",
                     e)))
        return rc;
#undef ANAME
#undef NAME
    /* the matrices were counted by bind_mat */
    const fl_tensor *vec[] = {L->attn_norm, L->bq, L->bk, L->bv, L->q_norm, L->k_norm, L->mlp_norm};
    for (size_t i = 0; i < sizeof vec / sizeof vec[0]; i++)
        if (vec[i]) {
            m->n_params += vec[i]->numel;
            m->weight_bytes += (int64_t)vec[i]->nbytes;
        }
    return 0;
}

static int bind_weights(fl_model *m, fl_err *e)
{
    const fl_config *c = &m->cfg;
    int rc = fl_weights_open(&m->weights, m->dir, e);
    if (rc)
        return rc;
    m->scales = calloc(fl_weights_count(m->weights) + 1, sizeof *m->scales);
    if (!m->scales)
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    const char *emb = c->family == FL_FAMILY_LLADA2 ? "model.word_embeddings.weight"
                                                     : "model.embed_tokens.weight";
    if ((rc = bind_mat(m, &m->embed, emb, c->vocab, c->hidden, true, e)) ||
        (rc = bind(m, &m->final_norm, "model.norm.weight", c->hidden, -1, e)))
        return rc;
    m->n_params += m->final_norm->numel;
    m->weight_bytes += (int64_t)m->final_norm->nbytes;
    if (c->tie_embeddings) {
        /* Hugging Face ties by pointing lm_head at the embedding: a stored lm_head is unused */
        m->lm_head = m->embed;
    } else {
        if (!fl_weights_get(m->weights, "lm_head.weight"))
            return fl_err_set(e, FL_ENOTFOUND,
                              "%s: missing tensor lm_head.weight (expected shape [%d, %d]; "
                              "config.json has tie_word_embeddings false)",
                              m->dir, c->vocab, c->hidden);
        if ((rc = bind_mat(m, &m->lm_head, "lm_head.weight", c->vocab, c->hidden, true, e)))
            return rc;
    }
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers)
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    for (int l = 0; l < c->n_layers; l++)
        if ((rc = bind_layer(m, l, e)))
            return rc;
    m->n_active += m->n_params; /* bind_moe subtracted the experts a token skips */
    char n[64];
    snprintf(n, sizeof n, "model.layers.%d.input_layernorm.weight", c->n_layers);
    if (fl_weights_get(m->weights, n))
        return fl_err_set(e, FL_EFORMAT,
                          "%s: the weights hold %s, but config.json has num_hidden_layers %d",
                          m->dir, n, c->n_layers);
    return check_stray_scales(m, e);
}

static int load_tokenizer(fl_model *m, const char *chat_template, fl_err *e)
{
    char path[4096];
    struct stat sb;
    if (snprintf(path, sizeof path, "%s/tokenizer.json", m->dir) >= (int)sizeof path)
        return fl_err_set(e, FL_EINVAL, "model path too long: %s", m->dir);
    if (stat(path, &sb) && errno == ENOENT)
        return fl_err_set(e, FL_ENOTFOUND, "%s: no tokenizer.json (a model directory needs its "
                          "tokenizer files)", m->dir);
    int rc = fl_tokenizer_load(&m->tok, m->dir, chat_template, e);
    if (rc) {
        fl_err_prefix(e, "%s: tokenizer", m->dir);
        return rc;
    }
    fl_config *c = &m->cfg;
    if (c->mask_token_id < 0) {
        const char *ms = fl_family_mask_string(c->family);
        int id = ms ? fl_tokenizer_find(m->tok, ms) : -1;
        if (id < 0)
            return fl_err_set(e, FL_ENOTFOUND,
                              "%s: config.json has no mask_token_id and tokenizer.json has no %s "
                              "token",
                              m->dir, ms ? ms : "mask");
        if (id >= c->vocab)
            return fl_err_set(e, FL_ERANGE,
                              "%s: mask token %s is id %d, outside the model's vocab_size %d",
                              m->dir, ms, id, c->vocab);
        c->mask_token_id = id;
    }
    const char *es = fl_family_end_string(c->family);
    if (c->n_eos == 0 && es) { /* LLaDA2's configs name no end token: its tokenizer's */
        int id = fl_tokenizer_find(m->tok, es);
        if (id < 0 || id >= c->vocab)
            return fl_err_set(e, FL_ENOTFOUND,
                              "%s: config.json has no eos_token_id and tokenizer.json has no %s "
                              "token inside the vocabulary",
                              m->dir, es);
        c->eos_ids[c->n_eos++] = id;
    }
    return 0;
}

int fl_model_load(fl_model **out, const char *dir, const fl_load_opts *opts, fl_err *e)
{
    static const fl_load_opts defaults = {0};
    if (!opts)
        opts = &defaults;
    *out = NULL;
    fl_model *m = calloc(1, sizeof *m);
    if (!m)
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    int rc = 0;
    m->dir = strdup(dir);
    if (!m->dir)
        rc = fl_err_set(e, FL_ENOMEM, "out of memory");
    if (!rc)
        rc = fl_config_load(&m->cfg, dir, e);
    m->quant = m->cfg.quant;
    if (!rc && !opts->no_weights)
        rc = bind_weights(m, e);
    if (!rc && !opts->no_tokenizer)
        rc = load_tokenizer(m, opts->chat_template, e);
    if (rc) {
        fl_model_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

void fl_model_free(fl_model *m)
{
    if (!m)
        return;
    if (m->tok)
        fl_tokenizer_free(m->tok);
    fl_weights_close(m->weights);
    free(m->scales);
    for (int l = 0; m->layers && l < m->cfg.n_layers; l++)
        free(m->layers[l].experts);
    free(m->layers);
    free(m->dir);
    free(m);
}

/* Folds t (its name, dtype, shape and 3 x 256 sampled bytes) into h; with scales, then its
 * scales when quantized. NULL: h unchanged. */
static uint64_t hash_tensor(const fl_model *m, uint64_t h, const fl_tensor *t, bool scales)
{
    if (!t)
        return h;
    h ^= fl_hash64(t->name, strlen(t->name)) + (uint64_t)t->dtype * 31u;
    h = fl_hash64(&h, sizeof h) ^ fl_hash64(t->shape, sizeof t->shape);
    size_t k = t->nbytes < 256 ? t->nbytes : 256;
    size_t offs[3] = {0, t->nbytes / 2 - k / 2, t->nbytes - k};
    for (int j = 0; j < 3; j++)
        h = h * 0x100000001b3ull ^ fl_hash64((const char *)t->data + offs[j], k);
    return scales ? hash_tensor(m, h, fl_model_scales(m, t), false) : h;
}

/* (model.h) A full hash of gigabytes of weights at every start would cost seconds; the
 * sampled bytes change with any retraining. */
uint64_t fl_model_fingerprint(const fl_model *m)
{
    const fl_config *c = &m->cfg;
    int64_t shape[8] = {c->vocab, c->hidden, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim,
                        c->block_size, c->max_pos};
    uint64_t h = fl_hash64(shape, sizeof shape);
    const fl_tensor *ts[32]; /* 14 role tensors of a layer, then up to 7 scales */
    for (int l = -1; l < c->n_layers; l++) {
        int n = 0;
        if (l < 0) {
            ts[n++] = m->embed;
            ts[n++] = m->final_norm;
            ts[n++] = m->lm_head;
        } else {
            const fl_layer_w *w = &m->layers[l];
            const fl_tensor *lt[] = {w->attn_norm, w->wq, w->wk, w->wv, w->wo, w->bq, w->bk, w->bv,
                                     w->q_norm, w->k_norm, w->mlp_norm, w->w_gate, w->w_up, w->w_down};
            for (size_t i = 0; i < sizeof lt / sizeof lt[0]; i++)
                ts[n++] = lt[i];
        }
        int n_roles = n; /* then each quantized matrix's scales */
        for (int i = 0; i < n_roles; i++)
            if (ts[i] && fl_model_scales(m, ts[i]))
                ts[n++] = fl_model_scales(m, ts[i]);
        for (int i = 0; i < n; i++)
            h = hash_tensor(m, h, ts[i], false);
        if (l < 0)
            continue;
        /* the other layouts' tensors (none in a dense Qwen model: its hash is unchanged) */
        const fl_layer_w *w = &m->layers[l];
        h = hash_tensor(m, h, w->wqkv, true);
        h = hash_tensor(m, h, w->router, true);
        h = hash_tensor(m, h, w->expert_bias, true);
        for (int x = 0; w->experts && x < c->moe.n_experts; x++) {
            h = hash_tensor(m, h, w->experts[x].gate, true);
            h = hash_tensor(m, h, w->experts[x].up, true);
            h = hash_tensor(m, h, w->experts[x].down, true);
        }
        h = hash_tensor(m, h, w->shared.gate, true);
        h = hash_tensor(m, h, w->shared.up, true);
        h = hash_tensor(m, h, w->shared.down, true);
    }
    return h;
}

/* (model.h) The table is filled by bind_scales, only for matrices it checked. */
const fl_tensor *fl_model_scales(const fl_model *m, const fl_tensor *t)
{
    if (!m || !t || !m->weights || !m->scales)
        return NULL;
    size_t i = fl_weights_index(m->weights, t);
    return i == SIZE_MAX ? NULL : m->scales[i];
}
