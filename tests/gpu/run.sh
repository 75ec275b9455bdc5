#!/usr/bin/env bash
# tests/gpu/run.sh: the CUDA backend's checks on a GPU machine, as one script (docs/cuda.md).
# Run from the repository root on the GPU machine:
#
#   bash tests/gpu/run.sh                    (after tests/gpu/prepare.sh here; carry .gpu-deps)
#
# Stages, each with a hard time limit, each printing PASS/FAIL/SKIP with its numbers:
#   env      what the machine has (GPU, driver, nvcc, cmake, compilers, python/torch)
#   build    the programs prepare.sh prebuilt when they are of these sources, else a fresh
#            build of tests/gpu/CMakeLists.txt (engine + cuda/ + test programs), sm_90, with
#            jansson/pcre2/utf8proc from the system or .gpu-deps/root
#   probe    the build's own view: is the GPU usable, can it run these kernels
#   parity   random models of both layouts (tiny, small f32->bf16, head_dim 128, 6 heads per
#            KV head), CUDA vs CPU backend in 4 variants (tests/gpu/gpu_parity.c); on failure
#            the first failing model again with FL_CUDA_SYNC_DEBUG=1 (names the kernel) and,
#            when compute-sanitizer is there, under memcheck
#   parityq8 the same with q8 weights on the GPU (gpu_parity --q8), in a process of its own
#   paritymoe tiny LLaDA2 and SDAR-MoE models (prepare.sh makes them), CUDA (FL_CUDA_MOE=1)
#            vs CPU, bf16 and q8, the GPU taking the CPU's routes (fl_cuda_force_routes)
#   moebench a LLaDA2.0-mini-shaped model at q8 (16 GB, written there with numpy): block 32 at
#            batch 1 and 32 against the floor of the bytes each step read, then batch 32's
#            kernel times (FL_CUDA_KTIME); when time allows, or first with FL_GPU_ONLY=moe
#            (run.sh's second call: the MoE stages only)
#   serve    `fogline serve --device cuda` on the default model (tests/gpu/serve.sh): a
#            WebSocket chat, the OpenAI API, 200 clients for 30 s, Redis, SIGTERM
#   big      a SDAR-1.7B-shaped random model (bf16, tied), written in C; CUDA vs CPU on it
#   bench    step time at batch 1 and 64 over 512 cached tokens vs the bandwidth floor
#            measured in the same run (tests/gpu/gpu_bench.c)
#   torch    PyTorch eager on the same weights, when python3 has torch with CUDA
#   batch    1, 32 and 128 sequences under the scheduler on an SDAR-4B-shaped model
#            (tests/gpu/gpu_batch.c): tokens/s, goal 6,000 at 128
#   parallel `fogline bench parallel --repeat 5` (groups of 4, 8, 16; skeleton at 4), gpu_sched
#            (host time per forward under the scheduler; shapes padded, cuBLAS rows only, none)
#            and `fogline bench decode` on the built-in default model, on the GPU
#            (tests/gpu/bench_main.c, tests/gpu/gpu_sched.c)
#   summary  the closing table and the goals
# The whole run stays under FL_GPU_BUDGET seconds (default 470): a stage gets what is left,
# optional ones are skipped when too little is. Full logs go to $OUT (the device tool brings
# back 8 files: env.log build.log parity.log parity-debug.log bench.log bench.json torch.json
# summary.txt) or build-gpu/out. Exit status: 0 when every stage that ran passed.
# FL_GPU_SELFTEST=1 (a check of this script on a machine without a GPU): the parity stages
# run gpu_parity --self-test (a second CPU backend in place of the GPU); probe, bench and
# torch are skipped.
# FL_GPU_EMU=DIR (a rehearsal on a machine without a GPU): the programs of the main build
# linked with the emulated GPU (DIR: its tests/ folder, gpu_parity_emu and the others; see
# tests/cuda_emu/README.md) run every stage's CUDA code and this script's reading of its
# output, on tiny models and few variants (each CUDA thread is emulated); no build, no torch.
# FL_GPU_BUILD, FL_GPU_MODELS, FL_GPU_MOE_MODELS: where the programs go (build-gpu/build),
# the models it writes (/tmp/fogline-gpu-models) and the tiny MoE models are
# (.gpu-deps/moe-models: llada2-tiny, sdarmoe-tiny).
set -u -o pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
out=${OUT:-$root/build-gpu/out}
bd=${FL_GPU_BUILD:-$root/build-gpu/build}
models=${FL_GPU_MODELS:-/tmp/fogline-gpu-models}
emu=${FL_GPU_EMU:-}
if [ -n "$emu" ] && ! emu=$(cd "$emu" 2>/dev/null && pwd); then
    echo "run.sh: FL_GPU_EMU=${FL_GPU_EMU}: no such folder (a main build's tests/)" >&2
    exit 2
