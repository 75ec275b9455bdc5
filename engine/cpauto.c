/* cpauto.c: automata over code points (cpauto.h). A pattern is parsed into a small syntax tree,
 * the tree into a Thompson NFA whose edges are sets of code points, and the NFA into a DFA
 * over the classes its sets cut the code points into; products intersect (or unite) two of
 * them over the classes both cut. Every DFA is pruned to the states that can still accept. */
#include "cpauto.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_limits.h"

#define SUR_LO 0xd800
#define SUR_HI 0xdfff

/* ---- sets of code points: sorted, disjoint [lo, hi] pairs, never a surrogate ---- */

typedef struct cset {
    int32_t *r; /* (2 * n) */
    int32_t n, cap;
} cset;

static int cs_add(cset *s, int32_t lo, int32_t hi)
{
    if (lo > hi)
        return 0;
    if (s->n == s->cap) {
        int32_t cap = s->cap ? s->cap * 2 : 8;
        int32_t *r = realloc(s->r, sizeof(int32_t) * 2 * (size_t)cap);
        if (!r)
            return -1;
        s->r = r;
        s->cap = cap;
    }
    s->r[2 * s->n] = lo;
    s->r[2 * s->n + 1] = hi;
    s->n++;
    return 0;
}

static int cmp_pair(const void *a, const void *b)
{
    const int32_t *x = a, *y = b;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

/* sorted, merged, surrogates cut out */
static int cs_norm(cset *s)
{
    if (!s->n) /* (r may be NULL) */
        return 0;
    qsort(s->r, (size_t)s->n, sizeof(int32_t) * 2, cmp_pair);
    int32_t m = 0;
    for (int32_t i = 0; i < s->n; i++) {
        int32_t lo = s->r[2 * i], hi = s->r[2 * i + 1];
        if (m && lo <= s->r[2 * m - 1] + 1) {
            if (hi > s->r[2 * m - 1])
                s->r[2 * m - 1] = hi;
        } else {
            s->r[2 * m] = lo;
            s->r[2 * m + 1] = hi;
            m++;
        }
    }
    s->n = m;
    /* cut [SUR_LO, SUR_HI] out of every pair (a pair spanning it splits in two) */
    for (int32_t i = 0; i < s->n; i++) {
        int32_t lo = s->r[2 * i], hi = s->r[2 * i + 1];
        if (hi < SUR_LO || lo > SUR_HI)
            continue;
        if (lo < SUR_LO && hi > SUR_HI) {
            s->r[2 * i + 1] = SUR_LO - 1;
            if (cs_add(s, SUR_HI + 1, hi))
                return -1;
            return cs_norm(s);
        }
        if (lo >= SUR_LO && hi <= SUR_HI) { /* wholly inside: drop it */
            memmove(&s->r[2 * i], &s->r[2 * i + 2], sizeof(int32_t) * 2 * (size_t)(s->n - i - 1));
            s->n--;
            i--;
        } else if (lo < SUR_LO) {
            s->r[2 * i + 1] = SUR_LO - 1;
        } else {
            s->r[2 * i] = SUR_HI + 1;
        }
    }
    return 0;
}

/* the complement within the code points (normalized input) */
static int cs_negate(cset *s)
{
    cset t = {0};
    int32_t at = 0;
    for (int32_t i = 0; i < s->n; i++) {
        if (cs_add(&t, at, s->r[2 * i] - 1))
            goto fail;
        at = s->r[2 * i + 1] + 1;
    }
    if (cs_add(&t, at, FL_CP_END - 1))
        goto fail;
    free(s->r);
    *s = t;
    return cs_norm(s);
fail:
    free(t.r);
    return -1;
}

/* ---- the pattern's syntax tree ---- */

enum { RX_SET, RX_SEQ, RX_ALT, RX_REP };

typedef struct rxn {
    int kind;
    int32_t set;       /* RX_SET */
    int32_t kid, nkid; /* RX_SEQ / RX_ALT: kids[kid .. kid + nkid); RX_REP: kids[kid] */
    int32_t min, max;  /* RX_REP, max -1: no bound */
} rxn;

typedef struct rxp {
    const unsigned char *s;
    size_t i, n;
    rxn *nd;
    int32_t nn, ncap;
    int32_t *kids;
    int32_t nk, kcap;
    cset *sets;
    int32_t ns, scap;
    int depth;
    bool top_end; /* a '$' ended a top-level alternative */
    fl_err *e;
    int failed;
} rxp;

#define RX_MAX_DEPTH 100

static int rx_fail(rxp *P, const char *what)
{
    if (!P->failed)
        P->failed = fl_err_set(P->e, FL_EINVAL, "%s at offset %zu", what, P->i);
    return -1;
}

static int32_t rx_node(rxp *P, rxn x)
{
    if (P->failed)
        return -1;
    if (P->nn == P->ncap) {
        int32_t cap = P->ncap ? P->ncap * 2 : 64;
        rxn *t = realloc(P->nd, sizeof *t * (size_t)cap);
        if (!t)
            return P->failed = fl_err_set(P->e, FL_ENOMEM, "out of memory"), -1;
        P->nd = t;
        P->ncap = cap;
    }
    P->nd[P->nn] = x;
    return P->nn++;
}

/* a node over kids v[0..n) (copied into the pool) */
static int32_t rx_list(rxp *P, int kind, const int32_t *v, int32_t n)
{
    if (P->failed)
        return -1;
    if (P->nk + n > P->kcap) {
        int32_t cap = P->kcap ? P->kcap : 64;
        while (cap < P->nk + n)
            cap *= 2;
        int32_t *t = realloc(P->kids, sizeof(int32_t) * (size_t)cap);
        if (!t)
            return P->failed = fl_err_set(P->e, FL_ENOMEM, "out of memory"), -1;
        P->kids = t;
        P->kcap = cap;
    }
    if (n) /* (an empty sequence: kids may still be NULL) */
        memcpy(P->kids + P->nk, v, sizeof(int32_t) * (size_t)n);
    rxn x = {.kind = kind, .kid = P->nk, .nkid = n};
    P->nk += n;
    return rx_node(P, x);
}

/* a set node; takes the set */
static int32_t rx_set(rxp *P, cset *s)
{
    if (P->failed || cs_norm(s)) {
        free(s->r);
        if (!P->failed)
            P->failed = fl_err_set(P->e, FL_ENOMEM, "out of memory");
        return -1;
    }
    if (P->ns == P->scap) {
        int32_t cap = P->scap ? P->scap * 2 : 32;
        cset *t = realloc(P->sets, sizeof *t * (size_t)cap);
        if (!t) {
            free(s->r);
            return P->failed = fl_err_set(P->e, FL_ENOMEM, "out of memory"), -1;
        }
        P->sets = t;
        P->scap = cap;
    }
    P->sets[P->ns] = *s;
    rxn x = {.kind = RX_SET, .set = P->ns++};
    return rx_node(P, x);
}

static int32_t rx_range(rxp *P, int32_t lo, int32_t hi)
{
    cset s = {0};
    if (cs_add(&s, lo, hi)) {
        free(s.r);
        return P->failed = fl_err_set(P->e, FL_ENOMEM, "out of memory"), -1;
    }
    return rx_set(P, &s);
}

/* The next code point of the pattern. jansson's strings are valid UTF-8, a command line's
   need not be: anything else (a stray continuation byte, an overlong form, a surrogate, past
   U+10FFFF, a cut sequence) is an error, never a code point out of range. */
static int32_t rx_cp(rxp *P)
{
    const unsigned char *s = P->s + P->i;
    size_t left = P->n - P->i;
    int32_t c = s[0];
    size_t len = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
                                : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    bool ok = len && len <= left;
    if (ok && len > 1) {
        c &= len == 2 ? 0x1f : len == 3 ? 0x0f : 0x07;
        for (size_t k = 1; k < len && ok; k++) {
            ok = (s[k] & 0xc0) == 0x80;
            c = (c << 6) | (s[k] & 0x3f);
        }
        ok = ok && !(len == 3 && c < 0x800) && !(len == 4 && (c < 0x10000 || c >= FL_CP_END)) &&
             !(c >= SUR_LO && c <= SUR_HI);
    }
    if (!ok) {
        rx_fail(P, "invalid UTF-8");
        P->i = P->n;
        return 0;
    }
    P->i += len;
    return c;
}

static int hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                          : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int32_t rx_hex(rxp *P, int digits)
{
    int32_t v = 0;
    for (int k = 0; k < digits; k++) {
        int h = P->i < P->n ? hexval(P->s[P->i]) : -1;
        if (h < 0)
            return rx_fail(P, "a malformed hexadecimal escape");
        v = v * 16 + h;
        P->i++;
    }
    return v;
}

static int cs_class(cset *s, int c, bool *ok)
{
    static const int32_t space[] = {9, 13, 32, 32, 0xa0, 0xa0, 0x1680, 0x1680, 0x2000, 0x200a,
                                    0x2028, 0x2029, 0x202f, 0x202f, 0x205f, 0x205f,
                                    0x3000, 0x3000, 0xfeff, 0xfeff};
    int rc = 0;
    *ok = true;
    switch (c | 0x20) {
    case 'd':
        rc = cs_add(s, '0', '9');
        break;
    case 'w':
        rc = cs_add(s, '0', '9') | cs_add(s, 'A', 'Z') | cs_add(s, '_', '_') | cs_add(s, 'a', 'z');
        break;
    case 's':
        for (size_t k = 0; k < sizeof space / sizeof space[0]; k += 2)
            rc |= cs_add(s, space[k], space[k + 1]);
        break;
    default:
        *ok = false;
        return 0;
    }
    if (!rc && c >= 'A' && c <= 'Z')
        rc = cs_norm(s) || cs_negate(s);
    return rc ? -1 : 0;
}

/* After a backslash: a class escape into s (*is_set), or one code point (returned). */
static int32_t rx_escape(rxp *P, bool in_class, cset *s, bool *is_set)
{
    *is_set = false;
    if (P->i >= P->n)
        return rx_fail(P, "a pattern ending in a backslash");
    int c = P->s[P->i];
    if (strchr("dDwWsS", c) && c) {
        P->i++;
        bool ok;
        cset t = {0}; /* (negated on its own, then added: [a\D] is a or a non-digit) */
        int rc = cs_class(&t, c, &ok);
        for (int32_t k = 0; k < t.n && !rc; k++)
            rc = cs_add(s, t.r[2 * k], t.r[2 * k + 1]);
        free(t.r);
        if (rc)
            return P->failed = fl_err_set(P->e, FL_ENOMEM, "out of memory"), -1;
        *is_set = true;
        return 0;
    }
    P->i++;
    switch (c) {
    case 't': return 9;
    case 'n': return 10;
    case 'v': return 11;
    case 'f': return 12;
    case 'r': return 13;
    case '0':
        if (P->i < P->n && P->s[P->i] >= '0' && P->s[P->i] <= '9')
            return rx_fail(P, "an octal escape (not allowed with the u flag)");
        return 0;
    case 'b':
        if (in_class)
            return 8;
        return rx_fail(P, "unsupported: the word boundary \\b");
    case 'B': return rx_fail(P, "unsupported: \\B");
    case 'k': return rx_fail(P, "unsupported: a named backreference \\k");
    case 'p':
    case 'P': return rx_fail(P, "unsupported: a Unicode property escape \\p{...}");
    case 'c': {
        int l = P->i < P->n ? P->s[P->i] : 0;
        if (!((l >= 'a' && l <= 'z') || (l >= 'A' && l <= 'Z')))
            return rx_fail(P, "a malformed control escape \\c");
        P->i++;
        return l % 32;
    }
    case 'x': return rx_hex(P, 2);
    case 'u': {
        if (P->i < P->n && P->s[P->i] == '{') {
            P->i++;
            int32_t v = 0;
            size_t start = P->i;
            while (P->i < P->n && hexval(P->s[P->i]) >= 0 && v < FL_CP_END)
                v = v * 16 + hexval(P->s[P->i++]);
            if (P->i == start || P->i >= P->n || P->s[P->i] != '}' || v >= FL_CP_END)
                return rx_fail(P, "a malformed \\u{...} escape");
            P->i++;
            return v;
        }
        int32_t v = rx_hex(P, 4);
        /* a surrogate pair written as two escapes is one character (the u flag) */
        if (v >= 0xd800 && v <= 0xdbff && P->i + 6 <= P->n && P->s[P->i] == '\\' &&
            P->s[P->i + 1] == 'u') {
            size_t at = P->i;
            P->i += 2;
            int32_t w = rx_hex(P, 4);
            if (w >= 0xdc00 && w <= 0xdfff)
                return 0x10000 + ((v - 0xd800) << 10) + (w - 0xdc00);
            P->i = at;
        }
        return v;
    }
    default:
        break;
    }
    if (c >= '1' && c <= '9')
        return rx_fail(P, "unsupported: a backreference");
    if (c && strchr("^$\\.*+?()[]{}|/", c))
        return c;
    if (c == '-' && in_class)
        return c;
    P->i--;
    return rx_fail(P, "an unknown escape (not allowed with the u flag)");
}

/* one character of a class, or a class escape added to s (*is_set) */
static int32_t rx_class_atom(rxp *P, cset *s, bool *is_set)
{
    *is_set = false;
    if (P->s[P->i] != '\\')
        return rx_cp(P);
    P->i++;
    return rx_escape(P, true, s, is_set);
}

static int32_t rx_class(rxp *P)
{
    cset s = {0};
    bool neg = false;
    if (P->i < P->n && P->s[P->i] == '^') {
        neg = true;
        P->i++;
    }
    int rc = 0;
    while (!P->failed) {
        if (P->i >= P->n) {
            rx_fail(P, "an unterminated character class");
            break;
        }
        if (P->s[P->i] == ']') {
            P->i++;
            break;
        }
        bool set1 = false, set2 = false;
        int32_t a = rx_class_atom(P, &s, &set1);
        if (P->failed)
            break;
        if (P->i + 1 < P->n && P->s[P->i] == '-' && P->s[P->i + 1] != ']') {
            P->i++;
            int32_t b = rx_class_atom(P, &s, &set2);
            if (P->failed)
                break;
            if (set1 || set2) {
                rx_fail(P, "a class escape as a range's end");
                break;
            }
            if (a > b) {
                rx_fail(P, "a character class range out of order");
                break;
            }
            rc |= cs_add(&s, a, b);
        } else if (!set1) {
            rc |= cs_add(&s, a, a);
        }
    }
    if (rc && !P->failed)
        P->failed = fl_err_set(P->e, FL_ENOMEM, "out of memory");
    if (!P->failed && (cs_norm(&s) || (neg && cs_negate(&s))))
        P->failed = fl_err_set(P->e, FL_ENOMEM, "out of memory");
    if (P->failed) {
        free(s.r);
        return -1;
    }
    return rx_set(P, &s);
}

static int32_t rx_alt(rxp *P, bool top, bool anchored);

static int32_t rx_atom(rxp *P)
{
    int c = P->s[P->i];
    switch (c) {
    case '(': {
        P->i++;
        if (P->i < P->n && P->s[P->i] == '?') {
            const char *r = (const char *)P->s + P->i;
            size_t left = P->n - P->i;
            if (left >= 2 && (r[1] == '=' || r[1] == '!'))
                return rx_fail(P, "unsupported: lookahead");
            if (left >= 3 && r[1] == '<' && (r[2] == '=' || r[2] == '!'))
                return rx_fail(P, "unsupported: lookbehind");
            if (left >= 2 && r[1] == ':') {
                P->i += 2;
            } else if (left >= 2 && r[1] == '<') {
                P->i += 2;
                while (P->i < P->n && P->s[P->i] != '>')
                    P->i++;
                if (P->i >= P->n)
                    return rx_fail(P, "an unterminated group name");
                P->i++;
            } else {
                return rx_fail(P, "an unknown group (?");
            }
        }
        if (++P->depth > RX_MAX_DEPTH)
            return rx_fail(P, "groups nested too deep");
        int32_t x = rx_alt(P, false, false);
        P->depth--;
        if (P->failed)
            return -1;
        if (P->i >= P->n || P->s[P->i] != ')')
            return rx_fail(P, "an unterminated group");
        P->i++;
        return x;
    }
    case '[':
        P->i++;
        return rx_class(P);
    case '.': {
        P->i++;
        cset s = {0};
        if (cs_add(&s, 10, 10) || cs_add(&s, 13, 13) || cs_add(&s, 0x2028, 0x2029) ||
            cs_norm(&s) || cs_negate(&s)) {
            free(s.r);
            return P->failed = fl_err_set(P->e, FL_ENOMEM, "out of memory"), -1;
        }
        return rx_set(P, &s);
    }
    case '\\': {
        P->i++;
        cset s = {0};
        bool is_set;
        int32_t v = rx_escape(P, false, &s, &is_set);
        if (P->failed) {
            free(s.r);
            return -1;
        }
        if (is_set)
            return rx_set(P, &s);
        free(s.r);
        return rx_range(P, v, v);
    }
    case '*':
    case '+':
    case '?':
    case '{': return rx_fail(P, "a quantifier without anything to repeat");
    case '}':
    case ']': return rx_fail(P, "a lone bracket (not allowed with the u flag)");
    default: {
        int32_t v = rx_cp(P);
        return rx_range(P, v, v);
    }
    }
}

/* {n}, {n,}, {n,m} after the '{'; -1 with nothing consumed when it is not one */
static int rx_count(rxp *P, int32_t *mn, int32_t *mx)
{
    size_t at = P->i;
    int64_t a = 0, b = -1;
    int nd = 0;
    while (P->i < P->n && P->s[P->i] >= '0' && P->s[P->i] <= '9') { /* (clamped: any count) */
        a = a * 10 + (P->s[P->i++] - '0'), nd++;
        if (a > FL_CPA_MAX_REPEAT)
            a = FL_CPA_MAX_REPEAT + 1;
    }
    if (!nd)
        goto no;
    if (P->i < P->n && P->s[P->i] == ',') {
        P->i++;
        nd = 0;
        int64_t v = 0;
        while (P->i < P->n && P->s[P->i] >= '0' && P->s[P->i] <= '9') {
            v = v * 10 + (P->s[P->i++] - '0'), nd++;
            if (v > FL_CPA_MAX_REPEAT)
                v = FL_CPA_MAX_REPEAT + 1;
        }
        b = nd ? v : -1;
    } else {
        b = a;
    }
    if (P->i >= P->n || P->s[P->i] != '}')
        goto no;
    P->i++;
    if (a > FL_CPA_MAX_REPEAT || b > FL_CPA_MAX_REPEAT)
        return rx_fail(P, "a repetition count above " FL_STR(FL_CPA_MAX_REPEAT)), -2;
    if (b >= 0 && a > b)
        return rx_fail(P, "a repetition {n,m} with n above m"), -2;
    *mn = (int32_t)a;
    *mx = (int32_t)b;
    return 0;
no:
    P->i = at;
    return -1;
}

/* v[n++] = x, v growing from the caller's stack buffer buf to the heap; -1 out of memory */
static int vec_push(int32_t **v, int32_t *n, int32_t *cap, const int32_t *buf, int32_t x)
{
    if (*n == *cap) {
        int32_t *t = malloc(sizeof(int32_t) * (size_t)*cap * 2);
        if (!t)
            return -1;
        memcpy(t, *v, sizeof(int32_t) * (size_t)*n);
        if (*v != buf)
            free(*v);
        *v = t;
        *cap *= 2;
    }
    (*v)[(*n)++] = x;
    return 0;
}

/* x repeated min .. max times (max -1: no bound) */
static int32_t rx_rep(rxp *P, int32_t x, int32_t min, int32_t max)
{
    rxn r = {.kind = RX_REP, .min = min, .max = max};
    if (rx_list(P, RX_SEQ, &x, 1) < 0)
        return -1;
    r.kid = P->nd[P->nn - 1].kid; /* the pool slot holding x */
    P->nn--;                      /* (the helper node is not needed) */
    return rx_node(P, r);
}

static int32_t rx_seq(rxp *P, bool top)
{
    int32_t buf[64], *v = buf, n = 0, cap = 64;
    int32_t res = -1;
    while (!P->failed && P->i < P->n) {
        int c = P->s[P->i];
        if (c == '|' || c == ')')
            break;
        if (c == '^') {
            rx_fail(P, "'^' other than at the start of the pattern (or of a top-level "
                       "alternative) is not supported");
            break;
        }
        if (c == '$') {
            P->i++;
            if (top && (P->i == P->n || P->s[P->i] == '|')) {
                P->top_end = true;
                break;
            }
            P->i--;
            rx_fail(P, "'$' other than at the end of the pattern (or of a top-level "
                       "alternative) is not supported");
            break;
        }
        int32_t x = rx_atom(P);
        if (P->failed)
            break;
        if (P->i < P->n && strchr("*+?{", P->s[P->i]) && P->s[P->i]) {
            int32_t mn = 0, mx = -1;
            int q = P->s[P->i++];
            if (q == '+')
                mn = 1;
            else if (q == '?')
                mx = 1;
            else if (q == '{') {
                int r = rx_count(P, &mn, &mx);
                if (r == -2)
                    break;
                if (r < 0) {
                    P->i--;
                    rx_fail(P, "a lone '{' (not allowed with the u flag)");
                    break;
                }
            }
            if (P->i < P->n && P->s[P->i] == '?') /* lazy: the same language */
                P->i++;
            if (P->i < P->n && strchr("*+?{", P->s[P->i]) && P->s[P->i]) {
                rx_fail(P, "a quantifier without anything to repeat");
                break;
            }
            if ((x = rx_rep(P, x, mn, mx)) < 0)
                break;
        }
        if (vec_push(&v, &n, &cap, buf, x)) {
            P->failed = fl_err_set(P->e, FL_ENOMEM, "out of memory");
            break;
        }
    }
    if (!P->failed)
        res = rx_list(P, RX_SEQ, v, n);
    if (v != buf)
        free(v);
    return res;
}

static int32_t rx_any(rxp *P)
{
    cset s = {0};
    if (cs_add(&s, 0, FL_CP_END - 1)) {
        free(s.r);
        return P->failed = fl_err_set(P->e, FL_ENOMEM, "out of memory"), -1;
    }
    int32_t a = rx_set(P, &s);
    return a < 0 ? -1 : rx_rep(P, a, 0, -1);
}

/* alternatives; at the top, each is found anywhere in the string unless anchored */
static int32_t rx_alt(rxp *P, bool top, bool anchored)
{
    int32_t buf[16], *v = buf, n = 0, cap = 16, res = -1;
    for (;;) {
        bool start = anchored;
        if (top && P->i < P->n && P->s[P->i] == '^') {
            start = true;
            P->i++;
        }
        P->top_end = false;
        int32_t x = rx_seq(P, top);
        if (P->failed)
            break;
        if (top && !anchored) {
            int32_t parts[3], k = 0;
            if (!start)
                parts[k++] = rx_any(P);
            parts[k++] = x;
            if (!P->top_end)
                parts[k++] = rx_any(P);
            x = rx_list(P, RX_SEQ, parts, k);
            if (P->failed)
                break;
        }
        if (vec_push(&v, &n, &cap, buf, x)) {
            P->failed = fl_err_set(P->e, FL_ENOMEM, "out of memory");
            break;
        }
        if (P->i < P->n && P->s[P->i] == '|') {
            P->i++;
            continue;
        }
        break;
    }
    if (!P->failed)
        res = n == 1 ? v[0] : rx_list(P, RX_ALT, v, n);
    if (v != buf)
        free(v);
    return res;
}

/* ---- the NFA over code point sets ---- */

typedef struct cnst {
    int32_t e1, e2, to, set;
} cnst;

typedef struct cnfa {
    cnst *s;
    int32_t n, cap;
    const rxp *P;
    fl_err *e;
    int failed;
} cnfa;

typedef struct cfrag {
    int32_t in, out;
} cfrag;

static int32_t cn_new(cnfa *N)
{
    if (N->failed)
        return 0;
    if (N->n >= FL_CPA_MAX_STATES) {
        N->failed = fl_err_set(N->e, FL_ERANGE, "too large: its automaton passed %d states",
                               FL_CPA_MAX_STATES);
        return 0;
    }
    if (N->n == N->cap) {
        int32_t cap = N->cap ? N->cap * 2 : 256;
        cnst *s = realloc(N->s, sizeof *s * (size_t)cap);
        if (!s) {
            N->failed = fl_err_set(N->e, FL_ENOMEM, "out of memory");
            return 0;
        }
        N->s = s;
        N->cap = cap;
    }
    N->s[N->n] = (cnst){-1, -1, -1, -1};
    return N->n++;
}

static void cn_eps(cnfa *N, int32_t from, int32_t to)
{
    if (N->failed)
        return;
    if (N->s[from].e1 < 0)
        N->s[from].e1 = to;
    else
        N->s[from].e2 = to;
}

static cfrag cn_build(cnfa *N, int32_t x)
{
    const rxn *r = &N->P->nd[x];
    if (N->failed)
        return (cfrag){0, 0};
    switch (r->kind) {
    case RX_SET: {
        int32_t a = cn_new(N), b = cn_new(N);
        if (!N->failed) {
            N->s[a].to = b;
            N->s[a].set = r->set;
        }
        return (cfrag){a, b};
    }
    case RX_SEQ: {
        int32_t a = cn_new(N);
        cfrag f = {a, a};
        for (int32_t k = 0; k < r->nkid && !N->failed; k++) {
            cfrag g = cn_build(N, N->P->kids[r->kid + k]);
            cn_eps(N, f.out, g.in);
            f.out = g.out;
        }
        return f;
    }
    case RX_ALT: {
        /* a chain of forks, each with two epsilon edges */
        int32_t in = cn_new(N), out = cn_new(N), at = in;
        for (int32_t k = 0; k < r->nkid && !N->failed; k++) {
            cfrag g = cn_build(N, N->P->kids[r->kid + k]);
            cn_eps(N, at, g.in);
            cn_eps(N, g.out, out);
            if (k + 1 < r->nkid) {
                int32_t nx = cn_new(N);
                cn_eps(N, at, nx);
                at = nx;
            }
        }
        return (cfrag){in, out};
    }
    default: { /* RX_REP: min copies, then max - min optional ones (or a loop) */
        int32_t kid = N->P->kids[r->kid];
        int32_t a = cn_new(N);
        cfrag f = {a, a};
        for (int32_t k = 0; k < r->min && !N->failed; k++) {
            cfrag g = cn_build(N, kid);
            cn_eps(N, f.out, g.in);
            f.out = g.out;
        }
        if (r->max < 0) {
            cfrag g = cn_build(N, kid);
            int32_t t = cn_new(N);
            cn_eps(N, f.out, g.in);
            cn_eps(N, f.out, t);
            cn_eps(N, g.out, g.in);
            cn_eps(N, g.out, t);
            f.out = t;
        } else if (r->max > r->min) {
            int32_t t = cn_new(N);
            for (int32_t k = r->min; k < r->max && !N->failed; k++) {
                cfrag g = cn_build(N, kid);
                cn_eps(N, f.out, g.in);
                cn_eps(N, f.out, t);
                f.out = g.out;
            }
            cn_eps(N, f.out, t);
            f.out = t;
        }
        return f;
    }
    }
}

/* ---- automata: allocation, pruning ---- */

static fl_cpa *cpa_new(int32_t n, int32_t ncls)
{
    fl_cpa *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->n = n;
    a->ncls = ncls;
    a->lo = malloc(sizeof(int32_t) * (size_t)(ncls + 1));
    a->next = malloc(sizeof(int32_t) * (size_t)n * (size_t)ncls + 1);
    a->accept = calloc((size_t)n + 1, 1);
    if (!a->lo || !a->next || !a->accept) {
        fl_cpa_free(a);
        return NULL;
    }
    memset(a->next, 0xff, sizeof(int32_t) * (size_t)n * (size_t)ncls);
    return a;
}

void fl_cpa_free(fl_cpa *a)
{
    if (!a)
        return;
    free(a->lo);
    free(a->next);
    free(a->accept);
    free(a->grp);
    free(a->cnt);
    free(a);
}

/* Keeps the states that can reach an accepting one (the start always), renumbered in their
   order. */
static int cpa_prune(fl_cpa *a)
{
    int32_t n = a->n, c = a->ncls;
    uint8_t *live = calloc((size_t)n, 1);
    int32_t *map = malloc(sizeof(int32_t) * (size_t)n);
    if (!live || !map) {
        free(live);
        free(map);
        return -1;
    }
    for (int32_t s = 0; s < n; s++)
        live[s] = a->accept[s];
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t s = n - 1; s >= 0; s--)
            for (int32_t k = 0; k < c && !live[s]; k++) {
                int32_t t = a->next[(size_t)s * (size_t)c + (size_t)k];
                if (t >= 0 && live[t])
                    live[s] = 1, changed = true;
            }
    }
    live[0] = 1;
    int32_t m = 0;
    for (int32_t s = 0; s < n; s++)
        map[s] = live[s] ? m++ : -1;
    for (int32_t s = 0; s < n; s++) {
        if (!live[s])
            continue;
        for (int32_t k = 0; k < c; k++) {
            int32_t t = a->next[(size_t)s * (size_t)c + (size_t)k];
            a->next[(size_t)map[s] * (size_t)c + (size_t)k] = t >= 0 ? map[t] : -1;
        }
        a->accept[map[s]] = a->accept[s];
        if (a->grp) {
            a->grp[map[s]] = a->grp[s];
            a->cnt[map[s]] = a->cnt[s];
        }
    }
    a->n = m;
    free(live);
    free(map);
    return 0;
}

