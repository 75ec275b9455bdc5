/* bench_load.c: `fogline bench load`: many WebSocket clients against a running `fogline serve`,
 * each running chats back to back, in C so that it runs where the server does (the GPU machine
 * has no node). Reports what a serving deployment is judged by: chats done, errors of every
 * kind (must be 0), reply tokens/s, time to first draft and the gap between a request's
 * updates (p50/p99), as the client sees them. A load generator, not a timed test: its figures
 * go to docs/benchmarks.md; its test (tests/server/bench_load.test.mjs) checks the counts.
 *
 * One thread, one libwebsockets client context, one struct per connection (lc) with an
 * explicit state. A 50 ms timer (lws_sul) ends the run: no new chat after --duration or
 * --chats, idle clients close, and the run is over when every connection is. --timeout bounds
 * the whole run: chats still running then count as errors ("unfinished"). */
#include <getopt.h>
#include <jansson.h>
#include <libwebsockets.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "gen_opts.h"

typedef enum {
    LC_CONNECTING, /* connecting, or waiting for hello */
    LC_IDLE,       /* hello seen, no chat running */
    LC_SENDING,    /* a chat frame waits for WRITEABLE */
    LC_BUSY,       /* a chat runs */
    LC_CLOSING,    /* a close waits for WRITEABLE */
    LC_CLOSED,
} lc_state;

struct ld;
typedef struct lc { /* one client connection */
    struct ld *ld;
    struct lws *wsi;
    int idx;
    lc_state state;
    long chat;      /* the running (or last) chat's number, global */
    int turn;       /* chats this client sent */
    char id[48];    /* the running chat's id */
    double t_sent, t_last;
    bool updated;   /* a draft or commit of the running chat was seen */
    char *rx;       /* the message being reassembled */
    size_t rx_len, rx_cap;
} lc;

typedef struct dvec {
    double *v;
    size_t n, cap;
} dvec;

typedef struct ld { /* the run */
    /* options */
    char host[256], path[256];
    int port, clients, max_tokens;
    long chats_cap; /* 0: run for duration */
    double duration, timeout;
    const char *api_key; /* sent as "Authorization: Bearer KEY" in the handshake, or NULL */
    json_t *prompts; /* array of {"messages": [...]} */
    size_t n_prompts;
    /* state */
    struct lws_context *ctx;
    lws_sorted_usec_list_t tick;
    lc *c;
    double t0, t_end; /* t_end: when the last connection closed */
    long started, done, tokens, cached_tokens;
    long err_connect, err_frames, err_closes, err_unfinished, err_bad;
    long finish_stop, finish_length, finish_other;
    int open, ever_connected;
    bool stop, finished, destroying; /* destroying: the context's last callbacks change nothing */
    char first_error[256];
    char *sample; /* the reply of chat 0, commits joined */
    size_t sample_len;
    dvec first, gaps;
} ld;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int dvec_push(dvec *d, double x)
{
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 256;
        double *v = realloc(d->v, cap * sizeof *v);
        if (!v)
            return -1;
        d->v = v, d->cap = cap;
    }
    d->v[d->n++] = x;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The p-th percentile as the nearest rank below (tests/server/load.mjs does the same); NAN
 * when empty. Sorts d. */
static double pct(dvec *d, double p)
{
    if (!d->n)
        return NAN;
    qsort(d->v, d->n, sizeof *d->v, cmp_double);
    size_t i = (size_t)(p / 100.0 * (double)d->n);
    return d->v[i < d->n ? i : d->n - 1];
}

static void note_error(ld *L, long *counter, const char *fmt, const char *what)
{
    (*counter)++;
    if (!L->first_error[0])
        snprintf(L->first_error, sizeof L->first_error, fmt, what ? what : "");
}

static bool may_start(const ld *L)
{
    if (L->stop)
        return false;
    return L->chats_cap ? L->started < L->chats_cap : now_s() - L->t0 < L->duration;
}

/* Next step of an idle client: another chat, or close. */
static void next(lc *c)
{
    ld *L = c->ld;
    if (may_start(L)) {
        c->chat = L->started++;
        c->state = LC_SENDING;
    } else {
        c->state = LC_CLOSING;
    }
    lws_callback_on_writable(c->wsi);
}

