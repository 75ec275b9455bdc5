/* tok_utf8.c: the tokenizer's UTF-8 rules (invalid input becomes U+FFFD per maximal subpart,
 * the rule of the Unicode standard, WHATWG's TextDecoder and Rust's from_utf8_lossy) and
 * piecewise Unicode normalisation that sends only the runs that can change through utf8proc. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tok_internal.h"

int fl__utf8_classify(const unsigned char *s, size_t n, size_t *len, uint32_t *cp)
{
    unsigned b0 = s[0];
    if (b0 < 0x80) {
        *len = 1;
        *cp = b0;
        return 1;
    }
    size_t need;
    unsigned lo = 0x80, hi = 0xbf;
    uint32_t c;
    if (b0 >= 0xc2 && b0 <= 0xdf) {
        need = 1;
        c = b0 & 0x1f;
    } else if (b0 >= 0xe0 && b0 <= 0xef) {
        need = 2;
        c = b0 & 0x0f;
        if (b0 == 0xe0)
            lo = 0xa0;
        else if (b0 == 0xed)
            hi = 0x9f; /* no surrogates */
    } else if (b0 >= 0xf0 && b0 <= 0xf4) {
        need = 3;
        c = b0 & 0x07;
        if (b0 == 0xf0)
            lo = 0x90;
        else if (b0 == 0xf4)
            hi = 0x8f; /* nothing above U+10FFFF */
    } else {
        *len = 1; /* 80..C1, F5..FF never start a character */
        return 0;
    }
    for (size_t k = 1; k <= need; k++) {
        if (k >= n) {
            *len = n;
            return -1;
        }
        unsigned b = s[k];
        if (b < lo || b > hi) {
            *len = k; /* the maximal subpart ends before the offending byte */
            return 0;
        }
        lo = 0x80;
        hi = 0xbf;
        c = (c << 6) | (b & 0x3f);
    }
    *len = need + 1;
    *cp = c;
    return 1;
}

size_t fl__utf8_valid_prefix(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        /* ASCII runs 8 bytes at a time: most text is mostly ASCII */
        while (i + 8 <= n) {
            uint64_t v;
            memcpy(&v, s + i, 8);
            if (v & 0x8080808080808080ull)
                break;
            i += 8;
        }
        if (i >= n)
            break;
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t len;
        uint32_t cp;
        if (fl__utf8_classify(s + i, n - i, &len, &cp) != 1)
            return i;
        i += len;
    }
    return n;
}

int fl__utf8_append_lossy(fl_buf *out, const unsigned char *s, size_t n)
{
    static const char fffd[3] = {(char)0xef, (char)0xbf, (char)0xbd};
    size_t i = 0;
    while (i < n) {
        size_t good = fl__utf8_valid_prefix(s + i, n - i);
        if (good && fl_buf_append(out, s + i, good))
            return FL_ENOMEM;
        i += good;
        if (i >= n)
            break;
        size_t len;
        uint32_t cp;
        fl__utf8_classify(s + i, n - i, &len, &cp); /* invalid or truncated: one U+FFFD */
        if (fl_buf_append(out, fffd, 3))
            return FL_ENOMEM;
        i += len;
    }
    return 0;
}

bool fl__utf8_is_white_space(uint32_t c)
{
    if (c <= 0x20)
        return c == 0x20 || (c >= 0x09 && c <= 0x0d);
    if (c < 0x85)
        return false;
    return c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) ||
           c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

int fl__utf8_put(unsigned char *o, uint32_t c)
{
    if (c < 0x80) {
        o[0] = (unsigned char)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (unsigned char)(0xc0 | (c >> 6));
        o[1] = (unsigned char)(0x80 | (c & 0x3f));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (unsigned char)(0xe0 | (c >> 12));
        o[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3f));
        o[2] = (unsigned char)(0x80 | (c & 0x3f));
        return 3;
    }
    o[0] = (unsigned char)(0xf0 | (c >> 18));
    o[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3f));
    o[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3f));
    o[3] = (unsigned char)(0x80 | (c & 0x3f));
    return 4;
}

/* ---- normalisation ---- */

#define NF_TABLE_LIMIT 0x30000u

static utf8proc_option_t nf_options(fl_nf form)
{
    switch (form) {
    case FL_NF_NFC:
        return UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    case FL_NF_NFD:
        return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE;
    case FL_NF_NFKC:
        return UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
    default:
        return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
    }
}

static bool nf_composes(fl_nf form) { return form == FL_NF_NFC || form == FL_NF_NFKC; }

