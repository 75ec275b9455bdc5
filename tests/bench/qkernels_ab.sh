#!/bin/bash
# qkernels_ab.sh: the q8/q4 matmul kernels of two builds of engine/cpu/quant.c, side by side
# in one process (qkernels_ab.c says how they take turns). A is quant.c at a git revision
# (default HEAD), B the working tree's; each may add -D overrides (FL_QPF, FL_QPF2,
# FL_QPF_HINT) and cap its kernels' level (--a-simd/--b-simd avx512|avx2|plain, as FL_SIMD
# does). Needs the Release build of the engine (build/engine/libfl_engine.a).
#
#   tests/bench/qkernels_ab.sh [--a-rev REV] [--a-flags "-D..."] [--b-flags "-D..."] \
#       [--a-simd CAP] [--b-simd CAP] [--build DIR] [rows [passes [q4|q8|head]]]
#
# It prints A, B and R (a read of the same bytes without arithmetic) per matrix; e.g. the
# working tree against the commit before it, q4 at 4 rows:
#   tests/bench/qkernels_ab.sh --a-rev HEAD~1 4 22 q4
# or AMX against VNNI (the same source, A capped), q8 at 64 rows:
#   tests/bench/qkernels_ab.sh --a-simd avx512 64 10 q8
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
rev=HEAD aflags="" bflags="" build="$root/build"
while [ $# -gt 0 ]; do
    case "$1" in
    --a-rev) rev=$2; shift 2 ;;
    --a-flags) aflags=$2; shift 2 ;;
    --b-flags) bflags=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --a-simd) export FL_QK_A_SIMD=$2; shift 2 ;;
    --b-simd) export FL_QK_B_SIMD=$2; shift 2 ;;
    -*) echo "qkernels_ab.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
    esac
done
lib="$build/engine/libfl_engine.a"
[ -f "$lib" ] || { echo "qkernels_ab.sh: $lib missing: build the engine first" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git -C "$root" show "$rev:engine/cpu/quant.c" > "$tmp/quant_a.c" ||
    { echo "qkernels_ab.sh: no engine/cpu/quant.c at $rev" >&2; exit 2; }
cp "$root/engine/cpu/quant.c" "$tmp/quant_b.c"
cflags="-O2 -march=native -std=gnu11 -I$root/engine -I$root/engine/cpu"
# each build's public symbols renamed, so that both link into one program
syms="fl_quant_kernels_init fl_qx_row_bytes fl_qx_bytes fl_qx_quantize fl_q8_repack fl_q4_repack
      fl_qr_quant_bytes fl_qr_scale_count"
for v in a b; do
    V=${v^^} ren=""
    for s in $syms; do ren="$ren -D$s=${s}_$V"; done
    flags=$aflags
    [ $v = b ] && flags=$bflags
    # shellcheck disable=SC2086
    gcc $cflags $ren $flags -c -o "$tmp/quant_$v.o" "$tmp/quant_$v.c"
done
# shellcheck disable=SC2086
gcc $cflags -o "$tmp/qkernels_ab" "$root/tests/bench/qkernels_ab.c" "$tmp/quant_a.o" \
    "$tmp/quant_b.o" "$lib" -lopenblas -lm -lpthread
echo "A: quant.c at $(git -C "$root" rev-parse --short "$rev") $aflags; B: working tree $bflags"
"$tmp/qkernels_ab" "$@"
