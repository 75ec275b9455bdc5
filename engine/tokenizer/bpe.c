/* bpe.c: byte-level BPE merging of one pre-token, as Hugging Face tokenizers does it: the
 * adjacent pair with the lowest merge rank is merged first, the leftmost one on a tie, until no
 * pair has a rank. Ranks live in a pair -> (rank, merged id) hash map; results of whole
 * pre-tokens are kept in a bounded word cache, so that frequent words cost one lookup. */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

/* ---- merge table ---- */

int fl__pairmap_init(fl__pairmap *m, size_t expected)
{
    size_t cap = 1024;
    while (cap < expected * 2)
        cap *= 2;
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots)
        return FL_ENOMEM;
    memset(m->slots, 0xff, cap * sizeof *m->slots);
    m->mask = cap - 1;
    m->n = 0;
    return 0;
}

void fl__pairmap_free(fl__pairmap *m)
{
    free(m->slots);
    m->slots = NULL;
    m->n = 0;
}

void fl__pairmap_put(fl__pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t id)
{
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint64_t i = (key * 0x9e3779b97f4a7c15ull) >> 20 & m->mask;
    for (;;) {
        fl__pair_slot *s = &m->slots[i];
        if (s->key == key || s->key == UINT64_MAX) {
            if (s->key == UINT64_MAX)
                m->n++;
            s->key = key;
            s->rank = rank;
            s->id = id;
            return;
        }
        i = (i + 1) & m->mask;
    }
}

/* ---- word cache ---- */

#define WC_BITS 16
#define WC_MAX_COUNT 40000          /* entries before a clear (table is 65536) */
#define WC_ARENA (4u << 20)         /* bytes of keys and ids before a clear */
#define WC_MAX_KEY 255              /* longer pre-tokens are not cached */

static int wc_init(fl__wcache *c)
{
    c->tab = calloc((size_t)1 << WC_BITS, sizeof *c->tab);
    c->arena = malloc(WC_ARENA);
    if (!c->tab || !c->arena) {
        free(c->tab);
        free(c->arena);
        c->tab = NULL;
        c->arena = NULL;
        return FL_ENOMEM;
    }
    c->mask = (1u << WC_BITS) - 1;
    c->count = 0;
    c->used = 0;
    c->cap = WC_ARENA;
    return 0;
}

static void wc_clear(fl__wcache *c)
{
    memset(c->tab, 0, ((size_t)c->mask + 1) * sizeof *c->tab);
    c->count = 0;
    c->used = 0;
}

static const fl__wc_entry *wc_get(const fl__wcache *c, uint64_t h, const unsigned char *w,
                                  size_t n)
{
    uint32_t i = (uint32_t)h & c->mask;
    for (;;) {
        const fl__wc_entry *e = &c->tab[i];
        if (!e->hash)
            return NULL;
        if (e->hash == h && e->klen == n && !memcmp(c->arena + e->off, w, n))
            return e;
        i = (i + 1) & c->mask;
    }
}

static void wc_put(fl__wcache *c, uint64_t h, const unsigned char *w, size_t n,
                   const int32_t *ids, size_t nids)
{
    if (nids > UINT16_MAX)
        return;
    size_t koff = (n + 3) & ~(size_t)3;
    size_t need = koff + nids * sizeof(int32_t);
    if (c->count >= WC_MAX_COUNT || c->used + need > c->cap)
        wc_clear(c);
    uint32_t i = (uint32_t)h & c->mask;
    while (c->tab[i].hash)
        i = (i + 1) & c->mask;
    fl__wc_entry *e = &c->tab[i];
    e->hash = h;
    e->off = (uint32_t)c->used;
    e->klen = (uint16_t)n;
    e->nids = (uint16_t)nids;
    memcpy(c->arena + c->used, w, n);
    memcpy(c->arena + c->used + koff, ids, nids * sizeof(int32_t));
    c->used += need;
    c->count++;
}

/* ---- merging ---- */

