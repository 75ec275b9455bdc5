/* tok_json.c: a small JSON reader for tokenizer files. tokenizer.json is ~11 MB with ~300k
 * strings; a general DOM library spends most of the load in malloc and hashing. This one puts
 * the whole document in one arena (values, arrays, objects as key/value pairs in file order,
 * strings decoded and NUL-terminated) and looks keys up linearly, which the tokenizer only does
 * on small objects. Strict RFC 8259: no comments, no trailing commas, no lone surrogates. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

typedef struct parser {
    const char *s, *end, *p;
    fl__json_block *blocks; /* strings and value arrays, newest block first */
    fl__json *stack;        /* children of the containers being read */
    size_t top, scap;
    const char *err;
    int depth;
} parser;

#define MAX_DEPTH 256

#define BLOCK (4u << 20)

static void *arena_alloc(parser *ps, size_t n, size_t align)
{
    fl__json_block *b = ps->blocks;
    size_t off = b ? (b->used + align - 1) & ~(align - 1) : 0;
    if (!b || off + n > b->cap) {
        size_t cap = n + align > BLOCK ? n + align : BLOCK;
        b = malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        b->next = ps->blocks;
        b->cap = cap;
        b->used = 0;
        ps->blocks = b;
        off = (align - (uintptr_t)b->data % align) % align;
    }
    b->used = off + n;
    return b->data + off;
}

static void ws(parser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\r' || *ps->p == '\t'))
        ps->p++;
}

static int fail(parser *ps, const char *why)
{
    if (!ps->err)
        ps->err = why;
    return -1;
}

static int push(parser *ps, fl__json v)
{
    if (ps->top == ps->scap) {
        size_t cap = ps->scap ? ps->scap * 2 : 1024;
        fl__json *n = realloc(ps->stack, cap * sizeof *n);
        if (!n)
            return fail(ps, "out of memory");
        ps->stack = n;
        ps->scap = cap;
    }
    ps->stack[ps->top++] = v;
    return 0;
}

static int hex4(const char *p, uint32_t *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                                 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        *v = *v << 4 | (uint32_t)d;
    }
    return 0;
}

static int parse_string(parser *ps, fl__json *out)
{
    const char *p = ++ps->p; /* after the quote */
    /* the decoded string is never longer than its source */
    const char *q = p;
    while (q < ps->end && *q != '"') {
        if (*q == '\\' && q + 1 < ps->end)
            q++;
        q++;
    }
    if (q >= ps->end)
        return fail(ps, "unterminated string");
    char *d = arena_alloc(ps, (size_t)(q - p) + 1, 1), *o = d;
    if (!d)
        return fail(ps, "out of memory");
    while (p < q) {
        unsigned char c = (unsigned char)*p;
        if (c < 0x20)
            return fail(ps, "control character in a string");
        if (c != '\\') {
            /* copy a run without escapes at once */
            const char *r = p;
            while (r < q && *r != '\\' && (unsigned char)*r >= 0x20)
                r++;
            memcpy(o, p, (size_t)(r - p));
            o += r - p;
            p = r;
            continue;
        }
        char e = p[1];
        p += 2;
        switch (e) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            if (q - p < 4 || hex4(p, &cp))
                return fail(ps, "bad \\u escape");
            p += 4;
            if (cp >= 0xd800 && cp <= 0xdbff) {
                if (q - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, &lo) || lo < 0xdc00 || lo > 0xdfff)
                    return fail(ps, "lone surrogate in a \\u escape");
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                p += 6;
            } else if (cp >= 0xdc00 && cp <= 0xdfff)
                return fail(ps, "lone surrogate in a \\u escape");
            o += fl__utf8_put((unsigned char *)o, cp);
            break;
        }
        default:
            return fail(ps, "bad escape in a string");
        }
    }
    *o = 0;
    size_t len = (size_t)(o - d);
    if (fl__utf8_valid_prefix((const unsigned char *)d, len) != len)
        return fail(ps, "invalid UTF-8 in a string");
    out->type = FL_JSON_STRING;
    out->n = (uint32_t)len;
    out->str = d;
    ps->p = q + 1;
    return 0;
}

static int parse_value(parser *ps, fl__json *out);

