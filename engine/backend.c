/* backend.c: what every backend shares (backend.h). */
#include "backend.h"

#include <stdio.h>
#include <string.h>

static const char *const fl_wformat_names[FL_WEIGHTS_COUNT] = {"auto", "f32", "bf16", "q8",
                                                                    "q4"};
static const char *const fl_kvformat_names[FL_KV_COUNT] = {"auto", "f32", "bf16"};

const char *fl_wformat_name(fl_wformat f)
{
    return f >= 0 && f < FL_WEIGHTS_COUNT ? fl_wformat_names[f] : "?";
}

const char *fl_kvformat_name(fl_kvformat f)
{
    return f >= 0 && f < FL_KV_COUNT ? fl_kvformat_names[f] : "?";
}

/* The index of s in names[0..n), or FL_EINVAL with "must be a, b or c, got 's'". */
static int fl_name_parse(const char *const *names, int n, const char *s, int *out, fl_err *e)
{
    for (int f = 0; s && f < n; f++)
        if (!strcmp(s, names[f])) {
            *out = f;
            return 0;
        }
    char allowed[128] = "";
    for (int f = 0; f < n; f++) {
        size_t k = strlen(allowed);
        snprintf(allowed + k, sizeof allowed - k, "%s%s", f ? (f == n - 1 ? " or " : ", ") : "",
                 names[f]);
    }
    return fl_err_set(e, FL_EINVAL, "must be %s, got '%.40s'", allowed, s ? s : "");
}

int fl_wformat_parse(const char *s, fl_wformat *out, fl_err *e)
{
    int f = 0, rc = fl_name_parse(fl_wformat_names, FL_WEIGHTS_COUNT, s, &f, e);
    if (!rc)
        *out = (fl_wformat)f;
    return rc;
}

int fl_kvformat_parse(const char *s, fl_kvformat *out, fl_err *e)
{
    int f = 0, rc = fl_name_parse(fl_kvformat_names, FL_KV_COUNT, s, &f, e);
    if (!rc)
        *out = (fl_kvformat)f;
    return rc;
}

static bool fl_is_bf16(const fl_tensor *t) { return t && t->dtype == FL_DT_BF16; }

fl_wformat fl_wformat_resolve(fl_wformat f, const fl_model *m)
{
    if (f != FL_WEIGHTS_AUTO)
        return f;
    const fl_tensor *q0 = m && m->weights && m->layers
                              ? (m->layers[0].wq ? m->layers[0].wq : m->layers[0].wqkv)
                              : NULL;
    if (!q0)
        return FL_WEIGHTS_F32;
    if (q0->dtype == FL_DT_I8) /* a quantized directory (the loader checked it) */
        return FL_WEIGHTS_Q8;
    if (q0->dtype == FL_DT_U8)
        return FL_WEIGHTS_Q4;
    if (!fl_is_bf16(m->lm_head) || !fl_is_bf16(m->embed))
        return FL_WEIGHTS_F32;
    /* every projection and expert matrix; the router is held in f32 whatever it is */
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const fl_layer_w *w = &m->layers[l];
        const fl_tensor *mats[] = {w->wq ? w->wq : w->wqkv, w->wk, w->wv, w->wo,
                                   w->w_gate, w->w_up, w->w_down, w->shared.gate,
                                   w->shared.up, w->shared.down};
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++)
            if (mats[i] && !fl_is_bf16(mats[i]))
                return FL_WEIGHTS_F32;
        for (int x = 0; w->experts && x < m->cfg.moe.n_experts; x++)
            if (!fl_is_bf16(w->experts[x].gate) || !fl_is_bf16(w->experts[x].up) ||
                !fl_is_bf16(w->experts[x].down))
                return FL_WEIGHTS_F32;
    }
    return FL_WEIGHTS_BF16;
}

/* The checks every backend runs before a forward (backend.h). */
int fl_batch_check(const fl_backend *b, const fl_config *cf, const fl_batch *bt, fl_err *e)
{
    if (!bt)
        return fl_err_set(e, FL_EINVAL, "forward: no batch");
    if (bt->n_tokens <= 0 || bt->n_tokens > b->max_tokens)
        return fl_err_set(e, FL_EINVAL, "forward: %d tokens (allowed 1..%d, the backend's "
                          "max_tokens)", bt->n_tokens, b->max_tokens);
    if (!bt->tokens)
        return fl_err_set(e, FL_EINVAL, "forward: no token array");
    if (bt->n_segs <= 0 || !bt->segs)
        return fl_err_set(e, FL_EINVAL, "forward: %d segments (need at least 1)", bt->n_segs);
    int64_t total = 0;
    int B = cf->block_size;
    for (int s = 0; s < bt->n_segs; s++) {
        const fl_segment *sg = &bt->segs[s];
        if (sg->n <= 0 || sg->n > bt->n_tokens)
            return fl_err_set(e, FL_EINVAL, "forward: segment %d has %d tokens", s, sg->n);
        total += sg->n;
        if (total > bt->n_tokens)
            return fl_err_set(e, FL_EINVAL, "forward: segments hold more tokens than n_tokens "
                              "(%d)", bt->n_tokens);
        if (sg->pos0 < 0 || (int64_t)sg->pos0 + sg->n > cf->max_pos)
            return fl_err_set(e, FL_EINVAL, "forward: segment %d spans positions %d..%lld, "
                              "past the model's %d", s, sg->pos0,
                              (long long)sg->pos0 + sg->n - 1, cf->max_pos);
        if (sg->n_store < 0 || sg->n_store > sg->n)
            return fl_err_set(e, FL_EINVAL, "forward: segment %d: n_store %d not in 0..%d", s,
                              sg->n_store, sg->n);
        if (sg->out_from < 0 || sg->out_from > sg->n)
            return fl_err_set(e, FL_EINVAL, "forward: segment %d: out_from %d not in 0..%d", s,
                              sg->out_from, sg->n);
        int np = (int)(((int64_t)sg->pos0 + sg->n_store + B - 1) / B);
        if (np > 0 && !sg->pages)
            return fl_err_set(e, FL_EINVAL, "forward: segment %d needs %d pages and has no "
                              "page table", s, np);
        for (int p = 0; p < np; p++)
            if (sg->pages[p] < 0 || sg->pages[p] >= b->n_pages)
                return fl_err_set(e, FL_EINVAL, "forward: segment %d: page %d (block %d) is "
                                  "not in 0..%d", s, sg->pages[p], p, b->n_pages - 1);
    }
    if (total != bt->n_tokens)
        return fl_err_set(e, FL_EINVAL, "forward: segments hold %lld tokens, n_tokens is %d",
                          (long long)total, bt->n_tokens);
    for (int t = 0; t < bt->n_tokens; t++)
        if (bt->tokens[t] < 0 || bt->tokens[t] >= cf->vocab)
            return fl_err_set(e, FL_EINVAL, "forward: token %d at %d is not in 0..%d",
                              bt->tokens[t], t, cf->vocab - 1);
    return 0;
}