#define SMALL_WORD 64 /* up to this many symbols: rank array and linear scans, else a heap */

static int scratch_reserve(fl__bpe_scratch *b, size_t n)
{
    if (n <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < n)
        cap *= 2;
    fl__bpe_sym *s = realloc(b->sym, cap * sizeof *s);
    if (!s)
        return FL_ENOMEM;
    b->sym = s;
    uint32_t *r = realloc(b->rank, cap * sizeof *r);
    if (!r)
        return FL_ENOMEM;
    b->rank = r;
    b->cap = cap;
    return 0;
}

/* Few symbols: ids[] compacted in place, rank[i] / nid[i] for the pair (i, i+1). */
static size_t merge_small(const fl__pairmap *pm, int32_t *ids, size_t m, uint32_t *rank)
{
    int32_t nid[SMALL_WORD];
    for (size_t i = 0; i + 1 < m; i++) {
        const fl__pair_slot *p = fl__pairmap_get(pm, ids[i], ids[i + 1]);
        rank[i] = p ? p->rank : UINT32_MAX;
        nid[i] = p ? p->id : -1;
    }
    while (m > 1) {
        uint32_t best = UINT32_MAX;
        size_t bi = 0;
        for (size_t i = 0; i + 1 < m; i++)
            if (rank[i] < best) { /* strict: the leftmost of equal ranks */
                best = rank[i];
                bi = i;
            }
        if (best == UINT32_MAX)
            break;
        ids[bi] = nid[bi];
        m--;
        for (size_t i = bi + 1; i < m; i++) {
            ids[i] = ids[i + 1];
            rank[i] = rank[i + 1];
            nid[i] = nid[i + 1];
        }
        if (bi > 0) {
            const fl__pair_slot *p = fl__pairmap_get(pm, ids[bi - 1], ids[bi]);
            rank[bi - 1] = p ? p->rank : UINT32_MAX;
            nid[bi - 1] = p ? p->id : -1;
        }
        if (bi + 1 < m) {
            const fl__pair_slot *p = fl__pairmap_get(pm, ids[bi], ids[bi + 1]);
            rank[bi] = p ? p->rank : UINT32_MAX;
            nid[bi] = p ? p->id : -1;
        }
    }
    return m;
}

static bool cand_less(const fl__bpe_cand *a, const fl__bpe_cand *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static int heap_push(fl__bpe_scratch *b, size_t *n, fl__bpe_cand c)
{
    if (*n == b->hcap) {
        size_t cap = b->hcap ? b->hcap * 2 : 1024;
        fl__bpe_cand *h = realloc(b->heap, cap * sizeof *h);
        if (!h)
            return FL_ENOMEM;
        b->heap = h;
        b->hcap = cap;
    }
    fl__bpe_cand *h = b->heap;
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &h[p]))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
    return 0;
}