fi
budget=${FL_GPU_BUDGET:-470}
[ -n "$emu" ] && budget=${FL_GPU_BUDGET:-7200}
t_start=$(date +%s)
mkdir -p "$out"
summary=()
fails=0
selftest=${FL_GPU_SELFTEST:-0}
pflag=()
((selftest)) && pflag=(--self-test)
# what the stages run: on a GPU (and the self-test's CPU stand-in) all of it; on the emulated
# GPU the same code paths on tiny models, few variants and steps
par_models=(q3-tiny q2-tiny-tied q3-small-f32 q2-small-tied q3-hd128 q2-rep6-tied)
pvar=()
q8var=()
moe_models=(llada2-tiny sdarmoe-tiny)
moe_args=(--ctx 256 --batches 1,32 --steps 10)
moe_kt_args=(--ctx 256 --batches 32 --steps 3)
big_shape=sdar-1.7b
bench_args=(--ctx 512 --batches 1,64 --steps 30)
kt_steps=10
par_groups=(4 8 16)
sched_args=(--n 64 --rounds 4)
decode_n=32
if [ -n "$emu" ]; then
    selftest=0
    pflag=()
    par_models=(q3-tiny q2-tiny-tied)
    pvar=(--variant 1,11)
    q8var=(--variant 1,15)
    moe_models=(llada2-tiny)
    moe_args=(--ctx 64 --batches 1,4 --steps 2)
    moe_kt_args=(--ctx 64 --batches 4 --steps 2)
    big_shape=small
    bench_args=(--ctx 64 --batches 1,4 --steps 2)
    kt_steps=2
    par_groups=(4)
    sched_args=(--n 4 --rounds 1)
    decode_n=4
fi

elapsed() { echo $(($(date +%s) - t_start)); }
left() { echo $((budget - $(elapsed))); }
note() { printf '%s\n' "$*"; summary+=("$*"); }
# stage NAME MAX_SECONDS LOG CMD...: runs CMD with a limit of min(MAX, time left), output to
# LOG; sets st_rc, st_s. 124: timed out.
stage() {
    local name=$1 max=$2 log=$3
    shift 3
    local l
    # on the emulated GPU a limit only guards against a hang: a loaded machine must not fail it
    [ -n "$emu" ] && max=$((max * 10))
    l=$(left)
    ((l < max)) && max=$l
    if ((max < 5)); then
        st_rc=125
        st_s=0
        echo "[$name] not run: the time budget is spent" >>"$log"
        return
    fi
    local t0
    t0=$(date +%s)
    echo "+ $* (limit ${max}s)" >>"$log"
    timeout -k 10 "$max" "$@" >>"$log" 2>&1
    st_rc=$?
    st_s=$(($(date +%s) - t0))
    ((st_rc == 124 || st_rc == 137)) && echo "[$name] TIMED OUT after ${max}s" >>"$log"
}
tail_of() { tail -n "${2:-15}" "$1" | sed 's/^/    | /'; }
# FL_CUDA_KTIME's tables (printed when a backend is destroyed) in a stage's OUTPUT:
# kt_first OUTPUT: the first table's time per forward; kt_top OUTPUT: its six largest
# labels; kt_us OUTPUT LABEL: that label's time per call in the first table it is in
kt_first() { awk '/^cuda kernel times/ {n++; if (n == 1) {sub(/.*forwards, /, ""); sub(/:$/, ""); print}}' <<<"$1"; }
kt_top() {
    awk '/^cuda kernel times/ {n++; next}
        n == 1 && /^  / {lab = substr($0, 3, 52); sub(/ +$/, "", lab); split(substr($0, 56), a, " ");
            printf "%s\t%s\t%s\n", a[5], lab, a[1]}' <<<"$1" | sort -g -r | head -n 6 |
        awk -F'\t' '{printf "%s %s ms (%s); ", $2, $3, $1}'
}
kt_us() { grep -m1 -E "^  $2 +[0-9]" <<<"$1" | awk '{print $(NF-3)}'; }

echo "== fogline CUDA checks: $(date -u +%FT%TZ), budget ${budget}s, logs in $out"

