/* test_forward.c: the CPU forward (engine/cpu/cpu_backend.c) against the PyTorch reference
 * (tests/reference/fogline_ref.py), on random models of both layouts written by
 * tests/reference/parity_forward.py (the ctest fixture in tests/forward.cmake).
 *
 *   test_forward [REF_DIR]      default: $FL_BUILD_DIR/forward_ref
 *
 * Error measure: for each compared position p, max_v |c[p][v] - ref[p][v]| / max_v |ref[p][v]|;
 * a case reports the largest over its positions. Limits: 1e-4 when the weights are kept in
 * f32 (from F32, BF16 or F16 files: both sides widen them exactly) and when a BF16 file is
 * kept as bf16 (bf16_weights: still exact); 5e-2 when an F32/F16 file is kept as bf16 (a
 * quantization, not a parity check). Top-1 token, its probability and the entropy are
 * checked against the reference's float64 softmax of its logits, and against our own logits.
 * KV pages in bf16 (variants "bf16 KV"): KV_TOL more on the logits (seen: 0.0045-0.01 with
 * exact weights, up to 0.021 on top of bf16-rounded ones, on the fast and full models), the
 * stored K/V of layer 0 within bf16's rounding (2^-8) of the reference's, later layers' within
 * the logits' limit; cases C and D bit-exact.
 *
 * Cases (sequence numbers are parity_forward.py's SEQ_BLOCKS; B = the model's block):
 *  A  seq 0: prefill 3 blocks (stored) then decode the 4th block against the pages; the pages
 *     equal the reference's K/V; outputs only from out_from; a page round trip (page_read ->
 *     page_write into other pages) gives bit-identical outputs.
 *  B  seqs 1-4 packed: a prefill batch of 3 sequences, then one batch of 4 segments with
 *     different cached lengths (2B; B+1, a partial page; none; 4B with 2 blocks, storing one).
 *     The partial page's sequence is referenced by two reference forwards (past = the first's
 *     K/V), as a cached partial block sees fewer same-block keys than one full forward.
 *  C  seq 5, decode-store overlap: one segment [2B, 4B) with n_store = B equals a store pass
 *     of block 2 followed by a decode pass of block 3 (outputs and the stored page): bit for
 *     bit with bf16 KV (block 2's keys fresh in one, cached in the other; a kernel that read
 *     the fresh ones unrounded fails here), within 1e-5 for f32 KV or sgemm.
 *  D  block causality: changing the tokens of a later block leaves every output of the
 *     earlier blocks (and of another packed segment, and the stored pages) bit-identical.
 *  E  bad batches return FL_EINVAL with a message and change no page.
 *  F  formats: on a BF16 file, bf16 weights give logits bit-identical to f32 weights (the
 *     same sums in the same order, each weight widened exactly), at every kernel level and
 *     with sgemm; and the matrices the file holds as the backend does (o, down, lm_head:
 *     BF16 for bf16, F32 for f32) are read from the file's mapping, not the arena.
 *  Q  q8/q4 weights: sequence 0 in one forward against quant_ref.py, the reference written
 *     from the formats' specification (variants with q8/q4 weights and f32 KV only).
 *  P  page io: page_write -> page_read gives the values written (f32 KV) or each rounded to
 *     nearest even (bf16 KV); page_read -> page_write -> page_read is exact.
 * Each runs in several backend variants: 2 threads; 1 thread with the streaming kernel for
 * every projection; sgemm for every projection; bf16 weights; and the kernels capped at
 * AVX2 and at plain C (FL_SIMD), so every level this CPU has is checked; q8/q4 weights; and
 * bf16 KV pages with most of these. */
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu/cpu.h"
#include "check.h"
#include "logit_ref.h"
#include "model.h"

#define MAX_SEQ 8
#define PATHN 4096

/* the largest logits error seen per limit class, for the summary line; for q8 and q4 also
 * how often the top-1 token is the reference's */
static double worst_exact, worst_quant, worst_q[2], worst_kv;
static bool kv_class; /* the variant holds its KV pages in bf16 */
static long top1_agree[2], top1_total[2];
static int q_class = -1; /* the variant being compared: 0 q8, 1 q4, -1 neither */
/* Limits for q8 and q4 weights (and activations quantized to int8 per group of 32) against
 * the f32 reference: quantizations, not parity checks (measured on these random models, whose
 * logits are nearly flat: up to 0.073 for q8 and 0.78 for q4, top-1 the reference's at 96% and
 * 57% of positions); a top-1 token that differs from the reference's must be a near-tie
 * within the measured logit error, as for bf16. The exact check of the quantized arithmetic
 * is the kernels' (test_quant); the trained model's quality is bench decode's. */
static const double Q_TOL[2] = {0.15, 1.0};
/* What bf16 KV pages add to the logits' error against the f32 reference (on top of the
 * weights' limit): a measure of the rounding, not a parity check. Set from what these random
 * models show (see the header); the exact checks of bf16 KV are cases C, D and the kernels'. */
#define KV_TOL 4e-2
/* ... and against the quantized reference (case Q) */
#define QSPEC_TOL 0.1
static double worst_qspec[2];
static int qspec_models[2], qspec_exact[2]; /* models compared; of them, exact everywhere */
static bool first_q[2];

typedef struct ref_seq {
    int32_t *tok; /* (T) */
    int T;
    float *logits; /* (T, vocab) */
    float *kv;     /* (L, 2, kvh, T, hd) */
    float *top;    /* (T, 3) token, prob, entropy */
} ref_seq;

typedef struct ref_model {
    char name[64], dir[PATHN];
    bool bf16_file;
    int B, V, L, kvh, hd;
    ref_seq seq[MAX_SEQ];
    int n_seq;
    float *qlogits[2]; /* (T of seq 0, vocab): seq 0 with q8 / q4 weights (quant_ref.py) */
    fl_model *m;
} ref_model;

typedef struct variant {
    const char *name;
    int threads;
    const char *sgemm_rows; /* FL_SGEMM_ROWS, NULL: default */
    fl_wformat weights;
    const char *simd; /* FL_SIMD: NULL (best), "avx2", "plain" */
    fl_kvformat kv;
} variant;

