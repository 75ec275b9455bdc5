/* moe.c: the routers of config.h, as the authors compute them (MOE.md): all in fp32, each
 * selection by a strict order in which the lower id wins a tie. */
#include "moe.h"

#include <math.h>

size_t fl_moe_scratch(const fl_moe *m) { return 3 * (size_t)m->n_experts + 2 * (size_t)m->n_group; }

/* The index of the largest v[i] with ok[i] != 0, the lower index on a tie (NaN never wins
 * over a number); -1 when none is ok. */
static int fl_best(const float *v, const float *ok, int n)
{
    int b = -1;
    for (int i = 0; i < n; i++)
        if (ok[i] != 0 && (b < 0 || v[i] > v[b] || (v[b] != v[b] && v[i] == v[i])))
            b = i;
    return b;
}

/* The top_k of score among ok (cleared as they are taken): ids best first, w their wt. */
static float fl_take(const fl_moe *m, const float *score, float *ok, const float *wt, int32_t *ids,
                     float *w)
{
    float tot = 0;
    for (int k = 0; k < m->top_k; k++) {
        int b = fl_best(score, ok, m->n_experts);
        ok[b] = 0;
        ids[k] = b;
        w[k] = wt[b];
        tot += w[k];
    }
    return tot;
}

void fl_moe_route(const fl_moe *m, const float *logits, const float *bias, int32_t *ids, float *w,
                  float *scratch)
{
    int E = m->n_experts, K = m->top_k;
    float *score = scratch, *sel = scratch + E, *ok = scratch + 2 * E;
    if (m->router == FL_ROUTER_SOFTMAX) {
        /* softmax over every expert, then the k most probable */
        float mx = logits[0], sum = 0;
        for (int i = 1; i < E; i++)
            mx = logits[i] > mx ? logits[i] : mx;
        for (int i = 0; i < E; i++) {
            score[i] = expf(logits[i] - mx);
            sum += score[i];
        }
        for (int i = 0; i < E; i++) {
            score[i] /= sum;
            ok[i] = 1;
        }
        float tot = fl_take(m, score, ok, score, ids, w);
        if (m->norm_topk)
            for (int k = 0; k < K; k++)
                w[k] /= tot;
        return;
    }
    /* SIGMOID_GROUPED: sigmoid scores; the bias only selects; groups of `per` consecutive
     * experts scored by their two best selections; the topk_group best groups kept */
    int G = m->n_group, per = E / G;
    float *gscore = scratch + 3 * E, *gok = gscore + G;
    for (int i = 0; i < E; i++) {
        score[i] = 1.0f / (1.0f + expf(-logits[i]));
        sel[i] = bias ? score[i] + bias[i] : score[i];
        ok[i] = 0;
    }
    for (int g = 0; g < G; g++) {
        const float *s = sel + (size_t)g * per;
        int a = 0, b = -1;
        for (int i = 1; i < per; i++)
            a = s[i] > s[a] ? i : a;
        for (int i = 0; i < per; i++)
            if (i != a && (b < 0 || s[i] > s[b]))
                b = i;
        gscore[g] = s[a] + s[b];
        gok[g] = 1;
    }
    for (int k = 0; k < m->topk_group; k++) {
        int g = fl_best(gscore, gok, G);
        gok[g] = 0;
        for (int i = 0; i < per; i++)
            ok[(size_t)g * per + i] = 1;
    }
    float tot = fl_take(m, sel, ok, score, ids, w);
    for (int k = 0; k < K; k++) /* the authors divide whenever top_k > 1 */
        w[k] = (K > 1 ? w[k] / (tot + 1e-20f) : w[k]) * m->scaling;
}
