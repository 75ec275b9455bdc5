#!/usr/bin/env python3
"""The benchmark's closing table for tests/gpu/run.sh (standard library only).

  summary.py BENCH_JSON [TORCH_JSON]

Goals (the CUDA backend's issue): at batch 1 a step within 1.5x of the bandwidth floor
(weights streamed per step / the measured device copy bandwidth); at least 2x faster than
PyTorch eager on the same weights. Each goal prints PASS or FAIL with its numbers; a
missing measurement prints SKIP. Exit 0 when no goal failed, 3 when one did (any other
status: this script itself failed, which tests/gpu/run.sh tells apart)."""
import json
import sys


def load(path):
    try:
        with open(path) as f:
            return json.loads(f.read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return None


def main():
    b = load(sys.argv[1]) if len(sys.argv) > 1 else None
    t = load(sys.argv[2]) if len(sys.argv) > 2 else None
    if not b:
        print("SKIP goals: no benchmark result")
        return 1
    torch_ms = {}
    if t and "runs" in t:
        torch_ms = {r["batch"]: r["median_ms"] for r in t["runs"]}
    floor = b.get("floor_ms") or float("nan")
    print("model %s: %d layers, hidden %d, vocab %d, block %d, ctx %d; weights/step %.2f GB; "
          "copy bandwidth %.0f GB/s; floor %.3f ms" % (
              b["model"], b["layers"], b["hidden"], b["vocab"], b["block"], b["ctx"],
              b["stream_bytes"] / 1e9, b["copy_bw"] / 1e9, floor))
    if t:
        print("PyTorch: %s on %s" % (t.get("torch", "?"), t.get("device", t.get("error", "?"))))
    hdr = "%-36s %5s %9s %11s %8s %10s %8s" % ("variant", "batch", "step ms", "tokens/s",
                                               "x floor", "torch ms", "speedup")
    print(hdr)
    print("-" * len(hdr))
    failed = 0
    lines = []
    for r in b["runs"]:
        if not r["ok"]:
            print("%-36s %5d  FAILED" % (r["variant"], r["batch"]))
            failed += 1
            continue
        tm = torch_ms.get(r["batch"]) if r["variant"].endswith("(default)") else None
        sp = tm / r["median_ms"] if tm else None
        # a variant's own floor: q8 streams fewer bytes than the bf16 variants
        own = r.get("stream_bytes", b["stream_bytes"]) / b["copy_bw"] * 1e3 if b["copy_bw"] else floor
        print("%-36s %5d %9.3f %11.0f %8.2f %10s %8s" % (
            r["variant"], r["batch"], r["median_ms"], r["tokens_s"], r["median_ms"] / own,
            "%.3f" % tm if tm else "-", "%.2fx" % sp if sp else "-"))
        # the opt-in paths written without a GPU (docs/cuda.md): each against the default
        if any(w in r["variant"] for w in ("few-row", "programmatic", "tc matmul", "tensor-core matmul")):
            de = [x for x in b["runs"] if x["ok"] and x["batch"] == r["batch"] and x["variant"].endswith("(default)")]
            if de:
                lines.append("INFO %s at batch %d: %.3f ms = %.2fx of the floor, against %.3f ms "
                             "by default (%.2fx the default's speed)" % (
                                 r["variant"], r["batch"], r["median_ms"], r["median_ms"] / own,
                                 de[0]["median_ms"], de[0]["median_ms"] / r["median_ms"]))
        if "q8" in r["variant"] and r["batch"] == 1:
            bf = [x for x in b["runs"] if x["ok"] and x["batch"] == 1 and x["variant"].endswith("(default)")]
            lines.append("INFO %s at batch 1: %.3f ms = %.2fx of its floor (%.3f ms, %.2f GB)%s" % (
                r["variant"], r["median_ms"], r["median_ms"] / own, own,
                r.get("stream_bytes", 0) / 1e9,
                "; %.2fx the bf16 step's speed" % (bf[0]["median_ms"] / r["median_ms"]) if bf else ""))
        if r["variant"].endswith("(default)"):
            if r["batch"] == 1:
                ok = r["median_ms"] <= 1.5 * floor
                failed += not ok
                lines.append("%s goal batch-1 step within 1.5x of the bandwidth floor: %.3f ms = "
                             "%.2fx of %.3f ms" % ("PASS" if ok else "FAIL", r["median_ms"],
                                                    r["median_ms"] / floor, floor))
            if sp is not None:
                ok = sp >= 2.0
                failed += not ok
                lines.append("%s goal >= 2x PyTorch eager at batch %d: %.2fx (%.3f vs %.3f ms)" % (
                    "PASS" if ok else "FAIL", r["batch"], sp, r["median_ms"], tm))
            elif r["batch"] in (1, 64):
                lines.append("SKIP goal >= 2x PyTorch eager at batch %d: no PyTorch measurement"
                             % r["batch"])
    # the q8 GEMM (FL_CUDA_Q8_GEMM=1) against cuBLAS on the widened copy, at every batch
    for g in [x for x in b["runs"] if x["ok"] and x["variant"] == "graphs, q8 weights, q8 GEMM"]:
        q = [x for x in b["runs"] if x["ok"] and x["batch"] == g["batch"] and x["variant"] == "graphs, q8 weights"]
        if q:
            lines.append("INFO q8 GEMM at batch %d: %.3f ms, against %.3f ms with cuBLAS on the "
                         "bf16 copy (%.2fx)" % (g["batch"], g["median_ms"], q[0]["median_ms"],
                                                q[0]["median_ms"] / g["median_ms"]))
    # the RMSNorms inside the tensor-core products against their own kernels, batch 1
    ins = [x for x in b["runs"] if x["ok"] and x["batch"] == 1 and x["variant"] == "graphs, tensor-core matmul"]
    sep = [x for x in b["runs"] if x["ok"] and x["batch"] == 1 and x["variant"] == "graphs, tc matmul, norms separate"]
    if ins and sep:
        lines.append("INFO RMSNorms inside the tensor-core products at batch 1: %.3f ms, against "
                     "%.3f ms with their own kernels (%.2fx)" % (
                         ins[0]["median_ms"], sep[0]["median_ms"],
                         sep[0]["median_ms"] / ins[0]["median_ms"]))
    for line in lines:
        print(line)
    return 3 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
