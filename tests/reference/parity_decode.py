#!/usr/bin/env python3
"""Greedy decoding parity: `fogline generate --prompt-ids` against ref_decode.py on random
models of both layouts (and SDAR-MoE, through moe_ref.py), token for token.

For each model: both policies (one token per step; threshold) with explicit flags, and the
model's own defaults (no decoding flag but --temperature 0: the family's authors' settings);
prompts shorter than a block, ending exactly on a block boundary (one and two blocks: Fast-dLLM
v2's autoregressive first token from the prefill), and ending inside a later block; replies over
several blocks. Then the end-token rule: a copy of the model whose end token is one the reply
produces in the middle of a later block, so that the reply must stop there.

  parity_decode.py FOGLINE_BIN MODEL_DIR [MODEL_DIR ...]"""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fogline_ref as ref  # noqa: E402
import moe_ref  # noqa: E402
import ref_decode  # noqa: E402

FAILS = 0
CASES = 0


def run_case(fogline, d, m, cfg, prompt, max_tokens, policy, threshold, label):
    global FAILS, CASES
    V = cfg["vocab_size"]
    mask = cfg.get("mask_token_id", V - 1)
    eos = cfg["eos_token_id"]
    eos = set(eos if isinstance(eos, list) else [eos])
    fast = cfg["architectures"][0] == "Fast_dLLM_QwenForCausalLM"
    want, ref_forwards = ref_decode.generate(m, prompt, max_tokens, mask, eos, policy=policy or "threshold",
                                  threshold=threshold if policy else 0.9, fastdllm=fast)
    args = [fogline, "generate", "--model", d, "--json", "--threads", "2", "--temperature", "0",
            "--prompt-ids", ",".join(map(str, prompt)), "--max-tokens", str(max_tokens)]
    if policy:  # else: the model's defaults
        args += ["--policy", policy, "--threshold", str(threshold)]
    out = subprocess.run(args, capture_output=True, text=True)
    CASES += 1
    name = "%s %s prompt len %d" % (os.path.basename(d), label, len(prompt))
    if out.returncode != 0:
        print("FAIL %s: exit %d: %s" % (name, out.returncode, out.stderr))
        FAILS += 1
        return None
    got = json.loads(out.stdout)
    if got["ids"] != want:
        FAILS += 1
        print("FAIL %s:\n  ref  %s\n  ours %s" % (name, want, got["ids"]))
    else:
        print("ok   %s: %d tokens, finish %s" % (name, len(got["ids"]), got["finish"]))
    got["ref_forwards"] = ref_forwards
    return got


def eos_copy(d, cfg, tok, tmp):
    """A copy of model d (weights linked) whose end token is tok."""
    out = os.path.join(tmp, os.path.basename(d) + "_eos%d" % tok)
    os.makedirs(out)
    for f in os.listdir(d):
        if f != "config.json":
            os.symlink(os.path.join(d, f), os.path.join(out, f))
    c = dict(cfg)
    c["eos_token_id"] = tok
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(c, f)
    return out, c


def main():
    torch.set_num_threads(2)
    fogline = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="fl_parity_")
    try:
        for d in sys.argv[2:]:
            with open(os.path.join(d, "config.json")) as f:
                cfg = json.load(f)
            # SDAR-MoE decodes as SDAR does: the MoE reference behind the same loop
            moe = cfg["architectures"][0] == "SDARMoeForCausalLM"
            m = moe_ref.load_model(d) if moe else ref.load_model(d)
            V = cfg["vocab_size"]
            rng = random.Random(7)
            B = m.c.block_size
            max_tokens = 2 * B + B // 2 + 3  # three blocks, the last one cut by max_tokens
            long_reply = None
            for policy, threshold in (("sequential", 0.9), ("threshold", 0.3), (None, 0.9)):
                # below a block, one whole block, two whole blocks, ragged after two
                for n in (5, B, 2 * B, 2 * B + 5):
                    prompt = [rng.randrange(0, V - 3) for _ in range(n)]
                    got = run_case(fogline, d, m, cfg, prompt, max_tokens, policy, threshold,
                                   policy or "defaults")
                    if got and policy == "threshold" and n == 2 * B + 5:
                        long_reply = (prompt, got["ids"])
            # the end-token rule: the reply's token at a mid-block position of its second block
            # becomes the end token (its first occurrence must be mid-block too)
            if long_reply is None or len(long_reply[1]) < B + 2:
                print("FAIL %s: no reply long enough for the end-token case" % d)
                global FAILS
                FAILS += 1
                continue
            prompt, ids = long_reply
            first = (len(prompt) // B + 1) * B - len(prompt)  # reply index of block 2's start
            pick = None
            for j in range(first, len(ids)):
                t = ids[j]
                k = ids.index(t)  # where the reply will stop
                if k >= first and (len(prompt) + k) % B not in (0, B - 1):
                    pick = t
                    break
            if pick is None:
                print("FAIL %s: no token usable as a mid-block end token" % d)
                FAILS += 1
                continue
            d2, cfg2 = eos_copy(d, cfg, pick, tmp)
            got = run_case(fogline, d2, m, cfg2, prompt, max_tokens, "threshold", 0.3,
                           "end token %d" % pick)
            if got is not None and got["finish"] != "stop":
                print("FAIL %s: finish %s, want stop" % (d2, got["finish"]))
                FAILS += 1
            if got is not None and cfg["architectures"][0] == "Fast_dLLM_QwenForCausalLM":
                # upstream stops decoding at the end token (what follows it is never decoded):
                # the same forwards, less the prefill that fogline runs inside the first step
                want_fw = got["ref_forwards"] - (1 if len(prompt) > B and len(prompt) % B else 0)
                if got["stats"]["forwards"] != want_fw:
                    print("FAIL %s: %d forwards, the reference's loop takes %d" % (
                        d2, got["stats"]["forwards"], want_fw))
                    FAILS += 1
                else:
                    print("ok   %s: %d forwards, as the reference's loop" % (d2, want_fw))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed" % (CASES - FAILS, FAILS))
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
