/* gpu_sched.c: where a forward's time goes when the scheduler drives the CUDA backend on a
 * small model (the built-in default model in tests/gpu/run.sh): held-out prompts decoded with
 * threshold 0.9, overlap, pipelining and asynchronous persistence (as the server runs), 1, 4
 * and 16 sequences in flight. For each: wall time,
 * forwards, rows per forward, tokens/s, and per forward the host time spent planning the
 * batch, enqueueing it (launches, or capture + instantiate + launch), waiting for the GPU,
 * and in the scheduler outside the backend; graphs replayed / captured / run eagerly.
 *
 *   gpu_sched --model DIR --prompts FILE [--n 32] [--device cuda|cpu]
 *
 * Exit 0 when every run completed, 1 otherwise, 77 with no GPU (--device cuda). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "engine.h"
#include "fl_cuda.h"

int main(int argc, char **argv)
{
    const char *model = NULL, *prompts = NULL, *device = "cuda";
    int n = 32, max_tokens = 96;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model"))
            model = argv[i + 1];
        else if (!strcmp(argv[i], "--prompts"))
            prompts = argv[i + 1];
        else if (!strcmp(argv[i], "--n"))
            n = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--device"))
            device = argv[i + 1];
        else {
            fprintf(stderr, "gpu_sched: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (!model || !prompts || n < 1) {
        fprintf(stderr, "usage: gpu_sched --model DIR --prompts FILE [--n N] [--device cuda|cpu]\n");
        return 2;
    }
    char why[512];
    if (!strcmp(device, "cuda") && !fl_cuda_probe(why, sizeof why)) {
        printf("gpu_sched: skipped: no GPU (%s)\n", why);
        return 77;
    }
    fl_bench_env env;
    if (fl_bench_env_open(&env, "sched", model, prompts, n, 16, max_tokens, 0, device,
                          FL_WEIGHTS_AUTO))
        return 1;
    const fl_model *m = env.m;
    fl_backend *b = env.b;
    const fl_bench_item *items = env.items;
    n = env.n;
    fl_err e = {0};
    printf("gpu_sched: %s, %d prompts, max_tokens %d\nbackend: %s\n\n", model, n, max_tokens, env.chosen);
    printf("| conc | wall ms | forwards | rows/fwd | tokens/s | plan us | enqueue us | capture us | "
           "wait us | sched us | replayed/captured/eager |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    static const int concs[] = {1, 4, 16, 1};
    int rc = 0;
    for (size_t ci = 0; ci < sizeof concs / sizeof concs[0] && !rc; ci++) {
        int conc = concs[ci];
        fl_sched_opts so = {.max_batch_tokens = b->max_tokens, .max_seqs = conc,
                            .async_persist = true, .model_id = fl_model_fingerprint(m)};
        fl_sched *s = NULL;
        if (fl_sched_create(&s, m, b, &so, &e)) {
            fprintf(stderr, "gpu_sched: %s\n", e.msg);
            rc = 1;
            break;
        }
        fl_bench_out *res = calloc((size_t)n, sizeof *res);
        fl_decode_opts d;
        fl_decode_opts_default(&d);
        fl_cuda_stats c0, c1;
        fl_cuda_get_stats(b, &c0);
        double t0 = fl_now();
        int next = 0, finished = 0;
        long long fw = 0, rows = 0;
        while (finished < n && !rc) {
            while (next < n && next - finished < conc) {
                fl_request rq = {.prompt = items[next].ids, .n_prompt = (int32_t)items[next].n,
                                 .max_tokens = max_tokens, .dec = d};
                if (fl_sched_add(s, &rq, fl_bench_sink, &res[next], (uint64_t)next + 1, &e)) {
                    fprintf(stderr, "gpu_sched: %s\n", e.msg);
                    rc = 1;
                    break;
                }
                next++;
            }
            if (!rc && fl_sched_step(s, &e) < 0) {
                fprintf(stderr, "gpu_sched: %s\n", e.msg);
                rc = 1;
            }
            finished = 0;
            for (int i = 0; i < next; i++)
                finished += res[i].done;
        }
        fl_sched_flush(s);
        double wall = fl_now() - t0;
        fl_cuda_get_stats(b, &c1);
        fl_sched_stats st;
        fl_sched_get_stats(s, &st);
        fw = st.forwards;
        rows = st.tokens_forwarded;
        long long tokens = 0;
        for (int i = 0; i < n; i++) {
            tokens += res[i].st.reply_tokens;
            free(res[i].text);
        }
        free(res);
        fl_sched_destroy(s);
        double f = fw ? 1e6 / (double)fw : 0;
        double backend = (c1.plan_s - c0.plan_s) + (c1.run_s - c0.run_s) + (c1.wait_s - c0.wait_s);
        printf("| %d | %.1f | %lld | %.1f | %.0f | %.1f | %.1f | %.1f | %.1f | %.1f | %lld/%lld/%lld |\n",
               conc, wall * 1e3, fw, fw ? (double)rows / (double)fw : 0, tokens / wall,
               (c1.plan_s - c0.plan_s) * f, (c1.run_s - c0.run_s) * f,
               (c1.capture_s - c0.capture_s) * f, (c1.wait_s - c0.wait_s) * f,
               (wall - backend) * f, c1.replayed - c0.replayed, c1.captured - c0.captured,
               c1.eager - c0.eager);
        fflush(stdout);
    }
    fl_bench_env_close(&env);
    return rc;
}
