/* serve_group.c: fan-out groups (serve_group.h): a request with "parallel" is a group that owns
 * branch requests and has no engine work of its own; a skeleton/auto group first runs an
 * outline stage. The group is the owner of its branches and its outline stage (their ops are
 * here): a branch's frames go on to the group's own owner, and a branch's end is the group's
 * bookkeeping (its result, the next branch, the group's end). */
#include <stdlib.h>
#include <string.h>

#include "outline.h"
#include "serve.h"
#include "serve_group.h"
#include "serve_request.h"

static const srv_owner_ops group_branch_ops, group_outline_ops;

static void group_link(srv_req *g)
{
    srv *s = g->s;
    g->g_prev = NULL;
    g->g_next = s->groups;
    if (s->groups)
        s->groups->g_prev = g;
    s->groups = g;
    s->n_groups++;
}

static void group_free(srv_req *g)
{
    srv *s = g->s;
    if (g->g_prev)
        g->g_prev->g_next = g->g_next;
    else
        s->groups = g->g_next;
    if (g->g_next)
        g->g_next->g_prev = g->g_prev;
    s->n_groups--;
    s->rebalance = true;
    free(g->kids);
    json_decref(g->seg_results);
    srv_chat_free(&g->chat);
    free(g);
}

/* Starts the next waiting branch of a group (on the loop; tokenizing first). A group that was
   cancelled still starts its branches, cancelled: they end through the normal path. */
static void group_start_next(srv_req *g)
{
    if (g->n_started >= g->n_kids)
        return;
    srv_req *k = g->kids[g->n_started++];
    srv *s = k->s;
    k->t_start = srv_now_ms(s);
    k->cancelled = g->cancelled;
    srv_req_link(k);
    if (srv_req_tokenize(k))
        srv_req_reject(k, SRV_E_INTERNAL, "cannot queue the request");
}

/* After its last branch: the group's result goes to its owner and the group is freed. */
static void group_finish(srv_req *g)
{
    if (g->owner)
        g->ops->group_done(g->owner, g);
    group_free(g);
}

/* How many branches group g may run at once: its max_branches, and no more than its fair share
   of the engine's sequences (--max-seqs) among the client requests now live (plain requests and
   groups: each gets an equal share, at least one), so that a wide fan-out does not queue other
   sessions behind all of its branches. A group over its share (another request arrived after its
   branches started) runs them on and starts no new one until it is under it again. */
static int group_limit(const srv_req *g)
{
    const srv *s = g->s;
    int clients = s->n_groups;
    for (const srv_req *r = s->reqs; r; r = r->s_next)
        clients += r->parent == NULL;
    int share = s->cfg->max_seqs / (clients > 0 ? clients : 1);
    if (share < 1)
        share = 1;
    int lim = g->chat.max_branches > 0 && g->chat.max_branches < g->n_kids ? g->chat.max_branches : g->n_kids;
    return lim < share ? lim : share;
}

/* Starts g's waiting branches while it is under its limit. A branch that ends while starting
   (rejected) is counted; if every branch has ended, the group ends here. */
static void group_top_up(srv_req *g)
{
    if (g->topping)
        return;
    g->topping = true;
    int lim = group_limit(g); /* starting branches does not change it: they are not clients */
    while (g->n_started < g->n_kids && g->n_started - g->n_ended < lim)
        group_start_next(g);
    g->topping = false;
    if (g->n_ended == g->n_kids)
        group_finish(g);
}

/* A request ended: every group may now have a larger share. */
void srv_groups_rebalance(srv *s)
{
    s->rebalance = false;
    for (srv_req *g = s->groups, *next; g; g = next) {
        next = g->g_next;
        if (g->kids && g->n_started < g->n_kids && !g->topping)
            group_top_up(g);
    }
}

/* A branch ended (done, rejected or cancelled before the engine): note its result, start the
   next waiting branch, and end the group after its last branch. */
