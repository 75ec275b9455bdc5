/* bench_tokenizer.c: `fogline bench tokenizer`: encode throughput of fogline's tokenizer and of
 * the Hugging Face reference (@huggingface/tokenizers under node) on the same deterministic
 * mixed text in the same run; both must produce the same ids. Prints MB/s for each and the
 * ratio. The reference script is tests/node/tok_bench_ref.mjs, found through --ref-script,
 * $FOGLINE_TOK_BENCH_SCRIPT, or relative to the binary / the working directory. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "tokenizer/tokenizer.h"

typedef struct bopts {
    const char *model;
    const char *node;
    const char *script;
    double mb;
    int runs;
    unsigned long long seed;
    bool no_ref;
} bopts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: fogline bench tokenizer --model DIR [options]\n\n"
            "Builds a deterministic mixed text (English, code, CJK, emoji, digits, whitespace\n"
            "runs, accents), encodes it with fogline and with @huggingface/tokenizers (node) in the\n"
            "same run, checks that the ids are identical and prints MB/s for each and the ratio.\n\n"
            "options:\n"
            "  --model DIR         model directory with tokenizer.json (required)\n"
            "  --mb N              text size in MB (default 1)\n"
            "  --runs N            timed runs after the cold one; the best counts (default 3)\n"
            "  --seed N            text generator seed (default 1)\n"
            "  --node PATH         node binary (default: node on PATH)\n"
            "  --ref-script PATH   tests/node/tok_bench_ref.mjs (default: $FOGLINE_TOK_BENCH_SCRIPT,\n"
            "                      then found from the binary's or the working directory)\n"
            "  --no-ref            only time fogline\n");
}

/* ---- deterministic text ---- */

static unsigned long long rnd(unsigned long long *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}
#define PICK(s, arr) (arr[rnd(s) % (sizeof arr / sizeof arr[0])])

static const char *const words[] = {
    "the", "of", "and", "to", "in", "is", "you", "that", "it", "was", "for", "on", "are", "with",
    "they", "be", "this", "have", "from", "one", "had", "word", "but", "not", "what", "all", "were",
    "when", "your", "can", "said", "there", "use", "each", "which", "their", "time", "will", "way",
    "about", "many", "then", "them", "would", "write", "like", "these", "long", "make", "thing",
    "see", "him", "two", "has", "look", "more", "day", "could", "come", "did", "number", "sound",
    "most", "people", "over", "know", "water", "than", "call", "first", "who", "may", "down", "side",
    "been", "now", "find", "model", "server", "tokenizer", "diffusion", "latency", "throughput",
    "block", "cache", "Redis", "WebSocket", "Kubernetes", "München", "café", "naïve", "résumé",
    "don't", "it's", "we'll", "they're", "I've", "you'd", "I'm", "O'Neil", "HELLO", "World",
};
static const char *const cjk[] = {
    "我们", "一起", "去", "学校", "今天", "天气", "很好", "模型", "服务器", "扩散", "语言", "中文",
    "日本語", "の", "テキスト", "です", "한국어", "문장", "입니다", "，", "。", "「", "」", "！",
};
static const char *const emoji[] = {
    "😀", "😂", "👍", "👍🏽", "👋🏿", "❤️", "🔥", "🎉", "🚀", "🇫🇷", "👨‍👩‍👧‍👦", "👩🏽‍💻", "🏳️‍🌈", "✅",
};
static const char *const code[] = {
    "def f(x):\n    return x * 2\n",
    "for (int i = 0; i < n; i++) {\n\tsum += a[i];\n}\n",
    "const g = async (a) => await h(a?.b ?? 0);\n",
    "if err != nil {\n        return nil, err\n    }\n",
    "SELECT id, name FROM users WHERE age > 21;\n",
    "<div class=\"row\"><span>{{ item.name }}</span></div>\n",
    "x = [1, 2, 3]  # list\n",
};
static const char *const ws[] = {" ", "  ", "\n", "\n\n", "\r\n", "\t", "    ", " \n", "\n\n\n"};
static const char *const marks[] = {"e\xcc\x81", "a\xcc\x80", "n\xcc\x83", "\xc3\xa9", "A\xcc\x8a"};

