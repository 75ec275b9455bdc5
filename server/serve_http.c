/* serve_http.c: HTTP on the WebSocket port: static files from the web root, /health, /ready,
 * /metrics, the OpenAI-compatible /v1/models[/ID], /v1/chat/completions and /v1/completions (SSE
 * when stream is true), and /generate (serve_generate.c).
 *
 * Every response goes through one path: the handler fills status, type and body (or starts
 * an SSE stream) and asks for WRITEABLE; the headers go out in one callback and the body in
 * chunks after, one lws_write per callback. A chat completion does not choose its status
 * until the engine has taken the request, so a rejection (busy, prompt too long) is still a
 * proper HTTP error, even when streaming was asked for. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <uv.h>

#include <libwebsockets.h>

#include "redis.h"
#include "serve.h"
#include "serve_generate.h"
#include "serve_group.h"
#include "serve_request.h"
#include "serve_responses.h"
#include "serve_session.h"
#include "serve_tokenize.h"
#include "logprobs.h"

enum { R_NONE = 0, R_STATIC, R_CHAT, R_OTHER, R_GENERATE, R_COMPLETION, R_TOKENIZE, R_DETOKENIZE,
       R_RESPONSES };

#define SRV_JOIN_MAX 16 /* segments of a joined answer (outlines have at most 10 points) */

struct srv_http {
    srv *s;
    struct lws *wsi;
    int route;
    bool head;           /* HEAD: headers only */
    fl_buf body;         /* the request body (chat) */
    bool body_too_big;
    /* the response */
    bool responding;     /* status chosen */
    int status;
    const char *ctype;
    char extra[600];     /* extra header lines, "name: value\r\n" each */
    fl_buf resp;
    size_t off;          /* bytes of resp already written */
    bool hdr_sent;
    bool complete;       /* resp holds the whole body (or the stream has ended) */
    bool sse;
    bool final_sent;
    /* a chat completion (or a text completion: /v1/completions) */
    srv_req *req;
    bool stream, include_usage;
    int n_choices;       /* the answer's choices: each gets its own opening role chunk */
    char cmpl_id[48];
    long long created;
    int prompt_tokens;
    /* skeleton/auto: the branches' texts joined in order (a space between) as one choice;
       streamed: the live segment's commits go out as they come, a later segment's wait in
       pend until every segment before it has ended */
    bool joined, sep_due, any_text, hit_length;
    int live;
    bool ended[SRV_JOIN_MAX];
    fl_buf pend[SRV_JOIN_MAX];
    srv_gen_fail gen;    /* /generate: its first failing segment */
    srv_tok_job *tok;    /* /tokenize: its work, until it answers */
    /* /v1/responses: the output items and events (serve_responses.h), the request's fields the
       answer repeats */
    srv_resp rs;
    json_t *rs_echo;
    json_t *rs_input;          /* the request's input (its items are stored with the turn) */
    struct srv_stored *stored; /* GET or DELETE /v1/responses/ID: its Redis command */
    int li_limit;              /* GET /v1/responses/ID/input_items: the query */
    bool li_desc;
    char li_after[96];
    struct srv_http *prev, *next;
};

static const struct {
    const char *ext, *type;
} mime[] = {
    {".html", "text/html; charset=utf-8"}, {".htm", "text/html; charset=utf-8"},
    {".js", "text/javascript; charset=utf-8"}, {".mjs", "text/javascript; charset=utf-8"},
    {".css", "text/css; charset=utf-8"}, {".json", "application/json"},
    {".svg", "image/svg+xml"}, {".png", "image/png"}, {".jpg", "image/jpeg"},
    {".jpeg", "image/jpeg"}, {".gif", "image/gif"}, {".ico", "image/x-icon"},
    {".webp", "image/webp"}, {".wasm", "application/wasm"}, {".txt", "text/plain; charset=utf-8"},
    {".map", "application/json"}, {".woff2", "font/woff2"}, {".woff", "font/woff"},
};

/* ---- the response path ---- */

static void arm(srv_http *h)
{
    if (h->wsi)
        lws_callback_on_writable(h->wsi);
}

/* What an answer that could not be built says instead (fixed: it needs no allocation beyond the
   response buffer's growth). */
#define OOM_BODY "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null," \
                 "\"code\":\"" SRV_E_INTERNAL "\"}}\n"

/* Sets the whole response (takes body, a malloc'd string, or NULL for empty). A body that does
   not fit in memory is never sent cut: a 500 with OOM_BODY goes instead, or with no body when
   even that does not fit. */
static void respond(srv_http *h, int status, const char *ctype, char *body)
{
    h->responding = true;
    h->status = status;
    h->ctype = ctype;
    fl_buf_rewind(&h->resp, 0);
    if (body)
        fl_buf_puts(&h->resp, body);
    free(body);
    if (h->resp.err) {
        srv_metrics_error(&h->s->m, SRV_E_INTERNAL);
        h->status = status = 500;
        h->ctype = "application/json";
        fl_buf_rewind(&h->resp, 0);
        if (fl_buf_puts(&h->resp, OOM_BODY))
            fl_buf_rewind(&h->resp, 0);
    }
    h->complete = true;
    srv_metrics_http(&h->s->m, status);
    arm(h);
}

static void respond_json(srv_http *h, int status, json_t *o)
{
    /* 15 digits: a decimal setting such as 0.9 reads back as written, not 0.90000000000000002 */
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
    json_decref(o);
    if (!s) {
        respond(h, 500, "application/json", strdup("{\"error\":\"out of memory\"}"));
        return;
    }
    size_t n = strlen(s);
    char *t = realloc(s, n + 2); /* a trailing newline: friendlier for curl */
    if (t) {
        t[n] = '\n';
        t[n + 1] = 0;
        s = t;
    }
    respond(h, status, "application/json", s);
}

static const char *openai_type(int status)
{
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 500: return "server_error";
    case 503: return "server_error";
    default: return "invalid_request_error";
    }
}

/* An error answer whose param and message name the fields as the request did. */
static void respond_error_as(srv_http *h, int status, const char *code, const char *param,
                             const char *msg)
{
    srv_metrics_error(&h->s->m, code);
    char *body = srv_openai_error(openai_type(status), code, param, msg);
    char q[200];
    SRV_INFO(&h->s->log, "event=http_error status=%d code=%s message=%s", status, code,
             srv_log_q(q, sizeof q, msg));
    respond(h, status, "application/json", body);
}

/* On /v1/responses, whose request was translated into a chat request, an error's chat
   field named as the client named it (serve_responses.h): *param renamed, the message (in
   buf) returned; elsewhere msg as it is. */
static const char *named_as_sent(const srv_http *h, const char **param, const char *msg,
                                 char *buf, size_t cap)
{
    if (h->route != R_RESPONSES)
        return msg;
    *param = srv_responses_param(*param);
    srv_responses_words(buf, cap, msg);
    return buf;
}

/* An error answer, its fields named as the request named them. */
static void respond_error(srv_http *h, int status, const char *code, const char *param,
                          const char *msg)
{
    char words[FL_ERR_MSG + 128];
    msg = named_as_sent(h, &param, msg, words, sizeof words);
    respond_error_as(h, status, code, param, msg);
}

static int status_of(const char *code)
{
    if (!strcmp(code, SRV_E_BUSY) || !strcmp(code, SRV_E_TOO_MANY))
        return 429;
    if (!strcmp(code, SRV_E_SHUTTING_DOWN))
        return 503;
    if (!strcmp(code, SRV_E_INTERNAL) || !strcmp(code, SRV_E_ENGINE))
        return 500;
    if (!strcmp(code, SRV_E_TOO_LARGE))
        return 413;
    if (!strcmp(code, SRV_E_UNAUTHORIZED))
        return 401;
    if (!strcmp(code, SRV_E_MODEL_NOT_FOUND) || !strcmp(code, SRV_E_PREV_NOT_FOUND))
        return 404;
    return 400;
}

static int write_headers(srv_http *h, struct lws *wsi)
{
    unsigned char buf[LWS_PRE + 2048], *start = buf + LWS_PRE, *p = start, *end = buf + sizeof buf - 1;
    lws_filepos_t len = h->sse ? LWS_ILLEGAL_HTTP_CONTENT_LEN : (lws_filepos_t)h->resp.len;
    if (lws_add_http_common_headers(wsi, (unsigned)h->status, h->ctype, len, &p, end))
        return -1;
    if (h->sse && lws_add_http_header_by_name(wsi, (const unsigned char *)"cache-control:",
                                              (const unsigned char *)"no-cache", 8, &p, end))
        return -1;
    /* one exchange per connection: libwebsockets 4.1 re-reads a pipelined request that is
       already buffered when a transaction completes (its head arrives again as the next
       request's body, and the loop spins): say so and close after the answer */
    if (lws_add_http_header_by_name(wsi, (const unsigned char *)"connection:",
                                    (const unsigned char *)"close", 5, &p, end))
        return -1;
    /* extra: "name: value\r\n" lines */
    for (char *line = h->extra; *line;) {
        char *colon = strchr(line, ':'), *eol = strstr(line, "\r\n");
        if (!colon || !eol)
            break;
        char name[64];
        size_t nl = (size_t)(colon - line) + 1;
        if (nl >= sizeof name)
            break;
        memcpy(name, line, nl);
        name[nl] = 0;
        const char *v = colon + 1;
        while (*v == ' ')
            v++;
        if (lws_add_http_header_by_name(wsi, (const unsigned char *)name, (const unsigned char *)v,
                                        (int)(eol - v), &p, end))
            return -1;
        line = eol + 2;
    }
    if (lws_finalize_write_http_header(wsi, start, &p, end))
        return -1;
    return 0;
}