/* ---- subset construction ---- */

typedef struct sets_tab {
    int32_t **v; /* each state's sorted NFA states */
    int64_t ints; /* their lengths' sum */
    int32_t *len;
    uint64_t *h;
    int32_t n, cap;
    int32_t *tab;
    size_t tabn;
} sets_tab;

static uint64_t hash_i32(const int32_t *v, int32_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (int32_t i = 0; i < n; i++)
        h = (h ^ (uint64_t)(uint32_t)v[i]) * 1099511628211ull;
    return h;
}

/* the index of v[0..n) in T, added when new; -1 on failure */
static int32_t st_intern(sets_tab *T, const int32_t *v, int32_t n, fl_err *e)
{
    uint64_t h = hash_i32(v, n);
    if ((size_t)T->n * 2 + 2 >= T->tabn) {
        size_t tn = T->tabn ? T->tabn * 2 : 1024;
        int32_t *t = malloc(sizeof(int32_t) * tn);
        if (!t)
            return fl_err_set(e, FL_ENOMEM, "out of memory"), -1;
        memset(t, 0xff, sizeof(int32_t) * tn);
        for (int32_t i = 0; i < T->n; i++) {
            size_t k = (size_t)T->h[i] & (tn - 1);
            while (t[k] >= 0)
                k = (k + 1) & (tn - 1);
            t[k] = i;
        }
        free(T->tab);
        T->tab = t;
        T->tabn = tn;
    }
    size_t j = (size_t)h & (T->tabn - 1);
    for (; T->tab[j] >= 0; j = (j + 1) & (T->tabn - 1)) {
        int32_t i = T->tab[j];
        if (T->h[i] == h && T->len[i] == n && !memcmp(T->v[i], v, sizeof(int32_t) * (size_t)n))
            return i;
    }
    if (T->n >= FL_CPA_MAX_STATES || T->ints + n > FL_CPA_MAX_SET_INTS)
        return fl_err_set(e, FL_ERANGE, "too large: its automaton passed %d states",
                          T->n), -1;
    T->ints += n;
    if (T->n == T->cap) {
        int32_t cap = T->cap ? T->cap * 2 : 64;
        int32_t **nv = realloc(T->v, sizeof *nv * (size_t)cap);
        if (nv)
            T->v = nv;
        int32_t *nl = realloc(T->len, sizeof *nl * (size_t)cap);
        if (nl)
            T->len = nl;
        uint64_t *nh = realloc(T->h, sizeof *nh * (size_t)cap);
        if (nh)
            T->h = nh;
        if (!nv || !nl || !nh)
            return fl_err_set(e, FL_ENOMEM, "out of memory"), -1;
        T->cap = cap;
    }
    int32_t *copy = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    if (!copy)
        return fl_err_set(e, FL_ENOMEM, "out of memory"), -1;
    memcpy(copy, v, sizeof(int32_t) * (size_t)n);
    T->v[T->n] = copy;
    T->len[T->n] = n;
    T->h[T->n] = h;
    T->tab[j] = T->n;
    return T->n++;
}

