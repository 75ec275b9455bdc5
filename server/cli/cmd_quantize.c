/* cmd_quantize.c: `fogline quantize --model DIR --out DIR --weights q8|q4`: a quantized copy
 * of a float model directory (docs/models.md, "Quantized directories"; the format is
 * engine/qformat.h).
 *
 * What it writes: OUT/model.safetensors, one file whatever the input's sharding, with the
 * input's tensors in the input's order (file by file, by data offset): every projection
 * matrix (q, k, v, o, gate, up, down; LLaDA2's fused query_key_value; every expert's and
 * shared expert's gate, up, down, but not the routers) in the chosen format, the embedding
 * and an untied lm_head in q8 whichever format is chosen, each as its quants `NAME.weight`, and after all
 * of them, in the same order, their scales `NAME.weight_scale`; everything else (norms,
 * biases, a matrix whose rows are not a multiple of 32 long, tensors the model does not use)
 * copied unchanged. Scales go last so that the tensors before them keep the alignment their
 * sizes give (safetensors allows no padding between tensors; every quant plane's size is a
 * multiple of 16). config.json gets "quantization_config"; the other files of the directory
 * (tokenizer, templates, generation config, README, ...) are copied when small.
 *
 * Memory: the input stays mapped, and a matrix is converted and quantized QZ_ROWS rows at a
 * time, each piece written at its place in the output at once (the header is computed from
 * the shapes up front): never an f32 copy of a tensor, let alone of the model.
 *
 * Failure leaves nothing: everything is written to a temporary directory beside OUT, renamed
 * to OUT only when complete, and removed on any error. */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "model.h"
#include "qformat.h"
#include "st_write.h"

#define QZ_ROWS 256                       /* rows converted and quantized at a time */
#define QZ_MAX_FLOATS ((size_t)1 << 22)   /* ... fewer when rows are long: 16 MB of f32 at most */
#define QZ_COPY_MAX ((off_t)64 << 20)     /* other files larger than this are not copied */
#define QZ_PIECE ((size_t)16 << 20)       /* copied tensors go out in pieces of this */

static void usage(FILE *f)
{
    fprintf(f, "usage: fogline quantize --model DIR --out DIR --weights q8|q4\n\n"
               "Writes a quantized copy of a float model directory (docs/models.md):\n"
               "OUT/model.safetensors with every projection matrix (q, k, v, o, gate, up, down)\n"
               "in q8 (8.5 bits a weight) or q4 (4.5 bits), the embedding and an untied lm_head\n"
               "in q8 either way, norms and biases unchanged; config.json with\n"
               "quantization_config added; the tokenizer and the other small files copied.\n"
               "OUT must not exist or be empty; nothing is left behind on failure.\n\n"
               "  --model DIR      the float model directory (config.json, *.safetensors)\n"
               "  --out DIR        the directory to create\n"
               "  --weights F      q8 or q4: the projections' format\n"
               "  --help           this text\n");
}

/* One line on stderr, whatever the message holds; exit status 1. */
static int fail(const char *fmt, ...) FL_PRINTF(1, 2);
static int fail(const char *fmt, ...)
{
    char msg[FL_ERR_MSG + 512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fputs("fogline quantize: ", stderr);
    for (const char *p = msg; *p; p++)
        fputc(*p == '\n' || *p == '\r' ? ' ' : *p, stderr);
    fputc('\n', stderr);
    return 1;
}

/* 0 when dir is missing or an empty directory; 1 when it holds something; -1 when it is not
 * a directory (or cannot be read). */
static int dir_state(const char *dir)
{
    struct stat sb;
    if (stat(dir, &sb))
        return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(sb.st_mode))
        return -1;
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    struct dirent *de;
    int full = 0;
    while (!full && (de = readdir(d)))
        full = strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
    closedir(d);
    return full;
}

/* The absolute path out would have: realpath of its parent (which must exist) + its last
 * component. Into buf (PATH_MAX); NULL when the parent does not resolve. */
static char *resolve_new(const char *out, char *buf)
{
    char *a = strdup(out), *b = strdup(out);
    char *res = NULL;
    if (a && b) {
        char parent[PATH_MAX];
        const char *base = basename(b);
        if (realpath(dirname(a), parent) &&
            snprintf(buf, PATH_MAX, "%s/%s", strcmp(parent, "/") ? parent : "", base) < PATH_MAX)
            res = buf;
    }
    free(a);
    free(b);
    return res;
}

