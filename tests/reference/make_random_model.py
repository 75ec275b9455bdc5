#!/usr/bin/env python3
"""Writes a random model as a Hugging Face directory (config.json + model.safetensors, or
sharded with model.safetensors.index.json) in one of fogline's layouts, from a seed.

  make_random_model.py OUT --layout qwen3|qwen2 [--shape tiny|small|qwen3-0.6b|sdar-1.7b]
                       [--dtype f32|bf16|f16] [--seed N] [--shards K] [--tie]

qwen3: SDAR's layout (SDARForCausalLM, q_norm/k_norm, block_size + mask_token_id keys).
qwen2: Fast-dLLM v2's layout (Fast_dLLM_QwenForCausalLM, q/k/v bias, bd_size, no head_dim).
No tokenizer files are written: tests that need one copy or generate it separately."""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fogline_ref as ref  # noqa: E402
import st  # noqa: E402

SHAPES = {
    # hidden, layers, heads, kv heads, head_dim, intermediate, vocab
    "tiny": (64, 2, 4, 2, 16, 128, 512),
    "small": (128, 3, 4, 2, 32, 320, 1024),
    "qwen3-0.6b": (1024, 28, 16, 8, 128, 3072, 151936),
    "sdar-1.7b": (2048, 28, 16, 8, 128, 6144, 151936),
}
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def make_config(layout, shape, tie):
    h, L, nh, kvh, hd, inter, vocab = SHAPES[shape]
    if layout == "qwen3":
        return {
            "architectures": ["SDARForCausalLM"], "model_type": "sdar",
            "hidden_size": h, "num_hidden_layers": L, "num_attention_heads": nh,
            "num_key_value_heads": kvh, "head_dim": hd, "intermediate_size": inter,
            "vocab_size": vocab, "max_position_embeddings": 4096, "rope_theta": 1000000.0,
            "rms_norm_eps": 1e-6, "tie_word_embeddings": tie, "attention_bias": False,
            "block_size": 4, "mask_token_id": vocab - 1, "eos_token_id": vocab - 2,
            "bos_token_id": None, "torch_dtype": "bfloat16", "hidden_act": "silu",
        }
    # Fast-dLLM v2 has no head_dim key: it is hidden / heads
    assert h // nh == hd, "qwen2 layout needs head_dim == hidden / heads"
    return {
        "architectures": ["Fast_dLLM_QwenForCausalLM"], "model_type": "Fast_dLLM_Qwen",
        "hidden_size": h, "num_hidden_layers": L, "num_attention_heads": nh,
        "num_key_value_heads": kvh, "intermediate_size": inter, "vocab_size": vocab,
        "max_position_embeddings": 4096, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": tie, "bd_size": 32, "eos_token_id": vocab - 2,
        "bos_token_id": vocab - 3, "torch_dtype": "bfloat16", "hidden_act": "silu",
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layout", choices=["qwen3", "qwen2"], required=True)
    ap.add_argument("--shape", choices=list(SHAPES), default="tiny")
    ap.add_argument("--dtype", choices=list(DTYPES), default="f32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--tie", action="store_true")
    a = ap.parse_args()
    cfg = make_config(a.layout, a.shape, a.tie)
    torch.manual_seed(a.seed)
    c = ref.Config(cfg)
    with torch.no_grad():
        m = ref.Model(c)
        for name, p in m.named_parameters():
            if "norm" in name:  # norms near 1, so activations stay in range
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            else:
                fan_in = p.shape[-1]
                p.copy_(torch.randn_like(p) / fan_in ** 0.5)
    sd = {k: v.detach().to(DTYPES[a.dtype]).contiguous() for k, v in m.state_dict().items()}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    names = sorted(sd)
    if a.shards <= 1:
        st.save(os.path.join(a.out, "model.safetensors"), sd, {"format": "pt"})
        return
    per = (len(names) + a.shards - 1) // a.shards
    weight_map = {}
    total = 0
    for i in range(a.shards):
        part = names[i * per:(i + 1) * per]
        fn = "model-%05d-of-%05d.safetensors" % (i + 1, a.shards)
        st.save(os.path.join(a.out, fn), {k: sd[k] for k in part}, {"format": "pt"})
        for k in part:
            weight_map[k] = fn
            total += sd[k].numel() * sd[k].element_size()
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


if __name__ == "__main__":
    main()