static void st_free(sets_tab *T)
{
    for (int32_t i = 0; i < T->n; i++)
        free(T->v[i]);
    free(T->v);
    free(T->len);
    free(T->h);
    free(T->tab);
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* epsilon closure of buf[0..n), sorted, in buf (room for every NFA state) */
static int32_t cn_closure(const cnfa *N, int32_t *buf, int32_t n, int32_t *stack, int32_t *mark,
                          int32_t epoch, int64_t *work)
{
    int32_t sp = 0, m = 0;
    for (int32_t i = 0; i < n; i++)
        if (mark[buf[i]] != epoch) {
            mark[buf[i]] = epoch;
            stack[sp++] = buf[i];
        }
    while (sp) {
        int32_t x = stack[--sp];
        buf[m++] = x;
        int32_t e[2] = {N->s[x].e1, N->s[x].e2};
        for (int k = 0; k < 2; k++)
            if (e[k] >= 0 && mark[e[k]] != epoch) {
                mark[e[k]] = epoch;
                stack[sp++] = e[k];
            }
    }
    *work += m;
    qsort(buf, (size_t)m, sizeof(int32_t), cmp_i32);
    return m;
}

/* Room in *next (capacity *cap entries) for rows of ncls entries, within FL_CPA_MAX_CELLS;
   FL_ERANGE (with a message) or FL_ENOMEM (without: the caller says it) */
static int table_rows(int32_t **next, size_t *cap, int32_t rows, int32_t ncls, fl_err *e)
{
    if ((int64_t)rows * ncls > FL_CPA_MAX_CELLS)
        return fl_err_set(e, FL_ERANGE, "too large: %d states of %d character classes", rows,
                          ncls);
    if ((size_t)rows * (size_t)ncls <= *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : (size_t)ncls * 64;
    while (c < (size_t)rows * (size_t)ncls)
        c *= 2;
    int32_t *t = realloc(*next, sizeof(int32_t) * c);
    if (!t)
        return FL_ENOMEM;
    *next = t;
    *cap = c;
    return 0;
}

static int32_t cls_of(const int32_t *lo, int32_t ncls, int32_t cp)
{
    int32_t a = 0, b = ncls; /* the k with lo[k] <= cp < lo[k + 1] */
    while (b - a > 1) {
        int32_t m = (a + b) / 2;
        if (lo[m] <= cp)
            a = m;
        else
            b = m;
    }
    return a;
}

static int cn_to_cpa(const cnfa *N, cfrag f, fl_cpa **out, fl_err *e)
{
    const rxp *P = N->P;
    int rc = FL_ENOMEM;
    sets_tab T = {0};
    fl_cpa *a = NULL;
    int32_t *next = NULL;
    size_t next_cap = 0;
    /* the classes: every set's boundaries */
    int32_t nb = 2;
    for (int32_t i = 0; i < P->ns; i++)
        nb += 2 * P->sets[i].n;
    int32_t *lo = malloc(sizeof(int32_t) * (size_t)nb);
    int32_t *buf = malloc(sizeof(int32_t) * (size_t)N->n + 1);
    int32_t *stack = malloc(sizeof(int32_t) * (size_t)N->n + 1);
    int32_t *mark = calloc((size_t)N->n + 1, sizeof(int32_t));
    int32_t *cnt = NULL, *bucket = NULL, *c0 = NULL, *c1 = NULL, *soff = NULL;
    if (!lo || !buf || !stack || !mark)
        goto fail;
    int32_t m = 0;
    lo[m++] = 0;
    lo[m++] = FL_CP_END;
    for (int32_t i = 0; i < P->ns; i++)
        for (int32_t k = 0; k < P->sets[i].n; k++) {
            lo[m++] = P->sets[i].r[2 * k];
            lo[m++] = P->sets[i].r[2 * k + 1] + 1;
        }
    qsort(lo, (size_t)m, sizeof(int32_t), cmp_i32);
    int32_t u = 0;
    for (int32_t i = 0; i < m; i++)
        if (!u || lo[i] != lo[u - 1])
            lo[u++] = lo[i];
    int32_t ncls = u - 1;
    /* each set's pairs as class ranges */
    int32_t npair = 0;
    soff = malloc(sizeof(int32_t) * (size_t)(P->ns + 1));
    if (!soff)
        goto fail;
    for (int32_t i = 0; i < P->ns; i++) {
        soff[i] = npair;
        npair += P->sets[i].n;
    }
    soff[P->ns] = npair;
    c0 = malloc(sizeof(int32_t) * (size_t)(npair + 1));
    c1 = malloc(sizeof(int32_t) * (size_t)(npair + 1));
    cnt = malloc(sizeof(int32_t) * (size_t)(ncls + 1));
    if (!c0 || !c1 || !cnt)
        goto fail;
    for (int32_t i = 0; i < P->ns; i++)
        for (int32_t k = 0; k < P->sets[i].n; k++) {
            c0[soff[i] + k] = cls_of(lo, ncls, P->sets[i].r[2 * k]);
            c1[soff[i] + k] = cls_of(lo, ncls, P->sets[i].r[2 * k + 1]) + 1;
        }
    int64_t work = 0;
    int32_t epoch = 1;
    buf[0] = f.in;
    if (st_intern(&T, buf, cn_closure(N, buf, 1, stack, mark, epoch++, &work), e) < 0) {
        rc = e ? e->code : FL_ERANGE;
        goto fail;
    }
    size_t bcap = 0;
    for (int32_t d = 0; d < T.n; d++) {
        if ((rc = table_rows(&next, &next_cap, d + 1, ncls, e)))
            goto fail;
        rc = FL_ENOMEM;
        /* the targets per class, counted then placed */
        memset(cnt, 0, sizeof(int32_t) * (size_t)(ncls + 1));
        size_t total = 0;
        for (int32_t i = 0; i < T.len[d]; i++) {
            const cnst *x = &N->s[T.v[d][i]];
            if (x->to < 0)
                continue;
            for (int32_t p = soff[x->set]; p < soff[x->set + 1]; p++)
                for (int32_t k = c0[p]; k < c1[p]; k++)
                    cnt[k + 1]++, total++;
        }
        work += (int64_t)total + ncls;
        if (work > FL_CPA_MAX_WORK) {
            rc = fl_err_set(e, FL_ERANGE, "too large to compile (over %lld steps)",
                            (long long)FL_CPA_MAX_WORK);
            goto fail;
        }
        for (int32_t k = 0; k < ncls; k++)
            cnt[k + 1] += cnt[k];
        if (total > bcap) {
            free(bucket);
            bcap = total * 2;
            bucket = malloc(sizeof(int32_t) * bcap);
            if (!bucket)
                goto fail;
        }
        for (int32_t i = 0; i < T.len[d]; i++) {
            const cnst *x = &N->s[T.v[d][i]];
            if (x->to < 0)
                continue;
            for (int32_t p = soff[x->set]; p < soff[x->set + 1]; p++)
                for (int32_t k = c0[p]; k < c1[p]; k++)
                    bucket[cnt[k]++] = x->to; /* cnt[k] runs up to the next class's start */
        }
        for (int32_t k = ncls - 1; k >= 0; k--) /* back to the starts */
            cnt[k + 1] = cnt[k];
        cnt[0] = 0;
        for (int32_t k = 0; k < ncls; k++) {
            int32_t n = cnt[k + 1] - cnt[k], t = -1;
            if (n) {
                memcpy(buf, bucket + cnt[k], sizeof(int32_t) * (size_t)n);
                t = st_intern(&T, buf, cn_closure(N, buf, n, stack, mark, epoch++, &work), e);
                if (t < 0) {
                    rc = e ? e->code : FL_ERANGE;
                    goto fail;
                }
            }
            next[(size_t)d * (size_t)ncls + (size_t)k] = t;
        }
    }
    a = cpa_new(T.n, ncls);
    if (!a)
        goto fail;
    memcpy(a->lo, lo, sizeof(int32_t) * (size_t)(ncls + 1));
    memcpy(a->next, next, sizeof(int32_t) * (size_t)T.n * (size_t)ncls);
    for (int32_t d = 0; d < T.n; d++)
        for (int32_t i = 0; i < T.len[d]; i++)
            a->accept[d] |= T.v[d][i] == f.out;
    if (cpa_prune(a))
        goto fail;
    *out = a;
    a = NULL;
    rc = 0;
fail:
    if (rc == FL_ENOMEM)
        fl_err_set(e, FL_ENOMEM, "out of memory");
    fl_cpa_free(a);
    st_free(&T);
    free(next);
    free(lo);
    free(buf);
    free(stack);
    free(mark);
    free(cnt);
    free(bucket);
    free(c0);
    free(c1);
    free(soff);
    return rc;
}

int fl_cpa_regex(const char *pattern, bool anchored, fl_cpa **out, fl_err *e)
{
    *out = NULL;
    rxp P = {.s = (const unsigned char *)pattern, .n = strlen(pattern), .e = e};
    int32_t root = rx_alt(&P, true, anchored);
    if (!P.failed && P.i < P.n) /* a ')' without its '(' */
        rx_fail(&P, "a ')' without its '('");
    int rc = P.failed;
    if (!rc) {
        cnfa N = {.P = &P, .e = e};
        cfrag f = cn_build(&N, root);
        rc = N.failed;
        if (!rc)
            rc = cn_to_cpa(&N, f, out, e);
        free(N.s);
    }
    for (int32_t i = 0; i < P.ns; i++)
        free(P.sets[i].r);
    free(P.sets);
    free(P.nd);
    free(P.kids);
    return rc ? -1 : 0;
}

/* ---- lengths, products ---- */

static int cmp_cp(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

typedef struct fl_word {
    const char *w;
    int32_t i;
} fl_word;

static int cmp_word(const void *a, const void *b)
{
    return strcmp(((const fl_word *)a)->w, ((const fl_word *)b)->w);
}

/* The trie of the words (one state per prefix) and a state past them all: from a prefix, a
   character that goes on to a longer prefix goes there, any other to the state past; a prefix
   that is a word does not accept, every other state does. Classes: each character of a word
   its own, the gaps between them, the surrogates (never). */
int fl_cpa_except(const char *const *words, int32_t nw, fl_cpa **out, fl_err *e)
{
    *out = NULL;
    int rc = FL_ENOMEM;
    size_t total = 0;
    for (int32_t w = 0; w < nw; w++)
        total += strlen(words[w]);
    if (total + 2 >= FL_CPA_MAX_STATES)
        return fl_err_set(e, FL_ERANGE, "the names are too long (more than %d characters in all)",
                          FL_CPA_MAX_STATES - 3), -1;
    /* the words as code points, kept in one array: word w is cps[at[w] .. at[w + 1]) */
    int32_t *cps = malloc(sizeof(int32_t) * (total + 1)), *at = malloc(sizeof(int32_t) * ((size_t)nw + 1));
    int32_t *cuts = malloc(sizeof(int32_t) * (2 * total + 4));
    int32_t *par = malloc(sizeof(int32_t) * (total + 2)), *ch = malloc(sizeof(int32_t) * (total + 2));
    uint8_t *word_end = calloc(total + 2, 1);
    int32_t *path = malloc(sizeof(int32_t) * (total + 2));
    fl_word *ord = malloc(sizeof *ord * ((size_t)nw + 1));
    fl_cpa *a = NULL;
    if (!cps || !at || !cuts || !par || !ch || !word_end || !path || !ord)
        goto done;
    int32_t n = 0, ncut = 0;
    for (int32_t w = 0; w < nw; w++) {
        rxp P = {.s = (const unsigned char *)words[w], .n = strlen(words[w]), .e = e};
        at[w] = n;
        while (P.i < P.n && !P.failed)
            cps[n++] = rx_cp(&P);
        if (P.failed) {
            rc = FL_EINVAL;
            goto done;
        }
    }
    at[nw] = n;
    cuts[ncut++] = 0;
    cuts[ncut++] = SUR_LO;
    cuts[ncut++] = SUR_HI + 1;
    for (int32_t k = 0; k < n; k++) {
        cuts[ncut++] = cps[k];
        cuts[ncut++] = cps[k] + 1;
    }
    qsort(cuts, (size_t)ncut, sizeof *cuts, cmp_cp);
    int32_t ncls = 0;
    for (int32_t k = 0; k < ncut; k++)
        if (!ncls || cuts[k] != cuts[ncls - 1])
            cuts[ncls++] = cuts[k];
    /* the trie: state t's parent par[t] and the character ch[t] into it; 0 the empty prefix.
       Words in order (UTF-8's byte order is the code points'): a word shares with the trie
       what it shares with the word before it, whose states are path[0 ..]. */
    for (int32_t w = 0; w < nw; w++)
        ord[w] = (fl_word){words[w], w};
    qsort(ord, (size_t)nw, sizeof *ord, cmp_word);
    int32_t nt = 1, prev = -1;
    path[0] = 0;
    for (int32_t x = 0; x < nw; x++) {
        int32_t w = ord[x].i, len = at[w + 1] - at[w], l = 0;
        int32_t plen = prev < 0 ? 0 : at[prev + 1] - at[prev];
        while (prev >= 0 && l < len && l < plen && cps[at[w] + l] == cps[at[prev] + l])
            l++;
        for (int32_t d = l; d < len; d++) {
            par[nt] = path[d];
            ch[nt] = cps[at[w] + d];
            path[d + 1] = nt++;
        }
        word_end[path[len]] = 1;
        prev = w;
    }
    if ((int64_t)(nt + 1) * ncls > FL_CPA_MAX_CELLS) {
        rc = FL_ERANGE;
        fl_err_set(e, FL_ERANGE, "the names are too many to leave out (more than %lld cells)",
                   (long long)FL_CPA_MAX_CELLS);
        goto done;
    }
    a = cpa_new(nt + 1, ncls);
    if (!a)
        goto done;
    memcpy(a->lo, cuts, sizeof(int32_t) * (size_t)ncls);
    a->lo[ncls] = FL_CP_END;
    int32_t past = nt;
    for (int32_t t = 0; t <= nt; t++) {
        a->accept[t] = t == past || !word_end[t];
        for (int32_t k = 0; k < ncls; k++)
            a->next[(size_t)t * (size_t)ncls + (size_t)k] = a->lo[k] == SUR_LO ? -1 : past;
    }
    for (int32_t u = 1; u < nt; u++) /* (the class of ch[u] is ch[u] alone) */
        a->next[(size_t)par[u] * (size_t)ncls + (size_t)cls_of(a->lo, ncls, ch[u])] = u;
    *out = a;
    a = NULL;
    rc = 0;
done:
    if (rc == FL_ENOMEM)
        fl_err_set(e, FL_ENOMEM, "out of memory");
    fl_cpa_free(a);
    free(cps), free(at), free(cuts), free(par), free(ch), free(word_end), free(path), free(ord);
    return rc ? -1 : 0;
}

int fl_cpa_length(int64_t min, int64_t max, fl_cpa **out, fl_err *e)
{
    *out = NULL;
    int64_t top = max >= 0 ? max : min;
    if (top >= FL_CPA_MAX_STATES)
        return fl_err_set(e, FL_ERANGE, "a length above %d", FL_CPA_MAX_STATES - 1), -1;
    /* classes: below the surrogates, the surrogates (never), above them */
    fl_cpa *a = cpa_new((int32_t)top + 1, 3);
    if (a && (a->grp = calloc((size_t)top + 1, sizeof(int32_t))) != NULL)
        a->cnt = malloc(sizeof(int32_t) * ((size_t)top + 1));
    if (!a || !a->cnt) {
        fl_cpa_free(a);
        return fl_err_set(e, FL_ENOMEM, "out of memory"), -1;
    }
    a->counter = true;
    a->lo[0] = 0;
    a->lo[1] = SUR_LO;
    a->lo[2] = SUR_HI + 1;
    a->lo[3] = FL_CP_END;
    for (int32_t s = 0; s <= top; s++) {
        int32_t t = s < top ? s + 1 : max < 0 ? s : -1;
        a->next[s * 3] = a->next[s * 3 + 2] = t;
        a->accept[s] = s >= min;
        a->cnt[s] = s;
    }
    *out = a;
    return 0;
}

/* a x b: both accept (or), over the classes both cut */
static int cpa_product(const fl_cpa *a, const fl_cpa *b, bool or, fl_cpa **out, fl_err *e)
{
    *out = NULL;
    int rc = FL_ENOMEM;
    int32_t *lo = malloc(sizeof(int32_t) * (size_t)(a->ncls + b->ncls + 2));
    int32_t *ca = malloc(sizeof(int32_t) * (size_t)(a->ncls + b->ncls + 2));
    int32_t *cb = malloc(sizeof(int32_t) * (size_t)(a->ncls + b->ncls + 2));
    int64_t *pairs = NULL, *tab = NULL;
    int32_t *next = NULL, np = 0, pcap = 0;
    size_t tabn = 1024, next_cap = 0;
    fl_cpa *r = NULL;
    if (!lo || !ca || !cb)
        goto fail;
    int32_t m = 0, i = 0, j = 0;
    while (i < a->ncls || j < b->ncls) { /* merge the boundaries */
        int32_t x = a->lo[i], y = b->lo[j];
        lo[m] = x < y ? x : y;
        ca[m] = i;
        cb[m] = j;
        m++;
        int32_t nx = a->lo[i + 1], ny = b->lo[j + 1];
        int32_t end = nx < ny ? nx : ny;
        if (nx == end)
            i++;
        if (ny == end)
            j++;
        if (end == FL_CP_END)
            break;
    }
    lo[m] = FL_CP_END;
    /* a class's start is the later of the two classes' starts */
    for (int32_t k = 0; k < m; k++)
        lo[k] = a->lo[ca[k]] > b->lo[cb[k]] ? a->lo[ca[k]] : b->lo[cb[k]];
    tab = malloc(sizeof(int64_t) * tabn);
    if (!tab)
        goto fail;
    memset(tab, 0xff, sizeof(int64_t) * tabn);
#define KEY(x, y) (((int64_t)(x) + 1) << 32 | (int64_t)((y) + 1))
    int64_t work = 0;
    for (int32_t q = -1; q < np || q == -1; q++) {
        int64_t key = q < 0 ? KEY(0, 0) : pairs[q];
        int32_t sa = (int32_t)(key >> 32) - 1, sb = (int32_t)(key & 0xffffffff) - 1;
        if (q >= 0) {
            if ((rc = table_rows(&next, &next_cap, q + 1, m, e)))
                goto fail;
            rc = FL_ENOMEM;
        }
        for (int32_t k = q < 0 ? m - 1 : 0; k < m; k++) {
            int32_t ta, tb;
            if (q < 0) { /* the start pair first */
                ta = 0;
                tb = 0;
            } else {
                ta = sa >= 0 ? a->next[(size_t)sa * (size_t)a->ncls + (size_t)ca[k]] : -1;
                tb = sb >= 0 ? b->next[(size_t)sb * (size_t)b->ncls + (size_t)cb[k]] : -1;
            }
            int32_t t = -1;
            if (or ? (ta >= 0 || tb >= 0) : (ta >= 0 && tb >= 0)) {
                int64_t kk = KEY(ta, tb);
                uint64_t h = (uint64_t)kk * 0x9e3779b97f4a7c15ull;
                size_t at = (size_t)(h >> 20) & (tabn - 1);
                while (tab[at] >= 0 && pairs[tab[at]] != kk)
                    at = (at + 1) & (tabn - 1);
                if (tab[at] >= 0) {
                    t = (int32_t)tab[at];
                } else {
                    if (np >= FL_CPA_MAX_STATES) {
                        rc = fl_err_set(e, FL_ERANGE, "too large: its automaton passed %d states",
                                        FL_CPA_MAX_STATES);
                        goto fail;
                    }
                    if (np == pcap) {
                        pcap = pcap ? pcap * 2 : 64;
                        int64_t *t2 = realloc(pairs, sizeof(int64_t) * (size_t)pcap);
                        if (!t2)
                            goto fail;
                        pairs = t2;
                    }
                    pairs[np] = kk;
                    tab[at] = np;
                    t = np++;
                    if ((size_t)np * 2 >= tabn) { /* grow and rehash */
                        size_t tn = tabn * 2;
                        int64_t *t2 = malloc(sizeof(int64_t) * tn);
                        if (!t2)
                            goto fail;
                        memset(t2, 0xff, sizeof(int64_t) * tn);
                        for (int32_t p = 0; p < np; p++) {
                            size_t z = (size_t)(((uint64_t)pairs[p] * 0x9e3779b97f4a7c15ull) >> 20) &
                                       (tn - 1);
                            while (t2[z] >= 0)
                                z = (z + 1) & (tn - 1);
                            t2[z] = p;
                        }
                        free(tab);
                        tab = t2;
                        tabn = tn;
                    }
                }
            }
            if (q >= 0)
                next[(size_t)q * (size_t)m + (size_t)k] = t;
        }
        work += m;
        if (work > FL_CPA_MAX_WORK) {
            rc = fl_err_set(e, FL_ERANGE, "too large to compile (over %lld steps)",
                            (long long)FL_CPA_MAX_WORK);
            goto fail;
        }
    }
    r = cpa_new(np, m);
    if (!r)
        goto fail;
    memcpy(r->lo, lo, sizeof(int32_t) * (size_t)(m + 1));
    if (np)
        memcpy(r->next, next, sizeof(int32_t) * (size_t)np * (size_t)m);
    for (int32_t p = 0; p < np; p++) {
        int32_t sa = (int32_t)(pairs[p] >> 32) - 1, sb = (int32_t)(pairs[p] & 0xffffffff) - 1;
        bool xa = sa >= 0 && a->accept[sa], xb = sb >= 0 && b->accept[sb];
        r->accept[p] = or ? (xa || xb) : (xa && xb);
    }
    /* a product with a counter counts: the other automaton's state beside the count */
    const fl_cpa *ctr = or ? NULL : b->counter ? b : a->counter ? a : NULL;
    if (ctr && np) {
        r->grp = malloc(sizeof(int32_t) * (size_t)np);
        r->cnt = malloc(sizeof(int32_t) * (size_t)np);
        if (!r->grp || !r->cnt)
            goto fail;
        for (int32_t p = 0; p < np; p++) {
            int32_t sa = (int32_t)(pairs[p] >> 32) - 1, sb = (int32_t)(pairs[p] & 0xffffffff) - 1;
            int32_t other = ctr == b ? sa : sb, c = ctr == b ? sb : sa;
            r->grp[p] = other;
            r->cnt[p] = c >= 0 ? ctr->cnt[c] : -1;
        }
    }
#undef KEY
    if (cpa_prune(r))
        goto fail;
    *out = r;
    r = NULL;
    rc = 0;
fail:
    if (rc == FL_ENOMEM)
        fl_err_set(e, FL_ENOMEM, "out of memory");
    fl_cpa_free(r);
    free(lo);
    free(ca);
    free(cb);
    free(pairs);
    free(tab);
    free(next);
    return rc ? -1 : 0;
}

int fl_cpa_and(const fl_cpa *a, const fl_cpa *b, fl_cpa **out, fl_err *e)
{
    return cpa_product(a, b, false, out, e);
}

int fl_cpa_and_into(fl_cpa **acc, fl_cpa *b, fl_err *e)
{
    if (!*acc) {
        *acc = b;
        return 0;
    }
    fl_cpa *r;
    int rc = fl_cpa_and(*acc, b, &r, e);
    fl_cpa_free(b);
    if (rc)
        return -1;
    fl_cpa_free(*acc);
    *acc = r;
    return 0;
}

/* ---- formats ---- */

/* Each as a pattern matched whole. Dates are real calendar days (February 29th in leap years
   only: a year divisible by 4 and not by 100, or by 400). */
#define DD_31 "(?:0[1-9]|[12][0-9]|3[01])"
#define DD_30 "(?:0[1-9]|[12][0-9]|30)"
#define DD_28 "(?:0[1-9]|1[0-9]|2[0-8])"
#define LEAP "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)"
#define DATE                                                                                       \
    "(?:[0-9]{4}-(?:(?:0[13578]|1[02])-" DD_31 "|(?:0[469]|11)-" DD_30 "|02-" DD_28 ")|" LEAP    \
    "-02-29)"
/* (fractions of a second to nanoseconds, and a duration's numbers to 9 digits: a model that
   would write digits forever stops there, as FL_CONSTRAIN_DECODE_DIGITS bounds numbers) */
#define TIME "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,9})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
#define N9 "[0-9]{1,9}"
#define LABEL "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
#define LABEL24 "[A-Za-z0-9](?:[A-Za-z0-9-]{0,22}[A-Za-z0-9])?"
#define OCTET "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
#define IPV4 OCTET "(?:\\." OCTET "){3}"
#define H16 "[0-9A-Fa-f]{1,4}"
#define LS32 "(?:" H16 ":" H16 "|" IPV4 ")"

/* RFC 3986's pchar (unreserved, percent-encoded, sub-delims, ':' and '@') */
#define PCHAR "(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})"

static const struct {
    const char *name, *pattern;
    int32_t max_len; /* 0: none */
} formats[] = {
    {"date-time", DATE "T" TIME, 0},
    {"date", DATE, 0},
    {"time", TIME, 0},
    {"duration", "P(?:(?:" N9 "Y(?:" N9 "M)?(?:" N9 "D)?|" N9 "M(?:" N9 "D)?|" N9 "D)"
                 "(?:T(?:" N9 "H(?:" N9 "M)?(?:" N9 "S)?|" N9 "M(?:" N9 "S)?|" N9 "S))?"
                 "|T(?:" N9 "H(?:" N9 "M)?(?:" N9 "S)?|" N9 "M(?:" N9 "S)?|" N9 "S)|" N9 "W)", 0},
    {"email", "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@"
              "(?:" LABEL "\\.)+" LABEL, 0},
    /* at most 253 characters in all (RFC 1123), kept so by the shape instead of a count of
       them (a count times the labels' states is tens of thousands of states): a first label of
       up to 63 characters and up to 7 more of up to 24 (at most 238 in all) */
    {"hostname", LABEL "(?:\\." LABEL24 "){0,7}", 0},
    {"ipv4", IPV4, 0},
    {"ipv6", "(?:(?:" H16 ":){6}" LS32 "|::(?:" H16 ":){5}" LS32 "|(?:" H16 ")?::(?:" H16 ":){4}" LS32
             "|(?:(?:" H16 ":){0,1}" H16 ")?::(?:" H16 ":){3}" LS32
             "|(?:(?:" H16 ":){0,2}" H16 ")?::(?:" H16 ":){2}" LS32
             "|(?:(?:" H16 ":){0,3}" H16 ")?::" H16 ":" LS32 "|(?:(?:" H16 ":){0,4}" H16 ")?::" LS32
             "|(?:(?:" H16 ":){0,5}" H16 ")?::" H16 "|(?:(?:" H16 ":){0,6}" H16 ")?::)", 0},
    {"uuid", "[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}", 0},
    /* RFC 3986's absolute URI with a fragment allowed (what validators check as "uri"): a
       scheme, then an authority of a registered name and a port (no user information, no
       IP literal in brackets) with an absolute path, or a path alone; query and fragment */
    {"uri", "[A-Za-z][A-Za-z0-9+.-]*:"
            "(?://(?:[A-Za-z0-9._~!$&'()*+,;=-]|%[0-9A-Fa-f]{2})*(?::[0-9]*)?(?:/" PCHAR "*)*"
            "|/(?:" PCHAR "+(?:/" PCHAR "*)*)?|" PCHAR "+(?:/" PCHAR "*)*)"
            "(?:\\?(?:" PCHAR "|[/?])*)?(?:#(?:" PCHAR "|[/?])*)?", 0},
};

int fl_cpa_format(const char *name, fl_cpa **out, fl_err *e)
{
    *out = NULL;
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++) {
        if (strcmp(name, formats[i].name))
            continue;
        fl_cpa *a;
        if (fl_cpa_regex(formats[i].pattern, true, &a, e))
            return -1;
        if (!formats[i].max_len) {
            *out = a;
            return 0;
        }
        fl_cpa *l;
        int rc = fl_cpa_length(1, formats[i].max_len, &l, e);
        if (!rc)
            rc = fl_cpa_and(a, l, out, e);
        fl_cpa_free(a);
        fl_cpa_free(l);
        return rc;
    }
    return fl_err_set(e, FL_EINVAL, "unsupported format (date-time, date, time, duration, email, "
                                    "hostname, ipv4, ipv6, uuid, uri)"), -1;
}

/* ---- numbers ---- */

int fl_dec_from_double(double v, fl_dec_bound *b)
{
    char buf[64];
    if (!isfinite(v))
        return -1;
    memset(b, 0, sizeof *b);
    b->neg = v < 0;
    if (v == 0) {
        b->neg = false;
        strcpy(b->digits, "0");
        return 0;
    }
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, fabs(v));
        if (strtod(buf, NULL) == fabs(v))
            break;
    }
    /* d.ddde[+-]X: the digits, then where the point goes */
    char dig[24];
    int nd = 0;
    const char *p = buf;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9')
            dig[nd++] = *p;
    int ex = atoi(p + 1);
    if (ex > 40 || ex < -25) /* (the digits' and the fraction's buffers) */
        return -1;
    int ip = ex + 1; /* digits before the point */
    char all[128];
    int n = 0;
    if (ip <= 0) {
        all[n++] = '0';
        all[n++] = '.';
        for (int k = 0; k < -ip; k++)
            all[n++] = '0';
        for (int k = 0; k < nd; k++)
            all[n++] = dig[k];
    } else {
        for (int k = 0; k < ip; k++)
            all[n++] = k < nd ? dig[k] : '0';
        if (nd > ip) {
            all[n++] = '.';
            for (int k = ip; k < nd; k++)
                all[n++] = dig[k];
        }
    }
    all[n] = 0;
    char *dot = strchr(all, '.');
    if (dot) {
        *dot = 0;
        size_t fl = strlen(dot + 1);
        if (fl >= sizeof b->frac)
            return -1; /* (not with the exponents above: 24 zeros and 17 digits) */
        memcpy(b->frac, dot + 1, fl + 1);
        while (fl && b->frac[fl - 1] == '0')
            b->frac[--fl] = 0;
    }
    size_t il = strlen(all);
    if (il >= sizeof b->digits)
        return -1;
    memcpy(b->digits, all, il + 1);
    return 0;
}