static int send_chat(lc *c)
{
    ld *L = c->ld;
    json_t *item = json_array_get(L->prompts, (size_t)(c->chat % (long)L->n_prompts));
    snprintf(c->id, sizeof c->id, "c%d-%d", c->idx, c->turn);
    json_t *msg = json_pack("{s:s, s:s, s:O, s:i}", "type", "chat", "id", c->id, "messages",
                            json_object_get(item, "messages"), "max_tokens", L->max_tokens);
    char *s = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
    json_decref(msg);
    size_t len = s ? strlen(s) : 0;
    unsigned char *buf = s ? malloc(LWS_PRE + len) : NULL;
    if (!buf) {
        free(s);
        note_error(L, &L->err_bad, "out of memory building a chat frame%s", NULL);
        return -1;
    }
    memcpy(buf + LWS_PRE, s, len);
    free(s);
    c->t_sent = now_s();
    c->updated = false;
    int n = lws_write(c->wsi, buf + LWS_PRE, len, LWS_WRITE_TEXT);
    free(buf);
    if (n < (int)len)
        return -1;
    c->turn++;
    c->state = LC_BUSY;
    return 0;
}

/* A whole message from the server. */
static void on_message(lc *c, const char *s, size_t len)
{
    ld *L = c->ld;
    json_error_t je;
    json_t *m = json_loadb(s, len, 0, &je);
    const char *type = m ? json_string_value(json_object_get(m, "type")) : NULL;
    if (!type) {
        note_error(L, &L->err_bad, "a server message that is not a JSON object with a type%s",
                   m ? "" : " (not JSON)");
        json_decref(m);
        return;
    }
    const char *id = json_string_value(json_object_get(m, "id"));
    bool mine = c->state == LC_BUSY && id && !strcmp(id, c->id);
    double t = now_s();
    if (!strcmp(type, "hello")) {
        if (c->state == LC_CONNECTING)
            next(c);
    } else if (mine && (!strcmp(type, "draft") || !strcmp(type, "commit"))) {
        if (!c->updated)
            dvec_push(&L->first, t - c->t_sent);
        else
            dvec_push(&L->gaps, t - c->t_last);
        c->updated = true;
        c->t_last = t;
        const char *text = json_string_value(json_object_get(m, "text"));
        if (c->chat == 0 && !strcmp(type, "commit") && text) {
            size_t tl = strlen(text);
            char *nb = realloc(L->sample, L->sample_len + tl + 1);
            if (nb) {
                memcpy(nb + L->sample_len, text, tl + 1);
                L->sample = nb, L->sample_len += tl;
            }
        }
    } else if (mine && !strcmp(type, "done")) {
        json_t *usage = json_object_get(m, "usage");
        const char *fin = json_string_value(json_object_get(m, "finish"));
        L->tokens += (long)json_integer_value(json_object_get(usage, "completion_tokens"));
        L->cached_tokens += (long)json_integer_value(json_object_get(usage, "cached_tokens"));
        if (fin && !strcmp(fin, "stop"))
            L->finish_stop++;
        else if (fin && !strcmp(fin, "length"))
            L->finish_length++;
        else
            L->finish_other++;
        L->done++;
        c->state = LC_IDLE;
        next(c);
    } else if (!strcmp(type, "error")) {
        const char *code = json_string_value(json_object_get(m, "code"));
        const char *msg = json_string_value(json_object_get(m, "message"));
        char what[200];
        snprintf(what, sizeof what, "%s: %s", code ? code : "?", msg ? msg : "?");
        note_error(L, &L->err_frames, "error frame %s", what);
        if (mine) { /* the chat is over */
            c->state = LC_IDLE;
            next(c);
        }
    }
    json_decref(m);
}

