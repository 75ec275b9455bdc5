/* fuzz_detok.c: decoding and the streaming detokenizer on arbitrary id sequences. The input
 * is read 4 bytes at a time: with the top bit clear an id is taken modulo vocab + 4 (real
 * tokens, mostly, and a few just past the end), with it set the raw int32 (negative and huge
 * ids). Checks: decode is valid UTF-8 and equals the streaming detokenizer (fuzz_common.c);
 * ids with no token are skipped, so dropping them changes nothing; and the text is exactly the
 * tokens' bytes concatenated with ill-formed sequences repaired (documented in tokenizer.h). */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"

static fl_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    tok = fz_load_tokenizer(NULL);
    return 0;
}

static bool decode_eq(const int32_t *a, size_t na, const int32_t *b, size_t nb, bool skip)
{
    fl_buf x = {0}, y = {0};
    fl_err e = {0};
    FZ_CHECK(fl_tokenizer_decode(tok, a, na, skip, &x, &e) == 0, "decode: %s", e.msg);
    FZ_CHECK(fl_tokenizer_decode(tok, b, nb, skip, &y, &e) == 0, "decode: %s", e.msg);
    bool eq = fz_same(x.data, x.len, y.data, y.len);
    fl_buf_free(&x);
    fl_buf_free(&y);
    return eq;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t n = size / 4;
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids), *known = malloc((n ? n : 1) * sizeof *ids);
    FZ_CHECK(ids && known, "out of memory");
    uint32_t span = (uint32_t)fl_tokenizer_vocab_size(tok) + 4u;
    size_t nk = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)data[4 * i] | (uint32_t)data[4 * i + 1] << 8 |
                     (uint32_t)data[4 * i + 2] << 16 | (uint32_t)data[4 * i + 3] << 24;
        int32_t id;
        if (u & 0x80000000u)
            memcpy(&id, &u, sizeof id);
        else
            id = (int32_t)(u % span);
        ids[i] = id;
        if (fl_tokenizer_token(tok, id))
            known[nk++] = id;
        else
            FZ_CHECK(fl_tokenizer_token_bytes(tok, id, &(size_t){0}) == NULL,
                     "id %d has bytes but no token", id);
    }
    fz_decode_agree(tok, ids, n);
    FZ_CHECK(decode_eq(ids, n, known, nk, false), "ids with no token were not skipped");
    FZ_CHECK(decode_eq(ids, n, known, nk, true), "ids with no token were not skipped (skip)");

    /* the byte-level inverse, by hand: concatenate each token's bytes, repair at the end */
    fl_buf raw = {0}, want = {0}, got = {0};
    for (size_t i = 0; i < nk; i++) {
        size_t len = 0;
        const unsigned char *b = fl_tokenizer_token_bytes(tok, known[i], &len);
        FZ_CHECK(b != NULL, "token %d has no bytes", known[i]);
        FZ_CHECK(!fl_buf_append(&raw, b, len), "out of memory");
    }
    fz_utf8_repair((const unsigned char *)raw.data, raw.len, &want);
    fl_err e = {0};
    FZ_CHECK(fl_tokenizer_decode(tok, ids, n, false, &got, &e) == 0, "decode: %s", e.msg);
    FZ_CHECK(fz_same(got.data, got.len, want.data, want.len),
             "decode (%zu bytes) is not the tokens' bytes repaired (%zu bytes)", got.len,
             want.len);
    fl_buf_free(&raw);
    fl_buf_free(&want);
    fl_buf_free(&got);
    free(ids);
    free(known);
    return 0;
}
