/* redis.c: see redis.h. Connection states: idle (a reconnect is scheduled), connecting (a
 * context exists; AUTH/SELECT/PING are pipelined behind the connect and the connection is
 * ready when PING answers), ready. One timer (conn_timer) serves the connect deadline, the
 * reconnect backoff, a drop deferred out of a hiredis callback, and the close deadline.
 *
 * hiredis 0.14 rules kept here (../shared/STACK.md): never free a context inside one of its
 * callbacks (a failed connect is freed by hiredis itself after onConnect); every reply
 * callback accepts a NULL reply; no timeouts of its own, so each command has a uv timer. A
 * command whose timer fires is answered NULL at once; its late reply is swallowed. Three
 * timeouts in a row mean the server has stopped answering: the connection is dropped
 * (redisAsyncFree answers every pending command NULL) and rebuilt with backoff. */
#include "redis.h"

#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>

/* ---- our libuv adapter: the poll callback passes errors on (Debian's drops them) ---- */

typedef struct rd_ev {
    redisAsyncContext *ac; /* NULL once hiredis cleaned up */
    uv_poll_t poll;
    int events;
    int fd;
} rd_ev;

static void rd_poll_cb(uv_poll_t *h, int status, int events)
{
    rd_ev *p = h->data;
    if (status != 0)
        events = p->events; /* let hiredis's read/write see the socket error */
    /* hiredis reads 16 KiB per call: a multi-megabyte reply (a prefix of pages) would take a
       loop iteration per 16 KiB. Read on while the socket has data, up to 1 MiB per wakeup so
       the loop stays responsive. */
    for (int i = 0; i < 64 && p->ac && (events & UV_READABLE); i++) {
        redisAsyncHandleRead(p->ac);
        int avail = 0;
        if (!p->ac || ioctl(p->fd, FIONREAD, &avail) || avail <= 0)
            break;
    }
    if (p->ac && (events & UV_WRITABLE))
        redisAsyncHandleWrite(p->ac);
}

static void rd_update(rd_ev *p)
{
    if (p->events)
        uv_poll_start(&p->poll, p->events, rd_poll_cb);
    else
        uv_poll_stop(&p->poll);
}

static void rd_add_read(void *d) { rd_ev *p = d; p->events |= UV_READABLE; rd_update(p); }
static void rd_del_read(void *d) { rd_ev *p = d; p->events &= ~UV_READABLE; rd_update(p); }
static void rd_add_write(void *d) { rd_ev *p = d; p->events |= UV_WRITABLE; rd_update(p); }
static void rd_del_write(void *d) { rd_ev *p = d; p->events &= ~UV_WRITABLE; rd_update(p); }
static void rd_closed(uv_handle_t *h) { free(h->data); }

static void rd_cleanup(void *d)
{
    rd_ev *p = d;
    p->ac = NULL;
    uv_close((uv_handle_t *)&p->poll, rd_closed); /* before hiredis closes the fd */
}

static int rd_attach(uv_loop_t *loop, redisAsyncContext *ac)
{
    rd_ev *p = calloc(1, sizeof *p);
    if (!p)
        return -1;
    if (uv_poll_init(loop, &p->poll, ac->c.fd)) {
        free(p);
        return -1;
    }
    p->ac = ac;
    p->fd = ac->c.fd;
    p->poll.data = p;
    ac->ev.addRead = rd_add_read;
    ac->ev.delRead = rd_del_read;
    ac->ev.addWrite = rd_add_write;
    ac->ev.delWrite = rd_del_write;
    ac->ev.cleanup = rd_cleanup;
    ac->ev.data = p;
    return 0;
}

/* ---- the client ---- */

typedef enum { T_NONE = 0, T_DEADLINE, T_RECONNECT, T_DROP, T_CLOSE } timer_mode;

typedef struct rd_op {
    struct srv_redis *r;
    srv_redis_cb cb;
    void *ud;
    uv_timer_t timer;
    double t0;
    size_t bytes; /* sent; counted in the client's in-flight bytes until answered */
    bool fired, replied, timer_closed;
    struct rd_op *prev, *next;
} rd_op;

typedef struct rd_put {
    struct rd_put *next;
    fl_page_key key;
    size_t len;
    unsigned char data[];
} rd_put;