# ---------------------------------------------------------------- env
{
    echo "uname: $(uname -a)"
    echo "os: $(grep -m1 '^PRETTY_NAME=' /etc/os-release 2>/dev/null | cut -d= -f2-)"
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem \
            --format=csv,noheader 2>&1
    else
        echo "nvidia-smi: not on PATH"
    fi
    nvcc_bin=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
    "$nvcc_bin" --version 2>&1 | tail -n 2 || echo "nvcc: not found"
    cmake --version 2>&1 | head -n 1 || echo "cmake: not found"
    cc --version 2>&1 | head -n 1 || echo "cc: not found"
    c++ --version 2>&1 | head -n 1 || echo "c++: not found"
    command -v ninja >/dev/null && echo "ninja: $(ninja --version)"
    command -v compute-sanitizer >/dev/null && echo "compute-sanitizer: $(command -v compute-sanitizer)"
    python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available())' 2>&1 | tail -n 1
    ls /usr/local/cuda/lib64/libcublas.so* /usr/local/cuda/lib64/libcudart_static.a 2>&1
    echo "nproc: $(nproc); free: $(free -g 2>/dev/null | awk '/Mem:/ {print $2 " GiB"}'); disk /tmp: $(df -h /tmp | awk 'NR==2 {print $4}') free"
} >"$out/env.log" 2>&1
# cuBLAS is loaded at run time (cuda/cublas_dl.cu): the loader's path, the toolkit, or else a
# copy in python's nvidia packages (PyTorch's), named through FL_CUBLAS_LIB
if ! ldconfig -p 2>/dev/null | grep -q 'libcublas\.so\.13' &&
    [ ! -e /usr/local/cuda/lib64/libcublas.so.13 ] && [ -z "${FL_CUBLAS_LIB:-}" ]; then
    lib=$(python3 -c 'import glob, site, sys
for d in site.getsitepackages() + [site.getusersitepackages()]:
    for f in glob.glob(d + "/nvidia/**/libcublas.so.13", recursive=True):
        print(f); sys.exit(0)' 2>/dev/null)
    [ -n "$lib" ] && export FL_CUBLAS_LIB=$lib
fi
echo "cuBLAS: ${FL_CUBLAS_LIB:-libcublas.so.13 from the loader path or the toolkit}" >>"$out/env.log"
gpu_line=$(sed -n '3p' "$out/env.log")
note "INFO env: $gpu_line; $(grep -m1 '^Cuda compilation\|release' "$out/env.log" | tail -n 1); $(grep -m1 '^python' "$out/env.log" || echo 'no python3/torch')"

# ---------------------------------------------------------------- build
# The programs prepare.sh built on the development machine (.gpu-deps/prebuilt.tar.gz) when
# they were built from these very sources (tests/gpu/src_hash.sh) and they run here; else a
# build here (always with FL_GPU_PREBUILT=0). A build here takes about a minute of the budget.
: >"$out/build.log"
build_here() {
    local deps_args=() gen_args=()
    [ -d "$root/.gpu-deps/root" ] && deps_args=(-DFL_DEPS_ROOT="$root/.gpu-deps/root")
    command -v ninja >/dev/null && gen_args=(-G Ninja)
    rm -rf "$bd"
    stage build 300 "$out/build.log" cmake -S tests/gpu -B "$bd" "${gen_args[@]}" \
        -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 "${deps_args[@]}"
    if ((st_rc == 0)); then
        stage build 300 "$out/build.log" cmake --build "$bd" -j "$(nproc)"
    fi
    if ((st_rc != 0)) || [ ! -x "$bd/gpu_parity" ]; then
        note "FAIL build (rc $st_rc, ${st_s}s): $(grep -m1 -E 'error|Error|not found|FATAL' "$out/build.log" | cut -c1-300)"
        tail_of "$out/build.log" 25
        [ -d "$root/.gpu-deps/root" ] || note "HINT: run 'bash tests/gpu/prepare.sh' on the dev machine and carry .gpu-deps"
        printf '\n== summary\n'
        printf '%s\n' "${summary[@]}"
        exit 1
    fi
    note "PASS build (${st_s}s): $(grep -m1 'CUDA backend built' "$out/build.log" | sed 's/^-- //')"
}
prebuilt=0
pb=$root/.gpu-deps/prebuilt.tar.gz
if [ -n "$emu" ]; then
    rm -rf "$bd"
    mkdir -p "$bd"
    for b in gpu_parity gpu_bench gpu_sched gpu_batch fogline; do
        ln -s "$emu/${b}_emu" "$bd/$b"
    done
    ln -s "$emu/gpu_make_model" "$bd/make_model"
    printf '#!/bin/sh\nexec "%s" bench "$@"\n' "$emu/fogline_emu" >"$bd/fogline_bench"
    chmod +x "$bd/fogline_bench"
    for b in gpu_parity gpu_bench gpu_sched gpu_batch fogline make_model; do
        [ -x "$bd/$b" ] || { note "FAIL build: FL_GPU_EMU: no $b in $emu"; exit 1; }
    done
    note "PASS build: the emulated GPU's programs of $emu (FL_GPU_EMU), not built"
elif [ "${FL_GPU_PREBUILT:-1}" = 1 ] && [ -s "$pb" ]; then
    want=$(cat "$root/.gpu-deps/prebuilt.sources" 2>/dev/null)
    have=$(bash tests/gpu/src_hash.sh)
    if [ "$want" != "$have" ]; then
        note "INFO build: the prebuilt programs are of other sources (${want:0:12}; here ${have:0:12}): building here"
    else
        # the paths the programs were configured with (prepare.sh): the default model, web/
        rm -f /tmp/fogline-gpu-src
        rm -rf "$bd"
        mkdir -p "$bd"
        if ln -s "$root" /tmp/fogline-gpu-src && tar -C "$bd" -xzf "$pb" >>"$out/build.log" 2>&1; then
            prebuilt=1
            note "PASS build: prebuilt by prepare.sh from these sources (${have:0:12}), not built here"
        else
            note "INFO build: the prebuilt programs could not be unpacked: building here"
        fi
    fi
fi
((prebuilt)) || [ -n "$emu" ] || build_here

# ---------------------------------------------------------------- probe
log=$out/parity.log
: >"$log"
stage probe 60 "$log" "$bd/gpu_parity" "${pflag[@]}"
if ((st_rc != 0 && prebuilt)); then
    note "INFO probe of the prebuilt programs: rc $st_rc, $(grep -m1 '^gpu_parity:' "$log" | cut -c1-200): building here"
    build_here
    log=$out/parity.log
    stage probe 60 "$log" "$bd/gpu_parity" "${pflag[@]}"
fi
probe=$(grep '^gpu_parity:' "$log" | tail -n 1 | cut -c1-300)
if ((st_rc != 0)); then
    note "FAIL probe (rc $st_rc): $probe"
    tail_of "$log" 10
    printf '\n== summary\n'
    printf '%s\n' "${summary[@]}"
    exit 1
fi
note "PASS probe: $probe"

# FL_GPU_ONLY=moe: only the mixture-of-experts stages after the probe (a second device call)
dense=1
[ "${FL_GPU_ONLY:-}" = moe ] && dense=0
rm -rf "$models"
mkdir -p "$models"

# ---------------------------------------------------------------- parity
if ((dense)); then
for spec in "q3-tiny --layout qwen3 --shape tiny --seed 1" \
    "q2-tiny-tied --layout qwen2 --shape tiny --tie --seed 2" \
    "q3-small-f32 --layout qwen3 --shape small --dtype f32 --seed 3" \
    "q2-small-tied --layout qwen2 --shape small --tie --seed 4" \
    "q3-hd128 --layout qwen3 --shape hd128 --seed 5" \
    "q2-rep6-tied --layout qwen2 --shape rep6 --tie --seed 6"; do
    read -r -a a <<<"$spec"
    stage models 30 "$log" "$bd/make_model" "$models/${a[0]}" "${a[@]:1}"
    ((st_rc == 0)) || break
done
if ((st_rc != 0)); then
    note "FAIL models (rc $st_rc)"
    tail_of "$log" 10
    fails=$((fails + 1))
else
    stage parity 200 "$log" "$bd/gpu_parity" "${pflag[@]}" "${pvar[@]}" "${par_models[@]/#/$models/}"
    counts=$(grep -E '^gpu_parity: [0-9]+ passed' "$log" | tail -n 1)
    [ -n "$counts" ] || counts="no summary line (crashed or timed out)"
    if ((st_rc == 0)); then
        note "PASS parity (${st_s}s): $counts; worst logits rel err $(grep -o 'logits rel err [0-9.e+-]*' "$log" | awk '{print $4}' | sort -g | tail -n 1)"
    else
        fails=$((fails + 1))
        note "FAIL parity (rc $st_rc, ${st_s}s): $counts"
        grep -E '^FAIL' "$log" | head -n 25 | cut -c1-400 | sed 's/^/    /'
        ((st_rc == 124 || st_rc == 137)) && tail_of "$log" 5
        ((st_rc > 128 && st_rc != 137)) && tail_of "$log" 8
        first=$(grep -m1 -E '^FAIL' "$log" | awk '{print $2}')
        [ -n "$first" ] && [ -d "$models/$first" ] || first=q3-tiny
        dlog=$out/parity-debug.log
        : >"$dlog"
        if (($(left) > 200)); then
            FL_CUDA_SYNC_DEBUG=1 stage debug 90 "$dlog" "$bd/gpu_parity" --variant 0 "$models/$first"
            note "INFO parity rerun of $first with FL_CUDA_SYNC_DEBUG=1 (rc $st_rc): $(grep -m1 -E '^FAIL' "$dlog" | cut -c1-300)"
        fi
        if command -v compute-sanitizer >/dev/null && (($(left) > 200)); then
            stage sanitizer 120 "$dlog" compute-sanitizer --tool memcheck --print-limit 10 \
                "$bd/gpu_parity" --variant 0 "$models/$first"
            note "INFO compute-sanitizer memcheck on $first (rc $st_rc): $(grep -m1 -E 'ERROR SUMMARY' "$dlog")"
            grep -m3 -A3 -E '^=========  *(Invalid|Out of|Program hit|Race)' "$dlog" | head -n 12 | sed 's/^/    /'
        fi
    fi
fi

# ---------------------------------------------------------------- parity, q8 weights
# The GPU holding q8 weights (weight-only 8-bit, docs/cuda.md) against the CPU's bf16, within
# the CPU q8's limits (gpu_parity --q8); a process of its own, so that a fault in it cannot
# stop the stages after it.
if [ -d "$models/${par_models[0]}" ]; then
    stage parityq8 150 "$log" "$bd/gpu_parity" "${pflag[@]}" --q8 "${q8var[@]}" "${par_models[@]/#/$models/}"
    counts=$(grep -E '^gpu_parity: [0-9]+ passed' "$log" | tail -n 1)
    [ -n "$counts" ] || counts="no summary line (crashed or timed out)"
    if ((st_rc == 0)); then
        note "PASS parity q8 weights (${st_s}s): $counts; worst logits rel err $(grep '(q8)' "$log" | grep -o 'logits rel err [0-9.e+-]*' | awk '{print $4}' | sort -g | tail -n 1)"
    else
        fails=$((fails + 1))
        note "FAIL parity q8 weights (rc $st_rc, ${st_s}s): $counts"
        grep -E '^FAIL [^ ]+ \(q8\)' "$log" | head -n 15 | cut -c1-400 | sed 's/^/    /'
        ((st_rc > 128 && st_rc != 137)) && tail_of "$log" 8
    fi
fi

fi # dense

# ---------------------------------------------------------------- parity, mixture of experts
# LLaDA2 and SDAR-MoE tiny models (prepare.sh made them: .gpu-deps/moe-models) on the GPU
# (FL_CUDA_MOE=1: compiled, not yet verified on a GPU, so opt-in) against the CPU backend,
# bf16 and q8. Routing runs on the host from the GPU's router logits, which differ from the
# CPU's by the bf16 activations before them: a token whose k-th and (k+1)-th experts nearly
# tie could go to another expert on each side, so the GPU takes the CPU's routes for each
# compared forward (fl_cuda_force_routes) and says how often its own choice differed.
mdir=${FL_GPU_MOE_MODELS:-$root/.gpu-deps/moe-models}
if [ -d "$mdir/llada2-tiny" ] && [ -d "$mdir/sdarmoe-tiny" ]; then
    mlog=$out/parity-debug.log
    qs=("" --q8)
    # self-test: the stand-in (a CPU backend) cannot take the CPU's routes, and the CPU's q8
    # routes its tiny LLaDA2 differently from its bf16 often enough to leave the q8 limits
    ((selftest)) && qs=("")
    # the emulated GPU: LLaDA2 in bf16, the default variant (a MoE variant takes ~60 s there)
    [ -n "$emu" ] && qs=("")
    mvar=()
    [ -n "$emu" ] && mvar=(--variant 1)
    for q in "${qs[@]}"; do
        FL_CUDA_MOE=1 stage paritymoe 120 "$mlog" "$bd/gpu_parity" "${pflag[@]}" $q "${mvar[@]}" \
            "${moe_models[@]/#/$mdir/}"
        counts=$(grep -E '^gpu_parity: [0-9]+ passed' "$mlog" | tail -n 1)
        [ -n "$counts" ] || counts="no summary line (crashed or timed out)"
        if ((st_rc == 0)); then
            note "PASS parity MoE${q:+ q8} (LLaDA2, SDAR-MoE tiny; ${st_s}s): $counts; worst logits rel err $(grep -o 'logits rel err [0-9.e+-]*' "$mlog" | awk '{print $4}' | sort -g | tail -n 1)"
        else
            fails=$((fails + 1))
            note "FAIL parity MoE${q:+ q8} (rc $st_rc, ${st_s}s): $counts"
            grep -E '^FAIL' "$mlog" | head -n 12 | cut -c1-400 | sed 's/^/    /'
            ((st_rc > 128 && st_rc != 137)) && tail_of "$mlog" 8
        fi
    done
else
    note "SKIP parity MoE: no .gpu-deps/moe-models (run tests/gpu/prepare.sh here first)"
fi

# ---------------------------------------------------------------- MoE step time
# A LLaDA2.0-mini-shaped random model (16.3 B parameters, written at q8 by
# tests/reference/make_moe_model.py with numpy: 16 GB) on the GPU: block 32 over 256 cached
# tokens at batch 1 and 32 (tests/gpu/gpu_bench.c --moe), each step against the floor of the
# bytes it read (the experts its tokens went to); by default, eager, with the tensor-core
# matmul, and with the experts' grouped GEMM (FL_CUDA_MOE_GEMM=1) added. Runs with FL_GPU_ONLY=moe, or when the time
# left allows.
if ((selftest)); then
    note "SKIP moe bench: FL_GPU_SELFTEST"
elif [ -z "$emu" ] && ! python3 -c 'import numpy' 2>/dev/null; then
    note "SKIP moe bench: python3 has no numpy (the model generator needs it)"
elif ((dense && $(left) < 420)) || (($(left) < 200)); then
    note "SKIP moe bench: $(left)s left (FL_GPU_ONLY=moe runs it first)"
else
    mlog=$out/bench.log
    mb=$models/llada2-mini-q8
    if [ -n "$emu" ]; then # the tiny LLaDA2 of the parity stage, a copy
        cp -r "$mdir/llada2-tiny" "$mb"
        st_rc=$?
    else
        stage moemodel 160 "$mlog" python3 tests/reference/make_moe_model.py "$mb" --family llada2 \
            --shape llada2-mini --quant q8 --seed 1
    fi
    if ((st_rc != 0)); then
        fails=$((fails + 1))
        note "FAIL moe bench: writing the model (rc $st_rc, ${st_s}s)"
    else
        stage moebench 240 "$mlog" "$bd/gpu_bench" --moe --model "$mb" "${moe_args[@]}" \
            --json "$out/moe.json"
        rows=$(grep -E '^(graphs|eager), (streaming|tc|tensor)' "$mlog" | tail -n 7 | tr -s ' ' | paste -sd ';' -)
        if ((st_rc == 0)); then
            note "PASS moe bench, LLaDA2.0-mini shape q8 (${st_s}s): $rows (variant batch step-ms min-ms tok/s x-floor replayed GB-read experts-touched)"
        else
            fails=$((fails + 1))
            note "FAIL moe bench (rc $st_rc, ${st_s}s): $(grep -m1 FAIL "$mlog" | cut -c1-250)"
        fi
        # where a batch-32 MoE step goes (FL_CUDA_KTIME=1, eager, the default variant): the
        # six largest kernels, and the routing's own (router, top-k, assignments)
        if (($(left) > 90)); then
            echo "+ FL_CUDA_KTIME=1 (moe)" >>"$mlog"
            l0=$(wc -l <"$mlog")
            FL_CUDA_KTIME=1 stage moektime 80 "$mlog" "$bd/gpu_bench" --moe --default-only \
                --model "$mb" "${moe_kt_args[@]}"
            kt=$(tail -n +"$((l0 + 1))" "$mlog")
            if ((st_rc == 0)); then
                note "INFO MoE batch-32 kernel times, eager (${st_s}s): $(kt_top "$kt")per layer: router $(kt_us "$kt" 'router logits') us, top-k $(kt_us "$kt" 'routing \(top-k\)') us, assignments $(kt_us "$kt" 'assignments in expert order') us"
            else
                note "INFO MoE kernel times not taken (rc $st_rc)"
            fi
        fi
    fi
    rm -rf "$mb"
fi

# ---------------------------------------------------------------- the stages of issue 33's goals
if ((dense)); then
# The goals first (the server, the batch-1 step against its floor and PyTorch, big batches),
# then the diagnostics (fan-out, the scheduler's host time, decode), which the budget may cut.
dev=cuda
pn=64
pm=48
rep=5
if ((selftest)); then
    dev=cpu
    pn=16
    pm=8
    rep=1
elif [ -n "$emu" ]; then
    pn=4
    pm=8
    rep=1
fi

# ---------------------------------------------------------------- serve
# The real server as a deployment runs it (tests/gpu/serve.sh): `fogline serve --device cuda`
# with Redis when redis-server is there, a WebSocket chat, the OpenAI API plain and streamed,
# 200 WebSocket clients for 30 s (`fogline bench load`), /metrics, SIGTERM. Output appended to
# bench.log.
if [ -x "$bd/fogline" ]; then
    slog=$out/bench.log
    sdeps=""
    [ -d "$root/.gpu-deps/root" ] && sdeps=$root/.gpu-deps/root
    sclients=200
    sload=30s
    if ((selftest)); then
        sclients=16
        sload=48
    elif [ -n "$emu" ]; then # this machine's own libraries
        sdeps=""
        sclients=2
        sload=4
    fi
    echo "+ serve stage" >>"$slog"
    stage serve 180 "$slog" bash tests/gpu/serve.sh "$bd/fogline" "$dev" "$sdeps" "$sclients" "$sload"
    slines=$(awk '/^\+ serve stage/ {delete l; n = 0; next} /^serve: / {l[n++] = $0} END {for (i = 0; i < n; i++) print l[i]}' "$slog")
    if ((st_rc == 0)); then
        note "PASS serve --device $dev (${st_s}s): $(echo "$slines" | grep -E '^serve: load:' | cut -c14-)"
    elif ((st_rc == 77)); then
        note "SKIP serve: $(echo "$slines" | grep -m1 SKIP | cut -c8-300)"
    else
        fails=$((fails + 1))
        note "FAIL serve --device $dev (rc $st_rc, ${st_s}s): $(echo "$slines" | grep -m1 FAIL | cut -c8-300)"
    fi
    while IFS= read -r l; do
        [ -n "$l" ] && note "    $(echo "$l" | cut -c8-400)"
    done <<<"$(echo "$slines" | grep -vE '^serve: (load|SKIP)')"
else
    note "SKIP serve: the server was not built (its libraries: bash tests/gpu/prepare.sh, carry .gpu-deps)"
fi

# ---------------------------------------------------------------- big model
big=$models/$big_shape
stage bigmodel 90 "$out/bench.log" "$bd/make_model" "$big" --layout qwen3 --shape "$big_shape" --tie --seed 7
if ((st_rc != 0)); then
    note "FAIL big model: make_model (rc $st_rc, ${st_s}s)"
    tail_of "$out/bench.log" 5
    fails=$((fails + 1))
else
    note "INFO big model written in ${st_s}s: $(grep -m1 '^make_model:' "$out/bench.log" | cut -c1-200)"
    if [ -n "$emu" ]; then
        note "SKIP big parity: FL_GPU_EMU (the parity stage ran the same program)"
    elif (($(left) > 240)); then
        blog=$out/parity.log
        stage bigparity 150 "$blog" "$bd/gpu_parity" "${pflag[@]}" --big "$big"
        counts=$(grep -E '^gpu_parity: [0-9]+ passed' "$blog" | tail -n 1)
        if ((st_rc == 0)); then
            note "PASS big parity, SDAR-1.7B shape (${st_s}s): $counts; $(grep 'sdar-1.7b' "$blog" | grep -o 'logits rel err [0-9.e+-]*' | awk '{print $4}' | sort -g | tail -n 1 | sed 's/^/worst logits rel err /')"
        else
            fails=$((fails + 1))
            note "FAIL big parity, SDAR-1.7B shape (rc $st_rc, ${st_s}s): ${counts:-no summary line}"
            grep -E '^FAIL.*sdar' "$blog" | head -n 10 | cut -c1-400 | sed 's/^/    /'
        fi
    else
        note "SKIP big parity: $(left)s left"
    fi

    # ------------------------------------------------------------ bench
    if ((selftest)); then
        note "SKIP bench and torch: FL_GPU_SELFTEST"
    else
        stage bench 200 "$out/bench.log" "$bd/gpu_bench" --model "$big" "${bench_args[@]}" \
            --json "$out/bench.json"
        if ((st_rc == 0)); then
            note "PASS bench (${st_s}s): $(grep -m1 '^bench: weights streamed' "$out/bench.log" | cut -c8-200)"
        else
            fails=$((fails + 1))
            note "FAIL bench (rc $st_rc, ${st_s}s): $(grep -m1 -E '^FAIL' "$out/bench.log" | cut -c1-300)"
            tail_of "$out/bench.log" 8
        fi

        # ------------------------------------------------------------ kernel times
        # where a batch-1 step goes: FL_CUDA_KTIME=1 (eager, an event after every launch, so
        # a kernel shorter than the host's launch interval reads as that interval), then
        # FL_CUDA_KTIME=2 (the events are nodes of the captured graphs: the kernels' own
        # times in the replays production runs, the default variant). The first table of a
        # stage's output is the default variant's (bench.log holds the MoE stage's tables
        # before these when that ran).
        klog=$out/bench.log
        echo "+ FL_CUDA_KTIME=1" >>"$klog"
        l0=$(wc -l <"$klog")
        FL_CUDA_KTIME=1 stage ktime 60 "$klog" "$bd/gpu_bench" --model "$big" "${bench_args[@]:0:2}" \
            --batches 1 --steps "$kt_steps"
        kt=$(tail -n +"$((l0 + 1))" "$klog")
        if ((st_rc == 0)); then
            note "INFO batch-1 kernel times, eager (${st_s}s): $(kt_first "$kt"); $(kt_top "$kt")"
            # the attention of a layer, default (+ the split combine) and few-row kernel
            note "INFO batch-1 attention per layer, eager: default $(kt_us "$kt" 'attention') us + combine $(kt_us "$kt" 'attention split combine') us; few-row kernel (FL_CUDA_ATTN=few) $(kt_us "$kt" 'attention \(few-row kernel, splits merged\)') us"
        else
            note "INFO kernel times not taken (rc $st_rc)"
        fi
        echo "+ FL_CUDA_KTIME=2" >>"$klog"
        l0=$(wc -l <"$klog")
        FL_CUDA_KTIME=2 stage ktime2 60 "$klog" "$bd/gpu_bench" --default-only --model "$big" \
            "${bench_args[@]:0:2}" --batches 1 --steps "$kt_steps"
        kt=$(tail -n +"$((l0 + 1))" "$klog")
        if ((st_rc == 0)); then
            note "INFO batch-1 kernel times, graph replays (${st_s}s): $(kt_first "$kt"); $(kt_top "$kt")attention $(kt_us "$kt" 'attention') us + combine $(kt_us "$kt" 'attention split combine') us per layer"
        else
            note "INFO kernel times in graph replays not taken (rc $st_rc)"
        fi

        # ------------------------------------------------------------ torch
        if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)' >/dev/null 2>&1; then
            if (($(left) > 60)); then
                PYTHONUNBUFFERED=1 stage torch 150 "$out/bench.log" python3 tests/gpu/torch_bench.py \
                    --model "$big" --ctx 512 --batches 1,64 --steps 30 --json "$out/torch.json"
                if ((st_rc == 0)); then
                    note "PASS torch eager baseline (${st_s}s)"
                else
                    note "FAIL torch eager baseline (rc $st_rc, ${st_s}s): $(tail -n 1 "$out/bench.log" | cut -c1-200)"
                fi
            else
                note "SKIP torch: $(left)s left"
            fi
        else
            note "SKIP torch: python3 has no torch with CUDA"
        fi
    fi
