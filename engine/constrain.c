/* constrain.c: JSON schemas (OpenAI's strict subset) and "any JSON object" as automata over
 * bytes (constrain.h). The schema is walked once into a Thompson NFA (byte-set edges and
 * epsilon edges), which the subset construction turns into a DFA; each DFA state then gets its
 * distance to acceptance, which the decoder uses to finish the text within its token budget. */
#include "constrain.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpauto.h"
#include "fl_limits.h"

/* ---- the NFA ---- */

typedef struct nst {
    int32_t e1, e2; /* epsilon edges, -1 none */
    int32_t to;     /* the byte-set edge's target, -1 none */
    int32_t set;    /* its byte set (index into nfa.sets) */
} nst;

typedef struct frag {
    int32_t in, out; /* out has no edges yet */
} frag;

/* Where a state came from when it spells a counted automaton (f_cpa of one with cpauto's
   grp and cnt): fid the spelling (0: none), grp the uncounted state, ord the state's place
   among those spelled for it, cnt the count. */
typedef struct ntag {
    int32_t fid, grp, ord, cnt;
} ntag;

/* JSON Schema's types as bits (see TYPES) */
enum { T_NULL = 1, T_BOOL = 2, T_OBJ = 4, T_ARR = 8, T_STR = 16, T_INT = 32, T_FRAC = 64, T_ALL = 127 };

typedef struct nfa {
    nst *s;
    ntag *tag; /* (cap) */
    int32_t n, cap;
    int32_t n_fid;
    uint8_t (*sets)[32];
    int32_t nsets, setcap;
    int32_t max;
    const json_t *root; /* the schema resource $refs resolve in: the schema, or the nearest
                           enclosing subschema with an "$id" (JSON Schema's rule) */
    const json_t *refs[FL_CONSTRAIN_MAX_REFS]; /* the $refs being expanded (recursion) */
    int n_refs;
    int recursion; /* times a $ref is expanded inside itself at most */
    bool cut;      /* some recursion or nesting was cut there */
    int32_t max_depth;
    int32_t max_ws;
    int32_t max_digits;
    int32_t len_states; /* a counted string's character states at most (compile() halves it
                           when the whole automaton is too large) */
    bool shortened;     /* some maxLength beside a pattern or format met len_states */
    uint8_t not_types;  /* the types the keywords around the next value exclude (a 'type'
                           beside its $ref, anyOf or oneOf): T_ bits, read by f_node */
    long type_visits;         /* types_valid's subschemas left to visit */
    const json_t *force_node; /* an object schema that writes ... */
    const char *force_key;    /* ... this property always (a oneOf's tag) */
    fl_err *e;
    int failed;
} nfa;

static int32_t st_new(nfa *N)
{
    if (N->failed)
        return 0;
    if (N->n >= N->max) {
        N->failed = fl_err_set(N->e, FL_ERANGE, "the constraint is too large: its automaton "
                                                "passed %d states", N->max);
        return 0;
    }
    if (N->n == N->cap) {
        int32_t cap = N->cap ? N->cap * 2 : 256;
        nst *s = realloc(N->s, sizeof *s * (size_t)cap);
        if (s)
            N->s = s;
        ntag *t = s ? realloc(N->tag, sizeof *t * (size_t)cap) : NULL;
        if (!t) {
            N->failed = fl_err_set(N->e, FL_ENOMEM, "out of memory");
            return 0;
        }
        N->tag = t;
        N->cap = cap;
    }
    N->s[N->n] = (nst){-1, -1, -1, -1};
    N->tag[N->n] = (ntag){0, 0, 0, 0};
    return N->n++;
}

static void eps(nfa *N, int32_t from, int32_t to)
{
    if (N->failed)
        return;
    nst *x = &N->s[from];
    if (x->e1 < 0)
        x->e1 = to;
    else
        x->e2 = to; /* (never a third: a fragment's out is fresh, and gets at most two) */
}

static int32_t set_add(nfa *N, const uint8_t set[32])
{
    for (int32_t i = 0; i < N->nsets; i++) /* few distinct sets: reuse them */
        if (!memcmp(N->sets[i], set, 32))
            return i;
    if (N->nsets == N->setcap) {
        int32_t cap = N->setcap ? N->setcap * 2 : 32;
        uint8_t(*s)[32] = realloc(N->sets, 32 * (size_t)cap);
        if (!s) {
            N->failed = fl_err_set(N->e, FL_ENOMEM, "out of memory");
            return 0;
        }
        N->sets = s;
        N->setcap = cap;
    }
    memcpy(N->sets[N->nsets], set, 32);
    return N->nsets++;
}

static void set_range(uint8_t set[32], int lo, int hi)
{
    for (int c = lo; c <= hi; c++)
        set[c >> 3] |= (uint8_t)(1u << (c & 7));
}

static frag f_set(nfa *N, const uint8_t set[32])
{
    int32_t a = st_new(N), b = st_new(N);
    int32_t k = set_add(N, set);
    if (!N->failed) {
        N->s[a].to = b;
        N->s[a].set = k;
    }
    return (frag){a, b};
}

static frag f_range(nfa *N, int lo, int hi)
{
    uint8_t set[32] = {0};
    set_range(set, lo, hi);
    return f_set(N, set);
}

static frag f_empty(nfa *N)
{
    int32_t a = st_new(N);
    return (frag){a, a};
}

/* no text at all */
static frag f_none(nfa *N)
{
    int32_t a = st_new(N), b = st_new(N);
    return (frag){a, b};
}

static frag f_cat(nfa *N, frag a, frag b)
{
    eps(N, a.out, b.in);
    return (frag){a.in, b.out};
}

static frag f_lit(nfa *N, const char *p, size_t n)
{
    frag f = f_empty(N);
    for (size_t i = 0; i < n; i++)
        f = f_cat(N, f, f_range(N, (unsigned char)p[i], (unsigned char)p[i]));
    return f;
}

static frag f_alt(nfa *N, frag a, frag b)
{
    int32_t s = st_new(N), t = st_new(N);
    eps(N, s, a.in);
    eps(N, s, b.in);
    eps(N, a.out, t);
    eps(N, b.out, t);
    return (frag){s, t};
}

static frag f_opt(nfa *N, frag a)
{
    int32_t s = st_new(N), t = st_new(N);
    eps(N, s, a.in);
    eps(N, s, t);
    eps(N, a.out, t);
    return (frag){s, t};
}

/* a*: a? with a way back from a's end to its start */
static frag f_star(nfa *N, frag a)
{
    frag f = f_opt(N, a);
    eps(N, a.out, a.in);
    return f;
}

/* ---- JSON's lexical parts ---- */

static frag f_ws(nfa *N)
{
    uint8_t set[32] = {0};
    set_range(set, ' ', ' ');
    set_range(set, '\t', '\t');
    set_range(set, '\n', '\n');
    set_range(set, '\r', '\r');
    if (N->max_ws <= 0)
        return f_star(N, f_set(N, set));
    /* (w (w (w)?)?)?: up to max_ws of them */
    frag f = f_empty(N);
    for (int i = 0; i < N->max_ws && !N->failed; i++)
        f = f_opt(N, f_cat(N, f_set(N, set), f));
    return f;
}

/* One character of a JSON string: unescaped ASCII, an escape, or a valid UTF-8 sequence
   (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF). */
static frag f_char(nfa *N)
{
    uint8_t plain[32] = {0};
    set_range(plain, 0x20, 0x7f);
    plain['"' >> 3] &= (uint8_t)~(1u << ('"' & 7));
    plain['\\' >> 3] &= (uint8_t)~(1u << ('\\' & 7));
    frag c = f_set(N, plain);
    uint8_t esc[32] = {0};
    for (const char *p = "\"\\/bfnrt"; *p; p++)
        set_range(esc, (unsigned char)*p, (unsigned char)*p);
    frag simple = f_set(N, esc);
    uint8_t hex[32] = {0};
    set_range(hex, '0', '9');
    set_range(hex, 'a', 'f');
    set_range(hex, 'A', 'F');
    frag u = f_range(N, 'u', 'u');
    for (int i = 0; i < 4; i++)
        u = f_cat(N, u, f_set(N, hex));
    c = f_alt(N, c, f_cat(N, f_range(N, '\\', '\\'), f_alt(N, simple, u)));
#define CONT() f_range(N, 0x80, 0xbf)
    c = f_alt(N, c, f_cat(N, f_range(N, 0xc2, 0xdf), CONT()));
    c = f_alt(N, c, f_cat(N, f_cat(N, f_range(N, 0xe0, 0xe0), f_range(N, 0xa0, 0xbf)), CONT()));
    c = f_alt(N, c, f_cat(N, f_cat(N, f_range(N, 0xe1, 0xec), CONT()), CONT()));
    c = f_alt(N, c, f_cat(N, f_cat(N, f_range(N, 0xed, 0xed), f_range(N, 0x80, 0x9f)), CONT()));
    c = f_alt(N, c, f_cat(N, f_cat(N, f_range(N, 0xee, 0xef), CONT()), CONT()));
    c = f_alt(N, c, f_cat(N, f_cat(N, f_cat(N, f_range(N, 0xf0, 0xf0), f_range(N, 0x90, 0xbf)),
                                   CONT()), CONT()));
    c = f_alt(N, c, f_cat(N, f_cat(N, f_cat(N, f_range(N, 0xf1, 0xf3), CONT()), CONT()), CONT()));
    c = f_alt(N, c, f_cat(N, f_cat(N, f_cat(N, f_range(N, 0xf4, 0xf4), f_range(N, 0x80, 0x8f)),
                                   CONT()), CONT()));
#undef CONT
    return c;
}

static frag f_string(nfa *N)
{
    frag q = f_range(N, '"', '"');
    return f_cat(N, f_cat(N, q, f_star(N, f_char(N))), f_range(N, '"', '"'));
}

/* Digits 0-9, any number of them, or with max_digits at most max - 1 (after a first one). */
static frag f_more_digits(nfa *N, int max)
{
    if (max <= 0)
        return f_star(N, f_range(N, '0', '9'));
    frag f = f_empty(N);
    for (int i = 1; i < max && !N->failed; i++)
        f = f_opt(N, f_cat(N, f_range(N, '0', '9'), f));
    return f;
}

static frag f_integer(nfa *N)
{
    frag sign = f_opt(N, f_range(N, '-', '-'));
    frag digits = f_alt(N, f_range(N, '0', '0'),
                        f_cat(N, f_range(N, '1', '9'), f_more_digits(N, N->max_digits)));
    return f_cat(N, sign, digits);
}

static frag f_number(nfa *N)
{
    frag frac = f_opt(N, f_cat(N, f_range(N, '.', '.'),
                               f_cat(N, f_range(N, '0', '9'), f_more_digits(N, N->max_digits))));
    uint8_t ee[32] = {0}, pm[32] = {0};
    set_range(ee, 'e', 'e');
    set_range(ee, 'E', 'E');
    set_range(pm, '+', '+');
    set_range(pm, '-', '-');
    frag ex = f_opt(N, f_cat(N, f_cat(N, f_set(N, ee), f_opt(N, f_set(N, pm))),
                             f_cat(N, f_range(N, '0', '9'),
                                   f_more_digits(N, N->max_digits > 0 ? 2 : 0))));
    return f_cat(N, f_cat(N, f_integer(N), frac), ex);
}

static frag f_ws(nfa *N);

/* a given JSON value (enum, const, property names): strings and numbers as jansson writes them
   (the canonical escapes), arrays and objects with JSON's whitespace between their parts */
static frag f_json_literal(nfa *N, const json_t *v)
{
    if (json_is_array(v) || json_is_object(v)) {
        bool arr = json_is_array(v);
        frag f = f_cat(N, f_range(N, arr ? '[' : '{', arr ? '[' : '{'), f_ws(N));
        size_t i = 0;
        const char *key;
        const json_t *x;
        if (arr) {
            json_array_foreach((json_t *)v, i, x)
            {
                if (i)
                    f = f_cat(N, f, f_cat(N, f_range(N, ',', ','), f_ws(N)));
                f = f_cat(N, f, f_cat(N, f_json_literal(N, x), f_ws(N)));
            }
        } else {
            json_object_foreach((json_t *)v, key, x)
            {
                if (i++)
                    f = f_cat(N, f, f_cat(N, f_range(N, ',', ','), f_ws(N)));
                json_t *k = json_string(key);
                f = f_cat(N, f, f_cat(N, k ? f_json_literal(N, k) : f_empty(N), f_ws(N)));
                json_decref(k);
                f = f_cat(N, f, f_cat(N, f_range(N, ':', ':'), f_ws(N)));
                f = f_cat(N, f, f_cat(N, f_json_literal(N, x), f_ws(N)));
            }
        }
        return f_cat(N, f, f_range(N, arr ? ']' : '}', arr ? ']' : '}'));
    }
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s) {
        N->failed = fl_err_set(N->e, FL_ENOMEM, "out of memory");
        return f_empty(N);
    }
    frag f = f_lit(N, s, strlen(s));
    free(s);
    return f;
}

/* ---- lists: arrays and objects ---- */

typedef frag (*item_fn)(nfa *N, const json_t *node, const char *path, int32_t depth);

static frag f_value(nfa *N, const json_t *node, const char *path, int32_t depth);
static void subpath(char *out, size_t n, const char *path, const char *a, const char *b);