struct srv_redis {
    uv_loop_t *loop;
    srv_redis_opts o;
    srv_log *log;
    srv_redis_stats st;
    redisAsyncContext *ac;
    bool ready, connecting, handshake_failed, closing, warned_down;
    uv_timer_t conn_timer;
    timer_mode mode;
    double backoff_ms;
    int timeouts_in_row;
    rd_op *ops;
    size_t inflight_bytes; /* of commands sent and not answered: a new one waits behind them */
    /* the KV tier's queue (persistence thread -> loop) */
    uv_async_t wake;
    uv_mutex_t mu;
    rd_put *qh, *qt;
    size_t qbytes;
    uint64_t q_dropped; /* under mu */
    bool puts_closed;   /* under mu */
    size_t blob_size;
};

static void start_timer(srv_redis *r, timer_mode m, double ms);
static void connect_now(srv_redis *r);

static void schedule_reconnect(srv_redis *r)
{
    if (r->closing)
        return;
    start_timer(r, T_RECONNECT, r->backoff_ms);
    r->backoff_ms = r->backoff_ms * 2 > 5000 ? 5000 : r->backoff_ms * 2;
}

/* Frees the context now (not from inside a hiredis callback): pending commands get NULL. */
static void drop_connection(srv_redis *r, const char *why)
{
    redisAsyncContext *ac = r->ac;
    if (!ac)
        return;
    if (r->ready) {
        r->st.disconnects++;
        SRV_WARN(r->log, "event=redis_down reason=\"%s\"", why);
    }
    r->ac = NULL;
    r->ready = r->connecting = false;
    redisAsyncFree(ac);
}

static void on_timer(uv_timer_t *t)
{
    srv_redis *r = t->data;
    timer_mode m = r->mode;
    r->mode = T_NONE;
    switch (m) {
    case T_DEADLINE:
        if (r->ac && !r->ready) {
            r->st.connect_failures++;
            if (!r->warned_down)
                SRV_WARN(r->log, "event=redis_connect_failed host=%s port=%d reason=\"no answer "
                         "within %.0f ms\"", r->o.url.host, r->o.url.port, r->o.connect_timeout_ms);
            r->warned_down = true;
            drop_connection(r, "connect timeout");
            schedule_reconnect(r);
        }
        break;
    case T_RECONNECT:
        connect_now(r);
        break;
    case T_DROP:
        drop_connection(r, r->handshake_failed ? "handshake failed" : "not answering");
        schedule_reconnect(r);
        break;
    case T_CLOSE:
        drop_connection(r, "closing");
        uv_close((uv_handle_t *)&r->conn_timer, NULL);
        break;
    default:
        break;
    }
}

static void start_timer(srv_redis *r, timer_mode m, double ms)
{
    if (uv_is_closing((uv_handle_t *)&r->conn_timer))
        return;
    r->mode = m;
    uv_timer_start(&r->conn_timer, on_timer, (uint64_t)(ms < 0 ? 0 : ms), 0);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    srv_redis *r = ac->data;
    if (ac != r->ac)
        return;
    if (status != REDIS_OK) {
        /* hiredis frees this context after we return */
        r->st.connect_failures++;
        if (!r->warned_down)
            SRV_WARN(r->log, "event=redis_connect_failed host=%s port=%d reason=\"%s\"",
                     r->o.url.host, r->o.url.port, ac->errstr ? ac->errstr : "?");
        r->warned_down = true;
        r->ac = NULL;
        r->connecting = false;
        schedule_reconnect(r);
    }
    /* connected: ready once the pipelined handshake's PING answers */
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    srv_redis *r = ac->data;
    (void)status;
    if (ac != r->ac)
        return; /* a context we dropped ourselves */
    if (r->ready) {
        r->st.disconnects++;
        SRV_WARN(r->log, "event=redis_down reason=\"%s\"",
                 ac->errstr && ac->errstr[0] ? ac->errstr : "connection closed");
    }
    r->ac = NULL;
    r->ready = r->connecting = false;
    if (r->closing) {
        if (r->mode == T_CLOSE && !uv_is_closing((uv_handle_t *)&r->conn_timer)) {
            uv_timer_stop(&r->conn_timer);
            uv_close((uv_handle_t *)&r->conn_timer, NULL);
        }
        return;
    }
    schedule_reconnect(r);
}

