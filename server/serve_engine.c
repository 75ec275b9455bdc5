/* serve_engine.c: the bridge between the loop thread and the engine thread.
 *
 * A chat becomes a srv_req: its template is rendered and tokenized on the uv work pool, then
 * it is submitted to fl_engine. The engine calls sink() on its own thread: sink copies the
 * event (the engine's buffers are reused after it returns), appends it to a locked queue and
 * wakes the loop with uv_async_send. The loop drains the queue in order and hands each event
 * to the request's owner (a WebSocket connection or an HTTP exchange), or drops it when the
 * owner is gone. The `done` event is the last one for a request: it is freed then.
 *
 * The backend is wrapped to time each forward (the step-latency histogram) and the tier to
 * time each put; both observe into atomic histograms, so no lock is taken on those threads. */
#include <hiredis/hiredis.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend_select.h"
#include "outline.h"
#include "redis.h"
#include "serve.h"

double srv_now_ms(srv *s)
{
    (void)s;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- the timing wrappers ---- */

typedef struct timed_backend {
    fl_backend base;
    fl_backend *inner;
    srv_ahist *hist;
} timed_backend;

static int tb_forward(fl_backend *b, const fl_batch *bt, fl_tok_out *out, float *logits, fl_err *e)
{
    timed_backend *t = b->impl;
    struct timespec a, z;
    clock_gettime(CLOCK_MONOTONIC, &a);
    int rc = t->inner->ops->forward(t->inner, bt, out, logits, e);
    clock_gettime(CLOCK_MONOTONIC, &z);
    srv_ahist_observe(t->hist, (double)(z.tv_sec - a.tv_sec) + (double)(z.tv_nsec - a.tv_nsec) / 1e9);
    return rc;
}

static int tb_page_read(fl_backend *b, int32_t page, void *dst, fl_err *e)
{
    timed_backend *t = b->impl;
    return t->inner->ops->page_read(t->inner, page, dst, e);
}

static int tb_page_write(fl_backend *b, int32_t page, const void *src, fl_err *e)
{
    timed_backend *t = b->impl;
    return t->inner->ops->page_write(t->inner, page, src, e);
}

static void tb_destroy(fl_backend *b)
{
    timed_backend *t = b->impl;
    fl_backend_destroy(t->inner);
    free(t);
}

static const fl_backend_ops timed_ops = {"timed", tb_forward, tb_page_read, tb_page_write,
                                         tb_destroy};

static fl_backend *timed_backend_wrap(fl_backend *inner, srv_ahist *hist)
{
    timed_backend *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->base = *inner;
    t->base.ops = &timed_ops;
    t->base.impl = t;
    t->inner = inner;
    t->hist = hist;
    return &t->base;
}

typedef struct timed_tier { /* the ctx of a wrapper tier (fl_tier_destroy frees the tier) */
    fl_kv_tier *inner;
    srv_ahist *hist;
} timed_tier;

static int tt_put(void *ctx, fl_page_key key, const void *blob, size_t len, fl_err *e)
{
    timed_tier *t = ctx;
    struct timespec a, z;
    clock_gettime(CLOCK_MONOTONIC, &a);
    int rc = t->inner->put(t->inner->ctx, key, blob, len, e);
    clock_gettime(CLOCK_MONOTONIC, &z);
    srv_ahist_observe(t->hist, (double)(z.tv_sec - a.tv_sec) + (double)(z.tv_nsec - a.tv_nsec) / 1e9);
    return rc;
}

static int tt_get(void *ctx, fl_page_key key, void *blob, size_t len, fl_err *e)
{
    timed_tier *t = ctx;
    return t->inner->get(t->inner->ctx, key, blob, len, e);
}

static void tt_destroy(void *ctx)
{
    timed_tier *t = ctx;
    fl_tier_destroy(t->inner);
    free(t);
}

/* ---- start and stop ---- */

int srv_engine_start(srv *s, fl_err *e)
{
    srv_config *c = s->cfg;
    fl_load_opts lo = {0};
    lo.chat_template = c->chat_template;
    int rc = fl_model_load(&s->model, c->model_dir, &lo, e);
    if (rc)
        return rc;
    const fl_config *mc = &s->model->cfg;
    if (!s->model->tok)
        return fl_err_set(e, FL_EINVAL, "%s has no tokenizer; serve needs one", c->model_dir);
    /* the request defaults: the model's (family, then its directory's), flags on top */
    char de[300];
    if (fl_gen_opts_resolve(&c->gen, mc, s->dec_src, de, sizeof de))
        return fl_err_set(e, FL_EINVAL, "decoding defaults: %s", de);
    int32_t B = mc->block_size;
    int32_t max_pos = mc->max_pos > 0 ? mc->max_pos : 1 << 20;
    if (c->max_prompt_tokens <= 0 || c->max_prompt_tokens > max_pos - 2 * B)
        c->max_prompt_tokens = max_pos - 2 * B;
    if (c->max_batch_tokens < (c->gen.dec.max_blocks + 1) * B + B) /* room for one request */
        c->max_batch_tokens = (c->gen.dec.max_blocks + 2) * B;
    /* a model id for /v1/models: the directory's last component */
    const char *base = strrchr(c->model_dir, '/');
    base = base && base[1] ? base + 1 : c->model_dir;
    snprintf(s->model_id, sizeof s->model_id, "%s", base);
    size_t n = strlen(s->model_id);
    while (n > 1 && s->model_id[n - 1] == '/')
        s->model_id[--n] = 0;
    /* pages: at least one full-size request at the deepest pipeline, and one spare; by
       default as many as 128 MiB holds (requests beyond the pool wait in the engine's FIFO,
       they are not refused) */
    fl_decode_opts deepest = {.pipeline = true, .max_blocks = FL_MAX_RUN_BLOCKS};
    int32_t per_req = fl_pages_needed(mc, c->max_prompt_tokens, c->max_tokens_limit, &deepest) + 1;
    size_t page_bytes = fl_kv_page_floats(mc) * sizeof(float);
    int64_t budget = (int64_t)((128u << 20) / (page_bytes ? page_bytes : 1));
    int64_t want = (int64_t)per_req * c->max_seqs;
    if (want > budget)
        want = budget;
    if (want < per_req)
        want = per_req;
    s->n_pages = c->kv_pages > 0 ? c->kv_pages : (int32_t)want;
    if (s->n_pages < per_req && c->kv_pages > 0)
        return fl_err_set(e, FL_ERANGE,
                          "--kv-pages %d cannot hold one request of --max-prompt-tokens %d and "
                          "--max-tokens-limit %d (%d pages)", c->kv_pages, c->max_prompt_tokens,
                          c->max_tokens_limit, per_req);
    /* on a GPU the KV pool takes the free device memory unless --kv-pages says otherwise */
    fl_backend_opts bo = {.n_pages = s->n_pages, .n_threads = c->threads,
                          .max_tokens = c->max_batch_tokens,
                          .gpu_n_pages = c->kv_pages > 0 ? c->kv_pages : -1};
    fl_backend *inner = NULL;
    char chosen[700];
    rc = fl_backend_open(&inner, s->model, &bo, c->device, chosen, sizeof chosen, e);
    if (rc)
        return rc;
    s->n_pages = inner->n_pages;
    char qc[800];
    SRV_INFO(&s->log, "event=backend device=%s pages=%d chosen=%s", c->device, inner->n_pages,
             srv_log_q(qc, sizeof qc, chosen));
    s->backend = timed_backend_wrap(inner, &s->m.step);
    if (!s->backend) {
        fl_backend_destroy(inner);
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    }
    s->model_fp = fl_model_fingerprint(s->model);
    fl_kv_tier *inner_tier = NULL;
    if (c->redis_url) {
        /* Redis is the tier when configured (the host tier is for a single process) */
        srv_redis_opts ro = {0};
        char ue[300];
        if (srv_redis_url_parse(c->redis_url, &ro.url, ue, sizeof ue))
            return fl_err_set(e, FL_EINVAL, "--redis: %s", ue);
        ro.connect_timeout_ms = c->redis_connect_timeout_ms;
        ro.timeout_ms = c->redis_timeout_ms;
        ro.kv_ttl_s = c->redis_kv_ttl;
        ro.kv_cap_bytes = (int64_t)c->redis_kv_cap_mb << 20;
        ro.write_queue_bytes = 64u << 20;
        if (srv_redis_start(&s->redis, &s->loop, &ro, &s->log))
            return fl_err_set(e, FL_ENOMEM, "out of memory");
        inner_tier = srv_redis_tier(s->redis, fl_blob_size(mc));
        if (!inner_tier)
            return fl_err_set(e, FL_ENOMEM, "out of memory");
    } else if (c->kv_host_mb > 0) {
        rc = fl_tier_host_create(&inner_tier, (size_t)c->kv_host_mb << 20, e);
        if (rc)
            return rc;
    }
    if (inner_tier) {
        timed_tier *t = calloc(1, sizeof *t);
        fl_kv_tier *w = calloc(1, sizeof *w);
        if (!t || !w) {
            free(t);
            free(w);
            fl_tier_destroy(inner_tier);
            return fl_err_set(e, FL_ENOMEM, "out of memory");
        }
        *w = *inner_tier;
        w->ctx = t;
        w->put = tt_put;
        w->get = tt_get;
        w->destroy = tt_destroy;
        t->inner = inner_tier;
        t->hist = &s->m.persist_put;
        s->tier = w;
    }
    fl_engine_opts eo = {0};
    eo.sched.max_batch_tokens = c->max_batch_tokens;
    eo.sched.max_seqs = c->max_seqs;
    eo.sched.async_persist = true;
    eo.sched.tier = s->tier;
    eo.sched.model_id = s->model_fp; /* chains page keys: pages of other weights never match */
    /* the server bounds what waits itself (max_queued); the engine's command queue must
       never be the one that says busy first */
    eo.queue_cap = c->max_queued + c->max_seqs + 16;
    return fl_engine_start(&s->engine, s->model, s->backend, &eo, e);
}

/* ---- the sink (engine thread) ---- */

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
static void sink(const fl_event *ev, void *ctx)
{
    srv_req *r = ctx;
    srv *s = r->s;
    if (r->ev_lost && ev->type != FL_EV_DONE)
        return;
    size_t ntok = ev->type == FL_EV_DRAFT ? (size_t)ev->n : 0;
    size_t ntext = ev->type == FL_EV_DRAFT ? 0 : ev->text_len;
    size_t nerr = ev->error ? strlen(ev->error) + 1 : 0;
    size_t nids = ev->type == FL_EV_DONE && ev->ids && ev->n_ids > 0 ? (size_t)ev->n_ids : 0;
    size_t sz = sizeof(srv_ev) + (ntok + nids) * sizeof(int32_t) + ntok + ntext + 1 + nerr;
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
    x->fresh = (uint8_t *)p;
    if (ntok)
        memcpy(x->fresh, ev->fresh, ntok);
    p += ntok;
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
    if (ev->stats)
        x->stats = *ev->stats;
    x->n_ids = ev->n_ids;
    ev_push(s, x);
}

/* ---- requests ---- */

static void req_unlink(srv_req *r)
{
    srv *s = r->s;
    if (r->s_prev)
        r->s_prev->s_next = r->s_next;
    else
        s->reqs = r->s_next;
    if (r->s_next)
        r->s_next->s_prev = r->s_prev;
    s->n_reqs--;
    if (!r->parent)
        s->rebalance = true; /* one client request fewer: groups' shares grow */
}

static void req_free(srv_req *r)
{
    free(r->group_text);
    /* a queued draft must not point at a freed request */
    for (int i = 0; i < SRV_DRAFT_SLOTS; i++)
        if (r->draft_slot[i])
            r->draft_slot[i]->req = NULL;
    srv_chat_free(&r->chat);
    free(r->ids);
    free(r);
}

/* The end of every request: off the server's list, its owner's `ended`, freed. */
static void req_end(srv_req *r, const srv_req_end *end)
{
    req_unlink(r);
    if (r->owner && r->ops->ended)
        r->ops->ended(r->owner, r, end);
    req_free(r);
}

static bool req_orphaned(const srv_req *r)
{
    return !r->owner || (r->ops->orphaned && r->ops->orphaned(r->owner, r));
}

/* ---- fan-out groups ---- */

/* The fields every request starts with; takes *chat (zeroed). */
static void req_init(srv_req *r, srv *s, const srv_owner_ops *ops, void *owner, srv_chat *chat)
{
    r->s = s;
    r->ops = ops;
    r->owner = owner;
    r->serial = ++s->next_serial;
    r->chat = *chat;
    memset(chat, 0, sizeof *chat);
    r->segment = -1;
    r->t_start = srv_now_ms(s);
    r->work.data = r;
}

static int req_queue_tokenize(srv_req *r);
static void req_reject(srv_req *r, const char *code, const char *msg);
static const srv_owner_ops group_branch_ops, group_outline_ops;

static void group_link(srv_req *g)
{
    srv *s = g->s;
    g->g_prev = NULL;
    g->g_next = s->groups;
    if (s->groups)
        s->groups->g_prev = g;
    s->groups = g;
    s->n_groups++;
}

static void group_free(srv_req *g)
{
    srv *s = g->s;
    if (g->g_prev)
        g->g_prev->g_next = g->g_next;
    else
        s->groups = g->g_next;
    if (g->g_next)
        g->g_next->g_prev = g->g_prev;
    s->n_groups--;
    s->rebalance = true;
    free(g->kids);
    json_decref(g->seg_results);
    srv_chat_free(&g->chat);
    free(g);
}

/* Starts the next waiting branch of a group (on the loop; tokenizing first). A group that was
   cancelled still starts its branches, cancelled: they end through the normal path. */
static void group_start_next(srv_req *g)
{
    if (g->n_started >= g->n_kids)
        return;
    srv_req *k = g->kids[g->n_started++];
    srv *s = k->s;
    k->t_start = srv_now_ms(s);
    k->cancelled = g->cancelled;
    k->s_next = s->reqs;
    if (s->reqs)
        s->reqs->s_prev = k;
    s->reqs = k;
    s->n_reqs++;
    if (req_queue_tokenize(k))
        req_reject(k, SRV_E_INTERNAL, "cannot queue the request");
}

/* After its last branch: the group's result goes to its owner and the group is freed. */
static void group_finish(srv_req *g)
{
    if (g->owner)
        g->ops->group_done(g->owner, g);
    group_free(g);
}

/* How many branches group g may run at once: its max_branches, and no more than its fair share
   of the engine's sequences (--max-seqs) among the client requests now live (plain requests and
   groups: each gets an equal share, at least one), so that a wide fan-out does not queue other
   sessions behind all of its branches. A group over its share (another request arrived after its
   branches started) runs them on and starts no new one until it is under it again. */
static int group_limit(const srv_req *g)
{
    const srv *s = g->s;
    int clients = s->n_groups;
    for (const srv_req *r = s->reqs; r; r = r->s_next)
        clients += r->parent == NULL;
    int share = s->cfg->max_seqs / (clients > 0 ? clients : 1);
    if (share < 1)
        share = 1;
    int lim = g->chat.max_branches > 0 && g->chat.max_branches < g->n_kids ? g->chat.max_branches : g->n_kids;
    return lim < share ? lim : share;
}

/* Starts g's waiting branches while it is under its limit. A branch that ends while starting
   (rejected) is counted; if every branch has ended, the group ends here. */
static void group_top_up(srv_req *g)
{
    if (g->topping)
        return;
    g->topping = true;
    int lim = group_limit(g); /* starting branches does not change it: they are not clients */
    while (g->n_started < g->n_kids && g->n_started - g->n_ended < lim)
        group_start_next(g);
    g->topping = false;
    if (g->n_ended == g->n_kids)
        group_finish(g);
}

/* A request ended: every group may now have a larger share. */
static void groups_rebalance(srv *s)
{
    s->rebalance = false;
    for (srv_req *g = s->groups, *next; g; g = next) {
        next = g->g_next;
        if (g->kids && g->n_started < g->n_kids && !g->topping)
            group_top_up(g);
    }
}

/* A branch ended (done, rejected or cancelled before the engine): note its result, start the
   next waiting branch, and end the group after its last branch. */
static void group_branch_ended(srv_req *k, const char *finish, const fl_seq_stats *st, int32_t n_ids,
                               const char *err_code)
{
    srv_req *g = k->parent;
    json_t *o = json_object();
    json_object_set_new(o, "segment", json_integer(k->segment));
    json_object_set_new(o, "finish", json_string(finish));
    if (err_code)
        json_object_set_new(o, "error", json_string(err_code));
    if (st) {
        json_t *u = json_object();
        json_object_set_new(u, "prompt_tokens", json_integer(st->prompt_tokens));
        json_object_set_new(u, "completion_tokens", json_integer(n_ids));
        json_object_set_new(u, "cached_tokens", json_integer(st->cached_tokens));
        json_object_set_new(o, "usage", u);
    }
    json_array_set_new(g->seg_results, (size_t)k->segment, o);
    if (k->group_text) /* an HTTP owner answers with every branch's text at the end */
        json_object_set_new(o, "text", json_string(k->group_text));
    g->any_error |= err_code != NULL;
    g->kids[k->segment] = NULL;
    g->n_ended++;
    if (k->t_first && (!g->t_first || k->t_first < g->t_first))
        g->t_first = k->t_first;
    if (g->topping) /* ended as it started: group_top_up goes on, and ends the group */
        return;
    if (g->n_ended == g->n_kids) {
        group_finish(g);
        return;
    }
    group_top_up(g);
}

void srv_group_totals(const srv_req *g, long long *prompt, long long *completion, long long *cached)
{
    *prompt = *completion = *cached = 0;
    size_t i;
    json_t *v;
    json_array_foreach(g->seg_results, i, v)
    {
        json_t *u = json_object_get(v, "usage");
        *prompt += json_integer_value(json_object_get(u, "prompt_tokens"));
        *completion += json_integer_value(json_object_get(u, "completion_tokens"));
        *cached += json_integer_value(json_object_get(u, "cached_tokens"));
    }
}

/* A branch request of group g: messages base[0..n_base) plus, when extra is set, one more user
   message; the group's sampling options. NULL when out of memory. */
static srv_req *branch_new(srv_req *g, const fl_chat_msg *base, size_t n_base, const char *extra,
                           int segment)
{
    srv *s = g->s;
    srv_req *k = calloc(1, sizeof *k);
    if (!k)
        return NULL;
    k->s = s;
    k->ops = &group_branch_ops;
    k->owner = g;
    k->serial = ++s->next_serial;
    k->parent = g;
    k->segment = segment;
    k->work.data = k;
    srv_chat *c = &k->chat;
    c->id = strdup(g->chat.id);
    c->n_msgs = n_base + (extra ? 1 : 0);
    c->msgs = calloc(c->n_msgs ? c->n_msgs : 1, sizeof *c->msgs);
    c->max_tokens = g->chat.max_tokens;
    c->dec = g->chat.dec;
    c->enable_thinking = g->chat.enable_thinking;
    c->stop = g->chat.n_stop ? calloc((size_t)g->chat.n_stop, sizeof(char *)) : NULL;
    bool oom = !c->id || !c->msgs || (g->chat.n_stop && !c->stop);
    for (size_t j = 0; !oom && j < c->n_msgs; j++) {
        bool last = j == n_base;
        c->msgs[j].role = strdup(last ? "user" : base[j].role);
        c->msgs[j].content = strdup(last ? extra : base[j].content);
        oom |= !c->msgs[j].role || !c->msgs[j].content;
    }
    for (int j = 0; !oom && j < g->chat.n_stop; j++) {
        oom |= !(c->stop[j] = strdup(g->chat.stop[j]));
        c->n_stop = j + 1;
    }
    if (oom) {
        srv_chat_free(c);
        free(k);
        return NULL;
    }
    return k;
}

/* Gives group g its branches: one per extra[i] (base + extra[i]), or, with extra NULL, one
   branch with base alone; starts max_branches of them. False when out of memory (nothing
   added). */
static bool group_add_branches(srv_req *g, const fl_chat_msg *base, size_t n_base, char **extra, int n)
{
    srv_req **kids = srv_fault(&g->s->faults, SRV_FAULT_BRANCHES) ? NULL : calloc((size_t)n, sizeof *kids);
    if (!kids)
        return false;
    for (int i = 0; i < n; i++) {
        kids[i] = branch_new(g, base, n_base, extra ? extra[i] : NULL, i);
        if (!kids[i]) {
            for (int j = 0; j < i; j++) {
                srv_chat_free(&kids[j]->chat);
                free(kids[j]);
            }
            free(kids);
            return false;
        }
    }
    free(g->kids);
    g->kids = kids;
    g->n_kids = n;
    for (int i = 0; i < n; i++)
        json_array_append_new(g->seg_results, json_null());
    group_top_up(g);
    return true;
}

/* A group that cannot go on before any branch ran: its owner, whichever kind, hears the error
   as for a request refused before the engine took it (and forgets the group), then the group
   is freed. */
static void group_fail(srv_req *g, const char *code, const char *msg)
{
    srv *s = g->s;
    s->m.requests[SRV_OUT_REJECTED]++;
    srv_metrics_error(&s->m, code);
    if (g->owner)
        g->ops->refused(g->owner, g, code, msg);
    char q[160];
    SRV_WARN(&s->log, "event=group_failed req=%s serial=%llu code=%s message=%s",
             srv_log_q(q, sizeof q, g->chat.id), (unsigned long long)g->serial, code,
             srv_log_q(q + 80, 80, msg));
    group_free(g);
}

/* The outline stage of a skeleton/auto request ended: text is what the model wrote (NULL when
   the stage failed or was cancelled). Two or more points: one branch per point (the earlier
   turns plus the point); otherwise the request is decoded plainly, as one branch. */
static void group_outline_done(srv_req *k, const char *text, size_t len)
{
    srv_req *g = k->parent;
    srv *s = g->s;
    g->outline = NULL;
    char *points[SRV_OUTLINE_MAX];
    const char *why = "the outline stage did not finish";
    int n = text && !g->cancelled ? srv_outline_parse(text, len, points, &why) : 0;
    char q[80];
    SRV_INFO(&s->log, "event=outline req=%s points=%d%s%s", srv_log_q(q, sizeof q, g->chat.id), n,
             n ? "" : " fallback=", n ? "" : why);
    if (g->owner && g->ops->outline)
        g->ops->outline(g->owner, g, points, n, n ? NULL : why);
    g->n_outline = n;
    bool ok = n ? group_add_branches(g, g->chat.msgs, g->chat.n_msgs - 1, points, n)
                : group_add_branches(g, g->chat.msgs, g->chat.n_msgs, NULL, 1);
    srv_outline_free(points, n);
    if (!ok) /* no branch will end the group: it fails now */
        group_fail(g, SRV_E_INTERNAL, "out of memory: the request's branches could not be started");
    /* cancelled with its branches: they start cancelled and end the group themselves */
}

/* A branch's owner is its group: what the group's own owner should hear (the branch's frames,
   tagged with its segment) goes on to it while it is here, and the branch's end is the group's
   bookkeeping. */
static void branch_event(void *owner, srv_req *k, const srv_ev *ev)
{
    srv_req *g = owner;
    if (g->owner)
        g->ops->event(g->owner, k, ev);
}

static void branch_refused(void *owner, srv_req *k, const char *code, const char *msg)
{
    srv_req *g = owner;
    if (g->owner)
        g->ops->refused(g->owner, k, code, msg);
}

static void branch_ended(void *owner, srv_req *k, const srv_req_end *e)
{
    (void)owner;
    group_branch_ended(k, e->finish, e->stats, e->n_ids, e->code);
}

static bool branch_orphaned(void *owner, const srv_req *k)
{
    (void)k;
    const srv_req *g = owner;
    return !g->owner;
}

static const srv_owner_ops group_branch_ops = {
    .event = branch_event,
    .refused = branch_refused,
    .ended = branch_ended,
    .orphaned = branch_orphaned,
};

/* An outline stage's owner is its group too, but no client hears it: only its text counts. */
static void outline_event(void *owner, srv_req *k, const srv_ev *ev)
{
    (void)owner, (void)k, (void)ev;
}

static void outline_refused(void *owner, srv_req *k, const char *code, const char *msg)
{
    (void)owner, (void)k, (void)code, (void)msg;
}

static void outline_ended(void *owner, srv_req *k, const srv_req_end *e)
{
    (void)owner;
    group_outline_done(k, e->text, e->len);
}

static bool outline_orphaned(void *owner, const srv_req *k)
{
    (void)owner, (void)k;
    return true;
}

static const srv_owner_ops group_outline_ops = {
    .event = outline_event,
    .refused = outline_refused,
    .ended = outline_ended,
    .orphaned = outline_orphaned,
};

/* A request with "parallel": fanout gets one branch per segment (the shared messages plus its
   segment); skeleton and auto first ask the model for an outline of the last user message (an
   outline stage with no owner: its frames are not sent), then branch per point. At most
   max_branches run at once; the engine's prefix cache shares the common prompt blocks between
   them. Takes *chat. */
static srv_req *group_start(srv *s, const srv_owner_ops *ops, void *owner, srv_chat *chat,
                            const char **code, char *msg, size_t msglen)
{
    srv_req *g = calloc(1, sizeof *g);
    if (g)
        g->seg_results = json_array();
    if (!g || !g->seg_results) {
        free(g);
        *code = SRV_E_INTERNAL;
        snprintf(msg, msglen, "out of memory");
        return NULL;
    }
    req_init(g, s, ops, owner, chat);
    group_link(g); /* every group_free from here on unlinks it */
    g->state = SRV_REQ_RUNNING;
    if (g->chat.parallel == SRV_PAR_FANOUT) {
        if (!group_add_branches(g, g->chat.msgs, g->chat.n_msgs, g->chat.segments, g->chat.n_segments)) {
            group_free(g);
            *code = SRV_E_INTERNAL;
            snprintf(msg, msglen, "out of memory");
            return NULL;
        }
        return g;
    }
    fl_chat_msg om[2] = {{"system", SRV_OUTLINE_PROMPT}, g->chat.msgs[g->chat.n_msgs - 1]};
    srv_req *k = branch_new(g, om, 2, NULL, -1);
    if (!k) {
        group_free(g);
        *code = SRV_E_INTERNAL;
        snprintf(msg, msglen, "out of memory");
        return NULL;
    }
    k->ops = &group_outline_ops; /* the outline is the server's, not the client's */
    k->chat.max_tokens = 160;
    k->chat.dec.temperature = 0;
    k->chat.enable_thinking = false; /* the outline parser reads numbered lines, not a think block */
    g->outline = k;
    k->t_start = srv_now_ms(s);
    k->s_next = s->reqs;
    if (s->reqs)
        s->reqs->s_prev = k;
    s->reqs = k;
    s->n_reqs++;
    if (req_queue_tokenize(k)) {
        req_unlink(k);
        g->outline = NULL;
        srv_chat_free(&k->chat);
        free(k);
        group_free(g);
        *code = SRV_E_INTERNAL;
        snprintf(msg, msglen, "cannot queue the request");
        return NULL;
    }
    return g;
}

/* Tells the owner the request ended before the engine took it, then frees it. */
static void req_reject(srv_req *r, const char *code, const char *msg)
{
    srv *s = r->s;
    s->m.requests[SRV_OUT_REJECTED]++;
    srv_metrics_error(&s->m, code);
    if (r->owner)
        r->ops->refused(r->owner, r, code, msg);
    char q[160];
    SRV_INFO(&s->log, "event=rejected req=%s serial=%llu code=%s message=%s",
             srv_log_q(q, sizeof q, r->chat.id), (unsigned long long)r->serial, code,
             srv_log_q(q + 80, 80, msg));
    req_end(r, &(srv_req_end){.finish = "error", .code = code});
}

/* Renders and tokenizes (work pool). When the session's earlier turns make the prompt longer
 * than the limit, the oldest of them are dropped (a leading system message stays) until it
 * fits or none is left. */
static void tokenize_work(uv_work_t *w)
{
    srv_req *r = w->data;
    const fl_tokenizer *tok = r->s->model->tok;
    fl_chat_opts co = {.add_generation_prompt = true, .enable_thinking = r->chat.enable_thinking};
    size_t n = r->chat.n_msgs;
    bool sys = r->n_history > 0 && !strcmp(r->chat.msgs[0].role, "system");
    size_t droppable = r->n_history - (sys ? 1 : 0);
    fl_chat_msg *view = malloc(sizeof(fl_chat_msg) * (n ? n : 1));
    if (!view) {
        r->work_rc = fl_err_set(&r->work_err, FL_ENOMEM, "out of memory");
        return;
    }
    for (;;) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            bool hist_dropped = i < r->n_history && !(sys && i == 0) &&
                                i - (sys ? 1 : 0) < r->n_dropped;
            if (!hist_dropped)
                view[k++] = r->chat.msgs[i];
        }
        fl_buf text = {0};
        free(r->ids);
        r->ids = NULL;
        r->n_ids = 0;
        r->work_rc = fl_chat_render(tok, view, k, &co, &text, &r->work_err);
        if (!r->work_rc) /* Qwen3's is the template with think blocks */
            srv_reason_init(&r->reason, fl_tokenizer_chat_kind(tok) == FL_CHAT_QWEN3, text.data,
                            text.len);
        if (!r->work_rc)
            r->work_rc = fl_tokenizer_encode(tok, text.data ? text.data : "", text.len, true,
                                             &r->ids, &r->n_ids, &r->work_err);
        fl_buf_free(&text);
        if (r->work_rc || (int64_t)r->n_ids <= r->s->cfg->max_prompt_tokens ||
            r->n_dropped >= droppable)
            break;
        r->n_dropped += droppable - r->n_dropped >= 2 ? 2 : 1; /* a user+assistant turn */
    }
    free(view);
}

