/* fuzz_chat_openai.c: a /v1/chat/completions body as serve_http.c handles it: the UTF-8
 * check, jansson (duplicate keys allowed, as the HTTP path loads them), srv_parse_chat_openai,
 * and for an accepted request the template and tokenizer. A rejection must carry a known
 * code, a message and a sensible param, and become a well-formed OpenAI error object. The same
 * body then goes to srv_parse_completion_openai (/v1/completions) under the same checks, an
 * accepted text prompt through the tokenizer; and to srv_parse_tokenize (/tokenize: a prompt
 * tokenized, or messages rendered) and srv_parse_detokenize (/detokenize: ids decoded to valid
 * UTF-8), under the same checks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_chat_common.h"

static fl_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    tok = fz_load_tokenizer(NULL);
    return 0;
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
    json_decref(o);
    return 0;
}
