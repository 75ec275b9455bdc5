/* fuzz_schema.c: response constraints (engine/constrain.c) from hostile JSON schemas. Any
 * input is either refused with a message or compiled, within a state budget that bounds time
 * and memory; a compiled automaton must be well formed (every edge inside it, distances that
 * agree with its edges and acceptance) and every text it samples must parse as JSON. */
#include <stdlib.h>
#include <string.h>

#include "constrain.h"
#include "fuzz_common.h"

static void check_dfa(const fl_dfa *d, uint64_t seed)
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
    fl_buf b = {0};
    uint64_t rng = seed;
    for (int i = 0; i < 4; i++) {
        b.len = 0;
        if (fl_dfa_sample(d, &rng, d->dist[0] + 64, &b))
            continue; /* (out of memory only) */
        json_error_t je;
        json_t *v = json_loadb(b.data ? b.data : "", b.len, JSON_DECODE_ANY, &je);
        FZ_CHECK(v, "a sample is not JSON: %.*s (%s)", (int)(b.len > 200 ? 200 : b.len),
                 b.data ? b.data : "", je.text);
        json_decref(v);
    }
    fl_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t je;
    json_t *schema = json_loadb((const char *)data, size, JSON_DECODE_ANY, &je);
    if (!schema)
        return 0;
    fl_constrain_opts o = {.max_states = 20000};
    fl_dfa *d = NULL;
    fl_err e = {0};
    if (fl_dfa_from_schema(schema, &o, &d, &e) == 0) {
        FZ_CHECK(d, "compiled without an automaton");
        check_dfa(d, size);
        fl_dfa_free(d);
    } else {
        FZ_CHECK(!d && e.code && e.msg[0], "refused without a message");
    }
    json_decref(schema);
    return 0;
}
