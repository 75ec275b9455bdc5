/* placeholder until the info command lands (replaced in this same change) */
#include <stdio.h>
#include "cli.h"
int fl_cmd_info(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "fogline info: not built yet\n");
    return 1;
}
