/* bench_parallel.c: `fogline bench parallel`: fan-out (the segments of a multi-question
 * request generated at once, as branches in the same forwards, sharing the prompt's pages)
 * against the same segments generated one after another, side by side in one run:
 *   set A: held-out help-desk conversations in groups of G (no common context);
 *   set B: the same, each behind a shared ~300-token system prompt (the common prefix that
 *          fan-out computes once).
 * Columns: wall time to every group's complete answer, the speedup, outputs identical between
 * the two modes (they must be), exact match against the references (set A).
 * Then skeleton against plain decoding on held-out multi-question messages (--multi FILE):
 * plain decodes the message as one reply; skeleton asks the model for an outline (the
 * server's SRV_OUTLINE_PROMPT), parses it (server/outline.c) and expands every point as a
 * branch in the same forwards, joined in order (fewer than two points: decoded plainly, the
 * outline's time counted). Messages one after another; wall time to each complete answer,
 * exact match of the whole reply and of each part (a reference part found verbatim). */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_select.h"
#include "bench_common.h"
#include "cli/cli.h"
#include "engine.h"
#include "gen_opts.h"
#include "outline.h"
#include "tokenizer/tokenizer.h"

#define FL_BENCH_MAX_REPEAT 15

typedef struct seg {
    fl_bench_item it;
    char *seq_text;  /* the sequential run's reply */
    fl_bench_out o; /* the run in progress */
} seg;

/* Runs every group; fanout: a group's segments all at once, else one after another. Returns
   the wall seconds, or < 0 on an engine error. */
static double run(const fl_model *m, fl_backend *b, seg *segs, int n, int G, bool fanout,
                  int max_tokens)
{
    fl_err e = {0};
    fl_sched_opts so = {.max_batch_tokens = b->max_tokens, .max_seqs = G, .async_persist = true,
                        .model_id = fl_model_fingerprint(m)};
    fl_sched *s = NULL;
    if (fl_sched_create(&s, m, b, &so, &e)) {
        fprintf(stderr, "fogline bench parallel: %s\n", e.msg);
        return -1;
    }
    fl_decode_opts d;
    fl_decode_opts_default(&d);
    double t0 = fl_now();
    for (int g0 = 0; g0 < n; g0 += G) {
        int g1 = g0 + G < n ? g0 + G : n;
        for (int i = g0; i < g1; i++)
            segs[i].o.done = 0;
        for (int i = g0; i < g1; i++) {
            fl_request rq = {.prompt = segs[i].it.ids, .n_prompt = (int32_t)segs[i].it.n,
                             .max_tokens = max_tokens, .dec = d};
            if (fl_sched_add(s, &rq, fl_bench_sink, &segs[i].o, (uint64_t)i + 1, &e)) {
                fprintf(stderr, "fogline bench parallel: %s\n", e.msg);
                fl_sched_destroy(s);
                return -1;
            }
            while (!fanout && !segs[i].o.done)
                if (fl_sched_step(s, &e) < 0)
                    goto fail;
        }
        for (;;) {
            int left = 0;
            for (int i = g0; i < g1; i++)
                left += !segs[i].o.done;
            if (!left)
                break;
            if (fl_sched_step(s, &e) < 0)
                goto fail;
        }
    }
    double wall = fl_now() - t0;
    fl_sched_flush(s);
    fl_sched_destroy(s);
    return wall;
fail:
    fprintf(stderr, "fogline bench parallel: %s\n", e.msg);
    fl_sched_destroy(s);
    return -1;
}

