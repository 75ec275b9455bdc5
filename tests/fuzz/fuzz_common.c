/* fuzz_common.c: shared checks for the libFuzzer targets (see fuzz_common.h). */
#include "fuzz_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

void fz_fail(const char *file, int line, const char *cond, const char *fmt, ...)
{
    fprintf(stderr, "\nFUZZ CHECK FAILED %s:%d: %s\n  ", file, line, cond);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

bool fz_same(const void *a, size_t na, const void *b, size_t nb)
{
    return na == nb && (na == 0 || !memcmp(a, b, na));
}

void fz_check_err(int rc, const fl_err *e, const char *what)
{
    if (rc >= 0)
        return;
    FZ_CHECK(rc >= FL_ESTATE, "%s: unknown error code %d", what, rc);
    FZ_CHECK(e->msg[0] != '\0', "%s: error %d (%s) without a message", what, rc,
             fl_strerror(rc));
    FZ_CHECK(memchr(e->msg, '\0', sizeof e->msg) != NULL, "%s: message not terminated", what);
}

const char *fz_model_dir(void)
{
    const char *d = getenv("FL_FUZZ_MODEL_DIR");
#ifdef FL_FUZZ_MODEL_DIR
    if (!d || !*d)
        d = FL_FUZZ_MODEL_DIR;
#endif
    if (!d || !*d) {
        fprintf(stderr, "fuzz: set FL_FUZZ_MODEL_DIR to engine/models/fogline-helpdesk\n");
        exit(2);
    }
    return d;
}

fl_tokenizer *fz_load_tokenizer(const char *chat_override)
{
    fl_tokenizer *t = NULL;
    fl_err e = {0};
    if (fl_tokenizer_load(&t, fz_model_dir(), chat_override, &e)) {
        fprintf(stderr, "fuzz: cannot load the tokenizer from %s: %s\n", fz_model_dir(), e.msg);
        exit(2);
    }
    return t;
}

/* Table 3-7 of the Unicode standard: for a lead byte, how many continuation bytes follow and
 * the allowed range of the first of them (the rest are always 80..BF). -1: not a lead byte. */
static int utf8_lead(unsigned char c, unsigned char *lo, unsigned char *hi)
{
    *lo = 0x80, *hi = 0xbf;
    if (c <= 0x7f)
        return 0;
    if (c >= 0xc2 && c <= 0xdf)
        return 1;
    if (c == 0xe0)
        return *lo = 0xa0, 2;
    if (c == 0xed)
        return *hi = 0x9f, 2;
    if (c >= 0xe1 && c <= 0xef)
        return 2;
    if (c == 0xf0)
        return *lo = 0x90, 3;
    if (c == 0xf4)
        return *hi = 0x8f, 3;
    if (c >= 0xf1 && c <= 0xf3)
        return 3;
    return -1;
}

/* Length of the sequence at s[0] if it is well formed (> 0), else minus the length of its
 * maximal subpart (the bytes that could still have begun a well-formed sequence). */
static long utf8_step(const unsigned char *s, size_t n)
{
    unsigned char lo, hi;
    int k = utf8_lead(s[0], &lo, &hi);
    if (k < 0)
        return -1;
    size_t i = 1;
    for (; i <= (size_t)k && i < n; i++) {
        if (s[i] < lo || s[i] > hi)
            return -(long)i;
        lo = 0x80, hi = 0xbf;
    }
    return i == (size_t)k + 1 ? (long)i : -(long)i;
}

bool fz_utf8_ok(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        long r = utf8_step(s + i, n - i);
        if (r < 0)
            return false;
        i += (size_t)r;
    }
    return true;
}

void fz_utf8_repair(const unsigned char *s, size_t n, fl_buf *out)
{
    for (size_t i = 0; i < n;) {
        long r = utf8_step(s + i, n - i);
        if (r > 0) {
            FZ_CHECK(!fl_buf_append(out, s + i, (size_t)r), "out of memory");
            i += (size_t)r;
        } else {
            FZ_CHECK(!fl_buf_append(out, "\xef\xbf\xbd", 3), "out of memory");
            i += (size_t)-r;
        }
    }
    FZ_CHECK(!fl_buf_append(out, "", 0), "out of memory");
}

/* True when utf8proc's NFC leaves s (valid UTF-8) unchanged. */
static bool is_nfc(const char *s, size_t n)
{
    if (n == 0)
        return true;
    utf8proc_uint8_t *d = NULL;
    utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &d,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    bool same = m == (utf8proc_ssize_t)n && !memcmp(d, s, n);
    free(d);
    return m >= 0 && same;
}

