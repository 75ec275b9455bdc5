/* constraint.c: compiled output constraints per model (constraint.h). */
#include "constraint.h"

#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct slot {
    char *key;      /* format digit + schema text */
    fl_cons *cons;  /* the cache's reference */
    uint64_t used;  /* last use, for eviction */
} slot;

struct fl_cons_cache {
    const fl_model *m;
    pthread_mutex_t mu;
    fl_tvocab *tv;
    slot *slots;
    int cap;
    uint64_t clock;
};

fl_cons_cache *fl_cons_cache_new(const fl_model *m, int cap)
{
    fl_cons_cache *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->m = m;
    c->cap = cap > 0 ? cap : 1;
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

static int compile(fl_cons_cache *c, int format, const char *schema, fl_cons **out, fl_err *e)
{
    if (!c->tv) {
        int rc = fl_tvocab_build(c->m->tok, c->m->cfg.vocab, c->m->cfg.mask_token_id, &c->tv, e);
        if (rc)
            return rc;
    }
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
    return fl_cons_create(d, c->tv, 0, out, e);
}

int fl_cons_cache_get(fl_cons_cache *c, int format, const char *schema, fl_cons **out, fl_err *e)
{
    *out = NULL;
    if (format != FL_FMT_JSON_OBJECT && format != FL_FMT_JSON_SCHEMA && format != FL_FMT_TOOL_CALL)
        return fl_err_set(e, FL_EINVAL, "no constraint for this format");
    size_t sl = format != FL_FMT_JSON_OBJECT && schema ? strlen(schema) : 0;
    char *key = malloc(sl + 2);
    if (!key)
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    key[0] = (char)('0' + format);
    memcpy(key + 1, schema ? schema : "", sl);
    key[sl + 1] = 0;
    pthread_mutex_lock(&c->mu);
    c->clock++;
    int victim = 0;
    for (int i = 0; i < c->cap; i++) {
        slot *x = &c->slots[i];
        if (x->key && !strcmp(x->key, key)) {
            x->used = c->clock;
            *out = fl_cons_ref(x->cons);
            pthread_mutex_unlock(&c->mu);
            free(key);
            return 0;
        }
        if (!x->key || (c->slots[victim].key && x->used < c->slots[victim].used))
            victim = i;
    }
    /* compiled under the lock: the same schema asked twice at once is compiled once */
    fl_cons *k = NULL;
    int rc = compile(c, format, schema, &k, e);
    if (!rc) {
        slot *x = &c->slots[victim];
        free(x->key);
        fl_cons_unref(x->cons);
        x->key = key;
        x->cons = k;
        x->used = c->clock;
        *out = fl_cons_ref(k);
        key = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    free(key);
    return rc;
}
