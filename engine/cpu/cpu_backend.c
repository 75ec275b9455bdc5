/* cpu_backend.c: the CPU implementation of backend.h. Weights are converted once at create
 * (to f32, or to bf16: opts.weights) and fused where one pass over the activations serves
 * several projections (q|k|v, gate|up); a matrix the file already holds in that format and
 * layout (o, down, lm_head) is read from the file's mapping instead, never copied, and the
 * pages of it are first touched by the first forward that reads them. One forward runs ~4 pool jobs per layer; the
 * serial code between them is tiny (norms of a few rows).
 *
 * KV pages hold f32 (the default: exact) or bf16 (opts.kv: half the bytes for attention to
 * read, which dominates at long contexts); page_read/page_write convert to and from the f32
 * host layout. With bf16 pages every key and value attention reads is the bf16 value, this
 * forward's own as well as cached ones (fl_qkv_heads says why).
 *
 * One thread budget: our pool does all the parallel work, OpenBLAS runs single-threaded
 * inside each pool thread (each thread multiplies its own slice of the weight rows). Two
 * pools, ours and OpenBLAS's, spinning on the same cores made attention 10x slower
 * (ANCHORS.md), and OpenBLAS's workers keep spinning after every sgemm call.
 *
 * Environment (tuning, read at create): FL_SGEMM_ROWS, the number of rows from which a
 * projection uses sgemm instead of the streaming kernel (default: never on x86, so that no
 * row's outputs depend on the batch, fl_default_sgemm_rows; the plain C level's crossover
 * elsewhere); FL_SIMD=avx512, avx2 or plain, a cap on the kernels' instruction set
 * (kernels.h). */
#include "cpu.h"

#include <cblas.h>
#include <limits.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels.h"
#include "model.h"
#include "moe.h"
#include "quant.h"
#include "threadpool.h"

#define FL_QTILE FL_QT /* attention query rows per work item: one score tile (kernels.h) */
/* Weight rows per chunk of a projection job: with the streaming kernel, small (64 rows,
 * 256 KB of f32 at width 1024) for an even split; with sgemm, large, as each call has
 * OpenBLAS pack its operands afresh (with 64-row calls packing took a quarter of a 32-row
 * step). */
#define FL_ROWS 64
#define FL_ROWS_GEMM 512
/* lm_head vocabulary rows per chunk (the chunk's logits stay in L2); statistics are kept
 * per chunk of FL_VCHUNK. The sgemm path takes FL_VCHUNK_GEMM rows per call. */
#define FL_VCHUNK 256
#define FL_VCHUNK_GEMM 1024

typedef struct fl_cpu_layer {
    fl_mat wqkv;      /* (q_dim + 2 * kv_dim, hidden): q rows, then k, then v */
    float *bqkv;      /* (q_dim + 2 * kv_dim) or NULL */
    fl_mat wo;        /* (hidden, q_dim) */
    fl_mat wgu;       /* (2 * inter, hidden): gate and up rows interleaved in groups of ib */
    fl_mat wdown;     /* (hidden, inter) */
    float *attn_norm; /* (hidden) */
    float *mlp_norm;  /* (hidden) */
    float *q_norm;    /* (head_dim) or NULL */
    float *k_norm;    /* (head_dim) or NULL */
    /* a mixture-of-experts layer (wgu, wdown unused) */
    bool moe;
    fl_mat router;    /* (n_experts, hidden) f32 */
    float *ebias;     /* (n_experts) or NULL */
    fl_mat *egu;      /* (n_experts) (2 moe_inter, hidden), gate|up interleaved by eib */
    fl_mat *edown;    /* (n_experts) (hidden, moe_inter) */
    fl_mat sgu, sdown; /* the shared expert, gate|up interleaved by sib; rows 0 when none */
} fl_cpu_layer;

/* A work item of an expert job: rows [lo, lo + n) of expert e's matrix (e == n_experts: the
 * shared expert). */
typedef struct fl_moe_item {
    int32_t e, lo, n;
} fl_moe_item;

/* Scratch of one pool thread. */
typedef struct fl_tscratch {
    float *mm;          /* (FL_MM_TILE * max_k) widened bf16 tiles for sgemm */
    float *att_s;       /* (FL_QTILE * (max_pos + FL_SCORE_PAD)) scores / probabilities */
    float *att_q;       /* (head_dim * FL_QT) a tile of queries, transposed */
    float *att_o;       /* (FL_QTILE * head_dim) its outputs */
    const float **kr;   /* (max_pos) rows of the keys an item attends to (f32 KV) */
    const float **vr;   /* (max_pos) rows of their values */
    const uint16_t **kr16, **vr16; /* (max_pos) the same with bf16 KV */
    float *att_w;       /* bf16 KV: (FL_KV_CHUNK * head_dim) rows widened for qk / pv */
    float *logits;      /* (max_tokens * FL_VCHUNK_GEMM) logits of one vocabulary chunk */
} fl_tscratch;

typedef struct fl_cpu {
    fl_backend base;
    fl_config cfg;
    fl_kernels kk;
    fl_pool *pool;
    int nt;         /* threads */
    int sgemm_rows; /* projections with at least this many rows use sgemm */
    fl_wformat wf;  /* the matrices' format (never AUTO) */
    bool bf16;      /* plain matrices stored as bf16 (bf16 weights, and q8/q4's fallback) */
    int q_dim, kv_dim, qkv_dim, ib, max_k;
    int rd;         /* rotated dims of a head (fl_config_rotary_dim) */
    fl_cpu_layer *layers; /* (n_layers) */
    fl_mat lm_head;       /* (vocab, hidden) */
    float *final_norm;    /* (hidden) */
    const fl_tensor *embed; /* (vocab, hidden) in the file: rows are widened on lookup */
    const fl_tensor *embed_s; /* its scales when the file holds it quantized, else NULL */
    bool embed_q8;            /* q8/q4 weights and a float file embedding: rows are read as
                                 q8 would hold them, as from a quantized directory's file */
    int8_t *emb_q;            /* (hidden) a row's quants then */
    uint16_t *emb_d;          /* (hidden / 32) its scales */
    size_t page_floats;   /* n_layers * 2 * kv_heads * block * head_dim */
    size_t run;           /* block * head_dim: one page's keys (or values) of one kv head */
    bool kv16;            /* KV pages in bf16 (opts.kv); else f32 */
    void *kv;             /* (n_layers, 2, kv_heads, n_pages, run) f32, or bf16 when kv16:
                             planes by (layer, k|v, head), pages within a plane (fl_page_at) */
    uint16_t *kvown;      /* kv16: (max_tokens, 2 * kv_dim) this forward's K | V rounded to
                             bf16, the values its pages get: attention reads only these */
    /* activations, for up to max_tokens rows */
    float *x;    /* (max_tokens, hidden) residual stream */
    float *xb;   /* (max_tokens, hidden) normed input of a sublayer */
    float *qkv;  /* (max_tokens, qkv_dim) q | k | v after norm and RoPE */
    float *att;  /* (max_tokens, q_dim) attention output */
    float *gu;   /* (max_tokens, 2 * inter) gate|up, interleaved */
    float *hb;   /* (max_tokens, inter) silu(gate) * up */
    float *rope; /* (max_tokens, rd) cos (rd/2) | sin (rd/2) per token */
    void *qx;    /* (fl_qx_bytes(max_tokens, max_k)) a projection's input rows quantized, when
                    its weights are q8/q4 (quant.h) */
    double *inv_freq;   /* (head_dim / 2) */
    int32_t *out_rows;  /* (max_tokens) tokens whose outputs are wanted */
    int32_t *item0;     /* (max_tokens + 1) first attention work item of each segment */
    int32_t *seg_tok0;  /* (max_tokens) first token of each segment */
    fl_lse *lse;        /* (vocab / FL_VCHUNK, max_tokens) softmax statistics per chunk */
    fl_tscratch *ts;    /* (nt) per-thread scratch */
    fl_share *shares;   /* (nt) the matmul jobs' chunks (threadpool.h) */
    /* mixture of experts (cfg.moe.router != NONE); A = max_tokens * top_k assignments */
    int eib, sib;       /* gate|up interleave of the routed and the shared experts (as ib) */
    bool moe_qup;       /* the experts' gate|up are q8/q4 (their input rows are quantized) */
    bool moe_qdown;     /* the routed experts' down is (moe_inter % 32 == 0) */
    bool moe_qsdown;    /* the shared expert's down is */
    int s_inter;        /* the shared expert's width, moe.inter * moe.n_shared */
    float *rlog;        /* (max_tokens, n_experts) router logits */
    float *rscr;        /* (nt * fl_moe_scratch) the routing's scratch, one per thread */
    int32_t *rid;       /* (max_tokens, top_k) chosen experts, best first */
    float *rw;          /* (max_tokens, top_k) their weights */
    int32_t *eoff;      /* (n_experts + 2) first assignment of each expert; the shared last */
    int32_t *atok;      /* (A) the token of each assignment, in expert order */
    int32_t *apos;      /* (max_tokens * top_k) the assignment of (token, k) */
    float *xg;          /* (A, hidden) the normed rows gathered in expert order (f32/bf16) */
    void *qxg;          /* (A) their quantized rows (q8/q4) */
    float *egu_o;       /* (A, 2 moe_inter) */
    float *eh;          /* (A, moe_inter) silu(gate) * up */
    void *qxe;          /* (A) eh's rows quantized */
    float *ey;          /* (A, hidden) each assignment's expert output */
    float *sgu_o, *sh;  /* (max_tokens, 2 s_inter), (max_tokens, s_inter): the shared expert */
    void *qxs;          /* (max_tokens) sh's rows quantized */
    float *sy;          /* (max_tokens, hidden) its output */
    fl_moe_item *items; /* the expert jobs' work items */
    int32_t *rec_ids;   /* fl_cpu_record_routes: (n_layers, max_tokens, top_k) or NULL */
    float *rec_w;
    fl_cpu_moe_stats st; /* of the last forward */
    fl_cpu_phases ph;    /* fl_cpu_phases_get */
    double ph_t;         /* the current phase's start (fl_now seconds) */
    int ph_cur;
    void *weights_mem;  /* one mapping holding all converted weights */
    size_t weights_len;
    size_t arena_bytes;  /* of the weight plan's arena (the converted weights) */
    size_t mapped_bytes; /* of the matrices read from the file's mapping */
    void *kv_mem;       /* the mapping of the KV pool */
    size_t kv_len;
} fl_cpu;

/* ---------------------------------------------------------------- weights */

/* Weight conversion runs on the pool: 0.75 B parameters take seconds on one core, mostly
 * in page faults on the file mapping and on the fresh destination. */
/* Gives back the file pages a conversion faulted in (the page cache keeps them): the copy is
 * what forwards read, and else they stay in our RSS for good, the model's size on top of the
 * arena. Conversions call it as they go, a chunk of rows at a time, so that the peak while
 * loading is not the arena plus the largest tensor (the embedding, 311 MB at Qwen3-0.6B's
 * shape): every page that [p, p + n) touches when `outer` (rows are not page-aligned; a page
 * a neighbouring chunk still reads is read again from the page cache), else only the pages
 * inside it (a tensor's ends: the pages beyond may belong to another tensor). */
static void fl_drop_range(const void *p, size_t n, bool outer)
{
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)p, z = (uintptr_t)p + n;
    a = outer ? a & ~(pg - 1) : (a + pg - 1) & ~(pg - 1);
    z = outer ? (z + pg - 1) & ~(pg - 1) : z & ~(pg - 1);
    if (z > a)
        madvise((void *)a, z - a, MADV_DONTNEED);
}

static void fl_drop_pages(const fl_tensor *t)
{
    if (t)
        fl_drop_range(t->data, t->nbytes, false);
}

