/* kvpool.c: a free-list stack with per-page holder counts. */
#include "kvpool.h"

#include <stdlib.h>

int fl_kvpool_init(fl_kvpool *p, int32_t n_pages, fl_err *e)
{
    p->n_pages = n_pages;
    p->n_free = n_pages;
    p->free_list = malloc(sizeof(int32_t) * (size_t)(n_pages > 0 ? n_pages : 1));
    p->refs = calloc((size_t)(n_pages > 0 ? n_pages : 1), sizeof(int32_t));
    if (!p->free_list || !p->refs) {
        fl_kvpool_free(p);
        return fl_err_set(e, FL_ENOMEM, "out of memory for a pool of %d KV pages", n_pages);
    }
    /* hand out low ids first: easier to read in logs and tests */
    for (int32_t i = 0; i < n_pages; i++)
        p->free_list[i] = n_pages - 1 - i;
    return 0;
}

void fl_kvpool_free(fl_kvpool *p)
{
    free(p->free_list);
    free(p->refs);
    p->free_list = p->refs = NULL;
    p->n_pages = p->n_free = 0;
}

int32_t fl_kvpool_alloc(fl_kvpool *p)
{
    if (p->n_free == 0)
        return -1;
    int32_t pg = p->free_list[--p->n_free];
    p->refs[pg] = 1;
    return pg;
}

void fl_kvpool_ref(fl_kvpool *p, int32_t page)
{
    /* a ref on a free page is a broken invariant, not bad input */
    if (page < 0 || page >= p->n_pages || p->refs[page] <= 0)
        abort();
    p->refs[page]++;
}

void fl_kvpool_unref(fl_kvpool *p, int32_t page)
{
    if (page < 0 || page >= p->n_pages || p->refs[page] <= 0)
        abort();
    if (--p->refs[page] == 0)
        p->free_list[p->n_free++] = page;
}
