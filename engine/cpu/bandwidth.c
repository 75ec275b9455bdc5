/* bandwidth.c: the machine's read bandwidth as the CPU backend's threads see it (cpu.h). */
#include "cpu.h"

#include <stdlib.h>

#include "kernels.h"
#include "threadpool.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

const char *fl_cpu_kernels_name(void)
{
    fl_kernels kk;
    fl_kernels_init(&kk, getenv("FL_SIMD"));
    return kk.name;
}

typedef struct fl_bw_job {
    const float *buf;
    size_t n;
    double sink[64];
} fl_bw_job;

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) static double fl_read_avx2(const float *p, size_t n)
{
    /* 4 streams, as the streaming matmul reads 4 weight rows at once */
    size_t q = n / 4 & ~(size_t)7;
    const float *s0 = p, *s1 = p + q, *s2 = p + 2 * q, *s3 = p + 3 * q;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < q; i += 8) {
        a0 = _mm256_add_ps(a0, _mm256_loadu_ps(s0 + i));
        a1 = _mm256_add_ps(a1, _mm256_loadu_ps(s1 + i));
        a2 = _mm256_add_ps(a2, _mm256_loadu_ps(s2 + i));
        a3 = _mm256_add_ps(a3, _mm256_loadu_ps(s3 + i));
    }
    float t[8];
    _mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}
#endif

static double fl_read_plain(const float *p, size_t n)
{
    float s[8] = {0};
    for (size_t i = 0; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            s[j] += p[i + j];
    return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

static void fl_bw_run(void *ctx, int tid, int nt)
{
    fl_bw_job *j = ctx;
    size_t lo = j->n * (size_t)tid / (size_t)nt, hi = j->n * (size_t)(tid + 1) / (size_t)nt;
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx2")) {
        j->sink[tid & 63] = fl_read_avx2(j->buf + lo, hi - lo);
        return;
    }
#endif
    j->sink[tid & 63] = fl_read_plain(j->buf + lo, hi - lo);
}

int fl_cpu_read_bandwidth(int n_threads, double *gbs, fl_err *e)
{
    size_t n = (size_t)256 << 20; /* 1 GiB of floats */
    *gbs = 0;
    fl_pool *pool;
    int rc = fl_pool_create(&pool, n_threads, e);
    if (rc)
        return rc;
    float *buf = malloc(n * sizeof *buf);
    if (!buf) {
        fl_pool_destroy(pool);
        return fl_err_set(e, FL_ENOMEM, "bandwidth: cannot allocate 1 GiB to read");
    }
    for (size_t i = 0; i < n; i++)
        buf[i] = (float)(i & 1023);
    fl_bw_job j = {buf, n, {0}};
    double best = 0;
    for (int r = 0; r < 4; r++) {
        double t0 = fl_now();
        fl_pool_run(pool, fl_bw_run, &j);
        double r_gbs = (double)n * sizeof *buf / (fl_now() - t0) / 1e9;
        best = r_gbs > best ? r_gbs : best;
    }
    free(buf);
    fl_pool_destroy(pool);
    *gbs = best;
    return 0;
}

