/* fuzz_qmodel.c: a whole model directory through fl_model_load, quantized ones first of all
 * (engine/qformat.h, docs/models.md "Quantized directories"). Byte 0 of the input picks
 * config.json: the tiny model of tests/unit/test_loader_kit.h (hidden 32, 2 layers,
 * intermediate 64, vocab 48) as q8 or q4, tied or untied, or without quantization_config; the
 * rest is model.safetensors. Seeds: qmodel_seed.c writes the tiny model for each config.
 * Checks: an error has a message; an accepted model binds every role, a matrix has scales
 * exactly when it is I8/U8, in the dtype its directory's format gives, with scales (n, k/32)
 * F16 whose every value is finite, rows that read as finite f32 through fl_matrix_rows_f32
 * and equal the qformat dequantizer's; n_params counts n*k per matrix, n_quantized the
 * quantized ones, weight_bytes the bound tensors and their scales; the fingerprint is
 * computable and repeatable. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "model.h"
#include "qformat.h"
#include "test_loader_kit.h"

static char dir[4096], cfg_path[4200], st_path[4200];

/* byte 0 % 5: q8, q4, q8 tied, q4 tied, float (no quantization_config) */
static const char *config_for(uint8_t b)
{
    static const char *const fmt[5] = {"q8", "q4", "q8", "q4", NULL};
    return tk_qtiny_config(fmt[b % 5], 64, b % 5 == 2 || b % 5 == 3);
}

static void cleanup(void)
{
    unlink(cfg_path);
    unlink(st_path);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/fl_fuzz_qmodel.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("fuzz_qmodel: mkdtemp");
        exit(2);
    }
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
    snprintf(st_path, sizeof st_path, "%s/model.safetensors", dir);
    atexit(cleanup);
    return 0;
}

static void check_matrix(const fl_model *m, const fl_tensor *t, bool head, int64_t n, int64_t k,
                         int64_t *params, int64_t *bytes, int *quantized)
{
    FZ_CHECK(t != NULL, "a matrix role is unbound");
    const fl_tensor *s = fl_model_scales(m, t);
    bool q = t->dtype == FL_DT_I8 || t->dtype == FL_DT_U8;
    FZ_CHECK(q == (s != NULL), "%s: dtype %s, scales %s", t->name, fl_dtype_name(t->dtype),
             s ? s->name : "none");
    FZ_CHECK(!q || m->quant != FL_QUANT_NONE, "%s: quantized without quantization_config",
             t->name);
    *params += n * k;
    *bytes += (int64_t)t->nbytes;
    FZ_CHECK(t->ndim == 2 && t->shape[0] == n &&
                 t->shape[1] == (t->dtype == FL_DT_U8 ? k / 2 : k),
             "%s: shape [%lld, %lld] for (%lld, %lld)", t->name, (long long)t->shape[0],
             (long long)t->shape[1], (long long)n, (long long)k);
    size_t rows = (size_t)n, cols = (size_t)k, G = cols / FL_QG;
    float *x = malloc(rows * cols * sizeof *x + 1), *y = NULL;
    fl_err e = {0};
    if (q) {
        (*quantized)++;
        *bytes += (int64_t)s->nbytes;
        fl_dtype want = head || m->quant == FL_QUANT_Q8 ? FL_DT_I8 : FL_DT_U8;
        FZ_CHECK(t->dtype == want, "%s: %s in a %s directory", t->name, fl_dtype_name(t->dtype),
                 fl_quant_name(m->quant));
        FZ_CHECK(cols % FL_QG == 0 && s->dtype == FL_DT_F16 && s->ndim == 2 &&
                     s->shape[0] == n && s->shape[1] == (int64_t)G && (uintptr_t)s->data % 2 == 0,
                 "%s: scales %s", t->name, s->name);
        const uint16_t *d = s->data;
        for (size_t i = 0; i < rows * G; i++)
            FZ_CHECK(isfinite(fl_f16_to_f32(d[i])), "%s: scale %zu is not finite", s->name, i);
        /* the reader against the dequantizer, whole matrix at once */
        y = malloc(rows * cols * sizeof *y + 1);
        if (t->dtype == FL_DT_I8)
            fl_q8_dequantize(y, t->data, d, (int)rows, (int)cols);
        else
            fl_q4_dequantize(y, t->data, d, (int)rows, (int)cols);
    }
    int rc = fl_matrix_rows_f32(x, t, s, 0, rows, cols, &e);
    fz_check_err(rc, &e, "fl_matrix_rows_f32");
    FZ_CHECK(rc == 0, "%s: a bound matrix does not read: %s", t->name, e.msg);
    for (size_t i = 0; q && i < rows * cols; i++)
        FZ_CHECK(isfinite(x[i]) && x[i] == y[i], "%s: weight %zu reads %g, dequantizes to %g",
                 t->name, i, (double)x[i], (double)y[i]);
    free(x);
    free(y);
}

