/* serve_engine.c: the engine's start and stop (serve.h): the model, the KV pool's size, the
 * backend and the persistence tier, and the server's clock.
 *
 * The backend is wrapped to time each forward (the step-latency histogram) and the tier to
 * time each put; both observe into atomic histograms, so no lock is taken on those threads. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend_select.h"
#include "redis.h"
#include "serve.h"
#include "serve_sink.h"

double srv_now_ms(srv *s)
{
    (void)s;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- the timing wrappers ---- */

typedef struct timed_backend {
    fl_backend base;
    fl_backend *inner;
    srv_ahist *hist;
} timed_backend;

static int tb_forward(fl_backend *b, const fl_batch *bt, fl_tok_out *out, float *logits, fl_err *e)
{
    timed_backend *t = b->impl;
    struct timespec a, z;
    clock_gettime(CLOCK_MONOTONIC, &a);
    int rc = t->inner->ops->forward(t->inner, bt, out, logits, e);
    clock_gettime(CLOCK_MONOTONIC, &z);
    srv_ahist_observe(t->hist, (double)(z.tv_sec - a.tv_sec) + (double)(z.tv_nsec - a.tv_nsec) / 1e9);
    return rc;
}

static int tb_page_read(fl_backend *b, int32_t page, void *dst, fl_err *e)
{
    timed_backend *t = b->impl;
    return t->inner->ops->page_read(t->inner, page, dst, e);
}

static int tb_page_write(fl_backend *b, int32_t page, const void *src, fl_err *e)
{
    timed_backend *t = b->impl;
    return t->inner->ops->page_write(t->inner, page, src, e);
}

static void tb_destroy(fl_backend *b)
{
    timed_backend *t = b->impl;
    fl_backend_destroy(t->inner);
    free(t);
}

static const fl_backend_ops timed_ops = {"timed", tb_forward, tb_page_read, tb_page_write,
                                         tb_destroy};

static fl_backend *timed_backend_wrap(fl_backend *inner, srv_ahist *hist)
{
    timed_backend *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->base = *inner;
    t->base.ops = &timed_ops;
    t->base.impl = t;
    t->inner = inner;
    t->hist = hist;
    return &t->base;
}

typedef struct timed_tier { /* the ctx of a wrapper tier (fl_tier_destroy frees the tier) */
    fl_kv_tier *inner;
    srv_ahist *hist;
} timed_tier;

static int tt_put(void *ctx, fl_page_key key, const void *blob, size_t len, fl_err *e)
{
    timed_tier *t = ctx;
    struct timespec a, z;
    clock_gettime(CLOCK_MONOTONIC, &a);
    int rc = t->inner->put(t->inner->ctx, key, blob, len, e);
    clock_gettime(CLOCK_MONOTONIC, &z);
    srv_ahist_observe(t->hist, (double)(z.tv_sec - a.tv_sec) + (double)(z.tv_nsec - a.tv_nsec) / 1e9);
    return rc;
}

static int tt_get(void *ctx, fl_page_key key, void *blob, size_t len, fl_err *e)
{
    timed_tier *t = ctx;
    return t->inner->get(t->inner->ctx, key, blob, len, e);
}

static void tt_destroy(void *ctx)
{
    timed_tier *t = ctx;
    fl_tier_destroy(t->inner);
    free(t);
}

/* ---- start and stop ---- */

