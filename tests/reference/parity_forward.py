#!/usr/bin/env python3
"""Fixtures for the C forward parity test (tests/unit/test_forward.c): random models of both
layouts and, for a fixed set of token sequences, what the PyTorch reference computes.

  parity_forward.py OUT [--full]

For each model OUT/<name>/ holds the Hugging Face directory (config.json,
model.safetensors) and ref.json:
  {"name", "layout", "dtype", "block", "vocab", "n_layers", "n_kv_heads", "head_dim",
   "seqs": [{"tokens": [...], "split": null or S, "logits": FILE, "kv": FILE, "top": FILE}]}
FILEs are raw little-endian float32:
  logits (T, vocab)                                one block-causal forward; or, with a
                                                   split S, forwards of [0, S) and of [S, T)
                                                   with the first's K/V as past
  kv     (n_layers, 2, kv_heads, T, head_dim)      each layer's K (after norm and RoPE) and V
  top    (T, 3)                                    argmax id, its softmax prob, entropy (nats),
                                                   from the logits in float64
and "quant": {"q8": FILE, "q4": FILE}: sequence 0's logits (T, vocab), one full forward, with
q8 and q4 weights as tests/reference/quant_ref.py computes them from their specification.

The C test runs each sequence through the paged engine in pieces (prefill, then decode
blocks against the cache; several sequences packed in one batch) and compares with these:
under block-causal attention, a position's logits from one full forward equal those of any
schedule that gives it the same keys. The sequence lengths are in blocks, defined here and
matched by the C schedules (SEQ_BLOCKS).

--full adds the larger "small" shape and more seeds (the `parity` ctest label)."""
import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fogline_ref as ref  # noqa: E402
import make_random_model as mrm  # noqa: E402
import quant_ref  # noqa: E402

# Sequences: (length in blocks of B, split in tokens as (blocks, extra) or None). The C
# test's schedules index these (see test_forward.c). A split sequence is computed by the
# reference in two forwards, the second with the first's K/V as `past`: a schedule that
# caches a partial block gives its last positions fewer same-block keys than one full
# forward would, so only this reference matches it.
SEQ_BLOCKS = [
    (4, None),    # 0: prefill 3 blocks, then decode 1 block against the cache
    (3, None),    # 1: packed batch: cached 2B, decode B
    (3, (1, 1)),  # 2: packed batch: cached B+1 (a partial page), segment of 2B-1
    (1, None),    # 3: packed batch: nothing cached, one block
    (6, None),    # 4: packed batch: cached 4B, decode 2 blocks at once
    (4, None),    # 5: decode-store overlap: cached 2B, segment = block 2 (stored) + block 3
]

MODELS_FAST = [
    # name, layout, shape, dtype, seed, tie
    ("q3_f32", "qwen3", "tiny", "f32", 11, False),
    ("q3_bf16_tied", "qwen3", "tiny", "bf16", 12, True),
    ("q2_f32", "qwen2", "tiny", "f32", 13, False),
    ("q2_f16_tied", "qwen2", "tiny", "f16", 14, True),
]
MODELS_FULL = [
    ("q3s_f32", "qwen3", "small", "f32", 21, False),
    ("q3s_bf16", "qwen3", "small", "bf16", 22, False),
    ("q2s_f32_tied", "qwen2", "small", "f32", 23, True),
    ("q3_f32_s2", "qwen3", "tiny", "f32", 24, True),
    ("q2_bf16_s2", "qwen2", "tiny", "bf16", 25, False),
]


def make_model(path, layout, shape, dtype, seed, tie):
    """The one random-model generator of the repo, called in-process (no second torch start)."""
    argv = [path, "--layout", layout, "--shape", shape, "--dtype", dtype, "--seed", str(seed)]
    if tie:
        argv.append("--tie")
    saved = sys.argv
    sys.argv = ["make_random_model.py"] + argv
    try:
        mrm.main()
    finally:
        sys.argv = saved


def write_f32(path, t):
    t.detach().to(torch.float32).contiguous().numpy().tofile(path)


def top_stats(logits):
    """(T, 3): argmax, softmax prob of it, entropy, all from float64."""
    l64 = logits.double()
    lp = torch.log_softmax(l64, dim=-1)
    p = lp.exp()
    arg = l64.argmax(dim=-1)
    prob = p.gather(-1, arg[:, None])[:, 0]
    ent = -(p * lp).sum(-1)
    return torch.stack([arg.double(), prob, ent], dim=-1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--full", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(a.out, exist_ok=True)
    models = MODELS_FAST + (MODELS_FULL if a.full else [])
    names = []
    for name, layout, shape, dtype, seed, tie in models:
        d = os.path.join(a.out, name)
        make_model(d, layout, shape, dtype, seed, tie)
        m = ref.load_model(d)
        c = m.c
        B = c.block_size
        mask_id = c.raw.get("mask_token_id", c.vocab - 1)
        g = torch.Generator().manual_seed(seed * 1000 + 7)
        seqs = []
        with torch.no_grad():
            for si, (blocks, split) in enumerate(SEQ_BLOCKS):
                T = blocks * B
                ids = torch.randint(0, c.vocab, (T,), generator=g)
                # the last block looks like a block being denoised: some positions masked
                last = ids[T - B:]
                last[torch.rand(B, generator=g) < 0.5] = mask_id
                if split is None:
                    logits, kvs = m(ids[None], pos0=0)
                else:
                    at = split[0] * B + split[1]
                    l1, kv1 = m(ids[None, :at], pos0=0)
                    l2, kv2 = m(ids[None, at:], pos0=at, past=kv1)
                    logits = torch.cat([l1, l2], dim=1)
                    kvs = [(torch.cat([a[0], b[0]], dim=2), torch.cat([a[1], b[1]], dim=2))
                           for a, b in zip(kv1, kv2)]
                kv = torch.stack([torch.stack([k[0], v[0]]) for k, v in kvs])  # (L,2,kvh,T,hd)
                base = "seq%d" % si
                write_f32(os.path.join(d, base + "_logits.bin"), logits[0])
                write_f32(os.path.join(d, base + "_kv.bin"), kv)
                write_f32(os.path.join(d, base + "_top.bin"), top_stats(logits[0]))
                seqs.append({"tokens": ids.tolist(), "split": split and at,
                             "logits": base + "_logits.bin",
                             "kv": base + "_kv.bin", "top": base + "_top.bin"})
        quant = {}
        with torch.no_grad():
            for bits in (8, 4):
                qm = quant_ref.quantize_model(ref.load_model(d), bits)
                ql, _ = qm(torch.tensor(seqs[0]["tokens"])[None], pos0=0)
                quant["q%d" % bits] = "seq0_logits_q%d.bin" % bits
                write_f32(os.path.join(d, quant["q%d" % bits]), ql[0])
        info = {"name": name, "layout": layout, "dtype": dtype, "tie": tie, "block": B,
                "vocab": c.vocab, "n_layers": c.n_layers, "n_kv_heads": c.n_kv_heads,
                "head_dim": c.head_dim, "seqs": seqs, "quant": quant}
        with open(os.path.join(d, "ref.json"), "w") as f:
            json.dump(info, f)
        names.append(name)
    with open(os.path.join(a.out, "models.json"), "w") as f:
        json.dump(names, f)


if __name__ == "__main__":
    main()
