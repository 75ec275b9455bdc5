#!/usr/bin/env python3
"""Writes a random mixture-of-experts model as an unchanged-format Hugging Face directory:
LLaDA2 (LLaDA2MoeModelLM, llada2_moe) or SDAR-MoE (SDARMoeForCausalLM, sdar_moe), with the real
config keys and tensor names (tests/reference/moe_ref.py reads them).

  make_moe_model.py OUT --family llada2|sdar-moe [--shape tiny|small|llada2-mini|sdar-30b]
                    [--dtype f32|bf16] [--seed N] [--shards K] [--vocab V]
                    [--bias-dtype f32|bf16] [--quant q8|q4]

Float models (tiny, small) are built in memory through moe_ref.Model. The full-size shapes
(LLaDA2.0-mini: 16.3 B parameters, 32.5 GB in bf16; SDAR-30B-A3B) only with --quant: the
directory is then written as fogline's quantized format (engine/qformat.h, docs/models.md:
quants I8 (n, k) or U8 (n, k/2) plus F16 `NAME.weight_scale` (n, k/32); the embedding and
lm_head q8 in both modes; norms, routers and the expert bias BF16), streamed tensor by tensor
into shards of about 4 GB with random quants and scales (random bytes, not quantized floats: a
benchmark model's values do not matter, its bytes and shapes do), so it needs neither 32 GB of
memory nor the time to quantize. Real vocabulary by default (LLaDA2 157184, SDAR-MoE 151936);
--vocab shrinks it. As the real LLaDA2 config, no eos/mask ids (the tokenizer gives them)."""
import argparse
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# torch, moe_ref and st are imported where the float models are made: the quantized writer
# needs numpy only (tests/gpu/run.sh runs it on a GPU machine that may have no torch)

# hidden, layers, heads, kv heads, head_dim, dense inter, moe inter, experts, top-k, groups,
# kept groups, shared, first dense layers
SHAPES = {
    "llada2": {
        "tiny": (64, 3, 4, 2, 32, 128, 32, 16, 4, 4, 2, 1, 1),
        "small": (128, 4, 4, 2, 32, 256, 64, 32, 4, 8, 4, 1, 1),
        "llada2-mini": (2048, 20, 16, 4, 128, 5120, 512, 256, 8, 8, 4, 1, 1),
    },
    "sdar-moe": {
        "tiny": (64, 3, 4, 2, 32, 128, 32, 16, 4, 1, 1, 0, 0),
        "small": (128, 4, 4, 2, 32, 256, 64, 32, 8, 1, 1, 0, 0),
        "sdar-30b": (2048, 48, 32, 4, 128, 6144, 768, 128, 8, 1, 1, 0, 0),
    },
}
VOCAB = {"llada2": 157184, "sdar-moe": 151936}


def make_config(family, shape, vocab):
    h, L, nh, kvh, hd, inter, mi, E, K, G, TG, shared, first = SHAPES[family][shape]
    common = {"hidden_size": h, "num_hidden_layers": L, "num_attention_heads": nh,
              "num_key_value_heads": kvh, "head_dim": hd, "intermediate_size": inter,
              "moe_intermediate_size": mi, "num_experts": E, "num_experts_per_tok": K,
              "norm_topk_prob": True, "vocab_size": vocab, "max_position_embeddings": 8192,
              "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
              "hidden_act": "silu", "use_cache": True}
    if family == "llada2":
        # the keys of inclusionAI/LLaDA2.0-mini's config.json (no eos, mask or block key)
        return dict(common, **{
            "architectures": ["LLaDA2MoeModelLM"], "model_type": "llada2_moe",
            "num_shared_experts": shared, "n_group": G, "topk_group": TG,
            "score_function": "sigmoid", "moe_router_enable_expert_bias": True,
            "routed_scaling_factor": 2.5, "first_k_dense_replace": first,
            "partial_rotary_factor": 0.5, "use_qk_norm": True, "use_qkv_bias": False,
            "use_bias": False, "router_dtype": "fp32", "rope_theta": 600000.0,
            "rope_scaling": None, "initializer_range": 0.006, "output_router_logits": False,
            "embedding_dropout": 0.0, "attention_dropout": 0.0, "output_dropout": 0.0,
            "moe_shared_expert_intermediate_size": None})
    # Qwen3-MoE's keys, as SDAR-30B-A3B's config.json (no block or mask key)
    return dict(common, **{
        "architectures": ["SDARMoeForCausalLM"], "model_type": "sdar_moe",
        "decoder_sparse_step": 1, "mlp_only_layers": [], "rope_theta": 1000000.0,
        "rope_scaling": None, "attention_bias": False, "attention_dropout": 0.0,
        "router_aux_loss_coef": 0.001, "output_router_logits": False, "sliding_window": None,
        "use_sliding_window": False,
        # Qwen3's <|im_end|> and <|endoftext|>; the last two ids of a shrunk vocabulary
        "eos_token_id": 151645 if vocab > 151645 else vocab - 2,
        "bos_token_id": 151643 if vocab > 151645 else vocab - 3})


