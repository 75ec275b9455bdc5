/* model.c: binds a Hugging Face directory's tensors to the roles of the Qwen2/Qwen3 layouts,
 * checking presence, dtype and exact shape of each, and loads the tokenizer that resolves
 * the mask token. Nothing is converted or copied: tensors point into the mmapped files. */
#include "model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

static int bind_layer(fl_model *m, int l, fl_err *e)
{
    const fl_config *c = &m->cfg;
    fl_layer_w *L = &m->layers[l];
    int64_t h = c->hidden, hd = c->head_dim, q = (int64_t)c->n_heads * hd,
            kv = (int64_t)c->n_kv_heads * hd, ff = c->intermediate;
    char n[160];
    int rc;
#define NAME(suffix) (snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix), n)
    if ((rc = bind(m, &L->attn_norm, NAME("input_layernorm.weight"), h, -1, e)) ||
        (rc = bind(m, &L->wq, NAME("self_attn.q_proj.weight"), q, h, e)) ||
        (rc = bind(m, &L->wk, NAME("self_attn.k_proj.weight"), kv, h, e)) ||
        (rc = bind(m, &L->wv, NAME("self_attn.v_proj.weight"), kv, h, e)) ||
        (rc = bind(m, &L->wo, NAME("self_attn.o_proj.weight"), h, q, e)) ||
        (rc = bind(m, &L->mlp_norm, NAME("post_attention_layernorm.weight"), h, -1, e)) ||
        (rc = bind(m, &L->w_gate, NAME("mlp.gate_proj.weight"), ff, h, e)) ||
        (rc = bind(m, &L->w_up, NAME("mlp.up_proj.weight"), ff, h, e)) ||
        (rc = bind(m, &L->w_down, NAME("mlp.down_proj.weight"), h, ff, e)))
        return rc;
    if (c->qkv_bias) {
        if ((rc = bind(m, &L->bq, NAME("self_attn.q_proj.bias"), q, -1, e)) ||
            (rc = bind(m, &L->bk, NAME("self_attn.k_proj.bias"), kv, -1, e)) ||
            (rc = bind(m, &L->bv, NAME("self_attn.v_proj.bias"), kv, -1, e)))
            return rc;
    } else {
        const char *why = "config.json has no attention bias (attention_bias false)";
        if ((rc = refuse(m, NAME("self_attn.q_proj.bias"), why, e)) ||
            (rc = refuse(m, NAME("self_attn.k_proj.bias"), why, e)) ||
            (rc = refuse(m, NAME("self_attn.v_proj.bias"), why, e)))
            return rc;
    }
    if (c->qk_norm) {
        if ((rc = bind(m, &L->q_norm, NAME("self_attn.q_norm.weight"), hd, -1, e)) ||
            (rc = bind(m, &L->k_norm, NAME("self_attn.k_norm.weight"), hd, -1, e)))
            return rc;
    } else {
        const char *why = "the Qwen2 layout has no q/k norm";
        if ((rc = refuse(m, NAME("self_attn.q_norm.weight"), why, e)) ||
            (rc = refuse(m, NAME("self_attn.k_norm.weight"), why, e)))
            return rc;
    }
    if ((rc = refuse(m, NAME("self_attn.o_proj.bias"), "fogline has no o_proj bias", e)))
        return rc;
#undef NAME
    const fl_tensor *all[] = {L->attn_norm, L->wq, L->wk,     L->wv,   L->wo,     L->bq,
                              L->bk,        L->bv, L->q_norm, L->k_norm, L->mlp_norm, L->w_gate,
                              L->w_up,      L->w_down};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i])
            m->n_params += all[i]->numel;
    return 0;
}

static int bind_weights(fl_model *m, fl_err *e)
{
    const fl_config *c = &m->cfg;
    int rc = fl_weights_open(&m->weights, m->dir, e);
    if (rc)
        return rc;
    if ((rc = bind(m, &m->embed, "model.embed_tokens.weight", c->vocab, c->hidden, e)) ||
        (rc = bind(m, &m->final_norm, "model.norm.weight", c->hidden, -1, e)))
        return rc;
    m->n_params = m->embed->numel + m->final_norm->numel;
    if (c->tie_embeddings) {
        /* Hugging Face ties by pointing lm_head at the embedding: a stored lm_head is unused */
        m->lm_head = m->embed;
    } else {
        if (!fl_weights_get(m->weights, "lm_head.weight"))
            return fl_err_set(e, FL_ENOTFOUND,
                              "%s: missing tensor lm_head.weight (expected shape [%d, %d]; "
                              "config.json has tie_word_embeddings false)",
                              m->dir, c->vocab, c->hidden);
        if ((rc = bind(m, &m->lm_head, "lm_head.weight", c->vocab, c->hidden, e)))
            return rc;
        m->n_params += m->lm_head->numel;
    }
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers)
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    for (int l = 0; l < c->n_layers; l++)
        if ((rc = bind_layer(m, l, e)))
            return rc;
    char n[64];
    snprintf(n, sizeof n, "model.layers.%d.input_layernorm.weight", c->n_layers);
    if (fl_weights_get(m->weights, n))
        return fl_err_set(e, FL_EFORMAT,
                          "%s: the weights hold %s, but config.json has num_hidden_layers %d",
                          m->dir, n, c->n_layers);
    return 0;
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
    free(m->layers);
    free(m->dir);
    free(m);
}

/* (model.h) A full hash of gigabytes of weights at every start would cost seconds; the
 * sampled bytes change with any retraining. */
uint64_t fl_model_fingerprint(const fl_model *m)
{
    const fl_config *c = &m->cfg;
    int64_t shape[8] = {c->vocab, c->hidden, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim,
                        c->block_size, c->max_pos};
    uint64_t h = fl_hash64(shape, sizeof shape);
    const fl_tensor *ts[16];
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
        for (int i = 0; i < n; i++) {
            const fl_tensor *t = ts[i];
            if (!t)
                continue;
            h ^= fl_hash64(t->name, strlen(t->name)) + (uint64_t)t->dtype * 31u;
            h = fl_hash64(&h, sizeof h) ^ fl_hash64(t->shape, sizeof t->shape);
            size_t k = t->nbytes < 256 ? t->nbytes : 256;
            size_t offs[3] = {0, t->nbytes / 2 - k / 2, t->nbytes - k};
            for (int j = 0; j < 3; j++)
                h = h * 0x100000001b3ull ^ fl_hash64((const char *)t->data + offs[j], k);
        }
    }
    return h;
}

const fl_tensor *fl_model_scales(const fl_model *m, const fl_tensor *t)
{
    if (!m || !t || !m->weights || (t->dtype != FL_DT_I8 && t->dtype != FL_DT_U8))
        return NULL;
    char name[512];
    if ((size_t)snprintf(name, sizeof name, "%s_scale", t->name) >= sizeof name)
        return NULL;
    return fl_weights_get(m->weights, name);
}
