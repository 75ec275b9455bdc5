/* serve_metrics.c: the metrics and their Prometheus text rendering. */
#include "serve_metrics.h"
#include "redis.h"

#include <string.h>

static const double b_tpf[] = {0.5, 1, 1.5, 2, 2.5, 3, 4, 5, 6, 8};
static const double b_first[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
static const double b_gap[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
static const double b_step[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1};
static const double b_put[] = {0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1};

#define NB(a) ((int)(sizeof a / sizeof a[0]))

void srv_metrics_init(srv_metrics *m)
{
    memset(m, 0, sizeof *m);
    m->tpf.bounds = b_tpf, m->tpf.n = NB(b_tpf);
    m->first_update.bounds = b_first, m->first_update.n = NB(b_first);
    m->update_gap.bounds = b_gap, m->update_gap.n = NB(b_gap);
    m->step.bounds = b_step, m->step.n = NB(b_step);
    m->persist_put.bounds = b_put, m->persist_put.n = NB(b_put);
    for (int i = 0; i <= SRV_HIST_MAX; i++) {
        atomic_init(&m->step.counts[i], 0);
        atomic_init(&m->persist_put.counts[i], 0);
    }
    atomic_init(&m->step.sum_us, 0);
    atomic_init(&m->step.count, 0);
    atomic_init(&m->persist_put.sum_us, 0);
    atomic_init(&m->persist_put.count, 0);
}

void srv_hist_observe(srv_hist *h, double v)
{
    int i = 0;
    while (i < h->n && v > h->bounds[i])
        i++;
    h->counts[i]++; /* non-cumulative here; rendering accumulates */
    h->sum += v;
    h->count++;
}

void srv_ahist_observe(srv_ahist *h, double seconds)
{
    int i = 0;
    while (i < h->n && seconds > h->bounds[i])
        i++;
    atomic_fetch_add_explicit(&h->counts[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_us, (uint64_t)(seconds * 1e6 + 0.5), memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
}

void srv_metrics_error(srv_metrics *m, const char *code)
{
    for (int i = 0; i < SRV_ERR_CODES; i++) {
        if (m->errors[i].code && !strcmp(m->errors[i].code, code)) {
            m->errors[i].n++;
            return;
        }
        if (!m->errors[i].code) {
            m->errors[i].code = code;
            m->errors[i].n = 1;
            return;
        }
    }
}

void srv_metrics_http(srv_metrics *m, int status)
{
    for (int i = 0; i < SRV_HTTP_CODES; i++) {
        if (m->http[i].status == status) {
            m->http[i].n++;
            return;
        }
        if (!m->http[i].status) {
            m->http[i].status = status;
            m->http[i].n = 1;
            return;
        }
    }
}

static void head(fl_buf *b, const char *name, const char *type, const char *help)
{
    fl_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void hist(fl_buf *b, const char *name, const char *help, const double *bounds, int n,
                 const uint64_t *counts, double sum, uint64_t count)
{
    head(b, name, "histogram", help);
    uint64_t acc = 0;
    for (int i = 0; i < n; i++) {
        acc += counts[i];
        fl_buf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i], (unsigned long long)acc);
    }
    acc += counts[n];
    fl_buf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", name,
                  (unsigned long long)acc, name, sum, name, (unsigned long long)count);
}

static void hist_plain(fl_buf *b, const char *name, const char *help, const srv_hist *h)
{
    hist(b, name, help, h->bounds, h->n, h->counts, h->sum, h->count);
}

static void hist_atomic(fl_buf *b, const char *name, const char *help, const srv_ahist *h)
{
    uint64_t counts[SRV_HIST_MAX + 1];
    uint64_t total = 0;
    for (int i = 0; i <= h->n; i++) {
        counts[i] = atomic_load_explicit(&h->counts[i], memory_order_relaxed);
        total += counts[i];
    }
    /* _count is the buckets' total so the family stays self-consistent under concurrent adds */
    double sum = (double)atomic_load_explicit(&h->sum_us, memory_order_relaxed) / 1e6;
    hist(b, name, help, h->bounds, h->n, counts, sum, total);
}

static void gauge(fl_buf *b, const char *name, const char *help, double v)
{
    head(b, name, "gauge", help);
    fl_buf_printf(b, "%s %.9g\n", name, v);
}

static void counter(fl_buf *b, const char *name, const char *help, double v)
{
    head(b, name, "counter", help);
    fl_buf_printf(b, "%s %.9g\n", name, v);
}

int srv_metrics_render(const srv_metrics *m, const srv_gauges *g, fl_buf *b)
{
    gauge(b, "fogline_up", "1 when the model is loaded and the engine runs", g->ready ? 1 : 0);
    gauge(b, "fogline_draining", "1 while shutting down (no new requests)", g->draining ? 1 : 0);
    gauge(b, "fogline_ws_connections", "open WebSocket connections", g->ws_open);
    gauge(b, "fogline_ws_backlog_bytes", "output queued in the server for WebSocket clients",
          (double)g->ws_backlog);
    gauge(b, "fogline_ws_input_paused",
          "WebSocket connections not read while their output backlog drains", g->ws_input_paused);
    gauge(b, "fogline_ws_choked", "WebSocket connections whose socket takes no more output for now",
          g->ws_choked);
    counter(b, "fogline_ws_connections_total", "WebSocket connections accepted",
            (double)m->ws_accepted);
    counter(b, "fogline_ws_refused_total",
            "WebSocket upgrades refused (limit, origin, key, shutting down)", (double)m->ws_refused);
    counter(b, "fogline_ws_slow_closed_total", "WebSocket clients closed for falling too far behind",
            (double)m->slow_closed);
    gauge(b, "fogline_http_open", "HTTP exchanges with a chat request in progress", g->http_open);
    head(b, "fogline_http_responses_total", "counter", "HTTP responses by status");
    for (int i = 0; i < SRV_HTTP_CODES && m->http[i].status; i++)
        fl_buf_printf(b, "fogline_http_responses_total{code=\"%d\"} %llu\n", m->http[i].status,
                      (unsigned long long)m->http[i].n);
    static const char *const outs[] = {"stop", "length", "cancelled", "error", "rejected"};
    head(b, "fogline_requests_total", "counter", "chat requests by outcome");
    for (int i = 0; i < SRV_OUT_COUNT; i++)
        fl_buf_printf(b, "fogline_requests_total{outcome=\"%s\"} %llu\n", outs[i],
                      (unsigned long long)m->requests[i]);
    gauge(b, "fogline_requests_active", "chat requests being tokenized or in the engine",
          g->requests_live);
    gauge(b, "fogline_requests_tokenizing", "chat requests in the tokenizer", g->tokenizing);
    gauge(b, "fogline_queue_depth", "requests waiting in the engine for KV pages or a slot",
          g->es.queued);
    gauge(b, "fogline_sequences_running", "sequences the engine is decoding", g->es.running);
    head(b, "fogline_tokens_total", "counter", "tokens by kind");
    fl_buf_printf(b, "fogline_tokens_total{kind=\"prompt\"} %llu\n",
                  (unsigned long long)m->prompt_tokens);
    fl_buf_printf(b, "fogline_tokens_total{kind=\"reply\"} %llu\n",
                  (unsigned long long)m->reply_tokens);
    counter(b, "fogline_forwards_total", "engine forward passes", (double)g->es.forwards);
    counter(b, "fogline_tokens_forwarded_total", "positions computed by forward passes",
            (double)g->es.tokens_forwarded);
    counter(b, "fogline_drafts_sent_total", "draft frames sent", (double)m->drafts_sent);
    counter(b, "fogline_drafts_coalesced_total",
            "drafts replaced by a newer draft of the same block before a slow client took them",
            (double)m->drafts_coalesced);
    counter(b, "fogline_step_fallbacks_total",
            "requests for every step's draft that fell back to coalescing (a slow client)",
            (double)m->steps_coalesced);
    counter(b, "fogline_commits_sent_total", "commit frames and SSE chunks sent",
            (double)m->commits_sent);
    head(b, "fogline_kv_pages", "gauge", "KV cache pages by state");
    fl_buf_printf(b, "fogline_kv_pages{state=\"used\"} %d\n", g->es.pages_used);
    fl_buf_printf(b, "fogline_kv_pages{state=\"free\"} %d\n", g->es.pages_free);
    fl_buf_printf(b, "fogline_kv_pages{state=\"cached\"} %d\n", g->es.pages_cached);
    counter(b, "fogline_prefix_cache_tokens_total",
            "prompt tokens whose KV pages were shared from the engine's prefix cache, not computed",
            (double)m->shared_tokens);
    counter(b, "fogline_prefix_cache_evictions_total", "cached KV pages reused for other blocks",
            (double)g->es.pages_evicted);
    counter(b, "fogline_persist_pages_total", "KV pages handed to the persistence tier",
            (double)g->es.pages_persisted);
    counter(b, "fogline_persist_wait_seconds_total",
            "time the engine thread spent on or blocked by persistence (the persistence lag "
            "felt by decoding)", g->es.persist_wait_ms / 1e3);
    hist_atomic(b, "fogline_persist_put_seconds", "time to put one page into the tier",
                &m->persist_put);
    hist_plain(b, "fogline_tokens_per_forward", "reply tokens per forward of finished requests",
               &m->tpf);
    hist_atomic(b, "fogline_step_seconds", "engine step latency (one forward pass)", &m->step);
    hist_plain(b, "fogline_first_update_seconds", "time from a chat to its first draft or commit",
               &m->first_update);
    hist_plain(b, "fogline_update_gap_seconds", "time between consecutive updates of a request",
               &m->update_gap);
    /* the cross-session cache (Redis); present only with --redis */
    if (g->redis) {
        const srv_redis_stats *r = g->redis;
        gauge(b, "fogline_redis_connected", "1 when Redis is connected and ready", g->redis_ready);
        counter(b, "fogline_redis_connects_total", "connections that became ready",
                (double)r->connects);
        counter(b, "fogline_redis_disconnects_total", "ready connections lost or dropped",
                (double)r->disconnects);
        counter(b, "fogline_redis_connect_failures_total", "connection attempts that failed",
                (double)r->connect_failures);
        counter(b, "fogline_redis_commands_total", "commands sent", (double)r->commands);
        counter(b, "fogline_redis_errors_total",
                "commands answered with an error or lost with their connection", (double)r->errors);
        counter(b, "fogline_redis_timeouts_total", "commands not answered within the deadline",
                (double)r->timeouts);
        head(b, "fogline_redis_bytes_total", "counter", "bytes to and from Redis");
        fl_buf_printf(b, "fogline_redis_bytes_total{dir=\"read\"} %llu\n",
                      (unsigned long long)r->bytes_read);
        fl_buf_printf(b, "fogline_redis_bytes_total{dir=\"written\"} %llu\n",
                      (unsigned long long)r->bytes_written);
        static const double lb[8] = SRV_REDIS_LAT_BOUNDS;
        head(b, "fogline_redis_latency_seconds", "histogram", "command round trip");
        uint64_t cum = 0;
        for (int i = 0; i < 8; i++) {
            cum += r->latency_le[i];
            fl_buf_printf(b, "fogline_redis_latency_seconds_bucket{le=\"%g\"} %llu\n", lb[i],
                          (unsigned long long)cum);
        }
        fl_buf_printf(b, "fogline_redis_latency_seconds_bucket{le=\"+Inf\"} %llu\n",
                      (unsigned long long)r->latency_count);
        fl_buf_printf(b, "fogline_redis_latency_seconds_sum %.6f\n", r->latency_sum_s);
        fl_buf_printf(b, "fogline_redis_latency_seconds_count %llu\n",
                      (unsigned long long)r->latency_count);
        head(b, "fogline_session_total", "counter", "session reads and writes by outcome");
        const char *so[4] = {"hit", "miss", "error", "written"};
        uint64_t sv[4] = {m->session_hits, m->session_misses, m->session_errors, m->session_writes};
        for (int i = 0; i < 4; i++)
            fl_buf_printf(b, "fogline_session_total{outcome=\"%s\"} %llu\n", so[i],
                          (unsigned long long)sv[i]);
        counter(b, "fogline_kv_cache_lookups_total", "prefix lookups in Redis", (double)m->kv_lookups);
        head(b, "fogline_kv_cache_pages_total", "counter", "KV pages by lookup outcome");
        const char *ko[3] = {"hit", "miss", "rejected"};
        uint64_t kv[3] = {m->kv_pages_hit, m->kv_pages_missed, m->kv_pages_rejected};
        for (int i = 0; i < 3; i++)
            fl_buf_printf(b, "fogline_kv_cache_pages_total{outcome=\"%s\"} %llu\n", ko[i],
                          (unsigned long long)kv[i]);
        counter(b, "fogline_kv_cache_lookup_errors_total",
                "prefix lookups that failed (Redis away, slow or a bad answer): computed instead",
                (double)m->kv_lookup_errors);
        counter(b, "fogline_kv_cache_tokens_total", "prompt tokens loaded from Redis, not computed",
                (double)m->kv_cached_tokens);
        counter(b, "fogline_kv_cache_writes_total", "KV pages written to Redis", (double)r->kv_writes);
        counter(b, "fogline_kv_cache_writes_dropped_total",
                "KV pages not written (Redis away, or the write queue full)",
                (double)r->kv_writes_dropped);
        counter(b, "fogline_kv_cache_evicted_total", "KV pages evicted by the size cap",
                (double)r->kv_evicted);
    }
    head(b, "fogline_errors_total", "counter", "errors sent to clients by code");
    for (int i = 0; i < SRV_ERR_CODES && m->errors[i].code; i++)
        fl_buf_printf(b, "fogline_errors_total{code=\"%s\"} %llu\n", m->errors[i].code,
                      (unsigned long long)m->errors[i].n);
    return b->err ? b->err : b->data ? 0 : FL_ENOMEM; /* the buffer's error is sticky */
}
