/* bench_decode.c: `fogline bench decode`: what each bubble-removing technique buys, measured
 * side by side in one run on the same prompts:
 *   1 baseline: one block at a time, threshold 0.9, a separate store pass, sync persistence
 *   2 + decode-store overlap   3 + multi-block pipelining   4 + asynchronous persistence
 *   5 row 4 at 1, 4 and 16 concurrent sequences
 * Columns: TPF, forwards per block, tokens/s, the compute thread's persistence wait, exact match
 * against the reference replies in the prompts file.
 * With --weights LIST, instead: row 4's settings at 1 and 16 concurrent sequences for each
 * weights format (f32, bf16, q8, q4), one backend at a time: what quantization costs in exact
 * match and TPF, and buys in tokens/s.
 * With --schema FILE (or --json-object), instead: row 4's settings at 1 and 16 concurrent
 * sequences unconstrained and under the constraint, on the same prompts: what constrained
 * denoising costs in TPF and tokens/s, the share of committed positions it changed, and the
 * share of replies the automaton accepts and jansson parses; with --cuts, also constrained with
 * the decoder's dynamic program uncut (fl_cons.uncut): what its cuts buy, and that they change
 * no reply. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_select.h"
#include "bench_common.h"
#include "cli/cli.h"
#include "constraint.h"
#include "engine.h"
#include "tokenizer/tokenizer.h"

typedef fl_bench_item item;

typedef struct row {
    const char *name;
    bool overlap, pipeline, async;
    int conc;
} row;

/* What a row measured (for the constrained table, which prints its own rows). */
typedef struct row_res {
    double tpf, tps;
    int64_t tokens, changed;
    int valid, replies;
    uint64_t texts; /* FNV-1a of the replies' texts in order, each with its terminating NUL */
} row_res;

static bool reply_valid(const fl_cons *cons, const char *text)
{
    size_t len = text ? strlen(text) : 0;
    int32_t st = fl_dfa_walk(cons->dfa, 0, text ? text : "", len);
    json_error_t je;
    json_t *j = json_loadb(text ? text : "", len, JSON_DECODE_ANY, &je);
    bool ok = st >= 0 && cons->dfa->accept[st] && j;
    json_decref(j);
    return ok;
}

/* Runs a row; prints it unless rr is given (then fills it). cons: the output constraint of
   every request, or NULL. */