typedef struct qz_job {
    const fl_model *m;
    const char *dir, *out;
    fl_quant fmt;            /* the projections' format */
    size_t n;                /* input tensors */
    size_t *order;           /* (n) input tensor indices in file order */
    fl_quant *kind;          /* (n) FL_QUANT_NONE: copied; else the format it gets */
    size_t n_quant;
    uint64_t bytes_in, bytes_out; /* tensor data, input and output */
} qz_job;

/* Where a tensor lies in the input, for sorting into the files' own order. */
typedef struct qz_place {
    size_t file, offset, index;
} qz_place;

static int cmp_place(const void *a, const void *b)
{
    const qz_place *x = a, *y = b;
    if (x->file != y->file)
        return x->file < y->file ? -1 : 1;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* Marks the matrix roles to quantize: those whose rows are a multiple of 32 long. */
static void mark(qz_job *j, const fl_tensor *t, bool head)
{
    size_t i = fl_weights_index(j->m->weights, t);
    if (i == SIZE_MAX || t->ndim != 2 || t->shape[1] % FL_QG)
        return;
    if (j->kind[i] == FL_QUANT_NONE)
        j->n_quant++;
    j->kind[i] = head ? FL_QUANT_Q8 : j->fmt;
}

static int plan(qz_job *j)
{
    const fl_model *m = j->m;
    j->n = fl_weights_count(m->weights);
    j->order = calloc(j->n + 1, sizeof *j->order);
    j->kind = calloc(j->n + 1, sizeof *j->kind);
    qz_place *pl = calloc(j->n + 1, sizeof *pl);
    if (!j->order || !j->kind || !pl) {
        free(pl);
        return fail("out of memory");
    }
    for (size_t i = 0; i < j->n; i++) {
        pl[i] = (qz_place){fl_weights_file_of(m->weights, i),
                           fl_weights_data_offset(m->weights, i), i};
        j->bytes_in += fl_weights_at(m->weights, i)->nbytes;
    }
    qsort(pl, j->n, sizeof *pl, cmp_place);
    for (size_t i = 0; i < j->n; i++)
        j->order[i] = pl[i].index;
    free(pl);
    mark(j, m->embed, true);
    if (m->lm_head != m->embed)
        mark(j, m->lm_head, true);
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const fl_layer_w *L = &m->layers[l];
        const fl_tensor *mats[] = {L->wq,     L->wk,         L->wv,        L->wo,
                                   L->w_gate, L->w_up,       L->w_down,    L->wqkv,
                                   L->shared.gate, L->shared.up, L->shared.down};
        for (size_t k = 0; k < sizeof mats / sizeof mats[0]; k++)
            mark(j, mats[k], false); /* NULLs are skipped */
        /* every routed expert; the router (mlp.gate) stays float: it routes in fp32 */
        for (int x = 0; L->experts && x < m->cfg.moe.n_experts; x++) {
            mark(j, L->experts[x].gate, false);
            mark(j, L->experts[x].up, false);
            mark(j, L->experts[x].down, false);
        }
    }
    return 0;
}

/* The output's tensors: the input's in order (quantized ones as their quants), then the
 * quantized ones' scales in the same order. names: (n_quant) the scale names, owned. */
static int make_specs(qz_job *j, fl_st_spec *sp, char **names)
{
    size_t q = 0;
    for (size_t r = 0; r < j->n; r++) {
        size_t i = j->order[r];
        const fl_tensor *t = fl_weights_at(j->m->weights, i);
        fl_st_spec *s = &sp[r];
        s->name = t->name;
        s->dtype = t->dtype;
        s->ndim = t->ndim;
        memcpy(s->shape, t->shape, sizeof s->shape);
        if (j->kind[i] == FL_QUANT_NONE)
            continue;
        s->dtype = j->kind[i] == FL_QUANT_Q8 ? FL_DT_I8 : FL_DT_U8;
        if (j->kind[i] == FL_QUANT_Q4)
            s->shape[1] = t->shape[1] / 2;
        size_t len = strlen(t->name) + sizeof "_scale";
        if (!(names[q] = malloc(len)))
            return fail("out of memory");
        snprintf(names[q], len, "%s_scale", t->name);
        fl_st_spec *d = &sp[j->n + q];
        *d = (fl_st_spec){.name = names[q], .dtype = FL_DT_F16, .ndim = 2,
                          .shape = {t->shape[0], t->shape[1] / FL_QG}};
        q++;
    }
    for (size_t r = 0; r < j->n + j->n_quant; r++) {
        uint64_t b = fl_dtype_size(sp[r].dtype);
        for (int d = 0; d < sp[r].ndim; d++)
            b *= (uint64_t)sp[r].shape[d];
        j->bytes_out += b;
    }
    return 0;
}

