/* fuzz_tokenize.c: the default model's tokenizer on arbitrary bytes, ill-formed UTF-8 and
 * special-token text included. Checks (fuzz_common.c): every id is a token; decode gives valid
 * UTF-8 and agrees with the streaming detokenizer; ill-formed input encodes exactly like its
 * U+FFFD repair; NFC text survives encode+decode byte for byte. Without parse_special no
 * special token may appear. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"

static fl_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    tok = fz_load_tokenizer(NULL);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int rc = fz_tokenize_roundtrip(tok, (const char *)data, size);
    FZ_CHECK(rc == 0, "encode failed on %zu bytes (any bytes must encode)", size);

    int32_t *ids = NULL;
    size_t n = 0;
    fl_err e = {0};
    rc = fl_tokenizer_encode(tok, (const char *)data, size, false, &ids, &n, &e);
    fz_check_err(rc, &e, "fl_tokenizer_encode(parse_special=false)");
    FZ_CHECK(rc == 0, "encode without special tokens failed: %s", e.msg);
    for (size_t i = 0; i < n; i++)
        FZ_CHECK(!fl_tokenizer_is_special(tok, ids[i]),
                 "special token %d produced with parse_special off", ids[i]);
    free(ids);
    return 0;
}
