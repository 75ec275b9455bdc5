/* test_mv_tc_emu.cc: the tensor-core streaming matmul (cuda/mv_tc.cuh, FL_CUDA_MV=tc) run on
 * the CPU through cuda_emu.hh, against Y = X W^T in double.
 *
 * mma.sync.m16n8k16 is emulated as the PTX ISA defines its fragments ("Matrix Fragments for
 * mma.m16n8k16 with floating point type"): the warp's 32 lanes' registers are gathered, the
 * 16x16 A, 16x8 B and 16x8 C rebuilt from them (lane = 4 groupID + threadID_in_group; A
 * register 0 holds row groupID, columns 2 tid, 2 tid + 1, low half first; register 1 row
 * groupID + 8; registers 2, 3 the same rows at columns + 8; B register 0 rows 2 tid, 2 tid + 1
 * of column groupID, register 1 rows + 8; C/D elements 0, 1 row groupID, columns 2 tid,
 * 2 tid + 1, elements 2, 3 row groupID + 8), and each lane gets its D elements. So the test
 * checks the kernel's fragment bookkeeping (the permuted k order, which register holds which
 * row) against the documented layout, not only its arithmetic.
 *
 * Cases: row counts 1..9, 12, 16, 17, 23, 32 (one to four row tiles) for the three modes (store, accumulate, SwiGLU with gate rows
 * then up rows), bf16 and q8 weights (k_mv_tc_q8: quants widened to bf16 in registers, each
 * group of 32 summed then scaled), n not a multiple of 16, k of 32 (fewer windows than
 * warps) up to 65 windows (several passes, a partial last one), ldx past k. Checked: each output within
 * float rounding of the double sum (bf16 rounding for SwiGLU's output), outputs past m rows or
 * n columns untouched, and a row's result the same whatever m is (bit for bit, across the
 * kernels' row-tile counts). */
#include "cuda_emu.hh"

typedef emu_bf16 flc_bf16;
#include "flc_meta.h"

enum { FLC_MM_STORE = 0, FLC_MM_ACC = 1, FLC_MM_SWIGLU = 2 };
static inline void flc_pdl_trigger() {}
static inline void flc_pdl_wait() {}

/* IEEE half bits to float, every case (the kernel's scales are f16) */
static float flc_h2f(uint16_t h)
{
    const unsigned sign = (unsigned)(h >> 15) << 31, e = (h >> 10) & 31u, f = h & 1023u;
    float v;
    if (e == 0)
        v = ldexpf((float)f, -24); /* zero, subnormal */
    else if (e == 31)
        v = f ? NAN : INFINITY;
    else
        v = ldexpf((float)(f | 1024u), (int)e - 25);
    return sign ? -v : v;
}

/* one bf16 of a 32-bit register: the low half is the lower index */
static float half_of(unsigned r, int hi)
{
    return __uint_as_float(hi ? (r & 0xffff0000u) : (r << 16));
}

static void flc_mma_bf16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2])
{
    struct frag {
        unsigned a[4], b[2];
        float c[4];
    } mine, all[32];
    memcpy(mine.a, a, sizeof mine.a);
    memcpy(mine.b, b, sizeof mine.b);
    memcpy(mine.c, d, sizeof mine.c);
    emu_warp_gather(&mine, sizeof mine, all);
    float A[16][16], B[16][8], C[16][8];
    for (int l = 0; l < 32; l++) {
        const int gid = l >> 2, tig = l & 3;
        for (int i = 0; i < 8; i++) { /* a0..a7 */
            const int row = (i & 2) ? gid + 8 : gid, col = tig * 2 + (i & 1) + (i >= 4 ? 8 : 0);
            A[row][col] = half_of(all[l].a[i >> 1], i & 1);
        }
        for (int i = 0; i < 4; i++) { /* b0..b3 */
            const int row = tig * 2 + (i & 1) + (i >= 2 ? 8 : 0);
            B[row][gid] = half_of(all[l].b[i >> 1], i & 1);
        }
        for (int i = 0; i < 4; i++) /* c0..c3 */
            C[i < 2 ? gid : gid + 8][tig * 2 + (i & 1)] = all[l].c[i];
    }
    const int lane = (int)(threadIdx.x & 31), gid = lane >> 2, tig = lane & 3;
    for (int i = 0; i < 4; i++) {
        const int row = i < 2 ? gid : gid + 8, col = tig * 2 + (i & 1);
        float v = C[row][col];
        for (int kk = 0; kk < 16; kk++)
            v = fmaf(A[row][kk], B[kk][col], v);
        d[i] = v;
    }
}

