#!/usr/bin/env bash
# Runs the portal soak (release build, 2,035 quotas, 90 s) and records the
# machine's scheduling for 75 s of it with `perf sched record`, then prints
# where the server's threads waited (sched-delays.py). Needs root and
# Debian's linux-perf. Output: $OUT (default /tmp/bizrq-sched).
#
#   SOAK=600 RECORD=all BENCH_ARGS= server/benches/sched-delays.sh
#
# records the whole of a 10-minute soak with the memory phase and the
# demo (BENCH_ARGS replaces the default `--no-memory --no-demo`), on the
# monotonic clock, and then shows, for each admission the bench names as
# slow, what the server's threads did in the 3 s before it was answered
# (sched-delays.py --around).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/bizrq-sched}
mkdir -p "$out"
cd "$root"
bench_args=${BENCH_ARGS---no-memory --no-demo}
# shellcheck disable=SC2086
cargo bench -p bizrq --bench portal -- --quotas 2035 --soak "${SOAK:-90}" $bench_args >"$out/soak.txt" 2>&1 &
bench=$!
until grep -q '^soak:' "$out/soak.txt" 2>/dev/null; do
  sleep 1
  kill -0 "$bench" 2>/dev/null || { cat "$out/soak.txt"; exit 1; }
done
pid=$(pgrep -f 'release/bizrq serve' | head -n1)
# The kernel's monotonic clock less the wall clock, so that the bench's
# wall-clock instants can be found in the record.
python3 -c 'import time; print(time.clock_gettime(time.CLOCK_MONOTONIC) - time.time())' >"$out/mono-minus-wall"
if [ "${RECORD:-75}" = all ]; then
  perf sched record -k CLOCK_MONOTONIC -a -o "$out/perf.data" -- sleep 100000 >/dev/null 2>&1 &
  perf=$!
  wait "$bench" || true
  pkill -INT -f "perf sched record -k CLOCK_MONOTONIC -a -o $out/perf.data" || true
  wait "$perf" || true
else
  perf sched record -k CLOCK_MONOTONIC -a -o "$out/perf.data" -- sleep "${RECORD:-75}" >/dev/null 2>&1
  wait "$bench"
fi
sed -n '/^soak:/,$p' "$out/soak.txt"
offset=$(cat "$out/mono-minus-wall")
if [ "${RECORD:-75}" = all ]; then
  # Only around each slow admission: a whole 10-minute record is too much
  # text to read at once.
  grep -o 'unix [0-9.]*' "$out/soak.txt" | awk '{print $2}' | sort -u | head -n 5 | while read -r wall; do
    at=$(python3 -c "print(f'{$wall + $offset:.6f}')")
    from=$(python3 -c "print(f'{$at - 3:.6f}')")
    to=$(python3 -c "print(f'{$at + 3:.6f}')")
    perf script -i "$out/perf.data" --time "$from,$to" -F comm,tid,pid,cpu,time,event,trace >"$out/perf-$at.txt" 2>/dev/null
    echo; echo "== around the admission sent at wall $wall (monotonic $at) =="
    python3 "$root/server/benches/sched-delays.py" "$out/perf-$at.txt" "$pid" --around "$at"
  done
else
  perf script -i "$out/perf.data" -F comm,tid,pid,cpu,time,event,trace >"$out/perf.txt" 2>/dev/null
  python3 "$root/server/benches/sched-delays.py" "$out/perf.txt" "$pid"
fi
