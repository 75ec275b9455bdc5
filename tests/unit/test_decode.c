/* test_decode.c: the unmasking policies on predictions whose right answer is known, the
 * option checks, LLaDA2's options (the steps schedule, token editing, presets) and their JSON
 * parsing with its exact errors, sampling, the log probabilities' row functions and the KV
 * page pool. */
#include "check.h"
#include "decode.h"
#include "kvpool.h"

#include <jansson.h>
#include <math.h>

/* Parses JSON text as a decoding object over the defaults; *o gets the result. */
static int parse(const char *text, fl_decode_opts *o, uint32_t *set, fl_err *e)
{
    fl_decode_opts_default(o);
    *set = 0;
    json_t *j = json_loads(text, 0, NULL);
    if (!j)
        return -999;
    int rc = fl_decode_opts_parse_json(j, "cfg", o, set, e);
    json_decref(j);
    return rc;
}

/* The JSON text of a field */
static const char *field(const fl_decode_opts *o, fl_dec_field f)
{
    static char buf[64];
    fl_dec_field_json(o, f, buf, sizeof buf);
    return buf;
}

static void llada2_options(void)
{
    fl_decode_opts o;
    fl_err e = {0};
    uint32_t set;
    fl_decode_opts_default(&o);
    CHECK(o.edit_threshold == FL_EDIT_OFF && o.max_post_steps == 16 && o.steps == 0,
          "defaults: no editing, 16 post steps, no schedule");
    CHECK(!strcmp(field(&o, FL_DF_EDIT_THRESHOLD), "false"), "off shows as false: %s",
          field(&o, FL_DF_EDIT_THRESHOLD));
    CHECK(!strcmp(fl_dec_field_name(FL_DF_EDIT_THRESHOLD), "edit_threshold") &&
              !strcmp(fl_dec_field_name(FL_DF_MAX_POST_STEPS), "max_post_steps") &&
              !strcmp(fl_dec_field_name(FL_DF_STEPS), "steps"),
          "field names");

    /* LLaDA2.0's quota schedule: steps 32 over a block of 32 is one per step; a reply of 10
       tokens caps it at 10 steps of 4, 4, 3, ... (32 = 2*4 + 8*3); past the schedule, 1 */
    for (int i = 0; i < 32; i++)
        CHECK(fl_steps_quota(32, 2048, 32, i) == 1, "steps 32 block 32 step %d", i);
    int want10[10] = {4, 4, 3, 3, 3, 3, 3, 3, 3, 3}, sum = 0;
    for (int i = 0; i < 10; i++) {
        CHECK(fl_steps_quota(32, 10, 32, i) == want10[i], "max_tokens 10 step %d: %d", i,
              fl_steps_quota(32, 10, 32, i));
        sum += fl_steps_quota(32, 10, 32, i);
    }
    CHECK(sum == 32, "the quotas fill the block");
    CHECK(fl_steps_quota(32, 10, 32, 10) == 1, "past the schedule: 1");
    CHECK(fl_steps_quota(32, 3, 4, 0) == 2 && fl_steps_quota(32, 3, 4, 1) == 1 &&
              fl_steps_quota(32, 3, 4, 2) == 1,
          "block 4, 3 tokens: 2, 1, 1");
    CHECK(fl_steps_quota(32, 100, 4, 0) == 1 && fl_steps_quota(32, 100, 4, 7) == 1,
          "more steps than positions: 1 (never 0)");

    /* the LLaDA2 family's defaults: the authors' 2.0 rule, valid as they are */
    fl_decode_opts_default(&o);
    fl_decode_opts_llada2(&o);
    CHECK(o.policy == FL_POLICY_DYNAMIC && o.threshold == 0.95f && o.steps == 32 && o.k == 1 &&
              !o.pipeline && o.edit_threshold == FL_EDIT_OFF && fl_decode_opts_check(&o, &e) == 0,
          "LLaDA2 defaults: %s", e.msg);

    /* presets: the model card's modes; an unknown name leaves o alone */
    fl_decode_opts_default(&o);
    set = 0;
    CHECK(fl_decode_preset("quality", &o, &set) == 0 && o.policy == FL_POLICY_THRESHOLD &&
              o.threshold == 0.7f && o.edit_threshold == 0.5f && o.max_post_steps == 16 &&
              !o.pipeline,
          "quality");
    CHECK(set == (FL_DF_BIT(FL_DF_POLICY) | FL_DF_BIT(FL_DF_THRESHOLD) |
                  FL_DF_BIT(FL_DF_EDIT_THRESHOLD) | FL_DF_BIT(FL_DF_MAX_POST_STEPS) |
                  FL_DF_BIT(FL_DF_PIPELINE)),
          "quality sets its fields' bits: %x", set);
    CHECK(fl_decode_opts_check(&o, &e) == 0, "quality is valid: %s", e.msg);
    CHECK(fl_decode_preset("speed", &o, &set) == 0 && o.threshold == 0.5f && o.edit_threshold == 0.0f,
          "speed");
    CHECK(!strcmp(field(&o, FL_DF_EDIT_THRESHOLD), "0"), "edit 0 shows as 0: %s",
          field(&o, FL_DF_EDIT_THRESHOLD));
    fl_decode_opts before = o;
    CHECK(fl_decode_preset("fast", &o, &set) == FL_EINVAL && !memcmp(&o, &before, sizeof o),
          "unknown preset");

    /* checks: ranges, and editing with pipelining only in the full check */
    fl_decode_opts_default(&o);
    o.edit_threshold = 0.5f; /* pipeline is on in the generic defaults */
    CHECK(fl_decode_opts_check_ranges(&o, &e) == 0, "ranges alone accept it: %s", e.msg);
    CHECK(fl_decode_opts_check(&o, &e) == FL_EINVAL &&
              !strcmp(e.msg, "edit_threshold (token editing) works on one block at a time: it "
                             "needs pipeline false"),
          "%s", e.msg);
    o.pipeline = false;
    CHECK(fl_decode_opts_check(&o, &e) == 0, "without pipelining: %s", e.msg);
    o.edit_threshold = 1.5f;
    CHECK(fl_decode_opts_check(&o, &e) == FL_ERANGE &&
              !strcmp(e.msg, "edit_threshold must be in [0, 1], got 1.5"), "%s", e.msg);
    o.edit_threshold = 0.5f;
    o.max_post_steps = -1;
    CHECK(fl_decode_opts_check(&o, &e) == FL_ERANGE &&
              !strcmp(e.msg, "max_post_steps must be in [0, 1024], got -1"), "%s", e.msg);
    o.max_post_steps = 16;
    o.steps = 5000;
    CHECK(fl_decode_opts_check(&o, &e) == FL_ERANGE &&
              !strcmp(e.msg, "steps must be in [0, 4096], got 5000"), "%s", e.msg);

    /* JSON: a preset first whatever the order, the object's keys over it */
    CHECK(parse("{\"threshold\": 0.8, \"preset\": \"quality\"}", &o, &set, &e) == 0 &&
              o.threshold == 0.8f && o.edit_threshold == 0.5f && !o.pipeline,
          "explicit threshold wins over the preset: %g %s", (double)o.threshold, e.msg);
    CHECK(set & FL_DF_BIT(FL_DF_EDIT_THRESHOLD), "the preset's fields count as set");
    CHECK(parse("{\"preset\": \"speed\", \"edit_threshold\": false}", &o, &set, &e) == 0 &&
              o.edit_threshold == FL_EDIT_OFF && o.threshold == 0.5f,
          "false turns editing off: %s", e.msg);
    CHECK(parse("{\"edit_threshold\": 0.25, \"max_post_steps\": 4, \"steps\": 32}", &o, &set,
                &e) == 0 &&
              o.edit_threshold == 0.25f && o.max_post_steps == 4 && o.steps == 32 && o.pipeline,
          "plain keys (combinations are checked later): %s", e.msg);
    struct { const char *json; int rc; const char *msg; } bad[] = {
        {"{\"edit_threshold\": 2}", FL_ERANGE, "cfg: edit_threshold must be in [0, 1] or false, got 2"},
        {"{\"edit_threshold\": -1}", FL_ERANGE, "cfg: edit_threshold must be in [0, 1] or false, got -1"},
        {"{\"edit_threshold\": true}", FL_EFORMAT, "cfg.edit_threshold must be a number or false"},
        {"{\"edit_threshold\": \"0.5\"}", FL_EFORMAT, "cfg.edit_threshold must be a number or false"},
        {"{\"preset\": \"fast\"}", FL_EFORMAT, "cfg.preset must be one of quality, speed"},
        {"{\"preset\": 1}", FL_EFORMAT, "cfg.preset must be one of quality, speed"},
        {"{\"max_post_steps\": 2000}", FL_ERANGE, "cfg: max_post_steps must be in [0, 1024], got 2000"},
        {"{\"max_post_steps\": 1.5}", FL_EFORMAT, "cfg.max_post_steps must be a non-negative integer"},
        {"{\"steps\": -1}", FL_EFORMAT, "cfg.steps must be a non-negative integer"},
        {"{\"steps\": 4097}", FL_ERANGE, "cfg: steps must be in [0, 4096], got 4097"},
        {"{\"edit\": 0.5}", FL_EFORMAT, "cfg: unknown decoding option 'edit'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fl_err e2 = {0};
        int rc = parse(bad[i].json, &o, &set, &e2);
        CHECK(rc == bad[i].rc && !strcmp(e2.msg, bad[i].msg), "%s: %d %s", bad[i].json, rc, e2.msg);
    }
}

static int sel_mask(const uint8_t *sel, int n)
{
    int m = 0;
    for (int i = 0; i < n; i++)
        m |= sel[i] << i;
    return m;
}

/* The log-sum-exp of a row in long double, a different sum from fl_row_lse's fallback. */
static double lse_exact(const float *row, int V)
{
    long double mx = -INFINITY, s = 0;
    for (int v = 0; v < V; v++)
        mx = row[v] > mx ? row[v] : mx;
    for (int v = 0; v < V; v++)
        s += expl((long double)row[v] - mx);
    return (double)(mx + logl(s));
}

/* The k largest by sorting every id: value descending, then id ascending. */
static const float *cmp_row;
static int by_value(const void *a, const void *b)
{
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    float x = cmp_row[i], y = cmp_row[j];
    return x > y ? -1 : x < y ? 1 : (i > j) - (i < j);
}

static int top_naive(const float *row, int V, int k, int32_t *ti, float *tl)
{
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)V);
    if (!ids)
        return -1;
    for (int v = 0; v < V; v++)
        ids[v] = v;
    cmp_row = row;
    qsort(ids, (size_t)V, sizeof *ids, by_value);
    int n = V < k ? V : k;
    for (int i = 0; i < n; i++)
        ti[i] = ids[i], tl[i] = row[ids[i]];
    free(ids);
    return n;
}

