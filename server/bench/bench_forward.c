/* bench_forward.c: `fogline bench forward`: the time of one forward step of the CPU backend
 * for a block of new tokens against a cache of ctx positions, side by side in one run with
 *  - the PyTorch reference on the same weights, threads, cache length and block
 *    (tests/reference/bench_forward.py, run as a subprocess before our model is loaded, so
 *    the two never hold their weights in memory at the same time);
 *  - OpenBLAS sgemm at the same projection shapes (M = block rows), with OpenBLAS's own
 *    threads, weights read from DRAM: the machine's matmul rate;
 *  - the machine's read bandwidth, which bounds a step from below when the weights have to
 *    be streamed once per step (the floor: the bytes a step streams, its weights and the
 *    cached K/V its attention reads, over that bandwidth). It is probed just before and just
 *    after each timed step (fl_bw_probe), and each step is held against the bandwidth of its
 *    own moment: on a shared VM it moves by 2x within minutes, so a probe taken once, at
 *    another moment, could put the same step at 1.5x or 3x its floor.
 * Our GFLOP/s counts every flop of the step (projections, lm_head, attention) over our time;
 * sgemm's counts the projections and lm_head over its time. With several --weights formats
 * or --kv-format formats ours runs once per pair (weights major), one backend at a time, in
 * the order given. */
#include <cblas.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend.h"
#include "backend_select.h"
#include "bench_common.h"
#include "cpu/cpu.h"
#include "cli/cli.h"
#include "gen_opts.h"
#include "model.h"

#define FL_MAX_BLOCKS 16
#define FL_MAX_FORMATS 8
_Static_assert(FL_WEIGHTS_COUNT <= FL_MAX_FORMATS, "each format can be listed once");
#define FL_MAX_SIMDS 4 /* --simd: auto avx512 avx2 plain */
#define FL_MAX_RUNS (FL_MAX_FORMATS * FL_KV_COUNT * FL_MAX_SIMDS)

typedef struct fl_bench_args {
    const char *model, *ref_script, *python, *device;
    int threads, ctx, steps;
    int blocks[FL_MAX_BLOCKS], n_blocks;
    bool no_ref;
    int masked;                   /* the last this many tokens of a timed block are the mask */
    fl_wformat formats[FL_MAX_FORMATS];
    int n_formats;
    fl_kvformat kvs[FL_KV_COUNT];
    int n_kvs;
    /* --simd: the CPU kernels' caps, each run's FL_SIMD ("" for auto); none given: the
       environment's, and the tables name no level */
    const char *simds[FL_MAX_SIMDS];
    int n_simds;
} fl_bench_args;

/* One run of ours: the formats asked and held, its step times and what its start cost. */
typedef struct fl_ours {
    fl_wformat asked;
    fl_kvformat kv_asked;
    fl_wformat held;
    fl_kvformat kv_held;
    const char *simd; /* FL_SIMD for this run's backend, NULL: as the environment says */
    char label[32];   /* the tables' "weights" column: the format held, and --simd's cap */
    double ms[FL_MAX_BLOCKS];
    double create_ms, prefill_ms; /* backend create; the first forward (the ctx prefill) */
    size_t wbytes;                /* weight bytes streamed per step */
    /* mixture of experts, per block size: routed experts touched per MoE layer (mean) and the
       weight bytes the step read (the untouched experts' not) */
    double touched[FL_MAX_BLOCKS], read_bytes[FL_MAX_BLOCKS];
    int moe_layers;
    double phase_ms[FL_MAX_BLOCKS][FL_PH_N]; /* mean per timed forward (CPU backend), -1 else */
    double all_ms[FL_MAX_BLOCKS]; /* --masked M < block: the same step asking every output
                                     (ms then holds the step asking the M masks' only); 0 else */
    /* the read bandwidth around each timed step (the mean of a probe just before it and one
       just after), GB/s: the median and the lowest and highest probe; tbw = the median over
       the steps of ms x that step's bandwidth, so that ms/floor = tbw / (bytes / 1e6) is each
       step against the bandwidth of its own moment (the median of those ratios) */
    double bw[FL_MAX_BLOCKS], bw_lo[FL_MAX_BLOCKS], bw_hi[FL_MAX_BLOCKS], tbw[FL_MAX_BLOCKS];
    size_t kv_bytes;              /* the KV pool, as it holds the pages */
    long rss0_kb;                 /* VmRSS before create (the process without this backend) */
    long rss_kb, load_hwm_kb;     /* VmRSS and VmHWM after create */
    long run_rss_kb, hwm_kb;      /* VmRSS and VmHWM after the run (VmHWM is reset before
                                     create where the kernel allows it, else the process's) */
    bool hwm_reset;
} fl_ours;

/* A field of /proc/self/status in kB, -1 when unknown. */
static long fl_status_kb(const char *field)
{
    char line[256];
    long v = -1;
    size_t n = strlen(field);
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, field, n) && line[n] == ':') {
            v = strtol(line + n + 1, NULL, 10);
            break;
        }
    if (f)
        fclose(f);
    return v;
}

/* "f32,bf16": a comma list of fl_wformat names, each once at most. */
static int fl_parse_formats(fl_bench_args *a, const char *list, char *err, size_t cap)
{
    int n = fl_bench_formats(list, a->formats, FL_MAX_FORMATS, err, cap);
    a->n_formats = n > 0 ? n : a->n_formats;
    return n > 0 ? 0 : -1;
}

