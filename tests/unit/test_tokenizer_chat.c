/* test_tokenizer_chat.c: template recognition (fogline's and LLaDA2's Ling template's exact text
 * in any formatting, Qwen3's, Qwen2.5's and Qwen2's ChatML with their default system prompts;
 * others not), and the renderers where the byte-for-byte parity test (tests/node/tok_chat.mjs)
 * cannot reach: Python's str.strip('\n') in Qwen3's and Ling's reasoning split (@huggingface/jinja
 * trims all whitespace there), roles a template does not know, tool messages, an empty
 * conversation, and the tool JSON the ling renderer refuses because Python and JavaScript print
 * it differently. Expected strings are worked out by hand from the templates. */
#include "check.h"
#include "test_tokenizer_fixture.h"
#include "tokenizer/tokenizer.h"

static const char FOGLINE[] =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% endif %}";

static char *read_text(const char *path)
{
    char *s = NULL;
    size_t n;
    fl_err e = {0};
    if (fl_read_file(path, &s, &n, &e))
        fprintf(stderr, "%s\n", e.msg);
    return s;
}

/* The "chat_template" string of a tokenizer_config.json (enough JSON for the real file). */
static char *config_template(const char *path)
{
    char *cfg = read_text(path);
    if (!cfg)
        return NULL;
    char *p = strstr(cfg, "\"chat_template\"");
    char *q = p ? strchr(p + 15, '"') : NULL;
    fl_buf b = {0};
    for (q = q ? q + 1 : NULL; q && *q && *q != '"'; q++) {
        char c = *q;
        if (c == '\\') {
            c = *++q;
            c = c == 'n' ? '\n' : c == 't' ? '\t' : c;
        }
        fl_buf_append(&b, &c, 1);
    }
    fl_buf_append(&b, "", 0);
    free(cfg);
    return b.data;
}

/* s with every `from` replaced by `to`; malloc'd. */
static char *replace_all(const char *s, const char *from, const char *to)
{
    fl_buf b = {0};
    size_t fn = strlen(from);
    for (const char *p = s, *q; *p; p = q + fn) {
        q = strstr(p, from);
        if (!q) {
            fl_buf_puts(&b, p);
            break;
        }
        fl_buf_append(&b, p, (size_t)(q - p));
        fl_buf_puts(&b, to);
    }
    fl_buf_append(&b, "", 0);
    return b.data;
}

static char *ling_fixture(void)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/data/tokenizer/llada2_chat.jinja", check_tests_dir());
    return read_text(path);
}

static void test_detect_ling(void)
{
    char *t = ling_fixture();
    CHECK(t && fl_chat_detect(t) == FL_CHAT_LING, "LLaDA2's (Ling 2.0's) template");
    if (!t)
        return;
    /* no indentation (every line starts with a trimming tag) and another quote style */
    char *a = replace_all(t, "\n    ", "\n");
    char *b = replace_all(a, "'<role>HUMAN</role>'", "\"<role>HUMAN</role>\"");
    CHECK(fl_chat_detect(b) == FL_CHAT_LING, "Ling's template reformatted");
    free(a);
    free(b);
    a = replace_all(t, "thinking_option = 'off'", "thinking_option = 'on'");
    CHECK(fl_chat_detect(a) == FL_CHAT_NONE, "thinking on is another template");
    free(a);
    /* without the '-' the newline after the first tag is printed */
    a = replace_all(t, "{%- if messages[0].role == 'system' %}", "{% if messages[0].role == 'system' %}");
    CHECK(fl_chat_detect(a) == FL_CHAT_NONE, "a printed newline is another template");
    free(a);
    /* Ling 2.0's pretraining tokenizer_config.json carries this one */
    CHECK(fl_chat_detect("{% for message in messages %}{% set role = message['role'] | lower %}{% if role == "
                         "'user' %}{% set role = 'HUMAN' %}{% endif %}{% set role = role | upper %}{{ '<role>' + "
                         "role + '</role>' + message['content'] }}{% endfor %}{% if add_generation_prompt %}{{ "
                         "'<role>ASSISTANT</role>' }}{% endif %}") == FL_CHAT_NONE,
          "Ling's pretraining template is not the chat one");
    free(t);
}

