/* chat_template.c: recognising a model's Jinja chat template and rendering conversations with
 * built-in C renderers that produce, byte for byte, what the template produces (the tests
 * compare against @huggingface/jinja running the template itself).
 *
 * Recognition works on a canonical form of the template: whitespace inside {% %} and {{ }}
 * outside string literals removed, literals decoded and re-quoted with ', whitespace control
 * (-) and trim_blocks / lstrip_blocks (what transformers renders with) applied to the text
 * between tags, comments dropped. Fogline's template must match exactly in that form; Qwen3's
 * and Qwen2.5's are recognised by their distinctive statements. */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

static const char FOGLINE_TEMPLATE[] =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] "
    "+ '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' "
    "}}{% endif %}";

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
    char *c = canonical(jinja), *f = canonical(FOGLINE_TEMPLATE);
    fl_chat_kind k = FL_CHAT_NONE;
    if (!c || !f)
        goto out;
    if (!strcmp(c, f)) {
        k = FL_CHAT_FOGLINE;
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

static int check_roles(const fl_chat_msg *m, size_t n, fl_chat_kind k, fl_err *e)
{
    if (n == 0)
        return fl_err_set(e, FL_EINVAL, "the conversation has no messages");
    for (size_t i = 0; i < n; i++) {
        if (!m[i].role || !m[i].content)
            return fl_err_set(e, FL_EINVAL, "message %zu has no role or no content", i);
        if (k == FL_CHAT_FOGLINE)
            continue; /* its template writes any role as given */
        if (role_is(&m[i], "tool"))
            return fl_err_set(e, FL_EUNSUPPORTED, "message %zu: tool messages are not supported by "
                              "the built-in %s renderer", i, fl_chat_kind_name(k));
        if (!role_is(&m[i], "system") && !role_is(&m[i], "user") && !role_is(&m[i], "assistant"))
            return fl_err_set(e, FL_EINVAL, "message %zu: role \"%s\" is not one the %s template "
                              "knows (system, user, assistant)", i, m[i].role, fl_chat_kind_name(k));
    }
    return 0;
}

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
                         const fl_chat_opts *op, fl_buf *o)
{
    int rc = 0;
    if (role_is(&m[0], "system"))
        rc = turn(o, "system", m[0].content);
    else
        rc = turn(o, "system", t->default_system ? t->default_system : FALLBACK_SYSTEM);
    for (size_t i = 0; i < n && !rc; i++)
        if (!(i == 0 && role_is(&m[0], "system")))
            rc = turn(o, m[i].role, m[i].content);
    if (!rc && op->add_generation_prompt)
        rc = put(o, "<|im_start|>assistant\n");
    return rc ? FL_ENOMEM : 0;
}

static bool starts_with(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }
static bool ends_with(const char *s, const char *p)
{
    size_t a = strlen(s), b = strlen(p);
    return a >= b && !memcmp(s + a - b, p, b);
}

static int render_qwen3(const fl_chat_msg *m, size_t n, const fl_chat_opts *op, fl_buf *o)
{
    int rc = 0;
    if (role_is(&m[0], "system"))
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
        if (!role_is(&m[i], "assistant"))
            continue;
        const char *c = m[i].content, *rs = "";
        size_t cn = strlen(c), rn = 0;
        const char *close = find_first(c, cn, "</think>");
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
        if (!rc && i > last_query && (i == n - 1 || rn > 0)) {
            const char *r2 = rs;
            size_t r2n = rn;
            lstrip_nl(&r2, &r2n);
            rstrip_nl(r2, &r2n);
            lstrip_nl(&c, &cn);
            rc = put(o, "<think>\n") || putn(o, r2, r2n) || put(o, "\n</think>\n\n");
        }
        if (!rc)
            rc = putn(o, c, cn) || put(o, "<|im_end|>\n");
    }
    if (!rc && op->add_generation_prompt) {
        rc = put(o, "<|im_start|>assistant\n");
        if (!rc && !op->enable_thinking)
            rc = put(o, "<think>\n\n</think>\n\n");
    }
    return rc ? FL_ENOMEM : 0;
}

int fl_chat_render(const fl_tokenizer *t, const fl_chat_msg *msgs, size_t n,
                   const fl_chat_opts *opts, fl_buf *out, fl_err *e)
{
    static const fl_chat_opts dflt = {false, true};
    if (!opts)
        opts = &dflt;
    if (t->chat == FL_CHAT_NONE)
        return fl_err_set(e, FL_ESTATE, "cannot render a chat: %s",
                          t->chat_none_reason ? t->chat_none_reason : "no chat template");
    int rc = check_roles(msgs, n, t->chat, e);
    if (rc)
        return rc;
    switch (t->chat) {
    case FL_CHAT_FOGLINE:
        rc = render_fogline(msgs, n, opts, out);
        break;
    case FL_CHAT_CHATML:
        rc = render_chatml(t, msgs, n, opts, out);
        break;
    default:
        rc = render_qwen3(msgs, n, opts, out);
        break;
    }
    if (!rc)
        rc = fl_buf_append(out, "", 0);
    return rc ? fl_err_set(e, rc, "out of memory while rendering the chat") : 0;
}
