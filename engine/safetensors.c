/* safetensors.c: opens safetensors files (single or sharded) by mmap, validates every header
 * entry against the file before any tensor is exposed, and indexes tensors by name.
 *
 * The header is untrusted input: a hostile or truncated file must give a one-line error that
 * names the file and the tensor or field, never a read outside the mapping. */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The Rust reference implementation refuses headers above 100 MB; real models are < 2 MB. */
#define FL_ST_MAX_HEADER (100u * 1000u * 1000u)

typedef struct st_file {
    char *path;
    void *map;   /* (size) read-only mapping of the whole file */
    size_t size;
} st_file;

struct fl_weights {
    st_file *files;    /* (n_files) */
    size_t n_files;
    fl_tensor *t;      /* (n) sorted by name once opening succeeds */
    size_t *t_file;    /* (n) index into files for each tensor, same order as t */
    size_t n, cap;
    size_t total_bytes; /* sum of tensor data bytes */
};

static const char *const dtype_names[FL_DT_COUNT] = {"F32", "F16", "BF16", "I32", "I64",
                                                     "U8",  "I8",  "F64",  "BOOL"};

static int dtype_from_name(const char *s, fl_dtype *out)
{
    for (int i = 0; i < FL_DT_COUNT; i++)
        if (!strcmp(s, dtype_names[i])) {
            *out = (fl_dtype)i;
            return 0;
        }
    return -1;
}

static int weights_push(fl_weights *w, const fl_tensor *t, size_t file)
{
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 64;
        fl_tensor *nt = realloc(w->t, cap * sizeof *nt);
        if (!nt)
            return FL_ENOMEM;
        w->t = nt;
        size_t *nf = realloc(w->t_file, cap * sizeof *nf);
        if (!nf)
            return FL_ENOMEM;
        w->t_file = nf;
        w->cap = cap;
    }
    w->t[w->n] = *t;
    w->t_file[w->n] = file;
    w->n++;
    return 0;
}

/* Reads one non-negative JSON integer; -1 when it is not one. */
static int64_t json_nonneg(const json_t *v)
{
    if (!json_is_integer(v))
        return -1;
    json_int_t x = json_integer_value(v);
    return x < 0 ? -1 : (int64_t)x;
}

/* Validates one header entry and fills t (name not set). data_size: bytes after the header. */
static int parse_entry(fl_tensor *t, const char *path, const char *name, json_t *v,
                       const unsigned char *data, size_t data_size, fl_err *e)
{
    if (!json_is_object(v))
        return fl_err_set(e, FL_EFORMAT, "%s: tensor '%s': header entry is not an object", path,
                          name);
    json_t *jd = json_object_get(v, "dtype");
    if (!json_is_string(jd))
        return fl_err_set(e, FL_EFORMAT, "%s: tensor '%s': missing or non-string dtype", path,
                          name);
    if (dtype_from_name(json_string_value(jd), &t->dtype))
        return fl_err_set(e, FL_EUNSUPPORTED, "%s: unknown dtype %s for tensor %s", path,
                          json_string_value(jd), name);
    json_t *js = json_object_get(v, "shape");
    if (!json_is_array(js))
        return fl_err_set(e, FL_EFORMAT, "%s: tensor '%s': missing or non-array shape", path,
                          name);
    size_t nd = json_array_size(js);
    if (nd > FL_MAX_DIMS)
        return fl_err_set(e, FL_EUNSUPPORTED, "%s: tensor '%s': shape has %zu dims (at most %d)",
                          path, name, nd, FL_MAX_DIMS);
    t->ndim = (int)nd;
    memset(t->shape, 0, sizeof t->shape);
    /* numel * element size must fit the data, so any honest product is far below INT64_MAX;
     * stop at the first factor that would overflow. */
    uint64_t numel = 1;
    for (size_t i = 0; i < nd; i++) {
        int64_t d = json_nonneg(json_array_get(js, i));
        if (d < 0)
            return fl_err_set(e, FL_EFORMAT,
                              "%s: tensor '%s': shape[%zu] is not a non-negative integer", path,
                              name, i);
        t->shape[i] = d;
        if (d && numel > (uint64_t)INT64_MAX / (uint64_t)d)
            return fl_err_set(e, FL_ERANGE, "%s: tensor '%s': shape overflows 64 bits", path,
                              name);
        numel *= (uint64_t)d;
    }
    size_t esz = fl_dtype_size(t->dtype);
    if (numel > (uint64_t)INT64_MAX / esz)
        return fl_err_set(e, FL_ERANGE, "%s: tensor '%s': byte size overflows 64 bits", path,
                          name);
    t->numel = (int64_t)numel;
    json_t *jo = json_object_get(v, "data_offsets");
    if (!json_is_array(jo) || json_array_size(jo) != 2)
        return fl_err_set(e, FL_EFORMAT, "%s: tensor '%s': data_offsets is not a pair", path,
                          name);
    int64_t a = json_nonneg(json_array_get(jo, 0)), b = json_nonneg(json_array_get(jo, 1));
    if (a < 0 || b < 0)
        return fl_err_set(e, FL_EFORMAT,
                          "%s: tensor '%s': data_offsets are not non-negative integers", path,
                          name);
    if (a > b)
        return fl_err_set(e, FL_EFORMAT, "%s: tensor '%s': data_offsets [%lld, %lld] run backwards",
                          path, name, (long long)a, (long long)b);
    if ((uint64_t)b > data_size)
        return fl_err_set(e, FL_ERANGE,
                          "%s: tensor '%s': data_offsets [%lld, %lld] end past the data (%zu "
                          "bytes; file truncated?)",
                          path, name, (long long)a, (long long)b, data_size);
    if ((uint64_t)(b - a) != numel * esz)
        return fl_err_set(e, FL_EFORMAT,
                          "%s: tensor '%s': data_offsets [%lld, %lld] hold %lld bytes, shape and "
                          "dtype %s need %llu",
                          path, name, (long long)a, (long long)b, (long long)(b - a),
                          dtype_names[t->dtype], (unsigned long long)(numel * esz));
    t->data = data + a;
    t->nbytes = (size_t)(b - a);
    return 0;
}

