#!/usr/bin/env bash
# QueryBest with untuned problems among the queries while jobs store trials:
# one daemon (synthetic evaluator, no cost model, so that the nearest rule
# answers every untuned query) on a copy of a store that
# `query_best_bench --populate_only` filled.
#   bench/query_best_with_jobs.sh BIN_DIR STORE.db [JOBS] [RATE] [SECONDS]
# JOBS exhaustive flash_fwd jobs (problems the store already has trials of)
# are submitted just before the load. Prints the load's summary and the jobs;
# writes each request's latency to $EVOTUNE_BENCH_DIR/latency.csv. TRIALS
# (default 1000000) is the store's size, as it was filled.
set -euo pipefail
bin=$1
store=$2
jobs=${3:-8}
rate=${4:-1000}
seconds=${5:-15}
# A folder from ../shared/tools/gpu-bundle keeps the libraries in lib/.
if [ -d "$bin/lib" ]; then export LD_LIBRARY_PATH="$bin/lib:${LD_LIBRARY_PATH:-}"; fi
dir=${EVOTUNE_BENCH_DIR:-/tmp/evotune-bench-jobs}
mkdir -p "$dir"
db="$dir/store.db"
rm -f "$db" "$db-wal" "$db-shm" "$dir/port"
cp "$store" "$db"
"$bin/evotuned" --db="$db" --evaluator=synthetic --cost_model=false \
  --listen=127.0.0.1:0 --port_file="$dir/port" 2>"$dir/evotuned.log" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
for _ in $(seq 300); do [ -s "$dir/port" ] && break; sleep 0.1; done
address=127.0.0.1:$(cat "$dir/port")
sleep 2  # The stand-in worker registers.
for b in $(seq "$jobs"); do
  "$bin/evotune" --address="$address" submit --template_name=flash_fwd \
    --batch="$b" --heads=8 --seq_q=64 --seq_k=64 --head_dim=64 \
    --strategy=exhaustive --max_trials=5000 >/dev/null
done
"$bin/query_best_bench" --db="$db" --address="$address" --rate="$rate" \
  --seconds="$seconds" --trials="${TRIALS:-1000000}" \
  --untuned_fraction=0.1 --untuned_problems=1000000 \
  --wait_for_model=false --model_wait_s=0 --seed=7 \
  --latency_csv="$dir/latency.csv"
"$bin/evotune" --address="$address" jobs
