#!/usr/bin/env bash
# tests/gpu/serve.sh: the real server on this machine, as a deployment runs it (run.sh's serve
# stage; any machine with FL_GPU_SELFTEST's --device cpu):
#
#   bash tests/gpu/serve.sh BIN DEVICE [DEPS_ROOT] [CLIENTS] [LOAD]
#
# BIN: a `fogline` built by tests/gpu/CMakeLists.txt; DEVICE: cuda or cpu; DEPS_ROOT: the
# unpacked packages of tests/gpu/prepare.sh (the server's shared libraries, lws's libuv plugin,
# redis-server), unless the system has them. Steps, each printing one "serve: ..." line:
#   redis    redis-server on a free port (the system's, or DEPS_ROOT's), when there is one
#   start    `fogline serve --device DEVICE [--redis ...]` on the built-in model; its backend
#            line must name DEVICE
#   chat     one WebSocket chat (`fogline bench load --chats 1`): its reply
#   openai   /v1/models and /v1/chat/completions plain and streamed (tests/gpu/http_check.py)
#   load     CLIENTS WebSocket clients (200) running chats back to back, LOAD: "30s" (the
#            default) for 30 seconds, or "48" for 48 chats in all; errors, tokens/s, first
#            draft p50/p99 (`fogline bench load`)
#   metrics  requests, forwards and the Redis counters from /metrics
#   stop     SIGTERM: the server drains and must exit 0
# Exit 0 when every step passed, 77 when the server cannot run here (said why), else 1.
set -u -o pipefail
bin=${1:?usage: serve.sh BIN DEVICE [DEPS_ROOT] [CLIENTS] [LOAD]}
dev=${2:?usage: serve.sh BIN DEVICE [DEPS_ROOT] [CLIENTS] [LOAD]}
deps=${3:-}
clients=${4:-200}
spec=${5:-30s}
case $spec in
    *s) lspec=(--duration "${spec%s}" --timeout $((${spec%s} + 120))) ;;
    *) lspec=(--chats "$spec") ;;