/* The request ended before the engine saw it (cancelled while tokenizing or waiting for
 * Redis): the owner still gets its done(cancelled). */
static void req_end_cancelled(srv_req *r)
{
    srv *s = r->s;
    srv_ev ev = {0};
    ev.req = r;
    ev.type = FL_EV_DONE;
    ev.finish = FL_FINISH_CANCELLED;
    ev.text = "";
    ev.stats.prompt_tokens = (int32_t)r->n_ids;
    s->m.requests[SRV_OUT_CANCELLED]++;
    if (r->owner)
        r->ops->event(r->owner, r, &ev);
    req_end(r, &(srv_req_end){.finish = "cancelled", .stats = &ev.stats});
}

/* Hands the tokenized request to the engine, with the cached prefix pages (owned) if any. */
static void req_submit(srv_req *r, void *prefix, int32_t n_prefix)
{
    srv *s = r->s;
    if (r->cancelled) {
        free(prefix);
        req_end_cancelled(r);
        return;
    }
    /* draining refuses new chats only: one accepted before the signal runs (or is cancelled
       when the grace period ends) */
    if (!s->engine) {
        free(prefix);
        req_reject(r, SRV_E_SHUTTING_DOWN, "the server is shutting down");
        return;
    }
    fl_request q = {0};
    q.prompt = r->ids;
    q.n_prompt = (int32_t)r->n_ids;
    q.max_tokens = r->chat.max_tokens;
    q.dec = r->chat.dec;
    q.prefix = prefix;
    q.n_prefix = prefix ? n_prefix : 0;
    if (r->chat.n_stop) {
        q.stop = (const char *const *)r->chat.stop;
        q.n_stop = r->chat.n_stop;
    } else {
        q.stop = (const char *const *)s->cfg->gen.stop;
        q.n_stop = s->cfg->gen.n_stop;
    }
    fl_err e = {0};
    r->en = s->engine;
    int rc = fl_engine_submit(s->engine, &q, sink, r, &r->eid, &e);
    if (rc) {
        free(prefix);
        req_reject(r, rc == FL_EBUSY ? SRV_E_BUSY
                      : rc == FL_ERANGE ? SRV_E_PROMPT_TOO_LONG
                      : rc == FL_EINVAL ? SRV_E_OUT_OF_RANGE
                                        : SRV_E_INTERNAL, e.msg);
        return;
    }
    r->state = SRV_REQ_RUNNING;
    if (!(r->chat.session && s->redis)) { /* the engine copied the prompt */
        free(r->ids);
        r->ids = NULL;
    }
    s->m.prompt_tokens += (uint64_t)q.n_prompt;
    char qid[80];
    SRV_INFO(&s->log, "event=submitted req=%s serial=%llu engine_id=%llu prompt_tokens=%d "
             "max_tokens=%d policy=%s prefix_pages=%d history=%zu dropped=%zu",
             srv_log_q(qid, sizeof qid, r->chat.id), (unsigned long long)r->serial,
             (unsigned long long)r->eid, q.n_prompt, q.max_tokens, fl_policy_name(q.dec.policy),
             q.n_prefix, r->n_history, r->n_dropped);
}

