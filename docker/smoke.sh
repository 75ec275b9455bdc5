#!/usr/bin/env bash
# smoke.sh [BIN]: proves that a built fogline runs where it is, before an image is tagged:
# every shared library resolves, `fogline serve` starts with its default model and web UI
# (so the libwebsockets libuv plugin is there), /health and /ready answer, the UI's index is
# served and one short chat completes. Exits non-zero with the server's log when not.
# The Dockerfiles run it in their runtime stage; it runs on a bare-metal install too.
set -euo pipefail
bin=${1:-fogline}
port=${SMOKE_PORT:-18080}
log=$(mktemp)
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -f "$log"
}
trap cleanup EXIT
fail() {
  echo "smoke: $*" >&2
  sed 's/^/smoke: server: /' "$log" >&2
  exit 1
}
path=$(command -v "$bin") || fail "no binary '$bin'"
if ldd "$path" | grep 'not found' >&2; then
  fail "shared libraries missing (above)"
fi
# the image's FOGLINE_* variables would apply; the smoke test wants its own port on loopback
env -u FOGLINE_HOST -u FOGLINE_PORT "$path" serve --host 127.0.0.1 --port "$port" --threads 1 \
  >"$log" 2>&1 &
pid=$!
up=0
for _ in $(seq 100); do
  if curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1; then up=1; break; fi
  kill -0 "$pid" 2>/dev/null || fail "the server exited"
  sleep 0.2
done
[ "$up" = 1 ] || fail "no answer on /health after 20 s"
# bodies are read whole before matching: `curl | grep -q` fails under pipefail when grep
# stops reading early
ready=$(curl -fsS "http://127.0.0.1:$port/ready") || fail "/ready failed"
[[ "$ready" == *'"ready"'* ]] || fail "/ready is not ready: $ready"
index=$(curl -fsS "http://127.0.0.1:$port/") || fail "/ failed"
[[ "${index,,}" == *'<html'* ]] || fail "/ does not serve the web UI"
reply=$(curl -fsS "http://127.0.0.1:$port/v1/chat/completions" -H 'content-type: application/json' \
  -d '{"model":"fogline","max_tokens":8,"messages":[{"role":"user","content":"hello"}]}') \
  || fail "/v1/chat/completions failed"
[[ "$reply" =~ \"completion_tokens\":[1-9] ]] || fail "no reply tokens: $reply"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=""
[ "$rc" = 0 ] || fail "the server exited $rc after SIGTERM"
echo "smoke: ok ($path)"
