/* gen_opts.c: parsing of the decoding flags. */
#include "gen_opts.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

enum {
    G_MAX_TOKENS = 2000, G_POLICY, G_THRESHOLD, G_K, G_ENTROPY, G_OVERLAP, G_NO_OVERLAP,
    G_PIPELINE, G_NO_PIPELINE, G_TAU_ADD, G_TAU_ACT, G_TAU_CONF, G_MAX_BLOCKS, G_TEMP, G_TOP_K,
    G_TOP_P, G_SEED, G_STOP, G_STEPS, G_EDIT, G_MAX_POST, G_PRESET, G_MIN_P
};

static const struct option gopts[] = {
    {"max-tokens", required_argument, 0, G_MAX_TOKENS}, {"policy", required_argument, 0, G_POLICY},
    {"threshold", required_argument, 0, G_THRESHOLD},   {"k", required_argument, 0, G_K},
    {"entropy-bound", required_argument, 0, G_ENTROPY}, {"overlap", no_argument, 0, G_OVERLAP},
    {"no-overlap", no_argument, 0, G_NO_OVERLAP},       {"pipeline", no_argument, 0, G_PIPELINE},
    {"no-pipeline", no_argument, 0, G_NO_PIPELINE},     {"tau-add", required_argument, 0, G_TAU_ADD},
    {"tau-act", required_argument, 0, G_TAU_ACT},       {"tau-conf", required_argument, 0, G_TAU_CONF},
    {"max-blocks", required_argument, 0, G_MAX_BLOCKS}, {"temperature", required_argument, 0, G_TEMP},
    {"top-k", required_argument, 0, G_TOP_K},           {"top-p", required_argument, 0, G_TOP_P},
    {"seed", required_argument, 0, G_SEED},             {"stop", required_argument, 0, G_STOP},
    {"steps", required_argument, 0, G_STEPS},           {"edit-threshold", required_argument, 0, G_EDIT},
    {"max-post-steps", required_argument, 0, G_MAX_POST}, {"preset", required_argument, 0, G_PRESET},
    {"min-p", required_argument, 0, G_MIN_P},
};

void fl_gen_opts_default(fl_gen_opts *g)
{
    memset(g, 0, sizeof *g);
    fl_decode_opts_default(&g->dec);
    g->max_tokens = 256;
}

void fl_gen_opts_free(fl_gen_opts *g)
{
    for (int i = 0; i < g->n_stop; i++)
        free(g->stop[i]);
    free(g->stop);
    g->stop = NULL;
    g->n_stop = 0;
}

void fl_gen_opts_usage(FILE *f)
{
    fprintf(f, "decoding (defaults: the model's, as `fogline info` shows them: its family's authors'\n"
               "settings, then the directory's config.json fogline.decoding; a flag overrides them):\n"
               "  --max-tokens N       reply tokens at most (256)\n"
               "  --policy P           sequential | static | threshold | dynamic | entropy\n"
               "  --threshold T        confidence to unmask (threshold, dynamic)\n"
               "  --k N                tokens per step (static) / per-step quota (dynamic)\n"
               "  --steps N            static, dynamic: LLaDA2.0's quota schedule for N steps per\n"
               "                       block instead of k (0: off)\n"
               "  --entropy-bound E    summed entropy per step (entropy)\n"
               "  --overlap, --no-overlap    store a finished block in the next block's first forward\n"
               "                       (never changes outputs; on)\n"
               "  --pipeline, --no-pipeline  multi-block pipelining: a speed mode that changes outputs\n"
               "                       unless the model was trained for it (on for fogline's models)\n"
               "  --edit-threshold X   token editing (LLaDA2.1): rewrite a decided token of the\n"
               "                       running block when the model's differs with p > X; off\n"
               "                       (the default) or a number in [0, 1]; needs --no-pipeline\n"
               "  --max-post-steps N   editing: steps a block may take after its last mask (16)\n"
               "  --preset NAME        quality (threshold 0.7, edit 0.5) or speed (0.5, 0): also\n"
               "                       policy threshold, max-post-steps 16, no pipelining; other\n"
               "                       flags win over it\n"
               "  --tau-add X          start the next block when the last is X unmasked\n"
               "  --tau-act X          a block is fully active once its predecessor is X unmasked\n"
               "  --tau-conf X         a semi-active block commits only above X\n"
               "  --max-blocks N       running blocks per sequence when pipelining\n"
               "  --temperature T      0 = greedy\n"
               "  --top-k N, --top-p P\n"
               "  --seed N             the sampling seed (generate: 0); serve: where the seeds of\n"
               "                       requests without one start (random bytes)\n"
               "  --min-p P            drop tokens below P times the likeliest one's probability\n"
               "  --stop STR           stop string (repeatable)\n");
}

