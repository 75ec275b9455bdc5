/* main.c: the fogline binary and its subcommands. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} cmds[] = {
    {"serve", fl_cmd_serve, "the server: WebSocket streaming, OpenAI-compatible HTTP, metrics"},
    {"generate", fl_cmd_generate, "one reply, live in the terminal or --json"},
    {"info", fl_cmd_info, "what a model directory holds (no weights loaded for compute)"},
    {"quantize", fl_cmd_quantize, "a q8 or q4 copy of a float model directory"},
    {"tokenize", fl_cmd_tokenize, "encode/decode text, render chat templates (tokenizer files only)"},
    {"bench", fl_cmd_bench, "benchmarks that print side-by-side ratios"},
    {"schema", fl_cmd_schema, "check a JSON schema for response_format, sample and match texts"},
};

static void usage(FILE *f)
{
    fprintf(f, "fogline %s: a block-diffusion language model server\n\n"
               "usage: fogline <command> [options]   (fogline <command> --help)\n\ncommands:\n",
            FL_VERSION);
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        fprintf(f, "  %-10s %s\n", cmds[i].name, cmds[i].help);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("fogline %s\n", FL_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(argv[1], cmds[i].name))
            return cmds[i].run(argc - 1, argv + 1);
    fprintf(stderr, "fogline: unknown command '%s' (try 'fogline --help')\n", argv[1]);
    return 2;
}
