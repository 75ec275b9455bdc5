/* persist.c: page keys, page blobs, the directory and host tiers, the persistence thread. */
#include "persist.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- keys: two independent 64-bit FNV-1a style mixes over the same bytes ---- */

fl_page_key fl_page_key_chain(uint64_t model_id, fl_page_key parent, const int32_t *tokens, int n)
{
    uint64_t a = 0xcbf29ce484222325ull, b = 0x84222325cbf29ce4ull;
    a = fl_mix64(a, model_id);
    b = fl_mix64(b, ~model_id);
    a = fl_mix64(a, parent.hi);
    b = fl_mix64(b, parent.lo);
    a = fl_mix64(a, parent.lo);
    b = fl_mix64(b, parent.hi);
    for (int i = 0; i < n; i++) {
        a = fl_mix64(a, (uint64_t)(uint32_t)tokens[i]);
        b = fl_mix64(b, (uint64_t)(uint32_t)tokens[i] ^ 0x5bd1e995u);
    }
    a = fl_mix64(a, (uint64_t)n);
    b = fl_mix64(b, (uint64_t)n * 31u);
    return (fl_page_key){a, b};
}

void fl_page_key_hex(fl_page_key k, char out[33])
{
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)k.hi, (unsigned long long)k.lo);
}

/* ---- blobs ---- */

size_t fl_blob_size(const fl_config *c)
{
    return sizeof(fl_blob_header) + sizeof(int32_t) * (size_t)c->block_size +
           2u * fl_kv_page_floats(c);
}

int fl_blob_encode(const fl_config *c, uint64_t model_id, fl_page_key key, const int32_t *tokens,
                   const float *page, void *blob, size_t blob_len, fl_err *e)
{
    size_t need = fl_blob_size(c);
    if (blob_len < need)
        return fl_err_set(e, FL_EINVAL, "page blob buffer too small (%zu < %zu)", blob_len, need);
    fl_blob_header h = {0};
    h.magic = FL_BLOB_MAGIC;
    h.version = FL_BLOB_VERSION;
    h.model_id = model_id;
    h.key = key;
    h.block_size = c->block_size;
    h.n_layers = c->n_layers;
    h.n_kv_heads = c->n_kv_heads;
    h.head_dim = c->head_dim;
    h.dtype = FL_DT_BF16;
    h.n_tokens = c->block_size;
    h.payload_bytes = 2u * fl_kv_page_floats(c);
    unsigned char *p = blob;
    memcpy(p, &h, sizeof h);
    p += sizeof h;
    memcpy(p, tokens, sizeof(int32_t) * (size_t)c->block_size);
    p += sizeof(int32_t) * (size_t)c->block_size;
    size_t nf = fl_kv_page_floats(c);
    for (size_t i = 0; i < nf; i++) {
        uint16_t v = fl_f32_to_bf16(page[i]);
        memcpy(p + 2 * i, &v, 2);
    }
    /* the checksum covers everything after the header */
    h.checksum = fl_hash64((unsigned char *)blob + sizeof h, need - sizeof h);
    memcpy(blob, &h, sizeof h);
    return 0;
}

int fl_blob_decode(const fl_config *c, uint64_t model_id, fl_page_key key, const void *blob,
                   size_t blob_len, int32_t *tokens, float *page, fl_err *e)
{
    fl_blob_header h;
    if (blob_len < sizeof h)
        return fl_err_set(e, FL_EFORMAT, "page blob too short (%zu bytes)", blob_len);
    memcpy(&h, blob, sizeof h);
    if (h.magic != FL_BLOB_MAGIC || h.version != FL_BLOB_VERSION)
        return fl_err_set(e, FL_EFORMAT, "page blob: bad magic or version");
    if (h.model_id != model_id || h.key.hi != key.hi || h.key.lo != key.lo)
        return fl_err_set(e, FL_EFORMAT, "page blob: model or key mismatch");
    if (h.block_size != c->block_size || h.n_layers != c->n_layers ||
        h.n_kv_heads != c->n_kv_heads || h.head_dim != c->head_dim || h.dtype != FL_DT_BF16 ||
        h.n_tokens != c->block_size || h.payload_bytes != 2u * fl_kv_page_floats(c))
        return fl_err_set(e, FL_EFORMAT, "page blob: shape does not match the model");
    if (blob_len != fl_blob_size(c))
        return fl_err_set(e, FL_EFORMAT, "page blob: %zu bytes, expected %zu", blob_len,
                          fl_blob_size(c));
    const unsigned char *p = (const unsigned char *)blob + sizeof h;
    if (fl_hash64(p, blob_len - sizeof h) != h.checksum)
        return fl_err_set(e, FL_EFORMAT, "page blob: checksum mismatch (damaged data)");
    memcpy(tokens, p, sizeof(int32_t) * (size_t)c->block_size);
    p += sizeof(int32_t) * (size_t)c->block_size;
    size_t nf = fl_kv_page_floats(c);
    for (size_t i = 0; i < nf; i++) {
        uint16_t v;
        memcpy(&v, p + 2 * i, 2);
        page[i] = fl_bf16_to_f32(v);
    }
    return 0;
}