/* MGET's answer: the longest run of cached pages from the prompt's start. */
static void lookup_done(struct redisReply *rp, void *ud)
{
    srv_req *r = ud;
    srv *s = r->s;
    r->state = SRV_REQ_TOKENIZING;
    size_t bl = fl_blob_size(&s->model->cfg);
    int32_t nb = (int32_t)((r->n_ids - 1) / (size_t)s->model->cfg.block_size);
    int32_t k = 0;
    if (rp && rp->type == REDIS_REPLY_ARRAY && rp->elements == (size_t)nb) {
        while (k < nb && rp->element[k]->type == REDIS_REPLY_STRING &&
               (size_t)rp->element[k]->len == bl)
            k++;
        if (k < nb && rp->element[k]->type == REDIS_REPLY_STRING)
            s->m.kv_pages_rejected++; /* a value of the wrong size: damaged */
    } else {
        s->m.kv_lookup_errors++;
    }
    void *prefix = NULL;
    if (k > 0 && !r->cancelled && (prefix = malloc(bl * (size_t)k))) {
        for (int32_t i = 0; i < k; i++)
            memcpy((char *)prefix + bl * (size_t)i, rp->element[i]->str, bl);
    } else {
        k = 0;
    }
    s->m.kv_pages_hit += (uint64_t)k;
    s->m.kv_pages_missed += (uint64_t)(nb - k);
    req_submit(r, prefix, k);
}

