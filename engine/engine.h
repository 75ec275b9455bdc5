/* engine.h: block-diffusion generation for many sequences at once.
 *
 * The scheduler (fl_sched) owns the KV page pool, the persister and every sequence; it uses
 * a backend and a model that the caller owns and keeps alive until the scheduler is
 * destroyed (as it does the tier in fl_sched_opts). Each call to fl_sched_step() runs one
 * forward over a packed batch of all sequences' work (prefill chunks, blocks to store,
 * running blocks) and applies the unmasking policies. A scheduler is used by one thread at a
 * time. fl_engine wraps a scheduler in one engine thread with bounded request and cancel
 * queues; events are delivered by calling the sink on the engine thread (copy what you keep,
 * do not block).
 *
 * Errors: 0 or a negative FL_E* code with a message in the fl_err; where a function returns
 * a count or a flag instead, its comment says so. */
#ifndef FL_ENGINE_H
#define FL_ENGINE_H

#include "decode.h"
#include "kvpool.h"
#include "persist.h"

typedef struct fl_request {
    const int32_t *prompt; /* (n_prompt) token ids, already templated; copied at submit */
    int32_t n_prompt;
    int32_t max_tokens;    /* reply tokens at most */
    const char *const *stop; /* (n_stop) stop strings, copied at submit */
    int32_t n_stop;
    fl_decode_opts dec;
    /* A cached prefix (optional), e.g. read from Redis: n_prefix pages, fl_blob_size() bytes
     * each, back to back, for the prompt's first n_prefix blocks. A successful submit/add takes
     * ownership (the engine frees it with free()); on an error the caller still owns it. At
     * admission each blob is checked against the chained key of the prompt's own tokens and
     * its checksum, then written into a page instead of being prefilled; the first bad blob
     * ends the prefix there (the rest is computed). The block holding the prompt's last token
     * is always computed. */
    void *prefix;
    int32_t n_prefix;
    /* A draft event for every denoising step of a block, also for one that decided nothing (a
     * semi-active block below tau_conf), so that the steps of a block are numbered without
     * gaps. Off: a draft only when the block changed. Outputs are the same either way. */
    bool every_step;
    /* An output constraint (cdecode.h), or NULL: the reply is a whole text the automaton
     * accepts, ended by an end token or by max_tokens. The engine takes its own reference.
     * Token editing is refused with it. */
    struct fl_cons *constraint;
    /* Log probabilities: each reply token's, and its top_logprobs (0..FL_MAX_TOP_LOGPROBS)
     * most likely alternatives', under the model's distribution (temperature 1, the whole
     * vocabulary: before sampling filters and the output constraint) in the forward whose
     * prediction decided it: the step that unmasked it, or with token editing the step that
     * last rewrote it. Commit and done events carry them. Needs the forward's full logits. */
    bool logprobs;
    int32_t top_logprobs;
    /* Logit bias (OpenAI's logit_bias): bias[i] (finite, |bias| <= FL_LOGIT_BIAS_MAX) is added
     * to the logit of token bias_ids[i] (in the vocabulary; a repeated id adds up) in every row
     * that decides a reply position, before anything reads the row: the unmasking policies'
     * argmax and confidence, sampling, token edits, the output constraint and the log
     * probabilities, which then describe the biased distribution. At most FL_MAX_LOGIT_BIAS
     * entries, copied at submit. Needs the forward's full logits. */
    const int32_t *bias_ids;
    const float *bias;
    int32_t n_bias;
    /* The model's end tokens (and stop_ids) are kept out of the reply's first min_tokens
     * positions (vLLM's min_tokens): their logits are -inf in the rows
     * that decide those positions, as a logit bias is applied. Stop strings still end the reply.
     * 0..max_tokens; refused with an output constraint, whose end needs an end token. */
    int32_t min_tokens;
    /* OpenAI's presence and frequency penalties, in [-2, 2] (0: off). No published diffusion
     * decoder defines them; here each forward's deciding rows get, for every token t among the
     * reply positions decided before that forward (committed or in a running block),
     * -(presence_penalty + frequency_penalty * count(t)) added to t's logit, as a logit bias
     * (and after it). Needs the forward's full logits. */
    float presence_penalty;
    float frequency_penalty;
    /* The end tokens are kept out of the whole reply (vLLM's ignore_eos), as min_tokens keeps
     * them out of its first positions: it runs to max_tokens unless a stop string or a stop
     * token id ends it. Refused with an output constraint. */
    bool ignore_eos;
    /* vLLM's and Hugging Face's repetition_penalty: 0 or 1 is off, else in
     * (0, FL_REP_PENALTY_MAX]. In each row that decides a reply position, the logit of every
     * token among the prompt and the reply positions decided before that forward is divided
     * by it when positive, else multiplied by it: after the logit bias and before the presence
     * and frequency penalties (vLLM's order). Needs the forward's full logits. */
    float repetition_penalty;
    /* vLLM's stop_token_ids: tokens (in the vocabulary, at most FL_MAX_STOP_TOKEN_IDS, copied
     * at submit) that end the reply as an end token does, except that the token itself stays
     * in it (in its ids, and in its text unless it is a special token). min_tokens keeps them
     * out of its first positions too; ignore_eos does not. Refused with an output constraint,
     * whose reply a stop token could cut short. */
    const int32_t *stop_ids;
    int32_t n_stop_ids;
    /* vLLM's include_stop_str_in_output: a stop string that ends the reply stays at its end
     * (by default the reply is cut before it) */
    bool include_stop_str;
} fl_request;

