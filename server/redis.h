/* redis.h: fogline's Redis client on the server's libuv loop (hiredis 0.14 async API with our
 * own libuv adapter: Debian's drops connection errors, ../shared/STACK.md).
 *
 * Redis is a cache here, never a dependency: every command either gets its reply or, when
 * Redis is down, slow, restarting or answering garbage, a NULL reply within the request
 * deadline; the caller then goes on without it. The client connects in the background,
 * reconnects with backoff, and drops a connection that stops answering (a SIGSTOPped or hung
 * server), so the loop never waits on Redis.
 *
 * Threads: everything runs on the loop thread, except the KV tier's put(), which the
 * persistence thread calls: it copies the blob into a bounded queue and wakes the loop. */
#ifndef FL_SERVER_REDIS_H
#define FL_SERVER_REDIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "persist.h"
#include "serve_log.h"

struct redisReply;

typedef struct srv_redis_url {
    char host[256];
    int port;
    char password[256]; /* empty: no AUTH */
    char user[128];     /* empty: AUTH password (the default user) */
    int db;
} srv_redis_url;

/* redis://[[user]:password@]host[:port][/db]; "host:port" alone is accepted too. Returns 0, or
 * -1 with a one-line message. */
int srv_redis_url_parse(const char *s, srv_redis_url *u, char *err, size_t errlen);

typedef struct srv_redis_opts {
    srv_redis_url url;
    double connect_timeout_ms; /* a connection that is not ready by then is dropped */
    double timeout_ms;         /* per command: no reply by then means "no cache" */
    int kv_ttl_s;              /* KV pages expire this long after their last write */
    int64_t kv_cap_bytes;      /* KV pages kept at most (oldest evicted first) */
    size_t write_queue_bytes;  /* pages waiting to be written at most; beyond: dropped */
} srv_redis_opts;

/* Counters, written on the loop thread (the /metrics renderer reads them there too). */
typedef struct srv_redis_stats {
    uint64_t connects, disconnects, connect_failures;
    uint64_t commands, errors, timeouts;
    uint64_t bytes_read, bytes_written;
    uint64_t kv_writes, kv_writes_dropped, kv_evicted;
    double latency_sum_s;
    uint64_t latency_count;
    uint64_t latency_le[8]; /* cumulative-by-render buckets, see SRV_REDIS_LAT_BOUNDS */
} srv_redis_stats;

#define SRV_REDIS_LAT_BOUNDS {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5}

typedef struct srv_redis srv_redis;

/* reply: the hiredis reply (valid only during the call), or NULL when the command failed,
 * timed out or its connection dropped. Called exactly once per accepted command, always from
 * the loop (never from inside srv_redis_cmd). */
typedef void (*srv_redis_cb)(struct redisReply *reply, void *ud);

int srv_redis_start(srv_redis **out, uv_loop_t *loop, const srv_redis_opts *o, srv_log *log);
/* Ready: connected, authenticated, db selected. */
bool srv_redis_ready(const srv_redis *r);
const srv_redis_stats *srv_redis_get_stats(const srv_redis *r);
/* Sends a command. Returns 0 (cb follows) or -1 when not ready (cb is not called). */
int srv_redis_cmd(srv_redis *r, srv_redis_cb cb, void *ud, int argc, const char **argv,
                  const size_t *argvlen);
/* The same with its own deadline: a bulk read (a prefix of many pages) gets the command
 * deadline plus the time its reply takes at a floor bandwidth (SRV_REDIS_FLOOR_BPMS). Every
 * command's deadline also grows by the bytes still in flight ahead of it, at that floor. */
int srv_redis_cmd_deadline(srv_redis *r, srv_redis_cb cb, void *ud, int argc, const char **argv,
                           const size_t *argvlen, double timeout_ms);
#define SRV_REDIS_FLOOR_BPMS 20000.0 /* bytes per millisecond: 20 MB/s */
double srv_redis_timeout_ms(const srv_redis *r);
/* The KV tier: put() queues the blob for a capped, TTL'd write (see redis.c); get() is
 * FL_ENOTFOUND (reads go through the server's asynchronous prefix lookup). blob_size is the
 * model's page blob size (the cap counts pages of it). fl_tier_destroy frees the returned
 * struct only; it must not be used after srv_redis_close. NULL when out of memory. */
fl_kv_tier *srv_redis_tier(srv_redis *r, size_t blob_size);
/* The Redis key of a KV page. */
void srv_redis_kv_key(fl_page_key k, char out[64]);
/* Starts closing: queued page writes are sent, then the connection and every handle close
 * while the loop runs (pending commands get NULL). */
void srv_redis_close(srv_redis *r);
/* After the loop has closed the handles (uv_run returned). */
void srv_redis_free(srv_redis *r);

#endif
