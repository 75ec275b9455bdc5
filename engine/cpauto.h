/* cpauto.h: deterministic automata over Unicode code points (docs/structured.md, "Strings and
 * numbers").
 *
 * What a JSON schema says about a string's characters (`pattern`, `format`, `minLength`,
 * `maxLength`) or a number's digits (`minimum`, `maximum`, `multipleOf`) is a regular language
 * over characters. Each is built here as its own automaton over code points and they are
 * intersected at that level (a length and a pattern together), where a character is one symbol;
 * constrain.c then spells every character in bytes (UTF-8, and JSON's escapes inside a string)
 * and splices the result into the schema's byte automaton. */
#ifndef FL_CPAUTO_H
#define FL_CPAUTO_H

#include <stdbool.h>
#include <stdint.h>

#include "fl.h"

#define FL_CP_END 0x110000 /* one past the last code point */

typedef struct fl_cpa {
    int32_t n;       /* states; 0 is the start */
    int32_t ncls;    /* character classes: intervals of code points */
    int32_t *lo;     /* (ncls + 1) class k is lo[k] .. lo[k + 1] - 1; lo[0] = 0, lo[ncls] = FL_CP_END */
    int32_t *next;   /* (n * ncls) the state after a character of the class, -1: none */
    uint8_t *accept; /* (n) */
    /* Where a length was counted (fl_cpa_length, or a product with one): state s is the
     * counter at cnt[s] beside the other automaton's state grp[s]; NULL elsewhere. A hint
     * for the decoder (docs/structured.md, "Lengths in the decoder"): constrain.c proves
     * what it derives from them before it uses it. */
    int32_t *grp, *cnt;
    bool counter; /* fl_cpa_length's own: grp all 0, cnt the state */
} fl_cpa;

/* Every state of a built automaton can still reach an accepting one (dead states are pruned),
 * so a language without strings is a start state that accepts nothing and goes nowhere. */
static inline bool fl_cpa_empty(const fl_cpa *a)
{
    if (a->accept[0])
        return false;
    for (int32_t k = 0; k < a->ncls; k++)
        if (a->next[k] >= 0)
            return false;
    return true;
}

/* The limits every construction here keeps to: states of an automaton, its table, the sets of
 * a subset construction, and work (set-element visits) of one construction, so that a hostile
 * pattern costs a bounded time and memory and fails with "too large" instead. */
#define FL_CPA_MAX_STATES 50000
#define FL_CPA_MAX_WORK 200000000LL
#define FL_CPA_MAX_CELLS 16000000LL /* states x classes of one automaton (64 MB of table) */
#define FL_CPA_MAX_SET_INTS 20000000LL /* NFA states kept by a subset construction's sets */
#define FL_CPA_MAX_REPEAT 1000 /* {n,m} counts at most */

/* A JSON Schema `pattern`: an ECMA-262 regular expression (with the u flag, as JSON Schema
 * validators compile them), found anywhere in the string unless `^` starts or `$` ends it (or a
 * top-level alternative). The subset: literals, escapes, `.`, classes, groups (also
 * non-capturing and named), alternation, greedy and lazy quantifiers; no backreferences,
 * lookaround, word boundaries or Unicode property escapes, and `^`/`$` only at the ends.
 * anchored: match the whole string regardless (a format's own patterns). -1 with a message
 * ("... at offset N") for anything else. */
int fl_cpa_regex(const char *pattern, bool anchored, fl_cpa **out, fl_err *e);
/* Strings of min .. max characters (max -1: no upper bound). */
int fl_cpa_length(int64_t min, int64_t max, fl_cpa **out, fl_err *e);
/* A JSON Schema string `format`: date-time, date, time, duration, email, hostname, ipv4, ipv6,
 * uuid (the texts written are a subset of what RFC 3339/5321/1123/4291/4122 allow: the
 * canonical forms, docs/structured.md). -1 with the list for any other name. */
int fl_cpa_format(const char *name, fl_cpa **out, fl_err *e);
/* Every string but the given ones (UTF-8; an object's property names, so that others may be
 * written beside them). */
int fl_cpa_except(const char *const *words, int32_t n, fl_cpa **out, fl_err *e);
/* Strings both accept. */
int fl_cpa_and(const fl_cpa *a, const fl_cpa *b, fl_cpa **out, fl_err *e);
/* *acc becomes *acc and b (b when *acc is NULL); takes b, also on an error. */
int fl_cpa_and_into(fl_cpa **acc, fl_cpa *b, fl_err *e);
void fl_cpa_free(fl_cpa *a);

/* A bound of a number range: a decimal without exponent, as digits. */
typedef struct fl_dec_bound {
    bool set;
    bool strict;    /* exclusive */
    bool neg;
    char digits[48]; /* the integer part, "0" when it is zero, without leading zeros */
    char frac[48];   /* the fraction's digits, without trailing zeros ("" none) */
} fl_dec_bound;

/* The shortest decimal that reads back as the double v (what a JSON parser made of the
 * schema's number), as an fl_dec_bound; -1 when it needs an exponent beyond 40 digits. */
int fl_dec_from_double(double v, fl_dec_bound *b);

/* A number's texts without exponent: `-`? (0 | [1-9][0-9]*) (. [0-9]+)?, never a negative
 * zero, at most max_digits digits in all (integer part and fraction) when max_digits > 0, with
 * a value within lo .. hi (either unset: unbounded) and, when mult_p > 0, a multiple of
 * mult_p / 10^mult_q written with at most mult_q fraction digits. integer: no fraction. */
int fl_cpa_number(const fl_dec_bound *lo, const fl_dec_bound *hi, bool integer, int32_t max_digits,
                  int64_t mult_p, int32_t mult_q, fl_cpa **out, fl_err *e);

#endif
