/* bench_common.h: what the decoding benchmarks share: a prompts file ({"messages": [...],
 * "reply": "reference"} items) rendered with the model's chat template and tokenized. */
#ifndef FL_BENCH_COMMON_H
#define FL_BENCH_COMMON_H

#include "engine.h"
#include "model.h"
#include "tokenizer/tokenizer.h"

typedef struct fl_bench_item {
    int32_t *ids;
    size_t n;
    char *want; /* the reference reply, or NULL */
} fl_bench_item;

/* Loads at most n items of file, each with an optional system message put first. Returns the
 * count, or -1 after printing "fogline bench WHO: <why>" to stderr. *max_prompt: the longest. */
int fl_bench_load(const fl_model *m, const char *file, int n, const char *system, const char *who,
                  fl_bench_item **out, size_t *max_prompt);
void fl_bench_items_free(fl_bench_item *items, int n);

/* One request's outcome, filled by fl_bench_sink (pass the fl_bench_out as its ctx): at the
 * done event, text (malloc'd; an earlier text is freed) and stats, then done = 1. */
typedef struct fl_bench_out {
    char *text;
    int done;
    fl_seq_stats st;
} fl_bench_out;

void fl_bench_sink(const fl_event *ev, void *ctx);

/* A model, its prompts and a backend with KV pages and rows for `conc` sequences of the
 * longest prompt + max_tokens (fl_bench_env_open; fl_bench_env_close frees what is set). */
typedef struct fl_bench_env {
    fl_model *m;
    fl_bench_item *items;
    int n;
    size_t max_prompt;
    fl_backend *b;
    char chosen[512]; /* the backend and why (fl_backend_open) */
} fl_bench_env;

/* Loads model_dir and at most n items of file, and opens `device`. 0, or 1 after printing
 * "fogline bench WHO: <why>" to stderr (nothing left open). */
int fl_bench_env_open(fl_bench_env *env, const char *who, const char *model_dir, const char *file,
                      int n, int conc, int max_tokens, int threads, const char *device,
                      fl_wformat weights);
void fl_bench_env_close(fl_bench_env *env);

/* --device's value: sets *device, or prints "fogline bench <who>: --device must be ..." and
 * returns 2 (the usage exit status). */
int fl_bench_device_arg(const char *who, const char *arg, const char **device);

/* "f32,bf16": a comma list of fl_wformat names, each once at most, into out (cap at least
 * FL_WEIGHTS_COUNT); the count, or -1 with a message in err ("--weights ..."). */
int fl_bench_formats(const char *list, fl_wformat *out, int cap, char *err, size_t err_cap);
/* The same for --kv-format: fl_kvformat names (cap at least FL_KV_COUNT). */
int fl_bench_kvformats(const char *list, fl_kvformat *out, int cap, char *err, size_t err_cap);

/* Renders msgs with the model's chat template (generation prompt added) and tokenizes them. */
int fl_bench_encode(const fl_model *m, const fl_chat_msg *msgs, size_t n, int32_t **ids, size_t *n_ids,
                    fl_err *e);

#endif