static int parse_container(parser *ps, fl__json *out, bool obj)
{
    if (++ps->depth > MAX_DEPTH)
        return fail(ps, "nesting too deep");
    ps->p++;
    size_t base = ps->top;
    ws(ps);
    char close = obj ? '}' : ']';
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
    } else {
        for (;;) {
            fl__json v;
            ws(ps);
            if (obj) {
                if (ps->p >= ps->end || *ps->p != '"')
                    return fail(ps, "expected a string key");
                if (parse_string(ps, &v) || push(ps, v))
                    return -1;
                ws(ps);
                if (ps->p >= ps->end || *ps->p != ':')
                    return fail(ps, "expected ':'");
                ps->p++;
                ws(ps);
            }
            if (parse_value(ps, &v) || push(ps, v))
                return -1;
            ws(ps);
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                continue;
            }
            if (ps->p < ps->end && *ps->p == close) {
                ps->p++;
                break;
            }
            return fail(ps, obj ? "expected ',' or '}'" : "expected ',' or ']'");
        }
    }
    size_t n = ps->top - base;
    fl__json *items = n ? arena_alloc(ps, n * sizeof *items, _Alignof(fl__json)) : NULL;
    if (n && !items)
        return fail(ps, "out of memory");
    if (n)
        memcpy(items, ps->stack + base, n * sizeof *items);
    ps->top = base;
    out->type = obj ? FL_JSON_OBJECT : FL_JSON_ARRAY;
    out->n = (uint32_t)(obj ? n / 2 : n);
    out->items = items;
    ps->depth--;
    return 0;
}

static int parse_value(parser *ps, fl__json *out)
{
    ws(ps);
    if (ps->p >= ps->end)
        return fail(ps, "unexpected end of input");
    memset(out, 0, sizeof *out);
    char c = *ps->p;
    if (c == '"')
        return parse_string(ps, out);
    if (c == '{' || c == '[')
        return parse_container(ps, out, c == '{');
    static const struct {
        const char *w;
        fl__json_type t;
    } lits[] = {{"null", FL_JSON_NULL}, {"true", FL_JSON_TRUE}, {"false", FL_JSON_FALSE}};
    for (size_t i = 0; i < 3; i++) {
        size_t k = strlen(lits[i].w);
        if ((size_t)(ps->end - ps->p) >= k && !memcmp(ps->p, lits[i].w, k)) {
            out->type = lits[i].t;
            ps->p += k;
            return 0;
        }
    }
    /* number: -? int frac? exp? */
    const char *p = ps->p;
    if (p < ps->end && *p == '-')
        p++;
    if (p >= ps->end || *p < '0' || *p > '9')
        return fail(ps, "unexpected character");
    if (*p == '0')
        p++;
    else
        while (p < ps->end && *p >= '0' && *p <= '9')
            p++;
    bool integer = true;
    if (p < ps->end && *p == '.') {
        integer = false;
        p++;
        if (p >= ps->end || *p < '0' || *p > '9')
            return fail(ps, "bad number");
        while (p < ps->end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < ps->end && (*p == 'e' || *p == 'E')) {
        integer = false;
        p++;
        if (p < ps->end && (*p == '+' || *p == '-'))
            p++;
        if (p >= ps->end || *p < '0' || *p > '9')
            return fail(ps, "bad number");
        while (p < ps->end && *p >= '0' && *p <= '9')
            p++;
    }
    char buf[64];
    size_t len = (size_t)(p - ps->p);
    if (len >= sizeof buf)
        integer = false;
    if (len < sizeof buf) {
        memcpy(buf, ps->p, len);
        buf[len] = 0;
    }
    out->type = FL_JSON_NUMBER;
    if (integer) {
        errno = 0;
        long long v = strtoll(buf, NULL, 10);
        out->is_int = errno == 0;
        if (out->is_int)
            out->i = v;
        else
            out->num = strtod(buf, NULL);
    } else {
        out->num = len < sizeof buf ? strtod(buf, NULL) : NAN;
    }
    ps->p = p;
    return 0;
}

int fl__json_parse(const char *text, size_t n, fl__json_doc *doc, char *err, size_t errn)
{
    memset(doc, 0, sizeof *doc);
    parser ps = {0};
    ps.s = ps.p = text;
    ps.end = text + n;
    fl__json root;
    int rc = parse_value(&ps, &root);
    if (!rc) {
        ws(&ps);
        if (ps.p != ps.end)
            rc = fail(&ps, "text after the JSON value");
    }
    free(ps.stack);
    if (rc) {
        int line = 1, col = 1;
        for (const char *q = text; q < ps.p && q < ps.end; q++) {
            if (*q == '\n') {
                line++;
                col = 1;
            } else
                col++;
        }
        snprintf(err, errn, "malformed JSON at line %d column %d: %s", line, col, ps.err ? ps.err : "?");
        doc->blocks = ps.blocks;
        fl__json_free(doc);
        return ps.err && !strcmp(ps.err, "out of memory") ? FL_ENOMEM : FL_EFORMAT;
    }
    doc->blocks = ps.blocks;
    doc->root = root;
    return 0;
}

void fl__json_free(fl__json_doc *doc)
{
    for (fl__json_block *b = doc->blocks, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    memset(doc, 0, sizeof *doc);
}

const fl__json *fl__json_get(const fl__json *obj, const char *key)
{
    if (!obj || obj->type != FL_JSON_OBJECT)
        return NULL;
    size_t k = strlen(key);
    for (uint32_t i = 0; i < obj->n; i++) {
        const fl__json *kv = &obj->items[2 * i];
        if (kv->n == k && !memcmp(kv->str, key, k))
            return kv + 1;
    }
    return NULL;
}
