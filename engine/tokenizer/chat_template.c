/* chat_template.c: recognising a model's Jinja chat template and rendering conversations with
 * built-in C renderers that produce, byte for byte, what the template produces (the tests
 * compare against @huggingface/jinja running the template itself).
 *
 * Recognition works on a canonical form of the template: whitespace inside {% %} and {{ }}
 * outside string literals removed, literals decoded and re-quoted with ', whitespace control
 * (-) and trim_blocks / lstrip_blocks (what transformers renders with) applied to the text
 * between tags, comments dropped. Fogline's and Ling's templates must match exactly in that
 * form; Qwen3's and Qwen2.5's are recognised by their distinctive statements. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

static const char FOGLINE_TEMPLATE[] =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] "
    "+ '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' "
    "}}{% endif %}";

/* The chat template of the Ling 2.0 family's chat tokenizer (inclusionAI/Ling-V2,
 * resource/tokenizer/config_sft/tokenizer_config.json), which LLaDA2.0/2.1 (converted from Ling
 * 2.0) render their prompts with; tests/data/tokenizer/llada2_chat.jinja holds the same text. */
static const char LING_TEMPLATE[] =
    "{% set thinking_option = 'off' %}\n"
    "{{- '<role>SYSTEM</role>' }}\n"
    "{%- if messages[0].role == 'system' %}\n"
    "    {{- messages[0].content + '\\n' }}\n"
    "{%- endif %}\n"
    "{%- if tools %}\n"
    "    {{- \"# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n"
    "        {{- \"\\n\" }}\n"
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call>\\n\" }}\n"
    "{%- endif %}\n"
    "{{- 'detailed thinking ' + thinking_option + '<|role_end|>' }}\n"
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}\n"
    "{%- for message in messages[::-1] %}\n"
    "    {%- set index = (messages|length - 1) - loop.index0 %}\n"
    "    {%- if ns.multi_step_tool and message.role == \"user\" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}\n"
    "        {%- set ns.multi_step_tool = false %}\n"
    "        {%- set ns.last_query_index = index %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- for message in messages %}\n"
    "    {%- if message.content is string %}\n"
    "        {%- set content = message.content %}\n"
    "    {%- else %}\n"
    "        {%- set content = '' %}\n"
    "    {%- endif %}\n"
    "    {%- if message.role == \"user\" %}\n"
    "        {{- '<role>HUMAN</role>' + message.content + '<|role_end|>' }}\n"
    "    {%- elif message.role == \"system\" and not loop.first %}\n"
    "        {{- '<role>SYSTEM</role>' + message.content + '<|role_end|>' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n"
    "        {%- set reasoning_content = '' %}\n"
    "        {%- if message.reasoning_content is string %}\n"
    "            {%- set reasoning_content = message.reasoning_content %}\n"
    "        {%- else %}\n"
    "            {%- if '</think>' in content %}\n"
    "                {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}\n"
    "                {%- set content = content.split('</think>')[-1].lstrip('\\n') %}\n"
    "            {%- endif %}\n"
    "        {%- endif %}\n"
    "        {%- if loop.index0 > ns.last_query_index %}\n"
    "            {%- if reasoning_content %}\n"
    "                {{- '<role>ASSISTANT</role>' + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}\n"
    "            {%- else %}\n"
    "                {{- '<role>ASSISTANT</role>' + content }}\n"
    "            {%- endif %}\n"
    "        {%- else %}\n"
    "            {{- '<role>ASSISTANT</role>' + content }}\n"
    "        {%- endif %}\n"
    "        {%- if message.tool_calls %}\n"
    "            {%- for tool_call in message.tool_calls %}\n"
    "                {%- if (loop.first and content) or (not loop.first) %}\n"
    "                    {{- '\\n' }}\n"
    "                {%- endif %}\n"
    "                {%- if tool_call.function %}\n"
    "                    {%- set tool_call = tool_call.function %}\n"
    "                {%- endif %}\n"
    "                {{- '<tool_call>\\n{\"name\": \"' }}\n"
    "                {{- tool_call.name }}\n"
    "                {{- '\", \"arguments\": ' }}\n"
    "                {%- if tool_call.arguments is string %}\n"
    "                    {{- tool_call.arguments }}\n"
    "                {%- else %}\n"
    "                    {{- tool_call.arguments | tojson }}\n"
    "                {%- endif %}\n"
    "                {{- '}\\n</tool_call>' }}\n"
    "            {%- endfor %}\n"
    "        {%- endif %}\n"
    "        {{- '<|role_end|>' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if loop.first or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<role>OBSERVATION</role>' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|role_end|>' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<role>ASSISTANT</role>' }}\n"
    "{%- endif %}";

static const char FALLBACK_SYSTEM[] = "You are a helpful assistant.";

const char *fl_chat_kind_name(fl_chat_kind k)
{
    switch (k) {
    case FL_CHAT_CHATML:
        return "chatml";
    case FL_CHAT_QWEN3:
        return "qwen3";
    case FL_CHAT_FOGLINE:
        return "fogline";
    case FL_CHAT_LING:
        return "ling";
    default:
        return "none";
    }
}