/* ---- directory tier ---- */

typedef struct dir_tier {
    char *dir;
    bool fsync_each;
} dir_tier;

static int dir_path(dir_tier *d, fl_page_key k, char *out, size_t cap)
{
    char hex[33];
    fl_page_key_hex(k, hex);
    int n = snprintf(out, cap, "%s/%s.kv", d->dir, hex);
    return n > 0 && (size_t)n < cap ? 0 : FL_ERANGE;
}

static int dir_put(void *ctx, fl_page_key key, const void *blob, size_t len, fl_err *e)
{
    dir_tier *d = ctx;
    char path[4096], tmp[4200];
    if (dir_path(d, key, path, sizeof path))
        return fl_err_set(e, FL_ERANGE, "tier path too long");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return fl_err_set(e, FL_EIO, "cannot create %s: %s", tmp, strerror(errno));
    const unsigned char *p = blob;
    size_t left = len;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            int err = errno;
            close(fd);
            unlink(tmp);
            return fl_err_set(e, FL_EIO, "cannot write %s: %s", tmp, strerror(err));
        }
        p += w;
        left -= (size_t)w;
    }
    if (d->fsync_each && fsync(fd) != 0) {
        int err = errno;
        close(fd);
        unlink(tmp);
        return fl_err_set(e, FL_EIO, "fsync %s: %s", tmp, strerror(err));
    }
    close(fd);
    /* rename: a reader never sees half a page */
    if (rename(tmp, path) != 0) {
        int err = errno;
        unlink(tmp);
        return fl_err_set(e, FL_EIO, "rename to %s: %s", path, strerror(err));
    }
    return 0;
}

static int dir_get(void *ctx, fl_page_key key, void *blob, size_t len, fl_err *e)
{
    dir_tier *d = ctx;
    char path[4096];
    if (dir_path(d, key, path, sizeof path))
        return fl_err_set(e, FL_ERANGE, "tier path too long");
    FILE *f = fopen(path, "rb");
    if (!f)
        return errno == ENOENT ? FL_ENOTFOUND
                               : fl_err_set(e, FL_EIO, "cannot open %s: %s", path, strerror(errno));
    size_t got = fread(blob, 1, len, f);
    int extra = fgetc(f);
    fclose(f);
    if (got != len || extra != EOF)
        return fl_err_set(e, FL_EFORMAT, "%s: size mismatch", path);
    return 0;
}

static void dir_destroy(void *ctx)
{
    dir_tier *d = ctx;
    free(d->dir);
    free(d);
}

int fl_tier_dir_create(fl_kv_tier **out, const char *dir, bool fsync_each, fl_err *e)
{
    *out = NULL;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return fl_err_set(e, FL_EIO, "cannot create tier directory %s: %s", dir, strerror(errno));
    fl_kv_tier *t = calloc(1, sizeof *t);
    dir_tier *d = calloc(1, sizeof *d);
    if (!t || !d || !(d->dir = strdup(dir))) {
        free(t);
        if (d)
            free(d->dir);
        free(d);
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    }
    d->fsync_each = fsync_each;
    t->name = "dir";
    t->ctx = d;
    t->put = dir_put;
    t->get = dir_get;
    t->destroy = dir_destroy;
    *out = t;
    return 0;
}

/* ---- host tier: a ring of entries, oldest evicted first ---- */

typedef struct host_ent {
    fl_page_key key;
    void *blob;
    size_t len;
} host_ent;

typedef struct host_tier {
    pthread_mutex_t mu;
    host_ent *ents;
    size_t n, cap, head; /* ring: entries [head, head+n) mod cap */
    size_t bytes, max_bytes;
} host_tier;

static void host_evict_one(host_tier *h)
{
    host_ent *x = &h->ents[h->head];
    h->bytes -= x->len;
    free(x->blob);
    x->blob = NULL;
    h->head = (h->head + 1) % h->cap;
    h->n--;
}

