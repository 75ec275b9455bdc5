/* test_cuda_emu.cc: the emulated CUDA itself (tests/cuda_emu/README.md, tests/unit/cuda_emu.hh)
 * does what the tests that use it rely on, so that a backend passing there is not passing
 * because the emulation hid something.
 *
 * Kernels: warp shuffles give the partner lane's value; __syncthreads orders writes before
 * reads across warps; emu_reverse reverses the blocks' order and the threads' turns; a
 * __syncthreads that one thread skips aborts the process with a message (a child process),
 * as does a warp shuffle one lane skips; dynamic shared memory starts as 0xff bytes.
 * Runtime: a copy queued on a non-blocking stream has not happened until the host waits for
 * it, and a synchronous copy does not wait for such a stream; cudaStreamWaitEvent orders one
 * stream after another; a capture records without running, its replay runs with the
 * arguments of the capture; a synchronous call while capturing fails and invalidates the
 * capture; a copy whose kind does not match its pointers aborts; allocations past the
 * device's size fail; fresh device memory is 0xff bytes; a launch CUDA refuses returns its
 * error. cuBLAS: GemmEx against a plain triple loop, transposes and beta included, a beta of
 * 0 not reading C, and its argument checks. */
#include <signal.h>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "cuda_runtime.h"
#include "cublas_dl.cuh"

/* a check whose condition says it all (CHECK prints the condition) */
#define EXPECT(c) CHECK(c, "%s", "the emulation does not behave as tests/cuda_emu/README.md says")

static cudaStream_t g_s;

template <typename... P, typename... A>
static cudaError_t launch(void (*k)(P...), dim3 g, dim3 b, size_t smem, A... args)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = g;
    cfg.blockDim = b;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = g_s;
    return cudaLaunchKernelEx(&cfg, k, args...);
}

static void k_shuffle(int *out)
{
    const int t = (int)threadIdx.x;
    int v = t * 10;
    out[t] = __shfl_xor_sync(0xffffffffu, v, 5);
}

static void k_sync(int *out)
{
    __shared__ int sh[256];
    const int t = (int)threadIdx.x, n = (int)blockDim.x;
    sh[t] = t + 1000 * (int)blockIdx.x;
    __syncthreads();
    out[blockIdx.x * n + t] = sh[(t + 37) % n]; /* another warp's */
}

static void k_order(int *log, int *at)
{
    if (threadIdx.x == 0 || threadIdx.x == 63)
        log[(*at)++] = (int)(blockIdx.x * 100 + threadIdx.x);
}

static void k_skip(int *out)
{
    if (threadIdx.x == 3)
        return;
    __syncthreads();
    out[threadIdx.x] = 1;
}

static void k_skip_lane(int *out)
{
    int v = (int)threadIdx.x;
    if (threadIdx.x != 7)
        v = __shfl_xor_sync(0xffffffffu, v, 1);
    out[threadIdx.x] = v;
}

static void k_dyn(unsigned *out)
{
    if (threadIdx.x == 0)
        out[blockIdx.x] = reinterpret_cast<unsigned *>(emu_dyn_smem)[blockIdx.x];
}

static void k_add(float *x, float v, int n)
{
    for (int i = (int)threadIdx.x; i < n; i += (int)blockDim.x)
        x[i] += v;
}

/* runs f in a child; true when it died of SIGABRT with `want` in its stderr */
template <class F> static bool aborts_with(F f, const char *want)
{
    int fd[2];
    if (pipe(fd))
        return false;
    const pid_t p = fork();
    if (p == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        f();
        _exit(0);
    }
    close(fd[1]);
    std::string err;
    char buf[512];
    for (ssize_t n; (n = read(fd[0], buf, sizeof buf)) > 0;)
        err.append(buf, (size_t)n);
    close(fd[0]);
    int st = 0;
    waitpid(p, &st, 0);
    const bool ok =
        WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && err.find(want) != std::string::npos;
    if (!ok)
        fprintf(stderr, "  child: status %d, stderr: %s\n", st, err.c_str());
    return ok;
}

