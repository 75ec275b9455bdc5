/* test_loader_quant.c: quantized model directories (config.json quantization_config, I8/U8
 * matrices with F16 scales: engine/qformat.h, docs/models.md) through the loader. Good ones,
 * written here with the engine's quantizers (test_loader_kit.h's tiny model), load with every
 * matrix reading back as the quantizer's output; every bad one, made by breaking one thing,
 * is refused with its exact one-line message, from fl_model_load and from `fogline info`. */
#include <jansson.h>
#include <stdarg.h>

#include "check.h"
#include "model.h"
#include "test_loader_kit.h"

static char root[TK_PATH]; /* this run's scratch directory */

/* A fresh directory holding the quantized tiny model; returns its path (static, overwritten
 * by the next call). */
static const char *make_model(int quant, int ff, bool tie)
{
    static char dir[TK_PATH];
    static int n;
    snprintf(dir, sizeof dir, "%.3000s/m%d-q%d-ff%d%s", root, n++, quant, ff, tie ? "-tie" : "");
    mkdir(dir, 0755);
    CHECK(tk_qtiny_model(dir, quant, ff, tie) == 0, "write %s", dir);
    return dir;
}

static int load(const char *dir, fl_model **out, fl_err *e)
{
    fl_load_opts o = {.no_tokenizer = true};
    fl_model *m = NULL;
    memset(e, 0, sizeof *e);
    int rc = fl_model_load(&m, dir, &o, e);
    CHECK((rc == 0) == (m != NULL), "model pointer follows rc");
    CHECK(rc == 0 || (e->code == rc && e->msg[0] && !strchr(e->msg, '\n')),
          "error carries code and a one-line message: %d %s", rc, e->msg);
    if (out)
        *out = m;
    else
        fl_model_free(m);
    return rc;
}

/* dir must be refused with code and exactly the message fmt... makes; with via_info, `fogline
 * info` must print it as its one line on stderr and exit 1. */
static void expect(const char *dir, int code, bool via_info, const char *fmt, ...) FL_PRINTF(4, 5);
static void expect(const char *dir, int code, bool via_info, const char *fmt, ...)
{
    char want[FL_ERR_MSG];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(want, sizeof want, fmt, ap);
    va_end(ap);
    fl_err e;
    int rc = load(dir, NULL, &e);
    CHECK(rc == code && !strcmp(e.msg, want), "rc %d (want %d)\n  got  '%s'\n  want '%s'", rc,
          code, e.msg, want);
    if (!via_info)
        return;
    const char *args[] = {"info", "--model", dir, NULL};
    tk_run_out r = tk_run(root, args);
    char line[FL_ERR_MSG + 32];
    snprintf(line, sizeof line, "fogline info: %s\n", want);
    CHECK(r.status == 1 && !strcmp(r.err, line) && !r.out[0],
          "info: exit %d\n  stderr '%s'\n  want   '%s'", r.status, r.err, line);
    tk_run_free(&r);
}

/* ---- editing model.safetensors */

static void st_load(tk_st *s, const char *dir)
{
    char p[TK_PATH];
    CHECK(tk_st_read(s, tk_path(p, dir, "model.safetensors")) == 0, "read %s", p);
}

static void st_save(tk_st *s, const char *dir)
{
    char p[TK_PATH];
    CHECK(tk_st_write(s, tk_path(p, dir, "model.safetensors")) == 0, "write %s", p);
    tk_st_free(s);
}

/* Replaces (or adds) tensor name: dtype, shape (d0, d1; d1 < 0: a vector), zero-filled data
 * of the size they imply (the old bytes stay, unreferenced). */
static void replace(const char *dir, const char *name, const char *dtype, int64_t d0, int64_t d1)
{
    tk_st s;
    st_load(&s, dir);
    size_t esz = !strcmp(dtype, "F32") || !strcmp(dtype, "I32") ? 4
                 : !strcmp(dtype, "I8") || !strcmp(dtype, "U8") ? 1
                                                                 : 2;
    size_t n = (size_t)(d1 < 0 ? d0 : d0 * d1) * esz;
    void *z = calloc(1, n + 1);
    int64_t sh[2] = {d0, d1};
    json_object_del(s.header, name);
    tk_st_add(&s, name, dtype, d1 < 0 ? 1 : 2, sh, z, n);
    free(z);
    st_save(&s, dir);
}