typedef struct fl_conv_job {
    fl_cpu *c;
    char *dst;
    const fl_tensor *t, *ts; /* ts: t's scales when t is quantized */
    int rows;
    size_t cols;
    bool bf16;    /* destination element: bf16, else f32 */
    int grp, off; /* grp > 0: source row r goes to (r / grp) * 2 * grp + off + r % grp */
} fl_conv_job;

static void fl_convert_row(const fl_cpu *c, void *dst, const fl_conv_job *j, int r)
{
    fl_dtype dt = j->t->dtype;
    size_t n = j->cols;
    const void *src = (const char *)j->t->data + (size_t)r * n * fl_dtype_size(dt);
    if (dt == FL_DT_BF16 && j->bf16) {
        memcpy(dst, src, n * 2);
        return;
    }
    if (dt == FL_DT_BF16) {
        c->kk.bf16_to_f32(dst, src, (long)n);
        return;
    }
    if (!j->bf16 && dt != FL_DT_I8 && dt != FL_DT_U8) {
        fl_to_f32(dst, src, dt, n); /* F32/F16: the loader admits no other float dtype */
        return;
    }
    /* to bf16, or from quantized rows: through f32, 1024 values (32 groups) at a time */
    float tmp[1024];
    for (size_t i = 0; i < n; i += 1024) {
        size_t len = n - i < 1024 ? n - i : 1024;
        if (dt == FL_DT_I8 || dt == FL_DT_U8) {
            size_t G = n / FL_QG, g0 = i / FL_QG;
            const uint16_t *d = (const uint16_t *)j->ts->data + (size_t)r * G + g0;
            if (dt == FL_DT_I8)
                fl_q8_dequantize(tmp, (const int8_t *)j->t->data + (size_t)r * n + i, d, 1,
                                 (int)len);
            else
                fl_q4_dequantize(tmp, (const uint8_t *)j->t->data + ((size_t)r * n + i) / 2, d,
                                 1, (int)len);
        } else {
            fl_to_f32(tmp, (const char *)src + i * fl_dtype_size(dt), dt, len);
        }
        if (j->bf16)
            for (size_t k = 0; k < len; k++)
                ((uint16_t *)dst)[i + k] = fl_f32_to_bf16(tmp[k]);
        else
            memcpy((float *)dst + i, tmp, len * 4);
    }
}

static void fl_job_convert(void *ctx, int tid, int nt)
{
    fl_conv_job *j = ctx;
    size_t es = j->bf16 ? 2 : 4;
    int lo, hi;
    fl_split(j->rows, nt, tid, 1, &lo, &hi);
    /* the bytes of one source row (quantized: its quants; their scales are small) */
    size_t rb = j->cols * fl_dtype_size(j->t->dtype) / (j->t->dtype == FL_DT_U8 ? 2 : 1);
    for (int r = lo; r < hi; r++) {
        size_t dr = j->grp ? (size_t)(r / j->grp) * 2 * j->grp + j->off + r % j->grp : (size_t)r;
        fl_convert_row(j->c, j->dst + dr * j->cols * es, j, r);
        if ((r - lo) % 256 == 255 || r == hi - 1) { /* the rows done since the last drop */
            int r0 = r - (r - lo) % 256;
            fl_drop_range((const char *)j->t->data + (size_t)r0 * rb, (size_t)(r + 1 - r0) * rb,
                          true);
        }
    }
}

/* A weight matrix tensor of the file as (rows, cols) logical weights: float, or q8/q4
 * quants whose scales the loader checked. */
static int fl_cpu_check_src(const fl_cpu *c, const fl_tensor *t, const fl_tensor *ts,
                            size_t rows, size_t cols, fl_err *e)
{
    bool q = t && (t->dtype == FL_DT_I8 || t->dtype == FL_DT_U8);
    size_t per = t && t->dtype == FL_DT_U8 ? 2 : 1;
    if (!t || rows > INT_MAX || (size_t)t->numel * per != rows * cols ||
        (q ? !ts || cols % FL_QG
           : t->dtype != FL_DT_F32 && t->dtype != FL_DT_BF16 && t->dtype != FL_DT_F16))
        return fl_err_set(e, FL_EFORMAT, "cpu backend: tensor %s: expected %zu x %zu weights "
                          "of a float type or quantized with scales", t ? t->name : "?", rows,
                          cols);
    return 0;
}

/* Converts tensor t, (rows, cols), into dst as bf16 or f32; grp/off as in fl_conv_job. */
static int fl_cpu_convert(fl_cpu *c, void *dst, bool bf16, const fl_tensor *t, size_t rows,
                          size_t cols, int grp, int off, fl_err *e)
{
    const fl_tensor *ts = fl_model_scales(c->base.model, t);
    int rc = fl_cpu_check_src(c, t, ts, rows, cols, e);
    if (rc)
        return rc;
    fl_conv_job j = {c, dst, t, ts, (int)rows, cols, bf16, grp, off};
    fl_pool_run(c->pool, fl_job_convert, &j);
    fl_drop_pages(t);
    fl_drop_pages(ts);
    return 0;
}

/* ---- quantizing at load: a slot's rows, 16 (one tile of quant.h's repacked layout) at a
 * time, from whatever the file holds, straight into the arena: no f32 copy of the model is
 * ever held (per thread: one tile's rows as f32 and as plain quants). */

#define FL_QCHUNK 16 /* tiles (of FL_QR rows) per take of a quantizing job */

typedef struct fl_qslot_job {
    fl_cpu *c;
    const fl_wslot *s;
    const fl_tensor *ts[FL_WSLOT_PARTS]; /* the parts' scales when quantized */
    uint8_t *rq;  /* repacked quants */
    uint16_t *rd; /* repacked scales */
    bool q4;
    int grp;      /* gate|up: rows interleaved in groups of grp (0: parts one after another) */
    atomic_int next, failed;
    fl_err e;     /* the first failure's message */
} fl_qslot_job;

/* The file row behind slot row r: its part and row in that part. */
static void fl_qslot_src(const fl_qslot_job *j, size_t r, int *part, size_t *row)
{
    const fl_wslot *s = j->s;
    if (j->grp) { /* as fl_conv_job: part 0's row i at (i / grp) * 2 grp + i % grp, part 1 + grp */
        size_t g2 = 2 * (size_t)j->grp, w = r % g2;
        *part = w < (size_t)j->grp ? 0 : 1;
        *row = r / g2 * j->grp + w % j->grp;
        return;
    }
    int k = 0;
    while (k + 1 < FL_WSLOT_PARTS && s->src[k + 1] && r >= s->part_elems[k] / s->cols)
        r -= s->part_elems[k++] / s->cols;
    *part = k;
    *row = r;
}

static void fl_qslot_fail(fl_qslot_job *j, const fl_err *e)
{
    int want = 0;
    if (atomic_compare_exchange_strong(&j->failed, &want, 1))
        j->e = *e;
}

static void fl_job_qslot(void *ctx, int tid, int nt)
{
    fl_qslot_job *j = ctx;
    const fl_wslot *s = j->s;
    int k = (int)s->cols, G = k / FL_QG;
    size_t rows = s->rows, tiles = (rows + FL_QR - 1) / FL_QR;
    float *x = malloc((size_t)FL_QR * k * sizeof *x);          /* (16, k) */
    uint8_t *q = malloc((size_t)FL_QR * k);                    /* (16, k) q8 or (16, k/2) q4 */
    uint16_t *d = malloc((size_t)FL_QR * G * sizeof *d);       /* (16, G) */
    fl_err e = {0};
    if (!x || !q || !d) {
        fl_err_set(&e, FL_ENOMEM, "cpu backend: out of memory quantizing %s", s->src[0]->name);
        fl_qslot_fail(j, &e);
    }
    /* FL_QCHUNK tiles per take: their source pages are given back together (fl_drop_range),
     * as each madvise costs a TLB shootdown on every core */
    size_t chunks = (tiles + FL_QCHUNK - 1) / FL_QCHUNK;
    for (size_t ch; x && q && d && !atomic_load(&j->failed) &&
                    (ch = (size_t)fl_pool_next(&j->next)) < chunks;) {
        size_t lo[FL_WSLOT_PARTS], hi[FL_WSLOT_PARTS] = {0}; /* source rows read, per part */
        for (int p = 0; p < FL_WSLOT_PARTS; p++)
            lo[p] = SIZE_MAX;
        for (size_t t = ch * FL_QCHUNK; t < tiles && t < (ch + 1) * FL_QCHUNK; t++) {
            size_t r0 = t * FL_QR, nr = rows - r0 < FL_QR ? rows - r0 : FL_QR;
            bool plain = true; /* every row's file tensor already in the slot's format: copy */
            for (size_t i = 0; i < nr; i++) {
                int p;
                size_t row;
                fl_qslot_src(j, r0 + i, &p, &row);
                const fl_tensor *src = s->src[p];
                if (src->dtype == (j->q4 ? FL_DT_U8 : FL_DT_I8)) {
                    size_t qb = j->q4 ? (size_t)k / 2 : (size_t)k;
                    memcpy(q + i * qb, (const uint8_t *)src->data + row * qb, qb);
                    memcpy(d + i * G, (const uint16_t *)j->ts[p]->data + row * G, (size_t)G * 2);
                    continue;
                }
                plain = false;
                if (fl_matrix_rows_f32(x + i * k, src, j->ts[p], row, 1, (size_t)k, &e)) {
                    fl_qslot_fail(j, &e);
                    break;
                }
            }
            if (atomic_load(&j->failed))
                break;
            if (!plain) { /* some rows are float: quantize the tile's float rows, keep the others */
                for (size_t i = 0; i < nr; i++) {
                    int p;
                    size_t row;
                    fl_qslot_src(j, r0 + i, &p, &row);
                    if (s->src[p]->dtype == (j->q4 ? FL_DT_U8 : FL_DT_I8))
                        continue;
                    int rc = j->q4 ? fl_q4_quantize(q + i * (k / 2), d + i * G, x + i * k, 1, k, &e)
                                   : fl_q8_quantize((int8_t *)q + i * k, d + i * G, x + i * k, 1, k,
                                                    &e);
                    if (rc) {
                        fl_err why = e;
                        fl_err_set(&e, rc, "cpu backend: %s row %zu: %s", s->src[p]->name, row,
                                   why.msg);
                        fl_qslot_fail(j, &e);
                        break;
                    }
                }
                if (atomic_load(&j->failed))
                    break;
            }
            if (j->q4)
                fl_q4_repack(j->rq + r0 * k / 2, j->rd + r0 * G, q, d, (int)nr, k);
            else
                fl_q8_repack(j->rq + r0 * k, j->rd + r0 * G, (const int8_t *)q, d, (int)nr, k);
            for (size_t i = 0; i < nr; i++) {
                int p;
                size_t row;
                fl_qslot_src(j, r0 + i, &p, &row);
                lo[p] = row < lo[p] ? row : lo[p];
                hi[p] = row + 1 > hi[p] ? row + 1 : hi[p];
            }
        }
        for (int p = 0; p < FL_WSLOT_PARTS && s->src[p]; p++) {
            const fl_tensor *src = s->src[p];
            size_t rb = (size_t)k * fl_dtype_size(src->dtype) / (src->dtype == FL_DT_U8 ? 2 : 1);
            if (hi[p] > lo[p])
                fl_drop_range((const char *)src->data + lo[p] * rb, (hi[p] - lo[p]) * rb, true);
        }
    }
    free(x);
    free(q);
    free(d);
}

/* The interleave of a gate|up slot's rows (groups of this many gate rows, then as many up
 * rows), 0 for any other slot. */
static int fl_slot_grp(const fl_cpu *c, const fl_wslot *s)
{
    switch (s->role) {
    case FL_W_GATE_UP: return c->ib;
    case FL_W_EXPERT_GATE_UP: return c->eib;
    case FL_W_SHARED_GATE_UP: return c->sib;
    default: return 0;
    }
}

/* Fills a q8/q4 slot (quant.h's repacked layout at dst: quants, then the scales at the next
 * 64 bytes) from its file tensors. */
