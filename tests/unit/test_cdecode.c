/* test_cdecode.c: constrained denoising (engine/cdecode.c).
 *   1. On a small hand-made vocabulary the dynamic program's assignment is the best one that a
 *      brute-force search over every assignment finds (scores, and validity by walking the
 *      automaton here), with random decided positions, also when none is valid.
 *   2. On the built-in model's tokenizer, decoding with random logits, random commit orders
 *      and blocks always ends in a text the automaton accepts and jansson parses, also with
 *      max_tokens at the constraint's minimum, and when sampling.
 *   3. When the model's own choices already spell a valid text, they are what it picks. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cdecode.h"
#include "check.h"
#include "constrain.h"
#include "decode.h"
#include "tokenizer/tokenizer.h"

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static double unif(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }
static float gauss(void)
{
    double u = unif() + 1e-12, v = unif();
    return (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
}

/* as the server compiles them for decoding (server/constraint.c) */
static const fl_constrain_opts DECODE_OPTS = {.max_ws = FL_CONSTRAIN_DECODE_WS,
                                              .max_digits = FL_CONSTRAIN_DECODE_DIGITS};

static fl_dfa *compile(const char *schema)
{
    json_error_t je;
    json_t *j = json_loads(schema, 0, &je);
    fl_dfa *d = NULL;
    fl_err e = {0};
    if (!j || fl_dfa_from_schema(j, &DECODE_OPTS, &d, &e))
        fprintf(stderr, "compile: %s\n", e.msg);
    json_decref(j);
    return d;
}

/* ---- 1: brute force on a hand-made vocabulary ---- */

static const char *toy_tok[] = {"{", "}", "\"", "a", ":", "true", "false", " ", "{\"a\":", "e",
                                "t", "r", "u"};
#define TOY_N 13 /* + the end token, id TOY_N */
#define TOY_V (TOY_N + 1)

static fl_tvocab *toy_vocab(void)
{
    fl_tvocab *v = calloc(1, sizeof *v);
    v->n = TOY_V;
    v->off = calloc(TOY_V + 1, sizeof(uint32_t));
    v->ok = calloc(TOY_V, 1);
    v->blob = malloc(64);
    for (int b = 0; b < 256; b++)
        v->single[b] = -1;
    uint32_t o = 0;
    for (int i = 0; i < TOY_N; i++) {
        size_t len = strlen(toy_tok[i]);
        v->off[i] = o;
        memcpy(v->blob + o, toy_tok[i], len);
        o += (uint32_t)len;
        v->ok[i] = 1;
        if (len == 1)
            v->single[(unsigned char)toy_tok[i][0]] = i;
        if ((int32_t)len > v->max_len)
            v->max_len = (int32_t)len;
    }
    v->off[TOY_N] = v->off[TOY_N + 1] = o;
    return v;
}

/* the state after a token under the brute force's own rules: -1 dead, -2 ended */
static int32_t toy_step(const fl_dfa *d, int32_t s, int t)
{
    if (s == -2)
        return -2;
    if (t == TOY_N)
        return d->accept[s] ? -2 : -1;
    return fl_dfa_walk(d, s, toy_tok[t], strlen(toy_tok[t]));
}

/* chained: the schema counts a length, so the program drops the states its chains dominate
   (fl_dfa.cls): the best assignment must survive that */