/* Maps path and appends its tensors to w (file index fi, already in w->files). */
static int open_one(fl_weights *w, size_t fi, fl_err *e)
{
    st_file *f = &w->files[fi];
    const char *path = f->path;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fl_err_set(e, errno == ENOENT ? FL_ENOTFOUND : FL_EIO, "cannot open %s: %s", path,
                          strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
        close(fd);
        return fl_err_set(e, FL_EIO, "%s: not a regular file", path);
    }
    if (sb.st_size < 8) {
        close(fd);
        return fl_err_set(e, FL_EFORMAT, "%s: %lld bytes, too short for a safetensors file", path,
                          (long long)sb.st_size);
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        close(fd);
        return fl_err_set(e, FL_ERANGE, "%s: too large to map", path);
    }
    void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int merr = errno;
    close(fd); /* the mapping keeps the file alive */
    if (map == MAP_FAILED)
        return fl_err_set(e, FL_EIO, "%s: mmap failed: %s", path, strerror(merr));
    f->map = map;
    f->size = (size_t)sb.st_size;

    const unsigned char *p = map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) /* little-endian whatever the host */
        hlen = hlen << 8 | p[i];
    if (hlen > FL_ST_MAX_HEADER)
        return fl_err_set(e, FL_EFORMAT, "%s: header length %llu is above the %u-byte limit",
                          path, (unsigned long long)hlen, FL_ST_MAX_HEADER);
    if (hlen > f->size - 8)
        return fl_err_set(e, FL_EFORMAT,
                          "%s: header length %llu runs past the end of the file (%zu bytes)",
                          path, (unsigned long long)hlen, f->size);
    if (hlen < 2)
        return fl_err_set(e, FL_EFORMAT, "%s: header length %llu is too short for a JSON object",
                          path, (unsigned long long)hlen);
    json_error_t jerr;
    /* REJECT_DUPLICATES: a tensor named twice in one header is ambiguous */
    json_t *h = json_loadb((const char *)p + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!h)
        return fl_err_set(e, FL_EFORMAT, "%s: header is not valid JSON: %s (at byte %d)", path,
                          jerr.text, jerr.position);
    if (!json_is_object(h)) {
        json_decref(h);
        return fl_err_set(e, FL_EFORMAT, "%s: header is not a JSON object", path);
    }
    const unsigned char *data = p + 8 + hlen;
    size_t data_size = f->size - 8 - (size_t)hlen;
    const char *name;
    json_t *v;
    int rc = 0;
    json_object_foreach(h, name, v)
    {
        if (!strcmp(name, "__metadata__")) {
            if (!json_is_object(v)) {
                rc = fl_err_set(e, FL_EFORMAT, "%s: __metadata__ is not an object", path);
                break;
            }
            continue;
        }
        if (!*name) {
            rc = fl_err_set(e, FL_EFORMAT, "%s: a tensor has an empty name", path);
            break;
        }
        fl_tensor t = {0};
        rc = parse_entry(&t, path, name, v, data, data_size, e);
        if (rc)
            break;
        t.name = strdup(name);
        if (!t.name || weights_push(w, &t, fi)) {
            free(t.name);
            rc = fl_err_set(e, FL_ENOMEM, "%s: out of memory", path);
            break;
        }
        w->total_bytes += t.nbytes;
    }
    json_decref(h);
    return rc;
}