static void check_vector(const fl_model *m, const fl_tensor *t, int64_t n, int64_t *params,
                         int64_t *bytes)
{
    if (!t)
        return;
    FZ_CHECK(t->dtype == FL_DT_F32 || t->dtype == FL_DT_F16 || t->dtype == FL_DT_BF16,
             "%s: a norm or bias of dtype %s", t->name, fl_dtype_name(t->dtype));
    FZ_CHECK(t->numel == n && !fl_model_scales(m, t), "%s: %lld elements", t->name,
             (long long)t->numel);
    *params += n;
    *bytes += (int64_t)t->nbytes;
}

static void check_model(const fl_model *m)
{
    const fl_config *c = &m->cfg;
    int64_t h = c->hidden, hd = c->head_dim, qd = (int64_t)c->n_heads * hd,
            kd = (int64_t)c->n_kv_heads * hd, ff = c->intermediate, params = 0, bytes = 0;
    int quantized = 0;
    FZ_CHECK(m->quant == c->quant, "model quant %d, config %d", (int)m->quant, (int)c->quant);
    check_matrix(m, m->embed, true, c->vocab, h, &params, &bytes, &quantized);
    if (m->lm_head != m->embed)
        check_matrix(m, m->lm_head, true, c->vocab, h, &params, &bytes, &quantized);
    check_vector(m, m->final_norm, h, &params, &bytes);
    for (int l = 0; l < c->n_layers; l++) {
        const fl_layer_w *L = &m->layers[l];
        check_matrix(m, L->wq, false, qd, h, &params, &bytes, &quantized);
        check_matrix(m, L->wk, false, kd, h, &params, &bytes, &quantized);
        check_matrix(m, L->wv, false, kd, h, &params, &bytes, &quantized);
        check_matrix(m, L->wo, false, h, qd, &params, &bytes, &quantized);
        check_matrix(m, L->w_gate, false, ff, h, &params, &bytes, &quantized);
        check_matrix(m, L->w_up, false, ff, h, &params, &bytes, &quantized);
        check_matrix(m, L->w_down, false, h, ff, &params, &bytes, &quantized);
        check_vector(m, L->attn_norm, h, &params, &bytes);
        check_vector(m, L->mlp_norm, h, &params, &bytes);
        check_vector(m, L->q_norm, hd, &params, &bytes);
        check_vector(m, L->k_norm, hd, &params, &bytes);
        check_vector(m, L->bq, qd, &params, &bytes);
        check_vector(m, L->bk, kd, &params, &bytes);
        check_vector(m, L->bv, kd, &params, &bytes);
    }
    FZ_CHECK(params == m->n_params, "n_params %lld, roles add up to %lld",
             (long long)m->n_params, (long long)params);
    FZ_CHECK(bytes == m->weight_bytes && bytes <= (int64_t)fl_weights_total_bytes(m->weights),
             "weight_bytes %lld, roles add up to %lld", (long long)m->weight_bytes,
             (long long)bytes);
    FZ_CHECK(quantized == m->n_quantized, "n_quantized %d, counted %d", m->n_quantized, quantized);
    FZ_CHECK(fl_model_fingerprint(m) == fl_model_fingerprint(m), "fingerprint not repeatable");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *cfg = config_for(data[0]);
    FILE *f = fopen(cfg_path, "wb");
    FZ_CHECK(f && fwrite(cfg, 1, strlen(cfg), f) == strlen(cfg) && !fclose(f), "cannot write %s",
             cfg_path);
    f = fopen(st_path, "wb");
    FZ_CHECK(f && fwrite(data + 1, 1, size - 1, f) == size - 1 && !fclose(f), "cannot write %s",
             st_path);
    fl_model *m = NULL;
    fl_err e = {0};
    fl_load_opts o = {.no_tokenizer = true};
    int rc = fl_model_load(&m, dir, &o, &e);
    fz_check_err(rc, &e, "fl_model_load");
    FZ_CHECK(rc ? m == NULL : m != NULL, "rc %d with model %p", rc, (void *)m);
    if (m)
        check_model(m);
    fl_model_free(m);
    return 0;
}