fi

# ---------------------------------------------------------------- batch
# Many sequences under the scheduler (tests/gpu/gpu_batch.c): an SDAR-4B-shaped random model
# (bf16, tied, 8 GB), block 4, 1, 32 and 128 sequences of 512-token random prompts and 64-token
# replies, the SDAR family's decoding; the goal is 6,000 tokens/s at 128. A random model decides
# about one token per step, so this is a lower bound. FL_GPU_SELFTEST: the tiny model on the CPU.
if [ -x "$bd/gpu_batch" ]; then
    blog=$out/bench.log
    echo "+ batch stage" >>"$blog"
    st_rc=0
    if ((selftest)); then
        bmodel=$models/q3-tiny
        bargs=(--device cpu --conc 1,8 --prompt 37 --max-tokens 21)
    elif [ -n "$emu" ]; then
        bmodel=$models/q3-tiny
        bargs=(--device cuda --conc 1,6 --prompt 37 --max-tokens 21)
    else
        bmodel=$models/sdar-4b
        bargs=(--device cuda --conc 1,32,128 --prompt 512 --max-tokens 64)
        if (($(left) > 150)); then
            stage batchmodel 90 "$blog" "$bd/make_model" "$bmodel" --layout qwen3 --shape sdar-4b --tie --seed 8
            ((st_rc == 0)) || note "FAIL batch: make_model sdar-4b (rc $st_rc, ${st_s}s)"
            ((st_rc == 0)) || fails=$((fails + 1))
        else
            st_rc=125
            note "SKIP batch: $(left)s left"
        fi
    fi
    if ((st_rc == 0)); then
        stage batch 150 "$blog" "$bd/gpu_batch" --model "$bmodel" "${bargs[@]}"
        rows=$(awk '/^\+ batch stage/ {n = 0; next} /^\| [0-9]+ \| [0-9.]+ \|/ {l[n++] = $0}
            END {for (i = 0; i < n; i++) print l[i]}' "$blog" |
            awk -F'|' '{printf "conc%s: %s tok/s (after prefill%s), TPF%s; ", $2, $8, $9, $7}' | tr -s ' ')
        if ((st_rc == 0)); then
            note "PASS batch (${st_s}s): $rows(goal: 6,000 tok/s at conc 128)"
        elif ((st_rc == 77)); then
            note "SKIP batch: no GPU"
        else
            fails=$((fails + 1))
            note "FAIL batch (rc $st_rc, ${st_s}s): $(tail -n 1 "$blog" | cut -c1-200)"
        fi
    fi
