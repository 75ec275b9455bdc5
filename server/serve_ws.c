/* serve_ws.c: WebSocket connections at /ws: the message handling of docs/protocol.md and
 * each connection's output queue.
 *
 * Output: frames wait in the connection's queue and go out one lws_write per WRITEABLE
 * callback. A draft is the only frame that may be replaced: while a block's draft is still
 * queued, a newer draft of that block overwrites it in place (and a commit kills it), so a
 * slow reader gets fewer, newer drafts and the queue does not grow with the step rate.
 * Commits, done and errors are never dropped; a client whose queue passes --ws-max-backlog,
 * or that accepts nothing for --ws-stall-timeout while output waits, is closed with 1008 and
 * a reason, and its requests are cancelled. */
#include <string.h>
#include <sys/socket.h>
#include <uv.h>

#include <libwebsockets.h>

#include "serve.h"
#include "serve_group.h"
#include "serve_request.h"
#include "logprobs.h"

struct srv_conn {
    srv *s;
    struct lws *wsi;
    uint64_t id;
    srv_outq out;
    srv_req *reqs;        /* this connection's live requests */
    int n_reqs;
    fl_buf rx;            /* the message being received (text; a binary one is only counted) */
    size_t rx_bytes;      /* its size so far, for the limit */
    bool rx_active, rx_binary;
    bool rx_paused;       /* input flow-controlled while output is backed up */
    bool authed;
    bool closing;         /* no more input handled; close once the queue is flushed */
    bool close_sent;      /* the close frame is handed to lws */
    int close_code;
    char close_reason[120];
    struct srv_conn *prev, *next;
};

/* ---- output queue ---- */

srv_out *srv_out_new(const char *data, size_t len)
{
    srv_out *o = calloc(1, sizeof *o);
    if (!o)
        return NULL;
    o->buf = malloc(LWS_PRE + len + 1);
    if (!o->buf) {
        free(o);
        return NULL;
    }
    memcpy(o->buf + LWS_PRE, data, len);
    o->len = len;
    o->block = -1;
    return o;
}

void srv_out_free(srv_out *o)
{
    if (!o)
        return;
    if (o->req && o->block >= 0 && o->req->draft_slot[o->block % SRV_DRAFT_SLOTS] == o)
        o->req->draft_slot[o->block % SRV_DRAFT_SLOTS] = NULL;
    free(o->buf);
    free(o);
}

void srv_outq_push(srv_outq *q, srv_out *o)
{
    o->next = NULL;
    if (q->tail)
        q->tail->next = o;
    else
        q->head = o;
    q->tail = o;
    q->bytes += o->len;
    q->n++;
}

srv_out *srv_outq_pop(srv_outq *q)
{
    srv_out *o = q->head;
    if (!o)
        return NULL;
    q->head = o->next;
    if (!q->head)
        q->tail = NULL;
    q->bytes -= o->len;
    q->n--;
    return o;
}

void srv_outq_clear(srv_outq *q)
{
    srv_out *o;
    while ((o = srv_outq_pop(q)))
        srv_out_free(o);
}

/* ---- sending ---- */

static void evict(srv_conn *c, const char *why);

static void arm(srv_conn *c)
{
    if (c->wsi)
        lws_callback_on_writable(c->wsi);
}

static void close_after(srv_conn *c, int code, const char *reason);

/* A frame that could not be made (out of memory) is a hole in the stream: the client would
   wait for a commit or a done that never comes. The connection is closed (1011) after the
   frames already queued, and its requests are cancelled, rather than going on without it. */
static void lost_frame(srv_conn *c)
{
    if (c->closing)
        return;
    SRV_WARN(&c->s->log, "event=ws_frame_lost conn=%llu reason=out_of_memory",
             (unsigned long long)c->id);
    for (srv_req *r = c->reqs; r; r = r->o_next)
        srv_req_cancel(r);
    close_after(c, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION, "internal error: out of memory");
}

/* Queues a frame (takes the malloc'd string; NULL: it could not be made). Returns the item or
 * NULL. */
static srv_out *send_str(srv_conn *c, char *s)
{
    if (c->closing && c->close_code == LWS_CLOSE_STATUS_POLICY_VIOLATION) {
        free(s); /* evicted: nothing more is queued */
        return NULL;
    }
    srv_out *o = s && !srv_fault(&c->s->faults, SRV_FAULT_WS_FRAME) ? srv_out_new(s, strlen(s))
                                                                    : NULL;
    free(s);
    if (!o) {
        lost_frame(c);
        return NULL;
    }
    o->t_queued = srv_now_ms(c->s);
    srv_outq_push(&c->out, o);
    arm(c);
    if (!c->rx_paused && c->wsi && c->out.bytes > c->s->cfg->ws_max_backlog / 4) {
        /* stop reading a client that sends faster than it reads (pings, errors): its input
           waits in the kernel, not as more output here */
        c->rx_paused = true;
        lws_rx_flow_control(c->wsi, 0);
    }
    if (c->out.bytes > c->s->cfg->ws_max_backlog) {
        evict(c, "client too slow: its output backlog passed the limit");
        return NULL;
    }
    return o;
}

