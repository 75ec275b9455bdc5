/* test_tokenizer_chat.c: template recognition (fogline's exact text in any formatting, Qwen3's,
 * Qwen2.5's and Qwen2's ChatML with their default system prompts; others not), and the renderers
 * where the byte-for-byte parity test (tests/node/tok_chat.mjs) cannot reach: Python's
 * str.strip('\n') in Qwen3's reasoning split (@huggingface/jinja trims all whitespace there),
 * roles a template does not know, tool messages, an empty conversation. Expected strings are
 * worked out by hand from the templates. */
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
    fl_chat_msg c[] = {{"user", "q"}, {"tool", "{}"}};
    s = render(q3, NULL, c, 2, false, true, &rc, msg);
    CHECK(!s && rc == FL_EUNSUPPORTED && strstr(msg, "tool"), "tool message: %d %s", rc, msg);
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

int main(void)
{
    test_detect();
    test_render();
    return check_summary("test_tokenizer_chat");
}