static void drop(const char *dir, const char *name)
{
    tk_st s;
    st_load(&s, dir);
    CHECK(json_object_del(s.header, name) == 0, "no tensor %s to drop", name);
    st_save(&s, dir);
}

/* Sets F16 element i of tensor name to the bit pattern h. */
static void set_f16(const char *dir, const char *name, size_t i, uint16_t h)
{
    tk_st s;
    st_load(&s, dir);
    json_t *t = json_object_get(s.header, name);
    size_t a = (size_t)json_integer_value(json_array_get(json_object_get(t, "data_offsets"), 0));
    CHECK(t && a + 2 * i + 2 <= s.dlen, "tensor %s element %zu", name, i);
    if (t && a + 2 * i + 2 <= s.dlen) {
        s.data[a + 2 * i] = (unsigned char)(h & 0xff);
        s.data[a + 2 * i + 1] = (unsigned char)(h >> 8);
    }
    st_save(&s, dir);
}

/* Sets config.json's key to value (stolen); NULL value removes the key. */
static void set_config(const char *dir, const char *key, json_t *value)
{
    char p[TK_PATH];
    json_t *j = json_load_file(tk_path(p, dir, "config.json"), 0, NULL);
    CHECK(j != NULL, "read %s", p);
    if (value)
        json_object_set_new(j, key, value);
    else
        json_object_del(j, key);
    CHECK(json_dump_file(j, p, 0) == 0, "write %s", p);
    json_decref(j);
}

/* ---- good directories */

static int64_t logical(const fl_tensor *t) { return t->shape[0] * t->shape[1] * (t->dtype == FL_DT_U8 ? 2 : 1); }

/* Each matrix of q (quantized) against the same matrix of f (the float model the same seeds
 * make): quants and scales are the quantizer's output for f's rows, and fl_matrix_rows_f32
 * gives their dequantization exactly. */
static void compare_matrix(const fl_model *q, const fl_model *f, const fl_tensor *qt,
                           const fl_tensor *ft, int want_quant)
{
    CHECK(!strcmp(qt->name, ft->name), "%s vs %s", qt->name, ft->name);
    size_t n = (size_t)ft->shape[0], k = (size_t)ft->shape[1], G = k / FL_QG;
    const fl_tensor *s = fl_model_scales(q, qt);
    CHECK(!fl_model_scales(f, ft), "%s: a float model has no scales", ft->name);
    if (!want_quant) {
        CHECK(qt->dtype == FL_DT_F32 && !s && qt->nbytes == ft->nbytes &&
                  !memcmp(qt->data, ft->data, ft->nbytes),
              "%s stays F32, unchanged", qt->name);
        return;
    }
    CHECK(qt->dtype == (want_quant == 8 ? FL_DT_I8 : FL_DT_U8), "%s dtype %s", qt->name,
          fl_dtype_name(qt->dtype));
    CHECK(s && s->dtype == FL_DT_F16 && s->shape[0] == (int64_t)n && s->shape[1] == (int64_t)G,
          "%s scales", qt->name);
    CHECK(logical(qt) == ft->numel, "%s: %lld logical weights", qt->name, (long long)logical(qt));
    if (!s || qt->dtype != (want_quant == 8 ? FL_DT_I8 : FL_DT_U8))
        return;
    float *x = malloc(n * k * sizeof *x), *ref = malloc(n * k * sizeof *ref),
          *got = malloc(n * k * sizeof *got);
    size_t qb = want_quant == 8 ? n * k : n * k / 2;
    unsigned char *qq = malloc(qb);
    uint16_t *d = malloc(n * G * sizeof *d);
    fl_err e = {0};
    CHECK(fl_matrix_rows_f32(x, ft, NULL, 0, n, k, &e) == 0, "%s", e.msg);
    int rc = want_quant == 8 ? fl_q8_quantize((int8_t *)qq, d, x, (int)n, (int)k, &e)
                             : fl_q4_quantize(qq, d, x, (int)n, (int)k, &e);
    CHECK(rc == 0, "%s", e.msg);
    CHECK(qt->nbytes == qb && !memcmp(qt->data, qq, qb), "%s: quants", qt->name);
    CHECK(s->nbytes == n * G * 2 && !memcmp(s->data, d, n * G * 2), "%s: scales", qt->name);
    if (want_quant == 8)
        fl_q8_dequantize(ref, (int8_t *)qq, d, (int)n, (int)k);
    else
        fl_q4_dequantize(ref, qq, d, (int)n, (int)k);
    /* rows in two pieces: a range of rows is two offsets into both planes */
    CHECK(fl_matrix_rows_f32(got, qt, s, 0, n / 2, k, &e) == 0 &&
              fl_matrix_rows_f32(got + n / 2 * k, qt, s, n / 2, n - n / 2, k, &e) == 0,
          "%s: %s", qt->name, e.msg);
    CHECK(!memcmp(got, ref, n * k * sizeof *got), "%s: dequantized rows", qt->name);
    free(x);
    free(ref);
    free(got);
    free(qq);
    free(d);
}

