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

/* The decoding options' own limits (the block-shaped ones are in fl_limits.h): steps per
 * block for LLaDA2.0's quota schedule, and post steps of an edited block. */
#define FL_MAX_STEPS 4096
#define FL_MAX_POST_STEPS 1024

/* edit_threshold's value when token editing is off (JSON false) */
#define FL_EDIT_OFF (-1.0f)

typedef struct fl_decode_opts {
    fl_policy policy;
    float threshold;     /* threshold, dynamic (0.9) */
    int k;               /* static: tokens per step; dynamic: quota per step */
    int steps;           /* static, dynamic: > 0 replaces k by LLaDA2.0's schedule of quotas
                            for this many steps per block (fl_steps_quota); 0: off */
    float entropy_bound; /* entropy (0.35 nats) */
    float edit_threshold; /* LLaDA2.1 token editing: a decided reply position of the running
                             block is rewritten when the model's token for it differs with
                             p > this; FL_EDIT_OFF: no editing (and no post steps) */
    int max_post_steps;  /* editing: steps a block may take after its last mask (16) */
    bool store_overlap;  /* store a finished block in the next block's first forward */
    bool pipeline;       /* multi-block (D2F / MBD-LMs) */
    float tau_add;       /* add the next block when the last one is this unmasked */
    float tau_act;       /* a block is fully active once its predecessor is this unmasked */
    float tau_conf;      /* a semi-active block commits only tokens above this */
    int max_blocks;      /* running blocks per sequence when pipelining */
    float temperature;   /* 0: greedy */
    int top_k;           /* 0: off */
    float top_p;         /* 1: off */
    float min_p;         /* a token below min_p times the likeliest one's probability is
                            excluded (after top_k and top_p); 0: off */
    uint64_t seed;
} fl_decode_opts;

/* The options a model, a flag or a request may set as a default, by their JSON names (the
 * protocol's "decoding" keys, and temperature/top_k/top_p/min_p). The seed is per request. */
typedef enum fl_dec_field {
    FL_DF_POLICY = 0,
    FL_DF_THRESHOLD,
    FL_DF_K,
    FL_DF_STEPS,
    FL_DF_ENTROPY_BOUND,
    FL_DF_EDIT_THRESHOLD,
    FL_DF_MAX_POST_STEPS,
    FL_DF_OVERLAP,
    FL_DF_PIPELINE,
    FL_DF_TAU_ADD,
    FL_DF_TAU_ACT,
    FL_DF_TAU_CONF,
    FL_DF_MAX_BLOCKS,
    FL_DF_TEMPERATURE,
    FL_DF_TOP_K,
    FL_DF_TOP_P,
    FL_DF_MIN_P,
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
/* Checks ranges and combinations (token editing runs one block at a time: no pipelining);
 * the message names the option. For options that are complete (a request, resolved flags). */
int fl_decode_opts_check(const fl_decode_opts *o, fl_err *e);
/* Ranges only: for a partial set of options that later sources complete (flags and config
 * objects over the generic defaults, before the model's own are known). */
int fl_decode_opts_check_ranges(const fl_decode_opts *o, fl_err *e);
/* Named presets, LLaDA2.1's model card modes: "quality" (threshold 0.7, edit_threshold 0.5)
 * and "speed" (threshold 0.5, edit_threshold 0). Each also sets policy threshold,
 * max_post_steps 16 and pipeline false (editing runs one block at a time). Sets those fields
 * in o and their bits in *set; FL_EINVAL for an unknown name (o untouched). */
int fl_decode_preset(const char *name, fl_decode_opts *o, uint32_t *set);
/* "quality, speed": for messages that list the names */
#define FL_DECODE_PRESETS "quality, speed"
/* The LLaDA2 family's defaults over fogline's (family_defaults in config.c calls it for
 * LLaDA2.0/2.1 models): the authors' generate, policy dynamic with steps 32 and threshold 0.95,
 * one block at a time, no token editing (LLaDA2.1's modes are the presets). */
void fl_decode_opts_llada2(fl_decode_opts *o);
/* LLaDA2.0's per-step quota (the authors' generate, modeling_llada2_moe.py): a block of
 * `block` positions gets s = min(steps, max_tokens) steps, step i (0-based) unmasking
 * block / s positions, one more in the first block % s steps. At least 1 (past the schedule
 * too: a block that still has masks must make progress). */
int fl_steps_quota(int steps, int max_tokens, int block, int step);
const char *fl_policy_name(fl_policy p);
int fl_policy_parse(const char *s, fl_policy *out); /* 0 or FL_EINVAL */

const char *fl_dec_field_name(fl_dec_field f);   /* "threshold", "pipeline", ... */
const char *fl_dec_source_name(fl_dec_source s); /* "family", "model", "flag", "request" */
/* Copies the fields in mask from src to dst and records source s for each in src_of. */
void fl_decode_opts_overlay(fl_decode_opts *dst, uint8_t src_of[FL_DF_COUNT],
                            const fl_decode_opts *src, uint32_t mask, fl_dec_source s);
/* Writes field f's value as JSON text ("0.9", "true", "\"threshold\"") into buf. */
void fl_dec_field_json(const fl_decode_opts *o, fl_dec_field f, char *buf, size_t cap);

/* Parses a JSON object of decoding defaults (keys as fl_dec_field_name, plus "preset": a
 * preset's name, applied first so that the object's own keys win) into o, setting a bit in
 * *set for each field given; `where` prefixes messages ("config.json: fogline.decoding").
 * Unknown keys, wrong types and out-of-range values are errors that name the key; the
 * result's ranges are checked, not its combinations (fl_decode_opts_check_ranges). obj is a
 * jansson json_t (opaque here so that this header needs no jansson). */
struct json_t;
int fl_decode_opts_parse_json(const struct json_t *obj, const char *where, fl_decode_opts *o,
                              uint32_t *set, fl_err *e);

#endif
