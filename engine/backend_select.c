/* backend_select.c: chooses and creates the compute backend (backend_select.h).
 *
 * "auto" asks fl_cuda_probe whether a GPU is usable: it looks for the driver library before
 * it starts the CUDA runtime at all, so a machine without a GPU pays a failed dlopen, and
 * "driver version is insufficient" (the runtime's answer when there is no driver) is
 * reported as "no NVIDIA driver". A build without the CUDA backend (no nvcc, or
 * WITH_CUDA=OFF) compiles the stub below instead. */
#include "backend_select.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#ifdef FL_HAVE_CUDA
#include "fl_cuda.h"
#else
int fl_backend_cuda_create(fl_backend **out, const fl_model *m, const fl_backend_opts *o,
                           fl_err *e)
{
    (void)m;
    (void)o;
    *out = NULL;
    return fl_err_set(e, FL_EUNSUPPORTED, "cuda: this fogline was built without the CUDA "
                      "backend (nvcc was not found at build time, or -DWITH_CUDA=OFF)");
}
#endif

bool fl_backend_have_cuda(void)
{
#ifdef FL_HAVE_CUDA
    return true;
#else
    return false;
#endif
}

bool fl_backend_device_valid(const char *device)
{
    return !device || !*device || !strcmp(device, "auto") || !strcmp(device, "cpu") ||
           !strcmp(device, "cuda");
}

static void fl_say(char *chosen, size_t cap, const char *fmt, ...) FL_PRINTF(3, 4);
static void fl_say(char *chosen, size_t cap, const char *fmt, ...)
{
    if (!chosen || !cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(chosen, cap, fmt, ap);
    va_end(ap);
}

/* Whether a GPU is usable; why says which, or why not. */
static bool fl_gpu_usable(char *why, size_t cap)
{
#ifdef FL_HAVE_CUDA
    return fl_cuda_probe(why, cap) == 1;
#else
    snprintf(why, cap, "this build has no CUDA backend");
    return false;
#endif
}

static const char *fl_describe(const fl_backend *b)
{
#ifdef FL_HAVE_CUDA
    return fl_cuda_describe(b);
#else
    (void)b;
    return "";
#endif
}

int fl_backend_open(fl_backend **out, const fl_model *m, const fl_backend_opts *o,
                    const char *device, char *chosen, size_t cap, fl_err *e)
{
    *out = NULL;
    fl_say(chosen, cap, "none");
    if (!o)
        return fl_err_set(e, FL_EINVAL, "backend: no options");
    if (!device || !*device)
        device = "auto";
    if (!fl_backend_device_valid(device))
        return fl_err_set(e, FL_EINVAL, "unknown device '%.40s' (use auto, cpu or cuda)", device);
    if (!strcmp(device, "cpu")) {
        int rc = fl_backend_cpu_create(out, m, o, e);
        if (!rc)
            fl_say(chosen, cap, "cpu: asked for");
        return rc;
    }
    fl_backend_opts go = *o;
    if (o->gpu_n_pages)
        go.n_pages = o->gpu_n_pages < 0 ? 0 : o->gpu_n_pages;
    char why[400] = "";
    bool gpu = fl_gpu_usable(why, sizeof why);
    if (!strcmp(device, "cuda")) {
        if (!gpu)
            return fl_backend_have_cuda()
                       ? fl_err_set(e, FL_EUNSUPPORTED, "cuda: no usable GPU: %s", why)
                       : fl_backend_cuda_create(out, m, &go, e);
        int rc = fl_backend_cuda_create(out, m, &go, e);
        if (!rc)
            fl_say(chosen, cap, "cuda: %s", fl_describe(*out));
        return rc;
    }
    /* auto */
    char fallback[640];
    if (gpu) {
        fl_err ce = {0, {0}};
        int rc = fl_backend_cuda_create(out, m, &go, &ce);
        if (!rc) {
            fl_say(chosen, cap, "cuda: auto: %s", fl_describe(*out));
            return 0;
        }
        snprintf(fallback, sizeof fallback, "the CUDA backend failed on %.150s: %.400s", why, ce.msg);
    } else {
        snprintf(fallback, sizeof fallback, "no usable GPU: %s", why);
    }
    int rc = fl_backend_cpu_create(out, m, o, e);
    if (!rc)
        fl_say(chosen, cap, "cpu: auto: %s", fallback);
    return rc;
}

/* The checks every backend runs before a forward (backend.h). */
int fl_batch_check(const fl_backend *b, const fl_config *cf, const fl_batch *bt, fl_err *e)
{
    if (!bt)
        return fl_err_set(e, FL_EINVAL, "forward: no batch");
    if (bt->n_tokens <= 0 || bt->n_tokens > b->max_tokens)
        return fl_err_set(e, FL_EINVAL, "forward: %d tokens (allowed 1..%d, the backend's "
                          "max_tokens)", bt->n_tokens, b->max_tokens);
    if (!bt->tokens)
        return fl_err_set(e, FL_EINVAL, "forward: no token array");
    if (bt->n_segs <= 0 || !bt->segs)
        return fl_err_set(e, FL_EINVAL, "forward: %d segments (need at least 1)", bt->n_segs);
    int64_t total = 0;
    int B = cf->block_size;
    for (int s = 0; s < bt->n_segs; s++) {
        const fl_segment *sg = &bt->segs[s];
        if (sg->n <= 0 || sg->n > bt->n_tokens)
            return fl_err_set(e, FL_EINVAL, "forward: segment %d has %d tokens", s, sg->n);
        total += sg->n;
        if (total > bt->n_tokens)
            return fl_err_set(e, FL_EINVAL, "forward: segments hold more tokens than n_tokens "
                              "(%d)", bt->n_tokens);
        if (sg->pos0 < 0 || (int64_t)sg->pos0 + sg->n > cf->max_pos)
            return fl_err_set(e, FL_EINVAL, "forward: segment %d spans positions %d..%lld, "
                              "past the model's %d", s, sg->pos0,
                              (long long)sg->pos0 + sg->n - 1, cf->max_pos);
        if (sg->n_store < 0 || sg->n_store > sg->n)
            return fl_err_set(e, FL_EINVAL, "forward: segment %d: n_store %d not in 0..%d", s,
                              sg->n_store, sg->n);
        if (sg->out_from < 0 || sg->out_from > sg->n)
            return fl_err_set(e, FL_EINVAL, "forward: segment %d: out_from %d not in 0..%d", s,
                              sg->out_from, sg->n);
        int np = (int)(((int64_t)sg->pos0 + sg->n_store + B - 1) / B);
        if (np > 0 && !sg->pages)
            return fl_err_set(e, FL_EINVAL, "forward: segment %d needs %d pages and has no "
                              "page table", s, np);
        for (int p = 0; p < np; p++)
            if (sg->pages[p] < 0 || sg->pages[p] >= b->n_pages)
                return fl_err_set(e, FL_EINVAL, "forward: segment %d: page %d (block %d) is "
                                  "not in 0..%d", s, sg->pages[p], p, b->n_pages - 1);
    }
    if (total != bt->n_tokens)
        return fl_err_set(e, FL_EINVAL, "forward: segments hold %lld tokens, n_tokens is %d",
                          (long long)total, bt->n_tokens);
    for (int t = 0; t < bt->n_tokens; t++)
        if (bt->tokens[t] < 0 || bt->tokens[t] >= cf->vocab)
            return fl_err_set(e, FL_EINVAL, "forward: token %d at %d is not in 0..%d",
                              bt->tokens[t], t, cf->vocab - 1);
    return 0;
}
