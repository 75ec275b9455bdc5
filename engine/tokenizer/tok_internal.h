/* tok_internal.h: what the tokenizer's files (tokenizer.c, bpe.c, tok_utf8.c, detok.c,
 * chat_template.c) share. Not part of the engine's public interface: names are fl__tok_*,
 * fl__bpe_*, fl__utf8_*, fl__chat_*. */
#ifndef FL_TOK_INTERNAL_H
#define FL_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

#define FL_TOK_MAX_STAGES 8   /* pre-tokenizer stages after flattening Sequences */
#define FL_TOK_MAX_FORMS 4    /* Unicode normalisation forms in a normalizer Sequence */
#define FL_TOK_MAX_ID (1 << 24)
#define FL_TOK_SLOTS 8        /* encoder scratch slots: concurrent encodes without blocking */

/* ---- UTF-8 (tok_utf8.c) ---- */

/* Classifies the UTF-8 sequence starting at s[0] (n >= 1 bytes available):
 *  1: a valid character of *len bytes (*cp set);
 *  0: invalid; *len is its maximal subpart (>= 1 byte), to be replaced by one U+FFFD;
 * -1: a valid but incomplete prefix of *len == n bytes (more input could complete it). */
int fl__utf8_classify(const unsigned char *s, size_t n, size_t *len, uint32_t *cp);
/* Length of the longest valid UTF-8 prefix of s (n when all of it is valid). */
size_t fl__utf8_valid_prefix(const unsigned char *s, size_t n);
/* Appends s to out with every maximal subpart of an invalid sequence (also a truncated one
 * at the end) replaced by U+FFFD. */
int fl__utf8_append_lossy(fl_buf *out, const unsigned char *s, size_t n);
/* True for Unicode White_Space (what Oniguruma's and Rust's \s and char::is_whitespace use). */
bool fl__utf8_is_white_space(uint32_t cp);
/* Encodes cp into o (4 bytes room); returns the byte count. */
int fl__utf8_put(unsigned char *o, uint32_t cp);

/* Unicode normalisation forms (normalizer types NFC, NFD, NFKC, NFKD). */
typedef enum { FL_NF_NFC = 0, FL_NF_NFD, FL_NF_NFKC, FL_NF_NFKD, FL_NF_COUNT } fl_nf;

/* "Inert" code points for a form: normalisation never changes them and never merges them with
 * what precedes (combining class 0, not the second half of a composition, unchanged alone), so
 * a text can be normalised piecewise, cutting before every inert code point. A bitmap for the
 * first planes, properties above. */
typedef struct fl__nf_table {
    uint8_t *bits[FL_NF_COUNT]; /* (0x30000 / 8) each, NULL when the form is unused */
} fl__nf_table;
int fl__nf_table_build(fl__nf_table *tb, fl_nf form);
void fl__nf_table_free(fl__nf_table *tb);
bool fl__nf_inert(const fl__nf_table *tb, fl_nf form, uint32_t cp);

/* Scratch for normalisation, owned by an encoder slot. */
typedef struct fl__nf_scratch {
    int32_t *u32;   /* (cap) code points, then re-encoded UTF-8 in place */
    size_t cap;
} fl__nf_scratch;
/* Appends the normalisation of s (valid UTF-8) in `form` to out. Only the short runs that hold
 * a non-inert code point go through utf8proc. */
int fl__nf_apply(const fl__nf_table *tb, fl_nf form, const char *s, size_t n, fl_buf *out,
                 fl__nf_scratch *sc);
/* True when s is unchanged by `form` for certain (all code points inert). */
bool fl__nf_quick_yes(const fl__nf_table *tb, fl_nf form, const char *s, size_t n);

/* ---- JSON (tok_json.c): an arena DOM for tokenizer files ---- */

typedef enum {
    FL_JSON_NULL = 0,
    FL_JSON_FALSE,
    FL_JSON_TRUE,
    FL_JSON_NUMBER,
    FL_JSON_STRING,
    FL_JSON_ARRAY,
    FL_JSON_OBJECT,
} fl__json_type;

typedef struct fl__json {
    uint8_t type;          /* fl__json_type */
    bool is_int;           /* a number that is an integer in int64 range: i, else num */
    uint32_t n;            /* string bytes, array items, object members */
    union {
        const char *str;             /* NUL-terminated, valid UTF-8 (may hold NULs: use n) */
        struct fl__json *items;      /* array: n values; object: n (key, value) pairs */
        int64_t i;
        double num;
    };
} fl__json;

typedef struct fl__json_block {
    struct fl__json_block *next;
    size_t cap, used;
    char data[];
} fl__json_block;

