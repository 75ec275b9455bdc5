/* serve_sink.c: engine events into the loop (serve_sink.h). The engine calls srv_sink on its
 * own thread: it copies the event (the engine's buffers are reused after it returns), appends
 * it to a locked queue and wakes the loop with uv_async_send. The loop drains the queue in
 * order and hands each event to the request's lifecycle (serve_request.c). */
#include <stdlib.h>
#include <string.h>

#include "serve.h"
#include "serve_group.h"
#include "serve_request.h"
#include "serve_sink.h"

static void ev_push(srv *s, srv_ev *x)
{
    uv_mutex_lock(&s->ev_mu);
    if (s->ev_tail)
        s->ev_tail->next = x;
    else
        s->ev_head = x;
    s->ev_tail = x;
    uv_mutex_unlock(&s->ev_mu);
    uv_async_send(&s->wake);
}

/* The done that stands in for one that cannot be delivered as it came: an error, from the
   request's own preallocated record, so it needs no memory. */
static srv_ev *ev_spare_done(srv_req *r, const fl_event *ev)
{
    srv_ev *x = &r->ev_spare;
    memset(x, 0, sizeof *x);
    x->spare = true;
    x->req = r;
    x->type = FL_EV_DONE;
    x->block = x->step = -1;
    x->text = "";
    x->finish = FL_FINISH_ERROR;
    x->stop_string = x->stop_token = -1;
    x->code = SRV_E_INTERNAL;
    x->error = r->ev_lost ? "out of memory: part of the reply could not be delivered"
                          : "out of memory: the end of the reply could not be delivered";
    if (ev->stats)
        x->stats = *ev->stats;
    return x;
}

/* Copies the event for the loop. Out of memory, a draft is dropped (a later draft or the
   block's commit supersedes it); a lost commit would leave a hole in the reply, so nothing
   more of the request is delivered, the engine is asked to stop it, and its done becomes an
   error; a done that cannot be copied becomes one too. So every request gets its end. */
void srv_sink(const fl_event *ev, void *ctx)
{
    srv_req *r = ctx;
    srv *s = r->s;
    if (r->ev_lost && ev->type != FL_EV_DONE)
        return;
    size_t ntok = ev->type == FL_EV_DRAFT ? (size_t)ev->n : 0;
    size_t ntext = ev->type == FL_EV_DRAFT ? 0 : ev->text_len;
    size_t nerr = ev->error ? strlen(ev->error) + 1 : 0;
    /* ids: a done's (the session stores them), and with log probabilities a commit's too */
    bool lp = ev->type != FL_EV_DRAFT && ev->lps && ev->n_lps > 0;
    size_t nids = (ev->type == FL_EV_DONE || lp) && ev->ids && ev->n_ids > 0 ? (size_t)ev->n_ids
                                                                            : 0;
    size_t nlp = lp ? (size_t)ev->n_lps : 0, ntop = lp ? nlp * (size_t)ev->n_top : 0;
    size_t sz = sizeof(srv_ev) + (ntok + nids + ntop) * sizeof(int32_t) +
                (nlp + ntop) * sizeof(float) + ntext + 1 + nerr;
    srv_fault_site site = ev->type == FL_EV_DRAFT    ? SRV_FAULT_DRAFT_EVENT
                          : ev->type == FL_EV_COMMIT ? SRV_FAULT_COMMIT_EVENT
                                                     : SRV_FAULT_DONE_EVENT;
    srv_ev *x = srv_fault(&s->faults, site) ? NULL : malloc(sz);
    if (ev->type == FL_EV_DONE && (!x || r->ev_lost)) {
        free(x);
        ev_push(s, ev_spare_done(r, ev));
        return;
    }
    if (!x) {
        if (ev->type == FL_EV_COMMIT) {
            r->ev_lost = true;
            fl_engine_cancel(r->en, ev->id); /* best effort: the done comes either way */
        }
        return;
    }
    memset(x, 0, sizeof *x);
    x->req = r;
    x->type = ev->type;
    x->block = ev->block;
    x->step = ev->step;
    x->t_ms = srv_now_ms(s);
    x->n = (int32_t)ntok;
    char *p = (char *)(x + 1);
    x->tokens = (int32_t *)p;
    if (ntok)
        memcpy(x->tokens, ev->tokens, ntok * sizeof(int32_t));
    p += ntok * sizeof(int32_t);
    x->ids = (int32_t *)p; /* int32 items first: alignment holds */
    if (nids)
        memcpy(x->ids, ev->ids, nids * sizeof(int32_t));
    p += nids * sizeof(int32_t);
    x->top_ids = (int32_t *)p;
    if (ntop)
        memcpy(x->top_ids, ev->top_ids, ntop * sizeof(int32_t));
    p += ntop * sizeof(int32_t);
    x->lps = (float *)p;
    if (nlp)
        memcpy(x->lps, ev->lps, nlp * sizeof(float));
    p += nlp * sizeof(float);
    x->top_lps = (float *)p;
    if (ntop)
        memcpy(x->top_lps, ev->top_lps, ntop * sizeof(float));
    p += ntop * sizeof(float);
    x->n_lps = (int32_t)nlp;
    x->n_top = lp ? ev->n_top : 0;
    x->text = p;
    if (ntext)
        memcpy(x->text, ev->text, ntext);
    x->text[ntext] = 0;
    x->text_len = ntext;
    p += ntext + 1;
    if (nerr) {
        x->error = p;
        memcpy(x->error, ev->error, nerr);
    }
    x->finish = ev->finish;
    x->stop_string = ev->stop_string;
    x->stop_token = ev->stop_token;
    if (ev->stats)
        x->stats = *ev->stats;
    x->n_ids = ev->n_ids;
    ev_push(s, x);
}

void srv_drain_events(srv *s)
{
    for (;;) {
        uv_mutex_lock(&s->ev_mu);
        srv_ev *list = s->ev_head;
        s->ev_head = s->ev_tail = NULL;
        uv_mutex_unlock(&s->ev_mu);
        if (!list)
            return;
        while (list) {
            srv_ev *ev = list;
            list = ev->next;
            bool spare = ev->spare; /* handling its done frees the request, and the spare */
            srv_req_deliver(s, ev);
            if (!spare)
                free(ev);
        }
        if (s->rebalance)
            srv_groups_rebalance(s);
    }
}