int srv_engine_start(srv *s, fl_err *e)
{
    srv_config *c = s->cfg;
    fl_load_opts lo = {0};
    lo.chat_template = c->chat_template;
    int rc = fl_model_load(&s->model, c->model_dir, &lo, e);
    if (rc)
        return rc;
    const fl_config *mc = &s->model->cfg;
    if (!s->model->tok)
        return fl_err_set(e, FL_EINVAL, "%s has no tokenizer; serve needs one", c->model_dir);
    /* compiled constraints: 32, and 512 MiB of automata (one of the largest a schema may
       make, 200,000 states, takes about 200 MiB) */
    if (!(s->cons = fl_cons_cache_new(s->model, 32, (int64_t)512 << 20)))
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    /* the request defaults: the model's (family, then its directory's), flags on top */
    char de[300];
    if (fl_gen_opts_resolve(&c->gen, mc, s->dec_src, de, sizeof de))
        return fl_err_set(e, FL_EINVAL, "decoding defaults: %s", de);
    int32_t B = mc->block_size;
    int32_t max_pos = mc->max_pos > 0 ? mc->max_pos : 1 << 20;
    if (c->max_prompt_tokens <= 0 || c->max_prompt_tokens > max_pos - 2 * B)
        c->max_prompt_tokens = max_pos - 2 * B;
    if (c->max_batch_tokens < (c->gen.dec.max_blocks + 1) * B + B) /* room for one request */
        c->max_batch_tokens = (c->gen.dec.max_blocks + 2) * B;
    /* a model id for /v1/models: the directory's last component */
    const char *base = strrchr(c->model_dir, '/');
    base = base && base[1] ? base + 1 : c->model_dir;
    snprintf(s->model_id, sizeof s->model_id, "%s", base);
    size_t n = strlen(s->model_id);
    while (n > 1 && s->model_id[n - 1] == '/')
        s->model_id[--n] = 0;
    /* pages: at least one full-size request at the deepest pipeline, and one spare; by
       default as many as 128 MiB holds (requests beyond the pool wait in the engine's FIFO,
       they are not refused) */
    fl_decode_opts deepest = {.pipeline = true, .max_blocks = FL_MAX_RUN_BLOCKS};
    int32_t per_req = fl_pages_needed(mc, c->max_prompt_tokens, c->max_tokens_limit, &deepest) + 1;
    size_t page_bytes = fl_kv_page_floats(mc) * sizeof(float);
    int64_t budget = (int64_t)((128u << 20) / (page_bytes ? page_bytes : 1));
    int64_t want = (int64_t)per_req * c->max_seqs;
    if (want > budget)
        want = budget;
    if (want < per_req)
        want = per_req;
    s->n_pages = c->kv_pages > 0 ? c->kv_pages : (int32_t)want;
    if (s->n_pages < per_req && c->kv_pages > 0)
        return fl_err_set(e, FL_ERANGE,
                          "--kv-pages %d cannot hold one request of --max-prompt-tokens %d and "
                          "--max-tokens-limit %d (%d pages)", c->kv_pages, c->max_prompt_tokens,
                          c->max_tokens_limit, per_req);
    /* on a GPU the KV pool takes the free device memory unless --kv-pages says otherwise */
    fl_backend_opts bo = {.n_pages = s->n_pages, .n_threads = c->threads,
                          .max_tokens = c->max_batch_tokens, .weights = c->weights, .kv = c->kv,
                          .gpu_n_pages = c->kv_pages > 0 ? c->kv_pages : -1};
    fl_backend *inner = NULL;
    char chosen[700];
    rc = fl_backend_open(&inner, s->model, &bo, c->device, chosen, sizeof chosen, e);
    if (rc)
        return rc;
    s->n_pages = inner->n_pages;
    char qc[800];
    SRV_INFO(&s->log, "event=backend device=%s pages=%d weights=%s kv=%s chosen=%s", c->device,
             inner->n_pages, fl_wformat_name(inner->weights), fl_kvformat_name(inner->kv),
             srv_log_q(qc, sizeof qc, chosen));
    s->backend = timed_backend_wrap(inner, &s->m.step);
    if (!s->backend) {
        fl_backend_destroy(inner);
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    }
    s->model_fp = fl_model_fingerprint(s->model);
    fl_kv_tier *inner_tier = NULL;
    if (c->redis_url) {
        /* Redis is the tier when configured (the host tier is for a single process) */
        srv_redis_opts ro = {0};
        char ue[300];
        if (srv_redis_url_parse(c->redis_url, &ro.url, ue, sizeof ue))
            return fl_err_set(e, FL_EINVAL, "--redis: %s", ue);
        ro.connect_timeout_ms = c->redis_connect_timeout_ms;
        ro.timeout_ms = c->redis_timeout_ms;
        ro.kv_ttl_s = c->redis_kv_ttl;
        ro.kv_cap_bytes = (int64_t)c->redis_kv_cap_mb << 20;
        ro.write_queue_bytes = 64u << 20;
        if (srv_redis_start(&s->redis, &s->loop, &ro, &s->log))
            return fl_err_set(e, FL_ENOMEM, "out of memory");
        inner_tier = srv_redis_tier(s->redis, fl_blob_size(mc));
        if (!inner_tier)
            return fl_err_set(e, FL_ENOMEM, "out of memory");
    } else if (c->kv_host_mb > 0) {
        rc = fl_tier_host_create(&inner_tier, (size_t)c->kv_host_mb << 20, e);
        if (rc)
            return rc;
    }
    if (inner_tier) {
        timed_tier *t = calloc(1, sizeof *t);
        fl_kv_tier *w = calloc(1, sizeof *w);
        if (!t || !w) {
            free(t);
            free(w);
            fl_tier_destroy(inner_tier);
            return fl_err_set(e, FL_ENOMEM, "out of memory");
        }
        *w = *inner_tier;
        w->ctx = t;
        w->put = tt_put;
        w->get = tt_get;
        w->destroy = tt_destroy;
        t->inner = inner_tier;
        t->hist = &s->m.persist_put;
        s->tier = w;
    }
    fl_engine_opts eo = {0};
    eo.sched.max_batch_tokens = c->max_batch_tokens;
    eo.sched.max_seqs = c->max_seqs;
    eo.sched.async_persist = true;
    eo.sched.tier = s->tier;
    eo.sched.model_id = s->model_fp; /* chains page keys: pages of other weights never match */
    /* the server bounds what waits itself (max_queued); the engine's command queue must
       never be the one that says busy first */
    eo.queue_cap = c->max_queued + c->max_seqs + 16;
    return fl_engine_start(&s->engine, s->model, s->backend, &eo, e);
}

void srv_engine_stop(srv *s)
{
    if (s->engine) {
        fl_engine *en = s->engine;
        s->engine = NULL; /* cancels from here on are no-ops: stop cancels everything */
        fl_engine_stop(en);
    }
    srv_drain_events(s);
}
