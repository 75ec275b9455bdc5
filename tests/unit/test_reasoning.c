/* test_reasoning.c: the streaming reasoning/answer split (server/reasoning.c) against a
 * whole-text reference written here with plain string operations, over crafted replies and
 * random ones built from tag fragments, each fed whole, cut at every single point, byte by
 * byte, and in random pieces: a tag cut across commits must land in neither part, and the
 * parts must not depend on where the commits fall. */
#include "check.h"
#include "reasoning.h"

#include <stdint.h>
#include <string.h>

/* The rule of reasoning.h on a whole reply, written independently of the byte machine. */
static void reference(const char *t, bool open, char **rs, char **ct)
{
    size_t n = strlen(t);
    const char *body = t;
    if (!open) {
        size_t k = 0;
        while (t[k] == '\n')
            k++;
        if (strncmp(t + k, "<think>", 7)) {
            *rs = strdup("");
            *ct = strdup(t);
            return;
        }
        body = t + k + 7;
    }
    const char *close = strstr(body, "</think>");
    size_t rn = close ? (size_t)(close - body) : strlen(body);
    const char *r = body;
    while (rn && *r == '\n')
        r++, rn--;
    while (rn && r[rn - 1] == '\n')
        rn--;
    *rs = strndup(r, rn);
    const char *c = close ? close + 8 : t + n;
    while (*c == '\n')
        c++;
    *ct = strdup(c);
}

static bool utf8_ok(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t k = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
        if (!k || i + k > n)
            return false;
        for (size_t j = 1; j < k; j++)
            if (((unsigned char)s[i + j] & 0xc0) != 0x80)
                return false;
        i += k;
    }
    return true;
}

/* Feeds t in the pieces that cuts[0..ncut) mark (increasing offsets), checks each piece's
 * output is valid UTF-8 when the cuts are at character boundaries, and compares with the
 * reference. */
