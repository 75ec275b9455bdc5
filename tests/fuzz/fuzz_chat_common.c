/* fuzz_chat_common.c: see fuzz_chat_common.h. */
#include "fuzz_chat_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

srv_limits fz_limits(void)
{
    srv_limits L = {.max_tokens_limit = 1024, .max_tokens_default = 256, .vocab = 3000};
    fl_decode_opts_default(&L.dec_default);
    return L;
}

static bool in_list(const char *s, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(s, list[i]))
            return true;
    return false;
}

void fz_check_rejection(const char *code, const char *param, const char *msg)
{
    FZ_CHECK(code != NULL, "rejected without a code (message '%s')", msg);
    /* SRV_E_INTERNAL is out of memory only, which libFuzzer's allocator never returns */
    FZ_CHECK(!strcmp(code, SRV_E_BAD_REQUEST) || !strcmp(code, SRV_E_OUT_OF_RANGE),
             "unexpected code %s (message '%s')", code, msg);
    size_t n = strnlen(msg, FL_ERR_MSG);
    FZ_CHECK(n > 0 && n < FL_ERR_MSG, "rejected with an empty or unterminated message");
    if (param) {
        static const char *const known[] = {
            "model", "session", "n", "stream", "stream_options", "stream_options.include_usage",
            "messages", "temperature", "top_p", "top_k", "seed", "max_tokens",
            "max_completion_tokens", "stop", "decoding", "decoding.policy",
            "decoding.threshold", "decoding.k", "decoding.entropy_bound", "decoding.overlap",
            "decoding.pipeline", "decoding.tau_add", "decoding.tau_act", "decoding.tau_conf",
            "decoding.max_blocks", "decoding.steps", "decoding.edit_threshold",
            "decoding.max_post_steps", "decoding.preset", "parallel", "chat_template_kwargs",
            "drafts", "response_format", "structured_outputs", "tools", "tool_choice", "prompt",
            "best_of", "echo",
            "logprobs", "top_logprobs", "logit_bias", "min_tokens", "ignore_eos",
            "presence_penalty", "frequency_penalty", "min_p", "repetition_penalty",
            "stop_token_ids", "include_stop_str_in_output", "suffix", "return_token_strs",
            "add_special_tokens", "add_generation_prompt", "continue_final_message", "tokens",
            "skip_special_tokens",
            /* /v1/responses */
            "input", "instructions", "max_output_tokens", "text", "text.format",
            "previous_response_id", "conversation", "background"};
        FZ_CHECK(in_list(param, known, sizeof known / sizeof known[0]), "unknown param '%s'",
                 param);
    }
}

static json_t *parse_back(char *text, const char *what)
{
    FZ_CHECK(text != NULL, "%s: no text", what);
    json_error_t je;
    json_t *o = json_loads(text, 0, &je);
    FZ_CHECK(o != NULL && json_is_object(o), "%s is not a JSON object: %s", what, text);
    free(text);
    return o;
}

void fz_check_error_frame(const char *id, const char *code, const char *msg)
{
    json_t *o = parse_back(srv_frame_error(id, code, msg), "error frame");
    const char *t = json_string_value(json_object_get(o, "type"));
    const char *c = json_string_value(json_object_get(o, "code"));
    FZ_CHECK(t && !strcmp(t, "error"), "error frame without type 'error'");
    FZ_CHECK(c && !strcmp(c, code), "error frame lost its code %s", code);
    /* a client shows the message: it must be there, whatever bytes the request held */
    FZ_CHECK(json_is_string(json_object_get(o, "message")),
             "error frame for %s has no message (the message was '%s')", code, msg);
    if (id)
        FZ_CHECK(json_is_string(json_object_get(o, "id")), "error frame lost the request id");
    json_decref(o);
}

void fz_check_openai_error(const char *code, const char *param, const char *msg)
{
    json_t *o = parse_back(srv_openai_error("invalid_request_error", code, param, msg),
                           "OpenAI error");
    json_t *e = json_object_get(o, "error");
    FZ_CHECK(json_is_object(e), "OpenAI error without an error object");
    const char *c = json_string_value(json_object_get(e, "code"));
    FZ_CHECK(c && !strcmp(c, code), "OpenAI error lost its code %s", code);
    FZ_CHECK(json_is_string(json_object_get(e, "message")),
             "OpenAI error for %s has no message (the message was '%s')", code, msg);
    json_t *p = json_object_get(e, "param");
    FZ_CHECK(param ? json_is_string(p) : json_is_null(p), "OpenAI error param is wrong");
    json_decref(o);
}

