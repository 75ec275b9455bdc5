/* cmd_tokenize.c: `fogline tokenize`: encode, decode and render chat templates with a model
 * directory's tokenizer files only (never its weights). One JSON value per line in, one per
 * line out, so that scripts and tests can drive it through pipes. A bad line stops the command
 * with a one-line error naming the line: answers stay aligned with their questions. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tokenizer/tokenizer.h"

typedef enum { MODE_ENCODE = 0, MODE_DECODE, MODE_CHAT } mode_t_;

typedef struct opts {
    const char *model;
    const char *chat_template;
    mode_t_ mode;
    bool ids;           /* --chat --ids */
    bool no_special;
    bool skip_special;
    fl_chat_opts chat;
} opts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: fogline tokenize --model DIR [options] < lines.jsonl\n\n"
            "Reads one JSON value per line on stdin, writes one per line on stdout. Only the\n"
            "tokenizer files of DIR are read (tokenizer.json, tokenizer_config.json,\n"
            "chat_template.jinja), never the weights.\n\n"
            "modes:\n"
            "  (default)                a JSON string -> a JSON array of token ids\n"
            "  --decode                 a JSON array of ids -> the decoded text as a JSON string\n"
            "  --chat                   a JSON array of messages [{\"role\":...,\"content\":...}]\n"
            "                           -> the rendered prompt as a JSON string; a line may also\n"
            "                           be {\"messages\":[...], \"add_generation_prompt\":bool,\n"
            "                           \"enable_thinking\":bool, \"tools\":[...]} to set those for\n"
            "                           that line (tools, and messages' \"tool_calls\" and\n"
            "                           \"reasoning_content\": the ling template only)\n"
            "  --chat --ids             ... -> the rendered prompt's token ids\n\n"
            "options:\n"
            "  --model DIR              the model directory (required)\n"
            "  --no-special             do not match special tokens written in the text\n"
            "  --skip-special           leave special tokens out when decoding\n"
            "  --add-generation-prompt  end a chat with the opening of the assistant's turn\n"
            "  --no-thinking            Qwen3 templates: enable_thinking=false (adds the empty\n"
            "                           think block after the generation prompt)\n"
            "  --enable-thinking        Qwen3 templates: enable_thinking=true (the default)\n"
            "  --chat-template NAME     render with the built-in chatml, qwen3, fogline or ling\n"
            "                           renderer\n"
            "                           instead of recognising the model's template\n"
            "  -h, --help               this text\n\n"
            "Invalid UTF-8 cannot reach the tokenizer through JSON; the library replaces each\n"
            "invalid sequence by U+FFFD (docs/tokenizer.md). A bad line (not JSON, wrong type)\n"
            "stops the command: the lines before it are answered, stderr names the line, and the\n"
            "exit status is 1 (2 for a usage error).\n");
}

static int parse_args(int argc, char **argv, opts *o)
{
    memset(o, 0, sizeof *o);
    o->chat.enable_thinking = true; /* the template's own default: enable_thinking undefined */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(a, "--model") || !strcmp(a, "--chat-template")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "fogline tokenize: %s needs a value (try --help)\n", a);
                return 2;
            }
            if (!strcmp(a, "--model"))
                o->model = argv[++i];
            else
                o->chat_template = argv[++i];
        } else if (!strncmp(a, "--model=", 8))
            o->model = a + 8;
        else if (!strncmp(a, "--chat-template=", 16))
            o->chat_template = a + 16;
        else if (!strcmp(a, "--decode"))
            o->mode = MODE_DECODE;
        else if (!strcmp(a, "--chat"))
            o->mode = MODE_CHAT;
        else if (!strcmp(a, "--ids"))
            o->ids = true;
        else if (!strcmp(a, "--no-special"))
            o->no_special = true;
        else if (!strcmp(a, "--skip-special"))
            o->skip_special = true;
        else if (!strcmp(a, "--add-generation-prompt"))
            o->chat.add_generation_prompt = true;
        else if (!strcmp(a, "--no-thinking"))
            o->chat.enable_thinking = false;
        else if (!strcmp(a, "--enable-thinking"))
            o->chat.enable_thinking = true;
        else {
            fprintf(stderr, "fogline tokenize: unknown option '%s' (try --help)\n", a);
            return 2;
        }
    }
    if (!o->model) {
        fprintf(stderr, "fogline tokenize: --model DIR is required (try --help)\n");
        return 2;
    }
    if (o->ids && o->mode != MODE_CHAT) {
        fprintf(stderr, "fogline tokenize: --ids goes with --chat (try --help)\n");
        return 2;
    }
    return 0;
}

