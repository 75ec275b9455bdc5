/* toolcalls.h: a reply's tool calls, found on the committed text stream. The chat templates
 * with tools (Qwen2.5's, Qwen3's, Ling's) ask the model for
 *   <tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>
 * and this turns each such block into an OpenAI tool call (arguments as JSON text), the rest
 * into content. Pure: no sockets, no engine; one srv_tools per request, fed each commit's
 * content, so that a tag cut across commits never leaks into the content.
 *
 * The rules:
 * - A block whose text is a JSON object with a string "name" and an object "arguments" (each
 *   key once) is a call; any other block (or one the reply's end cut off) stays in the
 *   content as written.
 * - A string in the call may hold "</tool_call>" (a constrained call can write one): where the
 *   text up to a close tag is an object not closed yet, the next close tag is tried; where
 *   none makes a call, the block ends at its first close tag and what follows is read again.
 * - Whitespace next to a call is not content (the template writes newlines between calls);
 *   a reply without calls keeps its text exactly.
 * - The content and the calls do not depend on how the text was cut into commits. */
#ifndef FL_TOOLCALLS_H
#define FL_TOOLCALLS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "fl.h"

typedef struct srv_tools {
    bool on;       /* look for calls at all (the request offered tools) */
    bool in_call;  /* inside <tool_call> */
    bool after_call; /* a call just ended: the whitespace that follows is not content */
    fl_buf pend;   /* held back: a possible start tag, trailing whitespace, or a call's text */
    size_t ws;     /* of pend (outside a call): trailing whitespace bytes held back */
    fl_buf gap;    /* inside a call: the whitespace before its tag (content if it is no call) */
    int n_calls;
    /* parallel_tool_calls false: at most this many calls (0: any); a well-formed call past
       them is dropped, neither a call nor content (vLLM's rule), and counted */
    int max_calls;
    int n_dropped;
    uint64_t seed; /* the calls' ids: call_<hex of seed and index> */
} srv_tools;

void srv_tools_init(srv_tools *t, bool on, uint64_t seed);
void srv_tools_free(srv_tools *t);
/* Feeds content s[0, n): appends plain content to *content, and each call completed to calls
 * (a JSON array) as {"index", "id", "type": "function", "function": {"name", "arguments"}}.
 * With on false everything is content. FL_ENOMEM on out of memory. */
int srv_tools_push(srv_tools *t, const char *s, size_t n, fl_buf *content, json_t *calls);
/* The reply's end: a block held back for a later close tag is decided (a call after it may
 * still go to calls), and what else is held back becomes content (a cut call is text). */
int srv_tools_finish(srv_tools *t, fl_buf *content, json_t *calls);

#endif
