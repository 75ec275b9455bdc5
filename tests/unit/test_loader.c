/* test_loader.c: loads the random models that the Python reference wrote (tests/loader.cmake
 * fixture: both layouts, F32/BF16/F16, sharded, tied and untied) and compares shapes, dtypes,
 * counts and element values with what Python read back from the same files (expect.json). */
#include <jansson.h>

#include "check.h"
#include "model.h"
#include "test_loader_kit.h"

static const char *models[] = {"q3_f32",     "q3_bf16_tie", "q3_f16_sh3",
                               "q2_f32_tie", "q2_bf16_sh3", "q2_f16_tie_sh3"};

static float elem(const fl_tensor *t, int64_t i)
{
    float v = 0;
    size_t es = fl_dtype_size(t->dtype);
    fl_to_f32(&v, (const unsigned char *)t->data + (size_t)i * es, t->dtype, 1);
    return v;
}

/* The role pointers are the very tensors of the file, under the Hugging Face names. */
static void check_roles(const fl_model *m, const char *name)
{
    const fl_config *c = &m->cfg;
    const fl_weights *w = m->weights;
    CHECK(m->embed == fl_weights_get(w, "model.embed_tokens.weight"), "%s embed", name);
    CHECK(m->final_norm == fl_weights_get(w, "model.norm.weight"), "%s norm", name);
    if (c->tie_embeddings)
        CHECK(m->lm_head == m->embed, "%s: tied lm_head is the embedding", name);
    else
        CHECK(m->lm_head && m->lm_head == fl_weights_get(w, "lm_head.weight") &&
                  m->lm_head != m->embed,
              "%s: untied lm_head", name);
    char n[128];
    for (int l = 0; l < c->n_layers; l++) {
        const fl_layer_w *L = &m->layers[l];
#define ROLE(field, suffix)                                                         \
    do {                                                                            \
        snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix);                     \
        CHECK(L->field && L->field == fl_weights_get(w, n), "%s: role %s", name, n); \
    } while (0)
        ROLE(attn_norm, "input_layernorm.weight");
        ROLE(wq, "self_attn.q_proj.weight");
        ROLE(wk, "self_attn.k_proj.weight");
        ROLE(wv, "self_attn.v_proj.weight");
        ROLE(wo, "self_attn.o_proj.weight");
        ROLE(mlp_norm, "post_attention_layernorm.weight");
        ROLE(w_gate, "mlp.gate_proj.weight");
        ROLE(w_up, "mlp.up_proj.weight");
        ROLE(w_down, "mlp.down_proj.weight");
        if (c->qkv_bias) {
            ROLE(bq, "self_attn.q_proj.bias");
            ROLE(bk, "self_attn.k_proj.bias");
            ROLE(bv, "self_attn.v_proj.bias");
            CHECK(!L->q_norm && !L->k_norm, "%s: qwen2 has no q/k norm", name);
            CHECK(L->bq->shape[0] == (int64_t)c->n_heads * c->head_dim, "%s bq shape", name);
        } else {
            ROLE(q_norm, "self_attn.q_norm.weight");
            ROLE(k_norm, "self_attn.k_norm.weight");
            CHECK(!L->bq && !L->bk && !L->bv, "%s: qwen3 has no bias", name);
            CHECK(L->q_norm->shape[0] == c->head_dim, "%s q_norm shape", name);
        }
#undef ROLE
        CHECK(L->wk->shape[0] == (int64_t)c->n_kv_heads * c->head_dim && L->wk->shape[1] == c->hidden,
              "%s wk shape", name);
        CHECK(L->w_down->shape[0] == c->hidden && L->w_down->shape[1] == c->intermediate,
              "%s w_down shape", name);
    }
}