#define F32 FL_WEIGHTS_F32
#define BF16 FL_WEIGHTS_BF16
#define Q8 FL_WEIGHTS_Q8
#define Q4 FL_WEIGHTS_Q4
#define KV_AUTO FL_KV_AUTO
#define KV_F32 FL_KV_F32
#define KV_BF16 FL_KV_BF16
static const variant VARIANTS[] = {
    {"2 threads", 2, NULL, F32, NULL, KV_AUTO},
    {"1 thread, streaming kernel only", 1, "1000000", F32, NULL, KV_AUTO},
    {"2 threads, sgemm only", 2, "1", F32, NULL, KV_AUTO},
    {"bf16 weights", 2, NULL, BF16, NULL, KV_AUTO},
    {"bf16 weights, sgemm only", 2, "1", BF16, NULL, KV_AUTO},
    {"auto weights", 2, NULL, FL_WEIGHTS_AUTO, NULL, KV_AUTO},
    {"AVX2 kernels, streaming only", 2, "1000000", F32, "avx2", KV_AUTO},
    {"AVX2 kernels, bf16 weights", 2, "1000000", BF16, "avx2", KV_AUTO},
    {"plain C kernels", 2, NULL, F32, "plain", KV_AUTO},
    {"plain C kernels, bf16 weights", 2, "1000000", BF16, "plain", KV_AUTO},
    {"q8 weights", 2, NULL, Q8, NULL, KV_AUTO},
    {"q4 weights", 2, NULL, Q4, NULL, KV_AUTO},
    {"q8 weights, 1 thread, AVX2 kernels", 1, NULL, Q8, "avx2", KV_AUTO},
    {"q4 weights, AVX2 kernels", 2, NULL, Q4, "avx2", KV_AUTO},
    {"q8 weights, plain C kernels", 2, NULL, Q8, "plain", KV_AUTO},
    {"q4 weights, plain C kernels", 2, NULL, Q4, "plain", KV_AUTO},
    {"f32 KV asked", 2, NULL, F32, NULL, KV_F32},
    {"bf16 KV, streaming kernel only", 2, "1000000", F32, NULL, KV_BF16},
    {"bf16 KV, 1 thread, streaming kernel only", 1, "1000000", F32, NULL, KV_BF16},
    {"bf16 KV, sgemm only", 2, "1", F32, NULL, KV_BF16},
    {"bf16 KV, bf16 weights", 2, "1000000", BF16, NULL, KV_BF16},
    {"bf16 KV, AVX2 kernels", 2, "1000000", F32, "avx2", KV_BF16},
    {"bf16 KV, plain C kernels", 2, "1000000", F32, "plain", KV_BF16},
    {"bf16 KV, q8 weights", 2, NULL, Q8, NULL, KV_BF16},
};

static float *read_f32(const char *dir, const char *name, size_t n)
{
    char p[2 * PATHN];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "rb");
    float *v = malloc(n * sizeof *v);
    size_t got = f && v ? fread(v, sizeof *v, n, f) : 0;
    if (f)
        fclose(f);
    if (got != n) {
        fprintf(stderr, "%s: expected %zu floats, read %zu\n", p, n, got);
        free(v);
        return NULL;
    }
    return v;
}

static int load_ref(ref_model *rm, const char *root, const char *name)
{
    memset(rm, 0, sizeof *rm);
    snprintf(rm->name, sizeof rm->name, "%s", name);
    if (snprintf(rm->dir, sizeof rm->dir, "%s/%s", root, name) >= (int)sizeof rm->dir)
        return -1;
    char p[PATHN + 16];
    snprintf(p, sizeof p, "%s/ref.json", rm->dir);
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je);
    if (!j) {
        fprintf(stderr, "%s: %s\n", p, je.text);
        return -1;
    }
    rm->bf16_file = !strcmp(json_string_value(json_object_get(j, "dtype")), "bf16");
    rm->B = (int)json_integer_value(json_object_get(j, "block"));
    rm->V = (int)json_integer_value(json_object_get(j, "vocab"));
    rm->L = (int)json_integer_value(json_object_get(j, "n_layers"));
    rm->kvh = (int)json_integer_value(json_object_get(j, "n_kv_heads"));
    rm->hd = (int)json_integer_value(json_object_get(j, "head_dim"));
    json_t *seqs = json_object_get(j, "seqs");
    rm->n_seq = (int)json_array_size(seqs);
    int rc = rm->n_seq == 6 ? 0 : -1;
    for (int s = 0; s < rm->n_seq && s < MAX_SEQ && !rc; s++) {
        json_t *js = json_array_get(seqs, (size_t)s), *jt = json_object_get(js, "tokens");
        ref_seq *q = &rm->seq[s];
        q->T = (int)json_array_size(jt);
        q->tok = malloc((size_t)q->T * sizeof *q->tok);
        for (int i = 0; i < q->T; i++)
            q->tok[i] = (int32_t)json_integer_value(json_array_get(jt, (size_t)i));
        q->logits = read_f32(rm->dir, json_string_value(json_object_get(js, "logits")),
                             (size_t)q->T * rm->V);
        q->kv = read_f32(rm->dir, json_string_value(json_object_get(js, "kv")),
                         (size_t)rm->L * 2 * rm->kvh * q->T * rm->hd);
        q->top = read_f32(rm->dir, json_string_value(json_object_get(js, "top")), (size_t)q->T * 3);
        if (!q->logits || !q->kv || !q->top)
            rc = -1;
    }
    json_t *jq = json_object_get(j, "quant");
    for (int b = 0; b < 2 && !rc; b++) {
        const char *f = json_string_value(json_object_get(jq, b ? "q4" : "q8"));
        rm->qlogits[b] = f ? read_f32(rm->dir, f, (size_t)rm->seq[0].T * rm->V) : NULL;
        if (!rm->qlogits[b])
            rc = -1;
    }
    json_decref(j);
    fl_err e = {0};
    fl_load_opts lo = {.no_tokenizer = true};
    if (!rc && fl_model_load(&rm->m, rm->dir, &lo, &e)) {
        fprintf(stderr, "%s: %s\n", rm->dir, e.msg);
        rc = -1;
    }
    return rc;
}

static void free_ref(ref_model *rm)
{
    for (int s = 0; s < rm->n_seq && s < MAX_SEQ; s++) {
        free(rm->seq[s].tok);
        free(rm->seq[s].logits);
        free(rm->seq[s].kv);
        free(rm->seq[s].top);
    }
    free(rm->qlogits[0]);
    free(rm->qlogits[1]);
    fl_model_free(rm->m);
}

/* ---------------------------------------------------------------- running batches */

static int sgemm_rows_env; /* rows from which the backend takes sgemm: the variant's
                              FL_SGEMM_ROWS, or the default (never on x86) */

typedef struct seg_spec {
    int seq, pos0, n, n_store, out_from;
    const int32_t *pages;
    const uint8_t *want; /* NULL, or (n): fl_segment.want */
} seg_spec;

typedef struct run_out {
    int n;              /* tokens */
    fl_tok_out *out;    /* (n) */
    float *logits;      /* (n, vocab) */
} run_out;

static void run_free(run_out *r)
{
    free(r->out);
    free(r->logits);
    memset(r, 0, sizeof *r);
}

