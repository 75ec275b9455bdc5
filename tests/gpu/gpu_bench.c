/* gpu_bench.c: the CUDA backend's step time on a model (a SDAR-1.7B-shaped random one in
 * tests/gpu/run.sh): one denoise step of a block of B new tokens per sequence over `ctx`
 * cached positions, for a batch of 1 and of 64 sequences, next to the memory-bandwidth floor
 * of the step measured in the same run (weight bytes streamed per step / the device copy
 * bandwidth, bytes read plus written per second).
 *
 *   gpu_bench --model DIR [--ctx 512] [--batches 1,64] [--steps 30] [--json PATH] [--moe]
 *             [--default-only]
 *
 * --default-only: the default variant alone (a FL_CUDA_KTIME=1 run, whose table per kernel
 * is printed when its backend is destroyed, needs no other).
 * --moe (a mixture-of-experts model: FL_CUDA_MOE=1): the default variant at every batch,
 * eager at batch 1, the tensor-core matmul (FL_CUDA_MV=tc: k_moe_mv_tc) at every batch, and
 * with it the experts' grouped GEMM (FL_CUDA_MOE_GEMM=1, gemm_tc.cuh) where they average 16
 * rows or more;
 * a step's floor is the bytes it read (the experts its tokens went to, fl_cuda_moe_stats_get,
 * plus every other matrix), and the table says how many experts a layer touched.
 *
 * Variants (each on a new backend): the default (graphs, streaming matmul for <= 8 rows),
 * tensor-core attention (FL_CUDA_ATTN=tc), the few-row attention (FL_CUDA_ATTN=few, splits
 * merged in the kernel), the streaming matmuls' programmatic launch (FL_CUDA_PDL=1), the
 * streaming matmul on tensor cores (FL_CUDA_MV=tc, the RMSNorms inside its products), the
 * three together, and q8 weights (its own floor: its bytes; with and without the tensor-core
 * matmul, and with the q8 GEMM above the streaming rows, FL_CUDA_Q8_GEMM=1) at every batch; eager, cuBLAS only and the tensor-core matmul with the RMSNorms in
 * their own kernel (FL_CUDA_NORM_FUSE=0) at batch 1. Prints a table and one JSON line (also
 * written to --json). Exit 0 when every run completed, 1 otherwise, 77 with no
 * GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "fl_cuda.h"
#include "model.h"

#define MAX_BATCHES 8

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct result {
    const char *variant;
    int batch;
    double med_ms, min_ms, mean_ms, tok_s;
    long long replayed;
    size_t stream; /* weight bytes a step of this variant streams */
    double touched; /* --moe: routed experts a MoE layer's step touched (last step) */
    char note[200];
    int ok;
} result;

typedef struct bench {
    const fl_model *m;
    int B, V, ctx, steps;
    uint32_t lcg;
    bool moe;
} bench;

static int32_t rnd_tok(bench *k)
{
    k->lcg = k->lcg * 1664525u + 1013904223u;
    return (int32_t)((k->lcg >> 8) % (uint32_t)k->V);
}