/* Looks up the prompt's cached pages in Redis (or submits at once when there is no Redis). */
static void req_lookup(srv_req *r)
{
    srv *s = r->s;
    int32_t B = s->model->cfg.block_size;
    int32_t nb = r->n_ids > 0 ? (int32_t)((r->n_ids - 1) / (size_t)B) : 0;
    if (!s->redis || !srv_redis_ready(s->redis) || nb <= 0 || r->cancelled) {
        req_submit(r, NULL, 0);
        return;
    }
    char(*keys)[64] = malloc(sizeof *keys * (size_t)nb);
    const char **argv = malloc(sizeof(char *) * (size_t)(nb + 1));
    size_t *lens = malloc(sizeof(size_t) * (size_t)(nb + 1));
    int rc = -1;
    if (keys && argv && lens) {
        argv[0] = "MGET";
        lens[0] = 4;
        fl_page_key parent = {0, 0};
        for (int32_t b = 0; b < nb; b++) {
            fl_page_key k = fl_page_key_chain(s->model_fp, parent, r->ids + (size_t)b * (size_t)B, B);
            srv_redis_kv_key(k, keys[b]);
            argv[b + 1] = keys[b];
            lens[b + 1] = strlen(keys[b]);
            parent = k;
        }
        s->m.kv_lookups++;
        /* a long prefix is megabytes: its deadline grows with what it reads */
        double bytes = (double)nb * (double)fl_blob_size(&s->model->cfg);
        rc = srv_redis_cmd_deadline(s->redis, lookup_done, r, nb + 1, argv, lens,
                                    srv_redis_timeout_ms(s->redis) + bytes / SRV_REDIS_FLOOR_BPMS);
    }
    free(keys);
    free(argv);
    free(lens);
    if (rc) {
        req_submit(r, NULL, 0);
        return;
    }
    r->state = SRV_REQ_LOOKUP;
}

