/* test_constraint.c: the compiled-constraint cache (server/constraint.c) on the built-in
 * tokenizer: one constraint per schema, the least recently used out at the entry bound and at
 * the byte bound (the newest always kept), errors not cached, and threads asking at once,
 * which compile outside the lock: every one gets a constraint, and for one schema the same. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "constraint.h"
#include "tokenizer/tokenizer.h"

static fl_cons *get(fl_cons_cache *c, const char *schema)
{
    fl_cons *k = NULL;
    fl_err e = {0};
    int rc = fl_cons_cache_get(c, FL_FMT_JSON_SCHEMA, schema, &k, &e);
    CHECK(rc == 0 && k, "%s: %d %s", schema, rc, e.msg);
    return k;
}

static int entries(fl_cons_cache *c, int64_t *bytes)
{
    int n;
    int64_t b;
    fl_cons_cache_stats(c, &n, &b);
    if (bytes)
        *bytes = b;
    return n;
}

typedef struct job {
    fl_cons_cache *c;
    const char *schema;
    fl_cons *got;
    int rc;
} job;

static void *run_job(void *p)
{
    job *j = p;
    fl_err e = {0};
    j->rc = fl_cons_cache_get(j->c, FL_FMT_JSON_SCHEMA, j->schema, &j->got, &e);
    return NULL;
}

/* n threads at once, each its schema (schemas[i % n_schemas]) */
static void at_once(fl_cons_cache *c, const char *const *schemas, int n_schemas, job *jobs, int n)
{
    pthread_t th[16];
    for (int i = 0; i < n; i++) {
        jobs[i] = (job){c, schemas[i % n_schemas], NULL, -1};
        CHECK(pthread_create(&th[i], NULL, run_job, &jobs[i]) == 0, "thread %d", i);
    }
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
}

int main(void)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/../engine/models/fogline-helpdesk", check_tests_dir());
    fl_tokenizer *tk = NULL;
    fl_err e = {0};
    CHECK(fl_tokenizer_load(&tk, dir, NULL, &e) == 0, "tokenizer: %s", e.msg);
    if (!tk)
        return check_summary("test_constraint");
    fl_model m = {0};
    m.tok = tk;
    m.cfg.vocab = 3000;
    m.cfg.mask_token_id = 2999;
    /* the same size each: {"const": "a"} .. */
    const char *S[] = {"{\"const\":\"a\"}", "{\"const\":\"b\"}", "{\"const\":\"c\"}", "{\"const\":\"d\"}",
                       "{\"const\":\"e\"}"};

    /* one constraint per schema; at the entry bound the least recently used goes */
    fl_cons_cache *c = fl_cons_cache_new(&m, 4, 0);
    fl_cons *a1 = get(c, S[0]), *a2 = get(c, S[0]);
    int64_t one = 0;
    CHECK(a1 == a2 && entries(c, &one) == 1 && one > 0, "one schema, one constraint (%lld bytes)",
          (long long)one);
    fl_cons *k[4];
    for (int i = 1; i <= 4; i++)
        k[i - 1] = get(c, S[i]); /* the fifth schema: a ("a" used least recently) goes */
    int64_t b = 0;
    CHECK(entries(c, &b) == 4 && b == 4 * one, "4 entries, %lld bytes", (long long)b);
    fl_cons *b2 = get(c, S[1]);
    CHECK(b2 == k[0], "b is still cached");
    fl_cons *a3 = get(c, S[0]); /* (a1 is still held: a new one cannot have its address) */
    CHECK(a3 != a1, "a was evicted: compiled again");
    CHECK(entries(c, NULL) == 4, "still 4");
    /* an error is not cached */
    fl_cons *bad = NULL;
    CHECK(fl_cons_cache_get(c, FL_FMT_JSON_SCHEMA, "{\"type\":\"text\"}", &bad, &e) != 0 && !bad &&
              strstr(e.msg, "unknown type 'text'"),
          "a bad schema: %s", e.msg);
    CHECK(fl_cons_cache_get(c, FL_FMT_JSON_SCHEMA, "{\"type\":", &bad, &e) == FL_EFORMAT && !bad,
          "not JSON: %s", e.msg);
    CHECK(entries(c, NULL) == 4, "errors are not cached");
    fl_cons_unref(a1);
    fl_cons_unref(a2);
    fl_cons_unref(a3);
    fl_cons_unref(b2);
    for (int i = 0; i < 4; i++)
        fl_cons_unref(k[i]);
    fl_cons_cache_free(c);

    /* the byte bound: two constraints' worth keeps two; one byte keeps the newest only */
    c = fl_cons_cache_new(&m, 8, 2 * one);
    fl_cons *x[3];
    for (int i = 0; i < 3; i++)
        x[i] = get(c, S[i]);
    CHECK(entries(c, &b) == 2 && b == 2 * one, "a byte bound of two: %d entries", entries(c, NULL));
    fl_cons *y = get(c, S[2]), *z = get(c, S[0]);
    CHECK(y == x[2] && z != x[0], "the least recently used went (a), c stayed");
    fl_cons_unref(y);
    fl_cons_unref(z);
    for (int i = 0; i < 3; i++)
        fl_cons_unref(x[i]);
    fl_cons_cache_free(c);
    c = fl_cons_cache_new(&m, 8, 1);
    for (int i = 0; i < 3; i++) {
        fl_cons *w = get(c, S[i]);
        CHECK(entries(c, &b) == 1 && b == one, "a bound below one constraint keeps the newest");
        fl_cons_unref(w);
    }
    fl_cons_cache_free(c);

    /* threads at once: one schema, one constraint for all of them */
    c = fl_cons_cache_new(&m, 4, 0);
    job jobs[16];
    at_once(c, S, 1, jobs, 8);
    for (int i = 0; i < 8; i++) {
        CHECK(jobs[i].rc == 0 && jobs[i].got == jobs[0].got, "thread %d: %d", i, jobs[i].rc);
        fl_cons_unref(jobs[i].got);
    }
    CHECK(entries(c, NULL) == 1, "one entry for one schema");
    fl_cons_cache_free(c);
    /* five schemas over 16 threads into 4 slots: every thread gets its schema's constraint */
    c = fl_cons_cache_new(&m, 4, 0);
    at_once(c, S, 5, jobs, 16);
    for (int i = 0; i < 16; i++) {
        CHECK(jobs[i].rc == 0 && jobs[i].got, "thread %d: %d", i, jobs[i].rc);
        if (!jobs[i].got)
            continue;
        /* its own schema: the automaton accepts that value */
        char want[8];
        snprintf(want, sizeof want, "\"%c\"", 'a' + i % 5);
        int32_t s = fl_dfa_walk(jobs[i].got->dfa, 0, want, 3);
        CHECK(s >= 0 && jobs[i].got->dfa->accept[s], "thread %d has %s's constraint", i, want);
        fl_cons_unref(jobs[i].got);
    }
    CHECK(entries(c, &b) == 4 && b == 4 * one, "4 entries, %lld bytes", (long long)b);
    fl_cons_cache_free(c);
    fl_tokenizer_free(tk);
    return check_summary("test_constraint");
}