static int fl_cpu_quantize_slot(fl_cpu *c, const fl_wslot *s, char *dst, bool q4, fl_err *e)
{
    fl_qslot_job j = {.c = c, .s = s, .rq = (uint8_t *)dst, .q4 = q4, .grp = fl_slot_grp(c, s)};
    j.rd = (uint16_t *)(dst + fl_qr_scales_at((int)s->rows, (int)s->cols, q4));
    for (int k = 0; k < FL_WSLOT_PARTS && s->src[k]; k++) {
        j.ts[k] = fl_model_scales(c->base.model, s->src[k]);
        size_t rows = j.grp ? s->rows / 2 : s->part_elems[k] / s->cols;
        int rc = fl_cpu_check_src(c, s->src[k], j.ts[k], rows, s->cols, e);
        if (rc)
            return rc;
    }
    atomic_init(&j.next, 0);
    atomic_init(&j.failed, 0);
    fl_pool_run(c->pool, fl_job_qslot, &j);
    if (atomic_load(&j.failed)) {
        *e = j.e;
        return e->code ? e->code : FL_EINVAL;
    }
    for (int k = 0; k < FL_WSLOT_PARTS && s->src[k]; k++) {
        fl_drop_pages(s->src[k]);
        fl_drop_pages(j.ts[k]);
    }
    return 0;
}

/* The format of a matrix slot: plain (f32 or bf16) for f32/bf16 weights; for q8/q4, q8 for
 * the LM head (its quality: docs/benchmarks.md), the format asked for elsewhere, and bf16
 * for a matrix whose rows are not whole groups of 32. */
static fl_mfmt fl_cpu_slot_fmt(const fl_cpu *c, fl_wrole role, size_t cols)
{
    if (c->wf != FL_WEIGHTS_Q8 && c->wf != FL_WEIGHTS_Q4)
        return c->bf16 ? FL_MF_BF16 : FL_MF_F32;
    if (cols % FL_QG)
        return FL_MF_BF16;
    if (role == FL_W_LM_HEAD || role == FL_W_EMBED || c->wf == FL_WEIGHTS_Q8)
        return FL_MF_Q8;
    return FL_MF_Q4;
}

/* fl_wplan_opts.mat_bytes: a q8/q4 slot's quants, then its scales 64-aligned. */
static size_t fl_cpu_mat_bytes(void *ctx, fl_wrole role, size_t rows, size_t cols)
{
    fl_mfmt f = fl_cpu_slot_fmt(ctx, role, cols);
    if (f != FL_MF_Q8 && f != FL_MF_Q4)
        return 0;
    return fl_qr_scales_at((int)rows, (int)cols, f == FL_MF_Q4) +
           fl_qr_scale_count((int)rows, (int)cols) * 2;
}

/* Large buffers (weights, KV pool) come from mmap with transparent huge pages requested:
 * 2 MB pages make creating them ~500x fewer page faults, and let the hardware prefetcher,
 * which stops at page boundaries, run on through the weights a matmul streams. */
#define FL_HUGE ((size_t)2 << 20)

static void *fl_big_alloc(size_t bytes, size_t *mapped)
{
    size_t len = bytes + FL_HUGE;
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, len, MADV_HUGEPAGE);
#endif
    *mapped = len;
    return p;
}

static void *fl_huge_align(void *p) { return (void *)(((uintptr_t)p + FL_HUGE - 1) & ~(FL_HUGE - 1)); }

static int fl_cpu_norm_vec(float **out, float *dst, const fl_tensor *t, size_t n, fl_err *e)
{
    *out = dst;
    if (!t)
        return 0;
    if ((size_t)t->numel != n || fl_to_f32(dst, t->data, t->dtype, n))
        return fl_err_set(e, FL_EFORMAT, "cpu backend: tensor %s: expected %zu float values",
                          t->name, n);
    return 0;
}

/* Converts one slot of the weight plan into dst and points the backend at it. */
static int fl_cpu_fill(fl_cpu *c, const fl_wslot *s, char *dst, fl_err *e)
{
    fl_cpu_layer *cl = s->layer >= 0 ? &c->layers[s->layer] : NULL;
    /* vectors (norms, biases, the RoPE table) are f32, told by role and never by shape (a
     * one-row matrix is still a matrix, sized by the plan in its matrix format); the router
     * is f32 whatever the matrices are: it routes in fp32 */
    bool vec = s->role == FL_W_ATTN_NORM || s->role == FL_W_MLP_NORM || s->role == FL_W_Q_NORM ||
               s->role == FL_W_K_NORM || s->role == FL_W_FINAL_NORM ||
               s->role == FL_W_QKV_BIAS || s->role == FL_W_EXPERT_BIAS ||
               s->role == FL_W_ROPE || s->role == FL_W_ROUTER;
    fl_mfmt fmt = vec ? FL_MF_F32 : fl_cpu_slot_fmt(c, s->role, s->cols);
    fl_mat mat = {dst, NULL, (int)s->rows, (int)s->cols, fmt};
    bool bf16 = fmt == FL_MF_BF16;
    size_t es = bf16 ? 2 : 4;
    int rc;
    if (fl_mat_quantized(&mat)) {
        bool q4 = fmt == FL_MF_Q4;
        mat.scales = (const uint16_t *)(dst + fl_qr_scales_at((int)s->rows, (int)s->cols, q4));
        switch (s->role) {
        case FL_W_QKV: cl->wqkv = mat; break;
        case FL_W_O: cl->wo = mat; break;
        case FL_W_GATE_UP: cl->wgu = mat; break;
        case FL_W_DOWN: cl->wdown = mat; break;
        case FL_W_LM_HEAD: c->lm_head = mat; break;
        case FL_W_EXPERT_GATE_UP: cl->egu[s->expert] = mat; break;
        case FL_W_EXPERT_DOWN: cl->edown[s->expert] = mat; break;
        case FL_W_SHARED_GATE_UP: cl->sgu = mat; break;
        case FL_W_SHARED_DOWN: cl->sdown = mat; break;
        default: abort(); /* the embedding is not asked for */
        }
        return fl_cpu_quantize_slot(c, s, dst, q4, e);
    }
    if (s->mapped) { /* the plan checked that the file's tensor is the matrix as we hold it */
        mat.data = s->src[0]->data;
        c->mapped_bytes += s->rows * s->cols * es;
        switch (s->role) {
        case FL_W_O: cl->wo = mat; return 0;
        case FL_W_DOWN: cl->wdown = mat; return 0;
        case FL_W_LM_HEAD: c->lm_head = mat; return 0;
        case FL_W_EXPERT_DOWN: cl->edown[s->expert] = mat; return 0;
        case FL_W_SHARED_DOWN: cl->sdown = mat; return 0;
        default: abort(); /* the plan maps no other slot we ask for */
        }
    }
    switch (s->role) {
    case FL_W_QKV:
        cl->wqkv = mat;
        for (int k = 0; k < FL_WSLOT_PARTS && s->src[k]; k++) { /* one part when fused */
            if ((rc = fl_cpu_convert(c, dst, bf16, s->src[k], s->part_elems[k] / s->cols,
                                     s->cols, 0, 0, e)))
                return rc;
            dst += s->part_elems[k] * es;
        }
        return 0;
    case FL_W_QKV_BIAS: {
        float *bias = (float *)dst;
        cl->bqkv = bias;
        for (int k = 0; k < FL_WSLOT_PARTS; bias += s->part_elems[k++])
            if (fl_to_f32(bias, s->src[k]->data, s->src[k]->dtype, s->part_elems[k]))
                return fl_err_set(e, FL_EFORMAT, "cpu backend: layer %d: bad q/k/v bias",
                                  s->layer);
        return 0;
    }
    case FL_W_O:
        cl->wo = mat;
        return fl_cpu_convert(c, dst, bf16, s->src[0], s->rows, s->cols, 0, 0, e);
    case FL_W_GATE_UP:
        /* gate|up interleaved in groups of ib rows, so that a thread holding output columns
         * [16g, 16g + 16) has both halves of SwiGLU's inputs for 8 features */
        cl->wgu = mat;
        if ((rc = fl_cpu_convert(c, dst, bf16, s->src[0], s->rows / 2, s->cols, c->ib, 0, e)))
            return rc;
        return fl_cpu_convert(c, dst, bf16, s->src[1], s->rows / 2, s->cols, c->ib, c->ib, e);
    case FL_W_DOWN:
        cl->wdown = mat;
        return fl_cpu_convert(c, dst, bf16, s->src[0], s->rows, s->cols, 0, 0, e);
    case FL_W_EXPERT_GATE_UP:
    case FL_W_SHARED_GATE_UP: {
        int grp = fl_slot_grp(c, s);
        if (s->role == FL_W_SHARED_GATE_UP)
            cl->sgu = mat;
        else
            cl->egu[s->expert] = mat;
        if ((rc = fl_cpu_convert(c, dst, bf16, s->src[0], s->rows / 2, s->cols, grp, 0, e)))
            return rc;
        return fl_cpu_convert(c, dst, bf16, s->src[1], s->rows / 2, s->cols, grp, grp, e);
    }
    case FL_W_EXPERT_DOWN:
    case FL_W_SHARED_DOWN:
        if (s->role == FL_W_SHARED_DOWN)
            cl->sdown = mat;
        else
            cl->edown[s->expert] = mat;
        return fl_cpu_convert(c, dst, bf16, s->src[0], s->rows, s->cols, 0, 0, e);
    case FL_W_ROUTER:
        cl->router = mat;
        return fl_cpu_convert(c, dst, false, s->src[0], s->rows, s->cols, 0, 0, e);
    case FL_W_EXPERT_BIAS:
        return fl_cpu_norm_vec(&cl->ebias, (float *)dst, s->src[0], s->cols, e);
    case FL_W_ATTN_NORM:
        return fl_cpu_norm_vec(&cl->attn_norm, (float *)dst, s->src[0], s->cols, e);
    case FL_W_MLP_NORM:
        return fl_cpu_norm_vec(&cl->mlp_norm, (float *)dst, s->src[0], s->cols, e);
    case FL_W_Q_NORM:
        return fl_cpu_norm_vec(&cl->q_norm, (float *)dst, s->src[0], s->cols, e);
    case FL_W_K_NORM:
        return fl_cpu_norm_vec(&cl->k_norm, (float *)dst, s->src[0], s->cols, e);
    case FL_W_LM_HEAD:
        c->lm_head = mat;
        return fl_cpu_convert(c, dst, bf16, s->src[0], s->rows, s->cols, 0, 0, e);
    case FL_W_FINAL_NORM:
        return fl_cpu_norm_vec(&c->final_norm, (float *)dst, s->src[0], s->cols, e);
    default: /* the embedding and the RoPE table are not asked for */
        abort();
    }
}

/* Converts the weights into one mapping, where the weight plan puts them (64: rows start on
 * cache lines). FL_ENOMEM without a message when the mapping fails. */
static int fl_cpu_place_weights(fl_cpu *c, const fl_model *m, fl_err *e)
{
    bool q = c->wf == FL_WEIGHTS_Q8 || c->wf == FL_WEIGHTS_Q4;
    fl_wplan_opts po = {.align = 64, .mat_elem = c->bf16 ? 2 : 4, .map = true,
                        .mat_bytes = q ? fl_cpu_mat_bytes : NULL, .ctx = c};
    fl_wplan p;
    int rc = fl_wplan_build(&p, m, &po, e);
    c->arena_bytes = rc ? 0 : p.bytes;
    if (!rc && !(c->weights_mem = fl_big_alloc(p.bytes, &c->weights_len)))
        rc = FL_ENOMEM;
    char *base = rc ? NULL : fl_huge_align(c->weights_mem);
    for (int i = 0; i < p.n && !rc; i++)
        rc = fl_cpu_fill(c, &p.slot[i], base + p.slot[i].off, e);
    fl_wplan_free(&p);
    return rc;
}

