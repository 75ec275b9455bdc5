/* fl.h: what every part of fogline shares: error codes, the error message carrier, dtypes,
 * a growable buffer, the clock and a hash.
 *
 * Functions that can fail return 0 or a negative FL_E* code and, when given an fl_err, a
 * message meant for the user. A function that returns something else (a count, an index, a
 * page, or -1 for "none" as fl_kvpool_alloc and fl_kvpool_lookup do) says so in its comment;
 * such a -1 is an answer, not FL_EINVAL, and sets no message. */
#ifndef FL_H
#define FL_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

enum {
    FL_OK = 0,
    FL_EINVAL = -1,       /* bad argument or bad input */
    FL_ENOMEM = -2,       /* allocation failed */
    FL_EIO = -3,          /* open/read/mmap failed */
    FL_EFORMAT = -4,      /* a file is malformed */
    FL_EUNSUPPORTED = -5, /* well-formed but not something we handle */
    FL_ENOTFOUND = -6,    /* a named thing (tensor, token, file) is absent */
    FL_ERANGE = -7,       /* a value is out of its allowed range */
    FL_EBUSY = -8,        /* a bounded queue is full */
    FL_ESTATE = -9,       /* called in the wrong state */
};

#define FL_ERR_MSG 512

typedef struct fl_err {
    int code;
    char msg[FL_ERR_MSG];
} fl_err;

#if defined(__GNUC__)
#define FL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define FL_PRINTF(a, b)
#endif

/* Sets e (when not NULL) and returns code, so that `return fl_err_set(e, FL_EFORMAT, ...)`
 * reads as one statement. It overwrites what e held: the last call wins, so a caller that
 * must keep a first error checks e->code before setting another. */
int fl_err_set(fl_err *e, int code, const char *fmt, ...) FL_PRINTF(3, 4);
/* Prefixes the message already in e with "prefix: ". */
void fl_err_prefix(fl_err *e, const char *fmt, ...) FL_PRINTF(2, 3);
const char *fl_strerror(int code);

typedef enum fl_dtype {
    FL_DT_F32 = 0,
    FL_DT_F16,
    FL_DT_BF16,
    FL_DT_I32,
    FL_DT_I64,
    FL_DT_U8,
    FL_DT_I8,
    FL_DT_F64,
    FL_DT_BOOL,
    FL_DT_COUNT
} fl_dtype;

size_t fl_dtype_size(fl_dtype t);
const char *fl_dtype_name(fl_dtype t);

/* bf16/f16 <-> f32 conversions, exact for bf16->f32 and f16->f32. */
float fl_bf16_to_f32(uint16_t h);
uint16_t fl_f32_to_bf16(float f); /* round to nearest even */
float fl_f16_to_f32(uint16_t h);
/* Converts n elements of src (dtype t) into dst as f32. Returns FL_EUNSUPPORTED for a
 * dtype that is not a float type. */
int fl_to_f32(float *dst, const void *src, fl_dtype t, size_t n);

/* A growable byte buffer, always NUL-terminated when len > 0.
 *
 * Its error is sticky (SQLite's StrAccum): the first append that fails records its code in
 * err, and from then on every append is a no-op that returns it. A caller that builds a frame
 * or a body in several appends checks err once, where the frame is finished, and never sends
 * what a failed buffer holds (it is whatever came before the failure: a truncated frame). */
typedef struct fl_buf {
    char *data;
    size_t len, cap;
    int err; /* 0, or the FL_E* code of the first failure */
} fl_buf;
/* Each returns 0, or b->err (FL_ENOMEM; FL_EINVAL for a bad format) and appends nothing. */
int fl_buf_append(fl_buf *b, const void *p, size_t n);
int fl_buf_puts(fl_buf *b, const char *s);
int fl_buf_printf(fl_buf *b, const char *fmt, ...) FL_PRINTF(2, 3);
/* Records a failure of the caller's own (a piece of the frame it could not produce) so that
 * the one check at the end sees it too; the first error stays. */
void fl_buf_fail(fl_buf *b, int err);
/* Cuts b back to its first len bytes (len <= b->len) and clears the error: the caller drops
 * what the failed appends were building and keeps what came before. */
void fl_buf_rewind(fl_buf *b, size_t len);
void fl_buf_free(fl_buf *b);

/* The monotonic clock (CLOCK_MONOTONIC), the one every part of fogline times with: in
 * nanoseconds, seconds and milliseconds since an arbitrary start. */
int64_t fl_now_ns(void);
static inline double fl_now(void) { return (double)fl_now_ns() * 1e-9; }
static inline double fl_now_ms(void) { return (double)fl_now_ns() * 1e-6; }

/* A 64-bit hash of n bytes (8 at a time; not cryptographic: it catches damage and tells
 * contents apart, it does not resist forgery), and the step it is built from. Page keys, blob
 * checksums and the model fingerprint all use these. */
static inline uint64_t fl_mix64(uint64_t h, uint64_t v)
{
    h ^= v;
    h *= 0x100000001b3ull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}
uint64_t fl_hash64(const void *data, size_t n);

/* The last occurrence of needle in s[0..n), or NULL. */
const char *fl_memrstr(const char *s, size_t n, const char *needle);

/* dir + "/" + name (no doubled slash), malloc'd; NULL when out of memory. */
char *fl_path_join(const char *dir, const char *name);

/* Removes path and, for a directory, everything under it (links are removed, not followed).
 * 0, or -1 with errno set; a missing path is -1 with ENOENT. */
int fl_rmtree(const char *path);

/* Reads a whole file; *out is NUL-terminated and owned by the caller. */
int fl_read_file(const char *path, char **out, size_t *len, fl_err *e);

#endif
