/* outline.h: the outline a model writes for a skeleton reply ("1. ...\n2. ...\n"), parsed into
 * its points. Pure functions: no model, no sockets. */
#ifndef FL_SERVER_OUTLINE_H
#define FL_SERVER_OUTLINE_H

#include <stddef.h>

#define SRV_OUTLINE_MIN 2    /* fewer points: not worth branching, decode plainly */
#define SRV_OUTLINE_MAX 10
#define SRV_POINT_MAX 512    /* bytes in one point */

/* The system message that asks the model for an outline of the customer's message. */
#define SRV_OUTLINE_PROMPT \
    "List the independent questions in the customer's message, one per line."

/* Parses text into points (each a malloc'd, trimmed string; free with srv_outline_free).
 * Lines are "N. text" or "N) text" numbered 1, 2, 3, ... in order; blank lines are skipped;
 * a repeated point (same text, ignoring case and surrounding space) is dropped. Returns the
 * number of points, between SRV_OUTLINE_MIN and SRV_OUTLINE_MAX, or 0 with a reason when the
 * text is not a usable outline (then the reply is decoded plainly). */
int srv_outline_parse(const char *text, size_t len, char **points, const char **reason);
void srv_outline_free(char **points, int n);

#endif
