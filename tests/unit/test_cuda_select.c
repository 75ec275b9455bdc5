/* test_cuda_select.c: fl_backend_open (server/backend_select.c) on the built-in model: the
 * names it takes, "cpu", and what "auto" and "cuda" do here, in whichever build this is
 * (CUDA or not) and on whichever machine (GPU or not): without a usable GPU "auto" is the
 * CPU with the reason, "cuda" is a clear error; with one, both are the CUDA backend. KV
 * formats: the CPU holds what it is asked (auto: f32), CUDA refuses f32, so "auto" with f32
 * KV is the CPU. Mixture-of-experts models: CUDA only with FL_CUDA_MOE=1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_select.h"
#include "fl_cuda.h"
#include "check.h"
#include "model.h"

static bool starts(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }

int main(void)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/../engine/models/fogline-helpdesk", check_tests_dir());
    fl_model *m = NULL;
    fl_err e = {0, {0}};
    fl_load_opts lo = {.no_tokenizer = true};
    CHECK(fl_model_load(&m, dir, &lo, &e) == 0, "%s: %s", dir, e.msg);
    if (!m)
        return check_summary("test_cuda_select");

    CHECK(fl_backend_device_valid("auto") && fl_backend_device_valid("cpu") &&
              fl_backend_device_valid("cuda") && fl_backend_device_valid("") &&
              fl_backend_device_valid(NULL),
          "auto, cpu, cuda, empty and NULL are device names");
    CHECK(!fl_backend_device_valid("gpu") && !fl_backend_device_valid("CUDA"),
          "gpu and CUDA are not");

    fl_backend_opts o = {.n_pages = 16, .n_threads = 1, .max_tokens = 32, .gpu_n_pages = 8};
    fl_backend *b = NULL;
    char chosen[700];
    int rc = fl_backend_open(&b, m, &o, "gpu", chosen, sizeof chosen, &e);
    CHECK(rc == FL_EINVAL && !b && strstr(e.msg, "unknown device"), "'gpu': rc %d, %s", rc, e.msg);

    rc = fl_backend_open(&b, m, &o, "cpu", chosen, sizeof chosen, &e);
    CHECK(rc == 0 && b && !strcmp(b->ops->name, "cpu") && b->n_pages == 16,
          "cpu: rc %d (%s), %s", rc, rc ? e.msg : chosen, b ? b->ops->name : "-");
    CHECK(starts(chosen, "cpu: asked for"), "cpu: chosen says '%s'", chosen);
    CHECK(b && b->kv == FL_KV_F32 && strstr(chosen, "; kv f32"), "cpu: kv auto is f32: '%s'",
          chosen);
    fl_backend_destroy(b);
    b = NULL;
    fl_backend_opts ob = o;
    ob.kv = FL_KV_BF16;
    rc = fl_backend_open(&b, m, &ob, "cpu", chosen, sizeof chosen, &e);
    CHECK(rc == 0 && b && b->kv == FL_KV_BF16 && strstr(chosen, "; kv bf16") &&
              b->page_bytes == fl_kv_page_floats(&m->cfg) * sizeof(float),
          "cpu --kv-format bf16: rc %d, '%s' (page_bytes stays the f32 host layout's)", rc,
          rc ? e.msg : chosen);
    fl_backend_destroy(b);
    b = NULL;
    /* auto with f32 KV asked: the CPU, which holds it, wherever a GPU is */
    fl_backend_opts of = o;
    of.kv = FL_KV_F32;
    rc = fl_backend_open(&b, m, &of, "auto", chosen, sizeof chosen, &e);
    CHECK(rc == 0 && b && !strcmp(b->ops->name, "cpu") && b->kv == FL_KV_F32,
          "auto with kv f32: rc %d, '%s'", rc, rc ? e.msg : chosen);
    printf("auto, kv f32 -> %s\n", rc ? e.msg : chosen);
    fl_backend_destroy(b);
    b = NULL;

    rc = fl_backend_open(&b, m, &o, "auto", chosen, sizeof chosen, &e);
    CHECK(rc == 0 && b, "auto: %s", e.msg);
    bool gpu = b && !strcmp(b->ops->name, "cuda");
    printf("auto -> %s\n", chosen);
    if (gpu) {
        CHECK(starts(chosen, "cuda: auto: ") && b->n_pages == 8,
              "auto on a GPU: '%s', %d pages (gpu_n_pages 8)", chosen, b->n_pages);
    } else if (b) {
        CHECK(!strcmp(b->ops->name, "cpu") && b->n_pages == 16, "auto without a GPU: %s",
              b->ops->name);
        CHECK(starts(chosen, "cpu: auto: no usable GPU: ") ||
                  starts(chosen, "cpu: auto: the CUDA backend failed"),
              "auto without a GPU says why: '%s'", chosen);
        if (!fl_backend_have_cuda())
            CHECK(strstr(chosen, "no CUDA backend") != NULL, "a CPU-only build says so: '%s'",
                  chosen);
    }
    fl_backend_destroy(b);
    b = NULL;

    /* the same with the name left out */
    rc = fl_backend_open(&b, m, &o, NULL, chosen, sizeof chosen, &e);
    CHECK(rc == 0 && b && !strcmp(b->ops->name, gpu ? "cuda" : "cpu"), "NULL device: %s",
          rc ? e.msg : chosen);
    fl_backend_destroy(b);
    b = NULL;

    e.msg[0] = 0;
    rc = fl_backend_open(&b, m, &o, "cuda", chosen, sizeof chosen, &e);
    if (gpu) {
        CHECK(rc == 0 && b && !strcmp(b->ops->name, "cuda") && starts(chosen, "cuda: "),
              "cuda on a GPU: rc %d, %s", rc, rc ? e.msg : chosen);
    } else {
        CHECK(rc == FL_EUNSUPPORTED && !b, "cuda without a GPU: rc %d", rc);
        CHECK(fl_backend_have_cuda() ? starts(e.msg, "cuda: no usable GPU: ")
                                     : strstr(e.msg, "built without the CUDA backend") != NULL,
              "cuda without a GPU says why: '%s'", e.msg);
        printf("cuda -> %s\n", e.msg);
    }
    fl_backend_destroy(b);

    /* the CUDA backend holds bf16 KV only: f32 is refused before any GPU is looked for */
    b = NULL;
    rc = fl_backend_cuda_create(&b, m, &of, &e);
    CHECK(rc == FL_EUNSUPPORTED && !b &&
              (fl_backend_have_cuda()
                   ? !strcmp(e.msg, "cuda backend: --kv-format f32: it holds bf16 KV pages only "
                                    "(use --kv-format bf16 or auto, or --device cpu)")
                   : strstr(e.msg, "built without the CUDA backend") != NULL),
          "fl_backend_cuda_create with kv f32: rc %d, %s", rc, e.msg);
    fl_backend_destroy(b);

    /* the CUDA constructor itself, in any build: refuses cleanly without a GPU */
    b = NULL;
    rc = fl_backend_cuda_create(&b, m, &o, &e);
    if (!gpu)
        CHECK(rc == FL_EUNSUPPORTED && !b && starts(e.msg, "cuda: "),
              "fl_backend_cuda_create without a GPU: rc %d, %s", rc, e.msg);
    fl_backend_destroy(b);
    fl_model_free(m);

    /* a mixture-of-experts model (decode.cmake's LLaDA2 fixture): CUDA runs it only with
     * FL_CUDA_MOE=1 (compiled, not yet verified on a GPU), refused before any GPU is looked
     * for; auto then takes the CPU */
    const char *bd = getenv("FL_BUILD_DIR");
    snprintf(dir, sizeof dir, "%s/fixtures/dec_llada2", bd ? bd : ".");
    m = NULL;
    CHECK(fl_model_load(&m, dir, &lo, &e) == 0, "%s: %s", dir, e.msg);
    if (!m)
        return check_summary("test_cuda_select");
    unsetenv("FL_CUDA_MOE");
    b = NULL;
    rc = fl_backend_cuda_create(&b, m, &o, &e);
    CHECK(rc == FL_EUNSUPPORTED && !b &&
              (fl_backend_have_cuda()
                   ? starts(e.msg, "cuda backend: llada2 models (mixture of experts) on CUDA are "
                                   "not yet verified on a GPU: use the CPU backend, or set "
                                   "FL_CUDA_MOE=1")
                   : strstr(e.msg, "built without the CUDA backend") != NULL),
          "cuda on a MoE model without FL_CUDA_MOE: rc %d, %s", rc, e.msg);
    rc = fl_backend_open(&b, m, &o, "auto", chosen, sizeof chosen, &e);
    CHECK(rc == 0 && b && !strcmp(b->ops->name, "cpu"), "auto on a MoE model: rc %d, %s", rc,
          rc ? e.msg : chosen);
    if (b) {
        /* the CUDA extras refuse a CPU backend */
        fl_cuda_moe_stats ms;
        int32_t ids[4] = {0};
        float w[4] = {0};
        int want = fl_backend_have_cuda() ? FL_EINVAL : FL_EUNSUPPORTED;
        CHECK(fl_cuda_moe_stats_get(b, &ms, &e) == want && ms.moe_layers == 0,
              "fl_cuda_moe_stats_get on a CPU backend: %s", e.msg);
        CHECK(fl_cuda_force_routes(b, ids, w, 1024, &e) == want,
              "fl_cuda_force_routes on a CPU backend: %s", e.msg);
    }
    fl_backend_destroy(b);
    setenv("FL_CUDA_MOE", "1", 1);
    b = NULL;
    rc = fl_backend_cuda_create(&b, m, &o, &e);
    if (gpu)
        CHECK(rc == 0 && b, "cuda on a MoE model with FL_CUDA_MOE=1 and a GPU: rc %d, %s", rc,
              rc ? e.msg : "");
    else
        CHECK(rc == FL_EUNSUPPORTED && !b && starts(e.msg, "cuda: "),
              "cuda on a MoE model with FL_CUDA_MOE=1, no GPU: rc %d, %s", rc, e.msg);
    fl_backend_destroy(b);
    unsetenv("FL_CUDA_MOE");
    fl_model_free(m);
    return check_summary("test_cuda_select");
}
