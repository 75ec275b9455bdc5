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

#endif