/* ---- canonical form ---- */

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Appends the raw text s[0, n) between tags with Jinja's whitespace rules applied: '-'
 * markers, trim_blocks (first newline after a block tag), lstrip_blocks (spaces and tabs
 * before a block tag at the start of its line). line_start: s begins a line. */
static int canon_text(fl_buf *o, const char *s, size_t n, bool after_block, bool trim_left,
                      bool next_trims, bool next_is_block, bool line_start)
{
    size_t a = 0, b = n;
    if (trim_left)
        while (a < b && is_ws(s[a]))
            a++;
    else if (after_block && a < b && s[a] == '\n') {
        a++;
        line_start = true;
    }
    if (next_trims)
        while (b > a && is_ws(s[b - 1]))
            b--;
    else if (next_is_block) {
        size_t k = b;
        while (k > a && (s[k - 1] == ' ' || s[k - 1] == '\t'))
            k--;
        if (k > a ? s[k - 1] == '\n' : line_start)
            b = k;
    }
    return b > a ? fl_buf_append(o, s + a, b - a) : 0;
}

/* Canonical form of a template (see the file comment); malloc'd. */
static char *canonical(const char *s)
{
    fl_buf o = {0};
    size_t n = strlen(s), i = 0;
    bool after_block = false, trim_left = false;
    while (i <= n) {
        /* raw text up to the next tag */
        size_t j = i;
        while (j < n && !(s[j] == '{' && j + 1 < n && (s[j + 1] == '{' || s[j + 1] == '%' || s[j + 1] == '#')))
            j++;
        bool tag = j < n;
        bool next_trims = tag && j + 2 < n && s[j + 2] == '-';
        bool next_block = tag && s[j + 1] != '{';
        if (j == n && j > i && s[j - 1] == '\n') /* keep_trailing_newline=False */
            n--, j--;
        if (canon_text(&o, s + i, j - i, after_block, trim_left, next_trims, next_block,
                       i == 0 || s[i - 1] == '\n'))
            goto oom;
        if (!tag)
            break;
        char kind = s[j + 1];
        size_t k = j + 2;
        if (k < n && (s[k] == '-' || s[k] == '+'))
            k++;
        if (kind == '#') { /* comment */
            const char *end = strstr(s + k, "#}");
            if (!end)
                break;
            trim_left = end > s + k && end[-1] == '-';
            after_block = false;
            i = (size_t)(end - s) + 2;
            continue;
        }
        char close = kind == '{' ? '}' : '%';
        if (fl_buf_append(&o, s + j, 2))
            goto oom;
        trim_left = false;
        while (k < n) {
            char c = s[k];
            if ((c == '-' || c == '+') && k + 2 < n + 1 && s[k + 1] == close && s[k + 2] == '}') {
                trim_left = c == '-';
                k++;
                continue;
            }
            if (c == close && k + 1 < n && s[k + 1] == '}') {
                k += 2;
                break;
            }
            if (c == '\'' || c == '"') { /* string literal: decoded, re-quoted with ' */
                if (fl_buf_append(&o, "'", 1))
                    goto oom;
                k++;
                while (k < n && s[k] != c) {
                    char ch = s[k];
                    if (ch == '\\' && k + 1 < n) {
                        char x = s[++k];
                        ch = x == 'n' ? '\n' : x == 't' ? '\t' : x == 'r' ? '\r' : x;
                    }
                    if (fl_buf_append(&o, &ch, 1))
                        goto oom;
                    k++;
                }
                k++;
                if (fl_buf_append(&o, "'", 1))
                    goto oom;
                continue;
            }
            if (!is_ws(c) && fl_buf_append(&o, &c, 1))
                goto oom;
            k++;
        }
        if (fl_buf_append(&o, (char[]){close, '}'}, 2))
            goto oom;
        after_block = kind == '%';
        i = k;
    }
    if (fl_buf_append(&o, "", 0))
        goto oom;
    return o.data;
oom:
    fl_buf_free(&o);
    return NULL;
}

static bool has(const char *canon, const char *needle) { return strstr(canon, needle) != NULL; }

/* The text X of a literal '<|im_start|>system\nX<|im_end|>\n' in canonical form. */
static char *default_system_canon(const char *c)
{
    static const char pre[] = "'<|im_start|>system\n", post[] = "<|im_end|>\n'";
    for (const char *p = strstr(c, pre); p; p = strstr(p + 1, pre)) {
        const char *x = p + sizeof pre - 1;
        const char *end = strchr(x, '\'');
        if (!end || end - x < (long)sizeof post - 2)
            continue;
        if (strncmp(end - (sizeof post - 2), post, sizeof post - 2))
            continue;
        size_t len = (size_t)(end - x) - (sizeof post - 2);
        if (!len)
            continue;
        char *r = malloc(len + 1);
        if (r) {
            memcpy(r, x, len);
            r[len] = 0;
        }
        return r;
    }
    return NULL;
}

