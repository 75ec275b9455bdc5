#!/usr/bin/env python3
"""Log probabilities (`fogline generate --json --logprobs N --trace`) against the PyTorch
reference, by replaying the engine's own decoding trace.

A reply token's log probability is its log-softmax (temperature 1, the whole vocabulary) in the
forward whose prediction decided it: the step that unmasked it, or that last rewrote it. The
trace (`--trace`: every step's draft of its block, with the positions it decided) says which
step that was and what the sequence held before it, so the reference can recompute that
forward on its own (fogline_ref.py: the whole sequence, the block-causal mask, no cache), take
the row that predicts the position (the position's own, or the one before it for a model with
shifted logits: Fast-dLLM v2, whose block-first token also comes from the previous block's last
row), and give the token's log probability and the N most likely tokens'. Greedy and sampled
replies, one token per step and several, and with token editing (LLaDA2.1's: a rewritten token's
log probability is the rewriting step's), also with a logit bias (`--logit-bias`: added to every
deciding row before anything reads it, so the reference adds it to its logits too) and with
`--min-tokens` / `--ignore-eos` (the end tokens' logits -inf in the rows that decide the reply's
first min_tokens positions), with presence and frequency penalties (from the reply tokens
decided before the step, which the trace gives) and with the repetition penalty (the prompt's
tokens and those), on a
Qwen3-layout (SDAR) and a Qwen2-layout (Fast-dLLM v2) random model, a random model that edits
and the built-in model. Checked:

- the reply ids are those of the same run without --logprobs and --trace (they change nothing);
- every reply token has an entry, its log probability within 2e-3 of the reference's;
- the alternatives: N of them, in descending order, the k-th within 2e-3 of the reference's
  k-th largest, and each id's reference log probability within 2e-3 of the one given for it
  (so ties may come in either order, nothing else may differ);
- greedy: the chosen token is the first alternative;
- with a logit bias: the token banned with -100 never appears, and the biases changed some
  reply (else they were not applied);
- with min_tokens: no end token among the first min_tokens, and some reply changed;
- with penalties, with the repetition penalty: some reply changed.

Every prompt length runs the four plain cases; the others (biases, min_tokens, penalties) run on
the block-long prompt only, which keeps the suite's time in CI in check.

max_tokens ends the reply on a block boundary, so that every position of every block the
engine decoded is in the trace (positions past max_tokens in a last block would be decoded but
not drafted).

  parity_logprobs.py FOGLINE_BIN MODEL_DIR [MODEL_DIR ...]"""
import json
import math
import os
import random
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fogline_ref as ref  # noqa: E402

TOL = 2e-3
TOP = 5
FAILS = []
CHECKS = [0]
EDITS = [0]
BIAS_CHANGED = [0]
MIN_CHANGED = [0]
PEN_CHANGED = [0]
REP_CHANGED = [0]
PENALTIES = ["--presence-penalty", "0.8", "--frequency-penalty", "0.6"]
REPETITION = 1.3


def check(cond, msg):
    CHECKS[0] += 1
    if not cond:
        FAILS.append(msg)
        print("FAIL " + msg)
    return cond


def run(fogline, d, prompt, max_tokens, extra):
    args = [fogline, "generate", "--model", d, "--json", "--threads", "2", "--no-pipeline",
            "--prompt-ids", ",".join(map(str, prompt)), "--max-tokens", str(max_tokens), *extra]
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit("generate failed (%s): %s" % (" ".join(args), out.stderr))
    return json.loads(out.stdout)


@torch.no_grad()
def logsoftmax(model, x, bias, ban, pen=None, rep=None):
    """ban: (rows, end ids): -inf in those rows (min_tokens); rep: (penalty, tokens): vLLM's
    repetition penalty on those tokens' logits, after the bias; pen: {token: penalty}, added
    to every row after those (presence and frequency penalties)"""
    logits, _ = model(torch.tensor([x]))
    lg = logits[0].double()
    for t, b in bias.items():
        lg[:, t] += b
    if rep:
        ids = sorted(rep[1])
        col = lg[:, ids]
        lg[:, ids] = torch.where(col > 0, col / rep[0], col * rep[0])
    for t, b in (pen or {}).items():
        lg[:, t] += b
    rows, ids = ban
    for r in rows:
        if r < lg.shape[0]:
            lg[r, list(ids)] = float("-inf")
    return torch.log_softmax(lg, dim=-1)


