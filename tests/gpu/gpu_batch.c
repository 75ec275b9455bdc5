/* gpu_batch.c: many sequences at once under the scheduler (issue 33's "big batches": an
 * SDAR-4B-shaped model, block 4, 128 sequences), on a random model written by make_model: its
 * prompts are random token ids (such a model has no tokenizer), its decoding the model's own
 * (the SDAR family's: threshold 0.9, no pipelining), with decode-store overlap and asynchronous
 * persistence as the server runs. All sequences are added at once. Per concurrency: wall time,
 * forwards, rows per forward, reply tokens, tokens per forward per sequence (TPF), tokens/s over
 * the whole run, and the tokens committed after the last sequence's first update (every prefill
 * is over then) per second from then on.
 * A random model is rarely confident: threshold decoding then decides about one token per
 * step (TPF ~1), so its tokens/s are a lower bound of what a trained model of the same shape
 * gets from the same forwards.
 *
 *   gpu_batch --model DIR [--conc 1,32,128] [--prompt 512] [--max-tokens 64]
 *             [--device cuda|cpu] [--seed 1] [--json FILE]
 *
 * Exit 0 when every sequence finished, 1 otherwise, 2 on bad flags, 77 with no GPU
 * (--device cuda). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_select.h"
#include "config.h"
#include "engine.h"
#include "fl_cuda.h"
#include "model.h"

#define MAX_CONCS 8

typedef struct out { /* one sequence */
    double t_first; /* its first draft or commit (0: none yet) */
    long long tokens;
    double tpf; /* its reply tokens per forward it took part in */
    double *ct;  /* (cap) when each of its commits came */
    int32_t *cn; /* (cap) how many tokens each committed */
    int nc, cap;
    int done;
    fl_finish finish;
} out;

static void sink(const fl_event *ev, void *ctx)
{
    out *o = ctx;
    if ((ev->type == FL_EV_DRAFT || ev->type == FL_EV_COMMIT) && o->t_first == 0)
        o->t_first = fl_now();
    if (ev->type == FL_EV_COMMIT && o->nc < o->cap) {
        o->ct[o->nc] = fl_now();
        o->cn[o->nc++] = ev->n_ids;
    }
    if (ev->type == FL_EV_DONE) {
        o->tokens = ev->stats->reply_tokens;
        o->tpf = ev->stats->tpf;
        o->finish = ev->finish;
        o->done = 1;
    }
}

