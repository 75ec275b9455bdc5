#!/usr/bin/env python3
"""Writes held-out help-desk prompts with their reference replies for `fogline bench decode`
and the server tests: a JSON array of {"messages": [...context...], "reply": "..."} where the
reply is the canonical assistant answer to the last user turn (engine/train/datagen.py, test
split: slot values and phrasings never seen in training).

  make_heldout.py OUT.json [--n 64] [--seed 1]"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "engine", "train"))
import datagen  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    items = []
    for d in datagen.generate("test", a.n, a.seed):
        assert d[-1]["role"] == "assistant"
        items.append({"messages": d[:-1], "reply": d[-1]["content"]})
    with open(a.out, "w") as f:
        json.dump(items, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
