#!/usr/bin/env bash
# End to end: crash isolation with stand-in workers (the synthetic evaluator
# dies or hangs on command, as a faulting or endless kernel would).
#   1. evotuned supervises two local workers; an exhaustive search meets
#      configs that kill their worker every time, once, or hang. The daemon
#      stays up, the search finishes, those trials are recorded as crashed
#      (after two workers went down) and timeout, the flaky one is measured.
#   2. A worker started on its own outlives a kill -9 of evotuned, rejoins
#      the restarted daemon and the job finishes.
#   3. A worker or CLI whose token the daemon refuses stops at once with one
#      line that says so, instead of retrying; one it accepts has its
#      device's limits recorded in the store as it registers.
#
#   worker_faults_test.sh EVOTUNED EVOTUNE EVOTUNE_WORKER
set -euo pipefail
evotuned=$1
evotune=$2
worker=$3
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; for f in "$work"/*.log; do echo "--- $f" >&2; tail -40 "$f" >&2; done; exit 1; }
sql() { sqlite3 "$work/evotune.db" "$1"; }

start_daemon() {  # start_daemon LOGNAME LISTEN FLAGS...
  local log=$1 listen=$2
  shift 2
  rm -f "$work/port"
  "$evotuned" --db="$work/evotune.db" --listen="$listen" --port_file="$work/port" \
    --evaluator=synthetic "$@" 2>>"$work/$log.log" &
  daemon_pid=$!
  pids+=("$daemon_pid")
  for _ in $(seq 600); do [ -s "$work/port" ] && break; sleep 0.1; done
  [ -s "$work/port" ] || fail "daemon did not start"
  port=$(cat "$work/port")
}

# --- 1. Faults under a supervising daemon.
start_daemon daemon1 127.0.0.1:0 --workers=2 --synthetic_delay_ms=20 \
  --trial_slack_s=1 --lease_timeout_s=1 \
  --worker_flags="--synthetic_crash=WARPS=16 --synthetic_hang=KV_TILE=256,WARPS=1 --synthetic_flaky=KV_TILE=16 --synthetic_fault_dir=$work"
address=127.0.0.1:$port
"$evotune" --address="$address" submit --template_name=naive --strategy=exhaustive \
  --max_trials=25 --watch >"$work/watch1.out" 2>&1 || fail "search failed: $(tail -2 "$work/watch1.out")"
grep -q "succeeded: 25 trials" "$work/watch1.out" || fail "search: $(tail -1 "$work/watch1.out")"
kill -0 "$daemon_pid" || fail "daemon died"
problem=b1_h8_kv8_q512_k512_d64_full_fp16_bhsd
status_of() {  # status_of CONFIG_KEY -> status code
  sql "SELECT t.status FROM trials t JOIN problems p ON p.id = t.problem_id WHERE p.key='$problem' AND t.config_key='$1'"
}
for tile in 16 32 64 128 256; do
  [ "$(status_of "KV_TILE=$tile,WARPS=16")" = 6 ] || fail "KV_TILE=$tile,WARPS=16 not crashed: $(status_of "KV_TILE=$tile,WARPS=16")"
done
sql "SELECT error FROM trials WHERE config_key='KV_TILE=64,WARPS=16'" | grep "brought down 2 workers" >/dev/null ||
  fail "crash error: $(sql "SELECT error FROM trials WHERE config_key='KV_TILE=64,WARPS=16'")"
[ "$(status_of "KV_TILE=256,WARPS=1")" = 5 ] || fail "hang not recorded as timeout"
# Flaky configs crashed one worker each, then were measured on another.
for warps in 1 2 4 8; do
  s=$(status_of "KV_TILE=16,WARPS=$warps")
  [ "$s" = 1 ] || [ "$s" = 2 ] || [ "$s" = 4 ] || fail "flaky KV_TILE=16,WARPS=$warps: status $s"
done
[ "$(ls "$work"/flaky-* | wc -l)" -ge 4 ] || fail "flaky configs never crashed"
grep -q "ready again" "$work/daemon1.log" || fail "no worker restart logged"
grep -q "killing worker" "$work/daemon1.log" || fail "hung worker not killed"
# The daemon still answers and its workers are back.
"$evotune" --address="$address" best --template_name=naive >/dev/null || fail "best after faults"
"$evotune" --address="$address" bench --template_name=naive --config=KV_TILE=32,WARPS=2 \
  --seq_q=256 --seq_k=256 >"$work/bench.out" || fail "bench after faults: $(cat "$work/bench.out")"
kill -TERM "$daemon_pid"
wait "$daemon_pid" || fail "SIGTERM shutdown exited non-zero"

# --- 2. A worker of its own outlives the daemon and rejoins.
start_daemon daemon2 127.0.0.1:0 --workers=0
address=127.0.0.1:$port
"$worker" --daemon="$address" --evaluator=synthetic --synthetic_delay_ms=150 \
  --name=remote-1 2>"$work/worker.log" &
worker_pid=$!
pids+=("$worker_pid")
job=$("$evotune" --address="$address" submit --template_name=naive --seq_q=2048 --max_trials=12)
for _ in $(seq 200); do
  [ "$(sql "SELECT trials_done FROM jobs WHERE id='$job'")" -ge 3 ] && break
  sleep 0.05
done
kill -9 "$daemon_pid"
wait "$daemon_pid" 2>/dev/null || true
sleep 1
kill -0 "$worker_pid" || fail "the worker died with the daemon"
start_daemon daemon3 "$address" --workers=0
"$evotune" --address="$address" watch "$job" >"$work/watch2.out" || fail "watch: $(tail -2 "$work/watch2.out")"
grep -q "succeeded: 12 trials" "$work/watch2.out" || fail "resumed job: $(tail -1 "$work/watch2.out")"
kill -0 "$worker_pid" || fail "the worker did not survive"
[ "$(grep -c "registered with evotuned" "$work/worker.log")" -ge 2 ] || fail "worker did not register again"
kill -TERM "$daemon_pid" "$worker_pid"
wait "$daemon_pid" || fail "SIGTERM shutdown exited non-zero"
# A store whose device has no limits (as before schema 8) gets them when one
# of its workers registers, with no job running.
sql "UPDATE devices SET smem_per_block_bytes = 0, max_threads_per_block = 0"

# --- 3. A refused token is final.
start_daemon daemon4 127.0.0.1:0 --workers=0 --token=right-token
address=127.0.0.1:$port
start=$(date +%s)
status=0
timeout 20 "$worker" --daemon="$address" --evaluator=synthetic --token=wrong-token \
  --name=refused 2>"$work/refused.log" || status=$?
[ "$status" = 6 ] || fail "worker with a wrong token exited with $status, not 6"
[ $(( $(date +%s) - start )) -le 10 ] || fail "worker with a wrong token kept retrying"
grep -q "refused this worker: authorization: wrong bearer token" "$work/refused.log" ||
  fail "refused worker's message: $(cat "$work/refused.log")"
status=0
"$evotune" --address="$address" --token=wrong-token jobs >"$work/cli.out" 2>&1 || status=$?
[ "$status" != 0 ] || fail "CLI with a wrong token succeeded"
[ "$(wc -l <"$work/cli.out")" = 1 ] && grep -q "refused the request" "$work/cli.out" ||
  fail "CLI with a wrong token: $(cat "$work/cli.out")"
EVOTUNE_TOKEN=right-token "$evotune" --address="$address" jobs >/dev/null ||
  fail "CLI with the right token"
[ "$(sql "SELECT MAX(smem_per_block_bytes) FROM devices")" = 0 ] || fail "limits not cleared"
EVOTUNE_TOKEN=right-token "$worker" --daemon="$address" --evaluator=synthetic \
  --name=limits 2>"$work/limits.log" &
pids+=($!)
for _ in $(seq 600); do
  [ "$(sql "SELECT MAX(smem_per_block_bytes) FROM devices")" = 102400 ] && break
  sleep 0.1
done
[ "$(sql "SELECT MAX(smem_per_block_bytes) FROM devices")" = 102400 ] ||
  fail "a registered worker's limits were not recorded: $(sql "SELECT * FROM devices")"
kill -TERM "$daemon_pid"
wait "$daemon_pid" || fail "SIGTERM shutdown exited non-zero"
echo "worker faults e2e: 3 passed, 0 failed"