static int build_text(fl_buf *b, size_t want, unsigned long long seed)
{
    unsigned long long s = seed * 0x9e3779b97f4a7c15ull + 1;
    int rc = 0;
    while (b->len < want && !rc) {
        unsigned k = (unsigned)(rnd(&s) % 100);
        if (k < 55) { /* a sentence */
            unsigned n = 4 + (unsigned)(rnd(&s) % 14);
            for (unsigned i = 0; i < n && !rc; i++) {
                rc = fl_buf_puts(b, i ? " " : "") || fl_buf_puts(b, PICK(&s, words));
                if (rnd(&s) % 12 == 0)
                    rc = rc || fl_buf_puts(b, PICK(&s, ((const char *const[]){",", ";", ":", " -"})));
            }
            rc = rc || fl_buf_puts(b, PICK(&s, ((const char *const[]){". ", "! ", "? ", ".\n", "\n\n"})));
        } else if (k < 65) {
            unsigned n = 2 + (unsigned)(rnd(&s) % 10);
            for (unsigned i = 0; i < n && !rc; i++)
                rc = fl_buf_puts(b, PICK(&s, cjk));
        } else if (k < 73) {
            rc = fl_buf_puts(b, PICK(&s, code));
        } else if (k < 79) {
            rc = fl_buf_puts(b, PICK(&s, emoji)) || fl_buf_puts(b, " ");
        } else if (k < 87) {
            rc = fl_buf_printf(b, "%llu", rnd(&s) % (rnd(&s) % 2 ? 100ull : 10000000ull)) ||
                 fl_buf_puts(b, rnd(&s) % 3 ? " " : ".5 ");
        } else if (k < 95) {
            rc = fl_buf_puts(b, PICK(&s, ws));
        } else if (k < 99) {
            rc = fl_buf_puts(b, PICK(&s, marks)) || fl_buf_puts(b, PICK(&s, words)) || fl_buf_puts(b, " ");
        } else {
            rc = fl_buf_puts(b, "<|im_start|>user\n");
        }
    }
    return rc;
}

/* ---- helpers ---- */

static bool readable(const char *p) { return p && access(p, R_OK) == 0; }

static const char *find_script(const char *given, char *buf, size_t n)
{
    if (given)
        return given;
    const char *env = getenv("FOGLINE_TOK_BENCH_SCRIPT");
    if (env && *env)
        return env;
    char exe[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k > 0) {
        exe[k] = 0;
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = 0;
        /* build/server/fogline, build/fogline, /usr/local/bin/fogline next to a share dir */
        static const char *const rel[] = {"/../../tests/node/tok_bench_ref.mjs",
                                          "/../tests/node/tok_bench_ref.mjs",
                                          "/../share/fogline/tests/node/tok_bench_ref.mjs"};
        for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
            snprintf(buf, n, "%s%s", exe, rel[i]);
            if (readable(buf))
                return buf;
        }
    }
    snprintf(buf, n, "tests/node/tok_bench_ref.mjs");
    return readable(buf) ? buf : NULL;
}

/* Runs node on the reference script; its stdout (one JSON line) into out. */
static int run_ref(const bopts *o, const char *script, const char *text_path, const char *ids_path,
                   char *out, size_t outn)
{
    int p[2];
    if (pipe(p))
        return -1;
    char runs[16];
    snprintf(runs, sizeof runs, "%d", o->runs);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        execlp(o->node, o->node, script, o->model, text_path, ids_path, runs, (char *)NULL);
        fprintf(stderr, "fogline bench tokenizer: cannot run %s: %s\n", o->node, strerror(errno));
        _exit(127);
    }
    close(p[1]);
    size_t len = 0;
    ssize_t k;
    while ((k = read(p[0], out + len, outn - 1 - len)) > 0 && len + 1 < outn)
        len += (size_t)k;
    out[len] = 0;
    close(p[0]);
    int st;
    if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return -1;
    return 0;
}

static double json_num(const char *s, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(s, pat);
    return p ? strtod(p + strlen(pat), NULL) : -1;
}

static int parse_args(int argc, char **argv, bopts *o)
{
    memset(o, 0, sizeof *o);
    o->mb = 1;
    o->runs = 3;
    o->seed = 1;
    o->node = "node";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(a, "--no-ref"))
            o->no_ref = true;
        else if (has && !strcmp(a, "--model"))
            o->model = argv[++i];
        else if (has && !strcmp(a, "--node"))
            o->node = argv[++i];
        else if (has && !strcmp(a, "--ref-script"))
            o->script = argv[++i];
        else if (has && !strcmp(a, "--mb"))
            o->mb = atof(argv[++i]);
        else if (has && !strcmp(a, "--runs"))
            o->runs = atoi(argv[++i]);
        else if (has && !strcmp(a, "--seed"))
            o->seed = strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "fogline bench tokenizer: unknown or incomplete option '%s' (try --help)\n", a);
            return 2;
        }
    }
    if (!o->model) {
        fprintf(stderr, "fogline bench tokenizer: --model DIR is required (try --help)\n");
        return 2;
    }
    if (!(o->mb > 0 && o->mb <= 1024) || o->runs < 1 || o->runs > 100) {
        fprintf(stderr, "fogline bench tokenizer: --mb must be in (0, 1024] and --runs in [1, 100]\n");
        return 2;
    }
    return 0;
}