int fl_gen_opts_longopts(struct option *opts, int cap, const struct option *base, int nbase)
{
    int n = 0;
    int ng = (int)(sizeof gopts / sizeof gopts[0]);
    for (int i = 0; i < nbase && n < cap - 1; i++)
        opts[n++] = base[i];
    for (int i = 0; i < ng && n < cap - 1; i++)
        opts[n++] = gopts[i];
    memset(&opts[n], 0, sizeof opts[n]);
    return n;
}

static int parse_f(const char *s, float *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end)
        return -1;
    *out = (float)v;
    return 0;
}

int fl_parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int fl_gen_opts_apply(fl_gen_opts *g, int code, const char *arg, char *err, size_t errlen)
{
    long v;
    fl_decode_opts *d = &g->dec;
#define BADF(name)                                                                       \
    do {                                                                                 \
        snprintf(err, errlen, "--%s needs a number, got '%s'", name, arg);               \
        return -1;                                                                       \
    } while (0)
    switch (code) {
    case G_MAX_TOKENS:
        if (fl_parse_long(arg, 1, 1 << 20, &v)) {
            snprintf(err, errlen, "--max-tokens needs an integer in [1, 1048576], got '%s'", arg);
            return -1;
        }
        g->max_tokens = (int)v;
        break;
    case G_POLICY:
        if (fl_policy_parse(arg, &d->policy)) {
            snprintf(err, errlen, "unknown --policy '%s' (sequential, static, threshold, dynamic, entropy)", arg);
            return -1;
        }
        break;
    case G_THRESHOLD: if (parse_f(arg, &d->threshold)) BADF("threshold"); break;
    case G_ENTROPY: if (parse_f(arg, &d->entropy_bound)) BADF("entropy-bound"); break;
    case G_TAU_ADD: if (parse_f(arg, &d->tau_add)) BADF("tau-add"); break;
    case G_TAU_ACT: if (parse_f(arg, &d->tau_act)) BADF("tau-act"); break;
    case G_TAU_CONF: if (parse_f(arg, &d->tau_conf)) BADF("tau-conf"); break;
    case G_TEMP: if (parse_f(arg, &d->temperature)) BADF("temperature"); break;
    case G_TOP_P: if (parse_f(arg, &d->top_p)) BADF("top-p"); break;
    case G_MIN_P: if (parse_f(arg, &d->min_p)) BADF("min-p"); break;
    case G_EDIT: {
        float x;
        if (!strcmp(arg, "off")) {
            d->edit_threshold = FL_EDIT_OFF;
        } else if (parse_f(arg, &x) || !(x >= 0.0f && x <= 1.0f)) {
            snprintf(err, errlen, "--edit-threshold needs off or a number in [0, 1], got '%s'", arg);
            return -1;
        } else {
            d->edit_threshold = x;
        }
        break;
    }
    case G_STEPS:
        if (fl_parse_long(arg, 0, FL_MAX_STEPS, &v)) {
            snprintf(err, errlen, "--steps needs an integer in [0, %d], got '%s'", FL_MAX_STEPS, arg);
            return -1;
        }
        d->steps = (int)v;
        break;
    case G_MAX_POST:
        if (fl_parse_long(arg, 0, FL_MAX_POST_STEPS, &v)) {
            snprintf(err, errlen, "--max-post-steps needs an integer in [0, %d], got '%s'",
                     FL_MAX_POST_STEPS, arg);
            return -1;
        }
        d->max_post_steps = (int)v;
        break;
    case G_PRESET: {
        /* the preset's fields, except those a flag of their own set (before or after it) */
        fl_decode_opts p = *d;
        uint32_t pm = 0;
        if (fl_decode_preset(arg, &p, &pm)) {
            snprintf(err, errlen, "unknown --preset '%s' (" FL_DECODE_PRESETS ")", arg);
            return -1;
        }
        fl_decode_opts_overlay(d, NULL, &p, pm & ~g->explicit_set, FL_DS_FLAG);
        g->set |= pm;
        break;
    }
    case G_K:
        if (fl_parse_long(arg, 1, FL_MAX_BLOCK, &v)) {
            snprintf(err, errlen, "--k needs an integer in [1, %d], got '%s'", FL_MAX_BLOCK, arg);
            return -1;
        }
        d->k = (int)v;
        break;
    case G_MAX_BLOCKS:
        if (fl_parse_long(arg, 1, FL_MAX_RUN_BLOCKS, &v)) {
            snprintf(err, errlen, "--max-blocks needs an integer in [1, %d], got '%s'",
                     FL_MAX_RUN_BLOCKS, arg);
            return -1;
        }
        d->max_blocks = (int)v;
        break;
    case G_TOP_K:
        if (fl_parse_long(arg, 0, 1 << 24, &v)) {
            snprintf(err, errlen, "--top-k needs a non-negative integer, got '%s'", arg);
            return -1;
        }
        d->top_k = (int)v;
        break;
    case G_SEED:
        if (fl_parse_long(arg, 0, 9007199254740991L, &v)) { /* a request's range: 0..2^53-1 */
            snprintf(err, errlen, "--seed needs an integer in [0, 2^53-1], got '%s'", arg);
            return -1;
        }
        d->seed = (uint64_t)v;
        g->seed_set = true;
        break;
    case G_OVERLAP: d->store_overlap = true; break;
    case G_NO_OVERLAP: d->store_overlap = false; break;
    case G_PIPELINE: d->pipeline = true; break;
    case G_NO_PIPELINE: d->pipeline = false; break;
    case G_STOP: {
        char **ns = realloc(g->stop, sizeof(char *) * (size_t)(g->n_stop + 1));
        if (!ns || !arg[0] || !(ns[g->n_stop] = strdup(arg))) {
            if (ns)
                g->stop = ns;
            snprintf(err, errlen, arg[0] ? "out of memory" : "--stop needs a non-empty string");
            return -1;
        }
        g->stop = ns;
        g->n_stop++;
        break;
    }
    default:
        snprintf(err, errlen, "unknown option");
        return -1;
    }
    static const int field_of[] = {
        [G_POLICY - G_MAX_TOKENS] = FL_DF_POLICY + 1, [G_THRESHOLD - G_MAX_TOKENS] = FL_DF_THRESHOLD + 1,
        [G_K - G_MAX_TOKENS] = FL_DF_K + 1, [G_ENTROPY - G_MAX_TOKENS] = FL_DF_ENTROPY_BOUND + 1,
        [G_OVERLAP - G_MAX_TOKENS] = FL_DF_OVERLAP + 1, [G_NO_OVERLAP - G_MAX_TOKENS] = FL_DF_OVERLAP + 1,
        [G_PIPELINE - G_MAX_TOKENS] = FL_DF_PIPELINE + 1, [G_NO_PIPELINE - G_MAX_TOKENS] = FL_DF_PIPELINE + 1,
        [G_TAU_ADD - G_MAX_TOKENS] = FL_DF_TAU_ADD + 1, [G_TAU_ACT - G_MAX_TOKENS] = FL_DF_TAU_ACT + 1,
        [G_TAU_CONF - G_MAX_TOKENS] = FL_DF_TAU_CONF + 1, [G_MAX_BLOCKS - G_MAX_TOKENS] = FL_DF_MAX_BLOCKS + 1,
        [G_TEMP - G_MAX_TOKENS] = FL_DF_TEMPERATURE + 1, [G_TOP_K - G_MAX_TOKENS] = FL_DF_TOP_K + 1,
        [G_TOP_P - G_MAX_TOKENS] = FL_DF_TOP_P + 1, [G_STOP - G_MAX_TOKENS] = 0,
        [G_STEPS - G_MAX_TOKENS] = FL_DF_STEPS + 1, [G_EDIT - G_MAX_TOKENS] = FL_DF_EDIT_THRESHOLD + 1,
        [G_MAX_POST - G_MAX_TOKENS] = FL_DF_MAX_POST_STEPS + 1, [G_PRESET - G_MAX_TOKENS] = 0,
        [G_MIN_P - G_MAX_TOKENS] = FL_DF_MIN_P + 1,
    };
    if (field_of[code - G_MAX_TOKENS]) {
        g->set |= FL_DF_BIT(field_of[code - G_MAX_TOKENS] - 1);
        g->explicit_set |= FL_DF_BIT(field_of[code - G_MAX_TOKENS] - 1);
    }
    /* ranges only: the model's defaults complete these (pipelining, say) at resolve */
    fl_err e = {0};
    if (fl_decode_opts_check_ranges(d, &e)) {
        snprintf(err, errlen, "%s", e.msg);
        return -1;
    }
    return 0;
#undef BADF
}

