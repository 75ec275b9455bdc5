/* serve_generate.h: POST /generate, the deployment guide's batch endpoint
 * ({"segments":[...]} -> {"output":[...]}), built on fan-out: each segment is a branch of one
 * group (serve_group.c), so the segments run in the same forwards and share common prompt
 * blocks through the prefix cache. serve_http.c owns the exchange (body, status, sockets);
 * this file only turns the body into a chat and the group's result into the answer. */
#ifndef FL_SERVE_GENERATE_H
#define FL_SERVE_GENERATE_H

#include <jansson.h>

#include "serve_request.h"

/* The first failure among a request's segments (the answer reports one). */
typedef struct srv_gen_fail {
    int segment;      /* -1: none yet */
    const char *code; /* a static SRV_E_* string */
    const char *param; /* the field it names, when the refusal names one (static), or NULL */
    char msg[FL_ERR_MSG + 32];
} srv_gen_fail;

void srv_generate_init(srv_gen_fail *f);

/* Checks a /generate body and makes it a fan-out chat: each segment becomes a branch whose
 * prompt is the segment as the one user message, rendered by the model's chat template.
 * max_tokens and the sampling fields (temperature, top_p, top_k, seed, stop, decoding) are
 * checked as on /v1/chat/completions. Returns 0, or -1 with *code, *param and msg as
 * srv_parse_chat_openai does; *out is then still freeable with srv_chat_free. */
int srv_generate_parse(const json_t *o, const srv_limits *L, srv_chat *out, const char **code,
                       const char **param, char *msg, size_t msglen);

/* Segment k failed (rejected before the engine, or an engine error): remembered (the lowest
 * segment wins, so the answer does not depend on which branch ended first) and the group g
 * cancelled: the answer is an error whatever the other branches give. */
void srv_generate_fail(srv_gen_fail *f, srv_req *g, int k, const char *code, const char *msg);

/* The group's answer once every branch has ended: 0 with *body (owned by the caller), or -1
 * with *code (its HTTP status is the code's, as on the other routes), *param and msg. */
int srv_generate_answer(const srv_gen_fail *f, const srv_req *g, json_t **body, const char **code,
                        const char **param, char *msg, size_t msglen);

#endif