static void test_brute_on(const char *schema, bool chained, int trials)
{
    fl_tvocab *tv = toy_vocab();
    fl_dfa *d = compile(schema);
    CHECK(d != NULL, "toy schema %s", schema);
    if (!d)
        return;
    CHECK((d->cls != NULL) == chained, "%s: chains %s", schema, d->cls ? "found" : "none");
    fl_cons *c = NULL;
    fl_err e = {0};
    CHECK(fl_cons_create(d, tv, 0, &c, &e) == 0, "cons: %s", e.msg);
    fl_cdp *w = fl_cdp_new();
    fl_decode_opts o;
    fl_decode_opts_default(&o);
    int32_t eos = TOY_N;
    enum { N = 5 };
    int with_valid = 0, without = 0;
    for (int tr = 0; tr < trials; tr++) {
        float lg[N][TOY_V];
        fl_cpos pos[N];
        for (int j = 0; j < N; j++) {
            for (int t = 0; t < TOY_V; t++)
                lg[j][t] = 3.0f * gauss();
            pos[j].logits = lg[j];
            pos[j].fixed = unif() < 0.25 ? (int32_t)(rnd() % TOY_V) : -1;
            pos[j].prev = -1;
            pos[j].lse = NAN;
        }
        /* brute force: every assignment of the free positions */
        double lse[N];
        for (int j = 0; j < N; j++) {
            double z = 0;
            for (int t = 0; t < TOY_V; t++)
                z += exp(lg[j][t]);
            lse[j] = log(z);
            if (tr & 1) /* the log-sum-exp given, as the scheduler gives it */
                pos[j].lse = (float)lse[j];
        }
        double best = -INFINITY;
        int a[N];
        long total = 1;
        for (int j = 0; j < N; j++)
            total *= TOY_V;
        for (long code = 0; code < total; code++) {
            long x = code;
            bool skip = false;
            for (int j = 0; j < N; j++) {
                a[j] = (int)(x % TOY_V);
                x /= TOY_V;
                if (pos[j].fixed >= 0 && a[j] != pos[j].fixed)
                    skip = true;
            }
            if (skip)
                continue;
            int32_t s = 0;
            double sc = 0;
            for (int j = 0; j < N && s != -1; j++) {
                s = toy_step(d, s, a[j]);
                if (pos[j].fixed < 0)
                    sc += lg[j][a[j]] - lse[j];
            }
            if (s == -1 || (s >= 0 && !d->accept[s]))
                continue;
            if (sc > best)
                best = sc;
        }
        int32_t tok[N];
        float prob[N];
        int rc = fl_cons_best(c, w, 0, pos, N, N, TOY_V, &eos, 1, &o, NULL, tok, prob);
        if (best == -INFINITY) {
            without++;
            CHECK(rc == -1, "trial %d: no valid assignment, yet the program found one", tr);
            continue;
        }
        with_valid++;
        CHECK(rc == 0, "trial %d: a valid assignment exists (score %g), none found", tr, best);
        if (rc)
            continue;
        int32_t s = 0;
        double sc = 0;
        for (int j = 0; j < N; j++) {
            CHECK(pos[j].fixed < 0 || tok[j] == pos[j].fixed, "trial %d: decided position %d "
                  "changed", tr, j);
            if (s != -1)
                s = toy_step(d, s, tok[j]);
            if (pos[j].fixed < 0) {
                sc += lg[j][tok[j]] - lse[j];
                CHECK(fabs(prob[j] - exp(lg[j][tok[j]] - lse[j])) < 1e-5, "trial %d: prob", tr);
            }
        }
        CHECK(s == -2 || (s >= 0 && d->accept[s]), "trial %d: the assignment is not valid", tr);
        CHECK(fabs(sc - best) < 1e-4, "trial %d: score %g, the best is %g", tr, sc, best);
    }
    CHECK(with_valid > trials / 6 && without > trials / 15,
          "%s: the trials cover both cases (%d valid, %d not)", schema, with_valid, without);
    fl_cdp_free(w);
    fl_cons_unref(c);
    fl_tvocab_free(tv);
}

/* ---- 1a: sampling draws from the constrained distribution ---- */

/* One position that must be a whole boolean: only the tokens "true" and "false" can be it, so
   perturb-and-MAP must pick "true" with probability softmax(lg / T) renormalized over the two,
   whatever the other tokens' logits (the noise of each token a hash of the position's draw
   and the token: the frequencies test that hash's independence too). */
