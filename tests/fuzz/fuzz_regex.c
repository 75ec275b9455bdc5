/* fuzz_regex.c: regular expressions (engine/cpauto.c) from hostile bytes, as a schema's
 * `pattern` (found anywhere) and as structured_outputs' regex (the whole text). Any input is
 * refused with a message or compiled within the limits; a compiled character automaton must
 * be well formed (classes covering the code points in order, edges inside it, every state able
 * to accept: pruned), and the byte automaton spelled from it must agree with it: every text the
 * byte automaton samples is valid UTF-8 and, read as code points, accepted by the character
 * automaton. */
#include <stdlib.h>
#include <string.h>

#include "constrain.h"
#include "cpauto.h"
#include "fuzz_common.h"

static void check_cpa(const fl_cpa *a)
{
    FZ_CHECK(a->n >= 1 && a->ncls >= 1, "%d states, %d classes", a->n, a->ncls);
    FZ_CHECK(a->lo[0] == 0 && a->lo[a->ncls] == FL_CP_END, "classes span %d..%d", a->lo[0],
             a->lo[a->ncls]);
    for (int32_t k = 0; k < a->ncls; k++)
        FZ_CHECK(a->lo[k] < a->lo[k + 1], "class %d is empty or out of order", k);
    for (int32_t s = 0; s < a->n; s++)
        for (int32_t k = 0; k < a->ncls; k++) {
            int32_t t = a->next[(size_t)s * (size_t)a->ncls + (size_t)k];
            FZ_CHECK(t >= -1 && t < a->n, "state %d class %d goes to %d", s, k, t);
        }
}

/* the character automaton's verdict on UTF-8 text (valid: checked before) */
static bool cpa_accepts(const fl_cpa *a, const unsigned char *p, size_t n)
{
    int32_t s = 0;
    for (size_t i = 0; i < n && s >= 0;) {
        int32_t c = p[i];
        size_t len = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
        if (len > 1) {
            c &= len == 2 ? 0x1f : len == 3 ? 0x0f : 0x07;
            for (size_t k = 1; k < len; k++)
                c = (c << 6) | (p[i + k] & 0x3f);
        }
        i += len;
        int32_t lo = 0, hi = a->ncls; /* the class of c */
        while (hi - lo > 1) {
            int32_t m = (lo + hi) / 2;
            if (a->lo[m] <= c)
                lo = m;
            else
                hi = m;
        }
        s = a->next[(size_t)s * (size_t)a->ncls + (size_t)lo];
    }
    return s >= 0 && a->accept[s];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 400)
        return 0;
    char *pat = malloc(size + 1);
    memcpy(pat, data, size);
    pat[size] = 0; /* (a NUL inside ends the pattern, as a C string does) */
    for (int anchored = 0; anchored < 2; anchored++) {
        fl_err e = {0};
        fl_cpa *a = NULL;
        int rc = fl_cpa_regex(pat, anchored, &a, &e);
        fz_check_err(rc, &e, "fl_cpa_regex");
        if (rc)
            continue;
        check_cpa(a);
        fl_dfa *d = NULL;
        fl_constrain_opts co = {.max_states = 20000};
        rc = anchored ? fl_dfa_from_regex(pat, &co, &d, &e) : 0;
        fz_check_err(rc, &e, "fl_dfa_from_regex");
        if (anchored && !rc) {
            FZ_CHECK(!fl_cpa_empty(a), "an empty language compiled");
            fl_buf b = {0};
            uint64_t rng = size;
            for (int i = 0; i < 6; i++) {
                b.len = 0;
                if (fl_dfa_sample(d, &rng, d->dist[0] + 40, &b))
                    continue;
                const unsigned char *t = (const unsigned char *)(b.data ? b.data : "");
                FZ_CHECK(fz_utf8_ok(t, b.len), "a sample is not UTF-8");
                FZ_CHECK(cpa_accepts(a, t, b.len), "a sample of the bytes is not accepted by the "
                                                   "characters: %.*s", (int)b.len, (const char *)t);
            }
            fl_buf_free(&b);
            fl_dfa_free(d);
        }
        fl_cpa_free(a);
    }
    free(pat);
    return 0;
}