def random_float(cfg, seed, bias_dtype, dtype):
    import torch
    import moe_ref
    torch.manual_seed(seed)
    c = moe_ref.Config(cfg)
    m = moe_ref.Model(c)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "norm" in name:  # norms near 1, so activations stay in range
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith("gate.weight"):  # routers spread, so routes are not near-ties
                p.copy_(3.0 * torch.randn_like(p) / p.shape[-1] ** 0.5)
            else:
                p.copy_(torch.randn_like(p) / p.shape[-1] ** 0.5)
        for name, b in m.named_buffers():
            if name.endswith("expert_bias"):  # nonzero: the bias changes which experts win
                b.copy_(0.1 * torch.randn_like(b))
    sd = {}
    for k, v in m.state_dict().items():
        t = bias_dtype if k.endswith("expert_bias") else dtype
        sd[k] = v.detach().to(t).contiguous()
    return sd


def save(out, sd, shards):
    import st
    names = sorted(sd)
    if shards <= 1:
        st.save(os.path.join(out, "model.safetensors"), sd, {"format": "pt"})
        return
    per = (len(names) + shards - 1) // shards
    weight_map, total = {}, 0
    for i in range(shards):
        fn = "model-%05d-of-%05d.safetensors" % (i + 1, shards)
        part = names[i * per:(i + 1) * per]
        st.save(os.path.join(out, fn), {k: sd[k] for k in part}, {"format": "pt"})
        for k in part:
            weight_map[k] = fn
            total += sd[k].numel() * sd[k].element_size()
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


# ---- the streaming quantized writer (full-size shapes)

