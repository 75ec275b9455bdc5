/* kvpool.c: a free-list stack with per-page holder counts, plus the prefix cache: a hash table
 * (linear probing, backward-shift deletion) from chained page keys to pages, and an LRU list of
 * cached pages that nobody holds. */
#include "kvpool.h"

#include <stdlib.h>

int fl_kvpool_init(fl_kvpool *p, int32_t n_pages, fl_err *e)
{
    size_t n = (size_t)(n_pages > 0 ? n_pages : 1);
    p->n_pages = n_pages;
    p->n_free = n_pages;
    p->n_cached = 0;
    p->evictions = 0;
    p->ht_cap = 16;
    while (p->ht_cap < 2 * n_pages)
        p->ht_cap *= 2;
    p->free_list = malloc(sizeof(int32_t) * n);
    p->refs = calloc(n, sizeof(int32_t));
    p->keys = calloc(n, sizeof(fl_kvpool_key));
    p->keyed = calloc(n, 1);
    p->lru_prev = malloc(sizeof(int32_t) * n);
    p->lru_next = malloc(sizeof(int32_t) * n);
    p->ht = malloc(sizeof(int32_t) * (size_t)p->ht_cap);
    if (!p->free_list || !p->refs || !p->keys || !p->keyed || !p->lru_prev || !p->lru_next ||
        !p->ht) {
        fl_kvpool_free(p);
        return fl_err_set(e, FL_ENOMEM, "out of memory for a pool of %d KV pages", n_pages);
    }
    /* hand out low ids first: easier to read in logs and tests */
    for (int32_t i = 0; i < n_pages; i++)
        p->free_list[i] = n_pages - 1 - i;
    for (int32_t i = 0; i < p->ht_cap; i++)
        p->ht[i] = -1;
    p->lru_head = p->lru_tail = -1;
    return 0;
}

void fl_kvpool_free(fl_kvpool *p)
{
    free(p->free_list);
    free(p->refs);
    free(p->keys);
    free(p->keyed);
    free(p->lru_prev);
    free(p->lru_next);
    free(p->ht);
    p->free_list = p->refs = p->lru_prev = p->lru_next = p->ht = NULL;
    p->keys = NULL;
    p->keyed = NULL;
    p->n_pages = p->n_free = p->n_cached = 0;
}

static uint32_t slot_of(const fl_kvpool *p, fl_kvpool_key k)
{
    return (uint32_t)((k.lo ^ (k.hi >> 7)) & (uint64_t)(p->ht_cap - 1));
}

static bool same(fl_kvpool_key a, fl_kvpool_key b) { return a.hi == b.hi && a.lo == b.lo; }

int32_t fl_kvpool_lookup(const fl_kvpool *p, fl_kvpool_key key)
{
    uint32_t m = (uint32_t)p->ht_cap - 1;
    for (uint32_t i = slot_of(p, key);; i = (i + 1) & m) {
        int32_t pg = p->ht[i];
        if (pg < 0)
            return -1;
        if (same(p->keys[pg], key))
            return pg;
    }
}

static void ht_remove(fl_kvpool *p, int32_t page)
{
    uint32_t m = (uint32_t)p->ht_cap - 1;
    uint32_t i = slot_of(p, p->keys[page]);
    while (p->ht[i] != page)
        i = (i + 1) & m;
    /* backward-shift: move later entries of the run into the hole when their home allows */
    uint32_t j = i;
    for (;;) {
        p->ht[i] = -1;
        for (;;) {
            j = (j + 1) & m;
            if (p->ht[j] < 0)
                return;
            uint32_t home = slot_of(p, p->keys[p->ht[j]]);
            /* can the entry at j live at i? (home not cyclically within (i, j]) */
            bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
            if (!stays)
                break;
        }
        p->ht[i] = p->ht[j];
        i = j;
    }
}

static void lru_unlink(fl_kvpool *p, int32_t pg)
{
    int32_t a = p->lru_prev[pg], b = p->lru_next[pg];
    if (a >= 0)
        p->lru_next[a] = b;
    else
        p->lru_head = b;
    if (b >= 0)
        p->lru_prev[b] = a;
    else
        p->lru_tail = a;
    p->n_cached--;
}

int32_t fl_kvpool_alloc(fl_kvpool *p)
{
    int32_t pg;
    if (p->n_free > 0) {
        pg = p->free_list[--p->n_free];
    } else if (p->lru_head >= 0) {
        pg = p->lru_head; /* the least recently released cached page */
        lru_unlink(p, pg);
        ht_remove(p, pg);
        p->keyed[pg] = 0;
        p->evictions++;
    } else {
        return -1;
    }
    p->refs[pg] = 1;
    return pg;
}

void fl_kvpool_ref(fl_kvpool *p, int32_t page)
{
    /* a ref on a page nobody holds is a broken invariant, not bad input */
    if (page < 0 || page >= p->n_pages || p->refs[page] <= 0)
        abort();
    p->refs[page]++;
}

void fl_kvpool_unref(fl_kvpool *p, int32_t page)
{
    if (page < 0 || page >= p->n_pages || p->refs[page] <= 0)
        abort();
    if (--p->refs[page])
        return;
    if (p->keyed[page]) { /* kept for its key, evictable, most recently released last */
        p->lru_prev[page] = p->lru_tail;
        p->lru_next[page] = -1;
        if (p->lru_tail >= 0)
            p->lru_next[p->lru_tail] = page;
        else
            p->lru_head = page;
        p->lru_tail = page;
        p->n_cached++;
    } else {
        p->free_list[p->n_free++] = page;
    }
}

bool fl_kvpool_register(fl_kvpool *p, int32_t page, fl_kvpool_key key)
{
    if (page < 0 || page >= p->n_pages || p->refs[page] <= 0)
        abort();
    if (p->keyed[page])
        return same(p->keys[page], key);
    if (fl_kvpool_lookup(p, key) >= 0)
        return false;
    uint32_t m = (uint32_t)p->ht_cap - 1;
    uint32_t i = slot_of(p, key);
    while (p->ht[i] >= 0)
        i = (i + 1) & m;
    p->keys[page] = key;
    p->keyed[page] = 1;
    p->ht[i] = page;
    return true;
}

void fl_kvpool_take(fl_kvpool *p, int32_t page)
{
    if (page < 0 || page >= p->n_pages || !p->keyed[page])
        abort();
    if (p->refs[page] == 0)
        lru_unlink(p, page);
    p->refs[page]++;
}
