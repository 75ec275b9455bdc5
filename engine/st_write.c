/* st_write.c: the safetensors writer of st_write.h: header up front, data by pwrite at each
 * tensor's offset. */
#include "st_write.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct fl_st_writer {
    int fd;
    char *path;
    size_t n;
    char **names;      /* (n) for messages */
    uint64_t *off;     /* (n) file offset of each tensor's data */
    uint64_t *size;    /* (n) its bytes */
    uint64_t *done;    /* (n) bytes written so far, front to back */
    uint64_t file_bytes;
};

static void writer_free(fl_st_writer *w)
{
    if (!w)
        return;
    for (size_t i = 0; w->names && i < w->n; i++)
        free(w->names[i]);
    free(w->names);
    free(w->off);
    free(w->size);
    free(w->done);
    free(w->path);
    free(w);
}

/* pwrite until all n bytes are out (a regular file may take fewer per call). */
static int write_all(fl_st_writer *w, uint64_t at, const void *p, size_t n, fl_err *e)
{
    const char *c = p;
    while (n) {
        ssize_t k = pwrite(w->fd, c, n, (off_t)at);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return fl_err_set(e, FL_EIO, "cannot write %s: %s", w->path,
                              k < 0 ? strerror(errno) : "no progress");
        c += k;
        n -= (size_t)k;
        at += (uint64_t)k;
    }
    return 0;
}

/* The header text, padded with spaces to a multiple of 8; fills w's offsets. */
static int build_header(fl_st_writer *w, const fl_st_spec *specs, const char *const *meta,
                        size_t n_meta, char **out, size_t *out_n, fl_err *e)
{
    json_t *h = json_object();
    if (!h)
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    int rc = 0;
    if (n_meta) {
        json_t *md = json_object();
        for (size_t i = 0; md && i < n_meta; i++)
            if (json_object_set_new(md, meta[2 * i], json_string(meta[2 * i + 1])))
                rc = fl_err_set(e, FL_EINVAL, "%s: bad metadata entry %zu", w->path, i);
        if (!md || json_object_set_new(h, "__metadata__", md))
            rc = fl_err_set(e, FL_ENOMEM, "out of memory");
    }
    uint64_t at = 0;
    for (size_t i = 0; !rc && i < w->n; i++) {
        const fl_st_spec *s = &specs[i];
        size_t esz = fl_dtype_size(s->dtype);
        if (!s->name || !*s->name || !strcmp(s->name, "__metadata__") || !esz ||
            s->ndim < 0 || s->ndim > FL_MAX_DIMS) {
            rc = fl_err_set(e, FL_EINVAL, "%s: tensor %zu (%.100s): bad name, dtype or rank",
                            w->path, i, s->name ? s->name : "(null)");
            break;
        }
        if (json_object_get(h, s->name)) {
            rc = fl_err_set(e, FL_EINVAL, "%s: tensor %.100s is named twice", w->path, s->name);
            break;
        }
        uint64_t numel = 1;
        json_t *shape = json_array();
        for (int d = 0; shape && d < s->ndim; d++) {
            if (s->shape[d] < 0 ||
                (s->shape[d] && numel > (uint64_t)INT64_MAX / (uint64_t)s->shape[d])) {
                rc = fl_err_set(e, FL_ERANGE, "%s: tensor %.100s: shape out of range", w->path,
                                s->name);
                break;
            }
            numel *= (uint64_t)s->shape[d];
            json_array_append_new(shape, json_integer((json_int_t)s->shape[d]));
        }
        if (!rc && numel > (uint64_t)INT64_MAX / esz / 2)
            rc = fl_err_set(e, FL_ERANGE, "%s: tensor %.100s: shape out of range", w->path,
                            s->name);
        uint64_t bytes = numel * esz;
        if (!rc && at > (uint64_t)INT64_MAX / 2 - bytes)
            rc = fl_err_set(e, FL_ERANGE, "%s: the tensors' bytes overflow", w->path);
        json_t *ent = rc || !shape ? NULL
                                   : json_pack("{sssOs[II]}", "dtype", fl_dtype_name(s->dtype),
                                               "shape", shape, "data_offsets", (json_int_t)at,
                                               (json_int_t)(at + bytes));
        json_decref(shape);
        if (rc)
            break;
        w->names[i] = strdup(s->name);
        if (!ent || !w->names[i] || json_object_set_new(h, s->name, ent)) {
            rc = fl_err_set(e, FL_ENOMEM, "out of memory");
            break;
        }
        w->off[i] = at; /* data-relative until the header's size is known */
        w->size[i] = bytes;
        at += bytes;
    }
    char *text = rc ? NULL : json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(h);
    if (rc)
        return rc;
    if (!text)
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    size_t len = strlen(text), padded = (len + 7) / 8 * 8;
    char *p = realloc(text, padded + 1);
    if (!p) {
        free(text);
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    }
    memset(p + len, ' ', padded - len);
    p[padded] = 0;
    for (size_t i = 0; i < w->n; i++)
        w->off[i] += 8 + padded;
    w->file_bytes = 8 + padded + at;
    *out = p;
    *out_n = padded;
    return 0;
}

