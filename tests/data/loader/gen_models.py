#!/usr/bin/env python3
"""Fixture for the loader tests: writes random Hugging Face model directories with
tests/reference/make_random_model.py (both layouts, F32/BF16/F16, sharded, tied and untied)
and, beside each, expect.json: what Python reads back from the files with st.py (dtype, shape,
element count, a few element values), so the C loader is checked against an independent reader.

  gen_models.py OUT_DIR"""
import json
import os
import random
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "reference"))
import make_random_model  # noqa: E402
import st  # noqa: E402

# name, layout, dtype, shards, tied, seed
MODELS = [
    ("q3_f32", "qwen3", "f32", 1, False, 1),
    ("q3_bf16_tie", "qwen3", "bf16", 1, True, 2),
    ("q3_f16_sh3", "qwen3", "f16", 3, False, 3),
    ("q2_f32_tie", "qwen2", "f32", 1, True, 4),
    ("q2_bf16_sh3", "qwen2", "bf16", 3, False, 5),
    ("q2_f16_tie_sh3", "qwen2", "f16", 3, True, 6),
]
ST_DTYPE = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}


def read_back(path):
    idx = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    sd = {}
    for fn in files:
        sd.update(st.load(os.path.join(path, fn)))
    return sd, len(files)


def main():
    out = sys.argv[1]
    torch.set_num_threads(2)
    os.makedirs(out, exist_ok=True)
    rng = random.Random(1234)
    for name, layout, dtype, shards, tie, seed in MODELS:
        d = os.path.join(out, name)
        argv = [d, "--layout", layout, "--dtype", dtype, "--seed", str(seed), "--shards", str(shards)]
        if tie:
            argv.append("--tie")
        old = sys.argv
        sys.argv = ["make_random_model.py"] + argv
        try:
            make_random_model.main()
        finally:
            sys.argv = old
        sd, n_files = read_back(d)
        tensors = {}
        for k in sorted(sd):
            t = sd[k]
            flat = t.reshape(-1).float()
            n = flat.numel()
            picks = sorted({0, n - 1, rng.randrange(n)})
            tensors[k] = {
                "dtype": ST_DTYPE[t.dtype],
                "shape": list(t.shape),
                # float32 values, exact as doubles: the C side compares with ==
                "samples": [[i, float(flat[i].item())] for i in picks],
            }
        exp = {
            "layout": layout, "tie": tie, "shards": n_files,
            "n_tensors": len(sd),
            "n_params": sum(t.numel() for t in sd.values()),
            "bytes": sum(t.numel() * t.element_size() for t in sd.values()),
            "tensors": tensors,
        }
        with open(os.path.join(d, "expect.json"), "w") as f:
            json.dump(exp, f, indent=1)


if __name__ == "__main__":
    main()
