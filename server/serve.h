/* serve.h: the parts of `fogline serve` and what they share. Internal to server/.
 *
 * Threads: the loop thread (libuv + libwebsockets) owns every socket, connection, request
 * and metric below; the engine thread only calls the sink (serve_sink.c), which copies the
 * event into a locked queue and wakes the loop with uv_async; the uv work pool renders the
 * chat template and tokenizes (the tokenizer is read-only and safe from several threads).
 *
 * Ownership: a request (srv_req) lives from the client's `chat` until its engine `done` event
 * has been handled on the loop, whatever happens to its client meanwhile. A connection
 * (srv_conn) or HTTP exchange (srv_http) that goes away leaves its requests orphaned
 * (owner NULL) and cancelled; they free themselves when their `done` arrives. */
#ifndef FL_SERVE_H
#define FL_SERVE_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <uv.h>

#include "engine.h"
#include "gen_opts.h"
#include "reasoning.h"
#include "toolcalls.h"
#include "serve_log.h"
#include "serve_metrics.h"
#include "serve_proto.h"
#include "tokenizer/tokenizer.h"

struct lws;
struct lws_context;
struct lws_vhost;

/* ---- configuration (serve_config.c) ---- */
typedef struct srv_config {
    char *host;
    int port;
    char *model_dir;
    char *chat_template;
    bool enable_thinking;   /* --chat-template-kwargs: the default of requests' */
    char *web_root;
    char *api_key;          /* NULL: no key needed */
    char **origins;         /* allowed Origin values; NULL or "*": any */
    int n_origins;
    int threads;
    char device[8];         /* --device: auto | cpu | cuda (engine/backend_select.h) */
    fl_wformat weights;     /* --weights (backend.h); AUTO by default */
    fl_kvformat kv;         /* --kv-format (backend.h); AUTO by default */
    int max_connections;    /* WebSocket connections at once */
    int max_conn_requests;  /* running requests per WebSocket connection */
    int max_queued;         /* requests waiting for the engine, server-wide */
    int max_seqs;           /* sequences the engine runs at once */
    int max_batch_tokens;
    size_t max_message;     /* WebSocket message / HTTP body bytes */
    int max_prompt_tokens;
    int max_tokens_limit;   /* the largest max_tokens a request may ask for */
    int kv_pages;           /* 0: derived from the limits */
    int kv_host_mb;         /* host-memory persistence tier; 0: none */
    double drain_s;         /* grace period on SIGTERM/SIGINT */
    size_t ws_max_backlog;  /* bytes queued for one client before it is closed */
    double ws_stall_s;      /* seconds a frame may wait for a client before it is closed */
    int ws_sndbuf;          /* SO_SNDBUF of WebSocket sockets; 0: the kernel's autotuning */
    srv_log_level log_level;
    fl_gen_opts gen;        /* default decoding options and max_tokens (--policy ... flags) */
    /* Redis (redis.h): off when redis_url is NULL */
    char *redis_url;
    int redis_session_ttl;  /* seconds a session lives after its last turn */
    int redis_kv_ttl;       /* seconds a KV page lives after its last write */
    int redis_kv_cap_mb;    /* KV pages kept in Redis at most */
    int redis_timeout_ms;   /* per command */
    int redis_connect_timeout_ms;
} srv_config;

/* Parses FOGLINE_* variables, then argv (flags win). Returns 0 to run, 1 when --help was
 * printed, or -2 with one line in err (a usage error). */
int srv_config_parse(srv_config *c, int argc, char **argv, char *err, size_t errlen);
void srv_config_free(srv_config *c);
void srv_config_usage(FILE *f);
bool srv_origin_allowed(const srv_config *c, const char *origin);

/* ---- output queue of one client: drafts coalesce, nothing else is dropped ---- */
typedef struct srv_out {
    struct srv_out *next;
    unsigned char *buf; /* LWS_PRE bytes of headroom, then len bytes */
    size_t len;
    struct srv_req *req; /* drafts only: the request whose draft_slot points here */
    int32_t block;       /* drafts only; -1 otherwise */
    double t_queued;     /* loop ms when it joined the queue (a replacing draft keeps it) */
} srv_out;

typedef struct srv_outq {
    srv_out *head, *tail;
    size_t bytes;
    int n;
} srv_outq;

/* Allocates an item holding a copy of data (with LWS_PRE headroom). */
srv_out *srv_out_new(const char *data, size_t len);
void srv_out_free(srv_out *o);
void srv_outq_push(srv_outq *q, srv_out *o);
srv_out *srv_outq_pop(srv_outq *q);
void srv_outq_clear(srv_outq *q);

/* ---- requests (serve_request.h) ---- */
typedef struct srv srv;
typedef struct srv_req srv_req;
typedef struct srv_ev srv_ev;

/* ---- allocation failures on demand, for tests (serve_faults.c) ---- */
typedef enum srv_fault_site {
    SRV_FAULT_DRAFT_EVENT,  /* "draft_event": the copy of a draft event (sink) */
    SRV_FAULT_COMMIT_EVENT, /* "commit_event": the copy of a commit event (sink) */
    SRV_FAULT_DONE_EVENT,   /* "done_event": the copy of a done event (sink) */
    SRV_FAULT_BRANCHES,     /* "branches": a fan-out group's branch requests */
    SRV_FAULT_SSE,          /* "sse": an SSE event in an HTTP response */
    SRV_FAULT_WS_FRAME,     /* "ws_frame": a WebSocket frame queued for a client */
    SRV_FAULT_TOKENIZE,     /* "tokenize": a /tokenize job, then its answer (each one call) */
    SRV_FAULT_SITES
} srv_fault_site;

