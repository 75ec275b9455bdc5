#!/usr/bin/env python3
"""What logprobs cost: `fogline generate --json` with and without `--logprobs K`, the same
prompt and options, taking turns, ROUNDS rounds; prints each side's median decode time (the
stats' ms_decode: from the first denoising forward to the end) and the ratio. The replies must
be the same (logprobs change nothing but the answer's extra field).

  logprobs_ab.py FOGLINE_BIN MODEL_DIR [--top K] [--rounds N] [-- generate options...]"""
import json
import statistics
import subprocess
import sys


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    fogline, model = argv[0], argv[1]
    top, rounds = 5, 5
    rest = argv[2:]
    while rest:
        k, v = rest[0], rest[1]
        rest = rest[2:]
        if k == "--top":
            top = int(v)
        elif k == "--rounds":
            rounds = int(v)
        else:
            raise SystemExit("logprobs_ab.py: unknown option %s" % k)
    base = [fogline, "generate", "--model", model, "--json", *extra]
    times = {"plain": [], "logprobs": []}
    replies = set()
    for _ in range(rounds):
        for name, more in (("plain", []), ("logprobs", ["--logprobs", str(top)])):
            out = subprocess.run(base + more, capture_output=True, text=True)
            if out.returncode != 0:
                raise SystemExit("generate failed: %s" % out.stderr)
            d = json.loads(out.stdout)
            times[name].append(d["stats"]["ms_decode"])
            replies.add(tuple(d["ids"]))
            if name == "logprobs" and len(d["logprobs"]) != len(d["ids"]):
                raise SystemExit("logprobs: %d entries for %d ids" % (len(d["logprobs"]),
                                                                       len(d["ids"])))
    if len(replies) != 1:
        raise SystemExit("the replies differ between runs")
    a, b = statistics.median(times["plain"]), statistics.median(times["logprobs"])
    print("reply %d tokens; median ms_decode over %d rounds: plain %.1f, --logprobs %d %.1f; "
          "logprobs / plain %.3f" % (len(next(iter(replies))), rounds, a, top, b, b / a))


if __name__ == "__main__":
    main()
