/* reasoning.c: the reasoning/answer split of a reply stream (reasoning.h has the rule). A byte
 * machine: tags are ASCII, so a cut is never inside a UTF-8 character, and what is held back
 * is at most a tag prefix and a count of newlines (no allocation of its own). */
#include "reasoning.h"

#include <string.h>

static const char OPEN[] = "<think>", CLOSE[] = "</think>";
#define OPEN_LEN (sizeof OPEN - 1)
#define CLOSE_LEN (sizeof CLOSE - 1)

void srv_reason_init(srv_reason *r, bool on, const char *prompt, size_t n)
{
    memset(r, 0, sizeof *r);
    r->on = on;
    if (!on || !prompt)
        return;
    /* the last <think> of the prompt, with no </think> and no end of turn after it: the
       template opened the block the reply is to write */
    const char *o = fl_memrstr(prompt, n, OPEN);
    if (!o)
        return;
    size_t rest = n - (size_t)(o - prompt);
    if (!fl_memrstr(o, rest, CLOSE) && !fl_memrstr(o, rest, "<|im_end|>")) {
        r->state = SRV_REASON_THINK;
        r->lead = true;
    }
}

static int newlines(fl_buf *b, size_t k)
{
    int rc = 0;
    while (k-- && !rc)
        rc = fl_buf_append(b, "\n", 1);
    return rc;
}

int srv_reason_push(srv_reason *r, const char *s, size_t n, fl_buf *reasoning, fl_buf *content)
{
    if (!r->on)
        return n ? fl_buf_append(content, s, n) : 0;
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        char c = s[i];
        switch (r->state) {
        case SRV_REASON_START:
            if (!r->held && c == '\n') {
                r->nl++;
                break;
            }
            if (c == OPEN[r->held]) {
                if ((size_t)++r->held == OPEN_LEN) {
                    r->state = SRV_REASON_THINK;
                    r->held = 0;
                    r->nl = 0; /* newlines before <think>: in neither part */
                    r->lead = true;
                }
                break;
            }
            /* not a think block: everything held is answer, and so is the rest */
            rc = newlines(content, r->nl) || fl_buf_append(content, OPEN, (size_t)r->held);
            r->nl = 0;
            r->held = 0;
            r->state = SRV_REASON_ANSWER;
            r->lead = false;
            i--; /* c again, as answer */
            break;
        case SRV_REASON_THINK:
            if (c == CLOSE[r->held]) {
                if ((size_t)++r->held == CLOSE_LEN) {
                    r->state = SRV_REASON_ANSWER;
                    r->held = 0;
                    r->nl = 0; /* reasoning.rstrip('\n') */
                    r->lead = true;
                }
                break;
            }
            if (r->held) {
                /* a cut-off prefix was reasoning text; '<' occurs only first in the tag, so c
                   can only start a new prefix, which the next round sees */
                rc = newlines(reasoning, r->nl) || fl_buf_append(reasoning, CLOSE, (size_t)r->held);
                r->nl = 0;
                r->held = 0;
                r->lead = false;
                i--;
                break;
            }
            if (c == '\n') {
                if (!r->lead)
                    r->nl++;
                break;
            }
            rc = newlines(reasoning, r->nl) || fl_buf_append(reasoning, &c, 1);
            r->nl = 0;
            r->lead = false;
            break;
        case SRV_REASON_ANSWER:
            if (r->lead && c == '\n')
                break;
            r->lead = false;
            rc = fl_buf_append(content, s + i, n - i); /* the rest is answer as it stands */
            i = n;
            break;
        }
    }
    return rc ? FL_ENOMEM : 0;
}

int srv_reason_finish(srv_reason *r, fl_buf *reasoning, fl_buf *content)
{
    int rc = 0;
    if (r->on && r->state == SRV_REASON_START)
        rc = newlines(content, r->nl) || fl_buf_append(content, OPEN, (size_t)r->held);
    else if (r->on && r->state == SRV_REASON_THINK && r->held) /* trailing newlines: stripped */
        rc = newlines(reasoning, r->nl) || fl_buf_append(reasoning, CLOSE, (size_t)r->held);
    r->nl = 0;
    r->held = 0;
    return rc ? FL_ENOMEM : 0;
}

size_t srv_reason_span(const srv_reason *init, const char *s, size_t n)
{
    size_t i = 0;
    if (!init->on)
        return 0;
    if (init->state == SRV_REASON_START) {
        while (i < n && s[i] == '\n')
            i++;
        if (n - i < OPEN_LEN || memcmp(s + i, OPEN, OPEN_LEN)) /* (a cut tag is answer text) */
            return 0;
        i += OPEN_LEN;
    } else if (init->state != SRV_REASON_THINK) {
        return 0;
    }
    for (; i + CLOSE_LEN <= n; i++)
        if (!memcmp(s + i, CLOSE, CLOSE_LEN))
            return i + CLOSE_LEN;
    return n;
}

