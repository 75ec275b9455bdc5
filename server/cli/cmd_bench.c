/* cmd_bench.c: `fogline bench <what>`: benchmarks that print side-by-side ratios. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: fogline bench <benchmark> [options]   (fogline bench <benchmark> --help)\n\n"
               "benchmarks:\n"
               "  tokenizer  encode throughput vs the Hugging Face reference, same input, same run\n"
               "  forward    step time at blocks of 4/8/32 vs the PyTorch reference and sgemm\n"
               "  decode     what decode-store overlap, pipelining, async persistence and batching buy\n"
               "  parallel   fan-out (segments at once, shared prefix) vs the same segments in turn\n"
               "  load       WebSocket clients against a running server: errors, tokens/s, first draft\n");
}

int fl_cmd_bench(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "tokenizer"))
        return fl_bench_tokenizer(argc - 1, argv + 1);
    if (!strcmp(argv[1], "decode"))
        return fl_bench_decode(argc - 1, argv + 1);
    if (!strcmp(argv[1], "parallel"))
        return fl_bench_parallel(argc - 1, argv + 1);
    if (!strcmp(argv[1], "load"))
        return fl_bench_ws_load(argc - 1, argv + 1);
    if (!strcmp(argv[1], "forward"))
        return fl_bench_forward(argc - 1, argv + 1);
    fprintf(stderr, "fogline bench: unknown benchmark '%s' (try 'fogline bench --help')\n", argv[1]);
    return 2;
}