esac
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/fogline-serve.XXXXXX)
spid="" rpid="" lpid=""
cleanup() {
    [ -n "$lpid" ] && kill -9 "$lpid" 2>/dev/null
    [ -n "$spid" ] && kill -9 "$spid" 2>/dev/null
    [ -n "$rpid" ] && kill -9 "$rpid" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
# run.sh's stage limit stops this script with SIGTERM: the server and redis-server go too, so
# that they hold no GPU memory for the stages after it
trap 'exit 143' TERM INT
say() { echo "serve: $*"; }

# The carried libraries only for the server and redis-server (not for python3 and the rest).
libs=""
if [ -n "$deps" ] && [ -d "$deps/usr/lib/x86_64-linux-gnu" ]; then
    libs="$deps/usr/lib/x86_64-linux-gnu"
    # lws looks for its libuv event plugin in the one folder it was built for
    plugin=/usr/lib/x86_64-linux-gnu/libwebsockets-evlib_uv.so
    if [ ! -e "$plugin" ]; then
        if ! cp "$libs/libwebsockets-evlib_uv.so" "$plugin" 2>/dev/null; then
            say "SKIP: lws's libuv plugin is not at $plugin and cannot be put there (not root?)"
            exit 77
        fi
        say "put lws's libuv plugin at $plugin"
    fi
fi
# `env "${envp[@]}" CMD &`: env execs CMD, so $! is CMD's pid (a shell function would fork)
envp=()
[ -n "$libs" ] && envp=(LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# wait_for FILE REGEX SECONDS PID: 0 when FILE has a line matching REGEX, 1 when PID exited or
# the time ran out
wait_for() {
    local i
    for ((i = 0; i < $3 * 10; i++)); do
        grep -qE "$2" "$1" 2>/dev/null && return 0
        kill -0 "$4" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# ---------------------------------------------------------------- redis
redis_url=""
# DEPS_ROOT's when there is one (what the GPU machine runs), else the system's
rbin=$(command -v redis-server || true)
if [ -n "$deps" ] && [ -x "$deps/usr/bin/redis-check-rdb" ]; then
    ln -s "$deps/usr/bin/redis-check-rdb" "$work/redis-server" # it serves when so named
    rbin=$work/redis-server
fi
if [ -n "$rbin" ]; then
    rport=$(free_port)
    env "${envp[@]}" "$rbin" --port "$rport" --bind 127.0.0.1 --save '' --appendonly no >"$work/redis.log" 2>&1 &
    rpid=$!
    if wait_for "$work/redis.log" 'Ready to accept connections' 10 "$rpid"; then
        redis_url=redis://127.0.0.1:$rport
        say "redis: $("$rbin" --version 2>/dev/null | cut -c1-60) on port $rport"
    else
        say "redis: did not start, the server runs without it: $(tail -n 2 "$work/redis.log" | tr '\n' ' ' | cut -c1-200)"
        rpid=""
    fi
else
    say "redis: no redis-server here; the server runs without it"
fi

# ---------------------------------------------------------------- start
port=$(free_port)
env "${envp[@]}" "$bin" serve --device "$dev" --port "$port" --max-connections $((clients + 64)) \
    ${redis_url:+--redis "$redis_url"} >"$work/serve.log" 2>&1 &
spid=$!
if ! wait_for "$work/serve.log" 'event=listening' 120 "$spid"; then
    say "FAIL start: not listening (exit $(kill -0 $spid 2>/dev/null && echo none || (wait $spid; echo $?)))"
    sed 's/^/    | /' "$work/serve.log" | tail -n 15
    spid=""
    exit 1
fi
backend=$(grep -m1 'event=backend' "$work/serve.log")
say "start: $(echo "$backend" | grep -o 'device=.*' | cut -c1-300)"
if ! echo "$backend" | grep -q "chosen=\"\?$dev"; then
    say "FAIL start: the backend is not $dev"
    exit 1
fi
fails=0
url=ws://127.0.0.1:$port/ws

# ---------------------------------------------------------------- chat
if env "${envp[@]}" "$bin" bench load --url "$url" --clients 1 --chats 1 --max-tokens 48 >"$work/chat.out" 2>&1; then
    say "chat: $(grep -m1 '^first reply:' "$work/chat.out" | cut -c14-200)"
else
    say "FAIL chat: $(tail -n 1 "$work/chat.out" | cut -c1-300)"
    fails=$((fails + 1))
fi

# ---------------------------------------------------------------- openai
if python3 "$root/tests/gpu/http_check.py" chat "http://127.0.0.1:$port" >"$work/http.out" 2>&1; then
    say "openai: $(grep -E 'tokens, finish|streamed' "$work/http.out" | sed 's/^http_check: //' | cut -c1-160 | tr '\n' ';')"
else
    say "FAIL openai: $(tail -n 1 "$work/http.out" | cut -c1-300)"
    fails=$((fails + 1))
fi

# ---------------------------------------------------------------- load
# in the background and waited for: a SIGTERM (the stage's limit) then ends the wait at once
env "${envp[@]}" "$bin" bench load --url "$url" --clients "$clients" "${lspec[@]}" --max-tokens 48 \
    >"$work/load.out" 2>&1 &
lpid=$!
wait "$lpid"
lrc=$?
lpid=""
if ((lrc == 0)); then
    say "load: $(grep -E '^\| [0-9]+ in' "$work/load.out")"
else
    say "FAIL load: $(grep -E '^\| [0-9]+ in' "$work/load.out") $(tail -n 1 "$work/load.out" | cut -c1-300)"
    fails=$((fails + 1))
fi
sed 's/^/    | /' "$work/load.out"

# ---------------------------------------------------------------- metrics
if python3 "$root/tests/gpu/http_check.py" metrics "http://127.0.0.1:$port" >"$work/metrics.out" 2>&1; then
    say "metrics: $(sed 's/^http_check: metrics: //' "$work/metrics.out" | cut -c1-900)"
else
    say "FAIL metrics: $(tail -n 1 "$work/metrics.out" | cut -c1-300)"
    fails=$((fails + 1))
fi

# ---------------------------------------------------------------- stop
kill -TERM "$spid"
wait "$spid"
rc=$?
spid=""
if ((rc == 0)); then
    say "stop: exit 0 after SIGTERM"
else
    say "FAIL stop: exit $rc after SIGTERM"
    sed 's/^/    | /' "$work/serve.log" | tail -n 10
    fails=$((fails + 1))
fi
grep -E ' (error|warn) ' "$work/serve.log" | head -n 5 | sed 's/^/    | /'
exit $((fails ? 1 : 0))
