/* gen_opts.h: the decoding flags shared by `generate`, `bench decode` and `serve`. */
#ifndef FL_GEN_OPTS_H
#define FL_GEN_OPTS_H

#include <getopt.h>
#include <stdio.h>

#include "config.h"
#include "decode.h"

typedef struct fl_gen_opts {
    fl_decode_opts dec; /* the flags' values over the generic defaults until resolved */
    uint32_t set;       /* the fields a flag or --preset set (FL_DF_BIT) */
    uint32_t explicit_set; /* of those, the ones a flag of their own set: a preset, whenever
                              it comes, leaves them alone */
    bool seed_set;      /* --seed was given */
    int max_tokens;
    char **stop;
    int n_stop;
} fl_gen_opts;

void fl_gen_opts_default(fl_gen_opts *g);
void fl_gen_opts_free(fl_gen_opts *g);
void fl_gen_opts_usage(FILE *f);
/* Appends the decoding options after base[0..nbase) into opts (terminated); returns count. */
int fl_gen_opts_longopts(struct option *opts, int cap, const struct option *base, int nbase);
/* A whole decimal integer in [lo, hi]: 0, or -1 for anything else (junk, overflow, range).
 * Shared by every subcommand's flag parsing. */
int fl_parse_long(const char *s, long lo, long hi, long *out);
/* Applies one parsed option. Returns 0, or -1 with a message in err. */
int fl_gen_opts_apply(fl_gen_opts *g, int code, const char *arg, char *err, size_t errlen);
/* Once the model is known: g->dec becomes the model's defaults (family, then the model
 * directory's) with the flags that were given on top; src (may be NULL) gets each field's
 * source. Fails (message in err) when the result is inconsistent. */
/* {"decoding": {field: value}, "decoding_source": {field: "family"|"model"|"flag"}} members
 * set into obj (info --json, /v1/models). Returns 0, or -1 when out of memory. */
struct json_t;
int fl_gen_opts_json(struct json_t *obj, const fl_decode_opts *d, const uint8_t src[FL_DF_COUNT]);
/* One line per field for people: "  threshold      0.9          (family)". */
void fl_gen_opts_print(FILE *f, const fl_decode_opts *d, const uint8_t src[FL_DF_COUNT]);
int fl_gen_opts_resolve(fl_gen_opts *g, const fl_config *c, uint8_t src[FL_DF_COUNT], char *err,
                        size_t errlen);

#endif