typedef struct fl__json_doc {
    fl__json root;
    fl__json_block *blocks;
} fl__json_doc;

/* Parses text; on failure err holds "malformed JSON at line L column C: why". */
int fl__json_parse(const char *text, size_t n, fl__json_doc *doc, char *err, size_t errn);
void fl__json_free(fl__json_doc *doc);
/* obj[key] (first match), NULL when obj is not an object or lacks the key. */
const fl__json *fl__json_get(const fl__json *obj, const char *key);
static inline const char *fl__json_str(const fl__json *v)
{
    return v && v->type == FL_JSON_STRING ? v->str : NULL;
}
static inline bool fl__json_is(const fl__json *v, fl__json_type t) { return v && v->type == t; }

/* ---- hashing ---- */
static inline uint64_t fl__hash_bytes(const void *p, size_t n)
{
    const unsigned char *s = (const unsigned char *)p;
    uint64_t h = 0x9e3779b97f4a7c15ull ^ ((uint64_t)n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ v) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    uint64_t v = 0;
    memcpy(&v, s, n);
    h = (h ^ v ^ ((uint64_t)n << 59)) * 0x94d049bb133111ebull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

/* ---- BPE (bpe.c) ---- */

/* Merge table: pair of ids -> (rank, merged id). Open addressing, linear probing. */
typedef struct fl__pair_slot {
    uint64_t key;  /* (uint64)left << 32 | right; UINT64_MAX when empty */
    uint32_t rank;
    int32_t id;
} fl__pair_slot;

typedef struct fl__pairmap {
    fl__pair_slot *slots; /* (mask + 1) */
    uint64_t mask;
    size_t n;
} fl__pairmap;
int fl__pairmap_init(fl__pairmap *m, size_t expected);
void fl__pairmap_free(fl__pairmap *m);
/* Inserts or overwrites (a later duplicate merge wins, as in both references). */
void fl__pairmap_put(fl__pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t id);
static inline const fl__pair_slot *fl__pairmap_get(const fl__pairmap *m, int32_t a, int32_t b)
{
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint64_t i = (key * 0x9e3779b97f4a7c15ull) >> 20 & m->mask;
    for (;;) {
        const fl__pair_slot *s = &m->slots[i];
        if (s->key == key)
            return s;
        if (s->key == UINT64_MAX)
            return NULL;
        i = (i + 1) & m->mask;
    }
}

/* Word cache: bytes of a pre-token -> its ids. Bounded; cleared whole when full. */
typedef struct fl__wc_entry {
    uint64_t hash;    /* 0 when empty */
    uint32_t off;     /* into arena: key bytes, then ids (int32, aligned) */
    uint16_t klen;
    uint16_t nids;
} fl__wc_entry;

typedef struct fl__wcache {
    fl__wc_entry *tab;  /* (mask + 1) */
    uint32_t mask;
    uint32_t count;
    unsigned char *arena;
    size_t used, cap;
} fl__wcache;

/* A symbol of the word being merged. */
typedef struct fl__bpe_sym {
    int32_t id;
    int32_t prev, next; /* -1 at the ends */
} fl__bpe_sym;

typedef struct fl__bpe_cand {
    uint32_t rank;
    int32_t pos;    /* left symbol's index in the word */
    int32_t id;     /* merged id */
    int32_t left;   /* ids the two symbols had when pushed: a changed one makes it stale */
    int32_t right;
} fl__bpe_cand;

/* Per-slot scratch of the merger. */
typedef struct fl__bpe_scratch {
    fl__bpe_sym *sym;     /* (cap) */
    uint32_t *rank;       /* (cap) rank of the pair starting at each symbol (small words) */
    size_t cap;
    fl__bpe_cand *heap;   /* (hcap) */
    size_t hcap;
    fl__wcache cache;
} fl__bpe_scratch;

/* ---- the tokenizer ---- */

enum { FL_TOKF_ADDED = 1, FL_TOKF_SPECIAL = 2 };

typedef struct fl__added {
    int32_t id;
    char *content;     /* as in tokenizer.json */
    size_t len;
    char *norm;        /* content after the normalizer (normalized tokens), else NULL */
    size_t norm_len;
    bool lstrip, rstrip, single_word, normalized, special;
} fl__added;

/* Byte trie of added-token contents; longest match wins. */
typedef struct fl__trie_node {
    int32_t child, sibling; /* first child, next sibling; -1 none */
    int32_t token;          /* index into added[], -1 if no token ends here */
    unsigned char byte;
} fl__trie_node;

typedef struct fl__trie {
    fl__trie_node *nodes; /* node 0 is the root */
    size_t n, cap;
    uint8_t first[256];   /* 1 when some token starts with that byte */
} fl__trie;

typedef enum { FL_ST_SPLIT = 0, FL_ST_BYTELEVEL } fl__stage_kind;
typedef enum {
    FL_SPLIT_ISOLATED = 0,
    FL_SPLIT_REMOVED,
    FL_SPLIT_MERGED_PREV,
    FL_SPLIT_MERGED_NEXT,
} fl__split_behavior;

typedef struct fl__stage {
    fl__stage_kind kind;
    pcre2_code *re;          /* SPLIT, or BYTELEVEL with use_regex; NULL otherwise */
    bool jit;
    fl__split_behavior behavior;
    bool add_prefix_space;   /* BYTELEVEL */
} fl__stage;

typedef struct fl__slot {
    pthread_mutex_t mu;
    int32_t *ids;           /* (idcap) output of the encode in progress */
    size_t nids, idcap;
    fl_buf clean;           /* input with invalid UTF-8 replaced */
    fl_buf norm[FL_TOK_MAX_FORMS]; /* normalised segment, one per form of the sequence */
    fl__nf_scratch nf;
    fl_buf pfx[FL_TOK_MAX_STAGES]; /* " " + piece, for ByteLevel add_prefix_space */
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jstack;
    fl__bpe_scratch bpe;
    int err;                /* first error inside the pipeline (FL_ENOMEM) */
} fl__slot;

struct fl_tokenizer {
    int n_ids;                  /* highest id + 1 */
    uint32_t *str_off;          /* (n_ids + 1) token strings in str_arena; UINT32_MAX = no token */
    uint32_t *str_len;          /* (n_ids) */
    char *str_arena;            /* NUL-terminated strings */
    uint32_t *byt_off;          /* (n_ids) decoded bytes of each token in byt_arena */
    uint32_t *byt_len;          /* (n_ids) */
    unsigned char *byt_arena;
    uint8_t *flags;             /* (n_ids) FL_TOKF_* */

    /* token string -> id (vocab and added tokens) */
    int32_t *smap;              /* (smask + 1) ids, -1 empty */
    uint32_t *smap_hash;        /* (smask + 1) */
    uint64_t smask;

    /* model: BPE over bytes */
    int32_t byte_id[256];       /* id of each single byte's token, -1 if absent */
    fl__pairmap merges;
    bool ignore_merges;
    int32_t unk_id;             /* -1 when none */
    /* raw bytes -> id, only built when ignore_merges */
    int32_t *bmap;
    uint64_t bmask;

    /* normalizer */
    fl_nf forms[FL_TOK_MAX_FORMS];
    int n_forms;
    fl__nf_table nft;

    /* pre-tokenizer */
    fl__stage stages[FL_TOK_MAX_STAGES];
    int n_stages;

    /* added tokens */
    fl__added *added;
    size_t n_added;
    fl__trie trie_raw[2];   /* unnormalized tokens: [0] without special ones, [1] all */
    fl__trie trie_norm[2];  /* normalized tokens, same split */

    /* encoder slots (the only mutable state; each behind its own mutex) */
    pthread_mutex_t slots_mu;
    fl__slot *slots[FL_TOK_SLOTS];
    int n_slots;
    unsigned next_wait;     /* which busy slot the next waiter queues on */

    /* chat template */
    fl_chat_kind chat;
    char *chat_template;     /* the Jinja text, NULL when none */
    char *chat_source;       /* where it came from, for messages */
    char *default_system;    /* ChatML: the template's default system prompt */
    char *chat_none_reason;  /* why there is no template, for fl_chat_render's error */
};

/* Makes room for `more` ids in the slot's output. */
static inline int fl__slot_reserve(fl__slot *s, size_t more)
{
    if (s->nids + more <= s->idcap)
        return 0;
    size_t cap = s->idcap ? s->idcap : 1024;
    while (cap < s->nids + more)
        cap *= 2;
    int32_t *p = realloc(s->ids, cap * sizeof *p);
    if (!p)
        return FL_ENOMEM;
    s->ids = p;
    s->idcap = cap;
    return 0;
}

/* bpe.c: appends the ids of one pre-token (raw bytes) to the slot's output. */
int fl__bpe_encode_word(const fl_tokenizer *t, fl__slot *s, const unsigned char *w, size_t n);
void fl__bpe_scratch_free(fl__bpe_scratch *b);

/* chat_template.c */
/* The default system prompt a ChatML template writes when the first message is not a system
 * message ("You are a helpful assistant." style); malloc'd, NULL when the template has none. */
char *fl__chat_default_system(const char *jinja);

#endif
