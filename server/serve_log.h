/* serve_log.h: one line per event on stderr: time, level, then key=value fields, the
 * request id among them when there is one, so `grep req=r1` follows a request. */
#ifndef FL_SERVE_LOG_H
#define FL_SERVE_LOG_H

#include <stdio.h>

#include "fl.h"

typedef enum srv_log_level {
    SRV_LOG_DEBUG = 0,
    SRV_LOG_INFO,
    SRV_LOG_WARN,
    SRV_LOG_ERROR,
    SRV_LOG_ALWAYS, /* lifecycle lines (listening, draining, stopped): shown at every level,
                       tagged "info"; scripts wait for them */
} srv_log_level;

typedef struct srv_log {
    srv_log_level level;
    FILE *f;
} srv_log;

int srv_log_level_parse(const char *s, srv_log_level *out); /* 0 or -1 */
/* fmt: the event's fields, e.g. "event=chat conn=3 req=%s"; the line gets time and level.
 * Strings from clients must go through srv_log_q to stay on one line. */
void srv_logf(const srv_log *l, srv_log_level lv, const char *fmt, ...) FL_PRINTF(3, 4);
/* Quotes a value for a log field into buf: "..." with \" \\ and control bytes escaped,
 * cut at cap. Returns buf. */
const char *srv_log_q(char *buf, size_t cap, const char *s);

#define SRV_DEBUG(l, ...) srv_logf((l), SRV_LOG_DEBUG, __VA_ARGS__)
#define SRV_INFO(l, ...) srv_logf((l), SRV_LOG_INFO, __VA_ARGS__)
#define SRV_WARN(l, ...) srv_logf((l), SRV_LOG_WARN, __VA_ARGS__)
#define SRV_ERROR(l, ...) srv_logf((l), SRV_LOG_ERROR, __VA_ARGS__)
#define SRV_ALWAYS(l, ...) srv_logf((l), SRV_LOG_ALWAYS, __VA_ARGS__)

#endif
