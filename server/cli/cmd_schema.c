/* cmd_schema.c: `fogline schema`: what a response constraint compiles to (docs/structured.md).
 * Checks a JSON schema against the supported subset (a one-line error naming the keyword and
 * where it is), says how large its automaton is and how short a valid reply can be, prints
 * random texts the constraint accepts, and says of given texts whether it accepts them. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "constrain.h"
#include "gen_opts.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: fogline schema (--schema FILE | --json-object | --regex PATTERN) [options]\n\n"
               "Compiles a response constraint as the server does and prints one JSON line:\n"
               "{\"states\": N, \"min_bytes\": N}. FILE holds a JSON schema ('-' = stdin).\n\n"
               "  --schema FILE        a JSON schema (OpenAI's strict subset, docs/structured.md)\n"
               "  --json-object        any JSON object (response_format json_object)\n"
               "  --regex PATTERN      texts the whole of which match it (structured_outputs regex)\n"
               "  --sample N           then N random texts it accepts, one JSON string per line\n"
               "  --seed N             their seed (default 1)\n"
               "  --max-bytes N        each at most N bytes (default 2000)\n"
               "  --max-ws N           whitespace between two JSON tokens at most N bytes (0: any)\n"
               "  --match              then read one JSON string per line on stdin and print\n"
               "                       true or false: whether the constraint accepts it\n");
}

int fl_cmd_schema(int argc, char **argv)
{
    const char *file = NULL, *regex = NULL;
    bool object = false, match = false;
    long n_sample = 0, seed = 1, max_bytes = 2000, max_ws = 0;
    enum { O_SCHEMA = 1000, O_OBJECT, O_SAMPLE, O_SEED, O_MAX, O_MATCH, O_HELP, O_WS, O_REGEX };
    static const struct option opts[] = {
        {"schema", required_argument, 0, O_SCHEMA}, {"json-object", no_argument, 0, O_OBJECT},
        {"sample", required_argument, 0, O_SAMPLE}, {"seed", required_argument, 0, O_SEED},
        {"max-bytes", required_argument, 0, O_MAX}, {"match", no_argument, 0, O_MATCH},
        {"help", no_argument, 0, O_HELP},           {"max-ws", required_argument, 0, O_WS},
        {"regex", required_argument, 0, O_REGEX},
        {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        long *num = c == O_SAMPLE ? &n_sample : c == O_SEED ? &seed : c == O_MAX ? &max_bytes
                  : c == O_WS     ? &max_ws
                                  : NULL;
        long hi = c == O_SAMPLE ? 1000000 : c == O_SEED ? 0x7fffffffL : c == O_WS ? 64 : 1 << 24;
        switch (c) {
        case O_SCHEMA: file = optarg; break;
        case O_OBJECT: object = true; break;
        case O_REGEX: regex = optarg; break;
        case O_MATCH: match = true; break;
        case O_HELP: usage(stdout); return 0;
        case O_SAMPLE:
        case O_SEED:
        case O_MAX:
        case O_WS:
            if (fl_parse_long(optarg, c == O_MAX ? 1 : 0, hi, num)) {
                fprintf(stderr, "fogline schema: --%s needs an integer in [%d, %ld], got '%s'\n",
                        c == O_SAMPLE ? "sample" : c == O_SEED ? "seed" : c == O_WS ? "max-ws"
                                                                           : "max-bytes",
                        c == O_MAX ? 1 : 0, hi, optarg);
                return 2;
            }
            break;
        default:
            fprintf(stderr, "fogline schema: unknown or incomplete option '%s' (try --help)\n",
                    argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "fogline schema: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!!file + object + !!regex != 1) {
        fprintf(stderr, "fogline schema: give one of --schema FILE, --json-object, --regex\n");
        return 2;
    }
    if (match && file && !strcmp(file, "-")) {
        fprintf(stderr, "fogline schema: --match reads stdin; give the schema as a file\n");
        return 2;
    }
    json_t *schema = NULL;
    if (file) {
        json_error_t je;
        schema = !strcmp(file, "-") ? json_loadf(stdin, JSON_DECODE_ANY, &je)
                                    : json_load_file(file, JSON_DECODE_ANY, &je);
        if (!schema) {
            fprintf(stderr, "fogline schema: %s: line %d: %s\n", file, je.line, je.text);
            return 1;
        }
    }
    fl_err e = {0};
    fl_dfa *d = NULL;
    fl_constrain_opts co = {.max_ws = (int32_t)max_ws};
    int rc = object  ? fl_dfa_json_object(&co, &d, &e)
             : regex ? fl_dfa_from_regex(regex, &co, &d, &e)
                     : fl_dfa_from_schema(schema, &co, &d, &e);
    json_decref(schema);
    if (rc) {
        fprintf(stderr, "fogline schema: %s\n", e.msg);
        return 1;
    }
    printf("{\"states\": %d, \"min_bytes\": %d}\n", d->n, d->dist[0]);
    uint64_t rng = (uint64_t)seed;
    fl_buf b = {0};
    for (long i = 0; i < n_sample; i++) {
        b.len = 0;
        if (fl_dfa_sample(d, &rng, (int32_t)max_bytes, &b)) {
            fprintf(stderr, "fogline schema: no text of at most %ld bytes is accepted (the "
                            "shortest has %d)\n", max_bytes, d->dist[0]);
            rc = 1;
            break;
        }
        json_t *s = json_stringn(b.data ? b.data : "", b.len);
        char *out = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
        json_decref(s);
        if (!out) { /* the sampler writes valid UTF-8 only; this is out of memory */
            fprintf(stderr, "fogline schema: out of memory\n");
            rc = 1;
            break;
        }
        puts(out);
        free(out);
    }
    fl_buf_free(&b);
    if (match && !rc) {
        char *line = NULL;
        size_t cap = 0;
        ssize_t n;
        for (long ln = 1; (n = getline(&line, &cap, stdin)) > 0; ln++) {
            json_error_t je;
            json_t *s = json_loadb(line, (size_t)n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
            if (!json_is_string(s)) {
                fprintf(stderr, "fogline schema: stdin line %ld: not a JSON string\n", ln);
                json_decref(s);
                rc = 1;
                break;
            }
            int32_t st = fl_dfa_walk(d, 0, json_string_value(s), json_string_length(s));
            puts(st >= 0 && d->accept[st] ? "true" : "false");
            json_decref(s);
        }
        free(line);
    }
    fl_dfa_free(d);
    return rc;
}
