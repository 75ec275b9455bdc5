/* sched.c: the scheduler. One forward per step over every running sequence's work.
 *
 * A sequence's positions, left to right:
 *   [0, n_cached)          K/V stored in its pages
 *   [n_cached, run_start)  clean whole blocks whose K/V is not stored yet (prompt blocks,
 *                          finished reply blocks): stored by the next forward
 *   [run_start, run_end)   running blocks (n_run of them), being denoised
 * With decode-store overlap the clean blocks and the running blocks go in one segment (the
 * store rides along with the next block's denoise step; block-causal attention makes it
 * exact). Without it, clean blocks get a forward of their own (the "store pass" bubble).
 * With pipelining, the next block starts when the last running one is tau_add unmasked.
 *
 * Token editing (LLaDA2.1, decode_opts edit_threshold): every step of the running block may
 * also rewrite its decided reply positions, and once its last mask is gone the block keeps
 * taking "post" steps until one changes nothing or max_post_steps were taken (the authors'
 * generate). Only then is it final: committed, stored, persisted. One block at a time. */
#include "engine.h"
#include "cdecode.h"
#include "tokenizer/tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct seq {
    uint64_t id;
    fl_seq_state state;
    fl_sink sink;
    void *ctx;
    fl_decode_opts dec;
    bool every_step; /* a draft for each step, also one that changed nothing */
    int32_t max_tokens;
    char **stop;
    int32_t n_stop;
    bool include_stop_str; /* fl_request.include_stop_str */
    int32_t L;         /* prompt length */
    int32_t limit;     /* L + max_tokens: no reply position at or beyond it is emitted */
    int32_t cap;       /* positions allocated */
    int32_t *x;        /* (cap) token per position; mask id where undecided */
    uint8_t *fixed;    /* (cap) 1 when decided */
    uint8_t *fresh;    /* (cap) 1 when decided in the current step */
    uint8_t *edited;   /* (cap) 1 when rewritten in the current step (token editing) */
    int32_t *pages;    /* (cap / B) page table, -1 when none */
    fl_page_key *keys; /* (cap / B) chained key of each stored block */
    int32_t n_cached, run_start, n_run;
    int32_t *block_steps; /* (cap / B) denoising steps per block */
    int32_t post;         /* token editing: post steps the first running block took */
    bool settled;         /* token editing: the first running block's post steps are over */
    int32_t reserve;      /* pages it may still allocate (reserved at admission) */
    bool ended;           /* an end was committed: no new blocks */
    fl_finish finish;
    const char *fail; /* with FL_FINISH_ERROR: why (a static string) */
    fl_cons *cons;    /* output constraint (cdecode.h), or NULL */
    int32_t cstate;   /* its automaton's state after the committed reply (FL_CONS_END after
                         the end) */
    float *carry_lg;  /* constrained with shifted logits: the carry's logits (vocab) */
    int32_t *cprev;   /* constrained: the last assignment's token per position (cap), -1 */
    float *cprob;     /* (cap) and its probability */
    fl_tok_out carry; /* shifted logits: prediction for position n_cached made when the block
                         before it was stored */
    fl_tok_out carry_top1; /* the backend's argmax for the carry, before sampling replaced it */
    int32_t carry_pos;
    int32_t ar_pos;   /* shifted logits: a block's first position that takes the argmax of the
                         store forward's last row (Fast-dLLM v2's autoregressive step); -1 */
    /* log probabilities (fl_request.logprobs): per position the decided token's and its n_top
       alternatives' (cap; cap * n_top), copied per reply id at commit (max_tokens + 1 each) */
    bool lp_on;
    int32_t n_top;
    float *plp;
    int32_t *ptop;
    float *ptop_lp;
    float *ids_lp;
    int32_t *ids_top;
    float *ids_top_lp;
    size_t *ids_end;  /* (max_tokens + 1) the reply text's length after each id */
    int32_t n_lps;    /* ids whose log probabilities were reported in commits (lp_count) */
    bool lp_cut;      /* a stop string cut the text */
    bool carry_has_lg; /* carry_lg holds the carry's logits (its forward had them) */
    int32_t min_tokens; /* fl_request.min_tokens: no end token before this reply index */
    bool ignore_eos;    /* fl_request.ignore_eos: no end token at all */
    float pres_pen, freq_pen; /* fl_request.presence_penalty, frequency_penalty */
    float rep_pen;      /* fl_request.repetition_penalty; 1: off */
    /* with any of the three penalties on: */
    int32_t *pen_ids;  /* (max_tokens) scratch: the decided reply tokens, then distinct ones */
    float *pen;        /* (max_tokens) their presence and frequency penalties */
    int32_t *rep_prompt; /* (n_rep_prompt) repetition: the prompt's distinct tokens, ascending */
    int32_t n_rep_prompt;
    int32_t *rep_ids;  /* (n_rep_prompt + max_tokens) scratch: those and the reply's, merged */
    int32_t *stop_ids; /* (n_stop_ids) fl_request.stop_ids */
    int32_t n_stop_ids;
    int32_t stop_string, stop_token; /* fl_event's: what ended the reply; -1 when unnamed */
    int32_t n_bias;    /* logit bias (fl_request.bias): ids and values, n_bias each */
    int32_t *bias_ids;
    float *bias;
    uint64_t rng;
    fl_detok detok;
    fl_buf text;   /* committed reply text */
    int32_t *ids;  /* (max_tokens) committed reply ids */
    int32_t n_ids;
    int32_t produced; /* reply tokens decided, for TPF */
    unsigned char *prefix; /* (n_prefix, blob size) cached prompt pages; freed at admission */
    int32_t n_prefix;
    fl_seq_stats st;
    double t_add, t_admit, t_first_decode;
    struct seq *next;
} seq;

struct fl_sched {
    const fl_model *m;
    fl_backend *b;
    fl_sched_opts o;
    int32_t B;
    int32_t mask_id;
    fl_kvpool pool;
    int32_t reserved;   /* pages promised to admitted sequences, not yet allocated */
    seq *queued;        /* FIFO */
    seq *running;
    int32_t n_running, n_queued;
    fl_persist *persist;
    /* per-step buffers */
    int32_t *tokens;    /* (max_batch_tokens) */
    fl_segment *segs;   /* (max_seqs) */
    seq **seg_seq;      /* (max_seqs) */
    fl_tok_out *out;    /* (max_batch_tokens) */
    uint8_t *want;      /* (max_batch_tokens) segments' wanted outputs (plan_want) */
    float *logits;      /* (max_batch_tokens, vocab) only when someone samples */
    float *sample_tmp;  /* (vocab) */
    fl_cdp *cdp;        /* constrained decoding's scratch, made at the first use */
    int32_t *reap;      /* (n_pages) */
    fl_sched_stats st;
};