/* Runs one batch of segments over the reference sequences' tokens; tokens may be
 * overridden by tok (a full copy of the concatenated batch tokens). */
static int run_batch(fl_backend *b, const ref_model *rm, const seg_spec *ss, int ns,
                     const int32_t *tok, run_out *r, fl_err *e)
{
    int n = 0;
    for (int s = 0; s < ns; s++)
        n += ss[s].n;
    int32_t *tokens = malloc((size_t)n * sizeof *tokens);
    fl_segment *segs = calloc((size_t)ns, sizeof *segs);
    r->n = n;
    r->out = malloc((size_t)n * sizeof *r->out);
    r->logits = malloc((size_t)n * rm->V * sizeof *r->logits);
    for (int i = 0; i < n; i++)
        r->out[i] = (fl_tok_out){-7, -7.0f, -7.0f}; /* sentinel: "not written" */
    for (size_t i = 0; i < (size_t)n * rm->V; i++)
        r->logits[i] = NAN;
    int t = 0;
    for (int s = 0; s < ns; s++) {
        memcpy(tokens + t, rm->seq[ss[s].seq].tok + ss[s].pos0, (size_t)ss[s].n * sizeof *tokens);
        segs[s] = (fl_segment){ss[s].n, ss[s].pos0, ss[s].n_store, ss[s].out_from, ss[s].pages,
                               ss[s].want};
        t += ss[s].n;
    }
    if (tok)
        memcpy(tokens, tok, (size_t)n * sizeof *tokens);
    fl_batch bt = {tokens, n, segs, ns};
    int rc = fl_forward(b, &bt, r->out, r->logits, e);
    free(tokens);
    free(segs);
    return rc;
}

/* Max per-position relative error of logits rows vs the reference, over the wanted rows
 * of every segment; checks the top-1 outputs too. */
static double compare(const ref_model *rm, const seg_spec *ss, int ns, const run_out *r,
                      double tol, const char *what)
{
    int V = rm->V, t = 0;
    double worst = 0, worst_top = 0, worst_self = 0;
    int bad_tok = 0, bad_sentinel = 0;
    double top_tol = tol <= 1e-4 ? 1e-4 : tol;
    for (int s = 0; s < ns; s++) {
        const ref_seq *q = &rm->seq[ss[s].seq];
        for (int i = 0; i < ss[s].n; i++, t++) {
            const fl_tok_out *o = &r->out[t];
            if (i < ss[s].out_from || (ss[s].want && !ss[s].want[i])) {
                if (o->token != -7 || o->prob != -7.0f || !isnan(r->logits[(size_t)t * V]))
                    bad_sentinel++;
                continue;
            }
            int p = ss[s].pos0 + i;
            const float *ref = q->logits + (size_t)p * V, *got = r->logits + (size_t)t * V;
            double mref = 0, md = 0;
            for (int v = 0; v < V; v++) {
                mref = fmax(mref, fabs(ref[v]));
                double d = fabs((double)got[v] - ref[v]);
                md = isnan(d) ? INFINITY : fmax(md, d);
            }
            worst = fmax(worst, md / (mref > 0 ? mref : 1));
            /* top-1 vs the reference's float64 softmax */
            const float *tp = q->top + (size_t)p * 3;
            int rt = (int)tp[0];
            if (q_class >= 0) {
                top1_agree[q_class] += o->token == rt;
                top1_total[q_class]++;
            }
            if (o->token != rt) {
                /* a near-tie may flip within the tolerance: the two logits must then agree */
                if (fabs((double)ref[o->token] - ref[rt]) > 2 * md)
                    bad_tok++;
            }
            worst_top = fmax(worst_top, fabs((double)o->prob - tp[1]));
            worst_top = fmax(worst_top, fabs((double)o->entropy - tp[2]) / fmax(1.0, tp[2]));
            /* the fused statistics vs our own logits, in double */
            double p1, h;
            if (o->token != fl_ref_top1(got, V, &p1, &h))
                bad_tok++;
            worst_self = fmax(worst_self, fabs(o->prob - p1));
            worst_self = fmax(worst_self, fabs(o->entropy - h) / fmax(1.0, h));
        }
    }
    CHECK(worst <= tol, "%s: %s: logits max rel err %.3g > %.0e", rm->name, what, worst, tol);
    if (q_class >= 0)
        worst_q[q_class] = fmax(worst_q[q_class], worst);
    else if (kv_class)
        worst_kv = fmax(worst_kv, worst);
    else if (tol <= 1e-4)
        worst_exact = fmax(worst_exact, worst);
    else
        worst_quant = fmax(worst_quant, worst);
    CHECK(bad_tok == 0, "%s: %s: %d wrong top-1 tokens", rm->name, what, bad_tok);
    CHECK(worst_top <= top_tol, "%s: %s: prob/entropy err %.3g vs reference", rm->name, what,
          worst_top);
    CHECK(worst_self <= 1e-5, "%s: %s: prob/entropy err %.3g vs own logits", rm->name, what,
          worst_self);
    CHECK(bad_sentinel == 0, "%s: %s: %d outputs written that were not wanted", rm->name, what,
          bad_sentinel);
    return worst;
}

/* The stored K/V of positions [p0, p1) of a sequence vs the reference's: within tol, and
 * layer 0's (which no attention has touched yet) within tol0. */
static double compare_pages(fl_backend *b, const ref_model *rm, int seq, const int32_t *pages,
                            int p0, int p1, double tol, double tol0, const char *what)
{
    const ref_seq *q = &rm->seq[seq];
    int B = rm->B, hd = rm->hd;
    float *pg = malloc(b->page_bytes);
    double worst = 0, mref = 0, md = 0, mref0 = 0, md0 = 0;
    fl_err e = {0};
    for (int blk = p0 / B; blk * B < p1; blk++) {
        CHECK(b->ops->page_read(b, pages[blk], pg, &e) == 0, "page_read: %s", e.msg);
        for (int l = 0; l < rm->L; l++)
            for (int kv = 0; kv < 2; kv++)
                for (int h = 0; h < rm->kvh; h++)
                    for (int p = blk * B; p < (blk + 1) * B; p++) {
                        if (p < p0 || p >= p1)
                            continue;
                        const float *g = pg + ((((size_t)l * 2 + kv) * rm->kvh + h) * B + p % B) * hd;
                        const float *r = q->kv + ((((size_t)l * 2 + kv) * rm->kvh + h) * q->T + p) * hd;
                        for (int d = 0; d < hd; d++) {
                            mref = fmax(mref, fabs(r[d]));
                            md = fmax(md, fabs((double)g[d] - r[d]));
                            if (l == 0) {
                                mref0 = fmax(mref0, fabs(r[d]));
                                md0 = fmax(md0, fabs((double)g[d] - r[d]));
                            }
                        }
                    }
    }
    worst = md / (mref > 0 ? mref : 1);
    double worst0 = md0 / (mref0 > 0 ? mref0 : 1);
    CHECK(worst <= tol, "%s: %s: stored K/V max rel err %.3g > %.0e", rm->name, what, worst, tol);
    CHECK(worst0 <= tol0, "%s: %s: stored K/V of layer 0 max rel err %.3g > %.2g", rm->name,
          what, worst0, tol0);
    free(pg);
    return worst;
}

