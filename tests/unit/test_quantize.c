/* test_quantize.c: `fogline quantize` end to end. The fixture's random models (Python-written,
 * both layouts, F32/BF16/F16, sharded, tied and untied; tests/loader.cmake), with tokenizer and
 * other files added, are quantized to q8 and q4 by the real binary; the output is loaded and
 * every matrix must be exactly the engine quantizer's output for the input's rows (quants,
 * scales, and their dequantization through fl_matrix_rows_f32), everything else byte for byte
 * the input's, in the input's order, config.json the input's plus quantization_config, the
 * other files identical, `fogline info` must say q8/q4, and the CPU backend must compute the
 * same logits from it as from the input with --weights q8/q4. Then each refusal, by its exact
 * line, and a failure half-way that must leave nothing behind. */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>

#include "backend.h"
#include "check.h"
#include "cpu/cpu.h"
#include "fl_cuda.h"
#include "model.h"
#include "test_loader_kit.h"

static char root[TK_PATH];

static fl_model *load(const char *dir)
{
    fl_load_opts o = {.no_tokenizer = true};
    fl_model *m = NULL;
    fl_err e = {0};
    CHECK(fl_model_load(&m, dir, &o, &e) == 0, "load %s: %s", dir, e.msg);
    return m;
}

static bool same_file(const char *a, const char *b)
{
    char *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    bool ok = !fl_read_file(a, &x, &nx, NULL) && !fl_read_file(b, &y, &ny, NULL) && nx == ny &&
              !memcmp(x, y, nx);
    free(x);
    free(y);
    return ok;
}

static bool copy_file(const char *src, const char *dst)
{
    char *buf = NULL;
    size_t len = 0;
    bool ok = !fl_read_file(src, &buf, &len, NULL) && !tk_write(dst, buf, len);
    free(buf);
    return ok;
}

/* Adds to a model directory the built-in model's tokenizer files, a template, small JSON
 * files, a README and a subdirectory (not part of a model: not copied). */
static void add_files(const char *dir)
{
    char p[TK_PATH], src[TK_PATH], hd[TK_PATH];
    snprintf(hd, sizeof hd, "%.2000s/../engine/models/fogline-helpdesk", check_tests_dir());
    CHECK(copy_file(tk_path(src, hd, "tokenizer.json"), tk_path(p, dir, "tokenizer.json")),
          "copy %s", src);
    CHECK(copy_file(tk_path(src, hd, "tokenizer_config.json"),
                          tk_path(p, dir, "tokenizer_config.json")),
          "copy %s", src);
    tk_write_str(tk_path(p, dir, "chat_template.jinja"),
                 "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}\n");
    tk_write_str(tk_path(p, dir, "generation_config.json"), "{\"do_sample\": false}\n");
    tk_write_str(tk_path(p, dir, "special_tokens_map.json"), "{\"eos_token\": \"<|end|>\"}");
    tk_write_str(tk_path(p, dir, "README.md"), "# a random model\n");
    mkdir(tk_path(p, dir, "sub"), 0755);
    tk_write_str(tk_path(src, p, "notes.txt"), "not copied\n");
}

/* Runs fogline quantize. */
static tk_run_out quantize(const char *in, const char *out, const char *fmt)
{
    const char *args[] = {"quantize", "--model", in, "--out", out, "--weights", fmt, NULL};
    return tk_run(root, args);
}

