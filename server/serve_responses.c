/* serve_responses.c: OpenAI's Responses API over the chat machinery (serve_responses.h). */
#include "serve_responses.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "serve_proto.h"

/* ---- the request ---- */

typedef struct rctx {
    const char **code, **param;
    char *msg;
    size_t msglen;
} rctx;

static int rbad(rctx *R, const char *code, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(R->msg, R->msglen, fmt, ap);
    va_end(ap);
    *R->code = code;
    *R->param = param;
    return -1;
}

static bool given(const json_t *v)
{
    return v && !json_is_null(v);
}

/* A message's content: a string, or text parts (input_text, output_text; OpenAI's "text" too)
   as chat's {"type": "text"} parts. NULL (message set) when it is neither. */
static json_t *content_of(rctx *R, const json_t *c, size_t i)
{
    if (json_is_string(c))
        return json_incref((json_t *)c);
    if (!json_is_array(c)) {
        rbad(R, SRV_E_BAD_REQUEST, "input", "input[%zu].content must be a string or an array of "
             "text parts", i);
        return NULL;
    }
    json_t *parts = json_array();
    size_t j;
    const json_t *p;
    json_array_foreach(c, j, p)
    {
        const char *t = json_string_value(json_object_get(p, "type"));
        const json_t *text = json_object_get(p, "text");
        if (!t || !json_is_object(p)) {
            rbad(R, SRV_E_BAD_REQUEST, "input", "input[%zu].content[%zu] must be an object with a "
                 "'type'", i, j);
            break;
        }
        if (strcmp(t, "input_text") && strcmp(t, "output_text") && strcmp(t, "text")) {
            rbad(R, SRV_E_BAD_REQUEST, "input", "input[%zu].content[%zu]: type '%.40s' is not "
                 "supported (text only: input_text, output_text)", i, j, t);
            break;
        }
        if (!json_is_string(text)) {
            rbad(R, SRV_E_BAD_REQUEST, "input", "input[%zu].content[%zu].text must be a string", i, j);
            break;
        }
        json_t *q = json_object();
        json_object_set_new(q, "type", json_string("text"));
        json_object_set(q, "text", (json_t *)text);
        json_array_append_new(parts, q);
    }
    if (j < json_array_size(c)) {
        json_decref(parts);
        return NULL;
    }
    return parts;
}

/* Appends {"role": role, "content": content} (taken) to msgs; returns the message. */
static json_t *push_msg(json_t *msgs, const char *role, json_t *content)
{
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string(role));
    json_object_set_new(m, "content", content);
    json_array_append_new(msgs, m);
    return m;
}

/* The last message of msgs when it is the assistant's (function calls join it), else NULL. */
static json_t *last_assistant(json_t *msgs)
{
    size_t n = json_array_size(msgs);
    json_t *m = n ? json_array_get(msgs, n - 1) : NULL;
    const char *role = json_string_value(json_object_get(m, "role"));
    return role && !strcmp(role, "assistant") ? m : NULL;
}

