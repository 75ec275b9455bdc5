/* serve_request.h: a request (srv_req) and its owner. Internal to server/.
 *
 * Threads: everything here runs on the loop thread, except tokenizing (the uv work pool, on
 * the request's own fields) and the sink (serve_sink.h, engine thread).
 *
 * Ownership: the server owns every live request (its list, s->reqs) from srv_req_start until
 * the request ends: after its done, a refusal, or a cancellation before the engine took it.
 * Then its owner's `ended` runs and it is freed, so the owner forgets it in `event` (done) or
 * `refused`. A group (s->groups, serve_group.h) ends after its last branch, with its owner's
 * `group_done` (or `refused`). An owner that goes away first calls srv_req_orphan and never
 * hears of the request again. */
#ifndef FL_SERVE_REQUEST_H
#define FL_SERVE_REQUEST_H

#include "serve.h"

typedef enum srv_req_state {
    SRV_REQ_SESSION = 0, /* reading the session's earlier turns from Redis */
    SRV_REQ_TOKENIZING,  /* rendering + tokenizing on the work pool */
    SRV_REQ_LOOKUP,      /* reading cached prefix pages from Redis */
    SRV_REQ_RUNNING,     /* inside the engine */
} srv_req_state;

#define SRV_DRAFT_SLOTS FL_MAX_RUN_BLOCKS /* running blocks per sequence at most */

/* An event copied off the engine thread. */
struct srv_ev {
    struct srv_ev *next;
    struct srv_req *req;
    fl_event_type type;
    int32_t block, step, n; /* draft/commit */
    double t_ms;            /* srv_now_ms when the engine gave it (engine thread) */
    int32_t *tokens;        /* (n) -1 where masked (what changed is the owner's to work out:
                               it knows what its client was sent) */
    char *text;             /* commit: the block's text; done: the whole reply */
    size_t text_len;
    fl_finish finish;
    int32_t stop_string, stop_token; /* done: fl_event's (srv_stop_reason) */
    char *error;
    const char *code;       /* FL_FINISH_ERROR: the SRV_E_* for the client; NULL: engine_error */
    bool spare;             /* the request's own ev_spare (freed with it, not on its own) */
    fl_seq_stats stats;
    int32_t n_ids;
    int32_t *ids;           /* done: (n_ids) the reply's ids; commit: the block's, with
                               log probabilities only */
    /* with log probabilities (chat.logprobs): of the ids, the first n_lps are the reply's
       (fl_event.n_lps), each with its log probability and n_top alternatives */
    int32_t n_lps, n_top;
    float *lps;             /* (n_lps) */
    int32_t *top_ids;       /* (n_lps, n_top) */
    float *top_lps;         /* (n_lps, n_top) */
};

/* The code a failed done (FL_FINISH_ERROR) reports to the client. */
static inline const char *srv_ev_code(const srv_ev *ev)
{
    return ev->code ? ev->code : SRV_E_ENGINE;
}

/* How a request ended, for its owner's `ended` (after the request left the server's list). */
typedef struct srv_req_end {
    const char *finish;        /* "stop", "length", "cancelled" or "error" */
    const fl_seq_stats *stats; /* NULL: refused before the engine */
    int32_t n_ids;             /* reply tokens */
    const char *code;          /* "error": the SRV_E_* it failed with; NULL otherwise */
    const char *text;          /* stop/length: the whole reply (len bytes); NULL otherwise */
    size_t len;
    int32_t stop_string, stop_token; /* stop: what ended it (srv_stop_reason); -1 otherwise */
} srv_req_end;

/* A request's owner: who hears its events. A WebSocket connection (serve_ws.c), an HTTP
 * exchange (serve_http.c: chat completions, /generate), or, for a fan-out branch or outline
 * stage, its group (serve_group.c), which passes on what its own owner should hear. Every
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
    size_t n_history;     /* messages of chat.msgs that came from the session store ... */
    size_t hist_at;       /* ... from this one on (1 after /v1/responses' instructions, else 0) */
    size_t n_dropped;     /* oldest history messages dropped to fit the prompt limit */
    int work_rc;
    fl_err work_err;
    const char *work_param; /* the request field a work_rc is about (OpenAI's param), or NULL */
    struct fl_cons *cons;   /* response_format's compiled constraint, or NULL */
    uint64_t eid;         /* engine id once submitted */
    double t_start;       /* loop ms when the chat arrived */
    double t_first;       /* loop ms of the first draft or commit, 0 before */
    double t_last;        /* loop ms of the last update */
    srv_out *draft_slot[SRV_DRAFT_SLOTS]; /* queued, unsent drafts by block % SLOTS */
    /* by the same slots, what the client saw of a running block, for the drafts' "new" and
       "edited" lists (docs/protocol.md): view[i] is NULL until the slot's first draft, then
       (2, FL_MAX_BLOCK) tokens, -1 masked: [0] the block as the client was last sent it (all
       masked before its first draft), [1] the newest draft of it, sent or still queued */
    int32_t *view[SRV_DRAFT_SLOTS];
    int32_t view_block[SRV_DRAFT_SLOTS]; /* the block view[i] holds (with view[i] only) */
    bool steps_coalesced; /* "drafts": "every_step" gave way to coalescing (a slow client) */
    srv_reason reason;    /* the reply's reasoning/answer split (set up with the prompt) */
    srv_reason reason0;   /* ... as it was set up (a session's save splits the whole reply) */
    int32_t reasoning_tokens; /* done: reply tokens that begin in its think block (usage's
                                 reasoning_tokens); -1 when the template has no think blocks */
    srv_tools tools;      /* the reply's tool calls (toolcalls.h), when tools were offered */
    json_t *tool_calls;   /* WebSocket: the calls found so far, for done */
    json_t *response;     /* /v1/responses with store: the finished response, kept with the
                             turn (srv_session_save) for GET /v1/responses/ID */
    json_t *input_items;  /* ... its input as items (srv_resp_input_items) */
    json_t *prev_items;   /* ... and previous_response_id's input items and output, read with
                             its turns: input_items lists all of them */
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
    char *group_text;       /* a branch with an HTTP owner: its whole text (with a model that
                               thinks, the answer part), kept for the answer */
    char *group_reasoning;  /* ... and its reasoning part, or NULL */
    json_t *group_logprobs; /* ... and its log probabilities (chat.logprobs), or NULL */
    json_t *group_calls;    /* ... and its tool calls (tools offered, some called), or NULL */
    /* /v1/completions' logprobs: the reply decoded so far as the engine decodes it (its
       held-back bytes) and its characters, for text_offset across a stream's chunks */
    fl_detok lp_dt;
    bool lp_dt_on;
    size_t lp_chars;
    bool group_lp_lost;     /* they could not be made (out of memory) */
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

