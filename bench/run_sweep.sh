#!/usr/bin/env bash
# On a GPU machine: tunes every problem of a benchmark suite with evotuned,
# exports each problem's best config and times it side by side with PyTorch
# SDPA (bench/sdpa_compare.py).
#
#   bench/run_sweep.sh BUNDLE SHAPES_JSON OUT_DIR [TRIALS] [TEMPLATES] [STRATEGY]
#
# BUNDLE holds evotuned, evotune, export_kernel and libevotune_runtime.so
# (../shared/tools/gpu-bundle).
# TEMPLATES is one template or a comma-separated list: each problem is tuned
# with each, and the fastest config of any of them is compared. PROBLEMS (a
# comma-separated list of suite names) restricts the suite; COMMIT names the
# kernels' commit in the JSON.
set -uo pipefail
source "$(dirname "$0")/suite_lib.sh"
b=$1
shapes=$2
out=$3
trials=${4:-48}
templates=${5:-flash_fwd}
strategy=${6:-random}
work=$(mktemp -d)
mkdir -p "$work/kernels"

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
start_evotuned "$b" "$work" "$out/sweep.db" "$out/evotuned.log"
pid=$EVOTUNED_PID
suite_problems "$shapes" "${PROBLEMS:-}" >"$work/problems"

echo "[" >"$work/plan.json"
sep=""
while read -r name flags; do
  start=$(date +%s)
  for template in ${templates//,/ }; do
    job=$("$b/run" evotune submit --template_name="$template" $flags \
      --max_trials="$trials" --strategy="$strategy" --seed=1) || continue
    "$b/run" evotune watch "$job" >"$work/watch-$name-$template.log" 2>&1
    echo "$name $template: $(tail -1 "$work/watch-$name-$template.log")"
  done
  echo "$name: $(( $(date +%s) - start )) s"
  "$b/run" evotune --json best $flags --k=1 >"$work/best.json"
  read -r template config problem < <(python3 bench/best_config.py "$work/best.json")
  "$b/run" export_kernel --template_name="$template" --config="$config" \
    --problem="$problem" --out="$work/kernels/$name" || continue
  printf '%s{"name": "%s", "bundle": "%s", "problem": "%s"}\n' "$sep" "$name" \
    "$work/kernels/$name.evtb" "$problem" >>"$work/plan.json"
  sep=","
done <"$work/problems"
echo "]" >>"$work/plan.json"
kill -TERM $pid
wait $pid
use_runtime "$b" || exit 1
PYTHONUNBUFFERED=1 python3 bench/sdpa_compare.py "$work/plan.json" --interleave \
  --json "$out/compare.json" --commit "${COMMIT:-unknown}" | tee "$out/compare.txt"
