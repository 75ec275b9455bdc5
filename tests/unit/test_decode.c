/* test_decode.c: the unmasking policies on predictions whose right answer is known, the
 * option checks, sampling, and the KV page pool. */
#include "check.h"
#include "decode.h"
#include "kvpool.h"

#include <math.h>

static int sel_mask(const uint8_t *sel, int n)
{
    int m = 0;
    for (int i = 0; i < n; i++)
        m |= sel[i] << i;
    return m;
}

int main(void)
{
    fl_decode_opts o;
    fl_decode_opts_default(&o);
    fl_err e = {0};
    CHECK(fl_decode_opts_check(&o, &e) == 0, "defaults valid: %s", e.msg);
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
    so_o.top_p = 0.7f; /* p = .665, .245, .090, .033: top_p 0.7 keeps tokens 1 and 2 */
    for (int i = 0; i < 2000; i++) {
        fl_sample(&so_o, logits, 4, &rng, tmp, &so);
        CHECK(so.token == 1 || so.token == 2, "top_p excluded token %d", so.token);
    }

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