static void tokenize_done(uv_work_t *w, int status)
{
    srv_req *r = w->data;
    srv *s = r->s;
    char msg[FL_ERR_MSG + 64];
    if (r->cancelled || status == UV_ECANCELED) {
        req_end_cancelled(r);
        return;
    }
    if (r->work_rc) {
        req_reject(r, SRV_E_BAD_REQUEST, r->work_err.msg);
        return;
    }
    if (!s->engine) {
        req_reject(r, SRV_E_SHUTTING_DOWN, "the server is shutting down");
        return;
    }
    int max_prompt = s->cfg->max_prompt_tokens;
    if ((int64_t)r->n_ids > max_prompt) {
        snprintf(msg, sizeof msg, "the prompt has %zu tokens after the chat template; the limit "
                 "is %d", r->n_ids, max_prompt);
        req_reject(r, SRV_E_PROMPT_TOO_LONG, msg);
        return;
    }
    if (fl_pages_needed(&s->model->cfg, (int32_t)r->n_ids, r->chat.max_tokens, &r->chat.dec) >
        s->n_pages) {
        snprintf(msg, sizeof msg, "%zu prompt tokens plus max_tokens %d need more KV pages than "
                 "the server has (%d); ask for fewer tokens", r->n_ids, r->chat.max_tokens,
                 s->n_pages);
        req_reject(r, SRV_E_PROMPT_TOO_LONG, msg);
        return;
    }
    req_lookup(r);
}

