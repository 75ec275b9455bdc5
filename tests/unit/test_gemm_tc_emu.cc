/* test_gemm_tc_emu.cc: our tensor-core GEMM for many rows (cuda/gemm_tc.cuh) run on the CPU
 * through cuda_emu.hh, mma.sync emulated by its PTX fragment layout (cuda_emu_mv.hh), against
 * Y = X W^T in double: the dense q8 form (k_gemm_q8, FL_CUDA_Q8_GEMM=1; W = scale x quant)
 * and the experts' grouped form (k_moe_gemm, FL_CUDA_MOE_GEMM=1; bf16 and q8, store and
 * SwiGLU).
 *
 * The dense q8 form. Cases: store and accumulate; row counts from 1 to 130 (a partial 64-row tile, two and three
 * tiles), n not a multiple of 64, k of one group (one partial stage) up to 17 groups (4
 * stages and a partial one), ldx past k, quants over the full range (-128 included); k split
 * in 1, 2 and 4 ranges of unequal length (the last block of a tile sums the partials).
 * Checked: each output within float rounding of the double sum; y's rows past m, and its
 * columns past n up to ldy, untouched; every ticket back at zero after each product; the same
 * bits with the blocks run in the reverse order (another block takes the last ticket); with
 * the same split count, a row's result the same bits whatever the row count and wherever the
 * row sits in a tile (x shifted by 5 rows); flc_gq_plan_for's choices within their limits.
 *
 * The experts' form: run_moe below. */
#include "check.h"
#include "cuda_emu.hh"

#include "cuda_emu_mv.hh"
#include "gemm_tc.cuh"

FL_CUDA_EMU_DEFINE

/* the weights, x and the double reference of one (n, k) */
struct problem {
    int n, k, ldx, M; /* M: rows of x (the largest m) */
    std::vector<int8_t> wq;
    std::vector<uint16_t> wd;
    std::vector<flc_bf16> x;
    std::vector<double> ref, mag; /* (M, n): sum and sum of |products| */
};

static problem make(int n, int k, int ldx, int M)
{
    problem p;
    p.n = n, p.k = k, p.ldx = ldx, p.M = M;
    p.wq.resize((size_t)n * k);
    p.wd.resize((size_t)n * (k / 32));
    p.x.resize((size_t)M * ldx);
    for (size_t i = 0; i < p.wq.size(); i++)
        p.wq[i] = i % 89 == 0 ? (int8_t)-128 : (int8_t)(int)floorf((rnd() + 1.0f) * 127.99f - 127.0f);
    for (auto &v : p.wd)
        v = f2h((rnd() + 1.5f) / 256.0f);
    for (auto &v : p.x)
        v = __float2bfloat16_rn(rnd());
    p.ref.resize((size_t)M * n);
    p.mag.resize((size_t)M * n);
    for (int r = 0; r < M; r++)
        for (int j = 0; j < n; j++) {
            double s = 0, a = 0;
            for (int c = 0; c < k; c++) {
                const double w = (double)flc_h2f(p.wd[(size_t)j * (k / 32) + c / 32]) *
                                 p.wq[(size_t)j * k + c];
                const double v = w * bf(p.x[(size_t)r * ldx + c]);
                s += v;
                a += fabs(v);
            }
            p.ref[(size_t)r * n + j] = s;
            p.mag[(size_t)r * n + j] = a;
        }
    return p;
}

/* one product through the kernel with splits S (groups per split as flc_gq_plan_for makes
 * them); x from row x0 of the problem's x. Returns false (and says why) when a ticket is
 * left non-zero. */