/* ---------------------------------------------------------------- forward jobs */

typedef struct fl_fwd {
    fl_cpu *c;
    const fl_batch *bt;
    int n;     /* tokens */
    int layer;
    /* a plain projection job */
    float *y;
    int ldy;
    const float *x;
    int ldx, m;
    const fl_mat *w;
    const void *qx; /* the projection's input quantized (c->qx) when its weights are q8/q4 */
    void *qdst;     /* fl_quantize_rows: where the rows go, and their width */
    int qk;
    bool acc;
    /* attention */
    atomic_int next;
    int n_items;
    /* lm_head */
    int n_out;
    float *logits;
} fl_fwd;

/* Jobs take their work in chunks from a shared counter rather than fixed shares: on cores
 * shared with other processes a descheduled thread then delays only its current chunk, not
 * its whole share. Which thread computes a chunk never changes its result. */
static void fl_run(fl_fwd *f, fl_pool_fn fn)
{
    atomic_store(&f->next, 0);
    fl_pool_run(f->c->pool, fn, f);
}

/* The matmul jobs: n chunks of weight rows in contiguous shares (threadpool.h), taken by
 * fl_next_chunk, so that each thread streams one run of the weights. */
static void fl_run_chunks(fl_fwd *f, fl_pool_fn fn, int n)
{
    fl_shares_init(f->c->shares, f->c->nt, n);
    fl_pool_run(f->c->pool, fn, f);
}

static int fl_next_chunk(fl_fwd *f, int tid) { return fl_shares_next(f->c->shares, f->c->nt, tid); }

static int fl_chunk_rows(const fl_cpu *c, int m) { return m < c->sgemm_rows ? FL_ROWS : FL_ROWS_GEMM; }

static void fl_job_matmul(void *ctx, int tid, int nt)
{
    fl_fwd *f = ctx;
    int chunk = fl_chunk_rows(f->c, f->m);
    for (int ch, lo; (ch = fl_next_chunk(f, tid)) >= 0 && (lo = ch * chunk) < f->w->rows;) {
        int cnt = f->w->rows - lo < chunk ? f->w->rows - lo : chunk;
        fl_matmul(&f->c->kk, f->y + lo, f->ldy, f->x, f->ldx, f->qx, f->m, f->w, lo, cnt,
                  f->acc, f->c->sgemm_rows, f->c->ts[tid].mm);
    }
}

static void fl_job_qx(void *ctx, int tid, int nt)
{
    fl_fwd *f = ctx;
    int lo, hi, k = f->qk;
    fl_split(f->m, nt, tid, 1, &lo, &hi);
    if (hi > lo)
        f->c->kk.qx_quantize((char *)f->qdst + (size_t)lo * fl_qx_row_bytes(k),
                             f->x + (size_t)lo * f->ldx, f->ldx, hi - lo, k);
}

/* Quantizes the m rows of x (k wide) into dst (fl_qx_row_bytes(k) each) for the integer
 * kernels, on the pool when there are many. */
static void fl_quantize_rows(fl_fwd *f, void *dst, const float *x, int ldx, int m, int k)
{
    f->qdst = dst;
    f->x = x;
    f->ldx = ldx;
    f->m = m;
    f->qk = k;
    if ((size_t)m * k >= (size_t)1 << 16)
        fl_pool_run(f->c->pool, fl_job_qx, f);
    else
        f->c->kk.qx_quantize(dst, x, ldx, m, k);
}

/* Before a projection by w of the m rows of x: with q8/q4 weights, quantizes the rows into
 * c->qx once for every thread, and points f->qx at it. */
static void fl_quantize_input(fl_fwd *f, const float *x, int ldx, int m, const fl_mat *w)
{
    f->qx = NULL;
    if (!fl_mat_quantized(w))
        return;
    fl_quantize_rows(f, f->c->qx, x, ldx, m, w->cols);
    f->qx = f->c->qx;
}

static void fl_par_matmul(fl_fwd *f, float *y, int ldy, const float *x, int ldx, int m,
                          const fl_mat *w, bool acc)
{
    fl_quantize_input(f, x, ldx, m, w);
    f->y = y;
    f->ldy = ldy;
    f->x = x;
    f->ldx = ldx;
    f->m = m;
    f->w = w;
    f->acc = acc;
    int chunk = fl_chunk_rows(f->c, m);
    fl_run_chunks(f, fl_job_matmul, (w->rows + chunk - 1) / chunk);
}

/* The first value of one (page, layer, k|v, kv head) in the pool: block_size rows of
 * head_dim. The pool is not page after page: it is one plane per (layer, k|v, kv head), and
 * in a plane the pages' runs of block_size rows follow each other by page id. Attention reads
 * one plane at a time, the runs of a segment's pages in order; pages handed out in order (as
 * the pool does to a fresh request) are then one stream of memory that the hardware
 * prefetchers follow, where page after page put 2 KB runs (block 4, head_dim 128, f32) a
 * whole page (896 KB for Qwen3-0.6B) apart. page_read/page_write gather and scatter a page's
 * n_layers x 2 x kv_heads runs from and to the host layout. */
static size_t fl_run_at(const fl_cpu *c, int32_t page, size_t r)
{
    return (r * (size_t)c->base.n_pages + (size_t)page) * c->run;
}

static size_t fl_page_at(const fl_cpu *c, int32_t page, int layer, int kv, int head)
{
    return fl_run_at(c, page, ((size_t)layer * 2 + kv) * (size_t)c->cfg.n_kv_heads + head);
}

static float *fl_page_kv(const fl_cpu *c, int32_t page, int layer, int kv, int head)
{
    return (float *)c->kv + fl_page_at(c, page, layer, kv, head);
}

static uint16_t *fl_page_kv16(const fl_cpu *c, int32_t page, int layer, int kv, int head)
{
    return (uint16_t *)c->kv + fl_page_at(c, page, layer, kv, head);
}

/* Finishes q|k|v columns [lo, hi) (whole heads) of every token: bias, q/k norm, RoPE, and
 * the store of the first n_store tokens' K/V of each segment to its pages.
 *
 * With bf16 pages, every token's K/V is rounded to bf16 here (into c->kvown), stored or not,
 * and attention reads only those rounded values, for this forward's keys as for cached ones.
 * Reading this forward's own keys in f32 instead would make a position's outputs depend on
 * whether its keys were cached or computed in the same pass: a store-and-decode pass would
 * differ from a store pass followed by a decode pass, and pipelining would change outputs.
 * Rounded, a key is the same bf16 value wherever it comes from (the CUDA backend does the
 * same, docs/cuda.md), and the rounding happens once per token here, on the pool, not once
 * per attention tile. */
static void fl_qkv_heads(fl_fwd *f, const fl_cpu_layer *cl, int lo, int hi)
{
    fl_cpu *c = f->c;
    const fl_config *cf = &c->cfg;
    int hd = cf->head_dim, n = f->n, ld = c->qkv_dim, nh = cf->n_heads, kvh = cf->n_kv_heads;
    for (int col = lo; col < hi; col += hd) {
        int head = col / hd; /* 0..nh-1 q, nh..nh+kvh-1 k, then v */
        if (cl->bqkv)
            for (int t = 0; t < n; t++)
                for (int d = 0; d < hd; d++)
                    c->qkv[(size_t)t * ld + col + d] += cl->bqkv[col + d];
        if (head < nh + kvh) { /* each token: norm, then RoPE on the first rd dims */
            const float *nw = head < nh ? cl->q_norm : cl->k_norm;
            if (nw)
                fl_rmsnorm_rows(c->qkv + col, (size_t)ld, c->qkv + col, (size_t)ld, nw, n, hd,
                                cf->rms_eps);
            for (int t = 0; t < n; t++)
                fl_rope(c->qkv + (size_t)t * ld + col, c->rope + (size_t)t * c->rd, c->rd);
        }
        if (head < nh)
            continue;
        int kv = head < nh + kvh ? 0 : 1, g = head - nh - kv * kvh;
        int B = cf->block_size, t0 = 0;
        /* kv16: row t of this head in kvown */
        size_t own = (size_t)kv * c->kv_dim + (size_t)g * hd, ldo = 2 * (size_t)c->kv_dim;
        if (c->kv16)
            for (int t = 0; t < n; t++)
                c->kk.f32_to_bf16(c->kvown + t * ldo + own, c->qkv + (size_t)t * ld + col, hd);
        for (int s = 0; s < f->bt->n_segs; s++) {
            const fl_segment *sg = &f->bt->segs[s];
            for (int i = 0; i < sg->n_store; i++) {
                int p = sg->pos0 + i;
                int32_t pg = sg->pages[p / B];
                if (c->kv16)
                    memcpy(fl_page_kv16(c, pg, f->layer, kv, g) + (size_t)(p % B) * hd,
                           c->kvown + (t0 + i) * ldo + own, (size_t)hd * 2);
                else
                    memcpy(fl_page_kv(c, pg, f->layer, kv, g) + (size_t)(p % B) * hd,
                           c->qkv + (size_t)(t0 + i) * ld + col, (size_t)hd * 4);
            }
            t0 += sg->n;
        }
    }
}

/* fl_job_qkv's chunk: whole heads; with q8/q4, whole tiles of FL_QR rows too. */
static int fl_qkv_chunk(const fl_cpu *c, const fl_cpu_layer *cl, int n)
{
    int unit = c->cfg.head_dim, rows = fl_chunk_rows(c, n);
    if (fl_mat_quantized(&cl->wqkv))
        while (unit % FL_QR)
            unit += c->cfg.head_dim;
    return unit * (rows / unit > 1 ? rows / unit : 1);
}

/* q|k|v projection of all tokens, a chunk of whole heads at a time, each finished at once
 * while its columns are in cache. */
static void fl_job_qkv(void *ctx, int tid, int nt)
{
    fl_fwd *f = ctx;
    fl_cpu *c = f->c;
    const fl_config *cf = &c->cfg;
    const fl_cpu_layer *cl = &c->layers[f->layer];
    int n = f->n, ld = c->qkv_dim, chunk = fl_qkv_chunk(c, cl, n);
    for (int ch, lo; (ch = fl_next_chunk(f, tid)) >= 0 && (lo = ch * chunk) < c->qkv_dim;) {
        int hi = lo + chunk < c->qkv_dim ? lo + chunk : c->qkv_dim;
        fl_matmul(&c->kk, c->qkv + lo, ld, c->xb, cf->hidden, f->qx, n, &cl->wqkv, lo, hi - lo,
                  false, c->sgemm_rows, c->ts[tid].mm);
        fl_qkv_heads(f, cl, lo, hi);
    }
}

/* Attention work items: (segment, kv head, tile of FL_QTILE query rows). Rows of a segment
 * are ordered token-major (row = i * rep + r for token i, query head g * rep + r), so a tile
 * holds neighbouring tokens, whose key ranges (their blocks) nearly agree. */
/* The row stride of a tile's scores for keys [0, kmax): kmax rounded up to 16 floats, plus
 * 16, and never a multiple of 4 KB. A stride of max_pos floats (160 KB at Qwen3's 40,960)
 * put the 16 rows that qk writes, the softmax reads and pv broadcasts from in one L1 set
 * (4 KB aliasing: 8 ways for 16 rows), and a block-32 tile's qk and pv ran at 1.5-1.9x their
 * time on the same keys with short rows (docs/benchmarks.md, "Score rows"). At most
 * max_pos + FL_SCORE_PAD. */
#define FL_SCORE_PAD 48
static int fl_score_ld(int kmax)
{
    int lds = ((kmax + 15) & ~15) + 16;
    return lds % 1024 ? lds : lds + 16;
}

