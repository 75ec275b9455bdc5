/* bench_parallel.c: `fogline bench parallel`: fan-out (the segments of a multi-question
 * request generated at once, as branches in the same forwards, sharing the prompt's pages)
 * against the same segments generated one after another, side by side in one run:
 *   set A: held-out help-desk conversations in groups of G (no common context);
 *   set B: the same, each behind a shared ~300-token system prompt (the common prefix that
 *          fan-out computes once).
 * Columns: wall time to every group's complete answer, the speedup, outputs identical between
 * the two modes (they must be), exact match against the references (set A). */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_common.h"
#include "cli.h"
#include "engine.h"
#include "gen_opts.h"
#include "tokenizer.h"

typedef struct seg {
    fl_bench_item it;
    char *text[2]; /* sequential, fan-out */
    int done;
} seg;

static void sink(const fl_event *ev, void *ctx)
{
    seg *g = ctx;
    if (ev->type != FL_EV_DONE)
        return;
    g->done = 1;
    free(g->text[1]);
    g->text[1] = strndup(ev->text, ev->text_len); /* moved to [0] by the sequential row */
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Runs every group; fanout: a group's segments all at once, else one after another. Returns
   the wall seconds, or < 0 on an engine error. */
static double run(const fl_model *m, fl_backend *b, seg *segs, int n, int G, bool fanout,
                  int max_tokens)
{
    fl_err e = {0};
    fl_sched_opts so = {.max_batch_tokens = b->max_tokens, .max_seqs = G, .async_persist = true,
                        .model_id = 0x70617261ull};
    fl_sched *s = NULL;
    if (fl_sched_create(&s, m, b, &so, &e)) {
        fprintf(stderr, "fogline bench parallel: %s\n", e.msg);
        return -1;
    }
    fl_decode_opts d;
    fl_decode_opts_default(&d);
    double t0 = now_s();
    for (int g0 = 0; g0 < n; g0 += G) {
        int g1 = g0 + G < n ? g0 + G : n;
        for (int i = g0; i < g1; i++)
            segs[i].done = 0;
        for (int i = g0; i < g1; i++) {
            fl_request rq = {.prompt = segs[i].it.ids, .n_prompt = (int32_t)segs[i].it.n,
                             .max_tokens = max_tokens, .dec = d};
            if (fl_sched_add(s, &rq, sink, &segs[i], (uint64_t)i + 1, &e)) {
                fprintf(stderr, "fogline bench parallel: %s\n", e.msg);
                fl_sched_destroy(s);
                return -1;
            }
            while (!fanout && !segs[i].done)
                if (fl_sched_step(s, &e) < 0)
                    goto fail;
        }
        for (;;) {
            int left = 0;
            for (int i = g0; i < g1; i++)
                left += !segs[i].done;
            if (!left)
                break;
            if (fl_sched_step(s, &e) < 0)
                goto fail;
        }
    }
    double wall = now_s() - t0;
    fl_sched_flush(s);
    fl_sched_destroy(s);
    return wall;
fail:
    fprintf(stderr, "fogline bench parallel: %s\n", e.msg);
    fl_sched_destroy(s);
    return -1;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: fogline bench parallel [--model DIR] [--prompts FILE] [--n N] [--group G]\n"
               "                              [--max-tokens N] [--threads N]\n\n"
               "FILE: a JSON array of {\"messages\": [...], \"reply\": \"reference reply\"}\n"
               "(default: tests/data/helpdesk_heldout.json). Groups of G conversations are the\n"
               "segments of one multi-question request.\n");
}

static const char *const POLICY =
    "You are the help desk of an online shop. Orders ship within one business day. Standard "
    "shipping takes 3 to 5 business days, express 2 days, overnight the next business day. "
    "Items can be returned within 30 days of delivery from the Orders page; refunds go back to "
    "the original payment method within 5 business days of the return arriving. A damaged or "
    "wrong item is replaced at no cost. Orders can be cancelled until they ship. The store is "
    "open from 9 am to 8 pm on weekdays, 10 am to 6 pm on Saturday and 11 am to 5 pm on Sunday. "
    "Every appliance has a one-year warranty that covers manufacturing defects. Copy order "
    "numbers, dates and addresses exactly as the customer wrote them, and keep answers short.";

