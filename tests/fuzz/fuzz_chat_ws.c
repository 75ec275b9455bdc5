/* fuzz_chat_ws.c: a WebSocket text frame as the server handles it (serve_ws.c): the UTF-8
 * check, jansson with duplicate keys rejected, srv_parse_chat_ws, and for an accepted chat
 * the template and tokenizer as the server's tokenize_work runs them. A rejected chat must
 * name its error (a known code and a message) and turn into a well-formed error frame. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_chat_common.h"

static fl_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    tok = fz_load_tokenizer(NULL);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bool ok = srv_utf8_valid(data, size);
    FZ_CHECK(ok == fz_utf8_ok(data, size), "srv_utf8_valid says %d, the reference says %d", ok,
             !ok);
    if (!ok)
        return 0; /* the server closes with invalid_utf8 before parsing */
    json_error_t je;
    json_t *o = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &je);
    if (!o)
        return 0;
    if (!json_is_object(o)) { /* the server answers bad_json without calling the parser */
        json_decref(o);
        return 0;
    }
    srv_limits L = fz_limits();
    srv_chat c;
    const char *code = NULL;
    char msg[FL_ERR_MSG] = "";
    int rc = srv_parse_chat_ws(o, &L, &c, &code, msg, sizeof msg);
    if (rc) {
        FZ_CHECK(rc == -1, "srv_parse_chat_ws returned %d", rc);
        fz_check_rejection(code, NULL, msg);
        /* the frame the server sends: serve_ws.c handle_chat passes the id when it is valid */
        const json_t *jid = json_object_get(o, "id");
        fz_check_error_frame(srv_id_ok(jid) ? json_string_value(jid) : NULL, code, msg);
    } else {
        fz_check_chat(&c, &L, false);
        /* the id comes back in every frame: it must be the client's, not a cut copy */
        FZ_CHECK(strlen(c.id) == json_string_length(json_object_get(o, "id")),
                 "id accepted but cut at a NUL (%zu of %zu bytes kept)", strlen(c.id),
                 json_string_length(json_object_get(o, "id")));
        fz_render_like_server(tok, &c);
    }
    srv_chat_free(&c);
    json_decref(o);
    return 0;
}
