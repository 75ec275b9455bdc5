/* serve.c: `fogline serve`: setup, the loop, graceful shutdown.
 *
 * Order of things: parse flags and FOGLINE_* variables; create the lws context on our own
 * libuv loop and bind the port (a port in use fails here, before a model is loaded); load
 * the model and start the engine thread; run the loop. SIGTERM/SIGINT: stop accepting
 * connections, refuse new chats, let running requests finish within --drain-timeout, cancel
 * the rest, close clients with 1001 and a reason, then tear down in the order libwebsockets
 * needs on a foreign loop (../shared/STACK.md) and check that the loop closes cleanly. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <uv.h>

#include <libwebsockets.h>

#include "cli/cli.h"
#include "redis.h"
#include "serve.h"
#include "serve_request.h"
#include "serve_sink.h"

int srv_lws_callback(struct lws *wsi, int reason, void *user, void *in, size_t len)
{
    switch (reason) {
    case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE:
        return srv_ws_confirm_upgrade(lws_context_user(lws_get_context(wsi)), wsi, in);
    case LWS_CALLBACK_ESTABLISHED:
    case LWS_CALLBACK_RECEIVE:
    case LWS_CALLBACK_SERVER_WRITEABLE:
    case LWS_CALLBACK_CLOSED:
        return srv_ws_callback(wsi, reason, user, in, len);
    case LWS_CALLBACK_HTTP:
    case LWS_CALLBACK_HTTP_BODY:
    case LWS_CALLBACK_HTTP_BODY_COMPLETION:
    case LWS_CALLBACK_HTTP_WRITEABLE:
    case LWS_CALLBACK_HTTP_DROP_PROTOCOL:
    case LWS_CALLBACK_CLOSED_HTTP:
        return srv_http_callback(wsi, reason, user, in, len);
    default:
        return 0;
    }
}

static int lws_cb(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                  size_t len)
{
    return srv_lws_callback(wsi, (int)reason, user, in, len);
}

static const struct lws_protocols protocols[] = {
    {"fogline", lws_cb, sizeof(srv_pss), 65536, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* lws's own messages (errors only), in our line format. */
static void lws_emit(int level, const char *line)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char ts[32];
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        n--;
    fprintf(stderr, "%s.%03dZ %-5s event=lws message=\"%.*s\"\n", ts, (int)(tv.tv_usec / 1000),
            level & LLL_ERR ? "error" : "warn", (int)n, line);
}

static void on_wake(uv_async_t *a)
{
    srv_drain_events(a->data);
}

static void begin_drain(srv *s, const char *why)
{
    double now = srv_now_ms(s);
    if (s->draining) { /* a second signal: no more grace */
        SRV_WARN(&s->log, "event=shutdown_now reason=%s live_requests=%d", why, s->n_reqs);
        s->drain_deadline = now;
        if (s->closing_clients)
            s->close_deadline = now;
        return;
    }
    s->draining = true;
    s->drain_deadline = now + s->cfg->drain_s * 1e3;
    SRV_ALWAYS(&s->log, "event=draining reason=%s live_requests=%d connections=%d grace_s=%g", why,
             s->n_reqs, s->n_conns, s->cfg->drain_s);
    lws_context_deprecate(s->ctx, NULL); /* closes the listening socket: no new connections */
}

static void on_signal(uv_signal_t *h, int sig)
{
    begin_drain(h->data, sig == SIGTERM ? "SIGTERM" : "SIGINT");
}

static void on_tick(uv_timer_t *t)
{
    srv *s = t->data;
    srv_ws_tick(s);
    if (!s->draining)
        return;
    double now = srv_now_ms(s);
    if (!s->closing_clients) {
        if (s->n_reqs && now < s->drain_deadline)
            return;
        if (s->n_reqs && !s->cancel_sent) {
            /* cancel, then wait (briefly) for the done(cancelled) events so every client
               hears how its request ended before its connection closes */
            SRV_WARN(&s->log, "event=grace_over cancelled=%d", s->n_reqs);
            for (srv_req *r = s->reqs; r; r = r->s_next)
                srv_req_cancel(r);
            s->cancel_sent = true;
            s->drain_deadline = now + 2000;
            return;
        }
        s->closing_clients = true;
        s->close_deadline = now + 2000;
        srv_ws_close_all(s, LWS_CLOSE_STATUS_GOINGAWAY, "server shutting down");
        return;
    }
    if ((s->n_conns == 0 && s->n_reqs == 0) || now >= s->close_deadline)
        uv_stop(&s->loop);
}

