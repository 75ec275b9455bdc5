/* backend_select.h: the one place a compute backend is chosen: "cpu", "cuda", or "auto"
 * (the GPU when one is usable, else the CPU). */
#ifndef FL_BACKEND_SELECT_H
#define FL_BACKEND_SELECT_H

#include "backend.h"

/* Creates the backend `device` names ("auto", "cpu" or "cuda"; NULL or "" is "auto").
 * chosen (may be NULL, cap bytes) gets one line for a startup log: the backend and why, e.g.
 * "cuda: NVIDIA H200 (device 0, ...); weights ...; kv bf16" or "cpu: auto: no usable GPU (no
 * NVIDIA driver ...)". "cuda" fails (FL_EUNSUPPORTED) when no GPU is usable or the build has no
 * CUDA; "auto" falls back to the CPU then, and also when creating the CUDA backend fails
 * (the reason is in chosen). An unknown name is FL_EINVAL.
 *
 * o->n_pages applies to both; on the GPU, n_pages 0 or more than fits sizes the KV pool from
 * the free device memory (read the result from (*out)->n_pages). o->gpu_n_pages, when
 * non-zero, replaces n_pages on the GPU (-1: size from free memory), so that one call can
 * ask for a small CPU pool and a large GPU one. */
int fl_backend_open(fl_backend **out, const fl_model *m, const fl_backend_opts *o,
                    const char *device, char *chosen, size_t cap, fl_err *e);

/* Whether `device` is a name fl_backend_open takes. */
bool fl_backend_device_valid(const char *device);

/* Whether this build has the CUDA backend. */
bool fl_backend_have_cuda(void);

#endif
