/* placeholder until the bench command lands (replaced in this same change) */
#include <stdio.h>
#include "cli.h"
int fl_cmd_bench(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "fogline bench: not built yet\n");
    return 1;
}
