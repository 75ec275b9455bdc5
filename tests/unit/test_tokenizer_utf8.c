/* test_tokenizer_utf8.c: the tokenizer's UTF-8 rule (maximal subparts, Unicode chapter 3 and
 * WHATWG) and its piecewise normalisation: the "inert" code points that let it skip utf8proc are
 * checked against every decomposition utf8proc knows, and piecewise results against utf8proc on
 * whole random strings, for NFC, NFD, NFKC and NFKD. */
#include <utf8proc.h>

#include "check.h"
#include "tokenizer/tok_internal.h"

static void test_classify(void)
{
    static const struct {
        const char *s;
        int r;
        size_t len;
    } cases[] = {
        {"A", 1, 1}, {"\xc3\xa9", 1, 2}, {"\xe4\xbd\xa0", 1, 3}, {"\xf0\x9f\x91\x8d", 1, 4},
        {"\x80", 0, 1}, {"\xbf", 0, 1}, {"\xc0\xaf", 0, 1}, {"\xc1\xbf", 0, 1}, {"\xf5\x80", 0, 1},
        {"\xff", 0, 1}, {"\xe0\x80\x80", 0, 1}, {"\xe0\xa0\x80", 1, 3}, {"\xed\xa0\x80", 0, 1},
        {"\xed\x9f\xbf", 1, 3}, {"\xf0\x80\x80\x80", 0, 1}, {"\xf4\x90\x80\x80", 0, 1},
        {"\xf4\x8f\xbf\xbf", 1, 4}, {"\xe2\x28\xa1", 0, 1}, {"\xe2\x82\x28", 0, 2},
        {"\xf0\x9f\x98\x41", 0, 3}, {"\xc2\x41", 0, 1},
        /* incomplete but valid so far */
        {"\xe2", -1, 1}, {"\xe2\x82", -1, 2}, {"\xf0\x9f\x98", -1, 3}, {"\xc2", -1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len = 99;
        uint32_t cp;
        int r = fl__utf8_classify((const unsigned char *)cases[i].s, strlen(cases[i].s), &len, &cp);
        CHECK(r == cases[i].r && len == cases[i].len, "classify case %zu: %d/%zu, want %d/%zu", i, r,
              len, cases[i].r, cases[i].len);
    }
    static const struct {
        const char *in;
        size_t n;
        const char *out;
    } lossy[] = {
        {"ok", 2, "ok"},
        {"a\x80\x80" "b", 4, "a\xef\xbf\xbd\xef\xbf\xbd" "b"},
        {"\xe2\x82", 2, "\xef\xbf\xbd"},
        {"\xf0\x9f\x98\x41", 4, "\xef\xbf\xbd" "A"},
        {"\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\x00" "x", 2, "\x00" "x"},
    };
    for (size_t i = 0; i < sizeof lossy / sizeof lossy[0]; i++) {
        fl_buf b = {0};
        fl__utf8_append_lossy(&b, (const unsigned char *)lossy[i].in, lossy[i].n);
        size_t want = lossy[i].out[0] ? strlen(lossy[i].out) : 2;
        CHECK(b.len == want && !memcmp(b.data, lossy[i].out, want), "lossy case %zu", i);
        fl_buf_free(&b);
    }
    CHECK(fl__utf8_valid_prefix((const unsigned char *)"abcdefghij\xc3\xa9xyz\xff", 16) == 15, "valid prefix");
    static const uint32_t ws[] = {9, 10, 11, 12, 13, 32, 0x85, 0xa0, 0x1680, 0x2000, 0x200a, 0x2028,
                                  0x2029, 0x202f, 0x205f, 0x3000};
    static const uint32_t not_ws[] = {0, 8, 14, 0x1c, 0x7f, 0x180e, 0x200b, 0xfeff, 'a'};
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
        CHECK(fl__utf8_is_white_space(ws[i]), "U+%04X is White_Space", ws[i]);
    for (size_t i = 0; i < sizeof not_ws / sizeof not_ws[0]; i++)
        CHECK(!fl__utf8_is_white_space(not_ws[i]), "U+%04X is not White_Space", not_ws[i]);
}

static const char *form_name[] = {"NFC", "NFD", "NFKC", "NFKD"};

static utf8proc_option_t opts_of(fl_nf f)
{
    utf8proc_option_t o = UTF8PROC_STABLE;
    o |= (f == FL_NF_NFC || f == FL_NF_NFKC) ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE;
    if (f == FL_NF_NFKC || f == FL_NF_NFKD)
        o |= UTF8PROC_COMPAT;
    return o;
}

static void test_inert(fl__nf_table *tb)
{
    /* code points that follow the first one in the canonical decomposition of a composite that
     * NFC rebuilds: the ones a composition can attach to what precedes (decompositions that
     * are excluded from composition, such as U+0FB9, attach nothing) */
    static uint8_t second[0x110000 / 8];
    size_t n_decomp = 0;
    for (int32_t cp = 0; cp < 0x110000; cp++) {
        utf8proc_int32_t buf[32];
        int last = 0;
        utf8proc_ssize_t n = utf8proc_decompose_char(cp, buf, 32, UTF8PROC_DECOMPOSE, &last);
        if (n < 2 || n > 32)
            continue;
        unsigned char u[4];
        int k = fl__utf8_put(u, (uint32_t)cp);
        utf8proc_uint8_t *nfc = NULL;
        utf8proc_ssize_t m = utf8proc_map(u, k, &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        bool rebuilt = m == k && !memcmp(nfc, u, (size_t)k);
        free(nfc);
        if (!rebuilt)
            continue;
        n_decomp++;
        for (utf8proc_ssize_t i = 1; i < n; i++)
            second[buf[i] >> 3] |= (uint8_t)(1u << (buf[i] & 7));
    }
    CHECK(n_decomp > 11000, "%zu canonical decompositions seen (Hangul included)", n_decomp);
    for (int f = 0; f < FL_NF_COUNT; f++) {
        size_t bad_second = 0, bad_alone = 0, bad_first = 0, inert = 0;
        utf8proc_option_t o = opts_of((fl_nf)f);
        bool composes = f == FL_NF_NFC || f == FL_NF_NFKC;
        for (uint32_t cp = 0; cp < 0x110000; cp++) {
            if (cp >= 0xd800 && cp < 0xe000)
                continue;
            if (!fl__nf_inert(tb, (fl_nf)f, cp))
                continue;
            inert++;
            if (composes && (second[cp >> 3] >> (cp & 7) & 1))
                bad_second++;
            const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)cp);
            if (p->decomp_seqindex == UINT16_MAX && !(cp >= 0xac00 && cp <= 0xd7a3))
                continue; /* no decomposition: unchanged alone */
            unsigned char u[4];
            int k = fl__utf8_put(u, cp);
            utf8proc_uint8_t *out = NULL;
            utf8proc_ssize_t m = utf8proc_map(u, k, &out, o);
            if (m != k || memcmp(out, u, (size_t)k))
                bad_alone++;
            free(out);
            /* its decomposition must not start with a code point that composes backwards */
            utf8proc_int32_t buf[32];
            int last = 0;
            utf8proc_ssize_t n = utf8proc_decompose_char((utf8proc_int32_t)cp, buf, 32, UTF8PROC_DECOMPOSE, &last);
            if (composes && n >= 1 && n <= 32 && (second[buf[0] >> 3] >> (buf[0] & 7) & 1))
                bad_first++;
        }
        CHECK(inert > 200000, "%s: %zu inert code points", form_name[f], inert);
        CHECK(bad_second == 0, "%s: %zu inert code points can compose with what precedes", form_name[f], bad_second);
        CHECK(bad_alone == 0, "%s: %zu inert code points change alone", form_name[f], bad_alone);
        CHECK(bad_first == 0, "%s: %zu inert code points decompose to a composing start", form_name[f], bad_first);
    }
}

