"""Evaluates a fogline-helpdesk model directory on held-out dialogues (datagen's test split:
slot values and user phrasings never seen in training): exact match of the final reply and slot
accuracy for the three decoding policies of decode.py, with tokens per forward, as one table.

--split test (default): held-out phrasings made of words the training phrasings of the same
request use; --split lex: v2's held-out phrasings, whose key words never occur in training in
that sense (see datagen.TEMPLATES). Both use the held-out slot values.

Slot accuracy: the slot values in the reference reply (order numbers, amounts, emails, products,
addresses, names, dates, weekdays) that the generated reply also contains, over all reference
slots.

Also writes the reference's greedy one-token-per-step outputs for a few dozen held-out prompts
(--greedy-out), for the C engine's token-for-token test.

--system: the same dialogues after a held-out shop system prompt (v4 trains with them; the
reply must not change).

Usage: python3 eval.py [MODEL_DIR] [--n 300] [--system]
                      [--greedy-out tests/data/helpdesk_greedy.json]
"""
import argparse
import collections
import json
import os
import random
import re
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import datagen  # noqa: E402
import decode  # noqa: E402

_PRODUCTS = "|".join(sorted((re.escape(p) for p in datagen.PRODUCTS), key=len, reverse=True))
_SLOT_RES = [
    ("order", re.compile(r"\b\d{5}\b")),
    ("amount", re.compile(r"\$\d+\.\d\d")),
    ("email", re.compile(r"[\w.]+@[\w.-]+\.\w+")),
    ("address", re.compile(r"\b\d+ [A-Z]\w* (?:%s)\b" % "|".join(datagen.SUFFIX))),
    ("product", re.compile(r"\b(?:(?:%s) )?(?:%s)\b" % ("|".join(datagen.MODS), _PRODUCTS))),
    ("date", re.compile(r"\b(?:%s) \d+\b" % "|".join(datagen.MONTHS))),
    ("day", re.compile(r"\b(?:%s)\b" % "|".join(datagen.DAYS))),
    ("name", re.compile(r"\b(?:%s)\b" % "|".join(datagen.FIRST))),
]


def slots(text):
    out = []
    for kind, rx in _SLOT_RES:
        for m in rx.finditer(text):
            out.append((kind, m.group(0)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir", nargs="?",
                    default=os.path.join(HERE, "..", "models", "fogline-helpdesk"))
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--split", default="test", choices=["test", "lex"])
    ap.add_argument("--threshold", type=float, default=0.9,
                    help="the confidence to unmask of the threshold and pipeline policies "
                    "(0.9 in the model card's table)")
    ap.add_argument("--policies", default="top1,threshold,pipeline")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--greedy-out", default="")
    ap.add_argument("--greedy-n", type=int, default=32)
    ap.add_argument("--json-out", default="")
    ap.add_argument("--show-errors", type=int, default=8)
    ap.add_argument("--system", action="store_true", help="put a held-out shop system prompt "
                    "(datagen.system_prompt: openings and rules never in training) before each "
                    "of the same dialogues")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    chat = decode.Chat(a.model_dir)
    data = datagen.generate(a.split, a.n, a.seed)
    if a.system:
        sr = random.Random("system-eval-%d" % a.seed)
        data = [datagen.with_system(a.split, sr, d) for d in data]
    rows = []
    results = {}
    for pname in a.policies.split(","):
        pol = decode.Policy(pname, threshold=a.threshold)
        em = 0
        s_ok = s_all = 0
        outs = fw = 0
        by_turns = collections.defaultdict(lambda: [0, 0])
        errors = []
        exact = []  # per dialogue, for paired comparisons (pool_eval.py)
        t0 = time.time()
        gens = []
        for d in data:
            msgs, ref = d[:-1], d[-1]["content"]
            r = chat.reply(msgs, pol, a.max_new_tokens)
            gens.append(r)
            hyp = r["text"]
            ok = hyp == ref
            em += ok
            exact.append(int(ok))
            nt = len(d) // 2
            by_turns[nt][0] += ok
            by_turns[nt][1] += 1
            rs = slots(ref)
            hs = collections.Counter(slots(hyp))
            for s in rs:
                s_all += 1
                if hs[s] > 0:
                    hs[s] -= 1
                    s_ok += 1
            outs += len(r["ids"]) + (1 if r["ended"] else 0)
            fw += r["forwards"]
            if not ok and len(errors) < a.show_errors:
                errors.append((msgs[-1]["content"], ref, hyp))
        dt = time.time() - t0
        res = {"policy": pname, "exact_match": em / len(data), "slot_acc": s_ok / max(1, s_all),
               "tpf": outs / max(1, fw), "forwards": fw, "tokens": outs, "n": len(data),
               "slots": s_all, "seconds": round(dt, 1),
               "em_by_turns": {k: v[0] / v[1] for k, v in sorted(by_turns.items())},
               "exact": exact}
        results[pname] = res
        rows.append(res)
        print("%-10s EM %.1f%%  slot %.1f%%  TPF %.2f  (%d forwards, %.0f s)  EM by turns %s" % (
            pname, 100 * res["exact_match"], 100 * res["slot_acc"], res["tpf"], fw, dt,
            {k: round(100 * v, 1) for k, v in res["em_by_turns"].items()}), flush=True)
        for u, ref, hyp in errors:
            print("   user: %s\n    ref: %s\n    got: %s" % (u, ref, hyp))
        if pname == "top1" and a.greedy_out:
            cases = []
            for d, r in list(zip(data, gens))[:a.greedy_n]:
                msgs = d[:-1]
                cases.append({"messages": msgs, "prompt_ids": chat.prompt_ids(msgs),
                              "output_ids": r["tokens"], "reply_ids": r["ids"],
                              "text": r["text"], "forwards": r["forwards"]})
            g = {"model": "engine/models/fogline-helpdesk", "policy": "top1 (one token per step, "
                 "greedy by confidence, ties to the lowest position)", "block_size":
                 chat.model.c.block_size, "mask_token_id": chat.mask_id,
                 "end_token_ids": chat.end_ids, "max_new_tokens": a.max_new_tokens,
                 "note": "output_ids: every token decided after the prompt, through the end of "
                         "the block holding the first end token; generated by "
                         "engine/train/eval.py with fogline_ref (BF16 weights upcast to F32)",
                 "cases": cases}
            os.makedirs(os.path.dirname(os.path.abspath(a.greedy_out)), exist_ok=True)
            with open(a.greedy_out, "w") as f:
                json.dump(g, f, separators=(",", ":"))
                f.write("\n")
    print()
    print("| policy | exact match | slot accuracy | TPF |")
    print("|---|---|---|---|")
    for r in rows:
        print("| %s | %.1f%% | %.1f%% | %.2f |" % (r["policy"], 100 * r["exact_match"],
                                                 100 * r["slot_acc"], r["tpf"]))
    print("(%d held-out dialogues, split %s%s, %d reference slots)" % (
        len(data), a.split, ", held-out system prompts" if a.system else "", rows[0]["slots"]))
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(results, f, separators=(",", ":"))
            f.write("\n")


if __name__ == "__main__":
    main()
