#!/usr/bin/env bash
# The determinism series (tests/README.md, "Determinism"): `bash tests/run.sh` N times in a row
# on this checkout, stopping at the first failure, each run's output in its own log. With
# --beside, a clean Release build of this tree in another directory runs in a loop for as
# long as the series does: the "another build beside it" condition. Every run's line in the
# summary says the commit, when it ran, the load average before and after, rc and seconds.
#
#   bash tests/series.sh [--runs N] [--logs DIR] [--beside]
#
# Defaults: 10 runs, logs in /tmp/fogline-series. Exits 0 when every run passed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=10 logs=/tmp/fogline-series beside=0
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=${2:?--runs needs a number}; shift 2 ;;
    --logs) logs=${2:?--logs needs a directory}; shift 2 ;;
    --beside) beside=1; shift ;;
    *) echo "series.sh: unknown argument '$1' (--runs N, --logs DIR, --beside)" >&2; exit 2 ;;
  esac
done
case "$runs" in ''|*[!0-9]*|0) echo "series.sh: --runs wants a positive number, not '$runs'" >&2; exit 2 ;; esac
mkdir -p "$logs" || exit 2
cd "$root" || exit 2
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  commit="$commit+changes"
fi

loader= bdir=
stop_beside() {
  [ -n "$loader" ] && kill -- -"$loader" 2>/dev/null
  wait 2>/dev/null
  [ -n "$bdir" ] && echo "beside: $(cat "$bdir/count" 2>/dev/null || echo 0) clean builds finished" >> "$summary" && rm -rf "$bdir"
  loader= bdir=
}
trap stop_beside EXIT
summary="$logs/summary"
if [ "$beside" = 1 ]; then
  bdir=$(mktemp -d /tmp/fogline-beside.XXXXXX) || exit 2
  # its own process group, so that stopping it stops the compilers too
  setsid bash -c 'n=0; while :; do rm -rf "$1/b"
      cmake -S "$0" -B "$1/b" -DCMAKE_BUILD_TYPE=Release >/dev/null 2>&1 &&
        cmake --build "$1/b" -j"$(nproc)" >/dev/null 2>&1 && n=$((n+1)) && echo "$n" > "$1/count"
    done' "$root" "$bdir" &
  loader=$!
fi

load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "series of $runs on $commit, $( [ "$beside" = 1 ] && echo 'a build beside' || echo 'nothing beside'), $(date -u +%FT%TZ)" >> "$summary"
passed=0
for i in $(seq 1 "$runs"); do
  log="$logs/run-$i.log"
  before=$(load) start=$(date -u +%FT%TZ) s=$(date +%s)
  bash tests/run.sh > "$log" 2>&1
  rc=$?
  line="run $i: $commit start $start load $before -> $(load) rc=$rc $(( $(date +%s) - s )) s"
  echo "$line" | tee -a "$summary"
  [ "$rc" -eq 0 ] || { echo "series.sh: run $i failed; its output: $log" >&2; exit 1; }
  passed=$((passed + 1))
done
echo "series.sh: $passed of $runs runs passed in a row" | tee -a "$summary"
