#!/usr/bin/python3
"""Where threshold decoding loses to one token per step: for held-out dialogues that top-1
answers exactly and threshold decoding does not, the forward that committed the first wrong
token (how many masks its block still had, how many tokens it committed together, the wrong
token's confidence), and, over every dialogue, how often a threshold commit is right by
confidence band (commits up to a reply's first error, compared with the reference reply).

    python3 engine/train/gap.py [MODEL_DIR] --seed 7 --n 300 [--show 20]
"""
import argparse
import collections
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import datagen  # noqa: E402
import decode  # noqa: E402


def first_error(chat, msgs, ref, pol, max_new):
    """-> (reply text, the first wrong commit in time or None, [(confidence, right?)] for every
    commit up to and including the forward that made it). Before that forward every committed
    token agrees with the reference reply, so the reference still says what is right. The
    reference is compared token for token as bpe.py encodes it: a reply spelled with other
    tokens than the encoder's would count as wrong here, though eval.py compares text."""
    tr = []
    r = chat.reply(msgs, pol, max_new, tr)
    P = len(chat.prompt_ids(msgs))
    want = chat.tok.encode(ref) + [chat.end_ids[0]]
    bs = chat.model.c.block_size
    got = r["tokens"]
    calib = []
    first = None
    left = collections.Counter()  # masks left per block
    for t in tr:
        for p in t["commits"]:
            left[p // bs] += 1
    for f, t in enumerate(tr):
        wrong = []
        for p, c in zip(t["commits"], t["conf"]):
            i = p - P
            if 0 <= i < len(want):
                calib.append((c, got[i] == want[i]))
                if got[i] != want[i]:
                    wrong.append((p, c))
        if wrong:
            p, c = wrong[0]
            first = {"pos": p - P, "forward": f, "conf": c, "together": len(t["commits"]),
                     "masks_before": left[p // bs], "got": chat.tok.decode([got[p - P]]),
                     "want": chat.tok.decode([want[p - P]])}
            break
        for p in t["commits"]:
            left[p // bs] -= 1
    return r["text"], first, calib


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir", nargs="?",
                    default=os.path.join(HERE, "..", "models", "fogline-helpdesk"))
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threshold", type=float, default=0.9)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--show", type=int, default=20)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    chat = decode.Chat(a.model_dir)
    top1 = decode.Policy("top1")
    thr = decode.Policy("threshold", threshold=a.threshold)
    lost = []
    bands = collections.defaultdict(lambda: [0, 0])
    # the first band holds the forced commits (no mask above the threshold: the top one)
    edges = [0.0, a.threshold, 0.95, 0.99, 0.999, 1.01]
    n_top = n_thr = 0
    for d in datagen.generate("test", a.n, a.seed):
        msgs, ref = d[:-1], d[-1]["content"]
        t1 = chat.reply(msgs, top1, a.max_new_tokens)["text"]
        text, first, calib = first_error(chat, msgs, ref, thr, a.max_new_tokens)
        n_top += t1 == ref
        n_thr += text == ref
        for c, ok in calib:
            for lo, hi in zip(edges, edges[1:]):
                if lo < c <= hi:
                    bands[(lo, hi)][0] += ok
                    bands[(lo, hi)][1] += 1
                    break
        if t1 == ref and text != ref:
            lost.append((msgs[-1]["content"], ref, text, first))
    print("top1 %d/%d exact, threshold %d/%d; %d lost by threshold only" % (
        n_top, a.n, n_thr, a.n, len(lost)))
    print("\nthreshold commits up to a reply's first error, by confidence:")
    for (lo, hi), (ok, n) in sorted(bands.items()):
        print("  (%.3f, %.3f]: %5d commits, %.2f%% right" % (lo, min(hi, 1.0), n,
                                                          100.0 * ok / max(1, n)))
    if lost:
        print("\nfirst wrong commit of the lost dialogues:")
        for key in ("masks_before", "together", "forward"):
            c = collections.Counter(f[key] for _, _, _, f in lost if f)
            print("  %-12s %s" % (key, dict(sorted(c.items()))))
        confs = sorted(f["conf"] for _, _, _, f in lost if f)
        print("  conf         %s" % [round(c, 3) for c in confs])
    for u, ref, got, f in lost[:a.show]:
        print("\n   user: %s\n    ref: %s\n    got: %s\n  first: %s" % (u, ref, got, f))


if __name__ == "__main__":
    main()
