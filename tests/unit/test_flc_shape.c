/* test_flc_shape.c: the CUDA backend's batch shapes and graph cache (cuda/flc_shape.h), plain C
 * that the backend runs on every forward and tests/gpu/gpu_sched replays on the CPU: the row
 * buckets, the padding policy, the attention tiles' bound every batch of a key must fit, the
 * attention split, and the cache's first sighting / capture / replay and its eviction order. */
#include <stdint.h>

#include "check.h"
#include "flc_shape.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static int rnd(int n) /* 0..n-1 */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (int)(rng % (uint64_t)n);
}

/* a random batch of S segments, as flc_plan_batch counts it */
static flc_shape_in batch(int S, int max_n, int rep, bool pad_out)
{
    flc_shape_in in = {0, S, 0, 0, 0, pad_out};
    for (int s = 0; s < S; s++) {
        int n = 1 + rnd(max_n), pos0 = rnd(2000);
        in.T += n;
        in.tiles += (n * rep + FLC_QROWS - 1) / FLC_QROWS;
        in.n_out += rnd(n + 1);
        if (pos0 + n > in.max_end)
            in.max_end = pos0 + n;
    }
    return in;
}

static int pow2_at_least(int x)
{
    int p = 1;
    while (p < x)
        p *= 2;
    return p;
}

