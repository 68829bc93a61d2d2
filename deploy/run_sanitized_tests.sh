#!/usr/bin/env bash
# Builds evotune with AddressSanitizer, LeakSanitizer and
# UndefinedBehaviorSanitizer (build-asan/, Debug) and runs every test that
# needs no GPU under them (but the "build" one, which builds a copy of the
# tree and runs none of its code, and the ptxas sweeps, which compile every
# config of a space to count spills: the same counts in any build, and
# their harness runs sanitized in the other NvrtcCompilerTests); any report
# fails its test. GPU kernels have their own checker (compute-sanitizer,
# the cuda_sanitizers test).
#
#   deploy/run_sanitized_tests.sh [ctest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
./deploy/build.sh build-asan -DCMAKE_BUILD_TYPE=Debug -DEVOTUNE_SANITIZE=address
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
export LSAN_OPTIONS=suppressions=$PWD/deploy/lsan.supp
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
sweeps='NvrtcCompilerTest\.(EveryFeasibleConfigCompilesForEveryTarget'
sweeps+='|FlashFwdTmaConfigsDoNotSpill|DecodeFwdFp8KvConfigsDoNotSpill'
sweeps+='|FlashFwdFp8ConfigsDoNotSpill'
sweeps+='|ServedDefaultsDoNotSpillAtAnyHeadDim)$'
ctest --test-dir build-asan --output-on-failure -j"$(nproc)" -LE "gpu|build" \
  -E "$sweeps" "$@"