static void group_branch_ended(srv_req *k, const srv_req_end *e)
{
    srv_req *g = k->parent;
    const char *finish = e->finish, *err_code = e->code;
    const fl_seq_stats *st = e->stats;
    int32_t n_ids = e->n_ids;
    json_t *o = json_object();
    json_object_set_new(o, "segment", json_integer(k->segment));
    json_object_set_new(o, "finish", json_string(finish));
    if (!strcmp(finish, "stop") && (e->stop_string >= 0 || e->stop_token >= 0))
        json_object_set_new(o, "stop_reason", srv_stop_reason(k, e->stop_string, e->stop_token));
    if (err_code)
        json_object_set_new(o, "error", json_string(err_code));
    if (st) {
        json_t *u = json_object();
        json_object_set_new(u, "prompt_tokens", json_integer(st->prompt_tokens));
        json_object_set_new(u, "completion_tokens", json_integer(n_ids));
        json_object_set_new(u, "cached_tokens", json_integer(st->cached_tokens));
        if (k->reasoning_tokens >= 0 && (!strcmp(finish, "stop") || !strcmp(finish, "length")))
            json_object_set_new(u, "reasoning_tokens", json_integer(k->reasoning_tokens));
        json_object_set_new(o, "usage", u);
    }
    json_array_set_new(g->seg_results, (size_t)k->segment, o);
    if (k->group_text) /* an HTTP owner answers with every branch's text at the end */
        json_object_set_new(o, "text", json_string(k->group_text));
    if (k->group_reasoning)
        json_object_set_new(o, "reasoning", json_string(k->group_reasoning));
    if (k->group_logprobs)
        json_object_set(o, "logprobs", k->group_logprobs);
    if (k->group_calls && json_array_size(k->group_calls))
        json_object_set(o, "tool_calls", k->group_calls);
    if (k->group_lp_lost) /* the answer cannot be whole: it fails instead */
        json_object_set_new(o, "error", json_string(SRV_E_INTERNAL));
    g->any_error |= err_code != NULL || k->group_lp_lost;
    g->kids[k->segment] = NULL;
    g->n_ended++;
    if (k->t_first && (!g->t_first || k->t_first < g->t_first))
        g->t_first = k->t_first;
    if (g->topping) /* ended as it started: group_top_up goes on, and ends the group */
        return;
    if (g->n_ended == g->n_kids) {
        group_finish(g);
        return;
    }
    group_top_up(g);
}

long long srv_group_reasoning(const srv_req *g)
{
    long long sum = -1;
    size_t i;
    json_t *v;
    json_array_foreach(g->seg_results, i, v)
    {
        json_t *n = json_object_get(json_object_get(v, "usage"), "reasoning_tokens");
        if (json_is_integer(n))
            sum = (sum < 0 ? 0 : sum) + json_integer_value(n);
    }
    return sum;
}

void srv_group_totals(const srv_req *g, long long *prompt, long long *completion, long long *cached)
{
    *prompt = *completion = *cached = 0;
    size_t i;
    json_t *v;
    json_array_foreach(g->seg_results, i, v)
    {
        json_t *u = json_object_get(v, "usage");
        *prompt += json_integer_value(json_object_get(u, "prompt_tokens"));
        *completion += json_integer_value(json_object_get(u, "completion_tokens"));
        *cached += json_integer_value(json_object_get(u, "cached_tokens"));
    }
}

/* A branch request of group g: messages base[0..n_base) plus, when extra is set, one more user
   message; the group's sampling options and response format. Samples: branch k has prompt
   k / n of a text completion's (raw) and the group's seed + k % n, so that choice j of a
   prompt is what that prompt alone gives with seed + j. NULL when out of memory. */