static void check_model(const char *name)
{
    char dir[TK_PATH], p[TK_PATH];
    tk_path(dir, tk_models_dir(), name);
    json_error_t jerr;
    json_t *exp = json_load_file(tk_path(p, dir, "expect.json"), 0, &jerr);
    CHECK(exp != NULL, "%s: expect.json: %s (did the fixture run?)", name, jerr.text);
    if (!exp)
        return;
    fl_load_opts o = {.no_tokenizer = true};
    fl_model *m = NULL;
    fl_err e = {0};
    int rc = fl_model_load(&m, dir, &o, &e);
    CHECK(rc == 0 && m, "%s: load: %s", name, e.msg);
    if (rc) {
        json_decref(exp);
        return;
    }
    const char *layout = json_string_value(json_object_get(exp, "layout"));
    bool qwen2 = !strcmp(layout, "qwen2");
    CHECK(m->cfg.family == (qwen2 ? FL_FAMILY_FASTDLLM : FL_FAMILY_SDAR), "%s family", name);
    CHECK(m->cfg.qkv_bias == qwen2 && m->cfg.qk_norm == !qwen2, "%s layout flags", name);
    CHECK(m->cfg.tie_embeddings == json_is_true(json_object_get(exp, "tie")), "%s tie", name);
    CHECK(m->tok == NULL, "%s: no tokenizer asked", name);
    /* make_random_model writes no lm_head when tied, so every stored tensor is a parameter */
    json_int_t np = json_integer_value(json_object_get(exp, "n_params"));
    CHECK(m->n_params == np, "%s: n_params %lld, python %lld", name, (long long)m->n_params,
          (long long)np);
    CHECK(fl_weights_count(m->weights) ==
              (size_t)json_integer_value(json_object_get(exp, "n_tensors")),
          "%s: tensor count %zu", name, fl_weights_count(m->weights));
    CHECK(fl_weights_total_bytes(m->weights) ==
              (size_t)json_integer_value(json_object_get(exp, "bytes")),
          "%s: bytes %zu", name, fl_weights_total_bytes(m->weights));
    const char *tn;
    json_t *tv;
    int64_t numel_sum = 0;
    json_object_foreach(json_object_get(exp, "tensors"), tn, tv)
    {
        const fl_tensor *t = fl_weights_get(m->weights, tn);
        CHECK(t != NULL, "%s: tensor %s missing", name, tn);
        if (!t)
            continue;
        numel_sum += t->numel;
        CHECK(!strcmp(fl_dtype_name(t->dtype), json_string_value(json_object_get(tv, "dtype"))),
              "%s %s dtype %s", name, tn, fl_dtype_name(t->dtype));
        json_t *sh = json_object_get(tv, "shape");
        CHECK(t->ndim == (int)json_array_size(sh), "%s %s ndim %d", name, tn, t->ndim);
        for (int d = 0; d < t->ndim && d < (int)json_array_size(sh); d++)
            CHECK(t->shape[d] == json_integer_value(json_array_get(sh, (size_t)d)),
                  "%s %s shape[%d] %lld", name, tn, d, (long long)t->shape[d]);
        CHECK(t->nbytes == (size_t)t->numel * fl_dtype_size(t->dtype), "%s %s nbytes", name, tn);
        size_t k;
        json_t *s;
        json_array_foreach(json_object_get(tv, "samples"), k, s)
        {
            int64_t i = json_integer_value(json_array_get(s, 0));
            double want = json_real_value(json_array_get(s, 1));
            float got = elem(t, i);
            CHECK((double)got == want, "%s %s[%lld] = %.9g, python %.9g", name, tn, (long long)i,
                  (double)got, want);
        }
    }
    CHECK(numel_sum == m->n_params, "%s: n_params %lld vs sum of numels %lld", name,
          (long long)m->n_params, (long long)numel_sum);
    check_roles(m, name);
    fl_model_free(m);
    json_decref(exp);
}

/* Tensors point into the mapping: two tensors of one file sit exactly as far apart as their
 * header offsets say (nothing was copied or repacked). */
static void test_zero_copy(void)
{
    char p[TK_PATH], dir[TK_PATH];
    tk_path(dir, tk_models_dir(), "q3_f32");
    tk_path(p, dir, "model.safetensors");
    tk_st s;
    CHECK(tk_st_read(&s, p) == 0, "read %s", p);
    fl_weights *w = NULL;
    fl_err e = {0};
    CHECK(fl_weights_open_file(&w, p, &e) == 0, "open_file: %s", e.msg);
    if (w && s.header) {
        const fl_tensor *a = fl_weights_at(w, 0), *b = fl_weights_at(w, fl_weights_count(w) - 1);
        json_int_t oa = json_integer_value(
            json_array_get(json_object_get(json_object_get(s.header, a->name), "data_offsets"), 0));
        json_int_t ob = json_integer_value(
            json_array_get(json_object_get(json_object_get(s.header, b->name), "data_offsets"), 0));
        CHECK((const char *)b->data - (const char *)a->data == ob - oa, "offsets %lld %lld",
              (long long)oa, (long long)ob);
        CHECK(!memcmp(b->data, s.data + ob, b->nbytes), "bytes of %s", b->name);
        /* sorted by name, and the lookup finds every one */
        for (size_t i = 0; i < fl_weights_count(w); i++) {
            const fl_tensor *t = fl_weights_at(w, i);
            CHECK(fl_weights_get(w, t->name) == t, "lookup %s", t->name);
            if (i)
                CHECK(strcmp(fl_weights_at(w, i - 1)->name, t->name) < 0, "order at %zu", i);
        }
        CHECK(fl_weights_get(w, "no.such.tensor") == NULL && fl_weights_at(w, 9999) == NULL,
              "absent");
    }
    fl_weights_close(w);
    tk_st_free(&s);
}

/* no_weights: config (and tokenizer) only, as `fogline tokenize` loads */
static void test_no_weights(void)
{
    char dir[TK_PATH];
    tk_path(dir, tk_models_dir(), "q2_bf16_sh3");
    fl_load_opts o = {.no_tokenizer = true, .no_weights = true};
    fl_model *m = NULL;
    fl_err e = {0};
    CHECK(fl_model_load(&m, dir, &o, &e) == 0, "no_weights: %s", e.msg);
    if (m) {
        CHECK(!m->weights && !m->layers && !m->embed && m->n_params == 0, "nothing bound");
        CHECK(m->cfg.family == FL_FAMILY_FASTDLLM && m->cfg.block_size == 32, "config read");
        CHECK(!strcmp(m->dir, dir), "dir kept");
    }
    fl_model_free(m);
    fl_model_free(NULL);
}

int main(void)
{
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        check_model(models[i]);
    test_zero_copy();
    test_no_weights();
    return check_summary("test_loader");
}