static bool dec_zero(const fl_dec_bound *b)
{
    return !strcmp(b->digits, "0") && !b->frac[0];
}

/* Appends to s (capacity cap) a pattern of the non-negative decimals (no exponent, canonical
   integer part) at least (strict: above) b, or at most (strict: below) it: digit by digit,
   the first place that differs decides. */
static int dec_cmp_re(char *s, size_t cap, const fl_dec_bound *b, bool ge, bool strict)
{
    const char *I = b->digits, *F = b->frac;
    size_t p = strlen(I), k = p + strlen(F);
    char D[100];
    snprintf(D, sizeof D, "%s%s", I, F);
    size_t n = strlen(s);
#define PUT(...)                                                                                   \
    do {                                                                                           \
        int w_ = snprintf(s + n, cap - n, __VA_ARGS__);                                            \
        if (w_ < 0 || (size_t)w_ >= cap - n)                                                       \
            return -1;                                                                             \
        n += (size_t)w_;                                                                           \
    } while (0)
    const char *FR = "(?:\\.[0-9]+)?";
    bool first = true;
    PUT("(?:");
    /* a longer (ge) or shorter (le) integer part */
    if (ge) {
        PUT("[1-9][0-9]{%zu,}%s", p, FR);
        first = false;
    } else if (p >= 2) {
        PUT("(?:0|[1-9][0-9]{0,%zu})%s", p - 2, FR);
        first = false;
    }
    /* the same up to place j, then a greater (ge) or smaller (le) digit */
    for (size_t j = 0; j < k; j++) {
        int d = D[j] - '0';
        int a = ge ? d + 1 : (j == 0 && p >= 2 ? 1 : 0);
        int z = ge ? 9 : d - 1;
        if (a > z)
            continue;
        PUT("%s", first ? "" : "|");
        first = false;
        for (size_t i = 0; i < j; i++)
            PUT("%s%c", i == p ? "\\." : "", D[i]);
        PUT("%s[%d-%d]", j == p ? "\\." : "", a, z);
        if (j < p)
            PUT("[0-9]{%zu}%s", p - 1 - j, FR);
        else
            PUT("[0-9]*");
    }
    /* (le) the same up to a place in b's fraction, and no more digits: smaller, since b's
       fraction ends in a digit other than 0 */
    for (size_t j = p; !ge && j < k; j++) {
        PUT("%s", first ? "" : "|");
        first = false;
        for (size_t i = 0; i < j; i++)
            PUT("%s%c", i == p ? "\\." : "", D[i]);
    }
    /* equal through b's digits */
    if (ge || !strict) {
        const char *rest = ge ? (strict ? (F[0] ? "[0-9]*[1-9][0-9]*" : "\\.[0-9]*[1-9][0-9]*")
                                        : (F[0] ? "[0-9]*" : FR))
                              : (F[0] ? "0*" : "(?:\\.0+)?");
        PUT("%s", first ? "" : "|");
        first = false;
        for (size_t i = 0; i < k; i++)
            PUT("%s%c", i == p ? "\\." : "", D[i]);
        PUT("%s", rest);
    }
    if (first) /* nothing at all: a class that matches nothing */
        PUT("[]");
    PUT(")");
#undef PUT
    return 0;
}

