/* moe.h: the routers of mixture-of-experts layers (config.h fl_router), on the host: which
 * experts one token goes to and with what weights, from its router logits. Pure functions;
 * every backend that routes on the host uses these, and the tests check them against a
 * second implementation. */
#ifndef FL_MOE_H
#define FL_MOE_H

#include "config.h"

/* Scratch floats fl_moe_route needs for m. */
size_t fl_moe_scratch(const fl_moe *m);

/* Routes one token. logits: (n_experts) its router logits h . gate^T in fp32; bias:
 * (n_experts) the expert bias (SIGMOID_GROUPED with expert_bias) or NULL. Writes the top_k
 * chosen experts to ids, best first (by the score that selects them; ties to the lower id),
 * and their weights to w (config.h fl_router). scratch: fl_moe_scratch(m) floats. */
void fl_moe_route(const fl_moe *m, const float *logits, const float *bias, int32_t *ids, float *w,
                  float *scratch);

#endif
