/* st_write.h: writes a safetensors file (the format safetensors.h reads) whose tensors are
 * all known, by name, dtype and shape, before any data: the header is written first, then
 * each tensor's bytes go straight to their place in the file, in pieces, in any order
 * between tensors. So a writer never holds more than the piece it is writing (`fogline
 * quantize` streams a model through a few hundred rows at a time).
 *
 * The file: 8-byte little-endian header length N, N bytes of JSON header ({"__metadata__":
 * {...}, NAME: {"dtype", "shape", "data_offsets"}, ...} in the order given) padded with
 * spaces to a multiple of 8, so the data section starts 8-byte aligned, then the tensors'
 * data back to back in that order (the format allows no holes, so a tensor's alignment is
 * what the sizes before it give). */
#ifndef FL_ST_WRITE_H
#define FL_ST_WRITE_H

#include "safetensors.h"

typedef struct fl_st_spec {
    const char *name;
    fl_dtype dtype;
    int ndim;
    int64_t shape[FL_MAX_DIMS];
} fl_st_spec;

typedef struct fl_st_writer fl_st_writer;

/* Creates path (truncating it) and writes the header of specs (n tensors; names unique and
 * not "__metadata__") with __metadata__ = the n_meta string pairs meta[2i] -> meta[2i + 1]
 * (none when n_meta is 0). The caller owns *out until fl_st_finish or fl_st_abort. FL_EIO
 * naming the path, FL_EINVAL for a bad spec, FL_ERANGE for sizes that overflow. */
int fl_st_create(fl_st_writer **out, const char *path, const fl_st_spec *specs, size_t n,
                 const char *const *meta, size_t n_meta, fl_err *e);
/* Appends n bytes to tensor i's data: each tensor is written front to back, in as many
 * pieces as the caller likes. FL_EINVAL past the tensor's size; FL_EIO from the disk. */
int fl_st_put(fl_st_writer *w, size_t i, const void *p, size_t n, fl_err *e);
/* The file's size once complete: 8 + header + data. */
uint64_t fl_st_file_bytes(const fl_st_writer *w);
/* Checks every tensor was written in full (FL_EINVAL naming the first that was not),
 * flushes the file to disk and closes it. Frees w whatever the outcome; on an error the file
 * is left as it is (the caller removes it or its directory). */
int fl_st_finish(fl_st_writer *w, fl_err *e);
/* Closes w, removes the file and frees w (NULL: nothing). */
void fl_st_abort(fl_st_writer *w);

#endif
