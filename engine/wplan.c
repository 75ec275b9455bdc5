/* wplan.c: the weight plan of backend.h, the one walk over a model's weights that every
 * backend places them by. */
#include <stdlib.h>

#include "backend.h"

typedef struct fl_walk {
    fl_wplan *p;
    fl_bump b;
    const fl_wplan_opts *o;
} fl_walk;

static fl_wslot *fl_walk_add(fl_walk *w, fl_wrole role, int layer, size_t rows, size_t cols,
                             size_t elem)
{
    fl_wslot *s = &w->p->slot[w->p->n++];
    *s = (fl_wslot){.role = role, .layer = layer, .expert = -1, .rows = rows, .cols = cols,
                    .elem = elem, .shares = -1};
    s->bytes = rows * cols * elem;
    return s;
}

/* Places s at the next aligned offset. */
static void fl_walk_place(fl_walk *w, fl_wslot *s) { s->off = fl_bump_off(&w->b, s->bytes); }

static fl_wslot *fl_walk_vec(fl_walk *w, fl_wrole role, int layer, size_t n, size_t elem)
{
    fl_wslot *s = fl_walk_add(w, role, layer, 1, n, elem);
    fl_walk_place(w, s);
    return s;
}

/* A matrix slot: the matrices' element, or the backend's own format and size. */
static fl_wslot *fl_walk_matrix(fl_walk *w, fl_wrole role, int layer, size_t rows, size_t cols)
{
    fl_wslot *s = fl_walk_add(w, role, layer, rows, cols, w->o->mat_elem);
    size_t own = w->o->mat_bytes ? w->o->mat_bytes(w->o->ctx, role, rows, cols) : 0;
    if (own) {
        s->elem = 0;
        s->bytes = own;
    }
    fl_walk_place(w, s);
    return s;
}

static void fl_walk_part(fl_wslot *s, int k, const fl_tensor *t, size_t elems)
{
    s->src[k] = t;
    s->part_elems[k] = elems;
}

/* A one-tensor matrix slot; with opts.map, a slot held plainly and a tensor whose dtype is
 * the slot's element, the slot is the file's: the take is given back (it was the last). */
static fl_wslot *fl_walk_mat(fl_walk *w, const fl_wplan_opts *o, fl_wrole role, int layer,
                             size_t rows, size_t cols, const fl_tensor *t)
{
    size_t used = w->b.used;
    fl_wslot *s = fl_walk_matrix(w, role, layer, rows, cols);
    fl_walk_part(s, 0, t, rows * cols);
    fl_dtype same = o->mat_elem == 2 ? FL_DT_BF16 : FL_DT_F32;
    if (o->map && s->elem && t->dtype == same && (size_t)t->numel == rows * cols) {
        w->b.used = used;
        s->off = 0;
        s->bytes = 0;
        s->mapped = true;
    }
    return s;
}

/* A SwiGLU's two slots: gate|up (2 ff, H) and down (H, ff), the latter mappable. */
static void fl_walk_swiglu(fl_walk *w, const fl_wplan_opts *o, fl_wrole gu, fl_wrole dn, int layer,
                           int expert, const fl_tensor *gate, const fl_tensor *up,
                           const fl_tensor *down, size_t ff, size_t H)
{
    fl_wslot *s = fl_walk_matrix(w, gu, layer, 2 * ff, H);
    s->expert = expert;
    fl_walk_part(s, 0, gate, ff * H);
    fl_walk_part(s, 1, up, ff * H);
    s = fl_walk_mat(w, o, dn, layer, H, ff, down);
    s->expert = expert;
}

/* A mixture-of-experts layer: the router in f32 (it routes in fp32 whatever the matrices'
 * format), its bias, each routed expert, the shared expert. */
static void fl_walk_moe(fl_walk *w, const fl_wplan_opts *o, const fl_model *m, int l)
{
    const fl_config *cf = &m->cfg;
    const fl_layer_w *lw = &m->layers[l];
    size_t H = (size_t)cf->hidden, E = (size_t)cf->moe.n_experts, mi = (size_t)cf->moe.inter;
    fl_wslot *s = fl_walk_add(w, FL_W_ROUTER, l, E, H, 4);
    fl_walk_place(w, s);
    fl_walk_part(s, 0, lw->router, E * H);
    if (lw->expert_bias)
        fl_walk_part(fl_walk_vec(w, FL_W_EXPERT_BIAS, l, E, 4), 0, lw->expert_bias, E);
    for (size_t x = 0; x < E; x++) {
        const fl_expert_w *ex = &lw->experts[x];
        fl_walk_swiglu(w, o, FL_W_EXPERT_GATE_UP, FL_W_EXPERT_DOWN, l, (int)x, ex->gate, ex->up,
                       ex->down, mi, H);
    }
    if (lw->shared.gate)
        fl_walk_swiglu(w, o, FL_W_SHARED_GATE_UP, FL_W_SHARED_DOWN, l, -1, lw->shared.gate,
                       lw->shared.up, lw->shared.down, mi * (size_t)cf->moe.n_shared, H);
}