static char *dumps(json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

static void send_error(srv_conn *c, const char *id, const char *code, const char *msg)
{
    srv_metrics_error(&c->s->m, code);
    send_str(c, srv_frame_error(id, code, msg));
    char q[80], m[200];
    SRV_INFO(&c->s->log, "event=error conn=%llu req=%s code=%s message=%s",
             (unsigned long long)c->id, srv_log_q(q, sizeof q, id ? id : ""), code,
             srv_log_q(m, sizeof m, msg));
}

/* Closes after what is queued has gone out. */
static void close_after(srv_conn *c, int code, const char *reason)
{
    if (c->closing)
        return;
    c->closing = true;
    c->close_code = code;
    snprintf(c->close_reason, sizeof c->close_reason, "%s", reason);
    arm(c);
    if (c->wsi) /* a client that never reads is not waited for forever */
        lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, 5);
}

static void evict(srv_conn *c, const char *why)
{
    if (c->closing && c->close_code == LWS_CLOSE_STATUS_POLICY_VIOLATION)
        return;
    srv *s = c->s;
    s->m.slow_closed++;
    SRV_WARN(&s->log, "event=slow_client conn=%llu backlog_bytes=%zu frames=%d reason=\"%s\"",
             (unsigned long long)c->id, c->out.bytes, c->out.n, why);
    srv_outq_clear(&c->out);
    for (srv_req *r = c->reqs; r; r = r->o_next)
        srv_req_cancel(r);
    c->closing = false; /* close_after sets it with the new reason */
    close_after(c, LWS_CLOSE_STATUS_POLICY_VIOLATION, why);
}

/* ---- request ownership ---- */

static void conn_add_req(srv_conn *c, srv_req *r)
{
    r->o_prev = NULL;
    r->o_next = c->reqs;
    if (c->reqs)
        c->reqs->o_prev = r;
    c->reqs = r;
    c->n_reqs++;
}

static void conn_drop_req(srv_conn *c, srv_req *r)
{
    if (r->o_prev)
        r->o_prev->o_next = r->o_next;
    else
        c->reqs = r->o_next;
    if (r->o_next)
        r->o_next->o_prev = r->o_prev;
    r->o_prev = r->o_next = NULL;
    c->n_reqs--;
}

static srv_req *find_req(srv_conn *c, const char *id)
{
    for (srv_req *r = c->reqs; r; r = r->o_next)
        if (!strcmp(r->chat.id, id))
            return r;
    return NULL;
}

static void ws_on_reject(void *owner, srv_req *r, const char *code, const char *msg)
{
    srv_conn *c = owner;
    if (r->parent) { /* one branch of a fan-out failed: the others go on */
        json_t *o = json_object();
        json_object_set_new(o, "type", json_string("error"));
        json_object_set_new(o, "id", json_string(r->chat.id));
        json_object_set_new(o, "segment", json_integer(r->segment));
        json_object_set_new(o, "code", json_string(code));
        json_object_set_new(o, "message", srv_json_text(msg));
        send_str(c, dumps(o));
        return;
    }
    conn_drop_req(c, r);
    send_str(c, srv_frame_error(r->chat.id, code, msg));
}

static void ws_on_outline(void *owner, srv_req *g, char **points, int n, const char *fallback)
{
    srv_conn *c = owner;
    if (c->closing)
        return;
    json_t *o = json_object(), *a = json_array();
    json_object_set_new(o, "type", json_string("outline"));
    json_object_set_new(o, "id", json_string(g->chat.id));
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_string(points[i]));
    json_object_set_new(o, "points", a);
    if (fallback)
        json_object_set_new(o, "fallback", json_string(fallback));
    send_str(c, dumps(o));
}

static void ws_on_group_done(void *owner, srv_req *g)
{
    srv_conn *c = owner;
    conn_drop_req(c, g);
    if (c->closing)
        return;
    json_t *o = json_object();
    json_object_set_new(o, "type", json_string("done"));
    json_object_set_new(o, "id", json_string(g->chat.id));
    /* the group's finish: cancelled when it was; else error if a branch failed; else stop */
    json_object_set_new(o, "finish", json_string(g->cancelled ? "cancelled" : g->any_error ? "error" : "stop"));
    if (srv_req_sampled(g))
        json_object_set_new(o, "seed", json_integer((json_int_t)g->chat.dec.seed));
    long long pt, ct, cached;
    srv_group_totals(g, &pt, &ct, &cached);
    json_t *u = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer(pt));
    json_object_set_new(u, "completion_tokens", json_integer(ct));
    json_object_set_new(u, "total_tokens", json_integer(pt + ct));
    json_object_set_new(u, "cached_tokens", json_integer(cached));
    long long reasoning = srv_group_reasoning(g);
    if (reasoning >= 0)
        json_object_set_new(u, "reasoning_tokens", json_integer(reasoning));
    json_object_set_new(o, "usage", u);
    json_object_set(o, "segments", g->seg_results);
    if (SRV_PAR_OUTLINED(g->chat.parallel))
        json_object_set_new(o, "outline_points", json_integer(g->n_outline));
    json_t *x = json_object();
    json_object_set_new(x, "ms_total", json_real(srv_now_ms(c->s) - g->t_start));
    json_object_set_new(x, "ms_first_update", json_real(g->t_first ? g->t_first - g->t_start : 0));
    json_object_set_new(o, "stats", x);
    send_str(c, dumps(o));
}