/* Quantizes tensor t (n, k) into output tensors qi (quants) and si (scales), rows at a
 * time: x (rows, k) f32, q (rows, k) or (rows, k/2) bytes, d (rows, k/32) f16. */
static int quantize_one(const qz_job *j, fl_st_writer *w, const fl_tensor *t, fl_quant fmt,
                        size_t qi, size_t si)
{
    size_t n = (size_t)t->shape[0], k = (size_t)t->shape[1], G = k / FL_QG;
    size_t rows = QZ_MAX_FLOATS / k;
    rows = rows < 1 ? 1 : rows > QZ_ROWS ? QZ_ROWS : rows;
    size_t qrow = fmt == FL_QUANT_Q8 ? k : k / 2;
    float *x = malloc(rows * k * sizeof *x);
    unsigned char *q = malloc(rows * qrow);
    uint16_t *d = malloc(rows * G * sizeof *d);
    fl_err e = {0};
    int rc = x && q && d ? 0 : fl_err_set(&e, FL_ENOMEM, "out of memory");
    for (size_t r0 = 0; !rc && r0 < n; r0 += rows) {
        size_t nr = n - r0 < rows ? n - r0 : rows;
        rc = fl_matrix_rows_f32(x, t, NULL, r0, nr, k, &e);
        if (!rc)
            rc = fmt == FL_QUANT_Q8
                     ? fl_q8_quantize((int8_t *)q, d, x, (int)nr, (int)k, &e)
                     : fl_q4_quantize(q, d, x, (int)nr, (int)k, &e);
        if (rc) {
            fl_err_prefix(&e, "%s: tensor %s, rows %zu..%zu", j->dir, t->name, r0, r0 + nr - 1);
            break;
        }
        rc = fl_st_put(w, qi, q, nr * qrow, &e);
        if (!rc)
            rc = fl_st_put(w, si, d, nr * G * sizeof *d, &e);
    }
    free(x);
    free(q);
    free(d);
    return rc ? fail("%s", e.msg) : 0;
}

static int write_weights(qz_job *j, const char *path)
{
    size_t total = j->n + j->n_quant;
    fl_st_spec *sp = calloc(total + 1, sizeof *sp);
    char **names = calloc(j->n_quant + 1, sizeof *names);
    int rc = sp && names ? make_specs(j, sp, names) : fail("out of memory");
    fl_st_writer *w = NULL;
    fl_err e = {0};
    static const char *const meta[] = {"format", "pt"};
    if (!rc && fl_st_create(&w, path, sp, total, meta, 1, &e))
        rc = fail("%s", e.msg);
    size_t q = 0;
    for (size_t r = 0; !rc && r < j->n; r++) {
        size_t i = j->order[r];
        const fl_tensor *t = fl_weights_at(j->m->weights, i);
        if (j->kind[i] != FL_QUANT_NONE) {
            rc = quantize_one(j, w, t, j->kind[i], r, j->n + q++);
            continue;
        }
        for (size_t at = 0; !rc && at < t->nbytes; at += QZ_PIECE) {
            size_t len = t->nbytes - at < QZ_PIECE ? t->nbytes - at : QZ_PIECE;
            if (fl_st_put(w, r, (const char *)t->data + at, len, &e))
                rc = fail("%s", e.msg);
        }
    }
    if (w) {
        if (rc)
            fl_st_abort(w);
        else if (fl_st_finish(w, &e))
            rc = fail("%s", e.msg);
    }
    for (size_t k = 0; names && k < j->n_quant; k++)
        free(names[k]);
    free(names);
    free(sp);
    return rc;
}

/* config.json with quantization_config added and every other byte kept: the key goes in as
 * text before the top-level object's closing brace (the last character of the file but
 * white space), so the other keys keep their order and their numbers their spelling (jansson
 * would write 1e-06 as 9.9999999999999995e-07). jansson parses the input first and the result
 * after, which must be the input plus the one key. */
