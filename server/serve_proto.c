/* serve_proto.c: parsing and checking of chat requests (WebSocket and OpenAI), error frames.
 * Every check names the field, so a client author can fix the request from the message. */
#include "serve_proto.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

void srv_chat_free(srv_chat *c)
{
    if (!c)
        return;
    free(c->id);
    free(c->session);
    free(c->session_save);
    for (size_t i = 0; i < c->n_msgs; i++) {
        free((void *)c->msgs[i].role);
        free((void *)c->msgs[i].content);
    }
    free(c->msgs);
    for (int i = 0; i < c->n_stop; i++)
        free(c->stop[i]);
    free(c->stop);
    for (int i = 0; i < c->n_segments; i++)
        free(c->segments[i]);
    free(c->segments);
    free(c->model);
    free(c->schema);
    free(c->tools);
    free(c->tool_schema);
    for (size_t i = 0; i < c->n_calls; i++)
        free(c->calls[i]);
    free(c->calls);
    for (int i = 0; i < c->n_prompts; i++) {
        free(c->prompts[i].text);
        free(c->prompts[i].ids);
    }
    free(c->prompts);
    free(c->bias_ids);
    free(c->bias);
    free(c->stop_ids);
    memset(c, 0, sizeof *c);
}

const char *srv_finish_name(int finish)
{
    switch (finish) {
    case FL_FINISH_STOP: return "stop";
    case FL_FINISH_LENGTH: return "length";
    case FL_FINISH_CANCELLED: return "cancelled";
    default: return "error";
    }
}

bool srv_utf8_valid(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        uint32_t cp, min;
        if ((c & 0xe0) == 0xc0) {
            len = 2, cp = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            len = 3, cp = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return false;
        }
        if (i + len > n)
            return false;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += len;
    }
    return true;
}

bool srv_id_ok(const json_t *v)
{
    return json_is_string(v) && json_string_length(v) >= 1 && json_string_length(v) <= SRV_ID_MAX;
}

/* A JSON number as a double; integers must be integral. */
static bool num(const json_t *v, double *out)
{
    if (!json_is_number(v))
        return false;
    *out = json_number_value(v);
    return isfinite(*out);
}

static bool integer(const json_t *v, double *out)
{
    return num(v, out) && floor(*out) == *out;
}

/* name: for messages ("decoding.threshold"); *param gets it for OpenAI errors */
typedef struct pctx {
    const char **code;
    const char **param;
    char *msg;
    size_t msglen;
} pctx;

const char *srv_json_unknown_key(const json_t *o, const char *const *known, size_t n)
{
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)o, key, v)
    {
        bool ok = false;
        for (size_t i = 0; i < n && !ok; i++)
            ok = !strcmp(key, known[i]);
        if (!ok)
            return key;
    }
    return NULL;
}

static int bad(pctx *P, const char *code, const char *param, const char *fmt, ...) FL_PRINTF(4, 5);
void srv_utf8_clip(char *s)
{
    size_t n = strlen(s);
    /* a length-limited %.Ns of client text (or the buffer's end) may cut one character: at
       most its first 3 bytes are left over */
    for (size_t k = 0; k <= 3 && k <= n; k++)
        if (srv_utf8_valid((const unsigned char *)s, n - k)) {
            s[n - k] = 0;
            return;
        }
    for (size_t i = 0; i < n; i++) /* not from a cut: never send invalid UTF-8 on */
        if ((unsigned char)s[i] >= 0x80)
            s[i] = '?';
}

static int bad(pctx *P, const char *code, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(P->msg, P->msglen, fmt, ap);
    va_end(ap);
    srv_utf8_clip(P->msg); /* quoted client text may be cut mid-character */
    *P->code = code;
    if (P->param)
        *P->param = param;
    return -1;
}

static int get_num(pctx *P, const json_t *o, const char *key, const char *name, double lo, double hi,
                   bool lo_open, float *out)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    double d;
    if (!num(v, &d))
        return bad(P, SRV_E_BAD_REQUEST, name, "'%s' must be a number", name);
    if (d > hi || d < lo || (lo_open && d <= lo))
        return bad(P, SRV_E_OUT_OF_RANGE, name, "'%s' must be in %s%g, %g], got %g", name,
                   lo_open ? "(" : "[", lo, hi, d);
    *out = (float)d;
    return 0;
}

static int get_int(pctx *P, const json_t *o, const char *key, const char *name, double lo, double hi,
                   double *out)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 1; /* absent */
    double d;
    if (!integer(v, &d))
        return bad(P, SRV_E_BAD_REQUEST, name, "'%s' must be an integer", name);
    if (d < lo || d > hi)
        return bad(P, SRV_E_OUT_OF_RANGE, name, "'%s' must be in [%.0f, %.0f], got %.0f", name, lo,
                   hi, d);
    *out = d;
    return 0;
}

static int get_bool(pctx *P, const json_t *o, const char *key, const char *name, bool *out)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return bad(P, SRV_E_BAD_REQUEST, name, "'%s' must be true or false", name);
    *out = json_is_true(v);
    return 0;
}

static int parse_decoding(pctx *P, const json_t *d, fl_decode_opts *o)
{
    if (!d || json_is_null(d))
        return 0;
    if (!json_is_object(d))
        return bad(P, SRV_E_BAD_REQUEST, "decoding", "'decoding' must be an object");
    static const char *const known[] = {"policy", "threshold", "k", "entropy_bound", "overlap",
                                        "pipeline", "tau_add", "tau_act", "tau_conf", "max_blocks",
                                        "steps", "edit_threshold", "max_post_steps", "preset"};
    const char *key = srv_json_unknown_key(d, known, sizeof known / sizeof known[0]);
    if (key)
        return bad(P, SRV_E_BAD_REQUEST, "decoding",
                   "unknown decoding option '%.64s' (policy, threshold, k, entropy_bound, "
                   "overlap, pipeline, tau_add, tau_act, tau_conf, max_blocks, steps, "
                   "edit_threshold, max_post_steps, preset)", key);
    /* a preset first, over the server's defaults: the object's other keys win over it */
    const json_t *pre = json_object_get(d, "preset");
    if (pre && !json_is_null(pre)) {
        uint32_t unused = 0;
        if (!json_is_string(pre))
            return bad(P, SRV_E_BAD_REQUEST, "decoding.preset", "'decoding.preset' must be a string");
        if (fl_decode_preset(json_string_value(pre), o, &unused))
            return bad(P, SRV_E_OUT_OF_RANGE, "decoding.preset",
                       "unknown decoding.preset '%.64s' (" FL_DECODE_PRESETS ")",
                       json_string_value(pre));
    }
    const json_t *pol = json_object_get(d, "policy");
    if (pol && !json_is_null(pol)) {
        if (!json_is_string(pol))
            return bad(P, SRV_E_BAD_REQUEST, "decoding.policy", "'decoding.policy' must be a string");
        if (fl_policy_parse(json_string_value(pol), &o->policy))
            return bad(P, SRV_E_OUT_OF_RANGE, "decoding.policy",
                       "unknown decoding.policy '%.64s' (sequential, static, threshold, dynamic, "
                       "entropy)", json_string_value(pol));
    }
    double x;
    int r;
    if (get_num(P, d, "threshold", "decoding.threshold", 0, 1, true, &o->threshold) ||
        get_num(P, d, "entropy_bound", "decoding.entropy_bound", 0, 100, true, &o->entropy_bound) ||
        get_num(P, d, "tau_add", "decoding.tau_add", 0, 1, false, &o->tau_add) ||
        get_num(P, d, "tau_act", "decoding.tau_act", 0, 1, false, &o->tau_act) ||
        get_num(P, d, "tau_conf", "decoding.tau_conf", 0, 1, false, &o->tau_conf) ||
        get_bool(P, d, "overlap", "decoding.overlap", &o->store_overlap) ||
        get_bool(P, d, "pipeline", "decoding.pipeline", &o->pipeline))
        return -1;
    if ((r = get_int(P, d, "k", "decoding.k", 1, FL_MAX_BLOCK, &x)) < 0)
        return -1;
    if (!r)
        o->k = (int)x;
    if ((r = get_int(P, d, "max_blocks", "decoding.max_blocks", 1, FL_MAX_RUN_BLOCKS,
                     &x)) < 0)
        return -1;
    if (!r)
        o->max_blocks = (int)x;
    if ((r = get_int(P, d, "steps", "decoding.steps", 0, FL_MAX_STEPS, &x)) < 0)
        return -1;
    if (!r)
        o->steps = (int)x;
    if ((r = get_int(P, d, "max_post_steps", "decoding.max_post_steps", 0, FL_MAX_POST_STEPS,
                     &x)) < 0)
        return -1;
    if (!r)
        o->max_post_steps = (int)x;
    /* edit_threshold: a number turns token editing on, false turns it off */
    const json_t *ed = json_object_get(d, "edit_threshold");
    if (ed && json_is_false(ed))
        o->edit_threshold = FL_EDIT_OFF;
    else if (ed && !json_is_null(ed) && !json_is_number(ed))
        return bad(P, SRV_E_BAD_REQUEST, "decoding.edit_threshold",
                   "'decoding.edit_threshold' must be a number or false");
    else if (get_num(P, d, "edit_threshold", "decoding.edit_threshold", 0, 1, false,
                     &o->edit_threshold))
        return -1;
    return 0;
}