static uint64_t rs = 88172645463325252ull;
static uint32_t rnd(uint32_t n)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (uint32_t)(rs % n);
}

static uint32_t random_cp(void)
{
    static const uint32_t picks[] = {
        'a', 'e', 'o', 'A', ' ', 0x300, 0x301, 0x308, 0x323, 0x327, 0x345, 0x1100, 0x1161, 0x11a8, 0xac00,
        0xac01, 0x0b47, 0x0b3e, 0x0b57, 0x0cc6, 0x0cd5, 0x0cc2, 0x0dd9, 0x0dcf, 0x0dca, 0x212b, 0x2126,
        0xf900, 0xfb01, 0x1e9b, 0x017f, 0x0344, 0x0958, 0x3099, 0x304b, 0x309a, 0x00c5, 0x00e9, 0x1f00,
        0x0391, 0x0313, 0x0342, 0x05d0, 0x05b7, 0x0627, 0x0653, 0x1b05, 0x1b35, 0x110a5, 0x110ba, 0x2000,
    };
    uint32_t k = rnd(10);
    if (k < 7)
        return picks[rnd(sizeof picks / sizeof picks[0])];
    if (k < 9)
        return 0x20 + rnd(0x3000);
    uint32_t cp = rnd(0x30000);
    return cp >= 0xd800 && cp < 0xe000 ? 'x' : cp;
}

static void test_piecewise(fl__nf_table *tb)
{
    fl__nf_scratch sc = {0};
    size_t bad[FL_NF_COUNT] = {0}, same = 0;
    for (int it = 0; it < 4000; it++) {
        unsigned char s[400];
        int n = 0, len = 1 + (int)rnd(40);
        for (int i = 0; i < len; i++)
            n += fl__utf8_put(s + n, random_cp());
        for (int f = 0; f < FL_NF_COUNT; f++) {
            fl_buf got = {0};
            fl__nf_apply(tb, (fl_nf)f, (const char *)s, (size_t)n, &got, &sc);
            utf8proc_uint8_t *want = NULL;
            utf8proc_ssize_t m = utf8proc_map(s, n, &want, opts_of((fl_nf)f));
            if (m < 0 || got.len != (size_t)m || memcmp(got.data, want, (size_t)m))
                bad[f]++;
            if (fl__nf_quick_yes(tb, (fl_nf)f, (const char *)s, (size_t)n) &&
                (m != n || memcmp(want, s, (size_t)n)))
                bad[f]++;
            same += m == n && !memcmp(want, s, (size_t)n);
            free(want);
            fl_buf_free(&got);
        }
    }
    for (int f = 0; f < FL_NF_COUNT; f++)
        CHECK(bad[f] == 0, "%s: %zu of 4000 random strings differ from utf8proc on the whole", form_name[f],
              bad[f]);
    CHECK(same > 100 && same < 15000, "the random strings mix changed and unchanged ones (%zu same)", same);
    free(sc.u32);
}

int main(void)
{
    test_classify();
    fl__nf_table tb = {0};
    for (int f = 0; f < FL_NF_COUNT; f++)
        CHECK(fl__nf_table_build(&tb, (fl_nf)f) == 0, "table %d", f);
    test_inert(&tb);
    test_piecewise(&tb);
    fl__nf_table_free(&tb);
    return check_summary("test_tokenizer_utf8");
}
