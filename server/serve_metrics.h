/* serve_metrics.h: counters and histograms for /metrics (Prometheus text format 0.0.4).
 * Everything is written on the loop thread except the atomic histograms (srv_ahist), which
 * the engine and persistence threads observe into (forward latency, tier put latency). */
#ifndef FL_SERVE_METRICS_H
#define FL_SERVE_METRICS_H

#include <stdatomic.h>

#include "engine.h"

#define SRV_HIST_MAX 16
#define SRV_ERR_CODES 24
#define SRV_HTTP_CODES 16

typedef struct srv_hist {
    const double *bounds; /* (n) upper bounds; +Inf is implied */
    int n;
    uint64_t counts[SRV_HIST_MAX + 1];
    double sum;
    uint64_t count;
} srv_hist;

typedef struct srv_ahist {
    const double *bounds;
    int n;
    _Atomic uint64_t counts[SRV_HIST_MAX + 1];
    _Atomic uint64_t sum_us; /* microseconds: integer atomics, no CAS loop on doubles */
    _Atomic uint64_t count;
} srv_ahist;

enum { SRV_OUT_STOP = 0, SRV_OUT_LENGTH, SRV_OUT_CANCELLED, SRV_OUT_ERROR, SRV_OUT_REJECTED,
       SRV_OUT_COUNT };

typedef struct srv_metrics {
    uint64_t ws_accepted, ws_refused;
    uint64_t requests[SRV_OUT_COUNT];
    uint64_t prompt_tokens, reply_tokens;
    uint64_t drafts_sent, drafts_coalesced, commits_sent;
    uint64_t steps_coalesced; /* every-step requests that fell back to coalescing */
    uint64_t slow_closed;
    struct { const char *code; uint64_t n; } errors[SRV_ERR_CODES];
    struct { int status; uint64_t n; } http[SRV_HTTP_CODES];
    srv_hist tpf;          /* reply tokens per forward, per finished request */
    srv_hist first_update; /* seconds from chat to its first draft or commit */
    srv_hist update_gap;   /* seconds between consecutive updates of one request */
    srv_ahist step;        /* seconds per engine forward (the step latency) */
    srv_ahist persist_put; /* seconds per page put into the persistence tier */
    /* Redis: sessions and the KV prefix cache (loop thread) */
    uint64_t session_hits, session_misses, session_errors, session_writes;
    uint64_t kv_lookups, kv_pages_hit, kv_pages_missed, kv_pages_rejected, kv_lookup_errors;
    uint64_t kv_cached_tokens; /* prompt tokens loaded from Redis */
    uint64_t shared_tokens;    /* prompt tokens taken from the engine's prefix cache */
} srv_metrics;

/* Live values read when /metrics is asked for. */
typedef struct srv_gauges {
    int ws_open;
    size_t ws_backlog;     /* output bytes queued for WebSocket clients, all connections */
    int ws_input_paused;   /* connections whose input waits while their output is backed up */
    int ws_choked;         /* connections whose socket takes no more for now */
    int http_open;
    int requests_live;     /* tokenizing or inside the engine */
    int tokenizing;
    fl_sched_stats es;     /* engine snapshot */
    bool ready, draining;
    const struct srv_redis_stats *redis; /* NULL without --redis */
    bool redis_ready;
} srv_gauges;

void srv_metrics_init(srv_metrics *m);
void srv_hist_observe(srv_hist *h, double v);
void srv_ahist_observe(srv_ahist *h, double seconds);
void srv_metrics_error(srv_metrics *m, const char *code); /* code: a static SRV_E_* string */
void srv_metrics_http(srv_metrics *m, int status);
int srv_metrics_render(const srv_metrics *m, const srv_gauges *g, fl_buf *out);

#endif
