/* decode.c: unmasking policies and sampling. */
#include "decode.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fl_decode_opts_default(fl_decode_opts *o)
{
    memset(o, 0, sizeof *o);
    o->policy = FL_POLICY_THRESHOLD;
    o->threshold = 0.9f;
    o->k = 1;
    o->steps = 0;
    o->entropy_bound = 0.35f;
    o->edit_threshold = FL_EDIT_OFF;
    o->max_post_steps = 16;
    o->store_overlap = true;
    o->pipeline = true;
    o->tau_add = 0.25f;
    o->tau_act = 0.5f;
    o->tau_conf = 0.9f;
    o->max_blocks = 3;
    o->temperature = 0.0f;
    o->top_k = 0;
    o->top_p = 1.0f;
    o->min_p = 0.0f;
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

int fl_decode_opts_check_ranges(const fl_decode_opts *o, fl_err *e)
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
    RANGE(o->min_p, 0.0f, 1.0f, "min_p");
    if (o->edit_threshold != FL_EDIT_OFF)
        RANGE(o->edit_threshold, 0.0f, 1.0f, "edit_threshold");
#undef RANGE
    if (o->top_p <= 0.0f)
        return fl_err_set(e, FL_ERANGE, "top_p must be > 0");
    if (o->k < 1 || o->k > FL_MAX_BLOCK)
        return fl_err_set(e, FL_ERANGE, "k (tokens per step) must be in [1, %d], got %d",
                          FL_MAX_BLOCK, o->k);
    if (o->top_k < 0)
        return fl_err_set(e, FL_ERANGE, "top_k must be >= 0, got %d", o->top_k);
    if (o->max_blocks < 1 || o->max_blocks > FL_MAX_RUN_BLOCKS)
        return fl_err_set(e, FL_ERANGE, "max_blocks must be in [1, %d], got %d",
                          FL_MAX_RUN_BLOCKS, o->max_blocks);
    if (o->steps < 0 || o->steps > FL_MAX_STEPS)
        return fl_err_set(e, FL_ERANGE, "steps must be in [0, %d], got %d", FL_MAX_STEPS, o->steps);
    if (o->max_post_steps < 0 || o->max_post_steps > FL_MAX_POST_STEPS)
        return fl_err_set(e, FL_ERANGE, "max_post_steps must be in [0, %d], got %d",
                          FL_MAX_POST_STEPS, o->max_post_steps);
    return 0;
}

int fl_decode_opts_check(const fl_decode_opts *o, fl_err *e)
{
    int rc = fl_decode_opts_check_ranges(o, e);
    if (rc)
        return rc;
    /* an edited block stays open until its post steps end, and a successor running beside
       it would have read tokens that may still change: refused rather than given a meaning */
    if (o->edit_threshold != FL_EDIT_OFF && o->pipeline)
        return fl_err_set(e, FL_EINVAL, "edit_threshold (token editing) works on one block at a "
                                        "time: it needs pipeline false");
    return 0;
}

int fl_decode_preset(const char *name, fl_decode_opts *o, uint32_t *set)
{
    float th, edit;
    if (!strcmp(name, "quality")) {
        th = 0.7f;
        edit = 0.5f;
    } else if (!strcmp(name, "speed")) {
        th = 0.5f;
        edit = 0.0f;
    } else {
        return FL_EINVAL;
    }
    o->policy = FL_POLICY_THRESHOLD;
    o->threshold = th;
    o->edit_threshold = edit;
    o->max_post_steps = 16;
    o->pipeline = false;
    *set |= FL_DF_BIT(FL_DF_POLICY) | FL_DF_BIT(FL_DF_THRESHOLD) | FL_DF_BIT(FL_DF_EDIT_THRESHOLD) |
            FL_DF_BIT(FL_DF_MAX_POST_STEPS) | FL_DF_BIT(FL_DF_PIPELINE);
    return 0;
}

void fl_decode_opts_llada2(fl_decode_opts *o)
{
    o->policy = FL_POLICY_DYNAMIC;
    o->threshold = 0.95f;
    o->steps = 32;
    o->k = 1;
    o->pipeline = false;
    o->edit_threshold = FL_EDIT_OFF;
    o->max_post_steps = 16;
}

