/* bench_main.c: `fogline_bench decode|parallel ARGS`: the server's `fogline bench decode` and
 * `fogline bench parallel` (server/bench/bench_decode.c, bench_parallel.c, the same sources)
 * in a program that needs only the engine, for the GPU machine, which may lack libwebsockets,
 * libuv and hiredis (tests/gpu/CMakeLists.txt). Pass --device cuda to run on the GPU. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "decode"))
        return fl_bench_decode(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "parallel"))
        return fl_bench_parallel(argc - 1, argv + 1);
    fprintf(stderr, "usage: fogline_bench decode|parallel [--device cuda] [options]\n");
    return 2;
}
