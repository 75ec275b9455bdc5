/* serve_tokenize.h: POST /tokenize and POST /detokenize (vLLM's shapes, docs/protocol.md).
 * Internal to server/.
 *
 * Threads: a /tokenize renders and tokenizes on the uv work pool, so a long prompt never holds
 * the loop; its answer comes back on the loop through `done`, unless its owner went away first
 * (srv_tokenize_detach). A /detokenize is answered at once: decoding is one linear pass. */
#ifndef FL_SERVE_TOKENIZE_H
#define FL_SERVE_TOKENIZE_H

#include "serve.h"
#include "serve_proto.h"

typedef struct srv_tok_job srv_tok_job;

/* An answer: 200 and its body, or an error's status, code (SRV_E_*), param and message. */
typedef struct srv_tok_answer {
    int status;
    const char *code;
    const char *param;
    char msg[FL_ERR_MSG + 64];
    json_t *body; /* 200: the answer, the receiver's */
} srv_tok_answer;

typedef void (*srv_tok_done)(void *owner, srv_tok_answer *a);

/* Starts tokenizing t (taken: its fields are the job's from here on, also on failure). Returns
 * the job, whose answer goes to done(owner, ...) on the loop; or NULL with *a the error. */
srv_tok_job *srv_tokenize_start(srv *s, srv_tokenize *t, srv_tok_done done, void *owner,
                                srv_tok_answer *a);
/* The owner is going away: the job's answer is dropped (the job frees itself when its work is
 * over). */
void srv_tokenize_detach(srv_tok_job *j);

/* The text of d's ids: {"prompt": text} in *a (invalid UTF-8 becomes U+FFFD, as Hugging Face's
 * decoder writes it). */
void srv_detokenize_answer(srv *s, const srv_detokenize *d, srv_tok_answer *a);

#endif