static double rel_diff(const float *a, const float *b, size_t n)
{
    double m = 0, d = 0;
    for (size_t i = 0; i < n; i++) {
        m = fmax(m, fabs(b[i]));
        d = fmax(d, fabs((double)a[i] - b[i]));
    }
    return d / (m > 0 ? m : 1);
}

/* ---------------------------------------------------------------- cases */

static int32_t *pages_for(int first, int n)
{
    int32_t *p = malloc((size_t)n * sizeof *p);
    for (int i = 0; i < n; i++)
        p[i] = first + i;
    return p;
}

static void case_prefill_decode(fl_backend *b, const ref_model *rm, double tol, double ptol,
                                const char *vn)
{
    int B = rm->B;
    fl_err e = {0};
    int32_t *pg = pages_for(0, 4), *pg2 = pages_for(40, 4);
    char what[160];
    run_out r = {0};
    seg_spec pre = {0, 0, 3 * B, 3 * B, 0, pg, NULL};
    int rc = run_batch(b, rm, &pre, 1, NULL, &r, &e);
    CHECK(rc == 0, "%s: prefill: %s", rm->name, e.msg);
    snprintf(what, sizeof what, "[%s] A prefill 3 blocks", vn);
    if (!rc) {
        compare(rm, &pre, 1, &r, tol, what);
        compare_pages(b, rm, 0, pg, 0, 3 * B, tol, ptol, what);
    }
    run_free(&r);
    seg_spec dec = {0, 3 * B, B, 0, 1, pg, NULL}; /* out_from 1: position 0 must stay untouched */
    rc = run_batch(b, rm, &dec, 1, NULL, &r, &e);
    CHECK(rc == 0, "%s: decode: %s", rm->name, e.msg);
    snprintf(what, sizeof what, "[%s] A decode block 4 vs cache", vn);
    if (!rc)
        compare(rm, &dec, 1, &r, tol, what);
    /* page round trip into other pages: the same outputs, bit for bit */
    void *buf = malloc(b->page_bytes);
    for (int i = 0; i < 3; i++) {
        CHECK(b->ops->page_read(b, pg[i], buf, &e) == 0, "page_read: %s", e.msg);
        CHECK(b->ops->page_write(b, pg2[i], buf, &e) == 0, "page_write: %s", e.msg);
    }
    free(buf);
    run_out r2 = {0};
    seg_spec dec2 = dec;
    dec2.pages = pg2;
    rc = run_batch(b, rm, &dec2, 1, NULL, &r2, &e);
    CHECK(rc == 0, "%s: decode from copied pages: %s", rm->name, e.msg);
    if (!rc && r.out)
        CHECK(!memcmp(r.logits + (size_t)1 * rm->V, r2.logits + (size_t)1 * rm->V,
                      (size_t)(B - 1) * rm->V * sizeof(float)),
              "%s: [%s] outputs differ after a page round trip", rm->name, vn);
    /* only some outputs wanted (fl_segment.want): those, bit for bit as when all are wanted,
       and nothing written for the others (the lm_head runs over the wanted rows only) */
    run_free(&r2);
    uint8_t want[64] = {0};
    for (int i = 0; i < B && i < 64; i++)
        want[i] = i % 3 == 2 || i == B - 1;
    seg_spec dec3 = dec;
    dec3.want = want;
    rc = run_batch(b, rm, &dec3, 1, NULL, &r2, &e);
    CHECK(rc == 0, "%s: decode, some outputs wanted: %s", rm->name, e.msg);
    snprintf(what, sizeof what, "[%s] A decode, some outputs wanted", vn);
    /* bit for bit where no head can take OpenBLAS's path (q8/q4, or FL_SGEMM_ROWS above a
       block's rows): sgemm's sums depend on the row count, as they do across batch sizes;
       else within the reference's tolerance (compare) */
    bool bitwise = q_class >= 0 || sgemm_rows_env > B;
    if (!rc && r.out) {
        compare(rm, &dec3, 1, &r2, tol, what);
        for (int i = 1; i < B && bitwise; i++)
            if (want[i])
                CHECK(!memcmp(&r.out[i], &r2.out[i], sizeof r.out[i]) &&
                          !memcmp(r.logits + (size_t)i * rm->V, r2.logits + (size_t)i * rm->V,
                                  (size_t)rm->V * sizeof(float)),
                      "%s: [%s] output %d differs when fewer are wanted", rm->name, vn, i);
    }
    run_free(&r);
    run_free(&r2);
    free(pg);
    free(pg2);
}

static void case_packed(fl_backend *b, const ref_model *rm, double tol, double ptol,
                        const char *vn)
{
    int B = rm->B;
    fl_err e = {0};
    int32_t *p1 = pages_for(4, 3), *p2 = pages_for(8, 3), *p4 = pages_for(12, 6);
    char what[160];
    run_out r = {0};
    /* prefill three sequences in one batch (outputs compared too) */
    seg_spec pre[3] = {
        {1, 0, 2 * B, 2 * B, 0, p1, NULL},
        {2, 0, B + 1, B + 1, 0, p2, NULL},
        {4, 0, 4 * B, 4 * B, 0, p4, NULL},
    };
    int rc = run_batch(b, rm, pre, 3, NULL, &r, &e);
    CHECK(rc == 0, "%s: packed prefill: %s", rm->name, e.msg);
    snprintf(what, sizeof what, "[%s] B packed prefill", vn);
    if (!rc)
        compare(rm, pre, 3, &r, tol, what);
    run_free(&r);
    /* one batch, four sequences, four different cached lengths */
    seg_spec dec[4] = {
        {4, 4 * B, 2 * B, B, 0, p4, NULL},     /* two blocks, the first stored */
        {1, 2 * B, B, 0, 0, p1, NULL},         /* one block after two cached */
        {3, 0, B, 0, 0, NULL, NULL},           /* nothing cached */
        {2, B + 1, 2 * B - 1, 0, 0, p2, NULL}, /* starts inside a block (partial page) */
    };
    rc = run_batch(b, rm, dec, 4, NULL, &r, &e);
    CHECK(rc == 0, "%s: packed decode: %s", rm->name, e.msg);
    snprintf(what, sizeof what, "[%s] B packed decode, 4 sequences", vn);
    if (!rc) {
        compare(rm, dec, 4, &r, tol, what);
        compare_pages(b, rm, 4, p4, 0, 5 * B, tol, ptol, what);
    }
    run_free(&r);
    free(p1);
    free(p2);
    free(p4);
}

