/* fuzz_schema.c: response constraints (engine/constrain.c) from hostile JSON schemas. Any
 * input is either refused with a message or compiled, within a state budget that bounds time
 * and memory; a compiled automaton must be well formed (every edge inside it, distances that
 * agree with its edges and acceptance) and every text it samples must load as JSON (jansson;
 * a number beyond a double only where numbers are unbounded, the decoder's bound keeps them
 * inside one), and its chains must hold (check_chains). Every
 * other input is compiled as the decoder compiles (bounded whitespace and digits, a tool
 * call's tags around it) and decoded (engine/cdecode.c) over a vocabulary of the 256 bytes,
 * some words and an end token, with logits from the input: the text must be accepted. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cdecode.h"
#include "constrain.h"
#include "decode.h"
#include "fuzz_common.h"

/* jansson's refusals of a number too large for a double or an int64: the grammar is JSON's */
static bool too_big(const char *why)
{
    return strstr(why, "real number overflow") || strstr(why, "too big integer") ||
           strstr(why, "too big negative integer");
}

/* The chains (fl_dfa.cls, rank) the decoder drops states by: every text that takes a chained
   state to a whole value takes the state before it in its chain there too. Random texts from
   up to 64 chained states (a walk that keeps acceptance in reach), each checked from the
   state of the next lower rank in its chain. */
static void check_chains(const fl_dfa *d, uint64_t rng)
{
    if (!d->cls)
        return;
    int checked = 0;
    for (int32_t q = 0; q < d->n && checked < 64; q++) {
        FZ_CHECK(d->cls[q] >= -1 && d->cls[q] < d->n && d->rank[q] >= 0, "state %d: chain %d "
                 "rank %d", q, d->cls[q], d->rank[q]);
        if (d->cls[q] < 0)
            continue;
        int32_t p = -1;
        for (int32_t x = 0; x < d->n; x++)
            if (x != q && d->cls[x] == d->cls[q] && d->rank[x] < d->rank[q] &&
                (p < 0 || d->rank[x] > d->rank[p]))
                p = x;
        if (p < 0)
            continue;
        checked++;
        unsigned char text[256];
        for (int k = 0; k < 2; k++) {
            int32_t s = q, n = 0;
            while (!(d->accept[s] && (n == (int32_t)sizeof text || fl_xorshift(&rng) % 8 == 0))) {
                int live[256], nl = 0;
                for (int c = 0; c < 256; c++) {
                    int32_t t = d->next[(size_t)s * 256 + (size_t)c];
                    if (t >= 0 && d->dist[t] < (int32_t)sizeof text - n)
                        live[nl++] = c;
                }
                if (!nl)
                    break;
                int c = live[fl_xorshift(&rng) % (unsigned)nl];
                text[n++] = (unsigned char)c;
                s = d->next[(size_t)s * 256 + (size_t)c];
            }
            if (!d->accept[s])
                continue;
            int32_t e = fl_dfa_walk(d, p, text, (size_t)n);
            FZ_CHECK(e >= 0 && d->accept[e], "chain %d: state %d (rank %d) takes a text that %d "
                     "(rank %d) does not: %.*s", d->cls[q], q, d->rank[q], p, d->rank[p], (int)n,
                     text);
        }
    }
}

/* bounded: numbers at most 15 digits with a 2-digit exponent (as the decoder compiles), so
   every sample must load; unbounded numbers may exceed a double, which jansson refuses */
static void check_dfa(const fl_dfa *d, uint64_t seed, bool bounded)
{
    FZ_CHECK(d->n > 0, "no states");
    for (int32_t s = 0; s < d->n; s++) {
        FZ_CHECK(d->accept[s] == (d->dist[s] == 0), "state %d: accept %d, dist %d", s,
                 d->accept[s], d->dist[s]);
        FZ_CHECK(d->dist[s] >= 0 && d->dist[s] < INT32_MAX, "state %d cannot finish", s);
        int32_t best = d->accept[s] ? 0 : INT32_MAX;
        for (int c = 0; c < 256; c++) {
            int32_t t = d->next[(size_t)s * 256 + (size_t)c];
            FZ_CHECK(t >= -1 && t < d->n, "state %d byte %d goes to %d", s, c, t);
            if (t >= 0 && d->dist[t] + 1 < best)
                best = d->dist[t] + 1;
        }
        FZ_CHECK(best == d->dist[s], "state %d: dist %d, its edges say %d", s, d->dist[s], best);
    }
    check_chains(d, seed | 1);
    fl_buf b = {0};
    uint64_t rng = seed;
    for (int i = 0; i < 4; i++) {
        b.len = 0;
        if (fl_dfa_sample(d, &rng, d->dist[0] + 64, &b))
            continue; /* (out of memory only) */
        json_error_t je;
        json_t *v = json_loadb(b.data ? b.data : "", b.len, JSON_DECODE_ANY, &je);
        FZ_CHECK(v || (!bounded && too_big(je.text)), "a sample is not JSON: %.*s (%s)", (int)(b.len > 200 ? 200 : b.len),
                 b.data ? b.data : "", je.text);
        json_decref(v);
    }
    fl_buf_free(&b);
}