/* A tensor and the file that holds it, sorted together by name. */
typedef struct st_pair {
    fl_tensor t;
    size_t file;
} st_pair;

static int cmp_pair(const void *a, const void *b)
{
    return strcmp(((const st_pair *)a)->t.name, ((const st_pair *)b)->t.name);
}

static int add_file(fl_weights *w, const char *path, fl_err *e)
{
    st_file *nf = realloc(w->files, (w->n_files + 1) * sizeof *nf);
    if (!nf)
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    w->files = nf;
    st_file *f = &w->files[w->n_files];
    memset(f, 0, sizeof *f);
    f->path = strdup(path);
    if (!f->path)
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    w->n_files++;
    return open_one(w, w->n_files - 1, e);
}

/* Sorts by name for bsearch and rejects a tensor that two files both hold: which copy the
 * model would get is undefined, so the directory is broken. */
static int finish(fl_weights *w, fl_err *e)
{
    if (!w->n)
        return 0;
    st_pair *pp = malloc(w->n * sizeof *pp);
    if (!pp)
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    for (size_t i = 0; i < w->n; i++) {
        pp[i].t = w->t[i];
        pp[i].file = w->t_file[i];
    }
    qsort(pp, w->n, sizeof *pp, cmp_pair);
    int rc = 0;
    for (size_t i = 0; i < w->n; i++) {
        w->t[i] = pp[i].t;
        w->t_file[i] = pp[i].file;
        if (!rc && i > 0 && !strcmp(pp[i].t.name, pp[i - 1].t.name))
            rc = fl_err_set(e, FL_EFORMAT, "tensor %s is in both %s and %s", pp[i].t.name,
                            w->files[pp[i - 1].file].path, w->files[pp[i].file].path);
    }
    free(pp);
    return rc;
}

int fl_weights_open_file(fl_weights **out, const char *path, fl_err *e)
{
    *out = NULL;
    fl_weights *w = calloc(1, sizeof *w);
    if (!w)
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    int rc = add_file(w, path, e);
    if (!rc)
        rc = finish(w, e);
    if (rc) {
        fl_weights_close(w);
        return rc;
    }
    *out = w;
    return 0;
}

/* A shard name from an index must stay inside the model directory. */
static bool shard_name_ok(const char *s)
{
    if (!*s || strchr(s, '/') || strchr(s, '\\'))
        return false;
    return strcmp(s, ".") && strcmp(s, "..");
}

static int open_index(fl_weights *w, const char *dir, const char *ipath, fl_err *e)
{
    char *text = NULL;
    size_t len = 0;
    int rc = fl_read_file(ipath, &text, &len, e);
    if (rc)
        return rc;
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    if (!root)
        return fl_err_set(e, FL_EFORMAT, "%s: not valid JSON: %s (line %d)", ipath, jerr.text,
                          jerr.line);
    json_t *map = json_object_get(root, "weight_map");
    if (!json_is_object(map)) {
        json_decref(root);
        return fl_err_set(e, FL_EFORMAT, "%s: missing or non-object weight_map", ipath);
    }
    /* distinct shard names, each opened once, in first-seen order */
    const char **shards = calloc(json_object_size(map) + 1, sizeof *shards);
    size_t n_shards = 0;
    if (!shards) {
        json_decref(root);
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    }
    const char *tname;
    json_t *v;
    json_object_foreach(map, tname, v)
    {
        if (!json_is_string(v) || !shard_name_ok(json_string_value(v))) {
            rc = fl_err_set(e, FL_EFORMAT,
                            "%s: weight_map entry for tensor %s is not a plain file name", ipath,
                            tname);
            goto out;
        }
        const char *s = json_string_value(v);
        size_t k = 0;
        while (k < n_shards && strcmp(shards[k], s))
            k++;
        if (k == n_shards)
            shards[n_shards++] = s;
    }
    if (!n_shards) {
        rc = fl_err_set(e, FL_EFORMAT, "%s: weight_map is empty", ipath);
        goto out;
    }
    for (size_t k = 0; k < n_shards && !rc; k++) {
        char *sp = fl_path_join(dir, shards[k]);
        if (!sp) {
            rc = fl_err_set(e, FL_ENOMEM, "out of memory");
            break;
        }
        if (access(sp, F_OK)) {
            rc = fl_err_set(e, FL_ENOTFOUND, "%s names shard %s, which is missing", ipath,
                            shards[k]);
            free(sp);
            break;
        }
        rc = add_file(w, sp, e);
        free(sp);
    }
    if (!rc)
        rc = finish(w, e);
    /* the index promises where each tensor lives: a promise broken means a bad download */
    json_object_foreach(map, tname, v)
    {
        if (rc)
            break;
        const fl_tensor *t = fl_weights_get(w, tname);
        if (!t) {
            rc = fl_err_set(e, FL_ENOTFOUND, "%s maps tensor %s to %s, which does not hold it",
                            ipath, tname, json_string_value(v));
            break;
        }
        size_t fi = w->t_file[(size_t)(t - w->t)];
        const char *base = strrchr(w->files[fi].path, '/');
        base = base ? base + 1 : w->files[fi].path;
        if (strcmp(base, json_string_value(v)))
            rc = fl_err_set(e, FL_EFORMAT, "%s maps tensor %s to %s, but it is in %s", ipath,
                            tname, json_string_value(v), base);
    }
out:
    free(shards);
    json_decref(root);
    return rc;
}