static bool launch(int mode, float *y, int ldy, const problem &p, int x0, int m, int S,
                   std::vector<float> &part, std::vector<int> &ticket)
{
    const int nwin = p.k / 32, gps = (nwin + S - 1) / S, splits = (nwin + gps - 1) / gps;
    const int tn = (p.n + FLC_GQ_BN - 1) / FLC_GQ_BN, tm = (m + FLC_GQ_BM - 1) / FLC_GQ_BM;
    part.assign((size_t)splits * tn * tm * FLC_GQ_TILE, NAN);
    ticket.assign((size_t)tn * tm, 0);
    const flc_bf16 *x = p.x.data() + (size_t)x0 * p.ldx;
    dim3 grid((unsigned)tn, (unsigned)tm, (unsigned)splits);
    if (mode == FLC_MM_ACC)
        emu_launch(grid, FLC_GQ_THREADS, [&] {
            k_gemm_q8<FLC_MM_ACC>(y, ldy, x, p.ldx, m, p.wq.data(), p.wd.data(), p.n, p.k, gps,
                                  part.data(), ticket.data());
        });
    else
        emu_launch(grid, FLC_GQ_THREADS, [&] {
            k_gemm_q8<FLC_MM_STORE>(y, ldy, x, p.ldx, m, p.wq.data(), p.wd.data(), p.n, p.k, gps,
                                    part.data(), ticket.data());
        });
    for (int v : ticket)
        if (v != 0)
            return false;
    return true;
}

/* Every m of ms (x from row 0) with S splits, then checks; returns row 0..M-1's outputs of the
 * largest m for the invariance checks */
static std::vector<float> run(const char *name, int mode, const problem &p,
                              const std::vector<int> &ms, int S)
{
    const int ldy = p.n + 3, M = p.M;
    std::vector<float> y0((size_t)(M + 1) * ldy), first;
    for (auto &v : y0)
        v = rnd();
    std::vector<float> part;
    std::vector<int> ticket;
    for (int m : ms) {
        std::vector<float> y = y0;
        CHECK(launch(mode, y.data(), ldy, p, 0, m, S, part, ticket),
              "%s, m %d, S %d: a ticket is not back at zero", name, m, S);
        int bad = 0, touched = 0, variant = 0;
        double worst = 0;
        for (int r = 0; r <= M; r++)
            for (int j = 0; j < ldy; j++) {
                const size_t o = (size_t)r * ldy + j;
                if (r >= m || j >= p.n) {
                    touched += memcmp(&y[o], &y0[o], 4) != 0;
                    continue;
                }
                const double want =
                    p.ref[(size_t)r * p.n + j] + (mode == FLC_MM_ACC ? y0[o] : 0.0);
                const double tol = 1e-5 * (p.mag[(size_t)r * p.n + j] + fabs(y0[o])) + 1e-6;
                const double err = fabs(y[o] - want);
                worst = err > worst ? err : worst;
                if (!(err <= tol) && bad++ < 3)
                    printf("  %s m %d S %d: row %d col %d: %.7g, reference %.7g\n", name, m, S, r,
                           j, y[o], want);
                if (!first.empty()) /* the same bits as the same row at the first m */
                    variant += memcmp(&y[o], &first[o], 4) != 0;
            }
        CHECK(bad == 0, "%s, m %d, S %d: %d outputs off the reference (worst abs err %.3g)", name,
              m, S, bad, worst);
        CHECK(touched == 0, "%s, m %d, S %d: %d outputs outside the rows and columns written",
              name, m, S, touched);
        CHECK(variant == 0, "%s, m %d, S %d: %d outputs differ from the same rows at m %d", name,
              m, S, variant, ms[0]);
        if (first.empty())
            first = y;
        if (m == ms[0] || m == ms.back()) { /* the blocks in the reverse order: the same bits */
            std::vector<float> y2 = y0;
            emu_reverse = true;
            CHECK(launch(mode, y2.data(), ldy, p, 0, m, S, part, ticket),
                  "%s, m %d, S %d (reversed): a ticket is not back at zero", name, m, S);
            emu_reverse = false;
            CHECK(y2 == y, "%s, m %d, S %d: the blocks in the reverse order give other outputs",
                  name, m, S);
        }
        printf("%s %s, m %d, S %d: n %d, k %d, worst abs err %.3g\n", bad ? "FAIL" : "ok", name,
               m, S, p.n, p.k, worst);
    }
    return first;
}

