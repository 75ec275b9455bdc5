#!/usr/bin/python3
"""Pool several `eval.py --json-out` files (samples of the same model): exact match per policy
over all their dialogues, and each policy's paired difference from the first policy with a 95%
confidence interval (normal approximation over the per-dialogue differences, which are -1, 0 or
1: both policies decode the same dialogues, so the pairing removes the between-dialogue spread).

    python3 engine/train/pool_eval.py s1.json s2.json s3.json ...
"""
import json
import math
import sys


def main():
    files = sys.argv[1:]
    if not files:
        sys.exit("usage: pool_eval.py EVAL_JSON...")
    per = {}
    order = []
    for fn in files:
        try:
            with open(fn) as f:
                res = json.load(f)
        except (OSError, ValueError) as e:
            sys.exit("%s: %s" % (fn, e))
        if not isinstance(res, dict) or not res:
            sys.exit("%s: not the output of eval.py --json-out" % fn)
        for pol, r in res.items():
            if not isinstance(r, dict) or "exact" not in r:
                sys.exit("%s: no per-dialogue results for %s (written by an older eval.py)" % (
                    fn, pol))
        if not order:
            order = list(res)
            per = {pol: [] for pol in order}
        if set(res) != set(order):
            sys.exit("%s: policies %s, %s has %s" % (fn, sorted(res), files[0], sorted(order)))
        n = {len(r["exact"]) for r in res.values()}
        if len(n) != 1:
            sys.exit("%s: the policies decoded different numbers of dialogues" % fn)
        for pol, r in res.items():
            per[pol] += r["exact"]
    n = len(per[order[0]])
    print("%d dialogues from %d files" % (n, len(files)))
    for pol in order:
        print("  %-10s exact match %.2f%% (%d)" % (pol, 100.0 * sum(per[pol]) / n, sum(per[pol])))
    base = order[0]
    for pol in order[1:]:
        d = [a - b for a, b in zip(per[pol], per[base])]
        m = sum(d) / n
        sd = math.sqrt(sum((x - m) ** 2 for x in d) / max(1, n - 1))
        h = 1.96 * sd / math.sqrt(n)
        print("  %s - %s: %+.2f points, 95%% CI [%+.2f, %+.2f]; %d dialogues only %s gets "
              "right, %d only %s" % (pol, base, 100 * m, 100 * (m - h), 100 * (m + h),
                                     d.count(1), pol, d.count(-1), base))


if __name__ == "__main__":
    main()
