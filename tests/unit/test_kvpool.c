/* test_kvpool.c: the page pool and its prefix cache against a naive model: random allocs,
 * refs, unrefs, registrations, lookups and takes; counts, LRU eviction order and the hash
 * table (backward-shift deletion under heavy collisions) must agree at every step. */
#include "check.h"
#include "kvpool.h"

#include <string.h>

#define NP 64

typedef struct model {
    int refs[NP];
    int keyed[NP];
    fl_kvpool_key key[NP];
    long lru_stamp[NP]; /* release time of a cached page */
} model;

static uint64_t rng = 88172645463325252ull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

int main(void)
{
    fl_kvpool p;
    fl_err e = {0};
    CHECK(fl_kvpool_init(&p, NP, &e) == 0, "init");
    model m;
    memset(&m, 0, sizeof m);
    long now = 0;
    int bad = 0;
    /* keys from a small space with colliding low bits, so probe runs get long */
    fl_kvpool_key keys[40];
    for (int i = 0; i < 40; i++)
        keys[i] = (fl_kvpool_key){rnd(), (uint64_t)(i % 5) << 40 | (uint64_t)(i / 5)};
    for (int step = 0; step < 200000 && !bad; step++) {
        int op = (int)(rnd() % 6);
        int pg = (int)(rnd() % NP);
        int ki = (int)(rnd() % 40);
        now++;
        if (op == 0) { /* alloc */
            int free_n = 0, cached_n = 0, oldest = -1;
            for (int i = 0; i < NP; i++) {
                free_n += m.refs[i] == 0 && !m.keyed[i];
                if (m.refs[i] == 0 && m.keyed[i]) {
                    cached_n++;
                    if (oldest < 0 || m.lru_stamp[i] < m.lru_stamp[oldest])
                        oldest = i;
                }
            }
            int32_t got = fl_kvpool_alloc(&p);
            if (free_n == 0 && cached_n == 0) {
                bad |= got != -1;
            } else if (free_n == 0) {
                bad |= got != oldest; /* the least recently released cached page */
                if (got >= 0) {
                    m.keyed[got] = 0;
                    m.refs[got] = 1;
                }
            } else {
                bad |= got < 0 || m.refs[got] != 0 || m.keyed[got];
                if (got >= 0)
                    m.refs[got] = 1;
            }
        } else if (op == 1 && m.refs[pg] > 0) {
            fl_kvpool_ref(&p, pg);
            m.refs[pg]++;
        } else if (op == 2 && m.refs[pg] > 0) {
            fl_kvpool_unref(&p, pg);
            if (--m.refs[pg] == 0 && m.keyed[pg])
                m.lru_stamp[pg] = now;
        } else if (op == 3 && m.refs[pg] > 0) {
            int owner = -1;
            for (int i = 0; i < NP; i++)
                if (m.keyed[i] && m.key[i].hi == keys[ki].hi && m.key[i].lo == keys[ki].lo)
                    owner = i;
            bool want = m.keyed[pg] ? (m.key[pg].hi == keys[ki].hi && m.key[pg].lo == keys[ki].lo)
                                    : owner < 0;
            bool got = fl_kvpool_register(&p, pg, keys[ki]);
            bad |= got != want;
            if (got && !m.keyed[pg]) {
                m.keyed[pg] = 1;
                m.key[pg] = keys[ki];
            }
        } else if (op == 4 || op == 5) { /* lookup, and take when found */
            int owner = -1;
            for (int i = 0; i < NP; i++)
                if (m.keyed[i] && m.key[i].hi == keys[ki].hi && m.key[i].lo == keys[ki].lo)
                    owner = i;
            int32_t got = fl_kvpool_lookup(&p, keys[ki]);
            bad |= got != owner;
            if (op == 5 && owner >= 0) {
                fl_kvpool_take(&p, owner);
                m.refs[owner]++;
            }
        }
        int used = 0, cached = 0;
        for (int i = 0; i < NP; i++) {
            used += m.refs[i] > 0;
            cached += m.refs[i] == 0 && m.keyed[i];
        }
        if (fl_kvpool_used(&p) != used || p.n_cached != cached ||
            fl_kvpool_available(&p) != NP - used) {
            fprintf(stderr, "step %d: used %d/%d cached %d/%d\n", step, fl_kvpool_used(&p), used,
                    p.n_cached, cached);
            bad = 1;
        }
        if (bad)
            fprintf(stderr, "diverged at step %d (op %d)\n", step, op);
    }
    CHECK(!bad, "the pool agrees with the naive model over 200,000 random operations");
    CHECK(p.evictions > 0, "evictions happened (%lld)", (long long)p.evictions);
    fl_kvpool_free(&p);
    return check_summary("test_kvpool");
}