/* Output matrix ot against input matrix it: quantized to want (8, 4; 0: copied as it was). */
static void check_matrix(const fl_model *q, const fl_model *f, const fl_tensor *ot,
                         const fl_tensor *it, int want)
{
    CHECK(!strcmp(ot->name, it->name), "%s vs %s", ot->name, it->name);
    const fl_tensor *s = fl_model_scales(q, ot);
    size_t n = (size_t)it->shape[0], k = (size_t)it->shape[1], G = k / FL_QG;
    if (!want) {
        CHECK(ot->dtype == it->dtype && !s && ot->nbytes == it->nbytes &&
                  !memcmp(ot->data, it->data, it->nbytes),
              "%s copied as it was", ot->name);
        return;
    }
    fl_dtype dt = want == 8 ? FL_DT_I8 : FL_DT_U8;
    size_t qb = want == 8 ? n * k : n * k / 2;
    CHECK(ot->dtype == dt && s && s->nbytes == n * G * 2 && ot->nbytes == qb,
          "%s: %s, scales %s", ot->name, fl_dtype_name(ot->dtype), s ? s->name : "none");
    if (ot->dtype != dt || !s || s->nbytes != n * G * 2 || ot->nbytes != qb)
        return;
    float *x = malloc(n * k * sizeof *x), *ref = malloc(n * k * sizeof *ref),
          *got = malloc(n * k * sizeof *got);
    unsigned char *qq = malloc(qb);
    uint16_t *d = malloc(n * G * sizeof *d);
    fl_err e = {0};
    CHECK(fl_matrix_rows_f32(x, it, NULL, 0, n, k, &e) == 0, "%s", e.msg);
    if (want == 8) {
        CHECK(fl_q8_quantize((int8_t *)qq, d, x, (int)n, (int)k, &e) == 0, "%s", e.msg);
        fl_q8_dequantize(ref, (int8_t *)qq, d, (int)n, (int)k);
    } else {
        CHECK(fl_q4_quantize(qq, d, x, (int)n, (int)k, &e) == 0, "%s", e.msg);
        fl_q4_dequantize(ref, qq, d, (int)n, (int)k);
    }
    CHECK(!memcmp(ot->data, qq, qb), "%s: quants differ from the quantizer's", ot->name);
    CHECK(!memcmp(s->data, d, n * G * 2), "%s: scales differ from the quantizer's", ot->name);
    CHECK(fl_matrix_rows_f32(got, ot, s, 0, n, k, &e) == 0, "%s: %s", ot->name, e.msg);
    CHECK(!memcmp(got, ref, n * k * sizeof *got), "%s: dequantized rows", ot->name);
    free(x);
    free(ref);
    free(got);
    free(qq);
    free(d);
    (void)f;
}

/* Every tensor of in, in the input files' order, then every quantized matrix's scales: out's
 * order (one file, by data offset). */
static void check_order(const fl_model *in, const fl_model *out)
{
    const fl_weights *wi = in->weights, *wo = out->weights;
    size_t ni = fl_weights_count(wi), no = fl_weights_count(wo);
    size_t *oi = calloc(ni + 1, sizeof *oi), *oo = calloc(no + 1, sizeof *oo);
    for (size_t i = 0; i < ni; i++)
        oi[i] = i;
    for (size_t i = 0; i < no; i++)
        oo[i] = i;
    /* insertion sorts: a few dozen tensors */
    for (size_t i = 1; i < ni; i++)
        for (size_t j = i; j > 0; j--) {
            size_t a = oi[j - 1], b = oi[j];
            size_t fa = fl_weights_file_of(wi, a), fb = fl_weights_file_of(wi, b);
            if (fa < fb || (fa == fb && fl_weights_data_offset(wi, a) < fl_weights_data_offset(wi, b)))
                break;
            oi[j - 1] = b;
            oi[j] = a;
        }
    for (size_t i = 1; i < no; i++)
        for (size_t j = i; j > 0 && fl_weights_data_offset(wo, oo[j - 1]) >
                                        fl_weights_data_offset(wo, oo[j]);
             j--) {
            size_t t = oo[j - 1];
            oo[j - 1] = oo[j];
            oo[j] = t;
        }
    size_t r = 0, q = 0;
    bool ok = true;
    for (size_t i = 0; i < ni && ok; i++, r++)
        ok = r < no && !strcmp(fl_weights_at(wi, oi[i])->name, fl_weights_at(wo, oo[r])->name);
    for (size_t i = 0; i < ni && ok; i++) {
        const fl_tensor *t = fl_weights_get(wo, fl_weights_at(wi, oi[i])->name);
        const fl_tensor *s = fl_model_scales(out, t);
        if (!s)
            continue;
        ok = r < no && fl_weights_at(wo, oo[r]) == s;
        r++;
        q++;
    }
    CHECK(ok && r == no && q == (size_t)out->n_quantized,
          "output order: the input's tensors, then the scales in the same order (%zu of %zu)", r,
          no);
    for (size_t i = 0; i < no; i++)
        CHECK(fl_weights_file_of(wo, i) == 0, "one output file");
    free(oi);
    free(oo);
}