static void kernels(void)
{
    int *d;
    EXPECT(cudaMalloc(&d, 4096 * sizeof(int)) == cudaSuccess);
    EXPECT(launch(k_shuffle, dim3(1), dim3(64), 0, d) == cudaSuccess);
    EXPECT(cudaStreamSynchronize(g_s) == cudaSuccess);
    int bad = 0;
    for (int t = 0; t < 64; t++)
        bad += d[t] != ((t ^ 5) * 10);
    CHECK(bad == 0, "%d lanes got another lane's value than their xor-5 partner's", bad);

    EXPECT(launch(k_sync, dim3(3), dim3(256), 0, d) == cudaSuccess);
    cudaStreamSynchronize(g_s);
    bad = 0;
    for (int b = 0; b < 3; b++)
        for (int t = 0; t < 256; t++)
            bad += d[b * 256 + t] != (t + 37) % 256 + 1000 * b;
    CHECK(bad == 0, "%d threads read shared memory before the barrier ordered it", bad);

    for (int rev = 0; rev < 2; rev++) {
        emu_reverse = rev;
        int *at = d + 100;
        *at = 0;
        EXPECT(launch(k_order, dim3(2), dim3(64), 0, d, at) == cudaSuccess);
        cudaStreamSynchronize(g_s);
        const int want[2][4] = {{0, 63, 100, 163}, {163, 100, 63, 0}};
        CHECK(*at == 4 && !memcmp(d, want[rev], sizeof want[rev]),
              "emu_reverse %d: blocks and turns ran as %d %d %d %d", rev, d[0], d[1], d[2], d[3]);
    }
    emu_reverse = false;

    CHECK(aborts_with(
              [&] {
                  launch(k_skip, dim3(1), dim3(64), 0, d);
                  cudaStreamSynchronize(g_s);
              },
              "__syncthreads not reached by every thread"),
          "a __syncthreads one thread skips does not abort");
    CHECK(aborts_with(
              [&] {
                  launch(k_skip_lane, dim3(1), dim3(32), 0, d);
                  cudaStreamSynchronize(g_s);
              },
              "a warp shuffle not reached by every thread"),
          "a shuffle one lane skips does not abort");

    unsigned *u = (unsigned *)d;
    EXPECT(launch(k_dyn, dim3(4), dim3(32), 64, u) == cudaSuccess);
    cudaStreamSynchronize(g_s);
    CHECK(u[0] == 0xffffffffu && u[3] == 0xffffffffu, "dynamic shared memory starts as %08x", u[0]);
    EXPECT(launch(k_dyn, dim3(1), dim3(32), 49 * 1024, u) == cudaErrorInvalidConfiguration);
    EXPECT(cudaGetLastError() == cudaErrorInvalidConfiguration);
    EXPECT(cudaGetLastError() == cudaSuccess);
    EXPECT(launch(k_dyn, dim3(0), dim3(32), 0, u) == cudaErrorInvalidConfiguration);
    EXPECT(launch(k_dyn, dim3(1), dim3(2048), 0, u) == cudaErrorInvalidConfiguration);
    (void)cudaGetLastError();
    cudaFree(d);
}

