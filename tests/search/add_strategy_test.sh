#!/usr/bin/env bash
# docs/extending.md's "Add a strategy", end to end (ctest label "build"): on a copy of
# the source tree, runs step 1 exactly as docs/extending.md writes it, builds, and
# checks that the new strategy is listed, runs a job and passes its tests;
# then that a file without its spec fails the build clearly, and that
# removing the files removes the strategy from the rebuilt binary.
#
#   add_strategy_test.sh SOURCE_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
work=$(mktemp -d)
pid=""
cleanup() {
  [ -n "$pid" ] && { kill -9 "$pid"; wait "$pid"; } 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

tar -C "$src" --exclude='./build*' --exclude=./.git --exclude=./gpu -cf - . |
  tar -C "$work" -xf -
cd "$work"
# Step 1: the shell block of docs/extending.md's "Add a strategy" section.
awk '/^## Add a strategy/ {on = 1; next} /^## / {on = 0} on' docs/extending.md |
  awk '/^ *```sh/ {c = 1; next} /^ *```/ {c = 0} c' >step1.sh
[ -s step1.sh ] || fail "docs/extending.md has no shell block under 'Add a strategy'"
bash -e step1.sh
[ -f tuner/search/strategies/my_search_strategy.cc ] || fail "no my_search_strategy.cc"
[ -f tests/search/strategies/my_search_strategy_test.cc ] || fail "no test"

targets="evotune evotuned evotune-worker strategy_registry_test my_search_strategy_test"
build() { cmake --build build --target $targets >build.log 2>&1; }
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Debug >configure.log 2>&1 ||
  { cat configure.log; fail "configure"; }
build || { tail -30 build.log; fail "build with the new strategy"; }
build/bin/evotune --help >help.txt
grep -q "^  my_search: " help.txt || fail "evotune --help lacks my_search"
build/bin/my_search_strategy_test >test.log 2>&1 || { cat test.log; fail "its own test"; }
# The contract of every strategy; the docs check fails until step 2's
# list is pasted into docs/results.md, and prints that list with the new one.
build/bin/strategy_registry_test --gtest_filter=-*Docs* >test.log 2>&1 ||
  { cat test.log; fail "strategy_registry_test"; }
if build/bin/strategy_registry_test --gtest_filter=*Docs* >test.log 2>&1; then
  fail "the docs check passed without my_search in docs/results.md"
fi
grep -q '^- `my_search`: ' test.log ||
  { cat test.log; fail "the docs check did not print the list to paste"; }

# A job with it, on a daemon with the synthetic evaluator.
build/bin/evotuned --db="$work/db" --listen=127.0.0.1:0 --port_file="$work/port" \
  --evaluator=synthetic 2>"$work/daemon.log" &
pid=$!
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
export EVOTUNE_ADDRESS=127.0.0.1:$(cat "$work/port")
build/bin/evotune submit --template_name=naive --strategy=my_search \
  --max_trials=10 --watch >job.out 2>&1 || { cat job.out; fail "a job with my_search"; }
grep -q "succeeded: 10 trials" job.out || fail "job: $(tail -1 job.out)"
kill -TERM "$pid"
wait "$pid" || true
pid=""

# A strategy file without its spec fails the build, saying what is missing.
echo "// nothing yet" >tuner/search/strategies/half_done_strategy.cc
if build; then fail "a strategy file without a spec built"; fi
grep -q "half_done_strategy.cc must define" build.log ||
  { tail -30 build.log; fail "no clear message for the missing spec"; }
rm tuner/search/strategies/half_done_strategy.cc

# Removing the files removes the strategy.
rm tuner/search/strategies/my_search_strategy.* \
  tests/search/strategies/my_search_strategy_test.cc
targets="evotune"
build || { tail -30 build.log; fail "build after removing the strategy"; }
build/bin/evotune --help >help.txt
if grep -q "my_search" help.txt; then fail "my_search still listed"; fi
echo "add a strategy: passed"
