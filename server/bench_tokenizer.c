/* placeholder until the tokenizer benchmark lands (replaced in this same change) */
#include <stdio.h>
#include "cli.h"
int fl_bench_tokenizer(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "fogline bench tokenizer: not built yet\n");
    return 1;
}