/* Renders a draft's tokens into {"t": text} / {"mask": true} items. */
static json_t *draft_tokens(const fl_tokenizer *t, const int32_t *tokens, int32_t n)
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


/* A draft's "new" and "edited" lists (docs/protocol.md) say what changed since the draft of
   the block that this client was last sent: new, masked there and decided now; edited,
   decided there with another token (token editing). A draft that replaces a queued one is
   compared with what the client had before that one, so nothing a client never saw is
   missed, and a token edited back to what the client shows is not marked. */
static void on_draft(srv_conn *c, srv_req *r, const srv_ev *ev)
{
    srv *s = c->s;
    int slot = ev->block % SRV_DRAFT_SLOTS;
    srv_out *old = r->draft_slot[slot];
    if (ev->n > FL_MAX_BLOCK)
        return;
    bool every = r->chat.every_step && !r->steps_coalesced;
    if (every && c->out.bytes > s->cfg->ws_max_backlog / 2) {
        /* a client that reads slower than the steps come: it gets the newest draft of each
           block from here on, and is told so once, instead of being closed */
        r->steps_coalesced = true;
        every = false;
        s->m.steps_coalesced++;
        json_t *n = json_object();
        json_object_set_new(n, "type", json_string("notice"));
        json_object_set_new(n, "id", json_string(r->chat.id));
        if (r->parent)
            json_object_set_new(n, "segment", json_integer(r->segment));
        json_object_set_new(n, "code", json_string("drafts_coalesced"));
        json_object_set_new(n, "message",
                            json_string("the client reads slower than the steps come: from here "
                                        "on drafts are coalesced (the newest of each block)"));
        json_object_set_new(n, "block", json_integer(ev->block));
        json_object_set_new(n, "step", json_integer(ev->step));
        send_str(c, dumps(n));
        if (c->closing)
            return;
    }
    /* every step: each draft is a frame of its own, never replaced nor killed by the commit */
    bool queued = !every && old && old->block == ev->block; /* still waiting: replaced in place */
    if (!r->view[slot]) {
        if (!(r->view[slot] = malloc(sizeof(int32_t) * 2 * FL_MAX_BLOCK)))
            return; /* out of memory: a draft may be dropped (a later one or the commit follows) */
        r->view_block[slot] = -1;
    }
    int32_t *seen = r->view[slot], *last = seen + FL_MAX_BLOCK;
    bool same = r->view_block[slot] == ev->block;
    int32_t base[FL_MAX_BLOCK]; /* (n) what the client has of this block */
    for (int32_t i = 0; i < ev->n; i++)
        base[i] = !same ? -1 : queued ? seen[i] : last[i];
    json_t *toks = draft_tokens(s->model->tok, ev->tokens, ev->n);
    if (!toks)
        return;
    json_t *o = json_object();
    json_object_set_new(o, "type", json_string("draft"));
    json_object_set_new(o, "id", json_string(r->chat.id));
    if (r->parent)
        json_object_set_new(o, "segment", json_integer(r->segment));
    json_object_set_new(o, "block", json_integer(ev->block));
    json_object_set_new(o, "step", json_integer(ev->step));
    if (r->chat.every_step) /* when the engine gave it, from the chat frame (ms) */
        json_object_set_new(o, "ms", json_real(ev->t_ms - (r->parent ? r->parent : r)->t_start));
    json_object_set_new(o, "tokens", toks);
    json_t *fresh = json_array(), *edited = json_array();
    for (int32_t i = 0; i < ev->n; i++) {
        if (ev->tokens[i] >= 0 && base[i] < 0)
            json_array_append_new(fresh, json_integer(i));
        else if (ev->tokens[i] >= 0 && ev->tokens[i] != base[i])
            json_array_append_new(edited, json_integer(i));
    }
    json_object_set_new(o, "new", fresh);
    json_object_set_new(o, "edited", edited);
    char *str = dumps(o);
    if (!str)
        return;
    if (queued) {
        /* still queued: the newer draft replaces it in place */
        size_t len = strlen(str);
        unsigned char *nb = malloc(LWS_PRE + len + 1);
        if (nb) {
            memcpy(nb + LWS_PRE, str, len);
            c->out.bytes = c->out.bytes - old->len + len;
            free(old->buf);
            old->buf = nb;
            old->len = len;
            s->m.drafts_coalesced++;
            memcpy(last, ev->tokens, sizeof(int32_t) * (size_t)ev->n);
        }
        free(str);
        return;
    }
    if (old)
        old->req = NULL; /* a different block's draft keeps its place but loses the slot */
    srv_out *o2 = send_str(c, str);
    if (o2) {
        o2->req = every ? NULL : r;
        o2->block = ev->block;
        r->draft_slot[slot] = every ? NULL : o2;
        memcpy(seen, base, sizeof(int32_t) * (size_t)ev->n);
        memcpy(last, ev->tokens, sizeof(int32_t) * (size_t)ev->n);
        r->view_block[slot] = ev->block;
    }
}

