#!/usr/bin/env bash
# Builds evotune, starts evotuned on its SQLite store and tunes the seed
# problem (B=1 H=8 S=512 D=64 fp16) with flash_fwd on the first GPU (an
# evolutionary search of 40 trials), then prints the best configs and
# writes the job's report (evotune-JOB.html, plots of the search; with
# PyTorch present, the winner timed beside SDPA by bench/compare_best.sh).
# Extra arguments go to `evotune submit` (e.g. --max_trials=10).
#
#   deploy/tune_seed.sh [--simulate[=LANDSCAPE.csv]] [submit flags...]
#
# --simulate runs the same flow with no GPU: a daemon of its own answers
# every trial from measurements recorded on an H100 (default
# tests/data/flash_fwd_landscapes_h100.csv), on a temporary store; the
# report's comparison with SDPA is a recorded H100 run too.
#
# Environment: EVOTUNE_ADDRESS (default 127.0.0.1:7433), EVOTUNE_DB (default
# under $XDG_STATE_HOME/evotune/).
set -euo pipefail
cd "$(dirname "$0")/.."
landscape=""
recorded_comparison=bench/results/2026-11-23_h100_6d9dd1b_flash-fwd-tma-snake-splits.json
case "${1:-}" in
  --simulate) landscape=tests/data/flash_fwd_landscapes_h100.csv; shift ;;
  --simulate=*) landscape=${1#--simulate=}; shift ;;
esac
./deploy/build.sh >/dev/null
bin=build/bin
address=${EVOTUNE_ADDRESS:-127.0.0.1:7433}

started=""
stop_daemon() {
  [ -n "$started" ] && kill -TERM "$started" 2>/dev/null && wait "$started" 2>/dev/null
  [ -z "${sim_dir:-}" ] || rm -rf "$sim_dir"
}
trap stop_daemon EXIT
# start_daemon LOG PORT_FILE FLAGS...: evotuned in the background until it
# answers; with a PORT_FILE, on the port it writes there.
start_daemon() {
  local log=$1 port_file=$2
  shift 2
  "$bin/evotuned" "$@" 2>"$log" &
  started=$!
  for _ in $(seq 100); do
    if [ -n "$port_file" ] && [ -s "$port_file" ]; then
      export EVOTUNE_ADDRESS=127.0.0.1:$(cat "$port_file")
    fi
    "$bin/evotune" templates >/dev/null 2>&1 && return 0
    kill -0 "$started" 2>/dev/null || { cat "$log" >&2; exit 1; }
    sleep 0.1
  done
  cat "$log" >&2
  exit 1
}

if [ -n "$landscape" ]; then
  [ -f "$landscape" ] || { echo "--simulate: no file $landscape" >&2; exit 2; }
  sim_dir=$(mktemp -d)
  start_daemon "$sim_dir/evotuned.log" "$sim_dir/port" --listen=127.0.0.1:0 \
    --port_file="$sim_dir/port" --db="$sim_dir/evotune.db" \
    --simulate="$landscape"
  echo "REPLAY: no kernel runs here. Every trial is answered from measurements"
  echo "recorded on $(sed -n 's/^# gpu: //p' "$landscape" | head -1) ($landscape)."
else
  export EVOTUNE_ADDRESS=$address
  if ! "$bin/evotune" templates >/dev/null 2>&1; then
    log=$(mktemp -t evotuned.XXXXXX.log)
    start_daemon "$log" "" --listen="$address" ${EVOTUNE_DB:+--db="$EVOTUNE_DB"}
    echo "evotuned started (log: $log)"
    grep -h "device:\|no CUDA device" "$log" | sed 's/^[^ ]* [IE] /  /' || true
  fi
fi

seed=(--batch=1 --heads=8 --seq_q=512 --head_dim=64 --dtype=fp16)
if ! job=$("$bin/evotune" submit --template_name=flash_fwd "${seed[@]}" \
    --max_trials=40 "$@" 2>&1); then
  case "$job" in
    *"no CUDA device"*)
      echo "This machine has no usable NVIDIA GPU, so nothing can be tuned here:" >&2
      echo "  ${job#evotune: }" >&2
      echo "To see the whole flow on measurements recorded on an H100, run" >&2
      echo "  ./deploy/tune_seed.sh --simulate" >&2 ;;
    *) echo "$job" >&2 ;;
  esac
  exit 1
fi
echo "tuning the seed problem as job $job"
"$bin/evotune" watch "$job"
"$bin/evotune" best "${seed[@]}" --k=5
# The report shows the winner beside PyTorch SDPA when a comparison run exists.
compare=()
if [ -n "$landscape" ]; then
  compare=(--compare="$recorded_comparison")
  echo "The report also shows a recorded H100 run of evotune's fastest seed"
  echo "kernels beside PyTorch SDPA ($recorded_comparison)."
elif python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  run=$(mktemp -t evotune-compare.XXXXXX.json)
  echo "timing the winner beside PyTorch SDPA (bench/compare_best.sh)"
  if bench/compare_best.sh "$bin" "$run" --template_name=flash_fwd "${seed[@]}"; then
    compare=(--compare="$run")
  fi
else
  echo "(no PyTorch with CUDA here: the report does not compare with SDPA)"
fi
echo "report (plots of the search): $("$bin/evotune" report "$job" "${compare[@]}")"