char *fl__chat_default_system(const char *jinja)
{
    char *c = canonical(jinja);
    if (!c)
        return NULL;
    char *r = default_system_canon(c);
    free(c);
    return r;
}

fl_chat_kind fl_chat_detect(const char *jinja)
{
    if (!jinja)
        return FL_CHAT_NONE;
    char *c = canonical(jinja), *f = canonical(FOGLINE_TEMPLATE), *l = canonical(LING_TEMPLATE);
    fl_chat_kind k = FL_CHAT_NONE;
    if (!c || !f || !l)
        goto out;
    if (!strcmp(c, f)) {
        k = FL_CHAT_FOGLINE;
        goto out;
    }
    if (!strcmp(c, l)) {
        k = FL_CHAT_LING;
        goto out;
    }
    bool chatml = has(c, "<|im_start|>") && has(c, "<|im_end|>") && has(c, "add_generation_prompt") &&
                  has(c, "'<|im_start|>assistant\n'");
    /* Qwen3: the reasoning split, the last-query rule and the empty think block */
    if (chatml && has(c, "'</think>'") && has(c, "'<think>\n\n</think>\n\n'") &&
        has(c, "enable_thinking") && has(c, "last_query_index") && has(c, "reasoning_content")) {
        k = FL_CHAT_QWEN3;
        goto out;
    }
    /* Qwen2 / Qwen2.5 ChatML: a default system prompt when the first message is not one */
    if (chatml && !has(c, "think>") && has(c, "messages[0]")) {
        char *sys = default_system_canon(c);
        if (sys)
            k = FL_CHAT_CHATML;
        free(sys);
    }
out:
    free(c);
    free(f);
    free(l);
    return k;
}

/* ---- rendering ---- */

static int put(fl_buf *o, const char *s) { return fl_buf_puts(o, s); }
static int putn(fl_buf *o, const char *s, size_t n) { return fl_buf_append(o, s, n); }

/* Python's str.lstrip/rstrip/strip with the argument '\n' (what Qwen3's template calls). */
static void lstrip_nl(const char **s, size_t *n)
{
    while (*n && **s == '\n')
        (*s)++, (*n)--;
}
static void rstrip_nl(const char *s, size_t *n)
{
    (void)s;
    while (*n && s[*n - 1] == '\n')
        (*n)--;
}

static const char *find_first(const char *s, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(s + i, needle, k))
            return s + i;
    return NULL;
}

static bool role_is(const fl_chat_msg *m, const char *r) { return m->role && !strcmp(m->role, r); }

static bool extra_set(const fl_chat_extra *x, size_t n)
{
    if (!x)
        return false;
    if (x->tools)
        return true;
    for (size_t i = 0; i < n; i++)
        if ((x->tool_calls && x->tool_calls[i]) || (x->reasoning_content && x->reasoning_content[i]))
            return true;
    return false;
}

bool fl_chat_takes_tools(const fl_tokenizer *t)
{
    if (t->chat == FL_CHAT_LING)
        return true;
    /* Qwen2.5's and Qwen3's templates write tools, tool calls and tool results; a ChatML
       template without them (or an unrecognised one under --chat-template) does not */
    return (t->chat == FL_CHAT_CHATML || t->chat == FL_CHAT_QWEN3) &&
           (!t->chat_template || strstr(t->chat_template, "<tool_call>"));
}

static int check_roles(const fl_tokenizer *t, const fl_chat_msg *m, size_t n, fl_chat_kind k,
                       const fl_chat_extra *x, fl_err *e)
{
    if (n == 0)
        return fl_err_set(e, FL_EINVAL, "the conversation has no messages");
    bool tools = fl_chat_takes_tools(t);
    if (!tools && extra_set(x, n))
        return fl_err_set(e, FL_EUNSUPPORTED, "tools, tool_calls and reasoning_content are not "
                          "supported by this model's chat template (the built-in %s renderer)",
                          fl_chat_kind_name(k));
    for (size_t i = 0; i < n; i++) {
        if (!m[i].role || !m[i].content)
            return fl_err_set(e, FL_EINVAL, "message %zu has no role or no content", i);
        if (k == FL_CHAT_FOGLINE)
            continue; /* its template writes any role as given */
        if (tools) {
            /* the templates silently drop other roles: refused rather than lost */
            if (!role_is(&m[i], "system") && !role_is(&m[i], "user") &&
                !role_is(&m[i], "assistant") && !role_is(&m[i], "tool"))
                return fl_err_set(e, FL_EINVAL, "message %zu: role \"%s\" is not one the %s "
                                  "template knows (system, user, assistant, tool)", i, m[i].role,
                                  fl_chat_kind_name(k));
            /* it reads them on assistant messages only */
            if (!role_is(&m[i], "assistant") && x &&
                ((x->tool_calls && x->tool_calls[i]) || (x->reasoning_content && x->reasoning_content[i])))
                return fl_err_set(e, FL_EINVAL, "message %zu: tool_calls and reasoning_content "
                                  "belong to assistant messages", i);
            continue;
        }
        if (role_is(&m[i], "tool"))
            return fl_err_set(e, FL_EUNSUPPORTED, "message %zu: tool messages are not supported by "
                              "the built-in %s renderer", i, fl_chat_kind_name(k));
        if (!role_is(&m[i], "system") && !role_is(&m[i], "user") && !role_is(&m[i], "assistant"))
            return fl_err_set(e, FL_EINVAL, "message %zu: role \"%s\" is not one the %s template "
                              "knows (system, user, assistant)", i, m[i].role, fl_chat_kind_name(k));
    }
    return 0;
}