static void test_detect(void)
{
    CHECK(fl_chat_detect(FOGLINE) == FL_CHAT_FOGLINE, "fogline's template");
    CHECK(fl_chat_detect("{%- for message in messages -%}\n  {{- '<|im_start|>' + message['role'] + \"\\n\" + "
                         "message['content'] + '<|im_end|>' + '\\n' -}}\n{%- endfor -%}\n{%- if "
                         "add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}\n") ==
              FL_CHAT_FOGLINE,
          "fogline's template reformatted");
    CHECK(fl_chat_detect("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n ' + "
                         "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt "
                         "%}{{ '<|im_start|>assistant\\n' }}{% endif %}") == FL_CHAT_NONE,
          "one more space in a literal is another template");
    CHECK(fl_chat_detect("{% for message in messages %}\n{{ '<|im_start|>' + message['role'] + '\\n' + "
                         "message['content'] + '<|im_end|>' + '\\n' }}\n{% endfor %}{% if "
                         "add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}") == FL_CHAT_NONE,
          "a newline printed after each turn is another template");
    CHECK(fl_chat_detect("{% for m in messages %}{{ m.content }}{% endfor %}") == FL_CHAT_NONE, "generic");
    CHECK(fl_chat_detect("") == FL_CHAT_NONE && fl_chat_detect(NULL) == FL_CHAT_NONE, "empty");

    char path[1200];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", fx_qwen3_dir());
    char *q3 = config_template(path);
    CHECK(q3 && fl_chat_detect(q3) == FL_CHAT_QWEN3, "Qwen3's real template");
    free(q3);
    snprintf(path, sizeof path, "%s/data/tokenizer/qwen25_instruct.jinja",
             getenv("FL_TESTS_DIR") ? getenv("FL_TESTS_DIR") : "tests");
    char *q25 = read_text(path);
    CHECK(q25 && fl_chat_detect(q25) == FL_CHAT_CHATML, "Qwen2.5's template");
    free(q25);
    /* Qwen2-Instruct's one-line ChatML */
    static const char qwen2[] =
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
        "'<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + "
        "message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if "
        "add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
    CHECK(fl_chat_detect(qwen2) == FL_CHAT_CHATML, "Qwen2's template");
}

static char *render(const char *dir, const char *override, const fl_chat_msg *m, size_t n, bool agp,
                    bool think, int *rc_out, char *msg)
{
    fl_tokenizer *t;
    fl_err e = {0};
    if (fl_tokenizer_load(&t, dir, override, &e)) {
        fprintf(stderr, "load: %s\n", e.msg);
        *rc_out = -100;
        return NULL;
    }
    fl_chat_opts o = {agp, think};
    fl_buf out = {0};
    *rc_out = fl_chat_render(t, m, n, &o, &out, &e);
    if (msg)
        snprintf(msg, FL_ERR_MSG, "%s", e.msg);
    fl_tokenizer_free(t);
    if (*rc_out) {
        fl_buf_free(&out);
        return NULL;
    }
    return out.data;
}

static void test_render(void)
{
    int rc;
    char msg[FL_ERR_MSG];
    const char *q3 = fx_qwen3_dir();
    /* Python's strip('\n') keeps the spaces that @huggingface/jinja's strip() would also trim */
    fl_chat_msg a[] = {{"user", "q"}, {"assistant", "<think>\n  r  \n</think>\n\n  ans "}};
    char *s = render(q3, NULL, a, 2, false, true, &rc, NULL);
    CHECK(s && !strcmp(s, "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n  r  \n</think>\n\n"
                          "  ans <|im_end|>\n"),
          "Qwen3 reasoning with spaces: %s", s ? s : "(null)");
    free(s);
    /* reasoning before the last user query is dropped; the generation prompt per enable_thinking */
    fl_chat_msg b[] = {{"system", "S"}, {"user", "q1"}, {"assistant", "<think>r1</think>a1"}, {"user", "q2"}};
    s = render(q3, NULL, b, 4, true, false, &rc, NULL);
    CHECK(s && !strcmp(s, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nq1<|im_end|>\n<|im_start|>"
                          "assistant\na1<|im_end|>\n<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n"
                          "<think>\n\n</think>\n\n"),
          "Qwen3 history: %s", s ? s : "(null)");
    free(s);
    s = render(q3, NULL, b, 4, true, true, &rc, NULL);
    CHECK(s && strlen(s) > 22 && !strcmp(s + strlen(s) - 22, "<|im_start|>assistant\n"),
          "Qwen3 enable_thinking: no empty think block");
    free(s);
    /* errors */
    /* Qwen3's template has tool syntax: a tool result is a user turn of its own */
    fl_chat_msg c[] = {{"user", "q"}, {"tool", "{}"}};
    s = render(q3, NULL, c, 2, false, true, &rc, msg);
    CHECK(s && !strcmp(s, "<|im_start|>user\nq<|im_end|>\n<|im_start|>user\n<tool_response>\n{}\n"
                          "</tool_response><|im_end|>\n"),
          "tool message: %d %s", rc, s ? s : msg);
    free(s);
    fl_chat_msg d[] = {{"user", "q"}, {"developer", "x"}};
    s = render(q3, NULL, d, 2, false, true, &rc, msg);
    CHECK(!s && rc == FL_EINVAL && strstr(msg, "developer"), "unknown role: %d %s", rc, msg);
    s = render(q3, NULL, d, 0, false, true, &rc, msg);
    CHECK(!s && rc == FL_EINVAL && strstr(msg, "no messages"), "empty conversation: %d %s", rc, msg);

    /* ChatML: the template's own default system prompt; fogline: any role as written */
    char *dir = fx_tiny_dir("{\"chat_template\": \"{% for message in messages %}{% if loop.first and "
                            "messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\\\nBe brief.<|im_end|>"
                            "\\\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\\\n' + "
                            "message['content'] + '<|im_end|>' + '\\\\n'}}{% endfor %}{% if "
                            "add_generation_prompt %}{{ '<|im_start|>assistant\\\\n' }}{% endif %}\"}");
    fl_chat_msg u[] = {{"user", "hi"}};
    s = render(dir, NULL, u, 1, true, true, &rc, msg);
    CHECK(s && !strcmp(s, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
                          "<|im_start|>assistant\n"),
          "ChatML default system prompt from the template: %s", s ? s : msg);
    free(s);
    s = render(dir, "fogline", d, 2, false, true, &rc, msg);
    CHECK(s && !strcmp(s, "<|im_start|>user\nq<|im_end|>\n<|im_start|>developer\nx<|im_end|>\n"),
          "fogline renders any role: %s", s ? s : msg);
    free(s);
    fx_rmdir(dir);
}

