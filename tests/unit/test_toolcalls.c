/* test_toolcalls.c: tool calls found in a reply's text (server/toolcalls.c): whole replies and
 * the same replies cut into commits at every byte, which must give the same content and calls. */
#include <jansson.h>
#include <string.h>

#include "check.h"
#include "toolcalls.h"

typedef struct result {
    fl_buf content;
    json_t *calls;
    int dropped;
} result;

static int g_max;     /* srv_tools.max_calls of the next expect()s (parallel_tool_calls false: 1) */
static int g_dropped; /* the calls they must drop */

/* text fed in pieces of `step` bytes (0: at once) */
static void run(const char *text, size_t step, result *r)
{
    srv_tools t;
    srv_tools_init(&t, true, 42);
    t.max_calls = g_max;
    memset(&r->content, 0, sizeof r->content);
    r->calls = json_array();
    size_t n = strlen(text);
    if (!step)
        step = n ? n : 1;
    for (size_t i = 0; i < n; i += step)
        srv_tools_push(&t, text + i, n - i < step ? n - i : step, &r->content, r->calls);
    srv_tools_finish(&t, &r->content, r->calls);
    r->dropped = t.n_dropped;
    srv_tools_free(&t);
}

static void expect(const char *text, const char *content, int n_calls, const char *name0,
                   const char *args0)
{
    for (size_t step = 0; step <= strlen(text); step++) {
        result r;
        run(text, step, &r);
        const char *got = r.content.data ? r.content.data : "";
        CHECK(r.content.len == strlen(content) && !memcmp(got, content, r.content.len),
              "%s (step %zu): content \"%.*s\", want \"%s\"", text, step, (int)r.content.len, got,
              content);
        CHECK((int)json_array_size(r.calls) == n_calls, "%s (step %zu): %zu calls, want %d", text,
              step, json_array_size(r.calls), n_calls);
        CHECK(r.dropped == g_dropped, "%s (step %zu, at most %d calls): %d dropped, want %d", text,
              step, g_max, r.dropped, g_dropped);
        if (n_calls && json_array_size(r.calls)) {
            const json_t *c = json_array_get(r.calls, 0);
            const json_t *f = json_object_get(c, "function");
            CHECK(!strcmp(json_string_value(json_object_get(f, "name")), name0), "%s: name", text);
            CHECK(!strcmp(json_string_value(json_object_get(f, "arguments")), args0),
                  "%s: arguments %s, want %s", text,
                  json_string_value(json_object_get(f, "arguments")), args0);
            CHECK(json_integer_value(json_object_get(c, "index")) == 0, "index");
            CHECK(!strncmp(json_string_value(json_object_get(c, "id")), "call_", 5), "id");
            CHECK(!strcmp(json_string_value(json_object_get(c, "type")), "function"), "type");
        }
        json_decref(r.calls);
        fl_buf_free(&r.content);
    }
}

