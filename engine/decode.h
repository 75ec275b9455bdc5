/* decode.h: the unmasking policies and decoding options of block-diffusion generation.
 * A policy looks at the model's per-position predictions for the masked positions of one
 * block and picks which of them to commit in this step. */
#ifndef FL_DECODE_H
#define FL_DECODE_H

#include "backend.h"
#include "decode_opts.h"

/* Picks positions of one block to unmask. pred: (n) predictions; eligible: (n) 1 for masked
 * positions the policy may take; semi: the block is semi-active (only p > tau_conf, possibly
 * none). sel: (n) out, 1 = commit. Returns the number selected. */
int fl_policy_select(const fl_decode_opts *o, const fl_tok_out *pred, const uint8_t *eligible,
                     int n, bool semi, uint8_t *sel);

/* Sampling from full logits (temperature > 0): tempered softmax restricted by top_k/top_p/min_p,
 * drawn with *rng (xorshift state, advanced). out gets the drawn token, its probability
 * under the restricted distribution (the confidence the policies use) and, for the entropy
 * policy (the one reader), the tempered distribution's entropy; NaN under the others.
 * tmp: (vocab) scratch. */
void fl_sample(const fl_decode_opts *o, const float *logits, int vocab, uint64_t *rng, float *tmp,
               fl_tok_out *out);

/* The samplers' random numbers: xorshift64 (state 0 is taken as a fixed nonzero seed). */
uint64_t fl_xorshift(uint64_t *s);
/* The weight below which top_k/top_p/min_p exclude a token: w (vocab) the tempered weights
 * exp((logit - max) / T), z their sum; 0 when none is set. */
float fl_sample_cut(const fl_decode_opts *o, const float *w, double z, int vocab);

/* Log probabilities (fl_request.logprobs). The log-sum-exp of a logits row (vocab V) at
 * temperature 1: from top1, the backend's argmax of that row and its probability, when it has
 * one (its logit less the log of its probability), else summed over the row in double. */
double fl_row_lse(const float *row, int32_t V, const fl_tok_out *top1);
/* A row's prediction as the backends give it (backend.h, fl_tok_out), taken on the host: the
 * argmax (the lowest id on a tie), its probability and the entropy, at temperature 1 and
 * summed in double. For a row whose logits were changed after the forward (logit bias). */
void fl_row_top1(const float *row, int32_t V, fl_tok_out *out);
/* Logit bias: adds bias[j] (finite, or -inf: a ban) to row[ids[j]] for j < n (a repeated id
 * adds up) and makes *top1,
 * the row's prediction before them (as its backend gave it), the biased row's. From top1's own
 * sums in O(n) while that is exact (the argmax is not biased down, and the biased tokens held at
 * most half of the row's probability), else over the whole row (fl_row_top1). */
void fl_row_bias(float *row, int32_t V, const int32_t *ids, const float *bias, int32_t n,
                 fl_tok_out *top1);
/* The repetition penalty (fl_request.repetition_penalty) on row: each row[ids[j]] (j < n,
 * distinct ids) is divided by rep when positive, else multiplied by it; *top1 updated as
 * fl_row_bias updates it. */
void fl_row_rep(float *row, int32_t V, const int32_t *ids, int32_t n, float rep, fl_tok_out *top1);
/* The k largest entries of row (ids ti, values tl, k each; descending, ties keep the lower id
 * first). Returns how many were found (k unless V < k). */
int32_t fl_row_top(const float *row, int32_t V, int32_t k, int32_t *ti, float *tl);

#endif
