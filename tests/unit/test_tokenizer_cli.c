/* test_tokenizer_cli.c: `fogline tokenize` on good and bad input: answers per line, a bad line
 * stops it with exit status 1 and one line on stderr naming the line (the lines before it are
 * answered), usage errors exit 2, a missing model directory or tokenizer.json exits 1. */
#include <sys/wait.h>

#include "check.h"
#include "test_tokenizer_fixture.h"

static char out[65536], err[4096];

/* Runs `fogline tokenize ARGS < input` in dir; returns the exit status, fills out and err. */
static int run(const char *dir, const char *args, const char *input)
{
    const char *bin = getenv("FL_BIN");
    if (!bin) {
        fprintf(stderr, "FL_BIN is not set (ctest sets it)\n");
        exit(1);
    }
    fx_write(dir, "in", input);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' tokenize %s < '%s/in' > '%s/out' 2> '%s/err'", bin, args, dir, dir, dir);
    int st = system(cmd);
    char path[600];
    snprintf(path, sizeof path, "%s/out", dir);
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
    out[n] = 0;
    if (f)
        fclose(f);
    snprintf(path, sizeof path, "%s/err", dir);
    f = fopen(path, "rb");
    n = f ? fread(err, 1, sizeof err - 1, f) : 0;
    err[n] = 0;
    if (f)
        fclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

#define EXPECT_ERR(status, want_status, needle, what)                                            \
    CHECK((status) == (want_status) && strstr(err, needle) && lines(err) == 1,                   \
          "%s: status %d (want %d), stderr %s", what, status, want_status, err)

int main(void)
{
    char *d = fx_tiny_dir("{\"chat_template\": \"{% for message in messages %}{{ '<|im_start|>' + "
                          "message['role'] + '\\\\n' + message['content'] + '<|im_end|>' + '\\\\n' }}"
                          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\\\n' }}"
                          "{% endif %}\"}");
    char args[1200];
    int st;

    st = run(d, "--help", "");
    CHECK(st == 0 && strstr(out, "usage: fogline tokenize"), "--help: %d", st);
    st = run(d, "", "");
    EXPECT_ERR(st, 2, "--model", "no --model");
    st = run(d, "--model /nonexistent/fogline/dir", "\"x\"\n");
    EXPECT_ERR(st, 1, "tokenizer.json", "missing model directory");
    snprintf(args, sizeof args, "--model '%s' --frobnicate", d);
    st = run(d, args, "");
    EXPECT_ERR(st, 2, "--frobnicate", "unknown option");
    snprintf(args, sizeof args, "--model '%s' --ids", d);
    st = run(d, args, "");
    EXPECT_ERR(st, 2, "--chat", "--ids without --chat");

    /* encode */
    snprintf(args, sizeof args, "--model '%s'", d);
    st = run(d, args, "\"hello world\"\n\"<|im_start|>hi\"\n\"\"\n");
    CHECK(st == 0 && !strcmp(out, "[259,261,114,108,100]\n[300,104,105]\n[]\n"), "encode: %d %s", st, out);
    snprintf(args, sizeof args, "--model '%s' --no-special", d);
    st = run(d, args, "\"<|im_end|>\"\n");
    CHECK(st == 0 && !strcmp(out, "[60,124,105,109,95,101,110,100,124,62]\n"), "--no-special: %s", out);
    snprintf(args, sizeof args, "--model '%s'", d);
    st = run(d, args, "\"hello\"\n{not json\n\"never\"\n");
    EXPECT_ERR(st, 1, "line 2", "invalid JSON line");
    CHECK(!strcmp(out, "[259]\n"), "the line before the bad one is answered: %s", out);
    st = run(d, args, "42\n");
    EXPECT_ERR(st, 1, "line 1: expected a JSON string", "a number to encode");
    st = run(d, args, "\n");
    EXPECT_ERR(st, 1, "line 1", "an empty line");

    /* decode */
    snprintf(args, sizeof args, "--model '%s' --decode", d);
    st = run(d, args, "[259,261,114,108,100]\n[300,259,301]\n[228,189]\n");
    CHECK(st == 0 && !strcmp(out, "\"hello world\"\n\"<|im_start|>hello<|im_end|>\"\n\"\xef\xbf\xbd\"\n"),
          "decode: %d %s", st, out);
    snprintf(args, sizeof args, "--model '%s' --decode --skip-special", d);
    st = run(d, args, "[300,259,301]\n");
    CHECK(st == 0 && !strcmp(out, "\"hello\"\n"), "--skip-special: %s", out);
    snprintf(args, sizeof args, "--model '%s' --decode", d);
    st = run(d, args, "[259, -1]\n");
    EXPECT_ERR(st, 1, "element 1", "a negative id");
    st = run(d, args, "[\"x\"]\n");
    EXPECT_ERR(st, 1, "element 0", "a string id");
    st = run(d, args, "\"text\"\n");
    EXPECT_ERR(st, 1, "array", "a string to decode");

    /* chat */
    snprintf(args, sizeof args, "--model '%s' --chat --add-generation-prompt", d);
    st = run(d, args, "[{\"role\":\"user\",\"content\":\"hi\"}]\n"
                      "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"add_generation_prompt\":false}\n");
    CHECK(st == 0 && !strcmp(out, "\"<|im_start|>user\\nhi<|im_end|>\\n<|im_start|>assistant\\n\"\n"
                                  "\"<|im_start|>user\\nhi<|im_end|>\\n\"\n"),
          "chat: %d %s", st, out);
    snprintf(args, sizeof args, "--model '%s' --chat --ids", d);
    st = run(d, args, "[{\"role\":\"user\",\"content\":\"hello\"}]\n");
    CHECK(st == 0 && !strcmp(out, "[300,117,115,101,114,10,259,301,10]\n"), "chat ids: %s", out);
    snprintf(args, sizeof args, "--model '%s' --chat", d);
    st = run(d, args, "[{\"role\":\"user\"}]\n");
    EXPECT_ERR(st, 1, "content", "a message without content");
    st = run(d, args, "[{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[]}]\n");
    EXPECT_ERR(st, 1, "tool_calls", "tool calls");
    st = run(d, args, "{\"messages\":[],\"add_generation_prompt\":\"yes\"}\n");
    EXPECT_ERR(st, 1, "add_generation_prompt", "a non-boolean option");
    /* ling: tools, tool calls, a tool's null content */
    snprintf(args, sizeof args, "--model '%s' --chat --chat-template ling", d);
    st = run(d, args, "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\","
                      "\"content\":null,\"tool_calls\":[{\"name\":\"f\",\"arguments\":{\"a\":1}}]},"
                      "{\"role\":\"tool\",\"content\":null}],\"tools\":null}\n");
    CHECK(st == 0 && !strcmp(out, "\"<role>SYSTEM</role>detailed thinking off<|role_end|><role>HUMAN</role>q"
                                  "<|role_end|><role>ASSISTANT</role><tool_call>\\n{\\\"name\\\": \\\"f\\\", "
                                  "\\\"arguments\\\": {\\\"a\\\": 1}}\\n</tool_call><|role_end|>"
                                  "<role>OBSERVATION</role>\\n<tool_response>\\n\\n</tool_response><|role_end|>\"\n"),
          "ling with tools: %d %s %s", st, out, err);
    st = run(d, args, "[{\"role\":\"user\",\"content\":null}]\n");
    EXPECT_ERR(st, 1, "line 1: message 0: needs a string \"role\" and a string \"content\"\n", "a user's null content");
    st = run(d, args, "[{\"role\":\"assistant\",\"content\":\"a\",\"reasoning_content\":7}]\n");
    EXPECT_ERR(st, 1, "line 1: message 0: \"reasoning_content\" must be a string (without NUL) or null\n",
               "a number as reasoning_content");
    st = run(d, args, "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"tools\":[0.5]}\n");
    EXPECT_ERR(st, 1, "line 1: tools: numbers with a fraction", "a float in tools");
    snprintf(args, sizeof args, "--model '%s' --chat --chat-template qwen9", d);
    st = run(d, args, "[]\n");
    EXPECT_ERR(st, 1, "qwen9", "an unknown --chat-template");
    fx_rmdir(d);

    d = fx_tiny_dir(NULL);
    snprintf(args, sizeof args, "--model '%s' --chat", d);
    st = run(d, args, "[{\"role\":\"user\",\"content\":\"hi\"}]\n");
    EXPECT_ERR(st, 1, "--chat-template", "chat without a template");
    fx_rmdir(d);
    return check_summary("test_tokenizer_cli");
}