static srv_req *branch_new(srv_req *g, const fl_chat_msg *base, size_t n_base, const char *extra,
                           int segment)
{
    srv *s = g->s;
    srv_req *k = calloc(1, sizeof *k);
    if (!k)
        return NULL;
    k->s = s;
    k->ops = &group_branch_ops;
    k->owner = g;
    k->serial = ++s->next_serial;
    k->parent = g;
    k->segment = segment;
    k->work.data = k;
    srv_chat *c = &k->chat;
    c->id = strdup(g->chat.id);
    c->n_msgs = n_base + (extra ? 1 : 0);
    c->msgs = calloc(c->n_msgs ? c->n_msgs : 1, sizeof *c->msgs);
    c->max_tokens = g->chat.max_tokens;
    c->dec = g->chat.dec;
    c->every_step = g->chat.every_step;
    c->enable_thinking = g->chat.enable_thinking;
    c->logprobs = g->chat.logprobs;
    c->top_logprobs = g->chat.top_logprobs;
    c->min_tokens = g->chat.min_tokens;
    c->ignore_eos = g->chat.ignore_eos;
    c->presence_penalty = g->chat.presence_penalty;
    c->frequency_penalty = g->chat.frequency_penalty;
    c->repetition_penalty = g->chat.repetition_penalty;
    c->include_stop_str = g->chat.include_stop_str;
    const srv_chat *gc = &g->chat;
    int per = gc->n_choices > 0 ? gc->n_choices : 1;
    if (gc->parallel == SRV_PAR_SAMPLES && segment > 0)
        c->dec.seed += (uint64_t)(segment % per);
    c->stop = g->chat.n_stop ? calloc((size_t)g->chat.n_stop, sizeof(char *)) : NULL;
    c->raw = gc->raw;
    bool oom = false;
    if (gc->n_prompts && segment >= 0) {
        const srv_prompt *p = &gc->prompts[(segment / per) % gc->n_prompts];
        srv_prompt *q = c->prompts = calloc(1, sizeof *c->prompts);
        c->n_prompts = q ? 1 : 0;
        if (q && p->text)
            q->len = (q->text = strndup(p->text, p->len)) ? p->len : 0;
        if (q && p->ids && (q->ids = malloc(p->n_ids * sizeof(int32_t)))) {
            memcpy(q->ids, p->ids, p->n_ids * sizeof(int32_t));
            q->n_ids = p->n_ids;
        }
        oom = !q || (p->text && !q->text) || (p->ids && !q->ids);
    }
    c->format = gc->format;
    c->format_param = gc->format_param;
    c->schema = gc->schema ? strdup(gc->schema) : NULL;
    /* tools (samples only: a fan-out refuses them), and the base messages' calls */
    c->tool_choice = gc->tool_choice;
    c->single_call = gc->single_call;
    c->tools = gc->tools ? strdup(gc->tools) : NULL;
    c->tool_schema = gc->tool_schema ? strdup(gc->tool_schema) : NULL;
    c->tool_msgs = gc->tool_msgs;
    oom |= (gc->tools && !c->tools) || (gc->tool_schema && !c->tool_schema);
    if (gc->calls && n_base <= gc->n_calls && (c->calls = calloc(c->n_msgs ? c->n_msgs : 1, sizeof(char *)))) {
        c->n_calls = c->n_msgs;
        for (size_t j = 0; j < n_base; j++)
            oom |= gc->calls[j] && !(c->calls[j] = strdup(gc->calls[j]));
    } else {
        oom |= gc->calls != NULL;
    }
    srv_tools_init(&k->tools, c->tool_choice != SRV_TOOL_NONE, k->serial);
    k->tools.max_calls = c->single_call ? 1 : 0;
    if (gc->n_bias) {
        c->bias_ids = malloc(sizeof(int32_t) * (size_t)gc->n_bias);
        c->bias = malloc(sizeof(float) * (size_t)gc->n_bias);
        if (c->bias_ids && c->bias) {
            memcpy(c->bias_ids, gc->bias_ids, sizeof(int32_t) * (size_t)gc->n_bias);
            memcpy(c->bias, gc->bias, sizeof(float) * (size_t)gc->n_bias);
            c->n_bias = gc->n_bias;
        }
        oom |= c->n_bias != gc->n_bias;
    }
    if (gc->n_stop_ids) {
        c->stop_ids = malloc(sizeof(int32_t) * (size_t)gc->n_stop_ids);
        if (c->stop_ids) {
            memcpy(c->stop_ids, gc->stop_ids, sizeof(int32_t) * (size_t)gc->n_stop_ids);
            c->n_stop_ids = gc->n_stop_ids;
        }
        oom |= c->n_stop_ids != gc->n_stop_ids;
    }
    oom |= !c->id || !c->msgs || (g->chat.n_stop && !c->stop) || (gc->schema && !c->schema);
    for (size_t j = 0; !oom && j < c->n_msgs; j++) {
        bool last = j == n_base;
        c->msgs[j].role = strdup(last ? "user" : base[j].role);
        c->msgs[j].content = strdup(last ? extra : base[j].content);
        oom |= !c->msgs[j].role || !c->msgs[j].content;
    }
    for (int j = 0; !oom && j < g->chat.n_stop; j++) {
        oom |= !(c->stop[j] = strdup(g->chat.stop[j]));
        c->n_stop = j + 1;
    }
    if (oom) {
        srv_chat_free(c);
        free(k);
        return NULL;
    }
    return k;
}