/* "auto,avx512": a comma list of the CPU kernels' caps (kernels.h), each once at most */
static int fl_parse_simds(fl_bench_args *a, const char *list, char *err, size_t cap)
{
    static const char *const names[FL_MAX_SIMDS] = {"auto", "avx512", "avx2", "plain"};
    static const char *const caps[FL_MAX_SIMDS] = {"", "avx512", "avx2", "plain"};
    int n = 0;
    const char *p = list;
    while (*p) {
        size_t len = strcspn(p, ",");
        int hit = -1;
        for (int i = 0; i < FL_MAX_SIMDS; i++)
            if (strlen(names[i]) == len && !strncmp(p, names[i], len))
                hit = i;
        for (int i = 0; hit >= 0 && i < n; i++)
            if (a->simds[i] == caps[hit]) {
                snprintf(err, cap, "--simd: '%.*s' listed twice", (int)len, p);
                return -1;
            }
        if (hit < 0) {
            snprintf(err, cap, "--simd: unknown level '%.*s' (auto, avx512, avx2, plain)",
                     (int)(len > 20 ? 20 : len), p);
            return -1;
        }
        a->simds[n++] = caps[hit];
        p += len;
        if (*p == ',' && !*++p) {
            snprintf(err, cap, "--simd: empty level at the end of '%.40s'", list);
            return -1;
        }
    }
    if (!n) {
        snprintf(err, cap, "--simd: no level given");
        return -1;
    }
    a->n_simds = n;
    return 0;
}

static int fl_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double fl_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, fl_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double fl_loadavg(void)
{
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = -1;
        fclose(f);
    }
    return l;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: fogline bench forward --model DIR [--threads N] [--ctx 512] [--blocks 4,8,32]\n"
            "                             [--steps 5] [--weights auto] [--kv-format auto]\n"
            "                             [--simd auto] [--ref-script PATH] [--python PATH]\n"
            "                             [--no-ref] [--masked N] [--device cpu|cuda|auto]\n\n"
            "Times one forward of a block of new tokens against ctx cached positions (median of\n"
            "--steps after a warm-up), next to the PyTorch reference on the same weights and\n"
            "threads, OpenBLAS sgemm at the same shapes, and the bandwidth floor.\n"
            "  --threads N       compute threads for us, torch and sgemm (default: all cores)\n"
            "  --weights LIST    our weights' formats, timed one after the other in one run:\n"
            "                    auto | f32 | bf16 | q8 | q4, or a comma list (f32,bf16,q8,q4);\n"
            "                    default auto (a quantized directory's format, bf16 for a bf16\n"
            "                    file, else f32); --bf16 is --weights bf16\n"
            "  --kv-format LIST  our KV pages' formats: auto | f32 | bf16, or a comma list\n"
            "                    (f32,bf16); every pair with --weights is timed (default auto)\n"
            "  --simd LIST       the CPU kernels' levels, each timed (every pair above runs\n"
            "                    once per level): auto | avx512 (no AMX) | avx2 | plain,\n"
            "                    or a comma list (auto,avx512); default: FL_SIMD's\n"
            "  --ref-script PATH tests/reference/bench_forward.py (default: found from the binary)\n"
            "  --python PATH     interpreter for it (default /usr/bin/python3)\n"
            "  --no-ref          skip the reference\n"
            "  --masked N        the last N tokens of each timed block are the mask token (a\n"
            "                    block being denoised: its masks route alike); default 0. Below\n"
            "                    the block, the step asks only the masks' outputs, as decoding\n"
            "                    does, and is also timed asking all of them\n"
            "  --device D        the backend timed (default cpu); the sgemm, bandwidth and floor\n"
            "                    columns are this CPU's (tests/gpu/gpu_bench.c measures a GPU's)\n");
}

static int fl_parse_blocks(fl_bench_args *a, const char *s)
{
    a->n_blocks = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v <= 0 || v > 4096 || a->n_blocks == FL_MAX_BLOCKS)
            return -1;
        a->blocks[a->n_blocks++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return -1;
    }
    return a->n_blocks ? 0 : -1;
}

static int fl_parse_int(const char *s, int lo, int hi, int *out)
{
    long v;
    if (fl_parse_long(s, lo, hi, &v))
        return -1;
    *out = (int)v;
    return 0;
}

/* tests/reference/bench_forward.py, looked for beside the build tree the binary is in. */
static const char *fl_find_ref_script(char *buf, size_t cap)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return NULL;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = 0;
    static const char *rel[] = {"/../../tests/reference/bench_forward.py",
                                "/../tests/reference/bench_forward.py",
                                "/../share/fogline/reference/bench_forward.py"};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        snprintf(buf, cap, "%s%s", exe, rel[i]);
        if (access(buf, R_OK) == 0)
            return buf;
    }
    const char *td = getenv("FL_TESTS_DIR");
    if (td) {
        snprintf(buf, cap, "%s/reference/bench_forward.py", td);
        if (access(buf, R_OK) == 0)
            return buf;
    }
    return NULL;
}

