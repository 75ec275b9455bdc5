/* cmd_generate.c: `fogline generate`: one reply from a model, shown live in the terminal
 * (each block resolving out of its masks) or printed as one JSON object with --json. The
 * scheduler is stepped on this thread: one process, one request, no server. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend_select.h"
#include "cli.h"
#include "constraint.h"
#include "engine.h"
#include "gen_opts.h"
#include "tokenizer/tokenizer.h"

typedef struct live {
    const fl_tokenizer *tok;
    bool tty, json;
    bool visual;        /* --visual: every step drawn as a whole frame, then --pace ms */
    int pace_ms;
    json_t *steps;      /* --json --trace: one object per draft, NULL otherwise */
    int n_frames;
    fl_buf committed;   /* reply text committed so far */
    int32_t draft[FL_MAX_RUN_BLOCKS][FL_MAX_BLOCK]; /* running blocks' tokens, -1 masked */
    int32_t draft_n[FL_MAX_RUN_BLOCKS];
    int32_t first_block; /* reply block index of draft[0] */
    int done;
    fl_finish finish;
    int32_t stop_string, stop_token; /* the done's: what ended the reply (-1: unnamed) */
    char *error;
    fl_seq_stats st;
    int32_t *ids;
    int32_t n_ids;
    /* --logprobs: the reply ids' log probabilities (n_lps of them) and n_top alternatives */
    float *lps;
    int32_t *top_ids;
    float *top_lps;
    int32_t n_lps, n_top;
    bool lp_lost;
    fl_buf text;
} live;

static void put_token(const fl_tokenizer *tok, int32_t t)
{
    fl_buf one = {0};
    if (!fl_tokenizer_decode(tok, &t, 1, true, &one, NULL) && one.len)
        fwrite(one.data, 1, one.len, stdout);
    fl_buf_free(&one);
}

static void redraw(live *L)
{
    if (!L->tty || L->json)
        return;
    /* restore to the end of the committed text, clear, print the drafts dimmed */
    fputs("\0338\033[J\033[2m", stdout);
    for (int b = 0; b < FL_MAX_RUN_BLOCKS; b++) {
        for (int i = 0; i < L->draft_n[b]; i++) {
            int32_t t = L->draft[b][i];
            if (t < 0)
                fputs("\xe2\x96\x91", stdout); /* ░: a masked position */
            else
                put_token(L->tok, t);
        }
    }
    fputs("\033[0m", stdout);
    fflush(stdout);
}

/* --visual: one whole frame per step (clear, home): the committed text, the running blocks
   with masks as fog and this step's positions marked (new: bold cyan, edited: bold yellow),
   then a line saying which step of which block it was. */
static void visual_frame(live *L, const fl_event *ev)
{
    int masked = 0, fresh = 0, edited = 0;
    fputs("\033[2J\033[H", stdout);
    fwrite(L->committed.data ? L->committed.data : "", 1, L->committed.len, stdout);
    for (int b = 0; b < FL_MAX_RUN_BLOCKS; b++) {
        bool cur = L->first_block + b == ev->block;
        for (int i = 0; i < L->draft_n[b]; i++) {
            int32_t t = L->draft[b][i];
            if (t < 0) {
                fputs("\033[2m\xe2\x96\x91\033[0m", stdout); /* ░: a masked position */
                masked++;
                continue;
            }
            bool nw = cur && ev->fresh && ev->fresh[i], ed = cur && ev->edited && ev->edited[i];
            fresh += nw;
            edited += ed;
            fputs(nw ? "\033[1;36m" : ed ? "\033[1;33m" : "\033[2m", stdout);
            put_token(L->tok, t);
            fputs("\033[0m", stdout);
        }
    }
    printf("\n\n\033[2m[block %d · step %d · %d new · %d edited · %d masked]\033[0m\n", ev->block,
           ev->step, fresh, edited, masked);
    fflush(stdout);
    L->n_frames++;
    if (L->pace_ms > 0) {
        struct timespec ts = {L->pace_ms / 1000, (long)(L->pace_ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) && errno == EINTR)
            ;
    }
}

/* --json --trace: the draft as the trace's next item */
static void trace_step(live *L, const fl_event *ev)
{
    json_t *o = json_object(), *toks = json_array(), *nw = json_array(), *ed = json_array();
    for (int32_t i = 0; i < ev->n; i++) {
        json_array_append_new(toks, json_integer(ev->tokens[i]));
        if (ev->fresh && ev->fresh[i])
            json_array_append_new(nw, json_integer(i));
        if (ev->edited && ev->edited[i])
            json_array_append_new(ed, json_integer(i));
    }
    json_object_set_new(o, "block", json_integer(ev->block));
    json_object_set_new(o, "step", json_integer(ev->step));
    json_object_set_new(o, "tokens", toks);
    json_object_set_new(o, "new", nw);
    json_object_set_new(o, "edited", ed);
    json_array_append_new(L->steps, o);
}

