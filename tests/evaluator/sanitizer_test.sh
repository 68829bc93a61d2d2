#!/usr/bin/env bash
# Runs the evaluator's small-problem test under compute-sanitizer racecheck
# (shared-memory hazards) and memcheck (out-of-bounds and misaligned
# accesses), failing on any report. Exits 77 (skipped) without a CUDA device
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
filter=CudaEvaluatorTest.SmallProblemsForTheSanitizers
for tool in racecheck memcheck; do
  echo "== compute-sanitizer --tool $tool"
  if ! "$sanitizer" --tool "$tool" --error-exitcode 1 "$test_bin" \
    --gtest_filter="$filter"; then
    echo "FAILED: compute-sanitizer --tool $tool reported errors"
    exit 1
  fi
done