static int req_queue_tokenize(srv_req *r)
{
    r->state = SRV_REQ_TOKENIZING;
    return uv_queue_work(&r->s->loop, &r->work, tokenize_work, tokenize_done);
}

/* ---- sessions in Redis: "fogline:session:<id>" = {"v":1,"messages":[...],"ids":[...]} ---- */

static void session_key(const char *id, char *out, size_t n)
{
    snprintf(out, n, "fogline:session:%s", id);
}

/* Prepends a stored conversation's messages; false when the value is not one (a damaged or
 * foreign value is a miss, not an error for the client). */
static bool session_merge(srv_req *r, const char *data, size_t len)
{
    json_error_t je;
    json_t *o = json_loadb(data, len, 0, &je);
    json_t *ms = o ? json_object_get(o, "messages") : NULL;
    size_t n = json_is_array(ms) ? json_array_size(ms) : 0;
    bool ok = json_is_array(ms) && n <= 4 * SRV_MAX_MESSAGES;
    for (size_t i = 0; ok && i < n; i++) {
        json_t *m = json_array_get(ms, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        ok = role && json_is_string(json_object_get(m, "content")) &&
             (!strcmp(role, "system") || !strcmp(role, "user") || !strcmp(role, "assistant"));
    }
    /* a client that sends the whole conversation (the web UI does) already starts with the
       stored turns: nothing to prepend */
    bool full = ok && r->chat.n_msgs > n;
    for (size_t i = 0; full && i < n; i++) {
        json_t *m = json_array_get(ms, i);
        json_t *c = json_object_get(m, "content");
        full = !strcmp(r->chat.msgs[i].role, json_string_value(json_object_get(m, "role"))) &&
               strlen(r->chat.msgs[i].content) == json_string_length(c) &&
               !memcmp(r->chat.msgs[i].content, json_string_value(c), json_string_length(c));
    }
    if (full) {
        r->n_history = n;
        json_decref(o);
        return true;
    }
    fl_chat_msg *all = ok ? calloc(n + r->chat.n_msgs, sizeof *all) : NULL;
    if (ok && !all)
        ok = false;
    for (size_t i = 0; ok && i < n; i++) {
        json_t *m = json_array_get(ms, i);
        json_t *c = json_object_get(m, "content");
        all[i].role = strdup(json_string_value(json_object_get(m, "role")));
        all[i].content = strndup(json_string_value(c), json_string_length(c));
        if (!all[i].role || !all[i].content)
            ok = false;
    }
    if (!ok) {
        for (size_t i = 0; all && i < n; i++) {
            free((void *)all[i].role);
            free((void *)all[i].content);
        }
        free(all);
        json_decref(o);
        return false;
    }
    memcpy(all + n, r->chat.msgs, sizeof *all * r->chat.n_msgs);
    free(r->chat.msgs);
    r->chat.msgs = all;
    r->chat.n_msgs += n;
    r->n_history = n;
    json_decref(o);
    return true;
}

static void session_read(struct redisReply *rp, void *ud)
{
    srv_req *r = ud;
    srv *s = r->s;
    if (r->cancelled) {
        req_end_cancelled(r);
        return;
    }
    char q[80];
    if (rp && rp->type == REDIS_REPLY_STRING) {
        if (session_merge(r, rp->str, (size_t)rp->len)) {
            s->m.session_hits++;
        } else {
            s->m.session_errors++;
            SRV_WARN(&s->log, "event=session_unreadable session=%s", srv_log_q(q, sizeof q, r->chat.session));
        }
    } else if (rp && rp->type == REDIS_REPLY_NIL) {
        s->m.session_misses++;
    } else {
        s->m.session_errors++; /* Redis away or slow: the turn runs without its history */
        SRV_WARN(&s->log, "event=session_unavailable session=%s", srv_log_q(q, sizeof q, r->chat.session));
    }
    if (req_queue_tokenize(r))
        req_reject(r, SRV_E_INTERNAL, "cannot queue the request");
}

static void session_written(struct redisReply *rp, void *ud)
{
    srv *s = ud;
    if (rp && rp->type == REDIS_REPLY_STATUS)
        s->m.session_writes++;
    else
        s->m.session_errors++;
}

/* After a completed turn: the conversation (kept messages, the reply) and its token ids. */
static void session_save(srv_req *r, const srv_ev *ev)
{
    srv *s = r->s;
    if (!r->chat.session || !s->redis || !srv_redis_ready(s->redis))
        return;
    json_t *o = json_object();
    json_t *ms = json_array();
    json_t *ids = json_array();
    bool sys = r->n_history > 0 && !strcmp(r->chat.msgs[0].role, "system");
    for (size_t i = 0; i < r->chat.n_msgs; i++) {
        if (i < r->n_history && !(sys && i == 0) && i - (sys ? 1 : 0) < r->n_dropped)
            continue;
        json_t *m = json_object();
        json_object_set_new(m, "role", json_string(r->chat.msgs[i].role));
        json_object_set_new(m, "content", json_string(r->chat.msgs[i].content));
        json_array_append_new(ms, m);
    }
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string("assistant"));
    json_object_set_new(m, "content", json_stringn(ev->text, ev->text_len));
    json_array_append_new(ms, m);
    for (size_t i = 0; r->ids && i < r->n_ids; i++)
        json_array_append_new(ids, json_integer(r->ids[i]));
    for (int32_t i = 0; ev->ids && i < ev->n_ids; i++)
        json_array_append_new(ids, json_integer(ev->ids[i]));
    json_object_set_new(o, "v", json_integer(1));
    json_object_set_new(o, "model", json_string(s->model_id));
    json_object_set_new(o, "messages", ms);
    json_object_set_new(o, "ids", ids);
    char *val = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!val)
        return;
    char key[SRV_ID_MAX + 32], ttl[24];
    session_key(r->chat.session, key, sizeof key);
    snprintf(ttl, sizeof ttl, "%d", s->cfg->redis_session_ttl);
    const char *argv[5] = {"SET", key, val, "EX", ttl};
    size_t lens[5] = {3, strlen(key), strlen(val), 2, strlen(ttl)};
    if (srv_redis_cmd(s->redis, session_written, s, 5, argv, lens))
        s->m.session_errors++;
    free(val);
}

