/* runtime.cc: the emulated CUDA runtime and cuBLAS (tests/cuda_emu/README.md).
 *
 * Device memory is host memory from posix_memalign, filled with 0xff bytes (a float NaN, an
 * int -1) so that a kernel reading what nothing wrote goes wrong visibly; ASan sees its
 * bounds. Each stream is a queue of operations that run only when the host waits: stream or
 * event synchronisation, a synchronous copy (which waits for the legacy stream and the
 * blocking streams, not for streams created cudaStreamNonBlocking, as on a GPU), cudaFree,
 * cudaDeviceSynchronize. So a host that reads a result it did not wait for, or rewrites a
 * staging buffer an earlier queued copy still reads, sees what it would see on a GPU. A
 * stream capturing a graph records instead; while a thread captures, its synchronous calls
 * fail with cudaErrorStreamCaptureUnsupported and invalidate the capture (thread-local
 * capture mode). cuBLAS is one GemmEx, OpenBLAS's sgemm on f32 copies of the operands, with
 * cuBLAS's checks of its arguments.
 *
 * Misuse a GPU would turn into a fault or silent garbage aborts here with a message: a copy
 * whose kind does not match its pointers, a cuBLAS operand outside device memory. */
#include <chrono>
#include <stdarg.h>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include <cblas.h>

#include "cuda_runtime.h"
#include "cublas_dl.cuh"

FL_CUDA_EMU_DEFINE

unsigned char *emu_dyn_smem;

namespace {

struct op {
    std::function<void()> fn;
    const char *what;
};

} // namespace

struct emu_graph {
    std::vector<op> ops;
    bool invalid = false;
};

struct emu_stream {
    std::deque<op> q;
    unsigned long long queued = 0, done = 0; /* operations enqueued, run */
    bool nonblocking = false;
    emu_graph *cap = nullptr; /* capturing into */
    std::thread::id cap_thread;
};

struct emu_event {
    emu_stream *s = nullptr; /* where it was last recorded */
    unsigned long long seq = 0; /* complete once s->done reaches it */
    double t_ms = -1;
    bool timing = true;
};

namespace {

std::recursive_mutex g_mu;
thread_local cudaError_t g_last = cudaSuccess;
emu_stream g_legacy;
std::vector<emu_stream *> g_streams{&g_legacy};
std::map<uintptr_t, size_t> g_dev; /* device allocations: start -> bytes */
size_t g_used, g_cap;
std::vector<unsigned char> g_smem;

typedef std::lock_guard<std::recursive_mutex> lock;

size_t capacity()
{
    if (!g_cap) {
        const char *s = getenv("FL_CUDA_EMU_MEM_MB");
        g_cap = (s && atol(s) > 0 ? (size_t)atol(s) : 4096) << 20;
    }
    return g_cap;
}

double now_ms()
{
    return std::chrono::duration<double, std::milli>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

cudaError_t fail(cudaError_t e)
{
    g_last = e;
    return e;
}

[[noreturn]] void misuse(const std::string &what)
{
    fprintf(stderr, "cuda_emu: %s (a GPU faults or computes garbage)\n", what.c_str());
    abort();
}

std::string fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char *f, ...)
{
    char b[512];
    va_list a;
    va_start(a, f);
    vsnprintf(b, sizeof b, f, a);
    va_end(a);
    return b;
}

/* the allocation holding [p, p + n), or false */
bool on_device(const void *p, size_t n)
{
    const uintptr_t u = (uintptr_t)p;
    auto it = g_dev.upper_bound(u);
    if (it == g_dev.begin())
        return false;
    --it;
    return u >= it->first && u + n <= it->first + it->second;
}

emu_stream *S(cudaStream_t s) { return s ? s : &g_legacy; }

/* a synchronous call by a thread that is capturing: refused, the capture invalidated */
bool capturing_here()
{
    for (emu_stream *s : g_streams)
        if (s->cap && s->cap_thread == std::this_thread::get_id()) {
            s->cap->invalid = true;
            return true;
        }
    return false;
}

void drain(emu_stream *s, unsigned long long upto)
{
    while (s->done < upto && !s->q.empty()) {
        op o = std::move(s->q.front());
        s->q.pop_front();
        o.fn();
        s->done++;
    }
}

void drain_all(bool nonblocking_too)
{
    for (size_t i = 0; i < g_streams.size(); i++)
        if (nonblocking_too || !g_streams[i]->nonblocking)
            drain(g_streams[i], g_streams[i]->queued);
}

void check_copy(void *dst, const void *src, size_t n, cudaMemcpyKind k)
{
    const bool dd = on_device(dst, n), sd = on_device(src, n);
    const bool want_dd = k == cudaMemcpyHostToDevice || k == cudaMemcpyDeviceToDevice;
    const bool want_sd = k == cudaMemcpyDeviceToHost || k == cudaMemcpyDeviceToDevice;
    if (k == cudaMemcpyDefault)
        return;
    if (dd != want_dd || sd != want_sd)
        misuse(fmt("a copy of kind %d does not match its pointers: dst %p (%s), src %p (%s), "
                   "%zu bytes", (int)k, dst, dd ? "device" : "host", src,
                   sd ? "device" : "host", n));
}

} // namespace