/* config.json: the input's text up to its last value, then quantization_config; as JSON the
 * input's object plus that one key. */
static void check_config(const char *in, const char *out, const char *fmt)
{
    char p[TK_PATH], *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    fl_read_file(tk_path(p, in, "config.json"), &a, &na, NULL);
    fl_read_file(tk_path(p, out, "config.json"), &b, &nb, NULL);
    CHECK(a && b, "config.json files");
    if (!a || !b) {
        free(a);
        free(b);
        return;
    }
    size_t last = na;
    while (last && a[last - 1] != '}')
        last--;
    if (last)
        last--;
    while (last && strchr(" \t\r\n", a[last - 1]))
        last--;
    CHECK(nb > last && !memcmp(a, b, last), "the input's config.json text is kept");
    json_t *ja = json_loads(a, 0, NULL), *jb = json_loads(b, JSON_REJECT_DUPLICATES, NULL);
    json_t *want = json_pack("{sssssi}", "quant_method", "fogline", "format", fmt, "group_size", 32);
    CHECK(ja && jb && json_equal(json_object_get(jb, "quantization_config"), want),
          "quantization_config");
    if (jb)
        json_object_del(jb, "quantization_config");
    CHECK(ja && jb && json_equal(ja, jb), "every other key of config.json kept");
    json_decref(ja);
    json_decref(jb);
    json_decref(want);
    free(a);
    free(b);
}

/* The output directory holds model.safetensors, config.json and exactly the input's other
 * plain files (not its weights, index or subdirectory), each identical. */
static void check_files(const char *in, const char *out)
{
    DIR *d = opendir(out);
    int n = 0, others = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        const char *nm = de->d_name;
        if (nm[0] == '.')
            continue;
        n++;
        char a[TK_PATH], b[TK_PATH];
        struct stat sb;
        if (!strcmp(nm, "model.safetensors") || !strcmp(nm, "config.json"))
            continue;
        others++;
        CHECK(!stat(tk_path(a, in, nm), &sb) && S_ISREG(sb.st_mode) && !strstr(nm, "safetensors"),
              "%s/%s: not a plain file of the input", out, nm);
        CHECK(same_file(a, tk_path(b, out, nm)), "%s differs from the input's", nm);
    }
    if (d)
        closedir(d);
    /* the input's plain files other than weights and config.json */
    int want = 0;
    d = opendir(in);
    while (d && (de = readdir(d))) {
        char a[TK_PATH];
        struct stat sb;
        if (de->d_name[0] != '.' && !stat(tk_path(a, in, de->d_name), &sb) &&
            S_ISREG(sb.st_mode) && !strstr(de->d_name, ".safetensors") &&
            strcmp(de->d_name, "config.json"))
            want++;
    }
    if (d)
        closedir(d);
    CHECK(others == want && n == want + 2, "%s: %d files, %d others (want %d)", out, n, others,
          want);
}

static void check_info(const char *out, const fl_model *m, const char *fmt, int q8, int q4,
                       int fl)
{
    const char *args[] = {"info", "--model", out, "--json", NULL};
    tk_run_out r = tk_run(root, args);
    json_t *o = json_loads(r.out, 0, NULL);
    CHECK(r.status == 0 && o, "info --json: exit %d: %s", r.status, r.err);
    CHECK(o && !strcmp(json_string_value(json_object_get(o, "quantization")), fmt),
          "info: quantization %s", fmt);
    CHECK(o && json_integer_value(json_object_get(o, "weight_bytes")) == m->weight_bytes &&
              json_integer_value(json_object_get(o, "n_params")) == m->n_params,
          "info: weight_bytes, n_params");
    json_t *mats = o ? json_object_get(o, "matrices") : NULL;
    CHECK(mats && json_integer_value(json_object_get(mats, "q8")) == q8 &&
              json_integer_value(json_object_get(mats, "q4")) == q4 &&
              json_integer_value(json_object_get(mats, "float")) == fl,
          "info: matrices per format");
    json_decref(o);
    tk_run_free(&r);
    const char *targs[] = {"info", "--model", out, NULL};
    r = tk_run(root, targs);
    char line[160];
    snprintf(line, sizeof line,
             "\nquantization     %s (fogline, groups of 32; matrices: %d q8, %d q4, %d float)\n",
             fmt, q8, q4, fl);
    CHECK(r.status == 0 && strstr(r.out, line), "info text has '%s'", line + 1);
    tk_run_free(&r);
}