/* item k of an array: prefix[k] (prefixItems, at ppath), after them build(node) */
static frag f_item(nfa *N, const json_t *prefix, const char *ppath, int64_t k, item_fn build,
                   const json_t *node, const char *path, int32_t depth)
{
    if (k >= (int64_t)json_array_size(prefix))
        return f_cat(N, build(N, node, path, depth), f_ws(N));
    char p2[FL_CONSTRAIN_PATH], idx[24];
    snprintf(idx, sizeof idx, "%lld", (long long)k);
    subpath(p2, sizeof p2, ppath, "prefixItems", idx);
    return f_cat(N, f_value(N, json_array_get(prefix, k), p2, depth), f_ws(N));
}

/* "[" ws (item ws ("," ws item ws)*)? "]" with min..max items (max < 0: unbounded); item k a
   fresh fragment of prefix[k] (a tuple's, prefixItems at ppath; NULL: none), the others of
   build(node). The items one by one, the optional ones nested from the end (opt(, item
   opt(, item ...))), then, unbounded, a loop of the others. */
static frag f_array(nfa *N, item_fn build, const json_t *node, const char *path, int32_t depth,
                    int64_t mn, int64_t mx, const json_t *prefix, const char *ppath)
{
    frag open = f_cat(N, f_range(N, '[', '['), f_ws(N));
    frag close = f_range(N, ']', ']');
    if (mx == 0)
        return f_cat(N, open, close);
    int64_t np = (int64_t)json_array_size(prefix);
    int64_t K = mx >= 0 ? mx : mn > np ? mn : np > 1 ? np : 1; /* the items built one by one */
    frag tail = f_empty(N);
    if (mx < 0)
        tail = f_star(N, f_cat(N, f_cat(N, f_range(N, ',', ','), f_ws(N)),
                               f_item(N, NULL, ppath, K, build, node, path, depth)));
    for (int64_t i = K - 1; i >= 1 && !N->failed; i--) {
        frag one = f_cat(N, f_cat(N, f_range(N, ',', ','), f_ws(N)),
                         f_item(N, prefix, ppath, i, build, node, path, depth));
        tail = i >= mn ? f_opt(N, f_cat(N, one, tail)) : f_cat(N, one, tail);
    }
    frag items = f_cat(N, f_item(N, prefix, ppath, 0, build, node, path, depth), tail);
    if (mn == 0)
        items = f_opt(N, items);
    return f_cat(N, f_cat(N, open, items), close);
}

static frag f_any(nfa *N, const json_t *node, const char *path, int32_t depth);

static frag f_any_member(nfa *N, const json_t *node, const char *path, int32_t depth)
{
    frag k = f_cat(N, f_cat(N, f_string(N), f_ws(N)), f_cat(N, f_range(N, ':', ':'), f_ws(N)));
    return f_cat(N, k, f_any(N, node, path, depth));
}

/* "{" ws (member ws ("," ws member ws)*)? "}" for any members: a loop over one member */
static frag f_any_object(nfa *N, const char *path, int32_t depth)
{
    if (depth > FL_CONSTRAIN_ANY_DEPTH)
        depth = FL_CONSTRAIN_ANY_DEPTH;
    frag open = f_cat(N, f_range(N, '{', '{'), f_ws(N));
    int32_t L = st_new(N), M = st_new(N), J = st_new(N);
    eps(N, open.out, L);
    eps(N, open.out, J);
    frag m = f_cat(N, f_any_member(N, NULL, path, depth), f_ws(N));
    eps(N, L, m.in);
    eps(N, m.out, M);
    frag comma = f_cat(N, f_range(N, ',', ','), f_ws(N));
    eps(N, M, comma.in);
    eps(N, comma.out, L);
    eps(N, M, J);
    frag close = f_range(N, '}', '}');
    eps(N, J, close.in);
    return (frag){open.in, close.out};
}

/* any JSON value, objects and arrays nested up to the depth left, at most
   FL_CONSTRAIN_ANY_DEPTH (each level holds two copies of the next: objects' values and
   arrays' items cannot share one in a finite automaton) */
static frag f_any(nfa *N, const json_t *node, const char *path, int32_t depth)
{
    (void)node;
    if (depth > FL_CONSTRAIN_ANY_DEPTH)
        depth = FL_CONSTRAIN_ANY_DEPTH;
    frag v = f_alt(N, f_string(N), f_number(N));
    v = f_alt(N, v, f_lit(N, "true", 4));
    v = f_alt(N, v, f_lit(N, "false", 5));
    v = f_alt(N, v, f_lit(N, "null", 4));
    if (depth > 0) {
        v = f_alt(N, v, f_any_object(N, path, depth - 1));
        v = f_alt(N, v, f_array(N, f_any, NULL, path, depth - 1, 0, -1, NULL, path));
    }
    return v;
}

/* ---- the schema ---- */

/* Client text in a message (a key, a name, a path) is cut, but never inside a UTF-8
   character: the message goes on into JSON (a 400's body), which must be valid UTF-8. */
static void utf8_trim(char *s)
{
    size_t n = strlen(s), k = n;
    while (k > 0 && n - k < 4 && ((unsigned char)s[k - 1] & 0xc0) == 0x80)
        k--; /* back over continuation bytes to the last character's first byte */
    if (k == 0 || (unsigned char)s[k - 1] < 0xc0)
        return;
    unsigned char c = (unsigned char)s[k - 1];
    size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
    if (n - (k - 1) < len) /* the last character is cut: drop what is left of it */
        s[k - 1] = 0;
}

/* fmt has one %s: what, at most 64 bytes of it */
static int bad(nfa *N, const char *path, const char *fmt, const char *what)
{
    if (!N->failed) {
        char w[65], m[448]; /* (the longest: the unsupported keyword's list) */
        snprintf(w, sizeof w, "%s", what);
        utf8_trim(w);
        snprintf(m, sizeof m, fmt, w);
        utf8_trim(m);
        N->failed = fl_err_set(N->e, FL_EINVAL, "%s (at %s)", m, path[0] ? path : "the schema's root");
        if (N->e)
            utf8_trim(N->e->msg);
    }
    return -1;
}

/* the first of node's keys that is not in list[0..n), or NULL */
static const char *key_outside(const json_t *node, const char *const *list, size_t n)
{
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)node, key, v)
    {
        bool known = false;
        for (size_t i = 0; i < n && !known; i++)
            known = !strcmp(key, list[i]);
        if (!known)
            return key;
    }
    return NULL;
}

/* the keywords a schema may have; anything else changes what is valid and is refused */
static int check_keys(nfa *N, const json_t *node, const char *path)
{
    static const char *const ok[] = {
        "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
        "enum", "const", "anyOf", "$ref", "$defs", "definitions", "title", "description",
        "$schema", "$id", "$comment", "default", "examples", "deprecated", "readOnly",
        "writeOnly", "nullable", "uniqueItems", "pattern", "format", "minLength",
        "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
        "allOf", "oneOf", "discriminator", "prefixItems"};
    const char *key = key_outside(node, ok, sizeof ok / sizeof ok[0]);
    if (key)
        return bad(N, path, "unsupported keyword '%s' (fogline constrains to OpenAI's strict "
                            "subset and what pydantic adds to it: type, properties, required, "
                            "additionalProperties, items, prefixItems, minItems, maxItems, "
                            "uniqueItems, enum, const, anyOf, oneOf, allOf, $defs, $ref, "
                            "pattern, format, minLength, maxLength, minimum, maximum, "
                            "exclusiveMinimum, exclusiveMaximum, multipleOf, nullable)",
                   key);
    return 0;
}

static void subpath(char *out, size_t n, const char *path, const char *a, const char *b)
{
    snprintf(out, n, "%s/%s%s%s", path, a, b ? "/" : "", b ? b : "");
    utf8_trim(out);
}

static frag f_cpa(nfa *N, const fl_cpa *a, bool json);

/* An extra member's name: any string without properties; else any but theirs, written as
   JSON.stringify writes it (another spelling of a property's name would be that name) */
static frag f_extra_key(nfa *N, const json_t *props, const char *path)
{
    size_t n = json_object_size(props);
    if (!n)
        return f_string(N);
    const char **names = malloc(sizeof *names * n);
    if (!names) {
        N->failed = fl_err_set(N->e, FL_ENOMEM, "out of memory");
        return f_empty(N);
    }
    size_t i = 0;
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)props, key, v) names[i++] = key;
    fl_cpa *a = NULL;
    fl_err le = {0};
    int rc = fl_cpa_except(names, (int32_t)n, &a, &le);
    free(names);
    if (rc) {
        bad(N, path, "'additionalProperties' beside these 'properties': %s", le.msg);
        return f_empty(N);
    }
    frag f = f_cat(N, f_range(N, '"', '"'), f_cpa(N, a, true));
    fl_cpa_free(a);
    return f_cat(N, f, f_range(N, '"', '"'));
}

static frag f_object(nfa *N, const json_t *node, const char *path, int32_t depth)
{
    const json_t *props = json_object_get(node, "properties");
    const json_t *req = json_object_get(node, "required");
    const json_t *addl = json_object_get(node, "additionalProperties");
    if (addl && !json_is_boolean(addl) && !json_is_object(addl))
        bad(N, path, "'additionalProperties' must be a schema, false or true%s", "");
    /* a schema there: members of other names after the properties, each value of it */
    const json_t *extra = json_is_object(addl) ? addl : NULL;
    if (props && !json_is_object(props))
        bad(N, path, "'properties' must be an object%s", "");
    if (req && !json_is_array(req))
        bad(N, path, "'required' must be an array of property names%s", "");
    if (N->failed)
        return f_empty(N);
    /* (before the case without properties, where a required key would otherwise be lost:
       "any object" does not promise one) */
    size_t i;
    const json_t *r;
    json_array_foreach(req, i, r)
    {
        if (!json_is_string(r) || !json_object_get(props, json_string_value(r)))
            return bad(N, path, "'required' names '%s', which is not in 'properties'",
                       json_is_string(r) ? json_string_value(r) : "(not a string)"),
                   f_empty(N);
    }
    if ((!props || !json_object_size(props)) && !extra) {
        /* no properties: {} when nothing else may come, else any object */
        if (json_is_false(addl)) /* "{" ws "}" */
            return f_cat(N, f_cat(N, f_range(N, '{', '{'), f_ws(N)), f_range(N, '}', '}'));
        return f_any_object(N, path, depth);
    }
    /* Members in the schema's order. A_i: nothing written yet before property i; B_i: some
       member written. J_i: property i's member starts (from A_i directly, from B_i after ",").
       A required property cannot be skipped. */
    frag open = f_cat(N, f_range(N, '{', '{'), f_ws(N));
    int32_t A = open.out, B = st_new(N);
    bool can_be_empty = true;
    const char *key;
    const json_t *sub;
    json_object_foreach((json_t *)props, key, sub)
    {
        bool required = node == N->force_node && !strcmp(key, N->force_key);
        json_array_foreach(req, i, r) required |= !strcmp(json_string_value(r), key);
        char p2[FL_CONSTRAIN_PATH];
        subpath(p2, sizeof p2, path, "properties", key);
        json_t *k = json_string(key);
        frag name = f_json_literal(N, k);
        json_decref(k);
        frag member = f_cat(N, f_cat(N, name, f_ws(N)), f_cat(N, f_range(N, ':', ':'), f_ws(N)));
        member = f_cat(N, f_cat(N, member, f_value(N, sub, p2, depth)), f_ws(N));
        int32_t J = st_new(N), A2 = st_new(N), B2 = st_new(N);
        frag comma = f_cat(N, f_range(N, ',', ','), f_ws(N));
        eps(N, A, J);
        eps(N, B, comma.in);
        eps(N, comma.out, J);
        eps(N, J, member.in);
        eps(N, member.out, B2);
        if (!required) { /* skipped: the state carries over */
            eps(N, A, A2);
            eps(N, B, B2);
        }
        can_be_empty &= !required;
        A = A2;
        B = B2;
        if (N->failed)
            return f_empty(N);
    }
    int32_t end = st_new(N);
    if (can_be_empty)
        eps(N, A, end);
    eps(N, B, end);
    if (extra) {
        /* then "name": value of the extra schema, any number of them: from A directly, from B
           and after one another after ","; the names are any but the properties' (those are
           the properties' own values) */
        int32_t J = st_new(N), E = st_new(N);
        frag kname = f_extra_key(N, props, path);
        char p2[FL_CONSTRAIN_PATH];
        subpath(p2, sizeof p2, path, "additionalProperties", NULL);
        frag member = f_cat(N, f_cat(N, kname, f_ws(N)), f_cat(N, f_range(N, ':', ':'), f_ws(N)));
        member = f_cat(N, f_cat(N, member, f_value(N, extra, p2, depth)), f_ws(N));
        frag c1 = f_cat(N, f_range(N, ',', ','), f_ws(N)), c2 = f_cat(N, f_range(N, ',', ','), f_ws(N));
        eps(N, A, J);
        eps(N, B, c1.in);
        eps(N, c1.out, J);
        eps(N, J, member.in);
        eps(N, member.out, E);
        eps(N, E, c2.in);
        eps(N, c2.out, J);
        eps(N, E, end);
        if (N->failed)
            return f_empty(N);
    }
    frag close = f_range(N, '}', '}');
    eps(N, end, close.in);
    return (frag){open.in, close.out};
}

/* ---- strings and numbers constrained character by character (cpauto.h) ---- */

static const char *const str_keys[] = {"pattern", "format", "minLength", "maxLength"};
static const char *const num_keys[] = {"minimum", "maximum", "exclusiveMinimum",
                                       "exclusiveMaximum", "multipleOf"};

/* bad() with a message of its own (an fl_err's) after the keyword */
static int bad_msg(nfa *N, const char *path, const char *key, const char *msg)
{
    if (!N->failed) {
        char m[400];
        snprintf(m, sizeof m, "'%s': %.360s", key, msg);
        utf8_trim(m);
        N->failed = fl_err_set(N->e, FL_EINVAL, "%s (at %s)", m, path[0] ? path : "the schema's root");
        if (N->e)
            utf8_trim(N->e->msg);
    }
    return -1;
}