static int run_row(const fl_model *m, fl_backend *b, const row *rw, const item *items, int n,
                   int max_tokens, const char *tier_dir, int threads_unused, bool fsync_tier,
                   fl_cons *cons, row_res *rr)
{
    (void)threads_unused;
    fl_err e = {0};
    fl_kv_tier *tier = NULL;
    if (fl_tier_dir_create(&tier, tier_dir, fsync_tier, &e)) {
        fprintf(stderr, "fogline bench decode: %s\n", e.msg);
        return 1;
    }
    fl_sched_opts so = {.max_batch_tokens = b->max_tokens, .max_seqs = rw->conc,
                        .async_persist = rw->async, .tier = tier, .model_id = fl_model_fingerprint(m)};
    fl_sched *s = NULL;
    if (fl_sched_create(&s, m, b, &so, &e)) {
        fprintf(stderr, "fogline bench decode: %s\n", e.msg);
        fl_tier_destroy(tier);
        return 1;
    }
    fl_bench_out *res = calloc((size_t)n, sizeof *res);
    fl_decode_opts d;
    fl_decode_opts_default(&d);
    d.policy = FL_POLICY_THRESHOLD;
    d.threshold = 0.9f;
    d.store_overlap = rw->overlap;
    d.pipeline = rw->pipeline;
    double t0 = fl_now();
    int next = 0, finished = 0;
    int64_t fw0;
    fl_sched_stats st;
    fl_sched_get_stats(s, &st);
    fw0 = st.forwards;
    while (finished < n) {
        /* keep `conc` sequences in flight */
        int inflight = next - finished;
        while (next < n && inflight < rw->conc) {
            fl_request rq = {.prompt = items[next].ids, .n_prompt = (int32_t)items[next].n,
                             .max_tokens = max_tokens, .dec = d, .constraint = cons};
            if (fl_sched_add(s, &rq, fl_bench_sink, &res[next], (uint64_t)next + 1, &e)) {
                fprintf(stderr, "fogline bench decode: %s\n", e.msg);
                return 1;
            }
            next++;
            inflight++;
        }
        if (fl_sched_step(s, &e) < 0) {
            fprintf(stderr, "fogline bench decode: %s\n", e.msg);
            return 1;
        }
        finished = 0;
        for (int i = 0; i < next; i++)
            finished += res[i].done;
    }
    fl_sched_flush(s);
    double wall = fl_now() - t0;
    fl_sched_get_stats(s, &st);
    int64_t tokens = 0, fw_seq = 0, blocks = 0;
    int exact = 0, graded = 0;
    for (int i = 0; i < n; i++) {
        tokens += res[i].st.reply_tokens;
        fw_seq += res[i].st.forwards;
        blocks += res[i].st.blocks;
        if (items[i].want) {
            graded++;
            exact += !strcmp(items[i].want, res[i].text ? res[i].text : "");
        }
    }
    /* TPF per sequence: its reply tokens over the forwards it took part in */
    double tpf = fw_seq ? (double)tokens / (double)fw_seq : 0;
    if (rr) {
        memset(rr, 0, sizeof *rr);
        rr->tpf = tpf;
        rr->tps = (double)tokens / wall;
        rr->tokens = tokens;
        rr->replies = n;
        rr->texts = 1469598103934665603ull;
        for (int i = 0; i < n; i++) {
            rr->changed += res[i].st.constrained;
            rr->valid += cons && reply_valid(cons, res[i].text);
            const char *t = res[i].text ? res[i].text : "";
            for (size_t k = 0, len = strlen(t); k <= len; k++)
                rr->texts = (rr->texts ^ (unsigned char)t[k]) * 1099511628211ull;
        }
    } else {
        printf("| %-34s | %4d | %6.2f | %6.2f | %8.1f | %8.1f | %9.1f | %5.1f%% |\n", rw->name,
               rw->conc, tpf, blocks ? (double)fw_seq / (double)blocks : 0, (double)tokens / wall,
               (double)(st.forwards - fw0), st.persist_wait_ms,
               graded ? 100.0 * exact / graded : 0.0);
    }
    fflush(stdout);
    for (int i = 0; i < n; i++)
        free(res[i].text);
    free(res);
    fl_sched_destroy(s);
    fl_tier_destroy(tier);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: fogline bench decode [--model DIR] [--prompts FILE] [--n N] [--max-tokens N]\n"
               "                            [--threads N] [--tier-dir DIR] [--no-fsync]\n"
               "                            [--device cpu|cuda|auto] [--weights LIST]\n"
               "                            [--schema FILE | --json-object [--cuts]]\n\n"
               "FILE: a JSON array of {\"messages\": [...], \"reply\": \"reference reply\"}\n"
               "(default: tests/data/helpdesk_heldout.json of the default model).\n"
               "--tier-dir: where the KV pages are persisted (default: a fresh directory under\n"
               "$TMPDIR or /tmp, removed at the end; a directory given here is left as it is).\n"
               "--device: the backend (default cpu; auto: the GPU when one is usable).\n"
               "--weights: a comma list of formats (auto, f32, bf16, q8, q4): instead of the\n"
               "techniques' table, row 4 (all of them) for each format, one after another.\n"
               "--schema FILE | --json-object: instead, row 4 unconstrained and under the\n"
               "constraint (response_format): TPF, tokens/s, changed positions, valid replies.\n"
               "--cuts: and constrained again with the dynamic program's cuts off (chains,\n"
               "the floor, repeated states skipped): what they buy; the replies must not change.\n");
}

#define TABLE_HEAD                                                                                 \
    "| %-34s | conc |    TPF | fwd/blk | tokens/s | forwards | wait (ms) | exact  |\n"           \
    "|------------------------------------|------|--------|---------|----------|----------|-----------|--------|\n"

