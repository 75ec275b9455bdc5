/* test_tokenizer_errors.c: loading fails with the right code and a clear one-line message for a
 * missing directory or file, malformed JSON, an unknown model type and other unsupported
 * parts, bad merges and ids, a malformed tokenizer_config.json, an unrecognised chat template
 * (naming the --chat-template override) and an unknown override; and succeeds, without a
 * template, when there is none. */
#include "check.h"
#include "test_tokenizer_fixture.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/tokenizer.h"

/* The JSON reader behind the loader (tok_json.c). */
static void test_json(void)
{
    fl__json_doc d;
    char why[256];
    const char *ok = " {\"a\\u00e9\\\"\" : [1, -2, 3.5, 1e3, true, false, null, \"\\ud83d\\ude00\\n\"],"
                     "\"o\": {}, \"e\": [], \"big\": 123456789012} ";
    int rc = fl__json_parse(ok, strlen(ok), &d, why, sizeof why);
    CHECK(rc == 0, "valid JSON: %s", why);
    if (!rc) {
        const fl__json *a = fl__json_get(&d.root, "a\xc3\xa9\"");
        CHECK(a && a->type == FL_JSON_ARRAY && a->n == 8, "escaped key and its array");
        if (a && a->n == 8) {
            CHECK(a->items[0].is_int && a->items[0].i == 1 && a->items[1].i == -2, "integers");
            CHECK(!a->items[2].is_int && a->items[2].num == 3.5 && a->items[3].num == 1000.0, "floats");
            CHECK(a->items[4].type == FL_JSON_TRUE && a->items[5].type == FL_JSON_FALSE &&
                      a->items[6].type == FL_JSON_NULL, "literals");
            CHECK(a->items[7].n == 5 && !strcmp(a->items[7].str, "\xf0\x9f\x98\x80\n"), "surrogate pair");
        }
        CHECK(fl__json_get(&d.root, "big")->i == 123456789012ll, "64-bit integer");
        CHECK(fl__json_get(&d.root, "o")->n == 0 && fl__json_get(&d.root, "e")->n == 0, "empty containers");
        CHECK(!fl__json_get(&d.root, "missing"), "missing key");
        fl__json_free(&d);
    }
    static const char *const bad[] = {
        "", "{", "[1,]", "{\"a\":1,}", "{a:1}", "[01]", "[1.]", "\"\\ud800\"", "\"\\udc00x\"", "\"\\q\"",
        "\"tab\there\"", "[1] 2", "nul", "\"\xff\"", "[\"unterminated]",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rc = fl__json_parse(bad[i], strlen(bad[i]), &d, why, sizeof why);
        CHECK(rc == FL_EFORMAT && strstr(why, "malformed JSON at line 1"), "bad JSON %zu: %d %s", i, rc, why);
    }
    char deep[1200];
    memset(deep, '[', 600);
    memset(deep + 600, ']', 600);
    rc = fl__json_parse(deep, 1200, &d, why, sizeof why);
    CHECK(rc == FL_EFORMAT && strstr(why, "deep"), "nesting limit: %s", why);
    rc = fl__json_parse("{\n\"a\":\n  tru }", 16, &d, why, sizeof why);
    CHECK(rc == FL_EFORMAT && strstr(why, "line 3"), "error line: %s", why);
}

static void expect_fail(const char *dir, const char *override, int code, const char *needle,
                        const char *what)
{
    fl_tokenizer *t = (fl_tokenizer *)1;
    fl_err e = {0};
    int rc = fl_tokenizer_load(&t, dir, override, &e);
    CHECK(rc == code, "%s: code %d, want %d (%s)", what, rc, code, e.msg);
    CHECK(t == NULL, "%s: *out is NULL on failure", what);
    CHECK(strstr(e.msg, needle) != NULL, "%s: message lacks \"%s\": %s", what, needle, e.msg);
    CHECK(!strchr(e.msg, '\n') && e.msg[0], "%s: message is one non-empty line: %s", what, e.msg);
    if (!rc)
        fl_tokenizer_free(t);
}

static void with_json(const char *json, int code, const char *needle, const char *what)
{
    char *d = fx_mkdir();
    fx_write(d, "tokenizer.json", json);
    expect_fail(d, NULL, code, needle, what);
    fx_rmdir(d);
}

static void with_tiny(const char *model_type, const char *top, const char *merges, int code,
                      const char *needle, const char *what)
{
    char *j = fx_tiny_json(model_type, top, merges);
    with_json(j, code, needle, what);
    free(j);
}

#define PRE_OK                                                                                   \
    "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true},"
#define DEC_OK "\"decoder\":{\"type\":\"ByteLevel\"},"

