/* engine.c: the engine thread. It owns a scheduler; other threads talk to it only through
 * a bounded command queue (submit, cancel) guarded by one mutex. Events go out through each
 * request's sink, called on this thread. */
#include "engine.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct cmd {
    int kind; /* 0 submit, 1 cancel */
    uint64_t id;
    fl_request req; /* owned copies of prompt and stops */
    fl_sink sink;
    void *ctx;
    struct cmd *next;
} cmd;

struct fl_engine {
    fl_sched *s;
    const fl_model *m;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    cmd *head, *tail;
    int32_t n_pending, cap;
    uint64_t next_id;
    bool stopping;
    fl_sched_stats stats; /* snapshot, under mu */
    /* test control (fl_engine_hold): while held, only `budget` more forwards may start */
    bool held;
    int32_t budget;
    bool stepping;            /* a forward was allowed to start and has not ended */
    pthread_cond_t cv_parked; /* stepping went false, or the budget was dropped */
};

static bool may_step(const fl_engine *en)
{
    return !en->held || en->budget > 0;
}

static void cmd_free(cmd *c)
{
    if (!c)
        return;
    free((void *)c->req.prompt);
    free(c->req.prefix); /* NULL once the scheduler took it */
    for (int i = 0; i < c->req.n_stop; i++)
        free((void *)c->req.stop[i]);
    free((void *)c->req.stop);
    free(c);
}

static void *engine_main(void *arg)
{
    fl_engine *en = arg;
    for (;;) {
        pthread_mutex_lock(&en->mu);
        while (!en->head && !en->stopping && (!may_step(en) || fl_sched_idle(en->s))) {
            if (en->budget > 0) { /* a step asked for with nothing to run: it is done */
                en->budget = 0;
                pthread_cond_broadcast(&en->cv_parked);
            }
            /* idle (or held): give back the pages the persister has finished with, so the page counts
               read as "all free" as soon as the last write lands, not at the next step */
            pthread_mutex_unlock(&en->mu);
            int pending = fl_sched_reap(en->s);
            pthread_mutex_lock(&en->mu);
            fl_sched_get_stats(en->s, &en->stats);
            /* what arrived while mu was released (a command, a stop, a step or a release from
               fl_engine_step/hold, whose signal had no waiter) is seen before waiting again */
            if (en->head || en->stopping || en->budget > 0 ||
                (may_step(en) && !fl_sched_idle(en->s)))
                continue;
            if (pending) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += 20 * 1000000L;
                if (ts.tv_nsec >= 1000000000L) {
                    ts.tv_sec++;
                    ts.tv_nsec -= 1000000000L;
                }
                pthread_cond_timedwait(&en->cv, &en->mu, &ts);
            } else {
                pthread_cond_wait(&en->cv, &en->mu);
            }
        }
        cmd *list = en->head;
        en->head = en->tail = NULL;
        en->n_pending = 0;
        bool stop = en->stopping;
        /* decided under mu, so that fl_engine_hold can wait for this forward to end */
        bool step = !stop && may_step(en);
        if (step && en->held)
            en->budget--;
        en->stepping = step;
        pthread_mutex_unlock(&en->mu);
        while (list) {
            cmd *c = list;
            list = c->next;
            if (c->kind == 0) {
                fl_err e = {0};
                if (!stop && !fl_sched_add(en->s, &c->req, c->sink, c->ctx, c->id, &e)) {
                    c->req.prefix = NULL; /* the sequence owns it now */
                } else {
                    /* validated at submit, so only resource errors land here */
                    fl_event ev = {0};
                    ev.type = FL_EV_DONE;
                    ev.id = c->id;
                    ev.finish = stop ? FL_FINISH_CANCELLED : FL_FINISH_ERROR;
                    ev.error = stop ? NULL : e.msg;
                    fl_seq_stats st = {0};
                    ev.stats = &st;
                    ev.text = "";
                    if (c->sink)
                        c->sink(&ev, c->ctx);
                }
            } else {
                fl_sched_cancel(en->s, c->id);
            }
            cmd_free(c);
        }
        if (stop)
            break;
        if (!step)
            continue;
        fl_err e = {0};
        fl_sched_step(en->s, &e); /* failures are reported to the sequences involved */
        pthread_mutex_lock(&en->mu);
        fl_sched_get_stats(en->s, &en->stats);
        en->stepping = false;
        if (en->held)
            pthread_cond_broadcast(&en->cv_parked);
        pthread_mutex_unlock(&en->mu);
    }
    return NULL;
}

int fl_engine_start(fl_engine **out, const fl_model *m, fl_backend *b, const fl_engine_opts *o,
                    fl_err *e)
{
    *out = NULL;
    fl_engine *en = calloc(1, sizeof *en);
    if (!en)
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    int rc = fl_sched_create(&en->s, m, b, &o->sched, e);
    if (rc) {
        free(en);
        return rc;
    }
    en->m = m;
    en->cap = o->queue_cap > 0 ? o->queue_cap : 256;
    en->next_id = 1;
    pthread_mutex_init(&en->mu, NULL);
    pthread_cond_init(&en->cv, NULL);
    pthread_cond_init(&en->cv_parked, NULL);
    fl_sched_get_stats(en->s, &en->stats); /* a snapshot before the thread's first loop: the
                                              pool's size is right from the start */
    if (pthread_create(&en->th, NULL, engine_main, en) != 0) {
        fl_sched_destroy(en->s);
        pthread_mutex_destroy(&en->mu);
        pthread_cond_destroy(&en->cv);
        pthread_cond_destroy(&en->cv_parked);
        free(en);
        return fl_err_set(e, FL_ENOMEM, "cannot start the engine thread");
    }
    *out = en;
    return 0;
}