/* temperature, top_p, top_k, min_p, seed, max_tokens, stop: shared by both transports */
static int parse_sampling(pctx *P, const json_t *o, const srv_limits *L, srv_chat *c,
                          const char *max_key)
{
    double x;
    int r;
    if (get_num(P, o, "temperature", "temperature", 0, 2, false, &c->dec.temperature) ||
        get_num(P, o, "top_p", "top_p", 0, 1, true, &c->dec.top_p) ||
        get_num(P, o, "min_p", "min_p", 0, 1, false, &c->dec.min_p))
        return -1;
    if ((r = get_int(P, o, "top_k", "top_k", 0, 1 << 24, &x)) < 0)
        return -1;
    if (!r)
        c->dec.top_k = (int)x;
    if ((r = get_int(P, o, "seed", "seed", 0, 9007199254740991.0, &x)) < 0)
        return -1;
    if (!r) {
        c->dec.seed = (uint64_t)x;
        c->seed_given = true;
    }
    c->max_tokens = L->max_tokens_default > L->max_tokens_limit ? L->max_tokens_limit
                                                                  : L->max_tokens_default;
    if ((r = get_int(P, o, max_key, max_key, 1, L->max_tokens_limit, &x)) < 0)
        return -1;
    if (!r)
        c->max_tokens = (int32_t)x;
    const json_t *st = json_object_get(o, "stop");
    if (st && !json_is_null(st)) {
        const json_t *one[1] = {st};
        size_t n = 1;
        if (json_is_array(st))
            n = json_array_size(st);
        else if (!json_is_string(st))
            return bad(P, SRV_E_BAD_REQUEST, "stop", "'stop' must be a string or an array of strings");
        if (n > SRV_MAX_STOPS)
            return bad(P, SRV_E_OUT_OF_RANGE, "stop", "at most %d stop strings, got %zu",
                       SRV_MAX_STOPS, n);
        c->stop = n ? calloc(n, sizeof(char *)) : NULL;
        if (n && !c->stop)
            return bad(P, SRV_E_INTERNAL, NULL, "out of memory");
        for (size_t i = 0; i < n; i++) {
            const json_t *s = json_is_array(st) ? json_array_get(st, i) : one[0];
            if (!json_is_string(s))
                return bad(P, SRV_E_BAD_REQUEST, "stop", "stop[%zu] must be a string", i);
            size_t len = json_string_length(s);
            if (len == 0 || len > SRV_STOP_MAX)
                return bad(P, SRV_E_OUT_OF_RANGE, "stop", "stop[%zu] must have 1..%d bytes", i,
                           SRV_STOP_MAX);
            if (memchr(json_string_value(s), 0, len))
                return bad(P, SRV_E_BAD_REQUEST, "stop", "stop[%zu] contains a NUL", i);
            if (!(c->stop[c->n_stop] = strdup(json_string_value(s))))
                return bad(P, SRV_E_INTERNAL, NULL, "out of memory");
            c->n_stop++;
        }
    }
    return 0;
}

/* OpenAI content may be a string or an array of {"type":"text","text":...} parts. */
static int message_text(pctx *P, const json_t *content, size_t i, bool openai, char **out)
{
    if (json_is_string(content)) {
        if (memchr(json_string_value(content), 0, json_string_length(content)))
            return bad(P, SRV_E_BAD_REQUEST, "messages", "messages[%zu].content contains a NUL", i);
        *out = strdup(json_string_value(content));
        return *out ? 0 : bad(P, SRV_E_INTERNAL, NULL, "out of memory");
    }
    if (openai && json_is_array(content)) {
        fl_buf b = {0};
        size_t k;
        const json_t *part;
        json_array_foreach(content, k, part)
        {
            const char *type = json_string_value(json_object_get(part, "type"));
            const json_t *text = json_object_get(part, "text");
            if (!type || strcmp(type, "text") || !json_is_string(text)) {
                fl_buf_free(&b);
                return bad(P, SRV_E_BAD_REQUEST, "messages",
                           "messages[%zu].content[%zu]: only {\"type\":\"text\",\"text\":...} parts "
                           "are supported", i, k);
            }
            if (memchr(json_string_value(text), 0, json_string_length(text))) {
                fl_buf_free(&b);
                return bad(P, SRV_E_BAD_REQUEST, "messages", "messages[%zu] contains a NUL", i);
            }
            fl_buf_append(&b, json_string_value(text), json_string_length(text));
        }
        fl_buf_append(&b, "", 0);
        if (b.err) { /* never a message cut short: the model would answer what was not asked */
            fl_buf_free(&b);
            return bad(P, SRV_E_INTERNAL, NULL, "out of memory");
        }
        *out = b.data ? b.data : strdup("");
        return *out ? 0 : bad(P, SRV_E_INTERNAL, NULL, "out of memory");
    }
    return bad(P, SRV_E_BAD_REQUEST, "messages", "messages[%zu].content must be a string%s", i,
               openai ? " or an array of text parts" : "");
}

/* An assistant message's tool_calls: [{"id", "type": "function", "function": {"name",
   "arguments"}}], arguments a JSON text (OpenAI) or a JSON object. For the template: the same
   with the arguments as a JSON value (vLLM parses them before rendering, and Qwen2.5's
   template writes them through tojson), spliced in as the client wrote them: jansson only
   checks that they are an object, so an integer past 64 bits, a key written twice or a
   number's spelling reach the renderer, which writes or refuses them by name, unchanged. */
static int tool_calls_text(pctx *P, const json_t *tc, size_t i, char **out)
{
    if (!json_is_array(tc))
        return bad(P, SRV_E_BAD_REQUEST, "messages", "messages[%zu].tool_calls must be an array", i);
    fl_buf b = {0};
    fl_buf_append(&b, "[", 1);
    size_t j;
    const json_t *x;
    json_array_foreach(tc, j, x)
    {
        const json_t *f = json_object_get(x, "function");
        const char *name = json_string_value(json_object_get(f, "name"));
        const json_t *args = json_object_get(f, "arguments");
        const json_t *id = json_object_get(x, "id");
        if (!json_is_object(x) || !name || (id && !json_is_null(id) && !json_is_string(id))) {
            fl_buf_free(&b);
            return bad(P, SRV_E_BAD_REQUEST, "messages", "messages[%zu].tool_calls[%zu] must be "
                       "{\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}",
                       i, j);
        }
        json_error_t je = {0};
        json_t *a = NULL;
        char *text = NULL; /* the arguments' JSON text */
        if (json_is_string(args)) {
            a = json_loadb(json_string_value(args), json_string_length(args),
                           JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &je);
        } else if (json_is_object(args)) {
            text = json_dumps(args, JSON_COMPACT);
            if (!text) {
                fl_buf_free(&b);
                return bad(P, SRV_E_INTERNAL, NULL, "out of memory");
            }
        }
        if (!text && !json_is_object(a)) {
            json_decref(a);
            fl_buf_free(&b);
            return bad(P, SRV_E_BAD_REQUEST, "messages", "messages[%zu].tool_calls[%zu].function."
                       "arguments must be a JSON object (as text)%s%.120s", i, j,
                       je.text[0] ? ": " : "", je.text);
        }
        json_decref(a);
        /* {"id", "type", "function": {"name", "arguments"}} with the arguments spliced in */
        json_t *head = id && json_is_string(id)
                           ? json_pack("{s:O, s:s, s:{s:s}}", "id", id, "type", "function",
                                       "function", "name", name)
                           : json_pack("{s:s, s:{s:s}}", "type", "function", "function", "name", name);
        char *h = head ? json_dumps(head, JSON_COMPACT) : NULL;
        json_decref(head);
        size_t hn = h ? strlen(h) : 0;
        if (h && hn >= 2) { /* h ends in "}}": the arguments go before them */
            if (j)
                fl_buf_append(&b, ",", 1);
            fl_buf_append(&b, h, hn - 2);
            fl_buf_append(&b, ",\"arguments\":", 13);
            if (text)
                fl_buf_append(&b, text, strlen(text));
            else
                fl_buf_append(&b, json_string_value(args), json_string_length(args));
            fl_buf_append(&b, "}}", 2);
        }
        free(text);
        if (!h || b.err) {
            free(h);
            fl_buf_free(&b);
            return bad(P, SRV_E_INTERNAL, NULL, "out of memory");
        }
        free(h);
    }
    fl_buf_append(&b, "]", 1); /* (fl_buf keeps a NUL after its text) */
    if (b.err) {
        fl_buf_free(&b);
        return bad(P, SRV_E_INTERNAL, NULL, "out of memory");
    }
    *out = b.data;
    return 0;
}

char *srv_tool_calls_text(const json_t *tool_calls)
{
    const char *code = NULL, *param = NULL;
    char msg[160], *out = NULL;
    pctx P = {&code, &param, msg, sizeof msg};
    return tool_calls_text(&P, tool_calls, 0, &out) ? NULL : out;
}

