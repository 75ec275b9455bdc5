/* tokenizer.h: Hugging Face tokenizer.json byte-level BPE (Qwen2/Qwen3 and our own models),
 * the chat template from tokenizer_config.json / chat_template.jinja, and a streaming
 * detokenizer that only ever emits whole UTF-8 characters. docs/tokenizer.md has the details.
 * A loaded tokenizer may be used from several threads at once (encode keeps its scratch and
 * word cache in per-tokenizer slots, each behind its own lock). */
#ifndef FL_TOKENIZER_H
#define FL_TOKENIZER_H

#include "fl.h"

typedef struct fl_tokenizer fl_tokenizer;

typedef enum fl_chat_kind {
    FL_CHAT_NONE = 0,
    FL_CHAT_CHATML,  /* Qwen2.5 / Fast-dLLM v2: default system prompt when none given */
    FL_CHAT_QWEN3,   /* Qwen3 / SDAR: <think> handling, enable_thinking */
    FL_CHAT_FOGLINE, /* our default model */
    FL_CHAT_LING,    /* LLaDA2.0/2.1 and Ling 2.0: <role>…</role>, tools, observations */
} fl_chat_kind;

/* Loads dir/tokenizer.json and dir/tokenizer_config.json (and dir/chat_template.jinja when
 * present). chat_override: NULL to recognise the template, else "chatml"/"qwen3"/"fogline"/"ling". */
int fl_tokenizer_load(fl_tokenizer **out, const char *dir, const char *chat_override, fl_err *e);
void fl_tokenizer_free(fl_tokenizer *t);

/* Encodes UTF-8 text. Added tokens are matched first (special ones only when
 * parse_special). Invalid UTF-8 bytes are each replaced by U+FFFD before normalisation
 * (the documented rule; Hugging Face's Rust strings cannot hold them either): precisely, each
 * maximal subpart of an invalid sequence becomes one U+FFFD (Unicode's "substitution of maximal
 * subparts", as WHATWG's TextDecoder and Rust's from_utf8_lossy do): "a\x80b" -> "a\uFFFDb",
 * a truncated "\xE2\x82" -> one U+FFFD, "\xED\xA0\x80" (a surrogate) or "\xC0\xAF" (overlong)
 * -> one U+FFFD per byte. No BOS/EOS is added (post_processor is not applied).
 * *ids is malloc'd (also when *n is 0), owned by the caller. */
int fl_tokenizer_encode(const fl_tokenizer *t, const char *text, size_t len, bool parse_special,
                        int32_t **ids, size_t *n, fl_err *e);
/* Decodes ids into UTF-8 (byte-level inverse; invalid sequences become U+FFFD as Hugging
 * Face's decoder does). skip_special drops special added tokens. Added tokens are written as
 * their text; ids with no token (negative, too large, a gap) are skipped, as the references do.
 * Appends to out and keeps it NUL-terminated. */
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
    const char *role;    /* "system" | "user" | "assistant" (| "tool": ling) */
    const char *content;
} fl_chat_msg;

typedef struct fl_chat_opts {
    bool add_generation_prompt;
    bool enable_thinking; /* Qwen3: false adds the empty think block, as its template does
                           * (so a zeroed fl_chat_opts turns thinking off; the template's own
                           * default, enable_thinking undefined, is true). Ling: no effect, its
                           * template always writes "detailed thinking off" */
} fl_chat_opts;

fl_chat_kind fl_tokenizer_chat_kind(const fl_tokenizer *t);
const char *fl_chat_kind_name(fl_chat_kind k);
/* Renders msgs with the tokenizer's template into out (appends; nothing on an error). Errors
 * on a role the template does not know, on tool messages (except ling), on an empty
 * conversation, and (FL_ESTATE) when the model has no chat template. opts NULL: {false, true}. */
int fl_chat_render(const fl_tokenizer *t, const fl_chat_msg *msgs, size_t n,
                   const fl_chat_opts *opts, fl_buf *out, fl_err *e);

/* What a template may render beyond roles and contents: tool definitions, an assistant's tool
 * calls and its reasoning given apart from its content. JSON values travel as their text.
 * The renderers of templates with tools take them (fl_chat_takes_tools); the others refuse
 * any that is set. */
typedef struct fl_chat_extra {
    const char *tools;                    /* a JSON array of tool definitions, or NULL */
    const char *const *tool_calls;        /* NULL, or (n msgs): a JSON array text or NULL each */
    const char *const *reasoning_content; /* NULL, or (n msgs): a string or NULL each */
} fl_chat_extra;
/* fl_chat_render with extra (NULL: none). The ling renderer reproduces its template's `tojson`
 * only where Python's json.dumps and @huggingface/jinja agree: numbers with a fraction or an
 * exponent or beyond 2^53, duplicate keys, and objects whose integer-like keys JavaScript
 * would reorder are refused (FL_EUNSUPPORTED). */
int fl_chat_render_extra(const fl_tokenizer *t, const fl_chat_msg *msgs, size_t n,
                         const fl_chat_opts *opts, const fl_chat_extra *extra, fl_buf *out,
                         fl_err *e);
/* Whether the model's chat template writes tools, tool calls and tool results (Ling's; Qwen2.5's
 * and Qwen3's when the template has their tool syntax): fl_chat_render_extra takes them then. */
bool fl_chat_takes_tools(const fl_tokenizer *t);
/* Recognises a Jinja chat template text; FL_CHAT_NONE when unknown. */
fl_chat_kind fl_chat_detect(const char *jinja);

/* Streaming detokenizer: feed ids one at a time (committed tokens, in order); it appends to
 * out only complete UTF-8 characters, holding back a partial one until it completes. Bytes
 * that cannot complete become U+FFFD at once; a partial character before an added token is
 * flushed as U+FFFD. Pushing all ids then finishing gives exactly fl_tokenizer_decode's text. */
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