cudaError_t emu_enqueue(cudaStream_t st, std::function<void()> fn, const char *what)
{
    lock l(g_mu);
    emu_stream *s = S(st);
    if (s->cap) {
        s->cap->ops.push_back(op{std::move(fn), what});
        return cudaSuccess;
    }
    s->q.push_back(op{std::move(fn), what});
    s->queued++;
    return cudaSuccess;
}

cudaError_t emu_check_launch(dim3 g, dim3 b, size_t smem)
{
    if (!g.x || !g.y || !g.z || g.y > 65535 || g.z > 65535 || !b.x || b.y != 1 || b.z != 1 ||
        b.x > 1024 || smem > 48 * 1024)
        return fail(cudaErrorInvalidConfiguration);
    if (b.x % 32) {
        fprintf(stderr, "cuda_emu: a block of %u threads: the emulation takes multiples of 32\n",
                b.x);
        abort();
    }
    return cudaSuccess;
}

void emu_begin_kernel(size_t smem)
{
    g_smem.assign(smem + 16, 0xff);
    emu_dyn_smem = (unsigned char *)(((uintptr_t)g_smem.data() + 15) & ~(uintptr_t)15);
}

const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
#define N(x)                                                                                   \
    case x:                                                                                    \
        return #x;
        N(cudaSuccess)
        N(cudaErrorInvalidValue)
        N(cudaErrorMemoryAllocation)
        N(cudaErrorInitializationError)
        N(cudaErrorInvalidConfiguration)
        N(cudaErrorInvalidDeviceFunction)
        N(cudaErrorInvalidDevice)
        N(cudaErrorNoKernelImageForDevice)
        N(cudaErrorECCUncorrectable)
        N(cudaErrorInvalidResourceHandle)
        N(cudaErrorNotReady)
        N(cudaErrorIllegalAddress)
        N(cudaErrorLaunchTimeout)
        N(cudaErrorAssert)
        N(cudaErrorHardwareStackError)
        N(cudaErrorIllegalInstruction)
        N(cudaErrorMisalignedAddress)
        N(cudaErrorInvalidAddressSpace)
        N(cudaErrorInvalidPc)
        N(cudaErrorLaunchFailure)
        N(cudaErrorStreamCaptureUnsupported)
        N(cudaErrorStreamCaptureInvalidated)
        N(cudaErrorUnknown)
#undef N
    }
    return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess:
        return "no error";
    case cudaErrorMemoryAllocation:
        return "out of memory";
    case cudaErrorInvalidValue:
        return "invalid argument";
    case cudaErrorInvalidConfiguration:
        return "invalid configuration argument";
    case cudaErrorStreamCaptureUnsupported:
        return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
        return "operation failed due to a previous error during capture";
    default:
        return cudaGetErrorName(e);
    }
}

cudaError_t cudaGetLastError(void)
{
    const cudaError_t e = g_last;
    g_last = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return g_last; }

cudaError_t cudaGetDeviceCount(int *n)
{
    *n = 1;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev)
{
    if (dev != 0)
        return fail(cudaErrorInvalidDevice);
    *p = cudaDeviceProp{};
    const char *sms = getenv("FL_CUDA_EMU_SMS");
    snprintf(p->name, sizeof p->name, "emulated sm_90 (tests/cuda_emu)");
    p->totalGlobalMem = capacity();
    p->sharedMemPerBlock = 48 * 1024;
    p->sharedMemPerBlockOptin = 227 * 1024;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = sms && atoi(sms) > 0 ? atoi(sms) : 132;
    p->l2CacheSize = 50 << 20;
    p->persistingL2CacheMaxSize = 30 << 20;
    p->accessPolicyMaxWindowSize = 128 << 20;
    p->maxThreadsPerBlock = 1024;
    p->warpSize = 32;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int dev) { return dev == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice); }