static void fl_attend_item(fl_fwd *f, int it, int tid)
{
    fl_cpu *c = f->c;
    const fl_config *cf = &c->cfg;
    const fl_batch *bt = f->bt;
    int hd = cf->head_dim, kvh = cf->n_kv_heads, rep = cf->n_heads / kvh, B = cf->block_size;
    int ld = c->qkv_dim;
    /* find the segment: item0 is increasing */
    int s = 0;
    while (c->item0[s + 1] <= it)
        s++;
    const fl_segment *sg = &bt->segs[s];
    int local = it - c->item0[s];
    int tiles = (sg->n * rep + FL_QTILE - 1) / FL_QTILE;
    int g = local / tiles, tile = local % tiles;
    int r0 = tile * FL_QTILE, r1 = r0 + FL_QTILE < sg->n * rep ? r0 + FL_QTILE : sg->n * rep;
    int nr = r1 - r0, tok0 = c->seg_tok0[s], pos0 = sg->pos0;
    fl_tscratch *ts = &c->ts[tid];
    float *q = ts->att_q, *o = ts->att_o, *S = ts->att_s;
    for (int r = r0; r < r1; r++) { /* o serves as the row-major staging of the tile */
        int i = r / rep, h = g * rep + r % rep;
        memcpy(o + (size_t)(r - r0) * hd, c->qkv + (size_t)(tok0 + i) * ld + (size_t)h * hd,
               (size_t)hd * 4);
    }
    fl_transpose_q(q, o, hd, nr, hd);
    /* keys [0, kmax): the last row's block end, or the segment's end */
    int seg_end = pos0 + sg->n;
    int last = pos0 + (r1 - 1) / rep;
    int kmax = (last / B + 1) * B < seg_end ? (last / B + 1) * B : seg_end;
    float scale = 1.0f / sqrtf((float)hd);
    int lds = fl_score_ld(kmax);
    /* rows of keys [0, kmax): from the pages below pos0, from this forward above (with bf16
     * pages, its K/V as rounded for them: fl_qkv_heads) */
    int cached = pos0 < kmax ? pos0 : kmax;
    if (c->kv16) {
        const uint16_t **kr = ts->kr16, **vr = ts->vr16;
        for (int j = 0; j < cached; j += B) {
            const uint16_t *kp = fl_page_kv16(c, sg->pages[j / B], f->layer, 0, g);
            const uint16_t *vp = fl_page_kv16(c, sg->pages[j / B], f->layer, 1, g);
            for (int t = 0; t < B && j + t < cached; t++) {
                kr[j + t] = kp + (size_t)t * hd;
                vr[j + t] = vp + (size_t)t * hd;
            }
        }
        const uint16_t *kown = c->kvown + (size_t)tok0 * 2 * c->kv_dim + (size_t)g * hd;
        for (int j = cached; j < kmax; j++) {
            kr[j] = kown + (size_t)(j - pos0) * 2 * c->kv_dim;
            vr[j] = kr[j] + c->kv_dim;
        }
        c->kk.qk_bf16(S, lds, q, nr, kr, kmax, hd, scale, ts->att_w);
    } else {
        const float **kr = ts->kr, **vr = ts->vr;
        for (int j = 0; j < cached; j += B) {
            const float *kp = fl_page_kv(c, sg->pages[j / B], f->layer, 0, g);
            const float *vp = fl_page_kv(c, sg->pages[j / B], f->layer, 1, g);
            for (int t = 0; t < B && j + t < cached; t++) {
                kr[j + t] = kp + (size_t)t * hd;
                vr[j + t] = vp + (size_t)t * hd;
            }
        }
        const float *kown = c->qkv + (size_t)tok0 * ld + c->q_dim + (size_t)g * hd;
        for (int j = cached; j < kmax; j++) {
            kr[j] = kown + (size_t)(j - pos0) * ld;
            vr[j] = kr[j] + c->kv_dim;
        }
        c->kk.qk(S, lds, q, nr, kr, kmax, hd, scale);
    }
    for (int r = r0; r < r1; r++) {
        int p = pos0 + r / rep;
        int kend = (p / B + 1) * B < seg_end ? (p / B + 1) * B : seg_end;
        float *srow = S + (size_t)(r - r0) * lds;
        c->kk.softmax(srow, kend);
        for (int j = kend; j < kmax; j++)
            srow[j] = 0; /* a later block: weight exactly 0, so it adds exactly nothing */
    }
    memset(o, 0, (size_t)nr * hd * 4);
    if (c->kv16)
        c->kk.pv_bf16(o, hd, S, lds, nr, ts->vr16, kmax, hd, ts->att_w);
    else
        c->kk.pv(o, hd, S, lds, nr, ts->vr, kmax, hd);
    for (int r = r0; r < r1; r++) {
        int i = r / rep, h = g * rep + r % rep;
        memcpy(c->att + (size_t)(tok0 + i) * c->q_dim + (size_t)h * hd,
               o + (size_t)(r - r0) * hd, (size_t)hd * 4);
    }
}

static void fl_job_attention(void *ctx, int tid, int nt)
{
    fl_fwd *f = ctx;
    for (int it; (it = fl_pool_next(&f->next)) < f->n_items;)
        fl_attend_item(f, it, tid);
}

/* gate|up projection and SwiGLU, a chunk of columns (whole groups of 2 * ib) at a time. */
static void fl_job_mlp_up(void *ctx, int tid, int nt)
{
    fl_fwd *f = ctx;
    fl_cpu *c = f->c;
    const fl_cpu_layer *cl = &c->layers[f->layer];
    int NI = c->cfg.intermediate, ib = c->ib, n = f->n, chunk = fl_chunk_rows(c, n);
    for (int ch, lo; (ch = fl_next_chunk(f, tid)) >= 0 && (lo = ch * chunk) < 2 * NI;) {
        int hi = lo + chunk < 2 * NI ? lo + chunk : 2 * NI;
        fl_matmul(&c->kk, c->gu + lo, 2 * NI, c->xb, c->cfg.hidden, f->qx, n, &cl->wgu, lo,
                  hi - lo, false, c->sgemm_rows, c->ts[tid].mm);
        for (int t = 0; t < n; t++)
            c->kk.swiglu(c->hb + (size_t)t * NI + lo / 2, c->gu + (size_t)t * 2 * NI + lo,
                         (hi - lo) / (2 * ib), ib);
    }
}

/* lm_head, a chunk of the vocabulary at a time: logits of the chunk for every wanted row,
 * reduced to the chunk's softmax statistics (merged in chunk order afterwards, so the sums
 * do not depend on which thread took which chunk), copied out when asked. */
static int fl_head_chunk(const fl_cpu *c, int n_out) { return n_out < c->sgemm_rows ? FL_VCHUNK : FL_VCHUNK_GEMM; }

static void fl_job_head(void *ctx, int tid, int nt)
{
    fl_fwd *f = ctx;
    fl_cpu *c = f->c;
    int V = c->cfg.vocab, H = c->cfg.hidden, no = f->n_out;
    int chunk = fl_head_chunk(c, no);
    float *buf = c->ts[tid].logits;
    for (int ch; (ch = fl_next_chunk(f, tid)) >= 0 && ch * chunk < V;) {
        int v0 = ch * chunk, vn = V - v0 < chunk ? V - v0 : chunk;
        fl_matmul(&c->kk, buf, chunk, c->xb, H, f->qx, no, &c->lm_head, v0, vn, false,
                  c->sgemm_rows, c->ts[tid].mm);
        for (int i = 0; i < no; i++) {
            const float *l = buf + (size_t)i * chunk;
            for (int s0 = 0; s0 < vn; s0 += FL_VCHUNK) { /* statistics per FL_VCHUNK ids */
                fl_lse *lse = c->lse + (size_t)((v0 + s0) / FL_VCHUNK) * c->base.max_tokens + i;
                fl_lse_init(lse);
                c->kk.lse_add(lse, l + s0, vn - s0 < FL_VCHUNK ? vn - s0 : FL_VCHUNK, v0 + s0);
            }
            if (f->logits)
                memcpy(f->logits + (size_t)c->out_rows[i] * V + v0, l, (size_t)vn * 4);
        }
    }
}

/* ---------------------------------------------------------------- mixture of experts
 *
 * A MoE layer's MLP, for the n rows of c->xb (normed): the router's logits (one f32
 * projection), each token's top_k experts (moe.h; a pool job over the tokens), the
 * assignments ordered by expert (serial: n x top_k) and their rows gathered in that order (a
 * pool job), then two pool jobs whose items are (expert, chunk of rows): gate|up with
 * SwiGLU over the rows of the tokens sent to that expert, then down. Each touched expert's
 * weights are read once per forward, whatever the number of its tokens; an untouched one not
 * at all. The shared expert is one more item list over every token. Each token's output is
 * then summed in a fixed order (its experts best first, then the shared one; a pool job over
 * the tokens), so it never depends on the batch or on which thread took which item. */

#define FL_MOE_ROWS 64 /* weight rows per item: whole FL_QR tiles and gate|up groups */

static size_t fl_mat_bytes(const fl_mat *w)
{
    size_t n = (size_t)w->rows * w->cols;
    switch (w->fmt) {
    case FL_MF_F32: return n * 4;
    case FL_MF_BF16: return n * 2;
    case FL_MF_Q8: return n + n / FL_QG * 2;
    default: return n / 2 + n / FL_QG * 2;
    }
}

/* Appends the items of matrix w (rows split in FL_MOE_ROWS) for expert e; returns the new
 * count. */
static int fl_moe_add_items(fl_moe_item *it, int n, int e, int rows)
{
    for (int lo = 0; lo < rows; lo += FL_MOE_ROWS)
        it[n++] = (fl_moe_item){e, lo, rows - lo < FL_MOE_ROWS ? rows - lo : FL_MOE_ROWS};
    return n;
}

static void fl_job_moe_up(void *ctx, int tid, int nt)
{
    fl_fwd *f = ctx;
    fl_cpu *c = f->c;
    const fl_cpu_layer *cl = &c->layers[f->layer];
    int E = c->cfg.moe.n_experts, H = c->cfg.hidden, mi = c->cfg.moe.inter, smi = c->s_inter;
    size_t qr = fl_qx_row_bytes(H);
    for (int i; (i = fl_next_chunk(f, tid)) >= 0 && i < f->n_items;) {
        fl_moe_item it = c->items[i];
        if (it.e < E) {
            int a0 = c->eoff[it.e], m = c->eoff[it.e + 1] - a0, ld = 2 * mi;
            float *y = c->egu_o + (size_t)a0 * ld;
            fl_matmul(&c->kk, y + it.lo, ld, c->moe_qup ? NULL : c->xg + (size_t)a0 * H, H,
                      c->moe_qup ? (const char *)c->qxg + (size_t)a0 * qr : NULL, m, &cl->egu[it.e],
                      it.lo, it.n, false, c->sgemm_rows, c->ts[tid].mm);
            for (int r = 0; r < m; r++)
                c->kk.swiglu(c->eh + (size_t)(a0 + r) * mi + it.lo / 2, y + (size_t)r * ld + it.lo,
                             it.n / (2 * c->eib), c->eib);
        } else {
            int ld = 2 * smi;
            fl_matmul(&c->kk, c->sgu_o + it.lo, ld, c->xb, H, f->qx, f->n, &cl->sgu, it.lo, it.n,
                      false, c->sgemm_rows, c->ts[tid].mm);
            for (int r = 0; r < f->n; r++)
                c->kk.swiglu(c->sh + (size_t)r * smi + it.lo / 2,
                             c->sgu_o + (size_t)r * ld + it.lo, it.n / (2 * c->sib), c->sib);
        }
    }
}

