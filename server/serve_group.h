/* serve_group.h: fan-out groups (serve_group.c). Internal to server/; loop thread only.
 *
 * A group is a srv_req with branches (kids) and no engine work of its own; the server owns it
 * (s->groups) from srv_group_start until its last branch has ended and its owner has heard
 * group_done (or refused, when it could not go on), then frees it. */
#ifndef FL_SERVE_GROUP_H
#define FL_SERVE_GROUP_H

#include "serve_request.h"

/* srv_req_start for a chat with "parallel" (after the busy checks): takes *chat (zeroed), makes
 * the branches (fanout) or starts the outline stage (skeleton/auto). Returns the group, or NULL
 * with an SRV_E_* in *code and a message (out of memory, cannot queue); *chat is then either
 * freed or left for the caller (srv_chat_free it either way). */
srv_req *srv_group_start(srv *s, const srv_owner_ops *ops, void *owner, srv_chat *chat,
                         const char **code, char *msg, size_t msglen);
/* A request ended (s->rebalance): each group under its fair share starts waiting branches. */
void srv_groups_rebalance(srv *s);
/* A group's summed usage over its segments' results. */
void srv_group_totals(const srv_req *g, long long *prompt, long long *completion, long long *cached);
/* The branches' reasoning tokens summed (usage's reasoning_tokens), -1 when none counts them
   (the template has no think blocks). */
long long srv_group_reasoning(const srv_req *g);

#endif