static int parse_messages(pctx *P, const json_t *msgs, bool openai, srv_chat *c)
{
    if (!json_is_array(msgs))
        return bad(P, SRV_E_BAD_REQUEST, "messages", "'messages' must be an array of messages");
    size_t n = json_array_size(msgs);
    if (n == 0)
        return bad(P, SRV_E_BAD_REQUEST, "messages", "'messages' is empty");
    if (n > SRV_MAX_MESSAGES)
        return bad(P, SRV_E_OUT_OF_RANGE, "messages", "at most %d messages, got %zu",
                   SRV_MAX_MESSAGES, n);
    c->msgs = calloc(n, sizeof *c->msgs);
    if (!c->msgs)
        return bad(P, SRV_E_INTERNAL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *m = json_array_get(msgs, i);
        if (!json_is_object(m))
            return bad(P, SRV_E_BAD_REQUEST, "messages", "messages[%zu] must be an object", i);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role)
            return bad(P, SRV_E_BAD_REQUEST, "messages", "messages[%zu].role must be a string", i);
        if (openai && !strcmp(role, "developer"))
            role = "system";
        if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") &&
            strcmp(role, "tool"))
            return bad(P, SRV_E_BAD_REQUEST, "messages",
                       "messages[%zu].role '%.32s' is not system, user, assistant or tool", i, role);
        const json_t *tc = json_object_get(m, "tool_calls");
        if (tc && !json_is_null(tc)) {
            if (strcmp(role, "assistant"))
                return bad(P, SRV_E_BAD_REQUEST, "messages", "messages[%zu].tool_calls belong to "
                           "assistant messages", i);
            if (!c->calls && !(c->calls = calloc(n, sizeof(char *))))
                return bad(P, SRV_E_INTERNAL, NULL, "out of memory");
            c->n_calls = n;
            if (tool_calls_text(P, tc, i, &c->calls[i]))
                return -1;
            c->tool_msgs = true;
        }
        if (!strcmp(role, "tool"))
            c->tool_msgs = true;
        char *text = NULL;
        const json_t *content = json_object_get(m, "content");
        /* an assistant's tool calls may come without content */
        if (c->calls && c->calls[i] && (!content || json_is_null(content))) {
            if (!(text = strdup("")))
                return bad(P, SRV_E_INTERNAL, NULL, "out of memory");
        } else if (message_text(P, content, i, openai, &text)) {
            return -1;
        }
        char *r = strdup(role);
        if (!r) {
            free(text);
            return bad(P, SRV_E_INTERNAL, NULL, "out of memory");
        }
        c->msgs[i].role = r;
        c->msgs[i].content = text;
        c->n_msgs = i + 1;
    }
    return 0;
}

/* "parallel": fanout (the client's segments), skeleton (the model's outline, then one branch
   per point), auto (skeleton when the outline has 2+ points, else plain decoding). */
static int parse_parallel(pctx *P, const json_t *v, srv_chat *c)
{
    if (!json_is_object(v))
        return bad(P, SRV_E_BAD_REQUEST, "parallel", "'parallel' must be an object");
    static const char *const known[] = {"mode", "segments", "max_branches"};
    const char *key = srv_json_unknown_key(v, known, sizeof known / sizeof known[0]);
    if (key)
        return bad(P, SRV_E_BAD_REQUEST, "parallel", "unknown field 'parallel.%.64s' (mode, "
                   "segments, max_branches)", key);
    const char *mode = json_string_value(json_object_get(v, "mode"));
    if (!mode)
        return bad(P, SRV_E_BAD_REQUEST, "parallel", "'parallel.mode' must be a string: fanout, "
                   "skeleton or auto");
    c->parallel = !strcmp(mode, "fanout")     ? SRV_PAR_FANOUT
                  : !strcmp(mode, "skeleton") ? SRV_PAR_SKELETON
                  : !strcmp(mode, "auto")     ? SRV_PAR_AUTO
                                              : SRV_PAR_NONE;
    if (c->parallel == SRV_PAR_NONE)
        return bad(P, SRV_E_BAD_REQUEST, "parallel", "unknown 'parallel.mode' '%.32s' (fanout, "
                   "skeleton, auto)", mode);
    c->max_branches = SRV_MAX_SEGMENTS;
    const json_t *mb0 = json_object_get(v, "max_branches");
    if (c->parallel != SRV_PAR_FANOUT) {
        if (json_object_get(v, "segments"))
            return bad(P, SRV_E_BAD_REQUEST, "parallel", "'parallel.segments' is for mode fanout; "
                       "with %s the model finds the parts", mode);
        if (mb0 && !json_is_null(mb0)) {
            if (!json_is_integer(mb0) || json_integer_value(mb0) < 1 ||
                json_integer_value(mb0) > SRV_MAX_SEGMENTS)
                return bad(P, SRV_E_OUT_OF_RANGE, "parallel", "'parallel.max_branches' must be an "
                           "integer in [1, %d]", SRV_MAX_SEGMENTS);
            c->max_branches = (int)json_integer_value(mb0);
        }
        return 0;
    }
    const json_t *segs = json_object_get(v, "segments");
    if (!json_is_array(segs) || json_array_size(segs) == 0)
        return bad(P, SRV_E_BAD_REQUEST, "parallel", "'parallel.segments' must be a non-empty "
                   "array of strings");
    size_t n = json_array_size(segs);
    if (n > SRV_MAX_SEGMENTS)
        return bad(P, SRV_E_OUT_OF_RANGE, "parallel", "at most %d segments, got %zu",
                   SRV_MAX_SEGMENTS, n);
    c->segments = calloc(n, sizeof(char *));
    if (!c->segments)
        return bad(P, SRV_E_INTERNAL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *t = json_array_get(segs, i);
        if (!json_is_string(t) || json_string_length(t) == 0)
            return bad(P, SRV_E_BAD_REQUEST, "parallel", "parallel.segments[%zu] must be a "
                       "non-empty string", i);
        if (memchr(json_string_value(t), 0, json_string_length(t)))
            return bad(P, SRV_E_BAD_REQUEST, "parallel", "parallel.segments[%zu] contains a NUL", i);
        if (!(c->segments[i] = strndup(json_string_value(t), json_string_length(t))))
            return bad(P, SRV_E_INTERNAL, NULL, "out of memory");
        c->n_segments = (int)i + 1;
    }
    c->max_branches = c->n_segments;
    const json_t *mb = json_object_get(v, "max_branches");
    if (mb && !json_is_null(mb)) {
        if (!json_is_integer(mb) || json_integer_value(mb) < 1 ||
            json_integer_value(mb) > SRV_MAX_SEGMENTS)
            return bad(P, SRV_E_OUT_OF_RANGE, "parallel", "'parallel.max_branches' must be an "
                       "integer in [1, %d]", SRV_MAX_SEGMENTS);
        if (json_integer_value(mb) < c->max_branches)
            c->max_branches = (int)json_integer_value(mb);
    }
    return 0;
}

/* The fields both transports share: session (fogline extension on OpenAI), parallel, and
   messages (which parallel fanout may leave out: the segments are then the prompts). */
static int parse_conversation(pctx *P, const json_t *o, bool openai, srv_chat *c)
{
    const json_t *ses = json_object_get(o, "session");
    if (ses && !json_is_null(ses)) {
        if (!srv_id_ok(ses))
            return bad(P, SRV_E_BAD_REQUEST, "session", "'session' must be a string of 1..%d bytes",
                       SRV_ID_MAX);
        if (!(c->session = strdup(json_string_value(ses))))
            return bad(P, SRV_E_INTERNAL, NULL, "out of memory");
    }
    const json_t *par = json_object_get(o, "parallel");
    if (par && !json_is_null(par)) {
        if (parse_parallel(P, par, c))
            return -1;
        if (c->session)
            return bad(P, SRV_E_BAD_REQUEST, "parallel", "'parallel' and 'session' cannot be "
                       "combined (branches have no single conversation to store)");
    }
    const json_t *msgs = json_object_get(o, "messages");
    bool no_msgs = c->segments && (!msgs || (json_is_array(msgs) && !json_array_size(msgs)));
    if (!no_msgs && parse_messages(P, msgs, openai, c))
        return -1;
    if (SRV_PAR_OUTLINED(c->parallel) && strcmp(c->msgs[c->n_msgs - 1].role, "user"))
        return bad(P, SRV_E_BAD_REQUEST, "parallel", "skeleton and auto split the last message, "
                   "which must be the user's");
    return 0;
}

int srv_template_kwargs_parse(const json_t *v, const char *what, bool *enable_thinking, char *msg,
                              size_t msglen)
{
    if (!json_is_object(v)) {
        snprintf(msg, msglen, "%s must be a JSON object such as {\"enable_thinking\": false}", what);
        return -1;
    }
    const char *key;
    const json_t *x;
    json_object_foreach((json_t *)v, key, x)
    {
        /* the renderers are C, not Jinja: a variable they do not know would be silently
           ignored where the real template would use it */
        if (strcmp(key, "enable_thinking")) {
            snprintf(msg, msglen, "%s: unknown key '%.64s' (the built-in chat templates take "
                     "enable_thinking only)", what, key);
            srv_utf8_clip(msg);
            return -1;
        }
        if (!json_is_boolean(x)) {
            snprintf(msg, msglen, "%s: 'enable_thinking' must be true or false", what);
            return -1;
        }
        *enable_thinking = json_is_true(x);
    }
    return 0;
}

static int parse_template_kwargs(pctx *P, const json_t *o, srv_chat *c)
{
    const json_t *v = json_object_get(o, "chat_template_kwargs");
    if (!v || json_is_null(v))
        return 0;
    char m[FL_ERR_MSG];
    if (srv_template_kwargs_parse(v, "'chat_template_kwargs'", &c->enable_thinking, m, sizeof m))
        return bad(P, SRV_E_BAD_REQUEST, "chat_template_kwargs", "%s", m);
    return 0;
}

/* OpenAI's response_format: {"type": "text"}, {"type": "json_object"}, or {"type":
 * "json_schema", "json_schema": {"name", "schema", "strict", "description"}}. The schema is
 * compiled later (off the loop); here its shape is checked. */
