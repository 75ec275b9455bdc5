#!/usr/bin/env python3
"""Training's model definition (engine/train/fogline_model.py) and the parity tests' reference
(tests/reference/fogline_ref.py) are two copies of one model, kept apart so that the reference
the C engine is checked against cannot change with training code. This checks that they still
compute the same function: on the built-in model's weights, for held-out dialogues with the
reply's blocks partly masked, the logits of a whole-sequence forward and of a forward continued
from a KV cache agree within float rounding, and training's per-row-position path (pos, a
(B, T, T) mask, head_at) gives the reference's logits when it is given the plain layout.
Exits 1 on a mismatch.

  test_model_ref.py [MODEL_DIR]   (default engine/models/fogline-helpdesk)"""
import os
import random
import sys

import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "engine", "train"))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))

import bpe  # noqa: E402
import datagen  # noqa: E402
import fogline_model  # noqa: E402
import fogline_ref  # noqa: E402

# the two copies do the same float32 arithmetic; a changed definition moves logits far more
TOL = 1e-5


def main():
    model_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "engine", "models",
                                                                    "fogline-helpdesk")
    torch.manual_seed(0)
    tok = bpe.Tokenizer.load(model_dir)
    train_m = fogline_model.load_model(model_dir)
    ref_m = fogline_ref.load_model(model_dir)
    c = ref_m.c
    mask_id = tok.mask
    bs = c.block_size
    rng = random.Random(3)
    fails = 0
    worst = 0.0
    for d in datagen.generate("test", 12, 5):
        prompt = tok.encode(datagen.render(d[:-1], add_generation_prompt=True))
        reply = tok.encode(d[-1]["content"])
        seq = prompt + [t if rng.random() < 0.5 else mask_id for t in reply]
        ids = torch.tensor([seq])
        with torch.no_grad():
            a, _ = train_m(ids)
            b, _ = ref_m(ids)
            at = (len(prompt) // bs) * bs  # the prompt's whole blocks cached, as the decoder does
            _, kv_a = train_m(ids[:, :at])
            _, kv_b = ref_m(ids[:, :at])
            a2, _ = train_m(ids[:, at:], pos0=at, past=kv_a)
            b2, _ = ref_m(ids[:, at:], pos0=at, past=kv_b)
            T = ids.shape[1]
            pos = torch.arange(T)[None]
            mask = fogline_model.block_causal_mask(pos[0], pos[0], bs)[None]
            head_at = torch.ones(1, T, dtype=torch.bool)
            a3, _ = train_m(ids, mask=mask, pos=pos, head_at=head_at)
        for name, x, y in (("whole sequence", a, b), ("continued from the cache", a2, b2),
                           ("training's per-row path", a3, b[0])):
            diff = (x - y).abs().max().item()
            worst = max(worst, diff)
            same_top = bool((x.argmax(-1) == y.argmax(-1)).all())
            if diff > TOL or not same_top:
                fails += 1
                print("FAIL %s: max |diff| %.3g, same argmax %s (%r)" % (name, diff, same_top,
                                                                          d[-2]["content"]))
    print("%d dialogues, 3 forwards each: max |logit diff| %.3g (tolerance %g)" % (12, worst, TOL))
    if fails:
        print("FAIL: engine/train/fogline_model.py and tests/reference/fogline_ref.py differ")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