/* The property part of the rule; decomposable code points need a real normalisation. */
static int nf_inert_props(fl_nf form, uint32_t cp)
{
    const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)cp);
    if (p->combining_class != 0)
        return 0;
    if (cp >= 0x1100 && cp <= 0x11ff) /* conjoining jamo compose algorithmically */
        return 0;
    if (!nf_composes(form) && cp >= 0xac00 && cp <= 0xd7a3) /* Hangul syllables decompose */
        return 0;
    /* utf8proc marks a code point that can be the second of a composition pair with bit 15
     * of comb_index (test_tokenizer_utf8 checks this against every decomposition) */
    if (nf_composes(form) && p->comb_index != UINT16_MAX && (p->comb_index & 0x8000))
        return 0;
    if (p->decomp_seqindex == UINT16_MAX)
        return 1;
    if (!nf_composes(form))
        return 0;
    if (form == FL_NF_NFC && p->decomp_type != 0)
        return 1; /* compatibility-only decomposition: NFC leaves it */
    return -1;    /* canonical (or, for NFKC, any) decomposition: ask utf8proc */
}

int fl__nf_table_build(fl__nf_table *tb, fl_nf form)
{
    if (tb->bits[form])
        return 0;
    uint8_t *bits = calloc(NF_TABLE_LIMIT / 8, 1);
    if (!bits)
        return FL_ENOMEM;
    utf8proc_option_t opt = nf_options(form);
    for (uint32_t cp = 0; cp < NF_TABLE_LIMIT; cp++) {
        int r = nf_inert_props(form, cp);
        if (r < 0) {
            unsigned char u[4];
            int n = fl__utf8_put(u, cp);
            utf8proc_uint8_t *o = NULL;
            utf8proc_ssize_t m = utf8proc_map(u, n, &o, opt);
            r = m == n && !memcmp(o, u, (size_t)n);
            free(o);
        }
        if (r)
            bits[cp >> 3] |= (uint8_t)(1u << (cp & 7));
    }
    tb->bits[form] = bits;
    return 0;
}

void fl__nf_table_free(fl__nf_table *tb)
{
    for (int i = 0; i < FL_NF_COUNT; i++) {
        free(tb->bits[i]);
        tb->bits[i] = NULL;
    }
}

bool fl__nf_inert(const fl__nf_table *tb, fl_nf form, uint32_t cp)
{
    if (cp < NF_TABLE_LIMIT)
        return tb->bits[form][cp >> 3] >> (cp & 7) & 1;
    return nf_inert_props(form, cp) == 1;
}

bool fl__nf_quick_yes(const fl__nf_table *tb, fl_nf form, const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) { /* ASCII is inert in every form */
            i++;
            continue;
        }
        size_t len;
        uint32_t cp;
        if (fl__utf8_classify(s + i, n - i, &len, &cp) != 1)
            return false;
        if (!fl__nf_inert(tb, form, cp))
            return false;
        i += len;
    }
    return true;
}

/* Normalises s[a, b) (starting at an inert code point or at the start of the text) and
 * appends it. */
static int nf_chunk(fl_nf form, const unsigned char *s, size_t n, fl_buf *out, fl__nf_scratch *sc)
{
    utf8proc_option_t opt = nf_options(form);
    for (;;) {
        utf8proc_ssize_t m = utf8proc_decompose(s, (utf8proc_ssize_t)n, sc->u32,
                                                sc->cap ? (utf8proc_ssize_t)sc->cap - 1 : 0, opt);
        if (m < 0)
            return FL_EINVAL; /* cannot happen on valid UTF-8 */
        if ((size_t)m + 1 > sc->cap) {
            size_t cap = sc->cap ? sc->cap : 256;
            while (cap < (size_t)m + 1)
                cap *= 2;
            int32_t *u = realloc(sc->u32, cap * sizeof *u);
            if (!u)
                return FL_ENOMEM;
            sc->u32 = u;
            sc->cap = cap;
            continue;
        }
        /* reencode composes (per opt) and writes UTF-8 over the buffer, NUL-terminated */
        utf8proc_ssize_t k = utf8proc_reencode(sc->u32, m, opt);
        if (k < 0)
            return FL_EINVAL;
        return fl_buf_append(out, sc->u32, (size_t)k);
    }
}

int fl__nf_apply(const fl__nf_table *tb, fl_nf form, const char *str, size_t n, fl_buf *out,
                 fl__nf_scratch *sc)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t pos = 0, copied = 0, boundary = 0;
    bool pending = false; /* a non-inert code point since `boundary` */
    while (pos < n) {
        size_t len = 1;
        uint32_t cp = s[pos];
        if (cp >= 0x80 && fl__utf8_classify(s + pos, n - pos, &len, &cp) != 1)
            return FL_EINVAL;
        if (fl__nf_inert(tb, form, cp)) {
            if (pending) {
                int rc = nf_chunk(form, s + boundary, pos - boundary, out, sc);
                if (rc)
                    return rc;
                copied = pos;
                pending = false;
            }
            boundary = pos;
        } else if (!pending) {
            if (boundary > copied && fl_buf_append(out, s + copied, boundary - copied))
                return FL_ENOMEM;
            copied = boundary;
            pending = true;
        }
        pos += len;
    }
    if (pending)
        return nf_chunk(form, s + boundary, n - boundary, out, sc);
    if (n > copied)
        return fl_buf_append(out, s + copied, n - copied);
    return 0;
}
