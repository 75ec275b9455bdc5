/* logprobs.h: a reply's log probabilities (the engine's, fl_event.lps) as the OpenAI shapes
 * write them. Pure: the tokenizer for the tokens' texts, jansson for the values. Each function
 * returns NULL when out of memory (nothing half made is returned). */
#ifndef FL_LOGPROBS_H
#define FL_LOGPROBS_H

#include <jansson.h>

#include "fl.h"
#include "tokenizer/tokenizer.h"

/* One token: {"token": its text decoded alone (a piece of a UTF-8 character as U+FFFD),
 * "logprob": lp (-9999 where it is not finite, as OpenAI writes a probability of 0),
 * "bytes": its own bytes}. */
json_t *srv_lp_token(const fl_tokenizer *tok, int32_t id, float lp);

/* Chat completions' "content" list (also the WebSocket commit's "logprobs"): per id its
 * srv_lp_token with "top_logprobs", its k alternatives (top_ids, top_lps: (n, k)). */
json_t *srv_lp_content(const fl_tokenizer *tok, const int32_t *ids, const float *lps,
                       const int32_t *top_ids, const float *top_lps, int32_t n, int32_t k);

/* The legacy completions' object: {"tokens", "token_logprobs", "top_logprobs" (per token an
 * object of its k alternatives and itself, text -> logprob), "text_offset" (the character where
 * each token's text starts in the completion)}. The offsets go on across a stream's chunks: dt
 * holds the reply decoded so far as the engine decodes it (skipping special tokens) and *chars
 * its length in characters; both advance. */
json_t *srv_lp_legacy(const fl_tokenizer *tok, const int32_t *ids, const float *lps,
                      const int32_t *top_ids, const float *top_lps, int32_t n, int32_t k,
                      fl_detok *dt, size_t *chars);

#endif