static int host_put(void *ctx, fl_page_key key, const void *blob, size_t len, fl_err *e)
{
    host_tier *h = ctx;
    if (len > h->max_bytes)
        return fl_err_set(e, FL_ERANGE, "page blob larger than the host tier");
    void *copy = malloc(len);
    if (!copy)
        return fl_err_set(e, FL_ENOMEM, "out of memory in the host tier");
    memcpy(copy, blob, len);
    pthread_mutex_lock(&h->mu);
    while (h->n && (h->bytes + len > h->max_bytes || h->n == h->cap))
        host_evict_one(h);
    h->ents[(h->head + h->n) % h->cap] = (host_ent){key, copy, len};
    h->n++;
    h->bytes += len;
    pthread_mutex_unlock(&h->mu);
    return 0;
}

static int host_get(void *ctx, fl_page_key key, void *blob, size_t len, fl_err *e)
{
    host_tier *h = ctx;
    int rc = FL_ENOTFOUND;
    pthread_mutex_lock(&h->mu);
    for (size_t i = 0; i < h->n; i++) {
        host_ent *x = &h->ents[(h->head + i) % h->cap];
        if (x->key.hi == key.hi && x->key.lo == key.lo) {
            if (x->len != len) {
                rc = fl_err_set(e, FL_EFORMAT, "host tier: size mismatch");
            } else {
                memcpy(blob, x->blob, len);
                rc = 0;
            }
            break;
        }
    }
    pthread_mutex_unlock(&h->mu);
    return rc;
}