/* Runs the reference; fills ref_ms[i] for each block (NAN when it failed). */
static void fl_run_reference(const fl_bench_args *a, double *ref_ms, char *note, size_t note_cap)
{
    for (int i = 0; i < a->n_blocks; i++)
        ref_ms[i] = NAN;
    char script[PATH_MAX];
    const char *path = a->ref_script ? a->ref_script : fl_find_ref_script(script, sizeof script);
    if (!path) {
        snprintf(note, note_cap, "reference: bench_forward.py not found (use --ref-script)");
        return;
    }
    fl_buf cmd = {0}, blocks = {0};
    for (int i = 0; i < a->n_blocks; i++)
        fl_buf_printf(&blocks, "%s%d", i ? "," : "", a->blocks[i]);
    /* paths are quoted for the shell; a quote inside them is refused */
    if (strchr(path, '\'') || strchr(a->model, '\'') || strchr(a->python, '\'')) {
        snprintf(note, note_cap, "reference: a path contains a quote; not run");
        fl_buf_free(&blocks);
        return;
    }
    fl_buf_printf(&cmd, "OMP_WAIT_POLICY=PASSIVE '%s' '%s' --model '%s' --threads %d --ctx %d "
                  "--blocks %s --steps %d", a->python, path, a->model, a->threads, a->ctx,
                  blocks.data, a->steps);
    if (blocks.err || cmd.err) { /* never run a cut command line */
        snprintf(note, note_cap, "reference: out of memory; not run");
        fl_buf_free(&cmd);
        fl_buf_free(&blocks);
        return;
    }
    fflush(stdout);
    FILE *p = popen(cmd.data, "r");
    fl_buf outb = {0};
    if (p) {
        char chunk[4096];
        size_t n;
        while ((n = fread(chunk, 1, sizeof chunk, p)) > 0)
            fl_buf_append(&outb, chunk, n);
        int st = pclose(p);
        if (st != 0)
            snprintf(note, note_cap, "reference: exited with status %d", st);
    } else {
        snprintf(note, note_cap, "reference: cannot start %s", a->python);
    }
    json_error_t je;
    json_t *j = outb.data && !outb.err ? json_loads(outb.data, 0, &je) : NULL;
    if (j) {
        json_t *bl = json_object_get(j, "blocks");
        for (int i = 0; i < a->n_blocks; i++) {
            char key[16];
            snprintf(key, sizeof key, "%d", a->blocks[i]);
            json_t *v = json_object_get(json_object_get(bl, key), "median_ms");
            if (json_is_number(v))
                ref_ms[i] = json_number_value(v);
        }
        snprintf(note, note_cap, "reference: PyTorch %s, %d threads, load %.1f s, prefill %.0f ms",
                 json_string_value(json_object_get(j, "torch")),
                 (int)json_integer_value(json_object_get(j, "threads")),
                 json_number_value(json_object_get(j, "load_s")),
                 json_number_value(json_object_get(j, "prefill_ms")));
        json_decref(j);
    } else if (!note[0]) {
        snprintf(note, note_cap, "reference: no JSON result");
    }
    fl_buf_free(&outb);
    fl_buf_free(&cmd);
    fl_buf_free(&blocks);
}

/* ---------------------------------------------------------------- machine probes */

typedef struct fl_shape {
    int n, k;
} fl_shape;

/* Seconds for the projections of one step (n_layers x the layer's shapes, and lm_head) as
 * OpenBLAS sgemm does them with nt threads, M = m rows; weights cycle through enough
 * distinct copies that they come from DRAM, as in a forward. Median of `reps`. */
static double fl_measure_sgemm(const fl_config *cf, int m, int nt, int reps)
{
    fl_shape sh[4] = {{(cf->n_heads + 2 * cf->n_kv_heads) * cf->head_dim, cf->hidden},
                      {cf->hidden, cf->n_heads * cf->head_dim},
                      {2 * cf->intermediate, cf->hidden},
                      {cf->hidden, cf->intermediate}};
    size_t layer = 0, maxk = 0, maxn = (size_t)cf->vocab;
    for (int i = 0; i < 4; i++) {
        layer += (size_t)sh[i].n * sh[i].k;
        maxk = (size_t)sh[i].k > maxk ? (size_t)sh[i].k : maxk;
        maxn = (size_t)sh[i].n > maxn ? (size_t)sh[i].n : maxn;
    }
    int copies = cf->n_layers < 8 ? cf->n_layers : 8; /* >= 8 x a layer: past any L3 */
    while (copies > 1 && (size_t)copies * layer * 4 > ((size_t)2 << 30))
        copies--;
    float *w = malloc((size_t)copies * layer * 4), *head = malloc((size_t)cf->vocab * cf->hidden * 4);
    float *x = malloc((size_t)m * maxk * 4), *y = malloc((size_t)m * maxn * 4);
    double res = NAN;
    if (w && head && x && y) {
        for (size_t i = 0; i < (size_t)copies * layer; i++)
            w[i] = (float)((i % 97) * 1e-3);
        for (size_t i = 0; i < (size_t)cf->vocab * cf->hidden; i++)
            head[i] = (float)((i % 89) * 1e-3);
        for (size_t i = 0; i < (size_t)m * maxk; i++)
            x[i] = (float)((i % 13) * 1e-2);
        openblas_set_num_threads(nt);
        double t[16];
        reps = reps > 16 ? 16 : reps;
        for (int r = 0; r <= reps; r++) { /* r == 0: warm-up */
            double t0 = fl_now();
            for (int l = 0; l < cf->n_layers; l++) {
                const float *wl = w + (size_t)(l % copies) * layer;
                for (int i = 0; i < 4; i++) {
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, sh[i].n, sh[i].k, 1.0f,
                                x, sh[i].k, wl, sh[i].k, 0.0f, y, sh[i].n);
                    wl += (size_t)sh[i].n * sh[i].k;
                }
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, cf->vocab, cf->hidden, 1.0f, x,
                        cf->hidden, head, cf->hidden, 0.0f, y, cf->vocab);
            if (r)
                t[r - 1] = fl_now() - t0;
        }
        res = fl_median(t, reps);
        openblas_set_num_threads(1); /* back to the backend's setting */
    }
    free(w);
    free(head);
    free(x);
    free(y);
    return res;
}