/* A tokenizer directory (the tiny BPE) whose tokenizer_config.json carries Ling's template. */
static char *ling_dir(void)
{
    char *t = ling_fixture();
    if (!t)
        return NULL;
    fl_buf c = {0};
    fl_buf_puts(&c, "{\"chat_template\": \"");
    for (const char *p = t; *p; p++) {
        if (*p == '"' || *p == '\\')
            fl_buf_printf(&c, "\\%c", *p);
        else if (*p == '\n')
            fl_buf_puts(&c, "\\n");
        else
            fl_buf_append(&c, p, 1);
    }
    fl_buf_puts(&c, "\"}");
    char *d = fx_tiny_dir(c.data);
    fl_buf_free(&c);
    free(t);
    return d;
}

/* Renders with extra into a buffer that already holds "X" (an error must leave it so). */
static char *render_x(const fl_tokenizer *t, const fl_chat_msg *m, size_t n, bool agp, bool think,
                      const fl_chat_extra *x, int *rc, char *msg)
{
    fl_chat_opts o = {agp, think};
    fl_buf out = {0};
    fl_buf_puts(&out, "X");
    fl_err e = {0};
    *rc = fl_chat_render_extra(t, m, n, &o, x, &out, &e);
    snprintf(msg, FL_ERR_MSG, "%s", e.msg);
    if (*rc) {
        CHECK(out.len == 1 && !strcmp(out.data, "X"), "an error leaves the output as it was: %s", out.data);
        fl_buf_free(&out);
        return NULL;
    }
    char *r = strdup(out.data + 1);
    fl_buf_free(&out);
    return r;
}

#define LING_HEAD "<role>SYSTEM</role>detailed thinking off<|role_end|>"

