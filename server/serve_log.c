/* serve_log.c: line-per-event logging. Each line is written with one fwrite so lines from
 * the loop thread and from main never interleave mid-line. */
#include "serve_log.h"

#include <stdarg.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static const char *const names[] = {"debug", "info", "warn", "error", "info"};

int srv_log_level_parse(const char *s, srv_log_level *out)
{
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, names[i])) {
            *out = (srv_log_level)i;
            return 0;
        }
    return -1;
}

void srv_logf(const srv_log *l, srv_log_level lv, const char *fmt, ...)
{
    if (!l || lv < l->level)
        return;
    char line[2048];
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    int n = (int)strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
    n += snprintf(line + n, sizeof line - (size_t)n, ".%03dZ %-5s ", (int)(tv.tv_usec / 1000),
                  names[lv]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    n = m < 0 ? n : (n + m > (int)sizeof line - 2 ? (int)sizeof line - 2 : n + m);
    line[n++] = '\n';
    fwrite(line, 1, (size_t)n, l->f ? l->f : stderr);
    fflush(l->f ? l->f : stderr);
}

const char *srv_log_q(char *buf, size_t cap, const char *s)
{
    size_t o = 0;
    if (cap < 8) {
        if (cap)
            buf[0] = 0;
        return buf;
    }
    buf[o++] = '"';
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p && o + 6 < cap; p++) {
        if (*p == '"' || *p == '\\') {
            buf[o++] = '\\';
            buf[o++] = (char)*p;
        } else if (*p < 0x20 || *p == 0x7f) {
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", *p);
        } else {
            buf[o++] = (char)*p;
        }
    }
    buf[o++] = '"';
    buf[o] = 0;
    return buf;
}