int main(void)
{
    test_json();
    expect_fail("/nonexistent/fogline/model", NULL, FL_ENOTFOUND, "tokenizer.json", "missing directory");
    char *empty = fx_mkdir();
    expect_fail(empty, NULL, FL_ENOTFOUND, "tokenizer.json", "directory without tokenizer.json");
    fx_rmdir(empty);

    with_json("{ \"model\": { \"type\": \"BPE\", ", FL_EFORMAT, "malformed JSON", "truncated JSON");
    with_json("[1, 2, 3]", FL_EFORMAT, "not an object", "top level array");
    with_json("{\"version\":\"1.0\"}", FL_EFORMAT, "model", "no model");
    with_tiny("WordPiece", NULL, NULL, FL_EUNSUPPORTED, "WordPiece", "unknown model type");
    with_tiny("Unigram", NULL, NULL, FL_EUNSUPPORTED, "Unigram", "unigram model");
    with_tiny("BPE", "\"normalizer\":{\"type\":\"Lowercase\"}," PRE_OK DEC_OK, NULL, FL_EUNSUPPORTED,
              "Lowercase", "unsupported normalizer");
    with_tiny("BPE", "\"pre_tokenizer\":{\"type\":\"Whitespace\"}," DEC_OK, NULL, FL_EUNSUPPORTED,
              "Whitespace", "unsupported pre_tokenizer");
    with_tiny("BPE", "\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\s+\"},"
                     "\"behavior\":\"Isolated\"}," DEC_OK, NULL, FL_EUNSUPPORTED, "ByteLevel",
              "no ByteLevel step");
    with_tiny("BPE", "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
                     "\"pattern\":{\"Regex\":\"(unclosed\"},\"behavior\":\"Isolated\"},{\"type\":"
                     "\"ByteLevel\"}]}," DEC_OK, NULL, FL_EFORMAT, "does not compile", "bad regex");
    with_tiny("BPE", "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
                     "\"pattern\":{\"Regex\":\"x\"},\"behavior\":\"Contiguous\"},{\"type\":"
                     "\"ByteLevel\"}]}," DEC_OK, NULL, FL_EUNSUPPORTED, "Contiguous", "split behavior");
    with_tiny("BPE", PRE_OK "\"decoder\":{\"type\":\"WordPiece\"},", NULL, FL_EUNSUPPORTED, "decoder",
              "unsupported decoder");
    with_tiny("BPE", PRE_OK, NULL, FL_EUNSUPPORTED, "decoder", "no decoder");
    with_tiny("BPE", NULL, ",\"zz qq\"", FL_EFORMAT, "merges[6]", "merge of unknown tokens");
    with_tiny("BPE", NULL, ",\"h e l\"", FL_EFORMAT, "merges[6]", "merge with three parts");
    with_tiny("BPE", NULL, ",42", FL_EFORMAT, "merges[6]", "merge that is a number");
    with_json("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-3},\"merges\":[]}," PRE_OK DEC_OK
              "\"added_tokens\":[]}", FL_EFORMAT, "\"a\"", "negative id");
    with_json("{\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]}," PRE_OK DEC_OK
              "\"added_tokens\":[]}", FL_EFORMAT, "empty", "empty vocab");
    with_json("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}," PRE_OK DEC_OK
              "\"added_tokens\":[{\"id\":\"x\",\"content\":\"<s>\"}]}", FL_EFORMAT, "added_tokens[0]",
              "added token without an integer id");

    /* chat templates */
    char *d = fx_tiny_dir("{ not json");
    expect_fail(d, NULL, FL_EFORMAT, "tokenizer_config.json", "malformed tokenizer_config.json");
    fx_rmdir(d);
    d = fx_tiny_dir("{\"chat_template\": \"{{ bos_token }}{% for m in messages %}[INST] {{ m.content }} "
                    "[/INST]{% endfor %}\"}");
    expect_fail(d, NULL, FL_EUNSUPPORTED, "--chat-template chatml|qwen3|fogline|ling", "unrecognised template");
    expect_fail(d, "llama", FL_EINVAL, "chatml", "unknown override");
    fl_tokenizer *t;
    fl_err e = {0};
    CHECK(fl_tokenizer_load(&t, d, "chatml", &e) == 0 && fl_tokenizer_chat_kind(t) == FL_CHAT_CHATML,
          "the override renders an unrecognised template: %s", e.msg);
    fl_tokenizer_free(t);
    fx_rmdir(d);

    d = fx_tiny_dir(NULL); /* no tokenizer_config.json at all */
    CHECK(fl_tokenizer_load(&t, d, NULL, &e) == 0 && fl_tokenizer_chat_kind(t) == FL_CHAT_NONE,
          "no template: loads, kind none: %s", e.msg);
    fl_chat_msg m = {"user", "hi"};
    fl_chat_opts o = {true, true};
    fl_buf out = {0};
    int rc = fl_chat_render(t, &m, 1, &o, &out, &e);
    CHECK(rc == FL_ESTATE && strstr(e.msg, "no chat template") && strstr(e.msg, "--chat-template"),
          "rendering without a template: %d %s", rc, e.msg);
    fl_buf_free(&out);
    fl_tokenizer_free(t);
    fx_rmdir(d);

    d = fx_tiny_dir("{\"eos_token\": \"<|im_end|>\"}"); /* a config without chat_template */
    CHECK(fl_tokenizer_load(&t, d, NULL, &e) == 0 && fl_tokenizer_chat_kind(t) == FL_CHAT_NONE,
          "config without a template: %s", e.msg);
    fl_tokenizer_free(t);
    /* chat_template.jinja beside it is the template */
    fx_write(d, "chat_template.jinja",
             "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
             "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}"
             "{{ '<|im_start|>assistant\\n' }}{% endif %}\n");
    CHECK(fl_tokenizer_load(&t, d, NULL, &e) == 0 && fl_tokenizer_chat_kind(t) == FL_CHAT_FOGLINE,
          "chat_template.jinja: %s", e.msg);
    fl_tokenizer_free(t);
    fx_rmdir(d);

    d = fx_tiny_dir("{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"x\"}]}");
    CHECK(fl_tokenizer_load(&t, d, NULL, &e) == 0 && fl_tokenizer_chat_kind(t) == FL_CHAT_NONE,
          "a template list without \"default\": %s", e.msg);
    rc = fl_chat_render(t, &m, 1, &o, &out, &e);
    CHECK(rc == FL_ESTATE && strstr(e.msg, "default"), "names the missing default: %s", e.msg);
    fl_buf_free(&out);
    fl_tokenizer_free(t);
    fx_rmdir(d);
    return check_summary("test_tokenizer_errors");
}