static void utf8_put(int32_t c, uint8_t *b)
{
    if (c < 0x80) {
        b[0] = (uint8_t)c;
    } else if (c < 0x800) {
        b[0] = (uint8_t)(0xc0 | c >> 6);
        b[1] = (uint8_t)(0x80 | (c & 0x3f));
    } else if (c < 0x10000) {
        b[0] = (uint8_t)(0xe0 | c >> 12);
        b[1] = (uint8_t)(0x80 | (c >> 6 & 0x3f));
        b[2] = (uint8_t)(0x80 | (c & 0x3f));
    } else {
        b[0] = (uint8_t)(0xf0 | c >> 18);
        b[1] = (uint8_t)(0x80 | (c >> 12 & 0x3f));
        b[2] = (uint8_t)(0x80 | (c >> 6 & 0x3f));
        b[3] = (uint8_t)(0x80 | (c & 0x3f));
    }
}

/* One character of lo .. hi in UTF-8, as byte ranges: cut where the encoding's length changes,
   then where lo and hi differ in a leading byte while their continuation bytes do not span
   the whole 0x80-0xbf (RE2's construction). */
static frag f_utf8(nfa *N, int32_t lo, int32_t hi)
{
    static const int32_t top[] = {0x7f, 0x7ff, 0xffff};
    for (int i = 0; i < 3; i++)
        if (lo <= top[i] && top[i] < hi)
            return f_alt(N, f_utf8(N, lo, top[i]), f_utf8(N, top[i] + 1, hi));
    for (int i = 1; i < 4; i++) {
        int32_t m = (1 << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0)
                return f_alt(N, f_utf8(N, lo, lo | m), f_utf8(N, (lo | m) + 1, hi));
            if ((hi & m) != m)
                return f_alt(N, f_utf8(N, lo, (hi & ~m) - 1), f_utf8(N, hi & ~m, hi));
        }
    }
    uint8_t a[4], b[4];
    utf8_put(lo, a);
    utf8_put(hi, b);
    int len = lo < 0x80 ? 1 : lo < 0x800 ? 2 : lo < 0x10000 ? 3 : 4;
    frag f = f_range(N, a[0], b[0]);
    for (int k = 1; k < len; k++)
        f = f_cat(N, f, f_range(N, a[k], b[k]));
    return f;
}

/* One character of the pairs r[0..2n), in UTF-8; in a JSON string (json) as JSON.stringify
   writes it: `"` and `\` escaped, the controls as \b \t \n \f \r or \u00xx, the rest raw. The
   one-byte characters are one edge, the escapes one small tree (`\`, then a letter or `u00`
   and two hex digits): a string of n characters has n copies of this. */
static frag f_chars(nfa *N, const int32_t *r, int32_t n, bool json)
{
    frag f = {0, 0};
    bool have = false, any_ascii = false, any_short = false, any_hex[2] = {false, false};
    uint8_t ascii[32] = {0}, shrt[32] = {0}, hex[2][32] = {{0}, {0}};
    for (int32_t i = 0; i < n && !N->failed; i++) {
        for (int32_t a = r[2 * i], hi = r[2 * i + 1]; a <= hi && !N->failed;) {
            if (json && (a < 0x20 || a == '"' || a == '\\')) {
                int sh = a == 8 ? 'b' : a == 9 ? 't' : a == 10 ? 'n' : a == 12 ? 'f' : a == 13 ? 'r'
                         : a == '"' ? '"' : a == '\\' ? '\\' : 0;
                if (sh) {
                    set_range(shrt, sh, sh);
                    any_short = true;
                } else {
                    int d = "0123456789abcdef"[a & 15];
                    set_range(hex[a >> 4], d, d);
                    any_hex[a >> 4] = true;
                }
                a++;
                continue;
            }
            int32_t b = hi;
            if (json && a < '"' && b >= '"')
                b = '"' - 1;
            else if (json && a < '\\' && b >= '\\')
                b = '\\' - 1;
            else if (a < 0x80 && b >= 0x80)
                b = 0x7f;
            if (b < 0x80) {
                set_range(ascii, a, b);
                any_ascii = true;
            } else {
                frag g = f_utf8(N, a, b);
                f = have ? f_alt(N, f, g) : g;
                have = true;
            }
            a = b + 1;
        }
    }
    if (any_ascii) {
        frag g = f_set(N, ascii);
        f = have ? f_alt(N, f, g) : g;
        have = true;
    }
    if (any_short || any_hex[0] || any_hex[1]) {
        frag e = {0, 0};
        bool he = false;
        if (any_short) {
            e = f_set(N, shrt);
            he = true;
        }
        if (any_hex[0] || any_hex[1]) {
            frag u = {0, 0};
            for (int k = 0; k < 2; k++) {
                if (!any_hex[k])
                    continue;
                frag g = f_cat(N, f_range(N, '0' + k, '0' + k), f_set(N, hex[k]));
                u = k && any_hex[0] ? f_alt(N, u, g) : g;
            }
            u = f_cat(N, f_lit(N, "u00", 3), u);
            e = he ? f_alt(N, e, u) : u;
        }
        frag g = f_cat(N, f_range(N, '\\', '\\'), e);
        f = have ? f_alt(N, f, g) : g;
        have = true;
    }
    return have ? f : f_empty(N); /* (never: a live state's class has characters) */
}

/* The automaton over characters, spelled in bytes: a state per state, and for each of its
   targets one fragment of the characters that lead there. */
static frag f_cpa(nfa *N, const fl_cpa *a, bool json)
{
    int32_t n = a->n, c = a->ncls;
    int32_t *node = malloc(sizeof(int32_t) * (size_t)n);
    int32_t *stamp = calloc((size_t)n, sizeof(int32_t));
    int32_t *tg = malloc(sizeof(int32_t) * (size_t)c);
    int32_t *r = malloc(sizeof(int32_t) * 2 * (size_t)c);
    int32_t *slot = malloc(sizeof(int32_t) * (size_t)n), *cnt = malloc(sizeof(int32_t) * (size_t)c);
    int32_t *ord = malloc(sizeof(int32_t) * (size_t)c);
    frag res = {0, 0};
    if (!node || !stamp || !tg || !r || !slot || !cnt || !ord) {
        N->failed = fl_err_set(N->e, FL_ENOMEM, "out of memory");
        goto out;
    }
    for (int32_t s = 0; s < n; s++)
        node[s] = st_new(N);
    int32_t end = st_new(N), fid = a->grp ? ++N->n_fid : 0;
    for (int32_t s = 0; s < n && !N->failed; s++) {
        int32_t first = N->n; /* the states spelled for s: tagged below */
        /* the classes grouped by target, in class order within a group (a counting sort over
           the targets met: tg[i] the i-th target, cnt its classes' start in ord) */
        const int32_t *row = a->next + (size_t)s * (size_t)c;
        int32_t nt = 0;
        for (int32_t k = 0; k < c; k++) {
            int32_t t = row[k];
            if (t < 0)
                continue;
            if (stamp[t] != s + 1) {
                stamp[t] = s + 1;
                slot[t] = nt;
                tg[nt] = t;
                cnt[nt++] = 0;
            }
            cnt[slot[t]]++;
        }
        for (int32_t i = 0, acc = 0; i < nt; i++) {
            int32_t x = cnt[i];
            cnt[i] = acc;
            acc += x;
        }
        for (int32_t k = 0; k < c; k++)
            if (row[k] >= 0)
                ord[cnt[slot[row[k]]]++] = k;
        int32_t at = node[s], items = nt + (a->accept[s] ? 1 : 0);
        for (int32_t i = 0, o = 0; i < items && !N->failed; i++) {
            int32_t in = end;
            if (i < nt) {
                int32_t nr = 0;
                for (; o < cnt[i]; o++) {
                    int32_t k = ord[o];
                    if (nr && r[2 * nr - 1] + 1 == a->lo[k])
                        r[2 * nr - 1] = a->lo[k + 1] - 1;
                    else
                        r[2 * nr] = a->lo[k], r[2 * nr + 1] = a->lo[k + 1] - 1, nr++;
                }
                frag g = f_chars(N, r, nr, json);
                eps(N, g.out, node[tg[i]]);
                in = g.in;
            }
            if (i + 1 < items) { /* a state has two epsilon edges: chain the rest */
                int32_t nx = st_new(N);
                eps(N, at, in);
                eps(N, at, nx);
                at = nx;
            } else {
                eps(N, at, in);
            }
        }
        if (fid && !N->failed) {
            N->tag[node[s]] = (ntag){fid, a->grp[s], 0, a->cnt[s]};
            for (int32_t x = first; x < N->n; x++)
                N->tag[x] = (ntag){fid, a->grp[s], 1 + x - first, a->cnt[s]};
        }
    }
    res = (frag){node[0], end};
out:
    free(node);
    free(stamp);
    free(tg);
    free(r);
    free(slot);
    free(cnt);
    free(ord);
    return res;
}

/* ajv-formats' number formats (OpenAPI's): int32 and int64 are integers (int32 within 32 bits;
   int64's range is wider than FL_CONSTRAIN_BOUND_DIGITS anyway), float and double any number.
   0 when the format is none of them (a string's, or none). */
static int num_format(const json_t *node)
{
    const char *f = json_string_value(json_object_get(node, "format"));
    if (!f)
        return 0;
    return !strcmp(f, "int32") ? 32 : !strcmp(f, "int64") ? 64
           : !strcmp(f, "float") || !strcmp(f, "double") ? 1 : 0;
}

/* A product with a length counter (cnt: each character counts one), built for lengths up to
   hi: the longest limit in lo .. hi under which it keeps at most room states (lo when none
   does). Under a limit L it keeps the states whose nearest whole value is within L characters
   of the start (their count and the count of the accepting state they reach first), as the
   product built with L would. -1 when out of memory. */
static int64_t longest_fit(const fl_cpa *r, int64_t lo, int64_t hi, int32_t room)
{
    int32_t n = r->n, c = r->ncls;
    int32_t *need = malloc(sizeof(int32_t) * (size_t)n), *ord = malloc(sizeof(int32_t) * (size_t)n);
    int64_t *hist = calloc((size_t)hi + 2, sizeof(int64_t));
    int64_t fit = -1;
    if (!need || !ord || !hist || !r->cnt)
        goto out;
    /* the states by count, highest first (a counting sort): a transition counts one up */
    for (int32_t s = 0; s < n; s++)
        hist[r->cnt[s] < 0 ? 0 : r->cnt[s] > hi ? hi : r->cnt[s]]++;
    for (int64_t k = hi, at = 0; k >= 0; k--) {
        int64_t x = hist[k];
        hist[k] = at;
        at += x;
    }
    for (int32_t s = 0; s < n; s++)
        ord[hist[r->cnt[s] < 0 ? 0 : r->cnt[s] > hi ? hi : r->cnt[s]]++] = s;
    for (int32_t i = 0; i < n; i++) {
        int32_t s = ord[i];
        need[s] = r->accept[s] ? r->cnt[s] : INT32_MAX;
        for (int32_t k = 0; k < c; k++) {
            int32_t t = r->next[(size_t)s * (size_t)c + (size_t)k];
            if (t >= 0 && need[t] < need[s])
                need[s] = need[t];
        }
    }
    memset(hist, 0, sizeof(int64_t) * ((size_t)hi + 2));
    for (int32_t s = 0; s < n; s++)
        if (need[s] != INT32_MAX && need[s] <= hi)
            hist[need[s]]++;
    fit = lo;
    for (int64_t k = 0, kept = 1; k <= hi; k++) { /* (the start stays in any case) */
        kept += hist[k];
        if (k >= lo && kept <= room)
            fit = k;
    }
out:
    free(need);
    free(ord);
    free(hist);
    return fit;
}

