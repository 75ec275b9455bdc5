/* qmodel_seed.c: writes fuzz_qmodel's seeds into DIR (argv[1]): for each config byte (q8, q4,
 * q8 tied, q4 tied, float), that byte followed by the tiny model's model.safetensors as
 * tests/unit/test_loader_kit.h writes it for that config. fuzz.qmodel runs it before each
 * run, so the seeds stay valid whatever the kit or the loader become; the quantized ones are
 * also committed in corpus/qmodel (with hand-made near-valid variants: bad_*.bin). */
#include <stdio.h>
#include <stdlib.h>

#include "test_loader_kit.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: qmodel_seed DIR\n");
        return 2;
    }
    static const struct {
        int quant;
        bool tie;
        const char *name;
    } seeds[5] = {{8, false, "q8.bin"}, {4, false, "q4.bin"}, {8, true, "q8_tied.bin"},
                  {4, true, "q4_tied.bin"}, {0, false, "float.bin"}};
    for (int b = 0; b < 5; b++) {
        tk_st s;
        tk_st_init(&s);
        tk_qtiny_tensors(&s, seeds[b].quant, 64, seeds[b].tie);
        char tmp[TK_PATH], out[TK_PATH];
        tk_path(tmp, argv[1], "qmodel_seed.tmp");
        tk_path(out, argv[1], seeds[b].name);
        char *file = NULL;
        size_t len = 0;
        int rc = tk_st_write(&s, tmp) || fl_read_file(tmp, &file, &len, NULL);
        tk_st_free(&s);
        unsigned char *seed = rc ? NULL : malloc(len + 1);
        if (seed) {
            seed[0] = (unsigned char)b; /* fuzz_qmodel's config byte */
            memcpy(seed + 1, file, len);
            rc = tk_write(out, seed, len + 1);
        }
        remove(tmp);
        free(file);
        free(seed);
        if (rc || !seed) {
            fprintf(stderr, "qmodel_seed: cannot write %s\n", out);
            return 1;
        }
    }
    return 0;
}