srv_req *srv_req_start(srv *s, const srv_owner_ops *ops, void *owner, srv_chat *chat,
                       const char **code, char *msg, size_t msglen)
{
    if (s->draining || !s->engine) {
        *code = SRV_E_SHUTTING_DOWN;
        snprintf(msg, msglen, "the server is shutting down");
        goto refuse;
    }
    /* requests inside the engine beyond what runs at once are waiting: bound them */
    if (s->n_reqs >= s->cfg->max_seqs + s->cfg->max_queued) {
        *code = SRV_E_BUSY;
        snprintf(msg, msglen, "the server is busy: %d requests are running or waiting; retry later",
                 s->n_reqs);
        goto refuse;
    }
    if (chat->parallel) {
        int need = chat->parallel == SRV_PAR_FANOUT ? chat->n_segments : 1;
        if (s->n_reqs + need > s->cfg->max_seqs + s->cfg->max_queued) {
            *code = SRV_E_BUSY;
            snprintf(msg, msglen, "the server is busy: %d requests are running or waiting and "
                     "this one has %d branches; retry later", s->n_reqs, need);
            goto refuse;
        }
        srv_req *g = group_start(s, ops, owner, chat, code, msg, msglen);
        if (!g)
            goto refuse;
        return g;
    }
    srv_req *r = calloc(1, sizeof *r);
    if (!r) {
        *code = SRV_E_INTERNAL;
        snprintf(msg, msglen, "out of memory");
        goto refuse;
    }
    req_init(r, s, ops, owner, chat);
    r->s_next = s->reqs;
    if (s->reqs)
        s->reqs->s_prev = r;
    s->reqs = r;
    s->n_reqs++;
    if (r->chat.session && s->redis) {
        char key[SRV_ID_MAX + 32];
        session_key(r->chat.session, key, sizeof key);
        const char *argv[2] = {"GET", key};
        size_t lens[2] = {3, strlen(key)};
        r->state = SRV_REQ_SESSION;
        if (!srv_redis_cmd(s->redis, session_read, r, 2, argv, lens))
            return r; /* tokenizing follows the answer (or its deadline) */
        s->m.session_errors++; /* Redis not connected: this turn has no history */
        char q[80];
        SRV_WARN(&s->log, "event=session_unavailable session=%s", srv_log_q(q, sizeof q, r->chat.session));
    }
    if (req_queue_tokenize(r)) {
        req_unlink(r);
        *chat = r->chat; /* give it back for the caller to free */
        memset(&r->chat, 0, sizeof r->chat);
        req_free(r);
        *code = SRV_E_INTERNAL;
        snprintf(msg, msglen, "cannot queue the request");
        goto refuse;
    }
    return r;
refuse:
    s->m.requests[SRV_OUT_REJECTED]++;
    srv_metrics_error(&s->m, *code);
    return NULL;
}

