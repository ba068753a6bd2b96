#!/usr/bin/env bash
# Instructions the bizrq server spends per admission, by component, counted
# by callgrind (a count does not depend on how loaded the machine is, unlike
# the wall-clock figures of the admission bench).
#
#   cargo bench -p bizrq --bench admission --no-run    # builds both binaries
#   server/benches/profile-admission.sh [N]           # N reviews (500)
#
# Starts the release `bizrq` (or $BIZRQ_BENCH_BIN) standalone on SQLite
# under callgrind with collection off, makes the quota `hot`, warms up with
# one review per workload (64), then counts the server's instructions (all
# its threads: TLS, HTTP/2, the webhook, the group commit, SQLite) while the
# bench binary sends N reviews of the bench's hot pattern, one at a time on
# one connection: 64 workloads, each changing size, so each review is a
# charge that rewrites a status of 64 workloads. Prints the total per
# admission and the self cost grouped by component (profile-admission.py).
set -euo pipefail
n=${1:-500}
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIZRQ_BENCH_BIN:-$root/target/release/bizrq}
bench=$(ls -t "$root"/target/release/deps/admission-* | grep -v '\.d$' | head -1)
work=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true' EXIT
BIZRQ_LOG=warn BIZRQ_ADMIN_PASSWORD=profile-admin-password \
  valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file="$work/cg.out" \
  "$bin" serve --listen 127.0.0.1:0 --webhook-listen 127.0.0.1:0 --probe-listen 127.0.0.1:0 \
  --webhook-max-connections-per-ip 0 --admin-token bench --resync-seconds 3600 --standalone \
  --database-url "sqlite://$work/db" >"$work/stdout" 2>"$work/stderr" &
pid=$!
for _ in $(seq 600); do grep -q 'webhook=' "$work/stdout" 2>/dev/null && break; sleep 1; done
http=$(grep -o 'http=[^ ]*' "$work/stdout" | head -1 | cut -d= -f2)
webhook=$(grep -o 'webhook=[^ ]*' "$work/stdout" | head -1 | cut -d= -f2)
curl -sf -o /dev/null -H 'authorization: Bearer bench' -H 'content-type: application/json' \
  -d '{"metadata":{"name":"hot"},"spec":{"parent":"","hard":{"requests.nvidia.com/gpu":"1e11","requests.nvidia.com/gpu.A100":"1e11","limits.cpu":"1e11","pods":"1e11"}}}' \
  "http://$http/api/v1/quotas"
url="https://$webhook/validate/workloads"
"$bench" --send-to "$url" --count 64 >/dev/null
callgrind_control -i on "$pid" >/dev/null
"$bench" --send-to "$url" --count "$n" --first 64
callgrind_control -d "$pid" >/dev/null
callgrind_control -i off "$pid" >/dev/null
kill "$pid"
wait "$pid" 2>/dev/null || true
dump=$(ls -t "$work"/cg.out* | head -1)
callgrind_annotate --inclusive=no --threshold=100 "$dump" >"$work/self.txt"
callgrind_annotate --inclusive=yes --threshold=100 "$dump" >"$work/incl.txt"
python3 "$root/server/benches/profile-admission.py" "$n" "$work/self.txt" "$work/incl.txt"
echo "callgrind output: $dump"
