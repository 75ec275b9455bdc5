"""The PyTorch reference for fogline's mixture-of-experts families, written from the authors'
modeling code (not from fogline's C): LLaDA2.0/2.1 (`modeling_llada2_moe.py`: LLaDA2MoeAttention,
LLaDA2MoeGate, LLaDA2MoeSparseMoeBlock) and SDAR-MoE (Qwen3-MoE's Qwen3MoeSparseMoeBlock with
the Qwen3 attention). Float32 throughout; BF16/F16 weights are upcast.

What the authors' code does, and this reference with it:
- LLaDA2 attention: one query_key_value projection, rows [q heads | k heads | v heads] x
  head_dim; per-head RMSNorm of q and k (query_layernorm, key_layernorm) BEFORE RoPE; RoPE on
  the first rotary_dim = int(head_dim * partial_rotary_factor) dims of each head, NeoX halves
  (i, i + rotary_dim/2), inv_freq = 1 / theta^(2i / rotary_dim); the rest pass through;
  scaling head_dim^-0.5; attention.dense as the output projection.
- LLaDA2 router (LLaDA2MoeGate): logits = h . W^T in fp32, scores = sigmoid(logits),
  selection = scores + expert_bias, group_limited_topk (n_group groups of consecutive experts,
  a group's score the sum of its top-2 selection scores, the topk_group best groups kept, the
  top_k experts among them), weights = the chosen experts' unbiased scores / (their sum +
  1e-20) when top_k > 1, times routed_scaling_factor; output = sum_k w_k expert_k(h) +
  shared_experts(h). Layers below first_k_dense_replace are dense (LLaDA2MoeMLP).
- Qwen3-MoE router: softmax(logits, fp32) over all experts, top_k, divided by their sum when
  norm_topk_prob. Layer l is MoE unless l is in mlp_only_layers or (l + 1) % decoder_sparse_step.
- Attention is block-causal over absolute positions as in fogline_model.py (a query sees a key
  iff key block <= query block); no logits shift.

`Model.forward(ids, pos0=0, past=None)` has fogline_model.Model's interface (logits and each
layer's (k, v)), so tests/reference/ref_decode.py's loops run on it. After a forward,
`model.routes` holds per layer None (dense) or (ids (T, K) sorted ascending, weights (T, K) in
that order, margin (T,)): the margin is the smallest gap, in the scores the decisions compared,
between what was chosen and what was not (the k-th vs the (k+1)-th expert; for LLaDA2 also the
topk_group-th vs the next group), so that a comparison can leave honest near-ties out."""
import json
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "engine",
                                "train"))
import fogline_model as fm  # noqa: E402  (the dense layers: RMSNorm, Qwen3 attention, mask)
import safetensors_io as st  # noqa: E402


class Config:
    def __init__(self, d):
        self.raw = d
        self.arch = (d.get("architectures") or [""])[0]
        self.llada2 = self.arch == "LLaDA2MoeModelLM" or d.get("model_type") == "llada2_moe"
        self.hidden = d["hidden_size"]
        self.n_layers = d["num_hidden_layers"]
        self.n_heads = d["num_attention_heads"]
        # an absent key takes the default of the family's config class (LLaDA2MoeConfig for
        # LLaDA2: kv heads 0 = one per head, eps 1e-5, n_group 8, topk_group 4, scaling 2.5,
        # partial rotary 0.5, qk norm on)
        self.n_kv_heads = d.get("num_key_value_heads") or self.n_heads
        self.head_dim = d.get("head_dim") or self.hidden // self.n_heads
        self.intermediate = d["intermediate_size"]
        self.vocab = d["vocab_size"]
        self.rope_theta = float(d.get("rope_theta", 10000.0))
        self.rms_eps = float(d.get("rms_norm_eps", 1e-5 if self.llada2 else 1e-6))
        self.tie = bool(d.get("tie_word_embeddings", False))
        self.n_experts = d["num_experts"]
        self.top_k = d["num_experts_per_tok"]
        self.moe_inter = d["moe_intermediate_size"]
        self.norm_topk = bool(d.get("norm_topk_prob", self.llada2))
        if self.llada2:
            self.block_size = int(d.get("block_size", 32))
            self.n_shared = int(d.get("num_shared_experts") or 0)
            self.n_group = int(d.get("n_group", 8))
            self.topk_group = int(d.get("topk_group", 4))
            self.scaling = float(d.get("routed_scaling_factor", 2.5))
            self.rotary_dim = int(self.head_dim * float(d.get("partial_rotary_factor", 0.5)))
            self.qk_norm = bool(d.get("use_qk_norm", True))
            first = int(d.get("first_k_dense_replace", 0))
            self.moe_layers = [l >= first for l in range(self.n_layers)]
        else:
            self.block_size = int(d.get("block_size", 4))
            self.rotary_dim = self.head_dim
            self.qk_norm = True
            self.qkv_bias = False
            step = int(d.get("decoder_sparse_step", 1))
            only = set(d.get("mlp_only_layers") or [])
            self.moe_layers = [l not in only and (l + 1) % step == 0 for l in range(self.n_layers)]

    @staticmethod
    def from_dir(path):
        with open(os.path.join(path, "config.json")) as f:
            return Config(json.load(f))