static void handshake_cb(redisAsyncContext *ac, void *reply, void *pd)
{
    srv_redis *r = pd;
    redisReply *rp = reply;
    if (ac != r->ac)
        return;
    if (!rp || rp->type == REDIS_REPLY_ERROR) {
        if (!r->handshake_failed)
            SRV_WARN(r->log, "event=redis_handshake_failed reason=\"%s\"",
                     rp && rp->str ? rp->str : "no reply");
        r->handshake_failed = true;
    }
}

static void ping_cb(redisAsyncContext *ac, void *reply, void *pd)
{
    srv_redis *r = pd;
    redisReply *rp = reply;
    if (ac != r->ac)
        return;
    if (!rp || rp->type == REDIS_REPLY_ERROR || r->handshake_failed) {
        start_timer(r, T_DROP, 0); /* not from inside hiredis */
        return;
    }
    r->ready = true;
    r->connecting = false;
    r->warned_down = false;
    r->backoff_ms = 100;
    r->timeouts_in_row = 0;
    r->st.connects++;
    uv_timer_stop(&r->conn_timer);
    r->mode = T_NONE;
    SRV_INFO(r->log, "event=redis_ready host=%s port=%d db=%d", r->o.url.host, r->o.url.port,
             r->o.url.db);
}

static void connect_now(srv_redis *r)
{
    if (r->closing || r->ac)
        return;
    redisAsyncContext *ac = redisAsyncConnect(r->o.url.host, r->o.url.port);
    if (!ac || ac->err) {
        r->st.connect_failures++;
        if (!r->warned_down)
            SRV_WARN(r->log, "event=redis_connect_failed host=%s port=%d reason=\"%s\"",
                     r->o.url.host, r->o.url.port, ac && ac->errstr ? ac->errstr : "out of memory");
        r->warned_down = true;
        if (ac)
            redisAsyncFree(ac);
        schedule_reconnect(r);
        return;
    }
    ac->data = r;
    if (rd_attach(r->loop, ac)) {
        redisAsyncFree(ac);
        schedule_reconnect(r);
        return;
    }
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    r->ac = ac;
    r->connecting = true;
    r->handshake_failed = false;
    /* pipelined behind the connect; replies come in order */
    if (r->o.url.password[0]) {
        if (r->o.url.user[0]) {
            const char *argv[3] = {"AUTH", r->o.url.user, r->o.url.password};
            redisAsyncCommandArgv(ac, handshake_cb, r, 3, argv, NULL);
        } else {
            const char *argv[2] = {"AUTH", r->o.url.password};
            redisAsyncCommandArgv(ac, handshake_cb, r, 2, argv, NULL);
        }
    }
    if (r->o.url.db) {
        char db[16];
        snprintf(db, sizeof db, "%d", r->o.url.db);
        const char *argv[2] = {"SELECT", db};
        redisAsyncCommandArgv(ac, handshake_cb, r, 2, argv, NULL);
    }
    const char *ping[1] = {"PING"};
    redisAsyncCommandArgv(ac, ping_cb, r, 1, ping, NULL);
    start_timer(r, T_DEADLINE, r->o.connect_timeout_ms);
}

/* ---- commands ---- */

static size_t reply_bytes(const redisReply *rp)
{
    if (!rp)
        return 0;
    size_t n = (size_t)(rp->len > 0 ? rp->len : 0);
    for (size_t i = 0; i < rp->elements; i++)
        n += reply_bytes(rp->element[i]);
    return n;
}

static void op_free(rd_op *op)
{
    srv_redis *r = op->r;
    if (op->prev)
        op->prev->next = op->next;
    else
        r->ops = op->next;
    if (op->next)
        op->next->prev = op->prev;
    free(op);
}

static void op_timer_closed(uv_handle_t *h)
{
    rd_op *op = h->data;
    op->timer_closed = true;
    if (op->replied)
        op_free(op);
}

static void op_close_timer(rd_op *op)
{
    if (!uv_is_closing((uv_handle_t *)&op->timer)) {
        uv_timer_stop(&op->timer);
        uv_close((uv_handle_t *)&op->timer, op_timer_closed);
    }
}

static const double lat_bounds[8] = SRV_REDIS_LAT_BOUNDS;

