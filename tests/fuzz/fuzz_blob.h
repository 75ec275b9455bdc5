/* fuzz_blob.h: the fixed small model the KV page blob target decodes against, shared with the
 * seed generator (blob_seed.c) so that the seeds are valid for whatever blob format
 * fl_blob_encode writes today. */
#ifndef FL_FUZZ_BLOB_H
#define FL_FUZZ_BLOB_H

#include <string.h>

#include "persist.h"

#define FZ_BLOB_MODEL_ID 0x666f676c696e6521ull
static const fl_page_key fz_blob_key = {0x0123456789abcdefull, 0xfedcba9876543210ull};

/* block 4, 2 layers, 1 kv head of 8: a 128-float page, so a blob is a few hundred bytes. */
static inline fl_config fz_blob_config(void)
{
    fl_config c;
    memset(&c, 0, sizeof c);
    c.block_size = 4;
    c.sub_block = 4;
    c.n_layers = 2;
    c.n_heads = 2;
    c.n_kv_heads = 1;
    c.head_dim = 8;
    c.hidden = 16;
    c.vocab = 64;
    c.mask_token_id = 63;
    c.bos_id = -1;
    return c;
}

static inline size_t fz_blob_page_floats(const fl_config *c)
{
    return (size_t)c->block_size * (size_t)c->n_layers * 2u * (size_t)c->n_kv_heads *
           (size_t)c->head_dim;
}

#endif
