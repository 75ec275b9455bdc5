/* threadpool.c: spin-then-sleep fork/join pool (see threadpool.h). */
#include "threadpool.h"
#include "cpu.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FL_CPU_RELAX() _mm_pause()
#else
#define FL_CPU_RELAX() ((void)0)
#endif

/* How long an idle worker spins before it sleeps. Long enough to bridge the serial parts
 * between the jobs of one forward (norms of a few rows: microseconds), short enough that a
 * pool idle between forwards stops taking a core almost at once, and that on cores shared
 * with other processes a worker waiting for a descheduled main thread soon gives its core
 * back rather than keep it from that very thread. */
#define FL_SPIN_NS 50000L

struct fl_pool {
    int n;
    pthread_t *th;      /* (n - 1) workers */
    pthread_mutex_t mu; /* guards the sleep/wake hand-off only */
    pthread_cond_t cv;
    atomic_uint gen;    /* bumped once per job; workers run when it moves */
    atomic_int done;    /* workers finished with the current job */
    atomic_int stop;
    fl_pool_fn fn;
    void *ctx;
};

typedef struct fl_worker_arg {
    fl_pool *p;
    int tid;
} fl_worker_arg;

/* Waits until p->gen differs from seen; returns the new value. */
static unsigned fl_wait_gen(fl_pool *p, unsigned seen)
{
    int64_t t0 = 0;
    for (unsigned i = 0;; i++) {
        unsigned g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g != seen)
            return g;
        FL_CPU_RELAX();
        if ((i & 63) == 0) {
            int64_t t = fl_now_ns();
            if (!t0)
                t0 = t;
            else if (t - t0 > FL_SPIN_NS)
                break;
        }
    }
    pthread_mutex_lock(&p->mu);
    unsigned g;
    while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen)
        pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
    return g;
}

static void *fl_worker(void *arg)
{
    fl_worker_arg a = *(fl_worker_arg *)arg;
    free(arg);
    fl_pool *p = a.p;
    unsigned seen = 0;
    for (;;) {
        seen = fl_wait_gen(p, seen);
        if (atomic_load_explicit(&p->stop, memory_order_acquire))
            return NULL;
        p->fn(p->ctx, a.tid, p->n);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
    }
}

int fl_ncpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0)
            return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int fl_pool_create(fl_pool **out, int n_threads, fl_err *e)
{
    *out = NULL;
    if (n_threads < 1)
        return fl_err_set(e, FL_EINVAL, "thread pool: %d threads (need at least 1)", n_threads);
    fl_pool *p = calloc(1, sizeof *p);
    if (!p)
        return fl_err_set(e, FL_ENOMEM, "thread pool: out of memory");
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (n_threads > 1) {
        p->th = calloc((size_t)n_threads - 1, sizeof *p->th);
        if (!p->th) {
            fl_pool_destroy(p);
            return fl_err_set(e, FL_ENOMEM, "thread pool: out of memory");
        }
    }
    for (int i = 1; i < n_threads; i++) {
        fl_worker_arg *a = malloc(sizeof *a);
        if (a)
            *a = (fl_worker_arg){p, i};
        int rc = a ? pthread_create(&p->th[i - 1], NULL, fl_worker, a) : -1;
        if (rc != 0) {
            free(a);
            p->n = i; /* destroy joins only the workers that exist */
            fl_pool_destroy(p);
            return fl_err_set(e, FL_ENOMEM, "thread pool: cannot start thread %d of %d: %s", i,
                              n_threads, rc > 0 ? strerror(rc) : "out of memory");
        }
    }
    *out = p;
    return 0;
}

int fl_pool_size(const fl_pool *p) { return p->n; }

void fl_pool_run(fl_pool *p, fl_pool_fn fn, void *ctx)
{
    if (p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    fn(ctx, 0, p->n);
    /* A worker may have been descheduled (the cores are shared): yield rather than burn
     * the core it needs. */
    for (unsigned i = 0; atomic_load_explicit(&p->done, memory_order_acquire) < p->n - 1; i++) {
        if (i < 4096)
            FL_CPU_RELAX();
        else
            sched_yield();
    }
}

void fl_pool_destroy(fl_pool *p)
{
    if (!p)
        return;
    if (p->th) {
        atomic_store_explicit(&p->stop, 1, memory_order_release);
        pthread_mutex_lock(&p->mu);
        atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        for (int i = 1; i < p->n; i++)
            pthread_join(p->th[i - 1], NULL);
        free(p->th);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}

void fl_shares_init(fl_share *s, int nt, int n)
{
    for (int t = 0; t < nt; t++) {
        unsigned long long lo = (unsigned long long)n * t / nt, hi = (unsigned long long)n * (t + 1) / nt;
        atomic_store_explicit(&s[t].r, lo | hi << 32, memory_order_relaxed);
    }
}

/* Takes one chunk from share s: the front (own) or the back (stealing). */
static int fl_share_take(fl_share *s, bool front)
{
    unsigned long long r = atomic_load_explicit(&s->r, memory_order_relaxed);
    for (;;) {
        unsigned lo = (unsigned)(r & 0xffffffffu), hi = (unsigned)(r >> 32);
        if (lo >= hi)
            return -1;
        unsigned long long nr = front ? (r + 1) : ((unsigned long long)lo | (unsigned long long)(hi - 1) << 32);
        if (atomic_compare_exchange_weak_explicit(&s->r, &r, nr, memory_order_relaxed,
                                                  memory_order_relaxed))
            return (int)(front ? lo : hi - 1);
    }
}

int fl_shares_next(fl_share *s, int nt, int tid)
{
    int i = fl_share_take(&s[tid], true);
    for (int d = 1; i < 0 && d < nt; d++)
        i = fl_share_take(&s[(tid + d) % nt], false);
    return i;
}