int fl_bench_tokenizer(int argc, char **argv)
{
    bopts o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc == 1 ? 0 : rc;
    fl_err e = {0};
    fl_tokenizer *t;
    double t0 = fl_now();
    if (fl_tokenizer_load(&t, o.model, NULL, &e)) {
        fprintf(stderr, "fogline bench tokenizer: %s\n", e.msg);
        return 1;
    }
    double load_s = fl_now() - t0;
    fl_buf text = {0};
    size_t want = (size_t)(o.mb * 1024 * 1024);
    if (build_text(&text, want, o.seed)) {
        fprintf(stderr, "fogline bench tokenizer: out of memory\n");
        fl_tokenizer_free(t);
        return 1;
    }
    double mb = (double)text.len / (1024.0 * 1024.0);

    /* ours: a cold run (empty word cache), then the best of N */
    int32_t *ids = NULL;
    size_t n = 0;
    t0 = fl_now();
    rc = fl_tokenizer_encode(t, text.data, text.len, true, &ids, &n, &e);
    double cold = fl_now() - t0, best = 1e30;
    for (int r = 0; r < o.runs && !rc; r++) {
        free(ids);
        t0 = fl_now();
        rc = fl_tokenizer_encode(t, text.data, text.len, true, &ids, &n, &e);
        double d = fl_now() - t0;
        if (d < best)
            best = d;
    }
    if (rc) {
        fprintf(stderr, "fogline bench tokenizer: %s\n", e.msg);
        fl_buf_free(&text);
        fl_tokenizer_free(t);
        return 1;
    }
    printf("fogline bench tokenizer: %s\n", o.model);
    printf("  text: %.2f MB (%zu bytes, seed %llu), %zu tokens\n", mb, text.len, o.seed, n);
    printf("  %-28s load %6.0f ms   cold %8.2f MB/s   best of %d %8.2f MB/s\n", "fogline (C)",
           load_s * 1e3, mb / cold, o.runs, mb / best);
    int status = 0;
    if (!o.no_ref) {
        char sbuf[PATH_MAX];
        const char *script = find_script(o.script, sbuf, sizeof sbuf);
        char dir[] = "/tmp/fogline-bench-XXXXXX";
        if (!script) {
            fprintf(stderr, "fogline bench tokenizer: tests/node/tok_bench_ref.mjs not found "
                            "(give --ref-script, set FOGLINE_TOK_BENCH_SCRIPT, or --no-ref)\n");
            status = 1;
        } else if (!mkdtemp(dir)) {
            fprintf(stderr, "fogline bench tokenizer: cannot make a temporary directory\n");
            status = 1;
        } else {
            char tpath[sizeof dir + 16], ipath[sizeof dir + 16], out[4096];
            snprintf(tpath, sizeof tpath, "%s/text", dir);
            snprintf(ipath, sizeof ipath, "%s/ids", dir);
            FILE *f = fopen(tpath, "wb");
            bool ok = f && fwrite(text.data, 1, text.len, f) == text.len;
            if (f && fclose(f))
                ok = false;
            if (!ok || run_ref(&o, script, tpath, ipath, out, sizeof out)) {
                fprintf(stderr, "fogline bench tokenizer: the reference run failed (%s %s)\n", o.node,
                        script);
                status = 1;
            } else {
                double rcold = json_num(out, "cold_ms") / 1e3, rbest = json_num(out, "best_ms") / 1e3;
                double rload = json_num(out, "load_ms");
                printf("  %-28s load %6.0f ms   cold %8.2f MB/s   best of %d %8.2f MB/s\n",
                       "@huggingface/tokenizers", rload, mb / rcold, o.runs, mb / rbest);
                /* the ids must be the same */
                FILE *g = fopen(ipath, "rb");
                size_t same = 0, rn = 0;
                int32_t v;
                while (g && fread(&v, sizeof v, 1, g) == 1) {
                    if (rn < n && v == ids[rn] && same == rn)
                        same++;
                    rn++;
                }
                if (g)
                    fclose(g);
                bool identical = rn == n && same == n;
                printf("  ratio (best vs best): %.1fx, cold vs cold: %.1fx; ids %s\n", rbest / best,
                       rcold / cold,
                       identical ? "identical" : "DIFFER");
                if (!identical) {
                    fprintf(stderr, "fogline bench tokenizer: ids differ from the reference at "
                                    "index %zu (ours %zu ids, reference %zu)\n", same, n, rn);
                    status = 1;
                }
            }
            unlink(tpath);
            unlink(ipath);
            rmdir(dir);
        }
    }
    free(ids);
    fl_buf_free(&text);
    fl_tokenizer_free(t);
    return status;
}