static int callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len)
{
    if (reason == LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER) { /* user may be NULL here */
        const ld *L = lws_context_user(lws_get_context(wsi));
        if (L && L->api_key) {
            char v[600];
            int n = snprintf(v, sizeof v, "Bearer %s", L->api_key);
            unsigned char **p = (unsigned char **)in, *end = *p + len;
            if (n >= (int)sizeof v ||
                lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_AUTHORIZATION, (unsigned char *)v, n, p, end))
                return -1;
        }
        return 0;
    }
    lc *c = user;
    if (!c || c->ld->destroying)
        return 0;
    ld *L = c->ld;
    switch (reason) {
    case LWS_CALLBACK_CLIENT_ESTABLISHED:
        L->ever_connected = 1;
        break;
    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
        note_error(L, &L->err_connect, "could not connect: %s", in ? (const char *)in : "no reason given");
        if (c->state == LC_BUSY || c->state == LC_SENDING)
            L->err_unfinished++;
        c->state = LC_CLOSED;
        c->wsi = NULL;
        L->open--;
        break;
    case LWS_CALLBACK_CLIENT_RECEIVE: {
        if (c->rx_len + len + 1 > c->rx_cap) {
            size_t cap = (c->rx_len + len + 1) * 2;
            char *nb = realloc(c->rx, cap);
            if (!nb) {
                note_error(L, &L->err_bad, "out of memory reading a message%s", NULL);
                return -1;
            }
            c->rx = nb, c->rx_cap = cap;
        }
        memcpy(c->rx + c->rx_len, in, len);
        c->rx_len += len;
        if (lws_is_final_fragment(wsi) && !lws_remaining_packet_payload(wsi)) {
            on_message(c, c->rx, c->rx_len);
            c->rx_len = 0;
        }
        break;
    }
    case LWS_CALLBACK_CLIENT_WRITEABLE:
        if (c->state == LC_SENDING)
            return send_chat(c);
        if (c->state == LC_CLOSING) {
            lws_close_reason(wsi, LWS_CLOSE_STATUS_NORMAL, (unsigned char *)"done", 4);
            return -1;
        }
        break;
    case LWS_CALLBACK_CLIENT_CLOSED:
        if (c->state == LC_BUSY || c->state == LC_SENDING) {
            note_error(L, &L->err_closes, "the server closed a connection with a chat running%s", NULL);
            L->err_unfinished++;
        } else if (c->state != LC_CLOSING) {
            note_error(L, &L->err_closes, "the server closed an idle connection%s", NULL);
        }
        c->state = LC_CLOSED;
        c->wsi = NULL;
        L->open--;
        break;
    default:
        break;
    }
    return 0;
}

static void on_tick(lws_sorted_usec_list_t *sul)
{
    ld *L = lws_container_of(sul, ld, tick);
    double t = now_s() - L->t0;
    if (!L->stop && !may_start(L))
        L->stop = true;
    if (t >= L->timeout) { /* give up: what still runs is unfinished */
        for (int i = 0; i < L->clients; i++)
            if (L->c[i].state == LC_BUSY || L->c[i].state == LC_SENDING)
                note_error(L, &L->err_unfinished, "chats still running after --timeout%s", NULL);
            else if (L->c[i].state == LC_CONNECTING)
                note_error(L, &L->err_connect, "connections without a hello after --timeout%s", NULL);
        L->finished = true;
        L->t_end = now_s();
        lws_cancel_service(L->ctx); /* else the service call waits out lws's idle poll */
        return;
    }
    if (L->stop)
        for (int i = 0; i < L->clients; i++)
            if (L->c[i].state == LC_IDLE) {
                L->c[i].state = LC_CLOSING;
                lws_callback_on_writable(L->c[i].wsi);
            }
    if (L->open <= 0) {
        L->finished = true;
        L->t_end = now_s();
        lws_cancel_service(L->ctx);
        return;
    }
    lws_sul_schedule(L->ctx, 0, &L->tick, on_tick, 50 * LWS_US_PER_MS);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: fogline bench load [options]\n\n"
               "N WebSocket clients against a running `fogline serve`, each running chats back to\n"
               "back (prompts of a help-desk set, round robin). Prints chats done, errors (every\n"
               "kind; exit status 1 when any), reply tokens/s, first draft and update gap p50/p99.\n\n"
               "  --url URL           the server's WebSocket (ws://127.0.0.1:8080/ws)\n"
               "  --clients N         connections at once (64; 1..4096)\n"
               "  --duration S        start chats for S seconds (30), then let them finish\n"
               "  --chats N           or: exactly N chats in all (0: use --duration)\n"
               "  --max-tokens N      each chat's max_tokens (48)\n"
               "  --api-key KEY       the server's --api-key (sent as Authorization: Bearer KEY)\n"
               "  --prompts FILE      [{\"messages\": [...]}, ...] (tests/data/helpdesk_heldout.json)\n"
               "  --timeout S         end the run after S seconds whatever runs (duration + 120)\n"
               "  --json FILE         also write the figures as JSON\n");
}

