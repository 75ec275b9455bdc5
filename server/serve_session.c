/* serve_session.c: what a request keeps in Redis (serve_session.h): its session's earlier turns,
 * read before the prompt is rendered and written after a completed turn, and its prompt's cached
 * KV pages, read before it is submitted. Redis away or slow is never the client's error: the
 * turn runs without its history or its cached pages, and the miss is counted. */
#include <hiredis/hiredis.h>
#include <stdlib.h>
#include <string.h>

#include "reasoning.h"
#include "redis.h"
#include "serve.h"
#include "serve_request.h"
#include "serve_session.h"
#include "toolcalls.h"

/* ---- sessions in Redis: "fogline:session:<id>" = {"v":1,"messages":[...],"ids":[...]} ----
 * A message is {"role", "content"}: system, user, assistant or tool; an assistant's tool calls
 * are in "tool_calls_text", the text the chat template takes (srv_chat.calls: a JSON array's
 * text, each call's arguments spliced in as written), so that the stored turns render exactly
 * as the client's own messages would. */

/* Whether s[0, n) is a JSON array's text (what the template takes as a message's calls). */
static bool calls_text_ok(const char *s, size_t n)
{
    json_error_t je;
    json_t *v = json_loadb(s, n, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &je);
    bool ok = json_is_array(v) && json_array_size(v) > 0;
    json_decref(v);
    return ok;
}

static void session_key(const char *id, char *out, size_t n)
{
    snprintf(out, n, "fogline:session:%s", id);
}

/* A stored response continued (previous_response_id): its input items and output come first
   in this one's input_items (a record without them, written before they were kept, adds
   none). */
static void prev_items(srv_req *r, const json_t *o)
{
    if (!r->chat.session_required)
        return;
    json_t *all = json_array();
    const json_t *in = json_object_get(o, "input_items");
    const json_t *out = json_object_get(json_object_get(o, "response"), "output");
    if (all && json_is_array(in))
        json_array_extend(all, (json_t *)in);
    if (all && json_is_array(out))
        json_array_extend(all, (json_t *)out);
    json_decref(r->prev_items);
    r->prev_items = all;
}

/* The answer part of an assistant turn as Qwen3's template reads one back: after the last
   </think>, leading newlines dropped (the whole text without one). */
static void answer_part(const char *s, size_t n, const char **a, size_t *an)
{
    const char *c = fl_memrstr(s, n, "</think>");
    size_t k = c ? (size_t)(c - s) + 8 : 0;
    while (c && k < n && s[k] == '\n')
        k++;
    *a = s + k;
    *an = n - k;
}

/* Whether the client's message x is the stored message m: the same role and content; with a
   template that drops earlier reasoning (Qwen3's), an assistant turn whose answer parts are the
   same is the same turn (a client may send back the raw reply, as the web page does, or the
   answer alone, as an API client does; the session keeps the answer). */