void srv_req_cancel(srv_req *r)
{
    if (r->cancelled)
        return;
    r->cancelled = true;
    if (r->kids || r->outline) { /* a group: its running branches (waiting ones start
                                     cancelled) and its outline stage */
        if (r->outline)
            srv_req_cancel(r->outline);
        for (int i = 0; i < r->n_started; i++)
            if (r->kids[i])
                srv_req_cancel(r->kids[i]);
        return;
    }
    if (r->state == SRV_REQ_RUNNING && r->s->engine)
        fl_engine_cancel(r->s->engine, r->eid);
    /* tokenizing or waiting for Redis: the next stage sees the flag (Redis answers or
       times out within --redis-timeout-ms) */
}

/* The client's queue is freed with it: no queued draft may point back at r. */
static void req_forget_drafts(srv_req *r)
{
    for (int i = 0; i < SRV_DRAFT_SLOTS; i++)
        if (r->draft_slot[i]) {
            r->draft_slot[i]->req = NULL;
            r->draft_slot[i] = NULL;
        }
}

void srv_req_orphan(srv_req *r)
{
    /* a group's branches keep the group as owner (it hears their end) and pass nothing on to
       a gone client; their drafts sat in that client's queue */
    if (r->kids)
        for (int i = 0; i < r->n_kids; i++)
            if (r->kids[i]) {
                req_forget_drafts(r->kids[i]);
                srv_req_cancel(r->kids[i]);
            }
    r->owner = NULL;
    req_forget_drafts(r);
    srv_req_cancel(r);
}

static void handle(srv *s, srv_ev *ev)
{
    srv_req *r = ev->req;
    double now = srv_now_ms(s);
    if (ev->type != FL_EV_DONE) {
        if (!r->t_first) {
            r->t_first = now;
            srv_hist_observe(&s->m.first_update, (now - r->t_start) / 1e3);
        } else {
            srv_hist_observe(&s->m.update_gap, (now - r->t_last) / 1e3);
        }
        r->t_last = now;
    } else {
        int out = ev->finish == FL_FINISH_STOP       ? SRV_OUT_STOP
                  : ev->finish == FL_FINISH_LENGTH    ? SRV_OUT_LENGTH
                  : ev->finish == FL_FINISH_CANCELLED ? SRV_OUT_CANCELLED
                                                      : SRV_OUT_ERROR;
        s->m.requests[out]++;
        s->m.reply_tokens += (uint64_t)(ev->n_ids > 0 ? ev->n_ids : 0);
        if (ev->finish == FL_FINISH_ERROR)
            srv_metrics_error(&s->m, srv_ev_code(ev));
        if (ev->stats.forwards > 0 && (ev->finish == FL_FINISH_STOP || ev->finish == FL_FINISH_LENGTH))
            srv_hist_observe(&s->m.tpf, ev->stats.tpf);
        int32_t redis_tokens = ev->stats.cached_tokens - ev->stats.shared_tokens;
        s->m.kv_cached_tokens += (uint64_t)(redis_tokens > 0 ? redis_tokens : 0);
        s->m.shared_tokens += (uint64_t)(ev->stats.shared_tokens > 0 ? ev->stats.shared_tokens : 0);
        s->m.kv_pages_rejected += (uint64_t)(ev->stats.prefix_rejected > 0 ? ev->stats.prefix_rejected : 0);
        if (ev->finish == FL_FINISH_STOP || ev->finish == FL_FINISH_LENGTH)
            session_save(r, ev);
        char q[80];
        SRV_INFO(&s->log, "event=done req=%s serial=%llu finish=%s reply_tokens=%d forwards=%d "
                 "tpf=%.2f cached_tokens=%d ms=%.1f%s", srv_log_q(q, sizeof q, r->chat.id),
                 (unsigned long long)r->serial, srv_finish_name(ev->finish), ev->n_ids,
                 ev->stats.forwards, ev->stats.tpf, ev->stats.cached_tokens, now - r->t_start,
                 req_orphaned(r) ? " orphaned=1" : "");
    }
    if (r->owner)
        r->ops->event(r->owner, r, ev);
    if (ev->type == FL_EV_DONE) {
        bool whole = ev->finish == FL_FINISH_STOP || ev->finish == FL_FINISH_LENGTH;
        bool err = ev->finish == FL_FINISH_ERROR;
        req_end(r, &(srv_req_end){.finish = err ? "error" : srv_finish_name(ev->finish),
                                  .stats = &ev->stats, .n_ids = ev->n_ids,
                                  .code = err ? srv_ev_code(ev) : NULL,
                                  .text = whole ? ev->text : NULL, .len = ev->text_len});
    }
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
            handle(s, ev);
            if (!spare)
                free(ev);
        }
        if (s->rebalance)
            groups_rebalance(s);
    }
}

void srv_engine_stop(srv *s)
{
    if (s->engine) {
        fl_engine *en = s->engine;
        s->engine = NULL; /* cancels from here on are no-ops: stop cancels everything */
        fl_engine_stop(en);
    }
    srv_drain_events(s);
}

/* ---- draft rendering ---- */

json_t *srv_draft_tokens(const fl_tokenizer *t, const int32_t *tokens, int32_t n)
{
    /* Each run of decided tokens goes through a streaming detokenizer so a character split
       over tokens shows on the token that completes it (never as broken UTF-8); a character
       still cut by a mask shows nothing until the mask resolves. */
    json_t *a = json_array();
    if (!a)
        return NULL;
    fl_detok d;
    fl_detok_init(&d, t, true);
    fl_buf piece = {0};
    for (int32_t i = 0; i < n; i++) {
        json_t *item = json_object();
        if (tokens[i] < 0) {
            fl_detok_init(&d, t, true); /* a mask breaks the run; drop a held partial char */
            json_object_set_new(item, "mask", json_true());
        } else {
            piece.len = 0;
            fl_detok_push(&d, tokens[i], &piece);
            json_object_set_new(item, "t", json_stringn(piece.data ? piece.data : "", piece.len));
        }
        json_array_append_new(a, item);
    }
    if (piece.err) { /* a draft with a token's text missing: none (the next one replaces it) */
        json_decref(a);
        a = NULL;
    }
    fl_buf_free(&piece);
    return a;
}