static int emit_ids(fl_buf *out, const int32_t *ids, size_t n)
{
    int rc = fl_buf_append(out, "[", 1);
    for (size_t i = 0; i < n && !rc; i++)
        rc = fl_buf_printf(out, i ? ",%d" : "%d", ids[i]);
    return rc || fl_buf_append(out, "]\n", 2);
}

static int emit_string(fl_buf *out, const char *s, size_t n)
{
    json_t *j = json_stringn(s, n);
    char *d = j ? json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    json_decref(j);
    if (!d)
        return FL_EINVAL;
    int rc = fl_buf_puts(out, d) || fl_buf_append(out, "\n", 1);
    free(d);
    return rc;
}

/* A conversation line: messages (pointers into the JSON) and what the ling template renders
 * besides (tools and tool calls re-serialised as JSON text, reasoning_content). */
typedef struct chat_line {
    fl_chat_msg *msgs;       /* (n) */
    size_t n;
    char **calls;            /* (n) JSON text or NULL */
    const char **reasoning;  /* (n) or NULL */
    char *tools;             /* JSON text or NULL */
    fl_chat_extra extra;
} chat_line;

static void chat_line_free(chat_line *c)
{
    for (size_t i = 0; c->calls && i < c->n; i++)
        free(c->calls[i]);
    free(c->calls);
    free(c->reasoning);
    free(c->tools);
    free(c->msgs);
}

/* A JSON value as text for the library (which parses it again). */
static int dump(const json_t *v, char **out, char *why, size_t whyn)
{
    *out = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!*out)
        snprintf(why, whyn, "out of memory");
    return *out ? 0 : -1;
}

