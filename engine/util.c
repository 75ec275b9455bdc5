/* util.c: error messages, dtype helpers, the byte buffer, file reading, removing a tree. */
#include "fl.h"

#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int fl_err_set(fl_err *e, int code, const char *fmt, ...)
{
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        e->code = code;
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

void fl_err_prefix(fl_err *e, const char *fmt, ...)
{
    if (!e)
        return;
    char pre[FL_ERR_MSG], old[FL_ERR_MSG];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    /* truncation is acceptable for a message; build it by hand to keep -Wformat quiet */
    size_t np = strnlen(pre, sizeof pre - 1), no = strnlen(old, sizeof old - 1), at = 0;
    for (size_t i = 0; i < np && at < sizeof e->msg - 1; i++)
        e->msg[at++] = pre[i];
    for (size_t i = 0; i < 2 && at < sizeof e->msg - 1; i++)
        e->msg[at++] = ": "[i];
    for (size_t i = 0; i < no && at < sizeof e->msg - 1; i++)
        e->msg[at++] = old[i];
    e->msg[at] = 0;
}

const char *fl_strerror(int code)
{
    switch (code) {
    case FL_OK: return "ok";
    case FL_EINVAL: return "invalid argument";
    case FL_ENOMEM: return "out of memory";
    case FL_EIO: return "i/o error";
    case FL_EFORMAT: return "malformed file";
    case FL_EUNSUPPORTED: return "unsupported";
    case FL_ENOTFOUND: return "not found";
    case FL_ERANGE: return "out of range";
    case FL_EBUSY: return "busy";
    case FL_ESTATE: return "wrong state";
    default: return "unknown error";
    }
}

size_t fl_dtype_size(fl_dtype t)
{
    static const size_t sz[FL_DT_COUNT] = {4, 2, 2, 4, 8, 1, 1, 8, 1};
    return (unsigned)t < FL_DT_COUNT ? sz[t] : 0;
}

const char *fl_dtype_name(fl_dtype t)
{
    static const char *nm[FL_DT_COUNT] = {"F32", "F16", "BF16", "I32", "I64", "U8", "I8", "F64", "BOOL"};
    return (unsigned)t < FL_DT_COUNT ? nm[t] : "?";
}

float fl_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t fl_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it a NaN */
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float fl_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400u));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

int fl_to_f32(float *dst, const void *src, fl_dtype t, size_t n)
{
    const unsigned char *p = src;
    switch (t) {
    case FL_DT_F32:
        memcpy(dst, src, n * 4);
        return 0;
    case FL_DT_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = fl_bf16_to_f32(h);
        }
        return 0;
    case FL_DT_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = fl_f16_to_f32(h);
        }
        return 0;
    default:
        return FL_EUNSUPPORTED;
    }
}

int fl_buf_append(fl_buf *b, const void *p, size_t n)
{
    if (b->err)
        return b->err;
    /* the size doubles: a request beyond half the address space can never be met (and
       would overflow the sum or the doubling) */
    if (n > SIZE_MAX / 2 - b->len - 1) {
        b->err = FL_ENOMEM;
        return b->err;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) {
            b->err = FL_ENOMEM;
            return b->err;
        }
        b->data = d;
        b->cap = cap;
    }
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
    return 0;
}

int fl_buf_puts(fl_buf *b, const char *s) { return fl_buf_append(b, s, strlen(s)); }

int fl_buf_printf(fl_buf *b, const char *fmt, ...)
{
    if (b->err)
        return b->err;
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) {
        fl_buf_fail(b, FL_EINVAL);
        return b->err;
    }
    if ((size_t)n < sizeof tmp)
        return fl_buf_append(b, tmp, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big) {
        fl_buf_fail(b, FL_ENOMEM);
        return b->err;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    int rc = fl_buf_append(b, big, (size_t)n);
    free(big);
    return rc;
}

void fl_buf_fail(fl_buf *b, int err)
{
    if (!b->err)
        b->err = err ? err : FL_ENOMEM;
}

void fl_buf_rewind(fl_buf *b, size_t len)
{
    if (len < b->len) {
        b->len = len;
        b->data[len] = 0;
    }
    b->err = 0;
}

void fl_buf_free(fl_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->err = 0;
}

int fl_read_file(const char *path, char **out, size_t *len, fl_err *e)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return fl_err_set(e, FL_EIO, "cannot open %s: %s", path, strerror(errno));
    fl_buf b = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (fl_buf_append(&b, chunk, n)) {
            fclose(f);
            fl_buf_free(&b);
            return fl_err_set(e, FL_ENOMEM, "out of memory reading %s", path);
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        fl_buf_free(&b);
        return fl_err_set(e, FL_EIO, "cannot read %s", path);
    }
    if (fl_buf_append(&b, "", 0)) {
        fl_buf_free(&b);
        return fl_err_set(e, FL_ENOMEM, "out of memory reading %s", path);
    }
    *out = b.data;
    if (len)
        *len = b.len;
    return 0;
}

char *fl_path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    size_t at = a;
    if (a && dir[a - 1] != '/')
        p[at++] = '/';
    memcpy(p + at, name, b + 1);
    return p;
}

const char *fl_memrstr(const char *s, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = n >= k ? n - k + 1 : 0; i-- > 0;)
        if (!memcmp(s + i, needle, k))
            return s + i;
    return NULL;
}

int64_t fl_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

uint64_t fl_hash64(const void *data, size_t n)
{
    const unsigned char *p = data;
    uint64_t h = 0x9ae16a3b2f90404full ^ (uint64_t)n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        h = fl_mix64(h, v);
    }
    uint64_t t = 0;
    for (size_t k = 0; i < n; i++, k++)
        t |= (uint64_t)p[i] << (8 * k);
    return fl_mix64(h, t);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *f)
{
    (void)sb;
    (void)flag;
    (void)f;
    return remove(path) ? -1 : 0;
}

int fl_rmtree(const char *path)
{
    if (!path || !path[0]) {
        errno = EINVAL;
        return -1;
    }
    /* FTW_PHYS: a symbolic link inside is removed, never followed out of the tree */
    int rc = nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc == 0 ? 0 : -1;
}