/* Projection + lm_head flops of one step of m rows; attention flops of m rows at positions
 * ctx.. against their visible keys (block-causal). */
static double fl_proj_flops(const fl_config *cf, int m)
{
    double qkv = (double)(cf->n_heads + 2 * cf->n_kv_heads) * cf->head_dim * cf->hidden;
    double o = (double)cf->hidden * cf->n_heads * cf->head_dim;
    double mlp = 0;
    for (int l = 0; l < cf->n_layers; l++) /* a MoE layer: the router, top_k and the shared */
        mlp += fl_config_layer_moe(cf, l)
                   ? (double)cf->hidden * (cf->moe.n_experts + 3.0 * cf->moe.inter *
                                                                 (cf->moe.top_k + cf->moe.n_shared))
                   : 3.0 * cf->intermediate * cf->hidden;
    return 2.0 * m * (cf->n_layers * (qkv + o) + mlp + (double)cf->vocab * cf->hidden);
}

/* The cached K/V of ctx positions, as a pool of format kv holds them: what a step's attention
 * streams from DRAM. */
static double fl_cache_bytes(const fl_config *cf, int ctx, fl_kvformat kv)
{
    return (double)ctx * cf->n_layers * 2 * cf->n_kv_heads * cf->head_dim *
           (kv == FL_KV_BF16 ? 2 : 4);
}

static double fl_attn_flops(const fl_config *cf, int ctx, int m)
{
    int B = cf->block_size;
    double keys = 0;
    for (int i = 0; i < m; i++) {
        int p = ctx + i, end = (p / B + 1) * B;
        keys += end < ctx + m ? end : ctx + m;
    }
    return 4.0 * cf->n_layers * cf->n_heads * cf->head_dim * keys; /* QK^T and PV */
}

/* ---------------------------------------------------------------- our side */

/* Drops every page of the model's files from this process (the page cache keeps them), so
 * that each format's RSS is its own: a format's forwards fault in the file pages it reads in
 * place, and a later format's conversion would otherwise drop them again and look smaller. */
static void fl_drop_model_pages(const fl_model *m)
{
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    for (size_t i = 0; i < fl_weights_count(m->weights); i++) {
        const fl_tensor *t = fl_weights_at(m->weights, i);
        uintptr_t a = (uintptr_t)t->data & ~(pg - 1), z = (uintptr_t)t->data + t->nbytes;
        if (z > a)
            madvise((void *)a, z - a, MADV_DONTNEED); /* read-only file pages: refetched on use */
    }
}

/* "median (lowest-highest)" of the bandwidth probed around block i's timed steps */
static void fl_bw_range(char *buf, size_t n, const fl_ours *o, int i)
{
    snprintf(buf, n, "%.1f (%.0f-%.0f)", o->bw[i], o->bw_lo[i], o->bw_hi[i]);
}