int main(void)
{
    /* ---- row buckets */
    static const int pr[][2] = {{1, 16},    {16, 16},   {17, 32},     {32, 32},     {33, 64},
                                {64, 64},   {65, 128},  {1000, 1024}, {1024, 1024}, {1025, 1280},
                                {1280, 1280}, {1281, 1536}};
    for (size_t i = 0; i < sizeof pr / sizeof pr[0]; i++)
        CHECK(flc_pad_rows(pr[i][0]) == pr[i][1], "pad_rows(%d) = %d, want %d", pr[i][0],
              flc_pad_rows(pr[i][0]), pr[i][1]);
    int bad = 0;
    for (int m = 1; m <= 5000; m++)
        bad += flc_pad_rows(m) < m || flc_pad_rows(flc_pad_rows(m)) != flc_pad_rows(m) ||
               flc_pad_rows(m) < flc_pad_rows(m - 1 > 0 ? m - 1 : 1);
    CHECK(bad == 0, "%d row counts whose bucket is below them, not fixed or not monotonic", bad);

    /* ---- the backend's configuration: an SDAR-1.7B-like model (16 query heads, 8 KV heads of
     * 128) on 132 multiprocessors, 1,024 activation rows */
    flc_shape_cfg exact, padded, few;
    flc_shape_cfg_init(&exact, 2, 8, 128, 132, 8, 1024, false, false);
    flc_shape_cfg_init(&padded, 2, 8, 128, 132, 8, 1024, true, false);
    flc_shape_cfg_init(&few, 2, 8, 128, 132, 8, 1024, false, true);
    CHECK(exact.tiles_max == 1024 * 2 / 16 + 1024, "tiles_max %d", exact.tiles_max);
    CHECK(exact.part_floats <= FLC_PART_BYTES / 4 && exact.part_floats > 0, "part_floats %zu",
          exact.part_floats);

    /* ---- batch 1, a block of 4 over 512 cached: one tile; the keys split in 8 (power of two
     * at or below 9 = 516 / 64), 16 for the few-row kernel (at or above) */
    flc_shape_in b1 = {4, 1, 4, 1, 516, true};
    flc_shape sh;
    CHECK(flc_shape_of(&exact, &b1, &sh) == 0, "batch 1 plans");
    CHECK(sh.T == 4 && sh.S == 1 && sh.n_out == 4 && sh.tiles_bound == 1, "batch 1: %d %d %d %d",
          sh.T, sh.S, sh.n_out, sh.tiles_bound);
    CHECK(sh.n_splits == 8 && sh.split_len == 65, "batch 1 splits %d of %d", sh.n_splits,
          sh.split_len);
    CHECK(flc_shape_of(&few, &b1, &sh) == 0 && sh.n_splits == 16 && sh.split_len == 33,
          "batch 1, few-row kernel: splits %d of %d", sh.n_splits, sh.split_len);
    /* 512 keys: 8 ranges exactly (by length), and no more for the few-row kernel */
    flc_shape_in b512 = {4, 1, 4, 1, 512, true};
    CHECK(flc_shape_of(&exact, &b512, &sh) == 0 && sh.n_splits == 8 && sh.split_len == 64,
          "512 keys: splits %d of %d", sh.n_splits, sh.split_len);
    CHECK(flc_shape_of(&few, &b512, &sh) == 0 && sh.n_splits == 8 && sh.split_len == 64,
          "512 keys, few-row kernel: splits %d of %d", sh.n_splits, sh.split_len);
    CHECK(flc_shape_of(&padded, &b1, &sh) == 0 && sh.T == 4 && sh.n_out == 4,
          "up to the streaming rows nothing is padded: T %d", sh.T);

    /* ---- the padding policy, and the properties every batch must keep */
    int checked = 0, fails_bound = 0, fails_split = 0, fails_pad = 0, fails_exact = 0;
    for (int it = 0; it < 20000; it++) {
        int S = 1 + rnd(it % 3 == 0 ? 64 : 8);
        flc_shape_in in = batch(S, it % 2 ? 40 : 4, 2, rnd(4) != 0);
        if (in.T > 1024)
            continue;
        checked++;
        flc_shape e, p;
        if (flc_shape_of(&exact, &in, &e) || flc_shape_of(&padded, &in, &p)) {
            fails_bound++;
            continue;
        }
        /* exact: the key is the batch */
        fails_exact += e.T != in.T || e.S != in.S || e.n_out != in.n_out;
        /* every batch's tiles fit its key's grid, and the split covers the keys */
        fails_bound += in.tiles > e.tiles_bound || in.tiles > p.tiles_bound;
        for (int k = 0; k < 2; k++) {
            const flc_shape *x = k ? &p : &e;
            fails_split += x->n_splits < 1 || x->n_splits > 1024 ||
                           (x->n_splits & (x->n_splits - 1)) != 0 ||
                           (long)x->n_splits * x->split_len < in.max_end ||
                           (long)x->n_splits * (x->split_len - 1) >= in.max_end;
        }
        /* padded: tokens to the bucket, segments to a power of two (at most the tokens),
         * outputs to the bucket when allowed and above the streaming rows */
        if (in.T <= 8)
            fails_pad += p.T != in.T || p.S != in.S || p.n_out != in.n_out;
        else {
            int Tp = flc_pad_rows(in.T), Sp = pow2_at_least(in.S);
            int want_out = in.pad_out && in.n_out > 8 ? flc_pad_rows(in.n_out) : in.n_out;
            fails_pad += p.T != Tp || p.S != (Sp < Tp ? Sp : Tp) || p.n_out != want_out;
        }
    }
    CHECK(checked > 10000, "%d batches checked", checked);
    CHECK(fails_exact == 0, "%d exact keys differ from their batch", fails_exact);
    CHECK(fails_bound == 0, "%d batches whose tiles exceed their key's bound", fails_bound);
    CHECK(fails_split == 0, "%d splits not a power of two covering the keys", fails_split);
    CHECK(fails_pad == 0, "%d padded keys not as the policy says", fails_pad);

    /* the point of the padding: batches that differ only within a bucket share a key */
    {
        flc_shape_in a = {70, 3, 20, 11, 900, true}, b = {100, 4, 30, 16, 900, true};
        flc_shape pa, pb, ea, eb;
        CHECK(!flc_shape_of(&padded, &a, &pa) && !flc_shape_of(&padded, &b, &pb) &&
                  pa.T == pb.T && pa.S == pb.S && pa.n_out == pb.n_out &&
                  pa.n_splits == pb.n_splits && pa.tiles_bound == pb.tiles_bound,
              "70 and 100 tokens share a padded key: T %d/%d S %d/%d out %d/%d", pa.T, pb.T,
              pa.S, pb.S, pa.n_out, pb.n_out);
        CHECK(!flc_shape_of(&exact, &a, &ea) && !flc_shape_of(&exact, &b, &eb) && ea.T != eb.T,
              "exact keys differ");
    }
    /* no padding past the activation rows, nor above 1,024 tokens */
    {
        flc_shape_cfg small;
        flc_shape_cfg_init(&small, 2, 8, 128, 132, 8, 100, true, false);
        flc_shape_in a = {90, 2, 0, 12, 300, true};
        CHECK(!flc_shape_of(&small, &a, &sh) && sh.T == 90 && sh.S == 2,
              "90 tokens of 100 rows stay 90 (bucket 128 would not fit): %d", sh.T);
        flc_shape_cfg big;
        flc_shape_cfg_init(&big, 2, 8, 128, 132, 8, 4096, true, false);
        flc_shape_in c = {1500, 3, 0, 3 * 63, 3000, true};
        CHECK(!flc_shape_of(&big, &c, &sh) && sh.T == 1500, "1,500 tokens stay: %d", sh.T);
    }
    /* more tiles than the metadata holds is an error, not a grid too small */
    {
        flc_shape_in a = {100, 2, 0, 2000, 300, true};
        CHECK(flc_shape_of(&exact, &a, &sh) == -1, "tiles above the bound are refused");
    }

    /* ---- the graph cache */
    static flc_gcache gc;
    flc_gkey k1 = {64, 4, 16, 1}, k2 = {64, 4, 16, 2};
    int slot, slot2;
    bool ev;
    CHECK(flc_gcache_see(&gc, &k1, &slot, &ev) == FLC_G_FIRST && !ev, "first sighting");
    CHECK(flc_gcache_see(&gc, &k1, &slot2, &ev) == FLC_G_CAPTURE && slot2 == slot,
          "second sighting captures in the same slot");
    gc.s[slot].captured = true;
    CHECK(flc_gcache_see(&gc, &k1, &slot2, &ev) == FLC_G_REPLAY && slot2 == slot, "replay");
    CHECK(flc_gcache_see(&gc, &k2, &slot2, &ev) == FLC_G_FIRST && slot2 != slot,
          "a key differing in the splits only is another shape");
    /* fill the rest: k2 (seen, not captured) then k1 are the oldest */
    for (int i = 0; i < FLC_GRAPHS - 2; i++) {
        flc_gkey k = {128 + i, 1, 0, 1};
        CHECK(flc_gcache_see(&gc, &k, &slot2, &ev) == FLC_G_FIRST && !ev, "fill %d", i);
    }
    CHECK(flc_gcache_see(&gc, &k1, &slot2, &ev) == FLC_G_REPLAY, "k1 kept while there is room");
    /* now k2 is the least recently seen: a new key takes its slot, with nothing to destroy */
    flc_gkey k3 = {999, 1, 0, 1};
    int s2 = -1;
    for (int i = 0; i < FLC_GRAPHS; i++)
        if (gc.s[i].used && gc.s[i].k.n_splits == 2)
            s2 = i;
    CHECK(flc_gcache_see(&gc, &k3, &slot2, &ev) == FLC_G_FIRST && slot2 == s2 && !ev,
          "the least recent key (k2, slot %d) goes first: slot %d, evict %d", s2, slot2, ev);
    /* then the oldest fill key; k1 was refreshed so it outlives them all */
    int evicted_k1 = 0;
    for (int i = 0; i < FLC_GRAPHS - 2; i++) {
        flc_gkey k = {5000 + i, 1, 0, 1};
        flc_gcache_see(&gc, &k, &slot2, &ev);
        evicted_k1 += slot2 == slot;
    }
    CHECK(evicted_k1 == 0, "k1, seen recently, was not evicted by the fill keys' successors");
    flc_gkey k4 = {7777, 1, 0, 1};
    CHECK(flc_gcache_see(&gc, &k4, &slot2, &ev) == FLC_G_FIRST && slot2 == slot && ev,
          "k1, captured, is evicted last and says so: slot %d/%d, evict %d", slot2, slot, ev);
    CHECK(flc_gcache_see(&gc, &k4, &slot2, &ev) == FLC_G_CAPTURE && slot2 == slot,
          "the new key in the captured key's slot is not taken as captured");
    CHECK(flc_gcache_see(&gc, &k1, &slot2, &ev) == FLC_G_FIRST,
          "an evicted key starts again from its first sighting");
    return check_summary("test_flc_shape");
}