static void test_good(void)
{
    for (int quant = 8; quant >= 4; quant -= 4)
        for (int ff = 64; ff >= 48; ff -= 16)
            for (int tie = 0; tie < 2; tie++) {
                fl_model *q = NULL, *f = NULL;
                fl_err e;
                CHECK(load(make_model(quant, ff, tie), &q, &e) == 0, "q%d ff%d tie%d: %s", quant,
                      ff, tie, e.msg);
                CHECK(load(make_model(0, ff, tie), &f, &e) == 0, "float ff%d: %s", ff, e.msg);
                if (!q || !f) {
                    fl_model_free(q);
                    fl_model_free(f);
                    continue;
                }
                int mats = 7 * TQ_L + 1 + !tie, floats = ff % 32 ? TQ_L : 0;
                CHECK(q->quant == (quant == 8 ? FL_QUANT_Q8 : FL_QUANT_Q4) &&
                          q->cfg.quant == q->quant && f->quant == FL_QUANT_NONE,
                      "quant %d: %s", quant, fl_quant_name(q->quant));
                CHECK(q->n_matrices == mats && q->n_quantized == mats - floats &&
                          f->n_matrices == mats && f->n_quantized == 0,
                      "q%d ff%d tie%d: %d matrices, %d quantized", quant, ff, tie, q->n_matrices,
                      q->n_quantized);
                CHECK(q->n_params == f->n_params, "n_params %lld, float model %lld",
                      (long long)q->n_params, (long long)f->n_params);
                CHECK(q->weight_bytes == (int64_t)fl_weights_total_bytes(q->weights) &&
                          f->weight_bytes == (int64_t)fl_weights_total_bytes(f->weights),
                      "weight bytes %lld of %zu", (long long)q->weight_bytes,
                      fl_weights_total_bytes(q->weights));
                compare_matrix(q, f, q->embed, f->embed, 8);
                if (!tie)
                    compare_matrix(q, f, q->lm_head, f->lm_head, 8);
                CHECK(tie == (q->lm_head == q->embed), "tied lm_head is the embedding");
                for (int l = 0; l < TQ_L; l++) {
                    const fl_layer_w *a = &q->layers[l], *b = &f->layers[l];
                    const fl_tensor *qa[] = {a->wq, a->wk, a->wv, a->wo, a->w_gate, a->w_up, a->w_down};
                    const fl_tensor *fb[] = {b->wq, b->wk, b->wv, b->wo, b->w_gate, b->w_up, b->w_down};
                    for (int i = 0; i < 7; i++)
                        compare_matrix(q, f, qa[i], fb[i], i == 6 && ff % 32 ? 0 : quant);
                    CHECK(!fl_model_scales(q, a->attn_norm) && !fl_model_scales(q, a->q_norm),
                          "norms have no scales");
                    const fl_tensor *sc = fl_model_scales(q, a->wq);
                    CHECK(sc && !fl_model_scales(q, sc), "a scale tensor has no scales");
                }
                CHECK(!fl_model_scales(q, NULL) && !fl_model_scales(NULL, q->embed) &&
                          !fl_model_scales(q, f->embed),
                      "NULL, or a tensor of another model: no scales");
                CHECK(fl_model_fingerprint(q) != fl_model_fingerprint(f), "fingerprints differ");
                fl_model_free(q);
                fl_model_free(f);
            }

    /* the fingerprint covers the scales: change one (to another finite value), nothing else */
    fl_model *a = NULL, *b = NULL;
    fl_err e;
    const char *d = make_model(4, 64, false);
    load(d, &a, &e);
    uint64_t fa = a ? fl_model_fingerprint(a) : 0;
    fl_model_free(a);
    set_f16(d, "model.layers.1.mlp.up_proj.weight_scale", 0, 0x3c00);
    CHECK(load(d, &b, &e) == 0, "%s", e.msg);
    CHECK(b && fl_model_fingerprint(b) != fa, "a changed scale changes the fingerprint");
    fl_model_free(b);

    /* q8 and q4 of the same weights are different models */
    fl_model *m8 = NULL, *m4 = NULL;
    load(make_model(8, 64, false), &m8, &e);
    load(make_model(4, 64, false), &m4, &e);
    CHECK(m8 && m4 && fl_model_fingerprint(m8) != fl_model_fingerprint(m4), "q8 vs q4 fingerprint");
    fl_model_free(m8);
    fl_model_free(m4);
}