/* a string under pattern, format, minLength, maxLength */
static frag f_string_of(nfa *N, const json_t *node, const char *path)
{
    const json_t *pat = json_object_get(node, "pattern"), *fmt = json_object_get(node, "format");
    if (num_format(node)) /* (a number's format: nothing to a string) */
        fmt = NULL;
    const json_t *mn = json_object_get(node, "minLength"), *mx = json_object_get(node, "maxLength");
    if (!pat && !fmt && !mn && !mx)
        return f_string(N);
    if ((pat && !json_is_string(pat)) || (fmt && !json_is_string(fmt)))
        return bad(N, path, "'pattern' and 'format' must be strings%s", ""), f_empty(N);
    if (pat && json_string_length(pat) != strlen(json_string_value(pat)))
        return bad(N, path, "'pattern' holds a NUL character (write it as \\u0000)%s", ""),
               f_empty(N);
    if ((mn && (!json_is_integer(mn) || json_integer_value(mn) < 0)) ||
        (mx && (!json_is_integer(mx) || json_integer_value(mx) < 0)))
        return bad(N, path, "'minLength' and 'maxLength' must be integers >= 0%s", ""), f_empty(N);
    int64_t lo = mn ? json_integer_value(mn) : 0, hi = mx ? json_integer_value(mx) : -1;
    if (hi >= 0 && lo > hi)
        return bad(N, path, "'minLength' is above 'maxLength'%s", ""), f_empty(N);
    if (lo > FL_CONSTRAIN_MAX_LENGTH)
        return bad(N, path, "'minLength' above %s is not supported", FL_STR(FL_CONSTRAIN_MAX_LENGTH)),
               f_empty(N);
    if (hi > FL_CONSTRAIN_MAX_LENGTH) /* written shorter: still valid */
        hi = FL_CONSTRAIN_MAX_LENGTH;
    fl_err le = {0};
    fl_cpa *acc = NULL, *b;
    if (pat) {
        if (fl_cpa_regex(json_string_value(pat), false, &b, &le))
            return bad_msg(N, path, "pattern", le.msg), f_empty(N);
        acc = b;
    }
    if (fmt) {
        if (fl_cpa_format(json_string_value(fmt), &b, &le) || fl_cpa_and_into(&acc, b, &le)) {
            fl_cpa_free(acc);
            char m[400];
            snprintf(m, sizeof m, "'%.64s' is an %.300s", json_string_value(fmt), le.msg);
            return bad_msg(N, path, "format", m), f_empty(N);
        }
    }
    if (mn || mx) {
        /* a maxLength whose count times the pattern's states passes N->len_states
           (FL_CONSTRAIN_LENGTH_STATES, less when the schema is large) writes shorter strings
           (still valid), down to minLength: the longest that fits (longest_fit) */
        int64_t most = acc ? FL_CPA_MAX_STATES / acc->n - 1 : hi; /* (n x (hi + 1) states) */
        if (hi > most)
            hi = most > lo ? most : lo;
        fl_cpa *r = NULL;
        /* first up to a limit whose product likely passes the room (twice what surely
           fits), the whole of hi only when that one does not: products cost their size */
        int64_t cap = acc && hi > lo ? lo + 2 * (int64_t)N->len_states / acc->n : hi;
        if (cap > hi)
            cap = hi;
        for (bool last = false;;) {
            if (fl_cpa_length(lo, cap, &b, &le) || (acc && fl_cpa_and(acc, b, &r, &le))) {
                fl_cpa_free(b);
                fl_cpa_free(acc);
                return bad_msg(N, path, mn ? "minLength" : "maxLength", le.msg), f_empty(N);
            }
            if (!acc) {
                r = b;
                break;
            }
            fl_cpa_free(b);
            if (last || cap < 0 || cap <= lo)
                break;
            if (r->n <= N->len_states) {
                if (cap == hi)
                    break;
                cap = hi; /* all of it fits so far: try the whole */
            } else {
                int64_t fit = longest_fit(r, lo, cap, N->len_states);
                if (fit < 0) {
                    fl_cpa_free(r);
                    fl_cpa_free(acc);
                    return bad(N, path, "out of memory%s", ""), f_empty(N);
                }
                N->shortened = true;
                cap = fit;
                last = true;
            }
            fl_cpa_free(r);
            r = NULL;
        }
        fl_cpa_free(acc);
        acc = r;
    }
    if (fl_cpa_empty(acc)) {
        fl_cpa_free(acc);
        return bad(N, path, "no string satisfies the schema's pattern, format and lengths%s", ""),
               f_empty(N);
    }
    frag f = f_cat(N, f_range(N, '"', '"'), f_cpa(N, acc, true));
    fl_cpa_free(acc);
    return f_cat(N, f, f_range(N, '"', '"'));
}

/* A bound's value; its decimal the shortest that reads back as the same double (what a
   validator compares with). */
static int bound_at(nfa *N, double x, const char *key, bool strict, bool lower, fl_dec_bound *b,
                    double *bv, const char **which, const char *path)
{
    fl_dec_bound d;
    if (fl_dec_from_double(x, &d))
        return bad(N, path, "'%s' is too large or too small (|x| within 1e-25 .. 1e40)", key);
    /* the tighter of minimum/exclusiveMinimum (maximum/...); at a tie the exclusive one */
    if (b->set && (lower ? x < *bv : x > *bv))
        return 0;
    if (b->set && x == *bv && !strict)
        return 0;
    *b = d;
    b->set = true;
    b->strict = strict;
    *bv = x;
    *which = key;
    return 0;
}

static int num_bound(nfa *N, const json_t *node, const char *key, bool strict, bool lower,
                     fl_dec_bound *b, double *bv, const char **which, const char *path)
{
    const json_t *v = json_object_get(node, key);
    if (!v)
        return 0;
    if (!json_is_number(v))
        return bad(N, path, "'%s' must be a number", key);
    return bound_at(N, json_number_value(v), key, strict, lower, b, bv, which, path);
}


/* a number (integer) under minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf */
static frag f_number_of(nfa *N, const json_t *node, bool integer, const char *path)
{
    int nf = num_format(node);
    bool any = nf >= 32;
    integer |= nf >= 32;
    for (size_t i = 0; i < sizeof num_keys / sizeof num_keys[0]; i++)
        any |= json_object_get(node, num_keys[i]) != NULL;
    if (!any)
        return integer ? f_integer(N) : f_number(N);
    fl_dec_bound lo = {0}, hi = {0};
    double lv = 0, hv = 0;
    const char *lk = NULL, *hk = NULL;
    if (num_bound(N, node, "minimum", false, true, &lo, &lv, &lk, path) ||
        num_bound(N, node, "exclusiveMinimum", true, true, &lo, &lv, &lk, path) ||
        num_bound(N, node, "maximum", false, false, &hi, &hv, &hk, path) ||
        num_bound(N, node, "exclusiveMaximum", true, false, &hi, &hv, &hk, path) ||
        (nf == 32 && (bound_at(N, -2147483648.0, "format", false, true, &lo, &lv, &lk, path) ||
                      bound_at(N, 2147483647.0, "format", false, false, &hi, &hv, &hk, path))))
        return f_empty(N);
    if (lo.set && hi.set && lv > hv) {
        char m[80];
        snprintf(m, sizeof m, "'%s' is above '%s'", lk, hk);
        return bad(N, path, "%s", m), f_empty(N);
    }
    int64_t p = 0;
    int32_t q = 0;
    const json_t *m = json_object_get(node, "multipleOf");
    if (m) {
        fl_dec_bound d;
        if (!json_is_number(m) || !(json_number_value(m) > 0))
            return bad(N, path, "'multipleOf' must be a number above 0%s", ""), f_empty(N);
        if (fl_dec_from_double(json_number_value(m), &d))
            return bad(N, path, "'multipleOf' is too large or too small%s", ""), f_empty(N);
        /* m = p / 10^q */
        q = (int32_t)strlen(d.frac);
        char digits[100];
        snprintf(digits, sizeof digits, "%s%s", d.digits, d.frac);
        for (const char *c = digits; *c && p <= FL_CONSTRAIN_MAX_STATES; c++)
            p = p * 10 + (*c - '0');
        if (p > FL_CONSTRAIN_MAX_STATES)
            return bad(N, path, "'multipleOf' needs too large an automaton (its digits, without "
                                "the point, above %s)", FL_STR(FL_CONSTRAIN_MAX_STATES)),
                   f_empty(N);
    }
    int32_t digits = FL_CONSTRAIN_BOUND_DIGITS;
    fl_err le = {0};
    fl_cpa *a;
    if (fl_cpa_number(&lo, &hi, integer, digits, p, q, &a, &le))
        return bad_msg(N, path, m ? "multipleOf" : "minimum", le.msg), f_empty(N);
    if (fl_cpa_empty(a)) {
        fl_cpa_free(a);
        return bad(N, path, "no number of at most " FL_STR(FL_CONSTRAIN_BOUND_DIGITS)
                            " digits satisfies the schema's bounds and multipleOf%s", ""),
               f_empty(N);
    }
    frag f = f_cpa(N, a, false);
    fl_cpa_free(a);
    return f;
}

static const char *const obj_keys[] = {"properties", "required", "additionalProperties"};
static const char *const arr_keys[] = {"items", "minItems", "maxItems", "prefixItems", "uniqueItems"};

/* String keywords need a type that includes "string", number keywords one that includes
   "number" or "integer" (elsewhere they would not constrain anything, and a reader would
   think they did); object and array keywords a type that includes "object" or "array", or
   none (then they constrain the objects or arrays among any values). None of them stands
   beside $ref, const, enum, anyOf or oneOf (their intersection). */
static int check_typed_keys(nfa *N, const json_t *node, const char *path)
{
    for (int pass = 0; pass < 4; pass++) {
        static const char *const *const lists[] = {str_keys, num_keys, obj_keys, arr_keys};
        static const size_t sizes[] = {sizeof str_keys / sizeof str_keys[0],
                                       sizeof num_keys / sizeof num_keys[0], 3, 5};
        static const char *const need[][2] = {{"string", "string"}, {"number", "integer"},
                                              {"object", "object"}, {"array", "array"}};
        const char *const *keys = lists[pass];
        const char *key = NULL;
        bool nf = num_format(node) != 0; /* (format int32 ... is a number keyword) */
        for (size_t i = 0; i < sizes[pass] && !key; i++)
            if (json_object_get(node, keys[i]) && !(nf && !strcmp(keys[i], "format")))
                key = keys[i];
        if (!key && pass == 1 && nf)
            key = "format";
        if (!key)
            continue;
        if (json_object_get(node, "$ref") || json_object_get(node, "const") ||
            json_object_get(node, "enum") || json_object_get(node, "anyOf") ||
            json_object_get(node, "oneOf"))
            return bad(N, path, "'%s' beside $ref, const, enum, anyOf or oneOf is not supported", key);
        const json_t *type = json_object_get(node, "type");
        if (!type && pass >= 2)
            continue;
        bool ok = false;
        for (size_t i = 0; i < (json_is_array(type) ? json_array_size(type) : 1); i++) {
            const char *t = json_string_value(json_is_array(type) ? json_array_get(type, i) : type);
            ok |= t && (!strcmp(t, need[pass][0]) || !strcmp(t, need[pass][1]));
        }
        if (!ok)
            return bad(N, path, pass == 1 ? "'%s' needs a 'type' that includes \"number\" or \"integer\""
                                : pass == 0 ? "'%s' needs a 'type' that includes \"string\""
                                : pass == 2 ? "'%s' needs a 'type' that includes \"object\" (or none)"
                                            : "'%s' needs a 'type' that includes \"array\" (or none)",
                       key);
    }
    return 0;
}

static frag f_unique(nfa *N, const json_t *items, const char *path, int64_t lo, int64_t hi);

/* some $ref is being expanded inside itself */
static bool recursing(const nfa *N)
{
    for (int i = 0; i < N->n_refs; i++)
        for (int j = 0; j < i; j++)
            if (N->refs[i] == N->refs[j])
                return true;
    return false;
}

static frag f_typed(nfa *N, const json_t *node, const char *type, const char *path, int32_t depth)
{
    if (!strcmp(type, "string"))
        return f_string_of(N, node, path);
    if (!strcmp(type, "number"))
        return f_number_of(N, node, false, path);
    if (!strcmp(type, "integer"))
        return f_number_of(N, node, true, path);
    if (!strcmp(type, "boolean"))
        return f_alt(N, f_lit(N, "true", 4), f_lit(N, "false", 5));
    if (!strcmp(type, "null"))
        return f_lit(N, "null", 4);
    if (!strcmp(type, "object") || !strcmp(type, "array")) {
        if (depth <= 0 && N->recursion > 0 && recursing(N)) { /* (a way out may remain) */
            N->cut = true;
            return f_none(N);
        }
        if (depth <= 0) {
            bad(N, path, "the schema nests objects and arrays deeper than %s levels", "the allowed");
            return f_empty(N);
        }
        if (!strcmp(type, "object"))
            return f_object(N, node, path, depth - 1);
        const json_t *items = json_object_get(node, "items");
        const json_t *mn = json_object_get(node, "minItems"), *mx = json_object_get(node, "maxItems");
        if ((mn && (!json_is_integer(mn) || json_integer_value(mn) < 0)) ||
            (mx && (!json_is_integer(mx) || json_integer_value(mx) < 0))) {
            bad(N, path, "'minItems' and 'maxItems' must be integers >= 0%s", "");
            return f_empty(N);
        }
        int64_t lo = mn ? json_integer_value(mn) : 0, hi = mx ? json_integer_value(mx) : -1;
        if (hi >= 0 && lo > hi) {
            bad(N, path, "'minItems' is above 'maxItems'%s", "");
            return f_empty(N);
        }
        if (lo > FL_CONSTRAIN_MAX_ITEMS || hi > FL_CONSTRAIN_MAX_ITEMS) {
            bad(N, path, "'minItems'/'maxItems' above %s are not supported", FL_STR(FL_CONSTRAIN_MAX_ITEMS));
            return f_empty(N);
        }
        if (items && !json_is_object(items) && !json_is_boolean(items)) {
            bad(N, path, "'items' must be one schema (an object, or true or false)%s", "");
            return f_empty(N);
        }
        const json_t *uq = json_object_get(node, "uniqueItems");
        if (uq && !json_is_boolean(uq)) {
            bad(N, path, "'uniqueItems' must be true or false%s", "");
            return f_empty(N);
        }
        /* a tuple (JSON Schema 2020-12, pydantic's Tuple[int, str]): prefixItems' schemas
           first, items' after them (false: no more) */
        const json_t *prefix = json_object_get(node, "prefixItems");
        if (json_is_true(uq)) {
            if (prefix) {
                bad(N, path, "'uniqueItems' beside 'prefixItems' is not supported%s", "");
                return f_empty(N);
            }
            return f_unique(N, json_is_object(items) ? items : NULL, path, lo, hi);
        }
        if (prefix && (!json_is_array(prefix) || !json_array_size(prefix))) {
            bad(N, path, "'prefixItems' must be a non-empty array of schemas%s", "");
            return f_empty(N);
        }
        if (json_array_size(prefix) > FL_CONSTRAIN_MAX_ITEMS) {
            bad(N, path, "'prefixItems' of more than %s schemas is not supported", FL_STR(FL_CONSTRAIN_MAX_ITEMS));
            return f_empty(N);
        }
        if (json_is_false(items) && (hi < 0 || hi > (int64_t)json_array_size(prefix)))
            hi = (int64_t)json_array_size(prefix);
        if (lo > hi && hi >= 0) {
            bad(N, path, "'minItems' is above the items 'prefixItems' and 'items' false allow%s", "");
            return f_empty(N);
        }
        char p2[FL_CONSTRAIN_PATH];
        subpath(p2, sizeof p2, path, "items", NULL);
        return f_array(N, json_is_object(items) ? f_value : f_any, json_is_object(items) ? items : NULL,
                       p2, depth - 1, lo, hi, prefix, path);
    }
    bad(N, path, "unknown type '%s' (string, number, integer, boolean, null, object, array)", type);
    return f_empty(N);
}

