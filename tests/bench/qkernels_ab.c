/* qkernels_ab.c: two builds of engine/cpu/quant.c side by side, on the same weights, in one
 * process (built and run by qkernels_ab.sh, which says how). The weights stream from DRAM as
 * in a forward: a Qwen3-0.6B-shaped stack of 28 layers (q|k|v, o, gate|up, down), or the
 * head, 2 threads each taking half of every matrix's tiles between two barriers. Builds A
 * and B take turns pass by pass (A B B A ...), so this VM's swings in bandwidth, which move a
 * single run by 2x within minutes, fall on both alike, and the ratio B/A is what to read.
 * A third variant, R, only reads the same bytes (quants and scales, in the same order, with
 * the kernels' prefetch distances) without any arithmetic: a kernel at R's time is bound by
 * reading its weights, and no change to its arithmetic can make it faster. The passes go
 * A B R R B A ..., and the threads meet at a spinning barrier, as the CPU backend's pool
 * does (a futex barrier, ~10-20 us on this VM, added about 1.5 ms to each pass of 112 calls
 * and hid that the q4 kernels at 4 rows run at R's time). Both builds must give the same bits
 * (checked on each shape first): the variants this is for (prefetching, tiling) never change
 * a sum. Not part of the test suite. */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "cpu/kernels.h"
#include "cpu/quant.h"

typedef void (*mmq_fn)(float *y, int ldy, const void *qx, int m, const uint8_t *wq,
                       const uint16_t *wd, int n, int k, bool acc);
void fl_quant_kernels_init_A(fl_kernels *kk, const char *want);
void fl_quant_kernels_init_B(fl_kernels *kk, const char *want);

enum { NT = 2, MAXL = 28, MAXS = 4 };
static int L = 28, NS = 4, Q8, M = 4, PASSES = 22;
static int SN[MAXS] = {4096, 1024, 6144, 1024}, SK[MAXS] = {1024, 2048, 1024, 3072};
static const char *SNAME[MAXS] = {"qkv", "o", "gate|up", "down"};
static uint8_t *wq[MAXL][MAXS];
static uint16_t *wd[MAXL][MAXS];
static void *qx[MAXS];
static float *y;
static mmq_fn fn[2];
static double tacc[3][MAXS];
static int npass[3];

/* the threads meet here: spinning, as the backend's pool waits between jobs */
static atomic_int bar_count, bar_gen;
static void barrier(void)
{
    int g = atomic_load(&bar_gen);
    if (atomic_fetch_add(&bar_count, 1) == NT - 1) {
        atomic_store(&bar_count, 0);
        atomic_fetch_add(&bar_gen, 1);
    } else
        while (atomic_load(&bar_gen) == g)
            _mm_pause();
}

/* R: the bytes a kernel call reads, read in its order (per 256 or 512 bytes of quants, the
 * group's scales), prefetched 2 KB ahead into L1 and 8 KB into L2 as the kernels do */
static volatile int sinkv;
__attribute__((target("avx512f,avx512bw"))) static void read_only(const uint8_t *q, size_t qb,
                                                                   const uint16_t *d)
{
    size_t gb = Q8 ? 512 : 256;
    const char *sc = (const char *)d;
    __m512i s = _mm512_setzero_si512();
    for (size_t o = 0, g = 0; o < qb; o += gb, g++) {
        for (size_t l = 0; l < gb; l += 64) {
            _mm_prefetch((const char *)q + o + 2048 + l, _MM_HINT_T0);
            _mm_prefetch((const char *)q + o + 8192 + l, _MM_HINT_T1);
            s = _mm512_xor_si512(s, _mm512_loadu_si512(q + o + l));
        }
        s = _mm512_xor_si512(s, _mm512_castsi256_si512(_mm256_loadu_si256(
                                    (const __m256i *)(sc + g * 2 * FL_QR))));
    }
    sinkv += _mm512_reduce_add_epi32(s);
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* as the CPU backend allocates weights: 2 MB pages asked for */
static void *big(size_t n)
{
    size_t h = (size_t)2 << 20;
    char *p = mmap(NULL, n + h, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "qkernels_ab: out of memory\n");
        exit(1);
    }
    madvise(p, n + h, MADV_HUGEPAGE);
    return (void *)(((uintptr_t)p + h - 1) & ~(h - 1));
}

static void call(int v, int l, int s, int t)
{
    int n = SN[s], k = SK[s], tiles = n / FL_QR, per = (tiles + NT - 1) / NT;
    int j0 = t * per * FL_QR, j1 = (t + 1) * per * FL_QR < n ? (t + 1) * per * FL_QR : n;
    if (j1 <= j0)
        return;
    const uint8_t *q = wq[l][s] + (size_t)j0 * k / (Q8 ? 1 : 2);
    const uint16_t *d = wd[l][s] + (size_t)j0 * (k / FL_QG);
    if (v == 2)
        read_only(q, (size_t)(j1 - j0) * k / (Q8 ? 1 : 2), d);
    else
        fn[v](y + j0, n, qx[s], M, q, d, j1 - j0, k, false);
}

