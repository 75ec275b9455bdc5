/* serve_responses.h: OpenAI's Responses API (POST /v1/responses) over the chat machinery.
 *
 * A Responses request is translated into the chat completions request it means (input items
 * to messages, instructions to a system message, text.format to response_format, function
 * tools to chat tools) and parsed by srv_parse_chat_openai, so both routes take the same
 * fields the same way; what cannot be translated is refused by name. The reply comes back as
 * chat deltas (content, reasoning_content, tool_calls: the same split and extraction as chat
 * completions) and srv_resp turns them into output items, and, streamed, into the Responses
 * events (response.created ... response.completed) in order with their sequence numbers. */
#ifndef FL_SERVE_RESPONSES_H
#define FL_SERVE_RESPONSES_H

#include <stdbool.h>
#include <jansson.h>

#include "fl.h"

/* The chat completions request *chat (a new object) that the Responses request o means, and
 * *echo (a new object): the request's fields the answer repeats (instructions, tools, ...).
 * 0, or -1 with an SRV_E_* code, the field (param) and a message. */
int srv_responses_request(const json_t *o, json_t **chat, json_t **echo, const char **code,
                          const char **param, char *msg, size_t msglen);

/* A field name of the chat request, in the Responses request's words (errors name the field the
 * client sent): max_completion_tokens -> max_output_tokens, response_format -> text.format,
 * messages -> input; others as they are. */
const char *srv_responses_param(const char *chat_param);
/* A chat error message in the same words: out (cap bytes) is msg with 'max_completion_tokens',
 * 'response_format' and 'messages' renamed so (a rename that would not fit is left out). */
void srv_responses_words(char *out, size_t cap, const char *msg);

typedef enum { SRV_RESP_NONE = 0, SRV_RESP_REASONING, SRV_RESP_MESSAGE } srv_resp_open;

/* One event out: takes ev (with its "type" and "sequence_number"). */
typedef void (*srv_resp_emit)(void *ctx, json_t *ev);

typedef struct srv_resp {
    char id[48];          /* the response's: resp_... */
    json_t *output;       /* the items so far, each as it is once done */
    srv_resp_open open;   /* the item being written, if any */
    fl_buf text;          /* its text so far */
    char item_id[64];
    int n_items;          /* items started (their ids count up) */
    long long seq;        /* the next event's sequence_number */
    bool err;             /* out of memory: the answer cannot be whole */
} srv_resp;

void srv_resp_init(srv_resp *st, const char *id);
void srv_resp_free(srv_resp *st);
/* A chat delta d ({"reasoning_content", "content", "tool_calls"}, any of them) added to the
 * output; with emit, each change as its events (emit NULL: only the items, for an answer that
 * is not streamed). */
void srv_resp_delta(srv_resp *st, const json_t *d, srv_resp_emit emit, void *ctx);
/* Closes the open item (incomplete: the reply hit max_output_tokens) and, when the reply made
 * no item at all, adds an empty message, as OpenAI's answers always have output. */
void srv_resp_close(srv_resp *st, bool incomplete, srv_resp_emit emit, void *ctx);
/* The response object: echo's fields, status "in_progress" (usage NULL, output empty),
 * "completed" or "incomplete" (reason max_output_tokens) with the output and usage (taken). */
json_t *srv_resp_object(const srv_resp *st, long long created, const char *model,
                        const char *status, const json_t *echo, json_t *usage);
/* The opening events: response.created and response.in_progress. */
void srv_resp_begin(srv_resp *st, long long created, const char *model, const json_t *echo,
                    srv_resp_emit emit, void *ctx);
/* The request's input (its "input") as the items GET /v1/responses/ID/input_items lists: a string as one
 * user message, each item as sent with OpenAI's "type", "id" (made from the response's id
 * where the client gave none), "status" and text parts (a string content as one part). NULL
 * when out of memory. The request was checked by srv_responses_request. */
json_t *srv_resp_input_items(const json_t *input, const char *resp_id);
/* The Responses usage object (reasoning: output tokens in the think block; below 0 as 0). */
json_t *srv_resp_usage(int input, int output, int cached, int reasoning);

#endif