static void fl_job_moe_down(void *ctx, int tid, int nt)
{
    fl_fwd *f = ctx;
    fl_cpu *c = f->c;
    const fl_cpu_layer *cl = &c->layers[f->layer];
    int E = c->cfg.moe.n_experts, H = c->cfg.hidden, mi = c->cfg.moe.inter, smi = c->s_inter;
    for (int i; (i = fl_next_chunk(f, tid)) >= 0 && i < f->n_items;) {
        fl_moe_item it = c->items[i];
        if (it.e < E) {
            int a0 = c->eoff[it.e], m = c->eoff[it.e + 1] - a0;
            fl_matmul(&c->kk, c->ey + (size_t)a0 * H + it.lo, H, c->eh + (size_t)a0 * mi, mi,
                      c->moe_qdown ? (const char *)c->qxe + (size_t)a0 * fl_qx_row_bytes(mi)
                                   : NULL, m,
                      &cl->edown[it.e], it.lo, it.n, false, c->sgemm_rows, c->ts[tid].mm);
        } else {
            fl_matmul(&c->kk, c->sy + it.lo, H, c->sh, smi, c->moe_qsdown ? c->qxs : NULL, f->n,
                      &cl->sdown,
                      it.lo, it.n, false, c->sgemm_rows, c->ts[tid].mm);
        }
    }
}

static void fl_job_router(void *ctx, int tid, int nt)
{
    fl_fwd *f = ctx;
    fl_cpu *c = f->c;
    int E = f->w->rows;
    for (int lo; (lo = fl_pool_next(&f->next) * FL_ROWS) < E;)
        fl_matmul(&c->kk, f->y + lo, E, c->xb, c->cfg.hidden, NULL, f->n, f->w, lo,
                  E - lo < FL_ROWS ? E - lo : FL_ROWS, false, INT_MAX, c->ts[tid].mm);
}

/* The MoE layer's per-token work besides the products, over the threads: each token's
 * routing (moe.h), the gathering of the rows in expert order, and the weighted sum of its
 * experts' outputs. Serial on thread 0 they were 15-20% of the routed layer's time at block
 * 32 (LLaDA2.0-mini shape, 2 threads). Tokens and assignments in chunks from the shared
 * counter; each is computed as before, by whichever thread: the same bits. */
#define FL_MOE_TOK 4 /* tokens (or assignments) per chunk */

static void fl_job_moe_route(void *ctx, int tid, int nt)
{
    fl_fwd *f = ctx;
    fl_cpu *c = f->c;
    const fl_moe *mo = &c->cfg.moe;
    const fl_cpu_layer *cl = &c->layers[f->layer];
    int E = mo->n_experts, K = mo->top_k;
    float *scr = c->rscr + (size_t)tid * fl_moe_scratch(mo);
    for (int t0; (t0 = fl_pool_next(&f->next) * FL_MOE_TOK) < f->n;)
        for (int t = t0; t < f->n && t < t0 + FL_MOE_TOK; t++)
            fl_moe_route(mo, c->rlog + (size_t)t * E, cl->ebias, c->rid + (size_t)t * K,
                         c->rw + (size_t)t * K, scr);
}

/* the inputs in expert order: f32 rows, or their quants (f->qx set) */
static void fl_job_moe_gather(void *ctx, int tid, int nt)
{
    fl_fwd *f = ctx;
    fl_cpu *c = f->c;
    int H = c->cfg.hidden, A = f->n * c->cfg.moe.top_k;
    size_t qr = fl_qx_row_bytes(H);
    for (int a0; (a0 = fl_pool_next(&f->next) * FL_MOE_TOK) < A;)
        for (int a = a0; a < A && a < a0 + FL_MOE_TOK; a++) {
            if (f->qx)
                memcpy((char *)c->qxg + (size_t)a * qr,
                       (const char *)f->qx + (size_t)c->atok[a] * qr, qr);
            else
                memcpy(c->xg + (size_t)a * H, c->xb + (size_t)c->atok[a] * H, (size_t)H * 4);
        }
}

/* each token: its experts' outputs weighted, best first, then the shared expert's, added to
 * the residual */
static void fl_job_moe_combine(void *ctx, int tid, int nt)
{
    fl_fwd *f = ctx;
    fl_cpu *c = f->c;
    int H = c->cfg.hidden, K = c->cfg.moe.top_k;
    bool shared = c->layers[f->layer].sgu.rows > 0;
    for (int t0; (t0 = fl_pool_next(&f->next) * FL_MOE_TOK) < f->n;)
        for (int t = t0; t < f->n && t < t0 + FL_MOE_TOK; t++) {
            const float *ys[FL_MOE_MAX_TOPK];
            for (int k = 0; k < K; k++)
                ys[k] = c->ey + (size_t)c->apos[t * K + k] * H;
            c->kk.moe_sum(c->x + (size_t)t * H, ys, c->rw + (size_t)t * K, K,
                          shared ? c->sy + (size_t)t * H : NULL, H);
        }
}

/* x += the MoE MLP of the n rows of xb, layer f->layer. */
static void fl_moe_forward(fl_fwd *f, const fl_cpu_layer *cl)
{
    fl_cpu *c = f->c;
    const fl_moe *mo = &c->cfg.moe;
    int n = f->n, E = mo->n_experts, K = mo->top_k, H = c->cfg.hidden, mi = mo->inter;
    bool shared = cl->sgu.rows > 0, q = c->moe_qup;
    /* route: the logits by the streaming kernel at every row count (never sgemm, whose sums
     * depend on the call's shape), so that a token's experts never depend on its batch */
    f->y = c->rlog;
    f->w = &cl->router;
    fl_run(f, fl_job_router);
    fl_run(f, fl_job_moe_route);
    if (c->rec_ids) {
        size_t at = ((size_t)f->layer * c->base.max_tokens) * K;
        memcpy(c->rec_ids + at, c->rid, (size_t)n * K * sizeof *c->rid);
        memcpy(c->rec_w + at, c->rw, (size_t)n * K * sizeof *c->rw);
    }
    /* assignments in expert order, tokens ascending within an expert */
    int32_t *cnt = c->eoff + E + 2; /* (E) fill counters */
    memset(c->eoff, 0, (size_t)(2 * E + 2) * sizeof *c->eoff);
    for (int a = 0; a < n * K; a++)
        c->eoff[c->rid[a] + 1]++;
    for (int e = 0; e < E; e++)
        c->eoff[e + 1] += c->eoff[e];
    c->eoff[E + 1] = c->eoff[E];
    for (int a = 0; a < n * K; a++) {
        int e = c->rid[a], at = c->eoff[e] + cnt[e]++;
        c->atok[at] = a / K;
        c->apos[a] = at;
    }
    /* the inputs in expert order: f32 rows, or their quants */
    if (q)
        fl_quantize_input(f, c->xb, H, n, &cl->egu[0]);
    else
        f->qx = NULL;
    fl_run(f, fl_job_moe_gather);
    /* gate|up and SwiGLU per touched expert, and the shared one (reading c->qx as is) */
    int ni = 0;
    fl_cpu_moe_stats *st = &c->st;
    st->moe_layers++;
    st->assignments += (int64_t)n * K;
    st->expert_bytes += (int64_t)fl_mat_bytes(&cl->router);
    for (int e = 0; e < E; e++)
        if (c->eoff[e + 1] > c->eoff[e]) {
            ni = fl_moe_add_items(c->items, ni, e, 2 * mi);
            st->touched++;
            st->expert_bytes += (int64_t)(fl_mat_bytes(&cl->egu[e]) + fl_mat_bytes(&cl->edown[e]));
        }
    if (shared) {
        ni = fl_moe_add_items(c->items, ni, E, 2 * c->s_inter);
        st->expert_bytes += (int64_t)(fl_mat_bytes(&cl->sgu) + fl_mat_bytes(&cl->sdown));
    }
    f->n_items = ni;
    fl_run_chunks(f, fl_job_moe_up, ni);
    /* down: the rows quantized first with q8/q4 weights */
    if (c->moe_qdown)
        fl_quantize_rows(f, c->qxe, c->eh, mi, n * K, mi);
    if (shared && c->moe_qsdown)
        fl_quantize_rows(f, c->qxs, c->sh, c->s_inter, n, c->s_inter);
    ni = 0;
    for (int e = 0; e < E; e++)
        if (c->eoff[e + 1] > c->eoff[e])
            ni = fl_moe_add_items(c->items, ni, e, H);
    if (shared)
        ni = fl_moe_add_items(c->items, ni, E, H);
    f->n_items = ni;
    fl_run_chunks(f, fl_job_moe_down, ni);
    fl_run(f, fl_job_moe_combine);
}

const char *const fl_cpu_phase_names[FL_PH_N] = {"embed", "norm", "qkv", "attention", "wo",
                                                 "mlp_up", "mlp_down", "moe", "head"};

/* Ends the current phase and starts phase ph (FL_PH_N: none). */
static void fl_phase(fl_cpu *c, int ph)
{
    double t = fl_now();
    if (c->ph_cur < FL_PH_N)
        c->ph.ms[c->ph_cur] += (t - c->ph_t) * 1e3;
    c->ph_t = t;
    c->ph_cur = ph;
}

static int fl_cpu_forward_impl(fl_backend *b, const fl_batch *bt, fl_tok_out *out,
                               float *logits, fl_err *e);

static int fl_cpu_forward(fl_backend *b, const fl_batch *bt, fl_tok_out *out, float *logits,
                          fl_err *e)
{
    fl_cpu *c = b->impl;
    c->ph_cur = FL_PH_N;
    fl_phase(c, FL_PH_EMBED);
    int rc = fl_cpu_forward_impl(b, bt, out, logits, e);
    fl_phase(c, FL_PH_N);
    c->ph.forwards++;
    return rc;
}

