#!/usr/bin/env bash
# Starts a local fabriq cluster of NODES nodes (default 3) from bin/ and keeps it in the
# foreground; Ctrl-C (or SIGTERM) stops every node cleanly. Data and logs
# stay in RUN_DIR between runs. Each node's pid is in RUN_DIR/NODE.pid; a
# node that dies (killed, crashed) is started again a second later, as a
# supervisor would, so that `fabriq bench failover` can kill leaders.
# PPROF=1 serves each node's Go profiles on 127.0.0.1:6060 + its index.
# FABRIQD_FLAGS adds flags to every node's command line (split on spaces).
set -euo pipefail
cd "$(dirname "$0")/.."

run_dir="${RUN_DIR:-$PWD/.run}"
nodes="${NODES:-3}"
mkdir -p "$run_dir"

pids=()
stop() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -f "$run_dir"/n*.pid
  echo "fabriq: cluster stopped; data and logs kept in $run_dir"
}
trap 'stop; exit 0' INT TERM

# start_node I: starts node I (0-based); its log is appended to.
start_node() {
  local i=$1 id="n$(($1 + 1))"
  bin/fabriqd --node-id "$id" --data-dir "$run_dir/$id" \
    --client-addr "127.0.0.1:$((6650 + i))" --raft-addr "127.0.0.1:$((7650 + i))" \
    --gossip-addr "127.0.0.1:$((7946 + i))" --http-addr "127.0.0.1:$((8080 + i))" \
    --bootstrap-expect "$nodes" --join "127.0.0.1:$((7946 + (i + 1) % nodes))" \
    ${PPROF:+--pprof-addr "127.0.0.1:$((6060 + i))"} ${FABRIQD_FLAGS:-} \
    2>>"$run_dir/$id.log" &
  pids[i]=$!
  echo "$!" >"$run_dir/$id.pid"
}

for i in $(seq 0 $((nodes - 1))); do
  : >"$run_dir/n$((i + 1)).log"
  start_node "$i"
done

for i in $(seq 1 "$nodes"); do
  for _ in $(seq 1 300); do
    if grep -q 'fabriqd ready' "$run_dir/n$i.log" 2>/dev/null; then break; fi
    for pid in "${pids[@]}"; do
      if ! kill -0 "$pid" 2>/dev/null; then
        echo "fabriq: a node failed to start; its log:" >&2
        tail -n 20 "$run_dir"/n*.log >&2
        stop
        exit 1
      fi
    done
    sleep 0.1
  done
  if ! grep -q 'fabriqd ready' "$run_dir/n$i.log"; then
    echo "fabriq: node n$i not ready after 30s; see $run_dir/n$i.log" >&2
    stop
    exit 1
  fi
done

cat <<MSG
fabriq: $nodes nodes running on 127.0.0.1 (client ports 6650-$((6650 + nodes - 1))); data and logs in $run_dir.
  URL: fabriq://$(seq -s, -f '127.0.0.1:%g' 6650 $((6650 + nodes - 1)))
  Try, in another terminal:
    bin/fabriq produce my-topic -m hi
    bin/fabriq consume my-topic -s s --initial-position earliest -n 1
    bin/fabriq tenant create demo && bin/fabriq fabric create demo/local
    bin/fabriq stream create persistent://demo/local/hello --partitions 2 --replicas 3
    bin/fabriq produce persistent://demo/local/hello -m one -m two
    bin/fabriq consume persistent://demo/local/hello -s me --initial-position earliest -n 2 --json
    bin/fabriq cluster status
    bin/fabriq bench --replicas 3 --consumers 2 -t shared --duration 10s
  A node that dies is started again (pids in $run_dir/NODE.pid). Ctrl-C stops the cluster.
MSG

# Supervise: start again a node that exits while the cluster runs.
while true; do
  wait -n "${pids[@]}" || true
  for i in "${!pids[@]}"; do
    if ! kill -0 "${pids[i]}" 2>/dev/null; then
      wait "${pids[i]}" 2>/dev/null || true
      echo "fabriq: node n$((i + 1)) exited; starting it again (log: $run_dir/n$((i + 1)).log)" >&2
      sleep 1
      start_node "$i"
    fi
  done
done