static float urand(uint64_t *r) { return (float)((fl_xorshift(r) >> 40) / 16777216.0); }

/* fl_row_lse from an argmax and its probability (as a backend gives them; test_kernels checks
 * them from the kernels' own sums) and its fallback against a long double sum; fl_row_top
 * against a sort of every id, on rows with ties, -inf, fewer ids than k and spans of 64 cut
 * anywhere. */
static void logprob_rows(void)
{
    enum { V = 151936 };
    float *row = malloc(sizeof(float) * V);
    CHECK(row != NULL, "row");
    if (!row)
        return;
    uint64_t rng = 7;
    for (int shape = 0; shape < 3; shape++) {
        for (int v = 0; v < V; v++) /* logits around 0, a few far above */
            row[v] = 4.0f * (urand(&rng) - 0.5f) + (urand(&rng) < 1e-4f ? 12.0f : 0.0f);
        if (shape == 1)
            row[V / 3] = 40.0f; /* one near-certain token */
        if (shape == 2)
            for (int v = 0; v < V; v += 2)
                row[v] = -INFINITY; /* a constraint-like mask */
        double want = lse_exact(row, V);
        int arg = 0;
        for (int v = 1; v < V; v++)
            arg = row[v] > row[arg] ? v : arg;
        fl_tok_out t1 = {arg, (float)exp((double)row[arg] - want), 0};
        double got = fl_row_lse(row, V, &t1);
        CHECK(fabs(got - want) < 1e-6, "shape %d: lse %.9f from the argmax, exact %.9f", shape,
              got, want);
        fl_tok_out none = {0, 0.0f, NAN}, outside = {V, 0.5f, 0}, masked = {0, 0.5f, 0};
        const fl_tok_out *fall[] = {NULL, &none, &outside, shape == 2 ? &masked : NULL};
        for (int i = 0; i < 4; i++) {
            got = fl_row_lse(row, V, fall[i]);
            CHECK(fabs(got - want) < 1e-9, "shape %d, fallback %d: %.12f vs %.12f", shape, i,
                  got, want);
        }
    }
    /* fl_row_top1 against the long double sums; fl_row_bias (from the unbiased prediction)
       against fl_row_top1 over the biased row, on both of its paths */
    for (int shape = 0; shape < 10; shape++) {
        for (int v = 0; v < V; v++)
            row[v] = 4.0f * (urand(&rng) - 0.5f) + (urand(&rng) < 1e-4f ? 12.0f : 0.0f);
        if (shape % 3 == 1)
            row[V / 3] = 30.0f; /* a near-certain token */
        if (shape % 3 == 2)
            for (int v = 1; v < V; v += 3)
                row[v] = -INFINITY;
        fl_tok_out t1;
        fl_row_top1(row, V, &t1);
        int32_t arg = 0;
        for (int v = 1; v < V; v++)
            arg = row[v] > row[arg] ? v : arg;
        double lse = lse_exact(row, V);
        long double su = 0;
        for (int v = 0; v < V; v++)
            if (row[v] > -INFINITY)
                su += expl((long double)row[v] - lse) * ((long double)row[v] - lse);
        CHECK(t1.token == arg && fabs(t1.prob - exp(row[arg] - lse)) < 1e-6 &&
                  fabs(t1.entropy + (double)su) < 1e-5,
              "shape %d: top1 %d %.8f %.8f, want %d %.8f %.8f", shape, t1.token, t1.prob,
              t1.entropy, arg, exp(row[arg] - lse), -(double)su);
        /* biases: a few lifted, one repeated, one on a -inf logit; shape 3..5 lift one token
           past the maximum; 6..8 push the argmax down (the whole-row path); 9 bans tokens that
           hold most of the mass (the whole-row path too) */
        int32_t ids[70] = {17, 4000, 4000, 1, (int32_t)(urand(&rng) * V), 99999};
        float bias[70] = {2.5f, 1.0f, 0.75f, 3.0f, -1.5f, 0.25f};
        int nb = 6;
        if (shape >= 3 && shape <= 5)
            bias[0] = row[arg] - row[17] + 0.5f;
        if (shape >= 6 && shape <= 8)
            ids[5] = arg, bias[5] = -50.0f;
        if (shape == 9) { /* 64 tokens tie at 30: the 63 after the argmax banned */
            for (int j = 0; j < 64; j++) {
                row[V / 3 + j] = 30.0f;
                if (j)
                    ids[nb] = V / 3 + j, bias[nb++] = -100.0f;
            }
            fl_row_top1(row, V, &t1);
        }
        float *copy = malloc(sizeof(float) * V);
        CHECK(copy != NULL, "copy");
        if (!copy)
            break;
        memcpy(copy, row, sizeof(float) * V);
        fl_tok_out fast = t1, full;
        fl_row_bias(row, V, ids, bias, nb, &fast);
        for (int j = 0; j < nb; j++)
            copy[ids[j]] += bias[j];
        CHECK(!memcmp(copy, row, sizeof(float) * V), "shape %d: the biases are added", shape);
        fl_row_top1(copy, V, &full);
        CHECK(fast.token == full.token && fabs(fast.prob - full.prob) < 1e-6 * fmax(1, full.prob) &&
                  fabs(fast.entropy - full.entropy) < 1e-5,
              "shape %d: biased top1 %d %.8f %.8f, over the row %d %.8f %.8f", shape, fast.token,
              fast.prob, fast.entropy, full.token, full.prob, full.entropy);
        /* the repetition penalty over the biased row: positive logits divided, the others
           multiplied (vLLM's and Hugging Face's); above 1 on the argmax in odd shapes (the
           whole-row path), below 1 (a lift) in shapes 4 and 8, on distinct ids with a -inf and
           a zero among them */
        copy[77777] = row[77777] = 0.0f;
        copy[250] = row[250] = -INFINITY;
        fl_row_top1(row, V, &fast);
        int32_t rid[8] = {3, 17, 250, 4000, 77777, 99999, 151935, fast.token};
        float rp = shape == 4 || shape == 8 ? 0.7f : 1.3f;
        int nr = shape % 2 ? 8 : 7;
        for (int j = 0; j < 7; j++)
            nr = rid[j] == fast.token ? 7 : nr; /* distinct ids */
        fl_row_rep(row, V, rid, nr, rp, &fast);
        for (int j = 0; j < nr; j++)
            copy[rid[j]] = copy[rid[j]] > 0 ? copy[rid[j]] / rp : copy[rid[j]] * rp;
        CHECK(!memcmp(copy, row, sizeof(float) * V), "shape %d: the repetition penalty", shape);
        fl_row_top1(copy, V, &full);
        CHECK(fast.token == full.token && fabs(fast.prob - full.prob) < 1e-6 * fmax(1, full.prob) &&
                  fabs(fast.entropy - full.entropy) < 1e-5,
              "shape %d: penalized top1 %d %.8f %.8f, over the row %d %.8f %.8f", shape,
              fast.token, fast.prob, fast.entropy, full.token, full.prob, full.entropy);
        free(copy);
    }
    /* the top k: random rows, rows of 5 values (ties everywhere), -inf, short rows */
    int32_t ti[FL_MAX_TOP_LOGPROBS], wi[FL_MAX_TOP_LOGPROBS];
    float tl[FL_MAX_TOP_LOGPROBS], wl[FL_MAX_TOP_LOGPROBS];
    const int lens[] = {V, 1000, 65, 64, 63, 19, 5, 1};
    const int ks[] = {1, 2, 5, 20};
    int cases = 0;
    for (int li = 0; li < 8; li++)
        for (int ki = 0; ki < 4; ki++)
            for (int kind = 0; kind < 3; kind++) {
                int n = lens[li], k = ks[ki];
                for (int v = 0; v < n; v++) {
                    float u = urand(&rng);
                    row[v] = kind == 0 ? 8.0f * u : kind == 1 ? (float)(int)(5.0f * u) : -INFINITY;
                }
                if (kind == 2 && n > 3)
                    row[n / 2] = 1.0f, row[n - 1] = 1.0f, row[1] = 2.0f;
                int got = fl_row_top(row, n, k, ti, tl), want = top_naive(row, n, k, wi, wl);
                bool same = got == want && got == (n < k ? n : k);
                for (int i = 0; same && i < got; i++)
                    same = ti[i] == wi[i] && (tl[i] == wl[i] || (isinf(tl[i]) && isinf(wl[i])));
                CHECK(same, "top %d of %d (kind %d): %d found, want %d; first %d vs %d", k, n,
                      kind, got, want, got ? ti[0] : -1, want ? wi[0] : -1);
                cases++;
            }
    CHECK(cases == 96, "every top case ran");
    free(row);
}

