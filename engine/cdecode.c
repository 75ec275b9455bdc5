/* cdecode.c: constrained denoising (cdecode.h, docs/structured.md). */
#include "cdecode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode.h"
#include "tokenizer/tokenizer.h"

int fl_tvocab_build(const fl_tokenizer *t, int32_t n_vocab, int32_t mask_id, fl_tvocab **out,
                    fl_err *e)
{
    *out = NULL;
    if (!t)
        return fl_err_set(e, FL_EUNSUPPORTED, "output constraints need the model's tokenizer");
    fl_tvocab *v = calloc(1, sizeof *v);
    if (!v)
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    v->n = n_vocab;
    v->off = calloc((size_t)n_vocab + 1, sizeof(uint32_t));
    v->ok = calloc((size_t)n_vocab, 1);
    size_t total = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        size_t len;
        fl_tokenizer_token_bytes(t, i, &len);
        total += len;
    }
    v->blob = malloc(total ? total : 1);
    if (!v->off || !v->ok || !v->blob || total > UINT32_MAX) {
        fl_tvocab_free(v);
        return fl_err_set(e, FL_ENOMEM, "out of memory for the token table");
    }
    for (int b = 0; b < 256; b++)
        v->single[b] = -1;
    uint32_t o = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        size_t len;
        const unsigned char *p = fl_tokenizer_token_bytes(t, i, &len);
        v->off[i] = o;
        if (p && len) {
            memcpy(v->blob + o, p, len);
            o += (uint32_t)len;
        }
        v->ok[i] = p && len > 0 && i != mask_id && !fl_tokenizer_is_special(t, i);
        if (v->ok[i] && len == 1 && v->single[p[0]] < 0)
            v->single[p[0]] = i;
        if (v->ok[i] && (int32_t)len > v->max_len)
            v->max_len = (int32_t)len;
    }
    v->off[n_vocab] = o;
    *out = v;
    return 0;
}

void fl_tvocab_free(fl_tvocab *v)
{
    if (!v)
        return;
    free(v->off);
    free(v->ok);
    free(v->blob);
    free(v);
}

/* Breadth-first search back from the accepting states over the edges (src[k] -> t for k in
   deg[t] .. deg[t + 1]): the fewest edges from each state to a whole value. */
static void bfs_back(const fl_dfa *dfa, const int32_t *deg, const int32_t *src, int32_t *queue,
                     int32_t *dist)
{
    int32_t n = dfa->n, qh = 0, qt = 0;
    for (int32_t s = 0; s < n; s++) {
        dist[s] = dfa->accept[s] ? 0 : INT32_MAX;
        if (dfa->accept[s])
            queue[qt++] = s;
    }
    while (qh < qt) {
        int32_t t = queue[qh++];
        for (int32_t k = deg[t]; k < deg[t + 1]; k++)
            if (dist[src[k]] == INT32_MAX) {
                dist[src[k]] = dist[t] + 1;
                queue[qt++] = src[k];
            }
    }
}

/* The graph of token edges between states, each (state, next state) pair once: each state's
   targets by walking every allowed token (n * vocab walks), then reversed. -1 when out of
   memory. */
