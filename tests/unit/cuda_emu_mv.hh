/* cuda_emu_mv.hh: what cuda/mv_tc.cuh (and cuda/gemm_tc.cuh after it) need from their
 * includer, for the CPU through cuda_emu.hh: bf16 as emu_bf16, flc_meta.h, norm.cuh, the
 * product modes, no-op programmatic launch, f16 scales, and mma.sync.m16n8k16 as cuda_emu.hh's
 * emu_mma_bf16. Plus the tests' shared helpers (rnd, irnd, bf, f2h). Include once per test, after
 * cuda_emu.hh; FL_CUDA_EMU_DEFINE still goes in the test. */
#ifndef FL_CUDA_EMU_MV_HH
#define FL_CUDA_EMU_MV_HH

typedef emu_bf16 flc_bf16;
#include "flc_meta.h"
#define FULL 0xffffffffu
#include "norm.cuh"

enum { FLC_MM_STORE = 0, FLC_MM_ACC = 1, FLC_MM_SWIGLU = 2 };
static inline void flc_pdl_trigger() {}
static inline void flc_pdl_wait() {}

/* IEEE half bits to float, every case (the kernel's scales are f16) */
static inline float flc_h2f(uint16_t h)
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

static inline void flc_mma_bf16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2])
{
    emu_mma_bf16(d, a, b);
}

static inline unsigned flc_bf16x2(float lo, float hi)
{
    return (unsigned)__float2bfloat16_rn(lo).x | (unsigned)__float2bfloat16_rn(hi).x << 16;
}
static inline void flc_prefetch_l2(const void *) {}

typedef struct flc_emat { /* cuda_kernels.cuh's */
    const flc_bf16 *w;
    const int8_t *q;
    const uint16_t *d;
} flc_emat;

#include "mv_tc.cuh"

static uint32_t g_lcg = 4242;
static inline float rnd(void) /* [-1, 1) */
{
    g_lcg = g_lcg * 1664525u + 1013904223u;
    return (float)((g_lcg >> 8) & 0xffffff) / 8388608.0f - 1.0f;
}

/* 0 .. n - 1 (xorshift) */
static uint64_t g_xs = 0x2545f4914f6cdd1dull;
static inline int irnd(int n)
{
    g_xs ^= g_xs << 13;
    g_xs ^= g_xs >> 7;
    g_xs ^= g_xs << 17;
    return (int)(g_xs % (uint64_t)n);
}

static inline float bf(flc_bf16 b) { return __bfloat162float(b); }

/* f16 bits of a positive normal float (truncated: any f16 will do as a scale) */
static inline uint16_t f2h(float v)
{
    unsigned u;
    memcpy(&u, &v, 4);
    const int e = (int)((u >> 23) & 255u) - 127 + 15;
    return (uint16_t)(((unsigned)e << 10) | ((u >> 13) & 1023u));
}


/* Experts for a grouped kernel's test: E experts of rows_of[e] rows of x each, grouped by
 * expert (eoff, with eoff[E + 1] = eoff[E] as flc_moe_assign leaves it), `spare` rows of x
 * past them that no expert owns; per expert a (nw, k) matrix both as bf16 (w) and as q8 (wq:
 * quants from -128 to 127; wd: a f16 scale per 32), mats pointing at the one asked for. */
struct emu_experts {
    int E, A;
    std::vector<int32_t> eoff;
    std::vector<flc_bf16> x;
    std::vector<std::vector<flc_bf16>> w;
    std::vector<std::vector<int8_t>> wq;
    std::vector<std::vector<uint16_t>> wd;
    std::vector<flc_emat> mats;
    emu_experts(const int *rows_of, int n_experts, int spare, int nw, int k, int ldx, bool q8)
        : E(n_experts), eoff(n_experts + 2), w(n_experts), wq(n_experts), wd(n_experts),
          mats(n_experts)
    {
        eoff[0] = 0;
        for (int e = 0; e < E; e++)
            eoff[e + 1] = eoff[e] + rows_of[e];
        eoff[E + 1] = eoff[E];
        A = eoff[E];
        x.resize((size_t)(A + spare) * ldx);
        for (auto &v : x)
            v = __float2bfloat16_rn(rnd());
        for (int e = 0; e < E; e++) {
            w[e].resize((size_t)nw * k);
            wq[e].resize((size_t)nw * k);
            wd[e].resize((size_t)nw * (k / 32));
            for (size_t i = 0; i < w[e].size(); i++) {
                w[e][i] = __float2bfloat16_rn(rnd());
                wq[e][i] = (int8_t)(int)floorf((rnd() + 1.0f) * 128.0f - 128.0f);
            }
            for (auto &v : wd[e])
                v = f2h((rnd() + 1.5f) / 256.0f);
            mats[e] = q8 ? flc_emat{nullptr, wq[e].data(), wd[e].data()}
                         : flc_emat{w[e].data(), nullptr, nullptr};
        }
    }
};

#endif
