#!/usr/bin/env python3
"""`fogline bench parallel` and `fogline bench decode` on the built-in model: a short
parallel run with --repeat (fan-out texts identical to the sequential ones in every run, the
skeleton table with its forwards column), bench decode's table per weights format, and bad
flags as one-line errors with exit 2; bench decode's temporary tier directory is gone after the
run, and a --tier-dir keeps its pages; --device cuda where no GPU is usable is a one-line error with exit 1.

  test_bench_cli.py FOGLINE_BIN MODEL_DIR"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

FAILS = []


def check(cond, msg):
    print(("ok   " if cond else "FAIL ") + msg)
    if not cond:
        FAILS.append(msg)


def bench(fogline, *args, tmpdir=None):
    env = dict(os.environ)
    if tmpdir is not None:
        env["TMPDIR"] = tmpdir
    return subprocess.run([fogline, "bench", *args], capture_output=True, text=True, timeout=300,
                          env=env)


def main():
    fogline, model = sys.argv[1:3]
    r = bench(fogline, "parallel", "--model", model, "--n", "8", "--group", "4", "--multi-n", "2",
              "--repeat", "2", "--threads", "2")
    check(r.returncode == 0, "bench parallel --repeat 2 exits 0 (%d: %s)" % (r.returncode,
                                                                          r.stderr.strip()))
    out = r.stdout
    check("median of 2 runs" in out, "the header names the repeat count")
    rows = re.findall(r"^\| [AB]: [^|]*\| 4 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+x \| (\d+)/(\d+) \|",
                      out, re.M)
    check(len(rows) == 2 and all(a == b == "8" for a, b in rows),
          "fan-out identical to sequential in both sets, every run: %s" % rows)
    sk = re.findall(r"^\| (plain|skeleton) \| [0-9.]+ \| [0-9.]+x \| (\d+) \|", out, re.M)
    check([k for k, _ in sk] == ["plain", "skeleton"] and all(int(f) > 0 for _, f in sk),
          "skeleton table with forwards per mode: %s" % sk)
    check("backend: cpu" in out, "the backend line says cpu")
    al = re.findall(r"^\| all \| 2 \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \|", out, re.M)
    check(len(al) == 1 and 0 < float(al[0][2]) < float(al[0][1])
          and sk and abs(float(al[0][1]) * 2 - int(sk[1][1])) < 0.11,
          "forwards per message: the outline's are part of the skeleton's, which match its "
          "table: %s" % al)

    for args, want in [
        (["parallel", "--device", "gpu"], "--device must be auto, cpu or cuda, got 'gpu'"),
        (["parallel", "--device", ""], "--device must be auto, cpu or cuda, got ''"),
        (["parallel", "--repeat", "0"], "--repeat (1..15): bad value '0'"),
        (["parallel", "--repeat", "16"], "--repeat (1..15): bad value '16'"),
        (["parallel", "--repeat", "x"], "--repeat (1..15): bad value 'x'"),
        (["decode", "--device", "tpu"], "--device must be auto, cpu or cuda, got 'tpu'"),
        (["forward", "--weights", "q5"], "--weights must be auto, f32, bf16, q8 or q4, got 'q5' (in the list 'q5')"),
        (["forward", "--weights", "f32,,bf16"], "--weights must be auto, f32, bf16, q8 or q4, got '' (in the list 'f32,,bf16')"),
        (["forward", "--weights", "f32,"], "--weights must be auto, f32, bf16, q8 or q4, got '' (in the list 'f32,')"),
        (["forward", "--weights", ""], "--weights must be auto, f32, bf16, q8 or q4, got '' (in the list '')"),
        (["decode", "--weights", "int8"], "--weights must be auto, f32, bf16, q8 or q4, got 'int8' (in the list 'int8')"),
        (["decode", "--weights", "q8,q4,q8"], "--weights lists 'q8' twice"),
        (["forward", "--weights", "bf16,f32,bf16"], "--weights lists 'bf16' twice"),
        (["forward", "--kv-format", "f16"], "--kv-format must be auto, f32 or bf16, got 'f16' (in the list 'f16')"),
        (["forward", "--kv-format", "bf16,"], "--kv-format must be auto, f32 or bf16, got '' (in the list 'bf16,')"),
        (["forward", "--kv-format", "f32,bf16,f32"], "--kv-format lists 'f32' twice"),
        (["decode", "--cuts"], "--cuts weighs a constraint: give --schema FILE or --json-object"),
    ]:
        r = bench(fogline, *args, "--model", model)
        err = r.stderr.strip()
        check(r.returncode == 2 and want in err and err.count("\n") == 0,
              "%s: exit 2 with %r (%d: %r)" % (" ".join(args), want, r.returncode, err))

    # the weights table: one pair of rows (1 and 16 sequences) per format, in the order given
    # its KV pages go to a fresh directory under $TMPDIR, removed at the end
    tmp = tempfile.mkdtemp(prefix="fl-bench-cli-")
    r = bench(fogline, "decode", "--model", model, "--n", "2", "--max-tokens", "16", "--weights",
              "q4,f32,q8", tmpdir=tmp)
    left = os.listdir(tmp)
    check(r.returncode == 0 and not left, "bench decode leaves nothing under $TMPDIR: %s" % left)
    rows = re.findall(r"^\| (\w+) \((\w+)\) +\| +(\d+) \| +[0-9.]+ \|.*\| +([0-9.]+)% \|$", r.stdout,
                      re.M)
    check(r.returncode == 0 and [(a, b, c) for a, b, c, _ in rows] ==
          [("q4", "q4", "1"), ("q4", "q4", "16"), ("f32", "f32", "1"), ("f32", "f32", "16"),
           ("q8", "q8", "1"), ("q8", "q8", "16")],
          "bench decode --weights q4,f32,q8: rows per format and concurrency (%d: %s %s)"
          % (r.returncode, rows, r.stderr.strip()))

    # a --tier-dir is the user's: the pages written there stay, and so does the directory
    given = os.path.join(tmp, "tier")
    os.mkdir(given)
    r = bench(fogline, "decode", "--model", model, "--n", "1", "--max-tokens", "16", "--weights",
              "q8", "--tier-dir", given, tmpdir=tmp)
    pages = [f for f in os.listdir(given) if f.endswith(".kv")] if os.path.isdir(given) else []
    check(r.returncode == 0 and len(pages) > 0 and os.listdir(tmp) == ["tier"],
          "--tier-dir keeps the directory and its pages (%d, %d pages, %s)"
          % (r.returncode, len(pages), os.listdir(tmp)))
    r = bench(fogline, "decode", "--model", model, "--n", "1", "--weights", "q8",
              tmpdir=os.path.join(tmp, "missing"))
    err = r.stderr.strip()
    check(r.returncode == 1 and "cannot make a temporary tier directory under" in err
          and err.count("\n") == 0, "a $TMPDIR that is missing: one line, exit 1 (%r)" % err)
    shutil.rmtree(tmp)

    # --cuts: the constrained row again with the dynamic program uncut; the cuts never lose
    # the best assignment, so the replies are the same (the bench compares their texts)
    schema = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "schemas",
                          "reply_max200.json")
    r = bench(fogline, "decode", "--model", model, "--n", "4", "--max-tokens", "32", "--no-fsync",
              "--schema", schema, "--cuts")
    buys = re.findall(r"^\| +(\d+) \| cuts buy +\| +[0-9.]+x tokens/s; replies (.*) \|$",
                      r.stdout, re.M)
    uncut = re.findall(r"^\| +(\d+) \| no cuts +\|", r.stdout, re.M)
    check(r.returncode == 0 and uncut == ["1", "16"] and buys == [("1", "the same"), ("16", "the same")],
          "bench decode --schema --cuts: an uncut row per concurrency, the same replies (%d: %s %s %s)"
          % (r.returncode, uncut, buys, r.stderr.strip()))

    r = bench(fogline, "decode", "--model", model, "--n", "1", "--device", "cuda")
    if r.returncode == 1:
        err = r.stderr.strip()
        check(err.startswith("fogline bench decode: cuda") and err.count("\n") == 0,
              "--device cuda without a usable GPU: one line, exit 1 (%r)" % err)
    else:
        check(r.returncode == 0 and "backend: cuda" in r.stdout,
              "--device cuda on a GPU runs there (%d)" % r.returncode)
    print("%d failed" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