int fl_steps_quota(int steps, int max_tokens, int block, int step)
{
    int s = steps < max_tokens ? steps : max_tokens;
    if (s < 1 || step >= s)
        return 1;
    int q = block / s + (step < block % s ? 1 : 0);
    return q > 0 ? q : 1;
}

static const char *fnames[FL_DF_COUNT] = {
    [FL_DF_POLICY] = "policy",       [FL_DF_THRESHOLD] = "threshold", [FL_DF_K] = "k",
    [FL_DF_STEPS] = "steps",         [FL_DF_ENTROPY_BOUND] = "entropy_bound",
    [FL_DF_EDIT_THRESHOLD] = "edit_threshold", [FL_DF_MAX_POST_STEPS] = "max_post_steps",
    [FL_DF_OVERLAP] = "overlap",
    [FL_DF_PIPELINE] = "pipeline",   [FL_DF_TAU_ADD] = "tau_add",     [FL_DF_TAU_ACT] = "tau_act",
    [FL_DF_TAU_CONF] = "tau_conf",   [FL_DF_MAX_BLOCKS] = "max_blocks",
    [FL_DF_TEMPERATURE] = "temperature", [FL_DF_TOP_K] = "top_k", [FL_DF_TOP_P] = "top_p",
    [FL_DF_MIN_P] = "min_p",
};

const char *fl_dec_field_name(fl_dec_field f)
{
    return (unsigned)f < FL_DF_COUNT ? fnames[f] : "?";
}

const char *fl_dec_source_name(fl_dec_source s)
{
    static const char *n[FL_DS_COUNT] = {"family", "model", "flag", "request"};
    return (unsigned)s < FL_DS_COUNT ? n[s] : "?";
}

static void copy_field(fl_decode_opts *d, const fl_decode_opts *s, fl_dec_field f)
{
    switch (f) {
    case FL_DF_POLICY: d->policy = s->policy; break;
    case FL_DF_THRESHOLD: d->threshold = s->threshold; break;
    case FL_DF_K: d->k = s->k; break;
    case FL_DF_STEPS: d->steps = s->steps; break;
    case FL_DF_ENTROPY_BOUND: d->entropy_bound = s->entropy_bound; break;
    case FL_DF_EDIT_THRESHOLD: d->edit_threshold = s->edit_threshold; break;
    case FL_DF_MAX_POST_STEPS: d->max_post_steps = s->max_post_steps; break;
    case FL_DF_OVERLAP: d->store_overlap = s->store_overlap; break;
    case FL_DF_PIPELINE: d->pipeline = s->pipeline; break;
    case FL_DF_TAU_ADD: d->tau_add = s->tau_add; break;
    case FL_DF_TAU_ACT: d->tau_act = s->tau_act; break;
    case FL_DF_TAU_CONF: d->tau_conf = s->tau_conf; break;
    case FL_DF_MAX_BLOCKS: d->max_blocks = s->max_blocks; break;
    case FL_DF_TEMPERATURE: d->temperature = s->temperature; break;
    case FL_DF_TOP_K: d->top_k = s->top_k; break;
    case FL_DF_TOP_P: d->top_p = s->top_p; break;
    case FL_DF_MIN_P: d->min_p = s->min_p; break;
    default: break;
    }
}

void fl_decode_opts_overlay(fl_decode_opts *dst, uint8_t src_of[FL_DF_COUNT],
                            const fl_decode_opts *src, uint32_t mask, fl_dec_source s)
{
    for (int f = 0; f < FL_DF_COUNT; f++)
        if (mask & FL_DF_BIT(f)) {
            copy_field(dst, src, (fl_dec_field)f);
            if (src_of)
                src_of[f] = (uint8_t)s;
        }
}

