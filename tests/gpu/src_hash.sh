#!/usr/bin/env bash
# tests/gpu/src_hash.sh: one SHA-256 over every file the GPU build (tests/gpu/CMakeLists.txt)
# compiles or reads: cuda/, engine/, server/ and tests/gpu/ sources and CMake files, by path
# and content. prepare.sh stamps its prebuilt programs with it; run.sh uses them only when the
# working tree gives the same hash.
#
#   bash tests/gpu/src_hash.sh        (from anywhere; prints the hash)
set -euo pipefail
cd "$(dirname "$0")/../.."
find cuda engine server tests/gpu -type f \( -name '*.[ch]' -o -name '*.cu' -o -name '*.cuh' \
    -o -name '*.cc' -o -name '*.hh' -o -name '*.cmake' -o -name CMakeLists.txt \) -print0 |
    LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1
