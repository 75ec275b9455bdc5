#!/usr/bin/env python3
"""Writes a random dense model that the server can chat with, for the token-editing tests of
`fogline serve`: SDAR's layout (make_random_model.py's tiny shape, no logits shift, block 8)
with the built-in model's tokenizer and chat template (vocabulary 3000).

  make_edit_model.py OUT --tokenizer DIR

A random model's top probabilities are nearly flat (0.02-0.05); its final norm is scaled up
(logits x 6) so that they spread over 0.2-1.0 and LLaDA2.1's edit thresholds (quality 0.5)
rewrite tokens, as parity_llada2.py does. The end and mask tokens' lm_head rows are zero: the
reply never ends early and never says the mask token, so every chat runs to max_tokens."""
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--tokenizer", required=True, help="a model directory with the tokenizer")
    ap.add_argument("--seed", type=int, default=21)
    a = ap.parse_args()
    with open(os.path.join(a.tokenizer, "config.json")) as f:
        tcfg = json.load(f)
    cfg = mrm.make_config("qwen3", "tiny", False)
    cfg["vocab_size"] = tcfg["vocab_size"]
    cfg["mask_token_id"] = tcfg["mask_token_id"]
    cfg["eos_token_id"] = tcfg["eos_token_id"]
    cfg["block_size"] = 8
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(a.tokenizer, fn), os.path.join(a.out, fn))
    torch.manual_seed(a.seed)
    ends = cfg["eos_token_id"] if isinstance(cfg["eos_token_id"], list) else [cfg["eos_token_id"]]
    with torch.no_grad():
        m = ref.Model(ref.Config(cfg))
        for name, p in m.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / p.shape[-1] ** 0.5)
        sd = {k: v.detach().float().contiguous() for k, v in m.state_dict().items()}
    sd["model.norm.weight"] *= 6.0
    for t in ends + [cfg["mask_token_id"]]:
        sd["lm_head.weight"][t] = 0.0
    st.save(os.path.join(a.out, "model.safetensors"), sd, {"format": "pt"})


if __name__ == "__main__":
    main()
