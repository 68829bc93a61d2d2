#!/usr/bin/env bash
# The CPU tools of bench/ that the README names, run on the recordings in
# tests/data as the README describes them: each must run to its end and
# print its summary (search_curves with few seeds, to stay quick).
#
#   bench_tools_test.sh SOURCE_DIR BIN_DIR
set -euo pipefail
src=$1
bin=$2
fail() { echo "FAIL: $*" >&2; exit 1; }

for landscape in flash_fwd decode_fwd; do
  out=$("$bin/search_curves" --seeds=2 \
    --landscape="$src/tests/data/${landscape}_landscapes_h100.csv") ||
    fail "search_curves on $landscape exited $?"
  grep -q "^bar: evolutionary median" <<<"$out" ||
    fail "search_curves on $landscape: no summary"$'\n'"$out"
  grep -q "^bar: with the model" <<<"$out" ||
    fail "search_curves on $landscape: no model summary"$'\n'"$out"
done
json=$(mktemp)
other_gpu=$(mktemp)
trap 'rm -f "$json" "$other_gpu"' EXIT
# Its model and defaults are the recorded GPU's: a recording that does not
# give its multiprocessors is refused, and so is training with another GPU's.
flash="$src/tests/data/flash_fwd_landscapes_h100.csv"
grep -v '^# multiprocessors:' "$flash" >"$other_gpu"
if out=$("$bin/search_curves" --seeds=1 --landscape="$other_gpu" 2>&1); then
  fail "search_curves took a recording without its multiprocessors"
fi
grep -q "does not give the GPU's multiprocessors" <<<"$out" ||
  fail "search_curves refused a recording without saying why: $out"
sed 's/^# multiprocessors: 132$/# multiprocessors: 58/' "$flash" >"$other_gpu"
if out=$("$bin/search_curves" --seeds=1 --landscape="$flash" \
  --train_with="$other_gpu" 2>&1); then
  fail "search_curves trained with another GPU's recording"
fi
grep -q "were recorded on different GPUs" <<<"$out" ||
  fail "search_curves refused another GPU's recording without saying why: $out"
out=$("$bin/transfer_loo" \
  --landscapes="$src/tests/data/flash_fwd_landscapes_h100.csv" \
  --rounds=50 --json="$json") || fail "transfer_loo exited $?"
python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$json" ||
  fail "transfer_loo wrote no JSON"
echo "$out" | tail -3
# The coordinator bench: stand-in workers finish every trial of its searches.
out=$("$src/bench/coordinator.sh" "$bin" --workers=8 --jobs=2 --rounds=2 \
  --trials=30) || fail "coordinator.sh exited $?"
python3 -c '
import json, sys
r = json.loads(sys.argv[1])["result"]
assert r["trials"] == 120 and r["completions_per_s"] > 0, r' "$out" ||
  fail "coordinator.sh: $out"
# The several-GPU bench with stand-in workers: both runs, every job whole.
out=$(TRIALS=8 "$src/bench/multi_gpu.sh" "$bin" 2 --evaluator=synthetic \
  --synthetic_delay_ms=5) || fail "multi_gpu.sh exited $?"
[ "$(grep -c '"summary"' <<<"$out")" = 2 ] && [ "$(grep -c '"trials": 8' <<<"$out")" = 6 ] ||
  fail "multi_gpu.sh: $out"
echo "PASS"