/* ws://host[:port][/path] into L; 0, or -1 with a message. */
static int parse_url(ld *L, const char *url, char *err, size_t cap)
{
    const char *p = url;
    if (strncmp(p, "ws://", 5)) {
        snprintf(err, cap, "--url must start with ws:// (wss is not supported), got '%s'", url);
        return -1;
    }
    p += 5;
    size_t hl = strcspn(p, ":/");
    if (!hl || hl >= sizeof L->host) {
        snprintf(err, cap, "--url has no host: '%s'", url);
        return -1;
    }
    memcpy(L->host, p, hl);
    L->host[hl] = 0;
    p += hl;
    long port = 80;
    if (*p == ':') {
        char num[8];
        size_t nl = strcspn(p + 1, "/");
        if (!nl || nl >= sizeof num) {
            snprintf(err, cap, "--url has a bad port: '%s'", url);
            return -1;
        }
        memcpy(num, p + 1, nl);
        num[nl] = 0;
        if (fl_parse_long(num, 1, 65535, &port)) {
            snprintf(err, cap, "--url has a bad port: '%s'", url);
            return -1;
        }
        p += 1 + nl;
    }
    L->port = (int)port;
    snprintf(L->path, sizeof L->path, "%s", *p ? p : "/");
    if (strlen(p) >= sizeof L->path) {
        snprintf(err, cap, "--url's path is too long");
        return -1;
    }
    return 0;
}

static int load_prompts(ld *L, const char *file)
{
    json_error_t je;
    L->prompts = json_load_file(file, 0, &je);
    if (!L->prompts) {
        fprintf(stderr, "fogline bench load: %s: %s (line %d)\n", file, je.text, je.line);
        return -1;
    }
    L->n_prompts = json_is_array(L->prompts) ? json_array_size(L->prompts) : 0;
    for (size_t i = 0; i < L->n_prompts; i++)
        if (!json_is_array(json_object_get(json_array_get(L->prompts, i), "messages"))) {
            fprintf(stderr, "fogline bench load: %s: item %zu has no \"messages\" array\n", file, i);
            return -1;
        }
    if (!L->n_prompts) {
        fprintf(stderr, "fogline bench load: %s: not a non-empty array of {\"messages\": [...]}\n", file);
        return -1;
    }
    return 0;
}