static fl__bpe_cand heap_pop(fl__bpe_cand *h, size_t *n)
{
    fl__bpe_cand top = h[0], last = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= m)
            break;
        size_t c = l + 1 < m && cand_less(&h[l + 1], &h[l]) ? l + 1 : l;
        if (!cand_less(&h[c], &last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (m)
        h[i] = last;
    return top;
}

static int push_pair(const fl__pairmap *pm, fl__bpe_scratch *b, size_t *nh, int32_t pos)
{
    fl__bpe_sym *s = b->sym;
    int32_t nx = s[pos].next;
    if (nx < 0)
        return 0;
    const fl__pair_slot *p = fl__pairmap_get(pm, s[pos].id, s[nx].id);
    if (!p)
        return 0;
    fl__bpe_cand c = {p->rank, pos, p->id, s[pos].id, s[nx].id};
    return heap_push(b, nh, c);
}

/* Many symbols: linked symbols and a heap of candidate merges, stale ones skipped. Writes the
 * result into ids[]; returns the count or a negative error. */
static long merge_large(const fl__pairmap *pm, fl__bpe_scratch *b, int32_t *ids, size_t m)
{
    fl__bpe_sym *s = b->sym;
    for (size_t i = 0; i < m; i++) {
        s[i].id = ids[i];
        s[i].prev = (int32_t)i - 1;
        s[i].next = i + 1 < m ? (int32_t)i + 1 : -1;
    }
    size_t nh = 0;
    for (size_t i = 0; i + 1 < m; i++)
        if (push_pair(pm, b, &nh, (int32_t)i))
            return FL_ENOMEM;
    while (nh) {
        fl__bpe_cand c = heap_pop(b->heap, &nh);
        fl__bpe_sym *l = &s[c.pos];
        if (l->id != c.left || l->next < 0)
            continue;
        fl__bpe_sym *r = &s[l->next];
        if (r->id != c.right)
            continue;
        l->id = c.id;
        l->next = r->next;
        if (r->next >= 0)
            s[r->next].prev = c.pos;
        r->id = -1; /* dead */
        if (l->prev >= 0 && push_pair(pm, b, &nh, l->prev))
            return FL_ENOMEM;
        if (push_pair(pm, b, &nh, c.pos))
            return FL_ENOMEM;
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = s[i].next)
        ids[k++] = s[i].id;
    return (long)k;
}

static int32_t bmap_find(const fl_tokenizer *t, const unsigned char *w, size_t n)
{
    uint64_t i = fl__hash_bytes(w, n) & t->bmask;
    for (;;) {
        int32_t id = t->bmap[i];
        if (id < 0)
            return -1;
        if (t->byt_len[id] == n && !memcmp(t->byt_arena + t->byt_off[id], w, n))
            return id;
        i = (i + 1) & t->bmask;
    }
}

int fl__bpe_encode_word(const fl_tokenizer *t, fl__slot *s, const unsigned char *w, size_t n)
{
    if (n == 0)
        return 0;
    if (fl__slot_reserve(s, n))
        return FL_ENOMEM;
    if (n == 1 && t->byte_id[w[0]] >= 0) {
        s->ids[s->nids++] = t->byte_id[w[0]];
        return 0;
    }
    fl__bpe_scratch *b = &s->bpe;
    uint64_t h = 0;
    if (n <= WC_MAX_KEY) {
        if (!b->cache.tab && wc_init(&b->cache))
            return FL_ENOMEM;
        h = fl__hash_bytes(w, n) | 1;
        const fl__wc_entry *e = wc_get(&b->cache, h, w, n);
        if (e) {
            memcpy(s->ids + s->nids, b->cache.arena + e->off + ((e->klen + 3u) & ~3u),
                   e->nids * sizeof(int32_t));
            s->nids += e->nids;
            return 0;
        }
    }
    int32_t *ids = s->ids + s->nids; /* merge in place in the output */
    size_t m = 0;
    int32_t whole = t->ignore_merges ? bmap_find(t, w, n) : -1;
    if (whole >= 0) {
        ids[m++] = whole;
    } else {
        for (size_t i = 0; i < n; i++) {
            int32_t id = t->byte_id[w[i]];
            if (id < 0)
                id = t->unk_id; /* a byte without a token: unk, or dropped when none */
            if (id >= 0)
                ids[m++] = id;
        }
        if (m <= SMALL_WORD) {
            if (scratch_reserve(b, SMALL_WORD))
                return FL_ENOMEM;
            m = merge_small(&t->merges, ids, m, b->rank);
        } else {
            if (scratch_reserve(b, m))
                return FL_ENOMEM;
            long k = merge_large(&t->merges, b, ids, m);
            if (k < 0)
                return (int)k;
            m = (size_t)k;
        }
    }
    if (h)
        wc_put(&b->cache, h, w, n, ids, m);
    s->nids += m;
    return 0;
}

void fl__bpe_scratch_free(fl__bpe_scratch *b)
{
    free(b->sym);
    free(b->rank);
    free(b->heap);
    free(b->cache.tab);
    free(b->cache.arena);
    memset(b, 0, sizeof *b);
}
