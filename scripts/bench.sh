#!/usr/bin/env bash
# Measures a local fabriq cluster the way the peer benchmarks measure
# theirs: NODES nodes (default 3) started by scripts/run.sh on 127.0.0.1,
# `fabriq bench` workloads of 1 KiB messages against them, each node's RSS
# after the load, and leader kills. Everything goes under BENCH_DIR
# (default /tmp/fabriqbench, emptied first); each step's JSON result is
# kept there and a summary is printed.
#
#   scripts/bench.sh                 3 nodes, 3 replicas
#   NODES=5 scripts/bench.sh         5 nodes
#   KILLS=0 scripts/bench.sh         no failover step
set -euo pipefail
cd "$(dirname "$0")/.."

base="${BENCH_DIR:-/tmp/fabriqbench}"
nodes="${NODES:-3}"
replicas="${REPLICAS:-3}"
n_async="${N_ASYNC:-200000}"
n_sync="${N_SYNC:-5000}"
kills="${KILLS:-10}"

make -s build
rm -rf "$base"
mkdir -p "$base"
RUN_DIR="$base/run" NODES="$nodes" scripts/run.sh >"$base/run.out" 2>&1 &
run_pid=$!
trap 'kill -TERM $run_pid 2>/dev/null; wait $run_pid 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do
  grep -q 'nodes running' "$base/run.out" && break
  kill -0 "$run_pid" 2>/dev/null || { cat "$base/run.out"; exit 1; }
  sleep 0.1
done
grep -q 'nodes running' "$base/run.out" || { echo "the cluster did not start; see $base/run.out" >&2; exit 1; }
export FABRIQ_URL="fabriq://$(seq -s, -f '127.0.0.1:%g' 6650 $((6650 + nodes - 1)))"
echo "# $(date -u +%FT%TZ) fabriq $(git describe --always --dirty) nodes=$nodes replicas=$replicas nproc=$(nproc)"

# step LABEL ARGS...: one fabriq bench run; its JSON in $base/LABEL.json.
step() {
  local label=$1
  shift
  bin/fabriq bench --json "$@" >"$base/$label.json" 2>>"$base/progress.log"
  jq -r --arg l "$label" '"\($l): produced \(.produced.messages) at \(.produced.msgs_per_sec|floor) msg/s, publish p50 \(.produced.publish_latency.p50_ms) p99 \(.produced.publish_latency.p99_ms) ms; consumed \(.consumed.messages) at \(.consumed.msgs_per_sec|floor) msg/s"' "$base/$label.json"
}

# The streams keep what is acknowledged (or was never subscribed to), so
# that the consume steps read the backlog the produce steps left.
for s in async-p1:1 async-p4:4 async-p16:16 sync:1 keyed:1; do
  bin/fabriq stream create "${s%%:*}" --partitions "${s##*:}" --replicas "$replicas" --retention-time -1 --retention-size -1 >/dev/null
done
for p in 1 4 16; do
  step "async-p$p" --stream "async-p$p" --partitions "$p" --replicas "$replicas" --consumers 0 --messages "$n_async" --in-flight 1024
done
step consume-1 --stream async-p1 --producers 0 --consumers 1 --subscription c1 --initial-position earliest --messages "$n_async"
step consume-shared-4 --stream async-p1 --producers 0 --consumers 4 -t shared --subscription c4 --initial-position earliest --messages "$n_async"
step sync --stream sync --replicas "$replicas" --sync --consumers 0 --messages "$n_sync"
step keyed-async --stream keyed --replicas "$replicas" --keys 1000 --consumers 0 --messages "$n_async" --in-flight 1024
step consume-key-shared-3 --stream keyed --producers 0 --consumers 3 -t key_shared --subscription ks --initial-position earliest --messages "$n_async"
for i in $(seq 1 "$nodes"); do
  echo "rss n$i: $(awk '/^(VmRSS|RssAnon|RssFile)/{printf "%s %.1f MB ", $1, $2/1024}' "/proc/$(cat "$base/run/n$i.pid")/status")"
done
if [[ $kills -gt 0 ]]; then
  bin/fabriq bench failover --json --kills "$kills" --replicas "$replicas" \
    --kill "kill -KILL \$(cat $base/run/\$FABRIQ_NODE.pid)" >"$base/failover.json" 2>>"$base/progress.log"
  jq -r '"failover: kill -> first ack median \(.to_ack_median_ms) max \(.to_ack_max_ms) ms; kill -> first delivery median \(.to_delivery_median_ms) max \(.to_delivery_max_ms) ms; acked \(.acked) missing \(.missing)"' "$base/failover.json"
fi
