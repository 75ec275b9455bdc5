/* test_threadpool.c: the CPU backend's thread pool (engine/cpu/threadpool.h) and the
 * contiguous shares with stealing that its matmul jobs take their chunks from: the shares
 * cut [0, n) as documented, a thread takes its own share front to back and then the others'
 * from the back, and on a real pool every chunk is taken exactly once, however the threads
 * interleave, including when a thread takes nothing until every chunk is gone. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "fl.h"
#include "cpu/threadpool.h"

#define MAXN 300

/* One thread alone: its own share in order, then the others' from their backs. */
static void test_order(void)
{
    fl_share s[6];
    for (int nt = 1; nt <= 6; nt++)
        for (int n = 0; n <= 40; n += (n < 8 ? 1 : 11))
            for (int tid = 0; tid < nt; tid++) {
                fl_shares_init(s, nt, n);
                int want[64], w = 0;
                for (int i = n * tid / nt; i < n * (tid + 1) / nt; i++)
                    want[w++] = i;
                for (int d = 1; d < nt; d++) {
                    int o = (tid + d) % nt;
                    for (int i = n * (o + 1) / nt - 1; i >= n * o / nt; i--)
                        want[w++] = i;
                }
                CHECK(w == n, "nt %d n %d: the shares cover %d chunks", nt, n, w);
                for (int i = 0; i < w; i++) {
                    int got = fl_shares_next(s, nt, tid);
                    CHECK(got == want[i], "nt %d n %d tid %d: take %d is %d, not %d", nt, n, tid,
                          i, got, want[i]);
                }
                CHECK(fl_shares_next(s, nt, tid) == -1 && fl_shares_next(s, nt, tid) == -1,
                      "nt %d n %d tid %d: more chunks than there are", nt, n, tid);
            }
}

typedef struct job {
    fl_share *s;
    int n;
    atomic_int taken[MAXN];
    atomic_int by[8]; /* chunks each thread took */
    atomic_int gone;  /* thread 0 found no chunk left */
    int hold;         /* thread 1 takes nothing before thread 0 is out of chunks */
} job;

static void job_fn(void *ctx, int tid, int nt)
{
    job *j = ctx;
    if (j->hold && tid == 1)
        while (!atomic_load(&j->gone))
            ;
    for (int i; (i = fl_shares_next(j->s, nt, tid)) >= 0;) {
        if (i < j->n)
            atomic_fetch_add(&j->taken[i], 1);
        else
            atomic_fetch_add(&j->taken[0], 1000); /* out of range: fails below */
        atomic_fetch_add(&j->by[tid], 1);
    }
    if (tid == 0)
        atomic_store(&j->gone, 1);
}

/* A real pool: every chunk exactly once, over many jobs and sizes; with thread 1 held until
 * thread 0 is done, thread 0 has taken thread 1's whole share (the stealing covers a
 * descheduled thread) and thread 1 nothing. */
static void test_pool(void)
{
    for (int nt = 1; nt <= 4; nt++) {
        fl_pool *p;
        fl_err e = {0};
        CHECK(fl_pool_create(&p, nt, &e) == 0, "pool of %d: %s", nt, e.msg);
        fl_share *s = aligned_alloc(64, sizeof(fl_share) * (size_t)nt);
        job *j = malloc(sizeof *j);
        for (int rep = 0; rep < 200; rep++) {
            int n = (rep * 37) % MAXN;
            j->s = s;
            j->n = n;
            j->hold = nt > 1 && rep % 10 == 0;
            atomic_store(&j->gone, 0);
            for (int i = 0; i < MAXN; i++)
                atomic_store(&j->taken[i], 0);
            for (int t = 0; t < 8; t++)
                atomic_store(&j->by[t], 0);
            fl_shares_init(s, nt, n);
            fl_pool_run(p, job_fn, j);
            int bad = 0;
            for (int i = 0; i < n; i++)
                bad += atomic_load(&j->taken[i]) != 1;
            CHECK(bad == 0, "pool of %d, %d chunks: %d chunks not taken exactly once", nt, n, bad);
            if (j->hold) {
                int b0 = atomic_load(&j->by[0]), b1 = atomic_load(&j->by[1]);
                CHECK(b1 == 0 && (nt > 2 || b0 == n), "pool of %d, %d chunks, thread 1 held: "
                      "thread 0 took %d, thread 1 %d", nt, n, b0, b1);
            }
        }
        free(j);
        free(s);
        fl_pool_destroy(p);
    }
}

int main(void)
{
    test_order();
    test_pool();
    return check_summary("test_threadpool");
}
