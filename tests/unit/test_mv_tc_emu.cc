/* test_mv_tc_emu.cc: the tensor-core streaming matmul (cuda/mv_tc.cuh, FL_CUDA_MV=tc) run on
 * the CPU through cuda_emu.hh, against Y = X W^T in double.
 *
 * mma.sync.m16n8k16 is emulated as the PTX ISA defines its fragments (cuda_emu_mv.hh), so
 * the test checks the kernel's fragment bookkeeping (the permuted k order, which register
 * holds which row) against the documented layout, not only its arithmetic.
 *
 * Cases: row counts 1..9, 12, 16, 17, 23, 32 (one to four row tiles) for the three modes
 * (store, accumulate, SwiGLU with gate rows then up rows), bf16 and q8 weights (k_mv_tc_q8:
 * quants widened to bf16 in registers, each group of 32 summed then scaled), n not a
 * multiple of 16, k of 32 (fewer windows than warps) up to 65 windows (several passes, a
 * partial last one), ldx past k. Checked: each output within float rounding of the double
 * sum (bf16 rounding for SwiGLU's output), outputs past m rows or n columns untouched, a
 * row's result the same whatever m is (bit for bit, across the kernels' row-tile counts),
 * and the same bits with the blocks run in the reverse order. The experts' form
 * (k_moe_mv_tc): experts of 0 to 40 rows (two passes of 32, the weights kept in L2 between
 * them), each row against its expert, rows no expert owns untouched, both block orders.
 *
 * The RMSNorm fused in front (NORM, flc_norm_in): f32 residual rows of very different
 * magnitudes, normed and multiplied in one kernel, store and SwiGLU, bf16 and q8, rows taken
 * in order or gathered (a permutation with a repeated row, as the lm_head's out_rows), k of
 * 32 (seven warps with no window, which must still reach the norm's barriers) up to 2080.
 * Checked: the same bits as k_rmsnorm's block (norm.cuh, run here as its own kernel) followed
 * by the unfused kernel; k_rmsnorm's bf16 rows within bf16 rounding of the norm in double; the
 * products within the bounds that rounding allows of the double norm's product; rows past m
 * untouched; both block orders. */
#include "check.h"
#include "cuda_emu.hh"

#include "cuda_emu_mv.hh"

FL_CUDA_EMU_DEFINE


/* as cuda_kernels.cu's flc_mv_launch: row tiles by m; wq NULL for bf16 weights; nz: the
 * norm inside (NORM), else NULL */
template <int MODE, int NT, bool NORM>
static void launch_nt(float *y, flc_bf16 *yh, int ldy, const flc_bf16 *x, int ldx, int m,
                      const flc_bf16 *w, const int8_t *wq, const uint16_t *wd, int n, int k,
                      const flc_norm_in &nz)
{
    dim3 grid((unsigned)((n + 15) / 16));
    if (wq)
        emu_launch(grid, 32 * FLC_MV_WARPS,
                   [&] { k_mv_tc_q8<MODE, NT, NORM>(y, yh, ldy, x, ldx, m, wq, wd, n, k, nz); });
    else
        emu_launch(grid, 32 * FLC_MV_WARPS,
                   [&] { k_mv_tc<MODE, NT, NORM>(y, yh, ldy, x, ldx, m, w, n, k, nz); });
}

template <int MODE, bool NORM>
static void launch_mode(float *y, flc_bf16 *yh, int ldy, const flc_bf16 *x, int ldx, int m,
                        const flc_bf16 *w, const int8_t *wq, const uint16_t *wd, int n, int k,
                        const flc_norm_in &nz)
{
    if (m <= 8)
        launch_nt<MODE, 1, NORM>(y, yh, ldy, x, ldx, m, w, wq, wd, n, k, nz);
    else if (m <= 16)
        launch_nt<MODE, 2, NORM>(y, yh, ldy, x, ldx, m, w, wq, wd, n, k, nz);
    else
        launch_nt<MODE, 4, NORM>(y, yh, ldy, x, ldx, m, w, wq, wd, n, k, nz);
}

