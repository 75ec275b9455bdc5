/* tokenizer.h: Hugging Face tokenizer.json byte-level BPE (Qwen2/Qwen3 and our own models),
 * the chat template from tokenizer_config.json / chat_template.jinja, and a streaming
 * detokenizer that only ever emits whole UTF-8 characters. */
#ifndef FL_TOKENIZER_H
#define FL_TOKENIZER_H

#include "fl.h"

typedef struct fl_tokenizer fl_tokenizer;

typedef enum fl_chat_kind {
    FL_CHAT_NONE = 0,
    FL_CHAT_CHATML,  /* Qwen2.5 / Fast-dLLM v2: default system prompt when none given */
    FL_CHAT_QWEN3,   /* Qwen3 / SDAR: <think> handling, enable_thinking */
    FL_CHAT_FOGLINE, /* our default model */
} fl_chat_kind;

/* Loads dir/tokenizer.json and dir/tokenizer_config.json (and dir/chat_template.jinja when
 * present). chat_override: NULL to recognise the template, else "chatml"/"qwen3"/"fogline". */
int fl_tokenizer_load(fl_tokenizer **out, const char *dir, const char *chat_override, fl_err *e);
void fl_tokenizer_free(fl_tokenizer *t);

/* Encodes UTF-8 text. Added tokens are matched first (special ones only when
 * parse_special). Invalid UTF-8 bytes are each replaced by U+FFFD before normalisation
 * (the documented rule; Hugging Face's Rust strings cannot hold them either).
 * *ids is malloc'd, owned by the caller. */
int fl_tokenizer_encode(const fl_tokenizer *t, const char *text, size_t len, bool parse_special,
                        int32_t **ids, size_t *n, fl_err *e);
/* Decodes ids into UTF-8 (byte-level inverse; invalid sequences become U+FFFD as Hugging
 * Face's decoder does). skip_special drops special added tokens. */
int fl_tokenizer_decode(const fl_tokenizer *t, const int32_t *ids, size_t n, bool skip_special,
                        fl_buf *out, fl_err *e);

int fl_tokenizer_vocab_size(const fl_tokenizer *t);      /* highest id + 1 */
int fl_tokenizer_find(const fl_tokenizer *t, const char *token); /* id or -1 */
const char *fl_tokenizer_token(const fl_tokenizer *t, int id);   /* raw token string or NULL */
bool fl_tokenizer_is_special(const fl_tokenizer *t, int id);
/* Bytes a single id decodes to (byte-level inverse); *len set. NULL for unknown id. */
const unsigned char *fl_tokenizer_token_bytes(const fl_tokenizer *t, int id, size_t *len);

/* Chat templates. */
typedef struct fl_chat_msg {
    const char *role;    /* "system" | "user" | "assistant" */
    const char *content;
} fl_chat_msg;

typedef struct fl_chat_opts {
    bool add_generation_prompt;
    bool enable_thinking; /* Qwen3: false adds the empty think block, as its template does */
} fl_chat_opts;

fl_chat_kind fl_tokenizer_chat_kind(const fl_tokenizer *t);
const char *fl_chat_kind_name(fl_chat_kind k);
/* Renders msgs with the tokenizer's template into out (appends). Errors on a role the
 * template does not know. */
int fl_chat_render(const fl_tokenizer *t, const fl_chat_msg *msgs, size_t n,
                   const fl_chat_opts *opts, fl_buf *out, fl_err *e);
/* Recognises a Jinja chat template text; FL_CHAT_NONE when unknown. */
fl_chat_kind fl_chat_detect(const char *jinja);

/* Streaming detokenizer: feed ids one at a time (committed tokens, in order); it appends to
 * out only complete UTF-8 characters, holding back a partial one until it completes. */
typedef struct fl_detok {
    const fl_tokenizer *t;
    unsigned char pend[8];
    int npend;
    bool skip_special;
} fl_detok;
void fl_detok_init(fl_detok *d, const fl_tokenizer *t, bool skip_special);
int fl_detok_push(fl_detok *d, int32_t id, fl_buf *out);
/* Flushes what is held back (as U+FFFD for an incomplete sequence). */
int fl_detok_finish(fl_detok *d, fl_buf *out);

#endif
