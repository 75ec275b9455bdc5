/* serve_config.c: `fogline serve` flags. Every flag has a FOGLINE_* variable (the flag's
 * name upper-cased, '-' as '_': --max-queued is FOGLINE_MAX_QUEUED; a switch such as
 * --no-pipeline is on when its variable is 1/true/yes). Variables are read first, then the
 * command line, so a flag overrides the environment. */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "backend_select.h"
#include "redis.h"
#include "serve.h"

enum {
    O_HOST = 1000, O_PORT, O_MODEL, O_TMPL, O_WEB, O_KEY, O_ORIGINS, O_THREADS, O_MAX_CONN,
    O_MAX_CONN_REQ, O_MAX_QUEUED, O_MAX_SEQS, O_MAX_BATCH, O_MAX_MSG, O_MAX_PROMPT, O_MAX_TOK_LIMIT,
    O_KV_PAGES, O_KV_HOST_MB, O_DRAIN, O_WS_BACKLOG, O_WS_STALL, O_WS_SNDBUF, O_LOG_LEVEL, O_REDIS, O_REDIS_SES_TTL, O_REDIS_KV_TTL, O_REDIS_KV_CAP,
    O_REDIS_TIMEOUT, O_REDIS_CONN_TIMEOUT, O_DEVICE, O_TMPL_KWARGS, O_WEIGHTS, O_KV_FORMAT, O_HELP
};

static const struct option serve_opts[] = {
    {"host", required_argument, 0, O_HOST},
    {"port", required_argument, 0, O_PORT},
    {"model", required_argument, 0, O_MODEL},
    {"chat-template", required_argument, 0, O_TMPL},
    {"chat-template-kwargs", required_argument, 0, O_TMPL_KWARGS},
    {"web-root", required_argument, 0, O_WEB},
    {"api-key", required_argument, 0, O_KEY},
    {"allowed-origins", required_argument, 0, O_ORIGINS},
    {"threads", required_argument, 0, O_THREADS},
    {"device", required_argument, 0, O_DEVICE},
    {"weights", required_argument, 0, O_WEIGHTS},
    {"kv-format", required_argument, 0, O_KV_FORMAT},
    {"max-connections", required_argument, 0, O_MAX_CONN},
    {"max-conn-requests", required_argument, 0, O_MAX_CONN_REQ},
    {"max-queued", required_argument, 0, O_MAX_QUEUED},
    {"max-seqs", required_argument, 0, O_MAX_SEQS},
    {"max-batch-tokens", required_argument, 0, O_MAX_BATCH},
    {"max-message-bytes", required_argument, 0, O_MAX_MSG},
    {"max-prompt-tokens", required_argument, 0, O_MAX_PROMPT},
    {"max-tokens-limit", required_argument, 0, O_MAX_TOK_LIMIT},
    {"kv-pages", required_argument, 0, O_KV_PAGES},
    {"kv-host-mb", required_argument, 0, O_KV_HOST_MB},
    {"drain-timeout", required_argument, 0, O_DRAIN},
    {"ws-max-backlog", required_argument, 0, O_WS_BACKLOG},
    {"ws-stall-timeout", required_argument, 0, O_WS_STALL},
    {"ws-sndbuf", required_argument, 0, O_WS_SNDBUF},
    {"log-level", required_argument, 0, O_LOG_LEVEL},
    {"redis", required_argument, 0, O_REDIS},
    {"redis-session-ttl", required_argument, 0, O_REDIS_SES_TTL},
    {"redis-kv-ttl", required_argument, 0, O_REDIS_KV_TTL},
    {"redis-kv-cap-mb", required_argument, 0, O_REDIS_KV_CAP},
    {"redis-timeout-ms", required_argument, 0, O_REDIS_TIMEOUT},
    {"redis-connect-timeout-ms", required_argument, 0, O_REDIS_CONN_TIMEOUT},
    {"help", no_argument, 0, O_HELP},
};