/* --weights: row 4 at 1 and 16 sequences per format, a fresh model and backend for each. */
static int weights_table(const char *model_dir, const char *prompts, int n, int max_tokens,
                         int threads, const char *device, const char *tier_dir, bool fsync_tier,
                         const fl_wformat *formats, int n_formats)
{
    int rc = 0;
    for (int f = 0; f < n_formats && !rc; f++) {
        fl_bench_env env;
        if (fl_bench_env_open(&env, "decode", model_dir, prompts, n, 16, max_tokens, threads,
                              device, formats[f]))
            return 1;
        if (f == 0)
            printf("fogline bench decode: %s, %d prompts, max_tokens %d, block %d, row 4's "
                   "settings (overlap, pipelining, async persistence, threshold 0.9) per weights "
                   "format\n\n" TABLE_HEAD, model_dir, env.n, max_tokens,
                   env.m->cfg.block_size, "weights (backend holds)");
        char name[40];
        snprintf(name, sizeof name, "%s (%s)", fl_wformat_name(formats[f]),
                 fl_wformat_name(env.b->weights));
        for (int conc = 1; conc <= 16 && !rc; conc *= 16) {
            row rw = {name, true, true, true, conc};
            rc = run_row(env.m, env.b, &rw, env.items, env.n, max_tokens, tier_dir, threads,
                         fsync_tier, NULL, NULL);
        }
        fl_bench_env_close(&env);
    }
    return rc;
}

/* --schema / --json-object: row 4 at 1 and 16 sequences, unconstrained then constrained, the
   same prompts, one backend. */
static int constrained_table(const fl_bench_env *env, const char *model_dir, int max_tokens,
                             const char *tier_dir, bool fsync_tier, const char *schema_file,
                             const char *schema_text, bool cuts)
{
    fl_err e = {0};
    fl_cons_cache *cc = fl_cons_cache_new(env->m, 1, 0);
    fl_cons *cons = NULL;
    if (!cc || fl_cons_cache_get(cc, schema_text ? FL_FMT_JSON_SCHEMA : FL_FMT_JSON_OBJECT,
                                 schema_text, &cons, &e)) {
        fprintf(stderr, "fogline bench decode: %s%s%s\n", schema_file ? schema_file : "",
                schema_file ? ": " : "", cc ? e.msg : "out of memory");
        fl_cons_cache_free(cc);
        return 1;
    }
    printf("fogline bench decode: %s, %d prompts, max_tokens %d, block %d, row 4's settings "
           "(overlap, pipelining, async persistence, threshold 0.9)\nconstraint: %s (%d automaton "
           "states, at least %d tokens)\nbackend: %s\n\n",
           model_dir, env->n, max_tokens, env->m->cfg.block_size,
           schema_file ? schema_file : "json_object", cons->dfa->n, fl_cons_min_tokens(cons),
           env->chosen);
    printf("| conc | constraint | TPF    | TPF ratio | tokens/s | tokens/s ratio | changed | valid   |\n"
           "|------|------------|--------|-----------|----------|----------------|---------|---------|\n");
    int rc = 0;
    for (int conc = 1; conc <= 16 && !rc; conc *= 16) {
        row rw = {"", true, true, true, conc};
        row_res free_r, cons_r;
        rc = run_row(env->m, env->b, &rw, env->items, env->n, max_tokens, tier_dir, 0, fsync_tier,
                     NULL, &free_r);
        if (!rc)
            rc = run_row(env->m, env->b, &rw, env->items, env->n, max_tokens, tier_dir, 0,
                         fsync_tier, cons, &cons_r);
        if (rc)
            break;
        printf("| %4d | none       | %6.2f |           | %8.1f |                |         |         |\n",
               conc, free_r.tpf, free_r.tps);
        const row_res *rs[2] = {&cons_r, NULL};
        row_res uncut_r;
        if (cuts) { /* the same constraint, the program uncut (nothing else shares it here) */
            cons->uncut = true;
            rc = run_row(env->m, env->b, &rw, env->items, env->n, max_tokens, tier_dir, 0,
                         fsync_tier, cons, &uncut_r);
            cons->uncut = false;
            if (rc)
                break;
            rs[1] = &uncut_r;
        }
        for (int k = 0; k < 2 && rs[k]; k++)
            printf("| %4d | %-10s | %6.2f | %8.0f%% | %8.1f | %13.0f%% | %6.1f%% | %3d/%-3d |\n",
                   conc, k ? "no cuts" : "yes", rs[k]->tpf,
                   free_r.tpf > 0 ? 100.0 * rs[k]->tpf / free_r.tpf : 0, rs[k]->tps,
                   free_r.tps > 0 ? 100.0 * rs[k]->tps / free_r.tps : 0,
                   rs[k]->tokens ? 100.0 * (double)rs[k]->changed / (double)rs[k]->tokens : 0,
                   rs[k]->valid, rs[k]->replies);
        if (cuts)
            printf("| %4d | cuts buy   | %5.2fx tokens/s; replies %s |\n", conc,
                   uncut_r.tps > 0 ? cons_r.tps / uncut_r.tps : 0,
                   cons_r.texts == uncut_r.texts && cons_r.tokens == uncut_r.tokens &&
                           cons_r.changed == uncut_r.changed
                       ? "the same"
                       : "DIFFER");
        fflush(stdout);
    }
    fl_cons_unref(cons);
    fl_cons_cache_free(cc);
    return rc;
}