/* The whole round trip of input directory in with format fmt; want_float: whether down_proj
 * stays float (rows not a multiple of 32). */
/* The CPU backend on the output (auto: the file's format) computes the same bits as on the
 * input quantized at load (--weights q8/q4): the same quantizer, the embedding at 8 bits in
 * both. Two blocks, logits of every position. */
static void check_same_forward(const fl_model *f, const fl_model *q, int wq)
{
    int B = f->cfg.block_size, n = 2 * B, V = f->cfg.vocab;
    int32_t pages[2] = {0, 1}, *tok = malloc((size_t)n * sizeof *tok);
    float *lg[2] = {malloc((size_t)n * V * sizeof(float)), malloc((size_t)n * V * sizeof(float))};
    fl_tok_out *out = malloc((size_t)n * sizeof *out);
    for (int i = 0; i < n; i++)
        tok[i] = (i * 7 + 3) % V;
    fl_segment sg = {n, 0, n, 0, pages, NULL};
    fl_batch bt = {tok, n, &sg, 1};
    int ok = 0;
    for (int k = 0; k < 2 && tok && lg[0] && lg[1] && out; k++) {
        fl_backend_opts o = {.n_pages = 2, .n_threads = 2, .max_tokens = n,
                             .weights = k ? FL_WEIGHTS_AUTO
                                          : wq == 8 ? FL_WEIGHTS_Q8 : FL_WEIGHTS_Q4};
        fl_backend *b = NULL;
        fl_err e = {0};
        int rc = fl_backend_cpu_create(&b, k ? q : f, &o, &e);
        CHECK(rc == 0, "cpu backend on the %s: %s", k ? "quantized file" : "input", e.msg);
        if (!rc) {
            CHECK(b->weights == o.weights || (k && b->weights == (wq == 8 ? FL_WEIGHTS_Q8
                                                                            : FL_WEIGHTS_Q4)),
                  "auto on a q%d file holds %s", wq, fl_wformat_name(b->weights));
            rc = fl_forward(b, &bt, out, lg[k], &e);
            CHECK(rc == 0, "forward: %s", e.msg);
            ok += rc == 0;
        }
        fl_backend_destroy(b);
    }
    if (ok == 2) {
        size_t diff = 0;
        for (size_t i = 0; i < (size_t)n * V; i++)
            diff += memcmp(&lg[0][i], &lg[1][i], sizeof(float)) != 0;
        CHECK(diff == 0, "q%d: the quantized file's logits differ from --weights q%d's at %zu of "
              "%zu", wq, wq, diff, (size_t)n * V);
    }
    free(tok);
    free(lg[0]);
    free(lg[1]);
    free(out);
}