void srv_config_usage(FILE *f)
{
    fprintf(f,
            "usage: fogline serve [options]\n\n"
            "Serves the model over WebSocket (/ws) and HTTP on one port: the web UI (/), /health,\n"
            "/ready, /metrics, /v1/models, /v1/chat/completions, /v1/completions, /v1/responses,\n"
            "/generate, /tokenize, /detokenize. Each flag has a FOGLINE_* variable (--max-queued:\n"
            "FOGLINE_MAX_QUEUED; switches: =1); flags win.\n\n"
            "  --host ADDR              address to listen on (127.0.0.1; 0.0.0.0 for all)\n"
            "  --port N                 port (8080)\n"
            "  --model DIR              model directory (the built-in model)\n"
            "  --chat-template K        override the template: chatml | qwen3 | fogline | ling\n"
            "  --chat-template-kwargs J the template variables requests get unless they set\n"
            "                           chat_template_kwargs: a JSON object, e.g.\n"
            "                           '{\"enable_thinking\": false}' (default: the template's own)\n"
            "  --web-root DIR           static files served at / (the repository's web/)\n"
            "  --api-key KEY            require this key: HTTP 'Authorization: Bearer KEY' on /v1/*,\n"
            "                           /generate, /tokenize and /detokenize;\n"
            "                           WebSocket: that header, or a first message\n"
            "                           {\"type\":\"auth\",\"key\":KEY}\n"
            "  --allowed-origins LIST   comma-separated Origin values allowed (any when unset)\n"
            "  --threads N              compute threads (all cores)\n"
            "  --device D               auto (the GPU when one is usable, else the CPU) | cpu |\n"
            "                           cuda (auto); the choice and its reason are logged\n"
            "  --weights F              format the weights are held in: auto (a quantized directory's\n"
            "                           format, bf16 when the file's are, else f32) | f32 | bf16 |\n"
            "                           q8 | q4 (CPU; quantized at load) (auto); logged, and shown\n"
            "                           in /v1/models and the WebSocket hello\n"
            "  --kv-format F            format the KV pages are held in: auto (f32 on the CPU, bf16\n"
            "                           on CUDA) | f32 (CPU only) | bf16 (half the bytes attention\n"
            "                           reads; keys and values rounded) (auto); logged and shown\n"
            "                           where --weights is\n"
            "limits:\n"
            "  --max-connections N      WebSocket connections at once (1024)\n"
            "  --max-conn-requests N    running requests per WebSocket connection (8)\n"
            "  --max-queued N           requests waiting for the engine, server-wide (256)\n"
            "  --max-seqs N             sequences decoded at once (64)\n"
            "  --max-batch-tokens N     tokens per forward at most (1024)\n"
            "  --max-message-bytes N    WebSocket message / HTTP body size (1048576)\n"
            "  --max-prompt-tokens N    templated prompt tokens (the model's positions allow)\n"
            "  --max-tokens-limit N     the largest max_tokens a request may ask for (1024)\n"
            "  --kv-pages N             KV cache pages (enough for max-seqs full requests)\n"
            "  --kv-host-mb N           keep committed KV pages in a host-memory tier (0: off)\n"
            "operation:\n"
            "  --drain-timeout S        on SIGTERM/SIGINT, let running requests finish for S s (10)\n"
            "  --ws-max-backlog BYTES   output queued for one client before it is closed (4194304)\n"
            "  --ws-stall-timeout S     close a client whose oldest queued frame has waited S s (10)\n"
            "  --ws-sndbuf BYTES        kernel send buffer per WebSocket (0: autotuned; small values\n"
            "                           bound kernel memory per client and find slow ones sooner)\n"
            "  --log-level L            debug | info | warn | error (info)\n"
            "Redis, the cross-session cache (off without --redis; the server runs and attaches\n"
            "whenever Redis is reachable; a Redis fault is a cache miss, never a failed chat):\n"
            "  --redis URL              redis://[[user]:password@]host[:port][/db]\n"
            "  --redis-session-ttl S    a session lives S s after its last turn (86400)\n"
            "  --redis-kv-ttl S         a KV page lives S s after its last write (3600)\n"
            "  --redis-kv-cap-mb N      KV pages kept in Redis at most; oldest evicted (1024)\n"
            "  --redis-timeout-ms N     a command not answered by then is a miss (250)\n"
            "  --redis-connect-timeout-ms N  a connection not ready by then is retried (1000)\n"
            "request defaults (a request's own fields win; --max-tokens is the default max_tokens):\n");
    fl_gen_opts_usage(f);
}

static int parse_double(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        return -1;
    *out = v;
    return 0;
}

static int set_str(char **dst, const char *v)
{
    char *d = strdup(v);
    if (!d)
        return -1;
    free(*dst);
    *dst = d;
    return 0;
}

static int set_origins(srv_config *c, const char *v)
{
    for (int i = 0; i < c->n_origins; i++)
        free(c->origins[i]);
    free(c->origins);
    c->origins = NULL;
    c->n_origins = 0;
    const char *p = v;
    while (*p) {
        while (*p == ' ' || *p == ',')
            p++;
        const char *q = p;
        while (*q && *q != ',')
            q++;
        const char *e = q;
        while (e > p && e[-1] == ' ')
            e--;
        if (e > p) {
            char **no = realloc(c->origins, sizeof(char *) * (size_t)(c->n_origins + 1));
            if (!no)
                return -1;
            c->origins = no;
            if (!(c->origins[c->n_origins] = strndup(p, (size_t)(e - p))))
                return -1;
            c->n_origins++;
        }
        p = q;
    }
    return 0;
}