cudaError_t cudaGetDevice(int *dev)
{
    *dev = 0;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    lock l(g_mu);
    if (capturing_here())
        return fail(cudaErrorStreamCaptureUnsupported);
    drain_all(true);
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
    lock l(g_mu);
    *total_b = capacity();
    *free_b = capacity() - g_used;
    return cudaSuccess;
}

cudaError_t emu_malloc(void **p, size_t n)
{
    lock l(g_mu);
    *p = nullptr;
    if (capturing_here())
        return fail(cudaErrorStreamCaptureUnsupported);
    if (n == 0)
        return cudaSuccess;
    if (n > capacity() - g_used)
        return fail(cudaErrorMemoryAllocation);
    void *m = nullptr;
    if (posix_memalign(&m, 256, n))
        return fail(cudaErrorMemoryAllocation);
    memset(m, 0xff, n);
    g_dev[(uintptr_t)m] = n;
    g_used += n;
    *p = m;
    return cudaSuccess;
}

cudaError_t emu_malloc_host(void **p, size_t n)
{
    *p = nullptr;
    if (n == 0)
        return cudaSuccess;
    void *m = nullptr;
    if (posix_memalign(&m, 256, n))
        return fail(cudaErrorMemoryAllocation);
    memset(m, 0xff, n);
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    lock l(g_mu);
    if (!p)
        return cudaSuccess;
    if (capturing_here())
        return fail(cudaErrorStreamCaptureUnsupported);
    auto it = g_dev.find((uintptr_t)p);
    if (it == g_dev.end())
        misuse(fmt("cudaFree of %p, not a device allocation", p));
    drain_all(true); /* cudaFree waits for the device */
    g_used -= it->second;
    g_dev.erase(it);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p)
{
    lock l(g_mu);
    if (p) {
        drain_all(true);
        free(p);
    }
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind k,
                            cudaStream_t s)
{
    if (n == 0)
        return cudaSuccess;
    lock l(g_mu);
    check_copy(dst, src, n, k);
    return emu_enqueue(s, [dst, src, n] { memcpy(dst, src, n); }, "a copy");
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind k)
{
    lock l(g_mu);
    if (capturing_here())
        return fail(cudaErrorStreamCaptureUnsupported);
    check_copy(dst, src, n, k);
    drain_all(false); /* the legacy stream waits for the blocking streams, not the others */
    if (n)
        memcpy(dst, src, n);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
    if (n == 0)
        return cudaSuccess;
    lock l(g_mu);
    if (!on_device(p, n))
        misuse(fmt("cudaMemset of %zu bytes at %p, outside device memory", n, p));
    return emu_enqueue(s, [p, v, n] { memset(p, v, n); }, "a memset");
}

cudaError_t cudaMemset(void *p, int v, size_t n)
{
    lock l(g_mu);
    if (capturing_here())
        return fail(cudaErrorStreamCaptureUnsupported);
    const cudaError_t e = cudaMemsetAsync(p, v, n, nullptr);
    drain_all(false);
    return e;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    lock l(g_mu);
    emu_stream *n = new emu_stream;
    n->nonblocking = flags & cudaStreamNonBlocking;
    g_streams.push_back(n);
    *s = n;
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    lock l(g_mu);
    if (!s || s->cap)
        return fail(cudaErrorInvalidResourceHandle);
    drain(s, s->queued); /* its work still completes */
    for (size_t i = 0; i < g_streams.size(); i++)
        if (g_streams[i] == s)
            g_streams.erase(g_streams.begin() + (long)i);
    delete s;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t st)
{
    lock l(g_mu);
    emu_stream *s = S(st);
    if (s->cap) {
        s->cap->invalid = true;
        return fail(cudaErrorStreamCaptureUnsupported);
    }
    if (!s->nonblocking && s != &g_legacy)
        drain(&g_legacy, g_legacy.queued);
    if (s == &g_legacy)
        drain_all(false);
    drain(s, s->queued);
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    *e = new emu_event;
    (*e)->timing = !(flags & cudaEventDisableTiming);
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    delete e;
    return cudaSuccess;
}

/* In a capture only cudaEventRecordExternal makes the event a node of the graph, which
 * stamps the time when the graph runs; a plain record there only orders the capture's own
 * streams (unused here), so the event then has no time to read. */
cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t st, unsigned flags)
{
    lock l(g_mu);
    emu_stream *s = S(st);
    if (flags & ~(unsigned)cudaEventRecordExternal)
        return fail(cudaErrorInvalidValue);
    if (s->cap) {
        e->s = nullptr;
        e->t_ms = -1;
        if (!(flags & cudaEventRecordExternal))
            return cudaSuccess;
        return emu_enqueue(st, [e] { e->t_ms = now_ms(); }, "an event");
    }
    e->t_ms = -1;
    emu_enqueue(st, [e] { e->t_ms = now_ms(); }, "an event");
    e->s = s;
    e->seq = s->queued;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t st)
{
    return cudaEventRecordWithFlags(e, st, cudaEventRecordDefault);
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    lock l(g_mu);
    if (capturing_here())
        return fail(cudaErrorStreamCaptureUnsupported);
    if (e->s)
        drain(e->s, e->seq);
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e) { return cudaEventSynchronize(e); }

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    lock l(g_mu);
    if (!a->timing || !b->timing)
        return fail(cudaErrorInvalidResourceHandle);
    if (a->t_ms < 0 || b->t_ms < 0)
        return fail(cudaErrorNotReady);
    *ms = (float)(b->t_ms - a->t_ms);
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t e, unsigned flags)
{
    (void)flags;
    lock l(g_mu);
    emu_stream *es = e->s;
    const unsigned long long seq = e->seq;
    if (!es)
        return cudaSuccess; /* never recorded: nothing to wait for */
    return emu_enqueue(st, [es, seq] { drain(es, seq); }, "an event wait");
}

cudaError_t cudaStreamBeginCapture(cudaStream_t st, cudaStreamCaptureMode mode)
{
    (void)mode;
    lock l(g_mu);
    if (!st || st->cap)
        return fail(cudaErrorStreamCaptureUnsupported); /* the legacy stream cannot capture */
    st->cap = new emu_graph;
    st->cap_thread = std::this_thread::get_id();
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t st, cudaGraph_t *g)
{
    lock l(g_mu);
    *g = nullptr;
    if (!st || !st->cap)
        return fail(cudaErrorInvalidValue);
    emu_graph *c = st->cap;
    st->cap = nullptr;
    if (c->invalid) {
        delete c;
        return fail(cudaErrorStreamCaptureInvalidated);
    }
    *g = c;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *x, cudaGraph_t g, unsigned long long flags)
{
    (void)flags;
    *x = new emu_graph(*g);
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t st)
{
    lock l(g_mu);
    std::vector<op> ops = x->ops; /* the exec may be destroyed before the launch runs */
    return emu_enqueue(st, [ops] {
        for (const op &o : ops)
            o.fn();
    }, "a graph");
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x)
{
    delete x;
    return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
    delete g;
    return cudaSuccess;
}

/* ---------------------------------------------------------------- cuBLAS */

struct emu_cublas {
    cudaStream_t s = nullptr;
};

