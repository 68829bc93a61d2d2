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
#   bench/tune_model_bars.sh BIN STATE exhaustive [COUNT] # vs the optimum
#
# tune and random: the envelope tuned by the evolutionary search (with the
# cost model the daemon trains meanwhile) or by random search, BUDGET each
# (default 8m), its log in STATE/STRATEGY.log. defaults: the fitted defaults
# alone (every bucket exported by a daemon that has tuned nothing).
# compare: COUNT (default 200) random shapes of the envelope, each served
# by every bundle made so far, timed together beside SDPA's backends
# (bench/sdpa_compare.py --interleave, the op through evolutionary.evtb),
# then bench/model_shapes_summary.py: the search's worth table.
# exhaustive: COUNT (default 10) buckets picked at random, each searched
# exhaustively by a fresh daemon, its winners exported to exhaustive.evtb
# and timed beside evolutionary.evtb's kernels in one run: the served
# config over the exhaustive optimum, bucket by bucket (exhaustive_bars.json).
# Needs PYTHONPATH=python:bench and EVOTUNE_RUNTIME_LIBRARY for compare;
# $EVOTUNED_FLAGS go to the daemons (e.g. --evaluator=synthetic
# --synthetic_cc=9.0 to try the steps on a machine without a GPU).
set -euo pipefail
bin=$1 state=$2 step=$3
mkdir -p "$state"
here=$(cd "$(dirname "$0")" && pwd)
model='{"num_attention_heads": 32, "num_key_value_heads": 8,
  "head_dim": 128, "torch_dtype": "bfloat16"}'
# shellcheck disable=SC2054  # Commas inside a flag's value.
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

buckets() {  # the envelope's buckets, one problem key a line
  "${cli[@]}" tune-model --model_config="$model" "${envelope[@]}" \
    --dry_run 2>/dev/null | grep -E '^b[0-9]+_'
}

key_flags() {  # key_flags KEY: the problem flags of a bucket's key
  local n='([0-9]+)' w='([a-z0-9]+)'
  [[ $1 =~ ^b${n}_h${n}_kv${n}_q${n}_k${n}_d${n}_(full|causal)_${w}_${w}$ ]] ||
    { echo "not a bucket key: $1" >&2; return 1; }
  local m=("${BASH_REMATCH[@]}")
  echo "--batch=${m[1]} --heads=${m[2]} --kv_heads=${m[3]} --seq_q=${m[4]}" \
    "--seq_k=${m[5]} --head_dim=${m[6]} --causal=$([ "${m[7]}" = causal ] &&
      echo true || echo false) --dtype=${m[8]} --layout=${m[9]}"
}

exhaustive() {  # exhaustive COUNT
  [ -f "$state/evolutionary.evtb" ] ||
    { echo "exhaustive: run the tune step first" >&2; exit 2; }
  daemon exhaustive
  buckets | shuf -n "$1" --random-source=<(yes) >"$state/picked.txt"
  local jobs=() key
  while read -r key; do
    # shellcheck disable=SC2046  # The flags are words.
    jobs+=("$("${cli[@]}" submit $(key_flags "$key") --strategy=exhaustive \
      --max_trials=100000)")
  done <"$state/picked.txt"
  for j in "${jobs[@]}"; do
    "${cli[@]}" watch "$j" >>"$state/exhaustive.log" 2>&1
  done
  "${cli[@]}" export --problems="$state/picked.txt" \
    --output="$state/exhaustive.evtb" >>"$state/exhaustive.log" 2>&1
  python3 "$here/model_shapes.py" --bundle="$state/evolutionary.evtb" \
    --bundle="$state/exhaustive.evtb" --problems="$state/picked.txt" \
    --heads=32 --kv_heads=8 --head_dim=128 >"$state/exhaustive_plan.json"
  python3 "$here/sdpa_compare.py" "$state/exhaustive_plan.json" --interleave \
    --json="$state/exhaustive_run.json" --commit="${COMMIT:-unknown}" \
    >"$state/exhaustive_run.log" 2>&1
  python3 "$here/model_shapes_summary.py" "$state/exhaustive_run.json" \
    --versus=exhaustive --json="$state/exhaustive_bars.json"
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
    buckets >"$state/buckets.txt"
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
  exhaustive) exhaustive "${4:-10}" ;;
  *) echo "unknown step $step (tune, random, defaults, compare, exhaustive)" >&2
    exit 2 ;;
esac
