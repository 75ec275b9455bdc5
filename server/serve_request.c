/* serve_request.c: a request's life (serve_request.h), from the client's chat to its end.
 *
 * A chat becomes a srv_req: its session's earlier turns are read from Redis when it names one
 * (serve_session.c), its template is rendered and tokenized on the uv work pool, its prompt's
 * cached pages are looked up in Redis, then it is submitted to fl_engine. Its events come back
 * through the sink (serve_sink.c) and go to its owner through the owner's ops; a request with
 * "parallel" is a group of branches instead (serve_group.c). Every request ends in req_end,
 * after a done, a refusal or a cancellation before the engine: its owner's `ended` runs, then
 * it is freed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "redis.h"
#include "serve.h"
#include "serve_group.h"
#include "serve_request.h"
#include "serve_session.h"
#include "serve_sink.h"

void srv_req_unlink(srv_req *r)
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
    free(r->group_reasoning);
    json_decref(r->group_logprobs);
    json_decref(r->group_calls);
    /* a queued draft must not point at a freed request */
    for (int i = 0; i < SRV_DRAFT_SLOTS; i++) {
        if (r->draft_slot[i])
            r->draft_slot[i]->req = NULL;
        free(r->view[i]);
    }
    srv_chat_free(&r->chat);
    fl_cons_unref(r->cons);
    srv_tools_free(&r->tools);
    json_decref(r->tool_calls);
    json_decref(r->response);
    json_decref(r->input_items);
    json_decref(r->prev_items);
    free(r->ids);
    free(r);
}

/* The end of every request: off the server's list, its owner's `ended`, freed. */
static void req_end(srv_req *r, const srv_req_end *end)
{
    srv_req_unlink(r);
    if (r->owner && r->ops->ended)
        r->ops->ended(r->owner, r, end);
    req_free(r);
}

static bool req_orphaned(const srv_req *r)
{
    return !r->owner || (r->ops->orphaned && r->ops->orphaned(r->owner, r));
}

uint64_t srv_entropy(void)
{
    uint64_t v;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) == (ssize_t)sizeof v)
        return v;
    /* no entropy yet (an early-boot container): the clock and the process still differ */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)ts.tv_sec * 1000000007u) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
}

void srv_seed_init(srv *s, bool given, uint64_t seed)
{
    s->seed_state = given ? seed : srv_entropy();
}

