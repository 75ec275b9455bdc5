#!/usr/bin/env bash
# tests/gpu/build_check.sh: the GPU machine's own build and its serve stage, on this machine
# (ctest gpu.script): tests/gpu/CMakeLists.txt without CUDA (the engine, the server and
# fogline_bench from their own source lists: they once missed server/constraint.c, which only
# a GPU machine found), then tests/gpu/serve.sh with --device cpu: the server, a WebSocket
# chat, the OpenAI API, 16 clients for 48 chats, Redis when redis-server is there, SIGTERM.
#
#   bash tests/gpu/build_check.sh BUILD_DIR
set -u -o pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bd=${1:?usage: build_check.sh BUILD_DIR}
rm -rf "$bd"
if ! cmake -S "$root/tests/gpu" -B "$bd" -DWITH_CUDA=OFF -DCMAKE_BUILD_TYPE=Release >"$bd.log" 2>&1 ||
    ! cmake --build "$bd" -j "$(nproc)" >>"$bd.log" 2>&1; then
    echo "build_check: FAIL: the GPU build did not build; its log ends:"
    tail -n 30 "$bd.log"
    exit 1
fi
for t in fogline fogline_bench make_model; do
    [ -x "$bd/$t" ] || { echo "build_check: FAIL: $t was not built"; exit 1; }
done
echo "build_check: built $(grep -c 'Building C' "$bd.log") C files; the serve stage on the CPU:"
bash "$root/tests/gpu/serve.sh" "$bd/fogline" cpu "" 16 48