static int on_writeable(srv_http *h, struct lws *wsi)
{
    if (!h->responding)
        return 0;
    if (!h->hdr_sent) {
        if (write_headers(h, wsi))
            return -1;
        h->hdr_sent = true;
        if (h->head) {
            h->off = h->resp.len;
            h->final_sent = true;
        }
        lws_callback_on_writable(wsi);
        return 0;
    }
    if (h->off < h->resp.len) {
        size_t n = h->resp.len - h->off;
        if (n > 16384)
            n = 16384;
        bool last = h->complete && h->off + n == h->resp.len;
        unsigned char *b = malloc(LWS_PRE + n);
        if (!b)
            return -1;
        memcpy(b + LWS_PRE, h->resp.data + h->off, n);
        int w = lws_write(wsi, b + LWS_PRE, n, last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP);
        free(b);
        if (w < (int)n)
            return -1;
        h->off += n;
        h->final_sent = last;
        if (h->off == h->resp.len && h->sse) { /* keep the buffer small on long streams */
            fl_buf_rewind(&h->resp, 0);
            h->off = 0;
        }
        if (h->off < h->resp.len || h->complete)
            lws_callback_on_writable(wsi);
        return 0;
    }
    if (!h->complete)
        return 0; /* a stream waiting for the engine */
    if (!h->final_sent && !h->sse) { /* an empty body */
        h->final_sent = true;
    }
    /* everything is out: end the exchange. Connection: close (see write_headers); an
       oversized body still arriving is drained first by lws_http_transaction_completed, so
       the client finishes its upload and reads the 413 instead of a reset, and then the
       connection closes */
    if (h->sse)
        return -1;
    if (h->body_too_big)
        return lws_http_transaction_completed(wsi) ? -1 : 0;
    return -1;
}

/* ---- routes ---- */

static bool authorized(srv_http *h, struct lws *wsi)
{
    const char *key = h->s->cfg->api_key;
    if (!key)
        return true;
    char v[512];
    int n = lws_hdr_copy(wsi, v, sizeof v, WSI_TOKEN_HTTP_AUTHORIZATION);
    return n > 7 && !strncasecmp(v, "Bearer ", 7) && !strcmp(v + 7, key);
}

/* 404 model_not_found for a model name the request gave (quoted cut to whole characters). */
static void model_not_found(srv_http *h, const char *asked)
{
    char name[101], m[300];
    snprintf(name, sizeof name, "%s", asked);
    srv_utf8_clip(name); /* never cut a character in two */
    snprintf(m, sizeof m, "the model '%s' does not exist; this server serves '%s'", name,
             h->s->model_id);
    respond_error(h, 404, SRV_E_MODEL_NOT_FOUND, "model", m);
}

/* Whether a request's model names another model than this one (its id, or "fogline"). */
static bool other_model(const srv *s, const char *asked)
{
    return asked && strcmp(asked, s->model_id) && strcmp(asked, "fogline");
}

/* ---- GET and DELETE /v1/responses/ID: a stored response, kept with its turn under
   fogline:session:ID (serve_session.c) ---- */

/* GET /v1/responses/ID/input_items: the page of items the query asks for (OpenAI's list:
   newest first unless order=asc, limit 1..100 (20), after an item's id). */
static json_t *items_page(srv_http *h, json_t *items)
{
    size_t n = json_array_size(items), start = 0;
    if (h->li_desc) { /* (reversed in place: the array is ours) */
        for (size_t k = 0; k < n / 2; k++) {
            json_t *a = json_incref(json_array_get(items, k));
            json_array_set(items, k, json_array_get(items, n - 1 - k));
            json_array_set_new(items, n - 1 - k, a);
        }
    }
    if (h->li_after[0]) {
        size_t k;
        for (k = 0; k < n; k++) {
            const char *id = json_string_value(json_object_get(json_array_get(items, k), "id"));
            if (id && !strcmp(id, h->li_after))
                break;
        }
        if (k == n)
            return NULL;
        start = k + 1;
    }
    json_t *data = json_array();
    for (size_t k = start; k < n && json_array_size(data) < (size_t)h->li_limit; k++)
        json_array_append(data, json_array_get(items, k));
    json_t *o = json_object();
    size_t m = json_array_size(data);
    json_object_set_new(o, "object", json_string("list"));
    json_object_set_new(o, "data", data);
    json_object_set(o, "first_id", m ? json_object_get(json_array_get(data, 0), "id") : json_null());
    json_object_set(o, "last_id", m ? json_object_get(json_array_get(data, m - 1), "id") : json_null());
    json_object_set_new(o, "has_more", json_boolean(start + m < n));
    return o;
}

static void stored_not_found(srv_http *h, const char *id)
{
    char m[SRV_ID_MAX + 160];
    snprintf(m, sizeof m, "no stored response '%.64s' (never stored, deleted, or expired after "
             "--redis-session-ttl)", id);
    respond_error(h, 404, "not_found", NULL, m);
}

static void stored_done(void *owner, const char *id, int kind, int outcome, json_t *v)
{
    srv_http *h = owner;
    h->stored = NULL;
    if (outcome < 0) {
        respond_error(h, 503, "redis_unavailable", NULL, "the stored responses cannot be read "
                      "now: Redis did not answer");
    } else if (outcome > 0 && kind == SRV_STORED_FORGET) {
        char m[SRV_ID_MAX + 160];
        snprintf(m, sizeof m, "no stored session '%.64s' (never stored, deleted, or expired after "
                 "--redis-session-ttl)", id);
        srv_utf8_clip(m);
        respond_error(h, 404, "not_found", NULL, m);
    } else if (outcome > 0) {
        stored_not_found(h, id);
    } else if (kind == SRV_STORED_DELETE || kind == SRV_STORED_FORGET) {
        json_t *o = json_object();
        json_object_set_new(o, "id", json_string(id));
        json_object_set_new(o, "object", json_string(kind == SRV_STORED_FORGET ? "session" : "response"));
        json_object_set_new(o, "deleted", json_true());
        respond_json(h, 200, o);
    } else if (kind == SRV_STORED_ITEMS) {
        json_t *o = items_page(h, v);
        json_decref(v);
        if (o) {
            respond_json(h, 200, o);
        } else {
            char m[160];
            snprintf(m, sizeof m, "'after': no input item '%.64s' in this response", h->li_after);
            respond_error(h, 400, SRV_E_BAD_REQUEST, "after", m);
        }
    } else {
        respond_json(h, 200, v);
    }
    arm(h);
}

/* path: "ID" (GET, DELETE) or "ID/input_items" (GET, with its query). */
static void route_stored(srv_http *h, const char *path, bool del)
{
    srv *s = h->s;
    char id[SRV_ID_MAX + 1];
    const char *slash = strchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) : strlen(path);
    bool ok = n > 0 && n <= SRV_ID_MAX && (!slash || (!strcmp(slash, "/input_items") && !del));
    for (size_t i = 0; ok && i < n; i++) /* (a response's id: resp_ and hex digits) */
        ok = (path[i] >= 'a' && path[i] <= 'z') || (path[i] >= 'A' && path[i] <= 'Z') ||
             (path[i] >= '0' && path[i] <= '9') || strchr("_-.:", path[i]);
    if (!ok) {
        respond_error(h, 404, "not_found", NULL, "unknown endpoint: this server serves "
                      "/v1/responses/ID (GET, DELETE) and /v1/responses/ID/input_items (GET), "
                      "ID a response's id");
        return;
    }
    memcpy(id, path, n);
    id[n] = 0;
    int kind = del ? SRV_STORED_DELETE : slash ? SRV_STORED_ITEMS : SRV_STORED_GET;
    if (kind == SRV_STORED_ITEMS) { /* the query, checked before Redis is asked */
        char buf[160];
        const char *v = lws_get_urlarg_by_name(h->wsi, "limit=", buf, sizeof buf);
        char *end = NULL;
        long lim = v ? strtol(v, &end, 10) : 20;
        if (v && (!*v || *end || lim < 1 || lim > 100)) {
            respond_error(h, 400, SRV_E_BAD_REQUEST, "limit", "'limit' must be an integer in "
                          "[1, 100]");
            return;
        }
        h->li_limit = (int)lim;
        v = lws_get_urlarg_by_name(h->wsi, "order=", buf, sizeof buf);
        if (v && strcmp(v, "asc") && strcmp(v, "desc")) {
            respond_error(h, 400, SRV_E_BAD_REQUEST, "order", "'order' must be asc or desc");
            return;
        }
        h->li_desc = !v || !strcmp(v, "desc");
        v = lws_get_urlarg_by_name(h->wsi, "after=", buf, sizeof buf);
        if (v && (strlen(v) >= sizeof h->li_after || !*v)) {
            respond_error(h, 400, SRV_E_BAD_REQUEST, "after", "'after' must be an item's id");
            return;
        }
        snprintf(h->li_after, sizeof h->li_after, "%s", v ? v : "");
        srv_utf8_clip(h->li_after);
    }
    if (!s->redis) {
        respond_error(h, 404, "not_found", NULL, "no stored responses: this server runs without "
                      "--redis, where responses are stored");
        return;
    }
    if (!(h->stored = srv_stored_start(s, id, kind, stored_done, h))) {
        respond_error(h, 503, "redis_unavailable", NULL, "the stored responses cannot be read "
                      "now: Redis is not connected");
        return;
    }
}

/* DELETE /sessions/ID: a session's stored conversation, forgotten now rather than at
   --redis-session-ttl (ID as the client named it, URL-encoded in the path). */
static void route_forget(srv_http *h, const char *id)
{
    srv *s = h->s;
    size_t n = strlen(id);
    if (!n || n > SRV_ID_MAX || !srv_utf8_valid((const unsigned char *)id, n)) {
        respond_error(h, 404, "not_found", NULL, "unknown endpoint: this server serves "
                      "/sessions/ID (DELETE), ID a session's name of 1..128 bytes (URL-encoded)");
        return;
    }
    if (!s->redis) {
        respond_error(h, 404, "not_found", NULL, "no sessions are stored: this server runs "
                      "without --redis, where sessions are kept");
        return;
    }
    if (!(h->stored = srv_stored_start(s, id, SRV_STORED_FORGET, stored_done, h)))
        respond_error(h, 503, "redis_unavailable", NULL, "the stored sessions cannot be "
                      "reached now: Redis is not connected");
}

/* GET /v1/models: the list of the one model; GET /v1/models/ID (one not NULL): that model, as
   the list's entry, when ID is its id or "fogline". */
