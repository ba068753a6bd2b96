#!/usr/bin/env bash
# Runs the portal soak (release build, 2,035 quotas, 90 s) and records the
# machine's scheduling for 75 s of it with `perf sched record`, then prints
# where the server's threads waited (sched-delays.py). Needs root and
# Debian's linux-perf. Output: $OUT (default /tmp/bizrq-sched).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/bizrq-sched}
mkdir -p "$out"
cd "$root"
cargo bench -p bizrq --bench portal -- --quotas 2035 --soak "${SOAK:-90}" --no-memory --no-demo >"$out/soak.txt" 2>&1 &
bench=$!
until grep -q '^soak:' "$out/soak.txt" 2>/dev/null; do
  sleep 1
  kill -0 "$bench" 2>/dev/null || { cat "$out/soak.txt"; exit 1; }
done
pid=$(pgrep -f 'release/bizrq serve' | head -n1)
perf sched record -a -o "$out/perf.data" -- sleep "${RECORD:-75}" >/dev/null 2>&1
wait "$bench"
sed -n '/^soak:/,$p' "$out/soak.txt"
perf script -i "$out/perf.data" -F comm,tid,pid,cpu,time,event,trace >"$out/perf.txt" 2>/dev/null
python3 "$root/server/benches/sched-delays.py" "$out/perf.txt" "$pid"