static bool run(const char *t, bool open, const size_t *cuts, size_t ncut, bool char_cuts,
                const char *what)
{
    srv_reason r;
    const char *prompt = open ? "<|im_start|>assistant\n<think>\n" : "<|im_start|>assistant\n";
    srv_reason_init(&r, true, prompt, strlen(prompt));
    fl_buf rs = {0}, ct = {0};
    size_t n = strlen(t), at = 0;
    bool ok = true;
    for (size_t i = 0; i <= ncut; i++) {
        size_t end = i < ncut ? cuts[i] : n;
        size_t r0 = rs.len, c0 = ct.len;
        ok &= srv_reason_push(&r, t + at, end - at, &rs, &ct) == 0;
        if (char_cuts)
            ok &= utf8_ok(rs.data + r0, rs.len - r0) && utf8_ok(ct.data + c0, ct.len - c0);
        at = end;
    }
    ok &= srv_reason_finish(&r, &rs, &ct) == 0;
    char *wr, *wc;
    reference(t, open, &wr, &wc);
    bool same = !strcmp(rs.data ? rs.data : "", wr) && !strcmp(ct.data ? ct.data : "", wc);
    if (!(ok && same) && check_fails < 12)
        fprintf(stderr, "  %s on %s(open %d):\n    reasoning %s | want %s\n    content   %s | want %s\n",
                what, t, open, rs.data ? rs.data : "", wr, ct.data ? ct.data : "", wc);
    free(wr);
    free(wc);
    fl_buf_free(&rs);
    fl_buf_free(&ct);
    return ok && same;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void every_chunking(const char *t, bool open, const char *name)
{
    size_t n = strlen(t);
    bool ok = run(t, open, NULL, 0, true, "whole");
    for (size_t k = 1; k < n && ok; k++) { /* one cut, anywhere */
        size_t c[1] = {k};
        ok &= run(t, open, c, 1, false, "one cut");
    }
    size_t cuts[512];
    size_t m = 0;
    for (size_t k = 1; k < n && m < 512; k++) /* byte by byte */
        cuts[m++] = k;
    ok = ok && run(t, open, cuts, m, false, "byte by byte");
    for (int rep = 0; rep < 20 && ok; rep++) { /* random pieces at character boundaries */
        m = 0;
        for (size_t k = 1; k < n && m < 512; k++)
            if (((unsigned char)t[k] & 0xc0) != 0x80 && next() % 3 == 0)
                cuts[m++] = k;
        ok &= run(t, open, cuts, m, true, "random pieces");
    }
    CHECK(ok, "%s: every chunking agrees with the whole-text rule", name);
}

static void expect(const char *t, bool open, const char *want_r, const char *want_c)
{
    srv_reason r;
    const char *prompt = open ? "x<think>\n" : "x";
    srv_reason_init(&r, true, prompt, strlen(prompt));
    fl_buf rs = {0}, ct = {0};
    /* two bytes at a time: every tag in these texts is cut somewhere */
    for (size_t i = 0, n = strlen(t); i < n; i += 2)
        srv_reason_push(&r, t + i, n - i < 2 ? n - i : 2, &rs, &ct);
    srv_reason_finish(&r, &rs, &ct);
    CHECK(!strcmp(rs.data ? rs.data : "", want_r) && !strcmp(ct.data ? ct.data : "", want_c),
          "%s: reasoning \"%s\" content \"%s\", want \"%s\" / \"%s\"", t, rs.data ? rs.data : "",
          ct.data ? ct.data : "", want_r, want_c);
    fl_buf_free(&rs);
    fl_buf_free(&ct);
}

int main(void)
{
    /* the rule, by hand */
    expect("<think>\nLet me see.\n</think>\n\nThe answer is 4.", false, "Let me see.", "The answer is 4.");
    expect("\n<think>a</think>b", false, "a", "b");
    expect("<think>\n\n</think>\n\nHi", false, "", "Hi");
    expect("Hi there", false, "", "Hi there");
    expect("Hi <think>x</think> y", false, "", "Hi <think>x</think> y");
    expect("\n\nHi", false, "", "\n\nHi");
    expect("<thinking>", false, "", "<thinking>");
    expect("<thin", false, "", "<thin");
    expect("<think>cut off while thin", false, "cut off while thin", "");
    expect("<think>ends in a tag </thi", false, "ends in a tag </thi", "");
    expect("<think>a\n\n\n", false, "a", "");
    expect("<think>a </th </think> b </think> c\n", false, "a </th ", " b </think> c\n");
    expect("<think>x<think>y</think>z", false, "x<think>y", "z");
    expect("<think>a\n\nb\n</think>\n\nc\n\nd", false, "a\n\nb", "c\n\nd");
    expect("<think><</think>>", false, "<", ">");
    expect("<think>é😀</think>ü", false, "é😀", "ü");
    /* the prompt opened the block: a lone </think> ends reasoning */
    expect("\nreasoning\n</think>\n\nanswer", true, "reasoning", "answer");
    expect("no close tag", true, "no close tag", "");
    expect("<think>x</think>y", true, "<think>x", "y");

    /* the prompt's open block is recognised only at the end of the prompt */
    srv_reason r;
    static const char *const open_p[] = {"<|im_start|>assistant\n<think>\n", "<think>", "a</think>b<think>"};
    static const char *const shut_p[] = {"<|im_start|>assistant\n", "<|im_start|>assistant\n<think>\n\n</think>\n\n",
                                         "<think>x<|im_end|>\n<|im_start|>assistant\n", "", "<think"};
    for (size_t i = 0; i < sizeof open_p / sizeof *open_p; i++) {
        srv_reason_init(&r, true, open_p[i], strlen(open_p[i]));
        CHECK(r.state == SRV_REASON_THINK, "prompt %zu ends inside a think block", i);
    }
    for (size_t i = 0; i < sizeof shut_p / sizeof *shut_p; i++) {
        srv_reason_init(&r, true, shut_p[i], strlen(shut_p[i]));
        CHECK(r.state == SRV_REASON_START, "prompt %zu does not", i);
    }
    srv_reason_init(&r, false, open_p[0], strlen(open_p[0]));
    {
        fl_buf rs = {0}, ct = {0};
        const char *t = "<think>x</think>y";
        srv_reason_push(&r, t, 5, &rs, &ct);
        srv_reason_push(&r, t + 5, strlen(t) - 5, &rs, &ct);
        srv_reason_finish(&r, &rs, &ct);
        CHECK(!rs.len && ct.data && !strcmp(ct.data, t), "split off: everything is content as written");
        fl_buf_free(&rs);
        fl_buf_free(&ct);
    }

    /* srv_reason_span: the think block's bytes (what usage counts as reasoning tokens) */
    static const struct {
        const char *t;
        bool open;
        size_t want;
    } spans[] = {
        {"<think>\nLet me see.\n</think>\n\nThe answer is 4.", false, 28},
        {"\n\n<think>a</think>b", false, 18},
        {"Hi <think>x</think> y", false, 0},
        {"<thin", false, 0},
        {"<think>cut off while thin", false, 25},
        {"<think>a </th </think> b </think> c", false, 22},
        {"\nreasoning\n</think>\n\nanswer", true, 19},
        {"no close tag", true, 12},
        {"", false, 0},
        {"", true, 0},
    };
    for (size_t i = 0; i < sizeof spans / sizeof *spans; i++) {
        const char *prompt = spans[i].open ? "x<think>\n" : "x";
        srv_reason_init(&r, true, prompt, strlen(prompt));
        size_t got = srv_reason_span(&r, spans[i].t, strlen(spans[i].t));
        CHECK(got == spans[i].want, "span of \"%s\" (open %d): %zu, want %zu", spans[i].t,
              spans[i].open, got, spans[i].want);
    }
    srv_reason_init(&r, false, "x<think>\n", 9);
    CHECK(srv_reason_span(&r, "<think>a</think>b", 17) == 0, "split off: no reasoning bytes");

    /* crafted replies, every chunking */
    static const char *const crafted[] = {
        "<think>\nStep 1: 2+2.\nStep 2: =4\n</think>\n\nThe answer is 4.",
        "\n\n<think></think>",
        "<think>\n\n</think>\n\n\n\nanswer with trailing newlines\n\n",
        "<think>a<b</c</t</th</thi</thin</think</think>d<think>e</think>f",
        "<<think>x</think>y",
        "<think><<//think>></think>",
        "plain answer with a </think> in it and a <think> too",
        "<think>ünïcödé 你好 👨‍👩‍👧\n</think>\n\n答え",
        "<think",
        "<think>\n",
        "<think>reasoning only, cut",
        "",
        "\n",
    };
    for (size_t i = 0; i < sizeof crafted / sizeof *crafted; i++) {
        char name[32];
        snprintf(name, sizeof name, "crafted %zu", i);
        every_chunking(crafted[i], false, name);
        every_chunking(crafted[i], true, name);
    }

    /* random replies from fragments that make and break tags */
    static const char *const frag[] = {"<think>", "</think>", "<", "</", "</th", "ink>", "think>",
                                       "\n", "\n\n", "a", "b ", "é", "😀", ">", "/"};
    size_t nf = sizeof frag / sizeof *frag;
    int agreed = 0;
    for (int k = 0; k < 400; k++) {
        char t[400] = "";
        if (next() % 2)
            strcat(t, next() % 2 ? "<think>" : "\n<think>");
        for (int j = 0, len = (int)(next() % 24); j < len; j++)
            strcat(t, frag[next() % nf]);
        int before = check_fails;
        every_chunking(t, next() % 4 == 0, "random");
        agreed += check_fails == before;
    }
    CHECK(agreed == 400, "random replies: %d of 400 agree", agreed);
    return check_summary("test_reasoning");
}