int fl_gen_opts_resolve(fl_gen_opts *g, const fl_config *c, uint8_t src[FL_DF_COUNT], char *err,
                        size_t errlen)
{
    fl_decode_opts d;
    fl_config_decode_defaults(c, &d, src);
    fl_decode_opts_overlay(&d, src, &g->dec, g->set, FL_DS_FLAG);
    d.seed = g->dec.seed;
    fl_err e = {0};
    if (fl_decode_opts_check(&d, &e)) {
        snprintf(err, errlen, "%s", e.msg);
        return -1;
    }
    g->dec = d;
    return 0;
}

int fl_gen_opts_json(struct json_t *obj, const fl_decode_opts *d, const uint8_t src[FL_DF_COUNT])
{
    json_t *vals = json_object(), *srcs = json_object();
    int rc = vals && srcs ? 0 : -1;
    for (int f = 0; f < FL_DF_COUNT && !rc; f++) {
        char v[64];
        fl_dec_field_json(d, (fl_dec_field)f, v, sizeof v);
        json_t *jv = json_loads(v, JSON_DECODE_ANY, NULL);
        const char *name = fl_dec_field_name((fl_dec_field)f);
        if (!jv || json_object_set_new(vals, name, jv) ||
            json_object_set_new(srcs, name, json_string(fl_dec_source_name((fl_dec_source)src[f]))))
            rc = -1;
    }
    if (!rc && !json_object_set_new(obj, "decoding", vals)) {
        vals = NULL;
        if (!json_object_set_new(obj, "decoding_source", srcs))
            return 0;
        return -1;
    }
    json_decref(vals);
    json_decref(srcs);
    return -1;
}

void fl_gen_opts_print(FILE *f, const fl_decode_opts *d, const uint8_t src[FL_DF_COUNT])
{
    for (int i = 0; i < FL_DF_COUNT; i++) {
        char v[64];
        fl_dec_field_json(d, (fl_dec_field)i, v, sizeof v);
        fprintf(f, "  %-15s %-12s (%s)\n", fl_dec_field_name((fl_dec_field)i), v,
                fl_dec_source_name((fl_dec_source)src[i]));
    }
}