static int fl_cpu_forward_impl(fl_backend *b, const fl_batch *bt, fl_tok_out *out,
                               float *logits, fl_err *e)
{
    fl_cpu *c = b->impl;
    const fl_config *cf = &c->cfg;
    int rc = fl_batch_check(&c->base, &c->cfg, bt, e);
    if (rc)
        return rc;
    int n = bt->n_tokens, H = cf->hidden, NI = cf->intermediate;
    int kvh = cf->n_kv_heads, rep = cf->n_heads / kvh;
    fl_fwd f = {.c = c, .bt = bt, .n = n, .logits = logits};
    c->st = (fl_cpu_moe_stats){.expert_bytes_all = c->st.expert_bytes_all};

    /* per segment: its first token and attention work items; per token: whether its output
     * is wanted, the RoPE angles of its absolute position (in double, as the reference
     * computes them) and its embedding row */
    int t = 0, items = 0, n_out = 0;
    for (int s = 0; s < bt->n_segs; s++) {
        const fl_segment *sg = &bt->segs[s];
        c->seg_tok0[s] = t;
        c->item0[s] = items;
        items += kvh * ((sg->n * rep + FL_QTILE - 1) / FL_QTILE);
        for (int i = 0; i < sg->n; i++, t++) {
            if (fl_seg_wants(sg, i))
                c->out_rows[n_out++] = t;
            float *cs = c->rope + (size_t)t * c->rd;
            for (int d = 0; d < c->rd / 2; d++) {
                double a = (double)(sg->pos0 + i) * c->inv_freq[d];
                cs[d] = (float)cos(a);
                cs[c->rd / 2 + d] = (float)sin(a);
            }
        }
    }
    c->item0[bt->n_segs] = items;
    for (t = 0; t < n; t++) {
        float *xr = c->x + (size_t)t * H;
        if ((rc = fl_matrix_rows_f32(xr, c->embed, c->embed_s, (size_t)bt->tokens[t], 1,
                                     (size_t)H, e)))
            return rc;
        if (c->embed_q8) { /* finite: the loader's file; a failure leaves the row exact */
            fl_err qe = {0};
            if (!fl_q8_quantize(c->emb_q, c->emb_d, xr, 1, H, &qe))
                fl_q8_dequantize(xr, c->emb_q, c->emb_d, 1, H);
        }
    }

    for (int l = 0; l < cf->n_layers; l++) {
        const fl_cpu_layer *cl = &c->layers[l];
        f.layer = l;
        fl_phase(c, FL_PH_NORM);
        fl_rmsnorm_rows(c->xb, (size_t)H, c->x, (size_t)H, cl->attn_norm, n, H, cf->rms_eps);
        fl_quantize_input(&f, c->xb, H, n, &cl->wqkv);
        fl_phase(c, FL_PH_QKV);
        fl_run_chunks(&f, fl_job_qkv, (c->qkv_dim + fl_qkv_chunk(c, cl, n) - 1) / fl_qkv_chunk(c, cl, n));
        f.n_items = items;
        fl_phase(c, FL_PH_ATTN);
        fl_run(&f, fl_job_attention);
        fl_phase(c, FL_PH_WO);
        fl_par_matmul(&f, c->x, H, c->att, c->q_dim, n, &cl->wo, true);
        fl_phase(c, FL_PH_NORM);
        fl_rmsnorm_rows(c->xb, (size_t)H, c->x, (size_t)H, cl->mlp_norm, n, H, cf->rms_eps);
        if (cl->moe) {
            fl_phase(c, FL_PH_MOE);
            fl_moe_forward(&f, cl);
            continue;
        }
        if (c->rec_ids) /* a dense layer routes nowhere */
            for (size_t i = 0; i < (size_t)n * cf->moe.top_k; i++)
                c->rec_ids[(size_t)l * c->base.max_tokens * cf->moe.top_k + i] = -1;
        fl_quantize_input(&f, c->xb, H, n, &cl->wgu);
        fl_phase(c, FL_PH_UP);
        fl_run_chunks(&f, fl_job_mlp_up, (2 * NI + fl_chunk_rows(c, n) - 1) / fl_chunk_rows(c, n));
        fl_phase(c, FL_PH_DOWN);
        fl_par_matmul(&f, c->x, H, c->hb, NI, n, &cl->wdown, true);
    }
    fl_phase(c, FL_PH_HEAD);

    if (n_out == 0 || (!out && !logits))
        return 0;
    /* final norm of the wanted rows only, packed into xb */
    for (int i = 0; i < n_out; i++)
        fl_rmsnorm(c->xb + (size_t)i * H, c->x + (size_t)c->out_rows[i] * H, c->final_norm, H,
                   cf->rms_eps);
    f.n_out = n_out;
    fl_quantize_input(&f, c->xb, H, n_out, &c->lm_head);
    fl_run_chunks(&f, fl_job_head, (cf->vocab + fl_head_chunk(c, n_out) - 1) / fl_head_chunk(c, n_out));
    if (out)
        for (int i = 0; i < n_out; i++) {
            fl_lse all = c->lse[i];
            for (int ch = 1; ch * FL_VCHUNK < cf->vocab; ch++)
                fl_lse_merge(&all, &c->lse[(size_t)ch * c->base.max_tokens + i]);
            fl_tok_out *o = &out[c->out_rows[i]];
            fl_lse_finish(&all, &o->token, &o->prob, &o->entropy);
        }
    return 0;
}

/* ---------------------------------------------------------------- pages */

static int fl_cpu_page_read(fl_backend *b, int32_t page, void *dst, fl_err *e)
{
    fl_cpu *c = b->impl;
    if (page < 0 || page >= b->n_pages || !dst)
        return fl_err_set(e, FL_EINVAL, "page_read: page %d not in 0..%d", page, b->n_pages - 1);
    size_t runs = c->page_floats / c->run;
    float *d = dst;
    for (size_t r = 0; r < runs; r++, d += c->run) {
        if (c->kv16) /* widened to the host layout: exact */
            c->kk.bf16_to_f32(d, (const uint16_t *)c->kv + fl_run_at(c, page, r), (long)c->run);
        else
            memcpy(d, (const float *)c->kv + fl_run_at(c, page, r), c->run * 4);
    }
    return 0;
}

static int fl_cpu_page_write(fl_backend *b, int32_t page, const void *src, fl_err *e)
{
    fl_cpu *c = b->impl;
    if (page < 0 || page >= b->n_pages || !src)
        return fl_err_set(e, FL_EINVAL, "page_write: page %d not in 0..%d", page, b->n_pages - 1);
    /* kv16: rounded to nearest even, so a page_read's values (or a persistence blob's, which
     * are bf16 too) come back bit for bit */
    size_t runs = c->page_floats / c->run;
    const float *sp = src;
    for (size_t r = 0; r < runs; r++, sp += c->run) {
        if (c->kv16)
            c->kk.f32_to_bf16((uint16_t *)c->kv + fl_run_at(c, page, r), sp, (long)c->run);
        else
            memcpy((float *)c->kv + fl_run_at(c, page, r), sp, c->run * 4);
    }
    return 0;
}

/* ---------------------------------------------------------------- create / destroy */

static void fl_cpu_destroy(fl_backend *b)
{
    fl_cpu *c = b->impl;
    fl_pool_destroy(c->pool);
    if (c->weights_mem)
        munmap(c->weights_mem, c->weights_len);
    if (c->kv_mem)
        munmap(c->kv_mem, c->kv_len);
    for (int l = 0; c->layers && l < c->cfg.n_layers; l++) {
        free(c->layers[l].egu);
        free(c->layers[l].edown);
    }
    free(c->layers);
    free(c->rlog);
    free(c->rscr);
    free(c->rid);
    free(c->rw);
    free(c->eoff);
    free(c->atok);
    free(c->apos);
    free(c->xg);
    free(c->qxg);
    free(c->egu_o);
    free(c->eh);
    free(c->qxe);
    free(c->ey);
    free(c->sgu_o);
    free(c->sh);
    free(c->qxs);
    free(c->sy);
    free(c->items);
    free(c->rec_ids);
    free(c->rec_w);
    free(c->x);
    free(c->xb);
    free(c->qkv);
    free(c->kvown);
    free(c->att);
    free(c->gu);
    free(c->hb);
    free(c->rope);
    free(c->qx);
    free(c->emb_q);
    free(c->emb_d);
    free(c->inv_freq);
    free(c->out_rows);
    free(c->item0);
    free(c->seg_tok0);
    free(c->lse);
    for (int t = 0; c->ts && t < c->nt; t++) {
        fl_tscratch *ts = &c->ts[t];
        free(ts->mm);
        free(ts->att_s);
        free(ts->att_q);
        free(ts->att_o);
        free(ts->kr);
        free(ts->vr);
        free(ts->kr16);
        free(ts->vr16);
        free(ts->att_w);
        free(ts->logits);
    }
    free(c->ts);
    free(c->shares);
    free(c);
}

static const fl_backend_ops fl_cpu_ops = {
    .name = "cpu",
    .forward = fl_cpu_forward,
    .page_read = fl_cpu_page_read,
    .page_write = fl_cpu_page_write,
    .destroy = fl_cpu_destroy,
};

/* The default row count from which f32/bf16 projections use sgemm: on x86, none. sgemm's
 * sums for a row depend on how many rows the call has (OpenBLAS picks kernels and blocking by
 * the shape: on a Zen 3 with its Zen kernels, 22% of a 32-row call's values differ in the same
 * rows of a 64-row call); the streaming kernels' never do. So every forward gives a row the
 * same bits whatever else is in it, and batching, decode-store overlap, pipelining and prefill
 * chunking never change outputs. sgemm is faster from some size on some CPUs (AVX2: from 64
 * rows, by 25-29% at 256-512 rows with bf16 weights, docs/benchmarks.md; AVX-512 beside
 * OpenBLAS's AVX-512 kernels: from 128; beside its AVX2 kernels, not up to 512):
 * FL_SGEMM_ROWS sets the crossover, an opt-in whose outputs may then depend on the batch. q8/q4
 * weights never take sgemm. The plain C level (no x86 SIMD, e.g. aarch64) keeps its crossover
 * of 8: its streaming loop is too slow to carry a batch. */
static int fl_default_sgemm_rows(const fl_kernels *kk)
{
    return !strcmp(kk->name, "plain C") ? kk->sgemm_rows : INT_MAX;
}

static bool fl_mat_fmt_q(fl_mfmt f) { return f == FL_MF_Q8 || f == FL_MF_Q4; }

/* The MoE buffers for mt tokens; FL_ENOMEM. */
static int fl_cpu_moe_alloc(fl_cpu *c, size_t mt)
{
    const fl_moe *mo = &c->cfg.moe;
    size_t E = (size_t)mo->n_experts, A = mt * (size_t)mo->top_k, H = (size_t)c->cfg.hidden,
           mi = (size_t)mo->inter, smi = (size_t)c->s_inter;
    size_t widest = 2 * mi > H ? 2 * mi : H;
    widest = 2 * smi > widest ? 2 * smi : widest;
    c->rlog = malloc(mt * E * 4);
    c->rscr = malloc((size_t)c->nt * fl_moe_scratch(mo) * 4);
    c->rid = malloc(A * sizeof *c->rid);
    c->rw = malloc(A * sizeof *c->rw);
    c->eoff = malloc((2 * E + 2) * sizeof *c->eoff);
    c->atok = malloc(A * sizeof *c->atok);
    c->apos = malloc(A * sizeof *c->apos);
    c->egu_o = malloc(A * 2 * mi * 4);
    c->eh = malloc(A * mi * 4);
    c->ey = malloc(A * H * 4);
    c->items = malloc((E + 1) * ((widest + FL_MOE_ROWS - 1) / FL_MOE_ROWS) * sizeof *c->items);
    bool ok = c->rlog && c->rscr && c->rid && c->rw && c->eoff && c->atok && c->apos && c->egu_o &&
              c->eh && c->ey && c->items;
    if (c->moe_qup)
        ok = ok && (c->qxg = malloc(fl_qx_bytes((int)A, (int)H)));
    else
        ok = ok && (c->xg = malloc(A * H * 4));
    if (c->moe_qdown)
        ok = ok && (c->qxe = malloc(fl_qx_bytes((int)A, (int)mi)));
    if (smi) {
        c->sgu_o = malloc(mt * 2 * smi * 4);
        c->sh = malloc(mt * smi * 4);
        c->sy = malloc(mt * H * 4);
        ok = ok && c->sgu_o && c->sh && c->sy;
        if (c->moe_qsdown)
            ok = ok && (c->qxs = malloc(fl_qx_bytes((int)mt, (int)smi)));
    }
    return ok ? 0 : FL_ENOMEM;
}

static int fl_env_int(const char *name, int def)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return def;
    char *end;
    long v = strtol(s, &end, 10);
    return *end || v < 0 || v > 1 << 30 ? def : (int)v;
}