int fl_bench_parallel(int argc, char **argv)
{
    const char *model_dir = getenv("FOGLINE_MODEL");
    const char *prompts = FL_DEFAULT_BENCH_PROMPTS;
    long n = 32, G = 4, max_tokens = 64, threads = 0;
    struct option opts[] = {{"model", required_argument, 0, 'm'}, {"prompts", required_argument, 0, 'p'},
                            {"n", required_argument, 0, 'n'},     {"group", required_argument, 0, 'g'},
                            {"max-tokens", required_argument, 0, 't'},
                            {"threads", required_argument, 0, 'j'}, {"help", no_argument, 0, 'h'},
                            {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        long *dst = c == 'n' ? &n : c == 'g' ? &G : c == 't' ? &max_tokens : c == 'j' ? &threads : NULL;
        if (dst) {
            if (fl_parse_long(optarg, c == 'j' ? 0 : 1, c == 'g' ? 16 : 100000, dst)) {
                fprintf(stderr, "fogline bench parallel: --%s: bad value '%s'\n",
                        c == 'n' ? "n" : c == 'g' ? "group (1..16)" : c == 't' ? "max-tokens" : "threads",
                        optarg);
                return 2;
            }
            continue;
        }
        switch (c) {
        case 'm': model_dir = optarg; break;
        case 'p': prompts = optarg; break;
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, "fogline bench parallel: unknown or incomplete option '%s'\n", argv[optind - 1]);
            return 2;
        }
    }
    if (!model_dir)
        model_dir = FL_DEFAULT_MODEL_DIR;
    fl_err e = {0};
    fl_model *m = NULL;
    if (fl_model_load(&m, model_dir, NULL, &e)) {
        fprintf(stderr, "fogline bench parallel: %s\n", e.msg);
        return 1;
    }
    seg *sets[2] = {NULL, NULL};
    size_t max_prompt = 0;
    for (int set = 0; set < 2; set++) {
        fl_bench_item *items = NULL;
        size_t mp = 0;
        int got = fl_bench_load(m, prompts, (int)n, set ? POLICY : NULL, "parallel", &items, &mp);
        if (got < 0) {
            free(sets[0]);
            fl_model_free(m);
            return 1;
        }
        n = got;
        sets[set] = calloc((size_t)n, sizeof(seg));
        for (long i = 0; i < n; i++)
            sets[set][i].it = items[i]; /* the seg owns the item's buffers now */
        free(items);
        if (mp > max_prompt)
            max_prompt = mp;
    }
    int32_t B = m->cfg.block_size;
    int32_t per_seq = (int32_t)(max_prompt + (size_t)max_tokens) / B + 8;
    fl_backend *b = NULL;
    fl_backend_opts bo = {.n_pages = per_seq * (int32_t)G * 2 + 16, .n_threads = (int)threads,
                          .max_tokens = (int32_t)G * (int32_t)(max_prompt + 8 * (size_t)B)};
    if (fl_backend_cpu_create(&b, m, &bo, &e)) {
        fprintf(stderr, "fogline bench parallel: %s\n", e.msg);
        return 1;
    }
    printf("fogline bench parallel: %s, %ld conversations in groups of %ld, max_tokens %ld, "
           "block %d, threshold 0.9 + overlap + pipelining\n\n", model_dir, n, G, max_tokens, B);
    printf("| set | segments per request | sequential (s) | fan-out (s) | speedup | identical | exact (seq / fan-out) |\n");
    printf("|---|---|---|---|---|---|---|\n");
    static const char *const names[2] = {"A: conversations", "B: + shared 300-token system prompt"};
    int rc = 0;
    for (int set = 0; set < 2 && !rc; set++) {
        seg *sg = sets[set];
        double ts = run(m, b, sg, (int)n, (int)G, false, (int)max_tokens);
        for (long i = 0; i < n; i++) { /* the sequential texts move to [0] */
            free(sg[i].text[0]);
            sg[i].text[0] = sg[i].text[1];
            sg[i].text[1] = NULL;
        }
        double tf = ts < 0 ? -1 : run(m, b, sg, (int)n, (int)G, true, (int)max_tokens);
        if (ts < 0 || tf < 0) {
            rc = 1;
            break;
        }
        int same = 0, ex0 = 0, ex1 = 0, graded = 0;
        for (long i = 0; i < n; i++) {
            const char *a = sg[i].text[0] ? sg[i].text[0] : "", *f = sg[i].text[1] ? sg[i].text[1] : "";
            same += !strcmp(a, f);
            if (sg[i].it.want) {
                graded++;
                ex0 += !strcmp(sg[i].it.want, a);
                ex1 += !strcmp(sg[i].it.want, f);
            }
        }
        char exact[64] = "-";
        if (set == 0 && graded)
            snprintf(exact, sizeof exact, "%.1f%% / %.1f%%", 100.0 * ex0 / graded, 100.0 * ex1 / graded);
        printf("| %s | %ld | %.2f | %.2f | %.2fx | %d/%ld | %s |\n", names[set], G, ts, tf, ts / tf,
               same, n, exact);
        fflush(stdout);
    }
    for (int set = 0; set < 2; set++) {
        for (long i = 0; i < n; i++) {
            free(sets[set][i].it.ids);
            free(sets[set][i].it.want);
            free(sets[set][i].text[0]);
            free(sets[set][i].text[1]);
        }
        free(sets[set]);
    }
    fl_backend_destroy(b);
    fl_model_free(m);
    return rc;
}
