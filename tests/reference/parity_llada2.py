#!/usr/bin/env python3
"""Greedy decoding parity for the LLaDA2 rules: `fogline generate --prompt-ids` against
ref_decode.py's generate_llada2 (LLaDA2.0: threshold with the authors' quota schedule) and
generate_llada21 (LLaDA2.1: token editing and post steps), token for token.

  parity_llada2.py FOGLINE_BIN MODEL_DIR [MODEL_DIR ...] [--family auto|dense|llada2]

Model directories: dense random models (make_random_model.py --layout qwen3: SDAR's layout, no
logits shift) or LLaDA2-format ones (make_moe_model.py; family llada2: block 32, mask and end
ids from the tokenizer). --family auto (the default) tells them apart by config.json.

A random model's predictions are nearly flat (top probabilities of 0.02-0.05), so no
threshold would ever be passed and no token edited: each model is tested through a copy
whose final norm is scaled up (logits x SHARPEN), which spreads the top probabilities over
0.2-1.0 where the authors' thresholds (0.95; quality 0.7/0.5, speed 0.5/0) decide. A dense
model is also run with block 32 (LLaDA2's), its block being a config key.

Each case compares the reply ids; the editing cases also compare the edits, post steps and
forwards (decode-store overlap on: the engine then runs exactly the reference loop's
forwards) and the reply without overlap. The run fails unless edits happened, post steps ran,
and some block ended by the max_post_steps cap (else the editing cases prove nothing).
Then the end-token rule on a copy whose end token is one the reply says mid-block."""
import argparse
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
import ref_decode  # noqa: E402
import st  # noqa: E402

SHARPEN = 6.0
FAILS = 0
CASES = 0
TOTAL = {"edits": 0, "post_steps": 0, "capped_blocks": 0}


def fail(msg):
    global FAILS
    FAILS += 1
    print("FAIL " + msg)


def detect_family(cfg):
    if cfg.get("model_type") == "llada2_moe" or "LLaDA2MoeModelLM" in cfg.get("architectures", []):
        return "llada2"
    return "dense"