static void round_trip(const char *in, const char *fmt, bool down_float)
{
    static int n;
    char out[TK_PATH];
    snprintf(out, sizeof out, "%.3000s/out-%d-%s", root, n++, fmt);
    tk_run_out r = quantize(in, out, fmt);
    CHECK(r.status == 0 && !r.err[0], "quantize %s %s: exit %d: %s", in, fmt, r.status, r.err);
    fl_model *f = load(in), *q = r.status == 0 ? load(out) : NULL;
    if (!f || !q) {
        fl_model_free(f);
        fl_model_free(q);
        tk_run_free(&r);
        return;
    }
    int wq = !strcmp(fmt, "q8") ? 8 : 4;
    /* the one line: counts and bytes are the models' */
    char head[3 * TK_PATH];
    snprintf(head, sizeof head, "fogline quantize: %s -> %s (%s): ", in, out, fmt);
    size_t total = 0, nq = 0, copied = 0, scales = 0;
    unsigned long long bin = 0, bout = 0;
    int others = 0;
    double secs = -1;
    const char *rest = strncmp(r.out, head, strlen(head)) ? "" : r.out + strlen(head);
    int got = sscanf(rest, "%zu tensors (%zu quantized, %zu copied, %zu scales added), %llu bytes "
                           "in, %llu bytes out, %d other files copied, %lf s",
                     &total, &nq, &copied, &scales, &bin, &bout, &others, &secs);
    CHECK(got == 8 && strchr(r.out, '\n') == r.out + strlen(r.out) - 1, "one line: '%s'", r.out);
    CHECK(total == fl_weights_count(q->weights) && nq == (size_t)q->n_quantized &&
              scales == nq && copied == fl_weights_count(f->weights) - nq &&
              bin == fl_weights_total_bytes(f->weights) &&
              bout == fl_weights_total_bytes(q->weights) && secs >= 0,
          "the line's figures: '%s'", r.out);
    tk_run_free(&r);

    CHECK(q->quant == (wq == 8 ? FL_QUANT_Q8 : FL_QUANT_Q4), "%s: quant %s", out,
          fl_quant_name(q->quant));
    CHECK(q->n_params == f->n_params, "n_params %lld, input %lld", (long long)q->n_params,
          (long long)f->n_params);
    CHECK(q->n_matrices == f->n_matrices &&
              q->n_quantized == f->n_matrices - (down_float ? f->cfg.n_layers : 0),
          "%d of %d matrices quantized", q->n_quantized, q->n_matrices);
    check_matrix(q, f, q->embed, f->embed, 8);
    if (f->lm_head != f->embed)
        check_matrix(q, f, q->lm_head, f->lm_head, 8);
    for (int l = 0; l < f->cfg.n_layers; l++) {
        const fl_layer_w *a = &q->layers[l], *b = &f->layers[l];
        const fl_tensor *qa[] = {a->wq, a->wk, a->wv, a->wo, a->w_gate, a->w_up, a->w_down};
        const fl_tensor *fb[] = {b->wq, b->wk, b->wv, b->wo, b->w_gate, b->w_up, b->w_down};
        for (int i = 0; i < 7; i++)
            check_matrix(q, f, qa[i], fb[i], i == 6 && down_float ? 0 : wq);
    }
    /* every tensor that is not a quantized matrix: byte for byte the input's */
    for (size_t i = 0; i < fl_weights_count(f->weights); i++) {
        const fl_tensor *t = fl_weights_at(f->weights, i);
        const fl_tensor *o = fl_weights_get(q->weights, t->name);
        CHECK(o != NULL, "%s is in the output", t->name);
        if (o && !fl_model_scales(q, o))
            CHECK(o->dtype == t->dtype && o->ndim == t->ndim &&
                      !memcmp(o->shape, t->shape, sizeof t->shape) && o->nbytes == t->nbytes &&
                      !memcmp(o->data, t->data, t->nbytes),
                  "%s is the input's, byte for byte", t->name);
    }
    check_order(f, q);
    check_config(in, out, fmt);
    check_files(in, out);
    int q8 = 1 + (f->lm_head != f->embed), mats = f->n_matrices - q8;
    int fl = down_float ? f->cfg.n_layers : 0;
    check_info(out, q, fmt, wq == 8 ? f->n_matrices - fl : q8, wq == 4 ? mats - fl : 0, fl);
    check_same_forward(f, q, wq);

    /* the CUDA backend refuses a q4 directory before looking for a GPU; a q8 one it takes
     * (docs/cuda.md "q8 weights"), so here it goes on to look for a GPU */
    if (fl_cuda_built()) {
        fl_backend *b = NULL;
        fl_backend_opts bo = {.n_pages = 4, .n_threads = 1, .max_tokens = 8};
        fl_err e = {0};
        int rc = fl_backend_cuda_create(&b, q, &bo, &e);
        if (wq == 4)
            CHECK(rc == FL_EUNSUPPORTED && !b &&
                      !strcmp(e.msg, "cuda backend: the directory's weights q4: it holds bf16 or "
                                     "q8 weights only (use --weights bf16, q8 or auto, or --device cpu)"),
                  "cuda: rc %d: %s", rc, e.msg);
        else
            CHECK(rc == 0 ? b && b->weights == FL_WEIGHTS_Q8
                          : rc == FL_EUNSUPPORTED && !b && !strncmp(e.msg, "cuda: no usable GPU: ", 21),
                  "cuda: rc %d: %s", rc, e.msg);
        fl_backend_destroy(b);
    }
    fl_model_free(f);
    fl_model_free(q);
}