/* The tables the flags ask for; tier_dir exists. */
static int decode_tables(const char *model_dir, const char *prompts, int n, int max_tokens,
                         int threads, const char *device, const char *tier_dir, bool fsync_tier,
                         const fl_wformat *formats, int n_formats, const char *schema_file,
                         const char *schema_text, bool json_object_fmt, bool cuts)
{
    if (n_formats)
        return weights_table(model_dir, prompts, n, max_tokens, threads, device, tier_dir,
                             fsync_tier, formats, n_formats);
    fl_bench_env env;
    if (fl_bench_env_open(&env, "decode", model_dir, prompts, n, 16, max_tokens, threads, device,
                          FL_WEIGHTS_AUTO))
        return 1;
    const fl_model *m = env.m;
    fl_backend *b = env.b;
    const item *items = env.items;
    n = env.n;
    int32_t B = m->cfg.block_size;
    if (schema_file || json_object_fmt) {
        int rc = constrained_table(&env, model_dir, max_tokens, tier_dir, fsync_tier, schema_file,
                                   schema_text, cuts);
        fl_bench_env_close(&env);
        return rc;
    }
    printf("fogline bench decode: %s, %d prompts, max_tokens %d, block %d, tier %s (%s)\n"
           "backend: %s\n\n",
           model_dir, n, max_tokens, B, tier_dir, fsync_tier ? "fsync per page" : "no fsync", env.chosen);
    printf(TABLE_HEAD, "configuration");
    row rows[] = {
        {"1 baseline (store pass, sync)", false, false, false, 1},
        {"2 + decode-store overlap", true, false, false, 1},
        {"3 + multi-block pipelining", true, true, false, 1},
        {"4 + async persistence", true, true, true, 1},
        {"5 row 4, 4 concurrent", true, true, true, 4},
        {"5 row 4, 16 concurrent", true, true, true, 16},
    };
    int rc = 0;
    for (size_t r = 0; r < sizeof rows / sizeof rows[0] && !rc; r++)
        rc = run_row(m, b, &rows[r], items, n, max_tokens, tier_dir, threads, fsync_tier, NULL,
                     NULL);
    fl_bench_env_close(&env);
    return rc;
}

