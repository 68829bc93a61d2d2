#!/usr/bin/env bash
# On a GPU machine, from a bundle made by ../shared/tools/gpu-bundle: runs the
# GPU tests, then the daemon with the CUDA evaluator: naive on the seed
# problem, then the suite's decode-d64 problem with three templates whose
# fastest lie close together, so that each job's confirmation times the
# others' fastest beside its own (evotuned.log's "timed again together").
#   bench/gpu_smoke.sh BUNDLE_DIR OUT_DIR [TRIALS]   (GPU_TESTS=0: daemon only)
set -uo pipefail
b=$1
out=$2
trials=${3:-25}
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee "$out/gpu.txt"
if [ "${GPU_TESTS:-1}" != 0 ]; then
  "$b/run" cuda_evaluator_test 2>&1 | tee "$out/cuda_evaluator_test.log" | tail -15
fi
work=$(mktemp -d)
"$b/run" evotuned --db="$work/db" --listen=127.0.0.1:0 --port_file="$work/port" \
  2>"$out/evotuned.log" &
pid=$!
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
export EVOTUNE_ADDRESS=127.0.0.1:$(cat "$work/port")
tune() {  # NAME TEMPLATE PROBLEM_FLAGS...
  local name=$1 t=$2
  shift 2
  job=$("$b/run" evotune submit --template_name="$t" --max_trials="$trials" "$@")
  "$b/run" evotune watch "$job" | tail -1
  "$b/run" evotune --json job "$job" >"$out/job-$name-$t.json"
}
tune seed naive
"$b/run" evotune best --k=5 | tee "$out/best-seed.txt"
decode=(--batch=32 --heads=16 --seq_q=1 --seq_k=2048)
for t in flash_fwd flash_fwd_tma decode_fwd; do tune decode-d64 "$t" "${decode[@]}"; done
"$b/run" evotune best --k=16 "${decode[@]}" | tee "$out/best-decode-d64.txt"
kill -TERM $pid; wait $pid
cp "$work/db" "$out/smoke.db" 2>/dev/null
grep "timed again together" "$out/evotuned.log"
tail -3 "$out/evotuned.log"
