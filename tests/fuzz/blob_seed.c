/* blob_seed.c: writes valid KV page blobs for fuzz_blob's corpus into DIR (argv[1]): the blob
 * format belongs to persist.c and may change, so the seeds are made by today's fl_blob_encode
 * at test time rather than committed. Pages: zeros, a ramp, and one with inf, -0 and NaN. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_blob.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: blob_seed DIR\n");
        return 2;
    }
    fl_config c = fz_blob_config();
    size_t len = fl_blob_size(&c), nf = fz_blob_page_floats(&c);
    unsigned char *blob = malloc(len);
    float *page = malloc(nf * sizeof *page);
    if (!blob || !page)
        return 1;
    for (int k = 0; k < 3; k++) {
        int32_t tokens[4] = {k, 1, 2, 63};
        for (size_t i = 0; i < nf; i++)
            page[i] = k == 0 ? 0.0f : k == 1 ? (float)i / 8.0f - 8.0f
                                    : (i % 3 == 0 ? INFINITY : i % 3 == 1 ? -0.0f : NAN);
        fl_err e = {0};
        if (fl_blob_encode(&c, FZ_BLOB_MODEL_ID, fz_blob_key, tokens, page, blob, len, &e)) {
            fprintf(stderr, "blob_seed: %s\n", e.msg);
            return 1;
        }
        char path[4200];
        snprintf(path, sizeof path, "%s/valid_%d.blob", argv[1], k);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(blob, 1, len, f) != len || fclose(f)) {
            perror(path);
            return 1;
        }
    }
    free(blob);
    free(page);
    return 0;
}
