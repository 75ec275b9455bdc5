/* serve_session.h: a request's Redis stages (serve_session.c). Internal to server/; loop thread.
 * Each is only called with s->redis set; none fails the request: Redis away, slow or holding a
 * damaged value is a counted miss (metrics, a warn line) and the turn goes on without it. */
#ifndef FL_SERVE_SESSION_H
#define FL_SERVE_SESSION_H

#include "serve_request.h"

/* Asks for the session's earlier turns ("fogline:session:<id>"); true when the read is under way
 * (its answer, or its deadline, prepends them and tokenizes the request), false when Redis could
 * not take it (the caller tokenizes at once). */
bool srv_session_load(srv_req *r);
/* After a completed turn (ev: its done): stores the conversation and its token ids, with
 * --redis-session-ttl; nothing when the request has no session or Redis is not ready. */
void srv_session_save(srv_req *r, const srv_ev *ev);
/* Looks up the tokenized prompt's cached KV pages, then submits the request with the longest
 * run found (at once, with none, when there is no Redis or nothing to look up). */
void srv_prefix_lookup(srv_req *r);

/* GET or DELETE /v1/responses/ID, GET /v1/responses/ID/input_items, DELETE /sessions/ID: the
 * session or the response stored with
 * its turn (srv_req.response, input_items), read or deleted; done(owner, id, kind, outcome, v)
 * follows once: outcome 0 (found: v the response or its input items (an array), taken;
 * deleted: NULL), 1 (not there, or a record that is no response's: a client's session of that
 * name), -1 (Redis did not answer). NULL (no done) when Redis is not connected. */
enum { SRV_STORED_GET = 0, SRV_STORED_DELETE, SRV_STORED_ITEMS,
       SRV_STORED_FORGET /* DELETE /sessions/ID: the record, whatever it holds */ };
typedef struct srv_stored srv_stored;
typedef void (*srv_stored_cb)(void *owner, const char *id, int kind, int outcome, json_t *v);
srv_stored *srv_stored_start(srv *s, const char *id, int kind, srv_stored_cb done, void *owner);
/* The owner has gone: done is not called (NULL: nothing). */
void srv_stored_detach(srv_stored *st);

#endif