static void test_sampling(void)
{
    fl_tvocab *tv = toy_vocab();
    fl_dfa *d = compile("{\"type\":\"boolean\"}");
    fl_cons *c = NULL;
    fl_err e = {0};
    CHECK(d && fl_cons_create(d, tv, 0, &c, &e) == 0, "cons: %s", e.msg);
    if (!c)
        return;
    fl_cdp *w = fl_cdp_new();
    int32_t eos = TOY_N;
    const float temps[2] = {1.0f, 0.5f};
    for (int ti = 0; ti < 2; ti++) {
        fl_decode_opts o;
        fl_decode_opts_default(&o);
        o.temperature = temps[ti];
        o.top_k = 0;
        o.top_p = 1.0f;
        float lg[TOY_V];
        for (int t = 0; t < TOY_V; t++)
            lg[t] = 2.0f * gauss();
        lg[5] = 1.0f; /* "true" */
        lg[6] = 0.0f; /* "false" */
        double a = exp(1.0 / temps[ti]), want = a / (a + 1.0);
        int draws = 20000, got = 0, other = 0;
        for (int k = 0; k < draws; k++) {
            uint64_t r = rnd() | 1;
            fl_cpos pos = {.fixed = -1, .logits = lg, .lse = NAN, .prev = -1};
            int32_t tok;
            float prob;
            if (fl_cons_best(c, w, 0, &pos, 1, 1, TOY_V, &eos, 1, &o, &r, &tok, &prob)) {
                other++;
                continue;
            }
            got += tok == 5;
            other += tok != 5 && tok != 6;
        }
        double f = (double)got / draws, sd = sqrt(want * (1 - want) / draws);
        CHECK(other == 0, "T %g: %d draws were neither true nor false", temps[ti], other);
        CHECK(fabs(f - want) < 5 * sd, "T %g: \"true\" %.4f of the draws, want %.4f (sd %.4f)",
              temps[ti], f, want, sd);
    }
    fl_cdp_free(w);
    fl_cons_unref(c);
    fl_tvocab_free(tv);
}

/* ---- 1b: the chains the decoder's dominance relies on ---- */

/* A random text of at most max bytes from state s to an accepting state (dist keeps the end
   in reach); its length, or -1 when none fits. */
static int text_from(const fl_dfa *d, int32_t s, int max, unsigned char *out, bool longer)
{
    int n = 0;
    for (;;) {
        if (d->accept[s] && (n == max || unif() < (longer ? 0.02 : 0.15)))
            return n;
        int live[256], nl = 0;
        for (int b = 0; b < 256; b++) {
            int32_t t = d->next[(size_t)s * 256 + b];
            if (t >= 0 && d->dist[t] <= max - n - 1)
                live[nl++] = b;
        }
        if (!nl)
            return d->accept[s] ? n : -1;
        int b = live[rnd() % (unsigned)nl];
        out[n++] = (unsigned char)b;
        s = d->next[(size_t)s * 256 + b];
    }
}

/* Every text that takes a chained state to a whole value takes the states before it in its
   chain there too (the property the program drops states by), and some texts of the earlier
   states are not the later ones' (the chains order lengths: the check can tell them apart). */