static void push(fl_engine *en, cmd *c)
{
    if (en->tail)
        en->tail->next = c;
    else
        en->head = c;
    en->tail = c;
    if (c->kind == 0)
        en->n_pending++;
    pthread_cond_signal(&en->cv);
}

int fl_engine_submit(fl_engine *en, const fl_request *r, fl_sink sink, void *ctx, uint64_t *id,
                     fl_err *e)
{
    const fl_config *c = &en->m->cfg;
    /* validate here so the caller gets the error synchronously */
    if (r->n_prompt <= 0)
        return fl_err_set(e, FL_EINVAL, "the prompt is empty");
    if (r->max_tokens <= 0)
        return fl_err_set(e, FL_EINVAL, "max_tokens must be positive, got %d", r->max_tokens);
    if (c->max_pos > 0 && r->n_prompt + c->block_size > c->max_pos)
        return fl_err_set(e, FL_ERANGE, "the prompt has %d tokens; this model takes at most %d",
                          r->n_prompt, c->max_pos - c->block_size);
    int rc = fl_decode_opts_check(&r->dec, e);
    if (rc)
        return rc;
    cmd *k = calloc(1, sizeof *k);
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)r->n_prompt);
    const char **stops = r->n_stop ? calloc((size_t)r->n_stop, sizeof(char *)) : NULL;
    if (!k || !prompt || (r->n_stop && !stops)) {
        free(k);
        free(prompt);
        free(stops);
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    }
    memcpy(prompt, r->prompt, sizeof(int32_t) * (size_t)r->n_prompt);
    k->req = *r;
    k->req.prompt = prompt;
    k->req.stop = stops;
    k->req.n_stop = 0;
    for (int i = 0; i < r->n_stop; i++) {
        if (!(stops[i] = strdup(r->stop[i] ? r->stop[i] : ""))) {
            cmd_free(k);
            return fl_err_set(e, FL_ENOMEM, "out of memory");
        }
        k->req.n_stop = i + 1;
    }
    k->sink = sink;
    k->ctx = ctx;
    pthread_mutex_lock(&en->mu);
    if (en->n_pending >= en->cap || en->stopping) {
        pthread_mutex_unlock(&en->mu);
        cmd_free(k);
        return fl_err_set(e, FL_EBUSY, "the engine is busy: %d requests are waiting", en->cap);
    }
    k->id = en->next_id++;
    if (id)
        *id = k->id;
    push(en, k);
    pthread_mutex_unlock(&en->mu);
    return 0;
}

int fl_engine_cancel(fl_engine *en, uint64_t id)
{
    cmd *k = calloc(1, sizeof *k);
    if (!k)
        return FL_ENOMEM;
    k->kind = 1;
    k->id = id;
    pthread_mutex_lock(&en->mu);
    if (en->stopping) { /* the thread may be gone: nobody would free it */
        pthread_mutex_unlock(&en->mu);
        free(k);
        return FL_ESTATE;
    }
    push(en, k);
    pthread_mutex_unlock(&en->mu);
    return 0;
}

void fl_engine_get_stats(fl_engine *en, fl_sched_stats *st)
{
    pthread_mutex_lock(&en->mu);
    *st = en->stats;
    pthread_mutex_unlock(&en->mu);
}

void fl_engine_hold(fl_engine *en, bool hold)
{
    pthread_mutex_lock(&en->mu);
    en->held = hold;
    en->budget = 0;
    pthread_cond_signal(&en->cv);
    while (en->stepping)
        pthread_cond_wait(&en->cv_parked, &en->mu);
    pthread_mutex_unlock(&en->mu);
}

void fl_engine_step(fl_engine *en)
{
    pthread_mutex_lock(&en->mu);
    if (en->held && !en->stopping) {
        en->budget++;
        pthread_cond_signal(&en->cv);
        while (en->budget > 0 || en->stepping)
            pthread_cond_wait(&en->cv_parked, &en->mu);
    }
    pthread_mutex_unlock(&en->mu);
}

void fl_engine_stop(fl_engine *en)
{
    if (!en)
        return;
    pthread_mutex_lock(&en->mu);
    en->stopping = true;
    pthread_cond_signal(&en->cv);
    pthread_mutex_unlock(&en->mu);
    pthread_join(en->th, NULL);
    while (en->head) { /* commands that raced with the stop */
        cmd *c = en->head;
        en->head = c->next;
        cmd_free(c);
    }
    fl_sched_destroy(en->s); /* cancels what still runs: done events go out */
    pthread_mutex_destroy(&en->mu);
    pthread_cond_destroy(&en->cv);
    pthread_cond_destroy(&en->cv_parked);
    free(en);
}