static int parse_response_format(pctx *P, const json_t *o, srv_chat *c)
{
    const json_t *rf = json_object_get(o, "response_format");
    if (!rf || json_is_null(rf))
        return 0;
    const char *t = json_string_value(json_object_get(rf, "type"));
    if (!json_is_object(rf) || !t)
        return bad(P, SRV_E_BAD_REQUEST, "response_format", "'response_format' must be an object "
                   "with a 'type': \"text\", \"json_object\" or \"json_schema\"");
    static const char *const known[] = {"type", "json_schema"};
    const char *key = srv_json_unknown_key(rf, known, 2);
    if (key)
        return bad(P, SRV_E_BAD_REQUEST, "response_format", "unknown field '%.64s' in "
                   "'response_format'", key);
    if (!strcmp(t, "text") || !strcmp(t, "json_object")) {
        if (json_object_get(rf, "json_schema"))
            return bad(P, SRV_E_BAD_REQUEST, "response_format", "'response_format.json_schema' "
                       "goes with type \"json_schema\" only");
        c->format = strcmp(t, "text") ? FL_FMT_JSON_OBJECT : FL_FMT_TEXT;
    } else if (!strcmp(t, "json_schema")) {
        const json_t *js = json_object_get(rf, "json_schema");
        if (!json_is_object(js))
            return bad(P, SRV_E_BAD_REQUEST, "response_format", "'response_format.json_schema' "
                       "must be an object with a 'schema'");
        static const char *const jknown[] = {"name", "schema", "strict", "description"};
        if ((key = srv_json_unknown_key(js, jknown, 4)))
            return bad(P, SRV_E_BAD_REQUEST, "response_format", "unknown field '%.64s' in "
                       "'response_format.json_schema'", key);
        const json_t *name = json_object_get(js, "name");
        if (name && !json_is_string(name))
            return bad(P, SRV_E_BAD_REQUEST, "response_format", "'response_format.json_schema."
                       "name' must be a string");
        const json_t *strict = json_object_get(js, "strict");
        if (strict && !json_is_null(strict) && !json_is_boolean(strict))
            return bad(P, SRV_E_BAD_REQUEST, "response_format", "'response_format.json_schema."
                       "strict' must be true or false");
        const json_t *desc = json_object_get(js, "description");
        if (desc && !json_is_null(desc) && !json_is_string(desc))
            return bad(P, SRV_E_BAD_REQUEST, "response_format", "'response_format.json_schema."
                       "description' must be a string");
        const json_t *sch = json_object_get(js, "schema");
        if (!json_is_object(sch) && !json_is_boolean(sch))
            return bad(P, SRV_E_BAD_REQUEST, "response_format", "'response_format.json_schema."
                       "schema' must be a JSON schema (an object)");
        if (!(c->schema = json_dumps(sch, JSON_COMPACT | JSON_ENCODE_ANY)))
            return bad(P, SRV_E_INTERNAL, NULL, "out of memory");
        c->format = FL_FMT_JSON_SCHEMA;
    } else {
        return bad(P, SRV_E_BAD_REQUEST, "response_format", "'response_format' type '%.32s' is "
                   "not one of \"text\", \"json_object\", \"json_schema\"", t);
    }
    c->format_param = "response_format";
    if (c->format != FL_FMT_TEXT && c->parallel)
        return bad(P, SRV_E_BAD_REQUEST, "response_format", "'response_format' and 'parallel' "
                   "cannot be combined (the branches' texts are not one value)");
    return 0;
}

/* vLLM's structured_outputs (an OpenAI client's extra_body): {"regex": pattern}, the whole
 * reply matches it; {"choice": [texts]}, the reply is one of them; {"json": schema}, as
 * response_format's json_schema (an object, or its JSON text). One of them, and not beside a
 * response_format other than text. */
static int parse_structured_outputs(pctx *P, const json_t *o, srv_chat *c)
{
    const json_t *so = json_object_get(o, "structured_outputs");
    if (!so || json_is_null(so))
        return 0;
    if (!json_is_object(so))
        return bad(P, SRV_E_BAD_REQUEST, "structured_outputs", "'structured_outputs' must be an "
                   "object with one of 'regex', 'choice', 'json'");
    static const char *const known[] = {"regex", "choice", "json"};
    const char *key = srv_json_unknown_key(so, known, 3);
    if (key)
        return bad(P, SRV_E_BAD_REQUEST, "structured_outputs", "unknown field '%.64s' in "
                   "'structured_outputs' (fogline takes 'regex', 'choice' and 'json')", key);
    const json_t *re = json_object_get(so, "regex"), *ch = json_object_get(so, "choice");
    const json_t *js = json_object_get(so, "json");
    re = json_is_null(re) ? NULL : re;
    ch = json_is_null(ch) ? NULL : ch;
    js = json_is_null(js) ? NULL : js;
    if (!!re + !!ch + !!js != 1)
        return bad(P, SRV_E_BAD_REQUEST, "structured_outputs", "'structured_outputs' needs "
                   "exactly one of 'regex', 'choice', 'json'");
    if (c->format != FL_FMT_TEXT)
        return bad(P, SRV_E_BAD_REQUEST, "structured_outputs", "'structured_outputs' and "
                   "'response_format' cannot be combined");
    if (re) {
        if (!json_is_string(re))
            return bad(P, SRV_E_BAD_REQUEST, "structured_outputs", "'structured_outputs.regex' "
                       "must be a string");
        if (json_string_length(re) != strlen(json_string_value(re)))
            return bad(P, SRV_E_BAD_REQUEST, "structured_outputs", "'structured_outputs.regex' "
                       "holds a NUL character (write it as \\u0000)");
        if (!(c->schema = strdup(json_string_value(re))))
            return bad(P, SRV_E_INTERNAL, NULL, "out of memory");
        c->format = FL_FMT_REGEX;
    } else if (ch) {
        /* (?:a|b|...) with each text's syntax characters escaped */
        size_t n = json_is_array(ch) ? json_array_size(ch) : 0, len = 8;
        bool ok = n > 0 && n <= SRV_MAX_CHOICE_TEXTS;
        for (size_t i = 0; i < n && ok; i++) {
            const json_t *t = json_array_get(ch, i);
            ok = json_is_string(t) && json_string_length(t) <= SRV_MAX_CHOICE_BYTES;
            len += ok ? 2 * json_string_length(t) + 1 : 0;
        }
        if (!ok)
            return bad(P, SRV_E_BAD_REQUEST, "structured_outputs", "'structured_outputs.choice' "
                       "must be an array of 1..%d strings of at most %d bytes",
                       SRV_MAX_CHOICE_TEXTS, SRV_MAX_CHOICE_BYTES);
        char *r = malloc(len);
        if (!r)
            return bad(P, SRV_E_INTERNAL, NULL, "out of memory");
        size_t k = 0;
        r[k++] = '(';
        r[k++] = '?';
        r[k++] = ':';
        for (size_t i = 0; i < n; i++) {
            const char *t = json_string_value(json_array_get(ch, i));
            size_t tl = json_string_length(json_array_get(ch, i));
            if (i)
                r[k++] = '|';
            for (size_t j = 0; j < tl; j++) {
                if (!t[j]) { /* a NUL inside the text: the pattern is a C string */
                    free(r);
                    return bad(P, SRV_E_BAD_REQUEST, "structured_outputs", "'structured_outputs."
                               "choice' texts cannot hold NUL characters");
                }
                if (strchr("^$\\.*+?()[]{}|/", t[j]))
                    r[k++] = '\\';
                r[k++] = t[j];
            }
        }
        r[k++] = ')';
        r[k] = 0;
        c->schema = r;
        c->format = FL_FMT_REGEX;
    } else {
        json_t *parsed = NULL;
        if (json_is_string(js)) {
            json_error_t je;
            parsed = json_loads(json_string_value(js), JSON_DECODE_ANY, &je);
            if (!parsed)
                return bad(P, SRV_E_BAD_REQUEST, "structured_outputs", "'structured_outputs.json' "
                           "is not JSON: %.200s", je.text);
            js = parsed;
        }
        if (!json_is_object(js) && !json_is_boolean(js)) {
            json_decref(parsed);
            return bad(P, SRV_E_BAD_REQUEST, "structured_outputs", "'structured_outputs.json' "
                       "must be a JSON schema (an object)");
        }
        c->schema = json_dumps(js, JSON_COMPACT | JSON_ENCODE_ANY);
        json_decref(parsed);
        if (!c->schema)
            return bad(P, SRV_E_INTERNAL, NULL, "out of memory");
        c->format = FL_FMT_JSON_SCHEMA;
    }
    c->format_param = "structured_outputs";
    if (c->parallel)
        return bad(P, SRV_E_BAD_REQUEST, "structured_outputs", "'structured_outputs' and "
                   "'parallel' cannot be combined (the branches' texts are not one value)");
    return 0;
}

static bool tool_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '_' || s[i] == '-'))
            return false;
    return true;
}

/* A $ref of a tool's parameters, "#/$defs/x", "#/definitions/x" or "#", in the resource root
   (as engine/constrain.c resolves it); NULL where it names nothing (the compiler refuses it). */
static json_t *params_ref(json_t *root, const char *ref)
{
    if (!strcmp(ref, "#"))
        return root;
    if (!strncmp(ref, "#/$defs/", 8))
        return json_object_get(json_object_get(root, "$defs"), ref + 8);
    if (!strncmp(ref, "#/definitions/", 14))
        return json_object_get(json_object_get(root, "definitions"), ref + 14);
    return NULL;
}

/* A call's arguments are a JSON object, whatever a tool's parameters say: along the schema's
   top level (the way engine/constrain.c reads it: $ref, then const, enum, anyOf or oneOf, type) a
   subschema that names no type gets "type": "object" (in s, a copy), and one that allows any
   other value is refused: -1 with why (what, and where as a JSON pointer). A definition a
   $ref names may be used elsewhere too, so it is never changed: one without a type is
   refused. Whatever else is wrong with the schema is left to the compiler, which names it.
   *left: subschemas still to visit (definitions that name each other through anyOfs would
   otherwise be visited exponentially often). */