/* input (a string, or items) after instructions, as chat messages. */
static int input_messages(rctx *R, const json_t *o, json_t *msgs)
{
    const json_t *ins = json_object_get(o, "instructions");
    if (given(ins) && !json_is_string(ins))
        return rbad(R, SRV_E_BAD_REQUEST, "instructions", "'instructions' must be a string");
    if (given(ins))
        push_msg(msgs, "system", json_incref((json_t *)ins));
    const json_t *in = json_object_get(o, "input");
    if (!given(in))
        return rbad(R, SRV_E_BAD_REQUEST, "input", "'input' is required: a string or an array "
                    "of input items");
    if (json_is_string(in)) {
        push_msg(msgs, "user", json_incref((json_t *)in));
        return 0;
    }
    if (!json_is_array(in) || !json_array_size(in))
        return rbad(R, SRV_E_BAD_REQUEST, "input", "'input' must be a string or a non-empty array "
                    "of input items");
    size_t i;
    const json_t *it;
    json_array_foreach(in, i, it)
    {
        if (!json_is_object(it))
            return rbad(R, SRV_E_BAD_REQUEST, "input", "input[%zu] must be an object", i);
        const char *type = json_string_value(json_object_get(it, "type"));
        const char *role = json_string_value(json_object_get(it, "role"));
        if (!type && json_object_get(it, "type"))
            return rbad(R, SRV_E_BAD_REQUEST, "input", "input[%zu].type must be a string", i);
        if (!type || !strcmp(type, "message")) {
            if (!role || (strcmp(role, "user") && strcmp(role, "assistant") &&
                          strcmp(role, "system") && strcmp(role, "developer")))
                return rbad(R, SRV_E_BAD_REQUEST, "input", "input[%zu].role must be \"user\", "
                            "\"assistant\", \"system\" or \"developer\"", i);
            json_t *c = content_of(R, json_object_get(it, "content"), i);
            if (!c)
                return -1;
            push_msg(msgs, role, c);
        } else if (!strcmp(type, "function_call")) {
            const json_t *id = json_object_get(it, "call_id"), *name = json_object_get(it, "name"),
                         *args = json_object_get(it, "arguments");
            if (!json_is_string(id) || !json_is_string(name) || !json_is_string(args))
                return rbad(R, SRV_E_BAD_REQUEST, "input", "input[%zu]: a function_call needs "
                            "'call_id', 'name' and 'arguments' (strings)", i);
            /* calls of one turn are one assistant message (after its text, if any) */
            json_t *m = last_assistant(msgs);
            if (!m)
                m = push_msg(msgs, "assistant", json_null());
            json_t *calls = json_object_get(m, "tool_calls");
            if (!calls) {
                calls = json_array();
                json_object_set_new(m, "tool_calls", calls);
            }
            json_t *call = json_object(), *fn = json_object();
            json_object_set(fn, "name", (json_t *)name);
            json_object_set(fn, "arguments", (json_t *)args);
            json_object_set(call, "id", (json_t *)id);
            json_object_set_new(call, "type", json_string("function"));
            json_object_set_new(call, "function", fn);
            json_array_append_new(calls, call);
        } else if (!strcmp(type, "function_call_output")) {
            const json_t *id = json_object_get(it, "call_id");
            if (!json_is_string(id))
                return rbad(R, SRV_E_BAD_REQUEST, "input", "input[%zu]: a function_call_output "
                            "needs a 'call_id' (a string)", i);
            json_t *c = content_of(R, json_object_get(it, "output"), i);
            if (!c)
                return -1;
            json_object_set(push_msg(msgs, "tool", c), "tool_call_id", (json_t *)id);
        } else if (!strcmp(type, "reasoning")) {
            /* an earlier turn's reasoning: the chat templates drop it from history too */
        } else {
            return rbad(R, SRV_E_BAD_REQUEST, "input", "input[%zu]: item type '%.40s' is not "
                        "supported (message, function_call, function_call_output, reasoning)",
                        i, type);
        }
    }
    if (!json_array_size(msgs)) /* (reasoning items and nothing else) */
        return rbad(R, SRV_E_BAD_REQUEST, "input", "'input' has no message: reasoning items are "
                    "dropped from history, as the chat templates drop them");
    return 0;
}

/* A copy of o's members but "type", in o's order (what the chat form nests under a key of its
   own; a template renders a tool's fields in the order given). */
static json_t *all_but_type(const json_t *o)
{
    json_t *c = json_object();
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v)
        if (strcmp(k, "type"))
            json_object_set(c, k, v);
    return c;
}

/* text.format as chat's response_format (NULL: none or "text"). */
static int text_format(rctx *R, const json_t *o, json_t *chat)
{
    const json_t *text = json_object_get(o, "text");
    if (!given(text))
        return 0;
    if (!json_is_object(text))
        return rbad(R, SRV_E_BAD_REQUEST, "text", "'text' must be an object");
    const json_t *f = json_object_get(text, "format");
    if (!given(f))
        return 0;
    const char *t = json_string_value(json_object_get(f, "type"));
    if (!json_is_object(f) || !t)
        return rbad(R, SRV_E_BAD_REQUEST, "text.format", "'text.format' must be an object with a "
                    "'type': \"text\", \"json_object\" or \"json_schema\"");
    json_t *rf = json_object();
    json_object_set_new(rf, "type", json_string(t));
    if (!strcmp(t, "json_schema")) { /* the chat form nests what the Responses form flattens */
        json_object_set_new(rf, "json_schema", all_but_type(f));
    }
    json_object_set_new(chat, "response_format", rf);
    return 0;
}

