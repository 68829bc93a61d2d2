#!/usr/bin/env bash
# On a GPU machine, from a bundle made by ../shared/tools/gpu-bundle: runs the
# GPU tests, then the daemon on the seed problem with the CUDA evaluator.
#   bench/gpu_smoke.sh BUNDLE_DIR OUT_DIR
set -uo pipefail
b=$1
out=$2
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee "$out/gpu.txt"
"$b/run" cuda_evaluator_test 2>&1 | tee "$out/cuda_evaluator_test.log" | tail -15
work=$(mktemp -d)
"$b/run" evotuned --db="$work/db" --listen=127.0.0.1:0 --port_file="$work/port" \
  2>"$out/evotuned.log" &
pid=$!
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
export EVOTUNE_ADDRESS=127.0.0.1:$(cat "$work/port")
job=$("$b/run" evotune submit --template_name=naive --max_trials=25)
"$b/run" evotune watch "$job" | tail -3
"$b/run" evotune best --k=5 | tee "$out/best.txt"
"$b/run" evotune --json job "$job" >"$out/job.json"
kill -TERM $pid; wait $pid
cp "$work/db" "$out/seed.db" 2>/dev/null
tail -5 "$out/evotuned.log"