else
    note "SKIP batch: gpu_batch was not built"
fi

# ---------------------------------------------------------------- default model: parallel, decode
# `fogline bench parallel` (fan-out vs one after another, skeleton vs plain) and `fogline bench
# decode` on the built-in model, on the GPU (tests/gpu/bench_main.c: the server's sources).
# Output appended to bench.log (the device tool brings back 8 files).
if [ -x "$bd/fogline_bench" ]; then
    blog=$out/bench.log
    for g in "${par_groups[@]}"; do
        mn=0
        ((g == 4)) && mn=$pm
        stage parallel 75 "$blog" "$bd/fogline_bench" parallel --device "$dev" --n "$pn" --group "$g" \
            --multi-n "$mn" --repeat "$rep"
        if ((st_rc == 0)); then
            rows=$(awk '/^\| set \|/ {t=1} t && /^\| [AB]:/' "$blog" | tail -n 2 |
                awk -F'|' '{printf "%s %s %s; ", substr($2, 2, 1), $6, $7}')
            note "PASS bench parallel, group $g (${st_s}s): fan-out speedup, identical: ${rows}"
        else
            fails=$((fails + 1))
            note "FAIL bench parallel, group $g (rc $st_rc, ${st_s}s): $(tail -n 1 "$blog" | cut -c1-200)"
            break
        fi
        if ((g == 4 && mn > 0)); then
            sk=$(grep -E '^\| (plain|skeleton) \|' "$blog" | tail -n 2 | tr '\n' ' ')
            note "INFO skeleton vs plain: ${sk:-no table}"
        fi
    done
    if [ -x "$bd/gpu_sched" ]; then
        # shapes padded (FL_CUDA_SHAPE_PAD, opt-in), cuBLAS rows padded (the default), nothing
        declare -A warm=()
        for pad in "1 1" "1 0" "0 0"; do
            read -r gp sp <<<"$pad"
            echo "+ FL_CUDA_GEMM_PAD=$gp FL_CUDA_SHAPE_PAD=$sp" >>"$blog"
            l0=$(wc -l <"$blog")
            FL_CUDA_GEMM_PAD=$gp FL_CUDA_SHAPE_PAD=$sp stage sched 40 "$blog" "$bd/gpu_sched" --device "$dev" \
                --model engine/models/fogline-helpdesk --prompts tests/data/helpdesk_heldout.json \
                "${sched_args[@]}" --graph-sim
            run_log=$(tail -n +"$((l0 + 1))" "$blog")
            if ((st_rc == 0)); then
                note "PASS sched profile, padding rows $gp shapes $sp (${st_s}s): $(awk '/^\| conc \| wall ms/ {t=1} /^graph cache simulated/ {t=0} t && /^\| [0-9]/' <<<"$run_log" |
                    awk -F'|' '{printf "conc%s: %s ms, fwd%s, rows%s, plan%s enq%s cap%s wait%s sched%s us, graphs r/c/e%s ev%s; ", $2, $3, $4, $5, $7, $8, $9, $10, $11, $13, $14}' | tr -s ' ')"
                # the graph cache as flc_shape.h simulates it, and whether the backend agreed
                # the last row: 4 sequences again, warm (the backend's graphs kept)
                warm[$gp$sp]=$(awk '/^\| conc \| wall ms/ {t=1} /^graph cache simulated/ {t=0} t && /^\| [0-9]/' <<<"$run_log" |
                    tail -n 1 | awk -F'|' '{gsub(/ /, "", $3); print $3}')
                sim=$(awk -F'|' '/^graph cache simulated/ {t=1} t && /^\| [0-9]/ {
                    r[$3] = r[$3] $7 ","} END {for (k in r) printf "%s:%s ", k, r[k]}' <<<"$run_log" | tr -s ' ')
                note "INFO graph cache simulated, replayed per run (conc 1, 4, 16, 64, 4 warm): ${sim}the backend's counters: $(grep -c '| the same (' <<<"$run_log") runs the same, $(grep -c '| DIFFER (' <<<"$run_log") differ"
            elif ((st_rc == 77)); then
                note "SKIP sched profile: no GPU"
                break
            else
                fails=$((fails + 1))
                note "FAIL sched profile (rc $st_rc, ${st_s}s): $(tail -n 1 "$blog" | cut -c1-200)"
            fi
        done
        if [ -n "${warm[11]:-}" ] && [ -n "${warm[10]:-}" ]; then
            note "INFO sched, 4 sequences warm: shapes padded ${warm[11]} ms, cuBLAS rows padded only ${warm[10]} ms ($(awk -v a="${warm[11]}" -v b="${warm[10]}" 'BEGIN {printf "%.2fx", b / a}') faster padded; above 1: make FL_CUDA_SHAPE_PAD=1 the default)"
        fi
    fi
    stage decode 60 "$blog" "$bd/fogline_bench" decode --device "$dev" --n "$decode_n" --no-fsync
    if ((st_rc == 0)); then
        note "PASS bench decode (${st_s}s): $(grep -E '^\| (1 baseline|4 \+ async|5 row 4, 16)' "$blog" | tail -n 3 |
            awk -F'|' '{printf "%s: TPF%s tok/s%s; ", $2, $4, $6}' | tr -s ' ')"
    else
        fails=$((fails + 1))
        note "FAIL bench decode (rc $st_rc, ${st_s}s): $(tail -n 1 "$blog" | cut -c1-200)"
    fi
