#!/usr/bin/env bash
# Runs every libFuzzer target (or the ones named) for a while and writes a summary table.
#   tests/fuzz/run_long.sh [-t SECONDS] [-b BUILD_DIR] [-1] [TARGET...]
# SECONDS per target: -t, else $FUZZ_SECONDS, else 600. BUILD_DIR: build-fuzz (configured with
# clang and built here when needed). By default a target keeps going after a crash
# (-fork=1 -ignore_crashes=1), so one long run collects every distinct crash; -1 runs in a
# single process that stops at the first one (libFuzzer's own final stats). Set NICE=15 to
# leave the CPU to other work.
# New inputs go to BUILD_DIR/fuzz/corpus/TARGET (shared with the ctests), crashes to
# BUILD_DIR/fuzz/artifacts/TARGET/, logs to BUILD_DIR/fuzz/logs/; the table (Markdown) is
# printed and written to BUILD_DIR/fuzz/summary.md. Exits 1 when any target crashed.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
secs=${FUZZ_SECONDS:-600}
build=$root/build-fuzz
fork=1
while getopts "t:b:1h" o; do
  case $o in
    t) secs=$OPTARG ;;
    b) mkdir -p "$OPTARG"; build=$(cd "$OPTARG" && pwd) ;;
    1) fork=0 ;;
    *) sed -n '2,12p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
all=(chat_ws chat_openai tokenize detok chat_template safetensors config blob)
targets=("${@:-${all[@]}}")
nice=(nice -n "${NICE:-0}")

if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=${CC:-clang} "${nice[@]}" cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DFL_FUZZ=ON >/dev/null
fi
"${nice[@]}" cmake --build "$build" --target fuzz_all -j"$(nproc)" >/dev/null

out=$build/fuzz
mkdir -p "$out/logs"
mode=$([ "$fork" = 1 ] && echo "fork, keeps going" || echo "one process, stops at a crash")
table="Run $(date -u '+%Y-%m-%d %H:%M UTC'), $secs s per target ($mode), $(nproc) cores.

| target | runs | execs/s | cov | features | corpus | new crash files |
|---|---|---|---|---|---|---|"
failed=0
for t in "${targets[@]}"; do
  bin=$build/tests/fuzz_$t
  [ -x "$bin" ] || { echo "no target fuzz_$t (one of: ${all[*]})" >&2; exit 2; }
  work=$out/corpus/$t art=$out/artifacts/$t log=$out/logs/$t.log
  mkdir -p "$work" "$art"
  [ "$t" = blob ] && "$build/tests/fuzz_blob_seed" "$work"
  case $t in
    chat_ws|chat_openai) dict=(-dict="$root/tests/fuzz/dict/chat.dict") ;;
    tokenize|chat_template) dict=(-dict="$root/tests/fuzz/dict/text.dict") ;;
    config|safetensors) dict=(-dict="$root/tests/fuzz/dict/$t.dict") ;;
    *) dict=() ;;
  esac
  modeflags=(-print_final_stats=1)
  [ "$fork" = 1 ] && modeflags=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
  before=$(ls "$art" | wc -l)
  echo "fuzz_$t: ${secs} s ..." >&2
  rc=0
  start=$(date +%s)
  "${nice[@]}" "$bin" -max_total_time="$secs" -timeout=10 "${modeflags[@]}" \
    ${dict[@]+"${dict[@]}"} -artifact_prefix="$art/" "$work" "$root/tests/fuzz/corpus/$t" \
    >"$log" 2>&1 || rc=$?
  took=$(( $(date +%s) - start ))
  # the last status line: "#N ... cov: C ft: F corp: K..." (fork mode: "#N: cov: ...")
  last=$(grep -aE '^#[0-9]+' "$log" | tail -1 || true)
  runs=$(sed -n 's/^#\([0-9]*\).*/\1/p' <<<"$last")
  stat=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  runs=${stat:-$runs}
  eps=$([ -n "$runs" ] && [ "$took" -gt 0 ] && echo $(( runs / took )) || echo "?")
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")
  crashes=$(( $(ls "$art" | wc -l) - before ))
  if [ "$crashes" -gt 0 ] || [ "$rc" -ne 0 ]; then failed=1; fi
  if [ "$rc" -ne 0 ] && [ "$crashes" -eq 0 ]; then crashes="0 (exit $rc)"; fi
  table+="
| $t | ${runs:-?} | $eps | ${cov:-?} | ${ft:-?} | ${corp:-?} | $crashes |"
done
printf '%s\n' "$table" | tee "$out/summary.md"
if [ "$failed" -ne 0 ]; then
  echo "crashes: see $out/artifacts/ and $out/logs/" >&2
  exit 1
fi