typedef enum fl_seq_state {
    FL_SEQ_QUEUED = 0, /* waiting for admission (pages) */
    FL_SEQ_PREFILL,    /* prompt blocks being stored */
    FL_SEQ_DECODING,   /* running blocks */
    FL_SEQ_DONE,
    FL_SEQ_CANCELLED,
    FL_SEQ_FAILED,
} fl_seq_state;

typedef enum fl_finish {
    FL_FINISH_STOP = 0, /* an end-of-sequence token or a stop string */
    FL_FINISH_LENGTH,   /* max_tokens */
    FL_FINISH_CANCELLED,
    FL_FINISH_ERROR,
} fl_finish;

typedef enum fl_event_type { FL_EV_DRAFT = 0, FL_EV_COMMIT, FL_EV_DONE } fl_event_type;

typedef struct fl_seq_stats {
    int32_t prompt_tokens;
    int32_t reply_tokens;  /* committed reply tokens (after stops) */
    int32_t forwards;      /* forwards this sequence took part in */
    int32_t decode_forwards; /* forwards that denoised at least one of its blocks */
    int32_t store_forwards;  /* forwards that only stored (separate store passes, prefill) */
    int32_t blocks;        /* reply blocks committed */
    double tpf;            /* reply tokens (before stop truncation) per forward */
    int32_t cached_tokens;   /* prompt tokens not computed: shared from the engine's prefix
                                cache, or loaded from the request's prefix (Redis) */
    int32_t shared_tokens;   /* of those, from the engine's own prefix cache */
    int32_t prefix_rejected; /* prefix pages refused (damaged, wrong key or tokens) */
    int32_t edits;           /* token editing: decided tokens rewritten (any block position) */
    int32_t post_steps;      /* token editing: forwards of a block after its last mask */
    int32_t constrained;     /* output constraint: committed reply positions whose token is not
                                the one the model's own choice would have been */
    double ms_queued, ms_prefill, ms_decode, ms_total;
} fl_seq_stats;

typedef struct fl_event {
    fl_event_type type;
    uint64_t id;
    /* draft and commit: one reply block */
    int32_t block;          /* index of the block within the reply (0-based) */
    int32_t step;           /* denoising step within that block (draft) */
    int32_t n;              /* (draft) reply positions in the block */
    const int32_t *tokens;  /* (n) token id, or -1 where still masked */
    const uint8_t *fresh;   /* (n) 1 where unmasked in this step */
    const uint8_t *edited;  /* (n) 1 where a decided token was rewritten in this step (token
                               editing); a block's commit comes only after its last edit */
    const char *text;       /* commit: the block's text; done: the whole reply */
    size_t text_len;
    const int32_t *ids;     /* commit: the block's committed ids; done: the reply's ids */
    int32_t n_ids;
    /* with the request's logprobs (else NULL, 0): each id's log probability, and n_top
       alternatives per id, most likely first (top_ids, top_lps: (n_ids, n_top)) */
    const float *lps;
    const int32_t *top_ids;
    const float *top_lps;
    int32_t n_top;
    int32_t n_lps; /* of the ids, those whose log probabilities belong to the reply: all, or
                      when a stop string cut the text, the first ones, whose text starts
                      before the cut */
    /* done */
    fl_finish finish;
    /* FL_FINISH_STOP: what ended the reply, when the request named it (vLLM's stop_reason):
       the index of the stop string (fl_request.stop) that cut the text, else the stop token id
       (fl_request.stop_ids) that ended it; -1 each when the model's end token did */
    int32_t stop_string;
    int32_t stop_token;
    const char *error;      /* FL_FINISH_ERROR: the message */
    const fl_seq_stats *stats;
} fl_event;

typedef void (*fl_sink)(const fl_event *ev, void *ctx);

typedef struct fl_sched_opts {
    int32_t max_batch_tokens; /* tokens per forward at most */
    int32_t max_seqs;         /* running sequences at most */
    bool async_persist;       /* persistence on its own thread (default) or inline */
    fl_kv_tier *tier;         /* where committed pages go; NULL: nowhere */
    uint64_t model_id;        /* chains page hashes */
    bool all_outputs;         /* ask the backend for every output from out_from, the rows of
                                 decided positions too (the old way: same results, more lm_head
                                 rows; for side-by-side benchmarks and tests) */
} fl_sched_opts;

typedef struct fl_sched fl_sched;