static int params_object(json_t *s, json_t *root, const char *path, int hops, int *left,
                         char *why, size_t n)
{
    bool shared = hops > 0; /* reached through a $ref: a definition */
    if (!json_is_object(s))
        return 0;
    if (--*left < 0) {
        snprintf(why, n, "its top level (through $ref, anyOf and oneOf) has more than %d subschemas to "
                 "check", SRV_PARAMS_VISITS);
        return -1;
    }
    if (json_is_string(json_object_get(s, "$id")))
        root = s;
    const char *at = path[0] ? path : "the root";
    const json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        json_t *t = json_is_string(ref) ? params_ref(root, json_string_value(ref)) : NULL;
        if (!t || hops >= FL_CONSTRAIN_MAX_REFS) /* (recursion: the compiler refuses it) */
            return 0;
        char p2[FL_CONSTRAIN_PATH];
        snprintf(p2, sizeof p2, "%s", json_string_value(ref) + 1);
        return params_object(t, root, p2, hops + 1, left, why, n);
    }
    const json_t *c = json_object_get(s, "const");
    if (c) {
        if (json_is_object(c))
            return 0;
        snprintf(why, n, "'const' is not an object (at %s)", at);
        return -1;
    }
    const json_t *en = json_object_get(s, "enum");
    if (en) {
        for (size_t i = 0; i < json_array_size(en); i++)
            if (!json_is_object(json_array_get(en, i))) {
                snprintf(why, n, "'enum' has a value that is not an object (at %s)", at);
                return -1;
            }
        return 0;
    }
    const char *kw = json_object_get(s, "anyOf") ? "anyOf" : "oneOf";
    json_t *any = json_object_get(s, kw);
    if (any) {
        for (size_t i = 0; json_is_array(any) && i < json_array_size(any); i++) {
            char p2[FL_CONSTRAIN_PATH];
            snprintf(p2, sizeof p2, "%s/%s/%zu", path, kw, i);
            if (json_is_true(json_array_get(any, i))) { /* any value, and an object: an object */
                if (shared) {
                    snprintf(why, n, "a definition allows any value (at %s): say \"type\": "
                             "\"object\"", p2);
                    return -1;
                }
                if (json_array_set_new(any, i, json_pack("{s:s}", "type", "object"))) {
                    snprintf(why, n, "out of memory");
                    return -1;
                }
            } else if (params_object(json_array_get(any, i), root, p2, hops, left, why, n)) {
                return -1;
            }
        }
        return 0;
    }
    const json_t *type = json_object_get(s, "type");
    if (!type) {
        if (shared) {
            snprintf(why, n, "a definition names no type (at %s): say \"type\": \"object\"", at);
            return -1;
        }
        if (json_object_set_new(s, "type", json_string("object"))) {
            snprintf(why, n, "out of memory");
            return -1;
        }
        return 0;
    }
    for (size_t i = 0; i < (json_is_array(type) ? json_array_size(type) : 1); i++) {
        const char *t = json_string_value(json_is_array(type) ? json_array_get(type, i) : type);
        if (t && strcmp(t, "object")) {
            snprintf(why, n, "'type' allows \"%.32s\" (at %s)", t, at);
            return -1;
        }
    }
    return 0;
}

/* "tools" and "tool_choice". For "required" or a named function, the schema of the call the
   reply is constrained to: {"name": the function's name, "arguments": its parameters} (any of
   the tools for "required"), properties in the template's order. The parameters go in as a
   schema resource of their own ("$id"), so that their $refs resolve in their own $defs as
   they do in response_format, whatever the other tools' $defs are called. */
static int parse_tools_with(pctx *P, const json_t *o, srv_chat *c, json_t *argv);

static int parse_tools(pctx *P, const json_t *o, srv_chat *c)
{
    json_t *argv = json_array(); /* each tool's arguments schema */
    int rc = argv ? parse_tools_with(P, o, c, argv) : bad(P, SRV_E_INTERNAL, NULL, "out of memory");
    json_decref(argv);
    return rc;
}

