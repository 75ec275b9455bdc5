/* serve_proto.h: what a chat request is, checked field by field, whether it came as a
 * WebSocket `chat` message or an OpenAI /v1/chat/completions body; and the error codes that
 * both transports report (docs/protocol.md lists them). Pure functions over jansson values:
 * no sockets, no engine. */
#ifndef FL_SERVE_PROTO_H
#define FL_SERVE_PROTO_H

#include <jansson.h>

#include "constraint.h"
#include "decode.h"
#include "tokenizer/tokenizer.h"

/* Error codes (the `code` of an error frame; OpenAI errors carry them too). */
#define SRV_E_BAD_JSON "bad_json"
#define SRV_E_INVALID_UTF8 "invalid_utf8"
#define SRV_E_BINARY "binary_not_supported"
#define SRV_E_TOO_LARGE "message_too_large"
#define SRV_E_UNKNOWN_TYPE "unknown_type"
#define SRV_E_BAD_REQUEST "bad_request"
#define SRV_E_OUT_OF_RANGE "out_of_range"
#define SRV_E_DUPLICATE_ID "duplicate_id"
#define SRV_E_UNKNOWN_ID "unknown_id"
#define SRV_E_PROMPT_TOO_LONG "prompt_too_long"
#define SRV_E_TOO_MANY "too_many_requests"
#define SRV_E_BUSY "busy"
#define SRV_E_UNAUTHORIZED "unauthorized"
#define SRV_E_SHUTTING_DOWN "shutting_down"
#define SRV_E_ENGINE "engine_error"
#define SRV_E_INTERNAL "internal_error"
#define SRV_E_MODEL_NOT_FOUND "model_not_found"
#define SRV_E_PREV_NOT_FOUND "previous_response_not_found" /* /v1/responses, 404 */

#define SRV_ID_MAX 128      /* bytes in a request or session id */
#define SRV_MAX_MESSAGES 256
#define SRV_MAX_STOPS 8
#define SRV_STOP_MAX 64     /* bytes in one stop string */
#define SRV_MAX_SEGMENTS 16 /* branches of one parallel request */
#define SRV_MAX_CHOICE_TEXTS 256  /* structured_outputs.choice: texts at most */
#define SRV_MAX_CHOICE_BYTES 1024 /* and bytes of each */
/* SRV_PAR_SAMPLES: OpenAI's n > 1, n branches of one prompt, branch i sampled with seed + i */
enum { SRV_PAR_NONE = 0, SRV_PAR_FANOUT, SRV_PAR_SKELETON, SRV_PAR_AUTO, SRV_PAR_SAMPLES };
/* the modes with an outline stage before their branches */
#define SRV_PAR_OUTLINED(p) ((p) == SRV_PAR_SKELETON || (p) == SRV_PAR_AUTO)
enum { SRV_TOOL_NONE = 0, SRV_TOOL_AUTO, SRV_TOOL_REQUIRED, SRV_TOOL_NAMED };
#define SRV_MAX_TOOLS 64
#define SRV_PARAMS_VISITS 1024 /* subschemas a tool's parameters' top level may have (anyOf, $ref) */


#define SRV_MAX_CHOICES 64 /* a text completion's prompts times n */

/* A /v1/completions prompt: its text (tokenized as given) or its token ids. */
typedef struct srv_prompt {
    char *text; /* NULL for ids */
    size_t len;
    int32_t *ids; /* (n_ids), NULL for text */
    size_t n_ids;
} srv_prompt;

