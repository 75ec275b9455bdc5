/* test_wplan.c: the weight plan (backend.h fl_wplan_build), by which both backends place
 * their weights, on the tiny models of test_loader_kit.h (Qwen2 layout with biases, Qwen3
 * layout with q/k norms, tied and untied), with the CPU's and the CUDA backend's options.
 * Checked against the model's shapes and tensor names: every slot the layout needs appears
 * once, in the documented order, made of the right tensors; offsets are aligned, slots do not
 * overlap and follow each other as closely as the alignment allows; a tied head shares the
 * embedding only where the embedding is placed; with map, exactly the one-tensor matrices
 * whose file dtype is the element (the kit's F32 at 4 bytes, none at 2) are mapped and take no
 * arena. Also the bump allocator and bad options. */
#include "backend.h"
#include "check.h"
#include "model.h"
#include "test_loader_kit.h"

typedef struct want {
    fl_wrole role;
    int layer;
    const char *src[FL_WSLOT_PARTS]; /* tensor names; "%d" is the layer */
    size_t rows, cols;
} want;

static int want_add(want *w, int n, fl_wrole role, int layer, size_t rows, size_t cols,
                    const char *a, const char *b, const char *c)
{
    w[n] = (want){role, layer, {a, b, c}, rows, cols};
    return n + 1;
}

