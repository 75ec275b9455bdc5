/* placeholder until the tokenizer lands (replaced in this same change) */
#include "tokenizer.h"
int fl_tokenizer_load(fl_tokenizer **out, const char *dir, const char *chat_override, fl_err *e)
{
    (void)dir;
    (void)chat_override;
    *out = NULL;
    return fl_err_set(e, FL_EUNSUPPORTED, "tokenizer not built yet");
}
void fl_tokenizer_free(fl_tokenizer *t) { (void)t; }
