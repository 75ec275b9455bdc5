/* bandwidth.c: the machine's read bandwidth as the CPU backend's threads see it (cpu.h). */
#include "cpu.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

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

const char *fl_cpu_qkernels_name(void)
{
    fl_kernels kk;
    fl_kernels_init(&kk, getenv("FL_SIMD"));
    return kk.qname;
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

struct fl_bw_probe {
    fl_pool *pool;
    fl_bw_job job;
    void *map; /* the buffer's mapping */
    size_t mapped;
};

int fl_bw_probe_create(fl_bw_probe **out, int n_threads, size_t bytes, fl_err *e)
{
    *out = NULL;
    if (bytes < ((size_t)64 << 20))
        return fl_err_set(e, FL_EINVAL, "bandwidth: a probe of %zu bytes (need at least 64 MiB)",
                          bytes);
    fl_bw_probe *p = calloc(1, sizeof *p);
    if (!p)
        return fl_err_set(e, FL_ENOMEM, "bandwidth: out of memory");
    int rc = fl_pool_create(&p->pool, n_threads, e);
    if (rc) {
        free(p);
        return rc;
    }
    /* in 2 MB pages where the kernel gives them, as the CPU backend holds its weights and KV
       pool, so that the probe reads memory the way a step reads them */
    size_t n = bytes / sizeof(float), huge = (size_t)2 << 20;
    p->mapped = n * sizeof(float) + huge;
    p->map = mmap(NULL, p->mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p->map == MAP_FAILED) {
        p->map = NULL;
        fl_bw_probe_destroy(p);
        return fl_err_set(e, FL_ENOMEM, "bandwidth: cannot map %zu MiB to read", bytes >> 20);
    }
#ifdef MADV_HUGEPAGE
    madvise(p->map, p->mapped, MADV_HUGEPAGE);
#endif
    float *buf = (float *)(((uintptr_t)p->map + huge - 1) & ~(uintptr_t)(huge - 1));
    for (size_t i = 0; i < n; i++)
        buf[i] = (float)(i & 1023);
    p->job.buf = buf;
    p->job.n = n;
    *out = p;
    return 0;
}

double fl_bw_probe_read(fl_bw_probe *p)
{
    double t0 = fl_now();
    fl_pool_run(p->pool, fl_bw_run, &p->job);
    return (double)p->job.n * sizeof(float) / (fl_now() - t0) / 1e9;
}

void fl_bw_probe_destroy(fl_bw_probe *p)
{
    if (!p)
        return;
    if (p->map)
        munmap(p->map, p->mapped);
    fl_pool_destroy(p->pool);
    free(p);
}

int fl_cpu_read_bandwidth(int n_threads, double *gbs, fl_err *e)
{
    *gbs = 0;
    fl_bw_probe *p;
    int rc = fl_bw_probe_create(&p, n_threads, (size_t)1 << 30, e);
    if (rc)
        return rc;
    double best = 0;
    for (int r = 0; r < 4; r++) {
        double g = fl_bw_probe_read(p);
        best = g > best ? g : best;
    }
    fl_bw_probe_destroy(p);
    *gbs = best;
    return 0;
}
