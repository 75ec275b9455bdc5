/* fuzz_generate.c: a POST /generate body as serve_http.c handles it: the UTF-8 check, jansson
 * (duplicate keys allowed, as the HTTP path loads them), srv_generate_parse, and for an
 * accepted body each segment rendered and tokenized as its branch's prompt. A rejection must
 * carry a known code, a message and a sensible param; an accepted body must be a fan-out of
 * exactly its segments, byte for byte, inside every limit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_chat_common.h"
#include "serve_generate.h"

static fl_tokenizer *tok;

/* serve_generate.c's answer path needs the engine's groups; parsing never calls these */
void srv_req_cancel(srv_req *r)
{
    (void)r;
    abort();
}

void srv_group_totals(const srv_req *g, long long *prompt, long long *completion, long long *cached)
{
    (void)g, (void)prompt, (void)completion, (void)cached;
    abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    tok = fz_load_tokenizer(NULL);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!srv_utf8_valid(data, size))
        return 0;
    json_error_t je;
    json_t *o = json_loadb((const char *)data, size, 0, &je);
    if (!o)
        return 0;
    srv_limits L = fz_limits();
    srv_chat c;
    const char *code = NULL, *param = (const char *)1; /* must be reset by the parser */
    char msg[FL_ERR_MSG] = "";
    int rc = srv_generate_parse(o, &L, &c, &code, &param, msg, sizeof msg);
    if (rc) {
        FZ_CHECK(rc == -1, "srv_generate_parse returned %d", rc);
        /* "segments" is /generate's own field; the rest are the chat completion's */
        fz_check_rejection(code, param && !strcmp(param, "segments") ? NULL : param, msg);
        fz_check_openai_error(code, param, msg);
    } else {
        FZ_CHECK(param == NULL, "param left set on success");
        const json_t *segs = json_object_get(o, "segments");
        FZ_CHECK(json_is_array(segs), "accepted without a segments array");
        size_t n = json_array_size(segs);
        FZ_CHECK(c.parallel == SRV_PAR_FANOUT && c.n_msgs == 0 && c.n_segments == (int)n &&
                     n >= 1 && n <= SRV_MAX_SEGMENTS && c.max_branches == c.n_segments,
                 "accepted as parallel %d, %zu messages, %d of %zu segments, %d branches",
                 c.parallel, c.n_msgs, c.n_segments, n, c.max_branches);
        for (size_t i = 0; i < n; i++) {
            const json_t *t = json_array_get(segs, i);
            FZ_CHECK(json_is_string(t) && json_string_length(t) > 0 &&
                         strlen(c.segments[i]) == json_string_length(t) &&
                         !memcmp(c.segments[i], json_string_value(t), json_string_length(t)),
                     "segment %zu is not the request's", i);
            /* the branch's prompt: the segment as the one user message */
            fl_chat_msg m = {"user", c.segments[i]};
            srv_chat v = c;
            v.msgs = &m;
            v.n_msgs = 1;
            fz_check_chat(&v, &L, true);
            fz_render_like_server(tok, &v);
        }
    }
    srv_chat_free(&c);
    json_decref(o);
    return 0;
}