/* rel_diff of two bf16 pages' values (n) */
static double bf16_rel_diff(const uint16_t *a, const uint16_t *b, size_t n)
{
    double m = 0, d = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t ua = (uint32_t)a[i] << 16, ub = (uint32_t)b[i] << 16;
        float fa, fb;
        memcpy(&fa, &ua, 4);
        memcpy(&fb, &ub, 4);
        m = fmax(m, fabs(fb));
        d = fmax(d, fabs((double)fa - fb));
    }
    return d / (m > 0 ? m : 1);
}

/* The two schedules agree within otol, or bit for bit when otol is 0 (bf16 KV, whose every
 * key attention reads is the rounded value wherever it comes from, with projections whose
 * rows never depend on the batch: the streaming and q8/q4 kernels). sgemm's sums may depend
 * on the number of rows (OpenBLAS picks kernels by shape): 1e-5 for f32 KV; with bf16 KV a
 * last-bit difference can round a K/V value to the other bf16 neighbour, 2^-8 of it (seen:
 * 2e-5 of the logits), so 1e-3 for the logits; a stored value that rounds the other way moves
 * by one bf16 ulp, up to 2^-7 of itself, so of the page's largest value: 2^-7 for the pages
 * (seen: 2.2e-3 with an Intel Xeon's OpenBLAS kernels; the values are compared as bf16). */
static void case_overlap(fl_backend *b, const ref_model *rm, double tol, double ptol,
                         double otol, const char *vn)
{
    int B = rm->B, V = rm->V;
    fl_err e = {0};
    int32_t *pa = pages_for(20, 4), *pb = pages_for(24, 4);
    char what[160];
    run_out r = {0}, rs = {0}, rd = {0};
    seg_spec pre = {5, 0, 2 * B, 2 * B, 2 * B, pa, NULL};
    int rc = run_batch(b, rm, &pre, 1, NULL, &r, &e);
    CHECK(rc == 0, "%s: overlap prefill: %s", rm->name, e.msg);
    run_free(&r);
    void *buf = malloc(b->page_bytes), *buf2 = malloc(b->page_bytes);
    for (int i = 0; i < 2; i++) {
        b->ops->page_read(b, pa[i], buf, &e);
        b->ops->page_write(b, pb[i], buf, &e);
    }
    /* together: block 2 (clean, stored) + block 3 (masked) */
    seg_spec both = {5, 2 * B, 2 * B, B, 0, pa, NULL};
    rc = run_batch(b, rm, &both, 1, NULL, &r, &e);
    CHECK(rc == 0, "%s: overlap: %s", rm->name, e.msg);
    snprintf(what, sizeof what, "[%s] C store+decode in one pass", vn);
    if (!rc) {
        compare(rm, &both, 1, &r, tol, what);
        compare_pages(b, rm, 5, pa, 2 * B, 3 * B, tol, ptol, what);
    }
    /* apart: a store pass of block 2, then a decode pass of block 3 */
    seg_spec st = {5, 2 * B, B, B, B, pb, NULL}, dc = {5, 3 * B, B, 0, 0, pb, NULL};
    rc = run_batch(b, rm, &st, 1, NULL, &rs, &e);
    CHECK(rc == 0, "%s: store pass: %s", rm->name, e.msg);
    rc = rc ? rc : run_batch(b, rm, &dc, 1, NULL, &rd, &e);
    CHECK(rc == 0, "%s: decode pass: %s", rm->name, e.msg);
    if (!rc && r.logits) {
        double d = rel_diff(r.logits + (size_t)B * V, rd.logits, (size_t)B * V);
        bool exact = otol == 0;
        otol = exact ? 1e-5 : otol;
        CHECK(d <= otol, "%s: [%s] overlap vs separate passes: logits rel diff %.3g", rm->name,
              vn, d);
        for (int i = 0; i < B; i++)
            CHECK(r.out[B + i].token == rd.out[i].token, "%s: [%s] overlap top-1 differs at %d",
                  rm->name, vn, i);
        b->ops->page_read(b, pa[2], buf, &e);
        b->ops->page_read(b, pb[2], buf2, &e);
        if (b->kv == FL_KV_BF16) {
            d = bf16_rel_diff(buf, buf2, b->page_bytes / 2);
            CHECK(d <= (exact ? 0 : 0x1p-7), "%s: [%s] overlap vs separate passes: stored page "
                  "rel diff %.3g", rm->name, vn, d);
        } else {
            d = rel_diff(buf, buf2, b->page_bytes / 4);
            CHECK(d <= otol, "%s: [%s] overlap vs separate passes: stored page rel diff %.3g",
                  rm->name, vn, d);
        }
        if (exact) {
            size_t diff = 0;
            for (size_t k = 0; k < (size_t)B * V; k++)
                diff += memcmp(&r.logits[(size_t)B * V + k], &rd.logits[k], sizeof(float)) != 0;
            for (int i = 0; i < B; i++)
                diff += r.out[B + i].prob != rd.out[i].prob ||
                        r.out[B + i].entropy != rd.out[i].entropy;
            CHECK(diff == 0, "%s: [%s] overlap vs separate passes: %zu logits or outputs not "
                  "bit-identical", rm->name, vn, diff);
            CHECK(!memcmp(buf, buf2, b->page_bytes), "%s: [%s] overlap vs separate passes: "
                  "stored pages not bit-identical", rm->name, vn);
        }
    }
    free(buf);
    free(buf2);
    run_free(&r);
    run_free(&rs);
    run_free(&rd);
    free(pa);
    free(pb);
}