int fl_wplan_build(fl_wplan *p, const fl_model *m, const fl_wplan_opts *o, fl_err *e)
{
    *p = (fl_wplan){0};
    if (!m || !o || !m->weights || !m->layers || !m->embed || !m->lm_head ||
        !m->final_norm)
        return fl_err_set(e, FL_EINVAL, "weight plan: the model was loaded without weights");
    if (!o->align || (o->align & (o->align - 1)) || (o->mat_elem != 2 && o->mat_elem != 4))
        return fl_err_set(e, FL_EINVAL, "weight plan: alignment %zu (not a power of two) or "
                          "element size %zu (not 2 or 4)", o->align, o->mat_elem);
    const fl_config *cf = &m->cfg;
    /* 9 slots per layer at most (a MoE layer: 2 more, 2 per expert, 2 shared), then embed,
     * lm_head, final norm, RoPE */
    size_t cap = (size_t)cf->n_layers * (13 + 2 * (size_t)cf->moe.n_experts) + 4;
    if (!(p->slot = calloc(cap, sizeof *p->slot)))
        return fl_err_set(e, FL_ENOMEM, "weight plan: out of memory (%zu slots)", cap);
    fl_walk w = {p, {NULL, 0, o->align}, o};
    size_t H = (size_t)cf->hidden, NI = (size_t)cf->intermediate, V = (size_t)cf->vocab;
    size_t hd = (size_t)cf->head_dim, qd = (size_t)cf->n_heads * hd;
    size_t kd = (size_t)cf->n_kv_heads * hd;
    for (int l = 0; l < cf->n_layers; l++) {
        const fl_layer_w *lw = &m->layers[l];
        fl_wslot *s = fl_walk_matrix(&w, FL_W_QKV, l, qd + 2 * kd, H);
        if (lw->wqkv) {
            fl_walk_part(s, 0, lw->wqkv, (qd + 2 * kd) * H);
        } else {
            fl_walk_part(s, 0, lw->wq, qd * H);
            fl_walk_part(s, 1, lw->wk, kd * H);
            fl_walk_part(s, 2, lw->wv, kd * H);
        }
        if (lw->bq && lw->bk && lw->bv) {
            s = fl_walk_vec(&w, FL_W_QKV_BIAS, l, qd + 2 * kd, 4);
            fl_walk_part(s, 0, lw->bq, qd);
            fl_walk_part(s, 1, lw->bk, kd);
            fl_walk_part(s, 2, lw->bv, kd);
        }
        fl_walk_mat(&w, o, FL_W_O, l, H, qd, lw->wo);
        if (lw->experts)
            fl_walk_moe(&w, o, m, l);
        else
            fl_walk_swiglu(&w, o, FL_W_GATE_UP, FL_W_DOWN, l, -1, lw->w_gate, lw->w_up,
                           lw->w_down, NI, H);
        fl_walk_part(fl_walk_vec(&w, FL_W_ATTN_NORM, l, H, 4), 0, lw->attn_norm, H);
        fl_walk_part(fl_walk_vec(&w, FL_W_MLP_NORM, l, H, 4), 0, lw->mlp_norm, H);
        if (lw->q_norm && lw->k_norm) {
            fl_walk_part(fl_walk_vec(&w, FL_W_Q_NORM, l, hd, 4), 0, lw->q_norm, hd);
            fl_walk_part(fl_walk_vec(&w, FL_W_K_NORM, l, hd, 4), 0, lw->k_norm, hd);
        }
    }
    int embed = -1;
    if (o->embed) {
        embed = p->n;
        fl_walk_mat(&w, o, FL_W_EMBED, -1, V, H, m->embed);
    }
    if (embed >= 0 && m->lm_head == m->embed) {
        /* tied: the head reads the embedding's copy; nothing is taken */
        fl_wslot *s = &p->slot[p->n++];
        *s = p->slot[embed];
        s->role = FL_W_LM_HEAD;
        s->bytes = 0;
        s->shares = embed;
    } else {
        fl_walk_mat(&w, o, FL_W_LM_HEAD, -1, V, H, m->lm_head);
    }
    fl_walk_part(fl_walk_vec(&w, FL_W_FINAL_NORM, -1, H, 4), 0, m->final_norm, H);
    if (o->rope)
        fl_walk_vec(&w, FL_W_ROPE, -1, (size_t)fl_config_rotary_dim(cf) / 2, sizeof(double));
    p->bytes = w.b.used;
    return 0;
}

void fl_wplan_free(fl_wplan *p)
{
    free(p->slot);
    *p = (fl_wplan){0};
}