static void host_destroy(void *ctx)
{
    host_tier *h = ctx;
    while (h->n)
        host_evict_one(h);
    free(h->ents);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

int fl_tier_host_create(fl_kv_tier **out, size_t max_bytes, fl_err *e)
{
    *out = NULL;
    fl_kv_tier *t = calloc(1, sizeof *t);
    host_tier *h = calloc(1, sizeof *h);
    if (!t || !h) {
        free(t);
        free(h);
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    }
    h->cap = 65536;
    h->ents = calloc(h->cap, sizeof *h->ents);
    if (!h->ents) {
        free(t);
        free(h);
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    }
    pthread_mutex_init(&h->mu, NULL);
    h->max_bytes = max_bytes;
    t->name = "host";
    t->ctx = h;
    t->put = host_put;
    t->get = host_get;
    t->destroy = host_destroy;
    *out = t;
    return 0;
}

void fl_tier_destroy(fl_kv_tier *t)
{
    if (!t)
        return;
    if (t->destroy)
        t->destroy(t->ctx);
    free(t);
}

/* ---- the persister ---- */

struct fl_persist {
    fl_backend *b;
    const fl_config *cfg;
    uint64_t model_id;
    fl_kv_tier *tier;
    bool async;
    float *page;         /* (page_bytes/4) staging copy of one page */
    unsigned char *blob; /* (blob_size) */
    size_t blob_len;
    pthread_t th;
    bool started, stopping, locks;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_space, cv_idle;
    fl_persist_job *q; /* ring of pending jobs */
    int32_t qcap, qhead, qn;
    bool busy;
    int32_t *done; /* pages finished, waiting for reap */
    int32_t ndone, donecap;
    int64_t n_done, n_fail;
};

/* Copies one page out of the backend, encodes it and puts it in the tier. */
static int persist_one(fl_persist *p, const fl_persist_job *j)
{
    fl_err e = {0};
    int rc = p->b->ops->page_read(p->b, j->page, p->page, &e);
    if (!rc)
        rc = fl_blob_encode(p->cfg, p->model_id, j->key, j->tokens, p->page, p->blob, p->blob_len, &e);
    if (!rc && p->tier)
        rc = p->tier->put(p->tier->ctx, j->key, p->blob, p->blob_len, &e);
    return rc;
}

static void finish_job(fl_persist *p, int32_t page, int rc)
{
    /* called with mu held */
    if (p->ndone < p->donecap)
        p->done[p->ndone++] = page;
    if (rc)
        p->n_fail++;
    else
        p->n_done++;
}

static void *persist_main(void *arg)
{
    fl_persist *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->qn && !p->stopping)
            pthread_cond_wait(&p->cv_work, &p->mu);
        if (!p->qn && p->stopping)
            break;
        fl_persist_job j = p->q[p->qhead];
        p->qhead = (p->qhead + 1) % p->qcap;
        p->qn--;
        p->busy = true;
        pthread_cond_signal(&p->cv_space);
        pthread_mutex_unlock(&p->mu);
        int rc = persist_one(p, &j);
        pthread_mutex_lock(&p->mu);
        p->busy = false;
        finish_job(p, j.page, rc);
        if (!p->qn)
            pthread_cond_broadcast(&p->cv_idle);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int fl_persist_create(fl_persist **out, fl_backend *b, uint64_t model_id, fl_kv_tier *tier,
                      bool async, int32_t queue_cap, fl_err *e)
{
    *out = NULL;
    fl_persist *p = calloc(1, sizeof *p);
    if (!p)
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    p->b = b;
    p->cfg = &b->model->cfg;
    p->model_id = model_id;
    p->tier = tier;
    p->async = async;
    p->qcap = queue_cap > 0 ? queue_cap : 256;
    /* every page can be in flight at most once, so n_pages bounds the done list */
    p->donecap = b->n_pages + p->qcap + 1;
    p->blob_len = fl_blob_size(p->cfg);
    p->page = malloc(b->page_bytes);
    p->blob = malloc(p->blob_len);
    p->q = calloc((size_t)p->qcap, sizeof *p->q);
    p->done = calloc((size_t)p->donecap, sizeof *p->done);
    if (!p->page || !p->blob || !p->q || !p->done) {
        fl_persist_destroy(p);
        return fl_err_set(e, FL_ENOMEM, "out of memory for the persister");
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_space, NULL);
    pthread_cond_init(&p->cv_idle, NULL);
    p->locks = true;
    if (async) {
        if (pthread_create(&p->th, NULL, persist_main, p) != 0) {
            fl_persist_destroy(p);
            return fl_err_set(e, FL_ENOMEM, "cannot start the persistence thread");
        }
        p->started = true;
    }
    *out = p;
    return 0;
}

double fl_persist_submit(fl_persist *p, const fl_persist_job *job)
{
    double t0 = fl_now_ms();
    if (!p->async) {
        int rc = persist_one(p, job);
        pthread_mutex_lock(&p->mu);
        finish_job(p, job->page, rc);
        pthread_mutex_unlock(&p->mu);
        return fl_now_ms() - t0;
    }
    pthread_mutex_lock(&p->mu);
    while (p->qn == p->qcap) /* a full queue is the only way async blocks the compute thread */
        pthread_cond_wait(&p->cv_space, &p->mu);
    p->q[(p->qhead + p->qn) % p->qcap] = *job;
    p->qn++;
    pthread_cond_signal(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    return fl_now_ms() - t0;
}

int fl_persist_reap(fl_persist *p, int32_t *pages, int cap)
{
    pthread_mutex_lock(&p->mu);
    int n = p->ndone < cap ? p->ndone : cap;
    memcpy(pages, p->done, sizeof(int32_t) * (size_t)n);
    memmove(p->done, p->done + n, sizeof(int32_t) * (size_t)(p->ndone - n));
    p->ndone -= n;
    pthread_mutex_unlock(&p->mu);
    return n;
}

void fl_persist_flush(fl_persist *p)
{
    pthread_mutex_lock(&p->mu);
    while (p->qn || p->busy)
        pthread_cond_wait(&p->cv_idle, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

int64_t fl_persist_in_flight(fl_persist *p)
{
    pthread_mutex_lock(&p->mu);
    int64_t n = p->qn + (p->busy ? 1 : 0) + p->ndone;
    pthread_mutex_unlock(&p->mu);
    return n;
}

int64_t fl_persist_done_count(fl_persist *p)
{
    pthread_mutex_lock(&p->mu);
    int64_t n = p->n_done;
    pthread_mutex_unlock(&p->mu);
    return n;
}

int64_t fl_persist_fail_count(fl_persist *p)
{
    pthread_mutex_lock(&p->mu);
    int64_t n = p->n_fail;
    pthread_mutex_unlock(&p->mu);
    return n;
}

void fl_persist_destroy(fl_persist *p)
{
    if (!p)
        return;
    if (p->started) {
        pthread_mutex_lock(&p->mu);
        p->stopping = true;
        pthread_cond_signal(&p->cv_work);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->th, NULL);
    }
    if (p->locks) {
        pthread_mutex_destroy(&p->mu);
        pthread_cond_destroy(&p->cv_work);
        pthread_cond_destroy(&p->cv_space);
        pthread_cond_destroy(&p->cv_idle);
    }
    free(p->page);
    free(p->blob);
    free(p->q);
    free(p->done);
    free(p);
}
