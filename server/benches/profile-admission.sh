#!/usr/bin/env bash
# Instructions the bizrq server spends per admission, by component, counted
# by callgrind: a count does not depend on how loaded the machine is, unlike
# the wall-clock figures of the admission bench.
#
#   cargo bench -p bizrq --bench admission --no-run     # release builds of both
#   server/benches/profile-admission.sh                 # standalone, SQLite
#   server/benches/profile-admission.sh --cluster       # cluster mode, fake API server (no write delay)
#   PATTERN=teams server/benches/profile-admission.sh   # reviews spread over 1,000 quotas' teams
#
# Runs the admission bench with BIZRQ_BENCH_CALLGRIND: the release `bizrq`
# (or $BIZRQ_BENCH_BIN) starts under callgrind with instrumentation off; one
# client sends the bench's hot pattern (one quota, 64 workloads each
# changing size, so each review is a charge that rewrites a status of 64
# workloads) paced at 10 reviews/s for 15 s to warm up, then counting is
# switched on for the next 15 s (every thread of the server: TLS, HTTP/2,
# the webhook, the group commit, the store). One client, one review at a
# time: every batch is of one, so the count per admission does not depend
# on timing. Prints the total per admission and the self cost by component
# (profile-admission.py).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# PROFILE=debug: the debug builds (`cargo test -p bizrq --bench admission --no-run`).
profile=${PROFILE:-release}
# PATTERN=teams: reviews spread over the teams of a tree of $QUOTAS (1,000)
# quotas, as the flat-out bench sends them, instead of the hot quota.
if [ "${PATTERN:-hot}" = teams ]; then
  pattern="--quotas ${QUOTAS:-1000}"
else
  pattern="--hot --quotas 20"
fi
bench=$(ls -t "$root"/target/"$profile"/deps/admission-* | grep -v '\.d$' | head -1)
work=$(mktemp -d)
cd "$root/server"
BIZRQ_BENCH_BIN=${BIZRQ_BENCH_BIN:-$root/target/$profile/bizrq} BIZRQ_BENCH_CALLGRIND=$work \
  "$bench" --smoke --no-floor $pattern --clients 1 --rate "${RATE:-10}" --seconds "${SECONDS_PER_PHASE:-15}" \
  --write-delay-ms 0 "$@" | tee "$work/bench.txt"
n=$(grep -o 'callgrind: counted [0-9]*' "$work/bench.txt" | grep -o '[0-9]*$')
dump=$(ls -t "$work"/callgrind.out.* | grep '\.[0-9]*\.[0-9]*$' | head -1)
callgrind_annotate --auto=no --inclusive=no --threshold=100 "$dump" >"$work/self.txt"
callgrind_annotate --auto=no --inclusive=yes --threshold=100 "$dump" >"$work/incl.txt"
python3 "$root/server/benches/profile-admission.py" "$n" "$work/self.txt" "$work/incl.txt"
echo "callgrind output: $dump"
