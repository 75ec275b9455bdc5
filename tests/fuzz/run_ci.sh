#!/usr/bin/env bash
# The fuzz part of the test flow: a clang build in build-fuzz (libFuzzer + ASan + UBSan) and
# `ctest -L fuzz`, which runs each target over its corpus for 15 s (tests/fuzz.cmake).
# FL_FUZZ=ON is explicit, so a missing clang or libFuzzer runtime fails the configure step
# instead of the fuzz tests silently vanishing. FUZZ_CC picks another clang (clang-14).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
CC=${FUZZ_CC:-clang} cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFL_FUZZ=ON
cmake --build build-fuzz --target fuzz_all -j"$(nproc)"
ctest --test-dir build-fuzz --output-on-failure -L fuzz
