/* absent.c: fl_cuda.h in a build without the CUDA backend (no nvcc at build time, or
 * -DWITH_CUDA=OFF): every call says so, and nothing else in fogline needs to know. */
#include "fl_cuda.h"

#include <stdio.h>
#include <string.h>

#define FL_NO_CUDA "this fogline was built without the CUDA backend (nvcc was not found at " \
                   "build time, or -DWITH_CUDA=OFF)"

bool fl_cuda_built(void) { return false; }

int fl_backend_cuda_create(fl_backend **out, const fl_model *m, const fl_backend_opts *o,
                           fl_err *e)
{
    (void)m;
    (void)o;
    *out = NULL;
    return fl_err_set(e, FL_EUNSUPPORTED, "cuda: " FL_NO_CUDA);
}

int fl_cuda_probe(char *why, size_t cap)
{
    if (why && cap)
        snprintf(why, cap, "this build has no CUDA backend");
    return 0;
}

const char *fl_cuda_describe(const fl_backend *b)
{
    (void)b;
    return "";
}

int fl_cuda_copy_bandwidth(const fl_backend *b, size_t bytes, int reps, double *bytes_per_s,
                           fl_err *e)
{
    (void)b;
    (void)bytes;
    (void)reps;
    *bytes_per_s = 0;
    return fl_err_set(e, FL_EUNSUPPORTED, "cuda: " FL_NO_CUDA);
}

size_t fl_cuda_weight_stream_bytes(const fl_backend *b)
{
    (void)b;
    return 0;
}

void fl_cuda_get_stats(const fl_backend *b, fl_cuda_stats *s)
{
    (void)b;
    memset(s, 0, sizeof *s);
}

int fl_cuda_moe_stats_get(const fl_backend *b, fl_cuda_moe_stats *st, fl_err *e)
{
    (void)b;
    memset(st, 0, sizeof *st);
    return fl_err_set(e, FL_EUNSUPPORTED, "this build has no CUDA backend");
}

int fl_cuda_force_routes(fl_backend *b, const int32_t *ids, const float *w, int ld_tokens,
                         fl_err *e)
{
    (void)b;
    (void)ids;
    (void)w;
    (void)ld_tokens;
    return fl_err_set(e, FL_EUNSUPPORTED, "this build has no CUDA backend");
}