typedef struct fl_sched_stats {
    int64_t forwards;
    int64_t tokens_forwarded;
    int64_t reply_tokens;
    int32_t running, queued;
    int32_t pages_used, pages_free;
    int32_t pages_cached;     /* nobody holds them; kept for the prefix cache (evictable) */
    int64_t pages_evicted;    /* cached pages reused for something else */
    int64_t prefix_pages_shared; /* prompt pages taken from the prefix cache at admission */
    double persist_wait_ms;   /* time the compute thread spent on (or blocked by) persistence */
    int64_t pages_persisted;
    int64_t prefix_pages_loaded;   /* pages filled from requests' prefixes */
    int64_t prefix_pages_rejected;
    int64_t out_rows;         /* outputs asked of the backend (its lm_head rows), all forwards */
} fl_sched_stats;

/* The KV pages a request holds from admission to its end: every block that can hold one of
 * its prompt or reply positions, plus the running blocks' look-ahead (d->max_blocks when
 * pipelined, else 1). Admission reserves exactly this many, so a request needs a pool of at
 * least this size and never runs out of pages mid-reply. */
int32_t fl_pages_needed(const fl_config *cf, int32_t n_prompt, int32_t max_tokens,
                        const fl_decode_opts *d);

/* Creates a scheduler over b's page pool (all b->n_pages) for model m. o->max_batch_tokens
 * 0 or above the backend's max_tokens means the backend's; max_seqs 0 means 64. m, b and
 * o->tier are borrowed: the caller frees them after fl_sched_destroy. FL_EINVAL (no mask
 * token, a batch limit below two blocks), FL_ENOMEM, or the persister's error; *out is NULL
 * on failure. */
int fl_sched_create(fl_sched **out, const fl_model *m, fl_backend *b, const fl_sched_opts *o,
                    fl_err *e);
/* Adds a request; the sink gets its events. Returns FL_EINVAL with a message for a bad
 * request (empty prompt, prompt longer than the model's positions, bad options). */
int fl_sched_add(fl_sched *s, const fl_request *r, fl_sink sink, void *ctx, uint64_t id, fl_err *e);
/* Cancels a sequence: its pages are freed at once and it gets a done(cancelled) event.
 * Returns FL_ENOTFOUND for an unknown or finished id. */
int fl_sched_cancel(fl_sched *s, uint64_t id);
/* One forward over all running work. Returns 1 when it did work, 0 when idle, < 0 on a
 * backend failure (every running sequence then fails with that message). */
int fl_sched_step(fl_sched *s, fl_err *e);
bool fl_sched_idle(const fl_sched *s);
void fl_sched_get_stats(const fl_sched *s, fl_sched_stats *st);
const fl_kvpool *fl_sched_pool(const fl_sched *s);
/* Drops the refs of pages the persister has finished with; returns how many pages it still
 * holds (0: nothing in flight). Never blocks. */
int fl_sched_reap(fl_sched *s);
/* Waits for the persistence thread to drain. */
void fl_sched_flush(fl_sched *s);
/* Cancels what is left (done events sent), waits for the persister, frees everything the
 * scheduler owns; not the backend, the model or the tier. NULL is a no-op. */
void fl_sched_destroy(fl_sched *s);

/* The engine thread. */
typedef struct fl_engine fl_engine;
typedef struct fl_engine_opts {
    fl_sched_opts sched;
    int32_t queue_cap; /* pending submissions at most; beyond: FL_EBUSY */
} fl_engine_opts;

/* Creates a scheduler (fl_sched_create: the same ownership of m, b and the tier) and starts
 * the engine thread that runs it. queue_cap 0 means 256. */
int fl_engine_start(fl_engine **out, const fl_model *m, fl_backend *b, const fl_engine_opts *o,
                    fl_err *e);
/* Thread-safe. Copies the request. FL_EBUSY when the queue is full (the caller answers
 * "busy"; nothing was queued). */
int fl_engine_submit(fl_engine *en, const fl_request *r, fl_sink sink, void *ctx, uint64_t *id,
                     fl_err *e);
/* Thread-safe, queued. FL_ESTATE once fl_engine_stop has begun. */
int fl_engine_cancel(fl_engine *en, uint64_t id);
void fl_engine_get_stats(fl_engine *en, fl_sched_stats *st); /* thread-safe snapshot */
/* Test control (FOGLINE_TEST_HOLD, docs/robustness.md), so that a test can say what the
 * engine has done instead of racing it. hold=true: no forward starts until released or
 * stepped; submissions and cancels are still taken (a cancel still ends its sequence). Both
 * return once no forward runs. Thread-safe; inert unless called. */
void fl_engine_hold(fl_engine *en, bool hold);
/* While held: runs one forward if there is work, and returns once it ended. */
void fl_engine_step(fl_engine *en);
/* Stops the thread: running sequences are cancelled (done events sent), the scheduler is
 * destroyed and en freed; the backend, model and tier are the caller's to free after. */
void fl_engine_stop(fl_engine *en);

#endif