/* tools (function tools, flat in the Responses form) and tool_choice, in chat's form. */
static int tools_of(rctx *R, const json_t *o, json_t *chat)
{
    const json_t *tools = json_object_get(o, "tools");
    if (given(tools)) {
        if (!json_is_array(tools))
            return rbad(R, SRV_E_BAD_REQUEST, "tools", "'tools' must be an array");
        json_t *out = json_array();
        json_object_set_new(chat, "tools", out);
        size_t i;
        const json_t *t;
        json_array_foreach(tools, i, t)
        {
            const char *type = json_string_value(json_object_get(t, "type"));
            if (!type || strcmp(type, "function"))
                return rbad(R, SRV_E_BAD_REQUEST, "tools", "tools[%zu]: type '%.40s' is not "
                            "supported (function tools only)", i, type ? type : "(none)");
            json_t *fn = all_but_type(t);
            json_t *ct = json_object();
            json_object_set_new(ct, "type", json_string("function"));
            json_object_set_new(ct, "function", fn);
            json_array_append_new(out, ct);
        }
    }
    const json_t *tc = json_object_get(o, "tool_choice");
    if (!given(tc))
        return 0;
    if (json_is_string(tc)) {
        json_object_set(chat, "tool_choice", (json_t *)tc);
        return 0;
    }
    const char *type = json_string_value(json_object_get(tc, "type"));
    const json_t *name = json_object_get(tc, "name");
    if (!json_is_object(tc) || !type || strcmp(type, "function") || !json_is_string(name))
        return rbad(R, SRV_E_BAD_REQUEST, "tool_choice", "'tool_choice' must be \"none\", \"auto\", "
                    "\"required\" or {\"type\": \"function\", \"name\": ...}");
    json_t *c = json_object(), *fn = json_object();
    json_object_set(fn, "name", (json_t *)name);
    json_object_set_new(c, "type", json_string("function"));
    json_object_set_new(c, "function", fn);
    json_object_set_new(chat, "tool_choice", c);
    return 0;
}

