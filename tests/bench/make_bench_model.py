"""A random model for serving benchmarks: the default model's tokenizer and chat template, a
bigger body (8 layers x 512, 4,096 positions) so that a 2,000-token prefill costs what it costs
on a real small model. Weights are random (the benchmark measures time, not text).

  /usr/bin/python3 tests/bench/make_bench_model.py OUT_DIR
"""
import json
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
import fogline_ref  # noqa: E402

SRC = os.path.join(HERE, "..", "..", "engine", "models", "fogline-helpdesk")


def main():
    out = sys.argv[1]
    torch.manual_seed(7)
    with open(os.path.join(SRC, "config.json")) as f:
        cfg = json.load(f)
    cfg.update({"hidden_size": 512, "num_hidden_layers": 8, "num_attention_heads": 8,
                "num_key_value_heads": 4, "head_dim": 64, "intermediate_size": 1408,
                "max_position_embeddings": 4096})
    m = fogline_ref.Model(fogline_ref.Config(cfg))
    for name, p in m.named_parameters():
        if p.dim() > 1:
            torch.nn.init.normal_(p, 0.0, 0.02)
    os.makedirs(out, exist_ok=True)
    fogline_ref.save_model(m, out, dtype=torch.bfloat16, config=cfg)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(SRC, f), os.path.join(out, f))
    print("wrote", out, sum(p.numel() for p in m.parameters()), "params")


if __name__ == "__main__":
    main()