static int parse_list(const char *s, int *vals, int cap)
{
    int n = 0;
    while (*s) {
        char *end = NULL;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 4096 || n == cap || (*end && *end != ','))
            return -1;
        vals[n++] = (int)v;
        s = *end ? end + 1 : end;
    }
    return n;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *device = "cuda", *json = NULL, *conc_s = "1,32,128";
    long prompt = 512, max_tokens = 64, seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "gpu_batch: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--model"))
            model = v;
        else if (!strcmp(a, "--device"))
            device = v;
        else if (!strcmp(a, "--json"))
            json = v;
        else if (!strcmp(a, "--conc"))
            conc_s = v;
        else if (!strcmp(a, "--prompt") || !strcmp(a, "--max-tokens") || !strcmp(a, "--seed")) {
            char *end = NULL;
            long x = strtol(v, &end, 10);
            if (*end || x < (strcmp(a, "--seed") ? 1 : 0) || x > 1000000) {
                fprintf(stderr, "gpu_batch: %s: bad value '%s'\n", a, v);
                return 2;
            }
            *(!strcmp(a, "--prompt") ? &prompt : !strcmp(a, "--max-tokens") ? &max_tokens : &seed) = x;
        } else {
            fprintf(stderr, "gpu_batch: unknown option %s\n", a);
            return 2;
        }
    }
    int concs[MAX_CONCS];
    int nconc = parse_list(conc_s, concs, MAX_CONCS);
    if (!model || nconc < 1) {
        fprintf(stderr, "usage: gpu_batch --model DIR [--conc 1,32,128] [--prompt 512] [--max-tokens 64]\n"
                        "                 [--device cuda|cpu] [--seed 1] [--json FILE]\n");
        return 2;
    }
    char why[700];
    if (!strcmp(device, "cuda") && !fl_cuda_probe(why, sizeof why)) {
        printf("gpu_batch: skipped: no GPU (%s)\n", why);
        return 77;
    }
    int cmax = 0;
    for (int i = 0; i < nconc; i++)
        cmax = concs[i] > cmax ? concs[i] : cmax;
    fl_err e = {0};
    fl_model *m = NULL;
    fl_load_opts lo = {.no_tokenizer = true};
    if (fl_model_load(&m, model, &lo, &e)) {
        fprintf(stderr, "gpu_batch: %s\n", e.msg);
        return 1;
    }
    int32_t B = m->cfg.block_size, V = m->cfg.vocab;
    fl_decode_opts d;
    uint8_t src[FL_DF_COUNT];
    fl_config_decode_defaults(&m->cfg, &d, src);
    /* pages: each sequence's prompt and reply, plus the blocks decoding may run ahead */
    int32_t per_seq = fl_pages_needed(&m->cfg, (int32_t)prompt, (int32_t)max_tokens, &d) + 2;
    int32_t rows = cmax * (int32_t)prompt < 16384 ? cmax * (int32_t)prompt : 16384;
    if (rows < cmax * 4 * B)
        rows = cmax * 4 * B;
    fl_backend_opts bo = {.n_pages = per_seq * cmax + 16, .max_tokens = rows};
    fl_backend *b = NULL;
    if (fl_backend_open(&b, m, &bo, device, why, sizeof why, &e)) {
        fprintf(stderr, "gpu_batch: %s\n", e.msg);
        fl_model_free(m);
        return 1;
    }
    /* random prompts, the same for every concurrency: sequence i's are ids of a xorshift */
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cmax * (size_t)prompt);
    out *o = calloc((size_t)cmax, sizeof *o);
    int ccap = (int)(max_tokens / B) + 4; /* commits per sequence at most */
    double *ct = malloc(sizeof(double) * (size_t)cmax * (size_t)ccap);
    int32_t *cn = malloc(sizeof(int32_t) * (size_t)cmax * (size_t)ccap);
    if (!ids || !o || !ct || !cn) {
        fprintf(stderr, "gpu_batch: out of memory\n");
        return 1;
    }
    uint64_t x = 0x9e3779b97f4a7c15ull ^ (uint64_t)seed;
    for (size_t i = 0; i < (size_t)cmax * (size_t)prompt; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        ids[i] = (int32_t)(x % (uint64_t)V);
    }
    printf("gpu_batch: %s, block %d, prompts of %ld random tokens, max_tokens %ld, policy %s "
           "threshold %.2f pipeline %s\nbackend: %s\n\n",
           model, B, prompt, max_tokens, fl_policy_name(d.policy), d.threshold, d.pipeline ? "on" : "off", why);
    printf("| conc | wall s | forwards | rows/fwd | reply tokens | TPF | tokens/s | tokens/s after prefill |\n"
           "|---|---|---|---|---|---|---|---|\n");
    FILE *jf = json ? fopen(json, "w") : NULL;
    if (json && !jf)
        fprintf(stderr, "gpu_batch: cannot write %s\n", json);
    if (jf)
        fprintf(jf, "{\"model\": \"%s\", \"block\": %d, \"prompt\": %ld, \"max_tokens\": %ld, \"runs\": [", model,
                B, prompt, max_tokens);
    int rc = 0;
    for (int ci = 0; ci < nconc && !rc; ci++) {
        int conc = concs[ci];
        fl_sched_opts so = {.max_batch_tokens = rows, .max_seqs = conc, .async_persist = true,
                            .model_id = fl_model_fingerprint(m)};
        fl_sched *s = NULL;
        if (fl_sched_create(&s, m, b, &so, &e)) {
            fprintf(stderr, "gpu_batch: %s\n", e.msg);
            rc = 1;
            break;
        }
        memset(o, 0, sizeof *o * (size_t)conc);
        for (int i = 0; i < conc; i++)
            o[i].ct = ct + (size_t)i * (size_t)ccap, o[i].cn = cn + (size_t)i * (size_t)ccap, o[i].cap = ccap;
        double t0 = fl_now();
        for (int i = 0; i < conc && !rc; i++) {
            fl_request rq = {.prompt = ids + (size_t)i * (size_t)prompt, .n_prompt = (int32_t)prompt,
                             .max_tokens = (int32_t)max_tokens, .dec = d};
            if (fl_sched_add(s, &rq, sink, &o[i], (uint64_t)i + 1, &e)) {
                fprintf(stderr, "gpu_batch: %s\n", e.msg);
                rc = 1;
            }
        }
        int finished = 0;
        while (!rc && finished < conc) {
            if (fl_sched_step(s, &e) < 0) {
                fprintf(stderr, "gpu_batch: %s\n", e.msg);
                rc = 1;
            }
            finished = 0;
            for (int i = 0; i < conc; i++)
                finished += o[i].done;
        }
        fl_sched_flush(s);
        double t_end = fl_now(), wall = t_end - t0, t_pre = t0, tpf = 0;
        fl_sched_stats st;
        fl_sched_get_stats(s, &st);
        fl_sched_destroy(s);
        long long tokens = 0;
        for (int i = 0; i < conc; i++) {
            tokens += o[i].tokens;
            tpf += o[i].tpf / conc;
            t_pre = o[i].t_first > t_pre ? o[i].t_first : t_pre;
            if (o[i].finish == FL_FINISH_ERROR)
                rc = 1;
        }
        /* after the last sequence's first update every prefill is over: the tokens committed
         * from then on, over the time from then on */
        long long late = 0;
        for (int i = 0; i < conc; i++)
            for (int k = 0; k < o[i].nc; k++)
                late += o[i].ct[k] > t_pre ? o[i].cn[k] : 0;
        double after = t_end - t_pre;
        printf("| %d | %.2f | %lld | %.1f | %lld | %.2f | %.0f | %.0f |\n", conc, wall, (long long)st.forwards,
               st.forwards ? (double)st.tokens_forwarded / (double)st.forwards : 0, tokens, tpf,
               (double)tokens / wall, after > 0 ? (double)late / after : 0);
        if (jf)
            fprintf(jf, "%s{\"conc\": %d, \"wall_s\": %.4f, \"forwards\": %lld, \"reply_tokens\": %lld, "
                        "\"tpf\": %.3f, \"tokens_per_s\": %.1f, \"tokens_per_s_after_prefill\": %.1f}",
                    ci ? ", " : "", conc, wall, (long long)st.forwards, tokens, tpf, (double)tokens / wall,
                    after > 0 ? (double)late / after : 0);
        fflush(stdout);
    }
    if (jf) {
        fprintf(jf, "]}\n");
        fclose(jf);
    }
    free(ids);
    free(o);
    free(ct);
    free(cn);
    fl_backend_destroy(b);
    fl_model_free(m);
    return rc;
}
