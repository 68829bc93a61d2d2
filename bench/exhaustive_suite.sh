#!/usr/bin/env bash
# On a GPU machine: an exhaustive search (every config the space accepts on
# this GPU) of each template on each problem of a benchmark suite, through
# evotuned, into the store DB. Resumable: the store already holding a trial
# answers it, so a second run over the same DB only measures what is left.
#
#   bench/exhaustive_suite.sh BUNDLE SHAPES_JSON DB TEMPLATES
#
# TEMPLATES is one template or a comma-separated list. PROBLEMS (a
# comma-separated list of suite names) restricts the suite; CUBIN_CACHE keeps
# compiled kernels in that folder between runs. Summarise the outcome with
# bench/trial_statuses.py DB.
set -uo pipefail
source "$(dirname "$0")/suite_lib.sh"
b=$1
shapes=$2
db=$3
templates=$4
work=$(mktemp -d)

start_evotuned "$b" "$work" "$db" "$work/log"
pid=$EVOTUNED_PID
trap 'kill -TERM $pid; wait $pid' EXIT
suite_problems "$shapes" "${PROBLEMS:-}" >"$work/problems"
while read -r name flags; do
  for template in ${templates//,/ }; do
    start=$(date +%s)
    job=$("$b/run" evotune submit --template_name="$template" $flags \
      --strategy=exhaustive --max_trials=100000) || continue
    last=$("$b/run" evotune watch "$job" | tail -1)
    echo "$name $template ($(( $(date +%s) - start )) s): $last"
  done
done <"$work/problems"
