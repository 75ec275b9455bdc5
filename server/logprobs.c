/* logprobs.c: the OpenAI shapes of a reply's log probabilities (logprobs.h). */
#include "logprobs.h"

#include <math.h>

json_t *srv_lp_token(const fl_tokenizer *tok, int32_t id, float lp)
{
    json_t *o = json_object(), *b = json_array();
    fl_buf t = {0};
    fl_err e = {0};
    size_t n = 0;
    const unsigned char *raw = fl_tokenizer_token_bytes(tok, id, &n);
    bool ok = o && b && !fl_tokenizer_decode(tok, &id, 1, false, &t, &e) && !t.err;
    if (ok && !raw) { /* an added token: the bytes of its text */
        raw = (const unsigned char *)t.data;
        n = t.len;
    }
    for (size_t i = 0; ok && i < n; i++)
        ok = !json_array_append_new(b, json_integer(raw[i]));
    ok = ok && !json_object_set_new(o, "token", json_stringn(t.data ? t.data : "", t.len)) &&
         !json_object_set_new(o, "logprob", json_real(isfinite(lp) ? lp : -9999.0)) &&
         !json_object_set(o, "bytes", b);
    json_decref(b);
    fl_buf_free(&t);
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *srv_lp_content(const fl_tokenizer *tok, const int32_t *ids, const float *lps,
                       const int32_t *top_ids, const float *top_lps, int32_t n, int32_t k)
{
    json_t *content = json_array();
    bool ok = content != NULL;
    for (int32_t i = 0; ok && i < n; i++) {
        json_t *t = srv_lp_token(tok, ids[i], lps[i]), *top = json_array();
        ok = t && top;
        for (int32_t j = 0; ok && j < k; j++) {
            size_t at = (size_t)i * (size_t)k + (size_t)j;
            json_t *a = srv_lp_token(tok, top_ids[at], top_lps[at]);
            ok = a && !json_array_append_new(top, a);
        }
        ok = ok && !json_object_set(t, "top_logprobs", top) && !json_array_append(content, t);
        json_decref(top);
        json_decref(t);
    }
    if (!ok) {
        json_decref(content);
        return NULL;
    }
    return content;
}

/* Unicode characters (code points) in n bytes of UTF-8. */
static size_t utf8_chars(const char *p, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)p[i] & 0xC0) != 0x80;
    return c;
}

json_t *srv_lp_legacy(const fl_tokenizer *tok, const int32_t *ids, const float *lps,
                      const int32_t *top_ids, const float *top_lps, int32_t n, int32_t k,
                      fl_detok *dt, size_t *chars)
{
    json_t *o = json_object(), *toks = json_array(), *vals = json_array(), *tops = json_array();
    json_t *offs = json_array();
    bool ok = o && toks && vals && tops && offs;
    for (int32_t i = 0; ok && i < n; i++) {
        json_t *t = srv_lp_token(tok, ids[i], lps[i]), *top = json_object();
        ok = t && top && !json_array_append_new(offs, json_integer((json_int_t)*chars));
        fl_buf piece = {0};
        ok = ok && !fl_detok_push(dt, ids[i], &piece) && !piece.err;
        *chars += utf8_chars(piece.data, piece.len);
        fl_buf_free(&piece);
        for (int32_t j = 0; ok && j < k; j++) {
            size_t at = (size_t)i * (size_t)k + (size_t)j;
            json_t *a = srv_lp_token(tok, top_ids[at], top_lps[at]);
            ok = a && !json_object_set(top, json_string_value(json_object_get(a, "token")),
                                       json_object_get(a, "logprob"));
            json_decref(a);
        }
        /* the chosen token is always among them, as OpenAI's legacy answer has it */
        ok = ok && !json_object_set(top, json_string_value(json_object_get(t, "token")),
                                    json_object_get(t, "logprob")) &&
             !json_array_append(toks, json_object_get(t, "token")) &&
             !json_array_append(vals, json_object_get(t, "logprob")) &&
             !json_array_append(tops, top);
        json_decref(top);
        json_decref(t);
    }
    ok = ok && !json_object_set(o, "tokens", toks) && !json_object_set(o, "token_logprobs", vals) &&
         !json_object_set(o, "top_logprobs", tops) && !json_object_set(o, "text_offset", offs);
    json_decref(toks);
    json_decref(vals);
    json_decref(tops);
    json_decref(offs);
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}