static void route_models(srv_http *h, const char *one)
{
    srv *s = h->s;
    if (other_model(s, one)) {
        model_not_found(h, one);
        return;
    }
    json_t *o = json_object(), *data = json_array(), *m = json_object();
    json_object_set_new(m, "id", json_string(s->model_id));
    json_object_set_new(m, "object", json_string("model"));
    json_object_set_new(m, "created", json_integer(0));
    json_object_set_new(m, "owned_by", json_string("fogline"));
    json_object_set_new(m, "block_size", json_integer(s->model->cfg.block_size));
    json_object_set_new(m, "family", json_string(fl_family_name(s->model->cfg.family)));
    json_object_set_new(m, "weights", json_string(fl_wformat_name(s->backend->weights)));
    json_object_set_new(m, "kv_format", json_string(fl_kvformat_name(s->backend->kv)));
    if (fl_gen_opts_json(m, &s->cfg->gen.dec, s->dec_src)) {
        json_decref(o);
        json_decref(data);
        json_decref(m);
        respond_error(h, 500, SRV_E_INTERNAL, NULL, "out of memory");
        return;
    }
    if (one) {
        json_decref(o);
        json_decref(data);
        respond_json(h, 200, m);
        return;
    }
    json_array_append_new(data, m);
    json_object_set_new(o, "object", json_string("list"));
    json_object_set_new(o, "data", data);
    respond_json(h, 200, o);
}

static void route_metrics(srv_http *h)
{
    srv *s = h->s;
    srv_gauges g = {0};
    g.ws_open = s->n_conns;
    srv_ws_backlog(s, &g.ws_backlog, &g.ws_input_paused, &g.ws_choked);
    g.http_open = s->n_https;
    g.requests_live = s->n_reqs;
    for (srv_req *r = s->reqs; r; r = r->s_next)
        g.tokenizing += r->state == SRV_REQ_TOKENIZING;
    if (s->engine)
        fl_engine_get_stats(s->engine, &g.es);
    g.ready = s->engine && !s->draining;
    g.draining = s->draining;
    g.redis = s->redis ? srv_redis_get_stats(s->redis) : NULL;
    g.redis_ready = srv_redis_ready(s->redis);
    fl_buf b = {0};
    if (srv_metrics_render(&s->m, &g, &b)) {
        fl_buf_free(&b);
        respond_error(h, 500, SRV_E_INTERNAL, NULL, "out of memory");
        return;
    }
    respond(h, 200, "text/plain; version=0.0.4; charset=utf-8", b.data);
}

static void route_static(srv_http *h, const char *uri)
{
    srv *s = h->s;
    /* lws has already percent-decoded the path; refuse anything that could climb out */
    if (uri[0] != '/' || strstr(uri, "..") || strchr(uri, '\\') || strlen(uri) > 1024) {
        respond_error(h, 400, SRV_E_BAD_REQUEST, NULL, "bad path");
        return;
    }
    char root[PATH_MAX], path[PATH_MAX + 1100], real[PATH_MAX];
    if (!realpath(s->cfg->web_root, root)) {
        respond_error(h, 404, "not_found", NULL, "no web root");
        return;
    }
    snprintf(path, sizeof path, "%s%s", root, uri);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        size_t n = strlen(path);
        snprintf(path + n, sizeof path - n, "%sindex.html", path[n - 1] == '/' ? "" : "/");
    }
    size_t rl = strlen(root);
    if (!realpath(path, real) || strncmp(real, root, rl) || (real[rl] != '/' && real[rl] != 0) ||
        stat(real, &st) || !S_ISREG(st.st_mode)) {
        respond_error(h, 404, "not_found", NULL, "not found");
        return;
    }
    if (st.st_size > (64 << 20)) {
        respond_error(h, 403, "forbidden", NULL, "file too large to serve");
        return;
    }
    const char *type = "application/octet-stream";
    const char *dot = strrchr(real, '.');
    for (size_t i = 0; dot && i < sizeof mime / sizeof mime[0]; i++)
        if (!strcasecmp(dot, mime[i].ext))
            type = mime[i].type;
    char *data = NULL;
    size_t len = 0;
    fl_err e = {0};
    if (fl_read_file(real, &data, &len, &e)) {
        respond_error(h, 404, "not_found", NULL, "not found");
        return;
    }
    fl_buf_rewind(&h->resp, 0);
    fl_buf_append(&h->resp, data, len);
    free(data);
    if (h->resp.err) {
        respond_error(h, 500, SRV_E_INTERNAL, NULL, "out of memory");
        return;
    }
    h->responding = true;
    h->status = 200;
    h->ctype = type;
    h->complete = true;
    size_t el = strlen(h->extra);
    snprintf(h->extra + el, sizeof h->extra - el, "x-content-type-options: nosniff\r\n");
    srv_metrics_http(&s->m, 200);
    arm(h);
}

static void list_add(srv *s, srv_http *h)
{
    h->prev = NULL;
    h->next = s->https;
    if (s->https)
        s->https->prev = h;
    s->https = h;
    s->n_https++;
}

static void list_del(srv *s, srv_http *h)
{
    if (h->prev)
        h->prev->next = h->next;
    else
        s->https = h->next;
    if (h->next)
        h->next->prev = h->prev;
    s->n_https--;
}

static const srv_owner_ops http_owner, generate_owner;

/* A route whose request comes in a POST body. */
static bool takes_body(const srv_http *h)
{
    return h->route == R_CHAT || h->route == R_GENERATE || h->route == R_COMPLETION ||
           h->route == R_TOKENIZE || h->route == R_DETOKENIZE || h->route == R_RESPONSES;
}

static void tok_answer(srv_http *h, srv_tok_answer *a)
{
    if (a->status == 200)
        respond_json(h, 200, a->body);
    else
        respond_error(h, a->status, a->code, a->param, a->msg);
}

static void tok_done(void *owner, srv_tok_answer *a)
{
    srv_http *h = owner;
    h->tok = NULL;
    tok_answer(h, a);
}

/* POST /tokenize and /detokenize: the body parsed; the model, when named, must be this one. */
static void tok_start(srv_http *h, const json_t *o)
{
    srv *s = h->s;
    const char *code = NULL, *param = NULL;
    char m[FL_ERR_MSG];
    srv_tok_answer a;
    if (h->route == R_DETOKENIZE) {
        srv_detokenize d;
        if (srv_parse_detokenize(o, s->model->cfg.vocab, &d, &code, &param, m, sizeof m))
            respond_error(h, status_of(code), code, param, m);
        else if (other_model(s, d.model))
            model_not_found(h, d.model);
        else {
            srv_detokenize_answer(s, &d, &a);
            tok_answer(h, &a);
        }
        srv_detokenize_free(&d);
        return;
    }
    srv_limits L = {s->cfg->max_tokens_limit, s->cfg->gen.max_tokens, s->cfg->gen.dec,
                     s->cfg->enable_thinking, s->model->cfg.vocab};
    srv_tokenize t;
    if (srv_parse_tokenize(o, &L, &t, &code, &param, m, sizeof m)) {
        srv_chat_free(&t.chat);
        respond_error(h, status_of(code), code, param, m);
        return;
    }
    if (other_model(s, t.chat.model)) {
        model_not_found(h, t.chat.model);
        srv_chat_free(&t.chat);
        return;
    }
    if (!(h->tok = srv_tokenize_start(s, &t, tok_done, h, &a)))
        tok_answer(h, &a);
}