static void launch(int mode, float *y, flc_bf16 *yh, int ldy, const flc_bf16 *x, int ldx, int m,
                   const flc_bf16 *w, const int8_t *wq, const uint16_t *wd, int n, int k,
                   const flc_norm_in *nz = nullptr)
{
    const flc_norm_in none = {nullptr, nullptr, nullptr, 0.f};
    if (nz && mode == FLC_MM_STORE)
        launch_mode<FLC_MM_STORE, true>(y, yh, ldy, x, ldx, m, w, wq, wd, n, k, *nz);
    else if (nz)
        launch_mode<FLC_MM_SWIGLU, true>(y, yh, ldy, x, ldx, m, w, wq, wd, n, k, *nz);
    else if (mode == FLC_MM_STORE)
        launch_mode<FLC_MM_STORE, false>(y, yh, ldy, x, ldx, m, w, wq, wd, n, k, none);
    else if (mode == FLC_MM_ACC)
        launch_mode<FLC_MM_ACC, false>(y, yh, ldy, x, ldx, m, w, wq, wd, n, k, none);
    else
        launch_mode<FLC_MM_SWIGLU, false>(y, yh, ldy, x, ldx, m, w, wq, wd, n, k, none);
}

/* Runs the row counts of MS (the first the largest) on the same weights and x (q8: quants in
 * -128..127, a f16 scale per 32 of a row, the reference sum over groups of scale x (sum of
 * q x)) */
static const int MS[] = {32, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17, 23};
static void run_case(const char *name, int mode, int n, int k, int ldx, bool q8 = false)
{
    const int nw = mode == FLC_MM_SWIGLU ? 2 * n : n, M = 32;
    std::vector<flc_bf16> w((size_t)nw * k), x((size_t)M * ldx);
    std::vector<int8_t> wq(q8 ? (size_t)nw * k : 0);
    std::vector<uint16_t> wd(q8 ? (size_t)nw * (k / 32) : 0);
    for (size_t i = 0; i < w.size(); i++) {
        if (q8) { /* the full range, -128 included; w holds the dequantized value */
            wq[i] = (int8_t)(int)floorf((rnd() + 1.0f) * 128.0f - 128.0f);
            if (i % 97 == 0)
                wq[i] = (int8_t)-128;
        }
        w[i] = __float2bfloat16_rn(rnd());
    }
    for (size_t i = 0; i < wd.size(); i++)
        wd[i] = f2h((rnd() + 1.5f) / 256.0f);
    for (auto &v : x)
        v = __float2bfloat16_rn(rnd());
    /* the weight a reference product uses (q8: scale x quant, exact in double) */
    auto wv = [&](int j, int c) -> double {
        if (!q8)
            return bf(w[(size_t)j * k + c]);
        return (double)flc_h2f(wd[(size_t)j * (k / 32) + c / 32]) * wq[(size_t)j * k + c];
    };
    std::vector<float> y0((size_t)(M + 1) * n); /* a row past the last for the untouched check */
    for (auto &v : y0)
        v = rnd();
    /* the reference per row r and column j (and its |w||x| sum for the bound) */
    std::vector<double> ref((size_t)M * nw), mag((size_t)M * nw);
    for (int r = 0; r < M; r++)
        for (int j = 0; j < nw; j++) {
            double s = 0, a = 0;
            for (int c = 0; c < k; c++) {
                const double p = wv(j, c) * bf(x[(size_t)r * ldx + c]);
                s += p;
                a += fabs(p);
            }
            ref[(size_t)r * nw + j] = s;
            mag[(size_t)r * nw + j] = a;
        }
    std::vector<float> full; /* m = 32's outputs, for the row-count invariance */
    std::vector<flc_bf16> fullh;
    for (int m : MS) {
        std::vector<float> y = y0;
        const flc_bf16 sent = __float2bfloat16_rn(-77.0f);
        std::vector<flc_bf16> yh((size_t)(M + 1) * n, sent);
        launch(mode, y.data(), yh.data(), n, x.data(), ldx, m, q8 ? nullptr : w.data(),
               q8 ? wq.data() : nullptr, q8 ? wd.data() : nullptr, n, k);
        int bad = 0, touched = 0, variant = 0;
        double worst = 0;
        for (int r = 0; r <= M; r++)
            for (int j = 0; j < n; j++) {
                const size_t o = (size_t)r * n + j;
                if (r >= m) { /* rows past m: untouched */
                    touched += mode == FLC_MM_SWIGLU ? memcmp(&yh[o], &sent, sizeof sent) != 0
                                                     : y[o] != y0[o];
                    continue;
                }
                double want, got, tol;
                if (mode == FLC_MM_SWIGLU) {
                    const double gt = ref[(size_t)r * nw + j], up = ref[(size_t)r * nw + n + j];
                    want = gt / (1.0 + exp(-gt)) * up;
                    got = bf(yh[o]);
                    tol = fabs(want) / 128.0 + 1e-5 * (mag[(size_t)r * nw + j] +
                                                       mag[(size_t)r * nw + n + j]) + 1e-6;
                } else {
                    want = ref[(size_t)r * nw + j] + (mode == FLC_MM_ACC ? y0[o] : 0.0);
                    got = y[o];
                    tol = 1e-5 * (mag[(size_t)r * nw + j] + fabs(y0[o])) + 1e-6;
                }
                const double err = fabs(got - want);
                worst = err > worst ? err : worst;
                if (!(err <= tol) && bad++ < 3)
                    printf("  %s m %d: row %d col %d: %.7g, reference %.7g\n", name, m, r, j, got,
                           want);
                if (m < M) /* the same bits as with 32 rows */
                    variant += mode == FLC_MM_SWIGLU ? memcmp(&yh[o], &fullh[o], sizeof sent) != 0
                                                     : memcmp(&y[o], &full[o], 4) != 0;
            }
        CHECK(bad == 0, "%s, m %d: %d outputs off the reference (worst abs err %.3g)", name, m,
              bad, worst);
        CHECK(touched == 0, "%s, m %d: %d outputs past the rows written", name, m, touched);
        CHECK(variant == 0, "%s, m %d: %d outputs differ from the same rows at m 32", name, m,
              variant);
        if (m == M) {
            full = y;
            fullh = yh;
        }
        if (m == M || m == 5 || m == 17) { /* the blocks in the reverse order: the same bits */
            std::vector<float> y2 = y0;
            std::vector<flc_bf16> yh2((size_t)(M + 1) * n, sent);
            emu_reverse = true;
            launch(mode, y2.data(), yh2.data(), n, x.data(), ldx, m, q8 ? nullptr : w.data(),
                   q8 ? wq.data() : nullptr, q8 ? wd.data() : nullptr, n, k);
            emu_reverse = false;
            CHECK(y2 == y && !memcmp(yh2.data(), yh.data(), yh.size() * sizeof sent),
                  "%s, m %d: the blocks in the reverse order give other outputs", name, m);
        }
        if (m == M || m == 1 || m == 17)
            printf("%s %s, m %d: n %d, k %d, worst abs err %.3g\n", bad ? "FAIL" : "ok", name, m,
                   n, k, worst);
    }
}