else
    note "SKIP bench parallel/decode: fogline_bench was not built"
fi
fi # dense

# ---------------------------------------------------------------- summary
goals=""
if [ -s "$out/bench.json" ] && command -v python3 >/dev/null; then
    goals=$(python3 tests/gpu/summary.py "$out/bench.json" "$out/torch.json" 2>&1)
    grc=$?
    # 3: a goal was missed (on the emulated GPU the times mean nothing: only said); else the
    # summary itself failed
    if ((grc == 3)) && [ -n "$emu" ]; then
        note "INFO goals: not met on the emulated GPU, whose times mean nothing"
    elif ((grc != 0)); then
        fails=$((fails + 1))
        ((grc == 3)) || note "FAIL summary.py (rc $grc): $(tail -n 1 <<<"$goals" | cut -c1-200)"
    fi
elif [ -s "$out/bench.json" ]; then
    goals=$(sed -n '/^variant/,/^{/p' "$out/bench.log" | grep -v '^{')
fi
{
    printf '\n== summary (%ss)\n' "$(elapsed)"
    printf '%s\n' "${summary[@]}"
    [ -n "$goals" ] && printf '\n%s\n' "$goals"
    echo
    if ((fails)); then
        echo "RESULT: FAIL ($fails stage(s) failed; logs in $out)"
    else
        echo "RESULT: PASS"
    fi
} >"$out/summary.txt"
cat "$out/summary.txt"
exit $((fails ? 1 : 0))