static bool same_message(const srv_req *r, const fl_chat_msg *x, const json_t *m)
{
    const json_t *c = json_object_get(m, "content");
    const char *role = json_string_value(json_object_get(m, "role"));
    const char *s = json_string_value(c);
    size_t n = json_string_length(c), xn = strlen(x->content);
    if (strcmp(x->role, role))
        return false;
    if (xn == n && !memcmp(x->content, s, n))
        return true;
    if (strcmp(role, "assistant") || fl_tokenizer_chat_kind(r->s->model->tok) != FL_CHAT_QWEN3)
        return false;
    const char *a, *b;
    size_t an, bn;
    answer_part(x->content, xn, &a, &an);
    answer_part(s, n, &b, &bn);
    return an == bn && !memcmp(a, b, an);
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
    bool with_calls = false;
    for (size_t i = 0; ok && i < n; i++) {
        json_t *m = json_array_get(ms, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        ok = role && json_is_string(json_object_get(m, "content")) &&
             (!strcmp(role, "system") || !strcmp(role, "user") || !strcmp(role, "assistant") ||
              !strcmp(role, "tool"));
        json_t *tc = json_object_get(m, "tool_calls_text");
        if (ok && tc)
            ok = json_is_string(tc) && !strcmp(role, "assistant") &&
                 calls_text_ok(json_string_value(tc), json_string_length(tc));
        with_calls |= ok && (tc || !strcmp(role, "tool"));
    }
    /* the stored turns go first, after a response's instructions (they are the request's own
       and come first, the history after them) */
    size_t at = r->chat.instructions ? 1 : 0;
    /* a client that sends the whole conversation (the web UI does) already starts with the
       stored turns: nothing to prepend */
    bool full = ok && r->chat.n_msgs - at > n;
    for (size_t i = 0; full && i < n; i++)
        full = same_message(r, &r->chat.msgs[at + i], json_array_get(ms, i));
    if (full) {
        r->n_history = n;
        r->hist_at = at;
        prev_items(r, o);
        json_decref(o);
        return true;
    }
    size_t total = n + r->chat.n_msgs;
    fl_chat_msg *all = ok ? calloc(total, sizeof *all) : NULL;
    /* the template's tool calls, aligned with the messages, when either side has any */
    bool calls_too = with_calls || r->chat.calls;
    char **calls = ok && calls_too ? calloc(total, sizeof(char *)) : NULL;
    if (ok && (!all || (calls_too && !calls)))
        ok = false;
    for (size_t i = 0; ok && i < n; i++) {
        json_t *m = json_array_get(ms, i);
        json_t *c = json_object_get(m, "content"), *tc = json_object_get(m, "tool_calls_text");
        fl_chat_msg *x = &all[at + i];
        x->role = strdup(json_string_value(json_object_get(m, "role")));
        x->content = strndup(json_string_value(c), json_string_length(c));
        if (!x->role || !x->content ||
            (tc && !(calls[at + i] = strndup(json_string_value(tc), json_string_length(tc)))))
            ok = false;
    }
    if (!ok) {
        for (size_t i = 0; all && i < n; i++) {
            free((void *)all[at + i].role);
            free((void *)all[at + i].content);
            if (calls)
                free(calls[at + i]);
        }
        free(all);
        free(calls);
        json_decref(o);
        return false;
    }
    /* the request's messages around the history: [0, at) before it, the rest after */
    size_t rest = r->chat.n_msgs - at;
    memcpy(all, r->chat.msgs, sizeof *all * at);
    memcpy(all + at + n, r->chat.msgs + at, sizeof *all * rest);
    free(r->chat.msgs);
    r->chat.msgs = all;
    if (calls) {
        if (r->chat.calls) {
            memcpy(calls, r->chat.calls, sizeof *calls * at);
            memcpy(calls + at + n, r->chat.calls + at, sizeof *calls * rest);
        }
        free(r->chat.calls);
        r->chat.calls = calls;
        r->chat.n_calls = total;
    }
    r->chat.tool_msgs |= with_calls;
    r->chat.n_msgs = total;
    r->n_history = n;
    r->hist_at = at;
    prev_items(r, o);
    json_decref(o);
    return true;
}

static void session_read(struct redisReply *rp, void *ud)
{
    srv_req *r = ud;
    srv *s = r->s;
    if (r->cancelled) {
        srv_req_end_cancelled(r);
        return;
    }
    char q[80];
    if (r->chat.session_required && !(rp && rp->type == REDIS_REPLY_STRING &&
                                      session_merge(r, rp->str, (size_t)rp->len))) {
        /* previous_response_id: a conversation that is not there (expired, never stored,
           another server's Redis, Redis away) is the client's answer, not a turn without it */
        bool gone = rp && rp->type == REDIS_REPLY_NIL;
        if (gone)
            s->m.session_misses++;
        else
            s->m.session_errors++;
        char m[200];
        snprintf(m, sizeof m, "the previous response '%.64s' %s", r->chat.session,
                 gone ? "was not found (not stored, or expired after --redis-session-ttl)"
                 : rp && rp->type == REDIS_REPLY_STRING ? "is stored in a form this server cannot read"
                                                        : "cannot be read now: Redis did not answer");
        r->work_param = "previous_response_id";
        srv_req_reject(r, SRV_E_PREV_NOT_FOUND, m);
        return;
    }
    if (r->chat.session_required) {
        s->m.session_hits++;
    } else if (rp && rp->type == REDIS_REPLY_STRING) {
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
    if (srv_req_tokenize(r))
        srv_req_reject(r, SRV_E_INTERNAL, "cannot queue the request");
}

static void session_written(struct redisReply *rp, void *ud)
{
    srv *s = ud;
    if (rp && rp->type == REDIS_REPLY_STATUS)
        s->m.session_writes++;
    else
        s->m.session_errors++;
}

/* The reply as the conversation keeps it: as the client was sent it, the turn a client sends
   back as content and tool_calls. The answer without its reasoning (a client does not send
   reasoning_content back, and the chat templates drop an earlier turn's reasoning) and, when
   tools were offered, without the calls' text; the calls as the template takes them. A reply
   with neither is kept as it is. Returns NULL on out of memory. */
static json_t *reply_message(srv_req *r, const srv_ev *ev)
{
    json_t *m = json_object();
    if (!m)
        return NULL;
    json_object_set_new(m, "role", json_string("assistant"));
    fl_buf think = {0}, answer = {0}, content = {0};
    json_t *calls = NULL;
    char *text = NULL;
    srv_reason rs = r->reason0;
    srv_tools t;
    srv_tools_init(&t, r->tools.on, r->serial); /* the ids the client was sent */
    t.max_calls = r->tools.max_calls; /* and the calls: parallel_tool_calls false keeps one */
    calls = json_array();
    srv_reason_push(&rs, ev->text, ev->text_len, &think, &answer);
    srv_reason_finish(&rs, &think, &answer);
    srv_tools_push(&t, answer.data ? answer.data : "", answer.len, &content, calls);
    srv_tools_finish(&t, &content, calls);
    srv_tools_free(&t);
    if (json_array_size(calls) && !(text = srv_tool_calls_text(calls)))
        json_object_clear(m); /* (out of memory) */
    if (json_object_size(m))
        json_object_set_new(m, "content", json_stringn(content.data ? content.data : "", content.len));
    if (text)
        json_object_set_new(m, "tool_calls_text", json_string(text));
    bool err = think.err || answer.err || content.err || json_object_size(m) < 2;
    free(text);
    json_decref(calls);
    fl_buf_free(&think);
    fl_buf_free(&answer);
    fl_buf_free(&content);
    if (err) {
        json_decref(m);
        return NULL;
    }
    return m;
}

/* After a completed turn: the conversation (kept messages, the reply) and its token ids. */
void srv_session_save(srv_req *r, const srv_ev *ev)
{
    srv *s = r->s;
    const char *id = r->chat.session_save ? r->chat.session_save : r->chat.session;
    if (!id || !s->redis || !srv_redis_ready(s->redis))
        return;
    json_t *o = json_object();
    json_t *ms = json_array();
    json_t *ids = json_array();
    for (size_t i = 0; i < r->chat.n_msgs; i++) {
        /* (a response's instructions are not carried over: OpenAI's rule) */
        if (srv_req_dropped(r, i) || (i == 0 && r->chat.instructions))
            continue;
        json_t *m = json_object();
        json_object_set_new(m, "role", json_string(r->chat.msgs[i].role));
        json_object_set_new(m, "content", json_string(r->chat.msgs[i].content));
        if (r->chat.calls && r->chat.calls[i])
            json_object_set_new(m, "tool_calls_text", json_string(r->chat.calls[i]));
        json_array_append_new(ms, m);
    }
    json_t *m = reply_message(r, ev);
    if (!m) {
        json_decref(o);
        json_decref(ms);
        json_decref(ids);
        s->m.session_errors++;
        return;
    }
    json_array_append_new(ms, m);
    for (size_t i = 0; r->ids && i < r->n_ids; i++)
        json_array_append_new(ids, json_integer(r->ids[i]));
    for (int32_t i = 0; ev->ids && i < ev->n_ids; i++)
        json_array_append_new(ids, json_integer(ev->ids[i]));
    json_object_set_new(o, "v", json_integer(1));
    json_object_set_new(o, "model", json_string(s->model_id));
    json_object_set_new(o, "messages", ms);
    json_object_set_new(o, "ids", ids);
    if (r->response)
        json_object_set(o, "response", r->response);
    if (r->input_items) {
        json_t *all = r->prev_items ? json_copy(r->prev_items) : json_array();
        if (all)
            json_array_extend(all, r->input_items);
        json_object_set_new(o, "input_items", all);
    }
    char *val = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!val)
        return;
    char key[SRV_ID_MAX + 32], ttl[24];
    session_key(id, key, sizeof key);
    snprintf(ttl, sizeof ttl, "%d", s->cfg->redis_session_ttl);
    const char *argv[5] = {"SET", key, val, "EX", ttl};
    size_t lens[5] = {3, strlen(key), strlen(val), 2, strlen(ttl)};
    if (srv_redis_cmd(s->redis, session_written, s, 5, argv, lens))
        s->m.session_errors++;
    free(val);
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
    srv_req_submit(r, prefix, k);
}

/* Looks up the prompt's cached pages in Redis (or submits at once when there is no Redis). */
void srv_prefix_lookup(srv_req *r)
{
    srv *s = r->s;
    int32_t B = s->model->cfg.block_size;
    int32_t nb = r->n_ids > 0 ? (int32_t)((r->n_ids - 1) / (size_t)B) : 0;
    if (!s->redis || !srv_redis_ready(s->redis) || nb <= 0 || r->cancelled) {
        srv_req_submit(r, NULL, 0);
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
        srv_req_submit(r, NULL, 0);
        return;
    }
    r->state = SRV_REQ_LOOKUP;
}

bool srv_session_load(srv_req *r)
{
    srv *s = r->s;
    char key[SRV_ID_MAX + 32];
    session_key(r->chat.session, key, sizeof key);
    const char *argv[2] = {"GET", key};
    size_t lens[2] = {3, strlen(key)};
    r->state = SRV_REQ_SESSION;
    if (!srv_redis_cmd(s->redis, session_read, r, 2, argv, lens))
        return true;
    s->m.session_errors++; /* Redis not connected: this turn has no history */
    char q[80];
    SRV_WARN(&s->log, "event=session_unavailable session=%s", srv_log_q(q, sizeof q, r->chat.session));
    return false;
}

/* ---- stored responses: GET and DELETE /v1/responses/ID ---- */

struct srv_stored {
    srv *s;
    srv_stored_cb done;
    void *owner; /* NULL once detached */
    int kind;    /* SRV_STORED_* */
    char id[SRV_ID_MAX + 1];
};

/* (only a response's record: a client's own session of that name has no "response") */
static const char DELETE_LUA[] =
    "local v = redis.call('GET', KEYS[1]) "
    "if not v then return 0 end "
    "local ok, o = pcall(cjson.decode, v) "
    "if ok and type(o) == 'table' and type(o.response) == 'table' then "
    "return redis.call('DEL', KEYS[1]) end "
    "return 0";

static void stored_reply(struct redisReply *rp, void *ud)
{
    srv_stored *st = ud;
    if (!st->owner) {
        free(st);
        return;
    }
    int outcome = 1;
    json_t *x = NULL;
    if (!rp || rp->type == REDIS_REPLY_ERROR) {
        st->s->m.session_errors++;
        outcome = -1;
    } else if (st->kind == SRV_STORED_DELETE || st->kind == SRV_STORED_FORGET) {
        outcome = rp->type == REDIS_REPLY_INTEGER && rp->integer > 0 ? 0 : 1;
    } else if (rp->type == REDIS_REPLY_STRING) {
        json_error_t je;
        json_t *o = json_loadb(rp->str, (size_t)rp->len, 0, &je);
        if (json_is_object(json_object_get(o, "response"))) {
            outcome = 0;
            if (st->kind == SRV_STORED_GET) {
                x = json_incref(json_object_get(o, "response"));
            } else { /* (a record written before input items were kept has none) */
                x = json_object_get(o, "input_items");
                x = json_is_array(x) ? json_incref(x) : json_array();
            }
        }
        json_decref(o);
    }
    st->done(st->owner, st->id, st->kind, outcome, x);
    free(st);
}

srv_stored *srv_stored_start(srv *s, const char *id, int kind, srv_stored_cb done, void *owner)
{
    bool del = kind == SRV_STORED_DELETE, forget = kind == SRV_STORED_FORGET;
    size_t n = strlen(id);
    srv_stored *st = n <= SRV_ID_MAX && s->redis ? calloc(1, sizeof *st) : NULL;
    if (!st)
        return NULL;
    *st = (srv_stored){.s = s, .done = done, .owner = owner, .kind = kind};
    memcpy(st->id, id, n + 1);
    char key[SRV_ID_MAX + 32];
    session_key(id, key, sizeof key);
    const char *gargv[2] = {"GET", key};
    size_t glens[2] = {3, strlen(key)};
    const char *dargv[4] = {"EVAL", DELETE_LUA, "1", key};
    size_t dlens[4] = {4, sizeof DELETE_LUA - 1, 1, strlen(key)};
    const char *fargv[2] = {"DEL", key};
    if (forget ? srv_redis_cmd(s->redis, stored_reply, st, 2, fargv, glens)
        : del  ? srv_redis_cmd(s->redis, stored_reply, st, 4, dargv, dlens)
               : srv_redis_cmd(s->redis, stored_reply, st, 2, gargv, glens)) {
        s->m.session_errors++;
        free(st);
        return NULL;
    }
    return st;
}

void srv_stored_detach(srv_stored *st)
{
    if (st)
        st->owner = NULL;
}
