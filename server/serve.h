/* serve.h: the parts of `fogline serve` and what they share. Internal to server/.
 *
 * Threads: the loop thread (libuv + libwebsockets) owns every socket, connection, request
 * and metric below; the engine thread only calls the sink (serve_engine.c), which copies the
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

/* ---- requests (serve_engine.c) ---- */
typedef enum srv_req_state {
    SRV_REQ_SESSION = 0, /* reading the session's earlier turns from Redis */
    SRV_REQ_TOKENIZING,  /* rendering + tokenizing on the work pool */
    SRV_REQ_LOOKUP,      /* reading cached prefix pages from Redis */
    SRV_REQ_RUNNING,     /* inside the engine */
} srv_req_state;

#define SRV_DRAFT_SLOTS FL_MAX_RUN_BLOCKS /* running blocks per sequence at most */

/* An event copied off the engine thread. */
typedef struct srv_ev {
    struct srv_ev *next;
    struct srv_req *req;
    fl_event_type type;
    int32_t block, step, n; /* draft/commit */
    int32_t *tokens;        /* (n) -1 where masked */
    uint8_t *fresh;         /* (n) */
    char *text;             /* commit: the block's text; done: the whole reply */
    size_t text_len;
    fl_finish finish;
    char *error;
    const char *code;       /* FL_FINISH_ERROR: the SRV_E_* for the client; NULL: engine_error */
    bool spare;             /* the request's own ev_spare (freed with it, not on its own) */
    fl_seq_stats stats;
    int32_t n_ids;
    int32_t *ids;           /* done: (n_ids) the reply's ids */
} srv_ev;

/* The code a failed done (FL_FINISH_ERROR) reports to the client. */
static inline const char *srv_ev_code(const srv_ev *ev)
{
    return ev->code ? ev->code : SRV_E_ENGINE;
}

typedef struct srv srv;
typedef struct srv_req srv_req;

/* How a request ended, for its owner's `ended` (after the request left the server's list). */
typedef struct srv_req_end {
    const char *finish;        /* "stop", "length", "cancelled" or "error" */
    const fl_seq_stats *stats; /* NULL: refused before the engine */
    int32_t n_ids;             /* reply tokens */
    const char *code;          /* "error": the SRV_E_* it failed with; NULL otherwise */
    const char *text;          /* stop/length: the whole reply (len bytes); NULL otherwise */
    size_t len;
} srv_req_end;

/* A request's owner: who hears its events. A WebSocket connection (serve_ws.c), an HTTP
 * exchange (serve_http.c: chat completions, /generate), or, for a fan-out branch or outline
 * stage, its group (serve_engine.c), which passes on what its own owner should hear. Every
 * callback runs on the loop thread, with the owner still alive (a gone owner is NULL and is not
 * called); none may free r (the lifecycle does, after `ended`). */
typedef struct srv_owner_ops {
    /* A draft, commit or done of r; done is r's last event. */
    void (*event)(void *owner, srv_req *r, const srv_ev *ev);
    /* r ended before the engine took it (code: an SRV_E_*), or a group could not go on. */
    void (*refused)(void *owner, srv_req *r, const char *code, const char *msg);
    /* r has ended and left the server's list; it is freed when this returns. NULL: nothing. */
    void (*ended)(void *owner, srv_req *r, const srv_req_end *end);
    /* Every branch of group g ended (g is freed when this returns). NULL: starts no groups. */
    void (*group_done)(void *owner, srv_req *g);
    /* A skeleton/auto group's outline: its points, or none and why. NULL: not told. */
    void (*outline)(void *owner, srv_req *g, char **points, int n, const char *fallback);
    /* True when no client reads r's events any more (the done log says orphaned=1). NULL:
       an owner that is here is the client. */
    bool (*orphaned)(void *owner, const srv_req *r);
} srv_owner_ops;