static void case_causal(fl_backend *b, const ref_model *rm, const char *vn)
{
    int B = rm->B, V = rm->V;
    fl_err e = {0};
    int32_t *pc = pages_for(30, 3), *pd = pages_for(33, 3);
    /* segment 0: seq 4 positions [0, 3B), blocks 0-1 stored; segment 1: seq 0's first block */
    seg_spec ss[2] = {{4, 0, 3 * B, 2 * B, 0, pc, NULL}, {0, 0, B, 0, 0, NULL, NULL}};
    int n = 4 * B;
    int32_t *tok = malloc((size_t)n * sizeof *tok);
    memcpy(tok, rm->seq[4].tok, (size_t)3 * B * sizeof *tok);
    memcpy(tok + 3 * B, rm->seq[0].tok, (size_t)B * sizeof *tok);
    run_out r1 = {0}, r2 = {0};
    int rc = run_batch(b, rm, ss, 2, tok, &r1, &e);
    CHECK(rc == 0, "%s: causal run 1: %s", rm->name, e.msg);
    for (int i = 2 * B; i < 3 * B; i++)
        tok[i] = (tok[i] + 1 + i) % V; /* another block 2 */
    ss[0].pages = pd;
    rc = rc ? rc : run_batch(b, rm, ss, 2, tok, &r2, &e);
    CHECK(rc == 0, "%s: causal run 2: %s", rm->name, e.msg);
    if (!rc) {
        int diff_early = 0, diff_other = 0, diff_late = 0;
        for (size_t i = 0; i < (size_t)2 * B * V; i++)
            diff_early += r1.logits[i] != r2.logits[i];
        for (size_t i = (size_t)3 * B * V; i < (size_t)4 * B * V; i++)
            diff_other += r1.logits[i] != r2.logits[i];
        for (size_t i = (size_t)2 * B * V; i < (size_t)3 * B * V; i++)
            diff_late += r1.logits[i] != r2.logits[i];
        CHECK(diff_early == 0, "%s: [%s] block-causality: %d logits of blocks 0-1 changed when "
              "block 2 changed", rm->name, vn, diff_early);
        CHECK(diff_other == 0, "%s: [%s] block-causality: %d logits of another segment changed",
              rm->name, vn, diff_other);
        CHECK(diff_late > 0, "%s: [%s] block 2's own logits did not change (test is void)",
              rm->name, vn);
        for (int i = 0; i < 2 * B; i++)
            CHECK(r1.out[i].token == r2.out[i].token && r1.out[i].prob == r2.out[i].prob &&
                  r1.out[i].entropy == r2.out[i].entropy,
                  "%s: [%s] block-causality: top-1 output %d changed", rm->name, vn, i);
        void *a = malloc(b->page_bytes), *c = malloc(b->page_bytes);
        for (int i = 0; i < 2; i++) {
            b->ops->page_read(b, pc[i], a, &e);
            b->ops->page_read(b, pd[i], c, &e);
            CHECK(!memcmp(a, c, b->page_bytes), "%s: [%s] block-causality: stored page %d "
                  "differs", rm->name, vn, i);
        }
        free(a);
        free(c);
    }
    run_free(&r1);
    run_free(&r2);
    free(tok);
    free(pc);
    free(pd);
}

/* page_write then page_read: f32 pages give back the values written; bf16 pages each value
 * rounded to nearest even (fl_f32_to_bf16), and a page_read's values written back come back
 * bit for bit (the host layout round trip is exact). */
static void case_page_io(fl_backend *b, const ref_model *rm, const char *vn)
{
    size_t n = b->page_bytes / sizeof(float);
    float *w = malloc(b->page_bytes), *r = malloc(b->page_bytes), *r2 = malloc(b->page_bytes);
    fl_err e = {0};
    uint32_t rng = 7;
    for (size_t i = 0; i < n; i++) {
        rng = rng * 1664525u + 1013904223u;
        uint32_t u = (rng & 0x807fffffu) | ((uint32_t)(110 + (rng >> 24) % 30) << 23);
        if (i % 9 == 4) /* exactly halfway between two bf16 values */
            u = (u & 0xffff0000u) | 0x8000u;
        memcpy(&w[i], &u, 4);
    }
    int32_t pg = b->n_pages - 1, pg2 = b->n_pages - 2;
    CHECK(b->ops->page_write(b, pg, w, &e) == 0 && b->ops->page_read(b, pg, r, &e) == 0,
          "%s: [%s] page io: %s", rm->name, vn, e.msg);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float want = b->kv == FL_KV_BF16 ? fl_bf16_to_f32(fl_f32_to_bf16(w[i])) : w[i];
        bad += memcmp(&r[i], &want, sizeof want) != 0;
    }
    CHECK(bad == 0, "%s: [%s] page_write -> page_read: %zu of %zu values not %s", rm->name, vn,
          bad, n, b->kv == FL_KV_BF16 ? "rounded to bf16" : "as written");
    CHECK(b->ops->page_write(b, pg2, r, &e) == 0 && b->ops->page_read(b, pg2, r2, &e) == 0,
          "%s: [%s] page io: %s", rm->name, vn, e.msg);
    CHECK(!memcmp(r, r2, b->page_bytes), "%s: [%s] page_read -> page_write -> page_read is not "
          "exact", rm->name, vn);
    free(w);
    free(r);
    free(r2);
}

static void expect_einval(fl_backend *b, const fl_batch *bt, const char *what)
{
    fl_err e = {0};
    fl_tok_out out[64];
    int rc = fl_forward(b, bt, out, NULL, &e);
    CHECK(rc == FL_EINVAL, "bad batch (%s): returned %d, want FL_EINVAL", what, rc);
    CHECK(e.msg[0] != 0, "bad batch (%s): no message", what);
}

static void case_bad(fl_backend *b, const ref_model *rm)
{
    int B = rm->B;
    int32_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int32_t pg[4] = {0, 1, 2, 3}, badpg[2] = {0, b->n_pages};
    fl_segment s = {4, 0, 4, 0, pg, NULL};
    fl_batch ok = {tok, 4, &s, 1};
    void *before = malloc(b->page_bytes), *after = malloc(b->page_bytes);
    fl_err e = {0};
    b->ops->page_read(b, 0, before, &e);

    fl_batch bt = ok;
    expect_einval(b, NULL, "no batch");
    bt.n_tokens = 0;
    expect_einval(b, &bt, "no tokens");
    bt = ok;
    bt.n_tokens = b->max_tokens + 1;
    expect_einval(b, &bt, "more than max_tokens");
    bt = ok;
    bt.tokens = NULL;
    expect_einval(b, &bt, "NULL tokens");
    bt = ok;
    bt.n_segs = 0;
    expect_einval(b, &bt, "no segments");
    bt = ok;
    bt.n_tokens = 5;
    expect_einval(b, &bt, "segments shorter than n_tokens");
    fl_segment t = s;
    bt = ok;
    bt.segs = &t;
    t.n = 5;
    expect_einval(b, &bt, "segments longer than n_tokens");
    t = s;
    t.n = 0;
    expect_einval(b, &bt, "empty segment");
    t = s;
    t.pos0 = -1;
    expect_einval(b, &bt, "negative pos0");
    t = s;
    t.pos0 = rm->m->cfg.max_pos - 2;
    t.n_store = 0;
    expect_einval(b, &bt, "past max_position");
    t = s;
    t.n_store = 5;
    expect_einval(b, &bt, "n_store > n");
    t = s;
    t.n_store = -1;
    expect_einval(b, &bt, "negative n_store");
    t = s;
    t.out_from = 5;
    expect_einval(b, &bt, "out_from > n");
    t = s;
    t.pages = NULL;
    expect_einval(b, &bt, "stores with no page table");
    t = s;
    t.pos0 = B; /* reads block 0 from pages */
    t.n_store = 0;
    t.pages = NULL;
    expect_einval(b, &bt, "cached positions with no page table");
    t = s;
    t.pos0 = B;
    t.pages = badpg; /* block 1 (written) is page n_pages */
    expect_einval(b, &bt, "page id out of range");
    badpg[1] = -1;
    expect_einval(b, &bt, "negative page id");
    t = s;
    int32_t tk2[8];
    memcpy(tk2, tok, sizeof tk2);
    tk2[3] = rm->V;
    bt = ok;
    bt.tokens = tk2;
    expect_einval(b, &bt, "token id = vocab");
    tk2[3] = -1;
    expect_einval(b, &bt, "negative token id");
    CHECK(b->ops->page_read(b, b->n_pages, after, &e) == FL_EINVAL, "page_read past the pool");
    CHECK(b->ops->page_write(b, -1, after, &e) == FL_EINVAL, "page_write of page -1");
    b->ops->page_read(b, 0, after, &e);
    CHECK(!memcmp(before, after, b->page_bytes), "a rejected batch changed a page");
    /* and the backend still works */
    fl_tok_out out[4];
    CHECK(fl_forward(b, &ok, out, NULL, &e) == 0, "good batch after bad ones: %s", e.msg);
    free(before);
    free(after);
}