static const char *WORDS[] = {"{\"", "\":", "\"}", "true", "null", "<tool_call>", "\n", "[1,", "é"};
#define N_WORDS (int)(sizeof WORDS / sizeof WORDS[0])

/* A vocabulary of the 256 bytes, WORDS, and the end token (the last id). */
static fl_tvocab *byte_vocab(void)
{
    fl_tvocab *v = calloc(1, sizeof *v);
    int n = 256 + N_WORDS + 1;
    v->n = n;
    v->off = calloc((size_t)n + 1, sizeof(uint32_t));
    v->ok = calloc((size_t)n, 1);
    v->blob = malloc(512);
    uint32_t o = 0;
    for (int i = 0; i < n; i++) {
        v->off[i] = o;
        if (i < 256) {
            v->blob[o++] = (unsigned char)i;
            v->single[i] = i;
        } else if (i < 256 + N_WORDS) {
            size_t l = strlen(WORDS[i - 256]);
            memcpy(v->blob + o, WORDS[i - 256], l);
            o += (uint32_t)l;
            if ((int32_t)l > v->max_len)
                v->max_len = (int32_t)l;
        }
        v->ok[i] = i < 256 + N_WORDS;
    }
    v->off[n] = o;
    return v;
}

/* Decodes to the end with logits from the input: 4 positions per block, the assignment's
   positions committed two at a time. */
static void check_decode(fl_dfa *d, const uint8_t *data, size_t size)
{
    static fl_tvocab *tv;
    if (!tv)
        tv = byte_vocab();
    fl_cons *c = NULL;
    fl_err e = {0};
    if (fl_cons_create(d, tv, 0, &c, &e)) /* takes d */
        return;
    int32_t eos = tv->n - 1, budget = fl_cons_min_tokens(c) + (int32_t)(size % 7);
    if (budget > 48 || c->dfa->n > 2000) {
        fl_cons_unref(c);
        return;
    }
    fl_cdp *w = fl_cdp_new();
    fl_decode_opts o;
    fl_decode_opts_default(&o);
    float *lg = malloc(sizeof(float) * (size_t)tv->n * 4);
    int32_t state = 0, out = 0;
    unsigned char text[512];
    size_t tl = 0;
    uint64_t rng = size;
    for (int32_t start = 0; start < budget && state != FL_CONS_END; start += 4) {
        int n = budget - start < 4 ? budget - start : 4;
        int32_t x[4] = {-1, -1, -1, -1}, prev[4] = {-1, -1, -1, -1};
        for (int round = 0; round < 4; round++) {
            fl_cpos p[4];
            for (int j = 0; j < n; j++) {
                for (int t = 0; t < tv->n; t++)
                    lg[j * tv->n + t] = (float)data[(size_t)(j * 31 + t + round * 7) % size] / 16.0f;
                p[j] = (fl_cpos){x[j], x[j] < 0 ? lg + j * tv->n : NULL, NAN, prev[j]};
            }
            int32_t tok[4];
            float prob[4];
            int rc = fl_cons_best(c, w, state, p, n, budget - start, tv->n, &eos, 1, &o, &rng, tok,
                                  prob);
            FZ_CHECK(rc == 0, "no assignment at %d (state %d, budget %d)", start, state, budget);
            if (rc)
                break;
            memcpy(prev, tok, sizeof tok);
            for (int j = 0, k = 0; j < n && k < 2; j++)
                if (x[j] < 0) {
                    x[j] = tok[j];
                    k++;
                }
        }
        for (int j = 0; j < n && state != FL_CONS_END; j++) {
            state = fl_cons_step(c, state, x[j], &eos, 1);
            FZ_CHECK(state != -1, "a committed token left the language");
            if (state >= 0) {
                size_t l = tv->off[x[j] + 1] - tv->off[x[j]];
                if (tl + l < sizeof text) {
                    memcpy(text + tl, tv->blob + tv->off[x[j]], l);
                    tl += l;
                }
                out++;
            }
        }
    }
    FZ_CHECK(state == FL_CONS_END || (state >= 0 && c->dfa->accept[state]),
             "not a whole value after %d tokens: %.*s", out, (int)tl, text);
    free(lg);
    fl_cdp_free(w);
    fl_cons_unref(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t je;
    json_t *schema = json_loadb((const char *)data, size, JSON_DECODE_ANY, &je);
    if (!schema)
        return 0;
    bool decode = size % 2;
    fl_constrain_opts o = {.max_states = 20000};
    if (decode) {
        o.max_ws = 20;
        o.max_digits = 15;
        if (size % 4 == 1) {
            o.prefix = "<tool_call>\n";
            o.suffix = "\n</tool_call>";
        }
    }
    fl_dfa *d = NULL;
    fl_err e = {0};
    if (fl_dfa_from_schema(schema, &o, &d, &e) == 0) {
        FZ_CHECK(d, "compiled without an automaton");
        if (!o.prefix)
            check_dfa(d, size, decode);
        if (decode)
            check_decode(d, data, size);
        else
            fl_dfa_free(d);
    } else {
        FZ_CHECK(!d && e.code && e.msg[0], "refused without a message");
    }
    json_decref(schema);
    return 0;
}