/* Qwen2.5's and Qwen3's tools, tool calls and tool results (defined with Ling's, below) */
static int qwen_tools(fl_buf *o, const fl_chat_msg *m, const char *tools, const char *sys_default,
                      bool *wrote, fl_err *e);
static int qwen_tool_calls(fl_buf *o, const char *calls, size_t i, bool lead, bool qwen25,
                           bool *any, fl_err *e);
static void qwen_tool_result(fl_buf *o, const fl_chat_msg *m, size_t n, size_t i);

static int turn(fl_buf *o, const char *role, const char *content)
{
    return put(o, "<|im_start|>") || put(o, role) || put(o, "\n") || put(o, content) ||
           put(o, "<|im_end|>\n");
}

static int render_fogline(const fl_chat_msg *m, size_t n, const fl_chat_opts *op, fl_buf *o)
{
    for (size_t i = 0; i < n; i++)
        if (turn(o, m[i].role, m[i].content))
            return FL_ENOMEM;
    return op->add_generation_prompt && put(o, "<|im_start|>assistant\n") ? FL_ENOMEM : 0;
}

static int render_chatml(const fl_tokenizer *t, const fl_chat_msg *m, size_t n,
                         const fl_chat_opts *op, const fl_chat_extra *x, fl_buf *o, fl_err *e)
{
    int rc = 0;
    const char *sys = t->default_system ? t->default_system : FALLBACK_SYSTEM;
    bool wrote = false;
    if (x && x->tools && (rc = qwen_tools(o, m, x->tools, sys, &wrote, e)))
        return rc;
    if (wrote)
        ; /* the system turn with the tools */
    else if (role_is(&m[0], "system"))
        rc = turn(o, "system", m[0].content);
    else
        rc = turn(o, "system", sys);
    for (size_t i = 0; i < n && !rc; i++) {
        if (i == 0 && role_is(&m[0], "system"))
            continue;
        const char *calls = x && x->tool_calls ? x->tool_calls[i] : NULL;
        if (role_is(&m[i], "tool")) {
            qwen_tool_result(o, m, n, i);
            continue;
        }
        if (role_is(&m[i], "assistant") && calls) {
            /* '<|im_start|>assistant' ('\n' + content if content) then each call: only when
               tool_calls is a non-empty list (else the plain turn below) */
            fl_buf t2 = {0};
            bool any = false;
            putn(&t2, "<|im_start|>assistant", 21);
            if (m[i].content[0]) {
                put(&t2, "\n");
                put(&t2, m[i].content);
            }
            rc = qwen_tool_calls(&t2, calls, i, true, true, &any, e);
            if (!rc && any) {
                put(&t2, "<|im_end|>\n");
                rc = t2.err ? t2.err : putn(o, t2.data, t2.len);
                fl_buf_free(&t2);
                continue;
            }
            fl_buf_free(&t2);
            if (rc)
                return rc;
        }
        rc = turn(o, m[i].role, m[i].content);
    }
    if (!rc && op->add_generation_prompt)
        rc = put(o, "<|im_start|>assistant\n");
    return rc;
}

static bool starts_with(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }
static bool ends_with(const char *s, const char *p)
{
    size_t a = strlen(s), b = strlen(p);
    return a >= b && !memcmp(s + a - b, p, b);
}