static void report(ld *L, const char *url, const char *json_file)
{
    double secs = L->t_end - L->t0;
    long errors = L->err_connect + L->err_frames + L->err_closes + L->err_unfinished + L->err_bad;
    double f50 = pct(&L->first, 50), f99 = pct(&L->first, 99), g50 = pct(&L->gaps, 50),
           g99 = pct(&L->gaps, 99), gmax = L->gaps.n ? L->gaps.v[L->gaps.n - 1] : NAN;
    printf("fogline bench load: %d clients, %s, max_tokens %d, against %s\n", L->clients,
           L->chats_cap ? "a fixed number of chats" : "for a duration", L->max_tokens, url);
    printf("| chats done | errors | reply tokens/s | chats/s | first draft p50 / p99 | update gap p50 / p99 / max |\n"
           "|---|---|---|---|---|---|\n");
    printf("| %ld in %.1f s | %ld | %.0f | %.1f | %.3f s / %.3f s | %.1f ms / %.1f ms / %.1f ms |\n",
           L->done, secs, errors, (double)L->tokens / secs, (double)L->done / secs, f50, f99,
           g50 * 1e3, g99 * 1e3, gmax * 1e3);
    printf("reply tokens %ld, cached prompt tokens %ld; finish stop %ld, length %ld, other %ld\n",
           L->tokens, L->cached_tokens, L->finish_stop, L->finish_length, L->finish_other);
    printf("errors: connect %ld, error frames %ld, unexpected closes %ld, unfinished chats %ld, "
           "other %ld%s%s\n",
           L->err_connect, L->err_frames, L->err_closes, L->err_unfinished, L->err_bad,
           L->first_error[0] ? "; first: " : "", L->first_error);
    if (L->sample)
        printf("first reply: %.200s\n", L->sample);
    if (json_file) {
        json_t *j = json_pack("{s:s, s:i, s:i, s:f, s:I, s:I, s:I, s:I, s:f, s:f, s:{s:I, s:I, s:I, s:I, s:I},"
                              " s:{s:I, s:I, s:I}}",
                              "url", url, "clients", L->clients, "max_tokens", L->max_tokens, "seconds", secs,
                              "chats_done", (json_int_t)L->done, "errors", (json_int_t)errors,
                              "reply_tokens", (json_int_t)L->tokens, "cached_tokens",
                              (json_int_t)L->cached_tokens, "reply_tokens_per_s", (double)L->tokens / secs,
                              "chats_per_s", (double)L->done / secs, "error_kinds", "connect",
                              (json_int_t)L->err_connect, "frames", (json_int_t)L->err_frames, "closes",
                              (json_int_t)L->err_closes, "unfinished", (json_int_t)L->err_unfinished, "other",
                              (json_int_t)L->err_bad, "finish", "stop", (json_int_t)L->finish_stop, "length",
                              (json_int_t)L->finish_length, "other", (json_int_t)L->finish_other);
        /* percentiles: null when nothing was measured */
        json_t *fd = json_object(), *ug = json_object();
        json_object_set_new(fd, "count", json_integer((json_int_t)L->first.n));
        json_object_set_new(fd, "p50_s", L->first.n ? json_real(f50) : json_null());
        json_object_set_new(fd, "p99_s", L->first.n ? json_real(f99) : json_null());
        json_object_set_new(ug, "count", json_integer((json_int_t)L->gaps.n));
        json_object_set_new(ug, "p50_ms", L->gaps.n ? json_real(g50 * 1e3) : json_null());
        json_object_set_new(ug, "p99_ms", L->gaps.n ? json_real(g99 * 1e3) : json_null());
        json_object_set_new(ug, "max_ms", L->gaps.n ? json_real(gmax * 1e3) : json_null());
        json_object_set_new(j, "first_draft", fd);
        json_object_set_new(j, "update_gap", ug);
        json_object_set_new(j, "first_error", json_string(L->first_error));
        json_object_set_new(j, "first_reply", json_string(L->sample ? L->sample : ""));
        if (json_dump_file(j, json_file, JSON_INDENT(1)))
            fprintf(stderr, "fogline bench load: could not write %s\n", json_file);
        json_decref(j);
    }
}

