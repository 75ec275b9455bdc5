#!/usr/bin/env python3
"""Writes random dense models that talk garbage through the built-in model's tokenizer and chat
template (vocabulary 3000), for the constrained-decoding tests: whatever they would say, the
reply must be a valid value of the schema.

  make_models.py OUT_DIR --tokenizer DIR

OUT_DIR/q3: SDAR's layout (make_random_model.py's tiny shape, block 4, no logits shift).
OUT_DIR/q2: Fast-dLLM v2's layout (bd_size 32, sub-blocks of 8, shifted logits, the
            autoregressive first token of a block).
Final norms are scaled up (logits x 6) so that the models are confident about their garbage,
as a trained model is about its text: the constraint has to overrule them."""
import argparse
import json
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import fogline_ref as ref  # noqa: E402
import make_random_model as mrm  # noqa: E402
import st  # noqa: E402


def write(out, layout, tok_dir, seed):
    with open(os.path.join(tok_dir, "config.json")) as f:
        tcfg = json.load(f)
    cfg = mrm.make_config(layout, "tiny", layout == "qwen2")
    cfg["vocab_size"] = tcfg["vocab_size"]
    cfg["mask_token_id"] = tcfg["mask_token_id"]
    cfg["eos_token_id"] = tcfg["eos_token_id"]
    if layout == "qwen3":
        cfg["block_size"] = 4
    else:
        cfg["bos_token_id"] = None
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok_dir, fn), os.path.join(out, fn))
    torch.manual_seed(seed)
    with torch.no_grad():
        m = ref.Model(ref.Config(cfg))
        for name, p in m.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / p.shape[-1] ** 0.5)
        sd = {k: v.detach().float().contiguous() for k, v in m.state_dict().items()}
    sd["model.norm.weight"] *= 6.0
    st.save(os.path.join(out, "model.safetensors"), sd, {"format": "pt"})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--tokenizer", required=True, help="a model directory with the tokenizer")
    a = ap.parse_args()
    write(os.path.join(a.out, "q3"), "qwen3", a.tokenizer, 31)
    write(os.path.join(a.out, "q2"), "qwen2", a.tokenizer, 32)


if __name__ == "__main__":
    main()