def replay(model, cfg, prompt, got, bias, min_tokens=0, eos=(), penalties=(0.0, 0.0), rep=None):
    """What the reference says of each reply position: {reply index: log-softmax row} from the
    forward before the step that last decided it."""
    B = model.c.block_size
    V = cfg["vocab_size"]
    mask = cfg.get("mask_token_id", V - 1)
    shift = 1 if cfg["architectures"][0] == "Fast_dLLM_QwenForCausalLM" else 0
    L = len(prompt)
    state = {}  # block -> its reply positions' tokens (-1 masked), as the last draft left them
    rows = {}
    for d in got["steps"]:
        b = d["block"]
        start = (b + L // B) * B
        frm = max(start, L)
        prev = state.get(b, [-1] * len(d["tokens"]))
        x = list(prompt)  # the prompt, the earlier blocks as their last drafts left them
        for bb in range(b):
            x += state[bb]
        assert len(x) == frm, "the trace's blocks do not follow each other"
        x += [mask if t < 0 else t for t in prev]
        changed = set(d["new"]) | set(d["edited"])
        if changed:
            # the rows that predict a reply position before min_tokens
            ban = [p - shift for p in range(L, L + min_tokens)]
            # the penalties: from the reply tokens decided before this step, counted as float32
            # products (-(presence + frequency * count), as the engine rounds them)
            pen = {}
            if penalties != (0.0, 0.0):
                counts = {}
                for t in [t for bb in range(b) for t in state[bb]] + [t for t in prev if t >= 0]:
                    counts[t] = counts.get(t, 0) + 1
                pres = torch.tensor(penalties[0], dtype=torch.float32)
                freq = torch.tensor(penalties[1], dtype=torch.float32)
                pen = {t: -float(pres + freq * torch.tensor(float(c), dtype=torch.float32))
                       for t, c in counts.items()}
            # the repetition penalty: the prompt's tokens and the reply's decided before
            reps = None
            if rep:
                seen = set(prompt) | {t for bb in range(b) for t in state[bb]}
                reps = (rep, seen | {t for t in prev if t >= 0})
            lsm = logsoftmax(model, x, bias, (ban, eos), pen, reps)
            for i in changed:
                p = frm + i
                rows[p - L] = (lsm[p - shift], d["tokens"][i])
        state[b] = list(d["tokens"])
    return rows


def compare(name, got, rows, greedy):
    ids, lps = got["ids"], got["logprobs"]
    if not check(len(lps) == len(ids), "%s: %d entries for %d ids" % (name, len(lps), len(ids))):
        return
    worst = 0.0
    for i, (t, e) in enumerate(zip(ids, lps)):
        if not check(i in rows, "%s: reply token %d was never decided in the trace" % (name, i)):
            return
        row, drafted = rows[i]
        if not check(drafted == t, "%s: token %d is %d, its last draft says %d" % (name, i, t,
                                                                                  drafted)):
            return
        want = float(row[t])
        worst = max(worst, abs(e["logprob"] - want))
        check(abs(e["logprob"] - want) <= TOL,
              "%s: token %d (%d): logprob %.6f, the reference %.6f" % (name, i, t, e["logprob"],
                                                                       want))
        top = e["top"]
        ref_top = torch.topk(row, TOP).values.tolist()
        check(len(top) == TOP, "%s: token %d has %d alternatives" % (name, i, len(top)))
        for k, (tid, tlp) in enumerate(top):
            check(k == 0 or top[k - 1][1] >= tlp, "%s: token %d: alternatives out of order" % (
                name, i))
            check(abs(tlp - ref_top[k]) <= TOL and abs(float(row[tid]) - tlp) <= TOL,
                  "%s: token %d alternative %d: id %d logprob %.6f; the reference's %d-th is "
                  "%.6f, its logprob for id %d %.6f" % (name, i, k, tid, tlp, k, ref_top[k], tid,
                                                        float(row[tid])))
        if greedy:
            check(top[0][0] == t or abs(top[0][1] - e["logprob"]) <= 1e-6,
                  "%s: greedy token %d is not the first alternative" % (name, i))
    print("ok   %s: %d tokens, worst logprob difference %.2e" % (name, len(ids), worst))


def main():
    torch.set_num_threads(2)
    fogline = sys.argv[1]
    for d in sys.argv[2:]:
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
        m = ref.load_model(d)
        B = m.c.block_size
        V = cfg["vocab_size"]
        rng = random.Random(13)
        eos = cfg["eos_token_id"]
        eos = set(eos if isinstance(eos, list) else [eos])
        for n in (5, B, 2 * B + 3):
            prompt = [t for t in (rng.randrange(0, V - 3) for _ in range(3 * n)) if t not in eos][:n]
            max_tokens = 3 * B - n % B  # the reply ends on a block boundary
            unbiased = {}
            cases = [(label, extra, greedy, False) for label, extra, greedy in (
                    ("greedy, one per step", ["--temperature", "0", "--policy", "sequential"], True),
                    ("greedy, threshold 0.3", ["--temperature", "0", "--policy", "threshold",
                                               "--threshold", "0.3"], True),
                    ("sampled at 0.9", ["--temperature", "0.9", "--seed", "5", "--policy",
                                        "threshold", "--threshold", "0.5"], False),
                    ("token editing", ["--temperature", "0", "--policy", "threshold",
                                       "--threshold", "0.3", "--edit-threshold", "0.05"], False))]
            thr = cases[1][1]
            rp = ["--repetition-penalty", str(REPETITION)]
            if n == B:
                cases += [(label + ", logit bias", extra, greedy, True)
                          for label, extra, greedy, _ in cases[1:]]
                cases += [("greedy, threshold 0.3, min_tokens %d" % (max_tokens // 2),
                           thr + ["--min-tokens", str(max_tokens // 2)], True, False),
                          ("greedy, threshold 0.3, ignore_eos", thr + ["--ignore-eos"], True,
                           False),
                          ("greedy, threshold 0.3, penalties", thr + PENALTIES, True, False),
                          ("sampled at 0.9, penalties", cases[2][1] + PENALTIES, False, False),
                          ("greedy, threshold 0.3, repetition", thr + rp, True, False),
                          ("sampled at 0.9, repetition", cases[2][1] + rp, False, False)]
            for label, extra, greedy, biased in cases:
                name = "%s, prompt %d, %s" % (os.path.basename(d.rstrip("/")), n, label)
                bias = {}
                min_tokens = (max_tokens if label.endswith("ignore_eos") else max_tokens // 2
                              if "min_tokens" in label else 0)
                if biased:  # ban the unbiased reply's most frequent token, lift three others
                    ids = unbiased[label[:-len(", logit bias")]]
                    bias[max(set(ids), key=lambda t: (ids.count(t), -t))] = -100.0
                    for b in (4.0, 2.5, 1.5):
                        t = rng.randrange(0, V - 3)
                        while t in eos or t in bias:
                            t = rng.randrange(0, V - 3)
                        bias[t] = b
                    extra = extra + ["--logit-bias",
                                     ",".join("%d:%g" % (t, b) for t, b in bias.items())]
                plain = run(fogline, d, prompt, max_tokens, extra)
                got = run(fogline, d, prompt, max_tokens, extra + ["--logprobs", str(TOP),
                                                                   "--trace"])
                check(got["ids"] == plain["ids"], "%s: --logprobs changed the reply" % name)
                pens = (0.8, 0.6) if label.endswith("penalties") else (0.0, 0.0)
                rep = REPETITION if label.endswith("repetition") else None
                compare(name, got, replay(m, cfg, prompt, got, bias, min_tokens, eos, pens, rep),
                        greedy)
                EDITS[0] += sum(len(st["edited"]) for st in got["steps"])
                if rep:
                    REP_CHANGED[0] += plain["ids"] != unbiased[label[:-len(", repetition")]]
                    continue
                if label.endswith("penalties"):
                    base = unbiased[label[:-len(", penalties")]]
                    PEN_CHANGED[0] += plain["ids"] != base
                    continue
                if min_tokens:
                    base = unbiased["greedy, threshold 0.3"]
                    check(not eos & set(plain["ids"][:min_tokens]),
                          "%s: an end token before %d: %s" % (name, min_tokens, plain["ids"]))
                    check(len(plain["ids"]) >= min_tokens,
                          "%s: %d tokens" % (name, len(plain["ids"])))
                    MIN_CHANGED[0] += plain["ids"] != base
                    continue
                if not biased:
                    unbiased[label] = plain["ids"]
                    continue
                banned = [t for t, b in bias.items() if b == -100.0][0]
                check(banned not in plain["ids"], "%s: the banned token %d is in the reply" % (
                    name, banned))
                BIAS_CHANGED[0] += plain["ids"] != unbiased[label[:-len(", logit bias")]]
    # the editing path was taken: some model of the run rewrites decided tokens
    check(EDITS[0] > 0, "no token was edited in any run: the edit path went unchecked")
    check(BIAS_CHANGED[0] > 0, "no logit bias changed a reply: the biases went unapplied")
    print("%d biased replies differ from the unbiased ones" % BIAS_CHANGED[0])
    check(MIN_CHANGED[0] > 0, "min_tokens / ignore_eos changed no reply: the ban went unchecked")
    print("%d replies changed by min_tokens or ignore_eos" % MIN_CHANGED[0])
    check(PEN_CHANGED[0] > 0, "the penalties changed no reply: they went unchecked")
    print("%d replies changed by the presence and frequency penalties" % PEN_CHANGED[0])
    check(REP_CHANGED[0] > 0, "the repetition penalty changed no reply: it went unchecked")
    print("%d replies changed by the repetition penalty" % REP_CHANGED[0])
    print("%d edits replayed" % EDITS[0])
    print("%d checks, %d failed" % (CHECKS[0], len(FAILS)))
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