static int token_edges(const fl_dfa *dfa, const fl_tvocab *tv, bool singles_only, int32_t **deg_out,
                       int32_t **src_out, int32_t **tok_out)
{
    int32_t n = dfa->n;
    int32_t *mark = malloc(sizeof(int32_t) * (size_t)n);
    int32_t *deg = calloc((size_t)n + 1, sizeof(int32_t));
    size_t cap = 1024, m = 0;
    int32_t *ea = malloc(sizeof(int32_t) * cap), *eb = malloc(sizeof(int32_t) * cap);
    int32_t *et = malloc(sizeof(int32_t) * cap);
    if (!mark || !deg || !ea || !eb || !et)
        goto fail;
    for (int32_t s = 0; s < n; s++)
        mark[s] = -1;
    for (int32_t s = 0; s < n; s++) {
        int32_t lim = singles_only ? 256 : tv->n;
        for (int32_t i = 0; i < lim; i++) {
            int32_t id = singles_only ? tv->single[i] : i;
            if (id < 0 || !tv->ok[id])
                continue;
            int32_t t = fl_dfa_walk(dfa, s, tv->blob + tv->off[id], tv->off[id + 1] - tv->off[id]);
            if (t < 0 || mark[t] == s)
                continue;
            mark[t] = s;
            if (m == cap) {
                cap *= 2;
                int32_t *na = realloc(ea, sizeof(int32_t) * cap);
                if (!na)
                    goto fail;
                ea = na;
                int32_t *nb = realloc(eb, sizeof(int32_t) * cap);
                if (!nb)
                    goto fail;
                eb = nb;
                int32_t *nt = realloc(et, sizeof(int32_t) * cap);
                if (!nt)
                    goto fail;
                et = nt;
            }
            ea[m] = s;
            et[m] = id;
            eb[m++] = t;
            deg[t + 1]++;
        }
    }
    for (int32_t s = 0; s < n; s++)
        deg[s + 1] += deg[s];
    int32_t *src = malloc(sizeof(int32_t) * (m ? m : 1));
    int32_t *tok = malloc(sizeof(int32_t) * (m ? m : 1));
    if (!src || !tok) {
        free(src);
        free(tok);
        goto fail;
    }
    memcpy(mark, deg, sizeof(int32_t) * (size_t)n); /* fill positions */
    for (size_t k = 0; k < m; k++) {
        tok[mark[eb[k]]] = et[k];
        src[mark[eb[k]]++] = ea[k];
    }
    free(mark);
    free(ea);
    free(eb);
    free(et);
    *deg_out = deg;
    *src_out = src;
    *tok_out = tok;
    return 0;
fail:
    free(mark);
    free(deg);
    free(ea);
    free(eb);
    free(et);
    return -1;
}

int fl_cons_create(fl_dfa *dfa, const fl_tvocab *tv, int64_t exact_work, fl_cons **out,
                   fl_err *e)
{
    *out = NULL;
    int32_t n = dfa->n;
    fl_cons *c = calloc(1, sizeof *c);
    int32_t *tdist = malloc(sizeof(int32_t) * (size_t)n);
    int32_t *queue = malloc(sizeof(int32_t) * (size_t)n);
    int32_t *deg = NULL, *src = NULL, *etok = NULL;
    int32_t *tnext = malloc(sizeof(int32_t) * (size_t)n);
    /* every token from every state when that is affordable (the exact fewest tokens), else
       the single-byte tokens only (an upper bound: still a sound budget test) */
    bool exact = (int64_t)n * tv->n <= (exact_work > 0 ? exact_work : FL_CONS_EXACT_WORK);
    if (!c || !tdist || !queue || !tnext || token_edges(dfa, tv, !exact, &deg, &src, &etok)) {
        free(c);
        free(tdist);
        free(queue);
        free(tnext);
        fl_dfa_free(dfa);
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    }
    bfs_back(dfa, deg, src, queue, tdist);
    /* each state's first token along a shortest way to a whole value */
    for (int32_t s = 0; s < n; s++)
        tnext[s] = -1;
    for (int32_t t = 0; t < n; t++)
        for (int32_t k = deg[t]; k < deg[t + 1]; k++)
            if (tdist[t] != INT32_MAX && tnext[src[k]] < 0 && tdist[src[k]] == tdist[t] + 1)
                tnext[src[k]] = etok[k];
    free(deg);
    free(src);
    free(etok);
    free(queue);
    if (tdist[0] == INT32_MAX) {
        free(tnext);
        free(tdist);
        free(c);
        fl_dfa_free(dfa);
        return fl_err_set(e, FL_EUNSUPPORTED, "the constraint's values cannot be written with this "
                                              "model's tokens (a byte it needs has no token)");
    }
    atomic_init(&c->refs, 1);
    c->dfa = dfa;
    c->tv = tv;
    c->tdist = tdist;
    c->tnext = tnext;
    c->exact = exact;
    *out = c;
    return 0;
}

