#!/usr/bin/env python3
"""Checks train.py's --noise dual batches (BD3-LM-style: the clean sequence, then noisy copies of
its target blocks at the same positions) against what the decoder actually computes: for every
noisy block, the logits in the batched dual forward must equal a plain block-causal forward over
  clean tokens before the block + that noisy block                     (not pipelined), or
  clean tokens before the turn's first block + the turn's noisy blocks (pipelined, D2F),
and the clean part must equal a plain forward over the clean sequence. Also checks targets: the
masked positions lie in [turn start, block end), earlier replies' noisy copies end in
<|endoftext|> after <|im_end|>, the prompt part of a block is shown unmasked.
A small random model (2 layers) with the built-in model's tokenizer; exits 1 on a mismatch.

  test_dual.py [MODEL_DIR]   (the tokenizer's folder; default engine/models/fogline-helpdesk)"""
import os
import sys

import numpy as np
import torch

# the training code under test (tests import engine/train, never the reverse)
TRAIN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "engine", "train")
sys.path.insert(0, TRAIN_DIR)

import bpe  # noqa: E402
import datagen  # noqa: E402
import train  # noqa: E402


def main():
    tok_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(TRAIN_DIR, "..", "models",
                                                                  "fogline-helpdesk")
    torch.set_num_threads(2)
    torch.manual_seed(3)
    tok = bpe.Tokenizer.load(tok_dir)
    bs = 8
    model = train.small_model(tok, bs)
    for p in model.parameters():  # larger weights: differences would show
        p.data.mul_(8.0)
    model.eval()
    dl = [d for d in datagen.generate("train", 80, 7) if len(d) >= 4][:5]
    dl += datagen.generate_mixed("train", 12, 3)[:3]
    ex = [train.build_example(tok, d, bs) for d in dl]
    n_spans = sum(len(e[2]) for e in ex)
    fails = 0
    if n_spans < 4:
        print("FAIL only %d earlier assistant turns found in %d multi-turn dialogues" % (n_spans, 5))
        fails += 1
    rng = np.random.default_rng(0)
    worst = 0.0
    checked = 0
    for all_turns in (False, True):
        for pp in (0.0, 1.0):
            ids, pos, mask, tgt, masked, _ = train.dual_batch(ex, list(range(len(ex))), tok, bs,
                                                              rng, p_pipe=pp, all_turns=all_turns)
            with torch.no_grad():
                lg, _ = model(ids, mask=mask, pos=pos)
            for b, (e_ids, P, spans) in enumerate(ex):
                L = len(e_ids)
                off = L
                for (s, e, rs, re_) in train.dual_segments(e_ids, P, spans, bs, all_turns):
                    noisy = ids[b, off:off + e - s].tolist()
                    m = masked[b, off:off + e - s].numpy()
                    t = tgt[b, off:off + e - s].numpy()
                    npos = np.arange(s, e)
                    if m[npos < rs].any() or not m.any():
                        print("FAIL masks outside the turn's targets (or none) at %d..%d" % (s, e))
                        fails += 1
                    want = np.where(npos < re_, np.asarray(e_ids[s:e]), tok.eot)
                    if not (t == want).all() or (re_ < len(e_ids) and e_ids[re_ - 1] != tok.im_end):
                        print("FAIL targets of %d..%d" % (s, e))
                        fails += 1
                    for blk in range(s // bs, e // bs):
                        a0 = blk * bs
                        if pp == 0.0 or blk == s // bs:
                            seq = e_ids[:a0] + noisy[a0 - s:a0 - s + bs]
                        else:
                            seq = e_ids[:s] + noisy[:a0 - s + bs]
                        with torch.no_grad():
                            ref, _ = model(torch.tensor(seq)[None])
                        got = lg[b, off + a0 - s:off + a0 - s + bs]
                        worst = max(worst, (ref[0, -bs:] - got).abs().max().item())
                        checked += 1
                    off += e - s
                with torch.no_grad():
                    ref, _ = model(torch.tensor(e_ids)[None])
                worst = max(worst, (ref[0] - lg[b, :L]).abs().max().item())
    scale = lg.abs().max().item()
    print("dual batches: %d noisy blocks checked, %d earlier turns, max |diff| %.3g (logits up to %.3g)"
          % (checked, n_spans, worst, scale))
    if worst > 1e-3 * max(1.0, scale):
        print("FAIL dual logits differ from plain forwards")
        fails += 1
    print("PASS" if not fails else "FAIL (%d)" % fails)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
