#!/usr/bin/env python3
"""The PyTorch reference side of `fogline bench forward`: the time of one forward of a block
of B new tokens against `ctx` cached positions, with fogline_ref.py on the same weights.

  bench_forward.py --model DIR [--threads N] [--ctx 512] [--blocks 4,8,32] [--steps 5]

Prefills ctx random tokens once (their per-layer K/V become `past`), then per block size runs
one warm-up forward and `steps` timed ones of B tokens at positions ctx..ctx+B-1 (full logits,
as the reference always computes them). Prints one JSON line:
  {"threads": N, "ctx": C, "torch": "...", "load_s": ..., "prefill_ms": ...,
   "blocks": {"4": {"median_ms": ..., "all_ms": [...]}, ...}}"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fogline_ref as ref  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--blocks", default="4,8,32")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    t0 = time.perf_counter()
    m = ref.load_model(a.model)
    load_s = time.perf_counter() - t0
    g = torch.Generator().manual_seed(a.seed)
    V = m.c.vocab
    out = {"threads": a.threads, "ctx": a.ctx, "torch": torch.__version__, "load_s": load_s,
           "blocks": {}}
    with torch.no_grad():
        past = None
        if a.ctx > 0:
            ids = torch.randint(0, V, (1, a.ctx), generator=g)
            t0 = time.perf_counter()
            _, past = m(ids, pos0=0)
            out["prefill_ms"] = (time.perf_counter() - t0) * 1e3
        for b in [int(x) for x in a.blocks.split(",") if x]:
            x = torch.randint(0, V, (1, b), generator=g)
            m(x, pos0=a.ctx, past=past)  # warm-up: first-touch of buffers, thread start
            times = []
            for _ in range(a.steps):
                t0 = time.perf_counter()
                m(x, pos0=a.ctx, past=past)
                times.append((time.perf_counter() - t0) * 1e3)
            out["blocks"][str(b)] = {"median_ms": statistics.median(times), "all_ms": times}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
