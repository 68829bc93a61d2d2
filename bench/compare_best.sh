#!/usr/bin/env bash
# On a GPU machine with PyTorch: times the fastest tuned config of a problem
# beside PyTorch SDPA's flash and cuDNN backends in one process
# (bench/sdpa_compare.py) and writes that comparison run's JSON, which
# `evotune report JOB --compare=OUT.json` shows beside the job.
#
#   bench/compare_best.sh BIN_DIR OUT.json [best flags: problem, --template_name]
#
# BIN_DIR holds evotune and export_kernel (and libevotune_runtime.so is there
# or in BIN_DIR/../lib); EVOTUNE_ADDRESS names the daemon.
# COLD_L2=1 times every call alone from a cold L2 (sdpa_compare.py --cold_l2).
set -euo pipefail
here=$(dirname "$0")
source "$here/suite_lib.sh"
bin=$1
out=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bin/evotune" --json best "$@" --k=1 >"$work/best.json"
read -r template config problem < <(python3 "$here/best_config.py" "$work/best.json")
"$bin/export_kernel" --template_name="$template" --config="$config" \
  --problem="$problem" --out="$work/kernel" >/dev/null
printf '[{"name": "best", "bundle": "%s", "problem": "%s"}]\n' \
  "$work/kernel.evtb" "$problem" >"$work/plan.json"
use_runtime "$bin"
commit=$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)
cold=()
[[ "${COLD_L2:-0}" == 1 ]] && cold=(--cold_l2)
python3 "$here/sdpa_compare.py" "$work/plan.json" --interleave --json "$out" \
  --commit "$commit" "${cold[@]}"