int srv_responses_request(const json_t *o, json_t **chat, json_t **echo, const char **code,
                          const char **param, char *msg, size_t msglen)
{
    rctx R = {code, param, msg, msglen};
    *chat = *echo = NULL;
    *param = NULL;
    if (!json_is_object(o))
        return rbad(&R, SRV_E_BAD_REQUEST, NULL, "the request body must be a JSON object");
    /* what a response cannot be without state or more than one answer */
    const json_t *prev = json_object_get(o, "previous_response_id");
    if (given(prev) && !srv_id_ok(prev))
        return rbad(&R, SRV_E_BAD_REQUEST, "previous_response_id", "'previous_response_id' must "
                    "be a string of 1..%d bytes", SRV_ID_MAX);
    if (given(prev) && given(json_object_get(o, "session")))
        return rbad(&R, SRV_E_BAD_REQUEST, "previous_response_id", "'previous_response_id' and "
                    "'session' cannot be combined");
    if (given(json_object_get(o, "conversation")))
        return rbad(&R, SRV_E_BAD_REQUEST, "conversation", "'conversation' is not supported: send "
                    "the earlier turns in 'input' (or use 'session')");
    if (json_is_true(json_object_get(o, "background")))
        return rbad(&R, SRV_E_BAD_REQUEST, "background", "'background' is not supported: a "
                    "response is answered on its own request");
    if (given(json_object_get(o, "prompt")))
        return rbad(&R, SRV_E_BAD_REQUEST, "prompt", "'prompt' (a stored prompt template) is not "
                    "supported");
    const json_t *tl = json_object_get(o, "top_logprobs");
    if (given(tl) && !(json_is_integer(tl) && json_integer_value(tl) == 0))
        return rbad(&R, SRV_E_BAD_REQUEST, "top_logprobs", "'top_logprobs' is not supported on "
                    "/v1/responses (use /v1/chat/completions' logprobs)");
    static const char *const chat_only[] = {"messages", "max_tokens", "max_completion_tokens",
                                            "response_format", "n", "logprobs", "parallel",
                                            "stream_options"};
    for (size_t k = 0; k < sizeof chat_only / sizeof chat_only[0]; k++)
        if (json_object_get(o, chat_only[k]))
            return rbad(&R, SRV_E_BAD_REQUEST, chat_only[k], "'%s' belongs to "
                        "/v1/chat/completions, not to /v1/responses", chat_only[k]);
    json_t *c = json_object(), *msgs = json_array(), *e = json_object();
    json_object_set_new(c, "messages", msgs);
    /* the fields both take (sampling, stop, the fogline and vLLM extensions) pass as they are;
       chat completions ignores what it does not know, as this route does */
    static const char *const translated[] = {"input", "instructions", "max_output_tokens", "text",
                                             "tools", "tool_choice", "top_logprobs"};
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v)
    {
        bool skip = false;
        for (size_t t = 0; t < sizeof translated / sizeof translated[0]; t++)
            skip |= !strcmp(k, translated[t]);
        if (!skip)
            json_object_set(c, k, v);
    }
    if (json_object_get(o, "max_output_tokens"))
        json_object_set(c, "max_completion_tokens", json_object_get(o, "max_output_tokens"));
    if (input_messages(&R, o, msgs) || text_format(&R, o, c) || tools_of(&R, o, c)) {
        json_decref(c);
        json_decref(e);
        return -1;
    }
    /* the stored conversation continues as a session does (serve_session.c), its function
       calls and their outputs included */
    if (given(prev))
        json_object_set(c, "session", (json_t *)prev);
    /* what the answer repeats of the request, with OpenAI's defaults */
    const json_t *ins = json_object_get(o, "instructions"), *mot = json_object_get(o, "max_output_tokens"),
                 *tools = json_object_get(o, "tools"), *tc = json_object_get(o, "tool_choice"),
                 *text = json_object_get(o, "text"), *md = json_object_get(o, "metadata");
    json_object_set_new(e, "instructions", given(ins) ? json_incref((json_t *)ins) : json_null());
    json_object_set_new(e, "max_output_tokens", given(mot) ? json_incref((json_t *)mot) : json_null());
    json_object_set_new(e, "tools", json_is_array(tools) ? json_incref((json_t *)tools) : json_array());
    json_object_set_new(e, "tool_choice", given(tc) ? json_incref((json_t *)tc) : json_string("auto"));
    const json_t *ptc = json_object_get(o, "parallel_tool_calls");
    json_object_set_new(e, "parallel_tool_calls", json_boolean(!json_is_false(ptc)));
    if (json_is_object(text) && json_object_get(text, "format")) {
        json_object_set(e, "text", (json_t *)text);
    } else {
        json_t *tf = json_object(), *fmt = json_object();
        json_object_set_new(fmt, "type", json_string("text"));
        json_object_set_new(tf, "format", fmt);
        json_object_set_new(e, "text", tf);
    }
    json_object_set_new(e, "metadata", json_is_object(md) ? json_incref((json_t *)md) : json_object());
    if (given(prev))
        json_object_set(e, "previous_response_id", (json_t *)prev);
    if (json_object_get(o, "store")) /* (what was asked; the server says what it did) */
        json_object_set(e, "store", json_object_get(o, "store"));
    *chat = c;
    *echo = e;
    return 0;
}

const char *srv_responses_param(const char *p)
{
    if (!p)
        return NULL;
    if (!strcmp(p, "max_completion_tokens"))
        return "max_output_tokens";
    if (!strcmp(p, "response_format"))
        return "text.format";
    if (!strncmp(p, "messages", 8))
        return "input";
    return p;
}

void srv_responses_words(char *out, size_t cap, const char *msg)
{
    static const char *const from[] = {"max_completion_tokens", "response_format", "messages"},
                             *const to[] = {"max_output_tokens", "text.format", "input"};
    size_t n = 0;
    if (!cap)
        return;
    for (const char *p = msg ? msg : ""; *p && n + 1 < cap;) {
        size_t k = 0;
        while (k < 3 && strncmp(p, from[k], strlen(from[k])))
            k++;
        if (k < 3 && n + strlen(to[k]) < cap) {
            memcpy(out + n, to[k], strlen(to[k]));
            n += strlen(to[k]);
            p += strlen(from[k]);
        } else {
            out[n++] = *p++;
        }
    }
    out[n] = 0;
}

/* ---- the answer ---- */

void srv_resp_init(srv_resp *st, const char *id)
{
    memset(st, 0, sizeof *st);
    snprintf(st->id, sizeof st->id, "%s", id);
    st->output = json_array();
    st->err = !st->output;
}

void srv_resp_free(srv_resp *st)
{
    json_decref(st->output);
    fl_buf_free(&st->text);
    memset(st, 0, sizeof *st);
}