static int and_in(fl_cpa **acc, const char *re, fl_err *e)
{
    fl_cpa *b;
    if (fl_cpa_regex(re, true, &b, e))
        return -1;
    return fl_cpa_and_into(acc, b, e);
}


/* an automaton over ASCII: one class per character below 128, one for the rest */
static fl_cpa *cpa_ascii(int32_t n)
{
    fl_cpa *a = cpa_new(n, 129);
    if (!a)
        return NULL;
    for (int32_t k = 0; k <= 128; k++)
        a->lo[k] = k;
    a->lo[129] = FL_CP_END;
    return a;
}

int fl_cpa_number(const fl_dec_bound *lo, const fl_dec_bound *hi, bool integer, int32_t max_digits,
                  int64_t mult_p, int32_t mult_q, fl_cpa **out, fl_err *e)
{
    *out = NULL;
    char re[16384];
    fl_cpa *pos = NULL, *neg = NULL, *all = NULL;
    int rc = -1;
    /* x >= 0 */
    bool has_pos = !hi->set || !hi->neg || (dec_zero(hi) && !hi->strict);
    if (hi->set && dec_zero(hi) && hi->strict)
        has_pos = false;
    if (has_pos) {
        if (and_in(&pos, "(?:0|[1-9][0-9]*)(?:\\.[0-9]+)?", e))
            goto out;
        if (lo->set && !lo->neg) {
            re[0] = 0;
            if (dec_cmp_re(re, sizeof re, lo, true, lo->strict) || and_in(&pos, re, e))
                goto out;
        }
        if (hi->set && !hi->neg) {
            re[0] = 0;
            if (dec_cmp_re(re, sizeof re, hi, false, hi->strict) || and_in(&pos, re, e))
                goto out;
        }
    }
    /* x < 0: "-" and a magnitude above 0, at most |lo|, at least |hi| */
    if (!lo->set || (lo->neg && !dec_zero(lo))) {
        fl_dec_bound zero = {.set = true, .strict = true, .digits = "0"};
        strcpy(re, "-");
        if (dec_cmp_re(re, sizeof re, &zero, true, true) || and_in(&neg, re, e))
            goto out;
        if (lo->set) {
            strcpy(re, "-");
            if (dec_cmp_re(re, sizeof re, lo, false, lo->strict) || and_in(&neg, re, e))
                goto out;
        }
        if (hi->set && hi->neg && !dec_zero(hi)) {
            strcpy(re, "-");
            if (dec_cmp_re(re, sizeof re, hi, true, hi->strict) || and_in(&neg, re, e))
                goto out;
        }
    }
    if (pos && neg) {
        if (cpa_product(pos, neg, true, &all, e))
            goto out;
    } else if (pos || neg) {
        all = pos ? pos : neg;
        if (pos)
            pos = NULL;
        else
            neg = NULL;
    } else {
        if (and_in(&all, "[]", e)) /* nothing */
            goto out;
    }
    if (integer && and_in(&all, "-?(?:0|[1-9][0-9]*)", e))
        goto out;
    if (max_digits > 0) { /* state: digits so far */
        fl_cpa *c = cpa_ascii(max_digits + 1);
        if (!c)
            goto oom;
        for (int32_t s = 0; s <= max_digits; s++) {
            c->accept[s] = 1;
            c->next[s * 129 + '-'] = s;
            c->next[s * 129 + '.'] = s;
            for (int d = '0'; d <= '9'; d++)
                c->next[s * 129 + d] = s < max_digits ? s + 1 : -1;
        }
        if (fl_cpa_and_into(&all, c, e))
            goto out;
    }
    if (mult_p > 0) {
        /* state (phase, r): phase 0 the integer part, f + 1 after the point with f fraction
           digits; r the digits so far as a number, mod p. Accepts when r * 10^(q - f) is 0
           mod p: the value * 10^q / p is whole. */
        int64_t states = (int64_t)(mult_q + 2) * mult_p;
        if (states >= FL_CPA_MAX_STATES) {
            fl_err_set(e, FL_ERANGE, "too large: %lld states for 'multipleOf'", (long long)states);
            goto out;
        }
        int32_t P = (int32_t)mult_p;
        fl_cpa *c = cpa_ascii((int32_t)states);
        if (!c)
            goto oom;
        for (int32_t ph = 0; ph < mult_q + 2; ph++)
            for (int32_t r = 0; r < P; r++) {
                int32_t s = ph * P + r, f = ph ? ph - 1 : 0;
                int64_t v = r;
                for (int32_t k = f; k < mult_q; k++)
                    v = v * 10 % P;
                c->accept[s] = v % P == 0;
                if (ph == 0) {
                    c->next[s * 129 + '-'] = s;
                    c->next[s * 129 + '.'] = 1 * P + r;
                }
                if (ph == 0 || f < mult_q)
                    for (int d = 0; d <= 9; d++)
                        c->next[s * 129 + '0' + d] = (ph ? ph + 1 : 0) * P + (int32_t)((r * 10LL + d) % P);
            }
        if (fl_cpa_and_into(&all, c, e))
            goto out;
    }
    *out = all;
    all = NULL;
    rc = 0;
    goto out;
oom:
    fl_err_set(e, FL_ENOMEM, "out of memory");
out:
    fl_cpa_free(pos);
    fl_cpa_free(neg);
    fl_cpa_free(all);
    return rc;
}
