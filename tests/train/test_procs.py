#!/usr/bin/env python3
"""Checks train.py --procs (data parallelism over processes, gloo on 127.0.0.1): when two
processes each take their share of a batch's examples (train.batch_grads, train.Procs), every
process must hold the gradient of the whole batch's loss as one process computes it here from
the same two shares, written out independently: sum(w * ce) over both shares / sum(w) over
both. After a clipped AdamW step both must hold the same weights (Procs.same_weights), and a
process with an empty share (a batch of fewer examples than processes) must add nothing: the
gradient is then that of the other share alone.
A small random model (2 layers, float32) with the built-in model's tokenizer; exits 1 on a
mismatch.

  test_procs.py [MODEL_DIR]   (the tokenizer's folder; default engine/models/fogline-helpdesk)"""
import os
import socket
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

# the training code under test (tests import engine/train, never the reverse)
TRAIN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "engine", "train")
sys.path.insert(0, TRAIN_DIR)

import bpe  # noqa: E402
import datagen  # noqa: E402
import train  # noqa: E402


def setup(tok_dir):
    """The same model, examples and two shares' batches in every process."""
    torch.set_num_threads(1)
    torch.manual_seed(5)
    tok = bpe.Tokenizer.load(tok_dir)
    bs = 8
    model = train.small_model(tok, bs)
    dl = datagen.generate_mixed("train", 40, 9, 0.2, 0.1, 0.2)[:9]
    ex = [train.build_example(tok, d, bs) for d in dl]
    slot_sets = train.slot_token_set(tok, ex)
    idx = list(range(len(ex)))
    shares = []
    for r in range(2):
        shares.append(train.dual_batch(ex, idx[r::2], tok, bs, np.random.default_rng([7, r]),
                                       0.3, 2.0, slot_sets, True, 2.0))
    return model, shares


def direct(model, batches):
    """The whole batch's loss written out: every share's sum(w * ce), over the total weight."""
    num = 0.0
    den = 0.0
    for noisy, pos, amask, clean, masked, weight in batches:
        logits, _ = model(noisy, mask=amask, pos=pos, head_at=masked)
        ce = F.cross_entropy(logits, clean[masked], reduction="none")
        num = num + (ce * weight[masked]).sum()
        den = den + weight[masked].sum()
    loss = num / den
    model.zero_grad(set_to_none=True)
    loss.backward()
    return loss.item(), [p.grad.clone() for p in model.parameters()]


def worker(rank, tok_dir, port, out):
    model, shares = setup(tok_dir)
    procs = train.Procs(2, rank, port)
    params = list(model.parameters())
    start = {k: v.clone() for k, v in model.state_dict().items()}
    res = {}
    for case in ("both", "empty"):
        model.load_state_dict(start)  # each case from the same weights as the reference
        opt = torch.optim.AdamW(params, lr=1e-2)
        mine = shares[rank] if case == "both" or rank == 0 else None
        opt.zero_grad(set_to_none=True)
        loss, ntok = train.batch_grads(model, procs, params, mine, False, True)
        res[case] = (loss, ntok, [p.grad.clone() for p in params])
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        res[case + "_same"] = procs.same_weights(params)
    torch.save(res, os.path.join(out, "rank%d.pt" % rank))
    # leave the group together: a rank exiting while its peer still holds the connection can
    # be aborted by gloo, depending on which one the machine happens to run first
    procs.close()


def main():
    tok_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(TRAIN_DIR, "..", "models",
                                                                  "fogline-helpdesk")
    fails = 0
    model, shares = setup(tok_dir)
    want_both = direct(model, shares)
    want_empty = direct(model, shares[:1])
    ntok = [s[3].numel() for s in shares]
    # one process: batch_grads on one share is that share's weighted mean
    params = list(model.parameters())
    model.zero_grad(set_to_none=True)
    got1, _ = train.batch_grads(model, train.Procs(1, 0, 0), params, shares[0], False, True)
    d1 = max((p.grad - g).abs().max().item() for p, g in zip(params, want_empty[1]))
    print("one process: loss %.6f (direct %.6f), max |grad diff| %.2e" % (got1, want_empty[0], d1))
    if abs(got1 - want_empty[0]) > 1e-5 or d1 > 1e-6:
        print("FAIL one process's loss or gradient")
        fails += 1

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as out:
        torch.multiprocessing.spawn(worker, args=(tok_dir, port, out), nprocs=2, join=True)
        res = [torch.load(os.path.join(out, "rank%d.pt" % r)) for r in range(2)]
    for case, (wl, wg), wn in (("both", want_both, sum(ntok)), ("empty", want_empty, ntok[0])):
        scale = max(g.abs().max().item() for g in wg)
        for r in range(2):
            loss, n, grads = res[r][case]
            d = max((g - w).abs().max().item() for g, w in zip(grads, wg))
            print("%s shares, rank %d: loss %.6f (one process %.6f), tokens %d (%d), "
                  "max |grad diff| %.2e of %.2e; same weights after the step: %s" % (
                      case, r, loss, wl, n, wn, d, scale, res[r][case + "_same"]))
            if abs(loss - wl) > 1e-5 or n != wn or d > 1e-5 * max(1.0, scale) \
                    or not res[r][case + "_same"]:
                print("FAIL %s shares, rank %d" % (case, r))
                fails += 1
        same = all(torch.equal(a, b) for a, b in zip(res[0][case][2], res[1][case][2]))
        if not same:
            print("FAIL %s shares: the two processes' gradients are not bit-identical" % case)
            fails += 1
    print("PASS" if not fails else "FAIL (%d)" % fails)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