static void test_chains(void)
{
    static const char *chained[] = {
        "{\"type\":\"string\",\"maxLength\":200}",
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"minLength\":2,"
        "\"maxLength\":12},\"mail\":{\"type\":\"string\",\"format\":\"email\",\"maxLength\":40},"
        "\"code\":{\"type\":\"string\",\"pattern\":\"^[A-Z][a-z0-9]*$\",\"maxLength\":9}},"
        "\"required\":[\"name\",\"mail\",\"code\"],\"additionalProperties\":false}",
        "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":5},\"maxItems\":3}",
    };
    for (size_t si = 0; si < sizeof chained / sizeof *chained; si++) {
        fl_dfa *d = compile(chained[si]);
        CHECK(d && d->cls, "schema %zu: chains", si);
        if (!d || !d->cls) {
            fl_dfa_free(d);
            continue;
        }
        int32_t n = d->n, in_chains = 0, pairs = 0, apart = 0;
        int32_t *ch = malloc(sizeof(int32_t) * (size_t)n);
        for (int32_t q = 0; q < n; q++)
            if (d->cls[q] >= 0)
                ch[in_chains++] = q;
        CHECK(in_chains > n / 4, "schema %zu: %d of %d states in chains", si, in_chains, n);
        unsigned char text[512];
        for (int trial = 0; trial < 300 && in_chains; trial++) {
            int32_t q = ch[rnd() % (unsigned)in_chains], p = -1;
            for (int k = 0, seen = 0; k < in_chains; k++) /* one of q's chain at random */
                if (d->cls[ch[k]] == d->cls[q] && ch[k] != q && rnd() % (unsigned)++seen == 0)
                    p = ch[k];
            if (p < 0)
                continue;
            if (d->rank[p] > d->rank[q]) {
                int32_t t = p;
                p = q;
                q = t;
            }
            pairs++;
            for (int k = 0; k < 4; k++) {
                int len = text_from(d, q, 400, text, k & 1);
                if (len < 0)
                    continue;
                int32_t e = fl_dfa_walk(d, p, text, (size_t)len);
                CHECK(e >= 0 && d->accept[e], "schema %zu: state %d (rank %d) takes a text that "
                      "%d (rank %d) of its chain does not: %.*s", si, q, d->rank[q], p, d->rank[p],
                      len, text);
                len = text_from(d, p, 400, text, true);
                if (len < 0)
                    continue;
                e = fl_dfa_walk(d, q, text, (size_t)len);
                apart += e < 0 || !d->accept[e];
            }
        }
        CHECK(pairs > 200 && apart > 0, "schema %zu: %d pairs weighed, %d texts told apart", si,
              pairs, apart);
        free(ch);
        fl_dfa_free(d);
    }
    /* a pattern's own repetitions are not counted: no chains, nothing dropped */
    fl_dfa *d = compile("{\"type\":\"string\",\"pattern\":\"^[a-z]{0,30}$\"}");
    CHECK(d && !d->cls, "a pattern has no chains");
    fl_dfa_free(d);
}

/* ---- 2 and 3: the real tokenizer ---- */

static const char *schemas[] = {
    "{\"type\":\"object\",\"properties\":{\"order_id\":{\"type\":\"string\"},\"status\":{\"enum\":"
    "[\"pending\",\"shipped\",\"delivered\"]},\"items\":{\"type\":\"array\",\"items\":{\"type\":"
    "\"integer\"},\"maxItems\":3},\"refund\":{\"type\":[\"number\",\"null\"]}},\"required\":["
    "\"order_id\",\"status\",\"items\",\"refund\"],\"additionalProperties\":false}",
    "{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":\"boolean\"},{\"type\":\"string\"}]},"
    "\"minItems\":2,\"maxItems\":4}",
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"minLength\":2,"
    "\"maxLength\":12},\"note\":{\"type\":\"string\",\"maxLength\":60}},\"required\":[\"name\","
    "\"note\"],\"additionalProperties\":false}",
    NULL, /* json_object */
};

/* A block-diffusion decode with random logits: each step the assignment's positions commit
 * in a random order (a random number of them, at least one), block by block. */
static int decode_random(const fl_cons *c, fl_cdp *w, int V, const int32_t *eos, int n_eos,
                         int B, int max_tokens, const fl_decode_opts *o, int32_t *out, float bias,
                         const float *prefer)
{
    int32_t state = 0, n_out = 0;
    float *lg = malloc(sizeof(float) * (size_t)B * (size_t)V);
    uint64_t srng = rnd();
    for (int start = 0; start < max_tokens; start += B) {
        int n = start + B < max_tokens ? B : max_tokens - start;
        int32_t x[64], prev[64];
        for (int j = 0; j < n; j++)
            x[j] = prev[j] = -1;
        for (;;) {
            fl_cpos pos[64];
            int masked = 0;
            for (int j = 0; j < n; j++) {
                for (int t = 0; t < V; t++)
                    lg[(size_t)j * V + t] = 2.0f * gauss() + (prefer ? bias * prefer[t] : 0);
                pos[j].fixed = x[j];
                pos[j].logits = x[j] < 0 ? lg + (size_t)j * V : NULL;
                pos[j].prev = prev[j];
                pos[j].lse = NAN;
                masked += x[j] < 0;
            }
            if (!masked)
                break;
            int32_t tok[64];
            float prob[64];
            if (fl_cons_best(c, w, state, pos, n, max_tokens - start, V, eos, n_eos, o, &srng, tok,
                             prob)) {
                free(lg);
                return -1;
            }
            memcpy(prev, tok, sizeof(int32_t) * (size_t)n);
            int take = 1 + (int)(rnd() % (unsigned)masked);
            for (int j = 0; j < n && take; j++) /* a random subset: skip some */
                if (x[j] < 0 && (unif() < 0.5 || take >= masked)) {
                    x[j] = tok[j];
                    take--;
                    masked--;
                }
            /* the block is done once an end token has nothing undecided before it */
            bool done = false;
            for (int j = 0; j < n && x[j] >= 0; j++)
                if (x[j] == eos[0] || (n_eos > 1 && x[j] == eos[1]))
                    done = true;
            if (done)
                break;
        }
        for (int j = 0; j < n; j++) {
            if (x[j] < 0)
                break;
            state = fl_cons_step(c, state, x[j], eos, n_eos);
            if (state == -1) {
                free(lg);
                return -2;
            }
            if (state == FL_CONS_END) {
                free(lg);
                return n_out;
            }
            out[n_out++] = x[j];
        }
    }
    free(lg);
    return state >= 0 && c->dfa->accept[state] ? n_out : -3;
}