static int render_qwen3(const fl_chat_msg *m, size_t n, const fl_chat_opts *op,
                        const fl_chat_extra *x, fl_buf *o, fl_err *e)
{
    int rc = 0;
    bool wrote = false;
    if (x && x->tools && (rc = qwen_tools(o, m, x->tools, NULL, &wrote, e)))
        return rc;
    if (!wrote && role_is(&m[0], "system"))
        rc = turn(o, "system", m[0].content);
    /* the last user message that is not a tool response: reasoning is kept only after it */
    size_t last_query = n - 1;
    for (size_t i = n; i-- > 0;)
        if (role_is(&m[i], "user") && !(starts_with(m[i].content, "<tool_response>") &&
                                         ends_with(m[i].content, "</tool_response>"))) {
            last_query = i;
            break;
        }
    for (size_t i = 0; i < n && !rc; i++) {
        if (role_is(&m[i], "user") || (role_is(&m[i], "system") && i != 0)) {
            rc = turn(o, m[i].role, m[i].content);
            continue;
        }
        if (role_is(&m[i], "tool")) {
            qwen_tool_result(o, m, n, i);
            continue;
        }
        if (!role_is(&m[i], "assistant"))
            continue;
        const char *c = m[i].content, *rs = "";
        size_t cn = strlen(c), rn = 0;
        const char *given = x && x->reasoning_content ? x->reasoning_content[i] : NULL;
        /* reasoning_content given (even empty): no split of the content */
        const char *close = given ? NULL : find_first(c, cn, "</think>");
        if (given) {
            rs = given;
            rn = strlen(given);
        }
        if (close) {
            /* content = c.split('</think>')[-1].lstrip('\n')
             * reasoning = c.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
            const char *last = fl_memrstr(c, cn, "</think>");
            const char *after = last + 8;
            size_t an = cn - (size_t)(after - c);
            rs = c;
            rn = (size_t)(close - c);
            rstrip_nl(rs, &rn);
            const char *open = fl_memrstr(rs, rn, "<think>");
            if (open) {
                rn -= (size_t)(open + 7 - rs);
                rs = open + 7;
            }
            lstrip_nl(&rs, &rn);
            c = after;
            cn = an;
            lstrip_nl(&c, &cn);
        }
        rc = put(o, "<|im_start|>assistant\n");
        bool has_content = cn > 0; /* the template's `content`, before any lstrip */
        if (!rc && i > last_query && (i == n - 1 || rn > 0)) {
            const char *r2 = rs;
            size_t r2n = rn;
            lstrip_nl(&r2, &r2n);
            rstrip_nl(r2, &r2n);
            lstrip_nl(&c, &cn);
            rc = put(o, "<think>\n") || putn(o, r2, r2n) || put(o, "\n</think>\n\n");
        }
        if (!rc)
            rc = putn(o, c, cn);
        bool any = false;
        if (!rc && x && x->tool_calls && x->tool_calls[i]) {
            /* a refusal (a number the two references print differently, ...) keeps its own
               code and message: only the buffer's failures below are "out of memory" */
            int trc = qwen_tool_calls(o, x->tool_calls[i], i, has_content, false, &any, e);
            if (trc && trc != FL_ENOMEM)
                return trc;
            rc = trc;
        }
        if (!rc)
            rc = put(o, "<|im_end|>\n");
    }
    if (!rc && op->add_generation_prompt) {
        rc = put(o, "<|im_start|>assistant\n");
        if (!rc && !op->enable_thinking)
            rc = put(o, "<think>\n\n</think>\n\n");
    }
    return rc ? FL_ENOMEM : 0;
}

/* ---- Ling ---- */

/* A JSON string as json.dumps(ensure_ascii=False) and JSON.stringify both write it: the two
 * escape the same characters the same way (", \, \b \f \n \r \t, other controls as \u00xx). */
static void json_string(fl_buf *o, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    putn(o, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        putn(o, s + run, i - run);
        run = i + 1;
        const char *esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                        : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
        if (esc)
            put(o, esc);
        else
            putn(o, (char[]){'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]}, 6);
    }
    putn(o, s + run, n - run);
    putn(o, "\"", 1);
}

/* An array index ("0", "17", below 2^32 - 1): JavaScript lists such keys of an object first, in
 * numeric order, where Python keeps the text's order. */
static bool array_index(const char *k, size_t n, uint64_t *v)
{
    if (n == 0 || n > 10 || (k[0] == '0' && n > 1))
        return false;
    *v = 0;
    for (size_t i = 0; i < n; i++) {
        if (k[i] < '0' || k[i] > '9')
            return false;
        *v = *v * 10 + (uint64_t)(k[i] - '0');
    }
    return *v < 4294967295u;
}

/* How much of a key an error message shows: at most 40 bytes, up to a control character (the
 * message stays one line). */
static int shown(const fl__json *key)
{
    size_t k = 0;
    while (k < key->n && k < 40 && (unsigned char)key->str[k] >= 0x20)
        k++;
    return (int)k;
}

static int key_cmp(const void *a, const void *b)
{
    const fl__json *x = *(const fl__json *const *)a, *y = *(const fl__json *const *)b;
    if (x->n != y->n)
        return x->n < y->n ? -1 : 1;
    return memcmp(x->str, y->str, x->n);
}

/* Refuses an object that Python and @huggingface/jinja would see differently: a key written
 * twice, or integer-like keys that JavaScript would move. */
static int check_object(const fl__json *v, const char *what, fl_err *e)
{
    bool other = false, index = false;
    uint64_t last = 0, x;
    for (uint32_t k = 0; k < v->n; k++) {
        const fl__json *key = &v->items[2 * k];
        if (array_index(key->str, key->n, &x)) {
            if (other || (index && x <= last))
                return fl_err_set(e, FL_EUNSUPPORTED, "%s: the integer-like key \"%s\" is not first "
                                  "and in order, which JavaScript would change (not supported by "
                                  "the built-in chat renderers)", what, key->str);
            index = true;
            last = x;
        } else {
            other = true;
        }
    }
    if (v->n < 2)
        return 0;
    /* duplicates: sorted, they are neighbours (a request may carry many keys) */
    const fl__json **keys = malloc(v->n * sizeof *keys); /* (n) */
    if (!keys)
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    for (uint32_t k = 0; k < v->n; k++)
        keys[k] = &v->items[2 * k];
    qsort(keys, v->n, sizeof *keys, key_cmp);
    int rc = 0;
    for (uint32_t k = 1; k < v->n && !rc; k++)
        if (!key_cmp(&keys[k - 1], &keys[k]))
            rc = fl_err_set(e, FL_EUNSUPPORTED, "%s: the key \"%.*s\" appears twice (not "
                            "supported by the built-in chat renderers)", what, shown(keys[k]), keys[k]->str);
    free(keys);
    return rc;
}

/* The template's `tojson` (transformers: json.dumps with ensure_ascii=False; @huggingface/jinja:
 * the same separators ", " and ": "). */
static int tojson(fl_buf *o, const fl__json *v, const char *what, fl_err *e)
{
    int rc;
    switch (v->type) {
    case FL_JSON_NULL:
        put(o, "null");
        return 0;
    case FL_JSON_TRUE:
        put(o, "true");
        return 0;
    case FL_JSON_FALSE:
        put(o, "false");
        return 0;
    case FL_JSON_NUMBER:
        /* Python writes 1.0 and 1e-07 where JavaScript writes 1 and 1e-7, and JavaScript rounds
           integers beyond 2^53 */
        if (!v->is_int || v->i > (INT64_C(1) << 53) || v->i < -(INT64_C(1) << 53))
            return fl_err_set(e, FL_EUNSUPPORTED, "%s: numbers with a fraction or an exponent or "
                              "beyond 2^53 are not supported by the built-in chat renderers "
                              "(Python and JavaScript print them differently)", what);
        fl_buf_printf(o, "%lld", (long long)v->i);
        return 0;
    case FL_JSON_STRING:
        json_string(o, v->str, v->n);
        return 0;
    case FL_JSON_ARRAY:
        put(o, "[");
        for (uint32_t k = 0; k < v->n; k++) {
            if (k)
                put(o, ", ");
            if ((rc = tojson(o, &v->items[k], what, e)))
                return rc;
        }
        put(o, "]");
        return 0;
    default:
        if ((rc = check_object(v, what, e)))
            return rc;
        put(o, "{");
        for (uint32_t k = 0; k < v->n; k++) {
            if (k)
                put(o, ", ");
            json_string(o, v->items[2 * k].str, v->items[2 * k].n);
            put(o, ": ");
            if ((rc = tojson(o, &v->items[2 * k + 1], what, e)))
                return rc;
        }
        put(o, "}");
        return 0;
    }
}

static int parse_json(const char *text, const char *what, fl__json_doc *doc, fl_err *e)
{
    char why[FL_ERR_MSG];
    int rc = fl__json_parse(text, strlen(text), doc, why, sizeof why);
    if (rc)
        return fl_err_set(e, rc == FL_ENOMEM ? FL_ENOMEM : FL_EINVAL, "%s: %s", what, why);
    return 0;
}

/* One element of an assistant's tool_calls: {"function": {"name", "arguments"}} (OpenAI) or
 * {"name", "arguments"}; arguments written as given when a string, else through tojson. */
static int ling_tool_call(fl_buf *o, const fl__json *tc, size_t i, size_t j, bool args_tojson,
                          fl_err *e)
{
    char what[64];
    snprintf(what, sizeof what, "message %zu: tool_calls[%zu]", i, j);
    if (!fl__json_is(tc, FL_JSON_OBJECT))
        return fl_err_set(e, FL_EINVAL, "%s is not an object", what);
    int rc = check_object(tc, what, e);
    if (rc)
        return rc;
    const fl__json *f = fl__json_get(tc, "function");
    if (f) { /* the template takes it when it is truthy: refuse the cases where it is not */
        if (!fl__json_is(f, FL_JSON_OBJECT) || f->n == 0)
            return fl_err_set(e, FL_EINVAL, "%s: \"function\" must be a non-empty object", what);
        if ((rc = check_object(f, what, e)))
            return rc;
        tc = f;
    }
    const fl__json *name = fl__json_get(tc, "name"), *args = fl__json_get(tc, "arguments");
    if (!fl__json_is(name, FL_JSON_STRING))
        return fl_err_set(e, FL_EINVAL, "%s has no string \"name\"", what);
    if (!args)
        return fl_err_set(e, FL_EINVAL, "%s has no \"arguments\"", what);
    put(o, "<tool_call>\n{\"name\": \"");
    putn(o, name->str, name->n);
    put(o, "\", \"arguments\": ");
    if (args->type == FL_JSON_STRING && !args_tojson)
        putn(o, args->str, args->n);
    else if ((rc = tojson(o, args, what, e)))
        return rc;
    put(o, "}\n</tool_call>");
    return 0;
}

/* An assistant turn: the reasoning split (as Qwen3's), the think block after the last real
 * user query, then the tool calls. */
static int ling_assistant(fl_buf *o, const fl_chat_msg *m, size_t i, size_t last_query,
                          const char *reasoning, const char *calls, fl_err *e)
{
    const char *c = m->content, *rs = reasoning ? reasoning : "";
    size_t cn = strlen(c), rn = strlen(rs);
    const char *close = reasoning ? NULL : find_first(c, cn, "</think>");
    if (close) {
        /* reasoning = c.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
         * content = c.split('</think>')[-1].lstrip('\n') */
        const char *after = fl_memrstr(c, cn, "</think>") + 8;
        rs = c;
        rn = (size_t)(close - c);
        rstrip_nl(rs, &rn);
        const char *open = fl_memrstr(rs, rn, "<think>");
        if (open) {
            rn -= (size_t)(open + 7 - rs);
            rs = open + 7;
        }
        lstrip_nl(&rs, &rn);
        cn -= (size_t)(after - c);
        c = after;
        lstrip_nl(&c, &cn);
    }
    put(o, "<role>ASSISTANT</role>");
    if (i > last_query && rn) {
        const char *r2 = rs, *c2 = c;
        size_t r2n = rn, c2n = cn;
        lstrip_nl(&r2, &r2n);
        rstrip_nl(r2, &r2n);
        lstrip_nl(&c2, &c2n);
        put(o, "\n<think>\n");
        putn(o, r2, r2n);
        put(o, "\n</think>\n\n");
        putn(o, c2, c2n);
    } else {
        putn(o, c, cn);
    }
    bool any;
    if (calls) { /* as Qwen3's: "\n" before each call but a first one after no content */
        int rc = qwen_tool_calls(o, calls, i, cn > 0, false, &any, e);
        if (rc)
            return rc;
    }
    put(o, "<|role_end|>");
    return 0;
}

static const char LING_TOOLS_HEAD[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
    "provided with function signatures within <tools></tools> XML tags:\n<tools>";
static const char LING_TOOLS_TAIL[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
    "\"arguments\": <args-json-object>}\n</tool_call>\n";

static int render_ling(const fl_chat_msg *m, size_t n, const fl_chat_opts *op,
                       const fl_chat_extra *x, fl_buf *o, fl_err *e)
{
    int rc = 0;
    put(o, "<role>SYSTEM</role>");
    if (role_is(&m[0], "system")) {
        put(o, m[0].content);
        put(o, "\n");
    }
    if (x && x->tools) {
        fl__json_doc doc;
        if ((rc = parse_json(x->tools, "tools", &doc, e)))
            return rc;
        if (!fl__json_is(&doc.root, FL_JSON_ARRAY))
            rc = fl_err_set(e, FL_EINVAL, "tools must be a JSON array");
        if (!rc && doc.root.n) { /* an empty list is false to the template's `if tools` */
            put(o, LING_TOOLS_HEAD);
            for (uint32_t k = 0; !rc && k < doc.root.n; k++) {
                put(o, "\n");
                rc = tojson(o, &doc.root.items[k], "tools", e);
            }
            put(o, LING_TOOLS_TAIL);
        }
        fl__json_free(&doc);
        if (rc)
            return rc;
    }
    /* thinking_option is set to 'off' by the template itself: no request can change it */
    put(o, "detailed thinking off<|role_end|>");
    /* the last user message that is not a tool response; n - 1 when there is none */
    size_t last_query = n - 1;
    for (size_t i = n; i-- > 0;)
        if (role_is(&m[i], "user") && !(starts_with(m[i].content, "<tool_response>") &&
                                         ends_with(m[i].content, "</tool_response>"))) {
            last_query = i;
            break;
        }
    for (size_t i = 0; i < n && !rc; i++) {
        if (role_is(&m[i], "user")) {
            put(o, "<role>HUMAN</role>");
            put(o, m[i].content);
            put(o, "<|role_end|>");
        } else if (role_is(&m[i], "system")) {
            if (i == 0)
                continue; /* written above */
            put(o, "<role>SYSTEM</role>");
            put(o, m[i].content);
            put(o, "<|role_end|>");
        } else if (role_is(&m[i], "assistant")) {
            rc = ling_assistant(o, &m[i], i, last_query,
                                x && x->reasoning_content ? x->reasoning_content[i] : NULL,
                                x && x->tool_calls ? x->tool_calls[i] : NULL, e);
        } else { /* tool: consecutive results share one observation turn */
            if (i == 0 || !role_is(&m[i - 1], "tool"))
                put(o, "<role>OBSERVATION</role>");
            put(o, "\n<tool_response>\n");
            put(o, m[i].content);
            put(o, "\n</tool_response>");
            if (i == n - 1 || !role_is(&m[i + 1], "tool"))
                put(o, "<|role_end|>");
        }
    }
    if (!rc && op->add_generation_prompt)
        put(o, "<role>ASSISTANT</role>");
    return rc;
}

/* ---- Qwen2.5 and Qwen3: tools ---- */

static const char QWEN_TOOLS_TAIL[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
    "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";

/* The system turn with the tools when the list is not empty (*wrote): Qwen2.5 (sys_default
   given) writes the system message or its default, then "\n\n# Tools..."; Qwen3 the system
   message and "\n\n" if there is one, then "# Tools...". */
static int qwen_tools(fl_buf *o, const fl_chat_msg *m, const char *tools, const char *sys_default,
                      bool *wrote, fl_err *e)
{
    fl__json_doc doc;
    int rc = parse_json(tools, "tools", &doc, e);
    if (rc)
        return rc;
    *wrote = false;
    if (!fl__json_is(&doc.root, FL_JSON_ARRAY))
        rc = fl_err_set(e, FL_EINVAL, "tools must be a JSON array");
    if (!rc && doc.root.n) {
        fl_buf t = {0};
        put(&t, "<|im_start|>system\n");
        if (role_is(&m[0], "system")) {
            put(&t, m[0].content);
            put(&t, "\n\n");
        } else if (sys_default) {
            put(&t, sys_default);
            put(&t, "\n\n");
        }
        put(&t, LING_TOOLS_HEAD);
        for (uint32_t k = 0; !rc && k < doc.root.n; k++) {
            put(&t, "\n");
            rc = tojson(&t, &doc.root.items[k], "tools", e);
        }
        put(&t, QWEN_TOOLS_TAIL);
        if (!rc)
            rc = t.err ? t.err : putn(o, t.data, t.len);
        fl_buf_free(&t);
        *wrote = !rc;
    }
    fl__json_free(&doc);
    return rc;
}

/* An assistant's tool calls when the list is not empty (*any): Qwen2.5 writes "\n" before each
   and arguments always through tojson; Qwen3 "\n" before all but a first one after no
   content (lead false) and string arguments as they are. */
static int qwen_tool_calls(fl_buf *o, const char *calls, size_t i, bool lead, bool qwen25,
                           bool *any, fl_err *e)
{
    char what[48];
    snprintf(what, sizeof what, "message %zu: tool_calls", i);
    fl__json_doc doc;
    int rc = parse_json(calls, what, &doc, e);
    if (rc)
        return rc;
    if (!fl__json_is(&doc.root, FL_JSON_ARRAY))
        rc = fl_err_set(e, FL_EINVAL, "%s must be a JSON array", what);
    *any = !rc && doc.root.n > 0;
    for (uint32_t j = 0; !rc && j < doc.root.n; j++) {
        if (qwen25 || j || lead)
            put(o, "\n");
        rc = ling_tool_call(o, &doc.root.items[j], i, j, qwen25, e);
    }
    fl__json_free(&doc);
    return rc;
}

/* A tool result: consecutive ones share one user turn. */
static void qwen_tool_result(fl_buf *o, const fl_chat_msg *m, size_t n, size_t i)
{
    if (i == 0 || !role_is(&m[i - 1], "tool"))
        put(o, "<|im_start|>user");
    put(o, "\n<tool_response>\n");
    put(o, m[i].content);
    put(o, "\n</tool_response>");
    if (i == n - 1 || !role_is(&m[i + 1], "tool"))
        put(o, "<|im_end|>\n");
}

int fl_chat_render_extra(const fl_tokenizer *t, const fl_chat_msg *msgs, size_t n,
                         const fl_chat_opts *opts, const fl_chat_extra *extra, fl_buf *out,
                         fl_err *e)
{
    static const fl_chat_opts dflt = {false, true};
    if (!opts)
        opts = &dflt;
    if (t->chat == FL_CHAT_NONE)
        return fl_err_set(e, FL_ESTATE, "cannot render a chat: %s",
                          t->chat_none_reason ? t->chat_none_reason : "no chat template");
    int rc = check_roles(t, msgs, n, t->chat, extra, e);
    if (rc)
        return rc;
    /* rendered apart, so that an error found on the way (ling's JSON) leaves out untouched */
    fl_buf text = {0};
    switch (t->chat) {
    case FL_CHAT_FOGLINE:
        rc = render_fogline(msgs, n, opts, &text);
        break;
    case FL_CHAT_CHATML:
        rc = render_chatml(t, msgs, n, opts, extra, &text, e);
        break;
    case FL_CHAT_LING:
        rc = render_ling(msgs, n, opts, extra, &text, e);
        break;
    default:
        rc = render_qwen3(msgs, n, opts, extra, &text, e);
        break;
    }
    if (!rc && text.err)
        rc = text.err;
    if (!rc)
        rc = fl_buf_append(out, text.data ? text.data : "", text.len);
    fl_buf_free(&text);
    if (rc == FL_ENOMEM)
        return fl_err_set(e, rc, "out of memory while rendering the chat");
    return rc;
}

int fl_chat_render(const fl_tokenizer *t, const fl_chat_msg *msgs, size_t n,
                   const fl_chat_opts *opts, fl_buf *out, fl_err *e)
{
    return fl_chat_render_extra(t, msgs, n, opts, NULL, out, e);
}
