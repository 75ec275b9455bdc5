#!/usr/bin/env python3
"""PyTorch eager on the GPU, on the same weights and step as tests/gpu/gpu_bench.c: one
forward of a block of B new tokens per sequence over ctx cached positions (bf16 weights and
activations, a KV cache per layer, scaled_dot_product_attention), ending, as ours does, with
the top-1 token, its probability and the entropy of every row copied to the host.

  torch_bench.py --model DIR [--ctx 512] [--batches 1,64] [--steps 30] [--json PATH]

Prints one JSON line: {"torch": version, "device": name, "runs": [{"batch", "median_ms",
"min_ms"}, ...]}. Weights are read with the safetensors package when present, else with a
plain reader of the format (8-byte header length, JSON header, raw data)."""
import argparse
import json
import os
import statistics
import struct
import sys
import time

import torch
import torch.nn.functional as F

_DT = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}


def load_weights(path):
    try:
        from safetensors.torch import load_file
        return load_file(path, device="cpu")
    except ImportError:
        pass
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[base + a:base + b]), dtype=_DT[info["dtype"]])
        out[name] = t.reshape(info["shape"])
    return out


class Model:
    def __init__(self, d, dev):
        with open(os.path.join(d, "config.json")) as f:
            c = json.load(f)
        self.H = c["hidden_size"]
        self.L = c["num_hidden_layers"]
        self.nh = c["num_attention_heads"]
        self.kvh = c.get("num_key_value_heads", self.nh)
        self.hd = c.get("head_dim") or self.H // self.nh
        self.V = c["vocab_size"]
        self.eps = float(c.get("rms_norm_eps", 1e-6))
        self.theta = float(c.get("rope_theta", 10000.0))
        self.B = int(c.get("block_size", c.get("bd_size", 4)))
        sd = load_weights(os.path.join(d, "model.safetensors"))
        w = {k: v.to(dev, torch.bfloat16) for k, v in sd.items()}
        self.embed = w["model.embed_tokens.weight"]
        self.lm_head = w.get("lm_head.weight", self.embed)
        self.norm = w["model.norm.weight"]
        self.layers = []
        for i in range(self.L):
            p = "model.layers.%d." % i
            g = lambda n: w.get(p + n)  # noqa: E731
            self.layers.append({
                "in": g("input_layernorm.weight"), "post": g("post_attention_layernorm.weight"),
                "q": g("self_attn.q_proj.weight"), "k": g("self_attn.k_proj.weight"),
                "v": g("self_attn.v_proj.weight"), "o": g("self_attn.o_proj.weight"),
                "bq": g("self_attn.q_proj.bias"), "bk": g("self_attn.k_proj.bias"),
                "bv": g("self_attn.v_proj.bias"), "qn": g("self_attn.q_norm.weight"),
                "kn": g("self_attn.k_norm.weight"), "gate": g("mlp.gate_proj.weight"),
                "up": g("mlp.up_proj.weight"), "down": g("mlp.down_proj.weight")})
        del sd, w
        self.inv = 1.0 / (self.theta ** (torch.arange(0, self.hd, 2, dtype=torch.float64,
                                                        device=dev) / self.hd))

    def rms(self, x, w):
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return w * x32.to(torch.bfloat16)

    def rope(self, pos):
        f = pos.double()[:, None] * self.inv[None, :]
        emb = torch.cat([f, f], -1)
        return emb.cos().to(torch.bfloat16), emb.sin().to(torch.bfloat16)

    def attend(self, q, K, Vv, mask):
        sdpa = getattr(F, "scaled_dot_product_attention", None)
        if sdpa is not None:
            try:
                return sdpa(q, K, Vv, attn_mask=mask, enable_gqa=True)
            except TypeError:  # torch < 2.5: no enable_gqa
                pass
        r = self.nh // self.kvh
        K, Vv = K.repeat_interleave(r, 1), Vv.repeat_interleave(r, 1)
        if sdpa is not None:
            return sdpa(q, K, Vv, attn_mask=mask)
        a = (q.float() @ K.float().transpose(-1, -2)) / self.hd ** 0.5  # torch < 2.0
        if mask is not None:
            a = a.masked_fill(~mask, float("-inf"))
        return (a.softmax(-1) @ Vv.float()).to(q.dtype)

    @staticmethod
    def rot(x):
        h = x.shape[-1] // 2
        return torch.cat([-x[..., h:], x[..., :h]], -1)

    def forward(self, ids, pos0, cache, mask=None, head=True):
        """ids (N, T); cache: per layer [k, v] each (N, kvh, ctx_max, hd), positions
        [pos0, pos0 + T) written. Returns (top-1, prob, entropy) of every row on the host
        (None when head is False)."""
        N, T = ids.shape
        pos = torch.arange(pos0, pos0 + T, device=ids.device)
        cos, sin = self.rope(pos)
        x = F.embedding(ids, self.embed)
        for i, ly in enumerate(self.layers):
            h = self.rms(x, ly["in"])
            q = F.linear(h, ly["q"], ly["bq"]).view(N, T, self.nh, self.hd)
            k = F.linear(h, ly["k"], ly["bk"]).view(N, T, self.kvh, self.hd)
            v = F.linear(h, ly["v"], ly["bv"]).view(N, T, self.kvh, self.hd)
            if ly["qn"] is not None:
                q = self.rms(q, ly["qn"])
                k = self.rms(k, ly["kn"])
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            q = q * cos + self.rot(q) * sin
            k = k * cos + self.rot(k) * sin
            kc, vc = cache[i]
            kc[:, :, pos0:pos0 + T] = k
            vc[:, :, pos0:pos0 + T] = v
            K, Vv = kc[:, :, :pos0 + T], vc[:, :, :pos0 + T]
            o = self.attend(q, K, Vv, mask)
            x = x + F.linear(o.transpose(1, 2).reshape(N, T, -1), ly["o"])
            h = self.rms(x, ly["post"])
            x = x + F.linear(F.silu(F.linear(h, ly["gate"])) * F.linear(h, ly["up"]), ly["down"])
        if not head:  # a prefill: the cache is what it is for
            return None
        logits = F.linear(self.rms(x, self.norm), self.lm_head).float()
        lp = torch.log_softmax(logits, -1)
        prob, tok = lp.max(-1)
        ent = -(lp.exp() * lp).sum(-1)
        return torch.stack([tok.float(), prob.exp(), ent], -1).cpu()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--json")
    ap.add_argument("--device", default="cuda", help="cpu: a check of this script only")
    a = ap.parse_args()
    dev = torch.device(a.device)
    if a.device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"error": "torch sees no CUDA device", "torch": torch.__version__}))
        return 3
    torch.backends.cuda.matmul.allow_tf32 = True
    t0 = time.perf_counter()
    m = Model(a.model, dev)
    load_s = time.perf_counter() - t0
    ctx = a.ctx - a.ctx % m.B
    g = torch.Generator(device=dev).manual_seed(0)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    name = torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu"
    out = {"torch": torch.__version__, "device": name, "ctx": ctx,
           "load_s": load_s, "runs": []}
    with torch.no_grad():
        for nb in [int(x) for x in a.batches.split(",") if x]:
            cache = [[torch.zeros(nb, m.kvh, ctx + m.B, m.hd, dtype=torch.bfloat16,
                                  device=dev) for _ in range(2)] for _ in range(m.L)]
            if ctx:
                ids = torch.randint(0, m.V, (nb, ctx), device=dev, generator=g)
                p = torch.arange(ctx, device=dev)
                mask = (p[None, :] // m.B) <= (p[:, None] // m.B)
                m.forward(ids, 0, cache, mask, head=False)
            times = []
            for it in range(a.steps + 3):
                ids = torch.randint(0, m.V, (nb, m.B), device=dev, generator=g)
                sync()
                s = time.perf_counter()
                m.forward(ids, ctx, cache)  # ends with a copy to the host: synchronous
                e = time.perf_counter()
                if it >= 3:
                    times.append((e - s) * 1e3)
            out["runs"].append({"batch": nb, "median_ms": statistics.median(times),
                                "min_ms": min(times)})
            del cache
            if dev.type == "cuda":
                torch.cuda.empty_cache()
    line = json.dumps(out)
    print(line, flush=True)
    if a.json:
        with open(a.json, "w") as f:
            f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
