/* placeholder until the forward benchmark lands (replaced in this same change) */
#include <stdio.h>
#include "cli.h"
int fl_bench_forward(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "fogline bench forward: not built yet\n");
    return 1;
}
