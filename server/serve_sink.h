/* serve_sink.h: engine events into the loop (serve_sink.c). Internal to server/.
 *
 * The queue (s->ev_head, under s->ev_mu) owns each copied event until srv_drain_events has
 * handed it to its request and freed it. */
#ifndef FL_SERVE_SINK_H
#define FL_SERVE_SINK_H

#include "serve_request.h"

/* The engine's sink (fl_engine_submit's, ctx: the srv_req); engine thread. Copies the event
 * into the queue and wakes the loop. Never fails to deliver a done: one that cannot be copied,
 * or follows a commit that could not be, arrives as an internal_error done (docs/robustness.md). */
void srv_sink(const fl_event *ev, void *ctx);
/* Loop thread: hands every queued event to its request (srv_req_deliver), in order, until the
 * queue is empty, then lets groups start more branches. */
void srv_drain_events(srv *s);

#endif