static void kill_draft(srv_conn *c, srv_req *r, int32_t block)
{
    srv_out *d = r->draft_slot[block % SRV_DRAFT_SLOTS];
    if (d && d->block == block) {
        c->out.bytes -= d->len;
        d->len = 0; /* a committed block's draft is stale: skipped when its turn comes */
        d->req = NULL;
        r->draft_slot[block % SRV_DRAFT_SLOTS] = NULL;
    }
}

/* The reasoning/answer split of a reply (reasoning.h): a commit carries its block's parts as
   "reasoning" and "content"; done carries, as "reasoning_tail"/"content_tail", what the split
   held back at the end (a tag cut off by the reply's end). Out of memory: the parts are left
   out rather than sent wrong. */
static void reason_fields(json_t *o, srv_reason *rs, const char *text, size_t n, bool end)
{
    fl_buf a = {0}, b = {0};
    int rc = end ? srv_reason_finish(rs, &a, &b) : srv_reason_push(rs, text, n, &a, &b);
    if (!rc && !end) {
        json_object_set_new(o, "reasoning", json_stringn(a.data ? a.data : "", a.len));
        json_object_set_new(o, "content", json_stringn(b.data ? b.data : "", b.len));
    } else if (!rc) {
        if (a.len)
            json_object_set_new(o, "reasoning_tail", json_stringn(a.data, a.len));
        if (b.len)
            json_object_set_new(o, "content_tail", json_stringn(b.data, b.len));
    }
    fl_buf_free(&a);
    fl_buf_free(&b);
}

/* Tool calls (toolcalls.h) in a commit's content (its "content" part when the reply is split,
   else its text), kept for done. */
static void ws_tools_push(srv_req *r, const json_t *commit, const char *text, size_t n)
{
    const json_t *cj = commit ? json_object_get(commit, "content") : NULL;
    if (cj) {
        text = json_string_value(cj);
        n = json_string_length(cj);
    }
    if (!r->tool_calls && !(r->tool_calls = json_array()))
        return;
    fl_buf rest = {0};
    srv_tools_push(&r->tools, text, n, &rest, r->tool_calls);
    fl_buf_free(&rest);
}

static void on_done(srv_conn *c, srv_req *r, const srv_ev *ev)
{
    if (r->parent) {
        if (ev->finish == FL_FINISH_ERROR) {
            ws_on_reject(c, r, srv_ev_code(ev), ev->error ? ev->error : "the engine failed");
            return;
        }
    } else {
        conn_drop_req(c, r);
    }
    if (ev->finish == FL_FINISH_ERROR) {
        send_error(c, r->chat.id, srv_ev_code(ev), ev->error ? ev->error : "the engine failed");
        return;
    }
    const fl_seq_stats *st = &ev->stats;
    json_t *o = json_object();
    /* a branch's own end is "segment_done"; the request's "done" follows its last branch */
    json_object_set_new(o, "type", json_string(r->parent ? "segment_done" : "done"));
    json_object_set_new(o, "id", json_string(r->chat.id));
    if (r->parent)
        json_object_set_new(o, "segment", json_integer(r->segment));
    if (r->chat.session)
        json_object_set_new(o, "session", json_string(r->chat.session));
    json_object_set_new(o, "finish", json_string(srv_finish_name(ev->finish)));
    if (ev->finish == FL_FINISH_STOP && (ev->stop_string >= 0 || ev->stop_token >= 0))
        json_object_set_new(o, "stop_reason", srv_stop_reason(r, ev->stop_string, ev->stop_token));
    if (srv_req_sampled(r))
        json_object_set_new(o, "seed", json_integer((json_int_t)r->chat.dec.seed));
    if (r->reason.on)
        reason_fields(o, &r->reason, NULL, 0, true);
    if (r->tools.on) {
        const json_t *tail = json_object_get(o, "content_tail");
        ws_tools_push(r, NULL, tail ? json_string_value(tail) : "", tail ? json_string_length(tail) : 0);
        fl_buf rest = {0};
        srv_tools_finish(&r->tools, &rest, r->tool_calls);
        fl_buf_free(&rest);
        if (r->tool_calls && json_array_size(r->tool_calls))
            json_object_set(o, "tool_calls", r->tool_calls);
    }
    json_t *u = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer(st->prompt_tokens));
    json_object_set_new(u, "completion_tokens", json_integer(ev->n_ids));
    json_object_set_new(u, "total_tokens", json_integer(st->prompt_tokens + ev->n_ids));
    json_object_set_new(u, "cached_tokens", json_integer(st->cached_tokens));
    if (r->n_history)
        json_object_set_new(u, "history_messages", json_integer((json_int_t)(r->n_history - r->n_dropped)));
    if (r->reasoning_tokens >= 0)
        json_object_set_new(u, "reasoning_tokens", json_integer(r->reasoning_tokens));
    json_object_set_new(o, "usage", u);
    json_t *x = json_object();
    json_object_set_new(x, "tpf", json_real(st->tpf));
    json_object_set_new(x, "forwards", json_integer(st->forwards));
    json_object_set_new(x, "decode_forwards", json_integer(st->decode_forwards));
    json_object_set_new(x, "store_forwards", json_integer(st->store_forwards));
    json_object_set_new(x, "blocks", json_integer(st->blocks));
    json_object_set_new(x, "edits", json_integer(st->edits));
    json_object_set_new(x, "post_steps", json_integer(st->post_steps));
    json_object_set_new(x, "constrained", json_integer(st->constrained));
    json_object_set_new(x, "ms_queued", json_real(st->ms_queued));
    json_object_set_new(x, "ms_prefill", json_real(st->ms_prefill));
    json_object_set_new(x, "ms_decode", json_real(st->ms_decode));
    json_object_set_new(x, "ms_total", json_real(srv_now_ms(c->s) - r->t_start));
    json_object_set_new(x, "ms_first_update", json_real(r->t_first ? r->t_first - r->t_start : 0));
    json_object_set_new(o, "stats", x);
    send_str(c, dumps(o));
}