/* "#/$defs/name", "#/definitions/name" or "#", in the schema resource root; NULL if none */
static const json_t *lookup_ref(const json_t *root, const char *ref)
{
    const char *name = NULL;
    const json_t *defs = NULL;
    if (!strncmp(ref, "#/$defs/", 8)) {
        defs = json_object_get(root, "$defs");
        name = ref + 8;
    } else if (!strncmp(ref, "#/definitions/", 14)) {
        defs = json_object_get(root, "definitions");
        name = ref + 14;
    } else if (!strcmp(ref, "#")) {
        return root;
    }
    const json_t *t = name && !strchr(name, '/') ? json_object_get(defs, name) : NULL;
    return t && json_is_object(t) ? t : NULL;
}

/* the same, in the current schema resource, with the error */
static const json_t *resolve_ref(nfa *N, const char *ref, const char *path)
{
    const json_t *t = lookup_ref(N->root, ref);
    if (!t)
        bad(N, path, "'$ref' '%s' does not name a schema under #/$defs or #/definitions", ref);
    return t;
}

static frag f_node(nfa *N, const json_t *node, const char *path, int32_t depth);

/* A subschema with an "$id" is a schema resource of its own: the $refs inside it resolve in
   it, as JSON Schema says (a tool's parameters wrapped into a call's schema keep their $defs
   so). */
static frag f_value(nfa *N, const json_t *node, const char *path, int32_t depth)
{
    const json_t *root = N->root;
    if (json_is_object(node) && json_is_string(json_object_get(node, "$id")))
        N->root = node;
    frag f = f_node(N, node, path, depth);
    N->root = root;
    return f;
}

/* ---- the types a value may have ---- */

/* A value may have to satisfy a 'type' beside its $ref, anyOf or oneOf as well (their
   intersection, as JSON Schema says): the types are bits, handed on to the schemas the value
   is compiled from. "number" is an integer or a number with a fraction; an integral number is
   an integer whatever its spelling (1.0), as JSON Schema says. */
static const struct {
    const char *name;
    unsigned bits;
} TYPES[] = {{"string", T_STR}, {"number", T_INT | T_FRAC}, {"integer", T_INT},
             {"boolean", T_BOOL}, {"null", T_NULL}, {"object", T_OBJ}, {"array", T_ARR}};

static unsigned type_bits(const char *t)
{
    for (size_t i = 0; t && i < sizeof TYPES / sizeof TYPES[0]; i++)
        if (!strcmp(t, TYPES[i].name))
            return TYPES[i].bits;
    return 0;
}

/* what a 'type' keyword names, without checking it */
static unsigned type_bits_of(const json_t *type)
{
    unsigned b = json_is_string(type) ? type_bits(json_string_value(type)) : 0;
    size_t i;
    const json_t *v;
    json_array_foreach(type, i, v) b |= type_bits(json_string_value(v));
    return b;
}

static unsigned value_type(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_NULL:
        return T_NULL;
    case JSON_TRUE:
    case JSON_FALSE:
        return T_BOOL;
    case JSON_OBJECT:
        return T_OBJ;
    case JSON_ARRAY:
        return T_ARR;
    case JSON_STRING:
        return T_STR;
    case JSON_INTEGER:
        return T_INT;
    default: {
        double d = json_real_value(v);
        return d == floor(d) ? T_INT : T_FRAC;
    }
    }
}

/* the types node's 'type' names (T_ALL without one); 0 with the error set */
static unsigned type_kw(nfa *N, const json_t *node, const char *path)
{
    const json_t *type = json_object_get(node, "type"), *nul = json_object_get(node, "nullable");
    if (nul && (!json_is_boolean(nul) || (json_is_true(nul) && !type)))
        return bad(N, path, "'nullable' (OpenAPI 3.0's) must be true or false, beside a 'type'%s",
                   ""),
               0;
    if (!type)
        return T_ALL;
    size_t n = json_is_array(type) ? json_array_size(type) : json_is_string(type) ? 1 : 0;
    unsigned m = 0;
    for (size_t i = 0; i < n || !n; i++) {
        const char *t = json_string_value(json_is_array(type) ? json_array_get(type, i) : type);
        if (!t || !n)
            return bad(N, path, "'type' must be a type name or a non-empty array of them%s", ""), 0;
        unsigned b = type_bits(t);
        if (!b)
            return bad(N, path, "unknown type '%s' (string, number, integer, boolean, null, object, "
                                "array)", t),
                   0;
        m |= b;
    }
    return json_is_true(nul) ? m | T_NULL : m;
}

/* An over-estimate of the types of the values valid for s, within m: what its 'type',
   'const', 'enum', '$ref', 'allOf', 'anyOf' and 'oneOf' say (errors are the compiler's).
   *left bounds the subschemas visited (N->type_visits, for the whole schema: definitions
   naming each other through anyOfs would be visited exponentially often): past it, m. */
static unsigned types_valid(const json_t *root, const json_t *s, unsigned m, int hops, long *left)
{
    if (!json_is_object(s) || hops > FL_CONSTRAIN_MAX_REFS || --*left < 0)
        return m;
    if (json_is_string(json_object_get(s, "$id")))
        root = s;
    const json_t *t = json_object_get(s, "type"), *v;
    size_t i;
    if (t) {
        unsigned b = json_is_string(t) ? type_bits(json_string_value(t)) : 0;
        json_array_foreach(t, i, v) b |= type_bits(json_string_value(v));
        m &= b | (json_is_true(json_object_get(s, "nullable")) ? T_NULL : 0);
    }
    if ((v = json_object_get(s, "const")))
        m &= value_type(v);
    const json_t *en = json_object_get(s, "enum"), *ref = json_object_get(s, "$ref");
    if (json_is_array(en)) {
        unsigned b = 0;
        json_array_foreach(en, i, v) b |= value_type(v);
        m &= b;
    }
    if (json_is_string(ref))
        m &= types_valid(root, lookup_ref(root, json_string_value(ref)), m, hops + 1, left);
    json_array_foreach(json_object_get(s, "allOf"), i, v) m &= types_valid(root, v, m, hops + 1, left);
    for (int k = 0; k < 2; k++) {
        const json_t *alts = json_object_get(s, k ? "oneOf" : "anyOf");
        if (!json_is_array(alts))
            continue;
        unsigned b = 0;
        json_array_foreach(alts, i, v) b |= types_valid(root, v, m, hops + 1, left);
        m &= b;
    }
    return m;
}

/* s through its '$ref's and 'allOf's of one: the schema f_node compiles in its place; *root
   the schema resource that one is in. NULL if a $ref names nothing. */
static const json_t *same_value_node(const json_t *s, const json_t **root)
{
    for (int hops = 0; json_is_object(s) && hops <= FL_CONSTRAIN_MAX_REFS; hops++) {
        if (json_is_string(json_object_get(s, "$id")))
            *root = s;
        const json_t *all = json_object_get(s, "allOf"), *ref = json_object_get(s, "$ref");
        if (json_is_array(all) && json_array_size(all) == 1)
            s = json_array_get(all, 0);
        else if (json_is_string(ref))
            s = lookup_ref(*root, json_string_value(ref));
        else
            return s;
    }
    return NULL;
}

/* JSON values equal as a validator compares them (1 and 1.0 are one number); *work counts
   the values compared */
static bool same_json(const json_t *a, const json_t *b, long *work)
{
    ++*work;
    if (json_is_number(a) && json_is_number(b))
        return json_number_value(a) == json_number_value(b);
    if (json_typeof(a) != json_typeof(b))
        return false;
    size_t i;
    const char *k;
    const json_t *v;
    if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b))
            return false;
        json_array_foreach((json_t *)a, i, v) if (!same_json(v, json_array_get(b, i), work)) return false;
        return true;
    }
    if (json_is_object(a)) {
        if (json_object_size(a) != json_object_size(b))
            return false;
        json_object_foreach((json_t *)a, k, v) if (!json_object_get(b, k) ||
                                                   !same_json(v, json_object_get(b, k), work)) return false;
        return true;
    }
    return json_equal(a, b);
}

/* The values an object schema R (in resource root) allows its property p: its 'const' or
   'enum', of the types its 'type' allows, as a new array; NULL when p has neither (or R has
   no property p). */
static json_t *tag_values(const json_t *R, const json_t *root, const char *p)
{
    const json_t *ps = json_object_get(json_object_get(R, "properties"), p);
    ps = same_value_node(ps, &root);
    const json_t *c = json_object_get(ps, "const"), *en = json_object_get(ps, "enum"), *v;
    if (!c && !json_is_array(en))
        return NULL;
    unsigned m = type_bits(json_string_value(json_object_get(ps, "type")));
    size_t i;
    json_array_foreach(json_object_get(ps, "type"), i, v) m |= type_bits(json_string_value(v));
    if (!json_object_get(ps, "type"))
        m = T_ALL;
    json_t *out = json_array();
    if (c && (value_type(c) & m))
        json_array_append(out, (json_t *)c);
    json_array_foreach(c ? NULL : en, i, v) if (value_type(v) & m) json_array_append(out, (json_t *)v);
    return out;
}

static bool disjoint(const json_t *x, const json_t *y, long *work)
{
    size_t i, j;
    const json_t *a, *b;
    json_array_foreach((json_t *)x, i, a) json_array_foreach((json_t *)y, j, b) if (same_json(a, b, work)) return false;
    return true;
}

/* A oneOf is written as its schemas' union when no value written for one of them is valid
   for another, which is proved here pair by pair: what their types may be (types_valid)
   meets nowhere, or only in objects, and both are object schemas whose property p (the
   tag: the discriminator's propertyName, else the first of the first object schema's
   properties that tells them all apart) has const or enum values, none shared. The tag is
   then always written (force_node/force_key): a written object carries its own schema's
   value, which no other schema allows. Returns the tag, "" when the types alone tell the
   schemas apart; NULL with the error set when this cannot be proved. */
static const char *one_of_tag(nfa *N, const json_t *node, const json_t *one, unsigned m,
                              const char *path)
{
    size_t n = json_array_size(one);
    unsigned *ty = calloc(n, sizeof *ty);
    json_t **vals = calloc(n, sizeof *vals);
    const json_t **obj = calloc(n, sizeof *obj), **roots = calloc(n, sizeof *roots);
    if (!ty || !vals || !obj || !roots) {
        free(ty), free(vals), free(obj), free(roots);
        N->failed = fl_err_set(N->e, FL_ENOMEM, "out of memory");
        return NULL;
    }
    const json_t *first = NULL; /* the first object schema with properties */
    long work = 0;              /* pairs and values compared, tag values gathered */
    for (size_t i = 0; i < n; i++) {
        roots[i] = N->root;
        ty[i] = types_valid(N->root, json_array_get(one, i), m, 0, &N->type_visits);
        obj[i] = same_value_node(json_array_get(one, i), &roots[i]);
        if (!first && (ty[i] & T_OBJ) && json_object_size(json_object_get(obj[i], "properties")))
            first = json_object_get(obj[i], "properties");
    }
    const json_t *disc = json_object_get(node, "discriminator");
    const char *want = json_string_value(json_object_get(disc, "propertyName"));
    /* the candidates: none (types alone), then the discriminator's or first's properties */
    void *it = first && !want ? json_object_iter((json_t *)first) : NULL;
    const char *tag = "", *found = NULL;
    size_t bi = 0, bj = 0;
    bool failed_once = false;
    for (int round = 0; !found && work <= FL_CONSTRAIN_ONEOF_WORK; round++) {
        bool ok = true;
        for (size_t i = 0; i < n; i++) {
            vals[i] = *tag ? tag_values(obj[i], roots[i], tag) : NULL;
            work += 1 + (long)json_array_size(vals[i]);
        }
        for (size_t i = 0; i < n && ok && work <= FL_CONSTRAIN_ONEOF_WORK; i++)
            for (size_t j = i + 1; j < n && ok; j++) {
                unsigned both = ty[i] & ty[j];
                ++work;
                if (!both || (both == T_OBJ && vals[i] && vals[j] && disjoint(vals[i], vals[j], &work)))
                    continue;
                ok = false;
                if (!failed_once || (want && *tag)) /* (the discriminator's pair is the one to name) */
                    bi = i, bj = j;
                failed_once = true;
            }
        for (size_t i = 0; i < n; i++)
            json_decref(vals[i]);
        if (ok && work <= FL_CONSTRAIN_ONEOF_WORK) {
            found = tag;
            break;
        }
        if (want && round == 0)
            tag = want;
        else if (it) {
            tag = json_object_iter_key(it);
            it = json_object_iter_next((json_t *)first, it);
        } else
            break;
    }
    free(ty), free(vals), free(obj), free(roots);
    if (!found && work > FL_CONSTRAIN_ONEOF_WORK) {
        bad(N, path, "'oneOf' has too many schemas or values to prove them exclusive (more "
                     "than %s comparisons)", FL_STR(FL_CONSTRAIN_ONEOF_WORK));
        return NULL;
    }
    if (!found) {
        char w[48];
        snprintf(w, sizeof w, "%zu and %zu", bi, bj);
        bad(N, path, "'oneOf' schemas %s may both match one value (fogline writes a oneOf whose "
                     "schemas differ in type, or in the const or enum of a property they all "
                     "have: a discriminator; 'anyOf' takes any that match)", w);
    }
    return found;
}

