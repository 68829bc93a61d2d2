#!/usr/bin/env bash
# End to end: evotuned on a temporary directory and a free port, driven by the
# evotune CLI. Submits and watches a job to completion, queries the best
# config, then kills the daemon with SIGKILL in the middle of a second job,
# restarts it and checks that the job finishes with no stored trial lost or
# measured again.
#
#   daemon_cli_test.sh EVOTUNED EVOTUNE
set -euo pipefail
evotuned=$1
evotune=$2
work=$(mktemp -d)
daemon_pid=""
cleanup() {
  [ -n "$daemon_pid" ] && kill -9 "$daemon_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; echo "--- daemon log" >&2; cat "$work"/daemon*.log >&2 || true; exit 1; }

# --help: exit 0, the command table, no build-machine paths.
for bin in "$evotuned" "$evotune" "$(dirname "$evotuned")/evotune-worker"; do
  "$bin" --help >"$work/help.txt" || fail "$bin --help exited non-zero"
  grep -q -- "--token" "$work/help.txt" || fail "$bin --help lists no flags"
  ! grep -q "\.cc" "$work/help.txt" || fail "$bin --help names source files"
done
"$evotune" --help | grep "evotune \[flags\] best" >/dev/null ||
  fail "evotune --help has no command list"
# A bad flag: exit status 2, the flag named, no store created.
if "$evotuned" --db="$work/bad.db" --confirm_turns=-1 2>"$work/err"; then
  fail "evotuned accepted --confirm_turns=-1"
else
  [ $? = 2 ] || fail "--confirm_turns=-1: exit status not 2"
fi
grep -q -- "--confirm_turns must be 0 to 1000, got -1" "$work/err" ||
  fail "--confirm_turns=-1: $(cat "$work/err")"
[ ! -e "$work/bad.db" ] || fail "a refused start created the store"

start_daemon() {  # start_daemon LOGNAME DELAY_MS
  rm -f "$work/port"
  "$evotuned" --db="$work/evotune.db" --listen=127.0.0.1:0 \
    --port_file="$work/port" --evaluator=synthetic \
    --synthetic_delay_ms="$2" --synthetic_log="$work/evaluations.log" \
    --token=e2e-token 2>"$work/$1.log" &
  daemon_pid=$!
  for _ in $(seq 600); do
    [ -s "$work/port" ] && break
    sleep 0.1
  done
  [ -s "$work/port" ] || fail "daemon did not start"
  address=127.0.0.1:$(cat "$work/port")
}

cli() { "$evotune" --address="$address" --token=e2e-token "$@"; }
sql() { sqlite3 "$work/evotune.db" "$1"; }

# --- 1. submit, watch to completion, query best.
start_daemon daemon1 5
job=$(cli submit --template_name=naive --max_trials=12 --seed=1)
[[ $job =~ ^j[0-9a-f]{12}$ ]] || fail "bad job id '$job'"
cli watch "$job" >"$work/watch1.out" || fail "watch exited non-zero"
grep -q "succeeded: 12 trials" "$work/watch1.out" || fail "watch summary: $(tail -1 "$work/watch1.out")"
cli best --template_name=naive --k=3 >"$work/best.out"
grep -q "exact match" "$work/best.out" || fail "best: $(cat "$work/best.out")"
[ "$(grep -c '^[123] ' "$work/best.out")" = 3 ] || fail "best rows: $(cat "$work/best.out")"
cli --json best --k=1 | grep '"median_us"' >/dev/null || fail "best --json"
cli bench --template_name=naive --config=KV_TILE=64,WARPS=4 >"$work/bench.out" || true
grep -q "^trial .*measured now" "$work/bench.out" || grep -q "^trial .*from the store" "$work/bench.out" ||
  fail "bench: $(cat "$work/bench.out")"
# Errors are one line and a non-zero exit.
if cli submit --template_name=naive --head_dim=40 2>"$work/err"; then fail "bad submit accepted"; fi
[ "$(wc -l <"$work/err")" = 1 ] && grep -q "problem.head_dim" "$work/err" || fail "error: $(cat "$work/err")"
if "$evotune" --address="$address" jobs 2>"$work/err"; then fail "call without token accepted"; fi
grep -q "bearer token" "$work/err" || fail "auth error: $(cat "$work/err")"
if cli cancel "$job" 2>"$work/err"; then fail "cancel of a finished job accepted"; fi
grep -q "already succeeded" "$work/err" || fail "cancel error: $(cat "$work/err")"
# Tune on miss: an untuned problem is answered at once and tuned behind.
cli best --template_name=naive --seq_q=384 --tune_on_miss=yes >"$work/miss.out" ||
  fail "best --tune_on_miss: $(cat "$work/miss.out")"
grep -q "^tuning this problem in the background as job j" "$work/miss.out" ||
  fail "best --tune_on_miss: $(cat "$work/miss.out")"
if cli best --tune_on_miss=maybe 2>"$work/err"; then fail "--tune_on_miss=maybe accepted"; fi
grep -q "^evotune: --tune_on_miss: yes or no" "$work/err" || fail "tune error: $(cat "$work/err")"
# Strategy options: listed by --help, stored with the job, checked.
"$evotune" --help >"$work/help.txt"
grep -q "^      patience (1..1000, default 8)" "$work/help.txt" ||
  fail "evotune --help lists no strategy options"
cli submit --template_name=naive --seq_q=256 --max_trials=40 \
  --strategy_options=patience=1,population=4 --watch >"$work/submit3.out" ||
  fail "submit with options: $(tail -1 "$work/submit3.out")"
job3=$(head -1 "$work/submit3.out")
cli job "$job3" | grep "^strategy  evolutionary (seed 1, .*patience=1, population=4" >/dev/null ||
  fail "job shows no options: $(cli job "$job3")"
if cli submit --template_name=naive --strategy_options=patience=0 2>"$work/err"; then
  fail "an option out of range accepted"
fi
grep -q "strategy_options.patience: must be a whole number in \[1, 1000\], got 0" "$work/err" ||
  fail "option error: $(cat "$work/err")"
if cli submit --template_name=naive --strategy_options=patience 2>"$work/err"; then
  fail "a malformed option accepted"
fi
grep -q "^evotune: --strategy_options: \"patience\" is not NAME=number" "$work/err" ||
  fail "option error: $(cat "$work/err")"

# --- 2. kill -9 in the middle of a job, restart, finish.
kill -TERM "$daemon_pid"
wait "$daemon_pid" || fail "SIGTERM shutdown exited non-zero"
start_daemon daemon2 100
problem=b1_h8_kv8_q1024_k1024_d64_full_fp16_bhsd
job2=$(cli submit --template_name=naive --seq_q=1024 --max_trials=25 --seed=2)
for _ in $(seq 300); do
  done_now=$(sql "SELECT trials_done FROM jobs WHERE id='$job2'")
  [ "$done_now" -ge 8 ] && break
  sleep 0.05
done
kill -9 "$daemon_pid"
wait "$daemon_pid" 2>/dev/null || true
daemon_pid=""
stored=$(sql "SELECT t.id || ' ' || t.config_key FROM job_trials jt JOIN trials t ON t.id = jt.trial_id WHERE jt.job_id='$job2' ORDER BY jt.seq")
n_stored=$(printf '%s\n' "$stored" | grep -c . || true)
[ "$n_stored" -ge 8 ] && [ "$n_stored" -lt 25 ] || fail "killed after $n_stored trials, wanted a job in progress"
evaluated_before=$(wc -l <"$work/evaluations.log")

start_daemon daemon3 5
cli watch "$job2" >"$work/watch2.out" || fail "watch after restart: $(tail -2 "$work/watch2.out")"
grep -q "succeeded: 25 trials" "$work/watch2.out" || fail "resumed job: $(tail -1 "$work/watch2.out")"

# Every trial stored before the kill is still there, under the same id and
# sequence number, and none was measured again after the restart.
after=$(sql "SELECT t.id || ' ' || t.config_key FROM job_trials jt JOIN trials t ON t.id = jt.trial_id WHERE jt.job_id='$job2' ORDER BY jt.seq")
[ "$(printf '%s\n' "$after" | head -n "$n_stored")" = "$stored" ] || fail "stored trials changed across the restart"
[ "$(sql "SELECT COUNT(*), COUNT(DISTINCT trial_id), MIN(seq), MAX(seq) FROM job_trials WHERE job_id='$job2'")" = "25|25|1|25" ] ||
  fail "job events not 1..25 over distinct trials"
tail -n +"$((evaluated_before + 1))" "$work/evaluations.log" | grep " $problem " | awk '{print $3}' | sort >"$work/measured_after"
printf '%s\n' "$stored" | awk '{print $2}' | sort >"$work/stored_before"
# Once the search ended, its five fastest were timed again together (the
# confirmation, through a worker); nothing else was measured again.
sql "SELECT t.config_key FROM job_trials jt JOIN trials t ON t.id = jt.trial_id WHERE jt.job_id='$job2' AND t.timed_against = 4" | sort >"$work/confirmed"
[ "$(wc -l <"$work/confirmed")" = 5 ] || fail "confirmed: $(cat "$work/confirmed")"
again=$(comm -12 "$work/measured_after" "$work/stored_before" | comm -23 - "$work/confirmed")
[ -z "$again" ] || fail "measured again after restart: $again"
[ "$(sql "SELECT COUNT(*) FROM trials t JOIN problems p ON p.id = t.problem_id WHERE p.key='$problem'")" = 25 ] ||
  fail "trials of the problem are not exactly 25"
cli jobs --state=succeeded | grep "$job2" >/dev/null || fail "jobs --state"
kill -TERM "$daemon_pid"
wait "$daemon_pid" || fail "SIGTERM shutdown exited non-zero"
daemon_pid=""

# --- 3. simulation mode: a search over a landscape recorded on the H100.
landscape=$(dirname "$0")/../data/flash_fwd_landscapes_h100.csv
rm -f "$work/port"
"$evotuned" --db="$work/sim.db" --listen=127.0.0.1:0 --port_file="$work/port" \
  --simulate="$landscape" 2>"$work/daemon-sim.log" &
daemon_pid=$!
for _ in $(seq 600); do [ -s "$work/port" ] && break; sleep 0.1; done
address=127.0.0.1:$(cat "$work/port")
"$evotune" --address="$address" submit --template_name=flash_fwd --max_trials=30 \
  --watch >"$work/sim.out" || fail "simulated search: $(tail -2 "$work/sim.out")"
# Its report: one HTML page, plots of every trial, nothing to fetch.
"$evotune" --address="$address" report "$(head -1 "$work/sim.out")" \
  --output="$work/report.html" >/dev/null || fail "report failed"
[ "$(grep -c '<svg ' "$work/report.html")" -ge 2 ] || fail "report has no plots"
[ "$(grep -c 'class="trial"><title>#' "$work/report.html")" -ge 20 ] ||
  fail "report plots fewer trials than the search ran"
! grep -q "<script" "$work/report.html" || fail "report has a script"
# Beside a comparison run with SDPA: the run's rows for the job's problem.
results=$(dirname "$0")/../../bench/results
"$evotune" --address="$address" report "$(head -1 "$work/sim.out")" \
  --output="$work/report.html" \
  --compare="$results/2026-11-23_h100_6d9dd1b_flash-fwd-tma-snake-splits.json" \
  >/dev/null || fail "report --compare failed"
grep -q "Beside PyTorch SDPA" "$work/report.html" || fail "report has no comparison"
# A run without the problem is refused, naming the flag and what it holds.
! "$evotune" --address="$address" report "$(head -1 "$work/sim.out")" \
  --output="$work/report2.html" \
  --compare="$results/2026-11-23_h100_59e0190_decode-long-exhaustive-batch-d128.json" \
  2>"$work/compare.err" || fail "report --compare took a run without the problem"
grep -q "^evotune: --compare: .*no result for the job's problem .*it holds: b1_h64" \
  "$work/compare.err" || fail "report --compare error: $(cat "$work/compare.err")"
[ ! -e "$work/report2.html" ] || fail "a refused report wrote a file"
# Export: the recorded H100's best seed kernel and, for a problem never
# tuned, the defaults of the template that suits it best on the H100
# (flash_fwd_tma, never tuned here), compiled for sm_90a, in one bundle;
# nothing written when a problem is bad.
"$evotune" --address="$address" export \
  --problems=b1_h8_kv8_q512_k512_d64_full_fp16_bhsd,b2_h8_kv8_q700_k700_d64_full_fp16_bhsd \
  --output="$work/kernels.evtb" >"$work/export.out" 2>"$work/export.err" ||
  fail "export: $(cat "$work/export.err")"
grep -q "^\[1/2\] .*flash_fwd .*(tuned, .* us), sm_90a" "$work/export.err" ||
  fail "export progress: $(cat "$work/export.err")"
grep -q "^\[2/2\] .*flash_fwd_tma .*(template default, not measured), sm_90a" \
  "$work/export.err" || fail "export progress: $(cat "$work/export.err")"
# Asked of the tuned template, the same problem gets transferred configs.
"$evotune" --address="$address" export --template_name=flash_fwd \
  --problems=b2_h8_kv8_q700_k700_d64_full_fp16_bhsd \
  --output="$work/flash.evtb" >/dev/null 2>"$work/export.err" ||
  fail "export --template_name: $(cat "$work/export.err")"
grep -q "^\[1/1\] .*flash_fwd .*transferred from" "$work/export.err" ||
  fail "export progress: $(cat "$work/export.err")"
[ "$(cat "$work/export.out")" = "$work/kernels.evtb" ] && [ -s "$work/kernels.evtb" ] ||
  fail "export wrote no bundle"
! "$evotune" --address="$address" export --problems=b1_h8_kv3_q5_k5_d64_full_fp16_bhsd \
  --output="$work/bad.evtb" 2>"$work/err" || fail "export took a bad problem"
grep -q "problem.kv_heads" "$work/err" || fail "export error: $(cat "$work/err")"
[ ! -e "$work/bad.evtb" ] || fail "a refused export wrote a file"
# The exhaustive optimum of the seed problem in the recording.
optimum=$(grep '^seed,' "$landscape" | grep ',ok,' | awk -F'",' '{print $2}' |
  cut -d, -f2 | sort -g | head -1)
found=$(tail -1 "$work/sim.out" | sed -n 's/.*best \([0-9.]*\) us.*/\1/p')
awk -v f="$found" -v o="$optimum" 'BEGIN { exit !(f <= o * 1.05) }' ||
  fail "simulated search found $found us, optimum $optimum us"
# A search stops when it converges, before its trial budget.
"$evotune" --address="$address" submit --template_name=flash_fwd --causal \
  --max_trials=100000 --watch >"$work/sim2.out" || fail "converging search failed"
trials=$(tail -1 "$work/sim2.out" | sed -n 's/.*succeeded: \([0-9]*\) trials.*/\1/p')
[ -n "$trials" ] && [ "$trials" -lt 144 ] ||
  fail "search did not stop on convergence: $(tail -1 "$work/sim2.out")"
if "$evotune" --address="$address" submit --template_name=naive 2>"$work/err"; then
  fail "naive accepted by a flash_fwd replay"
fi
grep -q "template_name: this daemon replays" "$work/err" || fail "replay error: $(cat "$work/err")"
# A problem the recording does not hold is refused, not "searched" in 0 trials.
if "$evotune" --address="$address" submit --template_name=flash_fwd \
  --seq_q=333 2>"$work/err"; then
  fail "a problem outside the recording was accepted"
fi
grep -q "problem: this daemon replays a recorded landscape.*q333.*; it holds .*b1_h8_kv8_q512_k512_d64_full_fp16_bhsd" "$work/err" ||
  fail "unrecorded problem error: $(cat "$work/err")"
echo "e2e: 3 passed, 0 failed"