/* The engine hold (FOGLINE_TEST_HOLD=1, docs/robustness.md): SIGUSR2 holds or releases the
 * engine, SIGUSR1 runs one forward while it is held. Each is acknowledged by one numbered log
 * line once no forward runs and that forward's events have been handed to their clients, so
 * a test waits on that line instead of on the clock. */
static void on_test_signal(uv_signal_t *h, int sig)
{
    srv *s = h->data;
    if (!s->engine)
        return;
    if (sig == SIGUSR2) {
        s->test_held = !s->test_held;
        fl_engine_hold(s->engine, s->test_held);
    } else if (s->test_held) {
        fl_engine_step(s->engine);
    }
    srv_drain_events(s);
    fl_sched_stats st;
    fl_engine_get_stats(s->engine, &st);
    SRV_ALWAYS(&s->log, "event=test_hold n=%d held=%d forwards=%lld running=%d queued=%d",
               ++s->test_acks, s->test_held, (long long)st.forwards, st.running, st.queued);
}

static void close_handle(uv_handle_t *h)
{
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

static void report_handle(uv_handle_t *h, void *arg)
{
    srv *s = arg;
    SRV_WARN(&s->log, "event=loop_not_closed handle=%s closing=%d", uv_handle_type_name(h->type),
             uv_is_closing(h));
}

int fl_cmd_serve(int argc, char **argv)
{
    srv_config cfg;
    char err[512];
    int rc = srv_config_parse(&cfg, argc, argv, err, sizeof err);
    if (rc) {
        if (rc < 0)
            fprintf(stderr, "fogline serve: %s\n", err);
        srv_config_free(&cfg);
        return rc > 0 ? 0 : 2;
    }
    srv *s = calloc(1, sizeof *s);
    if (!s) {
        fprintf(stderr, "fogline serve: out of memory\n");
        srv_config_free(&cfg);
        return 1;
    }
    s->cfg = &cfg;
    if (srv_faults_parse(&s->faults, getenv("FOGLINE_TEST_FAIL_ALLOC"), err, sizeof err)) {
        fprintf(stderr, "fogline serve: %s\n", err);
        free(s);
        srv_config_free(&cfg);
        return 2;
    }
    s->log.level = cfg.log_level;
    s->log.f = stderr;
    srv_seed_init(s, cfg.gen.seed_set, cfg.gen.dec.seed);
    s->id_nonce = (uint32_t)srv_entropy();
    srv_metrics_init(&s->m);
    signal(SIGPIPE, SIG_IGN); /* a peer gone mid-write is an error return, not a kill */
    lws_set_log_level(LLL_ERR, lws_emit);
    int exit_code = 1;
    bool loop_ok = false, mu_ok = false;
    if (uv_loop_init(&s->loop)) {
        fprintf(stderr, "fogline serve: cannot create the event loop\n");
        goto out;
    }
    loop_ok = true;
    uv_mutex_init(&s->ev_mu);
    mu_ok = true;
    uv_async_init(&s->loop, &s->wake, on_wake);
    s->wake.data = s;
    uv_timer_init(&s->loop, &s->tick);
    s->tick.data = s;
    uv_signal_init(&s->loop, &s->sigint);
    uv_signal_init(&s->loop, &s->sigterm);
    s->sigint.data = s->sigterm.data = s;
    uv_signal_init(&s->loop, &s->sighold);
    uv_signal_init(&s->loop, &s->sigstep);
    s->sighold.data = s->sigstep.data = s;

    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    void *loops[1] = {&s->loop};
    info.options = LWS_SERVER_OPTION_LIBUV | LWS_SERVER_OPTION_EXPLICIT_VHOSTS;
    info.foreign_loops = loops;
    info.user = s;
    info.port = CONTEXT_PORT_NO_LISTEN;
    s->ctx = lws_create_context(&info);
    if (!s->ctx) {
        fprintf(stderr, "fogline serve: cannot start libwebsockets on libuv (is the "
                        "libwebsockets-evlib-uv package installed?)\n");
        goto teardown;
    }
    struct lws_context_creation_info vi;
    memset(&vi, 0, sizeof vi);
    vi.port = cfg.port;
    bool any = !strcmp(cfg.host, "0.0.0.0") || !strcmp(cfg.host, "*") || !strcmp(cfg.host, "::");
    vi.iface = any ? NULL : cfg.host;
    vi.protocols = protocols;
    vi.vhost_name = "fogline";
    vi.options = LWS_SERVER_OPTION_LIBUV | LWS_SERVER_OPTION_EXPLICIT_VHOSTS;
    vi.keepalive_timeout = 30;
    vi.timeout_secs = 30;
    lws_set_log_level(0, lws_emit); /* a failed bind is reported below, in one line */
    s->vh = lws_create_vhost(s->ctx, &vi);
    lws_set_log_level(LLL_ERR, lws_emit);
    if (!s->vh) {
        fprintf(stderr, "fogline serve: cannot listen on %s:%d (port in use, or no such "
                        "address)\n", cfg.host, cfg.port);
        goto teardown;
    }
    fl_err e = {0};
    if (srv_engine_start(s, &e)) {
        fprintf(stderr, "fogline serve: %s\n", e.msg);
        goto teardown;
    }
    uv_timer_start(&s->tick, on_tick, 250, 250);
    uv_signal_start(&s->sigint, on_signal, SIGINT);
    uv_signal_start(&s->sigterm, on_signal, SIGTERM);
    const char *hold = getenv("FOGLINE_TEST_HOLD");
    if (hold && !strcmp(hold, "1")) {
        uv_signal_start(&s->sighold, on_test_signal, SIGUSR2);
        uv_signal_start(&s->sigstep, on_test_signal, SIGUSR1);
        SRV_WARN(&s->log, "event=test_hold_enabled note=\"SIGUSR2 holds the engine, SIGUSR1 steps it: "
                 "for tests only\"");
    }
    SRV_ALWAYS(&s->log, "event=listening url=http://%s:%d/ ws=ws://%s:%d/ws model=%s block_size=%d "
             "kv_pages=%d max_seqs=%d api_key=%s", cfg.host, lws_get_vhost_listen_port(s->vh),
             cfg.host, lws_get_vhost_listen_port(s->vh), s->model_id, s->model->cfg.block_size,
             s->n_pages, cfg.max_seqs, cfg.api_key ? "on" : "off");
    {
        const fl_decode_opts *d = &cfg.gen.dec;
        char edit[32];
        fl_dec_field_json(d, FL_DF_EDIT_THRESHOLD, edit, sizeof edit);
        SRV_ALWAYS(&s->log, "event=decoding policy=%s threshold=%g pipeline=%s overlap=%s "
                 "max_blocks=%d temperature=%g edit_threshold=%s max_post_steps=%d "
                 "sources=policy:%s,threshold:%s,pipeline:%s seeds=%s",
                 fl_policy_name(d->policy), (double)d->threshold, d->pipeline ? "on" : "off",
                 d->store_overlap ? "on" : "off", d->max_blocks, (double)d->temperature,
                 !strcmp(edit, "false") ? "off" : edit, d->max_post_steps,
                 fl_dec_source_name(s->dec_src[FL_DF_POLICY]),
                 fl_dec_source_name(s->dec_src[FL_DF_THRESHOLD]),
                 fl_dec_source_name(s->dec_src[FL_DF_PIPELINE]),
                 cfg.gen.seed_set ? "from_flag" : "random");
    }
    uv_run(&s->loop, UV_RUN_DEFAULT);
    exit_code = 0;

teardown:
    srv_engine_stop(s); /* cancels what still runs; its done events are handled here */
    srv_redis_close(s->redis); /* the last page writes go out; its handles close below */
    if (s->ctx)
        lws_context_destroy(s->ctx);
    close_handle((uv_handle_t *)&s->wake);
    close_handle((uv_handle_t *)&s->tick);
    close_handle((uv_handle_t *)&s->sigint);
    close_handle((uv_handle_t *)&s->sigterm);
    close_handle((uv_handle_t *)&s->sighold);
    close_handle((uv_handle_t *)&s->sigstep);
    uv_run(&s->loop, UV_RUN_DEFAULT); /* lws's handles close; pending tokenizations finish */
    if (s->ctx)
        lws_context_destroy(s->ctx);
    s->ctx = NULL;
    srv_drain_events(s);
    if (uv_loop_close(&s->loop)) {
        uv_walk(&s->loop, report_handle, s);
        SRV_ERROR(&s->log, "event=loop_not_closed");
        exit_code = 1;
    }
    loop_ok = false;
    if (exit_code == 0)
        SRV_ALWAYS(&s->log, "event=stopped requests_left=%d", s->n_reqs);
out:
    if (loop_ok)
        uv_loop_close(&s->loop);
    if (mu_ok)
        uv_mutex_destroy(&s->ev_mu);
    srv_redis_free(s->redis);
    fl_backend_destroy(s->backend);
    if (s->tier)
        fl_tier_destroy(s->tier);
    fl_cons_cache_free(s->cons);
    fl_model_free(s->model);
    free(s);
    srv_config_free(&cfg);
    return exit_code;
}