static bool is_eos(const fl_sched *s, int32_t tok)
{
    for (int i = 0; i < s->m->cfg.n_eos; i++)
        if (s->m->cfg.eos_ids[i] == tok)
            return true;
    return false;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Sorts ids (n) ascending and keeps each id once, at the front; count (n, or NULL) gets how
 * many times each was there. Returns how many distinct ids. */
static int32_t distinct(int32_t *ids, int32_t n, float *count)
{
    qsort(ids, (size_t)n, sizeof(int32_t), cmp_i32);
    int32_t d = 0;
    for (int32_t i = 0; i < n;) {
        int32_t j = i;
        while (j < n && ids[j] == ids[i])
            j++;
        if (count)
            count[d] = (float)(j - i);
        ids[d++] = ids[i];
        i = j;
    }
    return d;
}

/* A stop token id of the request's (fl_request.stop_ids): it ends the reply and stays in it. */
static bool is_stop_id(const seq *q, int32_t tok)
{
    for (int32_t i = 0; i < q->n_stop_ids; i++)
        if (q->stop_ids[i] == tok)
            return true;
    return false;
}

int32_t fl_pages_needed(const fl_config *cf, int32_t n_prompt, int32_t max_tokens,
                        const fl_decode_opts *d)
{
    int32_t B = cf->block_size;
    int32_t run = d->pipeline ? d->max_blocks : 1;
    return (n_prompt + max_tokens + B - 1) / B + run;
}

int fl_sched_create(fl_sched **out, const fl_model *m, fl_backend *b, const fl_sched_opts *o,
                    fl_err *e)
{
    *out = NULL;
    if (m->cfg.mask_token_id < 0)
        return fl_err_set(e, FL_EINVAL, "the model has no mask token (config mask_token_id or "
                                        "the tokenizer's mask token)");
    fl_sched *s = calloc(1, sizeof *s);
    if (!s)
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    s->m = m;
    s->b = b;
    s->o = *o;
    s->B = m->cfg.block_size;
    s->mask_id = m->cfg.mask_token_id;
    if (s->o.max_batch_tokens <= 0 || s->o.max_batch_tokens > b->max_tokens)
        s->o.max_batch_tokens = b->max_tokens;
    if (s->o.max_seqs <= 0)
        s->o.max_seqs = 64;
    if (s->o.max_batch_tokens < 2 * s->B) {
        int32_t mbt = s->o.max_batch_tokens;
        free(s);
        return fl_err_set(e, FL_EINVAL, "max batch tokens %d is below two blocks (%d)", mbt,
                          2 * m->cfg.block_size);
    }
    int rc = fl_kvpool_init(&s->pool, b->n_pages, e);
    if (rc) {
        free(s);
        return rc;
    }
    size_t T = (size_t)s->o.max_batch_tokens;
    s->tokens = malloc(sizeof(int32_t) * T);
    s->segs = malloc(sizeof(fl_segment) * (size_t)s->o.max_seqs);
    s->seg_seq = malloc(sizeof(seq *) * (size_t)s->o.max_seqs);
    s->out = malloc(sizeof(fl_tok_out) * T);
    s->want = malloc(T);
    s->reap = malloc(sizeof(int32_t) * (size_t)(b->n_pages + 1));
    if (!s->tokens || !s->segs || !s->seg_seq || !s->out || !s->want || !s->reap) {
        fl_sched_destroy(s);
        return fl_err_set(e, FL_ENOMEM, "out of memory for the scheduler");
    }
    rc = fl_persist_create(&s->persist, b, o->model_id, o->tier, o->async_persist, 1024, e);
    if (rc) {
        fl_sched_destroy(s);
        return rc;
    }
    *out = s;
    return 0;
}

static void seq_free(seq *q)
{
    if (!q)
        return;
    for (int i = 0; i < q->n_stop; i++)
        free(q->stop[i]);
    free(q->stop);
    free(q->x);
    free(q->fixed);
    free(q->fresh);
    free(q->edited);
    free(q->pages);
    free(q->keys);
    free(q->block_steps);
    free(q->ids);
    free(q->prefix);
    free(q->carry_lg);
    free(q->plp);
    free(q->ptop);
    free(q->ptop_lp);
    free(q->ids_lp);
    free(q->ids_top);
    free(q->ids_top_lp);
    free(q->ids_end);
    free(q->cprev);
    free(q->cprob);
    free(q->bias_ids);
    free(q->bias);
    free(q->pen_ids);
    free(q->pen);
    free(q->rep_prompt);
    free(q->rep_ids);
    free(q->stop_ids);
    fl_cons_unref(q->cons);
    fl_buf_free(&q->text);
    free(q);
}

static int32_t pages_needed(const fl_sched *s, const seq *q) { return q->cap / s->B; }

int fl_sched_add(fl_sched *s, const fl_request *r, fl_sink sink, void *ctx, uint64_t id, fl_err *e)
{
    const fl_config *c = &s->m->cfg;
    int32_t B = s->B;
    if (r->n_prompt <= 0)
        return fl_err_set(e, FL_EINVAL, "the prompt is empty");
    if (r->max_tokens <= 0)
        return fl_err_set(e, FL_EINVAL, "max_tokens must be positive, got %d", r->max_tokens);
    int rc = fl_decode_opts_check(&r->dec, e);
    if (rc)
        return rc;
    if (r->n_prefix < 0 || (r->n_prefix > 0 && !r->prefix))
        return fl_err_set(e, FL_EINVAL, "a prefix of %d pages without data", r->n_prefix);
    for (int i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= c->vocab)
            return fl_err_set(e, FL_EINVAL, "prompt token %d at %d is outside the vocabulary",
                              r->prompt[i], i);
    int32_t max_pos = c->max_pos > 0 ? c->max_pos : 1 << 30;
    if (r->n_prompt + B > max_pos)
        return fl_err_set(e, FL_ERANGE, "the prompt has %d tokens; this model takes at most %d",
                          r->n_prompt, max_pos - B);
    int32_t max_tokens = r->max_tokens;
    if (r->n_prompt + max_tokens > max_pos - B) /* stay inside the model's positions */
        max_tokens = max_pos - B - r->n_prompt;
    if (r->constraint && r->dec.edit_threshold != FL_EDIT_OFF)
        return fl_err_set(e, FL_EINVAL, "edit_threshold (token editing) cannot be combined with "
                                        "an output constraint: an edit could leave the language");
    if (r->constraint && r->constraint->tv->n != c->vocab)
        return fl_err_set(e, FL_EINVAL, "the output constraint was built for another vocabulary");
    if (r->constraint && fl_cons_min_tokens(r->constraint) > max_tokens)
        return fl_err_set(e, FL_ERANGE, "the shortest reply the constraint allows takes %d tokens; "
                                        "max_tokens is %d", fl_cons_min_tokens(r->constraint),
                          max_tokens);
    if (r->logprobs && (r->top_logprobs < 0 || r->top_logprobs > FL_MAX_TOP_LOGPROBS))
        return fl_err_set(e, FL_EINVAL, "top_logprobs must be in [0, %d], got %d",
                          FL_MAX_TOP_LOGPROBS, r->top_logprobs);
    if (r->n_bias < 0 || r->n_bias > FL_MAX_LOGIT_BIAS || (r->n_bias && (!r->bias_ids || !r->bias)))
        return fl_err_set(e, FL_EINVAL, "logit_bias names %d tokens; at most %d", r->n_bias,
                          FL_MAX_LOGIT_BIAS);
    for (int32_t i = 0; i < r->n_bias; i++) {
        if (r->bias_ids[i] < 0 || r->bias_ids[i] >= c->vocab)
            return fl_err_set(e, FL_EINVAL, "logit_bias: token %d is outside the vocabulary "
                              "(%d ids)", r->bias_ids[i], c->vocab);
        if (!(fabsf(r->bias[i]) <= FL_LOGIT_BIAS_MAX))
            return fl_err_set(e, FL_EINVAL, "logit_bias: token %d's bias must be in [-%g, %g]",
                              r->bias_ids[i], (double)FL_LOGIT_BIAS_MAX, (double)FL_LOGIT_BIAS_MAX);
    }
    if (r->min_tokens < 0 || r->min_tokens > r->max_tokens)
        return fl_err_set(e, FL_EINVAL, "min_tokens must be in [0, max_tokens %d], got %d",
                          r->max_tokens, r->min_tokens);
    if (!(fabsf(r->presence_penalty) <= 2.0f) || !(fabsf(r->frequency_penalty) <= 2.0f))
        return fl_err_set(e, FL_EINVAL, "presence_penalty and frequency_penalty must be in "
                          "[-2, 2], got %g and %g", (double)r->presence_penalty,
                          (double)r->frequency_penalty);
    if ((r->min_tokens || r->ignore_eos) && r->constraint)
        return fl_err_set(e, FL_EINVAL, "%s cannot be combined with an output constraint: the "
                          "constrained reply ends with an end token",
                          r->ignore_eos ? "ignore_eos" : "min_tokens");
    if (!(r->repetition_penalty >= 0.0f && r->repetition_penalty <= FL_REP_PENALTY_MAX))
        return fl_err_set(e, FL_EINVAL, "repetition_penalty must be in (0, %g] (0: off), got %g",
                          (double)FL_REP_PENALTY_MAX, (double)r->repetition_penalty);
    if (r->n_stop_ids < 0 || r->n_stop_ids > FL_MAX_STOP_TOKEN_IDS ||
        (r->n_stop_ids && !r->stop_ids))
        return fl_err_set(e, FL_EINVAL, "stop_token_ids names %d tokens; at most %d",
                          r->n_stop_ids, FL_MAX_STOP_TOKEN_IDS);
    for (int32_t i = 0; i < r->n_stop_ids; i++)
        if (r->stop_ids[i] < 0 || r->stop_ids[i] >= c->vocab)
            return fl_err_set(e, FL_EINVAL, "stop_token_ids: token %d is outside the vocabulary "
                              "(%d ids)", r->stop_ids[i], c->vocab);
    if (r->n_stop_ids && r->constraint)
        return fl_err_set(e, FL_EINVAL, "stop_token_ids cannot be combined with an output "
                          "constraint: a stop token could cut its reply short");
    int32_t run_blocks = r->dec.pipeline ? r->dec.max_blocks : 1;
    if ((run_blocks + 1) * B > s->o.max_batch_tokens)
        return fl_err_set(e, FL_ERANGE, "max_blocks %d needs %d tokens per forward; the limit is %d",
                          run_blocks, (run_blocks + 1) * B, s->o.max_batch_tokens);
    seq *q = calloc(1, sizeof *q);
    if (!q)
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    q->id = id;
    q->state = FL_SEQ_QUEUED;
    q->sink = sink;
    q->ctx = ctx;
    q->dec = r->dec;
    q->every_step = r->every_step;
    q->max_tokens = max_tokens;
    q->L = r->n_prompt;
    q->limit = q->L + max_tokens;
    q->cap = fl_pages_needed(c, q->L, max_tokens, &r->dec) * B;
    int32_t nb = q->cap / B;
    q->x = malloc(sizeof(int32_t) * (size_t)q->cap);
    q->fixed = calloc((size_t)q->cap, 1);
    q->fresh = calloc((size_t)q->cap, 1);
    q->edited = calloc((size_t)q->cap, 1);
    q->pages = malloc(sizeof(int32_t) * (size_t)nb);
    q->keys = calloc((size_t)nb, sizeof(fl_page_key));
    q->block_steps = calloc((size_t)nb, sizeof(int32_t));
    q->ids = malloc(sizeof(int32_t) * (size_t)(max_tokens + 1));
    q->stop = r->n_stop ? calloc((size_t)r->n_stop, sizeof(char *)) : NULL;
    q->include_stop_str = r->include_stop_str;
    bool carry_lg = (r->constraint || r->logprobs) && c->logits_shift;
    if (carry_lg)
        q->carry_lg = malloc(sizeof(float) * (size_t)c->vocab);
    bool lp_bad = false;
    if (r->logprobs) {
        size_t k = (size_t)r->top_logprobs, cap = (size_t)q->cap, n = (size_t)max_tokens + 1;
        q->lp_on = true;
        q->n_top = r->top_logprobs;
        q->plp = malloc(sizeof(float) * cap);
        q->ids_lp = malloc(sizeof(float) * n);
        q->ids_end = malloc(sizeof(size_t) * n);
        if (k) {
            q->ptop = malloc(sizeof(int32_t) * cap * k);
            q->ptop_lp = malloc(sizeof(float) * cap * k);
            q->ids_top = malloc(sizeof(int32_t) * n * k);
            q->ids_top_lp = malloc(sizeof(float) * n * k);
        }
        lp_bad = !q->plp || !q->ids_lp || !q->ids_end ||
                 (k && (!q->ptop || !q->ptop_lp || !q->ids_top || !q->ids_top_lp));
    }
    if (r->constraint) {
        q->cprev = malloc(sizeof(int32_t) * (size_t)q->cap);
        q->cprob = malloc(sizeof(float) * (size_t)q->cap);
    }
    q->min_tokens = r->min_tokens;
    q->ignore_eos = r->ignore_eos;
    q->pres_pen = r->presence_penalty;
    q->freq_pen = r->frequency_penalty;
    q->rep_pen = r->repetition_penalty > 0 ? r->repetition_penalty : 1.0f;
    bool pen_bad = false;
    if (q->pres_pen != 0 || q->freq_pen != 0 || q->rep_pen != 1.0f) {
        q->pen_ids = malloc(sizeof(int32_t) * (size_t)max_tokens);
        q->pen = malloc(sizeof(float) * (size_t)max_tokens);
        pen_bad = !q->pen_ids || !q->pen;
    }
    if (q->rep_pen != 1.0f && !pen_bad) {
        q->rep_prompt = malloc(sizeof(int32_t) * (size_t)r->n_prompt);
        q->rep_ids = malloc(sizeof(int32_t) * ((size_t)r->n_prompt + (size_t)max_tokens));
        pen_bad = !q->rep_prompt || !q->rep_ids;
        if (!pen_bad)
            q->n_rep_prompt = distinct(memcpy(q->rep_prompt, r->prompt,
                                              sizeof(int32_t) * (size_t)r->n_prompt),
                                       r->n_prompt, NULL);
    }
    q->stop_string = q->stop_token = -1;
    if (r->n_stop_ids) {
        q->stop_ids = malloc(sizeof(int32_t) * (size_t)r->n_stop_ids);
        if (q->stop_ids) {
            memcpy(q->stop_ids, r->stop_ids, sizeof(int32_t) * (size_t)r->n_stop_ids);
            q->n_stop_ids = r->n_stop_ids;
        }
    }
    if (r->n_bias) {
        q->bias_ids = malloc(sizeof(int32_t) * (size_t)r->n_bias);
        q->bias = malloc(sizeof(float) * (size_t)r->n_bias);
        if (q->bias_ids && q->bias) {
            memcpy(q->bias_ids, r->bias_ids, sizeof(int32_t) * (size_t)r->n_bias);
            memcpy(q->bias, r->bias, sizeof(float) * (size_t)r->n_bias);
            q->n_bias = r->n_bias;
        }
    }
    if (!q->x || !q->fixed || !q->fresh || !q->edited || !q->pages || !q->keys ||
        !q->block_steps || !q->ids || (r->n_stop && !q->stop) ||
        (carry_lg && !q->carry_lg) || (r->constraint && (!q->cprev || !q->cprob)) || lp_bad ||
        q->n_bias != r->n_bias || q->n_stop_ids != r->n_stop_ids || pen_bad) {
        seq_free(q);
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    }
    for (int i = 0; i < r->n_stop; i++) {
        if (!r->stop[i] || !r->stop[i][0]) {
            seq_free(q);
            return fl_err_set(e, FL_EINVAL, "stop string %d is empty", i);
        }
        if (!(q->stop[i] = strdup(r->stop[i]))) {
            seq_free(q);
            return fl_err_set(e, FL_ENOMEM, "out of memory");
        }
        q->n_stop = i + 1;
    }
    if (pages_needed(s, q) > s->pool.n_pages) {
        int32_t need = pages_needed(s, q);
        seq_free(q);
        return fl_err_set(e, FL_ERANGE, "the request needs %d KV pages; the pool has %d", need,
                          s->pool.n_pages);
    }
    for (int32_t i = 0; i < q->cap; i++)
        q->x[i] = s->mask_id;
    for (int32_t i = 0; q->cprev && i < q->cap; i++)
        q->cprev[i] = -1;
    memcpy(q->x, r->prompt, sizeof(int32_t) * (size_t)q->L);
    memset(q->fixed, 1, (size_t)q->L);
    for (int32_t i = 0; i < nb; i++)
        q->pages[i] = -1;
    q->carry_pos = -1;
    q->ar_pos = -1;
    q->rng = r->dec.seed * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull;
    if (s->m->tok)
        fl_detok_init(&q->detok, s->m->tok, true);
    q->st.prompt_tokens = q->L;
    /* the prompt's whole blocks' keys: admission looks them up in the prefix cache, and a
       running sequence's not-yet-stored ones tell others to wait for them */
    {
        fl_page_key parent = {0, 0};
        for (int32_t b = 0; b < q->L / B; b++)
            parent = q->keys[b] = fl_page_key_chain(s->o.model_id, parent, q->x + b * B, B);
    }
    q->cons = fl_cons_ref(r->constraint);
    q->cstate = 0;
    if (r->prefix && r->n_prefix > 0) { /* taken only now that nothing can fail */
        q->prefix = r->prefix;
        q->n_prefix = r->n_prefix;
    }
    q->t_add = fl_now_ms();
    /* append to the FIFO */
    seq **pp = &s->queued;
    while (*pp)
        pp = &(*pp)->next;
    *pp = q;
    s->n_queued++;
    return 0;
}

/* The reply ids whose log probabilities are reported: every one, or once a stop string cut
 * the text, those whose text starts before the cut. */
static int32_t lp_count(const seq *q)
{
    if (!q->lp_cut)
        return q->n_ids;
    int32_t n = 0;
    while (n < q->n_ids && (n ? q->ids_end[n - 1] : 0) < q->text.len)
        n++;
    return n;
}

static void emit_done(fl_sched *s, seq *q, fl_finish fin, const char *err)
{
    double t = fl_now_ms();
    q->st.reply_tokens = q->n_ids;
    q->st.ms_total = t - q->t_add;
    if (q->t_admit > 0) {
        double first = q->t_first_decode > 0 ? q->t_first_decode : t;
        q->st.ms_prefill = first - q->t_admit;
        q->st.ms_decode = q->t_first_decode > 0 ? t - q->t_first_decode : 0;
    }
    q->st.tpf = q->st.forwards ? (double)q->produced / q->st.forwards : 0;
    if (s->m->tok && fin != FL_FINISH_ERROR && fin != FL_FINISH_CANCELLED)
        fl_detok_finish(&q->detok, &q->text);
    fl_event ev = {0};
    ev.type = FL_EV_DONE;
    ev.id = q->id;
    ev.finish = fin;
    ev.stop_string = fin == FL_FINISH_STOP ? q->stop_string : -1;
    ev.stop_token = fin == FL_FINISH_STOP ? q->stop_token : -1;
    ev.error = err;
    ev.text = q->text.data ? q->text.data : "";
    ev.text_len = q->text.len;
    ev.ids = q->ids;
    ev.n_ids = q->n_ids;
    if (q->lp_on) {
        ev.lps = q->ids_lp;
        ev.top_ids = q->ids_top;
        ev.top_lps = q->ids_top_lp;
        ev.n_top = q->n_top;
        ev.n_lps = lp_count(q);
    }
    ev.stats = &q->st;
    if (q->sink)
        q->sink(&ev, q->ctx);
}

/* Frees a sequence's pages and reservation at once and unlinks it. */
static void seq_retire(fl_sched *s, seq *q, fl_finish fin, const char *err)
{
    q->state = fin == FL_FINISH_CANCELLED ? FL_SEQ_CANCELLED
             : fin == FL_FINISH_ERROR    ? FL_SEQ_FAILED
                                         : FL_SEQ_DONE;
    for (int32_t i = 0; i < q->cap / s->B; i++)
        if (q->pages[i] >= 0) {
            fl_kvpool_unref(&s->pool, q->pages[i]);
            q->pages[i] = -1;
        }
    s->reserved -= q->reserve;
    q->reserve = 0;
    seq **pp = q->t_admit > 0 ? &s->running : &s->queued;
    while (*pp && *pp != q)
        pp = &(*pp)->next;
    if (*pp) {
        *pp = q->next;
        if (q->t_admit > 0)
            s->n_running--;
        else
            s->n_queued--;
    }
    emit_done(s, q, fin, err);
    seq_free(q);
}

int fl_sched_cancel(fl_sched *s, uint64_t id)
{
    for (int list = 0; list < 2; list++)
        for (seq *q = list ? s->running : s->queued; q; q = q->next)
            if (q->id == id) {
                seq_retire(s, q, FL_FINISH_CANCELLED, NULL);
                return 0;
            }
    return FL_ENOTFOUND;
}

/* Fills the sequence's first pages from its cached prefix (at admission, pages reserved).
 * Each blob must carry the key chained from this prompt's own tokens, the same tokens and a
 * good checksum; the first one that does not ends the prefix, and the rest is prefilled as
 * usual, so a damaged cache costs time, never correctness. The block holding the prompt's
 * last token is always computed (its output predicts the first reply position). */
static void load_prefix(fl_sched *s, seq *q)
{
    int32_t B = s->B;
    const fl_config *c = &s->m->cfg;
    int32_t n = q->n_prefix;
    if (n > (q->L - 1) / B)
        n = (q->L - 1) / B;
    size_t bl = fl_blob_size(c);
    int32_t b = q->n_cached / B; /* blocks the engine's own prefix cache gave come first */
    float *page = n > b ? malloc(s->b->page_bytes) : NULL;
    int32_t *toks = n > b ? malloc(sizeof(int32_t) * (size_t)B) : NULL;
    fl_page_key parent = b ? q->keys[b - 1] : (fl_page_key){0, 0};
    int32_t loaded = 0;
    for (; page && toks && b < n; b++) {
        fl_err e = {0};
        fl_page_key k = fl_page_key_chain(s->o.model_id, parent, q->x + b * B, B);
        if (fl_blob_decode(c, s->o.model_id, k, q->prefix + (size_t)b * bl, bl, toks, page, &e) ||
            memcmp(toks, q->x + b * B, sizeof(int32_t) * (size_t)B)) {
            q->st.prefix_rejected++;
            s->st.prefix_pages_rejected++;
            break;
        }
        int32_t pg = fl_kvpool_alloc(&s->pool);
        if (pg < 0)
            abort(); /* reserved at admission */
        if (s->b->ops->page_write(s->b, pg, page, &e)) {
            fl_kvpool_unref(&s->pool, pg);
            q->st.prefix_rejected++;
            s->st.prefix_pages_rejected++;
            break;
        }
        q->reserve--;
        s->reserved--;
        q->pages[b] = pg;
        q->keys[b] = k;
        fl_kvpool_register(&s->pool, pg, (fl_kvpool_key){k.hi, k.lo});
        parent = k;
        s->st.prefix_pages_loaded++;
        loaded++;
    }
    if (b * B > q->n_cached)
        q->n_cached = b * B;
    q->st.cached_tokens += loaded * B;
    free(page);
    free(toks);
    free(q->prefix);
    q->prefix = NULL;
    q->n_prefix = 0;
}

/* True when a running sequence's prompt block with this key is about to be stored: a sequence
 * that needs it waits a step and shares it rather than computing it a second time. */
static bool promised(const fl_sched *s, fl_page_key k)
{
    for (const seq *r = s->running; r; r = r->next)
        for (int32_t b = r->n_cached / s->B; b < r->run_start / s->B && b < r->L / s->B; b++)
            if (r->keys[b].hi == k.hi && r->keys[b].lo == k.lo)
                return true;
    return false;
}

/* Admits queued sequences in order while their pages can be promised. The prompt's leading
 * blocks found in the prefix cache are taken (shared) instead of computed; the block with
 * the prompt's last token is always computed (its output predicts the first reply token). */
static void admit(fl_sched *s)
{
    int32_t B = s->B;
    while (s->queued && s->n_running < s->o.max_seqs) {
        seq *q = s->queued;
        int32_t maxb = (q->L - 1) / B, hits = 0, idle_hits = 0;
        for (; hits < maxb; hits++) {
            int32_t pg = fl_kvpool_lookup(&s->pool, (fl_kvpool_key){q->keys[hits].hi, q->keys[hits].lo});
            if (pg < 0)
                break;
            idle_hits += s->pool.refs[pg] == 0;
        }
        if (hits < maxb && promised(s, q->keys[hits]))
            break; /* shared next step, once stored */
        int32_t need = pages_needed(s, q) - hits;
        if (fl_kvpool_available(&s->pool) - idle_hits - s->reserved < need)
            break; /* FIFO: a big request is not overtaken forever by small ones */
        for (int32_t b = 0; b < hits; b++) {
            q->pages[b] = fl_kvpool_lookup(&s->pool, (fl_kvpool_key){q->keys[b].hi, q->keys[b].lo});
            fl_kvpool_take(&s->pool, q->pages[b]);
        }
        q->n_cached = hits * B;
        q->st.cached_tokens = hits * B;
        q->st.shared_tokens = hits * B;
        s->st.prefix_pages_shared += hits;
        s->queued = q->next;
        s->n_queued--;
        q->reserve = need;
        s->reserved += need;
        q->state = FL_SEQ_PREFILL;
        q->t_admit = fl_now_ms();
        q->st.ms_queued = q->t_admit - q->t_add;
        /* the first running block is the one holding the prompt's last partial block */
        q->run_start = (q->L / s->B) * s->B;
        q->n_run = 1;
        /* a prompt ending on a block boundary: the prefill's last row gives the first token */
        if (s->m->cfg.logits_shift && q->L % s->B == 0)
            q->ar_pos = q->L;
        if (q->prefix)
            load_prefix(s, q);
        q->next = NULL;
        seq **pp = &s->running;
        while (*pp)
            pp = &(*pp)->next;
        *pp = q;
        s->n_running++;
    }
}

bool fl_sched_idle(const fl_sched *s) { return !s->running && !s->queued; }

/* Fraction of a block's reply positions that are decided. */
static float block_ratio(const fl_sched *s, const seq *q, int32_t start)
{
    int32_t tot = 0, done = 0;
    for (int32_t p = start; p < start + s->B; p++) {
        if (p < q->L)
            continue;
        tot++;
        done += q->fixed[p];
    }
    return tot ? (float)done / (float)tot : 1.0f;
}

/* True when the block at start can be committed: every reply position before the limit is
 * decided, or an end token is decided with nothing undecided before it (the reply ends there:
 * what follows it is never read, so decoding it would only cost forwards). */
static bool block_ready(const fl_sched *s, const seq *q, int32_t start)
{
    if (q->dec.edit_threshold != FL_EDIT_OFF) {
        /* editing: any position may still change an earlier one (or the end token itself)
           until the post steps are over, those past the limit included */
        for (int32_t p = start; p < start + s->B; p++)
            if (!q->fixed[p])
                return false;
        return q->settled;
    }
    int32_t end = start + s->B < q->limit ? start + s->B : q->limit;
    for (int32_t p = start; p < end; p++) {
        if (!q->fixed[p])
            return false;
        if (p >= q->L && (is_eos(s, q->x[p]) || is_stop_id(q, q->x[p])))
            return true;
    }
    return true;
}

/* Plans this sequence's segment into the batch. Returns tokens used (0: nothing this step). */
static int32_t plan(fl_sched *s, seq *q, int32_t budget, fl_segment *sg)
{
    int32_t B = s->B;
    int32_t clean = q->run_start - q->n_cached;
    int32_t run = q->n_run * B;
    int32_t shift = s->m->cfg.logits_shift;
    int32_t n = 0, n_store = 0, out_from;
    /* a pending autoregressive first token needs the store forward's last row before the
       block's first denoise step can see it: no overlap for that store */
    bool overlap = q->dec.store_overlap && q->ar_pos < 0;
    if (overlap && clean + run <= budget) {
        n = clean + run;
        n_store = clean;
        out_from = clean - (shift && clean > 0 ? 1 : 0);
        if (run == 0)
            out_from = n; /* nothing to denoise */
    } else if (clean > 0) {
        n_store = clean < budget ? clean : (budget / B) * B;
        if (n_store <= 0)
            return 0;
        n = n_store;
        /* a store pass that reaches the running blocks yields the shifted prediction for the
           first running position */
        out_from = (shift && q->n_cached + n_store == q->run_start) ? n - 1 : n;
    } else if (run > 0 && run <= budget && q->ar_pos < 0) {
        n = run;
        out_from = 0;
    } else {
        return 0;
    }
    /* pages for the blocks this forward stores (reserved at admission, so never short) */
    for (int32_t p = q->n_cached; p < q->n_cached + n_store; p += B) {
        int32_t b = p / B;
        if (q->pages[b] < 0) {
            q->pages[b] = fl_kvpool_alloc(&s->pool);
            if (q->pages[b] < 0)
                abort(); /* reservation accounting is broken */
            q->reserve--;
            s->reserved--;
        }
    }
    sg->n = n;
    sg->pos0 = q->n_cached;
    sg->n_store = n_store;
    sg->out_from = out_from;
    sg->pages = q->pages;
    return n;
}

/* Which outputs of the segment plan() made this step reads (want[i] for token i; tokens
 * before out_from are never asked). Token i's output predicts position p = pos0 + i + shift.
 * Unread, so not asked: a running position already decided (unless this step may edit it:
 * the first running block, reply positions), a position past the running blocks, and, with
 * Fast-dLLM v2's sub-blocks and no output constraint, a running block's positions outside the
 * sub-block it denoises (the first with a mask). Store rows before out_from are not asked
 * anyway; the one out_from leaves (the shifted prediction of the first running position) is.
 * The backend's lm_head then multiplies only the rows a step decides from: at block 32 with
 * half the block decided, half the rows; with 8-wide sub-blocks of 32, a quarter. The
 * outputs read are the same either way wherever the head's row count does not cross the
 * backend's sgemm threshold (q8/q4 never use sgemm; f32/bf16 weights do at sgemm_rows rows,
 * 1,024 with this machine's AVX-512 kernels): the same condition under which batching
 * leaves outputs bit for bit (test_forward, test_sched). */
static void plan_want(const fl_sched *s, const seq *q, const fl_segment *sg, uint8_t *want)
{
    const fl_config *c = &s->m->cfg;
    int32_t B = s->B, run_end = q->run_start + q->n_run * B;
    bool editing = q->dec.edit_threshold != FL_EDIT_OFF;
    int32_t sub = c->sub_block > 0 && c->sub_block < B && !q->cons ? c->sub_block : B;
    for (int32_t i = 0; i < sg->n; i++) {
        int32_t p = sg->pos0 + i + c->logits_shift;
        want[i] = 1;
        if (i < sg->n_store || p < q->run_start)
            continue;
        if (p >= run_end) {
            want[i] = 0;
            continue;
        }
        if (q->fixed[p]) {
            want[i] = editing && p >= q->L && p < q->run_start + B;
            continue;
        }
        if (sub < B) { /* the first sub-block of p's block that has a mask */
            int32_t start = p - (p - q->run_start) % B, lo = start;
            for (int32_t t = start; t < start + B; t += sub) {
                bool has_mask = false;
                for (int32_t u = t; u < t + sub; u++)
                    has_mask |= !q->fixed[u];
                if (has_mask) {
                    lo = t;
                    break;
                }
            }
            want[i] = p >= lo && p < lo + sub;
        }
    }
}

/* The prediction for position p from this forward (or the carry). NULL when none. */
static const fl_tok_out *pred_at(const fl_sched *s, const seq *q, const fl_segment *sg,
                                 const fl_tok_out *out, int32_t p)
{
    int32_t src = p - s->m->cfg.logits_shift;
    if (src >= sg->pos0 && src < sg->pos0 + sg->n && fl_seg_wants(sg, src - sg->pos0))
        return &out[src - sg->pos0];
    if (src == q->carry_pos)
        return &q->carry;
    return NULL;
}

/* The logits behind pred_at's prediction for p (constrained sequences keep the carry's). */
static const float *logits_at(const fl_sched *s, const seq *q, const fl_segment *sg,
                              const float *logits, int32_t p)
{
    int32_t src = p - s->m->cfg.logits_shift;
    if (!logits)
        return NULL;
    if (src >= sg->pos0 && src < sg->pos0 + sg->n && fl_seg_wants(sg, src - sg->pos0))
        return logits + (size_t)(src - sg->pos0) * (size_t)s->m->cfg.vocab;
    if (src == q->carry_pos)
        return q->carry_lg;
    return NULL;
}

/* Output constraint: the most probable assignment of the running blocks' reply positions that
 * the automaton accepts from the state after the committed reply (cdecode.h), into cprev and
 * cprob; the blocks' policies then take their positions' tokens from it. -1 when none exists
 * (cannot happen while every decided token came from such an assignment). */
static int constrain_window(fl_sched *s, seq *q, const fl_segment *sg, const fl_tok_out *out,
                            const float *logits)
{
    int32_t start = q->run_start, from = start < q->L ? q->L : start;
    int32_t end = start + q->n_run * s->B;
    if (end > q->limit)
        end = q->limit;
    int32_t n = end - from;
    if (n <= 0)
        return 0;
    if (!s->cdp && !(s->cdp = fl_cdp_new()))
        return -1;
    fl_cpos cp[FL_CONS_MAX_POS];
    for (int32_t j = 0; j < n; j++) {
        int32_t p = from + j;
        cp[j].fixed = q->fixed[p] ? q->x[p] : -1;
        cp[j].logits = q->fixed[p] ? NULL : logits_at(s, q, sg, logits, p);
        cp[j].prev = q->cprev[p];
        cp[j].lse = NAN;
        /* the backend's prediction: the argmax's probability gives the log-sum-exp */
        const fl_tok_out *pr = cp[j].logits ? pred_at(s, q, sg, out, p) : NULL;
        if (pr && pr->prob > 0 && pr->token >= 0 && pr->token < s->m->cfg.vocab)
            cp[j].lse = cp[j].logits[pr->token] - logf(pr->prob);
    }
    return fl_cons_best(q->cons, s->cdp, q->cstate, cp, n, q->limit - from, s->m->cfg.vocab,
                        s->m->cfg.eos_ids, s->m->cfg.n_eos, &q->dec, &q->rng, q->cprev + from,
                        q->cprob + from);
}

/* Log probabilities: x[p]'s, and the n_top most likely tokens', in the logits behind p's
 * prediction in this forward (or the carry's): log-softmax at temperature 1 over the whole
 * vocabulary. -1 when the forward has no logits (they could not be allocated). */
static int note_lp(const fl_sched *s, seq *q, const fl_segment *sg, const fl_tok_out *out,
                   const float *logits, int32_t p)
{
    const float *row = logits_at(s, q, sg, logits, p);
    if (!row || (row == q->carry_lg && !q->carry_has_lg))
        return -1;
    int32_t V = s->m->cfg.vocab, k = q->n_top;
    const fl_tok_out *top1 = row == q->carry_lg ? &q->carry_top1 : pred_at(s, q, sg, out, p);
    double lse = fl_row_lse(row, V, top1);
    q->plp[p] = (float)((double)row[q->x[p]] - lse);
    if (!k)
        return 0;
    int32_t *ti = q->ptop + (size_t)p * (size_t)k;
    float *tl = q->ptop_lp + (size_t)p * (size_t)k;
    int32_t n = fl_row_top(row, V, k, ti, tl);
    for (int32_t i = 0; i < n; i++)
        tl[i] = (float)((double)tl[i] - lse);
    return 0;
}

/* note_lp for a reply position just decided; a forward without logits fails the sequence. */
static bool lp_failed(const fl_sched *s, seq *q, const fl_segment *sg, const fl_tok_out *out,
                      const float *logits, int32_t p)
{
    if (!q->lp_on || p < q->L || p >= q->limit || !note_lp(s, q, sg, out, logits, p))
        return false;
    q->finish = FL_FINISH_ERROR;
    q->fail = "out of memory for the log probabilities";
    return true;
}

static void emit_draft(fl_sched *s, seq *q, int32_t start)
{
    int32_t B = s->B;
    int32_t from = start < q->L ? q->L : start;
    int32_t n = start + B - from;
    if (from + n > q->limit)
        n = q->limit - from;
    if (n <= 0 || !q->sink)
        return;
    int32_t toks[FL_MAX_BLOCK];
    uint8_t fr[FL_MAX_BLOCK], ed[FL_MAX_BLOCK];
    for (int32_t i = 0; i < n; i++) {
        toks[i] = q->fixed[from + i] ? q->x[from + i] : -1;
        fr[i] = q->fresh[from + i];
        ed[i] = q->edited[from + i];
    }
    fl_event ev = {0};
    ev.type = FL_EV_DRAFT;
    ev.id = q->id;
    ev.block = start / B - q->L / B;
    ev.step = q->block_steps[start / B];
    ev.n = n;
    ev.tokens = toks;
    ev.fresh = fr;
    ev.edited = ed;
    q->sink(&ev, q->ctx);
}

/* Commits the first running block (fully decided): emits its text, detects the end.
 * Returns true when the sequence is finished. */
static bool commit_block(fl_sched *s, seq *q)
{
    int32_t B = s->B, start = q->run_start;
    int32_t from = start < q->L ? q->L : start;
    size_t text0 = q->text.len;
    int32_t ids0 = q->n_ids;
    bool end = false;
    for (int32_t p = from; p < start + B; p++) {
        if (p >= q->limit) {
            end = true;
            q->finish = FL_FINISH_LENGTH;
            break;
        }
        int32_t t = q->x[p];
        if (q->cons) {
            q->cstate = fl_cons_step(q->cons, q->cstate, t, s->m->cfg.eos_ids, s->m->cfg.n_eos);
            if (q->cstate == -1) { /* the decoder chose only tokens it accepts: never */
                q->finish = FL_FINISH_ERROR;
                q->fail = "the reply left its output constraint";
                return true;
            }
        }
        if (is_eos(s, t)) {
            end = true;
            q->finish = FL_FINISH_STOP;
            break;
        }
        if (q->lp_on) {
            size_t k = (size_t)q->n_top, i = (size_t)q->n_ids;
            q->ids_lp[i] = q->plp[p];
            if (k) {
                memcpy(q->ids_top + i * k, q->ptop + (size_t)p * k, sizeof(int32_t) * k);
                memcpy(q->ids_top_lp + i * k, q->ptop_lp + (size_t)p * k, sizeof(float) * k);
            }
        }
        q->ids[q->n_ids++] = t;
        if (s->m->tok)
            fl_detok_push(&q->detok, t, &q->text);
        if (q->lp_on)
            q->ids_end[q->n_ids - 1] = q->text.len;
        if (is_stop_id(q, t)) { /* it ends the reply, after taking its place in it */
            end = true;
            q->finish = FL_FINISH_STOP;
            q->stop_token = t;
            break;
        }
    }
    if (q->text.err) { /* no commit with a hole in its text: the reply fails instead */
        q->finish = FL_FINISH_ERROR;
        q->fail = "out of memory for the reply text";
        return true;
    }
    if (!end && q->limit <= start + B) {
        end = true;
        q->finish = FL_FINISH_LENGTH;
    }
    size_t full = q->text.len;
    /* stop strings: search the new text, and the tail before it they may straddle; the reply
       ends before the first one found (at its end with include_stop_str) */
    for (int i = 0; i < q->n_stop && q->text.len; i++) {
        size_t sl = strlen(q->stop[i]);
        size_t lo = text0 > sl ? text0 - sl + 1 : 0;
        if (lo > q->text.len) /* an earlier string cut the text before where this one's new
                                 occurrences could start: nothing to search (and the length
                                 below would wrap around) */
            continue;
        const char *hit = memmem(q->text.data + lo, q->text.len - lo, q->stop[i], sl);
        if (hit) {
            q->text.len = (size_t)(hit - q->text.data) + (q->include_stop_str ? sl : 0);
            q->text.data[q->text.len] = 0;
            end = true;
            q->finish = FL_FINISH_STOP;
            /* the last that cuts is the one the text ends at (later ones search the cut text) */
            q->stop_string = i;
            q->stop_token = -1;
        }
    }
    if (q->text.len < text0) { /* a stop string began in an earlier block: nothing new */
        text0 = q->text.len;
    }
    int32_t lps0 = q->n_lps;
    q->lp_cut |= q->text.len < full;
    if (q->lp_on)
        q->n_lps = lp_count(q);
    q->st.blocks++;
    if (q->sink) {
        fl_event ev = {0};
        ev.type = FL_EV_COMMIT;
        ev.id = q->id;
        ev.block = start / B - q->L / B;
        ev.text = q->text.data ? q->text.data + text0 : "";
        ev.text_len = q->text.len - text0;
        ev.ids = q->ids + ids0;
        ev.n_ids = q->n_ids - ids0;
        if (q->lp_on) {
            size_t k = (size_t)q->n_top;
            ev.lps = q->ids_lp + ids0;
            ev.top_ids = k ? q->ids_top + (size_t)ids0 * k : NULL;
            ev.top_lps = k ? q->ids_top_lp + (size_t)ids0 * k : NULL;
            ev.n_top = q->n_top;
            ev.n_lps = q->n_lps > lps0 ? q->n_lps - lps0 : 0;
        }
        q->sink(&ev, q->ctx);
    }
    q->run_start += B;
    q->n_run--;
    q->post = 0;
    q->settled = false;
    return end;
}

/* After a step's commits: finished blocks are committed in order, new blocks start. Returns
 * true when the sequence finished. */
static bool advance(fl_sched *s, seq *q)
{
    int32_t B = s->B;
    while (q->n_run > 0 && block_ready(s, q, q->run_start)) {
        if (commit_block(s, q)) {
            q->ended = true;
            return true;
        }
    }
    int32_t max_run = q->dec.pipeline ? q->dec.max_blocks : 1;
    for (;;) {
        int32_t next = q->run_start + q->n_run * B;
        if (q->n_run >= max_run || next >= q->limit || next + B > q->cap)
            break;
        if (q->n_run > 0 && !(q->dec.pipeline && block_ratio(s, q, next - B) >= q->dec.tau_add))
            break;
        /* a block started after its predecessor is final takes its first token from the
           predecessor's store forward (shifted logits); a pipelined one predicts it */
        if (q->n_run == 0 && s->m->cfg.logits_shift)
            q->ar_pos = next;
        q->n_run++;
    }
    if (q->n_run == 0) {
        q->finish = FL_FINISH_LENGTH;
        return true;
    }
    return false;
}

/* Applies one forward's outputs to a sequence. Returns true when it finished. */
static bool apply(fl_sched *s, seq *q, const fl_segment *sg, const fl_tok_out *out,
                  const float *logits)
{
    int32_t B = s->B;
    const fl_config *c = &s->m->cfg;
    q->st.forwards++;
    /* stored blocks: chain keys, hand pages to the persister */
    for (int32_t p = sg->pos0; p < sg->pos0 + sg->n_store; p += B) {
        int32_t b = p / B;
        fl_page_key parent = b ? q->keys[b - 1] : (fl_page_key){0, 0};
        q->keys[b] = fl_page_key_chain(s->o.model_id, parent, q->x + p, B);
        fl_kvpool_register(&s->pool, q->pages[b], (fl_kvpool_key){q->keys[b].hi, q->keys[b].lo});
        fl_persist_job job;
        job.page = q->pages[b];
        job.key = q->keys[b];
        job.n_tokens = B;
        memcpy(job.tokens, q->x + p, sizeof(int32_t) * (size_t)B);
        fl_kvpool_ref(&s->pool, job.page); /* the persister's hold, dropped at reap */
        s->st.persist_wait_ms += fl_persist_submit(s->persist, &job);
    }
    if (sg->n_store) {
        q->n_cached += sg->n_store;
        int32_t last = sg->pos0 + sg->n_store - 1;
        if (c->logits_shift && sg->out_from <= sg->n_store - 1 && q->n_cached == q->run_start) {
            q->carry = out[last - sg->pos0];
            q->carry_top1 = q->carry;
            q->carry_pos = last;
            if (q->carry_lg && logits) /* constrained or with log probabilities */
                memcpy(q->carry_lg, logits + (size_t)(last - sg->pos0) * (size_t)c->vocab,
                       sizeof(float) * (size_t)c->vocab);
            q->carry_has_lg = q->carry_lg && logits;
            if (logits && q->dec.temperature > 0 && !q->cons)
                fl_sample(&q->dec, logits + (size_t)(last - sg->pos0) * (size_t)c->vocab, c->vocab,
                          &q->rng, s->sample_tmp, &q->carry);
        }
    }
    bool ar = false;
    if (q->ar_pos >= 0 && q->ar_pos == q->run_start && q->n_cached == q->run_start &&
        sg->n_store && sg->out_from <= sg->n_store - 1) {
        /* Fast-dLLM v2: the argmax of the store forward's last row is the block's first token,
           committed at once (greedy even when sampling, as upstream does) */
        int32_t p = q->ar_pos;
        memset(q->fresh + q->run_start, 0, (size_t)B);
        memset(q->edited + q->run_start, 0, (size_t)B);
        q->x[p] = out[p - 1 - sg->pos0].token;
        if (q->cons) { /* the best first token the constraint allows */
            fl_cpos cp = {-1, logits ? logits + (size_t)(p - 1 - sg->pos0) * (size_t)c->vocab : NULL,
                          NAN, -1};
            int32_t t;
            float pr;
            if (!s->cdp && !(s->cdp = fl_cdp_new()))
                cp.logits = NULL;
            if (!cp.logits || fl_cons_best(q->cons, s->cdp, q->cstate, &cp, 1, q->limit - p,
                                           c->vocab, c->eos_ids, c->n_eos, &q->dec, &q->rng, &t,
                                           &pr)) {
                q->finish = FL_FINISH_ERROR;
                q->fail = "out of memory for constrained decoding";
                return true;
            }
            if (t != q->x[p])
                q->st.constrained++;
            q->x[p] = t;
        }
        q->fixed[p] = 1;
        q->fresh[p] = 1;
        if (p < q->limit)
            q->produced++;
        if (lp_failed(s, q, sg, out, logits, p))
            return true;
        q->ar_pos = -1;
        emit_draft(s, q, q->run_start);
        ar = true;
    }
    bool denoised = sg->n > sg->n_store;
    if (!denoised) {
        q->st.store_forwards++;
        return ar ? advance(s, q) : false;
    }
    q->st.decode_forwards++;
    if (q->t_first_decode == 0)
        q->t_first_decode = fl_now_ms();
    q->state = FL_SEQ_DECODING;
    /* activity of each running block, from the state before this step */
    bool semi[FL_MAX_RUN_BLOCKS] = {0};
    for (int32_t i = 1; i < q->n_run && i < FL_MAX_RUN_BLOCKS; i++)
        semi[i] = block_ratio(s, q, q->run_start + (i - 1) * B) < q->dec.tau_act;
    bool editing = q->dec.edit_threshold != FL_EDIT_OFF;
    fl_tok_out pred[FL_MAX_BLOCK];
    uint8_t elig[FL_MAX_BLOCK], sel[FL_MAX_BLOCK], edit[FL_MAX_BLOCK], changed[FL_MAX_BLOCK] = {0};
    int32_t etok[FL_MAX_BLOCK];
    memset(q->fresh + q->run_start, 0, (size_t)(q->n_run * B));
    memset(q->edited + q->run_start, 0, (size_t)(q->n_run * B));
    if (q->cons && (!logits || constrain_window(s, q, sg, out, logits))) {
        q->finish = FL_FINISH_ERROR;
        q->fail = logits ? "no reply within the output constraint fits (internal error)"
                         : "out of memory for constrained decoding";
        return true;
    }
    for (int32_t i = 0; i < q->n_run; i++) {
        int32_t start = q->run_start + i * B;
        /* Fast-dLLM v2 sub-blocks: only the first sub-block that still has masks */
        int32_t sub = c->sub_block > 0 && c->sub_block < B ? c->sub_block : B;
        int32_t sub_lo = start, sub_hi = start + B;
        for (int32_t t = start; t < start + B; t += sub) {
            bool has_mask = false;
            for (int32_t p = t; p < t + sub; p++)
                has_mask |= !q->fixed[p];
            if (has_mask) {
                sub_lo = t;
                sub_hi = t + sub;
                break;
            }
        }
        int32_t any = 0;
        bool masked = false; /* the block has a mask before this step */
        for (int32_t j = 0; j < B; j++) {
            int32_t p = start + j;
            elig[j] = 0;
            masked |= !q->fixed[p];
            if (q->fixed[p] || p < sub_lo || p >= sub_hi)
                continue;
            const fl_tok_out *pr = pred_at(s, q, sg, out, p);
            if (!pr)
                continue;
            pred[j] = *pr;
            if (logits && q->dec.temperature > 0 && !q->cons) {
                int32_t src = p - c->logits_shift;
                if (src >= sg->pos0)
                    fl_sample(&q->dec, logits + (size_t)(src - sg->pos0) * (size_t)c->vocab,
                              c->vocab, &q->rng, s->sample_tmp, &pred[j]);
            }
            elig[j] = 1;
            any = 1;
        }
        /* token editing, on the state before this step's unmasking (a position unmasked now
           is not edited in the same step): a decided reply position whose token here differs
           and is above edit_threshold is rewritten. Never into the mask token: that would
           re-mask the position, which this engine does not do. Only the first running block
           edits (fl_decode_opts_check refuses pipelining with editing). */
        int n_edit = 0;
        bool edits_here = editing && i == 0;
        for (int32_t j = 0; edits_here && j < B; j++) {
            int32_t p = start + j;
            edit[j] = 0;
            if (!q->fixed[p] || p < q->L)
                continue;
            const fl_tok_out *pr = pred_at(s, q, sg, out, p);
            if (!pr)
                continue;
            fl_tok_out cand = *pr;
            if (logits && q->dec.temperature > 0) {
                int32_t src = p - c->logits_shift;
                if (src >= sg->pos0)
                    fl_sample(&q->dec, logits + (size_t)(src - sg->pos0) * (size_t)c->vocab,
                              c->vocab, &q->rng, s->sample_tmp, &cand);
            }
            if (cand.token != q->x[p] && cand.prob > q->dec.edit_threshold &&
                cand.token != s->mask_id) {
                edit[j] = 1;
                etok[j] = cand.token;
                n_edit++;
            }
        }
        bool post = edits_here && !masked; /* a post step: the block had no mask left */
        if (!any && !post && !n_edit)
            continue;
        q->block_steps[start / B]++;
        int nsel = 0;
        for (int32_t j = 0; j < B && q->cons; j++) { /* the constraint's assignment */
            int32_t p = start + j;
            changed[j] = 0;
            if (!elig[j] || p < q->L || p >= q->limit)
                continue;
            changed[j] = pred[j].token != q->cprev[p];
            pred[j].token = q->cprev[p];
            pred[j].prob = q->cprob[p];
        }
        if (any) {
            fl_decode_opts d = q->dec;
            if (d.steps > 0 && (d.policy == FL_POLICY_STATIC || d.policy == FL_POLICY_DYNAMIC))
                d.k = fl_steps_quota(d.steps, q->max_tokens, B, q->block_steps[start / B] - 1);
            nsel = fl_policy_select(&d, pred, elig, B, i < FL_MAX_RUN_BLOCKS && semi[i], sel);
        }
        for (int32_t j = 0; j < B && nsel; j++)
            if (sel[j]) {
                q->x[start + j] = pred[j].token;
                q->fixed[start + j] = 1;
                q->fresh[start + j] = 1;
                if (start + j < q->limit)
                    q->produced++;
                if (q->cons && changed[j] && start + j < q->limit)
                    q->st.constrained++;
                if (lp_failed(s, q, sg, out, logits, start + j))
                    return true;
            }
        for (int32_t j = 0; j < B && n_edit; j++)
            if (edit[j]) {
                q->x[start + j] = etok[j];
                q->edited[start + j] = 1;
                if (lp_failed(s, q, sg, out, logits, start + j))
                    return true;
            }
        q->st.edits += n_edit;
        if (edits_here) {
            /* the authors' loop: a step that starts with no mask is post step k; the block
               ends after one that edits nothing, or after post step max_post_steps */
            if (post) {
                q->post++;
                q->st.post_steps++;
                if (!n_edit || q->post >= q->dec.max_post_steps)
                    q->settled = true;
            } else if (q->dec.max_post_steps == 0) {
                bool left = false;
                for (int32_t p = start; p < start + B && !left; p++)
                    left = !q->fixed[p];
                q->settled = !left;
            }
        }
        if (nsel || n_edit || q->every_step)
            emit_draft(s, q, start);
    }
    return advance(s, q);
}

static void reap(fl_sched *s)
{
    int n = fl_persist_reap(s->persist, s->reap, s->pool.n_pages + 1);
    for (int i = 0; i < n; i++)
        fl_kvpool_unref(&s->pool, s->reap[i]);
}

/* Penalties: the distinct tokens of the reply positions decided so far (the state this
 * forward saw) into pen_ids, ascending, each with its presence and frequency penalty,
 * -(presence + frequency * count), in pen. Returns how many. */
static int32_t penalties(const fl_sched *s, seq *q)
{
    int32_t n = 0, end = q->run_start + q->n_run * s->B;
    for (int32_t p = q->L; p < end && p < q->limit; p++)
        if (q->fixed[p])
            q->pen_ids[n++] = q->x[p];
    int32_t d = distinct(q->pen_ids, n, q->pen);
    for (int32_t i = 0; i < d; i++)
        q->pen[i] = -(q->pres_pen + q->freq_pen * q->pen[i]);
    return d;
}

/* Repetition: the prompt's distinct tokens and the reply's (penalties' pen_ids, n of them),
 * both ascending, merged into rep_ids without repeats. Returns how many. */
static int32_t repeated(seq *q, int32_t n)
{
    int32_t i = 0, j = 0, d = 0;
    const int32_t *a = q->rep_prompt, *b = q->pen_ids;
    while (i < q->n_rep_prompt || j < n) {
        int32_t t = j >= n || (i < q->n_rep_prompt && a[i] <= b[j]) ? a[i] : b[j];
        i += i < q->n_rep_prompt && a[i] == t;
        j += j < n && b[j] == t;
        q->rep_ids[d++] = t;
    }
    return d;
}

/* Whether the sequence's rows are rewritten before apply reads them (bias_rows). */
static bool rewrites(const seq *q)
{
    return q->n_bias || q->min_tokens || q->ignore_eos || q->pen_ids;
}

/* Logit bias, penalties and min_tokens / ignore_eos, in vLLM's order: adds the sequence's
 * biases to each wanted row of its segment, applies the repetition penalty, adds the presence
 * and frequency penalties, and puts -inf on the end tokens' logits (and the stop token ids')
 * in a row that decides a reply position before min_tokens (the end tokens' in every row with
 * ignore_eos); makes the row's prediction the rewritten row's (fl_row_bias, fl_row_rep),
 * before apply reads either. Returns true (the sequence failed) when the forward has no
 * logits (they could not be allocated) but rows are wanted. */
static bool bias_rows(const fl_sched *s, seq *q, const fl_segment *sg, fl_tok_out *out,
                      float *logits)
{
    const fl_config *c = &s->m->cfg;
    int32_t V = c->vocab;
    enum { NE = sizeof c->eos_ids / sizeof c->eos_ids[0] };
    float ban[NE + FL_MAX_STOP_TOKEN_IDS];
    int32_t eos[NE + FL_MAX_STOP_TOKEN_IDS];
    for (int j = 0; j < c->n_eos + q->n_stop_ids; j++) {
        ban[j] = -INFINITY;
        eos[j] = j < c->n_eos ? c->eos_ids[j] : q->stop_ids[j - c->n_eos];
    }
    int32_t n_dec = q->pen_ids ? penalties(s, q) : 0;
    int32_t n_pen = q->pres_pen != 0 || q->freq_pen != 0 ? n_dec : 0;
    int32_t n_rep = q->rep_ids ? repeated(q, n_dec) : 0;
    for (int32_t i = sg->out_from; i < sg->n; i++) {
        if (!fl_seg_wants(sg, i))
            continue;
        if (!logits) {
            q->finish = FL_FINISH_ERROR;
            q->fail = "out of memory for the logit bias";
            return true;
        }
        float *row = logits + (size_t)i * (size_t)V;
        if (q->n_bias)
            fl_row_bias(row, V, q->bias_ids, q->bias, q->n_bias, &out[i]);
        if (n_rep)
            fl_row_rep(row, V, q->rep_ids, n_rep, q->rep_pen, &out[i]);
        if (n_pen)
            fl_row_bias(row, V, q->pen_ids, q->pen, n_pen, &out[i]);
        int32_t p = sg->pos0 + i + c->logits_shift; /* the position this row predicts */
        if (p < q->L + q->min_tokens)
            fl_row_bias(row, V, eos, ban, c->n_eos + q->n_stop_ids, &out[i]);
        else if (q->ignore_eos)
            fl_row_bias(row, V, eos, ban, c->n_eos, &out[i]);
    }
    return false;
}

int fl_sched_step(fl_sched *s, fl_err *e)
{
    reap(s);
    admit(s);
    if (!s->running)
        return 0;
    int32_t used = 0, nseg = 0;
    bool want_logits = false;
    for (seq *q = s->running; q && nseg < s->o.max_seqs; q = q->next) {
        fl_segment *sg = &s->segs[nseg];
        int32_t n = plan(s, q, s->o.max_batch_tokens - used, sg);
        if (!n)
            continue;
        sg->want = NULL;
        if (!s->o.all_outputs) {
            plan_want(s, q, sg, s->want + used);
            sg->want = s->want + used;
        }
        for (int32_t i = sg->out_from; i < n; i++)
            s->st.out_rows += fl_seg_wants(sg, i);
        memcpy(s->tokens + used, q->x + sg->pos0, sizeof(int32_t) * (size_t)n);
        used += n;
        s->seg_seq[nseg++] = q;
        if ((q->dec.temperature > 0 || q->cons || q->lp_on || rewrites(q)) &&
            sg->out_from < sg->n)
            want_logits = true;
    }
    if (!nseg)
        return 0;
    /* round robin: the first sequence goes to the back so no one is always planned last */
    if (s->running->next) {
        seq *h = s->running;
        s->running = h->next;
        seq **pp = &s->running;
        while (*pp)
            pp = &(*pp)->next;
        *pp = h;
        h->next = NULL;
    }
    if (want_logits && !s->logits) {
        size_t V = (size_t)s->m->cfg.vocab;
        s->logits = malloc(sizeof(float) * V * (size_t)s->o.max_batch_tokens);
        s->sample_tmp = malloc(sizeof(float) * V);
        if (!s->logits || !s->sample_tmp)
            want_logits = false; /* fall back to greedy rather than fail */
    }
    fl_batch bt = {s->tokens, used, s->segs, nseg};
    int rc = fl_forward(s->b, &bt, s->out, want_logits ? s->logits : NULL, e);
    s->st.forwards++;
    s->st.tokens_forwarded += used;
    if (rc) {
        /* a backend failure fails every sequence in the batch with its message */
        for (int i = 0; i < nseg; i++)
            seq_retire(s, s->seg_seq[i], FL_FINISH_ERROR, e ? e->msg : "forward failed");
        return rc;
    }
    int32_t off = 0;
    for (int i = 0; i < nseg; i++) {
        seq *q = s->seg_seq[i];
        const fl_segment *sg = &s->segs[i];
        float *lg = want_logits ? s->logits + (size_t)off * (size_t)s->m->cfg.vocab : NULL;
        int64_t before = q->n_ids;
        bool fin = rewrites(q) && bias_rows(s, q, sg, s->out + off, lg);
        if (!fin)
            fin = apply(s, q, sg, s->out + off, lg);
        s->st.reply_tokens += q->n_ids - before;
        off += sg->n;
        if (fin)
            seq_retire(s, q, q->finish, q->fail);
    }
    return 1;
}

int fl_sched_reap(fl_sched *s)
{
    reap(s);
    return (int)fl_persist_in_flight(s->persist);
}

void fl_sched_get_stats(const fl_sched *s, fl_sched_stats *st)
{
    *st = s->st;
    st->running = s->n_running;
    st->queued = s->n_queued;
    st->pages_used = fl_kvpool_used(&s->pool);
    st->pages_free = s->pool.n_free;
    st->pages_cached = s->pool.n_cached;
    st->pages_evicted = s->pool.evictions;
    st->pages_persisted = fl_persist_done_count(s->persist);
}

const fl_kvpool *fl_sched_pool(const fl_sched *s) { return &s->pool; }

void fl_sched_flush(fl_sched *s)
{
    fl_persist_flush(s->persist);
    reap(s);
}

void fl_sched_destroy(fl_sched *s)
{
    if (!s)
        return;
    while (s->running)
        seq_retire(s, s->running, FL_FINISH_CANCELLED, NULL);
    while (s->queued)
        seq_retire(s, s->queued, FL_FINISH_CANCELLED, NULL);
    if (s->persist) {
        fl_persist_flush(s->persist);
        reap(s);
        fl_persist_destroy(s->persist);
    }
    fl_kvpool_free(&s->pool);
    free(s->tokens);
    free(s->segs);
    free(s->seg_seq);
    free(s->out);
    free(s->want);
    free(s->logits);
    free(s->sample_tmp);
    fl_cdp_free(s->cdp);
    free(s->reap);
    free(s);
}