static void chat_start(srv_http *h)
{
    srv *s = h->s;
    if (h->body_too_big) {
        char m[128];
        snprintf(m, sizeof m, "the request body may have at most %zu bytes", s->cfg->max_message);
        respond_error(h, 413, SRV_E_TOO_LARGE, NULL, m);
        return;
    }
    if (!srv_utf8_valid((const unsigned char *)h->body.data, h->body.len)) {
        respond_error(h, 400, SRV_E_INVALID_UTF8, NULL, "the request body is not valid UTF-8");
        return;
    }
    json_error_t je;
    json_t *o = json_loadb(h->body.data ? h->body.data : "", h->body.len, 0, &je);
    if (!o) {
        char m[300];
        snprintf(m, sizeof m, "the request body is not valid JSON: %s (line %d, column %d)",
                 je.text, je.line, je.column);
        respond_error(h, 400, SRV_E_BAD_JSON, NULL, m);
        return;
    }
    if (h->route == R_TOKENIZE || h->route == R_DETOKENIZE) {
        tok_start(h, o);
        json_decref(o);
        return;
    }
    srv_limits L = {s->cfg->max_tokens_limit, s->cfg->gen.max_tokens, s->cfg->gen.dec,
                     s->cfg->enable_thinking, s->model->cfg.vocab};
    srv_chat chat;
    const char *code = NULL, *param = NULL;
    char m[FL_ERR_MSG];
    int rc;
    if (h->route == R_RESPONSES) { /* the chat request it means, parsed as one */
        json_t *co = NULL;
        if (srv_responses_request(o, &co, &h->rs_echo, &code, &param, m, sizeof m)) {
            json_decref(o); /* its own words already */
            respond_error_as(h, status_of(code), code, param, m);
            return;
        }
        rc = srv_parse_chat_openai(co, &L, &chat, &code, &param, m, sizeof m);
        json_decref(co);
        h->rs_input = json_incref(json_object_get(o, "input"));
    } else {
        rc = h->route == R_GENERATE ? srv_generate_parse(o, &L, &chat, &code, &param, m, sizeof m)
             : h->route == R_COMPLETION
                 ? srv_parse_completion_openai(o, &L, &chat, &code, &param, m, sizeof m)
                 : srv_parse_chat_openai(o, &L, &chat, &code, &param, m, sizeof m);
    }
    json_decref(o);
    if (rc) {
        srv_chat_free(&chat);
        respond_error(h, status_of(code), code, param, m);
        return;
    }
    if (other_model(s, chat.model)) {
        model_not_found(h, chat.model);
        srv_chat_free(&chat);
        return;
    }
    h->stream = chat.stream;
    h->include_usage = chat.include_usage;
    h->joined = SRV_PAR_OUTLINED(chat.parallel);
    h->n_choices = chat.parallel && !h->joined ? srv_chat_branches(&chat) : 1;
    h->created = (long long)time(NULL);
    /* the time, the process's nonce, the request's serial: unique across restarts and across
       servers sharing a Redis (a stored response's id is its key) */
    snprintf(h->cmpl_id, sizeof h->cmpl_id, "%s%llx%08x%04llx", /* OpenAI's are resp_... there */
             h->route == R_GENERATE      ? "gen-"
             : h->route == R_COMPLETION  ? "cmpl-"
             : h->route == R_RESPONSES   ? "resp_"
                                         : "chatcmpl-",
             (unsigned long long)h->created, (unsigned)s->id_nonce,
             (unsigned long long)(s->next_serial + 1));
    if (h->route == R_RESPONSES) {
        srv_resp_init(&h->rs, h->cmpl_id);
        /* previous_response_id: that response's conversation, from Redis, must be there;
           store (OpenAI's default true): this one's is kept under its id, as a session's turn
           is */
        if (json_object_get(h->rs_echo, "previous_response_id")) {
            if (!s->redis) {
                srv_chat_free(&chat);
                respond_error_as(h, 400, SRV_E_BAD_REQUEST, "previous_response_id",
                                 "'previous_response_id' needs a server with --redis: responses "
                                 "are stored there");
                return;
            }
            chat.session_required = true;
        }
        chat.instructions = json_is_string(json_object_get(h->rs_echo, "instructions"));
        /* (a fogline session named by the client keeps the turn under its own key instead) */
        bool own_session = chat.session && !chat.session_required;
        bool store = s->redis && !json_is_false(json_object_get(h->rs_echo, "store")) &&
                     !own_session;
        if (store && !(chat.session_save = strdup(h->cmpl_id))) {
            srv_chat_free(&chat);
            respond_error(h, 500, SRV_E_INTERNAL, NULL, "out of memory");
            return;
        }
        json_object_set_new(h->rs_echo, "store", json_boolean(store));
        /* the sampling the reply gets, as OpenAI's answers repeat it (a float's decimal form:
           0.9, not 0.899999976) */
        char v[32];
        snprintf(v, sizeof v, "%.7g", (double)chat.dec.temperature);
        json_object_set_new(h->rs_echo, "temperature", json_real(strtod(v, NULL)));
        snprintf(v, sizeof v, "%.7g", (double)chat.dec.top_p);
        json_object_set_new(h->rs_echo, "top_p", json_real(strtod(v, NULL)));
    }
    if (!(chat.id = strdup(h->cmpl_id))) {
        srv_chat_free(&chat);
        respond_error(h, 500, SRV_E_INTERNAL, NULL, "out of memory");
        return;
    }
    srv_req *r = srv_req_start(s, h->route == R_GENERATE ? &generate_owner : &http_owner, h, &chat,
                               &code, m, sizeof m);
    if (!r) {
        srv_chat_free(&chat);
        /* srv_req_start counted the error already */
        char *body = srv_openai_error(openai_type(status_of(code)), code, NULL, m);
        respond(h, status_of(code), "application/json", body);
        return;
    }
    h->req = r;
    list_add(s, h);
    if (r->chat.session_save && h->rs_input) /* kept with the turn for input_items */
        r->input_items = srv_resp_input_items(h->rs_input, h->cmpl_id);
    if (srv_req_sampled(r)) { /* what reproduces the reply (choice i: seed + i) */
        size_t el = strlen(h->extra);
        snprintf(h->extra + el, sizeof h->extra - el, "fogline-seed: %llu\r\n",
                 (unsigned long long)r->chat.dec.seed);
    }
    /* the engine may take long: no idle timeout while we wait for it */
    if (h->wsi)
        lws_set_timeout(h->wsi, NO_PENDING_TIMEOUT, 0);
    char q[80];
    SRV_INFO(&s->log, "event=chat_http req=%s serial=%llu stream=%d messages=%zu max_tokens=%d",
             srv_log_q(q, sizeof q, h->cmpl_id), (unsigned long long)r->serial, h->stream,
             r->chat.n_msgs, r->chat.max_tokens);
}

/* ---- engine events for an HTTP exchange ---- */

/* One streamed chunk. A text completion's has the delta's content as its "text" (its other
   fields, none for such a request, are dropped). */
static json_t *chunk_at(srv_http *h, int index, json_t *delta, const char *finish)
{
    json_t *o = json_object(), *ch = json_object(), *choices = json_array();
    bool text = h->route == R_COMPLETION;
    json_object_set_new(o, "id", json_string(h->cmpl_id));
    json_object_set_new(o, "object", json_string(text ? "text_completion"
                                                      : "chat.completion.chunk"));
    json_object_set_new(o, "created", json_integer(h->created));
    json_object_set_new(o, "model", json_string(h->s->model_id));
    json_object_set_new(ch, "index", json_integer(index));
    if (text) {
        const json_t *c = json_object_get(delta, "content");
        json_object_set_new(ch, "text", json_string(c && json_string_value(c)
                                                        ? json_string_value(c) : ""));
        json_decref(delta);
    } else {
        json_object_set_new(ch, "delta", delta);
    }
    json_object_set_new(ch, "logprobs", json_null());
    json_object_set_new(ch, "finish_reason", finish ? json_string(finish) : json_null());
    json_array_append_new(choices, ch);
    json_object_set_new(o, "choices", choices);
    return o;
}

static json_t *chunk(srv_http *h, json_t *delta, const char *finish)
{
    return chunk_at(h, 0, delta, finish);
}

/* vLLM's stop_reason of a reply's done (null unless a stop string or stop token id ended it) */
static json_t *stop_reason(const srv_req *r, const srv_ev *ev)
{
    return ev->finish == FL_FINISH_STOP ? srv_stop_reason(r, ev->stop_string, ev->stop_token)
                                        : json_null();
}

/* The chunk that ends choice index: its finish_reason and, as vLLM streams it, stop_reason. */
static json_t *finish_chunk(srv_http *h, int index, const char *finish, json_t *reason)
{
    json_t *o = chunk_at(h, index, json_object(), finish);
    json_object_set_new(json_array_get(json_object_get(o, "choices"), 0), "stop_reason", reason);
    return o;
}

/* The stream cannot go on whole (memory ran out building an event): the events before it
   stay, the failed one is cut off at mark, a fixed error event ends the stream (when even that
   does not fit, the connection closes after the events before it, without [DONE]), and the
   request is cancelled. Sending the cut event, or skipping it and going on, would hand the
   client a damaged reply as if it were whole. */
static void sse_broken(srv_http *h, size_t mark)
{
    srv *s = h->s;
    if (h->complete)
        return;
    fl_buf_rewind(&h->resp, mark);
    if (fl_buf_puts(&h->resp, "data: " OOM_BODY "\n"))
        fl_buf_rewind(&h->resp, mark);
    h->complete = true;
    srv_metrics_error(&s->m, SRV_E_INTERNAL);
    SRV_WARN(&s->log, "event=sse_failed req=%s message=\"out of memory\"", h->cmpl_id);
    if (h->req) {
        srv_req *r = h->req;
        h->req = NULL;
        list_del(s, h);
        srv_req_orphan(r);
    }
    arm(h);
}

/* Appends one SSE event, "data: <payload>\n\n" (after "event: <event>\n" when event is set),
   whole or not at all (payload NULL: it could not be made). Nothing is appended after the
   stream's end. */
static void sse_put_ev(srv_http *h, const char *event, const char *payload)
{
    if (h->complete)
        return;
    size_t mark = h->resp.len;
    if (event)
        fl_buf_printf(&h->resp, "event: %s\n", event);
    fl_buf_puts(&h->resp, "data: ");
    if (!payload || srv_fault(&h->s->faults, SRV_FAULT_SSE))
        fl_buf_fail(&h->resp, FL_ENOMEM);
    fl_buf_puts(&h->resp, payload ? payload : "");
    fl_buf_puts(&h->resp, "\n\n");
    if (h->resp.err) {
        sse_broken(h, mark);
        return;
    }
    arm(h);
}

static void sse_put(srv_http *h, const char *payload)
{
    sse_put_ev(h, NULL, payload);
}

/* /v1/responses: one event of srv_resp (takes ev), named by its type as OpenAI names them */
static void resp_emit(void *ctx, json_t *ev)
{
    srv_http *h = ctx;
    char *s = json_dumps(ev, JSON_COMPACT | JSON_REAL_PRECISION(15));
    const char *type = json_string_value(json_object_get(ev, "type"));
    sse_put_ev(h, type ? type : "message", s);
    free(s);
    json_decref(ev);
}

static void sse_send(srv_http *h, json_t *o)
{
    /* numbers as respond_json writes them: a streamed value reads as the plain answer's */
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
    json_decref(o);
    sse_put(h, s);
    free(s);
}

/* Ends the stream with an error event (the request failed after the stream began). */
static void sse_error(srv_http *h, int status, const char *code, const char *msg)
{
    char *e = srv_openai_error(openai_type(status), code, NULL, msg);
    if (h->route == R_RESPONSES) { /* the Responses error event, which carries the same
                                      "error" object (what OpenAI's clients raise from) */
        json_t *ev = json_object(), *err = e ? json_loads(e, 0, NULL) : NULL;
        json_object_set_new(ev, "type", json_string("error"));
        json_object_set_new(ev, "code", json_string(code));
        json_object_set_new(ev, "message", json_string(msg));
        json_object_set_new(ev, "param", json_null());
        json_object_set_new(ev, "sequence_number", json_integer(h->rs.seq++));
        json_object_set(ev, "error", json_object_get(err, "error"));
        json_decref(err);
        free(e);
        e = json_dumps(ev, JSON_COMPACT);
        json_decref(ev);
        sse_put_ev(h, "error", e);
    } else {
        sse_put(h, e);
    }
    free(e);
    h->complete = true;
    arm(h);
}

static void sse_begin(srv_http *h)
{
    if (h->responding)
        return;
    h->responding = true;
    h->sse = true;
    h->status = 200;
    h->ctype = "text/event-stream";
    srv_metrics_http(&h->s->m, 200);
    if (h->route == R_COMPLETION) /* a text completion's chunks carry text only */
        return;
    if (h->route == R_RESPONSES) { /* response.created, response.in_progress */
        srv_resp_begin(&h->rs, h->created, h->s->model_id, h->rs_echo, resp_emit, h);
        return;
    }
    /* as OpenAI streams n choices: each choice's first chunk says its role, all of them
       before any text (a choice that has not started yet has had its role said) */
    for (int i = 0; i < h->n_choices && !h->complete; i++) {
        json_t *d = json_object();
        json_object_set_new(d, "role", json_string("assistant"));
        json_object_set_new(d, "content", json_string(""));
        sse_send(h, chunk_at(h, i, d, NULL));
    }
}

