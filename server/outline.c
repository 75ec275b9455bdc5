/* outline.c: see outline.h. */
#include "outline.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void srv_outline_free(char **points, int n)
{
    for (int i = 0; i < n; i++) {
        free(points[i]);
        points[i] = NULL;
    }
}

int srv_outline_parse(const char *text, size_t len, char **points, const char **reason)
{
    int n = 0, want = 1;
    const char *p = text, *end = text + len;
    *reason = NULL;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            eol = end;
        const char *a = p, *b = eol;
        p = eol < end ? eol + 1 : end;
        while (a < b && isspace((unsigned char)*a))
            a++;
        while (b > a && isspace((unsigned char)b[-1]))
            b--;
        if (a == b)
            continue; /* a blank line */
        /* "N." or "N)" then at least one space */
        const char *q = a;
        long num = 0;
        while (q < b && isdigit((unsigned char)*q) && num < 1000)
            num = num * 10 + (*q++ - '0');
        if (q == a || q >= b || (*q != '.' && *q != ')') || q + 1 >= b ||
            !isspace((unsigned char)q[1])) {
            *reason = "a line is not a numbered point";
            goto fail;
        }
        if (num != want) {
            *reason = "the points are not numbered 1, 2, 3, ...";
            goto fail;
        }
        want++;
        q += 2;
        while (q < b && isspace((unsigned char)*q))
            q++;
        size_t l = (size_t)(b - q);
        if (l == 0 || l > SRV_POINT_MAX) {
            *reason = l ? "a point is too long" : "a point is empty";
            goto fail;
        }
        bool dup = false;
        for (int i = 0; i < n && !dup; i++)
            dup = strlen(points[i]) == l && !strncasecmp(points[i], q, l);
        if (dup)
            continue;
        if (n == SRV_OUTLINE_MAX) {
            *reason = "more than 10 points";
            goto fail;
        }
        if (!(points[n] = strndup(q, l))) {
            *reason = "out of memory";
            goto fail;
        }
        n++;
    }
    if (n < SRV_OUTLINE_MIN) {
        *reason = n ? "only one point" : "no points";
        goto fail;
    }
    return n;
fail:
    srv_outline_free(points, n);
    return 0;
}
