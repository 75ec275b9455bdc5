/* cublas_dl.cu: loads cuBLAS at run time (see cublas_dl.cuh for why). */
#include "cublas_dl.cuh"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *flc_try_open(const char *path, char *seen, size_t cap)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        size_t at = strlen(seen);
        if (at < cap)
            snprintf(seen + at, cap - at, "%s%s", at ? "; " : "", why ? why : path);
    }
    return h;
}

int flc_blas_open(flc_blas *b, const char *toolkit_dir, char *err, size_t cap)
{
    memset(b, 0, sizeof *b);
    char seen[768] = "", path[512];
    const char *env = getenv("FL_CUBLAS_LIB");
    if (env && *env) {
        snprintf(path, sizeof path, "%s", env);
        b->lib = flc_try_open(path, seen, sizeof seen);
    } else {
        snprintf(path, sizeof path, "libcublas.so.%d", CUBLAS_VER_MAJOR);
        b->lib = flc_try_open(path, seen, sizeof seen);
        if (!b->lib && toolkit_dir && *toolkit_dir) {
            snprintf(path, sizeof path, "%s/libcublas.so.%d", toolkit_dir, CUBLAS_VER_MAJOR);
            b->lib = flc_try_open(path, seen, sizeof seen);
        }
    }
    if (!b->lib) {
        snprintf(err, cap, "cannot load cuBLAS %d (%s); set FL_CUBLAS_LIB to its path",
                 CUBLAS_VER_MAJOR, seen);
        return -1;
    }
    snprintf(b->path, sizeof b->path, "%s", path);
#define FLC_SYM(field, name)                                                                 \
    do {                                                                                     \
        *(void **)&b->field = dlsym(b->lib, name);                                           \
        if (!b->field) {                                                                     \
            snprintf(err, cap, "%s has no symbol %s", path, name);                           \
            flc_blas_close(b);                                                               \
            return -1;                                                                       \
        }                                                                                    \
    } while (0)
    FLC_SYM(create, "cublasCreate_v2");
    FLC_SYM(destroy, "cublasDestroy_v2");
    FLC_SYM(set_stream, "cublasSetStream_v2");
    FLC_SYM(set_workspace, "cublasSetWorkspace_v2");
    FLC_SYM(get_property, "cublasGetProperty");
    FLC_SYM(status_string, "cublasGetStatusString");
    FLC_SYM(gemm_ex, "cublasGemmEx");
#undef FLC_SYM
    int major = 0;
    if (b->get_property(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS || major != CUBLAS_VER_MAJOR) {
        snprintf(err, cap, "%s is cuBLAS %d; this build needs %d", path, major, CUBLAS_VER_MAJOR);
        flc_blas_close(b);
        return -1;
    }
    cublasStatus_t st = b->create(&b->h);
    if (st != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, cap, "cublasCreate failed: %s", b->status_string(st));
        b->h = NULL;
        flc_blas_close(b);
        return -1;
    }
    return 0;
}

void flc_blas_close(flc_blas *b)
{
    if (b->h && b->destroy)
        b->destroy(b->h);
    b->h = NULL;
    if (b->lib)
        dlclose(b->lib);
    b->lib = NULL;
}

const char *flc_blas_status(const flc_blas *b, cublasStatus_t st)
{
    const char *s = b->status_string ? b->status_string(st) : NULL;
    return s ? s : "unknown cuBLAS status";
}