static bool has_any(const json_t *node, const char *const *keys, size_t n)
{
    for (size_t i = 0; json_is_object(node) && i < n; i++)
        if (json_object_get(node, keys[i]))
            return true;
    return false;
}

/* node's value as any of the types in m (node without a 'type'), each through f_typed:
   object and array keywords constrain objects and arrays, as JSON Schema says, and nothing
   else. All types and no such keyword: f_any. Objects and arrays are left out where the
   depth is spent, as f_any does, unless nothing else is left. */
static frag f_types(nfa *N, const json_t *node, unsigned m, const char *path, int32_t depth)
{
    bool ok = has_any(node, obj_keys, 3), ak = has_any(node, arr_keys, 5);
    if (m == T_ALL && !ok && !ak)
        return f_any(N, node, path, depth);
    frag f = {0, 0};
    bool some = false;
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0] && !N->failed; i++) {
        unsigned b = TYPES[i].bits & m;
        if (!b || (b == T_INT && !strcmp(TYPES[i].name, "number")) ||
            (TYPES[i].bits == T_INT && (m & T_FRAC)))
            continue; /* (integers: as "number" when fractions are allowed too) */
        const char *t = b == T_INT ? "integer" : TYPES[i].name;
        if ((b & (T_OBJ | T_ARR)) && depth <= 0 && !(b == T_OBJ ? ok : ak) && (m & ~(T_OBJ | T_ARR)))
            continue;
        frag g = f_typed(N, node, t, path, depth);
        f = some ? f_alt(N, f, g) : g;
        some = true;
    }
    return f;
}

/* A state whose epsilon edges reach each of to[0 .. n) (a state has two at most: a tree) */
static int32_t fan(nfa *N, const int32_t *to, int32_t n)
{
    if (n == 1)
        return to[0];
    int32_t s = st_new(N);
    eps(N, s, fan(N, to, n / 2));
    eps(N, s, fan(N, to + n / 2, n - n / 2));
    return s;
}

/* uniqueItems (pydantic's Set[...]) of items with few values (FL_CONSTRAIN_UNIQUE_VALUES at
   most: an enum, a const, boolean or null, through $ref and allOf of one): a state for each
   set of values written, each way on a value not in it. Values a validator finds equal (1
   and 1.0) are one value with several spellings. Items of any other kind cannot be kept
   apart by a finite automaton and are refused. */
static frag f_unique(nfa *N, const json_t *items, const char *path, int64_t lo, int64_t hi)
{
    const json_t *root = N->root;
    const json_t *R = items ? same_value_node(items, &root) : NULL;
    const json_t *c = json_object_get(R, "const"), *en = json_object_get(R, "enum");
    unsigned m = type_bits_of(json_object_get(R, "type"));
    if (json_is_true(json_object_get(R, "nullable")))
        m |= T_NULL;
    if (!json_object_get(R, "type"))
        m = T_ALL;
    json_t *vals = json_array();
    if (c)
        json_array_append(vals, (json_t *)c);
    else if (json_is_array(en))
        json_array_extend(vals, (json_t *)en);
    else if (R && !(m & ~(T_BOOL | T_NULL))) { /* type boolean and/or null */
        if (m & T_BOOL) {
            json_array_append_new(vals, json_true());
            json_array_append_new(vals, json_false());
        }
        if (m & T_NULL)
            json_array_append_new(vals, json_null());
    }
    /* the distinct values of the type: group[i] the first value equal to value i */
    size_t nv = json_array_size(vals);
    int32_t group[FL_CONSTRAIN_UNIQUE_VALUES * 4], ng = 0, first[FL_CONSTRAIN_UNIQUE_VALUES];
    long work = 0;
    bool ok = nv > 0 && nv <= FL_CONSTRAIN_UNIQUE_VALUES * 4;
    for (size_t i = 0; ok && i < nv; i++) {
        const json_t *v = json_array_get(vals, i);
        group[i] = -1;
        if (!(value_type(v) & m))
            continue;
        for (int32_t g = 0; g < ng && group[i] < 0; g++)
            if (same_json(v, json_array_get(vals, (size_t)first[g]), &work))
                group[i] = g;
        if (group[i] < 0) {
            ok = ng < FL_CONSTRAIN_UNIQUE_VALUES;
            if (ok)
                first[ng] = (int32_t)i, group[i] = ng++;
        }
    }
    if (!ok || !ng) {
        json_decref(vals);
        bad(N, path, "'uniqueItems' is supported for items of at most %s values (an enum, a "
                     "const, boolean or null): a finite automaton cannot keep other items apart",
            FL_STR(FL_CONSTRAIN_UNIQUE_VALUES));
        return f_empty(N);
    }
    if (hi < 0 || hi > ng)
        hi = ng;
    if (lo > hi) {
        json_decref(vals);
        bad(N, path, "'minItems' is above the distinct values the unique items may have%s", "");
        return f_empty(N);
    }
    frag open = f_cat(N, f_range(N, '[', '['), f_ws(N));
    int32_t end = st_new(N), to[FL_CONSTRAIN_UNIQUE_VALUES + 1];
    int32_t *st = malloc(sizeof(int32_t) * ((size_t)1 << ng));
    if (!st) {
        json_decref(vals);
        N->failed = fl_err_set(N->e, FL_ENOMEM, "out of memory");
        return f_empty(N);
    }
    for (int32_t S = 0; S < 1 << ng; S++)
        st[S] = S ? st_new(N) : open.out;
    for (int32_t S = 0; S < 1 << ng && !N->failed; S++) {
        int32_t k = __builtin_popcount((unsigned)S), n = 0;
        for (int32_t g = 0; g < ng && k < hi; g++) {
            if (S >> g & 1)
                continue;
            frag lit = {0, 0};
            bool some = false;
            for (size_t i = 0; i < nv; i++)
                if (group[i] == g) {
                    frag x = f_json_literal(N, json_array_get(vals, i));
                    lit = some ? f_alt(N, lit, x) : x;
                    some = true;
                }
            frag one = f_cat(N, lit, f_ws(N));
            if (S)
                one = f_cat(N, f_cat(N, f_range(N, ',', ','), f_ws(N)), one);
            eps(N, one.out, st[S | 1 << g]);
            to[n++] = one.in;
        }
        if (k >= lo) {
            frag close = f_range(N, ']', ']');
            eps(N, close.out, end);
            to[n++] = close.in;
        }
        if (n)
            eps(N, st[S], fan(N, to, n));
    }
    free(st);
    json_decref(vals);
    return (frag){open.in, end};
}

/* a schema compiled for the same value, within the types m */
static frag f_same(nfa *N, const json_t *s, unsigned m, const char *path, int32_t depth)
{
    N->not_types = (uint8_t)(T_ALL & ~m);
    return f_value(N, s, path, depth);
}

static frag f_node(nfa *N, const json_t *node, const char *path, int32_t depth)
{
    unsigned m = T_ALL & ~(unsigned)N->not_types; /* what a 'type' around it allows */
    N->not_types = 0;
    if (N->failed)
        return f_empty(N);
    if (json_is_true(node))
        return f_types(N, node, m, path, depth);
    if (!json_is_object(node)) {
        bad(N, path, "a schema must be an object (or true)%s", "");
        return f_empty(N);
    }
    if (check_keys(N, node, path) || check_typed_keys(N, node, path))
        return f_empty(N);
    m &= type_kw(N, node, path);
    if (N->failed)
        return f_empty(N);
    if (!m) {
        bad(N, path, "no value is of this 'type' and of the 'type' beside the $ref, anyOf or "
                     "oneOf it is in%s", "");
        return f_empty(N);
    }
    /* one of these at most: two would be their intersection */
    static const char *const one_kw[] = {"allOf", "$ref", "const", "enum", "anyOf", "oneOf"};
    const char *kw = NULL;
    for (size_t i = 0; i < sizeof one_kw / sizeof one_kw[0]; i++) {
        if (!json_object_get(node, one_kw[i]))
            continue;
        if (kw) {
            char w[40];
            snprintf(w, sizeof w, "'%s' beside '%s'", one_kw[i], kw);
            bad(N, path, "%s is not supported (the values valid for both: write one schema)", w);
            return f_empty(N);
        }
        kw = one_kw[i];
    }
    const json_t *disc = json_object_get(node, "discriminator");
    if (disc && !json_is_string(json_object_get(disc, "propertyName"))) {
        bad(N, path, "'discriminator' must be an object with a string 'propertyName'%s", "");
        return f_empty(N);
    }
    if (disc && (!kw || (strcmp(kw, "oneOf") && strcmp(kw, "anyOf")))) {
        bad(N, path, "'discriminator' needs a 'oneOf' (or 'anyOf') beside it%s", "");
        return f_empty(N);
    }
    const json_t *all = json_object_get(node, "allOf");
    if (all) {
        /* {"allOf": [{"$ref": ...}], "description": ...}: how pydantic and other generators
           give a $ref annotations of its own. One schema is that schema; several would be their
           intersection, and a keyword beside it another one: neither is supported. */
        if (!json_is_array(all) || json_array_size(all) != 1) {
            bad(N, path, "'allOf' is supported with exactly one schema%s (an intersection of "
                         "several is not)", "");
            return f_empty(N);
        }
        static const char *const beside[] = {"allOf", "$defs", "definitions", "$id", "title",
                                             "description", "$schema", "$comment", "default",
                                             "examples", "deprecated", "readOnly", "writeOnly"};
        const char *key = key_outside(node, beside, sizeof beside / sizeof beside[0]);
        if (key) {
            bad(N, path, "'%s' beside 'allOf' is not supported (put it inside the one schema)", key);
            return f_empty(N);
        }
        char p2[FL_CONSTRAIN_PATH];
        subpath(p2, sizeof p2, path, "allOf", "0");
        return f_same(N, json_array_get(all, 0), m, p2, depth);
    }
    const json_t *ref = json_object_get(node, "$ref");
    if (ref) {
        if (!json_is_string(ref)) {
            bad(N, path, "'$ref' must be a string%s", "");
            return f_empty(N);
        }
        const json_t *t = resolve_ref(N, json_string_value(ref), path);
        if (!t)
            return f_empty(N);
        /* a recursive schema is not a regular language: it is unrolled, each $ref inside
           itself at most recursion times; deeper, the value has no text, and the way out (an
           empty array, null, a property left out) is what remains */
        int inside = 0;
        for (int i = 0; i < N->n_refs; i++)
            inside += N->refs[i] == t;
        if (inside > N->recursion) {
            N->cut = true;
            return f_none(N);
        }
        if (N->n_refs == FL_CONSTRAIN_MAX_REFS) {
            bad(N, path, "'$ref's nest deeper than %s", FL_STR(FL_CONSTRAIN_MAX_REFS));
            return f_empty(N);
        }
        N->refs[N->n_refs++] = t;
        char p2[FL_CONSTRAIN_PATH];
        snprintf(p2, sizeof p2, "%s", json_string_value(ref) + 1);
        utf8_trim(p2);
        frag f = f_same(N, t, m, p2, depth);
        N->n_refs--;
        return f;
    }
    const json_t *cst = json_object_get(node, "const");
    const json_t *en = cst ? NULL : json_object_get(node, "enum");
    if (en && (!json_is_array(en) || !json_array_size(en))) {
        bad(N, path, "'enum' must be a non-empty array%s", "");
        return f_empty(N);
    }
    if (cst || en) { /* the values of the types allowed */
        frag f = {0, 0};
        bool some = false;
        for (size_t i = 0; i < (cst ? 1 : json_array_size(en)) && !N->failed; i++) {
            const json_t *v = cst ? cst : json_array_get(en, i);
            if (!(value_type(v) & m))
                continue;
            frag g = f_json_literal(N, v);
            f = some ? f_alt(N, f, g) : g;
            some = true;
        }
        if (!some)
            bad(N, path, "no value of '%s' is of the schema's 'type' (or of the 'type' beside "
                         "the $ref, anyOf or oneOf it is in)", cst ? "const" : "enum");
        return some ? f : f_empty(N);
    }
    const json_t *one = json_object_get(node, "oneOf");
    const json_t *any = one ? one : json_object_get(node, "anyOf");
    if (any) {
        const char *name = one ? "oneOf" : "anyOf";
        if (!json_is_array(any) || !json_array_size(any)) {
            bad(N, path, "'%s' must be a non-empty array of schemas", name);
            return f_empty(N);
        }
        const char *tag = one ? one_of_tag(N, node, one, m, path) : "";
        if (!tag)
            return f_empty(N);
        frag f = {0, 0};
        bool some = false;
        for (size_t i = 0; i < json_array_size(any) && !N->failed; i++) {
            if (m != T_ALL && !types_valid(N->root, json_array_get(any, i), m, 0, &N->type_visits))
                continue; /* (none of its values is of the 'type' beside: it adds nothing) */
            char p2[FL_CONSTRAIN_PATH], idx[24];
            snprintf(idx, sizeof idx, "%zu", i);
            subpath(p2, sizeof p2, path, name, idx);
            const json_t *fn = N->force_node, *root = N->root;
            const char *fk = N->force_key;
            if (*tag) { /* (its object schema, if it has the tag) */
                const json_t *R = same_value_node(json_array_get(any, i), &root);
                if (json_object_get(json_object_get(R, "properties"), tag))
                    N->force_node = R, N->force_key = tag;
            }
            frag g = f_same(N, json_array_get(any, i), m, p2, depth);
            N->force_node = fn, N->force_key = fk;
            f = some ? f_alt(N, f, g) : g;
            some = true;
        }
        if (!some)
            bad(N, path, "no schema of '%s' has values of the 'type' beside it", name);
        return f;
    }
    const json_t *type = json_object_get(node, "type");
    if (!type)
        return f_types(N, node, m, path, depth);
    frag f = {0, 0};
    bool some = false;
    for (size_t i = 0; i < (json_is_array(type) ? json_array_size(type) : 1) && !N->failed; i++) {
        const char *t = json_string_value(json_is_array(type) ? json_array_get(type, i) : type);
        unsigned b = type_bits(t) & m;
        if (!b)
            continue;
        frag g = f_typed(N, node, b == T_INT ? "integer" : t, path, depth);
        f = some ? f_alt(N, f, g) : g;
        some = true;
    }
    /* OpenAPI 3.0's nullable: null as well (when 'type' does not name it) */
    if (json_is_true(json_object_get(node, "nullable")) && (m & T_NULL) && !(type_bits_of(type) & T_NULL))
        f = some ? f_alt(N, f, f_lit(N, "null", 4)) : f_lit(N, "null", 4);
    return f;
}