#include "mv_tc.cuh"

FL_CUDA_EMU_DEFINE

static int g_fail, g_checks;
#define CHECK(c, ...)                                                                          \
    do {                                                                                       \
        g_checks++;                                                                            \
        if (!(c)) {                                                                            \
            g_fail++;                                                                          \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                        \
            printf(__VA_ARGS__);                                                               \
            printf("\n");                                                                      \
        }                                                                                      \
    } while (0)

static uint32_t g_lcg = 4242;
static float rnd(void) /* [-1, 1) */
{
    g_lcg = g_lcg * 1664525u + 1013904223u;
    return (float)((g_lcg >> 8) & 0xffffff) / 8388608.0f - 1.0f;
}

static float bf(flc_bf16 b) { return __bfloat162float(b); }

/* as cuda_kernels.cu's flc_mv_launch: row tiles by m; wq NULL for bf16 weights */
template <int MODE, int NT>
static void launch_nt(float *y, flc_bf16 *yh, int ldy, const flc_bf16 *x, int ldx, int m,
                      const flc_bf16 *w, const int8_t *wq, const uint16_t *wd, int n, int k)
{
    dim3 grid((unsigned)((n + 15) / 16));
    if (wq)
        emu_launch(grid, 32 * FLC_MV_WARPS,
                   [&] { k_mv_tc_q8<MODE, NT>(y, yh, ldy, x, ldx, m, wq, wd, n, k); });
    else
        emu_launch(grid, 32 * FLC_MV_WARPS,
                   [&] { k_mv_tc<MODE, NT>(y, yh, ldy, x, ldx, m, w, n, k); });
}

template <int MODE>
static void launch_mode(float *y, flc_bf16 *yh, int ldy, const flc_bf16 *x, int ldx, int m,
                        const flc_bf16 *w, const int8_t *wq, const uint16_t *wd, int n, int k)
{
    if (m <= 8)
        launch_nt<MODE, 1>(y, yh, ldy, x, ldx, m, w, wq, wd, n, k);
    else if (m <= 16)
        launch_nt<MODE, 2>(y, yh, ldy, x, ldx, m, w, wq, wd, n, k);
    else
        launch_nt<MODE, 4>(y, yh, ldy, x, ldx, m, w, wq, wd, n, k);
}

static void launch(int mode, float *y, flc_bf16 *yh, int ldy, const flc_bf16 *x, int ldx, int m,
                   const flc_bf16 *w, const int8_t *wq, const uint16_t *wd, int n, int k)
{
    if (mode == FLC_MM_STORE)
        launch_mode<FLC_MM_STORE>(y, yh, ldy, x, ldx, m, w, wq, wd, n, k);
    else if (mode == FLC_MM_ACC)
        launch_mode<FLC_MM_ACC>(y, yh, ldy, x, ldx, m, w, wq, wd, n, k);
    else
        launch_mode<FLC_MM_SWIGLU>(y, yh, ldy, x, ldx, m, w, wq, wd, n, k);
}

/* f16 bits of a positive normal float (truncated: any f16 will do as a scale) */
static uint16_t f2h(float v)
{
    unsigned u;
    memcpy(&u, &v, 4);
    const int e = (int)((u >> 23) & 255u) - 127 + 15;
    return (uint16_t)(((unsigned)e << 10) | ((u >> 13) & 1023u));
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
        if (m == M || m == 1 || m == 17)
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
    printf("test_mv_tc_emu: %d checks, %d failed\n", g_checks, g_fail);
    return g_fail ? 1 : 0;
}
