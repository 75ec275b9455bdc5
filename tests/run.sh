#!/usr/bin/env bash
# Sets up (tests/setup.sh), builds fogline twice (release, and ASan+UBSan) and runs every
# test: ctest in both builds. The sanitizer build runs the unit and integration labels only:
# not "python" (tests that run only Python, e.g. train.*: nothing there for ASan to check),
# though ctest still runs the Python fixtures (FIXTURES_SETUP) its C tests need. Labels and
# how to run one test: tests/README.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash tests/setup.sh
jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$jobs"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DFL_SANITIZE=ON
cmake --build build-asan -j"$jobs"
# every label of the Release build, "image" included: docker/build-test.sh builds the CPU image
# with podman and runs the server and topology suites against it (docs/deploy.md)
ctest --test-dir build --output-on-failure
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -L 'unit|integration'
# libFuzzer targets (clang, ASan+UBSan): each briefly over its corpus (tests/fuzz, docs/fuzzing.md)
bash tests/fuzz/run_ci.sh