static void test_tokenizer(void)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/../engine/models/fogline-helpdesk", check_tests_dir());
    fl_tokenizer *tk = NULL;
    fl_err e = {0};
    CHECK(fl_tokenizer_load(&tk, dir, NULL, &e) == 0, "tokenizer: %s", e.msg);
    if (!tk)
        return;
    int V = 3000;
    int32_t eos[2] = {2998, 2996};
    fl_tvocab *tv = NULL;
    CHECK(fl_tvocab_build(tk, V, 2999, &tv, &e) == 0, "tvocab: %s", e.msg);
    CHECK(tv->ok[2999] == 0 && tv->ok[2998] == 0, "the mask and end tokens are not text");
    int singles = 0;
    for (int b = 0; b < 256; b++)
        singles += tv->single[b] >= 0;
    CHECK(singles == 256, "every byte has a token (byte-level BPE): %d", singles);
    fl_cdp *w = fl_cdp_new();
    int32_t *out = malloc(sizeof(int32_t) * 512);
    float *prefer = calloc((size_t)V, sizeof(float));
    /* each schema twice: tdist exact (every token walked), then the single-byte bound that
       large automata over large vocabularies get */
    const int ns = (int)(sizeof schemas / sizeof *schemas);
    for (int run = 0; run < 2 * ns; run++) {
        int si = run % ns;
        bool exact = run < ns;
        fl_dfa *d = NULL;
        if (schemas[si])
            d = compile(schemas[si]);
        else
            CHECK(fl_dfa_json_object(&DECODE_OPTS, &d, &e) == 0, "json_object: %s", e.msg);
        if (!d)
            continue;
        fl_cons *c = NULL;
        CHECK(fl_cons_create(d, tv, exact ? 0 : 1, &c, &e) == 0, "cons: %s", e.msg);
        if (!c)
            continue;
        CHECK(c->exact == exact, "schema %d: tdist exact %d", si, c->exact);
        int minimum = fl_cons_min_tokens(c);
        CHECK(minimum > 0 && minimum < 200, "schema %d: min tokens %d", si, minimum);
        int valid = 0, runs = 0;
        for (int tr = 0; tr < 24; tr++) {
            fl_decode_opts o;
            fl_decode_opts_default(&o);
            if (tr % 3 == 2) { /* sampling */
                o.temperature = 0.8f;
                o.top_k = 50;
            }
            int maxt = tr % 4 == 0 ? minimum : tr % 4 == 1 ? minimum + 3 : 64 + (int)(rnd() % 100);
            /* blocks of 32 too: a long window, where the states a layer holds pass the cap */
            int B = tr % 3 == 1 ? 32 : tr % 2 ? 8 : 4;
            /* favour the structural characters now and then, as a model would */
            float bias = tr % 5 == 0 ? 0.0f : 3.0f;
            for (int t = 0; t < V; t++) {
                size_t len;
                const unsigned char *p = fl_tokenizer_token_bytes(tk, t, &len);
                prefer[t] = p && len && strchr("{}[]\":,", p[0]) ? 1.0f : 0.0f;
            }
            int n = decode_random(c, w, V, eos, 2, B, maxt, &o, out, bias, prefer);
            runs++;
            CHECK(n >= 0, "schema %d trial %d (max_tokens %d, block %d): decoding failed (%d)", si,
                  tr, maxt, B, n);
            if (n < 0)
                continue;
            CHECK(n <= maxt, "within max_tokens");
            fl_buf text = {0};
            fl_tokenizer_decode(tk, out, (size_t)n, true, &text, &e);
            int32_t s = fl_dfa_walk(c->dfa, 0, text.data ? text.data : "", text.len);
            CHECK(s >= 0 && c->dfa->accept[s], "schema %d trial %d: not accepted: %.*s", si, tr,
                  (int)text.len, text.data ? text.data : "");
            json_error_t je;
            json_t *j = json_loadb(text.data ? text.data : "", text.len, JSON_DECODE_ANY, &je);
            CHECK(j != NULL, "schema %d trial %d: jansson: %s in %.*s", si, tr, je.text,
                  (int)text.len, text.data ? text.data : "");
            CHECK(!j || si == 1 || json_is_object(j), "an object");
            valid += j != NULL;
            json_decref(j);
            fl_buf_free(&text);
        }
        CHECK(valid == runs, "schema %d: %d of %d valid", si, valid, runs);
        /* 3: the model's own choices spell a valid text: they are taken unchanged */
        {
            fl_buf sample = {0};
            uint64_t r = 7 + (uint64_t)si;
            CHECK(fl_dfa_sample(c->dfa, &r, 120, &sample) == 0, "sample");
            int32_t *ids = NULL;
            size_t nid = 0;
            fl_tokenizer_encode(tk, sample.data, sample.len, false, &ids, &nid, &e);
            int n = (int)nid + 1;
            if (n <= 64) {
                float *lg = malloc(sizeof(float) * (size_t)n * (size_t)V);
                fl_cpos pos[64];
                for (int j = 0; j < n; j++) {
                    int32_t want = j < (int)nid ? ids[j] : eos[0];
                    for (int t = 0; t < V; t++)
                        lg[(size_t)j * V + t] = gauss();
                    lg[(size_t)j * V + want] = 9.0f;
                    pos[j].fixed = -1;
                    pos[j].prev = -1;
            pos[j].lse = NAN;
                    pos[j].logits = lg + (size_t)j * V;
                }
                int32_t tok[64];
                float prob[64];
                fl_decode_opts o;
                fl_decode_opts_default(&o);
                int rc = fl_cons_best(c, w, 0, pos, n, n, V, eos, 2, &o, NULL, tok, prob);
                CHECK(rc == 0, "the model's own text");
                for (int j = 0; j < n && rc == 0; j++)
                    CHECK(tok[j] == (j < (int)nid ? ids[j] : eos[0]), "position %d changed", j);
                free(lg);
            }
            free(ids);
            fl_buf_free(&sample);
        }
        fl_cons_unref(c);
    }
    free(prefer);
    free(out);
    fl_cdp_free(w);
    fl_tvocab_free(tv);
    fl_tokenizer_free(tk);
}

static void test_brute(void)
{
    test_brute_on("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"boolean\"}},"
                  "\"required\":[\"a\"],\"additionalProperties\":false}",
                  false, 300);
    /* "true" and "false" are 4 and 5 characters: paths of one layer differ in length */
    test_brute_on("{\"type\":\"string\",\"maxLength\":5}", true, 200);
    test_brute_on("{\"type\":\"string\",\"minLength\":2,\"maxLength\":6}", true, 200);
    test_brute_on("{\"type\":\"string\",\"maxLength\":7,\"pattern\":\"^[a-z]*$\"}", true, 200);
}

int main(void)
{
    test_brute();
    test_sampling();
    test_chains();
    test_tokenizer();
    return check_summary("test_cdecode");
}
