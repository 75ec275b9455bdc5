/* gpu_parity.c: the CUDA backend against the CPU backend on the same model and batches.
 *
 *   gpu_parity [--self-test] [--big] [--q8] [--variant N[,N...]] MODEL_DIR...
 *                                       exit 0: all passed, 1: a check failed, 77: no GPU
 *
 * The CPU backend (bf16 weights, so a BF16 file is exact on both sides) is the reference.
 * Every check prints one PASS/FAIL line with its numbers. The GPU rounds activations to
 * bf16 before each projection and keeps K/V as bf16, so logits agree to bf16 precision:
 *   logits    max over positions of max_v |gpu - cpu| / max_v |cpu|     <= 5e-2
 *   top-1     the same token, or a near tie (|cpu[a] - cpu[b]| <= 2 * the logits error)
 *   prob      |gpu - cpu| <= 5e-3; entropy |gpu - cpu| / max(1, cpu) <= 1e-2
 *   self      the GPU's fused top-1/prob/entropy vs its own logits in double <= 1e-5
 *   K/V       pages (page_read) max rel err <= 3e-2
 * --q8: the GPU holds q8 weights (weight-only 8-bit, docs/cuda.md), still against the CPU's
 * bf16: a quantization, not parity, so the limits are the CPU's q8 ones (tests/unit/
 * test_forward.c Q_TOL: logits 0.15; probability and entropy 5e-2; K/V 0.15; top-1 a near
 * tie within the measured error); the GPU-against-itself checks below stay exact.
 * And, GPU against itself, exactly: a page round trip (page_read -> page_write) changes no
 * output bit; block causality (a later block's tokens change no earlier output bit, nor
 * another segment's); CUDA graph replay equals eager execution bit for bit; outputs with and
 * without a logits buffer agree bit for bit; page_read from another thread during forwards
 * returns the committed bytes.
 *
 * Cases (B = the model's block size; like tests/unit/test_forward.c):
 *  A prefill 3 blocks + decode the 4th (out_from 1), page round trip
 *  B packed prefill of 3 sequences, then 4 ragged segments (stored + running, a partial page)
 *  C one segment storing block 2 while decoding block 3, vs two passes
 *  D block causality            E bad batches: FL_EINVAL, no page changed
 *  F a long context (prefill in chunks, the attention split across blocks), then decode
 *  G segments of 1 and 3 tokens (the streaming matmul's row counts)
 *  H repeated batch shapes without logits (graphs capture and replay)
 *  I page_read on another thread while forwards store other pages
 *  J memory plan: a model that does not fit, a pool clamped to free memory, n_pages 0,
 *    fl_backend_open auto/cpu
 * Variants: {eager, graphs} x {streaming matmul up to 8 rows, cuBLAS only, tensor-core
 * attention (FL_CUDA_ATTN=tc), few-row attention (FL_CUDA_ATTN=few), the streaming matmul on
 * tensor cores (FL_CUDA_MV=tc, which runs the RMSNorms inside its products), all three new
 * ones together with the streaming matmuls' programmatic launch (FL_CUDA_PDL=1), the
 * tensor-core matmul with the RMSNorms in their own kernel (FL_CUDA_NORM_FUSE=0), and with
 * --q8 every q8 product on the q8 GEMM (FL_CUDA_Q8_GEMM=1, streaming kernels off), and on
 * mixture-of-experts models the experts' grouped GEMM (FL_CUDA_MOE_GEMM=1), and the MoE
 * kernels' programmatic launch with the experts on the streaming matmul and on the grouped
 * GEMM}; case H's
 * outputs of the tensor-core matmul with the norms inside and separate must be the same bits.
 * --big (a large model): cases A, G, H in the default variants, eager tensor-core and
 * few-row attention, eager tensor-core matmul with the norms inside and separate, and the
 * three new ones with graphs. --self-test (first argument): a
 * second CPU backend (1 thread) stands in for the GPU, to check these checks without one. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "cpu/cpu.h"
#include "backend_select.h"
#include "fl_cuda.h"
#include "model.h"
#include "../unit/logit_ref.h"

#define TOL_LOGITS 5e-2
#define TOL_PROB 5e-3
#define TOL_ENT 1e-2
#define TOL_SELF 1e-5
#define TOL_KV 3e-2
#define TOL_OVERLAP 2e-2
/* --q8 */
#define TOL_Q8_LOGITS 0.15
#define TOL_Q8_STATS 5e-2
#define TOL_Q8_KV 0.15
static double tol_logits = TOL_LOGITS, tol_prob = TOL_PROB, tol_ent = TOL_ENT, tol_kv = TOL_KV;
static bool g_q8; /* --q8 */
#define NSEQ 8
#define SEQ_LEN 400
#define N_PAGES 200

static int n_pass, n_fail;
static const char *g_model = "", *g_variant = "";
static bool g_self; /* --self-test: a second CPU backend stands in for the GPU */
static unsigned long long g_only; /* --variant N[,N...]: run only those variants (bits) */

#define RESULT(ok, ...)                                                                      \
    do {                                                                                     \
        int ok_ = (ok);                                                                      \
        if (ok_)                                                                             \
            n_pass++;                                                                        \
        else                                                                                 \
            n_fail++;                                                                        \
        printf("%s %s%s [%s] ", ok_ ? "PASS" : "FAIL", g_model, g_q8 ? " (q8)" : "", g_variant);  \
        printf(__VA_ARGS__);                                                                 \
        putchar('\n');                                                                       \
        fflush(stdout);                                                                      \
    } while (0)

typedef struct ctx {
    const char *name;
    fl_model *m;
    int B, V, max_tokens, L0;
    bool big;
    int32_t *seq[NSEQ]; /* (SEQ_LEN) */
    fl_backend *cpu, *gpu;
} ctx;

typedef struct seg_spec {
    int seq, pos0, n, n_store, out_from;
    const int32_t *pages;
} seg_spec;

typedef struct run_out {
    int n;
    fl_tok_out *out;
    float *logits; /* NULL when run without */
} run_out;

static void run_free(run_out *r)
{
    free(r->out);
    free(r->logits);
    memset(r, 0, sizeof *r);
}

static int32_t *pages_for(int first, int n)
{
    int32_t *p = malloc((size_t)n * sizeof *p);
    for (int i = 0; i < n; i++)
        p[i] = first + i;
    return p;
}

