/* placeholder until the tokenize command lands (replaced in this same change) */
#include <stdio.h>
#include "cli.h"
int fl_cmd_tokenize(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "fogline tokenize: not built yet\n");
    return 1;
}
