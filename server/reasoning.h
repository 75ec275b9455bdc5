/* reasoning.h: splitting a reply into its reasoning (<think>...</think>) and its answer, on the
 * committed text stream, for models whose chat template has think blocks (Qwen3's). Pure: no
 * sockets, no engine; the server keeps one srv_reason per request and feeds it each commit's
 * text, so that a tag cut across commits (or tokens) never leaks into either part.
 *
 * The rule (docs/protocol.md, "Reasoning"):
 * - A reply that begins with <think> (after newlines only) is reasoning up to the first
 *   </think>, the answer after it. With no </think> by the end (cut by max_tokens or a stop)
 *   it is all reasoning.
 * - A prompt that ends inside an open think block (the template opened it) starts the reply in
 *   reasoning: text up to a </think> is reasoning although the reply has no <think>.
 * - Otherwise the reply is all answer; tags in it stay as written. (vLLM's qwen3 parser also
 *   needs the opening tag; its deepseek_r1 parser would call the text before a lone </think>
 *   reasoning, which a stream can only do by holding the whole answer back.)
 * - Newlines are trimmed as Qwen3's template trims an assistant turn it reads back: reasoning
 *   with strip('\n'), the answer after </think> with lstrip('\n'). The tags themselves are in
 *   neither part. */
#ifndef FL_REASONING_H
#define FL_REASONING_H

#include <stdbool.h>
#include <stddef.h>

#include "fl.h"

typedef enum srv_reason_state {
    SRV_REASON_START = 0, /* nothing but newlines yet: is it <think>? */
    SRV_REASON_THINK,     /* inside the think block */
    SRV_REASON_ANSWER,    /* after it, or a reply without one */
} srv_reason_state;

typedef struct srv_reason {
    bool on;              /* split at all (the template has think blocks) */
    srv_reason_state state;
    int held;             /* bytes of a tag prefix held back (<think> in START, </think> in THINK) */
    size_t nl;            /* newlines held back: before a possible <think>, or trailing reasoning */
    bool lead;            /* at the start of a part: its leading newlines are dropped */
} srv_reason;

/* on: the template has think blocks; prompt/n: the rendered prompt (a reply to a prompt that
 * ends inside an open think block starts in reasoning). */
void srv_reason_init(srv_reason *r, bool on, const char *prompt, size_t n);
/* Appends what s[0, n) adds to each part (keeps both NUL-terminated when anything was added).
 * With the split off everything goes to content. FL_ENOMEM on out of memory (sticky fl_buf). */
int srv_reason_push(srv_reason *r, const char *s, size_t n, fl_buf *reasoning, fl_buf *content);
/* The end of the reply: what is still held back goes where it belongs (a cut tag is text). */
int srv_reason_finish(srv_reason *r, fl_buf *reasoning, fl_buf *content);
/* The bytes of the whole reply s[0, n) that are its think block, from its start through
 * </think> (n when the block is not closed; 0 when the reply has none), for a split set up as
 * init (srv_reason_init's, before any push): what usage counts as reasoning tokens. */
size_t srv_reason_span(const srv_reason *init, const char *s, size_t n);

#endif