static void ws_on_event(void *owner, srv_req *r, const srv_ev *ev)
{
    srv_conn *c = owner;
    if (c->closing) { /* nobody will read it */
        if (ev->type == FL_EV_DONE && !r->parent)
            conn_drop_req(c, r);
        return;
    }
    switch (ev->type) {
    case FL_EV_DRAFT:
        on_draft(c, r, ev);
        break;
    case FL_EV_COMMIT: {
        kill_draft(c, r, ev->block);
        json_t *o = json_object();
        json_object_set_new(o, "type", json_string("commit"));
        json_object_set_new(o, "id", json_string(r->chat.id));
        if (r->parent)
            json_object_set_new(o, "segment", json_integer(r->segment));
        json_object_set_new(o, "block", json_integer(ev->block));
        json_object_set_new(o, "text", json_stringn(ev->text, ev->text_len));
        if (r->reason.on)
            reason_fields(o, &r->reason, ev->text, ev->text_len, false);
        if (r->tools.on) /* the calls go out with done */
            ws_tools_push(r, o, ev->text, ev->text_len);
        if (r->chat.logprobs) { /* the block's tokens' (logprobs.h); never a commit without */
            json_t *lp = srv_lp_content(c->s->model->tok, ev->ids, ev->lps, ev->top_ids,
                                        ev->top_lps, ev->n_lps, ev->n_top);
            if (!lp || json_object_set_new(o, "logprobs", lp)) {
                json_decref(o);
                o = NULL; /* as a frame that cannot be made: the connection closes (1011) */
            }
        }
        c->s->m.commits_sent++;
        send_str(c, dumps(o));
        break;
    }
    case FL_EV_DONE:
        on_done(c, r, ev);
        break;
    }
}

/* A connection as the owner of its requests (serve.h). */
static const srv_owner_ops ws_owner = {
    .event = ws_on_event,
    .refused = ws_on_reject,
    .group_done = ws_on_group_done,
    .outline = ws_on_outline,
};

/* ---- input ---- */

static void handle_chat(srv_conn *c, const json_t *msg, const char *id)
{
    srv *s = c->s;
    if (!id) {
        send_error(c, NULL, SRV_E_BAD_REQUEST, "'id' must be a string of 1..128 bytes");
        return;
    }
    if (find_req(c, id)) {
        send_error(c, id, SRV_E_DUPLICATE_ID, "a request with this id is still running on this "
                                              "connection");
        return;
    }
    if (c->n_reqs >= s->cfg->max_conn_requests) {
        char m[160];
        snprintf(m, sizeof m, "this connection already runs %d requests (the limit); wait for "
                 "one to finish", c->n_reqs);
        send_error(c, id, SRV_E_TOO_MANY, m);
        return;
    }
    srv_limits L = {s->cfg->max_tokens_limit, s->cfg->gen.max_tokens, s->cfg->gen.dec,
                     s->cfg->enable_thinking, s->model->cfg.vocab};
    srv_chat chat;
    const char *code = NULL;
    char m[FL_ERR_MSG];
    if (srv_parse_chat_ws(msg, &L, &chat, &code, m, sizeof m)) {
        srv_chat_free(&chat);
        send_error(c, id, code, m);
        return;
    }
    srv_req *r = srv_req_start(s, &ws_owner, c, &chat, &code, m, sizeof m);
    if (!r) {
        srv_chat_free(&chat);
        send_str(c, srv_frame_error(id, code, m));
        return;
    }
    conn_add_req(c, r);
    char q[80];
    SRV_INFO(&s->log, "event=chat conn=%llu req=%s serial=%llu messages=%zu max_tokens=%d",
             (unsigned long long)c->id, srv_log_q(q, sizeof q, id), (unsigned long long)r->serial,
             r->chat.n_msgs, r->chat.max_tokens);
}