static void streams(void)
{
    float *dv, *h;
    EXPECT(cudaMalloc(&dv, 64 * sizeof(float)) == cudaSuccess);
    EXPECT(cudaMallocHost(&h, 64 * sizeof(float)) == cudaSuccess);
    unsigned raw;
    memcpy(&raw, dv, 4);
    CHECK(raw == 0xffffffffu, "fresh device memory is %08x, not 0xff bytes", raw);
    for (int i = 0; i < 64; i++)
        h[i] = (float)i;
    EXPECT(cudaMemcpyAsync(dv, h, 64 * sizeof(float), cudaMemcpyHostToDevice, g_s) == cudaSuccess);
    for (int i = 0; i < 64; i++)
        h[i] = -1.0f; /* rewriting the staging buffer before the copy ran */
    float back[64];
    EXPECT(cudaMemcpy(back, dv, sizeof back, cudaMemcpyDeviceToHost) == cudaSuccess);
    memcpy(&raw, back, 4);
    CHECK(raw == 0xffffffffu, "a synchronous copy waited for a non-blocking stream");
    EXPECT(cudaStreamSynchronize(g_s) == cudaSuccess);
    EXPECT(cudaMemcpy(back, dv, sizeof back, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(back[5] == -1.0f, "the queued copy read the staging buffer at %g, not when it ran",
          back[5]);

    /* stream 2 waits for stream 1's recorded point, not for what 1 queues after it */
    cudaStream_t s2;
    cudaEvent_t ev;
    cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    cudaStream_t keep = g_s;
    EXPECT(launch(k_add, dim3(1), dim3(32), 0, dv, 10.0f, 64) == cudaSuccess);
    cudaEventRecord(ev, g_s);
    EXPECT(launch(k_add, dim3(1), dim3(32), 0, dv, 100.0f, 64) == cudaSuccess);
    cudaStreamWaitEvent(s2, ev, 0);
    g_s = s2;
    EXPECT(launch(k_add, dim3(1), dim3(32), 0, dv, 1000.0f, 64) == cudaSuccess);
    g_s = keep;
    cudaStreamSynchronize(s2);
    memcpy(back, dv, sizeof back);
    CHECK(back[0] == -1.0f + 10 + 1000, "after the wait: %g (want %g)", back[0], -1.0f + 10 + 1000);
    cudaStreamSynchronize(g_s);
    memcpy(back, dv, sizeof back);
    EXPECT(back[0] == -1.0f + 10 + 1000 + 100);

    /* capture: recorded, not run; replays run with the arguments of the capture */
    cudaGraph_t g;
    cudaGraphExec_t x;
    EXPECT(cudaStreamBeginCapture(g_s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    EXPECT(launch(k_add, dim3(1), dim3(32), 0, dv, 1.0f, 64) == cudaSuccess);
    EXPECT(cudaStreamEndCapture(g_s, &g) == cudaSuccess);
    cudaStreamSynchronize(g_s);
    memcpy(back, dv, sizeof back);
    CHECK(back[0] == 1109.0f, "a captured launch ran at capture: %g", back[0]);
    EXPECT(cudaGraphInstantiate(&x, g, 0) == cudaSuccess);
    cudaGraphDestroy(g);
    cudaGraphLaunch(x, g_s);
    cudaGraphLaunch(x, g_s);
    cudaGraphExecDestroy(x); /* launched graphs still run */
    cudaStreamSynchronize(g_s);
    memcpy(back, dv, sizeof back);
    CHECK(back[0] == 1111.0f && back[63] == 1111.0f, "two replays gave %g", back[0]);

    EXPECT(cudaStreamBeginCapture(g_s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    EXPECT(cudaMemcpy(back, dv, sizeof back, cudaMemcpyDeviceToHost) ==
           cudaErrorStreamCaptureUnsupported);
    EXPECT(cudaStreamEndCapture(g_s, &g) == cudaErrorStreamCaptureInvalidated && !g);
    (void)cudaGetLastError();

    /* events in a capture: cudaEventRecordExternal makes a node that stamps the time of each
     * replay (FL_CUDA_KTIME=2 reads those); a plain record makes none, as in CUDA */
    cudaEvent_t t0, t1, tp;
    cudaEventCreate(&t0);
    cudaEventCreate(&t1);
    cudaEventCreate(&tp);
    EXPECT(cudaStreamBeginCapture(g_s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    EXPECT(cudaEventRecordWithFlags(t0, g_s, cudaEventRecordExternal) == cudaSuccess);
    EXPECT(launch(k_add, dim3(1), dim3(32), 0, dv, 1.0f, 64) == cudaSuccess);
    EXPECT(cudaEventRecordWithFlags(t1, g_s, cudaEventRecordExternal) == cudaSuccess);
    EXPECT(cudaEventRecord(tp, g_s) == cudaSuccess);
    EXPECT(cudaStreamEndCapture(g_s, &g) == cudaSuccess);
    EXPECT(cudaGraphInstantiate(&x, g, 0) == cudaSuccess);
    cudaGraphDestroy(g);
    float ms = -1;
    CHECK(cudaEventElapsedTime(&ms, t0, t1) == cudaErrorNotReady,
          "an event node has a time before its graph ran");
    (void)cudaGetLastError();
    cudaGraphLaunch(x, g_s);
    cudaStreamSynchronize(g_s);
    CHECK(cudaEventElapsedTime(&ms, t0, t1) == cudaSuccess && ms >= 0,
          "the event nodes of a replay: %g ms", ms);
    CHECK(cudaEventElapsedTime(&ms, t0, tp) == cudaErrorNotReady,
          "a plain record in a capture has a time");
    (void)cudaGetLastError();
    EXPECT(cudaEventRecordWithFlags(t0, g_s, 0x8) == cudaErrorInvalidValue);
    (void)cudaGetLastError();
    cudaGraphExecDestroy(x);
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    cudaEventDestroy(tp);

    CHECK(aborts_with([&] { cudaMemcpy(dv, back, 16, cudaMemcpyDeviceToHost); },
                      "does not match its pointers"),
          "a copy with its kind backwards does not abort");
    void *big;
    size_t fr, tot;
    cudaMemGetInfo(&fr, &tot);
    EXPECT(cudaMalloc(&big, fr + 1) == cudaErrorMemoryAllocation && !big);
    (void)cudaGetLastError();
    cudaStreamDestroy(s2);
    cudaEventDestroy(ev);
    cudaFreeHost(h);
    cudaFree(dv);
}

static void blas(void)
{
    flc_blas b;
    char err[128];
    EXPECT(flc_blas_open(&b, "", err, sizeof err) == 0);
    b.set_stream(b.h, g_s);
    const int m = 5, n = 3, k = 7;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            const int lda = (ta ? k : m) + 1, ldb = (tb ? n : k) + 2, ldc = m + 1;
            std::vector<emu_bf16> A((size_t)lda * (ta ? m : k)), B((size_t)ldb * (tb ? k : n));
            for (size_t i = 0; i < A.size(); i++)
                A[i] = __float2bfloat16_rn((float)((int)(i * 7 % 11) - 5) / 4);
            for (size_t i = 0; i < B.size(); i++)
                B[i] = __float2bfloat16_rn((float)((int)(i * 5 % 13) - 6) / 8);
            emu_bf16 *dA, *dB;
            float *dC;
            cudaMalloc(&dA, A.size() * 2);
            cudaMalloc(&dB, B.size() * 2);
            cudaMalloc(&dC, (size_t)ldc * n * 4);
            cudaMemcpy(dA, A.data(), A.size() * 2, cudaMemcpyHostToDevice);
            cudaMemcpy(dB, B.data(), B.size() * 2, cudaMemcpyHostToDevice);
            std::vector<float> C((size_t)ldc * n);
            for (size_t i = 0; i < C.size(); i++)
                C[i] = (float)i;
            cudaMemcpy(dC, C.data(), C.size() * 4, cudaMemcpyHostToDevice);
            const float al = 2.0f, be = 0.5f;
            auto gemm = [&](const float *beta, float *c) {
                return b.gemm_ex(b.h, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &al, dA, CUDA_R_16BF, lda,
                                 dB, CUDA_R_16BF, ldb, beta, c, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT);
            };
            CHECK(gemm(&be, dC) == CUBLAS_STATUS_SUCCESS, "%s", "GemmEx refused good arguments");
            cudaStreamSynchronize(g_s);
            double worst = 0;
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++) {
                    double s = 0;
                    for (int l = 0; l < k; l++) {
                        const size_t ia = ta ? (size_t)i * lda + l : (size_t)l * lda + i;
                        const size_t ib = tb ? (size_t)l * ldb + j : (size_t)j * ldb + l;
                        s += (double)__bfloat162float(A[ia]) * __bfloat162float(B[ib]);
                    }
                    const double want = al * s + be * C[(size_t)j * ldc + i];
                    worst = fmax(worst, fabs(dC[(size_t)j * ldc + i] - want));
                }
            CHECK(worst < 1e-5, "GemmEx transa %d transb %d: worst error %g", ta, tb, worst);
            /* beta 0 on fresh memory (0xff bytes, NaN): C is not read */
            float *dN;
            cudaMalloc(&dN, (size_t)ldc * n * 4);
            const float zero = 0.0f;
            CHECK(gemm(&zero, dN) == CUBLAS_STATUS_SUCCESS, "%s", "beta 0 refused");
            cudaStreamSynchronize(g_s);
            int nans = 0;
            for (int j = 0; j < n; j++)
                for (int i = 0; i < m; i++)
                    nans += dN[(size_t)j * ldc + i] != dN[(size_t)j * ldc + i];
            CHECK(nans == 0, "beta 0 read C: %d NaN outputs", nans);
            cudaFree(dN);
            EXPECT(b.gemm_ex(b.h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &al, dA, CUDA_R_16BF, m - 1,
                             dB, CUDA_R_16BF, ldb, &be, dC, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                             CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE);
            cudaFree(dA);
            cudaFree(dB);
            cudaFree(dC);
        }
    flc_blas_close(&b);
}

int main(void)
{
    EXPECT(cudaStreamCreateWithFlags(&g_s, cudaStreamNonBlocking) == cudaSuccess);
    kernels();
    streams();
    blas();
    cudaStreamDestroy(g_s);
    return check_summary("test_cuda_emu");
}
