#!/usr/bin/env bash
# GPU end to end (ctest label gpu; exits 77, "skipped", without a GPU): a
# real flash_fwd search on the seed problem while the test-only fault_test
# template's kernels run on the same worker, one writing through an invalid
# address and one spinning forever. The daemon stays up, those trials are
# recorded as crashed and timeout, the search finishes with a validated best
# config, and the worker comes back after each fault (times printed).
#
#   gpu_faults_test.sh EVOTUNED EVOTUNE   (evotune-worker next to EVOTUNED)
set -euo pipefail
evotuned=$1
evotune=$2
worker=$(dirname "$evotuned")/evotune-worker
"$worker" --probe >/dev/null 2>&1 || { echo "no GPU: skipped"; exit 77; }
work=$(mktemp -d)
daemon_pid=""
cleanup() {
  [ -n "$daemon_pid" ] && kill -9 "$daemon_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; tail -60 "$work/daemon.log" >&2; exit 1; }
sql() { sqlite3 "$work/evotune.db" "$1" 2>/dev/null || python3 -c "import sqlite3,sys; [print('|'.join(map(str,r))) for r in sqlite3.connect(sys.argv[1]).execute(sys.argv[2])]" "$work/evotune.db" "$1"; }

export EVOTUNE_TEST_TEMPLATES=1
EVOTUNE_TEST_TEMPLATES=1 "$evotuned" --db="$work/evotune.db" --listen=127.0.0.1:0 \
  --port_file="$work/port" --workers=1 --cache_dir="$work/cubins" \
  --trial_slack_s=5 2>"$work/daemon.log" &
daemon_pid=$!
for _ in $(seq 600); do [ -s "$work/port" ] && break; sleep 0.1; done
[ -s "$work/port" ] || fail "daemon did not start"
cli() { "$evotune" --address="127.0.0.1:$(cat "$work/port")" "$@"; }

search=$(cli submit --template_name=flash_fwd --max_trials=24 --seed=3)
# Let a few real trials finish first: deadlines follow the slowest recent one.
for _ in $(seq 600); do
  [ "$(sql "SELECT trials_done FROM jobs WHERE id='$search'")" -ge 3 ] && break
  sleep 0.1
done
faults=$(cli submit --template_name=fault_test --strategy=exhaustive --max_trials=2)
cli watch "$faults" >"$work/faults.out" || fail "fault job: $(tail -2 "$work/faults.out")"
cli watch "$search" >"$work/search.out" || fail "search: $(tail -2 "$work/search.out")"
kill -0 "$daemon_pid" || fail "daemon died"
grep -q "succeeded: 24 trials" "$work/search.out" || fail "search: $(tail -1 "$work/search.out")"
grep -q "succeeded: 2 trials" "$work/faults.out" || fail "faults: $(tail -1 "$work/faults.out")"
status() { sql "SELECT status || ' ' || error FROM trials WHERE config_key='FAULT=$1'"; }
status 1 | grep "^6 .*brought down 2 workers" >/dev/null || fail "FAULT=1: $(status 1)"
status 2 | grep "^5 " >/dev/null || fail "FAULT=2: $(status 2)"
# The best config is an OK trial, validated against the reference on the GPU.
cli best --template_name=flash_fwd >"$work/best.out" || fail "best"
cat "$work/best.out"
# The worker serves again after the faults.
best=$(sql "SELECT config_key FROM trials WHERE status=1 AND config_key LIKE 'BLOCK_M=%' ORDER BY median_us LIMIT 1")
cli bench --template_name=flash_fwd --config="$best" --seq_q=1024 >"$work/bench.out" 2>&1 || fail "bench after faults: $(cat "$work/bench.out")"
echo "--- fault trials"
status 1
status 2
echo "--- worker recovery"
grep -E "ready again|killing worker|timed out|dropped|restarting" "$work/daemon.log" || true
echo "gpu faults e2e: passed"