static void op_reply(redisAsyncContext *ac, void *reply, void *pd)
{
    (void)ac;
    rd_op *op = pd;
    srv_redis *r = op->r;
    redisReply *rp = reply;
    op->replied = true;
    r->inflight_bytes -= op->bytes;
    if (!op->fired) {
        op->fired = true;
        double s = (fl_now_ms() - op->t0) / 1e3;
        if (rp) {
            r->timeouts_in_row = 0;
            r->st.bytes_read += reply_bytes(rp);
            r->st.latency_sum_s += s;
            r->st.latency_count++;
            for (int i = 0; i < 8; i++)
                if (s <= lat_bounds[i]) {
                    r->st.latency_le[i]++;
                    break;
                }
            if (rp->type == REDIS_REPLY_ERROR) {
                r->st.errors++;
                SRV_DEBUG(r->log, "event=redis_error reply=\"%.120s\"", rp->str ? rp->str : "");
            }
        } else {
            r->st.errors++; /* dropped with its connection */
        }
        op->cb(rp, op->ud);
        op_close_timer(op);
    }
    if (op->timer_closed)
        op_free(op);
}

static void op_timeout(uv_timer_t *t)
{
    rd_op *op = t->data;
    srv_redis *r = op->r;
    /* libuv runs timers before polling sockets: on a loop that was busy, the reply may be
       waiting unread. Read what is there before calling it a timeout. */
    if (r->ac && r->ac->ev.data) {
        rd_ev *p = r->ac->ev.data;
        for (int i = 0; i < 64 && p->ac && !op->replied; i++) {
            int avail = 0;
            if (ioctl(p->fd, FIONREAD, &avail) || avail <= 0)
                break;
            redisAsyncHandleRead(p->ac);
        }
    }
    if (op->fired)
        return; /* answered just now (op_reply closed this timer) */
    op->fired = true;
    r->st.timeouts++;
    r->timeouts_in_row++;
    op->cb(NULL, op->ud);
    op_close_timer(op);
    if (r->timeouts_in_row >= 3 && r->ready) {
        r->timeouts_in_row = 0;
        drop_connection(r, "3 commands in a row timed out");
        schedule_reconnect(r);
    }
}

int srv_redis_cmd(srv_redis *r, srv_redis_cb cb, void *ud, int argc, const char **argv,
                  const size_t *argvlen)
{
    return srv_redis_cmd_deadline(r, cb, ud, argc, argv, argvlen, r ? r->o.timeout_ms : 0);
}

double srv_redis_timeout_ms(const srv_redis *r) { return r->o.timeout_ms; }

int srv_redis_cmd_deadline(srv_redis *r, srv_redis_cb cb, void *ud, int argc, const char **argv,
                           const size_t *argvlen, double timeout_ms)
{
    if (!r || !r->ready || !r->ac || r->closing)
        return -1;
    rd_op *op = calloc(1, sizeof *op);
    if (!op)
        return -1;
    op->r = r;
    op->cb = cb;
    op->ud = ud;
    op->t0 = fl_now_ms();
    if (redisAsyncCommandArgv(r->ac, op_reply, op, argc, argv, argvlen) != REDIS_OK) {
        free(op);
        r->st.errors++;
        return -1;
    }
    for (int i = 0; i < argc; i++)
        op->bytes += argvlen ? argvlen[i] : strlen(argv[i]);
    /* a caller's longer deadline stands for the reply it expects (a prefix read): count
       those bytes as in flight too, so later commands wait for them */
    size_t sent = op->bytes;
    if (timeout_ms > r->o.timeout_ms)
        op->bytes += (size_t)((timeout_ms - r->o.timeout_ms) * SRV_REDIS_FLOOR_BPMS);
    /* commands are answered in order: this one also waits for the bytes sent before it (a
       burst of page writes must not time out just for queueing behind each other) */
    r->inflight_bytes += op->bytes;
    timeout_ms += (double)r->inflight_bytes / SRV_REDIS_FLOOR_BPMS;
    uv_timer_init(r->loop, &op->timer);
    op->timer.data = op;
    uv_timer_start(&op->timer, op_timeout, (uint64_t)timeout_ms, 0);
    op->next = r->ops;
    if (r->ops)
        r->ops->prev = op;
    r->ops = op;
    r->st.commands++;
    r->st.bytes_written += sent;
    return 0;
}

bool srv_redis_ready(const srv_redis *r) { return r && r->ready; }
const srv_redis_stats *srv_redis_get_stats(const srv_redis *r) { return &r->st; }

void srv_redis_kv_key(fl_page_key k, char out[64])
{
    char hex[33];
    fl_page_key_hex(k, hex);
    snprintf(out, 64, "fogline:kv:%s", hex);
}