/* ---- NFA -> DFA (subset construction) ---- */

typedef struct dset {
    int32_t *v; /* sorted NFA states */
    int32_t n;
    uint64_t h;
} dset;

typedef struct builder {
    const nfa *N;
    int32_t final;
    dset *sets;
    int32_t n, cap;
    int32_t *tab; /* hash table of set indices, -1 empty */
    size_t tabn;
    int32_t *stack, *mark;
    int32_t epoch;
} builder;

static uint64_t hash_set(const int32_t *v, int32_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (int32_t i = 0; i < n; i++) {
        h ^= (uint64_t)(uint32_t)v[i];
        h *= 1099511628211ull;
    }
    return h;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* the epsilon closure of v[0..n) (marked in this epoch), sorted, in buf; returns its size */
static int32_t closure(builder *B, int32_t *buf, int32_t n)
{
    const nst *s = B->N->s;
    int32_t sp = 0, m = 0;
    B->epoch++;
    for (int32_t i = 0; i < n; i++)
        if (B->mark[buf[i]] != B->epoch) {
            B->mark[buf[i]] = B->epoch;
            B->stack[sp++] = buf[i];
        }
    while (sp) {
        int32_t x = B->stack[--sp];
        buf[m++] = x;
        int32_t e[2] = {s[x].e1, s[x].e2};
        for (int k = 0; k < 2; k++)
            if (e[k] >= 0 && B->mark[e[k]] != B->epoch) {
                B->mark[e[k]] = B->epoch;
                B->stack[sp++] = e[k];
            }
    }
    qsort(buf, (size_t)m, sizeof(int32_t), cmp_i32);
    return m;
}

/* the DFA state of a closed set: found, or added (-2 on failure) */
static int32_t intern(builder *B, const int32_t *v, int32_t n, int32_t max, fl_err *e)
{
    uint64_t h = hash_set(v, n);
    size_t j = (size_t)h & (B->tabn - 1);
    for (; B->tab[j] >= 0; j = (j + 1) & (B->tabn - 1)) {
        const dset *d = &B->sets[B->tab[j]];
        if (d->h == h && d->n == n && !memcmp(d->v, v, sizeof(int32_t) * (size_t)n))
            return B->tab[j];
    }
    if (B->n >= max) {
        fl_err_set(e, FL_ERANGE, "the constraint is too large: its automaton passed %d states", max);
        return -2;
    }
    if (B->n == B->cap) {
        int32_t cap = B->cap ? B->cap * 2 : 64;
        dset *s = realloc(B->sets, sizeof *s * (size_t)cap);
        if (!s)
            return fl_err_set(e, FL_ENOMEM, "out of memory"), -2;
        B->sets = s;
        B->cap = cap;
    }
    if ((size_t)B->n * 2 >= B->tabn) { /* grow the table: rehash every set */
        size_t tn = B->tabn * 2;
        int32_t *t = malloc(sizeof(int32_t) * tn);
        if (!t)
            return fl_err_set(e, FL_ENOMEM, "out of memory"), -2;
        memset(t, 0xff, sizeof(int32_t) * tn);
        for (int32_t i = 0; i < B->n; i++) {
            size_t k = (size_t)B->sets[i].h & (tn - 1);
            while (t[k] >= 0)
                k = (k + 1) & (tn - 1);
            t[k] = i;
        }
        free(B->tab);
        B->tab = t;
        B->tabn = tn;
        j = (size_t)h & (tn - 1);
        while (t[j] >= 0)
            j = (j + 1) & (tn - 1);
    }
    int32_t *copy = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    if (!copy)
        return fl_err_set(e, FL_ENOMEM, "out of memory"), -2;
    memcpy(copy, v, sizeof(int32_t) * (size_t)n);
    B->sets[B->n] = (dset){copy, n, h};
    B->tab[j] = B->n;
    return B->n++;
}

/* ---- chains: counted lengths in the DFA ---- */

/* A DFA state's NFA states with the counts taken relative to the least among them: a tagged
   one as (fid, grp, ord, cnt - least), any other as itself (0, state, 0, 0). */
typedef struct comp {
    int32_t a, b, c, d;
} comp;

static int cmp_comp(const void *x, const void *y)
{
    const comp *p = x, *q = y;
    int32_t u[4] = {p->a, p->b, p->c, p->d}, v[4] = {q->a, q->b, q->c, q->d};
    for (int i = 0; i < 4; i++)
        if (u[i] != v[i])
            return (u[i] > v[i]) - (u[i] < v[i]);
    return 0;
}

typedef struct crank {
    int32_t cls, rank, d;
} crank;

static int cmp_crank(const void *x, const void *y)
{
    const crank *p = x, *q = y;
    if (p->cls != q->cls)
        return (p->cls > q->cls) - (p->cls < q->cls);
    if (p->rank != q->rank)
        return (p->rank > q->rank) - (p->rank < q->rank);
    return (p->d > q->d) - (p->d < q->d);
}

/* Pairs (p, q) read as "p takes every text that q takes", explored from the proposed links:
   a pair needs the pairs its bytes lead to (where the two states differ). */
/* (a proof that a chain holds explores about one pair per state of it: more is not chains) */
#define SIM_PAIRS_PER_STATE 4

typedef struct sim {
    int64_t *key; /* (p << 32 | q) of each pair */
    uint8_t *dead;
    int32_t n, cap;
    int32_t *tab; /* hash of pair indices, -1 empty */
    size_t tabn;
    int32_t *ec, *ep; /* the needs: child pair ec[k] is needed by parent pair ep[k] */
    size_t ne, ecap;
    int32_t max; /* pairs at most */
} sim;

/* The pair's index, added when new; -1 when the exploration is too large or memory short. */
static int32_t sim_pair(sim *S, int32_t p, int32_t q)
{
    int64_t k = (int64_t)p << 32 | (uint32_t)q;
    if ((size_t)S->n * 2 >= S->tabn) {
        size_t tn = S->tabn ? S->tabn * 2 : 4096;
        int32_t *t = malloc(sizeof(int32_t) * tn);
        if (!t)
            return -1;
        memset(t, 0xff, sizeof(int32_t) * tn);
        for (int32_t i = 0; i < S->n; i++) {
            size_t j = (size_t)(((uint64_t)S->key[i] * 0x9e3779b97f4a7c15ull) >> 24) & (tn - 1);
            while (t[j] >= 0)
                j = (j + 1) & (tn - 1);
            t[j] = i;
        }
        free(S->tab);
        S->tab = t;
        S->tabn = tn;
    }
    size_t j = (size_t)(((uint64_t)k * 0x9e3779b97f4a7c15ull) >> 24) & (S->tabn - 1);
    for (; S->tab[j] >= 0; j = (j + 1) & (S->tabn - 1))
        if (S->key[S->tab[j]] == k)
            return S->tab[j];
    if (S->n >= S->max)
        return -1;
    if (S->n == S->cap) {
        int32_t cap = S->cap ? S->cap * 2 : 1024;
        int64_t *nk = realloc(S->key, sizeof(int64_t) * (size_t)cap);
        if (nk)
            S->key = nk;
        uint8_t *nd = nk ? realloc(S->dead, (size_t)cap) : NULL;
        if (!nd)
            return -1;
        S->dead = nd;
        S->cap = cap;
    }
    S->key[S->n] = k;
    S->dead[S->n] = 0;
    S->tab[j] = S->n;
    return S->n++;
}

static int sim_need(sim *S, int32_t child, int32_t parent)
{
    if (S->ne == S->ecap) {
        size_t cap = S->ecap ? S->ecap * 2 : 4096;
        if (cap > 4 * (size_t)S->max)
            return -1;
        int32_t *a = realloc(S->ec, sizeof(int32_t) * cap);
        if (a)
            S->ec = a;
        int32_t *b = a ? realloc(S->ep, sizeof(int32_t) * cap) : NULL;
        if (!b)
            return -1;
        S->ep = b;
        S->ecap = cap;
    }
    S->ec[S->ne] = child;
    S->ep[S->ne++] = parent;
    return 0;
}

/* The greatest simulation among the pairs reachable from the first n0 (already added): each
   pair is explored once (a pair fails outright where q accepts and p does not, or q reads a
   byte p cannot), then failures travel to the pairs that needed them. -1 when too large. */
static int sim_solve(sim *S, const fl_dfa *D)
{
    for (int32_t i = 0; i < S->n; i++) {
        int32_t p = (int32_t)(S->key[i] >> 32), q = (int32_t)(S->key[i] & 0xffffffff);
        if (D->accept[q] && !D->accept[p]) {
            S->dead[i] = 1;
            continue;
        }
        const int32_t *rq = D->next + (size_t)q * 256, *rp = D->next + (size_t)p * 256;
        int32_t last = -1;
        for (int b = 0; b < 256 && !S->dead[i]; b++) {
            int32_t nq = rq[b], np = rp[b];
            if (nq < 0 || np == nq)
                continue;
            if (np < 0) {
                S->dead[i] = 1;
                break;
            }
            int32_t c = sim_pair(S, np, nq);
            if (c < 0)
                return -1;
            if (c != last && c != i && sim_need(S, c, i))
                return -1;
            last = c;
        }
    }
    /* the needs by child (a counting sort), then failures outward from the dead */
    size_t np1 = (size_t)(uint32_t)S->n + 1;
    int32_t *start = calloc(np1, sizeof(int32_t));
    int32_t *by = malloc(sizeof(int32_t) * (S->ne ? S->ne : 1));
    int32_t *stack = malloc(sizeof(int32_t) * np1);
    if (!start || !by || !stack) {
        free(start);
        free(by);
        free(stack);
        return -1;
    }
    for (size_t k = 0; k < S->ne; k++)
        start[S->ec[k] + 1]++;
    for (int32_t i = 0; i < S->n; i++)
        start[i + 1] += start[i];
    int32_t *fill = stack; /* (borrowed: positions while filling) */
    memcpy(fill, start, sizeof(int32_t) * (size_t)S->n);
    for (size_t k = 0; k < S->ne; k++)
        by[fill[S->ec[k]]++] = S->ep[k];
    int32_t sp = 0;
    for (int32_t i = 0; i < S->n; i++)
        if (S->dead[i])
            stack[sp++] = i;
    while (sp) {
        int32_t c = stack[--sp];
        for (int32_t k = start[c]; k < start[c + 1]; k++)
            if (!S->dead[by[k]]) {
                S->dead[by[k]] = 1;
                stack[sp++] = by[k];
            }
    }
    free(start);
    free(by);
    free(stack);
    return 0;
}

/* The DFA's chains (fl_dfa.cls, rank). States whose NFA states are the same but for the
   counts (f_cpa's tags, relative to the least) are proposed as a chain in the order of their
   counts, and each link is kept only where the simulation proves it (sim_solve: every text
   the later state takes to a whole value, the earlier takes too), so what the decoder relies
   on is proved on this table, not assumed from how it was built. Nothing when there are none
   or the proof would be too large: the decoder is only slower without them. */
static void chains(const nfa *N, const builder *B, fl_dfa *D)
{
    int32_t n = D->n;
    if (!N->n_fid || n < 2)
        return;
    /* each state's least count (INT32_MAX: untagged); the component lists of tagged ones */
    int32_t *least = malloc(sizeof(int32_t) * (size_t)n);
    size_t total = 0;
    for (int32_t d = 0; least && d < n; d++) {
        const dset *ds = &B->sets[d];
        least[d] = INT32_MAX;
        for (int32_t i = 0; i < ds->n; i++) {
            const ntag *t = &N->tag[ds->v[i]];
            if (t->fid && t->cnt >= 0 && t->cnt < least[d])
                least[d] = t->cnt;
        }
        if (least[d] != INT32_MAX)
            total += (size_t)ds->n;
    }
    comp *cv = malloc(sizeof(comp) * (total ? total : 1));
    size_t *co = malloc(sizeof(size_t) * ((size_t)n + 1));
    crank *cr = malloc(sizeof(crank) * (size_t)n);
    int32_t *up = malloc(sizeof(int32_t) * (size_t)n), *lp = malloc(sizeof(int32_t) * (size_t)n);
    int32_t *cls = malloc(sizeof(int32_t) * (size_t)n), *rank = malloc(sizeof(int32_t) * (size_t)n);
    size_t tabn = 1;
    while (tabn < 2 * (size_t)n)
        tabn *= 2;
    int32_t *tab = malloc(sizeof(int32_t) * tabn);
    sim S = {.max = SIM_PAIRS_PER_STATE * n + 4096};
    if (!least || !cv || !co || !cr || !up || !lp || !cls || !rank || !tab)
        goto out;
    memset(tab, 0xff, sizeof(int32_t) * tabn);
    /* classes: the tagged states' component lists, interned (a class named by its first state) */
    size_t at = 0;
    int32_t m = 0;
    for (int32_t d = 0; d < n; d++) {
        const dset *ds = &B->sets[d];
        int32_t lc = least[d];
        co[d] = at;
        cls[d] = -1;
        rank[d] = 0;
        if (lc == INT32_MAX) {
            co[d + 1] = at;
            continue;
        }
        for (int32_t i = 0; i < ds->n; i++) {
            const ntag *t = &N->tag[ds->v[i]];
            cv[at++] = t->fid && t->cnt >= 0 ? (comp){t->fid, t->grp, t->ord, t->cnt - lc}
                                             : (comp){0, ds->v[i], 0, 0};
        }
        co[d + 1] = at;
        size_t len = co[d + 1] - co[d];
        qsort(cv + co[d], len, sizeof(comp), cmp_comp);
        uint64_t h = 1469598103934665603ull;
        for (size_t i = co[d]; i < co[d + 1]; i++) {
            int32_t f[4] = {cv[i].a, cv[i].b, cv[i].c, cv[i].d};
            for (int k = 0; k < 4; k++)
                h = (h ^ (uint32_t)f[k]) * 1099511628211ull;
        }
        size_t j = (size_t)h & (tabn - 1);
        for (; tab[j] >= 0; j = (j + 1) & (tabn - 1)) {
            int32_t r = tab[j];
            if (co[r + 1] - co[r] == len && !memcmp(cv + co[r], cv + co[d], sizeof(comp) * len))
                break;
        }
        if (tab[j] < 0)
            tab[j] = d;
        cls[d] = tab[j];
        rank[d] = lc;
        cr[m++] = (crank){cls[d], lc, d};
    }
    /* the proposed links: each state to the one before it in its class */
    qsort(cr, (size_t)m, sizeof(crank), cmp_crank);
    for (int32_t d = 0; d < n; d++)
        up[d] = lp[d] = -1;
    for (int32_t i = 1; i < m; i++)
        if (cr[i].cls == cr[i - 1].cls && cr[i].rank > cr[i - 1].rank) {
            up[cr[i].d] = cr[i - 1].d;
            if ((lp[cr[i].d] = sim_pair(&S, cr[i - 1].d, cr[i].d)) < 0)
                goto out;
        }
    if (!S.n || sim_solve(&S, D))
        goto out;
    /* the chains that held: a new class where a link failed; one state alone is no chain */
    int32_t nc = 0;
    for (int32_t i = 0; i < m;) {
        int32_t j = i + 1;
        while (j < m && up[cr[j].d] == cr[j - 1].d && !S.dead[lp[cr[j].d]])
            j++;
        for (int32_t k = i; k < j; k++) {
            cls[cr[k].d] = j - i > 1 ? nc : -1;
            if (j - i == 1)
                rank[cr[k].d] = 0;
        }
        nc += j - i > 1;
        i = j;
    }
    if (nc) {
        D->cls = cls;
        D->rank = rank;
        cls = rank = NULL;
    }
out:
    free(least);
    free(cv);
    free(co);
    free(cr);
    free(up);
    free(lp);
    free(cls);
    free(rank);
    free(tab);
    free(S.key);
    free(S.dead);
    free(S.tab);
    free(S.ec);
    free(S.ep);
}

static int to_dfa(const nfa *N, frag f, int32_t max, fl_dfa **out, fl_err *e)
{
    builder B = {.N = N, .final = f.out, .tabn = 1024};
    int32_t *buf = malloc(sizeof(int32_t) * (size_t)N->n);
    B.stack = malloc(sizeof(int32_t) * (size_t)N->n);
    B.mark = calloc((size_t)N->n, sizeof(int32_t));
    B.tab = malloc(sizeof(int32_t) * B.tabn);
    int32_t *next = NULL;
    size_t next_cap = 0;
    int rc = 0;
    if (!buf || !B.stack || !B.mark || !B.tab) {
        rc = fl_err_set(e, FL_ENOMEM, "out of memory");
        goto out;
    }
    memset(B.tab, 0xff, sizeof(int32_t) * B.tabn);
    buf[0] = f.in;
    if (intern(&B, buf, closure(&B, buf, 1), max, e) < 0) {
        rc = e->code;
        goto out;
    }
    for (int32_t d = 0; d < B.n; d++) {
        if ((size_t)(d + 1) * 256 > next_cap) {
            size_t cap = next_cap ? next_cap * 2 : 256 * 64;
            int32_t *t = realloc(next, sizeof(int32_t) * cap);
            if (!t) {
                rc = fl_err_set(e, FL_ENOMEM, "out of memory");
                goto out;
            }
            next = t;
            next_cap = cap;
        }
        for (int c = 0; c < 256; c++) {
            int32_t m = 0;
            const dset *ds = &B.sets[d];
            for (int32_t i = 0; i < ds->n; i++) {
                const nst *x = &N->s[ds->v[i]];
                if (x->to >= 0 && (N->sets[x->set][c >> 3] >> (c & 7) & 1))
                    buf[m++] = x->to;
            }
            int32_t t = -1;
            if (m) {
                t = intern(&B, buf, closure(&B, buf, m), max, e);
                if (t < 0) {
                    rc = e->code;
                    goto out;
                }
            }
            next[(size_t)d * 256 + (size_t)c] = t;
        }
    }
    fl_dfa *D = calloc(1, sizeof *D);
    if (!D) {
        rc = fl_err_set(e, FL_ENOMEM, "out of memory");
        goto out;
    }
    D->n = B.n;
    D->next = next;
    next = NULL;
    D->accept = calloc((size_t)B.n, 1);
    D->dist = malloc(sizeof(int32_t) * (size_t)B.n);
    if (!D->accept || !D->dist) {
        fl_dfa_free(D);
        rc = fl_err_set(e, FL_ENOMEM, "out of memory");
        goto out;
    }
    for (int32_t d = 0; d < B.n; d++)
        for (int32_t i = 0; i < B.sets[d].n; i++)
            D->accept[d] |= B.sets[d].v[i] == B.final;
    /* distances to acceptance: relaxation until nothing changes (the graphs are small) */
    for (int32_t d = 0; d < B.n; d++)
        D->dist[d] = D->accept[d] ? 0 : INT32_MAX;
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t d = B.n - 1; d >= 0; d--)
            for (int c = 0; c < 256; c++) {
                int32_t t = D->next[(size_t)d * 256 + (size_t)c];
                if (t >= 0 && D->dist[t] != INT32_MAX && D->dist[t] + 1 < D->dist[d]) {
                    D->dist[d] = D->dist[t] + 1;
                    changed = true;
                }
            }
    }
    if (D->dist[0] == INT32_MAX) {
        fl_dfa_free(D);
        rc = N->cut ? fl_err_set(e, FL_EINVAL, "the schema's recursion has no value that stops "
                                               "within %d levels of itself (and %d of objects "
                                               "and arrays): give it a way out (an empty array, "
                                               "null, a property that may be left out)",
                                 N->recursion + 1, N->max_depth)
                    : fl_err_set(e, FL_EINVAL, "no JSON text satisfies the schema");
        goto out;
    }
    /* only the states that can reach acceptance (a recursion cut: the way in is there, the
       rest is not), numbered in order, the builder's sets with them (chains() reads them) */
    int32_t live = 0;
    for (int32_t d = 0; d < B.n; d++)
        live += D->dist[d] != INT32_MAX;
    if (live < B.n) {
        int32_t *map = malloc(sizeof(int32_t) * (size_t)B.n);
        if (!map) {
            fl_dfa_free(D);
            rc = fl_err_set(e, FL_ENOMEM, "out of memory");
            goto out;
        }
        for (int32_t d = 0, k = 0; d < B.n; d++)
            map[d] = D->dist[d] != INT32_MAX ? k++ : -1;
        for (int32_t d = 0; d < B.n; d++) {
            if (map[d] < 0) {
                free(B.sets[d].v);
                continue;
            }
            int32_t k = map[d];
            for (int c = 0; c < 256; c++) {
                int32_t t = D->next[(size_t)d * 256 + (size_t)c];
                D->next[(size_t)k * 256 + (size_t)c] = t >= 0 ? map[t] : -1;
            }
            D->accept[k] = D->accept[d];
            D->dist[k] = D->dist[d];
            B.sets[k] = B.sets[d];
        }
        free(map);
        D->n = B.n = live;
    }
    chains(N, &B, D);
    *out = D;
