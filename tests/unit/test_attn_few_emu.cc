/* test_attn_few_emu.cc: the few-row attention kernel (cuda/attn_few.cuh, FL_CUDA_ATTN=few)
 * run on the CPU through cuda_emu.hh, against a plain block-causal attention in double.
 *
 * Batches as the CUDA backend plans them (tiles of FLC_QROWS query rows per segment, keys
 * split in n_splits ranges of the batch's longest), with K/V for positions before a segment
 * in bf16 pages through a page table and the segment's own in kvo. Checked: every output
 * within bf16 rounding of the reference (|out - ref| <= 2^-8 |ref| + 1e-5), rows not in the
 * batch untouched, the tickets all zero after a launch (a graph replays it), and a second
 * launch with the blocks in the reverse order bit-identical to the first (the merge is in
 * split order whichever block finishes last). */
#include "check.h"
#include "cuda_emu.hh"

typedef emu_bf16 flc_bf16;
#include "flc_meta.h"
static inline void flc_pdl_trigger() {} /* programmatic launch: nothing to emulate */
static inline void flc_pdl_wait() {}
#include "attn_few.cuh"

FL_CUDA_EMU_DEFINE


static uint32_t g_lcg = 12345;
static float rnd(void) /* [-1, 1) */
{
    g_lcg = g_lcg * 1664525u + 1013904223u;
    return (float)((g_lcg >> 8) & 0xffffff) / 8388608.0f - 1.0f;
}

struct seg_spec {
    int pos0, n;
};

struct kase {
    const char *name;
    int hd, kvh, rep, B, layers, layer, n_splits;
    std::vector<seg_spec> segs;
};

static float bf(flc_bf16 b) { return __bfloat162float(b); }

