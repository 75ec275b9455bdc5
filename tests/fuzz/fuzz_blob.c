/* fuzz_blob.c: fl_blob_decode, the reader of KV pages that come back from a tier (a file, the
 * host tier, Redis): untrusted bytes. The model is fixed and small (fuzz_blob.h). Each input is
 * tried twice: as a whole blob, and as a patch (XORed from an offset given by its first two
 * bytes, length cut by the third) over a valid blob that fl_blob_encode wrote at start-up.
 * Checks: an error carries a message; a length other than fl_blob_size is refused; an accepted
 * blob decodes to tokens and a page that encode and decode reproduce (bit for bit, NaNs aside);
 * the unpatched blob is accepted and gives back what was encoded. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_blob.h"
#include "fuzz_common.h"

static fl_config cfg;
static size_t blob_len, nf;
static unsigned char *good;     /* (blob_len) a valid blob */
static int32_t good_tokens[4];  /* (block_size) */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    cfg = fz_blob_config();
    blob_len = fl_blob_size(&cfg);
    nf = fz_blob_page_floats(&cfg);
    float *page = malloc(nf * sizeof *page);
    good = malloc(blob_len);
    FZ_CHECK(page && good, "out of memory");
    for (size_t i = 0; i < nf; i++)
        page[i] = (float)i * 0.25f - 3.0f; /* exact in bf16 */
    for (int i = 0; i < cfg.block_size; i++)
        good_tokens[i] = 7 * i + 1;
    fl_err e = {0};
    FZ_CHECK(fl_blob_encode(&cfg, FZ_BLOB_MODEL_ID, fz_blob_key, good_tokens, page, good,
                            blob_len, &e) == 0,
             "encode: %s", e.msg);
    /* the baseline: a valid blob must decode to what went in */
    int32_t tok[4];
    float *back = malloc(nf * sizeof *back);
    FZ_CHECK(back, "out of memory");
    FZ_CHECK(fl_blob_decode(&cfg, FZ_BLOB_MODEL_ID, fz_blob_key, good, blob_len, tok, back, &e) ==
                 0,
             "a freshly encoded blob is refused: %s", e.msg);
    FZ_CHECK(!memcmp(tok, good_tokens, sizeof tok) && !memcmp(back, page, nf * sizeof *page),
             "a freshly encoded blob decodes to something else");
    free(back);
    free(page);
    return 0;
}

static bool same_float(float a, float b)
{
    return (isnan(a) && isnan(b)) || !memcmp(&a, &b, sizeof a);
}

/* Decodes blob (exactly n bytes, in its own allocation so ASan sees any read past it). */
static void try_decode(const unsigned char *blob, size_t n)
{
    unsigned char *copy = malloc(n ? n : 1);
    int32_t *tokens = malloc((size_t)cfg.block_size * sizeof *tokens);
    float *page = malloc(nf * sizeof *page);
    FZ_CHECK(copy && tokens && page, "out of memory");
    if (n)
        memcpy(copy, blob, n);
    fl_err e = {0};
    int rc = fl_blob_decode(&cfg, FZ_BLOB_MODEL_ID, fz_blob_key, copy, n, tokens, page, &e);
    fz_check_err(rc, &e, "fl_blob_decode");
    FZ_CHECK(rc <= 0, "fl_blob_decode returned %d", rc);
    if (n != blob_len)
        FZ_CHECK(rc < 0, "a %zu-byte blob was accepted (the size is %zu)", n, blob_len);
    if (rc == 0) {
        /* what was accepted must be what encode would have written for it */
        unsigned char *again = malloc(blob_len);
        int32_t *t2 = malloc((size_t)cfg.block_size * sizeof *t2);
        float *p2 = malloc(nf * sizeof *p2);
        FZ_CHECK(again && t2 && p2, "out of memory");
        FZ_CHECK(fl_blob_encode(&cfg, FZ_BLOB_MODEL_ID, fz_blob_key, tokens, page, again, blob_len,
                                &e) == 0,
                 "re-encode: %s", e.msg);
        FZ_CHECK(fl_blob_decode(&cfg, FZ_BLOB_MODEL_ID, fz_blob_key, again, blob_len, t2, p2, &e) ==
                     0,
                 "a re-encoded accepted blob is refused: %s", e.msg);
        FZ_CHECK(!memcmp(t2, tokens, (size_t)cfg.block_size * sizeof *t2),
                 "tokens change through encode+decode");
        for (size_t i = 0; i < nf; i++)
            FZ_CHECK(same_float(p2[i], page[i]), "page[%zu] %a becomes %a", i, (double)page[i],
                     (double)p2[i]);
        free(again);
        free(t2);
        free(p2);
    }
    free(copy);
    free(tokens);
    free(page);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    try_decode(data, size);
    if (size < 3)
        return 0;
    /* a patch over the valid blob: offset, then a length cut (0: keep the size) */
    size_t off = ((size_t)data[0] | (size_t)data[1] << 8) % blob_len;
    size_t cut = data[2];
    unsigned char *b = malloc(blob_len);
    FZ_CHECK(b != NULL, "out of memory");
    memcpy(b, good, blob_len);
    bool changed = false;
    for (size_t i = 3; i < size && off + i - 3 < blob_len; i++) {
        b[off + i - 3] ^= data[i];
        changed |= data[i] != 0;
    }
    size_t n = cut ? (cut < 128 ? blob_len - (cut % blob_len) : blob_len + (cut - 127)) : blob_len;
    if (n > blob_len) {
        unsigned char *g = realloc(b, n);
        FZ_CHECK(g != NULL, "out of memory");
        b = g;
        memset(b + blob_len, 0xa5, n - blob_len);
    }
    try_decode(b, n);
    if (!changed && n == blob_len) {
        int32_t t[4];
        float *p = malloc(nf * sizeof *p);
        fl_err e = {0};
        FZ_CHECK(p && fl_blob_decode(&cfg, FZ_BLOB_MODEL_ID, fz_blob_key, b, n, t, p, &e) == 0,
                 "the unpatched blob is refused: %s", e.msg);
        FZ_CHECK(!memcmp(t, good_tokens, sizeof t), "the unpatched blob lost its tokens");
        free(p);
    }
    free(b);
    return 0;
}
