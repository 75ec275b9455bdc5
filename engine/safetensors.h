/* safetensors.h: mmapped safetensors files, single or sharded (model.safetensors.index.json).
 * A file is: 8-byte little-endian header length N, N bytes of JSON header, raw data. Every
 * offset and shape in the header is checked against the file before a tensor is exposed. */
#ifndef FL_SAFETENSORS_H
#define FL_SAFETENSORS_H

#include "fl.h"

#define FL_MAX_DIMS 8

typedef struct fl_tensor {
    char *name;
    fl_dtype dtype;
    int ndim;
    int64_t shape[FL_MAX_DIMS];
    int64_t numel;
    const void *data; /* inside the mmapped file */
    size_t nbytes;
} fl_tensor;

typedef struct fl_weights fl_weights;

/* Opens dir/model.safetensors, or dir/model.safetensors.index.json and every shard it names.
 * Tensor data is mmapped read-only, never copied. The caller owns *out (fl_weights_close);
 * every fl_tensor and data pointer it hands out lives until then. Read-only after open: any
 * thread may read at once. FL_EIO, FL_EFORMAT (the message names the file and the field),
 * FL_ENOMEM. */
int fl_weights_open(fl_weights **out, const char *dir, fl_err *e);
/* Opens one .safetensors file. */
int fl_weights_open_file(fl_weights **out, const char *path, fl_err *e);
/* The tensor of that name, or NULL. */
const fl_tensor *fl_weights_get(const fl_weights *w, const char *name);
size_t fl_weights_count(const fl_weights *w);
const fl_tensor *fl_weights_at(const fl_weights *w, size_t i);
size_t fl_weights_total_bytes(const fl_weights *w);
/* The index i of t in w (fl_weights_at(w, i) == t), or SIZE_MAX when t is not one of w's
 * tensors; O(1), so callers can keep per-tensor tables indexed by it. */
size_t fl_weights_index(const fl_weights *w, const fl_tensor *t);
/* Where tensor i lies: the file that holds it (0 .. files - 1, in the order they were
 * opened: the single file, or the index's shards in first-named order) and its offset in
 * that file's data section. Sorting by both gives the files' own tensor order. */
size_t fl_weights_file_of(const fl_weights *w, size_t i);
size_t fl_weights_data_offset(const fl_weights *w, size_t i);
void fl_weights_close(fl_weights *w);

#endif
