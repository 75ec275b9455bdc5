#!/usr/bin/env python3
"""The layout rules of docs/architecture.md ("Layout"), checked on the source tree:

1. engine/ depends on nothing above it: every `#include "..."` in engine/ resolves inside
   engine/, and engine/CMakeLists.txt links no fl_cuda or server target.
2. A module's private headers are included only inside its folder: engine/cpu/ (public:
   cpu.h), engine/tokenizer/ (public: tokenizer.h), cuda/ (public: fl_cuda.h). White-box unit
   tests of a module (and tests/bench/qkernels_ab.c, which links two builds of quant.c,
   tests/bench/lse_rows_ab.c, which sums logits rows as the CPU backend's head does, and
   tests/gpu/gpu_sched.c, which replays a scheduler's batches through the CUDA backend's own
   graph key and cache) may include its private header; they are listed in WHITE_BOX.
3. cuda/ includes only cuda/ and engine/'s public headers.
4. Product Python (engine/train) imports nothing from tests/: no path into tests/ is put on
   sys.path (tests may import engine/train, not the reverse).

Prints one line per violation and exits 1 if there is any.
Usage: layout.py [ROOT]   (default: the repository holding this file)"""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(__file__), "..", ".."))
SRC_EXT = (".c", ".h", ".cu", ".cuh")
SCAN = ["engine", "server", "cuda", "tests"]
# folder -> its public headers; every other header in the folder is private to it
MODULES = {"engine/cpu": {"cpu.h"}, "engine/tokenizer": {"tokenizer.h"},
           "cuda": {"fl_cuda.h"}}
# white-box unit tests, and the kernel benchmark that links two builds of a private source:
# file -> private headers it may include
WHITE_BOX = {
    "tests/bench/lse_rows_ab.c": {"engine/cpu/kernels.h"},
    "tests/bench/qkernels_ab.c": {"engine/cpu/kernels.h", "engine/cpu/quant.h"},
    "tests/gpu/gpu_sched.c": {"cuda/flc_shape.h"},
    "tests/unit/test_flc_shape.c": {"cuda/flc_shape.h"},
    "tests/unit/test_kernels.c": {"engine/cpu/kernels.h"},
    "tests/unit/test_quant.c": {"engine/cpu/kernels.h", "engine/cpu/quant.h"},
    "tests/unit/test_threadpool.c": {"engine/cpu/threadpool.h"},
    "tests/unit/test_tokenizer.c": {"engine/tokenizer/tok_internal.h"},
    "tests/unit/test_tokenizer_errors.c": {"engine/tokenizer/tok_internal.h"},
    "tests/unit/test_tokenizer_utf8.c": {"engine/tokenizer/tok_internal.h"},
}
INC = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def rel(p):
    return os.path.relpath(p, ROOT).replace(os.sep, "/")


def sources():
    for top in SCAN:
        for d, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [x for x in dirs if x not in ("node_modules", "corpus", "artifacts")]
            for f in files:
                if f.endswith(SRC_EXT):
                    yield os.path.join(d, f)


def resolve(src, name):
    """The file an include names, as the build's include paths find it (its own folder
    first, then the include roots), or None for a system or generated header."""
    for base in (os.path.dirname(src), os.path.join(ROOT, "engine"),
                 os.path.join(ROOT, "server"), os.path.join(ROOT, "cuda")):
        p = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(p):
            return p
    return None


def module_of(path):
    d = os.path.dirname(rel(path))
    return d if d in MODULES else None


def main():
    bad = []
    for src in sources():
        r = rel(src)
        with open(src, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for name in INC.findall(text):
            tgt = resolve(src, name)
            if tgt is None:
                continue
            t = rel(tgt)
            if r.startswith("engine/") and not t.startswith("engine/"):
                bad.append(f"{r}: includes {t}: engine/ must not depend on {t.split('/')[0]}/")
            if r.startswith("cuda/") and not (t.startswith("cuda/") or t.startswith("engine/")):
                bad.append(f"{r}: includes {t}: cuda/ depends only on engine/")
            mod = module_of(tgt)
            if mod and os.path.basename(t) not in MODULES[mod]:
                if os.path.dirname(r) != mod and t not in WHITE_BOX.get(r, ()):
                    bad.append(f"{r}: includes {t}, private to {mod}/ (public: "
                               f"{', '.join(sorted(MODULES[mod]))})")
    for d, _, files in os.walk(os.path.join(ROOT, "engine")):
        for f in files:
            if f.endswith(".py"):
                p = os.path.join(d, f)
                with open(p, encoding="utf-8", errors="replace") as fh:
                    for n, line in enumerate(fh, 1):
                        if re.search(r"sys\.path\.(insert|append)\(.*tests", line) or \
                                re.match(r"\s*(from|import)\s+tests\b", line):
                            bad.append(f"{rel(p)}:{n}: reaches into tests/: product code "
                                       "must not depend on the tests")
    with open(os.path.join(ROOT, "engine", "CMakeLists.txt"), encoding="utf-8") as f:
        cm = re.sub(r"#.*", "", f.read())
    for target in ("fl_cuda", "fl_backends", "fogline"):
        if re.search(r"\b%s\b" % target, cm):
            bad.append(f"engine/CMakeLists.txt: names {target}: the engine links nothing above it")
    for b in bad:
        print("layout:", b)
    print(f"layout: {len(bad)} violation(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