int fl_weights_open(fl_weights **out, const char *dir, fl_err *e)
{
    *out = NULL;
    char *single = fl_path_join(dir, "model.safetensors");
    char *index = fl_path_join(dir, "model.safetensors.index.json");
    fl_weights *w = calloc(1, sizeof *w);
    int rc = 0;
    if (!single || !index || !w) {
        rc = fl_err_set(e, FL_ENOMEM, "out of memory");
        goto out;
    }
    /* like transformers: a single file wins over an index when both are there */
    if (!access(single, F_OK)) {
        rc = add_file(w, single, e);
        if (!rc)
            rc = finish(w, e);
    } else if (!access(index, F_OK)) {
        rc = open_index(w, dir, index, e);
    } else {
        rc = fl_err_set(e, FL_ENOTFOUND, "%s: no model.safetensors or model.safetensors.index.json",
                        dir);
    }
out:
    free(single);
    free(index);
    if (rc) {
        fl_weights_close(w);
        return rc;
    }
    *out = w;
    return 0;
}

const fl_tensor *fl_weights_get(const fl_weights *w, const char *name)
{
    if (!w || !name)
        return NULL;
    size_t lo = 0, hi = w->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(w->t[mid].name, name);
        if (!c)
            return &w->t[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

size_t fl_weights_count(const fl_weights *w) { return w ? w->n : 0; }

const fl_tensor *fl_weights_at(const fl_weights *w, size_t i)
{
    return w && i < w->n ? &w->t[i] : NULL;
}

size_t fl_weights_total_bytes(const fl_weights *w) { return w ? w->total_bytes : 0; }

size_t fl_weights_index(const fl_weights *w, const fl_tensor *t)
{
    if (!w || !t || !w->n)
        return SIZE_MAX;
    /* integer addresses: comparing a pointer from elsewhere with the array's is not defined */
    uintptr_t a = (uintptr_t)t, b = (uintptr_t)w->t;
    if (a < b || (a - b) % sizeof *t)
        return SIZE_MAX;
    size_t i = (a - b) / sizeof *t;
    return i < w->n ? i : SIZE_MAX;
}

size_t fl_weights_file_of(const fl_weights *w, size_t i)
{
    return w && i < w->n ? w->t_file[i] : SIZE_MAX;
}

size_t fl_weights_data_offset(const fl_weights *w, size_t i)
{
    if (!w || i >= w->n)
        return SIZE_MAX;
    const st_file *f = &w->files[w->t_file[i]];
    const unsigned char *p = f->map;
    uint64_t hlen = 0;
    for (int k = 7; k >= 0; k--)
        hlen = hlen << 8 | p[k];
    return (size_t)((uintptr_t)w->t[i].data - (uintptr_t)p) - 8 - (size_t)hlen;
}

void fl_weights_close(fl_weights *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n; i++)
        free(w->t[i].name);
    free(w->t);
    free(w->t_file);
    for (size_t i = 0; i < w->n_files; i++) {
        if (w->files[i].map)
            munmap(w->files[i].map, w->files[i].size);
        free(w->files[i].path);
    }
    free(w->files);
    free(w);
}