static void handle_message(srv_conn *c, const char *data, size_t len)
{
    srv *s = c->s;
    json_error_t je;
    json_t *msg = json_loadb(data, len, JSON_REJECT_DUPLICATES, &je);
    if (!msg) {
        char m[300];
        snprintf(m, sizeof m, "not valid JSON: %s at line %d column %d", je.text, je.line,
                 je.column);
        send_error(c, NULL, SRV_E_BAD_JSON, m);
        return;
    }
    if (!json_is_object(msg)) {
        send_error(c, NULL, SRV_E_BAD_JSON, "a message must be a JSON object with a 'type'");
        json_decref(msg);
        return;
    }
    const json_t *jid = json_object_get(msg, "id");
    const char *id = srv_id_ok(jid) ? json_string_value(jid) : NULL;
    const char *type = json_string_value(json_object_get(msg, "type"));
    if (!type) {
        send_error(c, id, SRV_E_BAD_REQUEST, "'type' must be a string: chat, cancel, ping or auth");
    } else if (!strcmp(type, "auth")) {
        const char *key = json_string_value(json_object_get(msg, "key"));
        if (s->cfg->api_key && (!key || strcmp(key, s->cfg->api_key))) {
            send_error(c, id, SRV_E_UNAUTHORIZED, "wrong API key");
            close_after(c, LWS_CLOSE_STATUS_POLICY_VIOLATION, "unauthorized");
        } else {
            c->authed = true;
            send_str(c, strdup("{\"type\":\"auth\",\"ok\":true}"));
        }
    } else if (!c->authed) {
        send_error(c, id, SRV_E_UNAUTHORIZED, "this server needs an API key: send "
                   "{\"type\":\"auth\",\"key\":...} first or an Authorization: Bearer header");
        close_after(c, LWS_CLOSE_STATUS_POLICY_VIOLATION, "unauthorized");
    } else if (!strcmp(type, "chat")) {
        if (jid && !id)
            send_error(c, NULL, SRV_E_BAD_REQUEST, "'id' must be a string of 1..128 bytes");
        else
            handle_chat(c, msg, id);
    } else if (!strcmp(type, "cancel")) {
        srv_req *r = id ? find_req(c, id) : NULL;
        if (!id)
            send_error(c, NULL, SRV_E_BAD_REQUEST, "cancel needs the request's 'id' (a string)");
        else if (!r)
            send_error(c, id, SRV_E_UNKNOWN_ID, "no running request has this id (it may have "
                       "finished)");
        else
            srv_req_cancel(r);
    } else if (!strcmp(type, "ping")) {
        json_t *o = json_object();
        json_object_set_new(o, "type", json_string("pong"));
        if (id)
            json_object_set_new(o, "id", json_string(id));
        send_str(c, dumps(o));
    } else {
        char m[160], q[80];
        snprintf(m, sizeof m, "unknown message type %s (chat, cancel, ping, auth)",
                 srv_log_q(q, 64, type));
        send_error(c, id, SRV_E_UNKNOWN_TYPE, m);
    }
    json_decref(msg);
}

static void on_receive(srv_conn *c, struct lws *wsi, const void *in, size_t len)
{
    srv *s = c->s;
    if (c->closing)
        return;
    if (!c->rx_active) {
        c->rx_active = true;
        c->rx_binary = lws_frame_is_binary(wsi);
        c->rx.len = 0;
        c->rx_bytes = 0;
    }
    c->rx_bytes += len;
    if (c->rx_bytes > s->cfg->max_message) {
        char m[160];
        snprintf(m, sizeof m, "a message may have at most %zu bytes", s->cfg->max_message);
        send_error(c, NULL, SRV_E_TOO_LARGE, m);
        close_after(c, LWS_CLOSE_STATUS_MESSAGE_TOO_LARGE, "message too large");
        fl_buf_free(&c->rx);
        return;
    }
    if (!c->rx_binary && len && fl_buf_append(&c->rx, in, len)) {
        send_error(c, NULL, SRV_E_INTERNAL, "out of memory");
        close_after(c, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION, "out of memory");
        return;
    }
    if (!lws_is_final_fragment(wsi))
        return;
    c->rx_active = false;
    if (c->rx_binary) {
        send_error(c, NULL, SRV_E_BINARY, "binary frames are not part of the protocol; send JSON "
                   "text frames");
        return;
    }
    if (!srv_utf8_valid((const unsigned char *)c->rx.data, c->rx.len)) {
        send_error(c, NULL, SRV_E_INVALID_UTF8, "a text frame was not valid UTF-8");
        close_after(c, LWS_CLOSE_STATUS_INVALID_PAYLOAD, "invalid UTF-8");
        c->rx.len = 0;
        return;
    }
    handle_message(c, c->rx.data ? c->rx.data : "", c->rx.len);
    c->rx.len = 0;
    if (c->rx.cap > 65536) /* one big message should not pin its buffer for the connection */
        fl_buf_free(&c->rx);
}