/* splitmix64: every state gives another output (a bijection of the counter) */
uint64_t srv_draw_seed(srv *s)
{
    uint64_t z = (s->seed_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (z ^ (z >> 31)) >> 12;
}

json_t *srv_stop_reason(const srv_req *r, int32_t stop_string, int32_t stop_token)
{
    const srv_chat *c = &r->chat;
    const srv_config *cfg = r->s->cfg;
    int n = c->n_stop ? c->n_stop : cfg->gen.n_stop; /* the list the engine was given */
    if (stop_string >= 0 && stop_string < n) {
        json_t *v = json_string(c->n_stop ? c->stop[stop_string] : cfg->gen.stop[stop_string]);
        if (v) /* a --stop flag need not be UTF-8; a request's is */
            return v;
    }
    return stop_token >= 0 ? json_integer(stop_token) : json_null();
}

bool srv_req_sampled(const srv_req *r)
{
    return r->chat.dec.temperature > 0;
}

/* The fields every request starts with; takes *chat (zeroed). A chat without a seed gets the
   next of the server's (srv_draw_seed), which its branches then share (seed + i). */
void srv_req_init(srv_req *r, srv *s, const srv_owner_ops *ops, void *owner, srv_chat *chat)
{
    r->s = s;
    r->ops = ops;
    r->owner = owner;
    r->serial = ++s->next_serial;
    r->chat = *chat;
    memset(chat, 0, sizeof *chat);
    if (!r->chat.seed_given)
        r->chat.dec.seed = srv_draw_seed(s);
    r->segment = -1;
    r->t_start = srv_now_ms(s);
    srv_tools_init(&r->tools, r->chat.tool_choice != SRV_TOOL_NONE, r->serial);
    r->tools.max_calls = r->chat.single_call ? 1 : 0;
    r->work.data = r;
}

void srv_req_link(srv_req *r)
{
    srv *s = r->s;
    r->s_next = s->reqs;
    if (s->reqs)
        s->reqs->s_prev = r;
    s->reqs = r;
    s->n_reqs++;
}

/* Tells the owner the request ended before the engine took it, then frees it. The message
   may quote client text cut at a byte count (a schema's keys, an error's end): clipped to
   valid UTF-8 here, or the JSON that carries it would go without it. */
void srv_req_reject(srv_req *r, const char *code, const char *text)
{
    srv *s = r->s;
    char msg[FL_ERR_MSG + 128];
    snprintf(msg, sizeof msg, "%s", text);
    srv_utf8_clip(msg);
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

/* /v1/completions: the prompt as given, text tokenized or ids checked; no template, no
 * reasoning split, no history. */
static void tokenize_raw(srv_req *r)
{
    const fl_tokenizer *tok = r->s->model->tok;
    const srv_prompt *c = &r->chat.prompts[0]; /* a group's branch has its own one */
    if (!c->ids) {
        r->work_rc = fl_tokenizer_encode(tok, c->text, c->len, true, &r->ids, &r->n_ids,
                                         &r->work_err);
        if (!r->work_rc && !r->n_ids) /* nothing the tokenizer keeps (cannot happen: bytes) */
            r->work_rc = fl_err_set(&r->work_err, FL_EINVAL, "the prompt has no tokens");
        if (r->work_rc)
            r->work_param = "prompt";
        return;
    }
    int vocab = r->s->model->cfg.vocab;
    for (size_t i = 0; i < c->n_ids; i++)
        if (c->ids[i] >= vocab) {
            r->work_rc = fl_err_set(&r->work_err, FL_EINVAL, "token id %d at %zu is outside "
                                    "the vocabulary (%d ids)", (int)c->ids[i], i, vocab);
            r->work_param = "prompt";
            return;
        }
    if (!(r->ids = malloc(c->n_ids * sizeof(int32_t)))) {
        r->work_rc = fl_err_set(&r->work_err, FL_ENOMEM, "out of memory");
        return;
    }
    memcpy(r->ids, c->ids, c->n_ids * sizeof(int32_t));
    r->n_ids = c->n_ids;
}

int srv_chat_render_prompt(const fl_tokenizer *tok, const srv_chat *c, const fl_chat_msg *view,
                           const char *const *view_calls, size_t n, bool add_generation_prompt,
                           fl_buf *text, fl_err *e, const char **param)
{
    fl_chat_opts co = {.add_generation_prompt = add_generation_prompt,
                       .enable_thinking = c->enable_thinking};
    fl_chat_extra extra = {c->tools, view_calls, NULL};
    bool tools = c->tools || c->tool_msgs;
    if (tools && !fl_chat_takes_tools(tok)) {
        *param = c->tools ? "tools" : "messages";
        return fl_err_set(e, FL_EUNSUPPORTED, "this model's chat template has no tool syntax "
                          "(%s): it cannot be offered tools or shown tool calls",
                          fl_chat_kind_name(fl_tokenizer_chat_kind(tok)));
    }
    int rc = tools ? fl_chat_render_extra(tok, view, n, &co, &extra, text, e)
                   : fl_chat_render(tok, view, n, &co, text, e);
    if (rc && tools) /* the renderer refused the tools' JSON or a message's calls */
        *param = !strncmp(e->msg, "tools", 5) ? "tools" : "messages";
    return rc;
}

size_t srv_req_droppable(const srv_req *r, size_t *first)
{
    bool sys = r->hist_at == 0 && r->n_history > 0 && !strcmp(r->chat.msgs[0].role, "system");
    *first = r->hist_at + (sys ? 1 : 0);
    return r->n_history - (sys ? 1 : 0);
}

bool srv_req_dropped(const srv_req *r, size_t i)
{
    size_t first;
    srv_req_droppable(r, &first);
    return i >= first && i - first < r->n_dropped;
}

/* response_format, structured_outputs, a required tool call: compiled here, on the work pool
   off the loop (a json_object automaton takes a fraction of a second the first time; then it
   is cached) */
static void compile_constraints(srv_req *r)
{
    if (!r->work_rc && r->chat.format != FL_FMT_TEXT && !r->cons) {
        r->work_rc = fl_cons_cache_get(r->s->cons, r->chat.format, r->chat.schema, &r->cons,
                                       &r->work_err);
        if (r->work_rc) {
            r->work_param = r->chat.format_param ? r->chat.format_param : "response_format";
            fl_err_prefix(&r->work_err, "%s", r->work_param);
        }
    }
    /* tool_choice "required" or a named function: the reply is one well-formed call */
    if (!r->work_rc && r->chat.tool_schema && !r->cons) {
        r->work_rc = fl_cons_cache_get(r->s->cons, FL_FMT_TOOL_CALL, r->chat.tool_schema, &r->cons,
                                       &r->work_err);
        if (r->work_rc) {
            r->work_param = "tools";
            fl_err_prefix(&r->work_err, "tools (the function's parameters)");
        }
    }
}

/* Renders and tokenizes (work pool). When the session's earlier turns make the prompt longer
 * than the limit, the oldest of them are dropped (a leading system message stays) until it
 * fits or none is left. A raw prompt (/v1/completions) is tokenized as it is. */
static void tokenize_work(uv_work_t *w)
{
    srv_req *r = w->data;
    if (r->chat.raw) {
        tokenize_raw(r);
        compile_constraints(r);
        return;
    }
    const fl_tokenizer *tok = r->s->model->tok;
    size_t n = r->chat.n_msgs;
    size_t first;
    size_t droppable = srv_req_droppable(r, &first);
    fl_chat_msg *view = malloc(sizeof(fl_chat_msg) * (n ? n : 1));
    const char **calls = r->chat.calls ? calloc(n ? n : 1, sizeof(char *)) : NULL;
    if (!view || (r->chat.calls && !calls)) {
        free(view);
        r->work_rc = fl_err_set(&r->work_err, FL_ENOMEM, "out of memory");
        return;
    }
    for (;;) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            if (srv_req_dropped(r, i))
                continue;
            if (calls)
                calls[k] = r->chat.calls[i];
            view[k++] = r->chat.msgs[i];
        }
        fl_buf text = {0};
        free(r->ids);
        r->ids = NULL;
        r->n_ids = 0;
        r->work_rc = srv_chat_render_prompt(tok, &r->chat, view, calls, k, true, &text,
                                            &r->work_err, &r->work_param);
        if (!r->work_rc) { /* Qwen3's is the template with think blocks */
            srv_reason_init(&r->reason, fl_tokenizer_chat_kind(tok) == FL_CHAT_QWEN3, text.data,
                            text.len);
            r->reason0 = r->reason;
        }
        if (!r->work_rc)
            r->work_rc = fl_tokenizer_encode(tok, text.data ? text.data : "", text.len, true,
                                             &r->ids, &r->n_ids, &r->work_err);
        fl_buf_free(&text);
        if (r->work_rc || (int64_t)r->n_ids <= r->s->cfg->max_prompt_tokens ||
            r->n_dropped >= droppable)
            break;
        /* a turn: its user message and what answered it (the assistant's, its tool calls'
           results), so that what is kept starts at a user message */
        r->n_dropped++;
        while (r->n_dropped < droppable && strcmp(r->chat.msgs[first + r->n_dropped].role, "user"))
            r->n_dropped++;
    }
    free(view);
    free(calls);
    compile_constraints(r);
}

