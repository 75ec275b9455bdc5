#!/usr/bin/env python3
"""`fogline generate` step by step, on the built-in model:

- `--json --trace` lists every denoising step's draft: per block numbered 1..S without a gap,
  each step's "new" positions masked before it and decided after, nothing else changed, the
  counts adding up to the block, the last draft of each block the reply's tokens, one step per
  decoding forward without pipelining, and the same reply as without the trace;
- `--visual` in a real terminal (tmux): the raw output, recorded with pipe-pane, holds one frame
  per step (the same steps as the trace), masks shown as fog that thins out, and the screen ends
  on the settled reply;
- the flags' misuses are one-line errors with exit 2.

  test_generate_steps.py FOGLINE_BIN MODEL_DIR"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

FAILS = []
CHECKS = [0]
FOG = "\u2591"
PROMPT = "Where is my order 48213? How long does express shipping take?"
OPTS = ["--max-tokens", "64", "--no-pipeline", "--threads", "1"]


def check(cond, msg):
    CHECKS[0] += 1
    print(("ok   " if cond else "FAIL ") + msg)
    if not cond:
        FAILS.append(msg)


def gen(fogline, model, *extra):
    r = subprocess.run([fogline, "generate", "--model", model, "--json", "--prompt", PROMPT, *OPTS,
                        *extra], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("generate failed: %s" % r.stderr)
    return json.loads(r.stdout)


def check_trace(out):
    steps = out["steps"]
    blocks = {}
    for s in steps:
        blocks.setdefault(s["block"], []).append(s)
    check(sorted(blocks) == list(range(len(blocks))), "blocks 0..%d drafted" % (len(blocks) - 1))
    ok_num = ok_new = ok_sum = True
    final = []
    for b, ds in sorted(blocks.items()):
        ok_num &= [d["step"] for d in ds] == list(range(1, len(ds) + 1))
        prev = [-1] * len(ds[0]["tokens"])
        total = 0
        for d in ds:
            new = set(d["new"])
            for i, t in enumerate(d["tokens"]):
                ok_new &= (prev[i] < 0 <= t) if i in new else (t == prev[i])
            ok_new &= d["edited"] == []
            total += len(new)
            prev = d["tokens"]
        decided = [t for t in prev if t >= 0]
        ok_sum &= total == len(decided)
        if b != max(blocks):
            ok_sum &= len(decided) == len(prev)  # only the last block ends with masks left
        else:  # after its end token (the first, with no mask before it) when the reply stops
            first_mask = prev.index(-1) if -1 in prev else len(prev)
            ok_sum &= first_mask == len(prev) or out["finish"] == "stop"
            prev = prev[:first_mask]
        final += prev
    check(ok_num, "every block's steps are numbered 1..S without a gap")
    check(ok_new, "each step's new positions were masked before it; nothing else changed")
    check(ok_sum, "the new positions add up to each block's decided ones; masks are left only "
          "after the reply's end token")
    # the reply's ids are the blocks' last drafts, up to the end token
    check(final[:len(out["ids"])] == out["ids"] and len(final) >= len(out["ids"]),
          "the blocks' last drafts hold the reply's tokens")
    check(len(steps) == out["stats"]["decode_forwards"],
          "one step per decoding forward without pipelining (%d steps, %d forwards)"
          % (len(steps), out["stats"]["decode_forwards"]))
    check(any(len(ds) > 1 for ds in blocks.values()), "some block took several steps")
    return steps


def strip_ansi(s):
    return re.sub(r"\x1b\[[0-9;]*[A-Za-z]|\x1b[78]", "", s)


def check_visual(fogline, model, steps, text, extra):
    tmux = shutil.which("tmux")
    if not tmux:
        raise SystemExit("tmux is not installed (tests/setup.sh installs it)")
    d = tempfile.mkdtemp(prefix="fogline-visual-")
    sock = "fogline-visual-%d" % os.getpid()
    log = os.path.join(d, "pane.log")
    t = [tmux, "-L", sock, "-f", "/dev/null"]
    cmd = " ".join(["'%s'" % fogline, "generate", "--model", "'%s'" % model, "--prompt",
                    "'%s'" % PROMPT, *OPTS, *extra, "--visual", "--pace", "5"])
    # the pane waits for "go" so that pipe-pane records from the first byte; it says "done" when
    # fogline has exited and then keeps the screen until the server is killed
    script = ("%s wait-for go; %s; echo \"exit=$?\"; %s wait-for -S done; %s wait-for never"
              % (" ".join(t), cmd, " ".join(t), " ".join(t)))
    env = dict(os.environ, TERM="xterm-256color")
    try:
        subprocess.run(t + ["new-session", "-d", "-s", "v", "-x", "160", "-y", "50", "sh", "-c", script],
                       check=True, env=env)
        subprocess.run(t + ["pipe-pane", "-t", "v", "-o", "cat >> '%s'" % log], check=True, env=env)
        subprocess.run(t + ["wait-for", "-S", "go"], check=True, env=env)
        subprocess.run(t + ["wait-for", "done"], check=True, env=env, timeout=300)
        screen = subprocess.run(t + ["capture-pane", "-t", "v", "-p", "-J"], check=True,
                                capture_output=True, text=True, env=env).stdout
    finally:
        subprocess.run(t + ["kill-server"], env=env, capture_output=True)
    raw = open(log, encoding="utf-8", errors="replace").read()
    shutil.rmtree(d, ignore_errors=True)
    check("exit=0" in screen, "generate --visual exited 0 in the terminal")
    frames = [strip_ansi(f) for f in raw.split("\x1b[2J\x1b[H")[1:]]
    stepped = [f for f in frames if re.search(r"\[block \d+ · step \d+ · ", f)]
    check(len(stepped) == len(steps), "one frame per step (%d frames, %d steps in the trace)"
          % (len(stepped), len(steps)))
    got = [tuple(map(int, re.search(r"\[block (\d+) · step (\d+) · ", f).groups())) for f in stepped]
    check(got == [(s["block"], s["step"]) for s in steps], "the frames are the trace's steps, in order")
    fog = [f.count(FOG) for f in stepped]
    check(sum(1 for n in fog if n) >= 3, "fog shown in several frames (%s)" % fog[:12])
    # within a block the fog only thins: each step's count is its masks, the trace's -1s
    want = [sum(1 for t in s["tokens"] if t < 0) for s in steps]
    check(fog == want, "each frame's fog is its step's masked positions")
    last = frames[-1]
    check(FOG not in last and "tokens" in last, "the last frame is the settled reply, no fog")
    flat = lambda s: re.sub(r"\s+", "", s)
    check(flat(text) in flat(screen), "the screen ends on the reply's text")


def check_errors(fogline, model):
    cases = [
        (["--trace"], "--trace adds the step trace to --json"),
        (["--visual", "--json"], "--visual draws on the terminal and --json prints JSON"),
        (["--pace", "10"], "--pace is for --visual"),
        (["--visual", "--pace", "fast"], "--pace needs milliseconds in [0, 10000], got 'fast'"),
        (["--visual", "--pace", "20000"], "--pace needs milliseconds in [0, 10000], got '20000'"),
        (["--visual"], "--visual draws on a terminal and stdout is not one"),
    ]
    for extra, msg in cases:
        r = subprocess.run([fogline, "generate", "--model", model, "--prompt", "hi", *extra],
                           capture_output=True, text=True)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 2 and len(lines) == 1 and msg in lines[0] and not r.stdout,
              "%s: exit 2, one line (%d: %r)" % (" ".join(extra), r.returncode, r.stderr.strip()))


def main():
    fogline, model = sys.argv[1:3]
    plain = gen(fogline, model)
    traced = gen(fogline, model, "--trace")
    check("steps" not in plain, "no trace without --trace")
    check(traced["ids"] == plain["ids"], "the trace changes nothing of the reply")
    check_trace(traced)
    # one token per step, so that the fog thins over many frames
    seq = ["--policy", "sequential"]
    seq_traced = gen(fogline, model, "--trace", *seq)
    steps = check_trace(seq_traced)
    check_visual(fogline, model, steps, seq_traced["text"], seq)
    check_errors(fogline, model)
    print("%d checks, %d failed" % (CHECKS[0], len(FAILS)))
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