/* ---- bad directories, each error's exact text */

static void test_config(void)
{
    static const struct {
        const char *value; /* quantization_config, JSON */
        int code;
        const char *msg;   /* after "DIR: config.json: quantization_config" */
    } cases[] = {
        {"{\"quant_method\": \"fogline\", \"format\": \"q8\", \"group_size\": 64}", FL_EUNSUPPORTED,
         ".group_size 64 is not 32 (fogline's groups are 32 weights)"},
        {"{\"quant_method\": \"fogline\", \"format\": \"q8\", \"group_size\": \"32\"}", FL_EFORMAT,
         ".group_size must be an integer"},
        {"{\"quant_method\": \"fogline\", \"format\": \"q8\"}", FL_EFORMAT,
         ".group_size must be an integer"},
        {"{\"quant_method\": \"fogline\", \"format\": \"q3\", \"group_size\": 32}", FL_EUNSUPPORTED,
         ".format 'q3' is not q8 or q4"},
        {"{\"quant_method\": \"fogline\", \"format\": 8, \"group_size\": 32}", FL_EFORMAT,
         ".format must be a string"},
        {"{\"quant_method\": \"gptq\", \"bits\": 4, \"group_size\": 128}", FL_EUNSUPPORTED,
         ".quant_method 'gptq' is not supported (fogline reads its own, \"fogline\")"},
        {"{\"format\": \"q8\", \"group_size\": 32}", FL_EFORMAT, ".quant_method must be a string"},
        {"{\"quant_method\": \"fogline\", \"format\": \"q8\", \"group_size\": 32, \"sym\": false}",
         FL_EFORMAT, ".sym is not a known key (quant_method, format, group_size)"},
        {"\"q8\"", FL_EFORMAT, " must be an object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *d = make_model(8, 64, false);
        set_config(d, "quantization_config", json_loads(cases[i].value, JSON_DECODE_ANY, NULL));
        expect(d, cases[i].code, i == 0, "%s: config.json: quantization_config%s", d, cases[i].msg);
    }
    /* null is absent: a float model with "quantization_config": null loads */
    const char *d = make_model(0, 64, false);
    set_config(d, "quantization_config", json_null());
    fl_err e;
    CHECK(load(d, NULL, &e) == 0, "null quantization_config: %s", e.msg);
}

static void test_tensors(void)
{
    const char *qp = "model.layers.0.self_attn.q_proj.weight"; /* (32, 32): one group a row */
    const char *dn = "model.layers.0.mlp.down_proj.weight";     /* (32, 64): two groups a row */
    char sc[192];
    const char *d;

    /* a wrong group size: scales written for groups of 64 */
    d = make_model(8, 64, false);
    snprintf(sc, sizeof sc, "%s_scale", dn);
    replace(d, sc, "F16", 32, 1);
    expect(d, FL_EFORMAT, true,
           "%s: tensor %s has shape [32, 1], config.json and groups of 32 imply [32, 2]", d, sc);
    /* truncated scales: a row short */
    d = make_model(4, 64, false);
    replace(d, sc, "F16", 31, 2);
    expect(d, FL_EFORMAT, false,
           "%s: tensor %s has shape [31, 2], config.json and groups of 32 imply [32, 2]", d, sc);
    replace(d, sc, "F16", 64, -1);
    expect(d, FL_EFORMAT, false,
           "%s: tensor %s has shape [64], config.json and groups of 32 imply [32, 2]", d, sc);

    /* NaN and infinite scales, named by row and group */
    static const struct {
        uint16_t h;
        const char *what;
    } bad[] = {{0x7e00, "NaN"}, {0xfe01, "NaN"}, {0x7c00, "inf"}, {0xfc00, "-inf"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        d = make_model(i % 2 ? 4 : 8, 64, false);
        set_f16(d, sc, 3 * 2 + 1, bad[i].h);
        expect(d, FL_EFORMAT, i == 0, "%s: tensor %s: the scale of row 3 group 1 is %s", d, sc,
               bad[i].what);
    }
    /* the largest finite f16 and a subnormal are fine */
    d = make_model(8, 64, false);
    set_f16(d, sc, 0, 0x7bff);
    set_f16(d, sc, 1, 0x0001);
    fl_err e;
    CHECK(load(d, NULL, &e) == 0, "finite extremes: %s", e.msg);

    /* quants whose shape does not match the config */
    d = make_model(8, 64, false);
    replace(d, qp, "I8", 32, 16);
    expect(d, FL_EFORMAT, true, "%s: tensor %s has shape [32, 16], config.json implies [32, 32]", d,
           qp);
    d = make_model(4, 64, false);
    replace(d, qp, "U8", 32, 32);
    expect(d, FL_EFORMAT, false,
           "%s: tensor %s has shape [32, 32], config.json implies [32, 16] (q4: two weights a byte)",
           d, qp);
    d = make_model(4, 64, false);
    replace(d, "model.embed_tokens.weight", "I8", 48, 16);
    expect(d, FL_EFORMAT, false,
           "%s: tensor model.embed_tokens.weight has shape [48, 16], config.json implies [48, 32]",
           d);

    /* missing scales */
    snprintf(sc, sizeof sc, "%s_scale", qp);
    d = make_model(8, 64, false);
    drop(d, sc);
    expect(d, FL_ENOTFOUND, true,
           "%s: missing tensor %s (the F16 scales of I8 %s, expected shape [32, 1])", d, sc, qp);
    d = make_model(4, 64, true);
    drop(d, "model.embed_tokens.weight_scale");
    expect(d, FL_ENOTFOUND, false,
           "%s: missing tensor model.embed_tokens.weight_scale (the F16 scales of I8 "
           "model.embed_tokens.weight, expected shape [48, 1])",
           d);

    /* wrong dtypes: scales, quants, the embedding in q4, a matrix neither float nor quantized */
    d = make_model(8, 64, false);
    replace(d, sc, "F32", 32, 1);
    expect(d, FL_EUNSUPPORTED, true, "%s: tensor %s has dtype F32 (scales are F16)", d, sc);
    replace(d, sc, "BF16", 32, 1);
    expect(d, FL_EUNSUPPORTED, false, "%s: tensor %s has dtype BF16 (scales are F16)", d, sc);
    d = make_model(8, 64, false);
    replace(d, qp, "U8", 32, 16);
    expect(d, FL_EUNSUPPORTED, false,
           "%s: tensor %s has dtype U8, but quantization_config format q8 stores the projections "
           "as I8",
           d, qp);
    d = make_model(4, 64, false);
    replace(d, qp, "I8", 32, 32);
    expect(d, FL_EUNSUPPORTED, false,
           "%s: tensor %s has dtype I8, but quantization_config format q4 stores the projections "
           "as U8",
           d, qp);
    d = make_model(4, 64, false);
    replace(d, "lm_head.weight", "U8", 48, 16);
    expect(d, FL_EUNSUPPORTED, false,
           "%s: tensor lm_head.weight has dtype U8, but quantization_config format q4 stores the "
           "embedding and lm_head as I8",
           d);
    d = make_model(8, 64, false);
    replace(d, qp, "I32", 32, 32);
    expect(d, FL_EUNSUPPORTED, false,
           "%s: tensor %s has dtype I32 (need F32, F16 or BF16, or I8 with F16 scales: "
           "quantization_config format q8)",
           d, qp);

    /* quantized tensors in a directory whose config.json has no quantization_config */
    d = make_model(8, 64, false);
    set_config(d, "quantization_config", NULL);
    expect(d, FL_EUNSUPPORTED, true,
           "%s: tensor model.embed_tokens.weight is quantized (I8), but config.json has no "
           "quantization_config",
           d);
    d = make_model(4, 64, false);
    set_config(d, "quantization_config", json_null());
    expect(d, FL_EUNSUPPORTED, false,
           "%s: tensor model.embed_tokens.weight is quantized (I8), but config.json has no "
           "quantization_config",
           d);

    /* norms and biases stay float */
    d = make_model(8, 64, false);
    replace(d, "model.norm.weight", "I8", 32, -1);
    expect(d, FL_EUNSUPPORTED, true, "%s: tensor model.norm.weight has dtype I8 (need F32, F16 or BF16)",
           d);
    d = make_model(4, 64, false);
    replace(d, "model.layers.1.self_attn.k_norm.weight", "U8", 16, -1);
    expect(d, FL_EUNSUPPORTED, false,
           "%s: tensor model.layers.1.self_attn.k_norm.weight has dtype U8 (need F32, F16 or BF16)",
           d);

    /* scales nothing quantized owns: a norm's, a float matrix's */
    d = make_model(8, 64, false);
    replace(d, "model.norm.weight_scale", "F16", 32, 1);
    expect(d, FL_EUNSUPPORTED, true,
           "%s: tensor model.norm.weight_scale is present, but model.norm.weight is not a quantized "
           "matrix of the model",
           d);
    d = make_model(4, 48, false); /* down_proj's rows are 48 long: it stays F32 */
    snprintf(sc, sizeof sc, "%s_scale", dn);
    replace(d, sc, "F16", 32, 1);
    expect(d, FL_EUNSUPPORTED, false,
           "%s: tensor %s is present, but %s is not a quantized matrix of the model", d, sc, dn);

    /* a quantized matrix whose rows are not a multiple of 32 long */
    d = make_model(8, 48, false);
    replace(d, dn, "I8", 32, 48);
    expect(d, FL_EFORMAT, true,
           "%s: tensor %s is quantized, but its rows have 48 weights, not a multiple of 32 (such a "
           "matrix stays F32, F16 or BF16)",
           d, dn);

    /* scales at an odd offset: a one-byte tensor first shifts everything after it */
    static char od[TK_PATH];
    snprintf(od, sizeof od, "%.3000s/odd", root);
    mkdir(od, 0755);
    char p[TK_PATH];
    tk_write_str(tk_path(p, od, "config.json"), tk_qtiny_config("q8", 64, false));
    tk_st s;
    tk_st_init(&s);
    int64_t one = 1;
    tk_st_add(&s, "aaa.odd", "U8", 1, &one, "x", 1);
    tk_qtiny_tensors(&s, 8, 64, false);
    tk_st_write(&s, tk_path(p, od, "model.safetensors"));
    tk_st_free(&s);
    expect(od, FL_EFORMAT, false,
           "%s: tensor model.embed_tokens.weight_scale starts at an odd offset (F16 scales must be "
           "2-byte aligned)",
           od);
}

int main(void)
{
    if (tk_mkdtemp(root, "quant"))
        return 1;
    test_good();
    test_config();
    test_tensors();
    int rc = check_summary("test_loader_quant");
    if (!rc)
        fl_rmtree(root);
    return rc;
}