bool srv_origin_allowed(const srv_config *c, const char *origin)
{
    if (c->n_origins == 0)
        return true;
    for (int i = 0; i < c->n_origins; i++)
        if (!strcmp(c->origins[i], "*") || (origin && !strcmp(c->origins[i], origin)))
            return true;
    return false;
}

/* Applies one option; name is what the user wrote (flag or variable) for messages. */
static int apply(srv_config *c, int code, const char *arg, const char *name, char *err, size_t n)
{
    long v;
    double d;
#define BAD(...)                                                                                   \
    do {                                                                                           \
        snprintf(err, n, __VA_ARGS__);                                                             \
        return -2;                                                                                 \
    } while (0)
#define LONG(lo, hi, field)                                                                        \
    do {                                                                                           \
        if (fl_parse_long(arg, lo, hi, &v))                                                           \
            BAD("%s needs an integer in [%ld, %ld], got '%s'", name, (long)(lo), (long)(hi), arg); \
        field = (int)v;                                                                            \
    } while (0)
    switch (code) {
    case O_HOST: if (set_str(&c->host, arg)) BAD("out of memory"); break;
    case O_PORT: LONG(1, 65535, c->port); break;
    case O_MODEL: if (set_str(&c->model_dir, arg)) BAD("out of memory"); break;
    case O_TMPL: if (set_str(&c->chat_template, arg)) BAD("out of memory"); break;
    case O_TMPL_KWARGS: {
        json_error_t je;
        json_t *j = json_loads(arg, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
        if (!j)
            BAD("%s is not valid JSON (%s): '%.80s'", name, je.text, arg);
        char e2[300];
        bool think = true; /* each setting starts from the template's own default */
        int rc = srv_template_kwargs_parse(j, name, &think, e2, sizeof e2);
        json_decref(j);
        if (rc)
            BAD("%s", e2);
        c->enable_thinking = think;
        break;
    }
    case O_WEB: if (set_str(&c->web_root, arg)) BAD("out of memory"); break;
    case O_KEY:
        if (!arg[0])
            BAD("%s is empty", name);
        if (set_str(&c->api_key, arg))
            BAD("out of memory");
        break;
    case O_ORIGINS: if (set_origins(c, arg)) BAD("out of memory"); break;
    case O_THREADS: LONG(0, 1024, c->threads); break;
    case O_DEVICE:
        if (!arg[0] || !fl_backend_device_valid(arg))
            BAD("%s must be auto, cpu or cuda, got '%s'", name, arg);
        snprintf(c->device, sizeof c->device, "%s", arg);
        break;
    case O_WEIGHTS: {
        fl_err we = {0};
        if (fl_wformat_parse(arg, &c->weights, &we))
            BAD("%s %s", name, we.msg);
        break;
    }
    case O_KV_FORMAT: {
        fl_err ke = {0};
        if (fl_kvformat_parse(arg, &c->kv, &ke))
            BAD("%s %s", name, ke.msg);
        break;
    }
    case O_MAX_CONN: LONG(1, 1000000, c->max_connections); break;
    case O_MAX_CONN_REQ: LONG(1, 1024, c->max_conn_requests); break;
    case O_MAX_QUEUED: LONG(0, 1000000, c->max_queued); break;
    case O_MAX_SEQS: LONG(1, 4096, c->max_seqs); break;
    case O_MAX_BATCH: LONG(16, 1 << 20, c->max_batch_tokens); break;
    case O_MAX_MSG:
        if (fl_parse_long(arg, 256, 1L << 30, &v))
            BAD("%s needs an integer in [256, 1073741824], got '%s'", name, arg);
        c->max_message = (size_t)v;
        break;
    case O_MAX_PROMPT: LONG(1, 1 << 24, c->max_prompt_tokens); break;
    case O_MAX_TOK_LIMIT: LONG(1, 1 << 20, c->max_tokens_limit); break;
    case O_KV_PAGES: LONG(1, 1 << 24, c->kv_pages); break;
    case O_KV_HOST_MB: LONG(0, 1 << 24, c->kv_host_mb); break;
    case O_DRAIN:
        if (parse_double(arg, 0, 86400, &d))
            BAD("%s needs seconds in [0, 86400], got '%s'", name, arg);
        c->drain_s = d;
        break;
    case O_WS_BACKLOG:
        if (fl_parse_long(arg, 1024, 1L << 30, &v))
            BAD("%s needs bytes in [1024, 1073741824], got '%s'", name, arg);
        c->ws_max_backlog = (size_t)v;
        break;
    case O_WS_STALL:
        if (parse_double(arg, 0.1, 86400, &d))
            BAD("%s needs seconds in [0.1, 86400], got '%s'", name, arg);
        c->ws_stall_s = d;
        break;
    case O_WS_SNDBUF: LONG(0, 1 << 26, c->ws_sndbuf); break;
    case O_REDIS: {
        srv_redis_url u;
        char e2[300];
        if (srv_redis_url_parse(arg, &u, e2, sizeof e2))
            BAD("%s: %s", name, e2);
        if (set_str(&c->redis_url, arg))
            BAD("out of memory");
        break;
    }
    case O_REDIS_SES_TTL: LONG(1, 1 << 30, c->redis_session_ttl); break;
    case O_REDIS_KV_TTL: LONG(1, 1 << 30, c->redis_kv_ttl); break;
    case O_REDIS_KV_CAP: LONG(1, 1 << 24, c->redis_kv_cap_mb); break;
    case O_REDIS_TIMEOUT: LONG(1, 600000, c->redis_timeout_ms); break;
    case O_REDIS_CONN_TIMEOUT: LONG(1, 600000, c->redis_connect_timeout_ms); break;
    case O_LOG_LEVEL:
        if (srv_log_level_parse(arg, &c->log_level))
            BAD("%s must be debug, info, warn or error, got '%s'", name, arg);
        break;
    default: {
        char e2[256];
        if (fl_gen_opts_apply(&c->gen, code, arg, e2, sizeof e2))
            BAD("%s: %s", name, e2);
    }
    }
    return 0;
#undef LONG
#undef BAD
}

static bool truthy(const char *v)
{
    return !strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") ||
           !strcasecmp(v, "on");
}

int srv_config_parse(srv_config *c, int argc, char **argv, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->port = 8080;
    c->enable_thinking = true; /* Qwen3's template with enable_thinking undefined */
    snprintf(c->device, sizeof c->device, "auto");
    c->max_connections = 1024;
    c->max_conn_requests = 8;
    c->max_queued = 256;
    c->max_seqs = 64;
    c->max_batch_tokens = 1024;
    c->max_message = 1 << 20;
    c->max_tokens_limit = 1024;
    c->drain_s = 10;
    c->ws_max_backlog = 4u << 20;
    c->ws_stall_s = 10;
    c->log_level = SRV_LOG_INFO;
    c->redis_session_ttl = 86400;
    c->redis_kv_ttl = 3600;
    c->redis_kv_cap_mb = 1024;
    c->redis_timeout_ms = 250;
    c->redis_connect_timeout_ms = 1000;
    fl_gen_opts_default(&c->gen);
    if (set_str(&c->host, "127.0.0.1") || set_str(&c->web_root, FL_DEFAULT_WEB_DIR) ||
        set_str(&c->model_dir, FL_DEFAULT_MODEL_DIR)) {
        snprintf(err, errlen, "out of memory");
        return -2;
    }
    struct option opts[96];
    fl_gen_opts_longopts(opts, 96, serve_opts, (int)(sizeof serve_opts / sizeof serve_opts[0]));
    /* the environment first */
    for (int i = 0; opts[i].name; i++) {
        if (opts[i].val == O_HELP)
            continue;
        char var[96] = "FOGLINE_";
        size_t k = strlen(var);
        for (const char *p = opts[i].name; *p && k < sizeof var - 1; p++)
            var[k++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
        var[k] = 0;
        const char *v = getenv(var);
        if (!v)
            continue;
        if (opts[i].has_arg == no_argument) {
            if (!truthy(v))
                continue;
            v = "";
        }
        int rc = apply(c, opts[i].val, v, var, err, errlen);
        if (rc)
            return rc;
    }
    optind = 1;
    opterr = 0;
    int ch, li = -1;
    while ((ch = getopt_long(argc, argv, "", opts, &li)) != -1) {
        if (ch == O_HELP) {
            srv_config_usage(stdout);
            return 1;
        }
        if (ch == '?') {
            snprintf(err, errlen, "unknown or incomplete option '%s' (try --help)", argv[optind - 1]);
            return -2;
        }
        char name[80];
        snprintf(name, sizeof name, "--%s", li >= 0 ? opts[li].name : "?");
        int rc = apply(c, ch, optarg ? optarg : "", name, err, errlen);
        if (rc)
            return rc;
        li = -1;
    }
    if (optind < argc) {
        snprintf(err, errlen, "unexpected argument '%s'", argv[optind]);
        return -2;
    }
    if (c->gen.max_tokens > c->max_tokens_limit) {
        snprintf(err, errlen, "--max-tokens %d is above --max-tokens-limit %d", c->gen.max_tokens,
                 c->max_tokens_limit);
        return -2;
    }
    return 0;
}

void srv_config_free(srv_config *c)
{
    free(c->host);
    free(c->model_dir);
    free(c->chat_template);
    free(c->web_root);
    free(c->api_key);
    free(c->redis_url);
    for (int i = 0; i < c->n_origins; i++)
        free(c->origins[i]);
    free(c->origins);
    fl_gen_opts_free(&c->gen);
    memset(c, 0, sizeof *c);
}
