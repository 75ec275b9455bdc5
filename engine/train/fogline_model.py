"""The PyTorch definition of fogline's models as training and its evaluation tools use it
(train.py builds, trains and exports it; decode.py, eval.py and gap.py load exported models).

Covers the two layouts fogline serves: Qwen3 (per-head q_norm/k_norm, no qkv bias: SDAR and
our default model) and Qwen2 (q/k/v bias: Fast-dLLM v2). Parameter names are the Hugging Face
ones, so state_dict() is a valid model.safetensors.

Attention is block-causal: a query at absolute position p sees a key at absolute position k
iff k // block_size <= p // block_size. Everything is computed in float32; BF16/F16 weights
are upcast, as the C CPU backend does.

This is also the parity tests' PyTorch reference for the C engine (tests/reference/fogline_ref.py
imports it: tests may import product code, never the reverse). It shares no code with the C
engine, which is the independence parity needs; a change here that breaks the match with the C
engine fails the parity tests."""
import json
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

import safetensors_io as st


class Config:
    def __init__(self, d):
        self.raw = d
        arch = (d.get("architectures") or [""])[0]
        self.arch = arch
        self.model_type = d.get("model_type", "")
        self.hidden = d["hidden_size"]
        self.n_layers = d["num_hidden_layers"]
        self.n_heads = d["num_attention_heads"]
        self.n_kv_heads = d.get("num_key_value_heads", self.n_heads)
        self.head_dim = d.get("head_dim") or self.hidden // self.n_heads
        self.intermediate = d["intermediate_size"]
        self.vocab = d["vocab_size"]
        self.rope_theta = float(d.get("rope_theta", 10000.0))
        self.rms_eps = float(d.get("rms_norm_eps", 1e-6))
        self.tie = bool(d.get("tie_word_embeddings", False))
        qwen2 = arch == "Fast_dLLM_QwenForCausalLM" or self.model_type in ("qwen2", "Fast_dLLM_Qwen")
        self.qkv_bias = bool(d.get("attention_bias", qwen2)) or qwen2
        self.qk_norm = not qwen2
        self.block_size = int(d.get("block_size", d.get("bd_size", 4)))

    @staticmethod
    def from_dir(path):
        with open(os.path.join(path, "config.json")) as f:
            return Config(json.load(f))


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight.float() * x32


