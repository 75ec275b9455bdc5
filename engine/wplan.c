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
    *s = (fl_wslot){.role = role, .layer = layer, .rows = rows, .cols = cols, .elem = elem,
                    .shares = -1};
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
    /* 9 slots per layer at most, then embed, lm_head, final norm, RoPE */
    size_t cap = (size_t)cf->n_layers * 9 + 4;
    if (!(p->slot = calloc(cap, sizeof *p->slot)))
        return fl_err_set(e, FL_ENOMEM, "weight plan: out of memory (%zu slots)", cap);
    fl_walk w = {p, {NULL, 0, o->align}, o};
    size_t H = (size_t)cf->hidden, NI = (size_t)cf->intermediate, V = (size_t)cf->vocab;
    size_t hd = (size_t)cf->head_dim, qd = (size_t)cf->n_heads * hd;
    size_t kd = (size_t)cf->n_kv_heads * hd;
    for (int l = 0; l < cf->n_layers; l++) {
        const fl_layer_w *lw = &m->layers[l];
        fl_wslot *s = fl_walk_matrix(&w, FL_W_QKV, l, qd + 2 * kd, H);
        fl_walk_part(s, 0, lw->wq, qd * H);
        fl_walk_part(s, 1, lw->wk, kd * H);
        fl_walk_part(s, 2, lw->wv, kd * H);
        if (lw->bq && lw->bk && lw->bv) {
            s = fl_walk_vec(&w, FL_W_QKV_BIAS, l, qd + 2 * kd, 4);
            fl_walk_part(s, 0, lw->bq, qd);
            fl_walk_part(s, 1, lw->bk, kd);
            fl_walk_part(s, 2, lw->bv, kd);
        }
        fl_walk_mat(&w, o, FL_W_O, l, H, qd, lw->wo);
        s = fl_walk_matrix(&w, FL_W_GATE_UP, l, 2 * NI, H);
        fl_walk_part(s, 0, lw->w_gate, NI * H);
        fl_walk_part(s, 1, lw->w_up, NI * H);
        fl_walk_mat(&w, o, FL_W_DOWN, l, H, NI, lw->w_down);
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
        fl_walk_vec(&w, FL_W_ROPE, -1, hd / 2, sizeof(double));
    p->bytes = w.b.used;
    return 0;
}

void fl_wplan_free(fl_wplan *p)
{
    free(p->slot);
    *p = (fl_wplan){0};
}
