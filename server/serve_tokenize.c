/* serve_tokenize.c: POST /tokenize and POST /detokenize (serve_tokenize.h). */
#include "serve_tokenize.h"
#include "serve_request.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct srv_tok_job {
    uv_work_t work;
    srv *s;
    srv_tokenize t;
    srv_tok_done done;
    void *owner; /* NULL once detached */
    /* the work's results */
    int rc;
    fl_err err;
    const char *param;
    fl_buf text; /* messages: the rendered prompt */
    int32_t *ids;
    size_t n_ids;
};

static void job_free(srv_tok_job *j)
{
    srv_chat_free(&j->t.chat);
    fl_buf_free(&j->text);
    free(j->ids);
    free(j);
}

/* Work pool: the prompt as /v1/completions tokenizes it, or the messages rendered as chat
   completions render them (the generation prompt unless asked not to), then tokenized. */
static void tok_work(uv_work_t *w)
{
    srv_tok_job *j = w->data;
    const fl_tokenizer *tok = j->s->model->tok;
    const srv_chat *c = &j->t.chat;
    if (c->raw) {
        j->rc = fl_tokenizer_encode(tok, c->prompts[0].text, c->prompts[0].len, true, &j->ids,
                                    &j->n_ids, &j->err);
        j->param = "prompt";
        return;
    }
    j->rc = srv_chat_render_prompt(tok, c, c->msgs, (const char *const *)c->calls, c->n_msgs,
                                   j->t.add_generation_prompt,
                                   &j->text, &j->err, &j->param);
    if (!j->rc && j->text.err)
        j->rc = fl_err_set(&j->err, FL_ENOMEM, "out of memory");
    if (!j->rc)
        j->rc = fl_tokenizer_encode(tok, j->text.data ? j->text.data : "", j->text.len, true,
                                    &j->ids, &j->n_ids, &j->err);
}

static void set_error(srv_tok_answer *a, int status, const char *code, const char *param,
                      const char *msg)
{
    a->status = status;
    a->code = code;
    a->param = param;
    a->body = NULL;
    snprintf(a->msg, sizeof a->msg, "%s", msg);
}

/* {"count", "max_model_len", "tokens"[, "token_strs"][, "prompt"]}; NULL when out of memory. */
static json_t *tok_body(const srv_tok_job *j)
{
    const fl_tokenizer *tok = j->s->model->tok;
    json_t *o = json_object(), *ids = json_array();
    json_t *strs = j->t.token_strs ? json_array() : NULL;
    bool ok = o && ids && (strs || !j->t.token_strs);
    for (size_t i = 0; ok && i < j->n_ids; i++) {
        ok = !json_array_append_new(ids, json_integer(j->ids[i]));
        if (ok && strs) { /* the vocabulary's own string of the id ("Ġhello"), as vLLM's */
            const char *ts = fl_tokenizer_token(tok, j->ids[i]);
            ok = !json_array_append_new(strs, ts ? srv_json_text(ts) : json_null());
        }
    }
    ok = ok && !json_object_set_new(o, "count", json_integer((json_int_t)j->n_ids)) &&
         !json_object_set_new(o, "max_model_len", json_integer(j->s->model->cfg.max_pos)) &&
         !json_object_set(o, "tokens", ids) &&
         (!strs || !json_object_set(o, "token_strs", strs)) &&
         (j->t.chat.raw ||
          !json_object_set_new(o, "prompt", json_stringn(j->text.data ? j->text.data : "",
                                                         j->text.len)));
    json_decref(ids);
    json_decref(strs);
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static void tok_done(uv_work_t *w, int status)
{
    srv_tok_job *j = w->data;
    if (!j->owner) {
        job_free(j);
        return;
    }
    srv_tok_answer a = {0};
    if (status == UV_ECANCELED) {
        set_error(&a, 503, SRV_E_SHUTTING_DOWN, NULL, "the server is shutting down");
    } else if (j->rc == FL_ENOMEM) {
        set_error(&a, 500, SRV_E_INTERNAL, NULL, "out of memory");
    } else if (j->rc) {
        set_error(&a, 400, SRV_E_BAD_REQUEST, j->param, j->err.msg);
    } else if (srv_fault(&j->s->faults, SRV_FAULT_TOKENIZE) || !(a.body = tok_body(j))) {
        set_error(&a, 500, SRV_E_INTERNAL, NULL, "out of memory");
    } else {
        a.status = 200;
    }
    j->done(j->owner, &a);
    job_free(j);
}

srv_tok_job *srv_tokenize_start(srv *s, srv_tokenize *t, srv_tok_done done, void *owner,
                                srv_tok_answer *a)
{
    srv_tok_job *j = srv_fault(&s->faults, SRV_FAULT_TOKENIZE) ? NULL : calloc(1, sizeof *j);
    if (!j) {
        srv_chat_free(&t->chat);
        set_error(a, 500, SRV_E_INTERNAL, NULL, "out of memory");
        return NULL;
    }
    j->s = s;
    j->t = *t;
    memset(t, 0, sizeof *t);
    j->done = done;
    j->owner = owner;
    j->work.data = j;
    int rc = uv_queue_work(&s->loop, &j->work, tok_work, tok_done);
    if (rc) {
        char m[160];
        snprintf(m, sizeof m, "cannot start tokenizing: %s", uv_strerror(rc));
        set_error(a, 500, SRV_E_INTERNAL, NULL, m);
        job_free(j);
        return NULL;
    }
    return j;
}

void srv_tokenize_detach(srv_tok_job *j)
{
    if (j)
        j->owner = NULL;
}

void srv_detokenize_answer(srv *s, const srv_detokenize *d, srv_tok_answer *a)
{
    fl_buf text = {0};
    fl_err e = {0};
    json_t *o = NULL;
    memset(a, 0, sizeof *a);
    if (fl_tokenizer_decode(s->model->tok, d->ids, d->n, d->skip_special, &text, &e) ||
        text.err || !(o = json_object()) ||
        json_object_set_new(o, "prompt", json_stringn(text.data ? text.data : "", text.len))) {
        json_decref(o);
        set_error(a, 500, SRV_E_INTERNAL, NULL, e.msg[0] ? e.msg : "out of memory");
    } else {
        a->status = 200;
        a->body = o;
    }
    fl_buf_free(&text);
}