def token_id(d, content):
    """An added token's id from the directory's tokenizer.json, or None."""
    path = os.path.join(d, "tokenizer.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        tj = json.load(f)
    for t in tj.get("added_tokens", []):
        if t.get("content") == content:
            return t["id"]
    return None


def special_ids(d, cfg, family):
    """(mask id, set of end ids): config keys, else (LLaDA2) the tokenizer's tokens."""
    mask = cfg.get("mask_token_id")
    eos = cfg.get("eos_token_id")
    if family == "llada2":
        mask = mask if mask is not None else token_id(d, "<|mask|>")
        eos = eos if eos is not None else token_id(d, "<|endoftext|>")
    if mask is None or eos is None:
        raise SystemExit("%s: no mask or end token id" % d)
    return mask, set(eos if isinstance(eos, list) else [eos])


def load_reference(d, family):
    """The PyTorch model of a directory: any object with model(torch.tensor([x])) ->
    (logits, _), no logits shift."""
    if family == "llada2":
        import moe_ref  # the MoE reference, written from the authors' modeling code
        return moe_ref.load_model(d)
    return ref.load_model(d)


def variant(d, tmp, name, sharpen=None, cfg_changes=None):
    """A copy of model d (files linked) with config changes and/or the final norm scaled."""
    out = os.path.join(tmp, os.path.basename(os.path.normpath(d)) + "_" + name)
    os.makedirs(out)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    cfg.update(cfg_changes or {})
    for f in os.listdir(d):
        if f == "config.json" or (sharpen and f == "model.safetensors"):
            continue
        os.symlink(os.path.abspath(os.path.join(d, f)), os.path.join(out, f))
    if sharpen:
        t = st.load(os.path.join(d, "model.safetensors"))
        if "model.norm.weight" not in t:
            raise SystemExit("%s: no model.norm.weight in one model.safetensors to sharpen" % d)
        t["model.norm.weight"] = (t["model.norm.weight"].float() * sharpen).to(t["model.norm.weight"].dtype)
        st.save(os.path.join(out, "model.safetensors"), t)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return out, cfg


def fogline(binary, d, prompt, max_tokens, flags):
    args = [binary, "generate", "--model", d, "--json", "--threads", "2", "--temperature", "0",
            "--prompt-ids", ",".join(map(str, prompt)), "--max-tokens", str(max_tokens)] + flags
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode != 0:
        return None, "exit %d: %s" % (out.returncode, out.stderr.strip())
    return json.loads(out.stdout), None


def run_case(binary, d, label, prompt, max_tokens, flags, want, counts=None, want_forwards=None):
    """One fogline run against the reference's reply (and counts), then without overlap."""
    global CASES
    CASES += 1
    name = "%s %s prompt %d max %d" % (os.path.basename(d), label, len(prompt), max_tokens)
    got, err = fogline(binary, d, prompt, max_tokens, flags)
    if err:
        fail("%s: %s" % (name, err))
        return None
    ok = got["ids"] == want
    if not ok:
        fail("%s:\n  ref  %s\n  ours %s" % (name, want, got["ids"]))
    if counts is not None:
        mine = {"edits": got["stats"]["edits"], "post_steps": got["stats"]["post_steps"],
                "forwards": got["stats"]["forwards"]}
        theirs = {"edits": counts["edits"], "post_steps": counts["post_steps"],
                  "forwards": want_forwards}
        if mine != theirs:
            ok = False
            fail("%s: counts %s, the reference's loop %s" % (name, mine, theirs))
    nov, err = fogline(binary, d, prompt, max_tokens, flags + ["--no-overlap"])
    if err or nov["ids"] != got["ids"] or (counts is not None and nov["stats"]["edits"] != counts["edits"]):
        ok = False
        fail("%s: without overlap: %s" % (name, err or nov["ids"]))
    if ok:
        extra = ""
        if counts is not None:
            extra = ", %d edits, %d post steps, %d forwards" % (
                counts["edits"], counts["post_steps"], want_forwards)
        print("ok   %s: %d tokens, finish %s%s" % (name, len(got["ids"]), got["finish"], extra))
    return got


# LLaDA2.1's modes (the model card; --preset) and two more: a cap of 2 post steps that edits
# reach, and no post steps at all (edits only while masks remain)
EDIT_CASES = [
    ("quality", 0.7, 0.5, 16, ["--preset", "quality"]),
    ("speed", 0.5, 0.0, 16, ["--preset", "speed"]),
    ("edit .3 cap 2", 0.9, 0.3, 2, ["--policy", "threshold", "--threshold", "0.9",
                                    "--edit-threshold", "0.3", "--max-post-steps", "2",
                                    "--no-pipeline"]),
    ("edit .2 no post", 0.6, 0.2, 0, ["--policy", "threshold", "--threshold", "0.6",
                                      "--edit-threshold", "0.2", "--max-post-steps", "0",
                                      "--no-pipeline"]),
]
LLADA20 = ["--policy", "dynamic", "--steps", "32", "--threshold", "0.95", "--no-pipeline"]


def eos_copy(d, tmp, tok):
    return variant(d, tmp, "eos%d" % tok, cfg_changes={"eos_token_id": tok})[0]


def mid_block_token(prompt, ids, B):
    """A reply token whose first occurrence is inside (not at the edges of) a block after the
    reply's first one, or None."""
    first = (len(prompt) // B + 1) * B - len(prompt)
    for j in range(first, len(ids)):
        k = ids.index(ids[j])
        if k >= first and (len(prompt) + k) % B not in (0, B - 1):
            return ids[j]
    return None


def test_model(binary, d, family, tmp):
    variants = []
    if family == "llada2":
        variants.append(variant(d, tmp, "sharp", sharpen=SHARPEN) + (32,))
    else:
        v, c = variant(d, tmp, "sharp", sharpen=SHARPEN)
        variants.append((v, c, c.get("block_size", 4)))
        v, c = variant(d, tmp, "sharp_b32", sharpen=SHARPEN, cfg_changes={"block_size": 32})
        variants.append((v, c, 32))
    for vd, cfg, B in variants:
        m = load_reference(vd, family)
        mask, eos = special_ids(vd, cfg, family)
        V = cfg["vocab_size"]
        rng = random.Random(5)
        avoid = {mask} | eos

        def prompt_of(n):
            return [t for t in (rng.randrange(0, V) for _ in range(4 * n + 8)) if t not in avoid][:n]

        long_max = 2 * B + B // 2 + 3  # three blocks, the last one cut by max_tokens
        short_max = max(2, B // 3)     # below a block: the authors' steps cap changes quotas
        prompts = [prompt_of(n) for n in (5, B, 2 * B + 5)]
        # LLaDA2.0: the authors' rule by flags, and (family llada2) as the model's defaults
        keep = None
        for p in prompts:
            for mt in (long_max, short_max):
                want, _ = ref_decode.generate_llada2(m, p, mt, mask, eos, threshold=0.95, steps=32,
                                                     block=B)
                got = run_case(binary, vd, "llada2.0", p, mt, LLADA20, want)
                if family == "llada2":
                    run_case(binary, vd, "llada2.0 defaults", p, mt, [], want)
                if got and mt == long_max and len(p) == 2 * B + 5:
                    keep = (p, got["ids"])
        # LLaDA2.1: token editing
        edit_keep = None
        for label, th, eth, post, flags in EDIT_CASES:
            for p in prompts:
                for mt in (long_max, short_max):
                    want, fw, counts = ref_decode.generate_llada21(
                        m, p, mt, mask, eos, threshold=th, edit_threshold=eth,
                        max_post_steps=post, block=B)
                    for k in TOTAL:
                        TOTAL[k] += counts[k]
                    got = run_case(binary, vd, label, p, mt, flags, want, counts, fw)
                    if got and label == "quality" and mt == long_max and len(p) == 2 * B + 5:
                        edit_keep = (p, got["ids"])
        # the end-token rule, for both: a token of the reply mid-block becomes the end token
        for what, kept in (("llada2.0", keep), ("quality", edit_keep)):
            if kept is None or len(kept[1]) < B + 2:
                fail("%s %s: no reply long enough for the end-token case" % (vd, what))
                continue
            p, ids = kept
            tok = mid_block_token(p, ids, B)
            if tok is None:
                fail("%s %s: no token usable as a mid-block end token" % (vd, what))
                continue
            de = eos_copy(vd, tmp, tok)
            eos2 = {tok}
            if what == "llada2.0":
                want, _ = ref_decode.generate_llada2(m, p, long_max, mask, eos2, block=B)
                got = run_case(binary, de, what + " end %d" % tok, p, long_max, LLADA20, want)
            else:
                want, fw, counts = ref_decode.generate_llada21(m, p, long_max, mask, eos2,
                                                               threshold=0.7, edit_threshold=0.5,
                                                               max_post_steps=16, block=B)
                got = run_case(binary, de, what + " end %d" % tok, p, long_max,
                               ["--preset", "quality"], want, counts, fw)
            if got is not None and got["finish"] != "stop":
                fail("%s: finish %s, want stop" % (de, got["finish"]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fogline")
    ap.add_argument("models", nargs="+")
    ap.add_argument("--family", choices=["auto", "dense", "llada2"], default="auto")
    a = ap.parse_args()
    torch.set_num_threads(2)
    tmp = tempfile.mkdtemp(prefix="fl_parity_llada2_")
    try:
        for d in a.models:
            with open(os.path.join(d, "config.json")) as f:
                family = a.family if a.family != "auto" else detect_family(json.load(f))
            test_model(a.fogline, d, family, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("editing: %d edits, %d post steps, %d blocks ended by the post-step cap" % (
        TOTAL["edits"], TOTAL["post_steps"], TOTAL["capped_blocks"]))
    for k in TOTAL:
        if TOTAL[k] == 0:
            fail("no %s happened: the editing cases prove nothing" % k.replace("_", " "))
    print("%d passed, %d failed" % (CASES - FAILS, FAILS))
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
