/* fuzz_common.h: what the libFuzzer targets in tests/fuzz share: where the default model is,
 * a reference UTF-8 check written independently of the ones under test, and the checks that
 * turn a broken property into a crash libFuzzer can record (an error return is not a crash;
 * a wrong answer must be). */
#ifndef FL_FUZZ_COMMON_H
#define FL_FUZZ_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fl.h"
#include "tokenizer/tokenizer.h"

/* libFuzzer's entry points, declared here so -Wmissing-prototypes style checks stay quiet. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A broken property: prints what and where, then aborts so libFuzzer saves the input. */
#define FZ_CHECK(cond, ...)                                                                      \
    do {                                                                                         \
        if (!(cond))                                                                             \
            fz_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);                                     \
    } while (0)
_Noreturn void fz_fail(const char *file, int line, const char *cond, const char *fmt, ...)
    FL_PRINTF(4, 5);

/* Equal byte strings; either pointer may be NULL when its length is 0 (an empty fl_buf). */
bool fz_same(const void *a, size_t na, const void *b, size_t nb);

/* An error return must carry a user message (STYLE.md): a code without one is a bug too. */
void fz_check_err(int rc, const fl_err *e, const char *what);

/* The default model's directory: $FL_FUZZ_MODEL_DIR, else the FL_FUZZ_MODEL_DIR compile
 * definition (the source tree's engine/models/fogline-helpdesk). */
const char *fz_model_dir(void);
/* Loads the default model's tokenizer (chat_override as fl_tokenizer_load takes it) or exits
 * with a message: a setup failure, not a finding. */
fl_tokenizer *fz_load_tokenizer(const char *chat_override);

/* Well-formed UTF-8 by Unicode's table 3-7 (byte ranges per position), deliberately not the
 * decode-and-compare method the engine and server use, so the two can be checked against each
 * other. */
bool fz_utf8_ok(const unsigned char *s, size_t n);
/* Appends s to out with every maximal subpart of an ill-formed sequence replaced by U+FFFD
 * (the same table; out is NUL-terminated, also when empty). */
void fz_utf8_repair(const unsigned char *s, size_t n, fl_buf *out);

/* Encodes text (parse_special), checks every id is a token, decodes it back and checks the
 * text is valid UTF-8, that the streaming detokenizer gives the same text, and, when text is
 * valid UTF-8 and already NFC (so the NFC normalizer leaves it alone), that it comes back
 * byte for byte. Returns the encode's rc (errors are checked for a message). */
int fz_tokenize_roundtrip(const fl_tokenizer *t, const char *text, size_t len);

/* Decodes ids both ways (fl_tokenizer_decode, fl_detok one id at a time) with skip_special
 * false and true, and checks the two agree and the text is valid UTF-8. */
void fz_decode_agree(const fl_tokenizer *t, const int32_t *ids, size_t n);

#endif