/* ---- for the owners (serve_ws.c, serve_http.c) ---- */

/* Takes *chat (zeroed) for a request owned by owner through ops (both outlive the request,
 * or call srv_req_orphan): reads the session, tokenizes on the work pool, then submits; a
 * chat with "parallel" becomes a group (serve_group.h). Returns the request, or NULL with an
 * SRV_E_* in *code and a message (busy, shutting_down, out of memory) to send back; the
 * refusal is counted, and *chat may be left for the caller (srv_chat_free it either way). */
srv_req *srv_req_start(srv *s, const srv_owner_ops *ops, void *owner, srv_chat *chat,
                       const char **code, char *msg, size_t msglen);
/* The seeds of requests that send none: a sequence that starts from --seed when it was given
 * (a restarted server with the same flags gives the same requests the same seeds, as vLLM's
 * --seed does), else from the kernel's random bytes. Each is below 2^52, so that a choice's
 * seed + i is still a seed a request may send (0..2^53-1). */
void srv_seed_init(srv *s, bool given, uint64_t seed);
/* 64 random bits from the kernel (the clock and the process id when it has none yet). */
uint64_t srv_entropy(void);
uint64_t srv_draw_seed(srv *s);
/* vLLM's stop_reason for a reply that ended with these (fl_event.stop_string, stop_token):
 * the stop string that cut it (the request's, else the server's --stop), the stop token id
 * that ended it, or null (the model's end token, max_tokens). A new reference; NULL only when
 * out of memory. */
json_t *srv_stop_reason(const srv_req *r, int32_t stop_string, int32_t stop_token);
/* Whether the request is sampled (temperature above 0), so that its seed shapes the reply and
 * is reported with it (the WebSocket's done, HTTP's fogline-seed header). */
bool srv_req_sampled(const srv_req *r);
void srv_req_cancel(srv_req *r);   /* idempotent; the owner still hears done(cancelled) */
void srv_req_orphan(srv_req *r);   /* the owner is gone: cancel, and never call it again */

/* ---- the lifecycle's stages, for serve_group.c, serve_session.c and serve_sink.c ---- */

/* The fields every request starts with; takes *chat (zeroed). Not yet in the server's list. */
void srv_req_init(srv_req *r, srv *s, const srv_owner_ops *ops, void *owner, srv_chat *chat);
void srv_req_link(srv_req *r);     /* into the server's list of live requests */
void srv_req_unlink(srv_req *r);   /* out of it (a plain request: groups may grow) */
/* Queues rendering and tokenizing on the work pool; 0, or a uv error (nothing queued). */
int srv_req_tokenize(srv_req *r);
/* The request ended before the engine took it: its owner hears `refused`, then it ends. */
void srv_req_reject(srv_req *r, const char *code, const char *msg);
/* Cancelled before the engine saw it: its owner hears done(cancelled), then it ends. */
void srv_req_end_cancelled(srv_req *r);
/* Hands the tokenized request to the engine with prefix (n_prefix cached pages, owned, or
 * NULL); refused (busy, shutting down, ...) or ended when cancelled meanwhile. */
void srv_req_submit(srv_req *r, void *prefix, int32_t n_prefix);
/* One engine event for its request: metrics, its owner's `event`, and after done, its end.
 * Does not free ev. */
void srv_req_deliver(srv *s, srv_ev *ev);

/* The history messages that may be dropped (all but a leading system message of the history
 * at the prompt's start), from chat.msgs[*first] on; whether message i is dropped now. */
size_t srv_req_droppable(const srv_req *r, size_t *first);
bool srv_req_dropped(const srv_req *r, size_t i);

/* Renders the chat template over view (n messages: the request's, or a session's view of them)
 * with c's tools, view_calls (view's tool calls, aligned with it: NULL or the template's text
 * each; NULL for none) and enable_thinking, into text. On failure: an error, and *param
 * set to the field it names ("tools", "messages") where that is one. Thread-safe (the work
 * pool's tokenizing and /tokenize use it). */
int srv_chat_render_prompt(const fl_tokenizer *tok, const srv_chat *c, const fl_chat_msg *view,
                           const char *const *view_calls, size_t n, bool add_generation_prompt,
                           fl_buf *text, fl_err *e, const char **param);

#endif