static void sink(const fl_event *ev, void *ctx)
{
    live *L = ctx;
    switch (ev->type) {
    case FL_EV_DRAFT: {
        int slot = ev->block - L->first_block;
        if (slot >= 0 && slot < FL_MAX_RUN_BLOCKS) {
            L->draft_n[slot] = ev->n;
            memcpy(L->draft[slot], ev->tokens, sizeof(int32_t) * (size_t)ev->n);
        }
        if (L->steps)
            trace_step(L, ev);
        if (L->visual)
            visual_frame(L, ev);
        else
            redraw(L);
        break;
    }
    case FL_EV_COMMIT:
        if (L->tty && !L->json && !L->visual) {
            fputs("\0338\033[J", stdout);
            fwrite(ev->text, 1, ev->text_len, stdout);
            fputs("\0337", stdout);
        }
        fl_buf_append(&L->committed, ev->text, ev->text_len);
        /* the committed block leaves the draft window */
        memmove(L->draft[0], L->draft[1], sizeof L->draft - sizeof L->draft[0]);
        memmove(L->draft_n, L->draft_n + 1, sizeof L->draft_n - sizeof L->draft_n[0]);
        L->draft_n[FL_MAX_RUN_BLOCKS - 1] = 0;
        L->first_block = ev->block + 1;
        if (!L->visual)
            redraw(L);
        break;
    case FL_EV_DONE:
        L->done = 1;
        L->finish = ev->finish;
        L->stop_string = ev->stop_string;
        L->stop_token = ev->stop_token;
        if (ev->error)
            L->error = strdup(ev->error);
        if (ev->stats)
            L->st = *ev->stats;
        fl_buf_append(&L->text, ev->text, ev->text_len);
        L->ids = malloc(sizeof(int32_t) * (size_t)(ev->n_ids + 1));
        if (L->ids) {
            memcpy(L->ids, ev->ids, sizeof(int32_t) * (size_t)ev->n_ids);
            L->n_ids = ev->n_ids;
        }
        if (ev->lps) {
            size_t n = (size_t)ev->n_lps, k = n * (size_t)ev->n_top;
            L->lps = malloc(sizeof(float) * (n + 1));
            L->top_ids = malloc(sizeof(int32_t) * (k + 1));
            L->top_lps = malloc(sizeof(float) * (k + 1));
            L->lp_lost = !L->lps || !L->top_ids || !L->top_lps;
            if (!L->lp_lost) {
                memcpy(L->lps, ev->lps, sizeof(float) * n);
                if (k) {
                    memcpy(L->top_ids, ev->top_ids, sizeof(int32_t) * k);
                    memcpy(L->top_lps, ev->top_lps, sizeof(float) * k);
                }
                L->n_lps = ev->n_lps;
                L->n_top = ev->n_top;
            }
        }
        break;
    }
}

static const char *finish_name(fl_finish f)
{
    switch (f) {
    case FL_FINISH_STOP: return "stop";
    case FL_FINISH_LENGTH: return "length";
    case FL_FINISH_CANCELLED: return "cancelled";
    default: return "error";
    }
}

/* A comma-separated list of token ids, each with ":VALUE" when vals is given (--logit-bias
   ID:B,...: a bias in [-100, 100]) or alone (--stop-token-ids ID,...), appended to ids (and
   vals) up to max; -1 after a one-line message naming flag. */
