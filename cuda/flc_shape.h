/* flc_shape.h: the shape of a batch as the CUDA backend's graph cache keys it, in plain C
 * with no CUDA header, so that the CPU can compute it too: the backend plans every forward
 * with it (cuda_backend.cu, flc_plan_batch), and tests/gpu/gpu_sched replays a scheduler's
 * batches through it on the CPU to count how often each padding policy would let a graph
 * replay (docs/cuda.md, "CUDA graphs").
 *
 * A graph serves every batch whose key (tokens, segments, wanted rows, attention splits) is
 * the same: the kernels' grids are sized from the key and everything else they read is in
 * the metadata block. Shape padding (FL_CUDA_SHAPE_PAD) rounds the key up so that more
 * batches share it, at the price of the padding rows' work. */
#ifndef FL_CUDA_SHAPE_H
#define FL_CUDA_SHAPE_H

#include <stdbool.h>
#include <stddef.h>

#include "flc_meta.h"

#ifndef FLC_GRAPHS
#define FLC_GRAPHS 48 /* batch shapes the backend keeps as graphs (least recently used go) */
#endif

/* The row buckets cuBLAS is called with (FL_CUDA_GEMM_PAD): 16, 32, then multiples of 64 up
 * to 1,024, then of 256. */
static inline int flc_pad_rows(int m)
{
    if (m <= 16)
        return 16;
    if (m <= 32)
        return 32;
    if (m <= 1024)
        return (m + 63) / 64 * 64;
    return (m + 255) / 256 * 256;
}

/* What the backend is, as far as a batch's shape goes. */
typedef struct flc_shape_cfg {
    int rep, kvh, hd;   /* query heads per KV head, KV heads, head_dim */
    int n_sm;           /* multiprocessors */
    int skinny_rows;    /* most rows of the weight-streaming kernels (no padding up to it) */
    int max_tokens;     /* activation rows */
    int tiles_max;      /* attention tiles the metadata holds */
    size_t part_floats; /* room for the attention splits' partials */
    bool shape_pad;     /* FL_CUDA_SHAPE_PAD */
    bool attn_few;      /* FL_CUDA_ATTN=few */
} flc_shape_cfg;

/* A batch's real extent: tokens, segments, wanted rows (0 when no output is wanted),
 * attention tiles (ceil(n * rep / FLC_QROWS) summed over the segments) and the largest
 * pos0 + n. pad_out: the wanted rows may be padded too (no full logits asked). */
typedef struct flc_shape_in {
    int T, S, n_out, tiles, max_end;
    bool pad_out;
} flc_shape_in;

/* The key and the launch extents derived from it. */
typedef struct flc_shape {
    int T, S, n_out;      /* padded as the policy says; the graph key with n_splits */
    int tiles_bound;      /* attention tiles of any batch of this T and S: the grid */
    int n_splits;         /* key ranges of the attention (a power of two) */
    int split_len;        /* keys per range */
} flc_shape;

#define FLC_PART_BYTES ((size_t)64 << 20) /* attention split partials, at most */

/* The backend's cfg: tiles_max and part_floats from max_tokens and the model's heads. */
static inline void flc_shape_cfg_init(flc_shape_cfg *cfg, int rep, int kvh, int hd, int n_sm,
                                      int skinny_rows, int max_tokens, bool shape_pad,
                                      bool attn_few)
{
    cfg->rep = rep;
    cfg->kvh = kvh;
    cfg->hd = hd;
    cfg->n_sm = n_sm;
    cfg->skinny_rows = skinny_rows;
    cfg->max_tokens = max_tokens;
    cfg->shape_pad = shape_pad;
    cfg->attn_few = attn_few;
    cfg->tiles_max = (max_tokens * rep + FLC_QROWS - 1) / FLC_QROWS + max_tokens;
    size_t one = (size_t)cfg->tiles_max * kvh * FLC_QROWS * (hd + 2);
    size_t cap = FLC_PART_BYTES / 4;
    cfg->part_floats = one * 64 < cap ? one * 64 : cap;
    if (cfg->part_floats < one * 2)
        cfg->part_floats = one * 2 < cap ? one * 2 : cfg->part_floats;
}

/* Fills sh from in under cfg; 0, or -1 when the tiles exceed what the metadata holds (an
 * internal error: the caller's tiles_max is sized for max_tokens). */