out:
    for (int32_t i = 0; i < B.n; i++)
        free(B.sets[i].v);
    free(B.sets);
    free(B.tab);
    free(B.stack);
    free(B.mark);
    free(buf);
    free(next);
    return rc;
}

/* The NFA built from f (when nothing failed) made deterministic, and the NFA freed. */
static int finish(nfa *N, frag f, fl_dfa **out, fl_err *e)
{
    int rc = N->failed;
    if (!rc)
        rc = to_dfa(N, f, N->max, out, e);
    free(N->s);
    free(N->tag);
    free(N->sets);
    return rc ? -1 : 0;
}

/* A schema whose automaton is too large while some counted string was written shorter than
   its maxLength is compiled once more with half the room per counted string: a
   model with several URLs gets shorter URLs rather than a refusal. */
static int compile(const json_t *schema, bool object, const fl_constrain_opts *o, fl_dfa **out,
                   fl_err *e)
{
    *out = NULL;
    for (int32_t room = FL_CONSTRAIN_LENGTH_STATES, rec = FL_CONSTRAIN_RECURSION;;) {
        nfa N = {0};
        N.recursion = rec;
        N.e = e;
        N.root = schema;
        N.max = o && o->max_states > 0 ? o->max_states : FL_CONSTRAIN_MAX_STATES;
        N.max_depth = o && o->max_depth > 0 ? o->max_depth : FL_CONSTRAIN_MAX_DEPTH;
        N.max_ws = o && o->max_ws > 0 ? o->max_ws : 0;
        N.max_digits = o && o->max_digits > 0 ? o->max_digits : 0;
        N.len_states = room;
        N.type_visits = FL_CONSTRAIN_TYPE_VISITS;
        if (schema)
            N.refs[N.n_refs++] = schema; /* (a "#" inside it is a recursion, as a $ref's is) */
        frag f = object ? f_any_object(&N, "", N.max_depth - 1)
                        : f_value(&N, schema, "", N.max_depth);
        if (o && o->prefix && o->prefix[0])
            f = f_cat(&N, f_lit(&N, o->prefix, strlen(o->prefix)), f);
        if (o && o->suffix && o->suffix[0])
            f = f_cat(&N, f, f_lit(&N, o->suffix, strlen(o->suffix)));
        bool shortened = N.shortened, cut = N.cut;
        int rc = finish(&N, f, out, e);
        if (!rc || e->code != FL_ERANGE)
            return rc;
        if (shortened && room > FL_CONSTRAIN_LENGTH_STATES / 2)
            room /= 2;
        else if (cut && rec > 1)
            rec--; /* (a recursion unrolled less deep) */
        else
            return rc;
        *e = (fl_err){0};
    }
}

int fl_dfa_from_schema(const json_t *schema, const fl_constrain_opts *o, fl_dfa **out, fl_err *e)
{
    return compile(schema, false, o, out, e);
}

int fl_dfa_json_object(const fl_constrain_opts *o, fl_dfa **out, fl_err *e)
{
    return compile(NULL, true, o, out, e);
}

int fl_dfa_from_regex(const char *pattern, const fl_constrain_opts *o, fl_dfa **out, fl_err *e)
{
    *out = NULL;
    fl_cpa *a;
    fl_err le = {0};
    if (fl_cpa_regex(pattern, true, &a, &le))
        return fl_err_set(e, FL_EINVAL, "the pattern: %.400s", le.msg), -1;
    if (fl_cpa_empty(a)) {
        fl_cpa_free(a);
        return fl_err_set(e, FL_EINVAL, "the pattern matches no text"), -1;
    }
    nfa N = {0};
    N.e = e;
    N.max = o && o->max_states > 0 ? o->max_states : FL_CONSTRAIN_MAX_STATES;
    frag f = f_cpa(&N, a, false);
    fl_cpa_free(a);
    return finish(&N, f, out, e);
}

void fl_dfa_free(fl_dfa *d)
{
    if (!d)
        return;
    free(d->next);
    free(d->accept);
    free(d->dist);
    free(d->cls);
    free(d->rank);
    free(d);
}

static uint64_t rnd(uint64_t *s)
{
    /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int fl_dfa_sample(const fl_dfa *d, uint64_t *rng, int32_t max_len, fl_buf *out)
{
    int32_t s = 0;
    if (d->dist[0] > max_len)
        return -1;
    for (int32_t left = max_len;; left--) {
        int cand[256], nc = 0;
        for (int c = 0; c < 256; c++) {
            int32_t t = d->next[(size_t)s * 256 + (size_t)c];
            if (t >= 0 && d->dist[t] < left)
                cand[nc++] = c;
        }
        if (d->accept[s] && (!nc || rnd(rng) % 4 == 0))
            return out->err ? -1 : 0;
        if (!nc)
            return -1; /* (cannot happen: dist[s] <= left holds on the way) */
        int c = cand[rnd(rng) % (uint64_t)nc];
        char ch = (char)c;
        fl_buf_append(out, &ch, 1);
        s = d->next[(size_t)s * 256 + (size_t)c];
    }
}