static int write_config(const qz_job *j, const char *tmp)
{
    char *src = fl_path_join(j->dir, "config.json"), *dst = fl_path_join(tmp, "config.json");
    char *text = NULL;
    size_t len = 0;
    fl_err e = {0};
    json_error_t jerr;
    json_t *want = NULL, *got = NULL;
    fl_buf b = {0};
    int rc = 0;
    if (!src || !dst)
        rc = fail("out of memory");
    else if (fl_read_file(src, &text, &len, &e))
        rc = fail("%s", e.msg);
    else if (!(want = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr)) || !json_is_object(want))
        rc = fail("%s: not a JSON object%s%s", src, want ? "" : ": ", want ? "" : jerr.text);
    size_t end = len;
    while (!rc && end && strchr(" \t\r\n", text[end - 1]))
        end--;
    size_t last = end ? end - 1 : 0; /* the closing brace */
    while (!rc && last && strchr(" \t\r\n", text[last - 1]))
        last--;
    if (!rc) {
        json_t *q = json_pack("{sssssi}", "quant_method", "fogline", "format",
                              fl_quant_name(j->fmt), "group_size", FL_QG);
        if (!q || json_object_set_new(want, "quantization_config", q))
            rc = fail("out of memory");
    }
    if (!rc) {
        bool empty = last && text[last - 1] == '{';
        fl_buf_append(&b, text, last);
        fl_buf_printf(&b, "%s\n  \"quantization_config\": {\"quant_method\": \"fogline\", "
                          "\"format\": \"%s\", \"group_size\": %d}\n}\n",
                      empty ? "" : ",", fl_quant_name(j->fmt), FL_QG);
        if (b.err)
            rc = fail("out of memory");
    }
    if (!rc && (!(got = json_loadb(b.data, b.len, JSON_REJECT_DUPLICATES, &jerr)) ||
                !json_equal(got, want)))
        rc = fail("%s: cannot add quantization_config to its text (%s)", src,
                  got ? "the result differs" : jerr.text);
    if (!rc) {
        FILE *f = fopen(dst, "wb");
        bool ok = f && fwrite(b.data, 1, b.len, f) == b.len;
        int err = errno;
        if (f && fclose(f) && ok) {
            ok = false;
            err = errno;
        }
        if (!ok)
            rc = fail("cannot write %s: %s", dst, strerror(err));
    }
    json_decref(want);
    json_decref(got);
    fl_buf_free(&b);
    free(text);
    free(src);
    free(dst);
    return rc;
}