static void test_round_trips(void)
{
    static const struct {
        const char *name, *fmt;
    } cases[] = {{"q3_f32", "q8"},      {"q3_bf16_tie", "q4"}, {"q3_f16_sh3", "q4"},
                 {"q2_f32_tie", "q8"},  {"q2_bf16_sh3", "q4"}, {"q2_f16_tie_sh3", "q8"},
                 {"q3_f16_sh3", "q8"},  {"q2_bf16_sh3", "q8"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char in[TK_PATH], src[TK_PATH];
        snprintf(in, sizeof in, "%.3000s/in-%zu-%s", root, i, cases[i].name);
        mkdir(in, 0755);
        tk_path(src, tk_models_dir(), cases[i].name);
        CHECK(tk_copy_dir(src, in) == 0, "copy %s", src);
        add_files(in);
        round_trip(in, cases[i].fmt, false);
    }
    /* rows 48 long (intermediate 48): down_proj stays F32, and the loader takes it */
    char in[TK_PATH];
    snprintf(in, sizeof in, "%.3000s/in-ff48", root);
    mkdir(in, 0755);
    CHECK(tk_qtiny_model(in, 0, 48, false) == 0, "write %s", in);
    round_trip(in, "q4", true);
    round_trip(in, "q8", true);
}

/* exit status and the exact stderr; nothing on stdout */
static void expect_fail(const char *const *args, int status, const char *fmt, ...) FL_PRINTF(3, 4);
static void expect_fail(const char *const *args, int status, const char *fmt, ...)
{
    char want[TK_PATH * 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(want, sizeof want, fmt, ap);
    va_end(ap);
    tk_run_out r = tk_run(root, args);
    CHECK(r.status == status && !strcmp(r.err, want) && !r.out[0],
          "exit %d (want %d)\n  stderr '%s'\n  want   '%s'", r.status, status, r.err, want);
    tk_run_free(&r);
}

static bool exists(const char *p)
{
    struct stat sb;
    return !stat(p, &sb);
}

/* No temporary directory of out's left beside it. */
static bool no_leftovers(const char *parent, const char *base)
{
    char prefix[TK_PATH];
    snprintf(prefix, sizeof prefix, ".%s.partial-", base);
    DIR *d = opendir(parent);
    struct dirent *de;
    bool clean = d != NULL;
    while (d && (de = readdir(d)))
        if (!strncmp(de->d_name, prefix, strlen(prefix)))
            clean = false;
    if (d)
        closedir(d);
    return clean;
}

static void test_refusals(void)
{
    char in[TK_PATH], out[TK_PATH], p[TK_PATH], q[TK_PATH];
    snprintf(in, sizeof in, "%.3000s/float", root);
    mkdir(in, 0755);
    tk_qtiny_model(in, 0, 64, false);

    /* usage errors: exit 2 */
    snprintf(out, sizeof out, "%.3000s/never", root);
    const char *a1[] = {"quantize", "--model", in, "--out", out, "--weights", "q5", NULL};
    expect_fail(a1, 2, "fogline quantize: --weights must be q8 or q4, got 'q5'\n");
    const char *a2[] = {"quantize", "--model", in, "--weights", "q8", NULL};
    expect_fail(a2, 2, "fogline quantize: --model DIR, --out DIR and --weights q8|q4 are required "
                       "(try --help)\n");
    const char *a3[] = {"quantize", "--model", in, "--out", out, "--weights", "q8", "--fast", NULL};
    expect_fail(a3, 2, "fogline quantize: unknown option '--fast' (try --help)\n");
    const char *a4[] = {"quantize", "--model", in, "--out", NULL};
    expect_fail(a4, 2, "fogline quantize: --out needs a value (try --help)\n");
    CHECK(!exists(out), "no output after a usage error");

    /* OUT is DIR, however spelled */
    const char *a5[] = {"quantize", "--model", in, "--out", in, "--weights", "q8", NULL};
    expect_fail(a5, 1,
                "fogline quantize: --out %s is the model directory itself (write the copy "
                "elsewhere)\n",
                in);
    snprintf(p, sizeof p, "%.3000s/.", in);
    const char *a6[] = {"quantize", "--model", in, "--out", p, "--weights", "q4", NULL};
    expect_fail(a6, 1,
                "fogline quantize: --out %s is the model directory itself (write the copy "
                "elsewhere)\n",
                p);

    /* OUT exists and holds something, or is a file */
    snprintf(out, sizeof out, "%.3000s/full", root);
    mkdir(out, 0755);
    tk_write_str(tk_path(q, out, "keep.txt"), "mine");
    const char *a7[] = {"quantize", "--model", in, "--out", out, "--weights", "q8", NULL};
    expect_fail(a7, 1, "fogline quantize: --out %s exists and is not empty\n", out);
    CHECK(same_file(q, q) && exists(q), "the existing directory is untouched");
    snprintf(out, sizeof out, "%.3000s/afile", root);
    tk_write_str(out, "x");
    expect_fail(a7, 1, "fogline quantize: --out %s is not a directory\n", out);

    /* not a model directory */
    snprintf(p, sizeof p, "%.3000s/nothing", root);
    snprintf(out, sizeof out, "%.3000s/never", root);
    const char *a8[] = {"quantize", "--model", p, "--out", out, "--weights", "q8", NULL};
    expect_fail(a8, 1, "fogline quantize: %s: not a directory\n", p);

    /* an already quantized input */
    snprintf(p, sizeof p, "%.3000s/quantized", root);
    mkdir(p, 0755);
    tk_qtiny_model(p, 4, 64, false);
    const char *a9[] = {"quantize", "--model", p, "--out", out, "--weights", "q8", NULL};
    expect_fail(a9, 1, "fogline quantize: %s is already quantized (q4): quantize a float model\n",
                p);
    CHECK(!exists(out), "no output for a quantized input");

    /* an empty OUT is replaced */
    snprintf(out, sizeof out, "%.3000s/empty", root);
    mkdir(out, 0755);
    const char *a10[] = {"quantize", "--model", in, "--out", out, "--weights", "q8", NULL};
    tk_run_out r = tk_run(root, a10);
    CHECK(r.status == 0 && exists(tk_path(q, out, "model.safetensors")), "empty OUT: %s", r.err);
    tk_run_free(&r);
    fl_model *m = load(out);
    CHECK(m && m->quant == FL_QUANT_Q8, "quantized into the empty directory");
    fl_model_free(m);

    /* a failure half-way (a NaN weight in layer 1) leaves nothing: no OUT, no temporary */
    snprintf(p, sizeof p, "%.3000s/nan", root);
    mkdir(p, 0755);
    tk_qtiny_model(p, 0, 64, false);
    {
        tk_st s;
        tk_st_read(&s, tk_path(q, p, "model.safetensors"));
        json_t *t = json_object_get(s.header, "model.layers.1.mlp.up_proj.weight");
        size_t at = (size_t)json_integer_value(json_array_get(json_object_get(t, "data_offsets"), 0));
        float nan = NAN;
        memcpy(s.data + at + (5 * TQ_H + 7) * sizeof(float), &nan, sizeof nan);
        tk_st_write(&s, q);
        tk_st_free(&s);
    }
    snprintf(out, sizeof out, "%.3000s/nan-out", root);
    const char *a11[] = {"quantize", "--model", p, "--out", out, "--weights", "q4", NULL};
    expect_fail(a11, 1,
                "fogline quantize: %s: tensor model.layers.1.mlp.up_proj.weight, rows 0..63: "
                "quantize: row 5 column 7 is not finite\n",
                p);
    CHECK(!exists(out) && no_leftovers(root, "nan-out"), "a failure leaves nothing behind");
    CHECK(no_leftovers(root, "empty") && no_leftovers(root, "full"), "no temporaries anywhere");
}

int main(void)
{
    if (tk_mkdtemp(root, "quantize"))
        return 1;
    test_round_trips();
    test_refusals();
    int rc = check_summary("test_quantize");
    if (!rc)
        fl_rmtree(root);
    return rc;
}