/* reasoning: the reply's tokens in its think block, -1 (left out) when the template has none */
static json_t *usage_json(int prompt, int completion, int cached, long long reasoning)
{
    json_t *u = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer(prompt));
    json_object_set_new(u, "completion_tokens", json_integer(completion));
    json_object_set_new(u, "total_tokens", json_integer(prompt + completion));
    /* OpenAI's field for prompt tokens served from a cache (here: KV pages from Redis) */
    json_t *d = json_object();
    json_object_set_new(d, "cached_tokens", json_integer(cached));
    json_object_set_new(u, "prompt_tokens_details", d);
    if (reasoning >= 0) {
        json_t *c = json_object();
        json_object_set_new(c, "reasoning_tokens", json_integer(reasoning));
        json_object_set_new(u, "completion_tokens_details", c);
    }
    return u;
}

/* A request's logprobs for an event, in its endpoint's shape (logprobs.h); NULL without any,
   and NULL with *oom set when they cannot be made. */
static json_t *lp_for(const srv_http *h, srv_req *r, const srv_ev *ev, bool *oom)
{
    if (!r->chat.logprobs)
        return NULL;
    const fl_tokenizer *tok = h->s->model->tok;
    json_t *o;
    if (h->route == R_COMPLETION) {
        if (!r->lp_dt_on) {
            fl_detok_init(&r->lp_dt, tok, true);
            r->lp_dt_on = true;
        }
        o = srv_lp_legacy(tok, ev->ids, ev->lps, ev->top_ids, ev->top_lps, ev->n_lps, ev->n_top,
                          &r->lp_dt, &r->lp_chars);
    } else {
        json_t *content = srv_lp_content(tok, ev->ids, ev->lps, ev->top_ids, ev->top_lps,
                                         ev->n_lps, ev->n_top);
        o = content ? json_object() : NULL;
        if (o && json_object_set_new(o, "content", content)) {
            json_decref(o);
            o = NULL;
        } else if (!o) {
            json_decref(content);
        }
    }
    *oom |= !o;
    return o;
}

static json_t *stats_json(const fl_seq_stats *st)
{
    json_t *x = json_object();
    json_object_set_new(x, "tpf", json_real(st->tpf));
    json_object_set_new(x, "forwards", json_integer(st->forwards));
    json_object_set_new(x, "blocks", json_integer(st->blocks));
    json_object_set_new(x, "constrained", json_integer(st->constrained));
    json_object_set_new(x, "ms_total", json_real(st->ms_total));
    return x;
}

/* A request failed: an error response, or, mid-stream, an error event and the end. */
static void fail_exchange(srv_http *h, int status, const char *code, const char *param, const char *msg)
{
    if (!h->responding) {
        respond_error(h, status, code, param, msg);
        return;
    }
    srv_metrics_error(&h->s->m, code);
    sse_error(h, status, code, msg);
}

/* The reasoning/answer split as OpenAI-style fields (as vLLM's reasoning parsers write them):
   "reasoning_content" and "content" of a message or a delta. A whole reply (end) or one commit
   of a stream; with whole, the split starts from the request's initial state. Sets *any when a
   field with text was added. Out of memory: -1, nothing added. */
static int reason_json(json_t *d, srv_reason *rs, const char *text, size_t n, bool whole, bool *any)
{
    fl_buf a = {0}, b = {0};
    int rc = srv_reason_push(rs, text, n, &a, &b);
    if (!rc && whole)
        rc = srv_reason_finish(rs, &a, &b);
    if (!rc) {
        if (a.len)
            json_object_set_new(d, "reasoning_content", json_stringn(a.data, a.len));
        if (b.len || whole)
            json_object_set_new(d, "content", json_stringn(b.data ? b.data : "", b.len));
        *any = a.len || b.len;
    }
    fl_buf_free(&a);
    fl_buf_free(&b);
    return rc ? -1 : 0;
}

static void tools_json(json_t *d, srv_tools *t, bool end);

/* One streamed delta of choice index (takes d): a chunk, or /v1/responses' events. */
static void send_delta(srv_http *h, int index, json_t *d)
{
    if (h->route == R_RESPONSES) {
        srv_resp_delta(&h->rs, d, resp_emit, h);
        json_decref(d);
        if (h->rs.err)
            sse_broken(h, h->resp.len);
        return;
    }
    sse_send(h, chunk_at(h, index, d, NULL));
}

/* A stream's end: what the split held back (a tag cut off by the reply's end), as one delta
   (of the branch's choice for a branch). */
static void reason_tail(srv_http *h, srv_req *r)
{
    int index = r->segment > 0 ? r->segment : 0;
    fl_buf a = {0}, b = {0};
    if (!srv_reason_finish(&r->reason, &a, &b) && (a.len || b.len)) {
        json_t *d = json_object();
        if (a.len)
            json_object_set_new(d, "reasoning_content", json_stringn(a.data, a.len));
        if (b.len)
            json_object_set_new(d, "content", json_stringn(b.data, b.len));
        if (r->tools.on)
            tools_json(d, &r->tools, false);
        sse_begin(h);
        send_delta(h, index, d);
    }
    fl_buf_free(&a);
    fl_buf_free(&b);
}

/* Tool calls out of d's "content" (toolcalls.h): what is not a call stays content, new calls
   go in d's "tool_calls"; at the end what the extractor held back too. An empty content is
   left out (null at the end when there are calls). */
static void tools_json(json_t *d, srv_tools *t, bool end)
{
    const json_t *cj = json_object_get(d, "content");
    fl_buf out = {0};
    json_t *calls = json_array();
    if (!calls)
        return;
    srv_tools_push(t, cj ? json_string_value(cj) : "", cj ? json_string_length(cj) : 0, &out, calls);
    if (end)
        srv_tools_finish(t, &out, calls);
    if (out.len)
        json_object_set_new(d, "content", json_stringn(out.data, out.len));
    else if (end && t->n_calls)
        json_object_set_new(d, "content", json_null());
    else if (end)
        json_object_set_new(d, "content", json_string(""));
    else
        json_object_del(d, "content");
    if (json_array_size(calls))
        json_object_set(d, "tool_calls", calls);
    json_decref(calls);
    fl_buf_free(&out);
}

/* /v1/responses: the finished response, its last item closed first (its events through
   emit when streamed, else NULL) */
static json_t *resp_done(srv_http *h, const srv_req *r, const srv_ev *ev, srv_resp_emit emit)
{
    bool cut = ev->finish == FL_FINISH_LENGTH;
    srv_resp_close(&h->rs, cut, emit, h);
    return srv_resp_object(&h->rs, h->created, h->s->model_id, cut ? "incomplete" : "completed",
                           h->rs_echo, srv_resp_usage(ev->stats.prompt_tokens, ev->n_ids, ev->stats.cached_tokens,
                                                      r->reasoning_tokens));
}

/* A stored response (store: its turn is saved under its id) keeps the answer as sent, for
   GET /v1/responses/ID; a copy, since the answer is still added to. */
static void keep_response(srv_req *r, const json_t *x)
{
    if (r->chat.session_save && x && !r->response)
        r->response = json_deep_copy(x);
}

/* Streamed, at the reply's end: what the extractor held back (a call decided only at the end,
   a close tag in its string: toolcalls.h, included) as choice index's last delta. True when
   the reply called tools (the finish says so). */
static bool tools_tail(srv_http *h, srv_req *r, int index)
{
    if (!r->tools.on)
        return false;
    json_t *d = json_object(), *calls = json_array();
    fl_buf out = {0};
    srv_tools_finish(&r->tools, &out, calls);
    if (d && out.len)
        json_object_set_new(d, "content", json_stringn(out.data, out.len));
    if (d && json_array_size(calls))
        json_object_set(d, "tool_calls", calls);
    if (d && json_object_size(d))
        send_delta(h, index, d);
    else
        json_decref(d);
    json_decref(calls);
    fl_buf_free(&out);
    return r->tools.n_calls > 0;
}