/* The slots a model of the kit should get, in order, written out from the layout. */
static int want_list(want *w, bool qwen2, bool tie, const fl_wplan_opts *o)
{
    int n = 0;
    size_t qd = TK_NH * TK_HD, kd = TK_KV * TK_HD;
    for (int l = 0; l < TK_L; l++) {
        n = want_add(w, n, FL_W_QKV, l, qd + 2 * kd, TK_H, "self_attn.q_proj.weight",
                     "self_attn.k_proj.weight", "self_attn.v_proj.weight");
        if (qwen2)
            n = want_add(w, n, FL_W_QKV_BIAS, l, 1, qd + 2 * kd, "self_attn.q_proj.bias",
                         "self_attn.k_proj.bias", "self_attn.v_proj.bias");
        n = want_add(w, n, FL_W_O, l, TK_H, qd, "self_attn.o_proj.weight", NULL, NULL);
        n = want_add(w, n, FL_W_GATE_UP, l, 2 * TK_FF, TK_H, "mlp.gate_proj.weight",
                     "mlp.up_proj.weight", NULL);
        n = want_add(w, n, FL_W_DOWN, l, TK_H, TK_FF, "mlp.down_proj.weight", NULL, NULL);
        n = want_add(w, n, FL_W_ATTN_NORM, l, 1, TK_H, "input_layernorm.weight", NULL, NULL);
        n = want_add(w, n, FL_W_MLP_NORM, l, 1, TK_H, "post_attention_layernorm.weight", NULL,
                     NULL);
        if (!qwen2) {
            n = want_add(w, n, FL_W_Q_NORM, l, 1, TK_HD, "self_attn.q_norm.weight", NULL, NULL);
            n = want_add(w, n, FL_W_K_NORM, l, 1, TK_HD, "self_attn.k_norm.weight", NULL, NULL);
        }
    }
    if (o->embed)
        n = want_add(w, n, FL_W_EMBED, -1, TK_V, TK_H, "model.embed_tokens.weight", NULL, NULL);
    n = want_add(w, n, FL_W_LM_HEAD, -1, TK_V, TK_H,
                 tie ? "model.embed_tokens.weight" : "lm_head.weight", NULL, NULL);
    n = want_add(w, n, FL_W_FINAL_NORM, -1, 1, TK_H, "model.norm.weight", NULL, NULL);
    if (o->rope)
        n = want_add(w, n, FL_W_ROPE, -1, 1, TK_HD / 2, NULL, NULL, NULL);
    return n;
}

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static void check_plan(const fl_model *m, bool qwen2, bool tie, const fl_wplan_opts *o)
{
    char tag[96];
    snprintf(tag, sizeof tag, "%s%s align %zu elem %zu%s%s%s%s", qwen2 ? "qwen2" : "qwen3",
             tie ? " tied" : "", o->align, o->mat_elem, o->embed ? " embed" : "",
             o->rope ? " rope" : "", o->map ? " map" : "", o->mat_bytes ? " own-format" : "");
    fl_err e = {0};
    fl_wplan p;
    int rc = fl_wplan_build(&p, m, o, &e);
    CHECK(rc == 0, "%s: %d %s", tag, rc, e.msg);
    if (rc)
        return;
    want w[64];
    int nw = want_list(w, qwen2, tie, o);
    CHECK(p.n == nw, "%s: %d slots, want %d", tag, p.n, nw);
    size_t end = 0;    /* where the previous slot that takes memory ends */
    int embed = -1;
    for (int i = 0; i < p.n && i < nw; i++) {
        const fl_wslot *s = &p.slot[i];
        CHECK(s->role == w[i].role && s->layer == w[i].layer,
              "%s: slot %d is role %d layer %d, want role %d layer %d", tag, i, (int)s->role,
              s->layer, (int)w[i].role, w[i].layer);
        CHECK(s->rows == w[i].rows && s->cols == w[i].cols, "%s: slot %d: %zu x %zu, want "
              "%zu x %zu", tag, i, s->rows, s->cols, w[i].rows, w[i].cols);
        bool mat = s->role == FL_W_QKV || s->role == FL_W_O || s->role == FL_W_GATE_UP ||
                   s->role == FL_W_DOWN || s->role == FL_W_EMBED || s->role == FL_W_LM_HEAD;
        size_t own = mat && o->mat_bytes ? o->mat_bytes(o->ctx, s->role, s->rows, s->cols) : 0;
        size_t el = own ? 0 : mat ? o->mat_elem : s->role == FL_W_ROPE ? sizeof(double) : 4;
        CHECK(s->elem == el, "%s: slot %d: element %zu bytes, want %zu", tag, i, s->elem, el);
        size_t parts = 0;
        for (int k = 0; k < FL_WSLOT_PARTS; k++) {
            char name[128] = "";
            if (w[i].src[k] && w[i].layer >= 0)
                snprintf(name, sizeof name, "model.layers.%d.%s", w[i].layer, w[i].src[k]);
            else if (w[i].src[k])
                snprintf(name, sizeof name, "%s", w[i].src[k]);
            const fl_tensor *t = s->src[k];
            CHECK(name[0] ? t && !strcmp(t->name, name) : !t, "%s: slot %d part %d: %s, want %s",
                  tag, i, k, t ? t->name : "none", name[0] ? name : "none");
            CHECK(s->part_elems[k] == (t ? (size_t)t->numel : 0), "%s: slot %d part %d: %zu "
                  "elements", tag, i, k, s->part_elems[k]);
            parts += s->part_elems[k];
        }
        if (s->role != FL_W_ROPE)
            CHECK(parts == s->rows * s->cols, "%s: slot %d: parts hold %zu of %zu elements", tag,
                  i, parts, s->rows * s->cols);
        CHECK(s->off % o->align == 0, "%s: slot %d at %zu, not a multiple of %zu", tag, i, s->off,
              o->align);
        if (s->role == FL_W_EMBED)
            embed = i;
        bool one = s->role == FL_W_O || s->role == FL_W_DOWN || s->role == FL_W_EMBED ||
                   s->role == FL_W_LM_HEAD;
        bool map = o->map && one && !own && o->mat_elem == 4; /* the kit's tensors are F32 */
        CHECK(s->mapped == map, "%s: slot %d (role %d) mapped %d, want %d", tag, i, (int)s->role,
              s->mapped, map);
        if (s->role == FL_W_LM_HEAD && tie && o->embed) {
            CHECK(s->shares == embed && embed >= 0 && s->off == p.slot[embed].off &&
                  s->bytes == 0, "%s: the tied head does not share the embedding (shares %d, "
                  "at %zu)", tag, s->shares, s->off);
            continue;
        }
        CHECK(s->shares == -1, "%s: slot %d shares %d", tag, i, s->shares);
        if (map) {
            CHECK(s->bytes == 0 && s->off == 0, "%s: mapped slot %d takes %zu bytes at %zu", tag,
                  i, s->bytes, s->off);
            continue;
        }
        CHECK(s->bytes == (own ? own : s->rows * s->cols * s->elem), "%s: slot %d: %zu bytes",
              tag, i, s->bytes);
        /* after the previous one, no overlap, no gap beyond the alignment */
        CHECK(s->off == round_up(end, o->align), "%s: slot %d at %zu, previous ends at %zu", tag,
              i, s->off, end);
        end = s->off + s->bytes;
    }
    CHECK(p.bytes == end, "%s: arena %zu bytes, last slot ends at %zu", tag, p.bytes, end);
    fl_wplan_free(&p);
    CHECK(p.slot == NULL && p.n == 0, "%s: free leaves the plan empty", tag);
    fl_wplan_free(&p); /* twice is allowed */
}

