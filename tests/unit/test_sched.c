/* test_sched.c: the scheduler on the real CPU backend with a random model (argv[1]):
 * exactness of decode-store overlap and batching, pipelined output validity, persistence
 * modes, cancellation and page accounting, a full pool queueing requests, token editing
 * (edits and post steps counted and bounded, a block committed and stored only with its final
 * tokens, overlap and batching exact, pipelining refused). argv[2], a KV
 * format (backend.h; default auto): every backend holds its pages so, and the exactness
 * checks hold all the same (bf16 pages round every key attention reads, cached or not). */
#include "check.h"
#include "cpu/cpu.h"
#include "engine.h"

#include <errno.h>
#include <unistd.h>

#define MAXR 8

typedef struct rec {
    int done;
    fl_finish finish;
    int32_t ids[512];
    int32_t n_ids;
    int32_t commit_ids[512]; /* concatenation of the commit events' ids */
    int32_t n_commit;
    int32_t next_block; /* the block index the next commit must carry */
    int order_ok;
    int drafts;
    fl_seq_stats st;
    /* one block at a time (token editing): the newest draft's tokens, to hold its commit to */
    int32_t dlast[FL_MAX_BLOCK];
    int32_t dlast_n, dlast_block;
    int edited_shown;  /* positions drafts marked edited */
    int drafts_ok;     /* no draft of a committed block; every commit is its last draft */
} rec;

static int CHECK_DRAFTS; /* set around runs of one block at a time */

static void sink(const fl_event *ev, void *ctx)
{
    rec *r = ctx;
    if (ev->type == FL_EV_DRAFT) {
        r->drafts++;
        if (CHECK_DRAFTS) {
            if (ev->block < r->next_block)
                r->drafts_ok = 0;
            memcpy(r->dlast, ev->tokens, sizeof(int32_t) * (size_t)ev->n);
            r->dlast_n = ev->n;
            r->dlast_block = ev->block;
            for (int i = 0; i < ev->n; i++)
                r->edited_shown += ev->edited[i];
        }
    } else if (ev->type == FL_EV_COMMIT) {
        if (ev->block != r->next_block)
            r->order_ok = 0;
        /* a commit is final: the block's newest draft, edits and all (up to its cut) */
        if (CHECK_DRAFTS && (r->dlast_block != ev->block || ev->n_ids > r->dlast_n ||
                             memcmp(ev->ids, r->dlast, sizeof(int32_t) * (size_t)ev->n_ids)))
            r->drafts_ok = 0;
        r->next_block++;
        for (int i = 0; i < ev->n_ids && r->n_commit < 512; i++)
            r->commit_ids[r->n_commit++] = ev->ids[i];
    } else {
        r->done = 1;
        r->finish = ev->finish;
        r->n_ids = ev->n_ids < 512 ? ev->n_ids : 512;
        memcpy(r->ids, ev->ids, sizeof(int32_t) * (size_t)r->n_ids);
        r->st = *ev->stats;
    }
}

static const fl_model *M;
static fl_backend *BK;
static bool ALL_OUTPUTS;      /* fl_sched_opts.all_outputs of run()'s schedulers */
static int64_t LAST_OUT_ROWS; /* the outputs run()'s last scheduler asked of the backend */
static fl_kvformat KVF; /* argv[2] */

/* One scheduler step; when it had nothing to run (a queued request waits for pages the
   persistence thread still holds), wait for that thread as the engine thread does, instead of
   spinning through the step budget (a slow persister under ASan made the spin win). */
static int step(fl_sched *s, fl_err *e)
{
    int rc = fl_sched_step(s, e);
    if (rc == 0)
        fl_sched_flush(s);
    return rc;
}

/* Runs prompts through one scheduler; returns 0 when all finished. */
static int run(const fl_decode_opts *d, bool async, fl_kv_tier *tier, int32_t max_seqs,
               int nprompts, int32_t prompts[][40], const int32_t *plen, int32_t max_tokens,
               rec *out, int32_t *pages_left)
{
    fl_err e = {0};
    fl_sched_opts so = {.max_batch_tokens = BK->max_tokens, .max_seqs = max_seqs,
                        .async_persist = async, .tier = tier, .model_id = 7,
                        .all_outputs = ALL_OUTPUTS};
    fl_sched *s;
    if (fl_sched_create(&s, M, BK, &so, &e)) {
        fprintf(stderr, "sched: %s\n", e.msg);
        return -1;
    }
    for (int i = 0; i < nprompts; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].order_ok = 1;
        out[i].drafts_ok = 1;
        out[i].dlast_block = -1;
        fl_request r = {.prompt = prompts[i], .n_prompt = plen[i], .max_tokens = max_tokens, .dec = *d};
        if (fl_sched_add(s, &r, sink, &out[i], (uint64_t)i + 1, &e)) {
            fprintf(stderr, "add: %s\n", e.msg);
            fl_sched_destroy(s);
            return -1;
        }
    }
    int guard = 0, done = 0;
    while (done < nprompts && guard++ < 100000) {
        if (step(s, &e) < 0) {
            fprintf(stderr, "step: %s\n", e.msg);
            break;
        }
        done = 0;
        for (int i = 0; i < nprompts; i++)
            done += out[i].done;
    }
    fl_sched_flush(s);
    if (pages_left)
        *pages_left = fl_kvpool_used(fl_sched_pool(s));
    fl_sched_stats sst;
    fl_sched_get_stats(s, &sst);
    LAST_OUT_ROWS = sst.out_rows;
    fl_sched_destroy(s);
    return done == nprompts ? 0 : -1;
}