/* Q: q8/q4 weights against the reference that computes them from their specification
 * (quant_ref.py): sequence 0 in one forward, every output. Where no activation lands on a
 * rounding boundary the two agree to float rounding (~2e-7 of the largest logit). One that
 * does (our f32 sums and torch's differ in the last bit, and the value quantizes one step
 * apart) moves the logits of its block and every later one by up to a few percent (seen:
 * 0.048 at q8 on a tiny model), so a position passes within QSPEC_TOL; and a third of the
 * models at least (two thirds seen) must agree to 1e-5 at every position, which a wrong
 * scale, row, nibble, group or head format would break in all of them. */
static void case_quant_spec(fl_backend *b, const ref_model *rm, int q, const char *vn)
{
    int B = rm->B, T = rm->seq[0].T;
    fl_err e = {0};
    int32_t *pg = pages_for(0, T / B);
    run_out r = {0};
    seg_spec all = {0, 0, T, T, 0, pg, NULL};
    int rc = run_batch(b, rm, &all, 1, NULL, &r, &e);
    CHECK(rc == 0, "%s: [%s] Q forward: %s", rm->name, vn, e.msg);
    double worst = 0;
    int exact = 0;
    for (int p = 0; !rc && p < T; p++) {
        const float *ref = rm->qlogits[q] + (size_t)p * rm->V, *got = r.logits + (size_t)p * rm->V;
        double mref = 0, md = 0;
        for (int v = 0; v < rm->V; v++) {
            mref = fmax(mref, fabs(ref[v]));
            double d = fabs((double)got[v] - ref[v]);
            md = isnan(d) ? INFINITY : fmax(md, d);
        }
        worst = fmax(worst, md / (mref > 0 ? mref : 1));
        exact += md / (mref > 0 ? mref : 1) <= 1e-5;
    }
    CHECK(!rc && worst <= QSPEC_TOL, "%s: [%s] Q logits vs the quantized reference: max rel err "
          "%.3g > %.0e", rm->name, vn, worst, QSPEC_TOL);
    worst_qspec[q] = fmax(worst_qspec[q], worst);
    if (first_q[q]) { /* once per model: every level computes the same bits (test_quant) */
        first_q[q] = false;
        qspec_models[q]++;
        qspec_exact[q] += exact == T;
    }
    run_free(&r);
    free(pg);
}

/* The bytes of o, down and lm_head at es bytes per element: what reads from the mapping. */
static size_t mapped_want(const fl_model *m, size_t es)
{
    const fl_config *c = &m->cfg;
    size_t qd = (size_t)c->n_heads * c->head_dim;
    return ((size_t)c->n_layers * ((size_t)c->hidden * qd + (size_t)c->hidden * c->intermediate) +
            (size_t)c->vocab * c->hidden) * es;
}

static void case_formats(const ref_model *rm)
{
    static const struct { const char *sgemm_rows, *simd; } lv[] = {
        {"1000000", NULL}, {"1", NULL}, {"1000000", "avx2"}, {"1000000", "plain"}};
    fl_dtype dt = rm->m->layers[0].wo->dtype;
    for (size_t i = 0; i < sizeof lv / sizeof lv[0]; i++) {
        setenv("FL_SGEMM_ROWS", lv[i].sgemm_rows, 1);
        if (lv[i].simd)
            setenv("FL_SIMD", lv[i].simd, 1);
        else
            unsetenv("FL_SIMD");
        run_out r[2] = {{0}, {0}};
        int32_t *pg = pages_for(0, 4);
        seg_spec pre = {0, 0, 3 * rm->B, 0, 0, pg, NULL};
        for (int f = 0; f < 2; f++) {
            fl_wformat wf = f ? FL_WEIGHTS_BF16 : FL_WEIGHTS_F32;
            fl_backend_opts o = {.n_pages = 48, .n_threads = 2, .max_tokens = 8 * rm->B,
                                 .weights = wf};
            fl_backend *b = NULL;
            fl_err e = {0};
            CHECK(fl_backend_cpu_create(&b, rm->m, &o, &e) == 0, "%s: create: %s", rm->name,
                  e.msg);
            if (!b)
                continue;
            size_t arena = 0, mapped = 0;
            CHECK(fl_cpu_weight_bytes(b, &arena, &mapped) == 0, "fl_cpu_weight_bytes");
            bool same = dt == (f ? FL_DT_BF16 : FL_DT_F32);
            CHECK(mapped == (same ? mapped_want(rm->m, f ? 2 : 4) : 0),
                  "%s: %s weights: %zu bytes mapped, want %zu", rm->name, fl_wformat_name(wf),
                  mapped, same ? mapped_want(rm->m, f ? 2 : 4) : 0);
            CHECK(run_batch(b, rm, &pre, 1, NULL, &r[f], &e) == 0, "%s: forward: %s", rm->name,
                  e.msg);
            fl_backend_destroy(b);
        }
        if (rm->bf16_file && r[0].logits && r[1].logits) {
            size_t n = (size_t)r[0].n * rm->V, diff = 0;
            for (size_t k = 0; k < n; k++)
                diff += memcmp(&r[0].logits[k], &r[1].logits[k], sizeof(float)) != 0;
            CHECK(diff == 0, "%s: FL_SGEMM_ROWS %s FL_SIMD %s: bf16 weights change %zu of %zu "
                  "logits against f32", rm->name, lv[i].sgemm_rows,
                  lv[i].simd ? lv[i].simd : "-", diff, n);
        }
        run_free(&r[0]);
        run_free(&r[1]);
        free(pg);
    }
}

