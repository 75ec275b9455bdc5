/* kvpool.h: ownership of the backend's KV pages. The backend holds the memory; the pool
 * says which pages are free and how many holders each page has. Pages are reference counted
 * so that parallel branches and identical prompt prefixes share them; a page returns to the
 * free list when its last holder lets go. Only the engine thread touches a pool. */
#ifndef FL_KVPOOL_H
#define FL_KVPOOL_H

#include "fl.h"

typedef struct fl_kvpool {
    int32_t n_pages;
    int32_t n_free;
    int32_t *free_list; /* (n_pages) stack of free page ids */
    int32_t *refs;      /* (n_pages) holders per page; 0 = free */
} fl_kvpool;

int fl_kvpool_init(fl_kvpool *p, int32_t n_pages, fl_err *e);
void fl_kvpool_free(fl_kvpool *p);
/* A fresh page with one holder, or -1 when none is free (a soft result, not an error). */
int32_t fl_kvpool_alloc(fl_kvpool *p);
void fl_kvpool_ref(fl_kvpool *p, int32_t page);
void fl_kvpool_unref(fl_kvpool *p, int32_t page);
static inline int32_t fl_kvpool_used(const fl_kvpool *p) { return p->n_pages - p->n_free; }

#endif
