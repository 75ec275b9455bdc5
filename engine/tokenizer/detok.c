/* detok.c: ids -> text. The streaming detokenizer appends only whole UTF-8 characters and
 * holds back an incomplete one until the next token completes it; decoding a whole array is
 * the same machine run to the end, so the two always agree. Invalid byte sequences become
 * U+FFFD per maximal subpart (as TextDecoder and Rust's from_utf8_lossy do). Added tokens are
 * written as their text (what both Hugging Face decoders do): a partial character before one is
 * flushed as U+FFFD first. Ids with no token (out of range or a gap) are skipped, as Hugging
 * Face's decoder skips them. */
#include <string.h>

#include "tok_internal.h"

static const char fffd[3] = {(char)0xef, (char)0xbf, (char)0xbd};

void fl_detok_init(fl_detok *d, const fl_tokenizer *t, bool skip_special)
{
    memset(d, 0, sizeof *d);
    d->t = t;
    d->skip_special = skip_special;
}

/* Feeds bytes of ordinary tokens through the held-back state. */
static int feed(fl_detok *d, const unsigned char *b, size_t n, fl_buf *out)
{
    size_t i = 0;
    /* first complete (or reject) the held-back prefix, one byte at a time */
    while (d->npend > 0 && i < n) {
        d->pend[d->npend++] = b[i++];
        for (;;) {
            size_t len;
            uint32_t cp;
            int r = fl__utf8_classify(d->pend, (size_t)d->npend, &len, &cp);
            if (r < 0)
                break; /* still incomplete */
            if (r > 0 ? fl_buf_append(out, d->pend, len) : fl_buf_append(out, fffd, 3))
                return FL_ENOMEM;
            memmove(d->pend, d->pend + len, (size_t)d->npend - len);
            d->npend -= (int)len;
            if (d->npend == 0)
                break;
        }
    }
    if (i >= n)
        return 0;
    /* the rest in bulk: valid runs copied, invalid subparts replaced, an incomplete tail held */
    const unsigned char *s = b + i;
    size_t m = n - i, j = 0;
    while (j < m) {
        size_t good = fl__utf8_valid_prefix(s + j, m - j);
        if (good && fl_buf_append(out, s + j, good))
            return FL_ENOMEM;
        j += good;
        if (j >= m)
            break;
        size_t len;
        uint32_t cp;
        int r = fl__utf8_classify(s + j, m - j, &len, &cp);
        if (r < 0) {
            memcpy(d->pend, s + j, len);
            d->npend = (int)len;
            break;
        }
        if (fl_buf_append(out, fffd, 3))
            return FL_ENOMEM;
        j += len;
    }
    return 0;
}

int fl_detok_push(fl_detok *d, int32_t id, fl_buf *out)
{
    const fl_tokenizer *t = d->t;
    if (id < 0 || id >= t->n_ids || t->str_off[id] == UINT32_MAX)
        return 0;
    size_t len = t->byt_len[id];
    const unsigned char *b = t->byt_arena + t->byt_off[id];
    if (t->flags[id] & FL_TOKF_ADDED) {
        if ((t->flags[id] & FL_TOKF_SPECIAL) && d->skip_special)
            return 0;
        int rc = fl_detok_finish(d, out);
        if (rc)
            return rc;
        return len ? fl_buf_append(out, b, len) : 0;
    }
    return feed(d, b, len, out);
}

int fl_detok_finish(fl_detok *d, fl_buf *out)
{
    if (d->npend == 0)
        return 0;
    d->npend = 0; /* a truncated character is one maximal subpart */
    return fl_buf_append(out, fffd, 3);
}

int fl_tokenizer_decode(const fl_tokenizer *t, const int32_t *ids, size_t n, bool skip_special,
                        fl_buf *out, fl_err *e)
{
    fl_detok d;
    fl_detok_init(&d, t, skip_special);
    for (size_t i = 0; i < n; i++)
        if (fl_detok_push(&d, ids[i], out))
            return fl_err_set(e, FL_ENOMEM, "out of memory while decoding");
    if (fl_detok_finish(&d, out) || fl_buf_append(out, "", 0))
        return fl_err_set(e, FL_ENOMEM, "out of memory while decoding");
    return 0;
}
