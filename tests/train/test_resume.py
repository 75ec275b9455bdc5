#!/usr/bin/env python3
"""Checks train.py --resume: a run stopped at a checkpoint (--stop-at) and continued with
--resume must end with the same weights, AdamW state and weight averages, bit for bit, as the
same run taken in one go, in one process and in two (--procs 2: every rank's noise stream is in
the checkpoint). A resume whose command differs in a training setting, a resume without a
checkpoint and a resume from a weights-only checkpoint (written before --resume existed) must
each stop with a one-line message naming the cause. A file WORK/STOP must stop a two-process
run at its next 50th step after a checkpoint, and --resume must finish it.
Tiny runs (a 400-token tokenizer, 1 layer, 24 steps); exits 1 on a mismatch.

  test_resume.py"""
import os
import socket
import subprocess
import sys
import tempfile

import torch

# the training code under test (tests import engine/train, never the reverse)
TRAIN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "engine", "train")
TRAIN = os.path.join(TRAIN_DIR, "train.py")
BASE = ["--layers", "1", "--hidden", "32", "--heads", "2", "--kv-heads", "1", "--head-dim", "16",
        "--inter", "64", "--vocab", "400", "--tok-dialogues", "300", "--dialogues", "400",
        "--batch-tokens", "512", "--steps", "24", "--warmup", "5", "--noise", "dual",
        "--all-turns", "--multi", "--p-multi", "0.2", "--p-outline", "0.2", "--p-system", "0.2",
        "--end-w", "2", "--slot-w", "2", "--avg-from", "0.3", "--ema", "0.9", "--seed", "3",
        "--threads", "1", "--purge-every", "0"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train(work, *extra):
    cmd = [sys.executable, TRAIN] + BASE + ["--work", work, "--export",
                                            os.path.join(work, "export"),
                                            "--port", str(free_port())] + list(extra)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    return r.returncode, r.stdout + r.stderr


def same(a, b, where):
    """Lists where two checkpoint values differ (tensors bit for bit, recursively)."""
    if isinstance(a, torch.Tensor):
        return [] if isinstance(b, torch.Tensor) and torch.equal(a, b) else [where]
    if isinstance(a, dict):
        if not isinstance(b, dict) or set(a) != set(b):
            return [where + " (keys)"]
        return [d for k in a for d in same(a[k], b[k], "%s.%s" % (where, k))]
    if isinstance(a, (list, tuple)):
        if not isinstance(b, (list, tuple)) or len(a) != len(b):
            return [where + " (length)"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in same(x, y, "%s[%d]" % (where, i))]
    return [] if a == b else [where]


def main():
    fails = 0

    def check(ok, what, detail=""):
        nonlocal fails
        print("%s %s%s" % ("ok  " if ok else "FAIL", what, (": " + detail) if detail else ""))
        fails += not ok

    with tempfile.TemporaryDirectory() as tmp:
        for procs in (1, 2):
            one, two = os.path.join(tmp, "one%d" % procs), os.path.join(tmp, "two%d" % procs)
            extra = ["--procs", str(procs)]
            rc, out = train(one, *extra)
            check(rc == 0, "procs %d: the run in one go" % procs, out[-1500:] if rc else "")
            rc, out = train(two, *extra, "--stop-at", "11")
            check(rc == 0 and "stopped at step 11" in out and
                  not os.path.exists(os.path.join(two, "export")),
                  "procs %d: --stop-at 11 stops with a checkpoint and no export" % procs,
                  "" if rc == 0 else out[-1500:])
            rc, out = train(two, *extra, "--resume")
            check(rc == 0 and "resumed at step 11 of 24" in out, "procs %d: --resume" % procs,
                  out[-1500:] if rc else "")
            if rc:
                continue
            a = torch.load(os.path.join(one, "ckpt.pt"))
            b = torch.load(os.path.join(two, "ckpt.pt"))
            keys = ["model", "opt", "step", "w_avg", "w_ema", "n_avg", "rng", "prng", "nrng",
                    "bi", "epoch", "seen_tok"]
            diff = [d for k in keys for d in same(a[k], b[k], k)]
            check(not diff and a["step"] == 24,
                  "procs %d: weights, AdamW state, averages and random streams equal the "
                  "one-go run's at step 24" % procs, ", ".join(diff[:8]))
            check(a["n_avg"] > 1, "procs %d: the averages ran over %d steps" % (procs, a["n_avg"]))

        # a file WORK/STOP: both ranks checkpoint and stop at the next 50th step; --resume
        # finishes the run
        stop = os.path.join(tmp, "stop")
        os.makedirs(stop)
        open(os.path.join(stop, "STOP"), "w").close()
        rc, out = train(stop, "--procs", "2", "--steps", "60")
        ck = torch.load(os.path.join(stop, "ckpt.pt")) if rc == 0 else {}
        check(rc == 0 and "stopped at step 50" in out and ck.get("step") == 50 and
              not os.path.exists(os.path.join(stop, "STOP")) and
              not os.path.exists(os.path.join(stop, "export")),
              "WORK/STOP stops the run at step 50 after a checkpoint and is removed",
              "" if rc == 0 else out[-1500:])
        rc, out = train(stop, "--procs", "2", "--steps", "60", "--resume")
        ck = torch.load(os.path.join(stop, "ckpt.pt")) if rc == 0 else {}
        check(rc == 0 and "resumed at step 50 of 60" in out and ck.get("step") == 60 and
              os.path.exists(os.path.join(stop, "export", "model.safetensors")),
              "--resume after WORK/STOP finishes the run", "" if rc == 0 else out[-1500:])

        work = os.path.join(tmp, "two1")
        rc, out = train(work, "--lr", "1e-3", "--resume")
        check(rc != 0 and "differs from the checkpoint's in --lr (0.002, now 0.001)" in out,
              "a resume with another --lr is refused", out.strip().splitlines()[-1] if out else "")
        rc, out = train(os.path.join(tmp, "none"), "--resume")
        check(rc != 0 and "no checkpoint" in out, "a resume without a checkpoint is refused",
              out.strip().splitlines()[-1] if out else "")
        old = os.path.join(tmp, "old")
        os.makedirs(old)
        ck = torch.load(os.path.join(work, "ckpt.pt"))
        torch.save({"model": ck["model"], "step": ck["step"]}, os.path.join(old, "ckpt.pt"))
        rc, out = train(old, "--resume")
        check(rc != 0 and "holds weights only" in out,
              "a resume from a weights-only checkpoint is refused",
              out.strip().splitlines()[-1] if out else "")
    print("%d failure(s)" % fails)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