static int parse_ids(const char *arg, const char *flag, int32_t *ids, float *vals, int *n,
                     int max)
{
    const char *p = arg;
    do {
        char *end;
        long id = strtol(p, &end, 10);
        if (end == p || *p < '0' || *p > '9' || id > 0x7fffffff ||
            (vals ? *end != ':' : *end && *end != ','))
            goto bad;
        float v = 0;
        if (vals) {
            p = end + 1;
            double b = strtod(p, &end);
            if (end == p || (*end && *end != ',') ||
                !(b >= -FL_LOGIT_BIAS_MAX && b <= FL_LOGIT_BIAS_MAX))
                goto bad;
            v = (float)b;
        }
        if (*n == max) {
            fprintf(stderr, "fogline generate: %s names more than %d tokens\n", flag, max);
            return -1;
        }
        ids[*n] = (int32_t)id;
        if (vals)
            vals[*n] = v;
        (*n)++;
        p = *end ? end + 1 : end;
        if (*end && !*p) /* a trailing comma */
            goto bad;
    } while (*p);
    return 0;
bad:
    if (vals)
        fprintf(stderr, "fogline generate: %s takes ID:BIAS pairs (a token id, a bias in "
                        "[-100, 100]) separated by commas, got '%s'\n", flag, arg);
    else
        fprintf(stderr, "fogline generate: %s takes token ids separated by commas, got '%s'\n",
                flag, arg);
    return -1;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: fogline generate [--model DIR] (--prompt TEXT | --messages FILE) [options]\n\n"
               "  --model DIR          model directory (default: $FOGLINE_MODEL or the built-in model)\n"
               "  --prompt TEXT        one user message, rendered with the model's chat template\n"
               "  --system TEXT        a system message before it\n"
               "  --messages FILE      a JSON array of {\"role\",\"content\"} messages ('-' = stdin)\n"
               "  --raw                use --prompt as the exact prompt text (no template)\n"
               "  --prompt-ids 1,2,3   the exact prompt token ids (no tokenizer needed)\n"
               "  --json               print one JSON object: text, ids, finish, stats\n"
               "  --trace              with --json: also \"steps\", every denoising step's draft\n"
               "                       (block, step, tokens with -1 masked, new, edited)\n"
               "  --logprobs N         with --json: also \"logprobs\", each reply token's log\n"
               "                       probability where it was decided and its N (0..20) most\n"
               "                       likely alternatives\n"
               "  --logit-bias ID:B,.. add B (-100..100) to token ID's logit wherever a reply\n"
               "                       token is decided (OpenAI's logit_bias)\n"
               "  --min-tokens N       no end token before N reply tokens (0..max-tokens)\n"
               "  --ignore-eos         no end token at all: the reply runs to --max-tokens or a\n"
               "                       stop string\n"
               "  --presence-penalty X, --frequency-penalty X\n"
               "                       OpenAI's penalties (-2..2) on the reply's decided tokens\n"
               "  --repetition-penalty X\n"
               "                       vLLM's (0 < X <= 10; 1 is off): the logits of the prompt's\n"
               "                       and the decided reply's tokens divided by X (if positive,\n"
               "                       else multiplied)\n"
               "  --stop-token-ids ID,...\n"
               "                       the reply ends at the first of these tokens (kept in it)\n"
               "  --include-stop-str   a --stop string that ends the reply stays at its end\n"
               "  --visual             watch it denoise: every step redrawn on the terminal,\n"
               "                       masks as fog, the step's new tokens marked\n"
               "  --pace MS            with --visual: wait MS ms after each step (0..10000;\n"
               "                       default 60; 0 is real time)\n"
               "  --threads N          compute threads (default: all cores)\n"
               "  --device D           auto (the GPU when one is usable) | cpu | cuda\n"
               "                       (default: $FOGLINE_DEVICE or auto)\n"
               "  --weights F          auto (a quantized directory's format, bf16 when the file's\n"
               "                       weights are, else f32) | f32 | bf16 | q8 | q4 (CPU: 8- or\n"
               "                       4-bit, quantized at load) (default: $FOGLINE_WEIGHTS or auto)\n"
               "  --kv-format F        KV pages: auto (f32 on the CPU, bf16 on CUDA) | f32 | bf16\n"
               "                       (half the bytes attention reads; keys and values rounded)\n"
               "                       (default: $FOGLINE_KV_FORMAT or auto)\n"
               "  --chat-template K    override the template: chatml | qwen3 | fogline | ling\n"
               "  --no-thinking        Qwen3 templates: enable_thinking=false (the empty think block)\n"
               "  --enable-thinking    Qwen3 templates: enable_thinking=true (the template's default)\n"
               "  --schema FILE        the reply is a JSON value of this JSON schema (OpenAI's strict\n"
               "                       subset, docs/structured.md), decoded under the constraint\n"
               "  --json-object        the reply is a JSON object (response_format json_object)\n"
               "  --regex PATTERN      the whole reply matches this regular expression (ECMA-262,\n"
               "                       docs/structured.md; vLLM's structured_outputs regex)\n");
    fl_gen_opts_usage(f);
}

