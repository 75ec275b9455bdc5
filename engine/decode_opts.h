/* decode_opts.h: the options of block-diffusion decoding and where each one's value comes
 * from. Kept apart from decode.h (the policies) so that a model's config can carry its own
 * defaults without depending on the backend. */
#ifndef FL_DECODE_OPTS_H
#define FL_DECODE_OPTS_H

#include "fl.h"
#include "fl_limits.h"

typedef enum fl_policy {
    FL_POLICY_SEQUENTIAL = 0, /* one token per step, the most confident */
    FL_POLICY_STATIC,         /* k per step, the most confident */
    FL_POLICY_THRESHOLD,      /* all with p > threshold, at least the most confident */
    FL_POLICY_DYNAMIC,        /* SDAR low_confidence_dynamic: p > threshold if that meets the
                                 per-step quota k, else the top k */
    FL_POLICY_ENTROPY,        /* SDAR entropy_bounded: lowest-entropy prefix whose summed
                                 entropy stays within entropy_bound, at least one */
    FL_POLICY_COUNT
} fl_policy;

typedef struct fl_decode_opts {
    fl_policy policy;
    float threshold;     /* threshold, dynamic (0.9) */
    int k;               /* static: tokens per step; dynamic: quota per step */
    float entropy_bound; /* entropy (0.35 nats) */
    bool store_overlap;  /* store a finished block in the next block's first forward */
    bool pipeline;       /* multi-block (D2F / MBD-LMs) */
    float tau_add;       /* add the next block when the last one is this unmasked */
    float tau_act;       /* a block is fully active once its predecessor is this unmasked */
    float tau_conf;      /* a semi-active block commits only tokens above this */
    int max_blocks;      /* running blocks per sequence when pipelining */
    float temperature;   /* 0: greedy */
    int top_k;           /* 0: off */
    float top_p;         /* 1: off */
    uint64_t seed;
} fl_decode_opts;

/* The options a model, a flag or a request may set as a default, by their JSON names (the
 * protocol's "decoding" keys, and temperature/top_k/top_p). The seed is per request. */
typedef enum fl_dec_field {
    FL_DF_POLICY = 0,
    FL_DF_THRESHOLD,
    FL_DF_K,
    FL_DF_ENTROPY_BOUND,
    FL_DF_OVERLAP,
    FL_DF_PIPELINE,
    FL_DF_TAU_ADD,
    FL_DF_TAU_ACT,
    FL_DF_TAU_CONF,
    FL_DF_MAX_BLOCKS,
    FL_DF_TEMPERATURE,
    FL_DF_TOP_K,
    FL_DF_TOP_P,
    FL_DF_COUNT
} fl_dec_field;

#define FL_DF_BIT(f) (1u << (f))

/* Where an effective default came from; a later source overrides an earlier one. */
typedef enum fl_dec_source {
    FL_DS_FAMILY = 0, /* the model family's authors' defaults (fogline's own for ours) */
    FL_DS_MODEL,      /* the model directory: config.json "fogline": {"decoding": {...}} */
    FL_DS_FLAG,       /* a server / command-line flag or its FOGLINE_* variable */
    FL_DS_REQUEST,    /* the request itself */
    FL_DS_COUNT
} fl_dec_source;

/* fogline's generic defaults (threshold 0.9, overlap and pipelining on); a family's own
 * start from these (fl_config_decode_defaults). */
void fl_decode_opts_default(fl_decode_opts *o);
/* Checks ranges; the message names the option. */
int fl_decode_opts_check(const fl_decode_opts *o, fl_err *e);
const char *fl_policy_name(fl_policy p);
int fl_policy_parse(const char *s, fl_policy *out); /* 0 or FL_EINVAL */

const char *fl_dec_field_name(fl_dec_field f);   /* "threshold", "pipeline", ... */
const char *fl_dec_source_name(fl_dec_source s); /* "family", "model", "flag", "request" */
/* Copies the fields in mask from src to dst and records source s for each in src_of. */
void fl_decode_opts_overlay(fl_decode_opts *dst, uint8_t src_of[FL_DF_COUNT],
                            const fl_decode_opts *src, uint32_t mask, fl_dec_source s);
/* Writes field f's value as JSON text ("0.9", "true", "\"threshold\"") into buf. */
void fl_dec_field_json(const fl_decode_opts *o, fl_dec_field f, char *buf, size_t cap);

/* Parses a JSON object of decoding defaults (keys as fl_dec_field_name) into o, setting a bit
 * in *set for each key given; `where` prefixes messages ("config.json: fogline.decoding").
 * Unknown keys, wrong types and out-of-range values are errors that name the key. obj is a
 * jansson json_t (opaque here so that this header needs no jansson). */
struct json_t;
int fl_decode_opts_parse_json(const struct json_t *obj, const char *where, fl_decode_opts *o,
                              uint32_t *set, fl_err *e);

#endif
