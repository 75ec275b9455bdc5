/* cuda_runtime.h of the emulated CUDA (tests/cuda_emu/README.md): the part of the runtime API
 * that cuda/cuda_backend.cu and cuda/cuda_kernels.cu use, run on the CPU. Device memory is
 * host memory; each stream is a queue that runs when the host waits for it (runtime.cc), so
 * the host must order its work as it must on a GPU. Kernels run through
 * tests/unit/cuda_emu.hh. */
#ifndef FL_EMU_CUDA_RUNTIME_H
#define FL_EMU_CUDA_RUNTIME_H

#include <functional>
#include <stddef.h>
#include <stdint.h>
#include <tuple>

#include "cuda_emu.hh"

enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDeviceFunction = 98,
    cudaErrorInvalidDevice = 101,
    cudaErrorNoKernelImageForDevice = 209,
    cudaErrorECCUncorrectable = 214,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchTimeout = 702,
    cudaErrorAssert = 710,
    cudaErrorHardwareStackError = 714,
    cudaErrorIllegalInstruction = 715,
    cudaErrorMisalignedAddress = 716,
    cudaErrorInvalidAddressSpace = 717,
    cudaErrorInvalidPc = 718,
    cudaErrorLaunchFailure = 719,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorUnknown = 999
};
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};
enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2
};
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventDisableTiming 0x02
#define cudaEventRecordDefault 0x00
#define cudaEventRecordExternal 0x01

typedef struct emu_stream *cudaStream_t;
typedef struct emu_event *cudaEvent_t;
typedef struct emu_graph *cudaGraph_t;
typedef struct emu_graph *cudaGraphExec_t;

struct float2 {
    float x, y;
};

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    size_t sharedMemPerBlockOptin;
    int major, minor;
    int multiProcessorCount;
    int l2CacheSize;
    int persistingL2CacheMaxSize;
    int accessPolicyMaxWindowSize;
    int maxThreadsPerBlock;
    int warpSize;
};
struct cudaFuncAttributes {
    size_t sharedSizeBytes;
    int maxThreadsPerBlock;
    int numRegs;
    int ptxVersion;
    int binaryVersion;
};

enum cudaLaunchAttributeID { cudaLaunchAttributeProgrammaticStreamSerialization = 5 };
union cudaLaunchAttributeValue {
    int programmaticStreamSerializationAllowed;
    char pad[64];
};
struct cudaLaunchAttribute {
    cudaLaunchAttributeID id;
    cudaLaunchAttributeValue val;
};
struct cudaLaunchConfig_t {
    dim3 gridDim, blockDim;
    size_t dynamicSmemBytes;
    cudaStream_t stream;
    cudaLaunchAttribute *attrs;
    unsigned numAttrs;
};

const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaGetDevice(int *dev);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b);

cudaError_t emu_malloc(void **p, size_t n);
cudaError_t emu_malloc_host(void **p, size_t n);
template <class T> static inline cudaError_t cudaMalloc(T **p, size_t n)
{
    return emu_malloc((void **)p, n);
}
template <class T> static inline cudaError_t cudaMallocHost(T **p, size_t n)
{
    return emu_malloc_host((void **)p, n);
}
cudaError_t cudaFree(void *p);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind k);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind k,
                            cudaStream_t s = nullptr);
cudaError_t cudaMemset(void *p, int v, size_t n);
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s = nullptr);

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s = nullptr, unsigned flags = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *x, cudaGraph_t g, unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t s);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x);
cudaError_t cudaGraphDestroy(cudaGraph_t g);

/* the kernels' side: work queued on a stream (or recorded into the graph it captures), the
 * dynamic shared memory of the running launch, the checks a launch makes */
cudaError_t emu_enqueue(cudaStream_t s, std::function<void()> op, const char *what);
cudaError_t emu_check_launch(dim3 grid, dim3 block, size_t smem);
void emu_begin_kernel(size_t smem);
extern unsigned char *emu_dyn_smem;

template <typename... P, typename... A>
static cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t *cfg, void (*k)(P...), A... args)
{
    const cudaError_t e = emu_check_launch(cfg->gridDim, cfg->blockDim, cfg->dynamicSmemBytes);
    if (e != cudaSuccess)
        return e;
    std::tuple<P...> a(static_cast<P>(args)...);
    const dim3 g = cfg->gridDim, b = cfg->blockDim;
    const size_t sm = cfg->dynamicSmemBytes;
    return emu_enqueue(cfg->stream, [k, a, g, b, sm]() {
        emu_begin_kernel(sm);
        emu_launch(g, b, [&] { std::apply(k, a); });
    }, "a kernel");
}

template <typename... P>
static cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *a, void (*k)(P...))
{
    *a = cudaFuncAttributes{};
    a->maxThreadsPerBlock = 1024;
    a->binaryVersion = a->ptxVersion = 90;
    return k ? cudaSuccess : cudaErrorInvalidDeviceFunction;
}

#endif