static void emit_ev(srv_resp *st, srv_resp_emit emit, void *ctx, json_t *ev)
{
    if (!emit) {
        json_decref(ev);
        return;
    }
    json_object_set_new(ev, "sequence_number", json_integer(st->seq++));
    emit(ctx, ev);
}

/* An event of the item at output index at: its type, item_id (when set) and output_index. */
static json_t *ev_at(const char *type, const char *item_id, json_int_t at)
{
    json_t *ev = json_object();
    json_object_set_new(ev, "type", json_string(type));
    if (item_id)
        json_object_set_new(ev, "item_id", json_string(item_id));
    json_object_set_new(ev, "output_index", json_integer(at));
    return ev;
}

/* An event of the open item, and (content parts) its content_index. */
static json_t *item_ev(const srv_resp *st, const char *type, bool part)
{
    json_t *ev = ev_at(type, st->item_id, (json_int_t)json_array_size(st->output));
    if (part)
        json_object_set_new(ev, "content_index", json_integer(0));
    return ev;
}

/* The open item as it stands (status "in_progress" while open), or its text part alone. */
static json_t *part_json(const srv_resp *st)
{
    json_t *p = json_object();
    const char *t = st->text.data ? st->text.data : "";
    if (st->open == SRV_RESP_REASONING) {
        json_object_set_new(p, "type", json_string("reasoning_text"));
        json_object_set_new(p, "text", json_stringn(t, st->text.len));
    } else {
        json_object_set_new(p, "type", json_string("output_text"));
        json_object_set_new(p, "text", json_stringn(t, st->text.len));
        json_object_set_new(p, "annotations", json_array());
        json_object_set_new(p, "logprobs", json_array());
    }
    return p;
}

static json_t *item_json(const srv_resp *st, const char *status, bool with_part)
{
    json_t *it = json_object(), *content = json_array();
    if (with_part)
        json_array_append_new(content, part_json(st));
    json_object_set_new(it, "id", json_string(st->item_id));
    if (st->open == SRV_RESP_REASONING) {
        json_object_set_new(it, "type", json_string("reasoning"));
        json_object_set_new(it, "summary", json_array());
        json_object_set_new(it, "content", content);
    } else {
        json_object_set_new(it, "type", json_string("message"));
        json_object_set_new(it, "status", json_string(status));
        json_object_set_new(it, "role", json_string("assistant"));
        json_object_set_new(it, "content", content);
    }
    return it;
}

static void item_open(srv_resp *st, srv_resp_open kind, srv_resp_emit emit, void *ctx)
{
    st->open = kind;
    fl_buf_rewind(&st->text, 0);
    snprintf(st->item_id, sizeof st->item_id, "%s_%s_%d", kind == SRV_RESP_REASONING ? "rs" : "msg",
             st->id + (strncmp(st->id, "resp_", 5) ? 0 : 5), st->n_items++);
    json_t *ev = ev_at("response.output_item.added", NULL, (json_int_t)json_array_size(st->output));
    json_object_set_new(ev, "item", item_json(st, "in_progress", false));
    emit_ev(st, emit, ctx, ev);
    ev = item_ev(st, "response.content_part.added", true);
    json_t *p = part_json(st);
    json_object_set_new(ev, "part", p);
    emit_ev(st, emit, ctx, ev);
}

static void item_close(srv_resp *st, bool incomplete, srv_resp_emit emit, void *ctx)
{
    if (st->open == SRV_RESP_NONE)
        return;
    bool rs = st->open == SRV_RESP_REASONING;
    json_t *ev = item_ev(st, rs ? "response.reasoning_text.done" : "response.output_text.done", true);
    json_object_set_new(ev, "text", json_stringn(st->text.data ? st->text.data : "", st->text.len));
    if (!rs)
        json_object_set_new(ev, "logprobs", json_array());
    emit_ev(st, emit, ctx, ev);
    ev = item_ev(st, "response.content_part.done", true);
    json_object_set_new(ev, "part", part_json(st));
    emit_ev(st, emit, ctx, ev);
    json_t *item = item_json(st, incomplete ? "incomplete" : "completed", true);
    ev = ev_at("response.output_item.done", NULL, (json_int_t)json_array_size(st->output));
    json_object_set(ev, "item", item);
    emit_ev(st, emit, ctx, ev);
    if (json_array_append_new(st->output, item))
        st->err = true;
    st->open = SRV_RESP_NONE;
    fl_buf_rewind(&st->text, 0);
}