/* ---- lifecycle ---- */

/* Writes a whole JSON error response during the upgrade callback. */
static int reject_upgrade(struct lws *wsi, int status, const char *code, const char *msg)
{
    char *body = srv_frame_error(NULL, code, msg);
    if (!body)
        return -1;
    size_t len = strlen(body);
    unsigned char buf[LWS_PRE + 1024], *start = buf + LWS_PRE, *p = start, *end = buf + sizeof buf - 1;
    int rc = 1;
    if (lws_add_http_common_headers(wsi, (unsigned)status, "application/json", len, &p, end) ||
        lws_finalize_write_http_header(wsi, start, &p, end))
        rc = -1;
    if (rc > 0) {
        unsigned char *b = malloc(LWS_PRE + len);
        if (!b || (memcpy(b + LWS_PRE, body, len), lws_write(wsi, b + LWS_PRE, len,
                                                               LWS_WRITE_HTTP_FINAL) < (int)len))
            rc = -1;
        free(b);
    }
    free(body);
    return rc;
}

static bool bearer_ok(struct lws *wsi, const char *key)
{
    char h[512];
    int n = lws_hdr_copy(wsi, h, sizeof h, WSI_TOKEN_HTTP_AUTHORIZATION);
    return n > 7 && !strncasecmp(h, "Bearer ", 7) && !strcmp(h + 7, key);
}

int srv_ws_confirm_upgrade(srv *s, struct lws *wsi, const char *proto)
{
    char uri[256] = "", origin[256] = "";
    lws_hdr_copy(wsi, uri, sizeof uri, WSI_TOKEN_GET_URI);
    int status = 0;
    const char *code = NULL, *msg = NULL;
    if (!proto || strcasecmp(proto, "websocket")) {
        status = 400, code = SRV_E_BAD_REQUEST, msg = "only WebSocket upgrades are served";
    } else if (strcmp(uri, "/ws")) {
        status = 404, code = SRV_E_BAD_REQUEST, msg = "the WebSocket endpoint is /ws";
    } else if (lws_hdr_copy(wsi, origin, sizeof origin, WSI_TOKEN_ORIGIN) > 0 &&
               !srv_origin_allowed(s->cfg, origin)) {
        status = 403, code = SRV_E_UNAUTHORIZED, msg = "this Origin is not allowed";
    } else if (s->cfg->api_key && lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_AUTHORIZATION) &&
               !bearer_ok(wsi, s->cfg->api_key)) {
        status = 401, code = SRV_E_UNAUTHORIZED, msg = "wrong API key";
    } else if (s->draining) {
        status = 503, code = SRV_E_SHUTTING_DOWN, msg = "the server is shutting down";
    } else if (s->n_conns >= s->cfg->max_connections) {
        status = 503, code = SRV_E_BUSY, msg = "too many WebSocket connections; retry later";
    }
    if (!status)
        return 0;
    s->m.ws_refused++;
    srv_metrics_error(&s->m, code);
    srv_metrics_http(&s->m, status);
    char q[300];
    SRV_INFO(&s->log, "event=ws_refused status=%d code=%s uri=%s origin=%s", status, code,
             srv_log_q(q, 150, uri), srv_log_q(q + 150, 150, origin));
    return reject_upgrade(wsi, status, code, msg);
}

static void on_established(srv *s, struct lws *wsi, srv_pss *pss)
{
    srv_conn *c = calloc(1, sizeof *c);
    if (!c) {
        lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
        return;
    }
    c->s = s;
    c->wsi = wsi;
    c->id = ++s->next_conn;
    c->authed = !s->cfg->api_key || (lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_AUTHORIZATION) &&
                                     bearer_ok(wsi, s->cfg->api_key));
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    s->n_conns++;
    s->m.ws_accepted++;
    pss->kind = SRV_PSS_WS;
    pss->obj = c;
    if (s->cfg->ws_sndbuf > 0) {
        int v = s->cfg->ws_sndbuf;
        setsockopt(lws_get_socket_fd(wsi), SOL_SOCKET, SO_SNDBUF, &v, sizeof v);
    }
    char peer[64] = "";
    lws_get_peer_simple(wsi, peer, sizeof peer);
    SRV_INFO(&s->log, "event=ws_open conn=%llu peer=%s authed=%d", (unsigned long long)c->id, peer,
             c->authed);
    json_t *o = json_object();
    json_object_set_new(o, "type", json_string("hello"));
    json_object_set_new(o, "server", json_string("fogline " FL_VERSION));
    json_object_set_new(o, "model", json_string(s->model_id));
    json_object_set_new(o, "block_size", json_integer(s->model->cfg.block_size));
    json_object_set_new(o, "weights", json_string(fl_wformat_name(s->backend->weights)));
    json_object_set_new(o, "kv_format", json_string(fl_kvformat_name(s->backend->kv)));
    json_object_set_new(o, "auth_required", json_boolean(!c->authed));
    /* whether a chat's session is kept (in Redis): a client can then forget one (DELETE
       /sessions/ID) */
    json_object_set_new(o, "sessions", json_boolean(s->redis != NULL));
    json_t *l = json_object();
    json_object_set_new(l, "max_message_bytes", json_integer((json_int_t)s->cfg->max_message));
    json_object_set_new(l, "max_tokens", json_integer(s->cfg->max_tokens_limit));
    json_object_set_new(l, "max_prompt_tokens", json_integer(s->cfg->max_prompt_tokens));
    json_object_set_new(l, "max_requests", json_integer(s->cfg->max_conn_requests));
    json_object_set_new(o, "limits", l);
    /* what a chat gets for each decoding field it leaves out: clients (the web UI) show these
       and send only what the user changed, so the model's own decoding applies by default */
    if (fl_gen_opts_json(o, &s->cfg->gen.dec, s->dec_src)) {
        /* a hello without the defaults would have clients guess them: close instead */
        json_decref(o);
        SRV_ERROR(&s->log, "event=ws_hello_failed conn=%llu reason=\"out of memory\"",
                  (unsigned long long)c->id);
        lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
        return;
    }
    send_str(c, dumps(o));
}