/* x shifted by 5 rows: row r of the shifted product is row r + 5 of the plain one, in other
 * lanes, warps and tiles; the same bits expected */
static void run_shift(const char *name, const problem &p, int m, int S,
                      const std::vector<float> &plain)
{
    const int ldy = p.n + 3;
    std::vector<float> y((size_t)(p.M + 1) * ldy, 0.f), part;
    std::vector<int> ticket;
    CHECK(launch(FLC_MM_STORE, y.data(), ldy, p, 5, m, S, part, ticket),
          "%s shifted: a ticket is not back at zero", name);
    int variant = 0;
    for (int r = 0; r < m; r++)
        for (int j = 0; j < p.n; j++)
            variant += memcmp(&y[(size_t)r * ldy + j], &plain[(size_t)(r + 5) * ldy + j], 4) != 0;
    CHECK(variant == 0, "%s: %d outputs differ when the rows sit 5 rows earlier", name, variant);
    printf("%s %s: rows shifted by 5, m %d, S %d\n", variant ? "FAIL" : "ok", name, m, S);
}

/* k_moe_gemm: experts of 0, 3, 64, 70 and 1 rows of x grouped by expert (partial, whole and
 * two 64-row tiles), 2 spare rows no expert owns; each row against its own expert's
 * product (bf16 or q8; store, or SwiGLU with gate rows then up rows), spare rows untouched,
 * both block orders the same bits; with q8 and store, each expert's rows the same bits as
 * k_gemm_q8 on those rows alone (one split). */
