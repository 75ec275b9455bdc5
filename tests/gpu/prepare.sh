#!/usr/bin/env bash
# tests/gpu/prepare.sh: run HERE (the Debian development machine, which reaches Debian's
# package registry) before the device call. The GPU machine reaches no registry; this unpacks
# Debian 12 packages into .gpu-deps/root, adds .gpu-deps to .git/info/exclude, and the device
# call carries it (~31 MB with the prebuilt programs, ~17 MB without):
#
#   bash tests/gpu/prepare.sh
#   run(command="bash tests/gpu/run.sh", carry=[".gpu-deps"], timeout_s=560)
#
# - jansson, pcre2, utf8proc (-dev: headers and static libraries), which the engine needs: the
#   test programs then need nothing from it at run time, and Debian 12's objects link on the
#   GPU machine's newer glibc (Ubuntu 24.04).
# - The server's libraries for `fogline serve --device cuda` (run.sh's serve stage):
#   libwebsockets, its libuv event plugin, libuv and hiredis as shared libraries (lws loads the
#   plugin at run time from /usr/lib/x86_64-linux-gnu, and a static lws cannot use it; serve.sh
#   puts it there and the rest on LD_LIBRARY_PATH), with the headers to build against
#   (openssl's too: lws's header includes them) and libcap.
# - redis-server (redis-tools' binary) and the two libraries Ubuntu lacks (lzf, jemalloc), for
#   the serve stage's Redis path.
# - Two tiny mixture-of-experts models (LLaDA2, SDAR-MoE) for run.sh's paritymoe stage.
# - When nvcc is here, run.sh's programs built for sm_90 (prebuilt.tar.gz), stamped with the
#   sources' hash (prebuilt.sources): run prepare.sh again after any change to the sources.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dst="$root/.gpu-deps"
pkgs=(libjansson-dev libpcre2-dev libutf8proc-dev
      libwebsockets17 libwebsockets-evlib-uv libwebsockets-dev libuv1 libuv1-dev
      libhiredis0.14 libhiredis-dev libssl-dev libcap2
      redis-tools liblzf1 libjemalloc2 libatomic1)
rm -rf "$dst"
mkdir -p "$dst/debs" "$dst/root"
if ! (cd "$dst/debs" && apt-get download "${pkgs[@]}" >/dev/null 2>&1); then
    echo "prepare: apt-get download failed; running apt-get update once" >&2
    apt-get update >/dev/null
    (cd "$dst/debs" && apt-get download "${pkgs[@]}")
fi
for d in "$dst"/debs/*.deb; do
    dpkg-deb -x "$d" "$dst/root"
done
rm -rf "$dst/debs" "$dst/root/usr/share"
# /lib (libcap2's home) into /usr/lib: one library folder, as on a merged-/usr system
if [ -d "$dst/root/lib" ]; then
    cp -a "$dst/root/lib/." "$dst/root/usr/lib/"
    rm -rf "$dst/root/lib"
fi
# what is never used there: the server links the shared libraries, which need the system's
# libssl/libcrypto (the -dev package's links to them would dangle), and only redis-server
# and redis-cli are run
lib="$dst/root/usr/lib/x86_64-linux-gnu"
rm -f "$lib"/libwebsockets.a "$lib"/libuv_a.a "$lib"/libhiredis.a "$lib"/libssl.* "$lib"/libcrypto.* \
      "$dst/root/usr/bin/redis-benchmark"
for f in libjansson.a libpcre2-8.a libutf8proc.a libwebsockets.so.17 libwebsockets-evlib_uv.so \
         libuv.so.1 libhiredis.so.0.14 libcap.so.2 libjemalloc.so.2 liblzf.so.1; do
    test -e "$lib/$f" || { echo "prepare: $f missing" >&2; exit 1; }
done
test -x "$dst/root/usr/bin/redis-check-rdb" || { echo "prepare: redis-check-rdb (redis-server) missing" >&2; exit 1; }
# Tiny random mixture-of-experts models for run.sh's paritymoe stage, made here because the
# generator needs PyTorch (~4 MB): LLaDA2 (grouped sigmoid router, shared expert, a dense
# first layer, fused q|k|v, partial rotary) and SDAR-MoE (softmax top-k), small vocabularies.
mm="$dst/moe-models"
mkdir -p "$mm"
/usr/bin/python3 "$root/tests/reference/make_moe_model.py" "$mm/llada2-tiny" --family llada2 --seed 7 --vocab 2048 >/dev/null
/usr/bin/python3 "$root/tests/reference/make_moe_model.py" "$mm/sdarmoe-tiny" --family sdar-moe --seed 8 --vocab 1024 >/dev/null
test -s "$mm/llada2-tiny/config.json" && test -s "$mm/sdarmoe-tiny/config.json" ||
    { echo "prepare: the MoE models were not written" >&2; exit 1; }
# The test programs, built here for sm_90 when nvcc is here (FL_GPU_PREBUILT=0: not), so that
# the device's time goes to the checks: run.sh takes them when the working tree's sources
# hash the same (tests/gpu/src_hash.sh), and builds there when not, or when they do not run.
# Configured through the symlink /tmp/fogline-gpu-src (the paths the programs keep: the
# default model, the web folder, the prompts; run.sh makes the same link there), with the
# cblas stand-in (the GPU machine has no OpenBLAS) and .gpu-deps' static libraries; stripped
# and compressed (~14 MB).
nvcc_bin=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [ "${FL_GPU_PREBUILT:-1}" = 1 ] && [ -x "$nvcc_bin" ]; then
    src=/tmp/fogline-gpu-src
    ln -sfn "$root" "$src"
    pbd=$(mktemp -d /tmp/fogline-prebuilt.XXXXXX)
    if ! { cmake -S "$src/tests/gpu" -B "$pbd" -DCMAKE_BUILD_TYPE=Release \
            -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER="$nvcc_bin" -DFL_BLAS_SHIM=ON \
            -DFL_DEPS_ROOT="$src/.gpu-deps/root" && cmake --build "$pbd" -j "$(nproc)"; } \
            >"$pbd.log" 2>&1; then
        tail -n 20 "$pbd.log" >&2
        echo "prepare: the prebuilt programs did not build (log: $pbd.log)" >&2
        exit 1
    fi
    mkdir -p "$dst/prebuilt"
    for b in gpu_parity gpu_bench gpu_sched gpu_batch fogline fogline_bench make_model; do
        test -x "$pbd/$b" || { echo "prepare: $b was not built (log: $pbd.log)" >&2; exit 1; }
        strip -o "$dst/prebuilt/$b" "$pbd/$b"
    done
    tar -C "$dst/prebuilt" -czf "$dst/prebuilt.tar.gz" .
    rm -rf "$dst/prebuilt" "$pbd" "$pbd.log"
    bash "$root/tests/gpu/src_hash.sh" >"$dst/prebuilt.sources"
    echo "prepare: test programs prebuilt for sm_90 with $("$nvcc_bin" --version | tail -n 1)"
fi
exclude=$(cd "$root" && git rev-parse --git-path info/exclude)
case $exclude in /*) ;; *) exclude="$root/$exclude" ;; esac
grep -qxF '/.gpu-deps/' "$exclude" 2>/dev/null || echo '/.gpu-deps/' >>"$exclude"
echo "prepare: $(du -sh "$dst" | cut -f1) in $dst (carry it: carry=[\".gpu-deps\"])"