static int parse_tools_with(pctx *P, const json_t *o, srv_chat *c, json_t *argv)
{
    const json_t *tools = json_object_get(o, "tools");
    const json_t *ch = json_object_get(o, "tool_choice");
    if (tools && !json_is_null(tools) && !json_is_array(tools))
        return bad(P, SRV_E_BAD_REQUEST, "tools", "'tools' must be an array of {\"type\": "
                   "\"function\", \"function\": {\"name\", \"description\", \"parameters\"}}");
    bool have = json_is_array(tools) && json_array_size(tools) > 0;
    /* OpenAI's parallel_tool_calls (default true); false keeps a reply's first call only, as
       vLLM does (a "required" or named call is one call already) */
    const json_t *ptc = json_object_get(o, "parallel_tool_calls");
    if (ptc && !json_is_null(ptc) && !json_is_boolean(ptc))
        return bad(P, SRV_E_BAD_REQUEST, "parallel_tool_calls", "'parallel_tool_calls' must be "
                   "true or false");
    c->single_call = json_is_false(ptc);
    if (have && json_array_size(tools) > SRV_MAX_TOOLS)
        return bad(P, SRV_E_OUT_OF_RANGE, "tools", "at most %d tools, got %zu", SRV_MAX_TOOLS,
                   json_array_size(tools));
    for (size_t i = 0; have && i < json_array_size(tools); i++) {
        const json_t *t = json_array_get(tools, i);
        const json_t *f = json_object_get(t, "function");
        const char *type = json_string_value(json_object_get(t, "type"));
        const char *name = json_string_value(json_object_get(f, "name"));
        if (!json_is_object(t) || !type || strcmp(type, "function") || !json_is_object(f) || !name)
            return bad(P, SRV_E_BAD_REQUEST, "tools", "tools[%zu] must be {\"type\": \"function\", "
                       "\"function\": {\"name\": ...}}", i);
        if (!tool_name_ok(name))
            return bad(P, SRV_E_BAD_REQUEST, "tools", "tools[%zu].function.name '%.64s' must be "
                       "1..64 letters, digits, '_' or '-'", i, name);
        const json_t *params = json_object_get(f, "parameters");
        if (params && !json_is_null(params) && !json_is_object(params))
            return bad(P, SRV_E_BAD_REQUEST, "tools", "tools[%zu].function.parameters must be a "
                       "JSON schema (an object)", i);
        /* the arguments' schema: an object's (no parameters: any object), and a schema
           resource of its own */
        json_t *args = params && !json_is_null(params) ? json_deep_copy(params) : json_object();
        if (!args || json_array_append_new(argv, args))
            return bad(P, SRV_E_INTERNAL, NULL, "out of memory");
        char why[FL_CONSTRAIN_PATH + 96];
        int left = SRV_PARAMS_VISITS;
        if (params_object(args, args, "", 0, &left, why, sizeof why))
            return bad(P, SRV_E_BAD_REQUEST, "tools", "tools[%zu].function.parameters must "
                       "describe a JSON object (a call's arguments are one): %s", i, why);
        char id[96];
        snprintf(id, sizeof id, "fogline:tools/%s/parameters", name);
        if (!json_is_string(json_object_get(args, "$id")) &&
            json_object_set_new(args, "$id", json_string(id)))
            return bad(P, SRV_E_INTERNAL, NULL, "out of memory");
        const json_t *d = json_object_get(f, "description");
        if (d && !json_is_null(d) && !json_is_string(d))
            return bad(P, SRV_E_BAD_REQUEST, "tools", "tools[%zu].function.description must be a "
                       "string", i);
        for (size_t k = 0; k < i; k++)
            if (!strcmp(name, json_string_value(json_object_get(
                                  json_object_get(json_array_get(tools, k), "function"), "name"))))
                return bad(P, SRV_E_BAD_REQUEST, "tools", "two tools are named '%s'", name);
    }
    c->tool_choice = have ? SRV_TOOL_AUTO : SRV_TOOL_NONE;
    const char *named = NULL;
    if (ch && !json_is_null(ch)) {
        const char *s = json_string_value(ch);
        if (s && !strcmp(s, "none"))
            c->tool_choice = SRV_TOOL_NONE;
        else if (s && !strcmp(s, "auto"))
            c->tool_choice = have ? SRV_TOOL_AUTO : SRV_TOOL_NONE;
        else if (s && !strcmp(s, "required"))
            c->tool_choice = SRV_TOOL_REQUIRED;
        else if (json_is_object(ch) &&
                 (named = json_string_value(json_object_get(json_object_get(ch, "function"), "name"))))
            c->tool_choice = SRV_TOOL_NAMED;
        else
            return bad(P, SRV_E_BAD_REQUEST, "tool_choice", "'tool_choice' must be \"none\", "
                       "\"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
        if (c->tool_choice >= SRV_TOOL_REQUIRED && !have)
            return bad(P, SRV_E_BAD_REQUEST, "tool_choice", "'tool_choice' asks for a tool call "
                       "but 'tools' is empty");
    }
    /* (a session keeps tool calls and results: serve_session.c) */
    if (have && c->parallel)
        return bad(P, SRV_E_BAD_REQUEST, "tools", "'tools' cannot be combined with 'parallel'");
    if (c->tool_msgs && c->parallel)
        return bad(P, SRV_E_BAD_REQUEST, "messages", "tool calls and tool results in 'messages' "
                   "cannot be combined with 'parallel'");
    if (c->tool_choice >= SRV_TOOL_REQUIRED && c->format != FL_FMT_TEXT)
        return bad(P, SRV_E_BAD_REQUEST, "tool_choice", "'tool_choice' %s and '%s' "
                   "cannot be combined (the reply is a tool call)",
                   named ? "naming a function" : "\"required\"", c->format_param);
    if (c->tool_choice != SRV_TOOL_NONE && !(c->tools = json_dumps(tools, JSON_COMPACT)))
        return bad(P, SRV_E_INTERNAL, NULL, "out of memory");
    if (c->tool_choice < SRV_TOOL_REQUIRED)
        return 0;
    json_t *any = json_array();
    bool found = false;
    for (size_t i = 0; any && i < json_array_size(tools); i++) {
        const json_t *f = json_object_get(json_array_get(tools, i), "function");
        const char *name = json_string_value(json_object_get(f, "name"));
        if (named && strcmp(named, name))
            continue;
        found = true;
        json_t *one = json_pack("{s:s, s:{s:{s:s}, s:O}, s:[s, s], s:b}", "type", "object",
                                "properties", "name", "const", name, "arguments",
                                json_array_get(argv, i), "required", "name", "arguments",
                                "additionalProperties", 0);
        json_array_append_new(any, one);
    }
    if (!found) {
        json_decref(any);
        return bad(P, SRV_E_BAD_REQUEST, "tool_choice", "'tool_choice' names '%.64s', which is not "
                   "among 'tools'", named ? named : "");
    }
    json_t *schema = json_array_size(any) == 1 ? json_incref(json_array_get(any, 0))
                                               : json_pack("{s:O}", "anyOf", any);
    json_decref(any);
    c->tool_schema = schema ? json_dumps(schema, JSON_COMPACT) : NULL;
    json_decref(schema);
    return c->tool_schema ? 0 : bad(P, SRV_E_INTERNAL, NULL, "out of memory");
}

static int check_decoding(pctx *P, srv_chat *c)
{
    fl_err e = {0};
    if (fl_decode_opts_check(&c->dec, &e))
        return bad(P, SRV_E_OUT_OF_RANGE, "decoding", "%s", e.msg);
    if ((c->format != FL_FMT_TEXT || c->tool_choice >= SRV_TOOL_REQUIRED) &&
        c->dec.edit_threshold != FL_EDIT_OFF)
        return bad(P, SRV_E_BAD_REQUEST, c->format != FL_FMT_TEXT ? c->format_param : "tool_choice",
                   "'%s' cannot be combined with token editing (decoding.edit_threshold): an edit "
                   "could leave the format", c->format != FL_FMT_TEXT ? c->format_param : "tool_choice");
    return 0;
}

/* logprobs (true or false) and top_logprobs (0..20, with logprobs only): chat completions and
   the WebSocket chat. */
static int parse_logprobs(pctx *P, const json_t *o, srv_chat *c)
{
    if (get_bool(P, o, "logprobs", "logprobs", &c->logprobs))
        return -1;
    double x = 0;
    int r = get_int(P, o, "top_logprobs", "top_logprobs", 0, FL_MAX_TOP_LOGPROBS, &x);
    if (r < 0)
        return -1;
    if (!r && !c->logprobs)
        return bad(P, SRV_E_BAD_REQUEST, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
    if (c->logprobs && c->parallel) /* a joined answer's tokens are several replies' */
        return bad(P, SRV_E_BAD_REQUEST, "logprobs", "'logprobs' cannot be combined with "
                   "'parallel': its answer joins several replies");
    c->top_logprobs = r ? 0 : (int)x;
    return 0;
}

/* logit_bias: OpenAI's object of token ids (decimal strings, as written by a tokenizer: no
   sign, no leading zero) to biases in [-100, 100], each id in the model's vocabulary. */
static int parse_logit_bias(pctx *P, const json_t *o, const srv_limits *L, srv_chat *c)
{
    const json_t *b = json_object_get(o, "logit_bias");
    if (!b || json_is_null(b))
        return 0;
    if (!json_is_object(b))
        return bad(P, SRV_E_BAD_REQUEST, "logit_bias", "'logit_bias' must be an object of token "
                   "ids to biases");
    size_t n = json_object_size(b);
    if (n > FL_MAX_LOGIT_BIAS)
        return bad(P, SRV_E_OUT_OF_RANGE, "logit_bias", "'logit_bias' names %zu tokens; at most "
                   "%d", n, FL_MAX_LOGIT_BIAS);
    if (!n)
        return 0;
    c->bias_ids = malloc(sizeof(int32_t) * n);
    c->bias = malloc(sizeof(float) * n);
    if (!c->bias_ids || !c->bias)
        return bad(P, SRV_E_INTERNAL, NULL, "out of memory");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)b, key, v) {
        size_t len = strlen(key);
        bool digits = len > 0 && len <= 10 && (key[0] != '0' || len == 1);
        for (size_t i = 0; digits && i < len; i++)
            digits = key[i] >= '0' && key[i] <= '9';
        if (!digits)
            return bad(P, SRV_E_BAD_REQUEST, "logit_bias", "'logit_bias' key \"%.32s\" is not a "
                       "token id", key);
        long long id = strtoll(key, NULL, 10);
        if (id > INT32_MAX || (L->vocab > 0 && id >= L->vocab))
            return bad(P, SRV_E_OUT_OF_RANGE, "logit_bias", "'logit_bias' names token %lld, "
                       "outside the vocabulary (%d ids)", id, L->vocab);
        if (!json_is_number(v))
            return bad(P, SRV_E_BAD_REQUEST, "logit_bias", "'logit_bias' value for token %lld "
                       "must be a number", id);
        double x = json_number_value(v);
        if (!(x >= -FL_LOGIT_BIAS_MAX && x <= FL_LOGIT_BIAS_MAX))
            return bad(P, SRV_E_OUT_OF_RANGE, "logit_bias", "'logit_bias' value for token %lld "
                       "must be in [-100, 100], got %g", id, x);
        c->bias_ids[c->n_bias] = (int32_t)id;
        c->bias[c->n_bias++] = (float)x;
    }
    return 0;
}

/* vLLM's stop_token_ids: an array of token ids in the vocabulary, at most
   FL_MAX_STOP_TOKEN_IDS (null or [] for none) */
static int parse_stop_ids(pctx *P, const json_t *o, const srv_limits *L, srv_chat *c)
{
    const json_t *a = json_object_get(o, "stop_token_ids");
    if (!a || json_is_null(a))
        return 0;
    if (!json_is_array(a))
        return bad(P, SRV_E_BAD_REQUEST, "stop_token_ids", "'stop_token_ids' must be an array "
                   "of token ids");
    size_t n = json_array_size(a);
    if (n > FL_MAX_STOP_TOKEN_IDS)
        return bad(P, SRV_E_OUT_OF_RANGE, "stop_token_ids", "'stop_token_ids' names %zu tokens; "
                   "at most %d", n, FL_MAX_STOP_TOKEN_IDS);
    if (!n)
        return 0;
    if (!(c->stop_ids = malloc(sizeof(int32_t) * n)))
        return bad(P, SRV_E_INTERNAL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(a, i);
        if (!json_is_integer(v))
            return bad(P, SRV_E_BAD_REQUEST, "stop_token_ids", "stop_token_ids[%zu] must be a "
                       "token id (an integer)", i);
        json_int_t id = json_integer_value(v);
        if (id < 0 || id > INT32_MAX || (L->vocab > 0 && id >= L->vocab))
            return bad(P, SRV_E_OUT_OF_RANGE, "stop_token_ids", "stop_token_ids[%zu] is %lld, "
                       "outside the vocabulary (%d ids)", i, (long long)id, L->vocab);
        c->stop_ids[c->n_stop_ids++] = (int32_t)id;
    }
    return 0;
}

/* vLLM's min_tokens (0..max_tokens), ignore_eos and stop_token_ids, after max_tokens and the
   format are known: an output constraint ends with an end token, so none goes with one. And
   the penalties: OpenAI's presence_penalty and frequency_penalty, [-2, 2], and vLLM's
   repetition_penalty, (0, 10]. */
static int parse_min_tokens(pctx *P, const json_t *o, const srv_limits *L, srv_chat *c)
{
    double x = 0;
    int r = get_int(P, o, "min_tokens", "min_tokens", 0, L->max_tokens_limit, &x);
    if (r < 0 || get_bool(P, o, "ignore_eos", "ignore_eos", &c->ignore_eos))
        return -1;
    c->min_tokens = r ? 0 : (int)x;
    if (c->min_tokens > c->max_tokens)
        return bad(P, SRV_E_OUT_OF_RANGE, "min_tokens", "'min_tokens' (%d) must not exceed "
                   "max_tokens (%d)", c->min_tokens, (int)c->max_tokens);
    if (get_num(P, o, "presence_penalty", "presence_penalty", -2, 2, false,
                &c->presence_penalty) ||
        get_num(P, o, "frequency_penalty", "frequency_penalty", -2, 2, false,
                &c->frequency_penalty) ||
        get_num(P, o, "repetition_penalty", "repetition_penalty", 0, FL_REP_PENALTY_MAX, true,
                &c->repetition_penalty) ||
        parse_stop_ids(P, o, L, c) ||
        get_bool(P, o, "include_stop_str_in_output", "include_stop_str_in_output",
                 &c->include_stop_str))
        return -1;
    const char *which = c->ignore_eos      ? "ignore_eos"
                        : c->min_tokens    ? "min_tokens"
                        : c->n_stop_ids    ? "stop_token_ids"
                                           : NULL;
    if (which && (c->format != FL_FMT_TEXT || c->tool_choice >= SRV_TOOL_REQUIRED))
        return bad(P, SRV_E_BAD_REQUEST, which, "'%s' cannot be combined with %s%s%s: a "
                   "constrained reply ends with an end token, and only there", which,
                   c->format != FL_FMT_TEXT ? "'" : "",
                   c->format != FL_FMT_TEXT ? c->format_param : "a required tool call",
                   c->format != FL_FMT_TEXT ? "'" : "");
    return 0;
}

