#!/usr/bin/env python3
"""Greedy decoding parity: `fogline generate --prompt-ids` against ref_decode.py on random
models of both layouts, token for token.

  parity_decode.py FOGLINE_BIN MODEL_DIR [MODEL_DIR ...]"""
import json
import os
import random
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fogline_ref as ref  # noqa: E402
import ref_decode  # noqa: E402


def main():
    torch.set_num_threads(2)
    fogline = sys.argv[1]
    fails = 0
    cases = 0
    for d in sys.argv[2:]:
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
        m = ref.load_model(d)
        V = cfg["vocab_size"]
        mask = cfg.get("mask_token_id", V - 1)
        eos = cfg["eos_token_id"]
        eos = set(eos if isinstance(eos, list) else [eos])
        fast = cfg["architectures"][0] == "Fast_dLLM_QwenForCausalLM"
        rng = random.Random(7)
        B = m.c.block_size
        for policy in ("sequential", "threshold"):
            for n in (1, B, 2 * B + 5):  # below a block, whole blocks (shift carry), ragged
                prompt = [rng.randrange(0, V - 3) for _ in range(n)]
                max_tokens = B + B // 2 + 3
                want, _ = ref_decode.generate(m, prompt, max_tokens, mask, eos, policy=policy,
                                              threshold=0.3, shift=1 if fast else 0,
                                              sub_block=8 if fast else None)
                args = [fogline, "generate", "--model", d, "--json", "--threads", "2",
                        "--prompt-ids", ",".join(map(str, prompt)), "--max-tokens", str(max_tokens),
                        "--policy", policy, "--threshold", "0.3", "--no-pipeline"]
                out = subprocess.run(args, capture_output=True, text=True)
                cases += 1
                if out.returncode != 0:
                    print("FAIL %s %s n=%d: exit %d: %s" % (d, policy, n, out.returncode, out.stderr))
                    fails += 1
                    continue
                got = json.loads(out.stdout)["ids"]
                if got != want:
                    fails += 1
                    print("FAIL %s %s prompt len %d:\n  ref  %s\n  ours %s" % (d, policy, n, want, got))
                else:
                    print("ok   %s %s prompt len %d: %d tokens" % (os.path.basename(d), policy, n, len(got)))
    print("%d passed, %d failed" % (cases - fails, fails))
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
