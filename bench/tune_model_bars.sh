#!/usr/bin/env bash
# Issue bars of `evotune tune-model` on a GPU machine, a step at a time (each
# fits one run of a few minutes), for the Llama-3-8B envelope (32 heads on
# 8, head_dim 128, bf16; batch up to 256, context up to 8,192, prefill
# chunks of 2,048, decode rows of 1 and 4 queries). Each tuning step runs a
# fresh daemon on a store of its own in STATE.
#
#   bench/tune_model_bars.sh BIN STATE tune [BUDGET]      # evolutionary.evtb
#   bench/tune_model_bars.sh BIN STATE random [BUDGET]    # random.evtb
#   bench/tune_model_bars.sh BIN STATE defaults           # defaults.evtb
#   bench/tune_model_bars.sh BIN STATE compare [COUNT]    # shapes.json, bars
#
# tune and random: the envelope tuned by the evolutionary search (with the
# cost model the daemon trains meanwhile) or by random search, BUDGET each
# (default 8m), its log in STATE/STRATEGY.log. defaults: the fitted defaults
# alone (every bucket exported by a daemon that has tuned nothing).
# compare: COUNT (default 200) random shapes of the envelope, each served
# by every bundle made so far, timed together beside SDPA's backends
# (bench/sdpa_compare.py --interleave, the op through evolutionary.evtb),
# then bench/model_shapes_summary.py: the search's worth table.
# Needs PYTHONPATH=python:bench and EVOTUNE_RUNTIME_LIBRARY for compare;
# $EVOTUNED_FLAGS go to the daemons (e.g. --evaluator=synthetic
# --synthetic_cc=9.0 to try the steps on a machine without a GPU).
set -euo pipefail
bin=$1 state=$2 step=$3
mkdir -p "$state"
here=$(cd "$(dirname "$0")" && pwd)
model='{"num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "torch_dtype": "bfloat16"}'
envelope=(--max_batch=256 --max_context=8192 --prefill_chunk=2048
  --decode_queries=1,4)

pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; true' EXIT
daemon() {  # daemon NAME: a fresh daemon on STATE/NAME.db; sets $cli.
  rm -f "$state/$1.db"* "$state/$1.port"
  # shellcheck disable=SC2086  # The flags are words.
  "$bin/evotuned" --db="$state/$1.db" --listen=127.0.0.1:0 \
    --port_file="$state/$1.port" ${EVOTUNED_FLAGS:-} 2>"$state/$1.daemon.log" &
  pid=$!
  for _ in $(seq 300); do [ -s "$state/$1.port" ] && break; sleep 0.1; done
  cli=("$bin/evotune" --address=127.0.0.1:"$(cat "$state/$1.port")")
}

tune() {  # tune STRATEGY BUDGET
  daemon "$1"
  local start=$SECONDS
  "${cli[@]}" tune-model --model_config="$model" "${envelope[@]}" \
    --strategy="$1" --budget="$2" --output="$state/$1.evtb" \
    >"$state/$1.log" 2>&1
  echo "$1: $(tr '\r' '\n' <"$state/$1.log" | grep '^tune-model' | tail -1)" \
    "($((SECONDS - start)) s with the export)"
}

case $step in
  tune) tune evolutionary "${4:-8m}" ;;
  random) tune random "${4:-8m}" ;;
  defaults)
    daemon defaults
    "${cli[@]}" tune-model --model_config="$model" "${envelope[@]}" \
      --dry_run 2>/dev/null | grep -E '^b[0-9]+_' >"$state/buckets.txt"
    "${cli[@]}" export --problems="$state/buckets.txt" \
      --output="$state/defaults.evtb" >"$state/defaults.log" 2>&1
    echo "defaults: $(wc -l <"$state/buckets.txt") buckets exported" ;;
  compare)
    bundles=()
    for b in evolutionary random defaults; do
      [ -f "$state/$b.evtb" ] && bundles+=(--bundle="$state/$b.evtb")
    done
    python3 "$here/model_shapes.py" "${bundles[@]}" --heads=32 --kv_heads=8 \
      --head_dim=128 --max_batch=256 --max_context=8192 \
      --prefill_chunk=2048 --count="${4:-200}" >"$state/shapes_plan.json"
    python3 "$here/sdpa_compare.py" "$state/shapes_plan.json" --interleave \
      --bundle="$state/evolutionary.evtb" --json="$state/shapes.json" \
      --commit="${COMMIT:-unknown}" >"$state/shapes.log" 2>&1
    python3 "$here/model_shapes_summary.py" "$state/shapes.json" \
      --json="$state/bars.json" ;;
  *) echo "unknown step $step (tune, random, defaults, compare)" >&2; exit 2 ;;
esac