void fz_decode_agree(const fl_tokenizer *t, const int32_t *ids, size_t n)
{
    for (int skip = 0; skip < 2; skip++) {
        fl_buf whole = {0}, stream = {0};
        fl_err e = {0};
        int rc = fl_tokenizer_decode(t, ids, n, skip, &whole, &e);
        fz_check_err(rc, &e, "fl_tokenizer_decode");
        FZ_CHECK(rc == 0, "decode failed: %s", e.msg);
        fl_detok d;
        fl_detok_init(&d, t, skip);
        for (size_t i = 0; i < n; i++) {
            size_t before = stream.len;
            FZ_CHECK(fl_detok_push(&d, ids[i], &stream) == 0, "fl_detok_push failed");
            /* only whole characters leave the detokenizer, so every prefix is valid text */
            if (stream.len > before)
                FZ_CHECK(fz_utf8_ok((const unsigned char *)stream.data + before,
                                    stream.len - before),
                         "fl_detok_push(%d) emitted ill-formed UTF-8 at id index %zu", ids[i], i);
            FZ_CHECK(d.npend >= 0 && d.npend <= 3, "detok holds %d bytes", d.npend);
        }
        FZ_CHECK(fl_detok_finish(&d, &stream) == 0, "fl_detok_finish failed");
        FZ_CHECK(d.npend == 0, "detok holds bytes after finish");
        FZ_CHECK(fz_utf8_ok((const unsigned char *)whole.data, whole.len),
                 "decode produced ill-formed UTF-8 (%zu bytes)", whole.len);
        FZ_CHECK(fz_same(whole.data, whole.len, stream.data, stream.len),
                 "decode (%zu bytes) and the streaming detokenizer (%zu bytes) disagree",
                 whole.len, stream.len);
        FZ_CHECK(!whole.len || whole.data[whole.len] == '\0', "decode output not terminated");
        fl_buf_free(&whole);
        fl_buf_free(&stream);
    }
}

static int encode(const fl_tokenizer *t, const char *s, size_t n, int32_t **ids, size_t *nids)
{
    fl_err e = {0};
    *ids = NULL;
    *nids = 0;
    int rc = fl_tokenizer_encode(t, s, n, true, ids, nids, &e);
    fz_check_err(rc, &e, "fl_tokenizer_encode");
    if (rc)
        return rc;
    FZ_CHECK(*ids != NULL, "encode returned no id array");
    int vocab = fl_tokenizer_vocab_size(t);
    for (size_t i = 0; i < *nids; i++)
        FZ_CHECK((*ids)[i] >= 0 && (*ids)[i] < vocab && fl_tokenizer_token(t, (*ids)[i]),
                 "encode produced id %d (vocab %d) at %zu", (*ids)[i], vocab, i);
    return 0;
}

int fz_tokenize_roundtrip(const fl_tokenizer *t, const char *text, size_t len)
{
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = encode(t, text, len, &ids, &n);
    if (rc)
        return rc;
    fz_decode_agree(t, ids, n);

    bool valid = fz_utf8_ok((const unsigned char *)text, len);
    if (!valid) {
        /* the documented rule: ill-formed bytes become U+FFFD per maximal subpart before
         * anything else, so the text and its repaired form encode the same */
        fl_buf fixed = {0};
        fz_utf8_repair((const unsigned char *)text, len, &fixed);
        int32_t *ids2 = NULL;
        size_t n2 = 0;
        rc = encode(t, fixed.data, fixed.len, &ids2, &n2);
        FZ_CHECK(rc == 0, "the repaired text fails to encode where the original did not");
        FZ_CHECK(fz_same(ids, n * sizeof *ids, ids2, n2 * sizeof *ids2),
                 "ill-formed text and its U+FFFD repair encode differently (%zu vs %zu ids)", n,
                 n2);
        free(ids2);
        fl_buf_free(&fixed);
    } else if (is_nfc(text, len)) {
        fl_buf back = {0};
        fl_err e = {0};
        FZ_CHECK(fl_tokenizer_decode(t, ids, n, false, &back, &e) == 0, "decode: %s", e.msg);
        FZ_CHECK(fz_same(back.data, back.len, text, len),
                 "NFC text does not survive encode+decode (%zu bytes -> %zu ids -> %zu bytes)",
                 len, n, back.len);
        fl_buf_free(&back);
    }
    free(ids);
    return 0;
}