def rope_cos_sin(pos, head_dim, theta):
    """pos: (T,) int64 absolute positions -> cos, sin (T, head_dim), Hugging Face layout
    (rotate_half pairs i and i + head_dim/2)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    f = pos.double()[:, None] * inv[None, :]
    emb = torch.cat([f, f], dim=-1)
    return emb.cos().float(), emb.sin().float()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        hd = c.head_dim
        self.q_proj = nn.Linear(c.hidden, c.n_heads * hd, bias=c.qkv_bias)
        self.k_proj = nn.Linear(c.hidden, c.n_kv_heads * hd, bias=c.qkv_bias)
        self.v_proj = nn.Linear(c.hidden, c.n_kv_heads * hd, bias=c.qkv_bias)
        self.o_proj = nn.Linear(c.n_heads * hd, c.hidden, bias=False)
        if c.qk_norm:
            self.q_norm = RMSNorm(hd, c.rms_eps)
            self.k_norm = RMSNorm(hd, c.rms_eps)

    def forward(self, x, cos, sin, mask, past=None):
        """x: (B, T, H); mask: (T, Tk) bool, True = may attend; past: (k, v) each
        (B, kvh, Tp, hd) prepended to this segment's keys. Returns out, (k, v) of this segment."""
        c = self.c
        B, T, _ = x.shape
        hd = c.head_dim
        q = self.q_proj(x).view(B, T, c.n_heads, hd)
        k = self.k_proj(x).view(B, T, c.n_kv_heads, hd)
        v = self.v_proj(x).view(B, T, c.n_kv_heads, hd)
        if c.qk_norm:
            q = self.q_norm(q)
            k = self.k_norm(k)
        q = q.transpose(1, 2)
        k = k.transpose(1, 2)
        v = v.transpose(1, 2)
        if cos.dim() == 3:  # per-row positions (B, T, hd)
            cos, sin = cos[:, None], sin[:, None]
        else:
            cos, sin = cos[None, None], sin[None, None]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        new_kv = (k, v)
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        rep = c.n_heads // c.n_kv_heads
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        # mask (T, Tk) shared by the batch, or (B, T, Tk) per row
        att = att.masked_fill(~(mask[:, None] if mask.dim() == 3 else mask[None, None]),
                              float("-inf"))
        att = torch.softmax(att, dim=-1)
        o = (att @ v).transpose(1, 2).reshape(B, T, c.n_heads * hd)
        return self.o_proj(o), new_kv


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden, c.intermediate, bias=False)
        self.up_proj = nn.Linear(c.hidden, c.intermediate, bias=False)
        self.down_proj = nn.Linear(c.intermediate, c.hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = Attention(c)
        self.mlp = MLP(c)
        self.input_layernorm = RMSNorm(c.hidden, c.rms_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden, c.rms_eps)

    def forward(self, x, cos, sin, mask, past=None):
        a, kv = self.self_attn(self.input_layernorm(x), cos, sin, mask, past)
        x = x + a
        x = x + self.mlp(self.post_attention_layernorm(x))
        return x, kv


class Inner(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab, c.hidden)
        self.layers = nn.ModuleList([Layer(c) for _ in range(c.n_layers)])
        self.norm = RMSNorm(c.hidden, c.rms_eps)


def block_causal_mask(q_pos, k_pos, block_size):
    """(Tq, Tk) bool: query at q_pos[i] may see key at k_pos[j]."""
    return (k_pos[None, :] // block_size) <= (q_pos[:, None] // block_size)


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.model = Inner(c)
        if not c.tie:
            self.lm_head = nn.Linear(c.hidden, c.vocab, bias=False)

    def head(self, h):
        w = self.model.embed_tokens.weight if self.c.tie else self.lm_head.weight
        return h @ w.float().t()

    def forward(self, ids, pos0=0, past=None, block_size=None, mask=None, pos=None,
                head_at=None):
        """ids: (B, T). Positions are pos0..pos0+T-1; past: per-layer (k, v) for positions
        [0, pos0). Returns logits (B, T, vocab) and this segment's per-layer (k, v).
        Training may pass explicit per-row positions pos (B, T) with a mask (B, T, T) (a
        sequence followed by a noisy copy of some of its blocks, as in BD3-LM training).
        head_at: a (B, T) bool mask; logits only at those positions, (N, vocab) (training:
        the loss needs the masked positions only, and the head is the widest matmul)."""
        c = self.c
        bs = block_size or c.block_size
        B, T = ids.shape
        qp = torch.arange(pos0, pos0 + T)
        kp = torch.arange(0, pos0 + T)
        if mask is None:
            mask = block_causal_mask(qp, kp, bs)
        if pos is not None:
            cos, sin = rope_cos_sin(pos.reshape(-1), c.head_dim, c.rope_theta)
            cos, sin = cos.view(B, T, -1), sin.view(B, T, -1)
        else:
            cos, sin = rope_cos_sin(qp, c.head_dim, c.rope_theta)
        x = self.model.embed_tokens(ids).float()
        kvs = []
        for i, layer in enumerate(self.model.layers):
            x, kv = layer(x, cos, sin, mask, past[i] if past is not None else None)
            kvs.append(kv)
        h = self.model.norm(x)
        if head_at is not None:
            h = h[head_at]
        return self.head(h), kvs


def load_model(path, dtype=torch.float32):
    """Loads a Hugging Face directory (model.safetensors or a sharded index)."""
    c = Config.from_dir(path)
    m = Model(c)
    idx = os.path.join(path, "model.safetensors.index.json")
    sd = {}
    if os.path.exists(idx):
        with open(idx) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        for fn in files:
            sd.update(st.load(os.path.join(path, fn)))
    else:
        sd = st.load(os.path.join(path, "model.safetensors"))
    sd = {k: v.float() for k, v in sd.items()}
    if c.tie:
        sd.pop("lm_head.weight", None)
    m.load_state_dict(sd, strict=True)
    m.eval()
    return m


def save_model(m, path, dtype=torch.float32, extra_config=None, config=None):
    os.makedirs(path, exist_ok=True)
    sd = {k: v.detach().to(dtype) for k, v in m.state_dict().items()}
    st.save(os.path.join(path, "model.safetensors"), sd, {"format": "pt"})
    if config is not None:
        cfg = dict(config)
        if extra_config:
            cfg.update(extra_config)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
