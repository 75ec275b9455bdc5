/* decode.c: unmasking policies and sampling. */
#include "decode.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void fl_decode_opts_default(fl_decode_opts *o)
{
    memset(o, 0, sizeof *o);
    o->policy = FL_POLICY_THRESHOLD;
    o->threshold = 0.9f;
    o->k = 1;
    o->entropy_bound = 0.35f;
    o->store_overlap = true;
    o->pipeline = true;
    o->tau_add = 0.25f;
    o->tau_act = 0.5f;
    o->tau_conf = 0.9f;
    o->max_blocks = 3;
    o->temperature = 0.0f;
    o->top_k = 0;
    o->top_p = 1.0f;
    o->seed = 0;
}

static const char *pnames[FL_POLICY_COUNT] = {"sequential", "static", "threshold", "dynamic",
                                              "entropy"};

const char *fl_policy_name(fl_policy p) { return (unsigned)p < FL_POLICY_COUNT ? pnames[p] : "?"; }

int fl_policy_parse(const char *s, fl_policy *out)
{
    for (int i = 0; i < FL_POLICY_COUNT; i++)
        if (!strcmp(s, pnames[i])) {
            *out = (fl_policy)i;
            return 0;
        }
    return FL_EINVAL;
}

int fl_decode_opts_check(const fl_decode_opts *o, fl_err *e)
{
    if ((unsigned)o->policy >= FL_POLICY_COUNT)
        return fl_err_set(e, FL_EINVAL, "unknown decoding policy");
#define RANGE(x, lo, hi, name)                                                                  \
    if (!(x >= lo && x <= hi))                                                                  \
        return fl_err_set(e, FL_ERANGE, "%s must be in [%g, %g], got %g", name, (double)lo,      \
                          (double)hi, (double)x);
    RANGE(o->threshold, 0.0f, 1.0f, "threshold");
    RANGE(o->tau_add, 0.0f, 1.0f, "tau_add");
    RANGE(o->tau_act, 0.0f, 1.0f, "tau_act");
    RANGE(o->tau_conf, 0.0f, 1.0f, "tau_conf");
    RANGE(o->entropy_bound, 0.0f, 100.0f, "entropy_bound");
    RANGE(o->temperature, 0.0f, 10.0f, "temperature");
    RANGE(o->top_p, 0.0f, 1.0f, "top_p");
#undef RANGE
    if (o->top_p <= 0.0f)
        return fl_err_set(e, FL_ERANGE, "top_p must be > 0");
    if (o->k < 1 || o->k > 256)
        return fl_err_set(e, FL_ERANGE, "k (tokens per step) must be in [1, 256], got %d", o->k);
    if (o->top_k < 0)
        return fl_err_set(e, FL_ERANGE, "top_k must be >= 0, got %d", o->top_k);
    if (o->max_blocks < 1 || o->max_blocks > 16)
        return fl_err_set(e, FL_ERANGE, "max_blocks must be in [1, 16], got %d", o->max_blocks);
    return 0;
}

/* Indices of eligible positions sorted by descending prob (ties: lower index first, so
 * that runs are reproducible). */
static int ranked(const fl_tok_out *pred, const uint8_t *eligible, int n, int *idx, bool by_entropy)
{
    int m = 0;
    for (int i = 0; i < n; i++)
        if (eligible[i])
            idx[m++] = i;
    /* insertion sort: blocks are small (<= 256) */
    for (int i = 1; i < m; i++) {
        int v = idx[i], j = i - 1;
        while (j >= 0) {
            bool before = by_entropy ? pred[v].entropy < pred[idx[j]].entropy
                                     : pred[v].prob > pred[idx[j]].prob;
            if (!before)
                break;
            idx[j + 1] = idx[j];
            j--;
        }
        idx[j + 1] = v;
    }
    return m;
}

int fl_policy_select(const fl_decode_opts *o, const fl_tok_out *pred, const uint8_t *eligible,
                     int n, bool semi, uint8_t *sel)
{
    int idx[256];
    memset(sel, 0, (size_t)n);
    if (n > 256)
        n = 256;
    int m = ranked(pred, eligible, n, idx, o->policy == FL_POLICY_ENTROPY && !semi);
    if (m == 0)
        return 0;
    int cnt = 0;
    if (semi) {
        for (int i = 0; i < m; i++)
            if (pred[idx[i]].prob > o->tau_conf) {
                sel[idx[i]] = 1;
                cnt++;
            }
        return cnt;
    }
    switch (o->policy) {
    case FL_POLICY_SEQUENTIAL:
        cnt = 1;
        break;
    case FL_POLICY_STATIC:
        cnt = o->k < m ? o->k : m;
        break;
    case FL_POLICY_THRESHOLD:
        while (cnt < m && pred[idx[cnt]].prob > o->threshold)
            cnt++;
        if (cnt == 0)
            cnt = 1;
        break;
    case FL_POLICY_DYNAMIC: {
        int quota = o->k < m ? o->k : m;
        int above = 0;
        while (above < m && pred[idx[above]].prob > o->threshold)
            above++;
        cnt = above >= quota ? above : quota;
        break;
    }
    case FL_POLICY_ENTROPY: {
        double sum = 0;
        while (cnt < m && sum + pred[idx[cnt]].entropy <= o->entropy_bound) {
            sum += pred[idx[cnt]].entropy;
            cnt++;
        }
        if (cnt == 0)
            cnt = 1;
        break;
    }
    default:
        cnt = 1;
    }
    for (int i = 0; i < cnt; i++)
        sel[idx[i]] = 1;
    return cnt;
}

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s ? *s : 0x9e3779b97f4a7c15ull;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return x;
}

static int cmp_desc(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

void fl_sample(const fl_decode_opts *o, const float *logits, int vocab, uint64_t *rng, float *tmp,
               fl_tok_out *out)
{
    float t = o->temperature > 0 ? o->temperature : 1.0f;
    float mx = -INFINITY;
    for (int i = 0; i < vocab; i++)
        if (logits[i] > mx)
            mx = logits[i];
    double z = 0;
    for (int i = 0; i < vocab; i++) {
        tmp[i] = expf((logits[i] - mx) / t);
        z += tmp[i];
    }
    double ent = 0;
    for (int i = 0; i < vocab; i++) {
        double p = tmp[i] / z;
        if (p > 0)
            ent -= p * log(p);
    }
    /* the cut-off probability below which tokens are excluded (top_k, then top_p) */
    float cut = 0.0f;
    if ((o->top_k > 0 && o->top_k < vocab) || o->top_p < 1.0f) {
        float *sorted = malloc(sizeof(float) * (size_t)vocab);
        if (sorted) {
            memcpy(sorted, tmp, sizeof(float) * (size_t)vocab);
            qsort(sorted, (size_t)vocab, sizeof(float), cmp_desc);
            int keep = vocab;
            if (o->top_k > 0 && o->top_k < keep)
                keep = o->top_k;
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
            cut = sorted[keep - 1];
            free(sorted);
        }
    }
    double zk = 0;
    for (int i = 0; i < vocab; i++)
        if (tmp[i] >= cut)
            zk += tmp[i];
    double r = (double)(xorshift(rng) >> 11) / 9007199254740992.0 * zk;
    int tok = -1;
    double acc = 0;
    for (int i = 0; i < vocab; i++) {
        if (tmp[i] < cut)
            continue;
        acc += tmp[i];
        tok = i;
        if (acc > r)
            break;
    }
    out->token = tok;
    out->prob = (float)(tmp[tok] / zk);
    out->entropy = (float)ent;
}