typedef struct srv_chat {
    char *id;            /* the client's request id (WebSocket); OpenAI: generated */
    char *session;       /* continued from / saved to Redis when the server has one */
    fl_chat_msg *msgs;   /* (n_msgs) strings owned */
    size_t n_msgs;
    int32_t max_tokens;
    char **stop;         /* (n_stop) owned */
    int n_stop;
    fl_decode_opts dec;
    /* /v1/responses: the key the conversation is stored under when it ends (NULL: session's),
       and whether session's history must be there (previous_response_id: a miss is an error,
       not a turn without history) */
    char *session_save;
    bool session_required;
    /* /v1/responses: msgs[0] is the request's instructions, which are neither stored with the
       conversation nor carried over to the next response (OpenAI's rule): a continued
       conversation's history goes after them */
    bool instructions;
    bool seed_given;     /* the request's own "seed"; without it the server draws one
                            (srv_req_init) and dec.seed holds that once the request starts */
    /* "parallel": {"mode":"fanout","segments":[...],"max_branches":N}: each segment is a
       branch whose prompt is msgs + {"role":"user","content":segment} (WebSocket only) */
    int parallel;        /* SRV_PAR_* */
    char **segments;     /* (n_segments) owned; fanout only */
    int n_segments;
    int n_choices;       /* OpenAI's n per prompt (SRV_PAR_SAMPLES when the choices are several) */
    int max_branches;    /* branches running at once */
    bool enable_thinking; /* the template's enable_thinking: chat_template_kwargs, else the
                             server's default (--chat-template-kwargs), else true as the
                             template's own default (the variable undefined) */
    /* WebSocket only: "drafts": "every_step" asks for a draft of every denoising step, none
       coalesced ("latest", the default: a queued draft is replaced by the block's newer one) */
    bool every_step;
    /* "response_format" (both transports, OpenAI's shape): FL_FMT_*, and for a schema its
       compact JSON text (properties keep their order: they are written in it) */
    int format;
    char *schema;
    /* the field that asked for it: "response_format", or "structured_outputs" (vLLM's: a
       regex or choice is FL_FMT_REGEX with the pattern in schema, a json one a schema) */
    const char *format_param;
    /* "tools" and "tool_choice" (both transports, OpenAI's shape): the tools' JSON text for the
       chat template (NULL: none, or tool_choice "none"), the choice (SRV_TOOL_*), and for
       "required" or a named function the schema of the call ({"name", "arguments"}) that the
       reply is constrained to */
    char *tools;
    int tool_choice;
    char *tool_schema;
    bool single_call; /* "parallel_tool_calls": false: at most one call (srv_tools.max_calls) */
    /* assistant messages' tool_calls as JSON text for the template ({"id", "type", "function":
       {"name", "arguments"}} with arguments parsed into JSON), NULL each when none */
    char **calls;        /* (n_calls) */
    size_t n_calls;
    bool tool_msgs;      /* a message is a tool result or has tool calls */
    /* /v1/completions: the prompts as they are, no chat template (msgs is empty): text
       (tokenized as given, special tokens' text included) or token ids (checked against the
       vocabulary when tokenized). More than one (or n above 1) is a group of samples, whose
       branch k has prompt k / n_choices alone */
    bool raw;
    srv_prompt *prompts; /* (n_prompts) owned */
    int n_prompts;
    /* OpenAI only */
    bool logprobs;       /* each reply token's log probability (chat completions) */
    int top_logprobs;    /* and its most likely alternatives, 0..FL_MAX_TOP_LOGPROBS */
    /* "logit_bias" (both transports, OpenAI's shape: token id -> bias in [-100, 100]): the ids
       and biases, n_bias each, owned */
    int32_t *bias_ids;
    float *bias;
    int n_bias;
    /* vLLM's min_tokens and ignore_eos (both transports): no end token before min_tokens reply
       tokens, or at all (the reply runs to max_tokens or a stop string) */
    int min_tokens;
    bool ignore_eos;
    /* OpenAI's presence_penalty and frequency_penalty (both transports), [-2, 2] */
    float presence_penalty;
    float frequency_penalty;
    /* vLLM's repetition_penalty, (0, 10] (0: not given, off as 1 is) and stop_token_ids
       (n_stop_ids, owned; each in the vocabulary), both transports */
    float repetition_penalty;
    int32_t *stop_ids;
    int n_stop_ids;
    bool include_stop_str; /* vLLM's include_stop_str_in_output (both transports) */
    bool stream;
    bool include_usage;
    char *model;
} srv_chat;

typedef struct srv_limits {
    int max_tokens_limit;
    int max_tokens_default;
    fl_decode_opts dec_default;
    bool enable_thinking; /* the default of chat_template_kwargs.enable_thinking */
    int vocab;            /* the model's token ids (logit_bias keys are checked against it) */
} srv_limits;

void srv_chat_free(srv_chat *c);
/* An assistant message's tool_calls (OpenAI's shape, arguments as JSON text or an object) as
 * the chat template takes them (srv_chat.calls); NULL when they are not that shape (or out of
 * memory). Owned by the caller. */
