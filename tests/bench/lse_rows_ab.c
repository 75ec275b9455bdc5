/* lse_rows_ab.c: what one reply token's log probabilities cost the scheduler, the way before
 * 2026-12-07 (A: a max pass and a double exp pass over the logits row for its log-sum-exp,
 * then a compare per id for the top k) against now (B: the log-sum-exp from the backend's
 * argmax and its probability, which the head computes for every row anyway, and
 * fl_row_top's pass that skips spans of 64 ids below the k-th value). Rows of a 151,936-id
 * vocabulary (Qwen3's), logits spread as a trained head's are (a few ids far above a broad
 * mass); A and B take turns, pass by pass, and both must give the same ids and values within
 * 1e-5. Then a logit bias's cost per row, the same way: C takes the biased row's prediction
 * over the whole row (fl_row_top1, one max pass and a double exp pass), D from the backend's
 * prediction and sums, updated for the biased tokens only (fl_row_bias); five tokens lifted
 * by 1..3 (D's path; a bias that pushes the argmax down takes C's). Both must give the same
 * token, and probabilities within 1e-6. Last, sampling's cut for top_p / top_k (temperature
 * 0.7): E sorts the whole vocabulary's weights (qsort, fl_sample_cut until 2026-12-07), F is
 * fl_sample_cut (a histogram by exponent, then a radix sort of only the weights it needs);
 * the cuts must be the same bits. And a whole fl_sample at temperature 0.7 without a cut: G
 * under the entropy policy (which reads the entropy, a log per id), H under any other (which
 * does not, and since 2026-12-07 does not pay for it); the draws must be the same. Not part
 * of the test suite; run it on the Release build:
 *
 *   cc -O3 -Iengine tests/bench/lse_rows_ab.c build/engine/libfl_engine.a -lopenblas \
 *      -ljansson -lm -lpthread -o /tmp/lse_ab
 *   /tmp/lse_ab [k [rows [passes]]]
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/kernels.h"
#include "decode.h"

enum { V = 151936, CH = 256, KMAX = 20 };

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

/* A: the scheduler's note_lp until 2026-12-07 */
static double former(const float *row, int k, int32_t *ti, float *tl)
{
    float mx = row[0];
    for (int v = 1; v < V; v++)
        mx = row[v] > mx ? row[v] : mx;
    double sum = 0;
    for (int v = 0; v < V; v++)
        sum += exp((double)row[v] - (double)mx);
    double lse = (double)mx + log(sum);
    int n = 0;
    for (int v = 0; v < V && k; v++) {
        if (n == k && row[v] <= tl[k - 1])
            continue;
        int i = n < k ? n++ : k - 1;
        while (i > 0 && row[v] > tl[i - 1]) {
            tl[i] = tl[i - 1];
            ti[i] = ti[i - 1];
            i--;
        }
        tl[i] = row[v];
        ti[i] = v;
    }
    for (int i = 0; i < n; i++)
        tl[i] = (float)((double)tl[i] - lse);
    return lse;
}

/* E: fl_sample_cut until 2026-12-07 */
static int cmp_desc_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