static void text_to(srv_resp *st, srv_resp_open kind, const char *t, size_t n, srv_resp_emit emit,
                    void *ctx)
{
    if (!n)
        return;
    if (st->open != kind) {
        item_close(st, false, emit, ctx);
        item_open(st, kind, emit, ctx);
    }
    if (fl_buf_append(&st->text, t, n))
        st->err = true;
    json_t *ev = item_ev(st, kind == SRV_RESP_REASONING ? "response.reasoning_text.delta"
                                                        : "response.output_text.delta", true);
    json_object_set_new(ev, "delta", json_stringn(t, n));
    if (kind == SRV_RESP_MESSAGE)
        json_object_set_new(ev, "logprobs", json_array());
    emit_ev(st, emit, ctx, ev);
}

/* A chat tool call as a function_call item, whole (the extractor gives calls whole). */
static void call_to(srv_resp *st, const json_t *call, srv_resp_emit emit, void *ctx)
{
    item_close(st, false, emit, ctx);
    const json_t *fn = json_object_get(call, "function");
    const char *args = json_string_value(json_object_get(fn, "arguments"));
    char id[64];
    snprintf(id, sizeof id, "fc_%s_%d", st->id + (strncmp(st->id, "resp_", 5) ? 0 : 5),
             st->n_items++);
    json_t *it = json_object();
    json_object_set_new(it, "type", json_string("function_call"));
    json_object_set_new(it, "id", json_string(id));
    json_object_set(it, "call_id", json_object_get(call, "id"));
    json_object_set(it, "name", json_object_get(fn, "name"));
    json_object_set_new(it, "arguments", json_string(""));
    json_object_set_new(it, "status", json_string("in_progress"));
    json_int_t at = (json_int_t)json_array_size(st->output);
    json_t *ev = ev_at("response.output_item.added", NULL, at);
    json_object_set_new(ev, "item", json_deep_copy(it));
    emit_ev(st, emit, ctx, ev);
    ev = ev_at("response.function_call_arguments.delta", id, at);
    json_object_set_new(ev, "delta", json_string(args ? args : ""));
    emit_ev(st, emit, ctx, ev);
    ev = ev_at("response.function_call_arguments.done", id, at);
    json_object_set_new(ev, "arguments", json_string(args ? args : ""));
    emit_ev(st, emit, ctx, ev);
    json_object_set_new(it, "arguments", json_string(args ? args : ""));
    json_object_set_new(it, "status", json_string("completed"));
    ev = ev_at("response.output_item.done", NULL, at);
    json_object_set(ev, "item", it);
    emit_ev(st, emit, ctx, ev);
    if (json_array_append_new(st->output, it))
        st->err = true;
}

void srv_resp_delta(srv_resp *st, const json_t *d, srv_resp_emit emit, void *ctx)
{
    const json_t *rc = json_object_get(d, "reasoning_content"), *c = json_object_get(d, "content");
    if (json_is_string(rc))
        text_to(st, SRV_RESP_REASONING, json_string_value(rc), json_string_length(rc), emit, ctx);
    if (json_is_string(c))
        text_to(st, SRV_RESP_MESSAGE, json_string_value(c), json_string_length(c), emit, ctx);
    size_t i;
    const json_t *call;
    json_array_foreach(json_object_get(d, "tool_calls"), i, call)
        call_to(st, call, emit, ctx);
}

void srv_resp_close(srv_resp *st, bool incomplete, srv_resp_emit emit, void *ctx)
{
    item_close(st, incomplete, emit, ctx);
    if (!json_array_size(st->output) && !st->err) { /* an empty reply is an empty message */
        item_open(st, SRV_RESP_MESSAGE, emit, ctx);
        item_close(st, incomplete, emit, ctx);
    }
}

json_t *srv_resp_usage(int input, int output, int cached, int reasoning)
{
    json_t *u = json_object(), *d = json_object(), *od = json_object();
    json_object_set_new(u, "input_tokens", json_integer(input));
    json_object_set_new(d, "cached_tokens", json_integer(cached));
    json_object_set_new(u, "input_tokens_details", d);
    json_object_set_new(u, "output_tokens", json_integer(output));
    json_object_set_new(od, "reasoning_tokens", json_integer(reasoning > 0 ? reasoning : 0));
    json_object_set_new(u, "output_tokens_details", od);
    json_object_set_new(u, "total_tokens", json_integer(input + output));
    return u;
}

