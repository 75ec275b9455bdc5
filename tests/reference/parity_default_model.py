#!/usr/bin/env python3
"""The built-in model, C engine vs the training-side reference decoder, token for token.

tests/data/helpdesk_greedy.json holds held-out prompts with the reference's greedy
one-token-per-step replies (engine/train/eval.py --greedy-out, fogline_ref on the exported
BF16 weights). For each case this checks that
  1. `fogline tokenize --chat --ids` renders and encodes the messages to the same prompt ids as
     the Python side (chat template + BPE);
  2. `fogline generate --prompt-ids ... --policy sequential --no-pipeline` produces the same
     reply ids.

  parity_default_model.py FOGLINE_BIN MODEL_DIR GREEDY_JSON"""
import json
import subprocess
import sys


def main():
    fogline, model, path = sys.argv[1:4]
    with open(path) as f:
        g = json.load(f)
    cases = g["cases"]
    # 1. prompts: one tokenize process for all cases
    lines = "".join(json.dumps(c["messages"]) + "\n" for c in cases)
    out = subprocess.run([fogline, "tokenize", "--model", model, "--chat", "--ids",
                          "--add-generation-prompt", "--no-thinking"],
                         input=lines, capture_output=True, text=True)
    fails = 0
    if out.returncode != 0:
        print("FAIL tokenize --chat: exit %d: %s" % (out.returncode, out.stderr.strip()))
        sys.exit(1)
    got_prompts = [json.loads(x) for x in out.stdout.splitlines()]
    for i, (c, p) in enumerate(zip(cases, got_prompts)):
        if p != c["prompt_ids"]:
            fails += 1
            print("FAIL case %d prompt ids differ:\n  ref  %s\n  ours %s" % (i, c["prompt_ids"], p))
    # 2. greedy replies
    for i, c in enumerate(cases):
        args = [fogline, "generate", "--model", model, "--json", "--threads", "2",
                "--prompt-ids", ",".join(map(str, c["prompt_ids"])),
                "--max-tokens", str(g["max_new_tokens"]), "--policy", "sequential", "--no-pipeline"]
        r = subprocess.run(args, capture_output=True, text=True)
        if r.returncode != 0:
            fails += 1
            print("FAIL case %d: exit %d: %s" % (i, r.returncode, r.stderr.strip()))
            continue
        res = json.loads(r.stdout)
        if res["ids"] != c["reply_ids"]:
            fails += 1
            print("FAIL case %d:\n  ref  %s\n  ours %s\n  ref text  %r\n  our text  %r" % (
                i, c["reply_ids"], res["ids"], c["text"], res["text"]))
        elif res["text"] != c["text"]:
            fails += 1
            print("FAIL case %d: same ids, different text: %r vs %r" % (i, c["text"], res["text"]))
    n = len(cases)
    print("%d passed, %d failed (%d cases, prompt ids and reply ids)" % (n - min(fails, n), min(fails, n), n))
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