static void test_ling(void)
{
    char *d = ling_dir();
    fl_tokenizer *t = NULL;
    fl_err e = {0};
    CHECK(d && fl_tokenizer_load(&t, d, NULL, &e) == 0, "load: %s", e.msg);
    if (!t) {
        if (d)
            fx_rmdir(d);
        return;
    }
    CHECK(fl_tokenizer_chat_kind(t) == FL_CHAT_LING && !strcmp(fl_chat_kind_name(FL_CHAT_LING), "ling"),
          "the kind is ling");
    int rc;
    char msg[FL_ERR_MSG];

    /* thinking is off whatever enable_thinking says */
    fl_chat_msg a[] = {{"user", "hi"}};
    char *s1 = render_x(t, a, 1, true, true, NULL, &rc, msg);
    char *s2 = render_x(t, a, 1, true, false, NULL, &rc, msg);
    CHECK(s1 && s2 && !strcmp(s1, LING_HEAD "<role>HUMAN</role>hi<|role_end|><role>ASSISTANT</role>") &&
              !strcmp(s1, s2),
          "generation prompt, thinking off either way: %s", s1 ? s1 : msg);
    free(s1);
    free(s2);

    /* Python's strip('\n') keeps the spaces that @huggingface/jinja's strip() trims too */
    fl_chat_msg b[] = {{"system", " S "}, {"user", "q"}, {"assistant", "<think>\n  r  \n</think>\n\n  ans "}};
    char *s = render_x(t, b, 3, false, true, NULL, &rc, msg);
    CHECK(s && !strcmp(s, "<role>SYSTEM</role> S \ndetailed thinking off<|role_end|><role>HUMAN</role>q<|role_end|>"
                          "<role>ASSISTANT</role>\n<think>\n  r  \n</think>\n\n  ans <|role_end|>"),
          "reasoning with spaces: %s", s ? s : msg);
    free(s);
    const char *rs[] = {NULL, NULL, "\n\t r\n"};
    fl_chat_msg b2[] = {{"system", " S "}, {"user", "q"}, {"assistant", "\n ans"}};
    fl_chat_extra xr = {NULL, NULL, rs};
    s = render_x(t, b2, 3, false, true, &xr, &rc, msg);
    CHECK(s && !strcmp(s, "<role>SYSTEM</role> S \ndetailed thinking off<|role_end|><role>HUMAN</role>q<|role_end|>"
                          "<role>ASSISTANT</role>\n<think>\n\t r\n</think>\n\n ans<|role_end|>"),
          "reasoning_content with a tab: %s", s ? s : msg);
    free(s);

    /* tool JSON that both print alike: integer-like keys first and in order, 2^53, escapes */
    fl_chat_extra xt = {.tools = "[{\"0\":1,\"7\":[9007199254740992,-9007199254740992],\"a\":\"\\u001f\\\"/\\n\\u00e9\"}]"};
    s = render_x(t, a, 1, false, true, &xt, &rc, msg);
    CHECK(s && strstr(s, "<tools>\n{\"0\": 1, \"7\": [9007199254740992, -9007199254740992], \"a\": "
                         "\"\\u001f\\\"/\\n\xc3\xa9\"}\n</tools>"),
          "tools: %s", s ? s : msg);
    free(s);
    fl_chat_extra xe = {.tools = "[]"};
    s = render_x(t, a, 1, false, true, &xe, &rc, msg);
    CHECK(s && !strcmp(s, LING_HEAD "<role>HUMAN</role>hi<|role_end|>"), "an empty tool list writes nothing: %s",
          s ? s : msg);
    free(s);

    /* what is refused, in one line, with nothing written */
    static const struct {
        const char *tools, *calls, *role, *want;
        int code;
    } bad[] = {
        {"[{\"x\": 1.5}]", NULL, NULL, "tools: numbers with a fraction or an exponent or beyond 2^53 are not "
         "supported by the built-in chat renderers (Python and JavaScript print them differently)", FL_EUNSUPPORTED},
        {"[{\"x\": 1e3}]", NULL, NULL, "tools: numbers with a fraction or an exponent or beyond 2^53 are not "
         "supported by the built-in chat renderers (Python and JavaScript print them differently)", FL_EUNSUPPORTED},
        {"[9007199254740993]", NULL, NULL, "tools: numbers with a fraction or an exponent or beyond 2^53 are not "
         "supported by the built-in chat renderers (Python and JavaScript print them differently)", FL_EUNSUPPORTED},
        {"[{\"a\": 1, \"2\": 2}]", NULL, NULL, "tools: the integer-like key \"2\" is not first and in order, "
         "which JavaScript would change (not supported by the built-in chat renderers)", FL_EUNSUPPORTED},
        {"[{\"10\": 1, \"2\": 2}]", NULL, NULL, "tools: the integer-like key \"2\" is not first and in order, "
         "which JavaScript would change (not supported by the built-in chat renderers)", FL_EUNSUPPORTED},
        {"[{\"k\": 1, \"k\": 2}]", NULL, NULL, "tools: the key \"k\" appears twice (not supported by the "
         "built-in chat renderers)", FL_EUNSUPPORTED},
        {"[{\"a\\nb\": 1, \"x\": 2, \"a\\nb\": 3}]", NULL, NULL, "tools: the key \"a\" appears twice (not "
         "supported by the built-in chat renderers)", FL_EUNSUPPORTED},
        {"{\"name\": \"f\"}", NULL, NULL, "tools must be a JSON array", FL_EINVAL},
        {"[1,", NULL, NULL, "tools: malformed JSON at line 1 column 4: unexpected end of input", FL_EINVAL},
        {NULL, "{}", NULL, "message 1: tool_calls must be a JSON array", FL_EINVAL},
        {NULL, "[\"f\"]", NULL, "message 1: tool_calls[0] is not an object", FL_EINVAL},
        {NULL, "[{\"function\": {}}]", NULL, "message 1: tool_calls[0]: \"function\" must be a non-empty object",
         FL_EINVAL},
        {NULL, "[{\"function\": {\"arguments\": {}}}]", NULL, "message 1: tool_calls[0] has no string \"name\"",
         FL_EINVAL},
        {NULL, "[{\"name\": \"f\"}]", NULL, "message 1: tool_calls[0] has no \"arguments\"", FL_EINVAL},
        {NULL, "[{\"name\": \"f\", \"arguments\": {\"n\": 0.5}}]", NULL, "message 1: tool_calls[0]: numbers "
         "with a fraction or an exponent or beyond 2^53 are not supported by the built-in chat renderers (Python "
         "and JavaScript print them differently)", FL_EUNSUPPORTED},
        {NULL, NULL, "developer", "message 1: role \"developer\" is not one the ling template knows (system, user, "
         "assistant, tool)", FL_EINVAL},
        {NULL, "[]", "user", "message 1: tool_calls and reasoning_content belong to assistant messages", FL_EINVAL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        fl_chat_msg m[] = {{"user", "q"}, {bad[i].role ? bad[i].role : "assistant", "a"}};
        const char *calls[] = {NULL, bad[i].calls};
        fl_chat_extra x = {bad[i].tools, calls, NULL};
        s = render_x(t, m, 2, true, true, &x, &rc, msg);
        CHECK(!s && rc == bad[i].code && !strcmp(msg, bad[i].want), "refusal %zu: %d %s", i, rc, msg);
        free(s);
    }
    fl_tokenizer_free(t);

    /* a template without tool syntax takes no extras */
    CHECK(fl_tokenizer_load(&t, d, "fogline", &e) == 0, "load fogline: %s", e.msg);
    fl_chat_extra xq = {.tools = "[]"};
    s = render_x(t, a, 1, true, true, &xq, &rc, msg);
    CHECK(!s && rc == FL_EUNSUPPORTED && !strcmp(msg, "tools, tool_calls and reasoning_content are not supported by "
                                                      "this model's chat template (the built-in fogline renderer)"),
          "fogline with tools: %d %s", rc, msg);
    CHECK(!fl_chat_takes_tools(t), "fogline takes no tools");
    fl_tokenizer_free(t);
    CHECK(fl_tokenizer_load(&t, d, "ling", &e) == 0 && fl_tokenizer_chat_kind(t) == FL_CHAT_LING,
          "the ling override: %s", e.msg);
    fl_tokenizer_free(t);
    fx_rmdir(d);
}

/* Qwen3's and Qwen2.5's renderers refuse what an assistant's tool calls hold that Python and
   JavaScript print differently with the same message as Ling's, not as "out of memory" */
static void test_qwen_tool_call_refusal(void)
{
    static const char *const kinds[] = {"qwen3", "chatml"};
    for (size_t k = 0; k < 2; k++) {
        fl_tokenizer *t = NULL;
        fl_err e = {0};
        CHECK(fl_tokenizer_load(&t, fx_qwen3_dir(), kinds[k], &e) == 0, "load %s: %s", kinds[k], e.msg);
        if (!t)
            continue;
        fl_chat_msg m[] = {{"user", "q"}, {"assistant", ""}, {"tool", "ok"}};
        const char *calls[] = {NULL, "[{\"name\": \"f\", \"arguments\": {\"n\": 123456789012345678901234567890}}]",
                               NULL};
        fl_chat_extra x = {NULL, calls, NULL};
        int rc;
        char msg[FL_ERR_MSG];
        char *s = render_x(t, m, 3, true, true, &x, &rc, msg);
        CHECK(!s && rc == FL_EUNSUPPORTED &&
                  !strcmp(msg, "message 1: tool_calls[0]: numbers with a fraction or an exponent or beyond "
                               "2^53 are not supported by the built-in chat renderers (Python and JavaScript "
                               "print them differently)"),
              "%s: %d %s", kinds[k], rc, msg);
        free(s);
        fl_tokenizer_free(t);
    }
}

int main(void)
{
    test_detect();
    test_detect_ling();
    test_render();
    test_ling();
    test_qwen_tool_call_refusal();
    return check_summary("test_tokenizer_chat");
}