static void on_done(srv_http *h, srv_req *r, const srv_ev *ev)
{
    const char *finish = ev->finish == FL_FINISH_LENGTH ? "length" : "stop";
    if (ev->finish == FL_FINISH_ERROR || ev->finish == FL_FINISH_CANCELLED) {
        const char *code = ev->finish == FL_FINISH_ERROR ? srv_ev_code(ev) : SRV_E_SHUTTING_DOWN;
        const char *msg = ev->finish == FL_FINISH_ERROR ? (ev->error ? ev->error : "the engine failed")
                                                        : "the request was cancelled (the server "
                                                          "is shutting down)";
        int status = ev->finish == FL_FINISH_ERROR ? 500 : 503;
        fail_exchange(h, status, code, NULL, msg);
        return;
    }
    if (h->stream) {
        sse_begin(h);
        if (tools_tail(h, r, 0))
            finish = "tool_calls";
        if (h->route == R_RESPONSES) { /* the last item closed, then the whole response */
            json_t *o = json_object();
            json_object_set_new(o, "type", json_string(ev->finish == FL_FINISH_LENGTH
                                                           ? "response.incomplete"
                                                           : "response.completed"));
            json_t *x = resp_done(h, r, ev, resp_emit);
            keep_response(r, x);
            json_object_set_new(o, "response", x);
            json_object_set_new(o, "sequence_number", json_integer(h->rs.seq++));
            if (h->rs.err) {
                json_decref(o);
                sse_broken(h, h->resp.len);
                return;
            }
            resp_emit(h, o);
            h->complete = true;
            arm(h);
            return;
        }
        sse_send(h, finish_chunk(h, 0, finish, stop_reason(r, ev)));
        if (h->include_usage) {
            json_t *o = chunk(h, json_object(), NULL);
            json_object_set_new(o, "choices", json_array());
            json_object_set_new(o, "usage", usage_json(ev->stats.prompt_tokens, ev->n_ids, ev->stats.cached_tokens, r->reasoning_tokens));
            sse_send(h, o);
        }
        sse_put(h, "[DONE]");
        h->complete = true;
        arm(h);
        return;
    }
    if (h->route == R_COMPLETION) {
        json_t *o = chunk(h, json_object(), finish);
        json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
        json_object_set_new(ch, "text", json_stringn(ev->text, ev->text_len));
        json_object_set_new(ch, "stop_reason", stop_reason(r, ev));
        bool oom = false;
        json_t *lp = lp_for(h, r, ev, &oom);
        if (lp)
            json_object_set_new(ch, "logprobs", lp);
        json_object_set_new(o, "usage", usage_json(ev->stats.prompt_tokens, ev->n_ids,
                                                   ev->stats.cached_tokens, r->reasoning_tokens));
        json_object_set_new(o, "fogline", stats_json(&ev->stats));
        if (oom) { /* never an answer without the log probabilities it was asked for */
            json_decref(o);
            respond_error(h, 500, SRV_E_INTERNAL, NULL, "out of memory");
            return;
        }
        respond_json(h, 200, o);
        return;
    }
    json_t *o = json_object(), *choices = json_array(), *ch = json_object(), *msg = json_object();
    json_object_set_new(o, "id", json_string(h->cmpl_id));
    json_object_set_new(o, "object", json_string("chat.completion"));
    json_object_set_new(o, "created", json_integer(h->created));
    json_object_set_new(o, "model", json_string(h->s->model_id));
    json_object_set_new(msg, "role", json_string("assistant"));
    bool any;
    if (!r->reason.on || reason_json(msg, &r->reason, ev->text, ev->text_len, true, &any))
        json_object_set_new(msg, "content", json_stringn(ev->text, ev->text_len));
    if (r->tools.on) {
        tools_json(msg, &r->tools, true);
        if (r->tools.n_calls)
            finish = "tool_calls";
    }
    if (h->route == R_RESPONSES) { /* the same message, as the response's output items */
        json_decref(o);
        json_decref(choices);
        json_decref(ch);
        srv_resp_delta(&h->rs, msg, NULL, NULL);
        json_decref(msg);
        json_t *x = resp_done(h, r, ev, NULL);
        if (h->rs.err) {
            json_decref(x);
            respond_error(h, 500, SRV_E_INTERNAL, NULL, "out of memory");
            return;
        }
        keep_response(r, x);
        json_object_set_new(x, "fogline", stats_json(&ev->stats));
        respond_json(h, 200, x);
        return;
    }
    json_object_set_new(ch, "index", json_integer(0));
    json_object_set_new(ch, "message", msg);
    bool oom = false;
    json_t *lp = lp_for(h, r, ev, &oom);
    json_object_set_new(ch, "logprobs", lp ? lp : json_null());
    json_object_set_new(ch, "finish_reason", json_string(finish));
    json_object_set_new(ch, "stop_reason", stop_reason(r, ev));
    json_array_append_new(choices, ch);
    json_object_set_new(o, "choices", choices);
    json_object_set_new(o, "usage", usage_json(ev->stats.prompt_tokens, ev->n_ids, ev->stats.cached_tokens, r->reasoning_tokens));
    json_object_set_new(o, "fogline", stats_json(&ev->stats));
    if (oom) { /* never an answer without the log probabilities it was asked for */
        json_decref(o);
        respond_error(h, 500, SRV_E_INTERNAL, NULL, "out of memory");
        return;
    }
    respond_json(h, 200, o);
}

/* Joined streaming: text of the live segment goes out now, with a space before a segment's
   first text when something came before it. */
static void joined_send(srv_http *h, const char *t, size_t n)
{
    if (!n)
        return;
    fl_buf b = {0};
    if (h->sep_due && h->any_text)
        fl_buf_puts(&b, " ");
    h->sep_due = false;
    fl_buf_append(&b, t, n);
    if (b.err) {
        fl_buf_free(&b);
        sse_broken(h, h->resp.len);
        return;
    }
    json_t *d = json_object();
    json_object_set_new(d, "content", json_stringn(b.data, b.len));
    fl_buf_free(&b);
    h->any_text = true;
    h->s->m.commits_sent++;
    sse_send(h, chunk(h, d, NULL));
}

/* The live segment ended: the next one becomes live (its waiting text goes out), and so on
   while they have ended too. */
static void joined_advance(srv_http *h)
{
    while (h->live < SRV_JOIN_MAX && h->ended[h->live]) {
        h->live++;
        h->sep_due = true;
        if (h->live < SRV_JOIN_MAX) {
            joined_send(h, h->pend[h->live].data, h->pend[h->live].len);
            fl_buf_free(&h->pend[h->live]);
        }
    }
}

static void on_joined_event(srv_http *h, srv_req *r, const srv_ev *ev)
{
    int k = r->segment;
    if (k < 0 || k >= SRV_JOIN_MAX)
        return;
    if (ev->type == FL_EV_DONE) {
        h->hit_length |= ev->finish == FL_FINISH_LENGTH;
        if (!h->stream) {
            free(r->group_text);
            r->group_text = strndup(ev->text, ev->text_len);
            return;
        }
        if (ev->finish != FL_FINISH_STOP && ev->finish != FL_FINISH_LENGTH)
            return; /* the group's end reports the failure */
        sse_begin(h);
        h->ended[k] = true;
        joined_advance(h);
        return;
    }
    if (!h->stream || ev->type != FL_EV_COMMIT || !ev->text_len)
        return;
    sse_begin(h);
    if (k == h->live)
        joined_send(h, ev->text, ev->text_len);
    else if (fl_buf_append(&h->pend[k], ev->text, ev->text_len))
        sse_broken(h, h->resp.len); /* a later segment's text is lost: the answer cannot be whole */
}

/* A commit's chunk of choice index: its delta d (taken), when it says something (any), and with
   log probabilities, the commit's tokens' (then also a delta that says nothing yet: a tag held
   back, a call not decided). */
static void send_commit(srv_http *h, srv_req *r, int index, json_t *d, bool any,
                        const srv_ev *ev)
{
    if (!r->chat.logprobs) { /* (always so on /v1/responses) */
        if (any) /* a commit that is all tag or held back: nothing to say yet */
            send_delta(h, index, d);
        else
            json_decref(d);
        return;
    }
    if (!any) {
        json_object_clear(d);
        if (!ev->n_lps) {
            json_decref(d);
            return;
        }
    }
    bool oom = false;
    json_t *lp = lp_for(h, r, ev, &oom), *o = oom ? NULL : chunk_at(h, index, d, NULL);
    if (!o) {
        json_decref(lp);
        if (oom)
            json_decref(d);
        sse_broken(h, h->resp.len); /* no chunk without what it was asked to carry */
        return;
    }
    json_object_set_new(json_array_get(json_object_get(o, "choices"), 0), "logprobs", lp);
    sse_send(h, o);
}

/* A fan-out branch (choice r->segment): streamed as that choice's chunks; the answer (or the
   stream's end) comes with the group. */
static void on_branch_event(srv_http *h, srv_req *r, const srv_ev *ev)
{
    if (h->joined) {
        on_joined_event(h, r, ev);
        return;
    }
    if (ev->type == FL_EV_DONE) {
        if (!h->stream) { /* the answer part and the reasoning, as on_done splits them */
            free(r->group_text);
            free(r->group_reasoning);
            r->group_text = r->group_reasoning = NULL;
            json_t *d = r->reason.on ? json_object() : NULL;
            bool any;
            if (d && !reason_json(d, &r->reason, ev->text, ev->text_len, true, &any)) {
                const json_t *a = json_object_get(d, "reasoning_content");
                const json_t *b = json_object_get(d, "content");
                r->group_text = strndup(json_string_value(b), json_string_length(b));
                if (a)
                    r->group_reasoning = strndup(json_string_value(a), json_string_length(a));
            }
            if (!r->group_text)
                r->group_text = strndup(ev->text, ev->text_len);
            if (r->tools.on && r->group_text) { /* the answer part's calls, as on_done has them */
                json_t *m = json_object();
                json_object_set_new(m, "content", json_string(r->group_text));
                tools_json(m, &r->tools, true);
                const json_t *c = json_object_get(m, "content");
                free(r->group_text);
                r->group_text = strndup(json_is_string(c) ? json_string_value(c) : "",
                                        json_string_length(c));
                json_decref(r->group_calls);
                r->group_calls = json_incref(json_object_get(m, "tool_calls"));
                json_decref(m);
            }
            json_decref(d);
            json_decref(r->group_logprobs);
            bool oom = false;
            r->group_logprobs = lp_for(h, r, ev, &oom);
            r->group_lp_lost = oom;
            return;
        }
        if (ev->finish == FL_FINISH_STOP || ev->finish == FL_FINISH_LENGTH) {
            sse_begin(h);
            if (r->reason.on)
                reason_tail(h, r);
            bool calls = tools_tail(h, r, r->segment);
            sse_send(h, finish_chunk(h, r->segment, calls ? "tool_calls" /* (as a lone reply's) */
                                                    : ev->finish == FL_FINISH_LENGTH ? "length" : "stop",
                                     stop_reason(r, ev)));
        }
        return;
    }
    if (!h->stream)
        return;
    sse_begin(h);
    if (ev->type == FL_EV_COMMIT && (ev->text_len || ev->n_lps)) {
        json_t *d = json_object();
        bool any = true;
        if (!r->reason.on || reason_json(d, &r->reason, ev->text, ev->text_len, false, &any))
            json_object_set_new(d, "content", json_stringn(ev->text, ev->text_len));
        if (r->tools.on) { /* a call goes out whole, as one tool_calls delta */
            tools_json(d, &r->tools, false);
            any = json_object_size(d) > 0;
        }
        h->s->m.commits_sent++;
        send_commit(h, r, r->segment, d, any, ev);
    }
}

/* /generate's answer: {"output": [...]}, or the first failing segment's error (counted when the
   branch was rejected or failed; a cancellation by the drain is counted here). */
