/* persist.h: committed KV pages leave the compute path here. Each committed page has a key
 * chained from its parent (model id, parent key, the block's token ids): same key, same KV.
 * The page is serialised as a blob (header + BF16 K/V) and handed to a tier (host memory,
 * a directory, Redis in the server). In async mode a persistence thread does the copy and
 * the put, so a slow tier never blocks a forward; sync mode does it inline (for comparison). */
#ifndef FL_PERSIST_H
#define FL_PERSIST_H

#include "backend.h"
#include "fl_limits.h"

typedef struct fl_page_key {
    uint64_t hi, lo;
} fl_page_key;

/* key = H(model_id, parent, tokens[0..n)); the first block's parent is {0, 0}. */
fl_page_key fl_page_key_chain(uint64_t model_id, fl_page_key parent, const int32_t *tokens, int n);
void fl_page_key_hex(fl_page_key k, char out[33]);

/* A page blob: a fixed header then K/V as BF16 in the backend's host page layout. */
#define FL_BLOB_MAGIC 0x564b4c46u /* "FLKV" */
#define FL_BLOB_VERSION 2 /* 2: a checksum over tokens and payload (a blob read back from
                             Redis or a disk may be damaged below a valid header) */
typedef struct fl_blob_header {
    uint32_t magic, version;
    uint64_t model_id;
    fl_page_key key;
    int32_t block_size, n_layers, n_kv_heads, head_dim;
    int32_t dtype;        /* FL_DT_BF16 */
    int32_t n_tokens;     /* == block_size */
    uint64_t payload_bytes;
    uint64_t checksum;    /* fl_hash64 of the tokens and the payload */
    int32_t tokens[];     /* (n_tokens) then the payload */
} fl_blob_header;

size_t fl_blob_size(const fl_config *c);
/* page: (page_bytes / 4) f32 values in the host layout. */
int fl_blob_encode(const fl_config *c, uint64_t model_id, fl_page_key key, const int32_t *tokens,
                   const float *page, void *blob, size_t blob_len, fl_err *e);
/* Validates the header against the config and key, and the checksum; fills page (f32) and
 * tokens. Anything that does not match is FL_EFORMAT with a message, nothing is trusted. */
int fl_blob_decode(const fl_config *c, uint64_t model_id, fl_page_key key, const void *blob,
                   size_t blob_len, int32_t *tokens, float *page, fl_err *e);

/* A tier: where page blobs go. Its owner frees it with fl_tier_destroy after everything that
 * uses it (the persister) is destroyed. */
typedef struct fl_kv_tier {
    const char *name;
    void *ctx;
    /* Stores a blob under key; may be slow; called from one thread at a time. */
    int (*put)(void *ctx, fl_page_key key, const void *blob, size_t len, fl_err *e);
    /* Fetches into blob (len bytes); FL_ENOTFOUND when absent. */
    int (*get)(void *ctx, fl_page_key key, void *blob, size_t len, fl_err *e);
    void (*destroy)(void *ctx);
} fl_kv_tier;

/* A tier of files, one per page, in dir (created if absent). fsync_each: fsync every file
 * (a durable tier; also what makes it slow enough to matter). */
int fl_tier_dir_create(fl_kv_tier **out, const char *dir, bool fsync_each, fl_err *e);
/* A bounded host-memory tier (LRU by insertion) holding at most max_bytes. */
int fl_tier_host_create(fl_kv_tier **out, size_t max_bytes, fl_err *e);
void fl_tier_destroy(fl_kv_tier *t);

/* The persister. */
typedef struct fl_persist fl_persist;
typedef struct fl_persist_job {
    int32_t page;
    fl_page_key key;
    int32_t tokens[FL_MAX_BLOCK];
    int32_t n_tokens;
} fl_persist_job;

/* A persister for b's pages into tier (NULL: pages are only counted). b and tier are borrowed
 * and must outlive it. async: a thread of its own does the copies and puts, queue_cap jobs
 * deep (0: 256); else fl_persist_submit does them inline. Every other call below comes from
 * one thread (the compute thread). FL_ENOMEM, or the thread's creation error. */
int fl_persist_create(fl_persist **out, fl_backend *b, uint64_t model_id, fl_kv_tier *tier,
                      bool async, int32_t queue_cap, fl_err *e);
/* Hands a page over (the caller holds a page ref for the persister). In sync mode the work is
 * done before returning. Returns the milliseconds the caller spent (the compute thread's
 * persistence wait). */
double fl_persist_submit(fl_persist *p, const fl_persist_job *job);
/* Pages whose persistence finished since the last call (their refs may be dropped). Returns
 * the count written into pages (at most cap). */
int fl_persist_reap(fl_persist *p, int32_t *pages, int cap);
/* Waits until every job handed over is done (put or failed). */
void fl_persist_flush(fl_persist *p);
/* Jobs handed over and not yet reaped. */
int64_t fl_persist_in_flight(fl_persist *p);
int64_t fl_persist_done_count(fl_persist *p);
int64_t fl_persist_fail_count(fl_persist *p);
/* Finishes the queued jobs, stops the thread and frees p (not b, not the tier). The pages of
 * jobs not reaped are still held by the caller's refs: reap first to drop them. */
void fl_persist_destroy(fl_persist *p);

#endif
