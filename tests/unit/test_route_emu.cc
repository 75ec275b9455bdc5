/* test_route_emu.cc: a mixture-of-experts layer's routing on the device (cuda/route.cuh) run on
 * the CPU through cuda_emu.hh, against engine/moe.c's fl_moe_route itself: the same experts in
 * the same order and the same weights, bit for bit (here both use glibc's expf; on a GPU the
 * device's may differ in the last bit).
 *
 * Routers: LLaDA2's grouped sigmoid (256 experts in 8 groups, 4 kept, top 8, expert bias,
 * scaling 2.5), SDAR-MoE's softmax (128 experts, top 8, with and without renormalising),
 * small ones (20 experts in 4 groups, 2 kept, top 3; 5 experts, top 2; top 1). Logits:
 * random; many equal (ties go to the lower index); +0 and -0; -inf; NaN among numbers (a
 * number wins); a token whose kept experts are all NaN but one. Blocks of 32 threads and of
 * the launch's 128. Plus flc_best_warp against flc_best on random arrays with ties, NaN and
 * cleared entries, and the all-cleared case (-1). */
#include <math.h>
#include <stdint.h>

#include <vector>

#include "check.h"
#include "cuda_emu.hh"
#include "cuda_emu_mv.hh"
#include "flc_meta.h"

#include "route.cuh"

extern "C" {
#include "moe.h"
}

FL_CUDA_EMU_DEFINE

/* logits of token t in style st */
static void fill(float *l, int E, int st)
{
    for (int i = 0; i < E; i++) {
        float v = 3.0f * rnd();
        switch (st) {
        case 1: /* many equal: 4 values */
            v = (float)(irnd(4) - 2) * 0.5f;
            break;
        case 2: /* zeros of both signs and a few numbers */
            v = irnd(3) ? (irnd(2) ? 0.0f : -0.0f) : rnd();
            break;
        case 3: /* -inf among numbers */
            v = irnd(4) ? v : -INFINITY;
            break;
        case 4: /* NaN among numbers */
            v = irnd(3) ? v : NAN;
            break;
        case 5: /* nearly all NaN */
            v = irnd(E) < 2 ? v : NAN;
            break;
        }
        l[i] = v;
    }
}

static void run_case(const char *name, const fl_moe &m, bool with_bias, int threads)
{
    const int E = m.n_experts, K = m.top_k, T = 12;
    const int G = m.router == FL_ROUTER_SOFTMAX ? 1 : m.n_group;
    flc_route r = {E, K, G, m.router == FL_ROUTER_SOFTMAX ? 1 : m.topk_group,
                   m.router == FL_ROUTER_SOFTMAX, m.norm_topk, m.scaling};
    std::vector<float> lg((size_t)T * E), bias((size_t)E);
    for (int t = 0; t < T; t++)
        fill(&lg[(size_t)t * E], E, t % 6);
    for (auto &b : bias)
        b = 0.3f * rnd();
    const float *bp = with_bias ? bias.data() : nullptr;
    /* the CPU's */
    std::vector<int32_t> cid((size_t)T * K);
    std::vector<float> cw((size_t)T * K), scr(fl_moe_scratch(&m));
    for (int t = 0; t < T; t++)
        fl_moe_route(&m, &lg[(size_t)t * E], bp, &cid[(size_t)t * K], &cw[(size_t)t * K],
                     scr.data());
    /* the device's, with a sentinel token past T */
    std::vector<int32_t> did((size_t)(T + 1) * K, -3);
    std::vector<float> dw((size_t)(T + 1) * K, -3.0f);
    std::vector<float> sm(3 * (size_t)E + 2 * (size_t)G);
    static float red[2];
    emu_launch(dim3((unsigned)T), dim3((unsigned)threads), [&] {
        flc_route_block(sm.data(), red, did.data(), dw.data(), lg.data(), bp, r);
    });
    int bad = 0;
    for (int t = 0; t < T; t++)
        for (int k = 0; k < K; k++) {
            const size_t i = (size_t)t * K + k;
            if ((did[i] != cid[i] || memcmp(&dw[i], &cw[i], sizeof(float))) && bad++ < 4)
                printf("  %s token %d (style %d) pick %d: expert %d w %.9g, CPU %d w %.9g\n", name,
                       t, t % 6, k, did[i], dw[i], cid[i], cw[i]);
        }
    int past = 0;
    for (int k = 0; k < K; k++)
        past += did[(size_t)T * K + k] != -3 || dw[(size_t)T * K + k] != -3.0f;
    CHECK(bad == 0, "%s, %d threads: %d picks differ from fl_moe_route", name, threads, bad);
    CHECK(past == 0, "%s: written past the last token", name);
    printf("%s %s, %d threads: %d tokens x %d picks as fl_moe_route\n", bad || past ? "FAIL" : "ok",
           name, threads, T, K);
}

static void check_best(void)
{
    int bad = 0, runs = 0;
    for (int it = 0; it < 300; it++) {
        const int n = 1 + irnd(300);
        std::vector<float> v((size_t)n), ok((size_t)n);
        const int st = it % 6;
        fill(v.data(), n, st);
        for (int i = 0; i < n; i++)
            ok[i] = it % 50 == 7 ? 0.0f : (float)(irnd(5) != 0);
        const int want = flc_best(v.data(), ok.data(), n);
        static int got[32];
        emu_launch(dim3(1), dim3(32),
                   [&] { got[threadIdx.x] = flc_best_warp(v.data(), ok.data(), n); });
        runs++;
        int lanes = 0;
        for (int l = 0; l < 32; l++)
            lanes += got[l] != want;
        if (lanes && bad++ < 4)
            printf("  best of %d (style %d): warp %d, scan %d\n", n, st, got[0], want);
    }
    CHECK(bad == 0, "flc_best_warp: %d of %d searches differ from the scan (every lane)", bad,
          runs);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    check_best();
    fl_moe llada2 = {FL_ROUTER_SIGMOID_GROUPED, 256, 8, 512, 1, 8, 4, false, true, 2.5f, 1, 1};
    fl_moe sdar = {FL_ROUTER_SOFTMAX, 128, 8, 768, 0, 1, 1, true, false, 1.0f, 0, 1};
    fl_moe sdar_raw = sdar;
    sdar_raw.norm_topk = false;
    fl_moe small_g = {FL_ROUTER_SIGMOID_GROUPED, 20, 3, 32, 0, 4, 2, false, false, 1.0f, 0, 1};
    fl_moe small_s = {FL_ROUTER_SOFTMAX, 5, 2, 32, 0, 1, 1, true, false, 1.0f, 0, 1};
    fl_moe top1 = {FL_ROUTER_SIGMOID_GROUPED, 16, 1, 32, 0, 2, 1, false, false, 1.5f, 0, 1};
    run_case("LLaDA2 (256 experts, 8 groups, top 8, bias)", llada2, true, 128);
    run_case("SDAR-MoE softmax (128, top 8, renormalised)", sdar, false, 128);
    run_case("softmax, not renormalised", sdar_raw, false, 32);
    run_case("grouped, 20 experts in 4 groups, top 3", small_g, false, 32);
    run_case("grouped, 20 experts, bias", small_g, true, 128);
    run_case("softmax, 5 experts, top 2", small_s, false, 32);
    run_case("grouped, top 1", top1, true, 32);
    return check_summary("test_route_emu");
}
