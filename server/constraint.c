/* constraint.c: compiled output constraints per model (constraint.h). */
#include "constraint.h"

#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct slot {
    char *key;      /* format digit + schema text */
    fl_cons *cons;  /* the cache's reference */
    int64_t bytes;  /* of cons: its automaton and token tables */
    uint64_t used;  /* last use, for eviction */
} slot;

struct fl_cons_cache {
    const fl_model *m;
    pthread_mutex_t mu; /* guards everything below; never held while compiling */
    fl_tvocab *tv;
    slot *slots;
    int cap;
    int64_t max_bytes; /* 0: no bound */
    int64_t bytes;     /* of the slots' constraints */
    uint64_t clock;
};

fl_cons_cache *fl_cons_cache_new(const fl_model *m, int cap, int64_t max_bytes)
{
    fl_cons_cache *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->m = m;
    c->cap = cap > 0 ? cap : 1;
    c->max_bytes = max_bytes > 0 ? max_bytes : 0;
    c->slots = calloc((size_t)c->cap, sizeof(slot));
    if (!c->slots) {
        free(c);
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

void fl_cons_cache_free(fl_cons_cache *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->cap; i++) {
        free(c->slots[i].key);
        fl_cons_unref(c->slots[i].cons);
    }
    free(c->slots);
    fl_tvocab_free(c->tv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* What a compiled constraint holds: the automaton (next, accept, dist) and per state tdist
   and tnext (the token table is the model's, shared). */
static int64_t cons_bytes(const fl_cons *k)
{
    int64_t n = k->dfa->n;
    return (int64_t)(sizeof *k + sizeof *k->dfa) +
           n * (int64_t)(256 * sizeof(int32_t) + 1 + 3 * sizeof(int32_t));
}

/* Compiles without the cache's lock: the token table is passed in. */
static int compile(const fl_tvocab *tv, int format, const char *schema, fl_cons **out, fl_err *e)
{
    fl_dfa *d = NULL;
    fl_constrain_opts co = {.max_ws = FL_CONSTRAIN_DECODE_WS,
                            .max_digits = FL_CONSTRAIN_DECODE_DIGITS};
    if (format == FL_FMT_TOOL_CALL) {
        co.prefix = "<tool_call>\n";
        co.suffix = "\n</tool_call>";
    }
    int rc;
    if (format == FL_FMT_JSON_OBJECT) {
        rc = fl_dfa_json_object(&co, &d, e);
    } else if (format == FL_FMT_REGEX) {
        rc = fl_dfa_from_regex(schema ? schema : "", &co, &d, e);
    } else {
        json_error_t je;
        json_t *j = json_loads(schema ? schema : "", JSON_DECODE_ANY, &je);
        if (!j)
            return fl_err_set(e, FL_EFORMAT, "the schema is not JSON: %s", je.text);
        rc = fl_dfa_from_schema(j, &co, &d, e);
        json_decref(j);
    }
    if (rc)
        return rc;
    return fl_cons_create(d, tv, 0, out, e);
}

/* The slot of key, or -1 (under the lock). */
static int find(const fl_cons_cache *c, const char *key)
{
    for (int i = 0; i < c->cap; i++)
        if (c->slots[i].key && !strcmp(c->slots[i].key, key))
            return i;
    return -1;
}

/* Empties slot i (under the lock): its constraint goes when its last request lets it go. */
static void evict(fl_cons_cache *c, int i)
{
    slot *x = &c->slots[i];
    free(x->key);
    fl_cons_unref(x->cons);
    c->bytes -= x->bytes;
    *x = (slot){0};
}

/* The least recently used slot other than keep, or -1 when none holds anything. */
static int lru(const fl_cons_cache *c, int keep)
{
    int v = -1;
    for (int i = 0; i < c->cap; i++)
        if (i != keep && c->slots[i].key && (v < 0 || c->slots[i].used < c->slots[v].used))
            v = i;
    return v;
}

int fl_cons_cache_get(fl_cons_cache *c, int format, const char *schema, fl_cons **out, fl_err *e)
{
    *out = NULL;
    if (format != FL_FMT_JSON_OBJECT && format != FL_FMT_JSON_SCHEMA && format != FL_FMT_TOOL_CALL &&
        format != FL_FMT_REGEX)
        return fl_err_set(e, FL_EINVAL, "no constraint for this format");
    size_t sl = format != FL_FMT_JSON_OBJECT && schema ? strlen(schema) : 0;
    char *key = malloc(sl + 2);
    if (!key)
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    key[0] = (char)('0' + format);
    memcpy(key + 1, schema ? schema : "", sl);
    key[sl + 1] = 0;
    pthread_mutex_lock(&c->mu);
    int i = find(c, key);
    if (i >= 0) {
        c->slots[i].used = ++c->clock;
        *out = fl_cons_ref(c->slots[i].cons);
        pthread_mutex_unlock(&c->mu);
        free(key);
        return 0;
    }
    const fl_tvocab *tv = c->tv;
    pthread_mutex_unlock(&c->mu);
    if (!tv) { /* built once; two threads that build it at once keep the first */
        fl_tvocab *mine = NULL;
        int rc = fl_tvocab_build(c->m->tok, c->m->cfg.vocab, c->m->cfg.mask_token_id, &mine, e);
        if (rc) {
            free(key);
            return rc;
        }
        pthread_mutex_lock(&c->mu);
        if (!c->tv) {
            c->tv = mine;
            mine = NULL;
        }
        tv = c->tv;
        pthread_mutex_unlock(&c->mu);
        fl_tvocab_free(mine);
    }
    /* compiled without the lock: another request's lookup (or compilation) goes on */
    fl_cons *k = NULL;
    int rc = compile(tv, format, schema, &k, e);
    if (rc) {
        free(key);
        return rc;
    }
    pthread_mutex_lock(&c->mu);
    if ((i = find(c, key)) >= 0) { /* compiled meanwhile by another thread: keep that one */
        c->slots[i].used = ++c->clock;
        *out = fl_cons_ref(c->slots[i].cons);
        pthread_mutex_unlock(&c->mu);
        fl_cons_unref(k);
        free(key);
        return 0;
    }
    for (i = 0; i < c->cap && c->slots[i].key; i++)
        ;
    if (i == c->cap) { /* full: the least recently used goes */
        i = lru(c, -1);
        evict(c, i);
    }
    slot *x = &c->slots[i];
    x->key = key;
    x->cons = k;
    x->bytes = cons_bytes(k);
    x->used = ++c->clock;
    c->bytes += x->bytes;
    /* over the byte budget: the least recently used others go, the newest stays */
    for (int v; c->max_bytes && c->bytes > c->max_bytes && (v = lru(c, i)) >= 0;)
        evict(c, v);
    *out = fl_cons_ref(k);
    pthread_mutex_unlock(&c->mu);
    return 0;
}

void fl_cons_cache_stats(fl_cons_cache *c, int *entries, int64_t *bytes)
{
    pthread_mutex_lock(&c->mu);
    int n = 0;
    for (int i = 0; i < c->cap; i++)
        n += c->slots[i].key != NULL;
    *entries = n;
    *bytes = c->bytes;
    pthread_mutex_unlock(&c->mu);
}
