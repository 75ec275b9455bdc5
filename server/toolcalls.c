/* toolcalls.c: tool calls in a reply's text (toolcalls.h). */
#include "toolcalls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char OPEN[] = "<tool_call>", CLOSE[] = "</tool_call>";
#define OPEN_N (sizeof OPEN - 1)
#define CLOSE_N (sizeof CLOSE - 1)

void srv_tools_init(srv_tools *t, bool on, uint64_t seed)
{
    memset(t, 0, sizeof *t);
    t->on = on;
    t->seed = seed;
}

void srv_tools_free(srv_tools *t)
{
    fl_buf_free(&t->pend);
    fl_buf_free(&t->gap);
}

static bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

static const char *find(const char *s, size_t n, const char *needle, size_t k)
{
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(s + i, needle, k))
            return s + i;
    return NULL;
}

/* The end of the JSON value that starts at p (after whitespace), or NULL: strings with their
   escapes, objects and arrays by their brackets, anything else up to a delimiter. Only spans:
   the value's validity is jansson's to check. */
static const char *span(const char *p, const char *end)
{
    while (p < end && is_ws(*p))
        p++;
    if (p >= end)
        return NULL;
    int depth = 0;
    do {
        char ch = *p;
        if (ch == '"') {
            for (p++; p < end && *p != '"'; p++)
                if (*p == '\\')
                    p++;
            if (p >= end)
                return NULL;
            p++;
        } else if (ch == '{' || ch == '[') {
            depth++;
            p++;
        } else if (ch == '}' || ch == ']') {
            if (--depth < 0)
                return NULL;
            p++;
        } else if (depth == 0) {
            while (p < end && !is_ws(*p) && *p != ',' && *p != '}' && *p != ']')
                p++;
        } else {
            p++;
        }
    } while (depth > 0 && p < end);
    return depth ? NULL : p;
}

/* A call's text: {"name": string, "arguments": object} becomes calls' next entry, with the
   arguments as the model wrote them (a number beyond 64 bits stays as it was). */
static bool add_call(srv_tools *t, const char *s, size_t n, json_t *calls)
{
    json_error_t je;
    /* a key written twice is no call: jansson would keep the last "arguments", the scan
       below finds the first */
    json_t *j = json_loadb(s, n, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL | JSON_REJECT_DUPLICATES,
                           &je);
    const json_t *name = json_object_get(j, "name"), *args = json_object_get(j, "arguments");
    if (!json_is_object(j) || !json_is_string(name) || !json_is_object(args)) {
        json_decref(j);
        return false;
    }
    /* the arguments' own text: the object's members scanned for the key "arguments" */
    const char *p = s, *end = s + n, *a0 = NULL, *a1 = NULL;
    while (p < end && *p != '{')
        p++;
    for (p++; p < end && !a0;) {
        while (p < end && (is_ws(*p) || *p == ','))
            p++;
        const char *k1 = span(p, end);
        if (!k1)
            break;
        json_t *key = json_loadb(p, (size_t)(k1 - p), JSON_DECODE_ANY, &je);
        bool is_args = json_is_string(key) && !strcmp(json_string_value(key), "arguments");
        json_decref(key);
        p = k1;
        while (p < end && (is_ws(*p) || *p == ':'))
            p++;
        const char *v1 = span(p, end);
        if (!v1)
            break;
        if (is_args) {
            a0 = p;
            a1 = v1;
        }
        p = v1;
    }
    if (!a0) {
        json_decref(j);
        return false;
    }
    if (t->max_calls && t->n_calls >= t->max_calls) { /* a call, past the limit: dropped */
        json_decref(j);
        t->n_dropped++;
        return true;
    }
    json_t *f = json_object(), *c = json_object();
    char id[40];
    uint64_t h = (t->seed + (uint64_t)t->n_calls) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
    snprintf(id, sizeof id, "call_%016llx", (unsigned long long)h);
    bool ok = f && c;
    if (ok) {
        json_object_set_new(f, "name", json_string(json_string_value(name)));
        json_object_set_new(f, "arguments", json_stringn(a0, (size_t)(a1 - a0)));
        json_object_set_new(c, "index", json_integer(t->n_calls));
        json_object_set_new(c, "id", json_string(id));
        json_object_set_new(c, "type", json_string("function"));
        json_object_set_new(c, "function", f);
        f = NULL;
        ok = !json_array_append_new(calls, c);
        c = NULL;
    }
    json_decref(f);
    json_decref(c);
    json_decref(j);
    if (ok)
        t->n_calls++;
    return ok;
}

/* Plain text outside a call: all of it content, but trailing whitespace held back (it is not
   content if a call follows). */
static void plain(srv_tools *t, const char *s, size_t n, fl_buf *content)
{
    size_t k = n;
    while (k > 0 && is_ws(s[k - 1]))
        k--;
    if (k > 0) { /* text: what was held before it is content after all */
        fl_buf_append(content, t->pend.data, t->ws);
        fl_buf_append(content, s, k);
        t->pend.len = 0;
        t->ws = 0;
    }
    /* the trailing whitespace joins what is held (pend holds whitespace only here) */
    fl_buf_append(&t->pend, s + k, n - k);
    t->ws = t->pend.len;
}