static void generate_done(srv_http *h, srv_req *g)
{
    json_t *body;
    const char *code, *param;
    char m[sizeof h->gen.msg];
    if (!srv_generate_answer(&h->gen, g, &body, &code, &param, m, sizeof m)) {
        respond_json(h, 200, body);
        return;
    }
    if (h->gen.segment < 0)
        srv_metrics_error(&h->s->m, code);
    int status = status_of(code);
    const char *oc = !strcmp(code, SRV_E_PROMPT_TOO_LONG) ? "context_length_exceeded" : code;
    respond(h, status, "application/json", srv_openai_error(openai_type(status), oc, param, m));
}

static void http_on_group_done(void *owner, srv_req *g)
{
    srv_http *h = owner;
    h->req = NULL;
    list_del(h->s, h);
    long long pt, ct, cached;
    srv_group_totals(g, &pt, &ct, &cached);
    const char *err = NULL;
    size_t i;
    json_t *v;
    json_array_foreach(g->seg_results, i, v)
    {
        if (!err && json_string_value(json_object_get(v, "error")))
            err = json_string_value(json_object_get(v, "error"));
        if (!err && !strcmp(json_string_value(json_object_get(v, "finish")), "cancelled"))
            err = SRV_E_SHUTTING_DOWN;
    }
    bool samples = g->chat.parallel == SRV_PAR_SAMPLES;
    if (samples && h->gen.segment >= 0) {
        /* a choice refused before the engine: its refusal's own code and message, as the
           request (that prompt) alone would get it */
        bool ctx = !strcmp(h->gen.code, SRV_E_PROMPT_TOO_LONG);
        const char *param = g->chat.raw ? "prompt" : ctx ? "messages" : h->gen.param;
        fail_exchange(h, status_of(h->gen.code), ctx ? "context_length_exceeded" : h->gen.code,
                      param, h->gen.msg);
        return;
    }
    if (err) { /* a branch failed or was cancelled: the request failed */
        const char *msg = !strcmp(err, SRV_E_SHUTTING_DOWN) ? "the request was cancelled (the "
                          "server is shutting down)"
                          : samples ? "a choice of the request failed"
                                    : "a segment of the request failed";
        int status = !strcmp(err, SRV_E_SHUTTING_DOWN) ? 503 : status_of(err);
        fail_exchange(h, status, err, samples ? "n" : "parallel", msg);
        return;
    }
    if (h->stream) {
        sse_begin(h);
        if (h->joined) { /* every branch has ended: what still waits goes out, then the end */
            for (int k = 0; k < SRV_JOIN_MAX; k++)
                h->ended[k] = true;
            joined_advance(h);
            sse_send(h, finish_chunk(h, 0, h->hit_length ? "length" : "stop", json_null()));
        }
        if (h->include_usage) {
            json_t *o = chunk(h, json_object(), NULL);
            json_object_set_new(o, "choices", json_array());
            json_object_set_new(o, "usage", usage_json((int)pt, (int)ct, (int)cached, srv_group_reasoning(g)));
            sse_send(h, o);
        }
        sse_put(h, "[DONE]");
        h->complete = true;
        arm(h);
        return;
    }
    bool text = h->route == R_COMPLETION;
    json_t *o = json_object(), *choices = json_array();
    json_object_set_new(o, "id", json_string(h->cmpl_id));
    json_object_set_new(o, "object", json_string(text ? "text_completion" : "chat.completion"));
    json_object_set_new(o, "created", json_integer(h->created));
    json_object_set_new(o, "model", json_string(h->s->model_id));
    if (h->joined) { /* one choice: the points' answers in order */
        fl_buf b = {0};
        json_array_foreach(g->seg_results, i, v)
        {
            const char *t = json_string_value(json_object_get(v, "text"));
            if (t && *t) {
                if (b.len)
                    fl_buf_puts(&b, " ");
                fl_buf_puts(&b, t);
            }
        }
        if (b.err) {
            fl_buf_free(&b);
            json_decref(choices);
            json_decref(o);
            respond_error(h, 500, SRV_E_INTERNAL, NULL, "out of memory");
            return;
        }
        json_t *ch = json_object(), *msg = json_object();
        json_object_set_new(msg, "role", json_string("assistant"));
        json_object_set_new(msg, "content", b.len ? json_stringn(b.data, b.len) : json_string(""));
        fl_buf_free(&b);
        json_object_set_new(ch, "index", json_integer(0));
        json_object_set_new(ch, "message", msg);
        json_object_set_new(ch, "logprobs", json_null());
        json_object_set_new(ch, "finish_reason", json_string(h->hit_length ? "length" : "stop"));
        json_object_set_new(ch, "stop_reason", json_null()); /* the points' own stops differ */
        json_array_append_new(choices, ch);
        json_t *x = json_object();
        json_object_set_new(x, "outline_points", json_integer(g->n_outline));
        json_object_set_new(x, "segments", json_integer((json_int_t)json_array_size(g->seg_results)));
        json_object_set_new(o, "fogline", x);
    }
    json_array_foreach(g->seg_results, i, v)
    {
        if (h->joined)
            break;
        json_t *ch = json_object();
        const char *t = json_string_value(json_object_get(v, "text"));
        const char *rs = json_string_value(json_object_get(v, "reasoning"));
        json_object_set_new(ch, "index", json_integer((json_int_t)i));
        if (text) {
            json_object_set_new(ch, "text", json_string(t ? t : ""));
        } else {
            json_t *msg = json_object();
            json_t *calls = json_object_get(v, "tool_calls");
            json_object_set_new(msg, "role", json_string("assistant"));
            /* (content null beside calls when there is none, as a single reply has it) */
            json_object_set_new(msg, "content", t && (*t || !calls) ? json_string(t)
                                                : calls ? json_null() : json_string(""));
            if (rs)
                json_object_set_new(msg, "reasoning_content", json_string(rs));
            if (calls)
                json_object_set(msg, "tool_calls", calls);
            json_object_set_new(ch, "message", msg);
        }
        json_t *lp = json_object_get(v, "logprobs");
        json_object_set_new(ch, "logprobs", lp ? json_incref(lp) : json_null());
        const char *fin = json_string_value(json_object_get(v, "finish"));
        if (json_object_get(v, "tool_calls")) /* (cut by length too, as a lone reply's) */
            fin = "tool_calls";
        json_object_set_new(ch, "finish_reason", json_string(fin));
        json_t *sr = json_object_get(v, "stop_reason");
        json_object_set_new(ch, "stop_reason", sr ? json_incref(sr) : json_null());
        json_array_append_new(choices, ch);
    }
    json_object_set_new(o, "choices", choices);
    json_object_set_new(o, "usage", usage_json((int)pt, (int)ct, (int)cached, srv_group_reasoning(g)));
    respond_json(h, 200, o);
}

static void http_on_event(void *owner, srv_req *r, const srv_ev *ev)
{
    srv_http *h = owner;
    if (r->parent) {
        on_branch_event(h, r, ev);
        return;
    }
    if (ev->type == FL_EV_DONE) {
        h->req = NULL;
        list_del(h->s, h);
        if (h->stream && r->reason.on &&
            (ev->finish == FL_FINISH_STOP || ev->finish == FL_FINISH_LENGTH))
            reason_tail(h, r);
        on_done(h, r, ev);
        return;
    }
    if (!h->stream)
        return; /* non-streaming: the done event carries the whole text */
    sse_begin(h);
    if (ev->type == FL_EV_COMMIT && (ev->text_len || ev->n_lps)) {
        json_t *d = json_object();
        bool any = true;
        if (!r->reason.on || reason_json(d, &r->reason, ev->text, ev->text_len, false, &any))
            json_object_set_new(d, "content", json_stringn(ev->text, ev->text_len));
        if (r->tools.on) { /* a call goes out whole, as one tool_calls delta */
            tools_json(d, &r->tools, false);
            any = json_object_size(d) > 0;
        }
        h->s->m.commits_sent++;
        send_commit(h, r, 0, d, any, ev);
    }
}

static void http_on_reject(void *owner, srv_req *r, const char *code, const char *msg)
{
    srv_http *h = owner;
    if (r->parent && r->parent->chat.parallel == SRV_PAR_SAMPLES &&
        (h->gen.segment < 0 || r->segment < h->gen.segment)) {
        /* samples: the answer reports the lowest choice's refusal as it is (whichever branch
           ended first), and the rest are cancelled: the answer is that error */
        h->gen.segment = r->segment;
        h->gen.code = code;
        h->gen.param = r->work_param;
        const srv_chat *gc = &r->parent->chat;
        if (gc->n_prompts > 1) /* which prompt of a batch */
            snprintf(h->gen.msg, sizeof h->gen.msg, "prompt[%d]: %s",
                     r->segment / (gc->n_choices > 0 ? gc->n_choices : 1),
                     msg && *msg ? msg : code);
        else
            snprintf(h->gen.msg, sizeof h->gen.msg, "%s", msg && *msg ? msg : code);
        srv_utf8_clip(h->gen.msg);
        srv_req_cancel(r->parent);
        return;
    }
    if (r->parent) /* a branch: the group's answer reports it */
        return;
    h->req = NULL;
    list_del(h->s, h);
    /* srv_req's reject already counted the error */
    int status = status_of(code);
    const char *oc = !strcmp(code, SRV_E_PROMPT_TOO_LONG) ? "context_length_exceeded" : code;
    if (h->sse) { /* the stream has begun (a group's parts went out): its end says it */
        sse_error(h, status, oc, msg);
        return;
    }
    const char *param = r->work_param;
    char words[FL_ERR_MSG + 128];
    msg = named_as_sent(h, &param, msg, words, sizeof words);
    char *body = srv_openai_error(openai_type(status), oc, param, msg);
    respond(h, status, "application/json", body);
}

/* A chat completion's exchange as the owner of its request or group (serve.h). */
static const srv_owner_ops http_owner = {
    .event = http_on_event,
    .refused = http_on_reject,
    .group_done = http_on_group_done,
};

/* /generate's exchange: a chat completion's, except that a failing segment is remembered (and
   fails the group) and the group's end is /generate's answer. */
static void gen_on_event(void *owner, srv_req *r, const srv_ev *ev)
{
    srv_http *h = owner;
    if (r->parent && ev->type == FL_EV_DONE && ev->finish == FL_FINISH_ERROR)
        srv_generate_fail(&h->gen, r->parent, r->segment, SRV_E_ENGINE, ev->error);
    http_on_event(h, r, ev);
}