/* fl_sample_cut until 2026-12-07: the whole vocabulary sorted by qsort, then walked. */
static int cmp_desc_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

static float cut_by_sorting(const fl_decode_opts *o, const float *w, double z, int vocab)
{
    float cut = 0.0f;
    if ((o->top_k > 0 && o->top_k < vocab) || o->top_p < 1.0f) {
        float *sorted = malloc(sizeof(float) * (size_t)vocab);
        if (!sorted)
            return -1.0f;
        memcpy(sorted, w, sizeof(float) * (size_t)vocab);
        qsort(sorted, (size_t)vocab, sizeof(float), cmp_desc_f);
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
    return cut;
}

/* fl_sample_cut (a histogram, then only the weights it needs sorted) gives the very cut the
 * whole sorted vocabulary gives, on flat, peaked, tied and underflowing rows, for top_k and
 * top_p alone and together. */
static void sample_cut(void)
{
    const int vocabs[] = {4, 100, 1000, 151936};
    const int ks[] = {0, 1, 5, 50, 999, 200000};
    const float ps[] = {1.0f, 0.999f, 0.95f, 0.9f, 0.5f, 0.1f, 1e-6f};
    float *l = malloc(sizeof(float) * 151936), *w = malloc(sizeof(float) * 151936);
    CHECK(l && w, "rows");
    if (!l || !w)
        return;
    uint64_t rng = 99;
    int cases = 0, same = 0;
    for (int vi = 0; vi < 4; vi++)
        for (int kind = 0; kind < 4; kind++) {
            int V = vocabs[vi];
            for (int i = 0; i < V; i++) {
                float u = urand(&rng);
                l[i] = kind == 0 ? 6.0f * u                        /* flat */
                       : kind == 1 ? 30.0f * u * u * u * u        /* a few far above */
                       : kind == 2 ? (float)(int)(4.0f * u)       /* four values: ties */
                                   : (u < 0.5f ? -200.0f : 2.0f * u); /* half underflow to 0 */
            }
            float mx = l[0];
            for (int i = 1; i < V; i++)
                mx = l[i] > mx ? l[i] : mx;
            double z = 0;
            for (int i = 0; i < V; i++) {
                w[i] = expf(l[i] - mx);
                z += w[i];
            }
            for (int ki = 0; ki < 6; ki++)
                for (int pi = 0; pi < 7; pi++) {
                    if (V > 1000 && (ki % 2 || pi % 2)) /* the qsort reference is slow there */
                        continue;
                    fl_decode_opts o;
                    fl_decode_opts_default(&o);
                    o.top_k = ks[ki];
                    o.top_p = ps[pi];
                    float want = cut_by_sorting(&o, w, z, V), got = fl_sample_cut(&o, w, z, V);
                    cases++;
                    same += want == got;
                    CHECK(want == got, "vocab %d kind %d top_k %d top_p %g: cut %.9g, sorting "
                          "gives %.9g", V, kind, ks[ki], (double)ps[pi], got, want);
                }
        }
    CHECK(cases == 552 && same == cases, "%d of %d cuts the same", same, cases);
    /* min_p as Hugging Face's MinPLogitsWarper applies it after its top_k and top_p warpers:
       on the probabilities those left (renormalized), a token goes when its probability is
       below min_p times the largest. The tokens the cut keeps must be exactly those. */
    const float mps[] = {0.0f, 0.05f, 0.3f, 0.9f, 1.0f};
    int mcases = 0;
    for (int kind = 0; kind < 3; kind++) {
        int V = 1000;
        for (int i = 0; i < V; i++) {
            float u = urand(&rng);
            l[i] = kind == 0 ? 6.0f * u : kind == 1 ? 30.0f * u * u * u * u : (float)(int)(4 * u);
        }
        float mx = l[0];
        for (int i = 1; i < V; i++)
            mx = l[i] > mx ? l[i] : mx;
        double z = 0;
        for (int i = 0; i < V; i++) {
            w[i] = expf(l[i] - mx);
            z += w[i];
        }
        for (int mi = 0; mi < 5; mi++)
            for (int c = 0; c < 3; c++) {
                fl_decode_opts o;
                fl_decode_opts_default(&o);
                o.top_k = c == 1 ? 50 : 0;
                o.top_p = c == 2 ? 0.9f : 1.0f;
                o.min_p = mps[mi];
                float top = cut_by_sorting(&o, w, z, V), got = fl_sample_cut(&o, w, z, V);
                double zk = 0, pmax = 0;
                for (int i = 0; i < V; i++)
                    if (w[i] >= top) {
                        zk += w[i];
                        pmax = w[i] > pmax ? w[i] : pmax;
                    }
                int differ = 0, kept = 0;
                for (int i = 0; i < V; i++) {
                    bool want = w[i] >= top && w[i] / zk >= (double)o.min_p * (pmax / zk);
                    differ += want != (w[i] >= got);
                    kept += want;
                }
                mcases++;
                CHECK(differ == 0 && kept >= 1, "kind %d, min_p %g, case %d: %d tokens kept "
                      "differently (%d kept)", kind, (double)o.min_p, c, differ, kept);
            }
    }
    CHECK(mcases == 45, "every min_p case ran");
    free(l);
    free(w);
}

int main(void)
{
    fl_decode_opts o;
    fl_decode_opts_default(&o);
    fl_err e = {0};
    CHECK(fl_decode_opts_check(&o, &e) == 0, "defaults valid: %s", e.msg);
    logprob_rows();
    sample_cut();
    /* 8 positions; position 1 is already decided (not eligible) */
    fl_tok_out p[8] = {
        {10, 0.50f, 1.2f}, {11, 0.99f, 0.01f}, {12, 0.95f, 0.10f}, {13, 0.20f, 2.0f},
        {14, 0.92f, 0.20f}, {15, 0.91f, 0.30f}, {16, 0.60f, 0.9f}, {17, 0.05f, 3.0f},
    };
    uint8_t elig[8] = {1, 0, 1, 1, 1, 1, 1, 1}, sel[8];

    o.policy = FL_POLICY_SEQUENTIAL;
    CHECK(fl_policy_select(&o, p, elig, 8, false, sel) == 1, "sequential picks one");
    CHECK(sel_mask(sel, 8) == (1 << 2), "sequential picks the most confident eligible: %x", sel_mask(sel, 8));

    o.policy = FL_POLICY_STATIC;
    o.k = 3;
    CHECK(fl_policy_select(&o, p, elig, 8, false, sel) == 3, "static k=3");
    CHECK(sel_mask(sel, 8) == ((1 << 2) | (1 << 4) | (1 << 5)), "static top-3: %x", sel_mask(sel, 8));

    o.policy = FL_POLICY_THRESHOLD;
    o.threshold = 0.9f;
    CHECK(fl_policy_select(&o, p, elig, 8, false, sel) == 3, "threshold 0.9 -> 3");
    CHECK(sel_mask(sel, 8) == ((1 << 2) | (1 << 4) | (1 << 5)), "threshold set: %x", sel_mask(sel, 8));
    o.threshold = 0.97f; /* none above: still the top one */
    CHECK(fl_policy_select(&o, p, elig, 8, false, sel) == 1 && sel[2], "threshold falls back to top-1");

    o.policy = FL_POLICY_DYNAMIC;
    o.threshold = 0.9f;
    o.k = 2; /* 3 above threshold >= quota 2: all 3 */
    CHECK(fl_policy_select(&o, p, elig, 8, false, sel) == 3, "dynamic above quota takes all above");
    o.k = 5; /* 3 above < quota 5: the top 5 */
    CHECK(fl_policy_select(&o, p, elig, 8, false, sel) == 5, "dynamic below quota takes the top-k");
    CHECK(sel_mask(sel, 8) == ((1 << 2) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 0)), "dynamic top-5: %x",
          sel_mask(sel, 8));

    o.policy = FL_POLICY_ENTROPY;
    o.entropy_bound = 0.35f; /* sorted entropies of eligible: 0.10, 0.20, 0.30 ... ; 0.1+0.2 = 0.3 <= 0.35 */
    CHECK(fl_policy_select(&o, p, elig, 8, false, sel) == 2, "entropy-bounded prefix");
    CHECK(sel_mask(sel, 8) == ((1 << 2) | (1 << 4)), "entropy set: %x", sel_mask(sel, 8));
    o.entropy_bound = 0.05f; /* nothing fits: at least one */
    CHECK(fl_policy_select(&o, p, elig, 8, false, sel) == 1 && sel[2], "entropy falls back to one");

    /* semi-active: only above tau_conf, possibly none */
    o.policy = FL_POLICY_THRESHOLD;
    o.tau_conf = 0.93f;
    CHECK(fl_policy_select(&o, p, elig, 8, true, sel) == 1 && sel[2], "semi-active above tau_conf");
    o.tau_conf = 0.96f;
    CHECK(fl_policy_select(&o, p, elig, 8, true, sel) == 0, "semi-active may commit nothing");

    uint8_t none[8] = {0};
    CHECK(fl_policy_select(&o, p, none, 8, false, sel) == 0, "nothing eligible, nothing chosen");

    /* option checks name the option */
    fl_decode_opts bad = o;
    bad.threshold = 1.5f;
    CHECK(fl_decode_opts_check(&bad, &e) == FL_ERANGE && strstr(e.msg, "threshold"), "%s", e.msg);
    bad = o;
    bad.max_blocks = 0;
    CHECK(fl_decode_opts_check(&bad, &e) == FL_ERANGE && strstr(e.msg, "max_blocks"), "%s", e.msg);
    fl_policy pol;
    CHECK(fl_policy_parse("entropy", &pol) == 0 && pol == FL_POLICY_ENTROPY, "parse");
    CHECK(fl_policy_parse("bogus", &pol) == FL_EINVAL, "parse bogus");

    /* sampling: with top_k = 1 it is the argmax; at low temperature it follows the argmax; the
       empirical frequencies at T = 1 follow the softmax */
    float logits[4] = {1.0f, 3.0f, 2.0f, 0.0f}, tmp[4];
    uint64_t rng = 42;
    fl_tok_out so;
    fl_decode_opts so_o = o;
    so_o.temperature = 1.0f;
    so_o.top_k = 1;
    for (int i = 0; i < 20; i++) {
        fl_sample(&so_o, logits, 4, &rng, tmp, &so);
        CHECK(so.token == 1 && fabsf(so.prob - 1.0f) < 1e-6f, "top_k=1 is greedy: %d %g", so.token, so.prob);
    }
    so_o.top_k = 0;
    int counts[4] = {0};
    for (int i = 0; i < 20000; i++) {
        fl_sample(&so_o, logits, 4, &rng, tmp, &so);
        counts[so.token]++;
    }
    double z = exp(1) + exp(3) + exp(2) + exp(0);
    for (int i = 0; i < 4; i++) {
        double want = exp(logits[i]) / z, got = counts[i] / 20000.0;
        CHECK(fabs(want - got) < 0.015, "softmax frequency %d: %g vs %g", i, got, want);
    }
    /* the entropy, which only the entropy policy reads, is the tempered distribution's; it
       changes nothing else: the same draws with and without it */
    {
        fl_decode_opts eo = so_o;
        eo.policy = FL_POLICY_ENTROPY;
        uint64_t r1 = 7, r2 = 7;
        double h = 0;
        for (int i = 0; i < 4; i++)
            h -= exp(logits[i]) / z * log(exp(logits[i]) / z);
        for (int i = 0; i < 50; i++) {
            fl_tok_out a, b;
            fl_sample(&eo, logits, 4, &r1, tmp, &a);
            fl_sample(&so_o, logits, 4, &r2, tmp, &b);
            CHECK(fabs(a.entropy - h) < 1e-6 && a.token == b.token && a.prob == b.prob,
                  "draw %d: entropy %.8f (want %.8f), tokens %d %d", i, a.entropy, h, a.token,
                  b.token);
        }
    }
    so_o.top_p = 0.7f; /* p = .665, .245, .090, .033: top_p 0.7 keeps tokens 1 and 2 */
    for (int i = 0; i < 2000; i++) {
        fl_sample(&so_o, logits, 4, &rng, tmp, &so);
        CHECK(so.token == 1 || so.token == 2, "top_p excluded token %d", so.token);
    }

    llada2_options();

    /* page pool: refs, exhaustion, return */
    fl_kvpool pool;
    CHECK(fl_kvpool_init(&pool, 3, &e) == 0, "pool init");
    int32_t a = fl_kvpool_alloc(&pool), b = fl_kvpool_alloc(&pool), c = fl_kvpool_alloc(&pool);
    CHECK(a >= 0 && b >= 0 && c >= 0 && a != b && b != c && a != c, "three distinct pages");
    CHECK(fl_kvpool_alloc(&pool) == -1, "exhausted pool says so softly");
    fl_kvpool_ref(&pool, b);
    fl_kvpool_unref(&pool, b);
    CHECK(pool.n_free == 0, "a shared page stays held while one holder remains");
    fl_kvpool_unref(&pool, b);
    CHECK(pool.n_free == 1 && fl_kvpool_alloc(&pool) == b, "last holder returns the page");
    fl_kvpool_unref(&pool, a);
    fl_kvpool_unref(&pool, b);
    fl_kvpool_unref(&pool, c);
    CHECK(fl_kvpool_used(&pool) == 0, "all back");
    fl_kvpool_free(&pool);
    return check_summary("test_decode");
}