int fl_backend_cpu_create(fl_backend **out, const fl_model *m, const fl_backend_opts *o, fl_err *e)
{
    *out = NULL;
    if (!m || !o)
        return fl_err_set(e, FL_EINVAL, "cpu backend: no model or options");
    const fl_config *cf = &m->cfg;
    if (!m->weights || !m->embed || !m->lm_head || !m->final_norm || !m->layers)
        return fl_err_set(e, FL_EINVAL, "cpu backend: the model was loaded without weights");
    if (o->n_pages < 0 || o->max_tokens <= 0 || o->n_threads < 0)
        return fl_err_set(e, FL_EINVAL, "cpu backend: bad options (n_pages %d, max_tokens %d, "
                          "n_threads %d)", o->n_pages, o->max_tokens, o->n_threads);
    fl_wformat wf = fl_wformat_resolve(o->weights, m);
    if (wf <= FL_WEIGHTS_AUTO || wf >= FL_WEIGHTS_COUNT)
        return fl_err_set(e, FL_EUNSUPPORTED, "cpu backend: weights format %d (%s) is not one "
                          "it holds (f32, bf16, q8, q4)", (int)o->weights,
                          fl_wformat_name(o->weights));
    if ((int)o->kv < 0 || (int)o->kv >= FL_KV_COUNT)
        return fl_err_set(e, FL_EUNSUPPORTED, "cpu backend: KV format %d is not one it holds "
                          "(f32, bf16)", (int)o->kv);
    if (cf->head_dim % 2 || cf->n_kv_heads <= 0 || cf->n_heads % cf->n_kv_heads ||
        cf->block_size <= 0 || cf->max_pos <= 0)
        return fl_err_set(e, FL_EUNSUPPORTED, "cpu backend: unsupported shape (head_dim %d, "
                          "heads %d/%d, block %d)", cf->head_dim, cf->n_heads, cf->n_kv_heads,
                          cf->block_size);
    fl_cpu *c = calloc(1, sizeof *c);
    if (!c)
        return fl_err_set(e, FL_ENOMEM, "cpu backend: out of memory");
    c->base = (fl_backend){&fl_cpu_ops, m, o->n_pages, o->max_tokens, 0, c, FL_WEIGHTS_F32,
                           FL_KV_F32};
    c->cfg = *cf;
    c->nt = o->n_threads ? o->n_threads : fl_ncpus();
    c->wf = wf;
    /* a plain matrix under q8/q4 (rows not whole groups) is bf16 */
    c->bf16 = wf != FL_WEIGHTS_F32;
    c->base.weights = wf;
    c->kv16 = o->kv == FL_KV_BF16; /* AUTO: f32, exact */
    c->base.kv = c->kv16 ? FL_KV_BF16 : FL_KV_F32;
    fl_kernels_init(&c->kk, getenv("FL_SIMD"));
    c->sgemm_rows = fl_env_int("FL_SGEMM_ROWS", fl_default_sgemm_rows(&c->kk));
    c->q_dim = cf->n_heads * cf->head_dim;
    c->kv_dim = cf->n_kv_heads * cf->head_dim;
    c->qkv_dim = c->q_dim + 2 * c->kv_dim;
    c->ib = cf->intermediate % 8 == 0 ? 8 : 1;
    c->rd = fl_config_rotary_dim(cf);
    const fl_moe *mo = &cf->moe;
    bool moe = mo->router != FL_ROUTER_NONE;
    c->s_inter = mo->inter * mo->n_shared;
    c->eib = mo->inter % 8 == 0 ? 8 : 1;
    c->sib = c->s_inter % 8 == 0 ? 8 : 1;
    c->max_k = cf->hidden;
    if (mo->inter > c->max_k)
        c->max_k = mo->inter;
    if (c->s_inter > c->max_k)
        c->max_k = c->s_inter;
    if (c->q_dim > c->max_k)
        c->max_k = c->q_dim;
    if (cf->intermediate > c->max_k)
        c->max_k = cf->intermediate;
    c->embed = m->embed;
    c->embed_s = fl_model_scales(m, m->embed);
    /* q8/q4: the embedding at 8 bits, whether the file holds it so (a quantized directory) or
     * not (quantized at load): the two give the same outputs */
    c->embed_q8 = (wf == FL_WEIGHTS_Q8 || wf == FL_WEIGHTS_Q4) && !c->embed_s &&
                  cf->hidden % FL_QG == 0;
    c->page_floats = fl_kv_page_floats(cf);
    c->run = (size_t)cf->block_size * (size_t)cf->head_dim;
    c->base.page_bytes = c->page_floats * 4; /* the host layout's, whatever the pool holds */
    size_t pool_page = c->page_floats * (c->kv16 ? 2 : 4);
    /* all of OpenBLAS's work happens inside our pool threads, one thread each */
    openblas_set_num_threads(1);

    int rc = fl_pool_create(&c->pool, c->nt, e);
    if (rc)
        goto fail;
    rc = FL_ENOMEM;
    size_t mt = (size_t)o->max_tokens;
    c->layers = calloc((size_t)cf->n_layers, sizeof *c->layers);
    if (!c->layers)
        goto oom;
    for (int l = 0; l < cf->n_layers; l++) {
        fl_cpu_layer *cl = &c->layers[l];
        if (!(cl->moe = fl_config_layer_moe(cf, l)))
            continue;
        cl->egu = calloc((size_t)mo->n_experts, sizeof *cl->egu);
        cl->edown = calloc((size_t)mo->n_experts, sizeof *cl->edown);
        if (!cl->egu || !cl->edown)
            goto oom;
    }
    c->moe_qup = moe && fl_mat_fmt_q(fl_cpu_slot_fmt(c, FL_W_EXPERT_GATE_UP, (size_t)cf->hidden));
    c->moe_qdown = moe && fl_mat_fmt_q(fl_cpu_slot_fmt(c, FL_W_EXPERT_DOWN, (size_t)mo->inter));
    c->moe_qsdown = moe && c->s_inter &&
                    fl_mat_fmt_q(fl_cpu_slot_fmt(c, FL_W_SHARED_DOWN, (size_t)c->s_inter));
    if ((rc = fl_cpu_place_weights(c, m, e)) == FL_ENOMEM)
        goto oom;
    if (rc)
        goto fail;
    rc = FL_ENOMEM;
    if ((c->kv_mem = fl_big_alloc((size_t)o->n_pages * pool_page, &c->kv_len)))
        c->kv = fl_huge_align(c->kv_mem); /* zero-filled by mmap */
    c->x = malloc(mt * cf->hidden * 4);
    c->xb = malloc(mt * cf->hidden * 4);
    c->qkv = malloc(mt * c->qkv_dim * 4);
    if (c->kv16)
        c->kvown = malloc(mt * 2 * c->kv_dim * sizeof *c->kvown);
    c->att = malloc(mt * c->q_dim * 4);
    c->gu = malloc(mt * 2 * cf->intermediate * 4);
    c->hb = malloc(mt * cf->intermediate * 4);
    c->rope = malloc(mt * cf->head_dim * 4);
    if (c->wf == FL_WEIGHTS_Q8 || c->wf == FL_WEIGHTS_Q4)
        c->qx = malloc(fl_qx_bytes((int)mt, c->max_k));
    if (c->embed_q8) {
        c->emb_q = malloc((size_t)cf->hidden);
        c->emb_d = malloc((size_t)cf->hidden / FL_QG * sizeof *c->emb_d);
    }
    c->inv_freq = malloc((size_t)cf->head_dim / 2 * sizeof(double));
    if (moe && fl_cpu_moe_alloc(c, mt))
        goto oom;
    c->out_rows = malloc(mt * sizeof(int32_t));
    c->item0 = malloc((mt + 1) * sizeof(int32_t));
    c->seg_tok0 = malloc(mt * sizeof(int32_t));
    c->lse = malloc((size_t)((cf->vocab + FL_VCHUNK - 1) / FL_VCHUNK) * mt * sizeof(fl_lse));
    if (!(c->ts = calloc((size_t)c->nt, sizeof *c->ts)) ||
        !(c->shares = aligned_alloc(64, (size_t)c->nt * sizeof *c->shares)))
        goto oom;
    for (int t = 0; t < c->nt; t++) {
        fl_tscratch *ts = &c->ts[t];
        ts->mm = malloc((size_t)FL_MM_TILE * c->max_k * sizeof(float));
        ts->att_s = malloc((size_t)FL_QTILE * (cf->max_pos + FL_SCORE_PAD) * sizeof(float));
        ts->att_q = malloc((size_t)cf->head_dim * FL_QT * sizeof(float));
        ts->att_o = malloc((size_t)FL_QTILE * cf->head_dim * sizeof(float));
        if (c->kv16) {
            ts->kr16 = malloc((size_t)cf->max_pos * sizeof *ts->kr16);
            ts->vr16 = malloc((size_t)cf->max_pos * sizeof *ts->vr16);
            ts->att_w = malloc((size_t)FL_KV_CHUNK * cf->head_dim * sizeof(float));
        } else {
            ts->kr = malloc((size_t)cf->max_pos * sizeof *ts->kr);
            ts->vr = malloc((size_t)cf->max_pos * sizeof *ts->vr);
        }
        ts->logits = malloc(mt * FL_VCHUNK_GEMM * sizeof(float));
        if (!ts->mm || !ts->att_s || !ts->att_q || !ts->att_o || !ts->logits ||
            (c->kv16 ? !ts->kr16 || !ts->vr16 || !ts->att_w : !ts->kr || !ts->vr))
            goto oom;
    }
    if (!c->kv || !c->x || !c->xb || !c->qkv || (c->kv16 && !c->kvown) || !c->att || !c->gu || !c->hb || !c->rope ||
        !c->inv_freq || !c->out_rows || !c->item0 || !c->seg_tok0 || !c->lse ||
        ((c->wf == FL_WEIGHTS_Q8 || c->wf == FL_WEIGHTS_Q4) && !c->qx) ||
        (c->embed_q8 && (!c->emb_q || !c->emb_d)))
        goto oom;
    fl_rope_inv_freq(cf, c->inv_freq);
    for (int l = 0; l < cf->n_layers; l++) {
        const fl_cpu_layer *cl = &c->layers[l];
        if (!cl->moe)
            continue;
        int64_t *all = &c->st.expert_bytes_all;
        *all += (int64_t)fl_mat_bytes(&cl->router);
        for (int x = 0; x < mo->n_experts; x++)
            *all += (int64_t)(fl_mat_bytes(&cl->egu[x]) + fl_mat_bytes(&cl->edown[x]));
        if (cl->sgu.rows)
            *all += (int64_t)(fl_mat_bytes(&cl->sgu) + fl_mat_bytes(&cl->sdown));
    }
    *out = &c->base;
    return 0;
oom:
    fl_err_set(e, FL_ENOMEM, "cpu backend: out of memory (weights %.2f GB as %s, %d KV pages "
               "of %zu KB as %s)", (double)c->arena_bytes / 1e9, fl_wformat_name(c->wf),
               o->n_pages, c->page_floats * (c->kv16 ? 2 : 4) / 1024, fl_kvformat_name(c->base.kv));
    rc = FL_ENOMEM;
fail:
    fl_cpu_destroy(&c->base);
    return rc;
}

int fl_cpu_phases_get(fl_backend *b, fl_cpu_phases *ph, bool reset)
{
    if (!b || b->ops != &fl_cpu_ops)
        return FL_EINVAL;
    fl_cpu *c = b->impl;
    *ph = c->ph;
    if (reset)
        c->ph = (fl_cpu_phases){0};
    return 0;
}

int fl_cpu_sgemm_rows(const fl_backend *b)
{
    if (!b || b->ops != &fl_cpu_ops)
        return -1;
    return ((const fl_cpu *)b->impl)->sgemm_rows;
}

int fl_cpu_moe_stats_get(const fl_backend *b, fl_cpu_moe_stats *st)
{
    if (!b || b->ops != &fl_cpu_ops)
        return FL_EINVAL;
    *st = ((const fl_cpu *)b->impl)->st;
    return 0;
}

int fl_cpu_record_routes(fl_backend *b, fl_err *e)
{
    if (!b || b->ops != &fl_cpu_ops)
        return fl_err_set(e, FL_EINVAL, "record routes: not a CPU backend");
    fl_cpu *c = b->impl;
    size_t n = (size_t)c->cfg.n_layers * b->max_tokens * c->cfg.moe.top_k;
    if (c->rec_ids || !n)
        return 0;
    c->rec_ids = malloc(n * sizeof *c->rec_ids);
    c->rec_w = calloc(n, sizeof *c->rec_w);
    if (!c->rec_ids || !c->rec_w) {
        free(c->rec_ids);
        free(c->rec_w);
        c->rec_ids = NULL;
        c->rec_w = NULL;
        return fl_err_set(e, FL_ENOMEM, "record routes: out of memory");
    }
    return 0;
}

void fl_cpu_routes(const fl_backend *b, const int32_t **ids, const float **w)
{
    const fl_cpu *c = b && b->ops == &fl_cpu_ops ? b->impl : NULL;
    *ids = c ? c->rec_ids : NULL;
    *w = c ? c->rec_w : NULL;
}

int fl_cpu_weight_bytes(const fl_backend *b, size_t *arena, size_t *mapped)
{
    if (!b || b->ops != &fl_cpu_ops)
        return FL_EINVAL;
    const fl_cpu *c = b->impl;
    *arena = c->arena_bytes;
    *mapped = c->mapped_bytes;
    return 0;
}
