#!/usr/bin/env bash
# QueryBest over gRPC on loopback with 1M trials in the store.
#   bench/query_best.sh [RATE] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
./deploy/build.sh >/dev/null
rate=${1:-5000}
seconds=${2:-20}
dir=${EVOTUNE_BENCH_DIR:-/tmp/evotune-bench}
mkdir -p "$dir"
db="$dir/bench.db"
build/bin/query_best_bench --db="$db" --trials=1000000 --populate_only
rm -f "$dir/port"
build/bin/evotuned --db="$db" --evaluator=synthetic \
  --listen=127.0.0.1:0 --port_file="$dir/port" 2>"$dir/evotuned.log" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
for _ in $(seq 100); do [ -s "$dir/port" ] && break; sleep 0.1; done
build/bin/query_best_bench --db="$db" \
  --address=127.0.0.1:$(cat "$dir/port") --rate="$rate" --seconds="$seconds"