static void gen_on_reject(void *owner, srv_req *r, const char *code, const char *msg)
{
    srv_http *h = owner;
    if (r->parent) {
        srv_generate_fail(&h->gen, r->parent, r->segment, code, msg);
        return;
    }
    http_on_reject(h, r, code, msg);
}

static void gen_on_group_done(void *owner, srv_req *g)
{
    srv_http *h = owner;
    h->req = NULL;
    list_del(h->s, h);
    generate_done(h, g);
}

static const srv_owner_ops generate_owner = {
    .event = gen_on_event,
    .refused = gen_on_reject,
    .group_done = gen_on_group_done,
};

/* ---- lws callbacks ---- */

static void http_free(srv_pss *pss)
{
    srv_http *h = pss->obj;
    pss->obj = NULL;
    pss->kind = SRV_PSS_NONE;
    if (!h)
        return;
    if (h->req) {
        srv_req *r = h->req;
        h->req = NULL;
        list_del(h->s, h);
        srv_req_orphan(r);
    }
    srv_tokenize_detach(h->tok);
    srv_stored_detach(h->stored);
    fl_buf_free(&h->body);
    fl_buf_free(&h->resp);
    for (int k = 0; k < SRV_JOIN_MAX; k++)
        fl_buf_free(&h->pend[k]);
    srv_resp_free(&h->rs);
    json_decref(h->rs_echo);
    json_decref(h->rs_input);
    free(h);
}

static void add_cors(srv_http *h, struct lws *wsi)
{
    char origin[256];
    if (lws_hdr_copy(wsi, origin, sizeof origin, WSI_TOKEN_ORIGIN) <= 0)
        return;
    size_t el = strlen(h->extra);
    snprintf(h->extra + el, sizeof h->extra - el,
             "access-control-allow-origin: %s\r\nvary: Origin\r\n"
             "access-control-expose-headers: fogline-seed\r\n", origin); /* a page may read it */
}

static int on_http(srv *s, struct lws *wsi, srv_pss *pss)
{
    if (pss->obj)
        http_free(pss);
    srv_http *h = calloc(1, sizeof *h);
    if (!h)
        return -1;
    h->s = s;
    h->wsi = wsi;
    pss->kind = SRV_PSS_HTTP;
    pss->obj = h;
    char *uri_ptr = NULL;
    int uri_len = 0;
    int meth = lws_http_get_uri_and_method(wsi, &uri_ptr, &uri_len);
    char uri[1100];
    snprintf(uri, sizeof uri, "%.*s", uri_len > 1024 ? 1024 : uri_len, uri_ptr ? uri_ptr : "/");
    /* (the path as lws decoded it, %XX included; the query is not in it: lws keeps it apart,
       lws_get_urlarg_by_name, so a '?' here is the path's own, %3F) */
    char q[300];
    SRV_DEBUG(&s->log, "event=http method=%d uri=%s", meth, srv_log_q(q, sizeof q, uri));
    char origin[256];
    if (lws_hdr_copy(wsi, origin, sizeof origin, WSI_TOKEN_ORIGIN) > 0 &&
        !srv_origin_allowed(s->cfg, origin)) {
        respond_error(h, 403, SRV_E_UNAUTHORIZED, NULL, "this Origin is not allowed");
        return 0;
    }
    add_cors(h, wsi);
    bool get = meth == LWSHUMETH_GET || meth == LWSHUMETH_HEAD;
    h->head = meth == LWSHUMETH_HEAD;
    if (meth == LWSHUMETH_OPTIONS) {
        size_t el = strlen(h->extra);
        snprintf(h->extra + el, sizeof h->extra - el,
                 "access-control-allow-methods: GET, POST, DELETE, OPTIONS\r\n"
                 "access-control-allow-headers: authorization, content-type\r\n"
                 "access-control-max-age: 600\r\n");
        respond(h, 204, "text/plain", NULL);
        return 0;
    }
    bool v1 = !strncmp(uri, "/v1/", 4);
    bool gen = !strcmp(uri, "/generate");
    bool tok = !strcmp(uri, "/tokenize"), detok = !strcmp(uri, "/detokenize");
    bool sess = !strncmp(uri, "/sessions/", 10);
    if ((v1 || gen || tok || detok || sess) && !authorized(h, wsi)) {
        size_t el = strlen(h->extra);
        snprintf(h->extra + el, sizeof h->extra - el, "www-authenticate: Bearer\r\n");
        respond_error(h, 401, "invalid_api_key", NULL,
                      "missing or wrong API key (Authorization: Bearer KEY)");
        return 0;
    }
    bool text = !strcmp(uri, "/v1/completions"), resp = !strcmp(uri, "/v1/responses");
    if (!strcmp(uri, "/v1/chat/completions") || text || resp || gen || tok || detok) {
        if (meth != LWSHUMETH_POST) {
            if (gen || tok || detok) {
                size_t el = strlen(h->extra);
                snprintf(h->extra + el, sizeof h->extra - el, "allow: POST\r\n");
            }
            respond_error(h, 405, "method_not_allowed", NULL, "use POST");
            return 0;
        }
        h->route = gen ? R_GENERATE : text ? R_COMPLETION : resp ? R_RESPONSES : tok ? R_TOKENIZE
                                                : detok ? R_DETOKENIZE : R_CHAT;
        srv_generate_init(&h->gen);
        char cl[32];
        if (lws_hdr_copy(wsi, cl, sizeof cl, WSI_TOKEN_HTTP_CONTENT_LENGTH) > 0 &&
            strtoull(cl, NULL, 10) > s->cfg->max_message) {
            h->body_too_big = true;
            char m[128];
            snprintf(m, sizeof m, "the request body may have at most %zu bytes", s->cfg->max_message);
            respond_error(h, 413, SRV_E_TOO_LARGE, NULL, m);
            return 0;
        }
        if (s->draining && !tok && !detok) { /* those two do not need the engine */
            respond_error(h, 503, SRV_E_SHUTTING_DOWN, NULL, "the server is shutting down");
            return 0;
        }
        return 0; /* the body follows */
    }
    h->route = R_OTHER;
    if (sess) {
        if (meth == LWSHUMETH_DELETE) {
            route_forget(h, uri + 10);
        } else {
            size_t el = strlen(h->extra);
            snprintf(h->extra + el, sizeof h->extra - el, "allow: DELETE\r\n");
            respond_error(h, 405, "method_not_allowed", NULL, "this path takes DELETE");
        }
        return 0;
    }
    if (!strncmp(uri, "/v1/responses/", 14)) {
        char arg[32];
        const char *st = get ? lws_get_urlarg_by_name(wsi, "stream=", arg, sizeof arg) : NULL;
        if (st && strcmp(st, "false")) { /* (the SDK's retrieve(id, {stream: true})) */
            respond_error(h, 400, SRV_E_BAD_REQUEST, "stream", "'stream' replays a background "
                          "response's events: this server answers every response on its own "
                          "request (retrieve it without 'stream')");
        } else if (meth == LWSHUMETH_DELETE || get) {
            route_stored(h, uri + 14, meth == LWSHUMETH_DELETE);
        } else {
            size_t el = strlen(h->extra);
            snprintf(h->extra + el, sizeof h->extra - el, "allow: GET, DELETE\r\n");
            respond_error(h, 405, "method_not_allowed", NULL, "this path takes GET or DELETE");
        }
        return 0;
    }
    bool models = !strcmp(uri, "/v1/models") || !strncmp(uri, "/v1/models/", 11);
    if (v1 && !models) { /* (a POST to /v1/embeddings is no wrong method: there is no such path) */
        char m[200];
        snprintf(m, sizeof m, "unknown endpoint %.80s: this server serves /v1/models, "
                 "/v1/chat/completions, /v1/completions and /v1/responses", uri);
        respond_error(h, 404, "not_found", NULL, m);
        return 0;
    }
    if (!get) {
        respond_error(h, 405, "method_not_allowed", NULL, "this path takes GET");
        return 0;
    }
    if (!strcmp(uri, "/health")) {
        respond(h, 200, "application/json", strdup("{\"status\":\"ok\"}\n"));
    } else if (!strcmp(uri, "/ready")) {
        bool ready = s->engine && !s->draining;
        respond(h, ready ? 200 : 503, "application/json",
                strdup(ready ? "{\"status\":\"ready\"}\n"
                             : s->draining ? "{\"status\":\"draining\"}\n"
                                           : "{\"status\":\"starting\"}\n"));
    } else if (!strcmp(uri, "/metrics")) {
        route_metrics(h);
    } else if (!strcmp(uri, "/v1/models")) {
        route_models(h, NULL);
    } else if (!strncmp(uri, "/v1/models/", 11) && uri[11]) {
        route_models(h, uri + 11);
    } else {
        h->route = R_STATIC;
        route_static(h, uri);
    }
    return 0;
}

int srv_http_callback(struct lws *wsi, int reason, void *user, void *in, size_t len)
{
    srv *s = lws_context_user(lws_get_context(wsi));
    srv_pss *pss = user;
    srv_http *h = pss && pss->kind == SRV_PSS_HTTP ? pss->obj : NULL;
    switch (reason) {
    case LWS_CALLBACK_HTTP:
        return pss ? on_http(s, wsi, pss) : -1;
    case LWS_CALLBACK_HTTP_BODY:
        if (h && takes_body(h) && !h->responding &&
            !h->body_too_big) {
            if (h->body.len + len > s->cfg->max_message) {
                h->body_too_big = true;
                fl_buf_free(&h->body);
            } else if (fl_buf_append(&h->body, in, len)) {
                return -1;
            }
        }
        return 0;
    case LWS_CALLBACK_HTTP_BODY_COMPLETION:
        if (h && takes_body(h) && !h->responding && !h->req)
            chat_start(h);
        return 0;
    case LWS_CALLBACK_HTTP_WRITEABLE:
        return h ? on_writeable(h, wsi) : 0;
    case LWS_CALLBACK_HTTP_DROP_PROTOCOL:
    case LWS_CALLBACK_CLOSED_HTTP:
        if (pss && pss->kind == SRV_PSS_HTTP)
            http_free(pss);
        return 0;
    default:
        return 0;
    }
}
