/* backend_select.c: chooses and creates the compute backend (backend_select.h). This is the
 * one place that knows both backends, so engine/ depends on neither of them being chosen.
 *
 * "auto" asks fl_cuda_probe whether a GPU is usable: it looks for the driver library before
 * it starts the CUDA runtime at all, so a machine without a GPU pays a failed dlopen, and
 * "driver version is insufficient" (the runtime's answer when there is no driver) is
 * reported as "no NVIDIA driver". A build without the CUDA backend links cuda/absent.c,
 * whose every call says so. */
#include "backend_select.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cpu/cpu.h"
#include "fl_cuda.h"

bool fl_backend_have_cuda(void) { return fl_cuda_built(); }

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

/* What the weights line of `chosen` says: the format b holds and, when AUTO picked it or it
 * differs from the file's, why; then the KV pages' format. */
static void fl_say_weights(char *chosen, size_t cap, const fl_backend *b, const fl_model *m,
                           fl_wformat asked)
{
    size_t k = chosen ? strlen(chosen) : 0;
    if (!chosen || k + 1 >= cap)
        return;
    fl_wformat file = fl_wformat_resolve(FL_WEIGHTS_AUTO, m);
    const char *why = "";
    if (b->weights == FL_WEIGHTS_BF16 && file != FL_WEIGHTS_BF16)
        why = " (rounded from the file's f32/f16)";
    else if (asked == FL_WEIGHTS_AUTO)
        why = file == FL_WEIGHTS_BF16 ? " (auto: the file's bf16, exact)"
                                      : " (auto: the file is not all bf16)";
    fl_say(chosen + k, cap - k, "; weights %s%s; kv %s", fl_wformat_name(b->weights), why,
           fl_kvformat_name(b->kv));
}

/* Whether a GPU is usable; why says which, or why not. */
static bool fl_gpu_usable(char *why, size_t cap) { return fl_cuda_probe(why, cap) == 1; }

/* The CPU backend's kernel levels (FL_SIMD caps them), after the rest of `chosen` */
static void fl_say_kernels(char *chosen, size_t cap)
{
    size_t k = chosen ? strlen(chosen) : 0;
    if (chosen && k + 1 < cap)
        fl_say(chosen + k, cap - k, "; kernels %s, q8/q4 %s", fl_cpu_kernels_name(),
               fl_cpu_qkernels_name());
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
        if (!rc) {
            fl_say(chosen, cap, "cpu: asked for");
            fl_say_weights(chosen, cap, *out, m, o->weights);
            fl_say_kernels(chosen, cap);
        }
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
        if (!rc) {
            fl_say(chosen, cap, "cuda: %s", fl_cuda_describe(*out));
            fl_say_weights(chosen, cap, *out, m, o->weights);
        }
        return rc;
    }
    /* auto */
    char fallback[640];
    if (gpu && (o->weights == FL_WEIGHTS_F32 || o->kv == FL_KV_F32)) {
        /* the GPU holds bf16 (or q8 weights): an explicit f32 is the CPU's to honour */
        snprintf(fallback, sizeof fallback, "%s f32 asked, the CUDA backend on %.150s holds %s",
                 o->weights == FL_WEIGHTS_F32 ? "weights" : "kv", why,
                 o->weights == FL_WEIGHTS_F32 ? "bf16 or q8 weights only" : "bf16 KV pages only");
    } else if (gpu) {
        fl_err ce = {0, {0}};
        int rc = fl_backend_cuda_create(out, m, &go, &ce);
        if (!rc) {
            fl_say(chosen, cap, "cuda: auto: %s", fl_cuda_describe(*out));
            fl_say_weights(chosen, cap, *out, m, o->weights);
            return 0;
        }
        snprintf(fallback, sizeof fallback, "the CUDA backend failed on %.150s: %.400s", why, ce.msg);
    } else {
        snprintf(fallback, sizeof fallback, "no usable GPU: %s", why);
    }
    int rc = fl_backend_cpu_create(out, m, o, e);
    if (!rc) {
        fl_say(chosen, cap, "cpu: auto: %s", fallback);
        fl_say_weights(chosen, cap, *out, m, o->weights);
        fl_say_kernels(chosen, cap);
    }
    return rc;
}