static void check_bad(const fl_model *m, const fl_model *no_weights)
{
    fl_wplan p;
    fl_err e = {0};
    const fl_wplan_opts bad[] = {{.align = 0, .mat_elem = 4}, {.align = 48, .mat_elem = 4},
                                 {.align = 64, .mat_elem = 3, .map = true},
                                 {.align = 64, .mat_elem = 8}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        e = (fl_err){0};
        int rc = fl_wplan_build(&p, m, &bad[i], &e);
        CHECK(rc == FL_EINVAL && tk_has(e.msg, "alignment"), "align %zu elem %zu: %d %s",
              bad[i].align, bad[i].mat_elem, rc, e.msg);
        CHECK(p.slot == NULL, "a failed plan holds no slots");
        fl_wplan_free(&p);
    }
    e = (fl_err){0};
    fl_wplan_opts ok = {.align = 64, .mat_elem = 4};
    int rc = fl_wplan_build(&p, no_weights, &ok, &e);
    CHECK(rc == FL_EINVAL && tk_has(e.msg, "without weights"), "no weights: %d %s", rc, e.msg);
    fl_wplan_free(&p);
}

static void check_bump(void)
{
    fl_bump b = {NULL, 0, 256};
    CHECK(fl_bump_take(&b, 10) == NULL, "sizing takes no address");
    CHECK(fl_bump_off(&b, 1) == 256 && b.used == 257, "second take at %zu, used %zu", b.used - 1,
          b.used);
    CHECK(fl_bump_off(&b, 0) == 512 && fl_bump_off(&b, 300) == 512 && b.used == 812,
          "an empty take moves to the boundary only (used %zu)", b.used);
    static char arena[1024];
    fl_bump a = {arena, 0, 64};
    char *x = fl_bump_take(&a, 1), *y = fl_bump_take(&a, 64), *z = fl_bump_take(&a, 1);
    CHECK(x == arena && y == arena + 64 && z == arena + 128, "addresses %td %td %td", x - arena,
          y - arena, z - arena);
}

/* A backend format of its own for every matrix but o: an odd size, so the alignment shows. */
static size_t own_bytes(void *ctx, fl_wrole role, size_t rows, size_t cols)
{
    return role == FL_W_O ? 0 : rows * cols + 7;
}

int main(void)
{
    check_bump();
    char dir[TK_PATH];
    const fl_wplan_opts opts[] = {
        {.align = 64, .mat_elem = 4, .map = true}, /* CPU, f32 weights */
        {.align = 64, .mat_elem = 2, .map = true}, /* CPU, bf16 weights */
        {.align = 64, .mat_elem = 4},
        {.align = 256, .mat_elem = 2, .embed = true, .rope = true}, /* CUDA */
        {.align = 128, .mat_elem = 4, .embed = true},
        {.align = 128, .mat_elem = 4, .embed = true, .map = true}, /* a mapped embedding
                                                                       shared by the tied head */
        /* CPU, quantized: matrices in its own format (o stays plain, and mapped) */
        {.align = 64, .mat_elem = 4, .map = true, .mat_bytes = own_bytes},
        {.align = 128, .mat_elem = 2, .embed = true, .map = true, .mat_bytes = own_bytes},
    };
    for (int qwen2 = 0; qwen2 < 2; qwen2++)
        for (int tie = 0; tie < 2; tie++) {
            if (tk_mkdtemp_fast(dir, "wplan") || tk_tiny_model(dir, qwen2, tie)) {
                CHECK(0, "cannot write the tiny model");
                return check_summary("test_wplan");
            }
            fl_err e = {0};
            fl_model *m = NULL;
            fl_load_opts lo = {.no_tokenizer = true};
            int rc = fl_model_load(&m, dir, &lo, &e);
            CHECK(rc == 0, "load: %s", e.msg);
            if (!rc) {
                CHECK(m->cfg.qkv_bias == (bool)qwen2 && (m->lm_head == m->embed) == (bool)tie,
                      "the kit's model has the layout asked for");
                for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
                    check_plan(m, qwen2, tie, &opts[i]);
                if (qwen2 && tie) {
                    fl_model *nw = NULL;
                    fl_load_opts lw = {.no_tokenizer = true, .no_weights = true};
                    CHECK(fl_model_load(&nw, dir, &lw, &e) == 0, "load without weights: %s",
                          e.msg);
                    if (nw)
                        check_bad(m, nw);
                    fl_model_free(nw);
                }
            }
            fl_model_free(m);
            fl_rmtree(dir);
        }
    return check_summary("test_wplan");
}