static void run_moe(const char *name, int mode, bool q8, int n, int k)
{
    const int rows_of[] = {0, 3, 64, 70, 1}, E = 5, spare = 2, ldx = k + 8;
    const int nw = mode == FLC_MM_SWIGLU ? 2 * n : n, ldy = n + 5;
    const emu_experts ex(rows_of, E, spare, nw, k, ldx, q8);
    const int A = ex.A;
    const std::vector<int32_t> &eoff = ex.eoff;
    const std::vector<flc_bf16> &x = ex.x;
    const std::vector<std::vector<flc_bf16>> &w = ex.w;
    const std::vector<std::vector<int8_t>> &wq = ex.wq;
    const std::vector<std::vector<uint16_t>> &wd = ex.wd;
    const std::vector<flc_emat> &mats = ex.mats;
    auto wv = [&](int e, int j, int c) -> double {
        return q8 ? (double)flc_h2f(wd[e][(size_t)j * (k / 32) + c / 32]) * wq[e][(size_t)j * k + c]
                  : (double)bf(w[e][(size_t)j * k + c]);
    };
    const int tn = mode == FLC_MM_SWIGLU ? (n + 31) / 32 : (n + 63) / 64;
    auto launch_moe = [&](float *y, flc_bf16 *yh) {
        if (mode == FLC_MM_SWIGLU && q8)
            emu_launch(dim3(tn, E), FLC_GQ_THREADS, [&] {
                k_moe_gemm<FLC_MM_SWIGLU, true>(y, yh, ldy, x.data(), ldx, mats.data(), eoff.data(), n, k);
            });
        else if (mode == FLC_MM_SWIGLU)
            emu_launch(dim3(tn, E), FLC_GQ_THREADS, [&] {
                k_moe_gemm<FLC_MM_SWIGLU, false>(y, yh, ldy, x.data(), ldx, mats.data(), eoff.data(), n, k);
            });
        else if (q8)
            emu_launch(dim3(tn, E), FLC_GQ_THREADS, [&] {
                k_moe_gemm<FLC_MM_STORE, true>(y, yh, ldy, x.data(), ldx, mats.data(), eoff.data(), n, k);
            });
        else
            emu_launch(dim3(tn, E), FLC_GQ_THREADS, [&] {
                k_moe_gemm<FLC_MM_STORE, false>(y, yh, ldy, x.data(), ldx, mats.data(), eoff.data(), n, k);
            });
    };
    std::vector<float> y0((size_t)(A + spare) * ldy);
    for (auto &v : y0)
        v = rnd();
    const flc_bf16 sent = __float2bfloat16_rn(-77.0f);
    std::vector<float> y = y0;
    std::vector<flc_bf16> yh((size_t)(A + spare) * ldy, sent);
    launch_moe(y.data(), yh.data());
    int bad = 0, touched = 0;
    double worst = 0;
    for (int e = 0; e < E; e++)
        for (int a = eoff[e]; a < eoff[e + 1]; a++)
            for (int j = 0; j < n; j++) {
                double s[2] = {0, 0}, mg[2] = {0, 0};
                for (int q = 0; q < (mode == FLC_MM_SWIGLU ? 2 : 1); q++)
                    for (int c = 0; c < k; c++) {
                        const double p = wv(e, q * n + j, c) * bf(x[(size_t)a * ldx + c]);
                        s[q] += p;
                        mg[q] += fabs(p);
                    }
                double want, got, tol;
                if (mode == FLC_MM_SWIGLU) {
                    want = s[0] / (1.0 + exp(-s[0])) * s[1];
                    got = bf(yh[(size_t)a * ldy + j]);
                    tol = fabs(want) / 128.0 + 1e-5 * (mg[0] + mg[1]) * (1.0 + fabs(s[1])) + 1e-6;
                } else {
                    want = s[0];
                    got = y[(size_t)a * ldy + j];
                    tol = 1e-5 * mg[0] + 1e-6;
                }
                const double err = fabs(got - want);
                worst = err > worst ? err : worst;
                if (!(err <= tol) && bad++ < 3)
                    printf("  %s: expert %d row %d col %d: %.7g, reference %.7g\n", name, e, a, j,
                           got, want);
            }
    for (size_t o = 0; o < y.size(); o++) { /* spare rows, columns past n */
        const int a = (int)(o / ldy), j = (int)(o % ldy);
        if (a < A && j < n)
            continue;
        touched += mode == FLC_MM_SWIGLU ? memcmp(&yh[o], &sent, sizeof sent) != 0
                                         : memcmp(&y[o], &y0[o], 4) != 0;
    }
    CHECK(bad == 0, "%s: %d outputs off the reference (worst abs err %.3g)", name, bad, worst);
    CHECK(touched == 0, "%s: %d outputs outside the experts' rows and n columns", name, touched);
    std::vector<float> y2 = y0;
    std::vector<flc_bf16> yh2((size_t)(A + spare) * ldy, sent);
    emu_reverse = true;
    launch_moe(y2.data(), yh2.data());
    emu_reverse = false;
    CHECK(y2 == y && !memcmp(yh2.data(), yh.data(), yh.size() * sizeof sent),
          "%s: the blocks in the reverse order give other outputs", name);
    if (q8 && mode == FLC_MM_STORE) { /* the dense kernel on each expert's rows alone */
        int differ = 0;
        for (int e = 0; e < E; e++) {
            if (rows_of[e] == 0)
                continue;
            const int me = rows_of[e];
            std::vector<float> yd((size_t)me * ldy, 0.f), part;
            std::vector<int> ticket(1, 0);
            const dim3 grid((unsigned)((n + 63) / 64), (unsigned)((me + 63) / 64), 1);
            const flc_bf16 *xe = x.data() + (size_t)eoff[e] * ldx;
            emu_launch(grid, FLC_GQ_THREADS, [&] {
                k_gemm_q8<FLC_MM_STORE>(yd.data(), ldy, xe, ldx, me, wq[e].data(), wd[e].data(), n,
                                        k, k / 32, nullptr, nullptr);
            });
            for (int r = 0; r < me; r++)
                for (int j = 0; j < n; j++)
                    differ += memcmp(&yd[(size_t)r * ldy + j], &y[(size_t)(eoff[e] + r) * ldy + j], 4) != 0;
        }
        CHECK(differ == 0, "%s: %d outputs differ from the dense q8 GEMM on the expert's rows", name,
              differ);
    }
    printf("%s %s: n %d, k %d, %d rows in %d experts, worst abs err %.3g\n",
           bad ? "FAIL" : "ok", name, n, k, A, E, worst);
}

