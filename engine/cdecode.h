/* cdecode.h: constrained denoising (docs/structured.md). A byte automaton (constrain.h) is
 * mapped onto a model's tokens, and each step the block's most probable token assignment
 * that the automaton accepts is found by dynamic programming over (position, state), with the
 * block's decided tokens fixed and its masked positions free (DINGO's construction), over
 * all of a sequence's running blocks at once (pipelining stays on). The policy then commits
 * a subset of that assignment's positions, so every committed token keeps a whole valid reply
 * possible within max_tokens, and many tokens still commit per step. */
#ifndef FL_CDECODE_H
#define FL_CDECODE_H

#include <stdatomic.h>
#include <stdint.h>

#include "constrain.h"
#include "decode_opts.h"
#include "fl.h"

struct fl_tokenizer;

/* A model's tokens as bytes, built once per model: which ids may appear inside constrained
 * text (a token of the tokenizer that is not special and writes at least one byte; not the
 * mask; not an id past the tokenizer's vocabulary) and the bytes each writes. */
typedef struct fl_tvocab {
    int32_t n;           /* the model's vocabulary (ids 0 .. n-1) */
    uint32_t *off;       /* (n + 1) id i writes blob[off[i] .. off[i + 1]) */
    unsigned char *blob;
    uint8_t *ok;         /* (n) 1 where the id may appear inside constrained text */
    int32_t single[256]; /* an id that writes exactly this one byte, -1 when none */
    int32_t max_len;     /* the most bytes an allowed id writes */
} fl_tvocab;

int fl_tvocab_build(const struct fl_tokenizer *t, int32_t n_vocab, int32_t mask_id,
                    fl_tvocab **out, fl_err *e);
void fl_tvocab_free(fl_tvocab *v);

/* A compiled constraint for one model: the automaton, the model's tokens, and for each state
 * the fewest tokens to a whole value (exact for small enough automata and vocabularies, else
 * with single-byte tokens: an upper bound), so that a state within budget can always be
 * finished: the decoder's feasibility test.
 * Shared by the requests that use it (reference counted: the server's cache holds one, each
 * request one). */
typedef struct fl_cons {
    atomic_int refs;
    fl_dfa *dfa;
    const fl_tvocab *tv; /* not owned: the model's */
    int32_t *tdist;      /* (dfa->n) INT32_MAX where no whole value can follow */
    int32_t *tnext;      /* (dfa->n) the first token of such a shortest way, -1 at a whole
                            value (the decoder always weighs it: the budget test's promise) */
    bool exact;          /* tdist is the true fewest tokens (every token walked from every
                            state), not the single-byte bound */
    bool uncut;          /* benchmarks only (`fogline bench decode --cuts`): fl_cons_best
                            without its cuts (chains, the floor, repeated states skipped) */
} fl_cons;

/* States x vocabulary up to which tdist is computed exactly (walking every token from every
 * state, a fraction of a second); beyond it, with single-byte tokens only. */
#define FL_CONS_EXACT_WORK 60000000LL

/* Takes ownership of dfa (also on an error). exact_work: states x vocabulary up to which
 * tdist is exact (0: FL_CONS_EXACT_WORK). FL_EUNSUPPORTED when no whole value can be written
 * with the model's tokens. refs starts at 1. */
int fl_cons_create(fl_dfa *dfa, const fl_tvocab *tv, int64_t exact_work, fl_cons **out,
                   fl_err *e);
fl_cons *fl_cons_ref(fl_cons *c);
void fl_cons_unref(fl_cons *c);
/* The fewest tokens of a whole value (what max_tokens must allow). */
static inline int32_t fl_cons_min_tokens(const fl_cons *c) { return c->tdist[0]; }

/* The state after the end of the reply (an end token in an accepting state): anything may
 * follow, it is never read. */
#define FL_CONS_END (-2)
/* The state after id from state s (FL_CONS_END after an end token in an accepting state), or
 * -1 when the id leaves the language. */
int32_t fl_cons_step(const fl_cons *c, int32_t s, int32_t id, const int32_t *eos, int n_eos);

/* Candidate tokens per free position: the K best by score, plus every single-byte token and
 * the end tokens (which keep a valid completion always reachable). */
#define FL_CONS_TOPK 64
/* Positions one call weighs at most: every running block of a sequence (the pipeline's). */
#define FL_CONS_MAX_POS (FL_MAX_BLOCK * FL_MAX_RUN_BLOCKS)
/* Automaton states kept per position (the best ones, should more be reachable). */
#define FL_CONS_MAX_STATES 1024

typedef struct fl_cdp fl_cdp; /* scratch, reused across calls (one per scheduler) */
fl_cdp *fl_cdp_new(void);
void fl_cdp_free(fl_cdp *w);

/* One block position's input to fl_cons_best. */
typedef struct fl_cpos {
    int32_t fixed;         /* a decided token, or -1 for a masked position */
    const float *logits;   /* masked: (vocab) the model's logits for it, or NULL (no prediction
                              this step: any token, scored 0) */
    float lse;             /* masked with logits: their log-sum-exp when known (the backend's
                              prediction gives it), else NAN */
    int32_t prev;          /* masked: the token the previous step's assignment gave it, or -1.
                              Always a candidate, so that the previous assignment, which the
                              decided positions were taken from, stays reachable */
} fl_cpos;

/* The most probable assignment of n consecutive positions that the automaton accepts from
 * state s0 (or FL_CONS_END), where `left` positions remain before max_tokens from the first
 * of them (the reply must be a whole value by then). Inside the n positions every token
 * sequence is weighed, short of three cuts that never lose the best: a state is dropped when
 * even the longest tokens could not finish it in time, or when a state before it in its chain
 * (fl_dfa.cls: fewer characters of a counted string written) scores as well, and a path is
 * not extended when even each later position's best token could not bring it up to the
 * score of the protected path (the decided tokens, else the previous assignment). After
 * them, the state reached must be finishable in the positions left with single-byte tokens
 * (tdist), so that the next block can always go on. Decided positions keep their tokens,
 * masked ones with logits are scored by log-softmax (greedy), or with o->temperature > 0 by
 * tempered log-softmax plus Gumbel noise (a sample of the constrained distribution's
 * perturb-and-MAP; one draw from *rng per position, each token's noise a function of it and
 * the token; top_k/top_p narrow the candidates, though the single-byte and end tokens stay
 * as a last resort). Writes tok[j] and prob[j] (the token's probability under the position's
 * distribution: softmax, or the tempered one) for every position. Returns 0, or -1 when no
 * assignment exists (the fixed tokens leave the language: a bug upstream, or a budget too
 * small). */
int fl_cons_best(const fl_cons *c, fl_cdp *w, int32_t s0, const fl_cpos *pos, int n, int32_t left,
                 int vocab, const int32_t *eos, int n_eos, const fl_decode_opts *o, uint64_t *rng,
                 int32_t *tok, float *prob);

#endif