int fl_cmd_generate(int argc, char **argv)
{
    const char *model_dir = getenv("FOGLINE_MODEL");
    const char *prompt = NULL, *system = NULL, *messages = NULL, *tmpl = NULL, *prompt_ids = NULL;
    bool raw = false, json = false, thinking = true; /* the template's own default */
    bool steps = false, visual = false;
    const char *pace = NULL, *schema_file = NULL, *regex = NULL;
    bool json_object_fmt = false;
    int logprobs = -1; /* --logprobs N: off */
    int32_t bias_ids[FL_MAX_LOGIT_BIAS]; /* --logit-bias */
    float bias[FL_MAX_LOGIT_BIAS];
    int n_bias = 0;
    long min_tokens = 0; /* --min-tokens */
    bool ignore_eos = false;
    float penalty[2] = {0, 0}; /* --presence-penalty, --frequency-penalty */
    float repetition = 0;      /* --repetition-penalty; 0: off */
    int32_t stop_ids[FL_MAX_STOP_TOKEN_IDS]; /* --stop-token-ids */
    int n_stop_ids = 0;
    bool include_stop_str = false; /* --include-stop-str */
    int threads = 0;
    const char *device = getenv("FOGLINE_DEVICE");
    const char *weights = getenv("FOGLINE_WEIGHTS");
    const char *weights_from = "FOGLINE_WEIGHTS";
    const char *kvformat = getenv("FOGLINE_KV_FORMAT");
    const char *kvformat_from = "FOGLINE_KV_FORMAT";
    fl_gen_opts g;
    fl_gen_opts_default(&g);
    enum { O_MODEL = 1000, O_PROMPT, O_SYSTEM, O_MESSAGES, O_RAW, O_JSON, O_THREADS, O_TMPL, O_HELP,
           O_IDS, O_DEVICE, O_NO_THINK, O_THINK, O_WEIGHTS, O_KV_FORMAT, O_STEPS, O_VISUAL,
           O_PACE, O_SCHEMA, O_JSON_OBJECT, O_REGEX, O_LOGPROBS, O_LOGIT_BIAS,
           O_MIN_TOKENS, O_IGNORE_EOS, O_PRESENCE, O_FREQUENCY, O_REPETITION, O_STOP_IDS,
           O_INCLUDE_STOP };
    struct option base[] = {
        {"model", required_argument, 0, O_MODEL},     {"prompt", required_argument, 0, O_PROMPT},
        {"system", required_argument, 0, O_SYSTEM},   {"messages", required_argument, 0, O_MESSAGES},
        {"raw", no_argument, 0, O_RAW},               {"json", no_argument, 0, O_JSON},
        {"threads", required_argument, 0, O_THREADS}, {"chat-template", required_argument, 0, O_TMPL},
        {"help", no_argument, 0, O_HELP},             {"prompt-ids", required_argument, 0, O_IDS},
        {"device", required_argument, 0, O_DEVICE},   {"no-thinking", no_argument, 0, O_NO_THINK},
        {"enable-thinking", no_argument, 0, O_THINK}, {"weights", required_argument, 0, O_WEIGHTS},
        {"kv-format", required_argument, 0, O_KV_FORMAT}, {"trace", no_argument, 0, O_STEPS},
        {"visual", no_argument, 0, O_VISUAL},         {"pace", required_argument, 0, O_PACE},
        {"schema", required_argument, 0, O_SCHEMA},   {"json-object", no_argument, 0, O_JSON_OBJECT},
        {"regex", required_argument, 0, O_REGEX},     {"logprobs", required_argument, 0, O_LOGPROBS},
        {"logit-bias", required_argument, 0, O_LOGIT_BIAS},
        {"min-tokens", required_argument, 0, O_MIN_TOKENS},
        {"ignore-eos", no_argument, 0, O_IGNORE_EOS},
        {"presence-penalty", required_argument, 0, O_PRESENCE},
        {"frequency-penalty", required_argument, 0, O_FREQUENCY},
        {"repetition-penalty", required_argument, 0, O_REPETITION},
        {"stop-token-ids", required_argument, 0, O_STOP_IDS},
        {"include-stop-str", no_argument, 0, O_INCLUDE_STOP},
    };
    struct option opts[64];
    int nopt = fl_gen_opts_longopts(opts, 64, base, (int)(sizeof base / sizeof base[0]));
    (void)nopt;
    optind = 1;
    opterr = 0;
    int c;
    char errbuf[256];
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case O_MODEL: model_dir = optarg; break;
        case O_PROMPT: prompt = optarg; break;
        case O_SYSTEM: system = optarg; break;
        case O_MESSAGES: messages = optarg; break;
        case O_RAW: raw = true; break;
        case O_JSON: json = true; break;
        case O_THREADS: threads = atoi(optarg); break;
        case O_TMPL: tmpl = optarg; break;
        case O_IDS: prompt_ids = optarg; break;
        case O_DEVICE: device = optarg; break;
        case O_WEIGHTS: weights = optarg; weights_from = "--weights"; break;
        case O_KV_FORMAT: kvformat = optarg; kvformat_from = "--kv-format"; break;
        case O_STEPS: steps = true; break;
        case O_VISUAL: visual = true; break;
        case O_PACE: pace = optarg; break;
        case O_SCHEMA: schema_file = optarg; break;
        case O_JSON_OBJECT: json_object_fmt = true; break;
        case O_REGEX: regex = optarg; break;
        case O_LOGPROBS: {
            char *end = NULL;
            long v = strtol(optarg, &end, 10);
            if (!*optarg || *end || v < 0 || v > FL_MAX_TOP_LOGPROBS) {
                fprintf(stderr, "fogline generate: --logprobs takes an integer in [0, %d], got "
                                "'%s'\n", FL_MAX_TOP_LOGPROBS, optarg);
                return 2;
            }
            logprobs = (int)v;
            break;
        }
        case O_LOGIT_BIAS:
            if (parse_ids(optarg, "--logit-bias", bias_ids, bias, &n_bias, FL_MAX_LOGIT_BIAS))
                return 2;
            break;
        case O_MIN_TOKENS: {
            char *end = NULL;
            min_tokens = strtol(optarg, &end, 10);
            if (!*optarg || *end || min_tokens < 0 || min_tokens > 1 << 24) {
                fprintf(stderr, "fogline generate: --min-tokens takes a count of tokens, got "
                                "'%s'\n", optarg);
                return 2;
            }
            break;
        }
        case O_IGNORE_EOS: ignore_eos = true; break;
        case O_REPETITION: {
            char *end = NULL;
            double v = strtod(optarg, &end);
            if (!*optarg || *end || !(v > 0 && v <= FL_REP_PENALTY_MAX)) {
                fprintf(stderr, "fogline generate: --repetition-penalty takes a number in (0, "
                                "%g], got '%s'\n", (double)FL_REP_PENALTY_MAX, optarg);
                return 2;
            }
            repetition = (float)v;
            break;
        }
        case O_INCLUDE_STOP: include_stop_str = true; break;
        case O_STOP_IDS:
            n_stop_ids = 0; /* the last flag's list */
            if (parse_ids(optarg, "--stop-token-ids", stop_ids, NULL, &n_stop_ids,
                          FL_MAX_STOP_TOKEN_IDS))
                return 2;
            break;
        case O_PRESENCE:
        case O_FREQUENCY: {
            char *end = NULL;
            double v = strtod(optarg, &end);
            if (!*optarg || *end || !(v >= -2 && v <= 2)) {
                fprintf(stderr, "fogline generate: --%s-penalty takes a number in [-2, 2], got "
                                "'%s'\n", c == O_PRESENCE ? "presence" : "frequency", optarg);
                return 2;
            }
            penalty[c == O_FREQUENCY] = (float)v;
            break;
        }
        case O_NO_THINK: thinking = false; break;
        case O_THINK: thinking = true; break;
        case O_HELP: usage(stdout); return 0;
        case '?':
            fprintf(stderr, "fogline generate: unknown or incomplete option '%s' (try --help)\n",
                    argv[optind - 1]);
            return 2;
        default:
            if (fl_gen_opts_apply(&g, c, optarg, errbuf, sizeof errbuf)) {
                fprintf(stderr, "fogline generate: %s\n", errbuf);
                return 2;
            }
        }
    }
    if (optind < argc) {
        fprintf(stderr, "fogline generate: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    long pace_ms = 60;
    if (!!schema_file + json_object_fmt + !!regex > 1) {
        fprintf(stderr, "fogline generate: give one of --schema FILE, --json-object, --regex\n");
        return 2;
    }
    if (logprobs >= 0 && !json) {
        fprintf(stderr, "fogline generate: --logprobs adds \"logprobs\" to --json's output; give "
                        "--json too\n");
        return 2;
    }
    if (steps && !json) {
        fprintf(stderr, "fogline generate: --trace adds the step trace to --json's output; give "
                        "--json too\n");
        return 2;
    }
    if (visual && json) {
        fprintf(stderr, "fogline generate: --visual draws on the terminal and --json prints JSON; "
                        "give one (--json --trace for a trace)\n");
        return 2;
    }
    if (pace && !visual) {
        fprintf(stderr, "fogline generate: --pace is for --visual\n");
        return 2;
    }
    if (pace && fl_parse_long(pace, 0, 10000, &pace_ms)) {
        fprintf(stderr, "fogline generate: --pace needs milliseconds in [0, 10000], got '%s'\n",
                pace);
        return 2;
    }
    if (visual && !isatty(STDOUT_FILENO)) {
        fprintf(stderr, "fogline generate: --visual draws on a terminal and stdout is not one "
                        "(--json --trace prints every step)\n");
        return 2;
    }
    if (!fl_backend_device_valid(device)) {
        fprintf(stderr, "fogline generate: --device must be auto, cpu or cuda, got '%s'\n", device);
        fl_gen_opts_free(&g);
        return 2;
    }
    fl_wformat wf = FL_WEIGHTS_AUTO;
    fl_err we = {0};
    if (weights && fl_wformat_parse(weights, &wf, &we)) {
        fprintf(stderr, "fogline generate: %s %s\n", weights_from, we.msg);
        fl_gen_opts_free(&g);
        return 2;
    }
    fl_kvformat kvf = FL_KV_AUTO;
    if (kvformat && fl_kvformat_parse(kvformat, &kvf, &we)) {
        fprintf(stderr, "fogline generate: %s %s\n", kvformat_from, we.msg);
        fl_gen_opts_free(&g);
        return 2;
    }
    if (!prompt && !messages && !prompt_ids) {
        fprintf(stderr, "fogline generate: give --prompt TEXT or --messages FILE (try --help)\n");
        return 2;
    }
    /* --prompt-ids: exact token ids, comma separated (tests, debugging) */
    int32_t *given = NULL;
    size_t n_given = 0;
    if (prompt_ids) {
        given = malloc(sizeof(int32_t) * (strlen(prompt_ids) / 2 + 2));
        const char *p = prompt_ids;
        while (given && *p) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p || v < 0 || v > 0x7fffffff || (*end && *end != ',')) {
                fprintf(stderr, "fogline generate: --prompt-ids needs comma-separated token ids, got '%s'\n",
                        prompt_ids);
                free(given);
                return 2;
            }
            given[n_given++] = (int32_t)v;
            p = *end ? end + 1 : end;
        }
        if (!given || !n_given) {
            fprintf(stderr, "fogline generate: --prompt-ids is empty\n");
            free(given);
            return 2;
        }
    }
    if (!model_dir)
        model_dir = FL_DEFAULT_MODEL_DIR;
    fl_err e = {0};
    fl_model *m = NULL;
    fl_load_opts lo = {0};
    lo.chat_template = tmpl;
    if (given) { /* ids need no tokenizer: a directory without one still generates */
        char tj[4096];
        snprintf(tj, sizeof tj, "%s/tokenizer.json", model_dir);
        lo.no_tokenizer = access(tj, R_OK) != 0;
    }
    if (fl_model_load(&m, model_dir, &lo, &e)) {
        fprintf(stderr, "fogline generate: %s\n", e.msg);
        free(given);
        return 1;
    }
    {
        char de[300];
        if (fl_gen_opts_resolve(&g, &m->cfg, NULL, de, sizeof de)) {
            fprintf(stderr, "fogline generate: %s\n", de);
            fl_model_free(m);
            free(given);
            fl_gen_opts_free(&g);
            return 1;
        }
    }
    int rc = 1;
    fl_backend *b = NULL;
    fl_sched *s = NULL;
    fl_cons_cache *cc = NULL;
    fl_cons *cons = NULL;
    char *schema_text = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    json_t *jmsgs = NULL;
    fl_buf text = {0};
    live L = {.stop_string = -1, .stop_token = -1};
    /* the prompt text */
    if (given) {
        ids = given;
        n_ids = n_given;
        given = NULL;
    } else if (raw && prompt) {
        fl_buf_puts(&text, prompt);
    } else {
        fl_chat_msg msgs[64];
        size_t nm = 0;
        if (messages) {
            json_error_t je;
            jmsgs = !strcmp(messages, "-") ? json_loadf(stdin, 0, &je) : json_load_file(messages, 0, &je);
            if (!jmsgs || !json_is_array(jmsgs)) {
                fprintf(stderr, "fogline generate: %s: %s\n", messages,
                        jmsgs ? "not a JSON array of messages" : je.text);
                goto out;
            }
            size_t i;
            json_t *v;
            json_array_foreach(jmsgs, i, v)
            {
                const char *role = json_string_value(json_object_get(v, "role"));
                const char *content = json_string_value(json_object_get(v, "content"));
                if (!role || !content || nm >= 64) {
                    fprintf(stderr, "fogline generate: %s: message %zu needs string role and content "
                                    "(at most 64 messages)\n", messages, i);
                    goto out;
                }
                msgs[nm++] = (fl_chat_msg){role, content};
            }
        } else {
            if (system)
                msgs[nm++] = (fl_chat_msg){"system", system};
            msgs[nm++] = (fl_chat_msg){"user", prompt};
        }
        fl_chat_opts co = {.add_generation_prompt = true, .enable_thinking = thinking};
        if (fl_chat_render(m->tok, msgs, nm, &co, &text, &e)) {
            fprintf(stderr, "fogline generate: %s\n", e.msg);
            goto out;
        }
    }
    if (text.err) { /* the raw prompt did not fit: never a cut one */
        fprintf(stderr, "fogline generate: out of memory\n");
        goto out;
    }
    if (!ids && fl_tokenizer_encode(m->tok, text.data ? text.data : "", text.len, true, &ids, &n_ids, &e)) {
        fprintf(stderr, "fogline generate: %s\n", e.msg);
        goto out;
    }
    int32_t B = m->cfg.block_size;
    fl_backend_opts bo = {.n_threads = threads, .weights = wf, .kv = kvf};
    bo.n_pages = fl_pages_needed(&m->cfg, (int32_t)n_ids, g.max_tokens, &g.dec);
    /* the whole prompt can ride in the first forward with the deepest pipeline */
    bo.max_tokens = (int32_t)n_ids + (FL_MAX_RUN_BLOCKS + 1) * B;
    if (fl_backend_open(&b, m, &bo, device, NULL, 0, &e)) {
        fprintf(stderr, "fogline generate: %s\n", e.msg);
        goto out;
    }
    fl_sched_opts so = {.max_batch_tokens = bo.max_tokens, .max_seqs = 1, .async_persist = true};
    if (fl_sched_create(&s, m, b, &so, &e)) {
        fprintf(stderr, "fogline generate: %s\n", e.msg);
        goto out;
    }
    if (schema_file || json_object_fmt || regex) {
        if (schema_file) {
            json_error_t je;
            json_t *sj = json_load_file(schema_file, JSON_DECODE_ANY, &je);
            if (!sj) {
                fprintf(stderr, "fogline generate: %s: %s\n", schema_file, je.text);
                goto out;
            }
            schema_text = json_dumps(sj, JSON_COMPACT | JSON_ENCODE_ANY);
            json_decref(sj);
        }
        if (!(cc = fl_cons_cache_new(m, 1, 0)) || (schema_file && !schema_text)) {
            fprintf(stderr, "fogline generate: out of memory\n");
            goto out;
        }
        if (fl_cons_cache_get(cc, schema_file ? FL_FMT_JSON_SCHEMA
                                  : regex   ? FL_FMT_REGEX
                                            : FL_FMT_JSON_OBJECT,
                              regex ? regex : schema_text, &cons, &e)) {
            fprintf(stderr, "fogline generate: %s%s%s\n", schema_file ? schema_file : regex ? "--regex" : "",
                    schema_file || regex ? ": " : "", e.msg);
            goto out;
        }
    }
    fl_request req = {0};
    req.constraint = cons;
    req.prompt = ids;
    req.n_prompt = (int32_t)n_ids;
    req.max_tokens = g.max_tokens;
    req.stop = (const char *const *)g.stop;
    req.n_stop = g.n_stop;
    req.dec = g.dec;
    req.every_step = steps || visual;
    req.logprobs = logprobs >= 0;
    req.top_logprobs = logprobs >= 0 ? logprobs : 0;
    req.bias_ids = bias_ids;
    req.bias = bias;
    req.n_bias = n_bias;
    req.min_tokens = (int32_t)min_tokens;
    req.ignore_eos = ignore_eos;
    req.presence_penalty = penalty[0];
    req.frequency_penalty = penalty[1];
    req.repetition_penalty = repetition;
    req.stop_ids = stop_ids;
    req.n_stop_ids = n_stop_ids;
    req.include_stop_str = include_stop_str;
    L.tok = m->tok;
    L.json = json;
    L.tty = isatty(STDOUT_FILENO) && !json && m->tok;
    L.visual = visual && m->tok;
    L.pace_ms = (int)pace_ms;
    if (steps && !(L.steps = json_array())) {
        fprintf(stderr, "fogline generate: out of memory\n");
        goto out;
    }
    if (visual && !m->tok) {
        fprintf(stderr, "fogline generate: --visual needs the model's tokenizer to show text\n");
        goto out;
    }
    if (fl_sched_add(s, &req, sink, &L, 1, &e)) {
        fprintf(stderr, "fogline generate: %s\n", e.msg);
        goto out;
    }
    if (L.tty && !L.visual)
        fputs("\0337", stdout);
    while (!L.done) {
        int r = fl_sched_step(s, &e);
        if (r < 0 && !L.done) {
            fprintf(stderr, "fogline generate: %s\n", e.msg);
            goto out;
        }
        if (r == 0 && !L.done) {
            fprintf(stderr, "fogline generate: the scheduler stalled (internal error)\n");
            goto out;
        }
    }
    fl_sched_flush(s);
    if (L.error) {
        fprintf(stderr, "fogline generate: %s\n", L.error);
        goto out;
    }
    if (L.text.err || L.lp_lost) { /* the reply did not fit: never print a cut one */
        fprintf(stderr, "fogline generate: out of memory\n");
        goto out;
    }
    if (json) {
        json_t *o = json_object();
        json_object_set_new(o, "text", json_stringn(L.text.data ? L.text.data : "", L.text.len));
        json_t *ja = json_array();
        for (int32_t i = 0; i < L.n_ids; i++)
            json_array_append_new(ja, json_integer(L.ids[i]));
        json_object_set_new(o, "ids", ja);
        if (logprobs >= 0) { /* [{"logprob": x, "top": [[id, logprob], ...]}, ...] per id */
            json_t *lp = json_array();
            for (int32_t i = 0; i < L.n_lps; i++) {
                json_t *one = json_object(), *top = json_array();
                for (int32_t j = 0; j < L.n_top; j++) {
                    size_t at = (size_t)i * (size_t)L.n_top + (size_t)j;
                    json_t *pair = json_array();
                    json_array_append_new(pair, json_integer(L.top_ids[at]));
                    json_array_append_new(pair, json_real(L.top_lps[at]));
                    json_array_append_new(top, pair);
                }
                json_object_set_new(one, "logprob", json_real(L.lps[i]));
                json_object_set_new(one, "top", top);
                json_array_append_new(lp, one);
            }
            json_object_set_new(o, "logprobs", lp);
        }
        json_object_set_new(o, "finish", json_string(finish_name(L.finish)));
        /* vLLM's stop_reason: the --stop string that cut the reply, the --stop-token-ids id
           that ended it, else null (an end token of the model's, the length) */
        json_t *why = L.stop_string >= 0 && L.stop_string < g.n_stop ? json_string(g.stop[L.stop_string])
                      : NULL;
        json_object_set_new(o, "stop_reason", why ? why : L.stop_token >= 0 ? json_integer(L.stop_token)
                                                                          : json_null());
        json_object_set_new(o, "prompt_tokens", json_integer((json_int_t)n_ids));
        json_object_set_new(o, "weights", json_string(fl_wformat_name(b->weights)));
        json_object_set_new(o, "kv_format", json_string(fl_kvformat_name(b->kv)));
        json_t *st = json_object();
        json_object_set_new(st, "forwards", json_integer(L.st.forwards));
        json_object_set_new(st, "decode_forwards", json_integer(L.st.decode_forwards));
        json_object_set_new(st, "store_forwards", json_integer(L.st.store_forwards));
        json_object_set_new(st, "blocks", json_integer(L.st.blocks));
        json_object_set_new(st, "edits", json_integer(L.st.edits));
        json_object_set_new(st, "post_steps", json_integer(L.st.post_steps));
        if (cons)
            json_object_set_new(st, "constrained", json_integer(L.st.constrained));
        json_object_set_new(st, "tpf", json_real(L.st.tpf));
        json_object_set_new(st, "ms_prefill", json_real(L.st.ms_prefill));
        json_object_set_new(st, "ms_decode", json_real(L.st.ms_decode));
        json_object_set_new(st, "ms_total", json_real(L.st.ms_total));
        json_object_set_new(o, "stats", st);
        if (L.steps)
            json_object_set(o, "steps", L.steps);
        char *dump = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
        if (dump)
            puts(dump);
        free(dump);
        json_decref(o);
    } else if (L.visual) {
        /* the last frame: the whole reply, settled */
        fputs("\033[2J\033[H", stdout);
        fwrite(L.text.data ? L.text.data : "", 1, L.text.len, stdout);
        printf("\n\n\033[2m[%s · %d tokens · %d forwards · %d steps shown · %.2f tokens/forward]"
               "\033[0m\n", finish_name(L.finish), L.n_ids, L.st.forwards, L.n_frames, L.st.tpf);
    } else if (L.tty) {
        fputs("\0338\033[J", stdout);
        printf("\n\033[2m[%s · %d tokens · %d forwards · %.2f tokens/forward · %.0f ms]\033[0m\n",
               finish_name(L.finish), L.n_ids, L.st.forwards, L.st.tpf, L.st.ms_total);
    } else {
        fwrite(L.text.data ? L.text.data : "", 1, L.text.len, stdout);
        fputc('\n', stdout);
    }
    rc = 0;
out:
    fl_sched_destroy(s);
    fl_cons_unref(cons);
    fl_cons_cache_free(cc);
    free(schema_text);
    fl_backend_destroy(b);
    fl_model_free(m);
    free(ids);
    json_decref(jmsgs);
    fl_buf_free(&text);
    fl_buf_free(&L.committed);
    fl_buf_free(&L.text);
    free(L.ids);
    free(L.lps);
    free(L.top_ids);
    free(L.top_lps);
    free(L.error);
    json_decref(L.steps);
    fl_gen_opts_free(&g);
    return rc;
}