/* ---- the KV tier ---- */

/* One page write: SET NX with a TTL (pages are content-addressed: an existing key holds the
 * same bytes, so it is only refreshed), and a sorted set of page keys by expiry time that
 * enforces the cap: expired entries are pruned, then the soonest-expiring pages are evicted
 * while the set holds more than ARGV[3] pages. Redis's clock, so replicas agree. Returns the
 * number evicted. */
static const char kv_put_lua[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1])\n"
    "local ttl = tonumber(ARGV[2])\n"
    "redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)\n"
    "if not redis.call('SET', KEYS[1], ARGV[1], 'EX', ttl, 'NX') then\n"
    "  redis.call('EXPIRE', KEYS[1], ttl)\n"
    "end\n"
    "redis.call('ZADD', KEYS[2], now + ttl, KEYS[1])\n"
    "local n = redis.call('ZCARD', KEYS[2])\n"
    "local ev = 0\n"
    "while n > tonumber(ARGV[3]) do\n"
    "  local old = redis.call('ZPOPMIN', KEYS[2])\n"
    "  redis.call('DEL', old[1])\n"
    "  n = n - 1\n"
    "  ev = ev + 1\n"
    "end\n"
    "return ev\n";

static void put_cb(struct redisReply *rp, void *ud)
{
    srv_redis *r = ud;
    if (rp && rp->type == REDIS_REPLY_INTEGER) {
        r->st.kv_writes++;
        r->st.kv_evicted += (uint64_t)(rp->integer > 0 ? rp->integer : 0);
    }
}

static void send_puts(srv_redis *r)
{
    uv_mutex_lock(&r->mu);
    rd_put *list = r->qh;
    r->qh = r->qt = NULL;
    r->qbytes = 0;
    uv_mutex_unlock(&r->mu);
    char ttl[24], cap[24];
    snprintf(ttl, sizeof ttl, "%d", r->o.kv_ttl_s);
    int64_t pages = r->blob_size ? r->o.kv_cap_bytes / (int64_t)r->blob_size : 0;
    snprintf(cap, sizeof cap, "%lld", (long long)(pages > 0 ? pages : 1));
    while (list) {
        rd_put *p = list;
        list = p->next;
        char key[64];
        srv_redis_kv_key(p->key, key);
        const char *argv[8] = {"EVAL", kv_put_lua, "2", key, "fogline:kv:lru", (const char *)p->data,
                               ttl, cap};
        size_t lens[8] = {4, sizeof kv_put_lua - 1, 1, strlen(key), 14, p->len, strlen(ttl),
                          strlen(cap)};
        if (srv_redis_cmd(r, put_cb, r, 8, argv, lens))
            r->st.kv_writes_dropped++; /* Redis is away: the page simply is not cached */
        free(p);
    }
}

static void on_wake(uv_async_t *a) { send_puts(a->data); }

static int tier_put(void *ctx, fl_page_key key, const void *blob, size_t len, fl_err *e)
{
    srv_redis *r = ctx;
    (void)e;
    uv_mutex_lock(&r->mu);
    if (r->puts_closed || r->qbytes + len > r->o.write_queue_bytes) {
        r->q_dropped++;
        uv_mutex_unlock(&r->mu);
        return 0; /* a cache: dropping a write is not a persistence failure */
    }
    uv_mutex_unlock(&r->mu);
    rd_put *p = malloc(sizeof *p + len);
    if (!p)
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    p->next = NULL;
    p->key = key;
    p->len = len;
    memcpy(p->data, blob, len);
    uv_mutex_lock(&r->mu);
    bool closed = r->puts_closed;
    if (!closed) {
        if (r->qt)
            r->qt->next = p;
        else
            r->qh = p;
        r->qt = p;
        r->qbytes += len;
    } else {
        r->q_dropped++;
    }
    uv_mutex_unlock(&r->mu);
    if (closed)
        free(p);
    else
        uv_async_send(&r->wake);
    return 0;
}

static int tier_get(void *ctx, fl_page_key key, void *blob, size_t len, fl_err *e)
{
    (void)ctx;
    (void)key;
    (void)blob;
    (void)len;
    return fl_err_set(e, FL_ENOTFOUND, "the Redis tier is read by the server's prefix lookup");
}

