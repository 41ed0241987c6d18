#!/usr/bin/env bash
# The server at small budgets (issue 14's Bench): for each budget, starts `k3 serve` on the
# model (127.0.0.1, a free port, --parallel 8), runs bench/serve_clients.py's throughput mode
# at 1, 2, 4 and 8 concurrent clients against it, and stops it (SIGTERM, drained).
#   bash bench/serve_budgets.sh <k3> <model_dir> <tok_dir> <out_prefix> <budget>...
# A budget is `resident` or decimal GB for --mem-gb; each writes <out_prefix>-<budget>.tsv.
# Bounded: every request times out after 600 s and the server is killed if it outlives that.
set -eu
K3=$1 MODEL=$2 TOK=$3 PREFIX=$4; shift 4
here=$(cd "$(dirname "$0")" && pwd)
for b in "$@"; do
  mem=(); [ "$b" = resident ] || mem=(--mem-gb "$b")
  log=$(mktemp /tmp/serve-bench.XXXX)
  cmd=("$K3" serve "$MODEL" --tok "$TOK" --port 0 --ctx 512 --parallel 8 --snapshots 8 "${mem[@]}")
  "${cmd[@]}" > "$log" 2>&1 &
  pid=$!
  port=
  for _ in $(seq 1 600); do
    port=$(sed -n 's/^k3 serve: ready on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log" | head -1)
    [ -n "$port" ] && break
    kill -0 $pid 2>/dev/null || { cat "$log" >&2; exit 3; }
    sleep 1
  done
  [ -n "$port" ] || { kill $pid; cat "$log" >&2; exit 3; }
  grep -E "^(memory plan|  budget|context|k3 serve: ready)" "$log" | sed 's/^/# /' > "$PREFIX-$b.plan"
  python3 "$here/serve_clients.py" "http://127.0.0.1:$port" "$(basename "$MODEL")" \
    --clients 1,2,4,8 --tokens 4 --rounds 1 --timeout 600 \
    --tsv "$PREFIX-$b.tsv" --server-cmd "${cmd[*]}"
  cat "$PREFIX-$b.plan" >> "$PREFIX-$b.tsv"
  rm -f "$PREFIX-$b.plan"
  kill -TERM $pid
  wait $pid || true
  rm -f "$log"
done