static void check_plans(void)
{
    int bad = 0;
    for (int n_sm : {1, 8, 66, 132})
        for (int m : {1, 33, 64, 65, 256, 512, 4096})
            for (int n : {64, 1000, 2048, 9728, 151936})
                for (int k : {32, 512, 2048, 2080, 12288}) {
                    const flc_gq_plan p = flc_gq_plan_for(m, n, k, n_sm);
                    const long tiles = (long)p.tiles_n * p.tiles_m;
                    const int nwin = k / 32;
                    bool ok = p.tiles_n * FLC_GQ_BN >= n && p.tiles_m * FLC_GQ_BM >= m &&
                              p.splits >= 1 && p.splits <= FLC_GQ_SPLITS_MAX &&
                              (long)p.splits * p.gps >= nwin &&
                              (long)(p.splits - 1) * p.gps < nwin; /* no empty split */
                    if (p.splits > 1)
                        ok = ok && tiles * p.splits <= 2L * n_sm && tiles <= 2L * n_sm &&
                             p.gps >= FLC_GQ_G;
                    if (p.splits == 1)
                        ok = ok && p.gps == nwin;
                    if (!ok && bad++ < 3)
                        printf("  plan m %d n %d k %d sms %d: tiles %d x %d, splits %d, gps %d\n",
                               m, n, k, n_sm, p.tiles_n, p.tiles_m, p.splits, p.gps);
                }
    CHECK(bad == 0, "flc_gq_plan_for: %d plans outside their limits", bad);
    /* what the GPU would run: 2048 x 2048 at 64 rows on 132 SMs splits; 512 rows does not */
    const flc_gq_plan a = flc_gq_plan_for(64, 2048, 2048, 132), b = flc_gq_plan_for(512, 2048, 2048, 132);
    CHECK(a.splits == 8 && b.splits == 1, "plans: 64 rows %d splits (8 expected), 512 rows %d (1)",
          a.splits, b.splits);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    check_plans();
    {
        const problem p = make(130, 544, 552, 135); /* 17 groups: 4 stages and a partial one */
        run("store, n 130, k 544", FLC_MM_STORE, p, {130}, 1);
        run("store, n 130, k 544", FLC_MM_STORE, p, {65}, 4); /* 5, 5, 5 and 2 groups */
    }
    {
        const problem p = make(70, 288, 296, 105);
        const std::vector<float> s1 = run("store, n 70, k 288", FLC_MM_STORE, p, {100, 1, 65}, 1);
        run_shift("store, n 70, k 288", p, 95, 1, s1);
        const std::vector<float> s2 = run("store, n 70, k 288", FLC_MM_STORE, p, {100, 64}, 2);
        run_shift("store, n 70, k 288, split", p, 95, 2, s2);
        run("accumulate, n 70, k 288", FLC_MM_ACC, p, {100}, 2);
    }
    {
        const problem p = make(64, 160, 168, 64);
        run("accumulate, n 64, k 160", FLC_MM_ACC, p, {64, 3}, 1);
    }
    {
        const problem p = make(17, 32, 32, 70);
        run("store, n 17, k 32", FLC_MM_STORE, p, {70, 2}, 1);
    }
    run_moe("experts, store, bf16", FLC_MM_STORE, false, 70, 160);
    run_moe("experts, store, q8", FLC_MM_STORE, true, 70, 160);
    run_moe("experts, SwiGLU, bf16", FLC_MM_SWIGLU, false, 40, 160);
    run_moe("experts, SwiGLU, q8", FLC_MM_SWIGLU, true, 40, 160);
    return check_summary("test_gemm_tc_emu");
}
