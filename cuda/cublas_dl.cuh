/* cublas_dl.cuh: cuBLAS, loaded with dlopen when a CUDA backend is created, not linked.
 *
 * Why: every fogline binary of a CUDA build (the server, each test) would otherwise load
 * libcublas and libcublasLt (over 500 MB) at start, on machines without a GPU too, and fail
 * to start where they are not installed; valgrind runs would crawl through them. The CUDA
 * runtime is linked statically (it loads the driver itself, and reports "no driver" as an
 * error rather than failing to start), so a CUDA build runs anywhere the CPU build does. */
#ifndef FL_CUBLAS_DL_CUH
#define FL_CUBLAS_DL_CUH

#include <cublas_v2.h>
#include <stddef.h>

typedef struct flc_blas {
    void *lib;
    cublasHandle_t h;
    cublasStatus_t (*create)(cublasHandle_t *);
    cublasStatus_t (*destroy)(cublasHandle_t);
    cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
    cublasStatus_t (*set_workspace)(cublasHandle_t, void *, size_t);
    cublasStatus_t (*get_property)(libraryPropertyType, int *);
    const char *(*status_string)(cublasStatus_t);
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                              int, const void *, const void *, cudaDataType, int, const void *,
                              cudaDataType, int, const void *, void *, cudaDataType, int,
                              cublasComputeType_t, cublasGemmAlgo_t);
    char path[512]; /* the library loaded */
} flc_blas;

/* Loads cuBLAS (FL_CUBLAS_LIB, else libcublas.so.13 by the loader's search, else in
 * `toolkit_dir`), resolves the functions and creates a handle on the current device.
 * Returns 0, or -1 with a message in err. */
int flc_blas_open(flc_blas *b, const char *toolkit_dir, char *err, size_t cap);
void flc_blas_close(flc_blas *b);
const char *flc_blas_status(const flc_blas *b, cublasStatus_t st);

#endif
