/* serve_session.c: what a request keeps in Redis (serve_session.h): its session's earlier turns,
 * read before the prompt is rendered and written after a completed turn, and its prompt's cached
 * KV pages, read before it is submitted. Redis away or slow is never the client's error: the
 * turn runs without its history or its cached pages, and the miss is counted. */
#include <hiredis/hiredis.h>
#include <stdlib.h>
#include <string.h>

#include "redis.h"
#include "serve.h"
#include "serve_request.h"
#include "serve_session.h"

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