int fl_bench_ws_load(int argc, char **argv)
{
    ld L = {0};
    const char *url = "ws://127.0.0.1:8080/ws", *prompts = FL_DEFAULT_BENCH_PROMPTS, *json_file = NULL;
    long clients = 64, chats = 0, max_tokens = 48;
    double duration = 30, timeout = -1;
    struct option opts[] = {{"url", required_argument, 0, 'u'},        {"clients", required_argument, 0, 'c'},
                            {"duration", required_argument, 0, 'd'},   {"chats", required_argument, 0, 'n'},
                            {"max-tokens", required_argument, 0, 't'}, {"prompts", required_argument, 0, 'p'},
                            {"timeout", required_argument, 0, 'T'},    {"json", required_argument, 0, 'j'},
                            {"api-key", required_argument, 0, 'k'}, {"help", no_argument, 0, 'h'},
                            {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        long *dst = ch == 'c' ? &clients : ch == 'n' ? &chats : ch == 't' ? &max_tokens : NULL;
        if (dst) {
            long lo = ch == 'n' ? 0 : 1, hi = ch == 'c' ? 4096 : 1000000;
            if (fl_parse_long(optarg, lo, hi, dst)) {
                fprintf(stderr, "fogline bench load: --%s wants a number in %ld..%ld, got '%s'\n",
                        ch == 'c' ? "clients" : ch == 'n' ? "chats" : "max-tokens", lo, hi, optarg);
                return 2;
            }
            continue;
        }
        switch (ch) {
        case 'u': url = optarg; break;
        case 'p': prompts = optarg; break;
        case 'j': json_file = optarg; break;
        case 'k':
            if (!*optarg || strlen(optarg) > 512) {
                fprintf(stderr, "fogline bench load: --api-key wants 1..512 characters\n");
                return 2;
            }
            L.api_key = optarg;
            break;
        case 'd':
        case 'T': {
            char *end = NULL;
            double v = strtod(optarg, &end);
            if (!*optarg || *end || !(v > 0 && v <= 86400)) {
                fprintf(stderr, "fogline bench load: --%s wants seconds in (0, 86400], got '%s'\n",
                        ch == 'd' ? "duration" : "timeout", optarg);
                return 2;
            }
            *(ch == 'd' ? &duration : &timeout) = v;
            break;
        }
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, "fogline bench load: unknown or incomplete option '%s'\n", argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "fogline bench load: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    char err[512];
    if (parse_url(&L, url, err, sizeof err)) {
        fprintf(stderr, "fogline bench load: %s\n", err);
        return 2;
    }
    if (load_prompts(&L, prompts)) {
        json_decref(L.prompts);
        return 1;
    }
    L.clients = (int)clients, L.chats_cap = chats, L.max_tokens = (int)max_tokens;
    L.duration = duration;
    L.timeout = timeout > 0 ? timeout : (chats ? 600 : duration + 120);
    L.c = calloc((size_t)clients, sizeof *L.c);
    if (!L.c) {
        fprintf(stderr, "fogline bench load: out of memory\n");
        json_decref(L.prompts);
        return 1;
    }

    lws_set_log_level(0, NULL); /* failures are counted and reported here */
    struct lws_protocols protocols[] = {{"fogline-load", callback, 0, 1 << 16, 0, NULL, 0},
                                        {NULL, NULL, 0, 0, 0, NULL, 0}};
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    info.port = CONTEXT_PORT_NO_LISTEN;
    info.protocols = protocols;
    info.fd_limit_per_thread = (unsigned)clients + 64;
    info.user = &L;
    L.ctx = lws_create_context(&info);
    if (!L.ctx) {
        fprintf(stderr, "fogline bench load: could not create the WebSocket client context\n");
        free(L.c);
        json_decref(L.prompts);
        return 1;
    }
    L.t0 = now_s();
    for (int i = 0; i < L.clients; i++) {
        lc *c = &L.c[i];
        c->ld = &L, c->idx = i, c->state = LC_CONNECTING;
        struct lws_client_connect_info ci;
        memset(&ci, 0, sizeof ci);
        ci.context = L.ctx;
        ci.address = L.host;
        ci.port = L.port;
        ci.path = L.path;
        ci.host = L.host;
        ci.origin = L.host;
        ci.local_protocol_name = "fogline-load";
        ci.userdata = c;
        ci.pwsi = &c->wsi;
        L.open++;
        if (!lws_client_connect_via_info(&ci) && c->state != LC_CLOSED) {
            /* failed before any callback said so */
            note_error(&L, &L.err_connect, "could not connect: %s", "the connection was refused at once");
            c->state = LC_CLOSED;
            c->wsi = NULL;
            L.open--;
        }
    }
    lws_sul_schedule(L.ctx, 0, &L.tick, on_tick, 50 * LWS_US_PER_MS);
    while (!L.finished && lws_service(L.ctx, 0) >= 0)
        ;
    if (!L.t_end)
        L.t_end = now_s();
    lws_sul_schedule(L.ctx, 0, &L.tick, NULL, LWS_SET_TIMER_USEC_CANCEL);
    L.destroying = true;
    lws_context_destroy(L.ctx);
    int rc = 0;
    if (!L.ever_connected) {
        fprintf(stderr, "fogline bench load: no connection to %s succeeded (%s)\n", url,
                L.first_error[0] ? L.first_error : "no reason given");
        rc = 1;
    } else {
        report(&L, url, json_file);
        long errors = L.err_connect + L.err_frames + L.err_closes + L.err_unfinished + L.err_bad;
        if (errors) {
            fprintf(stderr, "fogline bench load: %ld errors; first: %s\n", errors, L.first_error);
            rc = 1;
        } else if (!L.done) {
            fprintf(stderr, "fogline bench load: no chat finished\n");
            rc = 1;
        }
    }
    for (int i = 0; i < L.clients; i++)
        free(L.c[i].rx);
    free(L.c);
    free(L.sample);
    free(L.first.v);
    free(L.gaps.v);
    json_decref(L.prompts);
    return rc;
}