static int same_ids(const rec *a, const rec *b)
{
    return a->n_ids == b->n_ids && !memcmp(a->ids, b->ids, sizeof(int32_t) * (size_t)a->n_ids);
}

int main(int argc, char **argv)
{
    /* the model: argv[1], else the fixture ctest made in the build directory */
    char dflt[4096];
    const char *bd = getenv("FL_BUILD_DIR");
    snprintf(dflt, sizeof dflt, "%s/fixtures/dec_q3", bd ? bd : ".");
    const char *dir = argc > 1 ? argv[1] : dflt;
    fl_err e = {0};
    if (argc > 2 && fl_kvformat_parse(argv[2], &KVF, &e)) {
        fprintf(stderr, "KV format %s\n", e.msg);
        return 1;
    }
    fl_model *m;
    fl_load_opts lo = {.no_tokenizer = true};
    if (fl_model_load(&m, dir, &lo, &e)) {
        fprintf(stderr, "load: %s\n", e.msg);
        return 1;
    }
    if (m->cfg.mask_token_id < 0) /* Fast-dLLM v2 takes it from the tokenizer; random models have none */
        m->cfg.mask_token_id = m->cfg.vocab - 1;
    M = m;
    printf("KV pages: %s\n", fl_kvformat_name(KVF));
    fl_backend_opts bo = {.n_pages = 256, .n_threads = 2, .max_tokens = 512, .kv = KVF};
    if (fl_backend_cpu_create(&BK, m, &bo, &e)) {
        fprintf(stderr, "backend: %s\n", e.msg);
        return 1;
    }
    int32_t B = m->cfg.block_size, V = m->cfg.vocab;
    /* prompts of different lengths: below a block, exactly whole blocks, ragged */
    int32_t prompts[MAXR][40];
    int32_t plen[MAXR] = {3, 8, 13, 21, 4, 17, 30, 9};
    uint64_t x = 12345;
    for (int i = 0; i < MAXR; i++)
        for (int j = 0; j < plen[i]; j++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            prompts[i][j] = (int32_t)((x >> 33) % (uint64_t)(V - 3)); /* no mask/eos in prompts */
        }
    const int32_t MT = 2 * B + 8 > 24 ? 2 * B + 8 : 24; /* replies cross block boundaries */
    rec alone[MAXR], batch[MAXR], other[MAXR];
    fl_decode_opts base;
    fl_decode_opts_default(&base);
    base.pipeline = false;
    base.store_overlap = false;
    base.policy = FL_POLICY_THRESHOLD;
    base.threshold = 0.5f;

    /* 1. each prompt alone, baseline schedule (store pass, one block) */
    for (int i = 0; i < MAXR; i++)
        CHECK(run(&base, false, NULL, 1, 1, &prompts[i], &plen[i], MT, &alone[i], NULL) == 0, "alone %d", i);
    for (int i = 0; i < MAXR; i++) {
        CHECK(alone[i].n_ids > 0 || alone[i].finish == FL_FINISH_STOP, "prompt %d produced something", i);
        CHECK(alone[i].order_ok && alone[i].n_commit == alone[i].n_ids &&
                  !memcmp(alone[i].commit_ids, alone[i].ids, sizeof(int32_t) * (size_t)alone[i].n_ids),
              "commits add up to the reply (%d)", i);
        if (alone[i].st.blocks > 1)
            CHECK(alone[i].st.store_forwards > 0, "baseline has store passes (%d)", i);
    }
    /* 2. decode-store overlap is exact: same tokens, fewer forwards */
    fl_decode_opts ov = base;
    ov.store_overlap = true;
    for (int i = 0; i < MAXR; i++) {
        CHECK(run(&ov, false, NULL, 1, 1, &prompts[i], &plen[i], MT, &other[i], NULL) == 0, "overlap %d", i);
        CHECK(same_ids(&alone[i], &other[i]), "overlap changes no token (prompt %d)", i);
        if (m->cfg.logits_shift) {
            /* Fast-dLLM v2: a finished block's store forward yields the next block's first
               token, so it cannot ride along with that block's first denoise step; only the
               prompt's prefill does (when the prompt ends inside a block) */
            CHECK(other[i].st.forwards <= alone[i].st.forwards, "overlap costs no forward (%d)", i);
            if (plen[i] % B && plen[i] > B)
                CHECK(other[i].st.forwards < alone[i].st.forwards, "the prefill rides along (%d)", i);
            CHECK(other[i].st.store_forwards <= other[i].st.blocks, "store forwards (%d)", i);
        } else {
            if (alone[i].st.blocks > 1)
                CHECK(other[i].st.forwards < alone[i].st.forwards, "overlap saves forwards (%d: %d vs %d)",
                      i, other[i].st.forwards, alone[i].st.forwards);
            CHECK(other[i].st.store_forwards == 0, "no store-only forward with overlap (%d)", i);
        }
    }
    /* 3. batching: all prompts in one scheduler give each its lone output */
    int32_t left = -1;
    CHECK(run(&ov, true, NULL, MAXR, MAXR, prompts, plen, MT, batch, &left) == 0, "batched run");
    for (int i = 0; i < MAXR; i++)
        CHECK(same_ids(&alone[i], &batch[i]), "batched output equals alone (prompt %d)", i);
    CHECK(left == 0, "every page back after the batch: %d used", left);
    /* 4. a pool too small for all at once: requests wait, none fail, outputs unchanged */
    {
        fl_backend *big = BK;
        fl_backend_opts so2 = {.n_pages = (30 + MT) / B + 4 + 3, .n_threads = 2, .max_tokens = 512,
                               .kv = KVF};
        fl_backend *small;
        CHECK(fl_backend_cpu_create(&small, m, &so2, &e) == 0, "small backend: %s", e.msg);
        BK = small;
        CHECK(run(&ov, true, NULL, MAXR, MAXR, prompts, plen, MT, other, &left) == 0, "small pool run");
        for (int i = 0; i < MAXR; i++)
            CHECK(same_ids(&alone[i], &other[i]) && other[i].finish != FL_FINISH_ERROR,
                  "queued request completes with its lone output (%d)", i);
        CHECK(left == 0, "pages back: %d", left);
        /* a request that can never fit the pool is refused, not queued forever */
        fl_sched_opts so = {.max_batch_tokens = small->max_tokens, .max_seqs = 4};
        fl_sched *s;
        CHECK(fl_sched_create(&s, m, small, &so, &e) == 0, "sched");
        fl_request rq = {.prompt = prompts[0], .n_prompt = plen[0], .max_tokens = 40 * B, .dec = base};
        CHECK(fl_sched_add(s, &rq, sink, NULL, 1, &e) == FL_ERANGE && strstr(e.msg, "pages"), "%s", e.msg);
        fl_sched_destroy(s);
        fl_backend_destroy(small);
        BK = big;
    }
    /* 5. pipelining: outputs valid (blocks committed in order, commits == reply), fewer or
       equal forwards per token on average */
    fl_decode_opts pl = ov;
    pl.pipeline = true;
    pl.tau_add = 0.1f;
    pl.tau_act = 0.5f;
    pl.tau_conf = 0.6f;
    pl.max_blocks = 3;
    CHECK(run(&pl, true, NULL, MAXR, MAXR, prompts, plen, MT, other, &left) == 0, "pipelined run");
    for (int i = 0; i < MAXR; i++) {
        CHECK(other[i].order_ok, "pipelined commits in order (%d)", i);
        CHECK(other[i].n_commit == other[i].n_ids &&
                  !memcmp(other[i].commit_ids, other[i].ids, sizeof(int32_t) * (size_t)other[i].n_ids),
              "pipelined commits add up to the reply (%d)", i);
        CHECK(other[i].n_ids <= MT, "max_tokens respected (%d: %d)", i, other[i].n_ids);
    }
    CHECK(left == 0, "pages back after pipelining: %d", left);
    /* 6. persistence: sync and async write the same pages to a directory tier, same outputs */
    char d1[] = "/tmp/fl-sched-tier-XXXXXX";
    CHECK(mkdtemp(d1) != NULL, "mkdtemp");
    fl_kv_tier *tier;
    CHECK(fl_tier_dir_create(&tier, d1, false, &e) == 0, "tier: %s", e.msg);
    CHECK(run(&ov, false, tier, 2, 2, prompts, plen, MT, other, &left) == 0, "sync persist run");
    CHECK(same_ids(&alone[0], &other[0]) && same_ids(&alone[1], &other[1]), "sync persistence changes nothing");
    CHECK(run(&ov, true, tier, 2, 2, prompts, plen, MT, other, &left) == 0, "async persist run");
    CHECK(same_ids(&alone[0], &other[0]) && same_ids(&alone[1], &other[1]), "async persistence changes nothing");
    CHECK(left == 0, "pages back after async persistence: %d", left);
    /* 6b. a cached prefix: pages read back from the tier replace the prompt's prefill, with
       the lone output; damaged or foreign pages end the prefix there, output unchanged */
    {
        int32_t lp[2][4 * 64 + 8]; /* two prompts of 3 whole blocks + 5 tokens; [1] differs at 0 */
        int32_t llen = 3 * B + 5;
        CHECK(llen <= 4 * 64 + 8, "block size %d fits the test", B);
        for (int j = 0; j < llen; j++)
            lp[0][j] = lp[1][j] = prompts[j % MAXR][j % plen[j % MAXR]];
        lp[1][0] = (lp[0][0] + 1) % (V - 3);
        rec lalone[2];
        for (int i = 0; i < 2; i++)
            CHECK(run(&ov, true, i ? NULL : tier, 1, 1, (int32_t(*)[40])lp[i], &llen, MT, &lalone[i], NULL) == 0,
                  "long prompt %d alone", i);
        int32_t nb = (llen - 1) / B;
        size_t bl = fl_blob_size(&m->cfg);
        unsigned char *blobs = malloc(bl * (size_t)(nb + 1));
        fl_page_key parent = {0, 0};
        for (int32_t b = 0; b < nb; b++) {
            fl_page_key k = fl_page_key_chain(7, parent, lp[0] + b * B, B);
            CHECK(tier->get(tier->ctx, k, blobs + (size_t)b * bl, bl, &e) == 0, "page %d in the tier: %s", b, e.msg);
            parent = k;
        }
        /* one more page than allowed: the block with the last prompt token is never loaded */
        memcpy(blobs + (size_t)nb * bl, blobs, bl);
        struct { int corrupt_page; int prompt; int32_t want_cached; int want_rejected; } cases[] = {
            {-1, 0, nb * B, 0}, /* all good */
            {1, 0, 1 * B, 1},   /* damaged payload byte in page 1 */
            {0, 0, 0, 1},       /* damaged first page */
            {-1, 1, 0, 1},      /* the pages belong to another prompt */
        };
        int64_t fwd_tokens[4] = {0};
        for (int c = 0; c < 4; c++) {
            fl_sched_opts so = {.max_batch_tokens = BK->max_tokens, .max_seqs = 2, .model_id = 7};
            fl_sched *s;
            CHECK(fl_sched_create(&s, m, BK, &so, &e) == 0, "sched");
            unsigned char *pre = malloc(bl * (size_t)(nb + 1));
            memcpy(pre, blobs, bl * (size_t)(nb + 1));
            if (cases[c].corrupt_page >= 0)
                pre[(size_t)cases[c].corrupt_page * bl + bl - 3] ^= 0x40;
            rec r1;
            memset(&r1, 0, sizeof r1);
            fl_request rq = {.prompt = lp[cases[c].prompt], .n_prompt = llen, .max_tokens = MT, .dec = ov,
                             .prefix = pre, .n_prefix = nb + 1};
            CHECK(fl_sched_add(s, &rq, sink, &r1, 1, &e) == 0, "add with prefix: %s", e.msg);
            for (int g = 0; g < 10000 && !r1.done; g++)
                step(s, &e);
            fl_sched_stats st;
            fl_sched_get_stats(s, &st);
            CHECK(r1.done && same_ids(&lalone[cases[c].prompt], &r1), "prefix case %d: the lone output", c);
            CHECK(r1.st.cached_tokens == cases[c].want_cached, "prefix case %d: %d cached tokens, want %d",
                  c, r1.st.cached_tokens, cases[c].want_cached);
            CHECK(r1.st.prefix_rejected == cases[c].want_rejected && st.prefix_pages_rejected == cases[c].want_rejected,
                  "prefix case %d: %d rejected", c, r1.st.prefix_rejected);
            CHECK(st.prefix_pages_loaded == cases[c].want_cached / B, "prefix case %d: pages loaded %lld", c,
                  (long long)st.prefix_pages_loaded);
            fwd_tokens[c] = st.tokens_forwarded;
            fl_sched_flush(s);
            CHECK(fl_kvpool_used(fl_sched_pool(s)) == 0, "prefix pages freed: %d", fl_kvpool_used(fl_sched_pool(s)));
            fl_sched_destroy(s);
        }
        CHECK(fwd_tokens[0] == fwd_tokens[2] - nb * B, "the cached prefix is not computed: %lld vs %lld tokens",
              (long long)fwd_tokens[0], (long long)fwd_tokens[2]);
        /* 6c. the engine's own prefix cache: two identical prompts submitted together share the
           prompt's pages (the second waits a step for them to be stored), outputs unchanged; a
           later identical request takes them from the cache after both finished */
        {
            fl_sched_opts so = {.max_batch_tokens = BK->max_tokens, .max_seqs = 4, .model_id = 7};
            fl_sched *s;
            CHECK(fl_sched_create(&s, m, BK, &so, &e) == 0, "sched");
            rec r3[3];
            memset(r3, 0, sizeof r3);
            for (int i = 0; i < 2; i++) {
                fl_request rq = {.prompt = lp[0], .n_prompt = llen, .max_tokens = MT, .dec = ov};
                CHECK(fl_sched_add(s, &rq, sink, &r3[i], (uint64_t)i + 1, &e) == 0, "add: %s", e.msg);
            }
            for (int g = 0; g < 10000 && !(r3[0].done && r3[1].done); g++)
                step(s, &e);
            fl_sched_stats st;
            fl_sched_get_stats(s, &st);
            CHECK(same_ids(&lalone[0], &r3[0]) && same_ids(&lalone[0], &r3[1]), "shared prefix: the lone outputs");
            CHECK(r3[0].st.shared_tokens == 0 && r3[1].st.shared_tokens == nb * B,
                  "the second shares %d tokens (want %d), the first %d", r3[1].st.shared_tokens, nb * B,
                  r3[0].st.shared_tokens);
            CHECK(st.prefix_pages_shared == nb, "pages shared %lld", (long long)st.prefix_pages_shared);
            int64_t tok2 = st.tokens_forwarded;
            CHECK(tok2 < 2 * fwd_tokens[2] - nb * B + 1, "the shared prefix is computed once (%lld vs %lld)",
                  (long long)tok2, (long long)(2 * fwd_tokens[2]));
            fl_sched_flush(s);
            fl_sched_get_stats(s, &st);
            CHECK(st.pages_used == 0 && st.pages_cached > 0, "idle: %d used, %d cached", st.pages_used, st.pages_cached);
            fl_request rq = {.prompt = lp[0], .n_prompt = llen, .max_tokens = MT, .dec = ov};
            CHECK(fl_sched_add(s, &rq, sink, &r3[2], 3, &e) == 0, "add: %s", e.msg);
            for (int g = 0; g < 10000 && !r3[2].done; g++)
                step(s, &e);
            CHECK(same_ids(&lalone[0], &r3[2]) && r3[2].st.shared_tokens == nb * B,
                  "from the cache after both ended: %d shared", r3[2].st.shared_tokens);
            /* a different prompt in a pool full of cached pages evicts them and runs */
            fl_sched_flush(s);
            fl_sched_destroy(s);
        }
        {
            /* a pool that holds one request: cached pages of one prompt are evicted for the next */
            fl_backend_opts so2 = {.n_pages = (llen + MT + B - 1) / B + 2, .n_threads = 2,
                                   .max_tokens = 512, .kv = KVF};
            fl_backend *small;
            CHECK(fl_backend_cpu_create(&small, m, &so2, &e) == 0, "small backend: %s", e.msg);
            fl_sched_opts so = {.max_batch_tokens = small->max_tokens, .max_seqs = 4, .model_id = 7};
            fl_sched *s;
            CHECK(fl_sched_create(&s, m, small, &so, &e) == 0, "sched");
            rec r4[2];
            memset(r4, 0, sizeof r4);
            for (int i = 0; i < 2; i++) {
                fl_request rq = {.prompt = lp[i], .n_prompt = llen, .max_tokens = MT, .dec = ov};
                CHECK(fl_sched_add(s, &rq, sink, &r4[i], (uint64_t)i + 1, &e) == 0, "add: %s", e.msg);
                for (int g = 0; g < 10000 && !r4[i].done; g++)
                    step(s, &e);
                fl_sched_flush(s);
            }
            fl_sched_stats st;
            fl_sched_get_stats(s, &st);
            CHECK(same_ids(&lalone[0], &r4[0]) && same_ids(&lalone[1], &r4[1]), "outputs with eviction");
            CHECK(st.pages_evicted > 0 && st.pages_used == 0, "evicted %lld, used %d", (long long)st.pages_evicted,
                  st.pages_used);
            fl_sched_destroy(s);
            fl_backend_destroy(small);
        }
        int P = 0;
        /* bad input: pages claimed without data */
        fl_sched_opts so = {.max_batch_tokens = BK->max_tokens, .max_seqs = 2, .model_id = 7};
        fl_sched *s;
        CHECK(fl_sched_create(&s, m, BK, &so, &e) == 0, "sched");
        fl_request rq = {.prompt = prompts[P], .n_prompt = plen[P], .max_tokens = MT, .dec = ov, .n_prefix = 2};
        (void)P;
        CHECK(fl_sched_add(s, &rq, sink, NULL, 1, &e) == FL_EINVAL && strstr(e.msg, "prefix"), "%s", e.msg);
        fl_sched_destroy(s);
        /* a queued request with a prefix that is cancelled frees it (ASan/valgrind see leaks) */
        CHECK(fl_sched_create(&s, m, BK, &so, &e) == 0, "sched");
        rq.prefix = malloc(bl);
        rq.n_prefix = 1;
        memcpy(rq.prefix, blobs, bl);
        rec rc1;
        memset(&rc1, 0, sizeof rc1);
        CHECK(fl_sched_add(s, &rq, sink, &rc1, 1, &e) == 0, "add: %s", e.msg);
        CHECK(fl_sched_cancel(s, 1) == 0 && rc1.finish == FL_FINISH_CANCELLED, "cancel queued");
        fl_sched_destroy(s);
        free(blobs);
    }
    /* the blob checksum: every single-byte change after the header is caught */
    {
        size_t bl = fl_blob_size(&m->cfg);
        float *pg = calloc(BK->page_bytes / 4, sizeof(float));
        float *pg2 = calloc(BK->page_bytes / 4, sizeof(float));
        int32_t tk[256] = {0}, tk2[256];
        for (size_t i = 0; i < BK->page_bytes / 4; i++)
            pg[i] = (float)i * 0.25f - 3.0f;
        unsigned char *bb = malloc(bl);
        fl_page_key k = {1, 2};
        CHECK(fl_blob_encode(&m->cfg, 7, k, tk, pg, bb, bl, &e) == 0, "encode");
        CHECK(fl_blob_decode(&m->cfg, 7, k, bb, bl, tk2, pg2, &e) == 0, "decode: %s", e.msg);
        CHECK(pg2[5] == pg[5] && pg2[100] == pg[100], "round trip (exact in bf16)");
        int missed = 0;
        for (size_t i = sizeof(fl_blob_header); i < bl; i += 7) {
            bb[i] ^= 1;
            if (fl_blob_decode(&m->cfg, 7, k, bb, bl, tk2, pg2, &e) != FL_EFORMAT)
                missed++;
            bb[i] ^= 1;
        }
        CHECK(missed == 0, "checksum catches every flipped bit tried (%d missed)", missed);
        CHECK(fl_blob_decode(&m->cfg, 7, k, bb, bl - 1, tk2, pg2, &e) == FL_EFORMAT, "short blob");
        CHECK(fl_blob_decode(&m->cfg, 8, k, bb, bl, tk2, pg2, &e) == FL_EFORMAT && strstr(e.msg, "model"), "%s", e.msg);
        free(bb);
        free(pg);
        free(pg2);
    }
    fl_tier_destroy(tier);
    CHECK(fl_rmtree(d1) == 0, "tier directory removed: %s", strerror(errno));
    /* 7. cancellation mid-block frees every page */
    {
        fl_sched_opts so = {.max_batch_tokens = BK->max_tokens, .max_seqs = 4, .async_persist = true};
        fl_sched *s;
        CHECK(fl_sched_create(&s, m, BK, &so, &e) == 0, "sched");
        rec r[3];
        memset(r, 0, sizeof r);
        fl_decode_opts seqd = base;
        seqd.policy = FL_POLICY_SEQUENTIAL; /* one token per step: cancel lands mid-block */
        seqd.store_overlap = true;
        for (int i = 0; i < 3; i++) {
            fl_request rq = {.prompt = prompts[i + 3], .n_prompt = plen[i + 3], .max_tokens = 64, .dec = seqd};
            CHECK(fl_sched_add(s, &rq, sink, &r[i], (uint64_t)i + 1, &e) == 0, "add %s", e.msg);
        }
        for (int k = 0; k < B + 1; k++) /* into the second block, before any reply can end */
            step(s, &e);
        CHECK(fl_kvpool_used(fl_sched_pool(s)) > 0, "pages in use mid-run");
        for (int i = 0; i < 3; i++)
            CHECK(fl_sched_cancel(s, (uint64_t)i + 1) == 0, "cancel %d", i);
        CHECK(fl_sched_cancel(s, 99) == FL_ENOTFOUND, "unknown id");
        for (int i = 0; i < 3; i++)
            CHECK(r[i].done && r[i].finish == FL_FINISH_CANCELLED, "cancel sends done(cancelled) %d", i);
        fl_sched_flush(s);
        CHECK(fl_kvpool_used(fl_sched_pool(s)) == 0, "cancel frees every page: %d used",
              fl_kvpool_used(fl_sched_pool(s)));
        CHECK(fl_sched_idle(s), "idle after cancel");
        fl_sched_destroy(s);
    }
    /* 8. token editing (LLaDA2.1): a random model's top probabilities are 0.02-0.05, so an
       edit threshold of 0.02 rewrites tokens often. Edits and post steps happen and are
       bounded; overlap and batching change nothing; each commit is its block's final draft
       and each stored page holds final tokens (a page stored before the post steps would be
       keyed by tokens that changed); max_post_steps 0 takes no post step; pipelining is
       refused. */
    {
        fl_decode_opts ed = base;
        ed.edit_threshold = 0.02f;
        ed.max_post_steps = 3;
        rec e1[MAXR], e2[MAXR], e3[MAXR], e4[MAXR];
        char d2[] = "/tmp/fl-sched-edit-XXXXXX";
        CHECK(mkdtemp(d2) != NULL, "mkdtemp");
        fl_kv_tier *et;
        CHECK(fl_tier_dir_create(&et, d2, false, &e) == 0, "tier: %s", e.msg);
        CHECK_DRAFTS = 1;
        fl_decode_opts edo = ed;
        edo.store_overlap = true;
        int32_t edits = 0, posts = 0, shown = 0;
        for (int i = 0; i < MAXR; i++) {
            CHECK(run(&ed, false, NULL, 1, 1, &prompts[i], &plen[i], MT, &e1[i], NULL) == 0, "edit %d", i);
            CHECK(run(&edo, false, et, 1, 1, &prompts[i], &plen[i], MT, &e2[i], NULL) == 0, "edit+overlap %d", i);
            CHECK(same_ids(&e1[i], &e2[i]) && e1[i].st.edits == e2[i].st.edits &&
                      e1[i].st.post_steps == e2[i].st.post_steps,
                  "editing: overlap changes nothing (prompt %d: %d/%d edits)", i, e1[i].st.edits,
                  e2[i].st.edits);
            CHECK(e1[i].order_ok && e1[i].drafts_ok && e2[i].drafts_ok,
                  "editing: commits in order, each its block's final draft (%d)", i);
            CHECK(e1[i].n_commit == e1[i].n_ids, "editing: commits add up to the reply (%d)", i);
            CHECK(e1[i].st.post_steps <= e1[i].st.blocks * ed.max_post_steps,
                  "post steps within max_post_steps per block (%d: %d over %d blocks)", i,
                  e1[i].st.post_steps, e1[i].st.blocks);
            edits += e1[i].st.edits;
            posts += e1[i].st.post_steps;
            shown += e1[i].edited_shown;
        }
        printf("editing: %d edits (%d shown in drafts), %d post steps\n", edits, shown, posts);
        CHECK(edits > 0 && posts > 0 && shown > 0, "edits happened (%d), post steps ran (%d), drafts "
              "showed edits (%d)", edits, posts, shown);
        CHECK(shown <= edits, "drafts show no more edits than were made");
        /* the stored pages: every whole reply block that was stored (all but the last) is
           found under the key chained from its final tokens */
        int found = 0;
        for (int i = 0; i < MAXR; i++) {
            int32_t all[40 + 512], n = 0;
            memcpy(all, prompts[i], sizeof(int32_t) * (size_t)plen[i]);
            n = plen[i];
            memcpy(all + n, e2[i].ids, sizeof(int32_t) * (size_t)e2[i].n_ids);
            n += e2[i].n_ids;
            int32_t stored = (plen[i] / B + e2[i].st.blocks - 1) * B; /* the last block is not */
            fl_page_key parent = {0, 0};
            size_t bl = fl_blob_size(&m->cfg);
            unsigned char *blob = malloc(bl);
            for (int32_t b = 0; (b + 1) * B <= stored && (b + 1) * B <= n; b++) {
                parent = fl_page_key_chain(7, parent, all + b * B, B);
                bool reply = (b + 1) * B > plen[i];
                if (reply) {
                    CHECK(et->get(et->ctx, parent, blob, bl, &e) == 0,
                          "prompt %d block %d stored with its final tokens: %s", i, b, e.msg);
                    found++;
                }
            }
            free(blob);
        }
        CHECK(found > 0, "some edited reply blocks were stored (%d)", found);
        fl_tier_destroy(et);
        CHECK(fl_rmtree(d2) == 0, "edit tier directory removed: %s", strerror(errno));
        /* batched: every prompt in one scheduler, each its lone output */
        CHECK(run(&edo, true, NULL, MAXR, MAXR, prompts, plen, MT, e3, &left) == 0, "batched editing run");
        for (int i = 0; i < MAXR; i++)
            CHECK(same_ids(&e1[i], &e3[i]) && e1[i].st.edits == e3[i].st.edits,
                  "editing: batched equals alone (prompt %d)", i);
        CHECK(left == 0, "pages back after editing: %d", left);
        /* no post steps: edits still happen while masks remain, no step after the last */
        fl_decode_opts np = edo;
        np.max_post_steps = 0;
        int32_t np_edits = 0;
        for (int i = 0; i < MAXR; i++) {
            CHECK(run(&np, false, NULL, 1, 1, &prompts[i], &plen[i], MT, &e4[i], NULL) == 0, "no post %d", i);
            CHECK(e4[i].st.post_steps == 0, "max_post_steps 0 takes none (%d: %d)", i, e4[i].st.post_steps);
            np_edits += e4[i].st.edits;
        }
        CHECK(np_edits > 0, "edits without post steps (%d)", np_edits);
        CHECK_DRAFTS = 0;
        /* editing with pipelining is refused with one line */
        fl_sched_opts so = {.max_batch_tokens = BK->max_tokens, .max_seqs = 4};
        fl_sched *s;
        CHECK(fl_sched_create(&s, m, BK, &so, &e) == 0, "sched");
        fl_decode_opts pe = edo;
        pe.pipeline = true;
        fl_request rq = {.prompt = prompts[0], .n_prompt = plen[0], .max_tokens = 8, .dec = pe};
        CHECK(fl_sched_add(s, &rq, sink, NULL, 1, &e) == FL_EINVAL &&
                  !strcmp(e.msg, "edit_threshold (token editing) works on one block at a time: "
                                 "it needs pipeline false"),
              "%s", e.msg);
        fl_sched_destroy(s);
    }
    /* 9. bad requests are refused with a message */
    {
        fl_sched_opts so = {.max_batch_tokens = BK->max_tokens, .max_seqs = 4};
        fl_sched *s;
        CHECK(fl_sched_create(&s, m, BK, &so, &e) == 0, "sched");
        fl_request rq = {.prompt = prompts[0], .n_prompt = 0, .max_tokens = 8, .dec = base};
        CHECK(fl_sched_add(s, &rq, sink, NULL, 1, &e) == FL_EINVAL && strstr(e.msg, "empty"), "%s", e.msg);
        int32_t badtok[2] = {1, V + 5};
        rq.prompt = badtok;
        rq.n_prompt = 2;
        CHECK(fl_sched_add(s, &rq, sink, NULL, 1, &e) == FL_EINVAL && strstr(e.msg, "vocabulary"), "%s", e.msg);
        rq.prompt = prompts[0];
        rq.n_prompt = plen[0];
        rq.max_tokens = 8;
        rq.dec.threshold = 2.0f;
        CHECK(fl_sched_add(s, &rq, sink, NULL, 1, &e) == FL_ERANGE && strstr(e.msg, "threshold"), "%s", e.msg);
        fl_sched_destroy(s);
    }
    /* 10. the scheduler asks the backend only for the outputs a step reads (its lm_head
       rows): the same replies, forwards, edits and post steps as when it asks for every
       output from out_from (all_outputs), with fewer rows, greedy and sampled, one block at a
       time, pipelined, and editing */
    {
        fl_decode_opts vs[5] = {ov, pl, base, ov, ov};
        const char *vn[5] = {"overlap", "pipelined", "store pass", "sampled", "editing"};
        vs[3].temperature = 0.8f;
        vs[3].seed = 99;
        vs[4].edit_threshold = 0.02f;
        vs[4].max_post_steps = 3;
        for (int v = 0; v < 5; v++) {
            rec all[MAXR], trim[MAXR];
            ALL_OUTPUTS = true;
            CHECK(run(&vs[v], false, NULL, MAXR, MAXR, prompts, plen, MT, all, NULL) == 0,
                  "%s, all outputs", vn[v]);
            int64_t rows_all = LAST_OUT_ROWS;
            ALL_OUTPUTS = false;
            CHECK(run(&vs[v], false, NULL, MAXR, MAXR, prompts, plen, MT, trim, NULL) == 0,
                  "%s, outputs read", vn[v]);
            int64_t rows_trim = LAST_OUT_ROWS;
            int same = 0;
            for (int i = 0; i < MAXR; i++)
                same += same_ids(&all[i], &trim[i]) && all[i].st.forwards == trim[i].st.forwards &&
                        all[i].st.edits == trim[i].st.edits &&
                        all[i].st.post_steps == trim[i].st.post_steps;
            CHECK(same == MAXR, "%s: asking only for the outputs read changed %d of %d replies",
                  vn[v], MAXR - same, MAXR);
            CHECK(rows_trim < rows_all, "%s: %lld output rows asked, against %lld for all",
                  vn[v], (long long)rows_trim, (long long)rows_all);
            printf("outputs asked, %s: %lld of %lld\n", vn[v], (long long)rows_trim,
                   (long long)rows_all);
        }
    }
    fl_backend_destroy(BK);
    fl_model_free(m);
    return check_summary("test_sched");
}
