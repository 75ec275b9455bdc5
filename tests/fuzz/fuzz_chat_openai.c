/* fuzz_chat_openai.c: a /v1/chat/completions body as serve_http.c handles it: the UTF-8
 * check, jansson (duplicate keys allowed, as the HTTP path loads them), srv_parse_chat_openai,
 * and for an accepted request the template and tokenizer. A rejection must carry a known
 * code, a message and a sensible param, and become a well-formed OpenAI error object. The same
 * body then goes to srv_parse_completion_openai (/v1/completions) under the same checks, an
 * accepted text prompt through the tokenizer; and to srv_parse_tokenize (/tokenize: a prompt
 * tokenized, or messages rendered) and srv_parse_detokenize (/detokenize: ids decoded to valid
 * UTF-8), under the same checks. Then to /v1/responses: srv_responses_request's translation
 * (its own rejections under the same checks), the chat request it makes through
 * srv_parse_chat_openai with its errors renamed as that route answers them, and an accepted
 * one's reply built back into output items from a delta cut out of the input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_chat_common.h"
#include "serve_responses.h"

static fl_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    tok = fz_load_tokenizer(NULL);
    return 0;
}

static void emit_check(void *ctx, json_t *ev)
{
    long long *seq = ctx;
    json_int_t n = json_integer_value(json_object_get(ev, "sequence_number"));
    FZ_CHECK(n == *seq, "event %lld numbered %lld", *seq, (long long)n);
    FZ_CHECK(json_is_string(json_object_get(ev, "type")), "an event without a type");
    (*seq)++;
    json_decref(ev);
}

static void fuzz_responses(const json_t *o, const srv_limits *L)
{
    json_t *co = NULL, *echo = NULL;
    const char *code = NULL, *param = (const char *)1;
    char msg[FL_ERR_MSG] = "";
    int rc = srv_responses_request(o, &co, &echo, &code, &param, msg, sizeof msg);
    if (rc) {
        FZ_CHECK(rc == -1 && !co && !echo, "srv_responses_request returned %d", rc);
        fz_check_rejection(code, param, msg);
        fz_check_openai_error(code, param, msg);
        return;
    }
    FZ_CHECK(json_is_object(co) && json_is_object(echo), "an accepted request without its parts");
    /* what GET /v1/responses/ID/input_items lists of it: an item each (a string: one), each
       with a string type and id, as JSON that can be written */
    const json_t *in = json_object_get(o, "input");
    json_t *items = srv_resp_input_items(in, "resp_fuzz");
    FZ_CHECK(json_is_array(items) &&
                 json_array_size(items) == (json_is_string(in) ? 1 : json_array_size(in)),
             "input items of an accepted request");
    size_t ii;
    json_t *it;
    json_array_foreach(items, ii, it)
        FZ_CHECK(json_is_string(json_object_get(it, "type")) && json_is_string(json_object_get(it, "id")),
                 "input item %zu without its type or id", ii);
    char *dump = json_dumps(items, JSON_COMPACT);
    FZ_CHECK(dump != NULL, "input items that cannot be written");
    free(dump);
    json_decref(items);
    FZ_CHECK(json_is_array(json_object_get(co, "messages")) &&
             json_array_size(json_object_get(co, "messages")) > 0, "no messages made");
    srv_chat c;
    code = NULL;
    param = (const char *)1;
    rc = srv_parse_chat_openai(co, L, &c, &code, &param, msg, sizeof msg);
    if (rc) {
        char words[FL_ERR_MSG + 128];
        srv_responses_words(words, sizeof words, msg);
        FZ_CHECK(strnlen(words, sizeof words) < sizeof words, "renamed message unterminated");
        fz_check_rejection(code, srv_responses_param(param), words[0] ? words : msg);
    } else {
        fz_check_chat(&c, L, true);
        /* the reply as chat deltas: the input's own strings as reasoning, content and calls */
        srv_resp st;
        srv_resp_init(&st, "resp_fuzz");
        long long seq = 0;
        srv_resp_begin(&st, 1, "m", echo, emit_check, &seq);
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)o, k, v)
        {
            json_t *d = json_object();
            if (json_is_string(v))
                json_object_set(d, k[0] % 2 ? "content" : "reasoning_content", v);
            if (!strcmp(k, "tools") && json_is_array(v)) { /* tool-call shaped or not */
                json_t *calls = json_array();
                size_t i;
                json_t *t;
                json_array_foreach(v, i, t)
                {
                    json_t *call = json_object(), *fn = json_object();
                    json_object_set(fn, "name", json_object_get(t, "name"));
                    json_object_set(fn, "arguments", json_object_get(t, "description"));
                    json_object_set_new(call, "id", json_string("call_x"));
                    json_object_set_new(call, "function", fn);
                    json_array_append_new(calls, call);
                }
                json_object_set_new(d, "tool_calls", calls);
            }
            srv_resp_delta(&st, d, emit_check, &seq);
            json_decref(d);
        }
        srv_resp_close(&st, json_is_true(json_object_get(o, "stream")), emit_check, &seq);
        FZ_CHECK(json_array_size(st.output) > 0, "a closed response without output");
        json_t *r = srv_resp_object(&st, 1, "m", "completed", echo, srv_resp_usage(1, 2, 0, 1));
        char *s = json_dumps(r, JSON_COMPACT);
        FZ_CHECK(s != NULL, "a response object that cannot be written");
        free(s);
        json_decref(r);
        srv_resp_free(&st);
    }
    srv_chat_free(&c);
    json_decref(co);
    json_decref(echo);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bool ok = srv_utf8_valid(data, size);
    FZ_CHECK(ok == fz_utf8_ok(data, size), "srv_utf8_valid says %d, the reference says %d", ok,
             !ok);
    if (!ok)
        return 0;
    json_error_t je;
    json_t *o = json_loadb((const char *)data, size, 0, &je);
    if (!o)
        return 0;
    srv_limits L = fz_limits();
    srv_chat c;
    const char *code = NULL, *param = (const char *)1; /* must be reset by the parser */
    char msg[FL_ERR_MSG] = "";
    int rc = srv_parse_chat_openai(o, &L, &c, &code, &param, msg, sizeof msg);
    if (rc) {
        FZ_CHECK(rc == -1, "srv_parse_chat_openai returned %d", rc);
        fz_check_rejection(code, param, msg);
        fz_check_openai_error(code, param, msg);
    } else {
        FZ_CHECK(param == NULL, "param left set on success");
        fz_check_chat(&c, &L, true);
        fz_render_like_server(tok, &c);
    }
    srv_chat_free(&c);
    code = NULL;
    param = (const char *)1;
    msg[0] = 0;
    rc = srv_parse_completion_openai(o, &L, &c, &code, &param, msg, sizeof msg);
    if (rc) {
        FZ_CHECK(rc == -1, "srv_parse_completion_openai returned %d", rc);
        fz_check_rejection(code, param, msg);
        fz_check_openai_error(code, param, msg);
    } else {
        FZ_CHECK(param == NULL, "param left set on a completion's success");
        fz_check_completion(&c, &L);
        fz_tokenize_completion(tok, &c);
    }
    srv_chat_free(&c);
    srv_tokenize t;
    code = NULL;
    param = (const char *)1;
    msg[0] = 0;
    rc = srv_parse_tokenize(o, &L, &t, &code, &param, msg, sizeof msg);
    if (rc) {
        FZ_CHECK(rc == -1, "srv_parse_tokenize returned %d", rc);
        fz_check_rejection(code, param, msg);
        fz_check_openai_error(code, param, msg);
    } else {
        FZ_CHECK(param == NULL, "param left set on a /tokenize success");
        FZ_CHECK(t.chat.raw ? t.chat.n_prompts == 1 && t.chat.prompts[0].text
                            : t.chat.n_msgs > 0, "an accepted /tokenize has no prompt");
        if (t.chat.raw)
            fz_tokenize_completion(tok, &t.chat);
        else
            fz_render_like_server(tok, &t.chat);
    }
    srv_chat_free(&t.chat);
    srv_detokenize d;
    code = NULL;
    param = (const char *)1;
    msg[0] = 0;
    int vocab = fl_tokenizer_vocab_size(tok);
    rc = srv_parse_detokenize(o, vocab, &d, &code, &param, msg, sizeof msg);
    if (rc) {
        FZ_CHECK(rc == -1, "srv_parse_detokenize returned %d", rc);
        fz_check_rejection(code, param, msg);
        fz_check_openai_error(code, param, msg);
    } else {
        FZ_CHECK(param == NULL, "param left set on a /detokenize success");
        fl_buf text = {0};
        fl_err e = {0};
        for (size_t i = 0; i < d.n; i++)
            FZ_CHECK(d.ids[i] >= 0 && d.ids[i] < vocab, "accepted id %d", (int)d.ids[i]);
        FZ_CHECK(!fl_tokenizer_decode(tok, d.ids, d.n, d.skip_special, &text, &e),
                 "accepted ids fail to decode: %s", e.msg);
        FZ_CHECK(fz_utf8_ok((const uint8_t *)(text.data ? text.data : ""), text.len),
                 "decoded ids are not valid UTF-8");
        fl_buf_free(&text);
    }
    srv_detokenize_free(&d);
    fuzz_responses(o, &L);
    json_decref(o);
    return 0;
}
