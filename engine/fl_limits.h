/* fl_limits.h: the engine's fixed limits, each stated once. Every check, buffer and flag
 * range that depends on one uses its name here. */
#ifndef FL_LIMITS_H
#define FL_LIMITS_H

/* The largest block_size a model may have (config.json), and so the most tokens one step may
 * unmask in a block (decoding option k). */
#define FL_MAX_BLOCK 256

/* Running blocks per sequence at most (decoding option max_blocks): the pipeline's depth. */
#define FL_MAX_RUN_BLOCKS 16

/* Experts one token is routed to at most (config.json num_experts_per_tok): the per-token
 * routing state is fixed-size. Real models use 8. */
#define FL_MOE_MAX_TOPK 32

/* Output constraints (constrain.h): automaton states at most (NFA and DFA each), the nesting
 * of objects and arrays, $refs expanded inside each other, an array's minItems/maxItems, and
 * the length of a JSON pointer in an error message. */
#define FL_CONSTRAIN_MAX_STATES 200000
#define FL_CONSTRAIN_MAX_DEPTH 8
#define FL_CONSTRAIN_ANY_DEPTH 4 /* "any JSON" (json_object, a schema without a type) nests less */
#define FL_CONSTRAIN_MAX_REFS 32
/* A recursive schema (a $ref inside itself: a tree, a thread of replies) is unrolled: each
 * $ref is expanded inside itself at most this many times (the value nests that many levels
 * below its first), and the recursion's way out is taken there; a schema too large so is
 * compiled again one level shallower, down to one. */
#define FL_CONSTRAIN_RECURSION 3
#define FL_CONSTRAIN_MAX_ITEMS 64
/* uniqueItems of items with at most this many values (an enum's, a const's, booleans): the
 * automaton has a state for each set of them written. */
#define FL_CONSTRAIN_UNIQUE_VALUES 8
#define FL_CONSTRAIN_PATH 256
/* What the types of a subschema's values may be (a oneOf's, an anyOf's beside a type) is read
 * through at most this many subschemas in all, per schema (anyOfs of $refs to anyOfs ... are
 * exponential): past it, any type, which proves less. */
#define FL_CONSTRAIN_TYPE_VISITS 1000000
/* A oneOf's schemas are proved exclusive within this many comparisons (schema pairs, tag
 * values): past it the oneOf is refused as too large to prove. */
#define FL_CONSTRAIN_ONEOF_WORK 4000000
/* A string's maxLength is honoured up to this many characters: a larger one writes at most
 * this many (a subset of the valid strings; every character is a state of the automaton), and
 * a minLength above it is refused. */
#define FL_CONSTRAIN_MAX_LENGTH 1024
/* A counted string's character automaton (its pattern or format times the count) at most:
 * past it, a maxLength writes shorter strings (down to minLength), as above. A format's
 * states times the count is what the byte automaton spells (a uri of at most 159 characters
 * is about 26,000 byte states); a schema too large with it is compiled once more with half. */
#define FL_CONSTRAIN_LENGTH_STATES 8192
/* A number under minimum/maximum/multipleOf has at most this many digits in all: distinct
 * decimals of 15 significant digits are distinct doubles, so comparing the text's digits with
 * the bound's decides as a validator comparing doubles does. */
#define FL_CONSTRAIN_BOUND_DIGITS 15
/* Whitespace between two JSON tokens in a constrained reply, at most (bytes): room for a
 * newline and the indentation of pretty-printed JSON nested a few levels deep, and a bound on
 * what a model that would rather not write JSON spends on whitespace (llama.cpp's JSON
 * grammar bounds it likewise). */
#define FL_CONSTRAIN_DECODE_WS 20
/* Digits of a number's integer part and of its fraction in a constrained reply, at most (its
 * exponent: 2): every such number fits a double, every integer 64 bits (llama.cpp's JSON
 * grammar bounds them likewise). */
#define FL_CONSTRAIN_DECODE_DIGITS 15

/* Alternatives a reply token's log probabilities may list at most (OpenAI's top_logprobs). */
#define FL_MAX_TOP_LOGPROBS 20
/* Tokens a request's logit_bias may name at most, and the largest bias either way (OpenAI's
 * range: -100 bans a token in practice, 100 makes it the only choice). */
#define FL_MAX_LOGIT_BIAS 1024
#define FL_LOGIT_BIAS_MAX 100.0f
/* repetition_penalty's upper bound (its lower one is open: above 0) */
#define FL_REP_PENALTY_MAX 10.0f
/* stop_token_ids per request (vLLM's) */
#define FL_MAX_STOP_TOKEN_IDS 256

#define FL_STR_(x) #x
#define FL_STR(x) FL_STR_(x)

#endif
