/* test_loader_fuzz.c: seeded random mutations of a valid safetensors header (bytes, length
 * field, truncation), of a float model and of quantized ones (q8, q4: I8/U8 matrices with F16
 * scales), and of config.json text. Every load must return 0 or a negative code with a
 * one-line message, and never crash or read outside the file (the ASan build runs this too).
 * When a mutant is accepted, what the loader exposes must still be self-consistent: for a
 * quantized model, every matrix's scales as the loader promises and its rows finite. */
#include <jansson.h>
#include <math.h>
#include <time.h>

#include "check.h"
#include "config.h"
#include "model.h"
#include "test_loader_kit.h"

#define N_ST 2000     /* safetensors mutants */
#define N_QST 1000    /* ... of each quantized model */
#define N_CFG 3000    /* config.json mutants */

static uint64_t rng = 0x9e3779b97f4a7c15ull; /* fixed seed: failures reproduce */

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static size_t rndn(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

/* A growable byte string being mutated. */
typedef struct bytes {
    unsigned char *p;
    size_t n;
} bytes;

static void b_insert(bytes *b, size_t at, const void *src, size_t k)
{
    b->p = realloc(b->p, b->n + k + 1);
    memmove(b->p + at + k, b->p + at, b->n - at);
    memcpy(b->p + at, src, k);
    b->n += k;
}

static void b_delete(bytes *b, size_t at, size_t k)
{
    if (at + k > b->n)
        k = b->n - at;
    memmove(b->p + at, b->p + at + k, b->n - at - k);
    b->n -= k;
}

static const char *const tokens[] = {
    "{", "}", "[", "]", "\"", ",", ":", "0", "-1", "1e999", "18446744073709551615",
    "9223372036854775807", "4294967296", "65536", "null", "true", "\"F32\"", "\"BF16\"",
    "\"F8_E5M2\"", "\"shape\"", "\"dtype\"", "\"data_offsets\"", "[0,0]", "[]", "\\u0000", "\\",
    "\"__metadata__\"", " ", "2", "8", "256", "-0", "0.5", "\xff", "\xc3\xa9", "\"I8\"", "\"U8\"",
    "\"F16\"", "_scale", "16", "32", "64", "48",
};

/* One random edit of text region [lo, b->n). */
static void mutate(bytes *b, size_t lo)
{
    size_t span = b->n > lo ? b->n - lo : 0;
    size_t at = lo + rndn(span + 1);
    switch (rndn(6)) {
    case 0: /* flip a bit */
        if (span)
            b->p[lo + rndn(span)] ^= (unsigned char)(1u << rndn(8));
        break;
    case 1: /* overwrite a byte */
        if (span)
            b->p[lo + rndn(span)] = (unsigned char)rnd();
        break;
    case 2: /* delete a span */
        if (at < b->n)
            b_delete(b, at, 1 + rndn(24));
        break;
    case 3: { /* insert a JSON-ish token */
        const char *t = tokens[rndn(sizeof tokens / sizeof tokens[0])];
        b_insert(b, at, t, strlen(t));
        break;
    }
    case 4: { /* replace a number with an interesting one */
        size_t i = lo + rndn(span + 1);
        while (i < b->n && !(b->p[i] >= '0' && b->p[i] <= '9'))
            i++;
        size_t j = i;
        while (j < b->n && b->p[j] >= '0' && b->p[j] <= '9')
            j++;
        if (i < b->n) {
            b_delete(b, i, j - i);
            const char *nums[] = {"0", "1", "3", "7", "-1", "1023", "4096", "100000000", "2147483648",
                                  "9223372036854775808", "4294967296", "17"};
            const char *t = nums[rndn(sizeof nums / sizeof nums[0])];
            b_insert(b, i, t, strlen(t));
        }
        break;
    }
    default: { /* duplicate a span elsewhere */
        if (!span)
            break;
        size_t from = lo + rndn(span), k = 1 + rndn(40);
        if (from + k > b->n)
            k = b->n - from;
        unsigned char *tmp = malloc(k);
        memcpy(tmp, b->p + from, k);
        b_insert(b, at, tmp, k);
        free(tmp);
        break;
    }
    }
}

static void check_err(int rc, const fl_err *e, const char *what, int iter)
{
    CHECK(rc <= 0, "%s #%d: rc %d", what, iter, rc);
    if (rc < 0)
        CHECK(e->code == rc && e->msg[0] && !strchr(e->msg, '\n'), "%s #%d: rc %d message '%s'",
              what, iter, rc, e->msg);
}

/* An accepted config must satisfy everything the engine relies on. */
static void check_config(const fl_config *c, int iter)
{
    bool ok = (unsigned)c->family < FL_FAMILY_COUNT && c->hidden > 0 && c->n_layers > 0 &&
              c->n_heads > 0 && c->n_kv_heads > 0 && c->n_heads % c->n_kv_heads == 0 &&
              c->head_dim > 0 && c->head_dim % 2 == 0 && c->intermediate > 0 && c->vocab > 0 &&
              c->max_pos > 0 && c->block_size >= 1 && c->block_size <= 256 && c->sub_block >= 1 &&
              c->block_size % c->sub_block == 0 && c->mask_token_id >= -1 &&
              c->mask_token_id < c->vocab && c->rope_theta > 0 && c->rms_eps > 0 &&
              c->n_eos >= 0 && c->n_eos <= 8 && c->bos_id >= -1 && c->bos_id < c->vocab;
    for (int i = 0; ok && i < c->n_eos; i++)
        ok = c->eos_ids[i] >= 0 && c->eos_ids[i] < c->vocab;
    CHECK(ok, "config #%d accepted but inconsistent", iter);
}

/* An accepted file: every exposed tensor lies in readable memory with a consistent size. */
static void check_weights(const fl_weights *w, int iter)
{
    volatile unsigned sum = 0;
    for (size_t i = 0; i < fl_weights_count(w); i++) {
        const fl_tensor *t = fl_weights_at(w, i);
        CHECK(t->ndim >= 0 && t->ndim <= FL_MAX_DIMS && (unsigned)t->dtype < FL_DT_COUNT,
              "#%d %s", iter, t->name);
        int64_t n = 1;
        for (int d = 0; d < t->ndim; d++)
            n *= t->shape[d];
        CHECK(n == t->numel && t->nbytes == (size_t)n * fl_dtype_size(t->dtype), "#%d %s size",
              iter, t->name);
        const unsigned char *p = t->data;
        for (size_t k = 0; k < t->nbytes; k++) /* a read outside the mapping would fault */
            sum += p[k];
        CHECK(fl_weights_get(w, t->name) == t, "#%d lookup %s", iter, t->name);
    }
    (void)sum;
}

/* An accepted model's matrices: a quantized one has the dtype of the directory's format and
 * scales of shape (n, k/32), all finite; every matrix's rows read as finite f32 (a quantized
 * weight is at most 127 or 8 times a finite scale). */
static void check_matrices(const fl_model *m, int iter)
{
    const fl_tensor *mats[2 + 7 * TQ_L] = {m->embed, m->lm_head};
    int n = 2;
    for (int l = 0; l < m->cfg.n_layers && l < TQ_L; l++) {
        const fl_layer_w *L = &m->layers[l];
        const fl_tensor *t[] = {L->wq, L->wk, L->wv, L->wo, L->w_gate, L->w_up, L->w_down};
        for (int i = 0; i < 7; i++)
            mats[n++] = t[i];
    }
    int quantized = 0;
    for (int i = 0; i < n; i++) {
        const fl_tensor *t = mats[i], *s = fl_model_scales(m, t);
        bool q = t->dtype == FL_DT_I8 || t->dtype == FL_DT_U8;
        if (!(i == 1 && m->lm_head == m->embed)) /* a tied lm_head is the embedding */
            quantized += q;
        CHECK(q == (s != NULL) && (!q || m->quant != FL_QUANT_NONE), "#%d %s: %s, scales %s",
              iter, t->name, fl_dtype_name(t->dtype), s ? s->name : "none");
        size_t rows = (size_t)t->shape[0], k = (size_t)t->shape[1] * (t->dtype == FL_DT_U8 ? 2 : 1);
        if (q) {
            CHECK(s->dtype == FL_DT_F16 && s->ndim == 2 && s->shape[0] == t->shape[0] &&
                      s->shape[1] == (int64_t)(k / FL_QG) && k % FL_QG == 0,
                  "#%d %s: scales shape", iter, t->name);
            CHECK(t->dtype == (m->quant == FL_QUANT_Q8 || i < 2 ? FL_DT_I8 : FL_DT_U8),
                  "#%d %s: %s in a %s directory", iter, t->name, fl_dtype_name(t->dtype),
                  fl_quant_name(m->quant));
        }
        float *x = malloc(rows * k * sizeof *x + 1);
        fl_err e = {0};
        int rc = fl_matrix_rows_f32(x, t, s, 0, rows, k, &e);
        CHECK(rc == 0, "#%d %s: %s", iter, t->name, e.msg);
        for (size_t j = 0; rc == 0 && j < rows * k; j++)
            if (!isfinite(x[j]) && q) {
                CHECK(0, "#%d %s: weight %zu is not finite", iter, t->name, j);
                break;
            }
        free(x);
    }
    CHECK(quantized == m->n_quantized, "#%d: %d quantized matrices, the model says %d", iter,
          quantized, m->n_quantized);
}

/* quant 0: the float tiny model (hidden 8: nothing could be quantized); 8, 4: the quantized
 * tiny model in its quantized directory. */
static void fuzz_safetensors(const char *dir, int quant)
{
    const int n_iter = quant ? N_QST : N_ST;
    tk_st s;
    tk_st_init(&s);
    if (quant)
        tk_qtiny_tensors(&s, quant, 64, false);
    else
        tk_tiny_tensors(&s, false, false);
    char p[TK_PATH], base_path[TK_PATH];
    tk_path(base_path, dir, "base.safetensors");
    tk_st_write(&s, base_path);
    tk_st_free(&s);
    char *orig = NULL;
    size_t orig_n = 0;
    fl_read_file(base_path, &orig, &orig_n, NULL);
    tk_write_str(tk_path(p, dir, "config.json"),
                 quant ? tk_qtiny_config(quant == 8 ? "q8" : "q4", 64, false)
                       : tk_tiny_config(false, false));
    tk_path(p, dir, "model.safetensors");
    int accepted = 0, loaded = 0;
    for (int it = 0; it < n_iter; it++) {
        bytes b = {malloc(orig_n + 1), orig_n};
        memcpy(b.p, orig, orig_n);
        uint64_t hlen = 0;
        for (int i = 7; i >= 0; i--)
            hlen = hlen << 8 | b.p[i];
        size_t data_n = orig_n - 8 - (size_t)hlen;
        int k = 1 + (int)rndn(4);
        for (int m = 0; m < k; m++)
            mutate(&b, 8);
        /* usually keep the length field honest, so the JSON mutations reach the parser */
        uint64_t newlen = b.n - 8 - data_n;
        switch (rndn(10)) {
        case 0: newlen = hlen; break;
        case 1: newlen = rnd() >> rndn(64); break;
        case 2: newlen = newlen + rndn(64) - 32; break;
        case 3: b.n = rndn(b.n + 1); break; /* truncate the file anywhere */
        default: break;
        }
        if (b.n >= 8)
            for (int i = 0; i < 8; i++)
                b.p[i] = (unsigned char)(newlen >> (8 * i));
        tk_write(p, b.p, b.n);
        free(b.p);

        fl_weights *w = NULL;
        fl_err e = {0};
        int rc = fl_weights_open_file(&w, p, &e);
        check_err(rc, &e, "safetensors", it);
        CHECK((rc == 0) == (w != NULL), "#%d pointer", it);
        if (w) {
            accepted++;
            check_weights(w, it);
            fl_weights_close(w);
        }
        /* the whole load binds roles on whatever shapes survived */
        fl_model *m = NULL;
        fl_load_opts o = {.no_tokenizer = true};
        memset(&e, 0, sizeof e);
        rc = fl_model_load(&m, dir, &o, &e);
        check_err(rc, &e, "model", it);
        if (m) {
            loaded++;
            CHECK(m->embed && m->lm_head && m->final_norm && m->layers && m->layers[0].wq,
                  "#%d roles", it);
            check_matrices(m, it);
            fl_model_free(m);
        }
    }
    free(orig);
    /* a fuzzer that never gets past the first check tests nothing */
    printf("safetensors%s: %d mutants, %d opened, %d loaded as models\n",
           quant == 8 ? " (q8)" : quant == 4 ? " (q4)" : "", n_iter, accepted, loaded);
    CHECK(accepted > n_iter / 20, "only %d mutants parsed: mutations too destructive", accepted);
    CHECK(loaded > 0, "no mutant loaded as a model: the checks of accepted models never ran");
}

static void fuzz_config(const char *dir)
{
    char p[TK_PATH];
    tk_tiny_model(dir, true, false); /* weights for the occasional whole load */
    int accepted = 0;
    for (int it = 0; it < N_CFG; it++) {
        bool qwen2 = it & 1;
        const char *base = tk_tiny_config(qwen2, false);
        bytes b = {malloc(strlen(base) + 1), strlen(base)};
        memcpy(b.p, base, b.n);
        int k = 1 + (int)rndn(3);
        for (int m = 0; m < k; m++)
            mutate(&b, 0);
        b.p = realloc(b.p, b.n + 1);
        b.p[b.n] = 0;
        fl_config c;
        fl_err e = {0};
        int rc = fl_config_parse(&c, (const char *)b.p, &e);
        check_err(rc, &e, "config", it);
        if (!rc) {
            accepted++;
            check_config(&c, it);
        }
        if (qwen2 && it % 8 == 1) {
            tk_write(tk_path(p, dir, "config.json"), b.p, b.n);
            fl_model *m = NULL;
            fl_load_opts o = {.no_tokenizer = true};
            memset(&e, 0, sizeof e);
            rc = fl_model_load(&m, dir, &o, &e);
            check_err(rc, &e, "model/config", it);
            fl_model_free(m);
        }
        free(b.p);
    }
    printf("config: %d mutants, %d accepted\n", N_CFG, accepted);
    CHECK(accepted > N_CFG / 20, "only %d configs parsed", accepted);
}

int main(void)
{
    char dir[TK_PATH], d1[TK_PATH], d2[TK_PATH], d3[TK_PATH], d4[TK_PATH];
    if (tk_mkdtemp_fast(dir, "fuzz"))
        return 1;
    snprintf(d1, sizeof d1, "%.4000s/st", dir);
    snprintf(d2, sizeof d2, "%.4000s/cfg", dir);
    snprintf(d3, sizeof d3, "%.4000s/q8", dir);
    snprintf(d4, sizeof d4, "%.4000s/q4", dir);
    mkdir(d1, 0755);
    mkdir(d2, 0755);
    mkdir(d3, 0755);
    mkdir(d4, 0755);
    clock_t t0 = clock();
    fuzz_safetensors(d1, 0);
    fuzz_safetensors(d3, 8);
    fuzz_safetensors(d4, 4);
    fuzz_config(d2);
    printf("%.2f s cpu\n", (double)(clock() - t0) / CLOCKS_PER_SEC);
    int rc = check_summary("test_loader_fuzz");
    fl_rmtree(dir); /* the seed is fixed: a failure reproduces without the files */
    return rc;
}