static void tier_destroy(void *ctx) { (void)ctx; /* owned by srv_redis */ }

fl_kv_tier *srv_redis_tier(srv_redis *r, size_t blob_size)
{
    fl_kv_tier *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    r->blob_size = blob_size;
    t->name = "redis";
    t->ctx = r;
    t->put = tier_put;
    t->get = tier_get;
    t->destroy = tier_destroy;
    return t;
}

/* ---- lifecycle ---- */

int srv_redis_start(srv_redis **out, uv_loop_t *loop, const srv_redis_opts *o, srv_log *log)
{
    srv_redis *r = calloc(1, sizeof *r);
    if (!r)
        return -1;
    r->loop = loop;
    r->o = *o;
    r->log = log;
    r->backoff_ms = 100;
    uv_mutex_init(&r->mu);
    uv_timer_init(loop, &r->conn_timer);
    r->conn_timer.data = r;
    uv_async_init(loop, &r->wake, on_wake);
    r->wake.data = r;
    *out = r;
    connect_now(r); /* the server starts whether or not Redis is there */
    return 0;
}

void srv_redis_close(srv_redis *r)
{
    if (!r || r->closing)
        return;
    send_puts(r); /* the last pages the engine flushed */
    uv_mutex_lock(&r->mu);
    r->puts_closed = true;
    uv_mutex_unlock(&r->mu);
    r->closing = true;
    uv_close((uv_handle_t *)&r->wake, NULL);
    if (r->ac && r->ready) {
        /* graceful: the writes just sent get their replies, then the connection closes;
           a Redis that does not answer is dropped after a second plus the time the bytes in
           flight take at the floor bandwidth */
        start_timer(r, T_CLOSE, 1000 + (double)r->inflight_bytes / SRV_REDIS_FLOOR_BPMS);
        redisAsyncDisconnect(r->ac);
    } else {
        drop_connection(r, "closing");
        uv_timer_stop(&r->conn_timer);
        uv_close((uv_handle_t *)&r->conn_timer, NULL);
    }
}

void srv_redis_free(srv_redis *r)
{
    if (!r)
        return;
    rd_put *p = r->qh;
    while (p) {
        rd_put *n = p->next;
        free(p);
        p = n;
    }
    uv_mutex_destroy(&r->mu);
    free(r);
}

/* ---- URL ---- */

int srv_redis_url_parse(const char *s, srv_redis_url *u, char *err, size_t errlen)
{
    memset(u, 0, sizeof *u);
    u->port = 6379;
    const char *p = s;
    if (!strncmp(p, "redis://", 8))
        p += 8;
    else if (strstr(p, "://")) {
        snprintf(err, errlen, "'%s': only redis:// URLs are supported (no TLS)", s);
        return -1;
    }
    const char *at = strrchr(p, '@');
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        const char *pw = colon ? colon + 1 : p;
        size_t ul = colon ? (size_t)(colon - p) : 0;
        size_t pl = (size_t)(at - pw);
        if (ul >= sizeof u->user || pl >= sizeof u->password) {
            snprintf(err, errlen, "Redis URL user or password too long");
            return -1;
        }
        memcpy(u->user, p, ul);
        memcpy(u->password, pw, pl);
        p = at + 1;
    }
    const char *end = p + strcspn(p, ":/");
    size_t hl = (size_t)(end - p);
    if (hl == 0 || hl >= sizeof u->host) {
        snprintf(err, errlen, "'%s': the Redis URL has no host", s);
        return -1;
    }
    memcpy(u->host, p, hl);
    p = end;
    if (*p == ':') {
        char *e2;
        long v = strtol(p + 1, &e2, 10);
        if (e2 == p + 1 || v < 1 || v > 65535 || (*e2 && *e2 != '/')) {
            snprintf(err, errlen, "'%s': bad Redis port", s);
            return -1;
        }
        u->port = (int)v;
        p = e2;
    }
    if (*p == '/') {
        if (p[1]) {
            char *e2;
            long v = strtol(p + 1, &e2, 10);
            if (e2 == p + 1 || *e2 || v < 0 || v > 1000000) {
                snprintf(err, errlen, "'%s': bad Redis database number", s);
                return -1;
            }
            u->db = (int)v;
        }
    } else if (*p) {
        snprintf(err, errlen, "'%s': unexpected '%s' in the Redis URL", s, p);
        return -1;
    }
    return 0;
}