struct srv_req {
    srv *s;
    const srv_owner_ops *ops;
    void *owner;          /* ops' object (srv_conn*, srv_http*, the group); NULL once gone */
    uint64_t serial;      /* server-unique, for logs */
    srv_chat chat;        /* the parsed request (owns its strings) */
    srv_req_state state;
    bool cancelled;       /* the client asked, or went away */
    uv_work_t work;       /* tokenization on the uv work pool */
    int32_t *ids;         /* (n_ids) the templated prompt (kept until done for the session) */
    size_t n_ids;
    size_t n_history;     /* leading messages of chat.msgs that came from the session store */
    size_t n_dropped;     /* oldest history messages dropped to fit the prompt limit */
    int work_rc;
    fl_err work_err;
    uint64_t eid;         /* engine id once submitted */
    double t_start;       /* loop ms when the chat arrived */
    double t_first;       /* loop ms of the first draft or commit, 0 before */
    double t_last;        /* loop ms of the last update */
    srv_out *draft_slot[SRV_DRAFT_SLOTS]; /* queued, unsent drafts by block % SLOTS */
    srv_reason reason;    /* the reply's reasoning/answer split (set up with the prompt) */
    /* fan-out ("parallel"): a group owns branch requests and has no engine work of its own;
       the group is in its owner's list, the branches in the server's */
    struct srv_req *parent; /* a branch: its group */
    int segment;            /* a branch: its index; -1 otherwise */
    struct srv_req **kids;  /* a group: (n_kids) branches, NULL once freed */
    int n_kids, n_started, n_ended;
    struct srv_req *g_prev, *g_next; /* a group: in the server's list of groups */
    bool topping;           /* a group: starting branches (a branch that ends at once waits) */
    struct srv_req *outline; /* a skeleton/auto group: its outline stage while it runs */
    int n_outline;          /* points the outline gave (0: decoded plainly) */
    json_t *seg_results;    /* a group: one object per segment, filled as branches end */
    char *group_text;       /* a branch with an HTTP owner: its whole text, kept for the answer */
    bool any_error;
    /* the sink's (engine thread, from submit until done): a done that cannot be copied, or
       that follows a commit that could not be, goes out as this error instead, so that no
       allocation failure leaves a request without its end */
    fl_engine *en;          /* the engine it was submitted to */
    bool ev_lost;           /* a commit was lost: the reply cannot be whole */
    srv_ev ev_spare;
    struct srv_req *o_prev, *o_next;      /* the owner's list */
    struct srv_req *s_prev, *s_next;      /* the server's list of live requests */
};

/* ---- allocation failures on demand, for tests (serve_faults.c) ---- */
typedef enum srv_fault_site {
    SRV_FAULT_DRAFT_EVENT,  /* "draft_event": the copy of a draft event (sink) */
    SRV_FAULT_COMMIT_EVENT, /* "commit_event": the copy of a commit event (sink) */
    SRV_FAULT_DONE_EVENT,   /* "done_event": the copy of a done event (sink) */
    SRV_FAULT_BRANCHES,     /* "branches": a fan-out group's branch requests */
    SRV_FAULT_SSE,          /* "sse": an SSE event in an HTTP response */
    SRV_FAULT_WS_FRAME,     /* "ws_frame": a WebSocket frame queued for a client */
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

/* serve_engine.c */
int srv_engine_start(srv *s, fl_err *e);
void srv_engine_stop(srv *s);          /* stops the thread, handles the final events */
/* Takes ownership of *chat (zeroed): tokenizes on the work pool, then submits. Returns the
 * request, or NULL with an error code/message (busy, shutting_down) to send back. */
srv_req *srv_req_start(srv *s, const srv_owner_ops *ops, void *owner, srv_chat *chat,
                       const char **code, char *msg, size_t msglen);
void srv_req_cancel(srv_req *r);        /* idempotent; done(cancelled) follows */
void srv_req_orphan(srv_req *r);        /* the owner is gone: cancel, forget the owner */
void srv_drain_events(srv *s);          /* loop thread: handle queued engine events */
/* A fan-out group's summed usage over its segments' results. */
void srv_group_totals(const srv_req *g, long long *prompt, long long *completion, long long *cached);

/* Renders a draft's tokens into {"t": text} / {"mask": true} items (loop thread). */
json_t *srv_draft_tokens(const fl_tokenizer *t, const int32_t *tokens, int32_t n);

/* serve_ws.c: WebSocket connections (each the owner of its requests, through its own ops) */
typedef struct srv_conn srv_conn;
void srv_ws_tick(srv *s);              /* slow-client checks */
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
