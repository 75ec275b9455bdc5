#!/usr/bin/env python3
"""Fixtures for the C forward parity test of the mixture-of-experts families
(tests/unit/test_forward_moe.c): random LLaDA2 and SDAR-MoE models (make_moe_model.py) and what
the PyTorch reference (moe_ref.py, written from the authors' modeling code) computes for a few
token sequences.

  parity_forward_moe.py OUT

OUT/<name>/ holds the Hugging Face directory and ref.json:
  {"name", "family", "dtype", "block", "vocab", "n_layers", "n_kv_heads", "head_dim", "top_k",
   "seqs": [{"tokens", "logits", "top", "routes", "route_w", "margin"}], "quant": {"q8", "q4"}}
FILEs are raw little-endian:
  logits  f32 (T, vocab)          one block-causal forward over the whole sequence
  top     f32 (T, 3)              argmax id, its softmax prob, entropy (float64)
  routes  i32 (n_layers, T, top_k) each token's experts, ascending; -1 rows in dense layers
  route_w f32 (n_layers, T, top_k) their weights (routed scaling included), in that order
  margin  f32 (n_layers, T)       the smallest gap between a chosen and an unchosen score in
                                  the token's routing decisions (+inf for dense layers)
  quant   f32 (T0, vocab)         sequence 0 with q8 / q4 weights as quant_ref.py specifies
                                  them (every matrix but the router; the embedding and the head
                                  q8 in both modes)
Sequences are 1 to 3 blocks of random tokens whose last block is half masked (a block being
denoised); the vocabulary is shrunk to 1024 to keep the files small (the loader and decoding
tests use the real one)."""
import argparse
import json
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_moe_model as mmm  # noqa: E402
import moe_ref  # noqa: E402
import quant_ref  # noqa: E402

MODELS = [
    # name, family, dtype, bias dtype, seed, sequence lengths in blocks
    ("llada2_f32", "llada2", "f32", "f32", 31, (2, 1)),
    ("llada2_bf16", "llada2", "bf16", "bf16", 32, (2, 1)),
    ("sdarmoe_f32", "sdar-moe", "f32", None, 33, (3, 1, 5)),
    ("sdarmoe_bf16", "sdar-moe", "bf16", None, 34, (3, 2)),
]
VOCAB = 1024


def write(path, t, dtype=torch.float32):
    t.detach().to(dtype).contiguous().numpy().tofile(path)


def top_stats(logits):
    l64 = logits.double()
    lp = torch.log_softmax(l64, dim=-1)
    p = lp.exp()
    arg = l64.argmax(dim=-1)
    return torch.stack([arg.double(), p.gather(-1, arg[:, None])[:, 0], -(p * lp).sum(-1)], -1)


def quantize(m, bits):
    """m (moe_ref.Model) with every matrix but the routers as q8/q4 (quant_ref's formats),
    the embedding and the head q8: in place."""
    for layer in m.model.layers:
        att = layer.attention if m.c.llada2 else layer.self_attn
        names = ("query_key_value", "dense") if m.c.llada2 else ("q_proj", "k_proj", "v_proj",
                                                                  "o_proj")
        for n in names:
            setattr(att, n, quant_ref.QLinear(getattr(att, n), bits))
        mlps = [layer.mlp]
        if isinstance(layer.mlp, moe_ref.MoE):
            mlps = list(layer.mlp.experts) + ([layer.mlp.shared_experts]
                                              if hasattr(layer.mlp, "shared_experts") else [])
        for p in mlps:
            for n in ("gate_proj", "up_proj", "down_proj"):
                setattr(p, n, quant_ref.QLinear(getattr(p, n), bits))
    head_w = quant_ref.quantize_weight(m.lm_head.weight.detach(), 8).double()
    with torch.no_grad():
        e = m.embed().weight
        e.copy_(quant_ref.quantize_weight(e, 8))
    m.head = lambda h: (quant_ref.quantize_rows(h).double() @ head_w.t()).float()
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    a = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(a.out, exist_ok=True)
    for name, family, dtype, bias, seed, blocks in MODELS:
        d = os.path.join(a.out, name)
        argv = [d, "--family", family, "--dtype", dtype, "--seed", str(seed), "--vocab",
                str(VOCAB)] + (["--bias-dtype", bias] if bias else [])
        saved = sys.argv
        sys.argv = ["make_moe_model.py"] + argv
        try:
            mmm.main()
        finally:
            sys.argv = saved
        m = moe_ref.load_model(d)
        c = m.c
        B, K = c.block_size, c.top_k
        g = torch.Generator().manual_seed(seed * 1000 + 7)
        seqs, ties = [], 0
        with torch.no_grad():
            for si, nb in enumerate(blocks):
                T = nb * B
                ids = torch.randint(0, c.vocab - 1, (T,), generator=g)
                last = ids[T - B:]
                last[torch.rand(B, generator=g) < 0.5] = c.vocab - 1  # the "mask"
                logits, _ = m(ids[None], pos0=0)
                routes = torch.full((c.n_layers, T, K), -1, dtype=torch.int32)
                rw = torch.zeros(c.n_layers, T, K)
                margin = torch.full((c.n_layers, T), math.inf)
                for l, r in enumerate(m.routes):
                    if r is None:
                        continue
                    routes[l], rw[l], margin[l] = r[0].to(torch.int32), r[1], r[2]
                ties += int((margin < 1e-4).sum())
                base = "seq%d" % si
                write(os.path.join(d, base + "_logits.bin"), logits[0])
                write(os.path.join(d, base + "_top.bin"), top_stats(logits[0]))
                write(os.path.join(d, base + "_routes.bin"), routes, torch.int32)
                write(os.path.join(d, base + "_route_w.bin"), rw)
                write(os.path.join(d, base + "_margin.bin"), margin)
                seqs.append({"tokens": ids.tolist(), "logits": base + "_logits.bin",
                             "top": base + "_top.bin", "routes": base + "_routes.bin",
                             "route_w": base + "_route_w.bin", "margin": base + "_margin.bin"})
            quant = {}
            for bits in (8, 4):
                qm = quantize(moe_ref.load_model(d), bits)
                ql, _ = qm(torch.tensor(seqs[0]["tokens"])[None], pos0=0)
                quant["q%d" % bits] = "seq0_logits_q%d.bin" % bits
                write(os.path.join(d, quant["q%d" % bits]), ql[0])
        info = {"name": name, "family": family, "dtype": dtype, "block": B, "vocab": c.vocab,
                "n_layers": c.n_layers, "n_kv_heads": c.n_kv_heads, "head_dim": c.head_dim,
                "top_k": K, "seqs": seqs, "quant": quant}
        with open(os.path.join(d, "ref.json"), "w") as f:
            json.dump(info, f)
        print("%s: %d sequences, %d tokens, %d layers, %d (layer, token) routing margins < 1e-4"
              % (name, len(seqs), sum(len(s["tokens"]) for s in seqs), c.n_layers, ties))


if __name__ == "__main__":
    main()
