/* kvpool.h: ownership of the backend's KV pages. The backend holds the memory; the pool
 * says which pages are free and how many holders each page has. Pages are reference counted
 * so that parallel branches and identical prompt prefixes share them.
 *
 * The pool is also the engine's prefix cache: a page whose KV is final (a stored block) is
 * registered under its chained key (persist.h: same key, same tokens from position 0, same
 * KV). When its last holder lets go, a registered page is kept, evictable, in LRU order, and
 * a later sequence whose prompt chains to the same key takes it instead of computing it;
 * allocation evicts the least recently released one only when no page is free. Only the
 * engine thread touches a pool. */
#ifndef FL_KVPOOL_H
#define FL_KVPOOL_H

#include "fl.h"

typedef struct fl_kvpool_key {
    uint64_t hi, lo;
} fl_kvpool_key;

typedef struct fl_kvpool {
    int32_t n_pages;
    int32_t n_free;      /* pages with no holder and no key */
    int32_t n_cached;    /* pages with no holder, kept for their key (evictable) */
    int32_t *free_list;  /* (n_pages) stack of free page ids */
    int32_t *refs;       /* (n_pages) holders per page */
    /* prefix cache */
    fl_kvpool_key *keys; /* (n_pages) the key of a registered page */
    uint8_t *keyed;      /* (n_pages) 1 when registered */
    int32_t *lru_prev, *lru_next; /* (n_pages) the evictable list; -1 ends */
    int32_t lru_head, lru_tail;   /* head: evicted first */
    int32_t *ht;         /* (ht_cap) open addressing, key -> page, -1 empty */
    int32_t ht_cap;      /* power of two >= 2 * n_pages */
    int64_t evictions;
} fl_kvpool;

/* Fills the caller's p for n_pages pages, all free (FL_ENOMEM);
 * fl_kvpool_free releases its tables, not p itself. */
int fl_kvpool_init(fl_kvpool *p, int32_t n_pages, fl_err *e);
void fl_kvpool_free(fl_kvpool *p);
/* A fresh page with one holder (evicting the least recently released cached page when none
 * is free), or -1 when every page has a holder (a soft result, not an error). */
int32_t fl_kvpool_alloc(fl_kvpool *p);
/* One more / one fewer holder of a held page. The last unref frees the page, or keeps it
 * cached (evictable) when it is registered. */
void fl_kvpool_ref(fl_kvpool *p, int32_t page);
void fl_kvpool_unref(fl_kvpool *p, int32_t page);
/* Registers a held page's final KV under key. False when the key already names another page
 * (the first one stays; this page is then released normally). */
bool fl_kvpool_register(fl_kvpool *p, int32_t page, fl_kvpool_key key);
/* The page registered under key, or -1. */
int32_t fl_kvpool_lookup(const fl_kvpool *p, fl_kvpool_key key);
/* Takes a holder on a registered page (a cached one leaves the evictable list). */
void fl_kvpool_take(fl_kvpool *p, int32_t page);
/* Pages with at least one holder. */
static inline int32_t fl_kvpool_used(const fl_kvpool *p) { return p->n_pages - p->n_free - p->n_cached; }
/* Pages an allocation can get: free ones plus evictable cached ones. */
static inline int32_t fl_kvpool_available(const fl_kvpool *p) { return p->n_free + p->n_cached; }

#endif