static int parse_samples(pctx *P, srv_chat *c);

int srv_parse_chat_ws(const json_t *o, const srv_limits *L, srv_chat *c, const char **code,
                      char *msg, size_t msglen)
{
    pctx P = {code, NULL, msg, msglen};
    memset(c, 0, sizeof *c);
    c->dec = L->dec_default;
    static const char *const known[] = {"type", "id", "session", "messages", "max_tokens",
                                        "temperature", "top_p", "top_k", "min_p", "seed", "stop",
                                        "decoding", "parallel", "chat_template_kwargs", "drafts",
                                        "response_format", "tools", "tool_choice",
                                        "parallel_tool_calls", "logprobs",
                                        "top_logprobs", "logit_bias", "min_tokens",
                                        "ignore_eos", "presence_penalty", "frequency_penalty",
                                        "repetition_penalty", "stop_token_ids",
                                        "include_stop_str_in_output", "n",
                                        "structured_outputs"};
    const char *key = srv_json_unknown_key(o, known, sizeof known / sizeof known[0]);
    if (key)
        return bad(&P, SRV_E_BAD_REQUEST, key, "unknown field '%.64s' in chat", key);
    double nx;
    int nr = get_int(&P, o, "n", "n", 1, SRV_MAX_SEGMENTS, &nx); /* choices, as OpenAI's n */
    if (nr < 0)
        return -1;
    c->n_choices = nr ? 1 : (int)nx;
    const json_t *dr = json_object_get(o, "drafts");
    if (dr && !json_is_null(dr)) {
        const char *v = json_string_value(dr);
        if (!v || (strcmp(v, "latest") && strcmp(v, "every_step")))
            return bad(&P, SRV_E_BAD_REQUEST, "drafts", "'drafts' must be \"latest\" (the "
                       "newest draft of a block, older ones coalesced) or \"every_step\"");
        c->every_step = !strcmp(v, "every_step");
    }
    const json_t *id = json_object_get(o, "id");
    if (!srv_id_ok(id))
        return bad(&P, SRV_E_BAD_REQUEST, "id", "'id' must be a string of 1..%d bytes", SRV_ID_MAX);
    if (!(c->id = strdup(json_string_value(id))))
        return bad(&P, SRV_E_INTERNAL, NULL, "out of memory");
    c->enable_thinking = L->enable_thinking;
    if (parse_conversation(&P, o, false, c) || parse_template_kwargs(&P, o, c) ||
        parse_response_format(&P, o, c) || parse_structured_outputs(&P, o, c) ||
        parse_tools(&P, o, c) || parse_sampling(&P, o, L, c, "max_tokens") || parse_logprobs(&P, o, c) ||
        parse_logit_bias(&P, o, L, c) || parse_min_tokens(&P, o, L, c) ||
        parse_decoding(&P, json_object_get(o, "decoding"), &c->dec) || check_decoding(&P, c) ||
        parse_samples(&P, c))
        return -1;
    return 0;
}

/* The fields shared with chat completions: model, n, stream, stream_options. */
static int parse_openai_common(pctx *P, const json_t *o, srv_chat *c)
{
    const json_t *model = json_object_get(o, "model");
    if (model && !json_is_null(model)) {
        if (!json_is_string(model))
            return bad(P, SRV_E_BAD_REQUEST, "model", "'model' must be a string");
        if (!(c->model = strdup(json_string_value(model))))
            return bad(P, SRV_E_INTERNAL, NULL, "out of memory");
    }
    double x;
    int r = get_int(P, o, "n", "n", 1, SRV_MAX_SEGMENTS, &x);
    if (r < 0 || get_bool(P, o, "stream", "stream", &c->stream))
        return -1;
    c->n_choices = r ? 1 : (int)x;
    const json_t *so = json_object_get(o, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so))
            return bad(P, SRV_E_BAD_REQUEST, "stream_options",
                       "'stream_options' must be an object");
        if (get_bool(P, so, "include_usage", "stream_options.include_usage", &c->include_usage))
            return -1;
    }
    return 0;
}

/* Several choices (n above 1, or a text completion's prompts): a group of samples
   (SRV_PAR_SAMPLES), after every other field. */
static int parse_samples(pctx *P, srv_chat *c)
{
    int total = c->n_choices * (c->n_prompts > 1 ? c->n_prompts : 1);
    if (total <= 1)
        return 0;
    if (total > SRV_MAX_CHOICES)
        return bad(P, SRV_E_OUT_OF_RANGE, "prompt", "%d prompts times n %d is %d choices; at "
                   "most %d", c->n_prompts, c->n_choices, total, SRV_MAX_CHOICES);
    const char *with = c->parallel ? "parallel" : c->session ? "session" : NULL;
    if (with)
        return bad(P, SRV_E_BAD_REQUEST, "n", "'n' above 1 cannot be combined with '%s'", with);
    c->parallel = SRV_PAR_SAMPLES;
    c->max_branches = total;
    return 0;
}

/* One prompt of a text completion, named name in messages: a non-empty string, or a non-empty
   array of token ids (integers in [0, 2^31)). */
static int parse_one_prompt(pctx *P, const json_t *v, const char *name, srv_prompt *out)
{
    if (json_is_array(v)) {
        size_t n = json_array_size(v);
        if (!n)
            return bad(P, SRV_E_BAD_REQUEST, "prompt", "'%s' must not be empty", name);
        if (!(out->ids = malloc(n * sizeof(int32_t))))
            return bad(P, SRV_E_INTERNAL, NULL, "out of memory");
        for (size_t i = 0; i < n; i++) {
            double d;
            if (!integer(json_array_get(v, i), &d) || d < 0 || d > INT32_MAX)
                return bad(P, SRV_E_BAD_REQUEST, "prompt", "%s[%zu] must be a token id (an "
                           "integer >= 0)", name, i);
            out->ids[i] = (int32_t)d;
        }
        out->n_ids = n;
        return 0;
    }
    if (!json_is_string(v))
        return bad(P, SRV_E_BAD_REQUEST, "prompt", "'%s' must be a string, an array of token "
                   "ids, or an array of those", name);
    size_t len = json_string_length(v);
    if (!len)
        return bad(P, SRV_E_BAD_REQUEST, "prompt", "'%s' must not be empty", name);
    if (memchr(json_string_value(v), 0, len))
        return bad(P, SRV_E_BAD_REQUEST, "prompt", "'%s' contains a NUL", name);
    if (!(out->text = strndup(json_string_value(v), len)))
        return bad(P, SRV_E_INTERNAL, NULL, "out of memory");
    out->len = len;
    return 0;
}

/* prompt: a string, an array of ids, or an array of those (a batch: every prompt gets its own
   choices, in order). */
static int parse_prompt(pctx *P, const json_t *v, srv_chat *c)
{
    if (!v || json_is_null(v))
        return bad(P, SRV_E_BAD_REQUEST, "prompt", "'prompt' is required");
    const json_t *first = json_is_array(v) ? json_array_get(v, 0) : NULL;
    bool batch = first && (json_is_string(first) || json_is_array(first));
    size_t n = batch ? json_array_size(v) : 1;
    if (n > SRV_MAX_CHOICES)
        return bad(P, SRV_E_OUT_OF_RANGE, "prompt", "'prompt' holds %zu prompts; at most %d", n,
                   SRV_MAX_CHOICES);
    if (!(c->prompts = calloc(n, sizeof *c->prompts)))
        return bad(P, SRV_E_INTERNAL, NULL, "out of memory");
    c->n_prompts = (int)n;
    for (size_t i = 0; i < n; i++) {
        char name[32] = "prompt";
        if (batch)
            snprintf(name, sizeof name, "prompt[%zu]", i);
        if (parse_one_prompt(P, batch ? json_array_get(v, i) : v, name, &c->prompts[i]))
            return -1;
    }
    return 0;
}

