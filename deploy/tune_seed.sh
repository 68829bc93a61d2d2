#!/usr/bin/env bash
# Builds evotune, starts evotuned on its SQLite store and tunes the seed
# problem (B=1 H=8 S=512 D=64 fp16) with flash_fwd on the first GPU (an
# evolutionary search of 40 trials), then prints the best
# configs. Extra arguments go to `evotune submit` (e.g. --max_trials=10).
#
# Environment: EVOTUNE_ADDRESS (default 127.0.0.1:7433), EVOTUNE_DB (default
# under $XDG_STATE_HOME/evotune/).
set -euo pipefail
cd "$(dirname "$0")/.."
./deploy/build.sh >/dev/null
bin=build/bin
address=${EVOTUNE_ADDRESS:-127.0.0.1:7433}
export EVOTUNE_ADDRESS=$address

started=""
if ! "$bin/evotune" templates >/dev/null 2>&1; then
  log=$(mktemp -t evotuned.XXXXXX.log)
  "$bin/evotuned" --listen="$address" ${EVOTUNE_DB:+--db="$EVOTUNE_DB"} 2>"$log" &
  started=$!
  trap '[ -n "$started" ] && kill -TERM "$started" 2>/dev/null && wait "$started" 2>/dev/null' EXIT
  for _ in $(seq 50); do
    "$bin/evotune" templates >/dev/null 2>&1 && break
    kill -0 "$started" 2>/dev/null || { cat "$log" >&2; exit 1; }
    sleep 0.1
  done
  echo "evotuned started (log: $log)"
  grep -h "device:\|no CUDA device" "$log" | sed 's/^[^ ]* [IE] /  /' || true
fi

if ! job=$("$bin/evotune" submit --template_name=flash_fwd --batch=1 --heads=8 \
    --seq_q=512 --head_dim=64 --dtype=fp16 --max_trials=40 "$@" 2>&1); then
  case "$job" in
    *"no CUDA device"*)
      echo "This machine has no usable NVIDIA GPU, so nothing can be tuned here:" >&2
      echo "  ${job#evotune: }" >&2 ;;
    *) echo "$job" >&2 ;;
  esac
  exit 1
fi
echo "tuning the seed problem as job $job"
"$bin/evotune" watch "$job"
"$bin/evotune" best --batch=1 --heads=8 --seq_q=512 --head_dim=64 --dtype=fp16 --k=5