static void on_closed(srv *s, srv_pss *pss)
{
    srv_conn *c = pss->obj;
    pss->obj = NULL;
    pss->kind = SRV_PSS_NONE;
    if (!c)
        return;
    int n = c->n_reqs;
    while (c->reqs) {
        srv_req *r = c->reqs;
        conn_drop_req(c, r);
        srv_req_orphan(r);
    }
    srv_outq_clear(&c->out);
    fl_buf_free(&c->rx);
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->n_conns--;
    SRV_INFO(&s->log, "event=ws_close conn=%llu cancelled=%d", (unsigned long long)c->id, n);
    free(c);
}

static int on_writeable(srv_conn *c, struct lws *wsi)
{
    srv_out *o;
    while ((o = srv_outq_pop(&c->out)) && o->len == 0)
        srv_out_free(o); /* killed drafts */
    if (o) {
        bool draft = o->block >= 0;
        int n = lws_write(wsi, o->buf + LWS_PRE, o->len, LWS_WRITE_TEXT);
        srv_out_free(o);
        if (n < 0)
            return -1;
        if (draft)
            c->s->m.drafts_sent++;
        if (c->rx_paused && c->out.bytes < c->s->cfg->ws_max_backlog / 8) {
            c->rx_paused = false;
            lws_rx_flow_control(wsi, 1);
        }
        if (c->out.n || c->closing)
            lws_callback_on_writable(wsi);
        return 0;
    }
    if (c->closing && !c->close_sent) {
        /* Returning -1 from WRITEABLE makes lws 4.1 kill the socket without the close frame
           (the POLLOUT path closes twice). One synchronous close call takes the polite path
           instead: lws queues the close frame with our reason and waits for the ack; the wsi
           stays valid until LWS_CALLBACK_CLOSED. */
        c->close_sent = true;
        lws_close_reason(wsi, (enum lws_close_status)c->close_code, (unsigned char *)c->close_reason,
                         strlen(c->close_reason));
        lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_SYNC);
    }
    return 0;
}

int srv_ws_callback(struct lws *wsi, int reason, void *user, void *in, size_t len)
{
    srv *s = lws_context_user(lws_get_context(wsi));
    srv_pss *pss = user;
    switch (reason) {
    case LWS_CALLBACK_ESTABLISHED:
        if (pss)
            on_established(s, wsi, pss);
        break;
    case LWS_CALLBACK_RECEIVE:
        if (pss && pss->kind == SRV_PSS_WS && pss->obj)
            on_receive(pss->obj, wsi, in, len);
        break;
    case LWS_CALLBACK_SERVER_WRITEABLE:
        if (pss && pss->kind == SRV_PSS_WS && pss->obj)
            return on_writeable(pss->obj, wsi);
        break;
    case LWS_CALLBACK_CLOSED:
        if (pss && pss->kind == SRV_PSS_WS)
            on_closed(s, pss);
        break;
    default:
        break;
    }
    return 0;
}

void srv_ws_backlog(srv *s, size_t *bytes, int *paused, int *choked)
{
    *bytes = 0;
    *paused = *choked = 0;
    for (srv_conn *c = s->conns; c; c = c->next) {
        *bytes += c->out.bytes;
        *paused += c->rx_paused;
        *choked += c->wsi && lws_send_pipe_choked(c->wsi);
    }
}

void srv_ws_tick(srv *s)
{
    double now = srv_now_ms(s);
    for (srv_conn *c = s->conns; c; c = c->next)
        if (!c->closing && c->out.head && now - c->out.head->t_queued > s->cfg->ws_stall_s * 1e3)
            evict(c, "client too slow: output waited too long for it");
}

void srv_ws_close_all(srv *s, int code, const char *reason)
{
    for (srv_conn *c = s->conns; c; c = c->next)
        close_after(c, code, reason);
}