static int fl_bench_ours(const fl_bench_args *a, const fl_model *m, fl_ours *res, fl_err *e)
{
    fl_wformat wf = res->asked;
    double *ours_ms = res->ms, *prefill_ms = &res->prefill_ms;
    size_t *wbytes = &res->wbytes;
    const fl_config *cf = &m->cfg;
    int B = cf->block_size, maxb = 0;
    for (int i = 0; i < a->n_blocks; i++)
        maxb = a->blocks[i] > maxb ? a->blocks[i] : maxb;
    int ctx_pages = (a->ctx + B - 1) / B;
    fl_backend_opts o = {.n_pages = ctx_pages + 1, .n_threads = a->threads,
                         .max_tokens = a->ctx > maxb ? a->ctx : maxb, .weights = wf,
                         .kv = res->kv_asked};
    fl_backend *b;
    char chosen[700];
    /* 256 MiB: 8x a large last-level cache, read in 4-6 ms at 40-70 GB/s; created before
       the backend so that its buffer is not counted in the backend's memory */
    fl_bw_probe *probe;
    int rc = fl_bw_probe_create(&probe, a->threads, (size_t)256 << 20, e);
    if (rc)
        return rc;
    fl_drop_model_pages(m);
    /* the peak RSS of this backend alone: /proc/self/clear_refs "5" resets VmHWM */
    FILE *cr = fopen("/proc/self/clear_refs", "w");
    res->hwm_reset = cr && fputs("5", cr) >= 0;
    if (cr && fclose(cr))
        res->hwm_reset = false;
    res->rss0_kb = fl_status_kb("VmRSS");
    char *env0 = getenv("FL_SIMD") ? strdup(getenv("FL_SIMD")) : NULL;
    if (res->simd)
        setenv("FL_SIMD", res->simd, 1); /* the CPU backend reads it at create */
    double c0 = fl_now();
    rc = fl_backend_open(&b, m, &o, a->device, chosen, sizeof chosen, e);
    if (res->simd && env0)
        setenv("FL_SIMD", env0, 1);
    else if (res->simd)
        unsetenv("FL_SIMD");
    free(env0);
    if (rc) {
        fl_bw_probe_destroy(probe);
        return rc;
    }
    res->create_ms = (fl_now() - c0) * 1e3;
    res->rss_kb = fl_status_kb("VmRSS");
    res->load_hwm_kb = fl_status_kb("VmHWM");
    res->held = b->weights;
    res->kv_held = b->kv;
    snprintf(res->label, sizeof res->label, "%s%s%s", fl_wformat_name(b->weights),
             res->simd ? " " : "", res->simd ? (*res->simd ? res->simd : "auto") : "");
    printf("backend (--weights %s --kv-format %s): %s\n", fl_wformat_name(wf),
           fl_kvformat_name(res->kv_asked), chosen);
    double proj = fl_proj_flops(cf, 1) / 2; /* weights per row of the step */
    size_t arena = 0, mapped = 0;
    if (fl_cpu_weight_bytes(b, &arena, &mapped) == 0)
        *wbytes = arena + mapped; /* every byte a step reads: the embedding is in neither */
    else
        *wbytes = (size_t)(proj * (b->weights == FL_WEIGHTS_BF16 ? 2 : 4));
    /* page_bytes is the f32 host layout's; a bf16 pool holds half */
    res->kv_bytes = (size_t)b->n_pages * b->page_bytes / (b->kv == FL_KV_BF16 ? 2 : 1);
    int32_t *pages = malloc((size_t)(ctx_pages + 1) * sizeof *pages);
    int32_t *tok = malloc((size_t)(a->ctx + o.max_tokens) * sizeof *tok);
    fl_tok_out *out = malloc((size_t)o.max_tokens * sizeof *out);
    uint8_t *want = malloc((size_t)o.max_tokens);
    if (!pages || !tok || !out || !want) {
        rc = fl_err_set(e, FL_ENOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i <= ctx_pages; i++)
        pages[i] = i;
    uint32_t rng = 12345;
    for (int i = 0; i < a->ctx + o.max_tokens; i++) {
        rng = rng * 1664525u + 1013904223u;
        tok[i] = (int32_t)(rng % (uint32_t)cf->vocab);
    }
    *prefill_ms = 0;
    if (a->ctx > 0) {
        fl_segment s = {a->ctx, 0, a->ctx, a->ctx, pages, NULL};
        fl_batch bt = {tok, a->ctx, &s, 1};
        double t0 = fl_now();
        if ((rc = fl_forward(b, &bt, out, NULL, e)))
            goto done;
        *prefill_ms = (fl_now() - t0) * 1e3;
    }
    int mask = cf->mask_token_id >= 0 ? cf->mask_token_id : cf->vocab - 1;
    for (int i = 0; i < a->n_blocks; i++) {
        int nb = a->blocks[i];
        fl_segment s = {nb, a->ctx, 0, 0, pages, NULL};
        /* the block's tokens: random, its last `masked` ones the mask (a block being denoised) */
        int32_t *bt_tok = tok + a->ctx;
        for (int j = nb - a->masked; j < nb; j++)
            if (j >= 0)
                bt_tok[j] = mask;
        fl_batch bt = {bt_tok, nb, &s, 1};
        double t[64];
        int steps = a->steps > 64 ? 64 : a->steps;
        /* with some masks and some decided tokens, a decoding step asks the backend only for
           the masks' outputs (the scheduler's want): each timed step below asks as the
           scheduler does, and is paired with the same step asking every output, run just
           before it, so that both see the same machine */
        bool both = a->masked > 0 && a->masked < nb;
        for (int j = 0; j < nb; j++)
            want[j] = j >= nb - a->masked;
        double t_all[64], bws[64], tbw[64];
        res->bw_lo[i] = 1e30;
        res->bw_hi[i] = 0;
        fl_cpu_phases ph, acc = {{0}, 0};
        bool cpu = true;
        for (int r = 0; r <= steps; r++) { /* r == 0: warm-up */
            double t0 = fl_now();
            if (both) {
                s.want = NULL;
                if ((rc = fl_forward(b, &bt, out, NULL, e)))
                    goto done;
                if (r)
                    t_all[r - 1] = (fl_now() - t0) * 1e3;
                s.want = want;
            }
            cpu = cpu && fl_cpu_phases_get(b, &ph, true) == 0;
            /* the probe also leaves the caches holding its buffer: every timed step reads
               its weights from DRAM, as in serving, whatever the model's size */
            double bw0 = r ? fl_bw_probe_read(probe) : 0;
            t0 = fl_now();
            if ((rc = fl_forward(b, &bt, out, NULL, e)))
                goto done;
            if (r) {
                t[r - 1] = (fl_now() - t0) * 1e3;
                double bw1 = fl_bw_probe_read(probe);
                bws[r - 1] = (bw0 + bw1) / 2;
                tbw[r - 1] = t[r - 1] * bws[r - 1];
                for (int k = 0; k < 2; k++) {
                    double g = k ? bw1 : bw0;
                    res->bw_lo[i] = g < res->bw_lo[i] ? g : res->bw_lo[i];
                    res->bw_hi[i] = g > res->bw_hi[i] ? g : res->bw_hi[i];
                }
            }
            cpu = cpu && fl_cpu_phases_get(b, &ph, true) == 0;
            if (r && cpu) {
                for (int k = 0; k < FL_PH_N; k++)
                    acc.ms[k] += ph.ms[k];
                acc.forwards += ph.forwards;
            }
        }
        res->all_ms[i] = both ? fl_median(t_all, steps) : 0;
        cpu = cpu && acc.forwards > 0;
        for (int k = 0; k < FL_PH_N; k++)
            res->phase_ms[i][k] = cpu ? acc.ms[k] / (double)acc.forwards : -1;
        ours_ms[i] = fl_median(t, steps);
        res->bw[i] = fl_median(bws, steps);
        res->tbw[i] = fl_median(tbw, steps);
        fl_cpu_moe_stats st;
        res->read_bytes[i] = (double)*wbytes;
        if (fl_cpu_moe_stats_get(b, &st) == 0 && st.moe_layers) {
            res->moe_layers = st.moe_layers;
            res->touched[i] = (double)st.touched / st.moe_layers;
            res->read_bytes[i] = (double)(*wbytes - (size_t)st.expert_bytes_all) +
                                 (double)st.expert_bytes;
        }
    }
    res->hwm_kb = fl_status_kb("VmHWM");
    res->run_rss_kb = fl_status_kb("VmRSS");
done:
    free(pages);
    free(tok);
    free(out);
    free(want);
    fl_backend_destroy(b);
    fl_bw_probe_destroy(probe);
    return rc;
}

int fl_bench_forward(int argc, char **argv)
{
    fl_bench_args a = {.python = "/usr/bin/python3", .threads = 0, .ctx = 512, .steps = 5,
                       .device = "cpu"};
    fl_parse_blocks(&a, "4,8,32");
    a.formats[a.n_formats++] = FL_WEIGHTS_AUTO;
    a.kvs[a.n_kvs++] = FL_KV_AUTO;
    char ferr[200];
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(k, "--help") || !strcmp(k, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(k, "--bf16")) { /* the flag before --weights */
            a.formats[0] = FL_WEIGHTS_BF16;
            a.n_formats = 1;
        } else if (!strcmp(k, "--no-ref")) {
            a.no_ref = true;
        } else if (!strcmp(k, "--masked") && v && !fl_parse_int(v, 0, 4096, &a.masked)) {
            i++;
        } else if (!v) {
            fprintf(stderr, "fogline bench forward: %s needs a value (try --help)\n", k);
            return 2;
        } else if (!strcmp(k, "--model")) {
            a.model = v, i++;
        } else if (!strcmp(k, "--ref-script")) {
            a.ref_script = v, i++;
        } else if (!strcmp(k, "--python")) {
            a.python = v, i++;
        } else if (!strcmp(k, "--device") && fl_backend_device_valid(v) && *v) {
            a.device = v, i++;
        } else if (!strcmp(k, "--weights")) {
            if (fl_parse_formats(&a, v, ferr, sizeof ferr)) {
                fprintf(stderr, "fogline bench forward: %s\n", ferr);
                return 2;
            }
            i++;
        } else if (!strcmp(k, "--simd")) {
            if (fl_parse_simds(&a, v, ferr, sizeof ferr)) {
                fprintf(stderr, "fogline bench forward: %s\n", ferr);
                return 2;
            }
            i++;
        } else if (!strcmp(k, "--kv-format")) {
            int n = fl_bench_kvformats(v, a.kvs, FL_KV_COUNT, ferr, sizeof ferr);
            if (n < 0) {
                fprintf(stderr, "fogline bench forward: %s\n", ferr);
                return 2;
            }
            a.n_kvs = n;
            i++;
        } else if (!strcmp(k, "--threads") && !fl_parse_int(v, 0, 1024, &a.threads)) {
            i++;
        } else if (!strcmp(k, "--ctx") && !fl_parse_int(v, 0, 1 << 20, &a.ctx)) {
            i++;
        } else if (!strcmp(k, "--steps") && !fl_parse_int(v, 1, 64, &a.steps)) {
            i++;
        } else if (!strcmp(k, "--blocks") && !fl_parse_blocks(&a, v)) {
            i++;
        } else {
            fprintf(stderr, "fogline bench forward: bad option or value: %s %s (try --help)\n", k, v);
            return 2;
        }
    }
    if (!a.model) {
        usage(stderr);
        return 2;
    }
    if (a.threads == 0)
        a.threads = fl_ncpus();
    double load0 = fl_loadavg();

    /* the config first, to check the run before the reference spends a minute on it */
    fl_err e = {0};
    fl_config cf;
    if (fl_config_load(&cf, a.model, &e)) {
        fprintf(stderr, "fogline bench forward: %s\n", e.msg);
        return 1;
    }
    for (int i = 0; i < a.n_blocks; i++)
        if (a.ctx + a.blocks[i] > cf.max_pos) {
            fprintf(stderr, "fogline bench forward: ctx %d + block %d exceeds the model's %d "
                            "positions\n", a.ctx, a.blocks[i], cf.max_pos);
            return 2;
        }

    double ref_ms[FL_MAX_BLOCKS];
    char ref_note[512] = "reference: skipped (--no-ref)";
    for (int i = 0; i < a.n_blocks; i++)
        ref_ms[i] = NAN;
    if (!a.no_ref && cf.moe.router != FL_ROUTER_NONE) {
        snprintf(ref_note, sizeof ref_note, "reference: not run (bench_forward.py times the "
                 "dense layouts; MoE parity is tests/reference/moe_ref.py's)");
    } else if (!a.no_ref) {
        ref_note[0] = 0;
        fprintf(stderr, "running the PyTorch reference...\n");
        fl_run_reference(&a, ref_ms, ref_note, sizeof ref_note);
    }

    fl_model *m;
    fl_load_opts lo = {.no_tokenizer = true};
    double l0 = fl_now();
    if (fl_model_load(&m, a.model, &lo, &e)) {
        fprintf(stderr, "fogline bench forward: %s\n", e.msg);
        return 1;
    }
    double load_ms = (fl_now() - l0) * 1e3;
    fl_ours ours[FL_MAX_RUNS];
    int n_runs = 0;
    for (int f = 0; f < a.n_formats; f++)
        for (int k = 0; k < a.n_kvs; k++)
            for (int v = 0; v < (a.n_simds ? a.n_simds : 1); v++) {
                fl_ours *o = &ours[n_runs++];
                memset(o, 0, sizeof *o);
                o->asked = a.formats[f];
                o->kv_asked = a.kvs[k];
                o->simd = a.n_simds ? a.simds[v] : NULL;
                fprintf(stderr, "running ours (--weights %s --kv-format %s%s%s)...\n",
                        fl_wformat_name(o->asked), fl_kvformat_name(o->kv_asked),
                        o->simd ? " --simd " : "", o->simd ? (*o->simd ? o->simd : "auto") : "");
                if (fl_bench_ours(&a, m, o, &e)) {
                    fprintf(stderr, "fogline bench forward: --weights %s --kv-format %s: %s\n",
                            fl_wformat_name(o->asked), fl_kvformat_name(o->kv_asked), e.msg);
                    fl_model_free(m);
                    return 1;
                }
            }
    int64_t n_params = m->n_params;
    fl_model_free(m);

    fprintf(stderr, "measuring sgemm and bandwidth...\n");
    double bw;
    if (fl_cpu_read_bandwidth(a.threads, &bw, &e)) {
        fprintf(stderr, "fogline bench forward: %s\n", e.msg);
        return 1;
    }
    double sgemm_s[FL_MAX_BLOCKS];
    for (int i = 0; i < a.n_blocks; i++)
        sgemm_s[i] = fl_measure_sgemm(&cf, a.blocks[i], a.threads, 3);
    double load1 = fl_loadavg();
    int ww = a.n_simds ? 12 : 7; /* the "weights" column: "q8 avx512" with --simd */

    printf("fogline bench forward: %s\n", a.model);
    printf("model: %s, %d layers, hidden %d, heads %d/%d, vocab %d, %.2f B params, block %d\n",
           fl_family_name(cf.family), cf.n_layers, cf.hidden, cf.n_heads, cf.n_kv_heads,
           cf.vocab, n_params / 1e9, cf.block_size);
    char kern[96];
    if (a.n_simds)
        snprintf(kern, sizeof kern, "each run's --simd");
    else
        snprintf(kern, sizeof kern, "%s (q8/q4 %s)", fl_cpu_kernels_name(), fl_cpu_qkernels_name());
    printf("ours: %d threads, %s kernels, ctx %d, median of %d steps; model load %.0f ms\n",
           a.threads, kern, a.ctx, a.steps, load_ms);
    for (int f = 0; f < n_runs; f++)
        printf("ours --weights %s --kv-format %s%s%s: %s weights (%.2f GB streamed per step), %s "
               "KV; ready to serve (model load + backend create) %.0f ms, first forward (prefill) "
               "%.0f ms\n", fl_wformat_name(ours[f].asked), fl_kvformat_name(ours[f].kv_asked),
               ours[f].simd ? " --simd " : "",
               ours[f].simd ? (*ours[f].simd ? ours[f].simd : "auto") : "",
               fl_wformat_name(ours[f].held), ours[f].wbytes / 1e9,
               fl_kvformat_name(ours[f].kv_held), load_ms + ours[f].create_ms,
               ours[f].prefill_ms);
    printf("\nmemory (MB): weights = the bytes a step streams (the embedding is read from the "
           "file by row); each column less VmRSS before create: after load = VmRSS after create, "
           "load peak = VmHWM then, steady = VmRSS after the run, peak = VmHWM after the run\n");
    printf("%*s %4s %9s %9s %11s %9s %9s %9s %22s %20s\n", ww, "weights", "kv", "weights",
           "KV pool", "after load", "load peak", "steady", "peak", "steady/(weights+KV)",
           "peak/(weights+KV)");
    for (int f = 0; f < n_runs; f++) {
        const fl_ours *o = &ours[f];
        double w = o->wbytes / 1048576.0, kv = o->kv_bytes / 1048576.0, z = o->rss0_kb / 1024.0;
        double base = w + kv;
        if (!o->hwm_reset) { /* VmHWM could not be reset: the peaks are the process's */
            printf("%*s %4s %9.0f %9.0f %11.0f %9s %9.0f %9s %21.2fx %20s\n",
                   ww, o->label, fl_kvformat_name(o->kv_held), w, kv,
                   o->rss_kb / 1024.0 - z, "n/a",
                   o->run_rss_kb / 1024.0 - z, "n/a", (o->run_rss_kb / 1024.0 - z) / base, "n/a");
            continue;
        }
        printf("%*s %4s %9.0f %9.0f %11.0f %9.0f %9.0f %9.0f %21.2fx %19.2fx\n",
               ww, o->label, fl_kvformat_name(o->kv_held), w, kv,
               o->rss_kb / 1024.0 - z, o->load_hwm_kb / 1024.0 - z, o->run_rss_kb / 1024.0 - z,
               o->hwm_kb / 1024.0 - z, (o->run_rss_kb / 1024.0 - z) / base,
               (o->hwm_kb / 1024.0 - z) / base);
    }
    printf("%s\n", ref_note);
    printf("machine: OpenBLAS sgemm (%s kernels) with %d threads at the same shapes (M = block "
           "rows, weights from DRAM); read bandwidth after the runs %.1f GB/s (best of 4 "
           "passes); load average %.2f -> %.2f\n",
           openblas_get_corename(), a.threads, bw, load0, load1);
    printf("\n%5s %*s %4s %8s %9s %9s %7s %11s %13s %9s %14s %9s %9s\n", "block", ww, "weights",
           "kv", "cache MB", "ours ms", "ref ms", "ratio", "our GFLOP/s", "sgemm GFLOP/s",
           "fraction", "step GB/s", "floor ms", "ms/floor");
    for (int i = 0; i < a.n_blocks; i++)
        for (int f = 0; f < n_runs; f++) {
            int nb = a.blocks[i];
            const double *ours_ms = ours[f].ms;
            double fl = fl_proj_flops(&cf, nb) + fl_attn_flops(&cf, a.ctx, nb);
            double ours_g = fl / (ours_ms[i] * 1e-3) / 1e9;
            double sg = fl_proj_flops(&cf, nb) / sgemm_s[i] / 1e9;
            double cache = fl_cache_bytes(&cf, a.ctx, ours[f].kv_held);
            double bytes = ours[f].wbytes + cache;
            char bwr[40];
            fl_bw_range(bwr, sizeof bwr, &ours[f], i);
            printf("%5d %*s %4s %8.0f %9.1f %9.1f %6.2fx %11.1f %13.1f %9.2f %14s %9.1f %8.2fx\n",
                   nb, ww, ours[f].label, fl_kvformat_name(ours[f].kv_held),
                   cache / 1048576.0, ours_ms[i], ref_ms[i], ref_ms[i] / ours_ms[i], ours_g, sg,
                   ours_g / sg, bwr, bytes / (ours[f].bw[i] * 1e9) * 1e3,
                   ours[f].tbw[i] * 1e6 / bytes);
        }
    printf("\nratio = reference ms / ours; fraction = our GFLOP/s / sgemm GFLOP/s; step GB/s = "
           "the read bandwidth probed just before and just after each timed step (median, and "
           "the lowest-highest probe); floor = (weight bytes + cache) / that bandwidth, the "
           "bytes a step streams; ms/floor = the median over the steps of each one's ms over "
           "the floor at its own bandwidth; cache = the ctx "
           "positions' K/V as the pool holds them (from DRAM once per kv head; a block of more "
           "than 16 query rows per kv head reads them again per tile, from cache)\n");
    if (ours[0].phase_ms[0][0] >= 0) {
        printf("\nwhere a step goes (ms, mean of the timed forwards; each phase from its start "
               "to the next's, so they add up to the step):\n%5s %*s %4s", "block", ww, "weights",
               "kv");
        for (int k = 0; k < FL_PH_N; k++)
            printf(" %9s", fl_cpu_phase_names[k]);
        printf("\n");
        for (int i = 0; i < a.n_blocks; i++)
            for (int f = 0; f < n_runs; f++) {
                printf("%5d %*s %4s", a.blocks[i], ww, ours[f].label,
                       fl_kvformat_name(ours[f].kv_held));
                for (int k = 0; k < FL_PH_N; k++)
                    printf(" %9.2f", ours[f].phase_ms[i][k]);
                printf("\n");
            }
    }
    if (ours[0].moe_layers) {
        printf("\nmixture of experts (%d MoE layers, %d experts, top %d; the last %d tokens of "
               "each block are the mask):\n", ours[0].moe_layers, cf.moe.n_experts,
               cf.moe.top_k, a.masked);
        printf("%5s %*s %4s %15s %14s %13s %9s %14s %9s %11s\n", "block", ww, "weights", "kv",
               "experts/layer", "GB read/step", "of all (%)", "ours ms", "step GB/s",
               "floor ms", "ms / floor");
        for (int i = 0; i < a.n_blocks; i++)
            for (int f = 0; f < n_runs; f++) {
                double rb = ours[f].read_bytes[i];
                double bytes = rb + fl_cache_bytes(&cf, a.ctx, ours[f].kv_held);
                char bwr[40];
                fl_bw_range(bwr, sizeof bwr, &ours[f], i);
                printf("%5d %*s %4s %15.1f %14.3f %13.1f %9.1f %14s %9.1f %10.2fx\n",
                       a.blocks[i], ww, ours[f].label,
                       fl_kvformat_name(ours[f].kv_held), ours[f].touched[i], rb / 1e9,
                       100.0 * rb / (double)ours[f].wbytes, ours[f].ms[i], bwr,
                       bytes / (ours[f].bw[i] * 1e9) * 1e3, ours[f].tbw[i] * 1e6 / bytes);
            }
        printf("GB read/step = the weights a step reads: every non-expert matrix, the routers, "
               "the shared experts and the routed experts its tokens went to, each once; floor = "
               "(that + the cached K/V) / the step's bandwidth, as above\n");
    }
    if (ours[0].all_ms[0] > 0) {
        printf("\noutputs asked (--masked %d): a decoding step asks the backend only for its "
               "masks' outputs, so the lm_head multiplies those rows only:\n%5s %*s %4s %13s "
               "%14s %7s\n", a.masked, "block", ww, "weights", "kv", "all rows ms", "masks' rows ms",
               "ratio");
        for (int i = 0; i < a.n_blocks; i++)
            for (int f = 0; f < n_runs; f++)
                if (ours[f].all_ms[i] > 0)
                    printf("%5d %*s %4s %13.1f %14.1f %6.2fx\n", a.blocks[i],
                           ww, ours[f].label, fl_kvformat_name(ours[f].kv_held),
                           ours[f].all_ms[i], ours[f].ms[i], ours[f].all_ms[i] / ours[f].ms[i]);
    }
    return 0;
}
