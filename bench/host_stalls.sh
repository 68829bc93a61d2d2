#!/usr/bin/env bash
# Tuned-only QueryBest at RATE req/s beside a stall probe (stall_probe.py),
# to tell a machine that stalls every process from a daemon that pauses:
# an idle stretch first (the probe alone), then the load with each count of
# client connections in turn (default 4, then 16) against one daemon
# (synthetic evaluator, no cost model) on a 1M-trial store. Each count once.
#   bench/host_stalls.sh BIN_DIR OUT_DIR [RATE] [SECONDS] [CONNECTIONS...]
# TRIALS (default 1000000) sizes the store; IDLE_S (default 10) the idle
# stretch.
# Writes to OUT_DIR: probe.csv (per 100 ms: how late the probe woke, CPU
# time the hypervisor stole), marks.txt (wall time of each phase's start),
# load_T.txt and latency_T.csv (the load's summary and each request's due
# time and latency) and threads.txt (the daemon's threads, each second).
# bench/host_stalls_summary.py OUT_DIR sets the slow windows beside them.
set -euo pipefail
bin=$1
out=$2
rate=${3:-5000}
seconds=${4:-15}
shift $(($# < 4 ? $# : 4))
if [ $# -gt 0 ]; then connections=("$@"); else connections=(4 16); fi
if [ -d "$bin/lib" ]; then export LD_LIBRARY_PATH="$bin/lib:${LD_LIBRARY_PATH:-}"; fi
here=$(cd "$(dirname "$0")" && pwd)
dir=${EVOTUNE_BENCH_DIR:-/tmp/evotune-host-stalls}
mkdir -p "$dir" "$out"
rm -f "$dir"/store.db* "$dir/port" "$out/marks.txt"
mark() { echo "$1 $(date +%s.%N)" >>"$out/marks.txt"; }
python3 "$here/stall_probe.py" --seconds=$((${#connections[@]} * (seconds + 5) + 150)) \
  --out="$out/probe.csv" &
probe=$!
trap 'kill $probe 2>/dev/null' EXIT
mark populate
"$bin/query_best_bench" --db="$dir/store.db" --trials="${TRIALS:-1000000}" \
  --populate_only
mark idle
sleep "${IDLE_S:-10}"
"$bin/evotuned" --db="$dir/store.db" --evaluator=synthetic --cost_model=false \
  --listen=127.0.0.1:0 --port_file="$dir/port" 2>"$dir/evotuned.log" &
pid=$!
trap 'kill -TERM $pid $probe 2>/dev/null; wait $pid 2>/dev/null' EXIT
for _ in $(seq 300); do [ -s "$dir/port" ] && break; sleep 0.1; done
if [ ! -s "$dir/port" ]; then
  echo "evotuned did not start; see $dir/evotuned.log" >&2
  exit 1
fi
(while kill -0 $pid 2>/dev/null; do
  echo "$(date +%s) $(ls /proc/$pid/task | wc -l)"; sleep 1
done) >"$out/threads.txt" 2>/dev/null &
for threads in "${connections[@]}"; do
  mark "load_$threads"
  "$bin/query_best_bench" --db="$dir/store.db" \
    --address=127.0.0.1:$(cat "$dir/port") --trials="${TRIALS:-1000000}" \
    --rate="$rate" --seconds="$seconds" --threads=$threads --wait_for_model=false \
    --model_wait_s=0 --latency_csv="$out/latency_$threads.csv" \
    >"$out/load_$threads.txt" 2>&1 || true
  cat "$out/load_$threads.txt"
done
mark done
kill $probe 2>/dev/null || true