fl_cons *fl_cons_ref(fl_cons *c)
{
    if (c)
        atomic_fetch_add(&c->refs, 1);
    return c;
}

void fl_cons_unref(fl_cons *c)
{
    if (!c || atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    fl_dfa_free(c->dfa);
    free(c->tdist);
    free(c->tnext);
    free(c);
}

static bool in_list(int32_t id, const int32_t *l, int n)
{
    for (int i = 0; i < n; i++)
        if (l[i] == id)
            return true;
    return false;
}

int32_t fl_cons_step(const fl_cons *c, int32_t s, int32_t id, const int32_t *eos, int n_eos)
{
    if (s == FL_CONS_END)
        return FL_CONS_END;
    if (s < 0)
        return -1;
    if (in_list(id, eos, n_eos))
        return c->dfa->accept[s] ? FL_CONS_END : -1;
    if (id < 0 || id >= c->tv->n || !c->tv->ok[id])
        return -1;
    return fl_dfa_walk(c->dfa, s, c->tv->blob + c->tv->off[id], c->tv->off[id + 1] - c->tv->off[id]);
}

/* ---- the dynamic program ---- */

typedef struct ent {
    int32_t st;   /* automaton state, or FL_CONS_END; DEAD once dominated */
    float sc;     /* best score of a path to it */
    int32_t back; /* entry of the previous layer */
    int32_t tok;  /* the token of this position on that path */
    int32_t key;  /* the state, or its chain (fl_dfa.cls): entries of one key share a list */
    int32_t rank; /* its place in the chain (0 without one) */
    int32_t nx;   /* the next entry of the key's list, -1 */
    bool keep;    /* the protected path's: never dominated away */
} ent;

#define DEAD (-3)

/* how a free position's scores were normalised (to give the chosen token's probability) */
typedef struct pnorm {
    float mx, temp, cut;
    double lz, lzk;     /* log of the normaliser: all tokens, and those above the cut */
    int sampled;
    uint64_t seed;      /* sampled: the position's noise (gumbel_at) */
} pnorm;

#define HASH_CAP 4096 /* > 2 * FL_CONS_MAX_STATES, a power of two */

struct fl_cdp {
    ent *e;
    size_t n_e, cap_e;
    int32_t layer[FL_CONS_MAX_POS + 2]; /* first entry of each layer */
    int32_t hash[HASH_CAP]; /* key -> the first entry of its list */
    int32_t live;           /* the layer's entries not dominated */
    int32_t *cand;
    float *csc;
    int n_cand, cap_cand;
    int32_t order[FL_CONS_MAX_STATES + 1];
    /* per key (a state, or n + its chain, or 2n for the end): the entry expanded last that
       reached it (its stamp) and the least rank it reached there */
    uint32_t *stamp;
    int32_t *mrank;
    size_t cap_stamp;
    uint32_t tagc;
    float *w;        /* (vocab) weights when sampling */
    int32_t cap_w;
    pnorm norm[FL_CONS_MAX_POS];
    int32_t pco[FL_CONS_MAX_POS + 1]; /* position j's candidates: cand[pco[j] .. pco[j + 1]) */
    int32_t ptop[FL_CONS_MAX_POS];    /* how many of them lead, best first, each scoring at
                                         least as well as any candidate after them */
    double rest[FL_CONS_MAX_POS + 1]; /* the best scores of positions j .. n - 1, summed */
};

fl_cdp *fl_cdp_new(void) { return calloc(1, sizeof(fl_cdp)); }

void fl_cdp_free(fl_cdp *w)
{
    if (!w)
        return;
    free(w->e);
    free(w->cand);
    free(w->csc);
    free(w->stamp);
    free(w->mrank);
    free(w->w);
    free(w);
}

static int add_cand(fl_cdp *w, int32_t t, float sc)
{
    if (w->n_cand == w->cap_cand) {
        int nc = w->cap_cand ? 2 * w->cap_cand : 512;
        int32_t *c = realloc(w->cand, sizeof(int32_t) * (size_t)nc);
        if (!c)
            return -1;
        w->cand = c;
        float *s = realloc(w->csc, sizeof(float) * (size_t)nc);
        if (!s)
            return -1;
        w->csc = s;
        w->cap_cand = nc;
    }
    w->cand[w->n_cand] = t;
    w->csc[w->n_cand++] = sc;
    return 0;
}

/* Gumbel noise of token t at a position whose draw is seed: a function of the two (splitmix64
   of their mix), so that any token's noisy score can be computed again later (the program
   weighs the tokens of states' shortest ways, which are no candidates, after the position's
   candidates were chosen). */
static float gumbel_at(uint64_t seed, int32_t t)
{
    uint64_t z = seed + 0x9e3779b97f4a7c15ull * ((uint64_t)(uint32_t)t + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    double u = ((double)(z >> 11) + 0.5) / 9007199254740992.0; /* (0, 1) */
    return (float)-log(-log(u));
}

/* A sampled position's score of token t: its tempered log-probability plus its noise
   (perturb-and-MAP); one outside top_k/top_p is a last resort (a large penalty). */
static float noisy(const pnorm *pn, const float *lg, int32_t t)
{
    float base = (lg[t] - pn->mx) / pn->temp;
    return expf(base) >= pn->cut ? base - (float)pn->lzk + gumbel_at(pn->seed, t)
                                 : base - (float)pn->lz + gumbel_at(pn->seed, t) - 1e4f;
}

/* The candidates of a free position with logits: the top FL_CONS_TOPK tokens by score, best
 * first (their number in *ntop), then every single-byte token and end token, which score no
 * better than the last of them. */
static int free_cands(const fl_cons *c, fl_cdp *w, const float *lg, float lse, int32_t prev, int vocab,
                      const int32_t *eos, int n_eos, const fl_decode_opts *o, uint64_t *rng,
                      pnorm *pn, int32_t *ntop)
{
    float mx = -INFINITY;
    for (int i = 0; i < vocab; i++)
        if (lg[i] > mx)
            mx = lg[i];
    pn->mx = mx;
    pn->sampled = o->temperature > 0;
    pn->temp = pn->sampled ? o->temperature : 1.0f;
    double z = 0;
    float *sc = NULL; /* sampling: scores with noise, computed once */
    if (pn->sampled) {
        if (w->cap_w < vocab) {
            float *nw = realloc(w->w, sizeof(float) * (size_t)vocab);
            if (!nw)
                return -1;
            w->w = nw;
            w->cap_w = vocab;
        }
        for (int i = 0; i < vocab; i++) {
            w->w[i] = expf((lg[i] - mx) / pn->temp);
            z += w->w[i];
        }
        pn->cut = fl_sample_cut(o, w->w, z, vocab);
        double zk = 0;
        for (int i = 0; i < vocab; i++)
            if (w->w[i] >= pn->cut)
                zk += w->w[i];
        pn->lz = log(z);
        pn->lzk = log(zk);
        pn->seed = fl_xorshift(rng);
        for (int i = 0; i < vocab; i++)
            w->w[i] = noisy(pn, lg, i);
        sc = w->w;
    } else if (isfinite(lse) && lse >= mx) {
        pn->lz = pn->lzk = (double)lse - mx; /* log z of the logits less their maximum */
        pn->cut = 0;
    } else {
        float zf = 0;
        for (int i = 0; i < vocab; i++)
            zf += expf(lg[i] - mx);
        pn->lz = pn->lzk = log((double)zf);
        pn->cut = 0;
    }
    /* top K by score: a sorted array, best first */
    int32_t top[FL_CONS_TOPK];
    float tsc[FL_CONS_TOPK];
    int nt = 0;
    for (int i = 0; i < vocab; i++) {
        float s = sc ? sc[i] : lg[i] - mx - (float)pn->lz;
        if (nt == FL_CONS_TOPK && s <= tsc[nt - 1])
            continue;
        int j = nt < FL_CONS_TOPK ? nt++ : nt - 1;
        while (j > 0 && tsc[j - 1] < s) {
            top[j] = top[j - 1];
            tsc[j] = tsc[j - 1];
            j--;
        }
        top[j] = i;
        tsc[j] = s;
    }
    for (int i = 0; i < nt; i++)
        if (add_cand(w, top[i], tsc[i]))
            return -1;
    *ntop = nt;
    for (int b = 0; b < 256; b++) {
        int32_t t = c->tv->single[b];
        if (t >= 0 && t < vocab && add_cand(w, t, sc ? sc[t] : lg[t] - mx - (float)pn->lz))
            return -1;
    }
    for (int i = 0; i < n_eos; i++)
        if (eos[i] >= 0 && eos[i] < vocab &&
            add_cand(w, eos[i], sc ? sc[eos[i]] : lg[eos[i]] - mx - (float)pn->lz))
            return -1;
    if (prev >= 0 && prev < vocab && add_cand(w, prev, sc ? sc[prev] : lg[prev] - mx - (float)pn->lz))
        return -1;
    return 0;
}

static float tok_prob(const pnorm *pn, const float *lg, int32_t t)
{
    double base = (double)(lg[t] - pn->mx) / pn->temp;
    if (pn->sampled && exp(base) < pn->cut)
        return (float)exp(base - pn->lz);
    return (float)exp(base - pn->lzk);
}

/* Inserts (st, sc) into the current layer through the hash (w->live counts the layer), or
   improves the state's entry. Entries of one chain (fl_dfa.cls) dominate each other: one with fewer characters
   written (a lower rank) and a score as good can go wherever the other can, and as well, so
   the other is dropped (or never taken). A full layer takes no new state unless forced (the
   protected path's, which is also never dropped). Returns the state's entry, -1 when it was
   not taken, -2 when out of memory. */
static int32_t relax(const fl_cons *c, fl_cdp *w, int32_t st, float sc, int32_t back, int32_t tok,
                     bool force)
{
    const fl_dfa *d = c->dfa;
    bool chained = st >= 0 && d->cls && d->cls[st] >= 0 && !c->uncut;
    int32_t key = chained ? d->n + d->cls[st] : st, rank = chained ? d->rank[st] : 0;
    uint32_t h = ((uint32_t)(key + 2) * 2654435761u) & (HASH_CAP - 1);
    while (w->hash[h] >= 0 && w->e[w->hash[h]].key != key)
        h = (h + 1) & (HASH_CAP - 1);
    int32_t self = -1;
    for (int32_t x = w->hash[h]; x >= 0 && self < 0; x = w->e[x].nx)
        if (w->e[x].st == st)
            self = x;
    if (self < 0 && !force)
        for (int32_t x = w->hash[h]; x >= 0; x = w->e[x].nx)
            if (w->e[x].rank < rank && w->e[x].sc >= sc)
                return -1; /* dominated */
    if (self >= 0) {
        ent *x = &w->e[self];
        if (sc <= x->sc) {
            x->keep |= force;
            return self;
        }
        x->sc = sc;
        x->back = back;
        x->tok = tok;
        x->keep |= force;
    } else {
        if (w->live >= FL_CONS_MAX_STATES && !force)
            return -1; /* the layer is full: keep the states found first (the better ones) */
        if (w->n_e == w->cap_e) {
            size_t nc = w->cap_e ? 2 * w->cap_e : 4096;
            ent *ne = realloc(w->e, sizeof(ent) * nc);
            if (!ne)
                return -2;
            w->e = ne;
            w->cap_e = nc;
        }
        self = (int32_t)w->n_e++;
        w->e[self] = (ent){st, sc, back, tok, key, rank, w->hash[h], force};
        w->hash[h] = self;
        w->live++;
    }
    if (!chained)
        return self;
    /* the entries it dominates now: higher ranks, scores no better */
    for (int32_t *at = &w->hash[h]; *at >= 0;) {
        ent *y = &w->e[*at];
        if (*at != self && y->rank > rank && y->sc <= sc && !y->keep) {
            y->st = DEAD;
            *at = y->nx;
            w->live--;
        } else {
            at = &y->nx;
        }
    }
    return self;
}

/* The state after token t from state st at a position (-1: not allowed): an end token only in
   an accepting state; a state kept only when it can still become a whole value in the rem
   positions after this one (tdist). */
static int32_t next_state(const fl_cons *c, int32_t st, int32_t t, const int32_t *eos, int n_eos,
                          int32_t rem)
{
    if (st == FL_CONS_END)
        return FL_CONS_END;
    if (in_list(t, eos, n_eos))
        return c->dfa->accept[st] ? FL_CONS_END : -1;
    if (t < 0 || t >= c->tv->n || !c->tv->ok[t])
        return -1;
    int32_t ns = fl_dfa_walk(c->dfa, st, c->tv->blob + c->tv->off[t], c->tv->off[t + 1] - c->tv->off[t]);
    return ns >= 0 && c->tdist[ns] <= rem ? ns : -1;
}

static float cand_score(const fl_cpos *p, const pnorm *pn, int32_t t)
{
    if (p->fixed >= 0 || !p->logits)
        return 0.0f;
    return pn->sampled ? noisy(pn, p->logits, t) : p->logits[t] - pn->mx - (float)pn->lz;
}

/* The protected path's token at position j from state st: the decided one, else the previous
   assignment's, else the first of the state's shortest way to a whole value (an end token at
   a whole value), else after the end the position's best candidate. */
static int32_t prot_token(const fl_cons *c, const fl_cdp *w, const fl_cpos *p, int32_t st, int j,
                          const int32_t *eos, int n_eos)
{
    int32_t pt = p->fixed >= 0    ? p->fixed
               : p->prev >= 0     ? p->prev
               : st >= 0          ? c->tnext[st]
               : w->pco[j + 1] > w->pco[j] ? w->cand[w->pco[j]]
                                  : -1;
    if (st >= 0 && pt < 0) /* a whole value already: the end */
        pt = n_eos ? eos[0] : -1;
    return pt;
}

int fl_cons_best(const fl_cons *c, fl_cdp *w, int32_t s0, const fl_cpos *pos, int n, int32_t left,
                 int vocab, const int32_t *eos, int n_eos, const fl_decode_opts *o, uint64_t *rng,
                 int32_t *tok, float *prob)
{
    if (n <= 0)
        return 0;
    if (n > FL_CONS_MAX_POS || n > left || (s0 != FL_CONS_END && s0 < 0))
        return -1;
    const fl_dfa *dfa = c->dfa;
    size_t nkeys = 2 * (size_t)dfa->n + 1;
    if (w->cap_stamp < nkeys) {
        uint32_t *st = realloc(w->stamp, sizeof(uint32_t) * nkeys);
        if (st)
            w->stamp = st;
        int32_t *mr = st ? realloc(w->mrank, sizeof(int32_t) * nkeys) : NULL;
        if (!mr)
            return -1;
        w->mrank = mr;
        w->cap_stamp = nkeys;
        w->tagc = 0;
    }
    if (w->tagc > UINT32_MAX - 2 * FL_CONS_MAX_POS * (FL_CONS_MAX_STATES + 2) || !w->tagc) {
        memset(w->stamp, 0, sizeof(uint32_t) * w->cap_stamp); /* stamps start over */
        w->tagc = 0;
    }
    w->n_e = 0;
    w->layer[0] = 0;
    w->live = 0;
    for (int i = 0; i < HASH_CAP; i++)
        w->hash[i] = -1;
    /* every position's candidates (in position order: sampling draws its noise in that
       order), the best first */
    w->n_cand = 0;
    for (int j = 0; j < n; j++) {
        w->pco[j] = w->n_cand;
        w->ptop[j] = 0; /* (no logits: all score 0, in no order that matters) */
        if (pos[j].fixed >= 0) {
            if (add_cand(w, pos[j].fixed, 0.0f))
                return -1;
            w->ptop[j] = 1;
        } else if (pos[j].logits) {
            if (free_cands(c, w, pos[j].logits, pos[j].lse, pos[j].prev, vocab, eos, n_eos, o, rng,
                           &w->norm[j], &w->ptop[j]))
                return -1;
        } else {
            for (int b = 0; b < 256; b++)
                if (c->tv->single[b] >= 0 && add_cand(w, c->tv->single[b], 0.0f))
                    return -1;
            for (int i = 0; i < n_eos; i++)
                if (add_cand(w, eos[i], 0.0f))
                    return -1;
            if (pos[j].prev >= 0 && add_cand(w, pos[j].prev, 0.0f))
                return -1;
        }
    }
    w->pco[n] = w->n_cand;
    w->rest[n] = 0;
    for (int j = n - 1; j >= 0; j--) /* a token's score is never above its position's best */
        w->rest[j] = w->rest[j + 1] + (w->pco[j + 1] > w->pco[j] ? w->csc[w->pco[j]] : 0.0f);
    /* the protected path: through each position's decided token, else the previous step's
       assignment, else the state's shortest way to a whole value. It stays valid from step to
       step (the decided tokens came from it, the budget test let its states through), so it
       is always inserted, even into a full layer: the program never runs dry. Walked here
       first, its score is a floor for the best: a path that cannot reach it, even with every
       later position's best token, is not weighed (floor; exact: such a path never wins). */
    double floor_sc = 0;
    for (int32_t j = 0, st = s0; j < n; j++) {
        int32_t pt = prot_token(c, w, &pos[j], st, j, eos, n_eos);
        int32_t ns = pt >= 0 && pt < vocab ? next_state(c, st, pt, eos, n_eos, left - j - 1) : -1;
        if (ns == -1 || (j == n - 1 && ns != FL_CONS_END && c->tdist[ns] > left - n)) {
            floor_sc = -INFINITY; /* (a bug upstream: no floor) */
            break;
        }
        floor_sc += cand_score(&pos[j], &w->norm[j], pt);
        st = ns;
    }
    if (isfinite(floor_sc))
        floor_sc -= 1e-3 + 1e-4 * fabs(floor_sc); /* the sums' rounding */
    if (c->uncut)
        floor_sc = -INFINITY;
    int32_t prot = relax(c, w, s0, 0.0f, -1, -1, true);
    if (prot < 0)
        return -1;
    for (int j = 0; j < n; j++) {
        int32_t prev_lo = w->layer[j], prev_hi = (int32_t)w->n_e;
        w->layer[j + 1] = prev_hi;
        int32_t rem = left - j - 1; /* positions after this one before max_tokens */
        bool free_pos = pos[j].fixed < 0;
        const int32_t *cand = w->cand + w->pco[j];
        const float *csc = w->csc + w->pco[j];
        int n_cand = w->pco[j + 1] - w->pco[j], n_top = w->ptop[j];
        double after_this = w->rest[j + 1];
        /* the previous layer's states, best first (a full layer keeps those) */
        int np = 0;
        for (int32_t v = prev_lo; v < prev_hi; v++) {
            if (w->e[v].st == DEAD)
                continue;
            int k = np++;
            while (k > 0 && w->e[w->order[k - 1]].sc < w->e[v].sc) {
                w->order[k] = w->order[k - 1];
                k--;
            }
            w->order[k] = v;
        }
        for (int i = 0; i < HASH_CAP; i++)
            w->hash[i] = -1;
        w->live = 0;
        /* the protected path's step first */
        int32_t pst = w->e[prot].st;
        int32_t pt = prot_token(c, w, &pos[j], pst, j, eos, n_eos);
        int32_t pns = pt >= 0 && pt < vocab ? next_state(c, pst, pt, eos, n_eos, rem) : -1;
        int32_t nprot = -1;
        if (pns != -1) {
            nprot = relax(c, w, pns, w->e[prot].sc + cand_score(&pos[j], &w->norm[j], pt),
                          prot, pt, true);
            if (nprot == -2)
                return -1;
        }
        for (int i = 0; i < np; i++) {
            int32_t pi = w->order[i];
            int32_t st = w->e[pi].st;
            float base = w->e[pi].sc;
            if (n_cand && (double)base + csc[0] + after_this < floor_sc)
                break; /* this state and the worse ones after it cannot reach the floor */
            if (st == FL_CONS_END) { /* anything: the best candidate */
                if (relax(c, w, FL_CONS_END, base + csc[0], pi, cand[0], false) == -2)
                    return -1;
                continue;
            }
            /* the leading candidates best first: a state this entry reached already, or a
               later state of its chain, came with a score as good, so it is weighed once; the
               rest score no better than any leader, so a state a leader reached is skipped */
            uint32_t tag = ++w->tagc;
            for (int k = 0; k < n_cand; k++) {
                if ((double)base + csc[k] + after_this < floor_sc) {
                    if (k < n_top)
                        k = n_top - 1; /* the leaders after it score no better */
                    continue;
                }
                int32_t ns = next_state(c, st, cand[k], eos, n_eos, rem);
                if (ns == -1)
                    continue;
                bool chained = ns >= 0 && dfa->cls && dfa->cls[ns] >= 0 && !c->uncut;
                size_t key = ns == FL_CONS_END ? 2 * (size_t)dfa->n
                             : chained       ? (size_t)dfa->n + (size_t)dfa->cls[ns]
                                             : (size_t)ns;
                int32_t rank = chained ? dfa->rank[ns] : 0;
                if (w->stamp[key] == tag && w->mrank[key] <= rank && !c->uncut)
                    continue;
                if (k < n_top) {
                    w->stamp[key] = tag;
                    w->mrank[key] = rank;
                }
                if (relax(c, w, ns, base + csc[k], pi, cand[k], false) == -2)
                    return -1;
            }
            /* and the first token of its shortest way to a whole value, whatever its score
               (short of the floor) */
            int32_t t = c->tnext[st];
            float tsc = free_pos && t >= 0 && t < vocab ? cand_score(&pos[j], &w->norm[j], t) : 0;
            if (free_pos && t >= 0 && t < vocab && (double)base + tsc + after_this >= floor_sc) {
                int32_t ns = next_state(c, st, t, eos, n_eos, rem);
                if (ns != -1 && relax(c, w, ns, base + tsc, pi, t, false) == -2)
                    return -1;
            }
        }
        if (!w->live)
            return -1; /* no state survives (the protected path did not either: a bug) */
        /* the protected entry may have been improved by another path: its state is what counts */
        prot = nprot;
        for (int32_t v = prev_hi; prot < 0; v++)
            if (w->e[v].st != DEAD)
                prot = v;
    }
    /* the best last state (every kept state can finish in the positions after these), then
       back along its path */
    int32_t lo = w->layer[n], best = -1, after = left - n;
    for (int32_t i = lo; i < (int32_t)w->n_e; i++) {
        int32_t st = w->e[i].st;
        if (st == DEAD || (st != FL_CONS_END && c->tdist[st] > after))
            continue;
        if (best < 0 || w->e[i].sc > w->e[best].sc)
            best = i;
    }
    if (best < 0)
        return -1;
    for (int j = n - 1; j >= 0; j--) {
        const ent *x = &w->e[best];
        tok[j] = x->tok;
        if (pos[j].fixed >= 0)
            prob[j] = 1.0f;
        else if (pos[j].logits)
            prob[j] = tok_prob(&w->norm[j], pos[j].logits, x->tok);
        else
            prob[j] = 0.0f;
        best = x->back;
    }
    return 0;
}