/* Prefills nseq sequences of ctx tokens (stored), then times steps of nb segments. */
static int run_variant(bench *k, const char *variant, const char *graphs, const char *skinny,
                       const char *attn, const char *pdl, const char *mv, const char *norm,
                       fl_wformat weights,
                       const int *batches, int n_batches, result *res, int *n_res, double *bw,
                       size_t *stream_bytes, char *desc, size_t desc_cap)
{
    setenv("FL_CUDA_GRAPHS", graphs, 1);
    setenv("FL_CUDA_SKINNY_ROWS", skinny, 1);
    setenv("FL_CUDA_ATTN", attn, 1);
    setenv("FL_CUDA_PDL", pdl, 1);
    setenv("FL_CUDA_MV", mv, 1);
    setenv("FL_CUDA_NORM_FUSE", norm, 1);
    int B = k->B, maxb = 1;
    for (int i = 0; i < n_batches; i++)
        maxb = batches[i] > maxb ? batches[i] : maxb;
    int per_seq = k->ctx / B + 2;
    int max_tokens = maxb * B > 512 ? maxb * B : 512;
    fl_backend_opts o = {.n_pages = maxb * per_seq + 8, .max_tokens = max_tokens, .weights = weights};
    fl_backend *b = NULL;
    fl_err e = {0, {0}};
    double t0 = fl_now();
    if (fl_backend_cuda_create(&b, k->m, &o, &e)) {
        printf("FAIL bench [%s]: create: %s\n", variant, e.msg);
        return -1;
    }
    printf("bench [%s]: backend created in %.1f s: %s\n", variant, fl_now() - t0,
           fl_cuda_describe(b));
    snprintf(desc, desc_cap, "%s", fl_cuda_describe(b));
    if (bw && *bw == 0) {
        if (fl_cuda_copy_bandwidth(b, (size_t)1 << 30, 5, bw, &e))
            printf("FAIL bench: bandwidth: %s\n", e.msg);
        *stream_bytes = fl_cuda_weight_stream_bytes(b);
    }
    /* prefill: each sequence's ctx tokens in forwards of up to max_tokens, stored */
    int32_t *pages = malloc((size_t)maxb * per_seq * sizeof *pages);
    int32_t *tok = malloc((size_t)max_tokens * sizeof *tok);
    fl_tok_out *out = malloc((size_t)max_tokens * sizeof *out);
    fl_segment *segs = malloc((size_t)maxb * sizeof *segs);
    for (int i = 0; i < maxb * per_seq; i++)
        pages[i] = i;
    int rc = 0;
    t0 = fl_now();
    for (int s = 0; s < maxb && !rc; s++)
        for (int p = 0; p < k->ctx && !rc; p += max_tokens) {
            int n = k->ctx - p < max_tokens ? k->ctx - p : max_tokens;
            for (int i = 0; i < n; i++)
                tok[i] = rnd_tok(k);
            fl_segment sg = {n, p, n, n, pages + (size_t)s * per_seq, NULL};
            fl_batch bt = {tok, n, &sg, 1};
            rc = fl_forward(b, &bt, NULL, NULL, &e);
        }
    double pre_s = fl_now() - t0;
    if (rc)
        printf("FAIL bench [%s]: prefill: %s\n", variant, e.msg);
    else
        printf("bench [%s]: prefilled %d x %d tokens in %.2f s (%.0f tokens/s)\n", variant,
               maxb, k->ctx, pre_s, maxb * k->ctx / pre_s);
    for (int bi = 0; bi < n_batches && !rc; bi++) {
        int nb = batches[bi], n = nb * B;
        for (int s = 0; s < nb; s++)
            segs[s] = (fl_segment){B, k->ctx, 0, 0, pages + (size_t)s * per_seq, NULL};
        double *ms = malloc((size_t)k->steps * sizeof *ms);
        fl_cuda_stats st0, st1;
        fl_cuda_get_stats(b, &st0);
        for (int it = -3; it < k->steps && !rc; it++) { /* 3 warm-ups: eager, capture, replay */
            for (int i = 0; i < n; i++)
                tok[i] = rnd_tok(k);
            fl_batch bt = {tok, n, segs, nb};
            double a = fl_now();
            rc = fl_forward(b, &bt, out, NULL, &e);
            double z = fl_now();
            if (it >= 0)
                ms[it] = (z - a) * 1e3;
        }
        fl_cuda_get_stats(b, &st1);
        result *r = &res[(*n_res)++];
        memset(r, 0, sizeof *r);
        r->variant = variant;
        r->batch = nb;
        r->stream = fl_cuda_weight_stream_bytes(b);
        if (rc) {
            snprintf(r->note, sizeof r->note, "%.190s", e.msg);
            printf("FAIL bench [%s] batch %d: %s\n", variant, nb, e.msg);
        } else {
            double sum = 0;
            for (int i = 0; i < k->steps; i++)
                sum += ms[i];
            qsort(ms, (size_t)k->steps, sizeof *ms, cmp_d);
            r->med_ms = k->steps % 2 ? ms[k->steps / 2] : 0.5 * (ms[k->steps / 2 - 1] + ms[k->steps / 2]);
            r->min_ms = ms[0];
            r->mean_ms = sum / k->steps;
            r->tok_s = n / (r->med_ms * 1e-3);
            r->replayed = st1.replayed - st0.replayed;
            fl_cuda_moe_stats ms_;
            if (k->moe && fl_cuda_moe_stats_get(b, &ms_, &e) == 0 && ms_.moe_layers) {
                r->touched = (double)ms_.touched / ms_.moe_layers;
                r->stream = r->stream - (size_t)ms_.expert_bytes_all + (size_t)ms_.expert_bytes;
            }
            snprintf(r->note, sizeof r->note, "graphs: %.180s", st1.graphs_note);
            r->ok = 1;
        }
        free(ms);
    }
    free(pages);
    free(tok);
    free(out);
    free(segs);
    fl_backend_destroy(b);
    unsetenv("FL_CUDA_GRAPHS");
    unsetenv("FL_CUDA_SKINNY_ROWS");
    unsetenv("FL_CUDA_ATTN");
    unsetenv("FL_CUDA_PDL");
    unsetenv("FL_CUDA_MV");
    unsetenv("FL_CUDA_NORM_FUSE");
    return rc;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *json = NULL;
    bench k = {0};
    k.ctx = 512;
    k.steps = 30;
    k.lcg = 42;
    int batches[MAX_BATCHES] = {1, 64}, n_batches = 2;
    bool only_default = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc)
            model = argv[++i];
        else if (!strcmp(argv[i], "--ctx") && i + 1 < argc)
            k.ctx = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            k.steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json = argv[++i];
        else if (!strcmp(argv[i], "--moe"))
            k.moe = true;
        else if (!strcmp(argv[i], "--default-only"))
            only_default = true;
        else if (!strcmp(argv[i], "--batches") && i + 1 < argc) {
            n_batches = 0;
            for (char *s = argv[++i]; *s && n_batches < MAX_BATCHES;) {
                char *end;
                long v = strtol(s, &end, 10);
                if (end == s || v <= 0 || v > 4096)
                    break;
                batches[n_batches++] = (int)v;
                s = *end == ',' ? end + 1 : end;
            }
        } else {
            fprintf(stderr, "usage: gpu_bench --model DIR [--ctx 512] [--batches 1,64] "
                            "[--steps 30] [--json PATH] [--moe] [--default-only]\n");
            return 2;
        }
    }
    if (!model || k.ctx < 0 || k.steps <= 0 || n_batches == 0) {
        fprintf(stderr, "gpu_bench: --model is required (and positive --steps, --batches)\n");
        return 2;
    }
    char why[512];
    if (!fl_cuda_probe(why, sizeof why)) {
        printf("gpu_bench: skipped: no GPU (%s)\n", why);
        return 77;
    }
    fl_model *m = NULL;
    fl_err e = {0, {0}};
    fl_load_opts lo = {.no_tokenizer = true};
    if (fl_model_load(&m, model, &lo, &e)) {
        printf("FAIL bench: cannot load %s: %s\n", model, e.msg);
        return 1;
    }
    k.m = m;
    k.B = m->cfg.block_size;
    k.V = m->cfg.vocab;
    if (k.ctx % k.B)
        k.ctx -= k.ctx % k.B; /* whole cached blocks: every step is one block */
    result res[128]; /* 12 variants x MAX_BATCHES at most */
    int n_res = 0, fails = 0;
    double bw = 0;
    size_t stream = 0;
    char desc[700] = "";
    char scratch[700];
    int one[1] = {1};
    const fl_wformat bf = FL_WEIGHTS_AUTO;
    if (k.moe && m->cfg.moe.router == FL_ROUTER_NONE) {
        printf("FAIL bench: --moe: %s has no experts\n", model);
        fl_model_free(m);
        return 1;
    }
    if (k.moe)
        setenv("FL_CUDA_MOE", "1", 1);
    fails += run_variant(&k, "graphs, streaming matmul (default)", "1", "8", "", "0", "", "", bf,
                         batches, n_batches, res, &n_res, &bw, &stream, desc, sizeof desc) != 0;
    if (k.moe && !only_default) {
        fails += run_variant(&k, "eager, streaming matmul", "0", "8", "", "0", "", "", bf, one, 1, res,
                             &n_res, NULL, NULL, scratch, sizeof scratch) != 0;
        fails += run_variant(&k, "graphs, tensor-core matmul", "1", "8", "", "0", "tc", "", bf,
                             batches, n_batches, res, &n_res, NULL, NULL, scratch,
                             sizeof scratch) != 0;
        /* FL_CUDA_MOE_GEMM=1: the experts' grouped GEMM where they average 16 rows or more
         * (batch 32 of block 32: 1,024 tokens, 32 a LLaDA2.0-mini expert), else as above */
        setenv("FL_CUDA_MOE_GEMM", "1", 1);
        fails += run_variant(&k, "graphs, tc matmul + grouped GEMM", "1", "8", "", "0", "tc", "",
                             bf, batches, n_batches, res, &n_res, NULL, NULL, scratch,
                             sizeof scratch) != 0;
        unsetenv("FL_CUDA_MOE_GEMM");
    }
    /* name, graphs, streaming rows, FL_CUDA_ATTN, FL_CUDA_PDL, FL_CUDA_MV,
     * FL_CUDA_NORM_FUSE, weights, all batches (else batch 1 only). The tensor-core matmul
     * runs the RMSNorms inside its products unless FL_CUDA_NORM_FUSE=0. */
    static const struct {
        const char *name, *graphs, *skinny, *attn, *pdl, *mv, *norm;
        fl_wformat wf;
        bool all;
    } more[] = {
        {"eager, streaming matmul", "0", "8", "", "0", "", "", FL_WEIGHTS_AUTO, false},
        {"graphs, cuBLAS only", "1", "0", "", "0", "", "", FL_WEIGHTS_AUTO, false},
        {"graphs, tensor-core attention", "1", "8", "tc", "0", "", "", FL_WEIGHTS_AUTO, true},
        {"graphs, few-row attention", "1", "8", "few", "0", "", "", FL_WEIGHTS_AUTO, true},
        {"graphs, programmatic launch", "1", "8", "", "1", "", "", FL_WEIGHTS_AUTO, true},
        {"graphs, tensor-core matmul", "1", "8", "", "0", "tc", "", FL_WEIGHTS_AUTO, true},
        {"graphs, tc matmul, norms separate", "1", "8", "", "0", "tc", "0", FL_WEIGHTS_AUTO,
         false},
        {"graphs, few-row + tc matmul + PDL", "1", "8", "few", "1", "tc", "", FL_WEIGHTS_AUTO,
         true},
        {"graphs, q8 weights, tc matmul", "1", "8", "", "0", "tc", "", FL_WEIGHTS_Q8, true},
        /* FL_CUDA_Q8_GEMM=1: above the streaming rows, the q8 GEMM (gemm_tc.cuh) */
        {"graphs, q8 weights, q8 GEMM", "1", "8", "", "0", "", "", FL_WEIGHTS_Q8, true},
        {"graphs, q8 weights", "1", "8", "", "0", "", "", FL_WEIGHTS_Q8, true}, /* last: see below */
    };
    for (size_t i = 0; !k.moe && !only_default && i < sizeof more / sizeof more[0]; i++) {
        setenv("FL_CUDA_Q8_GEMM", strstr(more[i].name, "q8 GEMM") ? "1" : "0", 1);
        fails += run_variant(&k, more[i].name, more[i].graphs, more[i].skinny, more[i].attn,
                             more[i].pdl, more[i].mv, more[i].norm, more[i].wf,
                             more[i].all ? batches : one,
                             more[i].all ? n_batches : 1, res, &n_res, NULL, NULL, scratch,
                             sizeof scratch) != 0;
    }
    unsetenv("FL_CUDA_Q8_GEMM");
    double floor_ms = bw > 0 ? stream / bw * 1e3 : NAN;
    printf("\nbench: model %s: %d layers, hidden %d, vocab %d, block %d; ctx %d cached tokens "
           "per sequence\n", model, m->cfg.n_layers, m->cfg.hidden, m->cfg.vocab, k.B, k.ctx);
    printf("bench: weights streamed per step %.3f GB; device copy bandwidth %.0f GB/s "
           "(read + written); floor %.3f ms per step\n", stream / 1e9, bw / 1e9, floor_ms);
    printf("(x floor: against the variant's own bytes: q8's are %.3f GB)\n",
           n_res ? res[n_res - 1].stream / 1e9 : 0.0);
    if (k.moe)
        printf("(--moe: each row's floor is the bytes its last step read; touched: routed "
               "experts per MoE layer, of %d)\n", m->cfg.moe.n_experts);
    printf("%-36s %6s %10s %10s %12s %10s %9s%s\n", "variant", "batch", "step ms", "min ms",
           "tokens/s", "x floor", "replayed", k.moe ? "  GB read  touched" : "");
    for (int i = 0; i < n_res; i++) {
        result *r = &res[i];
        if (!r->ok) {
            printf("%-36s %6d FAILED: %s\n", r->variant, r->batch, r->note);
            continue;
        }
        double fl = bw > 0 && r->stream ? r->stream / bw * 1e3 : floor_ms;
        printf("%-36s %6d %10.3f %10.3f %12.0f %10.2f %9lld", r->variant, r->batch, r->med_ms,
               r->min_ms, r->tok_s, r->med_ms / fl, r->replayed);
        if (k.moe)
            printf(" %8.3f %8.1f", r->stream / 1e9, r->touched);
        printf("\n");
    }
    FILE *f = json ? fopen(json, "w") : NULL;
    for (int pass = 0; pass < 2; pass++) {
        FILE *o = pass ? f : stdout;
        if (!o)
            continue;
        fprintf(o, "{\"model\": \"%s\", \"layers\": %d, \"hidden\": %d, \"vocab\": %d, "
                "\"block\": %d, \"ctx\": %d, \"stream_bytes\": %zu, \"copy_bw\": %.6g, "
                "\"floor_ms\": %.6g, \"runs\": [", model, m->cfg.n_layers, m->cfg.hidden,
                m->cfg.vocab, k.B, k.ctx, stream, bw, floor_ms);
        for (int i = 0; i < n_res; i++)
            fprintf(o, "%s{\"variant\": \"%s\", \"batch\": %d, \"ok\": %d, \"median_ms\": %.6g, "
                    "\"min_ms\": %.6g, \"mean_ms\": %.6g, \"tokens_s\": %.6g, \"replayed\": %lld, "
                    "\"stream_bytes\": %zu}",
                    i ? ", " : "", res[i].variant, res[i].batch, res[i].ok, res[i].med_ms,
                    res[i].min_ms, res[i].mean_ms, res[i].tok_s, res[i].replayed, res[i].stream);
        fprintf(o, "]}\n");
    }
    if (f)
        fclose(f);
    fl_model_free(m);
    return fails ? 1 : 0;
}