namespace {

cublasStatus_t b_create(cublasHandle_t *h)
{
    *h = new emu_cublas;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t b_destroy(cublasHandle_t h)
{
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t b_set_stream(cublasHandle_t h, cudaStream_t s)
{
    h->s = s;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t b_set_workspace(cublasHandle_t, void *p, size_t n)
{
    lock l(g_mu);
    return !n || on_device(p, n) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t b_get_property(libraryPropertyType t, int *v)
{
    *v = t == MAJOR_VERSION ? 13 : 0;
    return CUBLAS_STATUS_SUCCESS;
}
const char *b_status_string(cublasStatus_t st)
{
    switch (st) {
    case CUBLAS_STATUS_SUCCESS:
        return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED:
        return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
        return "CUBLAS_STATUS_(emulated, other)";
    }
}

float elem(const void *p, cudaDataType t, size_t i)
{
    if (t == CUDA_R_32F)
        return ((const float *)p)[i];
    return __bfloat162float(((const emu_bf16 *)p)[i]);
}

/* column-major, as cuBLAS: C (m, n) = alpha op(A) (m, k) op(B) (k, n) + beta C in f32; beta 0
 * reads no C */
cublasStatus_t b_gemm_ex(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                         int n, int k, const void *alpha, const void *A, cudaDataType at,
                         int lda, const void *B, cudaDataType bt, int ldb, const void *beta,
                         void *C, cudaDataType ct, int ldc, cublasComputeType_t comp,
                         cublasGemmAlgo_t algo)
{
    (void)algo;
    if (m < 0 || n < 0 || k < 0 || (ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) ||
        (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T))
        return CUBLAS_STATUS_INVALID_VALUE;
    const int arows = ta == CUBLAS_OP_N ? m : k, acols = ta == CUBLAS_OP_N ? k : m;
    const int brows = tb == CUBLAS_OP_N ? k : n, bcols = tb == CUBLAS_OP_N ? n : k;
    if (lda < (arows > 1 ? arows : 1) || ldb < (brows > 1 ? brows : 1) ||
        ldc < (m > 1 ? m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    if ((at != CUDA_R_16BF && at != CUDA_R_32F) || bt != at ||
        (ct != CUDA_R_32F && ct != CUDA_R_16BF) || comp != CUBLAS_COMPUTE_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (!m || !n)
        return CUBLAS_STATUS_SUCCESS;
    const size_t ea = at == CUDA_R_32F ? 4 : 2, ec = ct == CUDA_R_32F ? 4 : 2;
    {
        lock l(g_mu);
        const size_t na = ((size_t)(acols - 1) * lda + arows) * ea;
        const size_t nb = ((size_t)(bcols - 1) * ldb + brows) * ea;
        const size_t nc = ((size_t)(n - 1) * ldc + m) * ec;
        if ((k && (!on_device(A, na) || !on_device(B, nb))) || !on_device(C, nc))
            misuse(fmt("cublasGemmEx (m %d, n %d, k %d): an operand outside device memory: "
                       "A %p, B %p, C %p", m, n, k, A, B, C));
    }
    const float al = *(const float *)alpha, be = *(const float *)beta; /* host pointer mode */
    const size_t na = ((size_t)(acols - 1) * lda + arows), nb = ((size_t)(bcols - 1) * ldb + brows);
    return emu_enqueue(h->s, [=] {
        /* OpenBLAS on f32 copies of the operands as they are laid out (the warm-up's products
         * of up to max_tokens rows would take minutes as a plain loop) */
        std::vector<float> fa(k ? na : 0), fb(k ? nb : 0);
        for (size_t i = 0; i < fa.size(); i++)
            fa[i] = elem(A, at, i);
        for (size_t i = 0; i < fb.size(); i++)
            fb[i] = elem(B, bt, i);
        std::vector<float> tmp;
        float *c = (float *)C;
        int ld = ldc;
        if (ct != CUDA_R_32F) { /* bf16 out: in f32, then rounded */
            tmp.assign((size_t)m * n, 0.0f);
            if (be != 0)
                for (int j = 0; j < n; j++)
                    for (int i = 0; i < m; i++)
                        tmp[(size_t)j * m + i] = elem(C, ct, (size_t)j * ldc + i);
            c = tmp.data();
            ld = m;
        }
        if (k == 0) { /* C = beta C */
            for (int j = 0; j < n; j++)
                for (int i = 0; i < m; i++)
                    c[(size_t)j * ld + i] = be != 0 ? be * c[(size_t)j * ld + i] : 0.0f;
        } else {
            cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                        tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, m, n, k, al, fa.data(),
                        lda, fb.data(), ldb, be, c, ld);
        }
        if (ct != CUDA_R_32F)
            for (int j = 0; j < n; j++)
                for (int i = 0; i < m; i++)
                    ((emu_bf16 *)C)[(size_t)j * ldc + i] =
                        __float2bfloat16_rn(c[(size_t)j * m + i]);
    }, "cublasGemmEx") == cudaSuccess
               ? CUBLAS_STATUS_SUCCESS
               : CUBLAS_STATUS_EXECUTION_FAILED;
}

} // namespace

int flc_blas_open(flc_blas *b, const char *toolkit_dir, char *err, size_t cap)
{
    (void)toolkit_dir;
    (void)err;
    (void)cap;
    memset(b, 0, sizeof *b);
    b->create = b_create;
    b->destroy = b_destroy;
    b->set_stream = b_set_stream;
    b->set_workspace = b_set_workspace;
    b->get_property = b_get_property;
    b->status_string = b_status_string;
    b->gemm_ex = b_gemm_ex;
    snprintf(b->path, sizeof b->path, "emulated cuBLAS (tests/cuda_emu)");
    return b->create(&b->h) == CUBLAS_STATUS_SUCCESS ? 0 : -1;
}

void flc_blas_close(flc_blas *b)
{
    if (b->h)
        b->destroy(b->h);
    b->h = nullptr;
}

const char *flc_blas_status(const flc_blas *b, cublasStatus_t st)
{
    (void)b;
    return b_status_string(st);
}