#define SRV_FAULTS_MAX 8

typedef struct srv_faults {
    int n; /* entries; 0: inert */
    srv_fault_site site[SRV_FAULTS_MAX];
    long nth[SRV_FAULTS_MAX];
    atomic_long calls[SRV_FAULT_SITES];
} srv_faults;

/* Parses FOGLINE_TEST_FAIL_ALLOC ("<site>:<nth>[,...]"; NULL or empty: none). Returns 0, or
 * -1 with one line in err. */
int srv_faults_parse(srv_faults *f, const char *spec, char *err, size_t errlen);
/* Counts an allocation at site; true when this one is to fail. */
bool srv_fault(srv_faults *f, srv_fault_site site);

/* ---- the server ---- */
struct srv {
    srv_config *cfg;
    srv_faults faults;       /* FOGLINE_TEST_FAIL_ALLOC */
    srv_log log;
    srv_metrics m;
    fl_model *model;
    struct fl_cons_cache *cons; /* compiled response_format constraints (constraint.h) */
    fl_backend *backend;     /* the timing wrapper around the CPU backend */
    fl_kv_tier *tier;
    struct srv_redis *redis; /* NULL without --redis */
    uint64_t model_fp;       /* fingerprint of the weights: chains KV page keys */
    fl_engine *engine;       /* NULL once stopped */
    char model_id[128];      /* the name /v1/models shows */
    uint8_t dec_src[FL_DF_COUNT]; /* where each default in cfg->gen.dec came from */
    int32_t n_pages;
    uv_loop_t loop;
    uv_async_t wake;         /* the engine has events */
    uv_timer_t tick;         /* housekeeping: slow clients, drain, gauges */
    uv_signal_t sigint, sigterm;
    uv_signal_t sighold, sigstep; /* FOGLINE_TEST_HOLD: SIGUSR2, SIGUSR1 (docs/robustness.md) */
    bool test_held;
    int test_acks;
    struct lws_context *ctx;
    struct lws_vhost *vh;
    uv_mutex_t ev_mu;
    srv_ev *ev_head, *ev_tail;
    srv_req *reqs;           /* live requests */
    int n_reqs;              /* live (tokenizing or in the engine) */
    srv_req *groups;         /* live fan-out groups (their branches are in reqs) */
    int n_groups;
    bool rebalance;          /* a request ended: groups may start more branches */
    uint64_t next_serial;
    uint64_t seed_state;     /* the seeds of requests without one (srv_draw_seed) */
    uint32_t id_nonce;       /* random per process: in HTTP answers' ids, so that two servers
                                (replicas on one Redis) never give the same id */
    struct srv_conn *conns;  /* open WebSocket connections */
    int n_conns;
    uint64_t next_conn;
    struct srv_http *https;  /* open HTTP exchanges with a request */
    int n_https;
    bool draining;
    double drain_deadline;   /* loop ms */
    bool cancel_sent;        /* the grace period is over: what still runs was cancelled */
    bool closing_clients;
    double close_deadline;
    int exit_code;
};

double srv_now_ms(srv *s);

/* serve_engine.c (loop thread). Loads the model, sizes the KV pool, opens the backend (and the
 * persistence tier: Redis or host memory) and starts the engine thread; 0, or an FL_E* code
 * with the message in e (what is already open is freed by the server's teardown). */
int srv_engine_start(srv *s, fl_err *e);
/* Stops the engine thread (cancelling what runs), then handles its final events; idempotent. */
void srv_engine_stop(srv *s);

/* serve_ws.c: WebSocket connections (each the owner of its requests, through its own ops) */
typedef struct srv_conn srv_conn;
void srv_ws_tick(srv *s);              /* slow-client checks */
/* Output bytes queued for all WebSocket clients, how many connections have their input paused
 * (flow control), and how many have a full socket (the kernel takes no more), for /metrics. */
void srv_ws_backlog(srv *s, size_t *bytes, int *paused, int *choked);
void srv_ws_close_all(srv *s, int code, const char *reason);
/* LWS_CALLBACK_HTTP_CONFIRM_UPGRADE: path, origin, key and limits checked before the upgrade
   so a refused client reads an HTTP status. 0 allows, 1 a response was written, -1 hangs up. */
int srv_ws_confirm_upgrade(srv *s, struct lws *wsi, const char *proto);
int srv_ws_callback(struct lws *wsi, int reason, void *user, void *in, size_t len);

/* serve_http.c: HTTP exchanges (a chat completion's or /generate's owns its request) */
typedef struct srv_http srv_http;
int srv_http_callback(struct lws *wsi, int reason, void *user, void *in, size_t len);

/* Per-wsi data: what the wsi is now (lws reuses one protocol for HTTP and WebSocket). */
typedef enum srv_pss_kind { SRV_PSS_NONE = 0, SRV_PSS_HTTP, SRV_PSS_WS } srv_pss_kind;
typedef struct srv_pss {
    srv_pss_kind kind;
    void *obj;    /* SRV_PSS_HTTP: srv_http*; SRV_PSS_WS: srv_conn* */
} srv_pss;

/* The one protocol's callback (serve.c) dispatches to the two above. */
int srv_lws_callback(struct lws *wsi, int reason, void *user, void *in, size_t len);

#endif
