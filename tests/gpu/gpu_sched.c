/* gpu_sched.c: where a forward's time goes when the scheduler drives the CUDA backend on a
 * small model (the built-in default model in tests/gpu/run.sh): held-out prompts decoded with
 * threshold 0.9, overlap, pipelining and asynchronous persistence (as the server runs), 1,
 * 4, 16 and 64 sequences in flight. Each run takes the prompts --rounds times over (a new
 * sequence joins as soon as one finishes), so that the batch shapes a server meets recur as
 * they do over minutes (one round at 16 is about a dozen forwards, too few for a graph to
 * be seen twice). For each: wall time, forwards, rows per forward, tokens/s, and per forward
 * the host time spent planning the batch, enqueueing it (launches, or capture + instantiate
 * + launch), waiting for the GPU, and in the scheduler outside the backend's forward (timed
 * around it, so on any backend: the scheduler's own cost per forward); the final flush
 * (the last pages persisted) on its own; graphs replayed / captured / run eagerly and the
 * captured graphs evicted. The backend, and its graphs, carry over from run to run, in the
 * order 1, 4, 16, 64, then 4 again: that last row is the steady state of a warm server.
 *
 * --graph-sim (any device): every batch the scheduler hands the backend also goes through
 * the CUDA backend's graph key and cache (cuda/flc_shape.h, the same code the backend runs)
 * under each shape policy, exact shapes and FL_CUDA_SHAPE_PAD's, for a GPU of --sm
 * multiprocessors (default 132, an H100 or H200), so that how often a graph would replay,
 * and what the padding costs in rows, can be counted on a machine without a GPU.
 *
 *   gpu_sched --model DIR --prompts FILE [--n 32] [--rounds 4] [--device cuda|cpu]
 *             [--graph-sim] [--sm 132]
 *
 * Exit 0 when every run completed, 1 otherwise, 77 with no GPU (--device cuda). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "engine.h"
#include "fl_cuda.h"
#include "flc_shape.h"

/* The backend's forward wrapped: timed (the scheduler's own host time is the rest), and with
 * --graph-sim each batch's key seen by every policy */
typedef struct sim_policy {
    const char *name;
    flc_shape_cfg cfg;
    flc_gcache gc;
    long long fw, first, capture, replay, evicted, rows, rows_key, outs, outs_key;
} sim_policy;

static sim_policy g_pol[2];
static int g_npol;
static const fl_backend_ops *g_real;
static fl_backend_ops g_wrap;
static double g_fwd_s; /* seconds inside the backend's forward */

/* --graph-sim: the batch's key under each policy, through the cache */
static int sim_see(const fl_backend *b, const fl_batch *bt, bool want_out, bool full_logits,
                   fl_err *e)
{
    const int rep = b->model->cfg.n_heads / b->model->cfg.n_kv_heads;
    int tiles = 0, n_out = 0, max_end = 0;
    for (int s = 0; s < bt->n_segs; s++) {
        const fl_segment *sg = &bt->segs[s];
        tiles += (sg->n * rep + FLC_QROWS - 1) / FLC_QROWS;
        for (int i = 0; i < sg->n; i++)
            n_out += fl_seg_wants(sg, i);
        if (sg->pos0 + sg->n > max_end)
            max_end = sg->pos0 + sg->n;
    }
    /* as the backend: outputs only when asked for, padded only without full logits */
    flc_shape_in in = {bt->n_tokens, bt->n_segs, want_out ? n_out : 0, tiles, max_end,
                       !full_logits};
    for (int i = 0; i < g_npol; i++) {
        sim_policy *p = &g_pol[i];
        flc_shape sh;
        if (flc_shape_of(&p->cfg, &in, &sh))
            return fl_err_set(e, FL_EINVAL, "gpu_sched: %d tiles exceed the bound", tiles);
        p->fw++;
        p->rows += in.T;
        p->rows_key += sh.T;
        p->outs += in.n_out;
        p->outs_key += sh.n_out;
        if (full_logits) { /* run eagerly, no key */
            p->first++;
            continue;
        }
        flc_gkey k = {sh.T, sh.S, sh.n_out, sh.n_splits};
        int slot;
        bool ev;
        int w = flc_gcache_see(&p->gc, &k, &slot, &ev);
        p->evicted += ev;
        if (w == FLC_G_FIRST)
            p->first++;
        else if (w == FLC_G_CAPTURE) {
            p->capture++;
            p->gc.s[slot].captured = true;
        } else
            p->replay++;
    }
    return 0;
}