void fl_dec_field_json(const fl_decode_opts *o, fl_dec_field f, char *buf, size_t cap)
{
    switch (f) {
    case FL_DF_POLICY: snprintf(buf, cap, "\"%s\"", fl_policy_name(o->policy)); break;
    case FL_DF_OVERLAP: snprintf(buf, cap, "%s", o->store_overlap ? "true" : "false"); break;
    case FL_DF_PIPELINE: snprintf(buf, cap, "%s", o->pipeline ? "true" : "false"); break;
    case FL_DF_K: snprintf(buf, cap, "%d", o->k); break;
    case FL_DF_STEPS: snprintf(buf, cap, "%d", o->steps); break;
    case FL_DF_MAX_POST_STEPS: snprintf(buf, cap, "%d", o->max_post_steps); break;
    case FL_DF_EDIT_THRESHOLD:
        if (o->edit_threshold == FL_EDIT_OFF)
            snprintf(buf, cap, "false");
        else
            snprintf(buf, cap, "%g", (double)o->edit_threshold);
        break;
    case FL_DF_MAX_BLOCKS: snprintf(buf, cap, "%d", o->max_blocks); break;
    case FL_DF_TOP_K: snprintf(buf, cap, "%d", o->top_k); break;
    case FL_DF_THRESHOLD: snprintf(buf, cap, "%g", (double)o->threshold); break;
    case FL_DF_ENTROPY_BOUND: snprintf(buf, cap, "%g", (double)o->entropy_bound); break;
    case FL_DF_TAU_ADD: snprintf(buf, cap, "%g", (double)o->tau_add); break;
    case FL_DF_TAU_ACT: snprintf(buf, cap, "%g", (double)o->tau_act); break;
    case FL_DF_TAU_CONF: snprintf(buf, cap, "%g", (double)o->tau_conf); break;
    case FL_DF_TEMPERATURE: snprintf(buf, cap, "%g", (double)o->temperature); break;
    case FL_DF_TOP_P: snprintf(buf, cap, "%g", (double)o->top_p); break;
    case FL_DF_MIN_P: snprintf(buf, cap, "%g", (double)o->min_p); break;
    default: snprintf(buf, cap, "null"); break;
    }
}

int fl_decode_opts_parse_json(const struct json_t *obj, const char *where, fl_decode_opts *o,
                              uint32_t *set, fl_err *e)
{
    const json_t *d = (const json_t *)obj;
    if (!json_is_object(d))
        return fl_err_set(e, FL_EFORMAT, "%s must be an object", where);
    fl_decode_opts t = *o;
    uint32_t mask = 0;
    /* the preset first, whatever the keys' order: the object's own keys override it */
    const json_t *pre = json_object_get(d, "preset");
    if (pre && (!json_is_string(pre) || fl_decode_preset(json_string_value(pre), &t, &mask)))
        return fl_err_set(e, FL_EFORMAT, "%s.preset must be one of " FL_DECODE_PRESETS, where);
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)d, key, v)
    {
        if (!strcmp(key, "preset"))
            continue;
        int f = 0;
        while (f < FL_DF_COUNT && strcmp(key, fnames[f]))
            f++;
        if (f == FL_DF_COUNT)
            return fl_err_set(e, FL_EFORMAT, "%s: unknown decoding option '%.64s'", where, key);
        switch ((fl_dec_field)f) {
        case FL_DF_POLICY:
            if (!json_is_string(v) || fl_policy_parse(json_string_value(v), &t.policy))
                return fl_err_set(e, FL_EFORMAT,
                                  "%s.policy must be one of sequential, static, threshold, "
                                  "dynamic, entropy", where);
            break;
        case FL_DF_OVERLAP:
        case FL_DF_PIPELINE:
            if (!json_is_boolean(v))
                return fl_err_set(e, FL_EFORMAT, "%s.%s must be true or false", where, key);
            *(f == FL_DF_OVERLAP ? &t.store_overlap : &t.pipeline) = json_is_true(v);
            break;
        case FL_DF_K:
        case FL_DF_STEPS:
        case FL_DF_MAX_POST_STEPS:
        case FL_DF_MAX_BLOCKS:
        case FL_DF_TOP_K: {
            if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) > (1 << 24))
                return fl_err_set(e, FL_EFORMAT, "%s.%s must be a non-negative integer", where,
                                  key);
            int x = (int)json_integer_value(v);
            *(f == FL_DF_K           ? &t.k
              : f == FL_DF_STEPS     ? &t.steps
              : f == FL_DF_MAX_POST_STEPS ? &t.max_post_steps
              : f == FL_DF_MAX_BLOCKS ? &t.max_blocks
                                      : &t.top_k) = x;
            break;
        }
        case FL_DF_EDIT_THRESHOLD:
            if (json_is_false(v)) {
                t.edit_threshold = FL_EDIT_OFF;
                break;
            }
            if (!json_is_number(v))
                return fl_err_set(e, FL_EFORMAT, "%s.edit_threshold must be a number or false",
                                  where);
            /* checked here: the sentinel for false (FL_EDIT_OFF) is not a number to accept */
            if (!(json_number_value(v) >= 0.0 && json_number_value(v) <= 1.0))
                return fl_err_set(e, FL_ERANGE, "%s: edit_threshold must be in [0, 1] or false, "
                                  "got %g", where, json_number_value(v));
            t.edit_threshold = (float)json_number_value(v);
            break;
        default: {
            if (!json_is_number(v))
                return fl_err_set(e, FL_EFORMAT, "%s.%s must be a number", where, key);
            float x = (float)json_number_value(v);
            float *dst = f == FL_DF_THRESHOLD       ? &t.threshold
                       : f == FL_DF_ENTROPY_BOUND   ? &t.entropy_bound
                       : f == FL_DF_TAU_ADD         ? &t.tau_add
                       : f == FL_DF_TAU_ACT         ? &t.tau_act
                       : f == FL_DF_TAU_CONF        ? &t.tau_conf
                       : f == FL_DF_TEMPERATURE     ? &t.temperature
                       : f == FL_DF_MIN_P           ? &t.min_p
                                                    : &t.top_p;
            *dst = x;
            break;
        }
        }
        mask |= FL_DF_BIT(f);
    }
    int rc = fl_decode_opts_check_ranges(&t, e);
    if (rc) {
        fl_err_prefix(e, "%s", where);
        return rc;
    }
    *o = t;
    *set |= mask;
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
    /* insertion sort: blocks are small (<= FL_MAX_BLOCK) */
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
    int idx[FL_MAX_BLOCK];
    memset(sel, 0, (size_t)n);
    if (n > FL_MAX_BLOCK)
        n = FL_MAX_BLOCK;
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

