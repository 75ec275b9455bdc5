/* test_router_emu.cc: a mixture-of-experts layer's router logits (cuda/router.cuh) run on the
 * CPU through cuda_emu.hh: RT tokens a block and expert ranges (blockIdx.y) against one token
 * a block over all experts (the kernel this one replaced, the same device code at RT 1), bit
 * for bit, and against the logits in double.
 *
 * Cases: T of 1, 5, 6 and 13 (a last block with fewer tokens), H of 96 (fewer elements
 * than threads) and 544, E of 20 (not a multiple of 8) in 1, 3 and 6 expert ranges (the
 * last one empty), blocks of 64 threads and of the launch's 256, rows of very different
 * magnitudes. Checked: every logit within float
 * rounding of the double product of the row's norm and the router row; the same bits for
 * every RT and range count; logits of other tokens and experts untouched (a sentinel past
 * T); both block orders; flc_router_plan_for within its limits. */
#include "check.h"
#include "cuda_emu.hh"

#include "cuda_emu_mv.hh"
#include "router.cuh"

FL_CUDA_EMU_DEFINE

static void launch(int threads, int rt, int eblocks, float *lg, const float *x, const float *nw,
                   const float *R, int T, int H, int E, float eps)
{
    std::vector<float> xn((size_t)rt * H);
    static double sh[32]; /* the running block's, as __shared__ */
    const dim3 grid((unsigned)((T + rt - 1) / rt), (unsigned)eblocks);
    emu_launch(grid, threads, [&] {
        if (rt == 4)
            flc_router_block<4>(xn.data(), sh, lg, x, nw, R, T, H, E, eps);
        else if (rt == 2)
            flc_router_block<2>(xn.data(), sh, lg, x, nw, R, T, H, E, eps);
        else
            flc_router_block<1>(xn.data(), sh, lg, x, nw, R, T, H, E, eps);
    });
}

static void run_case(int T, int H, int E, int threads)
{
    const float eps = 1e-6f;
    std::vector<float> x((size_t)T * H), nw(H), R((size_t)E * H);
    for (int t = 0; t < T; t++) {
        const float mag = t % 3 == 0 ? 40.0f : t % 3 == 1 ? 0.02f : 1.0f;
        for (int i = 0; i < H; i++)
            x[(size_t)t * H + i] = mag * rnd();
    }
    for (auto &v : nw)
        v = 1.0f + 0.5f * rnd();
    for (auto &v : R)
        v = 0.1f * rnd();
    const size_t n_out = (size_t)(T + 1) * E; /* a sentinel row past T */
    std::vector<float> base(n_out, -5.0f);
    launch(threads, 1, 1, base.data(), x.data(), nw.data(), R.data(), T, H, E, eps);
    int bad = 0;
    double worst = 0;
    for (int t = 0; t < T; t++) {
        double ss = 0;
        for (int i = 0; i < H; i++)
            ss += (double)x[(size_t)t * H + i] * x[(size_t)t * H + i];
        const double rs = 1.0 / sqrt(ss / H + eps);
        for (int e = 0; e < E; e++) {
            double s = 0, a = 0;
            for (int i = 0; i < H; i++) {
                const double p = nw[i] * (x[(size_t)t * H + i] * rs) * R[(size_t)e * H + i];
                s += p;
                a += fabs(p);
            }
            const double err = fabs(base[(size_t)t * E + e] - s);
            worst = err > worst ? err : worst;
            if (!(err <= 2e-6 * a + 1e-9) && bad++ < 3)
                printf("  T %d H %d: token %d expert %d: %.8g, double %.8g\n", T, H, t, e,
                       base[(size_t)t * E + e], s);
        }
    }
    int touched = 0;
    for (int e = 0; e < E; e++)
        touched += base[(size_t)T * E + e] != -5.0f;
    CHECK(bad == 0, "T %d H %d E %d: %d logits off the double product (worst %.3g)", T, H, E, bad,
          worst);
    CHECK(touched == 0, "T %d H %d E %d: %d logits written past T", T, H, E, touched);
    int differ = 0, runs = 0;
    for (int rt : {1, 2, 4})
        for (int eb : {1, 3, 6})
            for (int rev = 0; rev < 2; rev++) {
                if ((rt == 1 && eb == 1 && !rev) || (rev && (rt != 4 || eb != 3)))
                    continue;
                std::vector<float> lg(n_out, -5.0f);
                emu_reverse = rev;
                launch(threads, rt, eb, lg.data(), x.data(), nw.data(), R.data(), T, H, E, eps);
                emu_reverse = false;
                runs++;
                if (memcmp(lg.data(), base.data(), n_out * sizeof(float)) && differ++ < 3)
                    printf("  T %d H %d: RT %d, %d expert ranges%s: other logits\n", T, H, rt, eb,
                           rev ? ", blocks reversed" : "");
            }
    CHECK(differ == 0, "T %d H %d E %d: %d of %d launches differ from one token a block", T, H, E,
          differ, runs);
    printf("%s router T %d, H %d, E %d: worst abs err %.3g; %d launches bit-identical\n",
           bad || differ ? "FAIL" : "ok", T, H, E, worst, runs - differ);
}

static void check_plans(void)
{
    int bad = 0;
    const size_t lim = 48 * 1024 - 256;
    for (int T : {1, 2, 3, 4, 7, 32, 4096})
        for (int H : {96, 2048, 4096, 8192, 12224})
            for (int E : {8, 20, 64, 256})
                for (int n_sm : {1, 132}) {
                    const flc_router_plan p = flc_router_plan_for(T, H, E, n_sm, lim);
                    const bool ok = p.rt >= 1 && p.rt <= FLC_ROUTER_RT_MAX && p.rt <= T &&
                                    (size_t)p.rt * H * 4 <= lim &&
                                    (long)p.tblocks * p.rt >= T && (long)(p.tblocks - 1) * p.rt < T &&
                                    p.eblocks >= 1 && p.eblocks <= (E + 7) / 8;
                    if (!ok && bad++ < 3)
                        printf("  plan T %d H %d E %d: rt %d, %d x %d blocks\n", T, H, E, p.rt,
                               p.tblocks, p.eblocks);
                }
    CHECK(bad == 0, "flc_router_plan_for: %d plans outside their limits", bad);
    const flc_router_plan a = flc_router_plan_for(4096, 2048, 256, 132, lim);
    const flc_router_plan b = flc_router_plan_for(32, 2048, 256, 132, lim);
    CHECK(a.rt == 4 && a.eblocks == 1 && b.rt == 4 && b.eblocks == 32,
          "plans: a prefill rt %d, %d ranges (4, 1 expected); block 32 rt %d, %d ranges (4, 32)",
          a.rt, a.eblocks, b.rt, b.eblocks);
    CHECK(flc_router_plan_for(4, 16384, 256, 132, lim).rt == 0,
          "plans: a row larger than the shared memory is refused");
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    check_plans();
    for (int T : {1, 5, 13}) /* 64 threads a block: the logic is the same, the emulation cheaper */
        run_case(T, 96, 20, 64);
    run_case(6, 544, 20, 256); /* the launch's 256 */
    return check_summary("test_router_emu");
}