/* Reads a conversation line into c and per-line options. */
static int parse_chat(json_t *v, chat_line *c, fl_chat_opts *co, char *why, size_t whyn)
{
    json_t *list = v;
    if (json_is_object(v)) {
        list = json_object_get(v, "messages");
        json_t *agp = json_object_get(v, "add_generation_prompt");
        json_t *th = json_object_get(v, "enable_thinking");
        json_t *tools = json_object_get(v, "tools");
        if (agp && !json_is_boolean(agp)) {
            snprintf(why, whyn, "\"add_generation_prompt\" must be true or false");
            return -1;
        }
        if (th && !json_is_boolean(th)) {
            snprintf(why, whyn, "\"enable_thinking\" must be true or false");
            return -1;
        }
        if (agp)
            co->add_generation_prompt = json_is_true(agp);
        if (th)
            co->enable_thinking = json_is_true(th);
        if (tools && !json_is_null(tools) && dump(tools, &c->tools, why, whyn)) /* null: none */
            return -1;
    }
    if (!json_is_array(list)) {
        snprintf(why, whyn, "expected a JSON array of messages (or {\"messages\": [...]})");
        return -1;
    }
    c->n = json_array_size(list);
    c->msgs = calloc(c->n ? c->n : 1, sizeof *c->msgs);
    c->calls = calloc(c->n ? c->n : 1, sizeof *c->calls);
    c->reasoning = calloc(c->n ? c->n : 1, sizeof *c->reasoning);
    if (!c->msgs || !c->calls || !c->reasoning) {
        snprintf(why, whyn, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < c->n; i++) {
        json_t *m = json_array_get(list, i);
        json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
        json_t *calls = json_object_get(m, "tool_calls"), *rs = json_object_get(m, "reasoning_content");
        /* an assistant's or a tool's null content is "" to the ling template */
        bool null_ok = json_is_string(role) && (!strcmp(json_string_value(role), "assistant") ||
                                                !strcmp(json_string_value(role), "tool"));
        if (!json_is_object(m) || !json_is_string(role) ||
            !(json_is_string(content) || (null_ok && json_is_null(content)))) {
            snprintf(why, whyn, "message %zu: needs a string \"role\" and a string \"content\"%s", i,
                     null_ok ? " (or null)" : "");
            return -1;
        }
        if (json_is_string(content) && strlen(json_string_value(content)) != json_string_length(content)) {
            snprintf(why, whyn, "message %zu: content contains a NUL character", i);
            return -1;
        }
        if (rs && !json_is_null(rs) &&
            (!json_is_string(rs) || strlen(json_string_value(rs)) != json_string_length(rs))) {
            snprintf(why, whyn, "message %zu: \"reasoning_content\" must be a string (without NUL) "
                     "or null", i);
            return -1;
        }
        if (calls && !json_is_null(calls) && dump(calls, &c->calls[i], why, whyn))
            return -1;
        c->msgs[i].role = json_string_value(role);
        c->msgs[i].content = json_is_string(content) ? json_string_value(content) : "";
        c->reasoning[i] = json_is_string(rs) ? json_string_value(rs) : NULL;
    }
    c->extra = (fl_chat_extra){c->tools, (const char *const *)c->calls, c->reasoning};
    return 0;
}

/* Answers one line into out; on bad input writes the reason into why and returns -1. */
static int do_line(const fl_tokenizer *t, const opts *o, json_t *v, fl_buf *out, char *why,
                   size_t whyn)
{
    fl_err e = {0};
    if (o->mode == MODE_ENCODE) {
        if (!json_is_string(v)) {
            snprintf(why, whyn, "expected a JSON string");
            return -1;
        }
        int32_t *ids;
        size_t n;
        if (fl_tokenizer_encode(t, json_string_value(v), json_string_length(v), !o->no_special,
                                &ids, &n, &e)) {
            snprintf(why, whyn, "%s", e.msg);
            return -1;
        }
        int rc = emit_ids(out, ids, n);
        free(ids);
        return rc ? (snprintf(why, whyn, "out of memory"), -1) : 0;
    }
    if (o->mode == MODE_DECODE) {
        if (!json_is_array(v)) {
            snprintf(why, whyn, "expected a JSON array of token ids");
            return -1;
        }
        size_t n = json_array_size(v);
        int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
        if (!ids) {
            snprintf(why, whyn, "out of memory");
            return -1;
        }
        for (size_t i = 0; i < n; i++) {
            json_t *x = json_array_get(v, i);
            if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > INT32_MAX) {
                free(ids);
                snprintf(why, whyn, "element %zu is not a token id (a non-negative integer)", i);
                return -1;
            }
            ids[i] = (int32_t)json_integer_value(x);
        }
        fl_buf text = {0};
        int rc = fl_tokenizer_decode(t, ids, n, o->skip_special, &text, &e);
        free(ids);
        if (!rc)
            rc = emit_string(out, text.data ? text.data : "", text.len);
        fl_buf_free(&text);
        return rc ? (snprintf(why, whyn, "%s", e.msg[0] ? e.msg : "out of memory"), -1) : 0;
    }
    chat_line c = {0};
    fl_chat_opts co = o->chat;
    if (parse_chat(v, &c, &co, why, whyn)) {
        chat_line_free(&c);
        return -1;
    }
    fl_buf text = {0};
    int rc = fl_chat_render_extra(t, c.msgs, c.n, &co, &c.extra, &text, &e);
    chat_line_free(&c);
    if (rc) {
        fl_buf_free(&text);
        snprintf(why, whyn, "%s", e.msg);
        return -1;
    }
    if (o->ids) {
        int32_t *ids;
        size_t ni;
        rc = fl_tokenizer_encode(t, text.data, text.len, !o->no_special, &ids, &ni, &e);
        if (!rc) {
            rc = emit_ids(out, ids, ni);
            free(ids);
        }
    } else {
        rc = emit_string(out, text.data, text.len);
    }
    fl_buf_free(&text);
    return rc ? (snprintf(why, whyn, "%s", e.msg[0] ? e.msg : "out of memory"), -1) : 0;
}

int fl_cmd_tokenize(int argc, char **argv)
{
    opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc == 1 ? 0 : rc;
    fl_tokenizer *t;
    fl_err e = {0};
    if (fl_tokenizer_load(&t, o.model, o.chat_template, &e)) {
        fprintf(stderr, "fogline tokenize: %s\n", e.msg);
        return 1;
    }
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t len;
    fl_buf out = {0};
    int status = 0;
    while ((len = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        char why[FL_ERR_MSG + 64];
        json_error_t je;
        json_t *v = json_loadb(line, (size_t)len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (!v) {
            fprintf(stderr, "fogline tokenize: line %zu: not valid JSON (%s)\n", lineno, je.text);
            status = 1;
            break;
        }
        out.len = 0;
        rc = do_line(t, &o, v, &out, why, sizeof why);
        json_decref(v);
        if (rc) {
            fprintf(stderr, "fogline tokenize: line %zu: %s\n", lineno, why);
            status = 1;
            break;
        }
        if (fwrite(out.data, 1, out.len, stdout) != out.len || fflush(stdout)) {
            fprintf(stderr, "fogline tokenize: cannot write the output\n");
            status = 1;
            break;
        }
    }
    if (!status && ferror(stdin)) {
        fprintf(stderr, "fogline tokenize: cannot read stdin\n");
        status = 1;
    }
    free(line);
    fl_buf_free(&out);
    fl_tokenizer_free(t);
    return status;
}
