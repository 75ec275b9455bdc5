/* constrain.h: output constraints as automata over bytes (docs/structured.md).
 *
 * A JSON schema of OpenAI's strict subset (objects with their properties in order, strings,
 * numbers, integers, booleans, null, enum, const, arrays, anyOf, $defs/$ref without recursion;
 * bounded nesting), or any JSON object (response_format json_object), compiles to a
 * deterministic automaton over bytes that accepts exactly the JSON texts the constraint allows:
 * whitespace where JSON allows it, strings as valid UTF-8 with JSON's escapes, an object's
 * properties in the schema's order. The decoder maps it onto the model's tokens. Strings
 * and numbers may be constrained further (pattern, format, lengths, bounds, multipleOf):
 * cpauto.h builds those over characters. */
#ifndef FL_CONSTRAIN_H
#define FL_CONSTRAIN_H

#include <jansson.h>
#include <stdint.h>

#include "fl.h"

typedef struct fl_dfa {
    int32_t n;        /* states; 0 is the start */
    int32_t *next;    /* (n * 256) the state after a byte, -1 where the text cannot go on */
    uint8_t *accept;  /* (n) 1 where the text so far is a whole value */
    int32_t *dist;    /* (n) the fewest bytes from the state to an accepting one */
    /* Lengths counted (a string's maxLength): states of one chain, cls[p] == cls[q] >= 0 with
     * rank[p] < rank[q], are the same place with fewer characters written at p, and every
     * text that q takes to a whole value p takes too (proved on this table when it was
     * built). The decoder keeps q only when it scores better than p. NULL when there are
     * none; cls -1: no chain. */
    int32_t *cls, *rank;
} fl_dfa;

typedef struct fl_constrain_opts {
    int32_t max_depth;   /* nesting of objects and arrays at most (0: 8) */
    int32_t max_states;  /* automaton states at most, NFA and DFA each (0: 200000) */
    int32_t max_ws;      /* whitespace bytes between two tokens of JSON at most (0: any number,
                            as JSON allows; a decoder wants a bound, or a model that does not
                            want to write JSON spends its tokens on whitespace) */
    int32_t max_digits;  /* a number's integer part and fraction at most this many digits each,
                            its exponent at most 2 (0: any number of digits, as JSON allows):
                            values any JSON parser holds (within a double; integers within 64
                            bits), and a bound on a model that would write digits forever */
    const char *prefix;  /* literal text before the value (NULL: none), e.g. a tool call's tag */
    const char *suffix;  /* literal text after it (NULL: none) */
} fl_constrain_opts;

/* The automaton of a JSON schema. -1 with a message naming the keyword and where it is
 * (a JSON pointer into the schema) for anything outside the subset. */
int fl_dfa_from_schema(const json_t *schema, const fl_constrain_opts *o, fl_dfa **out, fl_err *e);
/* Any JSON object (OpenAI's response_format json_object), nested up to max_depth. */
int fl_dfa_json_object(const fl_constrain_opts *o, fl_dfa **out, fl_err *e);
/* Texts the whole of which match an ECMA-262 regular expression (cpauto.h's subset; `^`/`$`
 * at its ends change nothing), in UTF-8: vLLM's structured_outputs regex and choice. */
int fl_dfa_from_regex(const char *pattern, const fl_constrain_opts *o, fl_dfa **out, fl_err *e);
void fl_dfa_free(fl_dfa *d);

/* The state after bytes from state s; -1 when they leave the language. */
static inline int32_t fl_dfa_walk(const fl_dfa *d, int32_t s, const void *bytes, size_t n)
{
    const unsigned char *p = bytes;
    for (size_t i = 0; i < n && s >= 0; i++)
        s = d->next[(size_t)s * 256 + p[i]];
    return s;
}

/* A random text of the language (tests, `fogline schema --sample`): a walk from the start
 * that keeps an accepting state within max_len bytes, ending at an accepting state with
 * probability 1/4 each time it is in one. Appends to out; -1 when no text fits. */
int fl_dfa_sample(const fl_dfa *d, uint64_t *rng, int32_t max_len, fl_buf *out);

#endif