/* Gives group g its branches: one per extra[i] (base + extra[i]), or, with extra NULL, one
   branch with base alone; starts max_branches of them. False when out of memory (nothing
   added). */
static bool group_add_branches(srv_req *g, const fl_chat_msg *base, size_t n_base, char **extra, int n)
{
    srv_req **kids = srv_fault(&g->s->faults, SRV_FAULT_BRANCHES) ? NULL : calloc((size_t)n, sizeof *kids);
    if (!kids)
        return false;
    for (int i = 0; i < n; i++) {
        kids[i] = branch_new(g, base, n_base, extra ? extra[i] : NULL, i);
        if (!kids[i]) {
            for (int j = 0; j < i; j++) {
                srv_chat_free(&kids[j]->chat);
                free(kids[j]);
            }
            free(kids);
            return false;
        }
    }
    free(g->kids);
    g->kids = kids;
    g->n_kids = n;
    for (int i = 0; i < n; i++)
        json_array_append_new(g->seg_results, json_null());
    group_top_up(g);
    return true;
}

/* A group that cannot go on before any branch ran: its owner, whichever kind, hears the error
   as for a request refused before the engine took it (and forgets the group), then the group
   is freed. */
static void group_fail(srv_req *g, const char *code, const char *msg)
{
    srv *s = g->s;
    s->m.requests[SRV_OUT_REJECTED]++;
    srv_metrics_error(&s->m, code);
    if (g->owner)
        g->ops->refused(g->owner, g, code, msg);
    char q[160];
    SRV_WARN(&s->log, "event=group_failed req=%s serial=%llu code=%s message=%s",
             srv_log_q(q, sizeof q, g->chat.id), (unsigned long long)g->serial, code,
             srv_log_q(q + 80, 80, msg));
    group_free(g);
}

/* The outline stage of a skeleton/auto request ended: text is what the model wrote (NULL when
   the stage failed or was cancelled). Two or more points: one branch per point (the earlier
   turns plus the point); otherwise the request is decoded plainly, as one branch. */
static void group_outline_done(srv_req *k, const char *text, size_t len)
{
    srv_req *g = k->parent;
    srv *s = g->s;
    g->outline = NULL;
    char *points[SRV_OUTLINE_MAX];
    const char *why = "the outline stage did not finish";
    int n = text && !g->cancelled ? srv_outline_parse(text, len, points, &why) : 0;
    char q[80];
    SRV_INFO(&s->log, "event=outline req=%s points=%d%s%s", srv_log_q(q, sizeof q, g->chat.id), n,
             n ? "" : " fallback=", n ? "" : why);
    if (g->owner && g->ops->outline)
        g->ops->outline(g->owner, g, points, n, n ? NULL : why);
    g->n_outline = n;
    bool ok = n ? group_add_branches(g, g->chat.msgs, g->chat.n_msgs - 1, points, n)
                : group_add_branches(g, g->chat.msgs, g->chat.n_msgs, NULL, 1);
    srv_outline_free(points, n);
    if (!ok) /* no branch will end the group: it fails now */
        group_fail(g, SRV_E_INTERNAL, "out of memory: the request's branches could not be started");
    /* cancelled with its branches: they start cancelled and end the group themselves */
}

/* A branch's owner is its group: what the group's own owner should hear (the branch's frames,
   tagged with its segment) goes on to it while it is here, and the branch's end is the group's
   bookkeeping. */
