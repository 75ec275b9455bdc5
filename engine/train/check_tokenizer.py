"""Checks that a model directory's tokenizer.json loads in Hugging Face's tokenizers.js (npm,
tests/node) and encodes help-desk dialogues (train and held-out, with and without the generation
prompt, plus a few odd strings) exactly as bpe.Tokenizer does, and that @huggingface/jinja renders
the chat template as datagen.render does.

Usage: python3 check_tokenizer.py [MODEL_DIR] [--n 300]     exit status 0 = all agree
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bpe  # noqa: E402
import datagen  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir", nargs="?", default=os.path.join(HERE, "..", "models",
                                                                 "fogline-helpdesk"))
    ap.add_argument("--n", type=int, default=300)
    a = ap.parse_args()
    tok = bpe.Tokenizer.load(a.model_dir)
    dl = datagen.generate("train", a.n // 2, 7) + datagen.generate("test", a.n - a.n // 2, 7)
    cases = []
    for k, d in enumerate(dl):
        msgs = d[:-1] if k % 2 else d
        gen = bool(k % 2)
        text = datagen.render(msgs, add_generation_prompt=gen)
        cases.append({"messages": msgs, "add_generation_prompt": gen, "text": text,
                      "ids": tok.encode(text)})
    odd = ["Order #48213 -- shipped!!  Twice?\n\n  ok", "don't I'LL we've 12,345.67 $9.99",
           "tabs\tand   spaces   ", "email: a.b_c@x-y.io <|im_end|>x", "café déjà vu",
           "<|MASK|><|MASK|>end<|endoftext|>"]
    for s in odd:
        m = [{"role": "user", "content": s}]
        text = datagen.render(m)
        cases.append({"messages": m, "add_generation_prompt": False, "text": text,
                      "ids": tok.encode(text)})
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cases, f)
        path = f.name
    try:
        r = subprocess.run(["node", os.path.join(HERE, "check_tokenizer.mjs"), a.model_dir, path])
    finally:
        os.unlink(path)
    sys.exit(r.returncode)


if __name__ == "__main__":
    main()