int fl_st_create(fl_st_writer **out, const char *path, const fl_st_spec *specs, size_t n,
                 const char *const *meta, size_t n_meta, fl_err *e)
{
    *out = NULL;
    fl_st_writer *w = calloc(1, sizeof *w);
    if (!w)
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    w->fd = -1;
    w->n = n;
    w->path = strdup(path);
    w->names = calloc(n + 1, sizeof *w->names);
    w->off = calloc(n + 1, sizeof *w->off);
    w->size = calloc(n + 1, sizeof *w->size);
    w->done = calloc(n + 1, sizeof *w->done);
    if (!w->path || !w->names || !w->off || !w->size || !w->done) {
        writer_free(w);
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    }
    char *hdr = NULL;
    size_t hlen = 0;
    int rc = build_header(w, specs, meta, n_meta, &hdr, &hlen, e);
    if (rc) {
        writer_free(w);
        return rc;
    }
    w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        rc = fl_err_set(e, FL_EIO, "cannot create %s: %s", path, strerror(errno));
        free(hdr);
        writer_free(w);
        return rc;
    }
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    rc = write_all(w, 0, le, 8, e);
    if (!rc)
        rc = write_all(w, 8, hdr, hlen, e);
    /* the file has its full size from the start: a tensor written out of order leaves no
     * hole that a short file would hide */
    if (!rc && ftruncate(w->fd, (off_t)w->file_bytes))
        rc = fl_err_set(e, FL_EIO, "cannot size %s: %s", path, strerror(errno));
    free(hdr);
    if (rc) {
        fl_st_abort(w);
        return rc;
    }
    *out = w;
    return 0;
}

int fl_st_put(fl_st_writer *w, size_t i, const void *p, size_t n, fl_err *e)
{
    if (!w || i >= w->n)
        return fl_err_set(e, FL_EINVAL, "safetensors writer: no tensor %zu", i);
    if (n > w->size[i] - w->done[i])
        return fl_err_set(e, FL_EINVAL, "%s: tensor %s: %llu bytes written past its %llu",
                          w->path, w->names[i], (unsigned long long)(w->done[i] + n),
                          (unsigned long long)w->size[i]);
    int rc = write_all(w, w->off[i] + w->done[i], p, n, e);
    if (!rc)
        w->done[i] += n;
    return rc;
}

uint64_t fl_st_file_bytes(const fl_st_writer *w) { return w ? w->file_bytes : 0; }

int fl_st_finish(fl_st_writer *w, fl_err *e)
{
    if (!w)
        return fl_err_set(e, FL_EINVAL, "safetensors writer: none");
    int rc = 0;
    for (size_t i = 0; i < w->n && !rc; i++)
        if (w->done[i] != w->size[i])
            rc = fl_err_set(e, FL_EINVAL, "%s: tensor %s has %llu of its %llu bytes", w->path,
                            w->names[i], (unsigned long long)w->done[i],
                            (unsigned long long)w->size[i]);
    if (!rc && fsync(w->fd))
        rc = fl_err_set(e, FL_EIO, "cannot flush %s: %s", w->path, strerror(errno));
    if (close(w->fd) && !rc)
        rc = fl_err_set(e, FL_EIO, "cannot close %s: %s", w->path, strerror(errno));
    writer_free(w);
    return rc;
}

void fl_st_abort(fl_st_writer *w)
{
    if (!w)
        return;
    if (w->fd >= 0)
        close(w->fd);
    unlink(w->path);
    writer_free(w);
}