char *srv_tool_calls_text(const json_t *tool_calls);

/* The branches a request's group has: its segments (fan-out), its choices (samples: prompts
 * times n), or 1 (the outline stage first). */
static inline int srv_chat_branches(const srv_chat *c)
{
    return c->parallel == SRV_PAR_FANOUT    ? c->n_segments
           : c->parallel == SRV_PAR_SAMPLES ? c->n_choices * (c->n_prompts > 1 ? c->n_prompts : 1)
                                            : 1;
}

/* Each parser returns 0, or -1 with *code (an SRV_E_*), a message naming the field, and
 * (OpenAI) *param set to the offending field's name or NULL. */
int srv_parse_chat_ws(const json_t *o, const srv_limits *L, srv_chat *out, const char **code,
                      char *msg, size_t msglen);
int srv_parse_chat_openai(const json_t *o, const srv_limits *L, srv_chat *out, const char **code,
                          const char **param, char *msg, size_t msglen);

/* POST /v1/completions (docs/protocol.md): a prompt (text or token ids) or a batch of them, n
 * choices each; what the engine cannot give (echo, logprobs, suffix, best_of other than n) is
 * refused by name. */
int srv_parse_completion_openai(const json_t *o, const srv_limits *L, srv_chat *out,
                                const char **code, const char **param, char *msg, size_t msglen);

/* vLLM's chat_template_kwargs, a JSON object of the template's variables: the built-in
 * renderers know enable_thinking (true or false). Sets *enable_thinking when the object has it;
 * -1 with a message naming the key for anything else. what names the value in messages. */
int srv_template_kwargs_parse(const json_t *v, const char *what, bool *enable_thinking, char *msg,
                              size_t msglen);

/* A request id as the protocol accepts it: a string of 1..SRV_ID_MAX bytes. */
bool srv_id_ok(const json_t *v);

/* POST /tokenize (vLLM's shape, docs/protocol.md): a prompt (a string, tokenized as
 * /v1/completions takes it: chat.raw, chat.prompts[0]) or messages (parsed as chat completions
 * parse them, then rendered as they are: tools, chat_template_kwargs); add_generation_prompt
 * (default true) and return_token_strs. A session or a fan-out is refused. */
typedef struct srv_tokenize {
    srv_chat chat;
    bool add_generation_prompt;
    bool token_strs;
} srv_tokenize;
int srv_parse_tokenize(const json_t *o, const srv_limits *L, srv_tokenize *t, const char **code,
                       const char **param, char *msg, size_t msglen);

/* POST /detokenize: token ids, each below vocab; skip_special_tokens (default false). */
typedef struct srv_detokenize {
    int32_t *ids; /* (n) owned */
    size_t n;
    bool skip_special;
    char *model;  /* owned, NULL when not given */
} srv_detokenize;
int srv_parse_detokenize(const json_t *o, int vocab, srv_detokenize *d, const char **code,
                         const char **param, char *msg, size_t msglen);
void srv_detokenize_free(srv_detokenize *d);

/* {"type":"error","id":...,"code":...,"message":...}; id may be NULL. Returns a malloc'd
 * string (NULL on out of memory). */
char *srv_frame_error(const char *id, const char *code, const char *message);
/* OpenAI's error object: {"error":{"message","type","param","code"}}. */
/* A JSON string of a message: invalid UTF-8 (client text cut mid-character) is clipped as
   srv_utf8_clip does rather than lost (json_string refuses it). NULL on out of memory. */
json_t *srv_json_text(const char *s);
char *srv_openai_error(const char *type, const char *code, const char *param, const char *message);

/* Cuts s back to valid UTF-8 (a message quoting client text cut to a length); bytes of an
 * invalid sequence elsewhere become '?'. */
void srv_utf8_clip(char *s);
/* The first key of object o that is not one of known[0..n), or NULL: a request's misspelt
 * field is refused by name, never silently ignored. */
const char *srv_json_unknown_key(const json_t *o, const char *const *known, size_t n);

/* Valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF). */
bool srv_utf8_valid(const unsigned char *s, size_t n);

const char *srv_finish_name(int finish); /* fl_finish -> "stop" | "length" | ... */

#endif