int srv_parse_completion_openai(const json_t *o, const srv_limits *L, srv_chat *c,
                                const char **code, const char **param, char *msg, size_t msglen)
{
    pctx P = {code, param, msg, msglen};
    memset(c, 0, sizeof *c);
    *param = NULL;
    c->dec = L->dec_default;
    c->raw = true;
    if (!json_is_object(o))
        return bad(&P, SRV_E_BAD_REQUEST, NULL, "the request body must be a JSON object");
    if (parse_openai_common(&P, o, c))
        return -1;
    double x;
    int r = get_int(&P, o, "best_of", "best_of", 1, SRV_MAX_SEGMENTS, &x);
    if (r < 0)
        return -1;
    if (!r && (int)x != c->n_choices) /* best_of > n ranks samples by their log probabilities */
        return bad(&P, SRV_E_OUT_OF_RANGE, "best_of", "'best_of' must equal 'n' (%d), got %.0f: "
                   "the server cannot rank samples (no log probabilities)", c->n_choices, x);
    /* what the engine cannot give is refused, never silently left out of the answer */
    const json_t *v = json_object_get(o, "echo");
    if (v && !json_is_null(v) && !json_is_boolean(v))
        return bad(&P, SRV_E_BAD_REQUEST, "echo", "'echo' must be true or false");
    if (json_is_true(v))
        return bad(&P, SRV_E_BAD_REQUEST, "echo", "'echo' is not supported: the reply holds the "
                   "completion only");
    /* the legacy form: an integer, the alternatives per token (0 gives the chosen ones);
       false is off, as null is */
    r = json_is_false(json_object_get(o, "logprobs"))
            ? 1
            : get_int(&P, o, "logprobs", "logprobs", 0, FL_MAX_TOP_LOGPROBS, &x);
    if (r < 0)
        return -1;
    c->logprobs = !r;
    c->top_logprobs = r ? 0 : (int)x;
    v = json_object_get(o, "suffix");
    if (v && !json_is_null(v) && !(json_is_string(v) && !json_string_length(v)))
        return bad(&P, SRV_E_BAD_REQUEST, "suffix", "'suffix' is not supported");
    static const char *const chat_only[] = {"messages", "session", "parallel", "response_format",
                                            "tools", "tool_choice", "chat_template_kwargs"};
    for (size_t i = 0; i < sizeof chat_only / sizeof chat_only[0]; i++)
        if (json_object_get(o, chat_only[i]))
            return bad(&P, SRV_E_BAD_REQUEST, chat_only[i], "'%s' belongs to "
                       "/v1/chat/completions, not to /v1/completions", chat_only[i]);
    if (parse_prompt(&P, json_object_get(o, "prompt"), c) || parse_structured_outputs(&P, o, c) ||
        parse_sampling(&P, o, L, c, "max_tokens") || parse_logit_bias(&P, o, L, c) ||
        parse_min_tokens(&P, o, L, c) ||
        parse_decoding(&P, json_object_get(o, "decoding"), &c->dec) || check_decoding(&P, c) ||
        parse_samples(&P, c))
        return -1;
    return 0;
}

int srv_parse_chat_openai(const json_t *o, const srv_limits *L, srv_chat *c, const char **code,
                          const char **param, char *msg, size_t msglen)
{
    pctx P = {code, param, msg, msglen};
    memset(c, 0, sizeof *c);
    *param = NULL;
    c->dec = L->dec_default;
    if (!json_is_object(o))
        return bad(&P, SRV_E_BAD_REQUEST, NULL, "the request body must be a JSON object");
    if (parse_openai_common(&P, o, c))
        return -1;
    /* fogline extensions, as on the WebSocket: session (continued from Redis), parallel */
    c->enable_thinking = L->enable_thinking;
    if (parse_conversation(&P, o, true, c) || parse_template_kwargs(&P, o, c) ||
        parse_response_format(&P, o, c) || parse_structured_outputs(&P, o, c) ||
        parse_tools(&P, o, c))
        return -1;
    /* max_completion_tokens is the newer name; either is accepted, the newer wins */
    const char *max_key = json_object_get(o, "max_completion_tokens") &&
                                  !json_is_null(json_object_get(o, "max_completion_tokens"))
                              ? "max_completion_tokens"
                              : "max_tokens";
    if (parse_sampling(&P, o, L, c, max_key) || parse_logprobs(&P, o, c) ||
        parse_logit_bias(&P, o, L, c) || parse_min_tokens(&P, o, L, c) ||
        parse_decoding(&P, json_object_get(o, "decoding"), &c->dec) || check_decoding(&P, c) ||
        parse_samples(&P, c))
        return -1;
    return 0;
}

int srv_parse_tokenize(const json_t *o, const srv_limits *L, srv_tokenize *t, const char **code,
                       const char **param, char *msg, size_t msglen)
{
    pctx P = {code, param, msg, msglen};
    memset(t, 0, sizeof *t);
    *param = NULL;
    t->add_generation_prompt = true;
    if (!json_is_object(o))
        return bad(&P, SRV_E_BAD_REQUEST, NULL, "the request body must be a JSON object");
    const json_t *prompt = json_object_get(o, "prompt"), *msgs = json_object_get(o, "messages");
    bool add_special = true, cont = false;
    if (get_bool(&P, o, "return_token_strs", "return_token_strs", &t->token_strs) ||
        get_bool(&P, o, "add_special_tokens", "add_special_tokens", &add_special) ||
        get_bool(&P, o, "add_generation_prompt", "add_generation_prompt",
                 &t->add_generation_prompt) ||
        get_bool(&P, o, "continue_final_message", "continue_final_message", &cont))
        return -1;
    if (cont)
        return bad(&P, SRV_E_BAD_REQUEST, "continue_final_message", "'continue_final_message' is "
                   "not supported: the chat template ends the last message");
    if (prompt && !json_is_null(prompt) && msgs && !json_is_null(msgs))
        return bad(&P, SRV_E_BAD_REQUEST, "prompt", "give 'prompt' or 'messages', not both");
    if (msgs && !json_is_null(msgs)) {
        if (srv_parse_chat_openai(o, L, &t->chat, code, param, msg, msglen))
            return -1;
        const char *with = t->chat.session ? "session" : t->chat.parallel ? "parallel" : NULL;
        if (with) /* a session's turns are in Redis, a fan-out is several prompts */
            return bad(&P, SRV_E_BAD_REQUEST, with, "'%s' is not taken by /tokenize", with);
        return 0;
    }
    t->chat.raw = true;
    if (parse_openai_common(&P, o, &t->chat))
        return -1;
    static const char *const chat_only[] = {"tools", "tool_choice", "chat_template_kwargs",
                                            "add_generation_prompt"};
    for (size_t i = 0; i < sizeof chat_only / sizeof chat_only[0]; i++)
        if (json_object_get(o, chat_only[i]))
            return bad(&P, SRV_E_BAD_REQUEST, chat_only[i], "'%s' applies to 'messages' (the "
                       "chat template), not to a 'prompt'", chat_only[i]);
    if (!prompt || json_is_null(prompt))
        return bad(&P, SRV_E_BAD_REQUEST, "prompt", "'prompt' (a string) or 'messages' is "
                   "required");
    if (!json_is_string(prompt))
        return bad(&P, SRV_E_BAD_REQUEST, "prompt", "'prompt' must be a string");
    size_t len = json_string_length(prompt); /* no NUL: the body was loaded without them */
    if (!(t->chat.prompts = calloc(1, sizeof *t->chat.prompts)) ||
        !(t->chat.prompts[0].text = strndup(json_string_value(prompt), len)))
        return bad(&P, SRV_E_INTERNAL, NULL, "out of memory");
    t->chat.n_prompts = 1;
    t->chat.prompts[0].len = len;
    return 0;
}

int srv_parse_detokenize(const json_t *o, int vocab, srv_detokenize *d, const char **code,
                         const char **param, char *msg, size_t msglen)
{
    pctx P = {code, param, msg, msglen};
    memset(d, 0, sizeof *d);
    *param = NULL;
    if (!json_is_object(o))
        return bad(&P, SRV_E_BAD_REQUEST, NULL, "the request body must be a JSON object");
    const json_t *model = json_object_get(o, "model");
    if (model && !json_is_null(model)) {
        if (!json_is_string(model))
            return bad(&P, SRV_E_BAD_REQUEST, "model", "'model' must be a string");
        if (!(d->model = strdup(json_string_value(model))))
            return bad(&P, SRV_E_INTERNAL, NULL, "out of memory");
    }
    if (get_bool(&P, o, "skip_special_tokens", "skip_special_tokens", &d->skip_special))
        return -1;
    const json_t *v = json_object_get(o, "tokens");
    if (!v || json_is_null(v))
        return bad(&P, SRV_E_BAD_REQUEST, "tokens", "'tokens' (an array of token ids) is "
                   "required");
    if (!json_is_array(v))
        return bad(&P, SRV_E_BAD_REQUEST, "tokens", "'tokens' must be an array of token ids");
    size_t n = json_array_size(v);
    if (!(d->ids = malloc((n ? n : 1) * sizeof(int32_t))))
        return bad(&P, SRV_E_INTERNAL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        double x;
        if (!integer(json_array_get(v, i), &x))
            return bad(&P, SRV_E_BAD_REQUEST, "tokens", "tokens[%zu] must be an integer", i);
        if (x < 0 || x >= vocab)
            return bad(&P, SRV_E_OUT_OF_RANGE, "tokens", "tokens[%zu] is %.0f, outside the "
                       "vocabulary (%d ids)", i, x, vocab);
        d->ids[i] = (int32_t)x;
    }
    d->n = n;
    return 0;
}

void srv_detokenize_free(srv_detokenize *d)
{
    free(d->ids);
    free(d->model);
    memset(d, 0, sizeof *d);
}

static char *dump(json_t *o)
{
    if (!o)
        return NULL;
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

json_t *srv_json_text(const char *s)
{
    json_t *j = json_string(s);
    if (j || !s)
        return j;
    char *c = strdup(s); /* not UTF-8: clipped, never dropped */
    if (c)
        srv_utf8_clip(c);
    j = c ? json_string(c) : NULL;
    free(c);
    return j;
}

char *srv_frame_error(const char *id, const char *code, const char *message)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    json_object_set_new(o, "type", json_string("error"));
    if (id)
        json_object_set_new(o, "id", json_string(id));
    json_object_set_new(o, "code", json_string(code));
    json_object_set_new(o, "message", srv_json_text(message));
    return dump(o);
}

char *srv_openai_error(const char *type, const char *code, const char *param, const char *message)
{
    json_t *e = json_object();
    json_t *o = json_object();
    if (!e || !o) {
        json_decref(e);
        json_decref(o);
        return NULL;
    }
    json_object_set_new(e, "message", srv_json_text(message));
    json_object_set_new(e, "type", json_string(type));
    json_object_set_new(e, "param", param ? json_string(param) : json_null());
    json_object_set_new(e, "code", code ? json_string(code) : json_null());
    json_object_set_new(o, "error", e);
    return dump(o);
}