static double median(double *v, int n)
{
    for (int i = 1; i < n; i++) /* insertion sort: n <= FL_BENCH_MAX_REPEAT */
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Replaces *s (flushed and destroyed) with a new scheduler. */
static int renew(fl_sched **s, const fl_model *m, fl_backend *b, const fl_sched_opts *so)
{
    fl_err e = {0};
    if (*s) {
        fl_sched_flush(*s);
        fl_sched_destroy(*s);
        *s = NULL;
    }
    if (fl_sched_create(s, m, b, so, &e)) {
        fprintf(stderr, "fogline bench parallel: %s\n", e.msg);
        return 1;
    }
    return 0;
}

static int64_t sched_forwards(const fl_sched *s)
{
    fl_sched_stats st;
    fl_sched_get_stats(s, &st);
    return st.forwards;
}

/* ---- skeleton vs plain ---- */

/* Decodes the n prompts (msgs[i], nm[i] messages) at once; texts into out[i] (caller frees). */
static int decode_all(const fl_model *m, fl_sched *s, fl_chat_msg *const *msgs, const size_t *nm, int n,
                      int max_tokens, char **out, uint64_t *serial)
{
    fl_err e = {0};
    fl_decode_opts d;
    fl_decode_opts_default(&d);
    fl_bench_out jobs[SRV_OUTLINE_MAX] = {{0}};
    int rc = 0, added = 0;
    for (int i = 0; i < n && !rc; i++) {
        int32_t *ids = NULL;
        size_t n_ids = 0;
        if (fl_bench_encode(m, msgs[i], nm[i], &ids, &n_ids, &e)) {
            rc = -1;
            break;
        }
        fl_request rq = {.prompt = ids, .n_prompt = (int32_t)n_ids, .max_tokens = max_tokens, .dec = d};
        rc = fl_sched_add(s, &rq, fl_bench_sink, &jobs[i], ++*serial, &e) ? -1 : 0;
        free(ids);
        added += !rc;
    }
    for (;;) {
        int left = 0;
        for (int i = 0; i < added; i++)
            left += !jobs[i].done;
        if (!left || rc)
            break;
        if (fl_sched_step(s, &e) < 0)
            rc = -1;
    }
    if (rc)
        fprintf(stderr, "fogline bench parallel: %s\n", e.msg);
    for (int i = 0; i < n; i++)
        out[i] = jobs[i].text ? jobs[i].text : strdup("");
    return rc;
}

/* Share of the reference parts found verbatim, in order, in text. */
static int parts_found(const char *text, json_t *parts)
{
    int found = 0;
    const char *at = text;
    for (size_t k = 0; k < json_array_size(parts); k++) {
        const char *want = json_string_value(json_array_get(parts, k));
        const char *hit = want ? strstr(at, want) : NULL;
        if (hit) {
            found++;
            at = hit + strlen(want);
        }
    }
    return found;
}

/* One skeleton answer: the outline, then a branch per point, joined in order; fewer than
 * two points: the message decoded plainly. *joined: malloc'd text; *was_outlined: whether
 * the outline parsed. */
static int skeleton_once(const fl_model *m, fl_sched *s, fl_chat_msg *msgs, size_t nm, int max_tokens,
                         char **joined, int *was_outlined, int64_t *fw_outline, uint64_t *serial)
{
    fl_chat_msg om[2] = {{"system", SRV_OUTLINE_PROMPT}, msgs[nm - 1]};
    fl_chat_msg *oo[1] = {om};
    size_t n_om = 2;
    char *outline = NULL;
    *joined = NULL;
    *was_outlined = 0;
    int rc = decode_all(m, s, oo, &n_om, 1, 160, &outline, serial);
    *fw_outline = sched_forwards(s);
    char *points[SRV_OUTLINE_MAX];
    const char *why = NULL;
    int np = rc ? 0 : srv_outline_parse(outline, strlen(outline), points, &why);
    free(outline);
    if (!rc && np) {
        *was_outlined = 1;
        fl_chat_msg bm[SRV_OUTLINE_MAX][33];
        fl_chat_msg *bp[SRV_OUTLINE_MAX];
        size_t bn[SRV_OUTLINE_MAX];
        char *texts[SRV_OUTLINE_MAX] = {0};
        for (int k = 0; k < np; k++) {
            memcpy(bm[k], msgs, (nm - 1) * sizeof *msgs);
            bm[k][nm - 1] = (fl_chat_msg){"user", points[k]};
            bp[k] = bm[k];
            bn[k] = nm;
        }
        rc = decode_all(m, s, bp, bn, np, max_tokens, texts, serial);
        size_t len = 1;
        for (int k = 0; k < np; k++)
            len += strlen(texts[k]) + 1;
        *joined = calloc(1, len);
        for (int k = 0; k < np; k++) {
            if (k && *joined)
                strcat(*joined, " ");
            if (*joined)
                strcat(*joined, texts[k]);
            free(texts[k]);
        }
        srv_outline_free(points, np);
    } else if (!rc) {
        fl_chat_msg *one[1] = {msgs};
        rc = decode_all(m, s, one, &nm, 1, max_tokens, joined, serial); /* fallback */
    }
    return rc;
}

static int skeleton_bench(const fl_model *m, fl_backend *b, const char *file, long n, int max_tokens,
                          int repeat)
{
    json_error_t je;
    json_t *arr = json_load_file(file, 0, &je);
    if (!arr || !json_is_array(arr) || json_array_size(arr) == 0) {
        fprintf(stderr, "fogline bench parallel: %s: %s\n", file, arr ? "not a non-empty JSON array" : je.text);
        json_decref(arr);
        return 1;
    }
    if ((size_t)n > json_array_size(arr))
        n = (long)json_array_size(arr);
    fl_sched_opts so = {.max_batch_tokens = b->max_tokens, .max_seqs = SRV_OUTLINE_MAX, .async_persist = true,
                        .model_id = fl_model_fingerprint(m)};
    fl_sched *s = NULL;
    uint64_t serial = 0;
    double t_plain = 0, t_skel = 0;
    int64_t fw_plain = 0, fw_skel = 0, fw_outline = 0;
    /* forwards per message by its number of parts (2, 3, 4+): plain, skeleton, outline */
    int64_t by_k[3][3] = {{0}};
    int n_k[3] = {0};
    int ex_plain = 0, ex_skel = 0, parts = 0, pp_plain = 0, pp_skel = 0, outlined = 0, rc = 0;
    int unstable = 0;
    for (long i = 0; i < n && !rc; i++) {
        json_t *o = json_array_get(arr, (size_t)i), *ms = json_object_get(o, "messages");
        json_t *pt = json_object_get(o, "parts");
        const char *want = json_string_value(json_object_get(o, "reply"));
        size_t nm = json_array_size(ms);
        if (!want || nm == 0 || nm > 32 || !json_is_array(pt)) {
            fprintf(stderr, "fogline bench parallel: %s: item %ld: needs messages, reply and parts\n", file, i);
            rc = 1;
            break;
        }
        fl_chat_msg msgs[33];
        for (size_t k = 0; k < nm; k++) {
            json_t *mm = json_array_get(ms, k);
            msgs[k] = (fl_chat_msg){json_string_value(json_object_get(mm, "role")),
                                    json_string_value(json_object_get(mm, "content"))};
            if (!msgs[k].role || !msgs[k].content) {
                fprintf(stderr, "fogline bench parallel: %s: item %ld: a message lacks role or content\n", file, i);
                rc = 1;
            }
        }
        if (rc)
            break;
        /* plain, then skeleton, each `repeat` times on a new scheduler (no pages cached from
         * an earlier run): the median time counts, the first run's text is graded (the runs
         * must agree: decoding is deterministic) */
        fl_chat_msg *one[1] = {msgs};
        char *plain = NULL, *joined = NULL;
        double tp[FL_BENCH_MAX_REPEAT], tk[FL_BENCH_MAX_REPEAT];
        const int k = json_array_size(pt) >= 4 ? 2 : json_array_size(pt) == 3 ? 1 : 0;
        for (int r = 0; r < repeat && !rc; r++) {
            char *txt = NULL;
            if ((rc = renew(&s, m, b, &so)))
                break;
            double t0 = fl_now();
            rc = decode_all(m, s, one, &nm, 1, max_tokens, &txt, &serial);
            tp[r] = fl_now() - t0;
            fw_plain += sched_forwards(s);
            if (r == 0) {
                by_k[k][0] += sched_forwards(s);
                n_k[k]++;
                plain = txt;
            } else {
                unstable += txt && plain && strcmp(txt, plain);
                free(txt);
            }
        }
        for (int r = 0; r < repeat && !rc; r++) {
            char *txt = NULL;
            int was_outlined = 0;
            int64_t fo = 0;
            if ((rc = renew(&s, m, b, &so)))
                break;
            double t0 = fl_now();
            rc = skeleton_once(m, s, msgs, nm, max_tokens, &txt, &was_outlined, &fo, &serial);
            tk[r] = fl_now() - t0;
            fw_skel += sched_forwards(s);
            fw_outline += fo;
            if (r == 0) {
                by_k[k][1] += sched_forwards(s);
                by_k[k][2] += fo;
                joined = txt;
                outlined += was_outlined;
            } else {
                unstable += txt && joined && strcmp(txt, joined);
                free(txt);
            }
        }
        t_plain += median(tp, repeat);
        t_skel += median(tk, repeat);
        if (!rc && joined) {
            ex_plain += !strcmp(plain, want);
            ex_skel += !strcmp(joined, want);
            parts += (int)json_array_size(pt);
            pp_plain += parts_found(plain, pt);
            pp_skel += parts_found(joined, pt);
        }
        free(plain);
        free(joined);
    }
    if (s)
        fl_sched_flush(s);
    fl_sched_destroy(s);
    json_decref(arr);
    if (rc)
        return 1;
    printf("\nSkeleton vs plain decoding: %ld held-out multi-question messages (%s), one after another\n\n", n,
           file);
    printf("| mode | wall (s) | speedup | forwards | exact (whole reply) | parts exact | outlined |\n");
    printf("|---|---|---|---|---|---|---|\n");
    printf("| plain | %.2f | 1.00x | %lld | %.1f%% | %.1f%% | - |\n", t_plain, (long long)fw_plain / repeat,
           100.0 * ex_plain / (double)n, parts ? 100.0 * pp_plain / parts : 0.0);
    printf("| skeleton | %.2f | %.2fx | %lld | %.1f%% | %.1f%% | %d/%ld |\n", t_skel, t_plain / t_skel,
           (long long)fw_skel / repeat, 100.0 * ex_skel / (double)n, parts ? 100.0 * pp_skel / parts : 0.0,
           outlined, n);
    printf("\nForwards per message (hardware-independent: on a GPU a forward costs about the same whatever its rows):\n\n");
    printf("| parts | messages | plain | skeleton | of which the outline |\n|---|---|---|---|---|\n");
    static const char *const kname[3] = {"2", "3", "4+"};
    for (int k = 0; k < 3; k++)
        if (n_k[k])
            printf("| %s | %d | %.1f | %.1f | %.1f |\n", kname[k], n_k[k], (double)by_k[k][0] / n_k[k],
                   (double)by_k[k][1] / n_k[k], (double)by_k[k][2] / n_k[k]);
    printf("| all | %ld | %.1f | %.1f | %.1f |\n", n, (double)fw_plain / repeat / (double)n,
           (double)fw_skel / repeat / (double)n, (double)fw_outline / repeat / (double)n);
    if (unstable)
        printf("\nWARNING: %d repeated runs gave a different text (decoding should be deterministic)\n",
               unstable);
    fflush(stdout);
    return unstable ? 1 : 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: fogline bench parallel [--model DIR] [--prompts FILE] [--n N] [--group G]\n"
               "                              [--multi FILE] [--multi-n N] [--max-tokens N] [--threads N]\n"
               "                              [--device cpu|cuda|auto] [--repeat R]\n\n"
               "--prompts: a JSON array of {\"messages\": [...], \"reply\": \"reference reply\"}\n"
               "(default: tests/data/helpdesk_heldout.json). Groups of G conversations are the\n"
               "segments of one multi-question request (fan-out vs one after another).\n"
               "--multi: {\"messages\", \"reply\", \"parts\": [...]} multi-question messages for\n"
               "skeleton vs plain decoding (default: tests/data/helpdesk_multi_heldout.json;\n"
               "--multi-n 0 skips it).\n"
               "--device: the backend (default cpu; auto: the GPU when one is usable).\n"
               "--repeat: time every mode R times (1..15, each on a new scheduler) and report the\n"
               "median; outputs must agree between runs.\n");
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
    const char *prompts = FL_DEFAULT_BENCH_PROMPTS, *multi = FL_DEFAULT_BENCH_MULTI;
    const char *device = "cpu";
    long n = 32, G = 4, max_tokens = 64, threads = 0, multi_n = 48, repeat = 1;
    struct option opts[] = {{"model", required_argument, 0, 'm'}, {"prompts", required_argument, 0, 'p'},
                            {"n", required_argument, 0, 'n'},     {"group", required_argument, 0, 'g'},
                            {"max-tokens", required_argument, 0, 't'},
                            {"threads", required_argument, 0, 'j'}, {"help", no_argument, 0, 'h'},
                            {"multi", required_argument, 0, 'u'}, {"multi-n", required_argument, 0, 'k'},
                            {"device", required_argument, 0, 'D'}, {"repeat", required_argument, 0, 'r'},
                            {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        long *dst = c == 'n'   ? &n
                    : c == 'g' ? &G
                    : c == 't' ? &max_tokens
                    : c == 'j' ? &threads
                    : c == 'k' ? &multi_n
                    : c == 'r' ? &repeat
                               : NULL;
        if (dst) {
            if (fl_parse_long(optarg, c == 'j' || c == 'k' ? 0 : 1,
                              c == 'g' ? 16 : c == 'r' ? FL_BENCH_MAX_REPEAT : 100000, dst)) {
                fprintf(stderr, "fogline bench parallel: --%s: bad value '%s'\n",
                        c == 'n'   ? "n"
                        : c == 'g' ? "group (1..16)"
                        : c == 't' ? "max-tokens"
                        : c == 'k' ? "multi-n"
                        : c == 'r' ? "repeat (1..15)"
                                   : "threads",
                        optarg);
                return 2;
            }
            continue;
        }
        switch (c) {
        case 'm': model_dir = optarg; break;
        case 'p': prompts = optarg; break;
        case 'u': multi = optarg; break;
        case 'D':
            if (fl_bench_device_arg("parallel", optarg, &device))
                return 2;
            break;
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
    int32_t W = multi_n > 0 && G < SRV_OUTLINE_MAX ? SRV_OUTLINE_MAX : (int32_t)G; /* widest batch */
    fl_backend_opts bo = {.n_pages = per_seq * W * 2 + 16, .n_threads = (int)threads,
                          .max_tokens = W * (int32_t)(max_prompt + 8 * (size_t)B)};
    char chosen[512] = "";
    if (fl_backend_open(&b, m, &bo, device, chosen, sizeof chosen, &e)) {
        fprintf(stderr, "fogline bench parallel: %s\n", e.msg);
        return 1;
    }
    printf("fogline bench parallel: %s, %ld conversations in groups of %ld, max_tokens %ld, "
           "block %d, threshold 0.9 + overlap + pipelining; times: median of %ld runs\nbackend: %s\n\n",
           model_dir, n, G, max_tokens, B, repeat, chosen);
    printf("| set | segments per request | sequential (s) | fan-out (s) | speedup | identical | exact (seq / fan-out) |\n");
    printf("|---|---|---|---|---|---|---|\n");
    static const char *const names[2] = {"A: conversations", "B: + shared 300-token system prompt"};
    int rc = 0;
    for (int set = 0; set < 2 && !rc; set++) {
        seg *sg = sets[set];
        /* sequential, then fan-out, `repeat` times (each on a new scheduler): median times;
         * a segment counts as identical when every fan-out run gave the first sequential
         * run's text, and every sequential run gave that text too */
        double tsv[FL_BENCH_MAX_REPEAT], tfv[FL_BENCH_MAX_REPEAT];
        bool *differs = calloc((size_t)n, sizeof(bool));
        if (!differs) {
            fprintf(stderr, "fogline bench parallel: out of memory\n");
            rc = 1;
            break;
        }
        for (int r = 0; r < repeat && !rc; r++) {
            tsv[r] = run(m, b, sg, (int)n, (int)G, false, (int)max_tokens);
            for (long i = 0; i < n && tsv[r] >= 0; i++) {
                if (r == 0) { /* the sequential texts move to seq_text */
                    free(sg[i].seq_text);
                    sg[i].seq_text = sg[i].o.text;
                    sg[i].o.text = NULL;
                } else {
                    differs[i] |= strcmp(sg[i].seq_text ? sg[i].seq_text : "", sg[i].o.text ? sg[i].o.text : "") != 0;
                }
            }
            tfv[r] = tsv[r] < 0 ? -1 : run(m, b, sg, (int)n, (int)G, true, (int)max_tokens);
            if (tsv[r] < 0 || tfv[r] < 0)
                rc = 1;
            for (long i = 0; i < n && !rc; i++)
                differs[i] |= strcmp(sg[i].seq_text ? sg[i].seq_text : "", sg[i].o.text ? sg[i].o.text : "") != 0;
        }
        if (rc) {
            free(differs);
            break;
        }
        double ts = median(tsv, repeat), tf = median(tfv, repeat);
        int same = 0, ex0 = 0, ex1 = 0, graded = 0;
        for (long i = 0; i < n; i++) {
            const char *a = sg[i].seq_text ? sg[i].seq_text : "", *f = sg[i].o.text ? sg[i].o.text : "";
            same += !differs[i];
            if (sg[i].it.want) {
                graded++;
                ex0 += !strcmp(sg[i].it.want, a);
                ex1 += !strcmp(sg[i].it.want, f);
            }
        }
        char exact[64] = "-";
        if (set == 0 && graded)
            snprintf(exact, sizeof exact, "%.1f%% / %.1f%%", 100.0 * ex0 / graded, 100.0 * ex1 / graded);
        printf("| %s | %ld | %.3f | %.3f | %.2fx | %d/%ld | %s |\n", names[set], G, ts, tf, ts / tf,
               same, n, exact);
        fflush(stdout);
        free(differs);
    }
    if (!rc && multi_n > 0)
        rc = skeleton_bench(m, b, multi, multi_n, (int)max_tokens, (int)repeat);
    for (int set = 0; set < 2; set++) {
        for (long i = 0; i < n; i++) {
            free(sets[set][i].it.ids);
            free(sets[set][i].it.want);
            free(sets[set][i].seq_text);
            free(sets[set][i].o.text);
        }
        free(sets[set]);
    }
    fl_backend_destroy(b);
    fl_model_free(m);
    return rc;
}