uint64_t fl_xorshift(uint64_t *s)
{
    uint64_t x = *s ? *s : 0x9e3779b97f4a7c15ull;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return x;
}

/* Weights' bits sorted in descending order: for weights >= 0 the order of their bits is their
 * order, so a radix sort over the bits (least significant byte first, each pass stable) gives
 * the sequence a comparison sort of the floats gives. a: (n) in, sorted out; tmp: (n). */
static void sort_desc(uint32_t *a, uint32_t *tmp, size_t n)
{
    uint32_t *x = a, *y = tmp;
    for (int shift = 0; shift < 32; shift += 8) {
        size_t count[257] = {0};
        for (size_t i = 0; i < n; i++)
            count[255 - ((x[i] >> shift) & 255) + 1]++;
        for (int d = 0; d < 256; d++)
            count[d + 1] += count[d];
        for (size_t i = 0; i < n; i++)
            y[count[255 - ((x[i] >> shift) & 255)]++] = x[i];
        uint32_t *t = x;
        x = y;
        y = t;
    }
    /* four passes: the result is back in a */
}

static float bits_float(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

/* The cut is the keep-th largest weight, keep the smallest prefix of the weights in descending
 * order whose probabilities (w / z, summed in that order in double) reach top_p, at most top_k.
 * Only that prefix needs sorting: a histogram of the weights by binary exponent (w in [0, 1])
 * finds the lowest exponent whose weights and the ones above it hold enough count and mass;
 * the weights at or above it are sorted and walked exactly as the whole sorted vocabulary
 * would be (they are its first entries). Should the walk run out of them (the histogram's
 * mass is summed in another order), the next exponent down is taken too. */
static float cut_top(const fl_decode_opts *o, const float *w, double z, int vocab)
{
    bool by_k = o->top_k > 0 && o->top_k < vocab, by_p = o->top_p < 1.0f;
    if (!by_k && !by_p)
        return 0.0f;
    int keep0 = by_k ? o->top_k : vocab;
    size_t count[129] = {0}; /* by exponent field, 0 (zero and subnormal) .. 127 (1.0); 128: NaN */
    double mass[129] = {0};
    for (int i = 0; i < vocab; i++) {
        uint32_t bits;
        memcpy(&bits, &w[i], sizeof bits);
        uint32_t e = (bits >> 23) & 255;
        e = e > 127 ? 128 : e;
        count[e]++;
        mass[e] += w[i];
    }
    int e = 128;
    size_t have = count[128];
    double got = 0;
    while (e > 0 && have < (size_t)keep0 && !(by_p && got >= (double)o->top_p * z * (1 + 1e-9))) {
        e--;
        have += count[e];
        got += mass[e];
    }
    for (;;) {
        float floor_w = bits_float((uint32_t)e << 23); /* the least weight of exponent e */
        uint32_t *sorted = malloc(sizeof(uint32_t) * 2 * (have ? have : 1)); /* and scratch */
        if (!sorted)
            return 0.0f;
        size_t n = 0;
        for (int i = 0; i < vocab && n < have; i++)
            if (e == 0 || w[i] >= floor_w || w[i] != w[i])
                memcpy(&sorted[n++], &w[i], sizeof(uint32_t));
        sort_desc(sorted, sorted + have, n);
        int keep = keep0;
        bool out = false;
        if (by_p) {
            double acc = 0;
            int i = 0;
            for (; i < keep && (size_t)i < n; i++) {
                acc += bits_float(sorted[i]) / z;
                if (acc >= o->top_p) {
                    keep = i + 1;
                    break;
                }
            }
            out = i == (int)n && i < keep; /* ran out of the sorted weights first */
        }
        if (!out || e == 0) {
            float cut = n == 0                 ? 0.0f
                        : (size_t)keep <= n ? bits_float(sorted[keep - 1])
                                            : bits_float(sorted[n - 1]);
            free(sorted);
            return cut;
        }
        free(sorted);
        e--;
        have += count[e];
    }
}

/* min_p after top_k and top_p, as Hugging Face's MinPLogitsWarper follows their warpers: a
 * token goes when its probability is below min_p times the likeliest one's. The weights are
 * relative to the likeliest token's (1), so that cut is min_p itself, and the likeliest token
 * is never cut by top_k or top_p: the two cuts are taken together by their maximum. */
float fl_sample_cut(const fl_decode_opts *o, const float *w, double z, int vocab)
{
    float c = cut_top(o, w, z, vocab);
    return c > o->min_p ? c : o->min_p;
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
    double ent = NAN; /* only the entropy policy reads it: a log per id is not paid otherwise */
    if (o->policy == FL_POLICY_ENTROPY) {
        ent = 0;
        for (int i = 0; i < vocab; i++) {
            double p = tmp[i] / z;
            if (p > 0)
                ent -= p * log(p);
        }
    }
    float cut = fl_sample_cut(o, tmp, z, vocab);
    double zk = 0;
    for (int i = 0; i < vocab; i++)
        if (tmp[i] >= cut)
            zk += tmp[i];
    double r = (double)(fl_xorshift(rng) >> 11) / 9007199254740992.0 * zk;
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

/* The log-sum-exp of a logits row: from the backend's argmax when it has one (its logit less
 * the log of its probability; the backend summed the row while it wrote it), else summed here
 * in double. */
double fl_row_lse(const float *row, int32_t V, const fl_tok_out *top1)
{
    if (top1 && top1->prob > 0 && top1->token >= 0 && top1->token < V &&
        isfinite(row[top1->token]))
        return (double)row[top1->token] - log((double)top1->prob);
    float mx = row[0];
    for (int32_t v = 1; v < V; v++)
        mx = row[v] > mx ? row[v] : mx;
    double sum = 0;
    for (int32_t v = 0; v < V; v++)
        sum += exp((double)row[v] - (double)mx);
    return (double)mx + log(sum);
}

void fl_row_top1(const float *row, int32_t V, fl_tok_out *out)
{
    int32_t arg = -1;
    float mx = -INFINITY;
    for (int32_t v = 0; v < V; v++)
        if (row[v] > mx) {
            mx = row[v];
            arg = v;
        }
    if (arg < 0) { /* no finite logit: as fl_lse_finish reports it */
        out->token = 0;
        out->prob = 0;
        out->entropy = NAN;
        return;
    }
    double sum = 0, su = 0;
    for (int32_t v = 0; v < V; v++) {
        double u = (double)row[v] - (double)mx, w = exp(u);
        if (w > 0) {
            sum += w;
            su += w * u;
        }
    }
    double h = log(sum) - su / sum;
    out->token = arg;
    out->prob = (float)(1.0 / sum);
    out->entropy = (float)(h > 0 ? h : 0);
}

/* The sums kept from top1 are relative to m, its logit: sum = 1 / prob and su = sum (log sum -
 * entropy) (fl_lse_finish's inverse). Each biased logit moves its e^(l - m) and e^(l - m) (l -
 * m) terms; the argmax can only become a biased token. Subtracting the old terms loses
 * precision only when they were a large part of the sum, hence the half-mass bound. */
/* fl_row_bias's and fl_row_rep's work: each ids[j]'s logit becomes its old one plus bias[j],
 * or without a bias its repetition-penalized one (divided by rep when positive, else
 * multiplied by it, as vLLM and Hugging Face write it). */
static void row_change(float *row, int32_t V, const int32_t *ids, const float *bias, float rep,
                       int32_t n, fl_tok_out *top1)
{
    bool fast = top1->prob > 0 && top1->token >= 0 && top1->token < V &&
                isfinite(row[top1->token]) && isfinite(top1->entropy);
    double m = fast ? row[top1->token] : 0, sum0 = fast ? 1.0 / top1->prob : 0;
    double sum = sum0, su = fast ? sum0 * (log(sum0) - top1->entropy) : 0, moved = 0;
    int32_t arg = top1->token;
    float best = fast ? row[arg] : 0;
    for (int32_t j = 0; j < n; j++) {
        int32_t i = ids[j];
        float old = row[i];
        row[i] = bias ? old + bias[j] : old > 0 ? old / rep : old * rep;
        if (!fast || !isfinite(old))
            continue; /* -inf stays -inf: no term */
        if (i == arg && row[i] < old) {
            fast = false; /* the new argmax may be any token */
            continue;
        }
        double uo = (double)old - m, un = (double)row[i] - m, eo = exp(uo), en = exp(un);
        sum += en - eo;
        su += (en > 0 ? en * un : 0) - eo * uo; /* a -inf bias: no term (not 0 * -inf) */
        moved += eo;
        if (row[i] > best || (row[i] == best && i < arg)) {
            best = row[i];
            arg = i;
        }
    }
    if (!fast || !(moved <= 0.5 * sum0) || !(sum > 0) || !isfinite(sum)) {
        fl_row_top1(row, V, top1);
        return;
    }
    double h = log(sum) - su / sum;
    top1->token = arg;
    top1->prob = (float)(exp((double)best - m) / sum);
    top1->entropy = (float)(h > 0 ? h : 0);
}

void fl_row_bias(float *row, int32_t V, const int32_t *ids, const float *bias, int32_t n,
                 fl_tok_out *top1)
{
    row_change(row, V, ids, bias, 1.0f, n, top1);
}

void fl_row_rep(float *row, int32_t V, const int32_t *ids, int32_t n, float rep, fl_tok_out *top1)
{
    row_change(row, V, ids, NULL, rep, n, top1);
}

/* The k largest entries of row (ids ti, values tl, descending; ties keep the lower id first).
 * A span of 64 whose largest entry cannot enter the list is skipped after one max pass, with
 * no compare and branch per entry. Returns how many were found (k unless V < k). */
int32_t fl_row_top(const float *row, int32_t V, int32_t k, int32_t *ti, float *tl)
{
    enum { SPAN = 64 };
    int32_t n = 0;
    for (int32_t v0 = 0; v0 < V; v0 += SPAN) {
        int32_t v1 = V - v0 < SPAN ? V : v0 + SPAN;
        if (n == k) {
            float bm = row[v0];
            for (int32_t v = v0 + 1; v < v1; v++)
                bm = row[v] > bm ? row[v] : bm;
            if (!(bm > tl[k - 1]))
                continue;
        }
        for (int32_t v = v0; v < v1; v++) {
            if (n == k && row[v] <= tl[k - 1])
                continue;
            int32_t i = n < k ? n++ : k - 1;
            while (i > 0 && row[v] > tl[i - 1]) {
                tl[i] = tl[i - 1];
                ti[i] = ti[i - 1];
                i--;
            }
            tl[i] = row[v];
            ti[i] = v;
        }
    }
    return n;
}