def tensor_list(cfg, fmt):
    """(name, dtype, shape, kind) of every tensor in file order; kind: 'q8'/'q4' quants,
    'scale' (F16), 'norm' (BF16 near 1), 'router' (BF16), 'bias' (BF16)."""
    llada2 = cfg["model_type"] == "llada2_moe"
    H, V = cfg["hidden_size"], cfg["vocab_size"]
    nh, kvh, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    E, mi = cfg["num_experts"], cfg["moe_intermediate_size"]
    out = []

    def mat(name, n, k, q):
        if q == "q8":
            out.append((name, "I8", (n, k), "q8"))
        else:
            out.append((name, "U8", (n, k // 2), "q4"))
        out.append((name + "_scale", "F16", (n, k // 32), "scale" + q[1]))

    mat("model.word_embeddings.weight" if llada2 else "model.embed_tokens.weight", V, H, "q8")
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        out.append((p + "input_layernorm.weight", "BF16", (H,), "norm"))
        out.append((p + "post_attention_layernorm.weight", "BF16", (H,), "norm"))
        if llada2:
            mat(p + "attention.query_key_value.weight", (nh + 2 * kvh) * hd, H, fmt)
            out.append((p + "attention.query_layernorm.weight", "BF16", (hd,), "norm"))
            out.append((p + "attention.key_layernorm.weight", "BF16", (hd,), "norm"))
            mat(p + "attention.dense.weight", H, nh * hd, fmt)
        else:
            mat(p + "self_attn.q_proj.weight", nh * hd, H, fmt)
            mat(p + "self_attn.k_proj.weight", kvh * hd, H, fmt)
            mat(p + "self_attn.v_proj.weight", kvh * hd, H, fmt)
            mat(p + "self_attn.o_proj.weight", H, nh * hd, fmt)
            out.append((p + "self_attn.q_norm.weight", "BF16", (hd,), "norm"))
            out.append((p + "self_attn.k_norm.weight", "BF16", (hd,), "norm"))
        dense = llada2 and l < cfg["first_k_dense_replace"]
        if dense:
            ff = cfg["intermediate_size"]
            mat(p + "mlp.gate_proj.weight", ff, H, fmt)
            mat(p + "mlp.up_proj.weight", ff, H, fmt)
            mat(p + "mlp.down_proj.weight", H, ff, fmt)
            continue
        out.append((p + "mlp.gate.weight", "BF16", (E, H), "router"))
        if llada2:
            out.append((p + "mlp.gate.expert_bias", "BF16", (E,), "bias"))
        experts = ["mlp.experts.%d" % e for e in range(E)]
        if llada2 and cfg["num_shared_experts"]:
            experts.append("mlp.shared_experts")
        for x in experts:
            w = mi * (cfg["num_shared_experts"] if x == "mlp.shared_experts" else 1)
            mat(p + x + ".gate_proj.weight", w, H, fmt)
            mat(p + x + ".up_proj.weight", w, H, fmt)
            mat(p + x + ".down_proj.weight", H, w, fmt)
    out.append(("model.norm.weight", "BF16", (H,), "norm"))
    mat("lm_head.weight", V, H, "q8")
    return out


def fill(kind, shape, rng, embed=False):
    n = int(np.prod(shape))
    if kind in ("q8", "q4"):
        return rng.integers(0, 256, size=n, dtype=np.uint8).tobytes()
    if kind.startswith("scale"):  # d so that d * q has about randn / sqrt(fan_in)'s spread:
        k = shape[1] * 32          # random q8 quants have a std of 74, q4 nibbles - 8 of 4.6
        # the embedding's rows about N(0, 1), as make_random_model.py's: with rows of
        # 1/sqrt(hidden) the layers' outputs swamp the tokens, every token's hidden state looks
        # alike, and all of a block's tokens route to the same few experts
        mag = (1.0 if embed else 1.0 / k ** 0.5) / (74.0 if kind == "scale8" else 4.6)
        # random signs: random quants' mean (-0.5) times a scale of one sign would give every
        # matrix a common rank-one part, every token the same hidden state and the same experts
        sign = np.where(rng.random(n) < 0.5, -1.0, 1.0).astype(np.float32)
        d = (sign * mag * (0.5 + rng.random(n, dtype=np.float32))).astype(np.float16)
        return d.tobytes()
    if kind == "norm":
        v = (1.0 + 0.1 * rng.standard_normal(n, dtype=np.float32))
    elif kind == "router":
        v = 3.0 * rng.standard_normal(n, dtype=np.float32) / shape[-1] ** 0.5
    else:
        v = 0.1 * rng.standard_normal(n, dtype=np.float32)
    return (v.view(np.uint32) >> 16).astype(np.uint16).tobytes()  # bf16 by truncation


def write_quantized(out, cfg, fmt, seed, shard_bytes=4 << 30):
    rng = np.random.default_rng(seed)
    tl = tensor_list(cfg, fmt)
    esize = {"I8": 1, "U8": 1, "F16": 2, "BF16": 2}
    shards, cur, size = [], [], 0
    for t in tl:
        nb = int(np.prod(t[2])) * esize[t[1]]
        if cur and size + nb > shard_bytes:
            shards.append(cur)
            cur, size = [], 0
        cur.append(t)
        size += nb
    shards.append(cur)
    weight_map, total = {}, 0
    for i, part in enumerate(shards):
        fn = "model-%05d-of-%05d.safetensors" % (i + 1, len(shards))
        header, off = {"__metadata__": {"format": "pt"}}, 0
        for name, dt, shape, _ in part:
            nb = int(np.prod(shape)) * esize[dt]
            header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + nb]}
            off += nb
            weight_map[name] = fn
        total += off
        hb = json.dumps(header).encode()
        hb += b" " * (-len(hb) % 8)
        with open(os.path.join(out, fn), "wb") as f:
            f.write(struct.pack("<Q", len(hb)))
            f.write(hb)
            for name, dt, shape, kind in part:
                f.write(fill(kind, shape, rng, name.startswith(("model.word_embeddings",
                                                                "model.embed_tokens"))))
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--family", choices=list(SHAPES), required=True)
    ap.add_argument("--shape", default="tiny")
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--bias-dtype", choices=["f32", "bf16"], default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=None)
    ap.add_argument("--quant", choices=["q8", "q4"], default=None)
    a = ap.parse_args()
    if a.shape not in SHAPES[a.family]:
        sys.exit("make_moe_model.py: --shape %s is not one of %s" % (a.shape,
                 ", ".join(SHAPES[a.family])))
    cfg = make_config(a.family, a.shape, a.vocab or VOCAB[a.family])
    os.makedirs(a.out, exist_ok=True)
    if a.quant:
        cfg["quantization_config"] = {"quant_method": "fogline", "format": a.quant,
                                      "group_size": 32}
        with open(os.path.join(a.out, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        write_quantized(a.out, cfg, a.quant, a.seed)
        return
    import torch
    dt = {"f32": torch.float32, "bf16": torch.bfloat16}
    sd = random_float(cfg, a.seed, dt[a.bias_dtype or a.dtype], dt[a.dtype])
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    save(a.out, sd, a.shards)


if __name__ == "__main__":
    main()