/* k_moe_mv_tc: experts of 0, 3, 40 (two passes of 32, weights kept), 9, 1 and 32 rows of x
 * grouped by expert; each row against its own expert's product (q8 or bf16; store and
 * SwiGLU), and rows of x no expert owns (past the last) untouched in y. */
static void run_moe(const char *name, int mode, bool q8)
{
    const int rows_of[] = {0, 3, 40, 9, 1, 32}, E = 6, n = 24, k = 96, ldx = 104;
    const int nw = mode == FLC_MM_SWIGLU ? 2 * n : n;
    const int spare = 2;
    emu_experts ex(rows_of, E, spare, nw, k, ldx, q8);
    const int A = ex.A;
    std::vector<float> y((size_t)(A + spare) * n, 123.0f);
    const flc_bf16 sent = __float2bfloat16_rn(-77.0f);
    std::vector<flc_bf16> yh((size_t)(A + spare) * n, sent);
    dim3 grid((unsigned)((n + 15) / 16), (unsigned)E);
    std::vector<float> y_first;
    std::vector<flc_bf16> yh_first;
    for (int pass = 0; pass < 2; pass++) { /* then the blocks in the reverse order */
        emu_reverse = pass == 1;
        std::fill(y.begin(), y.end(), 123.0f);
        std::fill(yh.begin(), yh.end(), sent);
        float *yp = y.data();
        flc_bf16 *yhp = yh.data();
        const flc_bf16 *xp = ex.x.data();
        const flc_emat *mp = ex.mats.data();
        const int32_t *ep = ex.eoff.data();
        if (mode == FLC_MM_STORE && q8)
            emu_launch(grid, 32 * FLC_MV_WARPS, [&] {
                k_moe_mv_tc<FLC_MM_STORE, true>(yp, nullptr, n, xp, ldx, mp, ep, n, k);
            });
        else if (mode == FLC_MM_STORE)
            emu_launch(grid, 32 * FLC_MV_WARPS, [&] {
                k_moe_mv_tc<FLC_MM_STORE, false>(yp, nullptr, n, xp, ldx, mp, ep, n, k);
            });
        else if (q8)
            emu_launch(grid, 32 * FLC_MV_WARPS, [&] {
                k_moe_mv_tc<FLC_MM_SWIGLU, true>(nullptr, yhp, n, xp, ldx, mp, ep, n, k);
            });
        else
            emu_launch(grid, 32 * FLC_MV_WARPS, [&] {
                k_moe_mv_tc<FLC_MM_SWIGLU, false>(nullptr, yhp, n, xp, ldx, mp, ep, n, k);
            });
        int bad = 0, touched = 0;
        double worst = 0;
        for (int e = 0; e < E; e++)
            for (int a = ex.eoff[e]; a < ex.eoff[e + 1]; a++) {
                double dot[2][64], mag[2][64];
                for (int q = 0; q < (mode == FLC_MM_SWIGLU ? 2 : 1); q++)
                    for (int j = 0; j < n; j++) {
                        double sum = 0, am = 0;
                        const int row = q * n + j;
                        for (int c = 0; c < k; c++) {
                            const size_t wi = (size_t)row * k + c;
                            const double wv =
                                q8 ? (double)flc_h2f(ex.wd[e][wi / 32]) * ex.wq[e][wi]
                                   : (double)bf(ex.w[e][wi]);
                            const double p = wv * bf(ex.x[(size_t)a * ldx + c]);
                            sum += p;
                            am += fabs(p);
                        }
                        dot[q][j] = sum;
                        mag[q][j] = am;
                    }
                for (int j = 0; j < n; j++) {
                    double want, got, tol;
                    if (mode == FLC_MM_SWIGLU) {
                        want = dot[0][j] / (1.0 + exp(-dot[0][j])) * dot[1][j];
                        got = bf(yh[(size_t)a * n + j]);
                        tol = fabs(want) / 128.0 + 1e-5 * (mag[0][j] + mag[1][j]) + 1e-6;
                    } else {
                        want = dot[0][j];
                        got = y[(size_t)a * n + j];
                        tol = 1e-5 * mag[0][j] + 1e-6;
                    }
                    const double err = fabs(got - want);
                    worst = err > worst ? err : worst;
                    if (!(err <= tol) && bad++ < 3)
                        printf("  %s: expert %d row %d col %d: %.7g, reference %.7g\n", name,
                               e, a, j, got, want);
                }
            }
        for (int a = A; a < A + spare; a++)
            for (int j = 0; j < n; j++)
                touched += mode == FLC_MM_SWIGLU
                               ? memcmp(&yh[(size_t)a * n + j], &sent, sizeof sent) != 0
                               : y[(size_t)a * n + j] != 123.0f;
        CHECK(bad == 0, "%s: %d outputs off the reference (worst abs err %.3g)", name, bad, worst);
        CHECK(touched == 0, "%s: %d outputs past the experts' rows written", name, touched);
        if (pass == 0) {
            y_first = y;
            yh_first = yh;
            printf("%s %s: %d rows over %d experts, worst abs err %.3g\n", bad ? "FAIL" : "ok",
                   name, A, E, worst);
        }
    }
    emu_reverse = false;
    CHECK(y == y_first && !memcmp(yh.data(), yh_first.data(), yh.size() * sizeof sent),
          "%s: the blocks in the reverse order give other outputs", name);
}