/* Reply tokens that begin inside the reply's think block (srv_reason_span of the whole text),
   the text rebuilt token by token as the engine detokenizes it; -1 without the split. */
static int32_t reasoning_tokens(const srv_req *r, const srv_ev *ev)
{
    if (!r->reason0.on)
        return -1;
    size_t span = srv_reason_span(&r->reason0, ev->text ? ev->text : "", ev->text_len);
    fl_detok d;
    fl_detok_init(&d, r->s->model->tok, true);
    fl_buf text = {0};
    int32_t k = 0;
    for (int32_t i = 0; ev->ids && i < ev->n_ids && text.len < span && !text.err; i++) {
        k++;
        fl_detok_push(&d, ev->ids[i], &text);
    }
    fl_buf_free(&text);
    return k;
}

/* The request ended before the engine saw it (cancelled while tokenizing or waiting for
 * Redis): the owner still gets its done(cancelled). */
void srv_req_end_cancelled(srv_req *r)
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
void srv_req_submit(srv_req *r, void *prefix, int32_t n_prefix)
{
    srv *s = r->s;
    if (r->cancelled) {
        free(prefix);
        srv_req_end_cancelled(r);
        return;
    }
    /* draining refuses new chats only: one accepted before the signal runs (or is cancelled
       when the grace period ends) */
    if (!s->engine) {
        free(prefix);
        srv_req_reject(r, SRV_E_SHUTTING_DOWN, "the server is shutting down");
        return;
    }
    fl_request q = {0};
    q.prompt = r->ids;
    q.n_prompt = (int32_t)r->n_ids;
    q.max_tokens = r->chat.max_tokens;
    q.dec = r->chat.dec;
    q.every_step = r->chat.every_step;
    q.constraint = r->cons;
    q.logprobs = r->chat.logprobs;
    q.top_logprobs = r->chat.top_logprobs;
    q.bias_ids = r->chat.bias_ids;
    q.bias = r->chat.bias;
    q.n_bias = r->chat.n_bias;
    q.min_tokens = r->chat.min_tokens;
    q.ignore_eos = r->chat.ignore_eos;
    q.presence_penalty = r->chat.presence_penalty;
    q.frequency_penalty = r->chat.frequency_penalty;
    q.repetition_penalty = r->chat.repetition_penalty;
    q.stop_ids = r->chat.stop_ids;
    q.n_stop_ids = r->chat.n_stop_ids;
    q.include_stop_str = r->chat.include_stop_str;
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
    int rc = fl_engine_submit(s->engine, &q, srv_sink, r, &r->eid, &e);
    if (rc) {
        free(prefix);
        srv_req_reject(r, rc == FL_EBUSY ? SRV_E_BUSY
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

static void tokenize_done(uv_work_t *w, int status)
{
    srv_req *r = w->data;
    srv *s = r->s;
    char msg[FL_ERR_MSG + 64];
    if (r->cancelled || status == UV_ECANCELED) {
        srv_req_end_cancelled(r);
        return;
    }
    if (r->work_rc) {
        srv_req_reject(r, SRV_E_BAD_REQUEST, r->work_err.msg);
        return;
    }
    if (!s->engine) {
        srv_req_reject(r, SRV_E_SHUTTING_DOWN, "the server is shutting down");
        return;
    }
    int max_prompt = s->cfg->max_prompt_tokens;
    if ((int64_t)r->n_ids > max_prompt) {
        snprintf(msg, sizeof msg, "the prompt has %zu tokens%s; the limit is %d", r->n_ids,
                 r->chat.raw ? "" : " after the chat template", max_prompt);
        if (r->chat.raw)
            r->work_param = "prompt";
        srv_req_reject(r, SRV_E_PROMPT_TOO_LONG, msg);
        return;
    }
    if (r->cons && fl_cons_min_tokens(r->cons) > r->chat.max_tokens) {
        snprintf(msg, sizeof msg, "the shortest reply %s allows takes %d tokens; max_tokens is %d",
                 r->chat.tool_schema ? "the tool call"
                 : r->chat.format_param ? r->chat.format_param : "response_format",
                 fl_cons_min_tokens(r->cons), r->chat.max_tokens);
        r->work_param = "max_tokens";
        srv_req_reject(r, SRV_E_BAD_REQUEST, msg);
        return;
    }
    if (fl_pages_needed(&s->model->cfg, (int32_t)r->n_ids, r->chat.max_tokens, &r->chat.dec) >
        s->n_pages) {
        snprintf(msg, sizeof msg, "%zu prompt tokens plus max_tokens %d need more KV pages than "
                 "the server has (%d); ask for fewer tokens", r->n_ids, r->chat.max_tokens,
                 s->n_pages);
        srv_req_reject(r, SRV_E_PROMPT_TOO_LONG, msg);
        return;
    }
    srv_prefix_lookup(r);
}

int srv_req_tokenize(srv_req *r)
{
    r->state = SRV_REQ_TOKENIZING;
    return uv_queue_work(&r->s->loop, &r->work, tokenize_work, tokenize_done);
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
        int need = srv_chat_branches(chat);
        if (s->n_reqs + need > s->cfg->max_seqs + s->cfg->max_queued) {
            *code = SRV_E_BUSY;
            snprintf(msg, msglen, "the server is busy: %d requests are running or waiting and "
                     "this one has %d branches; retry later", s->n_reqs, need);
            goto refuse;
        }
        srv_req *g = srv_group_start(s, ops, owner, chat, code, msg, msglen);
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
    if (chat->session_required && (!s->redis || !srv_redis_ready(s->redis))) {
        /* a conversation that must be read cannot be: not a turn without its history */
        free(r);
        *code = SRV_E_PREV_NOT_FOUND;
        snprintf(msg, msglen, "the previous response '%.64s' cannot be read now: Redis is not "
                 "connected", chat->session);
        goto refuse;
    }
    srv_req_init(r, s, ops, owner, chat);
    srv_req_link(r);
    if (r->chat.session && s->redis && srv_session_load(r))
        return r; /* tokenizing follows the answer (or its deadline) */
    if (srv_req_tokenize(r)) {
        srv_req_unlink(r);
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

void srv_req_deliver(srv *s, srv_ev *ev)
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
        r->reasoning_tokens = reasoning_tokens(r, ev);
        int32_t redis_tokens = ev->stats.cached_tokens - ev->stats.shared_tokens;
        s->m.kv_cached_tokens += (uint64_t)(redis_tokens > 0 ? redis_tokens : 0);
        s->m.shared_tokens += (uint64_t)(ev->stats.shared_tokens > 0 ? ev->stats.shared_tokens : 0);
        s->m.kv_pages_rejected += (uint64_t)(ev->stats.prefix_rejected > 0 ? ev->stats.prefix_rejected : 0);
        char q[80], seed[40] = "";
        if (srv_req_sampled(r))
            snprintf(seed, sizeof seed, " seed=%llu", (unsigned long long)r->chat.dec.seed);
        SRV_INFO(&s->log, "event=done req=%s serial=%llu finish=%s reply_tokens=%d forwards=%d "
                 "tpf=%.2f cached_tokens=%d ms=%.1f%s%s", srv_log_q(q, sizeof q, r->chat.id),
                 (unsigned long long)r->serial, srv_finish_name(ev->finish), ev->n_ids,
                 ev->stats.forwards, ev->stats.tpf, ev->stats.cached_tokens, now - r->t_start,
                 seed, req_orphaned(r) ? " orphaned=1" : "");
    }
    if (r->owner)
        r->ops->event(r->owner, r, ev);
    if (ev->type == FL_EV_DONE) {
        bool whole = ev->finish == FL_FINISH_STOP || ev->finish == FL_FINISH_LENGTH;
        if (whole) /* (after the owner: /v1/responses' answer is stored with the turn) */
            srv_session_save(r, ev);
        bool err = ev->finish == FL_FINISH_ERROR;
        req_end(r, &(srv_req_end){.finish = err ? "error" : srv_finish_name(ev->finish),
                                  .stats = &ev->stats, .n_ids = ev->n_ids,
                                  .code = err ? srv_ev_code(ev) : NULL,
                                  .text = whole ? ev->text : NULL, .len = ev->text_len,
                                  .stop_string = ev->stop_string, .stop_token = ev->stop_token});
    }
}
