/* test_moe.c: the routers (engine/moe.h) against a second implementation written here the
 * slow, obvious way (sort everything, in double), on random logits and biases of several
 * shapes, plus hand-worked cases: the bias selects but never weights, a group is scored by its
 * two best, ties go to the lower id. */
#include <math.h>
#include <stdlib.h>

#include "check.h"
#include "moe.h"

typedef struct rank {
    double v;
    int id;
} rank;

static int by_value_desc(const void *a, const void *b)
{
    const rank *x = a, *y = b;
    if (x->v != y->v)
        return x->v > y->v ? -1 : 1;
    return x->id - y->id;
}

/* The reference: ids best first and weights. */
static void brute(const fl_moe *m, const float *logits, const float *bias, int *ids, double *w)
{
    int E = m->n_experts, K = m->top_k;
    rank r[1024];
    double s[1024];
    if (m->router == FL_ROUTER_SOFTMAX) {
        double mx = -INFINITY, sum = 0;
        for (int i = 0; i < E; i++)
            mx = fmax(mx, logits[i]);
        for (int i = 0; i < E; i++)
            sum += s[i] = exp((double)logits[i] - mx);
        for (int i = 0; i < E; i++)
            r[i] = (rank){s[i] / sum, i};
        qsort(r, (size_t)E, sizeof *r, by_value_desc);
        double tot = 0;
        for (int k = 0; k < K; k++)
            tot += r[k].v;
        for (int k = 0; k < K; k++) {
            ids[k] = r[k].id;
            w[k] = m->norm_topk ? r[k].v / tot : r[k].v;
        }
        return;
    }
    int G = m->n_group, per = E / G;
    double sel[1024];
    for (int i = 0; i < E; i++) {
        s[i] = 1 / (1 + exp(-(double)logits[i]));
        /* the bias is added in f32 to the f32 score, as the authors do */
        sel[i] = bias ? (double)((float)s[i] + bias[i]) : s[i];
    }
    rank g[64];
    for (int q = 0; q < G; q++) {
        rank in[1024];
        for (int i = 0; i < per; i++)
            in[i] = (rank){sel[q * per + i], i};
        qsort(in, (size_t)per, sizeof *in, by_value_desc);
        g[q] = (rank){in[0].v + in[1].v, q};
    }
    qsort(g, (size_t)G, sizeof *g, by_value_desc);
    int n = 0;
    for (int k = 0; k < m->topk_group; k++)
        for (int i = 0; i < per; i++)
            r[n++] = (rank){sel[g[k].id * per + i], g[k].id * per + i};
    qsort(r, (size_t)n, sizeof *r, by_value_desc);
    double tot = 0;
    for (int k = 0; k < K; k++)
        tot += s[r[k].id];
    for (int k = 0; k < K; k++) {
        ids[k] = r[k].id;
        w[k] = (K > 1 ? s[r[k].id] / tot : s[r[k].id]) * m->scaling;
    }
}

static uint32_t rng = 12345;
static float frand(void) /* uniform in [-1, 1) */
{
    rng = rng * 1664525u + 1013904223u;
    return (float)(rng >> 8) / (float)(1u << 23) - 1.0f;
}

/* n random tokens for m: the chosen ids must be the reference's; a pair whose two deciding
 * scores are within 1e-5 may differ by rounding (f32 vs double), and such tokens are counted
 * and skipped rather than compared. */
static void random_cases(const fl_moe *m, int n, float spread, bool with_bias)
{
    int E = m->n_experts, K = m->top_k, skipped = 0;
    float *lg = malloc((size_t)E * sizeof *lg), *bias = malloc((size_t)E * sizeof *bias);
    float *scr = malloc(fl_moe_scratch(m) * sizeof *scr), w[64];
    int32_t ids[64];
    int rid[64];
    double rw[64];
    for (int t = 0; t < n; t++) {
        for (int i = 0; i < E; i++) {
            lg[i] = spread * frand();
            bias[i] = 0.1f * frand();
        }
        const float *b = with_bias ? bias : NULL;
        fl_moe_route(m, lg, b, ids, w, scr);
        brute(m, lg, b, rid, rw);
        bool same = true;
        for (int k = 0; k < K; k++)
            same = same && ids[k] == rid[k];
        if (!same) { /* honest near-tie? the reference's scores of the two picks */
            skipped++;
            CHECK(skipped <= n / 100 + 1, "router %d E %d K %d token %d: ids differ beyond "
                  "near-ties (first %d vs %d)", m->router, E, K, t, ids[0], rid[0]);
            continue;
        }
        for (int k = 0; k < K; k++)
            CHECK(fabs(w[k] - rw[k]) <= 1e-5 * fabs(rw[k]) + 1e-7, "router %d token %d k %d: "
                  "weight %.9g vs %.9g", m->router, t, k, (double)w[k], rw[k]);
    }
    printf("router %s E %d K %d groups %d/%d: %d tokens, %d near-ties skipped\n",
           m->router == FL_ROUTER_SOFTMAX ? "softmax" : "sigmoid-grouped", E, K, m->n_group,
           m->topk_group, n, skipped);
    free(lg);
    free(bias);
    free(scr);
}