/* k_rmsnorm (cuda_kernels.cu): one block of 256 threads per row */
static void emu_rmsnorm(flc_bf16 *out, const float *x, const float *w, const int32_t *gather,
                        int rows, int H, float eps)
{
    emu_launch(dim3((unsigned)rows), 256, [&] {
        __shared__ double sh[32];
        flc_rmsnorm_block(out, x, w, gather, H, eps, sh);
    });
}

/* The norm inside the product (NORM) against k_rmsnorm then the plain kernel (bit for bit)
 * and against the norm and product in double (within what the bf16 rounding of the normed
 * rows allows). R residual rows, of magnitudes 2^-6 .. 2^6; gathered: row r of the product
 * is residual row (7 r + 3) % R, and rows 5 and 6 are the same residual row. */
static void run_norm(const char *name, int mode, int n, int k, bool q8, bool gathered)
{
    const int nw = mode == FLC_MM_SWIGLU ? 2 * n : n, M = 32, R = 37;
    const float eps = 1e-6f;
    std::vector<float> xf((size_t)R * k), gamma(k);
    for (int r = 0; r < R; r++) {
        const float mag = ldexpf(1.0f, r % 13 - 6);
        for (int c = 0; c < k; c++)
            xf[(size_t)r * k + c] = rnd() * mag;
    }
    for (auto &v : gamma)
        v = 1.0f + 0.5f * rnd();
    std::vector<int32_t> gather(M);
    for (int r = 0; r < M; r++)
        gather[r] = (7 * r + 3) % R;
    gather[6] = gather[5];
    const int32_t *gp = gathered ? gather.data() : nullptr;
    auto src = [&](int r) { return gathered ? gather[r] : r; };
    std::vector<flc_bf16> w((size_t)nw * k);
    std::vector<int8_t> wq(q8 ? (size_t)nw * k : 0);
    std::vector<uint16_t> wd(q8 ? (size_t)nw * (k / 32) : 0);
    for (size_t i = 0; i < w.size(); i++) {
        w[i] = __float2bfloat16_rn(rnd());
        if (q8)
            wq[i] = (int8_t)(int)floorf((rnd() + 1.0f) * 128.0f - 128.0f);
    }
    for (auto &v : wd)
        v = f2h((rnd() + 1.5f) / 256.0f);
    auto wv = [&](int j, int c) -> double {
        if (!q8)
            return bf(w[(size_t)j * k + c]);
        return (double)flc_h2f(wd[(size_t)j * (k / 32) + c / 32]) * wq[(size_t)j * k + c];
    };
    /* the norm in double, and each product's value and bound: the normed inputs are bf16,
     * so each may be off by 2^-8 of itself */
    std::vector<double> xn((size_t)M * k), ref((size_t)M * nw), slack((size_t)M * nw);
    for (int r = 0; r < M; r++) {
        const float *xr = &xf[(size_t)src(r) * k];
        double ss = 0;
        for (int c = 0; c < k; c++)
            ss += (double)xr[c] * xr[c];
        const double inv = 1.0 / sqrt(ss / k + eps);
        for (int c = 0; c < k; c++)
            xn[(size_t)r * k + c] = gamma[c] * (xr[c] * inv);
        for (int j = 0; j < nw; j++) {
            double sum = 0, a = 0;
            for (int c = 0; c < k; c++) {
                const double p = wv(j, c) * xn[(size_t)r * k + c];
                sum += p;
                a += fabs(p);
            }
            ref[(size_t)r * nw + j] = sum;
            slack[(size_t)r * nw + j] = a / 256.0 + 1e-6;
        }
    }
    /* k_rmsnorm's rows, checked against the double norm */
    std::vector<flc_bf16> xb((size_t)M * k);
    emu_rmsnorm(xb.data(), xf.data(), gamma.data(), gp, M, k, eps);
    int bad_norm = 0;
    for (size_t i = 0; i < xb.size(); i++)
        bad_norm += !(fabs(bf(xb[i]) - xn[i]) <= fabs(xn[i]) / 256.0 + 1e-30);
    CHECK(bad_norm == 0, "%s: %d of k_rmsnorm's elements off the double norm", name, bad_norm);

    const flc_norm_in nz = {xf.data(), gamma.data(), gp, eps};
    const flc_bf16 sent = __float2bfloat16_rn(-77.0f);
    const int ms[] = {32, 1, 4, 5, 8, 9, 17};
    for (int m : ms) {
        std::vector<float> y((size_t)(M + 1) * n, 55.0f), y1 = y, y2 = y;
        std::vector<flc_bf16> yh((size_t)(M + 1) * n, sent), yh1 = yh, yh2 = yh;
        launch(mode, y.data(), yh.data(), n, nullptr, k, m, q8 ? nullptr : w.data(),
               q8 ? wq.data() : nullptr, q8 ? wd.data() : nullptr, n, k, &nz);
        launch(mode, y1.data(), yh1.data(), n, xb.data(), k, m, q8 ? nullptr : w.data(),
               q8 ? wq.data() : nullptr, q8 ? wd.data() : nullptr, n, k);
        CHECK(y == y1 && !memcmp(yh.data(), yh1.data(), yh.size() * sizeof sent),
              "%s, m %d: not the bits of k_rmsnorm then the product", name, m);
        int bad = 0, touched = 0;
        double worst = 0;
        for (int r = 0; r <= M; r++)
            for (int j = 0; j < n; j++) {
                const size_t o = (size_t)r * n + j;
                if (r >= m) {
                    touched += mode == FLC_MM_SWIGLU ? memcmp(&yh[o], &sent, sizeof sent) != 0
                                                     : y[o] != 55.0f;
                    continue;
                }
                double want, got, tol;
                const double gt = ref[(size_t)r * nw + j], eg = slack[(size_t)r * nw + j];
                if (mode == FLC_MM_SWIGLU) {
                    const double up = ref[(size_t)r * nw + n + j], eu = slack[(size_t)r * nw + n + j];
                    const double sg = gt / (1.0 + exp(-gt));
                    want = sg * up;
                    got = bf(yh[o]);
                    tol = 1.1 * eg * (fabs(up) + eu) + fabs(sg) * eu + fabs(want) / 128.0;
                } else {
                    want = gt;
                    got = y[o];
                    tol = eg;
                }
                const double err = fabs(got - want);
                worst = err > worst ? err : worst;
                if (!(err <= tol) && bad++ < 3)
                    printf("  %s m %d: row %d col %d: %.7g, reference %.7g (bound %.3g)\n", name,
                           m, r, j, got, want, tol);
            }
        CHECK(bad == 0, "%s, m %d: %d outputs off the double norm's product (worst %.3g)", name,
              m, bad, worst);
        CHECK(touched == 0, "%s, m %d: %d outputs past the rows written", name, m, touched);
        if (m == M || m == 5) {
            emu_reverse = true;
            launch(mode, y2.data(), yh2.data(), n, nullptr, k, m, q8 ? nullptr : w.data(),
                   q8 ? wq.data() : nullptr, q8 ? wd.data() : nullptr, n, k, &nz);
            emu_reverse = false;
            CHECK(y2 == y && !memcmp(yh2.data(), yh.data(), yh.size() * sizeof sent),
                  "%s, m %d: the blocks in the reverse order give other outputs", name, m);
        }
        if (m == M || m == 4)
            printf("%s %s, m %d: n %d, k %d, worst abs err %.3g\n", bad ? "FAIL" : "ok", name, m,
                   n, k, worst);
    }
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    run_case("store, n 40, k 544", FLC_MM_STORE, 40, 544, 552);
    run_case("accumulate, n 16, k 32", FLC_MM_ACC, 16, 32, 40);
    run_case("SwiGLU, n 24, k 2080", FLC_MM_SWIGLU, 24, 2080, 2088);
    run_case("store, n 7, k 2080", FLC_MM_STORE, 7, 2080, 2080);
    run_case("q8 store, n 40, k 544", FLC_MM_STORE, 40, 544, 552, true);
    run_case("q8 accumulate, n 16, k 2080", FLC_MM_ACC, 16, 2080, 2080, true);
    run_case("q8 SwiGLU, n 24, k 1056", FLC_MM_SWIGLU, 24, 1056, 1064, true);
    run_moe("experts, store, bf16", FLC_MM_STORE, false);
    run_moe("experts, SwiGLU, q8", FLC_MM_SWIGLU, true);
    run_moe("experts, store, q8", FLC_MM_STORE, true);
    run_norm("norm inside, store, n 40, k 544", FLC_MM_STORE, 40, 544, false, false);
    run_norm("norm inside, SwiGLU, n 24, k 2080, gathered", FLC_MM_SWIGLU, 24, 2080, false, true);
    run_norm("norm inside, store, n 16, k 32, gathered", FLC_MM_STORE, 16, 32, false, true);
    run_norm("norm inside, q8 store, n 24, k 1056, gathered", FLC_MM_STORE, 24, 1056, true, true);
    run_norm("norm inside, q8 SwiGLU, n 16, k 544", FLC_MM_SWIGLU, 16, 544, true, false);
    return check_summary("test_mv_tc_emu");
}