int fl_bench_decode(int argc, char **argv)
{
    const char *model_dir = getenv("FOGLINE_MODEL");
    const char *prompts = FL_DEFAULT_BENCH_PROMPTS;
    const char *tier_dir = NULL, *device = "cpu";
    int n = 32, max_tokens = 96, threads = 0;
    bool fsync_tier = true;
    struct option opts[] = {{"model", required_argument, 0, 'm'}, {"prompts", required_argument, 0, 'p'},
                            {"n", required_argument, 0, 'n'},     {"max-tokens", required_argument, 0, 't'},
                            {"threads", required_argument, 0, 'j'}, {"tier-dir", required_argument, 0, 'd'},
                            {"no-fsync", no_argument, 0, 'F'},    {"help", no_argument, 0, 'h'},
                            {"device", required_argument, 0, 'D'},
                            {"weights", required_argument, 0, 'W'},
                            {"schema", required_argument, 0, 'S'},
                            {"json-object", no_argument, 0, 'O'},
                            {"cuts", no_argument, 0, 'C'}, {0, 0, 0, 0}};
    const char *schema_file = NULL;
    bool json_object_fmt = false, cuts = false;
    fl_wformat formats[FL_WEIGHTS_COUNT];
    int n_formats = 0;
    char ferr[200];
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model_dir = optarg; break;
        case 'p': prompts = optarg; break;
        case 'n': n = atoi(optarg); break;
        case 't': max_tokens = atoi(optarg); break;
        case 'j': threads = atoi(optarg); break;
        case 'd': tier_dir = optarg; break;
        case 'F': fsync_tier = false; break;
        case 'D':
            if (fl_bench_device_arg("decode", optarg, &device))
                return 2;
            break;
        case 'W':
            if ((n_formats = fl_bench_formats(optarg, formats, FL_WEIGHTS_COUNT, ferr,
                                              sizeof ferr)) < 0) {
                fprintf(stderr, "fogline bench decode: %s\n", ferr);
                return 2;
            }
            break;
        case 'S': schema_file = optarg; break;
        case 'O': json_object_fmt = true; break;
        case 'C': cuts = true; break;
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, "fogline bench decode: unknown or incomplete option '%s'\n", argv[optind - 1]);
            return 2;
        }
    }
    if (n < 1 || max_tokens < 1) {
        fprintf(stderr, "fogline bench decode: --n and --max-tokens must be positive\n");
        return 2;
    }
    if (!model_dir)
        model_dir = FL_DEFAULT_MODEL_DIR;
    if (cuts && !schema_file && !json_object_fmt) {
        fprintf(stderr, "fogline bench decode: --cuts weighs a constraint: give --schema FILE or "
                        "--json-object\n");
        return 2;
    }
    if ((schema_file || json_object_fmt) && n_formats) {
        fprintf(stderr, "fogline bench decode: --schema/--json-object and --weights are separate "
                        "tables; give one\n");
        return 2;
    }
    char *schema_text = NULL;
    if (schema_file) {
        json_error_t je;
        json_t *sj = json_load_file(schema_file, JSON_DECODE_ANY, &je);
        if (!sj) {
            fprintf(stderr, "fogline bench decode: %s: %s\n", schema_file, je.text);
            return 1;
        }
        schema_text = json_dumps(sj, JSON_COMPACT | JSON_ENCODE_ANY);
        json_decref(sj);
        if (!schema_text) {
            fprintf(stderr, "fogline bench decode: out of memory\n");
            return 1;
        }
    }
    /* the tier's pages go to a fresh directory under $TMPDIR unless --tier-dir names one; that
       one is the user's and is left as it is */
    const char *tmp = getenv("TMPDIR");
    char made[PATH_MAX] = "";
    if (!tier_dir) {
        if (snprintf(made, sizeof made, "%s/fogline-bench-tier-XXXXXX", tmp && *tmp ? tmp : "/tmp")
                >= (int)sizeof made || !mkdtemp(made)) {
            fprintf(stderr, "fogline bench decode: cannot make a temporary tier directory under "
                            "%s: %s\n", tmp && *tmp ? tmp : "/tmp", strerror(errno));
            free(schema_text);
            return 1;
        }
        tier_dir = made;
    }
    int rc = decode_tables(model_dir, prompts, n, max_tokens, threads, device, tier_dir,
                           fsync_tier, formats, n_formats, schema_file, schema_text,
                           json_object_fmt, cuts);
    free(schema_text);
    if (made[0] && fl_rmtree(made)) {
        fprintf(stderr, "fogline bench decode: cannot remove %s: %s\n", made, strerror(errno));
        rc = rc ? rc : 1;
    }
    return rc;
}