static int run_batch(fl_backend *b, const ctx *c, const seg_spec *ss, int ns, const int32_t *tok,
                     bool want_logits, run_out *r, fl_err *e)
{
    int n = 0;
    for (int s = 0; s < ns; s++)
        n += ss[s].n;
    int32_t *tokens = malloc((size_t)n * sizeof *tokens);
    fl_segment *segs = calloc((size_t)ns, sizeof *segs);
    r->n = n;
    r->out = malloc((size_t)n * sizeof *r->out);
    r->logits = want_logits ? malloc((size_t)n * c->V * sizeof(float)) : NULL;
    for (int i = 0; i < n; i++)
        r->out[i] = (fl_tok_out){-7, -7.0f, -7.0f};
    if (r->logits)
        for (size_t i = 0; i < (size_t)n * c->V; i++)
            r->logits[i] = NAN;
    int t = 0;
    for (int s = 0; s < ns; s++) {
        memcpy(tokens + t, c->seq[ss[s].seq] + ss[s].pos0, (size_t)ss[s].n * sizeof *tokens);
        segs[s] = (fl_segment){ss[s].n, ss[s].pos0, ss[s].n_store, ss[s].out_from, ss[s].pages,
                               NULL};
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

/* Runs the batch on both backends; 0 when both ran. With a mixture-of-experts model the CPU
 * runs first, recording its routes, and the GPU then routes as the CPU did
 * (fl_cuda_force_routes): its router logits differ from the CPU's by the bf16 activations
 * before them, so a token whose k-th and (k+1)-th experts nearly tie could go elsewhere on
 * each side, which would compare two different models. How often its own choice differed is
 * counted (g_route_diff of g_routes) and printed per model. */
static long long g_routes, g_route_diff;
static int run_both(ctx *c, const seg_spec *ss, int ns, run_out *rg, run_out *rc_, const char *what)
{
    fl_err e = {0, {0}};
    bool moe = c->m->cfg.moe.router != FL_ROUTER_NONE && !g_self;
    int rc = 0;
    if (moe) {
        rc = run_batch(c->cpu, c, ss, ns, NULL, true, rc_, &e);
        if (rc) {
            RESULT(0, "%s: CPU forward failed: %s", what, e.msg);
            return rc;
        }
        const int32_t *ids;
        const float *w;
        fl_cpu_routes(c->cpu, &ids, &w);
        fl_cuda_stats s0, s1;
        fl_cuda_get_stats(c->gpu, &s0);
        if ((rc = fl_cuda_force_routes(c->gpu, ids, w, c->max_tokens, &e)) ||
            (rc = run_batch(c->gpu, c, ss, ns, NULL, true, rg, &e))) {
            RESULT(0, "%s: GPU forward failed: %s", what, e.msg);
            return rc;
        }
        fl_cuda_get_stats(c->gpu, &s1);
        g_routes += s1.routes - s0.routes;
        g_route_diff += s1.route_diff - s0.route_diff;
        return 0;
    }
    rc = run_batch(c->gpu, c, ss, ns, NULL, true, rg, &e);
    if (rc) {
        RESULT(0, "%s: GPU forward failed: %s", what, e.msg);
        return rc;
    }
    rc = run_batch(c->cpu, c, ss, ns, NULL, true, rc_, &e);
    if (rc) {
        RESULT(0, "%s: CPU forward failed: %s", what, e.msg);
        return rc;
    }
    return 0;
}

/* A mixture-of-experts model's GPU-only forward that is compared with a GPU forward run_both
 * ran (the GPU against itself): it must route as that one did, or a token whose experts
 * nearly tie could take another expert in one of them and the two would be two models. So
 * its next forward takes the routes of the CPU's last forward, from that forward's token
 * `from` on (a pass of the same tokens split in two: the second pass starts at its first
 * token's row). No-op for a dense model or the self-test. */
static int force_cpu_routes(ctx *c, int from, fl_err *e)
{
    if (c->m->cfg.moe.router == FL_ROUTER_NONE || g_self)
        return 0;
    const int32_t *ids;
    const float *w;
    fl_cpu_routes(c->cpu, &ids, &w);
    const size_t off = (size_t)from * (size_t)c->m->cfg.moe.top_k;
    return fl_cuda_force_routes(c->gpu, ids + off, w + off, c->max_tokens, e);
}

/* GPU outputs vs CPU outputs over the wanted rows; one PASS/FAIL line. */
static void compare(const ctx *c, const seg_spec *ss, int ns, const run_out *g, const run_out *r,
                    const char *what)
{
    int V = c->V, t = 0;
    double worst = 0, wprob = 0, went = 0, wself = 0;
    int bad_tok = 0, near = 0, sentinel = 0, rows = 0;
    for (int s = 0; s < ns; s++)
        for (int i = 0; i < ss[s].n; i++, t++) {
            const fl_tok_out *go = &g->out[t], *ro = &r->out[t];
            if (i < ss[s].out_from) {
                if (go->token != -7 || go->prob != -7.0f)
                    sentinel++;
                continue;
            }
            rows++;
            const float *gl = g->logits + (size_t)t * V, *rl = r->logits + (size_t)t * V;
            double mref = 0, md = 0;
            for (int v = 0; v < V; v++) {
                mref = fmax(mref, fabs(rl[v]));
                double d = fabs((double)gl[v] - rl[v]);
                md = isnan(d) ? INFINITY : fmax(md, d);
            }
            worst = fmax(worst, md / (mref > 0 ? mref : 1));
            if (go->token != ro->token) {
                if (go->token < 0 || go->token >= V ||
                    fabs((double)rl[go->token] - rl[ro->token]) > 2 * md)
                    bad_tok++;
                else
                    near++;
            }
            wprob = fmax(wprob, fabs((double)go->prob - ro->prob));
            went = fmax(went, fabs((double)go->entropy - ro->entropy) / fmax(1.0, ro->entropy));
            /* the fused statistics vs the GPU's own logits */
            double p1, h;
            if (go->token != fl_ref_top1(gl, V, &p1, &h))
                wself = INFINITY;
            wself = fmax(wself, fabs(go->prob - p1));
            wself = fmax(wself, fabs(go->entropy - h) / fmax(1.0, h));
        }
    bool ok = worst <= tol_logits && bad_tok == 0 && wprob <= tol_prob && went <= tol_ent &&
              wself <= TOL_SELF && sentinel == 0;
    RESULT(ok, "%s: %d rows: logits rel err %.2e (<= %.2g), top-1 %d wrong + %d near ties, prob "
           "err %.2e, entropy err %.2e, fused vs own logits %.2e, %d outputs written before "
           "out_from", what, rows, worst, tol_logits, bad_tok, near, wprob, went, wself, sentinel);
}

static double page_err(ctx *c, const int32_t *pg, const int32_t *pc, int n, double *worst_abs)
{
    size_t nf = c->gpu->page_bytes / 4;
    float *a = malloc(c->gpu->page_bytes), *b = malloc(c->cpu->page_bytes);
    double mref = 0, md = 0;
    fl_err e = {0, {0}};
    for (int i = 0; i < n; i++) {
        if (c->gpu->ops->page_read(c->gpu, pg[i], a, &e) || c->cpu->ops->page_read(c->cpu, pc[i], b, &e)) {
            md = INFINITY;
            break;
        }
        for (size_t j = 0; j < nf; j++) {
            mref = fmax(mref, fabs(b[j]));
            double d = fabs((double)a[j] - b[j]);
            md = isnan(d) ? INFINITY : fmax(md, d);
        }
    }
    free(a);
    free(b);
    if (worst_abs)
        *worst_abs = md;
    return md / (mref > 0 ? mref : 1);
}

static void compare_pages(ctx *c, const int32_t *pages, int n, const char *what)
{
    double err = page_err(c, pages, pages, n, NULL);
    RESULT(err <= tol_kv, "%s: stored K/V of %d pages: max rel err %.2e (<= %.2g)", what, n, err,
           tol_kv);
}

static double rel_diff(const float *a, const float *b, size_t n)
{
    double m = 0, d = 0;
    for (size_t i = 0; i < n; i++) {
        m = fmax(m, fabs(b[i]));
        double x = fabs((double)a[i] - b[i]);
        d = isnan(x) ? INFINITY : fmax(d, x);
    }
    return d / (m > 0 ? m : 1);
}

/* ---------------------------------------------------------------- cases */

static void case_a(ctx *c)
{
    int B = c->B;
    int32_t *pg = pages_for(0, 4), *pg2 = pages_for(40, 4);
    run_out g = {0}, r = {0}, g2 = {0}, g3 = {0};
    seg_spec pre = {0, 0, 3 * B, 3 * B, 0, pg};
    if (!run_both(c, &pre, 1, &g, &r, "A prefill")) {
        compare(c, &pre, 1, &g, &r, "A prefill 3 blocks");
        compare_pages(c, pg, 3, "A prefill 3 blocks");
    }
    run_free(&g);
    run_free(&r);
    seg_spec dec = {0, 3 * B, B, 0, 1, pg};
    if (!run_both(c, &dec, 1, &g, &r, "A decode"))
        compare(c, &dec, 1, &g, &r, "A decode block 4 over 3 cached (out_from 1)");
    fl_err e = {0, {0}};
    void *buf = malloc(c->gpu->page_bytes);
    int io = 0;
    for (int i = 0; i < 3; i++)
        io |= c->gpu->ops->page_read(c->gpu, pg[i], buf, &e) ||
              c->gpu->ops->page_write(c->gpu, pg2[i], buf, &e);
    free(buf);
    seg_spec dec2 = dec;
    dec2.pages = pg2;
    int rc = io ? -1 : force_cpu_routes(c, 0, &e);
    rc = rc ? rc : run_batch(c->gpu, c, &dec2, 1, NULL, true, &g2, &e);
    if (!rc && g.logits)
        RESULT(!memcmp(g.logits + (size_t)c->V, g2.logits + (size_t)c->V,
                       (size_t)(B - 1) * c->V * sizeof(float)) &&
                   !memcmp(g.out + 1, g2.out + 1, (size_t)(B - 1) * sizeof *g.out),
               "A page round trip (page_read -> page_write -> decode): outputs bit-identical");
    else
        RESULT(0, "A page round trip: %s", e.msg);
    rc = force_cpu_routes(c, 0, &e);
    rc = rc ? rc : run_batch(c->gpu, c, &dec, 1, NULL, false, &g3, &e);
    if (!rc)
        RESULT(!memcmp(g.out, g3.out, (size_t)B * sizeof *g.out),
               "A outputs without a logits buffer equal those with one, bit for bit");
    else
        RESULT(0, "A decode without logits: %s", e.msg);
    run_free(&g);
    run_free(&r);
    run_free(&g2);
    run_free(&g3);
    free(pg);
    free(pg2);
}

static void case_b(ctx *c)
{
    int B = c->B;
    int32_t *p1 = pages_for(4, 3), *p2 = pages_for(8, 3), *p4 = pages_for(12, 6);
    run_out g = {0}, r = {0};
    seg_spec pre[3] = {{1, 0, 2 * B, 2 * B, 0, p1}, {2, 0, B + 1, B + 1, 0, p2},
                       {4, 0, 4 * B, 4 * B, 0, p4}};
    if (!run_both(c, pre, 3, &g, &r, "B packed prefill"))
        compare(c, pre, 3, &g, &r, "B packed prefill, 3 sequences");
    run_free(&g);
    run_free(&r);
    seg_spec dec[4] = {
        {4, 4 * B, 2 * B, B, 0, p4},     /* two blocks, the first stored */
        {1, 2 * B, B, 0, 0, p1},         /* one block after two cached */
        {3, 0, B, 0, 0, NULL},           /* nothing cached */
        {2, B + 1, 2 * B - 1, 0, 0, p2}, /* starts inside a block (partial page) */
    };
    if (!run_both(c, dec, 4, &g, &r, "B packed decode")) {
        compare(c, dec, 4, &g, &r, "B 4 ragged segments (stored + running, partial page)");
        compare_pages(c, p4, 5, "B 4 ragged segments");
    }
    run_free(&g);
    run_free(&r);
    free(p1);
    free(p2);
    free(p4);
}

static void case_c(ctx *c)
{
    int B = c->B, V = c->V;
    int32_t *pa = pages_for(20, 4), *pb = pages_for(24, 4);
    run_out g = {0}, r = {0}, gs = {0}, gd = {0};
    fl_err e = {0, {0}};
    seg_spec pre = {5, 0, 2 * B, 2 * B, 2 * B, pa};
    if (run_both(c, &pre, 1, &g, &r, "C prefill"))
        goto out;
    run_free(&g);
    run_free(&r);
    void *buf = malloc(c->gpu->page_bytes), *buf2 = malloc(c->gpu->page_bytes);
    for (int i = 0; i < 2; i++) {
        c->gpu->ops->page_read(c->gpu, pa[i], buf, &e);
        c->gpu->ops->page_write(c->gpu, pb[i], buf, &e);
    }
    seg_spec both = {5, 2 * B, 2 * B, B, 0, pa};
    if (!run_both(c, &both, 1, &g, &r, "C store+decode")) {
        compare(c, &both, 1, &g, &r, "C store block 2 + decode block 3 in one pass");
        compare_pages(c, pa + 2, 1, "C store+decode");
    }
    seg_spec st = {5, 2 * B, B, B, B, pb}, dc = {5, 3 * B, B, 0, 0, pb};
    /* the CPU's last forward is `both`: st is its first B tokens, dc the next B */
    int rc = force_cpu_routes(c, 0, &e);
    rc = rc ? rc : run_batch(c->gpu, c, &st, 1, NULL, true, &gs, &e);
    rc = rc ? rc : force_cpu_routes(c, B, &e);
    rc = rc ? rc : run_batch(c->gpu, c, &dc, 1, NULL, true, &gd, &e);
    if (!rc && g.logits) {
        double d = rel_diff(g.logits + (size_t)B * V, gd.logits, (size_t)B * V);
        int diff_tok = 0;
        for (int i = 0; i < B; i++)
            diff_tok += g.out[B + i].token != gd.out[i].token;
        c->gpu->ops->page_read(c->gpu, pa[2], buf, &e);
        c->gpu->ops->page_read(c->gpu, pb[2], buf2, &e);
        double dp = rel_diff(buf, buf2, c->gpu->page_bytes / 4);
        RESULT(d <= TOL_OVERLAP && dp <= TOL_OVERLAP,
               "C one pass vs store pass + decode pass (GPU): logits rel diff %.2e, stored page "
               "rel diff %.2e (<= %.0e), %d top-1 differ", d, dp, TOL_OVERLAP, diff_tok);
    } else {
        RESULT(0, "C separate passes: %s", e.msg);
    }
    free(buf);
    free(buf2);
out:
    run_free(&g);
    run_free(&r);
    run_free(&gs);
    run_free(&gd);
    free(pa);
    free(pb);
}

static void case_d(ctx *c)
{
    int B = c->B, V = c->V;
    fl_err e = {0, {0}};
    int32_t *pc = pages_for(30, 3), *pd = pages_for(33, 3);
    seg_spec ss[2] = {{4, 0, 3 * B, 2 * B, 0, pc}, {0, 0, B, 0, 0, NULL}};
    int n = 4 * B;
    int32_t *tok = malloc((size_t)n * sizeof *tok);
    memcpy(tok, c->seq[4], (size_t)3 * B * sizeof *tok);
    memcpy(tok + 3 * B, c->seq[0], (size_t)B * sizeof *tok);
    run_out r1 = {0}, r2 = {0};
    int rc = run_batch(c->gpu, c, ss, 2, tok, true, &r1, &e);
    for (int i = 2 * B; i < 3 * B; i++)
        tok[i] = (tok[i] + 1 + i) % V;
    ss[0].pages = pd;
    rc = rc ? rc : run_batch(c->gpu, c, ss, 2, tok, true, &r2, &e);
    if (!rc) {
        int early = 0, other = 0, late = 0, top = 0, pages = 0;
        for (size_t i = 0; i < (size_t)2 * B * V; i++)
            early += r1.logits[i] != r2.logits[i];
        for (size_t i = (size_t)3 * B * V; i < (size_t)4 * B * V; i++)
            other += r1.logits[i] != r2.logits[i];
        for (size_t i = (size_t)2 * B * V; i < (size_t)3 * B * V; i++)
            late += r1.logits[i] != r2.logits[i];
        for (int i = 0; i < 2 * B; i++)
            top += memcmp(&r1.out[i], &r2.out[i], sizeof r1.out[i]) != 0;
        void *a = malloc(c->gpu->page_bytes), *b = malloc(c->gpu->page_bytes);
        for (int i = 0; i < 2; i++) {
            c->gpu->ops->page_read(c->gpu, pc[i], a, &e);
            c->gpu->ops->page_read(c->gpu, pd[i], b, &e);
            pages += memcmp(a, b, c->gpu->page_bytes) != 0;
        }
        free(a);
        free(b);
        RESULT(early == 0 && other == 0 && late > 0 && top == 0 && pages == 0,
               "D block causality: %d earlier-block logits changed, %d of another segment, %d "
               "top-1 outputs, %d stored pages (all must be 0); block 2's own changed: %d",
               early, other, top, pages, late);
    } else {
        RESULT(0, "D causality runs: %s", e.msg);
    }
    run_free(&r1);
    run_free(&r2);
    free(tok);
    free(pc);
    free(pd);
}

static int expect_einval(fl_backend *b, const fl_batch *bt)
{
    fl_err e = {0, {0}};
    fl_tok_out out[64];
    int rc = fl_forward(b, bt, out, NULL, &e);
    return rc == FL_EINVAL && e.msg[0];
}

static void case_e(ctx *c)
{
    fl_backend *b = c->gpu;
    int B = c->B, bad = 0, total = 0;
    int32_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int32_t pg[4] = {0, 1, 2, 3}, badpg[2] = {0, b->n_pages};
    fl_segment s = {4, 0, 4, 0, pg, NULL};
    fl_batch ok = {tok, 4, &s, 1};
    void *before = malloc(b->page_bytes), *after = malloc(b->page_bytes);
    fl_err e = {0, {0}};
    b->ops->page_read(b, 0, before, &e);
    fl_batch bt = ok;
    fl_segment t = s;
#define BAD(stmt)                                                                            \
    do {                                                                                     \
        bt = ok;                                                                             \
        t = s;                                                                               \
        bt.segs = &t;                                                                        \
        stmt;                                                                                \
        total++;                                                                             \
        bad += !expect_einval(b, &bt);                                                       \
    } while (0)
    total++;
    bad += !expect_einval(b, NULL);
    BAD(bt.n_tokens = 0);
    BAD(bt.n_tokens = b->max_tokens + 1);
    BAD(bt.tokens = NULL);
    BAD(bt.n_segs = 0);
    BAD(bt.n_tokens = 5);
    BAD(t.n = 5);
    BAD(t.n = 0);
    BAD(t.pos0 = -1);
    BAD((t.pos0 = c->m->cfg.max_pos - 2, t.n_store = 0));
    BAD(t.n_store = 5);
    BAD(t.n_store = -1);
    BAD(t.out_from = 5);
    BAD(t.pages = NULL);
    BAD((t.pos0 = B, t.n_store = 0, t.pages = NULL));
    BAD((t.pos0 = B, t.pages = badpg));
    badpg[1] = -1;
    BAD((t.pos0 = B, t.pages = badpg));
    int32_t tk2[8];
    memcpy(tk2, tok, sizeof tk2);
    tk2[3] = c->V;
    BAD(bt.tokens = tk2);
    tk2[3] = -1;
    BAD(bt.tokens = tk2);
#undef BAD
    int io_bad = (b->ops->page_read(b, b->n_pages, after, &e) != FL_EINVAL) +
                 (b->ops->page_write(b, -1, after, &e) != FL_EINVAL);
    b->ops->page_read(b, 0, after, &e);
    int changed = memcmp(before, after, b->page_bytes) != 0;
    fl_tok_out out[4];
    int good = fl_forward(b, &ok, out, NULL, &e);
    RESULT(bad == 0 && io_bad == 0 && !changed && good == 0,
           "E bad batches: %d of %d not refused with FL_EINVAL and a message, %d bad page ids "
           "accepted, page changed: %s, a good batch after them: %s", bad, total, io_bad,
           changed ? "yes" : "no", good ? e.msg : "ok");
    free(before);
    free(after);
}

static void case_f(ctx *c)
{
    int B = c->B, L0 = c->L0, np = (L0 + B - 1) / B + 1;
    int32_t *pg = pages_for(60, np);
    run_out g = {0}, r = {0};
    char what[160];
    for (int p = 0; p < L0; p += c->max_tokens) {
        int n = L0 - p < c->max_tokens ? L0 - p : c->max_tokens;
        bool last = p + n >= L0;
        seg_spec pre = {6, p, n, n, last ? 0 : n, pg};
        snprintf(what, sizeof what, "F long context: prefill chunk at %d (%d tokens%s)", p, n,
                 last ? ", all outputs" : "");
        if (run_both(c, &pre, 1, &g, &r, what))
            goto out;
        if (last)
            compare(c, &pre, 1, &g, &r, what);
        run_free(&g);
        run_free(&r);
    }
    seg_spec dec[2] = {{6, L0, B, 0, 0, pg}, {3, 0, 3, 0, 0, NULL}};
    snprintf(what, sizeof what, "F decode after %d cached (attention split) + a short segment", L0);
    if (!run_both(c, dec, 2, &g, &r, what))
        compare(c, dec, 2, &g, &r, what);
out:
    run_free(&g);
    run_free(&r);
    free(pg);
}

static void case_g(ctx *c)
{
    int B = c->B;
    int32_t *pg = pages_for(36, 4);
    run_out g = {0}, r = {0};
    seg_spec pre = {7, 0, 2 * B, 2 * B, 2 * B, pg};
    if (run_both(c, &pre, 1, &g, &r, "G prefill"))
        goto out;
    run_free(&g);
    run_free(&r);
    for (int n = 1; n <= 3; n += 2) {
        seg_spec dec = {7, 2 * B, n, 0, 0, pg};
        char what[96];
        snprintf(what, sizeof what, "G a %d-token segment over 2 cached blocks", n);
        if (!run_both(c, &dec, 1, &g, &r, what))
            compare(c, &dec, 1, &g, &r, what);
        run_free(&g);
        run_free(&r);
    }
out:
    run_free(&g);
    run_free(&r);
    free(pg);
}

/* H: the outputs of repeated shapes without logits, kept for the cross-variant check. */
#define H_STEPS 8
typedef struct steps_out {
    fl_tok_out *out; /* all steps' outputs, concatenated */
    int n;
    fl_cuda_stats st;
} steps_out;

static void case_h(ctx *c, steps_out *so)
{
    int B = c->B;
    int32_t *pg = pages_for(44, 4);
    fl_err e = {0, {0}};
    run_out g = {0};
    seg_spec pre = {5, 0, 2 * B, 2 * B, 2 * B, pg};
    int rc = run_batch(c->gpu, c, &pre, 1, NULL, false, &g, &e);
    run_free(&g);
    so->out = calloc((size_t)H_STEPS * 2 * B, sizeof *so->out);
    so->n = 0;
    uint32_t lcg = 12345;
    for (int s = 0; s < H_STEPS && !rc; s++) {
        int n = (s & 1) ? 2 * B : B;
        int32_t *tok = malloc((size_t)n * sizeof *tok);
        for (int i = 0; i < n; i++) {
            lcg = lcg * 1664525u + 1013904223u;
            tok[i] = (int32_t)(lcg >> 8) % c->V;
        }
        seg_spec one = {5, 2 * B, B, 0, 0, pg};
        seg_spec two[2] = {{5, 2 * B, B, 0, 0, pg}, {3, 0, B, 0, 0, NULL}};
        rc = (s & 1) ? run_batch(c->gpu, c, two, 2, tok, false, &g, &e)
                     : run_batch(c->gpu, c, &one, 1, tok, false, &g, &e);
        if (!rc) {
            memcpy(so->out + so->n, g.out, (size_t)n * sizeof *g.out);
            so->n += n;
        }
        run_free(&g);
        free(tok);
    }
    fl_cuda_get_stats(c->gpu, &so->st);
    if (rc)
        RESULT(0, "H repeated shapes: %s", e.msg);
    else
        RESULT(1, "H %d forwards of 2 alternating shapes ran (eager %lld, graphs captured %lld, "
               "replayed %lld; graphs: %s)", H_STEPS, so->st.eager, so->st.captured,
               so->st.replayed, so->st.graphs_note);
    free(pg);
}

typedef struct reader {
    fl_backend *b;
    const int32_t *pages;
    int n;
    void *snap;
    atomic_int stop;
    atomic_long reads, mismatches, errors;
} reader;

static void *reader_main(void *arg)
{
    reader *rd = arg;
    void *buf = malloc(rd->b->page_bytes);
    fl_err e = {0, {0}};
    while (!atomic_load(&rd->stop)) {
        for (int i = 0; i < rd->n; i++) {
            if (rd->b->ops->page_read(rd->b, rd->pages[i], buf, &e)) {
                atomic_fetch_add(&rd->errors, 1);
                continue;
            }
            if (memcmp(buf, (char *)rd->snap + (size_t)i * rd->b->page_bytes, rd->b->page_bytes))
                atomic_fetch_add(&rd->mismatches, 1);
            atomic_fetch_add(&rd->reads, 1);
        }
    }
    free(buf);
    return NULL;
}

static void case_i(ctx *c)
{
    int B = c->B;
    fl_backend *b = c->gpu;
    int32_t committed[3] = {0, 1, 2}; /* case A's pages */
    int32_t *pg = pages_for(44, 4);   /* case H's sequence; it stores block 2 into page 46 */
    reader rd = {.b = b, .pages = committed, .n = 3, .snap = malloc(3 * b->page_bytes)};
    fl_err e = {0, {0}};
    for (int i = 0; i < 3; i++)
        b->ops->page_read(b, committed[i], (char *)rd.snap + (size_t)i * b->page_bytes, &e);
    pthread_t th;
    int started = pthread_create(&th, NULL, reader_main, &rd) == 0;
    /* the reader must be reading before the forwards start, and go on during them */
    for (int w = 0; started && w < 5000 && atomic_load(&rd.reads) == 0; w++)
        usleep(1000);
    long before = atomic_load(&rd.reads);
    int rc = 0, fwd = 0;
    for (int s = 0; s < 40 && !rc; s++, fwd++) {
        run_out g = {0};
        seg_spec st = {5, 2 * B, B, B, 0, pg};
        rc = run_batch(b, c, &st, 1, NULL, false, &g, &e);
        run_free(&g);
    }
    long during = atomic_load(&rd.reads) - before;
    atomic_store(&rd.stop, 1);
    if (started)
        pthread_join(th, NULL);
    long reads = atomic_load(&rd.reads), bad = atomic_load(&rd.mismatches);
    long errs = atomic_load(&rd.errors);
    RESULT(started && !rc && reads > 0 && bad == 0 && errs == 0,
           "I page_read on another thread during %d storing forwards: %ld reads (%ld while they "
           "ran), %ld differ from the committed bytes, %ld errors%s%s", fwd, reads, during, bad,
           errs, rc ? "; forward: " : "", rc ? e.msg : "");
    free(rd.snap);
    free(pg);
}

static void case_j(ctx *c)
{
    fl_backend_opts o = {.n_pages = 8, .max_tokens = 64};
    fl_backend *b = NULL;
    fl_err e = {0, {0}};
    setenv("FL_CUDA_MEM_LIMIT", "1048576", 1);
    int rc = fl_backend_cuda_create(&b, c->m, &o, &e);
    RESULT(rc == FL_ENOMEM && !b && strstr(e.msg, "does not fit"),
           "J with 1 MiB free: FL_ENOMEM expected, got %d: %s", rc, e.msg);
    fl_backend_destroy(b);
    b = NULL;
    setenv("FL_CUDA_MEM_LIMIT", "2147483648", 1);
    o.n_pages = 0;
    rc = fl_backend_cuda_create(&b, c->m, &o, &e);
    RESULT(rc == 0 && b && b->n_pages > 0, "J n_pages 0 with 2 GiB free: %d pages (%s)",
           b ? b->n_pages : -1, rc ? e.msg : fl_cuda_describe(b));
    int fit = b ? b->n_pages : 0;
    fl_backend_destroy(b);
    b = NULL;
    o.n_pages = fit + 1000;
    rc = fl_backend_cuda_create(&b, c->m, &o, &e);
    RESULT(rc == 0 && b && b->n_pages < o.n_pages && b->n_pages > 0,
           "J %d pages asked, %d fit: got %d (%s)", o.n_pages, fit, b ? b->n_pages : -1,
           rc ? e.msg : fl_cuda_describe(b));
    fl_backend_destroy(b);
    b = NULL;
    unsetenv("FL_CUDA_MEM_LIMIT");
    char chosen[700];
    o.n_pages = 8;
    rc = fl_backend_open(&b, c->m, &o, "auto", chosen, sizeof chosen, &e);
    RESULT(rc == 0 && b && !strcmp(b->ops->name, "cuda"), "J fl_backend_open auto -> %s",
           rc ? e.msg : chosen);
    fl_backend_destroy(b);
    b = NULL;
    rc = fl_backend_open(&b, c->m, &o, "cpu", chosen, sizeof chosen, &e);
    RESULT(rc == 0 && b && !strcmp(b->ops->name, "cpu"), "J fl_backend_open cpu -> %s",
           rc ? e.msg : chosen);
    fl_backend_destroy(b);
}

/* ---------------------------------------------------------------- driver */

typedef struct variant {
    const char *name, *graphs, *skinny, *attn, *pdl, *mv, *norm;
    const char *env; /* more settings, "NAME=VALUE ..." (unset between variants) */
} variant;

/* pairs: an odd variant is the even one before it with graphs (compared bit for bit) */
static const variant VARIANTS[] = {
    {"eager, streaming matmul <= 8 rows", "0", "8", "", "0", "", "", ""},
    {"graphs, streaming matmul <= 8 rows", "1", "8", "", "0", "", "", ""},
    {"eager, cuBLAS only", "0", "0", "", "0", "", "", ""},
    {"graphs, cuBLAS only", "1", "0", "", "0", "", "", ""},
    {"eager, tensor-core attention", "0", "8", "tc", "0", "", "", ""},
    {"graphs, tensor-core attention", "1", "8", "tc", "0", "", "", ""},
    {"eager, few-row attention", "0", "8", "few", "0", "", "", ""},
    {"graphs, few-row attention", "1", "8", "few", "0", "", "", ""},
    /* the tensor-core matmul runs the RMSNorms inside its products (FL_CUDA_NORM_FUSE) */
    {"eager, tensor-core streaming matmul", "0", "8", "", "0", "tc", "", ""},
    {"graphs, tensor-core streaming matmul", "1", "8", "", "0", "tc", "", ""},
    {"eager, few-row attention, tc matmul, programmatic launch", "0", "8", "few", "1", "tc", "", ""},
    {"graphs, few-row attention, tc matmul, programmatic launch", "1", "8", "few", "1", "tc", "", ""},
    {"eager, tc matmul, RMSNorms separate", "0", "8", "", "0", "tc", "0", ""},
    {"graphs, tc matmul, RMSNorms separate", "1", "8", "", "0", "tc", "0", ""},
    /* --q8 only: every q8 product of every row count on the q8 GEMM (FL_CUDA_Q8_GEMM) */
    {"eager, q8 GEMM for every row count", "0", "0", "", "0", "", "", "FL_CUDA_Q8_GEMM=1"},
    {"graphs, q8 GEMM for every row count", "1", "0", "", "0", "", "", "FL_CUDA_Q8_GEMM=1"},
    /* mixture-of-experts models only: every MoE layer's experts on the grouped GEMM */
    {"eager, experts' grouped GEMM", "0", "8", "", "0", "", "",
     "FL_CUDA_MOE_GEMM=1 FL_CUDA_MOE_GEMM_MIN=0"},
    {"graphs, experts' grouped GEMM", "1", "8", "", "0", "", "",
     "FL_CUDA_MOE_GEMM=1 FL_CUDA_MOE_GEMM_MIN=0"},
    /* mixture-of-experts models only: the MoE kernels' programmatic launch with the experts
     * on the streaming matmul and on the grouped GEMM (the pair above with tc has k_moe_mv_tc) */
    {"eager, MoE streaming matmul, programmatic launch", "0", "8", "", "1", "", "", ""},
    {"graphs, MoE streaming matmul, programmatic launch", "1", "8", "", "1", "", "", ""},
    {"eager, experts' grouped GEMM, programmatic launch", "0", "8", "", "1", "", "",
     "FL_CUDA_MOE_GEMM=1 FL_CUDA_MOE_GEMM_MIN=0"},
    {"graphs, experts' grouped GEMM, programmatic launch", "1", "8", "", "1", "", "",
     "FL_CUDA_MOE_GEMM=1 FL_CUDA_MOE_GEMM_MIN=0"},
};
static const char *const VARIANT_ENV[] = {"FL_CUDA_Q8_GEMM", "FL_CUDA_MOE_GEMM",
                                          "FL_CUDA_MOE_GEMM_MIN"};

/* a variant's env settings ("NAME=VALUE ..."), after unsetting every VARIANT_ENV */
static void set_variant_env(const char *env)
{
    for (size_t i = 0; i < sizeof VARIANT_ENV / sizeof VARIANT_ENV[0]; i++)
        unsetenv(VARIANT_ENV[i]);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", env ? env : "");
    char *save = NULL;
    for (char *tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(tok, '=');
        if (eq) {
            *eq = 0;
            setenv(tok, eq + 1, 1);
        }
    }
}
#define V_TC_EAGER 8     /* the tensor-core matmul, norms inside, eager */
#define V_TC_SEPARATE 12 /* ... norms in their own kernel: the same bits */
#define V_Q8_GEMM 14     /* the q8 GEMM pair: with --q8 only */
#define V_MOE_GEMM 16    /* the experts' grouped GEMM pair: mixture-of-experts models only */
#define V_MOE_PDL 18     /* two pairs, the MoE kernels' programmatic launch: MoE models only */
#define N_VARIANTS (int)(sizeof VARIANTS / sizeof VARIANTS[0])

static void run_model(const char *dir, bool big)
{
    fl_err e = {0, {0}};
    ctx c;
    memset(&c, 0, sizeof c);
    c.name = dir;
    c.big = big;
    g_model = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
    g_variant = "load";
    fl_load_opts lo = {.no_tokenizer = true};
    if (fl_model_load(&c.m, dir, &lo, &e)) {
        RESULT(0, "cannot load %s: %s", dir, e.msg);
        return;
    }
    c.B = c.m->cfg.block_size;
    c.V = c.m->cfg.vocab;
    c.L0 = c.B >= 16 ? 10 * c.B : 75 * c.B; /* > 64 keys per split, several splits */
    c.max_tokens = c.B >= 16 ? 10 * c.B : 24 * c.B;
    if (c.max_tokens < 8 * c.B)
        c.max_tokens = 8 * c.B;
    uint32_t lcg = 777;
    for (int s = 0; s < NSEQ; s++) {
        c.seq[s] = malloc(SEQ_LEN * sizeof(int32_t));
        for (int i = 0; i < SEQ_LEN; i++) {
            lcg = lcg * 1664525u + 1013904223u;
            c.seq[s][i] = (int32_t)((lcg >> 8) % (uint32_t)c.V);
        }
    }
    /* the reference: bf16 weights (exact for BF16 files), the streaming kernels only (no
     * sgemm: the GPU machine may have only our cblas stand-in) */
    setenv("FL_SGEMM_ROWS", "1000000", 1);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    fl_backend_opts co = {.n_pages = N_PAGES, .n_threads = ncpu > 16 ? 16 : (int)ncpu,
                          .max_tokens = c.max_tokens, .weights = FL_WEIGHTS_BF16};
    if (fl_backend_cpu_create(&c.cpu, c.m, &co, &e) ||
        (c.m->cfg.moe.router != FL_ROUTER_NONE && fl_cpu_record_routes(c.cpu, &e))) {
        RESULT(0, "CPU backend: %s", e.msg);
        goto out;
    }
    g_routes = g_route_diff = 0;
    steps_out so[N_VARIANTS];
    memset(so, 0, sizeof so);
    int nv = N_VARIANTS;
    for (int v = 0; v < nv; v++) {
        /* --big: the default pair, eager tc attention, few-row attention, tc matmul (norms
         * inside and separate), all new */
        bool big_v = v == 0 || v == 1 || v == 4 || v == 6 || v == 8 || v == 11 || v == 12;
        const bool moe_model = c.m->cfg.moe.router != FL_ROUTER_NONE;
        if ((g_only && !(g_only >> v & 1)) || (big && !big_v) ||
            ((v == V_Q8_GEMM || v == V_Q8_GEMM + 1) && !g_q8) ||
            ((v == V_MOE_GEMM || v == V_MOE_GEMM + 1 || v >= V_MOE_PDL) && !moe_model))
            continue;
        g_variant = VARIANTS[v].name;
        setenv("FL_CUDA_GRAPHS", VARIANTS[v].graphs, 1);
        setenv("FL_CUDA_SKINNY_ROWS", VARIANTS[v].skinny, 1);
        setenv("FL_CUDA_ATTN", VARIANTS[v].attn, 1);
        setenv("FL_CUDA_PDL", VARIANTS[v].pdl, 1);
        setenv("FL_CUDA_MV", VARIANTS[v].mv, 1);
        setenv("FL_CUDA_NORM_FUSE", VARIANTS[v].norm, 1);
        set_variant_env(VARIANTS[v].env);
        fl_backend_opts go = {.n_pages = N_PAGES, .max_tokens = c.max_tokens,
                              .weights = g_q8 ? FL_WEIGHTS_Q8 : FL_WEIGHTS_AUTO};
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (g_self) {
            go = co;
            go.n_threads = 1;
            go.weights = g_q8 ? FL_WEIGHTS_Q8 : co.weights;
        }
        int rc = g_self ? fl_backend_cpu_create(&c.gpu, c.m, &go, &e)
                        : fl_backend_cuda_create(&c.gpu, c.m, &go, &e);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        RESULT(rc == 0, "create the CUDA backend (%.2f s): %s",
               (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9,
               rc ? e.msg : fl_cuda_describe(c.gpu));
        if (rc)
            continue;
        case_a(&c);
        if (!big) {
            case_b(&c);
            case_c(&c);
            case_d(&c);
            if (v == 0)
                case_e(&c);
            case_f(&c);
        }
        case_g(&c);
        case_h(&c, &so[v]);
        if (!big)
            case_i(&c);
        fl_backend_destroy(c.gpu);
        c.gpu = NULL;
        if (v == 0 && !big && !g_self)
            case_j(&c);
    }
    unsetenv("FL_CUDA_GRAPHS");
    unsetenv("FL_CUDA_SKINNY_ROWS");
    unsetenv("FL_CUDA_ATTN");
    unsetenv("FL_CUDA_PDL");
    unsetenv("FL_CUDA_MV");
    unsetenv("FL_CUDA_NORM_FUSE");
    set_variant_env(NULL);
    /* graphs replay exactly what eager execution computes */
    bool debug = getenv("FL_CUDA_SYNC_DEBUG") && !strcmp(getenv("FL_CUDA_SYNC_DEBUG"), "1");
    for (int v = 1; v < nv; v += 2) {
        if (!so[v].out || !so[v - 1].out)
            continue; /* a variant not run (--variant) or whose backend failed (reported) */
        g_variant = VARIANTS[v].name;
        bool same = so[v].out && so[v - 1].out && so[v].n == so[v - 1].n && so[v].n > 0 &&
                    !memcmp(so[v].out, so[v - 1].out, (size_t)so[v].n * sizeof *so[v].out);
        bool replayed = debug || g_self || so[v].st.replayed > 0;
        RESULT(same && replayed, "H graph replay vs eager (%s): outputs %s, %lld forwards "
               "replayed from %lld graphs (%s)", VARIANTS[v - 1].name,
               same ? "bit-identical" : "DIFFER", so[v].st.replayed, so[v].st.captured,
               so[v].st.graphs_note);
    }
    /* the RMSNorm inside the tensor-core products computes k_rmsnorm's bits (norm.cuh) */
    if (so[V_TC_EAGER].out && so[V_TC_SEPARATE].out) {
        const steps_out *a = &so[V_TC_EAGER], *b = &so[V_TC_SEPARATE];
        g_variant = VARIANTS[V_TC_EAGER].name;
        bool same = a->n == b->n && a->n > 0 && !memcmp(a->out, b->out, (size_t)a->n * sizeof *a->out);
        RESULT(same, "H RMSNorms inside the products vs in their own kernel (%s): outputs %s",
               VARIANTS[V_TC_SEPARATE].name, same ? "bit-identical" : "DIFFER");
    }
    /* the MoE kernels' programmatic launch changes when they start, never what they compute:
     * a read before its wait would show here as other bits */
    for (int p = 0; p < 2; p++) {
        const int v = V_MOE_PDL + 2 * p, base = p ? V_MOE_GEMM : 0;
        if (!so[v].out || !so[base].out)
            continue;
        g_variant = VARIANTS[v].name;
        bool same = so[v].n == so[base].n && so[v].n > 0 &&
                    !memcmp(so[v].out, so[base].out, (size_t)so[v].n * sizeof *so[v].out);
        RESULT(same, "H programmatic launch vs plain launches (%s): outputs %s",
               VARIANTS[base].name, same ? "bit-identical" : "DIFFER");
    }
    for (int v = 0; v < N_VARIANTS; v++)
        free(so[v].out);
    if (g_routes > 0) { /* near ties go either way: information, up to a bound */
        printf("INFO %s: the GPU routed %lld token-layers as the CPU told it; its own choice of "
               "experts differed in %lld (%.2f%%)\n", c.name, g_routes, g_route_diff,
               100.0 * (double)g_route_diff / (double)g_routes);
        /* the router's logits are not compared directly (the routes are the CPU's), but
         * wrong logits would choose other experts for most tokens (two random sets of K of E
         * seldom agree), where near ties at bf16 precision leave far fewer */
        g_variant = "all";
        RESULT(2 * g_route_diff <= g_routes, "routes: the GPU's own choice of experts agreed "
               "with the CPU's in %lld of %lld token-layers (at least half must)",
               g_routes - g_route_diff, g_routes);
    }
out:
    fl_backend_destroy(c.cpu);
    for (int s = 0; s < NSEQ; s++)
        free(c.seq[s]);
    fl_model_free(c.m);
}

int main(int argc, char **argv)
{
    char why[512];
    g_self = argc > 1 && !strcmp(argv[1], "--self-test");
    int usable = g_self ? 1 : fl_cuda_probe(why, sizeof why);
    if (g_self)
        snprintf(why, sizeof why, "self-test: a second CPU backend in place of the GPU");
    if (!usable) {
        printf("gpu_parity: skipped: no GPU (%s)\n", why);
        return 77;
    }
    printf("gpu_parity: %s\n", why);
    bool big = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--big")) {
            big = true;
            continue;
        }
        if (!strcmp(argv[i], "--self-test"))
            continue;
        if (!strcmp(argv[i], "--q8")) {
            g_q8 = true;
            tol_logits = TOL_Q8_LOGITS;
            tol_prob = tol_ent = TOL_Q8_STATS;
            tol_kv = TOL_Q8_KV;
            continue;
        }
        if (!strcmp(argv[i], "--variant") && i + 1 < argc) {
            /* a list: the emulated GPU (tests/cuda_emu) runs a few variants of a slow model */
            char *p = argv[++i], *end;
            for (;;) {
                long v = strtol(p, &end, 10);
                if (end == p || v < 0 || v >= 64) {
                    fprintf(stderr, "gpu_parity: --variant takes numbers 0-63, comma-separated\n");
                    return 2;
                }
                g_only |= 1ull << v;
                if (*end != ',')
                    break;
                p = end + 1;
            }
            if (*end) {
                fprintf(stderr, "gpu_parity: --variant takes numbers 0-63, comma-separated\n");
                return 2;
            }
            continue;
        }
        run_model(argv[i], big);
    }
    printf("gpu_parity: %d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