static void run_model(const ref_model *rm)
{
    case_formats(rm);
    for (size_t vi = 0; vi < sizeof VARIANTS / sizeof VARIANTS[0]; vi++) {
        const variant *v = &VARIANTS[vi];
        if (v->sgemm_rows)
            setenv("FL_SGEMM_ROWS", v->sgemm_rows, 1);
        else
            unsetenv("FL_SGEMM_ROWS");
        if (v->simd)
            setenv("FL_SIMD", v->simd, 1);
        else
            unsetenv("FL_SIMD");
        fl_backend_opts o = {.n_pages = 48, .n_threads = v->threads, .max_tokens = 8 * rm->B,
                             .weights = v->weights, .kv = v->kv};
        fl_backend *b = NULL;
        fl_err e = {0};
        int rc = fl_backend_cpu_create(&b, rm->m, &o, &e);
        CHECK(rc == 0, "%s: create (%s): %s", rm->name, v->name, e.msg);
        if (rc)
            continue;
        sgemm_rows_env = fl_cpu_sgemm_rows(b);
        CHECK(sgemm_rows_env >= 1 && (!v->sgemm_rows || sgemm_rows_env == atoi(v->sgemm_rows)),
              "%s (%s): sgemm from %d rows", rm->name, v->name, sgemm_rows_env);
#if defined(__x86_64__)
        /* exact by default: on x86 no forward takes sgemm unless FL_SGEMM_ROWS asks, so no
         * row's outputs depend on the batch (the checks below are then bit for bit) */
        if (!v->sgemm_rows && (!v->simd || strcmp(v->simd, "plain")))
            CHECK(sgemm_rows_env == INT_MAX, "%s (%s): sgemm by default from %d rows", rm->name,
                  v->name, sgemm_rows_env);
#endif
        /* bf16 storage of a BF16 file is exact: the same limit as f32. Of an F32/F16 file it
         * is a quantization (2^-9 relative per weight, ~1.4e-2 at the logits of these random
         * models): a loose bound that catches a broken conversion, not a parity check. */
        bool bf16 = fl_wformat_resolve(v->weights, rm->m) == FL_WEIGHTS_BF16;
        CHECK(b->weights == fl_wformat_resolve(v->weights, rm->m) &&
              (v->weights != FL_WEIGHTS_AUTO || bf16 == rm->bf16_file),
              "%s (%s): holds %s", rm->name, v->name, fl_wformat_name(b->weights));
        double tol = bf16 && !rm->bf16_file ? 5e-2 : 1e-4;
        q_class = v->weights == Q8 ? 0 : v->weights == Q4 ? 1 : -1;
        if (q_class >= 0)
            tol = Q_TOL[q_class];
        kv_class = v->kv == FL_KV_BF16;
        CHECK(b->kv == (kv_class ? FL_KV_BF16 : FL_KV_F32), "%s (%s): KV pages hold %s", rm->name,
              v->name, fl_kvformat_name(b->kv));
        /* bf16 pages: layer 0's stored K/V each rounded once more (unit roundoff 2^-8 of the
         * value, so of the largest), later layers' and the logits off by up to KV_TOL more
         * (every attention read rounded values) */
        double ptol = tol + (kv_class ? 0x1p-8 * 1.01 : 0);
        if (kv_class)
            tol += KV_TOL;
        case_prefill_decode(b, rm, tol, ptol, v->name);
        case_packed(b, rm, tol, ptol, v->name);
        bool no_sgemm = q_class >= 0 || sgemm_rows_env > 8 * rm->B;
        case_overlap(b, rm, tol, ptol, !kv_class ? 1e-5 : no_sgemm ? 0 : 1e-3, v->name);
        case_causal(b, rm, v->name);
        case_page_io(b, rm, v->name);
        if (q_class >= 0 && !kv_class) /* quant_ref.py's K/V are f32 */
            case_quant_spec(b, rm, q_class, v->name);
        if (vi == 0)
            case_bad(b, rm);
        fl_backend_destroy(b);
    }
    unsetenv("FL_SGEMM_ROWS");
    unsetenv("FL_SIMD");
}

int main(int argc, char **argv)
{
    char root[PATHN];
    if (argc > 1)
        snprintf(root, sizeof root, "%s", argv[1]);
    else
        snprintf(root, sizeof root, "%s/forward_ref",
                 getenv("FL_BUILD_DIR") ? getenv("FL_BUILD_DIR") : ".");
    char p[PATHN + 32];
    snprintf(p, sizeof p, "%s/models.json", root);
    json_error_t je;
    json_t *names = json_load_file(p, 0, &je);
    CHECK(names != NULL, "%s: %s (the fixture tests/reference/parity_forward.py writes it)", p,
          je.text);
    for (size_t i = 0; names && i < json_array_size(names); i++) {
        ref_model rm;
        const char *name = json_string_value(json_array_get(names, i));
        int rc = load_ref(&rm, root, name);
        CHECK(rc == 0, "%s: cannot load the reference data", name);
        if (!rc) {
            int before = check_fails;
            worst_exact = worst_quant = worst_q[0] = worst_q[1] = worst_kv = 0;
            worst_qspec[0] = worst_qspec[1] = 0;
            first_q[0] = first_q[1] = true;
            run_model(&rm);
            printf("%-14s %-6s max rel err of logits: %.2g (f32/exact weights), %.2g (bf16-rounded), "
                   "%.2g (q8), %.2g (q4), %.2g (bf16 KV); vs the quantized reference %.2g (q8), "
                   "%.2g (q4)\n", name, check_fails == before ? "ok" : "FAILED", worst_exact,
                   worst_quant, worst_q[0], worst_q[1], worst_kv, worst_qspec[0], worst_qspec[1]);
        }
        free_ref(&rm);
    }
    json_decref(names);
    for (int q = 0; q < 2; q++) {
        printf("%s: top-1 = the f32 reference's at %ld of %ld positions (%.1f%%); the quantized "
               "reference's logits to 1e-5 at every position in %d of %d models\n",
               q ? "q4" : "q8", top1_agree[q], top1_total[q],
               top1_total[q] ? 100.0 * top1_agree[q] / top1_total[q] : 0.0, qspec_exact[q],
               qspec_models[q]);
        CHECK(qspec_models[q] > 0 && 3 * qspec_exact[q] >= qspec_models[q],
              "%s: the quantized reference agrees to 1e-5 in %d of %d models (a third at least)",
              q ? "q4" : "q8", qspec_exact[q], qspec_models[q]);
    }
    return check_summary("test_forward");
}