static float sorted_cut(const fl_decode_opts *o, const float *w, double z)
{
    float *sorted = malloc(sizeof(float) * V);
    if (!sorted)
        return 0.0f;
    memcpy(sorted, w, sizeof(float) * V);
    qsort(sorted, V, sizeof(float), cmp_desc_f);
    int keep = o->top_k > 0 && o->top_k < V ? o->top_k : V;
    if (o->top_p < 1.0f) {
        double acc = 0;
        for (int i = 0; i < keep; i++) {
            acc += sorted[i] / z;
            if (acc >= o->top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    float cut = sorted[keep - 1];
    free(sorted);
    return cut;
}

static double now_way(const float *row, const fl_tok_out *t1, int k, int32_t *ti, float *tl)
{
    double lse = fl_row_lse(row, V, t1);
    int n = k ? fl_row_top(row, V, k, ti, tl) : 0;
    for (int i = 0; i < n; i++)
        tl[i] = (float)((double)tl[i] - lse);
    return lse;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int k = argc > 1 ? atoi(argv[1]) : 5, rows = argc > 2 ? atoi(argv[2]) : 64,
        passes = argc > 3 ? atoi(argv[3]) : 11;
    if (k < 0 || k > KMAX || rows < 1 || passes < 1) {
        fprintf(stderr, "lse_rows_ab: k 0..%d, rows and passes at least 1\n", KMAX);
        return 2;
    }
    float *lg = malloc(sizeof(float) * (size_t)V * (size_t)rows);
    fl_tok_out *t1 = malloc(sizeof *t1 * (size_t)rows);
    double *ta = malloc(sizeof(double) * (size_t)passes);
    double *tb = malloc(sizeof(double) * (size_t)passes);
    if (!lg || !t1 || !ta || !tb)
        return 1;
    fl_kernels kk;
    fl_kernels_init(&kk, NULL);
    uint64_t rng = 12345;
    for (int r = 0; r < rows; r++) {
        float *row = lg + (size_t)r * V;
        for (int v = 0; v < V; v++) {
            double u = (double)(fl_xorshift(&rng) >> 11) / 9007199254740992.0;
            double w = (double)(fl_xorshift(&rng) >> 11) / 9007199254740992.0;
            /* a normal mass (Box-Muller) of sd 2.5, and one id in 2,000 lifted by 8 */
            row[v] = (float)(2.5 * sqrt(-2 * log(u + 1e-300)) * cos(6.283185307179586 * w) +
                             (fl_xorshift(&rng) % 2000 == 0 ? 8.0 : 0.0));
        }
        row[(size_t)(fl_xorshift(&rng) % V)] = 18.0f; /* the decided token */
        fl_lse all, part; /* the head's statistics, as the CPU backend merges them */
        fl_lse_init(&all);
        for (int v0 = 0; v0 < V; v0 += CH) {
            fl_lse_init(&part);
            kk.lse_add(&part, row + v0, V - v0 < CH ? V - v0 : CH, v0);
            fl_lse_merge(&all, &part);
        }
        fl_lse_finish(&all, &t1[r].token, &t1[r].prob, &t1[r].entropy);
    }
    int32_t ai[KMAX], bi[KMAX];
    float al[KMAX], bl[KMAX];
    double worst = 0, sink = 0;
    for (int r = 0; r < rows; r++) { /* the same answers first */
        const float *row = lg + (size_t)r * V;
        double la = former(row, k, ai, al), lb = now_way(row, &t1[r], k, bi, bl);
        worst = fabs(la - lb) > worst ? fabs(la - lb) : worst;
        for (int i = 0; i < k; i++)
            if (ai[i] != bi[i] || fabs(al[i] - bl[i]) > 1e-5) {
                fprintf(stderr, "lse_rows_ab: row %d, alternative %d differs\n", r, i);
                return 1;
            }
    }
    if (worst > 1e-5) {
        fprintf(stderr, "lse_rows_ab: log-sum-exp differs by %.3g\n", worst);
        return 1;
    }
    for (int p = 0; p < passes; p++) { /* A B, then B A: drifts fall on both */
        for (int side = 0; side < 2; side++) {
            bool a = (side == 0) == (p % 2 == 0);
            double t0 = now_us();
            for (int r = 0; r < rows; r++) {
                const float *row = lg + (size_t)r * V;
                sink += a ? former(row, k, ai, al) : now_way(row, &t1[r], k, bi, bl);
            }
            (a ? ta : tb)[p] = (now_us() - t0) / rows;
        }
    }
    qsort(ta, (size_t)passes, sizeof *ta, cmp_d);
    qsort(tb, (size_t)passes, sizeof *tb, cmp_d);
    double ma = ta[passes / 2], mb = tb[passes / 2];
    printf("vocab %d, top %d, %d rows, %d passes (median us per token): A (double sum) %.1f, "
           "B (backend's lse, span-skipping top) %.1f; A / B %.1fx; worst lse difference %.2g "
           "(%s)\n",
           V, k, rows, passes, ma, mb, ma / mb, worst, sink != 0 ? "ok" : "?");
    /* logit bias: each pass biases every row and takes it back (the subtraction restores the
       row only approximately, so each pass starts from a fresh copy made outside the timing) */
    int32_t ids[5] = {11, 2024, 50000, 99999, 151000};
    float bias[5] = {3.0f, 1.0f, 2.0f, 1.5f, 2.5f};
    float *work = malloc(sizeof(float) * (size_t)V * (size_t)rows);
    if (!work)
        return 1;
    for (int r = 0; r < rows; r++) { /* the same predictions first */
        float *row = work + (size_t)r * V;
        memcpy(row, lg + (size_t)r * V, sizeof(float) * V);
        fl_tok_out c = t1[r], d = t1[r];
        fl_row_bias(row, V, ids, bias, 5, &d);
        fl_row_top1(row, V, &c);
        if (c.token != d.token || fabs(c.prob - d.prob) > 1e-6) {
            fprintf(stderr, "lse_rows_ab: row %d: biased predictions differ\n", r);
            return 1;
        }
    }
    for (int p = 0; p < passes; p++) {
        for (int side = 0; side < 2; side++) {
            bool c = (side == 0) == (p % 2 == 0);
            memcpy(work, lg, sizeof(float) * (size_t)V * (size_t)rows);
            double t0 = now_us();
            for (int r = 0; r < rows; r++) {
                float *row = work + (size_t)r * V;
                fl_tok_out o = t1[r];
                if (c) {
                    for (int j = 0; j < 5; j++)
                        row[ids[j]] += bias[j];
                    fl_row_top1(row, V, &o);
                } else {
                    fl_row_bias(row, V, ids, bias, 5, &o);
                }
                sink += o.prob;
            }
            (c ? ta : tb)[p] = (now_us() - t0) / rows;
        }
    }
    qsort(ta, (size_t)passes, sizeof *ta, cmp_d);
    qsort(tb, (size_t)passes, sizeof *tb, cmp_d);
    printf("logit bias of 5 tokens (median us per row): C (whole row) %.1f, D (the biased "
           "tokens only) %.2f; C / D %.0fx\n", ta[passes / 2], tb[passes / 2],
           ta[passes / 2] / tb[passes / 2]);
    free(work);
    /* sampling's cut: the tempered weights of each row, as fl_sample makes them */
    float *wts = malloc(sizeof(float) * (size_t)V * (size_t)rows);
    double *zs = malloc(sizeof(double) * (size_t)rows);
    if (!wts || !zs)
        return 1;
    for (int r = 0; r < rows; r++) {
        const float *row = lg + (size_t)r * V;
        float mx = row[0];
        for (int v = 1; v < V; v++)
            mx = row[v] > mx ? row[v] : mx;
        zs[r] = 0;
        for (int v = 0; v < V; v++) {
            wts[(size_t)r * V + v] = expf((row[v] - mx) / 0.7f);
            zs[r] += wts[(size_t)r * V + v];
        }
    }
    const struct { int k; float p; } cuts[] = {{0, 0.95f}, {0, 0.8f}, {50, 1.0f}, {20, 0.9f}};
    for (size_t ci = 0; ci < sizeof cuts / sizeof cuts[0]; ci++) {
        fl_decode_opts o;
        fl_decode_opts_default(&o);
        o.top_k = cuts[ci].k;
        o.top_p = cuts[ci].p;
        for (int r = 0; r < rows; r++)
            if (sorted_cut(&o, wts + (size_t)r * V, zs[r]) !=
                fl_sample_cut(&o, wts + (size_t)r * V, zs[r], V)) {
                fprintf(stderr, "lse_rows_ab: row %d: the cuts differ\n", r);
                return 1;
            }
        for (int p = 0; p < passes; p++)
            for (int side = 0; side < 2; side++) {
                bool e = (side == 0) == (p % 2 == 0);
                double t0 = now_us();
                for (int r = 0; r < rows; r++)
                    sink += e ? sorted_cut(&o, wts + (size_t)r * V, zs[r])
                              : fl_sample_cut(&o, wts + (size_t)r * V, zs[r], V);
                (e ? ta : tb)[p] = (now_us() - t0) / rows;
            }
        qsort(ta, (size_t)passes, sizeof *ta, cmp_d);
        qsort(tb, (size_t)passes, sizeof *tb, cmp_d);
        printf("sampling cut, top_k %d top_p %.2f (median us per row): E (whole vocabulary "
               "sorted) %.1f, F (fl_sample_cut) %.1f; E / F %.1fx\n", cuts[ci].k,
               (double)cuts[ci].p, ta[passes / 2], tb[passes / 2], ta[passes / 2] / tb[passes / 2]);
    }
    free(wts);
    free(zs);
    fl_decode_opts g, h;
    fl_decode_opts_default(&g);
    g.temperature = 0.7f;
    h = g;
    g.policy = FL_POLICY_ENTROPY;
    h.policy = FL_POLICY_THRESHOLD;
    float *tmp = malloc(sizeof(float) * V);
    if (!tmp)
        return 1;
    for (int p = 0; p < passes; p++)
        for (int side = 0; side < 2; side++) {
            bool a = (side == 0) == (p % 2 == 0);
            uint64_t r1 = 77;
            double t0 = now_us();
            for (int r = 0; r < rows; r++) {
                fl_tok_out o;
                fl_sample(a ? &g : &h, lg + (size_t)r * V, V, &r1, tmp, &o);
                sink += o.token;
            }
            (a ? ta : tb)[p] = (now_us() - t0) / rows;
        }
    uint64_t r1 = 5, r2 = 5;
    for (int r = 0; r < rows; r++) {
        fl_tok_out x, y;
        fl_sample(&g, lg + (size_t)r * V, V, &r1, tmp, &x);
        fl_sample(&h, lg + (size_t)r * V, V, &r2, tmp, &y);
        if (x.token != y.token || x.prob != y.prob) {
            fprintf(stderr, "lse_rows_ab: row %d: the draws differ\n", r);
            return 1;
        }
    }
    qsort(ta, (size_t)passes, sizeof *ta, cmp_d);
    qsort(tb, (size_t)passes, sizeof *tb, cmp_d);
    printf("fl_sample at temperature 0.7 (median us per row): G (entropy policy) %.1f, H (other "
           "policies, no entropy) %.1f; G / H %.2fx\n", ta[passes / 2], tb[passes / 2],
           ta[passes / 2] / tb[passes / 2]);
    free(tmp);
    free(lg);
    free(t1);
    free(ta);
    free(tb);
    return 0;
}