static int wrapped_forward(fl_backend *b, const fl_batch *bt, fl_tok_out *out, float *logits,
                           fl_err *e)
{
    if (g_npol && sim_see(b, bt, out || logits, logits != NULL, e))
        return FL_EINVAL;
    double t0 = fl_now();
    int rc = g_real->forward(b, bt, out, logits, e);
    g_fwd_s += fl_now() - t0;
    return rc;
}

/* The backend's counters while its ops are the timing wrapper's (fl_cuda_get_stats knows a
 * CUDA backend by its own ops: through the wrapper it would report zeros) */
static void real_stats(fl_backend *b, fl_cuda_stats *st)
{
    const fl_backend_ops *w = b->ops;
    b->ops = g_real;
    fl_cuda_get_stats(b, st);
    b->ops = w;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *prompts = NULL, *device = "cuda";
    int n = 32, rounds = 4, max_tokens = 96, sim = 0, n_sm = 132;
    int active = -1; /* --graph-sim on a CUDA backend with graphs: the policy it runs */
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc && strcmp(argv[i], "--graph-sim")) {
            fprintf(stderr, "gpu_sched: %s needs a value\n", argv[i]);
            return 2;
        }
        if (!strcmp(argv[i], "--model"))
            model = argv[i + 1];
        else if (!strcmp(argv[i], "--prompts"))
            prompts = argv[i + 1];
        else if (!strcmp(argv[i], "--n"))
            n = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--graph-sim")) {
            sim = 1;
            i--;
        } else if (!strcmp(argv[i], "--sm"))
            n_sm = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rounds"))
            rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--device"))
            device = argv[i + 1];
        else {
            fprintf(stderr, "gpu_sched: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (!model || !prompts || n < 1 || rounds < 1 || rounds > 1000 || n_sm < 1 || n_sm > 4096) {
        fprintf(stderr, "usage: gpu_sched --model DIR --prompts FILE [--n N] [--rounds 1..1000] "
                        "[--device cuda|cpu] [--graph-sim] [--sm 1..4096]\n");
        return 2;
    }
    char why[512];
    if (!strcmp(device, "cuda") && !fl_cuda_probe(why, sizeof why)) {
        printf("gpu_sched: skipped: no GPU (%s)\n", why);
        return 77;
    }
    fl_bench_env env;
    if (fl_bench_env_open(&env, "sched", model, prompts, n, 64, max_tokens, 0, device,
                          FL_WEIGHTS_AUTO))
        return 1;
    const fl_model *m = env.m;
    fl_backend *b = env.b;
    const fl_bench_item *items = env.items;
    n = env.n;
    fl_err e = {0};
    printf("gpu_sched: %s, %d prompts x %d rounds, max_tokens %d\nbackend: %s\n\n", model, n,
           rounds, max_tokens, env.chosen);
    printf("| conc | wall ms | forwards | rows/fwd | tokens/s | plan us | enqueue us | "
           "capture us | wait us | sched us | flush ms | replayed/captured/eager | evicted |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    if (sim) {
        const fl_config *cf = &m->cfg;
        g_npol = 2;
        g_pol[0].name = "exact shapes";
        g_pol[1].name = "shapes padded";
        /* on a CUDA backend, its own parameters, and the policy it runs is checked against
         * its counters below */
        fl_cuda_stats cs;
        fl_cuda_get_stats(b, &cs);
        if (cs.n_sm > 0) {
            n_sm = cs.n_sm;
            active = cs.graphs_on ? cs.shape_pad : -1;
        }
        for (int i = 0; i < g_npol; i++)
            flc_shape_cfg_init(&g_pol[i].cfg, cf->n_heads / cf->n_kv_heads, cf->n_kv_heads,
                               cf->head_dim, n_sm, cs.n_sm > 0 ? cs.skinny_rows : FLC_SKINNY_MAX,
                               b->max_tokens, i == 1, cs.n_sm > 0 && cs.attn_few);
    }
    g_real = b->ops;
    g_wrap = *b->ops;
    g_wrap.forward = wrapped_forward;
    b->ops = &g_wrap;
    sim_policy simrow[5][2];
    fl_cuda_stats real[5];
    static const int concs[] = {1, 4, 16, 64, 4};
    const int total = n * rounds;
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
        fl_bench_out *res = calloc((size_t)total, sizeof *res);
        if (!res) {
            fl_sched_destroy(s);
            rc = 1;
            break;
        }
        fl_decode_opts d;
        fl_decode_opts_default(&d);
        fl_cuda_stats c0, c1;
        real_stats(b, &c0);
        sim_policy p0[2];
        memcpy(p0, g_pol, sizeof p0);
        const double fwd0 = g_fwd_s;
        double t0 = fl_now();
        int next = 0, finished = 0;
        long long fw = 0, rows = 0;
        while (finished < total && !rc) {
            while (next < total && next - finished < conc) {
                const fl_bench_item *it = &items[next % n];
                fl_request rq = {.prompt = it->ids, .n_prompt = (int32_t)it->n,
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
        double t1 = fl_now();
        fl_sched_flush(s);
        double wall = fl_now() - t0, flush = fl_now() - t1;
        real_stats(b, &c1);
        real[ci] = c1;
        real[ci].eager -= c0.eager;
        real[ci].captured -= c0.captured;
        real[ci].replayed -= c0.replayed;
        real[ci].evicted -= c0.evicted;
        for (int i = 0; i < g_npol; i++) {
            sim_policy *r = &simrow[ci][i];
            *r = g_pol[i];
            r->fw -= p0[i].fw;
            r->first -= p0[i].first;
            r->capture -= p0[i].capture;
            r->replay -= p0[i].replay;
            r->evicted -= p0[i].evicted;
            r->rows -= p0[i].rows;
            r->rows_key -= p0[i].rows_key;
            r->outs -= p0[i].outs;
            r->outs_key -= p0[i].outs_key;
        }
        fl_sched_stats st;
        fl_sched_get_stats(s, &st);
        fw = st.forwards;
        rows = st.tokens_forwarded;
        long long tokens = 0;
        for (int i = 0; i < total; i++) {
            tokens += res[i].st.reply_tokens;
            free(res[i].text);
        }
        free(res);
        fl_sched_destroy(s);
        double f = fw ? 1e6 / (double)fw : 0;
        double backend = g_fwd_s - fwd0; /* inside the backend's forward */
        printf("| %d | %.1f | %lld | %.1f | %.0f | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f | "
               "%lld/%lld/%lld | %lld |\n",
               conc, wall * 1e3, fw, fw ? (double)rows / (double)fw : 0, tokens / wall,
               (c1.plan_s - c0.plan_s) * f, (c1.run_s - c0.run_s) * f,
               (c1.capture_s - c0.capture_s) * f, (c1.wait_s - c0.wait_s) * f,
               (wall - flush - backend) * f, flush * 1e3, c1.replayed - c0.replayed,
               c1.captured - c0.captured, c1.eager - c0.eager, c1.evicted - c0.evicted);
        fflush(stdout);
    }
    if (sim && !rc) {
        printf("\ngraph cache simulated (cuda/flc_shape.h, %d multiprocessors, %d graphs kept):\n\n"
               "| conc | policy | forwards | eager (first sighting) | captured | replayed | "
               "evicted | rows of the keys / real rows | outputs of the keys / real | "
               "the backend's counters |\n|---|---|---|---|---|---|---|---|---|---|\n",
               n_sm, FLC_GRAPHS);
        int differ = 0;
        for (size_t ci = 0; ci < sizeof concs / sizeof concs[0]; ci++)
            for (int i = 0; i < g_npol; i++) {
                const sim_policy *r = &simrow[ci][i];
                const fl_cuda_stats *q = &real[ci];
                char agree[96] = "-";
                if (i == active && q->graphs_on) {
                    /* the backend's `replayed` counts every graph launch, the one right after
                     * a capture too; here that forward is in `captured` only */
                    const long long q_replay = q->replayed - q->captured;
                    bool same = q->eager == r->first && q->captured == r->capture &&
                                q_replay == r->replay && q->evicted == r->evicted;
                    differ += !same;
                    snprintf(agree, sizeof agree, "%s (%lld/%lld/%lld, %lld evicted)",
                             same ? "the same" : "DIFFER", q->eager, q->captured, q_replay,
                             q->evicted);
                }
                printf("| %d | %s | %lld | %lld | %lld | %lld (%.0f%%) | %lld | %.3f | %.3f | "
                       "%s |\n",
                       concs[ci], r->name, r->fw, r->first, r->capture, r->replay,
                       r->fw ? 100.0 * (double)r->replay / (double)r->fw : 0.0, r->evicted,
                       r->rows ? (double)r->rows_key / (double)r->rows : 0.0,
                       r->outs ? (double)r->outs_key / (double)r->outs : 0.0, agree);
            }
        if (differ) {
            printf("gpu_sched: the simulated graph cache differs from the backend's in %d runs\n",
                   differ);
            rc = 1;
        }
    }
    b->ops = g_real; /* for destroy */
    fl_bench_env_close(&env);
    return rc;
}