static int copy_file(const char *src, const char *dst)
{
    FILE *in = fopen(src, "rb"), *out = in ? fopen(dst, "wb") : NULL;
    int rc = 0;
    if (!in || !out)
        rc = fail("cannot copy %s: %s", src, strerror(errno));
    char buf[1 << 16];
    size_t k;
    while (!rc && (k = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, k, out) != k)
            rc = fail("cannot write %s: %s", dst, strerror(errno));
    if (!rc && ferror(in))
        rc = fail("cannot read %s", src);
    if (in)
        fclose(in);
    if (out && fclose(out) && !rc)
        rc = fail("cannot write %s: %s", dst, strerror(errno));
    return rc;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* The directory's other files: tokenizer, chat template, generation config, README, ...
 * (followed through symbolic links, as a Hugging Face cache snapshot holds them). Weights,
 * the index, config.json, subdirectories and files above QZ_COPY_MAX (other weight formats)
 * are not copied; each skipped file is named on stderr. */
static int copy_others(const qz_job *j, const char *tmp, int *n_copied)
{
    DIR *d = opendir(j->dir);
    if (!d)
        return fail("cannot read %s: %s", j->dir, strerror(errno));
    int rc = 0;
    struct dirent *de;
    while (!rc && (de = readdir(d))) {
        const char *nm = de->d_name;
        if (!strcmp(nm, ".") || !strcmp(nm, "..") || !strcmp(nm, "config.json") ||
            ends_with(nm, ".safetensors") || ends_with(nm, ".safetensors.index.json"))
            continue;
        char *src = fl_path_join(j->dir, nm), *dst = fl_path_join(tmp, nm);
        struct stat sb;
        if (!src || !dst)
            rc = fail("out of memory");
        else if (stat(src, &sb) || !S_ISREG(sb.st_mode))
            ; /* directories and the like: not part of a model */
        else if (sb.st_size > QZ_COPY_MAX)
            fprintf(stderr, "fogline quantize: not copied: %s (%lld bytes; files above %lld "
                            "bytes are taken for other weight formats)\n",
                    nm, (long long)sb.st_size, (long long)QZ_COPY_MAX);
        else if (!(rc = copy_file(src, dst)))
            (*n_copied)++;
        free(src);
        free(dst);
    }
    closedir(d);
    return rc;
}

int fl_cmd_quantize(int argc, char **argv)
{
    const char *dir = NULL, *out = NULL, *fmt = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **slot = !strcmp(a, "--model") ? &dir : !strcmp(a, "--out") ? &out
                            : !strcmp(a, "--weights")                           ? &fmt
                                                                                : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (slot) {
            if (i + 1 >= argc) {
                fprintf(stderr, "fogline quantize: %s needs a value (try --help)\n", a);
                return 2;
            }
            *slot = argv[++i];
        } else if (!strncmp(a, "--model=", 8)) {
            dir = a + 8;
        } else if (!strncmp(a, "--out=", 6)) {
            out = a + 6;
        } else if (!strncmp(a, "--weights=", 10)) {
            fmt = a + 10;
        } else {
            fprintf(stderr, "fogline quantize: unknown option '%s' (try --help)\n", a);
            return 2;
        }
    }
    if (!dir || !*dir || !out || !*out || !fmt) {
        fprintf(stderr, "fogline quantize: --model DIR, --out DIR and --weights q8|q4 are "
                        "required (try --help)\n");
        return 2;
    }
    qz_job j = {.dir = dir, .out = out};
    if (!strcmp(fmt, "q8")) {
        j.fmt = FL_QUANT_Q8;
    } else if (!strcmp(fmt, "q4")) {
        j.fmt = FL_QUANT_Q4;
    } else {
        fprintf(stderr, "fogline quantize: --weights must be q8 or q4, got '%.40s'\n", fmt);
        return 2;
    }
    char rin[PATH_MAX], rout[PATH_MAX];
    if (realpath(dir, rin) && (realpath(out, rout) || resolve_new(out, rout)) &&
        !strcmp(rin, rout))
        return fail("--out %s is the model directory itself (write the copy elsewhere)", out);
    int st = dir_state(out);
    if (st)
        return fail(st > 0 ? "--out %s exists and is not empty" : "--out %s is not a directory",
                    out);
    double t0 = fl_now();
    fl_model *m = NULL;
    fl_err e = {0};
    fl_load_opts lo = {.no_tokenizer = true};
    if (fl_model_load(&m, dir, &lo, &e))
        return fail("%s", e.msg);
    if (m->quant != FL_QUANT_NONE) {
        int rc = fail("%s is already quantized (%s): quantize a float model", dir,
                      fl_quant_name(m->quant));
        fl_model_free(m);
        return rc;
    }
    j.m = m;
    int rc = plan(&j);

    /* a temporary directory beside OUT, so the final rename stays on one filesystem */
    char tmp[PATH_MAX];
    {
        char *a = strdup(out), *b = strdup(out);
        if (!a || !b ||
            snprintf(tmp, sizeof tmp, "%s/.%s.partial-XXXXXX", dirname(a), basename(b)) >=
                (int)sizeof tmp)
            tmp[0] = 0;
        free(a);
        free(b);
    }
    bool made = false;
    if (!rc && !tmp[0])
        rc = fail("--out %s: path too long", out);
    if (!rc && !(made = mkdtemp(tmp) != NULL))
        rc = fail("cannot create a directory beside %s: %s", out, strerror(errno));
    if (!rc) { /* mkdtemp's 0700 would make the model private to its writer */
        mode_t um = umask(0);
        umask(um);
        if (chmod(tmp, 0777 & ~um))
            rc = fail("cannot set the mode of %s: %s", tmp, strerror(errno));
    }
    char *st_path = rc ? NULL : fl_path_join(tmp, "model.safetensors");
    if (!rc && !st_path)
        rc = fail("out of memory");
    if (!rc)
        rc = write_weights(&j, st_path);
    if (!rc)
        rc = write_config(&j, tmp);
    int n_copied = 0;
    if (!rc)
        rc = copy_others(&j, tmp, &n_copied);
    /* rename(2) replaces OUT when it is an empty directory */
    if (!rc && rename(tmp, out))
        rc = fail("cannot rename %s to %s: %s", tmp, out, strerror(errno));
    else if (!rc)
        made = false;
    if (made)
        fl_rmtree(tmp);
    if (!rc)
        printf("fogline quantize: %s -> %s (%s): %zu tensors (%zu quantized, %zu copied, %zu "
               "scales added), %llu bytes in, %llu bytes out, %d other files copied, %.1f s\n",
               dir, out, fl_quant_name(j.fmt), j.n + j.n_quant, j.n_quant, j.n - j.n_quant,
               j.n_quant, (unsigned long long)j.bytes_in, (unsigned long long)j.bytes_out,
               n_copied, fl_now() - t0);
    free(st_path);
    free(j.order);
    free(j.kind);
    fl_model_free(m);
    if (!rc && (fflush(stdout) || ferror(stdout)))
        return fail("cannot write to stdout");
    return rc;
}