static inline int flc_shape_of(const flc_shape_cfg *cfg, const flc_shape_in *in, flc_shape *sh)
{
    sh->T = in->T;
    sh->S = in->S;
    sh->n_out = in->n_out;
    /* Above the streaming matmul's rows, tokens and outputs go up to the bucket cuBLAS is
     * called with anyway (the same products, so the same numbers for the real rows) and the
     * segments' bound to a power of two. */
    if (cfg->shape_pad && sh->T > cfg->skinny_rows && sh->T <= 1024) {
        int Tp = flc_pad_rows(sh->T);
        if (Tp <= cfg->max_tokens) {
            int Sp = 1;
            while (Sp < sh->S)
                Sp *= 2;
            sh->S = Sp < Tp ? Sp : Tp;
            sh->T = Tp;
            if (in->pad_out && sh->n_out > cfg->skinny_rows)
                sh->n_out = flc_pad_rows(sh->n_out);
        }
    }
    /* a bound on the tiles of any batch with these T and S (ceil(x + y) <= ceil(x) + ceil(y)
     * <= ceil(x + y) + 1 over the segments), so the grid, and a graph, serve all of them */
    sh->tiles_bound = (sh->T * cfg->rep + FLC_QROWS - 1) / FLC_QROWS + sh->S - 1;
    if (sh->tiles_bound > cfg->tiles_max || in->tiles > sh->tiles_bound)
        return -1;
    /* split the keys when the tiles alone would leave most multiprocessors idle; powers of
     * two, so that a growing context changes the key only a few times */
    long long blocks = (long long)sh->tiles_bound * cfg->kvh;
    long long want = (2LL * cfg->n_sm + blocks - 1) / blocks;
    long long by_len = (in->max_end + 63) / 64;
    long long room = (long long)(cfg->part_floats / ((size_t)blocks * FLC_QROWS * (cfg->hd + 2)));
    long long ns = want < by_len ? want : by_len;
    if (ns > room)
        ns = room;
    if (ns > 1024)
        ns = 1024;
    int n_splits = 1;
    while (n_splits * 2 <= ns)
        n_splits *= 2;
    /* the few-row kernel: the power of two at or above, so that a split is one chunk of 64
     * keys where the multiprocessors allow (batch 1, 516 keys: 16 splits of 33, not 8 of 65) */
    if (cfg->attn_few && n_splits < ns && n_splits * 2 <= room && n_splits * 2 <= 1024)
        n_splits *= 2;
    sh->n_splits = n_splits;
    sh->split_len = (in->max_end + n_splits - 1) / n_splits;
    return 0;
}

/* ---- The graph cache's bookkeeping (the backend keeps the graphs beside it, by slot).
 * A key seen for the first time is run eagerly (which also loads lazily-loaded kernels
 * outside any capture), the second time captured, then replayed; FLC_GRAPHS keys at most,
 * the least recently seen replaced. */

typedef struct flc_gkey {
    int T, S, n_out, n_splits;
} flc_gkey;

typedef struct flc_gcache {
    struct {
        flc_gkey k;
        unsigned long long last;
        bool used, captured;
    } s[FLC_GRAPHS];
    unsigned long long clock;
} flc_gcache;

enum { FLC_G_FIRST, FLC_G_CAPTURE, FLC_G_REPLAY };

/* What to do with a batch of key k: FLC_G_FIRST (run eagerly; the key now holds *slot, and
 * *evict says that slot held a captured graph, now to be destroyed), FLC_G_CAPTURE (capture
 * into *slot, then set captured there) or FLC_G_REPLAY (replay *slot). */
static inline int flc_gcache_see(flc_gcache *gc, const flc_gkey *k, int *slot, bool *evict)
{
    int lru = 0;
    *evict = false;
    for (int i = 0; i < FLC_GRAPHS; i++) {
        if (gc->s[i].used && gc->s[i].k.T == k->T && gc->s[i].k.S == k->S &&
            gc->s[i].k.n_out == k->n_out && gc->s[i].k.n_splits == k->n_splits) {
            gc->s[i].last = ++gc->clock;
            *slot = i;
            return gc->s[i].captured ? FLC_G_REPLAY : FLC_G_CAPTURE;
        }
        if (!gc->s[i].used || (gc->s[lru].used && gc->s[i].last < gc->s[lru].last))
            lru = i;
    }
    *evict = gc->s[lru].used && gc->s[lru].captured;
    gc->s[lru].k = *k;
    gc->s[lru].used = true;
    gc->s[lru].captured = false;
    gc->s[lru].last = ++gc->clock;
    *slot = lru;
    return FLC_G_FIRST;
}

#endif