/* Whether the text of a block up to a close tag, [p, c), may still grow into a call: an
   object that is not closed before the tag (the tag is inside one of its strings). */
static bool may_grow(const char *p, const char *c)
{
    while (p < c && is_ws(*p))
        p++;
    return p < c && *p == '{' && !span(p, c);
}

/* Feeds s[0, n) after what is held back; final: no more text comes (a call still open at a
   close tag is decided now). */
static int feed(srv_tools *t, const char *s, size_t n, bool final, fl_buf *content, json_t *calls)
{
    /* work on what is held back plus the new text */
    fl_buf w = {0};
    if (t->in_call)
        fl_buf_append(&w, t->pend.data, t->pend.len);
    else
        fl_buf_append(&w, t->pend.data + t->ws, t->pend.len - t->ws); /* a held tag prefix */
    fl_buf_append(&w, s, n);
    if (w.err) {
        fl_buf_free(&w);
        return FL_ENOMEM;
    }
    if (!t->in_call)
        t->pend.len = t->ws; /* keep the held whitespace only */
    else
        t->pend.len = 0;
    const char *p = w.data ? w.data : "", *end = p + w.len;
    while (p < end) {
        if (!t->in_call) {
            if (t->after_call) { /* whitespace right after a call is not content */
                while (p < end && is_ws(*p))
                    p++;
                if (p == end)
                    break;
                t->after_call = false;
            }
            const char *o = find(p, (size_t)(end - p), OPEN, OPEN_N);
            if (!o) {
                /* hold back a suffix that may begin the tag */
                size_t keep = 0;
                for (size_t k = OPEN_N - 1; k > 0; k--)
                    if ((size_t)(end - p) >= k && !memcmp(end - k, OPEN, k)) {
                        keep = k;
                        break;
                    }
                plain(t, p, (size_t)(end - p) - keep, content);
                fl_buf_append(&t->pend, end - keep, keep);
                p = end;
                break;
            }
            plain(t, p, (size_t)(o - p), content);
            /* whitespace before a call is not content (kept aside in case it is no call) */
            t->gap.len = 0;
            fl_buf_append(&t->gap, t->pend.data, t->ws);
            t->pend.len = 0;
            t->ws = 0;
            t->in_call = true;
            p = o + OPEN_N;
        } else {
            const char *c1 = find(p, (size_t)(end - p), CLOSE, CLOSE_N);
            /* the call ends at the first close tag whose text before it is one, while the
               text may still grow into one (a tag inside a string) */
            const char *c = c1;
            bool ok = false;
            while (c && !(ok = add_call(t, p, (size_t)(c - p), calls)) && may_grow(p, c))
                c = find(c + CLOSE_N, (size_t)(end - c - CLOSE_N), CLOSE, CLOSE_N);
            if (!c1 || (!ok && !c && !final)) { /* undecided: wait for more text */
                fl_buf_append(&t->pend, p, (size_t)(end - p));
                p = end;
                break;
            }
            if (ok) {
                t->after_call = true;
                p = c + CLOSE_N;
            } else { /* not a call: the block to its first close tag is text as written */
                fl_buf_append(content, t->gap.data, t->gap.len);
                fl_buf_append(content, OPEN, OPEN_N);
                fl_buf_append(content, p, (size_t)(c1 + CLOSE_N - p));
                p = c1 + CLOSE_N;
            }
            t->gap.len = 0;
            t->in_call = false;
        }
    }
    fl_buf_free(&w);
    return t->pend.err || t->gap.err || content->err ? FL_ENOMEM : 0;
}

int srv_tools_push(srv_tools *t, const char *s, size_t n, fl_buf *content, json_t *calls)
{
    if (!t->on)
        return fl_buf_append(content, s, n);
    return feed(t, s, n, false, content, calls);
}

int srv_tools_finish(srv_tools *t, fl_buf *content, json_t *calls)
{
    if (!t->on)
        return 0;
    /* a call still open at a close tag is decided now: no later tag comes */
    if (t->in_call && feed(t, NULL, 0, true, content, calls))
        return FL_ENOMEM;
    if (t->in_call) { /* cut off: text */
        fl_buf_append(content, t->gap.data, t->gap.len);
        fl_buf_append(content, OPEN, OPEN_N);
        fl_buf_append(content, t->pend.data, t->pend.len);
    } else {
        /* held whitespace is content when no call came; a held tag prefix always is */
        if (!t->n_calls)
            fl_buf_append(content, t->pend.data, t->ws);
        fl_buf_append(content, t->pend.data + t->ws, t->pend.len - t->ws);
    }
    t->pend.len = 0;
    t->ws = 0;
    t->in_call = false;
    t->after_call = false;
    return content->err ? FL_ENOMEM : 0;
}
