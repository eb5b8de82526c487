#!/usr/bin/env bash
# Starts a local fabriq node from bin/ and keeps it in the foreground;
# Ctrl-C (or SIGTERM) stops it cleanly. Data stays in RUN_DIR between runs.
set -euo pipefail
cd "$(dirname "$0")/.."

run_dir="${RUN_DIR:-$PWD/.run}"
client_addr="${CLIENT_ADDR:-127.0.0.1:6650}"
raft_addr="${RAFT_ADDR:-127.0.0.1:7650}"
mkdir -p "$run_dir"

bin/fabriqd --node-id n1 --data-dir "$run_dir/n1" \
  --client-addr "$client_addr" --raft-addr "$raft_addr" 2>"$run_dir/n1.log" &
pid=$!
stop() {
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  echo "fabriq: node stopped; data kept in $run_dir"
}
trap 'stop; exit 0' INT TERM

for _ in $(seq 1 100); do
  if grep -q '"fabriqd ready"\|msg="fabriqd ready"' "$run_dir/n1.log" 2>/dev/null; then break; fi
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "fabriq: the node failed to start:" >&2
    cat "$run_dir/n1.log" >&2
    exit 1
  fi
  sleep 0.1
done

cat <<MSG
fabriq: one node running (data in $run_dir, log in $run_dir/n1.log).
  URL: fabriq://$client_addr
  Try, in another terminal:
    bin/fabriq stream create persistent://demo/local/hello --partitions 2
    bin/fabriq produce persistent://demo/local/hello -m one -m two
    bin/fabriq consume persistent://demo/local/hello -s me --initial-position earliest -n 2 --json
  Ctrl-C stops the node.
MSG
wait "$pid"
