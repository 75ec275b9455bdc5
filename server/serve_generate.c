/* serve_generate.c: POST /generate (serve_generate.h). The body is checked here with messages
 * that name /generate's own fields; everything it shares with /v1/chat/completions (max_tokens
 * and its limit, sampling, decoding) goes through that route's parser, so the two cannot drift
 * apart. */
#include "serve_generate.h"
#include "serve_group.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const known[] = {"segments", "max_tokens", "temperature", "top_p", "top_k",
                                    "min_p", "seed", "stop", "decoding", "logit_bias",
                                    "min_tokens", "ignore_eos", "presence_penalty",
                                    "frequency_penalty", "repetition_penalty",
                                    "stop_token_ids", "include_stop_str_in_output"};

void srv_generate_init(srv_gen_fail *f)
{
    memset(f, 0, sizeof *f);
    f->segment = -1;
}

static int bad(const char **code, const char **param, char *msg, size_t msglen, const char *c,
               const char *p, const char *fmt, ...) FL_PRINTF(7, 8);
static int bad(const char **code, const char **param, char *msg, size_t msglen, const char *c,
               const char *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, msglen, fmt, ap);
    va_end(ap);
    srv_utf8_clip(msg); /* a quoted field name may be cut mid-character */
    *code = c;
    *param = p;
    return -1;
}

static const char *json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER:
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

int srv_generate_parse(const json_t *o, const srv_limits *L, srv_chat *out, const char **code,
                       const char **param, char *msg, size_t msglen)
{
    memset(out, 0, sizeof *out);
    *param = NULL;
    if (!json_is_object(o))
        return bad(code, param, msg, msglen, SRV_E_BAD_REQUEST, NULL,
                   "the request body must be a JSON object: {\"segments\": [\"...\", ...]}");
    /* a misspelt option must not be silently ignored */
    const char *key = srv_json_unknown_key(o, known, sizeof known / sizeof known[0]);
    if (key)
        return bad(code, param, msg, msglen, SRV_E_BAD_REQUEST, NULL,
                   "unknown field '%.64s' in /generate (segments, max_tokens, temperature, "
                   "top_p, top_k, min_p, seed, stop, decoding, logit_bias, min_tokens, "
                   "ignore_eos, presence_penalty, frequency_penalty, repetition_penalty, "
                   "stop_token_ids, include_stop_str_in_output)", key);
    const json_t *v;
    const json_t *segs = json_object_get(o, "segments");
    if (!segs)
        return bad(code, param, msg, msglen, SRV_E_BAD_REQUEST, "segments",
                   "'segments' is missing: {\"segments\": [\"...\", ...]}");
    if (!json_is_array(segs))
        return bad(code, param, msg, msglen, SRV_E_BAD_REQUEST, "segments",
                   "'segments' must be an array of strings, got %s", json_kind(segs));
    size_t n = json_array_size(segs);
    if (n == 0)
        return bad(code, param, msg, msglen, SRV_E_BAD_REQUEST, "segments", "'segments' is empty");
    if (n > SRV_MAX_SEGMENTS)
        return bad(code, param, msg, msglen, SRV_E_OUT_OF_RANGE, "segments",
                   "at most %d segments, got %zu", SRV_MAX_SEGMENTS, n);
    for (size_t i = 0; i < n; i++) {
        const json_t *t = json_array_get(segs, i);
        if (!json_is_string(t))
            return bad(code, param, msg, msglen, SRV_E_BAD_REQUEST, "segments",
                       "segments[%zu] must be a string, got %s", i, json_kind(t));
        if (json_string_length(t) == 0)
            return bad(code, param, msg, msglen, SRV_E_BAD_REQUEST, "segments",
                       "segments[%zu] is empty", i);
        if (memchr(json_string_value(t), 0, json_string_length(t)))
            return bad(code, param, msg, msglen, SRV_E_BAD_REQUEST, "segments",
                       "segments[%zu] contains a NUL", i);
    }
    /* the rest is a fan-out chat without shared messages: each segment alone is the prompt */
    json_t *q = json_object(), *par = json_object();
    if (!q || !par) {
        json_decref(q);
        json_decref(par);
        return bad(code, param, msg, msglen, SRV_E_INTERNAL, NULL, "out of memory");
    }
    json_object_foreach((json_t *)o, key, v)
    {
        if (strcmp(key, "segments"))
            json_object_set(q, key, (json_t *)v);
    }
    json_object_set_new(par, "mode", json_string("fanout"));
    json_object_set(par, "segments", (json_t *)segs);
    json_object_set_new(q, "parallel", par);
    int rc = srv_parse_chat_openai(q, L, out, code, param, msg, msglen);
    json_decref(q);
    return rc;
}