int main(void)
{
    /* no calls: the text exactly, whitespace and look-alikes included */
    expect("Hello there.\n\n", "Hello there.\n\n", 0, NULL, NULL);
    expect("", "", 0, NULL, NULL);
    expect("a <tool_cal b", "a <tool_cal b", 0, NULL, NULL);
    expect("ends with <tool_", "ends with <tool_", 0, NULL, NULL);
    /* one call, the template's form */
    expect("<tool_call>\n{\"name\": \"get_order\", \"arguments\": {\"id\": 12}}\n</tool_call>", "", 1,
           "get_order", "{\"id\": 12}");
    /* arguments as written: whitespace, key order, a number beyond 64 bits */
    expect("<tool_call>{ \"arguments\" :{\"n\": 123456789012345678901234567890 ,\"s\":\"}\\\"\"} , \"name\":\"f\"}</tool_call>", "", 1,
           "f", "{\"n\": 123456789012345678901234567890 ,\"s\":\"}\\\"\"}");
    /* content before, whitespace around and between, two calls */
    expect("Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n"
           "<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": [1, \"y\"]}}\n</tool_call>\n",
           "Let me check.", 2, "a", "{}");
    /* not a call: written as it was */
    expect("<tool_call>not json</tool_call> ok", "<tool_call>not json</tool_call> ok", 0, NULL, NULL);
    expect("<tool_call>{\"name\": 3, \"arguments\": {}}</tool_call>",
           "<tool_call>{\"name\": 3, \"arguments\": {}}</tool_call>", 0, NULL, NULL);
    /* cut off by the reply's end: text */
    expect("x <tool_call>\n{\"name\": \"a\", \"argu", "x <tool_call>\n{\"name\": \"a\", \"argu", 0,
           NULL, NULL);
    /* a string argument may hold the close tag (a constrained call can write one): the text up
       to a close tag that is an object not yet closed goes on to the next close tag */
    expect("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"s\": \"a</tool_call>b\"}}\n</tool_call>", "",
           1, "f", "{\"s\": \"a</tool_call>b\"}");
    expect("<tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"</tool_call></tool_call>\"}}</tool_call> done",
           "done", 1, "f", "{\"s\": \"</tool_call></tool_call>\"}");
    /* ... and when no later close tag makes it a call, the block up to its first close tag is
       text, and what follows is read again (a call in it is a call) */
    expect("<tool_call>{\"name\": \"a\", \"arguments\": {}</tool_call>\n<tool_call>{\"name\": \"b\", "
           "\"arguments\": {}}</tool_call>",
           "<tool_call>{\"name\": \"a\", \"arguments\": {}</tool_call>", 1, "b", "{}");
    expect("<tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"</tool_call> tail",
           "<tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"</tool_call> tail", 0, NULL, NULL);
    expect("<tool_call>{\"name\": \"f\", \"arguments\": {}} x</tool_call> y</tool_call>",
           "<tool_call>{\"name\": \"f\", \"arguments\": {}} x</tool_call> y</tool_call>", 0, NULL, NULL);
    /* a key written twice is no call: jansson would keep the last, the arguments' text is the
       first */
    expect("<tool_call>{\"name\": \"f\", \"arguments\": \"x\", \"arguments\": {}}</tool_call>",
           "<tool_call>{\"name\": \"f\", \"arguments\": \"x\", \"arguments\": {}}</tool_call>", 0, NULL, NULL);
    expect("<tool_call>{\"name\": \"f\", \"name\": \"g\", \"arguments\": {}}</tool_call>",
           "<tool_call>{\"name\": \"f\", \"name\": \"g\", \"arguments\": {}}</tool_call>", 0, NULL, NULL);
    /* whitespace after a call is not content, however the commits cut it */
    expect("<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n\n Done.", "Done.", 1, "a", "{}");
    expect("Hi <tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call> \n<tool_call>{\"name\": \"b\", "
           "\"arguments\": {}}</tool_call>\n ok", "Hiok", 2, "a", "{}");
    /* parallel_tool_calls false (at most one call): the first well-formed call is kept, those
       after it dropped, neither calls nor content, and the whitespace next to them is not
       content either; a block that is no call does not count */
    g_max = 1, g_dropped = 1;
    expect("Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n"
           "<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": [1, \"y\"]}}\n</tool_call>\n",
           "Let me check.", 1, "a", "{}");
    expect("Hi <tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call> \n<tool_call>{\"name\": \"b\", "
           "\"arguments\": {}}</tool_call>\n ok", "Hiok", 1, "a", "{}");
    g_dropped = 2;
    expect("<tool_call>{\"name\": \"a\", \"arguments\": {\"n\": 1}}</tool_call><tool_call>{\"name\": \"a\", "
           "\"arguments\": {\"n\": 2}}</tool_call><tool_call>{\"name\": \"c\", \"arguments\": {}}</tool_call>",
           "", 1, "a", "{\"n\": 1}");
    g_dropped = 0;
    expect("<tool_call>{\"name\": \"a\", \"arguments\": {}</tool_call>\n<tool_call>{\"name\": \"b\", "
           "\"arguments\": {}}</tool_call>",
           "<tool_call>{\"name\": \"a\", \"arguments\": {}</tool_call>", 1, "b", "{}");
    expect("<tool_call>\n{\"name\": \"get_order\", \"arguments\": {\"id\": 12}}\n</tool_call>", "", 1,
           "get_order", "{\"id\": 12}");
    g_max = 0;
    /* off: everything is content */
    {
        srv_tools t;
        srv_tools_init(&t, false, 1);
        fl_buf c = {0};
        json_t *calls = json_array();
        const char *s = "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>";
        srv_tools_push(&t, s, strlen(s), &c, calls);
        srv_tools_finish(&t, &c, calls);
        CHECK(c.len == strlen(s) && json_array_size(calls) == 0, "off");
        fl_buf_free(&c);
        json_decref(calls);
        srv_tools_free(&t);
    }
    return check_summary("test_toolcalls");
}