json_t *srv_resp_object(const srv_resp *st, long long created, const char *model,
                        const char *status, const json_t *echo, json_t *usage)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(st->id));
    json_object_set_new(o, "object", json_string("response"));
    json_object_set_new(o, "created_at", json_integer(created));
    json_object_set_new(o, "status", json_string(status));
    json_object_set_new(o, "background", json_false());
    json_object_set_new(o, "error", json_null());
    json_t *inc = json_null();
    if (!strcmp(status, "incomplete")) {
        json_decref(inc);
        inc = json_object();
        json_object_set_new(inc, "reason", json_string("max_output_tokens"));
    }
    json_object_set_new(o, "incomplete_details", inc);
    json_object_set_new(o, "model", json_string(model));
    json_object_set_new(o, "output", strcmp(status, "in_progress") ? json_deep_copy(st->output)
                                                                   : json_array());
    json_object_set_new(o, "parallel_tool_calls", json_true());
    json_object_set_new(o, "previous_response_id", json_null());
    json_object_set_new(o, "store", json_false());
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)echo, k, v)
        json_object_set(o, k, v);
    json_object_set_new(o, "usage", usage ? usage : json_null());
    return o;
}

void srv_resp_begin(srv_resp *st, long long created, const char *model, const json_t *echo,
                    srv_resp_emit emit, void *ctx)
{
    static const char *const types[] = {"response.created", "response.in_progress"};
    for (int i = 0; i < 2; i++) {
        json_t *ev = json_object();
        json_object_set_new(ev, "type", json_string(types[i]));
        json_object_set_new(ev, "response", srv_resp_object(st, created, model, "in_progress", echo, NULL));
        emit_ev(st, emit, ctx, ev);
    }
}

/* ---- stored input items (GET /v1/responses/ID/input_items) ---- */

json_t *srv_resp_input_items(const json_t *in, const char *resp_id)
{
    const char *tail = strncmp(resp_id, "resp_", 5) ? resp_id : resp_id + 5;
    json_t *items = json_array();
    if (!items)
        return NULL;
    char id[96];
    if (json_is_string(in)) {
        snprintf(id, sizeof id, "msg_%s_in0", tail);
        json_t *part = json_pack("{s:s, s:O}", "type", "input_text", "text", in);
        json_t *it = json_pack("{s:s, s:s, s:s, s:s, s:[o]}", "id", id, "type", "message", "status",
                               "completed", "role", "user", "content", part);
        if (!it || json_array_append_new(items, it)) {
            json_decref(items);
            return NULL;
        }
        return items;
    }
    size_t i;
    const json_t *x;
    json_array_foreach(in, i, x)
    {
        json_t *it = json_copy((json_t *)x);
        if (!it) {
            json_decref(items);
            return NULL;
        }
        const char *type = json_string_value(json_object_get(it, "type"));
        if (!type) {
            type = "message";
            json_object_set_new(it, "type", json_string(type));
        }
        const json_t *c = json_object_get(it, "content");
        if (!strcmp(type, "message") && json_is_string(c)) { /* as the parts OpenAI lists */
            const char *role = json_string_value(json_object_get(it, "role"));
            bool out = role && !strcmp(role, "assistant");
            json_t *part = out ? json_pack("{s:s, s:O, s:[]}", "type", "output_text", "text", c,
                                           "annotations")
                               : json_pack("{s:s, s:O}", "type", "input_text", "text", c);
            json_object_set_new(it, "content", json_pack("[o]", part));
        }
        if (!json_object_get(it, "id")) {
            const char *pre = !strcmp(type, "function_call")          ? "fc"
                              : !strcmp(type, "function_call_output") ? "fco"
                              : !strcmp(type, "reasoning")            ? "rs"
                                                                      : "msg";
            snprintf(id, sizeof id, "%s_%s_in%zu", pre, tail, i);
            json_object_set_new(it, "id", json_string(id));
        }
        if (!json_object_get(it, "status") && strcmp(type, "reasoning"))
            json_object_set_new(it, "status", json_string("completed"));
        if (json_array_append_new(items, it)) {
            json_decref(items);
            return NULL;
        }
    }
    return items;
}