void srv_generate_fail(srv_gen_fail *f, srv_req *g, int k, const char *code, const char *msg)
{
    if (f->segment < 0 || k < f->segment) {
        f->segment = k;
        f->code = code;
        snprintf(f->msg, sizeof f->msg, "segments[%d]: %s", k, msg && *msg ? msg : code);
        srv_utf8_clip(f->msg);
    }
    if (g)
        srv_req_cancel(g);
}

/* A branch result's error code as the static string it was made from (the result's copy goes
   with the group, and metrics keep the pointer). */
static const char *static_code(const char *c)
{
    static const char *const codes[] = {SRV_E_PROMPT_TOO_LONG, SRV_E_BUSY, SRV_E_SHUTTING_DOWN,
                                        SRV_E_ENGINE, SRV_E_BAD_REQUEST, SRV_E_OUT_OF_RANGE};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (!strcmp(c, codes[i]))
            return codes[i];
    return SRV_E_INTERNAL;
}

int srv_generate_answer(const srv_gen_fail *f, const srv_req *g, json_t **body, const char **code,
                        const char **param, char *msg, size_t msglen)
{
    *body = NULL;
    *param = NULL;
    size_t i;
    json_t *v;
    if (f->segment >= 0)
        return bad(code, param, msg, msglen, f->code, "segments", "%s", f->msg);
    json_array_foreach(g->seg_results, i, v)
    {
        const char *err = json_string_value(json_object_get(v, "error"));
        if (err) /* failed without a message reaching the exchange */
            return bad(code, param, msg, msglen, static_code(err), "segments",
                       "segments[%zu] failed (%s)", i, static_code(err));
        const char *fin = json_string_value(json_object_get(v, "finish"));
        if (!fin || (strcmp(fin, "stop") && strcmp(fin, "length")))
            /* cancelled while the owner is still here: only the end of a drain does that */
            return bad(code, param, msg, msglen, SRV_E_SHUTTING_DOWN, NULL,
                       "the request was cancelled (the server is shutting down)");
    }
    long long pt, ct, cached;
    srv_group_totals(g, &pt, &ct, &cached);
    json_t *o = json_object(), *output = json_array(), *segs = json_array(), *x = json_object(),
           *u = json_object();
    json_array_foreach(g->seg_results, i, v)
    {
        const char *t = json_string_value(json_object_get(v, "text"));
        json_array_append_new(output, json_string(t ? t : ""));
        json_t *s = json_object();
        json_object_set(s, "finish", json_object_get(v, "finish"));
        if (json_object_get(v, "stop_reason"))
            json_object_set(s, "stop_reason", json_object_get(v, "stop_reason"));
        json_object_set(s, "usage", json_object_get(v, "usage"));
        json_array_append_new(segs, s);
    }
    json_object_set_new(u, "prompt_tokens", json_integer(pt));
    json_object_set_new(u, "completion_tokens", json_integer(ct));
    json_object_set_new(u, "total_tokens", json_integer(pt + ct));
    json_object_set_new(u, "cached_tokens", json_integer(cached));
    /* the guide's answer is {"output": [...]}; what a client may also want (why a segment
       stopped, the tokens) goes under the same extension key as on the OpenAI route */
    json_object_set_new(x, "segments", segs);
    json_object_set_new(x, "usage", u);
    json_object_set_new(o, "output", output);
    json_object_set_new(o, "fogline", x);
    if (!o || !output || !segs || !x || !u) {
        json_decref(o);
        return bad(code, param, msg, msglen, SRV_E_INTERNAL, NULL, "out of memory");
    }
    *body = o;
    return 0;
}
