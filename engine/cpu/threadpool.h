/* threadpool.h: the CPU backend's one pool of compute threads. The calling thread is thread
 * 0 and works too, so a pool of n threads starts n - 1 workers. A job runs fn on every
 * thread at once and returns when all are done; jobs split their own work (by thread index,
 * or with fl_pool_next for dynamic chunks).
 *
 * Workers spin briefly between jobs (a forward issues ~4 jobs per layer, microseconds
 * apart, and a condition-variable wake costs tens of microseconds each time), then sleep,
 * so an idle pool costs no CPU and never competes with another spinning pool. */
#ifndef FL_THREADPOOL_H
#define FL_THREADPOOL_H

#include <stdatomic.h>

#include "fl.h"

typedef struct fl_pool fl_pool;

/* fn(ctx, tid, n_threads), tid in [0, n_threads). */
typedef void (*fl_pool_fn)(void *ctx, int tid, int n_threads);

/* n_threads >= 1; 1 starts no thread and runs jobs inline. */
int fl_pool_create(fl_pool **out, int n_threads, fl_err *e);
int fl_pool_size(const fl_pool *p);
/* Runs fn on every thread of the pool; not reentrant (one job at a time, from one thread). */
void fl_pool_run(fl_pool *p, fl_pool_fn fn, void *ctx);
void fl_pool_destroy(fl_pool *p);

/* A shared work counter for dynamic splitting: returns the next index, >= n when done. */
static inline int fl_pool_next(atomic_int *counter) { return atomic_fetch_add(counter, 1); }

/* Contiguous shares with stealing, for jobs that stream memory chunk after chunk (the
 * matmuls): chunks [0, n) are cut into one contiguous share per thread, each thread takes
 * its own share's chunks front to back, and a thread whose share is done takes chunks from
 * the back of another's. So each thread reads one stream of weights, which the hardware
 * prefetchers follow and the kernels' software prefetch runs on into, where a shared counter
 * hands out every other chunk (32-96 KB apart at decode sizes), while a descheduled thread
 * still delays only its current chunk. Which thread computes a chunk never changes its
 * result. One fl_share per thread, set by fl_shares_init before the job runs. */
typedef struct fl_share {
    _Alignas(64) _Atomic unsigned long long r; /* lo | hi << 32: chunks [lo, hi) left */
} fl_share;
void fl_shares_init(fl_share *s, int nt, int n);
/* The next chunk for thread tid: its own share's front, else another share's back; -1 when
 * every chunk has been taken. */
int fl_shares_next(fl_share *s, int nt, int tid);


#endif
