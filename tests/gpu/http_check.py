#!/usr/bin/env python3
"""tests/gpu/http_check.py: the HTTP side of a running `fogline serve`, for tests/gpu/serve.sh.

  python3 tests/gpu/http_check.py chat URL      the OpenAI API as a client calls it
  python3 tests/gpu/http_check.py metrics URL   the /metrics figures the serve stage reports

chat: GET /v1/models, then POST /v1/chat/completions plain and streamed (server-sent events to
`data: [DONE]`), each checked for OpenAI's shapes: the official openai client is an npm
package, and the GPU machine has no node, so this speaks the same HTTP with urllib. Prints one
line per check and exits 1 at the first that fails.
"""
import json
import sys
import urllib.request

QUESTION = "Where is my order 48213? It was due on Monday."


def call(base, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=120)


def fail(msg):
    print(f"http_check: FAIL {msg}")
    sys.exit(1)


def chat(base):
    with call(base, "/v1/models") as r:
        models = json.load(r)
    if models.get("object") != "list" or not models.get("data"):
        fail(f"/v1/models: not a model list: {json.dumps(models)[:200]}")
    model = models["data"][0]["id"]
    print(f"http_check: models: {model}")
    body = {"model": model, "messages": [{"role": "user", "content": QUESTION}], "max_tokens": 48}
    with call(base, "/v1/chat/completions", body) as r:
        plain = json.load(r)
    ch = (plain.get("choices") or [{}])[0]
    content = (ch.get("message") or {}).get("content")
    usage = plain.get("usage") or {}
    if plain.get("object") != "chat.completion" or not isinstance(content, str) or not content:
        fail(f"chat completion: unexpected shape: {json.dumps(plain)[:300]}")
    if ch.get("finish_reason") not in ("stop", "length") or not usage.get("completion_tokens"):
        fail(f"chat completion: finish_reason {ch.get('finish_reason')!r}, usage {usage}")
    print(f"http_check: chat completion: {usage['completion_tokens']} tokens, "
          f"finish {ch['finish_reason']}: {content[:120]!r}")
    with call(base, "/v1/chat/completions", dict(body, stream=True)) as r:
        ctype = r.headers.get("Content-Type", "")
        lines = r.read().decode().split("\n")
    if not ctype.startswith("text/event-stream"):
        fail(f"stream: Content-Type {ctype!r}")
    events = [ln[len("data: "):] for ln in lines if ln.startswith("data: ")]
    if not events or events[-1] != "[DONE]":
        fail(f"stream: does not end with data: [DONE] ({len(events)} events)")
    text, finish = "", None
    for ev in events[:-1]:
        chunk = json.loads(ev)
        if chunk.get("object") != "chat.completion.chunk":
            fail(f"stream: a chunk of object {chunk.get('object')!r}")
        for c in chunk.get("choices", []):
            text += (c.get("delta") or {}).get("content") or ""
            finish = c.get("finish_reason") or finish
    if not text or finish not in ("stop", "length"):
        fail(f"stream: text {text[:80]!r}, finish_reason {finish!r}")
    same = "the same text as the plain call" if text == content else "a different text from the plain call"
    print(f"http_check: chat completion streamed: {len(events) - 1} chunks, finish {finish}, {same}")


def metrics(base):
    with call(base, "/metrics") as r:
        text = r.read().decode()
    want = ("fogline_requests_total", "fogline_redis_connected", "fogline_redis_commands_total",
            "fogline_persist_pages_total", "fogline_forwards_total", "fogline_tokens_total")
    got = [ln for ln in text.split("\n") if ln.startswith(want)]
    if not got:
        fail("/metrics: none of the expected families")
    print("http_check: metrics: " + "; ".join(got))


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("chat", "metrics"):
        print("usage: http_check.py chat|metrics URL", file=sys.stderr)
        sys.exit(2)
    try:
        (chat if sys.argv[1] == "chat" else metrics)(sys.argv[2].rstrip("/"))
    except Exception as e:  # a refused connection, an HTTP error status, bad JSON: one line
        fail(f"{type(e).__name__}: {e}")
