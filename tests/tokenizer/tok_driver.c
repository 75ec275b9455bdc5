/* tok_driver.c: drives the C tokenizer for tests/node/tok_parity.mjs with byte-exact input
 * (JSON cannot carry invalid UTF-8). Usage: tok_driver MODEL_DIR; then one request per line:
 *   E <hex>   encode, special tokens matched   -> ids separated by spaces
 *   N <hex>   encode, special tokens not matched
 *   D <ids>   decode                            -> hex of the text
 *   S <ids>   decode, special tokens skipped
 *   T <ids>   the streaming detokenizer, one id at a time (+ finish) -> hex of the text
 * An empty hex or id list is "-". Errors go to stderr with exit status 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static void put_hex(const char *s, size_t n)
{
    if (!n)
        fputc('-', stdout);
    for (size_t i = 0; i < n; i++)
        printf("%02x", (unsigned char)s[i]);
    fputc('\n', stdout);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: tok_driver MODEL_DIR < requests\n");
        return 2;
    }
    fl_tokenizer *t;
    fl_err e = {0};
    if (fl_tokenizer_load(&t, argv[1], NULL, &e)) {
        fprintf(stderr, "tok_driver: %s\n", e.msg);
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    char *bytes = NULL;
    int32_t *ids = NULL;
    size_t bcap = 0;
    while ((len = getline(&line, &cap, stdin)) > 0) {
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = 0;
        if (len < 2 || line[1] != ' ') {
            fprintf(stderr, "tok_driver: bad request '%.20s'\n", line);
            return 1;
        }
        char op = line[0];
        const char *arg = line + 2;
        if ((size_t)len > bcap) {
            bcap = (size_t)len;
            bytes = realloc(bytes, bcap);
            ids = realloc(ids, bcap * sizeof *ids);
            if (!bytes || !ids)
                return 1;
        }
        if (op == 'E' || op == 'N') {
            size_t n = 0;
            if (strcmp(arg, "-"))
                for (const char *p = arg; p[0] && p[1]; p += 2) {
                    int hi = hexval(p[0]), lo = hexval(p[1]);
                    if (hi < 0 || lo < 0) {
                        fprintf(stderr, "tok_driver: bad hex\n");
                        return 1;
                    }
                    bytes[n++] = (char)(hi << 4 | lo);
                }
            int32_t *out;
            size_t nout;
            if (fl_tokenizer_encode(t, bytes, n, op == 'E', &out, &nout, &e)) {
                fprintf(stderr, "tok_driver: %s\n", e.msg);
                return 1;
            }
            if (!nout)
                fputc('-', stdout);
            for (size_t i = 0; i < nout; i++)
                printf(i ? " %d" : "%d", out[i]);
            fputc('\n', stdout);
            free(out);
        } else if (op == 'D' || op == 'S' || op == 'T') {
            size_t n = 0;
            if (strcmp(arg, "-")) {
                char *end;
                for (const char *p = arg; *p;) {
                    long v = strtol(p, &end, 10);
                    if (end == p) {
                        fprintf(stderr, "tok_driver: bad ids\n");
                        return 1;
                    }
                    ids[n++] = (int32_t)v;
                    p = end;
                    while (*p == ' ')
                        p++;
                }
            }
            fl_buf text = {0};
            if (op == 'T') {
                fl_detok d;
                fl_detok_init(&d, t, false);
                for (size_t i = 0; i < n; i++)
                    if (fl_detok_push(&d, ids[i], &text))
                        return 1;
                if (fl_detok_finish(&d, &text))
                    return 1;
            } else if (fl_tokenizer_decode(t, ids, n, op == 'S', &text, &e)) {
                fprintf(stderr, "tok_driver: %s\n", e.msg);
                return 1;
            }
            put_hex(text.data, text.len);
            fl_buf_free(&text);
        } else {
            fprintf(stderr, "tok_driver: unknown request '%c'\n", op);
            return 1;
        }
    }
    free(line);
    free(bytes);
    free(ids);
    fl_tokenizer_free(t);
    return 0;
}