static void hand_cases(void)
{
    float scr[64], w[8];
    int32_t ids[8];
    /* sigmoid, 4 experts in 2 groups, keep 1 group, top 2, scaling 2: logits 0 everywhere
     * but a bias that favours group 1 (experts 2, 3): the picks are 2 and 3, weighted by their
     * UNBIASED scores (0.5 each -> 0.5 of the sum) times 2 */
    fl_moe m = {.router = FL_ROUTER_SIGMOID_GROUPED, .n_experts = 4, .top_k = 2, .n_group = 2,
                .topk_group = 1, .expert_bias = true, .scaling = 2.0f};
    float lg[4] = {0, 0, 0, 0}, bias[4] = {0, 0, 0.2f, 0.1f};
    fl_moe_route(&m, lg, bias, ids, w, scr);
    CHECK(ids[0] == 2 && ids[1] == 3, "bias selects: %d %d", ids[0], ids[1]);
    CHECK(w[0] == 1.0f && w[1] == 1.0f, "unbiased weights: %g %g", (double)w[0], (double)w[1]);
    /* a group is scored by its two best: group 0 has one very good expert (bias 0.5) and one
     * poor (-0.4), group 1 two fair ones (0.1 each): 0.6 + 0.1 = 1.1 < 0.6 + 0.6 = 1.2 */
    float b2[4] = {0.5f, -0.4f, 0.1f, 0.1f};
    fl_moe_route(&m, lg, b2, ids, w, scr);
    CHECK(ids[0] == 2 && ids[1] == 3, "two-best group score: %d %d", ids[0], ids[1]);
    /* all equal: the lower ids win, groups and experts */
    fl_moe_route(&m, lg, NULL, ids, w, scr);
    CHECK(ids[0] == 0 && ids[1] == 1, "ties to the lower id: %d %d", ids[0], ids[1]);
    /* top_k 1: no division by the sum: sigmoid(0) * scaling */
    m.top_k = 1;
    fl_moe_route(&m, lg, NULL, ids, w, scr);
    CHECK(ids[0] == 0 && w[0] == 1.0f, "top 1: %d %g", ids[0], (double)w[0]);
    /* softmax, 4 experts, top 2, renormalised and not */
    fl_moe s = {.router = FL_ROUTER_SOFTMAX, .n_experts = 4, .top_k = 2, .n_group = 1,
                .topk_group = 1, .scaling = 1.0f, .norm_topk = true};
    float l2[4] = {0, logf(3.0f), 0, logf(2.0f)}; /* p = 1/7, 3/7, 1/7, 2/7 */
    fl_moe_route(&s, l2, NULL, ids, w, scr);
    CHECK(ids[0] == 1 && ids[1] == 3, "softmax picks %d %d", ids[0], ids[1]);
    CHECK(fabsf(w[0] - 0.6f) < 1e-6f && fabsf(w[1] - 0.4f) < 1e-6f, "renormalised %g %g",
          (double)w[0], (double)w[1]);
    s.norm_topk = false;
    fl_moe_route(&s, l2, NULL, ids, w, scr);
    CHECK(fabsf(w[0] - 3.0f / 7) < 1e-6f && fabsf(w[1] - 2.0f / 7) < 1e-6f, "raw %g %g",
          (double)w[0], (double)w[1]);
}

int main(void)
{
    hand_cases();
    fl_moe ll = {.router = FL_ROUTER_SIGMOID_GROUPED, .n_experts = 256, .top_k = 8, .n_group = 8,
                 .topk_group = 4, .expert_bias = true, .scaling = 2.5f, .norm_topk = true};
    random_cases(&ll, 2000, 4.0f, true);  /* LLaDA2-mini's router */
    random_cases(&ll, 500, 4.0f, false);
    fl_moe l16 = {.router = FL_ROUTER_SIGMOID_GROUPED, .n_experts = 16, .top_k = 4, .n_group = 4,
                  .topk_group = 2, .expert_bias = true, .scaling = 1.0f};
    random_cases(&l16, 2000, 2.0f, true);
    fl_moe one = l16;
    one.n_group = one.topk_group = 1; /* no group limit */
    random_cases(&one, 1000, 2.0f, true);
    fl_moe sm = {.router = FL_ROUTER_SOFTMAX, .n_experts = 128, .top_k = 8, .n_group = 1,
                 .topk_group = 1, .scaling = 1.0f, .norm_topk = true}; /* SDAR-30B-A3B's */
    random_cases(&sm, 2000, 4.0f, false);
    sm.norm_topk = false;
    sm.n_experts = 16;
    random_cases(&sm, 1000, 4.0f, false);
    return check_summary("test_moe");
}