void fz_check_chat(const srv_chat *c, const srv_limits *L, bool openai)
{
    if (!openai) {
        FZ_CHECK(c->id != NULL, "accepted without an id");
        size_t n = strlen(c->id);
        FZ_CHECK(n >= 1 && n <= SRV_ID_MAX, "id of %zu bytes", n);
    }
    if (c->session)
        FZ_CHECK(strlen(c->session) >= 1 && strlen(c->session) <= SRV_ID_MAX,
                 "session of %zu bytes", strlen(c->session));
    FZ_CHECK(c->n_msgs >= 1 && c->n_msgs <= SRV_MAX_MESSAGES, "%zu messages", c->n_msgs);
    FZ_CHECK(c->n_choices >= 1 && c->n_choices <= SRV_MAX_SEGMENTS &&
                 (c->n_choices == 1 ? c->parallel != SRV_PAR_SAMPLES
                                    : c->parallel == SRV_PAR_SAMPLES && !c->session),
             "n %d accepted as parallel %d", c->n_choices, c->parallel);
    /* a fan-out's branches are the client's segments or the model's points: no tools there */
    bool fan = c->parallel != SRV_PAR_NONE && c->parallel != SRV_PAR_SAMPLES;
    FZ_CHECK(!fan || (!c->tools && !c->tool_schema && !c->tool_msgs),
             "tools accepted with parallel %d", c->parallel);
    for (size_t i = 0; i < c->n_msgs; i++) {
        const char *r = c->msgs[i].role;
        FZ_CHECK(r && (!strcmp(r, "system") || !strcmp(r, "user") || !strcmp(r, "assistant") ||
                       !strcmp(r, "tool")),
                 "message %zu accepted with role '%s'", i, r ? r : "(null)");
        FZ_CHECK(c->msgs[i].content != NULL, "message %zu without content", i);
        FZ_CHECK(fz_utf8_ok((const unsigned char *)c->msgs[i].content,
                            strlen(c->msgs[i].content)),
                 "message %zu content is not UTF-8", i);
    }
    fz_check_sampling(c, L);
}

void fz_check_sampling(const srv_chat *c, const srv_limits *L)
{
    FZ_CHECK(c->top_logprobs >= 0 && c->top_logprobs <= FL_MAX_TOP_LOGPROBS &&
                 (c->logprobs || !c->top_logprobs) &&
                 (!c->logprobs || c->parallel == SRV_PAR_NONE || c->parallel == SRV_PAR_SAMPLES),
             "logprobs %d, top_logprobs %d accepted (parallel %d)", c->logprobs,
             c->top_logprobs, c->parallel);
    FZ_CHECK(c->n_bias >= 0 && c->n_bias <= FL_MAX_LOGIT_BIAS, "logit_bias of %d", c->n_bias);
    for (int i = 0; i < c->n_bias; i++)
        FZ_CHECK(c->bias_ids[i] >= 0 && c->bias_ids[i] < L->vocab &&
                     fabsf(c->bias[i]) <= FL_LOGIT_BIAS_MAX,
                 "logit_bias %d: %g accepted", c->bias_ids[i], (double)c->bias[i]);
    FZ_CHECK(fabsf(c->presence_penalty) <= 2 && fabsf(c->frequency_penalty) <= 2,
             "penalties %g, %g accepted", (double)c->presence_penalty,
             (double)c->frequency_penalty);
    FZ_CHECK(c->min_tokens >= 0 && c->min_tokens <= c->max_tokens &&
                 (!(c->min_tokens || c->ignore_eos) ||
                  (c->format == FL_FMT_TEXT && c->tool_choice < SRV_TOOL_REQUIRED)),
             "min_tokens %d, ignore_eos %d accepted (max_tokens %d, format %d, tool_choice %d)",
             c->min_tokens, c->ignore_eos, c->max_tokens, c->format, c->tool_choice);
    FZ_CHECK(c->n_stop >= 0 && c->n_stop <= SRV_MAX_STOPS, "%d stop strings", c->n_stop);
    for (int i = 0; i < c->n_stop; i++) {
        size_t n = c->stop[i] ? strlen(c->stop[i]) : 0;
        FZ_CHECK(n >= 1 && n <= SRV_STOP_MAX, "stop[%d] has %zu bytes", i, n);
    }
    FZ_CHECK(c->max_tokens >= 1 && c->max_tokens <= L->max_tokens_limit, "max_tokens %d",
             c->max_tokens);
    fl_err e = {0};
    FZ_CHECK(fl_decode_opts_check(&c->dec, &e) == 0, "accepted decoding options fail: %s",
             e.msg);
    FZ_CHECK(c->dec.temperature >= 0 && c->dec.temperature <= 2, "temperature %g",
             (double)c->dec.temperature);
    FZ_CHECK(c->dec.top_p > 0 && c->dec.top_p <= 1, "top_p %g", (double)c->dec.top_p);
    FZ_CHECK(c->dec.top_k >= 0, "top_k %d", c->dec.top_k);
}

