#!/usr/bin/env bash
# Runs the evaluator's small-problem test (dense problems and varlen,
# KV-cache and paged batches of mixed lengths) under compute-sanitizer racecheck
# (shared-memory hazards) and memcheck (out-of-bounds and misaligned
# accesses), failing on any report; first checks that racecheck reports a
# planted race, so a sanitizer that sees nothing cannot pass. Exits 77 (skipped) without a CUDA device
# or without compute-sanitizer.
#   sanitizer_test.sh CUDA_EVALUATOR_TEST
set -uo pipefail
test_bin=$1
sanitizer=$(command -v compute-sanitizer ||
  echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
if [ ! -x "$sanitizer" ]; then
  echo "skipped: compute-sanitizer not found"
  exit 77
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "skipped: no CUDA device"
  exit 77
fi
echo "== compute-sanitizer --tool racecheck on a planted race"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$sanitizer" --tool racecheck "$test_bin" --gtest_also_run_disabled_tests \
  --gtest_filter=CudaEvaluatorTest.DISABLED_PlantedRaceForTheSanitizer \
  >"$log" 2>&1
grep "RACECHECK SUMMARY" "$log"
if ! grep -Eq "RACECHECK SUMMARY: [1-9][0-9]* hazard" "$log"; then
  cat "$log"
  echo "FAILED: racecheck did not report the planted race"
  exit 1
fi
filter=CudaEvaluatorTest.SmallProblemsForTheSanitizers
for tool in racecheck memcheck; do
  echo "== compute-sanitizer --tool $tool"
  if ! "$sanitizer" --tool "$tool" --error-exitcode 1 "$test_bin" \
    --gtest_filter="$filter"; then
    echo "FAILED: compute-sanitizer --tool $tool reported errors"
    exit 1
  fi
done
