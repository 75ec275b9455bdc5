/* decode.h: the unmasking policies and decoding options of block-diffusion generation.
 * A policy looks at the model's per-position predictions for the masked positions of one
 * block and picks which of them to commit in this step. */
#ifndef FL_DECODE_H
#define FL_DECODE_H

#include "backend.h"

typedef enum fl_policy {
    FL_POLICY_SEQUENTIAL = 0, /* one token per step, the most confident */
    FL_POLICY_STATIC,         /* k per step, the most confident */
    FL_POLICY_THRESHOLD,      /* all with p > threshold, at least the most confident */
    FL_POLICY_DYNAMIC,        /* SDAR low_confidence_dynamic: p > threshold if that meets the
                                 per-step quota k, else the top k */
    FL_POLICY_ENTROPY,        /* SDAR entropy_bounded: lowest-entropy prefix whose summed
                                 entropy stays within entropy_bound, at least one */
    FL_POLICY_COUNT
} fl_policy;

typedef struct fl_decode_opts {
    fl_policy policy;
    float threshold;     /* threshold, dynamic (0.9) */
    int k;               /* static: tokens per step; dynamic: quota per step */
    float entropy_bound; /* entropy (0.35 nats) */
    bool store_overlap;  /* store a finished block in the next block's first forward */
    bool pipeline;       /* multi-block (D2F / MBD-LMs) */
    float tau_add;       /* add the next block when the last one is this unmasked */
    float tau_act;       /* a block is fully active once its predecessor is this unmasked */
    float tau_conf;      /* a semi-active block commits only tokens above this */
    int max_blocks;      /* running blocks per sequence when pipelining */
    float temperature;   /* 0: greedy */
    int top_k;           /* 0: off */
    float top_p;         /* 1: off */
    uint64_t seed;
} fl_decode_opts;

/* The defaults: threshold 0.9 with decode-store overlap and pipelining on. */
void fl_decode_opts_default(fl_decode_opts *o);
/* Checks ranges; the message names the option. */
int fl_decode_opts_check(const fl_decode_opts *o, fl_err *e);
const char *fl_policy_name(fl_policy p);
int fl_policy_parse(const char *s, fl_policy *out); /* 0 or FL_EINVAL */

/* Picks positions of one block to unmask. pred: (n) predictions; eligible: (n) 1 for masked
 * positions the policy may take; semi: the block is semi-active (only p > tau_conf, possibly
 * none). sel: (n) out, 1 = commit. Returns the number selected. */
int fl_policy_select(const fl_decode_opts *o, const fl_tok_out *pred, const uint8_t *eligible,
                     int n, bool semi, uint8_t *sel);

/* Sampling from full logits (temperature > 0): tempered softmax restricted by top_k/top_p,
 * drawn with *rng (xorshift state, advanced). out gets the drawn token, its probability
 * under the restricted distribution (the confidence the policies use) and the tempered
 * distribution's entropy. tmp: (vocab) scratch. */
void fl_sample(const fl_decode_opts *o, const float *logits, int vocab, uint64_t *rng, float *tmp,
               fl_tok_out *out);

#endif