def rope_cos_sin(pos, rd, theta):
    """Cos, sin (T, rd) for rotary_dim rd (the authors' default rope init with a partial
    factor: inv_freq over rd dims), HF layout; angles in float64."""
    inv = 1.0 / (theta ** (torch.arange(0, rd, 2, dtype=torch.float64) / rd))
    f = pos.double()[:, None] * inv[None, :]
    emb = torch.cat([f, f], dim=-1)
    return emb.cos().float(), emb.sin().float()


def apply_partial_rope(x, cos, sin):
    """x (..., T, hd): rotate the first cos.shape[-1] dims (apply_rotary_pos_emb)."""
    rd = cos.shape[-1]
    xr, xp = x[..., :rd], x[..., rd:]
    return torch.cat([xr * cos + fm.rotate_half(xr) * sin, xp], dim=-1)


class LLaDA2Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        hd = c.head_dim
        self.query_key_value = nn.Linear(c.hidden, (c.n_heads + 2 * c.n_kv_heads) * hd, bias=False)
        self.dense = nn.Linear(c.n_heads * hd, c.hidden, bias=False)
        if c.qk_norm:
            self.query_layernorm = fm.RMSNorm(hd, c.rms_eps)
            self.key_layernorm = fm.RMSNorm(hd, c.rms_eps)

    def forward(self, x, cos, sin, mask, past=None):
        c = self.c
        B, T, _ = x.shape
        hd = c.head_dim
        qkv = self.query_key_value(x).view(B, T, c.n_heads + 2 * c.n_kv_heads, hd)
        q, k, v = qkv.split([c.n_heads, c.n_kv_heads, c.n_kv_heads], dim=2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if c.qk_norm:
            q = self.query_layernorm(q)
            k = self.key_layernorm(k)
        q = apply_partial_rope(q, cos[None, None], sin[None, None])
        k = apply_partial_rope(k, cos[None, None], sin[None, None])
        new_kv = (k, v)
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        rep = c.n_heads // c.n_kv_heads
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-1, -2)) * hd ** -0.5
        att = att.masked_fill(~mask[None, None], float("-inf"))
        o = (torch.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(B, T, c.n_heads * hd)
        return self.dense(o), new_kv


class SwiGLU(nn.Module):
    def __init__(self, hidden, inter):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Gate(nn.Module):
    """The router: mlp.gate.weight (and LLaDA2's expert_bias buffer)."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        self.weight = nn.Parameter(torch.zeros(c.n_experts, c.hidden))
        if c.llada2:
            self.register_buffer("expert_bias", torch.zeros(c.n_experts))

    def route(self, h):
        """h (N, H) -> ids (N, K) best first, weights (N, K), margin (N,)."""
        c = self.c
        logits = F.linear(h.float(), self.weight.float())
        K = c.top_k
        if not c.llada2:
            p = torch.softmax(logits, dim=-1, dtype=torch.float32)
            top, ids = torch.topk(p, K + 1 if K < c.n_experts else K, dim=-1)
            margin = (top[:, K - 1] - top[:, K]) if K < c.n_experts else torch.full_like(top[:, 0], math.inf)
            w = top[:, :K]
            if c.norm_topk:
                w = w / w.sum(dim=-1, keepdim=True)
            return ids[:, :K], w, margin
        scores = torch.sigmoid(logits.float())
        sel = scores + self.expert_bias.float()
        N, E = sel.shape
        G, per = c.n_group, E // c.n_group
        gs = sel.view(N, G, per).topk(2, dim=-1)[0].sum(dim=-1)          # (N, G)
        gsorted, gidx = torch.sort(gs, dim=-1, descending=True)
        keep = gidx[:, :c.topk_group]
        gmargin = (gsorted[:, c.topk_group - 1] - gsorted[:, c.topk_group]
                   if c.topk_group < G else torch.full((N,), math.inf))
        gmask = torch.zeros(N, G, dtype=torch.bool)
        gmask.scatter_(1, keep, True)
        emask = gmask[:, :, None].expand(N, G, per).reshape(N, E)
        masked = sel.masked_fill(~emask, float("-inf"))
        n_kept = c.topk_group * per
        top, ids = torch.topk(masked, K + 1 if K < n_kept else K, dim=-1)
        emargin = (top[:, K - 1] - top[:, K]) if K < n_kept else torch.full((N,), math.inf)
        ids = ids[:, :K]
        s = scores.gather(1, ids)
        w = s / (s.sum(dim=-1, keepdim=True) + 1e-20) if K > 1 else s
        return ids, w * c.scaling, torch.minimum(gmargin, emargin)


class MoE(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.gate = Gate(c)
        self.experts = nn.ModuleList([SwiGLU(c.hidden, c.moe_inter) for _ in range(c.n_experts)])
        if c.llada2 and c.n_shared:
            self.shared_experts = SwiGLU(c.hidden, c.moe_inter * c.n_shared)
        self.last = None

    def forward(self, x):
        B, T, H = x.shape
        h = x.reshape(-1, H)
        ids, w, margin = self.gate.route(h)
        y = torch.zeros_like(h)
        for k in range(ids.shape[1]):  # every (token, k) through its expert, weighted
            for e in ids[:, k].unique().tolist():
                rows = (ids[:, k] == e).nonzero()[:, 0]
                y[rows] += w[rows, k:k + 1] * self.experts[e](h[rows])
        if hasattr(self, "shared_experts"):
            y = y + self.shared_experts(h)
        order = ids.argsort(dim=-1)
        self.last = (ids.gather(1, order), w.gather(1, order), margin)
        return y.view(B, T, H)


class Layer(nn.Module):
    def __init__(self, c, l):
        super().__init__()
        self.c = c
        if c.llada2:
            self.attention = LLaDA2Attention(c)
        else:
            self.self_attn = fm.Attention(c)
        self.mlp = MoE(c) if c.moe_layers[l] else SwiGLU(c.hidden, c.intermediate)
        self.input_layernorm = fm.RMSNorm(c.hidden, c.rms_eps)
        self.post_attention_layernorm = fm.RMSNorm(c.hidden, c.rms_eps)

    def forward(self, x, cos, sin, mask, past=None):
        att = self.attention if self.c.llada2 else self.self_attn
        a, kv = att(self.input_layernorm(x), cos, sin, mask, past)
        x = x + a
        x = x + self.mlp(self.post_attention_layernorm(x))
        return x, kv


class Inner(nn.Module):
    def __init__(self, c):
        super().__init__()
        emb = nn.Embedding(c.vocab, c.hidden)
        if c.llada2:
            self.word_embeddings = emb
        else:
            self.embed_tokens = emb
        self.layers = nn.ModuleList([Layer(c, l) for l in range(c.n_layers)])
        self.norm = fm.RMSNorm(c.hidden, c.rms_eps)


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.model = Inner(c)
        self.lm_head = nn.Linear(c.hidden, c.vocab, bias=False)
        self.routes = []

    def embed(self):
        return self.model.word_embeddings if self.c.llada2 else self.model.embed_tokens

    def head(self, h):
        return h @ self.lm_head.weight.float().t()

    def forward(self, ids, pos0=0, past=None):
        c = self.c
        B, T = ids.shape
        qp = torch.arange(pos0, pos0 + T)
        kp = torch.arange(0, pos0 + T)
        mask = fm.block_causal_mask(qp, kp, c.block_size)
        cos, sin = rope_cos_sin(qp, c.rotary_dim, c.rope_theta)
        x = self.embed()(ids).float()
        kvs, self.routes = [], []
        for i, layer in enumerate(self.model.layers):
            x, kv = layer(x, cos, sin, mask, past[i] if past is not None else None)
            kvs.append(kv)
            self.routes.append(layer.mlp.last if isinstance(layer.mlp, MoE) else None)
        return self.head(self.model.norm(x)), kvs


def load_state(path):
    idx = os.path.join(path, "model.safetensors.index.json")
    sd = {}
    if os.path.exists(idx):
        with open(idx) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        for fn in files:
            sd.update(st.load(os.path.join(path, fn)))
    else:
        sd = st.load(os.path.join(path, "model.safetensors"))
    return {k: v.float() for k, v in sd.items()}


def load_model(path):
    """A Hugging Face directory of either family (single file or sharded), in float32."""
    m = Model(Config.from_dir(path))
    m.load_state_dict(load_state(path), strict=True)
    m.eval()
    return m