static void run_case(const kase &k)
{
    flc_dims d;
    memset(&d, 0, sizeof d);
    d.hd = k.hd;
    d.kvh = k.kvh;
    d.rep = k.rep;
    d.nh = k.kvh * k.rep;
    d.qd = d.nh * k.hd;
    d.kvd = k.kvh * k.hd;
    d.qkvd = d.qd + 2 * d.kvd;
    d.B = k.B;
    d.page_elems = (size_t)k.layers * 2 * k.kvh * k.B * k.hd;
    const int S = (int)k.segs.size();

    /* tokens, pages (a shuffled table per segment), tiles */
    std::vector<int32_t> seg_pos0, seg_n, seg_tok0, seg_pt, pages, tile_seg, tile_row0;
    int T = 0, npages = 0, max_end = 0;
    for (int s = 0; s < S; s++) {
        const seg_spec &g = k.segs[(size_t)s];
        seg_pos0.push_back(g.pos0);
        seg_n.push_back(g.n);
        seg_tok0.push_back(T);
        seg_pt.push_back((int32_t)pages.size());
        const int np = (g.pos0 + k.B - 1) / k.B;
        for (int p = 0; p < np; p++)
            pages.push_back(0);
        for (int p = 0; p < np; p++) { /* a permutation of fresh page ids, reversed */
            pages[(size_t)seg_pt.back() + (size_t)p] = npages + (np - 1 - p);
        }
        npages += np;
        for (int r0 = 0; r0 < g.n * k.rep; r0 += FLC_QROWS) {
            tile_seg.push_back(s);
            tile_row0.push_back(r0);
        }
        T += g.n;
        if (g.pos0 + g.n > max_end)
            max_end = g.pos0 + g.n;
    }
    const int tiles = (int)tile_seg.size(), tiles_bound = tiles + 1; /* a spare, unused tile */
    const int L = (max_end + k.n_splits - 1) / k.n_splits;
    int32_t params[FLC_P_COUNT] = {0};
    params[FLC_P_TILES] = tiles;
    params[FLC_P_SPLIT] = L;
    flc_meta m;
    memset(&m, 0, sizeof m);
    m.params = params;
    m.seg_pos0 = seg_pos0.data();
    m.seg_n = seg_n.data();
    m.seg_tok0 = seg_tok0.data();
    m.seg_pt = seg_pt.data();
    m.pages = pages.data();
    m.tile_seg = tile_seg.data();
    m.tile_row0 = tile_row0.data();

    std::vector<flc_bf16> pool((size_t)(npages > 0 ? npages : 1) * d.page_elems);
    for (auto &x : pool)
        x = __float2bfloat16_rn(rnd());
    std::vector<flc_bf16> kvo((size_t)T * 2 * d.kvd);
    for (auto &x : kvo)
        x = __float2bfloat16_rn(rnd());
    std::vector<float> qkv((size_t)T * d.qkvd);
    for (auto &x : qkv)
        x = 2.0f * rnd(); /* scores of a few units: the softmax is neither flat nor one-hot */
    const flc_bf16 sentinel = __float2bfloat16_rn(-77.0f);
    std::vector<flc_bf16> att((size_t)T * d.qd, sentinel);
    std::vector<float> part((size_t)tiles_bound * k.kvh * k.n_splits * FLC_QROWS * (k.hd + 2),
                            NAN);
    std::vector<int> ticket((size_t)tiles_bound * k.kvh, 0);
    const bool rows8 = T * k.rep <= 8;

    auto launch = [&] {
        dim3 grid((unsigned)tiles_bound, (unsigned)k.kvh, (unsigned)k.n_splits);
        flc_bf16 *a = att.data();
        float *pp = part.data();
        int *tk = ticket.data();
        const float *q = qkv.data();
        const flc_bf16 *ko = kvo.data(), *po = pool.data();
        const int layer = k.layer, ns = k.n_splits;
        if (rows8) {
            if (ns == 1)
                emu_launch(grid, FLC_FEW_THREADS,
                           [&] { k_attn_few<8, true>(a, pp, tk, q, ko, po, m, d, layer, 1); });
            else
                emu_launch(grid, FLC_FEW_THREADS,
                           [&] { k_attn_few<8, false>(a, pp, tk, q, ko, po, m, d, layer, ns); });
        } else {
            if (ns == 1)
                emu_launch(grid, FLC_FEW_THREADS, [&] {
                    k_attn_few<FLC_QROWS, true>(a, pp, tk, q, ko, po, m, d, layer, 1);
                });
            else
                emu_launch(grid, FLC_FEW_THREADS, [&] {
                    k_attn_few<FLC_QROWS, false>(a, pp, tk, q, ko, po, m, d, layer, ns);
                });
        }
    };
    launch();

    /* the reference */
    const size_t lay = (size_t)k.layer * 2 * k.kvh;
    auto krow = [&](int s, int kk, int g, bool v) -> const flc_bf16 * {
        if (kk < seg_pos0[(size_t)s]) {
            const flc_bf16 *pg =
                pool.data() + (size_t)pages[(size_t)seg_pt[(size_t)s] + (size_t)(kk / k.B)] *
                                  d.page_elems;
            return pg + ((lay + (v ? (size_t)k.kvh : 0) + (size_t)g) * (size_t)k.B +
                         (size_t)(kk % k.B)) * (size_t)k.hd;
        }
        return kvo.data() + ((size_t)(seg_tok0[(size_t)s] + kk - seg_pos0[(size_t)s]) * 2 *
                                 (size_t)k.kvh + (v ? (size_t)k.kvh : 0) + (size_t)g) *
                                (size_t)k.hd;
    };
    double worst = 0;
    int bad = 0;
    for (int s = 0; s < S; s++)
        for (int i = 0; i < seg_n[(size_t)s]; i++) {
            const int p = seg_pos0[(size_t)s] + i, tok = seg_tok0[(size_t)s] + i;
            const int kend = std::min((p / k.B + 1) * k.B, seg_pos0[(size_t)s] + seg_n[(size_t)s]);
            for (int h = 0; h < d.nh; h++) {
                const int g = h / k.rep;
                const float *q = qkv.data() + (size_t)tok * d.qkvd + (size_t)h * k.hd;
                std::vector<double> sc((size_t)kend), o((size_t)k.hd, 0.0);
                double mx = -INFINITY, den = 0;
                for (int kk = 0; kk < kend; kk++) {
                    const flc_bf16 *kr = krow(s, kk, g, false);
                    double a = 0;
                    for (int c = 0; c < k.hd; c++)
                        a += (double)q[c] * bf(kr[c]);
                    sc[(size_t)kk] = a / sqrt((double)k.hd);
                    mx = std::max(mx, sc[(size_t)kk]);
                }
                for (int kk = 0; kk < kend; kk++) {
                    const double w = exp(sc[(size_t)kk] - mx);
                    den += w;
                    const flc_bf16 *vr = krow(s, kk, g, true);
                    for (int c = 0; c < k.hd; c++)
                        o[(size_t)c] += w * bf(vr[c]);
                }
                for (int c = 0; c < k.hd; c++) {
                    const double ref = o[(size_t)c] / den;
                    const double got = bf(att[(size_t)tok * d.qd + (size_t)h * k.hd + (size_t)c]);
                    const double err = fabs(got - ref);
                    if (err > worst)
                        worst = err;
                    if (!(err <= fabs(ref) / 256.0 + 1e-5) && bad++ < 3)
                        printf("  %s: token %d head %d dim %d: %.6f, reference %.6f\n", k.name,
                               tok, h, c, got, ref);
                }
            }
        }
    CHECK(bad == 0, "%s: %d outputs off the reference (worst abs err %.3g)", k.name, bad, worst);
    bool zero = true;
    for (int t : ticket)
        zero = zero && t == 0;
    CHECK(zero, "%s: tickets left non-zero", k.name);

    /* again with the blocks in the reverse order: another block is the last of each tile and
     * group, and merges; the result must not change */
    std::vector<flc_bf16> first = att;
    emu_reverse = true;
    launch();
    emu_reverse = false;
    CHECK(!memcmp(first.data(), att.data(), att.size() * sizeof(flc_bf16)),
          "%s: a second launch, blocks in the reverse order, differs", k.name);
    zero = true;
    for (int t : ticket)
        zero = zero && t == 0;
    CHECK(zero, "%s: tickets left non-zero by the second launch", k.name);
    printf("%s %s: %d tokens, %d tiles, %d splits of %d keys, rows8 %d, worst abs err %.3g\n",
           bad ? "FAIL" : "ok", k.name, T, tiles, k.n_splits, L, (int)rows8, worst);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    std::vector<kase> cases = {
        /* batch 1 as run.sh measures it (SDAR-1.7B: rep 2, hd 128), fewer groups */
        {"block 4 over 512 cached, 16 splits", 128, 2, 2, 4, 2, 1, 16, {{512, 4}}},
        /* 16 rows (rep 4, LLaDA2-mini / SDAR-4B), hd 64, a split of more than one chunk */
        {"rep 4, hd 64, 4 splits", 64, 2, 4, 4, 1, 0, 4, {{300, 4}}},
        /* several segments: a prefill (tiles of 16 rows), short ones with empty splits */
        {"ragged batch, 8 splits", 128, 2, 2, 4, 2, 1, 8, {{0, 12}, {40, 4}, {196, 8}, {3 * 4, 4}}},
        /* one split: straight to att, several chunks */
        {"one split, 3 chunks", 128, 1, 2, 4, 1, 0, 1, {{150, 4}}},
        /* a segment ending inside a block (kend cut by the segment's end), odd pieces */
        {"partial block, hd 72", 72, 2, 3, 8, 1, 0, 4, {{64, 5}, {8, 3}}},
        /* block 32 at batch 1: 4 tiles of 16 rows */
        {"block 32, 2 splits", 64, 1, 2, 32, 1, 0, 2, {{96, 32}}},
    };
    for (const kase &k : cases)
        run_case(k);
    return check_summary("test_attn_few_emu");
}