void fz_render_like_server(const fl_tokenizer *tok, const srv_chat *c)
{
    fl_buf text = {0};
    fl_err e = {0};
    fl_chat_opts co = {.add_generation_prompt = true, .enable_thinking = false};
    /* as tokenize_work: tools or tool messages go through the template's tool syntax. The
       default model's template has none (the server refuses them there with a message), so
       they are rendered as a model whose template has one would: Ling's renderer over the
       same vocabulary */
    bool tools = c->tools || c->tool_msgs;
    if (tools && !fl_chat_takes_tools(tok)) {
        static fl_tokenizer *ling;
        if (!ling)
            ling = fz_load_tokenizer("ling");
        tok = ling;
    }
    fl_chat_extra extra = {c->tools, (const char *const *)c->calls, NULL};
    int rc = tools ? fl_chat_render_extra(tok, c->msgs, c->n_msgs, &co, &extra, &text, &e)
                   : fl_chat_render(tok, c->msgs, c->n_msgs, &co, &text, &e);
    /* a tool schema's JSON the renderer cannot print as the template's tojson would (a float)
       is refused there with a message, which the server sends back */
    if (rc && tools && e.code == FL_EUNSUPPORTED && e.msg[0]) {
        FZ_CHECK(text.len == 0, "a refused rendering wrote %zu bytes", text.len);
        fl_buf_free(&text);
        return;
    }
    FZ_CHECK(rc == 0, "an accepted chat fails to render: %s", e.msg);
    rc = fz_tokenize_roundtrip(tok, text.data ? text.data : "", text.len);
    FZ_CHECK(rc == 0, "an accepted chat fails to tokenize");
    fl_buf_free(&text);
}

void fz_check_completion(const srv_chat *c, const srv_limits *L)
{
    FZ_CHECK(c->raw && c->n_msgs == 0 && !c->session && !c->tools && c->format == FL_FMT_TEXT,
             "a completion accepted with chat fields");
    int total = c->n_choices * c->n_prompts;
    FZ_CHECK(c->n_choices >= 1 && c->n_choices <= SRV_MAX_SEGMENTS && total <= SRV_MAX_CHOICES &&
                 c->parallel == (total > 1 ? SRV_PAR_SAMPLES : SRV_PAR_NONE) &&
                 (total == 1 || (c->max_branches == total && srv_chat_branches(c) == total)),
             "n %d of %d prompts accepted as parallel %d with %d branches", c->n_choices,
             c->n_prompts, c->parallel, c->max_branches);
    FZ_CHECK(c->n_prompts >= 1 && c->n_prompts <= SRV_MAX_CHOICES, "%d prompts", c->n_prompts);
    for (int k = 0; k < c->n_prompts; k++) {
        const srv_prompt *p = &c->prompts[k];
        FZ_CHECK(!p->text != !p->ids, "prompt %d with %s", k, p->text ? "a text and ids" : "none");
        if (p->text) {
            FZ_CHECK(p->len >= 1 && strlen(p->text) == p->len, "prompt %d of %zu bytes (strlen "
                     "%zu)", k, p->len, strlen(p->text));
            FZ_CHECK(fz_utf8_ok((const unsigned char *)p->text, p->len), "prompt %d is not UTF-8",
                     k);
        } else {
            FZ_CHECK(p->n_ids >= 1, "prompt %d has no ids", k);
            for (size_t i = 0; i < p->n_ids; i++)
                FZ_CHECK(p->ids[i] >= 0, "prompt %d id %zu is %d", k, i, (int)p->ids[i]);
        }
    }
    fz_check_sampling(c, L);
}

void fz_tokenize_completion(const fl_tokenizer *tok, const srv_chat *c)
{
    for (int k = 0; k < c->n_prompts; k++)
        if (c->prompts[k].text)
            FZ_CHECK(fz_tokenize_roundtrip(tok, c->prompts[k].text, c->prompts[k].len) == 0,
                     "accepted prompt %d fails to tokenize", k);
}