static void *worker(void *arg)
{
    int t = (int)(intptr_t)arg;
    static const int order[6] = {0, 1, 2, 2, 1, 0}; /* A B R R B A */
    for (int pass = 0; pass < PASSES; pass++) {
        int v = order[pass % 6];
        for (int l = 0; l < L; l++)
            for (int s = 0; s < NS; s++) {
                barrier();
                double t0 = now();
                call(v, l, s, t);
                barrier();
                if (t == 0 && pass >= 3) /* the first three passes warm up */
                    tacc[v][s] += now() - t0;
            }
        if (t == 0 && pass >= 3)
            npass[v]++;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 3 ? argv[3] : "q4";
    if (argc > 1)
        M = atoi(argv[1]);
    if (argc > 2)
        PASSES = atoi(argv[2]);
    if (M < 1 || M > 64 || PASSES < 9 || (strcmp(mode, "q4") && strcmp(mode, "q8") && strcmp(mode, "head"))) {
        fprintf(stderr, "usage: qkernels_ab [rows 1-64] [passes >= 9] [q4|q8|head]\n");
        return 2;
    }
    Q8 = strcmp(mode, "q4") != 0;
    if (!strcmp(mode, "head")) { /* the head at q8: 155 MB, six copies */
        L = 6, NS = 1, SN[0] = 151936, SK[0] = 1024, SNAME[0] = "head";
    }
    fl_kernels ka, kb;
    fl_kernels_init(&ka, NULL);
    kb = ka;
    /* qkernels_ab.sh --a-simd / --b-simd: a build's cap (kernels.h), e.g. avx512 for VNNI
       without AMX */
    const char *ca = getenv("FL_QK_A_SIMD"), *cb = getenv("FL_QK_B_SIMD");
    fl_quant_kernels_init_A(&ka, ca ? ca : "");
    fl_quant_kernels_init_B(&kb, cb ? cb : "");
    printf("A: %s kernels; B: %s kernels\n", ka.qname, kb.qname);
    fn[0] = Q8 ? ka.mm_q8 : ka.mm_q4;
    fn[1] = Q8 ? kb.mm_q8 : kb.mm_q4;
    unsigned seed = 1;
    for (int l = 0; l < L; l++)
        for (int s = 0; s < NS; s++) {
            size_t qb = fl_qr_quant_bytes(SN[s], SK[s], !Q8), sc = fl_qr_scale_count(SN[s], SK[s]);
            wq[l][s] = big(qb);
            wd[l][s] = big(sc * 2);
            for (size_t i = 0; i < qb; i++)
                wq[l][s][i] = (uint8_t)((seed = seed * 1103515245u + 12345u) >> 16);
            for (size_t i = 0; i < sc; i++) /* f16 scales in [2^-4, 2^-3) */
                wd[l][s][i] = (uint16_t)(0x2c00 + (i * 37 % 1024));
        }
    size_t ymax = 0;
    for (int s = 0; s < NS; s++) {
        int k = SK[s];
        float *x = malloc(sizeof(float) * M * k);
        for (int i = 0; i < M * k; i++)
            x[i] = (float)((seed = seed * 1103515245u + 12345u) >> 16) / 32768.0f - 1.0f;
        qx[s] = big(fl_qx_bytes(M, k));
        ka.qx_quantize(qx[s], x, k, M, k);
        free(x);
        if ((size_t)SN[s] > ymax)
            ymax = SN[s];
    }
    y = big(sizeof(float) * M * ymax);
    float *ya = big(sizeof(float) * M * ymax), *yb = big(sizeof(float) * M * ymax);
    for (int s = 0; s < NS; s++) {
        size_t n = (size_t)M * SN[s];
        fn[0](ya, SN[s], qx[s], M, wq[0][s], wd[0][s], SN[s], SK[s], false);
        fn[1](yb, SN[s], qx[s], M, wq[0][s], wd[0][s], SN[s], SK[s], false);
        if (memcmp(ya, yb, n * sizeof(float))) {
            fprintf(stderr, "qkernels_ab: %s: A and B give different bits\n", SNAME[s]);
            return 1;
        }
    }
    pthread_t th[NT];
    for (int t = 0; t < NT; t++)
        pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
    for (int t = 0; t < NT; t++)
        pthread_join(th[t], NULL);
    double ta = 0, tb = 0, tr = 0;
    printf("%s, %d rows, %d layers, %d/%d/%d passes (A/B/R), ms per pass (all layers), same "
           "bits; R = reading the same bytes, no arithmetic\n", Q8 ? "q8" : "q4", M, L, npass[0],
           npass[1], npass[2]);
    for (int s = 0; s < NS; s++) {
        double a = tacc[0][s] / npass[0], b = tacc[1][s] / npass[1], r = tacc[2][s] / npass[2];
        printf("%-8s A %8.3f  B %8.3f  R %8.3f  B/A %.3f  A/R %.2f  B/R %.2f\n", SNAME[s],
               a * 1e3, b * 1e3, r * 1e3, b / a, a / r, b / r);
        ta += a;
        tb += b;
        tr += r;
    }
    if (NS > 1)
        printf("%-8s A %8.3f  B %8.3f  R %8.3f  B/A %.3f  A/R %.2f  B/R %.2f\n", "all",
               ta * 1e3, tb * 1e3, tr * 1e3, tb / ta, ta / tr, tb / tr);
    return 0;
}