static void branch_event(void *owner, srv_req *k, const srv_ev *ev)
{
    srv_req *g = owner;
    if (g->owner)
        g->ops->event(g->owner, k, ev);
}

static void branch_refused(void *owner, srv_req *k, const char *code, const char *msg)
{
    srv_req *g = owner;
    if (g->owner)
        g->ops->refused(g->owner, k, code, msg);
}

static void branch_ended(void *owner, srv_req *k, const srv_req_end *e)
{
    (void)owner;
    group_branch_ended(k, e);
}

static bool branch_orphaned(void *owner, const srv_req *k)
{
    (void)k;
    const srv_req *g = owner;
    return !g->owner;
}

static const srv_owner_ops group_branch_ops = {
    .event = branch_event,
    .refused = branch_refused,
    .ended = branch_ended,
    .orphaned = branch_orphaned,
};

/* An outline stage's owner is its group too, but no client hears it: only its text counts. */
static void outline_event(void *owner, srv_req *k, const srv_ev *ev)
{
    (void)owner, (void)k, (void)ev;
}

static void outline_refused(void *owner, srv_req *k, const char *code, const char *msg)
{
    (void)owner, (void)k, (void)code, (void)msg;
}

static void outline_ended(void *owner, srv_req *k, const srv_req_end *e)
{
    (void)owner;
    group_outline_done(k, e->text, e->len);
}

static bool outline_orphaned(void *owner, const srv_req *k)
{
    (void)owner, (void)k;
    return true;
}

static const srv_owner_ops group_outline_ops = {
    .event = outline_event,
    .refused = outline_refused,
    .ended = outline_ended,
    .orphaned = outline_orphaned,
};

/* A request with "parallel": fanout gets one branch per segment (the shared messages plus its
   segment); skeleton and auto first ask the model for an outline of the last user message (an
   outline stage with no owner: its frames are not sent), then branch per point. At most
   max_branches run at once; the engine's prefix cache shares the common prompt blocks between
   them. Takes *chat. */
srv_req *srv_group_start(srv *s, const srv_owner_ops *ops, void *owner, srv_chat *chat,
                            const char **code, char *msg, size_t msglen)
{
    srv_req *g = calloc(1, sizeof *g);
    if (g)
        g->seg_results = json_array();
    if (!g || !g->seg_results) {
        free(g);
        *code = SRV_E_INTERNAL;
        snprintf(msg, msglen, "out of memory");
        return NULL;
    }
    srv_req_init(g, s, ops, owner, chat);
    group_link(g); /* every group_free from here on unlinks it */
    g->state = SRV_REQ_RUNNING;
    if (g->chat.parallel == SRV_PAR_FANOUT || g->chat.parallel == SRV_PAR_SAMPLES) {
        bool fan = g->chat.parallel == SRV_PAR_FANOUT;
        if (!group_add_branches(g, g->chat.msgs, g->chat.n_msgs, fan ? g->chat.segments : NULL,
                                srv_chat_branches(&g->chat))) {
            group_free(g);
            *code = SRV_E_INTERNAL;
            snprintf(msg, msglen, "out of memory");
            return NULL;
        }
        return g;
    }
    fl_chat_msg om[2] = {{"system", SRV_OUTLINE_PROMPT}, g->chat.msgs[g->chat.n_msgs - 1]};
    srv_req *k = branch_new(g, om, 2, NULL, -1);
    if (!k) {
        group_free(g);
        *code = SRV_E_INTERNAL;
        snprintf(msg, msglen, "out of memory");
        return NULL;
    }
    k->ops = &group_outline_ops; /* the outline is the server's, not the client's */
    k->chat.max_tokens = 160;
    k->chat.dec.temperature = 0;
    k->chat.enable_thinking = false; /* the outline parser reads numbered lines, not a think block */
    g->outline = k;
    k->t_start = srv_now_ms(s);
    srv_req_link(k);
    if (srv_req_tokenize(k)) {
        srv_req_unlink(k);
        g->outline = NULL;
        srv_chat_free(&k->chat);
        free(k);
        group_free(g);
        *code = SRV_E_INTERNAL;
        snprintf(msg, msglen, "cannot queue the request");
        return NULL;
    }
    return g;
}
