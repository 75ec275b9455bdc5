/* bench_common.c: see bench_common.h. */
#include "bench_common.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend_select.h"
#include "tokenizer/tokenizer.h"

int fl_bench_load(const fl_model *m, const char *file, int n, const char *system, const char *who,
                  fl_bench_item **out, size_t *max_prompt)
{
    *out = NULL;
    *max_prompt = 0;
    json_error_t je;
    json_t *arr = json_load_file(file, 0, &je);
    if (!arr || !json_is_array(arr) || json_array_size(arr) == 0) {
        fprintf(stderr, "fogline bench %s: %s: %s\n", who, file, arr ? "not a non-empty JSON array" : je.text);
        json_decref(arr);
        return -1;
    }
    if ((size_t)n > json_array_size(arr))
        n = (int)json_array_size(arr);
    fl_bench_item *items = calloc((size_t)n, sizeof *items);
    if (!items) {
        json_decref(arr);
        fprintf(stderr, "fogline bench %s: out of memory\n", who);
        return -1;
    }
    fl_err e = {0};
    for (int i = 0; i < n; i++) {
        json_t *o = json_array_get(arr, (size_t)i), *ms = json_object_get(o, "messages");
        fl_chat_msg msgs[33];
        size_t nm = 0;
        if (system)
            msgs[nm++] = (fl_chat_msg){"system", system};
        for (size_t k = 0; k < json_array_size(ms) && nm < 33; k++) {
            json_t *mm = json_array_get(ms, k);
            const char *role = json_string_value(json_object_get(mm, "role"));
            const char *content = json_string_value(json_object_get(mm, "content"));
            if (role && content)
                msgs[nm++] = (fl_chat_msg){role, content};
        }
        if (nm == (system ? 1u : 0u) || fl_bench_encode(m, msgs, nm, &items[i].ids, &items[i].n, &e)) {
            fprintf(stderr, "fogline bench %s: %s: item %d: %s\n", who, file, i,
                    nm == (system ? 1u : 0u) ? "no messages" : e.msg);
            fl_bench_items_free(items, n);
            json_decref(arr);
            return -1;
        }
        const char *want = json_string_value(json_object_get(o, "reply"));
        items[i].want = want ? strdup(want) : NULL;
        if (items[i].n > *max_prompt)
            *max_prompt = items[i].n;
    }
    json_decref(arr);
    *out = items;
    return n;
}

void fl_bench_sink(const fl_event *ev, void *ctx)
{
    fl_bench_out *o = ctx;
    if (ev->type != FL_EV_DONE)
        return;
    free(o->text);
    o->text = strndup(ev->text, ev->text_len);
    o->st = *ev->stats;
    o->done = 1;
}

int fl_bench_encode(const fl_model *m, const fl_chat_msg *msgs, size_t n, int32_t **ids, size_t *n_ids,
                    fl_err *e)
{
    fl_buf text = {0};
    fl_chat_opts co = {.add_generation_prompt = true};
    int rc = fl_chat_render(m->tok, msgs, n, &co, &text, e) ||
             fl_tokenizer_encode(m->tok, text.data, text.len, true, ids, n_ids, e);
    fl_buf_free(&text);
    return rc ? -1 : 0;
}

void fl_bench_items_free(fl_bench_item *items, int n)
{
    for (int i = 0; items && i < n; i++) {
        free(items[i].ids);
        free(items[i].want);
    }
    free(items);
}

int fl_bench_env_open(fl_bench_env *env, const char *who, const char *model_dir, const char *file,
                      int n, int conc, int max_tokens, int threads, const char *device,
                      fl_wformat weights)
{
    memset(env, 0, sizeof *env);
    fl_err e = {0};
    if (fl_model_load(&env->m, model_dir, NULL, &e)) {
        fprintf(stderr, "fogline bench %s: %s\n", who, e.msg);
        return 1;
    }
    env->n = fl_bench_load(env->m, file, n, NULL, who, &env->items, &env->max_prompt);
    if (env->n < 0) {
        env->n = 0;
        fl_bench_env_close(env);
        return 1;
    }
    int32_t B = env->m->cfg.block_size;
    int32_t per_seq = (int32_t)(env->max_prompt + (size_t)max_tokens) / B + 8;
    fl_backend_opts bo = {.n_pages = per_seq * conc + 16, .n_threads = threads,
                          .max_tokens = conc * (int32_t)(env->max_prompt + 8 * (size_t)B),
                          .weights = weights};
    if (fl_backend_open(&env->b, env->m, &bo, device, env->chosen, sizeof env->chosen, &e)) {
        fprintf(stderr, "fogline bench %s: %s\n", who, e.msg);
        fl_bench_env_close(env);
        return 1;
    }
    return 0;
}

void fl_bench_env_close(fl_bench_env *env)
{
    fl_bench_items_free(env->items, env->n);
    fl_backend_destroy(env->b);
    fl_model_free(env->m);
    memset(env, 0, sizeof *env);
}

static int fl_parse_wformat(const char *s, int *out, fl_err *e)
{
    fl_wformat f = FL_WEIGHTS_AUTO;
    int rc = fl_wformat_parse(s, &f, e);
    *out = (int)f;
    return rc;
}

static int fl_parse_kvformat(const char *s, int *out, fl_err *e)
{
    fl_kvformat f = FL_KV_AUTO;
    int rc = fl_kvformat_parse(s, &f, e);
    *out = (int)f;
    return rc;
}

/* A comma list of the names `parse` takes, each once at most, for `flag`. */
static int fl_bench_list(const char *flag, int (*parse)(const char *, int *, fl_err *),
                         const char *list, int *out, int cap, char *err, size_t err_cap)
{
    int n = 0;
    for (const char *s = list;;) {
        size_t len = strcspn(s, ",");
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), s);
        fl_err e = {0};
        int f;
        if (parse(name, &f, &e)) {
            snprintf(err, err_cap, "%s %.100s (in the list '%.60s')", flag, e.msg, list);
            return -1;
        }
        for (int i = 0; i < n; i++)
            if (out[i] == f) {
                snprintf(err, err_cap, "%s lists '%s' twice", flag, name);
                return -1;
            }
        if (n == cap) {
            snprintf(err, err_cap, "%s lists more than %d formats", flag, cap);
            return -1;
        }
        out[n++] = f;
        if (!s[len])
            return n;
        s += len + 1;
    }
}

int fl_bench_formats(const char *list, fl_wformat *out, int cap, char *err, size_t err_cap)
{
    int v[FL_WEIGHTS_COUNT];
    int n = fl_bench_list("--weights", fl_parse_wformat, list, v,
                          cap < FL_WEIGHTS_COUNT ? cap : FL_WEIGHTS_COUNT, err, err_cap);
    for (int i = 0; i < n; i++)
        out[i] = (fl_wformat)v[i];
    return n;
}

int fl_bench_kvformats(const char *list, fl_kvformat *out, int cap, char *err, size_t err_cap)
{
    int v[FL_KV_COUNT];
    int n = fl_bench_list("--kv-format", fl_parse_kvformat, list, v,
                          cap < FL_KV_COUNT ? cap : FL_KV_COUNT, err, err_cap);
    for (int i = 0; i < n; i++)
        out[i] = (fl_kvformat)v[i];
    return n;
}

int fl_bench_device_arg(const char *who, const char *arg, const char **device)
{
    if (!fl_backend_device_valid(arg) || !*arg) {
        fprintf(stderr, "fogline bench %s: --device must be auto, cpu or cuda, got '%s'\n", who,
                arg);
        return 2;
    }
    *device = arg;
    return 0;
}
