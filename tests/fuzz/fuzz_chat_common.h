/* fuzz_chat_common.h: checks shared by the two chat-request targets (WebSocket, OpenAI). */
#ifndef FL_FUZZ_CHAT_COMMON_H
#define FL_FUZZ_CHAT_COMMON_H

#include "fuzz_common.h"
#include "serve_proto.h"

/* The server's defaults (serve_config.c): max_tokens_limit 1024, max_tokens 256. */
srv_limits fz_limits(void);
/* A rejection: code is bad_request or out_of_range, msg a non-empty message (it may quote the
 * request's own bytes, newlines included: the frame escapes them), param (OpenAI;
 * pass NULL for WebSocket) NULL or a field the protocol has. */
void fz_check_rejection(const char *code, const char *param, const char *msg);
/* The WebSocket error frame for this rejection parses back with type, id, code and message. */
void fz_check_error_frame(const char *id, const char *code, const char *msg);
/* The OpenAI error body parses back with error.message, error.code and error.param. */
void fz_check_openai_error(const char *code, const char *param, const char *msg);
/* An accepted chat is inside every limit docs/protocol.md states. */
void fz_check_chat(const srv_chat *c, const srv_limits *L, bool openai);
/* The sampling fields (stop, max_tokens, decoding) of an accepted request are in range. */
void fz_check_sampling(const srv_chat *c, const srv_limits *L);
/* An accepted /v1/completions body: 1..SRV_MAX_CHOICES prompts, each text (UTF-8, no NUL) or
 * ids (>= 0), several choices a group of samples, no chat field, sampling in range. */
void fz_check_completion(const srv_chat *c, const srv_limits *L);
/* Tokenizes an accepted text prompt as tokenize_raw does (ids are checked there against the
 * model's vocabulary, which the parser does not know). */
void fz_tokenize_completion(const fl_tokenizer *tok, const srv_chat *c);
/* Renders and tokenizes an accepted chat as serve_request.c tokenize_work does; both must
 * succeed, since the parser has already checked roles and text. */
void fz_render_like_server(const fl_tokenizer *tok, const srv_chat *c);

#endif
