/* test_moe_assign_emu.cc: a mixture-of-experts layer's assignments in expert order
 * (cuda/moe_assign.cuh) run on the CPU through cuda_emu.hh, against a stable counting sort
 * written here: eoff, atok and apos exactly, including eoff[E + 1].
 *
 * Cases: A from 0 to 700 (chunks of one assignment, of many, a last chunk short or empty),
 * E of 1, 5, 20 and 256 (a chunk count of the block's threads and of fewer), top-k 1, 2 and
 * 8, blocks of 64 threads and of 1,024 (the launch's), ids skewed to a few experts (long runs
 * of one expert in a chunk, the shared counter incremented many times), ids outside [0, E)
 * (placed nowhere, apos 0, nothing written out of bounds). flc_assign_chunks within its
 * limits. */
#include <stdint.h>

#include <vector>

#include "check.h"
#include "cuda_emu.hh"
#include "cuda_emu_mv.hh"

#include "moe_assign.cuh"

FL_CUDA_EMU_DEFINE

static void run_case(int A, int K, int E, int threads, int skew, bool bad_ids)
{
    std::vector<int32_t> rid((size_t)A);
    for (int a = 0; a < A; a++) {
        rid[a] = skew ? (irnd(4) ? irnd(skew < E ? skew : E) : irnd(E)) : irnd(E);
        if (bad_ids && a % 37 == 5)
            rid[a] = a % 2 ? -1 - irnd(3) : E + irnd(3);
    }
    /* the reference: a stable counting sort */
    std::vector<int32_t> r_eoff((size_t)E + 2, 0), r_atok((size_t)A, -7), r_apos((size_t)A, -7);
    for (int a = 0; a < A; a++)
        if (rid[a] >= 0 && rid[a] < E)
            r_eoff[rid[a] + 1]++;
    for (int e = 0; e < E; e++)
        r_eoff[e + 1] += r_eoff[e];
    r_eoff[E + 1] = r_eoff[E];
    {
        std::vector<int32_t> at(r_eoff.begin(), r_eoff.begin() + E);
        for (int a = 0; a < A; a++) {
            if (rid[a] < 0 || rid[a] >= E) {
                r_apos[a] = 0;
                continue;
            }
            const int p = at[rid[a]]++;
            r_atok[p] = a / K;
            r_apos[a] = p;
        }
    }
    /* the device's, with a sentinel past each array */
    const int C = flc_assign_chunks(E, threads);
    std::vector<int32_t> sm(flc_assign_smem_ints(E, C), 12345);
    std::vector<int32_t> eoff((size_t)E + 3, -9), atok((size_t)A + 1, -7), apos((size_t)A + 1, -7);
    emu_launch(dim3(1), dim3((unsigned)threads), [&] {
        flc_moe_assign_block(sm.data(), eoff.data(), atok.data(), apos.data(), rid.data(), A, K,
                             E, C);
    });
    int bad = 0;
    for (int e = 0; e <= E + 1; e++)
        if (eoff[e] != r_eoff[e] && bad++ < 3)
            printf("  A %d E %d: eoff[%d] %d, want %d\n", A, E, e, eoff[e], r_eoff[e]);
    for (int p = 0; p < A; p++)
        if (atok[p] != r_atok[p] && bad++ < 6)
            printf("  A %d E %d: atok[%d] %d, want %d\n", A, E, p, atok[p], r_atok[p]);
    for (int a = 0; a < A; a++)
        if (apos[a] != r_apos[a] && bad++ < 9)
            printf("  A %d E %d: apos[%d] %d, want %d\n", A, E, a, apos[a], r_apos[a]);
    const bool sentinels = eoff[E + 2] == -9 && atok[A] == -7 && apos[A] == -7;
    CHECK(bad == 0, "A %d K %d E %d, %d threads (%d chunks)%s%s: %d values differ from the stable "
                    "counting sort", A, K, E, threads, C, skew ? ", skewed" : "",
          bad_ids ? ", bad ids" : "", bad);
    CHECK(sentinels, "A %d E %d: written past an array", A, E);
    printf("%s assign A %d, K %d, E %d, %d threads, %d chunks%s%s\n",
           bad || !sentinels ? "FAIL" : "ok", A, K, E, threads, C, skew ? ", skewed" : "",
           bad_ids ? ", bad ids" : "");
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* the chunk count: a power of two, within the shared counts and the threads */
    int badc = 0;
    for (int E : {1, 3, 5, 20, 64, 128, 256, 257, 1000, 1024})
        for (int nt : {32, 64, 1024}) {
            const int C = flc_assign_chunks(E, nt);
            badc += C < 1 || (C & (C - 1)) || C > nt || (long)C * E > FLC_ASSIGN_COUNTS ||
                    (2 * C <= nt && (long)2 * C * E <= FLC_ASSIGN_COUNTS) ||
                    flc_assign_smem_ints(E, C) * 4 > 48 * 1024;
        }
    CHECK(badc == 0, "flc_assign_chunks: %d counts not the largest power of two in the limits",
          badc);
    CHECK(flc_assign_chunks(256, 1024) == 32 && flc_assign_chunks(128, 1024) == 64,
          "LLaDA2.0-mini's 256 experts: %d chunks (32), SDAR-30B's 128: %d (64)",
          flc_assign_chunks(256, 1024), flc_assign_chunks(128, 1024));
    run_case(0, 8, 20, 64, 0, false);
    run_case(1, 1, 5, 64, 0, false);
    run_case(7, 1, 1, 64, 0, false);     /* one expert, 64 chunks: most of them empty */
    run_case(100, 2, 5, 64, 0, false);
    run_case(257, 1, 20, 64, 0, false);
    run_case(700, 8, 20, 64, 3, false);  /* skewed: runs of one expert */
    run_case(640, 8, 256, 64, 0, false); /* 32 chunks of 20 */
    run_case(333, 8, 20, 64, 0, true);
    run_case(700, 8, 256, 1024, 5, true); /* the launch's block */
    return check_summary("test_moe_assign_emu");
}
